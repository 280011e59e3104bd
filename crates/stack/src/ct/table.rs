//! The connection table: `max` entries allocated once, each in two hash chains (its
//! original tuple's and its reply tuple's, as Linux's `tuplehash[2]`), a free list, and
//! nothing allocated per packet.
//!
//! An entry is taken from the free list when a connection's first packet is tracked and
//! linked into the chains only when that packet is confirmed (it left its last hook
//! undropped: Linux's `nf_conntrack_confirm`); until then no other packet finds it.
//! When the free list is empty, the first entry that is not assured (or has expired)
//! among the chains of the eight buckets from the new tuple's is evicted (Linux's
//! `early_drop`, `NF_CT_EVICTION_RANGE`); when there is none the new connection is
//! refused. Expired entries go when a lookup meets them or the collector passes
//! (a bounded number of slots per call, as Linux's `gc_worker` scans a share of the table
//! per run): [`Table::collect_paced`] walks the whole table once every [`SWEEP_NS`] of
//! time, and as many slots as packets pass (two each) while free entries run low. The
//! hash has a fixed seed, so a table's layout is the same on every run.

use super::tcp::TcpConn;
use super::tuple::Tuple;

/// Status bits (Linux's `ip_conntrack_status` bit numbers).
pub mod status {
    /// A packet of the reply direction was seen.
    pub const SEEN_REPLY: u16 = 1 << 1;
    /// Worth keeping: not evicted to make room (a TCP handshake completed, a replied UDP
    /// flow).
    pub const ASSURED: u16 = 1 << 2;
    /// In the hash chains.
    pub const CONFIRMED: u16 = 1 << 3;
    /// Source NAT rewrites the reply tuple (set by NAT).
    pub const SRC_NAT: u16 = 1 << 4;
    /// Destination NAT rewrites the reply tuple (set by NAT).
    pub const DST_NAT: u16 = 1 << 5;
    /// The connection holds a UDP mapping of endpoint-independent NAT
    /// ([`crate::nat::mapping`]); netbatch's own bit (Linux has no such NAT): its entry
    /// is queued in [`super::Table::released`] when it goes.
    pub const MAPPED: u16 = 1 << 15;
}

/// One connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// The original direction's tuple and the reply direction's (which NAT may rewrite:
    /// the reply tuple is what a reply carries on the wire).
    pub tuple: [Tuple; 2],
    /// TCP's tracking state (unused for other protocols).
    pub tcp: TcpConn,
    /// [`status`] bits.
    pub status: u16,
    /// The connection's mark (`ct mark`).
    pub mark: u32,
    /// When it expires (monotonic ns).
    pub expires: u64,
    /// Wire packets per direction.
    pub packets: [u64; 2],
    /// Bytes per direction.
    pub bytes: [u64; 2],
    /// Allocation generation: a packet's reference to the entry holds it, so that a
    /// reference to a slot reused since is told apart.
    pub generation: u32,
}

impl Entry {
    /// Whether status bit `b` is set.
    pub fn has(&self, b: u16) -> bool {
        self.status & b != 0
    }
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The table is full of assured connections (none could be evicted).
    Full,
}

/// Table event counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Entries linked (confirmed).
    pub inserted: u64,
    /// Unassured entries evicted to make room (`early_drop`).
    pub early_drop: u64,
    /// New connections refused: full of assured entries.
    pub refused_full: u64,
    /// Entries that timed out.
    pub expired: u64,
    /// Confirmations that found the connection confirmed already (a second packet of
    /// a new connection tracked before the first was confirmed): they join it.
    pub clash: u64,
    /// Entries allocated for a packet that was dropped before it was confirmed.
    pub unconfirmed_discarded: u64,
    /// Entries deleted by request (`conntrack flush`) or replaced (a TCP reopen).
    pub deleted: u64,
}

const NIL: u32 = u32::MAX;
/// The paced collector walks every slot once in this time (ns), whatever the traffic.
pub const SWEEP_NS: u64 = 1_000_000_000;
/// Slots one paced collection looks at, at most: a worker idle for long catches up over
/// several calls instead of stalling one.
const SWEEP_MAX_PER_CALL: usize = 4096;
/// Buckets searched for an entry to evict (Linux's `NF_CT_EVICTION_RANGE`).
const EVICTION_RANGE: usize = 8;

/// The table.
#[derive(Debug, Clone)]
pub struct Table {
    entries: Vec<Entry>,
    /// The next node of each node's chain; node `2i + d` is entry `i`'s tuple `d`.
    next: Vec<u32>,
    buckets: Vec<u32>,
    free: Vec<u32>,
    seed: u64,
    count: usize,
    gc_at: usize,
    /// When the paced collector last ran (ns); slots owed since are due.
    gc_clock: u64,
    /// The tuples and status of the entries removed or discarded since tracking last
    /// drained this that held a NAT mapping ([`status::MAPPED`]): their references are
    /// given back ([`crate::nat::mapping`]).
    pub released: Vec<([Tuple; 2], u16)>,
    /// Counters.
    pub stats: TableStats,
}

impl Table {
    /// A table of `max` entries (at least 1) over a power of two of buckets at least
    /// `max`, hashing with `seed`.
    pub fn new(max: usize, seed: u64) -> Self {
        let max = max.clamp(1, (NIL >> 1) as usize);
        let nb = max.next_power_of_two();
        Self {
            entries: vec![Entry::default(); max],
            next: vec![NIL; 2 * max],
            buckets: vec![NIL; nb],
            free: (0..max as u32).rev().collect(),
            seed,
            count: 0,
            gc_at: 0,
            gc_clock: 0,
            released: Vec::new(),
            stats: TableStats::default(),
        }
    }

    /// Entries the table can hold.
    pub fn max(&self) -> usize {
        self.entries.len()
    }

    /// Confirmed entries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no entry is confirmed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entry `i`.
    pub fn get(&self, i: u32) -> Option<&Entry> {
        self.entries.get(i as usize)
    }

    /// Entry `i`, to change.
    pub fn get_mut(&mut self, i: u32) -> Option<&mut Entry> {
        self.entries.get_mut(i as usize)
    }

    fn bucket(&self, t: &Tuple) -> usize {
        (t.hash(self.seed) >> 20) as usize & (self.buckets.len() - 1)
    }

    /// The confirmed entry with tuple `t` in either direction, and that direction; an
    /// expired one met on the way is removed.
    pub fn lookup(&mut self, t: &Tuple, now: u64) -> Option<(u32, usize)> {
        let b = self.bucket(t);
        let mut n = self.buckets.get(b).copied().unwrap_or(NIL);
        while n != NIL {
            let (i, d) = (n >> 1, (n & 1) as usize);
            let e = self.entries.get(i as usize)?;
            if e.tuple.get(d) == Some(t) {
                if e.expires <= now {
                    self.remove(i);
                    self.stats.expired += 1;
                    return None;
                }
                return Some((i, d));
            }
            n = self.next.get(n as usize).copied().unwrap_or(NIL);
        }
        None
    }

    /// A free entry for a new connection whose tuple is `t` (not linked: see
    /// [`Table::link`]), evicting an unassured one if the table is full.
    pub fn alloc(&mut self, t: &Tuple, now: u64) -> Result<u32, Refusal> {
        if let Some(i) = self.free.pop() {
            return Ok(i);
        }
        let start = self.bucket(t);
        let nb = self.buckets.len();
        for k in 0..EVICTION_RANGE.min(nb) {
            let mut n = self
                .buckets
                .get((start + k) & (nb - 1))
                .copied()
                .unwrap_or(NIL);
            while n != NIL {
                let i = n >> 1;
                if let Some(e) = self.entries.get(i as usize)
                    && (!e.has(status::ASSURED) || e.expires <= now)
                {
                    if e.expires <= now {
                        self.stats.expired += 1;
                    } else {
                        self.stats.early_drop += 1;
                    }
                    self.remove(i);
                    return self.free.pop().ok_or(Refusal::Full);
                }
                n = self.next.get(n as usize).copied().unwrap_or(NIL);
            }
        }
        self.stats.refused_full += 1;
        Err(Refusal::Full)
    }

    /// Gives back entry `i`, allocated and never linked.
    pub fn discard(&mut self, i: u32) {
        if let Some(e) = self.entries.get_mut(i as usize)
            && !e.has(status::CONFIRMED)
        {
            if e.has(status::MAPPED) {
                self.released.push((e.tuple, e.status));
            }
            e.generation = e.generation.wrapping_add(1);
            e.status = 0;
            self.free.push(i);
            self.stats.unconfirmed_discarded += 1;
        }
    }

    /// Links entry `i` (allocated, filled in) into both chains; when a confirmed entry
    /// has either of its tuples already, `i` is given back and that entry returned.
    pub fn link(&mut self, i: u32, now: u64) -> Result<(), u32> {
        let Some(e) = self.entries.get(i as usize).copied() else {
            return Err(i);
        };
        for t in &e.tuple {
            if let Some((j, _)) = self.lookup(t, now) {
                self.stats.clash += 1;
                self.discard(i);
                self.stats.unconfirmed_discarded -= 1;
                return Err(j);
            }
        }
        for (d, t) in e.tuple.iter().enumerate() {
            let b = self.bucket(t);
            let node = (i << 1) | d as u32;
            if let (Some(head), Some(next)) = (
                self.buckets.get(b).copied(),
                self.next.get_mut(node as usize),
            ) {
                *next = head;
            }
            if let Some(head) = self.buckets.get_mut(b) {
                *head = node;
            }
        }
        if let Some(e) = self.entries.get_mut(i as usize) {
            e.status |= status::CONFIRMED;
        }
        self.count += 1;
        self.stats.inserted += 1;
        Ok(())
    }

    /// Unlinks confirmed entry `i` and frees it.
    pub fn remove(&mut self, i: u32) {
        let Some(e) = self.entries.get(i as usize).copied() else {
            return;
        };
        if !e.has(status::CONFIRMED) {
            return;
        }
        if e.has(status::MAPPED) {
            self.released.push((e.tuple, e.status));
        }
        for (d, t) in e.tuple.iter().enumerate() {
            let node = (i << 1) | d as u32;
            let b = self.bucket(t);
            let after = self.next.get(node as usize).copied().unwrap_or(NIL);
            let mut n = self.buckets.get(b).copied().unwrap_or(NIL);
            if n == node {
                if let Some(h) = self.buckets.get_mut(b) {
                    *h = after;
                }
            } else {
                while n != NIL {
                    let nn = self.next.get(n as usize).copied().unwrap_or(NIL);
                    if nn == node {
                        if let Some(x) = self.next.get_mut(n as usize) {
                            *x = after;
                        }
                        break;
                    }
                    n = nn;
                }
            }
            if let Some(x) = self.next.get_mut(node as usize) {
                *x = NIL;
            }
        }
        if let Some(e) = self.entries.get_mut(i as usize) {
            e.status = 0;
            e.generation = e.generation.wrapping_add(1);
        }
        self.count -= 1;
        self.free.push(i);
    }

    /// Looks at `budget` slots from where the last call stopped and removes the
    /// expired entries among them; returns how many it removed.
    pub fn collect(&mut self, now: u64, budget: usize) -> usize {
        let mut gone = 0;
        let len = self.entries.len();
        for _ in 0..budget.min(len) {
            let i = self.gc_at;
            // A compare, not `%`: a division per slot (a serial dependency through
            // `gc_at`) cost more than the rest of the tracking together.
            self.gc_at = if i + 1 == len { 0 } else { i + 1 };
            if let Some(e) = self.entries.get(i)
                && e.has(status::CONFIRMED)
                && e.expires <= now
            {
                self.remove(i as u32);
                self.stats.expired += 1;
                gone += 1;
            }
        }
        gone
    }

    /// The collector as the tracking stage runs it for a call of `packets` packets: the
    /// slots owed by a sweep of the whole table every [`SWEEP_NS`] (at most
    /// `SWEEP_MAX_PER_CALL` a call), and while fewer than an eighth of the entries are
    /// free, `per_packet` slots per packet at least, so that under a flood of new
    /// connections the collector keeps pace with the traffic. Returns the entries
    /// removed.
    ///
    /// Why not a share per packet always: looking at an entry is a cache miss (the
    /// table is larger than the caches), which for an established flow cost more than
    /// tracking its packet; a sweep per second costs a few slots per call.
    pub fn collect_paced(&mut self, now: u64, packets: usize, per_packet: usize) -> usize {
        let len = self.entries.len() as u64;
        let elapsed = now.saturating_sub(self.gc_clock);
        let owed = u128::from(len) * u128::from(elapsed) / u128::from(SWEEP_NS);
        let mut budget = owed.min(SWEEP_MAX_PER_CALL as u128) as usize;
        // The clock moves on by the time the slots looked at stand for: what a capped
        // call leaves is owed to the next.
        if budget > 0 {
            self.gc_clock = if (budget as u128) < owed {
                self.gc_clock + (budget as u64).saturating_mul(SWEEP_NS) / len.max(1)
            } else {
                now
            };
        }
        if self.free.len() < self.entries.len() / 8 {
            budget = budget.max(per_packet.saturating_mul(packets));
        }
        if budget == 0 {
            return 0;
        }
        self.collect(now, budget)
    }

    /// Removes every confirmed entry (`conntrack flush`) matching `keep_if_false`;
    /// returns how many.
    pub fn flush(&mut self, mut matches: impl FnMut(&Entry) -> bool) -> usize {
        let mut gone = 0;
        for i in 0..self.entries.len() {
            if let Some(e) = self.entries.get(i)
                && e.has(status::CONFIRMED)
                && matches(e)
            {
                self.remove(i as u32);
                gone += 1;
            }
        }
        self.stats.deleted += gone as u64;
        gone
    }

    /// The confirmed entries that have not expired by `now`.
    pub fn iter(&self, now: u64) -> impl Iterator<Item = (u32, &Entry)> {
        self.entries
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.has(status::CONFIRMED) && e.expires > now)
            .map(|(i, e)| (i as u32, e))
    }

    /// Entries neither free nor confirmed (allocated for packets not confirmed yet).
    pub fn unconfirmed(&self) -> usize {
        self.entries.len() - self.count - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u32) -> Tuple {
        Tuple::v4(
            core::net::Ipv4Addr::from(0xc000_0200 + n),
            "198.51.100.1".parse().unwrap(),
            17,
            1000 + n as u16,
            53,
        )
    }

    fn add(tb: &mut Table, x: Tuple, assured: bool) -> Result<u32, Refusal> {
        let i = tb.alloc(&x, 0)?;
        let e = tb.get_mut(i).unwrap();
        e.tuple = [x, x.invert()];
        e.expires = 1_000;
        e.status = if assured { status::ASSURED } else { 0 };
        tb.link(i, 0).unwrap();
        Ok(i)
    }

    /// Both directions find the entry; the reply tuple names direction 1.
    #[test]
    fn both_tuples_find_the_entry() {
        let mut tb = Table::new(4, 7);
        let i = add(&mut tb, t(1), false).unwrap();
        assert_eq!(tb.lookup(&t(1), 10), Some((i, 0)));
        assert_eq!(tb.lookup(&t(1).invert(), 10), Some((i, 1)));
        assert_eq!(tb.lookup(&t(2), 10), None);
        // Expired: removed when met.
        assert_eq!(tb.lookup(&t(1), 1_000), None);
        assert_eq!((tb.len(), tb.stats.expired), (0, 1));
    }

    /// Full of unassured entries: the new one evicts one (early drop); full of
    /// assured ones: refused and counted (Linux's early_drop then "table full").
    #[test]
    fn full_table_early_drops_then_refuses() {
        let mut tb = Table::new(8, 7);
        for n in 0..8 {
            add(&mut tb, t(n), false).unwrap();
        }
        assert!(add(&mut tb, t(100), false).is_ok());
        assert_eq!(tb.stats.early_drop, 1);
        assert_eq!(tb.len(), 8);
        let mut tb = Table::new(8, 7);
        for n in 0..8 {
            add(&mut tb, t(n), true).unwrap();
        }
        assert_eq!(add(&mut tb, t(100), false), Err(Refusal::Full));
        assert_eq!(tb.stats.refused_full, 1);
        assert_eq!(tb.len(), 8);
    }

    /// Linking a second entry for a tuple already confirmed joins the first (clash).
    #[test]
    fn clash_joins_the_confirmed_entry() {
        let mut tb = Table::new(4, 7);
        let i = add(&mut tb, t(1), false).unwrap();
        let j = tb.alloc(&t(1), 0).unwrap();
        let e = tb.get_mut(j).unwrap();
        e.tuple = [t(1), t(1).invert()];
        e.expires = 1_000;
        assert_eq!(tb.link(j, 0), Err(i));
        assert_eq!((tb.len(), tb.unconfirmed(), tb.stats.clash), (1, 0, 1));
    }

    /// The paced collector: a whole sweep per `SWEEP_NS` of time, nothing between two
    /// calls at the same instant while entries are free; a share per packet while they
    /// run low.
    #[test]
    fn paced_collector_sweeps_by_time_and_by_traffic_under_pressure() {
        let mut tb = Table::new(64, 7);
        for n in 0..4 {
            add(&mut tb, t(n), true).unwrap();
        }
        // Expired at 1,000 ns, in slots 0-3 (the free list pops in order). Half a
        // sweep's time owes half the slots: 0-31.
        let half = SWEEP_NS / 2;
        assert_eq!(tb.collect_paced(half, 64, 2), 4);
        assert_eq!(tb.gc_at, 32);
        for n in 0..4 {
            add(&mut tb, t(n), true).unwrap();
        }
        assert_eq!(
            tb.collect_paced(half, 64, 2),
            0,
            "no time passed: nothing owed"
        );
        assert_eq!(tb.gc_at, 32);
        // A whole sweep later every slot has been looked at once, the four again.
        assert_eq!(tb.collect_paced(SWEEP_NS + half, 64, 2), 4);
        assert_eq!(tb.gc_at, 32);
        assert!(tb.is_empty());
        // Under pressure (fewer than an eighth free), traffic pays: 2 slots a packet.
        let mut tb = Table::new(64, 7);
        for n in 0..60 {
            add(&mut tb, t(n), true).unwrap();
        }
        tb.gc_clock = 5_000;
        assert_eq!(tb.collect_paced(5_000, 10, 2), 20);
        assert_eq!(tb.len(), 40);
    }

    /// Removing entries from the middle of chains keeps the others findable: a
    /// one-bucket table chains everything.
    #[test]
    fn removal_keeps_chains_whole() {
        let tb = Table::new(1, 7);
        assert_eq!(tb.buckets.len(), 1);
        let mut tb = Table::new(6, 7);
        let ids: Vec<u32> = (0..6).map(|n| add(&mut tb, t(n), true).unwrap()).collect();
        tb.remove(ids[2]);
        tb.remove(ids[4]);
        for n in [0, 1, 3, 5] {
            assert!(tb.lookup(&t(n), 0).is_some(), "{n}");
            assert!(tb.lookup(&t(n).invert(), 0).is_some(), "{n}");
        }
        assert_eq!(tb.lookup(&t(2), 0), None);
        assert_eq!(tb.collect(2_000, 6), 4);
        assert!(tb.is_empty());
    }
}
