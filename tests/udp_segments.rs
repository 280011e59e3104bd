//! UDP sockets and segments, after the kernel selftests:
//! - receive (`udpgro.sh`, IPv4): a train of datagrams reaches a socket that asked for
//!   super-datagrams (`UDP_GRO`) as one, with its segment size, and any other socket as
//!   the original datagrams (re-segmented when fraglist GRO merged them);
//! - send (`udpgso.c`, the IPv4 rows of its table, MTU 1500 so MSS 1472): a send with a
//!   segment size leaves as the datagrams the table lists, or is refused.
//!
//! Frames are built and checked with etherparse.

use std::sync::{Arc, Mutex};

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use netbatch_engine::{Cx, Dispatch, Mode};
use netbatch_runtime::apps::App;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::set_ip_ident;
use netbatch_scenarios::{Gro, Lab, LabSpec, PEER, US, VARIANTS, ip, router};
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
            "203.0.113.5:9".parse().unwrap(),
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
