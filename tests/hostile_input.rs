//! What a hostile-input sweep found, each case built from its own bytes (frames made with
//! etherparse or by hand, not by the datapath): accounting in wire packets with GRO on
//! while packets wait for ARP, ARP replies the size of an ARP reply, packets claiming one
//! of our addresses as their source, and IPv4 options a router must process or refuse.

use netbatch_scenarios::frames;
use netbatch_scenarios::{Gro, Lab, US2, VARIANTS, router};
use netbatch_wire::ethernet::MacAddr;

/// The gateway of 203.0.113.0/24 in [`router`] (on eth1).
const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);
/// A host on eth0's subnet.
const H1: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// 300 UDP frames of one flow to a next hop that is not resolved yet, with GRO on (both
/// modes): what waits for ARP is counted in wire packets, the queue holds at most its
/// limit in wire packets (Linux's 101 by default), conservation holds while they wait and after
/// the reply releases them, and exactly the frames counted held leave on eth1.
#[test]
fn frames_held_for_arp_are_counted_in_wire_packets() {
    const N: usize = 300;
    const QUEUE: u64 = 101;
    for gro in [Gro::Standard, Gro::Fraglist, Gro::Off] {
        for (mode, dispatch) in VARIANTS {
            let mut spec = router(gro);
            spec.neighbours.clear();
            let mut lab = Lab::new(&spec, mode, dispatch);
            let train: Vec<Vec<u8>> = (0..N)
                .map(|i| {
                    let mut f = frames::udp(
                        H1,
                        netbatch_scenarios::US,
                        "198.51.100.7",
                        "203.0.113.9",
                        4000,
                        5000,
                        64,
                        &[i as u8; 1000],
                    );
                    frames::set_ip_ident(&mut f, i as u16);
                    f
                })
                .collect();
            lab.feed(0, train);
            lab.run();
            let what = format!("{gro:?} {mode:?} {dispatch:?}");
            let held = lab.w.held();
            let queue_full = lab.dropped(netbatch_stack::neigh::reason::QUEUE_FULL);
            assert!(held <= QUEUE, "{what}: {held} wire packets held");
            assert!(held > 0, "{what}: something waits for ARP");
            assert_eq!(held + queue_full, N as u64, "{what}: held or dropped, each");
            assert_eq!(lab.w.acct.rx, N as u64, "{what}");
            lab.assert_conserved();
            // The ARP request is the only frame on eth1 so far.
            let tx = lab.tx(1);
            assert_eq!(tx.len(), 1, "{what}: the ARP request");
            assert_eq!(&tx[0].bytes[12..14], &[0x08, 0x06]);
            lab.feed(
                1,
                [frames::arp(2, GW_MAC, "192.0.2.254", US2, "192.0.2.1", US2)],
            );
            lab.run();
            let out = lab.tx(1);
            assert_eq!(out.len() as u64, held, "{what}: the held frames leave");
            assert!(out.iter().all(|f| f.bytes.len() == 14 + 20 + 8 + 1000));
            assert_eq!(lab.w.held(), 0, "{what}");
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// An ARP request for our address, with `pad` bytes of padding (0xAA) after its 28
/// bytes; the ARP header starts at byte 14.
fn arp_request(pad: usize) -> Vec<u8> {
    let mut f = frames::arp(
        1,
        H1,
        "198.51.100.7",
        MacAddr([0; 6]),
        "198.51.100.1",
        MacAddr::BROADCAST,
    );
    f.truncate(14 + 28);
    f.resize(14 + 28 + pad, 0xaa);
    f
}

/// A request padded to 1518 bytes (or not padded at all, as software senders on veth
/// do) is answered with a 60-byte reply (the 46-byte minimum payload, zero padding),
/// never with the request's length or its padding's bytes (RFC 826 says nothing of
/// padding; IEEE 802.3 frames are at least 64 bytes with the FCS).
#[test]
fn arp_replies_are_the_size_of_an_arp_reply() {
    for pad in [0, 18, 100, 1518 - 42] {
        for (mode, dispatch) in VARIANTS {
            let mut lab = Lab::new(&router(Gro::Off), mode, dispatch);
            lab.feed(0, [arp_request(pad)]);
            lab.run();
            let tx = lab.tx(0);
            assert_eq!(tx.len(), 1, "pad {pad}: one reply");
            let r = &tx[0].bytes;
            assert_eq!(r.len(), 60, "pad {pad}: reply length");
            assert_eq!(&r[0..6], &H1.0, "to the asker");
            assert_eq!(&r[6..12], &netbatch_scenarios::US.0);
            assert_eq!(&r[12..14], &[0x08, 0x06]);
            // htype 1, ptype IPv4, hlen 6, plen 4, oper 2 (reply).
            assert_eq!(&r[14..22], &[0, 1, 8, 0, 6, 4, 0, 2]);
            assert_eq!(&r[22..28], &netbatch_scenarios::US.0, "sender: us");
            assert_eq!(&r[28..32], &[198, 51, 100, 1]);
            assert_eq!(&r[32..38], &H1.0, "target: the asker");
            assert_eq!(&r[38..42], &[198, 51, 100, 7]);
            assert!(r[42..].iter().all(|&b| b == 0), "pad {pad}: zero padding");
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// A frame that would leave above its interface's MTU is dropped at transmit and
/// counted (`tx_over_mtu`); one exactly at the MTU leaves. eth1's MTU is 1000 here, and
/// the frames enter at the transmit entry as complete frames do.
#[test]
fn no_frame_leaves_above_its_mtu() {
    let mut spec = router(Gro::Off);
    spec.ports[1].mtu = 1000;
    let mut lab = Lab::new(
        &spec,
        netbatch_engine::Mode::List,
        netbatch_engine::Dispatch::Buckets,
    );
    for l3 in [1000usize, 1001, 1480] {
        let mut f = frames::udp(
            US2,
            GW_MAC,
            "192.0.2.1",
            "203.0.113.9",
            4000,
            5000,
            64,
            &vec![7u8; l3 - 28],
        );
        frames::refresh_ip_checksum(&mut f);
        let pool = lab.w.pool().clone();
        let mut c = pool.cache();
        let mut p = c.alloc().expect("a buffer");
        {
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(128, &f));
            v.meta.out_if = 1;
        }
        drop(c);
        lab.w
            .host
            .injected
            .push(netbatch_stack::host::Entry::Transmit, p);
        lab.w.host.injected.originated += 1;
    }
    lab.run();
    let tx = lab.tx(1);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].bytes.len(), 14 + 1000);
    assert_eq!(lab.dropped(netbatch_stack::tx::reason::OVER_MTU), 2);
    lab.assert_conserved();
    lab.stop_and_check_pool();
}

/// The router with eth0's host 198.51.100.7 known (so ICMP errors to it leave at once).
fn router_knowing_h1() -> netbatch_scenarios::LabSpec {
    let mut spec = router(Gro::Off);
    spec.neighbours
        .push(netbatch_runtime::setup::StaticNeighbour {
            iface: 0,
            ip: netbatch_scenarios::ip("198.51.100.7"),
            mac: H1,
        });
    spec
}

/// A UDP frame from H1 (198.51.100.7) to `dst` with `src` as its source.
fn udp_from(src: &str, dst: &str) -> Vec<u8> {
    frames::udp(
        H1,
        netbatch_scenarios::US,
        src,
        dst,
        4000,
        5000,
        64,
        b"probe",
    )
}

/// A packet whose source is one of our addresses (eth0's or eth1's) is a martian, to be
/// forwarded or for us: dropped (`local_source`), as Linux's `fib_validate_source`
/// drops it with `accept_local` off; the same packet from the host's own address passes.
#[test]
fn packets_claiming_our_address_as_source_are_dropped() {
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&router_knowing_h1(), mode, dispatch);
        lab.feed(
            0,
            [
                udp_from("198.51.100.1", "203.0.113.9"),
                udp_from("192.0.2.1", "203.0.113.9"),
                udp_from("198.51.100.1", "198.51.100.1"),
                udp_from("192.0.2.1", "198.51.100.1"),
                udp_from("198.51.100.7", "203.0.113.9"),
            ],
        );
        lab.run();
        assert_eq!(
            lab.dropped(netbatch_stack::route::reason::LOCAL_SOURCE),
            4,
            "{mode:?} {dispatch:?}"
        );
        let fwd = lab.tx(1);
        assert_eq!(fwd.len(), 1, "only the host's own packet is forwarded");
        assert_eq!(&fwd[0].bytes[26..30], &[198, 51, 100, 7]);
        assert!(lab.tx(0).is_empty(), "no answer to a martian");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// `frame` (Ethernet + IPv4 without options) with `opts` (a multiple of 4 bytes) after
/// its IPv4 header: IHL, total length and header checksum fixed (by etherparse).
fn with_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    assert!(opts.len().is_multiple_of(4));
    let mut f = frame[..34].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&frame[34..]);
    f[14] = 0x40 | (5 + opts.len() / 4) as u8;
    let total = u16::from_be_bytes([f[16], f[17]]) + opts.len() as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    frames::refresh_ip_checksum(&mut f);
    f
}

/// The IPv4 header of an Ethernet frame (options included), its checksum checked by
/// etherparse, an implementation independent of ours.
fn ip_header(f: &[u8]) -> Vec<u8> {
    let (h, _) = etherparse::Ipv4Header::from_slice(&f[14..]).expect("an IPv4 header");
    assert_eq!(
        h.header_checksum,
        h.calc_header_checksum(),
        "header checksum"
    );
    f[14..14 + h.header_len()].to_vec()
}

/// Record Route and Timestamp on a forwarded packet are processed as RFC 1812 5.3.13
/// asks and Linux does: our address on the outgoing interface (192.0.2.1) recorded and
/// the pointer advanced; the time (milliseconds since midnight UT, from the worker's
/// clock: replay and the lab run on UTC timestamps) recorded with it; a full timestamp
/// option counts its overflow; a full Record Route is forwarded as it is.
#[test]
fn record_route_and_timestamp_are_processed_when_forwarding() {
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&router(Gro::Off), mode, dispatch);
        let plain = udp_from("198.51.100.7", "203.0.113.9");
        // RR with two slots, then TS (address and time) with one slot, and a NOP.
        let opts = [
            7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, // RR
            68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, // TS, flag 1
            1, // NOP to the end of the header
        ];
        let full = [7, 7, 8, 10, 0, 0, 1, 68, 8, 9, 0x20, 0, 0, 0, 3, 0]; // both full
        lab.feed(
            0,
            [with_options(&plain, &opts), with_options(&plain, &full)],
        );
        lab.run();
        let ms = (lab.now() / 1_000_000 % 86_400_000) as u32;
        let out = lab.tx(1);
        assert_eq!(out.len(), 2, "{mode:?} {dispatch:?}");
        let h = ip_header(&out[0].bytes);
        assert_eq!(h[8], 63, "TTL decremented");
        let mut want = vec![7, 11, 8, 192, 0, 2, 1, 0, 0, 0, 0];
        want.extend_from_slice(&[68, 12, 13, 1, 192, 0, 2, 1]);
        want.extend_from_slice(&ms.to_be_bytes());
        want.push(1);
        assert_eq!(&h[20..], &want[..]);
        let h = ip_header(&out[1].bytes);
        assert_eq!(&h[20..27], &full[..7], "a full Record Route is left alone");
        assert_eq!(h[30], 0x30, "the timestamp overflow counted");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A loose source route through us to 203.0.113.9: dropped by default (Linux's
/// `accept_source_route = 0`); with it on, sent on to the listed address with our
/// outgoing address recorded in its slot (RFC 791). A strict route whose next address
/// is behind a gateway gets ICMP source route failed (type 3, code 5); a Record Route
/// whose pointer is below 4 gets a Parameter Problem pointing at the pointer (octet 22).
#[test]
fn source_routes_are_refused_or_honoured_and_bad_options_answered() {
    let lsrr = [131, 7, 4, 203, 0, 113, 9, 0];
    let ssrr = [137, 7, 4, 203, 0, 113, 9, 0];
    let bad_rr = [7, 7, 3, 0, 0, 0, 0, 0];
    let to_us = udp_from("198.51.100.7", "198.51.100.1");
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&router_knowing_h1(), mode, dispatch);
        lab.feed(
            0,
            [with_options(&to_us, &lsrr), with_options(&to_us, &ssrr)],
        );
        lab.run();
        assert_eq!(
            lab.dropped(netbatch_stack::ip4::input::reason::SOURCE_ROUTE),
            2
        );
        assert!(lab.tx(1).is_empty() && lab.tx(0).is_empty());
        lab.assert_conserved();
        lab.stop_and_check_pool();

        let mut spec = router_knowing_h1();
        spec.params.accept_source_route = true;
        let mut lab = Lab::new(&spec, mode, dispatch);
        lab.feed(
            0,
            [
                with_options(&to_us, &lsrr),
                with_options(&to_us, &ssrr),
                with_options(&udp_from("198.51.100.7", "203.0.113.9"), &bad_rr),
            ],
        );
        lab.run();
        let out = lab.tx(1);
        assert_eq!(
            out.len(),
            1,
            "{mode:?} {dispatch:?}: the loose route is followed"
        );
        let h = ip_header(&out[0].bytes);
        assert_eq!(&h[16..20], &[203, 0, 113, 9], "the next listed address");
        assert_eq!(&h[20..28], &[131, 7, 8, 192, 0, 2, 1, 0], "ours recorded");
        assert_eq!(h[8], 63);
        let back = lab.tx(0);
        assert_eq!(back.len(), 2, "two ICMP errors to the sender");
        let icmp: Vec<(u8, u8, u8)> = back
            .iter()
            .map(|f| {
                let m = frames::icmp(&f.bytes);
                (m[0], m[1], m[4])
            })
            .collect();
        assert!(icmp.contains(&(3, 5, 0)), "source route failed: {icmp:?}");
        assert!(
            icmp.contains(&(12, 0, 22)),
            "parameter problem at 22: {icmp:?}"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
