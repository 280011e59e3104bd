//! `netbatch replay`: every frame of a capture is received on one port at its timestamp,
//! everything transmitted on any port is written to a pcapng file, and the counters are
//! reported. The worker's clock is the capture's, so timers (ARP retries, rate limits)
//! behave the same on every run: the same input and configuration give the same output.

use std::path::Path;

use netbatch_engine::Pool;
use netbatch_ports::Port;
use netbatch_ports::mem::MemPort;
use netbatch_ports::pcap::{read_frames, write_pcapng};
use serde_json::{Map, Value, json};

use crate::Worker;
use crate::build::{self, BuildError};
use crate::config::Config;

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The capture could not be read or written.
    #[error(transparent)]
    Pcap(#[from] netbatch_ports::pcap::PcapError),
    /// The worker could not be assembled.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// `--port` names no configured port.
    #[error("no port named '{0}' in the configuration")]
    NoPort(String),
    /// Buffers were not all back in the pool after the stop (a bug).
    #[error("{0} packet buffers were not returned to the pool")]
    Leak(usize),
}

/// What a replay did.
#[derive(Debug)]
pub struct ReplayReport {
    /// The stats document (`--stats-json`).
    pub stats: Value,
    /// Frames written to the output.
    pub written: usize,
}

fn mem(w: &mut Worker, i: usize) -> &mut MemPort {
    w.ports[i]
        .as_any_mut()
        .downcast_mut::<MemPort>()
        .unwrap_or_else(|| unreachable!("replay builds mem ports"))
}

/// Replays `input` into the port named `port` (the first if `None`), writes `output`.
pub fn replay(
    cfg: &Config,
    input: &Path,
    output: &Path,
    port: Option<&str>,
) -> Result<ReplayReport, ReplayError> {
    let frames = read_frames(input)?;
    let rx = match port {
        None => 0,
        Some(name) => cfg
            .ports
            .iter()
            .position(|p| p.setup.name == name)
            .ok_or_else(|| ReplayError::NoPort(name.into()))?,
    };
    let pool = Pool::new(cfg.pool).map_err(BuildError::from)?;
    let room = pool.config().room();
    let ports: Vec<Box<dyn Port>> = cfg
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Box::new(MemPort::new(&p.setup.name, i as u16, room).with_features(p.setup.features))
                as Box<dyn Port>
        })
        .collect();
    // The one worker receives the capture on its port, whatever `rx_workers` says (a
    // port no worker receives from would never drain).
    let mut cfg = cfg.clone();
    cfg.ports[rx].rx_workers = vec![0];
    let mut w = build::worker(&cfg, ports, pool.clone())?;
    let mut now = frames.first().map_or(0, |f| f.ts_ns);
    for f in frames {
        mem(&mut w, rx).push_rx(f.ts_ns, f.bytes);
    }
    while let Some(t) = mem(&mut w, rx).next_rx_ts() {
        now = now.max(t);
        w.poll(now);
    }
    // One more round for what the last one queued (application sends, timer work).
    w.poll(now);
    let stats = stats(&w);
    let mut out = Vec::new();
    for i in 0..w.ports.len() {
        let name = w.ports[i].name().to_string();
        out.push((name, mem(&mut w, i).take_tx()));
    }
    let written = out.iter().map(|(_, f)| f.len()).sum();
    write_pcapng(output, &out)?;
    w.shutdown();
    let total = pool.config().buffers as usize;
    drop(w);
    if pool.free_in_pool() != total {
        return Err(ReplayError::Leak(total - pool.free_in_pool()));
    }
    Ok(ReplayReport { stats, written })
}

/// The counters of a worker as the stats document: fates (in wire packets), drops by
/// reason, per-stage counters, ports, host events, applications.
pub fn stats(w: &Worker) -> Value {
    let a = w.acct;
    let stages = w.snapshot();
    let by_reason = netbatch_engine::counters::drops_by_reason(&stages);
    let drops: Map<String, Value> = by_reason
        .iter()
        .map(|(r, n)| (r.name().to_string(), json!(n)))
        .collect();
    let reasons: Vec<Value> = by_reason
        .iter()
        .map(|(r, _)| json!({"name": r.name(), "description": r.description()}))
        .collect();
    let stage_list: Vec<Value> = stages
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "packets": s.packets,
                "calls": s.calls,
                "packets_per_call": s.packets_per_call(),
                "cycles_per_packet": s.cycles_per_packet(),
                "drops": s.drops.iter().map(|(r, n)| (r.name().to_string(), json!(n))).collect::<Map<_, _>>(),
                "events": s.events.iter().map(|(k, n)| (k.to_string(), json!(n))).collect::<Map<_, _>>(),
            })
        })
        .collect();
    let ports: Vec<Value> = w
        .port_stats()
        .into_iter()
        .map(|(name, p)| {
            json!({
                "name": name,
                "rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes, "rx_nobuf": p.rx_nobuf, "rx_dropped": p.rx_dropped,
                "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes, "tx_refused": p.tx_refused,
            })
        })
        .collect();
    let apps: Vec<Value> = w
        .apps
        .iter()
        .map(|a| json!({ "name": a.name(), "counters": a.counters().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>() }))
        .collect();
    json!({
        "rx_packets": a.rx,
        "tx_packets": a.tx,
        "delivered_packets": a.delivered,
        "dropped_packets": a.dropped,
        "held_packets": w.held(),
        "originated_packets": a.originated,
        "conservation": "rx_packets + originated_packets = tx_packets + delivered_packets + dropped_packets + held_packets",
        "drops": drops,
        "drop_reasons": reasons,
        "stages": stage_list,
        "ports": ports,
        "host": w.host.stats.named().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>(),
        "neighbours": w.host.neigh.len(),
        "apps": apps,
        "worker": softnet(w),
    })
}

/// A worker's softnet-style counters (`/proc/net/softnet_stat`'s columns that apply):
/// its own, and with RPS its backlog's.
fn softnet(w: &Worker) -> Value {
    let mut m = Map::new();
    m.insert("rounds".into(), json!(w.stats.rounds));
    m.insert("processed".into(), json!(w.stats.processed));
    m.insert("time_squeeze".into(), json!(w.stats.time_squeeze));
    if let Some(st) = &w.steer {
        let s = st.stats;
        for (k, v) in [
            ("dropped", s.dropped),
            ("received_rps", s.received_rps),
            ("backlog_polls", s.backlog_polls),
            ("backlog_len", s.backlog_len),
            ("handed_off", s.handed_off),
            ("taken_over", s.taken_over),
        ] {
            m.insert(k.into(), json!(v));
        }
    }
    Value::Object(m)
}
