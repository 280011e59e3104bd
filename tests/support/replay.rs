//! Replays a capture built by a test through a two-port router (`eth0`, `eth1`) in every
//! batch variant, and checks what must hold whatever the case: conservation, every
//! frame received and every transmitted frame written, the variants agreeing (exactly
//! for per-packet and `runs`, per flow for `buckets`), and a second run giving the same
//! bytes.

use std::collections::BTreeMap;

use netbatch_ports::pcap::{CapturedFrame, read_frames, write_pcap};
use netbatch_runtime::config::Config;
use netbatch_runtime::replay::replay;
use netbatch_wire::ethernet::MacAddr;
use serde_json::Value;
use tempfile::TempDir;

/// What one replay produced: frames per output port and the stats document.
#[derive(Debug)]
pub struct Outcome {
    /// Frames sent on `eth0`.
    pub eth0: Vec<Vec<u8>>,
    /// Frames sent on `eth1`.
    pub eth1: Vec<Vec<u8>>,
    /// `replay`'s stats document.
    pub stats: Value,
}

impl Outcome {
    /// The stats of stage `name`.
    pub fn stage(&self, name: &str) -> &Value {
        self.stats["stages"]
            .as_array()
            .expect("stages")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no stage {name}"))
    }

    /// Drops by reason name.
    pub fn drops(&self) -> BTreeMap<String, u64> {
        self.stats["drops"]
            .as_object()
            .expect("drops")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
            .collect()
    }
}

/// A fresh temporary directory named `dir-…`, removed with everything in it when the
/// guard is dropped, whether the test passes or panics.
pub fn tmp(dir: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{dir}-"))
        .tempdir()
        .expect("temp dir")
}

/// Replays `input` (frames with timestamps in nanoseconds, received on the first port)
/// with the configuration `config(mode, dispatch)` in every variant. The ports send with
/// `macs` (eth0's, eth1's), which splits the output back by port. The stats keys in
/// `same` must agree between variants. Returns the list/`buckets` outcome.
pub fn run_variants(
    dir: &str,
    case: &str,
    input: &[(u64, Vec<u8>)],
    macs: [MacAddr; 2],
    same: &[&str],
    config: impl Fn(&str, &str) -> String,
) -> Outcome {
    let cap: Vec<CapturedFrame> = input
        .iter()
        .map(|(t, b)| CapturedFrame {
            ts_ns: 1_700_000_000_000_000_000 + t,
            bytes: b.clone(),
        })
        .collect();
    let dir = tmp(dir);
    let inp = dir.path().join(format!("{case}.pcap"));
    write_pcap(&inp, &cap).expect("write input");
    let parse = |mode: &str, dispatch: &str| {
        Config::parse(&config(mode, dispatch), std::path::Path::new("."), case)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let mut results: Vec<(String, Outcome)> = Vec::new();
    for (mode, dispatch) in [
        ("packet", "runs"),
        ("packet", "buckets"),
        ("list", "runs"),
        ("list", "buckets"),
    ] {
        let out = dir.path().join(format!("{case}-{mode}-{dispatch}.pcapng"));
        let r = replay(&parse(mode, dispatch), &inp, &out, None).expect("replay");
        let (mut eth0, mut eth1) = (Vec::new(), Vec::new());
        for f in read_frames(&out).expect("read output") {
            match &f.bytes[6..12] {
                s if s == macs[0].0 => eth0.push(f.bytes),
                s if s == macs[1].0 => eth1.push(f.bytes),
                other => panic!("{case}: frame from unknown MAC {other:?}"),
            }
        }
        let s = &r.stats;
        let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("stats has no {k}"));
        assert_eq!(
            n("rx_packets") + n("originated_packets"),
            n("tx_packets") + n("delivered_packets") + n("dropped_packets") + n("held_packets"),
            "{case} {mode}/{dispatch}: conservation"
        );
        assert_eq!(n("rx_packets"), input.len() as u64, "{case}");
        assert_eq!(
            n("tx_packets") as usize,
            eth0.len() + eth1.len(),
            "{case}: every transmitted frame is in the output"
        );
        results.push((
            format!("{mode}/{dispatch}"),
            Outcome {
                eth0,
                eth1,
                stats: r.stats,
            },
        ));
    }
    let flows = |o: &Outcome| -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        let mut m: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for f in o.eth0.iter().chain(&o.eth1) {
            // Flow key: MACs and IP addresses (or the whole frame if not IPv4).
            let key = if f.len() >= 34 && f[12..14] == [8, 0] {
                [&f[0..12], &f[26..34]].concat()
            } else {
                f.clone()
            };
            m.entry(key).or_default().push(f.clone());
        }
        m
    };
    let (first_name, first) = &results[0];
    for (name, o) in &results[1..] {
        assert_eq!(
            flows(o),
            flows(first),
            "{case}: {name} differs per flow from {first_name}"
        );
        if name.starts_with("list/runs") || name.starts_with("packet") {
            assert_eq!(
                (&o.eth0, &o.eth1),
                (&first.eth0, &first.eth1),
                "{case}: {name} differs in order from {first_name}"
            );
        }
        for k in same {
            assert_eq!(o.stats[*k], first.stats[*k], "{case}: {name} {k}");
        }
    }
    // Same input, same output, run after run.
    let again = dir.path().join(format!("{case}-again.pcapng"));
    replay(&parse("list", "buckets"), &inp, &again, None).expect("replay");
    let a = std::fs::read(&again).expect("output");
    let b = std::fs::read(dir.path().join(format!("{case}-list-buckets.pcapng"))).expect("output");
    assert_eq!(a, b, "{case}: replay is deterministic");
    results.pop().map(|(_, o)| o).expect("four variants")
}
