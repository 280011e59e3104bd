//! Support for the scenario tests: a "lab" of one worker whose ports are in-memory, frames
//! built with etherparse (an implementation independent of ours), and the checks every
//! scenario makes (conservation of packets, a full pool after stop).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use netbatch_datapath::Worker;
use netbatch_engine::{Dispatch, Mode, Pool, Reason};
use netbatch_ports::Port;
use netbatch_ports::mem::{MemPort, TxFrame};
use netbatch_runtime::build;
use netbatch_runtime::config::{Config, PortConfig};
use netbatch_runtime::setup::{PortSetup, StaticNeighbour, StaticNeighbour6};
use netbatch_stack::GraphOptions;
use netbatch_stack::host::HostParams;
use netbatch_stack::route::{Route, Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;

pub mod fragments;
pub mod frames;
pub mod replay;

/// Our MAC on eth0.
pub const US: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
/// Our MAC on eth1.
pub const US2: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);
/// The peer on eth0's subnet.
pub const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// A port's GRO mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gro {
    /// No GRO.
    Off,
    /// Standard GRO, UDP forwarding included.
    Standard,
    /// Fraglist GRO.
    Fraglist,
}

impl Gro {
    /// Sets the port's GRO features for this mode (none for `Off`).
    pub fn apply(self, p: &mut PortSetup) {
        match self {
            Self::Off => {}
            Self::Standard => {
                p.features.rx_gro = true;
                p.features.rx_udp_gro_forwarding = true;
            }
            Self::Fraglist => {
                p.features.rx_gro = true;
                p.features.rx_gro_list = true;
            }
        }
    }
}

/// The two-port router: eth0 (`US`, 198.51.100.1/24, GRO mode `gro`), eth1 (`US2`,
/// 192.0.2.1/24, no offload), 203.0.113.0/24 via 192.0.2.254 on eth1 (its MAC
/// configured), and the GRO stage in the graph unless `gro` is `Off`.
pub fn router(gro: Gro) -> LabSpec {
    let mut p0 = port("eth0", US, "198.51.100.1/24");
    gro.apply(&mut p0);
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: vec![p0, port("eth1", US2, "192.0.2.1/24")],
        routes: vec![Route {
            prefix: "203.0.113.0/24".parse().expect("prefix"),
            kind: RouteKind::Unicast,
            out_if: Some(1),
            gateway: Some(ip("192.0.2.254")),
            multipath: None,
        }],
        neighbours: vec![StaticNeighbour {
            iface: 1,
            ip: ip("192.0.2.254"),
            mac: MacAddr([2, 0, 0, 0, 2, 2]),
        }],
        params: HostParams::default(),
        graph: GraphOptions {
            gro: gro != Gro::Off,
            ..GraphOptions::default()
        },
    }
}

/// The peer's IPv6 address on eth0.
pub const PEER6: &str = "2001:db8:100::2";
/// Our IPv6 address on eth0.
pub const US6: &str = "2001:db8:100::1";
/// Our IPv6 address on eth1.
pub const US26: &str = "2001:db8:200::1";
/// The next hop of 2001:db8:300::/48 on eth1.
pub const GW6: &str = "2001:db8:200::fe";
/// The MAC of the next hops on eth1 (IPv4 and IPv6).
pub const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);

/// [`router`] dual-stack: eth0 also has 2001:db8:100::1/64 and eth1 2001:db8:200::1/64;
/// 2001:db8:300::/48 via 2001:db8:200::fe on eth1; the MACs of that next hop and of the
/// peer on eth0 ([`PEER6`] and its link-local address) configured.
pub fn router6(gro: Gro) -> LabSpec {
    let mut spec = router(gro);
    spec.ports[0].addrs6 = vec![format!("{US6}/64").parse().expect("address")];
    spec.ports[1].addrs6 = vec![format!("{US26}/64").parse().expect("address")];
    spec.routes6 = vec![Route6::new(
        "2001:db8:300::/48".parse().expect("prefix"),
        RouteKind::Unicast,
        Some(1),
        Some(ip6(GW6)),
    )];
    spec.neighbours6 = vec![
        StaticNeighbour6 {
            iface: 1,
            ip: ip6(GW6),
            mac: GW_MAC,
        },
        // The peer on eth0, by its global and its link-local address, so that answers
        // to it need no resolution (the tests of resolution add their own next hops).
        StaticNeighbour6 {
            iface: 0,
            ip: ip6(PEER6),
            mac: PEER,
        },
        StaticNeighbour6 {
            iface: 0,
            ip: netbatch_wire::ipv6::link_local_from_mac(PEER),
            mac: PEER,
        },
    ];
    spec
}

/// Parses an IPv6 address literal.
pub fn ip6(s: &str) -> std::net::Ipv6Addr {
    s.parse().expect("IPv6 address")
}

/// Every combination of batch mode and dispatch strategy.
pub const VARIANTS: [(Mode, Dispatch); 4] = [
    (Mode::Packet, Dispatch::Runs),
    (Mode::Packet, Dispatch::Buckets),
    (Mode::List, Dispatch::Runs),
    (Mode::List, Dispatch::Buckets),
];

/// What a lab is made of: the parts of a configuration the tests vary.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// Ports (each backed by a `mem` port).
    pub ports: Vec<PortSetup>,
    /// Routes beyond the connected ones.
    pub routes: Vec<Route>,
    /// IPv6 routes beyond the connected ones.
    pub routes6: Vec<Route6>,
    /// Static neighbours.
    pub neighbours: Vec<StaticNeighbour>,
    /// Static IPv6 neighbours.
    pub neighbours6: Vec<StaticNeighbour6>,
    /// Host settings.
    pub params: HostParams,
    /// Hooks and hand-offs (the GRO stage follows the ports' features).
    pub graph: GraphOptions,
}

impl LabSpec {
    /// The configuration: these ports (`mem` ports, each received by worker 0), routes,
    /// neighbours, host settings and hooks, in `mode` and `dispatch`, with a pool of
    /// `buffers` (a cache of 64 per worker); everything else at its default.
    pub fn config(&self, mode: Mode, dispatch: Dispatch, buffers: u32) -> Config {
        let mut cfg = Config::new(self.ports.iter().cloned().map(PortConfig::new).collect());
        cfg.mode = mode;
        cfg.dispatch = dispatch;
        cfg.pool.buffers = buffers;
        cfg.pool.cache_size = 64;
        cfg.host = self.params;
        cfg.routes = self.routes.clone();
        cfg.routes6 = self.routes6.clone();
        cfg.neighbours = self.neighbours.clone();
        cfg.neighbours6 = self.neighbours6.clone();
        cfg.graph = self.graph.clone();
        cfg
    }
}

/// A `mem` queue of port `index` of `cfg` (with the port's offloads), for `pool`.
fn mem_port(cfg: &Config, index: usize, pool: &Pool) -> Box<dyn Port> {
    let s = &cfg.ports[index].setup;
    Box::new(MemPort::new(&s.name, index as u16, pool.config().room()).with_features(s.features))
}

/// One worker over in-memory ports.
pub struct Lab {
    /// The worker under test.
    pub w: Worker,
    pool: Pool,
    now_ns: u64,
}

impl Lab {
    /// Builds the lab in the given mode and dispatch.
    pub fn new(spec: &LabSpec, mode: Mode, dispatch: Dispatch) -> Self {
        Self::with_config(&spec.config(mode, dispatch, 4096))
    }

    /// Builds the lab of a whole configuration (its ports in-memory ones, as the file's
    /// order numbers them).
    pub fn with_config(cfg: &Config) -> Self {
        let cfg = cfg.clone();
        let pool = Pool::new(cfg.pool).expect("pool");
        let ports = (0..cfg.ports.len())
            .map(|i| mem_port(&cfg, i, &pool))
            .collect();
        let w = build::worker(&cfg, ports, pool.clone()).expect("worker");
        Self {
            w,
            pool,
            now_ns: 1_000_000_000,
        }
    }

    /// The in-memory port `i`.
    pub fn port(&mut self, i: usize) -> &mut MemPort {
        self.w.ports[i]
            .as_any_mut()
            .downcast_mut::<MemPort>()
            .expect("a mem port")
    }

    /// Queues frames for reception on port `i`.
    pub fn feed(&mut self, i: usize, frames: impl IntoIterator<Item = Vec<u8>>) {
        let t = self.now_ns;
        for f in frames {
            self.port(i).push_rx(t, f);
        }
    }

    /// Current lab time.
    pub fn now(&self) -> u64 {
        self.now_ns
    }

    /// Advances lab time by `ns` and runs a round (timers fire on it).
    pub fn advance(&mut self, ns: u64) {
        self.now_ns += ns;
        self.w.poll(self.now_ns);
    }

    /// Polls until every port's receive queue is empty, plus one more round; bounded.
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            let pending: usize = (0..self.w.ports.len())
                .map(|i| self.port(i).rx_pending())
                .sum();
            self.w.poll(self.now_ns);
            if pending == 0 {
                return;
            }
        }
        panic!("lab did not drain its input within the round limit");
    }

    /// Takes the frames transmitted on port `i`.
    pub fn tx(&mut self, i: usize) -> Vec<TxFrame> {
        self.port(i).take_tx()
    }

    /// Stage `stage`'s event counter `name` (0 when it has none by that name).
    pub fn event(&self, stage: &str, name: &str) -> u64 {
        self.w
            .snapshot()
            .iter()
            .find(|n| n.name == stage)
            .and_then(|n| n.events.iter().find(|(k, _)| *k == name))
            .map_or(0, |e| e.1)
    }

    /// Drops by reason name, over every stage.
    pub fn drops(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for n in self.w.snapshot() {
            for (r, c) in n.drops {
                *m.entry(r.name()).or_insert(0) += c;
            }
        }
        m
    }

    /// Drops of one reason.
    pub fn dropped(&self, r: Reason) -> u64 {
        self.drops().get(r.name()).copied().unwrap_or(0)
    }

    /// Asserts `rx + originated = tx + delivered + dropped + held` with `held` counted
    /// from the queues themselves.
    pub fn assert_conserved(&self) {
        let a = self.w.acct;
        let held = self.w.held();
        assert_eq!(
            a.rx + a.originated,
            a.tx + a.delivered + a.dropped + held,
            "packets unaccounted: {a:?}, held {held}"
        );
    }

    /// Stops the worker and asserts every buffer is back in the pool.
    pub fn stop_and_check_pool(mut self) {
        self.w.shutdown();
        let total = self.pool.config().buffers as usize;
        let pool = self.pool.clone();
        drop(self.w);
        assert_eq!(pool.free_in_pool(), total, "buffers leaked");
    }
}

/// A plain port with one address.
pub fn port(name: &str, mac: MacAddr, addr: &str) -> PortSetup {
    PortSetup::simple(name, mac, addr.parse().expect("address"))
}

/// Parses an IPv4 address literal.
pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("IPv4 address")
}

/// Several workers over in-memory ports, stepped by the test itself from one thread (so
/// every interleaving of their rounds is the test's choice), or run on threads.
pub struct Team {
    /// The workers.
    pub workers: Vec<Worker>,
    /// What they share.
    pub fabric: std::sync::Arc<netbatch_datapath::rps::Fabric>,
    pool: Pool,
    now_ns: u64,
}

impl Team {
    /// Builds the team: `rx[w]` are the ports worker `w` receives from, `maps[p]` the
    /// workers RPS spreads port `p` over, `rps` the policy (None: no RPS).
    pub fn new(
        spec: &LabSpec,
        mode: Mode,
        rx: Vec<Vec<u16>>,
        maps: Vec<Vec<u16>>,
        rps: Option<netbatch_datapath::rps::RpsParams>,
    ) -> Self {
        // More buffers than any test feeds at once: a `mem` port drops what finds no
        // buffer, as a NIC does, and the threaded tests must not depend on how fast the
        // other worker drains.
        let mut cfg = spec.config(mode, Dispatch::Buckets, 16384);
        cfg.workers = rx.len();
        for (p, port) in cfg.ports.iter_mut().enumerate() {
            port.rx_workers = (0..rx.len() as u16)
                .filter(|&w| rx[usize::from(w)].contains(&(p as u16)))
                .collect();
            port.rps_map = maps.get(p).cloned().unwrap_or_default();
        }
        cfg.rps = rps;
        let pool = Pool::new(cfg.pool).expect("pool");
        let (workers, fabric) =
            build::datapath(&cfg, &pool, |_, p| mem_port(&cfg, p, &pool)).expect("team");
        Self {
            workers,
            fabric,
            pool,
            now_ns: 1_000_000_000,
        }
    }

    /// Worker `w`'s queue of port `p`.
    pub fn port(&mut self, w: usize, p: usize) -> &mut MemPort {
        self.workers[w].ports[p]
            .as_any_mut()
            .downcast_mut::<MemPort>()
            .expect("a mem port")
    }

    /// Queues frames for reception on worker `w`'s queue of port `p`.
    pub fn feed(&mut self, w: usize, p: usize, frames: impl IntoIterator<Item = Vec<u8>>) {
        let t = self.now_ns;
        for f in frames {
            self.port(w, p).push_rx(t, f);
        }
    }

    /// One round of worker `w`; returns its work.
    pub fn step(&mut self, w: usize) -> usize {
        self.now_ns += 1_000;
        self.workers[w].poll(self.now_ns)
    }

    /// Rounds of every worker in turn until nothing is received, in flight or waiting;
    /// bounded.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            let pending: usize = (0..self.workers.len())
                .flat_map(|w| (0..self.workers[w].ports.len()).map(move |p| (w, p)))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|(w, p)| self.port(w, p).rx_pending())
                .sum();
            let mut work = 0;
            for w in 0..self.workers.len() {
                work += self.step(w);
            }
            let backlog: u64 = self
                .workers
                .iter()
                .map(|w| w.steer.as_ref().map_or(0, |s| s.backlog_len()))
                .sum();
            if pending == 0 && work == 0 && backlog == 0 {
                return;
            }
        }
        panic!("the team did not settle within the round limit");
    }

    /// The fate counters over every worker.
    pub fn acct(&self) -> netbatch_engine::Accounting {
        let mut a = netbatch_engine::Accounting::default();
        for w in &self.workers {
            a.add(&w.acct);
        }
        a
    }

    /// Asserts the conservation law over the team: received (and originated) = sent +
    /// delivered + dropped + held (each worker's own, the shared sockets, the rings).
    pub fn assert_conserved(&self) {
        let a = self.acct();
        let own: u64 = self.workers.iter().map(Worker::held_own).sum();
        let sockets = self.workers[0].host.sockets.held();
        let held = own + sockets + a.in_flight();
        assert_eq!(
            a.rx + a.originated,
            a.tx + a.delivered + a.dropped + held,
            "packets unaccounted: {a:?}, held {own} + sockets {sockets} + in flight {}",
            a.in_flight()
        );
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Stops every worker and asserts every buffer is back in the pool.
    pub fn stop_and_check_pool(mut self) {
        for w in &mut self.workers {
            w.shutdown();
        }
        let total = self.pool.config().buffers as usize;
        let pool = self.pool.clone();
        drop(self.workers);
        assert_eq!(pool.free_in_pool(), total, "buffers leaked");
    }
}

/// The FORWARD chain of nftables' "simple stateful router" example: `ct state
/// established,related accept; ct state new iif eth0 accept; drop` (interface 0 is the
/// inside).
pub fn stateful_forward() -> netbatch_stack::filter::Chain {
    use netbatch_stack::ct::state_bit;
    use netbatch_stack::filter::{Chain, CtMatch, Rule, Verdict};
    let mut est = Rule::any(Verdict::Accept);
    est.ct = Some(CtMatch {
        state: state_bit::ESTABLISHED | state_bit::RELATED,
        ..CtMatch::default()
    });
    let mut new_inside = Rule::any(Verdict::Accept);
    new_inside.ct = Some(CtMatch {
        state: state_bit::NEW,
        ..CtMatch::default()
    });
    new_inside.in_if = Some(0);
    Chain {
        rules: vec![est, new_inside],
        policy: Verdict::Drop,
    }
}
