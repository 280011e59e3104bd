//! GRO then GSO is invisible on the wire: for random TCP and UDP flows, segment sizes,
//! flags, IP ID behaviours, corrupt segments, gaps and interleavings, a router that
//! forwards with standard or fraglist GRO onto a port with no offload sends exactly the
//! frames it sends with GRO off: the same bytes, in the same order within each flow. In
//! per-packet and list mode, with both dispatch strategies. The GRO-off run is the
//! reference; the frames are built by etherparse.

use std::collections::BTreeMap;

use etherparse::PacketBuilder;
use netbatch_engine::{Dispatch, Mode};
use netbatch_scenarios::frames::set_ip_ident;
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, US, VARIANTS, router};
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
        let snap = lab.w.snapshot();
        let g = snap.iter().find(|s| s.name == "gro").expect("a gro stage");
        let ev = |k: &str| g.events.iter().find(|(n, _)| *n == k).map_or(0, |e| e.1);
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
