//! UDP sockets and segments, after the kernel selftests:
//! - receive (`udpgro.sh`, IPv4): a train of datagrams reaches a socket that asked for
//!   super-datagrams (`UDP_GRO`) as one, with its segment size, and any other socket as
//!   the original datagrams (re-segmented when fraglist GRO merged them);
//! - send (`udpgso.c`, the IPv4 rows of its table, MTU 1500 so MSS 1472): a send with a
//!   segment size leaves as the datagrams the table lists, or is refused;
//! - the same over IPv6 through a dual-stack router (`udpgro.sh -6`, the IPv6 rows of
//!   `udpgso.c`'s table, MSS 1452).
//!
//! Frames are built and checked with etherparse.

use std::sync::{Arc, Mutex};

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use netbatch_datapath::apps::App;
use netbatch_engine::{Cx, Dispatch, Mode};
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::set_ip_ident;
use netbatch_scenarios::{
    Gro, Lab, LabSpec, PEER, PEER6, US, US6, US26, VARIANTS, ip, ip6, router, router6,
};
use netbatch_stack::host::Host;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::output::{SendError, send};
use netbatch_stack::udp::socket::SocketId;

const MSS: usize = 1500 - 28;

/// The router with GRO mode `gro` ("off", "standard" or "fraglist") on eth0, and the
/// peer's MAC configured on eth0.
fn spec(gro: &str) -> LabSpec {
    let gro = match gro {
        "off" => Gro::Off,
        "standard" => Gro::Standard,
        "fraglist" => Gro::Fraglist,
        other => panic!("no GRO mode {other}"),
    };
    let mut spec = router(gro);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip("198.51.100.7"),
        mac: PEER,
    });
    spec
}

/// Datagram `n` of `len` payload bytes from the peer to our port 8000.
fn dgram(n: usize, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (n * 131 + i) as u8).collect();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv4([198, 51, 100, 7], [198, 51, 100, 1], 64)
        .udp(7000, 8000)
        .write(&mut v, &payload)
        .unwrap();
    set_ip_ident(&mut v, n as u16);
    v
}

/// Reads everything queued on `s`: per datagram read, (segment size, payload bytes).
fn read(lab: &mut Lab, s: SocketId) -> Vec<(u16, Vec<u8>)> {
    let mut got = Vec::new();
    lab.w
        .host
        .sockets
        .get(s)
        .unwrap()
        .recv_batch(&mut got, usize::MAX);
    let pool = lab.w.pool().clone();
    let mut out = Vec::new();
    for p in &got {
        let v = pool.get(p);
        let d = datagram(&v).expect("a datagram");
        let bytes: Vec<u8> = d.payload_parts(&pool).flatten().copied().collect();
        assert_eq!(d.payload_len(&pool), bytes.len());
        lab.w.acct.delivered += u64::from(d.segments);
        out.push((d.segment_size, bytes));
    }
    let mut c = pool.cache();
    c.free_all(&mut got);
    out
}

/// Ten datagrams of `seg` bytes (the last `last`), all in one GRO window, to a socket
/// with or without `UDP_GRO` behind a port with GRO mode `gro`.
fn receive(
    gro: &str,
    sock_gro: bool,
    mode: Mode,
    dispatch: Dispatch,
    seg: usize,
    window: bool,
) -> Vec<(u16, Vec<u8>)> {
    let mut lab = Lab::new(&spec(gro), mode, dispatch);
    let s = lab.w.host.sockets.bind(ip("0.0.0.0"), 8000, 64).unwrap();
    lab.w.host.sockets.get(s).unwrap().set_gro(sock_gro);
    let total: usize = 10 * 1472;
    let frames: Vec<Vec<u8>> = (0..total.div_ceil(seg))
        .map(|n| dgram(n, seg.min(total - n * seg)))
        .collect();
    if window {
        lab.feed(0, frames);
        lab.run();
    } else {
        // One datagram per poll: no two share a GRO window.
        for f in frames {
            lab.feed(0, [f]);
            lab.run();
        }
    }
    let got = read(&mut lab, s);
    lab.assert_conserved();
    lab.stop_and_check_pool();
    got
}

#[test]
fn udp_gro_sockets_get_one_super_datagram_others_get_datagrams() {
    let want_bytes: Vec<u8> = (0..10)
        .flat_map(|n| dgram(n, 1472)[42..].to_vec())
        .collect();
    for (mode, dispatch) in VARIANTS {
        for gro in ["standard", "fraglist"] {
            // "GRO" and "GRO chk cmsg": one datagram of 14,720 bytes, segment size 1472.
            let got = receive(gro, true, mode, dispatch, 1472, true);
            assert_eq!(got.len(), 1, "{gro} {mode:?}/{dispatch:?}");
            assert_eq!(got[0].0, 1472);
            assert_eq!(got[0].1, want_bytes);
            // "no GRO": separate windows give separate datagrams, no segment size.
            let got = receive(gro, true, mode, dispatch, 1472, false);
            assert_eq!(got.len(), 10);
            assert!(got.iter().all(|(s, b)| *s == 0 && b.len() == 1472));
            // A socket without UDP_GRO gets the datagrams (fraglist GRO merged them,
            // udp-input splits them again).
            let got = receive(gro, false, mode, dispatch, 1472, true);
            assert_eq!(got.len(), 10, "{gro} plain socket");
            assert!(got.iter().all(|(s, b)| *s == 0 && b.len() == 1472));
            assert_eq!(got.concat_bytes(), want_bytes);
        }
        // "GRO with custom segment size": 500-byte datagrams.
        let got = receive("standard", true, mode, dispatch, 500, true);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1.len()), (500, 14720));
    }
}

trait ConcatBytes {
    fn concat_bytes(&self) -> Vec<u8>;
}

impl ConcatBytes for Vec<(u16, Vec<u8>)> {
    fn concat_bytes(&self) -> Vec<u8> {
        self.iter().flat_map(|(_, b)| b.clone()).collect()
    }
}

/// An application that makes one send per poll from a list, recording each result.
struct Sender {
    sock: SocketId,
    sends: Vec<(usize, u16)>,
    results: Arc<Mutex<Vec<Result<u16, SendError>>>>,
}

impl App for Sender {
    fn name(&self) -> &str {
        "sender"
    }

    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize {
        let Some((len, seg)) = self.sends.pop() else {
            return 0;
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let r = send(
            host,
            cx,
            self.sock,
            "203.0.113.5:9".parse::<std::net::SocketAddr>().unwrap(),
            &payload,
            seg,
        );
        self.results.lock().unwrap().push(r);
        1
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Sends `len` bytes with segment size `seg`; returns the result and the payload
/// lengths of the frames that left, each frame checked (lengths, checksums, IDs).
fn send_case(mode: Mode, len: usize, seg: u16) -> (Result<u16, SendError>, Vec<usize>) {
    let mut lab = Lab::new(&spec("off"), mode, Dispatch::Buckets);
    let s = lab.w.host.sockets.bind(ip("192.0.2.1"), 4000, 8).unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    lab.w.apps.push(Box::new(Sender {
        sock: s,
        sends: vec![(len, seg)],
        results: results.clone(),
    }));
    lab.advance(1_000);
    lab.advance(1_000);
    let r = results.lock().unwrap()[0];
    let frames = lab.tx(1);
    let mut lens = Vec::new();
    let mut sent = Vec::new();
    let mut ids = Vec::new();
    for f in &frames {
        let p = SlicedPacket::from_ethernet(&f.bytes).expect("a valid frame");
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("IPv4")
        };
        let h = ip.header();
        assert_eq!(
            etherparse::Ipv4Header::from_slice(h.slice())
                .unwrap()
                .0
                .calc_header_checksum(),
            h.header_checksum()
        );
        ids.push(h.identification());
        if h.more_fragments() || h.fragments_offset().value() != 0 {
            // Fragments of one datagram (the send without a segment size).
            lens.push(ip.payload().payload.len());
            continue;
        }
        let Some(TransportSlice::Udp(u)) = &p.transport else {
            panic!("UDP")
        };
        assert_eq!(
            u.to_header()
                .calc_checksum_ipv4(&h.to_header(), u.payload())
                .unwrap(),
            u.checksum(),
            "UDP checksum"
        );
        lens.push(u.payload().len());
        sent.extend_from_slice(u.payload());
    }
    if r.is_ok() && sent.len() == len {
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(sent, want, "the segments carry the payload in order");
        for w in ids.windows(2) {
            assert_eq!(w[1], w[0].wrapping_add(1), "IP IDs increment");
        }
    }
    lab.assert_conserved();
    lab.stop_and_check_pool();
    (r, lens)
}

#[test]
fn udp_segment_sends_follow_the_udpgso_table() {
    let m = MSS;
    // (name, bytes sent, segment size, result, payload bytes of the frames that leave)
    type Case = (&'static str, usize, u16, Result<u16, SendError>, Vec<usize>);
    let cases: Vec<Case> = vec![
        ("no GSO 1 byte", 1, 0, Ok(1), vec![1]),
        ("no GSO MSS", m, 0, Ok(1), vec![m]),
        // The kernel test sets IP_PMTUDISC_DO and expects EMSGSIZE; netbatch sends
        // without DF, so the datagram leaves as two fragments (Linux's default).
        ("no GSO MSS+1", m + 1, 0, Ok(1), vec![1480, 1]),
        ("GSO = MSS, one segment", m, m as u16, Ok(1), vec![m]),
        ("GSO > MSS, fits one", m, m as u16 + 1, Ok(1), vec![m]),
        // The kernel falls back to a plain datagram here too, which its DF then refuses;
        // without DF it is fragmented, as above.
        (
            "GSO > MSS, one too long",
            m + 1,
            m as u16 + 2,
            Ok(1),
            vec![1480, 1],
        ),
        (
            "GSO > MTU",
            3 * m,
            m as u16 + 2,
            Err(SendError::SegmentTooLarge),
            vec![],
        ),
        ("GSO MSS+1", m + 1, m as u16, Ok(2), vec![m, 1]),
        ("GSO 2 x MSS", 2 * m, m as u16, Ok(2), vec![m, m]),
        ("GSO 2 x MSS + 1", 2 * m + 1, m as u16, Ok(3), vec![m, m, 1]),
        ("GSO max segments", 44 * m, m as u16, Ok(44), vec![m; 44]),
        (
            "GSO max bytes",
            65507,
            m as u16,
            Ok(45),
            [vec![m; 44], vec![739]].concat(),
        ),
        (
            "GSO max bytes + 1",
            65508,
            m as u16,
            Err(SendError::TooLong),
            vec![],
        ),
        ("GSO 1, 1 byte", 1, 1, Ok(1), vec![1]),
        ("GSO 1, 2 bytes", 2, 1, Ok(2), vec![1, 1]),
        ("GSO 2, 5 bytes", 5, 2, Ok(3), vec![2, 2, 1]),
        ("GSO 1, 128 bytes", 128, 1, Ok(128), vec![1; 128]),
        (
            "GSO 1, 129 bytes",
            129,
            1,
            Err(SendError::TooManySegments),
            vec![],
        ),
    ];
    for mode in [Mode::List, Mode::Packet] {
        for (name, len, seg, want, lens) in &cases {
            let (r, got) = send_case(mode, *len, *seg);
            assert_eq!(r, *want, "{name}");
            assert_eq!(&got, lens, "{name}");
        }
    }
}

/// What a socket on port 8000 got from a train: its reads (segment size, payload), the
/// drops by reason, and the GRO stage's `merged` and `coalesced` counters.
struct Delivery {
    reads: Vec<(u16, Vec<u8>)>,
    drops: std::collections::BTreeMap<&'static str, u64>,
    merged: u64,
    coalesced: u64,
}

/// Feeds `frames` in one GRO window to a socket on port 8000 (with `UDP_GRO` if
/// `sock_gro`) behind a port with GRO mode `gro`.
fn deliver(
    gro: &str,
    sock_gro: bool,
    mode: Mode,
    dispatch: Dispatch,
    frames: Vec<Vec<u8>>,
) -> Delivery {
    let mut lab = Lab::new(&spec(gro), mode, dispatch);
    let s = lab.w.host.sockets.bind(ip("0.0.0.0"), 8000, 64).unwrap();
    lab.w.host.sockets.get(s).unwrap().set_gro(sock_gro);
    lab.feed(0, frames);
    lab.run();
    let (merged, coalesced) = (lab.event("gro", "merged"), lab.event("gro", "coalesced"));
    let reads = read(&mut lab, s);
    let drops = lab.drops();
    lab.assert_conserved();
    lab.stop_and_check_pool();
    Delivery {
        reads,
        drops,
        merged,
        coalesced,
    }
}

/// The GRO kind for local UDP under `rx-gro-list` (`udp_gro_receive`: `is_flist` only
/// when no local socket asked for `UDP_GRO`), seen at the socket. Sockets only ever
/// receive standard super-datagrams whole (the kernel never gives a socket a fraglist
/// chain: `udp_unexpected_gso` splits it), so:
/// - a `UDP_GRO` socket under fraglist gets standard GRO: one super-datagram of the ten
///   1472-byte datagrams, segment size 1472 (a fraglist chain would reach it split);
/// - a plain socket under fraglist gets a fraglist chain (merged, then split before the
///   socket): ten datagrams, and GRO made one chain of them;
/// - a plain socket under standard GRO (`rx-udp-gro-forwarding`) gets no GRO at all (a
///   socket was found that did not ask, and there is no fraglist): ten datagrams, and
///   GRO merged nothing.
#[test]
fn udp_gro_socket_under_fraglist_gets_standard_gro() {
    let frames: Vec<Vec<u8>> = (0..10).map(|n| dgram(n, 1472)).collect();
    let want: Vec<u8> = frames.iter().flat_map(|f| f[42..].to_vec()).collect();
    for (mode, dispatch) in VARIANTS {
        let d = deliver("fraglist", true, mode, dispatch, frames.clone());
        let what = format!("{mode:?}/{dispatch:?}");
        assert_eq!(d.reads.len(), 1, "UDP_GRO socket, fraglist port, {what}");
        assert_eq!(d.reads[0].0, 1472, "{what}: segment size");
        assert_eq!(d.reads[0].1, want, "{what}");
        assert_eq!((d.merged, d.coalesced), (9, 1), "{what}");

        let d = deliver("fraglist", false, mode, dispatch, frames.clone());
        assert_eq!(d.reads.len(), 10, "plain socket, fraglist port, {what}");
        assert!(d.reads.iter().all(|(s, b)| *s == 0 && b.len() == 1472));
        assert_eq!(d.reads.concat_bytes(), want, "{what}");
        assert_eq!((d.merged, d.coalesced), (9, 1), "{what}: one chain");

        let d = deliver("standard", false, mode, dispatch, frames.clone());
        assert_eq!(d.reads.len(), 10, "plain socket, standard port, {what}");
        assert_eq!(d.reads.concat_bytes(), want, "{what}");
        assert_eq!((d.merged, d.coalesced), (0, 0), "{what}: no UDP GRO");
    }
}

/// Malformed datagrams in a train to a `UDP_GRO` socket (standard GRO) are never merged
/// (`udp_gro_receive_segment`) and meet their fate at the socket's input as without GRO
/// (RFC 768, as the kernel's `udp_rcv`). Ten 1472-byte datagrams, IDs 0…9:
/// - d2 has no checksum: not merged; delivered alone;
/// - d4's length field is 40 bytes beyond the IP payload: not merged; dropped
///   (`udp_bad_length`);
/// - d7's length field says 1000 of its 1472 bytes: not merged; delivered trimmed to
///   1000 bytes (its checksum covers those).
///
/// The others merge in runs: d0+d1, d3 (alone: d4 ends it), d5+d6, d8+d9. netbatch
/// completes a held train before passing an unmergeable datagram of its flow (the kernel
/// lets that datagram overtake it), so the reads are in sending order.
#[test]
fn malformed_datagrams_are_not_merged_and_meet_their_fate() {
    let mut frames: Vec<Vec<u8>> = (0..10).map(|n| dgram(n, 1472)).collect();
    frames[2][40..42].copy_from_slice(&[0, 0]);
    frames[4][38..40].copy_from_slice(&(1480u16 + 40).to_be_bytes());
    // d7: a datagram of 1000 bytes (etherparse's length and checksum) with 472 bytes
    // after it inside the IP packet.
    let mut d7 = dgram(7, 1000);
    d7.extend_from_slice(&[0xee; 472]);
    d7[16..18].copy_from_slice(&(20u16 + 8 + 1472).to_be_bytes());
    set_ip_ident(&mut d7, 7);
    frames[7] = d7;
    let payload = |n: usize, len: usize| frames[n][42..42 + len].to_vec();
    let two = |a: usize| [payload(a, 1472), payload(a + 1, 1472)].concat();
    let want: Vec<(u16, Vec<u8>)> = vec![
        (1472, two(0)),
        (0, payload(2, 1472)),
        (0, payload(3, 1472)),
        (1472, two(5)),
        (0, payload(7, 1000)),
        (1472, two(8)),
    ];
    for (mode, dispatch) in VARIANTS {
        let d = deliver("standard", true, mode, dispatch, frames.clone());
        let what = format!("{mode:?}/{dispatch:?}");
        assert_eq!(d.reads, want, "{what}");
        assert_eq!(d.drops.get("udp_bad_length"), Some(&1), "{what}");
        assert_eq!(d.drops.values().sum::<u64>(), 1, "{what}: {:?}", d.drops);
        assert_eq!((d.merged, d.coalesced), (3, 3), "{what}");
    }
}

// IPv6.

const MSS6: usize = 1500 - 48;

/// [`spec`] dual-stack: the peer's IPv6 address a static neighbour on eth0.
fn spec6(gro: &str) -> LabSpec {
    let gro = match gro {
        "off" => Gro::Off,
        "standard" => Gro::Standard,
        "fraglist" => Gro::Fraglist,
        other => panic!("no GRO mode {other}"),
    };
    let mut spec = router6(gro);
    spec.neighbours6
        .push(netbatch_runtime::setup::StaticNeighbour6 {
            iface: 0,
            ip: ip6(PEER6),
            mac: PEER,
        });
    spec
}

/// Datagram `n` of `len` payload bytes from the peer to our port 8000, over IPv6.
fn dgram6(n: usize, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (n * 131 + i) as u8).collect();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv6(ip6(PEER6).octets(), ip6(US6).octets(), 64)
        .udp(7000, 8000)
        .write(&mut v, &payload)
        .unwrap();
    v
}

/// Feeds `frames` to a socket bound to `[::]:8000` (with `UDP_GRO` if `sock_gro`)
/// behind a port with GRO mode `gro`, in one GRO window (`window`) or one per poll.
fn deliver6(
    gro: &str,
    sock_gro: bool,
    (mode, dispatch): (Mode, Dispatch),
    frames: Vec<Vec<u8>>,
    window: bool,
) -> Delivery {
    let mut lab = Lab::new(&spec6(gro), mode, dispatch);
    let s = lab
        .w
        .host
        .sockets
        .bind(std::net::Ipv6Addr::UNSPECIFIED, 8000, 64)
        .unwrap();
    lab.w.host.sockets.get(s).unwrap().set_gro(sock_gro);
    if window {
        lab.feed(0, frames);
        lab.run();
    } else {
        for f in frames {
            lab.feed(0, [f]);
            lab.run();
        }
    }
    let (merged, coalesced) = (lab.event("gro", "merged"), lab.event("gro", "coalesced"));
    let reads = read(&mut lab, s);
    let drops = lab.drops();
    lab.assert_conserved();
    lab.stop_and_check_pool();
    Delivery {
        reads,
        drops,
        merged,
        coalesced,
    }
}

/// `udpgro.sh -6`: ten 1452-byte datagrams in one window reach a `UDP_GRO` socket as one
/// super-datagram (segment size 1452), standard and fraglist ports alike (a `UDP_GRO`
/// socket gets standard GRO under `rx-gro-list`); in separate windows as ten datagrams;
/// a plain socket gets the ten datagrams (a fraglist chain split again before it, no
/// GRO at all on a standard port); and 500-byte datagrams give segment size 500.
#[test]
fn udp_gro_sockets_over_ipv6() {
    let frames: Vec<Vec<u8>> = (0..10).map(|n| dgram6(n, MSS6)).collect();
    let want: Vec<u8> = frames.iter().flat_map(|f| f[62..].to_vec()).collect();
    for v in VARIANTS {
        for gro in ["standard", "fraglist"] {
            let what = format!("{gro} {v:?}");
            let d = deliver6(gro, true, v, frames.clone(), true);
            assert_eq!(d.reads.len(), 1, "{what}: one super-datagram");
            assert_eq!(d.reads[0].0, MSS6 as u16, "{what}: segment size");
            assert_eq!(d.reads[0].1, want, "{what}");
            assert_eq!((d.merged, d.coalesced), (9, 1), "{what}");
            let d = deliver6(gro, true, v, frames.clone(), false);
            assert_eq!(d.reads.len(), 10, "{what}: separate windows");
            assert!(d.reads.iter().all(|(s, b)| *s == 0 && b.len() == MSS6));
            let d = deliver6(gro, false, v, frames.clone(), true);
            assert_eq!(d.reads.len(), 10, "{what}: plain socket");
            assert!(d.reads.iter().all(|(s, b)| *s == 0 && b.len() == MSS6));
            assert_eq!(d.reads.concat_bytes(), want, "{what}");
            let chains = u64::from(gro == "fraglist");
            assert_eq!((d.merged, d.coalesced), (9 * chains, chains), "{what}");
        }
        let small: Vec<Vec<u8>> = (0..10).map(|n| dgram6(n, 500)).collect();
        let d = deliver6("standard", true, v, small, true);
        assert_eq!(d.reads.len(), 1);
        assert_eq!((d.reads[0].0, d.reads[0].1.len()), (500, 5000));
    }
}

/// Malformed datagrams in an IPv6 train to a `UDP_GRO` socket are never merged and meet
/// their fate at `udp6-input` as without GRO. Ten 1452-byte datagrams:
/// - d2 has no checksum: not merged; dropped (`udp6_zero_checksum`, RFC 8200 8.1);
/// - d4's length field is 40 bytes beyond the payload: not merged; dropped
///   (`udp_bad_length`);
/// - d7's length field says 1000 of its 1452 bytes: not merged; delivered trimmed.
///
/// The others merge in runs: d0+d1, d3 (alone), d5+d6, d8+d9.
#[test]
fn malformed_ipv6_datagrams_are_not_merged_and_meet_their_fate() {
    let mut frames: Vec<Vec<u8>> = (0..10).map(|n| dgram6(n, MSS6)).collect();
    frames[2][60..62].copy_from_slice(&[0, 0]);
    frames[4][58..60].copy_from_slice(&(1460u16 + 40).to_be_bytes());
    let mut d7 = dgram6(7, 1000);
    d7.extend_from_slice(&[0xee; MSS6 - 1000]);
    d7[18..20].copy_from_slice(&(8 + MSS6 as u16).to_be_bytes());
    frames[7] = d7;
    let payload = |n: usize, len: usize| frames[n][62..62 + len].to_vec();
    let two = |a: usize| [payload(a, MSS6), payload(a + 1, MSS6)].concat();
    let want: Vec<(u16, Vec<u8>)> = vec![
        (MSS6 as u16, two(0)),
        (0, payload(3, MSS6)),
        (MSS6 as u16, two(5)),
        (0, payload(7, 1000)),
        (MSS6 as u16, two(8)),
    ];
    for v in VARIANTS {
        let d = deliver6("standard", true, v, frames.clone(), true);
        let what = format!("{v:?}");
        assert_eq!(d.reads, want, "{what}");
        assert_eq!(d.drops.get("udp6_zero_checksum"), Some(&1), "{what}");
        assert_eq!(d.drops.get("udp_bad_length"), Some(&1), "{what}");
        assert_eq!(d.drops.values().sum::<u64>(), 2, "{what}: {:?}", d.drops);
        assert_eq!((d.merged, d.coalesced), (3, 3), "{what}");
    }
}

/// Sends `len` bytes with segment size `seg` from `[2001:db8:200::1]:4000` to
/// `[2001:db8:300::5]:9` (via eth1); returns the result, the payload lengths of the
/// frames that left (each checked by etherparse: lengths, UDP checksum, hop limit 64)
/// and the drops.
fn send6_case(
    mode: Mode,
    len: usize,
    seg: u16,
) -> (
    Result<u16, SendError>,
    Vec<usize>,
    std::collections::BTreeMap<&'static str, u64>,
) {
    let mut lab = Lab::new(&spec6("off"), mode, Dispatch::Buckets);
    let s = lab.w.host.sockets.bind(ip6(US26), 4000, 8).unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    lab.w.apps.push(Box::new(Sender6 {
        sock: s,
        sends: vec![(len, seg)],
        results: results.clone(),
    }));
    lab.advance(1_000);
    lab.advance(1_000);
    let r = results.lock().unwrap()[0];
    let mut lens = Vec::new();
    let mut sent = Vec::new();
    for f in lab.tx(1) {
        let p = SlicedPacket::from_ethernet(&f.bytes).expect("a valid frame");
        let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else {
            panic!("IPv6")
        };
        let h = ip.header();
        assert_eq!(h.hop_limit(), 64);
        assert_eq!(
            usize::from(h.payload_length()),
            f.bytes.len() - 54,
            "payload length"
        );
        let Some(TransportSlice::Udp(u)) = &p.transport else {
            panic!("UDP")
        };
        assert_eq!(
            u.to_header()
                .calc_checksum_ipv6(&h.to_header(), u.payload())
                .unwrap(),
            u.checksum(),
            "UDP checksum"
        );
        assert_eq!(usize::from(u.length()), 8 + u.payload().len(), "UDP length");
        lens.push(u.payload().len());
        sent.extend_from_slice(u.payload());
    }
    if r.is_ok() && sent.len() == len {
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(sent, want, "the segments carry the payload in order");
    }
    let drops = lab.drops();
    lab.assert_conserved();
    lab.stop_and_check_pool();
    (r, lens, drops)
}

/// As [`Sender`], to an IPv6 destination.
struct Sender6 {
    sock: SocketId,
    sends: Vec<(usize, u16)>,
    results: Arc<Mutex<Vec<Result<u16, SendError>>>>,
}

impl App for Sender6 {
    fn name(&self) -> &str {
        "sender6"
    }

    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize {
        let Some((len, seg)) = self.sends.pop() else {
            return 0;
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let dst: std::net::SocketAddr = "[2001:db8:300::5]:9".parse().unwrap();
        let r = send(host, cx, self.sock, dst, &payload, seg);
        self.results.lock().unwrap().push(r);
        1
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// The IPv6 rows of `udpgso.c`'s table (MSS 1452). Where netbatch differs it says so: a
/// datagram too large for the MTU is refused by the kernel at the socket (`EMSGSIZE`,
/// the test sets `IPV6_PMTUDISC_DO`), while netbatch accepts the send and drops the
/// datagram at output (`ip6_local_too_big`, a router never fragments and netbatch's
/// sockets do not either); and netbatch's byte limit is one for both families (65,507),
/// 20 bytes above the kernel's IPv6 one (65,535 less the 48 header bytes).
#[test]
fn udp_segment_sends_over_ipv6_follow_the_udpgso_table() {
    let m = MSS6;
    let too_big = Some("ip6_local_too_big");
    // (name, bytes sent, segment size, result, payload bytes of the frames that leave,
    // the drop at output)
    type Case = (
        &'static str,
        usize,
        u16,
        Result<u16, SendError>,
        Vec<usize>,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("no GSO 1 byte", 1, 0, Ok(1), vec![1], None),
        ("no GSO MSS", m, 0, Ok(1), vec![m], None),
        ("no GSO MSS+1", m + 1, 0, Ok(1), vec![], too_big),
        ("GSO = MSS, one segment", m, m as u16, Ok(1), vec![m], None),
        ("GSO > MSS, fits one", m, m as u16 + 1, Ok(1), vec![m], None),
        // The kernel falls back to a plain datagram, which is too large (above).
        (
            "GSO > MSS, one too long",
            m + 1,
            m as u16 + 2,
            Ok(1),
            vec![],
            too_big,
        ),
        ("GSO MSS+1", m + 1, m as u16, Ok(2), vec![m, 1], None),
        ("GSO 2 x MSS", 2 * m, m as u16, Ok(2), vec![m, m], None),
        (
            "GSO 2 x MSS + 1",
            2 * m + 1,
            m as u16,
            Ok(3),
            vec![m, m, 1],
            None,
        ),
        (
            "GSO > MTU",
            3 * m,
            m as u16 + 1,
            Err(SendError::SegmentTooLarge),
            vec![],
            None,
        ),
        (
            "GSO max segments",
            45 * m,
            m as u16,
            Ok(45),
            vec![m; 45],
            None,
        ),
        (
            "GSO max bytes",
            65535 - 48,
            m as u16,
            Ok(46),
            [vec![m; 45], vec![147]].concat(),
            None,
        ),
        ("GSO 1, 1 byte", 1, 1, Ok(1), vec![1], None),
        ("GSO 1, 2 bytes", 2, 1, Ok(2), vec![1, 1], None),
        ("GSO 2, 5 bytes", 5, 2, Ok(3), vec![2, 2, 1], None),
        ("GSO 1, 128 bytes", 128, 1, Ok(128), vec![1; 128], None),
        (
            "GSO 1, 129 bytes",
            129,
            1,
            Err(SendError::TooManySegments),
            vec![],
            None,
        ),
        (
            "GSO netbatch's max bytes + 1",
            65508,
            m as u16,
            Err(SendError::TooLong),
            vec![],
            None,
        ),
    ];
    for mode in [Mode::List, Mode::Packet] {
        for (name, len, seg, want, lens, drop) in &cases {
            let (r, got, drops) = send6_case(mode, *len, *seg);
            assert_eq!(r, *want, "{name}");
            assert_eq!(&got, lens, "{name}");
            match drop {
                Some(d) => assert_eq!(drops.get(d), Some(&1), "{name}: {drops:?}"),
                None => assert!(drops.is_empty(), "{name}: {drops:?}"),
            }
        }
    }
}
