//! `[neighbour]`: the neighbour table's tunables (unset keys keep the stack's defaults)
//! and `[[neighbour.static]]` entries, each on an interface the ports define.

use core::net::Ipv4Addr;

use netbatch_stack::neigh::NeighParams;
use netbatch_stack::route::file::Resolve;
use netbatch_wire::ethernet::MacAddr;

use super::Errs;
use super::ports::Names;
use crate::setup::StaticNeighbour;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NeighFile {
    max_entries: Option<usize>,
    queue_len: Option<usize>,
    reachable_ms: Option<u64>,
    retrans_ms: Option<u64>,
    max_probes: Option<u32>,
    gc_stale_ms: Option<u64>,
    #[serde(default, rename = "static")]
    statics: Vec<StaticFile>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticFile {
    ip: String,
    mac: String,
    dev: String,
}

/// Validates the tunables of `[neighbour]`.
pub(super) fn tunables(raw: &NeighFile, e: &mut Errs) -> NeighParams {
    let nd = NeighParams::default();
    let neigh = NeighParams {
        max_entries: raw.max_entries.unwrap_or(nd.max_entries),
        queue_len: raw.queue_len.unwrap_or(nd.queue_len),
        reachable_ms: raw.reachable_ms.unwrap_or(nd.reachable_ms),
        retrans_ms: raw.retrans_ms.unwrap_or(nd.retrans_ms),
        max_probes: raw.max_probes.unwrap_or(nd.max_probes),
        gc_stale_ms: raw.gc_stale_ms.unwrap_or(nd.gc_stale_ms),
    };
    if neigh.max_entries == 0 {
        e.add("neighbour.max_entries", "must be at least 1");
    }
    if neigh.max_probes == 0 {
        e.add("neighbour.max_probes", "must be at least 1");
    }
    if neigh.retrans_ms == 0 {
        e.add("neighbour.retrans_ms", "must be at least 1");
    }
    neigh
}

/// Validates `[[neighbour.static]]`; `names` are the interfaces the ports define.
pub(super) fn statics(raw: &NeighFile, names: &Names, e: &mut Errs) -> Vec<StaticNeighbour> {
    let mut neighbours = Vec::new();
    for (si, s) in raw.statics.iter().enumerate() {
        let key = format!("neighbour.static[{si}]");
        let ip = e.parse::<Ipv4Addr>(&format!("{key}.ip"), &s.ip, "an IPv4 address");
        let mac = e.parse::<MacAddr>(&format!("{key}.mac"), &s.mac, "a MAC address");
        let dev = names.iface(&s.dev);
        if dev.is_none() {
            e.add(
                format!("{key}.dev"),
                format!("no interface named '{}'", s.dev),
            );
        }
        if let (Some(ip), Some(mac), Some(iface)) = (ip, mac, dev) {
            if !mac.is_unicast() {
                e.add(format!("{key}.mac"), format!("{mac} is not a unicast MAC"));
            }
            neighbours.push(StaticNeighbour { iface, ip, mac });
        }
    }
    neighbours
}
