//! ICMP for IPv4 (RFC 792, RFC 1122 §3.2.2, RFC 1191).
//!
//! Every message starts with type, code, checksum and four type-specific bytes ("rest of
//! header"): identifier and sequence number for echo, unused (zero) or the next-hop MTU for
//! errors. The data follows: the echo payload, or for errors the quoted IPv4 header plus at
//! least 8 bytes of the offending datagram.
//!
//! The checksum covers the whole message, so the view's buffer must span exactly the message
//! (as the IPv4 payload does).

use crate::checksum;
use crate::{Error, Result};

/// An ICMPv4 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Icmpv4Type(pub u8);

impl Icmpv4Type {
    /// Echo reply.
    pub const ECHO_REPLY: Self = Self(0);
    /// Destination unreachable (codes in [`dest_unreachable`]).
    pub const DEST_UNREACHABLE: Self = Self(3);
    /// Source quench (deprecated by RFC 6633, still an error message).
    pub const SOURCE_QUENCH: Self = Self(4);
    /// Redirect.
    pub const REDIRECT: Self = Self(5);
    /// Echo request.
    pub const ECHO_REQUEST: Self = Self(8);
    /// Time exceeded (codes in [`time_exceeded`]).
    pub const TIME_EXCEEDED: Self = Self(11);
    /// Parameter problem.
    pub const PARAM_PROBLEM: Self = Self(12);

    /// Whether this is an error message (types 3, 4, 5, 11, 12) rather than a query, per the
    /// split of RFC 1122 §3.2.2. No ICMP error may be sent about an ICMP error.
    #[inline]
    pub const fn is_error(self) -> bool {
        matches!(self.0, 3 | 4 | 5 | 11 | 12)
    }
}

impl From<u8> for Icmpv4Type {
    #[inline]
    fn from(v: u8) -> Self {
        Self(v)
    }
}

impl From<Icmpv4Type> for u8 {
    #[inline]
    fn from(v: Icmpv4Type) -> Self {
        v.0
    }
}

/// Codes of [`Icmpv4Type::DEST_UNREACHABLE`].
pub mod dest_unreachable {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU (RFC 1191).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication with the destination network administratively prohibited.
    pub const NET_PROHIBITED: u8 = 9;
    /// Communication with the destination host administratively prohibited.
    pub const HOST_PROHIBITED: u8 = 10;
    /// Communication administratively prohibited (RFC 1812).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Codes of [`Icmpv4Type::TIME_EXCEEDED`].
pub mod time_exceeded {
    /// Time to live exceeded in transit.
    pub const TTL: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

mod field {
    pub(crate) const TYPE: usize = 0;
    pub(crate) const CODE: usize = 1;
    pub(crate) const CHECKSUM: usize = 2;
    pub(crate) const REST: usize = 4;
    pub(crate) const IDENT: usize = 4;
    pub(crate) const SEQ_NO: usize = 6;
    pub(crate) const MTU: usize = 6;
    pub(crate) const DATA: usize = 8;
}

/// Length of the ICMP header (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = field::DATA;

/// A view of an ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 8 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    view_constructors!();

    /// Checks that the buffer holds the 8-byte header ([`Error::Truncated`] otherwise).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Length of the header (8).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Type {
        Icmpv4Type(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the message type is an error (see [`Icmpv4Type::is_error`]).
    #[inline]
    pub fn is_error(&self) -> bool {
        self.msg_type().is_error()
    }

    /// The four type-specific header bytes as one number (the "unused" field of most errors).
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::REST)
    }

    /// Echo identifier (bytes 4-5).
    #[inline]
    pub fn ident(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Echo sequence number (bytes 6-7).
    #[inline]
    pub fn seq_no(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::SEQ_NO)
    }

    /// Next-hop MTU of a "fragmentation needed" message (bytes 6-7, RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::MTU)
    }

    /// Everything after the header: echo data, or the quoted datagram of an error.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }

    /// Whether the checksum over the whole buffer verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::sum(self.buffer.as_ref(), 0))
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, v: Icmpv4Type) {
        self.buffer.as_mut()[field::TYPE] = v.0;
    }

    /// Sets the message code.
    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the four type-specific header bytes.
    #[inline]
    pub fn set_rest_of_header(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), field::REST, v);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_seq_no(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::SEQ_NO, v);
    }

    /// Sets the next-hop MTU.
    #[inline]
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::MTU, v);
    }

    /// Mutable data after the header.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }

    /// Computes and stores the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// A decoded ICMPv4 message; data is borrowed from the packet buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Echo request (type 8, code 0).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Echo reply (type 0, code 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Destination unreachable (type 3). Header bytes 4-5 are emitted as zero and ignored by
    /// `parse`.
    DestUnreachable {
        /// Code (see [`dest_unreachable`]).
        code: u8,
        /// Next-hop MTU for [`dest_unreachable::FRAG_NEEDED`], else 0.
        next_hop_mtu: u16,
        /// Quoted IPv4 header and leading bytes of the offending datagram.
        data: &'a [u8],
    },
    /// Time exceeded (type 11). The unused header bytes are emitted as zero and ignored by
    /// `parse`.
    TimeExceeded {
        /// Code (see [`time_exceeded`]).
        code: u8,
        /// Quoted IPv4 header and leading bytes of the offending datagram.
        data: &'a [u8],
    },
    /// Any other message, including echo with a non-zero code; kept raw.
    Other {
        /// Message type.
        msg_type: Icmpv4Type,
        /// Message code.
        code: u8,
        /// The four type-specific header bytes.
        rest_of_header: u32,
        /// Data after the header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Decodes a message: [`Error::Truncated`] below 8 bytes, [`Error::Checksum`] if the
    /// checksum over the whole buffer does not verify. Never returns [`Icmpv4Repr::Other`] for a
    /// message that fits another variant.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv4Packet<&'a T>) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        // Borrow the data for the buffer's lifetime `'a`, not the view's.
        let buffer: &'a [u8] = <T as AsRef<[u8]>>::as_ref(packet.buffer);
        let data = buffer.get(field::DATA..).ok_or(Error::Truncated)?;
        let repr = match (packet.msg_type(), packet.code()) {
            (Icmpv4Type::ECHO_REQUEST, 0) => Self::EchoRequest {
                ident: packet.ident(),
                seq_no: packet.seq_no(),
                data,
            },
            (Icmpv4Type::ECHO_REPLY, 0) => Self::EchoReply {
                ident: packet.ident(),
                seq_no: packet.seq_no(),
                data,
            },
            (Icmpv4Type::DEST_UNREACHABLE, code) => Self::DestUnreachable {
                code,
                next_hop_mtu: packet.next_hop_mtu(),
                data,
            },
            (Icmpv4Type::TIME_EXCEEDED, code) => Self::TimeExceeded { code, data },
            (msg_type, code) => Self::Other {
                msg_type,
                code,
                rest_of_header: packet.rest_of_header(),
                data,
            },
        };
        Ok(repr)
    }

    /// The data carried after the header.
    #[inline]
    pub const fn data(&self) -> &'a [u8] {
        match *self {
            Self::EchoRequest { data, .. }
            | Self::EchoReply { data, .. }
            | Self::DestUnreachable { data, .. }
            | Self::TimeExceeded { data, .. }
            | Self::Other { data, .. } => data,
        }
    }

    /// Length of the header (8).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the whole message: header plus data.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes header and data, and the checksum over the first `buffer_len()` bytes (the
    /// buffer should be exactly that long, so that `verify_checksum` on the view agrees).
    /// Panics if the buffer is shorter than `buffer_len()`. Wrap a reused buffer with
    /// `new_unchecked`.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the caller sized the buffer to buffer_len(); short panics"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Icmpv4Packet<&mut T>) {
        let (msg_type, code, rest) = match *self {
            Self::EchoRequest { ident, seq_no, .. } => (
                Icmpv4Type::ECHO_REQUEST,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
            ),
            Self::EchoReply { ident, seq_no, .. } => (
                Icmpv4Type::ECHO_REPLY,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
            ),
            Self::DestUnreachable {
                code, next_hop_mtu, ..
            } => (Icmpv4Type::DEST_UNREACHABLE, code, u32::from(next_hop_mtu)),
            Self::TimeExceeded { code, .. } => (Icmpv4Type::TIME_EXCEEDED, code, 0),
            Self::Other {
                msg_type,
                code,
                rest_of_header,
                ..
            } => (msg_type, code, rest_of_header),
        };
        let data = self.data();
        let len = self.buffer_len();
        packet.set_msg_type(msg_type);
        packet.set_code(code);
        packet.set_checksum(0);
        packet.set_rest_of_header(rest);
        packet.data_mut()[..data.len()].copy_from_slice(data);
        let c = checksum::checksum(&packet.buffer.as_ref()[..len]);
        packet.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// Echo request, ident 0x1234, seq 1, data "abcd".
    const ECHO: [u8; 12] = [
        0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
    ];

    /// The example IPv4/UDP header quoted in errors below.
    const QUOTED: [u8; 28] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0x9c, 0x40, 0x00, 0x35, 0x00, 0x5f, 0x00, 0x00,
    ];

    fn frag_needed() -> Vec<u8> {
        let mut v = vec![0x03, 0x04, 0x5a, 0x4b, 0x00, 0x00, 0x05, 0xdc];
        v.extend_from_slice(&QUOTED);
        v
    }

    fn ttl_exceeded() -> Vec<u8> {
        let mut v = vec![0x0b, 0x00, 0x58, 0x2b, 0x00, 0x00, 0x00, 0x00];
        v.extend_from_slice(&QUOTED);
        v
    }

    #[test]
    fn deconstruct_echo() {
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Type::ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0x2104);
        assert_eq!(p.ident(), 0x1234);
        assert_eq!(p.seq_no(), 1);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.data(), b"abcd");
        assert!(!p.is_error());
        assert!(p.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcd"
            })
        );
    }

    #[test]
    fn deconstruct_errors() {
        let buf = frag_needed();
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Type::DEST_UNREACHABLE);
        assert_eq!(p.code(), dest_unreachable::FRAG_NEEDED);
        assert_eq!(p.next_hop_mtu(), 1500);
        assert!(p.is_error());
        assert_eq!(p.data(), &QUOTED);
        assert_eq!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr::DestUnreachable {
                code: 4,
                next_hop_mtu: 1500,
                data: &QUOTED
            })
        );
        let buf = ttl_exceeded();
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.code(), time_exceeded::TTL);
        assert!(p.is_error());
        assert_eq!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr::TimeExceeded {
                code: 0,
                data: &QUOTED
            })
        );
        // The quoted header is a valid IPv4 header view.
        let quoted = crate::ipv4::Ipv4Packet::new_checked(p.data()).unwrap();
        assert!(quoted.verify_checksum());
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 12];
        let repr = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 1,
            data: b"abcd",
        };
        assert_eq!(repr.buffer_len(), 12);
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ECHO);

        let mut buf = vec![0xffu8; 36];
        Icmpv4Repr::DestUnreachable {
            code: dest_unreachable::FRAG_NEEDED,
            next_hop_mtu: 1500,
            data: &QUOTED,
        }
        .emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, frag_needed());

        let mut buf = vec![0xffu8; 36];
        Icmpv4Repr::TimeExceeded {
            code: time_exceeded::TTL,
            data: &QUOTED,
        }
        .emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ttl_exceeded());
    }

    #[test]
    fn echo_reply_from_request_in_place() {
        let mut buf = ECHO;
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        let hc = checksum::update16(p.checksum(), 0x0800, 0x0000);
        p.set_msg_type(Icmpv4Type::ECHO_REPLY);
        p.set_checksum(hc);
        assert!(p.verify_checksum());
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert!(matches!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr::EchoReply { ident: 0x1234, .. })
        ));
    }

    #[test]
    fn errors() {
        for len in 0..8 {
            assert_eq!(
                Icmpv4Packet::new_checked(&ECHO[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut buf = ECHO;
        buf[11] ^= 1;
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error::Checksum));
    }

    #[test]
    fn classification() {
        for t in [3, 4, 5, 11, 12] {
            assert!(Icmpv4Type(t).is_error());
        }
        for t in [0, 8, 13, 14, 1, 2, 255] {
            assert!(!Icmpv4Type(t).is_error());
        }
        // Echo with a non-zero code and other types stay raw.
        let mut buf = ECHO;
        buf[1] = 1;
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum();
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr::Other {
                msg_type: Icmpv4Type::ECHO_REQUEST,
                code: 1,
                rest_of_header: 0x1234_0001,
                data: b"abcd"
            })
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            variant in 0u8..5, a in any::<u16>(), b in any::<u16>(), code in any::<u8>(),
            t in any::<u8>(), rest in any::<u32>(),
            data in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let data = &data[..];
            let repr = match variant {
                0 => Icmpv4Repr::EchoRequest { ident: a, seq_no: b, data },
                1 => Icmpv4Repr::EchoReply { ident: a, seq_no: b, data },
                2 => Icmpv4Repr::DestUnreachable { code, next_hop_mtu: a, data },
                3 => Icmpv4Repr::TimeExceeded { code, data },
                _ => {
                    // Messages that fit a specific variant never parse as `Other`.
                    prop_assume!(!(matches!(t, 3 | 11) || (matches!(t, 0 | 8) && code == 0)));
                    Icmpv4Repr::Other { msg_type: Icmpv4Type(t), code, rest_of_header: rest, data }
                }
            };
            let mut buf = vec![0x3cu8; repr.buffer_len()];
            repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
            let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Icmpv4Repr::parse(&p), Ok(repr));
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Icmpv4Packet::new_checked(&bytes[..]) {
                let _ = (p.msg_type(), p.code(), p.checksum(), p.is_error(), p.rest_of_header());
                let _ = (p.ident(), p.seq_no(), p.next_hop_mtu(), p.data(), p.verify_checksum());
                let _ = (p.header_len(), Icmpv4Repr::parse(&p));
                let mut copy = bytes.clone();
                let mut m = Icmpv4Packet::new_unchecked(&mut copy[..]);
                let _ = m.data_mut().len();
                m.fill_checksum();
            }
        }

        /// Echo messages built by etherparse read the same and verify; ours match theirs.
        #[test]
        fn agrees_with_etherparse(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            ident in any::<u16>(), seq in any::<u16>(), reply in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let b = etherparse::PacketBuilder::ipv4(src, dst, 64);
            let b = if reply { b.icmpv4_echo_reply(ident, seq) } else { b.icmpv4_echo_request(ident, seq) };
            let mut pkt = Vec::new();
            b.write(&mut pkt, &payload).unwrap();
            let ip = crate::ipv4::Ipv4Packet::new_checked(&pkt[..]).unwrap();
            prop_assert_eq!(ip.protocol(), crate::ipv4::Protocol::ICMP);
            let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
            let theirs = etherparse::Icmpv4Slice::from_slice(ip.payload()).unwrap();
            prop_assert_eq!(icmp.msg_type().0, theirs.type_u8());
            prop_assert_eq!(icmp.code(), theirs.code_u8());
            prop_assert_eq!(icmp.checksum(), theirs.checksum());
            prop_assert_eq!(icmp.rest_of_header().to_be_bytes(), theirs.bytes5to8());
            prop_assert_eq!(icmp.data(), &payload[..]);
            prop_assert!(icmp.verify_checksum());
            let repr = Icmpv4Repr::parse(&icmp).unwrap();
            let expected = if reply {
                Icmpv4Repr::EchoReply { ident, seq_no: seq, data: &payload }
            } else {
                Icmpv4Repr::EchoRequest { ident, seq_no: seq, data: &payload }
            };
            prop_assert_eq!(repr, expected);
            // Our emit produces exactly etherparse's bytes.
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
            prop_assert_eq!(&buf[..], ip.payload());
        }

        /// Error messages we emit carry etherparse's checksum.
        #[test]
        fn errors_agree_with_etherparse(
            code in 0u8..16, mtu in any::<u16>(),
            quoted in proptest::collection::vec(any::<u8>(), 28..100),
        ) {
            // etherparse treats bytes 4-7 as unused except for "fragmentation needed".
            let next_hop_mtu = if code == dest_unreachable::FRAG_NEEDED { mtu } else { 0 };
            let repr = Icmpv4Repr::DestUnreachable { code, next_hop_mtu, data: &quoted };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
            let theirs = etherparse::Icmpv4Slice::from_slice(&buf).unwrap();
            let recomputed = etherparse::Icmpv4Header::with_checksum(theirs.icmp_type(), theirs.payload());
            prop_assert_eq!(recomputed.checksum, theirs.checksum());
        }
    }
}
