//! A worker: its ports' receive queues, its graph, its host state, its buffer cache, its
//! applications, and the poll loop that ties them together.
//!
//! One round of [`Worker::poll`]:
//! 1. each receive queue is polled for up to `weight` frames (64, the NAPI weight), the
//!    round stopping once `budget` frames (300) have been taken or `time_cap_ns` (2 ms)
//!    has passed (`time_squeeze`); in list mode each queue's frames go through the graph
//!    as one list, in per-packet mode each frame goes through the whole graph before the
//!    next is pulled from the port; then GRO hands on what it holds (the end of the
//!    queue's poll is the end of the GRO window, as in NAPI). With RPS (several workers),
//!    the frames are first spread over the workers (`rps`): other workers' shares go to
//!    their rings, the own share is handled by the policy;
//! 2. with RPS: the workers sent to are kicked (once each), the deferred own share runs as
//!    one list, and the backlog (rings from other workers, own backlog) is processed a
//!    list at a time, each list through the whole graph;
//! 3. applications run (they read sockets, queue sends);
//! 4. timers run (neighbour retries and failures), at most every millisecond;
//! 5. packets injected by 3 and 4 run through the graph;
//! 6. transmit queues are flushed to the ports; frames a port refuses are dropped and
//!    counted (`TxRingFull`).

use netbatch_engine::{
    Accounting, BufCache, Cx, DropReason, Graph, LIST_MAX, Mode, NodeId, NodeSnapshot, PktList,
    Pool,
};
use netbatch_ports::{Port, PortCx, PortStats};
use netbatch_stack::host::Injected;
use netbatch_stack::{Host, node};

use crate::apps::App;
use crate::rps::Steer;

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
    /// Frames processed (received, taken from a backlog, or injected).
    pub processed: u64,
}

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
    /// Drops outside the graph (transmit, backlog), by reason index.
    pub tx_drops: [u64; DropReason::COUNT],
    /// RPS: this worker's side (none with a single worker and no RPS).
    pub steer: Option<Steer>,
    pool: Pool,
    cache: BufCache,
    params: PollParams,
    entry: NodeId,
    gro_node: Option<NodeId>,
    tx_node: NodeId,
    icmp_error_node: NodeId,
    local_out_node: NodeId,
    neighbour_node: NodeId,
    list: PktList,
    drops: PktList,
    next_timer_ns: u64,
    clock: quanta::Clock,
}

impl core::fmt::Debug for Worker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("graph", &self.graph)
            .field("acct", &self.acct)
            .finish()
    }
}

/// A required node is missing from the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingNode(pub &'static str);

impl core::fmt::Display for MissingNode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the graph has no '{}' node", self.0)
    }
}

impl std::error::Error for MissingNode {}

/// Picks one of the queues of [`Injected`].
type InjectedQueue = fn(&mut Injected) -> &mut PktList;

impl Worker {
    /// A worker over a graph, host state and ports, drawing buffers from `pool`.
    pub fn new(
        graph: Graph<Host>,
        host: Host,
        ports: Vec<Box<dyn Port>>,
        pool: Pool,
        params: PollParams,
    ) -> Result<Self, MissingNode> {
        let find = |n: &'static str| graph.node(n).ok_or(MissingNode(n));
        let gro_node = graph.node(node::GRO);
        let entry = match gro_node {
            Some(g) => g,
            None => find(node::ETH_INPUT)?,
        };
        let tx_node = find(node::TX)?;
        let icmp_error_node = find(node::IP4_ICMP_ERROR)?;
        let local_out_node = find(node::IP4_LOCAL_OUT)?;
        let neighbour_node = find(node::NEIGHBOUR)?;
        let rx_ports = (0..ports.len() as u16).collect();
        Ok(Self {
            graph,
            host,
            ports,
            rx_ports,
            apps: Vec::new(),
            acct: Accounting::default(),
            stats: WorkerStats::default(),
            tx_drops: [0; DropReason::COUNT],
            steer: None,
            cache: pool.cache(),
            pool,
            params,
            entry,
            gro_node,
            tx_node,
            icmp_error_node,
            local_out_node,
            neighbour_node,
            list: Vec::with_capacity(LIST_MAX),
            drops: Vec::new(),
            next_timer_ns: 0,
            clock: netbatch_engine::time::clock(),
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
    pub fn poll(&mut self, now_ns: u64) -> usize {
        self.stats.rounds += 1;
        let mut taken = 0;
        let budget = self.params.budget;
        let weight = self.params.weight.min(LIST_MAX);
        // The time cap needs a clock only with more than one queue (`now_ns` may be a
        // replay's clock, not the real one).
        let start = (self.rx_ports.len() > 1).then(|| self.clock.raw());
        for qi in 0..self.rx_ports.len() {
            if taken >= budget
                || start.is_some_and(|s| {
                    qi > 0
                        && self.clock.delta_as_nanos(s, self.clock.raw()) >= self.params.time_cap_ns
                })
            {
                self.stats.time_squeeze += 1;
                break;
            }
            let port = usize::from(self.rx_ports[qi]);
            let quota = weight.min(budget - taken);
            taken += self.rx_queue(port, quota, now_ns);
        }
        self.stats.processed += taken as u64;
        taken + self.finish_round(now_ns)
    }

    /// A round without receiving (while stopping): the backlog, applications, timers,
    /// injected packets and transmit. Returns the backlog packets processed.
    pub fn poll_drain(&mut self, now_ns: u64) -> usize {
        self.stats.rounds += 1;
        self.finish_round(now_ns)
    }

    /// The part of a round after the receive queues.
    fn finish_round(&mut self, now_ns: u64) -> usize {
        self.host.sync_neighbours(now_ns);
        let mut work = 0;
        if self.steer.is_some() {
            work += self.backlog(now_ns);
        }
        self.run_apps(now_ns);
        if now_ns >= self.next_timer_ns {
            self.next_timer_ns = now_ns + 1_000_000;
            netbatch_stack::timers::run(&mut self.host, &self.pool, &mut self.cache, now_ns);
        }
        self.run_injected(now_ns);
        self.flush_tx(now_ns);
        work
    }

    /// Receives up to `quota` frames from `port` and runs them (or, with RPS, spreads
    /// them and runs the own share the policy says to run now).
    fn rx_queue(&mut self, port: usize, quota: usize, now_ns: u64) -> usize {
        let mode = self.params.mode;
        let mut n = 0;
        // Per-packet mode pulls one frame at a time and takes it all the way.
        let step = if mode == Mode::Packet { 1 } else { quota };
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
                    self.graph.trace_mut().maybe_mark(&self.pool, pk);
                }
            }
            if self.steer.is_none() && mode == Mode::Packet {
                // The per-packet twin, as lean as it was before RPS existed.
                if let Some(pk) = self.list.pop() {
                    let mut cx = Cx {
                        pool: &self.pool,
                        cache: &mut self.cache,
                        now_ns,
                        acct: &mut self.acct,
                    };
                    self.graph.run_one(&mut self.host, &mut cx, self.entry, pk);
                }
                continue;
            }
            // With RPS, what stays in the list is the own share to run now (`direct`).
            let steered = match self.steer.as_mut() {
                Some(st) => {
                    st.distribute(&self.pool, port, &mut self.list, &mut self.drops);
                    self.acct.handed_off = st.stats.handed_off;
                    true
                }
                None => false,
            };
            self.backlog_drops();
            let own = self.list.len();
            if own > 0 {
                let mut l = core::mem::take(&mut self.list);
                self.run(&mut l, now_ns);
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
        n
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
        self.tx_drops[DropReason::BacklogFull.index()] += n;
        self.cache.free_all(&mut self.drops);
    }

    /// Runs `list` through the graph from its entry (as a list, or packet by packet).
    #[inline]
    fn run(&mut self, list: &mut PktList, now_ns: u64) {
        self.run_at(self.entry, list, now_ns);
    }

    /// Runs `list` through the graph from `node` (as a list, or packet by packet).
    #[inline]
    fn run_at(&mut self, node: NodeId, list: &mut PktList, now_ns: u64) {
        if list.is_empty() {
            return;
        }
        let mut cx = Cx {
            pool: &self.pool,
            cache: &mut self.cache,
            now_ns,
            acct: &mut self.acct,
        };
        let one_by_one = self.params.mode == Mode::Packet;
        if one_by_one {
            for p in list.drain(..) {
                self.graph.run_one(&mut self.host, &mut cx, node, p);
            }
        } else {
            self.graph.run(&mut self.host, &mut cx, node, list);
        }
    }

    /// The end of a poll (of a receive queue, or of a backlog): GRO hands on what it
    /// holds.
    fn end_of_poll(&mut self, now_ns: u64) {
        let Some(g) = self.gro_node else {
            return;
        };
        if self.graph.held() == 0 {
            return;
        }
        let mut cx = Cx {
            pool: &self.pool,
            cache: &mut self.cache,
            now_ns,
            acct: &mut self.acct,
        };
        let one_by_one = self.params.mode == Mode::Packet;
        self.graph.flush(&mut self.host, &mut cx, g, one_by_one);
    }

    /// With RPS: kicks the workers sent to, runs the deferred own share, then processes
    /// the backlog a list at a time. Returns the packets processed.
    fn backlog(&mut self, now_ns: u64) -> usize {
        let weight = self.params.weight.min(LIST_MAX);
        let Some(st) = self.steer.as_mut() else {
            return 0;
        };
        st.kick();
        st.take_kick();
        let mut work = 0;
        // The deferred own share: one list (or a few), now that the others have theirs.
        if !st.deferred.is_empty() {
            let mut all = core::mem::take(&mut st.deferred);
            let n = all.len();
            let mut chunk = core::mem::take(&mut self.list);
            while !all.is_empty() {
                let k = all.len().min(LIST_MAX);
                chunk.extend(all.drain(..k));
                self.run(&mut chunk, now_ns);
            }
            self.end_of_poll(now_ns);
            self.list = chunk;
            work += n;
            if let Some(st) = self.steer.as_mut() {
                st.done_own(n);
                st.deferred = all;
            }
        }
        // The backlog: each source's ring (and the own backlog), a list at a time.
        let n_workers = self.steer.as_ref().map_or(0, |s| s.fabric().workers());
        for src in 0..n_workers {
            let mut l = core::mem::take(&mut self.list);
            let got = self
                .steer
                .as_mut()
                .map_or(0, |st| st.take(src, &mut l, weight));
            if got > 0 {
                self.stats.processed += got as u64;
                self.run(&mut l, now_ns);
                self.end_of_poll(now_ns);
                if let Some(st) = self.steer.as_mut() {
                    st.done(src, got);
                    st.stats.backlog_polls += 1;
                    self.acct.taken_over = st.stats.taken_over;
                }
                work += got;
            }
            self.list = l;
        }
        if let Some(st) = self.steer.as_mut() {
            st.stats.backlog_len = st.backlog_len();
        }
        work
    }

    fn run_apps(&mut self, now_ns: u64) {
        if self.apps.is_empty() {
            return;
        }
        let mut cx = Cx {
            pool: &self.pool,
            cache: &mut self.cache,
            now_ns,
            acct: &mut self.acct,
        };
        for a in &mut self.apps {
            a.poll(&mut self.host, &mut cx);
        }
    }

    /// Runs packets queued in `Host::injected` through the graph.
    pub fn run_injected(&mut self, now_ns: u64) {
        if self.host.injected.is_empty() {
            return;
        }
        self.acct.originated += core::mem::take(&mut self.host.injected.originated);
        // Each queue with the node it enters the graph at, in this order.
        let queues: [(NodeId, InjectedQueue); 4] = [
            (self.icmp_error_node, |i| &mut i.to_icmp_error),
            (self.local_out_node, |i| &mut i.to_local_out),
            (self.neighbour_node, |i| &mut i.to_neighbour),
            (self.tx_node, |i| &mut i.to_tx),
        ];
        for (node, queue) in queues {
            let slot = queue(&mut self.host.injected);
            if slot.is_empty() {
                continue;
            }
            let mut l = core::mem::take(slot);
            self.stats.processed += l.len() as u64;
            self.run_at(node, &mut l, now_ns);
            // Give the emptied vector back: its capacity is reused next time.
            let slot = queue(&mut self.host.injected);
            if slot.is_empty() {
                *slot = l;
            }
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
            }
            if !q.is_empty() {
                let left: u64 = q.iter().map(|p| self.pool.get(p).meta.wire_packets()).sum();
                self.acct.dropped += left;
                self.tx_drops[DropReason::TxRingFull.index()] += left;
                self.cache.free_all(q);
            }
        }
    }

    /// Per-stage counters, with drops outside the graph as a pseudo-stage `port-tx`
    /// (transmit) and `rps` (full backlogs).
    pub fn snapshot(&self) -> Vec<NodeSnapshot> {
        let mut s = self.graph.snapshot();
        for (name, reasons) in [
            (
                "port-tx",
                &[DropReason::TxRingFull, DropReason::Shutdown][..],
            ),
            ("rps", &[DropReason::BacklogFull][..]),
        ] {
            let drops: Vec<(DropReason, u64)> = reasons
                .iter()
                .filter(|r| self.tx_drops[r.index()] > 0)
                .map(|&r| (r, self.tx_drops[r.index()]))
                .collect();
            if !drops.is_empty() {
                s.push(NodeSnapshot {
                    name,
                    packets: 0,
                    calls: 0,
                    cycles: 0,
                    drops,
                    events: Vec::new(),
                });
            }
        }
        s
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
        self.held_own() + self.host.sockets.held(&self.pool)
    }

    /// Frees everything held (counted as dropped, `Shutdown`) and returns cached buffers
    /// to the pool (on stop). Shared sockets are freed too: with several workers, call
    /// this after every worker has stopped.
    pub fn shutdown(&mut self) {
        let held = self.held();
        self.acct.dropped += held;
        self.tx_drops[DropReason::Shutdown.index()] += held;
        self.host.drain_all(&mut self.cache);
        self.stop_steer();
        self.cache.free_all(&mut self.list);
        self.cache.flush();
    }

    /// Frees what waits in this worker's own queues and in the rings to it (at stop),
    /// counting the rings' packets as taken over and dropped (`Shutdown`).
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
            while st.take(src, &mut l, LIST_MAX) > 0 {
                self.cache.free_all(&mut l);
            }
        }
        let ringed = st.stats.taken_over - before;
        self.acct.taken_over = st.stats.taken_over;
        self.acct.dropped += ringed;
        self.tx_drops[DropReason::Shutdown.index()] += ringed;
        st.drain(&mut self.cache);
    }
}
