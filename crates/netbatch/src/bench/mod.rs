//! `netbatch bench`: the seeds' experiments side by side in one process.
//!
//! Every variant (scenario × mode × dispatch) is built once and warmed up; then the
//! variants run in turn, repetition after repetition (alternating, so slow drifts of the
//! machine hit every variant alike). Each run receives a fixed number of frames
//! (`--packets`) or runs for a time (`--seconds`); throughput is timed with the TSC and
//! the OS clock. Medians are reported. A last pass per variant turns per-stage TSC timing
//! on (it costs two TSC reads per stage call, so it stays off while throughput is
//! measured) to fill in the per-stage cycle counts.

mod forward;
mod gro;
mod scenarios;
mod smol;
mod team;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use netbatch_engine::{Dispatch, Mode, NodeSnapshot};
use netbatch_ports::generator::FlowOrder;
use serde_json::{Value, json};

use scenarios::{Common, Variant};

/// Arguments of `netbatch bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Scenarios to run (comma-separated): null, udp-local-1b, udp-local-1b-nf1,
    /// udp-local-1b-flower, smoltcp-udp-1b, ip4-forward, udp-forward-1460,
    /// tcp-forward-1460, rps.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "null,udp-local-1b,udp-local-1b-nf1,smoltcp-udp-1b"
    )]
    pub(crate) scenario: Vec<String>,
    /// Batch modes to compare.
    #[arg(long, value_delimiter = ',', default_value = "packet,list")]
    pub(crate) modes: Vec<Mode>,
    /// Dispatch strategies to compare.
    #[arg(long, value_delimiter = ',', default_value = "runs,buckets")]
    pub(crate) dispatch: Vec<Dispatch>,
    /// GRO modes of the receiving port (udp-forward-1460, tcp-forward-1460).
    #[arg(long, value_delimiter = ',', default_value = "off,standard,fraglist")]
    pub(crate) gro: Vec<gro::GroMode>,
    /// Worker threads (udp-local-1b, ip4-forward: each worker its own receive queue).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub(crate) workers: Vec<usize>,
    /// RPS policies (the rps scenario: two workers, worker 0 receives).
    #[arg(long, value_delimiter = ',', default_value = "backlog,direct,deferred")]
    pub(crate) rps_policy: Vec<netbatch_runtime::rps::RpsPolicy>,
    /// Offered load of the rps scenario in Mpps (default: as fast as the generator
    /// goes); latency is meaningful below the saturation rate.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Frames per run (fixed count: repeatable under instruction counters).
    #[arg(long, conflicts_with = "seconds")]
    pub(crate) packets: Option<u64>,
    /// Seconds per run (used when --packets is not given).
    #[arg(long, default_value_t = 0.5)]
    pub(crate) seconds: f64,
    /// Repetitions per variant, alternating between variants.
    #[arg(long, default_value_t = 5)]
    pub(crate) repeat: u32,
    /// Frames per poll (the NAPI weight).
    #[arg(long, default_value_t = 64)]
    pub(crate) burst: usize,
    /// Generator flow order: bursty, bursty:N or interleaved.
    #[arg(long, default_value = "bursty")]
    pub(crate) flow_order: FlowOrder,
    /// Routes in the FIB of the forwarding scenarios (up to 1,000,000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) routes: u32,
    /// FORWARD rules, none matching, in udp-forward-1460 and tcp-forward-1460 (a
    /// heavier per-packet path, as a firewall makes it).
    #[arg(long, default_value_t = 0)]
    pub(crate) fwd_rules: usize,
    /// Ingress classifier filters in udp-local-1b-flower, over 8 masks, none matching
    /// (the seed's experiment has 16).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(8..=1_000_000))]
    pub(crate) filters: u32,
    /// In udp-forward-1460 and tcp-forward-1460, the output port takes super-packets
    /// whole (tx-tcp-segmentation, tx-udp-segmentation, tx-gso-list), as a NIC with TSO.
    #[arg(long)]
    pub(crate) tx_offload: bool,
    /// Skip the per-stage timing pass.
    #[arg(long)]
    pub(crate) no_profile: bool,
    /// Write results as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    packets: u64,
    secs: f64,
    ticks: u64,
}

impl Sample {
    /// Throughput in millions of packets per second.
    fn mpps(&self) -> f64 {
        self.packets as f64 / self.secs / 1e6
    }

    /// Wall-clock nanoseconds per packet.
    fn ns_per_packet(&self) -> f64 {
        self.secs * 1e9 / self.packets as f64
    }

    /// TSC cycles per packet.
    fn cycles_per_packet(&self) -> f64 {
        self.ticks as f64 / self.packets as f64
    }
}

struct Entry {
    v: Variant,
    bench: Box<dyn scenarios::Bench>,
    samples: Vec<Sample>,
    stages: Vec<NodeSnapshot>,
}

impl Entry {
    /// The median of `f` over the samples (0 without samples).
    fn median(&self, f: fn(&Sample) -> f64) -> f64 {
        median(self.samples.iter().map(f).collect())
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn run_for(b: &mut dyn scenarios::Bench, clock: &quanta::Clock, args: &Args) -> Sample {
    let chunk = 1 << 16;
    b.start();
    let t0 = Instant::now();
    let r0 = clock.raw();
    let mut packets = 0u64;
    match args.packets {
        Some(n) => packets = b.run(n),
        None => {
            while t0.elapsed().as_secs_f64() < args.seconds {
                packets += b.run(chunk);
            }
        }
    }
    let ticks = clock.raw().wrapping_sub(r0);
    let secs = t0.elapsed().as_secs_f64();
    b.pause();
    Sample {
        packets,
        secs,
        ticks,
    }
}

/// Runs `netbatch bench`.
pub(crate) fn main(args: &Args) -> anyhow::Result<()> {
    let common = Common {
        burst: args.burst.clamp(1, netbatch_engine::LIST_MAX),
        flow_order: args.flow_order,
        routes: args.routes as usize,
        fwd_rules: args.fwd_rules,
        filters: args.filters as usize,
        tx_offload: args.tx_offload,
        rate_pps: args.rate.map(|r| (r * 1e6) as u64),
    };
    let mut entries = Vec::new();
    for s in &args.scenario {
        let axes = scenarios::Axes {
            modes: &args.modes,
            dispatch: &args.dispatch,
            gro: &args.gro,
            workers: &args.workers,
            rps: &args.rps_policy,
        };
        for v in scenarios::variants(s, &axes)? {
            let bench = scenarios::build_variant(&v, &common)
                .with_context(|| format!("building {}", v.scenario))?;
            entries.push(Entry {
                v,
                bench,
                samples: Vec::new(),
                stages: Vec::new(),
            });
        }
    }
    let clock = netbatch_engine::time::clock();
    let tsc_hz = netbatch_engine::time::tsc_hz(50);
    eprintln!(
        "netbatch bench: {} variants, {} repetitions, {} per run, TSC {:.3} GHz",
        entries.len(),
        args.repeat,
        args.packets
            .map_or(format!("{} s", args.seconds), |n| format!("{n} frames")),
        tsc_hz / 1e9
    );
    // Warm-up: caches, branch predictors, socket queues at steady state.
    for e in &mut entries {
        e.bench.start();
        e.bench.run(args.packets.unwrap_or(200_000).min(200_000));
        e.bench.pause();
    }
    for rep in 0..args.repeat {
        for e in &mut entries {
            let s = run_for(e.bench.as_mut(), &clock, args);
            e.samples.push(s);
            eprintln!(
                "  rep {} {:<18} {:<6} {:<7} {:<8} w{} {:<8} {:>8.3} Mpps",
                rep + 1,
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.gro_name(),
                e.v.workers,
                e.v.rps_name(),
                s.mpps()
            );
        }
    }
    if !args.no_profile {
        for e in &mut entries {
            e.bench.reset();
            e.bench.set_timing(true);
            e.bench.start();
            e.bench
                .run(args.packets.unwrap_or(1_000_000).min(1_000_000));
            e.bench.pause();
            e.bench.set_timing(false);
            e.stages = e.bench.stages();
        }
    }
    let mut failures = Vec::new();
    for e in &entries {
        if let Err(err) = e.bench.verify() {
            failures.push(format!(
                "{} {} {} gro {} workers {} rps {}: {err:#}",
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.gro_name(),
                e.v.workers,
                e.v.rps_name()
            ));
        }
    }
    let results: Vec<Value> = entries.iter().map(|e| result_json(e, tsc_hz)).collect();
    print!("{}", table(&entries));
    if let Some(path) = &args.json {
        let doc = json!({
            "tool": "netbatch bench",
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "tsc_hz": tsc_hz,
            "burst": common.burst,
            "flow_order": format!("{:?}", common.flow_order),
            "routes": common.routes,
            "fwd_rules": common.fwd_rules,
            "tx_offload": common.tx_offload,
            "rate_mpps": args.rate,
            "repeat": args.repeat,
            "results": results,
            "failures": failures,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !failures.is_empty() {
        anyhow::bail!("verification failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

fn result_json(e: &Entry, tsc_hz: f64) -> Value {
    let stages: Vec<Value> = e
        .stages
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "packets": n.packets,
                "calls": n.calls,
                "packets_per_call": n.packets_per_call(),
                "cycles_per_packet": n.cycles_per_packet(),
                "drops": n.drops.iter().map(|(r, c)| (r.name().to_string(), json!(c))).collect::<serde_json::Map<_, _>>(),
                "events": n.events.iter().map(|(k, c)| (k.to_string(), json!(c))).collect::<serde_json::Map<_, _>>(),

            })
        })
        .collect();
    let extra: serde_json::Map<String, Value> = e
        .bench
        .extra()
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    let mut r = json!({
        "scenario": e.v.scenario,
        "mode": e.v.mode_name(),
        "dispatch": e.v.dispatch_name(),
        "gro": e.v.gro_name(),
        "workers": e.v.workers,
        "rps_policy": e.v.rps_name(),
        "packets": e.samples.first().map_or(0, |s| s.packets),
        "mpps": e.median(Sample::mpps),
        "ns_per_packet": e.median(Sample::ns_per_packet),
        "cycles_per_packet": e.median(Sample::cycles_per_packet),
        "tsc_hz": tsc_hz,
        "samples_mpps": e.samples.iter().map(Sample::mpps).collect::<Vec<_>>(),
        "stages": stages,
        "extra": extra,
    });
    if let Some(m) = r.as_object_mut() {
        for (k, v) in e.bench.top() {
            m.insert(k.to_string(), v);
        }
    }
    r
}

fn table(entries: &[Entry]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<18} {:<6} {:<8} {:<8} {:>2} {:<8} {:>9} {:>9} {:>10} {:>12}",
        "scenario",
        "mode",
        "dispatch",
        "gro",
        "w",
        "rps",
        "Mpps",
        "ns/pkt",
        "cycles/pkt",
        "list/packet"
    );
    for e in entries {
        let ratio = if e.v.mode == Some(Mode::List) {
            entries
                .iter()
                .find(|o| {
                    o.v.scenario == e.v.scenario
                        && o.v.dispatch == e.v.dispatch
                        && o.v.gro == e.v.gro
                        && o.v.workers == e.v.workers
                        && o.v.rps == e.v.rps
                        && o.v.mode == Some(Mode::Packet)
                })
                .map(|o| format!("{:.2}x", e.median(Sample::mpps) / o.median(Sample::mpps)))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "{:<18} {:<6} {:<8} {:<8} {:>2} {:<8} {:>9.3} {:>9.1} {:>10.1} {:>12}",
            e.v.scenario,
            e.v.mode_name(),
            e.v.dispatch_name(),
            e.v.gro_name(),
            e.v.workers,
            e.v.rps_name(),
            e.median(Sample::mpps),
            e.median(Sample::ns_per_packet),
            e.median(Sample::cycles_per_packet),
            ratio
        );
    }
    // GRO against no GRO, same scenario, mode and dispatch (the fraglist seed's ratios).
    for e in entries
        .iter()
        .filter(|e| e.v.gro.is_some_and(|g| g != gro::GroMode::Off))
    {
        if let Some(off) = entries.iter().find(|o| {
            o.v.scenario == e.v.scenario
                && o.v.mode == e.v.mode
                && o.v.dispatch == e.v.dispatch
                && o.v.gro == Some(gro::GroMode::Off)
        }) {
            let _ = writeln!(
                s,
                "{} {} {}: {}/off {:.2}x",
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.gro_name(),
                e.median(Sample::mpps) / off.median(Sample::mpps)
            );
        }
    }
    // Several workers against one, same scenario, mode and dispatch.
    for e in entries
        .iter()
        .filter(|e| e.v.workers > 1 && e.v.rps.is_none())
    {
        if let Some(one) = entries.iter().find(|o| {
            o.v.scenario == e.v.scenario
                && o.v.mode == e.v.mode
                && o.v.dispatch == e.v.dispatch
                && o.v.workers == 1
        }) {
            let _ = writeln!(
                s,
                "{} {} {}: {} workers / 1 = {:.2}x",
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.workers,
                e.median(Sample::mpps) / one.median(Sample::mpps)
            );
        }
    }
    // RPS: wake-ups, backlog polls and latency per policy.
    for e in entries.iter().filter(|e| e.v.rps.is_some()) {
        let top: serde_json::Map<String, Value> = e
            .bench
            .top()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let _ = writeln!(
            s,
            "rps {} {} {}: wakeups {} backlog_polls {} reordered {} latency {}",
            e.v.mode_name(),
            e.v.dispatch_name(),
            e.v.rps_name(),
            top.get("wakeups").cloned().unwrap_or_default(),
            top.get("backlog_polls").cloned().unwrap_or_default(),
            top.get("reordered").cloned().unwrap_or_default(),
            top.get("latency_ns").cloned().unwrap_or_default(),
        );
    }
    // netbatch vs smoltcp, same frames.
    if let Some(sm) = entries.iter().find(|e| e.v.scenario == "smoltcp-udp-1b") {
        for e in entries.iter().filter(|e| e.v.scenario == "udp-local-1b") {
            let _ = writeln!(
                s,
                "udp-local-1b {} {} / smoltcp-udp-1b: {:.2}x",
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.median(Sample::mpps) / sm.median(Sample::mpps)
            );
        }
    }
    s
}
