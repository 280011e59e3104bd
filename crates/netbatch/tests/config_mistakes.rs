//! `check-config` as users run it, on configurations that can only be mistakes: every
//! mistake of a file listed with its key at once, the shipped examples, and what a
//! configuration needs of the machine (kernel interfaces that exist, with the queues and
//! kind the ports need), checked in a network namespace of the test's own when root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn netbatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netbatch"))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A directory of the test's own (named after the test), removed when dropped, whether
/// the test passes or panics.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(tag: &str) -> Self {
        Self(
            tempfile::Builder::new()
                .prefix(&format!("netbatch-config-mistakes-{tag}-"))
                .tempdir()
                .expect("temporary directory"),
        )
    }

    /// Writes `text` to `name` in the directory; its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, text).expect("file written");
        p
    }
}

fn check_config(args: &[&str], file: &Path) -> Output {
    netbatch()
        .arg("check-config")
        .args(args)
        .arg(file)
        .output()
        .expect("netbatch runs")
}

/// Asserts `out` is a refusal (status 1) whose errors include each `key: words`.
fn assert_refused(out: &Output, want: &[(&str, &str)]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for (key, words) in want {
        assert!(
            err.lines()
                .any(|l| l.trim_start().starts_with(&format!("{key}: ")) && l.contains(words)),
            "no «{key}: …{words}…» in:\n{err}"
        );
    }
    assert!(!err.contains("panicked"), "{err}");
}

/// Every mistake the file makes is listed at once, each at its key with the other party
/// named: one MAC on two ports, a MAC that is no station's, an interface address that is
/// loopback or a subnet's broadcast address, one subnet on two ports, a prefix routed
/// inline and again in a route file, a static neighbour on no subnet of its interface, an
/// app bound to an address that is no interface's, and sizes the pool cannot hold.
#[test]
fn every_mistake_of_a_file_is_listed_with_its_key() {
    let dir = Dir::new("every");
    dir.file(
        "routes.txt",
        "# upstream\n203.0.113.0/24 via 192.0.2.254\n10.1.0.0/16 via 192.0.2.254\n",
    );
    let cfg = dir.file(
        "mistakes.toml",
        r#"route_files = ["routes.txt"]
[datapath]
workers = 2
rps = "backlog"
max_backlog = 1000
[pool]
buffers = 512
cache_size = 64
[neighbour]
queue_len = 600
[[neighbour.static]]
ip = "10.9.9.9"
mac = "02:00:00:00:00:99"
dev = "eth0"

[[port]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["192.0.2.1/24", "127.0.0.1/8"]

[[port]]
name = "eth1"
mac = "02:00:00:00:00:01"
addresses = ["192.0.2.2/24"]

[[port]]
name = "eth2"
mac = "00:00:00:00:00:00"
addresses = ["198.51.100.255/24"]

[[route]]
prefix = "10.1.0.0/16"
via = "192.0.2.254"

[[app]]
kind = "udp-sink"
bind = "198.51.100.7:5001"
queue = 16
"#,
    );
    let out = check_config(&[], &cfg);
    assert_refused(
        &out,
        &[
            ("datapath.max_backlog", "more than the 512 packet buffers"),
            ("neighbour.queue_len", "more than the 512 packet buffers"),
            ("port[0].addresses[1]", "127.0.0.1 is a loopback address"),
            ("port[1].mac", "also the MAC of port[0] (eth0)"),
            (
                "port[1].addresses[0]",
                "subnet 192.0.2.0/24 is also on eth0",
            ),
            ("port[2].mac", "00:00:00:00:00:00 is no station's address"),
            (
                "port[2].addresses[0]",
                "198.51.100.255 is the broadcast address of 198.51.100.0/24",
            ),
            (
                "route_files[0]",
                "10.1.0.0/16 is routed twice: route[0] and routes.txt line 3",
            ),
            (
                "neighbour.static[0].ip",
                "10.9.9.9 is on no subnet of eth0 (192.0.2.0/24",
            ),
            (
                "app[0].bind",
                "198.51.100.7 is not an address of any interface",
            ),
        ],
    );
    // The file alone is what is wrong: --offline refuses it the same way.
    assert_refused(
        &check_config(&["--offline"], &cfg),
        &[("port[1].mac", "also the MAC of port[0] (eth0)")],
    );
}

/// IPv6 mistakes are explained at their key with the reason, inline and in a route file:
/// host bits in a prefix, a length above 128, a gateway off-link, a link-local gateway
/// without dev, a multicast gateway, a gateway of the other family (both ways), a prefix
/// routed twice, a neighbour off-link for its interface, an IPv6 address on two ports,
/// an app bound to an IPv6 address that is not ours.
#[test]
fn ipv6_mistakes_are_explained_at_their_key() {
    let dir = Dir::new("ipv6");
    dir.file(
        "routes6.txt",
        "# IPv6 and IPv4 lines\n192.0.2.128/25 dev eth0\n2001:db8:7::/48 via 2001:db8:a::fe\n\
         2001:db8:8::/48 via fe80::1\n",
    );
    let cfg = dir.file(
        "mistakes6.toml",
        r#"route_files = ["routes6.txt"]
[[port]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["192.0.2.1/24", "2001:db8:a::1/64"]

[[port]]
name = "eth1"
mac = "02:00:00:00:00:02"
addresses = ["198.51.100.1/24", "2001:db8:a::1/64"]

[[route]]
prefix = "2001:db8::1/32"
dev = "eth0"
[[route]]
prefix = "2001:db8:1::/130"
dev = "eth0"
[[route]]
prefix = "2001:db8:2::/48"
via = "2001:db8:99::1"
[[route]]
prefix = "2001:db8:3::/48"
via = "fe80::1"
[[route]]
prefix = "2001:db8:4::/48"
via = "ff02::1:2"
dev = "eth0"
[[route]]
prefix = "2001:db8:5::/48"
via = "192.0.2.254"
[[route]]
prefix = "10.5.0.0/16"
via = "2001:db8:a::fe"
[[route]]
prefix = "2001:db8:7::/48"
kind = "blackhole"

[[neighbour.static]]
ip = "2001:db8:b::9"
mac = "02:00:00:00:00:99"
dev = "eth0"

[[app]]
kind = "udp-sink"
bind = "[2001:db8:a::2]:5001"
"#,
    );
    assert_refused(
        &check_config(&["--offline"], &cfg),
        &[
            (
                "port[1].addresses[1]",
                "2001:db8:a::1 is configured twice: it is also port[0].addresses[1] (eth0)",
            ),
            (
                "route[0].prefix",
                "'2001:db8::1/32' has host bits set beyond its length",
            ),
            ("route[1].prefix", "prefix length 130 is above 128"),
            (
                "route[2].via",
                "gateway 2001:db8:99::1 is not on-link (on no interface's IPv6 prefix); add dev",
            ),
            ("route[3].via", "gateway fe80::1 is link-local"),
            ("route[4].via", "gateway ff02::1:2 is a multicast group"),
            (
                "route[5].via",
                "'192.0.2.254' is an IPv4 address: the gateway of an IPv6 route",
            ),
            (
                "route[6].via",
                "'2001:db8:a::fe' is an IPv6 address: the gateway of an IPv4 route",
            ),
            (
                "route_files[0]",
                "2001:db8:7::/48 is routed twice: route[7] and routes6.txt line 3",
            ),
            (
                "route_files[0]",
                "routes6.txt: line 4: gateway fe80::1 is link-local",
            ),
            (
                "neighbour.static[0].ip",
                "2001:db8:b::9 is off-link for eth0",
            ),
            (
                "app[0].bind",
                "2001:db8:a::2 is not an IPv6 address of any interface",
            ),
        ],
    );
}

/// The shipped mistakes show the new rules too.
#[test]
fn the_bad_example_shows_mistakes_a_file_can_only_make_by_accident() {
    let out = check_config(&["--offline"], &examples().join("bad.toml"));
    assert_refused(
        &out,
        &[
            ("port[1].mac", "also the MAC of port[0] (eth0)"),
            (
                "port[1].addresses[1]",
                "broadcast address of 198.51.100.0/24",
            ),
            ("port[1].addresses[2]", "0.0.0.0 is the unspecified address"),
            ("port[2].mac", "group (multicast) address"),
            (
                "port[2].addresses[0]",
                "subnet 198.51.100.0/24 is also on eth1",
            ),
            (
                "route[2].prefix",
                "10.66.0.0/16 is routed twice: route[1] and route[2]",
            ),
            ("neighbour.static[0].ip", "on no subnet of eth2"),
            ("neighbour.queue_len", "more than the 64 packet buffers"),
            (
                "app[0].bind",
                "192.0.2.99 is not an address of any interface",
            ),
            ("route[3].via", "gateway fe80::1 is link-local"),
            ("route[4].via", "'198.51.100.254' is an IPv4 address"),
            (
                "neighbour.static[1].ip",
                "2001:db8:99::9 is off-link for eth1",
            ),
        ],
    );
}

/// Every shipped example but `bad.toml` is a valid file for replay, and the live ones
/// (`live-*.toml`) for `run` too (checked alone: they name interfaces of another
/// machine).
#[test]
fn every_other_example_validates() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples()).expect("examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|x| x != "toml") || path.ends_with("bad.toml") {
            continue;
        }
        let live = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("live-"));
        let mut checks = vec![&["--for", "replay"][..]];
        if live {
            checks.push(&["--offline"][..]);
        }
        for args in checks {
            let out = check_config(args, &path);
            assert!(
                out.status.success(),
                "{} {args:?}: {}{}",
                path.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        seen += 1;
    }
    assert!(seen >= 2, "router.toml and live-router.toml at least");
}

/// A kernel interface that does not exist is the `interface` key's problem, not the
/// `mac` key's: when the MAC is given, only the machine check finds it (and `--offline`
/// does not look); when the MAC is not given (it would be the interface's), the file
/// itself cannot be read without it.
#[test]
fn a_missing_interface_is_named_at_its_interface_key() {
    let dir = Dir::new("missing");
    let port = |mac: &str| {
        format!(
            "[[port]]\nname = \"uplink\"\nkind = \"af_packet\"\ninterface = \"nb-absent0\"\n\
             {mac}addresses = [\"192.0.2.1/24\"]\n"
        )
    };
    let with_mac = dir.file("with-mac.toml", &port("mac = \"02:00:5e:00:53:01\"\n"));
    let out = check_config(&[], &with_mac);
    assert_refused(
        &out,
        &[(
            "port[0].interface",
            "no interface 'nb-absent0' on this machine",
        )],
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains(".mac"));
    let out = check_config(&["--offline"], &with_mac);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let without = dir.file("without-mac.toml", &port(""));
    for args in [&[][..], &["--offline"][..]] {
        let out = check_config(args, &without);
        assert_refused(&out, &[("port[0].interface", "no interface 'nb-absent0'")]);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("port[0].mac"));
    }
}

/// A network namespace of the test's own (with the process id in its name), deleted
/// with everything in it when dropped, failed assertions included.
struct Netns(String);

impl Netns {
    /// A new namespace, or none (with the reason printed) when the test cannot make one.
    fn new(tag: &str) -> Option<Self> {
        if !netbatch_testkit::root("it creates a network namespace and interfaces")
            || !netbatch_testkit::tools(&[("ip", "iproute2")])
        {
            return None;
        }
        let name = format!("nbcm{tag}{}", std::process::id());
        match Command::new("ip").args(["netns", "add", &name]).output() {
            Ok(o) if o.status.success() => Some(Self(name)),
            Ok(o) => panic!(
                "ip netns add {name}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("the ip tool (iproute2) could not be run: {e}"),
        }
    }

    /// Runs `ip -n NS ARGS`, failing the test if it fails.
    fn ip(&self, args: &str) {
        let o = Command::new("ip")
            .args(["-n", &self.0])
            .args(args.split_whitespace())
            .output()
            .expect("ip runs");
        assert!(
            o.status.success(),
            "ip -n {} {args}: {}",
            self.0,
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `netbatch check-config FILE` run inside the namespace (`ip netns exec` gives it
    /// the namespace's /sys too).
    fn check_config(&self, file: &Path) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.0, env!("CARGO_BIN_EXE_netbatch")])
            .arg("check-config")
            .arg(file)
            .output()
            .expect("ip netns exec runs")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// A configuration of `workers` workers with one port of `kind` on `iface` (MTU `mtu`),
/// received by every worker.
fn one_port(workers: usize, kind: &str, iface: &str, mtu: u16) -> String {
    let rx: Vec<usize> = (0..workers).collect();
    format!(
        "[datapath]\nworkers = {workers}\n[[port]]\nname = \"p0\"\nkind = \"{kind}\"\n\
         interface = \"{iface}\"\nmac = \"02:00:5e:00:53:01\"\nmtu = {mtu}\n\
         addresses = [\"192.0.2.1/24\"]\nrx_workers = {rx:?}\n"
    )
}

/// af_xdp binds worker w to receive queue w, so a veth made with one receive queue
/// cannot serve two workers: check-config refuses it at `port[0].interface`, where before
/// it said "ok". One worker on the same interface passes (the interface is found); a
/// three-queue veth serves two. A port MTU above the interface's is refused at
/// `port[0].mtu`.
#[test]
fn af_xdp_with_more_workers_than_receive_queues_is_refused() {
    let Some(ns) = Netns::new("x") else {
        return;
    };
    ns.ip("link add nbq1a numrxqueues 1 numtxqueues 1 type veth peer name nbq1b");
    ns.ip("link add nbq3a numrxqueues 3 numtxqueues 3 type veth peer name nbq3b");
    ns.ip("link set nbq3a mtu 1400");
    let dir = Dir::new("xdp");
    let two = dir.file("two.toml", &one_port(2, "af_xdp", "nbq1a", 1500));
    let out = ns.check_config(&two);
    assert_refused(
        &out,
        &[(
            "port[0].interface",
            "'nbq1a' has 1 receive queue, and af_xdp binds worker w's socket to queue w: \
             datapath.workers = 2 needs 2",
        )],
    );
    let one = dir.file("one.toml", &one_port(1, "af_xdp", "nbq1a", 1500));
    let out = ns.check_config(&one);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let three = dir.file("three.toml", &one_port(2, "af_xdp", "nbq3a", 1400));
    let out = ns.check_config(&three);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let long = dir.file("long.toml", &one_port(2, "af_xdp", "nbq3a", 1500));
    assert_refused(
        &ns.check_config(&long),
        &[("port[0].mtu", "1500 is above the MTU of 'nbq3a' (1400)")],
    );
}

/// A tap port attaches to an existing device of its name only if the kernel would let
/// it: a TAP device (a veth is refused), multi-queue exactly when there are several
/// workers. A name that does not exist is fine: the port creates the device.
#[test]
fn a_tap_port_refuses_devices_the_kernel_would_not_attach_it_to() {
    let Some(ns) = Netns::new("t") else {
        return;
    };
    ns.ip("tuntap add dev nbtap1 mode tap");
    ns.ip("tuntap add dev nbtapm mode tap multi_queue");
    ns.ip("link add nbtv numrxqueues 1 numtxqueues 1 type veth peer name nbtw");
    let dir = Dir::new("tap");
    let cases = [
        (2, "nbtap1", Some("is a single-queue TAP device")),
        (1, "nbtap1", None),
        (2, "nbtapm", None),
        (1, "nbtapm", Some("is a multi-queue TAP device")),
        (1, "nbtv", Some("exists and is not a TAP device")),
        (2, "nbtnew", None),
    ];
    for (i, (workers, iface, want)) in cases.into_iter().enumerate() {
        let f = dir.file(
            &format!("tap{i}.toml"),
            &one_port(workers, "tap", iface, 1500),
        );
        let out = ns.check_config(&f);
        match want {
            Some(words) => assert_refused(&out, &[("port[0].interface", words)]),
            None => assert!(
                out.status.success(),
                "{workers} worker(s) on {iface}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// Run in the wrong network namespace, check-config and run say where the interface is:
/// a veth interface made in the test's namespace is missing from this one, and the
/// message names the namespace and how to run there (as the kernel's own view says:
/// the interface is in that namespace and not here).
#[test]
fn an_interface_in_another_namespace_is_named_with_its_namespace() {
    let Some(ns) = Netns::new("elsewhere") else {
        return;
    };
    let iface = format!("nbe{}", std::process::id() % 1_000_000);
    let pid = std::process::id() % 1_000_000;
    ns.ip(&format!("link add {iface} type veth peer name nbf{pid}"));
    let dir = Dir::new("elsewhere");
    let cfg = dir.file(
        "elsewhere.toml",
        &format!(
            "[[port]]\nname = \"lan\"\nkind = \"af_packet\"\ninterface = \"{iface}\"\n\
             mac = \"02:00:5e:00:53:01\"\naddresses = [\"192.0.2.1/24\"]\n"
        ),
    );
    let want = format!(
        "no interface '{iface}' on this machine (an af_packet port opens an existing one); \
         this process's network namespace has none, but namespace '{}' has one: run \
         netbatch there (`ip netns exec {} netbatch ...`)",
        ns.0, ns.0
    );
    assert_refused(&check_config(&[], &cfg), &[("port[0].interface", &want)]);
    let run = netbatch().arg("run").arg(&cfg).output().expect("run");
    assert_refused(&run, &[("port[0].interface", &want)]);
    // In its namespace the file is fine for run.
    let out = ns.check_config(&cfg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
