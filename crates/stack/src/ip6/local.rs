//! `ip6-local`: the extension headers of a packet for us (RFC 8200 4), then the demux by
//! upper-layer protocol.
//!
//! A fragment (a Fragment header that is not atomic) goes to `ip6-reassemble`
//! ([`crate::ip6::defrag`]), which sends its datagram back here once whole, as a defrag
//! chain (`flag::DEFRAG_CHAIN`; with tracking `ip6-defrag` made it already); on a port
//! paired with a host interface a fragment is handed to the kernel instead, which
//! reassembles. A chain's head is walked like a whole packet: its Fragment header is
//! crossed as an atomic fragment's is. Then each extension header in order:
//! - Hop-by-Hop and Destination Options: every option that is not padding nor Router
//!   Alert (RFC 2711) is one this node does not recognize, and its type's two high bits
//!   say what to do (RFC 8200 4.2): skip it; discard the packet (`ip6_unknown_option`);
//!   discard it and answer Parameter Problem code 2 pointing at the option; the same,
//!   answering only when the destination is not multicast. A malformed options area
//!   (an option running past its header) is a Parameter Problem code 0 at the header.
//! - Routing: with no segments left it is ignored; with segments left, netbatch follows
//!   no routing type (type 0 is deprecated, RFC 5095; it implements no other), so the
//!   packet is discarded with Parameter Problem code 0 pointing at the routing type
//!   (`ip6_routing_header`, RFC 8200 4.4).
//! - Authentication Header: netbatch verifies no IPsec, so AH (and ESP) for us are
//!   upper layers it has no handler for.
//!
//! The upper layer then: a protocol some stage takes goes to that stage (its declaration
//! registers it, [`crate::declare::Take`]: UDP, ICMPv6 and TCP in the stack), one table
//! load per packet; No Next Header ends the packet (`ip6_no_next_header`, RFC 8200 4.7); anything else goes to the host kernel of
//! a paired port, or asks for Parameter Problem code 1 pointing at the next header field
//! that names it (RFC 8200 4: the IPv6 form of protocol unreachable).

use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::ipv6::Protocol;
use netbatch_wire::ipv6ext::{self, Ipv6ExtHeader, OptionAction, option_type};

use super::Cause;
use super::icmp_error::Request;
use crate::assemble::node;
use crate::declare::{Decl, Decode, Demux, Family, To};
use crate::host::Host;
use crate::hostif::punt_port;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `ip6-local` does not deliver a packet.
    pub mod reason {
        UNKNOWN_NEXT_HEADER = "ip6_unknown_next_header": "no handler for the IPv6 upper-layer protocol",
        UNKNOWN_OPTION = "ip6_unknown_option": "IPv6 option not recognized, its type says discard",
        ROUTING_HEADER = "ip6_routing_header": "IPv6 routing header with segments left, of a type netbatch does not follow",
        BAD_OPTIONS = "ip6_bad_options": "IPv6 options area malformed",
        NO_NEXT_HEADER = "ip6_no_next_header": "IPv6 packet with no upper-layer header (next header 59)",
    }
}

netbatch_engine::arcs! {
    /// Arc to the ICMPv6 error stage.
    pub ERROR = "error";
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
    /// Arc to `ip6-reassemble` (fragments).
    pub REASSEMBLE = "reassemble";
}

/// `ip6-local`, the IPv6 local protocol demux: after its own arcs, one to each stage
/// that takes an IPv6 upper-layer protocol.
pub const DECL: Decl = Decl {
    arcs: &[
        ("error", To::Node(node::IP6_ICMP_ERROR)),
        ("host", crate::hostif::TO_HOST),
        ("reassemble", To::Node(node::IP6_REASSEMBLE)),
    ],
    demux: Some(Family::V6),
    reasons: &[
        reason::ALL,
        super::input::reason::ALL,
        crate::hostif::reason::ALL,
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4, Field::InPort, Field::Dest]),
    writes: Fields::of(&[Field::Ask]),
    ..Decl::new(node::IP6_LOCAL, |m| Box::new(Ip6Local::new(m.demux(ARCS))))
};

/// The IPv6 local delivery stage.
#[derive(Debug, Clone)]
pub struct Ip6Local {
    /// The arc to the stage of each upper-layer protocol.
    demux: Demux,
}

impl Ip6Local {
    /// The stage over `demux` (made from its own arcs, [`ARCS`]).
    pub fn new(demux: Demux) -> Self {
        Self { demux }
    }
}

/// What the walk of a packet's extension headers decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Deliver its upper layer (the protocol the dissector recorded, `Meta::l4_type`): the
    /// offset of the next header field that named it, for a Parameter Problem's pointer.
    Upper(usize),
    /// Drop silently for this reason.
    Drop(netbatch_engine::Reason),
    /// Answer with this error, the pointer (an offset from the IPv6 header) with it.
    Error(Cause, usize),
}

/// Walks the extension headers of the packet `d` (starting at its IPv6 header, whose
/// chain the dissector's walk accepted) and applies what each asks of its destination;
/// `multicast`: the destination is a multicast group. This walk acts on the options and
/// routing headers (what the dissector, which only locates, leaves to the destination);
/// where the chain ends and which upper layer it names are the dissector's record.
fn walk(d: &[u8], multicast: bool) -> Verdict {
    let mut next = d.get(6).copied().unwrap_or(Protocol::NO_NEXT_HEADER.0);
    let mut next_at = 6;
    let mut at = netbatch_wire::ipv6::HEADER_LEN;
    // The dissector's walk crossed at most its bounds; so does this one.
    for _ in 0..=crate::dissect::IP6_EXT_MAX_HEADERS {
        let rest = d.get(at..).unwrap_or_default();
        match Protocol(next) {
            Protocol::HOP_BY_HOP | Protocol::DEST_OPTS => {
                let Ok(h) = Ipv6ExtHeader::new_checked(rest) else {
                    return Verdict::Drop(super::input::reason::EXT_TRUNCATED);
                };
                for o in h.options() {
                    let Ok(o) = o else {
                        return Verdict::Error(Cause::BadOptions, at + 1);
                    };
                    if o.is_padding() || o.option_type == option_type::ROUTER_ALERT {
                        continue;
                    }
                    let report = match o.action() {
                        OptionAction::Skip => continue,
                        OptionAction::Discard => false,
                        OptionAction::DiscardAndReport => true,
                        OptionAction::DiscardAndReportUnlessMulticast => !multicast,
                    };
                    return if report {
                        Verdict::Error(Cause::UnknownOption, at + o.at)
                    } else {
                        Verdict::Drop(reason::UNKNOWN_OPTION)
                    };
                }
                next_at = at;
                next = h.next_header().0;
                at += h.header_len();
            }
            Protocol::ROUTING => {
                let Ok(h) = Ipv6ExtHeader::new_checked(rest) else {
                    return Verdict::Drop(super::input::reason::EXT_TRUNCATED);
                };
                if h.segments_left() != 0 {
                    // The routing type field: the header's third byte.
                    return Verdict::Error(Cause::BadHeader, at + 2);
                }
                next_at = at;
                next = h.next_header().0;
                at += h.header_len();
            }
            Protocol::FRAGMENT => {
                // An atomic fragment (the others never get here): a whole packet.
                let Some(&nh) = rest.first() else {
                    return Verdict::Drop(super::input::reason::EXT_TRUNCATED);
                };
                next_at = at;
                next = nh;
                at += ipv6ext::FRAGMENT_HEADER_LEN;
            }
            _ => return Verdict::Upper(next_at),
        }
    }
    Verdict::Drop(super::input::reason::EXT_CHAIN_TOO_LONG)
}

impl Stage<Host> for Ip6Local {
    fn arcs(&self) -> &[&'static str] {
        self.demux.arcs()
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            let paired = punt_port(host, v.meta.in_port).is_some();
            if v.meta.flags & (flag::FRAG6 | flag::DEFRAG_CHAIN) == flag::FRAG6 {
                if paired {
                    out.push(HOST, p);
                } else {
                    out.push(REASSEMBLE, p);
                }
                continue;
            }
            // The common case, no extension header: the upper layer is right after the
            // fixed header, as the dissector recorded.
            let (proto, next_at) = if v.meta.l4.wrapping_sub(v.meta.l3) == 40 {
                (v.meta.l4_type, 6)
            } else {
                let multicast = v.meta.flags & flag::L3_MULTICAST != 0;
                match walk(v.data(), multicast) {
                    Verdict::Upper(at) => (v.meta.l4_type, at),
                    Verdict::Drop(r) => {
                        out.drop(p, r);
                        continue;
                    }
                    Verdict::Error(cause, pointer) => {
                        Request::with(cause, pointer as u32).put(v.meta);
                        out.push(ERROR, p);
                        continue;
                    }
                }
            };
            match self.demux.next(proto) {
                Some(a) => out.push(a, p),
                None if proto == Protocol::NO_NEXT_HEADER.0 => {
                    out.drop(p, reason::NO_NEXT_HEADER);
                }
                None if paired => out.push(HOST, p),
                None => {
                    Request::with(Cause::UnknownNextHeader, next_at as u32).put(v.meta);
                    out.push(ERROR, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 packet (2001:db8::1 → 2001:db8::2) whose fixed header names `first`, then
    /// `chain` (hand-written headers), then 8 bytes of upper layer.
    fn packet(first: u8, chain: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0];
        v.extend_from_slice(&((chain.len() + 8) as u16).to_be_bytes());
        v.extend_from_slice(&[first, 64]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(chain);
        v.extend_from_slice(&[0; 8]);
        v
    }

    #[test]
    fn options_act_by_their_type_bits() {
        // Destination options (8 bytes) naming UDP: an option of type `t` with 2 bytes of
        // data at offset 2 (pointer 42), then PadN... as Pad1s.
        let with = |t: u8| packet(60, &[17, 0, t, 2, 0, 0, 0, 0]);
        assert_eq!(walk(&with(0x1e), false), Verdict::Upper(40), "00: skipped");
        assert_eq!(
            walk(&with(option_type::ROUTER_ALERT), false),
            Verdict::Upper(40)
        );
        assert_eq!(
            walk(&with(0x5e), false),
            Verdict::Drop(reason::UNKNOWN_OPTION),
            "01"
        );
        assert_eq!(
            walk(&with(0x9e), true),
            Verdict::Error(Cause::UnknownOption, 42),
            "10"
        );
        assert_eq!(
            walk(&with(0xde), false),
            Verdict::Error(Cause::UnknownOption, 42),
            "11"
        );
        assert_eq!(
            walk(&with(0xde), true),
            Verdict::Drop(reason::UNKNOWN_OPTION),
            "11, multicast"
        );
        // An option whose data runs past the header: the options area is malformed.
        assert_eq!(
            walk(&packet(60, &[17, 0, 0x1e, 9, 0, 0, 0, 0]), false),
            Verdict::Error(Cause::BadOptions, 41)
        );
    }

    #[test]
    fn routing_headers_with_segments_left_are_refused() {
        // Hop-by-hop (8, pad) → routing type 0 with 0 segments left (24) → UDP.
        let mut chain = vec![43, 0, 1, 4, 0, 0, 0, 0];
        chain.extend_from_slice(&[17, 2, 0, 0, 0, 0, 0, 0]);
        chain.extend_from_slice(&[0; 16]);
        assert_eq!(walk(&packet(0, &chain), false), Verdict::Upper(48));
        // Segments left 1: Parameter Problem code 0 at the routing type (48 + 2).
        chain[8 + 3] = 1;
        assert_eq!(
            walk(&packet(0, &chain), false),
            Verdict::Error(Cause::BadHeader, 50)
        );
    }

    #[test]
    fn an_atomic_fragment_is_crossed() {
        // Fragment header, offset 0, M clear, then an unknown protocol (253 is refused by
        // the dissector's walk; 99 is not): its pointer is the fragment's next header.
        let p = packet(44, &[99, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(walk(&p, false), Verdict::Upper(40));
    }
}
