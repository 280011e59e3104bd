//! `netbatch trace add|show|clear`: arms the workers' traces (VPP's `trace add`: the next
//! N packets per worker, here also filtered by receive port and a match over the
//! dissector's keys), collects what they recorded, and shows each packet's path.
//!
//! What a worker recorded is taken out of it at each `show` and kept here (so a second
//! `show` shows it again), in a ring of the last `[control] trace_keep` packets (older
//! ones are let go, and counted), until `clear`, which also disarms the workers and
//! gives the ring's memory back. `show` says how many packets it shows of how many were
//! traced since when (the first `add` after the start or the last `clear`).

use std::collections::VecDeque;

use netbatch_engine::{TraceDump, TraceSpec};
use netbatch_stack::trace::{Match, Report};
use serde_json::{Value, json};

use super::{Control, Reply};

/// Traces collected from the workers, bounded: the last `keep` packets.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// (worker, what it recorded, its clock's offset to UTC), in the order taken.
    dumps: VecDeque<(usize, TraceDump, u64)>,
    /// Packets in `dumps`.
    kept: usize,
    /// Packets taken from the workers since `since`.
    traced: u64,
    /// Of those, the older ones let go to keep the last `keep`.
    let_go: u64,
    /// When the first `trace add` since the start or the last `clear` was made (ns
    /// since the Unix epoch).
    since_ns: Option<u64>,
}

impl Collected {
    /// Keeps `dump` (worker `worker`'s, clock offset `utc`), then lets the oldest
    /// packets go, with their records, until at most `keep` are kept.
    fn add(&mut self, worker: usize, dump: TraceDump, utc: u64, keep: usize) {
        if dump.packets.is_empty() {
            return;
        }
        self.kept += dump.packets.len();
        self.traced += dump.packets.len() as u64;
        self.dumps.push_back((worker, dump, utc));
        while self.kept > keep {
            let Some((_, front, _)) = self.dumps.front_mut() else {
                break;
            };
            let n = (self.kept - keep).min(front.packets.len());
            let gone: Vec<u32> = front.packets.drain(..n).map(|p| p.id).collect();
            front.records.retain(|r| !gone.contains(&r.id));
            self.kept -= n;
            self.let_go += n as u64;
            if front.packets.is_empty() {
                self.dumps.pop_front();
            } else {
                front.packets.shrink_to_fit();
                front.records.shrink_to_fit();
            }
        }
    }
}

/// Nanoseconds since the Unix epoch, now.
fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Most packets a worker may be armed for (each keeps its frame and its records).
const MAX_COUNT: u32 = 10_000;

impl Control {
    pub(super) fn trace_cmd(&self, words: &[&str]) -> Reply {
        match words {
            ["add", rest @ ..] => self.trace_add(rest),
            ["show"] => self.trace_show(),
            ["clear"] => self.trace_clear(),
            _ => Reply::err(
                "trace add --count N [--port P] [--match EXPR] | trace show | trace clear",
            ),
        }
    }

    fn trace_add(&self, words: &[&str]) -> Reply {
        let mut count = 10u32;
        let mut port = None;
        let mut matching: Option<Match> = None;
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let Some(v) = it.next() else {
                return Reply::err(format!("trace add: '{w}' needs a value"));
            };
            match *w {
                "--count" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_COUNT).contains(&n) => count = n,
                    _ => {
                        return Reply::err(format!(
                            "trace add: --count '{v}' is not 1 to {MAX_COUNT}"
                        ));
                    }
                },
                "--port" => {
                    let st = self.state();
                    match st.cfg.ports.iter().position(|p| p.setup.name == *v) {
                        Some(i) => port = Some(i as u16),
                        None => return Reply::err(format!("trace add: no port named '{v}'")),
                    }
                }
                "--match" => match v.parse::<Match>() {
                    Ok(m) => matching = Some(m),
                    Err(e) => return Reply::err(format!("trace add: --match '{v}': {e}")),
                },
                other => return Reply::err(format!("trace add: unknown option '{other}'")),
            }
        }
        let shown = matching.as_ref().map(ToString::to_string);
        self.trace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .since_ns
            .get_or_insert_with(now_unix_ns);
        let armed = self.remote.on_each(move |_, w| {
            let mut spec = TraceSpec::new(count);
            if let Some(p) = port {
                spec = spec.port(p);
            }
            if let Some(m) = &matching {
                spec = spec.matcher(m.clone().matcher());
            }
            w.graph.trace_mut().arm(spec);
        });
        match armed {
            Ok(v) => Reply::ok(
                format!(
                    "tracing the next {count} packet(s) per worker ({} worker(s)){}{}",
                    v.len(),
                    port.map(|p| format!(", port {}", self.port_name(p)))
                        .unwrap_or_default(),
                    shown
                        .as_ref()
                        .map(|m| format!(", matching {m}"))
                        .unwrap_or_default(),
                ),
                json!({ "count": count, "workers": v.len(), "match": shown }),
            ),
            Err(e) => Reply::err(e.to_string()),
        }
    }

    fn port_name(&self, p: u16) -> String {
        self.state()
            .cfg
            .ports
            .get(usize::from(p))
            .map_or_else(|| format!("port{p}"), |c| c.setup.name.clone())
    }

    fn trace_show(&self) -> Reply {
        let taken = match self.remote.on_each(|i, w| {
            let dumps = w.take_trace();
            // A trace whose count ran out is disarmed once shown, so the graph goes
            // back to its untraced loops (what is still in flight is not recorded).
            if w.graph.trace().remaining() == 0 {
                w.graph.trace_mut().disarm();
            }
            (i, dumps, w.host.clock_to_utc_ns)
        }) {
            Ok(t) => t,
            Err(e) => return Reply::err(e.to_string()),
        };
        let mut all = self
            .trace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let st = self.state();
        let keep = st.cfg.control.trace_keep;
        for (i, dumps, utc) in taken {
            for d in dumps {
                all.add(i, d, utc, keep);
            }
        }
        let ports: Vec<String> = st.cfg.ports.iter().map(|p| p.setup.name.clone()).collect();
        let mut text = match all.since_ns {
            Some(since) => format!(
                "{} packet(s) shown: the last {} of {} traced since {} (the first trace add \
                 since the start or the last trace clear; {} older let go, [control] \
                 trace_keep = {keep}; trace clear empties)\n",
                all.kept,
                all.kept,
                all.traced,
                netbatch_stack::trace::utc(since),
                all.let_go,
            ),
            None => String::new(),
        };
        let mut packets = Vec::new();
        for (worker, dump, utc) in &all.dumps {
            let r = Report {
                dump,
                worker: *worker,
                ports: &ports,
                clock_to_utc_ns: *utc,
                routes: Some(&st.routes),
            };
            text += &r.text();
            let paths = r.paths();
            for p in &dump.packets {
                let comment = paths
                    .iter()
                    .find(|(id, _)| *id == p.id)
                    .map(|(_, c)| c.clone())
                    .unwrap_or_default();
                packets.push(json!({
                    "worker": worker,
                    "id": p.id,
                    "port": p.port,
                    "ts_ns": r.utc_ns(p.ts_ns),
                    "orig_len": p.orig_len,
                    "data": hex(&p.data),
                    "comment": comment,
                }));
            }
        }
        if packets.is_empty() {
            text += "no packets traced (netbatch trace add --count N arms the next N)\n";
        }
        Reply::ok(
            text,
            json!({
                "ports": ports,
                "packets": packets,
                "traced": all.traced,
                "let_go": all.let_go,
                "keep": keep,
                "since_unix_ns": all.since_ns,
            }),
        )
    }

    fn trace_clear(&self) -> Reply {
        if let Err(e) = self.remote.on_each(|_, w| w.graph.trace_mut().disarm()) {
            return Reply::err(e.to_string());
        }
        // A new ring: the old one's memory goes back now, not at the next trace.
        *self
            .trace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Collected::default();
        Reply::ok("trace cleared and disarmed", json!({ "cleared": true }))
    }
}

/// Bytes as lowercase hex (what the client turns back into the frame).
fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// The bytes of a hex string (two lowercase or uppercase digits a byte), or `None` if it is
/// not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The traced frames of a `trace show` answer's data, for `ports::pcap::write_traced`.
pub fn frames(
    data: &Value,
) -> Result<(Vec<String>, Vec<netbatch_ports::pcap::TracedFrame>), String> {
    let ports: Vec<String> = data["ports"]
        .as_array()
        .ok_or("no ports in the answer")?
        .iter()
        .map(|p| p.as_str().unwrap_or("?").to_string())
        .collect();
    let mut frames = Vec::new();
    for p in data["packets"]
        .as_array()
        .ok_or("no packets in the answer")?
    {
        let bytes = unhex(p["data"].as_str().unwrap_or("")).ok_or("a packet's data is not hex")?;
        frames.push(netbatch_ports::pcap::TracedFrame {
            port: p["port"]
                .as_u64()
                .and_then(|x| u16::try_from(x).ok())
                .ok_or("a packet has no port")?,
            ts_ns: p["ts_ns"].as_u64().unwrap_or(0),
            orig_len: p["orig_len"]
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .unwrap_or(bytes.len() as u32),
            data: bytes,
            comment: p["comment"].as_str().unwrap_or("").to_string(),
        });
    }
    Ok((ports, frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames cross the socket as hex and come back byte for byte.
    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)), Some(b));
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
