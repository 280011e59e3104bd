//! IPv4 headers (RFC 791).
//!
//! [`Ipv4Packet::check_len`] checks the header (at least 20 bytes, `IHL >= 5`, the buffer
//! holds `IHL * 4` bytes) but deliberately not the total length against the buffer: that is a
//! separate drop reason for the caller. [`Ipv4Packet::payload`] clamps to both, so it never
//! panics, and it drops link-layer padding after `total_len`.

use core::fmt;
use core::net::Ipv4Addr;

use crate::checksum;
use crate::{Error, Result};

/// An IP protocol number (the IPv4 `protocol` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Protocol(pub u8);

impl Protocol {
    /// Internet Control Message Protocol.
    pub const ICMP: Self = Self(1);
    /// Transmission Control Protocol.
    pub const TCP: Self = Self(6);
    /// User Datagram Protocol.
    pub const UDP: Self = Self(17);
    /// Stream Control Transmission Protocol.
    pub const SCTP: Self = Self(132);
    /// Lightweight User Datagram Protocol (RFC 3828).
    pub const UDPLITE: Self = Self(136);
}

impl From<u8> for Protocol {
    #[inline]
    fn from(v: u8) -> Self {
        Self(v)
    }
}

impl From<Protocol> for u8 {
    #[inline]
    fn from(v: Protocol) -> Self {
        v.0
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

mod field {
    use crate::Field;

    pub(crate) const VER_IHL: usize = 0;
    pub(crate) const DSCP_ECN: usize = 1;
    pub(crate) const LENGTH: usize = 2;
    pub(crate) const IDENT: usize = 4;
    pub(crate) const FLG_OFF: usize = 6;
    pub(crate) const TTL: usize = 8;
    pub(crate) const PROTOCOL: usize = 9;
    pub(crate) const CHECKSUM: usize = 10;
    pub(crate) const SRC: Field = 12..16;
    pub(crate) const DST: Field = 16..20;
}

/// Length of an IPv4 header without options (the minimum, and what [`Ipv4Repr`] emits).
pub const HEADER_LEN: usize = field::DST.end;

/// Longest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 20 bytes check_len verifies; options, payload clamped"
)]
impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    view_constructors!();

    /// Checks the header length: [`Error::Truncated`] below 20 bytes, [`Error::Malformed`] if
    /// `IHL < 5`, [`Error::Truncated`] if the buffer is shorter than `IHL * 4`.
    ///
    /// Neither the version nor the total length is checked here.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(Error::Truncated)
        } else if self.ihl() < 5 {
            Err(Error::Malformed)
        } else if len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// IP version (4 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Internet header length in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// Header length in bytes (`IHL * 4`, options included).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point (upper 6 bits of the former TOS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit congestion notification (lower 2 bits of the former TOS byte).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// The whole DSCP/ECN (former TOS) byte.
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length field: header plus payload, in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset **in bytes** (the 13-bit field times 8; always a multiple of 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Whether this is a fragment: more-fragments set or a non-zero offset.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Whether this is the first fragment of a fragmented datagram: more-fragments set and
    /// offset 0. False for an unfragmented packet (use `frag_offset() == 0` to ask whether the
    /// payload starts with the transport header).
    #[inline]
    pub fn is_first_fragment(&self) -> bool {
        crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK)
            == FLAG_MF
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        crate::bytes::get_ipv4(self.buffer.as_ref(), field::SRC.start)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        crate::bytes::get_ipv4(self.buffer.as_ref(), field::DST.start)
    }

    /// Where the header ends in the buffer: `header_len()`, kept between the fixed part
    /// and the buffer's end. Equal to `header_len()` on a checked view; on a view of the
    /// fixed part alone (`new_unchecked` over 20 bytes, IHL unchecked) it keeps the
    /// accessors below from panicking: they see no options and no payload.
    #[inline]
    fn header_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        self.header_len().max(HEADER_LEN).min(len)
    }

    /// The options area: bytes 20 to `header_len()` (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let end = self.header_end();
        &self.buffer.as_ref()[HEADER_LEN.min(end)..end]
    }

    /// End of the payload: `total_len` clamped to the buffer, and not before the header end.
    #[inline]
    fn payload_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        usize::from(self.total_len())
            .min(len)
            .max(self.header_end())
    }

    /// The payload: bytes from `header_len()` up to `min(total_len, buffer length)`; empty if
    /// `total_len < header_len()`. Link-layer padding past `total_len` is excluded.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = self.payload_end();
        &self.buffer.as_ref()[self.header_end()..end]
    }

    /// Whether the header checksum verifies (the header, options included, sums to 0xffff).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let header = &self.buffer.as_ref()[..self.header_end()];
        checksum::verifies(checksum::sum(header, 0))
    }
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Walks the options (RFC 791 §3.1): type 0 (end of list) stops the walk, type 1 (no
    /// operation) is one byte, any other type is followed by a length byte that counts the type
    /// and length bytes, must be at least 2 and must not run past the options area. Returns
    /// [`Error::Malformed`] otherwise. Option contents are not interpreted.
    pub fn check_options(&self) -> Result<()> {
        let opts = self.options();
        let mut i = 0;
        while let Some(&kind) = opts.get(i) {
            match kind {
                0 => return Ok(()),
                1 => i += 1,
                _ => {
                    let Some(&len) = opts.get(i + 1) else {
                        return Err(Error::Malformed);
                    };
                    let len = usize::from(len);
                    if len < 2 || len > opts.len() - i {
                        return Err(Error::Malformed);
                    }
                    i += len;
                }
            }
        }
        Ok(())
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version (low 4 bits of `v`).
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the header length in bytes (stored as `len / 4`; use a multiple of 4 in 20..=60).
    /// Re-run `check_len` afterwards before relying on the no-panic guarantee.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (low 6 bits of `v`), keeping the ECN bits.
    #[inline]
    pub fn set_dscp(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (v << 2);
    }

    /// Sets the ECN bits (low 2 bits of `v`), keeping the DSCP.
    #[inline]
    pub fn set_ecn(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & !0x03) | (v & 0x03);
    }

    /// Sets the whole DSCP/ECN byte.
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    /// Sets the total length field.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the identification field.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets or clears the don't-fragment flag.
    #[inline]
    pub fn set_dont_frag(&mut self, v: bool) {
        self.set_flag(FLAG_DF, v);
    }

    /// Sets or clears the more-fragments flag.
    #[inline]
    pub fn set_more_frags(&mut self, v: bool) {
        self.set_flag(FLAG_MF, v);
    }

    #[inline]
    fn set_flag(&mut self, flag: u16, v: bool) {
        let old = crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF);
        let new = if v { old | flag } else { old & !flag };
        crate::bytes::put_u16(self.buffer.as_mut(), field::FLG_OFF, new);
    }

    /// Sets the fragment offset **in bytes**; it should be a multiple of 8 (the low 3 bits are
    /// dropped). The flags are kept.
    #[inline]
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let old = crate::bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF);
        let new = (old & !OFFSET_MASK) | (bytes >> 3);
        crate::bytes::put_u16(self.buffer.as_mut(), field::FLG_OFF, new);
    }

    /// Sets the time to live (the checksum is not updated).
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = v.0;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v.octets());
    }

    /// Computes and stores the header checksum (over `header_len()` bytes).
    #[inline]
    pub fn fill_checksum(&mut self) {
        let hl = self.header_end();
        fill_header_checksum(self.buffer.as_mut(), hl);
    }

    /// Mutable options area.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_end();
        &mut self.buffer.as_mut()[HEADER_LEN.min(hl)..hl]
    }

    /// Mutable payload, with the same bounds as [`Self::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_end(), self.payload_end());
        &mut self.buffer.as_mut()[start..end]
    }
}

/// The decoded fields of an unfragmented IPv4 header. Options are not represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: Protocol,
    /// Payload length in bytes (`total_len - header_len`); at most [`Ipv4Repr::MAX_PAYLOAD_LEN`].
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP/ECN (former TOS) byte.
    pub dscp_ecn: u8,
    /// Identification field.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Length of the header `emit` writes (20: no options).
    pub const HEADER_LEN: usize = HEADER_LEN;

    /// Largest payload a 20-byte header can describe.
    pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

    /// Decodes and validates a packet, in this order:
    /// [`Error::Truncated`] / [`Error::Malformed`] from `check_len`; [`Error::Malformed`] if the
    /// version is not 4 or `total_len < header_len`; [`Error::Truncated`] if `total_len`
    /// exceeds the buffer; [`Error::Malformed`] if the options fail
    /// [`Ipv4Packet::check_options`]; [`Error::Checksum`] if the header checksum does not
    /// verify; [`Error::Unsupported`] for a fragment (the repr cannot describe one).
    ///
    /// Valid options are accepted and dropped; `payload_len` excludes them.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        let header_len = packet.header_len();
        let total_len = usize::from(packet.total_len());
        if total_len < header_len {
            return Err(Error::Malformed);
        }
        if total_len > packet.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        packet.check_options()?;
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        if packet.is_fragment() {
            return Err(Error::Unsupported);
        }
        Ok(Self {
            src: packet.src(),
            dst: packet.dst(),
            protocol: packet.protocol(),
            payload_len: total_len - header_len,
            ttl: packet.ttl(),
            dscp_ecn: packet.dscp_ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Length of the emitted header (20).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of header plus payload (the `total_len` emitted).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header (no options, not a fragment) with a correct checksum; the payload
    /// is left untouched. Panics if the buffer is shorter than 20 bytes. `payload_len` above
    /// [`Self::MAX_PAYLOAD_LEN`] is a bug (debug assertion; `total_len` saturates at 65535).
    /// Wrap a reused buffer with `new_unchecked`.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the caller's buffer holds 20 bytes; short panics"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Ipv4Packet<&mut T>) {
        debug_assert!(self.payload_len <= Self::MAX_PAYLOAD_LEN);
        let total_len = u16::try_from(HEADER_LEN + self.payload_len).unwrap_or(u16::MAX);
        {
            let b = packet.buffer.as_mut();
            b[field::VER_IHL] = 0x45;
            b[field::DSCP_ECN] = self.dscp_ecn;
            crate::bytes::put_u16(b, field::LENGTH, total_len);
            crate::bytes::put_u16(b, field::IDENT, self.ident);
            crate::bytes::put_u16(b, field::FLG_OFF, if self.dont_frag { FLAG_DF } else { 0 });
            b[field::TTL] = self.ttl;
            b[field::PROTOCOL] = self.protocol.0;
        }
        packet.set_src(self.src);
        packet.set_dst(self.dst);
        packet.fill_checksum();
    }
}

/// Computes and stores the header checksum of the IPv4 header at the start of `h`, whose
/// header is `ihl` bytes long (RFC 791: the one's-complement sum of the header with the
/// checksum field taken as zero). `h` must hold at least `ihl` (≥ 20) bytes.
#[inline]
#[expect(
    clippy::indexing_slicing,
    reason = "documented precondition: `h` holds the `ihl` (at least 20) bytes of a header"
)]
pub fn fill_header_checksum(h: &mut [u8], ihl: usize) {
    h[10] = 0;
    h[11] = 0;
    let c = checksum::checksum(&h[..ihl]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// The widely used example header: UDP, 192.168.0.1 -> 192.168.0.199, total length 115.
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    /// IHL 6 with a Router Alert option (RFC 2113), DSCP EF, IGMP, 4 payload bytes.
    const WITH_OPTIONS: [u8; 28] = [
        0x46, 0xb8, 0x00, 0x1c, 0x12, 0x34, 0x00, 0x00, 0x01, 0x02, 0x27, 0xd9, 0x0a, 0x00, 0x00,
        0x01, 0xe0, 0x00, 0x00, 0x16, 0x94, 0x04, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    fn example_packet() -> Vec<u8> {
        let mut buf = vec![0u8; 115];
        buf[..20].copy_from_slice(&HEADER);
        for (i, b) in buf[20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        buf
    }

    fn example_repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 0, 1),
            dst: Ipv4Addr::new(192, 168, 0, 199),
            protocol: Protocol::UDP,
            payload_len: 95,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
        }
    }

    #[test]
    fn deconstruct() {
        let buf = example_packet();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.ihl(), 5);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn(), p.dscp_ecn()), (0, 0, 0));
        assert_eq!(p.total_len(), 115);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert!(!p.is_first_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), Protocol::UDP);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &buf[20..]);
        assert!(p.verify_checksum());
        assert_eq!(p.check_options(), Ok(()));
        assert_eq!(Ipv4Repr::parse(&p), Ok(example_repr()));
    }

    #[test]
    fn deconstruct_with_options() {
        let p = Ipv4Packet::new_checked(&WITH_OPTIONS[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!((p.dscp(), p.ecn()), (46, 0));
        assert_eq!(p.ident(), 0x1234);
        assert!(!p.dont_frag());
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.protocol(), Protocol(2));
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(p.verify_checksum());
        assert_eq!(p.check_options(), Ok(()));
        let repr = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(repr.payload_len, 4);
        assert_eq!(repr.dscp_ecn, 0xb8);
        assert_eq!(repr.dst, Ipv4Addr::new(224, 0, 0, 22));
    }

    #[test]
    fn construct() {
        let repr = example_repr();
        let mut buf = [0xa5u8; 20];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, HEADER);
        assert_eq!(repr.buffer_len(), 115);
        assert_eq!(repr.header_len(), Ipv4Repr::HEADER_LEN);
    }

    #[test]
    fn payload_excludes_padding_and_clamps() {
        // Ethernet padding after total_len is not payload.
        let mut buf = WITH_OPTIONS.to_vec();
        buf.extend_from_slice(&[0; 18]);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        // total_len beyond the buffer: clamped, and parse reports truncation.
        let p = Ipv4Packet::new_checked(&WITH_OPTIONS[..26]).unwrap();
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Truncated));
        // total_len below header_len: empty payload, parse reports malformed.
        let mut buf = WITH_OPTIONS;
        buf[3] = 10;
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.payload().is_empty());
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed));
    }

    #[test]
    fn check_len_errors() {
        for len in 0..20 {
            assert_eq!(
                Ipv4Packet::new_checked(&HEADER[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        for ihl in 0..5 {
            let mut buf = HEADER;
            buf[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
                Error::Malformed
            );
        }
        // IHL 15 on a 20-byte buffer.
        let mut buf = HEADER;
        buf[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
            Error::Truncated
        );
        // IHL 6 with 3 of the 4 option bytes.
        assert_eq!(
            Ipv4Packet::new_checked(&WITH_OPTIONS[..23]).unwrap_err(),
            Error::Truncated
        );
        assert!(Ipv4Packet::new_checked(&WITH_OPTIONS[..24]).is_ok());
    }

    /// A 20-byte header followed by `opts` (length a multiple of 4), IHL set to match.
    fn with_options(opts: &[u8]) -> Vec<u8> {
        let mut buf = HEADER.to_vec();
        buf.extend_from_slice(opts);
        buf[0] = 0x40 | (buf.len() / 4) as u8;
        buf[3] = buf.len() as u8;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum();
        buf
    }

    #[test]
    fn options_walk() {
        let ok: [&[u8]; 6] = [
            &[0, 0, 0, 0],
            &[1, 1, 1, 1],
            &[1, 0, 0xff, 0xff],          // garbage after end of list is ignored
            &[0x94, 4, 0, 0],             // router alert
            &[7, 3, 4, 0],                // record route fragment, then end of list
            &[0x44, 8, 5, 0, 0, 0, 0, 0], // timestamp, exactly fills the area
        ];
        for opts in ok {
            let buf = with_options(opts);
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(p.check_options(), Ok(()), "{opts:?}");
            assert!(Ipv4Repr::parse(&p).is_ok(), "{opts:?}");
        }
        let bad: [&[u8]; 5] = [
            &[0x94, 1, 0, 0], // length 1
            &[0x94, 0, 0, 0], // length 0
            &[0x94, 5, 0, 0], // runs past the end
            &[1, 1, 1, 0x94], // type with no length byte
            &[1, 0x83, 7, 0], // loose source route running past the end
        ];
        for opts in bad {
            let buf = with_options(opts);
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(p.check_options(), Err(Error::Malformed), "{opts:?}");
            assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed), "{opts:?}");
        }
    }

    #[test]
    fn parse_errors() {
        let good = example_packet();
        let mut buf = good.clone();
        buf[0] = 0x65;
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed));

        let mut buf = good.clone();
        buf[8] = 63; // TTL changed without updating the checksum
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(!p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Checksum));

        let mut buf = good.clone();
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_more_frags(true);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.is_fragment() && p.is_first_fragment());
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Unsupported));

        let mut buf = good;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_frag_offset(1480);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.is_fragment() && !p.is_first_fragment());
        assert_eq!(p.frag_offset(), 1480);
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Unsupported));
    }

    #[test]
    fn setters() {
        let mut buf = example_packet();
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_dscp(46);
        p.set_ecn(3);
        assert_eq!((p.dscp(), p.ecn(), p.dscp_ecn()), (46, 3, 0xbb));
        p.set_dscp(10);
        assert_eq!((p.dscp(), p.ecn()), (10, 3));
        p.set_ecn(1);
        assert_eq!((p.dscp(), p.ecn()), (10, 1));
        p.set_dscp_ecn(0);
        p.set_total_len(100);
        p.set_ident(0xbeef);
        p.set_dont_frag(false);
        p.set_more_frags(true);
        p.set_frag_offset(0xfff8);
        assert_eq!(p.total_len(), 100);
        assert_eq!(p.ident(), 0xbeef);
        assert!(!p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 0xfff8);
        p.set_more_frags(false);
        p.set_dont_frag(true);
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0xfff8);
        p.set_frag_offset(0);
        assert!(!p.is_fragment());
        p.set_ttl(7);
        p.set_protocol(Protocol::TCP);
        p.set_src(Ipv4Addr::new(1, 2, 3, 4));
        p.set_dst(Ipv4Addr::new(5, 6, 7, 8));
        p.set_header_len(24);
        p.set_version(4);
        assert_eq!((p.version(), p.header_len()), (4, 24));
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.fill_checksum();
        assert_eq!((p.ttl(), p.protocol()), (7, Protocol::TCP));
        assert_eq!(p.src(), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(p.dst(), Ipv4Addr::new(5, 6, 7, 8));
        assert_eq!(p.payload_mut().len(), 76);
        assert!(p.verify_checksum());
        assert_eq!(p.check_options(), Ok(()));
        p.set_checksum(0);
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn ttl_decrement_with_incremental_update() {
        let mut buf = example_packet();
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        let old = u16::from_be_bytes([p.ttl(), p.protocol().0]);
        p.set_ttl(p.ttl() - 1);
        let new = u16::from_be_bytes([p.ttl(), p.protocol().0]);
        let hc = checksum::update16(p.checksum(), old, new);
        p.set_checksum(hc);
        assert!(p.verify_checksum());
        let updated = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), updated);
    }

    fn arb_repr() -> impl Strategy<Value = Ipv4Repr> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
            0usize..=2000,
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
        )
            .prop_map(
                |(src, dst, protocol, payload_len, ttl, dscp_ecn, ident, dont_frag)| Ipv4Repr {
                    src: Ipv4Addr::from_bits(src),
                    dst: Ipv4Addr::from_bits(dst),
                    protocol: Protocol(protocol),
                    payload_len,
                    ttl,
                    dscp_ecn,
                    ident,
                    dont_frag,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(repr in arb_repr(), junk in any::<u8>()) {
            let mut buf = vec![junk; repr.buffer_len()];
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(p.payload().len(), repr.payload_len);
            prop_assert_eq!(Ipv4Repr::parse(&p), Ok(repr));
        }

        #[test]
        fn getters_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..80),
            ver_ihl in prop_oneof![any::<u8>(), (0x40u8..0x50)],
        ) {
            if let Some(b) = bytes.first_mut() {
                *b = ver_ihl;
            }
            if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
                let _ = (p.version(), p.ihl(), p.header_len(), p.dscp(), p.ecn(), p.dscp_ecn());
                let _ = (p.total_len(), p.ident(), p.dont_frag(), p.more_frags(), p.frag_offset());
                let _ = (p.is_fragment(), p.is_first_fragment(), p.ttl(), p.protocol());
                let _ = (p.checksum(), p.src(), p.dst(), p.options(), p.payload());
                let _ = (p.verify_checksum(), p.check_options());
                let _ = Ipv4Repr::parse(&p);
                let mut copy = bytes.clone();
                let mut m = Ipv4Packet::new_unchecked(&mut copy[..]);
                let _ = (m.options_mut().len(), m.payload_mut().len());
                m.fill_checksum();
            }
        }

        /// A view of the fixed header alone (what the stack reads through a 20-byte
        /// array, its IHL unchecked) panics on no accessor, whatever the IHL and total
        /// length say: the options and payload it cannot hold are empty, the checksum
        /// covers the 20 bytes it holds.
        #[test]
        fn a_fixed_part_view_never_panics(mut h in any::<[u8; 20]>(), ihl in 0u8..16) {
            h[0] = 0x40 | ihl;
            let p = Ipv4Packet::new_unchecked(&h);
            prop_assert!(p.options().is_empty());
            prop_assert!(p.payload().is_empty());
            let _ = (p.verify_checksum(), p.check_options());
            let mut copy = h;
            let mut m = Ipv4Packet::new_unchecked(&mut copy);
            prop_assert!(m.options_mut().is_empty() && m.payload_mut().is_empty());
            m.fill_checksum();
            prop_assert!(Ipv4Packet::new_unchecked(&copy).verify_checksum());
        }

        /// Headers built by etherparse (with options) read the same through our view.
        #[test]
        fn agrees_with_etherparse_parse(
            dscp in 0u8..64, ecn in 0u8..4, ident in any::<u16>(), df in any::<bool>(),
            mf in any::<bool>(), offset_units in 0u16..0x2000, ttl in any::<u8>(),
            protocol in any::<u8>(), src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            opt_words in 0usize..=10, payload_len in 0u16..200,
        ) {
            let opts = [1u8; 40];
            let mut h = etherparse::Ipv4Header::new(
                payload_len, ttl, etherparse::IpNumber(protocol), src, dst,
            ).unwrap();
            h.dscp = etherparse::IpDscp::try_new(dscp).unwrap();
            h.ecn = etherparse::IpEcn::try_new(ecn).unwrap();
            h.identification = ident;
            h.dont_fragment = df;
            h.more_fragments = mf;
            h.fragment_offset = etherparse::IpFragOffset::try_new(offset_units).unwrap();
            h.options = etherparse::Ipv4Options::try_from(&opts[..opt_words * 4]).unwrap();
            h.set_payload_len(usize::from(payload_len)).unwrap();
            h.header_checksum = h.calc_header_checksum();
            let mut buf = h.to_bytes().to_vec();
            buf.resize(buf.len() + usize::from(payload_len), 0x5a);

            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.version(), 4);
            prop_assert_eq!(p.header_len(), h.header_len());
            prop_assert_eq!(p.dscp(), dscp);
            prop_assert_eq!(p.ecn(), ecn);
            prop_assert_eq!(p.total_len(), h.total_len);
            prop_assert_eq!(p.ident(), ident);
            prop_assert_eq!(p.dont_frag(), df);
            prop_assert_eq!(p.more_frags(), mf);
            prop_assert_eq!(p.frag_offset(), h.fragment_offset.byte_offset());
            prop_assert_eq!(p.is_fragment(), h.is_fragmenting_payload());
            prop_assert_eq!(p.ttl(), ttl);
            prop_assert_eq!(p.protocol(), Protocol(protocol));
            prop_assert_eq!(p.checksum(), h.header_checksum);
            prop_assert_eq!(p.src(), Ipv4Addr::from(src));
            prop_assert_eq!(p.dst(), Ipv4Addr::from(dst));
            prop_assert_eq!(p.options(), h.options.as_slice());
            prop_assert_eq!(p.payload().len(), usize::from(payload_len));
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(p.check_options(), Ok(()));
        }

        /// Headers we emit parse in etherparse with the same fields and checksum.
        #[test]
        fn agrees_with_etherparse_emit(repr in arb_repr()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let s = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
            prop_assert_eq!(s.source_addr(), repr.src);
            prop_assert_eq!(s.destination_addr(), repr.dst);
            prop_assert_eq!(s.protocol(), etherparse::IpNumber(repr.protocol.0));
            prop_assert_eq!(usize::from(s.total_len()), repr.buffer_len());
            prop_assert_eq!(s.ttl(), repr.ttl);
            prop_assert_eq!(s.identification(), repr.ident);
            prop_assert_eq!(s.dont_fragment(), repr.dont_frag);
            prop_assert!(!s.is_fragmenting_payload());
            let h = s.to_header();
            prop_assert_eq!(u8::from(h.dscp) << 2 | u8::from(h.ecn), repr.dscp_ecn);
            prop_assert_eq!(h.calc_header_checksum(), s.header_checksum());
        }
    }
}
