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
    Some(c)
}
