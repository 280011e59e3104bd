//! A worker: its ports' receive queues, its graph, its host state, its buffer cache, its
//! applications, and the poll loop that ties them together.
//!
//! One round of [`Worker::poll`]:
//! 1. each receive queue is polled for up to `weight` frames (64, the NAPI weight), the
//!    round stopping once `budget` frames (300) have been taken; in list mode each queue's
//!    frames go through the graph as one list, in per-packet mode each frame goes through
//!    the whole graph before the next is pulled from the port; then GRO hands on what it
//!    holds (the end of the queue's poll is the end of the GRO window, as in NAPI);
//! 2. applications run (they read sockets, queue sends);
//! 3. timers run (neighbour retries and failures), at most every millisecond;
//! 4. packets injected by 2 and 3 run through the graph;
//! 5. transmit queues are flushed to the ports; frames a port refuses are dropped and
//!    counted (`TxRingFull`).

use netbatch_engine::{
    Accounting, BufCache, Cx, DropReason, Graph, LIST_MAX, Mode, NodeId, NodeSnapshot, PktList,
    Pool,
};
use netbatch_ports::{Port, PortCx, PortStats};
use netbatch_stack::{Host, node};

use crate::apps::App;

/// Poll-loop parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollParams {
    /// Frames per queue per round (NAPI weight).
    pub weight: usize,
    /// Frames per round over all queues (`netdev_budget`).
    pub budget: usize,
    /// List or per-packet processing.
    pub mode: Mode,
}

impl Default for PollParams {
    fn default() -> Self {
        Self {
            weight: 64,
            budget: 300,
            mode: Mode::List,
        }
    }
}

/// Worker counters beyond the graph's (softnet-style).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Rounds run.
    pub rounds: u64,
    /// Rounds that stopped on the budget with frames possibly left (`time_squeeze`).
    pub time_squeeze: u64,
    /// Frames processed (received or injected).
    pub processed: u64,
}

/// One worker.
pub struct Worker {
    /// The stage graph.
    pub graph: Graph<Host>,
    /// The stack state.
    pub host: Host,
    /// Ports (indexed like `Host::ports`).
    pub ports: Vec<Box<dyn Port>>,
    /// Ports this worker receives from.
    pub rx_ports: Vec<u16>,
    /// Applications.
    pub apps: Vec<Box<dyn App>>,
    /// Fate counters.
    pub acct: Accounting,
    /// Softnet-style counters.
    pub stats: WorkerStats,
    /// Drops outside the graph (transmit), by reason index.
    pub tx_drops: [u64; DropReason::COUNT],
    pool: Pool,
    cache: BufCache,
    params: PollParams,
    entry: NodeId,
    gro_node: Option<NodeId>,
    tx_node: NodeId,
    icmp_error_node: NodeId,
    local_out_node: NodeId,
    list: PktList,
    next_timer_ns: u64,
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
            cache: pool.cache(),
            pool,
            params,
            entry,
            gro_node,
            tx_node,
            icmp_error_node,
            local_out_node,
            list: Vec::with_capacity(LIST_MAX),
            next_timer_ns: 0,
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

    /// Runs one round at time `now_ns`; returns frames received.
    pub fn poll(&mut self, now_ns: u64) -> usize {
        self.stats.rounds += 1;
        let mut taken = 0;
        let budget = self.params.budget;
        let weight = self.params.weight.min(LIST_MAX);
        for qi in 0..self.rx_ports.len() {
            if taken >= budget {
                self.stats.time_squeeze += 1;
                break;
            }
            let port = usize::from(self.rx_ports[qi]);
            let quota = weight.min(budget - taken);
            taken += match self.params.mode {
                Mode::List => self.rx_list(port, quota, now_ns),
                Mode::Packet => self.rx_one_by_one(port, quota, now_ns),
            };
        }
        self.stats.processed += taken as u64;
        self.run_apps(now_ns);
        if now_ns >= self.next_timer_ns {
            self.next_timer_ns = now_ns + 1_000_000;
            netbatch_stack::timers::run(&mut self.host, &self.pool, &mut self.cache, now_ns);
        }
        self.run_injected(now_ns);
        self.flush_tx(now_ns);
        taken
    }

    fn rx_list(&mut self, port: usize, quota: usize, now_ns: u64) -> usize {
        let Some(p) = self.ports.get_mut(port) else {
            return 0;
        };
        let n = p.rx(
            &mut PortCx {
                pool: &self.pool,
                cache: &mut self.cache,
                now_ns,
            },
            &mut self.list,
            quota,
        );
        if n == 0 {
            return 0;
        }
        self.acct.rx += n as u64;
        if self.graph.trace().armed() {
            for pk in &mut self.list {
                self.graph.trace_mut().maybe_mark(&self.pool, pk);
            }
        }
        let mut cx = Cx {
            pool: &self.pool,
            cache: &mut self.cache,
            now_ns,
            acct: &mut self.acct,
        };
        self.graph
            .run(&mut self.host, &mut cx, self.entry, &mut self.list);
        if let Some(g) = self.gro_node {
            self.graph.flush(&mut self.host, &mut cx, g, false);
        }
        n
    }

    fn rx_one_by_one(&mut self, port: usize, quota: usize, now_ns: u64) -> usize {
        let mut n = 0;
        while n < quota {
            let Some(p) = self.ports.get_mut(port) else {
                break;
            };
            if p.rx(
                &mut PortCx {
                    pool: &self.pool,
                    cache: &mut self.cache,
                    now_ns,
                },
                &mut self.list,
                1,
            ) == 0
            {
                break;
            }
            n += 1;
            self.acct.rx += 1;
            let Some(mut pk) = self.list.pop() else { break };
            if self.graph.trace().armed() {
                self.graph.trace_mut().maybe_mark(&self.pool, &mut pk);
            }
            let mut cx = Cx {
                pool: &self.pool,
                cache: &mut self.cache,
                now_ns,
                acct: &mut self.acct,
            };
            self.graph.run_one(&mut self.host, &mut cx, self.entry, pk);
        }
        if let Some(g) = self.gro_node
            && n > 0
        {
            let mut cx = Cx {
                pool: &self.pool,
                cache: &mut self.cache,
                now_ns,
                acct: &mut self.acct,
            };
            self.graph.flush(&mut self.host, &mut cx, g, true);
        }
        n
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
        for (node, which) in [
            (self.icmp_error_node, 0),
            (self.local_out_node, 1),
            (self.tx_node, 2),
        ] {
            let mut l = core::mem::take(match which {
                0 => &mut self.host.injected.to_icmp_error,
                1 => &mut self.host.injected.to_local_out,
                _ => &mut self.host.injected.to_tx,
            });
            if l.is_empty() {
                continue;
            }
            self.stats.processed += l.len() as u64;
            let mut cx = Cx {
                pool: &self.pool,
                cache: &mut self.cache,
                now_ns,
                acct: &mut self.acct,
            };
            match self.params.mode {
                Mode::List => self.graph.run(&mut self.host, &mut cx, node, &mut l),
                Mode::Packet => {
                    for p in l.drain(..) {
                        self.graph.run_one(&mut self.host, &mut cx, node, p);
                    }
                }
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

    /// Per-stage counters, with transmit drops as a pseudo-stage `port-tx`.
    pub fn snapshot(&self) -> Vec<NodeSnapshot> {
        let mut s = self.graph.snapshot();
        let drops: Vec<(DropReason, u64)> = DropReason::ALL
            .iter()
            .filter(|r| self.tx_drops[r.index()] > 0)
            .map(|&r| (r, self.tx_drops[r.index()]))
            .collect();
        if !drops.is_empty() {
            s.push(NodeSnapshot {
                name: "port-tx",
                packets: 0,
                calls: 0,
                cycles: 0,
                drops,
                events: Vec::new(),
            });
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

    /// Wire packets held right now (sockets, neighbour queues, unflushed queues, GRO).
    pub fn held(&self) -> u64 {
        self.host.held(&self.pool) + self.graph.held()
    }

    /// Frees everything held (counted as dropped, `Shutdown`) and returns cached buffers
    /// to the pool (on stop).
    pub fn shutdown(&mut self) {
        let held = self.held();
        self.acct.dropped += held;
        self.tx_drops[DropReason::Shutdown.index()] += held;
        self.host.drain_all(&mut self.cache);
        self.cache.free_all(&mut self.list);
        self.cache.flush();
    }
}
