//! `netbatch replay`: capture in, capture and counters out.

use std::path::PathBuf;

use anyhow::Context;
use netbatch_runtime::config::Config;

/// Arguments of `netbatch replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Configuration file.
    #[arg(long)]
    config: PathBuf,
    /// Input capture (pcap or pcapng, Ethernet with or without its FCS), read as the
    /// replay runs.
    #[arg(long = "in")]
    input: PathBuf,
    /// Output capture (pcapng, one interface per port).
    #[arg(long = "out")]
    output: PathBuf,
    /// Port that receives the input (default: the first configured port).
    #[arg(long)]
    port: Option<String>,
    /// Write the counters here as JSON.
    #[arg(long)]
    stats_json: Option<PathBuf>,
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    let cfg = Config::load(&a.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    if cfg.workers > 1 {
        // A capture is one receive queue on one clock: one worker keeps the output
        // deterministic. Workers and RPS are for `netbatch run` and `netbatch bench`.
        eprintln!(
            "note: replay runs on one worker (datapath.workers = {} applies to `netbatch run`)",
            cfg.workers
        );
    }
    let r = netbatch_runtime::replay::replay(&cfg, &a.input, &a.output, a.port.as_deref())?;
    let s = &r.stats;
    let truncated = s["capture_truncated"].as_u64().unwrap_or(0);
    eprintln!(
        "replayed: rx {} tx {} delivered {} dropped {} held {} originated {} -> {} frames in {}{}",
        s["rx_packets"],
        s["tx_packets"],
        s["delivered_packets"],
        s["dropped_packets"],
        s["held_packets"],
        s["originated_packets"],
        r.written,
        a.output.display(),
        if truncated > 0 {
            format!(" ({truncated} record(s) of the capture were truncated)")
        } else {
            String::new()
        }
    );
    if let Some(path) = &a.stats_json {
        std::fs::write(path, serde_json::to_string_pretty(s)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
