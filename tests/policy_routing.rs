//! Policy routing through the whole graph, from a configuration file's `[[rule]]`s and
//! numbered tables (`[[route]]` with `table`), IPv4 and IPv6, in every mode and dispatch
//! strategy: which port each packet leaves by and to which gateway (read with etherparse
//! from the frames that leave), what the rules' drops are counted as, the ICMP errors
//! their `unreachable` and `prohibit` send (type and code read back), a mark set by the
//! classifier steering, a rule on ports, `suppress_prefixlength`, and that a run of
//! packets with the same key walks the rules once. Nothing is lost (the accounting law)
//! and no buffer leaks.
//!
//! The router: eth0 198.51.100.1/24 and 2001:db8:1::1/64 (the clients), eth1
//! 192.0.2.1/25 and 2001:db8:2::1/64 (ISP 1, gateways .126 and ::fe), eth2
//! 192.0.2.129/25 and 2001:db8:3::1/64 (ISP 2, gateways .254 and ::fe). The remote
//! networks are 203.0.113.0/24 and 2001:db8:ff00::/40.

use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, TransportSlice};
use netbatch_runtime::config::Config;
use netbatch_scenarios::{Lab, frames};
use netbatch_stack::route::reason;
use netbatch_wire::ethernet::MacAddr;

/// The router's MACs on eth0, eth1, eth2.
const ETH: [MacAddr; 3] = [
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x01]),
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x02]),
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x03]),
];
/// The clients' MAC on eth0.
const CLIENT: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x07]);
/// The ISPs' gateways' MACs (on eth1, eth2).
const ISP: [MacAddr; 2] = [
    MacAddr([0x02, 0, 0, 0, 0x01, 0xfe]),
    MacAddr([0x02, 0, 0, 0, 0x02, 0xfe]),
];

fn config(mode: &str, dispatch: &str) -> String {
    format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["198.51.100.1/24", "2001:db8:1::1/64"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
addresses = ["192.0.2.1/25", "2001:db8:2::1/64"]

[[port]]
name = "eth2"
mac = "02:00:5e:00:53:03"
addresses = ["192.0.2.129/25", "2001:db8:3::1/64"]

[[neighbour.static]]
ip = "192.0.2.126"
mac = "02:00:00:00:01:fe"
dev = "eth1"

[[neighbour.static]]
ip = "192.0.2.254"
mac = "02:00:00:00:02:fe"
dev = "eth2"

[[neighbour.static]]
ip = "2001:db8:2::fe"
mac = "02:00:00:00:01:fe"
dev = "eth1"

[[neighbour.static]]
ip = "2001:db8:3::fe"
mac = "02:00:00:00:02:fe"
dev = "eth2"

[[neighbour.static]]
ip = "198.51.100.10"
mac = "02:00:00:00:00:07"
dev = "eth0"

[[neighbour.static]]
ip = "198.51.100.20"
mac = "02:00:00:00:00:07"
dev = "eth0"

[[neighbour.static]]
ip = "2001:db8:1::10"
mac = "02:00:00:00:00:07"
dev = "eth0"

[[neighbour.static]]
ip = "2001:db8:1::20"
mac = "02:00:00:00:00:07"
dev = "eth0"

# Main: everything by ISP 1.
[[route]]
prefix = "0.0.0.0/0"
via = "192.0.2.126"

[[route]]
prefix = "::/0"
via = "2001:db8:2::fe"

# Table 100: everything by ISP 2, but 203.0.113.96/27.
[[route]]
prefix = "0.0.0.0/0"
via = "192.0.2.254"
table = 100

[[route]]
prefix = "203.0.113.96/27"
kind = "throw"
table = 100

[[route]]
prefix = "::/0"
via = "2001:db8:3::fe"
table = 100

# Table 200: one /28 by ISP 2, under a rule that takes only what is longer than /24.
[[route]]
prefix = "203.0.113.240/28"
via = "192.0.2.254"
table = 200

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.254"
table = 200

[[classifier.filter]]
dev = "eth0"
prio = 1
protocol = "ip"
ip_proto = "udp"
dst_port = 4000
actions = ["skbedit mark 17"]

[[rule]]
pref = 10
to = "203.0.113.0/26"
action = "blackhole"

[[rule]]
pref = 11
to = "203.0.113.64/27"
action = "unreachable"

[[rule]]
pref = 12
to = "2001:db8:ff00::/48"
action = "prohibit"

[[rule]]
pref = 20
table = 200
suppress_prefixlength = 24

[[rule]]
pref = 100
from = "198.51.100.20"
table = 100

[[rule]]
pref = 100
from = "2001:db8:1::20"
table = 100

[[rule]]
pref = 110
fwmark = "0x1/0x1"
table = 100

[[rule]]
pref = 120
ipproto = "tcp"
dport = "8000-8999"
table = 100
"#
    )
}

/// What became of one packet: left by port `1` or `2` (to that ISP's gateway), or an
/// ICMP error (type, code) back out of eth0, or nothing (dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Isp(usize),
    Icmp(u8, u8),
}

/// Every frame that left, as fates, in order per port: the ISP's frames must be to their
/// gateway from our MAC; eth0's must be ICMP errors to the client.
fn fates(lab: &mut Lab) -> Vec<Fate> {
    let mut out = Vec::new();
    for port in [1, 2] {
        for f in lab.tx(port) {
            let eth = etherparse::Ethernet2HeaderSlice::from_slice(&f.bytes).expect("Ethernet");
            assert_eq!(eth.source(), ETH[port].0, "sent from eth{port}'s MAC");
            assert_eq!(
                eth.destination(),
                ISP[port - 1].0,
                "to ISP {port}'s gateway"
            );
            out.push(Fate::Isp(port));
        }
    }
    for f in lab.tx(0) {
        let p = frames::parse(&f.bytes);
        let fate = match (&p.net, &p.transport) {
            (Some(NetSlice::Ipv4(_)), Some(TransportSlice::Icmpv4(i))) => match i.icmp_type() {
                Icmpv4Type::DestinationUnreachable(h) => Fate::Icmp(3, h.code_u8()),
                t => panic!("not an unreachable: {t:?}"),
            },
            (Some(NetSlice::Ipv6(_)), Some(TransportSlice::Icmpv6(i))) => match i.icmp_type() {
                Icmpv6Type::DestinationUnreachable(c) => Fate::Icmp(1, c.code_u8()),
                t => panic!("not an unreachable: {t:?}"),
            },
            other => panic!("eth0 sent something else: {other:?}"),
        };
        out.push(fate);
    }
    out
}

type Counts = std::collections::BTreeMap<&'static str, u64>;

/// The stages' event counters of `lab`, summed by name.
fn events(lab: &Lab) -> Counts {
    let mut m = Counts::new();
    for n in lab.w.snapshot() {
        for (name, c) in n.events {
            *m.entry(name).or_default() += c;
        }
    }
    m
}

/// Runs `frames` (received on eth0) through a fresh router of `mode`/`dispatch`: what
/// became of them, the drops by reason, and the stages' event counters
/// (`policy_walks`: the walks of the rules, both families).
fn run(mode: &str, dispatch: &str, frames: Vec<Vec<u8>>) -> (Vec<Fate>, Counts, Counts) {
    let cfg = Config::parse(&config(mode, dispatch), std::path::Path::new("."), "policy")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lab = Lab::with_config(&cfg);
    lab.feed(0, frames);
    lab.run();
    let fates = fates(&mut lab);
    let drops = lab.drops();
    let events = events(&lab);
    lab.assert_conserved();
    lab.stop_and_check_pool();
    (fates, drops, events)
}

fn udp(src: &str, dst: &str, dport: u16) -> Vec<u8> {
    frames::udp(CLIENT, ETH[0], src, dst, 5000, dport, 64, b"policy")
}

fn tcp(src: &str, dst: &str, dport: u16) -> Vec<u8> {
    frames::tcp(CLIENT, ETH[0], src, dst, 5000, dport, 1, 64, b"policy")
}

fn udp6(src: &str, dst: &str) -> Vec<u8> {
    frames::udp6(CLIENT, ETH[0], src, dst, 5000, 53, 64, b"policy")
}

const MODES: [(&str, &str); 4] = [
    ("packet", "runs"),
    ("packet", "buckets"),
    ("list", "runs"),
    ("list", "buckets"),
];

/// A case: its name, the frame, what should become of it, the drop reason (if dropped).
type Case = (&'static str, Vec<u8>, Option<Fate>, Option<&'static str>);

/// Each packet alone: where the rules send it.
#[test]
fn each_rule_decides_as_written() {
    let cases: [Case; 14] = [
        // No rule but main's: ISP 1.
        (
            "plain",
            udp("198.51.100.10", "203.0.113.200", 53),
            Some(Fate::Isp(1)),
            None,
        ),
        // From client 20: table 100, ISP 2.
        (
            "from",
            udp("198.51.100.20", "203.0.113.200", 53),
            Some(Fate::Isp(2)),
            None,
        ),
        // From client 20 to the thrown /27: on to main, ISP 1.
        (
            "throw",
            udp("198.51.100.20", "203.0.113.100", 53),
            Some(Fate::Isp(1)),
            None,
        ),
        // Marked by the classifier (UDP to port 4000): table 100.
        (
            "fwmark",
            udp("198.51.100.10", "203.0.113.200", 4000),
            Some(Fate::Isp(2)),
            None,
        ),
        // TCP to 8000-8999: table 100; TCP to 7999: main.
        (
            "dport",
            tcp("198.51.100.10", "203.0.113.200", 8080),
            Some(Fate::Isp(2)),
            None,
        ),
        (
            "dport-miss",
            tcp("198.51.100.10", "203.0.113.200", 7999),
            Some(Fate::Isp(1)),
            None,
        ),
        // Table 200's /28 is longer than 24 bits: taken; its /24 is suppressed.
        (
            "suppress-kept",
            udp("198.51.100.10", "203.0.113.241", 53),
            Some(Fate::Isp(2)),
            None,
        ),
        (
            "suppress-refused",
            udp("198.51.100.10", "203.0.113.150", 53),
            Some(Fate::Isp(1)),
            None,
        ),
        // The rules' drops.
        (
            "blackhole",
            udp("198.51.100.10", "203.0.113.7", 53),
            None,
            Some(reason::RULE_BLACKHOLE.name()),
        ),
        (
            "unreachable",
            udp("198.51.100.10", "203.0.113.70", 53),
            Some(Fate::Icmp(3, 0)),
            None,
        ),
        // Our own address: delivered (rule 0; no socket, so port unreachable).
        (
            "local",
            udp("198.51.100.10", "192.0.2.1", 9),
            Some(Fate::Icmp(3, 3)),
            None,
        ),
        // IPv6: main, table 100 by source, prohibit.
        (
            "v6-plain",
            udp6("2001:db8:1::10", "2001:db8:ff01::1"),
            Some(Fate::Isp(1)),
            None,
        ),
        (
            "v6-from",
            udp6("2001:db8:1::20", "2001:db8:ff01::1"),
            Some(Fate::Isp(2)),
            None,
        ),
        (
            "v6-prohibit",
            udp6("2001:db8:1::10", "2001:db8:ff00::1"),
            Some(Fate::Icmp(1, 1)),
            None,
        ),
    ];
    for (mode, dispatch) in MODES {
        for (name, frame, fate, dropped) in &cases {
            let what = format!("{name} ({mode}/{dispatch})");
            let (fates, drops, _) = run(mode, dispatch, vec![frame.clone()]);
            assert_eq!(fates, fate.iter().copied().collect::<Vec<_>>(), "{what}");
            match dropped {
                Some(r) => assert_eq!(drops.get(r), Some(&1), "{what}: {drops:?}"),
                None if fate.is_some_and(|f| matches!(f, Fate::Icmp(..))) => {}
                None => assert!(drops.is_empty(), "{what}: {drops:?}"),
            }
        }
    }
    // The errors of `unreachable` and `prohibit` rules are counted as theirs.
    let (_, _, events) = run(
        "list",
        "runs",
        vec![
            udp("198.51.100.10", "203.0.113.70", 53),
            udp6("2001:db8:1::10", "2001:db8:ff00::1"),
        ],
    );
    assert_eq!(events.get("sent_rule_unreachable"), Some(&1), "{events:?}");
    assert_eq!(events.get("sent_rule_prohibit"), Some(&1), "{events:?}");
}

/// A list of packets: one walk of the rules per run of packets with the same key (a
/// flow's burst), a walk per packet when the keys alternate; the same fates as alone.
#[test]
fn a_run_of_one_key_walks_once() {
    let burst: Vec<Vec<u8>> = (0..32)
        .map(|_| udp("198.51.100.20", "203.0.113.200", 53))
        .collect();
    let walks = |e: &Counts| e.get("policy_walks").copied().unwrap_or(0);
    let (fates, _, e) = run("list", "runs", burst);
    assert_eq!(fates, vec![Fate::Isp(2); 32]);
    assert_eq!(walks(&e), 1, "one key, one walk");
    let mixed: Vec<Vec<u8>> = (0..32)
        .map(|i| {
            let src = if i % 2 == 0 {
                "198.51.100.10"
            } else {
                "198.51.100.20"
            };
            udp(src, "203.0.113.200", 53)
        })
        .collect();
    let (fates, _, e) = run("list", "runs", mixed);
    let isp1 = fates.iter().filter(|f| **f == Fate::Isp(1)).count();
    let isp2 = fates.iter().filter(|f| **f == Fate::Isp(2)).count();
    assert_eq!((isp1, isp2), (16, 16));
    assert_eq!(walks(&e), 32, "alternating sources: every packet walks");
    // Fields no rule selects on do not split a run: only the UDP source port varies
    // (a rule reads destination ports, none source ports), one walk.
    let ports: Vec<Vec<u8>> = (0..32)
        .map(|i| {
            frames::udp(
                CLIENT,
                ETH[0],
                "198.51.100.10",
                "203.0.113.200",
                1000 + i,
                53,
                64,
                b"p",
            )
        })
        .collect();
    let (fates, _, e) = run("list", "runs", ports);
    assert_eq!(fates, vec![Fate::Isp(1); 32]);
    assert_eq!(walks(&e), 1, "the source port is no rule's: one key");
}

/// Without `[[rule]]`s nothing walks: the stages route by main as before.
#[test]
fn default_rules_walk_nothing() {
    let text = config("list", "runs");
    let plain: String = text
        .split("[[rule]]")
        .next()
        .expect("the part before the rules")
        .to_string();
    let cfg =
        Config::parse(&plain, std::path::Path::new("."), "plain").unwrap_or_else(|e| panic!("{e}"));
    let mut lab = Lab::with_config(&cfg);
    lab.feed(0, vec![udp("198.51.100.20", "203.0.113.200", 53); 8]);
    lab.run();
    assert_eq!(fates(&mut lab), vec![Fate::Isp(1); 8]);
    assert_eq!(events(&lab).get("policy_walks"), Some(&0));
    lab.assert_conserved();
    lab.stop_and_check_pool();
}
