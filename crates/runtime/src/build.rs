//! Assembles workers from a [`Config`]: host state, graphs, applications, and with
//! several workers the fabric that joins them. The caller supplies the ports (real ones
//! for `run`, in-memory ones for `replay` and the tests, generators for the benchmark).
//!
//! [`worker`] and [`datapath`] build everything from the configuration. A [`Builder`]
//! does the same, and may be handed the route table instead of building it from the
//! configured routes (the benchmark loads a large generated table once and shares it
//! between its variants).

use std::net::SocketAddr;
use std::sync::Arc;

use netbatch_datapath::apps::App;
use netbatch_datapath::apps::echo::UdpEcho;
use netbatch_datapath::apps::sink::UdpSink;
use netbatch_datapath::rps::Fabric;
use netbatch_datapath::{PollParams, Worker};
use netbatch_engine::Pool;
use netbatch_ports::Port;
use netbatch_stack::route::{Routes, Routes6};
use netbatch_stack::{GraphOptions, Host, build as build_graph};

use crate::config::{AppKind, Config, PortConfig};
use crate::setup::{PortSetup, build_hosts, build_routes_in, build_routes6_in, interfaces};
use netbatch_stack::route::rule::TABLE_MAIN;

/// Why a worker could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The host (routes, neighbours) could not be built.
    #[error(transparent)]
    Setup(#[from] crate::setup::SetupError),
    /// The graph could not be built.
    #[error("graph: {0}")]
    Graph(#[from] netbatch_engine::GraphError),
    /// An application could not bind.
    #[error("app bind {0}: {1}")]
    Bind(String, netbatch_stack::udp::socket::BindError),
    /// The packet pool could not be created.
    #[error(transparent)]
    Pool(#[from] netbatch_engine::PoolError),
}

/// Builds a worker for `cfg` over `ports` (in configuration order).
pub fn worker(cfg: &Config, ports: Vec<Box<dyn Port>>, pool: Pool) -> Result<Worker, BuildError> {
    Builder::new(cfg).worker(ports, pool)
}

/// Builds the configured workers over ports made by `queue(worker, port)` (each worker's
/// queue of each port), sharing `pool`; returns them and their fabric, ready for
/// [`netbatch_datapath::threads::Datapath::start`].
pub fn datapath(
    cfg: &Config,
    pool: &Pool,
    queue: impl FnMut(usize, usize) -> Box<dyn Port>,
) -> Result<(Vec<Worker>, Arc<Fabric>), BuildError> {
    Builder::new(cfg).datapath(pool, queue)
}

/// The route table of `cfg`: the routes its ports' addresses imply, then its routes.
pub fn route_table(cfg: &Config) -> Result<Routes, BuildError> {
    let (_, ifaces) = interfaces(&setups(cfg))?;
    let vrf = cfg.iface_tables();
    let main = |i: u16| vrf.get(usize::from(i)).is_none_or(|&t| t == TABLE_MAIN);
    Ok(build_routes_in(&ifaces, &cfg.routes, main)?)
}

/// The IPv6 route table of `cfg`: the routes its ports' IPv6 addresses imply, then its
/// IPv6 routes.
pub fn route_table6(cfg: &Config) -> Result<Routes6, BuildError> {
    let (_, ifaces) = interfaces(&setups(cfg))?;
    let vrf = cfg.iface_tables();
    let main = |i: u16| vrf.get(usize::from(i)).is_none_or(|&t| t == TABLE_MAIN);
    Ok(build_routes6_in(&ifaces, &cfg.routes6, main)?)
}

/// The host state a worker of `cfg` starts with (interfaces, routes, static neighbours),
/// for a look at the configuration as built (`check-config`).
pub fn host(cfg: &Config) -> Result<Host, BuildError> {
    let mut hosts = Builder::new(cfg).hosts(1)?;
    Ok(hosts.remove(0))
}

/// Builds workers for a configuration; what [`worker`] and [`datapath`] do, with the
/// choice of a route table built beforehand.
pub struct Builder<'a> {
    cfg: &'a Config,
    table: Option<Arc<Routes>>,
    table6: Option<Arc<Routes6>>,
}

impl<'a> Builder<'a> {
    /// Builds for `cfg`, its route tables built from its ports and routes.
    pub fn new(cfg: &'a Config) -> Self {
        Self {
            cfg,
            table: None,
            table6: None,
        }
    }

    /// Uses `table` as the route table. It must be what [`route_table`] gives for this
    /// configuration (built once, it can be shared by several datapaths).
    pub fn routes(mut self, table: Arc<Routes>) -> Self {
        self.table = Some(table);
        self
    }

    /// Uses `table` as the IPv6 route table (what [`route_table6`] gives for this
    /// configuration).
    pub fn routes6(mut self, table: Arc<Routes6>) -> Self {
        self.table6 = Some(table);
        self
    }

    /// One worker over `ports` (in configuration order): it receives from every port
    /// some worker receives from, and runs every application.
    pub fn worker(&self, ports: Vec<Box<dyn Port>>, pool: Pool) -> Result<Worker, BuildError> {
        let host = self.hosts(1)?.remove(0);
        let apps = apps_for(self.cfg, &host.sockets, 0, None)?;
        let mut w = self.one(
            host,
            &self.graph_options(),
            &self.names(),
            ports,
            pool,
            |p| !p.rx_workers.is_empty(),
        )?;
        w.apps = apps;
        Ok(w)
    }

    /// A worker on `host` over `ports`, receiving from the ports `receives` picks.
    fn one(
        &self,
        host: Host,
        opts: &GraphOptions,
        names: &[&str],
        ports: Vec<Box<dyn Port>>,
        pool: Pool,
        receives: impl Fn(&PortConfig) -> bool,
    ) -> Result<Worker, BuildError> {
        let graph = build_graph(opts, names, self.cfg.dispatch)?;
        let mut w = Worker::new(graph, host, ports, pool, self.poll())?;
        w.rx_ports = (0..self.cfg.ports.len() as u16)
            .filter(|&p| receives(&self.cfg.ports[usize::from(p)]))
            .collect();
        Ok(w)
    }

    /// The configured workers, each with its own queue of every port (`queue(worker,
    /// port)`, asked for worker by worker, port by port), sharing `pool`, routes, sockets
    /// and learned neighbours; each receives from the ports whose `rx_workers` name it and
    /// runs the applications on it; and the fabric that joins them (RPS rings when RPS is
    /// on).
    pub fn datapath(
        &self,
        pool: &Pool,
        mut queue: impl FnMut(usize, usize) -> Box<dyn Port>,
    ) -> Result<(Vec<Worker>, Arc<Fabric>), BuildError> {
        let cfg = self.cfg;
        let n = cfg.workers.max(1);
        let hosts = self.hosts(n)?;
        let rps = cfg.rps.clone().unwrap_or_default();
        let maps = if cfg.rps.is_some() {
            cfg.ports.iter().map(|p| p.rps_map.clone()).collect()
        } else {
            Vec::new()
        };
        let (fabric, steers) = netbatch_datapath::rps::fabric(n, &rps, maps, cfg.ports.len());
        let opts = self.graph_options();
        let names = self.names();
        let mut workers = Vec::with_capacity(n);
        for ((i, host), steer) in hosts.into_iter().enumerate().zip(steers) {
            let ports = (0..cfg.ports.len()).map(|p| queue(i, p)).collect();
            let mut w = self.one(host, &opts, &names, ports, pool.clone(), |p| {
                p.rx_workers.contains(&(i as u16))
            })?;
            if cfg.rps.is_some() {
                if n > 1 && cfg.graph.nat.is_some() {
                    // NAT picks ports whose replies this steering brings back here.
                    w.host.nat_home = steer.nat_home(0);
                }
                // A datagram made whole on a worker that does not own its connection
                // goes to the one that does (symmetric steering, two or more workers).
                // A host pair's tap is not steered: what comes in on it stays there.
                let steered: Vec<bool> = (0..cfg.ports.len())
                    .map(|p| {
                        !w.host.ports.get(p).is_some_and(|p| {
                            matches!(p.pair, netbatch_stack::iface::Pair::Inject(_))
                        })
                    })
                    .collect();
                w.host.defrag_handoff = steer.defrag_handoff(&steered).map(Box::new);
                w.steer = Some(steer);
            }
            workers.push(w);
        }
        let sockets = workers[0].host.sockets.clone();
        for (i, w) in workers.iter_mut().enumerate() {
            w.apps = apps_for(cfg, &sockets, i, Some(&fabric))?;
        }
        Ok((workers, fabric))
    }

    /// `n` hosts sharing the route table (the one given, or one built now), sockets and
    /// (with more than one) learned neighbours.
    fn hosts(&self, n: usize) -> Result<Vec<Host>, BuildError> {
        let table = match &self.table {
            Some(t) => t.clone(),
            None => Arc::new(route_table(self.cfg)?),
        };
        let table6 = match &self.table6 {
            Some(t) => t.clone(),
            None => Arc::new(route_table6(self.cfg)?),
        };
        let cfg = self.cfg;
        let mut hosts = build_hosts(
            &setups(cfg),
            (table, table6),
            (&cfg.neighbours, &cfg.neighbours6),
            cfg.host,
            n,
        )?;
        // Policy rules and numbered tables, shared as the route table is.
        let (policy, policy6) = cfg.policies().map_err(crate::setup::SetupError::from)?;
        let (policy, policy6) = (Arc::new(policy), Arc::new(policy6));
        for h in &mut hosts {
            h.policy = policy.clone();
            h.policy6 = policy6.clone();
        }
        Ok(hosts)
    }

    /// A worker's graph for the configuration (what a live change of rules swaps in).
    pub fn graph(&self) -> Result<netbatch_engine::Graph<Host>, BuildError> {
        Ok(build_graph(
            &self.graph_options(),
            &self.names(),
            self.cfg.dispatch,
        )?)
    }

    /// The graph options: the configured hooks and hand-offs, the GRO stage when some
    /// port does GRO.
    pub(crate) fn graph_options(&self) -> GraphOptions {
        GraphOptions {
            gro: crate::config::any_gro(&self.cfg.ports),
            ..self.cfg.graph.clone()
        }
    }

    fn names(&self) -> Vec<&'a str> {
        self.cfg
            .ports
            .iter()
            .map(|p| p.setup.name.as_str())
            .collect()
    }

    fn poll(&self) -> PollParams {
        PollParams {
            weight: self.cfg.burst,
            budget: self.cfg.budget,
            mode: self.cfg.mode,
            time_cap_ns: self.cfg.time_cap_ns,
        }
    }
}

fn setups(cfg: &Config) -> Vec<PortSetup> {
    cfg.ports.iter().map(|p| p.setup.clone()).collect()
}

/// The applications of worker `worker` (every application when `worker` is the only
/// one: pass `None` for `fabric`), their sockets bound in the shared table. With RPS and
/// RFS, the sinks record the flows they read for RFS.
pub(crate) fn apps_for(
    cfg: &Config,
    sockets: &netbatch_stack::udp::socket::Sockets,
    worker: usize,
    fabric: Option<&Arc<Fabric>>,
) -> Result<Vec<Box<dyn App>>, BuildError> {
    let mut apps: Vec<Box<dyn App>> = Vec::new();
    for a in &cfg.apps {
        let (w, addr, queue) = a.binding();
        if fabric.is_some() && w != worker {
            continue;
        }
        let open = |port: u16| {
            sockets
                .open(addr, port, queue)
                .map(|(_, s)| s)
                .map_err(|e| BuildError::Bind(SocketAddr::new(addr, port).to_string(), e))
        };
        match a.kind() {
            AppKind::Sink(ports, o) => {
                let socks = ports
                    .iter()
                    .map(|&p| open(p))
                    .collect::<Result<Vec<_>, _>>()?;
                for s in &socks {
                    s.set_gro(o.gro);
                }
                let mut sink = UdpSink::new(socks, 256, o.check);
                let rfs = cfg.rps.as_ref().is_some_and(|r| r.rfs_log > 0);
                if let Some(f) = fabric.filter(|_| rfs) {
                    sink = sink.with_rfs(f.clone(), worker);
                }
                if o.latency {
                    sink = sink.with_latency();
                }
                apps.push(Box::new(sink));
            }
            AppKind::Echo(port) => apps.push(Box::new(UdpEcho::new(open(port)?, 256))),
        }
    }
    Ok(apps)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use netbatch_engine::{Pool, PoolConfig};
    use netbatch_ports::Port;
    use netbatch_ports::mem::MemPort;
    use netbatch_wire::ethernet::MacAddr;

    use super::{Builder, route_table};
    use crate::config::{AppConfig, Config, PortConfig};
    use crate::setup::PortSetup;

    /// Two ports: eth0 with fraglist GRO, eth1 received by no worker; a sink on a range of
    /// four ports.
    fn config() -> Config {
        let mut eth0 = PortSetup::simple(
            "eth0",
            MacAddr([2, 0, 0, 0, 0, 1]),
            "198.51.100.1/24".parse().unwrap(),
        );
        eth0.features.rx_gro = true;
        eth0.features.rx_gro_list = true;
        let mut eth1 = PortConfig::new(PortSetup::simple(
            "eth1",
            MacAddr([2, 0, 0, 0, 1, 1]),
            "192.0.2.1/24".parse().unwrap(),
        ));
        eth1.rx_workers.clear();
        let mut cfg = Config::new(vec![PortConfig::new(eth0), eth1]);
        cfg.pool = PoolConfig {
            buffers: 256,
            cache_size: 16,
            ..PoolConfig::default()
        };
        cfg.apps = vec![AppConfig::UdpSink {
            worker: 0,
            addr: "0.0.0.0".parse().unwrap(),
            ports: vec![5001, 5002, 5003, 5004],
            queue: 8,
            check: false,
            gro: false,
            latency: false,
        }];
        cfg
    }

    fn ports(cfg: &Config, pool: &Pool) -> Vec<Box<dyn Port>> {
        let room = pool.config().room();
        cfg.ports
            .iter()
            .enumerate()
            .map(|(i, p)| Box::new(MemPort::new(&p.setup.name, i as u16, room)) as Box<dyn Port>)
            .collect()
    }

    /// What the configuration says is what the worker gets: one sink with a socket on each
    /// port of its range, the GRO stage because a port does GRO (whatever `graph.gro`
    /// says), no receiving on a port no worker receives from; a route table handed to the
    /// builder is the one used.
    #[test]
    fn a_worker_is_what_its_configuration_says() {
        let mut cfg = config();
        cfg.graph.gro = false;
        let pool = Pool::new(cfg.pool).unwrap();
        let table = Arc::new(route_table(&cfg).unwrap());
        let w = Builder::new(&cfg)
            .routes(table.clone())
            .worker(ports(&cfg, &pool), pool.clone())
            .unwrap();
        assert_eq!(w.apps.len(), 1);
        for p in 5001..=5004 {
            assert!(w.host.sockets.lookup(0xc633_6401, p).is_some(), "port {p}");
        }
        assert!(w.host.sockets.lookup(0xc633_6401, 5005).is_none());
        assert!(w.snapshot().iter().any(|s| s.name == "gro"), "GRO stage");
        assert_eq!(w.rx_ports, [0]);
        assert!(Arc::ptr_eq(&w.host.routes, &table));
        // Without a table the builder makes the same one.
        let own = super::worker(&cfg, ports(&cfg, &pool), pool.clone()).unwrap();
        assert!(!Arc::ptr_eq(&own.host.routes, &table));
        assert_eq!(own.host.routes.len(), table.len());
    }

    /// Several workers: each receives from the ports whose `rx_workers` name it, runs the
    /// applications placed on it, and all share one socket table and route table.
    #[test]
    fn a_datapath_deals_out_ports_and_applications() {
        let mut cfg = config();
        cfg.workers = 2;
        cfg.ports[0].rx_workers = vec![1];
        cfg.ports[1].rx_workers = vec![0, 1];
        cfg.apps.push(AppConfig::UdpEcho {
            worker: 1,
            addr: "0.0.0.0".parse().unwrap(),
            port: 7,
            queue: 8,
        });
        let pool = Pool::new(cfg.pool).unwrap();
        let room = pool.config().room();
        let (workers, _) = super::datapath(&cfg, &pool, |_, p| {
            Box::new(MemPort::new(&cfg.ports[p].setup.name, p as u16, room)) as Box<dyn Port>
        })
        .unwrap();
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0].rx_ports, [1]);
        assert_eq!(workers[1].rx_ports, [0, 1]);
        let names = |w: usize| -> Vec<String> {
            workers[w]
                .apps
                .iter()
                .map(|a| a.name().to_string())
                .collect()
        };
        assert_eq!(names(0), ["udp-sink"]);
        assert_eq!(names(1), ["udp-echo"]);
        assert!(workers[1].host.sockets.lookup(0xc633_6401, 5001).is_some());
        assert!(Arc::ptr_eq(
            &workers[0].host.routes,
            &workers[1].host.routes
        ));
    }
}
