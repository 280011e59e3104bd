//! `netbatch bench`: the seeds' experiments side by side in one process.
//!
//! Every variant (scenario × mode × dispatch) is built once and warmed up; then the
//! variants run in turn, repetition after repetition (alternating, so slow drifts of the
//! machine hit every variant alike). Each run receives a fixed number of frames
//! (`--packets`) or runs for a time (`--seconds`); throughput is timed with the TSC and
//! the OS clock. Each figure is reported as the median over the repetitions with its
//! spread (the slowest and fastest repetition; [`summary`]), as a table, as JSON
//! (`--json`) and as a picture (`--plot`, [`plot`]). Per-packet costs are in wall-clock
//! nanoseconds and in TSC ticks, which is what "cycles" means throughout: the TSC runs
//! at a fixed rate, not at the core's clock. A last pass per variant turns per-stage TSC
//! timing on (it costs two TSC reads per stage call, so it stays off while throughput is
//! measured) to fill in the per-stage cycle counts.

mod forward;
mod forward6;
mod gro;
mod plot;
mod scenarios;
mod seeds;
mod smol;
mod summary;
mod team;
mod vrf;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use netbatch_engine::{Dispatch, Mode, NodeSnapshot};
use netbatch_ports::generator::FlowOrder;
use serde_json::{Value, json};

use scenarios::{Common, Variant};
use summary::{Summary, list_packet_ratios};

/// `netbatch bench --help` after the options: what each scenario measures and what each
/// output column means.
const LONG_HELP: &str = "\
Scenarios (--scenario, comma-separated). Frames come from an in-memory generator and
are received on one core unless said otherwise; every figure includes the generator's
cost (the null row), as a NIC's DMA and driver loop are part of the kernel's figures.
  null                 the harness alone: generator straight to free, no datapath
                       (packet mode takes one frame per poll, list mode a burst)
  udp-local-1b         four streams of 1-byte UDP datagrams to four local sockets, read
                       in batches by a sink application (the seeds' listified-receive
                       experiment); --workers N: N threads, each its own receive queue
  udp-local-1b-nf1     udp-local-1b with one PREROUTING rule (UDP ports 9000-9100, drop)
  ct-forward           ip4-forward's 1024 flows through a FORWARD chain accepting only
                       ct state established (policy drop), the flows established first
  nat44-forward        ct-forward with source NAT (snat to 198.18.0.1) on every flow, each
                       flow's translation made before the run; ct-forward and
                       nat44-forward take --workers N: N threads, each its own receive
                       queue of its share of the flows, established in its own table
  nat44-offload        nat44-forward with the FORWARD rule offloading what it accepts
                       (offload = true, nftables' flow add @ft): after each flow's first
                       packet, ct-in forwards it (NAT, TTL, neighbour), skipping the hooks
  ct-setup             new connections: 65,536 UDP flows through a 4,096-entry table and a
                       FORWARD chain accepting ct state new (each packet a new connection)
                       that matches none of the streams: the cost of a hook and a rule
  udp-local-1b-flower  udp-local-1b behind an ingress classifier of --filters tc-flower
                       filters over 8 masks, none matching
  smoltcp-udp-1b       the same frames from the same buffers into smoltcp's Interface
                       with UDP sockets (no batch modes, no dispatch)
  ip4-forward          64-byte frames of 1024 flows routed by a FIB of --routes generated
                       prefixes, forwarded to four next hops; --workers as above
  ip4-forward-rules    ip4-forward with --policy-rules rules (ip rule) before the main
                       table, none matching, over source, mark, input port, destination,
                       TCP ports and TOS; reported beside ip4-forward in cycles per packet
  ip4-forward-vrf      ip4-forward through --vrfs VRFs (VLANs of gen0, one VRF each, the
                       same address in all) of --vrf-routes routes each, the flows spread
                       over every VRF; reports the resident memory a VRF costs
  ip4-forward-vrf1     the same configuration, every flow in one VRF; ip4-forward-vrf is
                       reported beside it in cycles per packet
  udp-forward-1460     one stream of 1460-byte UDP frames forwarded, with each --gro mode
                       (off, standard, fraglist) on the receiving port; Mpps counts frames
                       received
  tcp-forward-1460     the same with a TCP stream
  rps                  two worker threads: worker 0 receives 256 flows of 1-byte UDP and
                       RPS spreads them by flow hash (each --rps-policy); reports wake-ups,
                       backlog polls, reordered datagrams and latency (--rate)
  ip6-forward          78-byte IPv6 frames (74 + FCS) of 1024 UDP flows routed by a FIB of
                       generated IPv6 prefixes (mostly /48, many /32-/44, some /56-/64),
                       one variant per --fib6 size, forwarded to four next hops
  udp6-local-1b        udp-local-1b over IPv6: four 1-byte streams to four sockets on [::]
  udp6-forward-1460    udp-forward-1460 over IPv6, each --gro mode: IPv6 GRO merges
                       as IPv4's does (standard: payloads merged; fraglist: frames
                       chained), GSO splits again at the output port

Variants: each scenario runs in each --modes (packet: one packet at a time through every
stage; list: a list at a time) and --dispatch (runs: a stage's output cut into runs with
the same next stage, depth first, as Linux; buckets: grouped by next stage, breadth
first, as VPP), and each --gro, --workers, --rps-policy where it applies. After a
warm-up, variants take turns, one repetition each, --repeat times. At the end every
variant is checked (every frame delivered or forwarded, none unaccounted); a failed check
fails the command after the results are printed.

Output columns, one row per variant. Each figure is the median over the repetitions;
the min-max column after it gives its lowest and highest value in any repetition.
  scenario, mode,      the variant (\"-\": does not apply to the scenario); the gro,
  dispatch, gro, w,    w (worker threads) and rps columns are shown when some variant
  rps                  has them
  Mpps                 millions of frames received per second, by the wall clock
  ns/pkt               wall-clock nanoseconds per frame
  TSC cyc/pkt          TSC ticks per frame: the time-stamp counter ticks at a fixed rate
                       (printed at the start), not at the core's clock; time in TSC
                       units, not core cycles
  list/packet          list-mode Mpps / per-packet Mpps of the same variant otherwise
                       (ratio of the medians)
Under the table, the headline: udp-local-1b's list/packet ratio, the seeds' experiment
(1-byte UDP to local sockets, one core), beside the kernel series' own figure (5.07 ->
6.44 Mpps = 1.27x); then the other scenarios that repeat a seed's experiment beside its
figure, more ratios of medians (GRO mode / off, N workers / 1, udp-local-1b /
smoltcp-udp-1b) and the rps counters.

A run is flagged NOISY (a warning under the results, \"noisy\" in the JSON) when a
variant's repetitions spread more than 1.15x (fastest/slowest), or a variant that does
strictly more work ran faster than the one it adds to (udp-local-1b-nf1 or -flower
faster than udp-local-1b; anything faster than null). Its figures are then not to be
trusted: rerun when the machine is quiet, or compare instructions per packet
(scripts/instructions), which noise does not move.

--json FILE: every figure (medians as mpps, ns_per_packet, cycles_per_packet, each with
_min and _max; cycles are TSC ticks), each repetition's Mpps, per-stage counters.
--plot FILE.svg or FILE.png: throughput bars with min-max whiskers per variant, and the
list/packet ratios.";

/// Arguments of `netbatch bench`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Scenarios and output columns: see --help.",
    after_long_help = LONG_HELP
)]
pub(crate) struct Args {
    /// Scenarios to run (comma-separated): null, udp-local-1b, udp-local-1b-nf1,
    /// udp-local-1b-flower, smoltcp-udp-1b, ip4-forward, udp-forward-1460,
    /// tcp-forward-1460, rps, ip6-forward, udp6-local-1b, udp6-forward-1460.
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
    /// GRO modes of the receiving port (udp-forward-1460, tcp-forward-1460,
    /// udp6-forward-1460).
    #[arg(long, value_delimiter = ',', default_value = "off,standard,fraglist")]
    pub(crate) gro: Vec<gro::GroMode>,
    /// Worker threads (udp-local-1b, ip4-forward: each worker its own receive queue).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub(crate) workers: Vec<usize>,
    /// RPS policies (the rps scenario: two workers, worker 0 receives).
    #[arg(long, value_delimiter = ',', default_value = "backlog,direct,deferred")]
    pub(crate) rps_policy: Vec<netbatch_datapath::rps::RpsPolicy>,
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
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
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
    /// Routes in ip6-forward's FIB, one variant per size (comma-separated, up to
    /// 1,000,000): generated IPv6 prefixes.
    #[arg(long, value_delimiter = ',', default_value = "10000", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) fib6: Vec<u32>,
    /// Writes ip4-forward's generated routes (`ip4-forward.routes`: `PREFIX GATEWAY` per
    /// line) and one frame of each of its flows (`ip4-forward.pcap`) into this directory,
    /// for a peer router fed the same work (bench/peers.py), and runs nothing.
    #[arg(long, hide = true)]
    pub(crate) export_peer: Option<PathBuf>,
    /// Policy rules in ip4-forward-rules, before the main table, none matching (each
    /// looks up a numbered table of one route).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4000))]
    pub(crate) policy_rules: u32,
    /// VRFs in ip4-forward-vrf and ip4-forward-vrf1 (each a VLAN of gen0).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub(crate) vrfs: u32,
    /// Routes in each VRF's table in ip4-forward-vrf and ip4-forward-vrf1.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub(crate) vrf_routes: u32,
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
    /// Back the packet pools and the IPv4 FIB's 64 MiB first level with huge pages
    /// (transparent huge pages, asked for with madvise; hugetlbfs pages for the pools
    /// where reserved). `off` runs on 4 KiB pages.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub(crate) huge_pages: String,
    /// Skip the per-stage timing pass.
    #[arg(long)]
    pub(crate) no_profile: bool,
    /// Write results as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Draw the results into this file, SVG or PNG by its extension: each variant's
    /// throughput (median, min-max whiskers) and the list/packet ratios.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub(crate) plot: Option<PathBuf>,
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
    /// The median and spread of every figure over the repetitions.
    fn summary(&self) -> Summary {
        let reps: Vec<(f64, f64, f64)> = self
            .samples
            .iter()
            .map(|s| (s.mpps(), s.ns_per_packet(), s.cycles_per_packet()))
            .collect();
        Summary::new(self.v.clone(), &reps)
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
    if let Some(dir) = &args.export_peer {
        return forward::export_peer(dir, args.routes as usize);
    }
    // A bad --plot must not cost a whole run to find out.
    if let Some(path) = &args.plot {
        plot::format_of(path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            anyhow::bail!(
                "--plot {}: directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
    }
    let common = Common {
        burst: args.burst.clamp(1, netbatch_engine::LIST_MAX),
        flow_order: args.flow_order,
        routes: args.routes as usize,
        vrfs: args.vrfs as usize,
        vrf_routes: args.vrf_routes as usize,
        fwd_rules: args.fwd_rules,
        policy_rules: args.policy_rules as usize,
        filters: args.filters as usize,
        tx_offload: args.tx_offload,
        rate_pps: args.rate.map(|r| (r * 1e6) as u64),
    };
    // Before any pool or table is built: they follow the switch.
    netbatch_engine::set_huge_tables(args.huge_pages == "on");
    let mut entries = Vec::new();
    let fib6: Vec<usize> = args.fib6.iter().map(|&n| n as usize).collect();
    for s in &args.scenario {
        let axes = scenarios::Axes {
            modes: &args.modes,
            dispatch: &args.dispatch,
            gro: &args.gro,
            workers: &args.workers,
            rps: &args.rps_policy,
            fib6: &fib6,
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
        "netbatch bench: {} variants, {} repetitions, {} per run, TSC {:.3} GHz, huge pages {}",
        entries.len(),
        args.repeat,
        per_run(args),
        tsc_hz / 1e9,
        args.huge_pages
    );
    let backings = scenarios::pool_backings();
    if !backings.is_empty() {
        let names: Vec<String> = backings.iter().map(ToString::to_string).collect();
        eprintln!("  packet pools on {}", names.join(", "));
    }
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
                "  rep {} {:<18} {:<6} {:<7} {:<8} w{} {:<8} {:>7} {:>8.3} Mpps",
                rep + 1,
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.gro_name(),
                e.v.workers,
                e.v.rps_name(),
                e.v.fib_name(),
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
                "{} {} {} gro {} workers {} rps {} fib {}: {err:#}",
                e.v.scenario,
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.gro_name(),
                e.v.workers,
                e.v.rps_name(),
                e.v.fib_name()
            ));
        }
    }
    let summaries: Vec<Summary> = entries.iter().map(Entry::summary).collect();
    let results: Vec<Value> = entries
        .iter()
        .zip(&summaries)
        .map(|(e, sum)| result_json(e, sum, tsc_hz))
        .collect();
    print!("{}", table(&entries, &summaries, tsc_hz));
    let command = command_line();
    if let Some(path) = &args.json {
        let doc = json!({
            "tool": "netbatch bench",
            "command": command,
            "tsc_hz": tsc_hz,
            "cycles": "every cycles_per_packet is TSC ticks per packet (tsc_hz ticks per second), not core clock cycles",
            "summary": "mpps, ns_per_packet, cycles_per_packet: median over the repetitions; _min and _max: the extremes",
            "burst": common.burst,
            "flow_order": format!("{:?}", common.flow_order),
            "routes": common.routes,
            "fib6": fib6,
            "fwd_rules": common.fwd_rules,
            "policy_rules": common.policy_rules,
            "tx_offload": common.tx_offload,
            "rate_mpps": args.rate,
            "repeat": args.repeat,
            "headline": {
                "scenario": seeds::HEADLINE,
                "what": "list-mode Mpps over per-packet Mpps of the seeds' experiment (1-byte UDP to local sockets, one core)",
                "seed_ratio": seeds::list_seed(seeds::HEADLINE).map(seeds::Seed::ratio),
                "seed": seeds::list_seed(seeds::HEADLINE).map(|x| x.what),
            },
            "noisy": seeds::noise(&summaries),
            "results": results,
            "failures": failures,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        let heading = plot::Heading {
            title: "netbatch bench".to_string(),
            lines: vec![
                command,
                format!(
                    "{} repetitions of {} per variant, variants alternating; burst {}; TSC {:.3} GHz",
                    args.repeat,
                    per_run(args),
                    common.burst,
                    tsc_hz / 1e9
                ),
            ],
        };
        plot::plot(path, &summaries, &heading)?;
        eprintln!("netbatch bench: plot written to {}", path.display());
    }
    if !failures.is_empty() {
        anyhow::bail!("verification failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// What one run is: a time or a frame count.
fn per_run(args: &Args) -> String {
    args.packets
        .map_or(format!("{} s", args.seconds), |n| format!("{n} frames"))
}

/// The command line, the program named by its file name.
fn command_line() -> String {
    let mut argv: Vec<String> = std::env::args().collect();
    if let Some(first) = argv.first_mut()
        && let Some(name) = std::path::Path::new(first.as_str()).file_name()
    {
        *first = name.to_string_lossy().into_owned();
    }
    argv.join(" ")
}

fn result_json(e: &Entry, sum: &Summary, tsc_hz: f64) -> Value {
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
        "fib_routes": e.v.fib,
        "packets": e.samples.first().map_or(0, |s| s.packets),
        "tsc_hz": tsc_hz,
        "samples_mpps": e.samples.iter().map(Sample::mpps).collect::<Vec<_>>(),
        "stages": stages,
        "extra": extra,
    });
    if let Some(m) = r.as_object_mut() {
        for (k, v) in sum.json_fields() {
            m.insert(k.to_string(), v);
        }
        for (k, v) in e.bench.top() {
            m.insert(k.to_string(), v);
        }
    }
    r
}

/// Lays out `rows` under `header` in columns as wide as their widest cell; columns
/// whose `right` is set are right-aligned (numbers), the others left-aligned.
fn columns(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for r in std::iter::once(&head).chain(rows) {
        let mut line = String::new();
        for (k, c) in r.iter().enumerate() {
            let w = width[k];
            if k > 0 {
                line.push_str("  ");
            }
            if right[k] {
                let _ = write!(line, "{c:>w$}");
            } else {
                let _ = write!(line, "{c:<w$}");
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// The results table: one row per variant with its medians and spreads, and what the
/// columns mean.
fn summary_table(rows: &[Summary], tsc_hz: f64) -> String {
    let show_gro = rows.iter().any(|r| r.v.gro.is_some());
    let show_workers = rows.iter().any(|r| r.v.workers > 1);
    let show_rps = rows.iter().any(|r| r.v.rps.is_some());
    let show_fib = rows.iter().any(|r| r.v.fib.is_some());
    let mut header = vec!["scenario", "mode", "dispatch"];
    let mut right = vec![false; 3];
    for (shown, name, r) in [
        (show_gro, "gro", false),
        (show_workers, "w", true),
        (show_rps, "rps", false),
        (show_fib, "fib", true),
    ] {
        if shown {
            header.push(name);
            right.push(r);
        }
    }
    header.extend([
        "Mpps",
        "min–max",
        "ns/pkt",
        "min–max",
        "TSC cyc/pkt",
        "min–max",
        "list/packet",
    ]);
    right.extend([true, false, true, false, true, false, true]);
    let ratios = list_packet_ratios(rows);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut c = vec![
                r.v.scenario.clone(),
                r.v.mode_name().to_string(),
                r.v.dispatch_name().to_string(),
            ];
            if show_gro {
                c.push(r.v.gro.map_or("-", gro::GroMode::name).to_string());
            }
            if show_workers {
                c.push(r.v.workers.to_string());
            }
            if show_rps {
                c.push(r.v.rps_name().to_string());
            }
            if show_fib {
                c.push(r.v.fib_name());
            }
            let ratio = ratios
                .iter()
                .find(|q| q.list == i)
                .map(|q| format!("{:.2}x", q.spread.median))
                .unwrap_or_default();
            c.extend([
                format!("{:.3}", r.mpps.median),
                r.mpps.range_text(3),
                format!("{:.1}", r.ns.median),
                r.ns.range_text(1),
                format!("{:.1}", r.tsc.median),
                r.tsc.range_text(1),
                ratio,
            ]);
            c
        })
        .collect();
    let mut s = String::from("\n");
    s.push_str(&columns(&header, &right, &cells));
    let runs = rows.iter().map(|r| r.runs).max().unwrap_or(0);
    let _ = writeln!(
        s,
        "\nEach figure: median of {runs} repetitions; min–max: its lowest and highest value \
         in any repetition.\nTSC cyc/pkt: TSC ticks per packet, at {:.3} GHz (a fixed-rate \
         clock, not core cycles).\nlist/packet: list-mode Mpps over per-packet Mpps (medians).",
        tsc_hz / 1e9
    );
    s
}

/// The results table, the headline (the seeds' experiment beside the seed's figure),
/// ratios between variants and the rps counters, and a warning when the run was noisy.
fn table(entries: &[Entry], rows: &[Summary], tsc_hz: f64) -> String {
    let mut s = summary_table(rows, tsc_hz);
    s.push_str(&seeds::headline(rows));
    s.push('\n');
    let mpps = |i: usize| rows[i].mpps.median;
    // GRO against no GRO, same scenario, mode and dispatch (the fraglist seed's ratios).
    for (i, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.v.gro.is_some_and(|g| g != gro::GroMode::Off))
    {
        if let Some(off) = entries.iter().position(|o| {
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
                mpps(i) / mpps(off)
            );
        }
    }
    // Several workers against one, same scenario, mode and dispatch.
    for (i, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.v.workers > 1 && e.v.rps.is_none())
    {
        if let Some(one) = entries.iter().position(|o| {
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
                mpps(i) / mpps(one)
            );
        }
    }
    // IPv6 forwarding against IPv4 forwarding (same mode and dispatch), and each FIB
    // size against the smallest: the ratios of TSC cycles per packet the targets name.
    let tsc = |i: usize| rows[i].tsc.median;
    for (i, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.v.scenario == "ip6-forward")
    {
        let same = |o: &Entry| o.v.mode == e.v.mode && o.v.dispatch == e.v.dispatch;
        if let Some(v4) = entries
            .iter()
            .position(|o| o.v.scenario == "ip4-forward" && o.v.workers == 1 && same(o))
        {
            let _ = writeln!(
                s,
                "ip6-forward {} {} {} routes / ip4-forward: {:.2}x cycles per packet",
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.fib_name(),
                tsc(i) / tsc(v4)
            );
        }
        let smallest = entries
            .iter()
            .enumerate()
            .filter(|(_, o)| o.v.scenario == "ip6-forward" && same(o))
            .min_by_key(|(_, o)| o.v.fib)
            .map(|(k, _)| k);
        if let Some(k) = smallest.filter(|&k| entries[k].v.fib != e.v.fib) {
            let _ = writeln!(
                s,
                "ip6-forward {} {}: {} / {} routes = {:.2}x cycles per packet",
                e.v.mode_name(),
                e.v.dispatch_name(),
                e.v.fib_name(),
                entries[k].v.fib_name(),
                tsc(i) / tsc(k)
            );
        }
    }
    // Policy rules against the plain table, same mode, dispatch and workers.
    for (i, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.v.scenario == "ip4-forward-rules")
    {
        if let Some(k) = entries.iter().position(|o| {
            o.v.scenario == "ip4-forward"
                && (o.v.mode, o.v.dispatch, o.v.workers) == (e.v.mode, e.v.dispatch, e.v.workers)
        }) {
            let _ = writeln!(
                s,
                "ip4-forward-rules {} {} / ip4-forward: {:.2}x cycles per packet (--policy-rules before main)",
                e.v.mode_name(),
                e.v.dispatch_name(),
                tsc(i) / tsc(k),
            );
        }
    }
    // Lookups over many VRFs against lookups in one (same mode and dispatch, the same
    // configuration): the ratio of TSC cycles per packet the target names.
    for (i, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.v.scenario == "ip4-forward-vrf")
    {
        let same = |o: &Entry| o.v.mode == e.v.mode && o.v.dispatch == e.v.dispatch;
        if let Some(one) = entries
            .iter()
            .position(|o| o.v.scenario == "ip4-forward-vrf1" && same(o))
        {
            let _ = writeln!(
                s,
                "ip4-forward-vrf {} {}: every VRF / one VRF = {:.2}x cycles per packet",
                e.v.mode_name(),
                e.v.dispatch_name(),
                tsc(i) / tsc(one)
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
    if let Some(sm) = entries
        .iter()
        .position(|e| e.v.scenario == "smoltcp-udp-1b")
    {
        for (i, e) in entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.v.scenario == "udp-local-1b")
        {
            let _ = writeln!(
                s,
                "udp-local-1b {} {} / smoltcp-udp-1b: {:.2}x",
                e.v.mode_name(),
                e.v.dispatch_name(),
                mpps(i) / mpps(sm)
            );
        }
    }
    s.push_str(&seeds::warning(&seeds::noise(rows)));
    s
}

#[cfg(test)]
mod tests {
    use super::summary::tests::variant;
    use super::*;

    /// Hand-made: packet at 4, 5, 6 Mpps and list at 19, 20, 22; per-packet costs from
    /// the rates (1000/Mpps ns, 2.5 TSC ticks per ns). The list row must show its median
    /// 20.000 with 19.000–22.000, its cost 50.0 (45.5–52.6) and 125.0 TSC ticks
    /// (113.6–131.6), and 20 / 5 = 4.00x; the header names TSC cycles.
    #[test]
    fn table_rows_show_median_spread_and_ratio() {
        let row = |mode, reps: &[f64]| {
            let r: Vec<(f64, f64, f64)> = reps.iter().map(|&m| (m, 1e3 / m, 2.5e3 / m)).collect();
            Summary::new(
                variant("udp-local-1b", Some(mode), Some(Dispatch::Runs)),
                &r,
            )
        };
        let rows = vec![
            row(Mode::Packet, &[6.0, 4.0, 5.0]),
            row(Mode::List, &[20.0, 22.0, 19.0]),
        ];
        let t = summary_table(&rows, 2.5e9);
        let lines: Vec<&str> = t.lines().filter(|l| !l.is_empty()).collect();
        let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert!(lines[0].contains("TSC cyc/pkt"), "{t}");
        assert!(
            !lines[0].contains(" gro "),
            "no GRO column without GRO variants: {t}"
        );
        assert_eq!(
            words(lines[2]),
            [
                "udp-local-1b",
                "list",
                "runs",
                "20.000",
                "19.000–22.000",
                "50.0",
                "45.5–52.6",
                "125.0",
                "113.6–131.6",
                "4.00x"
            ],
            "{t}"
        );
        assert_eq!(words(lines[1]).len(), 9, "no ratio on the packet row: {t}");
        assert!(
            t.contains("median of 3 repetitions") && t.contains("2.500 GHz"),
            "{t}"
        );
    }
}
