//! `[defrag]`: the fragment stores, one per family in each worker, that reassembly for
//! local delivery (always) and defragmentation before tracking (with `[conntrack]`)
//! share, as Linux's `ipfrag_*` sysctls bound both: fragments held (`max_buffers`,
//! wire packets), datagrams in flight (`max_datagrams`), fragments of one datagram
//! (`max_fragments`), and the timeouts, `timeout` as `ipfrag_time` (30 s) and
//! `timeout6` as `ip6frag_time` (60 s). Each bad value is refused at its key.

use netbatch_stack::defrag::Config;

use super::Errs;

/// `[defrag]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DefragFile {
    max_buffers: Option<i64>,
    max_datagrams: Option<i64>,
    max_fragments: Option<i64>,
    timeout: Option<i64>,
    timeout6: Option<i64>,
}

/// The largest `max_buffers` (a worker's pool has at most this many buffers to spare).
const MAX_DEFRAG_BUFFERS: i64 = 1 << 20;
/// The largest `max_datagrams`.
const MAX_DEFRAG_DATAGRAMS: i64 = 1 << 16;
/// The most fragments of one datagram (a 65,535-byte datagram in 8-byte pieces).
const MAX_DEFRAG_FRAGMENTS: i64 = 8192;
/// The largest defragmentation timeout, seconds (Linux takes any; an hour is plenty).
const MAX_DEFRAG_TIMEOUT: i64 = 3600;

/// The defragmentation settings of `raw`, each bad value refused at its key.
pub(super) fn validate(raw: Option<&DefragFile>, e: &mut Errs) -> Config {
    let mut c = Config::default();
    let Some(raw) = raw else {
        return c;
    };
    let mut take = |key: &str, v: Option<i64>, lo: i64, hi: i64, what: &str| -> Option<u64> {
        let v = v?;
        if (lo..=hi).contains(&v) {
            Some(v as u64)
        } else {
            e.add(
                format!("defrag.{key}"),
                format!("{v} {what}: from {lo} to {hi}"),
            );
            None
        }
    };
    if let Some(v) = take(
        "max_buffers",
        raw.max_buffers,
        1,
        MAX_DEFRAG_BUFFERS,
        "buffers",
    ) {
        c.max_buffers = v as usize;
    }
    if let Some(v) = take(
        "max_datagrams",
        raw.max_datagrams,
        1,
        MAX_DEFRAG_DATAGRAMS,
        "datagrams",
    ) {
        c.max_datagrams = v as usize;
    }
    if let Some(v) = take(
        "max_fragments",
        raw.max_fragments,
        2,
        MAX_DEFRAG_FRAGMENTS,
        "fragments",
    ) {
        c.max_fragments = v as usize;
    }
    if let Some(v) = take("timeout", raw.timeout, 1, MAX_DEFRAG_TIMEOUT, "seconds") {
        c.timeout4 = v as u32;
    }
    if let Some(v) = take("timeout6", raw.timeout6, 1, MAX_DEFRAG_TIMEOUT, "seconds") {
        c.timeout6 = v as u32;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;

    const PORT: &str =
        "[[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n";

    /// Every bad value refused at its key; the old `[conntrack.defrag]` refused, naming
    /// the new section.
    #[test]
    fn mistakes_are_refused_with_their_keys() {
        let bad = format!(
            "{PORT}[defrag]\nmax_buffers = 0\nmax_fragments = 1\ntimeout = 0\ntimeout6 = 99999\nmax_datagrams = -3\n"
        );
        let e = parse(&bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for k in [
            "defrag.max_buffers",
            "defrag.max_datagrams",
            "defrag.max_fragments",
            "defrag.timeout",
            "defrag.timeout6",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        let old = format!("{PORT}[conntrack]\n[conntrack.defrag]\nmax_buffers = 300\n");
        let e = parse(&old).unwrap_err();
        assert!(
            e.errors
                .iter()
                .any(|x| x.key == "conntrack.defrag" && x.reason.contains("[defrag]")),
            "{e:?}"
        );
    }

    /// Set values, Linux's defaults for the rest, with or without tracking.
    #[test]
    fn values_and_defaults() {
        for ct in ["", "[conntrack]\n"] {
            let c = parse(&format!(
                "{PORT}{ct}[defrag]\nmax_buffers = 300\ntimeout = 5\n"
            ))
            .unwrap();
            let d = c.graph.defrag;
            assert_eq!(
                (d.max_buffers, d.max_datagrams, d.timeout4, d.timeout6),
                (300, 256, 5, 60),
                "set values and Linux's 60 s for IPv6"
            );
        }
        let c = parse(PORT).unwrap();
        assert_eq!(c.graph.defrag, super::Config::default());
    }
}
