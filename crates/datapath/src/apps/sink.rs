//! UDP sink: receives in batches from its sockets, counts, and optionally checks payloads.
//!
//! With checking on, each datagram's first `min(8, len)` payload bytes must carry the
//! sender's per-flow sequence number (as the `gen` port writes it), one more than the
//! previous datagram of that flow (modulo the bytes carried): a number behind that is
//! counted as out of order, one ahead as a gap (datagrams lost before it). A flow is
//! (source address, source port, destination port). The flows checked are kept in a table
//! of fixed capacity, allocated when the sink is built ([`DEFAULT_FLOWS`], or
//! [`UdpSink::with_flow_capacity`]): once it is full, datagrams of further flows are
//! counted in [`SinkStats::flow_overflow`] and not checked, and receiving never allocates.
//!
//! Optionally, as an application on a multi-worker datapath would: it records each flow
//! it reads for RFS (the kernel's `sock_rps_record_flow`), so the flow is processed on
//! its worker; it records the latency from the frame's receive timestamp to its reading;
//! and it adds what it read to a counter shared with whoever waits for the traffic.

use core::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use netbatch_engine::{Cx, Pkt};
use netbatch_stack::Host;
use netbatch_stack::meta::flag;
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
    /// Flows seen (and tracked).
    pub flows: u64,
    /// Datagrams of flows that found the flow table full (not checked for order).
    pub flow_overflow: u64,
}

/// Flows a checking sink tracks unless told otherwise.
pub const DEFAULT_FLOWS: usize = 4096;

/// A flow: source address, source port, destination port (IPv4; IPv6 flows are kept in
/// a table of their own, so that an IPv4 flow's key stays one word).
type FlowKey = (u32, u16, u16);
/// An IPv6 flow.
type FlowKey6 = (u128, u16, u16);

/// The sink.
#[derive(Debug)]
pub struct UdpSink {
    sockets: Vec<Arc<UdpSocket>>,
    batch: usize,
    check: bool,
    /// Per flow, the highest sequence number seen. Allocated for `flow_cap` flows at
    /// construction and never grown: no flow is ever removed, so up to `flow_cap`
    /// insertions fit without a reallocation.
    last: hashbrown::HashMap<FlowKey, u64, foldhash::fast::FixedState>,
    /// The same for IPv6 flows (the two tables together track at most `flow_cap`).
    last6: hashbrown::HashMap<FlowKey6, u64, foldhash::fast::FixedState>,
    flow_cap: usize,
    buf: Vec<Pkt>,
    rfs: Option<(Arc<Fabric>, usize)>,
    latency: Option<(Histogram, quanta::Clock)>,
    progress: Option<Arc<AtomicU64>>,
    /// Counters.
    pub stats: SinkStats,
}

impl UdpSink {
    /// A sink reading `sockets`, `batch` datagrams per socket per poll; checking, it
    /// tracks up to [`DEFAULT_FLOWS`] flows.
    pub fn new(sockets: Vec<Arc<UdpSocket>>, batch: usize, check: bool) -> Self {
        let flow_cap = if check { DEFAULT_FLOWS } else { 0 };
        Self {
            sockets,
            batch,
            check,
            last: Self::flow_table(flow_cap),
            last6: Self::flow_table(flow_cap),
            flow_cap,
            buf: Vec::with_capacity(batch),
            rfs: None,
            latency: None,
            progress: None,
            stats: SinkStats::default(),
        }
    }

    fn flow_table<K>(cap: usize) -> hashbrown::HashMap<K, u64, foldhash::fast::FixedState> {
        hashbrown::HashMap::with_capacity_and_hasher(cap, foldhash::fast::FixedState::default())
    }

    /// Tracks up to `flows` flows when checking (the table is allocated here, whole);
    /// datagrams of flows beyond them are counted in [`SinkStats::flow_overflow`].
    pub fn with_flow_capacity(mut self, flows: usize) -> Self {
        self.flow_cap = if self.check { flows } else { 0 };
        self.last = Self::flow_table(self.flow_cap);
        self.last6 = Self::flow_table(self.flow_cap);
        self
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

    /// Checks the datagram(s) of flow (source, source port, destination port) carrying
    /// `payload` in `segment`-byte segments (0: one datagram).
    fn check_one(&mut self, (src, sport, dport): (IpAddr, u16, u16), payload: &[u8], segment: u16) {
        let tracked = self.last.len() + self.last6.len();
        let room = tracked < self.flow_cap;
        match src {
            IpAddr::V4(a) => check_flow(
                &mut self.last,
                &mut self.stats,
                room,
                (u32::from(a), sport, dport),
                payload,
                segment,
            ),
            IpAddr::V6(a) => check_flow(
                &mut self.last6,
                &mut self.stats,
                room,
                (u128::from(a), sport, dport),
                payload,
                segment,
            ),
        }
    }
}

/// Checks the sequence numbers of `payload` (in `segment`-byte segments, 0: one
/// datagram) of flow `key` against the highest seen in `last`, which takes a new flow
/// only when there is `room`.
fn check_flow<K: core::hash::Hash + Eq + Copy>(
    last_seen: &mut hashbrown::HashMap<K, u64, foldhash::fast::FixedState>,
    stats: &mut SinkStats,
    room: bool,
    key: K,
    payload: &[u8],
    segment: u16,
) {
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
        match last_seen.get_mut(&key) {
            Some(last) => {
                // How far past the expected number this one is, modulo the bytes
                // carried: ahead (within half the range) is a gap, behind is a
                // datagram overtaken by a later one (and the sink keeps expecting
                // what follows the highest number seen).
                let ahead = seq.wrapping_sub(last.wrapping_add(1)) & mask;
                if ahead == 0 {
                    *last = seq;
                } else if ahead <= mask / 2 {
                    stats.gaps += ahead;
                    *last = seq;
                } else {
                    stats.out_of_order += 1;
                }
            }
            // Within capacity: no reallocation (nothing is ever removed).
            None if room => {
                last_seen.insert(key, seq);
                stats.flows += 1;
            }
            None => stats.flow_overflow += 1,
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
                self.check_one((d.src, d.src_port, d.dst_port), part, d.segment_size);
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
                                (d.src, d.src_port, d.dst_port),
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
            ("flow_overflow", self.stats.flow_overflow),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::{Accounting, Pool, PoolConfig};
    use netbatch_stack::udp::socket::Sockets;

    /// Feeds one datagram per sequence number of flow `sport` (payload: the number in
    /// `width` big-endian bytes, as the generator writes it).
    fn feed(s: &mut UdpSink, sport: u16, width: usize, seqs: &[u64]) {
        const SRC: IpAddr = IpAddr::V4(core::net::Ipv4Addr::new(198, 51, 100, 7));
        for &q in seqs {
            let b = q.to_be_bytes();
            s.check_one((SRC, sport, 9), &b[8 - width..], 0);
        }
    }

    /// Reordered and missing numbers, counted by hand. Flow 1 (1-byte numbers):
    /// 0 1 2 5 3 6 7: 5 comes where 3 was due (gaps += 2: 3 and 4), 3 is behind the
    /// highest seen (out of order 1), 6 follows 5 (the expectation stayed at 5's
    /// successor), 7 follows. Flow 2, interleaved: 10 12 11 11: one gap (11), then 11
    /// twice behind 12 (out of order 2). Flow 3 wraps 254 255 0 1 (1 byte: in order).
    /// Totals: gaps 3, out of order 3, flows 3.
    #[test]
    fn reordered_and_missing_sequence_numbers() {
        let mut s = UdpSink::new(Vec::new(), 8, true);
        let f1 = [0, 1, 2, 5, 3, 6, 7];
        let f2 = [10, 12, 11, 11];
        let f3 = [254, 255, 0, 1];
        for i in 0..f1.len() {
            feed(&mut s, 1, 1, &f1[i..=i]);
            if let Some(q) = f2.get(i) {
                feed(&mut s, 2, 1, &[*q]);
            }
            if let Some(q) = f3.get(i) {
                feed(&mut s, 3, 1, &[*q]);
            }
        }
        assert_eq!(s.stats.gaps, 2 + 1);
        assert_eq!(s.stats.out_of_order, 1 + 2);
        assert_eq!(s.stats.flows, 3);
        assert_eq!(s.stats.flow_overflow, 0);
    }

    /// Wider numbers: 8 bytes 1000 1003 1001 1004 (gaps 2: 1001, 1002; 1001 behind: out
    /// of order 1; 1004 in order); 2 bytes 0xfffe 0xffff 0x0000 0x0003 (wraps, then gaps
    /// 2).
    #[test]
    fn wide_sequence_numbers() {
        let mut s = UdpSink::new(Vec::new(), 8, true);
        feed(&mut s, 1, 8, &[1000, 1003, 1001, 1004]);
        assert_eq!((s.stats.gaps, s.stats.out_of_order), (2, 1));
        feed(&mut s, 2, 2, &[0xfffe, 0xffff, 0, 3]);
        assert_eq!((s.stats.gaps, s.stats.out_of_order), (4, 1));
    }

    /// A table of 2 flows: a third flow's datagrams are counted as overflow and not
    /// checked (its gap is not seen), the two tracked flows still are; the table's
    /// allocation does not change (capacity before = after).
    #[test]
    fn flow_table_is_bounded() {
        let mut s = UdpSink::new(Vec::new(), 8, true).with_flow_capacity(2);
        let cap = s.last.capacity();
        assert!(cap >= 2);
        feed(&mut s, 1, 1, &[0, 1]);
        feed(&mut s, 2, 1, &[0, 2]); // gap 1
        feed(&mut s, 3, 1, &[0, 5, 1]); // untracked
        feed(&mut s, 1, 1, &[3]); // gap 1
        assert_eq!(s.stats.flows, 2);
        assert_eq!(s.stats.flow_overflow, 3);
        assert_eq!((s.stats.gaps, s.stats.out_of_order), (2, 0));
        assert_eq!(s.last.len(), 2);
        assert_eq!(s.last.capacity(), cap, "never grown");
    }

    /// The receive path end to end: datagrams (built with etherparse, laid out as the
    /// UDP stage leaves them) queued on a socket and read by `poll`: counts, bytes and
    /// order checked as computed by hand (flow 1: 0 2 1 → gap 1, out of order 1; flows
    /// 2..=5 one datagram each with a table of 4: one overflow), every buffer freed and
    /// delivered, and neither the flow table nor the read buffer reallocated.
    #[test]
    fn poll_reads_checks_and_frees() {
        let pool = Pool::new(PoolConfig {
            buffers: 64,
            cache_size: 16,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut cache = pool.cache();
        let headroom = usize::from(pool.config().headroom);
        let socks = Sockets::new();
        let (_, sock) = socks.open(core::net::Ipv4Addr::UNSPECIFIED, 9, 64).unwrap();
        // The sink reads only its sockets: a host with no interface is enough.
        let mut host = Host::new(
            Vec::new(),
            Vec::new(),
            Arc::new(netbatch_stack::route::Routes::new()),
            netbatch_stack::host::HostParams::default(),
        );
        let mut queue = |sport: u16, seq: u8, len: usize| {
            let mut payload = vec![0xa5; len];
            payload[0] = seq;
            let b = etherparse::PacketBuilder::ipv4([198, 51, 100, 7], [198, 51, 100, 1], 64)
                .udp(sport, 9);
            let mut bytes = Vec::new();
            b.write(&mut bytes, &payload).unwrap();
            let mut p = cache.alloc().unwrap();
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(headroom, &bytes));
            v.meta.l3 = v.meta.data;
            v.meta.l4 = v.meta.data + 20;
            sock.enqueue(p, 1).unwrap();
        };
        queue(1, 0, 1);
        queue(1, 2, 1);
        queue(1, 1, 1);
        for f in 2..=5 {
            queue(f, 0, 3);
        }
        let mut sink = UdpSink::new(vec![sock.clone()], 16, true).with_flow_capacity(4);
        let (flow_cap, buf_cap) = (sink.last.capacity(), sink.buf.capacity());
        let mut acct = Accounting::default();
        let n = sink.poll(
            &mut host,
            &mut Cx {
                pool: &pool,
                cache: &mut cache,
                now_ns: 0,
                acct: &mut acct,
            },
        );
        assert_eq!(n, 7);
        assert_eq!(
            sink.stats,
            SinkStats {
                datagrams: 7,
                bytes: 3 + 4 * 3,
                out_of_order: 1,
                gaps: 1,
                flows: 4,
                flow_overflow: 1,
            }
        );
        assert_eq!(acct.delivered, 7);
        assert_eq!(sink.last.capacity(), flow_cap);
        assert_eq!(sink.buf.capacity(), buf_cap);
        drop(cache);
        assert_eq!(pool.free_in_pool(), 64);
    }
}
