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
    #[error("{0}")]
    Setup(#[from] crate::setup::SetupError),
    /// The graph could not be built.
    #[error("graph: {0}")]
    Graph(#[from] netbatch_engine::GraphError),
    /// A node the worker needs is missing.
    #[error("{0}")]
    Node(#[from] crate::worker::MissingNode),
    /// An application could not bind.
    #[error("app bind {0}: {1}")]
    Bind(String, netbatch_stack::udp::socket::BindError),
    /// The packet pool could not be created.
    #[error("{0}")]
    Pool(#[from] netbatch_engine::PoolError),
}

/// Builds a worker for `cfg` over `ports` (in configuration order).
pub fn worker(cfg: &Config, ports: Vec<Box<dyn Port>>, pool: Pool) -> Result<Worker, BuildError> {
    let setups: Vec<PortSetup> = cfg.ports.iter().map(|p| p.setup.clone()).collect();
    let mut host = build_host(&setups, &cfg.routes, &cfg.neighbours, cfg.host)?;
    let names: Vec<&str> = cfg.ports.iter().map(|p| p.setup.name.as_str()).collect();
    let graph = build_graph(&cfg.graph, &names, cfg.dispatch)?;
    let mut apps: Vec<Box<dyn App>> = Vec::new();
    for a in &cfg.apps {
        match *a {
            AppConfig::UdpSink {
                addr,
                port,
                queue,
                check,
                gro,
            } => {
                let s = host
                    .sockets
                    .bind(addr, port, queue)
                    .map_err(|e| BuildError::Bind(format!("{addr}:{port}"), e))?;
                if let Some(sock) = host.sockets.get_mut(s) {
                    sock.gro = gro;
                }
                apps.push(Box::new(UdpSink::new(vec![s], 256, check)));
            }
            AppConfig::UdpEcho { addr, port, queue } => {
                let s = host
                    .sockets
                    .bind(addr, port, queue)
                    .map_err(|e| BuildError::Bind(format!("{addr}:{port}"), e))?;
                apps.push(Box::new(UdpEcho::new(s, 256)));
            }
        }
    }
    let params = PollParams {
        weight: cfg.burst,
        budget: cfg.budget,
        mode: cfg.mode,
    };
    let mut w = Worker::new(graph, host, ports, pool, params)?;
    w.apps = apps;
    Ok(w)
}
