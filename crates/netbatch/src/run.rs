//! `netbatch run CONFIG`: serve on real interfaces until SIGINT or SIGTERM.
//!
//! Logs (what starts, reloads, refusals, faults) go to stderr through `tracing`; the
//! counters at the stop go to stdout (and to `--stats-json`). SIGHUP reloads the
//! configuration; SIGUSR1 writes the counters to the log. Under systemd (a unit of
//! `Type=notify`) it says when it serves (`READY=1`), reloads and stops
//! (`runtime::notify`).

use std::path::PathBuf;

use netbatch_runtime::config::Config;
use netbatch_runtime::run::{self, RunError, RunOptions};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file.
    config: PathBuf,
    /// Also write the counters, as JSON, to this file when stopping.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Measure TSC cycles per packet in every stage (costs two clock reads per stage call;
    /// `netbatch timing on|off` switches it while running).
    #[arg(long)]
    stage_timing: bool,
    /// Serve the control socket here (default: `[control] socket`, or
    /// `/run/netbatch/<config file stem>.sock`).
    #[arg(long)]
    socket: Option<PathBuf>,
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    let cfg = Config::load_for_run(&a.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = RunOptions {
        stage_timing: a.stage_timing,
        config_path: a.config.clone(),
        socket: a.socket.clone(),
        ..RunOptions::default()
    };
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, opts.stop.clone())?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, opts.reload.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, opts.dump.clone())?;
    tracing::info!(
        "{} worker(s), {} mode, {} dispatch{}{}",
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
    // Under systemd: STOPPING=1 as soon as a stop is asked for (the workers then drain).
    if std::env::var_os(netbatch_runtime::notify::NOTIFY_SOCKET).is_some() {
        let stop = opts.stop.clone();
        std::thread::Builder::new()
            .name("sd-notify".into())
            .spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                netbatch_runtime::notify::notify("STOPPING=1\nSTATUS=stopping");
            })?;
    }
    let ports = cfg.ports.len();
    let mut up = 0;
    let result = run::run(&cfg, &opts, |s| {
        let feats = if s.features.is_empty() {
            String::new()
        } else {
            format!(", offloads {}", s.features.join(" "))
        };
        tracing::info!(
            "port {} up: {}, received by worker(s) {:?}{feats}",
            s.port,
            s.what,
            s.rx_workers
        );
        for q in &s.queues {
            tracing::info!("  {q}");
        }
        // Every port is up and the control socket serves: ready (for systemd).
        up += 1;
        if up == ports {
            netbatch_runtime::notify::notify(&format!(
                "READY=1\nSTATUS=serving {ports} port(s), {} worker(s)",
                cfg.workers
            ));
        }
    });
    let stats = match result {
        Ok(r) => {
            tracing::info!("stopped");
            r.stats
        }
        Err(RunError::Fault(faults, stats)) => {
            write_stats(a, &stats)?;
            print_summary(&stats);
            anyhow::bail!("{}", faults.join("; "));
        }
        Err(e) => return Err(e.into()),
    };
    write_stats(a, &stats)?;
    print_summary(&stats);
    Ok(())
}

/// The counters on stdout; a terminal that went away (the SSH session closed) loses
/// them there, not the stats file, which is written first.
fn print_summary(stats: &serde_json::Value) {
    use std::io::Write;
    let _ = write!(std::io::stdout(), "{}", run::summary(stats));
    let _ = std::io::stdout().flush();
}

fn write_stats(a: &Args, stats: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(p) = &a.stats_json {
        std::fs::write(p, serde_json::to_string_pretty(stats)?)?;
    }
    Ok(())
}
