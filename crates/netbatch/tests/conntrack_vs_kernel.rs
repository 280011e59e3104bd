//! The stateful firewall against the Linux kernel's nftables: one ruleset rendered to
//! `nft` and to netbatch's configuration, a router in a namespace each (the kernel
//! forwarding with the nft ruleset; netbatch on `af_packet`), the same hosts and
//! clients on both sides, and per case the same outcome.
//!
//! ```text
//!  h1 (inside, 192.0.2.2/24) ── veth ── [ r1  router  r2 ] ── veth ── h2 (outside, 198.51.100.2/24)
//! ```
//!
//! The ruleset (the FORWARD chain of nftables' "simple stateful firewall"):
//! `ct state established,related accept; ct state new iifname <inside> accept;
//! policy drop`. Cases: ping out (answered) and in (not); a TCP transfer out (100 kB
//! through) and a connection in (refused by silence); UDP request/response out (answered)
//! and in (not); a TCP segment from outside half the sequence space away from the
//! connection's (out of window: dropped by both) beside an in-window one (delivered by
//! both, the control); an unsolicited ACK from outside (dropped by both). Whether a
//! crafted segment reached h1 is read from a counter of h1's own kernel (an nft rule at
//! priority -300, before h1's conntrack), by its TCP window as a marker.
//!
//! Namespaces and veths carry the process id; root and `nft`, `socat`, `python3`, `ping`
//! are needed (scripts/setup installs them), skipped through the testkit otherwise.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn sh(cmd: &str) -> (bool, String) {
    let o = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("sh runs");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// The ruleset, as both routers get it.
struct Ruleset {
    /// (states, inside only) per rule, in order; verdict accept.
    rules: Vec<(&'static str, bool)>,
}

impl Ruleset {
    fn nft(&self, inside: &str) -> String {
        let mut s = String::from(
            "table inet nbct {\n chain forward {\n  type filter hook forward priority filter; policy drop;\n",
        );
        for (st, inside_only) in &self.rules {
            let iif = if *inside_only {
                format!(" iifname \"{inside}\"")
            } else {
                String::new()
            };
            s += &format!("  ct state {{ {st} }}{iif} accept\n");
        }
        s + " }\n}\n"
    }

    fn toml(&self) -> String {
        let mut s = String::from("[filter.forward]\npolicy = \"drop\"\n");
        for (st, inside_only) in &self.rules {
            s += &format!(
                "[[filter.forward.rule]]\nct_state = \"{}\"\n",
                st.replace(' ', "")
            );
            if *inside_only {
                s += "in = \"r1\"\n";
            }
            s += "action = \"accept\"\n";
        }
        s
    }
}

/// One topology: h1 — r — h2, and netbatch in r when it is the router.
struct Topo {
    tag: String,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
    router: Option<netbatch_testkit::Logged>,
}

impl Topo {
    fn ns(&self, n: &str) -> String {
        format!("nbct{}-{n}", self.tag)
    }

    fn exec(&self, n: &str, cmd: &str) -> (bool, String) {
        sh(&format!(
            "ip netns exec {} sh -c '{}'",
            self.ns(n),
            cmd.replace('\'', "'\\''")
        ))
    }

    fn must(&self, n: &str, cmd: &str) -> String {
        let (ok, t) = self.exec(n, cmd);
        assert!(ok, "in {n}: {cmd}:\n{t}");
        t
    }

    /// Waits (bounded) until a server in `n` listens on `port`: a fixed sleep is outlasted
    /// by a busy machine, and a request sent before the server binds is lost.
    fn listening(&self, n: &str, proto: &str, port: u16) {
        assert!(
            netbatch_testkit::wait_listening(&self.ns(n), proto, port, Duration::from_secs(10)),
            "no {proto} server on port {port} in {n} after 10 s"
        );
    }

    fn new(which: &str) -> Self {
        // Names stay within IFNAMSIZ: `c` + tag + `r1`.
        let tag = format!("{which}{}", std::process::id() % 100_000);
        let tmp = tempfile::Builder::new()
            .prefix(&format!("netbatch-ct-{tag}-"))
            .tempdir()
            .expect("temp dir");
        let t = Self {
            tag,
            dir: tmp.path().to_path_buf(),
            _tmp: tmp,
            router: None,
        };
        t.remove();
        for n in ["h1", "h2", "r"] {
            assert!(sh(&format!("ip netns add {}", t.ns(n))).0);
        }
        let (s, r) = (&t.tag, t.ns("r"));
        let quiet = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1; sysctl -qw net.ipv6.conf.default.disable_ipv6=1; ip link set lo up";
        for (i, h) in ["h1", "h2"].iter().enumerate() {
            let end = (b'a' + i as u8) as char;
            let c = format!(
                "ip link add c{s}{end} netns {} type veth peer name c{s}r{} netns {r}",
                t.ns(h),
                i + 1
            );
            let (ok, e) = sh(&c);
            assert!(ok, "{c}: {e}");
            t.must("r", &format!("{quiet}; ip link set c{s}r{} up", i + 1));
            t.must(h, &format!("{quiet}; ip link set c{s}{end} up"));
        }
        t.must(
            "h1",
            &format!("ip addr add 192.0.2.2/24 dev c{s}a; ip route add default via 192.0.2.1"),
        );
        t.must(
            "h2",
            &format!(
                "ip addr add 198.51.100.2/24 dev c{s}b; ip route add default via 198.51.100.1"
            ),
        );
        // h1's own counter of crafted segments, by window, before its conntrack.
        t.must(
            "h1",
            "nft add table ip seen; nft add chain ip seen pre '{ type filter hook prerouting priority -300; }'; \
             nft add rule ip seen pre tcp window 1234 counter; nft add rule ip seen pre tcp window 1236 counter; \
             nft add rule ip seen pre tcp window 1235 counter",
        );
        t
    }

    /// The kernel as the router, with the ruleset.
    fn kernel(&self, rs: &Ruleset) {
        let s = &self.tag;
        self.must(
            "r",
            &format!(
                "ip addr add 192.0.2.1/24 dev c{s}r1; ip addr add 198.51.100.1/24 dev c{s}r2; sysctl -qw net.ipv4.ip_forward=1"
            ),
        );
        let f = self.dir.join("rules.nft");
        std::fs::write(&f, rs.nft(&format!("c{s}r1"))).unwrap();
        self.must("r", &format!("nft -f {}", f.display()));
    }

    /// netbatch as the router, with the ruleset, on `workers` workers (with two, worker 0
    /// receives both ports and RPS steers: both directions of a connection must reach
    /// the worker whose table holds it).
    fn netbatch(&mut self, rs: &Ruleset, workers: usize) {
        let s = &self.tag;
        let rps = if workers > 1 {
            "rps = \"deferred\"\n"
        } else {
            ""
        };
        let cfg = format!(
            "[datapath]\nmode = \"list\"\nidle_spin_us = 50\nworkers = {workers}\n{rps}\n\
             [[port]]\nname = \"r1\"\nkind = \"af_packet\"\ninterface = \"c{s}r1\"\naddresses = [\"192.0.2.1/24\"]\n\n\
             [[port]]\nname = \"r2\"\nkind = \"af_packet\"\ninterface = \"c{s}r2\"\naddresses = [\"198.51.100.1/24\"]\n\n\
             [control]\nsocket = \"{}\"\n\n{}",
            self.dir.join("ctl.sock").display(),
            rs.toml()
        );
        let path = self.dir.join("router.toml");
        std::fs::write(&path, cfg).unwrap();
        let mut run = netbatch_testkit::in_netns(&self.ns("r"), env!("CARGO_BIN_EXE_netbatch"));
        run.arg("run")
            .arg(&path)
            .arg("--stats-json")
            .arg(self.dir.join("stats.json"));
        let mut router = netbatch_testkit::Logged::spawn(run);
        router.wait_for(&["port r1 up", "port r2 up"], Duration::from_secs(10));
        self.router = Some(router);
    }

    /// `netbatch CMD --socket S REST` (the socket option belongs to the command).
    fn ctl(&self, cmd: &str, rest: &str) -> String {
        let words = format!("{cmd} {rest}");
        let (ok, t) = sh(&format!(
            "{} {cmd} --socket {} {rest}",
            env!("CARGO_BIN_EXE_netbatch"),
            self.dir.join("ctl.sock").display()
        ));
        assert!(ok, "netbatch {words}: {t}");
        t
    }

    fn counter(&self, window: u16) -> u64 {
        let t = self.must("h1", "nft list chain ip seen pre");
        t.lines()
            .find(|l| l.contains(&format!("tcp window {window} ")))
            .and_then(|l| l.split("packets ").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter for window {window} in:\n{t}"))
    }

    fn remove(&self) {
        for n in ["h1", "h2", "r"] {
            let _ = sh(&format!("ip netns del {} 2>/dev/null", self.ns(n)));
        }
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        // The router first (killed and reaped), then its namespaces.
        self.router = None;
        self.remove();
    }
}

/// The crafter on h2: waits for a segment of the connection h1:40000 → h2:5000 on its
/// link, then sends from h2:5000 to h1:40000 an ACK half the sequence space away (window
/// 1234: out of window), an in-window ACK (window 1236), and an unsolicited ACK to
/// h1:40001 (window 1235), through a raw socket (the kernel adds the IP header).
const CRAFT: &str = r#"
import socket, struct, sys
iface = sys.argv[1]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0800))
s.bind((iface, 0))
s.settimeout(10)
while True:
    f = s.recv(2048)
    ip = f[14:]
    ihl = (ip[0] & 15) * 4
    if ip[9] != 6: continue
    t = ip[ihl:]
    sp, dp, seq, ack = struct.unpack("!HHII", t[:12])
    if (sp, dp) == (40000, 5000) and t[13] & 0x10:
        plen = len(ip) - ihl - (t[12] >> 4) * 4
        break
def csum(b):
    if len(b) % 2: b += b"\0"
    x = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while x >> 16: x = (x & 0xffff) + (x >> 16)
    return (~x) & 0xffff
src, dst = socket.inet_aton("198.51.100.2"), socket.inet_aton("192.0.2.2")
def seg(sport, dport, sq, ak, win):
    h = struct.pack("!HHIIBBHHH", sport, dport, sq & 0xffffffff, ak & 0xffffffff, 5 << 4, 0x10, win, 0, 0)
    c = csum(src + dst + struct.pack("!BBH", 0, 6, len(h)) + h)
    return h[:16] + struct.pack("!H", c) + h[18:]
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
cli_next = seq + plen
r.sendto(seg(5000, 40000, ack + 0x80000000, cli_next, 1234), ("192.0.2.2", 0))
r.sendto(seg(5000, 40000, ack, cli_next, 1236), ("192.0.2.2", 0))
r.sendto(seg(5000, 40001, 77777, 88888, 1235), ("192.0.2.2", 0))
print("sent")
"#;

/// The outcomes of every case through the router of `t`.
fn cases(t: &Topo) -> Vec<(&'static str, bool)> {
    let s = &t.tag;
    let mut out = Vec::new();
    let ping = |from: &str, to: &str| t.exec(from, &format!("ping -c 1 -W 1 {to}")).0;
    out.push(("ping out", ping("h1", "198.51.100.2")));
    out.push(("ping in", ping("h2", "192.0.2.2")));
    // TCP: 100 kB from h1 to a server on h2 that counts what it got, and back.
    let tcp = |srv: &str, cli: &str, addr: &str| {
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.ns(srv),
                "socat",
                "-u",
                "TCP-LISTEN:5001,reuseaddr",
                "SYSTEM:wc -c",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        t.listening(srv, "tcp", 5001);
        let sent = t
            .exec(
                cli,
                &format!("head -c 100000 /dev/zero | timeout 5 socat -u - TCP:{addr}:5001,connect-timeout=2"),
            )
            .0;
        std::thread::sleep(Duration::from_millis(300));
        let _ = server.kill();
        let mut got = String::new();
        if let Some(o) = server.stdout.as_mut() {
            use std::io::Read;
            let _ = o.read_to_string(&mut got);
        }
        let _ = server.wait();
        sent && got.trim() == "100000"
    };
    out.push(("tcp transfer out", tcp("h2", "h1", "198.51.100.2")));
    out.push(("tcp connect in", tcp("h1", "h2", "192.0.2.2")));
    // UDP request/response with an echo on the far side.
    let udp = |srv: &str, cli: &str, addr: &str| {
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.ns(srv),
                "socat",
                "UDP-RECVFROM:5002,fork",
                "EXEC:cat",
            ])
            .spawn()
            .unwrap();
        t.listening(srv, "udp", 5002);
        let (_, text) = t.exec(
            cli,
            &format!("echo hello | timeout 6 socat -T 4 - UDP:{addr}:5002"),
        );
        let _ = server.kill();
        let _ = server.wait();
        text.contains("hello")
    };
    out.push(("udp request/response out", udp("h2", "h1", "198.51.100.2")));
    out.push(("udp request in", udp("h1", "h2", "192.0.2.2")));
    // Crafted segments from outside, on a live connection h1:40000 → h2:5000 whose
    // client keeps sending.
    let before = (t.counter(1234), t.counter(1236), t.counter(1235));
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.ns("h2"),
            "socat",
            "-u",
            "TCP-LISTEN:5000,reuseaddr",
            "OPEN:/dev/null",
        ])
        .spawn()
        .unwrap();
    t.listening("h2", "tcp", 5000);
    let mut client = Command::new("ip")
        .args([
            "netns", "exec", &t.ns("h1"), "sh", "-c",
            "while true; do echo x; sleep 0.1; done | timeout 8 socat -u - TCP:198.51.100.2:5000,sourceport=40000,reuseaddr",
        ])
        .spawn()
        .unwrap();
    let craft = t.dir.join("craft.py");
    std::fs::write(&craft, CRAFT).unwrap();
    let (ok, text) = t.exec("h2", &format!("python3 {} c{s}b", craft.display()));
    assert!(ok && text.contains("sent"), "crafter: {text}");
    std::thread::sleep(Duration::from_millis(500));
    let after = (t.counter(1234), t.counter(1236), t.counter(1235));
    let _ = client.kill();
    let _ = client.wait();
    let _ = server.kill();
    let _ = server.wait();
    out.push(("tcp out-of-window segment in", after.0 > before.0));
    out.push(("tcp in-window segment in (control)", after.1 > before.1));
    out.push(("tcp unsolicited ack in", after.2 > before.2));
    out
}

#[test]
fn stateful_firewall_agrees_with_nftables() {
    if !netbatch_testkit::root("the differential creates namespaces and veth pairs") {
        return;
    }
    if !netbatch_testkit::tools(&[
        ("nft", "nftables"),
        ("socat", "socat"),
        ("python3", "python3"),
        ("ping", "iputils-ping"),
    ]) {
        return;
    }
    let rs = Ruleset {
        rules: vec![("established, related", false), ("new", true)],
    };
    let kernel = {
        let t = Topo::new("k");
        t.kernel(&rs);
        cases(&t)
    };
    // netbatch with one worker, then with two under RPS (symmetric steering).
    let intent = [true, false, true, false, true, false, false, true, false];
    for workers in [1, 2] {
        let (ours, shown, stats) = {
            let mut t = Topo::new(&format!("n{workers}"));
            t.netbatch(&rs, workers);
            let c = cases(&t);
            let shown = t.ctl("show", "conntrack proto tcp dport 5001");
            let stats = t.ctl("show", "--json counters");
            (c, shown, stats)
        };
        // The kernel is the expectation; the ruleset's intent is checked too, so that a
        // kernel that let everything through would not pass both.
        for (((name, k), (_, n)), want) in kernel.iter().zip(&ours).zip(intent) {
            assert_eq!(k, n, "{name}: kernel {k}, netbatch ({workers} workers) {n}");
            assert_eq!(
                *k, want,
                "{name}: the kernel did not do what the ruleset says"
            );
        }
        assert!(
            ["ESTABLISHED", "TIME_WAIT", "CLOSE"]
                .iter()
                .any(|s| shown.contains(s)),
            "show conntrack:\n{shown}"
        );
        assert!(
            stats.contains("conntrack"),
            "counters carry the table: {stats}"
        );
    }
}
