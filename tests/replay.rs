//! Router behaviour replayed from captures built here: forwarding (TTL, checksum, MACs,
//! checked with etherparse), ICMP time exceeded and unreachable, ARP resolution with
//! queued packets, a FORWARD firewall rule, malformed frames, fragmentation. Each case runs
//! in per-packet and list mode with both dispatch strategies and must give the same
//! frames, and `rx (+ originated) = tx + delivered + dropped + held` must hold.

use std::collections::BTreeMap;

use netbatch_scenarios::frames;
use netbatch_scenarios::replay::{Outcome, run_variants};
use netbatch_wire::ethernet::MacAddr;

const ETH0: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x01]);
const ETH1: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x02]);
const HOST: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const GW: MacAddr = MacAddr([0x02, 0, 0x5e, 0, 0x53, 0xfe]);

/// A two-port router: LAN 192.0.2.0/24 on eth0, upstream 198.51.100.0/24 on eth1,
/// default route via 198.51.100.254 (`gw_static`: its MAC configured, else resolved by
/// ARP), a LAN host with a known MAC, and `extra` appended (routes, rules).
fn config(mode: &str, dispatch: &str, gw_static: bool, extra: &str) -> String {
    let gw = if gw_static {
        "[[neighbour.static]]\nip = \"198.51.100.254\"\nmac = \"02:00:5e:00:53:fe\"\ndev = \"eth1\"\n"
    } else {
        ""
    };
    format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"

[[neighbour.static]]
ip = "192.0.2.10"
mac = "02:00:00:00:00:0a"
dev = "eth0"
{gw}
[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["192.0.2.1/24"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
mtu = 1400
addresses = ["198.51.100.1/24"]

{extra}
"#
    )
}

const DEFAULT_ROUTE: &str = "[[route]]\nprefix = \"default\"\nvia = \"198.51.100.254\"\n";

/// Replays `input` (frames with timestamps in nanoseconds) through the router in every
/// variant (`netbatch_scenarios::replay::run_variants` checks what holds for every case);
/// returns the list/buckets outcome.
fn run_all(case: &str, input: &[(u64, Vec<u8>)], extra: &str, gw_static: bool) -> Outcome {
    run_variants(
        "netbatch-replay",
        case,
        input,
        [ETH0, ETH1],
        &["drops"],
        |mode, dispatch| config(mode, dispatch, gw_static, extra),
    )
}

/// A UDP datagram from the LAN host (192.0.2.10) to `dst`, received on eth0.
fn host_udp(dst: &str, sport: u16, dport: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
    frames::udp(HOST, ETH0, "192.0.2.10", dst, sport, dport, ttl, payload)
}

/// A TCP segment from the LAN host (192.0.2.10 port 40000, sequence 1, TTL 64) to
/// 203.0.113.7 port `dport`, received on eth0.
fn host_tcp(dport: u16, payload: &[u8]) -> Vec<u8> {
    frames::tcp(
        HOST,
        ETH0,
        "192.0.2.10",
        "203.0.113.7",
        40000,
        dport,
        1,
        64,
        payload,
    )
}

#[test]
fn forwarding_decrements_ttl_and_rewrites_macs() {
    let input: Vec<(u64, Vec<u8>)> = (0..20u8)
        .map(|i| {
            (
                u64::from(i) * 1000,
                host_udp("203.0.113.7", 4000, 53, 64 - i, &[i; 30]),
            )
        })
        .collect();
    let o = run_all("forward", &input, DEFAULT_ROUTE, true);
    assert!(o.eth0.is_empty());
    assert_eq!(o.eth1.len(), 20);
    for (i, f) in o.eth1.iter().enumerate() {
        assert_eq!(&f[0..6], &GW.0, "to the gateway");
        assert_eq!(&f[6..12], &ETH1.0, "from eth1");
        let h = frames::ipv4(f);
        assert_eq!(h.time_to_live, 64 - i as u8 - 1, "TTL decremented once");
        assert_eq!(
            h.header_checksum,
            h.calc_header_checksum(),
            "checksum right (etherparse)"
        );
        assert_eq!(
            &f[14..],
            {
                let mut want = input[i].1[14..].to_vec();
                want[8] -= 1;
                want[10..12].copy_from_slice(&h.header_checksum.to_be_bytes());
                want
            },
            "nothing else changed"
        );
    }
    assert_eq!(o.stats["dropped_packets"], 0);
}

#[test]
fn ttl_one_gets_time_exceeded_quoting_the_original() {
    let probe = host_udp("203.0.113.7", 33434, 33434, 1, b"traceroute");
    let o = run_all("ttl", &[(0, probe.clone())], DEFAULT_ROUTE, true);
    assert!(o.eth1.is_empty(), "not forwarded");
    assert_eq!(o.eth0.len(), 1);
    let f = &o.eth0[0];
    assert_eq!(&f[0..6], &HOST.0);
    let h = frames::ipv4(f);
    assert_eq!(
        (h.source, h.destination),
        ([192, 0, 2, 1], [192, 0, 2, 10]),
        "from the interface it arrived on"
    );
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let b = frames::icmp(f);
    assert_eq!((b[0], b[1]), (11, 0), "time exceeded in transit");
    let (hdr, _) = etherparse::Icmpv4Header::from_slice(b).expect("icmp");
    assert_eq!(
        hdr.checksum,
        hdr.icmp_type.calc_checksum(&b[8..]),
        "ICMP checksum (etherparse)"
    );
    assert_eq!(
        &b[8..],
        &probe[14..],
        "quotes the datagram as received, TTL 1 and all"
    );
    assert_eq!(o.stage("ip4-icmp-error")["events"]["sent_ttl_expired"], 1);
    assert_eq!(
        o.stats["originated_packets"], 0,
        "the error is built in the probe's buffer"
    );
}

#[test]
fn unknown_destination_gets_unreachable() {
    // No default route: 203.0.113.7 is unknown; 10.67.0.0/16 is a prohibit route.
    // Each error is checked against the hand-built input: from our address on the LAN
    // (192.0.2.1) to the sender (192.0.2.10), to the sender's MAC, valid checksums
    // (etherparse), and quoting the original IP header and at least its first 8 bytes of
    // data (RFC 792, RFC 1812 4.3.2.3) exactly as received (these datagrams are short,
    // so the whole of them).
    let extra = "[[route]]\nprefix = \"10.67.0.0/16\"\nkind = \"prohibit\"\n";
    let input = vec![
        (0, host_udp("203.0.113.7", 1, 2, 64, b"nowhere")),
        (1, host_udp("10.67.1.1", 1, 2, 64, b"prohibited")),
    ];
    let o = run_all("unreach", &input, extra, true);
    assert!(o.eth1.is_empty());
    let codes: Vec<(u8, u8)> = o
        .eth0
        .iter()
        .map(|f| {
            let b = frames::icmp(f);
            (b[0], b[1])
        })
        .collect();
    assert_eq!(
        codes,
        vec![(3, 0), (3, 13)],
        "net unreachable, administratively prohibited"
    );
    for (f, (_, orig)) in o.eth0.iter().zip(&input) {
        assert_eq!(&f[0..6], &HOST.0, "back to the sender's MAC");
        let h = frames::ipv4(f);
        assert_eq!(
            (h.source, h.destination),
            ([192, 0, 2, 1], [192, 0, 2, 10]),
            "from our LAN address to the sender"
        );
        assert_eq!(h.protocol, etherparse::IpNumber::ICMP);
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        assert_eq!(
            usize::from(h.total_len),
            20 + 8 + (orig.len() - 14),
            "IP + ICMP headers + the quote"
        );
        let b = frames::icmp(f);
        let (hdr, _) = etherparse::Icmpv4Header::from_slice(b).expect("icmp");
        assert_eq!(hdr.checksum, hdr.icmp_type.calc_checksum(&b[8..]));
        assert_eq!(&b[4..8], &[0, 0, 0, 0], "unused word is zero");
        assert_eq!(
            &b[8..8 + 20 + 8],
            &orig[14..14 + 20 + 8],
            "original IP header (TTL 64, not decremented) + first 8 bytes (UDP header)"
        );
        assert_eq!(&b[8..], &orig[14..], "the rest of the datagram");
    }
}

#[test]
fn arp_resolves_the_next_hop_then_queued_packets_leave_in_order() {
    // A replay receives on one port, so the next hop sits on that port's subnet: a
    // second router on the LAN (192.0.2.254) for 203.0.113.0/24, answering on eth0.
    const LAN_GW: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xfe]);
    // Forwarded back out of eth0, these would earn the host redirects (RFC 1812 5.2.7.2);
    // `tests/redirects.rs` checks those, this test turns them off.
    let extra = "[[route]]\nprefix = \"203.0.113.0/24\"\nvia = \"192.0.2.254\"\n\n[icmp]\nsend_redirects = false\n";
    let pkt = |i: u8| host_udp("203.0.113.7", 5000, 53, 64, &[i; 8]);
    let reply = frames::arp(2, LAN_GW, "192.0.2.254", ETH0, "192.0.2.1", ETH0);
    let input = vec![
        (0, pkt(0)),
        (10, pkt(1)),
        (20, pkt(2)),
        (1_000_000, reply),
        (2_000_000, pkt(3)),
    ];
    let o = run_all("arp", &input, extra, false);
    assert!(o.eth1.is_empty());
    assert_eq!(o.eth0.len(), 5, "one ARP request and four packets");
    let req = &o.eth0[0];
    assert_eq!(&req[0..6], &MacAddr::BROADCAST.0);
    assert_eq!(&req[12..14], &[0x08, 0x06]);
    assert_eq!(&req[20..22], &[0, 1], "a request");
    assert_eq!(
        &req[28..32],
        &[192, 0, 2, 1],
        "asked by our address on that subnet"
    );
    assert_eq!(&req[38..42], &[192, 0, 2, 254], "for the next hop");
    for (i, f) in o.eth0[1..].iter().enumerate() {
        assert_eq!(&f[0..6], &LAN_GW.0, "resolved MAC");
        assert_eq!(f[42], i as u8, "queued packets first, in arrival order");
    }

    assert_eq!(
        o.stats["originated_packets"], 1,
        "the request is a new packet"
    );
    assert_eq!(o.stats["delivered_packets"], 1, "the reply was consumed");
}

#[test]
fn unanswered_arp_gives_host_unreachable() {
    // Nothing answers for the gateway: after the retries the queued packet is failed.
    let mut input = vec![(0, host_udp("203.0.113.7", 5000, 53, 64, b"lost"))];
    // Later unrelated traffic lets the replay clock run past the retries (1 s each).
    for s in 1..=5u64 {
        input.push((
            s * 1_000_000_000,
            frames::arp(
                1,
                HOST,
                "192.0.2.10",
                MacAddr([0; 6]),
                "192.0.2.99",
                MacAddr::BROADCAST,
            ),
        ));
    }
    let o = run_all("arpfail", &input, DEFAULT_ROUTE, false);
    let requests = o.eth1.iter().filter(|f| f[12..14] == [8, 6]).count();
    assert_eq!(requests, 3, "max_probes requests");
    let unreach: Vec<&Vec<u8>> = o.eth0.iter().filter(|f| f[12..14] == [8, 0]).collect();
    assert_eq!(unreach.len(), 1);
    let b = frames::icmp(unreach[0]);
    assert_eq!((b[0], b[1]), (3, 1), "host unreachable");
    // The host's own ARP requests (for someone else) refresh its known entry: delivered.
    assert_eq!(o.stats["delivered_packets"], 5);
    assert_eq!(
        o.stats["held_packets"], 0,
        "the failed packet left the queue"
    );
}

#[test]
fn forward_firewall_drops_exactly_what_it_names() {
    let extra = format!(
        "{DEFAULT_ROUTE}\n[filter.forward]\n[[filter.forward.rule]]\nproto = \"tcp\"\ndport = \"22-23\"\nin = \"eth0\"\naction = \"drop\"\n"
    );
    let input = vec![
        (0, host_tcp(22, b"ssh")),
        (1, host_tcp(23, b"telnet")),
        (2, host_tcp(24, b"fine")),
        (3, host_udp("203.0.113.7", 40000, 22, 64, b"udp 22 is fine")),
        (4, host_tcp(80, b"web")),
    ];
    let o = run_all("firewall", &input, &extra, true);
    assert_eq!(o.eth1.len(), 3);
    assert_eq!(
        o.drops(),
        BTreeMap::from([("filter_forward".to_string(), 2)])
    );
    let hook = o.stage("hook-forward");
    assert_eq!(hook["events"]["rule_0"], 2);
    assert_eq!(hook["events"]["policy"], 3);
}

#[test]
fn malformed_frames_are_dropped_with_their_reasons() {
    let good = host_udp("203.0.113.7", 1, 2, 64, b"ok");
    let mut bad_sum = good.clone();
    bad_sum[24] ^= 1;
    let mut short_ihl = good.clone();
    short_ihl[14] = 0x44;
    let mut long_total = good.clone();
    long_total[16..18].copy_from_slice(&1000u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut long_total);
    let mut martian_dst = good.clone();
    martian_dst[30] = 240;
    frames::refresh_ip_checksum(&mut martian_dst);
    let input = vec![
        (0, good.clone()),
        (1, good[..20].to_vec()),
        (2, bad_sum),
        (3, short_ihl),
        (4, long_total),
        (5, martian_dst),
        (
            6,
            frames::udp(
                HOST,
                MacAddr([2, 9, 9, 9, 9, 9]),
                "192.0.2.10",
                "203.0.113.7",
                1,
                2,
                64,
                b"not for us",
            ),
        ),
    ];
    let o = run_all("malformed", &input, DEFAULT_ROUTE, true);
    assert_eq!(o.eth1.len(), 1, "only the good one");
    assert_eq!(
        o.drops(),
        BTreeMap::from([
            ("ip4_checksum".to_string(), 1),
            ("ip4_header_len".to_string(), 1),
            ("ip4_martian_dest".to_string(), 1),
            ("ip4_total_len_long".to_string(), 1),
            ("ip4_truncated".to_string(), 1),
            ("l2_other_host".to_string(), 1),
        ])
    );
    let s = &o.stats;
    assert_eq!(
        s["rx_packets"].as_u64(),
        Some(s["tx_packets"].as_u64().unwrap() + s["dropped_packets"].as_u64().unwrap()),
        "rx = tx + dropped here (nothing delivered, held or originated)"
    );
}

#[test]
fn large_packets_are_fragmented_to_the_output_mtu() {
    // eth1 has MTU 1400: a 3000-byte datagram without DF is fragmented; with DF it is
    // answered with fragmentation needed and the MTU.
    let payload: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let mut big = host_udp("203.0.113.7", 7, 9, 64, &payload);
    // etherparse sets DF by default: one copy without it, one with it.
    let mut df = big.clone();
    big[20] &= !0x40;
    frames::refresh_ip_checksum(&mut big);
    df[20] |= 0x40;
    frames::refresh_ip_checksum(&mut df);
    // Frames of 3042 bytes do not fit a 2 KiB buffer: use 4 KiB ones.
    let extra = format!("{DEFAULT_ROUTE}\n[pool]\nbuf_size = 4096\n");
    let o = run_all("frag", &[(0, big.clone()), (1, df)], &extra, true);

    assert_eq!(
        o.eth1.len(),
        3,
        "3028 bytes of IP payload in 1376-byte pieces"
    );
    let mut reassembled = Vec::new();
    let mut offsets = Vec::new();
    for f in &o.eth1 {
        let h = frames::ipv4(f);
        assert!(usize::from(h.total_len) <= 1400, "fits the MTU");
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        offsets.push((h.fragment_offset.byte_offset(), h.more_fragments));
        reassembled.extend_from_slice(&f[34..14 + usize::from(h.total_len)]);
    }
    assert_eq!(offsets, vec![(0, true), (1376, true), (2752, false)]);
    assert_eq!(
        reassembled,
        big[34..].to_vec(),
        "the fragments carry the datagram"
    );
    assert_eq!(o.eth0.len(), 1, "fragmentation needed for the DF copy");
    let f = &o.eth0[0];
    let b = frames::icmp(f);
    assert_eq!((b[0], b[1]), (3, 4));
    assert_eq!(
        u16::from_be_bytes([b[6], b[7]]),
        1400,
        "next-hop MTU (RFC 1191)"
    );
    assert_eq!(
        o.stats["originated_packets"], 2,
        "two fragments in new buffers"
    );
}
