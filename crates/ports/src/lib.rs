//! Ports: where packets enter and leave netbatch.
//!
//! A port receives into pool buffers (as a NIC's DMA would: it allocates from the
//! worker's cache and fills the buffer) and transmits lists of finished frames. Ports
//! never block. The `unsafe` of the crate lives in the kernel-facing backends, each block
//! with a `SAFETY` note; `generator` is safe code.
#![deny(unsafe_code)]

pub mod generator;
pub mod mem;
pub mod pcap;

use netbatch_engine::offload::Features;
use netbatch_engine::{BufCache, PktList, Pool};

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
    /// Frames received.
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
}

/// A port.
pub trait Port: Send {
    /// The configured name.
    fn name(&self) -> &str;

    /// Offloads the port performs.
    fn features(&self) -> Features {
        Features::default()
    }

    /// Receives up to `max` frames into `out` (appending); returns how many.
    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> usize;

    /// Takes frames from the front of `pkts` for transmission, in order, and returns the
    /// wire packets they stand for (a super-packet taken whole counts its segments).
    /// Frames it cannot take now (ring full) stay in `pkts` for the caller to drop or
    /// retry.
    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64;

    /// Counters.
    fn stats(&self) -> PortStats;

    /// The concrete port, for tools and tests that need its own API (captured frames of
    /// a `mem` port, for instance).
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
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
