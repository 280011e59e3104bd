//! Ports: where packets enter and leave netbatch.
//!
//! A port receives into pool buffers (as a NIC's DMA would: it allocates from the
//! worker's cache and fills the buffer) and transmits lists of finished frames. Ports
//! never block. The `unsafe` of the crate lives in the kernel-facing backends, each block
//! with a `SAFETY` note; `generator` is safe code.
#![deny(unsafe_code)]

pub mod af_packet;
pub mod af_xdp;
pub mod generator;
pub mod link;
pub mod mem;
pub mod pcap;
pub mod sys;
pub mod tap;
#[cfg(test)]
mod testnet;
pub mod vhost_user;
pub mod vnet;

use netbatch_engine::{BufCache, PktList, Pool};
use netbatch_packet::offload::Features;

/// What a port may use.
pub struct PortCx<'a> {
    /// The buffer pool.
    pub pool: &'a Pool,
    /// The worker's buffer cache (receive allocates, transmit frees).
    pub cache: &'a mut BufCache,
    /// Monotonic time in nanoseconds.
    pub now_ns: u64,
}

/// Counters every port keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received, in wire packets (a super-frame from the kernel counts its
    /// segments).
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Receive attempts that found no free buffer (DPDK's `rx_nombuf`).
    pub rx_nobuf: u64,
    /// Frames dropped at receive by the port (ring overrun, malformed descriptor).
    pub rx_dropped: u64,
    /// Frames transmitted (wire frames: a super-packet taken whole counts its segments).
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames the port refused (left in the caller's list).
    pub tx_refused: u64,
    /// Frames not sent because the link was down (given while it was down, or taken
    /// back from the transmit ring when it went down).
    pub tx_link_down: u64,
    /// Frames handed to the kernel that it dropped (its `tx_dropped`, booked by the
    /// queues that sent; not in `tx_packets`).
    pub tx_kernel_dropped: u64,
}

/// Frames a port received and dropped itself (see [`Port::take_rx_drops`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// No free buffer: dropped, as a NIC drops a frame it has no descriptor for.
    pub no_buffer: u64,
    /// Longer than a buffer holds.
    pub too_long: u64,
}

impl RxDrops {
    /// Frames in all.
    pub fn total(&self) -> u64 {
        self.no_buffer + self.too_long
    }
}

/// Frames a port did not put on the wire, by why, since the last
/// [`Port::tx_drops`] (wire packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxDrops {
    /// Given to `tx` while the link was down: freed, never counted as transmitted.
    pub link_down: u64,
    /// Counted as transmitted when handed to the kernel, then taken back unsent when
    /// the link went down (the caller moves them from transmitted to dropped,
    /// `link_down`).
    pub flushed: u64,
    /// Counted as transmitted when handed to the kernel, which then dropped them (its
    /// `tx_dropped`; the caller moves them from transmitted to dropped,
    /// `kernel_tx_dropped`).
    pub kernel: u64,
}

impl TxDrops {
    /// Whether there is anything to count.
    pub fn any(&self) -> bool {
        self.link_down + self.flushed + self.kernel > 0
    }
}

/// A port.
pub trait Port: Send {
    /// The configured name.
    fn name(&self) -> &str;

    /// Receives up to `max` frames into `out` (appending); returns the wire packets they
    /// stand for (a super-frame from the kernel's TSO or GRO counts its segments).
    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64;

    /// Takes frames from the front of `pkts` for transmission, in order, and returns the
    /// wire packets they stand for (a super-packet taken whole counts its segments).
    /// Frames it cannot take now (ring full) stay in `pkts` for the caller to drop or
    /// retry.
    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64;

    /// Frames `rx` took off the wire and dropped since the last call, because no buffer
    /// was free or the frame was longer than a buffer: the caller counts them as
    /// received and dropped (`no_buffer`, `frame_too_long`), so they are not lost to the
    /// accounting. Ports whose frames wait (in a kernel ring) when no buffer is free
    /// report nothing here.
    fn take_rx_drops(&mut self) -> RxDrops {
        RxDrops::default()
    }

    /// Wire packets `tx` freed since the last call because this port can never send
    /// them (longer than its frames, or a super-packet it cannot segment); the caller
    /// counts them as dropped (`frame_too_long`). The configuration keeps such frames
    /// away from a port, so this stays 0 unless a frame slips past it.
    fn take_unsendable(&mut self) -> u64 {
        0
    }

    /// Once per round: follows the link (a queue whose link went down takes back what
    /// waits in its transmit ring, so that nothing leaves late), books the kernel's
    /// transmit drops, and reports what was not sent since the last call.
    fn tx_drops(&mut self, _cx: &mut PortCx<'_>) -> TxDrops {
        TxDrops::default()
    }

    /// The link state of the port's interface, for whoever follows the kernel's link
    /// events (`None`: the port has no kernel link to follow).
    fn link(&self) -> Option<std::sync::Arc<link::Link>> {
        None
    }

    /// Counters.
    fn stats(&self) -> PortStats;

    /// Frames this queue dropped at receive, by reason: `(reason, description, frames)`,
    /// every reason the backend keeps (zeros too), each frame also in
    /// [`PortStats::rx_dropped`]. A backend that keeps no reasons gives none.
    fn rx_drop_reasons(&self) -> Vec<(&'static str, &'static str, u64)> {
        Vec::new()
    }

    /// The concrete port, for tools and tests that need its own API (captured frames of
    /// a `mem` port, for instance).
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;

    /// Why the port stopped working (its interface went away, its socket failed), once
    /// it has; it then receives and transmits nothing more.
    fn fault(&self) -> Option<&str> {
        None
    }

    /// How the queue works, for the log (`netbatch run` prints it at start).
    fn describe(&self) -> String {
        String::new()
    }

    /// A descriptor that becomes readable when frames wait to be received, for a worker
    /// that sleeps while idle.
    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// What a backend can carry, as the backend declares it: the configuration refuses the
/// offloads and MTUs a port's backend cannot honour ([`carries`]), so the frames they
/// would produce never reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carries {
    /// Transmit offloads (as [`Features::set`] names them) whose super-packets the
    /// backend cannot send whole; left off, the stack segments in software instead.
    pub tx_offloads_refused: &'static [&'static str],
    /// The longest frame it carries, link header and VLAN tags included (`None`: as
    /// long as the MTU allows).
    pub max_frame: Option<usize>,
    /// The smallest pool buffer (`[pool] buf_size`) the backend can use, when it has
    /// one (`None`: any the pool allows).
    pub min_buf_size: Option<u32>,
}

impl Carries {
    /// Carries whatever the stack produces.
    pub const ANYTHING: Self = Self {
        tx_offloads_refused: &[],
        max_frame: None,
        min_buf_size: None,
    };

    /// Bytes a frame holds beyond its MTU: the Ethernet header and two VLAN tags.
    pub const LINK_OVERHEAD: usize =
        netbatch_wire::ethernet::HEADER_LEN + 2 * netbatch_wire::vlan::HEADER_LEN;

    /// The largest MTU: the longest frame less [`Carries::LINK_OVERHEAD`].
    pub const fn max_mtu(&self) -> Option<usize> {
        match self.max_frame {
            Some(f) => Some(f - Self::LINK_OVERHEAD),
            None => None,
        }
    }

    /// Whether super-packets of the transmit offload `feature` cannot be sent whole.
    pub fn refuses_tx(&self, feature: &str) -> bool {
        self.tx_offloads_refused.contains(&feature)
    }
}

/// What the backend of a port kind carries, by the name a configuration gives the kind
/// (`af_xdp`, `af_packet`, `tap`, `gen`, `pcap`: replayed through the in-memory port);
/// `None` for an unknown one.
pub fn carries(kind: &str) -> Option<Carries> {
    match kind {
        "af_xdp" => Some(af_xdp::CARRIES),
        "af_packet" => Some(af_packet::CARRIES),
        "tap" => Some(tap::CARRIES),
        "gen" => Some(generator::CARRIES),
        "pcap" => Some(pcap::CARRIES),
        "vhost_user" => Some(vhost_user::CARRIES),
        _ => None,
    }
}

/// Which queue of a kernel-backed port a worker opens: every worker has one queue of
/// every port, to transmit; the workers named in the port's `rx_workers` receive on theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// The port's configured name (for errors and logs).
    pub name: String,
    /// The port's index, stamped as `Meta::in_port` on received frames.
    pub index: u16,
    /// The kernel interface.
    pub interface: String,
    /// The worker the queue belongs to.
    pub worker: usize,
    /// This worker's position among the port's receiving workers (`None`: transmit only).
    pub rx_member: Option<usize>,
    /// How many workers receive from the port.
    pub rx_members: usize,
    /// Offloads asked for in the configuration (`rx-checksum` and the GRO features are
    /// the stack's; a backend turns on what it can do and reports it from `features`).
    pub features: Features,
    /// Bytes a pool buffer holds after its headroom (larger frames are chained or
    /// dropped, as the backend says).
    pub room: usize,
}

/// The bytes of a frame, following its buffer chain (payload continuation of a standard
/// GSO super-packet); for captures and tests.
pub fn frame_bytes(pool: &Pool, p: &netbatch_engine::Pkt) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cur = Some(p);
    while let Some(q) = cur {
        let v = pool.get(q);
        out.extend_from_slice(v.data());
        cur = v.meta.chain.as_ref();
    }
    out
}

/// A packet of `cache`'s pool holding `frame`, marked as the stack leaves a frame whose
/// L4 checksum a device is to complete: `flag::L4_CSUM_PARTIAL`, headers located.
#[cfg(test)]
pub(crate) fn partial_packet(
    pool: &Pool,
    cache: &mut BufCache,
    frame: &[u8],
) -> netbatch_engine::Pkt {
    let mut p = cache.alloc().expect("a free buffer");
    let mut v = pool.get_mut(&mut p);
    v.append(frame.len())
        .expect("room for the frame")
        .copy_from_slice(frame);
    v.meta.flags |= netbatch_packet::meta::flag::L4_CSUM_PARTIAL;
    netbatch_packet::dissect::frame(&mut v);
    p
}

/// Completes the partial L4 checksum of a frame the stack marked so
/// (`flag::L4_CSUM_PARTIAL`), as a device's checksum offload does on transmit; `frame`
/// holds the packet's bytes from its first (`Meta::data`) on. Other frames are left alone.
/// The TCP or UDP checksum field (holding the pseudo-header sum) becomes the checksum
/// over the L4 bytes up to the IP length (IPv4 total length, IPv6 40 + payload length;
/// link-layer padding excluded; RFC 1071).
pub(crate) fn complete_partial(m: &netbatch_engine::Meta, frame: &mut [u8]) {
    let Some((l4, field)) = netbatch_packet::offload::partial_checksum(m) else {
        return;
    };
    let l3 = usize::from(m.l3.wrapping_sub(m.data));
    let Some(ip) = frame.get(l3..).and_then(<[u8]>::first_chunk::<20>) else {
        return;
    };
    let ip_len = if ip[0] >> 4 == 6 {
        netbatch_wire::ipv6::HEADER_LEN + usize::from(u16::from_be_bytes([ip[4], ip[5]]))
    } else {
        usize::from(netbatch_wire::ipv4::Ipv4Packet::new_unchecked(ip).total_len())
    };
    let end = (l3 + ip_len).min(frame.len());
    if end < l4 + field + 2 {
        return;
    }
    vnet::complete(&mut frame[..end], l4, field);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each backend declares what the configuration refused before the declarations
    /// existed: AF_XDP has no segmentation offload and 1792-byte frames (MTU 1770),
    /// AF_PACKET and TAP cannot send a fraglist chain whole, the in-memory ports take
    /// anything.
    #[test]
    fn each_backend_declares_what_it_carries() {
        let xdp = carries("af_xdp").unwrap();
        assert_eq!(
            xdp.tx_offloads_refused,
            ["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"]
        );
        assert_eq!(xdp.max_frame, Some(af_xdp::MAX_RX_FRAME));
        assert_eq!(xdp.max_mtu(), Some(af_xdp::MAX_RX_FRAME - 14 - 8));
        assert_eq!(xdp.max_mtu(), Some(1770));
        for kind in ["af_packet", "tap"] {
            let c = carries(kind).unwrap();
            assert_eq!(c.tx_offloads_refused, ["tx-gso-list"], "{kind}");
            assert!(c.refuses_tx("tx-gso-list") && !c.refuses_tx("tx-tcp-segmentation"));
            assert_eq!(c.max_mtu(), None, "{kind}");
        }
        for kind in ["gen", "pcap"] {
            assert_eq!(carries(kind), Some(Carries::ANYTHING), "{kind}");
        }
        assert_eq!(carries("weird"), None);
    }

    /// A refused offload is one the configuration knows, or refusing it would refuse
    /// nothing.
    #[test]
    fn refused_offloads_are_known_transmit_features() {
        for kind in ["af_xdp", "af_packet", "tap", "gen", "pcap"] {
            for f in carries(kind).unwrap().tx_offloads_refused {
                assert!(Features::NAMES.contains(f), "{kind}: {f}");
                assert!(f.starts_with("tx-"), "{kind}: {f}");
            }
        }
    }
}
