//! Scenarios on several worker threads: `rps` (worker 0 receives, RPS spreads the flows
//! over two workers) and the `--workers N` variants of `udp-local-1b` and `ip4-forward`
//! (each worker has its own receive queue, as with a multi-queue NIC and RSS).
//!
//! A run starts the workers on their threads, lets the generators produce the frames
//! (`--packets` split over the receive queues), waits until all were received, then
//! stops the workers, which process what is still in flight before they return.

use core::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use netbatch_datapath::Worker;
use netbatch_datapath::rps::{Fabric, RpsParams, RpsPolicy};
use netbatch_datapath::threads::{Datapath, RunParams};
use netbatch_engine::{Dispatch, NodeSnapshot, Pool};
use netbatch_ports::Port;
use netbatch_ports::generator::{FlowSpec, GenConfig, GenPort, L4};
use netbatch_runtime::build::{self, Builder};
use netbatch_runtime::config::Config;
use netbatch_stack::route::Routes;
use serde_json::{Value, json};

use super::scenarios::{
    Bench, Common, DUT_ADDR, DUT_MAC, Expect, PEER_MAC, UDP_PORTS, Variant, config, port, sink,
};

/// Workers on threads.
pub(crate) struct TeamBench {
    workers: Vec<Worker>,
    fabric: Arc<Fabric>,
    received: Arc<AtomicU64>,
    /// (worker, port) of every generator that receives.
    inputs: Vec<(usize, usize)>,
    expect: Expect,
    policy: Option<RpsPolicy>,
    run: RunParams,
    clock: quanta::Clock,
    running: Option<Datapath>,
    rate_pps: Option<u64>,
}

impl TeamBench {
    fn sum_app(&self, key: &str) -> u64 {
        self.workers
            .iter()
            .flat_map(|w| w.apps.iter().flat_map(|a| a.counters()))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .sum()
    }

    fn softnet(&self) -> Vec<netbatch_datapath::rps::SoftnetStats> {
        self.workers
            .iter()
            .map(|w| w.steer.as_ref().map(|s| s.stats).unwrap_or_default())
            .collect()
    }

    /// Latency quantiles in ns over every sink (generator timestamp to reading).
    fn latency_ns(&self) -> Option<[f64; 3]> {
        let mut all = netbatch_datapath::latency::Histogram::new();
        for w in &self.workers {
            for a in &w.apps {
                if let Some(h) = a.latency() {
                    all.merge(h);
                }
            }
        }
        if all.count() == 0 {
            return None;
        }
        let ns = |q: f64| self.clock.delta_as_nanos(0, all.quantile(q)) as f64;
        Some([ns(0.5), ns(0.99), ns(0.999)])
    }
}

impl Bench for TeamBench {
    fn start(&mut self) {
        if self.running.is_some() {
            return;
        }
        // The generators run freely while the workers do (at the offered rate, if one
        // is set, paced from now).
        let rate = self.rate_pps;
        for &(w, p) in &self.inputs {
            if let Some(g) = self.workers[w].ports[p]
                .as_any_mut()
                .downcast_mut::<GenPort>()
            {
                g.set_limit(None);
                g.set_rate(rate);
            }
        }
        // Latency is measured over this stretch only.
        for w in &mut self.workers {
            for a in &mut w.apps {
                a.clear_latency();
            }
        }
        let workers = core::mem::take(&mut self.workers);
        match Datapath::start(workers, self.fabric.clone(), &self.run) {
            Ok(d) => self.running = Some(d),
            Err(e) => panic!("starting the workers: {e}"),
        }
    }

    fn pause(&mut self) {
        let Some(dp) = self.running.take() else {
            return;
        };
        self.workers = dp.stop();
        // The applications read what the stopped workers left in the sockets, so that
        // nothing waits there into the next measurement.
        let sockets = self.workers[0].host.sockets.clone();
        for _ in 0..10_000 {
            if sockets.held() == 0 {
                break;
            }
            let now = netbatch_engine::time::mono_ns();
            for w in &mut self.workers {
                w.poll_drain(now);
            }
        }
        for &(w, p) in &self.inputs {
            if let Some(g) = self.workers[w].ports[p]
                .as_any_mut()
                .downcast_mut::<GenPort>()
            {
                g.set_limit(Some(0));
            }
        }
    }

    fn run(&mut self, n: u64) -> u64 {
        let before = self.received.load(Ordering::Relaxed);
        let target = before + n;
        let t0 = std::time::Instant::now();
        while self.received.load(Ordering::Relaxed) < target && t0.elapsed().as_secs() < 120 {
            // This thread takes a core from the workers each time it wakes: rarely.
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        self.received.load(Ordering::Relaxed) - before
    }

    fn stages(&self) -> Vec<NodeSnapshot> {
        // One row per stage, summed over the workers.
        let mut out: Vec<NodeSnapshot> = Vec::new();
        for w in &self.workers {
            for s in w.snapshot() {
                match out.iter_mut().find(|o| o.name == s.name) {
                    Some(o) => {
                        o.packets += s.packets;
                        o.calls += s.calls;
                        o.cycles += s.cycles;
                        for (r, c) in s.drops {
                            match o.drops.iter_mut().find(|(x, _)| *x == r) {
                                Some(d) => d.1 += c,
                                None => o.drops.push((r, c)),
                            }
                        }
                    }
                    None => out.push(s),
                }
            }
        }
        out
    }

    fn set_timing(&mut self, on: bool) {
        for w in &mut self.workers {
            w.graph.set_timing(on);
        }
    }

    fn reset(&mut self) {
        for w in &mut self.workers {
            w.graph.reset_counters();
        }
    }

    fn verify(&self) -> anyhow::Result<()> {
        let mut a = netbatch_engine::Accounting::default();
        for w in &self.workers {
            a.add(&w.acct);
        }
        let own: u64 = self.workers.iter().map(Worker::held_own).sum();
        let sockets = self.workers[0].host.sockets.held();
        let held = own + sockets + a.in_flight();
        if a.rx + a.originated != a.tx + a.delivered + a.dropped + held {
            bail!("packets unaccounted: {a:?} held {held}");
        }
        // The generators are faster than any worker: with RPS a worker that falls
        // behind (or that the OS schedules away) fills its backlog, and the overflow is
        // dropped and counted, as in the kernel. Nothing else may be lost.
        let backlog_full: u64 = self.softnet().iter().map(|s| s.dropped).sum();
        if a.dropped != backlog_full {
            bail!(
                "{} frames dropped ({backlog_full} for full backlogs): {a:?}",
                a.dropped
            );
        }
        match self.expect {
            Expect::Delivered => {
                let got = self.sum_app("datagrams");
                if got + held + a.dropped != a.rx {
                    bail!("sinks got {got} of {} datagrams ({held} held)", a.rx);
                }
            }
            Expect::Forwarded => {
                if a.tx + held != a.rx {
                    bail!("forwarded {} of {} frames", a.tx, a.rx);
                }
            }
        }
        let reordered = self.sum_app("out_of_order");
        if reordered != 0 {
            bail!("{reordered} datagrams out of their flow's order");
        }
        Ok(())
    }

    fn extra(&self) -> Vec<(String, u64)> {
        let mut v = vec![("workers".to_string(), self.workers.len() as u64)];
        for (i, s) in self.softnet().iter().enumerate() {
            let w = &self.workers[i];
            v.push((format!("w{i}_processed"), w.stats.processed));
            v.push((format!("w{i}_time_squeeze"), w.stats.time_squeeze));
            v.push((format!("w{i}_rounds"), w.stats.rounds));
            v.push((format!("w{i}_received_rps"), s.received_rps));
            v.push((format!("w{i}_backlog_polls"), s.backlog_polls));
            v.push((format!("w{i}_handed_off"), s.handed_off));
            v.push((format!("w{i}_taken_over"), s.taken_over));
            v.push((format!("w{i}_backlog_dropped"), s.dropped));
            v.push((format!("w{i}_backlog_len"), s.backlog_len));
        }
        v.push(("sink_datagrams".into(), self.sum_app("datagrams")));
        v
    }

    fn top(&self) -> Vec<(&'static str, Value)> {
        let s = self.softnet();
        let rx: u64 = self.workers.iter().map(|w| w.acct.rx).sum();
        let per_k = |x: u64| {
            if rx == 0 {
                0.0
            } else {
                x as f64 * 1000.0 / rx as f64
            }
        };
        let mut v = vec![
            ("received", json!(rx)),
            (
                "wakeups_per_1000",
                json!(per_k(s.iter().map(|x| x.received_rps).sum())),
            ),
            (
                "backlog_polls_per_1000",
                json!(per_k(s.iter().map(|x| x.backlog_polls).sum())),
            ),
            ("workers", json!(self.workers.len())),
            (
                "rps_policy",
                json!(self.policy.map_or("off", RpsPolicy::name)),
            ),
            (
                "wakeups",
                json!(s.iter().map(|x| x.received_rps).sum::<u64>()),
            ),
            (
                "backlog_polls",
                json!(s.iter().map(|x| x.backlog_polls).sum::<u64>()),
            ),
            ("reordered", json!(self.sum_app("out_of_order"))),
            (
                "backlog_dropped",
                json!(s.iter().map(|x| x.dropped).sum::<u64>()),
            ),
        ];
        if let Some([p50, p99, p999]) = self.latency_ns() {
            v.push(("latency_ns", json!({"p50": p50, "p99": p99, "p999": p999})));
        }
        v
    }
}

/// Workers pinned to cores 0.., busy polling as a DPDK application does (a vCPU that
/// sleeps takes long to wake: hundreds of microseconds on this kind of machine).
fn busy_pinned(workers: usize) -> RunParams {
    RunParams {
        cores: (0..workers).collect(),
        idle_spin_ns: 1_000_000_000,
    }
}

/// `cfg` on `workers` busy-polling pinned workers, with a pool of `buffers` and a cache
/// of 512 buffers per worker; and that pool.
fn team_config(mut cfg: Config, workers: usize, buffers: u32) -> anyhow::Result<(Config, Pool)> {
    cfg.workers = workers;
    cfg.run = busy_pinned(workers);
    cfg.pool.buffers = buffers;
    cfg.pool.cache_size = 512;
    let pool = Pool::new(cfg.pool).context("packet pool")?;
    Ok((cfg, pool))
}

/// `n` UDP flows of `payload`-byte datagrams to our four sockets: sources 192.0.2.1..,
/// ports 40000...
fn udp_flows(n: usize, payload: usize) -> Vec<FlowSpec> {
    (0..n)
        .map(|i| FlowSpec {
            src_mac: PEER_MAC,
            dst_mac: DUT_MAC,
            vlan: None,
            src: Ipv4Addr::new(192, 0, 2, 1 + (i % 200) as u8).into(),
            dst: DUT_ADDR.into(),
            l4: L4::Udp,
            sport: 40000 + (i / 200) as u16,
            dport: UDP_PORTS[i % UDP_PORTS.len()],
            payload_len: payload,
            ttl: 64,
            dont_frag: true,
        })
        .collect()
}

fn generator(
    name: &str,
    index: u16,
    flows: Vec<FlowSpec>,
    c: &Common,
    timestamps: bool,
    room: usize,
) -> anyhow::Result<GenPort> {
    let cfg = GenConfig {
        limit: Some(0),
        timestamps,
        ..GenConfig::new(flows, c.flow_order)
    };
    Ok(GenPort::new(name, index, &cfg, room)?)
}

/// `rps`: worker 0 receives 256 flows of 1-byte UDP, RPS spreads them over two workers
/// by flow hash; a sink on each worker reads two of the four sockets and checks every
/// flow's order; latency is from the generator's timestamp to the sink.
pub(crate) fn build_rps(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    let policy = v.rps.unwrap_or(RpsPolicy::Deferred);
    build_local(v, c, 2, Some(policy))
}

/// `udp-local-1b` on `workers` workers: without RPS each has its own queue and its own
/// share of the flows; with RPS (`rps`) only worker 0 receives.
pub(crate) fn build_local(
    v: &Variant,
    c: &Common,
    workers: usize,
    rps: Option<RpsPolicy>,
) -> anyhow::Result<Box<dyn Bench>> {
    // Without RPS each worker receives from its own queue of gen0; with RPS only worker
    // 0 does, and RPS spreads gen0's packets over all of them.
    let mut gen0 = port("gen0", DUT_MAC, &format!("{DUT_ADDR}/24"))?;
    let all: Vec<u16> = (0..workers as u16).collect();
    if rps.is_some() {
        gen0.rps_map = all;
    } else {
        gen0.rx_workers = all;
    }
    let mut cfg = config(v, c, vec![gen0], Dispatch::Runs);
    cfg.rps = rps.map(|policy| RpsParams {
        policy,
        // Room for a few milliseconds of traffic: a worker thread that the OS
        // schedules away for a timeslice must not lose packets.
        max_backlog: 32_768,
        rfs_log: 0,
        ..RpsParams::default()
    });
    // Sockets: each is read by one sink (two per worker with RPS, the worker's own
    // flows' sockets without).
    cfg.apps = (0..workers)
        .map(|w| {
            let mine: Vec<u16> = UDP_PORTS
                .iter()
                .enumerate()
                .filter(|(i, _)| i % workers == w)
                .map(|(_, &p)| p)
                .collect();
            (w, mine)
        })
        .filter(|(_, mine)| !mine.is_empty())
        .map(|(w, mine)| sink(w, mine, 1 << 16, rps.is_some()))
        .collect();
    let (cfg, pool) = team_config(cfg, workers, 65_536)?;
    let room = pool.config().room();
    // With RPS: many flows, each datagram carrying its flow's full 8-byte sequence
    // number, so the sinks tell a reordered datagram from a lost one.
    let flows = if rps.is_some() {
        udp_flows(256, 8)
    } else {
        udp_flows(4, 1)
    };
    let received = Arc::new(AtomicU64::new(0));
    let mut err = None;
    let (workers_v, fabric) = build::datapath(&cfg, &pool, |w, p| {
        // Each worker's queue: with RPS only worker 0's generates; without, each worker
        // generates its own share of the flows.
        let mine: Vec<FlowSpec> = if rps.is_some() {
            flows.clone()
        } else {
            flows
                .iter()
                .enumerate()
                .filter(|(i, _)| i % workers == w)
                .map(|(_, f)| f.clone())
                .collect()
        };
        let mine = if mine.is_empty() { flows.clone() } else { mine };
        match generator("gen0", p as u16, mine, c, rps.is_some(), room) {
            Ok(mut g) => {
                if rps.is_some() {
                    g.set_rate(c.rate_pps);
                }
                Box::new(g.with_counter(received.clone())) as Box<dyn Port>
            }
            Err(e) => {
                err = Some(e);
                Box::new(netbatch_ports::mem::MemPort::new("gen0", p as u16, room)) as Box<dyn Port>
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let inputs = (0..workers)
        .filter(|&w| rps.is_none() || w == 0)
        .map(|w| (w, 0))
        .collect();
    Ok(Box::new(TeamBench {
        workers: workers_v,
        fabric,
        received,
        inputs,
        expect: Expect::Delivered,
        policy: rps,
        run: cfg.run.clone(),
        clock: netbatch_engine::time::clock(),
        running: None,
        rate_pps: c.rate_pps.filter(|_| rps.is_some()),
    }))
}

/// Prepares a team worker's state for its share of the flows (`ct-forward`,
/// `nat44-forward`: the share's connections established in its table), given the
/// pool's buffer count.
pub(crate) type InitWorker<'a> = dyn Fn(&[FlowSpec], &mut netbatch_stack::host::Host, usize) + 'a;

/// `ip4-forward` on `v.workers` workers (`cfg`, its route table `table`), each with its
/// own receive queue and its share of the 1024 `flows`, all forwarding through one FIB
/// (`init`: each worker's state for its share, before the run).
pub(crate) fn build_forward_team(
    v: &Variant,
    c: &Common,
    mut cfg: Config,
    table: Arc<Routes>,
    flows: Vec<FlowSpec>,
    init: Option<&InitWorker<'_>>,
) -> anyhow::Result<Box<dyn Bench>> {
    let workers = v.workers;
    cfg.ports[0].rx_workers = (0..workers as u16).collect();
    let (cfg, pool) = team_config(cfg, workers, 16_384)?;
    let room = pool.config().room();
    let received = Arc::new(AtomicU64::new(0));
    let mut err = None;
    let (workers_v, fabric) = Builder::new(&cfg).routes(table).datapath(&pool, |w, p| {
        let mine: Vec<FlowSpec> = flows
            .iter()
            .enumerate()
            .filter(|(i, _)| i % workers == w)
            .map(|(_, f)| f.clone())
            .collect();
        let name = if p == 0 { "gen0" } else { "gen1" };
        match generator(name, p as u16, mine, c, false, room) {
            Ok(g) if p == 0 => Box::new(g.with_counter(received.clone())) as Box<dyn Port>,
            Ok(g) => Box::new(g) as Box<dyn Port>,
            Err(e) => {
                err = Some(e);
                Box::new(netbatch_ports::mem::MemPort::new(name, p as u16, room)) as Box<dyn Port>
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let mut workers_v = workers_v;
    if let Some(init) = init {
        // Each worker's state for the flows its queue receives (`i % workers == w`).
        for (w, wk) in workers_v.iter_mut().enumerate() {
            let mine: Vec<FlowSpec> = flows
                .iter()
                .enumerate()
                .filter(|(i, _)| i % workers == w)
                .map(|(_, f)| f.clone())
                .collect();
            init(&mine, &mut wk.host, pool.config().buffers as usize);
        }
    }
    Ok(Box::new(TeamBench {
        workers: workers_v,
        fabric,
        received,
        inputs: (0..workers).map(|w| (w, 0)).collect(),
        expect: Expect::Forwarded,
        policy: None,
        run: cfg.run.clone(),
        clock: netbatch_engine::time::clock(),
        running: None,
        rate_pps: None,
    }))
}
