//! NAT44 through the whole graph, in all four variants: the two-port router with eth0
//! inside (198.51.100.0/24) and eth1 outside (192.0.2.1), the nftables ruleset
//!
//! ```text
//! table ip nat {
//!   chain prerouting { type nat hook prerouting priority dstnat;
//!     iifname "eth1" tcp dport 8080 dnat to 198.51.100.2:80
//!     iifname "eth0" ip daddr 192.0.2.1 tcp dport 8080 dnat to 198.51.100.2:80 }
//!   chain postrouting { type nat hook postrouting priority srcnat;
//!     oifname "eth1" masquerade
//!     oifname "eth0" ip saddr 198.51.100.0/24 ct status dnat masquerade }
//! }
//! ```
//!
//! Every translated frame is checked against an independent expectation: its addresses
//! and ports as the RFC says they must be, and its IPv4, TCP, UDP and ICMP checksums by
//! a full recomputation (not by the incremental update under test).

use etherparse::PacketBuilder;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::tcp_flags as tcp;
use netbatch_scenarios::{self as support, Gro, Lab, LabSpec, PEER, US, US2, VARIANTS, ip};
use netbatch_stack::ct;
use netbatch_stack::filter::{CtMatch, PortRange, Rule, Verdict};
use netbatch_stack::nat::{self, Action, NatChain, NatRule};
use netbatch_wire::checksum::reference::ones_complement_sum;
use netbatch_wire::ethernet::MacAddr;

const GW: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);
const INSIDE: &str = "198.51.100.2";
const INSIDE2: &str = "198.51.100.3";
const INSIDE2_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 3]);
const OUTSIDE: &str = "192.0.2.1";
const ROUTER_IN: &str = "198.51.100.1";
const FAR: &str = "203.0.113.7";
const FAR_ROUTER: &str = "203.0.113.254";

fn ruleset() -> nat::Config {
    let mut fwd = Rule::any(Verdict::Accept);
    fwd.in_if = Some(1);
    fwd.proto = Some(6);
    fwd.dport = Some(PortRange { lo: 8080, hi: 8080 });
    let mut hairpin = Rule::any(Verdict::Accept);
    hairpin.in_if = Some(0);
    hairpin.dst = Some(format!("{OUTSIDE}/32").parse().unwrap());
    hairpin.proto = Some(6);
    hairpin.dport = Some(PortRange { lo: 8080, hi: 8080 });
    let to_inside = Action::Dnat {
        addr: u32::from(ip(INSIDE)),
        port: Some(80),
    };
    let mut out = Rule::any(Verdict::Accept);
    out.out_if = Some(1);
    let mut back = Rule::any(Verdict::Accept);
    back.out_if = Some(0);
    back.src = Some("198.51.100.0/24".parse().unwrap());
    back.ct = Some(CtMatch {
        status: ct::status::DST_NAT,
        ..CtMatch::default()
    });
    let masq = Action::Masquerade { ports: None };
    nat::Config {
        prerouting: NatChain {
            rules: vec![
                NatRule {
                    matches: fwd,
                    action: to_inside,
                },
                NatRule {
                    matches: hairpin,
                    action: to_inside,
                },
            ],
        },
        postrouting: NatChain {
            rules: vec![
                NatRule {
                    matches: out,
                    action: masq,
                },
                NatRule {
                    matches: back,
                    action: masq,
                },
            ],
        },
        udp: Default::default(),
    }
}

fn spec(gro: Gro) -> LabSpec {
    let mut spec = support::router(gro);
    for (a, mac) in [(INSIDE, PEER), (INSIDE2, INSIDE2_MAC)] {
        spec.neighbours.push(StaticNeighbour {
            iface: 0,
            ip: ip(a),
            mac,
        });
    }
    spec.graph.conntrack = Some(ct::Config {
        max: 64,
        ..ct::Config::default()
    });
    spec.graph.nat = Some(ruleset());
    // Hairpinning forwards out the interface a packet came in by: the router would
    // also send a redirect (Linux does too, unless send_redirects is off, as NAT
    // routers set it).
    spec.params.send_redirects = false;
    spec
}

/// The IPv4 packet of a transmitted frame (its link header cut), and its checksums
/// verified by recomputing them in full: IPv4 header; TCP/UDP over the pseudo-header
/// (a UDP checksum of zero is none); ICMP over the message, and for an ICMP error the
/// quoted IPv4 header's too.
fn verified(frame: &[u8]) -> Vec<u8> {
    let p = frame.get(14..).expect("a frame").to_vec();
    assert_eq!(p[0], 0x45, "IPv4 without options");
    assert_eq!(ones_complement_sum(&p[..20]), 0xffff, "IPv4 checksum");
    let l4 = &p[20..];
    match p[9] {
        6 | 17 => {
            let sum_at = if p[9] == 6 { 16 } else { 6 };
            if !(p[9] == 17 && l4[6..8] == [0, 0]) {
                let mut ph = p[12..20].to_vec();
                ph.extend_from_slice(&[0, p[9]]);
                ph.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                ph.extend_from_slice(l4);
                assert_eq!(ones_complement_sum(&ph), 0xffff, "L4 checksum");
                let _ = sum_at;
            }
        }
        1 => {
            assert_eq!(ones_complement_sum(l4), 0xffff, "ICMP checksum");
            if matches!(l4[0], 3 | 11) {
                assert_eq!(
                    ones_complement_sum(&l4[8..28]),
                    0xffff,
                    "quoted IPv4 checksum"
                );
            }
        }
        _ => {}
    }
    p
}

fn addr(p: &[u8], at: usize) -> String {
    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&p[at..at + 4]).unwrap()).to_string()
}

fn port(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

/// Source and destination address and port of an IPv4 packet with ports.
fn ends(p: &[u8]) -> (String, u16, String, u16) {
    (addr(p, 12), port(p, 20), addr(p, 16), port(p, 22))
}

fn one(lab: &mut Lab, port: usize, what: &str) -> Vec<u8> {
    let got = lab.tx(port);
    assert_eq!(got.len(), 1, "{what}: one frame on port {port}");
    verified(&got[0].bytes)
}

/// UDP and ICMP through masquerade, both ways: the far side sees the router's outside
/// address with the port (identifier) kept, the reply comes back to the inside host;
/// a second inside host with the same port towards the same far end gets another port;
/// an unsolicited datagram to the outside address reaches no inside host; a
/// time-exceeded from a router beyond comes back translated with its quote (RFC 5508).
#[test]
fn masquerade_udp_icmp_and_errors() {
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(Gro::Off), mode, dispatch);

        lab.feed(
            0,
            [support::frames::udp(
                PEER, US, INSIDE, FAR, 40000, 53, 64, b"query",
            )],
        );
        lab.run();
        let p = one(&mut lab, 1, &v);
        assert_eq!(
            ends(&p),
            (OUTSIDE.into(), 40000, FAR.into(), 53),
            "{v}: port kept"
        );
        lab.feed(
            1,
            [support::frames::udp(
                GW, US2, FAR, OUTSIDE, 53, 40000, 64, b"answer",
            )],
        );
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!(ends(&p), (FAR.into(), 53, INSIDE.into(), 40000), "{v}");

        // The second host, same port, same far end: another port.
        lab.feed(
            0,
            [support::frames::udp(
                INSIDE2_MAC,
                US,
                INSIDE2,
                FAR,
                40000,
                53,
                64,
                b"query",
            )],
        );
        lab.run();
        let p = one(&mut lab, 1, &v);
        let (s, sp, _, _) = ends(&p);
        assert_eq!(s, OUTSIDE, "{v}");
        assert!(sp >= 1024 && sp != 40000, "{v}: {sp}");
        lab.feed(
            1,
            [support::frames::udp(
                GW, US2, FAR, OUTSIDE, 53, sp, 64, b"answer2",
            )],
        );
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!(ends(&p), (FAR.into(), 53, INSIDE2.into(), 40000), "{v}");

        // Unsolicited: to the outside address, a port nobody mapped: not forwarded.
        lab.feed(
            1,
            [support::frames::udp(
                GW, US2, FAR, OUTSIDE, 53, 40001, 64, b"x",
            )],
        );
        lab.run();
        assert!(lab.tx(0).is_empty(), "{v}: nothing unsolicited inside");
        lab.tx(1);

        // Echo through masquerade, identifier kept.
        lab.feed(
            0,
            [support::frames::echo_request(
                PEER, US, INSIDE, FAR, 0x77, 1, 64, b"ping",
            )],
        );
        lab.run();
        let p = one(&mut lab, 1, &v);
        assert_eq!((addr(&p, 12), port(&p, 24)), (OUTSIDE.into(), 0x77), "{v}");
        let b = PacketBuilder::ethernet2(GW.0, US2.0)
            .ipv4(ip(FAR).octets(), ip(OUTSIDE).octets(), 64)
            .icmpv4_echo_reply(0x77, 1);
        let mut r = Vec::new();
        b.write(&mut r, b"ping").unwrap();
        lab.feed(1, [r]);
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!((addr(&p, 16), port(&p, 24)), (INSIDE.into(), 0x77), "{v}");

        // A traceroute probe (TTL 2) and the time-exceeded a router beyond sends about
        // it, quoting it as it left us (translated).
        lab.feed(
            0,
            [support::frames::udp(
                PEER, US, INSIDE, FAR, 33434, 33435, 2, b"probe",
            )],
        );
        lab.run();
        let sent = one(&mut lab, 1, &v);
        let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&sent[..28]);
        let c = netbatch_wire::checksum::checksum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let b = PacketBuilder::ethernet2(GW.0, US2.0).ipv4(
            ip(FAR_ROUTER).octets(),
            ip(OUTSIDE).octets(),
            64,
        );
        let mut err = Vec::new();
        b.write(&mut err, etherparse::IpNumber::ICMP, &icmp)
            .unwrap();
        lab.feed(1, [err]);
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!(
            (addr(&p, 12), addr(&p, 16)),
            (FAR_ROUTER.into(), INSIDE.into()),
            "{v}: the error's source kept, its destination the inside host"
        );
        let q = &p[28..];
        assert_eq!(
            ends(q),
            (INSIDE.into(), 33434, FAR.into(), 33435),
            "{v}: the quote as the inside host sent it"
        );
        assert_eq!(q[8], 1, "{v}: the quoted TTL as it left us");

        let ct = lab.w.host.ct.as_ref().unwrap();
        assert_eq!(ct.nat.snat, 4, "{v}: two UDP, echo, probe");
        assert_eq!(ct.nat.port_searched, 1, "{v}");
        assert_eq!(ct.nat.icmp_errors, 1, "{v}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// TCP: a connection out through masquerade (handshake and data both ways), port
/// forwarding from outside (dnat to the inside server, its replies from the outside
/// address and port), and hairpinning: an inside host reaching the server through the
/// outside address is translated both ways (dnat, then masquerade to the router's
/// inside address so the server answers through the router).
#[test]
fn tcp_masquerade_port_forwarding_and_hairpin() {
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(Gro::Off), mode, dispatch);
        let (inm, outm) = ((PEER, US), (GW, US2));

        lab.feed(0, [tcp(inm, (INSIDE, 41000), (FAR, 80), "S", 1000, 0, b"")]);
        lab.run();
        assert_eq!(
            ends(&one(&mut lab, 1, &v)),
            (OUTSIDE.into(), 41000, FAR.into(), 80)
        );
        lab.feed(
            1,
            [tcp(
                outm,
                (FAR, 80),
                (OUTSIDE, 41000),
                "SA",
                5000,
                1001,
                b"",
            )],
        );
        lab.run();
        assert_eq!(
            ends(&one(&mut lab, 0, &v)),
            (FAR.into(), 80, INSIDE.into(), 41000)
        );
        lab.feed(
            0,
            [tcp(
                inm,
                (INSIDE, 41000),
                (FAR, 80),
                "A",
                1001,
                5001,
                b"GET /",
            )],
        );
        lab.run();
        let p = one(&mut lab, 1, &v);
        assert_eq!(&p[40..], b"GET /", "{v}");

        // Port forwarding: 8080 on the outside address to the inside server's 80.
        lab.feed(
            1,
            [tcp(outm, (FAR, 50000), (OUTSIDE, 8080), "S", 7, 0, b"")],
        );
        lab.run();
        assert_eq!(
            ends(&one(&mut lab, 0, &v)),
            (FAR.into(), 50000, INSIDE.into(), 80),
            "{v}"
        );
        lab.feed(0, [tcp(inm, (INSIDE, 80), (FAR, 50000), "SA", 900, 8, b"")]);
        lab.run();
        assert_eq!(
            ends(&one(&mut lab, 1, &v)),
            (OUTSIDE.into(), 8080, FAR.into(), 50000),
            "{v}: the server's answer from the outside address and port"
        );

        // Hairpin: the second inside host to the outside address's 8080.
        lab.feed(
            0,
            [tcp(
                (INSIDE2_MAC, US),
                (INSIDE2, 42000),
                (OUTSIDE, 8080),
                "S",
                3,
                0,
                b"",
            )],
        );
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!(
            ends(&p),
            (ROUTER_IN.into(), 42000, INSIDE.into(), 80),
            "{v}: to the server, from the router's inside address"
        );
        lab.feed(
            0,
            [tcp(inm, (INSIDE, 80), (ROUTER_IN, 42000), "SA", 60, 4, b"")],
        );
        lab.run();
        let p = one(&mut lab, 0, &v);
        assert_eq!(
            ends(&p),
            (OUTSIDE.into(), 8080, INSIDE2.into(), 42000),
            "{v}: back to the client from the address it asked"
        );

        let ct = lab.w.host.ct.as_ref().unwrap();
        let hairpin = ct
            .table
            .iter(lab.now())
            .find(|(_, e)| e.tuple[0].sport == 42000)
            .map(|(_, e)| *e)
            .unwrap();
        assert!(
            hairpin.has(ct::status::SRC_NAT) && hairpin.has(ct::status::DST_NAT),
            "{v}"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A train of TCP segments GRO merges (standard and fraglist) leaves as segments that
/// all carry the translation, each with correct checksums.
#[test]
fn every_segment_of_a_gro_chain_is_translated() {
    for gro in [Gro::Standard, Gro::Fraglist] {
        for (mode, dispatch) in VARIANTS {
            let v = format!("{gro:?} {mode:?}/{dispatch:?}");
            let mut lab = Lab::new(&spec(gro), mode, dispatch);
            let payload = [0x5au8; 100];
            let train: Vec<Vec<u8>> = (0..4u32)
                .map(|i| {
                    tcp(
                        (PEER, US),
                        (INSIDE, 43000),
                        (FAR, 80),
                        "A",
                        1 + 100 * i,
                        1,
                        &payload,
                    )
                })
                .collect();
            lab.feed(0, train);
            lab.run();
            let got = lab.tx(1);
            let segs: u16 = got.iter().map(|f| f.segs.max(1)).sum();
            assert_eq!(segs, 4, "{v}: every segment out");
            if mode == netbatch_engine::Mode::List {
                // GRO merged the train: fewer handles than segments went through NAT
                // (the translation of a chain is what this test is about).
                let handles = lab
                    .w
                    .snapshot()
                    .iter()
                    .find(|n| n.name == "nat-postrouting")
                    .map_or(0, |n| n.packets);
                assert!((1..4).contains(&handles), "{v}: {handles} handles");
            }
            for (i, f) in got.iter().enumerate() {
                let p = verified(&f.bytes);
                assert_eq!(
                    ends(&p),
                    (OUTSIDE.into(), 43000, FAR.into(), 80),
                    "{v}: segment {i}"
                );
            }
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// UDP's mapping and filtering (RFC 4787). Inside host 2 holds outside port 40000
/// towards FAR; inside host 1 then sends from the same port 40000 to FAR and to a second
/// remote end. Endpoint-dependent (Linux's, the default): the first leaves by another
/// port, the second keeps 40000 (free towards that remote): one inside endpoint, two
/// outside ones. Endpoint-independent mapping (REQ-1): both leave by the same port,
/// which no other inside endpoint may have. Endpoint-independent filtering (REQ-8): a
/// third remote end that was never sent to reaches the inside endpoint through it (and
/// its answer leaves by it); without, it does not. The mapping goes with its last
/// connection, after which the port is free again.
#[test]
fn udp_mapping_and_filtering_as_rfc_4787_says() {
    const FAR2: &str = "203.0.113.8";
    const FAR3: &str = "203.0.113.9";
    for (mapping, filtering) in [(false, false), (true, false), (true, true)] {
        for (mode, dispatch) in VARIANTS {
            let v = format!("{mode:?}/{dispatch:?} mapping {mapping} filtering {filtering}");
            let mut s = spec(Gro::Off);
            if let Some(n) = s.graph.nat.as_mut() {
                n.udp.independent_mapping = mapping;
                n.udp.independent_filtering = filtering;
            }
            let mut lab = Lab::new(&s, mode, dispatch);
            let send = |lab: &mut Lab, mac, from: &str, to: &str, dport: u16| {
                lab.feed(
                    0,
                    [support::frames::udp(
                        mac, US, from, to, 40000, dport, 64, b"q",
                    )],
                );
                lab.run();
                let (s, sp, d, dp) = ends(&one(lab, 1, &v));
                assert_eq!((s.as_str(), d.as_str(), dp), (OUTSIDE, to, dport), "{v}");
                sp
            };
            assert_eq!(send(&mut lab, INSIDE2_MAC, INSIDE2, FAR, 53), 40000, "{v}");
            let first = send(&mut lab, PEER, INSIDE, FAR, 53);
            assert_ne!(first, 40000, "{v}: 40000 is host 2's towards FAR");
            let second = send(&mut lab, PEER, INSIDE, FAR2, 53);
            if mapping {
                assert_eq!(second, first, "{v}: one outside endpoint (REQ-1)");
            } else {
                assert_eq!(second, 40000, "{v}: Linux keeps the port where it is free");
            }

            // A remote end never sent to, to the first connection's outside endpoint.
            lab.feed(
                1,
                [support::frames::udp(
                    GW, US2, FAR3, OUTSIDE, 7777, first, 64, b"hello",
                )],
            );
            lab.run();
            let inside = lab.tx(0);
            if filtering {
                assert_eq!(inside.len(), 1, "{v}: let in (REQ-8)");
                let p = verified(&inside[0].bytes);
                assert_eq!(ends(&p), (FAR3.into(), 7777, INSIDE.into(), 40000), "{v}");
                lab.feed(
                    0,
                    [support::frames::udp(
                        PEER, US, INSIDE, FAR3, 40000, 7777, 64, b"hi",
                    )],
                );
                lab.run();
                assert_eq!(
                    ends(&one(&mut lab, 1, &v)),
                    (OUTSIDE.into(), first, FAR3.into(), 7777),
                    "{v}: the answer leaves by the mapping"
                );
            } else {
                assert!(inside.is_empty(), "{v}: filtered (no connection to FAR3)");
                lab.tx(1);
            }

            let ct = lab.w.host.ct.as_ref().unwrap();
            let held = ct.mappings.as_ref().map_or(0, |m| m.len());
            assert_eq!(
                held,
                if mapping { 2 } else { 0 },
                "{v}: one per inside endpoint"
            );
            if filtering {
                assert_eq!(ct.mappings.as_ref().unwrap().stats.filtered_in, 1, "{v}");
            }

            // Every connection times out (UDP's unreplied timeout is 30 s); the next
            // list gives their mappings back, and host 1 gets port 40000 again.
            lab.advance(200 * 1_000_000_000);
            assert_eq!(send(&mut lab, PEER, INSIDE, FAR, 53), 40000, "{v}");
            let ct = lab.w.host.ct.as_ref().unwrap();
            assert_eq!(ct.table.len(), 1, "{v}");
            if mapping {
                let m = ct.mappings.as_ref().unwrap();
                assert_eq!(m.len(), 1, "{v}: the old ones went with their connections");
                assert_eq!(m.stats.expired, 2, "{v}");
            }
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}
