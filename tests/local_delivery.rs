//! Local delivery under mixed good and malformed traffic, in per-packet and list mode with
//! both dispatch strategies: every packet accounted for, each malformed one dropped for
//! its own reason, the same deliveries in the same per-flow order everywhere.

use std::collections::BTreeMap;

use netbatch_engine::DropReason;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::{self, parse};
use netbatch_scenarios::{Lab, LabSpec, PEER, US, VARIANTS, ip, port};
use netbatch_stack::host::HostParams;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::SocketId;
use netbatch_stack::{GraphOptions, host::Host};
use netbatch_wire::ethernet::MacAddr;

const OTHER: MacAddr = MacAddr([2, 0, 0, 0, 0, 3]);

fn spec() -> LabSpec {
    LabSpec {
        ports: vec![port("eth0", US, "198.51.100.1/24")],
        routes: vec![],
        neighbours: vec![StaticNeighbour {
            iface: 0,
            ip: ip("198.51.100.7"),
            mac: PEER,
        }],
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

fn bind(h: &mut Host) -> (SocketId, SocketId) {
    let a = h.sockets.bind(ip("0.0.0.0"), 5001, 1000).unwrap();
    let b = h.sockets.bind(ip("198.51.100.1"), 5002, 3).unwrap();
    (a, b)
}

fn good(sport: u16, dport: u16, seq: u8) -> Vec<u8> {
    frames::udp(
        PEER,
        US,
        "198.51.100.7",
        "198.51.100.1",
        sport,
        dport,
        64,
        &[sport as u8, seq],
    )
}

/// The traffic: good datagrams of three flows to 5001 interleaved with one malformed or
/// undeliverable frame of each kind, and five datagrams to a socket that holds three.
/// Returns the frames and the drops they must cause.
fn traffic() -> (Vec<Vec<u8>>, BTreeMap<&'static str, u64>) {
    let mut bad: Vec<(Vec<u8>, Option<DropReason>)> = Vec::new();
    bad.push((vec![0u8; 10], Some(DropReason::L2Truncated)));
    let mut f = good(9, 5001, 0);
    f.truncate(14 + 10);
    bad.push((f, Some(DropReason::Ip4Truncated)));
    let mut f = good(9, 5001, 0);
    f[24] ^= 0xff;
    bad.push((f, Some(DropReason::Ip4Checksum)));
    let mut f = good(9, 5001, 0);
    f[16..18].copy_from_slice(&200u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(DropReason::Ip4TotalLenLong)));
    let mut f = good(9, 5001, 0);
    f[16..18].copy_from_slice(&12u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(DropReason::Ip4TotalLenShort)));
    let mut f = good(9, 5001, 0);
    f[14] = 0x65;
    bad.push((f, Some(DropReason::Ip4Version)));
    let mut f = good(9, 5001, 0);
    f[14] = 0x44;
    bad.push((f, Some(DropReason::Ip4HeaderLen)));
    let mut f = good(9, 5001, 0);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    bad.push((f, Some(DropReason::L2UnknownEtherType)));
    let mut f = good(9, 5001, 0);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    bad.push((f, Some(DropReason::Ip6Unsupported)));
    bad.push((
        frames::udp(
            PEER,
            OTHER,
            "198.51.100.7",
            "198.51.100.1",
            9,
            5001,
            64,
            b"x",
        ),
        Some(DropReason::L2OtherHost),
    ));
    let mut f = good(9, 5001, 0);
    let last = f.len() - 1;
    f[last] ^= 0x55;
    bad.push((f, Some(DropReason::UdpChecksum)));
    let mut f = good(9, 5001, 0);
    f[38..40].copy_from_slice(&100u16.to_be_bytes());
    bad.push((f, Some(DropReason::UdpBadLength)));
    // Answered with ICMP errors in their own buffers: not drops.
    bad.push((good(9, 6000, 0), None));
    bad.push((
        frames::udp(PEER, US, "198.51.100.7", "203.0.113.9", 9, 5001, 64, b"x"),
        None,
    ));
    bad.push((
        frames::udp(PEER, US, "127.0.0.1", "198.51.100.1", 9, 5001, 64, b"x"),
        Some(DropReason::Ip4MartianSource),
    ));
    bad.push((
        frames::udp(
            PEER,
            MacAddr::BROADCAST,
            "198.51.100.7",
            "198.51.100.255",
            9,
            6000,
            64,
            b"x",
        ),
        Some(DropReason::NoSocket),
    ));
    let mut f = good(9, 5001, 0);
    f[20] = 0x20; // more fragments
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(DropReason::Ip4FragReassembly)));
    let mut f = good(9, 5001, 0);
    f[23] = 47; // GRE: no handler, answered with protocol unreachable
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, None));
    bad.push((
        frames::echo_request(PEER, US, "198.51.100.7", "198.51.100.1", 7, 1, 64, b"ping"),
        None,
    ));

    let mut out = Vec::new();
    let mut want = BTreeMap::new();
    let mut seq = [0u8; 3];
    let mut bad = bad.into_iter();
    for i in 0..60 {
        let flow = i % 3;
        out.push(good(1000 + flow as u16, 5001, seq[flow]));
        seq[flow] += 1;
        if i % 3 == 2
            && let Some((f, r)) = bad.next()
        {
            out.push(f);
            if let Some(r) = r {
                *want.entry(r.name()).or_insert(0) += 1;
            }
        }
    }
    for (f, r) in bad {
        out.push(f);
        if let Some(r) = r {
            *want.entry(r.name()).or_insert(0) += 1;
        }
    }
    for s in 0..5 {
        out.push(good(2000, 5002, s));
    }
    *want.entry(DropReason::SocketQueueFull.name()).or_insert(0) += 2;
    (out, want)
}

/// Per flow (source port), payload sequence numbers in the order read.
type Flows = BTreeMap<u16, Vec<u8>>;

/// Per flow (source port), the payload sequence numbers read from a socket, in order.
fn read_socket(lab: &mut Lab, s: SocketId) -> Flows {
    let mut got = Vec::new();
    lab.w
        .host
        .sockets
        .get(s)
        .unwrap()
        .recv_batch(&mut got, usize::MAX);
    let mut m: Flows = BTreeMap::new();
    for p in &got {
        let d = datagram(&lab.w.pool().get(p)).expect("a datagram");
        m.entry(d.src_port).or_default().push(d.payload[1]);
    }
    // They were read by the application: delivered.
    lab.w.acct.delivered += got.len() as u64;
    let pool = lab.w.pool().clone();
    let mut c = pool.cache();
    c.free_all(&mut got);
    m
}

#[test]
fn every_packet_is_accounted_for_in_every_mode() {
    let (input, want_drops) = traffic();
    let mut reference: Option<(Flows, Flows)> = None;
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&spec(), mode, dispatch);
        let (a, b) = bind(&mut lab.w.host);
        lab.feed(0, input.clone());
        lab.run();
        let what = format!("{mode:?}/{dispatch:?}");

        assert_eq!(lab.w.acct.rx, input.len() as u64, "{what}");
        assert_eq!(lab.drops(), want_drops, "{what}: drop reasons");
        lab.assert_conserved();
        // 60 + 3 datagrams wait in sockets; four packets left as their own answers.
        assert_eq!(lab.w.held(), 63, "{what}");
        assert_eq!(lab.w.acct.delivered, 0, "{what}");
        assert_eq!(lab.w.acct.originated, 0, "{what}");
        let acct = lab.w.acct;
        assert_eq!(
            acct.rx,
            acct.tx + acct.delivered + acct.dropped + lab.w.held(),
            "{what}: with nothing originated, rx = tx + delivered + dropped + held"
        );

        // Port unreachable, net unreachable, protocol unreachable and the echo reply, all
        // to the peer, and counted by the ICMP error stage per cause.
        let tx = lab.tx(0);
        assert_eq!(lab.w.acct.tx, 4, "{what}");
        let sent: Vec<(&str, u64)> = lab
            .w
            .snapshot()
            .iter()
            .find(|n| n.name == "ip4-icmp-error")
            .unwrap()
            .events
            .clone();
        assert_eq!(
            sent,
            vec![
                ("sent_no_route", 1),
                ("sent_unknown_protocol", 1),
                ("sent_no_socket", 1)
            ],
            "{what}"
        );
        let mut kinds: Vec<(u8, u8)> = tx
            .iter()
            .map(|f| {
                let p = parse(&f.bytes);
                assert_eq!(&f.bytes[0..6], &PEER.0, "to the peer");
                assert_eq!(&f.bytes[6..12], &US.0, "from us");
                match p.transport {
                    Some(etherparse::TransportSlice::Icmpv4(i)) => {
                        let b = i.slice();
                        (b[0], b[1])
                    }
                    other => panic!("{what}: unexpected frame {other:?}"),
                }
            })
            .collect();
        kinds.sort();
        assert_eq!(kinds, vec![(0, 0), (3, 0), (3, 2), (3, 3)], "{what}");

        let flows = read_socket(&mut lab, a);
        let small = read_socket(&mut lab, b);
        for (port, seqs) in &flows {
            assert_eq!(
                seqs,
                &(0..20).collect::<Vec<u8>>(),
                "{what}: flow {port} in order, complete"
            );
        }
        assert_eq!(
            small.get(&2000),
            Some(&vec![0, 1, 2]),
            "{what}: the queue kept the first three"
        );
        match &reference {
            None => reference = Some((flows, small)),
            Some((f, s)) => {
                assert_eq!(&flows, f, "{what}: same deliveries as the first variant");
                assert_eq!(&small, s, "{what}");
            }
        }
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// The ICMP errors quote the offending datagram (RFC 792: its IP header and at least
/// the first 8 bytes of its payload) and come from the interface's address.
#[test]
fn port_unreachable_quotes_the_datagram() {
    let mut lab = Lab::new(
        &spec(),
        netbatch_engine::Mode::List,
        netbatch_engine::Dispatch::Buckets,
    );
    let sent = good(4321, 6000, 9);
    lab.feed(0, [sent.clone()]);
    lab.run();
    let tx = lab.tx(0);
    assert_eq!(tx.len(), 1);
    let p = parse(&tx[0].bytes);
    let Some(etherparse::NetSlice::Ipv4(ipv4)) = &p.net else {
        panic!("not IPv4")
    };
    let h = ipv4.header().to_header();
    assert_eq!(h.source, ip("198.51.100.1").octets());
    assert_eq!(h.destination, ip("198.51.100.7").octets());
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let b = frames::icmp(&tx[0].bytes);
    assert_eq!((b[0], b[1]), (3, 3));
    // The quote is the whole original IP datagram (it is short).
    assert_eq!(&b[8..], &sent[14..]);
    // ICMP checksum over the message, checked by etherparse.
    let (hdr, _) = etherparse::Icmpv4Header::from_slice(b).unwrap();
    assert_eq!(hdr.checksum, hdr.icmp_type.calc_checksum(&b[8..]));
    lab.stop_and_check_pool();
}
