//! Per-node counters, kept per worker and merged only when read.
//!
//! `packets / calls` is the vector size a node sees (VPP's vectors/call); `cycles` are
//! TSC ticks spent inside the node, collected only while timing is on.

use crate::drop::Reason;

/// Drop counters of one node: wire packets per reason, the reasons the stage declared
/// first (each with its counter, zero or not), then others as they occur. A node drops
/// for a handful of reasons, so a short scan finds the counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounters(Vec<(Reason, u64)>);

impl DropCounters {
    /// Counters for the reasons a stage declares, all zero.
    pub fn declared(reasons: &[Reason]) -> Self {
        Self(reasons.iter().map(|&r| (r, 0)).collect())
    }

    /// Adds `n` wire packets dropped for `r`.
    #[inline]
    pub fn add(&mut self, r: Reason, n: u64) {
        match self.0.iter_mut().find(|(x, _)| *x == r) {
            Some((_, c)) => *c += n,
            None => self.0.push((r, n)),
        }
    }

    /// The non-zero counts, by name.
    pub fn nonzero(&self) -> Vec<(Reason, u64)> {
        let mut v: Vec<(Reason, u64)> = self.0.iter().filter(|(_, n)| *n != 0).copied().collect();
        v.sort();
        v
    }

    /// Zeroes every count (the reasons stay known).
    pub fn clear(&mut self) {
        for (_, n) in &mut self.0 {
            *n = 0;
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
    /// Non-zero drop counts, by reason name.
    pub drops: Vec<(Reason, u64)>,
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
    pub fn drops_for(&self, r: Reason) -> u64 {
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

/// Sums drops by reason over a set of node snapshots, by reason name.
pub fn drops_by_reason(nodes: &[NodeSnapshot]) -> Vec<(Reason, u64)> {
    let mut all = DropCounters::default();
    for n in nodes {
        for &(r, c) in &n.drops {
            all.add(r, c);
        }
    }
    all.nonzero()
}
