//! IPv6 extension headers (RFC 8200 §4): a bounded walk of the header chain, views of the
//! generic option-carrying headers and of the Fragment header, and an iterator over
//! Hop-by-Hop and Destination options.
//!
//! # The walk
//!
//! [`walk`] follows the next-header chain from the fixed header to the first header that is
//! not an extension header it can cross, and returns it as an [`UpperLayer`] (with offsets
//! from the start of the IPv6 header, as ICMPv6 parameter problem pointers count them). It
//! reads only the two first bytes of each header (eight for a Fragment header), stays
//! inside the payload length, and does at most `max_headers` steps, so it never panics and
//! its work is bounded whatever the packet says. Each failure is its own [`ExtError`].
//!
//! Encapsulating Security Payload (50) ends the walk: what follows is encrypted, so ESP is
//! returned as the upper layer. No Next Header (59) also ends it (RFC 8200 §4.7: bytes after
//! it are ignored). A Fragment header with a non-zero offset ends it too (RFC 8200 §4.5:
//! what follows is fragment data, not headers).

use core::fmt;

use crate::ipv4::Protocol;
use crate::ipv6::{HEADER_LEN as IPV6_HEADER_LEN, Ipv6Packet, NEXT_HEADER_AT};
use crate::{Error, Result};

/// Length of the smallest extension header, and the unit of their lengths (8 bytes).
pub const MIN_HEADER_LEN: usize = 8;

/// Length of the Fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// Largest generic extension header: a length byte of 255 means 256 units of 8 bytes.
pub const MAX_HEADER_LEN: usize = 256 * 8;

/// A view of a Hop-by-Hop Options, Routing or Destination Options header: the layout all
/// three share (RFC 8200 §4.3, §4.4, §4.6), next header, length in 8-byte units not counting
/// the first 8, then type-specific data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the header_len() (>= 8) bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    view_constructors!();

    /// Checks that the buffer holds the whole header: [`Error::Truncated`] if it is shorter
    /// than 2 bytes or than [`Self::header_len`] (which is at least 8).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < 2 || len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header.
    #[inline]
    pub fn next_header(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[0])
    }

    /// Header length in bytes: `(length byte + 1) * 8`, from 8 to 2048.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }

    /// The bytes after the next header and length bytes, to the end of the header: the
    /// options area of Hop-by-Hop and Destination Options headers.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }

    /// The options of a Hop-by-Hop or Destination Options header; each option's `at` is its
    /// offset from the start of this header.
    #[inline]
    pub fn options(&self) -> OptionsIter<'_> {
        OptionsIter::new(self.data(), 2)
    }

    /// Routing type (Routing header only, RFC 8200 §4.4).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    /// Segments left (Routing header only, RFC 8200 §4.4).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6ExtHeader<T> {
    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: Protocol) {
        self.buffer.as_mut()[0] = v.0;
    }

    /// Sets the header length in bytes (stored as `len / 8 - 1`; use a multiple of 8 in
    /// 8..=2048). Re-run `check_len` afterwards before relying on the no-panic guarantee.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[1] = (len / 8).saturating_sub(1) as u8;
    }

    /// Mutable type-specific data, with the same bounds as [`Self::data`].
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[2..end]
    }
}

/// Option types of Hop-by-Hop and Destination Options headers (RFC 8200 §4.2, IANA).
pub mod option_type {
    /// One byte of padding, with no length or data.
    pub const PAD1: u8 = 0x00;
    /// Padding of 2 or more bytes.
    pub const PADN: u8 = 0x01;
    /// Router Alert (RFC 2711).
    pub const ROUTER_ALERT: u8 = 0x05;
    /// Jumbo Payload (RFC 2675).
    pub const JUMBO_PAYLOAD: u8 = 0xc2;
}

/// What a node that does not recognize an option must do, from the two high bits of its
/// type (RFC 8200 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptionAction {
    /// `00`: skip over the option and continue processing the header.
    Skip,
    /// `01`: discard the packet.
    Discard,
    /// `10`: discard the packet and send an ICMPv6 Parameter Problem, code 2, pointing at
    /// the option type, whatever the destination.
    DiscardAndReport,
    /// `11`: as [`Self::DiscardAndReport`], but only if the destination was not multicast.
    DiscardAndReportUnlessMulticast,
}

/// One option of a Hop-by-Hop or Destination Options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Option<'a> {
    /// Offset of the option type byte from the start of the header (the parameter problem
    /// pointer is this plus the header's offset in the packet).
    pub at: usize,
    /// Option type (see [`option_type`]).
    pub option_type: u8,
    /// Option data (empty for Pad1).
    pub data: &'a [u8],
}

impl Ipv6Option<'_> {
    /// Whether this is Pad1 or PadN.
    #[inline]
    pub const fn is_padding(&self) -> bool {
        matches!(self.option_type, option_type::PAD1 | option_type::PADN)
    }

    /// The action required if the type is not recognized (RFC 8200 §4.2).
    #[inline]
    pub const fn action(&self) -> OptionAction {
        match self.option_type >> 6 {
            0 => OptionAction::Skip,
            1 => OptionAction::Discard,
            2 => OptionAction::DiscardAndReport,
            _ => OptionAction::DiscardAndReportUnlessMulticast,
        }
    }

    /// Whether the option data may change en route (the third-highest bit of the type,
    /// RFC 8200 §4.2).
    #[inline]
    pub const fn may_change(&self) -> bool {
        self.option_type & 0x20 != 0
    }
}

/// Iterator over the TLV-encoded options of a Hop-by-Hop or Destination Options header
/// (RFC 8200 §4.2). A malformed option (a type with no length byte, or data running past the
/// area) yields one [`Error::Malformed`], then the iterator ends; it never panics.
#[derive(Debug, Clone)]
pub struct OptionsIter<'a> {
    area: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> OptionsIter<'a> {
    /// Iterates over an options area; `base` is the area's offset from the start of its
    /// header (2 for a whole header), added to each option's `at`.
    #[inline]
    pub const fn new(area: &'a [u8], base: usize) -> Self {
        Self { area, pos: 0, base }
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<Ipv6Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.area.get(self.pos..).filter(|r| !r.is_empty())?;
        let at = self.base + self.pos;
        let option_type = *rest.first()?;
        if option_type == option_type::PAD1 {
            self.pos += 1;
            return Some(Ok(Ipv6Option {
                at,
                option_type,
                data: &[],
            }));
        }
        let data = rest
            .get(1)
            .and_then(|&len| rest.get(2..2 + usize::from(len)));
        match data {
            Some(data) => {
                self.pos += 2 + data.len();
                Some(Ok(Ipv6Option {
                    at,
                    option_type,
                    data,
                }))
            }
            None => {
                self.pos = self.area.len();
                Some(Err(Error::Malformed))
            }
        }
    }
}

mod frag_field {
    pub(crate) const NEXT_HEADER: usize = 0;
    pub(crate) const RESERVED: usize = 1;
    pub(crate) const OFF_M: usize = 2;
    pub(crate) const IDENT: usize = 4;
}

const MORE_FRAGS: u16 = 0x0001;
const OFFSET_MASK: u16 = 0xfff8;

/// A view of a Fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 8 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> FragmentHeader<T> {
    view_constructors!();

    /// Checks that the buffer holds the 8-byte header ([`Error::Truncated`] otherwise).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header of the fragmentable part (the original packet's).
    #[inline]
    pub fn next_header(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[frag_field::NEXT_HEADER])
    }

    /// Fragment offset **in bytes** (the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), frag_field::OFF_M) & OFFSET_MASK
    }

    /// More-fragments flag (M).
    #[inline]
    pub fn more_frags(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), frag_field::OFF_M) & MORE_FRAGS != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), frag_field::IDENT)
    }

    /// Whether this is an atomic fragment: offset 0 and M clear, a whole packet that carries
    /// a Fragment header (RFC 6946: process it as unfragmented).
    #[inline]
    pub fn is_atomic(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), frag_field::OFF_M) & (OFFSET_MASK | MORE_FRAGS)
            == 0
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: Protocol) {
        self.buffer.as_mut()[frag_field::NEXT_HEADER] = v.0;
    }

    /// Sets the fragment offset **in bytes** (a multiple of 8: the low 3 bits are dropped),
    /// keeping M.
    #[inline]
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let old = crate::bytes::get_u16(self.buffer.as_ref(), frag_field::OFF_M);
        let new = (old & !OFFSET_MASK) | (bytes & OFFSET_MASK);
        crate::bytes::put_u16(self.buffer.as_mut(), frag_field::OFF_M, new);
    }

    /// Sets or clears the more-fragments flag, keeping the offset.
    #[inline]
    pub fn set_more_frags(&mut self, v: bool) {
        let old = crate::bytes::get_u16(self.buffer.as_ref(), frag_field::OFF_M);
        let new = if v {
            old | MORE_FRAGS
        } else {
            old & !MORE_FRAGS
        };
        crate::bytes::put_u16(self.buffer.as_mut(), frag_field::OFF_M, new);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), frag_field::IDENT, v);
    }
}

/// The decoded fields of a Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentRepr {
    /// Next header of the fragmentable part.
    pub next_header: Protocol,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

impl FragmentRepr {
    /// Decodes a Fragment header: [`Error::Truncated`] below 8 bytes. The reserved fields
    /// are ignored (RFC 8200 §4.5: "ignored on receipt").
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &FragmentHeader<&T>) -> Result<Self> {
        header.check_len()?;
        Ok(Self {
            next_header: header.next_header(),
            frag_offset: header.frag_offset(),
            more_frags: header.more_frags(),
            ident: header.ident(),
        })
    }

    /// Length of the header (8).
    #[inline]
    pub const fn header_len(&self) -> usize {
        FRAGMENT_HEADER_LEN
    }

    /// Writes the 8 bytes, reserved fields zero; an offset that is not a multiple of 8 loses
    /// its low 3 bits. Panics if the buffer is shorter than 8 bytes.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the caller's buffer holds 8 bytes; short panics"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, header: &mut FragmentHeader<&mut T>) {
        let off_m = (self.frag_offset & OFFSET_MASK) | u16::from(self.more_frags);
        let b = header.buffer.as_mut();
        b[frag_field::NEXT_HEADER] = self.next_header.0;
        b[frag_field::RESERVED] = 0;
        crate::bytes::put_u16(b, frag_field::OFF_M, off_m);
        crate::bytes::put_u32(b, frag_field::IDENT, self.ident);
    }
}

/// Where a Fragment header was found by [`walk`], and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Offset of the Fragment header from the start of the IPv6 header.
    pub at: usize,
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// The end of an extension header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// The protocol after the extension headers (may be [`Protocol::ESP`] or
    /// [`Protocol::NO_NEXT_HEADER`]).
    pub protocol: Protocol,
    /// Offset of its header from the start of the IPv6 header. For a non-first fragment
    /// (`fragment.offset != 0`) this is where the fragment data starts instead.
    pub offset: usize,
    /// Offset of the Next Header field that named `protocol`: the ICMPv6 parameter problem
    /// pointer (code 1) if the protocol is not supported (RFC 8200 §4).
    pub next_header_at: usize,
    /// The first Fragment header of the chain, if any.
    pub fragment: Option<FragmentInfo>,
}

/// Why [`walk`] stopped before an upper layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtError {
    /// The header starting at `at` runs past the payload length or the buffer.
    Truncated {
        /// Offset of the header from the start of the IPv6 header.
        at: usize,
    },
    /// A Hop-by-Hop Options header anywhere but right after the fixed header (RFC 8200
    /// §4.1); answered with a parameter problem, code 1, at `pointer`.
    HopByHopNotFirst {
        /// Offset of the Next Header field holding 0.
        pointer: usize,
    },
    /// More than the allowed number of extension headers.
    TooManyHeaders,
    /// The extension headers take more than the allowed number of bytes.
    ChainTooLong,
    /// An extension header this walk cannot cross: Mobility (135), HIP (139), Shim6 (140),
    /// or the experimental 253 and 254 (RFC 8200 §4: parameter problem, code 1).
    UnrecognizedNextHeader {
        /// Offset of the Next Header field naming it.
        pointer: usize,
    },
}

impl fmt::Display for ExtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { at } => write!(f, "extension header at {at} truncated"),
            Self::HopByHopNotFirst { pointer } => {
                write!(f, "hop-by-hop header not first (next header at {pointer})")
            }
            Self::TooManyHeaders => f.write_str("too many extension headers"),
            Self::ChainTooLong => f.write_str("extension header chain too long"),
            Self::UnrecognizedNextHeader { pointer } => {
                write!(f, "unrecognized next header at {pointer}")
            }
        }
    }
}

impl core::error::Error for ExtError {}

impl From<ExtError> for Error {
    fn from(e: ExtError) -> Self {
        match e {
            ExtError::Truncated { .. } => Self::Truncated,
            ExtError::HopByHopNotFirst { .. } => Self::Malformed,
            ExtError::TooManyHeaders
            | ExtError::ChainTooLong
            | ExtError::UnrecognizedNextHeader { .. } => Self::Unsupported,
        }
    }
}

/// Walks the extension headers of `packet` (RFC 8200 §4) to the upper-layer header.
///
/// Crosses Hop-by-Hop Options (only as the first header), Routing, Fragment, Destination
/// Options and Authentication (length in 4-byte units plus 2, RFC 4302 §2.2) headers; at
/// most `max_headers` of them, ending at most `max_bytes` after the fixed header. The bytes
/// walked are [`Ipv6Packet::packet`] (bounded by the payload length and the buffer).
/// Checks, per header: the limit on the number of headers ([`ExtError::TooManyHeaders`]);
/// that its length byte is present ([`ExtError::Truncated`]); the byte limit
/// ([`ExtError::ChainTooLong`], whatever the buffer holds); that the whole header is present
/// ([`ExtError::Truncated`]). The contents of options and routing headers are not checked.
///
/// The view must be checked (40 bytes), like every accessor of the crate.
pub fn walk<T: AsRef<[u8]>>(
    packet: &Ipv6Packet<T>,
    max_headers: usize,
    max_bytes: usize,
) -> core::result::Result<UpperLayer, ExtError> {
    let bytes = packet.packet();
    let mut next = packet.next_header();
    let mut next_at = NEXT_HEADER_AT;
    let mut at = IPV6_HEADER_LEN;
    let mut count = 0;
    let mut fragment = None;
    loop {
        match next {
            Protocol::HOP_BY_HOP if at != IPV6_HEADER_LEN => {
                return Err(ExtError::HopByHopNotFirst { pointer: next_at });
            }
            Protocol::HOP_BY_HOP
            | Protocol::ROUTING
            | Protocol::FRAGMENT
            | Protocol::DEST_OPTS
            | Protocol::AH => {}
            Protocol(135 | 139 | 140 | 253 | 254) => {
                return Err(ExtError::UnrecognizedNextHeader { pointer: next_at });
            }
            protocol => {
                return Ok(UpperLayer {
                    protocol,
                    offset: at,
                    next_header_at: next_at,
                    fragment,
                });
            }
        }
        if count >= max_headers {
            return Err(ExtError::TooManyHeaders);
        }
        let Some(&[next_byte, len_byte]) = bytes.get(at..at + 2) else {
            return Err(ExtError::Truncated { at });
        };
        let len = match next {
            Protocol::FRAGMENT => FRAGMENT_HEADER_LEN,
            Protocol::AH => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        let end = at + len;
        if end - IPV6_HEADER_LEN > max_bytes {
            return Err(ExtError::ChainTooLong);
        }
        let Some(header) = bytes.get(at..end) else {
            return Err(ExtError::Truncated { at });
        };
        count += 1;
        if next == Protocol::FRAGMENT {
            let f = FragmentHeader::new_unchecked(header);
            let info = *fragment.get_or_insert(FragmentInfo {
                at,
                offset: f.frag_offset(),
                more: f.more_frags(),
                ident: f.ident(),
            });
            if f.frag_offset() != 0 {
                return Ok(UpperLayer {
                    protocol: f.next_header(),
                    offset: end,
                    next_header_at: at,
                    fragment: Some(info),
                });
            }
        }
        next = Protocol(next_byte);
        next_at = at;
        at = end;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::ipv6::Ipv6Repr;
    use core::net::Ipv6Addr;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// A fixed header (from [`Ipv6Repr`]) followed by `payload`, payload length to match.
    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let repr = Ipv6Repr {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
            next_header: Protocol(next),
            payload_len: payload.len(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
        buf[40..].copy_from_slice(payload);
        buf
    }

    fn walk_bytes(
        buf: &[u8],
        max_headers: usize,
        max_bytes: usize,
    ) -> core::result::Result<UpperLayer, ExtError> {
        walk(
            &Ipv6Packet::new_checked(buf).unwrap(),
            max_headers,
            max_bytes,
        )
    }

    /// Hop-by-hop (router alert, PadN), destination options (Pad1, an unknown option, PadN),
    /// routing type 2 (RFC 6275 §6.4), fragment (first of several), AH with a 12-byte ICV,
    /// then UDP, written out from the RFC layouts. The headers start at 40, 48, 64, 88, 96
    /// and UDP at 120.
    const CHAIN: [u8; 88] = [
        // Hop-by-hop: next 60, length 0 (8 bytes); router alert (MLD), PadN with no data.
        60, 0, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00,
        // Destination options: next 43, length 1 (16 bytes); Pad1; type 0x3e, 3 bytes; PadN 6.
        43, 1, 0x00, 0x3e, 0x03, 0xaa, 0xbb, 0xcc, 0x01, 0x06, 0, 0, 0, 0, 0, 0,
        // Routing: next 44, length 2 (24 bytes), type 2, segments left 1, reserved, address.
        44, 2, 2, 1, 0, 0, 0, 0, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x09,
        // Fragment: next 51, reserved, offset 0 with M set, identification 0xdeadbeef.
        51, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef,
        // AH: next 17, payload length 4 ((4 + 2) * 4 = 24 bytes), reserved, SPI, sequence, ICV.
        17, 4, 0, 0, 0, 0, 0x01, 0x00, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
        // UDP header.
        0x9c, 0x40, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    const STARTS: [usize; 5] = [40, 48, 64, 88, 96];

    #[test]
    fn walks_the_full_chain() {
        let buf = packet(0, &CHAIN);
        let expected = UpperLayer {
            protocol: Protocol::UDP,
            offset: 120,
            next_header_at: 96,
            fragment: Some(FragmentInfo {
                at: 88,
                offset: 0,
                more: true,
                ident: 0xdead_beef,
            }),
        };
        assert_eq!(walk_bytes(&buf, 5, 80), Ok(expected));
        assert_eq!(walk_bytes(&buf, 4, 80), Err(ExtError::TooManyHeaders));
        assert_eq!(walk_bytes(&buf, 5, 79), Err(ExtError::ChainTooLong));
        assert_eq!(walk_bytes(&buf, 0, 0), Err(ExtError::TooManyHeaders));
        // Each header read through its own view.
        let h = Ipv6ExtHeader::new_checked(&buf[64..]).unwrap();
        assert_eq!((h.next_header(), h.header_len()), (Protocol::FRAGMENT, 24));
        assert_eq!((h.routing_type(), h.segments_left()), (2, 1));
        let f = FragmentHeader::new_checked(&buf[88..]).unwrap();
        assert_eq!(
            (f.next_header(), f.frag_offset(), f.more_frags()),
            (Protocol::AH, 0, true)
        );
        assert!(!f.is_atomic());
    }

    #[test]
    fn truncation_names_the_header() {
        let full = packet(0, &CHAIN);
        for len in 40..120 {
            let at = *STARTS.iter().rev().find(|&&s| s <= len).unwrap();
            // Cut by the buffer, and by the payload length with the bytes still there.
            assert_eq!(
                walk_bytes(&full[..len], 8, 2048),
                Err(ExtError::Truncated { at }),
                "{len}"
            );
            let mut short = full.clone();
            short[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            assert_eq!(
                walk_bytes(&short, 8, 2048),
                Err(ExtError::Truncated { at }),
                "{len}"
            );
        }
        assert_eq!(walk_bytes(&full[..120], 8, 2048).unwrap().offset, 120);
    }

    #[test]
    fn hop_by_hop_only_first() {
        // Destination options (next 0, 8 bytes) then a hop-by-hop header: the pointer is the
        // destination header's next header field, at 40.
        let buf = packet(60, &[0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0]);
        assert_eq!(
            walk_bytes(&buf, 8, 2048),
            Err(ExtError::HopByHopNotFirst { pointer: 40 })
        );
        // Two hop-by-hop headers: the second is named at 40.
        let buf = packet(0, &[0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0]);
        assert_eq!(
            walk_bytes(&buf, 8, 2048),
            Err(ExtError::HopByHopNotFirst { pointer: 40 })
        );
        // First is fine.
        let buf = packet(0, &[17, 0, 1, 4, 0, 0, 0, 0]);
        let up = walk_bytes(&buf, 8, 2048).unwrap();
        assert_eq!(
            (up.protocol, up.offset, up.next_header_at),
            (Protocol::UDP, 48, 40)
        );
        assert_eq!(
            Error::from(ExtError::HopByHopNotFirst { pointer: 40 }),
            Error::Malformed
        );
    }

    #[test]
    fn stops_at_esp_no_next_header_and_later_fragments() {
        let buf = packet(
            0,
            &[50, 0, 1, 4, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1],
        );
        let up = walk_bytes(&buf, 8, 2048).unwrap();
        assert_eq!(
            (up.protocol, up.offset, up.next_header_at),
            (Protocol::ESP, 48, 40)
        );
        // No next header: whatever follows is ignored, even garbage.
        let buf = packet(59, &[0xff; 5]);
        let up = walk_bytes(&buf, 0, 0).unwrap();
        assert_eq!(
            (up.protocol, up.offset, up.next_header_at),
            (Protocol(59), 40, 6)
        );
        // A fragment at offset 1480 (185 units), M clear: fragment data follows, not a header.
        let buf = packet(44, &[6, 0, 0x05, 0xc8, 0, 0, 0, 9, 0, 0xff, 0xff, 0xff]);
        let up = walk_bytes(&buf, 8, 2048).unwrap();
        assert_eq!(
            (up.protocol, up.offset, up.next_header_at),
            (Protocol::TCP, 48, 40)
        );
        assert_eq!(
            up.fragment,
            Some(FragmentInfo {
                at: 40,
                offset: 1480,
                more: false,
                ident: 9
            })
        );
        // An atomic fragment is crossed.
        let buf = packet(44, &[58, 0, 0, 0, 0, 0, 0, 9, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        let up = walk_bytes(&buf, 8, 2048).unwrap();
        assert_eq!((up.protocol, up.offset), (Protocol::ICMPV6, 48));
        assert!(FragmentHeader::new_checked(&buf[40..]).unwrap().is_atomic());
    }

    #[test]
    fn unrecognized_extension_headers() {
        for nh in [135u8, 139, 140, 253, 254] {
            let buf = packet(60, &[nh, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            assert_eq!(
                walk_bytes(&buf, 8, 2048),
                Err(ExtError::UnrecognizedNextHeader { pointer: 40 }),
                "{nh}"
            );
            let buf = packet(nh, &[0; 8]);
            assert_eq!(
                walk_bytes(&buf, 8, 2048),
                Err(ExtError::UnrecognizedNextHeader { pointer: 6 })
            );
        }
        // An upper layer the walk does not know is the caller's to judge.
        let up = walk_bytes(&packet(200, &[]), 0, 0).unwrap();
        assert_eq!(
            (up.protocol, up.offset, up.next_header_at),
            (Protocol(200), 40, 6)
        );
    }

    #[test]
    fn options_of_the_chain() {
        let buf = packet(0, &CHAIN);
        let hbh = Ipv6ExtHeader::new_checked(&buf[40..]).unwrap();
        let opts: Vec<_> = hbh.options().collect::<Result<_>>().unwrap();
        assert_eq!(
            opts,
            [
                Ipv6Option {
                    at: 2,
                    option_type: option_type::ROUTER_ALERT,
                    data: &[0, 0]
                },
                Ipv6Option {
                    at: 6,
                    option_type: option_type::PADN,
                    data: &[]
                },
            ]
        );
        assert!(!opts[0].is_padding() && opts[1].is_padding());
        let dest = Ipv6ExtHeader::new_checked(&buf[48..]).unwrap();
        let opts: Vec<_> = dest.options().collect::<Result<_>>().unwrap();
        let summary: Vec<_> = opts
            .iter()
            .map(|o| (o.at, o.option_type, o.data.len()))
            .collect();
        assert_eq!(summary, [(2, 0, 0), (3, 0x3e, 3), (8, 1, 6)]);
        assert_eq!(opts[1].data, &[0xaa, 0xbb, 0xcc]);
        assert!(opts[1].may_change());
        assert_eq!(opts[1].action(), OptionAction::Skip);
    }

    #[test]
    fn option_actions_from_the_two_high_bits() {
        let o = |t| Ipv6Option {
            at: 0,
            option_type: t,
            data: &[],
        };
        assert_eq!(o(0x1e).action(), OptionAction::Skip);
        assert_eq!(o(0x5e).action(), OptionAction::Discard);
        assert_eq!(o(0x9e).action(), OptionAction::DiscardAndReport);
        assert_eq!(
            o(0xde).action(),
            OptionAction::DiscardAndReportUnlessMulticast
        );
        assert_eq!(
            o(option_type::JUMBO_PAYLOAD).action(),
            OptionAction::DiscardAndReportUnlessMulticast
        );
        assert!(!o(0x1e).may_change() && o(0x3e).may_change() && !o(0xc2).may_change());
    }

    #[test]
    fn malformed_options_end_the_iteration() {
        let bad: [&[u8]; 4] = [
            &[0x05],                   // type with no length byte
            &[0x05, 0x03, 0, 0],       // data runs past the area
            &[0x00, 0x01, 0x05],       // Pad1, then PadN claiming 5 bytes with none there
            &[0x01, 0xff, 0, 0, 0, 0], // PadN of 255
        ];
        for area in bad {
            let items: Vec<_> = OptionsIter::new(area, 2).collect();
            assert_eq!(items.last(), Some(&Err(Error::Malformed)), "{area:?}");
            assert!(
                items[..items.len() - 1].iter().all(|i| i.is_ok()),
                "{area:?}"
            );
        }
        let ok: Vec<_> = OptionsIter::new(&[0x01, 0x00, 0x00], 2).collect();
        assert_eq!(ok.len(), 2);
        assert!(OptionsIter::new(&[], 2).next().is_none());
    }

    #[test]
    fn ext_header_view_lengths() {
        assert_eq!(
            Ipv6ExtHeader::new_checked(&[60u8][..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6ExtHeader::new_checked(&[60u8, 1, 0, 0, 0, 0, 0, 0][..]).unwrap_err(),
            Error::Truncated
        );
        let mut buf = [0u8; 24];
        let mut h = Ipv6ExtHeader::new_unchecked(&mut buf[..]);
        h.set_next_header(Protocol::TCP);
        h.set_header_len(24);
        h.data_mut()[0] = option_type::PADN;
        h.data_mut()[1] = 20;
        assert_eq!(buf[..3], [6, 2, 1]);
        let h = Ipv6ExtHeader::new_checked(&buf[..]).unwrap();
        assert_eq!((h.header_len(), h.data().len()), (24, 22));
        assert_eq!(h.options().count(), 1);
    }

    /// RFC 8200 §4.5 layout, checked against etherparse's Fragment header both ways.
    #[test]
    fn fragment_header_fields() {
        let bytes = [17u8, 0xff, 0x05, 0xc9, 0x12, 0x34, 0x56, 0x78];
        let f = FragmentHeader::new_checked(&bytes[..]).unwrap();
        let repr = FragmentRepr::parse(&f).unwrap();
        assert_eq!(
            repr,
            FragmentRepr {
                next_header: Protocol::UDP,
                frag_offset: 1480,
                more_frags: true,
                ident: 0x1234_5678
            }
        );
        let mut out = [0xaau8; 8];
        repr.emit(&mut FragmentHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, [17, 0, 0x05, 0xc9, 0x12, 0x34, 0x56, 0x78]);
        let mut m = FragmentHeader::new_unchecked(&mut out[..]);
        m.set_more_frags(false);
        m.set_frag_offset(8);
        m.set_ident(1);
        m.set_next_header(Protocol::TCP);
        assert_eq!(out, [6, 0, 0x00, 0x08, 0, 0, 0, 1]);
        assert_eq!(
            FragmentHeader::new_checked(&bytes[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    /// One extension header of the proptest chains: kind and length parameter.
    #[derive(Debug, Clone, Copy)]
    enum Ext {
        Dest(u8),
        Routing(u8),
        Frag,
        Auth(u8),
    }

    fn arb_ext() -> impl Strategy<Value = Ext> {
        prop_oneof![
            (0u8..4).prop_map(Ext::Dest),
            (0u8..4).prop_map(Ext::Routing),
            Just(Ext::Frag),
            (1u8..8).prop_map(Ext::Auth),
        ]
    }

    /// Builds a chain from its description; returns the payload and each header's start.
    fn build(hbh: Option<u8>, exts: &[Ext], upper: u8) -> (u8, Vec<u8>, Vec<usize>) {
        let mut kinds: Vec<(u8, usize)> = Vec::new();
        if let Some(n) = hbh {
            kinds.push((0, (usize::from(n) + 1) * 8));
        }
        for e in exts {
            kinds.push(match *e {
                Ext::Dest(n) => (60, (usize::from(n) + 1) * 8),
                Ext::Routing(n) => (43, (usize::from(n) + 1) * 8),
                Ext::Frag => (44, 8),
                Ext::Auth(n) => (51, (usize::from(n) + 2) * 4),
            });
        }
        let first = kinds.first().map_or(upper, |k| k.0);
        let mut payload = Vec::new();
        let mut starts = Vec::new();
        for (i, &(kind, len)) in kinds.iter().enumerate() {
            let next = kinds.get(i + 1).map_or(upper, |k| k.0);
            starts.push(40 + payload.len());
            let mut h = vec![0u8; len];
            h[0] = next;
            h[1] = match kind {
                44 => 0,
                51 => (len / 4 - 2) as u8,
                _ => (len / 8 - 1) as u8,
            };
            if kind == 60 || kind == 0 {
                h[2] = option_type::PADN;
                h[3] = (len - 4) as u8;
            }
            payload.extend_from_slice(&h);
        }
        (first, payload, starts)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The walk ends where the built chain does; every cut names the header it cuts.
        #[test]
        fn walk_agrees_with_the_built_chain(
            hbh in proptest::option::of(0u8..3),
            exts in proptest::collection::vec(arb_ext(), 0..6),
            upper in prop_oneof![Just(6u8), Just(17), Just(58)],
        ) {
            let (first, payload, starts) = build(hbh, &exts, upper);
            let buf = packet(first, &payload);
            let up = walk_bytes(&buf, starts.len(), payload.len()).unwrap();
            prop_assert_eq!(up.protocol, Protocol(upper));
            prop_assert_eq!(up.offset, buf.len());
            prop_assert_eq!(up.next_header_at, starts.last().copied().unwrap_or(6));
            prop_assert_eq!(up.fragment.map(|f| f.at), exts.iter().position(|e| matches!(e, Ext::Frag)).map(|i| starts[i + usize::from(hbh.is_some())]));
            if !starts.is_empty() {
                prop_assert_eq!(walk_bytes(&buf, starts.len() - 1, 4096), Err(ExtError::TooManyHeaders));
                prop_assert_eq!(walk_bytes(&buf, 8, payload.len() - 1), Err(ExtError::ChainTooLong));
            }
            for len in 40..buf.len() {
                let at = *starts.iter().rev().find(|&&s| s <= len).unwrap();
                prop_assert_eq!(walk_bytes(&buf[..len], 8, 4096), Err(ExtError::Truncated { at }));
            }
        }

        /// Random bytes after a fixed header: the walk never panics, and what it returns
        /// lies inside the packet.
        #[test]
        fn walk_never_panics(
            next in any::<u8>(),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            max_headers in 0usize..10, max_bytes in 0usize..300,
        ) {
            let buf = packet(next, &payload);
            for len in 40..=buf.len() {
                if let Ok(up) = walk_bytes(&buf[..len], max_headers, max_bytes) {
                    prop_assert!(up.offset <= len && up.next_header_at < up.offset.max(7));
                }
            }
            for start in 0..payload.len() {
                let h = Ipv6ExtHeader::new_unchecked(&payload[start..]);
                if h.check_len().is_ok() {
                    let _ = (h.next_header(), h.routing_type(), h.segments_left(), h.data());
                    let n = h.options().take(300).count();
                    prop_assert!(n <= h.data().len());
                }
                let _ = OptionsIter::new(&payload[start..], 0).take(300).count();
                if let Ok(f) = FragmentHeader::new_checked(&payload[start..]) {
                    let _ = (f.next_header(), f.frag_offset(), f.more_frags(), f.ident(), f.is_atomic());
                    let _ = FragmentRepr::parse(&f);
                }
            }
        }

        /// Fragment headers agree with etherparse's both ways.
        #[test]
        fn fragment_agrees_with_etherparse(
            nh in any::<u8>(), units in 0u16..0x2000, more in any::<bool>(), ident in any::<u32>(),
        ) {
            let theirs = etherparse::Ipv6FragmentHeader::new(
                etherparse::IpNumber(nh),
                etherparse::IpFragOffset::try_new(units).unwrap(),
                more,
                ident,
            );
            let bytes = theirs.to_bytes();
            let repr = FragmentRepr::parse(&FragmentHeader::new_checked(&bytes[..]).unwrap()).unwrap();
            prop_assert_eq!(repr, FragmentRepr { next_header: Protocol(nh), frag_offset: units * 8, more_frags: more, ident });
            let mut ours = [0u8; 8];
            repr.emit(&mut FragmentHeader::new_unchecked(&mut ours[..]));
            prop_assert_eq!(ours, bytes);
        }
    }
}
