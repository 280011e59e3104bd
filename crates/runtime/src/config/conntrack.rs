//! `[conntrack]`: connection tracking's table size and timeouts, as Linux's sysctls
//! name them (`nf_conntrack_max`, `nf_conntrack_tcp_loose`,
//! `nf_conntrack_tcp_be_liberal`, `nf_conntrack_tcp_max_retrans`, and
//! `[conntrack.timeouts]`: `tcp_established` for `nf_conntrack_tcp_timeout_established`
//! and so on). The section turns tracking on; a rule with a `ct_*` key turns it on with
//! the defaults. `max` is the total over the workers: each worker's table holds its
//! share (rounded up), as each worker owns the connections RPS steers to it.

use std::collections::BTreeMap;

use netbatch_stack::ct::{Config, Timeouts};

use super::Errs;

/// The largest `max` (entries over all workers): 16 M entries, about 3 GiB of tables.
const MAX_ENTRIES: u64 = 1 << 24;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConntrackFile {
    max: Option<u64>,
    tcp_loose: Option<bool>,
    tcp_be_liberal: Option<bool>,
    tcp_max_retrans: Option<u64>,
    #[serde(default)]
    timeouts: BTreeMap<String, toml::Value>,
    defrag: Option<DefragFile>,
}

/// `[conntrack.defrag]`: the bounds of defragmentation before tracking (per family and
/// worker), and its timeouts as Linux's `ipfrag_time` and `ip6frag_time`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefragFile {
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
fn defrag(raw: &DefragFile, e: &mut Errs) -> netbatch_stack::defrag::Config {
    let mut c = netbatch_stack::defrag::Config::default();
    let mut take = |key: &str, v: Option<i64>, lo: i64, hi: i64, what: &str| -> Option<u64> {
        let v = v?;
        if (lo..=hi).contains(&v) {
            Some(v as u64)
        } else {
            e.add(
                format!("conntrack.defrag.{key}"),
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

/// The tracking settings of `[conntrack]` (none without the section), for `workers`
/// workers.
pub(super) fn validate(
    raw: Option<&ConntrackFile>,
    workers: usize,
    e: &mut Errs,
) -> Option<Config> {
    let raw = raw?;
    let mut c = Config::default();
    if let Some(m) = raw.max {
        if m == 0 || m > MAX_ENTRIES {
            e.add(
                "conntrack.max",
                format!("{m} entries: from 1 to {MAX_ENTRIES}"),
            );
        } else {
            c.max = m as usize;
        }
    }
    c.max = c.max.div_ceil(workers.max(1));
    if let Some(l) = raw.tcp_loose {
        c.tcp.loose = l;
    }
    if let Some(l) = raw.tcp_be_liberal {
        c.tcp.be_liberal = l;
    }
    if let Some(r) = raw.tcp_max_retrans {
        match u8::try_from(r) {
            Ok(r) => c.tcp.max_retrans = r,
            Err(_) => e.add(
                "conntrack.tcp_max_retrans",
                format!("{r} retransmissions: at most 255"),
            ),
        }
    }
    let mut t = Timeouts::default();
    for (k, v) in &raw.timeouts {
        let key = format!("conntrack.timeouts.{k}");
        let Some(slot) = t.field(k) else {
            e.add(
                key,
                format!("unknown timeout (one of {})", Timeouts::KEYS.join(", ")),
            );
            continue;
        };
        match v.as_integer() {
            Some(s) if (1..=i64::from(u32::MAX)).contains(&s) => *slot = s as u32,
            _ => e.add(key, format!("{v} is not a number of seconds from 1 on")),
        }
    }
    c.timeouts = t;
    if let Some(d) = &raw.defrag {
        c.defrag = defrag(d, e);
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;

    const PORT: &str = "[[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n[datapath]\nworkers = 2\nrps = \"deferred\"\n";

    /// Every mistake of the section and of the rules' `ct_*` keys, each at its key.
    #[test]
    fn mistakes_are_refused_with_their_keys() {
        let bad = format!(
            "{PORT}[conntrack]\nmax = 0\ntcp_max_retrans = 300\n[conntrack.timeouts]\ntcp_listen = 5\nudp = 0\n\
             [conntrack.defrag]\nmax_buffers = 0\nmax_fragments = 1\ntimeout = 0\ntimeout6 = 99999\nmax_datagrams = -3\n\
             [filter.forward]\npolicy = \"continue\"\n[[filter.forward.rule]]\nct_state = \"new,bogus\"\nct_status = \"confirmed\"\nct_mark = \"x\"\naction = \"continue\"\n"
        );
        let e = parse(&bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for k in [
            "conntrack.max",
            "conntrack.tcp_max_retrans",
            "conntrack.timeouts.tcp_listen",
            "conntrack.timeouts.udp",
            "conntrack.defrag.max_buffers",
            "conntrack.defrag.max_datagrams",
            "conntrack.defrag.max_fragments",
            "conntrack.defrag.timeout",
            "conntrack.defrag.timeout6",
            "filter.forward.policy",
            "filter.forward.rule[0].ct_state",
            "filter.forward.rule[0].ct_status",
            "filter.forward.rule[0].ct_mark",
            "filter.forward.rule[0].action",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
    }

    /// The section's values, `max` shared over the workers, symmetric steering; a
    /// `ct_*` rule alone turns tracking on with the defaults.
    #[test]
    fn values_and_defaults() {
        let good = format!(
            "{PORT}[conntrack]\nmax = 1001\ntcp_be_liberal = true\n[conntrack.timeouts]\nudp_stream = 180\n\
             [conntrack.defrag]\nmax_buffers = 300\ntimeout = 5\n"
        );
        let c = parse(&good).unwrap();
        let ct = c.graph.conntrack.as_ref().unwrap();
        assert_eq!(ct.max, 501, "1001 over two workers, rounded up");
        assert!(ct.tcp.be_liberal && ct.tcp.loose);
        assert_eq!((ct.timeouts.udp_stream, ct.timeouts.udp), (180, 30));
        assert_eq!(
            (
                ct.defrag.max_buffers,
                ct.defrag.timeout4,
                ct.defrag.timeout6
            ),
            (300, 5, 60),
            "set values and Linux's 60 s for IPv6"
        );
        assert!(c.rps.as_ref().unwrap().symmetric);
        let rule = format!(
            "{PORT}[filter.input]\n[[filter.input.rule]]\nct_state = \"invalid\"\naction = \"drop\"\n"
        );
        let c = parse(&rule).unwrap();
        assert_eq!(c.graph.conntrack.as_ref().unwrap().max, 32_768);
        let none = parse(PORT).unwrap();
        assert!(none.graph.conntrack.is_none() && !none.rps.unwrap().symmetric);
    }
}
