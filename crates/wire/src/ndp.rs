//! Neighbour discovery messages (RFC 4861): neighbour solicitation and advertisement, and
//! the options every NDP message carries.
//!
//! NDP messages are ICMPv6 messages ([`Icmpv6Packet`]); the checksum is the ICMPv6 one. A
//! [`NeighborPacket`] views a whole solicitation or advertisement (the buffer an
//! [`Icmpv6Packet`] would wrap): the 24 bytes
//! [`NeighborPacket::check_len`] requires (type, code, checksum, flags, target address),
//! then options. The options are TLVs counted in 8-byte units; [`NdpOptionIter`] checks each
//! length against the bytes left, so no option accessor can panic.
//!
//! [`NdpRepr::parse`] makes the checks of RFC 4861 §7.1.1/§7.1.2 that need only the
//! message; those that need the IPv6 header (hop limit 255, the source and destination
//! rules) are [`NdpRepr::check_ip`].

use core::net::Ipv6Addr;

use crate::ethernet::MacAddr;
use crate::icmpv6::{Icmpv6Packet, Icmpv6Type};
use crate::ipv6::{is_solicited_node, read_addr};
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub(crate) const TYPE: usize = 0;
    pub(crate) const CODE: usize = 1;
    pub(crate) const FLAGS: usize = 4;
    pub(crate) const TARGET: Field = 8..24;
    pub(crate) const OPTIONS: usize = 24;
}

/// Length of a neighbour solicitation or advertisement without options.
pub const NEIGHBOR_LEN: usize = field::OPTIONS;

/// Length of a link-layer address option for Ethernet (RFC 2464 §6: one 8-byte unit).
pub const LL_ADDR_OPTION_LEN: usize = 8;

/// The hop limit every NDP message is sent with and must arrive with (RFC 4861 §7.1).
pub const HOP_LIMIT: u8 = 255;

const FLAG_ROUTER: u32 = 0x8000_0000;
const FLAG_SOLICITED: u32 = 0x4000_0000;
const FLAG_OVERRIDE: u32 = 0x2000_0000;

/// NDP option types (RFC 4861 §4.6).
pub mod option_type {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

/// A view of a neighbour solicitation (type 135) or advertisement (type 136).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborPacket<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 24 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> NeighborPacket<T> {
    view_constructors!();

    /// Checks that the buffer holds the 24 bytes up to the end of the target address
    /// (RFC 4861 §4.3/§4.4), [`Error::Truncated`] otherwise. The type is not checked.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < NEIGHBOR_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// ICMPv6 message type (135 or 136 for a valid message).
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type(self.buffer.as_ref()[field::TYPE])
    }

    /// ICMPv6 code (0 for a valid message).
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    #[inline]
    fn flags(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::FLAGS)
    }

    /// Router flag (R) of an advertisement: the sender is a router.
    #[inline]
    pub fn router_flag(&self) -> bool {
        self.flags() & FLAG_ROUTER != 0
    }

    /// Solicited flag (S) of an advertisement: it answers a solicitation.
    #[inline]
    pub fn solicited_flag(&self) -> bool {
        self.flags() & FLAG_SOLICITED != 0
    }

    /// Override flag (O) of an advertisement: it should replace a cached link-layer address.
    #[inline]
    pub fn override_flag(&self) -> bool {
        self.flags() & FLAG_OVERRIDE != 0
    }

    /// Target address.
    #[inline]
    pub fn target_addr(&self) -> Ipv6Addr {
        read_addr(self.buffer.as_ref(), field::TARGET.start)
    }

    /// The options area: everything after the target address.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..]
    }

    /// An iterator over the options.
    #[inline]
    pub fn option_iter(&self) -> NdpOptionIter<'_> {
        NdpOptionIter::new(self.options())
    }

    /// Whether the ICMPv6 checksum verifies for `src` and `dst` over the whole buffer.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        Icmpv6Packet::new_unchecked(self.buffer.as_ref()).verify_checksum(src, dst)
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> NeighborPacket<T> {
    /// Sets the R, S and O flags and clears the reserved bits (zero for a solicitation).
    #[inline]
    pub fn set_flags(&mut self, router: bool, solicited: bool, override_flag: bool) {
        let v = (if router { FLAG_ROUTER } else { 0 })
            | (if solicited { FLAG_SOLICITED } else { 0 })
            | (if override_flag { FLAG_OVERRIDE } else { 0 });
        crate::bytes::put_u32(self.buffer.as_mut(), field::FLAGS, v);
    }

    /// Sets the target address.
    #[inline]
    pub fn set_target_addr(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&v.octets());
    }

    /// Mutable options area.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::OPTIONS..]
    }

    /// Computes and stores the ICMPv6 checksum for `src` and `dst` over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        Icmpv6Packet::new_unchecked(self.buffer.as_mut()).fill_checksum(src, dst);
    }
}

/// The Prefix Information option (RFC 4861 §4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixInfo {
    /// Number of leading bits of `prefix` that are valid.
    pub prefix_len: u8,
    /// On-link flag (L).
    pub on_link: bool,
    /// Autonomous address-configuration flag (A).
    pub autonomous: bool,
    /// Valid lifetime in seconds (all ones: infinity).
    pub valid_lifetime: u32,
    /// Preferred lifetime in seconds (all ones: infinity).
    pub preferred_lifetime: u32,
    /// The prefix.
    pub prefix: Ipv6Addr,
}

/// One NDP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdpOption<'a> {
    /// Source link-layer address (the first six bytes of the option data).
    SourceLinkLayerAddr(MacAddr),
    /// Target link-layer address (the first six bytes of the option data).
    TargetLinkLayerAddr(MacAddr),
    /// Prefix information.
    PrefixInfo(PrefixInfo),
    /// The MTU of the link (RFC 4861 §4.6.4).
    Mtu(u32),
    /// Any other option, raw; receivers ignore options they do not recognize (RFC 4861 §4.6).
    Other {
        /// Option type.
        option_type: u8,
        /// The option after its type and length bytes.
        data: &'a [u8],
    },
}

/// Iterator over NDP options (RFC 4861 §4.6). Yields [`Error::Malformed`] for an option of
/// length zero (which receivers must reject, RFC 4861 §4.6) or a Prefix Information or MTU
/// option of the wrong length, [`Error::Truncated`] for an option running past the message;
/// after an error the iterator ends. It never panics.
#[derive(Debug, Clone)]
pub struct NdpOptionIter<'a> {
    rest: &'a [u8],
}

impl<'a> NdpOptionIter<'a> {
    /// Iterates over an options area.
    #[inline]
    pub const fn new(options: &'a [u8]) -> Self {
        Self { rest: options }
    }

    /// Decodes one option whose whole bytes (type and length included) are `opt`: the
    /// iterator hands over whole options, a non-zero number of 8-byte units, so every
    /// `Truncated` below is unreachable from it.
    fn decode(opt: &'a [u8]) -> Result<NdpOption<'a>> {
        let Some((&[kind, _], data)) = opt.split_first_chunk::<2>() else {
            return Err(Error::Truncated);
        };
        let mac = || {
            data.first_chunk::<6>()
                .map(|m| MacAddr(*m))
                .ok_or(Error::Truncated)
        };
        Ok(match kind {
            option_type::SOURCE_LL_ADDR => NdpOption::SourceLinkLayerAddr(mac()?),
            option_type::TARGET_LL_ADDR => NdpOption::TargetLinkLayerAddr(mac()?),
            option_type::PREFIX_INFO => {
                let Ok(p) = <&[u8; 32]>::try_from(opt) else {
                    return Err(Error::Malformed);
                };
                NdpOption::PrefixInfo(PrefixInfo {
                    prefix_len: p[2],
                    on_link: p[3] & 0x80 != 0,
                    autonomous: p[3] & 0x40 != 0,
                    valid_lifetime: crate::bytes::get_u32(p, 4),
                    preferred_lifetime: crate::bytes::get_u32(p, 8),
                    prefix: read_addr(p, 16),
                })
            }
            option_type::MTU => {
                let Ok(m) = <&[u8; 8]>::try_from(opt) else {
                    return Err(Error::Malformed);
                };
                NdpOption::Mtu(u32::from_be_bytes([m[4], m[5], m[6], m[7]]))
            }
            option_type => NdpOption::Other { option_type, data },
        })
    }
}

impl<'a> Iterator for NdpOptionIter<'a> {
    type Item = Result<NdpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let units = self.rest.get(1).map(|&l| usize::from(l));
        let item = match units {
            None => Err(Error::Truncated),
            Some(0) => Err(Error::Malformed),
            Some(units) => match self.rest.split_at_checked(units * 8) {
                None => Err(Error::Truncated),
                Some((opt, rest)) => {
                    self.rest = rest;
                    let decoded = Self::decode(opt);
                    if decoded.is_err() {
                        self.rest = &[];
                    }
                    return Some(decoded);
                }
            },
        };
        self.rest = &[];
        Some(item)
    }
}

/// A decoded neighbour solicitation or advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdpRepr {
    /// Neighbour solicitation (type 135).
    NeighborSolicit {
        /// The address whose link-layer address is asked for.
        target: Ipv6Addr,
        /// The sender's link-layer address (absent when the source is unspecified: DAD).
        source_lladdr: Option<MacAddr>,
    },
    /// Neighbour advertisement (type 136).
    NeighborAdvert {
        /// R: the sender is a router.
        router_flag: bool,
        /// S: the advertisement answers a solicitation.
        solicited_flag: bool,
        /// O: the advertisement should override a cached link-layer address.
        override_flag: bool,
        /// The address advertised.
        target: Ipv6Addr,
        /// The target's link-layer address.
        target_lladdr: Option<MacAddr>,
    },
}

impl NdpRepr {
    /// Decodes a solicitation or advertisement, making the checks of RFC 4861 §7.1.1/§7.1.2
    /// that need only the message: [`Error::Unsupported`] for another type,
    /// [`Error::Malformed`] if the code is not 0, [`Error::Truncated`] below 24 bytes,
    /// [`Error::Malformed`] for a multicast target, and the first error of
    /// [`NdpOptionIter`] (so a zero-length option rejects the message). The first source
    /// (solicitation) or target (advertisement) link-layer address option is kept; other
    /// options are ignored.
    ///
    /// The checksum is not verified here (it needs the addresses): call
    /// [`NeighborPacket::verify_checksum`], and [`NdpRepr::check_ip`] for the IPv6 header
    /// rules.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(msg: &NeighborPacket<&T>) -> Result<Self> {
        let solicit = match msg.buffer.as_ref().first().copied().map(Icmpv6Type) {
            Some(Icmpv6Type::NEIGHBOR_SOLICIT) => true,
            Some(Icmpv6Type::NEIGHBOR_ADVERT) => false,
            Some(_) => return Err(Error::Unsupported),
            None => return Err(Error::Truncated),
        };
        msg.check_len()?;
        if msg.code() != 0 {
            return Err(Error::Malformed);
        }
        let target = msg.target_addr();
        if target.is_multicast() {
            return Err(Error::Malformed);
        }
        let mut lladdr = None;
        for opt in msg.option_iter() {
            match (opt?, solicit) {
                (NdpOption::SourceLinkLayerAddr(mac), true)
                | (NdpOption::TargetLinkLayerAddr(mac), false) => {
                    lladdr.get_or_insert(mac);
                }
                _ => {}
            }
        }
        Ok(if solicit {
            Self::NeighborSolicit {
                target,
                source_lladdr: lladdr,
            }
        } else {
            Self::NeighborAdvert {
                router_flag: msg.router_flag(),
                solicited_flag: msg.solicited_flag(),
                override_flag: msg.override_flag(),
                target,
                target_lladdr: lladdr,
            }
        })
    }

    /// The checks of RFC 4861 §7.1.1/§7.1.2 on the IPv6 header that carried the message,
    /// each [`Error::Malformed`]: the hop limit must be 255; a solicitation from the
    /// unspecified address (duplicate address detection) must go to a solicited-node
    /// address and carry no source link-layer address; an advertisement to a multicast
    /// address must not have the solicited flag.
    pub fn check_ip(&self, src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8) -> Result<()> {
        let ok = hop_limit == HOP_LIMIT
            && match *self {
                Self::NeighborSolicit { source_lladdr, .. } => {
                    !src.is_unspecified() || (is_solicited_node(dst) && source_lladdr.is_none())
                }
                Self::NeighborAdvert { solicited_flag, .. } => {
                    !(dst.is_multicast() && solicited_flag)
                }
            };
        if ok { Ok(()) } else { Err(Error::Malformed) }
    }

    /// Length of the message `emit` writes: 24 bytes, plus 8 for a link-layer address option.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        let lladdr = match *self {
            Self::NeighborSolicit { source_lladdr, .. } => source_lladdr.is_some(),
            Self::NeighborAdvert { target_lladdr, .. } => target_lladdr.is_some(),
        };
        NEIGHBOR_LEN + if lladdr { LL_ADDR_OPTION_LEN } else { 0 }
    }

    /// Writes the message, its link-layer address option if any, and the ICMPv6 checksum
    /// for `src` and `dst` over the first `buffer_len()` bytes (the buffer should be exactly
    /// that long). Panics if the buffer is shorter. Wrap a reused buffer with
    /// `new_unchecked`.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the caller sized the buffer to buffer_len(); short panics"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut NeighborPacket<&mut T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) {
        let len = self.buffer_len();
        let mut msg = NeighborPacket::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        let (msg_type, target, opt) = match *self {
            Self::NeighborSolicit {
                target,
                source_lladdr,
            } => {
                msg.set_flags(false, false, false);
                let opt = source_lladdr.map(|m| (option_type::SOURCE_LL_ADDR, m));
                (Icmpv6Type::NEIGHBOR_SOLICIT, target, opt)
            }
            Self::NeighborAdvert {
                router_flag,
                solicited_flag,
                override_flag,
                target,
                target_lladdr,
            } => {
                msg.set_flags(router_flag, solicited_flag, override_flag);
                let opt = target_lladdr.map(|m| (option_type::TARGET_LL_ADDR, m));
                (Icmpv6Type::NEIGHBOR_ADVERT, target, opt)
            }
        };
        msg.set_target_addr(target);
        if let Some((kind, mac)) = opt {
            let o = msg.options_mut();
            o[0] = kind;
            o[1] = (LL_ADDR_OPTION_LEN / 8) as u8;
            o[2..8].copy_from_slice(mac.as_bytes());
        }
        let mut icmp = Icmpv6Packet::new_unchecked(msg.buffer);
        icmp.set_msg_type(msg_type);
        icmp.set_code(0);
        icmp.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::ipv6::{Ipv6Packet, captured, solicited_node};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const A1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const A2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    const MAC1: MacAddr = MacAddr([0x00, 0x0c, 0x29, 0x0c, 0x47, 0xd5]);
    const MAC2: MacAddr = MacAddr([0x02, 0x00, 0x5e, 0x10, 0x00, 0x02]);

    fn ns_repr() -> NdpRepr {
        NdpRepr::NeighborSolicit {
            target: A2,
            source_lladdr: Some(MAC1),
        }
    }

    fn na_repr() -> NdpRepr {
        NdpRepr::NeighborAdvert {
            router_flag: false,
            solicited_flag: true,
            override_flag: true,
            target: A2,
            target_lladdr: Some(MAC2),
        }
    }

    #[test]
    fn parse_captured_solicitation() {
        let ip = Ipv6Packet::new_checked(&captured::NS[..]).unwrap();
        let ns = NeighborPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(
            (ns.msg_type(), ns.code()),
            (Icmpv6Type::NEIGHBOR_SOLICIT, 0)
        );
        assert_eq!(ns.target_addr(), A2);
        assert!(!ns.router_flag() && !ns.solicited_flag() && !ns.override_flag());
        assert!(ns.verify_checksum(ip.src(), ip.dst()));
        let opts: Vec<_> = ns.option_iter().collect();
        assert_eq!(opts, [Ok(NdpOption::SourceLinkLayerAddr(MAC1))]);
        let repr = NdpRepr::parse(&ns).unwrap();
        assert_eq!(repr, ns_repr());
        assert_eq!(repr.check_ip(ip.src(), ip.dst(), ip.hop_limit()), Ok(()));
        assert_eq!(ip.dst(), solicited_node(A2));
    }

    #[test]
    fn parse_captured_advertisement() {
        let ip = Ipv6Packet::new_checked(&captured::NA[..]).unwrap();
        let na = NeighborPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(na.msg_type(), Icmpv6Type::NEIGHBOR_ADVERT);
        assert!(!na.router_flag() && na.solicited_flag() && na.override_flag());
        assert!(na.verify_checksum(ip.src(), ip.dst()));
        let repr = NdpRepr::parse(&na).unwrap();
        assert_eq!(repr, na_repr());
        assert_eq!(repr.check_ip(ip.src(), ip.dst(), ip.hop_limit()), Ok(()));
    }

    /// Our solicitation and advertisement are byte for byte the kernel's, checksums included.
    #[test]
    fn emit_matches_linux() {
        for (repr, pkt) in [(ns_repr(), &captured::NS), (na_repr(), &captured::NA)] {
            let ip = Ipv6Packet::new_checked(&pkt[..]).unwrap();
            let mut buf = vec![0xeeu8; repr.buffer_len()];
            repr.emit(
                &mut NeighborPacket::new_unchecked(&mut buf[..]),
                ip.src(),
                ip.dst(),
            );
            assert_eq!(&buf[..], ip.payload());
        }
        // Without a link-layer option (DAD probe): 24 bytes, and it parses back.
        let dad = NdpRepr::NeighborSolicit {
            target: A1,
            source_lladdr: None,
        };
        let mut buf = vec![0xeeu8; dad.buffer_len()];
        let dst = solicited_node(A1);
        dad.emit(
            &mut NeighborPacket::new_unchecked(&mut buf[..]),
            Ipv6Addr::UNSPECIFIED,
            dst,
        );
        assert_eq!(buf.len(), 24);
        assert_eq!(buf[..8], [135, 0, buf[2], buf[3], 0, 0, 0, 0]);
        let p = NeighborPacket::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(Ipv6Addr::UNSPECIFIED, dst));
        assert_eq!(NdpRepr::parse(&p), Ok(dad));
        assert_eq!(dad.check_ip(Ipv6Addr::UNSPECIFIED, dst, 255), Ok(()));
    }

    /// The router solicitation's source link-layer option, read with the same iterator.
    #[test]
    fn options_of_captured_router_solicitation() {
        let ip = Ipv6Packet::new_checked(&captured::RS[..]).unwrap();
        let opts: Vec<_> = NdpOptionIter::new(&ip.payload()[8..]).collect();
        assert_eq!(opts, [Ok(NdpOption::SourceLinkLayerAddr(MAC2))]);
    }

    /// Router advertisement options written out from RFC 4861 §4.6.2 and §4.6.4.
    #[test]
    fn router_advertisement_options_by_hand() {
        #[rustfmt::skip]
        let opts = [
            // Prefix information: /64, L and A set, valid 30 days, preferred 7 days.
            3, 4, 64, 0xc0, 0x00, 0x27, 0x8d, 0x00, 0x00, 0x09, 0x3a, 0x80, 0, 0, 0, 0,
            0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            // MTU 1500.
            5, 1, 0, 0, 0x00, 0x00, 0x05, 0xdc,
            // Source link-layer address.
            1, 1, 0x00, 0x0c, 0x29, 0x0c, 0x47, 0xd5,
            // Unknown type 31 (two units).
            31, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
        ];
        let got: Vec<_> = NdpOptionIter::new(&opts).collect();
        assert_eq!(
            got,
            [
                Ok(NdpOption::PrefixInfo(PrefixInfo {
                    prefix_len: 64,
                    on_link: true,
                    autonomous: true,
                    valid_lifetime: 2_592_000,
                    preferred_lifetime: 604_800,
                    prefix: "2001:db8:1::".parse().unwrap(),
                })),
                Ok(NdpOption::Mtu(1500)),
                Ok(NdpOption::SourceLinkLayerAddr(MAC1)),
                Ok(NdpOption::Other {
                    option_type: 31,
                    data: &opts[50..64]
                }),
            ]
        );
    }

    #[test]
    fn bad_options_end_the_iteration() {
        let cases: [(&[u8], Error); 6] = [
            (&[1, 0, 0, 0, 0, 0, 0, 0], Error::Malformed), // zero length (RFC 4861 §4.6)
            (&[1], Error::Truncated),                      // no length byte
            (&[1, 2, 0, 0, 0, 0, 0, 0], Error::Truncated), // 16 bytes claimed, 8 there
            (
                &[5, 2, 0, 0, 0, 0, 5, 0xdc, 0, 0, 0, 0, 0, 0, 0, 0],
                Error::Malformed,
            ), // MTU of 16
            (&[3, 1, 64, 0xc0, 0, 0, 0, 0], Error::Malformed), // prefix info of 8
            (
                &[2, 1, 1, 2, 3, 4, 5, 6, 9, 0, 1, 1, 1, 1, 1, 1],
                Error::Malformed,
            ), // then zero
        ];
        for (bytes, err) in cases {
            let got: Vec<_> = NdpOptionIter::new(bytes).collect();
            assert_eq!(got.last(), Some(&Err(err)), "{bytes:?}");
            assert!(got[..got.len() - 1].iter().all(|o| o.is_ok()), "{bytes:?}");
        }
    }

    #[test]
    fn parse_rejects() {
        let ip = Ipv6Packet::new_checked(&captured::NS[..]).unwrap();
        let good = ip.payload().to_vec();
        let parse = |b: &[u8]| NdpRepr::parse(&NeighborPacket::new_unchecked(b));
        let mut b = good.clone();
        b[1] = 1;
        assert_eq!(parse(&b), Err(Error::Malformed)); // code 1
        let mut b = good.clone();
        b[8] = 0xff;
        assert_eq!(parse(&b), Err(Error::Malformed)); // multicast target
        let mut b = good.clone();
        b[25] = 0;
        assert_eq!(parse(&b), Err(Error::Malformed)); // zero-length option
        let mut b = good.clone();
        b[0] = 128;
        assert_eq!(parse(&b), Err(Error::Unsupported)); // echo request
        for len in 0..24 {
            let e = parse(&good[..len]).unwrap_err();
            assert!(e == Error::Truncated, "{len}: {e:?}");
        }
        // The IPv6 header rules.
        let ns = ns_repr();
        assert_eq!(
            ns.check_ip(A1, solicited_node(A2), 64),
            Err(Error::Malformed)
        );
        assert_eq!(
            ns.check_ip(Ipv6Addr::UNSPECIFIED, solicited_node(A2), 255),
            Err(Error::Malformed)
        );
        let dad = NdpRepr::NeighborSolicit {
            target: A2,
            source_lladdr: None,
        };
        assert_eq!(
            dad.check_ip(Ipv6Addr::UNSPECIFIED, A2, 255),
            Err(Error::Malformed)
        );
        assert_eq!(
            na_repr().check_ip(A2, crate::ipv6::ALL_NODES, 255),
            Err(Error::Malformed)
        );
        let unsolicited = NdpRepr::NeighborAdvert {
            router_flag: true,
            solicited_flag: false,
            override_flag: true,
            target: A2,
            target_lladdr: Some(MAC2),
        };
        assert_eq!(
            unsolicited.check_ip(A2, crate::ipv6::ALL_NODES, 255),
            Ok(())
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            solicit in any::<bool>(), flags in any::<[bool; 3]>(), target in any::<u128>(),
            mac in proptest::option::of(any::<[u8; 6]>()), src in any::<u128>(), dst in any::<u128>(),
        ) {
            let target = Ipv6Addr::from_bits(target);
            prop_assume!(!target.is_multicast());
            let mac = mac.map(MacAddr);
            let repr = if solicit {
                NdpRepr::NeighborSolicit { target, source_lladdr: mac }
            } else {
                NdpRepr::NeighborAdvert {
                    router_flag: flags[0], solicited_flag: flags[1], override_flag: flags[2],
                    target, target_lladdr: mac,
                }
            };
            let (src, dst) = (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst));
            let mut buf = vec![0x5au8; repr.buffer_len()];
            repr.emit(&mut NeighborPacket::new_unchecked(&mut buf[..]), src, dst);
            let p = NeighborPacket::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum(src, dst));
            prop_assert_eq!(NdpRepr::parse(&p), Ok(repr));
            // The general ICMPv6 view agrees on type and checksum.
            let icmp = Icmpv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(icmp.verify_checksum(src, dst));
        }

        /// Random bytes and every truncation of the captured messages: no view, iterator or
        /// parse panics, and the iterator yields at most one error, last.
        #[test]
        fn never_panics(tail in proptest::collection::vec(any::<u8>(), 0..80), ty in prop_oneof![Just(135u8), Just(136), any::<u8>()]) {
            let mut msgs: Vec<Vec<u8>> = vec![];
            let mut random = vec![ty, 0];
            random.extend_from_slice(&tail);
            msgs.push(random);
            for pkt in [&captured::NS[40..], &captured::NA[40..]] {
                let mut m = pkt.to_vec();
                m.extend_from_slice(&tail);
                msgs.push(m);
            }
            for m in &msgs {
                for len in 0..=m.len() {
                    let b = &m[..len];
                    let _ = NdpRepr::parse(&NeighborPacket::new_unchecked(b));
                    if let Ok(p) = NeighborPacket::new_checked(b) {
                        let _ = (p.msg_type(), p.code(), p.router_flag(), p.solicited_flag(), p.override_flag());
                        let _ = (p.target_addr(), p.options(), p.verify_checksum(A1, A2));
                        let items: Vec<_> = p.option_iter().collect();
                        let errs = items.iter().filter(|i| i.is_err()).count();
                        prop_assert!(errs == 0 || (errs == 1 && items.last().unwrap().is_err()));
                        let mut copy = b.to_vec();
                        let mut w = NeighborPacket::new_unchecked(&mut copy[..]);
                        w.set_flags(true, true, true);
                        w.fill_checksum(A1, A2);
                    }
                    let _ = NdpOptionIter::new(b).count();
                }
            }
        }
    }
}
