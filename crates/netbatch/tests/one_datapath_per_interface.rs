//! One datapath per interface: a second `netbatch run` on an interface that a running one
//! serves refuses to start, naming the interface, the running one's process id and its
//! configuration, whether the second has another control socket, another metrics port or
//! neither; once the first has stopped (even killed), the interface is free again.
//!
//! Namespace `nbone<pid>` with a veth pair (`nbo<pid>a`/`b`), made and removed by the test;
//! needs root (`netbatch_testkit::root`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test's namespace and veth pair, removed when dropped (failures included).
struct Net {
    ns: String,
    a: String,
}

impl Net {
    fn new() -> Self {
        let pid = std::process::id() % 100_000;
        let (ns, a, b) = (
            format!("nbone{pid}"),
            format!("nbo{pid:05}a"),
            format!("nbo{pid:05}b"),
        );
        let net = Self { ns, a };
        for cmd in [
            format!("ip netns add {}", net.ns),
            format!(
                "ip -n {} link add {} type veth peer name {b}",
                net.ns, net.a
            ),
            format!("ip -n {} link set {} up", net.ns, net.a),
            format!("ip -n {} link set {b} up", net.ns),
        ] {
            let o = Command::new("sh")
                .args(["-c", &cmd])
                .output()
                .expect("sh runs");
            assert!(
                o.status.success(),
                "{cmd}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// A one-port configuration on `iface`: with a control socket at `socket` or none, and a
/// metrics endpoint on `metrics` or none.
fn config(iface: &str, socket: Option<&str>, metrics: Option<&str>) -> String {
    let mut c = format!(
        r#"
[datapath]
workers = 1

[[port]]
name = "lan"
kind = "af_packet"
interface = "{iface}"
addresses = ["192.0.2.1/24"]

[control]
"#
    );
    match socket {
        Some(s) => c += &format!("socket = \"{s}\"\n"),
        None => c += "enabled = false\n",
    }
    if let Some(m) = metrics {
        c += &format!("\n[metrics]\nlisten = \"{m}\"\n");
    }
    c
}

/// `netbatch run CONFIG` in the namespace.
fn run(ns: &str, config: &std::path::Path) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_netbatch"), "run"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("netbatch starts")
}

/// Waits (10 s at most) for `child` to exit; its status and standard error.
fn finish(mut child: Child) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            let o = child.wait_with_output().expect("output");
            return (o.status, String::from_utf8_lossy(&o.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "netbatch did not exit within 10 s:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills `child` when dropped (a failed assertion must not leave a router running).
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_second_datapath_on_a_served_interface_refuses_to_start() {
    if !netbatch_testkit::root("it makes a namespace and a veth pair")
        || !netbatch_testkit::tools(&[("ip", "iproute2")])
    {
        return;
    }
    let net = Net::new();
    let dir = tempfile::tempdir().expect("a directory");
    let first_cfg = dir.path().join("first.toml");
    let first_sock = dir.path().join("first.sock");
    std::fs::write(
        &first_cfg,
        config(&net.a, Some(&first_sock.display().to_string()), None),
    )
    .expect("config");
    let mut first = Running(Some(run(&net.ns, &first_cfg)));
    let pid = first.0.as_ref().map(Child::id).expect("a child");
    // Serving once its control socket exists.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !first_sock.exists() {
        if let Some(c) = first.0.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            let (_, err) = finish(first.0.take().expect("child"));
            panic!("the first netbatch exited ({st}):\n{err}");
        }
        assert!(
            Instant::now() < deadline,
            "the first netbatch did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_path = std::fs::canonicalize(&first_cfg).expect("canonical path");
    // Another control socket, another metrics port, or neither: refused all the same.
    let second_sock = dir.path().join("second.sock").display().to_string();
    for (what, cfg) in [
        (
            "another control socket",
            config(&net.a, Some(&second_sock), None),
        ),
        (
            "another metrics port",
            config(&net.a, None, Some("127.0.0.1:0")),
        ),
        ("no control socket", config(&net.a, None, None)),
    ] {
        let path = dir.path().join("second.toml");
        std::fs::write(&path, cfg).expect("config");
        let (status, err) = finish(run(&net.ns, &path));
        assert!(
            !status.success(),
            "{what}: the second netbatch started:\n{err}"
        );
        for needle in [
            format!("interface {}", net.a),
            format!("pid {pid}"),
            format!("config {}", first_path.display()),
        ] {
            assert!(err.contains(&needle), "{what}: {needle:?} not in:\n{err}");
        }
    }
    // The first is killed outright: the interface is free again at once.
    drop(first);
    let path = dir.path().join("third.toml");
    std::fs::write(&path, config(&net.a, None, None)).expect("config");
    let mut third = Running(Some(run(&net.ns, &path)));
    std::thread::sleep(Duration::from_millis(1500));
    let c = third.0.as_mut().expect("child");
    assert!(
        c.try_wait().expect("status").is_none(),
        "the interface stayed claimed after its holder died"
    );
}
