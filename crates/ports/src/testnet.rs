//! Test topology: veth pairs and network namespaces the tests create and always remove
//! (a guard deletes them on drop, panics included). Names carry the process id, so
//! concurrent test binaries do not collide; addresses are TEST-NET ranges only.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the kernel-facing tests of this crate one at a time.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the tests may create interfaces (they print a note and pass otherwise).
pub(crate) fn is_root() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("skipped: creating interfaces needs root");
    }
    root
}

/// Runs `ip ARGS`, panicking with its output when it fails.
pub(crate) fn ip(args: &str) {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("the ip tool (iproute2)");
    assert!(
        o.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn no_ipv6(dev: &str) {
    // No IPv6 autoconfiguration chatter on test links.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
}

/// A veth pair `a` — `b`, both up.
pub(crate) struct Veth {
    pub(crate) a: String,
    pub(crate) b: String,
}

impl Veth {
    /// A pair named after `tag` (≤ 4 characters) and the process id.
    pub(crate) fn new(tag: &str) -> Self {
        let id = std::process::id() % 100_000;
        let (a, b) = (format!("nb{tag}{id}a"), format!("nb{tag}{id}b"));
        let _ = Command::new("ip").args(["link", "del", &a]).output();
        ip(&format!("link add {a} type veth peer name {b}"));
        let v = Self { a, b };
        no_ipv6(&v.a);
        no_ipv6(&v.b);
        ip(&format!("link set {} up", v.a));
        ip(&format!("link set {} up", v.b));
        v
    }

    /// The MAC address of end `a`.
    pub(crate) fn mac_a(&self) -> String {
        std::fs::read_to_string(format!("/sys/class/net/{}/address", self.a))
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes both (and nothing if a namespace took `b` with it).
        let _ = Command::new("ip").args(["link", "del", &self.a]).output();
    }
}

/// A network namespace.
pub(crate) struct Netns {
    pub(crate) name: String,
}

impl Netns {
    /// A namespace named after `tag` and the process id.
    pub(crate) fn new(tag: &str) -> Self {
        let name = format!("nbt-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&format!("netns add {name}"));
        Self { name }
    }

    /// Moves `dev` into the namespace with address `addr`, up.
    pub(crate) fn take(&self, dev: &str, addr: &str) {
        ip(&format!("link set {dev} netns {}", self.name));
        self.run(&format!(
            "echo 1 > /proc/sys/net/ipv6/conf/{dev}/disable_ipv6; ip addr add {addr} dev {dev} && ip link set {dev} up && ip link set lo up"
        ));
    }

    /// Runs a shell command in the namespace, panicking with its output when it fails.
    pub(crate) fn run(&self, cmd: &str) -> String {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", cmd])
            .output()
            .expect("ip netns exec");
        assert!(
            o.status.success(),
            "in {}: {cmd}: {}{}",
            self.name,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
