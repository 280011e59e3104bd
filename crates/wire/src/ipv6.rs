//! IPv6 headers (RFC 8200) and the address helpers neighbour discovery needs (RFC 4291,
//! RFC 2464).
//!
//! [`Ipv6Packet::check_len`] checks only the fixed 40-byte header; the version and the
//! payload length against the buffer are separate drop reasons for the caller (both are
//! checked by [`Ipv6Repr::parse`]). [`Ipv6Packet::payload`] is clamped to the payload length
//! and to the buffer, so it never panics, and it drops link-layer padding. The payload
//! starts with the extension headers, if any ([`crate::ipv6ext`]).
//!
//! Jumbograms (RFC 2675, payload length 0 with a Jumbo Payload option) are not supported: a
//! payload length of 0 is an empty payload.
//!
//! Upper-layer checksums use [`checksum::pseudo_header_v6`](crate::checksum::pseudo_header_v6).

use core::net::Ipv6Addr;

use crate::ethernet::MacAddr;
pub use crate::ipv4::Protocol;
use crate::{Error, Result};

/// IPv6 next-header values. They share the IANA registry of IPv4 protocol numbers, so they
/// are [`Protocol`] values; the extension headers are walked by [`crate::ipv6ext`].
impl Protocol {
    /// Hop-by-Hop Options header (RFC 8200 §4.3).
    pub const HOP_BY_HOP: Self = Self(0);
    /// Routing header (RFC 8200 §4.4).
    pub const ROUTING: Self = Self(43);
    /// Fragment header (RFC 8200 §4.5).
    pub const FRAGMENT: Self = Self(44);
    /// Encapsulating Security Payload (RFC 4303).
    pub const ESP: Self = Self(50);
    /// Authentication Header (RFC 4302).
    pub const AH: Self = Self(51);
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: Self = Self(58);
    /// No Next Header (RFC 8200 §4.7).
    pub const NO_NEXT_HEADER: Self = Self(59);
    /// Destination Options header (RFC 8200 §4.6).
    pub const DEST_OPTS: Self = Self(60);
}

mod field {
    use crate::Field;

    pub(crate) const VER_TC_FLOW: usize = 0;
    pub(crate) const PAYLOAD_LEN: usize = 4;
    pub(crate) const NEXT_HEADER: usize = 6;
    pub(crate) const HOP_LIMIT: usize = 7;
    pub(crate) const SRC: Field = 8..24;
    pub(crate) const DST: Field = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST.end;

/// Offset of the next header field in the fixed header (the ICMPv6 parameter problem
/// pointer for an unrecognized first next header).
pub const NEXT_HEADER_AT: usize = field::NEXT_HEADER;

/// The minimum link MTU of IPv6 (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;

/// All-nodes link-local multicast address `ff02::1` (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// All-routers link-local multicast address `ff02::2` (RFC 4291 §2.7.1).
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// The Subnet-Router anycast address of the link-local prefix `fe80::/64`: `fe80::`
/// (RFC 4291 §2.6.1, §2.5.6).
pub const LINK_LOCAL_ANYCAST: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0);

const FLOW_MASK: u32 = 0x000f_ffff;

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[expect(
    clippy::indexing_slicing,
    reason = "fields inside the 40 bytes check_len verifies; the payload is clamped"
)]
impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    view_constructors!();

    /// Checks that the buffer holds the fixed 40-byte header (RFC 8200 §3),
    /// [`Error::Truncated`] otherwise. Neither the version nor the payload length is checked.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The first 32-bit word: version, traffic class and flow label.
    #[inline]
    fn first_word(&self) -> u32 {
        crate::bytes::get_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// IP version (6 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Length of the fixed header (40).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Traffic class: the DSCP/ECN byte (RFC 8200 §7, RFC 2474).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// Differentiated services code point (upper 6 bits of the traffic class).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Explicit congestion notification (lower 2 bits of the traffic class).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow label (20 bits, RFC 6437).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & FLOW_MASK
    }

    /// Payload length: everything after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        crate::bytes::get_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Next header: the first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[field::NEXT_HEADER])
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        read_addr(self.buffer.as_ref(), field::SRC.start)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        read_addr(self.buffer.as_ref(), field::DST.start)
    }

    /// End of the payload: `40 + payload_len` clamped to the buffer.
    #[inline]
    fn payload_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        (HEADER_LEN + usize::from(self.payload_len()))
            .min(len)
            .max(HEADER_LEN.min(len))
    }

    /// The payload (extension headers included): bytes 40 up to
    /// `min(40 + payload_len, buffer length)`. Link-layer padding is excluded.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = self.payload_end();
        &self.buffer.as_ref()[HEADER_LEN.min(end)..end]
    }

    /// The packet as the payload length delimits it: header plus [`Self::payload`]. The
    /// offsets of [`crate::ipv6ext`] are taken from its start.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.payload_end()]
    }
}

#[expect(
    clippy::indexing_slicing,
    reason = "setters write fields of a header the caller sized; short panics"
)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline]
    fn set_first_word(&mut self, v: u32) {
        crate::bytes::put_u32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }

    /// Sets the version (low 4 bits of `v`).
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let w = (self.first_word() & 0x0fff_ffff) | (u32::from(v & 0x0f) << 28);
        self.set_first_word(w);
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, v: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | (u32::from(v) << 20);
        self.set_first_word(w);
    }

    /// Sets the flow label (low 20 bits of `v`).
    #[inline]
    pub fn set_flow_label(&mut self, v: u32) {
        let w = (self.first_word() & !FLOW_MASK) | (v & FLOW_MASK);
        self.set_first_word(w);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        crate::bytes::put_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: Protocol) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v.0;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, v: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v.octets());
    }

    /// Mutable payload, with the same bounds as [`Self::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.buffer.as_mut()[HEADER_LEN.min(end)..end]
    }
}

/// Reads an IPv6 address (16 bytes) at `at`; panics when out of the buffer.
#[inline]
#[expect(
    clippy::indexing_slicing,
    reason = "fixed fields inside a length the caller checked; out of range panics (documented)"
)]
pub(crate) fn read_addr(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

/// The decoded fields of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header (first extension header or upper-layer protocol).
    pub next_header: Protocol,
    /// Payload length in bytes, extension headers included; at most 65535.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP/ECN byte).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Length of the header `emit` writes (40).
    pub const HEADER_LEN: usize = HEADER_LEN;

    /// Largest payload the payload length field can describe (no jumbograms).
    pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;

    /// Decodes and validates a header: [`Error::Truncated`] below 40 bytes,
    /// [`Error::Malformed`] if the version is not 6 (RFC 8200 §3), [`Error::Truncated`] if
    /// the payload length runs past the buffer (RFC 8200 §3: it counts every byte after the
    /// fixed header). Bytes past the payload length (link padding) are ignored.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv6Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Malformed);
        }
        let payload_len = usize::from(packet.payload_len());
        if HEADER_LEN + payload_len > packet.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Self {
            src: packet.src(),
            dst: packet.dst(),
            next_header: packet.next_header(),
            payload_len,
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Length of the emitted header (40).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of header plus payload.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 40-byte header; the payload is left untouched. Panics if the buffer is
    /// shorter than 40 bytes. `payload_len` above [`Self::MAX_PAYLOAD_LEN`] is a bug (debug
    /// assertion; the field saturates) and the flow label keeps its low 20 bits. Wrap a
    /// reused buffer with `new_unchecked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Ipv6Packet<&mut T>) {
        debug_assert!(self.payload_len <= Self::MAX_PAYLOAD_LEN);
        let word =
            (6 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & FLOW_MASK);
        packet.set_first_word(word);
        packet.set_payload_len(u16::try_from(self.payload_len).unwrap_or(u16::MAX));
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src(self.src);
        packet.set_dst(self.dst);
    }
}

/// Multicast scopes (RFC 4291 §2.7, RFC 7346), the low 4 bits of the second byte.
pub mod scope {
    /// Interface-local.
    pub const INTERFACE_LOCAL: u8 = 0x1;
    /// Link-local.
    pub const LINK_LOCAL: u8 = 0x2;
    /// Realm-local.
    pub const REALM_LOCAL: u8 = 0x3;
    /// Admin-local.
    pub const ADMIN_LOCAL: u8 = 0x4;
    /// Site-local.
    pub const SITE_LOCAL: u8 = 0x5;
    /// Organization-local.
    pub const ORGANIZATION_LOCAL: u8 = 0x8;
    /// Global.
    pub const GLOBAL: u8 = 0xe;
}

/// Whether `a` is a link-local unicast address, `fe80::/10` (RFC 4291 §2.5.6).
#[inline]
pub const fn is_link_local(a: Ipv6Addr) -> bool {
    let o = a.octets();
    o[0] == 0xfe && o[1] & 0xc0 == 0x80
}

/// The scope of a multicast address (see [`scope`]), or `None` if `a` is not multicast
/// (`ff00::/8`, RFC 4291 §2.7).
#[inline]
pub const fn multicast_scope(a: Ipv6Addr) -> Option<u8> {
    let o = a.octets();
    if o[0] == 0xff {
        Some(o[1] & 0x0f)
    } else {
        None
    }
}

/// Solicited-node multicast address of `a`: `ff02::1:ff00:0/104` with the low 24 bits of `a`
/// (RFC 4291 §2.7.1).
#[inline]
pub const fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from_bits(SOLICITED_NODE_PREFIX | (a.to_bits() & 0xff_ffff))
}

/// `ff02::1:ff00:0`, the /104 prefix of solicited-node addresses.
const SOLICITED_NODE_PREFIX: u128 = 0xff02_0000_0000_0000_0000_0001_ff00_0000;

/// Whether `a` is a solicited-node multicast address, `ff02::1:ff00:0/104` (RFC 4291 §2.7.1).
#[inline]
pub const fn is_solicited_node(a: Ipv6Addr) -> bool {
    a.to_bits() >> 24 == SOLICITED_NODE_PREFIX >> 24
}

/// The Ethernet multicast address frames to the multicast address `a` go to: `33:33`
/// followed by the last four bytes of `a` (RFC 2464 §7). `None` if `a` is not multicast.
#[inline]
pub const fn multicast_mac(a: Ipv6Addr) -> Option<MacAddr> {
    let o = a.octets();
    if o[0] == 0xff {
        Some(MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]]))
    } else {
        None
    }
}

/// The modified EUI-64 interface identifier of a 48-bit MAC address: `ff:fe` inserted in the
/// middle and the universal/local bit inverted (RFC 4291 Appendix A, RFC 2464 §4).
#[inline]
pub const fn eui64_interface_id(mac: MacAddr) -> [u8; 8] {
    let m = mac.0;
    [m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
}

/// The link-local address formed from a MAC address: `fe80::/64` followed by its modified
/// EUI-64 interface identifier (RFC 2464 §5, RFC 4862 §5.3).
#[inline]
pub const fn link_local_from_mac(mac: MacAddr) -> Ipv6Addr {
    let id = eui64_interface_id(mac);
    Ipv6Addr::from_bits((0xfe80u128 << 112) | u64::from_be_bytes(id) as u128)
}

/// Packets Linux sent, captured with tshark on a veth pair between two network namespaces
/// (MACs 00:0c:29:0c:47:d5 for 2001:db8::1 and 02:00:5e:10:00:02 for 2001:db8::2, transmit
/// checksum offload off so that the kernel computed every checksum in software; tshark
/// reported each checksum correct). The Ethernet header is stripped.
#[cfg(test)]
pub(crate) mod captured {
    /// UDP 2001:db8::1 port 40000 -> 2001:db8::2 port 53, data "netbatch", flow label
    /// 0x92d0b, UDP checksum 0x603f.
    pub(crate) const UDP: [u8; 56] = [
        0x60, 0x09, 0x2d, 0x0b, 0x00, 0x10, 0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x9c, 0x40, 0x00, 0x35, 0x00,
        0x10, 0x60, 0x3f, 0x6e, 0x65, 0x74, 0x62, 0x61, 0x74, 0x63, 0x68,
    ];

    /// `ping -6 -s 12 -p 6162`: echo request ident 0x18ee seq 1, checksum 0xc2fe.
    pub(crate) const ECHO_REQUEST: [u8; 60] = [
        0x60, 0x04, 0x09, 0xc7, 0x00, 0x14, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x80, 0x00, 0xc2, 0xfe, 0x18,
        0xee, 0x00, 0x01, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62,
    ];

    /// The kernel's echo reply to [`ECHO_REQUEST`], checksum 0xc1fe.
    pub(crate) const ECHO_REPLY: [u8; 60] = [
        0x60, 0x00, 0x84, 0x66, 0x00, 0x14, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, 0xc1, 0xfe, 0x18,
        0xee, 0x00, 0x01, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62, 0x61, 0x62,
    ];

    /// Neighbour solicitation 2001:db8::1 -> ff02::1:ff00:2 (Ethernet 33:33:ff:00:00:02) for
    /// target 2001:db8::2, source link-layer option 00:0c:29:0c:47:d5, checksum 0xad3a.
    pub(crate) const NS: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x02, 0x87, 0x00, 0xad, 0x3a, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x01, 0x01, 0x00, 0x0c, 0x29, 0x0c, 0x47, 0xd5,
    ];

    /// The neighbour advertisement answering [`NS`]: solicited and override set, target
    /// link-layer option 02:00:5e:10:00:02, checksum 0x2c61.
    pub(crate) const NA: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0x00, 0x2c, 0x61, 0x60,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x02, 0x01, 0x02, 0x00, 0x5e, 0x10, 0x00, 0x02,
    ];

    /// Router solicitation from the kernel's EUI-64 link-local address of
    /// 02:00:5e:10:00:02, fe80::5eff:fe10:2 (universal/local bit inverted to 0), to ff02::2,
    /// with a source link-layer option; checksum 0xbf09.
    pub(crate) const RS: [u8; 56] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x10, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x5e, 0xff, 0xfe, 0x10, 0x00, 0x02, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x85, 0x00, 0xbf, 0x09, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x00, 0x5e, 0x10, 0x00, 0x02,
    ];
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::checksum;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const A1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const A2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    fn udp_repr() -> Ipv6Repr {
        Ipv6Repr {
            src: A1,
            dst: A2,
            next_header: Protocol::UDP,
            payload_len: 16,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0x92d0b,
        }
    }

    #[test]
    fn deconstruct_captured_udp() {
        let p = Ipv6Packet::new_checked(&captured::UDP[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.header_len(), 40);
        assert_eq!((p.traffic_class(), p.dscp(), p.ecn()), (0, 0, 0));
        assert_eq!(p.flow_label(), 0x92d0b);
        assert_eq!(p.payload_len(), 16);
        assert_eq!(p.next_header(), Protocol::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!((p.src(), p.dst()), (A1, A2));
        assert_eq!(p.payload(), &captured::UDP[40..]);
        assert_eq!(p.packet(), &captured::UDP[..]);
        assert_eq!(Ipv6Repr::parse(&p), Ok(udp_repr()));
    }

    #[test]
    fn construct_matches_capture() {
        let mut buf = [0xa5u8; 40];
        let repr = udp_repr();
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, captured::UDP[..40]);
        assert_eq!((repr.header_len(), repr.buffer_len()), (40, 56));
    }

    /// The UDP checksum Linux computed (0x603f) is what the RFC 8200 §8.1 pseudo-header sum
    /// gives over the captured datagram.
    #[test]
    fn pseudo_header_checksum_matches_linux() {
        let p = Ipv6Packet::new_checked(&captured::UDP[..]).unwrap();
        let mut udp = p.payload().to_vec();
        let len = udp.len() as u32;
        let acc = checksum::pseudo_header_v6(p.src(), p.dst(), Protocol::UDP.0, len);
        assert_eq!(checksum::fold(checksum::sum(&udp, acc)), 0xffff);
        udp[6..8].fill(0);
        assert_eq!(checksum::finish(checksum::sum(&udp, acc)), 0x603f);
        // The same datagram read as a UDP view agrees on the field.
        let view = crate::udp::UdpPacket::new_checked(&captured::UDP[40..]).unwrap();
        assert_eq!(view.checksum(), 0x603f);
    }

    #[test]
    fn payload_excludes_padding_and_clamps() {
        let mut buf = captured::UDP.to_vec();
        buf.extend_from_slice(&[0; 8]);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &captured::UDP[40..]);
        assert_eq!(Ipv6Repr::parse(&p), Ok(udp_repr()));
        // Payload length past the buffer: clamped; parse reports truncation.
        let p = Ipv6Packet::new_checked(&captured::UDP[..50]).unwrap();
        assert_eq!(p.payload(), &captured::UDP[40..50]);
        assert_eq!(Ipv6Repr::parse(&p), Err(Error::Truncated));
        // Payload length 0: empty payload, the rest is padding.
        let mut buf = captured::UDP;
        buf[4..6].fill(0);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert!(p.payload().is_empty());
        assert_eq!(Ipv6Repr::parse(&p).unwrap().payload_len, 0);
    }

    #[test]
    fn check_len_and_version() {
        for len in 0..40 {
            assert_eq!(
                Ipv6Packet::new_checked(&captured::UDP[..len]).unwrap_err(),
                Error::Truncated
            );
        }
        assert!(Ipv6Packet::new_checked(&captured::UDP[..40]).is_ok());
        for v in [0u8, 4, 7, 15] {
            let mut buf = captured::UDP;
            buf[0] = (v << 4) | (buf[0] & 0x0f);
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(Ipv6Repr::parse(&p), Err(Error::Malformed), "version {v}");
        }
    }

    #[test]
    fn setters_keep_neighbouring_bits() {
        let mut buf = [0u8; 48];
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_version(6);
        p.set_flow_label(0xfffff);
        p.set_traffic_class(0xb9); // DSCP 46 (EF), ECN 1
        assert_eq!(p.buffer[..4], [0x6b, 0x9f, 0xff, 0xff]);
        assert_eq!((p.dscp(), p.ecn(), p.flow_label()), (46, 1, 0xfffff));
        p.set_flow_label(0x0012_3456); // 21 bits: the top bit is dropped
        p.set_version(6);
        assert_eq!(p.buffer[..4], [0x6b, 0x92, 0x34, 0x56]);
        p.set_payload_len(8);
        p.set_next_header(Protocol::ICMPV6);
        p.set_hop_limit(255);
        p.set_src(A2);
        p.set_dst(ALL_NODES);
        p.payload_mut().copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((p.version(), p.traffic_class()), (6, 0xb9));
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (8, Protocol(58), 255)
        );
        assert_eq!((p.src(), p.dst()), (A2, "ff02::1".parse().unwrap()));
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    /// RFC 4291 §2.7.1 gives 4037::01:800:200E:8C6C -> FF02::1:FF0E:8C6C; the capture shows
    /// the kernel soliciting 2001:db8::2 at ff02::1:ff00:2, Ethernet 33:33:ff:00:00:02.
    #[test]
    fn solicited_node_and_multicast_mac() {
        let sn = |s: &str| solicited_node(s.parse().unwrap());
        let expect: Ipv6Addr = "ff02::1:ff0e:8c6c".parse().unwrap();
        assert_eq!(sn("4037::1:800:200e:8c6c"), expect);
        assert_eq!(sn("2001:db8::1:800:200e:8c6c"), expect);
        assert_eq!(
            sn("2001:db8::2"),
            "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap()
        );
        let ns = Ipv6Packet::new_checked(&captured::NS[..]).unwrap();
        assert_eq!(solicited_node(A2), ns.dst());
        assert_eq!(
            multicast_mac(ns.dst()),
            Some(MacAddr([0x33, 0x33, 0xff, 0x00, 0x00, 0x02]))
        );
        assert!(is_solicited_node(ns.dst()) && is_solicited_node(expect));
        assert!(!is_solicited_node(ALL_NODES) && !is_solicited_node(A2));
        assert!(!is_solicited_node("ff02::1:fe00:2".parse().unwrap()));
        // RFC 2464 §7: 33:33 and the last four bytes; all-nodes is 33:33:00:00:00:01.
        assert_eq!(
            multicast_mac(ALL_NODES),
            Some(MacAddr([0x33, 0x33, 0, 0, 0, 1]))
        );
        assert_eq!(
            multicast_mac("ff05::1:3".parse().unwrap()),
            Some(MacAddr([0x33, 0x33, 0, 1, 0, 3]))
        );
        assert_eq!(multicast_mac(A1), None);
    }

    /// Link-local addresses the kernel formed (`ip -6 addr` in the capture setup, and the
    /// router solicitation's source): fe80::20c:29ff:fe0c:47d5 from 00:0c:29:0c:47:d5 and
    /// fe80::5eff:fe10:2 from the locally administered 02:00:5e:10:00:02.
    #[test]
    fn link_local_from_mac_matches_linux() {
        let mac = MacAddr([0x00, 0x0c, 0x29, 0x0c, 0x47, 0xd5]);
        assert_eq!(
            eui64_interface_id(mac),
            [0x02, 0x0c, 0x29, 0xff, 0xfe, 0x0c, 0x47, 0xd5]
        );
        let ll = link_local_from_mac(mac);
        assert_eq!(ll, "fe80::20c:29ff:fe0c:47d5".parse::<Ipv6Addr>().unwrap());
        let rs = Ipv6Packet::new_checked(&captured::RS[..]).unwrap();
        let mac_b = MacAddr([0x02, 0x00, 0x5e, 0x10, 0x00, 0x02]);
        assert_eq!(link_local_from_mac(mac_b), rs.src());
        assert!(is_link_local(ll) && is_link_local(rs.src()));
    }

    #[test]
    fn address_classes() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        for s in ["fe80::1", "febf:ffff::1", "fe80::20c:29ff:fe0c:47d5"] {
            assert!(is_link_local(a(s)), "{s}");
        }
        for s in ["fec0::1", "fe7f::1", "ff02::1", "::1", "2001:db8::1"] {
            assert!(!is_link_local(a(s)), "{s}");
        }
        assert_eq!(multicast_scope(a("ff01::1")), Some(scope::INTERFACE_LOCAL));
        assert_eq!(multicast_scope(a("ff02::1")), Some(scope::LINK_LOCAL));
        assert_eq!(multicast_scope(a("ff05::1:3")), Some(scope::SITE_LOCAL));
        assert_eq!(
            multicast_scope(a("ff18::1")),
            Some(scope::ORGANIZATION_LOCAL)
        );
        assert_eq!(multicast_scope(a("ff3e::8000:1")), Some(scope::GLOBAL));
        assert_eq!(multicast_scope(a("fe80::1")), None);
        assert_eq!(ALL_ROUTERS, a("ff02::2"));
    }

    fn arb_repr() -> impl Strategy<Value = Ipv6Repr> {
        (
            any::<u128>(),
            any::<u128>(),
            any::<u8>(),
            0usize..=1500,
            any::<u8>(),
            any::<u8>(),
            0u32..=0xfffff,
        )
            .prop_map(
                |(s, d, nh, payload_len, hop_limit, tc, flow_label)| Ipv6Repr {
                    src: Ipv6Addr::from_bits(s),
                    dst: Ipv6Addr::from_bits(d),
                    next_header: Protocol(nh),
                    payload_len,
                    hop_limit,
                    traffic_class: tc,
                    flow_label,
                },
            )
    }

    /// Every getter on a checked view, and every setter on a copy.
    fn touch_all(bytes: &[u8]) {
        if let Ok(p) = Ipv6Packet::new_checked(bytes) {
            let _ = (
                p.version(),
                p.traffic_class(),
                p.dscp(),
                p.ecn(),
                p.flow_label(),
            );
            let _ = (
                p.payload_len(),
                p.next_header(),
                p.hop_limit(),
                p.src(),
                p.dst(),
            );
            let _ = (p.payload(), p.packet(), Ipv6Repr::parse(&p));
            let mut copy = bytes.to_vec();
            let mut m = Ipv6Packet::new_unchecked(&mut copy[..]);
            m.set_flow_label(7);
            m.set_traffic_class(1);
            m.set_version(6);
            let _ = m.payload_mut().len();
        }
    }

    #[test]
    fn every_truncation_of_captures_is_safe() {
        for pkt in [
            &captured::UDP[..],
            &captured::NS[..],
            &captured::ECHO_REPLY[..],
        ] {
            for len in 0..=pkt.len() {
                touch_all(&pkt[..len]);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn repr_roundtrip(repr in arb_repr(), junk in any::<u8>()) {
            let mut buf = vec![junk; repr.buffer_len()];
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.payload().len(), repr.payload_len);
            prop_assert_eq!(Ipv6Repr::parse(&p), Ok(repr));
        }

        #[test]
        fn getters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            touch_all(&bytes);
        }

        /// Headers etherparse builds read the same through our view, and ours parse the same
        /// in etherparse.
        #[test]
        fn agrees_with_etherparse(repr in arb_repr()) {
            let theirs = etherparse::Ipv6Header {
                traffic_class: repr.traffic_class,
                flow_label: etherparse::Ipv6FlowLabel::try_new(repr.flow_label).unwrap(),
                payload_length: repr.payload_len as u16,
                next_header: etherparse::IpNumber(repr.next_header.0),
                hop_limit: repr.hop_limit,
                source: repr.src.octets(),
                destination: repr.dst.octets(),
            };
            let mut buf: Vec<u8> = theirs.to_bytes().to_vec();
            buf.resize(repr.buffer_len(), 0);
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p), Ok(repr));
            let mut ours = [0u8; 40];
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut ours[..]));
            let (parsed, _) = etherparse::Ipv6Header::from_slice(&ours).unwrap();
            prop_assert_eq!(parsed, theirs);
        }
    }
}
