//! The wire views: what any bytes do to them.
//!
//! For each view: `new_checked` accepts exactly the lengths its documentation states (and
//! says why it refuses the others), every accessor of an accepted view returns what the
//! bytes at its documented place say, and the repr's `parse` accepts or refuses in the
//! documented order. Where a repr exists, parse → emit → parse gives the same repr, and
//! emitting that again gives the same bytes; for the formats with a single encoding
//! (Ethernet, VLAN, ARP) the emitted bytes are the input's. Transport checks take the
//! IPv4 addresses of the pseudo-header from the input's first bytes.
//!
//! What is expected is computed here from the bytes, not asked of the views: a second
//! reading of each format (and RFC 1071's plain checksum, the bitwise Toeplitz hash) to
//! compare the views with.

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use netbatch_wire::checksum::{self, reference};
use netbatch_wire::ethernet::{self, EthernetFrame, EthernetRepr, MacAddr};
use netbatch_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use netbatch_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use netbatch_wire::tcp::{TcpOption, TcpPacket, TcpRepr, TcpTimestamp};
use netbatch_wire::toeplitz::{self, Toeplitz};
use netbatch_wire::udp::{self, UdpPacket, UdpRepr};
use netbatch_wire::vlan::{VlanHeader, VlanRepr};
use netbatch_wire::{ArpPacket, ArpRepr, Error, arp};

use crate::input::Input;

/// A big-endian 16-bit word of `d` at `at`. Read here on purpose, not through
/// `wire::bytes`: these checks compare the views with reads that do not share their code.
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// A big-endian 32-bit word of `d` at `at`.
fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// An IPv4 address of `d` at `at`.
fn addr(d: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3])
}

/// Whether the RFC 1071 sum of `parts`, concatenated, verifies (sums to 0xffff). Every
/// part but the last must have even length.
fn verifies(parts: &[&[u8]]) -> bool {
    reference::ones_complement_sum(&parts.concat()) == 0xffff
}

/// The RFC 1071 checksum of the IPv4 pseudo-header for `len` bytes of protocol `proto`
/// followed by `segment`, the segment's checksum field read as it is.
fn pseudo(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> [u8; 12] {
    let mut p = [0; 12];
    p[..4].copy_from_slice(&src.octets());
    p[4..8].copy_from_slice(&dst.octets());
    p[9] = proto;
    p[10..].copy_from_slice(&len.to_be_bytes());
    p
}

/// Ethernet II: the header view over any bytes, its repr (one encoding), and MAC address
/// text (the input read as text).
pub fn wire_ethernet(data: &[u8]) {
    mac_text(data);
    let f = match EthernetFrame::new_checked(data) {
        Ok(f) => f,
        Err(e) => {
            assert!(data.len() < ethernet::HEADER_LEN, "refused {e:?}");
            assert_eq!(e, Error::Truncated);
            return;
        }
    };
    assert!(data.len() >= ethernet::HEADER_LEN, "accepted a short frame");
    assert_eq!(f.dst().0, data[..6]);
    assert_eq!(f.src().0, data[6..12]);
    assert_eq!(f.ethertype().0, be16(data, 12));
    assert_eq!(f.payload(), &data[14..]);
    let dst = f.dst();
    assert_eq!(dst.is_multicast(), data[0] & 1 == 1);
    assert_eq!(dst.is_unicast(), !dst.is_multicast());
    assert_eq!(dst.is_broadcast(), data[..6] == [0xff; 6]);
    assert_eq!(dst.to_string().parse::<MacAddr>(), Ok(dst));

    let repr = EthernetRepr::parse(&f).expect("a checked frame parses");
    let mut out = vec![0xa5; repr.buffer_len(f.payload().len())];
    out[repr.header_len()..].copy_from_slice(f.payload());
    repr.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    assert_eq!(out, data, "an Ethernet header has one encoding");
    let again = EthernetRepr::parse(&EthernetFrame::new_checked(&out[..]).expect("emitted"));
    assert_eq!(again, Ok(repr));
}

/// `aa:bb:cc:dd:ee:ff` text: accepted exactly when it is six pairs of hex digits joined
/// by colons, and then printed back in lower case.
fn mac_text(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let b = s.as_bytes();
    let well_formed = b.len() == 17
        && b.iter().enumerate().all(|(i, c)| {
            if i % 3 == 2 {
                *c == b':'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    match s.parse::<MacAddr>() {
        Ok(m) => {
            assert!(well_formed, "accepted {s:?}");
            assert_eq!(m.to_string(), s.to_ascii_lowercase());
        }
        Err(e) => {
            assert!(!well_formed, "refused {s:?}");
            assert_eq!(e, Error::Malformed);
        }
    }
}

/// 802.1Q / 802.1ad tags: the view over any bytes and its repr (one encoding).
pub fn wire_vlan(data: &[u8]) {
    let t = match VlanHeader::new_checked(data) {
        Ok(t) => t,
        Err(e) => {
            assert!(data.len() < 4 && e == Error::Truncated, "refused {e:?}");
            return;
        }
    };
    let tci = be16(data, 0);
    assert_eq!(t.tci(), tci);
    assert_eq!(t.pcp(), (tci >> 13) as u8);
    assert_eq!(t.dei(), tci & 0x1000 != 0);
    assert_eq!(t.vid(), tci & 0x0fff);
    assert_eq!(t.ethertype().0, be16(data, 2));
    assert_eq!(t.payload(), &data[4..]);

    let repr = VlanRepr::parse(&t).expect("a checked tag parses");
    let mut out = vec![0x5a; repr.buffer_len(t.payload().len())];
    out[repr.header_len()..].copy_from_slice(t.payload());
    repr.emit(&mut VlanHeader::new_unchecked(&mut out[..]));
    assert_eq!(out, data, "a VLAN tag has one encoding");
    let again = VlanRepr::parse(&VlanHeader::new_checked(&out[..]).expect("emitted"));
    assert_eq!(again, Ok(repr));
}

/// ARP for Ethernet and IPv4: the view, which packets the repr takes (and why not the
/// others), and the repr's one encoding.
pub fn wire_arp(data: &[u8]) {
    let p = match ArpPacket::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            assert!(data.len() < arp::PACKET_LEN && e == Error::Truncated);
            return;
        }
    };
    assert_eq!(p.htype(), be16(data, 0));
    assert_eq!(p.ptype().0, be16(data, 2));
    assert_eq!((p.hlen(), p.plen()), (data[4], data[5]));
    assert_eq!(p.oper(), be16(data, 6));
    assert_eq!(p.sha().0, data[8..14]);
    assert_eq!(p.spa(), addr(data, 14));
    assert_eq!(p.tha().0, data[18..24]);
    assert_eq!(p.tpa(), addr(data, 24));

    let expected = if data[..6] != [0, 1, 8, 0, 6, 4] {
        Err(Error::Unsupported)
    } else if !matches!(be16(data, 6), 1 | 2) {
        Err(Error::Malformed)
    } else {
        Ok(())
    };
    let repr = ArpRepr::parse(&p);
    assert_eq!(repr.map(|_| ()), expected, "{data:02x?}");
    let Ok(repr) = repr else {
        return;
    };
    let mut out = [0xa5; arp::PACKET_LEN];
    assert_eq!(repr.buffer_len(), out.len());
    repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
    assert_eq!(
        out,
        data[..arp::PACKET_LEN],
        "an ARP packet has one encoding"
    );
    let again = ArpRepr::parse(&ArpPacket::new_checked(&out[..]).expect("emitted"));
    assert_eq!(again, Ok(repr));
}

/// Whether an IPv4 options area is well formed (RFC 791 3.1): end of list stops, no
/// operation is one byte, every other option has a length byte of at least 2 that stays
/// inside the area.
fn ipv4_options_ok(opts: &[u8]) -> bool {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return true,
            1 => i += 1,
            _ => match opts.get(i + 1) {
                Some(&l) if l >= 2 && i + usize::from(l) <= opts.len() => i += usize::from(l),
                _ => return false,
            },
        }
    }
    true
}

/// IPv4: the view over any bytes (its length rule, every field, options and payload
/// bounds), the repr's checks in their documented order, and parse → emit → parse.
pub fn wire_ipv4(data: &[u8]) {
    let p = match Ipv4Packet::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            let expected = if data.len() < 20 {
                Error::Truncated
            } else if data[0] & 0x0f < 5 {
                Error::Malformed
            } else {
                Error::Truncated
            };
            assert_eq!(e, expected, "{data:02x?}");
            return;
        }
    };
    let hl = usize::from(data[0] & 0x0f) * 4;
    assert!(
        hl >= 20 && data.len() >= hl,
        "accepted a cut header: {data:02x?}"
    );
    assert_eq!((p.version(), p.ihl()), (data[0] >> 4, data[0] & 0x0f));
    assert_eq!(p.header_len(), hl);
    assert_eq!(
        (p.dscp(), p.ecn(), p.dscp_ecn()),
        (data[1] >> 2, data[1] & 3, data[1])
    );
    let total = be16(data, 2);
    assert_eq!(p.total_len(), total);
    assert_eq!(p.ident(), be16(data, 4));
    let frag = be16(data, 6);
    assert_eq!(p.dont_frag(), frag & 0x4000 != 0);
    assert_eq!(p.more_frags(), frag & 0x2000 != 0);
    assert_eq!(u32::from(p.frag_offset()), u32::from(frag & 0x1fff) * 8);
    assert_eq!(p.is_fragment(), frag & 0x3fff != 0);
    assert_eq!(p.is_first_fragment(), frag & 0x3fff == 0x2000);
    assert_eq!((p.ttl(), p.protocol().0), (data[8], data[9]));
    assert_eq!(p.checksum(), be16(data, 10));
    assert_eq!((p.src(), p.dst()), (addr(data, 12), addr(data, 16)));
    assert_eq!(p.options(), &data[20..hl]);
    let end = usize::from(total).clamp(hl, data.len());
    assert_eq!(
        p.payload(),
        &data[hl..end],
        "payload up to the total length"
    );
    let sum_ok = verifies(&[&data[..hl]]);
    assert_eq!(p.verify_checksum(), sum_ok);
    let options_ok = ipv4_options_ok(&data[20..hl]);
    assert_eq!(p.check_options().is_ok(), options_ok);

    // Setters write their field and nothing else; the checksum then verifies.
    let mut copy = data.to_vec();
    {
        let mut q = Ipv4Packet::new_unchecked(&mut copy[..]);
        q.set_ttl(data[8].wrapping_sub(1));
        q.set_ident(!be16(data, 4));
        q.set_frag_offset(frag.wrapping_mul(8) ^ 0x0008);
        q.set_dont_frag(frag & 0x4000 == 0);
        q.fill_checksum();
    }
    let q = Ipv4Packet::new_checked(&copy[..]).expect("same lengths");
    assert_eq!(q.ttl(), data[8].wrapping_sub(1));
    assert_eq!(q.ident(), !be16(data, 4));
    assert_eq!(q.dont_frag(), frag & 0x4000 == 0);
    assert_eq!(q.more_frags(), frag & 0x2000 != 0);
    assert_eq!(q.frag_offset(), (frag.wrapping_mul(8) ^ 0x0008) & !7);
    assert!(q.verify_checksum());
    assert!(verifies(&[&copy[..hl]]));
    assert_eq!(copy[..4], data[..4]);
    assert_eq!(copy[9], data[9]);
    assert_eq!(
        copy[12..],
        data[12..],
        "addresses, options, payload untouched"
    );

    let expected = if data[0] >> 4 != 4 || usize::from(total) < hl {
        Err(Error::Malformed)
    } else if usize::from(total) > data.len() {
        Err(Error::Truncated)
    } else if !options_ok {
        Err(Error::Malformed)
    } else if !sum_ok {
        Err(Error::Checksum)
    } else if frag & 0x3fff != 0 {
        Err(Error::Unsupported)
    } else {
        Ok(())
    };
    let repr = Ipv4Repr::parse(&p);
    assert_eq!(repr.map(|_| ()), expected, "{data:02x?}");
    let Ok(repr) = repr else {
        return;
    };
    assert_eq!(repr.payload_len, usize::from(total) - hl);
    let payload = &data[hl..usize::from(total)];
    let out = emit_ipv4(&repr, payload);
    assert_eq!(out[20..], *payload);
    let q = Ipv4Packet::new_checked(&out[..]).expect("emitted");
    let again = Ipv4Repr::parse(&q);
    assert_eq!(again, Ok(repr));
    assert_eq!(
        emit_ipv4(&repr, payload),
        out,
        "emitting twice gives the same bytes"
    );
    // What the repr keeps comes back as it was: all but the options, the reserved flag
    // bit and the checksum (whose two encodings of zero both verify).
    assert_eq!(out[1], data[1]);
    assert_eq!(out[4..6], data[4..6]);
    assert_eq!(usize::from(be16(&out, 2)), 20 + repr.payload_len);
    assert_eq!(out[6] & 0x40, data[6] & 0x40);
    assert_eq!(out[8..10], data[8..10]);
    assert_eq!(out[12..20], data[12..20]);
    if hl == 20 && data[6] & 0x80 == 0 {
        let (a, b) = (be16(&out, 10), be16(data, 10));
        assert!(
            a == b || (a | b == 0xffff && a & b == 0),
            "checksum {a:04x} for {b:04x}"
        );
    }
}

fn emit_ipv4(repr: &Ipv4Repr, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0xa5; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(payload);
    repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
    out
}

/// ICMPv4: the view, the repr's checksum check and choice of variant, and parse → emit →
/// parse (bytes the repr ignores are emitted as zero).
pub fn wire_icmpv4(data: &[u8]) {
    let p = match Icmpv4Packet::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            assert!(data.len() < 8 && e == Error::Truncated);
            return;
        }
    };
    assert_eq!((p.msg_type().0, p.code()), (data[0], data[1]));
    assert_eq!(p.checksum(), be16(data, 2));
    assert_eq!(p.rest_of_header(), be32(data, 4));
    assert_eq!((p.ident(), p.seq_no()), (be16(data, 4), be16(data, 6)));
    assert_eq!(p.next_hop_mtu(), be16(data, 6));
    assert_eq!(p.data(), &data[8..]);
    assert_eq!(p.is_error(), matches!(data[0], 3 | 4 | 5 | 11 | 12));
    let sum_ok = verifies(&[data]);
    assert_eq!(p.verify_checksum(), sum_ok);

    let repr = Icmpv4Repr::parse(&p);
    if !sum_ok {
        assert_eq!(repr, Err(Error::Checksum));
        return;
    }
    let repr = repr.expect("a message whose checksum verifies parses");
    let ignored = match (repr, data[0], data[1]) {
        (Icmpv4Repr::EchoRequest { .. }, 8, 0) | (Icmpv4Repr::EchoReply { .. }, 0, 0) => 0..0,
        (Icmpv4Repr::DestUnreachable { .. }, 3, _) => 4..6,
        (Icmpv4Repr::TimeExceeded { .. }, 11, _) => 4..8,
        (Icmpv4Repr::Other { .. }, t, c)
            if !matches!((t, c), (8, 0) | (0, 0) | (3, _) | (11, _)) =>
        {
            0..0
        }
        (r, t, c) => panic!("type {t} code {c} parsed as {r:?}"),
    };
    assert_eq!(repr.data(), &data[8..]);
    assert_eq!(repr.buffer_len(), data.len());
    let out = emit_icmp(&repr);
    let mut want = data.to_vec();
    want[ignored].fill(0);
    assert_eq!(out[..2], want[..2]);
    assert_eq!(out[4..], want[4..]);
    assert!(verifies(&[&out]), "the emitted checksum verifies");
    let again = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&out[..]).expect("emitted"));
    assert_eq!(again, Ok(repr));
    assert_eq!(emit_icmp(&repr), out, "emitting twice gives the same bytes");
    if want == data {
        let (a, b) = (be16(&out, 2), be16(data, 2));
        assert!(
            a == b || (a | b == 0xffff && a & b == 0),
            "checksum {a:04x} for {b:04x}"
        );
    }
}

fn emit_icmp(repr: &Icmpv4Repr<'_>) -> Vec<u8> {
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
    out
}

/// UDP (input: source address, destination address, a new port, a new address, then the
/// datagram): the view and its clamped payload, the checksum rule (zero: none), which
/// datagrams the repr takes, parse → emit → parse, and incremental checksum updates of a
/// port and an address equal to recomputing.
pub fn wire_udp(data: &[u8]) {
    let mut i = Input::new(data);
    let (src, dst) = (
        Ipv4Addr::from(i.array::<4>()),
        Ipv4Addr::from(i.array::<4>()),
    );
    let (new_port, new_addr) = (i.u16(), i.u32());
    let d = i.bytes(usize::MAX);
    let p = match UdpPacket::new_checked(d) {
        Ok(p) => p,
        Err(e) => {
            assert!(d.len() < 8 && e == Error::Truncated);
            return;
        }
    };
    let len = be16(d, 4);
    assert_eq!((p.src_port(), p.dst_port()), (be16(d, 0), be16(d, 2)));
    assert_eq!((p.len(), p.checksum()), (len, be16(d, 6)));
    let end = usize::from(len).clamp(8, d.len());
    assert_eq!(p.payload(), &d[8..end]);
    let sum_ok = be16(d, 6) == 0 || verifies(&[&pseudo(src, dst, 17, len), &d[..end]]);
    assert_eq!(p.verify_checksum(src, dst), sum_ok);

    let expected = if len < 8 {
        Err(Error::Malformed)
    } else if usize::from(len) > d.len() {
        Err(Error::Truncated)
    } else {
        Ok(())
    };
    let repr = UdpRepr::parse(&p);
    assert_eq!(repr.map(|_| ()), expected);
    let Ok(repr) = repr else {
        return;
    };
    let payload = &d[8..usize::from(len)];
    let fill = be16(d, 6) != 0;
    let out = emit_udp(&repr, payload, src, dst, fill);
    let q = UdpPacket::new_checked(&out[..]).expect("emitted");
    assert_eq!(UdpRepr::parse(&q), Ok(repr));
    assert!(q.verify_checksum(src, dst));
    assert_eq!(emit_udp(&repr, payload, src, dst, fill), out);
    assert_eq!(out[..6], d[..6]);
    assert_eq!(out[8..], *payload);
    if sum_ok {
        assert_eq!(out, d[..usize::from(len)], "a verified checksum is kept");
    }

    // Incremental updates (RFC 1624) of the emitted datagram's checksum.
    let hc = q.checksum();
    let mut moved = out.clone();
    UdpPacket::new_unchecked(&mut moved[..]).set_src_port(new_port);
    let mut full = moved.clone();
    if fill {
        UdpPacket::new_unchecked(&mut full[..]).fill_checksum(src, dst);
    }
    let upd = udp::update16(hc, repr.src_port, new_port);
    assert_eq!(upd, be16(&full, 6), "port update of {hc:04x}");
    let new_src = Ipv4Addr::from(new_addr);
    if fill {
        UdpPacket::new_unchecked(&mut moved[..]).fill_checksum(new_src, dst);
    }
    let upd = udp::update32(be16(&full, 6), src.to_bits(), new_addr);
    assert_eq!(upd, be16(&moved, 6), "address update");
}

fn emit_udp(repr: &UdpRepr, payload: &[u8], src: Ipv4Addr, dst: Ipv4Addr, fill: bool) -> Vec<u8> {
    let mut out = vec![0xa5; repr.buffer_len(payload.len())];
    out[repr.header_len()..].copy_from_slice(payload);
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut out[..]),
        payload.len(),
        src,
        dst,
        fill,
    );
    out
}

/// What a second reading of a TCP options area finds: the common options (the last of
/// each kind wins), or `None` when an option is malformed.
fn tcp_options(opts: &[u8]) -> Option<TcpRepr> {
    let mut r = TcpRepr {
        src_port: 0,
        dst_port: 0,
        seq_number: 0,
        ack_number: 0,
        flags: Default::default(),
        window: 0,
        urgent_pointer: 0,
        max_seg_size: None,
        window_scale: None,
        sack_permitted: false,
        timestamp: None,
    };
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        if kind == 0 {
            break;
        }
        if kind == 1 {
            i += 1;
            continue;
        }
        let l = usize::from(*opts.get(i + 1)?);
        if l < 2 || i + l > opts.len() {
            return None;
        }
        let body = &opts[i + 2..i + l];
        match (kind, body.len()) {
            (2, 2) => r.max_seg_size = Some(be16(body, 0)),
            (3, 1) => r.window_scale = Some(body[0]),
            (4, 0) => r.sack_permitted = true,
            (5, n) if n > 0 && n % 8 == 0 => {}
            (8, 8) => {
                r.timestamp = Some(TcpTimestamp {
                    tsval: be32(body, 0),
                    tsecr: be32(body, 4),
                });
            }
            (2..=5 | 8, _) => return None,
            _ => {}
        }
        i += l;
    }
    Some(r)
}

/// TCP (input: source address, destination address, a new port, then the segment): the
/// view and its length rule, the options iterator, which segments the repr takes (compared
/// with a second reading of the options), parse → emit → parse, and an incremental
/// checksum update equal to recomputing.
pub fn wire_tcp(data: &[u8]) {
    let mut i = Input::new(data);
    let (src, dst) = (
        Ipv4Addr::from(i.array::<4>()),
        Ipv4Addr::from(i.array::<4>()),
    );
    let new_port = i.u16();
    let d = i.bytes(usize::MAX);
    let p = match TcpPacket::new_checked(d) {
        Ok(p) => p,
        Err(e) => {
            let expected = if d.len() < 20 {
                Error::Truncated
            } else if d[12] >> 4 < 5 {
                Error::Malformed
            } else {
                Error::Truncated
            };
            assert_eq!(e, expected);
            return;
        }
    };
    let hl = usize::from(d[12] >> 4) * 4;
    assert!(hl >= 20 && d.len() >= hl);
    assert_eq!((p.src_port(), p.dst_port()), (be16(d, 0), be16(d, 2)));
    assert_eq!((p.seq_number(), p.ack_number()), (be32(d, 4), be32(d, 8)));
    assert_eq!(p.header_len(), hl);
    assert_eq!(p.flags().bits(), be16(d, 12) & 0x01ff);
    assert_eq!((p.window(), p.checksum()), (be16(d, 14), be16(d, 16)));
    assert_eq!(p.urgent_pointer(), be16(d, 18));
    assert_eq!(p.options(), &d[20..hl]);
    assert_eq!(p.payload(), &d[hl..]);
    let sum_ok = d.len() <= 0xffff && verifies(&[&pseudo(src, dst, 6, d.len() as u16), d]);
    assert_eq!(p.verify_checksum(src, dst), sum_ok);
    // The iterator ends, after at most one item per option byte and at most one error.
    let items: Vec<_> = p.options_iter().take(41).collect();
    assert!(items.len() <= hl - 20, "{items:?}");
    let errors = items.iter().filter(|o| o.is_err()).count();
    assert!(errors <= 1 && (errors == 0 || items.last().is_some_and(Result::is_err)));
    if let Some(pos) = items.iter().position(|o| *o == Ok(TcpOption::EndOfList)) {
        assert_eq!(pos + 1, items.len(), "nothing after the end of the list");
    }

    let second = tcp_options(&d[20..hl]);
    let repr = TcpRepr::parse(&p);
    assert_eq!(repr.is_ok(), second.is_some(), "{:02x?}", &d[20..hl]);
    let (Ok(repr), Some(second)) = (repr, second) else {
        return;
    };
    assert_eq!(
        (
            repr.max_seg_size,
            repr.window_scale,
            repr.sack_permitted,
            repr.timestamp
        ),
        (
            second.max_seg_size,
            second.window_scale,
            second.sack_permitted,
            second.timestamp
        )
    );
    let payload = &d[hl..];
    let out = emit_tcp(&repr, payload, src, dst);
    let q = TcpPacket::new_checked(&out[..]).expect("emitted");
    assert_eq!(TcpRepr::parse(&q), Ok(repr));
    assert!(q.verify_checksum(src, dst));
    assert_eq!(q.payload(), payload);
    assert_eq!(emit_tcp(&repr, payload, src, dst), out);
    assert_eq!(out[..12], d[..12]);
    assert_eq!(out[14..16], d[14..16]);
    assert_eq!(out[18..20], d[18..20]);

    let hc = q.checksum();
    let mut moved = out.clone();
    let mut m = TcpPacket::new_unchecked(&mut moved[..]);
    m.set_dst_port(new_port);
    m.fill_checksum(src, dst);
    let upd = checksum::update16(hc, repr.dst_port, new_port);
    assert_eq!(upd, be16(&moved, 16), "port update of {hc:04x}");
}

fn emit_tcp(repr: &TcpRepr, payload: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut out = vec![0xa5; repr.buffer_len(payload.len())];
    out[repr.header_len()..].copy_from_slice(payload);
    repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), src, dst);
    out
}

/// The Internet checksum (input: a split point, a new 16-bit and 32-bit value, then the
/// data): the fast sum equals RFC 1071's plain one, whole or summed in parts (even splits
/// through `sum`, any split through `add_part`), the fixed-size sums agree, the
/// pseudo-header sum is the sum of its bytes, and incremental updates equal recomputing.
pub fn wire_checksum(data: &[u8]) {
    let mut i = Input::new(data);
    let (at, new16, new32) = (usize::from(i.u16()), i.u16(), i.u32());
    let d = i.bytes(usize::MAX);
    let whole = reference::ones_complement_sum(d);
    assert_eq!(checksum::fold(checksum::sum(d, 0)), whole);
    assert_eq!(checksum::checksum(d), reference::checksum(d));
    assert_eq!(checksum::finish(checksum::sum(d, 0)), !whole);

    let cut = if d.is_empty() { 0 } else { at % (d.len() + 1) };
    let even = cut & !1;
    let (a, b) = d.split_at(even);
    assert_eq!(checksum::fold(checksum::sum(b, checksum::sum(a, 0))), whole);
    let (a, b) = d.split_at(cut);
    let parts = checksum::add_part(
        checksum::add_part(0, checksum::fold(checksum::sum(a, 0)), false),
        checksum::fold(checksum::sum(b, 0)),
        cut % 2 == 1,
    );
    assert_eq!(checksum::fold(parts), whole, "split at {cut}");

    if let Some(h) = d.first_chunk::<20>() {
        let s = reference::ones_complement_sum(h);
        assert_eq!(checksum::fold(checksum::sum_words(h)), s);
        assert_eq!(checksum::verify_words(h), s == 0xffff);
    }
    if let Some(h) = d.first_chunk::<12>() {
        let (src, dst) = (addr(h, 0), addr(h, 4));
        let (proto, len) = (h[9], be16(h, 10));
        let want = reference::ones_complement_sum(&pseudo(src, dst, proto, len));
        let got = checksum::fold(checksum::pseudo_header_v4(src, dst, proto, len));
        assert_eq!(got, want);
    }

    // RFC 1624: updating a 16-bit field at an even offset, or a 32-bit field, gives the
    // recomputed checksum unless the data becomes all zero (whose checksum is 0xffff).
    let c = checksum::checksum(d);
    if d.len() >= 2 {
        let w = (at % (d.len() / 2)) * 2;
        let mut e = d.to_vec();
        e[w..w + 2].copy_from_slice(&new16.to_be_bytes());
        if e.iter().any(|&x| x != 0) {
            let upd = checksum::update16(c, be16(d, w), new16);
            assert_eq!(upd, checksum::checksum(&e), "word at {w}");
        }
    }
    if d.len() >= 4 {
        let w = (at % (d.len() / 2 - 1)) * 2;
        let mut e = d.to_vec();
        e[w..w + 4].copy_from_slice(&new32.to_be_bytes());
        if e.iter().any(|&x| x != 0) {
            let upd = checksum::update32(c, be32(d, w), new32);
            assert_eq!(upd, checksum::checksum(&e), "long word at {w}");
        }
    }
}

/// The table-driven Toeplitz hash equals the bitwise one of the specification, for the
/// default key or a key from the input, over inputs up to the 12 bytes of an IPv4 4-tuple,
/// and the 4-tuple helper hashes the addresses and ports in order.
pub fn wire_toeplitz(data: &[u8]) {
    static MS: OnceLock<Toeplitz> = OnceLock::new();
    let mut i = Input::new(data);
    let own_key = i.u8() & 1 == 1;
    let key = if own_key {
        i.array::<40>()
    } else {
        toeplitz::MS_KEY
    };
    let built;
    let t = if own_key {
        built = Toeplitz::new(&key);
        &built
    } else {
        MS.get_or_init(|| Toeplitz::new(&toeplitz::MS_KEY))
    };
    let rest = i.bytes(usize::MAX);
    let n = rest.len().min(toeplitz::MAX_INPUT);
    assert_eq!(t.hash(rest), toeplitz::hash_bitwise(&key, &rest[..n]));
    let tuple: [u8; 12] = std::array::from_fn(|k| rest.get(k).copied().unwrap_or(0));
    let (s, d) = (
        [tuple[0], tuple[1], tuple[2], tuple[3]],
        [tuple[4], tuple[5], tuple[6], tuple[7]],
    );
    let ports = (be16(&tuple, 8), be16(&tuple, 10));
    assert_eq!(
        t.ipv4(s, d, Some(ports)),
        toeplitz::hash_bitwise(&key, &tuple)
    );
    assert_eq!(
        t.ipv4(s, d, None),
        toeplitz::hash_bitwise(&key, &tuple[..8])
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks accept known-good packets from their RFCs and from the wire crate's own
    /// fixtures (so a check that refused everything would fail here).
    #[test]
    fn good_packets_pass_every_check() {
        // RFC 791-style example header: UDP, 192.168.0.1 -> 192.168.0.199, total 28.
        let mut ip = vec![
            0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 199,
        ];
        ip.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 8, 0, 0]);
        netbatch_wire::ipv4::fill_header_checksum(&mut ip, 20);
        wire_ipv4(&ip);
        let mut pad = ip.clone();
        pad.extend_from_slice(&[0; 6]);
        wire_ipv4(&pad);
        let mut udp_in = vec![192, 168, 0, 1, 192, 168, 0, 199, 0x12, 0x34, 10, 0, 0, 1];
        udp_in.extend_from_slice(&ip[20..]);
        wire_udp(&udp_in);
        wire_ethernet(b"02:AB:0c:d0:00:ff");
        wire_ethernet(&[0xff; 20]);
        wire_vlan(&[0xb1, 0x23, 8, 0, 0x45]);
        let arp_req = [
            0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 2, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
        ];
        wire_arp(&arp_req);
        let mut echo = vec![8, 0, 0, 0, 0, 1, 0, 2, b'h', b'i'];
        let c = checksum::checksum(&echo);
        echo[2..4].copy_from_slice(&c.to_be_bytes());
        wire_icmpv4(&echo);
        wire_checksum(&[0, 3, 0xab, 0xcd, 1, 2, 3, 4, 0x45, 0, 0, 0x73, 0, 0, 0x40]);
        wire_toeplitz(&[
            0, 66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6,
        ]);
    }

    /// A property that fails is reported as a panic (the fuzzer's crash): a checksum that
    /// the reference rejects must not be called valid, and an ARP packet of an unsupported
    /// hardware type must be refused, so feeding the checks bytes whose expectations are
    /// stated by hand exercises both branches.
    #[test]
    fn refused_packets_are_refused_for_the_documented_reason() {
        let arp_bad_htype = [
            0, 6, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 2, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
        ];
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&arp_bad_htype[..]).unwrap()),
            Err(Error::Unsupported)
        );
        wire_arp(&arp_bad_htype);
        let bad_sum = [
            0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0x12, 0x34, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&bad_sum[..]).unwrap()),
            Err(Error::Checksum)
        );
        wire_ipv4(&bad_sum);
    }
}
