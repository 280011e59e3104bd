//! UDP sink: receives in batches from its sockets, counts, and optionally checks payloads.
//!
//! With checking on, each datagram's first `min(8, len)` payload bytes must carry the
//! sender's per-flow sequence number (as the `gen` port writes it), one more than the
//! previous datagram of that flow (modulo the bytes carried): anything else is counted as
//! out of order. A flow is (source address, source port, destination port).

use netbatch_engine::{Cx, Pkt};
use netbatch_stack::Host;
use netbatch_stack::udp::datagram;
use netbatch_stack::udp::socket::SocketId;

use super::App;

/// Sink counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Datagrams received (a GRO super-datagram counts its segments).
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams whose sequence number was not the next of their flow.
    pub out_of_order: u64,
    /// Flows seen.
    pub flows: u64,
}

/// The sink.
#[derive(Debug)]
pub struct UdpSink {
    sockets: Vec<SocketId>,
    batch: usize,
    check: bool,
    last: hashbrown::HashMap<(u32, u16, u16), u64, foldhash::fast::FixedState>,
    buf: Vec<Pkt>,
    /// Counters.
    pub stats: SinkStats,
}

impl UdpSink {
    /// A sink reading `sockets`, `batch` datagrams per socket per poll.
    pub fn new(sockets: Vec<SocketId>, batch: usize, check: bool) -> Self {
        Self {
            sockets,
            batch,
            check,
            last: hashbrown::HashMap::default(),
            buf: Vec::with_capacity(batch),
            stats: SinkStats::default(),
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
                Some(prev) if prev.wrapping_add(1) & mask != seq => self.stats.out_of_order += 1,
                Some(_) => {}
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
        for i in 0..self.sockets.len() {
            let Some(s) = host.sockets.get_mut(self.sockets[i]) else {
                continue;
            };
            if s.recv_batch(&mut self.buf, self.batch) == 0 {
                continue;
            }
            let mut buf = core::mem::take(&mut self.buf);
            for p in buf.drain(..) {
                let v = cx.pool.get(&p);
                let wire = v.meta.wire_packets();
                if let Some(d) = datagram(&v) {
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
        total
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("datagrams", self.stats.datagrams),
            ("bytes", self.stats.bytes),
            ("out_of_order", self.stats.out_of_order),
            ("flows", self.stats.flows),
        ]
    }
}
