//! `ip6-input`: the receive checks of RFC 8200 and RFC 4291, each failure its own drop
//! reason.
//!
//! In order: the 40-byte fixed header in the frame (`ip6_truncated`); version 6
//! (`ip6_version`, RFC 8200 §3); the payload length inside the frame (`ip6_payload_len`:
//! it counts every byte after the fixed header, RFC 8200 §3; link padding beyond it is
//! trimmed); the addresses, as Linux's `ip6_rcv_core` checks them: a multicast source
//! (`ip6_source_multicast`, RFC 4291 §2.7: never a source), the loopback address `::1` as
//! source or destination (`ip6_source_loopback`, `ip6_dest_loopback`, RFC 4291 §2.5.3:
//! it never leaves a node, and a packet received on an interface with it as destination
//! must be dropped; every packet here was received on a port), an unspecified destination
//! (`ip6_dest_unspecified`, RFC 4291 §2.5.2; an unspecified source is valid: duplicate
//! address detection sends from it), a multicast destination of interface-local or
//! reserved scope (`ip6_dest_multicast_scope`, RFC 4291 §2.7: scope 0 must be dropped
//! when received, and interface-local multicast is loopback only, erratum 3480); then the
//! extension header chain, walked within the dissector's bounds
//! ([`dissect::ip6_walk`]): every header whole inside the payload length
//! (`ip6_ext_truncated`), at most 8 headers and 256 bytes (`ip6_ext_chain_too_long`),
//! hop-by-hop only right after the fixed header (`ip6_hop_by_hop_not_first`, RFC 8200
//! §4.1), no extension header the walk cannot cross (`ip6_unrecognized_next_header`, RFC
//! 8200 §4).
//!
//! The chain's failures concern only a node that processes the headers (RFC 8200 §4: the
//! destination, or every node for a first hop-by-hop header; RFC 7045 §2.2: a forwarding
//! node must not discard a packet for a header it has not examined). So a packet whose
//! chain fails the walk anywhere but in a first hop-by-hop header is let through with
//! `flag::EXT_UNWALKED` (and no upper layer located): forwarded as it is, as the Linux
//! kernel forwards it, and refused by `ip6-route` if it turns out to be for us, with the
//! reason the walk gives (`refusal`). For a hop-by-hop header not first and an
//! extension header not crossed RFC 8200 §4 asks for an ICMPv6 Parameter Problem (code 1)
//! pointing at the next header field: the refusal asks `ip6-icmp-error` for it with the
//! [`Cause`] and the pointer (a [`Request`]), as `ip4-input` does. A first
//! hop-by-hop header cut by the payload length is dropped here, whatever the destination
//! (every node reads that header; Linux's `ipv6_parse_hopopts` drops it too). A packet
//! the dissector located the upper layer of has had its chain walked already (the same
//! walk, within the same bounds, over the same bytes once its payload length is known to
//! be inside the frame): the walk is repeated only for the others.
//!
//! Not checked here: the hop limit (a packet for this host may arrive with any; forwarding
//! decrements and checks it) and the options of hop-by-hop and destination options
//! headers. Jumbograms (RFC 2675: payload length 0 and a Jumbo Payload option) are not
//! supported: their hop-by-hop header lies past a payload length of 0, so they are
//! `ip6_ext_truncated`.

use netbatch_engine::{Cx, Out, PktList, Reason, Stage};
use netbatch_wire::ipv6::{self, HEADER_LEN, Ipv6Packet};
use netbatch_wire::ipv6ext::ExtError;

use super::Cause;
use super::icmp_error::Request;
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::{self, L3};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `ip6-input` drops a packet (RFC 8200 §3 and §4, RFC 4291).
    pub mod reason {
        TRUNCATED = "ip6_truncated": "IPv6 packet shorter than its 40-byte header",
        VERSION = "ip6_version": "IP version is not 6",
        PAYLOAD_LEN = "ip6_payload_len": "IPv6 payload length runs past the frame",
        SOURCE_MULTICAST = "ip6_source_multicast": "IPv6 source is a multicast address",
        SOURCE_LOOPBACK = "ip6_source_loopback": "IPv6 source is the loopback address ::1",
        DEST_LOOPBACK = "ip6_dest_loopback": "IPv6 destination is the loopback address ::1",
        DEST_UNSPECIFIED = "ip6_dest_unspecified": "IPv6 destination is the unspecified address ::",
        DEST_MULTICAST_SCOPE = "ip6_dest_multicast_scope": "IPv6 multicast destination of interface-local or reserved scope",
        EXT_TRUNCATED = "ip6_ext_truncated": "IPv6 extension header cut by the payload length",
        EXT_CHAIN_TOO_LONG = "ip6_ext_chain_too_long": "IPv6 extension header chain longer than 8 headers or 256 bytes",
        HOP_BY_HOP_NOT_FIRST = "ip6_hop_by_hop_not_first": "IPv6 hop-by-hop options header not right after the fixed header",
        UNRECOGNIZED_NEXT_HEADER = "ip6_unrecognized_next_header": "IPv6 extension header of a kind netbatch cannot cross",
    }
}

netbatch_engine::arcs! {
    /// Arc for valid packets.
    pub OK = "ok";
    /// Arc to the ICMPv6 error stage (a Parameter Problem).
    pub ERROR = "error";
}

/// The IPv6 input stage.
#[derive(Debug, Default)]
pub struct Ip6Input;

/// Why a packet fails the checks: its drop reason, and the ICMPv6 error RFC 8200 asks for
/// with the error's pointer, when it asks for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The drop reason.
    pub(crate) reason: Reason,
    /// The error to answer with, and its pointer.
    pub(crate) error: Option<(Cause, u32)>,
    /// Only a node that processes the extension headers refuses the packet: a router
    /// forwards it (see the module doc).
    local_only: bool,
}

impl From<Reason> for Failure {
    fn from(reason: Reason) -> Self {
        Self {
            reason,
            error: None,
            local_only: false,
        }
    }
}

impl Failure {
    /// The failure of a walk of the extension header chain of a packet whose fixed
    /// header names `first`.
    fn of_walk(e: ExtError, first: u8) -> Self {
        let (reason, error) = match e {
            ExtError::Truncated { .. } => (reason::EXT_TRUNCATED, None),
            ExtError::TooManyHeaders | ExtError::ChainTooLong => (reason::EXT_CHAIN_TOO_LONG, None),
            ExtError::HopByHopNotFirst { pointer } => (
                reason::HOP_BY_HOP_NOT_FIRST,
                Some((Cause::HopByHopNotFirst, pointer as u32)),
            ),
            ExtError::UnrecognizedNextHeader { pointer } => (
                reason::UNRECOGNIZED_NEXT_HEADER,
                Some((Cause::UnrecognizedNextHeader, pointer as u32)),
            ),
        };
        // A first hop-by-hop header (at 40) is every node's to read: cut, it fails in
        // transit too.
        let local_only = first != 0 || e != ExtError::Truncated { at: HEADER_LEN };
        Self {
            reason,
            error,
            local_only,
        }
    }
}

/// Why the packet `d` (from its IPv6 header, its length checked by `ip6-input`), which
/// `ip6-input` let through with `flag::EXT_UNWALKED`, is refused by the node it is for:
/// its walk's failure (a drop reason, and the Parameter Problem RFC 8200 §4 asks for).
#[cold]
pub(crate) fn refusal(d: &[u8]) -> Failure {
    let Ok(ip) = Ipv6Packet::new_checked(d) else {
        return reason::TRUNCATED.into();
    };
    match dissect::ip6_walk(&ip) {
        Err(e) => Failure::of_walk(e, ip.next_header().0),
        // Never: the flag is set only on a failed walk of these bytes.
        Ok(_) => reason::EXT_TRUNCATED.into(),
    }
}

/// Validates the packet `d` starts with, which has `avail` bytes (the frame's, or a
/// super-packet's over its buffer chain); `walked`: the dissector located its upper layer
/// (so its chain passes the walk). `Ok(40 + payload length)` or the failure.
#[inline(always)]
fn check(d: &[u8], avail: usize, walked: bool) -> Result<usize, Failure> {
    let Some(h) = d.first_chunk::<HEADER_LEN>() else {
        return Err(reason::TRUNCATED.into());
    };
    let ip = Ipv6Packet::new_unchecked(h);
    if ip.version() != 6 {
        return Err(reason::VERSION.into());
    }
    let total = HEADER_LEN + usize::from(ip.payload_len());
    if total > avail {
        return Err(reason::PAYLOAD_LEN.into());
    }
    addresses(u128::from(ip.src()), u128::from(ip.dst()))?;
    if !walked {
        let first = ip.next_header().0;
        dissect::ip6_walk(&Ipv6Packet::new_unchecked(d)).map_err(|e| Failure::of_walk(e, first))?;
    }
    Ok(total)
}

/// The address checks (see the module doc), on the addresses' bits: `ff00::/8` is
/// multicast (its scope the low four bits of the second byte), `::1` loopback, `::`
/// unspecified. The common case, a unicast source and a destination above `::1` that is
/// not multicast, takes three tests.
#[inline(always)]
fn addresses(src: u128, dst: u128) -> Result<(), Reason> {
    if src >> 120 == 0xff {
        return Err(reason::SOURCE_MULTICAST);
    }
    if src == 1 {
        return Err(reason::SOURCE_LOOPBACK);
    }
    if dst <= 1 {
        return Err(if dst == 1 {
            reason::DEST_LOOPBACK
        } else {
            reason::DEST_UNSPECIFIED
        });
    }
    if dst >> 120 == 0xff && matches!((dst >> 112) as u8 & 0x0f, 0 | ipv6::scope::INTERFACE_LOCAL) {
        return Err(reason::DEST_MULTICAST_SCOPE);
    }
    Ok(())
}

/// `ip6-input`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::IP6_DEFRAG, "ok")),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4, Field::Gso]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Ask]),
    ..Decl::new(node::IP6_INPUT, |_| Box::new(Ip6Input))
};

impl Stage<Host> for Ip6Input {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn process(&mut self, _host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let chained = v.meta.chain.is_some();
            let avail = v.meta.packet_len();
            let (m, d) = v.split();
            // Where the dissector located the upper layer, the chain passed the walk.
            let walked = m.l4 != 0 && m.l3 == m.data && L3::of(m) == L3::Ipv6;
            match check(d, avail, walked) {
                // A super-packet's padding was cut when it was built: its length is exact.
                Ok(total) if chained && total != avail => out.drop(p, reason::PAYLOAD_LEN),
                Ok(total) => {
                    if !walked {
                        // A packet no dissection reached (never in today's graph): the
                        // stages after this one read what the dissector records.
                        dissect::ip6_packet(&mut v);
                    }
                    v.truncate(total);
                    out.push(OK, p);
                }
                // A chain only the node it is for refuses: on, unwalked (the module doc).
                Err(f) if f.local_only && !chained => {
                    let total = HEADER_LEN
                        + d.first_chunk::<HEADER_LEN>().map_or(0, |h| {
                            usize::from(Ipv6Packet::new_unchecked(h).payload_len())
                        });
                    m.flags |= flag::EXT_UNWALKED;
                    v.truncate(total);
                    out.push(OK, p);
                }
                Err(f) => match f.error {
                    Some((cause, pointer)) => {
                        Request::with(cause, pointer).put(m);
                        out.push(ERROR, p);
                    }
                    None => out.drop(p, f.reason),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;

    /// A fixed header written out from RFC 8200 §3 (version 6, traffic class 0, flow label
    /// 0x12345, payload length `payload.len()`, next header `next`, hop limit 64) from
    /// 2001:db8::1 to 2001:db8::2, then `payload`.
    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0x01, 0x23, 0x45];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(&[next, 64]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(payload);
        v
    }

    /// A UDP header, 5000 → 53, length 12, and 4 bytes of data.
    const UDP: [u8; 12] = [0x13, 0x88, 0x00, 0x35, 0, 12, 0, 0, 1, 2, 3, 4];

    /// An options header (RFC 8200 §4.3, §4.6) of `len` bytes naming `next`: a PadN
    /// option fills it.
    fn opts(next: u8, len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0] = next;
        h[1] = (len / 8 - 1) as u8;
        h[2] = 1;
        h[3] = (len - 4).min(255) as u8;
        h
    }

    /// A packet whose fixed header names `first`, then `headers` (each naming the next,
    /// as built), then UDP.
    fn chained(first: u8, headers: &[Vec<u8>]) -> Vec<u8> {
        packet(first, &[headers.concat(), UDP.to_vec()].concat())
    }

    fn set_addr(p: &mut [u8], at: usize, a: &str) {
        p[at..at + 16].copy_from_slice(&a.parse::<Ipv6Addr>().unwrap().octets());
    }

    fn reason_of(p: &[u8]) -> Result<usize, Reason> {
        check(p, p.len(), false).map_err(|f| f.reason)
    }

    #[test]
    fn valid_packets_pass_with_their_length() {
        let plain = packet(17, &UDP);
        assert_eq!(reason_of(&plain), Ok(52));
        // Hop-by-hop (8), destination options (16), routing type 2 with segments left 0
        // (24, RFC 6275 §6.4), an atomic fragment (8), then UDP.
        let mut routing = vec![44, 2, 2, 0, 0, 0, 0, 0];
        routing.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        let frag = vec![17, 0, 0, 0, 0, 0, 0, 7];
        let full = chained(0, &[opts(60, 8), opts(43, 16), routing, frag]);
        assert_eq!(reason_of(&full), Ok(40 + 56 + 12));
        // No extension header and no upper layer: next header 59 with an empty payload.
        assert_eq!(reason_of(&packet(59, &[])), Ok(40));
        // The hop limit is not input's to check; an unspecified source is valid (DAD),
        // and so is a link-scope multicast destination.
        let mut p = packet(58, &[135, 0, 0, 0]);
        p[7] = 0;
        set_addr(&mut p, 8, "::");
        set_addr(&mut p, 24, "ff02::1:ff00:2");
        assert_eq!(reason_of(&p), Ok(44));
    }

    #[test]
    fn link_padding_is_trimmed() {
        let mut padded = packet(17, &UDP);
        padded.extend_from_slice(&[0; 14]);
        assert_eq!(reason_of(&padded), Ok(52), "40 + the payload length");
        // A chain the payload length ends is cut, whatever the padding holds.
        let mut cut = packet(60, &opts(60, 8));
        cut.extend(opts(17, 8));
        assert_eq!(reason_of(&cut), Err(reason::EXT_TRUNCATED));
    }

    #[test]
    fn each_failure_has_its_reason() {
        let good = packet(17, &UDP);
        assert_eq!(reason_of(&good[..39]), Err(reason::TRUNCATED));
        assert_eq!(reason_of(&[]), Err(reason::TRUNCATED));
        for version in [0u8, 4, 7, 15] {
            let mut p = good.clone();
            p[0] = (version << 4) | (p[0] & 0x0f);
            assert_eq!(reason_of(&p), Err(reason::VERSION), "{version}");
        }
        let mut long = good.clone();
        long[4..6].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(reason_of(&long), Err(reason::PAYLOAD_LEN));
        assert_eq!(
            reason_of(&good[..51]),
            Err(reason::PAYLOAD_LEN),
            "cut frame"
        );
        for (at, addr, r) in [
            (8, "ff02::1", reason::SOURCE_MULTICAST),
            (8, "ff0e::1:2", reason::SOURCE_MULTICAST),
            (8, "::1", reason::SOURCE_LOOPBACK),
            (24, "::1", reason::DEST_LOOPBACK),
            (24, "::", reason::DEST_UNSPECIFIED),
            (24, "ff01::1", reason::DEST_MULTICAST_SCOPE),
            (24, "ff00::1", reason::DEST_MULTICAST_SCOPE),
            (24, "ff11::2", reason::DEST_MULTICAST_SCOPE),
        ] {
            let mut p = good.clone();
            set_addr(&mut p, at, addr);
            assert_eq!(reason_of(&p), Err(r), "{addr} at {at}");
        }
        // The payload length cuts the second header short.
        let mut cut = chained(60, &[opts(60, 8), opts(17, 16)]);
        cut[4..6].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(reason_of(&cut), Err(reason::EXT_TRUNCATED));
    }

    /// Eight headers and 256 bytes are the most crossed: one more header, or 8 more bytes,
    /// is an overlong chain.
    #[test]
    fn the_chain_bounds_are_exact() {
        let dests = |n: usize, each: usize| {
            let hs: Vec<Vec<u8>> = (0..n)
                .map(|i| opts(if i + 1 == n { 17 } else { 60 }, each))
                .collect();
            chained(60, &hs)
        };
        assert_eq!(reason_of(&dests(8, 8)), Ok(40 + 64 + 12));
        assert_eq!(reason_of(&dests(9, 8)), Err(reason::EXT_CHAIN_TOO_LONG));
        assert_eq!(reason_of(&dests(1, 256)), Ok(40 + 256 + 12));
        assert_eq!(reason_of(&dests(4, 64)), Ok(40 + 256 + 12));
        assert_eq!(reason_of(&dests(1, 264)), Err(reason::EXT_CHAIN_TOO_LONG));
        assert_eq!(reason_of(&dests(3, 88)), Err(reason::EXT_CHAIN_TOO_LONG));
    }

    /// RFC 8200 §4: a next header of 0 after the fixed header, or an extension header not
    /// crossed, is a Parameter Problem pointing at the next header field that names it.
    #[test]
    fn parameter_problems_carry_their_pointer() {
        // Destination options (at 40) naming hop-by-hop.
        let p = chained(60, &[opts(0, 8), opts(17, 8)]);
        assert_eq!(
            check(&p, p.len(), false),
            Err(Failure {
                reason: reason::HOP_BY_HOP_NOT_FIRST,
                error: Some((Cause::HopByHopNotFirst, 40)),
                local_only: true,
            })
        );
        // Hop-by-hop (at 40), routing (at 48, 8 bytes) naming hop-by-hop again.
        let p = chained(0, &[opts(43, 8), vec![0, 0, 0, 0, 0, 0, 0, 0], opts(17, 8)]);
        assert_eq!(
            check(&p, p.len(), false),
            Err(Failure {
                reason: reason::HOP_BY_HOP_NOT_FIRST,
                error: Some((Cause::HopByHopNotFirst, 48)),
                local_only: true,
            })
        );
        // The fixed header naming Mobility (135): the pointer is its next header field, 6.
        let p = packet(135, &opts(59, 8));
        assert_eq!(
            check(&p, p.len(), false),
            Err(Failure {
                reason: reason::UNRECOGNIZED_NEXT_HEADER,
                error: Some((Cause::UnrecognizedNextHeader, 6)),
                local_only: true,
            })
        );
        // An experimental header (253) named by a header at 48.
        let p = chained(60, &[opts(60, 8), opts(253, 8)]);
        assert_eq!(
            check(&p, p.len(), false).map_err(|f| f.error),
            Err(Some((Cause::UnrecognizedNextHeader, 48)))
        );
        for c in [Cause::HopByHopNotFirst, Cause::UnrecognizedNextHeader] {
            assert!(reason::ALL.contains(&c.reason()));
        }
    }

    /// Skipping the walk for a packet the dissector located gives what the full checks
    /// give: for valid, padded and malformed packets in a frame, whenever the dissector
    /// located their upper layer.
    #[test]
    fn the_dissectors_walk_stands_for_the_checks() {
        let mut cases = vec![
            packet(17, &UDP),
            chained(
                0,
                &[opts(60, 8), opts(44, 16), vec![6, 0, 0, 1, 0, 0, 0, 7]],
            ),
            packet(60, &opts(60, 8)),
            chained(60, &[opts(0, 8)]),
        ];
        let base = cases.clone();
        for p in &base {
            let mut padded = p.clone();
            padded.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
            cases.push(padded);
            for at in [0usize, 4, 5, 6, 8, 24, 40, 41] {
                for x in [0x01u8, 0x10, 0xff] {
                    let mut q = p.clone();
                    if let Some(b) = q.get_mut(at) {
                        *b ^= x;
                        cases.push(q);
                    }
                }
            }
            for cut in 0..p.len() {
                cases.push(p[..cut].to_vec());
            }
        }
        let mut located = 0;
        for c in cases {
            let mut frame = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
            frame.extend_from_slice(&c);
            if dissect::parse(&frame).l4 == 0 {
                continue;
            }
            located += 1;
            assert_eq!(
                check(&c, c.len(), true),
                check(&c, c.len(), false),
                "{c:02x?}"
            );
        }
        assert!(located > 40, "{located}");
    }

    /// A super-packet's length is checked over its chain: the payload length may run past
    /// the first buffer, not past the chain.
    #[test]
    fn a_super_packets_length_is_its_chains() {
        let mut p = packet(17, &UDP);
        p[4..6].copy_from_slice(&3000u16.to_be_bytes());
        assert_eq!(check(&p, 3040, false).map_err(|f| f.reason), Ok(3040));
        assert_eq!(
            check(&p, 3039, false).map_err(|f| f.reason),
            Err(reason::PAYLOAD_LEN)
        );
    }
}
