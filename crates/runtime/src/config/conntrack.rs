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
    /// `[conntrack.defrag]`, which became `[defrag]`: refused, naming the section.
    defrag: Option<toml::Value>,
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
    if raw.defrag.is_some() {
        e.add(
            "conntrack.defrag",
            "the fragment store's bounds are the [defrag] section's (local delivery reassembles too)"
                .to_string(),
        );
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
             [conntrack.defrag]\nmax_buffers = 10\n\
             [filter.forward]\npolicy = \"continue\"\n[[filter.forward.rule]]\nct_state = \"new,bogus\"\nct_status = \"confirmed\"\nct_mark = \"x\"\naction = \"continue\"\n"
        );
        let e = parse(&bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for k in [
            "conntrack.max",
            "conntrack.tcp_max_retrans",
            "conntrack.timeouts.tcp_listen",
            "conntrack.timeouts.udp",
            "conntrack.defrag",
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
            "{PORT}[conntrack]\nmax = 1001\ntcp_be_liberal = true\n[conntrack.timeouts]\nudp_stream = 180\n"
        );
        let c = parse(&good).unwrap();
        let ct = c.graph.conntrack.as_ref().unwrap();
        assert_eq!(ct.max, 501, "1001 over two workers, rounded up");
        assert!(ct.tcp.be_liberal && ct.tcp.loose);
        assert_eq!((ct.timeouts.udp_stream, ct.timeouts.udp), (180, 30));
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
