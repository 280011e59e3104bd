//! Opt-in packet trace (VPP's `trace add` / `show trace`): arm a worker's graph with a
//! [`TraceSpec`]; the receive path offers each frame to [`Trace::maybe_mark`], which marks
//! those that pass the spec's port filter and matcher while its count lasts; every stage
//! decision about a marked packet (its next arc, or its drop reason) is recorded with a
//! glimpse of the packet as the stage left it ([`View`]). [`Graph::take_trace`] takes
//! what was collected out of the worker.
//!
//! Invariants:
//! - Disarmed, the trace costs one predictable branch per stage call and nothing per
//!   packet: the receive path asks [`Trace::armed`] once per batch, the graph once per
//!   stage call (and once per dropped packet, as it always did).
//! - Memory is bounded: at most `count` traced packets, each a copy of at most
//!   `snap_len` bytes, and at most `records` records; records beyond the limit are
//!   counted ([`Trace::lost`]), not kept.
//! - Every marked packet gets a trace id, a sequence number of the worker that never
//!   repeats for the life of the graph (arming again, taking or clearing do not reset
//!   it), and every record names its packet by that id, not by its buffer (buffers are
//!   reused). The trace keeps which buffer holds which traced packet: a mapping is made
//!   when a frame is marked, forgotten when the buffer is received into again or the
//!   packet is dropped. A buffer a stage derives from a traced packet (a fragment, a
//!   segment: stages copy the flags, the trace flag with them) takes the id of the traced
//!   input it follows in the stage's output; a packet released from a stage's queue
//!   keeps its id. (A derived buffer whose index still maps to a traced packet that left
//!   by transmission or delivery, which the engine does not see, is taken for that
//!   packet: a known limit, rare, as a received frame in the buffer clears it.)
//! - A flagged packet the trace has no id for (flagged before the trace was disarmed
//!   and armed again) gets a fresh id, with no received frame.
//!
//! The engine knows no protocol: the matcher and the decoding of the recorded bytes
//! belong to the stack.
//!
//! [`Graph::take_trace`]: crate::Graph::take_trace

use std::collections::HashMap;
use std::fmt;

use crate::drop::Reason;
use crate::meta::flag;
use crate::pool::{Pkt, Pool};
use crate::stage::Out;

/// Decides from a received frame's bytes (from its link header) whether to trace it.
pub type Matcher = Box<dyn Fn(&[u8]) -> bool + Send>;

/// Bytes of a packet each record keeps (enough for Ethernet, two VLAN tags, IPv4
/// without options and the start of a TCP header).
pub const HEAD: usize = 64;

/// The most bytes of a received frame a trace keeps.
pub const MAX_SNAP: u32 = 65_535;

/// What to trace: how many received frames, which ones, and how much to keep.
pub struct TraceSpec {
    /// Frames to mark.
    pub count: u32,
    /// Records to keep at most (later ones are counted as lost).
    pub records: usize,
    /// Only frames received on this port (its index), when set.
    pub port: Option<u16>,
    /// Only frames this accepts, when set.
    pub matcher: Option<Matcher>,
    /// Bytes of each marked frame to keep (at most [`MAX_SNAP`]).
    pub snap_len: u32,
}

impl TraceSpec {
    /// Records kept per traced packet by default (a packet crosses about ten stages).
    pub const RECORDS_PER_PACKET: usize = 32;
    /// Bytes kept of each frame by default.
    pub const SNAP_LEN: u32 = 256;

    /// The next `count` frames from any port, their first [`Self::SNAP_LEN`] bytes, and
    /// [`Self::RECORDS_PER_PACKET`] records per packet.
    pub fn new(count: u32) -> Self {
        Self {
            count,
            records: (count as usize).saturating_mul(Self::RECORDS_PER_PACKET),
            port: None,
            matcher: None,
            snap_len: Self::SNAP_LEN,
        }
    }

    /// Only frames received on `port`.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Only frames `m` accepts.
    pub fn matcher(mut self, m: Matcher) -> Self {
        self.matcher = Some(m);
        self
    }

    /// At most `n` records.
    pub fn records(mut self, n: usize) -> Self {
        self.records = n;
        self
    }

    /// Keeps `n` bytes of each frame.
    pub fn snap_len(mut self, n: u32) -> Self {
        self.snap_len = n;
        self
    }
}

impl fmt::Debug for TraceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceSpec")
            .field("count", &self.count)
            .field("records", &self.records)
            .field("port", &self.port)
            .field("matcher", &self.matcher.is_some())
            .field("snap_len", &self.snap_len)
            .finish()
    }
}

/// What a stage decided about a traced packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// Sent on the node's arc with this index.
    Next(u8),
    /// Dropped.
    Drop(Reason),
    /// Taken by the stage: queued (for a socket, a neighbour, a port), handed over or
    /// consumed. The record's view is the packet as it entered the stage.
    Taken,
}

/// A traced packet as the stage left it: its key metadata and its first bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct View {
    /// Offset of the packet's first byte in its buffer (`Meta::data`).
    pub data: u16,
    /// Bytes of the packet in this buffer.
    pub len: u16,
    /// Offset of the L3 header in the buffer.
    pub l3: u16,
    /// Offset of the L4 header in the buffer (0: not located).
    pub l4: u16,
    /// What the dissector found at `l3` (the stack's code).
    pub l3_type: u8,
    /// The IP protocol number at `l4`.
    pub l4_type: u8,
    /// Bytes of link header the frame arrived with.
    pub l2_len: u8,
    /// Adjacency routing chose.
    pub adj: u32,
    /// Logical interface chosen for transmission (`u16::MAX`: none).
    pub out_if: u16,
    /// A stage's request to a later one.
    pub ask: crate::Ask,
    /// Firewall mark.
    pub mark: u32,
    /// Flag bits.
    pub flags: u32,
    /// Offset in the buffer of `head[0]`: the packet's start, or the link header it
    /// arrived with when a stage pulled it and it is still in front of the data.
    pub head_at: u16,
    head_len: u8,
    head: [u8; HEAD],
}

impl View {
    /// The packet's state in `p`.
    fn of(pool: &Pool, p: &Pkt) -> Self {
        let r = pool.get(p);
        let m = r.meta;
        // A frame whose link header was pulled still has it in front of the data.
        let link = m.l3.checked_sub(u16::from(m.l2_len));
        let head_at = match link {
            Some(s) if m.l3_type != 0 && s < m.data => s,
            _ => m.data,
        };
        let end = (usize::from(m.data) + usize::from(m.len)).min(r.buf.len());
        let start = usize::from(head_at);
        let bytes = r
            .buf
            .get(start..end.max(start))
            .map_or(&[][..], |b| &b[..b.len().min(HEAD)]);
        let mut head = [0u8; HEAD];
        head[..bytes.len()].copy_from_slice(bytes);
        Self {
            data: m.data,
            len: m.len,
            l3: m.l3,
            l4: m.l4,
            l3_type: m.l3_type,
            l4_type: m.l4_type,
            l2_len: m.l2_len,
            adj: m.adj,
            out_if: m.out_if,
            ask: m.ask,
            mark: m.mark,
            flags: m.flags,
            head_at,
            head_len: bytes.len() as u8,
            head,
        }
    }

    /// The bytes kept, from buffer offset `head_at`.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// The bytes kept from buffer offset `at` on (empty if `at` is outside them).
    pub fn from(&self, at: u16) -> &[u8] {
        at.checked_sub(self.head_at)
            .and_then(|o| self.head().get(usize::from(o)..))
            .unwrap_or(&[])
    }

    /// The bytes kept from the packet's start on.
    pub fn packet(&self) -> &[u8] {
        self.from(self.data)
    }
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("data", &self.data)
            .field("len", &self.len)
            .field("l3", &self.l3)
            .field("l4", &self.l4)
            .field("l3_type", &self.l3_type)
            .field("l4_type", &self.l4_type)
            .field("adj", &self.adj)
            .field("ask", &self.ask)
            .field("mark", &self.mark)
            .field("flags", &format_args!("{:#x}", self.flags))
            .field("head_at", &self.head_at)
            .field("head", &self.head())
            .finish()
    }
}

/// One stage's decision about one traced packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// The packet's trace id.
    pub id: u32,
    /// Node index.
    pub node: u16,
    /// The decision.
    pub event: TraceEvent,
    /// The packet as the stage left it.
    pub view: View,
}

/// A marked frame as it was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedPacket {
    /// Its trace id.
    pub id: u32,
    /// The port it arrived on (index).
    pub port: u16,
    /// When, in the worker's clock (nanoseconds).
    pub ts_ns: u64,
    /// Its length (over the buffer chain of a super-frame).
    pub orig_len: u32,
    /// Its first bytes (up to the snap length), from the link header.
    pub data: Vec<u8>,
}

/// Where an arc leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArcTarget {
    /// To this node.
    Node(&'static str),
    /// Nowhere: its packets are dropped for this reason.
    Drop(Reason),
}

/// A node's name and arcs, to name what records hold as indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceNode {
    /// The node's name.
    pub name: &'static str,
    /// Its arcs, in index order: name and target.
    pub arcs: Vec<(&'static str, ArcTarget)>,
}

/// What a trace collected, taken out of a worker's graph ([`Graph::take_trace`]).
///
/// [`Graph::take_trace`]: crate::Graph::take_trace
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceDump {
    /// The graph's nodes, in node order (what [`TraceRecord::node`] indexes).
    pub nodes: Vec<TraceNode>,
    /// The marked frames, in marking order.
    pub packets: Vec<TracedPacket>,
    /// The decisions, in the order they were taken.
    pub records: Vec<TraceRecord>,
    /// Records that did not fit.
    pub lost: u64,
}

impl TraceDump {
    /// The records of packet `id`, in order.
    pub fn records_of(&self, id: u32) -> impl Iterator<Item = &TraceRecord> {
        self.records.iter().filter(move |r| r.id == id)
    }

    /// The ids records name, each once, in order of first appearance (the marked
    /// frames' and any others').
    pub fn ids(&self) -> Vec<u32> {
        let mut seen = std::collections::HashSet::new();
        self.packets
            .iter()
            .map(|p| p.id)
            .chain(self.records.iter().map(|r| r.id))
            .filter(|id| seen.insert(*id))
            .collect()
    }
}

/// The trace state of one worker's graph.
#[derive(Default)]
pub struct Trace {
    /// Set from arming to disarming: stage decisions are recorded while set.
    armed: bool,
    to_mark: u32,
    port: Option<u16>,
    matcher: Option<Matcher>,
    snap_len: u32,
    limit: usize,
    next_id: u32,
    packets: Vec<TracedPacket>,
    records: Vec<TraceRecord>,
    lost: u64,
    /// Buffer index → trace id of the traced packet it holds.
    live: HashMap<u32, u32>,
    /// The current stage call's traced inputs, in input order.
    inputs: Vec<Input>,
    /// (buffer index, position in `inputs`), sorted.
    by_idx: Vec<(u32, usize)>,
}

/// A traced input of the current stage call.
struct Input {
    id: u32,
    /// Whether the stage's output or drops hold it.
    seen: bool,
    /// The packet as it entered.
    view: View,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("armed", &self.armed)
            .field("to_mark", &self.to_mark)
            .field("port", &self.port)
            .field("matcher", &self.matcher.is_some())
            .field("snap_len", &self.snap_len)
            .field("packets", &self.packets.len())
            .field("records", &self.records.len())
            .field("lost", &self.lost)
            .finish()
    }
}

impl Trace {
    /// Arms the trace (replacing an earlier spec; what was collected stays): the next
    /// `spec.count` frames that pass its filters get the trace flag and an id, and
    /// decisions are recorded until [`Self::disarm`].
    pub fn arm(&mut self, spec: TraceSpec) {
        self.armed = true;
        self.to_mark = spec.count;
        self.port = spec.port;
        self.matcher = spec.matcher;
        self.snap_len = spec.snap_len.min(MAX_SNAP);
        self.limit = spec.records;
        let want = self.limit.min(4096).saturating_sub(self.records.len());
        self.records.reserve(want);
        self.packets.reserve((spec.count as usize).min(4096));
    }

    /// Stops marking and recording and forgets everything collected and the spec.
    pub fn disarm(&mut self) {
        *self = Self {
            next_id: self.next_id,
            ..Self::default()
        };
    }

    /// Whether stage decisions are being recorded (from [`Self::arm`] to
    /// [`Self::disarm`], also after the count ran out: marked packets may still be in
    /// flight).
    #[inline(always)]
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Frames still to mark.
    pub fn remaining(&self) -> u32 {
        self.to_mark
    }

    /// Called by the receive path for each frame while armed, with the port it came
    /// from and the time: marks it (trace flag, id, a copy of its first bytes) if it
    /// passes the port filter and the matcher while the count lasts.
    #[inline]
    pub fn maybe_mark(&mut self, pool: &Pool, p: &mut Pkt, port: u16, now_ns: u64) {
        if pool.get(p).meta.flags & flag::TRACE != 0 {
            return; // offered twice: marked already
        }
        let idx = p.index();
        if !self.live.is_empty() {
            // The buffer holds a new frame: what it held before has left.
            self.live.remove(&idx);
        }
        if self.to_mark == 0 || self.port.is_some_and(|want| want != port) {
            return;
        }
        let v = pool.get(p);
        let frame = v.data();
        if let Some(m) = &self.matcher
            && !m(frame)
        {
            return;
        }
        self.to_mark -= 1;
        let id = self.fresh_id();
        let keep = frame.len().min(self.snap_len as usize);
        self.packets.push(TracedPacket {
            id,
            port,
            ts_ns: now_ns,
            orig_len: v.meta.total_len.max(u32::from(v.meta.len)),
            data: frame[..keep].to_vec(),
        });
        self.live.insert(idx, id);
        pool.get_mut(p).meta.flags |= flag::TRACE;
    }

    /// The next id of the sequence (the first is 1).
    fn fresh_id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// The id of the traced packet in buffer `idx`, giving it a fresh one if it has none.
    fn id_of(&mut self, idx: u32) -> u32 {
        if let Some(&id) = self.live.get(&idx) {
            return id;
        }
        let id = self.fresh_id();
        self.live.insert(idx, id);
        id
    }

    /// Notes the traced packets among a stage call's inputs (before the call).
    pub(crate) fn note_inputs(&mut self, pool: &Pool, list: &[Pkt]) {
        self.inputs.clear();
        self.by_idx.clear();
        for p in list {
            if pool.get(p).meta.flags & flag::TRACE != 0 {
                let idx = p.index();
                let id = self.id_of(idx);
                self.by_idx.push((idx, self.inputs.len()));
                self.inputs.push(Input {
                    id,
                    seen: false,
                    view: View::of(pool, p),
                });
            }
        }
        self.by_idx.sort_unstable();
    }

    /// After the call: notes which traced inputs came out, and gives the traced packets
    /// of the output that were not inputs and have no id (buffers the stage derived from
    /// a traced input) the id of the traced input before them in the output (the first
    /// traced input if none is).
    pub(crate) fn adopt(&mut self, pool: &Pool, out: &Out) {
        let mut parent = None;
        let pkts = out.pkts.iter().chain(out.drops.iter().map(|(p, _)| p));
        for p in pkts {
            if pool.get(p).meta.flags & flag::TRACE == 0 {
                continue;
            }
            let idx = p.index();
            if let Ok(k) = self.by_idx.binary_search_by_key(&idx, |&(i, _)| i) {
                let input = &mut self.inputs[self.by_idx[k].1];
                input.seen = true;
                parent = Some(input.id);
                continue;
            }
            if self.live.contains_key(&idx) {
                // Released from a queue of the stage: still the same packet.
                continue;
            }
            let id = match parent.or(self.inputs.first().map(|i| i.id)) {
                Some(id) => id,
                None => self.fresh_id(),
            };
            self.live.insert(idx, id);
        }
    }

    /// Records the traced inputs that did not come out of the call as taken.
    pub(crate) fn record_taken(&mut self, node: u16) {
        for k in 0..self.inputs.len() {
            if self.inputs[k].seen {
                continue;
            }
            if self.records.len() < self.limit {
                let i = &self.inputs[k];
                self.records.push(TraceRecord {
                    id: i.id,
                    node,
                    event: TraceEvent::Taken,
                    view: i.view.clone(),
                });
            } else {
                self.lost += 1;
            }
        }
        self.inputs.clear();
        self.by_idx.clear();
    }

    fn record(&mut self, pool: &Pool, p: &Pkt, node: u16, event: TraceEvent) {
        let id = self.id_of(p.index());
        if self.records.len() < self.limit {
            self.records.push(TraceRecord {
                id,
                node,
                event,
                view: View::of(pool, p),
            });
        } else {
            self.lost += 1;
        }
    }

    /// Records the drop of `p` if it is traced, and forgets its buffer.
    pub(crate) fn record_drop(&mut self, pool: &Pool, p: &Pkt, node: u16, r: Reason) {
        if pool.get(p).meta.flags & flag::TRACE != 0 {
            self.record(pool, p, node, TraceEvent::Drop(r));
            self.live.remove(&p.index());
        }
    }

    /// Records the arc of every traced packet of `out`.
    pub(crate) fn record_out(&mut self, pool: &Pool, node: u16, out: &Out) {
        for (i, p) in out.pkts.iter().enumerate() {
            if pool.get(p).meta.flags & flag::TRACE != 0 {
                self.record(pool, p, node, TraceEvent::Next(out.arc_of(i)));
            }
        }
    }

    /// The records so far, in order.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The frames marked so far, in order.
    pub fn packets(&self) -> &[TracedPacket] {
        &self.packets
    }

    /// Records that did not fit.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Takes the marked frames, the records and the count of lost ones (the arming
    /// stays, and so do the ids of packets in flight).
    pub(crate) fn take(&mut self) -> (Vec<TracedPacket>, Vec<TraceRecord>, u64) {
        let lost = core::mem::take(&mut self.lost);
        (
            core::mem::take(&mut self.packets),
            core::mem::take(&mut self.records),
            lost,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PoolConfig;

    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 16,
            cache_size: 4,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// Only frames from the chosen port that the matcher accepts are marked, while the
    /// count lasts; each marked one keeps its port, time, length and first `snap_len`
    /// bytes; the others are left untouched.
    #[test]
    fn the_port_filter_and_the_matcher_choose_what_is_marked() {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = Trace::default();
        t.arm(
            TraceSpec::new(2)
                .port(1)
                .matcher(Box::new(|f: &[u8]| f.first() == Some(&7)))
                .snap_len(3),
        );
        // (port, first byte, whether it must be marked)
        let offers = [
            (0, 7, false), // wrong port
            (1, 5, false), // the matcher refuses it
            (1, 7, true),
            (1, 7, true),
            (1, 7, false), // the count ran out
        ];
        let mut kept = Vec::new();
        for (k, &(port, first, want)) in offers.iter().enumerate() {
            let mut p = c.alloc().unwrap();
            pool.get_mut(&mut p)
                .append(5)
                .unwrap()
                .copy_from_slice(&[first, k as u8, 2, 3, 4]);
            t.maybe_mark(&pool, &mut p, port, 1000 + k as u64);
            let marked = pool.get(&p).meta.flags & flag::TRACE != 0;
            assert_eq!(marked, want, "offer {k}");
            kept.push(p);
        }
        assert_eq!(
            t.packets(),
            [
                TracedPacket {
                    id: 1,
                    port: 1,
                    ts_ns: 1002,
                    orig_len: 5,
                    data: vec![7, 2, 2],
                },
                TracedPacket {
                    id: 2,
                    port: 1,
                    ts_ns: 1003,
                    orig_len: 5,
                    data: vec![7, 3, 2],
                },
            ]
        );
        assert_eq!(t.remaining(), 0);
        assert!(t.armed(), "still recording for the packets in flight");
        // A frame offered again is not marked again (nor does it lose its id).
        t.arm(TraceSpec::new(1));
        t.maybe_mark(&pool, &mut kept[2], 1, 2000);
        assert_eq!((t.packets().len(), t.remaining()), (2, 1));
        for p in kept {
            c.free(p);
        }
    }

    /// A view starts at the link header a stage pulled when it is still in front of the
    /// data, at the data otherwise, and keeps at most `HEAD` bytes.
    #[test]
    fn a_view_keeps_the_pulled_link_header_and_at_most_head_bytes() {
        let pool = pool();
        let mut c = pool.cache();
        let mut p = c.alloc().unwrap();
        let frame: Vec<u8> = (0..100).collect();
        {
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(128, &frame));
            v.meta.l3_type = 1;
            v.meta.l2_len = 14;
            v.meta.l3 = 142;
            assert!(v.pull(14));
        }
        let v = View::of(&pool, &p);
        assert_eq!((v.head_at, v.data, v.len), (128, 142, 86));
        assert_eq!(v.head(), &frame[..HEAD]);
        assert_eq!(v.packet(), &frame[14..HEAD]);
        assert_eq!(v.from(142 + 60), &[] as &[u8], "beyond what was kept");
        assert_eq!(v.from(100), &[] as &[u8], "before what was kept");
        // Not dissected: from the data on.
        pool.get_mut(&mut p).meta.l3_type = 0;
        let v = View::of(&pool, &p);
        assert_eq!((v.head_at, v.head()), (142, &frame[14..14 + HEAD]));
        // A short packet: all of it.
        pool.get_mut(&mut p).truncate(5);
        assert_eq!(View::of(&pool, &p).head(), &frame[14..19]);
        c.free(p);
    }
}
