//! The neighbour table: IPv4 → MAC per interface, with bounded queues of packets waiting
//! for resolution, ageing and a bounded size (RFC 826, RFC 1122 2.3.2.1-2.3.2.2).
//!
//! States: `Incomplete` (request sent, packets may queue), `Reachable` (confirmed within
//! `reachable_ms`), `Stale` (usable; the next use sends a unicast probe), `Permanent`
//! (static). An incomplete entry that gets no answer after `max_probes` requests fails:
//! its queue is released for ICMP host unreachable (RFC 1122 2.3.2.2 allows dropping;
//! Linux reports unreachable). A queue's occupancy and its limit (`queue_len`) are in wire
//! packets: a GRO super-packet counts the segments it carries, so a full queue holds at
//! most `queue_len` wire packets however they were merged. Full table: stale and failed entries are evicted oldest
//! first; if none can go, the new neighbour is refused and counted.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use netbatch_engine::{BufCache, Pkt};
use netbatch_wire::ethernet::MacAddr;

use crate::route::{Family, V4, V6};

netbatch_engine::reasons! {
    /// Why a packet waiting for its next hop is dropped.
    pub mod reason {
        QUEUE_FULL = "neigh_queue_full": "too many packets waiting for one unresolved neighbour",
        FAILED = "neigh_failed": "neighbour did not answer ARP",
        TABLE_FULL = "neigh_table_full": "neighbour table full",
    }
}

pub mod resolve;

/// What the workers of one datapath share about neighbours: each worker keeps its own
/// table (and its own queues of packets waiting for resolution), and learns what the
/// others learned before each round, as if the table were one. Bounded: a worker that
/// falls more than [`NeighShared::KEEP`] updates behind misses the oldest and resolves them
/// itself.
///
/// The answer to one worker's question may be received by another (the kernel spreads a
/// link's frames over the workers by a hash seeded at boot). An ARP reply is addressed to
/// us, so whichever worker gets it makes an entry (RFC 826's merge rule) and publishes it.
/// A neighbour advertisement makes no entry where none exists (RFC 4861 7.2.5), so the
/// workers also share which neighbours one of them is resolving ([`Self::ask`]): a worker
/// that receives an advertisement for a neighbour another worker asked about applies it as
/// that worker would, and the update reaches the asker before its next round.
#[derive(Debug)]
pub struct NeighSharedOf<F: Family> {
    seq: AtomicU64,
    log: Mutex<VecDeque<LearnedOf<F>>>,
    /// Neighbours some worker is resolving, with when the question lapses.
    asked: Mutex<hashbrown::HashMap<(u16, F::Bits), u64, foldhash::fast::FixedState>>,
    /// `asked`'s length, read without the lock: most advertisements find it empty.
    asking: AtomicUsize,
}

/// What workers learn from ARP.
pub type NeighShared = NeighSharedOf<V4>;
/// What workers learn from neighbour discovery.
pub type NeighShared6 = NeighSharedOf<V6>;

impl<F: Family> Default for NeighSharedOf<F> {
    fn default() -> Self {
        Self {
            seq: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
            asked: Mutex::new(hashbrown::HashMap::default()),
            asking: AtomicUsize::new(0),
        }
    }
}

/// One learned neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearnedOf<F: Family> {
    /// Sequence number of the update.
    pub seq: u64,
    /// Worker that learned it.
    pub origin: usize,
    /// Interface.
    pub iface: u16,
    /// Address.
    pub ip: F::Addr,
    /// MAC.
    pub mac: MacAddr,
    /// The state the learning worker's entry took: `Reachable` (confirmed: an ARP reply, a
    /// solicited advertisement) or `Stale` (unconfirmed: a solicitation's source address,
    /// an unsolicited advertisement).
    pub state: State,
}

/// One neighbour learned from ARP.
pub type Learned = LearnedOf<V4>;

/// Locks `m`, whose data stays consistent whatever a panicking holder did (every update
/// under it is a single push, pop, insert or removal).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<F: Family> NeighSharedOf<F> {
    /// Updates kept for workers that are behind, and questions kept open at most.
    pub const KEEP: usize = 4096;

    /// Tells the other workers that `origin` learned `ip` → `mac` on `iface`, its entry
    /// now in `state`; a question about it is answered.
    pub fn publish(&self, origin: usize, iface: u16, ip: F::Addr, mac: MacAddr, state: State) {
        if self.asking.load(Ordering::Relaxed) > 0 {
            let mut asked = lock(&self.asked);
            if asked.remove(&(iface, F::bits(ip))).is_some() {
                self.asking.store(asked.len(), Ordering::Relaxed);
            }
        }
        let mut log = lock(&self.log);
        let seq = self.seq.load(Ordering::Relaxed) + 1;
        if log.len() == Self::KEEP {
            log.pop_front();
        }
        log.push_back(LearnedOf {
            seq,
            origin,
            iface,
            ip,
            mac,
            state,
        });
        self.seq.store(seq, Ordering::Release);
    }

    /// Updates after `seen` (one atomic load when there are none) into `out`; returns
    /// the sequence number reached.
    pub fn since(&self, seen: u64, out: &mut Vec<LearnedOf<F>>) -> u64 {
        if self.seq.load(Ordering::Acquire) == seen {
            return seen;
        }
        let log = lock(&self.log);
        out.extend(log.iter().filter(|l| l.seq > seen).copied());
        log.back().map_or(seen, |l| l.seq)
    }

    /// Records that a worker is resolving `ip` on `iface` until `until_ns` (the worker's
    /// clock: every worker reads the same one). Bounded by [`Self::KEEP`]: when full,
    /// lapsed questions are forgotten first; a question that still finds no room is not
    /// recorded (its answer then resolves only the worker that receives it, and the asker
    /// retries, as with one worker).
    pub fn ask(&self, iface: u16, ip: F::Bits, now_ns: u64, until_ns: u64) {
        let mut asked = lock(&self.asked);
        if asked.len() >= Self::KEEP && !asked.contains_key(&(iface, ip)) {
            asked.retain(|_, until| *until > now_ns);
            if asked.len() >= Self::KEEP {
                return;
            }
        }
        let e = asked.entry((iface, ip)).or_insert(until_ns);
        *e = (*e).max(until_ns);
        self.asking.store(asked.len(), Ordering::Relaxed);
    }

    /// Whether some worker is resolving `ip` on `iface` at `now_ns` (one atomic load when
    /// no worker is resolving anything).
    pub fn asked(&self, iface: u16, ip: F::Bits, now_ns: u64) -> bool {
        if self.asking.load(Ordering::Relaxed) == 0 {
            return false;
        }
        lock(&self.asked)
            .get(&(iface, ip))
            .is_some_and(|&until| until > now_ns)
    }
}

/// How long a stale entry in use waits for a confirmation before it is probed (RFC 4861
/// 10, `DELAY_FIRST_PROBE_TIME`), for entries learned from neighbour discovery.
pub const DELAY_FIRST_PROBE_NS: u64 = 5_000_000_000;

/// Tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighParams {
    /// Most entries.
    pub max_entries: usize,
    /// Most wire packets waiting per unresolved neighbour (a super-packet larger than
    /// the whole queue is dropped).
    pub queue_len: usize,
    /// How long a confirmation keeps an entry reachable.
    pub reachable_ms: u64,
    /// Interval between requests for an unresolved (or probed) neighbour.
    pub retrans_ms: u64,
    /// Requests before giving up.
    pub max_probes: u32,
    /// Stale entries unused for this long are removed.
    pub gc_stale_ms: u64,
}

impl Default for NeighParams {
    fn default() -> Self {
        Self {
            max_entries: 4096,
            // Linux's `unres_qlen` (derived from `unres_qlen_bytes`, 212992, in full-size
            // frames): room for a GRO super-packet or two.
            queue_len: 101,
            reachable_ms: 30_000,
            retrans_ms: 1000,
            max_probes: 3,
            gc_stale_ms: 60_000,
        }
    }
}

/// Entry state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Resolution under way.
    Incomplete,
    /// Recently confirmed.
    Reachable,
    /// Not confirmed lately; still used.
    Stale,
    /// Static, never ages.
    Permanent,
}

#[derive(Debug)]
struct Entry<F: Family> {
    ip: F::Bits,
    iface: u16,
    mac: MacAddr,
    state: State,
    /// Last confirmation (reply or request from it).
    confirmed_ns: u64,
    /// Last time a packet used it.
    used_ns: u64,
    probes: u32,
    next_probe_ns: u64,
    /// Waiting packets with the wire packets each carries, oldest first.
    queue: VecDeque<(Pkt, u32)>,
    /// Wire packets in `queue`.
    queued_wire: u32,
}

/// One entry as reports show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighViewOf<F: Family> {
    /// Interface index.
    pub iface: u16,
    /// Address.
    pub ip: F::Addr,
    /// Link-layer address, once resolved.
    pub mac: Option<MacAddr>,
    /// State.
    pub state: State,
    /// Wire packets waiting for resolution.
    pub queued: u32,
}

/// One IPv4 entry as reports show it.
pub type NeighView = NeighViewOf<V4>;

impl State {
    /// The state's name as `ip neigh` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Incomplete => "INCOMPLETE",
            Self::Reachable => "REACHABLE",
            Self::Stale => "STALE",
            Self::Permanent => "PERMANENT",
        }
    }
}

impl<F: Family> Entry<F> {
    /// The entry now resolves to `mac` in `state`: what waited for it is released into
    /// `waiting`, in order.
    fn resolved(&mut self, mac: MacAddr, state: State, waiting: &mut Vec<Pkt>) {
        self.mac = mac;
        self.state = state;
        self.queued_wire = 0;
        waiting.extend(self.queue.drain(..).map(|(p, _)| p));
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighStats {
    /// Entries created.
    pub created: u64,
    /// Resolutions that failed.
    pub failed: u64,
    /// Entries evicted to make room.
    pub evicted: u64,
    /// Entries refused because the table was full.
    pub table_full: u64,
    /// Wire packets queued while resolving.
    pub queued: u64,
    /// Wire packets dropped from (or refused by) a full resolution queue.
    pub queue_overflow: u64,
    /// Requests asked for (first resolution and retries).
    pub requests: u64,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Resolved: send to this MAC.
    Mac(MacAddr),
    /// Resolved but stale: send, and probe (the caller asks for a unicast request).
    StaleMac(MacAddr),
    /// Resolution under way (slot index).
    Pending(u32),
    /// Unknown.
    Miss,
}

/// A request the table wants sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOf<F: Family> {
    /// Interface to send on.
    pub iface: u16,
    /// Address asked for.
    pub target: F::Addr,
    /// Unicast to this MAC (refreshing a stale entry) or broadcast.
    pub unicast: Option<MacAddr>,
}

/// An ARP request the table wants sent.
pub type Probe = ProbeOf<V4>;

/// The map key of `ip` on `iface`.
#[inline(always)]
fn key<B>(iface: u16, ip: B) -> (u16, B) {
    (iface, ip)
}

/// The neighbour table of one worker, for one address family.
#[derive(Debug)]
pub struct NeighTableOf<F: Family> {
    params: NeighParams,
    map: hashbrown::HashMap<(u16, F::Bits), u32, foldhash::fast::FixedState>,
    slots: Vec<Option<Entry<F>>>,
    free: Vec<u32>,
    /// Counters.
    pub stats: NeighStats,
}

/// The ARP table.
pub type NeighTable = NeighTableOf<V4>;
/// The IPv6 neighbour cache (RFC 4861 5.1).
pub type NeighTable6 = NeighTableOf<V6>;

impl<F: Family> NeighTableOf<F> {
    /// An empty table.
    pub fn new(params: NeighParams) -> Self {
        Self {
            params,
            map: hashbrown::HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            stats: NeighStats::default(),
        }
    }

    /// The tunables.
    pub fn params(&self) -> &NeighParams {
        &self.params
    }

    /// Adds a static entry (never ages, never evicted); what waits for it keeps waiting
    /// until the next resolution step (at start nothing does; a live change uses
    /// [`Self::set_static`]).
    pub fn add_static(&mut self, iface: u16, ip: F::Addr, mac: MacAddr) -> bool {
        let ip = F::bits(ip);
        match self.slot_for(iface, ip, 0, true) {
            Some(i) => {
                if let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) {
                    e.mac = mac;
                    e.state = State::Permanent;
                }
                true
            }
            None => false,
        }
    }

    /// Adds or replaces a static entry; packets that waited for its resolution are
    /// released into `waiting` (in order), to be sent now that the MAC is known.
    pub fn set_static(
        &mut self,
        iface: u16,
        ip: F::Addr,
        mac: MacAddr,
        waiting: &mut Vec<Pkt>,
    ) -> bool {
        let ip = F::bits(ip);
        match self.slot_for(iface, ip, 0, true) {
            Some(i) => {
                if let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) {
                    e.resolved(mac, State::Permanent, waiting);
                }
                true
            }
            None => false,
        }
    }

    /// Removes the entry of `ip` on `iface` (static or learned), as `ip neigh del`;
    /// packets that waited for it are handed back in `dropped` (the caller drops and
    /// counts them). `false` if there was no such entry.
    pub fn remove(&mut self, iface: u16, ip: F::Addr, dropped: &mut Vec<Pkt>) -> bool {
        let Some(i) = self.map.remove(&key(iface, F::bits(ip))) else {
            return false;
        };
        if let Some(mut e) = self.slots.get_mut(i as usize).and_then(Option::take) {
            dropped.extend(e.queue.drain(..).map(|(p, _)| p));
        }
        self.free.push(i);
        true
    }

    /// Every entry: interface, address, MAC (none while incomplete), state and the wire
    /// packets waiting for it (for `show neigh`).
    pub fn entries(&self) -> Vec<NeighViewOf<F>> {
        let mut v: Vec<NeighViewOf<F>> = self
            .slots
            .iter()
            .flatten()
            .map(|e| NeighViewOf {
                iface: e.iface,
                ip: F::addr(e.ip),
                mac: (e.state != State::Incomplete).then_some(e.mac),
                state: e.state,
                queued: e.queued_wire,
            })
            .collect();
        v.sort_by_key(|e| (e.iface, e.ip));
        v
    }

    /// The link-layer address and state of the entry of `ip` on `iface`, if it is
    /// resolved.
    pub fn resolved(&self, iface: u16, ip: F::Addr) -> Option<(MacAddr, State)> {
        let &i = self.map.get(&key(iface, F::bits(ip)))?;
        let e = self.slots.get(i as usize)?.as_ref()?;
        (e.state != State::Incomplete).then_some((e.mac, e.state))
    }

    /// How long a question about a neighbour stays open: every retry and a retransmit
    /// interval more (the last answer may come late).
    pub fn question_ns(&self) -> u64 {
        (u64::from(self.params.max_probes) + 1) * self.params.retrans_ms * 1_000_000
    }

    /// Looks up `ip` on `iface` at time `now_ns`.
    #[inline]
    pub fn lookup(&mut self, iface: u16, ip: F::Bits, now_ns: u64) -> Lookup {
        let Some(&i) = self.map.get(&key(iface, ip)) else {
            return Lookup::Miss;
        };
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return Lookup::Miss;
        };
        e.used_ns = now_ns;
        match e.state {
            State::Permanent => Lookup::Mac(e.mac),
            State::Reachable
                if now_ns.saturating_sub(e.confirmed_ns) < self.params.reachable_ms * 1_000_000 =>
            {
                Lookup::Mac(e.mac)
            }
            State::Reachable | State::Stale => {
                e.state = State::Stale;
                Lookup::StaleMac(e.mac)
            }
            State::Incomplete => Lookup::Pending(i),
        }
    }

    /// Whether a stale entry is due for a unicast probe now (and marks it sent).
    pub fn want_refresh(&mut self, iface: u16, ip: F::Bits, now_ns: u64) -> bool {
        let Some(&i) = self.map.get(&key(iface, ip)) else {
            return false;
        };
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return false;
        };
        if e.state == State::Stale && now_ns >= e.next_probe_ns {
            e.next_probe_ns = now_ns + self.params.retrans_ms * 1_000_000;
            e.probes += 1;
            self.stats.requests += 1;
            return true;
        }
        false
    }

    fn evict_one(&mut self, now_ns: u64) -> bool {
        // Oldest-used stale entry with nothing queued.
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| {
                e.state == State::Stale
                    || (e.state == State::Reachable
                        && now_ns.saturating_sub(e.confirmed_ns)
                            >= self.params.reachable_ms * 1_000_000)
            })
            .min_by_key(|(_, e)| e.used_ns)
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                if let Some(e) = self.slots.get_mut(i).and_then(Option::take) {
                    self.map.remove(&key(e.iface, e.ip));
                }
                self.free.push(i as u32);
                self.stats.evicted += 1;
                true
            }
            None => false,
        }
    }

    fn slot_for(&mut self, iface: u16, ip: F::Bits, now_ns: u64, create: bool) -> Option<u32> {
        if let Some(&i) = self.map.get(&key(iface, ip)) {
            return Some(i);
        }
        if !create {
            return None;
        }
        if self.map.len() >= self.params.max_entries && !self.evict_one(now_ns) {
            self.stats.table_full += 1;
            return None;
        }
        let e = Entry::<F> {
            ip,
            iface,
            mac: MacAddr([0; 6]),
            state: State::Incomplete,
            confirmed_ns: 0,
            used_ns: now_ns,
            probes: 0,
            next_probe_ns: now_ns,
            queue: VecDeque::new(),
            queued_wire: 0,
        };
        // A free slot is one an entry left (an index into `slots`).
        let free = self.free.pop();
        let i = match free.and_then(|i| Some((i, self.slots.get_mut(i as usize)?))) {
            Some((i, slot)) => {
                *slot = Some(e);
                i
            }
            None => {
                self.slots.push(Some(e));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key(iface, ip), i);
        self.stats.created += 1;
        Some(i)
    }

    /// Starts resolving `ip` on `iface` (or finds the resolution under way) and queues
    /// `p`, which carries `wire` wire packets, behind it. Returns the probe to send if one
    /// is due now, and whether the table was full (then `p` itself is in `overflow`).
    /// Packets pushed out of a full queue (the oldest first, as Linux does, until `p`
    /// fits; `p` itself if it alone is larger than the queue) go to `overflow`.
    pub fn queue(
        &mut self,
        iface: u16,
        ip: F::Bits,
        (p, wire): (Pkt, u32),
        now_ns: u64,
        overflow: &mut Vec<Pkt>,
    ) -> (Option<ProbeOf<F>>, bool) {
        let Some(i) = self.slot_for(iface, ip, now_ns, true) else {
            overflow.push(p);
            return (None, true);
        };
        let cap = u32::try_from(self.params.queue_len).unwrap_or(u32::MAX);
        let retrans = self.params.retrans_ms * 1_000_000;
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            overflow.push(p);
            return (None, true);
        };
        let wire = wire.max(1);
        if wire > cap {
            overflow.push(p);
            self.stats.queue_overflow += u64::from(wire);
        } else {
            while e.queued_wire + wire > cap {
                let Some((old, n)) = e.queue.pop_front() else {
                    break;
                };
                e.queued_wire -= n;
                self.stats.queue_overflow += u64::from(n);
                overflow.push(old);
            }
            e.queue.push_back((p, wire));
            e.queued_wire += wire;
            self.stats.queued += u64::from(wire);
        }
        let mut probe = None;
        if e.state == State::Incomplete && e.probes == 0 {
            e.probes = 1;
            e.next_probe_ns = now_ns + retrans;
            self.stats.requests += 1;
            probe = Some(ProbeOf {
                iface,
                target: F::addr(ip),
                unicast: None,
            });
        }
        (probe, false)
    }

    /// Records that `ip` on `iface` is at `mac` (from an ARP reply, or a request whose
    /// sender we keep). `create`: make an entry if there is none (RFC 826: only when the
    /// packet was for us). Returns the packets that were waiting, in order.
    pub fn learn(
        &mut self,
        iface: u16,
        ip: F::Addr,
        mac: MacAddr,
        now_ns: u64,
        create: bool,
        waiting: &mut Vec<Pkt>,
    ) -> bool {
        let ip = F::bits(ip);
        let Some(i) = self.slot_for(iface, ip, now_ns, create) else {
            return false;
        };
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return false;
        };
        if e.state == State::Permanent {
            return true;
        }
        e.confirmed_ns = now_ns;
        e.probes = 0;
        e.resolved(mac, State::Reachable, waiting);
        true
    }

    /// Records that `ip` on `iface` is at `mac` from unsolicited information (the source
    /// link-layer address option of a solicitation, RFC 4861 7.2.3): a new entry, or one
    /// whose address changes, becomes stale; an incomplete one is resolved (stale) and
    /// releases what waited for it into `waiting`; one with the same address keeps its
    /// state. A stale entry just learned is first probed after
    /// [`DELAY_FIRST_PROBE_NS`] of use without a confirmation (RFC 4861 7.3.3, DELAY).
    pub fn learn_stale(
        &mut self,
        iface: u16,
        ip: F::Addr,
        mac: MacAddr,
        now_ns: u64,
        waiting: &mut Vec<Pkt>,
    ) -> bool {
        let Some(i) = self.slot_for(iface, F::bits(ip), now_ns, true) else {
            return false;
        };
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return false;
        };
        match e.state {
            State::Permanent => {}
            State::Incomplete => {
                e.probes = 0;
                e.next_probe_ns = now_ns + DELAY_FIRST_PROBE_NS;
                e.resolved(mac, State::Stale, waiting);
            }
            _ if e.mac != mac => {
                e.mac = mac;
                e.state = State::Stale;
                e.probes = 0;
                e.next_probe_ns = now_ns + DELAY_FIRST_PROBE_NS;
            }
            _ => {}
        }
        true
    }

    /// Applies a neighbour advertisement for `ip` on `iface` (RFC 4861 7.2.5) carrying
    /// `mac` (its target link-level address option, if any) and its solicited and
    /// override flags. Without an entry it changes nothing (`false`: the advertisement is
    /// discarded). An incomplete entry needs `mac`: it becomes reachable when solicited,
    /// else stale, and releases what waited into `waiting`. A resolved entry is confirmed
    /// (reachable) by a solicited advertisement; a different `mac` replaces its address
    /// only with the override flag (then, unsolicited, it is stale), and without it turns
    /// a reachable entry stale and is otherwise ignored. Static entries never change.
    #[allow(clippy::too_many_arguments)]
    pub fn advert(
        &mut self,
        iface: u16,
        ip: F::Addr,
        mac: Option<MacAddr>,
        solicited: bool,
        override_flag: bool,
        now_ns: u64,
        waiting: &mut Vec<Pkt>,
    ) -> bool {
        let Some(&i) = self.map.get(&key(iface, F::bits(ip))) else {
            return false;
        };
        let Some(e) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return false;
        };
        match e.state {
            State::Permanent => {}
            State::Incomplete => {
                let Some(mac) = mac else {
                    return true;
                };
                e.probes = 0;
                e.confirmed_ns = now_ns;
                e.next_probe_ns = now_ns + DELAY_FIRST_PROBE_NS;
                let state = if solicited {
                    State::Reachable
                } else {
                    State::Stale
                };
                e.resolved(mac, state, waiting);
            }
            _ => {
                let changed = mac.is_some_and(|m| m != e.mac);
                if changed && !override_flag {
                    if e.state == State::Reachable {
                        e.state = State::Stale;
                    }
                    return true;
                }
                if let Some(m) = mac {
                    e.mac = m;
                }
                if solicited {
                    e.state = State::Reachable;
                    e.confirmed_ns = now_ns;
                    e.probes = 0;
                } else if changed {
                    e.state = State::Stale;
                    e.probes = 0;
                    e.next_probe_ns = now_ns + DELAY_FIRST_PROBE_NS;
                }
            }
        }
        true
    }

    /// Advances timers: retries due requests, fails exhausted resolutions (their queued
    /// packets go to `failed`), removes long-unused stale entries.
    pub fn tick(&mut self, now_ns: u64, probes: &mut Vec<ProbeOf<F>>, failed: &mut Vec<Pkt>) {
        let p = self.params;
        let mut remove = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(e) = slot.as_mut() else { continue };
            match e.state {
                State::Incomplete if now_ns >= e.next_probe_ns && e.probes > 0 => {
                    if e.probes >= p.max_probes {
                        e.queued_wire = 0;
                        failed.extend(e.queue.drain(..).map(|(p, _)| p));
                        self.stats.failed += 1;
                        remove.push(i);
                    } else {
                        e.probes += 1;
                        e.next_probe_ns = now_ns + p.retrans_ms * 1_000_000;
                        self.stats.requests += 1;
                        probes.push(ProbeOf {
                            iface: e.iface,
                            target: F::addr(e.ip),
                            unicast: None,
                        });
                    }
                }
                State::Stale if e.probes >= p.max_probes && now_ns >= e.next_probe_ns => {
                    // Probed and never confirmed: the neighbour is gone.
                    self.stats.failed += 1;
                    remove.push(i);
                }
                State::Stale | State::Reachable
                    if now_ns.saturating_sub(e.used_ns.max(e.confirmed_ns))
                        >= p.gc_stale_ms * 1_000_000 =>
                {
                    remove.push(i);
                }
                _ => {}
            }
        }
        for i in remove {
            if let Some(e) = self.slots.get_mut(i).and_then(Option::take) {
                self.map.remove(&key(e.iface, e.ip));
                debug_assert!(e.queue.is_empty());
            }
            self.free.push(i as u32);
        }
    }

    /// The MAC of `ip` on `iface`, if resolved (for tests and reports).
    pub fn mac_of(&self, iface: u16, ip: F::Addr) -> Option<(MacAddr, State)> {
        let i = *self.map.get(&key(iface, F::bits(ip)))?;
        let e = self.slots.get(i as usize)?.as_ref()?;
        (e.state != State::Incomplete).then_some((e.mac, e.state))
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Wire packets waiting in resolution queues.
    pub fn held(&self) -> u64 {
        self.slots
            .iter()
            .flatten()
            .map(|e| u64::from(e.queued_wire))
            .sum()
    }

    /// Frees every queued packet (at shutdown).
    pub fn drain_all(&mut self, cache: &mut BufCache) {
        for e in self.slots.iter_mut().flatten() {
            e.queued_wire = 0;
            for (p, _) in e.queue.drain(..) {
                cache.free(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use netbatch_engine::{Pool, PoolConfig};

    const MS: u64 = 1_000_000;

    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 64,
            cache_size: 8,
            ..Default::default()
        })
        .unwrap()
    }

    /// A question is open until it lapses or is answered (a publication of the same
    /// neighbour closes it); another interface's question is another; when the record is
    /// full, lapsed questions make room and open ones are kept.
    #[test]
    fn questions_lapse_are_answered_and_stay_bounded() {
        let s = NeighShared6::default();
        let ip = |n: u128| 0x2001_0db8_u128 << 96 | n;
        assert!(!s.asked(1, ip(9), 0), "nothing asked yet");
        s.ask(1, ip(9), 0, 10 * MS);
        assert!(s.asked(1, ip(9), 5 * MS));
        assert!(!s.asked(2, ip(9), 5 * MS), "scoped to the interface");
        assert!(!s.asked(1, ip(9), 10 * MS), "lapsed at its deadline");
        s.ask(1, ip(9), 0, 10 * MS);
        s.publish(
            0,
            1,
            ip(9).into(),
            MacAddr([2, 0, 0, 0, 0, 9]),
            State::Reachable,
        );
        assert!(!s.asked(1, ip(9), MS), "answered");
        // Fill the record with questions of which half lapse at 5 ms.
        let keep = NeighShared6::KEEP as u128;
        for n in 0..keep {
            s.ask(0, ip(n), 0, if n % 2 == 0 { 5 * MS } else { 50 * MS });
        }
        s.ask(0, ip(keep), 6 * MS, 60 * MS);
        assert!(
            s.asked(0, ip(keep), 6 * MS),
            "room made from lapsed questions"
        );
        assert!(s.asked(0, ip(1), 6 * MS), "open questions kept");
        assert!(!s.asked(0, ip(0), 6 * MS));
        // Full of open questions: a new one is not recorded, none is lost.
        for n in 0..keep {
            s.ask(0, ip(keep + 1 + n), 6 * MS, 60 * MS);
        }
        assert!(s.asked(0, ip(1), 7 * MS));
        assert_eq!(s.asking.load(Ordering::Relaxed), NeighShared6::KEEP);
    }

    /// A static entry set live releases what waited (in order, once), a learned MAC does
    /// not override it, `remove` hands back what waits and forgets the entry, and
    /// `entries` reports what the table holds (hand-made expectations).
    #[test]
    fn static_entries_set_and_removed_live() {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = NeighTable::new(NeighParams::default());
        let ip = Ipv4Addr::new(192, 0, 2, 9);
        let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
        let (ai, bi) = (a.index(), b.index());
        let mut over = Vec::new();
        let _ = t.queue(0, u32::from(ip), (a, 1), 0, &mut over);
        let _ = t.queue(0, u32::from(ip), (b, 3), MS, &mut over);
        assert_eq!(t.held(), 4);
        let e = t.entries();
        assert_eq!(
            (e.len(), e[0].mac, e[0].state, e[0].queued),
            (1, None, State::Incomplete, 4)
        );
        let mac = MacAddr([2, 0, 0, 0, 0, 9]);
        let mut w = Vec::new();
        assert!(t.set_static(0, ip, mac, &mut w));
        assert_eq!(w.iter().map(Pkt::index).collect::<Vec<_>>(), vec![ai, bi]);
        assert_eq!(t.held(), 0);
        c.free_all(&mut w);
        assert!(t.learn(0, ip, MacAddr([2, 0, 0, 0, 0, 0x77]), 2 * MS, true, &mut w));
        assert_eq!(
            t.mac_of(0, ip),
            Some((mac, State::Permanent)),
            "static wins"
        );
        // Removal: a queued packet on another entry comes back to the caller.
        let other = Ipv4Addr::new(192, 0, 2, 10);
        let p = c.alloc().unwrap();
        let pi = p.index();
        let _ = t.queue(0, u32::from(other), (p, 1), 3 * MS, &mut over);
        let mut dropped = Vec::new();
        assert!(t.remove(0, other, &mut dropped));
        assert_eq!(dropped.iter().map(Pkt::index).collect::<Vec<_>>(), vec![pi]);
        c.free_all(&mut dropped);
        assert!(!t.remove(0, other, &mut dropped), "gone");
        assert!(t.remove(0, ip, &mut dropped) && dropped.is_empty());
        assert!(t.entries().is_empty() && t.is_empty());
        assert!(over.is_empty());
    }

    #[test]
    fn queue_then_learn_releases_in_order() {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = NeighTable::new(NeighParams {
            queue_len: 2,
            ..Default::default()
        });
        let ip = u32::from(Ipv4Addr::new(192, 0, 2, 9));
        let (a, b, d) = (c.alloc().unwrap(), c.alloc().unwrap(), c.alloc().unwrap());
        let (ai, bi, di) = (a.index(), b.index(), d.index());
        let mut over = Vec::new();
        let (probe, full) = t.queue(1, ip, (a, 1), 0, &mut over);
        assert_eq!(
            probe,
            Some(Probe {
                iface: 1,
                target: Ipv4Addr::from(ip),
                unicast: None
            })
        );
        assert!(over.is_empty() && !full);
        let (probe, _) = t.queue(1, ip, (b, 1), MS, &mut over);
        assert!(probe.is_none(), "one request per retransmit interval");
        assert!(over.is_empty());
        let _ = t.queue(1, ip, (d, 1), 2 * MS, &mut over);
        assert_eq!(over.len(), 1);
        assert_eq!(over[0].index(), ai, "the oldest waiting packet makes room");
        c.free_all(&mut over);
        assert_eq!(t.lookup(1, ip, 3 * MS), Lookup::Pending(0));
        let mut w = Vec::new();
        assert!(t.learn(
            1,
            Ipv4Addr::from(ip),
            MacAddr([2, 0, 0, 0, 0, 9]),
            4 * MS,
            false,
            &mut w
        ));
        assert_eq!(w.iter().map(Pkt::index).collect::<Vec<_>>(), vec![bi, di]);
        c.free_all(&mut w);
        assert_eq!(
            t.lookup(1, ip, 5 * MS),
            Lookup::Mac(MacAddr([2, 0, 0, 0, 0, 9]))
        );
        assert_eq!(t.stats.queue_overflow, 1);
    }

    /// The limit is in wire packets: super-packets of 5 and 4 segments fill a queue of
    /// 8 so that the next one of 3 pushes the first out (4 + 3 ≤ 8), one of 9 segments is
    /// refused whole, and `held` reports segments, not buffers.
    #[test]
    fn queue_limit_and_occupancy_count_wire_packets() {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = NeighTable::new(NeighParams {
            queue_len: 8,
            ..Default::default()
        });
        let ip = 0xc000_0209;
        let mut over = Vec::new();
        let (a, b, d, big) = (
            c.alloc().unwrap(),
            c.alloc().unwrap(),
            c.alloc().unwrap(),
            c.alloc().unwrap(),
        );
        let (ai, bigi) = (a.index(), big.index());
        let _ = t.queue(0, ip, (a, 5), 0, &mut over);
        let _ = t.queue(0, ip, (b, 3), 0, &mut over);
        assert!(over.is_empty());
        assert_eq!(t.held(), 8);
        let _ = t.queue(0, ip, (d, 4), 0, &mut over);
        assert_eq!(over.iter().map(Pkt::index).collect::<Vec<_>>(), vec![ai]);
        assert_eq!(t.held(), 7);
        let _ = t.queue(0, ip, (big, 9), 0, &mut over);
        assert_eq!(over.len(), 2);
        assert_eq!(
            over[1].index(),
            bigi,
            "larger than the whole queue: refused"
        );
        assert_eq!(t.held(), 7);
        assert_eq!((t.stats.queued, t.stats.queue_overflow), (12, 14));
        t.drain_all(&mut c);
        c.free_all(&mut over);
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn unanswered_requests_fail_and_release_the_queue() {
        let pool = pool();
        let mut c = pool.cache();
        let mut t = NeighTable::new(NeighParams::default());
        let ip = 0xc000_0209;
        let p = c.alloc().unwrap();
        let _ = t.queue(0, ip, (p, 1), 0, &mut Vec::new());
        let (mut probes, mut failed) = (Vec::new(), Vec::new());
        t.tick(500 * MS, &mut probes, &mut failed);
        assert!(probes.is_empty());
        t.tick(1000 * MS, &mut probes, &mut failed);
        t.tick(2000 * MS, &mut probes, &mut failed);
        assert_eq!(probes.len(), 2, "retries 2 and 3");
        assert!(failed.is_empty());
        t.tick(3000 * MS, &mut probes, &mut failed);
        assert_eq!(failed.len(), 1);
        assert_eq!(t.len(), 0);
        assert_eq!(t.stats.failed, 1);
        c.free_all(&mut failed);
    }

    #[test]
    fn entries_go_stale_and_table_is_bounded() {
        let mut t = NeighTable::new(NeighParams {
            max_entries: 2,
            ..Default::default()
        });
        let mut w = Vec::new();
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        assert!(t.learn(0, Ipv4Addr::new(10, 0, 0, 1), mac, 0, true, &mut w));
        assert!(t.learn(0, Ipv4Addr::new(10, 0, 0, 2), mac, 10 * MS, true, &mut w));
        assert!(
            !t.learn(0, Ipv4Addr::new(10, 0, 0, 3), mac, 20 * MS, true, &mut w),
            "full, nothing stale"
        );
        assert_eq!(t.stats.table_full, 1);
        assert_eq!(t.lookup(0, 0x0a00_0001, 31_000 * MS), Lookup::StaleMac(mac));
        assert!(t.want_refresh(0, 0x0a00_0001, 31_000 * MS));
        assert!(!t.want_refresh(0, 0x0a00_0001, 31_001 * MS));
        assert!(
            t.learn(
                0,
                Ipv4Addr::new(10, 0, 0, 3),
                mac,
                40_000 * MS,
                true,
                &mut w
            ),
            "evicts a stale entry"
        );
        assert_eq!(t.stats.evicted, 1);
        assert!(
            !t.learn(
                0,
                Ipv4Addr::new(10, 0, 0, 4),
                mac,
                40_000 * MS,
                false,
                &mut w
            ),
            "no create"
        );
        assert!(t.add_static(0, Ipv4Addr::new(10, 0, 0, 3), mac));
        assert_eq!(t.lookup(0, 0x0a00_0003, u64::MAX / 2), Lookup::Mac(mac));
    }
}
