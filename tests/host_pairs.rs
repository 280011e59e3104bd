//! Host interface pairs (`netbatch_stack::hostif`, VPP's linux-cp): what netbatch does
//! not consume of a paired port's traffic (TCP over IPv6 among it)
//! reaches the port's tap byte for byte as it arrived, what the kernel sends through the tap leaves by the wire port byte for byte,
//! and everything netbatch answers or forwards itself stays as it was. Checked in every
//! mode and dispatch, against the frames fed (made by etherparse or by hand), with the
//! conservation law and every buffer back.

use netbatch_runtime::setup::{PortSetup, StaticNeighbour};
use netbatch_scenarios::frames;
use netbatch_scenarios::{Lab, LabSpec, PEER, US, US2, VARIANTS, ip, port};
use netbatch_stack::GraphOptions;
use netbatch_stack::hostif::reason as host;
use netbatch_stack::iface::Pair;
use netbatch_stack::route::{Route, RouteKind};
use netbatch_wire::ethernet::MacAddr;

/// A second neighbour on eth0, first heard of in an ARP reply.
const PEER2: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);
/// The next hop of 203.0.113.0/24 on eth1.
const GW: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);

/// eth0 (paired with `host-eth0`, port 2), eth1 (not paired), 203.0.113.0/24 via
/// 192.0.2.254 on eth1.
fn spec() -> LabSpec {
    let mut eth0 = port("eth0", US, "198.51.100.1/24");
    eth0.pair = Pair::Punt(2);
    let tap = PortSetup {
        addrs: None,
        pair: Pair::Inject(0),
        ..port("host-eth0", US, "198.51.100.1/24")
    };
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: vec![eth0, port("eth1", US2, "192.0.2.1/24"), tap],
        routes: vec![Route::new(
            "203.0.113.0/24".parse().expect("prefix"),
            RouteKind::Unicast,
            Some(1),
            Some(ip("192.0.2.254")),
        )],
        neighbours: vec![
            StaticNeighbour {
                iface: 1,
                ip: ip("192.0.2.254"),
                mac: GW,
            },
            StaticNeighbour {
                iface: 0,
                ip: ip("198.51.100.7"),
                mac: PEER,
            },
        ],
        params: Default::default(),
        graph: GraphOptions {
            host_pairs: true,
            ..GraphOptions::default()
        },
    }
}

/// An IPv4 packet of protocol `proto` (not UDP, TCP or ICMP) in an Ethernet frame.
fn ip_proto(dst_mac: MacAddr, src: &str, dst: &str, proto: u8, payload: &[u8]) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(PEER.0, dst_mac.0).ipv4(
        ip(src).octets(),
        ip(dst).octets(),
        1,
    );
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, etherparse::IpNumber(proto), payload)
        .expect("frame");
    v
}

/// An ICMP echo reply in an Ethernet frame.
fn echo_reply(src: &str, dst: &str) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(PEER.0, US.0)
        .ipv4(ip(src).octets(), ip(dst).octets(), 64)
        .icmpv4_echo_reply(7, 1);
    let mut v = Vec::with_capacity(b.size(4));
    b.write(&mut v, b"pong").expect("frame");
    v
}

/// What netbatch does not consume on eth0: each must reach the tap unchanged.
fn for_the_kernel() -> Vec<Vec<u8>> {
    let bgp = frames::tcp(
        PEER,
        US,
        "198.51.100.7",
        "198.51.100.1",
        40000,
        179,
        1,
        64,
        b"open",
    );
    // RIP to its multicast group: UDP with no netbatch socket.
    let rip = frames::udp(
        PEER,
        MacAddr([1, 0, 0x5e, 0, 0, 9]),
        "198.51.100.7",
        "224.0.0.9",
        520,
        520,
        1,
        b"rip",
    );
    let udp_no_socket = frames::udp(
        PEER,
        US,
        "198.51.100.7",
        "198.51.100.1",
        5555,
        4784,
        64,
        b"bfd",
    );
    // OSPF hello to AllSPFRouters (protocol 89, RFC 2328 A.1).
    let ospf = ip_proto(
        MacAddr([1, 0, 0x5e, 0, 0, 5]),
        "198.51.100.7",
        "224.0.0.5",
        89,
        &[2, 1, 0, 44],
    );
    // The first fragment of a datagram for us (MF set): the kernel reassembles.
    let mut frag = frames::udp(
        PEER,
        US,
        "198.51.100.7",
        "198.51.100.1",
        5555,
        179,
        64,
        &[0; 16],
    );
    frag[20] |= 0x20;
    frames::refresh_ip_checksum(&mut frag);
    let reply = echo_reply("198.51.100.7", "198.51.100.1");
    // A reply to the kernel's ARP request for 198.51.100.9: netbatch learns, the
    // kernel too.
    let arp = frames::arp(2, PEER2, "198.51.100.9", US, "198.51.100.1", US);
    // A BGP session's segment over IPv6 to the port's link-local address (netbatch
    // terminates no TCP).
    let v6 = {
        let b = etherparse::PacketBuilder::ethernet2(PEER.0, US.0)
            .ipv6(
                "fe80::2"
                    .parse::<std::net::Ipv6Addr>()
                    .expect("v6")
                    .octets(),
                netbatch_wire::ipv6::link_local_from_mac(US).octets(),
                64,
            )
            .tcp(40001, 179, 1, 65535);
        let mut v = Vec::with_capacity(b.size(4));
        b.write(&mut v, b"open").expect("frame");
        v
    };
    vec![bgp, rip, udp_no_socket, ospf, frag, reply, arp, v6]
}

/// What the kernel sends through the tap: each must leave by eth0 unchanged.
fn from_the_kernel() -> Vec<Vec<u8>> {
    let bgp = frames::tcp(
        US,
        PEER,
        "198.51.100.1",
        "198.51.100.7",
        179,
        40000,
        9,
        64,
        b"keepalive",
    );
    let arp_request = frames::arp(
        1,
        US,
        "198.51.100.1",
        MacAddr([0; 6]),
        "198.51.100.9",
        MacAddr::BROADCAST,
    );
    vec![bgp, arp_request]
}

#[test]
fn what_netbatch_does_not_consume_reaches_the_kernel_and_back_unchanged() {
    let mut seen = Vec::new();
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&spec(), mode, dispatch);
        let sock = lab
            .w
            .host
            .sockets
            .bind(ip("198.51.100.1"), 5001, 16)
            .expect("bind");
        let kernel = for_the_kernel();
        let wire = from_the_kernel();
        lab.feed(0, kernel.clone());
        // netbatch's own: an echo request it answers, a datagram for its socket, a
        // packet it forwards.
        lab.feed(
            0,
            [
                frames::echo_request(PEER, US, "198.51.100.7", "198.51.100.1", 1, 1, 64, b"ping"),
                frames::udp(
                    PEER,
                    US,
                    "198.51.100.7",
                    "198.51.100.1",
                    6000,
                    5001,
                    64,
                    b"app",
                ),
                frames::udp(
                    PEER,
                    US,
                    "198.51.100.7",
                    "203.0.113.5",
                    6000,
                    7000,
                    64,
                    b"fwd",
                ),
            ],
        );
        lab.run();
        lab.feed(2, wire.clone());
        // Too long for eth0's MTU (1500) after its link header, and too short to be a
        // frame: refused, each with its reason.
        let mut big = from_the_kernel()[0].clone();
        big.resize(14 + 1501, 0);
        lab.feed(2, [big, vec![0; 10]]);
        // TCP to the unpaired port's address: nobody to hand it to.
        lab.feed(
            1,
            [frames::tcp(
                PEER,
                US2,
                "192.0.2.7",
                "192.0.2.1",
                40000,
                22,
                1,
                64,
                b"ssh",
            )],
        );
        lab.run();

        // Each frame as received; their order across kinds is the dispatch's (`buckets`
        // runs each stage's pending packets in turn), so compared sorted.
        let mut to_tap: Vec<Vec<u8>> = lab.tx(2).into_iter().map(|f| f.bytes).collect();
        let mut kernel = kernel;
        to_tap.sort();
        kernel.sort();
        assert_eq!(
            to_tap, kernel,
            "{mode:?}/{dispatch:?}: the kernel's share, as received"
        );
        let on_eth0: Vec<Vec<u8>> = lab.tx(0).into_iter().map(|f| f.bytes).collect();
        // The echo reply netbatch made, then the kernel's frames as it wrote them.
        assert_eq!(on_eth0.len(), 3, "{mode:?}/{dispatch:?}: {on_eth0:02x?}");
        let reply = frames::parse(&on_eth0[0]);
        assert!(
            matches!(
                reply.transport,
                Some(etherparse::TransportSlice::Icmpv4(ref i))
                    if matches!(i.icmp_type(), etherparse::Icmpv4Type::EchoReply(_))
            ),
            "netbatch answers pings itself"
        );
        assert_eq!(&on_eth0[1..], &wire[..], "the kernel's frames, unchanged");
        let on_eth1 = lab.tx(1);
        assert_eq!(on_eth1.len(), 1, "forwarding is not the kernel's");
        assert_eq!(&on_eth1[0].bytes[..6], &GW.0);
        let mut got = Vec::new();
        let n = lab
            .w
            .host
            .sockets
            .get(sock)
            .expect("socket")
            .recv_batch(&mut got, 16);
        assert_eq!(n, 1, "the datagram for netbatch's socket stays netbatch's");
        // Read by the application: delivered.
        lab.w.acct.delivered += 1;
        lab.w.pool().clone().cache().free_all(&mut got);
        assert_eq!(lab.dropped(host::OVER_MTU), 1);
        assert_eq!(lab.dropped(host::TRUNCATED), 1);
        assert_eq!(lab.dropped(host::NO_PAIR), 1);
        // netbatch learned the neighbour from the reply it handed on: a packet to it
        // leaves with its MAC, no ARP request first.
        lab.feed(
            1,
            [frames::udp(
                PEER,
                US2,
                "192.0.2.7",
                "198.51.100.9",
                6000,
                7000,
                64,
                b"to peer2",
            )],
        );
        lab.run();
        let out = lab.tx(0);
        assert_eq!(out.len(), 1);
        assert_eq!(
            &out[0].bytes[..6],
            &PEER2.0,
            "learned from the punted reply"
        );
        let counters = lab
            .w
            .snapshot()
            .into_iter()
            .filter(|n| n.name.starts_with("host-"))
            .map(|n| (n.name, n.packets, n.events))
            .collect::<Vec<_>>();
        seen.push(format!("{counters:?}"));
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:#?}");
}

/// A TCP train for the router's address, merged by GRO on the way in (standard or
/// fraglist), reaches the kernel as the segments that arrived: the super-packet is
/// segmented on the way to the tap (which takes no offloads), each segment byte for byte
/// as received, in order.
#[test]
fn a_merged_train_reaches_the_kernel_as_it_arrived() {
    for gro in [
        netbatch_scenarios::Gro::Standard,
        netbatch_scenarios::Gro::Fraglist,
    ] {
        for (mode, dispatch) in VARIANTS {
            let mut s = spec();
            gro.apply(&mut s.ports[0]);
            s.graph.gro = true;
            let mut lab = Lab::new(&s, mode, dispatch);
            let train: Vec<Vec<u8>> = (0..8u32)
                .map(|i| {
                    frames::tcp(
                        PEER,
                        US,
                        "198.51.100.7",
                        "198.51.100.1",
                        40000,
                        179,
                        1 + i * 1000,
                        64,
                        &[i as u8; 1000],
                    )
                })
                .collect();
            lab.feed(0, train.clone());
            lab.run();
            let got: Vec<Vec<u8>> = lab.tx(2).into_iter().map(|f| f.bytes).collect();
            assert_eq!(got, train, "{gro:?} {mode:?}/{dispatch:?}");
            if mode == netbatch_engine::Mode::List {
                let punt = lab
                    .w
                    .snapshot()
                    .into_iter()
                    .find(|n| n.name == "host-punt")
                    .expect("host-punt");
                assert!(
                    punt.events.contains(&("segmented", 1)),
                    "{gro:?} {dispatch:?}: one super-packet: {:?}",
                    punt.events
                );
            }
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}
