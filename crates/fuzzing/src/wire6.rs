//! The IPv6 wire views: what any bytes do to them, as [`crate::wire`] checks the IPv4
//! ones.
//!
//! - `wire_ipv6`: the fixed header view over any bytes (its length rule and every field),
//!   the repr's checks in their documented order, parse → emit → parse (the header has
//!   one encoding: the emitted bytes are the input's), and the extension header walk
//!   against a second walk written here from RFC 8200 4 (the same bounds, every outcome
//!   and offset compared).
//! - `wire_icmpv6`: the input's first 32 bytes are the pseudo-header's addresses, the
//!   rest the message: the view, the repr's checksum check and choice of variant, parse →
//!   emit → parse, and neighbour solicitations and advertisements against a second
//!   reading of RFC 4861 4.3, 4.4 and 4.6 (lengths, flags, target, options).
//!
//! What is expected is computed here from the bytes, not asked of the views.

use std::net::Ipv6Addr;

use netbatch_wire::Error;
use netbatch_wire::checksum::reference;
use netbatch_wire::ethernet::MacAddr;
use netbatch_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use netbatch_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use netbatch_wire::ipv6ext::{self, ExtError};
use netbatch_wire::ndp::{NdpRepr, NeighborPacket};

/// The bounds the stack walks with (`dissect::ip6_walk`), used here for the comparison.
const MAX_HEADERS: usize = 8;
/// See [`MAX_HEADERS`].
const MAX_BYTES: usize = 256;

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

fn addr6(d: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&d[at..at + 16]);
    Ipv6Addr::from(a)
}

/// The end of an extension header chain as RFC 8200 4 describes it: (upper-layer
/// protocol, its offset, the offset of the next header field naming it, the first
/// fragment header's (offset, fragment offset in bytes, M, identification)); for a later
/// fragment, the protocol its data continues and where that data starts.
type Walked = (u8, usize, usize, Option<(usize, u16, bool, u32)>);

/// A second walk of the chain of `p` (the bytes up to the payload length), within the
/// bounds.
fn walk(p: &[u8]) -> Result<Walked, ExtError> {
    let mut next = p[6];
    let mut next_at = 6;
    let mut at = 40;
    let mut count = 0;
    let mut frag = None;
    loop {
        match next {
            0 if at != 40 => return Err(ExtError::HopByHopNotFirst { pointer: next_at }),
            0 | 43 | 44 | 60 | 51 => {}
            135 | 139 | 140 | 253 | 254 => {
                return Err(ExtError::UnrecognizedNextHeader { pointer: next_at });
            }
            upper => return Ok((upper, at, next_at, frag)),
        }
        if count == MAX_HEADERS {
            return Err(ExtError::TooManyHeaders);
        }
        let Some(&l) = p.get(at + 1) else {
            return Err(ExtError::Truncated { at });
        };
        let len = match next {
            44 => 8,
            51 => (usize::from(l) + 2) * 4,
            _ => (usize::from(l) + 1) * 8,
        };
        if at + len - 40 > MAX_BYTES {
            return Err(ExtError::ChainTooLong);
        }
        if at + len > p.len() {
            return Err(ExtError::Truncated { at });
        }
        if next == 44 {
            let w = be16(p, at + 2);
            let ident = u32::from_be_bytes([p[at + 4], p[at + 5], p[at + 6], p[at + 7]]);
            let first = *frag.get_or_insert((at, w & 0xfff8, w & 1 != 0, ident));
            // A later fragment's data is not headers (RFC 8200 4.5): the walk ends after
            // the fragment header, naming the protocol the data continues.
            if w & 0xfff8 != 0 {
                return Ok((p[at], at + 8, at, Some(first)));
            }
        }
        next_at = at;
        next = p[at];
        at += len;
        count += 1;
    }
}

/// IPv6: the fixed header view, its repr, and the extension header walk.
pub fn wire_ipv6(data: &[u8]) {
    let p = match Ipv6Packet::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            assert!(data.len() < 40, "refused a whole header: {e:?}");
            assert_eq!(e, Error::Truncated);
            assert_eq!(
                Ipv6Repr::parse(&Ipv6Packet::new_unchecked(data)),
                Err(Error::Truncated)
            );
            return;
        }
    };
    assert!(data.len() >= 40);
    let word = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
    assert_eq!(p.version(), data[0] >> 4);
    assert_eq!(p.traffic_class(), (word >> 20) as u8);
    assert_eq!(
        (p.dscp(), p.ecn()),
        ((word >> 22) as u8 & 0x3f, (word >> 20) as u8 & 3)
    );
    assert_eq!(p.flow_label(), word & 0xf_ffff);
    let plen = be16(data, 4);
    assert_eq!(p.payload_len(), plen);
    assert_eq!((p.next_header().0, p.hop_limit()), (data[6], data[7]));
    assert_eq!((p.src(), p.dst()), (addr6(data, 8), addr6(data, 24)));
    let end = (40 + usize::from(plen)).min(data.len());
    assert_eq!(
        p.payload(),
        &data[40..end],
        "payload up to the payload length"
    );
    assert_eq!(p.packet(), &data[..end]);

    let expected = if data[0] >> 4 != 6 {
        Err(Error::Malformed)
    } else if 40 + usize::from(plen) > data.len() {
        Err(Error::Truncated)
    } else {
        Ok(())
    };
    let repr = Ipv6Repr::parse(&p);
    assert_eq!(repr.map(|_| ()), expected, "{data:02x?}");
    if let Ok(repr) = repr {
        assert_eq!(repr.payload_len, usize::from(plen));
        let mut out = [0xa5u8; 40];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], data[..40], "the header has one encoding");
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(
                &[&out[..], &data[40..end]].concat()[..]
            )),
            Ok(repr)
        );
    }

    // The walk over the bytes up to the payload length, whatever the version.
    let got = ipv6ext::walk(&p, MAX_HEADERS, MAX_BYTES).map(|u| {
        (
            u.protocol.0,
            u.offset,
            u.next_header_at,
            u.fragment.map(|f| (f.at, f.offset, f.more, f.ident)),
        )
    });
    assert_eq!(got, walk(&data[..end]), "{data:02x?}");
}

/// The second reading of a neighbour solicitation or advertisement (RFC 4861 4.3, 4.4,
/// 4.6): the target, and the first link-layer address option of the message's kind, or
/// the error the documentation gives.
fn ndp(m: &[u8]) -> Result<(bool, Ipv6Addr, Option<MacAddr>), Error> {
    let solicit = match m.first() {
        Some(135) => true,
        Some(136) => false,
        Some(_) => return Err(Error::Unsupported),
        None => return Err(Error::Truncated),
    };
    if m.len() < 24 {
        return Err(Error::Truncated);
    }
    if m[1] != 0 {
        return Err(Error::Malformed);
    }
    let target = addr6(m, 8);
    if m[8] == 0xff {
        return Err(Error::Malformed);
    }
    let want = if solicit { 1 } else { 2 };
    let mut mac = None;
    let mut rest = &m[24..];
    while !rest.is_empty() {
        let Some(&units) = rest.get(1) else {
            return Err(Error::Truncated);
        };
        if units == 0 {
            return Err(Error::Malformed);
        }
        let len = usize::from(units) * 8;
        if len > rest.len() {
            return Err(Error::Truncated);
        }
        let opt = &rest[..len];
        match opt[0] {
            3 if len != 32 => return Err(Error::Malformed),
            5 if len != 8 => return Err(Error::Malformed),
            t if t == want && mac.is_none() => {
                let mut b = [0u8; 6];
                b.copy_from_slice(&opt[2..8]);
                mac = Some(MacAddr(b));
            }
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok((solicit, target, mac))
}

/// ICMPv6 (addresses from the input's first 32 bytes).
pub fn wire_icmpv6(data: &[u8]) {
    if data.len() < 32 {
        return;
    }
    let (src, dst) = (addr6(data, 0), addr6(data, 16));
    let m = &data[32..];
    let mut pseudo = Vec::with_capacity(40 + m.len());
    pseudo.extend_from_slice(&data[..32]);
    pseudo.extend_from_slice(&(m.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(m);
    let sum_ok = reference::ones_complement_sum(&pseudo) == 0xffff;
    match Icmpv6Packet::new_checked(m) {
        Err(e) => {
            assert!(m.len() < 8);
            assert_eq!(e, Error::Truncated);
        }
        Ok(p) => {
            assert_eq!((p.msg_type().0, p.code()), (m[0], m[1]));
            assert_eq!(p.checksum(), be16(m, 2));
            assert_eq!(
                p.rest_of_header(),
                u32::from_be_bytes([m[4], m[5], m[6], m[7]])
            );
            assert_eq!((p.ident(), p.seq_no()), (be16(m, 4), be16(m, 6)));
            assert_eq!(p.data(), &m[8..]);
            assert_eq!(p.is_error(), m[0] < 128);
            assert_eq!(p.verify_checksum(src, dst), sum_ok);
            let repr = Icmpv6Repr::parse(&p, src, dst);
            if !sum_ok {
                assert_eq!(repr, Err(Error::Checksum));
            } else {
                let r = repr.expect("a whole message with a valid checksum parses");
                let variant_ok = match (m[0], m[1], r) {
                    (128, 0, Icmpv6Repr::EchoRequest { ident, seq_no, .. })
                    | (129, 0, Icmpv6Repr::EchoReply { ident, seq_no, .. }) => {
                        (ident, seq_no) == (be16(m, 4), be16(m, 6))
                    }
                    (1, c, Icmpv6Repr::DestUnreachable { code, .. })
                    | (3, c, Icmpv6Repr::TimeExceeded { code, .. }) => c == code,
                    (2, 0, Icmpv6Repr::PacketTooBig { mtu, .. }) => {
                        mtu == u32::from_be_bytes([m[4], m[5], m[6], m[7]])
                    }
                    (4, c, Icmpv6Repr::ParamProblem { code, pointer, .. }) => {
                        c == code && pointer == u32::from_be_bytes([m[4], m[5], m[6], m[7]])
                    }
                    (t, c, Icmpv6Repr::Other { msg_type, code, .. }) => {
                        !matches!((t, c), (128 | 129 | 2, 0) | (1 | 3 | 4, _))
                            && (msg_type.0, code) == (t, c)
                    }
                    _ => false,
                };
                assert!(variant_ok, "{r:?} for {m:02x?}");
                assert_eq!(r.data(), &m[8..]);
                let mut out = vec![0xa5; r.buffer_len()];
                r.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..]), src, dst);
                let q = Icmpv6Packet::new_checked(&out[..]).expect("emitted");
                assert!(q.verify_checksum(src, dst));
                assert_eq!(Icmpv6Repr::parse(&q, src, dst), Ok(r));
            }
        }
    }
    // Neighbour discovery, whatever the checksum.
    let got = NdpRepr::parse(&NeighborPacket::new_unchecked(m));
    let want = ndp(m);
    match (got, want) {
        (Err(a), Err(b)) => assert_eq!(a, b, "{m:02x?}"),
        (
            Ok(NdpRepr::NeighborSolicit {
                target,
                source_lladdr,
            }),
            Ok((true, t, mac)),
        ) => {
            assert_eq!((target, source_lladdr), (t, mac));
        }
        (
            Ok(NdpRepr::NeighborAdvert {
                router_flag,
                solicited_flag,
                override_flag,
                target,
                target_lladdr,
            }),
            Ok((false, t, mac)),
        ) => {
            assert_eq!((target, target_lladdr), (t, mac));
            assert_eq!(
                (router_flag, solicited_flag, override_flag),
                (m[4] & 0x80 != 0, m[4] & 0x40 != 0, m[4] & 0x20 != 0)
            );
        }
        (a, b) => panic!("{a:?} against {b:?} for {m:02x?}"),
    }
    if let Ok(nd) = NdpRepr::parse(&NeighborPacket::new_unchecked(m)) {
        let mut out = vec![0x5a; nd.buffer_len()];
        nd.emit(&mut NeighborPacket::new_unchecked(&mut out[..]), src, dst);
        let q = NeighborPacket::new_checked(&out[..]).expect("emitted");
        assert!(q.verify_checksum(src, dst));
        assert_eq!(NdpRepr::parse(&q), Ok(nd), "parse → emit → parse");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet with a chain and an NDP message the checks accept, as seeds.
    #[test]
    fn good_packets_pass_every_check() {
        let mut p = vec![0x60, 0, 0, 0, 0, 24, 0, 64];
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0, 17, 0, 0, 1, 0, 0, 0, 9]);
        p.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        wire_ipv6(&p);
        assert_eq!(
            walk(&p).map(|w| (w.0, w.1, w.2)),
            Ok((17, 56, 48)),
            "hop-by-hop, fragment, UDP"
        );
        let mut n = p[8..40].to_vec();
        n.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
        n.extend_from_slice(&p[24..40]);
        n.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 1]);
        wire_icmpv6(&n);
        assert_eq!(
            ndp(&n[32..]).map(|x| x.2),
            Ok(Some(MacAddr([2, 0, 0, 0, 0, 1])))
        );
    }
}
