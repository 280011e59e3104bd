//! Local delivery under mixed good and malformed traffic, in per-packet and list mode with
//! both dispatch strategies: every packet accounted for, each malformed one dropped for
//! its own reason, the same deliveries in the same per-flow order everywhere.

use std::collections::BTreeMap;

use netbatch_engine::Reason;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::frames::{self, parse};
use netbatch_scenarios::{Lab, LabSpec, PEER, US, US2, VARIANTS, ip, port};
use netbatch_stack::host::HostParams;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::SocketId;
use netbatch_stack::{GraphOptions, host::Host};
use netbatch_wire::ethernet::MacAddr;

const OTHER: MacAddr = MacAddr([2, 0, 0, 0, 0, 3]);

fn spec() -> LabSpec {
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
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
    let mut bad: Vec<(Vec<u8>, Option<Reason>)> = Vec::new();
    bad.push((
        vec![0u8; 10],
        Some(netbatch_stack::l2::input::reason::TRUNCATED),
    ));
    let mut f = good(9, 5001, 0);
    f.truncate(14 + 10);
    bad.push((f, Some(netbatch_stack::ip4::input::reason::TRUNCATED)));
    let mut f = good(9, 5001, 0);
    f[24] ^= 0xff;
    bad.push((f, Some(netbatch_stack::ip4::input::reason::CHECKSUM)));
    let mut f = good(9, 5001, 0);
    f[16..18].copy_from_slice(&200u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(netbatch_stack::ip4::input::reason::TOTAL_LEN_LONG)));
    let mut f = good(9, 5001, 0);
    f[16..18].copy_from_slice(&12u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(netbatch_stack::ip4::input::reason::TOTAL_LEN_SHORT)));
    let mut f = good(9, 5001, 0);
    f[14] = 0x65;
    bad.push((f, Some(netbatch_stack::ip4::input::reason::VERSION)));
    let mut f = good(9, 5001, 0);
    f[14] = 0x44;
    bad.push((f, Some(netbatch_stack::ip4::input::reason::HEADER_LEN)));
    let mut f = good(9, 5001, 0);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    bad.push((
        f,
        Some(netbatch_stack::l2::input::reason::UNKNOWN_ETHERTYPE),
    ));
    let mut f = good(9, 5001, 0);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    bad.push((f, Some(netbatch_stack::ip6::input::reason::TRUNCATED)));
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
        Some(netbatch_stack::l2::input::reason::OTHER_HOST),
    ));
    let mut f = good(9, 5001, 0);
    let last = f.len() - 1;
    f[last] ^= 0x55;
    bad.push((f, Some(netbatch_stack::udp::input::reason::CHECKSUM)));
    let mut f = good(9, 5001, 0);
    f[38..40].copy_from_slice(&100u16.to_be_bytes());
    bad.push((f, Some(netbatch_stack::udp::input::reason::BAD_LENGTH)));
    // Answered with ICMP errors in their own buffers: not drops.
    bad.push((good(9, 6000, 0), None));
    bad.push((
        frames::udp(PEER, US, "198.51.100.7", "203.0.113.9", 9, 5001, 64, b"x"),
        None,
    ));
    bad.push((
        frames::udp(PEER, US, "127.0.0.1", "198.51.100.1", 9, 5001, 64, b"x"),
        Some(netbatch_stack::ip4::input::reason::MARTIAN_SOURCE),
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
        Some(netbatch_stack::udp::input::reason::NO_SOCKET),
    ));
    let mut f = good(9, 5001, 0);
    f[20] = 0x20; // more fragments
    frames::refresh_ip_checksum(&mut f);
    bad.push((f, Some(netbatch_stack::defrag::reason::BAD_LENGTH)));
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
    *want
        .entry(netbatch_stack::udp::input::reason::QUEUE_FULL.name())
        .or_insert(0) += 2;
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

// ---------------------------------------------------------------------------------------
// L2 demux: VLAN sub-interfaces, malformed tag stacks, source and destination MACs.

/// Inserts VLAN tags (TPID, TCI; outermost first), written by hand, after the MAC
/// addresses of an untagged Ethernet II frame.
fn tagged(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    for &(tpid, tci) in tags {
        v.extend_from_slice(&tpid.to_be_bytes());
        v.extend_from_slice(&tci.to_be_bytes());
    }
    v.extend_from_slice(&frame[12..]);
    v
}

const DOT1Q: u16 = 0x8100;
const DOT1AD: u16 = 0x88a8;

/// eth0 (`US`): untagged 198.51.100.1/24, VLAN 100 10.100.0.1/24, S-VLAN 200 + C-VLAN
/// 300 10.200.0.1/24; eth1 (`US2`): no untagged interface, VLAN 5 10.5.0.1/24. The peer
/// `PEER` is a static neighbour on each of eth0's interfaces.
fn vlan_spec() -> LabSpec {
    use netbatch_runtime::setup::{IfaceSetup, PortSetup};
    use netbatch_stack::iface::Tags;
    let vlan = |name: &str, tags, addr: &str| IfaceSetup {
        addrs6: Vec::new(),
        name: name.into(),
        tags,
        addrs: vec![addr.parse().expect("address")],
    };
    let mut eth0 = port("eth0", US, "198.51.100.1/24");
    eth0.vlans
        .push(vlan("eth0.100", Tags::Dot1q(100), "10.100.0.1/24"));
    eth0.vlans
        .push(vlan("eth0.200.300", Tags::QinQ(200, 300), "10.200.0.1/24"));
    let eth1 = PortSetup {
        addrs: None,
        vlans: vec![vlan("eth1.5", Tags::Dot1q(5), "10.5.0.1/24")],
        ..port("eth1", US2, "192.0.2.1/24")
    };
    let n = |iface, a: &str| StaticNeighbour {
        iface,
        ip: ip(a),
        mac: PEER,
    };
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: vec![eth0, eth1],
        routes: vec![],
        // Interfaces in order: eth0 (0), eth0.100 (1), eth0.200.300 (2), eth1.5 (3).
        neighbours: vec![n(0, "198.51.100.7"), n(1, "10.100.0.7"), n(2, "10.200.0.7")],
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

/// Frames to configured VLANs reach their sub-interface (datagrams delivered, echo
/// requests answered from that sub-interface with its tags: the reply's tags checked with
/// etherparse and by hand); a priority tag (VID 0) is the untagged interface. Each bad
/// tag stack or MAC is dropped for its own reason: unknown VID, known S-VLAN with an
/// unknown C-VLAN, untagged on a port without an untagged interface (unknown VLAN), three
/// tags (too deep), cut inside the first or the second tag (truncated), multicast or
/// broadcast source MAC, another host's destination MAC (also when tagged).
#[test]
fn vlan_demux_and_l2_drop_reasons() {
    let peer_u = |dst: &str, dport: u16, tag: u8| {
        frames::udp(PEER, US, "198.51.100.7", dst, 7, dport, 64, &[tag])
    };
    let v100 = |dport: u16, tag: u8| {
        frames::udp(PEER, US, "10.100.0.7", "10.100.0.1", 7, dport, 64, &[tag])
    };
    let v200 = |dport: u16, tag: u8| {
        frames::udp(PEER, US, "10.200.0.7", "10.200.0.1", 7, dport, 64, &[tag])
    };
    let qinq = [(DOT1AD, 200), (DOT1Q, 300)];
    // Cut inside the tag: MACs, TPID, then only the TCI (16 bytes; an Ethernet header
    // is 14, so only the tag is short).
    let mut cut1 = v100(5001, 0)[..12].to_vec();
    cut1.extend_from_slice(&[0x81, 0x00, 0x00, 100]);
    // Cut inside the second tag: a whole S-tag, then the C-tag's TPID only (20 bytes).
    let mut cut2 = v200(5001, 0)[..12].to_vec();
    cut2.extend_from_slice(&[0x88, 0xa8, 0x00, 200, 0x81, 0x00, 0x01]);
    cut2.push(0x2c);
    let mut mcast_src = peer_u("198.51.100.1", 5001, 0);
    mcast_src[6..12].copy_from_slice(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
    let mut bcast_src = peer_u("198.51.100.1", 5001, 0);
    bcast_src[6..12].copy_from_slice(&[0xff; 6]);
    let mut other = tagged(&v100(5001, 0), &[(DOT1Q, 100)]);
    other[..6].copy_from_slice(&OTHER.0);

    let eth0 = vec![
        (tagged(&v100(5001, 1), &[(DOT1Q, 100)]), None),
        (tagged(&v200(5001, 2), &qinq), None),
        // Priority-tagged (PCP 5, VID 0): the untagged interface.
        (
            tagged(&peer_u("198.51.100.1", 5001, 3), &[(DOT1Q, 0xa000)]),
            None,
        ),
        // The same VID with PCP bits set is still VLAN 100.
        (tagged(&v100(5001, 4), &[(DOT1Q, 0xe000 | 100)]), None),
        (
            tagged(
                &frames::echo_request(PEER, US, "10.100.0.7", "10.100.0.1", 1, 1, 64, b"a"),
                &[(DOT1Q, 100)],
            ),
            None,
        ),
        (
            tagged(
                &frames::echo_request(PEER, US, "10.200.0.7", "10.200.0.1", 2, 1, 64, b"b"),
                &qinq,
            ),
            None,
        ),
        (
            tagged(&v100(5001, 0), &[(DOT1Q, 999)]),
            Some(netbatch_stack::l2::input::reason::VLAN_UNKNOWN),
        ),
        (
            tagged(&v200(5001, 0), &[(DOT1AD, 200), (DOT1Q, 301)]),
            Some(netbatch_stack::l2::input::reason::VLAN_UNKNOWN),
        ),
        (
            tagged(&v100(5001, 0), &[(DOT1AD, 1), (DOT1Q, 2), (DOT1Q, 100)]),
            Some(netbatch_stack::l2::input::reason::VLAN_TOO_DEEP),
        ),
        (
            cut1,
            Some(netbatch_stack::l2::input::reason::VLAN_TRUNCATED),
        ),
        (
            cut2,
            Some(netbatch_stack::l2::input::reason::VLAN_TRUNCATED),
        ),
        (
            mcast_src,
            Some(netbatch_stack::l2::input::reason::SOURCE_MULTICAST),
        ),
        (
            bcast_src,
            Some(netbatch_stack::l2::input::reason::SOURCE_MULTICAST),
        ),
        (
            frames::udp(
                PEER,
                OTHER,
                "198.51.100.7",
                "198.51.100.1",
                7,
                5001,
                64,
                b"x",
            ),
            Some(netbatch_stack::l2::input::reason::OTHER_HOST),
        ),
        (other, Some(netbatch_stack::l2::input::reason::OTHER_HOST)),
    ];
    let eth1 = vec![
        (
            tagged(
                &frames::udp(PEER, US2, "10.5.0.7", "10.5.0.1", 7, 5001, 64, &[5]),
                &[(DOT1Q, 5)],
            ),
            None,
        ),
        (
            frames::udp(PEER, US2, "10.5.0.7", "10.5.0.1", 7, 5001, 64, &[0]),
            Some(netbatch_stack::l2::input::reason::VLAN_UNKNOWN),
        ),
    ];
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, r) in eth0.iter().chain(&eth1) {
        if let Some(r) = r {
            *want.entry(r.name()).or_insert(0) += 1;
        }
    }
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&vlan_spec(), mode, dispatch);
        let s = lab.w.host.sockets.bind(ip("0.0.0.0"), 5001, 64).unwrap();
        lab.feed(0, eth0.iter().map(|(f, _)| f.clone()));
        lab.feed(1, eth1.iter().map(|(f, _)| f.clone()));
        lab.run();
        assert_eq!(lab.drops(), want, "{what}: drop reasons");

        // Delivered: (destination, payload tag) of each datagram, in arrival order.
        let mut got = Vec::new();
        lab.w
            .host
            .sockets
            .get(s)
            .unwrap()
            .recv_batch(&mut got, usize::MAX);
        let mut seen: Vec<(std::net::Ipv4Addr, u8)> = got
            .iter()
            .map(|p| {
                let d = datagram(&lab.w.pool().get(p)).unwrap();
                let std::net::IpAddr::V4(dst) = d.dst else {
                    panic!("an IPv4 datagram")
                };
                (dst, d.payload[0])
            })
            .collect();
        lab.w.acct.delivered += got.len() as u64;
        lab.w.pool().clone().cache().free_all(&mut got);
        seen.sort_by_key(|&(_, t)| t);
        assert_eq!(
            seen,
            vec![
                (ip("10.100.0.1"), 1),
                (ip("10.200.0.1"), 2),
                (ip("198.51.100.1"), 3),
                (ip("10.100.0.1"), 4),
                (ip("10.5.0.1"), 5),
            ],
            "{what}: each on its sub-interface"
        );

        // The two echo replies leave eth0 with their sub-interface's tags.
        let tx = lab.tx(0);
        assert_eq!(tx.len(), 2, "{what}");
        let mut replies: Vec<(Vec<u16>, [u8; 4])> = tx
            .iter()
            .map(|f| {
                let p = parse(&f.bytes);
                let vids = p
                    .link_exts
                    .iter()
                    .map(|e| match e {
                        etherparse::LinkExtSlice::Vlan(v) => v.vlan_identifier().value(),
                        other => panic!("{what}: unexpected {other:?}"),
                    })
                    .collect();
                let Some(etherparse::NetSlice::Ipv4(h)) = &p.net else {
                    panic!("{what}: not IPv4")
                };
                assert_eq!(frames::icmp(&f.bytes)[0], 0, "{what}: echo reply");
                (vids, h.header().source())
            })
            .collect();
        replies.sort();
        assert_eq!(
            replies,
            vec![
                (vec![100], [10, 100, 0, 1]),
                (vec![200, 300], [10, 200, 0, 1])
            ],
            "{what}"
        );
        // The QinQ reply's tag stack, byte by byte: S-tag 0x88a8 VID 200, then C-tag.
        let q = tx.iter().find(|f| f.bytes[12..14] == [0x88, 0xa8]).unwrap();
        assert_eq!(
            &q.bytes[12..22],
            &[0x88, 0xa8, 0, 200, 0x81, 0x00, 0x01, 0x2c, 0x08, 0x00]
        );
        assert!(lab.tx(1).is_empty(), "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// Link-layer broadcast and multicast frames are taken in (datagrams to a bound port
/// delivered), but a datagram for a closed port in one is not answered with an ICMP
/// error (RFC 1122 3.2.2): unicast IP in a broadcast or multicast frame, the subnet
/// broadcast, the limited broadcast and a multicast group are each dropped as
/// `no_socket`, silently. The same datagram in a unicast frame is answered: exactly one
/// port unreachable leaves.
#[test]
fn broadcast_and_multicast_get_no_icmp_error() {
    const BCAST: MacAddr = MacAddr::BROADCAST;
    const MCAST: MacAddr = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]);
    let u = |dst_mac, dst: &str, dport, tag: u8| {
        frames::udp(PEER, dst_mac, "198.51.100.7", dst, 7, dport, 64, &[0, tag])
    };
    let input = vec![
        u(BCAST, "198.51.100.1", 6000, 0),
        u(MCAST, "198.51.100.1", 6000, 0),
        u(BCAST, "198.51.100.255", 6000, 0),
        u(BCAST, "255.255.255.255", 6000, 0),
        u(MCAST, "224.0.0.251", 6000, 0),
        u(US, "198.51.100.1", 6000, 0), // the one answered
        u(BCAST, "198.51.100.255", 5001, 1),
        u(BCAST, "255.255.255.255", 5001, 2),
        u(MCAST, "224.0.0.251", 5001, 3),
        u(MCAST, "198.51.100.1", 5001, 4),
    ];
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(), mode, dispatch);
        let (a, _) = bind(&mut lab.w.host);
        lab.feed(0, input.clone());
        lab.run();
        let mut want = BTreeMap::new();
        want.insert(netbatch_stack::udp::input::reason::NO_SOCKET.name(), 5);
        assert_eq!(lab.drops(), want, "{what}");
        let tx = lab.tx(0);
        assert_eq!(tx.len(), 1, "{what}: only the unicast one answered");
        let b = frames::icmp(&tx[0].bytes);
        assert_eq!((b[0], b[1]), (3, 3), "{what}");
        let flows = read_socket(&mut lab, a);
        assert_eq!(flows, Flows::from([(7, vec![1, 2, 3, 4])]), "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

// ---------------------------------------------------------------------------------------
// ICMP: the echo reply, ICMP drop reasons, the rate limit on errors.

/// Inserts IPv4 options (`opts`, a multiple of 4 bytes) after the 20-byte header of an
/// untagged Ethernet II frame, fixing IHL, total length and the header checksum.
fn with_ip_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let mut v = frame[..34].to_vec();
    v.extend_from_slice(opts);
    v.extend_from_slice(&frame[34..]);
    v[14] = 0x40 | (5 + opts.len() / 4) as u8;
    let total = u16::from_be_bytes([v[16], v[17]]) + opts.len() as u16;
    v[16..18].copy_from_slice(&total.to_be_bytes());
    frames::refresh_ip_checksum(&mut v);
    v
}

/// An echo request is answered, and etherparse agrees with every field of the reply:
/// Ethernet addresses swapped, IPv4 addresses swapped, a fresh 20-byte header (the
/// request's options not echoed) with TTL 64, the request's TOS kept, a valid header
/// checksum; ICMP type echo reply with the request's identifier, sequence number and
/// payload, and a valid ICMP checksum. Checked for a request without and one with
/// options (a record-route-sized NOP/EOL block), in every variant.
#[test]
fn echo_reply_is_valid_per_etherparse() {
    let payload: Vec<u8> = (0..56u8).map(|i| i.wrapping_mul(37)).collect();
    let mut plain = frames::echo_request(
        PEER,
        US,
        "198.51.100.7",
        "198.51.100.1",
        0xbeef,
        0x0102,
        17,
        &payload,
    );
    plain[15] = 0xb8; // DSCP EF
    frames::refresh_ip_checksum(&mut plain);
    let opts = with_ip_options(&plain, &[1, 1, 1, 0]);
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        for req in [&plain, &opts] {
            let mut lab = Lab::new(&spec(), mode, dispatch);
            lab.feed(0, [req.clone()]);
            lab.run();
            assert!(lab.drops().is_empty(), "{what}: {:?}", lab.drops());
            let tx = lab.tx(0);
            assert_eq!(tx.len(), 1, "{what}");
            let f = &tx[0].bytes;
            let p = parse(f);
            let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else {
                panic!("{what}: not Ethernet II")
            };
            assert_eq!(eth.destination(), PEER.0, "{what}");
            assert_eq!(eth.source(), US.0, "{what}");
            let Some(etherparse::NetSlice::Ipv4(ipv4)) = &p.net else {
                panic!("{what}: not IPv4")
            };
            let h = ipv4.header().to_header();
            assert_eq!(h.source, ip("198.51.100.1").octets(), "{what}");
            assert_eq!(h.destination, ip("198.51.100.7").octets(), "{what}");
            assert_eq!(h.time_to_live, 64, "{what}: a fresh TTL");
            assert_eq!(h.options.len(), 0, "{what}: options not echoed");
            assert_eq!(f[15], 0xb8, "{what}: TOS kept");
            assert_eq!(usize::from(h.total_len), 20 + 8 + payload.len(), "{what}");
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "{what}");
            let Some(etherparse::TransportSlice::Icmpv4(icmp)) = &p.transport else {
                panic!("{what}: not ICMP")
            };
            assert_eq!(
                icmp.icmp_type(),
                etherparse::Icmpv4Type::EchoReply(etherparse::IcmpEchoHeader {
                    id: 0xbeef,
                    seq: 0x0102
                }),
                "{what}"
            );
            assert_eq!(icmp.payload(), &payload[..], "{what}");
            assert_eq!(
                icmp.checksum(),
                icmp.icmp_type().calc_checksum(icmp.payload()),
                "{what}: ICMP checksum"
            );
            assert_eq!(lab.w.host.stats.icmp_echo_replies, 1, "{what}");
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// ICMP messages that are not answered, each for its own reason: a bad ICMP checksum
/// (one payload byte flipped), a message of 4 bytes (IP total length cut to 24 bytes,
/// checksum refreshed), echo requests to the subnet broadcast, the limited broadcast
/// and a multicast group (ignored, like Linux's `icmp_echo_ignore_broadcasts`). An
/// echo reply received is consumed (delivered, not dropped), nothing sent.
#[test]
fn icmp_drop_reasons() {
    let req = |dst_mac, dst: &str| {
        frames::echo_request(PEER, dst_mac, "198.51.100.7", dst, 9, 1, 64, b"abcd")
    };
    let mut bad_sum = req(US, "198.51.100.1");
    let last = bad_sum.len() - 1;
    bad_sum[last] ^= 0x40;
    let mut short = req(US, "198.51.100.1");
    short.truncate(14 + 20 + 4);
    short[16..18].copy_from_slice(&24u16.to_be_bytes());
    frames::refresh_ip_checksum(&mut short);
    let mcast = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
    // An echo reply to us (type 0), built by etherparse.
    let b = etherparse::PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv4(ip("198.51.100.7").octets(), ip("198.51.100.1").octets(), 64)
        .icmpv4_echo_reply(9, 1);
    let mut reply = Vec::new();
    b.write(&mut reply, b"abcd").unwrap();
    let input = vec![
        bad_sum,
        short,
        req(MacAddr::BROADCAST, "198.51.100.255"),
        req(MacAddr::BROADCAST, "255.255.255.255"),
        req(mcast, "224.0.0.1"),
        reply,
    ];
    let want: BTreeMap<&str, u64> = [
        (netbatch_stack::icmp::input::reason::CHECKSUM.name(), 1),
        (netbatch_stack::icmp::input::reason::TRUNCATED.name(), 1),
        (
            netbatch_stack::icmp::input::reason::BROADCAST_ECHO.name(),
            3,
        ),
    ]
    .into();
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(), mode, dispatch);
        lab.feed(0, input.clone());
        lab.run();
        assert_eq!(lab.drops(), want, "{what}");
        assert!(lab.tx(0).is_empty(), "{what}: nothing answered");
        assert_eq!(lab.w.acct.delivered, 1, "{what}: the echo reply consumed");
        assert_eq!(lab.w.host.stats.icmp_in_other, 1, "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// The ICMP error rate limit at graph level: with a burst of 5 and 1000 tokens per
/// second, 20 datagrams to a closed port arriving in one batch (one poll, one clock
/// reading) give exactly 5 port unreachables; the other 15 are counted as rate limited
/// and dropped as `no_socket`. One millisecond later the bucket holds one token (1000/s
/// × 1 ms): of 3 more datagrams, 1 is answered and 2 are limited.
#[test]
fn port_unreachable_is_rate_limited_per_batch() {
    let closed = |i: u8| frames::udp(PEER, US, "198.51.100.7", "198.51.100.1", 7, 6000, 64, &[i]);
    for (mode, dispatch) in VARIANTS {
        let what = format!("{mode:?}/{dispatch:?}");
        let mut s = spec();
        s.params.icmp_burst = 5;
        s.params.icmp_rate = 1000;
        let mut lab = Lab::new(&s, mode, dispatch);
        lab.feed(0, (0..20).map(closed));
        lab.run();
        let tx = lab.tx(0);
        assert_eq!(tx.len(), 5, "{what}: the burst");
        for f in &tx {
            let b = frames::icmp(&f.bytes);
            assert_eq!((b[0], b[1]), (3, 3), "{what}: port unreachable");
        }
        assert_eq!(lab.w.host.stats.icmp_errors_rate_limited, 15, "{what}");
        assert_eq!(
            lab.dropped(netbatch_stack::udp::input::reason::NO_SOCKET),
            15,
            "{what}"
        );

        lab.advance(1_000_000);
        lab.feed(0, (20..23).map(closed));
        lab.run();
        assert_eq!(lab.tx(0).len(), 1, "{what}: one token after 1 ms");
        assert_eq!(lab.w.host.stats.icmp_errors_rate_limited, 17, "{what}");
        assert_eq!(
            lab.dropped(netbatch_stack::udp::input::reason::NO_SOCKET),
            17,
            "{what}"
        );
        assert_eq!(lab.w.acct.rx, 23, "{what}");
        assert_eq!(lab.w.acct.tx, 6, "{what}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
