//! GRO under hostile input stays bounded and loses nothing, in both GRO modes (standard,
//! and fraglist: `rx-gro-list`, which chains forwarded TCP and UDP) and for TCP and UDP
//! flows: a flood of distinct flows (the table never holds more than 8 × 8 flows, the
//! oldest are completed early and counted), a flow whose packets arrive out of order, and
//! malformed packets of every kind. Every frame is either forwarded or dropped with the
//! reason the router gives it without GRO (the expectation is the router with GRO off,
//! an independent path: no GRO stage, no GSO); the conservation law (rx = tx + delivered
//! + dropped + held) holds and every buffer returns to the pool.
//!
//! The same over IPv6, through a dual-stack router: floods of distinct IPv6 flows, IPv6
//! flows out of order, and malformed IPv6 segments and datagrams (payload lengths that do
//! not fit the frame, fragments, extension headers, zero UDP checksums…).

use etherparse::PacketBuilder;
use netbatch_datapath::PollParams;
use netbatch_engine::{Dispatch, Mode};
use netbatch_scenarios::frames::{refresh_ip_checksum, set_ip_ident};
use netbatch_scenarios::{Gro, Lab, PEER, PEER6, US, ip6, router, router6};

/// The GRO modes under test.
const GRO_MODES: [Gro; 2] = [Gro::Standard, Gro::Fraglist];

/// The router with `gro` on eth0; with `rx_csum` eth0 validates L4 checksums as a NIC
/// does (frames arrive marked, and GRO takes its fast path for full-size segments).
/// Through the dual-stack router when `v6` (the peer's IPv6 address a static neighbour
/// on eth0, so that ICMPv6 errors leave at once).
fn lab_in(gro: Gro, mode: Mode, rx_csum: bool, v6: bool) -> Lab {
    let mut spec = if v6 {
        let mut s = router6(gro);
        s.neighbours6
            .push(netbatch_runtime::setup::StaticNeighbour6 {
                iface: 0,
                ip: ip6(PEER6),
                mac: PEER,
            });
        s
    } else {
        router(gro)
    };
    spec.ports[0].features.rx_checksum = rx_csum;
    let mut l = Lab::new(&spec, mode, Dispatch::Buckets);
    // Large polls, so that one GRO window sees hundreds of frames.
    l.w.set_params(PollParams {
        weight: 256,
        budget: 1024,
        mode,
        ..PollParams::default()
    });
    l
}

fn tcp(sport: u16, seq: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv4([198, 51, 100, 7], [203, 0, 113, 9], 64)
        .tcp(sport, 80, seq, 1000)
        .ack(1)
        .write(&mut v, &vec![0xab; len])
        .unwrap();
    v
}

/// A forwarded UDP datagram of `len` bytes (content from `id`) with IP identification
/// `id`.
fn udp(sport: u16, id: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (usize::from(id) * 7 + i) as u8).collect();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv4([198, 51, 100, 7], [203, 0, 113, 9], 64)
        .udp(sport, 4000)
        .write(&mut v, &payload)
        .unwrap();
    set_ip_ident(&mut v, id);
    v
}

/// Feeds a flood of `input` (two packets each of many distinct flows, every poll window
/// holding far more than 64 flows) and checks: the table held at most 64 flows, the
/// overflow completed old flows early, nothing is held after the polls, every wire
/// packet was forwarded, conservation, a full pool.
fn flood(what: &str, gro: Gro, mode: Mode, input: Vec<Vec<u8>>) {
    flood_in(what, gro, mode, input, false);
}

/// [`flood`], through the dual-stack router when `v6`.
fn flood_in(what: &str, gro: Gro, mode: Mode, input: Vec<Vec<u8>>, v6: bool) {
    for rx_csum in [false, true] {
        flood_one(
            &format!("{what} {gro:?} {mode:?} rx_csum={rx_csum}"),
            (gro, mode, rx_csum, v6),
            input.clone(),
        );
    }
}

fn flood_one(what: &str, (gro, mode, rx_csum, v6): (Gro, Mode, bool, bool), input: Vec<Vec<u8>>) {
    let n = input.len() as u64;
    let mut l = lab_in(gro, mode, rx_csum, v6);
    l.feed(0, input);
    l.run();
    assert!(l.event("gro", "peak_flows") <= 64, "{what}: table bounded");
    assert!(
        l.event("gro", "evicted") > 0,
        "{what}: overflow completes old flows"
    );
    assert_eq!(l.w.held(), 0, "{what}: nothing held after a poll");
    let wire: u64 = l.tx(1).iter().map(|f| u64::from(f.segs)).sum();
    assert_eq!(wire, n, "{what}: every packet forwarded");
    assert_eq!(l.w.acct.rx, n, "{what}: every packet received");
    l.assert_conserved();
    l.stop_and_check_pool();
}

#[test]
fn a_flood_of_distinct_flows_keeps_the_table_bounded() {
    // Two segments each of 5,000 flows: every poll window holds 256 distinct flows.
    let n = 5_000u32;
    for gro in GRO_MODES {
        for mode in [Mode::List, Mode::Packet] {
            let input: Vec<Vec<u8>> = (0..2 * n)
                .map(|i| tcp(1024 + (i % n) as u16, 1 + (i / n) * 100, 100))
                .collect();
            flood("tcp", gro, mode, input);
        }
    }
}

#[test]
fn a_flood_of_distinct_udp_flows_keeps_the_table_bounded() {
    // Two datagrams each of 5,000 flows (consecutive IDs per flow), as above.
    let n = 5_000u32;
    for gro in GRO_MODES {
        for mode in [Mode::List, Mode::Packet] {
            let input: Vec<Vec<u8>> = (0..2 * n)
                .map(|i| udp(1024 + (i % n) as u16, (i / n) as u16, 100))
                .collect();
            flood("udp", gro, mode, input);
        }
    }
}

/// What forwarding gave: eth1's frames and the drops by reason.
type Fate = (Vec<Vec<u8>>, Vec<(&'static str, u64)>);

/// Forwards `input` (through the dual-stack router when `v6`); also returns the packets
/// GRO merged.
fn forward_in(gro: Gro, mode: Mode, rx_csum: bool, input: &[Vec<u8>], v6: bool) -> (Fate, u64) {
    let mut l = lab_in(gro, mode, rx_csum, v6);
    l.feed(0, input.iter().cloned());
    l.run();
    l.assert_conserved();
    assert_eq!(l.w.acct.rx, input.len() as u64);
    assert!(l.event("gro", "peak_flows") <= 64, "table bounded");
    assert_eq!(l.w.held(), 0, "nothing held after a poll");
    let merged = l.event("gro", "merged");
    let frames = l.tx(1).into_iter().map(|f| f.bytes).collect();
    let drops = l.drops().into_iter().collect();
    l.stop_and_check_pool();
    ((frames, drops), merged)
}

/// Forwards `input` with GRO off and in every GRO mode and batch mode, with and without
/// device-validated checksums: the frames on eth1 and the drops must be the same, and
/// GRO must have merged something.
fn same_fate_as_without_gro(what: &str, input: &[Vec<u8>], some_drops: bool) {
    same_fate_in(what, input, some_drops, false);
}

/// [`same_fate_as_without_gro`], through the dual-stack router when `v6`.
fn same_fate_in(what: &str, input: &[Vec<u8>], some_drops: bool, v6: bool) {
    for mode in [Mode::List, Mode::Packet] {
        let (want, _) = forward_in(Gro::Off, mode, false, input, v6);
        assert_eq!(
            !want.1.is_empty(),
            some_drops,
            "{what}: the input has frames the router drops: {:?}",
            want.1
        );
        for gro in GRO_MODES {
            for rx_csum in [false, true] {
                let (got, merged) = forward_in(gro, mode, rx_csum, input, v6);
                let how = format!("{what} {gro:?} {mode:?} rx_csum={rx_csum}");
                assert!(merged > 0, "{how}: the good runs merge");
                assert_eq!(got, want, "{how}");
            }
        }
    }
}

#[test]
fn out_of_order_segments_are_forwarded_in_arrival_order() {
    // 2,000 segments of one flow; in every 7 the first two are swapped and the last
    // is a retransmission of an earlier one: GRO may merge only what is in sequence,
    // and the output must be what the router sends without GRO.
    let mut input: Vec<Vec<u8>> = (0..2000u32).map(|i| tcp(5000, 1 + i * 500, 500)).collect();
    for w in input.chunks_mut(7) {
        w.swap(0, 1);
        if w.len() == 7 {
            w[6] = w[2].clone();
        }
    }
    same_fate_as_without_gro("tcp out of order", &input, false);
}

#[test]
fn out_of_order_udp_datagrams_are_forwarded_in_arrival_order() {
    // 2,000 datagrams of one flow, IDs in sending order; in every 7 the first two are
    // swapped (their IDs no longer follow on), the last is a duplicate of an earlier one
    // (same ID), and every 11th is shorter (ends a train) and every 13th longer (never
    // merged, starts one). UDP has no sequence number: only the IP ID rule and the
    // length rules decide, and the output must be the router's without GRO.
    let len = |i: u16| match (i % 11, i % 13) {
        (0, _) => 200,
        (_, 0) => 800,
        _ => 500,
    };
    let mut input: Vec<Vec<u8>> = (0..2000u16).map(|i| udp(5000, i, len(i))).collect();
    for w in input.chunks_mut(7) {
        w.swap(0, 1);
        if w.len() == 7 {
            w[6] = w[2].clone();
        }
    }
    same_fate_as_without_gro("udp out of order", &input, false);
}

#[test]
fn malformed_segments_meet_the_same_fate_as_without_gro() {
    let good = |seq| tcp(6000, seq, 300);
    let mut input = Vec::new();
    let mut seq = 1u32;
    for k in 0..400u32 {
        let mut f = good(seq);
        seq += 300;
        match k % 10 {
            // Corrupt TCP checksum (forwarded: a router does not check it).
            1 => f[50] ^= 0xff,
            // Corrupt IP header checksum.
            2 => f[24] ^= 0x01,
            // IP total length beyond the frame.
            3 => f[17] = f[17].wrapping_add(40),
            // Cut short inside the TCP header.
            4 => f.truncate(14 + 20 + 10),
            // A fragment (MF).
            5 => f[20] |= 0x20,
            // TCP data offset below 5 and above the segment.
            6 => f[46] = 0x20,
            7 => f[46] = 0xf0,
            // Not IPv4 at all behind an IPv4 ethertype.
            8 => f[14] = 0x65,
            _ => {}
        }
        if matches!(k % 10, 2 | 3 | 5 | 8) {
            // Keep the IP checksum right where only the fields above were meant to be
            // wrong (case 2 keeps its corrupt checksum).
            if k % 10 != 2 {
                f[24..26].copy_from_slice(&[0, 0]);
                let c = netbatch_wire::checksum::checksum(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
        }
        input.push(f);
    }
    same_fate_as_without_gro("malformed tcp", &input, true);
}

#[test]
fn malformed_udp_datagrams_meet_the_same_fate_as_without_gro() {
    // One flow of 300-byte datagrams with consecutive IDs; of every 12, three in a row
    // are good (so they merge) and nine are malformed, each a way UDP GRO must refuse
    // (`udp_gro_receive_segment`: non-zero checksum, length field = IP payload > 8) or
    // the router must drop, in the middle of the flow's trains.
    let mut input = Vec::new();
    for k in 0..480u16 {
        let mut f = udp(7000, k, 300);
        let case = k % 12;
        match case {
            // No checksum.
            1 => f[40..42].copy_from_slice(&[0, 0]),
            // UDP length beyond the IP payload, and short of it.
            2 => f[38..40].copy_from_slice(&(308u16 + 40).to_be_bytes()),
            3 => f[38..40].copy_from_slice(&(308u16 - 100).to_be_bytes()),
            // UDP length below the header, and exactly the header (no payload claimed).
            4 => f[38..40].copy_from_slice(&4u16.to_be_bytes()),
            5 => f[38..40].copy_from_slice(&8u16.to_be_bytes()),
            // The frame cut inside the payload (the IP length claims more: dropped).
            6 => f.truncate(14 + 20 + 8 + 100),
            // The IP packet cut inside the UDP header (IP length says so: forwarded).
            7 => {
                f.truncate(14 + 20 + 4);
                f[16..18].copy_from_slice(&24u16.to_be_bytes());
            }
            // Corrupt UDP checksum (forwarded: a router does not check it).
            8 => f[45] ^= 0xff,
            // A fragment (MF).
            9 => f[20] |= 0x20,
            _ => {}
        }
        if matches!(case, 7 | 9) {
            refresh_ip_checksum(&mut f);
        }
        input.push(f);
    }
    same_fate_as_without_gro("malformed udp", &input, true);
}

/// A forwarded TCP segment over IPv6 (to 2001:db8:300::9, via eth1).
fn tcp6(sport: u16, seq: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv6(ip6(PEER6).octets(), ip6("2001:db8:300::9").octets(), 64)
        .tcp(sport, 80, seq, 1000)
        .ack(1)
        .write(&mut v, &vec![0xab; len])
        .unwrap();
    v
}

/// A forwarded UDP datagram over IPv6 of `len` bytes, its content from `n`.
fn udp6(sport: u16, n: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (usize::from(n) * 7 + i) as u8).collect();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv6(ip6(PEER6).octets(), ip6("2001:db8:300::9").octets(), 64)
        .udp(sport, 4000)
        .write(&mut v, &payload)
        .unwrap();
    v
}

/// Sets the payload length of the IPv6 frame `f`.
fn set_plen(f: &mut [u8], plen: usize) {
    f[18..20].copy_from_slice(&(plen as u16).to_be_bytes());
}

/// `f` (an IPv6 frame) with extension header `ext` inserted after the fixed header: `ext`
/// names what the fixed header named, the fixed header names `kind`.
fn with_ext(f: &[u8], kind: u8, mut ext: Vec<u8>) -> Vec<u8> {
    ext[0] = f[20];
    let mut g = f[..54].to_vec();
    g[20] = kind;
    g.extend_from_slice(&ext);
    g.extend_from_slice(&f[54..]);
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]])) + ext.len();
    set_plen(&mut g, plen);
    g
}

#[test]
fn a_flood_of_distinct_ipv6_flows_keeps_the_table_bounded() {
    // Two segments (or datagrams) each of 5,000 flows: every poll window holds 256
    // distinct flows.
    let n = 5_000u32;
    for gro in GRO_MODES {
        for mode in [Mode::List, Mode::Packet] {
            let input: Vec<Vec<u8>> = (0..2 * n)
                .map(|i| tcp6(1024 + (i % n) as u16, 1 + (i / n) * 100, 100))
                .collect();
            flood_in("tcp6", gro, mode, input, true);
            let input: Vec<Vec<u8>> = (0..2 * n)
                .map(|i| udp6(1024 + (i % n) as u16, (i / n) as u16, 100))
                .collect();
            flood_in("udp6", gro, mode, input, true);
        }
    }
}

#[test]
fn out_of_order_ipv6_segments_and_datagrams_are_forwarded_in_arrival_order() {
    // As over IPv4: in every 7 the first two are swapped and the last repeats an earlier
    // one. UDP over IPv6 has no identification: only the length rules decide (every 11th
    // shorter, every 13th longer).
    let mut input: Vec<Vec<u8>> = (0..2000u32).map(|i| tcp6(5000, 1 + i * 500, 500)).collect();
    for w in input.chunks_mut(7) {
        w.swap(0, 1);
        if w.len() == 7 {
            w[6] = w[2].clone();
        }
    }
    same_fate_in("tcp6 out of order", &input, false, true);
    let len = |i: u16| match (i % 11, i % 13) {
        (0, _) => 200,
        (_, 0) => 800,
        _ => 500,
    };
    let mut input: Vec<Vec<u8>> = (0..2000u16).map(|i| udp6(5000, i, len(i))).collect();
    for w in input.chunks_mut(7) {
        w.swap(0, 1);
        if w.len() == 7 {
            w[6] = w[2].clone();
        }
    }
    same_fate_in("udp6 out of order", &input, false, true);
}

#[test]
fn malformed_ipv6_segments_meet_the_same_fate_as_without_gro() {
    let mut input = Vec::new();
    let mut seq = 1u32;
    for k in 0..480u32 {
        let mut f = tcp6(6000, seq, 300);
        seq += 300;
        let plen = 20 + 300;
        f = match k % 12 {
            // Corrupt TCP checksum (forwarded: a router does not check it).
            1 => {
                f[70] ^= 0xff;
                f
            }
            // Payload length beyond the frame (dropped), and short of it (trimmed).
            2 => {
                set_plen(&mut f, plen + 40);
                f
            }
            3 => {
                set_plen(&mut f, plen - 100);
                f
            }
            // Cut short inside the TCP header (the payload length says more: dropped).
            4 => {
                f.truncate(14 + 40 + 10);
                f
            }
            // A later fragment, and an atomic fragment (forwarded as they are).
            5 => with_ext(&f, 44, vec![0, 0, 0x01, 0x00, 0, 0, 0, 9]),
            6 => with_ext(&f, 44, vec![0, 0, 0, 0, 0, 0, 0, 9]),
            // TCP data offset below 5 and beyond the segment.
            7 => {
                f[66] = 0x20;
                f
            }
            8 => {
                f[66] = 0xf0;
                f
            }
            // Not IPv6 behind an IPv6 ethertype.
            9 => {
                f[14] = 0x45;
                f
            }
            // A Hop-by-Hop header after a Destination Options header (a parameter
            // problem, answered on eth0).
            10 => {
                let g = with_ext(&f, 0, vec![0, 0, 1, 4, 0, 0, 0, 0]);
                with_ext(&g, 60, vec![0, 0, 1, 4, 0, 0, 0, 0])
            }
            _ => f,
        };
        input.push(f);
    }
    same_fate_in("malformed tcp6", &input, true, true);
}

#[test]
fn malformed_ipv6_datagrams_meet_the_same_fate_as_without_gro() {
    // One flow of 300-byte datagrams; of every 12, three in a row are good (so they merge)
    // and nine are malformed, each a way UDP GRO must refuse or the router must drop.
    let mut input = Vec::new();
    for k in 0..480u16 {
        let mut f = udp6(7000, k, 300);
        let case = k % 12;
        match case {
            // No checksum (invalid over IPv6, but not the router's to judge).
            1 => f[60..62].copy_from_slice(&[0, 0]),
            // UDP length beyond the payload length, and short of it.
            2 => f[58..60].copy_from_slice(&(308u16 + 40).to_be_bytes()),
            3 => f[58..60].copy_from_slice(&(308u16 - 100).to_be_bytes()),
            // UDP length below the header, and exactly the header.
            4 => f[58..60].copy_from_slice(&4u16.to_be_bytes()),
            5 => f[58..60].copy_from_slice(&8u16.to_be_bytes()),
            // The frame cut inside the payload (the payload length claims more: dropped).
            6 => f.truncate(14 + 40 + 8 + 100),
            // The packet cut inside the UDP header (its payload length says so).
            7 => {
                f.truncate(14 + 40 + 4);
                set_plen(&mut f, 4);
            }
            // Corrupt UDP checksum (forwarded).
            8 => f[65] ^= 0xff,
            // A first fragment (offset 0, M set).
            9 => f = with_ext(&f, 44, vec![0, 0, 0, 1, 0, 0, 0, 5]),
            // A Hop-by-Hop header of its own (merged only with its like: alone here).
            10 => f = with_ext(&f, 0, vec![0, 0, 1, 4, 0, 0, 0, 0]),
            _ => {}
        }
        input.push(f);
    }
    same_fate_in("malformed udp6", &input, true, true);
}

/// No frame leaves above its MTU with IPv6 GRO either: TCP segments with a timestamp
/// option (a 32-byte TCP header) that fit eth0's MTU (1500: 40 + 32 + 1428 bytes) do not
/// fit eth1's (1490), so none may leave on eth1, whatever GRO made of them: each is
/// answered with a Packet Too Big (RFC 4443 3.2), as without GRO. (A super-packet's
/// segment length counts its own TCP header, options included.)
#[test]
fn ipv6_super_packets_never_leave_above_the_mtu() {
    let seg = |k: u32| {
        let mut v = Vec::new();
        PacketBuilder::ethernet2(PEER.0, US.0)
            .ipv6(ip6(PEER6).octets(), ip6("2001:db8:300::9").octets(), 64)
            .tcp(9000, 80, 1 + 1428 * k, 1000)
            .ack(1)
            .options(&[
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::Timestamp(5, 7),
            ])
            .unwrap()
            .write(&mut v, &[0x5a; 1428])
            .unwrap();
        v
    };
    let input: Vec<Vec<u8>> = (0..20).map(seg).collect();
    assert_eq!(input[0].len(), 14 + 1500);
    for gro in [Gro::Off, Gro::Standard, Gro::Fraglist] {
        for mode in [Mode::List, Mode::Packet] {
            let mut spec = router6(gro);
            spec.ports[1].mtu = 1490;
            spec.neighbours6
                .push(netbatch_runtime::setup::StaticNeighbour6 {
                    iface: 0,
                    ip: ip6(PEER6),
                    mac: PEER,
                });
            let mut l = Lab::new(&spec, mode, Dispatch::Buckets);
            l.feed(0, input.iter().cloned());
            l.run();
            let what = format!("{gro:?} {mode:?}");
            let out = l.tx(1);
            assert!(out.is_empty(), "{what}: {} frames left on eth1", out.len());
            // GRO merged (the test is not vacuous).
            if gro != Gro::Off {
                assert!(l.event("gro", "merged") > 0, "{what}");
            }
            l.assert_conserved();
            l.stop_and_check_pool();
        }
    }
}
