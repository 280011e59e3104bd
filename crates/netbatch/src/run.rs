//! `netbatch run CONFIG`: serve on real interfaces until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use netbatch_runtime::config::Config;
use netbatch_runtime::run::{self, RunError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file.
    config: PathBuf,
    /// Also write the counters, as JSON, to this file when stopping.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Measure TSC cycles per packet in every stage (costs two clock reads per stage call).
    #[arg(long)]
    stage_timing: bool,
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    let cfg = Config::load_for_run(&a.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    eprintln!(
        "netbatch: {} worker(s), {} mode, {} dispatch{}{}",
        cfg.workers,
        cfg.mode.name(),
        cfg.dispatch.name(),
        cfg.rps
            .as_ref()
            .map(|r| format!(", RPS {}", r.policy.name()))
            .unwrap_or_default(),
        if cfg.run.cores.is_empty() {
            ", not pinned".to_string()
        } else {
            format!(", pinned to cores {:?}", cfg.run.cores)
        }
    );
    let result = run::run(&cfg, &stop, a.stage_timing, |s| {
        let feats = if s.features.is_empty() {
            String::new()
        } else {
            format!(", offloads {}", s.features.join(" "))
        };
        eprintln!(
            "netbatch: port {} up: {}, received by worker(s) {:?}{feats}",
            s.port, s.what, s.rx_workers
        );
        for q in &s.queues {
            eprintln!("netbatch:   {q}");
        }
    });
    let stats = match result {
        Ok(r) => {
            eprintln!("netbatch: stopping");
            r.stats
        }
        Err(RunError::Fault(faults, stats)) => {
            eprint!("{}", run::summary(&stats));
            write_stats(a, &stats)?;
            anyhow::bail!("{}", faults.join("; "));
        }
        Err(e) => return Err(e.into()),
    };
    eprint!("{}", run::summary(&stats));
    write_stats(a, &stats)
}

fn write_stats(a: &Args, stats: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(p) = &a.stats_json {
        std::fs::write(p, serde_json::to_string_pretty(stats)?)?;
    }
    Ok(())
}
