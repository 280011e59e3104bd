//! GSO checked against frames built independently (etherparse computes every length and
//! checksum of the expected frames): GRO then GSO must give back the frames GRO took, and
//! changes made to a super-packet's head must reach every segment.

use crate::meta::gso;
use etherparse::PacketBuilder;
use netbatch_engine::{BufCache, Pkt, Pool, PoolConfig};

use crate::gro::{GroTable, Kind, Parsed, parse};

const SRC: [u8; 4] = [192, 0, 2, 1];
const DST: ([u8; 4], u16) = ([198, 51, 100, 1], 8000);

fn pool(buffers: u32) -> Pool {
    Pool::new(PoolConfig {
        buffers,
        buf_size: 4096,
        cache_size: 64,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// One frame of a TCP flow: `seq`, `flags` (PSH 0x08, FIN 0x01, CWR 0x80), IPv4 `id`,
/// `ttl`, destination `dst`, payload bytes derived from `seq`.
fn tcp(seq: u32, len: usize, flags: u8, id: u16, ttl: u8, dst: ([u8; 4], u16)) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(SRC, dst.0, ttl)
        .tcp(1500, dst.1, seq, 501)
        .ack(77);
    if flags & 0x08 != 0 {
        b = b.psh();
    }
    if flags & 0x01 != 0 {
        b = b.fin();
    }
    if flags & 0x80 != 0 {
        b = b.cwr();
    }
    let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i * 7) as u8).collect();
    let mut v = Vec::new();
    b = b
        .options(&[
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Timestamp(5, 6),
        ])
        .unwrap();
    b.write(&mut v, &payload).unwrap();
    set_id(&mut v, id);
    v
}

fn udp(n: u16, len: usize, id: u16, ttl: u8, dst: ([u8; 4], u16)) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(SRC, dst.0, ttl)
        .udp(4000, dst.1);
    let payload: Vec<u8> = (0..len).map(|i| (usize::from(n) * 31 + i) as u8).collect();
    let mut v = Vec::new();
    b.write(&mut v, &payload).unwrap();
    set_id(&mut v, id);
    v
}

/// Sets the IPv4 identification and DF, and refreshes the header checksum.
fn set_id(v: &mut [u8], id: u16) {
    v[18..20].copy_from_slice(&id.to_be_bytes());
    v[20] = 0x40;
    netbatch_wire::ipv4::fill_header_checksum(&mut v[14..], 20);
}

fn load(pool: &Pool, c: &mut BufCache, f: &[u8]) -> Pkt {
    let mut p = c.alloc().unwrap();
    let mut v = pool.get_mut(&mut p);
    assert!(v.set_data(128, f));
    p
}

/// Runs `frames` through a GRO table (all of `kind`) and returns what it hands on, with
/// the head's L3/L4 offsets set as the stack leaves them (link header in front).
fn gro(pool: &Pool, c: &mut BufCache, frames: &[Vec<u8>], kind: Kind) -> Vec<Pkt> {
    let mut t = GroTable::new();
    let mut done = Vec::new();
    for f in frames {
        let p = load(pool, c, f);
        match parse(&crate::dissect::parse(f), f, 0, false) {
            Parsed::Seg(s) => t.offer(pool, p, s, kind, &mut done),
            _ => done.push(p),
        }
    }
    t.flush_all(pool, &mut done);
    for p in &mut done {
        let v = pool.get_mut(p);
        let r = crate::dissect::parse(v.data());
        v.meta.l3 = v.meta.data + r.l3;
        v.meta.l4 = v.meta.data + r.l4;
    }
    done
}

fn bytes(pool: &Pool, p: &Pkt) -> Vec<u8> {
    let v = pool.get(p);
    assert!(v.meta.chain.is_none(), "a segment is one buffer");
    v.data().to_vec()
}

/// GSO of every packet in `l`, as frames.
fn split(pool: &Pool, c: &mut BufCache, l: Vec<Pkt>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for p in l {
        let mut segs = Vec::new();
        if pool.get(&p).meta.gso_type == gso::NONE {
            segs.push(p);
        } else {
            segment(pool, c, p, &mut segs).map_err(|(_, r)| r).unwrap();
        }
        for q in segs {
            out.push(bytes(pool, &q));
            c.free(q);
        }
    }
    out
}

use super::segment;

#[test]
fn standard_tcp_round_trip_is_exact() {
    let pool = pool(256);
    let mut c = pool.cache();
    // Odd segment sizes put every other payload at an odd offset of the merged sum.
    let mut frames: Vec<Vec<u8>> = (0..5u32)
        .map(|i| tcp(1000 + i * 101, 101, 0, 40 + i as u16, 64, DST))
        .collect();
    frames.push(tcp(1000 + 5 * 101, 33, 0x08, 45, 64, DST));
    let out = gro(&pool, &mut c, &frames, Kind::Standard);
    assert_eq!(out.len(), 1, "one train");
    let m = pool.get(&out[0]).meta;
    assert_eq!((m.segs, m.gso_size, m.gso_type), (6, 101, gso::TCPV4));
    // The super-packet is one IP packet whose TCP checksum is partial, as a TSO device
    // expects: completing it over the whole segment gives etherparse's checksum.
    let whole = netbatch_ports_free_frame(&pool, &out[0]);
    assert_ne!(m.flags & crate::meta::flag::L4_CSUM_PARTIAL, 0);
    let parsed = etherparse::SlicedPacket::from_ethernet(&whole).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = &parsed.net else {
        panic!()
    };
    let Some(etherparse::TransportSlice::Tcp(t)) = &parsed.transport else {
        panic!()
    };
    let completed = netbatch_wire::checksum::checksum(&whole[34..]);
    assert_eq!(
        t.calc_checksum_ipv4(ip.header().source(), ip.header().destination())
            .unwrap(),
        completed
    );
    assert!(t.psh(), "the head inherits PSH");
    assert_eq!(split(&pool, &mut c, out), frames);
    drop(c);
    assert_eq!(pool.free_in_pool(), 256);
}

/// The frame of a super-packet over its chain (test-local, the ports crate is not a
/// dependency of the stack).
fn netbatch_ports_free_frame(pool: &Pool, p: &Pkt) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cur = Some(p);
    while let Some(q) = cur {
        let v = pool.get(q);
        out.extend_from_slice(v.data());
        cur = v.meta.chain.as_ref();
    }
    out
}

#[test]
fn standard_round_trips_keep_cwr_fixed_ids_and_udp() {
    let pool = pool(256);
    let mut c = pool.cache();
    // CWR on every segment (an AccECN train), fixed ID.
    let frames: Vec<Vec<u8>> = (0..4u32)
        .map(|i| tcp(1 + i * 500, 500, 0x80, 9, 64, DST))
        .collect();
    let out = gro(&pool, &mut c, &frames, Kind::Standard);
    assert_eq!(out.len(), 1);
    assert_eq!(pool.get(&out[0]).meta.gso_type, gso::TCPV4 | gso::FIXED_ID);
    assert_eq!(split(&pool, &mut c, out), frames);
    // UDP with a shorter last datagram.
    let mut frames: Vec<Vec<u8>> = (0..7u16).map(|i| udp(i, 1200, 100 + i, 64, DST)).collect();
    frames.push(udp(7, 77, 107, 64, DST));
    let out = gro(&pool, &mut c, &frames, Kind::Standard);
    assert_eq!(out.len(), 1);
    assert_eq!(pool.get(&out[0]).meta.segs, 8);
    assert_eq!(split(&pool, &mut c, out), frames);
}

#[test]
fn fraglist_round_trip_is_exact_for_tcp_and_udp() {
    let pool = pool(256);
    let mut c = pool.cache();
    let frames: Vec<Vec<u8>> = (0..6u32)
        .map(|i| tcp(7 + i * 300, 300, 0, 1 + i as u16, 64, DST))
        .collect();
    let out = gro(&pool, &mut c, &frames, Kind::Fraglist);
    assert_eq!(out.len(), 1);
    assert_eq!(pool.get(&out[0]).meta.gso_type, gso::FRAGLIST_TCPV4);
    assert_eq!(split(&pool, &mut c, out), frames);
    let frames: Vec<Vec<u8>> = (0..9u16)
        .map(|i| udp(i, 1000 - usize::from(i / 8) * 10, 3 + i, 64, DST))
        .collect();
    let out = gro(&pool, &mut c, &frames, Kind::Fraglist);
    assert_eq!(out.len(), 1);
    assert_eq!(pool.get(&out[0]).meta.gso_type, gso::FRAGLIST_UDPV4);
    assert_eq!(split(&pool, &mut c, out), frames);
}

/// What the stack does to a head on its way: the TTL decrement of `ip4-forward`
/// (incremental header checksum) and a NAT-like destination address and port rewrite
/// with its L4 checksum update.
fn rewrite_head(pool: &Pool, p: &mut Pkt, new_dst: ([u8; 4], u16)) {
    use netbatch_wire::checksum::{update16, update32};
    let mut v = pool.get_mut(p);
    let d = v.data_mut();
    let ip = 14;
    let old = u16::from_be_bytes([d[ip + 8], d[ip + 9]]);
    d[ip + 8] -= 1;
    let hc = update16(
        u16::from_be_bytes([d[ip + 10], d[ip + 11]]),
        old,
        old - 0x100,
    );
    d[ip + 10..ip + 12].copy_from_slice(&hc.to_be_bytes());
    let od = u32::from_be_bytes([d[ip + 16], d[ip + 17], d[ip + 18], d[ip + 19]]);
    let nd = u32::from_be_bytes(new_dst.0);
    d[ip + 16..ip + 20].copy_from_slice(&new_dst.0);
    let hc = update32(u16::from_be_bytes([d[ip + 10], d[ip + 11]]), od, nd);
    d[ip + 10..ip + 12].copy_from_slice(&hc.to_be_bytes());
    let at = ip + 20 + if d[ip + 9] == 6 { 16 } else { 6 };
    let lc = update32(u16::from_be_bytes([d[at], d[at + 1]]), od, nd);
    let op = u16::from_be_bytes([d[ip + 22], d[ip + 23]]);
    d[ip + 22..ip + 24].copy_from_slice(&new_dst.1.to_be_bytes());
    let lc = update16(lc, op, new_dst.1);
    d[at..at + 2].copy_from_slice(&lc.to_be_bytes());
}

#[test]
fn changes_to_the_head_reach_every_segment() {
    const NAT: ([u8; 4], u16) = ([203, 0, 113, 9], 8080);
    let pool = pool(256);
    let mut c = pool.cache();
    for kind in [Kind::Standard, Kind::Fraglist] {
        let frames: Vec<Vec<u8>> = (0..5u32)
            .map(|i| tcp(1 + i * 400, 400, 0, 20 + i as u16, 64, DST))
            .collect();
        let want: Vec<Vec<u8>> = (0..5u32)
            .map(|i| tcp(1 + i * 400, 400, 0, 20 + i as u16, 63, NAT))
            .collect();
        let mut out = gro(&pool, &mut c, &frames, kind);
        rewrite_head(&pool, &mut out[0], NAT);
        assert_eq!(split(&pool, &mut c, out), want, "{kind:?} TCP");
        let frames: Vec<Vec<u8>> = (0..5u16).map(|i| udp(i, 700, 20 + i, 64, DST)).collect();
        let want: Vec<Vec<u8>> = (0..5u16).map(|i| udp(i, 700, 20 + i, 63, NAT)).collect();
        let mut out = gro(&pool, &mut c, &frames, kind);
        rewrite_head(&pool, &mut out[0], NAT);
        assert_eq!(split(&pool, &mut c, out), want, "{kind:?} UDP");
    }
}

/// An application's large send: headers and all the payload in one buffer.
fn app_super(pool: &Pool, c: &mut BufCache, payload: usize, gso_size: u16) -> (Pkt, Vec<Vec<u8>>) {
    let data: Vec<u8> = (0..payload).map(|i| (i * 13 + 1) as u8).collect();
    let mut whole = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(SRC, DST.0, 64)
        .udp(4000, DST.1)
        .write(&mut whole, &data)
        .unwrap();
    set_id(&mut whole, 500);
    let want = data
        .chunks(usize::from(gso_size))
        .enumerate()
        .map(|(i, chunk)| {
            let mut v = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(SRC, DST.0, 64)
                .udp(4000, DST.1)
                .write(&mut v, chunk)
                .unwrap();
            set_id(&mut v, 500 + i as u16);
            v
        })
        .collect();
    let mut p = load(pool, c, &whole);
    let v = pool.get_mut(&mut p);
    v.meta.l3 = v.meta.data + 14;
    v.meta.l4 = v.meta.l3 + 20;
    v.meta.gso_type = gso::UDPV4;
    v.meta.gso_size = gso_size;
    v.meta.segs = payload.div_ceil(usize::from(gso_size)) as u16;
    (p, want)
}

#[test]
fn a_single_buffer_super_packet_is_copied_into_segments() {
    let pool = pool(64);
    let mut c = pool.cache();
    let (p, want) = app_super(&pool, &mut c, 3001, 1000);
    assert_eq!(split(&pool, &mut c, vec![p]), want);
    drop(c);
    assert_eq!(pool.free_in_pool(), 64, "the original buffer is freed");
}

#[test]
fn failure_leaves_the_super_packet_untouched() {
    // Four buffers: the super-packet takes one, three are free, four segments are needed.
    let pool = pool(4);
    let mut c = pool.cache();
    let (p, _) = app_super(&pool, &mut c, 1600, 400);
    let before = netbatch_ports_free_frame(&pool, &p);
    let mut segs = Vec::new();
    let (p, r) = segment(&pool, &mut c, p, &mut segs).unwrap_err();
    assert_eq!(r, netbatch_engine::reason::NO_BUFFER);
    assert!(segs.is_empty());
    assert_eq!(netbatch_ports_free_frame(&pool, &p), before);
    assert_eq!(pool.get(&p).meta.segs, 4);
    // Not a super-packet's layout: refused.
    let mut q = c.alloc().unwrap();
    {
        let mut v = pool.get_mut(&mut q);
        v.set_data(128, &[0u8; 60]);
        v.meta.gso_type = gso::TCPV4;
        v.meta.l3 = v.meta.data + 14;
    }
    let (q, r) = segment(&pool, &mut c, q, &mut segs).unwrap_err();
    assert_eq!(r, crate::gso::reason::FAILED);
    c.free(p);
    c.free(q);
    drop(c);
    assert_eq!(pool.free_in_pool(), 4);
}

// IPv6: the same round trips, over frames etherparse builds (with a Hop-by-Hop options
// header where said), and the head's changes (the hop limit `ip6-forward` decrements, a
// NAT-like rewrite) reaching every segment.

const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: ([u8; 16], u16) = (
    [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    8000,
);
const NAT6: ([u8; 16], u16) = (
    [
        0x20, 0x01, 0x0d, 0xb8, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b,
    ],
    8443,
);

/// The IPv6 headers of a test frame: hop limit `hop`, to `dst`, with a Hop-by-Hop
/// options header carrying six bytes of `hbh` (a PadN option's bytes) if given.
fn ip6(hop: u8, dst: [u8; 16], hbh: Option<u8>) -> etherparse::IpHeaders {
    let mut exts = etherparse::Ipv6Extensions::default();
    if let Some(b) = hbh {
        exts.hop_by_hop_options = Some(
            etherparse::Ipv6RawExtHeader::new_raw(etherparse::IpNumber::TCP, &[1, 4, b, b, b, b])
                .unwrap(),
        );
    }
    etherparse::IpHeaders::Ipv6(
        etherparse::Ipv6Header {
            traffic_class: 0x28,
            flow_label: etherparse::Ipv6FlowLabel::try_new(0x12345).unwrap(),
            hop_limit: hop,
            source: SRC6,
            destination: dst,
            ..Default::default()
        },
        exts,
    )
}

/// A TCP segment over IPv6 (as [`tcp`]: options NOP, NOP, timestamp; `flags` PSH 0x08,
/// FIN 0x01).
fn tcp6(
    seq: u32,
    len: usize,
    flags: u8,
    hop: u8,
    dst: ([u8; 16], u16),
    hbh: Option<u8>,
) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ip(ip6(hop, dst.0, hbh))
        .tcp(1500, dst.1, seq, 501)
        .ack(77);
    if flags & 0x08 != 0 {
        b = b.psh();
    }
    if flags & 0x01 != 0 {
        b = b.fin();
    }
    let b = b
        .options(&[
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Timestamp(5, 6),
        ])
        .unwrap();
    let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i * 7) as u8).collect();
    let mut v = Vec::new();
    b.write(&mut v, &payload).unwrap();
    v
}

/// A UDP datagram over IPv6.
fn udp6(n: u16, len: usize, hop: u8, dst: ([u8; 16], u16), hbh: Option<u8>) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ip(ip6(hop, dst.0, hbh))
        .udp(4000, dst.1);
    let payload: Vec<u8> = (0..len).map(|i| (usize::from(n) * 31 + i) as u8).collect();
    let mut v = Vec::new();
    b.write(&mut v, &payload).unwrap();
    v
}

#[test]
fn ip6_headers_takes_the_extension_headers_every_segment_carries() {
    use super::ip6_headers;
    let base = |next: u8| {
        let mut h = vec![0x60, 0, 0, 0, 0, 0, next, 64];
        h.extend([0u8; 32]);
        h
    };
    // An extension header of 8 bytes naming `next`, its third and fourth bytes `b2`, `b3`
    // (a routing header's type and segments left).
    let ext = |next: u8, b2: u8, b3: u8| vec![next, 0, b2, b3, 0, 0, 0, 0];
    assert_eq!(ip6_headers(&base(6)), Some((40, 6)));
    let d = [base(0), ext(60, 1, 4), ext(43, 1, 4), ext(17, 2, 0)].concat();
    assert_eq!(
        ip6_headers(&d),
        Some((64, 17)),
        "HBH, DO, routing with no segments left"
    );
    // A routing header with segments left, a fragment header, AH: the walk stops there.
    assert_eq!(
        ip6_headers(&[base(43), ext(6, 0, 1)].concat()),
        Some((40, 43))
    );
    assert_eq!(
        ip6_headers(&[base(60), ext(44, 1, 4), ext(6, 0, 0)].concat()),
        Some((48, 44))
    );
    assert_eq!(
        ip6_headers(&[base(51), ext(6, 0, 0)].concat()),
        Some((40, 51))
    );
    // Hop-by-Hop anywhere but first.
    assert_eq!(
        ip6_headers(&[base(60), ext(0, 1, 4), ext(6, 0, 0)].concat()),
        Some((48, 0))
    );
    // Cut short, too many headers, too many bytes, not IPv6.
    assert_eq!(ip6_headers(&[base(60), vec![6, 0, 1]].concat()), None);
    let many: Vec<u8> = (0..9).flat_map(|_| ext(60, 1, 4)).collect();
    assert_eq!(ip6_headers(&[base(60), many].concat()), None);
    let mut long = ext(6, 1, 4);
    long[1] = 32;
    long.resize(33 * 8, 0);
    assert_eq!(ip6_headers(&[base(60), long].concat()), None);
    let mut v4 = base(6);
    v4[0] = 0x45;
    assert_eq!(ip6_headers(&v4), None);
}

#[test]
fn ipv6_standard_round_trips_are_exact() {
    let pool = pool(256);
    let mut c = pool.cache();
    for hbh in [None, Some(0x5a)] {
        // TCP, odd sizes, PSH on a shorter last segment.
        let mut frames: Vec<Vec<u8>> = (0..5u32)
            .map(|i| tcp6(1000 + i * 101, 101, 0, 64, DST6, hbh))
            .collect();
        frames.push(tcp6(1000 + 5 * 101, 33, 0x08, 64, DST6, hbh));
        let out = gro(&pool, &mut c, &frames, Kind::Standard);
        assert_eq!(out.len(), 1, "one train");
        let m = pool.get(&out[0]).meta;
        assert_eq!((m.segs, m.gso_size, m.gso_type), (6, 101, gso::TCPV6));
        // One IPv6 packet whose TCP checksum is partial: completed over the whole it is
        // etherparse's checksum of the whole.
        let whole = netbatch_ports_free_frame(&pool, &out[0]);
        assert_ne!(m.flags & crate::meta::flag::L4_CSUM_PARTIAL, 0);
        let parsed = etherparse::SlicedPacket::from_ethernet(&whole).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = &parsed.net else {
            panic!("IPv6")
        };
        assert_eq!(
            usize::from(ip.header().payload_length()),
            whole.len() - 54,
            "payload length of the whole"
        );
        let Some(etherparse::TransportSlice::Tcp(t)) = &parsed.transport else {
            panic!("TCP")
        };
        let l4 = whole.len() - t.slice().len();
        let completed = netbatch_wire::checksum::checksum(&whole[l4..]);
        assert_eq!(
            t.calc_checksum_ipv6(ip.header().source(), ip.header().destination())
                .unwrap(),
            completed
        );
        assert!(t.psh(), "the head inherits PSH");
        assert_eq!(split(&pool, &mut c, out), frames, "TCP, HBH {hbh:?}");
        // UDP with a shorter last datagram.
        let mut frames: Vec<Vec<u8>> = (0..7u16).map(|i| udp6(i, 1201, 64, DST6, hbh)).collect();
        frames.push(udp6(7, 77, 64, DST6, hbh));
        let out = gro(&pool, &mut c, &frames, Kind::Standard);
        assert_eq!(out.len(), 1);
        let m = pool.get(&out[0]).meta;
        assert_eq!(
            (m.segs, m.gso_type),
            (8, gso::UDPV6),
            "no fixed-ID bit for IPv6"
        );
        assert_eq!(split(&pool, &mut c, out), frames, "UDP, HBH {hbh:?}");
    }
    drop(c);
    assert_eq!(pool.free_in_pool(), 256);
}

#[test]
fn ipv6_fraglist_round_trips_are_exact() {
    let pool = pool(256);
    let mut c = pool.cache();
    for hbh in [None, Some(0x11)] {
        let frames: Vec<Vec<u8>> = (0..6u32)
            .map(|i| tcp6(7 + i * 300, 300, 0, 64, DST6, hbh))
            .collect();
        let out = gro(&pool, &mut c, &frames, Kind::Fraglist);
        assert_eq!(out.len(), 1);
        assert_eq!(pool.get(&out[0]).meta.gso_type, gso::FRAGLIST_TCPV6);
        assert_eq!(split(&pool, &mut c, out), frames);
        let frames: Vec<Vec<u8>> = (0..9u16)
            .map(|i| udp6(i, 1000 - usize::from(i / 8) * 10, 64, DST6, hbh))
            .collect();
        let out = gro(&pool, &mut c, &frames, Kind::Fraglist);
        assert_eq!(out.len(), 1);
        assert_eq!(pool.get(&out[0]).meta.gso_type, gso::FRAGLIST_UDPV6);
        assert_eq!(split(&pool, &mut c, out), frames);
    }
    drop(c);
    assert_eq!(pool.free_in_pool(), 256);
}

/// What the stack may do to an IPv6 head: the hop-limit decrement of `ip6-forward` (a
/// store: no header checksum) and a NAT-like destination address and port rewrite with
/// its L4 checksum update (RFC 1624, word by word); `tcp`: TCP, else UDP.
fn rewrite_head6(pool: &Pool, p: &mut Pkt, tcp: bool, new_dst: ([u8; 16], u16)) {
    use netbatch_wire::checksum::update16;
    let mut v = pool.get_mut(p);
    let (l3, l4) = (
        usize::from(v.meta.l3 - v.meta.data),
        usize::from(v.meta.l4 - v.meta.data),
    );
    let d = v.data_mut();
    d[l3 + 7] -= 1;
    let at = l4 + if tcp { 16 } else { 6 };
    let mut c = u16::from_be_bytes([d[at], d[at + 1]]);
    for k in 0..8 {
        let o = l3 + 24 + 2 * k;
        let old = u16::from_be_bytes([d[o], d[o + 1]]);
        let new = u16::from_be_bytes([new_dst.0[2 * k], new_dst.0[2 * k + 1]]);
        c = update16(c, old, new);
        d[o..o + 2].copy_from_slice(&new.to_be_bytes());
    }
    let op = u16::from_be_bytes([d[l4 + 2], d[l4 + 3]]);
    c = update16(c, op, new_dst.1);
    d[l4 + 2..l4 + 4].copy_from_slice(&new_dst.1.to_be_bytes());
    d[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn changes_to_an_ipv6_head_reach_every_segment() {
    let pool = pool(256);
    let mut c = pool.cache();
    for kind in [Kind::Standard, Kind::Fraglist] {
        for hbh in [None, Some(3)] {
            let frames: Vec<Vec<u8>> = (0..5u32)
                .map(|i| tcp6(1 + i * 400, 400, 0, 64, DST6, hbh))
                .collect();
            let want: Vec<Vec<u8>> = (0..5u32)
                .map(|i| tcp6(1 + i * 400, 400, 0, 63, NAT6, hbh))
                .collect();
            let mut out = gro(&pool, &mut c, &frames, kind);
            assert_eq!(out.len(), 1);
            rewrite_head6(&pool, &mut out[0], true, NAT6);
            assert_eq!(split(&pool, &mut c, out), want, "{kind:?} TCP, HBH {hbh:?}");
            let frames: Vec<Vec<u8>> = (0..5u16).map(|i| udp6(i, 700, 64, DST6, hbh)).collect();
            let want: Vec<Vec<u8>> = (0..5u16).map(|i| udp6(i, 700, 63, NAT6, hbh)).collect();
            let mut out = gro(&pool, &mut c, &frames, kind);
            rewrite_head6(&pool, &mut out[0], false, NAT6);
            assert_eq!(split(&pool, &mut c, out), want, "{kind:?} UDP, HBH {hbh:?}");
        }
    }
    drop(c);
    assert_eq!(pool.free_in_pool(), 256);
}

#[test]
fn an_ipv6_single_buffer_super_packet_is_copied_into_segments() {
    let pool = pool(64);
    let mut c = pool.cache();
    let data: Vec<u8> = (0..3001).map(|i| (i * 13 + 1) as u8).collect();
    let mut whole = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(SRC6, DST6.0, 64)
        .udp(4000, DST6.1)
        .write(&mut whole, &data)
        .unwrap();
    let want: Vec<Vec<u8>> = data
        .chunks(1000)
        .map(|chunk| {
            let mut v = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv6(SRC6, DST6.0, 64)
                .udp(4000, DST6.1)
                .write(&mut v, chunk)
                .unwrap();
            v
        })
        .collect();
    let mut p = load(&pool, &mut c, &whole);
    {
        let v = pool.get_mut(&mut p);
        v.meta.l3 = v.meta.data + 14;
        v.meta.l4 = v.meta.l3 + 40;
        v.meta.gso_type = gso::UDPV6;
        v.meta.gso_size = 1000;
        v.meta.segs = 4;
    }
    assert_eq!(split(&pool, &mut c, vec![p]), want);
    drop(c);
    assert_eq!(pool.free_in_pool(), 64, "the original buffer is freed");
}
