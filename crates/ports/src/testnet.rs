//! Test topology: veth pairs, bridges and network namespaces the tests create and always
//! remove (a guard deletes them on drop, panics included). Names carry the process id, so
//! concurrent test binaries do not collide; addresses are TEST-NET ranges only.
//!
//! Interface names are `nb`, a tag, the process id in five digits and a suffix (`a`/`b`
//! for the ends of a veth pair, `br` for a bridge): at most 15 bytes with tags of up to
//! four characters. Each test module has its own tag prefix, so names of different
//! modules never meet: `ap…` for af_packet, `x…` for af_xdp.

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the kernel-facing tests of this crate one at a time.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the tests may create interfaces (they print a note and pass otherwise).
pub(crate) fn is_root() -> bool {
    netbatch_testkit::root("creating interfaces")
}

/// The lock of [`serial`], if the tests may create interfaces ([`is_root`]).
pub(crate) fn serial_as_root() -> Option<MutexGuard<'static, ()>> {
    let g = serial();
    is_root().then_some(g)
}

/// Runs `ip ARGS`; returns its standard output, panicking with its errors on failure.
pub(crate) fn ip(args: &str) -> String {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("the ip tool (iproute2)");
    assert!(
        o.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The name of this process's interface `tag`, `suffix` (see the module's note).
fn link_name(tag: &str, suffix: &str) -> String {
    assert!(tag.len() <= 4, "tag {tag:?}: at most four characters");
    format!("nb{tag}{:05}{suffix}", std::process::id() % 100_000)
}

/// Deletes interface `name` (and nothing, quietly, if there is none).
fn del_link(name: &str) {
    let _ = Command::new("ip").args(["link", "del", name]).output();
}

/// Turns `dev` on, without IPv6 autoconfiguration chatter.
fn up(dev: &str) {
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
    ip(&format!("link set {dev} up"));
}

/// A veth pair `a` — `b`, both up.
pub(crate) struct Veth {
    pub(crate) a: String,
    pub(crate) b: String,
}

impl Veth {
    /// A pair named after `tag` (≤ 4 characters) and the process id, with the kernel's
    /// default number of queues.
    pub(crate) fn new(tag: &str) -> Self {
        Self::create(tag, "")
    }

    /// A pair as [`Veth::new`] makes, with `queues` receive and transmit queues on each
    /// end.
    pub(crate) fn with_queues(tag: &str, queues: u32) -> Self {
        Self::create(tag, &format!("numrxqueues {queues} numtxqueues {queues}"))
    }

    /// Creates the pair with `ip link add` options `opts` on both ends.
    fn create(tag: &str, opts: &str) -> Self {
        let (a, b) = (link_name(tag, "a"), link_name(tag, "b"));
        del_link(&a);
        ip(&format!(
            "link add {a} {opts} type veth peer name {b} {opts}"
        ));
        let v = Self { a, b };
        up(&v.a);
        up(&v.b);
        v
    }

    /// The MAC address of end `a`.
    pub(crate) fn mac_a(&self) -> String {
        std::fs::read_to_string(format!("/sys/class/net/{}/address", self.a))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The MAC addresses of ends `a` and `b`.
    pub(crate) fn macs(&self) -> ([u8; 6], [u8; 6]) {
        let mac = |dev: &str| crate::sys::mac_of(dev).expect("a veth end has a MAC");
        (mac(&self.a), mac(&self.b))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes both (and nothing if a namespace took `b` with it).
        del_link(&self.a);
    }
}

/// A bridge with no ports, up.
pub(crate) struct Bridge {
    pub(crate) name: String,
}

impl Bridge {
    /// A bridge named after `tag` (≤ 4 characters) and the process id.
    pub(crate) fn new(tag: &str) -> Self {
        let name = link_name(tag, "br");
        del_link(&name);
        ip(&format!("link add {name} type bridge"));
        let br = Self { name };
        up(&br.name);
        br
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        del_link(&self.name);
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
        let o = self.exec(cmd);
        assert!(
            o.status.success(),
            "in {}: {cmd}: {}{}",
            self.name,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Whether a shell command run in the namespace succeeds.
    pub(crate) fn succeeds(&self, cmd: &str) -> bool {
        self.exec(cmd).status.success()
    }

    fn exec(&self, cmd: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", cmd])
            .output()
            .expect("ip netns exec")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
