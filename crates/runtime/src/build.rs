//! Assembles a worker from a validated [`Config`]: host state, graph, applications. The
//! caller supplies the ports (real ones for `run`, in-memory ones for `replay`).

use netbatch_engine::Pool;
use netbatch_ports::Port;
use netbatch_stack::build as build_graph;

use crate::apps::App;
use crate::apps::echo::UdpEcho;
use crate::apps::sink::UdpSink;
use crate::config::{AppConfig, Config};
use crate::setup::{PortSetup, build_host};
use crate::{PollParams, Worker};

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
    let setups: Vec<PortSetup> = cfg.ports.iter().map(|p| p.setup.clone()).collect();
    let host = build_host(&setups, &cfg.routes, &cfg.neighbours, cfg.host)?;
    // One worker: every application runs on it.
    let names: Vec<&str> = cfg.ports.iter().map(|p| p.setup.name.as_str()).collect();
    let graph = build_graph(&cfg.graph, &names, cfg.dispatch)?;
    let apps = apps_for(cfg, &host.sockets, 0, None)?;
    let params = PollParams {
        weight: cfg.burst,
        budget: cfg.budget,
        mode: cfg.mode,
        ..PollParams::default()
    };
    let mut w = Worker::new(graph, host, ports, pool, params)?;
    w.apps = apps;
    Ok(w)
}

/// The applications of worker `worker` (every application when `worker` is the only
/// one: pass `None` for `fabric`), their sockets bound in the shared table. With RPS,
/// the sinks record the flows they read for RFS.
fn apps_for(
    cfg: &Config,
    sockets: &netbatch_stack::udp::socket::Sockets,
    worker: usize,
    fabric: Option<&std::sync::Arc<crate::rps::Fabric>>,
) -> Result<Vec<Box<dyn App>>, BuildError> {
    let mut apps: Vec<Box<dyn App>> = Vec::new();
    for a in &cfg.apps {
        let (w, addr, port, queue) = match *a {
            AppConfig::UdpSink {
                worker,
                addr,
                port,
                queue,
                ..
            }
            | AppConfig::UdpEcho {
                worker,
                addr,
                port,
                queue,
            } => (worker, addr, port, queue),
        };
        if fabric.is_some() && w != worker {
            continue;
        }
        let (_, s) = sockets
            .open(addr, port, queue)
            .map_err(|e| BuildError::Bind(format!("{addr}:{port}"), e))?;
        match *a {
            AppConfig::UdpSink { check, gro, .. } => {
                s.set_gro(gro);
                let mut sink = UdpSink::new(vec![s], 256, check);
                if let Some(f) = fabric.filter(|_| cfg.rps.is_some()) {
                    sink = sink.with_rfs(f.clone(), worker);
                }
                apps.push(Box::new(sink));
            }
            AppConfig::UdpEcho { .. } => apps.push(Box::new(UdpEcho::new(s, 256))),
        }
    }
    Ok(apps)
}

/// Builds the configured workers over ports made by `queue(worker, port)` (each worker's
/// queue of each port), sharing `pool`; returns them and their fabric, ready for
/// [`crate::datapath::Datapath::start`].
pub fn datapath(
    cfg: &Config,
    pool: &Pool,
    queue: impl FnMut(usize, usize) -> Box<dyn Port>,
) -> Result<(Vec<Worker>, std::sync::Arc<crate::rps::Fabric>), BuildError> {
    let setups: Vec<PortSetup> = cfg.ports.iter().map(|p| p.setup.clone()).collect();
    let rx: Vec<Vec<u16>> = (0..cfg.workers)
        .map(|w| {
            (0..cfg.ports.len() as u16)
                .filter(|&p| cfg.ports[usize::from(p)].rx_workers.contains(&(w as u16)))
                .collect()
        })
        .collect();
    let spec = TeamSpec {
        ports: &setups,
        routes: &cfg.routes,
        neighbours: &cfg.neighbours,
        host: cfg.host,
        graph: &cfg.graph,
        dispatch: cfg.dispatch,
        poll: PollParams {
            weight: cfg.burst,
            budget: cfg.budget,
            mode: cfg.mode,
            time_cap_ns: cfg.time_cap_ns,
        },
        rps: cfg.rps.clone(),
        maps: cfg.ports.iter().map(|p| p.rps_map.clone()).collect(),
        rx,
    };
    let (mut workers, fabric) = team(&spec, pool, queue)?;
    let sockets = workers[0].host.sockets.clone();
    for (i, w) in workers.iter_mut().enumerate() {
        w.apps = apps_for(cfg, &sockets, i, Some(&fabric))?;
    }
    Ok((workers, fabric))
}

/// What a team of workers is built from, beyond the configuration's host description.
pub struct TeamSpec<'a> {
    /// Ports (addresses, offloads).
    pub ports: &'a [PortSetup],
    /// Routes beyond the connected ones.
    pub routes: &'a [netbatch_stack::route::Route],
    /// Static neighbours.
    pub neighbours: &'a [crate::setup::StaticNeighbour],
    /// Host settings.
    pub host: netbatch_stack::host::HostParams,
    /// Graph options.
    pub graph: &'a netbatch_stack::GraphOptions,
    /// Dispatch.
    pub dispatch: netbatch_engine::Dispatch,
    /// Poll parameters.
    pub poll: PollParams,
    /// RPS (none: each worker processes what it receives).
    pub rps: Option<crate::rps::RpsParams>,
    /// Per port, the workers RPS spreads its packets over (empty: not steered).
    pub maps: Vec<Vec<u16>>,
    /// Per worker, the ports it receives from.
    pub rx: Vec<Vec<u16>>,
}

/// Builds one worker per entry of `spec.rx`, each with its own queue of every port
/// (`queue(worker, port)`), sharing `pool`, routes, sockets and learned neighbours, and
/// the fabric that joins them (RPS rings when `spec.rps` is set).
pub fn team(
    spec: &TeamSpec<'_>,
    pool: &Pool,
    mut queue: impl FnMut(usize, usize) -> Box<dyn Port>,
) -> Result<(Vec<Worker>, std::sync::Arc<crate::rps::Fabric>), BuildError> {
    let n = spec.rx.len().max(1);
    let hosts = crate::setup::build_hosts(spec.ports, spec.routes, spec.neighbours, spec.host, n)?;
    let names: Vec<&str> = spec.ports.iter().map(|p| p.name.as_str()).collect();
    let rps = spec.rps.clone().unwrap_or_default();
    let maps = if spec.rps.is_some() {
        spec.maps.clone()
    } else {
        Vec::new()
    };
    let (fabric, steers) = crate::rps::fabric(n, &rps, maps, spec.ports.len());
    let mut workers = Vec::with_capacity(n);
    for ((i, host), steer) in hosts.into_iter().enumerate().zip(steers) {
        let graph = build_graph(spec.graph, &names, spec.dispatch)?;
        let ports = (0..spec.ports.len()).map(|p| queue(i, p)).collect();
        let mut w = Worker::new(graph, host, ports, pool.clone(), spec.poll)?;
        w.rx_ports = spec.rx.get(i).cloned().unwrap_or_default();
        if spec.rps.is_some() {
            w.steer = Some(steer);
        }
        workers.push(w);
    }
    Ok((workers, fabric))
}
