//! GRO then GSO is invisible on the wire: for random TCP and UDP flows, segment sizes,
//! flags, IP ID behaviours, corrupt segments, gaps and interleavings, a router that
//! forwards with standard or fraglist GRO onto a port with no offload sends exactly the
//! frames it sends with GRO off: the same bytes, in the same order within each flow. In
//! per-packet and list mode, with both dispatch strategies. The GRO-off run is the
//! reference; the frames are built by etherparse.
//!
//! The same over IPv4 and IPv6 flows mixed (a dual-stack router): IPv6 flows with random
//! hop limits, traffic classes, flow labels (changing now and then), and a Hop-by-Hop
//! options header or none.

use std::collections::BTreeMap;

use etherparse::PacketBuilder;
use netbatch_engine::{Dispatch, Mode};
use netbatch_scenarios::frames::set_ip_ident;
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, PEER6, US, VARIANTS, ip6, router, router6};
use proptest::prelude::*;

/// The router; `rx_checksum`: eth0 validates L4 checksums as a NIC does (GRO then takes
/// its fast path for trains).
fn spec(gro: Gro, rx_checksum: bool) -> LabSpec {
    let mut spec = router(gro);
    spec.ports[0].features.rx_checksum = rx_checksum;
    spec
}

/// One flow: its protocol, how its IP IDs go, and its segments.
#[derive(Debug, Clone)]
struct Flow {
    tcp: bool,
    /// 0: incrementing, 1: fixed, 2: random.
    id_mode: u8,
    ttl: u8,
    segs: Vec<SegSpec>,
}

#[derive(Debug, Clone)]
struct SegSpec {
    len: usize,
    /// PSH (TCP).
    push: bool,
    /// Skip this many sequence numbers before it (a gap).
    gap: u32,
    /// Corrupt its L4 checksum.
    corrupt: bool,
    /// A random IP ID (for id mode 2).
    rid: u16,
}

fn seg() -> impl Strategy<Value = SegSpec> {
    (
        prop_oneof![4 => Just(1000usize), 2 => 1usize..1400, 1 => Just(0usize)],
        prop::bool::weighted(0.1),
        prop_oneof![9 => Just(0u32), 1 => 1u32..3],
        prop::bool::weighted(0.05),
        any::<u16>(),
    )
        .prop_map(|(len, push, gap, corrupt, rid)| SegSpec {
            len,
            push,
            gap,
            corrupt,
            rid,
        })
}

fn flow() -> impl Strategy<Value = Flow> {
    (
        any::<bool>(),
        prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
        2u8..=64,
        proptest::collection::vec(seg(), 1..40),
    )
        .prop_map(|(tcp, id_mode, ttl, segs)| Flow {
            tcp,
            id_mode,
            ttl,
            segs,
        })
}

/// The frames of flow `f` (number `n`), in its own order.
fn frames(n: usize, f: &Flow) -> Vec<Vec<u8>> {
    let mut seq = 1000u32;
    let mut out = Vec::new();
    for (i, s) in f.segs.iter().enumerate() {
        seq = seq.wrapping_add(s.gap);
        let b = PacketBuilder::ethernet2(PEER.0, US.0).ipv4(
            [198, 51, 100, 7],
            [203, 0, 113, 1 + n as u8],
            f.ttl,
        );
        // UDP datagrams carry at least a byte (an empty one ends nothing and is legal
        // too, but GRO never holds it: keep the mix on what GRO works on).
        let payload: Vec<u8> = (0..s.len.max(usize::from(!f.tcp)))
            .map(|k| (k * 7 + i) as u8)
            .collect();
        let mut v = Vec::new();
        if f.tcp {
            let b = b.tcp(40000 + n as u16, 80, seq, 4000).ack(9);
            let b = if s.push { b.psh() } else { b };
            b.write(&mut v, &payload).unwrap();
            seq = seq.wrapping_add(payload.len() as u32);
        } else {
            b.udp(40000 + n as u16, 53).write(&mut v, &payload).unwrap();
        }
        let id = match f.id_mode {
            0 => 500 + i as u16,
            1 => 77,
            _ => s.rid,
        };
        set_ip_ident(&mut v, id);
        if s.corrupt {
            let at = if f.tcp { 14 + 20 + 16 } else { 14 + 20 + 6 };
            v[at] ^= 0x40;
        }
        out.push(v);
    }
    out
}

/// Forwards `input` (all received at one instant) and returns eth1's frames by flow
/// (keyed by destination address and ports), plus the number of frames sent.
fn forward(
    gro: Gro,
    rx_checksum: bool,
    mode: Mode,
    dispatch: Dispatch,
    input: &[Vec<u8>],
) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut lab = Lab::new(&spec(gro, rx_checksum), mode, dispatch);
    lab.feed(0, input.iter().cloned());
    lab.run();
    lab.assert_conserved();
    let mut by_flow: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    for f in lab.tx(1) {
        assert_eq!(f.segs, 1, "a port without offloads gets wire packets");
        let key = [&f.bytes[30..34], &f.bytes[34..38]].concat();
        by_flow.entry(key).or_default().push(f.bytes);
    }
    assert!(lab.tx(0).is_empty(), "nothing goes back");
    lab.stop_and_check_pool();
    by_flow
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn gro_then_gso_gives_back_the_frames_of_gro_off(
        flows in proptest::collection::vec(flow(), 1..5),
        picks in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        // Interleave the flows: each pick takes the next frame of one flow.
        let mut queues: Vec<std::collections::VecDeque<Vec<u8>>> =
            flows.iter().enumerate().map(|(n, f)| frames(n, f).into()).collect();
        let mut input = Vec::new();
        for p in picks {
            let q = usize::from(p) % queues.len();
            if let Some(f) = queues[q].pop_front() {
                input.push(f);
            }
        }
        for q in &mut queues {
            input.extend(q.drain(..));
        }
        for (mode, dispatch) in VARIANTS {
            let want = forward(Gro::Off, false, mode, dispatch, &input);
            let sent: usize = want.values().map(Vec::len).sum();
            prop_assert!(sent > 0 || input.is_empty());
            for gro in [Gro::Standard, Gro::Fraglist] {
                for rx_checksum in [false, true] {
                    let got = forward(gro, rx_checksum, mode, dispatch, &input);
                    prop_assert!(
                        got == want,
                        "{:?} (rx-checksum {}) in {:?}/{:?} differs from GRO off",
                        gro, rx_checksum, mode, dispatch
                    );
                }
            }
        }
    }
}

/// The proptest above is only worth something if GRO merges: a plain long train must
/// come out of the GRO stage as one super-packet.
#[test]
fn the_generator_makes_trains_gro_merges() {
    let f = Flow {
        tcp: true,
        id_mode: 0,
        ttl: 64,
        segs: (0..10)
            .map(|_| SegSpec {
                len: 1000,
                push: false,
                gap: 0,
                corrupt: false,
                rid: 0,
            })
            .collect(),
    };
    let input = frames(0, &f);
    for (gro, rx_checksum) in [
        (Gro::Standard, false),
        (Gro::Fraglist, false),
        (Gro::Standard, true),
        (Gro::Fraglist, true),
    ] {
        let mut lab = Lab::new(&spec(gro, rx_checksum), Mode::List, Dispatch::Buckets);
        lab.feed(0, input.iter().cloned());
        lab.run();
        let ev = |k: &str| lab.event("gro", k);
        let snap = lab.w.snapshot();
        assert_eq!((ev("coalesced"), ev("merged")), (1, 9), "{gro:?}");
        // With device-verified checksums the train takes the fast path after its head.
        assert_eq!(
            ev("merged_fast"),
            if rx_checksum { 9 } else { 0 },
            "{gro:?}"
        );
        let gso = snap.iter().find(|s| s.name == "gso").expect("a gso stage");
        assert_eq!(gso.packets, 1, "{gro:?}: one super-packet segmented");
        assert_eq!(lab.tx(1).len(), 10);
        lab.stop_and_check_pool();
    }
}

/// An IPv6 flow: its protocol, its fixed header's fields, whether it carries a
/// Hop-by-Hop options header, and its segments.
#[derive(Debug, Clone)]
struct Flow6 {
    tcp: bool,
    hop_limit: u8,
    traffic_class: u8,
    flow_label: u32,
    hbh: bool,
    segs: Vec<Seg6>,
}

#[derive(Debug, Clone)]
struct Seg6 {
    s: SegSpec,
    /// Another flow label than the flow's (a sender's rehash, RFC 6437).
    relabel: bool,
}

fn flow6() -> impl Strategy<Value = Flow6> {
    (
        any::<bool>(),
        2u8..=64,
        any::<u8>(),
        0u32..0x10_0000,
        prop::bool::weighted(0.3),
        proptest::collection::vec(
            (seg(), prop::bool::weighted(0.05)).prop_map(|(s, relabel)| Seg6 { s, relabel }),
            1..40,
        ),
    )
        .prop_map(
            |(tcp, hop_limit, traffic_class, flow_label, hbh, segs)| Flow6 {
                tcp,
                hop_limit,
                traffic_class,
                flow_label,
                hbh,
                segs,
            },
        )
}

/// The frames of IPv6 flow `f` (number `n`, to 2001:db8:300::n, routed via eth1), in
/// its own order.
fn frames6(n: usize, f: &Flow6) -> Vec<Vec<u8>> {
    let mut seq = 7000u32;
    let mut out = Vec::new();
    let dst = ip6(&format!("2001:db8:300::{:x}", n + 1)).octets();
    for (i, g) in f.segs.iter().enumerate() {
        let s = &g.s;
        seq = seq.wrapping_add(s.gap);
        let mut exts = etherparse::Ipv6Extensions::default();
        if f.hbh {
            let next = if f.tcp {
                etherparse::IpNumber::TCP
            } else {
                etherparse::IpNumber::UDP
            };
            exts.hop_by_hop_options =
                Some(etherparse::Ipv6RawExtHeader::new_raw(next, &[1, 4, 0, 0, 0, 0]).unwrap());
        }
        let label = if g.relabel {
            f.flow_label ^ 1
        } else {
            f.flow_label
        };
        let ip = etherparse::Ipv6Header {
            traffic_class: f.traffic_class,
            flow_label: etherparse::Ipv6FlowLabel::try_new(label).unwrap(),
            hop_limit: f.hop_limit,
            source: ip6(PEER6).octets(),
            destination: dst,
            ..Default::default()
        };
        let b = PacketBuilder::ethernet2(PEER.0, US.0).ip(etherparse::IpHeaders::Ipv6(ip, exts));
        let payload: Vec<u8> = (0..s.len.max(usize::from(!f.tcp)))
            .map(|k| (k * 11 + i) as u8)
            .collect();
        let mut v = Vec::new();
        if f.tcp {
            let b = b.tcp(30000 + n as u16, 443, seq, 4000).ack(9);
            let b = if s.push { b.psh() } else { b };
            b.write(&mut v, &payload).unwrap();
            seq = seq.wrapping_add(payload.len() as u32);
        } else {
            b.udp(30000 + n as u16, 4433)
                .write(&mut v, &payload)
                .unwrap();
        }
        if s.corrupt {
            let l4 = 14 + 40 + if f.hbh { 8 } else { 0 };
            v[l4 + if f.tcp { 16 } else { 6 }] ^= 0x40;
        }
        out.push(v);
    }
    out
}

/// The flow of a frame sent on eth1: its IP version, destination address and ports, as
/// etherparse reads them.
fn flow_of(frame: &[u8]) -> Vec<u8> {
    let p = etherparse::SlicedPacket::from_ethernet(frame).expect("a frame etherparse parses");
    let mut key = match &p.net {
        Some(etherparse::NetSlice::Ipv4(ip)) => ip.header().destination().to_vec(),
        Some(etherparse::NetSlice::Ipv6(ip)) => ip.header().destination().to_vec(),
        other => panic!("not IP: {other:?}"),
    };
    match &p.transport {
        Some(etherparse::TransportSlice::Tcp(t)) => key.extend(t.source_port().to_be_bytes()),
        Some(etherparse::TransportSlice::Udp(u)) => key.extend(u.source_port().to_be_bytes()),
        other => panic!("not TCP/UDP: {other:?}"),
    }
    key
}

/// [`forward`] through the dual-stack router.
fn forward6(
    gro: Gro,
    rx_checksum: bool,
    mode: Mode,
    dispatch: Dispatch,
    input: &[Vec<u8>],
) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut spec = router6(gro);
    spec.ports[0].features.rx_checksum = rx_checksum;
    let mut lab = Lab::new(&spec, mode, dispatch);
    lab.feed(0, input.iter().cloned());
    lab.run();
    lab.assert_conserved();
    let mut by_flow: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    for f in lab.tx(1) {
        assert_eq!(f.segs, 1, "a port without offloads gets wire packets");
        by_flow.entry(flow_of(&f.bytes)).or_default().push(f.bytes);
    }
    assert!(lab.tx(0).is_empty(), "nothing goes back");
    lab.stop_and_check_pool();
    by_flow
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn gro_then_gso_gives_back_the_frames_of_gro_off_over_ipv4_and_ipv6(
        flows4 in proptest::collection::vec(flow(), 0..3),
        flows6 in proptest::collection::vec(flow6(), 1..4),
        picks in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut queues: Vec<std::collections::VecDeque<Vec<u8>>> = flows4
            .iter()
            .enumerate()
            .map(|(n, f)| frames(n, f).into())
            .chain(flows6.iter().enumerate().map(|(n, f)| frames6(n, f).into()))
            .collect();
        let mut input = Vec::new();
        for p in picks {
            let q = usize::from(p) % queues.len();
            if let Some(f) = queues[q].pop_front() {
                input.push(f);
            }
        }
        for q in &mut queues {
            input.extend(q.drain(..));
        }
        for (mode, dispatch) in VARIANTS {
            let want = forward6(Gro::Off, false, mode, dispatch, &input);
            let sent: usize = want.values().map(Vec::len).sum();
            prop_assert_eq!(sent, input.len(), "GRO off forwards every frame");
            for gro in [Gro::Standard, Gro::Fraglist] {
                for rx_checksum in [false, true] {
                    let got = forward6(gro, rx_checksum, mode, dispatch, &input);
                    prop_assert!(
                        got == want,
                        "{:?} (rx-checksum {}) in {:?}/{:?} differs from GRO off",
                        gro, rx_checksum, mode, dispatch
                    );
                }
            }
        }
    }
}

/// The IPv6 proptest is only worth something if GRO merges IPv6: a plain long train (with
/// a Hop-by-Hop header, TCP and UDP) comes out of the GRO stage as one super-packet, on
/// the IPv6 fast path when the device verified checksums, and GSO gives back 10 frames.
#[test]
fn the_generator_makes_ipv6_trains_gro_merges() {
    for tcp in [true, false] {
        let f = Flow6 {
            tcp,
            hop_limit: 64,
            traffic_class: 0x2e,
            flow_label: 0x1_2345,
            hbh: true,
            segs: (0..10)
                .map(|_| Seg6 {
                    s: SegSpec {
                        len: 1000,
                        push: false,
                        gap: 0,
                        corrupt: false,
                        rid: 0,
                    },
                    relabel: false,
                })
                .collect(),
        };
        let input = frames6(0, &f);
        for (gro, rx_checksum) in [
            (Gro::Standard, false),
            (Gro::Fraglist, false),
            (Gro::Standard, true),
            (Gro::Fraglist, true),
        ] {
            let mut spec = router6(gro);
            spec.ports[0].features.rx_checksum = rx_checksum;
            let mut lab = Lab::new(&spec, Mode::List, Dispatch::Buckets);
            lab.feed(0, input.iter().cloned());
            lab.run();
            let ev = |k: &str| lab.event("gro", k);
            let snap = lab.w.snapshot();
            let what = format!("{gro:?} tcp {tcp} rx-checksum {rx_checksum}");
            assert_eq!((ev("coalesced"), ev("merged")), (1, 9), "{what}");
            assert_eq!(ev("merged_fast"), if rx_checksum { 9 } else { 0 }, "{what}");
            let gso = snap.iter().find(|s| s.name == "gso").expect("a gso stage");
            assert_eq!(gso.packets, 1, "{what}: one super-packet segmented");
            let out = lab.tx(1);
            assert_eq!(out.len(), 10, "{what}");
            // Forwarded: hop limit one less, every other byte from the IPv6 header on the
            // original's.
            for (got, orig) in out.iter().zip(&input) {
                assert_eq!(got.bytes[21], 63, "{what}: hop limit");
                assert_eq!(&got.bytes[14..21], &orig[14..21], "{what}");
                assert_eq!(&got.bytes[22..], &orig[22..], "{what}");
            }
            lab.stop_and_check_pool();
        }
    }
}
