//! The PREROUTING and INPUT hooks through the whole graph, in per-packet and list mode
//! with both dispatch strategies: what a rule names is dropped with its hook's reason and
//! counted on its rule, everything else goes on (delivered to its socket, forwarded), and
//! the first matching rule decides.
//!
//! Expectations are worked out by hand from the rules and the traffic (which frames a
//! rule names), not read back from the datapath; frames are built with etherparse.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use netbatch_engine::Reason;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::{self, parse};
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, US, US2, VARIANTS, ip, router};
use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::SocketId;
use netbatch_wire::ethernet::MacAddr;

/// A host on eth1's subnet.
const PEER2: MacAddr = MacAddr([2, 0, 0, 0, 1, 2]);
/// The gateway on eth1 (the support router's static neighbour).
const GW: [u8; 6] = [2, 0, 0, 0, 2, 2];

/// The support router (eth0 198.51.100.1/24, eth1 192.0.2.1/24, 203.0.113.0/24 via
/// 192.0.2.254) with static neighbours for the peers that may be answered, and `chains`.
fn spec(chains: Vec<(HookPoint, Chain)>) -> LabSpec {
    let mut s = router(Gro::Off);
    s.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip("198.51.100.7"),
        mac: PEER,
    });
    s.neighbours.push(StaticNeighbour {
        iface: 1,
        ip: ip("192.0.2.9"),
        mac: PEER2,
    });
    s.graph.chains = chains;
    s
}

/// The bench's `nf1` rule (seed 001): UDP destination ports 9000-9100 dropped.
fn nf1() -> Chain {
    let mut r = Rule::any(Verdict::Drop);
    r.proto = Some(17);
    r.dport = Some("9000-9100".parse().unwrap());
    Chain {
        rules: vec![r],
        policy: Verdict::Accept,
    }
}

/// A UDP datagram from the eth0 peer `src` to `dst:dport`; the payload is `tag`.
fn udp0(src: &str, dst: &str, dport: u16, tag: u8) -> Vec<u8> {
    frames::udp(PEER, US, src, dst, 4000, dport, 64, &[tag])
}

/// A UDP datagram from the eth1 peer `src` to `dst:dport`; the payload is `tag`.
fn udp1(src: &str, dst: &str, dport: u16, tag: u8) -> Vec<u8> {
    frames::udp(PEER2, US2, src, dst, 4000, dport, 64, &[tag])
}

/// The datagrams queued on socket `s`, as (source address, payload tag), in order; they
/// are freed and counted as delivered (the application read them).
fn read_socket(lab: &mut Lab, s: SocketId) -> Vec<(Ipv4Addr, u8)> {
    let mut got = Vec::new();
    lab.w
        .host
        .sockets
        .get(s)
        .unwrap()
        .recv_batch(&mut got, usize::MAX);
    let v = got
        .iter()
        .map(|p| {
            let d = datagram(&lab.w.pool().get(p)).expect("a datagram");
            let core::net::IpAddr::V4(src) = d.src else {
                panic!("an IPv4 datagram")
            };
            (src, d.payload[0])
        })
        .collect();
    lab.w.acct.delivered += got.len() as u64;
    let pool = lab.w.pool().clone();
    pool.cache().free_all(&mut got);
    v
}

/// The event counters of node `name` (rule hits for a hook), or `None` if the node is
/// not in the graph.
fn events(lab: &Lab, name: &str) -> Option<Vec<(&'static str, u64)>> {
    lab.w
        .snapshot()
        .into_iter()
        .find(|n| n.name == name)
        .map(|n| n.events)
}

fn drops(v: &[(Reason, u64)]) -> BTreeMap<&'static str, u64> {
    v.iter().map(|(r, n)| (r.name(), *n)).collect()
}

/// The nf1 rule at PREROUTING: datagrams to 9050 (bound or not), and to the range's
/// edges 9000 and 9100, are dropped as `filter_prerouting` and counted on rule 0,
/// whether they were for us or to be forwarded; datagrams just outside the range (8999,
/// 9101), to a bound socket's port (5001) and TCP to 9050 (another protocol) pass and are
/// delivered or forwarded. Nothing is answered with an ICMP error for a filtered packet.
#[test]
fn nf1_prerouting_drops_the_port_range_and_nothing_else() {
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(vec![(HookPoint::Prerouting, nf1())]), mode, dispatch);
        let any = Ipv4Addr::UNSPECIFIED;
        let s5001 = lab.w.host.sockets.bind(any, 5001, 64).unwrap();
        let s9050 = lab.w.host.sockets.bind(any, 9050, 64).unwrap();
        let s8999 = lab.w.host.sockets.bind(any, 8999, 64).unwrap();
        let s9101 = lab.w.host.sockets.bind(any, 9101, 64).unwrap();
        let us = "198.51.100.1";
        let peer = "198.51.100.7";
        let input = vec![
            udp0(peer, us, 9050, 1),             // dropped (bound, but filtered first)
            udp0(peer, us, 5001, 2),             // delivered
            udp0(peer, us, 9000, 3),             // dropped (low edge, no socket: no ICMP either)
            udp0(peer, us, 9050, 4),             // dropped
            udp0(peer, us, 8999, 5),             // delivered (just below)
            udp0(peer, us, 9100, 6),             // dropped (high edge)
            udp0(peer, us, 9101, 7),             // delivered (just above)
            udp0(peer, us, 5001, 8),             // delivered
            udp0(peer, "203.0.113.9", 9050, 9),  // dropped before routing
            udp0(peer, "203.0.113.9", 5001, 10), // forwarded
            // TCP to 9050: the rule names UDP only; no TCP handler, so tcp_no_handler.
            frames::tcp(PEER, US, peer, us, 4000, 9050, 1, 64, b"x"),
        ];
        lab.feed(0, input.clone());
        lab.run();

        assert_eq!(lab.w.acct.rx, 11, "{what}");
        let want: BTreeMap<&str, u64> = drops(&[
            (netbatch_stack::filter::hook::reason::PREROUTING, 5),
            (netbatch_stack::tcp::reason::NO_HANDLER, 1),
        ]);
        assert_eq!(lab.drops(), want, "{what}: drop reasons");
        // 5 matched rule 0; the other 6 fell through to the policy.
        assert_eq!(
            events(&lab, "hook-prerouting"),
            Some(vec![("rule_0", 5), ("policy", 6)]),
            "{what}: rule hits"
        );
        assert_eq!(events(&lab, "hook-input"), None, "{what}: no INPUT chain");

        let p = Ipv4Addr::new(198, 51, 100, 7);
        assert_eq!(read_socket(&mut lab, s5001), vec![(p, 2), (p, 8)], "{what}");
        assert_eq!(read_socket(&mut lab, s9050), vec![], "{what}");
        assert_eq!(read_socket(&mut lab, s8999), vec![(p, 5)], "{what}");
        assert_eq!(read_socket(&mut lab, s9101), vec![(p, 7)], "{what}");

        assert!(lab.tx(0).is_empty(), "{what}: nothing answered on eth0");
        let tx = lab.tx(1);
        assert_eq!(tx.len(), 1, "{what}: the datagram to 5001 forwarded");
        let f = &tx[0].bytes;
        assert_eq!(&f[0..6], &GW, "{what}: to the gateway");
        let Some(etherparse::TransportSlice::Udp(u)) = parse(f).transport else {
            panic!("{what}: not UDP");
        };
        assert_eq!((u.destination_port(), u.payload()), (5001, &[10u8][..]));
        assert_eq!(lab.w.acct.tx, 1, "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// An INPUT rule naming an input interface and a source prefix (eth0, 198.51.100.0/25):
/// it drops exactly the local packets that arrived on eth0 from a source inside the
/// prefix (UDP to either of our addresses, an echo request, a TCP segment: the rule has
/// no protocol), and lets through a source outside the prefix on eth0, the same source
/// arriving on eth1, and eth1's own peer. A packet forwarded from a named source never
/// passes INPUT and is forwarded.
#[test]
fn input_rule_matches_interface_and_source_prefix() {
    let mut r = Rule::any(Verdict::Drop);
    r.in_if = Some(0);
    r.src = Some("198.51.100.0/25".parse().unwrap());
    let chain = Chain {
        rules: vec![r],
        policy: Verdict::Accept,
    };
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(
            &spec(vec![(HookPoint::Input, chain.clone())]),
            mode,
            dispatch,
        );
        let s = lab
            .w
            .host
            .sockets
            .bind(Ipv4Addr::UNSPECIFIED, 5001, 64)
            .unwrap();
        let named = "198.51.100.7";
        lab.feed(
            0,
            [
                udp0(named, "198.51.100.1", 5001, 1),            // dropped
                udp0("198.51.100.200", "198.51.100.1", 5001, 2), // outside /25: delivered
                udp0(named, "192.0.2.1", 5001, 3), // our other address, on eth0: dropped
                frames::echo_request(PEER, US, named, "198.51.100.1", 1, 1, 64, b"p"), // dropped
                frames::tcp(PEER, US, named, "198.51.100.1", 4000, 22, 1, 64, b"x"), // dropped
                udp0(named, "203.0.113.9", 5001, 4), // forwarded, not INPUT
                udp0("198.51.100.127", "198.51.100.1", 5001, 5), // last of /25: dropped
                udp0("198.51.100.128", "198.51.100.1", 5001, 6), // first past it: delivered
            ],
        );
        lab.feed(
            1,
            [
                udp1(named, "192.0.2.1", 5001, 7), // same source, eth1: delivered
                udp1("192.0.2.9", "192.0.2.1", 5001, 8), // delivered
            ],
        );
        lab.run();

        assert_eq!(lab.w.acct.rx, 10, "{what}");
        assert_eq!(
            lab.drops(),
            drops(&[(netbatch_stack::filter::hook::reason::INPUT, 5)]),
            "{what}: drop reasons"
        );
        // Local packets: 9 (all but the forwarded one); 5 named by the rule.
        assert_eq!(
            events(&lab, "hook-input"),
            Some(vec![("rule_0", 5), ("policy", 4)]),
            "{what}: rule hits"
        );
        let mut got = read_socket(&mut lab, s);
        got.sort_by_key(|&(_, t)| t);
        assert_eq!(
            got,
            vec![
                (ip("198.51.100.200"), 2),
                (ip("198.51.100.128"), 6),
                (ip("198.51.100.7"), 7),
                (ip("192.0.2.9"), 8),
            ],
            "{what}: the unnamed ones delivered"
        );
        assert!(lab.tx(0).is_empty(), "{what}: no echo reply, no ICMP error");
        let tx = lab.tx(1);
        assert_eq!(tx.len(), 1, "{what}");
        let Some(etherparse::NetSlice::Ipv4(h)) = parse(&tx[0].bytes).net else {
            panic!("{what}: not IPv4");
        };
        assert_eq!(h.header().source(), ip(named).octets(), "{what}");
        assert_eq!(h.header().ttl(), 63, "{what}: forwarded");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// First match wins: with [accept UDP from 198.51.100.7/32 to port 5001, drop from
/// 198.51.100.0/24], .7's datagrams to 5001 are delivered although the drop rule names
/// them too, while .7 to 5002 and .8 to 5001 are dropped by rule 1; eth1's peer falls
/// to the (accept) policy. With the two rules swapped, every datagram from the /24 is
/// dropped by the (now first) drop rule.
#[test]
fn first_matching_rule_decides() {
    let mut accept = Rule::any(Verdict::Accept);
    accept.proto = Some(17);
    accept.src = Some("198.51.100.7/32".parse().unwrap());
    accept.dport = Some("5001".parse().unwrap());
    let mut deny = Rule::any(Verdict::Drop);
    deny.src = Some("198.51.100.0/24".parse().unwrap());
    let orders = [
        (vec![accept.clone(), deny.clone()], false),
        (vec![deny, accept], true),
    ];
    for (rules, deny_first) in orders {
        let chain = Chain {
            rules,
            policy: Verdict::Accept,
        };
        for (mode, dispatch) in VARIANTS {
            let what = format!("{mode:?}/{dispatch:?}, deny first: {deny_first}");
            let mut lab = Lab::new(
                &spec(vec![(HookPoint::Input, chain.clone())]),
                mode,
                dispatch,
            );
            let any = Ipv4Addr::UNSPECIFIED;
            let s1 = lab.w.host.sockets.bind(any, 5001, 64).unwrap();
            let s2 = lab.w.host.sockets.bind(any, 5002, 64).unwrap();
            let us = "198.51.100.1";
            lab.feed(
                0,
                [
                    udp0("198.51.100.7", us, 5001, 1),
                    udp0("198.51.100.7", us, 5002, 2),
                    udp0("198.51.100.8", us, 5001, 3),
                    udp0("198.51.100.7", us, 5001, 4),
                ],
            );
            lab.feed(1, [udp1("192.0.2.9", "192.0.2.1", 5002, 5)]);
            lab.run();

            let (delivered_5001, hits, dropped) = if deny_first {
                // Rule 0 (deny) takes all four from the /24.
                (vec![], vec![("rule_0", 4), ("rule_1", 0), ("policy", 1)], 4)
            } else {
                // Rule 0 (accept) takes tags 1 and 4; rule 1 (deny) tags 2 and 3.
                (
                    vec![(ip("198.51.100.7"), 1), (ip("198.51.100.7"), 4)],
                    vec![("rule_0", 2), ("rule_1", 2), ("policy", 1)],
                    2,
                )
            };
            assert_eq!(events(&lab, "hook-input"), Some(hits), "{what}: rule hits");
            assert_eq!(
                lab.drops(),
                drops(&[(netbatch_stack::filter::hook::reason::INPUT, dropped)]),
                "{what}"
            );
            assert_eq!(read_socket(&mut lab, s1), delivered_5001, "{what}");
            assert_eq!(
                read_socket(&mut lab, s2),
                vec![(ip("192.0.2.9"), 5)],
                "{what}"
            );
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// A chain that can drop nothing (accept rules, accept policy) is left out of the graph
/// (the static-key rule): no hook node, every datagram delivered.
#[test]
fn accept_only_chain_is_not_in_the_graph() {
    let chain = Chain {
        rules: vec![Rule::any(Verdict::Accept)],
        policy: Verdict::Accept,
    };
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(
            &spec(vec![
                (HookPoint::Prerouting, chain.clone()),
                (HookPoint::Input, chain.clone()),
            ]),
            mode,
            dispatch,
        );
        let s = lab
            .w
            .host
            .sockets
            .bind(Ipv4Addr::UNSPECIFIED, 9050, 8)
            .unwrap();
        lab.feed(0, [udp0("198.51.100.7", "198.51.100.1", 9050, 1)]);
        lab.run();
        assert_eq!(events(&lab, "hook-prerouting"), None, "{what}");
        assert_eq!(events(&lab, "hook-input"), None, "{what}");
        assert_eq!(
            read_socket(&mut lab, s),
            vec![(ip("198.51.100.7"), 1)],
            "{what}"
        );
        assert!(lab.drops().is_empty(), "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// Rule hits count wire packets, like every other counter: a train of ten 1472-byte
/// datagrams that standard GRO merges into one super-datagram before the hooks is
/// dropped at PREROUTING as 10 `filter_prerouting` drops and 10 hits of the rule that
/// dropped it; a second train to a port the rule does not name passes as 10 policy hits
/// (each rule-hit count equal to the datagrams it decided, by hand).
#[test]
fn rule_hits_count_wire_packets_of_gro_super_packets() {
    let mut r = Rule::any(Verdict::Drop);
    r.proto = Some(17);
    r.dport = Some("8000".parse().unwrap());
    let chain = Chain {
        rules: vec![r],
        policy: Verdict::Accept,
    };
    let dgram = |n: usize, dport: u16| {
        let payload: Vec<u8> = (0..1472).map(|i| (n * 131 + i) as u8).collect();
        let mut f = frames::udp(
            PEER,
            US,
            "198.51.100.7",
            "198.51.100.1",
            7000,
            dport,
            64,
            &payload,
        );
        frames::set_ip_ident(&mut f, n as u16);
        f
    };
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut s = spec(vec![(HookPoint::Prerouting, chain.clone())]);
        let gro = router(Gro::Standard);
        s.ports = gro.ports;
        let mut lab = Lab::new(&s, mode, dispatch);
        let sock = lab
            .w
            .host
            .sockets
            .bind(Ipv4Addr::UNSPECIFIED, 8001, 64)
            .unwrap();
        lab.w.host.sockets.get(sock).unwrap().set_gro(true);
        lab.feed(0, (0..10).map(|n| dgram(n, 8000)));
        lab.run();
        lab.feed(0, (0..10).map(|n| dgram(n, 8001)));
        lab.run();
        assert_eq!(
            lab.drops(),
            drops(&[(netbatch_stack::filter::hook::reason::PREROUTING, 10)]),
            "{what}"
        );
        assert_eq!(
            events(&lab, "hook-prerouting"),
            Some(vec![("rule_0", 10), ("policy", 10)]),
            "{what}: hits in wire packets"
        );
        let mut got = Vec::new();
        lab.w
            .host
            .sockets
            .get(sock)
            .unwrap()
            .recv_batch(&mut got, usize::MAX);
        let wire: u64 = got
            .iter()
            .map(|p| lab.w.pool().get(p).meta.wire_packets())
            .sum();
        assert_eq!(wire, 10, "{what}: the other train delivered");
        lab.w.acct.delivered += wire;
        lab.w.pool().clone().cache().free_all(&mut got);
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
