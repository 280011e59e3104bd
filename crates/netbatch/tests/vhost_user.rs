//! netbatch between two DPDK `testpmd` peers over vhost-user (`net_virtio_user`: DPDK's
//! virtio *driver*, so netbatch is the device on both sockets). One testpmd sends 64-byte
//! UDP frames from 192.0.2.2 to 198.18.0.2 (`txonly`) into port `a`; netbatch routes
//! 198.18.0.0/24 via 198.51.100.2 out of port `b`, where a second testpmd (`rxonly`,
//! with that neighbour's MAC) receives them. A second sender then connects to the same
//! socket after the first has gone: a server socket that serves its peers one after the
//! other.
//!
//! What is checked, each side against the other's own counters:
//! - every frame the two senders put on their rings (testpmd's `TX-packets`) is received
//!   by netbatch on `a` (`rx_packets`), none refused as malformed;
//! - every frame netbatch sent on `b` (`tx_packets`) is one the receiver counted
//!   (testpmd's `RX-packets`), and some were;
//! - what did not leave (the receiver's ring full: two cores for three pollers) is
//!   counted by reason, `rx + originated = tx + delivered + dropped + held`;
//! - each peer's connection and departure is counted as a link change of its port (the
//!   second sender is a reconnection the first one's departure made room for).
//!
//! The pollers are placed so that none starves the others for long: the receiver on
//! CPU 1, the senders on CPU 0, netbatch unpinned with a short idle spin (it sleeps on
//! its rings' kick eventfds when idle).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory named after this process, removed on drop (also on a panic).
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed on drop.
struct Proc(Option<Child>);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// testpmd on one `net_virtio_user` port at `sock`, driven through its prompt: `script`
/// is what it is told, line by line, each line after the pause before it (seconds).
fn testpmd(
    dir: &Path,
    tag: &str,
    lcores: &str,
    sock: &Path,
    mac: &str,
    extra: &[&str],
    script: &[(f64, &str)],
) -> Proc {
    let (p, stdin) = testpmd_prompt(dir, tag, lcores, sock, mac, extra, "");
    say(stdin, script);
    p
}

/// testpmd as [`testpmd`] starts it (`devargs`: more of the port's, after a comma), and
/// its prompt.
fn testpmd_prompt(
    dir: &Path,
    tag: &str,
    lcores: &str,
    sock: &Path,
    mac: &str,
    extra: &[&str],
    devargs: &str,
) -> (Proc, ChildStdin) {
    let mut c = Command::new("dpdk-testpmd")
        .arg(format!("--lcores={lcores}"))
        .args([
            "--no-pci",
            "--no-huge",
            "-m",
            "512",
            "--log-level=lib.eal:error",
        ])
        .arg(format!("--file-prefix=nbvh{}{tag}", std::process::id()))
        .arg(format!(
            "--vdev=net_virtio_user0,path={},mac={mac}{devargs}",
            sock.display(),
        ))
        .args(["--", "-i", "--nb-cores=1", "--total-num-mbufs=16384"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.out"))).expect("log file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("dpdk-testpmd starts");
    let stdin = c.stdin.take().expect("stdin piped");
    (Proc(Some(c)), stdin)
}

/// Tells a prompt `script`'s lines, each after its pause (seconds), from a thread.
fn say(mut stdin: ChildStdin, script: &[(f64, &str)]) {
    let lines: Vec<(f64, String)> = script.iter().map(|(t, l)| (*t, l.to_string())).collect();
    std::thread::spawn(move || {
        for (pause, line) in lines {
            std::thread::sleep(Duration::from_secs_f64(pause));
            if writeln!(stdin, "{line}").is_err() {
                return;
            }
        }
    });
}

/// Waits (up to `secs`) for a child to exit.
fn wait(p: &mut Proc, secs: u64) {
    let c = p.0.as_mut().expect("running");
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("a child did not exit within {secs} s");
}

/// The last `KEY: N` testpmd printed (`show port stats all` comes last).
fn last_count(out: &str, key: &str) -> u64 {
    out.match_indices(key)
        .filter_map(|(i, _)| {
            out[i + key.len()..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
        })
        .last()
        .unwrap_or_else(|| panic!("no {key} in testpmd's output:\n{out}"))
}

fn port(stats: &serde_json::Value, name: &str, key: &str) -> u64 {
    stats["totals"]["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .and_then(|p| p[key].as_u64())
        .unwrap_or_else(|| panic!("no {key} of port {name}: {stats:#}"))
}

fn total(stats: &serde_json::Value, key: &str) -> u64 {
    stats["totals"][key].as_u64().unwrap_or(0)
}

/// Starts `netbatch run` on configuration `cfg` (in `d`) and waits until its `sockets`
/// exist.
fn netbatch(d: &Path, cfg: &str, sockets: &[&Path]) -> Proc {
    std::fs::write(d.join("r.toml"), cfg).expect("config");
    let nb = Proc(Some(
        Command::new(env!("CARGO_BIN_EXE_netbatch"))
            .arg("run")
            .arg(d.join("r.toml"))
            .arg("--stats-json")
            .arg(d.join("stats.json"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("nb.err")).expect("log"))
            .spawn()
            .expect("netbatch starts"),
    ));
    let end = Instant::now() + Duration::from_secs(20);
    while !sockets.iter().all(|s| s.exists()) {
        assert!(
            Instant::now() < end,
            "netbatch did not open its sockets:\n{}",
            std::fs::read_to_string(d.join("nb.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nb
}

/// Stops netbatch with SIGTERM: its counters and its log.
fn stop(nb: &mut Proc, d: &Path) -> (serde_json::Value, String) {
    let pid = nb.0.as_ref().expect("running").id();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    wait(nb, 20);
    let stats = std::fs::read_to_string(d.join("stats.json")).expect("stats written");
    let log = std::fs::read_to_string(d.join("nb.err")).unwrap_or_default();
    (serde_json::from_str(&stats).expect("stats are JSON"), log)
}

/// A scratch directory of this process for test `tag`.
fn scratch(tag: &str) -> Dir {
    let d = Dir(std::env::temp_dir().join(format!("nbvh{}{tag}", std::process::id())));
    std::fs::create_dir_all(&d.0).expect("scratch directory");
    d
}

/// Each side against the other's counters: every frame the source's queue gave up
/// (`sent`) netbatch received on `a`, none refused as malformed, and every frame it sent
/// on `b` is one the sink counted (`received`).
fn both_ends_agree(stats: &serde_json::Value, sent: u64, received: u64, context: &str) {
    assert_eq!(
        port(stats, "a", "rx_packets"),
        sent,
        "every frame the source put on the ring, received: {stats:#}\n{context}"
    );
    assert_eq!(port(stats, "a", "rx_dropped"), 0, "no malformed chain");
    assert_eq!(
        port(stats, "b", "tx_packets"),
        received,
        "every frame sent on b reached the sink: {stats:#}\n{context}"
    );
}

/// Whether DPDK's testpmd can run here (root, the tool); the testkit says why not.
fn testpmd_can_run() -> bool {
    netbatch_testkit::root("DPDK's EAL needs root to start, even with --no-huge")
        && netbatch_testkit::tools(&[("dpdk-testpmd", "dpdk-dev")])
}

/// The router of the two-socket tests: ports `a` (192.0.2.1/24) and `b`
/// (198.51.100.1/24) on vhost-user sockets `a` and `b`, 198.18.0.0/24 routed via
/// 198.51.100.2 (a static neighbour) out of `b`, its control socket in `d`.
fn two_ports(d: &Path, a: &Path, b: &Path) -> String {
    format!(
        r#"
[datapath]
mode = "list"
idle_spin_us = 20
workers = 1

[control]
socket = "{ctl}"

[[port]]
name = "a"
kind = "vhost_user"
socket = "{a}"
mac = "02:00:00:00:00:0a"
addresses = ["192.0.2.1/24"]

[[port]]
name = "b"
kind = "vhost_user"
socket = "{b}"
mode = "server"
queues = 1
mac = "02:00:00:00:00:0b"
addresses = ["198.51.100.1/24"]

[[neighbour.static]]
ip = "198.51.100.2"
mac = "02:00:00:00:02:02"
dev = "b"

[[route]]
prefix = "198.18.0.0/24"
via = "198.51.100.2"
"#,
        ctl = d.join("ctl.sock").display(),
        a = a.display(),
        b = b.display(),
    )
}

#[test]
fn testpmd_frames_are_routed_between_two_vhost_user_ports_and_counted_on_both_sides() {
    if !testpmd_can_run() {
        return;
    }
    let dir = scratch("pmd");
    let d = &dir.0;
    let (a, b) = (d.join("a.sock"), d.join("b.sock"));
    let cfg = two_ports(d, &a, &b);
    let mut nb = netbatch(d, &cfg, &[&a, &b]);

    // The receiver lives through both senders; it prints its counters once they are done.
    let mut rx = testpmd(
        d,
        "rx",
        "0@1,1@1",
        &b,
        "02:00:00:00:02:02",
        &[],
        &[
            (0.0, "set fwd rxonly"),
            (0.0, "start"),
            (30.0, "stop"),
            (0.5, "show port stats all"),
            (0.5, "quit"),
        ],
    );
    std::thread::sleep(Duration::from_secs(3));
    let mut sent = 0;
    for round in ["tx1", "tx2"] {
        // Sends for 3 s, prints its counters, and stays connected for 3 s more so that
        // netbatch takes what is still on its ring before the peer goes.
        let mut tx = testpmd(
            d,
            round,
            "0@0,1@0",
            &a,
            "02:00:00:00:01:01",
            &["--tx-ip=192.0.2.2,198.18.0.2"],
            &[
                (0.0, "set fwd txonly"),
                (0.0, "set eth-peer 0 02:00:00:00:00:0a"),
                (0.0, "start"),
                (3.0, "stop"),
                (0.5, "show port stats all"),
                (3.0, "quit"),
            ],
        );
        wait(&mut tx, 40);
        let out = std::fs::read_to_string(d.join(format!("{round}.out"))).expect("log");
        let n = last_count(&out, "TX-packets:");
        assert!(n > 0, "{round} sent nothing:\n{out}");
        sent += n;
    }
    wait(&mut rx, 60);
    let rx_out = std::fs::read_to_string(d.join("rx.out")).expect("log");
    let received = last_count(&rx_out, "RX-packets:");

    let (stats, log) = stop(&mut nb, d);

    both_ends_agree(&stats, sent, received, &format!("{log}\n{rx_out}"));
    assert!(received > 0, "some frames were routed through: {stats:#}");
    assert_eq!(
        total(&stats, "rx_packets") + total(&stats, "originated_packets"),
        total(&stats, "tx_packets")
            + total(&stats, "delivered_packets")
            + total(&stats, "dropped_packets")
            + total(&stats, "held_packets"),
        "{stats:#}"
    );
    assert_eq!(
        total(&stats, "rx_packets"),
        sent,
        "nothing else arrived: {stats:#}"
    );
    // Each connection takes the port's link up and its end takes it down: port a saw two
    // peers come and go (4 changes after the first, down at start), b one.
    let link = |name: &str| {
        stats["links"]
            .as_array()
            .and_then(|a| a.iter().find(|l| l["port"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no link of port {name}: {stats:#}"))
    };
    assert_eq!(link("a")["changes"], 5, "{stats:#}");
    assert_eq!(link("b")["changes"], 3, "{stats:#}");
    assert_eq!(link("a")["up"], false, "no peer at the end");
}

/// A virtual machine in the kernel lab (QEMU, Debian's kernel, its virtio-net driver)
/// with a vhost-user NIC on netbatch's port `vm` pings 198.51.100.2 through netbatch:
/// netbatch answers the guest's ARP for its gateway 192.0.2.1, routes the echo requests
/// out of port `b`, where testpmd (`icmpecho`: it answers any echo request it is given)
/// is the peer, and routes the answers back. The guest's ping reporting its three
/// answers is the check; both sides' counters say the three went through port `b` and
/// back (testpmd's own counters against netbatch's).
#[test]
fn a_lab_guest_with_a_vhost_user_nic_pings_through_netbatch() {
    if !testpmd_can_run() {
        return;
    }
    // scripts/kernel-lab sets itself up on first use (QEMU from apt, a kernel into its
    // cache); where that is not asked for (CI sets NETBATCH_REQUIRE_ALL), a machine
    // without QEMU skips.
    if !netbatch_testkit::has_command("qemu-system-x86_64") && !netbatch_testkit::required() {
        netbatch_testkit::skip("no QEMU for the kernel lab (scripts/setup --kernel-lab)");
        return;
    }
    let dir = scratch("lab");
    let d = &dir.0;
    let (vm, b) = (d.join("vm.sock"), d.join("b.sock"));
    let cfg = format!(
        r#"
[datapath]
idle_spin_us = 20
workers = 1

[control]
socket = "{ctl}"

[[port]]
name = "vm"
kind = "vhost_user"
socket = "{vm}"
mac = "02:00:00:00:00:0a"
addresses = ["192.0.2.1/24"]

[[port]]
name = "b"
kind = "vhost_user"
socket = "{b}"
mac = "02:00:00:00:00:0b"
addresses = ["198.51.100.1/24"]

[[neighbour.static]]
ip = "198.51.100.2"
mac = "02:00:00:00:02:02"
dev = "b"
"#,
        ctl = d.join("ctl.sock").display(),
        vm = vm.display(),
        b = b.display(),
    );
    let mut nb = netbatch(d, &cfg, &[&vm, &b]);
    let (mut echo, prompt) = testpmd_prompt(d, "echo", "0@1,1@1", &b, "02:00:00:00:02:02", &[], "");
    let mut prompt = Some(prompt);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let Some(p) = prompt.as_mut() {
        writeln!(p, "set fwd icmpecho\nstart").expect("testpmd's prompt");
    }
    std::thread::sleep(Duration::from_secs(2));
    let lab = Command::new(repo.join("scripts/kernel-lab"))
        .args(["--cpus", "1", "-t", "300", "--nic"])
        .arg(format!("vhost-user:{}", vm.display()))
        .args([
            "--",
            "bash",
            "-c",
            "ip link set eth0 up && ip addr add 192.0.2.2/24 dev eth0 && \
             ip route add default via 192.0.2.1 && ping -c 3 -W 5 198.51.100.2",
        ])
        .output()
        .expect("scripts/kernel-lab runs");
    let guest = format!(
        "{}{}",
        String::from_utf8_lossy(&lab.stdout),
        String::from_utf8_lossy(&lab.stderr)
    );
    if let Some(mut p) = prompt.take() {
        let _ = writeln!(p, "stop\nshow port stats all\nquit");
    }
    wait(&mut echo, 30);
    let (stats, log) = stop(&mut nb, d);
    assert!(
        lab.status.success()
            && (guest.contains("3 packets transmitted, 3 received")
                || guest.contains("3 packets transmitted, 3 packets received")),
        "the guest's ping:\n{guest}\nnetbatch:\n{log}\n{stats:#}"
    );
    let out = std::fs::read_to_string(d.join("echo.out")).expect("log");
    assert_eq!(
        (
            last_count(&out, "RX-packets:"),
            last_count(&out, "TX-packets:")
        ),
        (3, 3),
        "testpmd saw the three requests and answered them:\n{out}"
    );
    assert_eq!(port(&stats, "b", "tx_packets"), 3, "{stats:#}");
    assert_eq!(port(&stats, "b", "rx_packets"), 3, "{stats:#}");
    assert!(
        port(&stats, "vm", "tx_packets") >= 4,
        "an ARP answer and three echo answers"
    );
    assert_eq!(port(&stats, "vm", "rx_dropped"), 0, "no malformed chain");
}

/// netbatch as the vhost-user *client*: testpmd's `net_virtio_user` listens
/// (`server=1`), netbatch's port connects, and when that testpmd quits and another takes
/// its socket, netbatch connects again by itself (it retries with a bounded backoff).
/// Every frame both senders put on their rings is received and counted, and the two
/// connections are two rounds of link changes.
#[test]
fn a_client_port_reconnects_to_a_peer_that_comes_back() {
    if !testpmd_can_run() {
        return;
    }
    let dir = scratch("cli");
    let d = &dir.0;
    let a = d.join("a.sock");
    let cfg = format!(
        r#"
[datapath]
idle_spin_us = 20
workers = 1

[control]
socket = "{ctl}"

[[port]]
name = "a"
kind = "vhost_user"
socket = "{a}"
mode = "client"
queue_size = 256
mac = "02:00:00:00:00:0a"
addresses = ["192.0.2.1/24"]
"#,
        ctl = d.join("ctl.sock").display(),
        a = a.display(),
    );
    // No socket to wait for: netbatch is the one connecting.
    let mut nb = netbatch(d, &cfg, &[]);
    let mut sent = 0;
    for round in ["c1", "c2"] {
        let (mut tx, stdin) = testpmd_prompt(
            d,
            round,
            "0@0,1@0",
            &a,
            "02:00:00:00:01:01",
            &["--tx-ip=192.0.2.2,192.0.2.1"],
            ",server=1",
        );
        // netbatch retries at least once a second: connected well within 3 s.
        say(
            stdin,
            &[
                (3.0, "set fwd txonly"),
                (0.0, "set eth-peer 0 02:00:00:00:00:0a"),
                (0.0, "start"),
                (1.0, "stop"),
                (0.5, "show port stats all"),
                (2.0, "quit"),
            ],
        );
        wait(&mut tx, 40);
        let out = std::fs::read_to_string(d.join(format!("{round}.out"))).expect("log");
        let n = last_count(&out, "TX-packets:");
        assert!(
            n > 0,
            "{round} sent nothing (was netbatch connected?):\n{out}"
        );
        sent += n;
    }
    let (stats, log) = stop(&mut nb, d);
    assert_eq!(
        port(&stats, "a", "rx_packets"),
        sent,
        "every frame of both sessions received: {stats:#}\n{log}"
    );
    let changes = stats["links"][0]["changes"].as_u64().unwrap_or(0);
    assert_eq!(
        changes, 5,
        "down at start, then up and down twice: {stats:#}"
    );
}

/// Two workers, a queue pair each: a testpmd sender with two queue pairs (`queues=2`,
/// one forwarding core per queue) spreads its frames over both of port a's transmit
/// queues, and each of netbatch's workers receives from its own and sends on its own
/// pair of port b. Every frame sent is received, and each worker took a share.
#[test]
fn two_workers_serve_a_queue_pair_each() {
    if !testpmd_can_run() {
        return;
    }
    let dir = scratch("mq");
    let d = &dir.0;
    let (a, b) = (d.join("a.sock"), d.join("b.sock"));
    let cfg = format!(
        r#"
[datapath]
idle_spin_us = 20
workers = 2

[control]
socket = "{ctl}"

[[port]]
name = "a"
kind = "vhost_user"
socket = "{a}"
queues = 2
rx_workers = [0, 1]
mac = "02:00:00:00:00:0a"
addresses = ["192.0.2.1/24"]

[[port]]
name = "b"
kind = "vhost_user"
socket = "{b}"
rx_workers = [0, 1]
mac = "02:00:00:00:00:0b"
addresses = ["198.51.100.1/24"]

[[neighbour.static]]
ip = "198.51.100.2"
mac = "02:00:00:00:02:02"
dev = "b"

[[route]]
prefix = "198.18.0.0/24"
via = "198.51.100.2"
"#,
        ctl = d.join("ctl.sock").display(),
        a = a.display(),
        b = b.display(),
    );
    let mut nb = netbatch(d, &cfg, &[&a, &b]);
    let two = ["--nb-cores=2", "--rxq=2", "--txq=2"];
    let (mut rx, rx_in) = testpmd_prompt(
        d,
        "mqrx",
        "0@1,1@1,2@1",
        &b,
        "02:00:00:00:02:02",
        &two,
        ",queues=2",
    );
    say(
        rx_in,
        &[
            (0.0, "set fwd rxonly"),
            (0.0, "start"),
            (14.0, "stop"),
            (0.5, "show port stats all"),
            (0.5, "quit"),
        ],
    );
    std::thread::sleep(Duration::from_secs(3));
    let mut tx_args = two.to_vec();
    tx_args.push("--tx-ip=192.0.2.2,198.18.0.2");
    let (mut tx, tx_in) = testpmd_prompt(
        d,
        "mqtx",
        "0@0,1@0,2@0",
        &a,
        "02:00:00:00:01:01",
        &tx_args,
        ",queues=2",
    );
    say(
        tx_in,
        &[
            (0.0, "set fwd txonly"),
            (0.0, "set eth-peer 0 02:00:00:00:00:0a"),
            (0.0, "start"),
            (3.0, "stop"),
            (0.5, "show port stats all"),
            (3.0, "quit"),
        ],
    );
    wait(&mut tx, 40);
    wait(&mut rx, 60);
    let sent = last_count(
        &std::fs::read_to_string(d.join("mqtx.out")).expect("log"),
        "TX-packets:",
    );
    let received = last_count(
        &std::fs::read_to_string(d.join("mqrx.out")).expect("log"),
        "RX-packets:",
    );
    let (stats, log) = stop(&mut nb, d);
    assert_eq!(port(&stats, "a", "rx_packets"), sent, "{stats:#}\n{log}");
    assert_eq!(port(&stats, "b", "tx_packets"), received, "{stats:#}");
    let per_worker: Vec<u64> = stats["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            w["ports"]
                .as_array()
                .and_then(|p| p.iter().find(|p| p["name"] == "a"))
                .and_then(|p| p["rx_packets"].as_u64())
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(per_worker.len(), 2, "{stats:#}");
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "each worker received from its own queue: {per_worker:?}"
    );
}

/// netbatch's own virtio-net driver (`netbatch flood --via vhost_user`, the benchmark's
/// source and sink) between netbatch's two vhost-user ports: it sends on port `a` and
/// drains port `b`, in one thread. Each side is checked against the other's counters:
/// every frame the driver's transmit queue gave up is one netbatch received on `a`, and
/// every frame netbatch sent on `b` is one the driver's sink counted. No root, no DPDK:
/// the second witness to the testpmd test above, and the check that the benchmark's
/// source counts what it says.
#[test]
fn the_flood_driver_sends_through_two_vhost_user_ports_and_counts_both_ends() {
    let dir = scratch("drv");
    let d = &dir.0;
    let (a, b) = (d.join("a.sock"), d.join("b.sock"));
    let cfg = two_ports(d, &a, &b);
    let mut nb = netbatch(d, &cfg, &[&a, &b]);
    let out = Command::new(env!("CARGO_BIN_EXE_netbatch"))
        .args(["flood", "--via", "vhost_user", "--socket"])
        .arg(&a)
        .arg("--sink")
        .arg(&b)
        .args([
            "--dst-mac",
            "02:00:00:00:00:0a",
            "--src",
            "192.0.2.2",
            "--dst",
            "198.18.0.2",
            "--flows",
            "16",
            "--seconds",
            "1",
            "--rate",
            "200000",
            "--json",
        ])
        .output()
        .expect("netbatch flood runs");
    assert!(
        out.status.success(),
        "flood failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flood: serde_json::Value = serde_json::from_slice(&out.stdout).expect("flood's JSON");
    let (sent, received) = (
        flood["sent"].as_u64().expect("sent"),
        flood["received"].as_u64().expect("received"),
    );
    let (stats, log) = stop(&mut nb, d);
    assert!(sent > 100_000, "a paced second of frames went out: {flood}");
    both_ends_agree(&stats, sent, received, &format!("{log}\n{flood}"));
    // What netbatch could not put on port b's queue is counted, by that reason only:
    // the sink's queue was full while the flood's thread was not running (a loaded
    // machine deschedules it for longer than 1024 frames take at this rate).
    assert_eq!(
        stats["totals"]["drops"]["tx_ring_full"]
            .as_u64()
            .unwrap_or(0),
        total(&stats, "dropped_packets"),
        "{stats:#}"
    );
    assert_eq!(total(&stats, "rx_packets"), sent, "nothing else arrived");
    assert!(received * 2 > sent, "most went through: {stats:#}\n{flood}");
    assert_eq!(
        total(&stats, "rx_packets") + total(&stats, "originated_packets"),
        total(&stats, "tx_packets")
            + total(&stats, "delivered_packets")
            + total(&stats, "dropped_packets")
            + total(&stats, "held_packets"),
        "{stats:#}"
    );
}
