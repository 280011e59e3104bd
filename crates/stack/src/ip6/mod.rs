//! IPv6 (RFC 8200), one stage per file, named after the packet's path:
//!
//! `ip6-input` (validation) → `ip6-route` (local or forward) → `ip6-local` (extension
//! headers for us, then the upper-layer demux) | `ip6-forward` (hop limit) → … →
//! `ip6-neighbour` (`crate::nd::resolve`: the output MTU, neighbour discovery, the link
//! header); for packets this host originates, `ip6-local-out` (route, fill the source).
//! `ip6-icmp-error` turns a packet that carries a request for an ICMPv6-worthy [`Cause`]
//! into that error, in place (RFC 4443). IPv6 routers never fragment (RFC 8200 5): a
//! forwarded packet larger than its output link's MTU is answered with Packet Too Big.
//!
//! Invariant after `ip6-input`: the packet starts at a version-6 header (`Meta::data ==
//! Meta::l3`); its length is 40 plus the header's payload length (link padding trimmed);
//! its extension header chain lies inside that length and was walked by the dissector's
//! bounded walk ([`crate::dissect::ip6_walk`]: hop-by-hop only first, no header the walk
//! cannot cross), and `Meta::l4` / `Meta::l4_type` name where it ends (the upper-layer
//! header, or a later fragment's data: `flag::FRAG6_LATER`) — unless it carries
//! `flag::EXT_UNWALKED`: a chain that fails the walk beyond a first hop-by-hop header,
//! which a router forwards unexamined (RFC 8200 §4, RFC 7045 §2.2) and `ip6-route`
//! refuses on local delivery, so that `ip6-local` only ever sees walked chains; its source is neither
//! multicast nor loopback, its destination neither loopback, unspecified, nor a
//! multicast group of a scope no packet from another node may carry. The hop limit is
//! not checked there (forwarding's job), nor are the options inside hop-by-hop and
//! destination options headers (`ip6-local`'s, for packets to us).
//!
//! RFCs: 8200 (the header, §3; extension headers and their order, §4 and §4.1), 4291
//! (addresses: unspecified §2.5.2, loopback §2.5.3, link-local §2.5.6, multicast §2.7),
//! 4443 (ICMPv6 errors, [`Cause`]), 4861 (neighbour discovery, `crate::nd`).

pub mod defrag;
pub mod forward;
pub mod icmp_error;
pub mod input;
pub mod local;
pub mod local_out;
pub mod redirect;
pub mod route;

use netbatch_engine::Reason;
use netbatch_wire::ipv6::{HEADER_LEN, Ipv6Packet};

/// A view of the fixed IPv6 header `d` starts with; `None` when `d` is shorter. Stages
/// after `ip6-input` see packets whose header is whole, so they treat `None` as a
/// truncated packet.
#[inline(always)]
pub(crate) fn header(d: &[u8]) -> Option<Ipv6Packet<&[u8; HEADER_LEN]>> {
    d.first_chunk().map(Ipv6Packet::new_unchecked)
}

/// As [`header`], to rewrite fields in place.
#[inline(always)]
pub(crate) fn header_mut(d: &mut [u8]) -> Option<Ipv6Packet<&mut [u8; HEADER_LEN]>> {
    d.first_chunk_mut().map(Ipv6Packet::new_unchecked)
}

/// The source and destination address bits of the IPv6 header `d` starts with.
#[inline(always)]
pub(crate) fn addrs(d: &[u8; HEADER_LEN]) -> (u128, u128) {
    let ip = Ipv6Packet::new_unchecked(d);
    (u128::from(ip.src()), u128::from(ip.dst()))
}

/// Why an IPv6 packet deserves an ICMPv6 error (RFC 4443), asked of `ip6-icmp-error` by
/// the stage that found it in an [`icmp_error::Request`], with the parameter the error
/// carries (a pointer, an MTU), as IPv4 asks ([`crate::ip4::icmp_error::Cause`]). The
/// codes start at 0x601, away from the IPv4 causes', so that no request reads as both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Cause {
    /// A hop-by-hop header other than right after the fixed header (RFC 8200 §4: the same
    /// action as an unrecognized next header); the offset of the next header field that
    /// holds its 0 in the request's parameter.
    HopByHopNotFirst = 0x601,
    /// An extension header the walk cannot cross (RFC 8200 §4); the offset of the next
    /// header field that names it in the request's parameter.
    UnrecognizedNextHeader,
    /// The hop limit would reach 0 in transit: Time Exceeded, code 0 (RFC 8200 §3, RFC
    /// 4443 §3.3).
    HopLimitExceeded,
    /// No route: Destination Unreachable, code 0.
    NoRoute,
    /// An unreachable route: Destination Unreachable, code 0 (as Linux answers for
    /// `unreachable` routes).
    RouteUnreachable,
    /// A prohibit route: Destination Unreachable, code 1 (administratively prohibited).
    RouteProhibit,
    /// A link-local source leaving by another link: Destination Unreachable, code 2
    /// (beyond scope of source address, RFC 4443 §3.1, RFC 4007 §9).
    BeyondScope,
    /// The next hop did not answer neighbour discovery: Destination Unreachable, code 3
    /// (address unreachable, RFC 4861 §7.2.2).
    NeighFailed,
    /// No socket on the UDP port: Destination Unreachable, code 4 (port unreachable).
    NoSocket,
    /// Larger than the next link's MTU (which is in the request's parameter): Packet Too Big
    /// (RFC 4443 §3.2, RFC 8201).
    PacketTooBig,
    /// A routing header to follow, of a type netbatch does not follow: Parameter Problem,
    /// code 0, the offset of its routing type in the request's parameter (RFC 8200 4.4).
    BadHeader,
    /// A malformed options area: Parameter Problem, code 0, the offset of the header's
    /// length field in the request's parameter.
    BadOptions,
    /// An upper-layer protocol netbatch has no handler for: Parameter Problem, code 1, the
    /// offset of the next header field naming it in the request's parameter (RFC 8200 §4).
    UnknownNextHeader,
    /// An option whose type says to answer when it is not recognized: Parameter Problem,
    /// code 2, the offset of the option in the request's parameter (RFC 8200 §4.2).
    UnknownOption,
    /// A policy rule `unreachable`: Destination Unreachable, code 0 (Linux's
    /// `ip6_null_entry`).
    RuleUnreachable,
    /// A policy rule `prohibit`: Destination Unreachable, code 1 (administratively
    /// prohibited).
    RuleProhibit,
    /// A datagram not whole within the reassembly timeout, its first fragment received:
    /// Time Exceeded, code 1 (fragment reassembly time exceeded, RFC 8200 4.5; Linux's
    /// `ip6frag_expire_frag_queue`).
    ReassemblyTimeout,
}

impl Cause {
    /// Every cause, in counter order.
    pub const ALL: [Self; 17] = [
        Self::HopByHopNotFirst,
        Self::UnrecognizedNextHeader,
        Self::HopLimitExceeded,
        Self::NoRoute,
        Self::RouteUnreachable,
        Self::RouteProhibit,
        Self::BeyondScope,
        Self::NeighFailed,
        Self::NoSocket,
        Self::PacketTooBig,
        Self::BadHeader,
        Self::BadOptions,
        Self::UnknownNextHeader,
        Self::UnknownOption,
        Self::RuleUnreachable,
        Self::RuleProhibit,
        Self::ReassemblyTimeout,
    ];

    /// The ICMPv6 (type, code) it causes (RFC 4443 §3).
    pub const fn icmp(self) -> (u8, u8) {
        match self {
            Self::HopByHopNotFirst | Self::UnrecognizedNextHeader | Self::UnknownNextHeader => {
                (4, 1)
            }
            Self::HopLimitExceeded => (3, 0),
            Self::ReassemblyTimeout => (3, 1),
            Self::NoRoute | Self::RouteUnreachable | Self::RuleUnreachable => (1, 0),
            Self::RouteProhibit | Self::RuleProhibit => (1, 1),
            Self::BeyondScope => (1, 2),
            Self::NeighFailed => (1, 3),
            Self::NoSocket => (1, 4),
            Self::PacketTooBig => (2, 0),
            Self::BadHeader | Self::BadOptions => (4, 0),
            Self::UnknownOption => (4, 2),
        }
    }

    /// Whether the error may answer a packet sent to a multicast address or in a
    /// link-layer multicast or broadcast frame: only Packet Too Big and a Parameter
    /// Problem about an option whose type asks for it (RFC 4443 §2.4 (e.3), (e.4)).
    pub const fn answers_multicast(self) -> bool {
        matches!(self, Self::PacketTooBig | Self::UnknownOption)
    }

    /// The drop reason of a packet with this cause that gets no error.
    pub const fn reason(self) -> Reason {
        match self {
            Self::HopByHopNotFirst => input::reason::HOP_BY_HOP_NOT_FIRST,
            Self::UnrecognizedNextHeader => input::reason::UNRECOGNIZED_NEXT_HEADER,
            Self::HopLimitExceeded => forward::reason::HOP_LIMIT,
            Self::NoRoute => crate::route::reason::NO_ROUTE,
            Self::RouteUnreachable => crate::route::reason::UNREACHABLE,
            Self::RouteProhibit => crate::route::reason::PROHIBIT,
            Self::BeyondScope => route::reason::BEYOND_SCOPE,
            Self::NeighFailed => crate::neigh::reason::FAILED,
            Self::NoSocket => crate::udp::input::reason::NO_SOCKET,
            Self::PacketTooBig => crate::nd::resolve::reason::TOO_BIG,
            Self::BadHeader => local::reason::ROUTING_HEADER,
            Self::BadOptions => local::reason::BAD_OPTIONS,
            Self::UnknownNextHeader => local::reason::UNKNOWN_NEXT_HEADER,
            Self::UnknownOption => local::reason::UNKNOWN_OPTION,
            Self::RuleUnreachable => crate::route::reason::RULE_UNREACHABLE,
            Self::RuleProhibit => crate::route::reason::RULE_PROHIBIT,
            Self::ReassemblyTimeout => crate::defrag::reason::TIMEOUT,
        }
    }

    /// The name of the counter of errors sent for it.
    const fn counter(self) -> &'static str {
        match self {
            Self::HopByHopNotFirst => "sent_ip6_hop_by_hop_not_first",
            Self::UnrecognizedNextHeader => "sent_ip6_unrecognized_next_header",
            Self::HopLimitExceeded => "sent_ip6_hop_limit_exceeded",
            Self::NoRoute => "sent_no_route",
            Self::RouteUnreachable => "sent_route_unreachable",
            Self::RouteProhibit => "sent_route_prohibit",
            Self::BeyondScope => "sent_ip6_beyond_scope",
            Self::NeighFailed => "sent_neigh_failed",
            Self::NoSocket => "sent_no_socket",
            Self::PacketTooBig => "sent_ip6_packet_too_big",
            Self::BadHeader => "sent_ip6_routing_header",
            Self::BadOptions => "sent_ip6_bad_options",
            Self::UnknownNextHeader => "sent_ip6_unknown_next_header",
            Self::UnknownOption => "sent_ip6_unknown_option",
            Self::RuleUnreachable => "sent_rule_unreachable",
            Self::RuleProhibit => "sent_rule_prohibit",
            Self::ReassemblyTimeout => "sent_defrag_timeout",
        }
    }
}

impl crate::ask::Cause for Cause {
    const ALL: &'static [Self] = &Self::ALL;

    #[inline(always)]
    fn code(self) -> u16 {
        self as u16
    }

    fn param(self) -> Option<&'static str> {
        match self {
            Self::PacketTooBig => Some("mtu"),
            Self::HopLimitExceeded
            | Self::ReassemblyTimeout
            | Self::NoRoute
            | Self::RouteUnreachable
            | Self::RouteProhibit
            | Self::RuleUnreachable
            | Self::RuleProhibit
            | Self::BeyondScope
            | Self::NeighFailed
            | Self::NoSocket => None,
            Self::HopByHopNotFirst
            | Self::UnrecognizedNextHeader
            | Self::BadHeader
            | Self::BadOptions
            | Self::UnknownNextHeader
            | Self::UnknownOption => Some("pointer"),
        }
    }
}

impl crate::route::rule::WalkCauses for Cause {
    const NO_ROUTE: Self = Self::NoRoute;
    const RULE_UNREACHABLE: Self = Self::RuleUnreachable;
    const RULE_PROHIBIT: Self = Self::RuleProhibit;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The types and codes are RFC 4443's: Destination Unreachable (1) codes 0–4, Packet
    /// Too Big (2), Time Exceeded (3) codes 0 and 1, Parameter Problem (4) codes 0–2; only Packet
    /// Too Big and Parameter Problem code 2 may answer multicast (§2.4 (e.3)).
    #[test]
    fn causes_map_to_rfc4443_types() {
        use Cause::*;
        let want = [
            (NoRoute, (1, 0)),
            (RouteProhibit, (1, 1)),
            (RuleUnreachable, (1, 0)),
            (RuleProhibit, (1, 1)),
            (BeyondScope, (1, 2)),
            (NeighFailed, (1, 3)),
            (NoSocket, (1, 4)),
            (PacketTooBig, (2, 0)),
            (HopLimitExceeded, (3, 0)),
            (ReassemblyTimeout, (3, 1)),
            (BadHeader, (4, 0)),
            (BadOptions, (4, 0)),
            (UnknownNextHeader, (4, 1)),
            (UnrecognizedNextHeader, (4, 1)),
            (UnknownOption, (4, 2)),
        ];
        for (c, tc) in want {
            assert_eq!(c.icmp(), tc, "{c:?}");
            assert_eq!(
                c.answers_multicast(),
                matches!(tc, (2, 0) | (4, 2)),
                "{c:?}"
            );
        }
        let mut names: Vec<&str> = Cause::ALL.iter().map(|c| c.counter()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Cause::ALL.len(), "one counter per cause");
    }
}
