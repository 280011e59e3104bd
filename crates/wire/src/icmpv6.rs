//! ICMP for IPv6 (RFC 4443), the message layout neighbour discovery ([`crate::ndp`]) shares.
//!
//! Every message starts with type, code and checksum; the message body follows (RFC 4443
//! §2.1). For the messages named here its first four bytes are type-specific (identifier
//! and sequence number of echo, MTU of packet too big, pointer of parameter problem, unused
//! or flags otherwise): [`Icmpv6Packet::check_len`] requires those 8 bytes.
//!
//! The checksum is mandatory and covers the IPv6 pseudo-header (RFC 8200 §8.1, next header
//! 58, the ICMPv6 length) and the whole message, so the view's buffer must span exactly the
//! message: pass the upper-layer part of [`Ipv6Packet::payload`](crate::ipv6::Ipv6Packet::payload).

use core::net::Ipv6Addr;

use crate::checksum;
use crate::ipv4::Protocol;
use crate::{Error, Result};

/// An ICMPv6 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Icmpv6Type(pub u8);

impl Icmpv6Type {
    /// Destination unreachable (codes in [`dest_unreachable`]).
    pub const DEST_UNREACHABLE: Self = Self(1);
    /// Packet too big; carries the next-hop MTU (RFC 4443 §3.2, RFC 8201).
    pub const PACKET_TOO_BIG: Self = Self(2);
    /// Time exceeded (codes in [`time_exceeded`]).
    pub const TIME_EXCEEDED: Self = Self(3);
    /// Parameter problem; carries a pointer (codes in [`param_problem`]).
    pub const PARAM_PROBLEM: Self = Self(4);
    /// Echo request.
    pub const ECHO_REQUEST: Self = Self(128);
    /// Echo reply.
    pub const ECHO_REPLY: Self = Self(129);
    /// Router solicitation (RFC 4861 §4.1).
    pub const ROUTER_SOLICIT: Self = Self(133);
    /// Router advertisement (RFC 4861 §4.2).
    pub const ROUTER_ADVERT: Self = Self(134);
    /// Neighbour solicitation (RFC 4861 §4.3).
    pub const NEIGHBOR_SOLICIT: Self = Self(135);
    /// Neighbour advertisement (RFC 4861 §4.4).
    pub const NEIGHBOR_ADVERT: Self = Self(136);
    /// Redirect (RFC 4861 §4.5).
    pub const REDIRECT: Self = Self(137);

    /// Whether this is an error message: types 0 to 127 (RFC 4443 §2.1). No ICMPv6 error
    /// may be sent about an ICMPv6 error (RFC 4443 §2.4 (e.1)).
    #[inline]
    pub const fn is_error(self) -> bool {
        self.0 < 128
    }
}

impl From<u8> for Icmpv6Type {
    #[inline]
    fn from(v: u8) -> Self {
        Self(v)
    }
}

impl From<Icmpv6Type> for u8 {
    #[inline]
    fn from(v: Icmpv6Type) -> Self {
        v.0
    }
}

/// Codes of [`Icmpv6Type::DEST_UNREACHABLE`] (RFC 4443 §3.1).
pub mod dest_unreachable {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication with destination administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond scope of source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDRESS: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
    /// Source address failed ingress/egress policy.
    pub const SOURCE_POLICY: u8 = 5;
    /// Reject route to destination.
    pub const REJECT_ROUTE: u8 = 6;
}

/// Codes of [`Icmpv6Type::TIME_EXCEEDED`] (RFC 4443 §3.3).
pub mod time_exceeded {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// Codes of [`Icmpv6Type::PARAM_PROBLEM`] (RFC 4443 §3.4, RFC 7112).
pub mod param_problem {
    /// Erroneous header field encountered.
    pub const HEADER_FIELD: u8 = 0;
    /// Unrecognized next header type encountered.
    pub const NEXT_HEADER: u8 = 1;
    /// Unrecognized IPv6 option encountered.
    pub const OPTION: u8 = 2;
    /// IPv6 first fragment has incomplete IPv6 header chain (RFC 7112).
    pub const INCOMPLETE_CHAIN: u8 = 3;
}

mod field {
    pub(crate) const TYPE: usize = 0;
    pub(crate) const CODE: usize = 1;
    pub(crate) const CHECKSUM: usize = 2;
    pub(crate) const BODY: usize = 4;
    pub(crate) const IDENT: usize = 4;
    pub(crate) const SEQ_NO: usize = 6;
    pub(crate) const DATA: usize = 8;
}

/// Length of the header the view requires: type, code, checksum and four type-specific bytes.
pub const HEADER_LEN: usize = field::DATA;

/// Largest ICMPv6 error message: the packet holding it must fit the minimum MTU (RFC 4443
/// §2.4 (c)), 1280 bytes less the 40-byte IPv6 header.
pub const MAX_ERROR_LEN: usize = crate::ipv6::MIN_MTU - crate::ipv6::HEADER_LEN;

/// Starts a checksum with the ICMPv6 pseudo-header for a message of `len` bytes.
#[inline]
fn pseudo_header(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> u64 {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    checksum::pseudo_header_v6(src, dst, Protocol::ICMPV6.0, len)
}

/// A view of an ICMPv6 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 8 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
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
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type(self.buffer.as_ref()[field::TYPE])
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

    /// Whether the message type is an error (see [`Icmpv6Type::is_error`]).
    #[inline]
    pub fn is_error(&self) -> bool {
        self.msg_type().is_error()
    }

    /// The four type-specific bytes after the checksum as one number.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::BODY)
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

    /// MTU of a packet too big message (bytes 4-7, RFC 4443 §3.2).
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Pointer of a parameter problem message (bytes 4-7, RFC 4443 §3.4): the offset in the
    /// invoking packet where the error was detected.
    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// The message body (RFC 4443 §2.1): everything after the checksum.
    #[inline]
    pub fn message_body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY..]
    }

    /// Everything after the 8-byte header: echo data, the invoking packet of an error, or the
    /// target address and options of neighbour discovery messages.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }

    /// Whether the checksum verifies over the pseudo-header for `src` and `dst` and the whole
    /// buffer.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        checksum::verifies(checksum::sum(b, pseudo_header(src, dst, b.len())))
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, v: Icmpv6Type) {
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

    /// Sets the four type-specific bytes (MTU, pointer, flags, or zero).
    #[inline]
    pub fn set_rest_of_header(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), field::BODY, v);
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

    /// Mutable data after the 8-byte header.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }

    /// Computes and stores the checksum over the pseudo-header for `src` and `dst` and the
    /// whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = checksum::finish(checksum::sum(b, pseudo_header(src, dst, b.len())));
        self.set_checksum(c);
    }
}

/// A decoded ICMPv6 message other than neighbour discovery ([`crate::ndp`]); data is
/// borrowed from the packet buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr<'a> {
    /// Echo request (type 128, code 0).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Echo reply (type 129, code 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Destination unreachable (type 1); the unused field is emitted as zero, ignored by
    /// `parse`.
    DestUnreachable {
        /// Code (see [`dest_unreachable`]).
        code: u8,
        /// As much of the invoking packet as fits.
        data: &'a [u8],
    },
    /// Packet too big (type 2, code 0).
    PacketTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// As much of the invoking packet as fits.
        data: &'a [u8],
    },
    /// Time exceeded (type 3); the unused field is emitted as zero, ignored by `parse`.
    TimeExceeded {
        /// Code (see [`time_exceeded`]).
        code: u8,
        /// As much of the invoking packet as fits.
        data: &'a [u8],
    },
    /// Parameter problem (type 4).
    ParamProblem {
        /// Code (see [`param_problem`]).
        code: u8,
        /// Offset of the error in the invoking packet.
        pointer: u32,
        /// As much of the invoking packet as fits.
        data: &'a [u8],
    },
    /// Any other message (echo with a non-zero code, neighbour discovery, ...), kept raw.
    Other {
        /// Message type.
        msg_type: Icmpv6Type,
        /// Message code.
        code: u8,
        /// The four type-specific bytes.
        rest_of_header: u32,
        /// Data after the 8-byte header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv6Repr<'a> {
    /// Decodes a message: [`Error::Truncated`] below 8 bytes, [`Error::Checksum`] if the
    /// checksum does not verify for `src` and `dst` (RFC 4443 §2.3). Never returns
    /// [`Icmpv6Repr::Other`] for a message that fits another variant.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv6Packet<&'a T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        // Borrow the data for the buffer's lifetime `'a`, not the view's.
        let buffer: &'a [u8] = <T as AsRef<[u8]>>::as_ref(packet.buffer);
        let data = buffer.get(field::DATA..).ok_or(Error::Truncated)?;
        let (ident, seq_no) = (packet.ident(), packet.seq_no());
        Ok(match (packet.msg_type(), packet.code()) {
            (Icmpv6Type::ECHO_REQUEST, 0) => Self::EchoRequest {
                ident,
                seq_no,
                data,
            },
            (Icmpv6Type::ECHO_REPLY, 0) => Self::EchoReply {
                ident,
                seq_no,
                data,
            },
            (Icmpv6Type::DEST_UNREACHABLE, code) => Self::DestUnreachable { code, data },
            (Icmpv6Type::PACKET_TOO_BIG, 0) => Self::PacketTooBig {
                mtu: packet.mtu(),
                data,
            },
            (Icmpv6Type::TIME_EXCEEDED, code) => Self::TimeExceeded { code, data },
            (Icmpv6Type::PARAM_PROBLEM, code) => Self::ParamProblem {
                code,
                pointer: packet.pointer(),
                data,
            },
            (msg_type, code) => Self::Other {
                msg_type,
                code,
                rest_of_header: packet.rest_of_header(),
                data,
            },
        })
    }

    /// The data carried after the 8-byte header.
    #[inline]
    pub const fn data(&self) -> &'a [u8] {
        match *self {
            Self::EchoRequest { data, .. }
            | Self::EchoReply { data, .. }
            | Self::DestUnreachable { data, .. }
            | Self::PacketTooBig { data, .. }
            | Self::TimeExceeded { data, .. }
            | Self::ParamProblem { data, .. }
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

    /// Writes header and data, and the checksum over the pseudo-header and the first
    /// `buffer_len()` bytes (the buffer should be exactly that long, so that
    /// `verify_checksum` on the view agrees). Panics if the buffer is shorter than
    /// `buffer_len()`. An error message's data is not trimmed here: quote at most
    /// [`MAX_ERROR_LEN`] `- 8` bytes. Wrap a reused buffer with `new_unchecked`.
    #[expect(
        clippy::indexing_slicing,
        reason = "emit's contract: the caller sized the buffer to buffer_len(); short panics"
    )]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Icmpv6Packet<&mut T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) {
        let echo = |ident: u16, seq_no: u16| (u32::from(ident) << 16) | u32::from(seq_no);
        let (msg_type, code, rest) = match *self {
            Self::EchoRequest { ident, seq_no, .. } => {
                (Icmpv6Type::ECHO_REQUEST, 0, echo(ident, seq_no))
            }
            Self::EchoReply { ident, seq_no, .. } => {
                (Icmpv6Type::ECHO_REPLY, 0, echo(ident, seq_no))
            }
            Self::DestUnreachable { code, .. } => (Icmpv6Type::DEST_UNREACHABLE, code, 0),
            Self::PacketTooBig { mtu, .. } => (Icmpv6Type::PACKET_TOO_BIG, 0, mtu),
            Self::TimeExceeded { code, .. } => (Icmpv6Type::TIME_EXCEEDED, code, 0),
            Self::ParamProblem { code, pointer, .. } => (Icmpv6Type::PARAM_PROBLEM, code, pointer),
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
        packet.set_rest_of_header(rest);
        packet.data_mut()[..data.len()].copy_from_slice(data);
        let mut msg = Icmpv6Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        msg.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::ipv6::{Ipv6Packet, captured};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const A1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const A2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    const PAYLOAD: &[u8; 12] = b"abababababab";

    #[test]
    fn deconstruct_captured_echo() {
        let ip = Ipv6Packet::new_checked(&captured::ECHO_REQUEST[..]).unwrap();
        let p = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((p.msg_type(), p.code()), (Icmpv6Type::ECHO_REQUEST, 0));
        assert_eq!(p.checksum(), 0xc2fe);
        assert_eq!((p.ident(), p.seq_no()), (0x18ee, 1));
        assert_eq!(p.data(), PAYLOAD);
        assert_eq!(p.message_body()[..4], [0x18, 0xee, 0x00, 0x01]);
        assert!(!p.is_error());
        assert!(p.verify_checksum(A1, A2));
        assert!(!p.verify_checksum(A2, A2));
        assert_eq!(
            Icmpv6Repr::parse(&p, A1, A2),
            Ok(Icmpv6Repr::EchoRequest {
                ident: 0x18ee,
                seq_no: 1,
                data: PAYLOAD
            })
        );
        // The pseudo-header sum is symmetric in the addresses; a different one must fail.
        assert_eq!(
            Icmpv6Repr::parse(&p, A1, crate::ipv6::ALL_NODES),
            Err(Error::Checksum)
        );
    }

    /// Our emit of the kernel's echo reply gives the kernel's bytes, checksum included.
    #[test]
    fn echo_reply_matches_linux() {
        let ip = Ipv6Packet::new_checked(&captured::ECHO_REPLY[..]).unwrap();
        let repr = Icmpv6Repr::EchoReply {
            ident: 0x18ee,
            seq_no: 1,
            data: PAYLOAD,
        };
        let mut buf = vec![0xffu8; repr.buffer_len()];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), A2, A1);
        assert_eq!(&buf[..], ip.payload());
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0xc1fe);
        assert_eq!(Icmpv6Repr::parse(&p, A2, A1), Ok(repr));
        // Turning the request into the reply in place, with an incremental update.
        let mut req = Ipv6Packet::new_checked(&captured::ECHO_REQUEST[..])
            .unwrap()
            .payload()
            .to_vec();
        let mut m = Icmpv6Packet::new_unchecked(&mut req[..]);
        let c = checksum::update16(m.checksum(), 0x8000, 0x8100);
        m.set_msg_type(Icmpv6Type::ECHO_REPLY);
        m.set_checksum(c);
        assert!(m.verify_checksum(A2, A1));
    }

    /// RFC 4443 §3.2 and §3.4 layouts written out by hand, checksums filled by the view and
    /// checked by the reference sum over the pseudo-header bytes.
    #[test]
    fn errors_by_hand() {
        let quoted = &captured::UDP[..48];
        let mut too_big = vec![2u8, 0, 0, 0, 0x00, 0x00, 0x05, 0x00];
        too_big.extend_from_slice(quoted);
        let mut m = Icmpv6Packet::new_unchecked(&mut too_big[..]);
        m.fill_checksum(A2, A1);
        let mut oracle = Vec::new();
        oracle.extend_from_slice(&A2.octets());
        oracle.extend_from_slice(&A1.octets());
        oracle.extend_from_slice(&[0, 0, 0, 56, 0, 0, 0, 58]);
        oracle.extend_from_slice(&too_big);
        assert_eq!(checksum::reference::ones_complement_sum(&oracle), 0xffff);
        let p = Icmpv6Packet::new_checked(&too_big[..]).unwrap();
        assert!(p.is_error());
        assert_eq!(p.mtu(), 1280);
        assert_eq!(
            Icmpv6Repr::parse(&p, A2, A1),
            Ok(Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                data: quoted
            })
        );
        let repr = Icmpv6Repr::ParamProblem {
            code: param_problem::NEXT_HEADER,
            pointer: 40,
            data: quoted,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), A2, A1);
        assert_eq!(buf[..8], [4, 1, buf[2], buf[3], 0, 0, 0, 40]);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.pointer(), 40);
        assert_eq!(Icmpv6Repr::parse(&p, A2, A1), Ok(repr));
    }

    #[test]
    fn classification() {
        for t in [1u8, 2, 3, 4, 0, 100, 127] {
            assert!(Icmpv6Type(t).is_error(), "{t}");
        }
        for t in [128u8, 129, 133, 134, 135, 136, 137, 255] {
            assert!(!Icmpv6Type(t).is_error(), "{t}");
        }
        // Neighbour discovery stays raw here.
        let ip = Ipv6Packet::new_checked(&captured::NA[..]).unwrap();
        let p = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert!(matches!(
            Icmpv6Repr::parse(&p, A2, A1),
            Ok(Icmpv6Repr::Other {
                msg_type: Icmpv6Type::NEIGHBOR_ADVERT,
                code: 0,
                rest_of_header: 0x6000_0000,
                ..
            })
        ));
    }

    #[test]
    fn truncated() {
        for len in 0..8 {
            assert_eq!(
                Icmpv6Packet::new_checked(&captured::ECHO_REQUEST[40..40 + len]).unwrap_err(),
                Error::Truncated
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            variant in 0u8..7, a in any::<u16>(), b in any::<u16>(), code in any::<u8>(),
            t in any::<u8>(), rest in any::<u32>(), src in any::<u128>(), dst in any::<u128>(),
            data in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let data = &data[..];
            let repr = match variant {
                0 => Icmpv6Repr::EchoRequest { ident: a, seq_no: b, data },
                1 => Icmpv6Repr::EchoReply { ident: a, seq_no: b, data },
                2 => Icmpv6Repr::DestUnreachable { code, data },
                3 => Icmpv6Repr::PacketTooBig { mtu: rest, data },
                4 => Icmpv6Repr::TimeExceeded { code, data },
                5 => Icmpv6Repr::ParamProblem { code, pointer: rest, data },
                _ => {
                    prop_assume!(!matches!((t, code), (1 | 3 | 4, _) | (2 | 128 | 129, 0)));
                    Icmpv6Repr::Other { msg_type: Icmpv6Type(t), code, rest_of_header: rest, data }
                }
            };
            let (src, dst) = (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst));
            let mut buf = vec![0x3cu8; repr.buffer_len()];
            repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), src, dst);
            let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum(src, dst));
            prop_assert_eq!(Icmpv6Repr::parse(&p, src, dst), Ok(repr));
        }

        #[test]
        fn getters_never_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..40), valid in any::<bool>(),
        ) {
            // Random bytes, or the captured echo request followed by random bytes.
            let mut bytes = if valid { captured::ECHO_REQUEST[40..].to_vec() } else { Vec::new() };
            bytes.extend_from_slice(&tail);
            for len in 0..=bytes.len() {
                if let Ok(p) = Icmpv6Packet::new_checked(&bytes[..len]) {
                    let _ = (p.msg_type(), p.code(), p.checksum(), p.is_error(), p.rest_of_header());
                    let _ = (p.ident(), p.seq_no(), p.mtu(), p.pointer(), p.message_body(), p.data());
                    let _ = Icmpv6Repr::parse(&p, A1, A2);
                    let mut copy = bytes[..len].to_vec();
                    let mut m = Icmpv6Packet::new_unchecked(&mut copy[..]);
                    let _ = m.data_mut().len();
                    m.fill_checksum(A1, A2);
                    prop_assert!(Icmpv6Packet::new_unchecked(&copy[..]).verify_checksum(A1, A2));
                }
            }
        }

        /// Echo messages etherparse builds read the same and verify; our emit gives its bytes.
        #[test]
        fn agrees_with_etherparse(
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
            ident in any::<u16>(), seq in any::<u16>(), reply in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let b = etherparse::PacketBuilder::ipv6(src, dst, 64);
            let b = if reply { b.icmpv6_echo_reply(ident, seq) } else { b.icmpv6_echo_request(ident, seq) };
            let mut pkt = Vec::new();
            b.write(&mut pkt, &payload).unwrap();
            let ip = Ipv6Packet::new_checked(&pkt[..]).unwrap();
            prop_assert_eq!(ip.next_header(), Protocol::ICMPV6);
            let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
            let theirs = etherparse::Icmpv6Slice::from_slice(ip.payload()).unwrap();
            prop_assert_eq!(icmp.msg_type().0, theirs.type_u8());
            prop_assert_eq!(icmp.checksum(), theirs.checksum());
            prop_assert!(icmp.verify_checksum(ip.src(), ip.dst()));
            let repr = Icmpv6Repr::parse(&icmp, ip.src(), ip.dst()).unwrap();
            let expected = if reply {
                Icmpv6Repr::EchoReply { ident, seq_no: seq, data: &payload }
            } else {
                Icmpv6Repr::EchoRequest { ident, seq_no: seq, data: &payload }
            };
            prop_assert_eq!(repr, expected);
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), ip.src(), ip.dst());
            prop_assert_eq!(&buf[..], ip.payload());
        }
    }
}
