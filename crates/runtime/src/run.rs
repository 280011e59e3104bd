//! `netbatch run`: the datapath on real interfaces.
//!
//! Opens every configured port's queue for every worker (a port that cannot be opened
//! stops the start with an error naming it, and what was opened is closed again), builds
//! and starts the workers, serves the control socket (`[control]`) and the metrics
//! endpoint (`[metrics]`), serves until the stop flag is raised (a signal) or a port
//! fails, then stops the workers, frees what they held and reports the counters: per
//! worker and summed. Every buffer must be back in the pool at the end. While serving,
//! the reload flag (SIGHUP) re-reads the configuration as `netbatch reload` does, and the
//! dump flag (SIGUSR1) writes the counters to the log.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netbatch_datapath::threads::{Datapath, StartError};
use netbatch_engine::{Layout, Pool};
use netbatch_ports::sys::PortError;
use netbatch_ports::{Port, QueueSpec};
use serde_json::{Map, Value, json};

use crate::build::{self, BuildError};
use crate::config::{Config, PortKind};
use crate::control::Control;

/// Why `run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A port could not be opened.
    #[error(transparent)]
    Port(#[from] PortError),
    /// A port kind that only `bench` or `replay` can drive.
    #[error("port {0}: kind {1} is not a live interface (use it with `netbatch {2}`)")]
    NotLive(String, &'static str, &'static str),
    /// The workers could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The workers could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A port stopped working while serving (the datapath stopped).
    #[error("stopped: {}", .0.join("; "))]
    Fault(Vec<String>, Box<Value>),
    /// Buffers were not all back in the pool after the stop (a bug).
    #[error("{0} packet buffers were not returned to the pool")]
    Leak(usize),
    /// An interface is served by another datapath, or could not be claimed.
    #[error(transparent)]
    Claim(#[from] crate::claim::ClaimError),
    /// The control socket or the metrics endpoint could not be served.
    #[error("{0}")]
    Control(String),
}

/// How `run` is steered from outside: flags signal handlers raise, and where the
/// configuration came from (for reloads and the control socket's default name).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Raised to stop (SIGINT, SIGTERM).
    pub stop: Arc<AtomicBool>,
    /// Raised to reload the configuration (SIGHUP); lowered when done.
    pub reload: Arc<AtomicBool>,
    /// Raised to write the counters to the log (SIGUSR1); lowered when done.
    pub dump: Arc<AtomicBool>,
    /// Per-stage TSC timing from the start (two clock reads per stage call).
    pub stage_timing: bool,
    /// The configuration file.
    pub config_path: PathBuf,
    /// The control socket's path, overriding the configuration's.
    pub socket: Option<PathBuf>,
}

/// A started port, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Configured name.
    pub port: String,
    /// Kind and interface.
    pub what: String,
    /// Workers that receive from it.
    pub rx_workers: Vec<u16>,
    /// Offloads in use (ethtool names).
    pub features: Vec<&'static str>,
    /// How each worker's queue works (`worker N: ` and the backend's own words).
    pub queues: Vec<String>,
}

/// Opens every worker's queue of every port: `[port][worker]`.
pub fn open_ports(cfg: &Config, pool: &Pool) -> Result<Vec<Vec<Box<dyn Port>>>, RunError> {
    let room = pool.config().room();
    let mut all = Vec::with_capacity(cfg.ports.len());
    for (pi, p) in cfg.ports.iter().enumerate() {
        let name = &p.setup.name;
        let vhost = match &p.kind {
            PortKind::VhostUser(ep) => Some(ep),
            _ => None,
        };
        let endpoint = vhost.map(|ep| ep.socket.display().to_string());
        let Some(iface) = p.kind.interface().or(endpoint.as_deref()) else {
            let (kind, cmd) = match p.kind {
                PortKind::Pcap => ("pcap", "replay"),
                _ => ("gen", "bench"),
            };
            return Err(RunError::NotLive(name.clone(), kind, cmd));
        };
        let specs: Vec<QueueSpec> = (0..cfg.workers)
            .map(|w| QueueSpec {
                name: name.clone(),
                index: pi as u16,
                interface: iface.to_string(),
                worker: w,
                rx_member: p.rx_workers.iter().position(|&x| usize::from(x) == w),
                rx_members: p.rx_workers.len(),
                features: p.setup.features,
                room,
            })
            .collect();
        let queues = match &p.kind {
            PortKind::AfPacket(_) => netbatch_ports::af_packet::open(&specs)?,
            PortKind::Tap(_) => netbatch_ports::tap::open(&specs)?,
            PortKind::HostTap { netns, .. } => netbatch_ports::tap::open_paired(
                &specs,
                &netbatch_ports::tap::PairLink {
                    netns: netns.clone(),
                    mac: p.setup.mac,
                    mtu: p.setup.mtu,
                },
            )?,
            PortKind::AfXdp(_) => netbatch_ports::af_xdp::open(&specs, pool)?,
            PortKind::VhostUser(ep) => netbatch_ports::vhost_user::open(&specs, ep)?,
            PortKind::Pcap | PortKind::Gen(_) => unreachable!("refused above"),
        };
        all.push(queues);
    }
    Ok(all)
}

/// How the pool's buffers are laid out: tiling pages when an `af_xdp` port's interface
/// offers zero-copy (its driver then uses the pool's buffers as they are), padded
/// otherwise.
fn pool_layout(cfg: &Config) -> Layout {
    let xdp = cfg
        .ports
        .iter()
        .filter(|p| matches!(p.kind, PortKind::AfXdp(_)))
        .filter_map(|p| p.kind.interface());
    let (layout, by) = netbatch_ports::af_xdp::pool_layout(xdp);
    if let Some(iface) = by {
        tracing::info!(target: "netbatch::run", "af_xdp: {iface} offers zero-copy: packet buffers tile pages (stride {} B) so that its driver can use them", cfg.pool.buf_size);
    }
    layout
}

/// What a run did.
#[derive(Debug)]
pub struct RunReport {
    /// Counters: `totals` and `workers` (each as `replay`'s stats document).
    pub stats: Value,
}

/// Runs `cfg` until `opts.stop` is raised or a port fails (see [`RunOptions`]).
/// `started` is told about each port once everything is up.
pub fn run(
    cfg: &Config,
    opts: &RunOptions,
    mut started: impl FnMut(&Started),
) -> Result<RunReport, RunError> {
    let stop = &opts.stop;
    // Before anything is opened: a second datapath on an interface is refused whole.
    let socket = cfg.control.enabled.then(|| socket_path(cfg, opts));
    let _claims = crate::claim::interfaces(
        cfg,
        &opts.config_path,
        socket.as_deref(),
        Path::new(crate::claim::CLAIM_DIR),
    )?;
    // Large tables (the IPv4 FIB's first level) ask for huge pages as the pool does.
    netbatch_engine::set_huge_tables(cfg.pool.huge_pages);
    let pool = Pool::with_layout(cfg.pool, pool_layout(cfg)).map_err(BuildError::from)?;
    tracing::info!(
        target: "netbatch::run",
        "packet pool: {} buffers of {} B on {}{}",
        cfg.pool.buffers,
        cfg.pool.buf_size,
        pool.backing(),
        match (pool.backing(), pool.huge_bytes()) {
            (netbatch_engine::Backing::Transparent, Some(b)) => format!(" ({} of {} MiB in huge pages)", b >> 20, pool.region().1 >> 20),
            _ => String::new(),
        }
    );
    let opened = open_ports(cfg, &pool)?;
    let infos: Vec<Started> = cfg
        .ports
        .iter()
        .zip(&opened)
        .map(|(p, q)| Started {
            port: p.setup.name.clone(),
            what: p.kind.to_string(),
            rx_workers: p.rx_workers.clone(),
            features: p.setup.features.names_on(),
            queues: q
                .iter()
                .enumerate()
                .map(|(w, q)| (w, q.describe()))
                .filter(|(_, d)| !d.is_empty())
                .map(|(w, d)| format!("worker {w}: {d}"))
                .collect(),
        })
        .collect();
    // The ports' links are followed from before the workers start (the first dump is
    // the baseline of the kernel's transmit drop counters).
    let links: Vec<_> = opened
        .iter()
        .filter_map(|q| q.first().and_then(|q| q.link()))
        .collect();
    let watch = if links.is_empty() {
        None
    } else {
        Some(Arc::new(
            crate::linux::links::LinkWatch::start(links).map_err(|e| {
                RunError::Control(format!("following the ports' links (rtnetlink): {e}"))
            })?,
        ))
    };
    let mut queues: Vec<std::vec::IntoIter<Box<dyn Port>>> =
        opened.into_iter().map(Vec::into_iter).collect();
    // `build::datapath` asks for the queues worker by worker, port by port, in order.
    let (mut workers, fabric) = build::datapath(cfg, &pool, |_, p| {
        queues[p]
            .next()
            .unwrap_or_else(|| unreachable!("one queue per worker was opened"))
    })?;
    for w in &mut workers {
        w.graph.set_timing(opts.stage_timing);
    }
    let (routes, routes6) = (
        workers[0].host.routes.clone(),
        workers[0].host.routes6.clone(),
    );
    let dp = Datapath::start(workers, fabric, &cfg.run)?;
    let dp_stop = dp.stop_flag();
    let control = Arc::new(Control::new(
        dp.remote(),
        cfg.clone(),
        &opts.config_path,
        routes,
        routes6,
    ));
    if let Some(w) = &watch {
        let w = Arc::downgrade(w);
        control.set_links(Arc::new(move || {
            w.upgrade().map_or(Value::Null, |w| w.stats())
        }));
    }
    let served = match serve(cfg, opts, &control) {
        Ok(s) => s,
        Err(e) => {
            dp_stop.store(true, Ordering::SeqCst);
            let mut workers = dp.stop();
            for w in &mut workers {
                w.shutdown();
            }
            return Err(e);
        }
    };
    for s in &infos {
        started(s);
    }
    while !stop.load(Ordering::Relaxed) && !dp.stopping() {
        std::thread::sleep(Duration::from_millis(50));
        if opts.reload.swap(false, Ordering::SeqCst) {
            tracing::info!(target: "netbatch::run", "SIGHUP: reloading {}", opts.config_path.display());
            // The reload logs what it applied or why it refused.
            let _ = control.reload();
        }
        if opts.dump.swap(false, Ordering::SeqCst) {
            match control.counters() {
                Ok(c) => {
                    tracing::info!(target: "netbatch::run", "SIGUSR1: counters\n{}", summary(&c).trim_end())
                }
                Err(e) => {
                    tracing::warn!(target: "netbatch::run", "SIGUSR1: counters unavailable: {e}")
                }
            }
        }
    }
    // The control plane goes first: nothing may wait on a worker that stops.
    drop(served);
    dp_stop.store(true, Ordering::SeqCst);
    let faults = dp.faults();
    let mut workers = dp.stop();
    for w in &mut workers {
        w.shutdown();
    }
    let mut stats = report(&workers);
    if let Some(w) = &watch {
        stats["links"] = w.stats();
    }
    drop(watch);
    let total = pool.config().buffers as usize;
    drop(workers);
    if !faults.is_empty() {
        return Err(RunError::Fault(faults, Box::new(stats)));
    }
    if pool.free_in_pool() != total {
        return Err(RunError::Leak(total - pool.free_in_pool()));
    }
    Ok(RunReport { stats })
}

/// What serves the control plane while the datapath runs; dropping it stops them.
struct Served {
    // Dropped in this order: the mirror (which changes tables through the control plane)
    // before the servers.
    _mirror: Option<Arc<crate::linux::Mirror>>,
    _socket: Option<crate::control::server::Server>,
    _metrics: Option<crate::metrics::MetricsServer>,
}

/// Where the control socket is served: `--socket`, else the configuration's.
fn socket_path(cfg: &Config, opts: &RunOptions) -> PathBuf {
    opts.socket
        .clone()
        .unwrap_or_else(|| cfg.control.socket_path(&opts.config_path))
}

/// Starts the control socket (unless `[control] enabled = false`) and the metrics
/// endpoint (`[metrics] listen`).
fn serve(cfg: &Config, opts: &RunOptions, control: &Arc<Control>) -> Result<Served, RunError> {
    let socket = if cfg.control.enabled {
        let path = socket_path(cfg, opts);
        let s = crate::control::server::Server::start(
            control.clone(),
            &path,
            cfg.control.group.as_ref().map(|g| g.1),
        )
        .map_err(|e| RunError::Control(e.to_string()))?;
        tracing::info!(target: "netbatch::run", "control socket {}", path.display());
        Some(s)
    } else {
        None
    };
    let metrics = match cfg.control.metrics {
        Some(addr) => {
            let c = control.clone();
            let source: crate::metrics::Source = Arc::new(move || {
                let stats = c.counters()?;
                let tables: Vec<crate::metrics::TableGauge> = c
                    .tables()
                    .into_iter()
                    .map(|(name, help, value)| crate::metrics::TableGauge::new(name, help, value))
                    .collect();
                crate::metrics::encode(&stats, &tables).map_err(|e| e.to_string())
            });
            let m = crate::metrics::MetricsServer::start(addr, source)
                .map_err(|e| RunError::Control(format!("metrics.listen {addr}: {e}")))?;
            tracing::info!(target: "netbatch::run", "metrics at http://{}/metrics", m.local_addr());
            Some(m)
        }
        None => None,
    };
    let mirror = match &cfg.linux {
        Some(l) => {
            let m =
                Arc::new(crate::linux::start(control.clone(), l).map_err(|e| {
                    RunError::Control(format!("linux.namespace {}: {e}", l.namespace))
                })?);
            let (weak, weak2) = (Arc::downgrade(&m), Arc::downgrade(&m));
            control.set_mirror(crate::control::MirrorHooks {
                stats: Arc::new(move || {
                    weak.upgrade().map_or(Value::Null, |m| m.stats().to_json())
                }),
                resync: Arc::new(move || {
                    let m = weak2.upgrade().ok_or("the mirror has stopped")?;
                    let r = m.resync()?;
                    Ok(serde_json::json!({
                        "route_changes": r.route_changes,
                        "neighbour_changes": r.neighbour_changes,
                        "dumped": r.dumped,
                        "took_ms": r.took.as_secs_f64() * 1000.0,
                    }))
                }),
            });
            tracing::info!(target: "netbatch::run", "mirroring the routes and neighbours of namespace {}", l.namespace);
            Some(m)
        }
        None => None,
    };
    Ok(Served {
        _mirror: mirror,
        _socket: socket,
        _metrics: metrics,
    })
}

/// The counters of stopped workers: each worker's stats document and their sums.
pub fn report(workers: &[netbatch_datapath::Worker]) -> Value {
    summed(workers.iter().map(crate::replay::stats).collect())
}

/// Each worker's stats document (`per`) and their sums.
pub(crate) fn summed(per: Vec<Value>) -> Value {
    let mut totals = Map::new();
    for k in [
        "rx_packets",
        "tx_packets",
        "delivered_packets",
        "dropped_packets",
        "held_packets",
        "originated_packets",
    ] {
        let n: u64 = per.iter().filter_map(|w| w[k].as_u64()).sum();
        totals.insert(k.into(), json!(n));
    }
    let mut drops = Map::new();
    for w in &per {
        for (r, n) in w["drops"].as_object().into_iter().flatten() {
            let e = drops.entry(r.clone()).or_insert(json!(0));
            *e = json!(e.as_u64().unwrap_or(0) + n.as_u64().unwrap_or(0));
        }
    }
    // Every reason that dropped something anywhere, with its description.
    let reasons: Vec<Value> = drops
        .keys()
        .map(|r| json!({"name": r, "description": describe(r)}))
        .collect();
    totals.insert("drops".into(), Value::Object(drops));
    totals.insert("drop_reasons".into(), Value::Array(reasons));
    // Ports: each worker has a queue of every port; sum them by port.
    let mut ports: Vec<Value> = Vec::new();
    for w in &per {
        for (i, p) in w["ports"].as_array().into_iter().flatten().enumerate() {
            if ports.len() <= i {
                ports.push(p.clone());
                continue;
            }
            if let (Some(acc), Some(add)) = (ports[i].as_object_mut(), p.as_object()) {
                for (k, v) in add {
                    if let (Some(a), Some(b)) = (acc.get(k).and_then(Value::as_u64), v.as_u64()) {
                        acc.insert(k.clone(), json!(a + b));
                    }
                }
                // Receive drops by reason: counts summed reason by reason.
                let theirs = add.get("rx_drop_reasons").and_then(Value::as_array);
                if let Some(mine) = acc.get_mut("rx_drop_reasons").and_then(Value::as_array_mut) {
                    for r in mine.iter_mut() {
                        let more = theirs
                            .into_iter()
                            .flatten()
                            .filter(|t| t["reason"] == r["reason"])
                            .filter_map(|t| t["count"].as_u64())
                            .sum::<u64>();
                        r["count"] = json!(r["count"].as_u64().unwrap_or(0) + more);
                    }
                }
            }
        }
    }
    totals.insert("ports".into(), Value::Array(ports));
    json!({ "totals": totals, "workers": per })
}

/// The counters as lines for a person: fates, ports, drops by reason.
pub fn summary(stats: &Value) -> String {
    let t = &stats["totals"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    let mut s = format!(
        "packets: rx {} originated {} tx {} delivered {} dropped {} held {}\n",
        n("rx_packets"),
        n("originated_packets"),
        n("tx_packets"),
        n("delivered_packets"),
        n("dropped_packets"),
        n("held_packets"),
    );
    for p in t["ports"].as_array().into_iter().flatten() {
        let f = |k: &str| p[k].as_u64().unwrap_or(0);
        s += &format!(
            "port {}: rx {} ({} bytes, {} dropped by the port, {} without a buffer) tx {} ({} bytes, {} refused)\n",
            p["name"].as_str().unwrap_or("?"),
            f("rx_packets"),
            f("rx_bytes"),
            f("rx_dropped"),
            f("rx_nobuf"),
            f("tx_packets"),
            f("tx_bytes"),
            f("tx_refused"),
        );
    }
    for (i, w) in stats["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ws = &w["worker"];
        let f = |k: &str| ws[k].as_u64().unwrap_or(0);
        s += &format!(
            "worker {i}: processed {} rounds {} time_squeeze {}",
            f("processed"),
            f("rounds"),
            f("time_squeeze"),
        );
        if ws.get("received_rps").is_some() {
            s += &format!(
                " handed_off {} taken_over {} received_rps {} backlog_polls {} backlog_dropped {}",
                f("handed_off"),
                f("taken_over"),
                f("received_rps"),
                f("backlog_polls"),
                f("dropped"),
            );
        }
        s += "\n";
    }
    let mut drops: Vec<(String, u64)> = t["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
        .collect();
    drops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (r, c) in drops {
        s += &format!("drop {r}: {c} ({})\n", describe(&r));
    }
    s
}

/// The description of the drop reason named `name` ("" for a name no set declares).
fn describe(name: &str) -> &'static str {
    netbatch_datapath::reason_sets()
        .into_iter()
        .flatten()
        .find(|r| r.name() == name)
        .map_or("", |r| r.description())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary printed at stop names each drop reason with its description, summed
    /// over the workers.
    #[test]
    fn the_summary_describes_every_drop_reason() {
        let worker = |n: u64| {
            json!({
                "rx_packets": n, "tx_packets": 0, "delivered_packets": 0,
                "dropped_packets": n, "held_packets": 0, "originated_packets": 0,
                "drops": {"no_route": n},
                "drop_reasons": [{"name": "no_route", "description": "no route to the destination"}],
                "ports": [],
            })
        };
        let s = summary(&summed(vec![worker(2), worker(3)]));
        assert!(
            s.contains("drop no_route: 5 (no route to the destination)"),
            "{s}"
        );
    }
}
