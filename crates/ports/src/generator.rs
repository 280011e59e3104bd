//! `gen`: the in-memory traffic generator, the default port for benchmarks.
//!
//! Each flow has a frame template built once (Ethernet, optional VLAN tag, IPv4 or IPv6,
//! UDP or TCP, payload). The family is the flow's addresses': both IPv4 or both IPv6
//! (mixed is [`GenError::MixedFamilies`]); an IPv6 template has no extension header, flow
//! label 0, and the upper-layer checksum over the IPv6 pseudo-header (RFC 8200 8.1).
//! Receiving a frame copies the template into a fresh pool buffer and patches what
//! changes per packet, updating checksums incrementally (RFC 1624):
//!
//! - IPv4 identification = the flow's sequence number (low 16 bits; IPv6 has none);
//! - the first `min(8, payload)` payload bytes = the sequence number, big-endian, low
//!   bytes last (a 1-byte payload carries `seq as u8`), so sinks can check per-flow order;
//! - TCP sequence number advances by the payload length per segment.
//!
//! Flow order is `bursty` (N consecutive packets of one flow, then the next flow) or
//! `interleaved` (round-robin, one packet per flow). Transmit counts and frees, like a
//! wire that always has room; it can also keep the last frames for tests.

use core::net::IpAddr;
use netbatch_wire::bytes::put_u16;
use netbatch_wire::ethernet::{self, EtherType, EthernetFrame};
use netbatch_wire::ipv4::{self, Ipv4Packet, Ipv4Repr, Protocol};
use netbatch_wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use netbatch_wire::tcp::{self, TcpFlags, TcpPacket};
use netbatch_wire::udp::{self, UdpPacket};
use netbatch_wire::vlan::{self, VlanHeader};
use std::collections::VecDeque;

use netbatch_engine::{PktList, time};
use netbatch_packet::offload::Features;
use netbatch_wire::checksum;
use netbatch_wire::ethernet::MacAddr;

use crate::{Carries, Port, PortCx, PortStats};

/// What a `gen` port carries: anything (transmit counts and frees).
pub const CARRIES: Carries = Carries::ANYTHING;

/// Transport of a generated flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// UDP datagrams.
    Udp,
    /// TCP segments with ACK set (and PSH on none).
    Tcp,
}

/// One generated flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    /// Ethernet source.
    pub src_mac: MacAddr,
    /// Ethernet destination (the receiving port's MAC for traffic to the datapath).
    pub dst_mac: MacAddr,
    /// 802.1Q tag.
    pub vlan: Option<u16>,
    /// Source address: IPv4 or IPv6, the family of `dst`.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Transport.
    pub l4: L4,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Payload bytes per packet.
    pub payload_len: usize,
    /// IPv4 TTL, IPv6 hop limit.
    pub ttl: u8,
    /// Set IPv4's don't-fragment bit (IPv6 has none: routers never fragment it).
    pub dont_frag: bool,
}

/// How flows follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowOrder {
    /// `burst` packets of a flow, then the next flow.
    Bursty {
        /// Packets per flow before switching.
        burst: u32,
    },
    /// One packet per flow, round-robin.
    Interleaved,
}

impl core::str::FromStr for FlowOrder {
    type Err = String;
    /// `bursty` (bursts of 64), `bursty:N`, or `interleaved`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interleaved" => Ok(Self::Interleaved),
            "bursty" => Ok(Self::Bursty { burst: 64 }),
            _ => match s.strip_prefix("bursty:").map(str::parse::<u32>) {
                Some(Ok(n)) if n > 0 => Ok(Self::Bursty { burst: n }),
                _ => Err(format!(
                    "unknown flow order '{s}' (expected bursty, bursty:N or interleaved)"
                )),
            },
        }
    }
}

/// Generator configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenConfig {
    /// Flows (at least one).
    pub flows: Vec<FlowSpec>,
    /// Flow order.
    pub order: FlowOrder,
    /// Stop after this many frames (None: endless).
    pub limit: Option<u64>,
    /// Stamp `Meta::rx_tsc` with the TSC at generation (for latency measurement).
    pub timestamps: bool,
    /// Keep up to this many transmitted frames for inspection.
    pub capture: usize,
    /// Write each flow's sequence number into every frame (IPv4 identification, payload,
    /// TCP sequence; for IPv6 the last two) so receivers can check order. Off, every frame of a flow is its
    /// template, byte for byte (what a hardware traffic generator sends), and receiving
    /// costs only the copy a NIC's DMA would make.
    pub sequence: bool,
}

impl GenConfig {
    /// Endless traffic of `flows` in `order`, with sequence numbers, no timestamps and no
    /// capture: what a benchmark source usually wants (change fields by struct update).
    pub fn new(flows: Vec<FlowSpec>, order: FlowOrder) -> Self {
        Self {
            flows,
            order,
            limit: None,
            timestamps: false,
            capture: 0,
            sequence: true,
        }
    }
}

#[derive(Debug, Clone)]
struct Flow {
    frame: Vec<u8>,
    ip: usize,
    l4: usize,
    payload: usize,
    seq_bytes: usize,
    tcp: bool,
    /// IPv6 (no IPv4 identification to write).
    v6: bool,
    /// Where the L4 checksum is in the frame.
    csum_at: usize,
    payload_len: u32,
    /// IPv4 checksum of the template (ident 0; unused for IPv6).
    ip_csum: u16,
    /// L4 checksum of the template (sequence bytes 0, TCP seq 0).
    l4_csum: u16,
    /// The template padded to 64 bytes when it fits, copied as one block (a few vector
    /// moves instead of a call: the buffer always has the room).
    block: Option<[u8; 64]>,
    /// The same for a template of 65 to 128 bytes (the smallest IPv6 frames are 74): its
    /// index in the port's `blocks128` (`u32::MAX`, past its end: none), copied as two
    /// halves one after the other (one 128-byte copy is a call to `memcpy`). Kept out
    /// of the flow so that flows of small IPv4 frames stay as compact as they were.
    block128: u32,
    seq: u64,
}

/// Errors in a generator configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenError {
    /// No flows.
    NoFlows,
    /// A frame would not fit a buffer.
    TooLarge(usize),
    /// A flow's source and destination are of different families.
    MixedFamilies,
}

impl core::fmt::Display for GenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoFlows => f.write_str("the generator needs at least one flow"),
            Self::TooLarge(n) => write!(f, "a {n}-byte frame does not fit a packet buffer"),
            Self::MixedFamilies => {
                f.write_str("a flow's source and destination must both be IPv4 or both IPv6")
            }
        }
    }
}

impl std::error::Error for GenError {}

/// The flow's addresses as one family: IPv4 or IPv6 pairs.
enum Addrs {
    V4(core::net::Ipv4Addr, core::net::Ipv4Addr),
    V6(core::net::Ipv6Addr, core::net::Ipv6Addr),
}

fn template(f: &FlowSpec) -> Result<Flow, GenError> {
    let addrs = match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Addrs::V4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => Addrs::V6(s, d),
        _ => return Err(GenError::MixedFamilies),
    };
    let (ethertype, ip_len) = match addrs {
        Addrs::V4(..) => (EtherType::IPV4, ipv4::HEADER_LEN),
        Addrs::V6(..) => (EtherType::IPV6, ipv6::HEADER_LEN),
    };
    let l4_hdr = match f.l4 {
        L4::Udp => udp::HEADER_LEN,
        L4::Tcp => tcp::HEADER_LEN,
    };
    let tags = if f.vlan.is_some() {
        vlan::HEADER_LEN
    } else {
        0
    };
    let ip = ethernet::HEADER_LEN + tags;
    let l4 = ip + ip_len;
    let payload = l4 + l4_hdr;
    let mut b = vec![0u8; payload + f.payload_len];
    let l4_len = (l4_hdr + f.payload_len) as u16;
    let proto = match f.l4 {
        L4::Udp => Protocol::UDP,
        L4::Tcp => Protocol::TCP,
    };
    {
        let mut eth = EthernetFrame::new_unchecked(&mut b[..ethernet::HEADER_LEN]);
        eth.set_dst(f.dst_mac);
        eth.set_src(f.src_mac);
        eth.set_ethertype(if f.vlan.is_some() {
            EtherType::VLAN
        } else {
            ethertype
        });
    }
    if let Some(v) = f.vlan {
        let mut tag = VlanHeader::new_unchecked(&mut b[ethernet::HEADER_LEN..ip]);
        tag.set_tci(v & vlan::VID_MAX);
        tag.set_ethertype(ethertype);
    }
    let ip_csum = match addrs {
        Addrs::V4(src, dst) => {
            let ip_hdr = Ipv4Repr {
                src,
                dst,
                protocol: proto,
                payload_len: usize::from(l4_len),
                ttl: f.ttl,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: f.dont_frag,
            };
            ip_hdr.emit(&mut Ipv4Packet::new_unchecked(&mut b[ip..l4]));
            Ipv4Packet::new_unchecked(&b[ip..l4]).checksum()
        }
        Addrs::V6(src, dst) => {
            let ip_hdr = Ipv6Repr {
                src,
                dst,
                next_header: proto,
                payload_len: usize::from(l4_len),
                hop_limit: f.ttl,
                traffic_class: 0,
                flow_label: 0,
            };
            ip_hdr.emit(&mut Ipv6Packet::new_unchecked(&mut b[ip..l4]));
            0
        }
    };
    let seq_bytes = f.payload_len.min(8);
    // A fixed pattern after the sequence bytes, different per flow.
    for (j, x) in b[payload + seq_bytes..].iter_mut().enumerate() {
        *x = (j as u8).wrapping_add(f.sport as u8);
    }
    match f.l4 {
        L4::Udp => {
            let mut u = UdpPacket::new_unchecked(&mut b[l4..]);
            u.set_src_port(f.sport);
            u.set_dst_port(f.dport);
            u.set_len(l4_len);
        }
        L4::Tcp => {
            let mut t = TcpPacket::new_unchecked(&mut b[l4..]);
            t.set_src_port(f.sport);
            t.set_dst_port(f.dport);
            t.set_ack_number(1);
            t.set_header_len(tcp::HEADER_LEN);
            t.set_flags(TcpFlags::ACK);
            t.set_window(0xffff);
        }
    }
    let csum_at = l4
        + match f.l4 {
            L4::Udp => udp::CHECKSUM_AT,
            L4::Tcp => tcp::CHECKSUM_AT,
        };
    let l4_csum = match addrs {
        Addrs::V4(src, dst) => match f.l4 {
            L4::Udp => {
                let mut u = UdpPacket::new_unchecked(&mut b[l4..]);
                u.fill_checksum(src, dst);
                u.checksum()
            }
            L4::Tcp => {
                let mut t = TcpPacket::new_unchecked(&mut b[l4..]);
                t.fill_checksum(src, dst);
                t.checksum()
            }
        },
        Addrs::V6(src, dst) => {
            // The checksum field is zero in the template: sum the pseudo-header and the
            // upper-layer packet (RFC 8200 8.1); UDP sends a computed 0 as 0xffff.
            let acc = checksum::pseudo_header_v6(src, dst, proto.0, u32::from(l4_len));
            let c = checksum::finish(checksum::sum(&b[l4..], acc));
            let c = match f.l4 {
                L4::Udp => udp::checksum_on_wire(c),
                L4::Tcp => c,
            };
            put_u16(&mut b, csum_at, c);
            c
        }
    };
    let frame = b.clone();
    Ok(Flow {
        frame,
        ip,
        l4,
        payload,
        seq_bytes,
        tcp: f.l4 == L4::Tcp,
        v6: matches!(addrs, Addrs::V6(..)),
        csum_at,
        payload_len: f.payload_len as u32,
        ip_csum,
        l4_csum,
        block: (b.len() <= 64).then(|| {
            let mut x = [0u8; 64];
            x[..b.len()].copy_from_slice(&b);
            x
        }),
        // Given its place by `GenPort::new`, which owns the blocks.
        block128: u32::MAX,
        seq: 0,
    })
}

/// A template of 65 to 128 bytes, zero-padded: two cache lines on a line boundary.
#[derive(Debug, Clone)]
#[repr(align(64))]
struct Block128([[u8; 64]; 2]);

impl Block128 {
    /// `b` padded with zeros, when it is 65 to 128 bytes long.
    fn of(b: &[u8]) -> Option<Self> {
        if b.len() <= 64 || b.len() > 128 {
            return None;
        }
        let mut x = Self([[0; 64]; 2]);
        x.0[0].copy_from_slice(&b[..64]);
        x.0[1][..b.len() - 64].copy_from_slice(&b[64..]);
        Some(x)
    }
}

/// The generator port.
///
/// Invariant: a flow whose template is 65 to 128 bytes long has its `block128` index
/// `blocks128`, which holds the template padded; every other flow's is `u32::MAX`.
pub struct GenPort {
    name: String,
    index: u16,
    flows: Vec<Flow>,
    /// The 65- to 128-byte templates, one after the other in flow order, each on its own
    /// two cache lines: with flows interleaved each packet reads another flow's, and
    /// these are read in sequence (the hardware prefetcher's easy case) and whole,
    /// where a separately boxed block straddled three lines at an allocator's address.
    blocks128: Vec<Block128>,
    order: FlowOrder,
    cur: usize,
    left_in_burst: u32,
    limit: Option<u64>,
    timestamps: bool,
    sequence: bool,
    clock: Option<quanta::Clock>,
    capture_cap: usize,
    captured: VecDeque<Vec<u8>>,
    stats: PortStats,
    features: Features,
    counter: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Frames per second offered (none: as fast as asked), and the pacing state:
    /// (start time in ns, frames generated since).
    rate: Option<(u64, Option<(u64, u64)>)>,
}

impl core::fmt::Debug for GenPort {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GenPort")
            .field("name", &self.name)
            .field("flows", &self.flows.len())
            .finish()
    }
}

impl GenPort {
    /// A generator named `name` that stamps `Meta::in_port = index`. `buf_room` is the
    /// bytes a buffer holds after its headroom.
    pub fn new(name: &str, index: u16, cfg: &GenConfig, buf_room: usize) -> Result<Self, GenError> {
        if cfg.flows.is_empty() {
            return Err(GenError::NoFlows);
        }
        let mut flows: Vec<Flow> = cfg.flows.iter().map(template).collect::<Result<_, _>>()?;
        if let Some(f) = flows.iter().find(|f| f.frame.len() > buf_room) {
            return Err(GenError::TooLarge(f.frame.len()));
        }
        let mut blocks128 = Vec::new();
        for f in &mut flows {
            if let Some(b) = Block128::of(&f.frame) {
                f.block128 = u32::try_from(blocks128.len()).unwrap_or(u32::MAX);
                blocks128.push(b);
            }
        }
        let burst = match cfg.order {
            FlowOrder::Bursty { burst } => burst,
            FlowOrder::Interleaved => 1,
        };
        Ok(Self {
            name: name.into(),
            index,
            flows,
            blocks128,
            order: cfg.order,
            cur: 0,
            left_in_burst: burst,
            limit: cfg.limit,
            timestamps: cfg.timestamps,
            sequence: cfg.sequence,
            clock: cfg.timestamps.then(time::clock),
            capture_cap: cfg.capture,
            captured: VecDeque::new(),
            stats: PortStats::default(),
            features: Features::default(),
            counter: None,
            rate: None,
        })
    }

    /// Offers at most `pps` frames per second (measured from the first receive after
    /// this call), as a traffic generator set to a rate does; `None`: unpaced.
    pub fn set_rate(&mut self, pps: Option<u64>) {
        self.rate = pps.map(|r| (r, None));
    }

    /// Adds every frame it generates to `counter` (shared with whoever waits for the
    /// traffic to have been received, e.g. a benchmark driving several worker threads).
    pub fn with_counter(mut self, counter: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// The template frame of flow `i` with sequence number `seq` (what `rx` produces), for
    /// tests and for feeding the same frames to another stack.
    pub fn frame_for(&self, i: usize, seq: u64) -> Option<Vec<u8>> {
        let f = self.flows.get(i)?;
        let mut b = f.frame.clone();
        patch(f, &mut b, seq);
        Some(b)
    }

    /// Frames kept from transmission (oldest first).
    pub fn captured(&mut self) -> &mut VecDeque<Vec<u8>> {
        &mut self.captured
    }

    /// Declares offloads (`rx-checksum` marks received frames' L4 checksums verified, as
    /// a NIC does; the frames are valid, so that is true).
    pub fn with_features(mut self, f: Features) -> Self {
        self.features = f;
        self
    }

    /// Sets the remaining frame budget (None: endless).
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }

    /// Number of flows.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    #[inline]
    fn next_flow(&mut self) -> usize {
        let i = self.cur;
        self.left_in_burst -= 1;
        if self.left_in_burst == 0 {
            self.cur += 1;
            if self.cur == self.flows.len() {
                self.cur = 0;
            }
            self.left_in_burst = match self.order {
                FlowOrder::Bursty { burst } => burst,
                FlowOrder::Interleaved => 1,
            };
        }
        i
    }
}

/// The ones' complement sum of the `n` (≤ 8) low bytes of `seq` written big-endian at an
/// even offset: the bytes form `n / 2` words plus, for odd `n`, a high byte.
#[inline(always)]
fn seq_word_sum(seq: u64, n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    let v = if n == 8 {
        seq
    } else {
        seq & ((1u64 << (8 * n)) - 1)
    };
    // An odd count leaves the last byte as the high half of a word.
    let w = if n % 2 == 1 { v << 8 } else { v };
    (w >> 48) + ((w >> 32) & 0xffff) + ((w >> 16) & 0xffff) + (w & 0xffff)
}

/// Writes the per-packet fields of `seq` into `b` (a copy of `f.frame`) and fixes the
/// checksums incrementally (RFC 1624: the template's checksums cover zero fields).
#[inline(always)]
fn patch(f: &Flow, b: &mut [u8], seq: u64) {
    if !f.v6 {
        let ident = seq as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut b[f.ip..f.l4]);
        ip.set_ident(ident);
        ip.set_checksum(checksum::update16(f.ip_csum, 0, ident));
    }
    let n = f.seq_bytes;
    let be = seq.to_be_bytes();
    // Eight bytes (any payload of eight or more): one store, not a copy of a length
    // known only at run time.
    if n == 8
        && let Some(w) = b
            .get_mut(f.payload..)
            .and_then(<[u8]>::first_chunk_mut::<8>)
    {
        *w = be;
    } else {
        b[f.payload..f.payload + n].copy_from_slice(&be[8 - n..]);
    }
    let mut acc = u64::from(!f.l4_csum) + seq_word_sum(seq, n);
    let c = if f.tcp {
        let tseq = (seq as u32).wrapping_mul(f.payload_len);
        TcpPacket::new_unchecked(&mut b[f.l4..f.payload]).set_seq_number(tseq);
        acc += u64::from(tseq >> 16) + u64::from(tseq & 0xffff);
        !checksum::fold(acc)
    } else {
        udp::checksum_on_wire(!checksum::fold(acc))
    };
    put_u16(b, f.csum_at, c);
}

impl Port for GenPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        let mut n = max;
        if let Some(l) = self.limit {
            n = n.min(usize::try_from(l).unwrap_or(usize::MAX));
        }
        if let Some((pps, state)) = self.rate.as_mut() {
            let now = time::mono_ns();
            let (t0, sent) = *state.get_or_insert((now, 0));
            let due = u128::from(now - t0) * u128::from(*pps) / 1_000_000_000;
            let allowed = u64::try_from(due).unwrap_or(u64::MAX).saturating_sub(sent);
            n = n.min(usize::try_from(allowed).unwrap_or(usize::MAX));
        }
        let stamp = self
            .clock
            .as_ref()
            .filter(|_| self.timestamps)
            .map(|c| c.raw())
            .unwrap_or(0);
        let mut got = 0;
        let mut bytes = 0u64;
        for _ in 0..n {
            let Some(mut p) = cx.cache.alloc() else {
                self.stats.rx_nobuf += 1;
                break;
            };
            let i = self.next_flow();
            let f = &mut self.flows[i];
            let seq = f.seq;
            f.seq += 1;
            let mut v = cx.pool.get_mut(&mut p);
            let len = f.frame.len();
            let start = usize::from(v.meta.data);
            match (&f.block, v.buf.get_mut(start..start + 64)) {
                (Some(block), Some(dst)) => {
                    dst.copy_from_slice(block);
                    v.meta.len = len as u16;
                    v.meta.total_len = len as u32;
                    if self.sequence {
                        patch(f, &mut v.buf[start..start + len], seq);
                    }
                }
                _ => match (
                    self.blocks128.get(f.block128 as usize),
                    v.buf.get_mut(start..start + 128),
                ) {
                    (Some(block), Some(dst)) => {
                        let (lo, hi) = dst.split_at_mut(64);
                        lo.copy_from_slice(&block.0[0]);
                        hi.copy_from_slice(&block.0[1]);
                        v.meta.len = len as u16;
                        v.meta.total_len = len as u32;
                        if self.sequence {
                            patch(f, &mut v.buf[start..start + len], seq);
                        }
                    }
                    _ => {
                        // The template fits (checked at construction), so append cannot
                        // fail.
                        if let Some(b) = v.append(len) {
                            b.copy_from_slice(&f.frame);
                            if self.sequence {
                                patch(f, b, seq);
                            }
                        }
                    }
                },
            }
            v.meta.in_port = self.index;
            v.meta.rx_tsc = stamp;
            if self.features.rx_checksum {
                v.meta.flags |= netbatch_packet::meta::flag::L4_CSUM_OK;
            }
            bytes += len as u64;
            out.push(p);
            got += 1;
        }
        if let Some(l) = self.limit.as_mut() {
            *l -= got;
        }
        if let Some(c) = &self.counter {
            c.fetch_add(got, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some((_, Some(st))) = self.rate.as_mut() {
            st.1 += got;
        }
        self.stats.rx_packets += got;
        self.stats.rx_bytes += bytes;
        got
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        let mut wire = 0;
        let mut bytes = 0;
        for p in pkts.drain(..) {
            let v = cx.pool.get(&p);
            wire += v.meta.wire_packets();
            bytes += u64::from(v.meta.total_len);
            if self.capture_cap > 0 {
                if self.captured.len() == self.capture_cap {
                    self.captured.pop_front();
                }
                self.captured.push_back(crate::frame_bytes(cx.pool, &p));
            }
            cx.cache.free(p);
        }
        self.stats.tx_packets += wire;
        self.stats.tx_bytes += bytes;
        wire
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::{Pool, PoolConfig};

    fn flow(l4: L4, payload_len: usize, sport: u16) -> FlowSpec {
        FlowSpec {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: None,
            src: core::net::Ipv4Addr::new(192, 0, 2, 1).into(),
            dst: core::net::Ipv4Addr::new(198, 51, 100, 7).into(),
            l4,
            sport,
            dport: 5001,
            payload_len,
            ttl: 64,
            dont_frag: false,
        }
    }

    const IPV4_UDP_1B: [u8; 43] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x1d, 0x01, 0x02, 0x00, 0x00, 0x40, 0x11, 0x8d, 0x92, 0xc0, 0x00, 0x02, 0x01,
        0xc6, 0x33, 0x64, 0x07, 0x03, 0xe8, 0x13, 0x89, 0x00, 0x09, 0xfa, 0x2e, 0x02,
    ];

    /// `flow` over IPv6, documentation addresses (RFC 3849).
    fn flow6(l4: L4, payload_len: usize, sport: u16) -> FlowSpec {
        FlowSpec {
            src: "2001:db8::1".parse::<core::net::Ipv6Addr>().unwrap().into(),
            dst: "2001:db8:1::7"
                .parse::<core::net::Ipv6Addr>()
                .unwrap()
                .into(),
            ..flow(l4, payload_len, sport)
        }
    }

    fn make(flows: Vec<FlowSpec>, order: FlowOrder) -> (Pool, GenPort) {
        let pool = Pool::new(PoolConfig {
            buffers: 512,
            cache_size: 64,
            ..Default::default()
        })
        .unwrap();
        let cfg = GenConfig {
            flows,
            order,
            limit: None,
            timestamps: false,
            capture: 0,
            sequence: true,
        };
        let g = GenPort::new("gen0", 3, &cfg, 1900).unwrap();
        (pool, g)
    }

    /// Whatever path copies a template (a 64-byte block, a 128-byte block from the
    /// port's array, or the frame itself), a received frame is its flow's template
    /// patched for its sequence number, flows interleaved: IPv4 and IPv6 of sizes on
    /// either side of 64 and 128 bytes, with sequence numbers and without.
    #[test]
    fn every_template_size_is_received_whole() {
        let flows = vec![
            flow(L4::Udp, 1, 1000),   // 43 bytes
            flow6(L4::Udp, 12, 1001), // 74
            flow(L4::Udp, 22, 1002),  // 64
            flow6(L4::Udp, 3, 1003),  // 65
            flow6(L4::Tcp, 54, 1004), // 128
            flow6(L4::Udp, 67, 1005), // 129
            flow(L4::Udp, 60, 1006),  // 102
            flow6(L4::Udp, 1000, 1007),
        ];
        let want_len = [43, 74, 64, 65, 128, 129, 102, 1062];
        for sequence in [true, false] {
            let (pool, mut g) = make(flows.clone(), FlowOrder::Interleaved);
            g.sequence = sequence;
            assert_eq!(g.blocks128.len(), 4);
            let mut c = pool.cache();
            for round in 0..3u64 {
                let mut out = Vec::new();
                let n = g.rx(
                    &mut PortCx {
                        pool: &pool,
                        cache: &mut c,
                        now_ns: 0,
                    },
                    &mut out,
                    flows.len(),
                );
                assert_eq!(n, flows.len() as u64);
                for (i, p) in out.iter().enumerate() {
                    let got = pool.get(p).data().to_vec();
                    assert_eq!(got.len(), want_len[i], "flow {i}");
                    let want = if sequence {
                        g.frame_for(i, round).unwrap()
                    } else {
                        g.flows[i].frame.clone()
                    };
                    assert_eq!(got, want, "flow {i} round {round} sequence {sequence}");
                }
                c.free_all(&mut out);
            }
        }
    }

    /// Every generated frame parses and checksums correctly under etherparse, an
    /// independent implementation, across sequence numbers that exercise carries.
    #[test]
    fn frames_are_valid_under_an_independent_parser() {
        for (l4, len) in [
            (L4::Udp, 1),
            (L4::Udp, 0),
            (L4::Udp, 1458),
            (L4::Tcp, 1),
            (L4::Tcp, 1448),
            (L4::Udp, 5),
        ] {
            let (pool, mut g) = make(
                vec![flow(l4, len, 1000), flow(l4, len, 1001)],
                FlowOrder::Interleaved,
            );
            let mut c = pool.cache();
            for seq in [0u64, 1, 255, 256, 65535, 65536, 0x1234_5678_9abc] {
                g.flows[0].seq = seq;
                let mut out = Vec::new();
                assert_eq!(
                    g.rx(
                        &mut PortCx {
                            pool: &pool,
                            cache: &mut c,
                            now_ns: 0
                        },
                        &mut out,
                        1
                    ),
                    1
                );
                let bytes = pool.get(&out[0]).data().to_vec();
                assert_eq!(pool.get(&out[0]).meta.in_port, 3);
                c.free_all(&mut out);
                let pkt = etherparse::SlicedPacket::from_ethernet(&bytes).unwrap();
                let Some(etherparse::NetSlice::Ipv4(ip)) = pkt.net else {
                    panic!("not IPv4")
                };
                let h = ip.header().to_header();
                assert_eq!(
                    h.header_checksum,
                    h.calc_header_checksum(),
                    "{l4:?} {len} {seq}"
                );
                assert_eq!(h.identification, seq as u16);
                let payload = ip.payload().payload;
                match pkt.transport {
                    Some(etherparse::TransportSlice::Udp(u)) => {
                        let want = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
                        assert_eq!(u.checksum(), want, "{len} {seq}");
                        let n = len.min(8);
                        assert_eq!(u.payload()[..n], seq.to_be_bytes()[8 - n..]);
                    }
                    Some(etherparse::TransportSlice::Tcp(t)) => {
                        let want = t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap();
                        assert_eq!(t.checksum(), want, "{len} {seq}");
                        assert_eq!(t.sequence_number(), (seq as u32).wrapping_mul(len as u32));
                        assert!(t.ack());
                    }
                    other => panic!("unexpected transport {other:?} ({} bytes)", payload.len()),
                }
                g.flows[0].seq = seq;
                g.cur = 0;
                g.left_in_burst = 1;
            }
        }
    }

    /// IPv6 frames, tagged and not, parse and checksum under etherparse (the pseudo-header
    /// of RFC 8200 8.1) across sequence numbers that exercise carries; the payload
    /// carries the sequence and TCP's sequence number advances as over IPv4.
    #[test]
    fn ipv6_frames_are_valid_under_an_independent_parser() {
        for (l4, len, vlan) in [
            (L4::Udp, 1, None),
            (L4::Udp, 0, None),
            (L4::Udp, 1438, None),
            (L4::Tcp, 1, Some(7)),
            (L4::Tcp, 1428, None),
            (L4::Udp, 5, Some(100)),
        ] {
            let mut f = flow6(l4, len, 1000);
            f.vlan = vlan;
            f.ttl = 17;
            let (pool, mut g) = make(vec![f.clone(), f], FlowOrder::Interleaved);
            let mut c = pool.cache();
            for seq in [0u64, 1, 255, 256, 65535, 65536, 0x1234_5678_9abc] {
                g.flows[0].seq = seq;
                g.cur = 0;
                g.left_in_burst = 1;
                let mut out = Vec::new();
                let mut cx = PortCx {
                    pool: &pool,
                    cache: &mut c,
                    now_ns: 0,
                };
                assert_eq!(g.rx(&mut cx, &mut out, 1), 1);
                let bytes = pool.get(&out[0]).data().to_vec();
                c.free_all(&mut out);
                let pkt = etherparse::SlicedPacket::from_ethernet(&bytes).unwrap();
                let Some(etherparse::NetSlice::Ipv6(ip)) = pkt.net else {
                    panic!("not IPv6")
                };
                let h = ip.header().to_header();
                assert_eq!(h.hop_limit, 17);
                assert_eq!(
                    h.source,
                    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
                );
                assert_eq!(
                    usize::from(h.payload_length),
                    bytes.len() - 14 - 4 * usize::from(vlan.is_some()) - 40
                );
                match pkt.transport {
                    Some(etherparse::TransportSlice::Udp(u)) => {
                        let want = u.to_header().calc_checksum_ipv6(&h, u.payload()).unwrap();
                        assert_eq!(u.checksum(), want, "{len} {seq}");
                        let n = len.min(8);
                        assert_eq!(u.payload()[..n], seq.to_be_bytes()[8 - n..]);
                    }
                    Some(etherparse::TransportSlice::Tcp(t)) => {
                        let want = t.to_header().calc_checksum_ipv6(&h, t.payload()).unwrap();
                        assert_eq!(t.checksum(), want, "{len} {seq}");
                        assert_eq!(t.sequence_number(), (seq as u32).wrapping_mul(len as u32));
                        assert!(t.ack());
                    }
                    other => panic!("unexpected transport {other:?}"),
                }
            }
        }
        // One family per flow.
        let mixed = FlowSpec {
            dst: core::net::Ipv4Addr::new(192, 0, 2, 9).into(),
            ..flow6(L4::Udp, 1, 1)
        };
        let cfg = GenConfig::new(vec![mixed], FlowOrder::Interleaved);
        assert_eq!(
            GenPort::new("g", 0, &cfg, 1900).unwrap_err(),
            GenError::MixedFamilies
        );
    }

    /// An IPv4 frame is what it was before IPv6 templates existed: these bytes were
    /// computed apart from the generator, from RFC 791 and RFC 768 (UDP, 1-byte payload,
    /// sequence 0x0102: identification 0x0102, payload 0x02).
    #[test]
    fn ipv4_frames_are_unchanged() {
        let (pool, mut g) = make(vec![flow(L4::Udp, 1, 1000)], FlowOrder::Interleaved);
        g.flows[0].seq = 0x0102;
        let mut c = pool.cache();
        let mut out = Vec::new();
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut c,
            now_ns: 0,
        };
        g.rx(&mut cx, &mut out, 1);
        let bytes = pool.get(&out[0]).data().to_vec();
        c.free_all(&mut out);
        assert_eq!(bytes, IPV4_UDP_1B.to_vec());
    }

    #[test]
    fn flow_orders() {
        let sports = |g: &mut GenPort, pool: &Pool, n: usize| {
            let mut c = pool.cache();
            let mut out = Vec::new();
            g.rx(
                &mut PortCx {
                    pool,
                    cache: &mut c,
                    now_ns: 0,
                },
                &mut out,
                n,
            );
            let v: Vec<u16> = out
                .iter()
                .map(|p| u16::from_be_bytes([pool.get(p).data()[34], pool.get(p).data()[35]]))
                .collect();
            c.free_all(&mut out);
            v
        };
        let fl = vec![
            flow(L4::Udp, 1, 1),
            flow(L4::Udp, 1, 2),
            flow(L4::Udp, 1, 3),
        ];
        let (pool, mut g) = make(fl.clone(), FlowOrder::Interleaved);
        assert_eq!(sports(&mut g, &pool, 7), vec![1, 2, 3, 1, 2, 3, 1]);
        let (pool, mut g) = make(fl, FlowOrder::Bursty { burst: 2 });
        assert_eq!(sports(&mut g, &pool, 7), vec![1, 1, 2, 2, 3, 3, 1]);
        assert_eq!(
            "bursty:8".parse::<FlowOrder>(),
            Ok(FlowOrder::Bursty { burst: 8 })
        );
        assert!("bursty:0".parse::<FlowOrder>().is_err());
    }

    #[test]
    fn limit_and_exhaustion_are_respected() {
        let pool = Pool::new(PoolConfig {
            buffers: 4,
            cache_size: 4,
            ..Default::default()
        })
        .unwrap();
        let cfg = GenConfig {
            flows: vec![flow(L4::Udp, 1, 1)],
            order: FlowOrder::Interleaved,
            limit: Some(10),
            timestamps: false,
            capture: 2,
            sequence: true,
        };
        let mut g = GenPort::new("g", 0, &cfg, 1900).unwrap();
        let mut c = pool.cache();
        let mut out = Vec::new();
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut c,
            now_ns: 0,
        };
        assert_eq!(g.rx(&mut cx, &mut out, 64), 4, "pool of 4");
        assert_eq!(g.stats().rx_nobuf, 1);
        let _ = g.tx(&mut cx, &mut out);
        assert_eq!(g.stats().tx_packets, 4);
        assert_eq!(g.captured().len(), 2);
        assert_eq!(g.rx(&mut cx, &mut out, 64), 4);
        let _ = g.tx(&mut cx, &mut out);
        assert_eq!(g.rx(&mut cx, &mut out, 64), 2, "limit of 10");
        assert_eq!(g.rx(&mut cx, &mut out, 64), 0);
        let _ = g.tx(&mut cx, &mut out);
        assert!(
            GenPort::new(
                "g",
                0,
                &GenConfig {
                    flows: vec![],
                    ..cfg.clone()
                },
                1900
            )
            .is_err()
        );
        let big = GenConfig {
            flows: vec![flow(L4::Udp, 2000, 1)],
            ..cfg
        };
        assert_eq!(
            GenPort::new("g", 0, &big, 1900).unwrap_err(),
            GenError::TooLarge(2042)
        );
    }
}
