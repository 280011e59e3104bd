//! The stage interface: a stage takes a list, gives every packet a next.
//!
//! A stage receives a [`PktList`] and must empty it: each packet is either pushed to
//! [`Out`] with one of the stage's named arcs, dropped with a reason, or taken over by the
//! stage (queued in a socket, held in a table). The engine then moves packets to their
//! next stage. A stage that only knows single packets implements [`PacketStage`] and still
//! works inside a list: the engine loops it ("creeping listification").

use crate::drop::Reason;
use crate::pool::{BufCache, Pkt, Pool};

/// A list of packet handles: at most [`LIST_MAX`] from a port per poll, in arrival order.
pub type PktList = Vec<Pkt>;

/// The longest list a port hands to the graph in one go (VPP's frame size).
pub const LIST_MAX: usize = 256;

/// Marks an output whose packets go to different arcs (no stage has 255 arcs).
pub(crate) const MIXED: u8 = u8::MAX;

/// Index of one of a stage's outgoing arcs (its position in [`Stage::arcs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Next(pub u8);

/// Declares a stage's arcs once: one `Next` constant per arc, numbered in declaration
/// order, and `ARCS`, their names in the same order (what `Stage::arcs` returns), so the
/// two cannot disagree. One declaration per module.
///
/// ```
/// netbatch_engine::arcs! {
///     /// Packets that pass.
///     pub OK = "ok";
///     /// Packets that need an answer.
///     pub ERROR = "error";
/// }
/// assert_eq!(ERROR, netbatch_engine::Next(1));
/// assert_eq!(ARCS, &["ok", "error"]);
/// ```
#[macro_export]
macro_rules! arcs {
    ($($(#[$m:meta])* $vis:vis $c:ident = $name:literal;)+) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
        #[repr(u8)]
        enum ArcIndex { $($c,)+ }
        $(
            $(#[$m])*
            $vis const $c: $crate::Next = $crate::Next(ArcIndex::$c as u8);
        )+
        /// The names of the arcs, in `Next` order.
        pub const ARCS: &[&str] = &[$($name),+];
    };
}

/// The fate of one packet, as a stage decides it for [`Out::sort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On along this arc.
    To(Next),
    /// Dropped for this reason.
    Drop(Reason),
}

/// Where a stage's packets go: `(packet, arc)` pairs in the stage's output order, plus
/// the packets it dropped.
#[derive(Debug)]
pub struct Out {
    pub(crate) pkts: Vec<Pkt>,
    /// The arc every packet pushed so far shares, or [`MIXED`] once they differ (then
    /// `arcs` holds one arc per packet). The common case, one arc for the whole list,
    /// costs one vector push per packet and needs no scan to be recognised.
    pub(crate) uniform: u8,
    pub(crate) arcs: Vec<u8>,
    pub(crate) drops: Vec<(Pkt, Reason)>,
    /// Drops counted without freeing the buffer (the buffer was reused, e.g. turned into
    /// an ICMP error): `(reason, wire packets)`.
    pub(crate) counted_drops: Vec<(Reason, u64)>,
}

impl Default for Out {
    /// An empty output that has not allocated (a placeholder while one is lent out).
    fn default() -> Self {
        Self {
            pkts: Vec::new(),
            uniform: MIXED,
            arcs: Vec::new(),
            drops: Vec::new(),
            counted_drops: Vec::new(),
        }
    }
}

impl Out {
    /// An empty output with room for a full list.
    pub fn for_list() -> Self {
        Self {
            pkts: Vec::with_capacity(LIST_MAX),
            uniform: MIXED,
            arcs: Vec::with_capacity(LIST_MAX),
            drops: Vec::with_capacity(LIST_MAX),
            counted_drops: Vec::new(),
        }
    }

    /// Sends `p` along arc `a`.
    #[inline(always)]
    pub fn push(&mut self, a: Next, p: Pkt) {
        if a.0 == self.uniform {
            self.pkts.push(p);
        } else if self.pkts.is_empty() {
            self.uniform = a.0;
            self.pkts.push(p);
        } else {
            self.push_mixed(a, p);
        }
    }

    /// Gives every packet of `list` (leaving it empty), in order, the fate `f` decides:
    /// what pushing or dropping each in turn would do, but while they all take the same
    /// arc the packets stay where they are, and the list is handed on whole at the end
    /// (no push per packet). `f` sees each packet once, in order. Mark it
    /// `#[inline(always)]`: it is called from the fast loop and from the one that takes
    /// over where arcs differ, and a stage's body left out of line costs a call and a
    /// verdict through memory per packet.
    #[inline(always)]
    pub fn sort(&mut self, list: &mut PktList, mut f: impl FnMut(&mut Pkt) -> Verdict) {
        // The arc every packet so far takes ([`MIXED`]: none yet), and where that ended.
        let mut arc = MIXED;
        let mut split = None;
        for (i, p) in list.iter_mut().enumerate() {
            let v = f(p);
            if let Verdict::To(a) = v {
                // The arc of the packets before first: one compare in the common case.
                if a.0 == arc {
                    continue;
                }
                if arc == MIXED {
                    arc = a.0;
                    continue;
                }
            }
            split = Some((i, v));
            break;
        }
        match split {
            None if arc != MIXED => self.push_list(Next(arc), list),
            None => {}
            Some((at, v)) => self.sort_rest(list, at, arc, v, f),
        }
    }

    /// [`Out::sort`] from the first packet (at `at`, its fate `v`) whose arc differs from
    /// the `arc` of those before it: each from there on is pushed or dropped in turn.
    #[inline(never)]
    fn sort_rest(
        &mut self,
        list: &mut PktList,
        at: usize,
        arc: u8,
        v: Verdict,
        mut f: impl FnMut(&mut Pkt) -> Verdict,
    ) {
        let mut rest = list.drain(..);
        for p in rest.by_ref().take(at) {
            self.push(Next(arc), p);
        }
        if let Some(p) = rest.next() {
            self.apply(v, p);
        }
        for mut p in rest {
            let v = f(&mut p);
            self.apply(v, p);
        }
    }

    /// Pushes or drops `p` as `v` says.
    #[inline(always)]
    fn apply(&mut self, v: Verdict, p: Pkt) {
        match v {
            Verdict::To(a) => self.push(a, p),
            Verdict::Drop(r) => self.drop(p, r),
        }
    }

    /// Sends every packet of `list` along arc `a`, leaving it empty: the vector itself
    /// becomes the output when nothing was pushed before, and is appended whole when
    /// everything before took `a` too.
    #[inline]
    pub fn push_list(&mut self, a: Next, list: &mut PktList) {
        if self.pkts.is_empty() {
            core::mem::swap(&mut self.pkts, list);
            self.uniform = a.0;
        } else if self.uniform == a.0 {
            self.pkts.append(list);
        } else {
            for p in list.drain(..) {
                self.push(a, p);
            }
        }
    }

    /// A packet whose arc differs from the ones before it (or any packet once they do).
    #[inline]
    fn push_mixed(&mut self, a: Next, p: Pkt) {
        if self.uniform != MIXED {
            // Spell out the arcs of the uniform run so far.
            self.arcs.clear();
            self.arcs.resize(self.pkts.len(), self.uniform);
            self.uniform = MIXED;
        }
        self.pkts.push(p);
        self.arcs.push(a.0);
    }

    /// The arc of the `i`th packet pushed.
    #[inline(always)]
    pub(crate) fn arc_of(&self, i: usize) -> u8 {
        if self.uniform == MIXED {
            self.arcs[i]
        } else {
            self.uniform
        }
    }

    /// Forgets the arcs (after the packets have been taken).
    #[inline(always)]
    pub(crate) fn reset_arcs(&mut self) {
        self.uniform = MIXED;
        self.arcs.clear();
    }

    /// Drops `p` for `reason` (counted against this stage; the engine frees the buffer).
    #[inline(always)]
    pub fn drop(&mut self, p: Pkt, reason: Reason) {
        self.drops.push((p, reason));
    }

    /// Counts `wire_packets` packets as dropped for `reason` without a buffer to free:
    /// a GSO super-packet standing for several wire packets was turned into one answer
    /// (an ICMP error) in place, so all but one of its packets end here.
    #[inline]
    pub fn count_drop(&mut self, reason: Reason, wire_packets: u64) {
        self.counted_drops.push((reason, wire_packets));
    }

    /// Packets pushed so far (not counting drops).
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    pub(crate) fn clear_counts(&mut self) {
        self.counted_drops.clear();
    }
}

/// Packet fates over a worker's life, in wire packets (a GSO super-packet of n segments
/// counts n). The conservation law the tests check:
/// `rx + originated = tx + delivered + dropped + held`, where `held` is what sits in
/// queues and tables right now.
///
/// A packet answered in its own buffer (an echo request turned into its reply, an ARP
/// request into its reply, an offending datagram into an ICMP error) is the same packet
/// continuing: it ends as `tx` (or `dropped` if the answer cannot leave). Only packets in
/// new buffers (ARP requests, application sends) are `originated`, so with none of those
/// `rx = tx + delivered + dropped + held`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Accounting {
    /// Received from ports.
    pub rx: u64,
    /// Created in new buffers by the datapath itself (ARP requests, application sends).
    pub originated: u64,
    /// Handed to a port for transmission.
    pub tx: u64,
    /// Consumed locally (read by an application, or a message for us that needs no
    /// answer: an ARP reply, an ICMP error).
    pub delivered: u64,
    /// Dropped, each with a reason.
    pub dropped: u64,
    /// Handed to another worker (RPS). With several workers the law of one worker reads
    /// `rx + originated + taken_over = tx + delivered + dropped + handed_off + held`, and
    /// over all workers what is handed off and not yet taken over is held in the rings.
    pub handed_off: u64,
    /// Taken over from another worker.
    pub taken_over: u64,
}

impl Accounting {
    /// Adds another worker's counts.
    pub fn add(&mut self, o: &Self) {
        self.rx += o.rx;
        self.originated += o.originated;
        self.tx += o.tx;
        self.delivered += o.delivered;
        self.dropped += o.dropped;
        self.handed_off += o.handed_off;
        self.taken_over += o.taken_over;
    }

    /// Packets in flight between workers (handed off, not yet taken over).
    pub fn in_flight(&self) -> u64 {
        self.handed_off.saturating_sub(self.taken_over)
    }
}

/// What a stage may use besides its own state: buffers, time and the fate counters.
pub struct Cx<'a> {
    /// The buffer pool (packet bytes and metadata).
    pub pool: &'a Pool,
    /// This worker's buffer cache (to allocate or free).
    pub cache: &'a mut BufCache,
    /// Monotonic time in nanoseconds, read once per poll (timers, rate limits, ageing).
    pub now_ns: u64,
    /// Fate counters of this worker.
    pub acct: &'a mut Accounting,
}

impl Cx<'_> {
    /// Counts `n` wire packets as consumed locally.
    #[inline(always)]
    pub fn deliver(&mut self, n: u64) {
        self.acct.delivered += n;
    }

    /// Counts `n` wire packets as originated here.
    #[inline(always)]
    pub fn originate(&mut self, n: u64) {
        self.acct.originated += n;
    }
}

/// A list-aware stage over per-worker shared state `S`.
pub trait Stage<S>: Send {
    /// Names of the outgoing arcs, in [`Next`] index order.
    fn arcs(&self) -> &[&'static str];

    /// Processes every packet of `list` (leaving it empty), in order.
    fn process(&mut self, st: &mut S, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out);

    /// The drop reasons the stage declares (its error table): the node keeps a counter
    /// for each from the start, found first when it drops. It may drop for others too (a
    /// reason carried from an earlier stage); those get a counter as they occur. Reports
    /// list the non-zero counts.
    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    /// Stage-specific event counters (rule hits, route-hint hits, ICMP errors sent by
    /// reason …), for reports. Not drops: drops are counted by the engine.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Whether the stage may keep packets across calls (a coalescing table): then the
    /// graph asks it to [`Stage::flush`] them at the end of every poll
    /// (`Graph::flush_held`).
    fn holds(&self) -> bool {
        false
    }

    /// For a stage that holds packets across calls: hands everything it holds to `out`.
    fn flush(&mut self, _st: &mut S, _cx: &mut Cx<'_>, _out: &mut Out) {}

    /// Wire packets the stage holds right now (for the conservation law).
    fn held(&self) -> u64 {
        0
    }

    /// For a stage that holds packets across calls: whether [`Stage::flush`] has work
    /// at the end of this poll (by default: it holds something). A stage whose packets
    /// the shared state keeps (and counts) says so here.
    fn wants_flush(&self) -> bool {
        self.held() > 0
    }
}

/// A stage that only knows single packets. Wrap it in [`PerPacket`] to put it in a graph:
/// the engine then calls it once per packet of each list it receives.
pub trait PacketStage<S>: Send {
    /// Names of the outgoing arcs, in [`Next`] index order.
    fn arcs(&self) -> &[&'static str];

    /// The drop reasons the stage declares (see [`Stage::reasons`]).
    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    /// Handles one packet: push it to `out`, drop it, or keep it.
    fn packet(&mut self, st: &mut S, cx: &mut Cx<'_>, p: Pkt, out: &mut Out);
}

/// Adapter running a [`PacketStage`] inside a list-based graph.
pub struct PerPacket<T>(pub T);

impl<S, T: PacketStage<S>> Stage<S> for PerPacket<T> {
    fn arcs(&self) -> &[&'static str] {
        self.0.arcs()
    }

    fn reasons(&self) -> &'static [Reason] {
        self.0.reasons()
    }

    fn process(&mut self, st: &mut S, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for p in list.drain(..) {
            self.0.packet(st, cx, p, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PoolConfig;

    crate::reasons! {
        mod test_reason {
            ODD = "test_odd": "the test's drop",
        }
    }

    /// A pool of 64 buffers.
    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 64,
            ..PoolConfig::default()
        })
        .expect("pool")
    }

    /// What `sort` leaves in `out`: each pushed packet's index and arc, and each dropped
    /// packet's index, in order.
    fn sorted(pool: &Pool, out: &Out) -> (Vec<(u32, u8)>, Vec<u32>) {
        let pushed = (0..out.pkts.len())
            .map(|i| (pool.get(&out.pkts[i]).meta.mark, out.arc_of(i)))
            .collect();
        let dropped = out
            .drops
            .iter()
            .map(|(p, _)| pool.get(p).meta.mark)
            .collect();
        (pushed, dropped)
    }

    /// `sort` gives what pushing and dropping each packet in turn gives, and hands a
    /// list whose packets all take one arc on whole.
    #[test]
    fn sort_is_push_and_drop_in_order() {
        let pool = pool();
        let mut cache = pool.cache();
        // Verdicts by packet number: 0 and 1 go by arc 0; 2 by arc 1; 3 dropped.
        let fate = |n: u32| match n % 4 {
            3 => Verdict::Drop(test_reason::ODD),
            2 => Verdict::To(Next(1)),
            _ => Verdict::To(Next(0)),
        };
        for pattern in [
            vec![0u32, 1, 0, 1],
            vec![0, 1, 2, 3, 0, 2],
            vec![3, 3, 0],
            vec![2, 0],
            vec![],
        ] {
            let mut list: PktList = Vec::new();
            for &n in &pattern {
                let mut p = cache.alloc().expect("buffer");
                pool.get_mut(&mut p).meta.mark = n;
                list.push(p);
            }
            let mut out = Out::for_list();
            let mut seen = Vec::new();
            out.sort(&mut list, |p| {
                let n = pool.get(p).meta.mark;
                seen.push(n);
                fate(n)
            });
            assert!(list.is_empty());
            assert_eq!(seen, pattern, "each packet once, in order");
            let want_pushed: Vec<(u32, u8)> = pattern
                .iter()
                .filter_map(|&n| match fate(n) {
                    Verdict::To(a) => Some((n, a.0)),
                    Verdict::Drop(_) => None,
                })
                .collect();
            let want_dropped: Vec<u32> = pattern.iter().copied().filter(|n| n % 4 == 3).collect();
            assert_eq!(
                sorted(&pool, &out),
                (want_pushed, want_dropped),
                "{pattern:?}"
            );
            for p in out.pkts.drain(..) {
                cache.free(p);
            }
            for (p, _) in out.drops.drain(..) {
                cache.free(p);
            }
        }
    }

    /// `push_list` leaves what pushing each packet of the list in turn leaves: when the
    /// output is empty, when everything before took the same arc, and when it did not.
    #[test]
    fn push_list_is_push_in_order() {
        let pool = pool();
        let mut cache = pool.cache();
        let mut n = 0;
        let mut make = |cache: &mut BufCache, arcs: &[u8]| -> Vec<(Pkt, u8)> {
            arcs.iter()
                .map(|&a| {
                    let mut p = cache.alloc().expect("buffer");
                    pool.get_mut(&mut p).meta.mark = n;
                    n += 1;
                    (p, a)
                })
                .collect()
        };
        // (arcs pushed one by one first, the arc of the list pushed whole after them)
        for (before, arc) in [
            (vec![], 2u8),
            (vec![2, 2], 2),
            (vec![1], 2),
            (vec![1, 2], 2),
        ] {
            let before = make(&mut cache, &before);
            let list = make(&mut cache, &[arc; 3]);
            let want: Vec<(u32, u8)> = before
                .iter()
                .chain(&list)
                .map(|(p, a)| (pool.get(p).meta.mark, *a))
                .collect();
            let mut out = Out::for_list();
            for (p, a) in before {
                out.push(Next(a), p);
            }
            let mut l: PktList = list.into_iter().map(|(p, _)| p).collect();
            out.push_list(Next(arc), &mut l);
            assert!(l.is_empty());
            assert_eq!(sorted(&pool, &out).0, want);
            for p in out.pkts.drain(..) {
                cache.free(p);
            }
        }
    }
}
