//! No input makes the datapath panic or lose a packet: arbitrary bytes, and valid frames
//! with random bytes changed or cut short, go through the whole graph (local delivery,
//! forwarding, ARP, ICMP, filter hooks; IPv6 with its extension headers, neighbour
//! discovery and ICMPv6 too) in every mode; every packet must be accounted for
//! and every buffer back in the pool afterwards. GRO is on (standard on one port,
//! fraglist on the other) and some seeds are consecutive segments of one flow, so
//! merged, split and malformed trains meet GRO and GSO too.

use netbatch_engine::{Dispatch, Mode};
use netbatch_runtime::setup::{StaticNeighbour, StaticNeighbour6};
use netbatch_scenarios::frames;
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, PEER6, US, US2, US6, VARIANTS, ip, ip6, port};
use netbatch_stack::GraphOptions;
use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_stack::host::HostParams;
use netbatch_stack::route::{Route, Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;
use proptest::prelude::*;

fn spec() -> LabSpec {
    let mut drop_range = Rule::any(Verdict::Drop);
    drop_range.proto = Some(17);
    drop_range.dport = Some("7000-7100".parse().unwrap());
    let mut fwd = Rule::any(Verdict::Drop);
    fwd.dst = Some("203.0.113.128/25".parse().unwrap());
    let mut fwd6 = Rule::any(Verdict::Drop);
    fwd6.dst = Some("2001:db8:300:bad::/64".parse().unwrap());
    let route6 = |p: &str, kind, out_if, gw: Option<&str>| {
        Route6::new(p.parse().unwrap(), kind, out_if, gw.map(ip6))
    };
    LabSpec {
        routes6: vec![
            route6(
                "2001:db8:300::/48",
                RouteKind::Unicast,
                Some(1),
                Some("2001:db8:200::fe"),
            ),
            route6("2001:db8:666::/48", RouteKind::Blackhole, None, None),
            route6("2001:db8:667::/48", RouteKind::Prohibit, None, None),
        ],
        neighbours6: vec![StaticNeighbour6 {
            iface: 0,
            ip: ip6(PEER6),
            mac: PEER,
        }],
        ports: vec![
            {
                let mut p = port("eth0", US, "198.51.100.1/24");
                p.addrs6 = vec![format!("{US6}/64").parse().unwrap()];
                Gro::Standard.apply(&mut p);
                p
            },
            {
                let mut p = port("eth1", US2, "192.0.2.1/24");
                p.addrs6 = vec!["2001:db8:200::1/64".parse().unwrap()];
                Gro::Fraglist.apply(&mut p);
                p
            },
        ],
        routes: vec![
            Route {
                prefix: "203.0.113.0/24".parse().unwrap(),
                kind: RouteKind::Unicast,
                out_if: Some(1),
                gateway: Some(ip("192.0.2.254")),
                multipath: None,
            },
            Route {
                prefix: "10.66.0.0/16".parse().unwrap(),
                kind: RouteKind::Blackhole,
                out_if: None,
                gateway: None,
                multipath: None,
            },
            Route {
                prefix: "10.67.0.0/16".parse().unwrap(),
                kind: RouteKind::Prohibit,
                out_if: None,
                gateway: None,
                multipath: None,
            },
        ],
        neighbours: vec![StaticNeighbour {
            iface: 0,
            ip: ip("198.51.100.7"),
            mac: PEER,
        }],
        params: HostParams::default(),
        graph: GraphOptions {
            chains: vec![
                (
                    HookPoint::Prerouting,
                    Chain {
                        rules: vec![drop_range],
                        policy: Verdict::Accept,
                    },
                ),
                (
                    HookPoint::Forward,
                    Chain {
                        rules: vec![fwd, fwd6],
                        policy: Verdict::Accept,
                    },
                ),
            ],
            tcp_to: None,
            gro: true,
            classifier: None,
            host_pairs: false,
            // Tracking on, with a table small enough that the frames fill it: arbitrary
            // frames through the conntrack stages, early drop and refusal included.
            conntrack: Some(netbatch_stack::ct::Config {
                max: 16,
                ..Default::default()
            }),
            // A fragment store small enough that arbitrary fragments fill it.
            defrag: netbatch_stack::defrag::Config {
                max_buffers: 8,
                max_datagrams: 4,
                ..Default::default()
            },
            // NAT on both hooks: arbitrary frames through the translation (masquerade
            // out of every port, a port forward to the peer), ICMP errors included.
            nat: Some(netbatch_stack::nat::Config {
                prerouting: netbatch_stack::nat::NatChain {
                    rules: vec![netbatch_stack::nat::NatRule {
                        matches: Rule::any(Verdict::Accept),
                        action: netbatch_stack::nat::Action::Dnat {
                            addr: u32::from(ip("198.51.100.7")),
                            port: Some(80),
                        },
                    }],
                },
                postrouting: netbatch_stack::nat::NatChain {
                    rules: vec![netbatch_stack::nat::NatRule {
                        matches: Rule::any(Verdict::Accept),
                        action: netbatch_stack::nat::Action::Masquerade {
                            ports: Some("1024-1031".parse().unwrap()),
                        },
                    }],
                },
                udp: Default::default(),
            }),
        },
    }
}

/// Valid frames of every kind the graph handles, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    vec![
        frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "198.51.100.1",
            1,
            5001,
            64,
            b"hello",
        ),
        frames::udp(PEER, US, "198.51.100.7", "203.0.113.5", 1, 53, 9, b"fwd"),
        frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "203.0.113.200",
            1,
            53,
            9,
            b"filtered",
        ),
        frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "10.67.1.1",
            1,
            53,
            9,
            b"prohibited",
        ),
        frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "198.51.100.1",
            1,
            7050,
            64,
            b"dropped",
        ),
        frames::udp_vlan(
            PEER,
            US,
            10,
            "198.51.100.7",
            "198.51.100.1",
            1,
            5001,
            b"tagged",
        ),
        frames::tcp(
            PEER,
            US,
            "198.51.100.7",
            "198.51.100.1",
            1,
            22,
            1,
            64,
            b"tcp",
        ),
        frames::tcp(
            PEER,
            US,
            "198.51.100.7",
            "203.0.113.5",
            1,
            80,
            1,
            1,
            b"ttl 1",
        ),
        frames::echo_request(PEER, US, "198.51.100.7", "198.51.100.1", 1, 1, 64, b"ping"),
        // A forwarded TCP flow's consecutive segments (a short last one) and UDP
        // datagrams of one flow, forwarded and local.
        frames::tcp(
            PEER,
            US,
            "198.51.100.7",
            "203.0.113.5",
            1,
            80,
            1,
            64,
            b"aaaa",
        ),
        frames::tcp(
            PEER,
            US,
            "198.51.100.7",
            "203.0.113.5",
            1,
            80,
            5,
            64,
            b"bbbb",
        ),
        frames::tcp(PEER, US, "198.51.100.7", "203.0.113.5", 1, 80, 9, 64, b"cc"),
        frames::udp(PEER, US, "198.51.100.7", "203.0.113.5", 1, 53, 64, b"dddd"),
        frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "198.51.100.1",
            1,
            5001,
            64,
            b"eeee",
        ),
        frames::arp(
            1,
            PEER,
            "198.51.100.7",
            MacAddr([0; 6]),
            "198.51.100.1",
            MacAddr::BROADCAST,
        ),
        frames::arp(
            2,
            MacAddr([2, 0, 0, 0, 2, 2]),
            "192.0.2.254",
            US2,
            "192.0.2.1",
            US2,
        ),
        // IPv6: local UDP, forwarded (a flow's datagrams and segments, so GRO meets
        // them), filtered, blackholed, prohibited, hop limit 1, echo, neighbour
        // discovery both ways, extension headers and a fragment.
        frames::udp6(PEER, US, PEER6, US6, 1, 5001, 64, b"six"),
        frames::udp6(PEER, US, PEER6, "2001:db8:300::5", 1, 53, 64, b"ffff"),
        frames::udp6(PEER, US, PEER6, "2001:db8:300::5", 1, 53, 64, b"gggg"),
        frames::udp6(
            PEER,
            US,
            PEER6,
            "2001:db8:300:bad::5",
            1,
            53,
            64,
            b"filtered",
        ),
        frames::udp6(PEER, US, PEER6, "2001:db8:666::5", 1, 53, 64, b"blackhole"),
        frames::udp6(PEER, US, PEER6, "2001:db8:667::5", 1, 53, 64, b"prohibit"),
        frames::udp6(PEER, US, PEER6, "2001:db8:300::5", 1, 53, 1, b"hop limit 1"),
        frames::tcp6(PEER, US, PEER6, "2001:db8:300::5", 1, 80, 1, 64, b"aaaa"),
        frames::tcp6(PEER, US, PEER6, "2001:db8:300::5", 1, 80, 5, 64, b"bbbb"),
        frames::echo_request6(PEER, US, PEER6, US6, 1, 1, 64, b"ping6"),
        frames::neighbor_solicit(PEER, US, PEER6, US6, US6),
        frames::neighbor_advert(
            MacAddr([2, 0, 0, 0, 2, 2]),
            US2,
            "2001:db8:200::fe",
            "2001:db8:200::1",
            "2001:db8:200::fe",
            (true, true, true),
            Some(MacAddr([2, 0, 0, 0, 2, 2])),
        ),
        ext_headers(),
    ]
}

/// UDP over IPv6 to us behind hop-by-hop, destination options and a first fragment's
/// header (written by hand: etherparse has no builder for chains).
fn ext_headers() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&US.0);
    v.extend_from_slice(&PEER.0);
    v.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 40, 0, 64]);
    v.extend_from_slice(&ip6(PEER6).octets());
    v.extend_from_slice(&ip6(US6).octets());
    v.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    v.extend_from_slice(&[44, 0, 0x1e, 2, 0, 0, 0, 0]);
    v.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
    v.extend_from_slice(&[0, 1, 0x13, 0x89, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    v
}

fn frame() -> impl Strategy<Value = Vec<u8>> {
    let n = seeds().len();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        (
            0..n,
            proptest::collection::vec((0usize..110, any::<u8>()), 1..6),
            0usize..100
        )
            .prop_map(|(i, edits, cut)| {
                let mut f = seeds()[i].clone();
                for (at, b) in edits {
                    if let Some(x) = f.get_mut(at) {
                        *x = b;
                    }
                }
                if cut < 20 {
                    f.truncate(14 + cut);
                }
                f
            }),
        (0..n).prop_map(|i| seeds()[i].clone()),
    ]
}

fn run(mode: Mode, dispatch: Dispatch, input: &[(u8, Vec<u8>)]) {
    let mut lab = Lab::new(&spec(), mode, dispatch);
    let s = lab.w.host.sockets.bind(ip("0.0.0.0"), 5001, 8).unwrap();
    let s6 = lab.w.host.sockets.bind(ip6("::"), 5001, 8).unwrap();
    // Half the cases take super-datagrams whole, half have them segmented at the socket.
    for s in [s, s6] {
        lab.w
            .host
            .sockets
            .get(s)
            .unwrap()
            .set_gro(input.len().is_multiple_of(2));
    }
    for (p, f) in input {
        lab.feed(usize::from(p % 2), [f.clone()]);
    }
    lab.run();
    // Conserved while packets (GRO super-packets among them) wait for ARP, too.
    lab.assert_conserved();
    // Let ARP resolution time out so queued packets are failed and released.
    for _ in 0..5 {
        lab.advance(1_000_000_000);
    }
    assert_eq!(lab.w.acct.rx, input.len() as u64);
    lab.assert_conserved();
    lab.stop_and_check_pool();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_frames_never_panic_nor_leak(input in proptest::collection::vec((any::<u8>(), frame()), 0..80)) {
        for (mode, dispatch) in VARIANTS {
            run(mode, dispatch, &input);
        }
    }
}
