//! Ethernet II frames: MAC addresses, EtherTypes, the 14-byte header view and its repr.
//!
//! The view covers the frame without preamble or FCS: destination, source, EtherType, payload.
//! A VLAN tag (EtherType 0x8100 / 0x88a8) is not part of this header; read it with
//! [`crate::vlan::VlanHeader`] over [`EthernetFrame::payload`].

use core::fmt;
use core::str::FromStr;

use crate::{Error, Result};

/// A 48-bit IEEE 802 MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// Reads an address from the first six bytes of `b` (panics if shorter).
    #[inline]
    #[expect(
        clippy::indexing_slicing,
        reason = "documented to panic on fewer than six bytes; views pass their checked field"
    )]
    pub fn from_bytes(b: &[u8]) -> Self {
        match b.first_chunk::<6>() {
            Some(a) => Self(*a),
            None => Self([b[0], b[1], b[2], b[3], b[4], b[5]]),
        }
    }

    /// The six address bytes.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        self.0 == [0xff; 6]
    }

    /// Whether the group bit (least significant bit of the first byte) is set; true for
    /// broadcast too.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is an individual (not group) address.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`: six groups of exactly two hex digits (either case) separated
/// by `:`. Anything else is [`Error::Malformed`].
impl FromStr for MacAddr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        fn hex(c: u8) -> Result<u8> {
            match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(Error::Malformed),
            }
        }
        let s = s.as_bytes();
        if s.len() != 17 {
            return Err(Error::Malformed);
        }
        // 17 bytes are five groups of two digits and a colon, then a last group of two.
        let mut out = [0u8; 6];
        for (byte, group) in out.iter_mut().zip(s.chunks(3)) {
            let (hi, lo) = match *group {
                [hi, lo, b':'] | [hi, lo] => (hi, lo),
                _ => return Err(Error::Malformed),
            };
            *byte = (hex(hi)? << 4) | hex(lo)?;
        }
        Ok(Self(out))
    }
}

/// An EtherType (or, below 0x0600, an 802.3 length), in host byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EtherType(pub u16);

impl EtherType {
    /// Internet Protocol version 4.
    pub const IPV4: Self = Self(0x0800);
    /// Address Resolution Protocol.
    pub const ARP: Self = Self(0x0806);
    /// IEEE 802.1Q VLAN tag (C-tag).
    pub const VLAN: Self = Self(0x8100);
    /// IEEE 802.1ad service tag (S-tag, "QinQ").
    pub const QINQ: Self = Self(0x88a8);
    /// Internet Protocol version 6.
    pub const IPV6: Self = Self(0x86dd);
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        Self(v)
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(v: EtherType) -> Self {
        v.0
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

mod field {
    use crate::Field;

    pub(crate) const DST: Field = 0..6;
    pub(crate) const SRC: Field = 6..12;
    pub(crate) const ETHERTYPE: usize = 12;
    pub(crate) const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 14 bytes check_len verifies"
)]
impl<T: AsRef<[u8]>> EthernetFrame<T> {
    view_constructors!();

    /// Checks that the buffer holds the 14-byte header ([`Error::Truncated`] otherwise).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Length of the header (14).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DST])
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SRC])
    }

    /// EtherType of the payload.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(crate::bytes::get_u16(
            self.buffer.as_ref(),
            field::ETHERTYPE,
        ))
    }

    /// Bytes after the header (including any padding and, if captured, the FCS).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype.0);
    }

    /// Mutable bytes after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// The decoded fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// EtherType of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a frame (checks its length).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<Self> {
        frame.check_len()?;
        Ok(Self {
            src: frame.src(),
            dst: frame.dst(),
            ethertype: frame.ethertype(),
        })
    }

    /// Length of the emitted header (14).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of a frame carrying `payload_len` bytes.
    #[inline]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Writes the header; the payload is left untouched. Panics if the buffer is shorter than
    /// 14 bytes. Wrap a reused buffer with `new_unchecked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut EthernetFrame<&mut T>) {
        frame.set_dst(self.dst);
        frame.set_src(self.src);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::string::ToString;
    use std::vec;

    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x02, 0x00, 0x5e, 0x10, 0x20, 0x30, // src
        0x08, 0x06, // ARP
        0xde, 0xad, 0xbe, 0xef, // payload
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst(), MacAddr::BROADCAST);
        assert_eq!(f.src(), MacAddr([0x02, 0x00, 0x5e, 0x10, 0x20, 0x30]));
        assert_eq!(f.ethertype(), EtherType::ARP);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(f.header_len(), 14);
    }

    #[test]
    fn construct() {
        let repr = EthernetRepr {
            src: MacAddr([0x02, 0x00, 0x5e, 0x10, 0x20, 0x30]),
            dst: MacAddr::BROADCAST,
            ethertype: EtherType::ARP,
        };
        let mut buf = [0xa5u8; 18];
        buf[14..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        repr.emit(&mut f);
        assert_eq!(buf, FRAME);
        assert_eq!(repr.buffer_len(4), 18);
    }

    #[test]
    fn truncated() {
        for len in 0..14 {
            assert_eq!(
                EthernetFrame::new_checked(&FRAME[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        let f = EthernetFrame::new_checked(&FRAME[..14]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn mac_classes() {
        assert!(MacAddr::BROADCAST.is_broadcast());
        assert!(MacAddr::BROADCAST.is_multicast());
        let mcast = MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(mcast.is_multicast() && !mcast.is_broadcast() && !mcast.is_unicast());
        let ucast = MacAddr([0x02, 0, 0, 0, 0, 1]);
        assert!(ucast.is_unicast() && !ucast.is_multicast());
    }

    #[test]
    fn mac_display_and_parse() {
        let m = MacAddr([0x02, 0xab, 0x0c, 0xd0, 0x00, 0xff]);
        assert_eq!(m.to_string(), "02:ab:0c:d0:00:ff");
        assert_eq!("02:ab:0c:d0:00:ff".parse::<MacAddr>(), Ok(m));
        assert_eq!("02:AB:0C:D0:00:FF".parse::<MacAddr>(), Ok(m));
        for bad in [
            "",
            "02:ab:0c:d0:00",
            "02:ab:0c:d0:00:ff:",
            "02-ab-0c-d0-00-ff",
            "02:ab:0c:d0:00:fg",
            "2:ab:0c:d0:00:ff0",
            "02:ab:0c:d0:00:f",
            "02:ab:0c:d0:00:ff:11",
            "+2:ab:0c:d0:00:ff",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(Error::Malformed), "{bad:?}");
        }
        assert_eq!(EtherType::IPV4.to_string(), "0x0800");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(src in any::<[u8; 6]>(), dst in any::<[u8; 6]>(), et in any::<u16>()) {
            let repr = EthernetRepr { src: MacAddr(src), dst: MacAddr(dst), ethertype: EtherType(et) };
            let mut buf = vec![0u8; repr.buffer_len(0)];
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
            let parsed = EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).unwrap());
            prop_assert_eq!(parsed, Ok(repr));
        }

        #[test]
        fn mac_string_roundtrip(b in any::<[u8; 6]>()) {
            let m = MacAddr(b);
            prop_assert_eq!(m.to_string().parse::<MacAddr>(), Ok(m));
        }

        #[test]
        fn mac_parse_never_panics(s in "\\PC{0,20}") {
            let _ = s.parse::<MacAddr>();
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = EthernetFrame::new_checked(&bytes[..]) {
                let _ = (f.dst(), f.src(), f.ethertype(), f.payload(), f.header_len());
                let _ = EthernetRepr::parse(&f);
            }
        }
    }
}
