//! How the repetitions of a variant are summarised: the median, and the spread as the
//! smallest and largest value (every repetition counts; none is dropped as an outlier).
//!
//! Per-packet costs are summarised from each repetition's own cost, not derived from the
//! summarised throughput, so `ns_per_packet.min` is the fastest repetition's cost.
//! List/packet ratios are ratios of medians; their spread pairs the extremes (the
//! slowest list run over the fastest packet run, and the reverse), so it bounds every
//! ratio two single repetitions could give.

use netbatch_engine::Mode;
use serde_json::{Value, json};

use super::scenarios::Variant;

/// The median and extremes of a set of values. All zero for an empty set.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// Summarises `xs` (in any order). The median of an even count is the mean of the
    /// two middle values. NaNs sort last (`f64::total_cmp`), so a NaN shows in `max`.
    pub(crate) fn of(xs: &[f64]) -> Self {
        if xs.is_empty() {
            return Self::default();
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// `min–max` with `prec` decimals.
    pub(crate) fn range_text(&self, prec: usize) -> String {
        format!("{:.prec$}–{:.prec$}", self.min, self.max)
    }
}

/// One variant's summarised repetitions.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) v: Variant,
    /// Repetitions summarised.
    pub(crate) runs: usize,
    /// Millions of packets per second.
    pub(crate) mpps: Spread,
    /// Wall-clock nanoseconds per packet.
    pub(crate) ns: Spread,
    /// TSC ticks per packet (the TSC counts at a fixed rate, not the core's clock).
    pub(crate) tsc: Spread,
}

impl Summary {
    /// Summarises per-repetition `(mpps, ns_per_packet, tsc_cycles_per_packet)`.
    pub(crate) fn new(v: Variant, reps: &[(f64, f64, f64)]) -> Self {
        let col = |f: fn(&(f64, f64, f64)) -> f64| reps.iter().map(f).collect::<Vec<_>>();
        Self {
            v,
            runs: reps.len(),
            mpps: Spread::of(&col(|r| r.0)),
            ns: Spread::of(&col(|r| r.1)),
            tsc: Spread::of(&col(|r| r.2)),
        }
    }

    /// The JSON fields of the summary: medians under the names consumers already read
    /// (`mpps`, `ns_per_packet`, `cycles_per_packet`), extremes beside them.
    pub(crate) fn json_fields(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("mpps", json!(self.mpps.median)),
            ("mpps_min", json!(self.mpps.min)),
            ("mpps_max", json!(self.mpps.max)),
            ("ns_per_packet", json!(self.ns.median)),
            ("ns_per_packet_min", json!(self.ns.min)),
            ("ns_per_packet_max", json!(self.ns.max)),
            ("cycles_per_packet", json!(self.tsc.median)),
            ("cycles_per_packet_min", json!(self.tsc.min)),
            ("cycles_per_packet_max", json!(self.tsc.max)),
        ]
    }

    /// A short name of the variant: scenario, then whatever of mode, dispatch, GRO,
    /// workers and RPS policy applies to it.
    pub(crate) fn label(&self) -> String {
        variant_label(&self.v, true)
    }

    /// The variant's label without its mode: what a list variant and its per-packet
    /// twin share.
    pub(crate) fn pair_label(&self) -> String {
        variant_label(&self.v, false)
    }
}

/// The scenario, then the axes that apply to `v` (its mode only when `mode`).
fn variant_label(v: &Variant, mode: bool) -> String {
    let mut s = v.scenario.clone();
    let mut part = |p: &str| {
        s.push(' ');
        s.push_str(p);
    };
    if let Some(m) = v.mode.filter(|_| mode) {
        part(m.name());
    }
    if let Some(d) = v.dispatch {
        part(d.name());
    }
    if v.gro.is_some() {
        part(&format!("gro {}", v.gro_name()));
    }
    if v.workers > 1 {
        part(&format!("{} workers", v.workers));
    }
    if v.rps.is_some() {
        part(&format!("rps {}", v.rps_name()));
    }
    if let Some(n) = v.fib {
        part(&format!("{n} routes"));
    }
    s
}

/// A list-mode variant's throughput over its per-packet twin's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ratio {
    /// Index of the list variant.
    pub(crate) list: usize,
    /// Index of the per-packet variant.
    pub(crate) packet: usize,
    /// Ratio of the medians (`median`), and of the extremes paired so they bound any
    /// two repetitions' ratio (`min`: slowest list / fastest packet; `max`: the reverse).
    pub(crate) spread: Spread,
}

/// Every list variant paired with the per-packet variant that differs only in mode.
pub(crate) fn list_packet_ratios(rows: &[Summary]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (li, l) in rows.iter().enumerate() {
        if l.v.mode != Some(Mode::List) {
            continue;
        }
        let twin = rows.iter().position(|p| {
            p.v.mode == Some(Mode::Packet)
                && p.v.scenario == l.v.scenario
                && p.v.dispatch == l.v.dispatch
                && p.v.gro == l.v.gro
                && p.v.workers == l.v.workers
                && p.v.rps == l.v.rps
                && p.v.fib == l.v.fib
        });
        if let Some(pi) = twin {
            let p = &rows[pi];
            out.push(Ratio {
                list: li,
                packet: pi,
                spread: Spread {
                    median: l.mpps.median / p.mpps.median,
                    min: l.mpps.min / p.mpps.max,
                    max: l.mpps.max / p.mpps.min,
                },
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use netbatch_engine::Dispatch;

    /// A variant of `scenario` as `variants` would make it.
    pub(crate) fn variant(
        scenario: &str,
        mode: Option<Mode>,
        dispatch: Option<Dispatch>,
    ) -> Variant {
        Variant {
            scenario: scenario.to_string(),
            mode,
            dispatch,
            gro: None,
            workers: 1,
            rps: None,
            fib: None,
        }
    }

    /// Hand-computed: sorted 1, 2, 4, 8, 9 → median 4 (the middle one), min 1, max 9;
    /// with 3 more, sorted 1, 2, 3, 4, 8, 9 → median (3 + 4) / 2 = 3.5.
    #[test]
    fn spread_is_median_min_max_of_unsorted_values() {
        let odd = Spread::of(&[8.0, 1.0, 4.0, 9.0, 2.0]);
        assert_eq!(
            odd,
            Spread {
                median: 4.0,
                min: 1.0,
                max: 9.0
            }
        );
        let even = Spread::of(&[8.0, 1.0, 4.0, 9.0, 2.0, 3.0]);
        assert_eq!(
            even,
            Spread {
                median: 3.5,
                min: 1.0,
                max: 9.0
            }
        );
        assert_eq!(Spread::of(&[7.5]).median, 7.5);
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(odd.range_text(1), "1.0–9.0");
    }

    /// Three repetitions of 1000 packets: 0.5 ms, 1 ms, 0.25 ms, at a 2 GHz TSC
    /// (1e6, 2e6, 0.5e6 ticks). Throughput 2, 1, 4 Mpps → median 2; cost 500, 1000,
    /// 250 ns → median 500, min 250 (the 4 Mpps run), max 1000; TSC 1000, 2000, 500
    /// ticks per packet → median 1000.
    #[test]
    fn summary_takes_each_column_from_the_repetitions() {
        let reps: Vec<(f64, f64, f64)> = [(0.5e-3, 1.0e6), (1.0e-3, 2.0e6), (0.25e-3, 0.5e6)]
            .iter()
            .map(|&(secs, ticks)| (1000.0 / secs / 1e6, secs * 1e9 / 1000.0, ticks / 1000.0))
            .collect();
        let s = Summary::new(variant("null", Some(Mode::List), None), &reps);
        assert_eq!(s.runs, 3);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(s.mpps.median, 2.0) && close(s.mpps.min, 1.0) && close(s.mpps.max, 4.0));
        assert!(close(s.ns.median, 500.0) && close(s.ns.min, 250.0) && close(s.ns.max, 1000.0));
        assert!(close(s.tsc.median, 1000.0) && close(s.tsc.min, 500.0) && close(s.tsc.max, 2000.0));
        let j: serde_json::Map<String, Value> = s
            .json_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert!(close(j["mpps_min"].as_f64().unwrap(), 1.0));
        assert!(close(j["cycles_per_packet_max"].as_f64().unwrap(), 2000.0));
    }

    /// List 30 Mpps (20–40) over packet 10 Mpps (8–16): 3.0 of the medians, 20/16 = 1.25
    /// and 40/8 = 5.0 at the extremes; the smoltcp row has no twin and no ratio, and
    /// twins differ in nothing but mode (runs pairs with runs only).
    #[test]
    fn ratios_pair_list_with_its_per_packet_twin() {
        let s = |sc: &str, m, d, med, lo, hi| Summary {
            v: variant(sc, m, d),
            runs: 3,
            mpps: Spread {
                median: med,
                min: lo,
                max: hi,
            },
            ns: Spread::default(),
            tsc: Spread::default(),
        };
        let runs = Some(Dispatch::Runs);
        let buckets = Some(Dispatch::Buckets);
        let rows = vec![
            s("udp-local-1b", Some(Mode::Packet), runs, 10.0, 8.0, 16.0),
            s("udp-local-1b", Some(Mode::List), buckets, 99.0, 99.0, 99.0),
            s("udp-local-1b", Some(Mode::List), runs, 30.0, 20.0, 40.0),
            s("smoltcp-udp-1b", None, None, 15.0, 14.0, 16.0),
        ];
        let r = list_packet_ratios(&rows);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].list, r[0].packet), (2, 0));
        assert_eq!(
            r[0].spread,
            Spread {
                median: 3.0,
                min: 1.25,
                max: 5.0
            }
        );
        assert_eq!(rows[2].label(), "udp-local-1b list runs");
        assert_eq!(rows[2].pair_label(), "udp-local-1b runs");
        assert_eq!(rows[3].label(), "smoltcp-udp-1b");
    }
}
