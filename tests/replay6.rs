//! IPv6 router behaviour from frames built here (etherparse, or by hand where etherparse
//! has no builder): forwarding (hop limit, MACs, checksums checked by etherparse),
//! ICMPv6 Time Exceeded, Destination Unreachable, Packet Too Big and Parameter Problem
//! (RFC 4443), neighbour discovery resolving a next hop with packets queued behind it
//! and answering solicitations (RFC 4861), echo to our global and link-local addresses,
//! a FORWARD rule on an IPv6 prefix, malformed packets each dropped with its reason
//! (RFC 8200). Every case runs in per-packet and list mode with both dispatch
//! strategies, which must give the same frames, and `rx + originated = tx + delivered +
//! dropped + held` must hold with every buffer back in the pool at the end.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use netbatch_scenarios::frames::{self, ipv6};
use netbatch_scenarios::{
    GW_MAC, GW6, Gro, Lab, LabSpec, PEER, PEER6, US, US2, US6, US26, VARIANTS, ip6, router6,
};
use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_stack::route::{Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;
use netbatch_wire::ipv6::link_local_from_mac;

/// What one variant produced: frames sent per port, drops by reason.
#[derive(Debug, PartialEq, Eq)]
struct Out {
    eth0: Vec<Vec<u8>>,
    eth1: Vec<Vec<u8>>,
    drops: BTreeMap<&'static str, u64>,
}

/// Runs `input` (frames received on eth0, in order) through `spec` in every variant; the
/// variants must agree frame for frame (one flow per case, so `buckets` keeps the order);
/// conservation and the pool are checked. Returns the outcome.
fn run(spec: &LabSpec, input: &[Vec<u8>]) -> Out {
    run_steps(spec, &[(0, input.to_vec())], |_| {})
}

/// As [`run`] with frames fed in steps `(port, frames)`, `between(lab)` called after each.
fn run_steps(spec: &LabSpec, steps: &[(usize, Vec<Vec<u8>>)], between: impl Fn(&mut Lab)) -> Out {
    let mut first: Option<Out> = None;
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(spec, mode, dispatch);
        let (mut eth0, mut eth1) = (Vec::new(), Vec::new());
        for (port, frames) in steps {
            lab.feed(*port, frames.iter().cloned());
            lab.run();
            between(&mut lab);
            eth0.extend(lab.tx(0).into_iter().map(|f| f.bytes));
            eth1.extend(lab.tx(1).into_iter().map(|f| f.bytes));
        }
        lab.assert_conserved();
        let out = Out {
            eth0,
            eth1,
            drops: lab.drops(),
        };
        lab.stop_and_check_pool();
        match &first {
            None => first = Some(out),
            Some(f) => assert_eq!(&out, f, "{mode:?}/{dispatch:?} differs from packet/runs"),
        }
    }
    first.expect("variants")
}

/// A UDP datagram from the peer on eth0 to `dst` with hop limit `hl`.
fn peer_udp(dst: &str, hl: u8, payload: &[u8]) -> Vec<u8> {
    frames::udp6(PEER, US, PEER6, dst, 4000, 53, hl, payload)
}

/// The ICMPv6 message of `f` with its checksum verified by etherparse against the
/// frame's addresses.
fn icmp6_checked(f: &[u8]) -> Vec<u8> {
    let ip = ipv6(f);
    let msg = frames::icmp6_of(f);
    let s = etherparse::Icmpv6Slice::from_slice(msg).expect("icmpv6");
    assert!(
        s.is_checksum_valid(ip.source, ip.destination),
        "ICMPv6 checksum (etherparse)"
    );
    msg.to_vec()
}

#[test]
fn forwarding_decrements_the_hop_limit_and_rewrites_macs() {
    let input: Vec<Vec<u8>> = (0..20u8)
        .map(|i| peer_udp("2001:db8:300::5", 64 - i, &[i; 40]))
        .chain((0..5u32).map(|i| {
            frames::tcp6(
                PEER,
                US,
                PEER6,
                "2001:db8:300::7",
                40000,
                443,
                1 + i * 10,
                9,
                &[7; 10],
            )
        }))
        .collect();
    let o = run(&router6(Gro::Off), &input);
    assert!(o.eth0.is_empty());
    assert_eq!(o.eth1.len(), 25);
    for (f, sent) in o.eth1.iter().zip(&input) {
        assert_eq!(&f[0..6], &GW_MAC.0, "to the gateway");
        assert_eq!(&f[6..12], &US2.0, "from eth1");
        let h = ipv6(f);
        assert_eq!(h.hop_limit, sent[21] - 1, "hop limit decremented once");
        // Nothing else changed: the upper-layer checksum still verifies (etherparse).
        let mut want = sent[14..].to_vec();
        want[7] -= 1;
        assert_eq!(&f[14..], &want[..]);
        let p = frames::parse(f);
        match p.transport {
            Some(etherparse::TransportSlice::Udp(u)) => {
                let sum = u
                    .to_header()
                    .calc_checksum_ipv6(&h, u.payload())
                    .expect("checksum");
                assert_eq!(sum, u.checksum());
            }
            Some(etherparse::TransportSlice::Tcp(t)) => {
                let sum = t
                    .to_header()
                    .calc_checksum_ipv6(&h, t.payload())
                    .expect("checksum");
                assert_eq!(sum, t.checksum());
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(o.drops.is_empty(), "{:?}", o.drops);
}

#[test]
fn hop_limit_one_gets_time_exceeded_quoting_the_original() {
    let probe = peer_udp("2001:db8:300::5", 1, b"traceroute");
    let o = run(&router6(Gro::Off), std::slice::from_ref(&probe));
    assert!(o.eth1.is_empty(), "not forwarded");
    assert_eq!(o.eth0.len(), 1);
    let f = &o.eth0[0];
    assert_eq!(&f[0..6], &PEER.0, "back to the sender");
    let h = ipv6(f);
    assert_eq!(
        (Ipv6Addr::from(h.source), Ipv6Addr::from(h.destination)),
        (ip6(US6), ip6(PEER6)),
        "from our address toward the sender"
    );
    let m = icmp6_checked(f);
    assert_eq!((m[0], m[1]), (3, 0), "time exceeded, hop limit");
    assert_eq!(&m[4..8], &[0; 4], "unused");
    assert_eq!(
        &m[8..],
        &probe[14..],
        "the datagram as received, hop limit 1"
    );
}

#[test]
fn unroutable_destinations_get_unreachable() {
    let mut spec = router6(Gro::Off);
    for (p, kind) in [
        ("2001:db8:666::/48", RouteKind::Prohibit),
        ("2001:db8:667::/48", RouteKind::Unreachable),
        ("2001:db8:668::/48", RouteKind::Blackhole),
    ] {
        spec.routes6
            .push(Route6::new(p.parse().expect("prefix"), kind, None, None));
    }
    let input = vec![
        peer_udp("2001:db8:999::1", 64, b"nowhere"),
        peer_udp("2001:db8:666::1", 64, b"prohibited"),
        peer_udp("2001:db8:667::1", 64, b"unreachable"),
        peer_udp("2001:db8:668::1", 64, b"blackhole"),
        // To us, a UDP port nobody listens on: port unreachable.
        peer_udp(US6, 64, b"no socket"),
    ];
    let o = run(&spec, &input);
    assert!(o.eth1.is_empty());
    let got: Vec<(u8, u8)> = o
        .eth0
        .iter()
        .map(|f| {
            let m = icmp6_checked(f);
            (m[0], m[1])
        })
        .collect();
    assert_eq!(
        got,
        vec![(1, 0), (1, 1), (1, 0), (1, 4)],
        "no route, administratively prohibited, unreachable route, port unreachable"
    );
    for (f, sent) in o
        .eth0
        .iter()
        .zip([&input[0], &input[1], &input[2], &input[4]])
    {
        assert_eq!(&icmp6_checked(f)[8..], &sent[14..], "quotes the packet");
    }
    assert_eq!(o.drops.get("route_blackhole"), Some(&1));
}

#[test]
fn a_smaller_mtu_gets_packet_too_big_with_the_mtu() {
    let mut spec = router6(Gro::Off);
    spec.ports[1].mtu = 1400;
    let big = peer_udp("2001:db8:300::5", 64, &[0x5a; 1400 - 48 + 1]);
    let fits = peer_udp("2001:db8:300::5", 64, &[0x5a; 1400 - 48]);
    let o = run(&spec, &[big.clone(), fits]);
    assert_eq!(o.eth1.len(), 1, "the one that fits");
    assert_eq!(o.eth1[0].len(), 14 + 1400);
    assert_eq!(o.eth0.len(), 1);
    let m = icmp6_checked(&o.eth0[0]);
    assert_eq!((m[0], m[1]), (2, 0), "packet too big");
    assert_eq!(
        u32::from_be_bytes([m[4], m[5], m[6], m[7]]),
        1400,
        "the MTU"
    );
    // As much of the packet as fits in 1280 bytes (RFC 4443 2.4 (c)), hop limit as
    // received.
    assert_eq!(o.eth0[0].len(), 14 + 1280);
    assert_eq!(&m[8..], &big[14..14 + 1280 - 48]);
}

/// A route through a next hop whose MAC is not configured: the first packets wait while
/// a multicast solicitation asks for it (from our address on eth1, to its solicited-node
/// group, with our MAC); the advertisement releases them, in order.
#[test]
fn neighbour_discovery_resolves_the_next_hop_then_sends_what_waited() {
    let mut spec = router6(Gro::Off);
    let gw = "2001:db8:200::99";
    spec.routes6.push(Route6::new(
        "2001:db8:400::/48".parse().expect("prefix"),
        RouteKind::Unicast,
        Some(1),
        Some(ip6(gw)),
    ));
    let gw_mac = MacAddr([2, 0, 0, 0, 2, 0x99]);
    let waiting: Vec<Vec<u8>> = (0..3u8)
        .map(|i| peer_udp("2001:db8:400::1", 64, &[i; 20]))
        .collect();
    let advert =
        frames::neighbor_advert(gw_mac, US2, gw, US26, gw, (true, true, true), Some(gw_mac));
    let o = run_steps(&spec, &[(0, waiting.clone()), (1, vec![advert])], |_| {});
    // The solicitation, then the three packets.
    assert_eq!(o.eth1.len(), 4, "{:02x?}", o.eth1);
    let ns = &o.eth1[0];
    assert_eq!(
        &ns[0..6],
        &[0x33, 0x33, 0xff, 0, 0, 0x99],
        "solicited-node MAC"
    );
    let h = ipv6(ns);
    assert_eq!(h.hop_limit, 255);
    assert_eq!(Ipv6Addr::from(h.source), ip6(US26));
    assert_eq!(Ipv6Addr::from(h.destination), ip6("ff02::1:ff00:99"));
    let m = icmp6_checked(ns);
    assert_eq!((m[0], m[1]), (135, 0));
    assert_eq!(&m[8..24], &ip6(gw).octets(), "the target");
    assert_eq!(
        &m[24..32],
        &[1, 1, 2, 0, 0, 0, 1, 1],
        "our MAC as source option"
    );
    for (f, sent) in o.eth1[1..].iter().zip(&waiting) {
        assert_eq!(&f[0..6], &gw_mac.0, "to the resolved MAC");
        assert_eq!(ipv6(f).hop_limit, 63);
        assert_eq!(
            &f[14 + 8..],
            &sent[14 + 8..],
            "addresses and payload unchanged"
        );
    }
    assert!(o.drops.is_empty(), "{:?}", o.drops);
}

/// Solicitations for our addresses are answered (RFC 4861 7.2.4): solicited, to the
/// asker, from the target, with our MAC; a duplicate address detection probe (from
/// `::`) is answered to all-nodes, not solicited. One for another address is not.
#[test]
fn solicitations_for_our_addresses_are_answered() {
    let ll = link_local_from_mac(US).to_string();
    let peer_ll = link_local_from_mac(PEER).to_string();
    let input = vec![
        frames::neighbor_solicit(
            PEER,
            MacAddr([0x33, 0x33, 0xff, 0, 0, 1]),
            PEER6,
            "ff02::1:ff00:1",
            US6,
        ),
        frames::neighbor_solicit(PEER, US, &peer_ll, &ll, &ll),
        frames::neighbor_solicit(
            PEER,
            MacAddr([0x33, 0x33, 0xff, 0, 0, 1]),
            "::",
            "ff02::1:ff00:1",
            US6,
        ),
        // Unicast to us, for an address that is not ours.
        frames::neighbor_solicit(PEER, US, PEER6, US6, "2001:db8:100::7"),
        // To another node's solicited-node group: a group we have not joined.
        frames::neighbor_solicit(
            PEER,
            MacAddr([0x33, 0x33, 0xff, 0, 0, 7]),
            PEER6,
            "ff02::1:ff00:7",
            "2001:db8:100::7",
        ),
    ];
    let o = run(&router6(Gro::Off), &input);
    assert_eq!(o.eth0.len(), 3);
    let want = [
        (PEER.0, US6.to_string(), PEER6.to_string(), 0xe0u8),
        (PEER.0, ll.clone(), peer_ll.clone(), 0xe0),
        (
            [0x33, 0x33, 0, 0, 0, 1],
            US6.to_string(),
            "ff02::1".to_string(),
            0xa0,
        ),
    ];
    for (f, (mac, src, dst, flags)) in o.eth0.iter().zip(want) {
        assert_eq!(&f[0..6], &mac);
        assert_eq!(&f[6..12], &US.0);
        let h = ipv6(f);
        assert_eq!(h.hop_limit, 255);
        assert_eq!(Ipv6Addr::from(h.source), ip6(&src));
        assert_eq!(Ipv6Addr::from(h.destination), ip6(&dst));
        let m = icmp6_checked(f);
        assert_eq!((m[0], m[1]), (136, 0), "an advertisement");
        assert_eq!(m[4], flags, "R, S, O");
        assert_eq!(&m[8..24], &ip6(&src).octets(), "the target");
        assert_eq!(
            &m[24..32],
            &[2, 1, 2, 0, 0, 0, 0, 1],
            "our MAC as target option"
        );
    }
    assert_eq!(o.drops.get("nd_target_not_ours"), Some(&1));
    assert_eq!(o.drops.get("ip6_multicast_not_joined"), Some(&1));
}

/// Echo requests to our global address and to eth0's link-local one are answered from
/// the address they were sent to (RFC 4443 4.2), the data echoed.
#[test]
fn echo_requests_to_our_addresses_are_answered() {
    let ll = link_local_from_mac(US).to_string();
    let peer_ll = link_local_from_mac(PEER).to_string();
    let input = vec![
        frames::echo_request6(PEER, US, PEER6, US6, 7, 1, 64, b"ping six"),
        frames::echo_request6(PEER, US, &peer_ll, &ll, 7, 2, 64, b"ping link"),
        // To eth1's global address, received on eth0: it is ours too.
        frames::echo_request6(PEER, US, PEER6, US26, 7, 3, 64, b"other port"),
    ];
    let o = run(&router6(Gro::Off), &input);
    assert_eq!(o.eth0.len(), 3);
    for (f, (req, (src, dst))) in o.eth0.iter().zip(input.iter().zip([
        (US6, PEER6),
        (ll.as_str(), peer_ll.as_str()),
        (US26, PEER6),
    ])) {
        let h = ipv6(f);
        assert_eq!(Ipv6Addr::from(h.source), ip6(src));
        assert_eq!(Ipv6Addr::from(h.destination), ip6(dst));
        let m = icmp6_checked(f);
        assert_eq!((m[0], m[1]), (129, 0), "echo reply");
        assert_eq!(
            &m[4..],
            &req[14 + 40 + 4..],
            "identifier, sequence and data echoed"
        );
    }
}

/// A FORWARD rule on an IPv6 prefix drops exactly what it matches, counted per wire
/// packet; an IPv4 rule of the same chain leaves IPv6 alone.
#[test]
fn a_forward_rule_on_an_ipv6_prefix() {
    let mut spec = router6(Gro::Off);
    let mut deny = Rule::any(Verdict::Drop);
    deny.dst = Some("2001:db8:300:bad::/64".parse().expect("prefix"));
    deny.proto = Some(17);
    let mut v4 = Rule::any(Verdict::Drop);
    v4.dst = Some("0.0.0.0/0".parse().expect("prefix"));
    spec.graph.chains = vec![(
        HookPoint::Forward,
        Chain {
            rules: vec![v4, deny],
            policy: Verdict::Accept,
        },
    )];
    let input = vec![
        peer_udp("2001:db8:300:bad::1", 64, b"denied"),
        peer_udp("2001:db8:300:600d::1", 64, b"allowed"),
        frames::tcp6(
            PEER,
            US,
            PEER6,
            "2001:db8:300:bad::1",
            1,
            2,
            3,
            64,
            b"tcp passes",
        ),
    ];
    let o = run(&spec, &input);
    assert_eq!(o.eth1.len(), 2);
    assert_eq!(o.drops.get("filter_forward"), Some(&1));
}

/// Malformed IPv6, each dropped with its own reason (RFC 8200 3, 4); hop-by-hop after
/// another header in a packet for us is answered with a Parameter Problem pointing at the
/// next header field that names it.
#[test]
fn malformed_ipv6_is_dropped_with_its_reason() {
    let good = peer_udp("2001:db8:300::5", 64, &[1; 16]);
    let mut long = good.clone();
    long[18..20].copy_from_slice(&100u16.to_be_bytes()); // payload length past the frame
    // A destination options header (8 bytes) naming hop-by-hop (0), then one naming UDP.
    let hbh_second = with_chain(
        US6,
        60,
        &[[0, 0, 1, 4, 0, 0, 0, 0], [17, 0, 1, 4, 0, 0, 0, 0]],
    );
    // Nine destination options headers: more than the walk crosses.
    let overlong = with_chain(US6, 60, &nine_options());
    // A destination options header cut by the payload length.
    let mut cut = with_chain(US6, 60, &[[17, 1, 1, 12, 0, 0, 0, 0]]);
    cut.truncate(14 + 40 + 8);
    cut[18..20].copy_from_slice(&8u16.to_be_bytes());
    let mut multicast_src = good.clone();
    multicast_src[22..38].copy_from_slice(&ip6("ff02::1").octets());
    let o = run(
        &router6(Gro::Off),
        &[
            long,
            hbh_second.clone(),
            overlong,
            cut,
            multicast_src,
            good[..14 + 39].to_vec(),
        ],
    );
    let want: BTreeMap<&str, u64> = [
        ("ip6_payload_len", 1),
        ("ip6_ext_chain_too_long", 1),
        ("ip6_ext_truncated", 1),
        ("ip6_source_multicast", 1),
        ("ip6_truncated", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(o.drops, want);
    assert!(o.eth1.is_empty());
    assert_eq!(o.eth0.len(), 1, "the parameter problem");
    let m = icmp6_checked(&o.eth0[0]);
    assert_eq!((m[0], m[1]), (4, 1), "unrecognized next header");
    assert_eq!(
        u32::from_be_bytes([m[4], m[5], m[6], m[7]]),
        40,
        "at the first header's next header field"
    );
    assert_eq!(&m[8..], &hbh_second[14..]);
}

/// Nine destination options headers (each naming the next, the last UDP): more than the
/// walk crosses.
fn nine_options() -> Vec<[u8; 8]> {
    (0..9)
        .map(|i| [if i == 8 { 17 } else { 60 }, 0, 1, 4, 0, 0, 0, 0])
        .collect()
}

/// A packet from the peer to `dst` whose fixed header names `first`, then the extension
/// headers `chain` (each naming the next), then 8 bytes of UDP.
fn with_chain(dst: &str, first: u8, chain: &[[u8; 8]]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&US.0);
    v.extend_from_slice(&PEER.0);
    v.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    v.extend_from_slice(&((chain.len() * 8 + 8) as u16).to_be_bytes());
    v.extend_from_slice(&[first, 64]);
    v.extend_from_slice(&ip6(PEER6).octets());
    v.extend_from_slice(&ip6(dst).octets());
    for h in chain {
        v.extend_from_slice(h);
    }
    v.extend_from_slice(&[0x0f, 0xa0, 0, 53, 0, 8, 0, 0]);
    v
}

/// Extension headers in transit (RFC 8200 4, RFC 7045 2.2): a router that only forwards a
/// packet examines none of its extension headers but a first hop-by-hop one, so a
/// hop-by-hop header that is not first, an extension header of a kind netbatch does not
/// know, a chain longer than the walk's bounds and a chain the payload length cuts are
/// all forwarded, unchanged but for the hop limit, as the Linux kernel forwards them
/// (checked against it in `crates/netbatch/tests/rfc_vs_kernel.rs`). Only the node that
/// processes the headers answers them: the same packets addressed to us get the
/// Parameter Problem (code 1, RFC 8200 4) or the drop of `malformed_ipv6_is_dropped_with_its_reason`.
/// A first hop-by-hop header cut by the payload length is dropped in transit as well (it
/// is the one header a router reads: Linux's `ipv6_parse_hopopts` drops it too).
#[test]
fn extension_headers_in_transit_are_forwarded() {
    const FAR: &str = "2001:db8:300::5";
    let hbh_second = || vec![[0, 0, 1, 4, 0, 0, 0, 0], [17, 0, 1, 4, 0, 0, 0, 0]];
    let unknown = || vec![[17, 0, 1, 4, 0, 0, 0, 0]];
    let cut = |dst| {
        let mut c = with_chain(dst, 60, &[[17, 1, 1, 12, 0, 0, 0, 0]]);
        c.truncate(14 + 40 + 8);
        c[18..20].copy_from_slice(&8u16.to_be_bytes());
        c
    };
    let transit = vec![
        with_chain(FAR, 60, &hbh_second()),
        // Next header 253 (RFC 3692 experimental), an extension header netbatch cannot
        // cross, named by the fixed header.
        with_chain(FAR, 253, &unknown()),
        with_chain(FAR, 60, &nine_options()),
        cut(FAR),
    ];
    let o = run(&router6(Gro::Off), &transit);
    assert!(
        o.eth0.is_empty(),
        "no Parameter Problem in transit: {:02x?}",
        o.eth0
    );
    assert_eq!(o.drops, BTreeMap::new());
    assert_eq!(o.eth1.len(), transit.len(), "every one forwarded");
    for (f, sent) in o.eth1.iter().zip(&transit) {
        assert_eq!(&f[0..6], &GW_MAC.0, "to the gateway");
        let mut want = sent[14..].to_vec();
        want[7] -= 1;
        assert_eq!(&f[14..], &want[..], "unchanged but the hop limit");
    }
    // A first hop-by-hop header the payload length cuts: dropped, in transit too.
    let mut hbh_cut = with_chain(FAR, 0, &[[17, 1, 1, 12, 0, 0, 0, 0]]);
    hbh_cut.truncate(14 + 40 + 8);
    hbh_cut[18..20].copy_from_slice(&8u16.to_be_bytes());
    let o = run(&router6(Gro::Off), &[hbh_cut]);
    assert!(o.eth0.is_empty() && o.eth1.is_empty());
    assert_eq!(o.drops, [("ip6_ext_truncated", 1)].into_iter().collect());
    // The same to us: answered or dropped as the node that processes them.
    let local = vec![
        with_chain(US6, 60, &hbh_second()),
        with_chain(US6, 253, &unknown()),
        with_chain(US6, 60, &nine_options()),
        cut(US6),
    ];
    let o = run(&router6(Gro::Off), &local);
    assert!(o.eth1.is_empty());
    let want: BTreeMap<&str, u64> = [("ip6_ext_chain_too_long", 1), ("ip6_ext_truncated", 1)]
        .into_iter()
        .collect();
    assert_eq!(o.drops, want);
    assert_eq!(o.eth0.len(), 2, "two Parameter Problems");
    for (f, (sent, pointer)) in o.eth0.iter().zip([(&local[0], 40u32), (&local[1], 6)]) {
        assert_eq!(Ipv6Addr::from(ipv6(f).source), ip6(US6));
        let m = icmp6_checked(f);
        assert_eq!((m[0], m[1]), (4, 1), "unrecognized next header");
        assert_eq!(u32::from_be_bytes([m[4], m[5], m[6], m[7]]), pointer);
        assert_eq!(&m[8..], &sent[14..], "the packet quoted");
    }
}

/// A packet with a link-local source cannot leave its link: Destination Unreachable,
/// beyond scope of source address (RFC 4443 3.1), sent back on that link; a link-local
/// destination that is not ours is never forwarded; a zero UDP checksum to us is
/// refused (RFC 8200 8.1).
#[test]
fn link_local_scope_and_zero_checksums() {
    let peer_ll = link_local_from_mac(PEER).to_string();
    let from_ll = frames::udp6(PEER, US, &peer_ll, "2001:db8:300::5", 1, 2, 64, b"scoped");
    let to_other_ll = frames::udp6(PEER, US, PEER6, "fe80::1234", 1, 2, 64, b"not ours");
    let mut zero = frames::udp6(PEER, US, PEER6, US6, 1, 2, 64, b"no checksum");
    zero[14 + 40 + 6..14 + 40 + 8].fill(0);
    let o = run(&router6(Gro::Off), &[from_ll.clone(), to_other_ll, zero]);
    assert!(o.eth1.is_empty());
    assert_eq!(o.eth0.len(), 1);
    let h = ipv6(&o.eth0[0]);
    assert_eq!(
        Ipv6Addr::from(h.source),
        link_local_from_mac(US),
        "from our link-local"
    );
    assert_eq!(Ipv6Addr::from(h.destination), ip6(&peer_ll));
    let m = icmp6_checked(&o.eth0[0]);
    assert_eq!((m[0], m[1]), (1, 2), "beyond scope of source address");
    let want: BTreeMap<&str, u64> = [("ip6_link_local_dest", 1), ("udp6_zero_checksum", 1)]
        .into_iter()
        .collect();
    assert_eq!(o.drops, want);
}

/// UDP over IPv6 to a socket: delivered in order, the datagram as sent.
#[test]
fn udp_to_an_ipv6_socket_is_delivered() {
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&router6(Gro::Off), mode, dispatch);
        let s = lab.w.host.sockets.bind(ip6("::"), 53, 16).expect("bind");
        let input: Vec<Vec<u8>> = (0..5u8).map(|i| peer_udp(US6, 64, &[i; 9])).collect();
        lab.feed(0, input);
        lab.run();
        let mut got = Vec::new();
        lab.w
            .host
            .sockets
            .get(s)
            .expect("socket")
            .recv_batch(&mut got, 16);
        let tags: Vec<u8> = got
            .iter()
            .map(|p| {
                let v = lab.w.pool().get(p);
                let d = netbatch_stack::udp::datagram(&v).expect("datagram");
                assert_eq!(d.src, std::net::IpAddr::V6(ip6(PEER6)));
                assert_eq!(d.payload.len(), 9);
                d.payload[0]
            })
            .collect();
        assert_eq!(tags, vec![0, 1, 2, 3, 4], "{mode:?}/{dispatch:?}");
        lab.w.acct.delivered += got.len() as u64;
        lab.w.pool().clone().cache().free_all(&mut got);
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A neighbour that never answers: after the retries, what waited for it is answered
/// with Address Unreachable (RFC 4861 7.2.2).
#[test]
fn an_unanswered_neighbour_is_address_unreachable() {
    let mut spec = router6(Gro::Off);
    spec.routes6.push(Route6::new(
        "2001:db8:400::/48".parse().expect("prefix"),
        RouteKind::Unicast,
        Some(1),
        Some(ip6("2001:db8:200::98")),
    ));
    let pkt = peer_udp("2001:db8:400::1", 64, b"lost");
    let o = run_steps(&spec, &[(0, vec![pkt.clone()])], |lab| {
        for _ in 0..5 {
            lab.advance(1_100_000_000);
        }
    });
    let solicits = o.eth1.iter().filter(|f| icmp6_checked(f)[0] == 135).count();
    assert_eq!(solicits, 3, "max_probes solicitations");
    assert_eq!(o.eth0.len(), 1);
    let m = icmp6_checked(&o.eth0[0]);
    assert_eq!((m[0], m[1]), (1, 3), "address unreachable");
    let mut quoted = pkt[14..].to_vec();
    quoted[7] = 64; // as received: the hop limit forwarding decremented is restored
    assert_eq!(&m[8..], &quoted[..]);
    let _ = GW6;
}

/// The Subnet-Router anycast address (RFC 4291 2.6.1, a MUST for routers): the all-zero
/// host address of each on-link prefix is one of the router's addresses, as the Linux
/// kernel makes it (`anycast` routes in its local table, checked against it in
/// `crates/netbatch/tests/rfc_vs_kernel.rs`): an echo request to it is answered from our
/// address toward the sender (Linux with `anycast_src_echo_reply` off: the anycast address
/// is no source of an echo reply), an error about a packet to it comes from it (Linux's
/// `icmp6_send` takes an anycast destination as the source), a solicitation for it is
/// answered without the override flag (RFC 4861 7.2.7) to the solicited-node group we
/// then listen to, and `fe80::` (the link-local prefix's) is ours on every link. Another
/// interface's is ours too (a router's addresses are the node's).
#[test]
fn subnet_router_anycast_addresses_are_ours() {
    let anycast = "2001:db8:100::";
    let peer_ll = link_local_from_mac(PEER).to_string();
    let input = [
        frames::echo_request6(PEER, US, PEER6, anycast, 7, 1, 64, b"anycast"),
        frames::udp6(PEER, US, PEER6, anycast, 4000, 9, 64, b"no socket"),
        frames::neighbor_solicit(PEER, US, PEER6, "ff02::1:ff00:0", anycast),
        frames::echo_request6(PEER, US, &peer_ll, "fe80::", 7, 2, 64, b"link-local"),
        frames::echo_request6(PEER, US, PEER6, "2001:db8:200::", 7, 3, 64, b"eth1's"),
    ];
    // One at a time: their answers take different paths, which `buckets` may reorder.
    let steps: Vec<(usize, Vec<Vec<u8>>)> = input.iter().map(|f| (0, vec![f.clone()])).collect();
    let o = run_steps(&router6(Gro::Off), &steps, |_| {});
    assert!(o.eth1.is_empty(), "nothing forwarded");
    assert_eq!(o.drops, BTreeMap::new());
    assert_eq!(o.eth0.len(), 5, "every one answered");
    let addrs = |f: &[u8]| {
        let h = ipv6(f);
        (Ipv6Addr::from(h.source), Ipv6Addr::from(h.destination))
    };
    // The echo reply: from our unicast address on the prefix, not from the anycast one.
    assert_eq!(addrs(&o.eth0[0]), (ip6(US6), ip6(PEER6)));
    let m = icmp6_checked(&o.eth0[0]);
    assert_eq!((m[0], m[1]), (129, 0));
    assert_eq!(&m[8..], b"anycast");
    // Port unreachable, from the anycast address it was sent to.
    assert_eq!(addrs(&o.eth0[1]), (ip6(anycast), ip6(PEER6)));
    let m = icmp6_checked(&o.eth0[1]);
    assert_eq!((m[0], m[1]), (1, 4));
    // The advertisement: router and solicited, not override; the target and our MAC.
    assert_eq!(addrs(&o.eth0[2]), (ip6(US6), ip6(PEER6)));
    let m = icmp6_checked(&o.eth0[2]);
    assert_eq!((m[0], m[1]), (136, 0));
    assert_eq!(m[4], 0b1100_0000, "R and S set, O clear");
    assert_eq!(&m[8..24], &ip6(anycast).octets());
    assert_eq!(
        &m[24..32],
        &[2, 1, 2, 0, 0, 0, 0, 1],
        "target link-layer address"
    );
    // fe80:: on eth0: from our link-local address.
    assert_eq!(addrs(&o.eth0[3]), (link_local_from_mac(US), ip6(&peer_ll)));
    assert_eq!(icmp6_checked(&o.eth0[3])[0], 129);
    // eth1's anycast address, asked on eth0: ours, answered from our address there.
    assert_eq!(addrs(&o.eth0[4]), (ip6(US6), ip6(PEER6)));
    assert_eq!(icmp6_checked(&o.eth0[4])[0], 129);
    // Nothing else with a zero host part is ours: forwarded (or refused) as before.
    let far = frames::echo_request6(PEER, US, PEER6, "2001:db8:300::", 7, 4, 64, b"far");
    let o = run(&router6(Gro::Off), &[far]);
    assert_eq!(o.eth1.len(), 1, "2001:db8:300:: is not on one of our links");
}
