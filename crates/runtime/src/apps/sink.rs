//! UDP sink: receives in batches from its sockets, counts, and optionally checks payloads.
//!
//! With checking on, each datagram's first `min(8, len)` payload bytes must carry the
//! sender's per-flow sequence number (as the `gen` port writes it), one more than the
//! previous datagram of that flow (modulo the bytes carried): a number behind that is
//! counted as out of order, one ahead as a gap (datagrams lost before it). A flow is
//! (source address, source port, destination port).
//!
//! Optionally, as an application on a multi-worker datapath would: it records each flow
//! it reads for RFS (the kernel's `sock_rps_record_flow`), so the flow is processed on
//! its worker; it records the latency from the frame's receive timestamp to its reading;
//! and it adds what it read to a counter shared with whoever waits for the traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use netbatch_engine::meta::flag;
use netbatch_engine::{Cx, Pkt};
use netbatch_stack::Host;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::UdpSocket;

use super::App;
use crate::latency::Histogram;
use crate::rps::Fabric;

/// Sink counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Datagrams received (a GRO super-datagram counts its segments).
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams that came after a later datagram of their flow (reordered).
    pub out_of_order: u64,
    /// Datagrams missing where a later one arrived (lost, or not there yet).
    pub gaps: u64,
    /// Flows seen.
    pub flows: u64,
}

/// The sink.
#[derive(Debug)]
pub struct UdpSink {
    sockets: Vec<Arc<UdpSocket>>,
    batch: usize,
    check: bool,
    last: hashbrown::HashMap<(u32, u16, u16), u64, foldhash::fast::FixedState>,
    buf: Vec<Pkt>,
    rfs: Option<(Arc<Fabric>, usize)>,
    latency: Option<(Histogram, quanta::Clock)>,
    progress: Option<Arc<AtomicU64>>,
    /// Counters.
    pub stats: SinkStats,
}

impl UdpSink {
    /// A sink reading `sockets`, `batch` datagrams per socket per poll.
    pub fn new(sockets: Vec<Arc<UdpSocket>>, batch: usize, check: bool) -> Self {
        Self {
            sockets,
            batch,
            check,
            last: hashbrown::HashMap::default(),
            buf: Vec::with_capacity(batch),
            rfs: None,
            latency: None,
            progress: None,
            stats: SinkStats::default(),
        }
    }

    /// Records the flows it reads for RFS, as the application of `worker`.
    pub fn with_rfs(mut self, fabric: Arc<Fabric>, worker: usize) -> Self {
        self.rfs = Some((fabric, worker));
        self
    }

    /// Records each datagram's latency, receive timestamp to reading, in TSC ticks.
    pub fn with_latency(mut self) -> Self {
        self.latency = Some((Histogram::new(), netbatch_engine::time::clock()));
        self
    }

    /// Adds the datagrams it reads to `counter`.
    pub fn with_progress(mut self, counter: Arc<AtomicU64>) -> Self {
        self.progress = Some(counter);
        self
    }

    /// The latency histogram (TSC ticks), if recorded.
    pub fn latency(&self) -> Option<&Histogram> {
        self.latency.as_ref().map(|(h, _)| h)
    }

    /// Forgets the latencies recorded so far.
    pub fn reset_latency(&mut self) {
        if let Some((h, _)) = self.latency.as_mut() {
            h.clear();
        }
    }

    fn check_one(&mut self, key: (u32, u16, u16), payload: &[u8], segment: u16) {
        let seg = if segment == 0 {
            payload.len().max(1)
        } else {
            usize::from(segment)
        };
        for chunk in payload.chunks(seg) {
            let n = chunk.len().min(8);
            if n == 0 {
                continue;
            }
            let mut b = [0u8; 8];
            b[8 - n..].copy_from_slice(&chunk[..n]);
            let seq = u64::from_be_bytes(b);
            let mask = if n == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * n)) - 1
            };
            match self.last.insert(key, seq) {
                Some(prev) => {
                    // How far past the expected number this one is, modulo the bytes
                    // carried: ahead (within half the range) is a gap, behind is a
                    // datagram overtaken by a later one.
                    let ahead = seq.wrapping_sub(prev.wrapping_add(1)) & mask;
                    if ahead == 0 {
                    } else if ahead <= mask / 2 {
                        self.stats.gaps += ahead;
                    } else {
                        self.stats.out_of_order += 1;
                        // Keep expecting what followed the highest number seen.
                        self.last.insert(key, prev);
                    }
                }
                None => self.stats.flows += 1,
            }
        }
    }
}

impl UdpSink {
    /// A GRO super-datagram: its payload lies in one buffer per merged segment.
    #[cold]
    fn super_datagram(
        &mut self,
        pool: &netbatch_engine::Pool,
        d: &netbatch_stack::udp::Datagram<'_>,
    ) {
        for part in d.payload_parts(pool) {
            self.stats.bytes += part.len() as u64;
            if self.check {
                self.check_one(
                    (u32::from(d.src), d.src_port, d.dst_port),
                    part,
                    d.segment_size,
                );
            }
        }
    }
}

impl App for UdpSink {
    fn name(&self) -> &str {
        "udp-sink"
    }

    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize {
        let mut total = 0;
        let _ = host;
        for i in 0..self.sockets.len() {
            if self.sockets[i].recv_batch(&mut self.buf, self.batch) == 0 {
                continue;
            }
            let now = self.latency.as_ref().map_or(0, |(_, c)| c.raw());
            let extra = self.latency.is_some() || self.rfs.is_some();
            let mut buf = core::mem::take(&mut self.buf);
            for p in buf.drain(..) {
                let v = cx.pool.get(&p);
                let wire = v.meta.wire_packets();
                if extra {
                    if let Some((h, _)) = self.latency.as_mut()
                        && v.meta.rx_tsc != 0
                    {
                        h.record(now.saturating_sub(v.meta.rx_tsc));
                    }
                    if let Some((f, w)) = &self.rfs
                        && v.meta.flags & flag::HASH_VALID != 0
                    {
                        f.record_flow(v.meta.hash, *w);
                    }
                }
                if !self.check {
                    // Counting only: the payload length from the metadata (the UDP stage
                    // left the datagram as IP header, UDP header, payload).
                    let hdr = u32::from(v.meta.l4.wrapping_sub(v.meta.data)) + 8;
                    self.stats.bytes += u64::from(v.meta.total_len.saturating_sub(hdr));
                } else if let Some(d) = datagram(&v) {
                    if !d.is_chained() {
                        self.stats.bytes += d.payload.len() as u64;
                        if self.check {
                            self.check_one(
                                (u32::from(d.src), d.src_port, d.dst_port),
                                d.payload,
                                d.segment_size,
                            );
                        }
                    } else {
                        self.super_datagram(cx.pool, &d);
                    }
                }
                self.stats.datagrams += wire;
                total += wire as usize;
                cx.deliver(wire);
                cx.cache.free(p);
            }
            self.buf = buf;
        }
        if total > 0
            && let Some(c) = &self.progress
        {
            c.fetch_add(total as u64, Ordering::Relaxed);
        }
        total
    }

    fn latency(&self) -> Option<&Histogram> {
        Self::latency(self)
    }

    fn clear_latency(&mut self) {
        self.reset_latency();
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("datagrams", self.stats.datagrams),
            ("bytes", self.stats.bytes),
            ("out_of_order", self.stats.out_of_order),
            ("gaps", self.stats.gaps),
            ("flows", self.stats.flows),
        ]
    }
}
