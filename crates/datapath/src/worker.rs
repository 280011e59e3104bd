//! A worker: its ports' receive queues, its graph, its host state, its buffer cache, its
//! applications, and the poll loop that ties them together.
//!
//! One round of [`Worker::poll`]:
//! 1. each receive queue is polled for up to `weight` frames (64, the NAPI weight); in
//!    list mode each queue's frames go through the graph as one list, in per-packet mode
//!    each frame goes through the whole graph before the next is pulled from the port;
//!    then GRO hands on what it holds (the end of the queue's poll is the end of the GRO
//!    window, as in NAPI). With RPS (several workers), the frames are first spread over
//!    the workers (`rps`): other workers' shares go to their rings, the own share is
//!    handled by the policy;
//! 2. with RPS: the workers sent to are kicked (once each), the deferred own share runs as
//!    one list, and the backlog (rings from other workers, own backlog) is processed a
//!    list of up to `weight` at a time, each list through the whole graph.
//!
//!    Steps 1 and 2 share the round's `budget` (300 frames) and time cap (2 ms): before
//!    each queue or backlog source but the first, the round stops once either is spent
//!    (`time_squeeze`), and the next round resumes where it stopped;
//! 3. applications run (they read sockets, queue sends);
//! 4. timers run (neighbour retries and failures), at most every millisecond;
//! 5. packets injected by 3 and 4 run through the graph;
//! 6. transmit queues are flushed to the ports; frames a port cannot take are dropped
//!    and counted (`tx_ring_full`; `frame_too_long` for frames beyond what it carries;
//!    `link_down` while its link is down); then every port reports what its link or the
//!    kernel kept from the wire since the last round (`link_down` for frames taken back
//!    from a transmit ring when the link went down, `kernel_tx_dropped` for the kernel's
//!    own transmit drops), which move from transmitted to dropped.

use netbatch_engine::{
    Accounting, BufCache, Cx, DropCounters, Graph, GraphError, LIST_MAX, Mode, NodeId,
    NodeSnapshot, PktList, Pool,
};
use netbatch_ports::{Port, PortCx, PortStats};
use netbatch_stack::host::Entry;
use netbatch_stack::iface::Pair;
use netbatch_stack::{Entries, Host};

use crate::apps::App;
use crate::rps::Steer;

netbatch_engine::reasons! {
    /// Why the worker itself drops a packet.
    pub mod reason {
        SHUTDOWN = "shutdown": "still queued when the datapath stopped",
        NEIGH_DELETED = "neigh_deleted": "waited for a neighbour entry that was deleted (neigh del)",
        SOCKET_CLOSED = "socket_closed": "queued on a socket its application closed (apps reloaded)",
    }
}

/// Poll-loop parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollParams {
    /// Frames per queue per round (NAPI weight).
    pub weight: usize,
    /// Frames per round over all queues (`netdev_budget`).
    pub budget: usize,
    /// List or per-packet processing.
    pub mode: Mode,
    /// Time a round may take before it stops early (`netdev_budget_usecs`), in ns.
    pub time_cap_ns: u64,
}

impl Default for PollParams {
    fn default() -> Self {
        Self {
            weight: 64,
            budget: 300,
            mode: Mode::List,
            time_cap_ns: 2_000_000,
        }
    }
}

/// Worker counters beyond the graph's (softnet-style).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Rounds run.
    pub rounds: u64,
    /// Rounds that stopped on the budget or the time cap with frames possibly left.
    pub time_squeeze: u64,
    /// Frames run through this worker's graph: received and kept here, taken from its
    /// backlog, or injected. A frame handed to another worker counts there, not here.
    pub processed: u64,
    /// Time in rounds that found work, in ns (kept by the worker thread's loop).
    pub busy_ns: u64,
    /// Time in rounds that found nothing, spinning or asleep, in ns.
    pub idle_ns: u64,
}

/// The stage context of a worker's round: its pool, cache and fate counters at `now_ns`
/// (a macro, so the borrow of those fields stays apart from the graph's and the host's).
macro_rules! stage_cx {
    ($w:ident, $now:expr) => {
        Cx {
            pool: &$w.pool,
            cache: &mut $w.cache,
            now_ns: $now,
            acct: &mut $w.acct,
        }
    };
}

/// Indices of the pseudo-stages in `Worker::outside`.
const PORT_RX: usize = 0;
const PORT_TX: usize = 1;
const RPS: usize = 2;
const CONTROL: usize = 3;

/// One worker.
pub struct Worker {
    /// The stage graph.
    pub graph: Graph<Host>,
    /// The stack state.
    pub host: Host,
    /// Ports (indexed like `Host::ports`): this worker's queue of each port.
    pub ports: Vec<Box<dyn Port>>,
    /// Ports this worker receives from.
    pub rx_ports: Vec<u16>,
    /// Applications.
    pub apps: Vec<Box<dyn App>>,
    /// Fate counters.
    pub acct: Accounting,
    /// Softnet-style counters.
    pub stats: WorkerStats,
    /// Drops outside the graph, as pseudo-stages: frames the ports dropped at receive
    /// (`port-rx`), at transmit or when stopping (`port-tx`), full RPS backlogs (`rps`).
    outside: [(&'static str, DropCounters); 4],
    /// RPS: this worker's side (none with a single worker and no RPS).
    pub steer: Option<Steer>,
    pool: Pool,
    cache: BufCache,
    params: PollParams,
    /// Where received frames and injected packets enter the graph.
    entries: Entries,
    list: PktList,
    drops: PktList,
    next_timer_ns: u64,
    clock: quanta::Clock,
    /// The receive queue (index into `rx_ports`) the next round starts at.
    rx_next: usize,
    /// The backlog source the next round's backlog phase starts at.
    backlog_next: usize,
    /// The backlog phase goes first this round (the last round was cut short).
    backlog_first: bool,
    /// Counters of graphs this worker ran before its current one (see
    /// [`Worker::replace_graph`]), merged by node name into [`Worker::snapshot`].
    retired: Vec<NodeSnapshot>,
    /// Traces taken out of graphs this worker replaced, until shown.
    traces: Vec<netbatch_engine::TraceDump>,
}

/// One round's progress against its budget and time cap.
#[derive(Debug, Clone, Copy)]
struct Round {
    /// TSC when the round began.
    start: u64,
    /// Frames received or taken from the backlog so far.
    taken: usize,
    /// Units (receive queues, backlog sources) polled so far.
    units: usize,
}

/// The two phases of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Rx,
    Backlog,
}

impl core::fmt::Debug for Worker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("graph", &self.graph)
            .field("acct", &self.acct)
            .finish()
    }
}

impl Worker {
    /// A worker over a graph, host state and ports, drawing buffers from `pool` (built
    /// from a configuration by the control plane: `netbatch_runtime::build`, the one way
    /// a worker is assembled).
    pub fn new(
        graph: Graph<Host>,
        host: Host,
        ports: Vec<Box<dyn Port>>,
        pool: Pool,
        params: PollParams,
    ) -> Result<Self, GraphError> {
        let entries = netbatch_stack::entries(&graph)?;
        let rx_ports = (0..ports.len() as u16).collect();
        Ok(Self {
            graph,
            host,
            ports,
            rx_ports,
            apps: Vec::new(),
            acct: Accounting::default(),
            stats: WorkerStats::default(),
            outside: [
                ("port-rx", DropCounters::default()),
                (
                    "port-tx",
                    DropCounters::declared(&[
                        netbatch_engine::reason::FRAME_TOO_LONG,
                        netbatch_engine::reason::TX_RING_FULL,
                        netbatch_engine::reason::LINK_DOWN,
                        netbatch_engine::reason::KERNEL_TX_DROPPED,
                    ]),
                ),
                ("rps", DropCounters::default()),
                (
                    "control",
                    DropCounters::declared(&[reason::NEIGH_DELETED, reason::SOCKET_CLOSED]),
                ),
            ],
            steer: None,
            cache: pool.cache(),
            pool,
            params,
            entries,
            list: Vec::with_capacity(LIST_MAX),
            drops: Vec::new(),
            next_timer_ns: 0,
            clock: netbatch_engine::time::clock(),
            rx_next: 0,
            backlog_next: 0,
            backlog_first: false,
            retired: Vec::new(),
            traces: Vec::new(),
        })
    }

    /// The poll parameters.
    pub fn params(&self) -> PollParams {
        self.params
    }

    /// Changes the poll parameters (between rounds).
    pub fn set_params(&mut self, p: PollParams) {
        self.params = p;
    }

    /// Switches list / per-packet mode (between rounds).
    pub fn set_mode(&mut self, m: Mode) {
        self.params.mode = m;
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs one round at time `now_ns`; returns the frames it received or took from its
    /// backlog (0: the worker had nothing to do).
    ///
    /// The round polls units, as `net_rx_action` polls NAPI instances: each receive queue,
    /// and with RPS each backlog source (another worker's ring, or the own backlog), up to
    /// `weight` frames each. Every frame counts against the round's `budget`, received and
    /// backlog frames alike (a frame received here and then taken from the own backlog
    /// counts twice, as in the kernel). Before each unit but the round's first, the round
    /// stops if the budget is spent or `time_cap_ns` has passed since it began: that is a
    /// `time_squeeze`, and the next round resumes where this one stopped (receive queues
    /// and backlog sources each rotate, and the two phases swap order), so neither starves
    /// the other.
    pub fn poll(&mut self, now_ns: u64) -> usize {
        self.stats.rounds += 1;
        self.host.sync_neighbours(now_ns);
        let mut round = Round {
            start: self.clock.raw(),
            taken: 0,
            units: 0,
        };
        let phases = if self.backlog_first {
            [Phase::Backlog, Phase::Rx]
        } else {
            [Phase::Rx, Phase::Backlog]
        };
        self.backlog_first = false;
        for ph in phases {
            let cut = match ph {
                Phase::Rx => {
                    let cut = self.rx_phase(&mut round, now_ns);
                    // Whatever was received this round: other workers are kicked once
                    // each, and the deferred own share runs now that theirs left.
                    self.after_rx(now_ns);
                    cut
                }
                Phase::Backlog => self.backlog_phase(&mut round, now_ns),
            };
            if cut {
                self.stats.time_squeeze += 1;
                // The order flips: the phase that did not run, or did not finish, goes
                // first next round (as the kernel's unpolled NAPIs stay at the front).
                self.backlog_first = phases[0] == Phase::Rx;
                break;
            }
        }
        self.finish_round(now_ns);
        round.taken
    }

    /// A round without receiving (while stopping): the backlog (within the round's
    /// budget), applications, timers, injected packets and transmit. Returns the backlog
    /// packets processed.
    pub fn poll_drain(&mut self, now_ns: u64) -> usize {
        self.stats.rounds += 1;
        self.host.sync_neighbours(now_ns);
        let mut round = Round {
            start: self.clock.raw(),
            taken: 0,
            units: 0,
        };
        self.after_rx(now_ns);
        if self.backlog_phase(&mut round, now_ns) {
            self.stats.time_squeeze += 1;
        }
        self.finish_round(now_ns);
        round.taken
    }

    /// Whether the round must stop before its next unit (budget or time cap). The first
    /// unit of a round always runs.
    fn round_over(&self, round: &Round) -> bool {
        round.units > 0
            && (round.taken >= self.params.budget
                || self.clock.delta_as_nanos(round.start, self.clock.raw())
                    >= self.params.time_cap_ns)
    }

    /// Polls the receive queues, from the one a cut-short round stopped at. Returns true
    /// if the round was cut short.
    fn rx_phase(&mut self, round: &mut Round, now_ns: u64) -> bool {
        let n = self.rx_ports.len();
        let weight = self.params.weight.min(LIST_MAX);
        for k in 0..n {
            let qi = (self.rx_next + k) % n;
            if self.round_over(round) {
                self.rx_next = qi;
                return true;
            }
            let port = usize::from(self.rx_ports[qi]);
            let quota = weight.min(self.params.budget.saturating_sub(round.taken).max(1));
            round.taken += self.rx_queue(port, quota, now_ns);
            round.units += 1;
        }
        self.rx_next = 0;
        false
    }

    /// The part of a round after the receive queues.
    fn finish_round(&mut self, now_ns: u64) {
        self.run_apps(now_ns);
        if now_ns >= self.next_timer_ns {
            self.next_timer_ns = now_ns + 1_000_000;
            netbatch_stack::timers::run(&mut self.host, &self.pool, &mut self.cache, now_ns);
            // Stages that keep packets across polls (defragmentation's timeouts) look at
            // them even when nothing is received.
            self.end_of_poll(now_ns);
        }
        self.run_injected(now_ns);
        self.flush_tx(now_ns);
    }

    /// Receives up to `quota` frames from `port` and runs them (or, with RPS, spreads
    /// them and runs the own share the policy says to run now).
    fn rx_queue(&mut self, port: usize, quota: usize, now_ns: u64) -> usize {
        let mode = self.params.mode;
        let mut n = 0;
        // Per-packet mode pulls one frame at a time and takes it all the way.
        let step = if mode == Mode::Packet { 1 } else { quota };
        // A tap of a host interface pair has its own entry and is never steered: its
        // frames are the kernel's, for the wire as they are.
        let pair = self.host.ports.get(port).map_or(Pair::None, |p| p.pair);
        let entry = self.entries.receive_for(pair);
        let unsteered = self.steer.is_none() || entry != self.entries.receive;
        while n < quota {
            let Some(p) = self.ports.get_mut(port) else {
                break;
            };
            let before = self.list.len();
            // Counts are in wire packets: a super-frame from the kernel counts its segments.
            self.acct.rx += p.rx(
                &mut PortCx {
                    pool: &self.pool,
                    cache: &mut self.cache,
                    now_ns,
                },
                &mut self.list,
                step.min(quota - n),
            );
            let got = self.list.len() - before;
            if got == 0 {
                break;
            }
            n += got;
            if self.graph.trace().armed() {
                for pk in &mut self.list {
                    self.graph
                        .trace_mut()
                        .maybe_mark(&self.pool, pk, port as u16, now_ns);
                }
            }
            if unsteered && mode == Mode::Packet {
                // The per-packet twin, as lean as it was before RPS existed.
                self.stats.processed += got as u64;
                if let Some(pk) = self.list.pop() {
                    let mut cx = stage_cx!(self, now_ns);
                    self.graph.run_one(&mut self.host, &mut cx, entry, pk);
                }
                continue;
            }
            // With RPS, what stays in the list is the own share to run now (`direct`).
            let steered = match self.steer.as_mut() {
                Some(st) if !unsteered => {
                    st.distribute(&self.pool, port, &mut self.list, &mut self.drops);
                    self.acct.handed_off = st.stats.handed_off;
                    true
                }
                _ => false,
            };
            self.backlog_drops();
            let own = self.list.len();
            self.stats.processed += own as u64;
            if own > 0 {
                let mut l = core::mem::take(&mut self.list);
                self.run_at(entry, &mut l, now_ns);
                self.list = l;
                if steered && let Some(st) = self.steer.as_mut() {
                    st.done_own(own);
                }
            }
            if mode == Mode::List {
                break;
            }
        }
        if n > 0 {
            self.end_of_poll(now_ns);
        }
        self.port_rx_drops(port);
        n
    }

    /// Counts what `port` received and dropped itself (no buffer, too long) as received
    /// and dropped.
    fn port_rx_drops(&mut self, port: usize) {
        let Some(d) = self.ports.get_mut(port).map(|p| p.take_rx_drops()) else {
            return;
        };
        if d.total() == 0 {
            return;
        }
        self.acct.rx += d.total();
        self.acct.dropped += d.total();
        let c = &mut self.outside[PORT_RX].1;
        c.add(netbatch_engine::reason::NO_BUFFER, d.no_buffer);
        c.add(netbatch_engine::reason::FRAME_TOO_LONG, d.too_long);
    }

    /// Counts and frees what RPS could not queue (full backlog).
    fn backlog_drops(&mut self) {
        if self.drops.is_empty() {
            return;
        }
        let n: u64 = self
            .drops
            .iter()
            .map(|p| self.pool.get(p).meta.wire_packets())
            .sum();
        self.acct.dropped += n;
        self.outside[RPS].1.add(crate::rps::reason::BACKLOG_FULL, n);
        self.cache.free_all(&mut self.drops);
    }

    /// Runs `list` through the graph from its entry (as a list, or packet by packet).
    #[inline]
    fn run(&mut self, list: &mut PktList, now_ns: u64) {
        self.run_at(self.entries.receive, list, now_ns);
    }

    /// Runs `list` through the graph from `node` (as a list, or packet by packet).
    #[inline]
    fn run_at(&mut self, node: NodeId, list: &mut PktList, now_ns: u64) {
        if list.is_empty() {
            return;
        }
        let mut cx = stage_cx!(self, now_ns);
        let one_by_one = self.params.mode == Mode::Packet;
        if one_by_one {
            for p in list.drain(..) {
                self.graph.run_one(&mut self.host, &mut cx, node, p);
            }
        } else {
            self.graph.run(&mut self.host, &mut cx, node, list);
        }
    }

    /// The end of a poll (of a receive queue, or of a backlog): stages that hold packets
    /// across calls (GRO) hand them on.
    fn end_of_poll(&mut self, now_ns: u64) {
        let mut cx = stage_cx!(self, now_ns);
        let one_by_one = self.params.mode == Mode::Packet;
        self.graph.flush_held(&mut self.host, &mut cx, one_by_one);
        if self
            .host
            .defrag_handoff
            .as_ref()
            .is_some_and(|h| !h.is_empty())
        {
            self.hand_off_whole();
        }
    }

    /// Hands the datagrams the defragmentation stages made whole for another worker
    /// (`Host::defrag_handoff`) to their rings, in the order they were made whole, and
    /// kicks their workers; a ring without room for a datagram's fragments drops it,
    /// counted in wire packets (`defrag_handoff_full`, on the `rps` pseudo-stage).
    fn hand_off_whole(&mut self) {
        let (Some(h), Some(st)) = (self.host.defrag_handoff.as_mut(), self.steer.as_mut()) else {
            return;
        };
        for (to, p) in h.drain() {
            if let Err(p) = st.hand_off(&self.pool, usize::from(to), p) {
                let wire = self.pool.get(&p).meta.wire_packets();
                st.stats.dropped += wire;
                self.acct.dropped += wire;
                self.outside[RPS]
                    .1
                    .add(crate::rps::reason::HANDOFF_FULL, wire);
                self.cache.free(p);
            }
        }
        self.acct.handed_off = st.stats.handed_off;
        st.kick();
    }

    /// With RPS, after the receive queues: kicks the workers sent to (once each), then
    /// runs the deferred own share as one list (or a few), now that the others have
    /// theirs.
    fn after_rx(&mut self, now_ns: u64) {
        let Some(st) = self.steer.as_mut() else {
            return;
        };
        st.kick();
        if st.deferred.is_empty() {
            return;
        }
        let mut all = st.take_deferred();
        let n = all.len();
        let mut chunk = core::mem::take(&mut self.list);
        while !all.is_empty() {
            let k = all.len().min(LIST_MAX);
            chunk.extend(all.drain(..k));
            self.run(&mut chunk, now_ns);
        }
        self.end_of_poll(now_ns);
        self.list = chunk;
        self.stats.processed += n as u64;
        if let Some(st) = self.steer.as_mut() {
            st.done_own(n);
            st.deferred = all;
        }
    }

    /// With RPS: the backlog, each source (another worker's ring, or the own backlog) a
    /// unit of up to `weight` packets run as one list, from the source a cut-short round
    /// stopped at. Returns true if the round was cut short.
    fn backlog_phase(&mut self, round: &mut Round, now_ns: u64) -> bool {
        let weight = self.params.weight.min(LIST_MAX);
        let Some(st) = self.steer.as_mut() else {
            return false;
        };
        st.take_kick();
        let n = st.fabric().workers();
        let mut cut = false;
        for k in 0..n {
            let src = (self.backlog_next + k) % n;
            if self.round_over(round) {
                self.backlog_next = src;
                cut = true;
                break;
            }
            let mut l = core::mem::take(&mut self.list);
            let quota = weight.min(self.params.budget.saturating_sub(round.taken).max(1));
            let got = self
                .steer
                .as_mut()
                .map_or(0, |st| st.take(&self.pool, src, &mut l, quota));
            if got > 0 {
                self.stats.processed += got as u64;
                self.run(&mut l, now_ns);
                self.end_of_poll(now_ns);
                if let Some(st) = self.steer.as_mut() {
                    st.done(src, got);
                    st.stats.backlog_polls += 1;
                    self.acct.taken_over = st.stats.taken_over;
                }
                round.taken += got;
                round.units += 1;
            }
            self.list = l;
            round.taken += self.take_whole(src, quota, now_ns);
        }
        if !cut {
            self.backlog_next = 0;
        }
        if let Some(st) = self.steer.as_mut() {
            st.stats.backlog_len = st.backlog_len();
        }
        cut
    }

    /// Whole datagrams worker `src` handed over (their connection is this worker's), up
    /// to `quota`: each family's enter at its defragmentation stage, which passes them on
    /// whole, in the order they were handed over. Returns how many.
    fn take_whole(&mut self, src: usize, quota: usize, now_ns: u64) -> usize {
        let mut l = core::mem::take(&mut self.list);
        let got = self
            .steer
            .as_mut()
            .map_or(0, |st| st.take_handed(&self.pool, src, &mut l, quota));
        if got > 0 {
            self.stats.processed += got as u64;
            self.acct.taken_over = self.steer.as_ref().map_or(0, |st| st.stats.taken_over);
            // A flow is of one family: splitting the list by family keeps every flow's
            // order. Mostly the list is of one family and runs as it is.
            let six = |p: &netbatch_engine::Pkt| {
                self.pool.get(p).meta.l3_type == netbatch_stack::dissect::L3::Ipv6 as u8
            };
            let first = l.first().is_some_and(six);
            let mut other: PktList = if l.iter().all(|p| six(p) == first) {
                Vec::new()
            } else {
                let (a, b) = l.drain(..).partition(|p| six(p) == first);
                l = a;
                b
            };
            for (fam, list) in [
                (usize::from(first), &mut l),
                (usize::from(!first), &mut other),
            ] {
                if list.is_empty() {
                    continue;
                }
                match self.entries.handed[fam] {
                    Some(node) => self.run_at(node, list, now_ns),
                    // Tracking was turned off by a reload meanwhile: no stage to enter.
                    None => {
                        let wire: u64 = list
                            .iter()
                            .map(|p| self.pool.get(p).meta.wire_packets())
                            .sum();
                        self.acct.dropped += wire;
                        self.outside[RPS]
                            .1
                            .add(crate::rps::reason::HANDOFF_UNTRACKED, wire);
                        self.cache.free_all(list);
                    }
                }
            }
            self.end_of_poll(now_ns);
        }
        self.list = l;
        got
    }

    fn run_apps(&mut self, now_ns: u64) {
        if self.apps.is_empty() {
            return;
        }
        let mut cx = stage_cx!(self, now_ns);
        for a in &mut self.apps {
            a.poll(&mut self.host, &mut cx);
        }
    }

    /// Runs packets queued in `Host::injected` through the graph, each queue from its
    /// entry point.
    pub fn run_injected(&mut self, now_ns: u64) {
        if self.host.injected.is_empty() {
            return;
        }
        self.acct.originated += core::mem::take(&mut self.host.injected.originated);
        for (e, node) in Entry::ALL.into_iter().zip(self.entries.injected) {
            let mut l = self.host.injected.take(e);
            if !l.is_empty() {
                self.stats.processed += l.len() as u64;
                self.run_at(node, &mut l, now_ns);
            }
            self.host.injected.give_back(e, l);
        }
    }

    /// Hands every transmit queue to its port.
    pub fn flush_tx(&mut self, now_ns: u64) {
        for (i, q) in self.host.tx.iter_mut().enumerate() {
            if q.is_empty() {
                continue;
            }
            if let Some(port) = self.ports.get_mut(i) {
                self.acct.tx += port.tx(
                    &mut PortCx {
                        pool: &self.pool,
                        cache: &mut self.cache,
                        now_ns,
                    },
                    q,
                );
                let bad = port.take_unsendable();
                if bad > 0 {
                    self.acct.dropped += bad;
                    self.outside[PORT_TX]
                        .1
                        .add(netbatch_engine::reason::FRAME_TOO_LONG, bad);
                }
            }
            if !q.is_empty() {
                let left: u64 = q.iter().map(|p| self.pool.get(p).meta.wire_packets()).sum();
                self.acct.dropped += left;
                self.outside[PORT_TX]
                    .1
                    .add(netbatch_engine::reason::TX_RING_FULL, left);
                self.cache.free_all(q);
            }
        }
        // Every port, sent to this round or not: what the link or the kernel kept from
        // the wire (no system call: the ports read their shared link state).
        for port in &mut self.ports {
            let d = port.tx_drops(&mut PortCx {
                pool: &self.pool,
                cache: &mut self.cache,
                now_ns,
            });
            if !d.any() {
                continue;
            }
            // Taken back or dropped by the kernel: counted as transmitted when handed
            // over, now dropped instead.
            let undone = d.flushed + d.kernel;
            self.acct.tx -= undone.min(self.acct.tx);
            self.acct.dropped += d.link_down + undone;
            let c = &mut self.outside[PORT_TX].1;
            c.add(netbatch_engine::reason::LINK_DOWN, d.link_down + d.flushed);
            c.add(netbatch_engine::reason::KERNEL_TX_DROPPED, d.kernel);
        }
    }

    /// Per-stage counters, with drops outside the graph as pseudo-stages `port-rx`
    /// (frames the ports dropped at receive) first, `port-tx` (transmit, stop) and `rps`
    /// (full backlogs) last, each only when it dropped something.
    pub fn snapshot(&self) -> Vec<NodeSnapshot> {
        let pseudo = |(name, c): &(&'static str, DropCounters)| {
            let drops = c.nonzero();
            (!drops.is_empty()).then(|| NodeSnapshot {
                name,
                packets: 0,
                calls: 0,
                cycles: 0,
                drops,
                events: Vec::new(),
            })
        };
        let mut s: Vec<NodeSnapshot> = pseudo(&self.outside[PORT_RX]).into_iter().collect();
        let mut nodes = self.graph.snapshot();
        for r in &self.retired {
            match nodes.iter_mut().find(|n| n.name == r.name) {
                Some(n) => n.merge(r),
                None => nodes.push(r.clone()),
            }
        }
        s.extend(nodes);
        s.extend(self.outside[PORT_TX..].iter().filter_map(pseudo));
        s
    }

    /// Replaces the graph between rounds (a changed rule chain needs its hook stage, or a
    /// different one): the old graph's counters are kept and merged by node name into
    /// later snapshots (they never go back; a hook's rule hits stay counted by position),
    /// what its trace recorded is kept for [`Self::take_trace`] (its records name the old
    /// graph's nodes), and the trace's arming and the timing setting carry over. Nothing
    /// is inside the graph between rounds, and a stage that holds packets across calls
    /// (GRO) has handed them on at the end of the last poll; whatever it still holds is
    /// handed on first.
    pub fn replace_graph(&mut self, mut g: Graph<Host>) -> Result<(), GraphError> {
        let entries = netbatch_stack::entries(&g)?;
        let now = netbatch_engine::time::mono_ns();
        let one_by_one = self.params.mode == Mode::Packet;
        let mut cx = stage_cx!(self, now);
        self.graph.flush_held(&mut self.host, &mut cx, one_by_one);
        let dump = self.graph.take_trace();
        if !dump.packets.is_empty() {
            self.traces.push(dump);
        }
        g.set_timing(self.graph.timing());
        core::mem::swap(g.trace_mut(), self.graph.trace_mut());
        let old = core::mem::replace(&mut self.graph, g);
        for n in old.snapshot() {
            match self.retired.iter_mut().find(|r| r.name == n.name) {
                Some(r) => r.merge(&n),
                None => self.retired.push(n),
            }
        }
        self.entries = entries;
        Ok(())
    }

    /// What the trace recorded since the last call, the graphs this worker ran before its
    /// current one included (each dump names its own graph's nodes).
    pub fn take_trace(&mut self) -> Vec<netbatch_engine::TraceDump> {
        let mut v = core::mem::take(&mut self.traces);
        let now = self.graph.take_trace();
        if !now.packets.is_empty() {
            v.push(now);
        }
        v
    }

    /// Sets a static neighbour (`neigh add|replace`): packets that waited for it are
    /// released towards it (they enter at the neighbour stage with the next injected
    /// packets). `false` if the table had no room.
    pub fn set_neighbour(
        &mut self,
        iface: u16,
        ip: core::net::Ipv4Addr,
        mac: netbatch_wire::ethernet::MacAddr,
    ) -> bool {
        let mut waiting = Vec::new();
        let ok = self.host.neigh.set_static(iface, ip, mac, &mut waiting);
        for p in waiting {
            self.host.injected.push(Entry::Neighbour, p);
        }
        ok
    }

    /// Removes a neighbour entry (`neigh del`): packets that waited for it are dropped
    /// (`neigh_deleted`). `false` if there was none.
    pub fn remove_neighbour(&mut self, iface: u16, ip: core::net::Ipv4Addr) -> bool {
        // What other workers learned before the deletion is taken in first, so that it
        // does not bring the entry back afterwards.
        self.host.sync_neighbours(netbatch_engine::time::mono_ns());
        let mut dropped = Vec::new();
        let found = self.host.neigh.remove(iface, ip, &mut dropped);
        self.drop_deleted(dropped);
        found
    }

    /// Sets a static IPv6 neighbour (`neigh add|replace` of an IPv6 address): as
    /// [`Self::set_neighbour`], the packets that waited for it released towards
    /// `ip6-neighbour`.
    pub fn set_neighbour6(
        &mut self,
        iface: u16,
        ip: core::net::Ipv6Addr,
        mac: netbatch_wire::ethernet::MacAddr,
    ) -> bool {
        let mut waiting = Vec::new();
        let ok = self.host.neigh6.set_static(iface, ip, mac, &mut waiting);
        for p in waiting {
            self.host.injected.push(Entry::Neighbour6, p);
        }
        ok
    }

    /// Removes an IPv6 neighbour entry: as [`Self::remove_neighbour`].
    pub fn remove_neighbour6(&mut self, iface: u16, ip: core::net::Ipv6Addr) -> bool {
        self.host.sync_neighbours(netbatch_engine::time::mono_ns());
        let mut dropped = Vec::new();
        let found = self.host.neigh6.remove(iface, ip, &mut dropped);
        self.drop_deleted(dropped);
        found
    }

    /// Drops what waited for a deleted neighbour entry (`neigh_deleted`, counted on the
    /// control pseudo-stage).
    fn drop_deleted(&mut self, mut dropped: Vec<netbatch_engine::Pkt>) {
        let wire: u64 = dropped
            .iter()
            .map(|p| self.pool.get(p).meta.wire_packets())
            .sum();
        if wire > 0 {
            self.acct.dropped += wire;
            self.outside[CONTROL].1.add(reason::NEIGH_DELETED, wire);
        }
        self.cache.free_all(&mut dropped);
    }

    /// Closes every UDP socket (shared by the workers: call it on one), counting what
    /// their queues held as dropped (`socket_closed`); the applications that read them
    /// must be gone first ([`Self::apps`] cleared).
    pub fn close_sockets(&mut self) {
        let mut wire = 0;
        for (id, _) in self.host.sockets.iter() {
            wire += self.host.sockets.close(id, &mut self.cache);
        }
        if wire > 0 {
            self.acct.dropped += wire;
            self.outside[CONTROL].1.add(reason::SOCKET_CLOSED, wire);
        }
    }

    /// Port counters, in port order.
    pub fn port_stats(&self) -> Vec<(String, PortStats)> {
        self.ports
            .iter()
            .map(|p| (p.name().to_string(), p.stats()))
            .collect()
    }

    /// Wire packets held right now by this worker alone (neighbour queues, unflushed
    /// queues, GRO, own backlog), not counting the sockets it shares with other workers.
    pub fn held_own(&self) -> u64 {
        self.host.held_own(&self.pool)
            + self.graph.held()
            + self.steer.as_ref().map_or(0, Steer::held)
    }

    /// Wire packets held right now (sockets, neighbour queues, unflushed queues, GRO):
    /// the `held` of the conservation law for a worker on its own.
    pub fn held(&self) -> u64 {
        self.held_own() + self.host.sockets.held()
    }

    /// Frees everything held (counted as dropped, `shutdown`) and returns cached buffers
    /// to the pool (on stop). Shared sockets are freed too: with several workers, call
    /// this after every worker has stopped.
    pub fn shutdown(&mut self) {
        let held = self.held();
        self.acct.dropped += held;
        self.outside[PORT_TX].1.add(reason::SHUTDOWN, held);
        self.host.drain_all(&mut self.cache);
        self.stop_steer();
        self.cache.free_all(&mut self.list);
        self.cache.flush();
    }

    /// Frees what waits in this worker's own queues and in the rings to it (at stop),
    /// counting the rings' packets as taken over and dropped (`shutdown`).
    fn stop_steer(&mut self) {
        let Some(st) = self.steer.as_mut() else {
            return;
        };
        let before = st.stats.taken_over;
        let own = st.held();
        // Own queues were counted in `held` by `shutdown`'s caller path already.
        let _ = own;
        let mut l = Vec::new();
        let n = st.fabric().workers();
        for src in 0..n {
            while st.take(&self.pool, src, &mut l, LIST_MAX) > 0 {
                self.cache.free_all(&mut l);
            }
            while st.take_handed(&self.pool, src, &mut l, LIST_MAX) > 0 {
                self.cache.free_all(&mut l);
            }
        }
        let ringed = st.stats.taken_over - before;
        self.acct.taken_over = st.stats.taken_over;
        self.acct.dropped += ringed;
        self.outside[PORT_TX].1.add(reason::SHUTDOWN, ringed);
        st.drain(&mut self.cache);
    }
}
