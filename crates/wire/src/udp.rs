//! UDP datagrams (RFC 768) over IPv4.
//!
//! # Length field
//!
//! The UDP length counts the 8-byte header plus the data, so it is at least 8. It may be
//! smaller than the buffer (the IPv4 payload): the bytes after it are not part of the
//! datagram. [`UdpPacket::payload`] is clamped to both the length field and the buffer, so it
//! never panics; [`UdpRepr::parse`] rejects a length below 8 ([`Error::Malformed`]) or beyond
//! the buffer ([`Error::Truncated`]).
//!
//! # Checksum
//!
//! The checksum covers the IPv4 pseudo-header (with the UDP length), the header and the data.
//! A transmitted checksum of 0 means "not computed" and is accepted; a computed checksum of 0
//! is therefore transmitted as 0xffff ([`checksum_on_wire`]). Incremental updates must keep
//! both rules: see [`update16`] and [`update32`].

use core::net::Ipv4Addr;

use crate::checksum;
use crate::ipv4::Protocol;
use crate::{Error, Result};

mod field {
    pub(crate) const SRC_PORT: usize = 0;
    pub(crate) const DST_PORT: usize = 2;
    pub(crate) const LENGTH: usize = 4;
    pub(crate) const CHECKSUM: usize = 6;
    pub(crate) const PAYLOAD: usize = 8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Where the checksum field is in the header (what a device completing a partial
/// checksum is told).
pub const CHECKSUM_AT: usize = field::CHECKSUM;

/// The value to transmit for a computed UDP checksum: 0 becomes 0xffff (0 on the wire means
/// "no checksum").
#[inline]
pub const fn checksum_on_wire(computed: u16) -> u16 {
    if computed == 0 { 0xffff } else { computed }
}

/// [`checksum::update16`] for a UDP checksum: a stored 0 ("no checksum") stays 0, and a
/// result of 0 is transmitted as 0xffff.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    if hc == 0 {
        0
    } else {
        checksum_on_wire(checksum::update16(hc, old, new))
    }
}

/// [`checksum::update32`] for a UDP checksum (for example after rewriting an address that is
/// part of the pseudo-header): a stored 0 stays 0, and a result of 0 becomes 0xffff.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    if hc == 0 {
        0
    } else {
        checksum_on_wire(checksum::update32(hc, old, new))
    }
}

/// A view of a UDP datagram. The buffer should be the IPv4 payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 8 bytes check_len verifies; the datagram is clamped"
)]
impl<T: AsRef<[u8]>> UdpPacket<T> {
    view_constructors!();

    /// Checks that the buffer holds the 8-byte header ([`Error::Truncated`] otherwise). The
    /// length field is not checked (see the module docs).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
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

    /// Length field: header plus data, in bytes.
    #[inline]
    #[expect(
        clippy::len_without_is_empty,
        reason = "reads the UDP length field; not a container length"
    )]
    pub fn len(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Checksum field (0: not computed).
    #[inline]
    pub fn checksum(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// End of the datagram: the length field clamped to `8..=buffer length`.
    #[inline]
    fn datagram_end(&self) -> usize {
        usize::from(self.len())
            .min(self.buffer.as_ref().len())
            .max(HEADER_LEN)
    }

    /// The data: bytes 8 up to `min(len, buffer length)`; empty if `len < 8`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.datagram_end()]
    }

    /// Sum of the pseudo-header, header and data, with the length field as the pseudo-header
    /// length and the (clamped) datagram as the data.
    #[inline]
    fn full_sum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u64 {
        let acc = checksum::pseudo_header_v4(src, dst, Protocol::UDP.0, self.len());
        checksum::sum(&self.buffer.as_ref()[..self.datagram_end()], acc)
    }

    /// Whether the checksum verifies for the given IPv4 addresses. A zero checksum means "not
    /// computed" and is valid (RFC 768). The sum uses the length field and the datagram clamped
    /// to the buffer; if the two disagree the datagram is invalid anyway ([`UdpRepr::parse`]).
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || checksum::verifies(self.full_sum(src, dst))
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
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

    /// Sets the length field (header plus data).
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Computes and stores the checksum over the pseudo-header, header and data (as delimited
    /// by the length field); a computed 0 is stored as 0xffff.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::finish(self.full_sum(src, dst));
        self.set_checksum(checksum_on_wire(c));
    }

    /// Mutable data, with the same bounds as [`Self::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.datagram_end();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The decoded fields of a UDP header (the length and checksum are derived on emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Decodes a datagram: [`Error::Truncated`] below 8 bytes or if the length field exceeds
    /// the buffer, [`Error::Malformed`] if the length field is below 8. The checksum is not
    /// verified here (it needs the IPv4 addresses): call [`UdpPacket::verify_checksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &UdpPacket<&T>) -> Result<Self> {
        packet.check_len()?;
        let len = usize::from(packet.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > packet.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Length of the header (8).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of a datagram carrying `payload_len` bytes.
    #[inline]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Writes the header for `payload_len` bytes of data (length field `8 + payload_len`) and,
    /// if `fill_checksum`, the checksum; otherwise the checksum is 0 ("not computed").
    ///
    /// The checksum covers the data, so write the data into the buffer (after the 8 header
    /// bytes) *before* calling this, or emit with `fill_checksum = false` and call
    /// [`UdpPacket::fill_checksum`] afterwards. Panics if the buffer is shorter than 8 bytes;
    /// `payload_len` above 65527 is a bug (debug assertion; the length saturates). Wrap a
    /// reused buffer with `new_unchecked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut UdpPacket<&mut T>,
        payload_len: usize,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        fill_checksum: bool,
    ) {
        debug_assert!(payload_len <= usize::from(u16::MAX) - HEADER_LEN);
        let len = u16::try_from(HEADER_LEN + payload_len).unwrap_or(u16::MAX);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        if fill_checksum {
            packet.fill_checksum(src, dst);
        } else {
            packet.set_checksum(0);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const DST: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    /// DNS-looking datagram 40000 -> 53 with 4 data bytes. Checksum computed by hand:
    /// pseudo-header c0a8 + 010a + 0808 + 0808 + 0011 + 000c = 0xd1df;
    /// header 9c40 + 0035 + 000c = 0x9c81; data 0102 + 0304 = 0x0406;
    /// total 0x17266 -> 0x7267, checksum !0x7267 = 0x8d98.
    const DATAGRAM: [u8; 12] = [
        0x9c, 0x40, 0x00, 0x35, 0x00, 0x0c, 0x8d, 0x98, 0x01, 0x02, 0x03, 0x04,
    ];

    #[test]
    fn deconstruct() {
        let p = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 40000);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 12);
        assert_eq!(p.checksum(), 0x8d98);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(SRC, Ipv4Addr::new(8, 8, 4, 4)));
        assert_eq!(
            UdpRepr::parse(&p),
            Ok(UdpRepr {
                src_port: 40000,
                dst_port: 53
            })
        );
    }

    #[test]
    fn construct() {
        let repr = UdpRepr {
            src_port: 40000,
            dst_port: 53,
        };
        let mut buf = [0xffu8; 12];
        buf[8..].copy_from_slice(&[1, 2, 3, 4]);
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut buf[..]),
            4,
            SRC,
            DST,
            true,
        );
        assert_eq!(buf, DATAGRAM);
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut buf[..]),
            4,
            SRC,
            DST,
            false,
        );
        assert_eq!(&buf[6..8], &[0, 0]);
        assert!(UdpPacket::new_unchecked(&buf[..]).verify_checksum(SRC, DST));
    }

    #[test]
    fn zero_checksum_sent_as_ffff() {
        // Choose the last data word so that everything sums to 0xffff: computed checksum 0.
        let mut buf = DATAGRAM;
        buf[6..8].copy_from_slice(&[0, 0]);
        let acc = checksum::pseudo_header_v4(SRC, DST, 17, 12);
        let partial = checksum::fold(checksum::sum(&buf[..10], acc));
        buf[10..12].copy_from_slice(&(!partial).to_be_bytes());
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        p.fill_checksum(SRC, DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(SRC, DST));
        assert_eq!(checksum_on_wire(0), 0xffff);
        assert_eq!(checksum_on_wire(0x1234), 0x1234);
    }

    #[test]
    fn incremental_helpers_keep_udp_rules() {
        assert_eq!(update16(0, 1, 2), 0);
        assert_eq!(update32(0, 1, 2), 0);
        // The RFC 1624 example yields 0x0000, which UDP must send as 0xffff.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0xffff);
        // NAT: rewrite the source port and the source address, update incrementally.
        let mut buf = DATAGRAM;
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        let new_src = Ipv4Addr::new(203, 0, 113, 7);
        let c = update16(p.checksum(), p.src_port(), 1024);
        let c = update32(c, SRC.to_bits(), new_src.to_bits());
        p.set_src_port(1024);
        p.set_checksum(c);
        assert!(p.verify_checksum(new_src, DST));
    }

    #[test]
    fn truncated_and_malformed() {
        for len in 0..8 {
            assert_eq!(
                UdpPacket::new_checked(&DATAGRAM[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        // Length field beyond the buffer.
        let p = UdpPacket::new_checked(&DATAGRAM[..10]).unwrap();
        assert_eq!(p.payload(), &[1, 2]);
        assert_eq!(UdpRepr::parse(&p), Err(Error::Truncated));
        // Length field below 8.
        let mut buf = DATAGRAM;
        buf[5] = 7;
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert!(p.payload().is_empty());
        assert_eq!(UdpRepr::parse(&p), Err(Error::Malformed));
        // Length field shorter than the buffer: trailing bytes are not data.
        let mut buf = DATAGRAM.to_vec();
        buf.extend_from_slice(&[9, 9]);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert!(p.verify_checksum(SRC, DST));
        assert!(UdpRepr::parse(&p).is_ok());
    }

    /// IPv4 + UDP packet built by etherparse.
    fn etherparse_packet(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let builder = etherparse::PacketBuilder::ipv4(src, dst, 64).udp(sp, dp);
        let mut out = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut out, payload).unwrap();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            src_port in any::<u16>(), dst_port in any::<u16>(),
            src in any::<u32>(), dst in any::<u32>(),
            payload in proptest::collection::vec(any::<u8>(), 0..600),
            fill in any::<bool>(),
        ) {
            let (src, dst) = (Ipv4Addr::from_bits(src), Ipv4Addr::from_bits(dst));
            let repr = UdpRepr { src_port, dst_port };
            let mut buf = vec![0xccu8; repr.buffer_len(payload.len())];
            buf[HEADER_LEN..].copy_from_slice(&payload);
            repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), payload.len(), src, dst, fill);
            let p = UdpPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(UdpRepr::parse(&p), Ok(repr));
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert!(p.verify_checksum(src, dst));
            prop_assert_eq!(p.checksum() == 0, !fill);
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = UdpPacket::new_checked(&bytes[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload());
                let _ = p.verify_checksum(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
                let _ = UdpRepr::parse(&p);
                let mut copy = bytes.clone();
                let mut m = UdpPacket::new_unchecked(&mut copy[..]);
                let _ = m.payload_mut().len();
                m.fill_checksum(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
            }
        }

        /// Datagrams built by etherparse read the same and their checksums verify.
        #[test]
        fn agrees_with_etherparse_parse(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            sp in any::<u16>(), dp in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let pkt = etherparse_packet(src, dst, sp, dp, &payload);
            let ip = crate::ipv4::Ipv4Packet::new_checked(&pkt[..]).unwrap();
            prop_assert_eq!(ip.protocol(), Protocol::UDP);
            prop_assert!(ip.verify_checksum());
            let udp = UdpPacket::new_checked(ip.payload()).unwrap();
            let theirs = etherparse::UdpHeaderSlice::from_slice(ip.payload()).unwrap();
            prop_assert_eq!(udp.src_port(), sp);
            prop_assert_eq!(udp.dst_port(), dp);
            prop_assert_eq!(udp.len(), theirs.length());
            prop_assert_eq!(udp.checksum(), theirs.checksum());
            prop_assert_eq!(udp.payload(), &payload[..]);
            prop_assert!(udp.verify_checksum(ip.src(), ip.dst()));
            // Our own computation gives the same stored value.
            let mut copy = ip.payload().to_vec();
            let mut ours = UdpPacket::new_unchecked(&mut copy[..]);
            ours.fill_checksum(ip.src(), ip.dst());
            prop_assert_eq!(ours.checksum(), theirs.checksum());
        }

        /// Checksums we emit match etherparse's calculation.
        #[test]
        fn agrees_with_etherparse_emit(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
            sp in any::<u16>(), dp in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let repr = UdpRepr { src_port: sp, dst_port: dp };
            let mut buf = vec![0u8; repr.buffer_len(payload.len())];
            buf[HEADER_LEN..].copy_from_slice(&payload);
            repr.emit(
                &mut UdpPacket::new_unchecked(&mut buf[..]),
                payload.len(),
                src.into(),
                dst.into(),
                true,
            );
            let theirs = etherparse::UdpHeaderSlice::from_slice(&buf).unwrap().to_header();
            prop_assert_eq!(theirs.source_port, sp);
            prop_assert_eq!(theirs.destination_port, dp);
            prop_assert_eq!(usize::from(theirs.length), buf.len());
            let expected = theirs.calc_checksum_ipv4_raw(src, dst, &payload).unwrap();
            prop_assert_eq!(theirs.checksum, expected);
        }
    }
}
