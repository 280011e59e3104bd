//! Per-node counters, kept per worker and merged only when read.
//!
//! `packets / calls` is the vector size a node sees (VPP's vectors/call); `cycles` are
//! TSC ticks spent inside the node, collected only while timing is on.

use crate::drop::DropReason;

/// Counters of one node on one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCounters {
    /// Packet handles processed.
    pub packets: u64,
    /// Calls (lists) processed.
    pub calls: u64,
    /// TSC ticks inside the node (only while timing is on).
    pub cycles: u64,
    /// Wire packets dropped, by [`DropReason`] index.
    pub drops: [u64; DropReason::COUNT],
}

impl Default for NodeCounters {
    fn default() -> Self {
        Self {
            packets: 0,
            calls: 0,
            cycles: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

impl NodeCounters {
    pub(crate) fn snapshot(
        &self,
        name: &'static str,
        events: Vec<(&'static str, u64)>,
    ) -> NodeSnapshot {
        NodeSnapshot {
            name,
            events,
            packets: self.packets,
            calls: self.calls,
            cycles: self.cycles,
            drops: DropReason::ALL
                .iter()
                .filter(|r| self.drops[r.index()] != 0)
                .map(|&r| (r, self.drops[r.index()]))
                .collect(),
        }
    }
}

/// A read-out of one node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSnapshot {
    /// Node name.
    pub name: &'static str,
    /// Packet handles processed.
    pub packets: u64,
    /// Calls made.
    pub calls: u64,
    /// TSC ticks inside the node (0 unless timing was on).
    pub cycles: u64,
    /// Non-zero drop counts.
    pub drops: Vec<(DropReason, u64)>,
    /// The stage's own event counters (see `Stage::counters`).
    pub events: Vec<(&'static str, u64)>,
}

impl NodeSnapshot {
    /// Average packets per call (the vector size).
    pub fn packets_per_call(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.packets as f64 / self.calls as f64
        }
    }

    /// Average TSC ticks per packet inside this node.
    pub fn cycles_per_packet(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.cycles as f64 / self.packets as f64
        }
    }

    /// Total drops of this node.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|(_, n)| n).sum()
    }

    /// Drops for one reason.
    pub fn drops_for(&self, r: DropReason) -> u64 {
        self.drops
            .iter()
            .find(|(x, _)| *x == r)
            .map_or(0, |(_, n)| *n)
    }

    /// Adds another worker's counters of the same node.
    pub fn merge(&mut self, o: &Self) {
        self.packets += o.packets;
        self.calls += o.calls;
        self.cycles += o.cycles;
        for &(r, n) in &o.drops {
            match self.drops.iter_mut().find(|(x, _)| *x == r) {
                Some((_, m)) => *m += n,
                None => self.drops.push((r, n)),
            }
        }
        self.drops.sort();
        for &(k, n) in &o.events {
            match self.events.iter_mut().find(|(x, _)| *x == k) {
                Some((_, m)) => *m += n,
                None => self.events.push((k, n)),
            }
        }
    }
}

/// Sums drops by reason over a set of node snapshots.
pub fn drops_by_reason(nodes: &[NodeSnapshot]) -> Vec<(DropReason, u64)> {
    let mut v = [0u64; DropReason::COUNT];
    for n in nodes {
        for &(r, c) in &n.drops {
            v[r.index()] += c;
        }
    }
    DropReason::ALL
        .iter()
        .filter(|r| v[r.index()] != 0)
        .map(|&r| (r, v[r.index()]))
        .collect()
}
