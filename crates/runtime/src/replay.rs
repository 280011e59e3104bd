//! `netbatch replay`: every frame of a capture is received on one port at its timestamp,
//! everything transmitted on any port is written to a pcapng file, and the counters are
//! reported. The worker's clock is the capture's, so timers (ARP retries, rate limits)
//! behave the same on every run: the same input and configuration give the same output.
//!
//! The capture is streamed in and the output out: frames are read in file order a round's
//! worth ahead of the port (a round takes at most [`LIST_MAX`] frames from a port, so the
//! port always holds every frame the round could take, and the result is the one of
//! queueing the whole capture up front), and what the ports transmit is written after
//! every round. Memory does not grow with the capture.
//!
//! A capture damaged part-way (a record too long, a file cut inside a record) is handled
//! as tshark handles it: the records before the damage are replayed and their output
//! written, then the replay fails with the error, which names the record and its offset.

use std::path::Path;

use netbatch_datapath::Worker;
use netbatch_engine::Pool;
use netbatch_engine::stage::LIST_MAX;
use netbatch_ports::Port;
use netbatch_ports::mem::MemPort;
use netbatch_ports::pcap::{CaptureReader, CapturedFrame, PcapError, TxWriter};
use serde_json::{Map, Value, json};

use crate::build::{self, BuildError};
use crate::config::Config;

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The capture could not be opened or the output not written.
    #[error(transparent)]
    Pcap(#[from] PcapError),
    /// The capture is damaged part-way: what came before was replayed and written.
    #[error(
        "{error} (the {replayed} record(s) before it were replayed; {written} frame(s) written)"
    )]
    Damaged {
        /// What is wrong, and where.
        error: PcapError,
        /// Records replayed before it.
        replayed: u64,
        /// Frames written to the output.
        written: u64,
    },
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

/// Frames queued on the receiving port ahead of a round: more than one round takes.
const READ_AHEAD: usize = LIST_MAX + 1;

/// The capture, one frame of look-ahead in front of the port's queue.
struct Input {
    reader: CaptureReader,
    next: Option<CapturedFrame>,
    /// The error that ended the capture early.
    error: Option<PcapError>,
}

impl Input {
    fn advance(&mut self) -> Option<CapturedFrame> {
        let f = self.next.take();
        if f.is_some() {
            match self.reader.next_frame() {
                Ok(n) => self.next = n,
                Err(e) => self.error = Some(e),
            }
        }
        f
    }
}

/// Takes what every port transmitted in the last round into the output.
fn drain_tx(w: &mut Worker, out: &mut TxWriter) -> Result<(), PcapError> {
    for i in 0..w.ports.len() {
        let tx = mem(w, i).take_tx();
        if !tx.is_empty() {
            out.add(i, tx)?;
        }
    }
    Ok(())
}

/// Replays `input` into the port named `port` (the first if `None`), writes `output`.
pub fn replay(
    cfg: &Config,
    input: &Path,
    output: &Path,
    port: Option<&str>,
) -> Result<ReplayReport, ReplayError> {
    let rx = match port {
        None => 0,
        Some(name) => cfg
            .ports
            .iter()
            .position(|p| p.setup.name == name)
            .ok_or_else(|| ReplayError::NoPort(name.into()))?,
    };
    let mut reader = CaptureReader::open(input)?;
    let first = reader.next_frame();
    let mut input = Input {
        reader,
        next: None,
        error: None,
    };
    match first {
        Ok(f) => input.next = f,
        Err(e) => input.error = Some(e),
    }
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
    let names: Vec<String> = w.ports.iter().map(|p| p.name().to_string()).collect();
    let mut out = TxWriter::create(output, &names)?;
    let mut now = input.next.as_ref().map_or(0, |f| f.ts_ns);
    loop {
        let port = mem(&mut w, rx);
        if port.rx_pending() == 0 {
            match input.advance() {
                Some(f) => port.push_rx(f.ts_ns, f.bytes),
                None => break,
            }
        }
        if let Some(t) = port.next_rx_ts() {
            now = now.max(t);
        }
        // Every frame the round may reach: those due, up to what one round can take.
        // (A frame not due stops the port; what follows it waits anyway.)
        while port.rx_pending() < READ_AHEAD && input.next.as_ref().is_some_and(|f| f.ts_ns <= now)
        {
            if let Some(f) = input.advance() {
                port.push_rx(f.ts_ns, f.bytes);
            }
        }
        w.poll(now);
        debug_assert!(
            mem(&mut w, rx).rx_pending() > 0 || input.next.as_ref().is_none_or(|f| f.ts_ns > now),
            "a round took every frame queued ahead of it while more were due"
        );
        drain_tx(&mut w, &mut out)?;
    }
    // One more round for what the last one queued (application sends, timer work).
    w.poll(now);
    drain_tx(&mut w, &mut out)?;
    let mut stats = stats(&w);
    let read = input.reader.stats();
    if let Value::Object(m) = &mut stats {
        m.insert("capture_records".into(), json!(read.records));
        m.insert("capture_truncated".into(), json!(read.truncated));
        m.insert("capture_fcs_stripped".into(), json!(read.fcs_stripped));
    }
    let written = out.finish()?;
    w.shutdown();
    let total = pool.config().buffers as usize;
    drop(w);
    if pool.free_in_pool() != total {
        return Err(ReplayError::Leak(total - pool.free_in_pool()));
    }
    if let Some(error) = input.error {
        return Err(ReplayError::Damaged {
            error,
            replayed: read.records,
            written,
        });
    }
    Ok(ReplayReport {
        stats,
        written: written as usize,
    })
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
                "cycles": s.cycles,
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
        .zip(&w.ports)
        .map(|((name, p), port)| {
            let mut j = json!({
                "name": name,
                "rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes, "rx_nobuf": p.rx_nobuf, "rx_dropped": p.rx_dropped,
                "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes, "tx_refused": p.tx_refused,
                "tx_link_down": p.tx_link_down, "tx_kernel_dropped": p.tx_kernel_dropped,
            });
            // Its own receive drops by reason, where the backend keeps them.
            let reasons = port.rx_drop_reasons();
            if !reasons.is_empty() {
                j["rx_drop_reasons"] = reasons
                    .into_iter()
                    .map(|(r, d, n)| json!({"reason": r, "description": d, "count": n}))
                    .collect();
            }
            // How the queue works, in the backend's words (AF_XDP: zero-copy or copy mode).
            let mode = port.describe();
            if !mode.is_empty() {
                j["mode"] = json!(mode);
            }
            j
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
        "neighbours6": w.host.neigh6.len(),
        "routes": w.host.routes.len(),
        "routes6": w.host.routes6.len(),
        "apps": apps,
        "worker": softnet(w),
        "conntrack": w.host.ct.as_deref().map(crate::control::conntrack::counters),
    })
}

/// A worker's softnet-style counters (`/proc/net/softnet_stat`'s columns that apply):
/// its own, and with RPS its backlog's.
fn softnet(w: &Worker) -> Value {
    let mut m = Map::new();
    m.insert("rounds".into(), json!(w.stats.rounds));
    m.insert("processed".into(), json!(w.stats.processed));
    m.insert("time_squeeze".into(), json!(w.stats.time_squeeze));
    m.insert("busy_ns".into(), json!(w.stats.busy_ns));
    m.insert("idle_ns".into(), json!(w.stats.idle_ns));
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
