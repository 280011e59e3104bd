//! Tracking through [`ConnTrack`]: hand-made packet sequences and what Linux documents
//! for them (nf_conntrack's state and status as `conntrack -L` shows them, nftables'
//! `ct state`).

use core::net::Ipv4Addr;

use super::*;

const SEC: u64 = 1_000_000_000;

fn a(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn udp(src: &str, dst: &str, sp: u16, dp: u16) -> Seen {
    Seen {
        tuple: Tuple::v4(a(src), a(dst), 17, sp, dp),
        kind: Kind::Datagram,
        wire: 1,
        bytes: 100,
    }
}

fn ct(max: usize) -> ConnTrack {
    ConnTrack::new(
        &Config {
            max,
            ..Config::default()
        },
        64,
    )
}

/// Tracks `s` and confirms a new connection at once (its packet passed every hook).
fn pass(c: &mut ConnTrack, s: &Seen, now: u64) -> Found {
    let f = c.track(s, now);
    if let Found::New(i) = f {
        assert_eq!(c.confirm(i, now), i);
    }
    f
}

/// UDP: new until the reply, then established both ways and assured with the stream
/// timeout (nf_conntrack_udp_packet; udp_timeout 30 s, udp_timeout_stream 120 s).
#[test]
fn udp_is_new_until_replied() {
    let mut c = ct(16);
    let q = udp("192.0.2.1", "198.51.100.1", 40000, 53);
    let r = udp("198.51.100.1", "192.0.2.1", 53, 40000);
    let Found::New(i) = pass(&mut c, &q, 0) else {
        panic!("new")
    };
    assert_eq!(c.table.get(i).unwrap().expires, 30 * SEC);
    // A second query before any answer: still `new` (ctinfo IP_CT_NEW).
    assert_eq!(
        pass(&mut c, &q, SEC),
        Found::Known {
            idx: i,
            dir: 0,
            replied: false
        }
    );
    assert_eq!(
        pass(&mut c, &r, 2 * SEC),
        Found::Known {
            idx: i,
            dir: 1,
            replied: true
        }
    );
    let e = c.table.get(i).unwrap();
    assert!(e.has(status::SEEN_REPLY) && e.has(status::ASSURED));
    assert_eq!(e.expires, 122 * SEC);
    assert_eq!((e.packets, e.bytes), ([2, 1], [200, 100]));
    // Idle past its timeout: a new connection again.
    assert!(matches!(pass(&mut c, &q, 200 * SEC), Found::New(_)));
}

/// A new connection whose packet is never confirmed (a rule dropped it) leaves no
/// entry: the next packet is new again, and the entry is given back.
#[test]
fn unconfirmed_entries_are_not_found_and_go_back() {
    let mut c = ct(2);
    let q = udp("192.0.2.1", "198.51.100.1", 1, 2);
    let Found::New(i) = c.track(&q, 0) else {
        panic!()
    };
    let generation = c.table.get(i).unwrap().generation;
    let Found::New(j) = c.track(&q, 0) else {
        panic!("not confirmed: not found")
    };
    assert_ne!(i, j);
    c.discard(i, generation);
    c.discard(i, generation);
    assert_eq!(c.table.unconfirmed(), 1, "given back once");
    assert_eq!(c.table.stats.unconfirmed_discarded, 1);
    // The second one confirmed; the first's stale reference confirms nothing more.
    assert_eq!(c.confirm(j, 0), j);
    assert_eq!(c.table.len(), 1);
}

/// ICMP echo by identifier; an error quoting a tracked connection is related (in the
/// reply direction), one quoting nothing invalid (Linux's icmp_error_message).
#[test]
fn icmp_echo_and_errors() {
    let mut c = ct(16);
    let echo = |src: &str, dst: &str, t: u8| Seen {
        tuple: Tuple::v4(a(src), a(dst), 1, 77, u16::from(t) << 8),
        kind: Kind::IcmpQuery,
        wire: 1,
        bytes: 84,
    };
    // A reply with no request: invalid (it cannot start a connection).
    assert_eq!(
        pass(&mut c, &echo("198.51.100.1", "192.0.2.1", 0), 0),
        Found::Invalid(Invalid::IcmpNew)
    );
    let Found::New(i) = pass(&mut c, &echo("192.0.2.1", "198.51.100.1", 8), 0) else {
        panic!()
    };
    assert!(matches!(
        pass(&mut c, &echo("198.51.100.1", "192.0.2.1", 0), 0),
        Found::Known { dir: 1, .. }
    ));
    // The UDP flow 192.0.2.1:40000 → 198.51.100.1:53, then a port unreachable
    // quoting it, from the far host.
    pass(&mut c, &udp("192.0.2.1", "198.51.100.1", 40000, 53), 0);
    let err = |quoted: Tuple| Seen {
        tuple: Tuple::v4(a("198.51.100.1"), a("192.0.2.1"), 1, 0, 3 << 8 | 3),
        kind: Kind::IcmpError(Some(quoted)),
        wire: 1,
        bytes: 56,
    };
    let q = Tuple::v4(a("192.0.2.1"), a("198.51.100.1"), 17, 40000, 53);
    assert!(matches!(
        pass(&mut c, &err(q), 0),
        Found::Related { dir: 1, .. }
    ));
    let other = Tuple::v4(a("192.0.2.1"), a("198.51.100.1"), 17, 40001, 53);
    assert_eq!(
        pass(&mut c, &err(other), 0),
        Found::Invalid(Invalid::IcmpOrphan)
    );
    assert_eq!(c.stats.invalid[Invalid::IcmpOrphan.slot()], 1);
    assert_ne!(i, u32::MAX);
}

fn tcp(src: &str, dst: &str, sp: u16, dp: u16, flags: u16, seq: u32, ack: u32) -> Seen {
    Seen {
        tuple: Tuple::v4(a(src), a(dst), 6, sp, dp),
        kind: Kind::Tcp(tcp::Segment {
            flags,
            seq,
            ack,
            win: 64240,
            len: 0,
            wscale: None,
        }),
        wire: 1,
        bytes: 60,
    }
}

/// A TCP handshake through the table: new, established after the SYN/ACK, assured
/// after the final ACK; an unsolicited SYN/ACK is invalid; the table full of assured
/// connections refuses a new one while the established one keeps working.
#[test]
fn tcp_through_the_table_and_a_full_table() {
    let mut c = ct(2);
    let (cl, sv) = ("192.0.2.1", "198.51.100.1");
    let Found::New(i) = pass(&mut c, &tcp(cl, sv, 1000, 80, 0x02, 100, 0), 0) else {
        panic!()
    };
    assert!(matches!(
        pass(&mut c, &tcp(sv, cl, 80, 1000, 0x12, 900, 101), 0),
        Found::Known { dir: 1, .. }
    ));
    assert!(matches!(
        pass(&mut c, &tcp(cl, sv, 1000, 80, 0x10, 101, 901), 0),
        Found::Known {
            dir: 0,
            replied: true,
            ..
        }
    ));
    let e = c.table.get(i).unwrap();
    assert_eq!(e.tcp.state, TcpState::Established);
    assert!(e.has(status::ASSURED));
    assert_eq!(e.expires, 432_000 * SEC);
    assert_eq!(
        pass(&mut c, &tcp(sv, "192.0.2.9", 80, 5, 0x12, 1, 1), 0),
        Found::Invalid(Invalid::Tcp(tcp::Invalid::New)),
        "an unsolicited SYN/ACK starts nothing"
    );
    // A second connection, assured too: the table (2) is full of assured entries.
    pass(&mut c, &tcp(cl, sv, 1001, 80, 0x02, 100, 0), 0);
    pass(&mut c, &tcp(sv, cl, 80, 1001, 0x12, 900, 101), 0);
    pass(&mut c, &tcp(cl, sv, 1001, 80, 0x10, 101, 901), 0);
    assert_eq!(
        c.track(&tcp("203.0.113.5", sv, 9, 80, 0x02, 1, 0), 0),
        Found::Refused(Refusal::Full)
    );
    assert!(matches!(
        pass(&mut c, &tcp(sv, cl, 80, 1000, 0x10, 901, 101), 0),
        Found::Known { .. }
    ));
    assert_eq!(c.table.stats.refused_full, 1);
}

/// Unassured entries make room: a SYN flood recycles the SYN_SENT entries (early
/// drop), never the assured one.
#[test]
fn syn_flood_evicts_only_unassured() {
    let mut c = ct(8);
    let (cl, sv) = ("192.0.2.1", "198.51.100.1");
    pass(&mut c, &tcp(cl, sv, 1000, 80, 0x02, 100, 0), 0);
    pass(&mut c, &tcp(sv, cl, 80, 1000, 0x12, 900, 101), 0);
    pass(&mut c, &tcp(cl, sv, 1000, 80, 0x10, 101, 901), 0);
    let mut refused = 0;
    for n in 0..10_000u32 {
        let src = Ipv4Addr::from(0xcb00_7100 + (n & 0xff));
        let s = Seen {
            tuple: Tuple::v4(src, a(sv), 6, 1 + (n >> 8) as u16, 80),
            ..tcp(cl, sv, 0, 80, 0x02, n, 0)
        };
        match pass(&mut c, &s, 0) {
            Found::New(_) => {}
            Found::Refused(_) => refused += 1,
            f => panic!("{f:?}"),
        }
    }
    assert_eq!(c.table.len(), 8);
    assert!(c.table.stats.early_drop > 9_000);
    assert_eq!(
        c.table.stats.early_drop + refused + 7,
        10_000,
        "every SYN took a slot by eviction, or was refused and counted"
    );
    assert!(matches!(
        pass(&mut c, &tcp(sv, cl, 80, 1000, 0x10, 901, 101), 0),
        Found::Known { .. }
    ));
}

/// A SYN in TIME_WAIT replaces the old connection (RFC 1122 4.2.2.13 reopening).
#[test]
fn time_wait_reopens() {
    let mut c = ct(4);
    let (cl, sv) = ("192.0.2.1", "198.51.100.1");
    let seq = [
        (true, 0x02, 100, 0),
        (false, 0x12, 900, 101),
        (true, 0x10, 101, 901),
        (true, 0x11, 101, 901),
        (false, 0x11, 901, 102),
        (true, 0x10, 102, 902),
    ];
    for (orig, f, s, k) in seq {
        let p = if orig {
            tcp(cl, sv, 1000, 80, f, s, k)
        } else {
            tcp(sv, cl, 80, 1000, f, s, k)
        };
        assert!(!matches!(pass(&mut c, &p, 0), Found::Invalid(_)), "{f:#x}");
    }
    let (i, _) = c
        .table
        .lookup(&tcp(cl, sv, 1000, 80, 0, 0, 0).tuple, 0)
        .unwrap();
    assert_eq!(c.table.get(i).unwrap().tcp.state, TcpState::TimeWait);
    assert!(matches!(
        pass(&mut c, &tcp(cl, sv, 1000, 80, 0x02, 5000, 0), 0),
        Found::New(_)
    ));
    assert_eq!(c.stats.tcp_reopened, 1);
    assert_eq!(c.table.len(), 1);
}

/// [`Seen::read`] on a hand-made IPv4/TCP SYN with a window scale option.
#[test]
fn reads_a_syn_from_its_bytes() {
    let mut p = vec![0x45, 0, 0, 44, 0, 1, 0x40, 0, 64, 6, 0, 0];
    p.extend([192, 0, 2, 1, 198, 51, 100, 1]);
    // TCP: 40000 → 80, seq 7, ack 0, data offset 6 (24 bytes), SYN, window 1000,
    // options: window scale 7, end of list.
    p.extend([
        0x9c, 0x40, 0, 80, 0, 0, 0, 7, 0, 0, 0, 0, 0x60, 0x02, 0x03, 0xe8, 0, 0, 0, 0,
    ]);
    p.extend([3, 3, 7, 0]);
    let mut m = netbatch_engine::Meta::new(0);
    m.len = p.len() as u16;
    m.total_len = m.len.into();
    m.l3_type = dissect::L3::Ipv4 as u8;
    m.l3 = 0;
    m.l4 = 20;
    m.l4_type = 6;
    let s = Seen::read(&m, &p);
    assert_eq!(
        s.tuple,
        Tuple::v4(a("192.0.2.1"), a("198.51.100.1"), 6, 40000, 80)
    );
    let Kind::Tcp(seg) = s.kind else {
        panic!("{:?}", s.kind)
    };
    assert_eq!(
        (seg.flags, seg.seq, seg.win, seg.len, seg.wscale),
        (0x02, 7, 1000, 0, Some(7))
    );
}

/// The inline read of the common datagram ([`Seen::read`]) gives what the general read
/// gives, for any bytes and any dissection the metadata can record.
#[test]
fn the_datagram_read_agrees_with_the_general_read() {
    use proptest::prelude::*;
    let frames = (
        proptest::collection::vec(any::<u8>(), 0..64),
        0u8..4,
        0u16..24,
        0u16..48,
        prop_oneof![
            Just(6u8),
            Just(17),
            Just(136),
            Just(132),
            Just(1),
            any::<u8>()
        ],
        any::<bool>(),
    );
    proptest!(|((mut d, l3_type, l3, l4, proto, ihl5) in frames)| {
        if ihl5 && let Some(b) = d.get_mut(usize::from(l3)) {
            *b = 0x45;
        }
        let mut m = netbatch_engine::Meta::new(0);
        m.len = d.len() as u16;
        m.total_len = m.len.into();
        m.l3_type = l3_type;
        m.l3 = l3;
        m.l4 = if l4 < 8 { 0 } else { l4 };
        m.l4_type = proto;
        prop_assert_eq!(Seen::read(&m, &d), Seen::read_any(&m, &d));
    });
}

/// A run of datagrams of one flow (tracked inline, by the previous packet's entry) ends
/// with the entry, the answers and the counters a lookup per packet gives.
#[test]
fn a_run_is_tracked_as_packets_looked_up_one_by_one() {
    let q = udp("192.0.2.1", "198.51.100.1", 40000, 53);
    let r = udp("198.51.100.1", "192.0.2.1", 53, 40000);
    let steps = [&q, &q, &r, &r, &r, &q, &q, &r];
    let (mut runs, mut each) = (ct(16), ct(16));
    for (n, s) in steps.iter().enumerate() {
        let now = n as u64 * SEC;
        each.begin_list();
        assert_eq!(pass(&mut runs, s, now), pass(&mut each, s, now), "step {n}");
    }
    let (a, b) = (runs.table.get(0).unwrap(), each.table.get(0).unwrap());
    assert_eq!(
        (a.status, a.expires, a.packets, a.bytes),
        (b.status, b.expires, b.packets, b.bytes)
    );
    assert_eq!(a.packets, [4, 4]);
    assert_eq!(runs.stats.by_state, each.stats.by_state);
    // Runs: q q | r r r | q q | r, each after its first packet by the previous one's
    // entry, but the second q: confirming the new connection forgot the first's.
    assert_eq!((runs.stats.run_hits, each.stats.run_hits), (3, 0));
}
