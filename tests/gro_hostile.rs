//! GRO under hostile input stays bounded and loses nothing: a flood of distinct flows
//! (the table never holds more than 8 × 8 flows, the oldest are completed early and
//! counted), a flow whose segments arrive out of order, and malformed segments of every
//! kind. Every frame is either forwarded or dropped with the reason the router gives it
//! without GRO; the conservation law holds and every buffer returns to the pool.

use etherparse::PacketBuilder;
use netbatch_engine::{Dispatch, Mode};
use netbatch_runtime::PollParams;
use netbatch_scenarios::{Gro, Lab, PEER, US, router};

fn lab(gro: bool, mode: Mode) -> Lab {
    let spec = router(if gro { Gro::Standard } else { Gro::Off });
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

/// An event counter of the `gro` stage.
fn gro_event(l: &Lab, name: &str) -> u64 {
    l.w.snapshot()
        .iter()
        .find(|s| s.name == "gro")
        .and_then(|s| s.events.iter().find(|(n, _)| *n == name))
        .map_or(0, |e| e.1)
}

#[test]
fn a_flood_of_distinct_flows_keeps_the_table_bounded() {
    for mode in [Mode::List, Mode::Packet] {
        let mut l = lab(true, mode);
        // Two segments each of 5,000 flows: every poll window holds 256 distinct flows.
        let n = 5_000u32;
        let input: Vec<Vec<u8>> = (0..2 * n)
            .map(|i| tcp(1024 + (i % n) as u16, 1 + (i / n) * 100, 100))
            .collect();
        l.feed(0, input);
        l.run();
        assert!(gro_event(&l, "peak_flows") <= 64, "{mode:?}: table bounded");
        assert!(
            gro_event(&l, "evicted") > 0,
            "{mode:?}: overflow completes old flows"
        );
        assert_eq!(l.w.held(), 0, "{mode:?}: nothing held after a poll");
        let wire: u64 = l.tx(1).iter().map(|f| u64::from(f.segs)).sum();
        assert_eq!(wire, u64::from(2 * n), "{mode:?}: every segment forwarded");
        l.assert_conserved();
        l.stop_and_check_pool();
    }
}

/// What forwarding gave: eth1's frames and the drops by reason.
type Fate = (Vec<Vec<u8>>, Vec<(&'static str, u64)>);

/// Forwards `input`; also returns the segments GRO merged.
fn forward(gro: bool, mode: Mode, input: &[Vec<u8>]) -> (Fate, u64) {
    let mut l = lab(gro, mode);
    l.feed(0, input.iter().cloned());
    l.run();
    l.assert_conserved();
    assert_eq!(l.w.acct.rx, input.len() as u64);
    let merged = gro_event(&l, "merged");
    let frames = l.tx(1).into_iter().map(|f| f.bytes).collect();
    let drops = l.drops().into_iter().collect();
    l.stop_and_check_pool();
    ((frames, drops), merged)
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
    for mode in [Mode::List, Mode::Packet] {
        let (want, _) = forward(false, mode, &input);
        let (got, merged) = forward(true, mode, &input);
        assert!(merged > 0, "{mode:?}: the in-sequence runs are merged");
        assert_eq!(got, want, "{mode:?}");
    }
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
    for mode in [Mode::List, Mode::Packet] {
        let (want, _) = forward(false, mode, &input);
        assert!(!want.1.is_empty(), "the input has frames the router drops");
        let (got, merged) = forward(true, mode, &input);
        assert!(merged > 0, "{mode:?}: the good segments between are merged");
        assert_eq!(got, want, "{mode:?}");
    }
}
