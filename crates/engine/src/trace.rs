//! Opt-in packet trace: arm it for N packets; each stage's decision about a traced
//! packet (its next arc, or its drop reason) is recorded. Costs one branch per stage
//! call while disarmed.

use crate::drop::Reason;
use crate::meta::flag;
use crate::pool::{Pkt, Pool};

/// What a stage decided about a traced packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// Sent on the node's arc with this index.
    Next(u8),
    /// Dropped.
    Drop(Reason),
}

/// One trace record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// Buffer index of the packet (stable while it lives).
    pub pkt: u32,
    /// Node index.
    pub node: u16,
    /// The decision.
    pub event: TraceEvent,
}

/// The trace buffer of one worker's graph.
#[derive(Debug, Default)]
pub struct Trace {
    to_mark: u32,
    marked: bool,
    records: Vec<TraceRecord>,
    limit: usize,
    lost: u64,
}

impl Trace {
    /// Arms the trace: the next `packets` packets a port receives get the trace flag,
    /// and up to `records` decisions are kept.
    pub fn arm(&mut self, packets: u32, records: usize) {
        self.to_mark = packets;
        self.marked = packets > 0;
        self.limit = records;
        self.records.reserve(records);
    }

    /// Whether any packet may carry the trace flag.
    #[inline(always)]
    pub fn armed(&self) -> bool {
        self.marked
    }

    /// Called by the receive path for each new packet: sets the trace flag while the
    /// armed count lasts.
    #[inline]
    pub fn maybe_mark(&mut self, pool: &Pool, p: &mut Pkt) {
        if self.to_mark > 0 {
            self.to_mark -= 1;
            pool.get_mut(p).meta.flags |= flag::TRACE;
        }
    }

    pub(crate) fn record(&mut self, pkt: u32, node: u16, event: TraceEvent) {
        if self.records.len() < self.limit {
            self.records.push(TraceRecord { pkt, node, event });
        } else {
            self.lost += 1;
        }
    }

    pub(crate) fn record_if_traced(&mut self, pool: &Pool, p: &Pkt, node: u16, event: TraceEvent) {
        if pool.get(p).meta.flags & flag::TRACE != 0 {
            self.record(p.index(), node, event);
        }
    }

    /// The records so far, in order.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Records that did not fit.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Forgets the records (the arming stays).
    pub fn clear(&mut self) {
        self.records.clear();
        self.lost = 0;
    }
}
