//! Router control behaviour replayed from captures built here: the OUTPUT and POSTROUTING
//! hooks, the ICMP error rate limit and suppression rules (RFC 1812 4.3.2.7-8, RFC 1122
//! 3.2.2), ICMP error source addresses, ARP answers, learning, gratuitous ARP and the
//! bounded neighbour queue, and martian (directed-broadcast) sources (RFC 1812 5.3.7).
//!
//! Each case runs through `netbatch replay` in per-packet and list mode with both dispatch
//! strategies; the variants must give the same frames (per flow for buckets, exactly
//! otherwise), the same drop reasons, and `rx + originated = tx + delivered + dropped +
//! held`. Expectations come from etherparse, hand-made bytes or hand-computed values.

use std::collections::BTreeMap;

use etherparse::{
    ArpEthIpv4Packet, Icmpv4Type, NetSlice, PacketBuilder, SlicedPacket,
    icmpv4::DestUnreachableHeader,
};
use netbatch_scenarios::frames;
use netbatch_scenarios::replay::{Outcome, run_variants};
use netbatch_wire::ethernet::MacAddr;

const ETH0: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x01]);
const ETH1: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x02]);
/// The LAN host 192.0.2.10 (static neighbour).
const HOST: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
/// The LAN peer 192.0.2.20 (static neighbour).
const PEER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x14]);
/// A host on eth0's second subnet, 10.9.0.5 (static neighbour).
const HOST2: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x05]);
/// The upstream gateway 198.51.100.254 (static neighbour).
const GW: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0xfe]);

/// A two-port router: eth0 with 192.0.2.1/24 (primary) and 10.9.0.1/16, eth1 (MTU 1400)
/// with 198.51.100.1/24, a default route via 198.51.100.254, static neighbours for
/// 192.0.2.10, 192.0.2.20, 10.9.0.5 and the gateway; `settings` go before the neighbour
/// entries (`[icmp]`, `[neighbour]` keys), `extra` at the end (routes, filter chains).
fn config(mode: &str, dispatch: &str, settings: &str, extra: &str) -> String {
    format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"

{settings}

[[neighbour.static]]
ip = "192.0.2.10"
mac = "02:00:00:00:00:0a"
dev = "eth0"

[[neighbour.static]]
ip = "192.0.2.20"
mac = "02:00:00:00:00:14"
dev = "eth0"

[[neighbour.static]]
ip = "10.9.0.5"
mac = "02:00:00:00:00:05"
dev = "eth0"

[[neighbour.static]]
ip = "198.51.100.254"
mac = "02:00:5e:00:53:fe"
dev = "eth1"

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["192.0.2.1/24", "10.9.0.1/16"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
mtu = 1400
addresses = ["198.51.100.1/24"]

[[route]]
prefix = "default"
via = "198.51.100.254"

{extra}
"#
    )
}

/// Replays `input` (frames with timestamps in nanoseconds, received on eth0) through the
/// router in every variant (`netbatch_scenarios::replay::run_variants` checks what holds
/// for every case); returns the list/buckets outcome.
/// Packets the tests forward back out of the port they came in on (a replay receives on
/// one port) would earn their senders ICMP redirects (RFC 1812 5.2.7.2); the tests that are
/// not about redirects turn them off (`tests/redirects.rs` checks them).
const NO_REDIRECTS: &str = "[icmp]\nsend_redirects = false\n";

fn run_all(case: &str, input: &[(u64, Vec<u8>)], settings: &str, extra: &str) -> Outcome {
    run_variants(
        "netbatch-router-control",
        case,
        input,
        [ETH0, ETH1],
        &["drops", "host"],
        |mode, dispatch| config(mode, dispatch, settings, extra),
    )
}

/// A UDP datagram from the LAN host (192.0.2.10) to `dst`, received on eth0.
fn host_udp(dst: &str, sport: u16, dport: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
    frames::udp(HOST, ETH0, "192.0.2.10", dst, sport, dport, ttl, payload)
}

/// A host event counter (`icmp_errors_suppressed`, ...).
fn host(o: &Outcome, k: &str) -> u64 {
    o.stats["host"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("no host counter {k}"))
}

fn reasons(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The ARP packet of a frame, as etherparse reads it.
fn arp(frame: &[u8]) -> ArpEthIpv4Packet {
    match SlicedPacket::from_ethernet(frame).expect("frame").net {
        Some(NetSlice::Arp(a)) => a.to_packet().try_eth_ipv4().expect("Ethernet/IPv4 ARP"),
        other => panic!("not ARP: {other:?}"),
    }
}

/// Checks that `f` is an ICMP error of `(ty, code)` from `src` to `dst`, with valid IP
/// and ICMP checksums (etherparse), quoting `orig` (an Ethernet frame) from its IP header
/// on; returns nothing, panics with `what` on a mismatch.
fn assert_icmp_error(
    f: &[u8],
    ty: u8,
    code: u8,
    src: [u8; 4],
    dst: [u8; 4],
    orig: &[u8],
    what: &str,
) {
    let h = frames::ipv4(f);
    assert_eq!((h.source, h.destination), (src, dst), "{what}: addresses");
    assert_eq!(
        h.header_checksum,
        h.calc_header_checksum(),
        "{what}: IP checksum"
    );
    let b = frames::icmp(f);
    assert_eq!((b[0], b[1]), (ty, code), "{what}: type and code");
    let (hdr, _) = etherparse::Icmpv4Header::from_slice(b).expect("icmp");
    assert_eq!(
        hdr.checksum,
        hdr.icmp_type.calc_checksum(&b[8..]),
        "{what}: ICMP checksum"
    );
    assert_eq!(
        &b[8..],
        &orig[14..],
        "{what}: quotes the datagram as received"
    );
}

/// The UDP source port quoted by an ICMP error (after the quoted 20-byte IP header).
fn quoted_sport(f: &[u8]) -> u16 {
    let b = frames::icmp(f);
    u16::from_be_bytes([b[28], b[29]])
}

// ---------------------------------------------------------------------------------------
// OUTPUT and POSTROUTING hooks
// ---------------------------------------------------------------------------------------

/// An OUTPUT rule dropping ICMP stops what the router originates (a time-exceeded error,
/// an echo reply) under `filter_output`, and nothing of it is sent; forwarded ICMP and
/// UDP do not pass OUTPUT and leave on eth1 untouched by the rule.
#[test]
fn output_hook_drops_locally_originated_icmp_only() {
    let extra = "[filter.output]\n[[filter.output.rule]]\nproto = \"icmp\"\naction = \"drop\"\n";
    let input = vec![
        (0, host_udp("203.0.113.7", 33434, 33434, 1, b"expires here")),
        (
            1,
            frames::echo_request(HOST, ETH0, "192.0.2.10", "192.0.2.1", 7, 1, 64, b"ping us"),
        ),
        (
            2,
            frames::echo_request(
                HOST,
                ETH0,
                "192.0.2.10",
                "203.0.113.7",
                7,
                2,
                64,
                b"ping them",
            ),
        ),
        (3, host_udp("203.0.113.7", 1000, 53, 64, b"forwarded")),
    ];
    let o = run_all("output-hook", &input, "", extra);
    assert!(
        o.eth0.is_empty(),
        "neither the error nor the echo reply is sent"
    );
    assert_eq!(o.eth1.len(), 2, "forwarded traffic never meets OUTPUT");
    assert!(o.eth1.iter().all(|f| f[0..6] == GW.0), "to the gateway");
    let protos: Vec<u8> = o.eth1.iter().map(|f| frames::ipv4(f).protocol.0).collect();
    assert_eq!(
        protos,
        vec![1, 17],
        "the forwarded echo request, then the UDP datagram"
    );
    assert_eq!(o.drops(), reasons(&[("filter_output", 2)]));
    let hook = o.stage("hook-output");
    assert_eq!(hook["events"]["rule_0"], 2);
    assert_eq!(hook["events"]["policy"], 0);
}

/// A POSTROUTING rule with `out = "eth1"` drops forwarded packets leaving on eth1 (under
/// `filter_postrouting`) and lets those forwarded back out of eth0 (to the LAN peer) and
/// the router's own echo reply through.
#[test]
fn postrouting_out_match_drops_one_port_only() {
    let extra =
        "[filter.postrouting]\n[[filter.postrouting.rule]]\nout = \"eth1\"\naction = \"drop\"\n";
    let to_peer = host_udp("192.0.2.20", 1000, 53, 64, b"to the peer");
    let input = vec![
        (0, host_udp("203.0.113.7", 1000, 53, 64, b"upstream")),
        (1, to_peer.clone()),
        (
            2,
            host_udp("198.51.100.77", 1000, 53, 64, b"upstream subnet"),
        ),
        (
            3,
            frames::echo_request(HOST, ETH0, "192.0.2.10", "192.0.2.1", 9, 1, 64, b"ping"),
        ),
    ];
    let o = run_all("postrouting-hook", &input, NO_REDIRECTS, extra);
    assert!(o.eth1.is_empty(), "nothing leaves on eth1");
    assert_eq!(o.eth0.len(), 2, "the peer's datagram and the echo reply");
    let f = &o.eth0[0];
    assert_eq!(&f[0..6], &PEER.0, "to the peer's MAC");
    let h = frames::ipv4(f);
    assert_eq!(h.destination, [192, 0, 2, 20]);
    assert_eq!(h.time_to_live, 63, "forwarded: TTL decremented once");
    assert_eq!(&f[34..], &to_peer[34..], "UDP header and payload unchanged");
    let r = &o.eth0[1];
    assert_eq!(&r[0..6], &HOST.0);
    assert_eq!(frames::icmp(r)[0], 0, "echo reply");
    assert_eq!(o.drops(), reasons(&[("filter_postrouting", 2)]));
    let hook = o.stage("hook-postrouting");
    assert_eq!(hook["events"]["rule_0"], 2);
    assert_eq!(hook["events"]["policy"], 2);
}

// ---------------------------------------------------------------------------------------
// ICMP errors: rate limit, suppression, source address
// ---------------------------------------------------------------------------------------

/// With `rate = 1000` per second and `burst = 4`: ten TTL-1 datagrams at one instant get
/// exactly four errors (the first four), the other six are rate limited; 1 ms later the
/// bucket has refilled 1000/s × 1 ms = 1 token (one error out of three); one second
/// later it is full again but capped at the burst (both of two get one).
#[test]
fn icmp_errors_are_rate_limited_to_the_burst_then_the_rate() {
    let mut input = Vec::new();
    for i in 0..10u16 {
        input.push((0, host_udp("203.0.113.7", 100 + i, 33434, 1, b"burst")));
    }
    for i in 10..13u16 {
        input.push((
            1_000_000,
            host_udp("203.0.113.7", 100 + i, 33434, 1, b"one ms later"),
        ));
    }
    for i in 13..15u16 {
        input.push((
            1_001_000_000,
            host_udp("203.0.113.7", 100 + i, 33434, 1, b"one s later"),
        ));
    }
    let o = run_all("icmp-rate", &input, "[icmp]\nrate = 1000\nburst = 4\n", "");
    assert!(o.eth1.is_empty());
    let answered: Vec<u16> = o.eth0.iter().map(|f| quoted_sport(f)).collect();
    assert_eq!(answered, vec![100, 101, 102, 103, 110, 113, 114]);
    for f in &o.eth0 {
        assert_eq!(frames::icmp(f)[0..2], [11, 0], "time exceeded");
    }
    assert_eq!(host(&o, "icmp_errors_rate_limited"), 6 + 2);
    assert_eq!(host(&o, "icmp_errors_out"), 7);
    assert_eq!(o.stage("ip4-icmp-error")["events"]["sent_ttl_expired"], 7);
    assert_eq!(o.drops(), reasons(&[("ttl_expired", 8)]));
}

/// RFC 1812 4.3.2.7 / RFC 1122 3.2.2: no error about an ICMP error, a non-first fragment,
/// a datagram received as link-layer broadcast, one sent to an IP broadcast, or one from
/// a martian source; each is dropped under its own reason and the suppressed ones are
/// counted. Controls: a first fragment, an echo request and a unicast datagram to a
/// closed port do get their errors.
#[test]
fn icmp_errors_are_suppressed_where_rfc1812_forbids_them() {
    // A destination unreachable (itself an ICMP error) in transit with TTL 1.
    let icmp_err = {
        let b = PacketBuilder::ethernet2(HOST.0, ETH0.0)
            .ipv4([192, 0, 2, 10], [203, 0, 113, 7], 1)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                DestUnreachableHeader::Port,
            ));
        let quoted = host_udp("192.0.2.10", 1, 2, 64, b"")[14..42].to_vec();
        let mut v = Vec::new();
        b.write(&mut v, &quoted).expect("icmp error frame");
        v
    };
    // Fragment offset 185 × 8 = 1480, MF clear: the last fragment of a datagram.
    let mut non_first = host_udp("203.0.113.7", 3000, 3001, 1, &[7; 24]);
    non_first[20..22].copy_from_slice(&185u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut non_first);
    // Offset 0, MF set: the first fragment, which may be answered.
    let mut first = host_udp("203.0.113.7", 3002, 3003, 1, &[8; 24]);
    first[20..22].copy_from_slice(&0x2000u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut first);
    let l2_bcast_transit = frames::udp(
        HOST,
        MacAddr::BROADCAST,
        "192.0.2.10",
        "203.0.113.7",
        1,
        2,
        1,
        b"bcast",
    );
    let l2_bcast_closed = frames::udp(
        HOST,
        MacAddr::BROADCAST,
        "192.0.2.10",
        "192.0.2.1",
        4000,
        9,
        64,
        b"closed port, L2 broadcast",
    );
    let closed = host_udp("192.0.2.1", 4001, 9, 64, b"closed port");
    let ip_bcast_closed = host_udp("192.0.2.255", 4002, 9, 64, b"closed port, IP broadcast");
    let loopback_src = frames::udp(HOST, ETH0, "127.0.0.1", "203.0.113.7", 1, 2, 1, b"martian");
    let echo = frames::echo_request(HOST, ETH0, "192.0.2.10", "203.0.113.7", 5, 1, 1, b"ping");
    let input = vec![
        (0, icmp_err),
        (1, non_first),
        (2, first.clone()),
        (3, l2_bcast_transit),
        (4, l2_bcast_closed),
        (5, closed.clone()),
        (6, ip_bcast_closed),
        (7, loopback_src),
        (8, echo.clone()),
    ];
    let o = run_all("icmp-suppress", &input, "", "");
    assert!(o.eth1.is_empty(), "nothing was forwarded");
    assert_eq!(o.eth0.len(), 3, "errors for the three controls only");
    let (us, lan) = ([192, 0, 2, 1], [192, 0, 2, 10]);
    assert_icmp_error(&o.eth0[0], 11, 0, us, lan, &first, "first fragment");
    assert_icmp_error(&o.eth0[1], 3, 3, us, lan, &closed, "closed port");
    assert_icmp_error(&o.eth0[2], 11, 0, us, lan, &echo, "echo request with TTL 1");
    assert_eq!(
        o.drops(),
        reasons(&[
            ("forward_l2_broadcast", 1),
            ("ip4_martian_source", 1),
            ("no_socket", 2),
            ("ttl_expired", 2),
        ])
    );
    // The ICMP error and the non-first fragment reach the error stage and are suppressed
    // there; UDP to a closed port by L2 or IP broadcast is dropped by `udp-input` itself
    // (no error asked for), the L2-broadcast transit packet and the martian never get
    // that far.
    assert_eq!(
        o.stats["host"]["icmp_errors_suppressed"], 2,
        "ICMP error, non-first fragment"
    );
    assert_eq!(o.stats["host"]["icmp_errors_rate_limited"], 0);
    let ev = &o.stage("ip4-icmp-error")["events"];
    assert_eq!(
        (&ev["sent_ttl_expired"], &ev["sent_no_socket"]),
        (&2.into(), &1.into())
    );
}

/// The source of an ICMP error: for a datagram to one of our addresses, that address
/// (Linux's `icmp_send`: `saddr = iph->daddr`), even when it is another interface's or a
/// secondary one; for a datagram in transit, our address on the route back to the
/// sender (Linux leaves the source to the output route: the preferred source of the
/// connected route, the address on the sender's subnet).
#[test]
fn icmp_error_source_is_the_address_linux_would_use() {
    let to_eth1 = host_udp("198.51.100.1", 5000, 9, 64, b"far side");
    let to_secondary = host_udp("10.9.0.1", 5001, 9, 64, b"secondary");
    let from_secondary = frames::udp(HOST2, ETH0, "10.9.0.5", "203.0.113.7", 5002, 33434, 1, b"x");
    let from_primary = host_udp("203.0.113.7", 5003, 33434, 1, b"y");
    let input = vec![
        (0, to_eth1.clone()),
        (1, to_secondary.clone()),
        (2, from_secondary.clone()),
        (3, from_primary.clone()),
    ];
    let o = run_all("icmp-source", &input, "", "");
    assert_eq!(o.eth0.len(), 4);
    let lan = [192, 0, 2, 10];
    assert_icmp_error(
        &o.eth0[0],
        3,
        3,
        [198, 51, 100, 1],
        lan,
        &to_eth1,
        "to eth1's address",
    );
    assert_icmp_error(
        &o.eth0[1],
        3,
        3,
        [10, 9, 0, 1],
        lan,
        &to_secondary,
        "to the secondary",
    );
    assert_icmp_error(
        &o.eth0[2],
        11,
        0,
        [10, 9, 0, 1],
        [10, 9, 0, 5],
        &from_secondary,
        "in transit from the secondary subnet",
    );
    assert_eq!(&o.eth0[2][0..6], &HOST2.0);
    assert_icmp_error(
        &o.eth0[3],
        11,
        0,
        [192, 0, 2, 1],
        lan,
        &from_primary,
        "in transit",
    );
}

// ---------------------------------------------------------------------------------------
// ARP
// ---------------------------------------------------------------------------------------

/// A request for our address is answered in place with a reply checked field by field
/// (etherparse): to the requester's MAC, operation 2, sender our MAC and address, target
/// the requester. The requester is learned: our echo reply to it then goes out at once,
/// to its MAC, without an ARP request of our own.
#[test]
fn arp_request_for_us_is_answered_and_the_requester_learned() {
    const R: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x30]);
    let req = frames::arp(
        1,
        R,
        "192.0.2.30",
        MacAddr([0; 6]),
        "192.0.2.1",
        MacAddr::BROADCAST,
    );
    let ping = frames::echo_request(R, ETH0, "192.0.2.30", "192.0.2.1", 0x1234, 1, 64, b"hi");
    let o = run_all("arp-answer", &[(0, req), (1_000, ping)], "", "");
    assert!(o.eth1.is_empty());
    assert_eq!(
        o.eth0.len(),
        2,
        "the ARP reply and the echo reply, no request"
    );
    let f = &o.eth0[0];
    assert_eq!(&f[0..6], &R.0, "unicast to the requester");
    assert_eq!(&f[12..14], &[0x08, 0x06]);
    let a = arp(f);
    assert_eq!(
        a,
        ArpEthIpv4Packet {
            operation: etherparse::ArpOperation::REPLY,
            sender_mac: ETH0.0,
            sender_ipv4: [192, 0, 2, 1],
            target_mac: R.0,
            target_ipv4: [192, 0, 2, 30],
        }
    );
    let r = &o.eth0[1];
    assert_eq!(&r[0..6], &R.0, "the learned MAC");
    let h = frames::ipv4(r);
    assert_eq!((h.source, h.destination), ([192, 0, 2, 1], [192, 0, 2, 30]));
    let b = frames::icmp(r);
    assert_eq!(b[0..2], [0, 0], "echo reply");
    assert_eq!(b[4..8], [0x12, 0x34, 0, 1], "identifier and sequence kept");
    assert_eq!(o.stats["originated_packets"], 0, "no ARP request was built");
    assert_eq!(host(&o, "arp_requests_out"), 0);
    assert_eq!(host(&o, "arp_replies_out"), 1);
}

/// RFC 826's merge rule: a gratuitous ARP (request or reply form) for a neighbour we know
/// moves it to the new MAC, and the next forwarded packet goes there; one for an address
/// we do not know creates nothing (`arp_not_for_us`, Linux's `arp_accept = 0`), so a
/// packet to it must still be resolved.
#[test]
fn gratuitous_arp_moves_a_known_neighbour_only() {
    const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x30]);
    const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x31]);
    const C: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x32]);
    const D: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x40]);
    let zero = MacAddr([0; 6]);
    let bc = MacAddr::BROADCAST;
    let fwd = |to: &str, m: u8| host_udp(to, 6000, 6000, 64, &[m; 4]);
    let input = vec![
        (0, frames::arp(1, A, "192.0.2.30", zero, "192.0.2.1", bc)),
        (1_000, fwd("192.0.2.30", 1)),
        (
            2_000,
            frames::arp(1, B, "192.0.2.30", zero, "192.0.2.30", bc),
        ),
        (3_000, fwd("192.0.2.30", 2)),
        (4_000, frames::arp(2, C, "192.0.2.30", C, "192.0.2.30", bc)),
        (5_000, fwd("192.0.2.30", 3)),
        (
            6_000,
            frames::arp(1, D, "192.0.2.40", zero, "192.0.2.40", bc),
        ),
        (7_000, fwd("192.0.2.40", 4)),
    ];
    let o = run_all("garp", &input, NO_REDIRECTS, "");
    assert!(o.eth1.is_empty());
    assert_eq!(o.eth0.len(), 5);
    assert_eq!(arp(&o.eth0[0]).operation, etherparse::ArpOperation::REPLY);
    for (f, (mac, m)) in o.eth0[1..4].iter().zip([(A, 1u8), (B, 2), (C, 3)]) {
        assert_eq!(&f[0..6], &mac.0, "packet {m} to the MAC announced last");
        assert_eq!(f[42], m);
        assert_eq!(frames::ipv4(f).destination, [192, 0, 2, 30]);
    }
    let req = arp(&o.eth0[4]);
    assert_eq!(&o.eth0[4][0..6], &bc.0);
    assert_eq!(
        (req.operation, req.target_ipv4),
        (etherparse::ArpOperation::REQUEST, [192, 0, 2, 40]),
        "192.0.2.40 was not learned from its announcement"
    );
    assert_eq!(o.drops(), reasons(&[("arp_not_for_us", 1)]));
    assert_eq!(
        o.stats["delivered_packets"], 2,
        "the two announcements that updated"
    );
    assert_eq!(
        o.stats["held_packets"], 1,
        "the packet for 192.0.2.40 waits"
    );
}

/// With `queue_len = 4`, seven packets for an unresolved next hop keep the last four (the
/// oldest make room, as Linux's `__neigh_event_send` does): three are dropped as
/// `neigh_queue_full`, and exactly four leave after the reply, in order.
#[test]
fn neighbour_queue_overflow_keeps_the_newest() {
    const LAN_GW: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xfe]);
    let extra = "[[route]]\nprefix = \"203.0.113.0/24\"\nvia = \"192.0.2.254\"\n";
    let mut input: Vec<(u64, Vec<u8>)> = (0..7u8)
        .map(|i| (u64::from(i), host_udp("203.0.113.7", 7000, 53, 64, &[i; 8])))
        .collect();
    input.push((
        1_000_000,
        frames::arp(2, LAN_GW, "192.0.2.254", ETH0, "192.0.2.1", ETH0),
    ));
    let settings = format!("[neighbour]\nqueue_len = 4\n{NO_REDIRECTS}");
    let o = run_all("neigh-queue", &input, &settings, extra);
    assert!(o.eth1.is_empty());
    assert_eq!(o.eth0.len(), 1 + 4, "one request, then the queue");
    let req = arp(&o.eth0[0]);
    assert_eq!(
        (req.operation, req.target_ipv4),
        (etherparse::ArpOperation::REQUEST, [192, 0, 2, 254])
    );
    let released: Vec<u8> = o.eth0[1..]
        .iter()
        .map(|f| {
            assert_eq!(&f[0..6], &LAN_GW.0);
            f[42]
        })
        .collect();
    assert_eq!(released, vec![3, 4, 5, 6]);
    assert_eq!(o.drops(), reasons(&[("neigh_queue_full", 3)]));
    assert_eq!(o.stats["held_packets"], 0);
}

// ---------------------------------------------------------------------------------------
// Martian sources
// ---------------------------------------------------------------------------------------

/// RFC 1812 5.3.7 (and 4.2.2.11: {<Network-prefix>, -1} MUST NOT be a source): a datagram
/// whose source is the directed broadcast of one of our connected subnets (192.0.2.255
/// of eth0's /24, 10.9.255.255 of its /16, 198.51.100.255 of eth1's) is martian — Linux
/// drops it in `fib_validate_source` (the reverse lookup finds RTN_BROADCAST,
/// `IP_INVALID_SOURCE`). It is neither forwarded, nor answered (echo, ICMP error), and an
/// ARP packet from that address is refused. Sources ending in .255 of subnets that are not
/// ours are ordinary addresses and are forwarded.
#[test]
fn directed_broadcast_source_is_martian() {
    const X: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x77]);
    let from =
        |src: &str, ttl: u8| frames::udp(X, ETH0, src, "203.0.113.7", 1, 2, ttl, b"bcast src");
    let input = vec![
        (0, from("192.0.2.255", 64)),
        (1, from("192.0.2.255", 1)),
        (
            2,
            frames::echo_request(X, ETH0, "192.0.2.255", "192.0.2.1", 1, 1, 64, b"ping"),
        ),
        (3, from("10.9.255.255", 64)),
        (4, from("198.51.100.255", 64)),
        (5, from("10.10.255.255", 64)),
        (6, from("192.0.3.255", 64)),
        (
            7,
            frames::arp(
                1,
                X,
                "192.0.2.255",
                MacAddr([0; 6]),
                "192.0.2.1",
                MacAddr::BROADCAST,
            ),
        ),
    ];
    let o = run_all("bcast-source", &input, "", "");
    assert!(
        o.eth0.is_empty(),
        "no echo reply, no ICMP error, no ARP reply"
    );
    let sources: Vec<[u8; 4]> = o.eth1.iter().map(|f| frames::ipv4(f).source).collect();
    assert_eq!(sources, vec![[10, 10, 255, 255], [192, 0, 3, 255]]);
    assert_eq!(
        o.drops(),
        reasons(&[("arp_bad_sender", 1), ("ip4_martian_source", 5)])
    );
    assert_eq!(
        host(&o, "icmp_errors_suppressed"),
        0,
        "dropped before any ICMP"
    );
    assert_eq!(host(&o, "icmp_echo_replies"), 0);
}
