//! netbatch on real interfaces, checked with the Linux kernel's own tools.
//!
//! Topology, created and removed by each test (namespaces and veth pairs named after the
//! process id; TEST-NET addresses only):
//!
//! ```text
//!  h1 (192.0.2.2/24) ── veth ── [ r1  netbatch  r2 ] ── veth ── h2 (198.51.100.2/24)
//!     (2001:db8:1::2/64)        192.0.2.1  198.51.100.1          (2001:db8:2::2/64)
//!                               2001:db8:1::1  2001:db8:2::1   (namespace r)
//! ```
//!
//! The router scenario runs dual-stack: IPv6 is on in the hosts (their kernels solicit,
//! announce and probe as they do on any link); namespace `r`'s own kernel keeps IPv6 off
//! on the interfaces netbatch serves, so that only netbatch answers there.
//!
//! netbatch runs as users run it (`netbatch run CONFIG` inside namespace `r`, stopped
//! with SIGTERM); the hosts use `ping`, `traceroute`, `iperf3`, `ip neigh` and Python's
//! sockets. Each test needs root and the tools `scripts/setup` installs; without root it
//! says so and passes, without the tools it fails naming them.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    netbatch_testkit::root("the live tests create namespaces and veth pairs")
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("sh runs")
}

fn need_tools() {
    let missing: Vec<&str> = ["ip", "ping", "traceroute", "iperf3", "python3"]
        .into_iter()
        .filter(|t| !sh(&format!("command -v {t}")).status.success())
        .collect();
    assert!(
        missing.is_empty(),
        "missing {missing:?}: run scripts/setup (it installs iproute2, iputils-ping, traceroute, iperf3)"
    );
}

/// The namespaces, links and netbatch process of one test.
struct Topo {
    tag: String,
    /// The test's directory (`_tmp`'s path).
    dir: PathBuf,
    /// Removes `dir` with its files once `Topo`'s own `drop` has stopped what uses it,
    /// whether the test passes or panics.
    _tmp: tempfile::TempDir,
    child: Option<Child>,
    log: std::sync::Arc<Mutex<Vec<String>>>,
    /// The threads copying the child's stderr and stdout into `log`: they end at the
    /// streams' end, after the child's last line.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Topo {
    fn ns(&self, n: &str) -> String {
        format!("nb{}-{n}", self.tag)
    }

    /// Runs `cmd` in namespace `n`; returns (success, stdout + stderr).
    fn exec(&self, n: &str, cmd: &str) -> (bool, String) {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.ns(n), "sh", "-c", cmd])
            .output()
            .expect("ip netns exec");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), text)
    }

    fn must(&self, n: &str, cmd: &str) -> String {
        let (ok, text) = self.exec(n, cmd);
        assert!(ok, "in {n}: {cmd}:\n{text}");
        text
    }

    /// Builds the topology for ports of `kind`.
    /// Namespace `r` and hosts `hosts`, host `hosts[i]` joined to `r` by a veth pair
    /// whose ends are `nb<tag><a+i>` in the host and `nb<tag>r<i+1>` in `r`, all up.
    fn hosts(id: &str, hosts: &[&str]) -> Self {
        let tag = format!("{id}{}", std::process::id() % 100_000);
        // Mode 0755 as a created directory would have: the test runs a copy of the
        // binary in it as `nobody`.
        let tmp = tempfile::Builder::new()
            .prefix(&format!("netbatch-live-{tag}-"))
            .permissions(std::fs::Permissions::from_mode(0o755))
            .tempdir()
            .expect("temp dir");
        let t = Self {
            tag,
            dir: tmp.path().to_path_buf(),
            _tmp: tmp,
            child: None,
            log: Default::default(),
            readers: Vec::new(),
        };
        t.remove();
        for n in hosts.iter().chain(&["r"]) {
            assert!(sh(&format!("ip netns add {}", t.ns(n))).status.success());
        }
        let r = t.ns("r");
        let s = &t.tag;
        let quiet = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1; sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up";
        for (i, h) in hosts.iter().enumerate() {
            let (end, ns) = ((b'a' + i as u8) as char, t.ns(h));
            let c = format!(
                "ip link add nb{s}{end} netns {ns} type veth peer name nb{s}r{} netns {r}",
                i + 1
            );
            let o = sh(&c);
            assert!(
                o.status.success(),
                "{c}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            t.must("r", &format!("{quiet}; ip link set nb{s}r{} up", i + 1));
            t.must(h, &format!("{quiet}; ip link set nb{s}{end} up"));
        }
        t
    }

    /// Builds the topology for ports of `kind`, r1 received by the workers `rx1`, r2 by
    /// `rx2` (the tap by every worker, as taps must be).
    fn new(kind: &str, id: &str, workers: usize, (rx1, rx2): (&[usize], &[usize])) -> Self {
        let t = Self::hosts(id, &["h1", "h2"]);
        let s = &t.tag;
        t.must(
            "h1",
            &format!("ip addr add 192.0.2.2/24 dev nb{s}a; ip route add default via 192.0.2.1"),
        );
        t.must(
            "h2",
            &format!(
                "ip addr add 198.51.100.2/24 dev nb{s}b; ip route add default via 198.51.100.1"
            ),
        );
        // IPv6 on in the hosts (`hosts` turned it off), their addresses usable at once
        // (no duplicate address detection to wait for).
        for (n, d, net) in [("h1", "a", 1), ("h2", "b", 2)] {
            t.must(
                n,
                &format!(
                    "sysctl -qw net.ipv6.conf.nb{s}{d}.accept_dad=0 && \
                     sysctl -qw net.ipv6.conf.nb{s}{d}.disable_ipv6=0 && \
                     ip -6 addr add 2001:db8:{net}::2/64 dev nb{s}{d} nodad && \
                     ip -6 route add default via 2001:db8:{net}::1"
                ),
            );
        }
        if kind == "af_xdp" {
            // Frames sent by a kernel with checksum offload on veth carry partial
            // checksums; AF_XDP has no way to say so (AF_PACKET does: its virtio-net
            // header), so the hosts checksum in software, as on a wire.
            for (n, d) in [("h1", "a"), ("h2", "b")] {
                t.must(n, &format!("ethtool -K nb{s}{d} tx off >/dev/null"));
            }
        }
        let (rx1, rx2) = (format!("{rx1:?}"), format!("{rx2:?}"));
        let rx = format!("{:?}", (0..workers).collect::<Vec<_>>());
        let cfg = format!(
            r#"
[datapath]
mode = "list"
idle_spin_us = 50
workers = {workers}

[[port]]
name = "r1"
kind = "{kind}"
interface = "nb{s}r1"
addresses = ["192.0.2.1/24", "2001:db8:1::1/64"]
rx_workers = {rx1}

[[port]]
name = "r2"
kind = "{kind}"
interface = "nb{s}r2"
addresses = ["198.51.100.1/24", "2001:db8:2::1/64"]
rx_workers = {rx2}

# The host kernel of namespace r behind a tap: TCP to it crosses netbatch both ways.
[[port]]
name = "host"
kind = "tap"
interface = "nb{s}t"
mac = "02:00:5e:00:53:99"
addresses = ["203.0.113.2/24"]
rx_workers = {rx}
features = ["tx-checksum", "tx-tcp-segmentation", "tx-udp-segmentation"]

[filter.forward]
policy = "accept"
[[filter.forward.rule]]
proto = "udp"
dport = "9999"
action = "drop"

[[app]]
kind = "udp-echo"
bind = "192.0.2.1:7"
"#
        );
        std::fs::write(t.dir.join("router.toml"), cfg).expect("config written");
        t
    }

    /// Starts netbatch in namespace `r` and waits until it says both ports are up.
    fn start(&mut self) {
        // The log is this run's only.
        if let Ok(mut l) = self.log.lock() {
            l.clear();
        }
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns("r"),
                env!("CARGO_BIN_EXE_netbatch"),
                "run",
            ])
            .arg(self.dir.join("router.toml"))
            .arg("--stats-json")
            .arg(self.dir.join("stats.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("netbatch starts");
        // The log (stderr) and the counters printed at the stop (stdout), as they come.
        let err = child.stderr.take().expect("stderr piped");
        let out = child.stdout.take().expect("stdout piped");
        for stream in [
            Box::new(err) as Box<dyn std::io::Read + Send>,
            Box::new(out) as Box<dyn std::io::Read + Send>,
        ] {
            let log = self.log.clone();
            self.readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock() {
                        l.push(line);
                    }
                }
            }));
        }
        self.child = Some(child);
        // Up once every port of the configuration says so.
        let conf = std::fs::read_to_string(self.dir.join("router.toml")).unwrap_or_default();
        let ports: Vec<String> = conf
            .split("[[port]]")
            .skip(1)
            .filter_map(|p| p.lines().find_map(|l| l.strip_prefix("name = ")))
            .map(|n| format!("port {} up", n.trim_matches('"')))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let log = self.log_text();
            if ports.iter().all(|p| log.contains(p)) {
                return;
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                std::thread::sleep(Duration::from_millis(100));
                panic!("netbatch exited ({st}):\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("netbatch did not start:\n{}", self.log_text());
    }

    /// Waits (10 s at most) for netbatch to exit, and for its last words.
    fn wait_exit(&mut self, why: &str) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(st)) = c.try_wait() {
                break st;
            }
            assert!(Instant::now() < deadline, "{why}");
            std::thread::sleep(Duration::from_millis(20));
        };
        // Its last lines are in the log once the readers have met the streams' end (a
        // pause after the exit was not always enough on a loaded machine).
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        status
    }

    /// Starts the Python program `script` (written to the test's directory as `name.py`;
    /// `{ready}` in it names the file it creates once it listens) in namespace `n`, with
    /// its standard output piped, and waits (5 s at most) until it is ready.
    fn python_server(&self, n: &str, name: &str, script: &str) -> Child {
        let ready = self.dir.join(format!("{name}.ready"));
        let _ = std::fs::remove_file(&ready);
        let path = self.dir.join(format!("{name}.py"));
        let text = script.replace("{ready}", &ready.display().to_string());
        std::fs::write(&path, text).expect("script");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(n), "python3"])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python starts");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ready.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Stops netbatch with SIGTERM; returns its counters.
    fn stop(&mut self) -> serde_json::Value {
        let c = self.child.as_ref().expect("running");
        let _ = sh(&format!("kill -TERM {}", c.id()));
        let status = self.wait_exit("netbatch did not stop on SIGTERM");
        assert!(status.success(), "netbatch failed:\n{}", self.log_text());
        let text = std::fs::read_to_string(self.dir.join("stats.json")).expect("stats written");
        serde_json::from_str(&text).expect("stats are JSON")
    }

    fn remove(&self) {
        for n in ["h1", "h2", "h3", "h4", "r", "cp"] {
            let _ = sh(&format!("ip netns del {} 2>/dev/null", self.ns(n)));
        }
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.remove();
    }
}

fn total(stats: &serde_json::Value, key: &str) -> u64 {
    stats["totals"][key].as_u64().unwrap_or(0)
}

/// `rx + originated = tx + delivered + dropped + held`, in wire packets, over the run.
fn assert_conserved(stats: &serde_json::Value) {
    assert_eq!(
        total(stats, "rx_packets") + total(stats, "originated_packets"),
        total(stats, "tx_packets")
            + total(stats, "delivered_packets")
            + total(stats, "dropped_packets")
            + total(stats, "held_packets"),
        "{stats:#}"
    );
}

fn drops(stats: &serde_json::Value, reason: &str) -> u64 {
    stats["totals"]["drops"][reason].as_u64().unwrap_or(0)
}

/// A stage's event counter, summed over the workers.
fn event(stats: &serde_json::Value, stage: &str, key: &str) -> u64 {
    stats["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["stages"].as_array().into_iter().flatten())
        .filter(|s| s["name"] == stage)
        .filter_map(|s| s["events"][key].as_u64())
        .sum()
}

fn port(stats: &serde_json::Value, name: &str, key: &str) -> u64 {
    stats["totals"]["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .and_then(|p| p[key].as_u64())
        .unwrap_or(0)
}

/// A Python UDP exchange in namespace `n`: sends `count` datagrams to `dst:port` and
/// prints how many answers came back.
fn udp_echo_client(t: &Topo, n: &str, dst: &str, port: u16, count: u32) -> u32 {
    let py = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.settimeout(2)\n\
         ok = 0\n\
         for i in range({count}):\n\
         \x20   m = b'netbatch echo %d' % i\n\
         \x20   s.sendto(m, ('{dst}', {port}))\n\
         \x20   try:\n\
         \x20       d, a = s.recvfrom(2048)\n\
         \x20       ok += d == m and a == ('{dst}', {port})\n\
         \x20   except socket.timeout:\n\
         \x20       pass\n\
         print(ok)\n"
    );
    std::fs::write(t.dir.join("echo.py"), py).expect("script");
    let out = t.must(n, &format!("python3 {}", t.dir.join("echo.py").display()));
    out.trim().parse().unwrap_or(0)
}

fn scenario(
    kind: &str,
    id: &str,
    workers: usize,
    rx: (&[usize], &[usize]),
) -> Option<serde_json::Value> {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return None;
    }
    need_tools();
    let mut t = Topo::new(kind, id, workers, rx);
    t.start();
    let s = t.tag.clone();

    // Ping netbatch itself, then through it: ARP resolved both ways on the way.
    t.must("h1", "ping -c 3 -i 0.2 -W 2 192.0.2.1");
    // 3000 bytes of payload: the kernel sends three fragments, netbatch reassembles the
    // request and answers with fragments the kernel reassembles (ping checks the data).
    t.must("h1", "ping -c 3 -i 0.2 -W 2 -s 3000 192.0.2.1");
    t.must("h1", "ping -c 3 -i 0.2 -W 2 198.51.100.2");
    let r1_mac = t.must("r", &format!("cat /sys/class/net/nb{s}r1/address"));
    let r2_mac = t.must("r", &format!("cat /sys/class/net/nb{s}r2/address"));
    let n1 = t.must("h1", "ip neigh show 192.0.2.1");
    assert!(
        n1.contains(r1_mac.trim()) && !n1.contains("FAILED"),
        "h1's kernel resolved netbatch: {n1}"
    );
    let n2 = t.must("h2", "ip neigh show 198.51.100.1");
    assert!(
        n2.contains(r2_mac.trim()) && !n2.contains("FAILED"),
        "h2's kernel resolved netbatch: {n2}"
    );

    // TTL 1: netbatch answers with time exceeded; traceroute sees both hops.
    let (_, p) = t.exec("h1", "ping -c 1 -t 1 -W 2 198.51.100.2");
    assert!(
        p.contains("From 192.0.2.1") && p.to_lowercase().contains("time to live exceeded"),
        "{p}"
    );
    let tr = t.must("h1", "traceroute -n -q 1 -w 2 -m 3 198.51.100.2");
    let hops: Vec<&str> = tr.lines().skip(1).collect();
    assert!(
        hops.first().is_some_and(|l| l.contains("192.0.2.1"))
            && hops.get(1).is_some_and(|l| l.contains("198.51.100.2")),
        "{tr}"
    );

    // TCP between h1 and the kernel of namespace r, behind the tap port: both kernels
    // send 64 KiB super-frames (TSO on veth and tap); netbatch takes them as GSO
    // super-packets, hands them whole to the tap and segments them for the veth.
    t.must(
        "r",
        &format!(
            "ip addr add 203.0.113.1/24 dev nb{s}t && ip route add 192.0.2.0/24 via 203.0.113.2"
        ),
    );
    let srv = t.python_server(
        "r",
        "tcp-server",
        "import socket\n\
         l = socket.socket()\n\
         l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('203.0.113.1', 5001))\n\
         l.listen(1)\n\
         open('{ready}', 'w').close()\n\
         l.settimeout(10)\n\
         c, _ = l.accept()\n\
         c.settimeout(10)\n\
         n = 0\n\
         h = 0\n\
         while True:\n\
         \x20   d = c.recv(65536)\n\
         \x20   if not d:\n\
         \x20       break\n\
         \x20   for b in d:\n\
         \x20       h = (h * 31 + b) % 1000000007\n\
         \x20   n += len(d)\n\
         c.sendall(b'%d %d\\n' % (n, h) + bytes(i % 251 for i in range(400000)))\n\
         c.close()\n",
    );
    let client = "import socket\n\
         s = socket.create_connection(('203.0.113.1', 5001), timeout=10)\n\
         data = bytes((i * 7) % 253 for i in range(600000))\n\
         s.sendall(data)\n\
         s.shutdown(socket.SHUT_WR)\n\
         got = b''\n\
         while True:\n\
         \x20   d = s.recv(65536)\n\
         \x20   if not d:\n\
         \x20       break\n\
         \x20   got += d\n\
         head, rest = got.split(b'\\n', 1)\n\
         h = 0\n\
         for b in data:\n\
         \x20   h = (h * 31 + b) % 1000000007\n\
         ok = head == b'%d %d' % (len(data), h) and rest == bytes(i % 251 for i in range(400000))\n\
         print('ok' if ok else 'bad %r %d' % (head, len(rest)))\n";
    std::fs::write(t.dir.join("tcp-client.py"), client).expect("script");
    let out = t.must(
        "h1",
        &format!("python3 {}", t.dir.join("tcp-client.py").display()),
    );
    let _ = srv.wait_with_output();
    assert_eq!(out.trim(), "ok", "600 kB up and 400 kB down, intact");

    // The UDP echo built into netbatch.
    assert_eq!(
        udp_echo_client(&t, "h1", "192.0.2.1", 7, 5),
        5,
        "every echo back"
    );

    // The firewall rule drops UDP to port 9999 and nothing else.
    let server = t.python_server(
        "h2",
        "listen",
        "import socket, select, time\n\
         ss = []\n\
         for p in (9998, 9999):\n\
         \x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         \x20   s.bind(('198.51.100.2', p))\n\
         \x20   ss.append(s)\n\
         open('{ready}', 'w').close()\n\
         got = {9998: 0, 9999: 0}\n\
         end = time.time() + 3\n\
         while time.time() < end:\n\
         \x20   r, _, _ = select.select(ss, [], [], 0.1)\n\
         \x20   for s in r:\n\
         \x20       s.recv(2048)\n\
         \x20       got[s.getsockname()[1]] += 1\n\
         print(got[9998], got[9999])\n",
    );
    t.must(
        "h1",
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b'x', ('198.51.100.2', p)) for p in (9998, 9999) for i in range(5)]\"",
    );
    let out = server.wait_with_output().expect("listener ends");
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(got, "5 0", "port 9998 passes, port 9999 is dropped");

    ipv6_through_netbatch(&t);

    let stats = t.stop();
    // Conservation in wire packets, super-frames from the kernels included.
    assert_conserved(&stats);
    let first = stats.clone();
    assert_eq!(drops(&stats, "filter_forward"), 5, "{stats:#}");
    assert!(
        event(&stats, "ip6-icmp-error", "sent_ip6_hop_limit_exceeded") >= 2,
        "ping -6 -t 1 and traceroute -6's first hop were answered: {stats:#}"
    );
    assert!(
        event(&stats, "ip4-icmp-error", "sent_ttl_expired") >= 2,
        "ping -t 1 and traceroute's first hop were answered: {stats:#}"
    );
    assert!(
        t.log_text().contains("drop filter_forward: 5"),
        "counters printed at stop:\n{}",
        t.log_text()
    );

    // iperf3 across netbatch at a fixed rate: what iperf3 reports lost is what netbatch
    // and the receiving kernel counted as dropped.
    t.start();
    let (ok, _) = t.exec("h2", "iperf3 -s -1 -D -B 198.51.100.2 --logfile /dev/null");
    assert!(ok, "iperf3 server");
    assert!(
        netbatch_testkit::wait_listening(&t.ns("h2"), "tcp", 5201, Duration::from_secs(10)),
        "iperf3 server listening"
    );
    let before = t.must("h2", "cat /proc/net/snmp | grep '^Udp:' | tail -1");
    let rep = t.must("h1", "iperf3 -u -c 198.51.100.2 -b 20M -l 1000 -t 2 --json");
    let after = t.must("h2", "cat /proc/net/snmp | grep '^Udp:' | tail -1");
    let j: serde_json::Value = serde_json::from_str(&rep).expect("iperf3 JSON");
    let sum = &j["end"]["sum"];
    let (sent, lost) = (
        sum["packets"].as_u64().expect("packets"),
        sum["lost_packets"].as_u64().expect("lost_packets"),
    );
    assert!(
        sent > 1000,
        "20 Mbit/s of 1000-byte datagrams for 2 s (5000; fewer on a busy machine): {sent}"
    );
    let stats = t.stop();
    // Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors ...
    let field = |l: &str, i: usize| -> u64 {
        l.split_whitespace()
            .nth(i)
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    };
    let h2_drops = field(&after, 3) - field(&before, 3);
    let nb_drops = total(&stats, "dropped_packets")
        + port(&stats, "r1", "rx_dropped")
        + port(&stats, "r2", "rx_dropped");
    // Every datagram iperf3 saw lost is in a drop counter: netbatch's or the receiving
    // kernel's. (The kernel may count more: iperf3 reckons loss from gaps in the sequence
    // numbers it received, so datagrams dropped after the last one it got are not "lost"
    // to it; a busy machine makes that tail long.)
    assert!(
        lost <= nb_drops + h2_drops,
        "iperf3 lost {lost} of {sent}; netbatch dropped {nb_drops}, h2's kernel {h2_drops}: {stats:#}"
    );
    eprintln!(
        "iperf3: sent {sent} lost {lost}; netbatch dropped {nb_drops}, h2 {h2_drops}\nnetbatch's log:\n{}",
        t.log_text()
    );
    // What h1 sent reached netbatch's port, or the port's kernel ring dropped it.
    assert!(port(&stats, "r1", "rx_packets") + port(&stats, "r1", "rx_dropped") >= sent);
    // What iperf3 got (at least `sent - lost`: its tail losses count as received) left
    // netbatch on r2, or was dropped on the way and counted.
    assert!(port(&stats, "r2", "tx_packets") + nb_drops >= sent - lost);

    // An interface that goes away stops netbatch with an error naming the port, after
    // the counters.
    t.start();
    t.must("r", &format!("ip link del nb{s}r1"));
    let status = t.wait_exit("netbatch kept running without r1");
    let log = t.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("error: port r1: interface nb{s}r1 went away")),
        "{log}"
    );
    assert!(log.contains("packets: rx"), "counters printed: {log}");
    assert!(!log.contains("panicked"), "{log}");
    Some(first)
}

/// The IPv6 half of [`scenario`], with the kernel's tools on both hosts: `ping -6` to
/// netbatch's global and link-local addresses and through it, neighbour discovery both
/// ways (`ip -6 neigh` on both hosts shows netbatch's MACs), hop limit 1 and
/// `traceroute -6` answered with time exceeded, UDP and TCP over IPv6 between the hosts.
fn ipv6_through_netbatch(t: &Topo) {
    let s = &t.tag;
    t.must("h1", "ping -6 -c 3 -i 0.2 -W 2 2001:db8:1::1");
    // Fragmented both ways, as over IPv4.
    t.must("h1", "ping -6 -c 3 -i 0.2 -W 2 -s 3000 2001:db8:1::1");
    let r1_mac: netbatch_wire::ethernet::MacAddr = t
        .must("r", &format!("cat /sys/class/net/nb{s}r1/address"))
        .trim()
        .parse()
        .expect("r1's MAC");
    let r2_mac = t.must("r", &format!("cat /sys/class/net/nb{s}r2/address"));
    let ll = netbatch_wire::ipv6::link_local_from_mac(r1_mac);
    t.must("h1", &format!("ping -6 -c 3 -i 0.2 -W 2 {ll}%nb{s}a"));
    t.must("h1", "ping -6 -c 3 -i 0.2 -W 2 2001:db8:2::2");
    let n1 = t.must("h1", "ip -6 neigh show 2001:db8:1::1");
    assert!(
        n1.contains(&r1_mac.to_string()) && !n1.contains("FAILED"),
        "h1's kernel resolved netbatch by neighbour discovery: {n1}"
    );
    let n2 = t.must("h2", "ip -6 neigh show 2001:db8:2::1");
    assert!(
        n2.contains(r2_mac.trim()) && !n2.contains("FAILED"),
        "h2's kernel resolved netbatch: {n2}"
    );
    // netbatch resolved the hosts too: h2 answered its solicitation for 2001:db8:2::2.
    let (_, p) = t.exec("h1", "ping -6 -c 1 -t 1 -W 2 2001:db8:2::2");
    assert!(
        p.contains("From 2001:db8:1::1") && p.to_lowercase().contains("time exceeded"),
        "{p}"
    );
    let tr = t.must("h1", "traceroute -6 -n -q 1 -w 2 -m 3 2001:db8:2::2");
    let hops: Vec<&str> = tr.lines().skip(1).collect();
    assert!(
        hops.first().is_some_and(|l| l.contains("2001:db8:1::1"))
            && hops.get(1).is_some_and(|l| l.contains("2001:db8:2::2")),
        "{tr}"
    );
    // UDP over IPv6, h1 to a socket in h2: every datagram, intact.
    let server = t.python_server(
        "h2",
        "listen6",
        "import socket, select, time\n\
         s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
         s.bind(('2001:db8:2::2', 9876))\n\
         open('{ready}', 'w').close()\n\
         got = set()\n\
         end = time.time() + 3\n\
         while time.time() < end and len(got) < 20:\n\
         \x20   r, _, _ = select.select([s], [], [], 0.1)\n\
         \x20   if r:\n\
         \x20       d, a = s.recvfrom(2048)\n\
         \x20       if a[0] == '2001:db8:1::2' and d.startswith(b'six '):\n\
         \x20           got.add(d)\n\
         print(len(got))\n",
    );
    t.must(
        "h1",
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); [s.sendto(b'six %d' % i, ('2001:db8:2::2', 9876)) for i in range(20)]\"",
    );
    let out = server.wait_with_output().expect("listener ends");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "20",
        "every datagram"
    );
    // TCP over IPv6 between the hosts, 300 kB each way (the kernels send TSO super-frames
    // where the port carries them: GSO super-packets through netbatch).
    let srv = t.python_server(
        "h2",
        "tcp6-server",
        "import socket\n\
         l = socket.socket(socket.AF_INET6)\n\
         l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('2001:db8:2::2', 5006))\n\
         l.listen(1)\n\
         open('{ready}', 'w').close()\n\
         l.settimeout(10)\n\
         c, _ = l.accept()\n\
         c.settimeout(10)\n\
         got = b''\n\
         while True:\n\
         \x20   d = c.recv(65536)\n\
         \x20   if not d:\n\
         \x20       break\n\
         \x20   got += d\n\
         c.sendall(got[::-1])\n\
         c.close()\n",
    );
    let client = "import socket\n\
         s = socket.create_connection(('2001:db8:2::2', 5006), timeout=10)\n\
         data = bytes((i * 11) % 251 for i in range(300000))\n\
         s.sendall(data)\n\
         s.shutdown(socket.SHUT_WR)\n\
         got = b''\n\
         while True:\n\
         \x20   d = s.recv(65536)\n\
         \x20   if not d:\n\
         \x20       break\n\
         \x20   got += d\n\
         print('ok' if got == data[::-1] else 'bad %d' % len(got))\n";
    std::fs::write(t.dir.join("tcp6-client.py"), client).expect("script");
    let out = t.must(
        "h1",
        &format!("python3 {}", t.dir.join("tcp6-client.py").display()),
    );
    let _ = srv.wait_with_output();
    assert_eq!(out.trim(), "ok", "300 kB each way over IPv6, intact");
}

#[test]
fn af_packet_router_between_two_hosts() {
    scenario("af_packet", "p", 1, (&[0], &[0]));
}

#[test]
fn af_xdp_router_between_two_hosts() {
    scenario("af_xdp", "x", 1, (&[0], &[0]));
}

/// A counter of each worker of a run (of the scenario's first run: both families): a host
/// event counter, or the packets a stage processed.
fn per_worker(stats: &serde_json::Value, counter: &str) -> Vec<u64> {
    stats["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            w["host"][counter].as_u64().unwrap_or_else(|| {
                w["stages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|st| st["name"] == counter)
                    .filter_map(|st| st["packets"].as_u64())
                    .sum()
            })
        })
        .collect()
}

/// Two workers, and the answers to one worker's questions received by the other, by
/// construction: worker 1 alone receives from r1 (h1's side), worker 0 alone from r2 (h2's
/// side). Traffic from h1 is forwarded by worker 1, which asks for h2's address (ARP, then
/// neighbour discovery); h2's answers arrive on r2, at worker 0, which never asked. No hash
/// decides it, so the case is the same on every machine and boot.
#[test]
fn af_packet_router_answers_reach_the_worker_that_asked() {
    let Some(stats) = scenario("af_packet", "c", 2, (&[1], &[0])) else {
        return;
    };
    for (asked, answered) in [
        ("arp_requests_out", "arp-input"),
        ("nd_solicits_out", "nd-input"),
    ] {
        let (q, a) = (per_worker(&stats, asked), per_worker(&stats, answered));
        eprintln!("{asked} per worker {q:?}, {answered} {a:?}");
        assert!(
            q[1] > 0 && a[0] > 0,
            "worker 1 asked ({asked} {q:?}) and worker 0 received answers ({answered} {a:?})"
        );
    }
}

/// Two workers receive from each port (the kernel's fanout spreads the flows by a hash
/// seeded at boot), both transmit on their own sockets: the same behaviour, seen from the
/// hosts. The live witness beside the steered case above.
#[test]
fn af_packet_router_with_two_workers() {
    scenario("af_packet", "w", 2, (&[0, 1], &[0, 1]));
}

/// Frames for a link that is down are dropped as `link_down`, whichever end went down,
/// and none is counted as sent: `ip link set down` on the peer's end (this end loses its
/// carrier) and then on netbatch's own end, each while h1 sends `N` datagrams through
/// r2. Each change is logged and counted (`links` in the counters), nothing is filed as
/// `tx_ring_full`, r2 sends nothing while down, the kernel's transmit drops on r2 (its
/// own counter, read in the namespace) are what netbatch reports, and after the link
/// returns traffic flows again.
fn link_flaps(kind: &str, id: &str) {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    let mut t = Topo::new(kind, id, 1, (&[0], &[0]));
    let s = t.tag.clone();
    let sock = t.dir.join("ctl.sock");
    let conf = t.dir.join("router.toml");
    let text = std::fs::read_to_string(&conf).expect("config");
    std::fs::write(
        &conf,
        format!("{text}\n[control]\nsocket = \"{}\"\n", sock.display()),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock);
    t.must("h1", "ping -c 2 -W 1 198.51.100.2 >/dev/null");
    const N: u32 = 1000;
    let send = |t: &Topo, n: u32| {
        let py = format!(
            "import socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for i in range({n}):\n\
             \x20   s.sendto(b'flap %d' % i, ('198.51.100.2', 9))\n\
             \x20   if i % 50 == 49: time.sleep(0.005)\n"
        );
        std::fs::write(t.dir.join("flap.py"), py).expect("script");
        t.must(
            "h1",
            &format!("python3 {}", t.dir.join("flap.py").display()),
        );
        // Let the last ones cross.
        std::thread::sleep(Duration::from_millis(300));
    };
    let wait_log = |t: &Topo, what: &str, nth: usize| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.log_text().matches(what).count() < nth {
            assert!(
                Instant::now() < deadline,
                "no {what:?} logged:\n{}",
                t.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let kernel_dropped = |t: &Topo| -> u64 {
        t.must(
            "r",
            &format!("cat /sys/class/net/nb{s}r2/statistics/tx_dropped"),
        )
        .trim()
        .parse()
        .expect("a counter")
    };
    let r2 = |c: &serde_json::Value, key: &str| {
        c["totals"]["ports"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == "r2"))
            .and_then(|p| p[key].as_u64())
            .unwrap_or(0)
    };
    let kdrop0 = kernel_dropped(&t);
    for (phase, down, up) in [
        (
            "the peer's end down",
            ("h2", format!("ip link set nb{s}b down")),
            // (A link going down takes its routes with it: h2's way back is restored.)
            (
                "h2",
                format!("ip link set nb{s}b up; ip route replace default via 198.51.100.1"),
            ),
        ),
        (
            "netbatch's own end down",
            ("r", format!("ip link set nb{s}r2 down")),
            ("r", format!("ip link set nb{s}r2 up")),
        ),
    ] {
        let nth = if phase.starts_with("the peer") { 1 } else { 2 };
        t.must(down.0, &down.1);
        let why = if nth == 1 {
            "no carrier"
        } else {
            "administratively down"
        };
        wait_log(&t, &format!("link nb{s}r2 down ({why})"), 1);
        let before = c.json("show counters");
        send(&t, N);
        let after = c.json("show counters");
        let d = |k: &str| total(&after, k) - total(&before, k);
        let dr = |r: &str| drops(&after, r) - drops(&before, r);
        assert_eq!(
            r2(&after, "tx_packets"),
            r2(&before, "tx_packets"),
            "{phase}: r2 sent nothing"
        );
        assert_eq!(dr("tx_ring_full"), 0, "{phase}: {after:#}");
        // Every datagram, and whatever ARP request netbatch made for the link, is
        // dropped as link_down.
        let link_down = dr("link_down");
        assert!(
            link_down >= u64::from(N) && link_down <= u64::from(N) + d("originated_packets"),
            "{phase}: {link_down} link_down for {N} datagrams: {after:#}"
        );
        assert_eq!(
            r2(&after, "tx_link_down") - r2(&before, "tx_link_down"),
            link_down,
            "{phase}"
        );
        t.must(up.0, &up.1);
        wait_log(&t, &format!("link nb{s}r2 up"), nth);
    }
    // The link is back: traffic flows again.
    let rx_h2 = |t: &Topo| -> u64 {
        t.must(
            "h2",
            &format!("cat /sys/class/net/nb{s}b/statistics/rx_packets"),
        )
        .trim()
        .parse()
        .expect("a counter")
    };
    let (ok, _) = t.exec("h1", "ping -c 3 -W 1 198.51.100.2 >/dev/null");
    assert!(ok, "h2 answers again:\n{}", t.log_text());
    let h2_before = rx_h2(&t);
    send(&t, 200);
    assert!(rx_h2(&t) - h2_before >= 200, "the datagrams arrive again");
    let links = c.json("show links");
    let link = links
        .as_array()
        .and_then(|a| a.iter().find(|l| l["port"] == "r2"))
        .unwrap_or_else(|| panic!("{links:#}"))
        .clone();
    // Down, up, down, up: four at least (a link set up may first come back without its
    // carrier, a change of its own).
    assert!(link["changes"].as_u64().unwrap_or(0) >= 4, "{links:#}");
    assert_eq!(link["up"], true, "{links:#}");
    let kdrop = kernel_dropped(&t) - kdrop0;
    assert_eq!(
        link["kernel_tx_dropped"], kdrop,
        "the interface's own tx_dropped"
    );
    let stats = t.stop();
    assert_conserved(&stats);
    if kind == "af_xdp" {
        // What the kernel dropped of what the queues gave it is booked as dropped.
        assert_eq!(drops(&stats, "kernel_tx_dropped"), kdrop, "{stats:#}");
    }
    assert_eq!(drops(&stats, "tx_ring_full"), 0, "{stats:#}");
}

#[test]
fn af_packet_link_flaps_are_counted_not_hidden() {
    link_flaps("af_packet", "lp");
}

#[test]
fn af_xdp_link_flaps_are_counted_not_hidden() {
    link_flaps("af_xdp", "lx");
}

/// Operating a running router through its control socket, its metrics endpoint and its
/// signals, while UDP floods cross it (`netbatch flood`, counted by sockets in the
/// receiving hosts):
///
/// ```text
///  h1 192.0.2.2 ── r1 [ netbatch ] r2 ── h2 198.51.100.2  (198.18.0.1 on lo)
///                                  r3 ── h3 203.0.113.2   (198.18.0.1 on lo)
/// ```
///
/// The flood goes to 198.18.0.1 (RFC 2544's benchmarking range), which both h2 and h3
/// answer for: which host counts a datagram says which next hop netbatch chose.
#[test]
fn operating_a_running_router() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    let missing: Vec<&str> = ["curl", "tshark", "setpriv"]
        .into_iter()
        .filter(|t| !sh(&format!("command -v {t}")).status.success())
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/setup");
    let pyprom = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    assert!(
        sh(&format!("{pyprom} -c 'import prometheus_client'"))
            .status
            .success(),
        "{pyprom} lacks prometheus_client: run scripts/setup (python3-prometheus-client)"
    );
    let mut t = Topo::hosts("o", &["h1", "h2", "h3"]);
    let s = t.tag.clone();
    let dir = t.dir.clone();
    t.must(
        "h1",
        &format!("ip addr add 192.0.2.2/24 dev nb{s}a; ip route add default via 192.0.2.1"),
    );
    t.must("h2", &format!("ip addr add 198.51.100.2/24 dev nb{s}b; ip route add default via 198.51.100.1; ip addr add 198.18.0.1/32 dev lo"));
    t.must("h3", &format!("ip addr add 203.0.113.2/24 dev nb{s}c; ip route add default via 203.0.113.1; ip addr add 198.18.0.1/32 dev lo"));
    let sock = dir.join("ctl.sock");
    let ports = three_ports(&s, "rx_workers = [0, 1]\n");
    let config = |routes_file: &str, extra: &str| {
        format!(
            r#"
route_files = ["{routes_file}"]

[datapath]
mode = "list"
idle_spin_us = 50
workers = 2

{ports}{extra}
[control]
socket = "{sock}"

[metrics]
listen = "127.0.0.1:9433"
"#,
            sock = sock.display()
        )
    };
    std::fs::write(dir.join("routes.txt"), "198.18.1.0/24 via 198.51.100.2\n").expect("routes");
    let echo = |port: u16| format!("\n[[app]]\nkind = \"udp-echo\"\nbind = \"192.0.2.1:{port}\"\n");
    std::fs::write(dir.join("router.toml"), config("routes.txt", &echo(7))).expect("config");
    t.start();
    let bin = env!("CARGO_BIN_EXE_netbatch");
    let c = Ctl(sock.clone());
    let (ctl, ctl_ok, json) = (|a: &str| c.run(a), |a: &str| c.ok(a), |a: &str| c.json(a));

    // Sinks in h2 and h3 count the flood's datagrams; h1 floods through r1.
    let mut flows = Flows::start(&t, &["h2", "h3"]);
    let count = |n: &str| flows.count(n);
    let flood = |seconds: f64| flows.flood(seconds);
    let h3_mac = t
        .must("h3", &format!("cat /sys/class/net/nb{s}c/address"))
        .trim()
        .to_string();
    // Let the last datagrams land and the sinks write their counts.
    let settle = || std::thread::sleep(Duration::from_millis(500));

    // What the kernel's receive rings of r1 dropped before netbatch saw it (a busy
    // machine): counted by the port, never by the stages.
    let ring_drops = |v: &serde_json::Value| -> u64 {
        v["ports"][0]["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .map(|q| q["rx_dropped"].as_u64().unwrap_or(0))
            .sum()
    };

    // 1. No route yet: the flood is dropped as no_route, and `show errors` says so.
    let rings_before = ring_drops(&json("show ports"));
    let sent0 = flood(0.5).join().expect("flood");
    settle();
    let errs = json("show errors");
    let no_route = errs["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .find(|e| e["reason"] == "no_route")
        .unwrap_or_else(|| panic!("no_route counted: {errs:#}"));
    // Each datagram is dropped as no_route or answered with a host unreachable (as many
    // as the ICMP rate limit lets out).
    let c = json("show counters");
    let answered: u64 = c["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["host"]["icmp_errors_out"].as_u64().unwrap_or(0))
        .sum();
    let ring_dropped0 = ring_drops(&json("show ports")) - rings_before;
    assert_eq!(
        no_route["count"].as_u64().unwrap_or(0) + answered + ring_dropped0,
        sent0,
        "{errs:#} ({ring_dropped0} dropped by r1's receive rings)"
    );
    assert!(
        ctl_ok("show errors").contains("no route"),
        "descriptions shown"
    );

    // 2. A route through h2, and h3 as a static neighbour; then while the flood runs,
    //    `route replace` moves it to h3: every datagram reaches one of them.
    ctl_ok("route add 198.18.0.0/24 via 198.51.100.2");
    ctl_ok(&format!("neigh add 203.0.113.2 lladdr {h3_mac} dev r3"));
    let ports_at_start = json("show ports");
    // Long enough that the checks below and the replace fall inside it on a loaded
    // machine (each check runs the client once); the replace is refused below if the
    // flood has already ended, rather than passing or failing by the clock.
    let running = flood(6.0);
    let deadline = Instant::now() + Duration::from_secs(3);
    while count("h2") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = ctl_ok("show runtime");
    let fwd = rt
        .lines()
        .find(|l| l.starts_with("ip4-forward"))
        .unwrap_or_else(|| panic!("ip4-forward runs:\n{rt}"));
    assert!(
        fwd.split_whitespace()
            .nth(2)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            > 0,
        "{rt}"
    );
    let ports = json("show ports");
    let r2_tx: u64 = ports["ports"][1]["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["tx_packets"].as_u64().unwrap_or(0))
        .sum();
    assert!(r2_tx > 0 && ports["ports"][1]["link"] == "up", "{ports:#}");
    assert!(
        ctl_ok("show routes").contains("198.18.0.0/24 via 198.51.100.2 dev r2"),
        "the live route is shown"
    );
    let neigh = ctl_ok("show neigh");
    assert!(
        neigh.contains("198.51.100.2 dev r2 lladdr")
            && neigh.contains(&format!("203.0.113.2 dev r3 lladdr {h3_mac} PERMANENT")),
        "{neigh}"
    );
    let h2_before = count("h2");
    assert!(
        !running.is_finished(),
        "the flood ended before the route was replaced: the checks took over 6 s"
    );
    ctl_ok("route replace 198.18.0.0/24 via 203.0.113.2");
    let sent1 = running.join().expect("flood");
    settle();
    // What the rings dropped is counted by the port, not lost by the replace.
    let ring_dropped = ring_drops(&json("show ports")) - ring_drops(&ports_at_start);
    let (h2, h3) = (count("h2"), count("h3"));
    assert!(
        h2 > h2_before && h2_before > 0 && h3 > 0,
        "both next hops carried part: h2 {h2} h3 {h3}"
    );
    let (errors, ports_now) = (ctl_ok("show errors"), ctl_ok("show ports"));
    assert_eq!(
        h2 + h3 + ring_dropped,
        sent1,
        "no datagram lost across the route replace: h2 {h2} + h3 {h3} + {ring_dropped} dropped by the receive ring, of {sent1}\n{errors}\n{ports_now}"
    );

    // 3. A rule added while the flood runs blocks it at once: every datagram either
    //    reached h3 before the rule or was dropped by it, and none crosses after it.
    let ports_at_start = json("show ports");
    let running = flood(1.5);
    std::thread::sleep(Duration::from_millis(600));
    ctl_ok("rule add forward proto udp dport 9 action drop");
    std::thread::sleep(Duration::from_millis(100));
    let h3_at_rule = count("h3");
    let sent2 = running.join().expect("flood");
    settle();
    assert_eq!(count("h2"), h2, "nothing went to h2");
    assert_eq!(
        count("h3"),
        h3_at_rule,
        "nothing crosses the rule once it is in"
    );
    let rules = json("show rules");
    let hits = rules["hooks"][0]["rules"][0]["hits"].as_u64().unwrap_or(0);
    assert!(
        hits > 0 && h3_at_rule > h3,
        "the flood ran on both sides of the rule: {rules:#}"
    );
    let ring_dropped = ring_drops(&json("show ports")) - ring_drops(&ports_at_start);
    assert_eq!(
        h3_at_rule - h3 + hits + ring_dropped,
        sent2,
        "every datagram delivered, dropped by the rule, or by the receive ring"
    );
    ctl_ok("rule del forward 0");
    // A neighbour deleted live is gone (h3 is learned again by ARP when needed).
    ctl_ok("neigh del 203.0.113.2 dev r3");
    assert!(
        !ctl_ok("show neigh").contains("PERMANENT"),
        "the static entry is gone"
    );
    let softnet = json("show softnet");
    assert_eq!(
        softnet["softnet"].as_array().map(Vec::len),
        Some(2),
        "one row per worker"
    );

    // 4. Reload: a changed route file is applied; a broken configuration is refused and
    //    changes nothing.
    let routes_before = ctl_ok("show routes");
    assert!(
        routes_before.contains("198.18.1.0/24 via 198.51.100.2 dev r2"),
        "{routes_before}"
    );
    std::fs::write(
        dir.join("routes.txt"),
        "198.18.1.0/24 via 203.0.113.2\nblackhole 198.18.2.0/24\n",
    )
    .expect("routes");
    ctl_ok("reload");
    let routes = ctl_ok("show routes");
    assert!(
        routes.contains("198.18.1.0/24 via 203.0.113.2 dev r3")
            && routes.contains("blackhole 198.18.2.0/24"),
        "{routes}"
    );
    // The live route added by hand is not in the file: the reload removed it.
    assert!(!routes.contains("198.18.0.0/24"), "{routes}");
    // Applications change live: the echo moves from port 7 to port 8.
    assert_eq!(udp_echo_client(&t, "h1", "192.0.2.1", 7, 3), 3);
    std::fs::write(dir.join("router.toml"), config("routes.txt", &echo(8))).expect("config");
    assert!(ctl_ok("reload").contains("application"), "apps restarted");
    assert_eq!(udp_echo_client(&t, "h1", "192.0.2.1", 8, 3), 3);
    assert_eq!(udp_echo_client(&t, "h1", "192.0.2.1", 7, 1), 0);
    assert!(ctl_ok("show sockets").contains("192.0.2.1:8"));
    std::fs::write(
        dir.join("router.toml"),
        config("routes.txt", "\n[[port]]\nname = \"r4\"\nkind = \"af_packet\"\ninterface = \"lo\"\naddresses = [\"192.0.2.77/99\"]\n"),
    )
    .expect("broken config");
    let (ok, why) = ctl("reload");
    assert!(
        !ok && why.contains("port[3].addresses[0]") && why.contains("nothing changed"),
        "{why}"
    );
    assert_eq!(
        ctl_ok("show routes"),
        routes,
        "a refused reload changes nothing"
    );
    std::fs::write(dir.join("router.toml"), config("routes.txt", &echo(8))).expect("config");
    // SIGHUP reloads as `reload` does; SIGUSR1 writes the counters to the log.
    std::fs::write(dir.join("routes.txt"), "198.18.1.0/24 via 198.51.100.2\n").expect("routes");
    let pid = t.child.as_ref().expect("running").id();
    sh(&format!("kill -HUP {pid}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ctl_ok("show routes").contains("198.18.1.0/24 via 198.51.100.2 dev r2") {
        assert!(
            Instant::now() < deadline,
            "SIGHUP reloaded:\n{}",
            t.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sh(&format!("kill -USR1 {pid}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.log_text().contains("SIGUSR1: counters") {
        assert!(
            Instant::now() < deadline,
            "SIGUSR1 logged the counters:\n{}",
            t.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // 5. Trace a ping: the stages it took, and the pcapng with the paths as comments.
    ctl_ok("trace add --count 4 --match 'proto icmp'");
    t.must("h1", "ping -c 1 -W 2 192.0.2.1");
    let pcap = dir.join("trace.pcapng");
    let tr = ctl_ok(&format!("trace show --pcapng {}", pcap.display()));
    eprintln!("netbatch show runtime (during the flood):\n{rt}\nnetbatch trace show:\n{tr}");
    for stage in [
        "eth-input",
        "ip4-input",
        "ip4-route",
        "ip4-local",
        "icmp-input",
    ] {
        assert!(tr.contains(stage), "the ping's path has {stage}:\n{tr}");
    }
    let comments = sh(&format!(
        "tshark -r {} -T fields -e frame.comment",
        pcap.display()
    ));
    let text = String::from_utf8_lossy(&comments.stdout);
    assert!(
        comments.status.success() && text.contains("ip4-input"),
        "tshark reads the comments: {text}{}",
        String::from_utf8_lossy(&comments.stderr)
    );

    // 6. /metrics parses as Prometheus text (the Prometheus project's own parser) and
    //    agrees with `show ports`, read just before and after.
    let before = json("show ports");
    let scrape = t.must("r", "curl -sf http://127.0.0.1:9433/metrics");
    let after = json("show ports");
    std::fs::write(dir.join("metrics.txt"), &scrape).expect("scrape");
    let parsed = sh(&format!(
        "{pyprom} -c \"import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\nt=0\nfor f in p(open('{}').read()):\n  for s in f.samples:\n    if s.name=='netbatch_port_rx_packets_total' and s.labels.get('port')=='r1': t+=s.value\nprint(int(t))\"",
        dir.join("metrics.txt").display()
    ));
    assert!(
        parsed.status.success(),
        "the scrape parses: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let scraped: u64 = String::from_utf8_lossy(&parsed.stdout)
        .trim()
        .parse()
        .expect("a number");
    let r1_rx = |v: &serde_json::Value| -> u64 {
        v["ports"][0]["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .map(|q| q["rx_packets"].as_u64().unwrap_or(0))
            .sum()
    };
    assert!(
        r1_rx(&before) <= scraped
            && scraped <= r1_rx(&after)
            && scraped + ring_drops(&after) >= sent0 + sent1 + sent2,
        "show {} .. {} against /metrics {scraped}",
        r1_rx(&before),
        r1_rx(&after)
    );
    // Drops by reason: the scrape's filter_forward count is `show errors`'s and the
    // rule's hits (nothing drops for that reason any more).
    let drops = sh(&format!(
        "{pyprom} -c \"from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\nt=0\nfor f in p(open('{}').read()):\n  for s in f.samples:\n    if s.name=='netbatch_drops_total' and s.labels.get('reason')=='filter_forward': t+=s.value\nprint(int(t))\"",
        dir.join("metrics.txt").display()
    ));
    let scraped_drops: u64 = String::from_utf8_lossy(&drops.stdout)
        .trim()
        .parse()
        .expect("a number");
    let shown_drops = json("show errors")["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|e| e["reason"] == "filter_forward")
        .map(|e| e["count"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!((scraped_drops, shown_drops), (hits, hits));

    // 7. Someone else is refused: the kernel at connect (mode 0600), and the CLI says so.
    let mode = sh(&format!("stat -c %a {}", sock.display()));
    assert_eq!(String::from_utf8_lossy(&mode.stdout).trim(), "600");
    let copy = dir.join("netbatch-cli");
    std::fs::copy(bin, &copy).expect("copy of the binary");
    // `netbatch show runtime` as nobody: its error output.
    let as_nobody = || {
        let o = sh(&format!(
            "setpriv --reuid=65534 --regid=65534 --clear-groups {} show runtime --socket {}",
            copy.display(),
            sock.display()
        ));
        assert!(!o.status.success(), "nobody was served");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = as_nobody();
    assert!(err.contains("permission denied"), "{err}");
    // With the file opened to everyone by hand, the server's own check of the peer's
    // credentials still refuses.
    sh(&format!("chmod 666 {}", sock.display()));
    let err = as_nobody();
    assert!(err.contains("permission denied: uid 65534"), "{err}");
    sh(&format!("chmod 600 {}", sock.display()));

    // 8. `clear counters`: show counts from then on; the final counters still add up.
    ctl_ok("clear counters");
    let cleared = json("show errors");
    assert!(
        cleared["errors"].as_array().is_some_and(Vec::is_empty),
        "{cleared:#}"
    );
    flows.stop();
    let stats = t.stop();
    assert_conserved(&stats);
    assert!(!sock.exists(), "the socket is removed at the stop");
}

/// The control socket of a running netbatch, through the CLI as an operator uses it.
struct Ctl(PathBuf);

impl Ctl {
    /// `netbatch ARGS --socket S`: success and what it printed.
    fn run(&self, args: &str) -> (bool, String) {
        let o = sh(&format!(
            "{} {args} --socket {}",
            env!("CARGO_BIN_EXE_netbatch"),
            self.0.display()
        ));
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    fn ok(&self, args: &str) -> String {
        let (ok, out) = self.run(args);
        assert!(ok, "netbatch {args}:\n{out}");
        out
    }

    fn json(&self, args: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&format!("{args} --json"))).expect("JSON answer")
    }
}

/// A UDP flood from h1 through r1 to 198.18.0.1 (RFC 2544's range), counted by sockets
/// in the hosts that answer for that address.
struct Flows {
    dir: PathBuf,
    sinks: Vec<Child>,
    /// The flood's command, but for its duration.
    cmd: String,
}

impl Flows {
    /// Sinks in `hosts` (each with 198.18.0.1 on its loopback), counting into files.
    fn start(t: &Topo, hosts: &[&str]) -> Self {
        let dir = t.dir.clone();
        let mut sinks = Vec::new();
        for n in hosts {
            let py = format!(
                "import os, socket, time\n\
                 s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                 s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)\n\
                 s.bind(('198.18.0.1', 9))\n\
                 s.settimeout(0.05)\n\
                 out = '{d}/{n}.count'\n\
                 open(out, 'w').write('0')\n\
                 n, last, end, ports = 0, 0.0, time.time() + 120, set()\n\
                 while time.time() < end and not os.path.exists('{d}/stop'):\n\
                 \x20   try:\n\
                 \x20       _, a = s.recvfrom(2048)\n\
                 \x20       n += 1\n\
                 \x20       ports.add(a[1])\n\
                 \x20   except socket.timeout:\n\
                 \x20       pass\n\
                 \x20   if os.path.exists(out + '.forget'):\n\
                 \x20       ports = set()\n\
                 \x20       os.remove(out + '.forget')\n\
                 \x20   if time.time() - last > 0.05:\n\
                 \x20       open(out + '.tmp', 'w').write(str(n))\n\
                 \x20       os.replace(out + '.tmp', out)\n\
                 \x20       open(out + '.ports.tmp', 'w').write(' '.join(map(str, sorted(ports))))\n\
                 \x20       os.replace(out + '.ports.tmp', out + '.ports')\n\
                 \x20       last = time.time()\n",
                d = dir.display()
            );
            std::fs::write(dir.join(format!("{n}.py")), py).expect("sink script");
            sinks.push(
                Command::new("ip")
                    .args(["netns", "exec", &t.ns(n), "python3"])
                    .arg(dir.join(format!("{n}.py")))
                    .spawn()
                    .expect("sink"),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !hosts
            .iter()
            .all(|n| dir.join(format!("{n}.count")).exists())
        {
            assert!(Instant::now() < deadline, "sinks did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = &t.tag;
        let r1_mac = t.must("r", &format!("cat /sys/class/net/nb{s}r1/address"));
        let cmd = format!(
            "ip netns exec {} {} flood --interface nb{s}a --dst-mac {} --src 192.0.2.2 --dst 198.18.0.1 --flows 64 --rate 4000 --json --seconds",
            t.ns("h1"),
            env!("CARGO_BIN_EXE_netbatch"),
            r1_mac.trim()
        );
        Self { dir, sinks, cmd }
    }

    /// The flows (source ports) host `n`'s sink has seen, sorted.
    fn flows_seen(&self, n: &str) -> Vec<u16> {
        std::fs::read_to_string(self.dir.join(format!("{n}.count.ports")))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Makes host `n`'s sink forget the flows it has seen, and waits until it has.
    fn forget_flows(&self, n: &str) {
        let f = self.dir.join(format!("{n}.count.forget"));
        std::fs::write(&f, "").expect("forget");
        let deadline = Instant::now() + Duration::from_secs(5);
        while f.exists() {
            assert!(Instant::now() < deadline, "sink {n} did not forget");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Datagrams host `n`'s sink has counted.
    fn count(&self, n: &str) -> u64 {
        std::fs::read_to_string(self.dir.join(format!("{n}.count")))
            .ok()
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Floods for `seconds` (in the background); the handle gives the frames sent.
    fn flood(&self, seconds: f64) -> std::thread::JoinHandle<u64> {
        let cmd = format!("{} {seconds}", self.cmd);
        std::thread::spawn(move || {
            let o = sh(&cmd);
            assert!(
                o.status.success(),
                "{cmd}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v: serde_json::Value =
                serde_json::from_slice(&o.stdout).expect("flood prints JSON");
            v["sent"].as_u64().expect("sent")
        })
    }

    fn stop(&mut self) {
        let _ = std::fs::write(self.dir.join("stop"), "");
        for s in &mut self.sinks {
            let _ = s.wait();
        }
    }
}

impl Drop for Flows {
    fn drop(&mut self) {
        self.stop();
    }
}

/// netbatch follows the kernel routing table of a control namespace (`[linux]`), where
/// `ip route` plays the routing daemon: routes added, replaced and deleted there move a
/// flood crossing netbatch (counted by the receiving hosts' sockets), and a full resync
/// while the flood runs changes nothing and loses nothing.
///
/// ```text
///  h1 ── r1 [ netbatch ] r2 ── h2        namespace cp: r1, r2, r3 (veth, up) with the
///                        r3 ── h3        ports' addresses; `ip route` changes its table
/// ```
#[test]
fn mirroring_the_kernel_routing_table() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    let t = Topo::hosts("m", &["h1", "h2", "h3"]);
    let mut t = t;
    let s = t.tag.clone();
    let dir = t.dir.clone();
    t.must(
        "h1",
        &format!("ip addr add 192.0.2.2/24 dev nb{s}a; ip route add default via 192.0.2.1"),
    );
    t.must("h2", &format!("ip addr add 198.51.100.2/24 dev nb{s}b; ip route add default via 198.51.100.1; ip addr add 198.18.0.1/32 dev lo"));
    t.must("h3", &format!("ip addr add 203.0.113.2/24 dev nb{s}c; ip route add default via 203.0.113.1; ip addr add 198.18.0.1/32 dev lo"));
    // The control namespace: interfaces named as netbatch's, with their addresses.
    assert!(sh(&format!("ip netns add {}", t.ns("cp"))).status.success());
    for (n, a) in [
        ("r1", "192.0.2.1/24"),
        ("r2", "198.51.100.1/24"),
        ("r3", "203.0.113.1/24"),
    ] {
        t.must(
            "cp",
            &format!("ip link add {n} type veth peer name {n}p && ip addr add {a} dev {n} && ip link set {n}p up && ip link set {n} up"),
        );
    }
    let sock = dir.join("ctl.sock");
    let ports = three_ports(&s, "");
    std::fs::write(
        dir.join("router.toml"),
        format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\n{ports}\n[linux]\nnamespace = \"{}\"\n\n[control]\nsocket = \"{}\"\n",
            t.ns("cp"),
            sock.display()
        ),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock.clone());
    let mut flows = Flows::start(&t, &["h2", "h3"]);
    let settle = || std::thread::sleep(Duration::from_millis(500));
    let wait_for = |what: &str, present: bool| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while c.ok("show routes").contains(what) != present {
            assert!(
                Instant::now() < deadline,
                "show routes {} '{what}':\n{}",
                if present { "has" } else { "lacks" },
                c.ok("show routes")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let ring_drops = || -> u64 {
        c.json("show ports")["ports"][0]["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .map(|q| q["rx_dropped"].as_u64().unwrap_or(0))
            .sum()
    };

    // A route added in the kernel carries the flood to h2.
    t.must("cp", "ip route add 198.18.0.0/24 via 198.51.100.2");
    wait_for("198.18.0.0/24 via 198.51.100.2 dev r2", true);
    let dropped0 = ring_drops();
    let sent = flows.flood(1.0).join().expect("flood");
    settle();
    assert_eq!(
        flows.count("h2") + ring_drops() - dropped0,
        sent,
        "all to h2"
    );
    assert_eq!(flows.count("h3"), 0);

    // Replaced in the kernel while the flood runs: it moves to h3, nothing lost; a full
    // resync in the middle changes nothing.
    let (h2, dropped0) = (flows.count("h2"), ring_drops());
    // Long enough for the replace to reach netbatch while it runs on a loaded machine;
    // if it has ended first, that is said rather than blamed on the mirror.
    let running = flows.flood(5.0);
    std::thread::sleep(Duration::from_millis(500));
    t.must("cp", "ip route replace 198.18.0.0/24 via 203.0.113.2");
    wait_for("198.18.0.0/24 via 203.0.113.2 dev r3", true);
    assert!(
        !running.is_finished(),
        "the flood ended before the replaced route was mirrored (over 4.5 s)"
    );
    std::thread::sleep(Duration::from_millis(300));
    let resync = c.json("linux resync");
    assert_eq!(
        (
            resync["route_changes"].as_u64(),
            resync["neighbour_changes"].as_u64()
        ),
        (Some(0), Some(0)),
        "{resync:#}"
    );
    let sent = running.join().expect("flood");
    settle();
    let (h2_new, h3) = (flows.count("h2") - h2, flows.count("h3"));
    assert!(
        h2_new > 0 && h3 > 0,
        "both carried part: h2 {h2_new} h3 {h3}"
    );
    assert_eq!(
        h2_new + h3 + ring_drops() - dropped0,
        sent,
        "nothing lost across the replace and the resync"
    );

    // ECMP from the kernel: a route with two next hops spreads the flood's 64 flows over
    // both hosts and keeps each flow on one.
    t.must(
        "cp",
        "ip route replace 198.18.0.0/24 nexthop via 198.51.100.2 weight 1 nexthop via 203.0.113.2 weight 1",
    );
    wait_for("nexthop via 198.51.100.2 dev r2 weight 1", true);
    flows.forget_flows("h2");
    flows.forget_flows("h3");
    let _ = flows.flood(1.0).join().expect("flood");
    settle();
    let (on_h2, on_h3) = (flows.flows_seen("h2"), flows.flows_seen("h3"));
    assert!(
        on_h2.len() >= 8 && on_h3.len() >= 8 && on_h2.len() + on_h3.len() == 64,
        "64 flows spread over both paths: {} on h2, {} on h3",
        on_h2.len(),
        on_h3.len()
    );
    assert!(
        on_h2.iter().all(|p| !on_h3.contains(p)),
        "no flow on both paths"
    );

    // Deleted in the kernel: no route; the flood is dropped (or answered) as no_route.
    t.must("cp", "ip route del 198.18.0.0/24");
    wait_for("198.18.0.0/24", false);
    let h3 = flows.count("h3");
    let _ = flows.flood(0.3).join().expect("flood");
    settle();
    assert_eq!(flows.count("h3"), h3);
    let linux = c.json("show linux");
    assert!(
        linux["routes_added"].as_u64() >= Some(1)
            && linux["routes_deleted"].as_u64() >= Some(1)
            && linux["errors"] == 0,
        "{linux:#}"
    );
    assert!(c.ok("show errors").contains("no_route"));
    flows.stop();
    let stats = t.stop();
    assert_conserved(&stats);
}

/// The ports r1, r2, r3 of the three-host topologies (af_packet on the veth ends in
/// namespace r, TEST-NET addresses), each with `extra` keys.
fn three_ports(s: &str, extra: &str) -> String {
    [("r1", "192.0.2.1/24"), ("r2", "198.51.100.1/24"), ("r3", "203.0.113.1/24")]
        .iter()
        .map(|(n, a)| {
            format!("\n[[port]]\nname = \"{n}\"\nkind = \"af_packet\"\ninterface = \"nb{s}{n}\"\naddresses = [\"{a}\"]\n{extra}")
        })
        .collect()
}

/// A BIRD 2 daemon in one of a test's namespaces, in the foreground as a child process,
/// with its configuration, control socket, pid file and log in the test's directory
/// (never the system's /etc/bird or /run/bird). Stopped with SIGTERM (SIGKILL after 5 s)
/// when dropped, so a failing test leaves no daemon behind.
struct Bird {
    name: String,
    sock: PathBuf,
    log: PathBuf,
    err: PathBuf,
    child: Option<Child>,
}

impl Bird {
    /// Checks that `bird` and `birdc` (Debian's bird2) can be run.
    fn need() {
        let missing: Vec<&str> = ["bird", "birdc"]
            .into_iter()
            .filter(|t| !sh(&format!("command -v {t}")).status.success())
            .collect();
        assert!(
            missing.is_empty(),
            "missing {missing:?} on PATH (Debian's bird2 puts them in /usr/sbin): run scripts/setup (it installs bird2)"
        );
    }

    /// Starts BIRD in namespace `n` with configuration `conf` (a `log` line to its own
    /// file is put in front), and waits (5 s at most) until its socket answers.
    fn start(t: &Topo, n: &str, conf: &str) -> Self {
        let file = |ext: &str| t.dir.join(format!("bird-{n}.{ext}"));
        let (cfg, sock, pid, log, err) = (
            file("conf"),
            file("ctl"),
            file("pid"),
            file("log"),
            file("err"),
        );
        std::fs::write(&cfg, format!("log \"{}\" all;\n{conf}", log.display()))
            .expect("BIRD config written");
        // Parsed first (`-p`), so a mistake in it is reported as such.
        let o = Command::new("bird")
            .arg("-p")
            .arg("-c")
            .arg(&cfg)
            .output()
            .expect("bird runs");
        assert!(
            o.status.success(),
            "BIRD refuses {}:\n{}{conf}",
            cfg.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &t.ns(n), "bird", "-f", "-c"])
            .arg(&cfg)
            .arg("-s")
            .arg(&sock)
            .arg("-P")
            .arg(&pid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("BIRD's stderr file"))
            .spawn()
            .expect("bird starts");
        let mut b = Self {
            name: n.to_string(),
            sock,
            log,
            err,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (ok, status) = b.birdc("show status");
            if ok && status.contains("Daemon is up and running") {
                return b;
            }
            if let Some(c) = b.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!("BIRD in {n} exited ({st}):\n{}", b.logs());
            }
            assert!(
                Instant::now() < deadline,
                "BIRD in {n} does not answer on {}:\n{status}\n{}",
                b.sock.display(),
                b.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `birdc CMD` on this daemon's socket (5 s at most): success and what it printed.
    fn birdc(&self, cmd: &str) -> (bool, String) {
        let o = Command::new("timeout")
            .args(["5", "birdc", "-s"])
            .arg(&self.sock)
            .args(cmd.split_whitespace())
            .output()
            .expect("birdc runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), text)
    }

    fn must(&self, cmd: &str) -> String {
        let (ok, text) = self.birdc(cmd);
        assert!(ok, "birdc {cmd} in {}:\n{text}", self.name);
        text
    }

    /// Its log and anything it printed, for failure messages.
    fn logs(&self) -> String {
        let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- BIRD {} log ---\n{}{}",
            self.name,
            read(&self.log),
            read(&self.err)
        )
    }

    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = sh(&format!("kill -TERM {}", c.id()));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        self.stop();
    }
}

/// BGP timers for sessions that come up in a second or two (BIRD's defaults wait 5 s
/// before the first connect and 120 s between retries): connect 1 s after start, retry
/// every 2 s, and a hold time short enough that nothing waits minutes, long enough
/// (9 s, keepalives every 3 s) that a busy machine does not drop a session.
const BGP_TIMERS: &str = "connect delay time 1; connect retry time 2; error wait time 1, 3; startup hold time 10; hold time 9; keepalive time 3;";

/// BIRD for a BGP peer: AS `asn` at `addr`, announcing 198.18.0.0/24 (from its static
/// protocol `announce`, so that disabling it withdraws the route) to the router at
/// `router` (AS 65000) over the session `cp`. It installs nothing in its own kernel.
fn bird_peer(addr: &str, asn: u32, router: &str) -> String {
    format!(
        "router id {addr};\n\
         protocol device {{ scan time 1; }}\n\
         protocol static announce {{ ipv4; route 198.18.0.0/24 blackhole; }}\n\
         protocol bgp cp {{\n\
         \x20 local {addr} as {asn};\n\
         \x20 neighbor {router} as 65000;\n\
         \x20 ipv4 {{ import none; export where proto = \"announce\"; }};\n\
         \x20 {BGP_TIMERS}\n\
         }}\n"
    )
}

/// The route for `prefix` in `show routes` (its first line and the `nexthop` lines that
/// follow), or "" without one.
fn route_block(routes: &str, prefix: &str) -> String {
    let mut lines = routes
        .lines()
        .skip_while(|l| l.split_whitespace().next() != Some(prefix));
    match lines.next() {
        Some(first) => std::iter::once(first)
            .chain(lines.take_while(|l| l.starts_with(char::is_whitespace)))
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    }
}

/// Datagrams dropped by the receive ring of netbatch's port r1 (where floods enter), over
/// its queues.
fn r1_ring_drops(c: &Ctl) -> u64 {
    let ports = c.json("show ports");
    ports["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "r1"))
        .and_then(|p| p["queues"].as_array())
        .unwrap_or_else(|| panic!("port r1's queues: {ports:#}"))
        .iter()
        .map(|q| q["rx_dropped"].as_u64().unwrap_or(0))
        .sum()
}

/// Packets `show errors` counts for `reason`.
fn shown_errors(c: &Ctl, reason: &str) -> u64 {
    c.json("show errors")["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["count"].as_u64().unwrap_or(0))
        .sum()
}

/// ICMP errors netbatch sent, over its workers.
fn icmp_errors_sent(c: &Ctl) -> u64 {
    c.json("show counters")["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["host"]["icmp_errors_out"].as_u64().unwrap_or(0))
        .sum()
}

/// A real routing daemon drives netbatch: BIRD 2 in the control namespace (`[linux]`
/// with `pairs`) speaks eBGP through netbatch's ports, over the tap pairs, with BIRD in
/// h2 and h3; the routes they announce reach the kernel of the control namespace
/// (BIRD's `kernel` protocol, `merge paths on` for ECMP) and from there netbatch's FIB,
/// and a flood from h1 follows them, every datagram counted by the receiving hosts'
/// sockets or by the receive ring's drop counter.
///
/// ```text
///                                      r2 ── h2  BIRD AS 65001, announces 198.18.0.0/24
///  h1 ── r1 [ netbatch (namespace r) ]
///                                      r3 ── h3  BIRD AS 65002, announces 198.18.0.0/24
///        namespace cp: taps r1, r2, r3 (netbatch's pairs), BIRD AS 65000
/// ```
///
/// (a) h2 announces: the route via h2 appears and the flood reaches h2 only; (b) h3
/// announces the same: two next hops, the 64 flows spread over both, none on both; (c) h2
/// withdraws: the path via h3 takes over; (d) h3's session goes down: no route, the
/// flood is dropped or answered as no_route and a ping gets "Net Unreachable".
#[test]
fn a_routing_daemon_drives_the_router() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    Bird::need();
    let mut t = Topo::hosts("g", &["h1", "h2", "h3"]);
    let s = t.tag.clone();
    let dir = t.dir.clone();
    t.must(
        "h1",
        &format!("ip addr add 192.0.2.2/24 dev nb{s}a; ip route add default via 192.0.2.1"),
    );
    t.must("h2", &format!("ip addr add 198.51.100.2/24 dev nb{s}b; ip route add default via 198.51.100.1; ip addr add 198.18.0.1/32 dev lo"));
    t.must("h3", &format!("ip addr add 203.0.113.2/24 dev nb{s}c; ip route add default via 203.0.113.1; ip addr add 198.18.0.1/32 dev lo"));
    // The control namespace, empty: netbatch creates its taps there.
    assert!(sh(&format!("ip netns add {}", t.ns("cp"))).status.success());
    t.must(
        "cp",
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1; sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up",
    );
    let sock = dir.join("ctl.sock");
    let ports = three_ports(&s, "");
    std::fs::write(
        dir.join("router.toml"),
        format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\n{ports}\n[linux]\nnamespace = \"{}\"\npairs = true\n\n[control]\nsocket = \"{}\"\n",
            t.ns("cp"),
            sock.display()
        ),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock.clone());

    // The pairs: taps named as the ports, with their addresses, up.
    wait_for_taps(
        &t,
        &[
            ("r1", "192.0.2.1/24"),
            ("r2", "198.51.100.1/24"),
            ("r3", "203.0.113.1/24"),
        ],
    );

    // BIRD in cp: eBGP with both peers, its routes to the kernel's main table with the
    // equal ones merged into one multipath route.
    let cp = Bird::start(
        &t,
        "cp",
        &format!(
            "router id 192.0.2.1;\n\
             protocol device {{ scan time 1; }}\n\
             protocol kernel {{\n\
             \x20 ipv4 {{ import none; export all; }};\n\
             \x20 merge paths on;\n\
             }}\n\
             template bgp peer {{\n\
             \x20 local as 65000;\n\
             \x20 ipv4 {{ import all; export none; }};\n\
             \x20 {BGP_TIMERS}\n\
             }}\n\
             protocol bgp a from peer {{ neighbor 198.51.100.2 as 65001; }}\n\
             protocol bgp b from peer {{ neighbor 203.0.113.2 as 65002; }}\n"
        ),
    );
    let prefix = "198.18.0.0/24";
    // Waits (30 s at most) until netbatch's route for the prefix satisfies `ok`; returns
    // how long it took.
    let wait_route = |what: &str, birds: &[&Bird], ok: &dyn Fn(&str) -> bool| -> Duration {
        let start = Instant::now();
        loop {
            let block = route_block(&c.ok("show routes"), prefix);
            if ok(&block) {
                let took = start.elapsed();
                eprintln!("{what}: {took:.2?}\n{block}");
                return took;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let (_, kernel) = t.exec("cp", "ip route; ip neigh");
                let logs: String = birds.iter().map(|b| b.logs()).collect();
                panic!(
                    "{what}: not within 30 s; netbatch's route:\n{block}\n--- cp's kernel ---\n{kernel}\n--- birdc show protocols all (cp) ---\n{}\n{logs}\n--- netbatch ---\n{}",
                    cp.birdc("show protocols all").1,
                    t.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let settle = || std::thread::sleep(Duration::from_millis(500));

    // (a) h2 announces: the session comes up through netbatch's port r2 and the tap,
    // and the route via h2 reaches netbatch; the flood goes to h2 only.
    let h2 = Bird::start(&t, "h2", &bird_peer("198.51.100.2", 65001, "198.51.100.1"));
    wait_route("(a) h2's announcement in netbatch", &[&cp, &h2], &|r| {
        r.starts_with("198.18.0.0/24 via 198.51.100.2 dev r2")
    });
    let mut flows = Flows::start(&t, &["h2", "h3"]);
    let dropped0 = r1_ring_drops(&c);
    let sent = flows.flood(1.0).join().expect("flood");
    settle();
    assert_eq!(
        flows.count("h2") + r1_ring_drops(&c) - dropped0,
        sent,
        "(a) all to h2"
    );
    assert_eq!(flows.count("h3"), 0, "(a) nothing to h3");

    // (b) h3 announces the same prefix with equal attributes (AS path of one AS, origin
    // IGP, no MED): BIRD merges both into a route with two next hops; the 64 flows are
    // spread over h2 and h3, each on one of them.
    let h3 = Bird::start(&t, "h3", &bird_peer("203.0.113.2", 65002, "203.0.113.1"));
    wait_route(
        "(b) h3's announcement merged: two next hops",
        &[&cp, &h2, &h3],
        &|r| {
            r.contains("nexthop via 198.51.100.2 dev r2 weight 1")
                && r.contains("nexthop via 203.0.113.2 dev r3 weight 1")
        },
    );
    flows.forget_flows("h2");
    flows.forget_flows("h3");
    let (h2_0, h3_0, dropped0) = (flows.count("h2"), flows.count("h3"), r1_ring_drops(&c));
    let sent = flows.flood(1.0).join().expect("flood");
    settle();
    let (on_h2, on_h3) = (flows.flows_seen("h2"), flows.flows_seen("h3"));
    assert!(
        on_h2.len() >= 8 && on_h3.len() >= 8 && on_h2.len() + on_h3.len() == 64,
        "(b) 64 flows spread over both paths: {} on h2, {} on h3",
        on_h2.len(),
        on_h3.len()
    );
    assert!(
        on_h2.iter().all(|p| !on_h3.contains(p)),
        "(b) no flow on both paths"
    );
    assert_eq!(
        flows.count("h2") - h2_0 + flows.count("h3") - h3_0 + r1_ring_drops(&c) - dropped0,
        sent,
        "(b) nothing lost over two paths"
    );

    // (c) h2 withdraws (its static protocol disabled: a BGP withdraw): the path via h3
    // takes over, and the flood goes to h3 only.
    h2.must("disable announce");
    wait_route("(c) h2's withdraw: via h3 only", &[&cp, &h2, &h3], &|r| {
        r.starts_with("198.18.0.0/24 via 203.0.113.2 dev r3") && !r.contains("198.51.100.2")
    });
    let (h2_0, h3_0, dropped0) = (flows.count("h2"), flows.count("h3"), r1_ring_drops(&c));
    let sent = flows.flood(1.0).join().expect("flood");
    settle();
    assert_eq!(flows.count("h2"), h2_0, "(c) nothing to h2 any more");
    assert_eq!(
        flows.count("h3") - h3_0 + r1_ring_drops(&c) - dropped0,
        sent,
        "(c) all to h3"
    );

    // (d) h3's session goes down (its BGP protocol disabled): the route leaves; h1's
    // ping gets netbatch's "net unreachable", and each datagram of the flood is dropped
    // as no_route or answered (as many as the ICMP rate limit lets out).
    h3.must("disable cp");
    wait_route("(d) h3's session down: no route", &[&cp, &h2, &h3], &|r| {
        r.is_empty()
    });
    let (_, ping) = t.exec("h1", "ping -c 1 -W 2 198.18.0.1");
    assert!(
        ping.contains("From 192.0.2.1") && ping.contains("Destination Net Unreachable"),
        "(d) {ping}"
    );
    let (h2_0, h3_0) = (flows.count("h2"), flows.count("h3"));
    let (no_route0, icmp0, dropped0) = (
        shown_errors(&c, "no_route"),
        icmp_errors_sent(&c),
        r1_ring_drops(&c),
    );
    let sent = flows.flood(0.5).join().expect("flood");
    settle();
    assert_eq!(
        (flows.count("h2"), flows.count("h3")),
        (h2_0, h3_0),
        "(d) nothing forwarded"
    );
    assert_eq!(
        shown_errors(&c, "no_route") - no_route0 + icmp_errors_sent(&c) - icmp0 + r1_ring_drops(&c)
            - dropped0,
        sent,
        "(d) every datagram dropped as no_route or answered"
    );
    let linux = c.json("show linux");
    assert!(
        linux["routes_added"].as_u64() >= Some(1)
            && linux["routes_deleted"].as_u64() >= Some(1)
            && linux["errors"] == 0,
        "{linux:#}"
    );
    drop((h3, h2, cp));
    flows.stop();
    let stats = t.stop();
    assert_conserved(&stats);
    // The sessions crossed netbatch: the kernel of cp sent through the taps of r2 and r3
    // (netbatch received from them) and was handed the peers' answers.
    for tap in ["host-r2", "host-r3"] {
        assert!(
            port(&stats, tap, "rx_packets") > 0 && port(&stats, tap, "tx_packets") > 0,
            "{tap} carried the BGP session: {stats:#}"
        );
    }
}

/// Waits (5 s at most) until netbatch's taps `(name, address)` are in namespace cp with
/// their port's address, up.
fn wait_for_taps(t: &Topo, taps: &[(&str, &str)]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, links) = t.exec("cp", "ip -br addr show");
        let ready = taps.iter().all(|(n, a)| {
            links
                .lines()
                .any(|l| l.starts_with(&format!("{n} ")) && l.contains(a) && !l.contains("DOWN"))
        });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "netbatch's taps {taps:?} with the ports' addresses, up, in cp:\n{links}\n{}",
            t.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Host interface pairs with the kernel's own tools on both sides: the tap carries the
/// port's MAC, MTU and address; a host reaches the control namespace's TCP listener on
/// the router's address and the namespace pings the host through the port, while
/// netbatch still answers pings itself; the tap's own IPv6 link-local address is the
/// kernel's, neighbour discovery included; an address added in the namespace becomes
/// netbatch's (its local, connected and broadcast routes, ARP and echo answered), an
/// MTU set there becomes the port's (one above what the port started with is refused,
/// counted, and changes nothing), and a deleted address goes.
#[test]
fn host_pairs_follow_the_control_namespace() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    let mut t = Topo::hosts("p", &["h1"]);
    let s = t.tag.clone();
    let dir = t.dir.clone();
    t.must("h1", &format!("ip addr add 192.0.2.2/24 dev nb{s}a"));
    assert!(sh(&format!("ip netns add {}", t.ns("cp"))).status.success());
    // IPv6 on in h1 and in the namespace (the tap's link-local address at once, no DAD):
    // netbatch does not route it yet, so a paired port hands it all to the kernel.
    t.must(
        "cp",
        "sysctl -qw net.ipv6.conf.default.accept_dad=0; ip link set lo up",
    );
    t.must(
        "h1",
        &format!("sysctl -qw net.ipv6.conf.nb{s}a.accept_dad=0; sysctl -qw net.ipv6.conf.nb{s}a.disable_ipv6=0"),
    );
    let sock = dir.join("ctl.sock");
    std::fs::write(
        dir.join("router.toml"),
        format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\n\n[[port]]\nname = \"r1\"\nkind = \"af_packet\"\ninterface = \"nb{s}r1\"\naddresses = [\"192.0.2.1/24\"]\n\n[linux]\nnamespace = \"{}\"\npairs = true\n\n[control]\nsocket = \"{}\"\n",
            t.ns("cp"),
            sock.display()
        ),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock.clone());
    wait_for_taps(&t, &[("r1", "192.0.2.1/24")]);
    let mac_of = |ns: &str, dev: &str| -> String {
        let j: serde_json::Value =
            serde_json::from_str(&t.must(ns, &format!("ip -j link show {dev}"))).expect("ip -j");
        j[0]["address"].as_str().expect("address").to_string()
    };
    let port_mac = mac_of("r", &format!("nb{s}r1"));
    assert_eq!(
        mac_of("cp", "r1"),
        port_mac,
        "the tap carries the port's MAC"
    );
    assert!(t.must("cp", "ip link show r1").contains("mtu 1500"));

    // The kernel's TCP listener on the router's address, reached from h1 through the port.
    let listener = Command::new("ip")
        .args(["netns", "exec", &t.ns("cp"), "python3", "-c"])
        .arg(
            "import socket\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('192.0.2.1', 179)); s.listen(1); s.settimeout(10)\n\
             c, a = s.accept(); c.settimeout(5); c.sendall(b'hello ' + c.recv(100)); c.close()\n",
        )
        .spawn()
        .expect("listener");
    let mut listener = ChildGuard(listener);
    assert!(
        netbatch_testkit::wait_listening(&t.ns("cp"), "tcp", 179, Duration::from_secs(10)),
        "the kernel's listener on 179"
    );
    let got = t.must(
        "h1",
        "python3 -c \"import socket; s = socket.create_connection(('192.0.2.1', 179), timeout=5); s.sendall(b'bgp'); print(s.recv(100).decode())\"",
    );
    assert_eq!(
        got.trim(),
        "hello bgp",
        "TCP to the router's address is the kernel's"
    );
    let _ = listener.0.wait();
    // The namespace reaches h1 through the port (its ARP too); h1 sees one MAC for the
    // router, and netbatch still answers h1's pings itself.
    t.must("cp", "ping -c 2 -W 1 192.0.2.2");
    t.must("h1", "ping -c 2 -W 1 192.0.2.1");
    assert!(
        t.must("h1", "ip neigh show 192.0.2.1").contains(&port_mac),
        "h1 knows the router by the port's MAC"
    );

    // The kernel's IPv6 through the pair: h1 pings the tap's link-local address
    // (neighbour discovery both ways through netbatch).
    let ll: serde_json::Value =
        serde_json::from_str(&t.must("cp", "ip -j -6 addr show dev r1 scope link")).expect("ip -j");
    let ll = ll[0]["addr_info"][0]["local"]
        .as_str()
        .unwrap_or_else(|| panic!("the tap's link-local address: {ll}"))
        .to_string();
    t.must("h1", &format!("ping -6 -c 2 -W 1 {ll}%nb{s}a"));
    assert!(
        t.must("h1", &format!("ip -6 neigh show {ll} dev nb{s}a"))
            .contains(&port_mac),
        "h1 resolved the tap's link-local address to the port's MAC"
    );

    // An address added in the namespace is netbatch's.
    t.must("cp", "ip addr add 203.0.113.1/24 dev r1");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.ok("show routes").contains("local 203.0.113.1 dev r1") {
        assert!(Instant::now() < deadline, "{}", c.ok("show routes"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(c.ok("show routes").contains("203.0.113.0/24 dev r1"));
    t.must("h1", &format!("ip addr add 203.0.113.2/24 dev nb{s}a"));
    t.must("h1", "ping -c 1 -W 1 203.0.113.1");

    // An MTU set in the namespace is the port's; above what it started with, refused.
    t.must("cp", "ip link set r1 mtu 1400");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.ok("show ports").contains("mtu 1400, link") {
        assert!(Instant::now() < deadline, "{}", c.ok("show ports"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let errors = c.json("show linux")["errors"].as_u64().unwrap_or(0);
    t.must("cp", "ip link set r1 mtu 9000");
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.json("show linux")["errors"].as_u64().unwrap_or(0) == errors {
        assert!(Instant::now() < deadline, "{}", c.ok("show linux"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        c.ok("show linux").contains("MTU 9000 refused"),
        "{}",
        c.ok("show linux")
    );
    assert!(
        c.ok("show ports").contains("mtu 1400, link"),
        "unchanged by the refusal"
    );

    // A deleted address goes.
    t.must("cp", "ip addr del 203.0.113.1/24 dev r1");
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.ok("show routes").contains("203.0.113.1") {
        assert!(Instant::now() < deadline, "{}", c.ok("show routes"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!t.exec("h1", "ping -c 1 -W 1 203.0.113.1").0);
    // Added, MTU, deleted (the counters are published after the change they count).
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.json("show linux")["interface_changes"]
        .as_u64()
        .unwrap_or(0)
        < 3
    {
        assert!(Instant::now() < deadline, "{}", c.ok("show linux"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = t.stop();
    assert_conserved(&stats);
    assert!(port(&stats, "host-r1", "tx_packets") > 0 && port(&stats, "host-r1", "rx_packets") > 0);
}

/// A child process killed when dropped (a failing test leaves none behind).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// OSPF through the pairs: BIRD in the control namespace and in a peer speak OSPFv2
/// (IP protocol 89, hellos to 224.0.0.5 with TTL 1: multicast the port hands to the tap,
/// and the kernel's own multicast out through it) until the adjacency is Full; the
/// peer's stub network is in `netbatch show routes` via the peer, and leaves when the
/// peer's OSPF stops (after the dead interval).
#[test]
fn ospf_through_the_pairs() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    Bird::need();
    let mut t = Topo::hosts("o", &["h1"]);
    let s = t.tag.clone();
    let dir = t.dir.clone();
    t.must(
        "h1",
        &format!("ip addr add 192.0.2.2/24 dev nb{s}a; ip addr add 198.18.5.1/24 dev lo"),
    );
    assert!(sh(&format!("ip netns add {}", t.ns("cp"))).status.success());
    t.must("cp", "ip link set lo up");
    let sock = dir.join("ctl.sock");
    std::fs::write(
        dir.join("router.toml"),
        format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\n\n[[port]]\nname = \"r1\"\nkind = \"af_packet\"\ninterface = \"nb{s}r1\"\naddresses = [\"192.0.2.1/24\"]\n\n[linux]\nnamespace = \"{}\"\npairs = true\n\n[control]\nsocket = \"{}\"\n",
            t.ns("cp"),
            sock.display()
        ),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock.clone());
    wait_for_taps(&t, &[("r1", "192.0.2.1/24")]);
    let timers = "hello 1; dead 4;";
    let cp = Bird::start(
        &t,
        "cp",
        &format!(
            "router id 192.0.2.1;\nprotocol device {{ scan time 1; }}\n\
             protocol kernel {{ ipv4 {{ import none; export all; }}; }}\n\
             protocol ospf v2 o {{ ipv4 {{ import all; export none; }}; area 0 {{ interface \"r1\" {{ {timers} }}; }}; }}\n"
        ),
    );
    let peer = Bird::start(
        &t,
        "h1",
        &format!(
            "router id 192.0.2.2;\nprotocol device {{ scan time 1; }}\n\
             protocol ospf v2 o {{ ipv4 {{ import all; export all; }}; area 0 {{ interface \"nb{s}a\" {{ {timers} }}; interface \"lo\" {{ stub; }}; }}; }}\n"
        ),
    );
    let route = "198.18.5.0/24 via 192.0.2.2 dev r1";
    let wait = |present: bool| {
        let t0 = Instant::now();
        while c.ok("show routes").contains(route) != present {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "show routes {} '{route}':\n{}\n{}\n{}{}",
                if present { "has" } else { "lacks" },
                c.ok("show routes"),
                cp.birdc("show ospf neighbors").1,
                cp.logs(),
                peer.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        t0.elapsed()
    };
    let took = wait(true);
    eprintln!("OSPF route in netbatch {took:?} after the daemons started");
    assert!(cp.birdc("show ospf neighbors").1.contains("Full"));
    let (ok, out) = peer.birdc("disable o");
    assert!(ok, "{out}");
    let took = wait(false);
    eprintln!("withdrawn {took:?} after the peer's OSPF stopped");
    drop(peer);
    drop(cp);
    let stats = t.stop();
    assert_conserved(&stats);
    assert!(port(&stats, "host-r1", "tx_packets") > 0 && port(&stats, "host-r1", "rx_packets") > 0);
}

/// Frames received by host `h`'s end of its veth (its `/sys` counter).
fn host_rx(t: &Topo, h: &str, end: char) -> u64 {
    let s = &t.tag;
    t.must(
        h,
        &format!("cat /sys/class/net/nb{s}{end}/statistics/rx_packets"),
    )
    .trim()
    .parse()
    .expect("a counter")
}

/// BIRD drives two VRFs through netbatch: VRF red (ports r1, r2; table 10) and VRF blue
/// (r3, r4; table 20) have the same subnets (hosts h1 and h3 are both 192.0.2.2, h2 and
/// h4 both 198.51.100.2) and BIRD in the control namespace puts the same prefix,
/// 198.18.0.0/24, in each VRF's kernel table (its `kernel table 10|20` protocols, one
/// BIRD table per VRF) with a next hop on that VRF's port. netbatch mirrors kernel
/// tables 10 and 20 into its VRFs' tables (`[linux] tables`). h1's pings reach h2 and
/// nothing of them reaches h4; h3's reach h4 and not h2; when red's route is withdrawn,
/// h1 gets netbatch's "net unreachable" from red's own table (no fall-through to blue or
/// main) while blue still works. The control namespace has interfaces named as
/// netbatch's ports (veth pairs: this kernel has neither dummy nor VRF devices) with the
/// VRF's subnet, for BIRD's next hops.
#[test]
fn bird_drives_two_vrfs() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    need_tools();
    Bird::need();
    let mut t = Topo::hosts("v", &["h1", "h2", "h3", "h4"]);
    let s = t.tag.clone();
    let dir = t.dir.clone();
    for (h, end, addr, gw) in [
        ("h1", 'a', "192.0.2.2/24", "192.0.2.1"),
        ("h2", 'b', "198.51.100.2/24", "198.51.100.1"),
        ("h3", 'c', "192.0.2.2/24", "192.0.2.1"),
        ("h4", 'd', "198.51.100.2/24", "198.51.100.1"),
    ] {
        t.must(
            h,
            &format!("ip addr add {addr} dev nb{s}{end}; ip route add default via {gw}"),
        );
    }
    for h in ["h2", "h4"] {
        t.must(h, "ip addr add 198.18.0.1/32 dev lo");
    }
    assert!(sh(&format!("ip netns add {}", t.ns("cp"))).status.success());
    t.must(
        "cp",
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1; sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up; \
         for i in r2 r4; do ip link add $i type veth peer name $i-p; ip addr add 198.51.100.1/24 dev $i; ip link set $i-p up; ip link set $i up; done",
    );
    let sock = dir.join("ctl.sock");
    let ports: String = [
        ("r1", "192.0.2.1/24", "red"),
        ("r2", "198.51.100.1/24", "red"),
        ("r3", "192.0.2.1/24", "blue"),
        ("r4", "198.51.100.1/24", "blue"),
    ]
    .iter()
    .map(|(n, a, v)| {
        format!("\n[[port]]\nname = \"{n}\"\nkind = \"af_packet\"\ninterface = \"nb{s}{n}\"\naddresses = [\"{a}\"]\nvrf = \"{v}\"\n")
    })
    .collect();
    std::fs::write(
        dir.join("router.toml"),
        format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\n{ports}\n\
             [[vrf]]\nname = \"red\"\ntable = 10\n\n[[vrf]]\nname = \"blue\"\ntable = 20\n\n\
             [linux]\nnamespace = \"{}\"\ntables = [10, 20]\n\n[control]\nsocket = \"{}\"\n",
            t.ns("cp"),
            sock.display()
        ),
    )
    .expect("config");
    t.start();
    let c = Ctl(sock.clone());
    let cp = Bird::start(
        &t,
        "cp",
        "router id 192.0.2.1;\n\
         ipv4 table red4;\n\
         ipv4 table blue4;\n\
         protocol device { scan time 1; }\n\
         protocol static sred { ipv4 { table red4; }; route 198.18.0.0/24 via 198.51.100.2%r2; }\n\
         protocol static sblue { ipv4 { table blue4; }; route 198.18.0.0/24 via 198.51.100.2%r4; }\n\
         protocol kernel kred { ipv4 { table red4; import none; export all; }; kernel table 10; }\n\
         protocol kernel kblue { ipv4 { table blue4; import none; export all; }; kernel table 20; }\n",
    );
    // Waits (30 s at most) until netbatch's route for the prefix in VRF `vrf` satisfies
    // `ok`.
    let wait_route = |what: &str, vrf: &str, ok: &dyn Fn(&str) -> bool| {
        let start = Instant::now();
        loop {
            let block = route_block(&c.ok(&format!("show routes vrf {vrf}")), "198.18.0.0/24");
            if ok(&block) {
                return;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let (_, kernel) = t.exec("cp", "ip route show table all");
                panic!(
                    "{what}: not within 30 s; netbatch's route:\n{block}\n--- cp's kernel ---\n{kernel}\n{}\n--- show linux ---\n{}\n--- netbatch ---\n{}",
                    cp.logs(),
                    c.ok("show linux"),
                    t.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_route("red's route", "red", &|r| {
        r.starts_with("198.18.0.0/24 via 198.51.100.2 dev r2")
    });
    wait_route("blue's route", "blue", &|r| {
        r.starts_with("198.18.0.0/24 via 198.51.100.2 dev r4")
    });
    assert_eq!(
        route_block(&c.ok("show routes"), "198.18.0.0/24"),
        "",
        "nothing in main"
    );
    // Each client reaches its own VRF's host only.
    let ping = |from: &str| t.exec(from, "ping -c 3 -i 0.2 -W 2 198.18.0.1");
    let (h2_0, h4_0) = (host_rx(&t, "h2", 'b'), host_rx(&t, "h4", 'd'));
    let (ok, out) = ping("h1");
    assert!(ok && out.contains("3 received"), "h1 through red:\n{out}");
    let (h2_1, h4_1) = (host_rx(&t, "h2", 'b'), host_rx(&t, "h4", 'd'));
    assert!(h2_1 - h2_0 >= 3, "h1's pings reached h2 ({h2_0} -> {h2_1})");
    // h4 may see its own ARP traffic only if netbatch resolved it: never an echo.
    let (ok, out) = ping("h3");
    assert!(ok && out.contains("3 received"), "h3 through blue:\n{out}");
    let (h2_2, h4_2) = (host_rx(&t, "h2", 'b'), host_rx(&t, "h4", 'd'));
    assert!(h4_2 - h4_1 >= 3, "h3's pings reached h4 ({h4_1} -> {h4_2})");
    assert!(
        h2_2 - h2_1 <= 1 && h4_1 - h4_0 <= 1,
        "no VRF's pings reach the other's host (beyond one ARP): h2 {h2_1} -> {h2_2}, h4 {h4_0} -> {h4_1}"
    );
    // Red's route withdrawn: red has none (no fall-through to blue or main), blue keeps
    // its own.
    cp.must("disable sred");
    wait_route("red's withdrawal", "red", &|r| r.is_empty());
    let (_, out) = t.exec("h1", "ping -c 1 -W 2 198.18.0.1");
    assert!(
        out.contains("From 192.0.2.1") && out.contains("Destination Net Unreachable"),
        "h1 after red's withdrawal:\n{out}"
    );
    let (ok, out) = ping("h3");
    assert!(ok && out.contains("3 received"), "blue unchanged:\n{out}");
    let linux = c.json("show linux");
    assert!(
        linux["routes_added"].as_u64() >= Some(2)
            && linux["routes_deleted"].as_u64() >= Some(1)
            && linux["errors"] == 0,
        "{linux:#}"
    );
    drop(cp);
    let stats = t.stop();
    assert_conserved(&stats);
}
