//! The dissector: the one parse of a packet's headers. Everything that needs to know
//! where a packet's L2, L3 and L4 headers are, what they are, or which flow the packet
//! belongs to reads what this module recorded (GRO, RPS, the hooks, L2 and L3 input, the
//! classifiers); nothing else finds the headers. Stages then read and write the fields
//! they own through the wire views at those offsets (`ip4-input` checks the IPv4 header,
//! `ip4-forward` rewrites it, GSO and fragmentation build new ones).
//!
//! A received frame is dissected once, by the first stage that needs it (GRO, RPS
//! steering, or L2 input), which records in the packet's metadata:
//! - `l2_len`: bytes of Ethernet header and VLAN tags (802.1Q, 802.1ad; at most two);
//! - `l3_type` ([`L3`]): what follows the tags, or why the link header is unusable;
//! - `l3` and, for an IP header whose fixed part is whole and sane (version, header
//!   length inside the frame), `l4` and `l4_type` (the IP protocol number); for IPv6,
//!   where the walk of its extension headers ([`ip6_walk`], bounded) ends: the upper-layer
//!   header and its next header value (for a later fragment, where its data starts and
//!   the protocol it continues, as for IPv4), told apart by [`L4`] (ICMPv6 included);
//! - flags: [`flag::VLAN`] and [`flag::QINQ`].
//!
//! What classifiers ask of a packet is read through this module, each a field at a known
//! place: the link header and outer tag ([`link`], [`outer_tag`], [`vids`]), the IP
//! header length ([`ihl`]), TOS or traffic class, TTL or hop limit, protocol, fragment
//! state and addresses of either family ([`ip_fields`]), its ports ([`ports`],
//! [`whole_ports`]), TCP control bits ([`tcp_flags`], [`tcp_control`]), ICMP and ICMPv6
//! type and code ([`icmp_type`], [`icmp6_type`], [`icmp_type_code`]), what a filter
//! matches ([`MatchKey`], [`MatchKey6`]), its flow ([`FlowKey`], [`FlowKey6`]) and flow
//! hash ([`flow_hash`]: RSS's Toeplitz over the IPv4 or IPv6 4-tuple).
//!
//! The record itself is small (it lives in the packet's 64-byte metadata, one cache
//! line, full): where the headers are and what they are. The fields above are read at
//! the recorded offsets when asked for, by these readers alone: a stage outside this
//! module and the wire views does not read a header field to learn what the dissector
//! knows (`scripts/lint`'s `dissector` gate fails when one does).
//!
//! The dissector does not validate: it locates. The input stages check what they own
//! (`ip4-input` the checksum, lengths and addresses, `ip6-input` the payload length, the
//! addresses and why a chain could not be walked) and give each failure its reason.
//! Packets this host originates are dissected from their L3 header ([`ip4_packet`],
//! [`ip6_packet`]). For IPv6 the dissector also records whether a Fragment header makes
//! the packet a fragment (`flag::FRAG6`, and `flag::FRAG6_LATER` past the first), as the
//! IPv4 header says it itself. [`tcp_flags`] and [`icmp_type`] read IPv4 packets only (the
//! classifier's keys); the flow, port and match readers read both families.
//!
//! Invariant: `Meta::l4` is 0 (not located) or at least 20 bytes (IPv4) or 40 bytes
//! (IPv6) past `Meta::l3`, and the IP header between them (extension headers included)
//! was whole in the frame when it was dissected.

use core::net::{Ipv4Addr, Ipv6Addr};

use netbatch_engine::{Meta, PktMut};
use netbatch_wire::bytes::get_u16;
use netbatch_wire::ethernet::{self, EtherType, EthernetFrame};
use netbatch_wire::icmpv4::{self, Icmpv4Packet, Icmpv4Type};
use netbatch_wire::icmpv6::{self, Icmpv6Packet, Icmpv6Type};
use netbatch_wire::ipv4::{Ipv4Packet, Protocol};
use netbatch_wire::ipv6::{Ipv6Packet, Protocol as Ip6Protocol};
use netbatch_wire::ipv6ext::{self, ExtError, UpperLayer};
use netbatch_wire::tcp::{self, TcpFlags, TcpPacket};
use netbatch_wire::toeplitz::Toeplitz;
use netbatch_wire::udp;
use netbatch_wire::vlan::{self, VlanHeader};

use crate::meta::flag;

/// Dissector flags (in `Meta::flags`).
const FLAGS: u32 = flag::VLAN | flag::QINQ | flag::FRAG6 | flag::FRAG6_LATER;

/// What the dissector found after the link header (`Meta::l3_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum L3 {
    /// Not dissected yet.
    Unparsed = 0,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// ARP.
    Arp,
    /// Another ethertype.
    Other,
    /// Shorter than an Ethernet header.
    L2Truncated,
    /// A VLAN tag cut short.
    VlanTruncated,
    /// More than two VLAN tags.
    VlanTooDeep,
}

impl L3 {
    /// The kind of what follows the link header, by its ethertype.
    #[inline(always)]
    pub fn of_ethertype(et: EtherType) -> Self {
        match et {
            EtherType::IPV4 => Self::Ipv4,
            EtherType::ARP => Self::Arp,
            EtherType::IPV6 => Self::Ipv6,
            _ => Self::Other,
        }
    }

    /// The kind recorded in `m`.
    #[inline(always)]
    pub fn of(m: &Meta) -> Self {
        match m.l3_type {
            1 => Self::Ipv4,
            2 => Self::Ipv6,
            3 => Self::Arp,
            4 => Self::Other,
            5 => Self::L2Truncated,
            6 => Self::VlanTruncated,
            7 => Self::VlanTooDeep,
            _ => Self::Unparsed,
        }
    }
}

/// The transport protocols the stack tells apart: the one place IP protocol numbers are
/// demultiplexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// ICMP for IPv4.
    Icmp,
    /// ICMPv6 (RFC 4443).
    Icmpv6,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
    /// UDP-Lite.
    UdpLite,
    /// Anything else.
    Other,
}

impl L4 {
    /// The kind of IP protocol number `proto`.
    #[inline(always)]
    pub const fn of(proto: u8) -> Self {
        match Protocol(proto) {
            Protocol::ICMP => Self::Icmp,
            Protocol::TCP => Self::Tcp,
            Protocol::UDP => Self::Udp,
            Protocol::SCTP => Self::Sctp,
            Protocol::UDPLITE => Self::UdpLite,
            _ if proto == Ip6Protocol::ICMPV6.0 => Self::Icmpv6,
            _ => Self::Other,
        }
    }

    /// Whether its header begins with source and destination ports (RFC 768, RFC 9293,
    /// RFC 9260, RFC 3828): what flow hashes and port matches read.
    #[inline(always)]
    pub const fn has_ports(self) -> bool {
        matches!(self, Self::Tcp | Self::Udp | Self::Sctp | Self::UdpLite)
    }

    /// Where the checksum field is in the header, for the protocols whose checksum the
    /// stack leaves partial for a device to complete (TCP, UDP).
    #[inline]
    pub const fn checksum_at(self) -> Option<usize> {
        match self {
            Self::Tcp => Some(tcp::CHECKSUM_AT),
            Self::Udp => Some(udp::CHECKSUM_AT),
            _ => None,
        }
    }
}

/// What [`parse`] found in one frame, with offsets from the frame's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dissected {
    /// See [`L3`].
    pub l3_type: L3,
    /// Bytes of Ethernet header and tags.
    pub l2_len: u8,
    /// Offset of the L3 header.
    pub l3: u16,
    /// Offset of the L4 header (0 when not located): for IPv6, past the extension headers.
    pub l4: u16,
    /// The IP protocol number (when `l4` is located): for IPv6, the next header value
    /// that names the upper layer.
    pub l4_type: u8,
    /// Dissector flag bits (see the module doc).
    pub flags: u32,
}

impl Dissected {
    const NOTHING: Self = Self {
        l3_type: L3::Unparsed,
        l2_len: 0,
        l3: 0,
        l4: 0,
        l4_type: 0,
        flags: 0,
    };

    /// Records this in `m`, whose packet starts at `m.data`.
    #[inline(always)]
    fn store(&self, m: &mut Meta) {
        m.l3_type = self.l3_type as u8;
        m.l2_len = self.l2_len;
        m.l3 = m.data + self.l3;
        m.l4 = if self.l4 == 0 { 0 } else { m.data + self.l4 };
        m.l4_type = self.l4_type;
        m.flags = (m.flags & !FLAGS) | self.flags;
    }

    /// What `m` records, with offsets from `m.data` (`l2_len` aside, so after L2 input
    /// pulled the link header `l3` is 0 and `d` starts at the IP header).
    #[inline(always)]
    pub fn load(m: &Meta) -> Self {
        Self {
            l3_type: L3::of(m),
            l2_len: m.l2_len,
            l3: m.l3.wrapping_sub(m.data),
            l4: if m.l4 == 0 {
                0
            } else {
                m.l4.wrapping_sub(m.data)
            },
            l4_type: m.l4_type,
            flags: m.flags & FLAGS,
        }
    }

    /// The L4 protocol kind, when the L4 header was located.
    #[inline(always)]
    pub fn l4_kind(&self) -> Option<L4> {
        (self.l4 != 0).then_some(L4::of(self.l4_type))
    }
}

/// Parses frame `d` (from its Ethernet header): link header, tags, and an IPv4 or IPv6
/// header (with its extension headers).
#[inline]
pub fn parse(d: &[u8]) -> Dissected {
    let mut r = Dissected::NOTHING;
    let Some(eth) = d.first_chunk::<{ ethernet::HEADER_LEN }>() else {
        r.l3_type = L3::L2Truncated;
        return r;
    };
    let mut et = EthernetFrame::new_unchecked(eth).ethertype();
    let mut off = ethernet::HEADER_LEN;
    let mut tags = 0;
    while et == EtherType::VLAN || et == EtherType::QINQ {
        if tags == 2 {
            r.l3_type = L3::VlanTooDeep;
            return r;
        }
        let Some(t) = d.get(off..).and_then(<[u8]>::first_chunk::<4>) else {
            r.l3_type = L3::VlanTruncated;
            return r;
        };
        et = VlanHeader::new_unchecked(t).ethertype();
        off += 4;
        tags += 1;
    }
    r.flags = match tags {
        0 => 0,
        1 => flag::VLAN,
        _ => flag::VLAN | flag::QINQ,
    };
    r.l2_len = off as u8;
    r.l3 = off as u16;
    r.l3_type = L3::of_ethertype(et);
    // `off` never passes the end: the loop above found every header it counted.
    let ip = d.get(off..).unwrap_or_default();
    match r.l3_type {
        L3::Ipv4 => ip4(ip, off, &mut r),
        L3::Ipv6 => ip6(ip, off, &mut r),
        _ => {}
    }
    r
}

/// Locates the L4 header of the IPv4 packet `ip`, which starts `at` bytes into the
/// dissected buffer.
#[inline(always)]
fn ip4(ip: &[u8], at: usize, r: &mut Dissected) {
    let Some(h) = ip.first_chunk::<20>() else {
        return;
    };
    let v = Ipv4Packet::new_unchecked(h);
    let ihl = v.header_len();
    if v.version() != 4 || ihl < 20 || ip.len() < ihl {
        return;
    }
    r.l4 = (at + ihl) as u16;
    r.l4_type = v.protocol().0;
}

/// Most extension headers [`ip6_walk`] crosses. RFC 8200 4.1 recommends each header at
/// most once (Destination Options twice): six in all before the upper layer; eight leaves
/// room for a sender's oddity while bounding the work per packet whatever the packet
/// says (RFC 8883 gives a node that drops on such a processing limit its ICMPv6 errors).
pub const IP6_EXT_MAX_HEADERS: usize = 8;

/// Most bytes of extension headers [`ip6_walk`] crosses: the upper-layer header is then
/// within 296 bytes of the IPv6 header (in the first buffer of any packet, where the
/// stages after input read it), and the bytes the walk may have to reach are bounded
/// too (without it, eight headers could claim 2 KiB each). Real chains are a few dozen
/// bytes.
pub const IP6_EXT_MAX_BYTES: usize = 256;

/// Walks the extension headers of the IPv6 packet `ip` (checked: 40 bytes) to its upper
/// layer, within [`IP6_EXT_MAX_HEADERS`] and [`IP6_EXT_MAX_BYTES`]: the one walk the
/// dissector and `ip6-input` share, so that what one locates the other accepts.
#[inline]
pub fn ip6_walk<T: AsRef<[u8]>>(ip: &Ipv6Packet<T>) -> Result<UpperLayer, ExtError> {
    ipv6ext::walk(ip, IP6_EXT_MAX_HEADERS, IP6_EXT_MAX_BYTES)
}

/// Locates the upper-layer header of the IPv6 packet `ip`, which starts `at` bytes into
/// the dissected buffer: not when the fixed header is cut, the version is not 6 or the
/// walk fails (`ip6-input` says why). Out of line: the IPv4 paths do not carry it.
#[inline(never)]
fn ip6(ip: &[u8], at: usize, r: &mut Dissected) {
    let Ok(v) = Ipv6Packet::new_checked(ip) else {
        return;
    };
    if v.version() != 6 {
        return;
    }
    if let Ok(up) = ip6_walk(&v) {
        r.l4 = (at + up.offset) as u16;
        r.l4_type = up.protocol.0;
        // An atomic fragment (offset 0, M clear: RFC 6946) is a whole packet.
        if let Some(f) = up.fragment.filter(|f| f.offset != 0 || f.more) {
            r.flags |= flag::FRAG6;
            if f.offset != 0 {
                r.flags |= flag::FRAG6_LATER;
            }
        }
    }
}

/// Whether next header value `nh` names an upper layer the walk stops at at once (no
/// extension header, nothing the walk refuses): what the IPv6 shortcut of [`frame_in`]
/// may take.
#[inline(always)]
const fn ip6_upper_at_once(nh: u8) -> bool {
    !matches!(nh, 0 | 43 | 44 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

/// Dissects the frame `v` starts with, unless it was dissected already.
#[inline(always)]
pub fn frame(v: &mut PktMut<'_>) {
    let (m, d) = v.split();
    frame_in(m, d);
}

/// Dissects frame `d`, whose metadata is `m`, unless it was dissected already (for a
/// stage that goes on reading `d`).
#[inline(always)]
pub fn frame_in(m: &mut Meta, d: &[u8]) {
    if m.l3_type != L3::Unparsed as u8 {
        return;
    }
    // The common case in one test: an untagged IPv4 frame without options.
    if let Some((eth, rest)) = d.split_first_chunk::<{ ethernet::HEADER_LEN }>()
        && let Some(ip) = rest.first_chunk::<20>().map(Ipv4Packet::new_unchecked)
        && EthernetFrame::new_unchecked(eth).ethertype() == EtherType::IPV4
        && ip.version() == 4
        && ip.ihl() == 5
    {
        m.l3_type = L3::Ipv4 as u8;
        m.l2_len = ethernet::HEADER_LEN as u8;
        m.l3 = m.data + ethernet::HEADER_LEN as u16;
        m.l4 = m.l3 + 20;
        m.l4_type = ip.protocol().0;
        return;
    }
    frame_slow(m, d);
}

/// [`frame_in`] for everything but the common case; first the common IPv6 case: an
/// untagged frame whose fixed header names its upper layer (no extension header).
#[inline(never)]
fn frame_slow(m: &mut Meta, d: &[u8]) {
    if let Some((eth, rest)) = d.split_first_chunk::<{ ethernet::HEADER_LEN }>()
        && let Some(ip) = rest.first_chunk::<40>()
        && EthernetFrame::new_unchecked(eth).ethertype() == EtherType::IPV6
        && ip[0] >> 4 == 6
        && ip6_upper_at_once(ip[6])
    {
        m.l3_type = L3::Ipv6 as u8;
        m.l2_len = ethernet::HEADER_LEN as u8;
        m.l3 = m.data + ethernet::HEADER_LEN as u16;
        m.l4 = m.l3 + 40;
        m.l4_type = ip[6];
        m.flags &= !FLAGS;
        return;
    }
    parse(d).store(m);
}

/// Dissects an IPv4 packet that starts at `v`'s data, without a link header (packets
/// this host originates, and packets rebuilt in place).
#[inline]
pub fn ip4_packet(v: &mut PktMut<'_>) {
    let mut r = Dissected {
        l3_type: L3::Ipv4,
        ..Dissected::NOTHING
    };
    ip4(v.data(), 0, &mut r);
    r.store(v.meta);
}

/// Dissects an IPv6 packet that starts at `v`'s data, without a link header (packets
/// this host originates, and packets that reach `ip6-input` undissected).
#[inline]
pub fn ip6_packet(v: &mut PktMut<'_>) {
    let mut r = Dissected {
        l3_type: L3::Ipv6,
        ..Dissected::NOTHING
    };
    ip6(v.data(), 0, &mut r);
    r.store(v.meta);
}

/// The IP header length of the packet whose metadata is `m`: from its L3 to its L4
/// header, as the dissector located them (for IPv6, the extension headers included);
/// `None` when the L4 header was not located (an unusable IP header).
#[inline(always)]
pub fn ihl(m: &Meta) -> Option<usize> {
    (m.l4 != 0).then(|| usize::from(m.l4.wrapping_sub(m.l3)))
}

/// A packet's flow: what RPS hashes and GRO and the classifiers tell flows apart by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol number.
    pub proto: u8,
    /// Source and destination ports, for a protocol with ports in a packet that is not
    /// a fragment: every fragment of a datagram is one flow, told by its addresses (the
    /// kernel's flow dissector without `FLOW_DISSECTOR_F_PARSE_1ST_FRAG`), so that all of
    /// them go the same way.
    pub ports: Option<(u16, u16)>,
}

impl FlowKey {
    /// The flow of an IPv4 packet dissected as `r`, in buffer `d` (which `r`'s offsets
    /// index); `None` for other packets or a cut IPv4 header.
    #[inline]
    pub fn of(r: &Dissected, d: &[u8]) -> Option<Self> {
        let ip = ip4_header(r, d)?;
        if ip.version() != 4 {
            return None;
        }
        let ports = if ip.is_fragment() {
            None
        } else {
            ports_in(&ip, r.l4, d)
        };
        Some(Self {
            src: ip.src(),
            dst: ip.dst(),
            proto: ip.protocol().0,
            ports,
        })
    }

    /// The Toeplitz hash of the flow, as a NIC's RSS computes it (the 4-tuple for TCP,
    /// UDP, SCTP and UDP-Lite, the address pair otherwise).
    #[inline]
    pub fn toeplitz(&self, t: &Toeplitz) -> u32 {
        t.ipv4(self.src.octets(), self.dst.octets(), self.ports)
    }
}

/// An IPv6 packet's flow (as [`FlowKey`] for IPv4): what RPS and multipath routing hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// The upper-layer protocol (the next header after the extension headers).
    pub proto: u8,
    /// Ports, for a protocol with ports in a packet that is not a fragment (every
    /// fragment of a datagram is one flow, told by its addresses).
    pub ports: Option<(u16, u16)>,
}

impl FlowKey6 {
    /// The flow of an IPv6 packet dissected as `r`, in buffer `d`; `None` for other
    /// packets or a cut header.
    #[inline]
    pub fn of(r: &Dissected, d: &[u8]) -> Option<Self> {
        let ip = ip6_header(r, d)?;
        let ports = if r.flags & flag::FRAG6 != 0 {
            None
        } else {
            ports6_in(r.l4_type, r.l4, r.flags, d)
        };
        Some(Self {
            src: ip.src(),
            dst: ip.dst(),
            proto: r.l4_type,
            ports,
        })
    }

    /// The Toeplitz hash of the flow, as a NIC's RSS computes it (RSS's IPv6 input:
    /// addresses, then the ports for TCP, UDP, SCTP and UDP-Lite).
    #[inline]
    pub fn toeplitz(&self, t: &Toeplitz) -> u32 {
        t.ipv6(self.src.octets(), self.dst.octets(), self.ports)
    }
}

/// The fixed IPv6 header of a packet dissected as `r` in `d`, when its upper layer was
/// located (so the header is whole and sane).
#[inline(always)]
fn ip6_header<'a>(r: &Dissected, d: &'a [u8]) -> Option<Ipv6Packet<&'a [u8; 40]>> {
    if r.l3_type != L3::Ipv6 || r.l4 == 0 {
        return None;
    }
    d.get(usize::from(r.l3)..)
        .and_then(<[u8]>::first_chunk::<40>)
        .map(Ipv6Packet::new_unchecked)
}

/// The ports of an IPv6 packet whose upper layer `proto` starts `l4` bytes into `d` (0:
/// not located), with dissector flags `flags`: none in a later fragment (whose `l4` is
/// where its data starts); a first fragment's are read.
#[inline(always)]
fn ports6_in(proto: u8, l4: u16, flags: u32, d: &[u8]) -> Option<(u16, u16)> {
    if l4 == 0 || !L4::of(proto).has_ports() || flags & flag::FRAG6_LATER != 0 {
        return None;
    }
    let p = d.get(usize::from(l4)..)?.first_chunk::<4>()?;
    Some((get_u16(p, 0), get_u16(p, 2)))
}

/// The fixed part of the IPv4 header of a packet dissected as `r` in `d`.
#[inline(always)]
fn ip4_header<'a>(r: &Dissected, d: &'a [u8]) -> Option<Ipv4Packet<&'a [u8; 20]>> {
    if r.l3_type != L3::Ipv4 {
        return None;
    }
    d.get(usize::from(r.l3)..)
        .and_then(<[u8]>::first_chunk::<20>)
        .map(Ipv4Packet::new_unchecked)
}

/// The source and destination ports of a packet dissected as `r` in `d`, when its
/// protocol has ports and the frame holds them (a first fragment's too: what a port
/// match of a filter reads; never a later fragment's). As the kernel's flow dissector,
/// this reads within the buffer, not the IP total length: `ip4-input` checks that, and
/// trims the packet to it before any filter reads the ports. IPv4 and IPv6.
#[inline]
pub fn ports(r: &Dissected, d: &[u8]) -> Option<(u16, u16)> {
    if r.l3_type == L3::Ipv6 {
        return ports6_in(r.l4_type, r.l4, r.flags, d);
    }
    ports_in(&ip4_header(r, d)?, r.l4, d)
}

/// [`ports`] for the packet whose IPv4 header `ip` was read already and whose L4 header
/// is `l4` bytes into `d` (0: not located).
#[inline(always)]
pub fn ports_in(ip: &Ipv4Packet<&[u8; 20]>, l4: u16, d: &[u8]) -> Option<(u16, u16)> {
    if l4 == 0 || !L4::of(ip.protocol().0).has_ports() || ip.frag_offset() != 0 {
        return None;
    }
    let p = d.get(usize::from(l4)..)?.first_chunk::<4>()?;
    Some((get_u16(p, 0), get_u16(p, 2)))
}

/// What IPv4 policy routing selects on besides the addresses, for the packet whose
/// header `ip` was read already (at the start of `d`, as in the stages after
/// `ip4-input`) and whose L4 header is `l4` bytes into `d`: its TOS byte, its protocol,
/// and, when `with_ports`, its ports ((0, 0) for a protocol without them and for a later
/// fragment, as Linux's flow dissector hands them to the rules). One read of each field
/// where the routing stage's loop has the header in hand.
#[inline(always)]
pub fn ip4_rule_fields(
    ip: &Ipv4Packet<&[u8; 20]>,
    l4: u16,
    d: &[u8],
    with_ports: bool,
) -> (u8, u8, (u16, u16)) {
    let ports = if with_ports {
        ports_in(ip, l4, d).unwrap_or((0, 0))
    } else {
        (0, 0)
    };
    (ip.dscp_ecn(), ip.protocol().0, ports)
}

/// The L4 header of a packet dissected as `r` in `d`, when it is of kind `kind`, located,
/// whole (`len` bytes in the buffer) and not in a later fragment (which has none).
#[inline]
fn l4_header<'a>(r: &Dissected, d: &'a [u8], kind: L4, len: usize) -> Option<&'a [u8]> {
    let ip = ip4_header(r, d)?;
    if r.l4_kind()? != kind || ip.frag_offset() != 0 {
        return None;
    }
    d.get(usize::from(r.l4)..)?.get(..len)
}

/// The control bits of a TCP segment dissected as `r` in `d` (RFC 9293 3.1), when its
/// header's fixed part is in the buffer.
#[inline]
pub fn tcp_flags(r: &Dissected, d: &[u8]) -> Option<TcpFlags> {
    let h = l4_header(r, d, L4::Tcp, tcp::HEADER_LEN)?;
    Some(TcpPacket::new_unchecked(h).flags())
}

/// The type and code of an ICMP message dissected as `r` in `d` (RFC 792), when its
/// header is in the buffer.
#[inline]
pub fn icmp_type(r: &Dissected, d: &[u8]) -> Option<(Icmpv4Type, u8)> {
    let h = l4_header(r, d, L4::Icmp, icmpv4::HEADER_LEN)?;
    let m = Icmpv4Packet::new_unchecked(h);
    Some((m.msg_type(), m.code()))
}

/// The addresses of an IP packet, either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addrs {
    /// IPv4 source and destination.
    V4(Ipv4Addr, Ipv4Addr),
    /// IPv6 source and destination (at `l3 + 8` and `l3 + 24`).
    V6(Ipv6Addr, Ipv6Addr),
}

/// What an IP header says beyond where its parts are, read at the place the dissector
/// recorded (`Meta::l3`): the fields the classifier's keys, the hooks and the trace read,
/// one reader for both families so that no stage reads them at offsets of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpFields {
    /// IPv4's TOS byte or IPv6's traffic class (DSCP and ECN, RFC 2474, RFC 3168).
    pub tos: u8,
    /// IPv4's TTL or IPv6's hop limit.
    pub ttl: u8,
    /// The upper-layer protocol (`Meta::l4_type`: for IPv6, after the extension headers).
    pub proto: u8,
    /// A fragment, first or later (IPv4: MF set or an offset, RFC 791; IPv6: a Fragment
    /// header that is not atomic, `flag::FRAG6`).
    pub fragment: bool,
    /// A later fragment: `Meta::l4` is where its data starts, no header.
    pub later: bool,
    /// The addresses.
    pub addrs: Addrs,
}

/// The IP fields of the packet dissected as `r` in `d`, when the dissector located its
/// upper layer (a sane header, whole in the buffer: see the module's invariant).
#[inline(always)]
pub fn ip_fields(r: &Dissected, d: &[u8]) -> Option<IpFields> {
    if r.l4 == 0 {
        return None;
    }
    match r.l3_type {
        L3::Ipv4 => {
            let ip = ip4_header(r, d)?;
            Some(IpFields {
                tos: ip.dscp_ecn(),
                ttl: ip.ttl(),
                proto: ip.protocol().0,
                fragment: ip.is_fragment(),
                later: ip.frag_offset() != 0,
                addrs: Addrs::V4(ip.src(), ip.dst()),
            })
        }
        L3::Ipv6 => ip6_fields(r, d),
        _ => None,
    }
}

/// The flow of an IPv4 packet that is not a fragment and whose protocol has ports (TCP,
/// UDP, UDP-Lite, SCTP): what connection tracking looks up, for the common case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow4 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// The protocol.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// [`Flow4`] of the packet whose metadata is `m` and data `d` (as [`Dissected::load`]
/// would give it), read from the metadata directly, without [`ip_fields`]' walk of either
/// family: connection tracking reads this per packet. `None` for anything else (IPv6, a
/// fragment, a protocol without ports, an upper layer not located).
#[inline(always)]
pub fn flow4_of(m: &Meta, d: &[u8]) -> Option<Flow4> {
    if m.l3_type != L3::Ipv4 as u8
        || m.l4 == 0
        || !matches!(
            L4::of(m.l4_type),
            L4::Tcp | L4::Udp | L4::UdpLite | L4::Sctp
        )
    {
        return None;
    }
    let ip = d
        .get(usize::from(m.l3.wrapping_sub(m.data))..)
        .and_then(<[u8]>::first_chunk::<20>)
        .map(Ipv4Packet::new_unchecked)?;
    if ip.is_fragment() {
        return None;
    }
    let p = d
        .get(usize::from(m.l4.wrapping_sub(m.data))..)?
        .first_chunk::<4>()?;
    Some(Flow4 {
        src: u32::from(ip.src()),
        dst: u32::from(ip.dst()),
        proto: m.l4_type,
        sport: get_u16(p, 0),
        dport: get_u16(p, 2),
    })
}

/// The traffic class and the fixed header's next header of an IPv6 packet dissected as
/// `r` in `d`, whether or not the dissector located its upper layer: what a stage reads
/// when [`ip_fields`] has none to give (a chain the dissector did not walk, which a router
/// forwards unexamined).
pub fn ip6_class_and_next(r: &Dissected, d: &[u8]) -> Option<(u8, u8)> {
    if r.l3_type != L3::Ipv6 {
        return None;
    }
    let h = d.get(usize::from(r.l3)..)?.first_chunk::<40>()?;
    let ip = Ipv6Packet::new_unchecked(h);
    Some((ip.traffic_class(), ip.next_header().0))
}

/// [`ip_fields`] of an IPv6 packet. Out of line: the IPv4 paths do not carry it.
#[inline(never)]
fn ip6_fields(r: &Dissected, d: &[u8]) -> Option<IpFields> {
    let ip = ip6_header(r, d)?;
    Some(IpFields {
        tos: ip.traffic_class(),
        ttl: ip.hop_limit(),
        proto: r.l4_type,
        fragment: r.flags & flag::FRAG6 != 0,
        later: r.flags & flag::FRAG6_LATER != 0,
        addrs: Addrs::V6(ip.src(), ip.dst()),
    })
}

/// The outer VLAN tag of frame `d` (from its Ethernet header) as a filter reads it: its
/// TPID (802.1Q or 802.1ad), TCI (priority, DEI, id) and the ethertype after it; `None`
/// when the frame is untagged or the tag is cut. Read whatever follows the tag (more
/// tags than the dissector crosses included), as the kernel's flow dissector reads the
/// outer tag.
#[inline(always)]
pub fn outer_tag(d: &[u8]) -> Option<(EtherType, u16, EtherType)> {
    let (eth, rest) = d.split_first_chunk::<{ ethernet::HEADER_LEN }>()?;
    let tpid = EthernetFrame::new_unchecked(eth).ethertype();
    if tpid != EtherType::VLAN && tpid != EtherType::QINQ {
        return None;
    }
    let t = VlanHeader::new_unchecked(rest.first_chunk::<{ vlan::HEADER_LEN }>()?);
    Some((tpid, t.tci(), t.ethertype()))
}

/// The destination and source MAC addresses and the outermost ethertype of frame `d`
/// (802.1Q or 802.1ad for a tagged frame), as 48- and 16-bit numbers; `None` for a frame
/// shorter than an Ethernet header.
#[inline(always)]
pub fn link(d: &[u8]) -> Option<(u64, u64, u16)> {
    let eth = d.first_chunk::<{ ethernet::HEADER_LEN }>()?;
    let mac = |b: &[u8]| b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x));
    Some((
        mac(&eth[..6]),
        mac(&eth[6..12]),
        EthernetFrame::new_unchecked(eth).ethertype().0,
    ))
}

/// The type and code of an ICMP or ICMPv6 message dissected as `r` in `d` (its first two
/// bytes, RFC 792, RFC 4443 2.1), either family, when they are in the buffer and the
/// packet is not a fragment: what flower's `icmp` keys read (the kernel's flow dissector
/// reads them for either protocol number, whatever the IP version).
#[inline]
pub fn icmp_type_code(r: &Dissected, d: &[u8], ip: &IpFields) -> Option<(u8, u8)> {
    if ip.fragment || !matches!(L4::of(ip.proto), L4::Icmp | L4::Icmpv6) {
        return None;
    }
    let h = d.get(usize::from(r.l4)..)?.first_chunk::<2>()?;
    Some((h[0], h[1]))
}

/// The 12 bits after a TCP header's data offset (the control bits and the 3 reserved
/// ones, RFC 9293 3.1), either family, when the fixed header is in the buffer, its data
/// offset is at least 5 and the packet is not a fragment: flower's `tcp_flags` key.
#[inline]
pub fn tcp_control(r: &Dissected, d: &[u8], ip: &IpFields) -> Option<u16> {
    if ip.fragment || L4::of(ip.proto) != L4::Tcp {
        return None;
    }
    let h = d
        .get(usize::from(r.l4)..)?
        .first_chunk::<{ tcp::HEADER_LEN }>()?;
    let word = get_u16(h, 12);
    (word >> 12 >= 5).then_some(word & 0x0fff)
}

/// The ports of a packet whose [`ip_fields`] are `ip`, dissected as `r` in `d`, when it
/// is not a fragment (flower reads no port of a first fragment either, unlike [`ports`]).
#[inline]
pub fn whole_ports(r: &Dissected, d: &[u8], ip: &IpFields) -> Option<(u16, u16)> {
    if ip.fragment || !L4::of(ip.proto).has_ports() {
        return None;
    }
    let p = d.get(usize::from(r.l4)..)?.first_chunk::<4>()?;
    Some((get_u16(p, 0), get_u16(p, 2)))
}

/// The type and code of an ICMPv6 message dissected as `r` in `d` (RFC 4443 2.1), when
/// its header is in the buffer and it is not in a later fragment.
#[inline]
pub fn icmp6_type(r: &Dissected, d: &[u8]) -> Option<(Icmpv6Type, u8)> {
    if r.l3_type != L3::Ipv6 || r.l4_kind()? != L4::Icmpv6 || r.flags & flag::FRAG6_LATER != 0 {
        return None;
    }
    let h = d.get(usize::from(r.l4)..)?.get(..icmpv6::HEADER_LEN)?;
    let m = Icmpv6Packet::new_unchecked(h);
    Some((m.msg_type(), m.code()))
}

/// What a filter matches: protocol, addresses and ports of an IPv4 packet, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchKey {
    /// IP protocol number.
    pub proto: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Ports (see [`ports`]).
    pub ports: Option<(u16, u16)>,
}

impl MatchKey {
    /// The key of a packet without an IPv4 header: protocol 0, unspecified addresses, no
    /// ports.
    pub const NONE: Self = Self {
        proto: 0,
        src: Ipv4Addr::UNSPECIFIED,
        dst: Ipv4Addr::UNSPECIFIED,
        ports: None,
    };

    /// The key of the packet whose metadata is `m` and data `d` ([`Self::NONE`] if it
    /// has no IPv4 header). Read from the metadata directly: a hook runs this per packet.
    #[inline(always)]
    pub fn of(m: &Meta, d: &[u8]) -> Self {
        let ip = match d
            .get(usize::from(m.l3.wrapping_sub(m.data))..)
            .and_then(<[u8]>::first_chunk::<20>)
        {
            Some(h) if m.l3_type == L3::Ipv4 as u8 => Ipv4Packet::new_unchecked(h),
            _ => return Self::NONE,
        };
        let l4 = if m.l4 == 0 {
            0
        } else {
            m.l4.wrapping_sub(m.data)
        };
        Self {
            proto: ip.protocol().0,
            src: ip.src(),
            dst: ip.dst(),
            ports: ports_in(&ip, l4, d),
        }
    }
}

/// What a filter matches of an IPv6 packet: the upper-layer protocol (after the
/// extension headers), addresses and ports, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchKey6 {
    /// The upper-layer protocol.
    pub proto: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Ports (a first fragment's too; never a later fragment's).
    pub ports: Option<(u16, u16)>,
}

impl MatchKey6 {
    /// The key of the IPv6 packet whose metadata is `m` and data `d`; `None` if it is not
    /// an IPv6 packet whose upper layer the dissector located.
    #[inline(always)]
    pub fn of(m: &Meta, d: &[u8]) -> Option<Self> {
        if m.l3_type != L3::Ipv6 as u8 || m.l4 == 0 {
            return None;
        }
        let ip = d
            .get(usize::from(m.l3.wrapping_sub(m.data))..)
            .and_then(<[u8]>::first_chunk::<40>)
            .map(Ipv6Packet::new_unchecked)?;
        let l4 = m.l4.wrapping_sub(m.data);
        Some(Self {
            proto: m.l4_type,
            src: ip.src(),
            dst: ip.dst(),
            ports: ports6_in(m.l4_type, l4, m.flags, d),
        })
    }
}

/// The VLAN ids of frame `d` (from its Ethernet header), whose dissector flags are
/// `flags` (`Meta::flags` or `Dissected::flags`): the outer tag's and, with two tags, the
/// inner one's (802.1ad S-tag, then 802.1Q C-tag).
#[inline]
pub fn vids(flags: u32, d: &[u8]) -> (Option<u16>, Option<u16>) {
    let vid = |at: usize| {
        d.get(at..)
            .and_then(<[u8]>::first_chunk::<{ vlan::HEADER_LEN }>)
            .map(|t| VlanHeader::new_unchecked(t).vid())
    };
    match (flags & flag::VLAN != 0, flags & flag::QINQ != 0) {
        (false, _) => (None, None),
        (true, false) => (vid(ethernet::HEADER_LEN), None),
        (true, true) => (
            vid(ethernet::HEADER_LEN),
            vid(ethernet::HEADER_LEN + vlan::HEADER_LEN),
        ),
    }
}

/// The flow hash of the packet `v` (dissecting it first if needed): the device's when it
/// gave one, else the Toeplitz hash of its flow; recorded in `Meta::hash`. 0 for
/// packets with no flow (not IP): those are not steered.
#[inline]
pub fn flow_hash(v: &mut PktMut<'_>, t: &Toeplitz) -> u32 {
    if v.meta.flags & flag::HASH_VALID != 0 {
        return v.meta.hash;
    }
    frame(v);
    let h = hash_of(&Dissected::load(v.meta), v.data(), t);
    if h != 0 {
        v.meta.hash = h;
        v.meta.flags |= flag::HASH_VALID;
    }
    h
}

/// The flow hash of frame `d` (see [`flow_hash`]), for tools and tests.
pub fn hash_frame(d: &[u8], t: &Toeplitz) -> u32 {
    hash_of(&parse(d), d, t)
}

/// The Toeplitz hash of the flow dissected as `r` in `d`; 0 when it has none (a hash of
/// 0 is folded to 1, as 0 means "no hash").
#[inline]
fn hash_of(r: &Dissected, d: &[u8], t: &Toeplitz) -> u32 {
    match r.l3_type {
        L3::Ipv6 => FlowKey6::of(r, d).map_or(0, |k| k.toeplitz(t).max(1)),
        _ => FlowKey::of(r, d).map_or(0, |k| k.toeplitz(t).max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet header with `tags` (TPID, VID) and the final ethertype.
    fn eth(tags: &[(u16, u16)], et: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for &(tpid, vid) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&vid.to_be_bytes());
        }
        f.extend_from_slice(&et.to_be_bytes());
        f
    }

    /// An IPv4 header (IHL `ihl` words, total length `total`, fragment word `frag`,
    /// protocol `proto`) from 192.0.2.1 to 198.51.100.7, then `payload`.
    fn ip(ihl: u8, total: u16, frag: u16, proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0x40 | ihl, 0];
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&[0, 1]);
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7]);
        h.resize(usize::from(ihl) * 4, 1); // options: NOPs
        h.extend_from_slice(payload);
        h
    }

    const PORTS: [u8; 8] = [0x13, 0x88, 0x00, 0x35, 0, 8, 0, 0]; // 5000 → 53

    /// An IPv6 header (RFC 8200 3: version 6, payload length `payload.len()`, next
    /// header `next`, hop limit 64) from 2001:db8::1 to 2001:db8::2, then `payload`.
    fn ip6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        h.extend_from_slice(&[next, 64]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        h.extend_from_slice(payload);
        h
    }

    /// An options header (hop-by-hop or destination options, RFC 8200 4.3, 4.6) of `len`
    /// bytes (a multiple of 8) naming `next`, its options area all Pad1.
    fn opts(next: u8, len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0] = next;
        h[1] = (len / 8 - 1) as u8;
        h
    }

    /// `n` destination options headers of `each` bytes, the last naming `upper`, then
    /// the UDP ports.
    fn dest_chain(n: usize, each: usize, upper: u8) -> Vec<u8> {
        let mut c = Vec::new();
        for i in 0..n {
            c.extend(opts(if i + 1 == n { upper } else { 60 }, each));
        }
        c.extend_from_slice(&PORTS);
        c
    }

    #[test]
    fn untagged_udp_is_located_with_its_ports() {
        let mut f = eth(&[], 0x0800);
        f.extend(ip(5, 28, 0, 17, &PORTS));
        let r = parse(&f);
        assert_eq!(
            r,
            Dissected {
                l3_type: L3::Ipv4,
                l2_len: 14,
                l3: 14,
                l4: 34,
                l4_type: 17,
                flags: 0,
            }
        );
        let k = FlowKey::of(&r, &f).unwrap();
        assert_eq!(
            (k.src, k.dst, k.proto, k.ports),
            (
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(198, 51, 100, 7),
                17,
                Some((5000, 53))
            )
        );
    }

    #[test]
    fn tags_options_and_fragments() {
        // 802.1ad + 802.1Q, IHL 6 (one option word), TCP.
        let mut f = eth(&[(0x88a8, 100), (0x8100, 200)], 0x0800);
        f.extend(ip(6, 32, 0, 6, &PORTS));
        let r = parse(&f);
        assert_eq!((r.l2_len, r.l3, r.l4), (22, 22, 46));
        assert_eq!(r.flags, flag::VLAN | flag::QINQ);
        assert_eq!(r.l4_kind(), Some(L4::Tcp));
        assert_eq!(ports(&r, &f), Some((5000, 53)));
        // A first fragment (MF, offset 0) has its ports, but its flow is told by its
        // addresses, as every fragment's; a later one has no ports at all.
        let mut first = eth(&[(0x8100, 7)], 0x0800);
        first.extend(ip(5, 28, 0x2000, 17, &PORTS));
        let r = parse(&first);
        assert_eq!(r.flags, flag::VLAN);
        assert_eq!(ports(&r, &first), Some((5000, 53)));
        assert_eq!(FlowKey::of(&r, &first).unwrap().ports, None);
        let mut later = eth(&[], 0x0800);
        later.extend(ip(5, 28, 0x0001, 17, &PORTS));
        let r = parse(&later);
        assert_eq!(FlowKey::of(&r, &later).unwrap().ports, None);
        assert_eq!(ports(&r, &later), None);
        // ICMP has no ports, but its type and code are located.
        let mut icmp = eth(&[], 0x0800);
        icmp.extend(ip(5, 28, 0, 1, &[8, 0, 0, 0, 0, 1, 0, 1]));
        let r = parse(&icmp);
        assert_eq!(r.l4_kind(), Some(L4::Icmp));
        assert_eq!(FlowKey::of(&r, &icmp).unwrap().ports, None);
        assert_eq!(icmp_type(&r, &icmp), Some((Icmpv4Type::ECHO_REQUEST, 0)));
        assert_eq!(tcp_flags(&r, &icmp), None, "not TCP");
        // TCP: the control bits of byte 13 (and the low bit of byte 12), SYN|ACK here.
        let mut seg = [0u8; 20];
        seg[..4].copy_from_slice(&PORTS[..4]);
        seg[12] = 0x50;
        seg[13] = 0x12;
        let mut syn_ack = eth(&[(0x8100, 9)], 0x0800);
        syn_ack.extend(ip(5, 40, 0, 6, &seg));
        let r = parse(&syn_ack);
        assert_eq!(tcp_flags(&r, &syn_ack), Some(TcpFlags(0x012)));
        assert_eq!(icmp_type(&r, &syn_ack), None, "not ICMP");
        assert_eq!(
            tcp_flags(&r, &syn_ack[..syn_ack.len() - 1]),
            None,
            "header cut"
        );
        // A later fragment has no L4 header to read.
        let mut later_icmp = eth(&[], 0x0800);
        later_icmp.extend(ip(5, 28, 0x0001, 1, &[8, 0, 0, 0, 0, 1, 0, 1]));
        assert_eq!(icmp_type(&parse(&later_icmp), &later_icmp), None);
    }

    #[test]
    fn what_cannot_be_located_is_said() {
        assert_eq!(parse(&[0u8; 13]).l3_type, L3::L2Truncated);
        let cut = eth(&[(0x8100, 1)], 0x0800);
        assert_eq!(parse(&cut[..16]).l3_type, L3::VlanTruncated);
        let deep = eth(&[(0x8100, 1), (0x8100, 2), (0x8100, 3)], 0x0800);
        assert_eq!(parse(&deep).l3_type, L3::VlanTooDeep);
        assert_eq!(parse(&eth(&[], 0x0806)).l3_type, L3::Arp);
        assert_eq!(parse(&eth(&[], 0x86dd)).l3_type, L3::Ipv6);
        assert_eq!(parse(&eth(&[], 0x88cc)).l3_type, L3::Other);
        // IPv4 that is not sane enough to find L4 in: recognised, L4 not located.
        for bad in [
            ip(5, 28, 0, 17, &PORTS)[..19].to_vec(), // cut fixed header
            ip(4, 28, 0, 17, &PORTS),                // IHL below 5
            ip(15, 80, 0, 17, &[]),                  // options past the frame
        ] {
            let mut f = eth(&[], 0x0800);
            f.extend(&bad);
            if bad.len() == 60 {
                f.truncate(14 + 40);
            }
            let r = parse(&f);
            assert_eq!((r.l3_type, r.l4, r.flags), (L3::Ipv4, 0, 0), "{bad:?}");
        }
        let mut v6 = eth(&[], 0x0800);
        let mut h = ip(5, 28, 0, 17, &PORTS);
        h[0] = 0x65;
        v6.extend(h);
        assert_eq!(parse(&v6).l4, 0, "version 6 in an IPv4 frame");
        // Ports cut by the frame are not ports.
        let mut short = eth(&[], 0x0800);
        short.extend(ip(5, 22, 0, 17, &PORTS));
        short.truncate(short.len() - PORTS.len() + 2);
        assert_eq!(ports(&parse(&short), &short), None);
        // The frame bounds the ports, not the total length (ip4-input checks that).
        let mut bogus = eth(&[], 0x0800);
        bogus.extend(ip(5, 3, 0, 17, &PORTS));
        assert_eq!(ports(&parse(&bogus), &bogus), Some((5000, 53)));
    }

    /// The common-case shortcut of [`frame`] records what [`parse`] finds, for valid
    /// frames (IPv4 and IPv6), every length cut of them, and each header byte from the
    /// ethertype on flipped by four bit patterns.
    #[test]
    fn the_shortcut_agrees_with_the_full_parse() {
        use netbatch_engine::{Pool, PoolConfig};
        let pool = Pool::new(PoolConfig {
            buffers: 8,
            cache_size: 4,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let mut frames = Vec::new();
        for (tags, ihl, total, frag, proto) in [
            (&[][..], 5, 28, 0, 17),
            (&[][..], 5, 24, 0, 6),
            (&[][..], 6, 32, 0, 17),
            (&[(0x8100, 5)][..], 5, 28, 0, 17),
            (&[][..], 5, 28, 0x2000, 17),
        ] {
            let mut f = eth(tags, 0x0800);
            f.extend(ip(ihl, total, frag, proto, &PORTS));
            frames.push(f);
        }
        // IPv6 (never the shortcut's), with and without extension headers, tagged or not.
        for (tags, next, payload) in [
            (&[][..], 17, PORTS.to_vec()),
            (
                &[][..],
                0,
                [&opts(60, 8)[..], &dest_chain(1, 8, 6)].concat(),
            ),
            (&[(0x8100, 5)][..], 60, dest_chain(2, 16, 17)),
        ] {
            let mut f = eth(tags, 0x86dd);
            f.extend(ip6(next, &payload));
            frames.push(f);
        }
        let mut cases = Vec::new();
        for f in &frames {
            for cut in 0..=f.len() {
                cases.push(f[..cut].to_vec());
            }
            for at in 12..f.len().min(64) {
                for x in [0x01u8, 0x08, 0x40, 0xff] {
                    let mut g = f.clone();
                    g[at] ^= x;
                    cases.push(g);
                }
            }
        }
        for f in cases {
            let mut p = c.alloc().unwrap();
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(128, &f));
            frame(&mut v);
            let r = parse(&f);
            assert_eq!(Dissected::load(v.meta), r, "{f:02x?}");
            c.free(p);
        }
    }

    #[test]
    fn the_ipv6_upper_layer_is_located_past_the_extension_headers() {
        // No extension header: UDP right after the 40-byte header.
        let mut f = eth(&[], 0x86dd);
        f.extend(ip6(17, &PORTS));
        assert_eq!(
            parse(&f),
            Dissected {
                l3_type: L3::Ipv6,
                l2_len: 14,
                l3: 14,
                l4: 54,
                l4_type: 17,
                flags: 0,
            }
        );
        // Tagged; hop-by-hop (8 bytes), destination options (16), a first fragment (M
        // set), then TCP: 32 bytes of extension headers.
        let mut chain = opts(60, 8);
        chain.extend(opts(44, 16));
        chain.extend([6, 0, 0, 1, 0, 0, 0, 7]);
        chain.extend_from_slice(&PORTS);
        let mut f = eth(&[(0x8100, 5)], 0x86dd);
        f.extend(ip6(0, &chain));
        let r = parse(&f);
        assert_eq!(
            (r.l3_type, r.l3, r.l4, r.l4_type, r.flags),
            (L3::Ipv6, 18, 18 + 40 + 32, 6, flag::VLAN | flag::FRAG6)
        );
        assert_eq!(r.l4_kind(), Some(L4::Tcp));
        // IPv4's readers find nothing; IPv6's flow is the addresses alone for a
        // fragment (every fragment one flow), while a filter reads a first fragment's
        // ports (as for IPv4).
        assert_eq!(FlowKey::of(&r, &f), None);
        let k = FlowKey6::of(&r, &f).expect("an IPv6 flow");
        assert_eq!((k.proto, k.ports), (6, None));
        assert_eq!(ports(&r, &f), Some((5000, 53)));
        assert_eq!(tcp_flags(&r, &f), None, "an IPv4 reader");
        let t = Toeplitz::new(&netbatch_wire::toeplitz::MS_KEY);
        assert_eq!(
            hash_frame(&f, &t),
            t.ipv6(k.src.octets(), k.dst.octets(), None).max(1)
        );
        // A later fragment (offset 1480): its data is not a header; L4 is where it
        // starts, with the protocol it continues (as a later IPv4 fragment's).
        let mut later = eth(&[], 0x86dd);
        later.extend(ip6(44, &[17, 0, 0x05, 0xc8, 0, 0, 0, 9, 1, 2, 3, 4]));
        let r = parse(&later);
        assert_eq!((r.l4, r.l4_type), (14 + 48, 17));
        // ICMPv6 is told apart; ESP and No Next Header end the walk where they start.
        for (next, kind) in [(58u8, L4::Icmpv6), (50, L4::Other), (59, L4::Other)] {
            let mut f = eth(&[], 0x86dd);
            f.extend(ip6(60, &[&opts(next, 8)[..], &PORTS].concat()));
            let r = parse(&f);
            assert_eq!((r.l4, r.l4_type, r.l4_kind()), (62, next, Some(kind)));
        }
        // A payload length past the frame does not stop the walk (ip6-input checks it);
        // link padding past the payload length is never walked into: the chain the
        // payload length ends is cut, whatever the bytes after it say.
        let mut long = eth(&[], 0x86dd);
        long.extend(ip6(17, &PORTS));
        long[18..20].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(parse(&long).l4, 54);
        let mut padded = eth(&[], 0x86dd);
        padded.extend(ip6(60, &opts(60, 8)));
        padded.extend(opts(17, 8));
        assert_eq!(parse(&padded).l4, 0);
        padded[18..20].copy_from_slice(&16u16.to_be_bytes());
        assert_eq!(
            parse(&padded).l4,
            14 + 56,
            "the same bytes inside the payload"
        );
    }

    /// The readers of the record: for each family the TOS or traffic class, TTL or hop
    /// limit, addresses and fragment state; L4 fields of whole packets only; the outer
    /// tag. Against hand-made bytes.
    #[test]
    fn the_ip_fields_of_both_families_are_read_at_the_recorded_places() {
        let mut f = eth(&[(0x88a8, 0xa064)], 0x0800);
        let mut h = ip(5, 28, 0, 17, &PORTS);
        h[1] = 0xb8; // DSCP 46, ECN 0
        h[8] = 7;
        f.extend(h);
        let r = parse(&f);
        let ip = ip_fields(&r, &f).expect("IPv4 fields");
        assert_eq!(
            (ip.tos, ip.ttl, ip.proto, ip.fragment, ip.later),
            (0xb8, 7, 17, false, false)
        );
        assert_eq!(
            ip.addrs,
            Addrs::V4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 7))
        );
        assert_eq!(whole_ports(&r, &f, &ip), Some((5000, 53)));
        assert_eq!(
            outer_tag(&f),
            Some((EtherType::QINQ, 0xa064, EtherType::IPV4))
        );
        assert_eq!(link(&f).map(|l| l.2), Some(0x88a8));
        // IPv6: traffic class 0xb8 spans bytes 0 and 1; hop limit 64; ICMPv6 echo request.
        let mut f = eth(&[], 0x86dd);
        let mut h = ip6(58, &[128, 0, 0, 0, 0, 1, 0, 1]);
        h[0] = 0x6b;
        h[1] = 0x80;
        f.extend(h);
        let r = parse(&f);
        let ip = ip_fields(&r, &f).expect("IPv6 fields");
        assert_eq!(
            (ip.tos, ip.ttl, ip.proto, ip.fragment),
            (0xb8, 64, 58, false)
        );
        let (a, b) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        assert_eq!(ip.addrs, Addrs::V6(a, b));
        assert_eq!(r.l4_kind(), Some(L4::Icmpv6));
        assert_eq!(icmp_type_code(&r, &f, &ip), Some((128, 0)));
        assert_eq!(icmp6_type(&r, &f), Some((Icmpv6Type(128), 0)));
        assert_eq!(icmp_type(&r, &f), None, "an IPv4 reader");
        assert_eq!(outer_tag(&f), None);
        // TCP over IPv6: the 12 bits after the data offset (reserved bits included).
        let mut seg = [0u8; 20];
        seg[..4].copy_from_slice(&PORTS[..4]);
        seg[12] = 0x5e;
        seg[13] = 0x12;
        let mut f = eth(&[(0x8100, 3)], 0x86dd);
        f.extend(ip6(6, &seg));
        let r = parse(&f);
        let ip = ip_fields(&r, &f).unwrap();
        assert_eq!(tcp_control(&r, &f, &ip), Some(0xe12));
        assert_eq!(whole_ports(&r, &f, &ip), Some((5000, 53)));
        f[18 + 40 + 12] = 0x4e;
        assert_eq!(tcp_control(&r, &f, &ip), None, "data offset 4");
        // A first IPv6 fragment: its ports are a filter's ([`ports`]) but not flower's.
        let mut chain = vec![17, 0, 0, 1, 0, 0, 0, 7];
        chain.extend_from_slice(&PORTS);
        let mut f = eth(&[], 0x86dd);
        f.extend(ip6(44, &chain));
        let r = parse(&f);
        let ip = ip_fields(&r, &f).unwrap();
        assert_eq!((ip.proto, ip.fragment, ip.later), (17, true, false));
        assert_eq!(ports(&r, &f), Some((5000, 53)));
        assert_eq!(whole_ports(&r, &f, &ip), None);
        // Not located: no fields.
        let mut f = eth(&[], 0x86dd);
        f.extend(ip6(60, &opts(253, 8)));
        assert_eq!(ip_fields(&parse(&f), &f), None);
    }

    /// What the walk cannot cross leaves L4 unset (and `ip6-input` says why); its bounds
    /// are exact.
    #[test]
    fn ipv6_the_walk_cannot_cross_is_not_located() {
        let located = |payload: &[u8], next: u8| {
            let mut f = eth(&[], 0x86dd);
            f.extend(ip6(next, payload));
            let r = parse(&f);
            assert_eq!(r.l3_type, L3::Ipv6);
            (r.l4 != 0).then(|| (r.l4 - 14, r.l4_type))
        };
        // Eight headers, 256 bytes: the most crossed.
        assert_eq!(located(&dest_chain(8, 8, 17), 60), Some((40 + 64, 17)));
        assert_eq!(located(&dest_chain(9, 8, 17), 60), None, "nine headers");
        assert_eq!(located(&dest_chain(1, 256, 17), 60), Some((296, 17)));
        assert_eq!(located(&dest_chain(2, 128, 17), 60), Some((296, 17)));
        assert_eq!(located(&dest_chain(1, 264, 17), 60), None, "264 bytes");
        assert_eq!(
            located(&dest_chain(3, 88, 17), 60),
            None,
            "264 bytes in three"
        );
        // Hop-by-hop after another header; an unrecognized extension header (253).
        assert_eq!(located(&[&opts(0, 8)[..], &opts(17, 8)].concat(), 60), None);
        assert_eq!(located(&[&opts(0, 8)[..], &opts(17, 8)].concat(), 0), None);
        assert_eq!(located(&opts(253, 8), 60), None);
        // A chain cut by the payload length, or by the frame.
        let mut cut = eth(&[], 0x86dd);
        cut.extend(ip6(60, &dest_chain(2, 8, 17)));
        cut[18..20].copy_from_slice(&12u16.to_be_bytes());
        assert_eq!(parse(&cut).l4, 0, "payload length");
        cut[18..20].copy_from_slice(&24u16.to_be_bytes());
        cut.truncate(14 + 40 + 12);
        assert_eq!(parse(&cut).l4, 0, "frame");
        // A cut fixed header, and version 4 in an IPv6 frame.
        let mut f = eth(&[], 0x86dd);
        f.extend(&ip6(17, &PORTS)[..39]);
        assert_eq!((parse(&f).l3_type, parse(&f).l4), (L3::Ipv6, 0));
        let mut f = eth(&[], 0x86dd);
        f.extend(ip6(17, &PORTS));
        f[14] = 0x40;
        assert_eq!(parse(&f).l4, 0);
    }

    /// A packet dissected from its IPv6 header records what the frame's parse records,
    /// moved by the link header.
    #[test]
    fn an_ipv6_packet_without_link_header() {
        use netbatch_engine::{Pool, PoolConfig};
        let pool = Pool::new(PoolConfig {
            buffers: 4,
            cache_size: 2,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut c = pool.cache();
        for (next, payload) in [(17, PORTS.to_vec()), (60, dest_chain(3, 16, 6))] {
            let ip = ip6(next, &payload);
            let mut f = eth(&[], 0x86dd);
            f.extend(&ip);
            let r = parse(&f);
            let mut p = c.alloc().unwrap();
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(128, &ip));
            ip6_packet(&mut v);
            let got = Dissected::load(v.meta);
            assert_eq!(
                (got.l3_type, got.l2_len, got.l3, got.l4, got.l4_type),
                (L3::Ipv6, 0, 0, r.l4 - 14, r.l4_type)
            );
            assert_eq!(ihl(v.meta), Some(usize::from(r.l4 - 14)));
            c.free(p);
        }
    }

    #[test]
    fn the_flow_hash_is_the_rss_hash() {
        // The Microsoft RSS verification suite's first IPv4 vector:
        // 66.9.149.187:2794 → 161.142.100.80:1766, TCP.
        let t = Toeplitz::new(&netbatch_wire::toeplitz::MS_KEY);
        let k = FlowKey {
            src: Ipv4Addr::new(66, 9, 149, 187),
            dst: Ipv4Addr::new(161, 142, 100, 80),
            proto: 6,
            ports: Some((2794, 1766)),
        };
        assert_eq!(k.toeplitz(&t), 0x51cc_c178);
        assert_eq!(
            FlowKey { ports: None, ..k }.toeplitz(&t),
            0x323e_8fc2,
            "addresses only"
        );
    }
}
