//! GRO: same-flow TCP and UDP segments received in one poll are coalesced into one
//! super-packet, carried through the stack once, and split again by GSO at transmit (or
//! before a socket that does not take super-datagrams). The rules are the Linux kernel's
//! (`dev_gro_receive`, `inet_gro_receive`, `ipv6_gro_receive`, `tcp_gro_receive`,
//! `udp_gro_receive_segment`), for IPv4 and IPv6.
//!
//! Table: 8 buckets × 8 flows, bucket by flow hash; a full bucket completes its oldest
//! flow. Same flow = same port, VLAN tag stack (up to two tags), Ethernet header, IP
//! version, addresses, protocol (IPv6: the upper layer's next header) and ports.
//! Everything held is completed at the end of every poll.
//!
//! A segment is a candidate when it is
//! - IPv4 without options (first byte 0x45), not a fragment, with a valid header
//!   checksum and a total length that fits the frame (Ethernet padding is ignored);
//! - IPv6, not a fragment, with a payload length that is exactly the rest of the frame
//!   (`ipv6_gro_receive`; a TCP or UDP frame over IPv6 is never short enough to be
//!   padded), and extension headers, if any, only of the kinds every segment can carry
//!   unchanged (`crate::gso::ip6_headers`: Hop-by-Hop, Destination Options, a Routing
//!   header with no segments left). The kernel walks a Routing header with segments
//!   left too; netbatch passes such a packet unmerged, as both pass Fragment and
//!   Authentication headers: never dropped, never reordered;
//!
//! with a valid L4 checksum (UDP: non-zero too, which over IPv6 it must be anyway). It
//! merges into its flow's held packet when
//! - IPv4: TTL, TOS and DF are equal and the IP ID increments (or, from the second
//!   segment on, stays fixed);
//! - IPv6: version and flow label are equal (`ipv6_gro_receive`: the kernel makes
//!   another flow of another flow label; netbatch completes the held packet instead, so
//!   that a connection whose label changes is never reordered), traffic class and hop
//!   limit are equal (`ipv6_gro_flush`), and the extension headers are byte for byte the
//!   first segment's (`ipv6_gro_receive`'s `memcmp`);
//!
//! and
//! - TCP: the flag word (data offset, flags but FIN/PSH, window) and ACK are equal, the
//!   options are byte-identical, the sequence number follows on, the payload is not
//!   empty and not larger than the first segment's; fraglist flows need all flags equal;
//!   a segment shorter than the first, or with URG/PSH/RST/SYN/FIN, ends the train;
//! - UDP: the datagram is not longer than the first (a shorter one ends the train);
//! - never past 64 segments (the kernel caps UDP and fraglist TCP so; its standard TCP
//!   is bounded by 64 KB alone, netbatch caps it too, bounding the buffers a flow holds)
//!   or a 65,535-byte IP packet (fraglist: the chain's packet plus the new member whole,
//!   headers included, as `skb_gro_receive_list` counts). IPv6 counts its fixed header
//!   in, as `skb_gro_receive` counts from the network header (the default
//!   `gro_max_size`; no jumbograms): a payload length of at most 65,495.
//!
//! When a segment cannot merge, its flow's held packet is completed first and the segment
//! is then handled as the first of its flow (held if it could start a train, else passed
//! on): a flow is never reordered (the kernel lets a segment with a bad checksum overtake
//! the held packet; netbatch completes the held packet first).
//!
//! Representation (no payload is copied): the held packet is the first segment's buffer;
//! every merged segment's buffer is chained behind it with its data pulled past its own
//! L2–L4 headers, which stay in the buffer (`Meta::l3`/`l4` say where; the head carries
//! `flag::GRO_CHAIN`). The head's headers describe the whole super-packet: IP (IPv4 total,
//! IPv6 payload) and UDP lengths grow; a *standard* TCP head takes the FIN/PSH of later
//! segments, and a standard head's L4 checksum becomes the partial one a TSO/USO device
//! completes (`flag::L4_CSUM_PARTIAL`, the kernel's `CHECKSUM_PARTIAL`: the pseudo-header
//! sum, IPv4's or IPv6's); a *fraglist* head keeps its own. Either way GSO gives every
//! member back its own headers with the head's changes copied in, and the head its own
//! lengths, flags and checksum (from its payload sum, recorded in `Meta::csum_payload`
//! when the train started). Merged segments' payloads are never read: with a
//! device-validated checksum (`rx-checksum`) no payload byte is.

pub mod stage;

use crate::meta::{flag, gso};
use netbatch_engine::{Pkt, Pool};
use netbatch_wire::bytes::{get_u16, get_u32};
use netbatch_wire::checksum;
use netbatch_wire::ethernet::{self, EthernetFrame};
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::ipv6::Ipv6Packet;
use netbatch_wire::tcp::{TcpFlags, TcpPacket};
use netbatch_wire::udp::{self, UdpPacket};

use crate::dissect::{self, Dissected, L3, L4};
use crate::ip4::header;

/// The most segments in one super-packet.
pub const MAX_SEGS: u16 = 64;
/// Buckets of the flow table.
pub const BUCKETS: usize = 8;
/// Flows per bucket.
pub const PER_BUCKET: usize = 8;

const TCP_FIN: u16 = TcpFlags::FIN.bits();
const TCP_SYN: u16 = TcpFlags::SYN.bits();
const TCP_RST: u16 = TcpFlags::RST.bits();
const TCP_PSH: u16 = TcpFlags::PSH.bits();
const TCP_URG: u16 = TcpFlags::URG.bits();
/// Flags that end a train (and keep a lone segment from starting one).
const TCP_FINAL: u16 = TCP_URG | TCP_PSH | TCP_RST | TCP_SYN | TCP_FIN;

/// Bytes of the fixed IPv6 header.
const IP6_HDR: u16 = 40;

/// Which GRO a flow gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Payloads merged; GSO rebuilds headers.
    Standard,
    /// Original packets chained; GSO restores them.
    Fraglist,
}

/// Flow identity: what must be equal for two segments to be the same flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowKey {
    port: u16,
    /// The VLAN tags: 0x8000 | VID of the outer in the high half, of the inner in the low
    /// half (0 where there is no tag).
    tags: u32,
    macs: [u8; 12],
    /// Addresses: an IPv4 address in the low 32 bits, an IPv6 address whole.
    src: u128,
    dst: u128,
    /// Source port << 16 | destination port.
    ports: u32,
    proto: u8,
    /// IPv6 (else IPv4).
    v6: bool,
}

impl FlowKey {
    /// Whether the flow is TCP (else UDP: GRO takes nothing else).
    #[inline(always)]
    fn tcp(&self) -> bool {
        L4::of(self.proto) == L4::Tcp
    }

    /// The destination's IPv4 address bits (meaningful for an IPv4 flow).
    #[inline(always)]
    pub(crate) fn dst4(&self) -> u32 {
        self.dst as u32
    }

    /// The destination port.
    #[inline(always)]
    pub(crate) fn dport(&self) -> u16 {
        self.ports as u16
    }

    /// The VLAN ids of the tags (outer, inner), as `dissect::vids` gives them.
    pub(crate) fn vids(&self) -> (Option<u16>, Option<u16>) {
        let vid = |t: u32| (t & 0x8000 != 0).then_some((t & 0x0fff) as u16);
        (vid(self.tags >> 16), vid(self.tags & 0xffff))
    }

    fn hash(&self) -> u32 {
        // An IPv6 address's 32-bit words folded into one.
        let fold =
            |a: u128| (a as u32) ^ ((a >> 32) as u32) ^ ((a >> 64) as u32) ^ ((a >> 96) as u32);
        let (s, d) = if self.v6 {
            (fold(self.src), fold(self.dst))
        } else {
            (self.src as u32, self.dst as u32)
        };
        let mut h = s.wrapping_mul(0x9e37_79b1);
        h ^= d.rotate_left(7).wrapping_mul(0x85eb_ca6b);
        h ^= self.ports.wrapping_mul(0xc2b2_ae35);
        h ^= u32::from(self.proto) << 24;
        h ^ (h >> 15)
    }
}

/// What GRO reads from a frame.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Parsed {
    /// Not IPv4/IPv6 TCP/UDP (or too short to say): not GRO's business.
    Other,
    /// A TCP/UDP packet of a known flow that cannot be merged (IPv4 options, a fragment,
    /// an extension header GRO does not take, a bad checksum…): its flow's held packet
    /// must be completed first.
    Unmergeable(FlowKey),
    /// A candidate segment.
    Seg(Seg),
}

/// A candidate segment, as offsets into its frame and the fields the rules compare.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    pub(crate) key: FlowKey,
    /// Offset of the IP header.
    l3: u16,
    /// Bytes of IP header: 20 for IPv4, 40 and the extension headers for IPv6.
    l3_len: u16,
    /// Bytes of L2 + L3 + L4 headers.
    hdr: u16,
    /// L4 header length.
    l4_hdr: u16,
    /// Payload bytes.
    payload: u16,
    /// TTL (IPv6: hop limit).
    ttl: u8,
    /// TOS (IPv6: traffic class).
    tos: u8,
    /// IPv4 flags and fragment offset word (DF and the reserved bit must match); 0 for
    /// IPv6.
    frag: u16,
    /// IPv4 identification; 0 for IPv6.
    id: u16,
    /// IPv6 flow label; 0 for IPv4.
    flow: u32,
    /// TCP urgent pointer (compared so that rebuilt segments are the originals).
    urg: u16,
    seq: u32,
    ack: u32,
    /// TCP bytes 12..16: data offset, flags, window.
    word12: u32,
    tcp_flags: u16,
    /// UDP length field.
    ulen: u16,
    /// Ones' complement sum of the payload when the checksum was verified here
    /// ([`NO_PSUM`] when the device verified it: derived from the header if needed).
    psum: u32,
}

impl Seg {
    /// The pseudo-header sum of the segment's flow for `l4_len` bytes of L4 header and
    /// payload (RFC 768, RFC 9293; RFC 8200 8.1).
    fn pseudo(&self, l4_len: u32) -> u64 {
        pseudo(&self.key, l4_len)
    }
}

/// The pseudo-header sum of a segment of flow `k` with `l4_len` bytes of L4 header and
/// payload.
#[inline(always)]
fn pseudo(k: &FlowKey, l4_len: u32) -> u64 {
    if k.v6 {
        checksum::pseudo_header_v6(k.src.into(), k.dst.into(), k.proto, l4_len)
    } else {
        let (s, d) = (k.src as u32, k.dst as u32);
        checksum::pseudo_header_v4(s.into(), d.into(), k.proto, l4_len as u16)
    }
}

/// `Seg::psum` not computed.
const NO_PSUM: u32 = u32::MAX;

/// The VLAN tags of frame `d`, dissected as `r`, as `FlowKey::tags`.
fn tags_of(r: &Dissected, d: &[u8]) -> u32 {
    let tag = |v: Option<u16>| v.map_or(0, |v| 0x8000 | u32::from(v));
    let (outer, inner) = dissect::vids(r.flags, d);
    (tag(outer) << 16) | tag(inner)
}

/// The Ethernet addresses of frame `d` (destination, source).
#[inline(always)]
fn macs_of(eth: &[u8; ethernet::HEADER_LEN]) -> [u8; 12] {
    let eth = EthernetFrame::new_unchecked(eth);
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&eth.dst().0);
    macs[6..].copy_from_slice(&eth.src().0);
    macs
}

/// Reads frame `d` (from its Ethernet header), received on `port` and dissected as `r`.
/// `csum_ok`: the device already validated the L4 checksum.
pub(crate) fn parse(r: &Dissected, d: &[u8], port: u16, csum_ok: bool) -> Parsed {
    if !matches!(r.l4_kind(), Some(L4::Tcp | L4::Udp)) {
        return Parsed::Other;
    }
    match r.l3_type {
        L3::Ipv4 => parse4(r, d, port, csum_ok),
        L3::Ipv6 => parse6(r, d, port, csum_ok),
        _ => Parsed::Other,
    }
}

/// [`parse`] for IPv4.
#[inline(always)]
fn parse4(r: &Dissected, d: &[u8], port: u16, csum_ok: bool) -> Parsed {
    let (l3, ihl) = (usize::from(r.l3), usize::from(r.l4 - r.l3));
    let (Some(eth), Some(h20)) = (
        d.first_chunk::<{ ethernet::HEADER_LEN }>(),
        d.get(l3..).and_then(<[u8]>::first_chunk::<20>),
    ) else {
        return Parsed::Other;
    };
    let ip = Ipv4Packet::new_unchecked(h20);
    let proto = r.l4_type;
    // Flows are told by their ports: only a packet whose ports can be read can match a
    // held flow (a later fragment cannot).
    let Some((sport, dport)) = dissect::ports_in(&ip, r.l4, d) else {
        return Parsed::Other;
    };
    let key = FlowKey {
        port,
        tags: tags_of(r, d),
        macs: macs_of(eth),
        src: u128::from(u32::from(ip.src())),
        dst: u128::from(u32::from(ip.dst())),
        ports: (u32::from(sport) << 16) | u32::from(dport),
        proto,
        v6: false,
    };
    // A first fragment, options, a length beyond the frame or a bad header checksum: no
    // GRO.
    let total = usize::from(ip.total_len());
    let avail = d.len() - l3;
    if ip.is_fragment() || ihl != 20 || total > avail || total < 20 {
        return Parsed::Unmergeable(key);
    }
    if !checksum::verify_words(h20) {
        return Parsed::Unmergeable(key);
    }
    let ipf = IpFields {
        l3: l3 as u16,
        l3_len: 20,
        ttl: ip.ttl(),
        tos: ip.dscp_ecn(),
        frag: get_u16(h20, 6),
        id: ip.ident(),
        flow: 0,
    };
    let Some(l4) = d.get(l3 + 20..l3 + total) else {
        return Parsed::Unmergeable(key);
    };
    l4_segment(key, ipf, l4, csum_ok)
}

/// [`parse`] for IPv6 (out of line: the IPv4 paths do not carry it).
#[inline(never)]
fn parse6(r: &Dissected, d: &[u8], port: u16, csum_ok: bool) -> Parsed {
    let (l3, l4) = (usize::from(r.l3), usize::from(r.l4));
    let (Some(eth), Some(h40)) = (
        d.first_chunk::<{ ethernet::HEADER_LEN }>(),
        d.get(l3..).and_then(<[u8]>::first_chunk::<40>),
    ) else {
        return Parsed::Other;
    };
    // A later fragment has no ports: its flow cannot be told (a first fragment's are read,
    // and it is not mergeable).
    let Some((sport, dport)) = dissect::ports(r, d) else {
        return Parsed::Other;
    };
    let ip = Ipv6Packet::new_unchecked(h40);
    let key = FlowKey {
        port,
        tags: tags_of(r, d),
        macs: macs_of(eth),
        src: u128::from(ip.src()),
        dst: u128::from(ip.dst()),
        ports: (u32::from(sport) << 16) | u32::from(dport),
        proto: r.l4_type,
        v6: true,
    };
    // `ipv6_gro_receive`: the payload length is the rest of the frame, exactly. Then the
    // extension headers: only those every segment can carry (a Fragment header, atomic or
    // not, is never merged, as in the kernel).
    let total = usize::from(IP6_HDR) + usize::from(ip.payload_len());
    if r.flags & flag::FRAG6 != 0 || total != d.len() - l3 || l4 < l3 + usize::from(IP6_HDR) {
        return Parsed::Unmergeable(key);
    }
    match d.get(l3..l4).and_then(crate::gso::ip6_headers) {
        Some((len, proto)) if len == l4 - l3 && proto == r.l4_type => {}
        _ => return Parsed::Unmergeable(key),
    }
    let ipf = IpFields {
        l3: l3 as u16,
        l3_len: (l4 - l3) as u16,
        ttl: ip.hop_limit(),
        tos: ip.traffic_class(),
        frag: 0,
        id: 0,
        flow: ip.flow_label(),
    };
    let Some(l4) = d.get(l4..l3 + total) else {
        return Parsed::Unmergeable(key);
    };
    l4_segment(key, ipf, l4, csum_ok)
}

/// The IP header fields of a candidate segment (see [`Seg`]).
#[derive(Debug, Clone, Copy)]
struct IpFields {
    l3: u16,
    l3_len: u16,
    ttl: u8,
    tos: u8,
    frag: u16,
    id: u16,
    flow: u32,
}

/// The candidate segment of flow `key` with IP fields `ipf` whose L4 header and payload
/// are `l4` (up to the IP length), or why it is not one; its checksum is verified here
/// unless `csum_ok` (the device did).
#[inline(always)]
fn l4_segment(key: FlowKey, ipf: IpFields, l4: &[u8], csum_ok: bool) -> Parsed {
    let (l4_hdr, seq, ack, word12, tcp_flags, urg, ulen) = if key.tcp() {
        let Ok(t) = TcpPacket::new_checked(l4) else {
            return Parsed::Unmergeable(key);
        };
        (
            t.header_len(),
            t.seq_number(),
            t.ack_number(),
            // Data offset, flags and window, compared as one word.
            get_u32(l4, 12),
            t.flags().bits(),
            t.urgent_pointer(),
            0,
        )
    } else {
        let Ok(u) = UdpPacket::new_checked(l4) else {
            return Parsed::Unmergeable(key);
        };
        // UDP GRO needs the length to match the IP payload, a payload, and a checksum
        // (`udp_gro_receive_segment`).
        if usize::from(u.len()) != l4.len() || l4.len() == udp::HEADER_LEN || u.checksum() == 0 {
            return Parsed::Unmergeable(key);
        }
        (udp::HEADER_LEN, 0, 0, 0, 0, 0, u.len())
    };
    let psum = if csum_ok {
        NO_PSUM
    } else {
        let Some((head, payload)) = l4.split_at_checked(l4_hdr) else {
            return Parsed::Unmergeable(key);
        };
        let hsum = checksum::sum(head, pseudo(&key, l4.len() as u32));
        let p = checksum::sum(payload, 0);
        if !checksum::verifies(hsum + p) {
            return Parsed::Unmergeable(key);
        }
        u32::from(checksum::fold(p))
    };
    Parsed::Seg(Seg {
        key,
        l3: ipf.l3,
        l3_len: ipf.l3_len,
        hdr: ipf.l3 + ipf.l3_len + l4_hdr as u16,
        l4_hdr: l4_hdr as u16,
        payload: (l4.len() - l4_hdr) as u16,
        ttl: ipf.ttl,
        tos: ipf.tos,
        frag: ipf.frag,
        id: ipf.id,
        flow: ipf.flow,
        urg,
        seq,
        ack,
        word12,
        tcp_flags,
        ulen,
        psum,
    })
}

/// IP ID behaviour of a train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdMode {
    /// One segment so far.
    Unknown,
    /// Increments by one per segment.
    Incrementing,
    /// Stays the same.
    Fixed,
}

/// A flow being coalesced.
#[derive(Debug)]
struct Held {
    key: FlowKey,
    kind: Kind,
    age: u64,
    head: Pkt,
    members: Vec<Pkt>,
    /// The first segment's headers, for comparisons.
    first: Seg,
    /// TCP options of the first segment.
    opts: [u8; 40],
    count: u16,
    payload: u32,
    next_seq: u32,
    id_mode: IdMode,
    /// FIN/PSH seen on merged segments (standard TCP: the head inherits them).
    flags_or: u16,
    /// The first segment's leading frame bytes, and which of them every later
    /// full-size segment repeats exactly (see [`GroTable::fast_run`]).
    fast: Fast,
}

/// A flow's fast-path template, by IP version (each version has its own fast path).
#[derive(Debug)]
enum Fast {
    /// The first segment's headers are longer than the template.
    None,
    /// An IPv4 flow's.
    V4(Template),
    /// An IPv6 flow's.
    V6(Template),
}

/// Bytes of frame compared by the fast path.
const TMPL: usize = 96;

/// What a full-size segment of a flow looks like, as words of the frame's first
/// [`TMPL`] bytes: everything but the IPv4 identification and checksum, the TCP sequence
/// number and the L4 checksum must equal the first segment's (an IPv6 header, extension
/// headers included, whole: its payload length is the first segment's too).
#[derive(Debug)]
struct Template {
    bytes: [u64; TMPL / 8],
    mask: [u64; TMPL / 8],
    /// The headers end past [`SHORT`] bytes: the last words are compared too.
    long: bool,
    /// The ones' complement sum of the first segment's IPv4 identification and header
    /// checksum (0 for IPv6), the only two header words a later segment may differ in.
    id_csum: u16,
}

/// Bytes of frame compared when the headers end within them (an untagged frame's
/// Ethernet, option-less IPv4 and TCP headers do, as do an IPv6 header and UDP).
const SHORT: usize = 64;

impl Template {
    /// The template of first segment `s` in frame `d`, if its headers fit.
    fn of(d: &[u8], s: &Seg) -> Fast {
        match Self::new(d, s) {
            Some(t) if s.key.v6 => Fast::V6(t),
            Some(t) => Fast::V4(t),
            None => Fast::None,
        }
    }

    fn new(d: &[u8], s: &Seg) -> Option<Self> {
        let hdr = usize::from(s.hdr);
        if hdr > TMPL || d.len() < TMPL {
            return None;
        }
        let frame = d.first_chunk::<TMPL>()?;
        let mut m = [0u8; TMPL];
        let (ip, l4) = (usize::from(s.l3), usize::from(s.hdr - s.l4_hdr));
        m.get_mut(..hdr)?.fill(0xff);
        // The fields every segment has its own of are left out (inside the headers, so
        // inside `m`: a field that were not would stay compared, never wrongly skipped).
        let mut skip = |at: usize, len: usize| {
            if let Some(f) = m.get_mut(at..at + len) {
                f.fill(0);
            }
        };
        let v6 = s.key.v6;
        if !v6 {
            // IPv4 identification and header checksum.
            skip(ip + 4, 2);
            skip(ip + 10, 2);
        }
        if s.key.tcp() {
            skip(l4 + 4, 4); // sequence number
            skip(l4 + 16, 2); // checksum
        } else {
            skip(l4 + 6, 2); // checksum
        }
        let mut t = Self {
            bytes: [0; TMPL / 8],
            mask: [0; TMPL / 8],
            long: hdr > SHORT,
            id_csum: if v6 {
                0
            } else {
                let h = header(d.get(ip..)?)?;
                checksum::sum16(h.ident(), h.checksum())
            },
        };
        let words = m.as_chunks::<8>().0.iter().zip(frame.as_chunks::<8>().0);
        for ((mask, bytes), (m, b)) in t.mask.iter_mut().zip(&mut t.bytes).zip(words) {
            *mask = u64::from_ne_bytes(*m);
            *bytes = u64::from_ne_bytes(*b) & *mask;
        }
        Some(t)
    }

    /// Whether frame `d` (at least [`TMPL`] bytes) matches.
    #[inline(always)]
    fn matches(&self, d: &[u8; TMPL]) -> bool {
        // Fixed numbers of words (the mask is zero past the headers): the loops unroll
        // and vectorise; the words past [`SHORT`] only when the headers reach them.
        let diff = |from: usize, to: usize| {
            let words = d.as_chunks::<8>().0.iter().zip(&self.bytes).zip(&self.mask);
            words
                .take(to / 8)
                .skip(from / 8)
                .fold(0u64, |diff, ((a, &b), &m)| {
                    diff | ((u64::from_ne_bytes(*a) ^ b) & m)
                })
        };
        diff(0, SHORT) == 0 && (!self.long || diff(SHORT, TMPL) == 0)
    }
}

/// Whether a segment of `payload` bytes behind `hdr` bytes of IP and L4 header fits in
/// `h` under the 64 KB limit. Standard: the super-packet stays one IP packet of at most
/// 65,535 bytes, an IPv6 one's fixed header included (`skb_gro_receive`: the held
/// packet's length from its network header plus the new payload below 65,536).
/// Fraglist: the held packet (its headers and every payload so far) plus the new member
/// *whole*, headers included, stays below 65,536 (`skb_gro_receive_list` compares
/// `p->len + skb->len` before pulling the member's headers), so a chain holds one header
/// fewer than a standard super-packet of the same segments.
/// `ip_len`: the flow's IP header bytes (its first segment's).
#[inline(always)]
fn fits(h: &Held, ip_len: u16, payload: u16, hdr: u16) -> bool {
    let member_hdr = if h.kind == Kind::Fraglist { hdr } else { 0 };
    u32::from(h.first.l4_hdr)
        + u32::from(ip_len)
        + h.payload
        + u32::from(payload)
        + u32::from(member_hdr)
        <= 65535
}

/// Whether `s` (whose TCP options are `opts`) may join `h`; if not, the held packet
/// must be completed.
fn may_merge(h: &Held, s: &Seg, opts: &[u8]) -> bool {
    let f = &h.first;
    // IPv4: TTL, TOS, DF (`inet_gro_flush`); IPv6: hop limit, traffic class
    // (`ipv6_gro_flush`), flow label and the extension headers' length (the caller
    // compares their bytes).
    if s.ttl != f.ttl
        || s.tos != f.tos
        || s.frag != f.frag
        || s.flow != f.flow
        || s.l3_len != f.l3_len
    {
        return false;
    }
    let id_ok = match h.id_mode {
        IdMode::Unknown => s.id == f.id || s.id == f.id.wrapping_add(1),
        IdMode::Incrementing => s.id == f.id.wrapping_add(h.count),
        IdMode::Fixed => s.id == f.id,
    };
    if !id_ok || h.count >= MAX_SEGS || !fits(h, f.l3_len, s.payload, s.l3_len + s.l4_hdr) {
        return false;
    }
    if !f.key.tcp() {
        return s.ulen <= f.ulen;
    }
    // TCP: flag word equal except FIN/PSH (fraglist: all of it), same ACK, same options,
    // in sequence, not empty, not larger than the first segment.
    let mask: u32 = if h.kind == Kind::Fraglist {
        !0
    } else {
        !(u32::from(TCP_FIN | TCP_PSH) << 16)
    };
    (s.word12 ^ f.word12) & mask == 0
        && s.ack == f.ack
        && s.urg == f.urg
        && s.l4_hdr == f.l4_hdr
        && h.opts.get(..usize::from(f.l4_hdr) - 20) == Some(opts)
        && s.seq == h.next_seq
        && s.payload > 0
        && s.payload <= f.payload
}

/// The TCP options of segment `s` in its frame `d` (empty for UDP).
fn tcp_options<'a>(d: &'a [u8], s: &Seg) -> &'a [u8] {
    if s.key.tcp() {
        // Inside the frame: `parse` read the TCP header whole.
        d.get(usize::from(s.hdr - s.l4_hdr + 20)..usize::from(s.hdr))
            .unwrap_or_default()
    } else {
        &[]
    }
}

/// The IPv6 extension headers of segment `s` in its frame `d` (empty for IPv4, and for
/// IPv6 without any).
fn ext_headers<'a>(d: &'a [u8], s: &Seg) -> &'a [u8] {
    if s.l3_len > IP6_HDR {
        // Inside the frame: `parse` walked them.
        d.get(usize::from(s.l3 + IP6_HDR)..usize::from(s.l3 + s.l3_len))
            .unwrap_or_default()
    } else {
        &[]
    }
}

/// Whether a segment can start a train.
fn holdable(s: &Seg) -> bool {
    s.payload > 0 && (!s.key.tcp() || s.tcp_flags & TCP_FINAL == 0)
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroStats {
    /// Segments merged into a held packet.
    pub merged: u64,
    /// Of those, merged by the fast path (a full-size segment of the last train).
    pub merged_fast: u64,
    /// Super-packets completed (two segments or more).
    pub coalesced: u64,
    /// Held single segments completed as plain packets.
    pub singles: u64,
    /// Flows completed early to make room in a full bucket.
    pub evicted: u64,
    /// Candidates that went on unchanged (not holdable, or GRO off for them).
    pub passed: u64,
    /// The most flows ever held at once (never above `BUCKETS × PER_BUCKET`).
    pub peak_flows: u64,
}

/// The flow table of one worker.
#[derive(Debug, Default)]
pub struct GroTable {
    buckets: [Vec<Held>; BUCKETS],
    flushing: Vec<Held>,
    spare: Vec<Vec<Pkt>>,
    age: u64,
    held_wire: u64,
    flows: u64,
    /// The flow that took the last segment (bucket, index), for the fast path.
    last: Option<(usize, usize)>,
    /// Counters.
    pub stats: GroStats,
}

/// Bucket `b` of `buckets` (`b` is a flow hash's low bits, masked again here).
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "masked by BUCKETS - 1, BUCKETS a power of two: below BUCKETS"
)]
fn bucket(buckets: &mut [Vec<Held>; BUCKETS], b: usize) -> &mut Vec<Held> {
    &mut buckets[b & (BUCKETS - 1)]
}

impl GroTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wire packets held.
    pub fn held(&self) -> u64 {
        self.held_wire
    }

    /// Removes the flow at (`b`, `i`) from the table.
    fn take(&mut self, b: usize, i: usize) -> Held {
        if self.last.is_some_and(|(lb, _)| lb == b) {
            self.last = None;
        }
        bucket(&mut self.buckets, b).remove(i)
    }

    /// [`Self::fast_run`] for IPv6 flows, tried when IPv4's fails: out of line, so the
    /// IPv4 fast path stays what it was.
    #[inline(never)]
    pub(crate) fn fast_run6(
        &mut self,
        pool: &Pool,
        p: Pkt,
        rest: &mut impl Iterator<Item = Pkt>,
        done: &mut Vec<Pkt>,
    ) -> Result<Option<Pkt>, Pkt> {
        self.fast_run::<true>(pool, p, rest, done)
    }

    /// The fast path for the common case, the next full-size segments of the flow that
    /// took the previous one, over a run of a list: `p`, then the packets of `rest`
    /// behind it, for as long as each is the next full-size segment of the last train
    /// (of IP version `V6`: each flow's template is of its version, [`Fast`]), from the
    /// train's port and with its L4 checksum verified by the device. A segment is taken
    /// when its leading bytes match the flow's template and its IP identification,
    /// header checksum and TCP sequence number are the expected ones, which is exactly
    /// when the full rules would merge it (and not end the train). The train's state is
    /// read once per run, not once per packet. `Err(p)`: `p` did not take the fast path
    /// (nothing changed). `Ok(next)`: `p` was merged, and so was everything taken from
    /// `rest` before `next`, which still needs the whole treatment (`None`: `rest` is
    /// empty). A train completed on reaching [`MAX_SEGS`] is in `done`, before `next`.
    #[inline(always)]
    pub(crate) fn fast_run<const V6: bool>(
        &mut self,
        pool: &Pool,
        p: Pkt,
        rest: &mut impl Iterator<Item = Pkt>,
        done: &mut Vec<Pkt>,
    ) -> Result<Option<Pkt>, Pkt> {
        let Some((b, i)) = self.last else {
            return Err(p);
        };
        let Some(h) = self.buckets.get_mut(b).and_then(|bk| bk.get_mut(i)) else {
            return Err(p);
        };
        let t = match (&h.fast, V6) {
            (Fast::V4(t), false) | (Fast::V6(t), true) => t,
            _ => return Err(p),
        };
        // Hoisted for the run: what every segment is compared with.
        let f = &h.first;
        let port = f.key.port;
        let tcp = f.key.tcp();
        let (l3, l4) = (usize::from(f.l3), usize::from(f.hdr - f.l4_hdr));
        // The template covers the headers (`Template::new`), so the fields read below
        // lie inside the compared bytes.
        if l3 + 12 > TMPL || l4 + 8 > TMPL {
            return Err(p);
        }
        // IP header bytes: 20 for IPv4 (only option-less headers are candidates), the
        // first segment's for IPv6. How many more segments the train can take, counted
        // once for the run: up to [`MAX_SEGS`], and what fits under the 64 KB limit
        // ([`fits`]; every segment the run takes carries the first one's payload).
        let ip_len = f.l3_len;
        let member_hdr = if h.kind == Kind::Fraglist {
            u32::from(ip_len + f.l4_hdr)
        } else {
            0
        };
        let limit = 65535u32.saturating_sub(u32::from(f.l4_hdr) + u32::from(ip_len) + member_hdr);
        let (first_id, id_csum, hdr, payload) = (f.id, t.id_csum, f.hdr, f.payload);
        let fit = limit.saturating_sub(h.payload) / u32::from(payload.max(1));
        let take = u32::from(MAX_SEGS.saturating_sub(h.count)).min(fit);
        if take == 0 {
            return Err(p);
        }
        let frame_len = hdr + payload;
        // The identification the next segment must carry, and its step per segment: a
        // train of one segment may go on either way (`unknown`: `want` or `want + 1`),
        // the segment that follows decides.
        let mut unknown = h.id_mode == IdMode::Unknown;
        let mut step = u16::from(h.id_mode == IdMode::Incrementing);
        let mut want = first_id.wrapping_add(step.wrapping_mul(h.count));
        let mut next_seq = h.next_seq;
        // Out of the table for the run, so that its length stays in a register.
        let mut members = core::mem::take(&mut h.members);
        let mut n = 0u32;
        let mut p = p;
        let next = loop {
            let mut v = pool.get_mut(&mut p);
            // IPv4: the frame holds the IP length (padding past it is cut); IPv6: the
            // payload length (the template's) is the rest of the frame, exactly.
            let len_ok = if V6 {
                v.meta.len == frame_len
            } else {
                v.meta.len >= frame_len
            };
            if v.meta.in_port != port || v.meta.flags & flag::L4_CSUM_OK == 0 || !len_ok {
                break Some(p);
            }
            let Some(d) = v.data().first_chunk::<TMPL>() else {
                break Some(p);
            };
            if !t.matches(d) {
                break Some(p);
            }
            // Everything but the identification, checksum and sequence number is the
            // first segment's; the identification must be the next one (or the same,
            // fixed), and the header checksum valid: as the other words are the first
            // segment's, the header sums to all ones (RFC 791, RFC 1071) exactly when
            // identification + checksum sums to what the first segment's did (a sum of
            // the other zero, 0 for 0xffff, goes the slow way, which verifies the
            // header whole). An IPv6 header has neither: the template compared all of
            // it.
            let id = get_u16(d, l3 + 4);
            let ip_ok = V6
                || ((id == want || (unknown && id == want.wrapping_add(1)))
                    && checksum::sum16(id, get_u16(d, l3 + 10)) == id_csum);
            // TCP: the next sequence number. UDP: a checksum (the template leaves the
            // field out, and a device may report a datagram without one as verified;
            // UDP GRO needs one, as `parse` says).
            let l4_ok = if tcp {
                get_u32(d, l4 + 4) == next_seq
            } else {
                get_u16(d, l4 + 6) != 0
            };
            if !(ip_ok && l4_ok) {
                break Some(p);
            }
            if !V6 {
                if unknown {
                    step = id.wrapping_sub(first_id);
                    unknown = false;
                }
                want = id.wrapping_add(step);
            }
            next_seq = next_seq.wrapping_add(u32::from(payload));
            v.meta.l3 = v.meta.data + f.l3;
            v.meta.l4 = v.meta.l3 + ip_len;
            let kept = v.narrow(usize::from(hdr), usize::from(payload));
            debug_assert!(kept, "the length was checked");
            members.push(p);
            n += 1;
            match rest.next() {
                Some(q) if n < take => p = q,
                other => break other,
            }
        };
        h.members = members;
        if n == 0
            && let Some(p) = next
        {
            // Only `p` was looked at, and nothing changed.
            return Err(p);
        }
        // A train of one went on: its segments say how its identification moves (an
        // IPv6 train's stays "fixed": it has none).
        if h.id_mode == IdMode::Unknown {
            h.id_mode = if step == 0 {
                IdMode::Fixed
            } else {
                IdMode::Incrementing
            };
        }
        let merged = n as u16;
        h.count += merged;
        h.payload += n * u32::from(payload);
        h.next_seq = next_seq;
        let merged = u64::from(merged);
        self.held_wire += merged;
        self.stats.merged += merged;
        self.stats.merged_fast += merged;
        if h.count >= MAX_SEGS {
            let h = self.take(b, i);
            done.push(self.complete(pool, h));
        }
        Ok(next)
    }

    fn find(&self, key: &FlowKey) -> Option<(usize, usize)> {
        let b = (key.hash() as usize) & (BUCKETS - 1);
        self.buckets
            .get(b)?
            .iter()
            .position(|h| h.key == *key)
            .map(|i| (b, i))
    }

    /// Completes the held flow of `key`, if any, into `done`.
    pub(crate) fn flush_flow(&mut self, pool: &Pool, key: &FlowKey, done: &mut Vec<Pkt>) {
        if let Some((b, i)) = self.find(key) {
            let h = self.take(b, i);
            done.push(self.complete(pool, h));
        }
    }

    /// Offers segment `p` (parsed as `s`, GRO kind `kind`): merged, held, or, when it
    /// cannot be either, returned in `done` after its flow's held packet.
    pub(crate) fn offer(&mut self, pool: &Pool, p: Pkt, s: Seg, kind: Kind, done: &mut Vec<Pkt>) {
        if let Some((b, i)) = self.find(&s.key) {
            let d = pool.get(&p).data();
            let mergeable = bucket(&mut self.buckets, b).get(i).is_some_and(|h| {
                h.kind == kind
                    && may_merge(h, &s, tcp_options(d, &s))
                    && (s.l3_len <= IP6_HDR
                        || ext_headers(d, &s) == ext_headers(pool.get(&h.head).data(), &h.first))
            });
            if mergeable {
                self.merge(pool, b, i, p, &s, done);
                return;
            }
            let h = self.take(b, i);
            done.push(self.complete(pool, h));
        }
        if !holdable(&s) {
            self.stats.passed += 1;
            done.push(p);
            return;
        }
        self.hold(pool, p, s, kind, done);
    }

    fn hold(&mut self, pool: &Pool, mut p: Pkt, s: Seg, kind: Kind, done: &mut Vec<Pkt>) {
        let b = (s.key.hash() as usize) & (BUCKETS - 1);
        let full = bucket(&mut self.buckets, b);
        if full.len() >= PER_BUCKET {
            let oldest = full
                .iter()
                .enumerate()
                .min_by_key(|(_, h)| h.age)
                .map(|(i, _)| i);
            if let Some(i) = oldest {
                let h = self.take(b, i);
                self.stats.evicted += 1;
                done.push(self.complete(pool, h));
            }
        }
        let mut opts = [0u8; 40];
        {
            let v = pool.get_mut(&mut p);
            let d = v.data();
            let o = tcp_options(d, &s);
            // At most 40 bytes: a TCP header is at most 60.
            if let Some(to) = opts.get_mut(..o.len()) {
                to.copy_from_slice(o);
            }
            // The first segment's payload sum, for GSO to give it back its own checksum:
            // a verified checksum means pseudo-header + header + payload ≡ -0.
            let psum = if s.psum == NO_PSUM {
                let l4 = usize::from(s.hdr - s.l4_hdr);
                let acc = s.pseudo(u32::from(s.l4_hdr + s.payload));
                let l4h = d.get(l4..usize::from(s.hdr)).unwrap_or_default();
                u32::from(!checksum::fold(checksum::sum(l4h, acc)))
            } else {
                s.psum
            };
            v.meta.csum_payload = psum;
            v.meta.flags |= flag::PAYLOAD_SUM;
        }
        self.age += 1;
        let members = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(usize::from(MAX_SEGS)));
        self.held_wire += 1;
        self.flows += 1;
        self.stats.peak_flows = self.stats.peak_flows.max(self.flows);
        let fast = Template::of(pool.get(&p).data(), &s);
        let held = bucket(&mut self.buckets, b);
        self.last = Some((b, held.len()));
        held.push(Held {
            key: s.key,
            kind,
            age: self.age,
            head: p,
            members,
            first: s,
            opts,
            count: 1,
            payload: u32::from(s.payload),
            next_seq: s.seq.wrapping_add(u32::from(s.payload)),
            id_mode: IdMode::Unknown,
            flags_or: 0,
            fast,
        });
    }

    fn merge(&mut self, pool: &Pool, b: usize, i: usize, mut p: Pkt, s: &Seg, done: &mut Vec<Pkt>) {
        // (`offer` found the flow at (`b`, `i`).)
        let Some(h) = bucket(&mut self.buckets, b).get_mut(i) else {
            self.stats.passed += 1;
            done.push(p);
            return;
        };
        if h.id_mode == IdMode::Unknown {
            h.id_mode = if s.id == h.first.id {
                IdMode::Fixed
            } else {
                IdMode::Incrementing
            };
        }
        {
            let mut v = pool.get_mut(&mut p);
            // The segment keeps its headers in its buffer (`l3`/`l4` say where, for
            // fraglist GSO); its data becomes its payload, padding past the IP length cut.
            v.meta.l3 = v.meta.data + s.l3;
            v.meta.l4 = v.meta.l3 + s.l3_len;
            let kept = v.narrow(usize::from(s.hdr), usize::from(s.payload));
            debug_assert!(kept, "parse checked the lengths");
        }
        h.members.push(p);
        h.count += 1;
        h.payload += u32::from(s.payload);
        h.next_seq = h.next_seq.wrapping_add(u32::from(s.payload));
        h.flags_or |= s.tcp_flags & (TCP_FIN | TCP_PSH);
        self.last = Some((b, i));
        self.held_wire += 1;
        self.stats.merged += 1;
        let last = if s.key.tcp() {
            s.payload < h.first.payload || s.tcp_flags & TCP_FINAL != 0
        } else {
            s.ulen < h.first.ulen
        };
        if last || h.count >= MAX_SEGS {
            let h = self.take(b, i);
            done.push(self.complete(pool, h));
        }
    }

    /// Completes every held flow into `done`, oldest first.
    pub fn flush_all(&mut self, pool: &Pool, done: &mut Vec<Pkt>) {
        if self.held_wire == 0 {
            return;
        }
        self.last = None;
        // A reused vector and an in-place sort: nothing is allocated per poll.
        let mut all = core::mem::take(&mut self.flushing);
        for b in &mut self.buckets {
            all.append(b);
        }
        all.sort_unstable_by_key(|h| h.age);
        for h in all.drain(..) {
            done.push(self.complete(pool, h));
        }
        self.flushing = all;
    }

    /// Turns a held flow into its super-packet (or the single segment, untouched).
    fn complete(&mut self, pool: &Pool, mut h: Held) -> Pkt {
        self.held_wire -= u64::from(h.count);
        self.flows -= 1;
        let mut head = h.head;
        if h.count == 1 {
            self.stats.singles += 1;
            self.spare.push(h.members);
            return head;
        }
        self.stats.coalesced += 1;
        // Chain the members behind the head, in order.
        let f = h.first;
        let mut chain_len = 0u32;
        let mut next: Option<Pkt> = None;
        while let Some(mut m) = h.members.pop() {
            let v = pool.get_mut(&mut m);
            chain_len += u32::from(v.meta.len);
            v.meta.chain = next.take();
            next = Some(m);
        }
        self.spare.push(h.members);
        let mut v = pool.get_mut(&mut head);
        // The frame ends at the IP length (padding past it is not part of the packet).
        v.truncate(usize::from(f.hdr) + usize::from(f.payload));
        #[expect(
            clippy::indexing_slicing,
            reason = "`parse` found the headers, `l3..hdr`, in the head (truncating kept them)"
        )]
        let (iph, l4h) =
            v.data_mut()[usize::from(f.l3)..usize::from(f.hdr)].split_at_mut(usize::from(f.l3_len));
        // The head's headers describe the whole super-packet: lengths grow, and standard
        // TCP inherits the FIN/PSH seen on later segments.
        let l4_len = u32::from(f.l4_hdr) + h.payload;
        let ip_len = (u32::from(f.l3_len) + l4_len) as u16;
        let v6 = f.key.v6;
        if v6 {
            // The payload length counts the extension headers too; no header checksum.
            Ipv6Packet::new_unchecked(iph).set_payload_len(ip_len - IP6_HDR);
        } else {
            let mut ip = Ipv4Packet::new_unchecked(iph);
            let old_total = ip.total_len();
            ip.set_total_len(ip_len);
            ip.set_checksum(checksum::update16(ip.checksum(), old_total, ip_len));
        }
        let (tcp, standard) = (f.key.tcp(), h.kind == Kind::Standard);
        let kind = match (v6, tcp, standard) {
            (false, true, true) => gso::TCPV4,
            (false, true, false) => gso::FRAGLIST_TCPV4,
            (false, false, true) => gso::UDPV4,
            (false, false, false) => gso::FRAGLIST_UDPV4,
            (true, true, true) => gso::TCPV6,
            (true, true, false) => gso::FRAGLIST_TCPV6,
            (true, false, true) => gso::UDPV6,
            (true, false, false) => gso::FRAGLIST_UDPV6,
        };
        if tcp && standard {
            let mut t = TcpPacket::new_unchecked(&mut *l4h);
            t.set_flags(t.flags() | TcpFlags(h.flags_or));
        } else if !tcp {
            UdpPacket::new_unchecked(&mut *l4h).set_len(l4_len as u16);
        }
        if standard {
            // The partial checksum a segmentation offload completes per segment: the
            // pseudo-header sum of the whole (RFC 1071 arithmetic, not inverted).
            let partial = checksum::fold(f.pseudo(l4_len));
            if tcp {
                TcpPacket::new_unchecked(l4h).set_checksum(partial);
            } else {
                UdpPacket::new_unchecked(l4h).set_checksum(partial);
            }
            v.meta.flags |= flag::L4_CSUM_PARTIAL;
        }
        // (IPv6 has no identification to keep fixed.)
        let fixed = standard && !v6 && h.id_mode == IdMode::Fixed;
        v.meta.gso_type = kind | if fixed { gso::FIXED_ID } else { 0 };
        v.meta.gso_size = f.payload;
        v.meta.segs = h.count;
        v.meta.total_len = u32::from(v.meta.len) + chain_len;
        v.meta.chain = next;
        v.meta.flags |= flag::L4_CSUM_OK | flag::GRO_CHAIN;
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GRO's reading of frame `f` received on port 0, as the stage makes it: dissected
    /// first.
    fn parse_frame(f: &[u8], csum_ok: bool) -> Parsed {
        parse(&dissect::parse(f), f, 0, csum_ok)
    }

    fn tcp_frame(seq: u32, flags: u8, payload: &[u8], id: u16) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 1], 64)
            .tcp(1500, 8000, seq, 1000);
        let b = if flags & 0x08 != 0 { b.psh() } else { b };
        let b = b.ack(100);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v[18..20].copy_from_slice(&id.to_be_bytes());
        netbatch_wire::ipv4::fill_header_checksum(&mut v[14..], 20);
        v
    }

    #[test]
    fn parse_reads_segments_and_payload_sums() {
        let f = tcp_frame(100, 0, &[7u8; 100], 8);
        let Parsed::Seg(s) = parse_frame(&f, false) else {
            panic!("not a segment")
        };
        assert_eq!((s.payload, s.seq, s.hdr, s.l4_hdr), (100, 100, 54, 20));
        assert_eq!(
            u16::try_from(s.psum).unwrap(),
            checksum::fold(checksum::sum(&[7u8; 100], 0))
        );
        // On the device-validated path no payload byte is read: the sum is left to be
        // derived from the header when the segment starts a train.
        let Parsed::Seg(t) = parse_frame(&f, true) else {
            panic!("not a segment")
        };
        assert_eq!(t.psum, NO_PSUM);
        // A corrupted TCP checksum keeps the flow key but is not mergeable.
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(matches!(parse_frame(&bad, false), Parsed::Unmergeable(k) if k == s.key));
        // ARP is not GRO's business.
        assert!(matches!(parse_frame(&[0u8; 42], false), Parsed::Other));
    }

    use netbatch_engine::{Pool, PoolConfig};

    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 256,
            buf_size: 2048,
            cache_size: 32,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// Runs `frames` through a table as the stage does (the fast path first, then the
    /// full rules; every segment of `kind`), the frames marked as device-verified when
    /// `csum_ok`, and completes what is held at the end. Returns, per packet handed on,
    /// (source port, segments, payload bytes of its first segment); frees everything.
    /// Runs them twice, a packet at a time and as one list (the fast path taking runs
    /// of it), and checks both give the same.
    fn run(frames: &[Vec<u8>], kind: Kind, csum_ok: bool) -> (Vec<(u16, u16, u16)>, GroStats) {
        let one = run_as(frames, kind, csum_ok, false);
        let list = run_as(frames, kind, csum_ok, true);
        assert_eq!(one, list, "a packet at a time and as a list");
        one
    }

    fn run_as(
        frames: &[Vec<u8>],
        kind: Kind,
        csum_ok: bool,
        as_list: bool,
    ) -> (Vec<(u16, u16, u16)>, GroStats) {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = GroTable::new();
        let mut done = Vec::new();
        let pkts: Vec<Pkt> = frames
            .iter()
            .map(|f| {
                let mut p = c.alloc().unwrap();
                let mut v = pool.get_mut(&mut p);
                assert!(v.set_data(128, f));
                if csum_ok {
                    v.meta.flags |= flag::L4_CSUM_OK;
                }
                p
            })
            .collect();
        let mut rest = pkts.into_iter();
        let mut next = rest.next();
        while let Some(p) = next.take() {
            let mut none = core::iter::empty();
            let more: &mut dyn Iterator<Item = Pkt> = if as_list { &mut rest } else { &mut none };
            let fast = match t.fast_run::<false>(&pool, p, &mut &mut *more, &mut done) {
                Err(p) => t.fast_run6(&pool, p, &mut &mut *more, &mut done),
                ok => ok,
            };
            match fast {
                Ok(Some(n)) => {
                    next = Some(n);
                    continue;
                }
                Ok(None) => {
                    next = rest.next();
                    continue;
                }
                Err(p) => next = Some(p),
            }
            let Some(p) = next.take() else { break };
            next = rest.next();
            let f = pool.get(&p).data().to_vec();
            match parse_frame(&f, csum_ok) {
                Parsed::Seg(s) => t.offer(&pool, p, s, kind, &mut done),
                Parsed::Unmergeable(k) => {
                    t.flush_flow(&pool, &k, &mut done);
                    done.push(p);
                }
                Parsed::Other => done.push(p),
            }
        }
        t.flush_all(&pool, &mut done);
        assert_eq!(t.held(), 0);
        let out = done
            .iter()
            .map(|p| {
                let v = pool.get(p);
                let d = v.data();
                let r = dissect::parse(d);
                let (l3, l4) = (usize::from(r.l3), usize::from(r.l4));
                let payload = if v.meta.segs > 1 {
                    v.meta.gso_size
                } else {
                    let l4_hdr = if r.l4_kind() == Some(L4::Tcp) { 20 } else { 8 };
                    let ip_len = if r.l3_type == L3::Ipv6 {
                        40 + get_u16(d, l3 + 4)
                    } else {
                        get_u16(d, l3 + 2)
                    };
                    ip_len - (l4 - l3) as u16 - l4_hdr
                };
                (get_u16(d, l4), v.meta.segs.max(1), payload)
            })
            .collect();
        c.free_all(&mut done);
        drop(c);
        assert_eq!(pool.free_in_pool(), 256, "every buffer back");
        (out, t.stats)
    }

    /// A TCP segment of flow `sport` (no PSH), at `seq`, 200 bytes.
    fn seg(sport: u16, seq: u32) -> Vec<u8> {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 1], 64)
            .tcp(sport, 8000, seq, 1000)
            .ack(100)
            .write(&mut v, &[5u8; 200])
            .unwrap();
        v
    }

    /// `f` with two tags inserted after its MAC addresses: an 802.1ad S-tag of VLAN
    /// `outer`, then an 802.1Q C-tag of VLAN `inner`.
    fn qinq(f: &[u8], outer: u16, inner: u16) -> Vec<u8> {
        let mut g = f[..12].to_vec();
        g.extend([0x88, 0xa8]);
        g.extend(outer.to_be_bytes());
        g.extend([0x81, 0x00]);
        g.extend(inner.to_be_bytes());
        g.extend(&f[12..]);
        g
    }

    /// Double-tagged frames merge as untagged ones do, per tag stack (the kernel's VLAN
    /// GRO peels each tag in turn; a flow is its tags too): flow 1000 behind S-VLAN 100,
    /// C-VLAN 200 merges its three in-order segments although a segment of the same
    /// TCP flow behind C-VLAN 300 comes between them, which stays alone; both kinds of
    /// GRO.
    #[test]
    fn double_tagged_segments_merge_per_tag_stack() {
        let frames = [
            qinq(&seg(1000, 1), 100, 200),
            qinq(&seg(1000, 201), 100, 200),
            qinq(&seg(1000, 201), 100, 300),
            qinq(&seg(1000, 401), 100, 200),
        ];
        for kind in [Kind::Standard, Kind::Fraglist] {
            let (out, _) = run(&frames, kind, false);
            let mut out = out;
            out.sort_unstable();
            assert_eq!(out, [(1000, 1, 200), (1000, 3, 200)], "{kind:?}");
        }
        // Untagged, the same segments are one flow: the third, out of sequence,
        // completes the first two and starts a train that the fourth joins.
        let plain = [seg(1000, 1), seg(1000, 201), seg(1000, 201), seg(1000, 401)];
        let (out, _) = run(&plain, Kind::Standard, false);
        assert_eq!(out, [(1000, 2, 200), (1000, 2, 200)]);
    }

    fn bucket_of(f: &[u8]) -> usize {
        let Parsed::Seg(s) = parse_frame(f, false) else {
            panic!("not a segment")
        };
        (s.key.hash() as usize) & (BUCKETS - 1)
    }

    /// The kernel's table rule (`gro_flush_oldest`): a new flow in a full bucket (8 held)
    /// completes the bucket's *oldest* flow, the one held first, even when that flow
    /// merged a segment since (merging does not make a flow younger). Ten flows of one
    /// bucket, f0…f9: the first segments of f0…f7 fill it; f0's second segment merges;
    /// f8 evicts f0 (two segments), f9 evicts f1 (one); the end of the poll completes
    /// the rest oldest first.
    #[test]
    fn a_full_bucket_completes_its_oldest_flow() {
        let b = bucket_of(&seg(1000, 1));
        let flows: Vec<u16> = (1000u16..)
            .filter(|&sp| bucket_of(&seg(sp, 1)) == b)
            .take(10)
            .collect();
        let mut frames: Vec<Vec<u8>> = flows[..8].iter().map(|&sp| seg(sp, 1)).collect();
        frames.push(seg(flows[0], 201));
        frames.extend(flows[8..].iter().map(|&sp| seg(sp, 1)));
        let mut want = vec![(flows[0], 2, 200), (flows[1], 1, 200)];
        want.extend(flows[2..].iter().map(|&sp| (sp, 1, 200)));
        for csum_ok in [false, true] {
            let (got, st) = run(&frames, Kind::Standard, csum_ok);
            assert_eq!(got, want, "csum_ok {csum_ok}");
            assert_eq!((st.evicted, st.peak_flows), (2, 8), "csum_ok {csum_ok}");
        }
    }

    /// A UDP datagram of the flow 4000 → 8000, 300 bytes, IP ID `id`; `zero`: no checksum.
    fn dgram(id: u16, zero: bool) -> Vec<u8> {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 1], 64)
            .udp(4000, 8000)
            .write(&mut v, &[id as u8; 300])
            .unwrap();
        v[18..20].copy_from_slice(&id.to_be_bytes());
        netbatch_wire::ipv4::fill_header_checksum(&mut v[14..], 20);
        if zero {
            v[40..42].copy_from_slice(&[0, 0]);
        }
        v
    }

    /// A UDP datagram of the flow 4000 → 8000 with `payload` bytes and IP ID `id`.
    fn dgram_of(id: u16, payload: usize) -> Vec<u8> {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 1], 64)
            .udp(4000, 8000)
            .write(&mut v, &vec![id as u8; payload])
            .unwrap();
        v[18..20].copy_from_slice(&id.to_be_bytes());
        netbatch_wire::ipv4::fill_header_checksum(&mut v[14..], 20);
        v
    }

    /// The 64 KB limit ends a train where the full rules end it, also when the fast path
    /// takes the segments a run at a time, and where it differs by kind. With 1,424-byte
    /// payloads a standard super-packet (one IP packet: 28 bytes of headers plus the
    /// payloads, at most 65,535, `skb_gro_receive`) holds 46 of them (28 + 65,504); a
    /// fraglist chain (its length plus the next member whole, 1,452 bytes, below 65,536,
    /// `skb_gro_receive_list`) 45. Incrementing and fixed IDs alike (a fixed ID is what
    /// a sender with DF set may send, RFC 6864).
    #[test]
    fn the_64_kb_limit_ends_a_train_by_kind() {
        for fixed in [false, true] {
            let frames: Vec<Vec<u8>> = (0..100u16)
                .map(|i| dgram_of(if fixed { 7 } else { 7 + i }, 1424))
                .collect();
            for (kind, per) in [(Kind::Standard, 46u16), (Kind::Fraglist, 45)] {
                let mut want = Vec::new();
                let mut left = 100;
                while left > 0 {
                    let n = left.min(per);
                    want.push((4000, n, 1424));
                    left -= n;
                }
                let (got, st) = run(&frames, kind, true);
                assert_eq!(got, want, "{kind:?} fixed {fixed}");
                // All but each train's first segment merged, every one on the fast path
                // (the second segment of a train settles its ID mode there too).
                assert_eq!(st.merged, 100 - want.len() as u64, "{kind:?} fixed {fixed}");
                assert_eq!(st.merged_fast, st.merged, "{kind:?} fixed {fixed}");
            }
        }
    }

    /// UDP GRO needs a checksum (`udp_gro_receive_segment`), also on the fast path, where
    /// the device reported every datagram verified (as a NIC may for one without a
    /// checksum): d0, d1 merge; d2 has none, so the train is completed and d2 passes
    /// alone; d3 starts a new train (alone at the end of the poll).
    #[test]
    fn a_udp_datagram_without_checksum_is_never_merged() {
        let frames = [
            dgram(0, false),
            dgram(1, false),
            dgram(2, true),
            dgram(3, false),
        ];
        let want = vec![(4000, 2, 300), (4000, 1, 300), (4000, 1, 300)];
        for kind in [Kind::Standard, Kind::Fraglist] {
            for csum_ok in [false, true] {
                let (got, _) = run(&frames, kind, csum_ok);
                assert_eq!(got, want, "{kind:?} csum_ok {csum_ok}");
            }
        }
    }

    /// The fast path checks an IPv4 header's identification and checksum through their
    /// sum (everything else is the template's): a datagram whose header checksum is
    /// wrong is not merged (it fails the full check too, so it passes alone after its
    /// train), nor is one whose identification skips a number (RFC 1624 arithmetic makes
    /// its checksum right: the sum differs all the same); it starts a new train.
    #[test]
    fn a_bad_ipv4_header_checksum_or_a_skipped_identification_ends_a_train() {
        let mut bad_csum = dgram(2, false);
        bad_csum[24] ^= 0x40;
        let frames = [
            dgram(0, false),
            dgram(1, false),
            bad_csum,
            dgram(3, false),
            dgram(4, false),
        ];
        let skipped = [
            dgram(0, false),
            dgram(1, false),
            dgram(3, false),
            dgram(4, false),
        ];
        for kind in [Kind::Standard, Kind::Fraglist] {
            for csum_ok in [false, true] {
                let (got, _) = run(&frames, kind, csum_ok);
                assert_eq!(
                    got,
                    vec![(4000, 2, 300), (4000, 1, 300), (4000, 2, 300)],
                    "bad checksum, {kind:?} csum_ok {csum_ok}"
                );
                let (got, _) = run(&skipped, kind, csum_ok);
                assert_eq!(
                    got,
                    vec![(4000, 2, 300), (4000, 2, 300)],
                    "skipped identification, {kind:?} csum_ok {csum_ok}"
                );
            }
        }
    }

    /// An IPv6 TCP segment of flow 1500 → 8000 (hop limit 64, traffic class 0, flow
    /// label 7), at `seq`, 200 bytes, with the extension headers `exts` (each naming the
    /// next, the last naming TCP: built by hand, RFC 8200 4) before TCP.
    fn seg6(seq: u32, exts: &[Vec<u8>]) -> Vec<u8> {
        let mut v = Vec::new();
        let ip = etherparse::Ipv6Header {
            flow_label: etherparse::Ipv6FlowLabel::try_new(7).unwrap(),
            hop_limit: 64,
            source: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            destination: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            ..Default::default()
        };
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ip(etherparse::IpHeaders::Ipv6(ip, Default::default()))
            .tcp(1500, 8000, seq, 1000)
            .ack(100)
            .write(&mut v, &[5u8; 200])
            .unwrap();
        if exts.is_empty() {
            return v;
        }
        // Insert the extension headers after the fixed header: the first takes the fixed
        // header's next header (TCP) in its last place, the fixed header names the first.
        let ext: Vec<u8> = exts.concat();
        let mut f = v[..54].to_vec();
        f[20] = exts[0][0];
        let mut chain = ext.clone();
        // Each header's next header: the following header's kind, TCP for the last.
        let mut at = 0;
        for (k, e) in exts.iter().enumerate() {
            chain[at] = exts.get(k + 1).map_or(6, |n| n[0]);
            at += e.len();
        }
        f.extend_from_slice(&chain);
        f.extend_from_slice(&v[54..]);
        let plen = u16::from_be_bytes([f[18], f[19]]) + ext.len() as u16;
        f[18..20].copy_from_slice(&plen.to_be_bytes());
        f
    }

    /// An extension header of kind `kind` (its first byte, replaced by [`seg6`] with the
    /// next header): 8 bytes, a PadN option's bytes, `b3` its fourth byte (a routing
    /// header's segments left).
    fn ext(kind: u8, b3: u8) -> Vec<u8> {
        vec![kind, 0, 1, b3, 0, 0, 0, 0]
    }

    /// IPv6 segments merge as IPv4 ones do, and the IPv6 rules hold (`ipv6_gro_receive`,
    /// `ipv6_gro_flush`): a hop limit, traffic class or flow label other than the first
    /// segment's, or other extension header bytes, complete the train; a Fragment header
    /// (even atomic), a Routing header with segments left or a payload length that is not
    /// the frame's are never merged; Hop-by-Hop and Destination Options headers are, when
    /// byte for byte the first segment's. Both kinds, with and without device checksums
    /// (the IPv6 fast path: `merged_fast`).
    #[test]
    fn ipv6_segments_follow_the_kernel_rules() {
        let at = |k: u32| 1 + 200 * k;
        let train =
            |exts: &[Vec<u8>]| -> Vec<Vec<u8>> { (0..4).map(|k| seg6(at(k), exts)).collect() };
        let hbh = [ext(0, 0), ext(60, 0)];
        /// What, frames, (source port, segments, payload) of each packet handed on.
        type Case = (&'static str, Vec<Vec<u8>>, Vec<(u16, u16, u16)>);
        let cases: Vec<Case> = vec![
            ("plain", train(&[]), vec![(1500, 4, 200)]),
            ("HBH + DO", train(&hbh), vec![(1500, 4, 200)]),
            (
                "routing, no segments left",
                train(&[ext(43, 0)]),
                vec![(1500, 4, 200)],
            ),
            (
                "routing, segments left",
                train(&[ext(43, 1)]),
                vec![(1500, 1, 200); 4],
            ),
            (
                "atomic fragment",
                train(&[vec![44, 0, 0, 0, 0, 0, 0, 7]]),
                vec![(1500, 1, 200); 4],
            ),
            {
                // The third with other option bytes: [2, 1, 1] (the fourth is compared
                // with the third, the first of its train).
                let mut t = train(&hbh);
                t[2][14 + 40 + 4] = 9;
                (
                    "other option bytes",
                    t,
                    vec![(1500, 2, 200), (1500, 1, 200), (1500, 1, 200)],
                )
            },
            {
                // The third with hop limit 63, the fourth too: [2, 2].
                let mut t = train(&[]);
                t[2][21] = 63;
                t[3][21] = 63;
                ("hop limit", t, vec![(1500, 2, 200), (1500, 2, 200)])
            },
            {
                // Traffic class (ECN bits) on the second: [1, 1, 2].
                let mut t = train(&[]);
                t[1][15] ^= 0x10;
                (
                    "traffic class",
                    t,
                    vec![(1500, 1, 200), (1500, 1, 200), (1500, 2, 200)],
                )
            },
            {
                // Flow label on the last: [3, 1].
                let mut t = train(&[]);
                t[3][17] ^= 1;
                ("flow label", t, vec![(1500, 3, 200), (1500, 1, 200)])
            },
            {
                // A payload length one short of the frame on the second (a trailing
                // byte): not merged, and the others around it as they come: [1, 1, 2].
                let mut t = train(&[]);
                t[1].push(0);
                (
                    "payload length",
                    t,
                    vec![(1500, 1, 200), (1500, 1, 200), (1500, 2, 200)],
                )
            },
        ];
        for (what, frames, want) in &cases {
            for kind in [Kind::Standard, Kind::Fraglist] {
                for csum_ok in [false, true] {
                    let (got, st) = run(frames, kind, csum_ok);
                    assert_eq!(&got, want, "{what} {kind:?} csum_ok {csum_ok}");
                    if *what == "plain" {
                        let fast = if csum_ok { 3 } else { 0 };
                        assert_eq!((st.merged, st.merged_fast), (3, fast), "{what} {kind:?}");
                    }
                }
            }
        }
    }
}
