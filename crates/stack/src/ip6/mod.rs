//! IPv6 (RFC 8200), one stage per file, named after the packet's path.
//!
//! `ip6-input` (validation) is the first stage. Until netbatch routes IPv6, what it accepts
//! goes to the kernel of a host interface pair (`host-punt`: its neighbour discovery, its
//! daemons' sessions) or, without pairs, is dropped (`ip6_not_routed`).
//!
//! Invariant after `ip6-input`: the packet starts at a version-6 header (`Meta::data ==
//! Meta::l3`); its length is 40 plus the header's payload length (link padding trimmed);
//! its extension header chain lies inside that length and was walked by the dissector's
//! bounded walk ([`crate::dissect::ip6_walk`]: hop-by-hop only first, no header the walk
//! cannot cross), and `Meta::l4` / `Meta::l4_type` name where it ends (the upper-layer
//! header, or a later fragment's data); its source is neither multicast nor loopback, its
//! destination neither loopback, unspecified, nor a multicast group of a scope no packet
//! from another node may carry. The hop limit is not checked (forwarding's job), nor are
//! the options inside hop-by-hop and destination options headers.
//!
//! RFCs: 8200 (the header, §3; extension headers and their order, §4 and §4.1), 4291
//! (addresses: unspecified §2.5.2, loopback §2.5.3, multicast §2.7), 4443 (the ICMPv6
//! Parameter Problem a failure may deserve, §3.4: see [`Cause`]).

pub mod input;

use netbatch_engine::Reason;

netbatch_engine::reasons! {
    /// Why the IPv6 graph drops a packet outside any stage's own checks.
    pub mod reason {
        NOT_ROUTED = "ip6_not_routed": "IPv6 is not routed yet",
    }
}

/// Why an IPv6 packet deserves an ICMPv6 error (RFC 4443), kept in its `Meta::note` by the
/// stage that found it, with what the error needs in `Meta::scratch` (as IPv4 keeps its
/// causes, [`crate::ip4::icmp_error::Cause`]). There is no ICMPv6 error stage yet: such a
/// packet is dropped with the cause's reason, the note showing in traces. The values start
/// at 0x601, away from the IPv4 causes', so that no note reads as both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Cause {
    /// A hop-by-hop header other than right after the fixed header (RFC 8200 §4: the same
    /// action as an unrecognized next header); the offset of the next header field that
    /// holds its 0 in `Meta::scratch`.
    HopByHopNotFirst = 0x601,
    /// An extension header the walk cannot cross (RFC 8200 §4); the offset of the next
    /// header field that names it in `Meta::scratch`.
    UnrecognizedNextHeader,
}

impl Cause {
    /// Every cause.
    pub const ALL: [Self; 2] = [Self::HopByHopNotFirst, Self::UnrecognizedNextHeader];

    /// The value kept in `Meta::note`.
    #[inline(always)]
    pub const fn note(self) -> u16 {
        self as u16
    }

    /// The cause a `Meta::note` holds, if any.
    pub fn from_note(n: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.note() == n)
    }

    /// The ICMPv6 (type, code) it causes: both are a Parameter Problem (type 4) with code
    /// 1, "unrecognized Next Header type encountered" (RFC 4443 §3.4, RFC 8200 §4).
    pub const fn icmp(self) -> (u8, u8) {
        match self {
            Self::HopByHopNotFirst | Self::UnrecognizedNextHeader => (4, 1),
        }
    }

    /// The drop reason of a packet with this cause that gets no error.
    pub const fn reason(self) -> Reason {
        match self {
            Self::HopByHopNotFirst => input::reason::HOP_BY_HOP_NOT_FIRST,
            Self::UnrecognizedNextHeader => input::reason::UNRECOGNIZED_NEXT_HEADER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notes round-trip, and none is also an IPv4 cause's (whose stage would otherwise
    /// answer an IPv6 packet with an ICMPv4 error).
    #[test]
    fn notes_are_distinct_from_the_ipv4_causes() {
        for c in Cause::ALL {
            assert_eq!(Cause::from_note(c.note()), Some(c));
            assert_eq!(crate::ip4::icmp_error::Cause::from_note(c.note()), None);
        }
        for c in crate::ip4::icmp_error::Cause::ALL {
            assert_eq!(Cause::from_note(c.note()), None);
        }
        assert_eq!(Cause::from_note(0), None, "0 is no note");
    }
}
