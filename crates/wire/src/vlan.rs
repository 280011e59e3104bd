//! IEEE 802.1Q (C-tag) and 802.1ad (S-tag) VLAN tags.
//!
//! The view covers the 4 bytes that follow an EtherType of 0x8100 or 0x88a8: the tag control
//! information (TCI: 3-bit priority code point, 1-bit drop eligible indicator, 12-bit VLAN id)
//! and the EtherType of what follows, which may itself be another tag (QinQ).

use crate::ethernet::EtherType;
use crate::{Error, Result};

mod field {
    pub(crate) const TCI: usize = 0;
    pub(crate) const ETHERTYPE: usize = 2;
    pub(crate) const PAYLOAD: usize = 4;
}

/// Length of a VLAN tag after the outer EtherType.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Largest VLAN id value (0xfff is reserved by 802.1Q but representable).
pub const VID_MAX: u16 = 0x0fff;

/// A view of a VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 4 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> VlanHeader<T> {
    view_constructors!();

    /// Checks that the buffer holds the 4-byte tag ([`Error::Truncated`] otherwise).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The raw 16-bit tag control information.
    #[inline]
    pub fn tci(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::TCI)
    }

    /// Priority code point (0-7).
    #[inline]
    pub fn pcp(&self) -> u8 {
        self.buffer.as_ref()[field::TCI] >> 5
    }

    /// Drop eligible indicator (formerly CFI).
    #[inline]
    pub fn dei(&self) -> bool {
        self.buffer.as_ref()[field::TCI] & 0x10 != 0
    }

    /// VLAN identifier (0-4095).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & VID_MAX
    }

    /// EtherType of the encapsulated payload.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(crate::bytes::get_u16(
            self.buffer.as_ref(),
            field::ETHERTYPE,
        ))
    }

    /// Bytes after the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// Sets the raw tag control information.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::TCI, tci);
    }

    /// Sets the priority code point (only the low 3 bits are used).
    #[inline]
    pub fn set_pcp(&mut self, pcp: u8) {
        let b = &mut self.buffer.as_mut()[field::TCI];
        *b = (*b & 0x1f) | ((pcp & 0x07) << 5);
    }

    /// Sets the drop eligible indicator.
    #[inline]
    pub fn set_dei(&mut self, dei: bool) {
        let b = &mut self.buffer.as_mut()[field::TCI];
        *b = (*b & !0x10) | (u8::from(dei) << 4);
    }

    /// Sets the VLAN identifier (only the low 12 bits are used).
    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & !VID_MAX) | (vid & VID_MAX);
        self.set_tci(tci);
    }

    /// Sets the EtherType of the payload.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype.0);
    }

    /// Mutable bytes after the tag.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// The decoded fields of a VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanRepr {
    /// Priority code point (0-7; `emit` uses the low 3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0-4095; `emit` uses the low 12 bits).
    pub vid: u16,
    /// EtherType of the encapsulated payload.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Reads a tag (checks its length; every TCI value is accepted).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(tag: &VlanHeader<&T>) -> Result<Self> {
        tag.check_len()?;
        Ok(Self {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vid: tag.vid(),
            ethertype: tag.ethertype(),
        })
    }

    /// Length of the emitted tag (4).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of a tag followed by `payload_len` bytes.
    #[inline]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Writes the tag. Panics if the buffer is shorter than 4 bytes. Wrap a reused buffer with
    /// `new_unchecked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, tag: &mut VlanHeader<&mut T>) {
        let tci =
            (u16::from(self.pcp & 0x07) << 13) | (u16::from(self.dei) << 12) | (self.vid & VID_MAX);
        tag.set_tci(tci);
        tag.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec;

    // PCP 5, DEI 1, VID 0x123, inner IPv4, one payload byte.
    const TAG: [u8; 5] = [0xb1, 0x23, 0x08, 0x00, 0x45];

    #[test]
    fn deconstruct() {
        let t = VlanHeader::new_checked(&TAG[..]).unwrap();
        assert_eq!(t.tci(), 0xb123);
        assert_eq!(t.pcp(), 5);
        assert!(t.dei());
        assert_eq!(t.vid(), 0x123);
        assert_eq!(t.ethertype(), EtherType::IPV4);
        assert_eq!(t.payload(), &[0x45]);
    }

    #[test]
    fn construct() {
        let repr = VlanRepr {
            pcp: 5,
            dei: true,
            vid: 0x123,
            ethertype: EtherType::IPV4,
        };
        let mut buf = [0xffu8; 5];
        buf[4] = 0x45;
        repr.emit(&mut VlanHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, TAG);
    }

    #[test]
    fn setters_keep_other_bits() {
        let mut buf = TAG;
        let mut t = VlanHeader::new_unchecked(&mut buf[..]);
        t.set_vid(0xfff);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (5, true, 0xfff));
        t.set_pcp(2);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, true, 0xfff));
        t.set_dei(false);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, false, 0xfff));
        t.set_ethertype(EtherType::VLAN);
        assert_eq!(t.ethertype(), EtherType::VLAN);
    }

    #[test]
    fn truncated() {
        for len in 0..4 {
            assert_eq!(
                VlanHeader::new_checked(&TAG[..len]).unwrap_err(),
                Error::Truncated
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(pcp in 0u8..8, dei in any::<bool>(), vid in 0u16..4096, et in any::<u16>()) {
            let repr = VlanRepr { pcp, dei, vid, ethertype: EtherType(et) };
            let mut buf = vec![0u8; repr.buffer_len(0)];
            repr.emit(&mut VlanHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(VlanRepr::parse(&VlanHeader::new_unchecked(&buf[..])), Ok(repr));
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..10)) {
            if let Ok(t) = VlanHeader::new_checked(&bytes[..]) {
                let _ = (t.tci(), t.pcp(), t.dei(), t.vid(), t.ethertype(), t.payload());
                let _ = VlanRepr::parse(&t);
            }
        }
    }
}
