//! VRFs through the whole graph, from a configuration file's `[[vrf]]`s, in every mode
//! and dispatch strategy: two VRFs with the same client subnet and the same remote
//! prefix, each to its own gateway on its own port; neither leaks into the other or into
//! `main`; a route of one VRF leaked to a port of `main`; ICMP errors (time exceeded,
//! unreachable) sourced from the address of the VRF's own port and sent back into it;
//! echo requests to a VRF port's address answered in that VRF, and not answered for an
//! address of another VRF. Which port each frame leaves by, to which MAC and from which
//! address, is read with etherparse from the frames that leave. Nothing is lost (the
//! accounting law) and no buffer leaks.
//!
//! The router (documentation addresses; the two VRFs overlap on purpose):
//!
//! | port | VRF  | addresses                          | beyond it                        |
//! |------|------|------------------------------------|----------------------------------|
//! | eth0 | red  | 198.51.100.1/25, 2001:db8:1::1/64  | red's client .10, ::10           |
//! | eth1 | red  | 192.0.2.1/26, 2001:db8:2::1/64     | red's gateway .2, ::2            |
//! | eth2 | blue | 198.51.100.126/25, 2001:db8:1::fe/64 | blue's client .10, ::10        |
//! | eth3 | blue | 192.0.2.1/26, 2001:db8:2::1/64     | blue's gateway .2, ::2           |
//! | eth4 | main | 192.0.2.129/26                     | main's gateway .130              |
//! | eth5 | main | 192.0.2.193/26                     | main's client .200               |
//!
//! 203.0.113.0/24 and 2001:db8:ff::/48 are routed in all three: red's and blue's via
//! their 192.0.2.2 (the same address on two ports: each VRF finds its own), main's via
//! 192.0.2.130. Red leaks 203.0.113.128/25 to main's gateway out of eth4.

use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, TransportSlice};
use netbatch_runtime::config::Config;
use netbatch_scenarios::{Lab, frames};
use netbatch_wire::ethernet::MacAddr;

/// The router's MAC on port `i`.
fn router(i: u8) -> MacAddr {
    MacAddr([0x02, 0, 0x5e, 0, 0x53, i])
}

/// Who is beyond each port: its MAC (the clients on eth0, eth2, eth5; the gateways on
/// eth1, eth3, eth4).
const PEER: [MacAddr; 6] = [
    MacAddr([0x02, 0, 0, 0, 0, 0x0a]),
    MacAddr([0x02, 0, 0, 0, 1, 0x02]),
    MacAddr([0x02, 0, 0, 0, 2, 0x0a]),
    MacAddr([0x02, 0, 0, 0, 3, 0x02]),
    MacAddr([0x02, 0, 0, 0, 4, 0x82]),
    MacAddr([0x02, 0, 0, 0, 5, 0x0a]),
];

fn config(mode: &str, dispatch: &str) -> String {
    format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"

[[vrf]]
name = "red"
table = 10

[[vrf]]
name = "blue"
table = 20

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:00"
addresses = ["198.51.100.1/25", "2001:db8:1::1/64"]
vrf = "red"

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:01"
addresses = ["192.0.2.1/26", "2001:db8:2::1/64"]
vrf = "red"

[[port]]
name = "eth2"
mac = "02:00:5e:00:53:02"
addresses = ["198.51.100.126/25", "2001:db8:1::fe/64"]
vrf = "blue"

[[port]]
name = "eth3"
mac = "02:00:5e:00:53:03"
addresses = ["192.0.2.1/26", "2001:db8:2::1/64"]
vrf = "blue"

[[port]]
name = "eth4"
mac = "02:00:5e:00:53:04"
addresses = ["192.0.2.129/26"]

[[port]]
name = "eth5"
mac = "02:00:5e:00:53:05"
addresses = ["192.0.2.193/26"]

[[neighbour.static]]
ip = "198.51.100.10"
mac = "02:00:00:00:00:0a"
dev = "eth0"

[[neighbour.static]]
ip = "2001:db8:1::10"
mac = "02:00:00:00:00:0a"
dev = "eth0"

[[neighbour.static]]
ip = "192.0.2.2"
mac = "02:00:00:00:01:02"
dev = "eth1"

[[neighbour.static]]
ip = "2001:db8:2::2"
mac = "02:00:00:00:01:02"
dev = "eth1"

[[neighbour.static]]
ip = "198.51.100.10"
mac = "02:00:00:00:02:0a"
dev = "eth2"

[[neighbour.static]]
ip = "2001:db8:1::10"
mac = "02:00:00:00:02:0a"
dev = "eth2"

[[neighbour.static]]
ip = "192.0.2.2"
mac = "02:00:00:00:03:02"
dev = "eth3"

[[neighbour.static]]
ip = "2001:db8:2::2"
mac = "02:00:00:00:03:02"
dev = "eth3"

[[neighbour.static]]
ip = "192.0.2.130"
mac = "02:00:00:00:04:82"
dev = "eth4"

[[neighbour.static]]
ip = "192.0.2.200"
mac = "02:00:00:00:05:0a"
dev = "eth5"

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.2"
vrf = "red"

[[route]]
prefix = "2001:db8:ff::/48"
via = "2001:db8:2::2"
vrf = "red"

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.2"
table = 20

[[route]]
prefix = "2001:db8:ff::/48"
via = "2001:db8:2::2"
vrf = "blue"

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.130"

# Leaked: a route of red out of a port of main.
[[route]]
prefix = "203.0.113.128/25"
via = "192.0.2.130"
dev = "eth4"
vrf = "red"
"#
    )
}

/// What left the router: the port, the destination MAC, and for IP the source and
/// destination addresses and, for ICMP, the (type, code).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    port: usize,
    to: MacAddr,
    src: String,
    dst: String,
    icmp: Option<(u8, u8)>,
}

/// Every frame that left, port by port (ARP requests as `arp` with the asked address
/// as `dst`).
fn outs(lab: &mut Lab) -> Vec<Out> {
    let mut v = Vec::new();
    for port in 0..6 {
        for f in lab.tx(port) {
            let eth = etherparse::Ethernet2HeaderSlice::from_slice(&f.bytes).expect("Ethernet");
            assert_eq!(eth.source(), router(port as u8).0, "from eth{port}'s MAC");
            let to = MacAddr(eth.destination());
            let p = frames::parse(&f.bytes);
            let (src, dst) = match &p.net {
                Some(NetSlice::Ipv4(ip)) => (
                    ip.header().source_addr().to_string(),
                    ip.header().destination_addr().to_string(),
                ),
                Some(NetSlice::Ipv6(ip)) => (
                    ip.header().source_addr().to_string(),
                    ip.header().destination_addr().to_string(),
                ),
                _ if eth.ether_type() == etherparse::EtherType::ARP => {
                    let tpa = f.bytes.get(38..42).expect("ARP target");
                    (
                        "arp".into(),
                        format!("{}.{}.{}.{}", tpa[0], tpa[1], tpa[2], tpa[3]),
                    )
                }
                other => panic!("eth{port} sent something else: {other:?}"),
            };
            let icmp = match &p.transport {
                Some(TransportSlice::Icmpv4(i)) => Some(match i.icmp_type() {
                    Icmpv4Type::DestinationUnreachable(h) => (3, h.code_u8()),
                    Icmpv4Type::TimeExceeded(c) => (11, c.code_u8()),
                    Icmpv4Type::EchoReply(_) => (0, 0),
                    Icmpv4Type::Redirect(h) => (5, h.code as u8),
                    t => panic!("unexpected ICMP {t:?}"),
                }),
                Some(TransportSlice::Icmpv6(i)) => Some(match i.icmp_type() {
                    Icmpv6Type::DestinationUnreachable(c) => (1, c.code_u8()),
                    Icmpv6Type::TimeExceeded(c) => (3, c.code_u8()),
                    Icmpv6Type::EchoReply(_) => (129, 0),
                    t => panic!("unexpected ICMPv6 {t:?}"),
                }),
                _ => None,
            };
            v.push(Out {
                port,
                to,
                src,
                dst,
                icmp,
            });
        }
    }
    v
}

fn out(port: usize, to: MacAddr, src: &str, dst: &str, icmp: Option<(u8, u8)>) -> Out {
    Out {
        port,
        to,
        src: src.into(),
        dst: dst.into(),
        icmp,
    }
}

/// Runs `frame`, received on port `port`, through a fresh router of `mode`/`dispatch`:
/// what left, and the drops by reason.
fn run(
    mode: &str,
    dispatch: &str,
    port: usize,
    frame: Vec<u8>,
) -> (Vec<Out>, std::collections::BTreeMap<&'static str, u64>) {
    let cfg = Config::parse(&config(mode, dispatch), std::path::Path::new("."), "vrf")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lab = Lab::with_config(&cfg);
    lab.feed(port, vec![frame]);
    lab.run();
    let outs = outs(&mut lab);
    let drops = lab.drops();
    lab.assert_conserved();
    lab.stop_and_check_pool();
    (outs, drops)
}

/// A UDP datagram from the peer of `port` to the router's MAC there.
fn udp(port: usize, src: &str, dst: &str, ttl: u8) -> Vec<u8> {
    frames::udp(
        PEER[port],
        router(port as u8),
        src,
        dst,
        5000,
        53,
        ttl,
        b"vrf",
    )
}

fn udp6(port: usize, src: &str, dst: &str, hops: u8) -> Vec<u8> {
    frames::udp6(
        PEER[port],
        router(port as u8),
        src,
        dst,
        5000,
        53,
        hops,
        b"vrf",
    )
}

fn ping(port: usize, src: &str, dst: &str) -> Vec<u8> {
    frames::echo_request(PEER[port], router(port as u8), src, dst, 7, 1, 64, b"vrf")
}

fn ping6(port: usize, src: &str, dst: &str) -> Vec<u8> {
    frames::echo_request6(PEER[port], router(port as u8), src, dst, 7, 1, 64, b"vrf")
}

const MODES: [(&str, &str); 4] = [
    ("packet", "runs"),
    ("packet", "buckets"),
    ("list", "runs"),
    ("list", "buckets"),
];

/// A case: its name, the port it comes in by, the frame, and what must leave.
type Case = (&'static str, usize, Vec<u8>, Vec<Out>);

#[test]
fn each_vrf_routes_in_its_own_table() {
    let c = "198.51.100.10";
    let cases: Vec<Case> = vec![
        // The same packet, from each VRF's client: to that VRF's own gateway.
        (
            "red to its gateway",
            0,
            udp(0, c, "203.0.113.5", 64),
            vec![out(1, PEER[1], c, "203.0.113.5", None)],
        ),
        (
            "blue to its gateway",
            2,
            udp(2, c, "203.0.113.5", 64),
            vec![out(3, PEER[3], c, "203.0.113.5", None)],
        ),
        (
            "main to its gateway",
            5,
            udp(5, "192.0.2.200", "203.0.113.5", 64),
            vec![out(4, PEER[4], "192.0.2.200", "203.0.113.5", None)],
        ),
        // Red's leaked /25: out of main's eth4, to main's gateway.
        (
            "red's leak",
            0,
            udp(0, c, "203.0.113.200", 64),
            vec![out(4, PEER[4], c, "203.0.113.200", None)],
        ),
        // Blue has no such leak: its /24 takes it to its own gateway.
        (
            "blue does not leak",
            2,
            udp(2, c, "203.0.113.200", 64),
            vec![out(3, PEER[3], c, "203.0.113.200", None)],
        ),
        // Main's subnet is not in red: network unreachable, from red's port address.
        (
            "red cannot reach main",
            0,
            udp(0, c, "192.0.2.140", 64),
            vec![out(0, PEER[0], "198.51.100.1", c, Some((3, 0)))],
        ),
        // The VRFs' subnets are not in main.
        (
            "main cannot reach blue",
            5,
            udp(5, "192.0.2.200", "198.51.100.10", 64),
            vec![out(5, PEER[5], "192.0.2.193", "192.0.2.200", Some((3, 0)))],
        ),
        // TTL exceeded in each VRF, from that VRF's own port address.
        (
            "ttl in red",
            0,
            udp(0, c, "203.0.113.5", 1),
            vec![out(0, PEER[0], "198.51.100.1", c, Some((11, 0)))],
        ),
        (
            "ttl in blue",
            2,
            udp(2, c, "203.0.113.5", 1),
            vec![out(2, PEER[2], "198.51.100.126", c, Some((11, 0)))],
        ),
        // Local delivery: each VRF's port answers for its own address only.
        (
            "ping blue's address from blue",
            2,
            ping(2, c, "198.51.100.126"),
            vec![out(2, PEER[2], "198.51.100.126", c, Some((0, 0)))],
        ),
        (
            "ping red's address from red",
            0,
            ping(0, c, "198.51.100.1"),
            vec![out(0, PEER[0], "198.51.100.1", c, Some((0, 0)))],
        ),
        // Red's address seen from blue is a host on blue's subnet: asked for by ARP
        // (and the client told by a redirect that it is on its link), not answered by
        // red's port.
        (
            "ping red's address from blue",
            2,
            ping(2, c, "198.51.100.1"),
            vec![
                out(2, PEER[2], "198.51.100.126", c, Some((5, 1))),
                out(2, MacAddr::BROADCAST, "arp", "198.51.100.1", None),
            ],
        ),
        // Main's address is not in red's table.
        (
            "ping main's address from red",
            0,
            ping(0, c, "192.0.2.193"),
            vec![out(0, PEER[0], "198.51.100.1", c, Some((3, 0)))],
        ),
        // UDP to blue's address with no socket: port unreachable, from it.
        (
            "udp to blue's address",
            2,
            udp(2, c, "198.51.100.126", 64),
            vec![out(2, PEER[2], "198.51.100.126", c, Some((3, 3)))],
        ),
        // IPv6: the same per VRF.
        (
            "v6 red",
            0,
            udp6(0, "2001:db8:1::10", "2001:db8:ff::5", 64),
            vec![out(1, PEER[1], "2001:db8:1::10", "2001:db8:ff::5", None)],
        ),
        (
            "v6 blue",
            2,
            udp6(2, "2001:db8:1::10", "2001:db8:ff::5", 64),
            vec![out(3, PEER[3], "2001:db8:1::10", "2001:db8:ff::5", None)],
        ),
        (
            "v6 hop limit in blue",
            2,
            udp6(2, "2001:db8:1::10", "2001:db8:ff::5", 1),
            vec![out(
                2,
                PEER[2],
                "2001:db8:1::fe",
                "2001:db8:1::10",
                Some((3, 0)),
            )],
        ),
        (
            "v6 no route in red",
            0,
            udp6(0, "2001:db8:1::10", "2001:db8:99::1", 64),
            vec![out(
                0,
                PEER[0],
                "2001:db8:1::1",
                "2001:db8:1::10",
                Some((1, 0)),
            )],
        ),
        (
            "v6 ping blue's address",
            2,
            ping6(2, "2001:db8:1::10", "2001:db8:1::fe"),
            vec![out(
                2,
                PEER[2],
                "2001:db8:1::fe",
                "2001:db8:1::10",
                Some((129, 0)),
            )],
        ),
    ];
    for (mode, dispatch) in MODES {
        for (name, port, frame, want) in &cases {
            let (mut got, drops) = run(mode, dispatch, *port, frame.clone());
            let mut want = want.clone();
            // Ports in order; within one, what was sent in any order.
            for v in [&mut got, &mut want] {
                v.sort_by(|a, b| (a.port, &a.src, &a.dst).cmp(&(b.port, &b.src, &b.dst)));
            }
            assert_eq!(got, want, "{name} ({mode}/{dispatch}), drops {drops:?}");
        }
    }
}

/// Bad VRF configurations are refused with the key and the reason.
#[test]
fn bad_vrf_configurations_are_refused() {
    let base = config("list", "runs");
    let cases: [(&str, &str, &str); 6] = [
        (
            "[[vrf]]\nname = \"red\"\ntable = 30\n",
            "vrf[2].name",
            "defined twice",
        ),
        (
            "[[vrf]]\nname = \"green\"\ntable = 10\n",
            "vrf[2].table",
            "also vrf[0]'s",
        ),
        (
            "[[vrf]]\nname = \"green\"\ntable = \"main\"\n",
            "vrf[2].table",
            "Linux's own",
        ),
        (
            "[[port]]\nname = \"eth6\"\nmac = \"02:00:5e:00:53:06\"\naddresses = [\"192.0.2.65/26\"]\nvrf = \"green\"\n",
            "port[6].vrf",
            "no VRF named 'green'",
        ),
        (
            "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.2\"\nvrf = \"green\"\n",
            "route[6].vrf",
            "no VRF named 'green'",
        ),
        (
            "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.2\"\nvrf = \"red\"\ntable = 20\n",
            "route[6].table",
            "not VRF 'red''s table",
        ),
    ];
    for (extra, key, why) in cases {
        let text = format!("{base}\n{extra}");
        let err = Config::parse(&text, std::path::Path::new("."), "vrf")
            .expect_err("a bad VRF configuration");
        assert!(
            err.errors
                .iter()
                .any(|e| e.key == key && e.reason.contains(why)),
            "{key}: {why}: {err}"
        );
    }
    // A gateway in main's subnets only is not one of red's: refused without dev.
    let text = format!(
        "{base}\n[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.130\"\nvrf = \"red\"\n"
    );
    let err = Config::parse(&text, std::path::Path::new("."), "vrf").expect_err("off-link");
    assert!(err.errors.iter().any(|e| e.key == "route[6].via"), "{err}");
}
