//! RPS and RFS between workers: which worker processes a received packet, and how it
//! gets there without breaking its list or its flow's order.
//!
//! Each received packet gets a flow hash (the port's, or the Toeplitz hash of the flow
//! the dissector finds: the IPv4 or IPv6 4-tuple, the addresses for fragments and
//! protocols without ports; frames with no IP flow have none and stay on the receiving
//! worker). The hash picks a worker from the receive queue's RPS
//! map (`map[(hash × len) >> 32]`, the kernel's `reciprocal_scale`), unless RFS knows the
//! worker whose application reads the flow's socket: then that one.
//!
//! Packets for another worker travel through a single-producer ring per (from, to) pair,
//! as handles (the buffer is owned by whoever holds the handle); a full ring is a counted
//! drop (`backlog_full`). Backlogs are bounded and counted in wire packets, as every queue
//! is: a super-frame a kernel port hands over (TSO, GRO) counts its segments against
//! `max_backlog`, in the handed-off and taken-over counts, and in what is held. After its receive queues, a worker kicks each worker it sent to,
//! once per round. The worker's own share is handled by the policy:
//! - `backlog`, the kernel's: queued to its own backlog like everyone else's;
//! - `direct`, the seed's patch: processed at once, list by list;
//! - `deferred`: processed as one list after the other workers' shares were sent and
//!   before the backlog, so remote workers start early and nothing waits behind a
//!   half-processed list.
//!
//! A worker processes its backlog (its rings and its own backlog) a list at a time:
//! unlike the kernel's `process_backlog`, steered packets stay listified.
//!
//! No flow is reordered: every (from, to) pair counts packets enqueued (tail, kept by the
//! sender) and processed (head, published by the receiver after the graph ran them). A
//! per-queue flow table remembers, for each flow slot, the worker its last packet went to
//! and the tail after it. A flow moves to another worker (because the RPS map changed or
//! RFS asks for it) only once that worker's head has passed the flow's last tail: every
//! packet it sent before has been processed. This is the kernel's RFS rule, applied to map
//! changes too (the kernel reorders when `rps_cpus` changes).
//!
//! With connection tracking (`RpsParams::symmetric`) the hash is symmetric: both
//! directions of a connection, and the ICMP errors about it, reach the worker whose
//! table holds it.
//!
//! A fragment hashes by its addresses alone (a later fragment has no ports), so under
//! tracking with two or more workers a datagram is made whole on the worker its
//! addresses pick; a second set of rings, one per (from, to) pair and bounded by
//! `max_backlog` wire packets too, carries a whole datagram from there to the worker
//! owning its connection (`netbatch_stack::defrag::handoff`: [`Steer::defrag_handoff`],
//! [`Steer::hand_off`], [`Steer::take_handed`]). A flow's whole datagrams are made on
//! one worker and take one ring, in order.

use core::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::Thread;

use netbatch_engine::{Pkt, PktList, Pool};
use netbatch_stack::dissect::flow_hash;
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

netbatch_engine::reasons! {
    /// Why steering drops a packet.
    pub mod reason {
        BACKLOG_FULL = "backlog_full": "RPS backlog of the target worker full",
        HANDOFF_FULL = "defrag_handoff_full": "ring of whole datagrams to the worker owning their connection full",
        HANDOFF_UNTRACKED = "defrag_handoff_untracked": "whole datagram handed over after a reload took tracking out of the graph",
    }
}

netbatch_engine::named_enum! {
    /// What a worker does with the packets RPS gives to itself.
    RpsPolicy {
        /// Queued to its own backlog too (the kernel).
        Backlog = "backlog",
        /// Processed at once (the seed's patch).
        Direct = "direct",
        /// Processed as one list at the end of the poll, after the others' were sent.
        Deferred = "deferred",
    }
}

/// RPS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpsParams {
    /// Own-share policy.
    pub policy: RpsPolicy,
    /// Capacity of each backlog ring and of the own backlog, in wire packets
    /// (`netdev_max_backlog`).
    pub max_backlog: usize,
    /// Flow-table slots per receive queue, log2 (`rps_flow_cnt`).
    pub flow_log: u8,
    /// RFS socket-flow table entries, log2 (`rps_sock_flow_entries`); 0 turns RFS off.
    pub rfs_log: u8,
    /// Steer both directions of a connection to one worker (connection tracking's
    /// tables are per worker): the hash of the flow's endpoints in sorted order, an
    /// ICMP error by the connection it quotes, never the device's hash
    /// (`netbatch_stack::ct::steer_hash`). The map is then taken as it is: no RFS and
    /// no holding of a flow on its previous worker (its hash slot may be another
    /// connection's), so a connection's packets always go to the one worker its hash
    /// picks, in order.
    pub symmetric: bool,
    /// With NAT (and `symmetric`): the `dnat` rules' forwards, each endpoint they would
    /// rewrite hashed as its target, so a port-forwarded connection's two directions
    /// reach one worker (`netbatch_stack::nat::steer`).
    pub forwards: Vec<netbatch_stack::nat::steer::Forward>,
}

impl Default for RpsParams {
    fn default() -> Self {
        Self {
            policy: RpsPolicy::Deferred,
            max_backlog: 1000,
            flow_log: 12,
            rfs_log: 15,
            symmetric: false,
            forwards: Vec::new(),
        }
    }
}

/// Per-worker RPS counters, as `/proc/net/softnet_stat` has them (`processed` and
/// `time_squeeze` are the worker's own: [`crate::WorkerStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoftnetStats {
    /// Wire packets dropped because a backlog was full.
    pub dropped: u64,
    /// Wake-ups received (kicks from other workers, and own-backlog schedules).
    pub received_rps: u64,
    /// Backlog polls that found packets.
    pub backlog_polls: u64,
    /// Backlog length at the last look (rings to this worker plus its own backlog), in
    /// wire packets.
    pub backlog_len: u64,
    /// Wire packets sent to other workers.
    pub handed_off: u64,
    /// Wire packets taken from other workers' rings.
    pub taken_over: u64,
}

/// What the workers share.
#[derive(Debug)]
pub struct Fabric {
    n: usize,
    slots: Vec<Slot>,
    /// `heads[from * n + to]`: packets of the (from, to) queue processed by `to`.
    heads: Vec<AtomicU64>,
    /// `pushed[from * n + to]`: wire packets `from` put in the (from, to) ring.
    pushed: Vec<AtomicU64>,
    /// `taken[from * n + to]`: wire packets `to` took from the (from, to) ring.
    taken: Vec<AtomicU64>,
    /// As `pushed` and `taken`, for the rings of whole datagrams handed to the worker
    /// owning their connection (empty without them).
    ho_pushed: Vec<AtomicU64>,
    ho_taken: Vec<AtomicU64>,
    /// RFS: (hash with the worker bits cleared) | worker; `EMPTY` when unset.
    rfs: Box<[AtomicU32]>,
    /// RPS maps per port, replaced as a whole.
    maps: RwLock<Arc<Vec<Vec<u16>>>>,
    maps_gen: AtomicU64,
    stop: Arc<AtomicBool>,
}

/// An RFS entry with nothing in it.
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Default)]
struct Slot {
    kicked: AtomicBool,
    parked: AtomicBool,
    thread: OnceLock<Thread>,
    waker: OnceLock<netbatch_ports::sys::EventFd>,
}

impl Fabric {
    /// Workers.
    pub fn workers(&self) -> usize {
        self.n
    }

    /// The flag that stops the workers.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Bits of an RFS entry that hold the worker.
    fn worker_mask(&self) -> u32 {
        (self.n.next_power_of_two() - 1) as u32
    }

    /// Replaces the RPS map of `port` (the workers its packets are spread over).
    pub fn set_map(&self, port: usize, workers: Vec<u16>) {
        let mut m = self
            .maps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = (**m).clone();
        if next.len() <= port {
            next.resize(port + 1, Vec::new());
        }
        next[port] = workers;
        *m = Arc::new(next);
        self.maps_gen.fetch_add(1, Ordering::Release);
    }

    fn maps(&self) -> Arc<Vec<Vec<u16>>> {
        self.maps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// RFS: the application of `worker` reads the flow with `hash` (what the kernel's
    /// `sock_rps_record_flow` does on every receive). Written only when it changes.
    #[inline]
    pub fn record_flow(&self, hash: u32, worker: usize) {
        if self.rfs.is_empty() || hash == 0 {
            return;
        }
        let m = self.worker_mask();
        let v = (hash & !m) | (worker as u32 & m);
        let e = &self.rfs[hash as usize & (self.rfs.len() - 1)];
        if e.load(Ordering::Relaxed) != v {
            e.store(v, Ordering::Relaxed);
        }
    }

    /// The worker RFS wants for `hash`, if any.
    fn rfs_worker(&self, hash: u32) -> Option<usize> {
        if self.rfs.is_empty() {
            return None;
        }
        let m = self.worker_mask();
        let e = self.rfs[hash as usize & (self.rfs.len() - 1)].load(Ordering::Relaxed);
        (e != EMPTY && e & !m == hash & !m && ((e & m) as usize) < self.n)
            .then_some((e & m) as usize)
    }

    /// Registers the thread running worker `w` (to be unparked by kicks).
    pub fn register_thread(&self, w: usize) {
        if let Some(s) = self.slots.get(w) {
            let _ = s.thread.set(std::thread::current());
        }
    }

    /// Registers the eventfd worker `w` sleeps on with its ports' descriptors (kicks
    /// write it as well as unpark the thread).
    pub fn register_waker(&self, w: usize, e: netbatch_ports::sys::EventFd) {
        if let Some(s) = self.slots.get(w) {
            let _ = s.waker.set(e);
        }
    }

    /// Resets worker `w`'s eventfd after it woke.
    pub fn clear_waker(&self, w: usize) {
        if let Some(e) = self.slots.get(w).and_then(|s| s.waker.get()) {
            e.clear();
        }
    }

    fn wake_slot(s: &Slot) {
        if let Some(t) = s.thread.get() {
            t.unpark();
        }
        if let Some(e) = s.waker.get() {
            e.wake();
        }
    }

    /// Tells worker `w` it has backlog; `true` if it was not told already.
    fn kick(&self, w: usize) -> bool {
        let Some(s) = self.slots.get(w) else {
            return false;
        };
        if s.kicked.swap(true, Ordering::AcqRel) {
            return false;
        }
        if s.parked.load(Ordering::Acquire) {
            Self::wake_slot(s);
        }
        true
    }

    /// Wakes every worker (to see `stop`).
    pub fn wake_all(&self) {
        for s in &self.slots {
            Self::wake_slot(s);
        }
    }

    /// Marks worker `w` about to sleep; `false` if it was kicked meanwhile (do not sleep).
    pub fn park_begin(&self, w: usize) -> bool {
        let s = &self.slots[w];
        s.parked.store(true, Ordering::SeqCst);
        if s.kicked.load(Ordering::SeqCst) || self.stop.load(Ordering::SeqCst) {
            s.parked.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Marks worker `w` awake.
    pub fn park_end(&self, w: usize) {
        self.slots[w].parked.store(false, Ordering::SeqCst);
    }
}

/// A flow-table slot of one receive queue.
#[derive(Debug, Clone, Copy)]
struct FlowSlot {
    worker: u16,
    /// Tail of the (this worker, `worker`) queue after the flow's last packet.
    last_tail: u64,
}

const NO_WORKER: u16 = u16::MAX;

/// A worker's side of RPS.
pub struct Steer {
    me: usize,
    fabric: Arc<Fabric>,
    params: RpsParams,
    toeplitz: Arc<Toeplitz>,
    /// Rings to each worker (none to itself).
    to: Vec<Option<rtrb::Producer<Pkt>>>,
    /// Rings from each worker.
    from: Vec<Option<rtrb::Consumer<Pkt>>>,
    /// Rings of whole datagrams to the worker owning their connection (with two or more
    /// workers under symmetric steering; empty otherwise): `ip4-defrag`/`ip6-defrag`
    /// gathered them here and another worker owns their connection.
    ho_to: Vec<Option<rtrb::Producer<Pkt>>>,
    /// The same rings from each worker.
    ho_from: Vec<Option<rtrb::Consumer<Pkt>>>,
    /// Wire packets this worker put in its hand-off ring to each worker.
    ho_pushed: Vec<u64>,
    /// Own backlog (`backlog` policy), with the wire packets each carries.
    own: std::collections::VecDeque<(Pkt, u32)>,
    /// Wire packets in `own`.
    own_wire: u64,
    /// Wire packets in `deferred`.
    deferred_wire: u64,
    /// Wire packets this worker put in its ring to each worker (`Fabric::pushed`, which
    /// only this worker writes, published once per list).
    pushed: Vec<u64>,
    /// Room left in the ring to each worker for the list being distributed, in wire
    /// packets (`u64::MAX`: not looked at yet in this list): the consumer's count is read
    /// once per list and target, not per packet.
    room: Vec<u64>,
    /// Packets enqueued to each worker (own share included).
    tails: Vec<u64>,
    /// Own share processed (this worker's head of its own queue).
    own_head: u64,
    /// Flow tables per port.
    flows: Vec<Vec<FlowSlot>>,
    maps: Arc<Vec<Vec<u16>>>,
    maps_gen: u64,
    /// Workers sent to this round.
    sent: Vec<bool>,
    /// Own share for the end of the poll (`deferred`).
    pub(crate) deferred: PktList,
    scratch: PktList,
    /// Counters.
    pub stats: SoftnetStats,
}

impl core::fmt::Debug for Steer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Steer")
            .field("me", &self.me)
            .field("policy", &self.params.policy)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Builds the fabric for `n` workers and each worker's side of it. `maps[port]` lists
/// the workers packets received on `port` are spread over (empty: not steered).
pub fn fabric(
    n: usize,
    params: &RpsParams,
    maps: Vec<Vec<u16>>,
    ports: usize,
) -> (Arc<Fabric>, Vec<Steer>) {
    let n = n.max(1);
    let rfs_len = if params.rfs_log == 0 {
        0
    } else {
        1usize << params.rfs_log
    };
    // Whole datagrams go to their connection's owner only where connections have one.
    let handoff = params.symmetric && n > 1;
    let pairs = if handoff { n * n } else { 0 };
    let fabric = Arc::new(Fabric {
        n,
        slots: (0..n).map(|_| Slot::default()).collect(),
        heads: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
        pushed: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
        taken: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
        ho_pushed: (0..pairs).map(|_| AtomicU64::new(0)).collect(),
        ho_taken: (0..pairs).map(|_| AtomicU64::new(0)).collect(),
        rfs: (0..rfs_len).map(|_| AtomicU32::new(EMPTY)).collect(),
        maps: RwLock::new(Arc::new(maps)),
        maps_gen: AtomicU64::new(0),
        stop: Arc::new(AtomicBool::new(false)),
    });
    let toeplitz = Arc::new(Toeplitz::new(&MS_KEY));
    let mut to: Vec<Vec<Option<rtrb::Producer<Pkt>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    let mut from: Vec<Vec<Option<rtrb::Consumer<Pkt>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for a in 0..n {
        for b in 0..n {
            if a != b {
                let (p, c) = rtrb::RingBuffer::new(params.max_backlog.max(1));
                to[a][b] = Some(p);
                from[b][a] = Some(c);
            }
        }
    }
    let mut ho_to: Vec<Vec<Option<rtrb::Producer<Pkt>>>> = (0..n).map(|_| Vec::new()).collect();
    let mut ho_from: Vec<Vec<Option<rtrb::Consumer<Pkt>>>> = (0..n).map(|_| Vec::new()).collect();
    if handoff {
        ho_to = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        ho_from = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let (p, c) = rtrb::RingBuffer::new(params.max_backlog.max(1));
                    ho_to[a][b] = Some(p);
                    ho_from[b][a] = Some(c);
                }
            }
        }
    }
    let maps = fabric.maps();
    let steers = to
        .into_iter()
        .zip(from)
        .zip(ho_to.into_iter().zip(ho_from))
        .enumerate()
        .map(|(me, ((to, from), (ho_to, ho_from)))| Steer {
            me,
            fabric: fabric.clone(),
            params: params.clone(),
            toeplitz: toeplitz.clone(),
            to,
            from,
            ho_pushed: vec![0; ho_to.len()],
            ho_to,
            ho_from,
            own: std::collections::VecDeque::with_capacity(params.max_backlog.min(65_536)),
            own_wire: 0,
            deferred_wire: 0,
            pushed: vec![0; n],
            room: vec![u64::MAX; n],
            tails: vec![0; n],
            own_head: 0,
            flows: (0..ports)
                .map(|_| {
                    vec![
                        FlowSlot {
                            worker: NO_WORKER,
                            last_tail: 0
                        };
                        1 << params.flow_log
                    ]
                })
                .collect(),
            maps: maps.clone(),
            maps_gen: 0,
            sent: vec![false; n],
            deferred: Vec::with_capacity(netbatch_engine::LIST_MAX),
            scratch: Vec::with_capacity(netbatch_engine::LIST_MAX),
            stats: SoftnetStats::default(),
        })
        .collect();
    (fabric, steers)
}

impl Steer {
    /// This worker.
    pub fn me(&self) -> usize {
        self.me
    }

    /// The policy.
    pub fn policy(&self) -> RpsPolicy {
        self.params.policy
    }

    /// The shared side.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    fn head(&self, to: usize) -> u64 {
        if to == self.me {
            self.own_head
        } else {
            self.fabric.heads[self.me * self.fabric.n + to].load(Ordering::Acquire)
        }
    }

    /// Picks up a changed RPS map.
    fn refresh_maps(&mut self) {
        let g = self.fabric.maps_gen.load(Ordering::Acquire);
        if g != self.maps_gen {
            self.maps = self.fabric.maps();
            self.maps_gen = g;
        }
    }

    /// The worker for a packet with `hash` received on `port` (RFS, else the map), held
    /// back on the flow's previous worker until that one has processed all it was sent.
    #[inline]
    fn target(&mut self, port: usize, hash: u32) -> usize {
        let map = self.maps.get(port).map_or(&[][..], Vec::as_slice);
        if hash == 0 || map.is_empty() {
            return self.me;
        }
        // The map's pick, as `nat::steer::Home` computes it for a reply tuple.
        let n = self.fabric.n;
        let by_map = || {
            usize::from(netbatch_stack::nat::steer::worker_of_hash(hash, map).unwrap_or(0))
                .min(n - 1)
        };
        if self.params.symmetric {
            // Per-worker tables: the map alone decides.
            return by_map();
        }
        let want = self.fabric.rfs_worker(hash).unwrap_or_else(by_map);
        let Some(table) = self.flows.get(port) else {
            return want;
        };
        let slot = table[hash as usize & (table.len() - 1)];
        let cur = usize::from(slot.worker);
        if slot.worker == NO_WORKER || cur == want || self.head(cur) >= slot.last_tail {
            want
        } else {
            cur
        }
    }

    /// Spreads `list` (received on `port`) over the workers: other workers' packets go to
    /// their rings, this worker's stay in `list` (`direct`), go to `deferred`, or to the
    /// own backlog (`backlog`). Dropped packets (full rings) are left in `drops`.
    pub fn distribute(
        &mut self,
        pool: &Pool,
        port: usize,
        list: &mut PktList,
        drops: &mut PktList,
    ) {
        self.refresh_maps();
        let steered = self.maps.get(port).is_some_and(|m| !m.is_empty());
        let mut keep = core::mem::take(&mut self.scratch);
        let limit = self.params.max_backlog as u64;
        let n = self.fabric.n;
        for mut p in list.drain(..) {
            let (hash, target, wire) = {
                let mut v = pool.get_mut(&mut p);
                let wire = v.meta.wire_packets();
                if steered {
                    let h = if self.params.symmetric {
                        netbatch_stack::ct::steer_hash_with(
                            &mut v,
                            &self.toeplitz,
                            &self.params.forwards,
                        )
                    } else {
                        flow_hash(&mut v, &self.toeplitz)
                    };
                    (h, self.target(port, h), wire)
                } else {
                    (0, self.me, wire)
                }
            };
            if target == self.me {
                match self.params.policy {
                    RpsPolicy::Direct => keep.push(p),
                    RpsPolicy::Deferred => {
                        self.deferred.push(p);
                        self.deferred_wire += wire;
                    }
                    RpsPolicy::Backlog => {
                        if self.own_wire + wire > limit {
                            self.stats.dropped += wire;
                            drops.push(p);
                            continue;
                        }
                        self.own.push_back((p, wire as u32));
                        self.own_wire += wire;
                        self.sent[self.me] = true;
                    }
                }
                self.tails[self.me] += 1;
                self.note(port, hash, target);
                continue;
            }
            if self.room[target] == u64::MAX {
                let taken = self.fabric.taken[self.me * n + target].load(Ordering::Acquire);
                self.room[target] = limit.saturating_sub(self.pushed[target] - taken);
            }
            if wire > self.room[target] {
                self.stats.dropped += wire;
                drops.push(p);
                continue;
            }
            match self.to[target].as_mut().map(|r| r.push(p)) {
                Some(Ok(())) => {
                    self.room[target] -= wire;
                    self.pushed[target] += wire;
                    self.tails[target] += 1;
                    self.note(port, hash, target);
                    self.sent[target] = true;
                    self.stats.handed_off += wire;
                }
                Some(Err(rtrb::PushError::Full(p))) => {
                    self.stats.dropped += wire;
                    drops.push(p);
                }
                None => unreachable!("rings exist between every pair of workers"),
            }
        }
        // Publish what went to each ring, and forget the room seen in this list.
        for t in 0..n {
            if self.room[t] != u64::MAX {
                self.room[t] = u64::MAX;
                self.fabric.pushed[self.me * n + t].store(self.pushed[t], Ordering::Release);
            }
        }
        core::mem::swap(list, &mut keep);
        self.scratch = keep;
    }

    /// Records that the flow of `hash` (from `port`) last went to `target`.
    #[inline]
    fn note(&mut self, port: usize, hash: u32, target: usize) {
        if hash == 0 {
            return;
        }
        let tail = self.tails[target];
        if let Some(table) = self.flows.get_mut(port) {
            let len = table.len();
            table[hash as usize & (len - 1)] = FlowSlot {
                worker: target as u16,
                last_tail: tail,
            };
        }
    }

    /// Kicks every worker sent to this round (one wake-up each); returns how many.
    pub fn kick(&mut self) -> usize {
        let mut n = 0;
        for w in 0..self.sent.len() {
            if core::mem::take(&mut self.sent[w]) {
                if w == self.me {
                    // Scheduling one's own backlog, as the kernel raises its softirq.
                    self.stats.received_rps += 1;
                    n += 1;
                } else if self.fabric.kick(w) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Whether this worker was kicked since it last looked (counts the wake-up).
    pub fn take_kick(&mut self) -> bool {
        let kicked = self.fabric.slots[self.me]
            .kicked
            .swap(false, Ordering::AcqRel);
        if kicked {
            self.stats.received_rps += 1;
        }
        kicked
    }

    /// Up to `max` packets from worker `from`'s ring (or the own backlog for `from ==
    /// me`) into `out`; returns how many (handles; the wire packets they carry are
    /// counted taken over).
    pub fn take(&mut self, pool: &Pool, from: usize, out: &mut PktList, max: usize) -> usize {
        if from == self.me {
            let n = max.min(self.own.len());
            let mut wire = 0;
            for (p, w) in self.own.drain(..n) {
                out.push(p);
                wire += u64::from(w);
            }
            self.own_wire -= wire;
            return n;
        }
        let Some(c) = self.from[from].as_mut() else {
            return 0;
        };
        let (n, wire) = read_ring(c, pool, out, max);
        if n == 0 {
            return 0;
        }
        self.fabric.taken[from * self.fabric.n + self.me].fetch_add(wire, Ordering::Release);
        self.stats.taken_over += wire;
        n
    }

    /// Publishes that `n` packets taken from `from` have been processed.
    pub fn done(&mut self, from: usize, n: usize) {
        if from == self.me {
            self.own_head += n as u64;
        } else {
            self.fabric.heads[from * self.fabric.n + self.me]
                .fetch_add(n as u64, Ordering::Release);
        }
    }

    /// The own share processed directly (`direct`, `deferred`): advances the own head.
    pub fn done_own(&mut self, n: usize) {
        self.own_head += n as u64;
    }

    /// Wire packets waiting for this worker (its rings and own backlog).
    pub fn backlog_len(&self) -> u64 {
        let n = self.fabric.n;
        let rings: u64 = (0..n)
            .filter(|&f| f != self.me)
            .map(|f| {
                let pair = f * n + self.me;
                let taken = self.fabric.taken[pair].load(Ordering::Relaxed);
                self.fabric.pushed[pair]
                    .load(Ordering::Acquire)
                    .saturating_sub(taken)
            })
            .sum();
        let handed: u64 = (0..self.ho_from.len())
            .filter(|&f| f != self.me)
            .map(|f| {
                let pair = f * n + self.me;
                let taken = self.fabric.ho_taken[pair].load(Ordering::Relaxed);
                self.fabric.ho_pushed[pair]
                    .load(Ordering::Acquire)
                    .saturating_sub(taken)
            })
            .sum();
        rings + handed + self.own_wire
    }

    /// Wire packets this worker received and has not processed yet (own backlog,
    /// deferred list). Packets in rings are counted by the difference of `handed_off`
    /// and `taken_over` over the workers.
    pub fn held(&self) -> u64 {
        self.own_wire + self.deferred_wire
    }

    /// The deferred own share, to run now (its wire packets no longer held here).
    pub(crate) fn take_deferred(&mut self) -> PktList {
        self.deferred_wire = 0;
        core::mem::take(&mut self.deferred)
    }

    /// Frees everything in the rings to this worker and its own queues (at stop).
    pub fn drain(&mut self, cache: &mut netbatch_engine::BufCache) {
        for c in self.from.iter_mut().chain(&mut self.ho_from).flatten() {
            while let Ok(p) = c.pop() {
                cache.free(p);
            }
        }
        for (p, _) in self.own.drain(..) {
            cache.free(p);
        }
        self.own_wire = 0;
        self.deferred_wire = 0;
        cache.free_all(&mut self.deferred);
    }

    /// The hand-off of whole datagrams to the worker owning their connection, for
    /// `ip4-defrag`/`ip6-defrag` (`Host::defrag_handoff`): RPS's view of each receiving
    /// port whose frames it steers (`steered[port]`; a host pair's tap is not: its
    /// frames stay where they came in), the same map, hasher and forwards it steers by;
    /// `None` without hand-off rings (one worker, or steering that is not symmetric).
    pub fn defrag_handoff(
        &self,
        steered: &[bool],
    ) -> Option<netbatch_stack::defrag::handoff::HandOff> {
        if self.ho_to.is_empty() {
            return None;
        }
        let homes = steered
            .iter()
            .enumerate()
            .map(|(p, &s)| self.nat_home(p).filter(|_| s))
            .collect();
        netbatch_stack::defrag::handoff::HandOff::new(self.me as u16, homes)
    }

    /// Puts the whole datagram `p` (a defrag chain) in the hand-off ring to worker `to`;
    /// back if the ring has no room for its wire packets (the caller drops and counts
    /// it: `defrag_handoff_full`). Counted handed off, as RPS's packets are (in flight
    /// until taken over).
    pub fn hand_off(&mut self, pool: &Pool, to: usize, p: Pkt) -> Result<(), Pkt> {
        let n = self.fabric.n;
        let Some(ring) = self.ho_to.get_mut(to).and_then(Option::as_mut) else {
            return Err(p);
        };
        let wire = pool.get(&p).meta.wire_packets();
        let pair = self.me * n + to;
        let taken = self.fabric.ho_taken[pair].load(Ordering::Acquire);
        if self.ho_pushed[to] - taken + wire > self.params.max_backlog as u64 {
            return Err(p);
        }
        ring.push(p).map_err(|rtrb::PushError::Full(p)| p)?;
        self.ho_pushed[to] += wire;
        self.fabric.ho_pushed[pair].store(self.ho_pushed[to], Ordering::Release);
        self.stats.handed_off += wire;
        self.sent[to] = true;
        Ok(())
    }

    /// Up to `max` whole datagrams handed over by worker `from` into `out` (in the order
    /// they were handed over); returns how many (their wire packets counted taken over).
    pub fn take_handed(
        &mut self,
        pool: &Pool,
        from: usize,
        out: &mut PktList,
        max: usize,
    ) -> usize {
        let Some(c) = self.ho_from.get_mut(from).and_then(Option::as_mut) else {
            return 0;
        };
        let (n, wire) = read_ring(c, pool, out, max);
        if n == 0 {
            return 0;
        }
        self.fabric.ho_taken[from * self.fabric.n + self.me].fetch_add(wire, Ordering::Release);
        self.stats.taken_over += wire;
        n
    }

    /// What NAT needs to know of this steering to pick ports whose replies come back to
    /// this worker (`netbatch_stack::nat::steer::Home`): the map of `port` (NAT's
    /// configuration makes every port's the same), the hasher and the forwards; `None`
    /// when the steering is not symmetric or `port` is not steered.
    pub fn nat_home(&self, port: usize) -> Option<netbatch_stack::nat::steer::Home> {
        let map = self.maps.get(port).filter(|m| !m.is_empty())?;
        self.params
            .symmetric
            .then(|| netbatch_stack::nat::steer::Home {
                me: self.me as u16,
                map: map
                    .iter()
                    .map(|&w| w.min(self.fabric.n as u16 - 1))
                    .collect(),
                toeplitz: self.toeplitz.clone(),
                forwards: self.params.forwards.iter().copied().collect(),
            })
    }

    /// The flow hash of an IPv4 4-tuple with this worker's hasher (for tests and tools).
    pub fn hash_of(&self, src: Ipv4Addr, dst: Ipv4Addr, ports: Option<(u16, u16)>) -> u32 {
        self.toeplitz.ipv4(src.octets(), dst.octets(), ports)
    }
}

/// Up to `max` packets of ring `c` onto `out`, in ring order: how many, and the wire
/// packets they stand for.
fn read_ring(
    c: &mut rtrb::Consumer<Pkt>,
    pool: &Pool,
    out: &mut PktList,
    max: usize,
) -> (usize, u64) {
    let n = max.min(c.slots());
    if n == 0 {
        return (0, 0);
    }
    let start = out.len();
    if let Ok(chunk) = c.read_chunk(n) {
        out.extend(chunk);
    }
    let wire = out
        .get(start..)
        .unwrap_or_default()
        .iter()
        .map(|p| pool.get(p).meta.wire_packets())
        .sum();
    (n, wire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::PoolConfig;

    /// A UDP frame of the flow 198.51.100.7:4000 → 203.0.113.9:5000, written by hand.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&28u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[198, 51, 100, 7]);
        f[30..34].copy_from_slice(&[203, 0, 113, 9]);
        f[34..36].copy_from_slice(&4000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5000u16.to_be_bytes());
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
        f
    }

    /// A super-frame of 5 segments steered to another worker counts 5 wire packets
    /// handed off, in that worker's backlog and taken over; the backlog's limit (8 wire
    /// packets) refuses a second one whole although the ring has slots left.
    #[test]
    fn backlogs_count_wire_packets() {
        let pool = Pool::new(PoolConfig {
            buffers: 16,
            cache_size: 4,
            ..Default::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let params = RpsParams {
            policy: RpsPolicy::Backlog,
            max_backlog: 8,
            ..RpsParams::default()
        };
        let (_fabric, mut steers) = fabric(2, &params, vec![vec![1]], 1);
        let mut list = Vec::new();
        for _ in 0..2 {
            let mut p = c.alloc().unwrap();
            {
                let mut v = pool.get_mut(&mut p);
                assert!(v.set_data(64, &udp_frame()));
                v.meta.segs = 5;
            }
            list.push(p);
        }
        let mut drops = Vec::new();
        let (s0, rest) = steers.split_at_mut(1);
        let (s0, s1) = (&mut s0[0], &mut rest[0]);
        s0.distribute(&pool, 0, &mut list, &mut drops);
        assert!(list.is_empty());
        assert_eq!(drops.len(), 1, "5 + 5 > 8: the second is refused whole");
        assert_eq!((s0.stats.handed_off, s0.stats.dropped), (5, 5));
        assert_eq!(s1.backlog_len(), 5);
        let mut got = Vec::new();
        assert_eq!(s1.take(&pool, 0, &mut got, 64), 1);
        assert_eq!((s1.stats.taken_over, s1.backlog_len()), (5, 0));
        c.free_all(&mut got);
        c.free_all(&mut drops);
        drop(c);
        assert_eq!(pool.free_in_pool(), 16);
    }

    /// An IPv4 frame of protocol `proto` with 8 bytes of L4 header `l4`, written by hand.
    fn ip_frame(src: [u8; 4], dst: [u8; 4], proto: u8, l4: [u8; 8], tail: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((28 + tail.len()) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f.extend_from_slice(&l4);
        f.extend_from_slice(tail);
        f
    }

    fn ports(sp: u16, dp: u16) -> [u8; 8] {
        let mut l4 = [0u8; 8];
        l4[0..2].copy_from_slice(&sp.to_be_bytes());
        l4[2..4].copy_from_slice(&dp.to_be_bytes());
        l4
    }

    /// The worker `s` steers frame `f` to (received on port 0), with a device hash when
    /// `device` is given.
    fn worker_of(s: &mut Steer, pool: &Pool, f: &[u8], device: Option<u32>) -> usize {
        let mut c = pool.cache();
        let mut p = c.alloc().unwrap();
        let h = {
            let mut v = pool.get_mut(&mut p);
            assert!(v.set_data(64, f));
            if let Some(d) = device {
                v.meta.hash = d;
                v.meta.flags |= netbatch_engine::meta::flag::HASH_VALID;
            }
            if s.params.symmetric {
                netbatch_stack::ct::steer_hash_with(&mut v, &s.toeplitz, &s.params.forwards)
            } else {
                flow_hash(&mut v, &s.toeplitz)
            }
        };
        c.free(p);
        s.target(0, h)
    }

    /// With conntrack's symmetric steering, both directions of each of 64 chosen flows
    /// (TCP, UDP, ICMP echo), and an ICMP error a router on the way sends about the
    /// first direction, reach one worker of four, whatever hash the device gave; with
    /// the plain RSS hash some flows' directions part (what the symmetric hash is for).
    #[test]
    fn symmetric_steering_keeps_a_connection_on_one_worker() {
        let pool = Pool::new(PoolConfig {
            buffers: 16,
            cache_size: 4,
            ..Default::default()
        })
        .unwrap();
        let map = vec![vec![0, 1, 2, 3]];
        let plain = RpsParams {
            policy: RpsPolicy::Direct,
            rfs_log: 0,
            ..RpsParams::default()
        };
        let sym = RpsParams {
            symmetric: true,
            ..plain.clone()
        };
        let (_f, mut plain_s) = fabric(4, &plain, map.clone(), 1);
        let (_g, mut sym_s) = fabric(4, &sym, map, 1);
        let (ps, ss) = (&mut plain_s[0], &mut sym_s[0]);
        let mut parted = 0;
        let mut seen = [false; 4];
        for n in 0..64u8 {
            let a = [198, 51, 100, 1 + n];
            let b = [203, 0, 113, 200 - n];
            let sp = 30000 + u16::from(n) * 7;
            let (fwd, rev) = match n % 3 {
                0 => {
                    // The rest of a 20-byte TCP header: data offset 5, ACK.
                    let rest = [0, 0, 0, 0, 0x50, 0x10, 1, 0, 0, 0, 0, 0];
                    (
                        ip_frame(a, b, 6, ports(sp, 443), &rest),
                        ip_frame(b, a, 6, ports(443, sp), &rest),
                    )
                }
                1 => (
                    ip_frame(a, b, 17, ports(sp, 53), &[]),
                    ip_frame(b, a, 17, ports(53, sp), &[]),
                ),
                _ => {
                    let echo = |t: u8| [t, 0, 0, 0, 0x12, n, 0, 1];
                    (
                        ip_frame(a, b, 1, echo(8), &[]),
                        ip_frame(b, a, 1, echo(0), &[]),
                    )
                }
            };
            // Time exceeded from a router 192.0.2.9 back to `a`, quoting `fwd`.
            let err = ip_frame([192, 0, 2, 9], a, 1, [11, 0, 0, 0, 0, 0, 0, 0], &fwd[14..]);
            let w = worker_of(ss, &pool, &fwd, Some(0x1234_5678));
            seen[w] = true;
            assert_eq!(worker_of(ss, &pool, &rev, Some(0x9abc_def0)), w, "flow {n}");
            assert_eq!(worker_of(ss, &pool, &err, None), w, "error about flow {n}");
            if n % 3 != 2 && worker_of(ps, &pool, &fwd, None) != worker_of(ps, &pool, &rev, None) {
                parted += 1;
            }
        }
        assert!(
            parted > 10,
            "the plain hash parted {parted} flows' directions"
        );
        assert_eq!(seen, [true; 4], "the flows spread over every worker");
    }

    /// The seam of the hand-off of whole datagrams: for 64 UDP flows over two workers,
    /// a first fragment steers by its addresses alone (a later fragment has no ports),
    /// and the datagram made whole from it (its head marked a defrag chain) is owned by
    /// the worker RPS steers the flow's unfragmented packets to, as the hand-off the
    /// steering gives the defragmentation stage computes it; some flows' fragments are
    /// gathered away from their owner (what the hand-off is for). The ring counts wire
    /// packets: a chain of 3 fits a ring of 4, a second does not (the caller drops it,
    /// counted); it is in the owner's backlog, in flight, until taken over.
    #[test]
    fn whole_datagrams_go_where_their_unfragmented_packets_go() {
        let pool = Pool::new(PoolConfig {
            buffers: 16,
            cache_size: 4,
            ..Default::default()
        })
        .unwrap();
        let params = RpsParams {
            policy: RpsPolicy::Direct,
            rfs_log: 0,
            symmetric: true,
            max_backlog: 4,
            ..RpsParams::default()
        };
        let (_f, mut steers) = fabric(2, &params, vec![vec![0, 1]], 1);
        let handoffs: Vec<_> = steers
            .iter()
            .map(|s| s.defrag_handoff(&[true]).expect("two workers, symmetric"))
            .collect();
        let mut away = 0;
        for n in 0..64u16 {
            let (a, b) = ([198, 51, 100, 7], [203, 0, 113, 1 + n as u8]);
            let sp = 20000 + n * 13;
            let whole = ip_frame(a, b, 17, ports(sp, 53), &[]);
            let mut first = whole.clone();
            first[14 + 6] = 0x20; // MF, offset 0
            let owner = worker_of(&mut steers[0], &pool, &whole, None);
            let gathers = worker_of(&mut steers[0], &pool, &first, None);
            let other = ip_frame(a, b, 17, ports(sp + 1, 80), &[]);
            let mut other_first = other.clone();
            other_first[14 + 6] = 0x20;
            assert_eq!(
                worker_of(&mut steers[0], &pool, &other_first, None),
                gathers,
                "flow {n}: a fragment steers by its addresses"
            );
            away += usize::from(gathers != owner);
            let mut c = pool.cache();
            let mut p = c.alloc().unwrap();
            {
                let mut v = pool.get_mut(&mut p);
                assert!(v.set_data(64, &first));
                v.meta.flags |= netbatch_stack::meta::flag::DEFRAG_CHAIN;
                for (me, h) in handoffs.iter().enumerate() {
                    let want = (owner != me).then_some(owner as u16);
                    assert_eq!(h.owner_elsewhere(&mut v), want, "flow {n} on worker {me}");
                }
            }
            c.free(p);
        }
        assert!(
            away > 10,
            "fragments gathered away from their owner: {away}"
        );

        let mut c = pool.cache();
        let mut chain = || {
            let mut p = c.alloc().unwrap();
            pool.get_mut(&mut p).meta.segs = 3;
            p
        };
        let (a, b) = (chain(), chain());
        let (s0, rest) = steers.split_at_mut(1);
        let (s0, s1) = (&mut s0[0], &mut rest[0]);
        assert!(s0.hand_off(&pool, 1, a).is_ok());
        let b = s0
            .hand_off(&pool, 1, b)
            .expect_err("3 + 3 > 4 wire packets");
        assert_eq!((s0.stats.handed_off, s1.backlog_len()), (3, 3));
        let mut got = Vec::new();
        assert_eq!(s1.take(&pool, 0, &mut got, 8), 0, "not in RPS's ring");
        assert_eq!(s1.take_handed(&pool, 0, &mut got, 8), 1);
        assert_eq!((s1.stats.taken_over, s1.backlog_len()), (3, 0));
        got.push(b);
        let mut c = pool.cache();
        c.free_all(&mut got);
    }
}
