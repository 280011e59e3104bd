//! `[datapath]`: batch mode and dispatch, burst, budget and time cap of a round, workers
//! and their cores, RPS (backlog, RFS), idle busy-polling, whether to forward, and
//! whether to honour source-route options.

use netbatch_datapath::rps::{RpsParams, RpsPolicy};
use netbatch_datapath::threads::RunParams;
use netbatch_engine::{Dispatch, Mode};

use super::Errs;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DatapathFile {
    #[serde(default = "default_mode")]
    mode: String,
    #[serde(default = "default_dispatch")]
    dispatch: String,
    #[serde(default = "yes")]
    forwarding: bool,
    /// Honour source-route options (LSRR, SSRR); off drops them, as Linux's default.
    #[serde(default)]
    accept_source_route: bool,
    #[serde(default = "default_burst")]
    burst: usize,
    #[serde(default = "default_budget")]
    budget: usize,
    /// Time a round may take, in µs (`netdev_budget_usecs`).
    #[serde(default = "default_time_cap_us")]
    time_cap_us: u64,
    /// Worker threads.
    #[serde(default = "default_workers")]
    workers: usize,
    /// Cores to pin the workers to (one per worker), or none.
    #[serde(default)]
    cores: Vec<usize>,
    /// RPS: off | backlog | direct | deferred.
    #[serde(default = "default_rps")]
    rps: String,
    /// Packets each backlog ring holds (`netdev_max_backlog`; default 1000, Linux's);
    /// when given with RPS on, at most `pool.buffers` (checked with the pool).
    max_backlog: Option<usize>,
    /// RFS: flows follow the worker whose application reads them.
    #[serde(default = "yes")]
    rfs: bool,
    /// Busy polling before an idle worker sleeps, in µs.
    #[serde(default = "default_idle_spin_us")]
    idle_spin_us: u64,
}

impl Default for DatapathFile {
    fn default() -> Self {
        Self {
            mode: default_mode(),
            dispatch: default_dispatch(),
            forwarding: true,
            accept_source_route: false,
            burst: default_burst(),
            budget: default_budget(),
            time_cap_us: default_time_cap_us(),
            workers: default_workers(),
            cores: Vec::new(),
            rps: default_rps(),
            max_backlog: None,
            rfs: true,
            idle_spin_us: default_idle_spin_us(),
        }
    }
}

fn default_time_cap_us() -> u64 {
    2000
}
fn default_workers() -> usize {
    1
}
fn default_rps() -> String {
    "off".into()
}
fn default_max_backlog() -> usize {
    1000
}
fn default_idle_spin_us() -> u64 {
    50
}
fn default_mode() -> String {
    "list".into()
}
fn default_dispatch() -> String {
    "buckets".into()
}
fn yes() -> bool {
    true
}
fn default_burst() -> usize {
    64
}
fn default_budget() -> usize {
    300
}

/// The section validated: the parts of [`super::Config`] it gives, and `forwarding` for
/// the host settings. `workers` is as written even when out of range, for later sections
/// to check worker indices against.
pub(super) struct Datapath {
    /// Batch mode (none: in error).
    pub(super) mode: Option<Mode>,
    /// Dispatch strategy (none: in error).
    pub(super) dispatch: Option<Dispatch>,
    /// Frames per queue per round.
    pub(super) burst: usize,
    /// Frames per round.
    pub(super) budget: usize,
    /// Time a round may take, in ns.
    pub(super) time_cap_ns: u64,
    /// Worker threads.
    pub(super) workers: usize,
    /// Pinning and idle busy-polling.
    pub(super) run: RunParams,
    /// RPS (none: off, or in error).
    pub(super) rps: Option<RpsParams>,
    /// Whether the file gives `max_backlog` (its default is not held to the pool).
    pub(super) max_backlog_given: bool,
    /// Forward packets not addressed to us.
    pub(super) forwarding: bool,
    /// Honour source-route options.
    pub(super) accept_source_route: bool,
}

/// Validates `[datapath]`.
pub(super) fn validate(raw: &DatapathFile, e: &mut Errs) -> Datapath {
    let max_backlog = raw.max_backlog.unwrap_or_else(default_max_backlog);
    let mode = e.parse::<Mode>("datapath.mode", &raw.mode, "a batch mode");
    let dispatch = e.parse::<Dispatch>("datapath.dispatch", &raw.dispatch, "a dispatch strategy");
    if !(1..=netbatch_engine::LIST_MAX).contains(&raw.burst) {
        e.add(
            "datapath.burst",
            format!(
                "{} is out of range (1 to {})",
                raw.burst,
                netbatch_engine::LIST_MAX
            ),
        );
    }
    let workers = raw.workers;
    if !(1..=64).contains(&workers) {
        e.add(
            "datapath.workers",
            format!("{workers} is out of range (1 to 64)"),
        );
    }
    if !raw.cores.is_empty() && raw.cores.len() != workers {
        e.add(
            "datapath.cores",
            format!(
                "{} cores for {workers} workers: give one core per worker, or none",
                raw.cores.len()
            ),
        );
    }
    let rps = match raw.rps.as_str() {
        "off" => None,
        other => match other.parse::<RpsPolicy>() {
            Ok(policy) => Some(RpsParams {
                policy,
                max_backlog,
                rfs_log: if raw.rfs { 15 } else { 0 },
                ..RpsParams::default()
            }),
            Err(m) => {
                e.add("datapath.rps", format!("{m} or off"));
                None
            }
        },
    };
    if max_backlog == 0 || max_backlog > 1 << 20 {
        e.add(
            "datapath.max_backlog",
            format!("{max_backlog} is out of range (1 to 1048576)"),
        );
    }
    if raw.time_cap_us == 0 {
        e.add("datapath.time_cap_us", "must be at least 1");
    }
    if raw.budget < raw.burst {
        e.add(
            "datapath.budget",
            format!("{} is below datapath.burst ({})", raw.budget, raw.burst),
        );
    }
    Datapath {
        mode,
        dispatch,
        burst: raw.burst,
        budget: raw.budget,
        time_cap_ns: raw.time_cap_us.saturating_mul(1000),
        workers,
        run: RunParams {
            idle_spin_ns: raw.idle_spin_us.saturating_mul(1000),
            cores: raw.cores.clone(),
        },
        rps,
        max_backlog_given: raw.max_backlog.is_some(),
        forwarding: raw.forwarding,
        accept_source_route: raw.accept_source_route,
    }
}
