//! ARP (RFC 826) for Ethernet and IPv4 only.
//!
//! The view assumes the fixed 28-byte Ethernet/IPv4 layout (6-byte hardware and 4-byte
//! protocol addresses); [`ArpRepr::parse`] checks that the packet really has it.

use core::net::Ipv4Addr;

use crate::ethernet::{EtherType, MacAddr};
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub(crate) const HTYPE: usize = 0;
    pub(crate) const PTYPE: usize = 2;
    pub(crate) const HLEN: usize = 4;
    pub(crate) const PLEN: usize = 5;
    pub(crate) const OPER: usize = 6;
    pub(crate) const SHA: Field = 8..14;
    pub(crate) const SPA: Field = 14..18;
    pub(crate) const THA: Field = 18..24;
    pub(crate) const TPA: Field = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = field::TPA.end;

/// Hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

/// An ARP operation code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ArpOperation {
    /// Who has `tpa`? Tell `spa`.
    Request = 1,
    /// `spa` is at `sha`.
    Reply = 2,
}

impl ArpOperation {
    /// Decodes an operation code; `None` for anything but 1 and 2.
    #[inline]
    pub const fn from_u16(v: u16) -> Option<Self> {
        match v {
            1 => Some(Self::Request),
            2 => Some(Self::Reply),
            _ => None,
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(op: ArpOperation) -> Self {
        op as Self
    }
}

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 28 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> ArpPacket<T> {
    view_constructors!();

    /// Checks that the buffer holds 28 bytes ([`Error::Truncated`] otherwise).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Hardware type (1 for Ethernet).
    #[inline]
    pub fn htype(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (an EtherType, 0x0800 for IPv4).
    #[inline]
    pub fn ptype(&self) -> EtherType {
        EtherType(crate::bytes::get_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// Hardware address length.
    #[inline]
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Raw operation code (see [`ArpOperation`]).
    #[inline]
    pub fn oper(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::OPER)
    }

    /// Sender hardware address.
    #[inline]
    pub fn sha(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SHA])
    }

    /// Sender protocol address.
    #[inline]
    pub fn spa(&self) -> Ipv4Addr {
        crate::bytes::get_ipv4(self.buffer.as_ref(), field::SPA.start)
    }

    /// Target hardware address.
    #[inline]
    pub fn tha(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::THA])
    }

    /// Target protocol address.
    #[inline]
    pub fn tpa(&self) -> Ipv4Addr {
        crate::bytes::get_ipv4(self.buffer.as_ref(), field::TPA.start)
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets the hardware type.
    #[inline]
    pub fn set_htype(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::HTYPE, v);
    }

    /// Sets the protocol type.
    #[inline]
    pub fn set_ptype(&mut self, v: EtherType) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::PTYPE, v.0);
    }

    /// Sets the hardware address length.
    #[inline]
    pub fn set_hlen(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    /// Sets the protocol address length.
    #[inline]
    pub fn set_plen(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    /// Sets the raw operation code.
    #[inline]
    pub fn set_oper(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::OPER, v);
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_sha(&mut self, v: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&v.0);
    }

    /// Sets the sender protocol address.
    #[inline]
    pub fn set_spa(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&v.octets());
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_tha(&mut self, v: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&v.0);
    }

    /// Sets the target protocol address.
    #[inline]
    pub fn set_tpa(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&v.octets());
    }
}

/// The decoded fields of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender hardware address.
    pub sha: MacAddr,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address (ignored, usually zero, in requests).
    pub tha: MacAddr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

impl ArpRepr {
    /// Decodes a packet: [`Error::Truncated`] below 28 bytes, [`Error::Unsupported`] unless
    /// htype = 1, ptype = 0x0800, hlen = 6 and plen = 4, [`Error::Malformed`] for an operation
    /// other than request or reply.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ArpPacket<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.htype() != HTYPE_ETHERNET
            || packet.ptype() != EtherType::IPV4
            || packet.hlen() != 6
            || packet.plen() != 4
        {
            return Err(Error::Unsupported);
        }
        let operation = ArpOperation::from_u16(packet.oper()).ok_or(Error::Malformed)?;
        Ok(Self {
            operation,
            sha: packet.sha(),
            spa: packet.spa(),
            tha: packet.tha(),
            tpa: packet.tpa(),
        })
    }

    /// Length of the emitted packet (28).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes all 28 bytes. Panics if the buffer is shorter. Wrap a reused buffer with
    /// `new_unchecked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut ArpPacket<&mut T>) {
        packet.set_htype(HTYPE_ETHERNET);
        packet.set_ptype(EtherType::IPV4);
        packet.set_hlen(6);
        packet.set_plen(4);
        packet.set_oper(self.operation.into());
        packet.set_sha(self.sha);
        packet.set_spa(self.spa);
        packet.set_tha(self.tha);
        packet.set_tpa(self.tpa);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;

    const REQUEST: [u8; 28] = [
        0x00, 0x01, // htype
        0x08, 0x00, // ptype
        0x06, 0x04, // hlen, plen
        0x00, 0x01, // request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // sha
        192, 168, 1, 1, // spa
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tha
        192, 168, 1, 254, // tpa
    ];

    fn request_repr() -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::Request,
            sha: MacAddr([0x02, 0, 0, 0, 0, 1]),
            spa: Ipv4Addr::new(192, 168, 1, 1),
            tha: MacAddr([0; 6]),
            tpa: Ipv4Addr::new(192, 168, 1, 254),
        }
    }

    #[test]
    fn deconstruct() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.htype(), 1);
        assert_eq!(p.ptype(), EtherType::IPV4);
        assert_eq!((p.hlen(), p.plen()), (6, 4));
        assert_eq!(p.oper(), 1);
        assert_eq!(p.sha(), MacAddr([0x02, 0, 0, 0, 0, 1]));
        assert_eq!(p.spa(), Ipv4Addr::new(192, 168, 1, 1));
        assert_eq!(p.tha(), MacAddr([0; 6]));
        assert_eq!(p.tpa(), Ipv4Addr::new(192, 168, 1, 254));
        assert_eq!(ArpRepr::parse(&p), Ok(request_repr()));
    }

    #[test]
    fn construct() {
        let mut buf = [0x55u8; 28];
        request_repr().emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, REQUEST);
    }

    #[test]
    fn truncated() {
        for len in 0..28 {
            assert_eq!(
                ArpPacket::new_checked(&REQUEST[..len]).unwrap_err(),
                Error::Truncated
            );
        }
    }

    #[test]
    fn unsupported_and_malformed() {
        for (at, value) in [(1, 6), (3, 0xdd), (4, 8), (5, 16)] {
            let mut buf = REQUEST;
            buf[at] = value;
            let p = ArpPacket::new_checked(&buf[..]).unwrap();
            assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported), "byte {at}");
        }
        for oper in [0u8, 3, 8] {
            let mut buf = REQUEST;
            buf[7] = oper;
            let p = ArpPacket::new_checked(&buf[..]).unwrap();
            assert_eq!(ArpRepr::parse(&p), Err(Error::Malformed));
        }
        let mut buf = REQUEST;
        buf[7] = 2;
        let p = ArpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap().operation, ArpOperation::Reply);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(
            reply in any::<bool>(),
            sha in any::<[u8; 6]>(),
            spa in any::<u32>(),
            tha in any::<[u8; 6]>(),
            tpa in any::<u32>(),
        ) {
            let repr = ArpRepr {
                operation: if reply { ArpOperation::Reply } else { ArpOperation::Request },
                sha: MacAddr(sha),
                spa: Ipv4Addr::from_bits(spa),
                tha: MacAddr(tha),
                tpa: Ipv4Addr::from_bits(tpa),
            };
            let mut buf = vec![0xeeu8; repr.buffer_len()];
            repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
            prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&buf[..]).unwrap()), Ok(repr));
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = ArpPacket::new_checked(&bytes[..]) {
                let _ = (p.htype(), p.ptype(), p.hlen(), p.plen(), p.oper());
                let _ = (p.sha(), p.spa(), p.tha(), p.tpa());
                let _ = ArpRepr::parse(&p);
            }
        }
    }
}
