//! TCP segments (RFC 9293) over IPv4.
//!
//! The view's buffer must span exactly the segment (header, options and data), as the IPv4
//! payload does: TCP has no length field, so the checksum and [`TcpPacket::payload`] use the
//! buffer length.

use core::iter::FusedIterator;
use core::net::Ipv4Addr;
use core::ops;

use crate::checksum;
use crate::ipv4::Protocol;
use crate::{Error, Result};

mod field {
    pub(crate) const SRC_PORT: usize = 0;
    pub(crate) const DST_PORT: usize = 2;
    pub(crate) const SEQ: usize = 4;
    pub(crate) const ACK: usize = 8;
    pub(crate) const OFF_FLAGS: usize = 12;
    pub(crate) const WINDOW: usize = 14;
    pub(crate) const CHECKSUM: usize = 16;
    pub(crate) const URGENT: usize = 18;
    pub(crate) const OPTIONS: usize = 20;
}

/// Length of a TCP header without options (the minimum).
pub const HEADER_LEN: usize = field::OPTIONS;

/// Where the checksum field is in the header (what a device completing a partial
/// checksum is told).
pub const CHECKSUM_AT: usize = field::CHECKSUM;

/// Longest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The TCP control bits (the low 9 bits of header bytes 12-13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: Self = Self(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Self = Self(0x002);
    /// Reset the connection.
    pub const RST: Self = Self(0x004);
    /// Push function.
    pub const PSH: Self = Self(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: Self = Self(0x010);
    /// Urgent pointer field is significant.
    pub const URG: Self = Self(0x020);
    /// ECN-Echo (RFC 3168).
    pub const ECE: Self = Self(0x040);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: Self = Self(0x080);
    /// Accurate ECN (RFC 9768), formerly the experimental ECN-nonce bit NS (RFC 3540).
    pub const AE: Self = Self(0x100);
    /// Old name of [`Self::AE`].
    pub const NS: Self = Self::AE;
    /// All nine control bits.
    pub const ALL: Self = Self(0x1ff);

    /// No flags set.
    #[inline]
    pub const fn empty() -> Self {
        Self(0)
    }

    /// The raw bits.
    #[inline]
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set in `self`.
    #[inline]
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// Sets the flags of `other`.
    #[inline]
    pub fn insert(&mut self, other: Self) {
        self.0 |= other.0;
    }

    /// Clears the flags of `other`.
    #[inline]
    pub fn remove(&mut self, other: Self) {
        self.0 &= !other.0;
    }
}

impl ops::BitOr for TcpFlags {
    type Output = Self;
    #[inline]
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for TcpFlags {
    #[inline]
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl ops::BitAnd for TcpFlags {
    type Output = Self;
    #[inline]
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

/// Option kinds (IANA "TCP Option Kind Numbers").
mod kind {
    pub(crate) const END: u8 = 0;
    pub(crate) const NOP: u8 = 1;
    pub(crate) const MSS: u8 = 2;
    pub(crate) const WS: u8 = 3;
    pub(crate) const SACK_PERMITTED: u8 = 4;
    pub(crate) const SACK: u8 = 5;
    pub(crate) const TIMESTAMP: u8 = 8;
}

/// A TCP option, as yielded by [`TcpPacket::options_iter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// Kind 0: end of the option list; the iterator stops after it.
    EndOfList,
    /// Kind 1: padding.
    NoOp,
    /// Kind 2, length 4: maximum segment size.
    MaxSegmentSize(u16),
    /// Kind 3, length 3: window scale shift count (RFC 7323; not range-checked).
    WindowScale(u8),
    /// Kind 4, length 2: SACK permitted (RFC 2018).
    SackPermitted,
    /// Kind 5: SACK blocks (RFC 2018), the raw bytes after kind and length: one or more
    /// 8-byte blocks, each a big-endian left edge then right edge.
    SackRange(&'a [u8]),
    /// Kind 8, length 10: timestamps (RFC 7323).
    Timestamp {
        /// Timestamp value.
        tsval: u32,
        /// Timestamp echo reply.
        tsecr: u32,
    },
    /// Any other kind, with the bytes after kind and length.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data (length minus 2 bytes).
        data: &'a [u8],
    },
}

/// Iterator over the options of a TCP header, yielding `Result<TcpOption>`.
///
/// It ends after [`TcpOption::EndOfList`], at the end of the options area, or after yielding
/// one [`Error::Malformed`]: a length byte that is missing, below 2 or running past the area,
/// or a known kind with the wrong length (MSS 4, window scale 3, SACK permitted 2, timestamp
/// 10, SACK 2 + 8n with n ≥ 1).
#[derive(Debug, Clone)]
pub struct TcpOptionIter<'a> {
    data: &'a [u8],
}

impl<'a> TcpOptionIter<'a> {
    /// Iterates over a raw options area.
    #[inline]
    pub const fn new(options: &'a [u8]) -> Self {
        Self { data: options }
    }

    #[inline]
    fn fail(&mut self) -> Option<Result<TcpOption<'a>>> {
        self.data = &[];
        Some(Err(Error::Malformed))
    }
}

impl<'a> Iterator for TcpOptionIter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let data = self.data;
        let (&kind, rest) = data.split_first()?;
        match kind {
            kind::END => {
                self.data = &[];
                return Some(Ok(TcpOption::EndOfList));
            }
            kind::NOP => {
                self.data = rest;
                return Some(Ok(TcpOption::NoOp));
            }
            _ => {}
        }
        let Some(&len) = rest.first() else {
            return self.fail();
        };
        // The length counts kind and length bytes: below 2 or past the area is malformed.
        let Some((option, after)) = data.split_at_checked(usize::from(len)) else {
            return self.fail();
        };
        let Some((_, body)) = option.split_first_chunk::<2>() else {
            return self.fail();
        };
        self.data = after;
        let option = match (kind, body) {
            (kind::MSS, &[hi, lo]) => TcpOption::MaxSegmentSize(u16::from_be_bytes([hi, lo])),
            (kind::WS, &[shift]) => TcpOption::WindowScale(shift),
            (kind::SACK_PERMITTED, []) => TcpOption::SackPermitted,
            (kind::SACK, _) if !body.is_empty() && body.len().is_multiple_of(8) => {
                TcpOption::SackRange(body)
            }
            (kind::TIMESTAMP, &[a, b, c, d, e, f, g, h]) => TcpOption::Timestamp {
                tsval: u32::from_be_bytes([a, b, c, d]),
                tsecr: u32::from_be_bytes([e, f, g, h]),
            },
            (kind::MSS | kind::WS | kind::SACK_PERMITTED | kind::SACK | kind::TIMESTAMP, _) => {
                return self.fail();
            }
            (kind, data) => TcpOption::Unknown { kind, data },
        };
        Some(Ok(option))
    }
}

impl FusedIterator for TcpOptionIter<'_> {}

/// A view of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 20 bytes check_len verifies; options, payload clamped"
)]
impl<T: AsRef<[u8]>> TcpPacket<T> {
    view_constructors!();

    /// Checks the header length: [`Error::Truncated`] below 20 bytes, [`Error::Malformed`] if
    /// the data offset is below 5, [`Error::Truncated`] if the buffer is shorter than the
    /// header length.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(Error::Truncated)
        } else if self.header_len() < HEADER_LEN {
            Err(Error::Malformed)
        } else if len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number (meaningful when ACK is set).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset times 4, options included).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFF_FLAGS] >> 4) * 4
    }

    /// Control bits (the 3 reserved bits are dropped).
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(crate::bytes::get_u16(self.buffer.as_ref(), field::OFF_FLAGS) & TcpFlags::ALL.0)
    }

    /// Receive window (unscaled).
    #[inline]
    pub fn window(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer (meaningful when URG is set).
    #[inline]
    pub fn urgent_pointer(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// The raw options area: bytes 20 to `header_len()`.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let end = self.header_end();
        &self.buffer.as_ref()[HEADER_LEN.min(end)..end]
    }

    /// Iterates over the parsed options.
    #[inline]
    pub fn options_iter(&self) -> TcpOptionIter<'_> {
        TcpOptionIter::new(self.options())
    }

    /// The data: everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_end()..]
    }

    /// Where the header ends in the buffer: `header_len()`, kept between the fixed part
    /// and the buffer's end. Equal to `header_len()` on a checked view; on a view of the
    /// fixed part alone (`new_unchecked`, data offset unchecked) it keeps the accessors
    /// from panicking: they see no options and no payload.
    #[inline]
    fn header_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        self.header_len().max(HEADER_LEN).min(len)
    }

    /// Sum of pseudo-header and segment; `None` if the segment is longer than 65535 bytes.
    #[inline]
    fn full_sum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> Option<u64> {
        let b = self.buffer.as_ref();
        let len = u16::try_from(b.len()).ok()?;
        let acc = checksum::pseudo_header_v4(src, dst, Protocol::TCP.0, len);
        Some(checksum::sum(b, acc))
    }

    /// Whether the checksum verifies over the IPv4 pseudo-header and the whole buffer.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.full_sum(src, dst).is_some_and(checksum::verifies)
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port (the checksum is not updated).
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets the destination port (the checksum is not updated).
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), field::SEQ, v);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), field::ACK, v);
    }

    /// Sets the header length in bytes (stored as `len / 4`; use a multiple of 4 in 20..=60),
    /// keeping the reserved bits and flags. Re-run `check_len` afterwards before relying on the
    /// no-panic guarantee.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::OFF_FLAGS];
        *b = (*b & 0x0f) | (((len / 4) as u8) << 4);
    }

    /// Sets the nine control bits, keeping the data offset and reserved bits.
    #[inline]
    pub fn set_flags(&mut self, flags: TcpFlags) {
        let old = crate::bytes::get_u16(self.buffer.as_ref(), field::OFF_FLAGS);
        let new = (old & !TcpFlags::ALL.0) | (flags.0 & TcpFlags::ALL.0);
        crate::bytes::put_u16(self.buffer.as_mut(), field::OFF_FLAGS, new);
    }

    /// Sets the receive window.
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::WINDOW, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_pointer(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::URGENT, v);
    }

    /// Computes and stores the checksum over the IPv4 pseudo-header and the whole buffer.
    /// A segment longer than 65535 bytes cannot be checksummed; its checksum is set to 0.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = self.full_sum(src, dst).map_or(0, checksum::finish);
        self.set_checksum(c);
    }

    /// Mutable options area.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_end();
        &mut self.buffer.as_mut()[HEADER_LEN.min(hl)..hl]
    }

    /// Mutable data.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_end();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// The timestamps option (RFC 7323).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpTimestamp {
    /// Timestamp value.
    pub tsval: u32,
    /// Timestamp echo reply.
    pub tsecr: u32,
}

/// The decoded fields of a TCP header, with the common options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number (kept as is, even without ACK).
    pub ack_number: u32,
    /// Control bits (`emit` uses the low 9 bits).
    pub flags: TcpFlags,
    /// Receive window (unscaled).
    pub window: u16,
    /// Urgent pointer (kept as is, even without URG).
    pub urgent_pointer: u16,
    /// Maximum segment size option.
    pub max_seg_size: Option<u16>,
    /// Window scale option (shift count).
    pub window_scale: Option<u8>,
    /// SACK permitted option.
    pub sack_permitted: bool,
    /// Timestamps option.
    pub timestamp: Option<TcpTimestamp>,
}

impl TcpRepr {
    /// Decodes a header: errors from `check_len`, or [`Error::Malformed`] if an option is
    /// malformed (see [`TcpOptionIter`]). SACK blocks and unknown options are skipped; if an
    /// option appears twice the last one wins. The checksum is not verified here (it needs
    /// the IPv4 addresses): call [`TcpPacket::verify_checksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &TcpPacket<&T>) -> Result<Self> {
        packet.check_len()?;
        let mut repr = Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window: packet.window(),
            urgent_pointer: packet.urgent_pointer(),
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            timestamp: None,
        };
        for option in packet.options_iter() {
            match option? {
                TcpOption::MaxSegmentSize(v) => repr.max_seg_size = Some(v),
                TcpOption::WindowScale(v) => repr.window_scale = Some(v),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::Timestamp { tsval, tsecr } => {
                    repr.timestamp = Some(TcpTimestamp { tsval, tsecr });
                }
                TcpOption::EndOfList
                | TcpOption::NoOp
                | TcpOption::SackRange(_)
                | TcpOption::Unknown { .. } => {}
            }
        }
        Ok(repr)
    }

    /// Length of the options before padding.
    #[inline]
    const fn options_len(&self) -> usize {
        (if self.max_seg_size.is_some() { 4 } else { 0 })
            + (if self.window_scale.is_some() { 3 } else { 0 })
            + (if self.sack_permitted { 2 } else { 0 })
            + (if self.timestamp.is_some() { 10 } else { 0 })
    }

    /// Length of the emitted header: 20 plus the options padded to a multiple of 4 (at most 40).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len().next_multiple_of(4)
    }

    /// Length of a segment carrying `payload_len` bytes.
    #[inline]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len
    }

    /// Writes the header and options, then the checksum over the pseudo-header and the
    /// **whole buffer**.
    ///
    /// The buffer must be exactly `buffer_len(payload_len)` bytes with the data already in
    /// place after `header_len()` bytes (or call [`TcpPacket::fill_checksum`] again after
    /// writing it). Options are written in the order MSS, window scale, SACK permitted,
    /// timestamps, then zero padding (end of list). Reserved bits are cleared. Panics if the
    /// buffer is shorter than `header_len()`. Wrap a reused buffer with `new_unchecked`.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the buffer holds header_len(); the options fill it exactly"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut TcpPacket<&mut T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) {
        let header_len = self.header_len();
        {
            let b = packet.buffer.as_mut();
            crate::bytes::put_u16(b, field::SRC_PORT, self.src_port);
            crate::bytes::put_u16(b, field::DST_PORT, self.dst_port);
            crate::bytes::put_u32(b, field::SEQ, self.seq_number);
            crate::bytes::put_u32(b, field::ACK, self.ack_number);
            let off_flags = ((header_len as u16 / 4) << 12) | (self.flags.0 & TcpFlags::ALL.0);
            crate::bytes::put_u16(b, field::OFF_FLAGS, off_flags);
            crate::bytes::put_u16(b, field::WINDOW, self.window);
            crate::bytes::put_u16(b, field::URGENT, self.urgent_pointer);

            let opts = &mut b[HEADER_LEN..header_len];
            let mut i = 0;
            if let Some(mss) = self.max_seg_size {
                let [hi, lo] = mss.to_be_bytes();
                opts[i..i + 4].copy_from_slice(&[kind::MSS, 4, hi, lo]);
                i += 4;
            }
            if let Some(shift) = self.window_scale {
                opts[i..i + 3].copy_from_slice(&[kind::WS, 3, shift]);
                i += 3;
            }
            if self.sack_permitted {
                opts[i..i + 2].copy_from_slice(&[kind::SACK_PERMITTED, 2]);
                i += 2;
            }
            if let Some(ts) = self.timestamp {
                opts[i..i + 2].copy_from_slice(&[kind::TIMESTAMP, 10]);
                crate::bytes::put_u32(opts, i + 2, ts.tsval);
                crate::bytes::put_u32(opts, i + 6, ts.tsecr);
                i += 10;
            }
            opts[i..].fill(kind::END);
        }
        packet.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    /// A Linux-style SYN from A:50000 to B:443 (checksum computed offline).
    const SYN: [u8; 40] = [
        0xc3, 0x50, 0x01, 0xbb, // ports
        0x01, 0x02, 0x03, 0x04, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, // data offset 10, SYN
        0xfa, 0xf0, // window 64240
        0x5d, 0xc7, // checksum
        0x00, 0x00, // urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, // timestamps
        0x01, // NOP
        0x03, 0x03, 0x07, // window scale 7
    ];

    /// The same SYN in our emit layout.
    const SYN_EMITTED: [u8; 40] = [
        0xc3, 0x50, 0x01, 0xbb, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x35, 0xf0, 0x00, 0x00, // header
        0x02, 0x04, 0x05, 0xb4, // MSS
        0x03, 0x03, 0x07, // window scale
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, // timestamps
        0x00, // end of list
    ];

    /// B:443 -> A:50000, ACK|PSH with the 2 data bytes "hi".
    const DATA: [u8; 22] = [
        0x01, 0xbb, 0xc3, 0x50, 0x00, 0x00, 0x00, 0x64, 0x01, 0x02, 0x03, 0x05, 0x50, 0x18, 0x01,
        0xf5, 0x67, 0xf3, 0x00, 0x00, b'h', b'i',
    ];

    fn syn_repr() -> TcpRepr {
        TcpRepr {
            src_port: 50000,
            dst_port: 443,
            seq_number: 0x0102_0304,
            ack_number: 0,
            flags: TcpFlags::SYN,
            window: 64240,
            urgent_pointer: 0,
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamp: Some(TcpTimestamp {
                tsval: 0x1234,
                tsecr: 0,
            }),
        }
    }

    #[test]
    fn deconstruct_syn() {
        let p = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (50000, 443));
        assert_eq!(p.seq_number(), 0x0102_0304);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.flags(), TcpFlags::SYN);
        assert_eq!(p.window(), 64240);
        assert_eq!(p.checksum(), 0x5dc7);
        assert_eq!(p.urgent_pointer(), 0);
        assert_eq!(p.options(), &SYN[20..]);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum(A, B));
        // (Swapping the addresses would not change the sum.)
        assert!(!p.verify_checksum(A, Ipv4Addr::new(10, 0, 0, 3)));
        let opts: Vec<_> = p.options_iter().collect();
        assert_eq!(
            opts,
            [
                Ok(TcpOption::MaxSegmentSize(1460)),
                Ok(TcpOption::SackPermitted),
                Ok(TcpOption::Timestamp {
                    tsval: 0x1234,
                    tsecr: 0
                }),
                Ok(TcpOption::NoOp),
                Ok(TcpOption::WindowScale(7)),
            ]
        );
        assert_eq!(TcpRepr::parse(&p), Ok(syn_repr()));
    }

    #[test]
    fn deconstruct_data() {
        let p = TcpPacket::new_checked(&DATA[..]).unwrap();
        assert_eq!(p.seq_number(), 100);
        assert_eq!(p.ack_number(), 0x0102_0305);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.flags(), TcpFlags::ACK | TcpFlags::PSH);
        assert!(p.flags().contains(TcpFlags::ACK));
        assert!(!p.flags().intersects(TcpFlags::SYN | TcpFlags::FIN));
        assert_eq!(p.window(), 501);
        assert!(p.options().is_empty());
        assert_eq!(p.options_iter().next(), None);
        assert_eq!(p.payload(), b"hi");
        assert!(p.verify_checksum(B, A));
    }

    #[test]
    fn construct() {
        let repr = syn_repr();
        assert_eq!(repr.header_len(), 40);
        let mut buf = [0x77u8; 40];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), A, B);
        assert_eq!(buf, SYN_EMITTED);

        let repr = TcpRepr {
            src_port: 443,
            dst_port: 50000,
            seq_number: 100,
            ack_number: 0x0102_0305,
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 501,
            urgent_pointer: 0,
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            timestamp: None,
        };
        let mut buf = [0u8; 22];
        buf[20..].copy_from_slice(b"hi");
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), B, A);
        assert_eq!(buf, DATA);
    }

    #[test]
    fn check_len_errors() {
        for len in 0..20 {
            assert_eq!(
                TcpPacket::new_checked(&DATA[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        for off in 0..5u8 {
            let mut buf = DATA;
            buf[12] = off << 4;
            assert_eq!(
                TcpPacket::new_checked(&buf[..]).unwrap_err(),
                Error::Malformed
            );
        }
        // Data offset 15 on 20 bytes.
        let mut buf = DATA;
        buf[12] = 0xf0;
        assert_eq!(
            TcpPacket::new_checked(&buf[..20]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            TcpPacket::new_checked(&SYN[..39]).unwrap_err(),
            Error::Truncated
        );
    }

    fn options_of(opts: &[u8]) -> Vec<Result<TcpOption<'_>>> {
        TcpOptionIter::new(opts).collect()
    }

    #[test]
    fn option_parsing() {
        assert_eq!(
            options_of(&[1, 0, 2, 4, 5, 0xb4]),
            [Ok(TcpOption::NoOp), Ok(TcpOption::EndOfList)]
        );
        let sack = [5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4];
        assert_eq!(options_of(&sack), [Ok(TcpOption::SackRange(&sack[2..]))]);
        assert_eq!(
            options_of(&[30, 4, 0xaa, 0xbb, 31, 2]),
            [
                Ok(TcpOption::Unknown {
                    kind: 30,
                    data: &[0xaa, 0xbb]
                }),
                Ok(TcpOption::Unknown {
                    kind: 31,
                    data: &[]
                }),
            ]
        );
        let bad: [&[u8]; 10] = [
            &[2],                // no length byte
            &[2, 1, 0, 0],       // length 1
            &[30, 0],            // length 0
            &[2, 4, 5],          // runs past the end
            &[2, 3, 5],          // MSS with length 3
            &[3, 4, 7, 0],       // window scale with length 4
            &[4, 3, 0],          // SACK permitted with length 3
            &[5, 2],             // SACK with no block
            &[5, 6, 0, 0, 0, 0], // SACK with a partial block
            &[8, 8, 0, 0, 0, 0, 0, 0],
        ];
        for opts in bad {
            assert_eq!(options_of(opts), [Err(Error::Malformed)], "{opts:?}");
        }
        // The iterator stops after an error.
        assert_eq!(
            options_of(&[1, 2, 1, 1, 1]),
            [Ok(TcpOption::NoOp), Err(Error::Malformed)]
        );
        // A malformed option makes the repr parse fail.
        let mut buf = SYN;
        buf[21] = 3;
        let p = TcpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(TcpRepr::parse(&p), Err(Error::Malformed));
    }

    #[test]
    fn setters() {
        let mut buf = SYN;
        buf[12] |= 0x0e; // reserved bits set: they must survive set_flags
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_seq_number(3);
        p.set_ack_number(4);
        p.set_flags(TcpFlags::ALL);
        assert_eq!(p.flags(), TcpFlags::ALL);
        p.set_flags(TcpFlags::FIN | TcpFlags::ACK | TcpFlags::AE);
        p.set_window(5);
        p.set_urgent_pointer(6);
        p.set_header_len(24);
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.payload_mut()[0] = 0xee;
        p.fill_checksum(A, B);
        assert_eq!((p.src_port(), p.dst_port()), (1, 2));
        assert_eq!((p.seq_number(), p.ack_number()), (3, 4));
        assert_eq!(p.flags(), TcpFlags::FIN | TcpFlags::ACK | TcpFlags::NS);
        assert_eq!((p.window(), p.urgent_pointer()), (5, 6));
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload().len(), 16);
        assert!(p.verify_checksum(A, B));
        assert_eq!(p.into_inner()[12] & 0x0e, 0x0e);
        let mut f = TcpFlags::empty();
        f.insert(TcpFlags::SYN | TcpFlags::ACK);
        f.remove(TcpFlags::SYN);
        assert_eq!(f, TcpFlags::ACK);
        f |= TcpFlags::CWR;
        assert_eq!((f & TcpFlags::CWR).bits(), 0x80);
    }

    #[test]
    fn port_rewrite_with_incremental_update() {
        let mut buf = DATA;
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        let hc = checksum::update16(p.checksum(), p.dst_port(), 61000);
        p.set_dst_port(61000);
        p.set_checksum(hc);
        assert!(p.verify_checksum(B, A));
    }

    fn arb_repr() -> impl Strategy<Value = TcpRepr> {
        (
            (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()),
            (0u16..0x200, any::<u16>(), any::<u16>()),
            (
                proptest::option::of(any::<u16>()),
                proptest::option::of(any::<u8>()),
                any::<bool>(),
                proptest::option::of((any::<u32>(), any::<u32>())),
            ),
        )
            .prop_map(
                |((sp, dp, seq, ack), (flags, win, urg), (mss, ws, sack, ts))| TcpRepr {
                    src_port: sp,
                    dst_port: dp,
                    seq_number: seq,
                    ack_number: ack,
                    flags: TcpFlags(flags),
                    window: win,
                    urgent_pointer: urg,
                    max_seg_size: mss,
                    window_scale: ws,
                    sack_permitted: sack,
                    timestamp: ts.map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
                },
            )
    }

    fn etherparse_flags(h: &etherparse::TcpHeader) -> TcpFlags {
        let mut f = TcpFlags::empty();
        for (set, flag) in [
            (h.fin, TcpFlags::FIN),
            (h.syn, TcpFlags::SYN),
            (h.rst, TcpFlags::RST),
            (h.psh, TcpFlags::PSH),
            (h.ack, TcpFlags::ACK),
            (h.urg, TcpFlags::URG),
            (h.ece, TcpFlags::ECE),
            (h.cwr, TcpFlags::CWR),
            (h.ns, TcpFlags::AE),
        ] {
            if set {
                f.insert(flag);
            }
        }
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            repr in arb_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            src in any::<u32>(), dst in any::<u32>(),
        ) {
            let (src, dst) = (Ipv4Addr::from_bits(src), Ipv4Addr::from_bits(dst));
            let mut buf = vec![0x99u8; repr.buffer_len(payload.len())];
            buf[repr.header_len()..].copy_from_slice(&payload);
            repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), src, dst);
            let p = TcpPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(TcpRepr::parse(&p), Ok(repr));
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert!(p.verify_checksum(src, dst));
        }

        #[test]
        fn getters_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..80),
            off in any::<u8>(),
        ) {
            if bytes.len() > 12 {
                bytes[12] = off;
            }
            if let Ok(p) = TcpPacket::new_checked(&bytes[..]) {
                let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
                let _ = (p.header_len(), p.flags(), p.window(), p.checksum(), p.urgent_pointer());
                let _ = (p.options(), p.payload(), p.verify_checksum(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST));
                for o in p.options_iter() {
                    let _ = o;
                }
                let _ = TcpRepr::parse(&p);
                let mut copy = bytes.clone();
                let mut m = TcpPacket::new_unchecked(&mut copy[..]);
                let _ = (m.options_mut().len(), m.payload_mut().len());
                m.fill_checksum(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
            }
        }

        /// A view of the fixed header alone (20 bytes, data offset unchecked) panics on
        /// no accessor: the options and payload it cannot hold are empty.
        #[test]
        fn a_fixed_part_view_never_panics(h in any::<[u8; 20]>()) {
            let p = TcpPacket::new_unchecked(&h);
            prop_assert!(p.options().is_empty() && p.payload().is_empty());
            prop_assert_eq!(p.options_iter().count(), 0);
            let mut copy = h;
            let mut m = TcpPacket::new_unchecked(&mut copy);
            prop_assert!(m.options_mut().is_empty() && m.payload_mut().is_empty());
        }

        #[test]
        fn option_iter_never_panics(opts in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut n = 0;
            for o in TcpOptionIter::new(&opts) {
                n += 1;
                if o.is_err() { break; }
            }
            prop_assert!(n <= opts.len());
        }

        /// Segments built by etherparse read the same, options included, and verify.
        #[test]
        fn agrees_with_etherparse_parse(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), win in any::<u16>(),
            ack in proptest::option::of(any::<u32>()), flag_bits in any::<[bool; 7]>(),
            urg in proptest::option::of(any::<u16>()),
            mss in any::<u16>(), ws in any::<u8>(), ts in any::<(u32, u32)>(),
            use_opts in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            use etherparse::TcpOptionElement as E;
            let mut b = etherparse::PacketBuilder::ipv4(src, dst, 64).tcp(sp, dp, seq, win);
            if let Some(a) = ack { b = b.ack(a); }
            if let Some(u) = urg { b = b.urg(u); }
            if flag_bits[0] { b = b.fin(); }
            if flag_bits[1] { b = b.syn(); }
            if flag_bits[2] { b = b.rst(); }
            if flag_bits[3] { b = b.psh(); }
            if flag_bits[4] { b = b.ece(); }
            if flag_bits[5] { b = b.cwr(); }
            if flag_bits[6] { b = b.ns(); }
            if use_opts {
                b = b.options(&[
                    E::MaximumSegmentSize(mss),
                    E::SelectiveAcknowledgementPermitted,
                    E::Timestamp(ts.0, ts.1),
                    E::Noop,
                    E::WindowScale(ws),
                ]).unwrap();
            }
            let mut pkt = Vec::new();
            b.write(&mut pkt, &payload).unwrap();

            let ip = crate::ipv4::Ipv4Packet::new_checked(&pkt[..]).unwrap();
            prop_assert_eq!(ip.protocol(), Protocol::TCP);
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            let theirs = etherparse::TcpHeaderSlice::from_slice(ip.payload()).unwrap();
            let h = theirs.to_header();
            prop_assert_eq!(tcp.src_port(), sp);
            prop_assert_eq!(tcp.dst_port(), dp);
            prop_assert_eq!(tcp.seq_number(), seq);
            prop_assert_eq!(tcp.ack_number(), h.acknowledgment_number);
            prop_assert_eq!(tcp.header_len(), h.header_len());
            prop_assert_eq!(tcp.flags(), etherparse_flags(&h));
            prop_assert_eq!(tcp.window(), win);
            prop_assert_eq!(tcp.urgent_pointer(), h.urgent_pointer);
            prop_assert_eq!(tcp.checksum(), h.checksum);
            prop_assert_eq!(tcp.options(), h.options.as_slice());
            prop_assert_eq!(tcp.payload(), &payload[..]);
            prop_assert!(tcp.verify_checksum(ip.src(), ip.dst()));
            let repr = TcpRepr::parse(&tcp).unwrap();
            if use_opts {
                prop_assert_eq!(repr.max_seg_size, Some(mss));
                prop_assert_eq!(repr.window_scale, Some(ws));
                prop_assert!(repr.sack_permitted);
                prop_assert_eq!(repr.timestamp, Some(TcpTimestamp { tsval: ts.0, tsecr: ts.1 }));
            } else {
                prop_assert_eq!(repr.header_len(), 20);
            }
            // Recomputing gives etherparse's value.
            let mut copy = ip.payload().to_vec();
            let mut ours = TcpPacket::new_unchecked(&mut copy[..]);
            ours.fill_checksum(ip.src(), ip.dst());
            prop_assert_eq!(ours.checksum(), h.checksum);
        }

        /// Segments we emit parse in etherparse with the same fields, options and checksum.
        #[test]
        fn agrees_with_etherparse_emit(
            repr in arb_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        ) {
            use etherparse::TcpOptionElement as E;
            let mut buf = vec![0u8; repr.buffer_len(payload.len())];
            buf[repr.header_len()..].copy_from_slice(&payload);
            repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), src.into(), dst.into());
            let s = etherparse::TcpHeaderSlice::from_slice(&buf).unwrap();
            let h = s.to_header();
            prop_assert_eq!(h.source_port, repr.src_port);
            prop_assert_eq!(h.destination_port, repr.dst_port);
            prop_assert_eq!(h.sequence_number, repr.seq_number);
            prop_assert_eq!(h.acknowledgment_number, repr.ack_number);
            prop_assert_eq!(etherparse_flags(&h), repr.flags);
            prop_assert_eq!(h.window_size, repr.window);
            prop_assert_eq!(h.urgent_pointer, repr.urgent_pointer);
            prop_assert_eq!(h.header_len(), repr.header_len());
            let mut expected = Vec::new();
            if let Some(m) = repr.max_seg_size { expected.push(E::MaximumSegmentSize(m)); }
            if let Some(w) = repr.window_scale { expected.push(E::WindowScale(w)); }
            if repr.sack_permitted { expected.push(E::SelectiveAcknowledgementPermitted); }
            if let Some(t) = repr.timestamp { expected.push(E::Timestamp(t.tsval, t.tsecr)); }
            let got: Vec<E> = s.options_iterator().map(|o| o.unwrap()).collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(h.calc_checksum_ipv4_raw(src, dst, &payload).unwrap(), h.checksum);
        }
    }
}
