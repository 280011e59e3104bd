//! ICMP and ICMPv6 Redirects (RFC 1812 5.2.7.2, RFC 4861 8.2) from frames etherparse
//! built, every case in every variant (per-packet and list mode, both dispatch
//! strategies), which must agree; conservation (`rx + originated = tx + delivered +
//! dropped + held`, a redirect being originated) and a full pool are checked at the end.
//!
//! The lab is the dual-stack router of `support` with next hops on eth0's own link:
//! 203.0.113.128/25 via 198.51.100.254 and 2001:db8:400::/48 via fe80::fe (a link-local
//! gateway, as RFC 4861 8.2 names a better router), 2001:db8:500::/48 via the global
//! 2001:db8:100::fe, and the neighbours 198.51.100.30 and 2001:db8:100::30 on eth0. What is
//! expected is what the Linux kernel did with the same routes and packets in a namespace
//! (forwarding and `send_redirects` on, `shared_media` off): redirect and forward the
//! packet for a next hop on the link the sender is on, with the gateway (IPv4) or target
//! (IPv6) the next hop, or the destination when it is on-link; nothing for an off-link
//! sender, and for IPv6 nothing for a global gateway address.

use std::net::{Ipv4Addr, Ipv6Addr};

use netbatch_runtime::setup::{StaticNeighbour, StaticNeighbour6};
use netbatch_scenarios::frames::{self, ipv4, ipv6};
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, PEER6, US, VARIANTS, ip, ip6, router6};
use netbatch_stack::route::{Route, Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;
use netbatch_wire::ipv6::link_local_from_mac;

/// The better first hop on eth0's link (IPv4 198.51.100.254, IPv6 fe80::fe).
const HOP_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xfe]);
/// The on-link destination on eth0 (198.51.100.30, 2001:db8:100::30).
const ONLINK_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x30]);

/// [`router6`] with the next hops of the module doc on eth0's link and `params` changed
/// by `f`.
fn lab(f: impl Fn(&mut netbatch_stack::host::HostParams)) -> LabSpec {
    let mut spec = router6(Gro::Off);
    spec.routes.push(Route {
        prefix: "203.0.113.128/25".parse().expect("prefix"),
        kind: RouteKind::Unicast,
        out_if: Some(0),
        gateway: Some(ip("198.51.100.254")),
        multipath: None,
    });
    for (p, gw) in [
        ("2001:db8:400::/48", "fe80::fe"),
        ("2001:db8:500::/48", "2001:db8:100::fe"),
    ] {
        spec.routes6.push(Route6::new(
            p.parse().expect("prefix"),
            RouteKind::Unicast,
            Some(0),
            Some(ip6(gw)),
        ));
    }
    for (a, mac) in [
        ("198.51.100.254", HOP_MAC),
        ("198.51.100.30", ONLINK_MAC),
        ("198.51.100.2", PEER),
    ] {
        spec.neighbours.push(StaticNeighbour {
            iface: 0,
            ip: ip(a),
            mac,
        });
    }
    for (a, mac) in [
        ("fe80::fe", HOP_MAC),
        ("2001:db8:100::fe", HOP_MAC),
        ("2001:db8:100::30", ONLINK_MAC),
    ] {
        spec.neighbours6.push(StaticNeighbour6 {
            iface: 0,
            ip: ip6(a),
            mac,
        });
    }
    f(&mut spec.params);
    spec
}

/// What the variants produced: frames out of eth0 and eth1 (each step's sorted, as a
/// redirect and its packet take different paths), and the host's redirect counters.
#[derive(Debug, PartialEq, Eq)]
struct Out {
    eth0: Vec<Vec<u8>>,
    eth1: Vec<Vec<u8>>,
    stats: [u64; 4],
    drops: usize,
}

/// Feeds each frame of `input` on eth0 in its own step through `spec` in every variant.
fn run(spec: &LabSpec, input: &[Vec<u8>]) -> Out {
    let mut first: Option<Out> = None;
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(spec, mode, dispatch);
        let (mut eth0, mut eth1) = (Vec::new(), Vec::new());
        for f in input {
            lab.feed(0, [f.clone()]);
            lab.run();
            let mut o: Vec<Vec<u8>> = lab.tx(0).into_iter().map(|f| f.bytes).collect();
            o.sort();
            eth0.extend(o);
            eth1.extend(lab.tx(1).into_iter().map(|f| f.bytes));
        }
        lab.assert_conserved();
        let s = lab.w.host.stats;
        let out = Out {
            eth0,
            eth1,
            stats: [
                s.icmp_redirects_out,
                s.icmp_redirects_rate_limited,
                s.icmp6_redirects_out,
                s.icmp6_redirects_rate_limited,
            ],
            drops: lab.drops().values().sum::<u64>() as usize,
        };
        lab.stop_and_check_pool();
        match &first {
            None => first = Some(out),
            Some(f) => assert_eq!(&out, f, "{mode:?}/{dispatch:?} differs from packet/runs"),
        }
    }
    first.expect("variants")
}

/// The frame of `frames` sent to `mac`.
fn to(frames: &[Vec<u8>], mac: MacAddr) -> Vec<&Vec<u8>> {
    frames.iter().filter(|f| f[0..6] == mac.0).collect()
}

/// Checks `f` is an ICMP Redirect for Host from 198.51.100.1 to the peer naming `gw`,
/// quoting `forwarded` (the packet as it left, TTL decremented, as Linux quotes it);
/// the header checksum by etherparse, the ICMP one summed here.
fn assert_redirect4(f: &[u8], gw: &str, forwarded: &[u8]) {
    let h = ipv4(f);
    assert_eq!(Ipv4Addr::from(h.source), ip("198.51.100.1"));
    assert_eq!(Ipv4Addr::from(h.destination), ip("198.51.100.2"));
    assert_eq!(f[15], 0xc0, "precedence 6");
    assert_eq!(
        h.calc_header_checksum(),
        h.header_checksum,
        "header checksum"
    );
    let m = frames::icmp(f);
    // RFC 1071: the ones'-complement sum of a message with a valid checksum is 0xffff.
    let sum = m.chunks(2).fold(0u32, |a, w| {
        let s = a + u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        (s & 0xffff) + (s >> 16)
    });
    assert_eq!(sum, 0xffff, "ICMP checksum");
    assert_eq!((m[0], m[1]), (5, 1), "Redirect for Host");
    assert_eq!(&m[4..8], &ip(gw).octets(), "gateway");
    assert_eq!(&m[8..], &forwarded[14..], "the packet quoted whole");
}

/// RFC 1812 5.2.7.2: a redirect for a next hop on the sender's own link (a gateway, or
/// the destination itself), the packet forwarded all the same; none for a sender that is
/// not on the link, nor for a packet that leaves by another interface.
#[test]
fn ipv4_redirect_names_the_better_first_hop() {
    let via_gw = frames::udp(PEER, US, "198.51.100.2", "203.0.113.130", 1, 2, 64, b"gw");
    let on_link = frames::udp(PEER, US, "198.51.100.2", "198.51.100.30", 1, 2, 64, b"on");
    let off_link = frames::udp(PEER, US, "203.0.113.5", "203.0.113.131", 1, 2, 64, b"off");
    let other_if = frames::udp(PEER, US, "198.51.100.2", "203.0.113.7", 1, 2, 64, b"eth1");
    let o = run(&lab(|_| {}), &[via_gw, on_link, off_link, other_if]);
    assert_eq!(o.stats, [2, 0, 0, 0], "two redirects sent");
    assert_eq!(o.drops, 0);
    assert_eq!(
        o.eth1.len(),
        1,
        "the packet for eth1, forwarded, no redirect"
    );
    let fwd_gw = to(&o.eth0, HOP_MAC);
    assert_eq!(
        fwd_gw.len(),
        2,
        "via the gateway: from the on-link and the off-link sender"
    );
    assert_eq!(
        to(&o.eth0, ONLINK_MAC).len(),
        1,
        "to the on-link destination"
    );
    let redirects = to(&o.eth0, PEER);
    assert_eq!(redirects.len(), 2);
    // Sorted within a step; the steps in order: via the gateway, then on-link.
    assert_redirect4(redirects[0], "198.51.100.254", fwd_gw[0]);
    assert_redirect4(redirects[1], "198.51.100.30", to(&o.eth0, ONLINK_MAC)[0]);
    assert_eq!(
        ipv4(fwd_gw[0]).time_to_live,
        63,
        "forwarded, TTL decremented"
    );
}

/// `send_redirects = false` sends none (the packet still forwarded); the rate limit is a
/// token bucket of its own: a burst of 10, then none until it refills, counted.
#[test]
fn ipv4_redirects_can_be_turned_off_and_are_rate_limited() {
    let pkts: Vec<Vec<u8>> = (0..15u8)
        .map(|i| frames::udp(PEER, US, "198.51.100.2", "203.0.113.130", 1, 2, 64, &[i; 8]))
        .collect();
    let off = run(&lab(|p| p.send_redirects = false), &pkts[..3]);
    assert_eq!(off.stats, [0; 4]);
    assert_eq!(to(&off.eth0, HOP_MAC).len(), 3, "forwarded");
    assert!(to(&off.eth0, PEER).is_empty(), "no redirect");
    let limited = run(&lab(|_| {}), &pkts);
    assert_eq!(limited.stats, [10, 5, 0, 0], "10 sent, 5 refused");
    assert_eq!(
        to(&limited.eth0, HOP_MAC).len(),
        15,
        "every packet forwarded"
    );
    assert_eq!(to(&limited.eth0, PEER).len(), 10);
}

/// RFC 4861 8.2 as Linux does it: a redirect from our link-local address, hop limit 255,
/// target the link-local gateway (or the destination when on-link), destination the
/// packet's, the target's link-layer address, and the packet as received (hop limit not
/// decremented) in a Redirected Header option cut to 8-byte units; a link-local sender
/// forwarded on its own link and redirected; nothing for a global gateway address, an
/// off-link sender or another interface.
#[test]
fn ipv6_redirect_names_the_better_first_hop() {
    let peer_ll = link_local_from_mac(PEER).to_string();
    let u = |src: &str, dst: &str| frames::udp6(PEER, US, src, dst, 1, 2, 64, b"ipv6 redirect");
    let input = [
        u(PEER6, "2001:db8:400::7"),
        u(PEER6, "2001:db8:100::30"),
        u(&peer_ll, "2001:db8:400::8"),
        u(PEER6, "2001:db8:500::7"),
        u("2001:db8:300::9", "2001:db8:400::9"),
        u(PEER6, "2001:db8:300::7"),
    ];
    let o = run(&lab(|_| {}), &input);
    assert_eq!(o.stats, [0, 0, 3, 0], "three redirects");
    assert_eq!(o.drops, 0);
    assert_eq!(o.eth1.len(), 1, "to eth1: forwarded, no redirect");
    assert_eq!(
        to(&o.eth0, HOP_MAC).len(),
        4,
        "via fe80::fe (3) and 2001:db8:100::fe"
    );
    assert_eq!(to(&o.eth0, ONLINK_MAC).len(), 1);
    let redirects = to(&o.eth0, PEER);
    assert_eq!(redirects.len(), 3);
    let want = [
        (&input[0], PEER6, "fe80::fe", "2001:db8:400::7"),
        (&input[1], PEER6, "2001:db8:100::30", "2001:db8:100::30"),
        (&input[2], peer_ll.as_str(), "fe80::fe", "2001:db8:400::8"),
    ];
    for (f, (sent, dst, target, dest)) in redirects.iter().zip(want) {
        let h = ipv6(f);
        assert_eq!(Ipv6Addr::from(h.source), link_local_from_mac(US));
        assert_eq!(Ipv6Addr::from(h.destination), ip6(dst));
        assert_eq!(h.hop_limit, 255);
        let m = frames::icmp6_of(f);
        assert!(
            etherparse::Icmpv6Slice::from_slice(m)
                .expect("icmpv6")
                .is_checksum_valid(h.source, h.destination),
            "ICMPv6 checksum (etherparse)"
        );
        assert_eq!((m[0], m[1]), (137, 0));
        assert_eq!(&m[8..24], &ip6(target).octets(), "target");
        assert_eq!(&m[24..40], &ip6(dest).octets(), "destination");
        let mac = if target == dest { ONLINK_MAC } else { HOP_MAC };
        assert_eq!(
            &m[40..48],
            &[&[2u8, 1][..], &mac.0[..]].concat()[..],
            "TLLA"
        );
        // Redirected Header: the 62-byte packet in 56 bytes (7 units and the header).
        let packet = &sent[14..];
        let quoted = (packet.len() + 8) / 8 * 8 - 8;
        assert_eq!(m[48], 4);
        assert_eq!(usize::from(m[49]) * 8, quoted + 8);
        assert_eq!(&m[50..56], &[0; 6]);
        assert_eq!(&m[56..], &packet[..quoted], "as received, hop limit 64");
        assert_eq!(m.len(), 56 + quoted);
    }
}

/// ICMPv6 redirects follow `send_redirects` and their own rate limit too.
#[test]
fn ipv6_redirects_can_be_turned_off_and_are_rate_limited() {
    let pkts: Vec<Vec<u8>> = (0..12u8)
        .map(|i| frames::udp6(PEER, US, PEER6, "2001:db8:400::7", 1, 2, 64, &[i; 8]))
        .collect();
    let off = run(&lab(|p| p.send_redirects = false), &pkts[..2]);
    assert_eq!(off.stats, [0; 4]);
    assert_eq!(to(&off.eth0, HOP_MAC).len(), 2);
    let limited = run(&lab(|_| {}), &pkts);
    assert_eq!(limited.stats, [0, 0, 10, 2]);
    assert_eq!(to(&limited.eth0, HOP_MAC).len(), 12);
}
