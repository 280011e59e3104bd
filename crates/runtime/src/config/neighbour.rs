//! `[neighbour]`: the neighbour table's tunables (unset keys keep the stack's defaults)
//! and `[[neighbour.static]]` entries, each on an interface the ports define.
//!
//! Sizes: `max_entries` is at most [`MAX_ENTRIES`] (each worker keeps a table of its
//! own, grown as neighbours appear), and `queue_len`, the wire packets waiting for one
//! unresolved neighbour, when given, at most the pool's buffers (a longer queue could
//! never fill: its limit would never bind). The default (101, Linux's `unres_qlen`) is
//! not held to a small pool.
//!
//! A static entry must be one the table would ever be asked for: a station's MAC (not
//! all zeros, not a group address), for a unicast address that is not ours, on a subnet
//! of its interface (not the subnet's network or broadcast address) or the gateway of a
//! route out of that interface; each address once per interface, and no more entries
//! than `max_entries`. (Linux's `ip neigh add` takes any of these; netbatch's lookups
//! only ever ask for next hops, which are on a subnet or a route's gateway.)
//!
//! An IPv6 entry (`ip` with a `:`) follows the same rules with IPv6's notions: a unicast
//! address (not unspecified, loopback, multicast or IPv4-mapped) that is not ours,
//! on-link for its interface (link-local, which every link has, or on one of the
//! interface's prefixes) or the gateway of an IPv6 route out of it. It goes to the
//! IPv6 (NDP) table, which has its own `max_entries`.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::HashMap;

use netbatch_stack::neigh::NeighParams;
use netbatch_stack::prefix::class;
use netbatch_stack::route::file::Resolve;
use netbatch_stack::route::{Route, Route6};
use netbatch_wire::ethernet::MacAddr;

use super::Errs;
use super::ports::{Names, not_a_station};
use crate::setup::{StaticNeighbour, StaticNeighbour6};

/// The most entries `max_entries` may allow: every host of a /8. Each worker's table
/// grows to it under a flood of destinations on a large connected subnet, at about a
/// hundred bytes an entry.
pub(super) const MAX_ENTRIES: usize = 1 << 24;

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

/// Validates the tunables of `[neighbour]`, against the pool's `buffers`.
pub(super) fn tunables(raw: &NeighFile, buffers: u32, e: &mut Errs) -> NeighParams {
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
    } else if neigh.max_entries > MAX_ENTRIES {
        e.add(
            "neighbour.max_entries",
            format!(
                "{} is more than {MAX_ENTRIES} (every host of a /8): each worker's table \
                 could grow past memory",
                neigh.max_entries
            ),
        );
    }
    if raw.queue_len.is_some() && neigh.queue_len > buffers as usize {
        e.add(
            "neighbour.queue_len",
            format!(
                "{} packets waiting per neighbour is more than the {buffers} packet buffers \
                 there are (pool.buffers): the limit could never be reached",
                neigh.queue_len
            ),
        );
    }
    if neigh.max_probes == 0 {
        e.add("neighbour.max_probes", "must be at least 1");
    }
    if neigh.retrans_ms == 0 {
        e.add("neighbour.retrans_ms", "must be at least 1");
    }
    neigh
}

/// Validates `[[neighbour.static]]`: `names` are the interfaces the ports define,
/// `routes` and `routes6` the configured routes (whose gateways may be off-subnet),
/// `max_entries` the size of each family's table. Returns the IPv4 and the IPv6 entries.
pub(super) fn statics(
    raw: &NeighFile,
    names: &Names,
    (routes, routes6): (&[Route], &[Route6]),
    max_entries: usize,
    e: &mut Errs,
) -> (Vec<StaticNeighbour>, Vec<StaticNeighbour6>) {
    let mut neighbours = Vec::new();
    let mut neighbours6 = Vec::new();
    // Each (interface, address) with the first entry that has it.
    let mut seen: HashMap<(u16, IpAddr), usize> = HashMap::new();
    for (si, s) in raw.statics.iter().enumerate() {
        let key = format!("neighbour.static[{si}]");
        let ip = if s.ip.contains(':') {
            e.parse::<Ipv6Addr>(&format!("{key}.ip"), &s.ip, "an IPv6 address")
                .map(IpAddr::V6)
        } else {
            e.parse::<Ipv4Addr>(&format!("{key}.ip"), &s.ip, "an IPv4 address")
                .map(IpAddr::V4)
        };
        let mac = e.parse::<MacAddr>(&format!("{key}.mac"), &s.mac, "a MAC address");
        let dev = names.iface(&s.dev);
        if dev.is_none() {
            e.add(
                format!("{key}.dev"),
                format!("no interface named '{}'", s.dev),
            );
        }
        if let Some(m) = mac
            && let Some(why) = not_a_station(m)
        {
            e.add(
                format!("{key}.mac"),
                format!("{why}; a neighbour has a unicast MAC"),
            );
        }
        let (Some(ip), Some(mac), Some(iface)) = (ip, mac, dev) else {
            continue;
        };
        let why = match ip {
            IpAddr::V4(ip) => unusable(ip, iface, names, routes),
            IpAddr::V6(ip) => unusable6(ip, iface, names, routes6),
        };
        if let Some(why) = why {
            e.add(format!("{key}.ip"), why);
        } else if let Some(first) = seen.insert((iface, ip), si) {
            e.add(
                format!("{key}.ip"),
                format!(
                    "{ip} on {} is also neighbour.static[{first}]: one entry per address",
                    s.dev
                ),
            );
        }
        match ip {
            IpAddr::V4(ip) => neighbours.push(StaticNeighbour { iface, ip, mac }),
            IpAddr::V6(ip) => neighbours6.push(StaticNeighbour6 { iface, ip, mac }),
        }
    }
    for (n, what) in [(neighbours.len(), ""), (neighbours6.len(), "IPv6 ")] {
        if n > max_entries {
            e.add(
                "neighbour.static",
                format!(
                    "{n} static {what}neighbours do not fit a table of neighbour.max_entries = \
                     {max_entries}"
                ),
            );
        }
    }
    (neighbours, neighbours6)
}

/// Why a static IPv6 neighbour `ip` on interface `iface` would never be used, if it
/// would not: no unicast address; one of ours; neither link-local (every link's,
/// RFC 4291 2.5.6), nor on an on-link prefix of its interface (RFC 4861 2.1), nor the
/// gateway of an IPv6 route out of it.
fn unusable6(ip: Ipv6Addr, iface: u16, names: &Names, routes6: &[Route6]) -> Option<String> {
    let s = ip.segments();
    let class = if ip.is_unspecified() {
        Some("the unspecified address (RFC 4291 2.5.2)")
    } else if ip.is_loopback() {
        Some("the loopback address (RFC 4291 2.5.3)")
    } else if ip.is_multicast() {
        Some(
            "a multicast group (ff00::/8), whose link-layer address is derived, not resolved (RFC 2464 7)",
        )
    } else if s[..5] == [0; 5] && s[5] == 0xffff {
        Some("IPv4-mapped (::ffff:0:0/96, RFC 4291 2.5.5.2)")
    } else {
        None
    };
    if let Some(c) = class {
        return Some(format!("{ip} is {c}, not a neighbour's address"));
    }
    let (dev, _) = names.get(iface)?;
    let (addrs, ll) = names.get6(iface)?;
    if ip == ll {
        return Some(format!(
            "{ip} is the link-local address of {dev}, not a neighbour's"
        ));
    }
    if let Some((i, _)) = names.addrs6().find(|(_, a)| a.addr == ip) {
        let (other, _) = names.get(i)?;
        return Some(format!("{ip} is an address of {other}, not a neighbour's"));
    }
    if netbatch_wire::ipv6::is_link_local(ip) || addrs.iter().any(|a| a.subnet().contains(ip)) {
        return None;
    }
    if routes6.iter().any(|r| {
        r.next_hops()
            .any(|h| h.out_if == iface && h.gateway == Some(ip))
    }) {
        return None;
    }
    let prefixes: Vec<String> = addrs.iter().map(|a| a.subnet().to_string()).collect();
    Some(format!(
        "{ip} is off-link for {dev}: not link-local, on no prefix of it ({}) and no IPv6 \
         route's gateway through it, so it would never be looked up",
        if prefixes.is_empty() {
            "it has no IPv6 prefix".to_string()
        } else {
            prefixes.join(", ")
        }
    ))
}

/// Why a static neighbour `ip` on interface `iface` would never be used, if it would not.
fn unusable(ip: Ipv4Addr, iface: u16, names: &Names, routes: &[Route]) -> Option<String> {
    let bits = u32::from(ip);
    if class::is_martian_source(bits) {
        return Some(format!("{ip} is not a unicast host address"));
    }
    if let Some((i, _)) = names.addrs().find(|(_, a)| a.addr == ip) {
        let (other, _) = names.get(i)?;
        return Some(format!("{ip} is an address of {other}, not a neighbour's"));
    }
    let (dev, addrs) = names.get(iface)?;
    for a in addrs {
        let subnet = a.subnet();
        if a.len <= 30 && ip == subnet.addr() {
            return Some(format!("{ip} is the network address of {subnet} on {dev}"));
        }
        if subnet.broadcast() == Some(ip) {
            return Some(format!(
                "{ip} is the broadcast address of {subnet} on {dev}"
            ));
        }
    }
    if addrs.iter().any(|a| a.subnet().contains(ip)) {
        return None;
    }
    // Off-subnet: used only as the gateway of a route out of this interface (the route
    // table's `dev` may put a gateway beyond the connected subnets, as `onlink` does),
    // any next hop of a multipath route included.
    if routes.iter().any(|r| {
        r.next_hops()
            .any(|h| h.out_if == iface && h.gateway == Some(ip))
    }) {
        return None;
    }
    let subnets: Vec<String> = addrs.iter().map(|a| a.subnet().to_string()).collect();
    Some(format!(
        "{ip} is on no subnet of {dev} ({}) and no route's gateway through it: it would \
         never be looked up",
        if subnets.is_empty() {
            "it has no address".to_string()
        } else {
            subnets.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;
    use super::MAX_ENTRIES;

    const PORTS: &str = r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
        [[port]]
        name = "eth1"
        mac = "02:00:00:00:00:02"
        addresses = ["198.51.100.1/24"]
        [[port]]
        name = "bare"
        mac = "02:00:00:00:00:03"
        addresses = []
        [[route]]
        prefix = "203.0.113.0/24"
        via = "100.64.0.1"
        dev = "eth1"
    "#;

    fn entry(ip: &str, mac: &str, dev: &str) -> String {
        format!("[[neighbour.static]]\nip = \"{ip}\"\nmac = \"{mac}\"\ndev = \"{dev}\"\n")
    }

    fn errors(text: &str) -> Vec<(String, String)> {
        match parse(text) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|x| (x.key, x.reason)).collect(),
        }
    }

    /// An off-subnet gateway of any next hop of a multipath route out of the interface
    /// is one the table is asked for (the second next hop here); a gateway of none is not.
    #[test]
    fn a_multipath_next_hop_gateway_may_be_a_static_neighbour() {
        let m = "02:00:00:00:00:aa";
        let route = r#"
        [[route]]
        prefix = "198.18.0.0/15"
        nexthops = [{ via = "192.0.2.7" }, { via = "100.64.0.9", dev = "eth0", weight = 2 }]
        "#;
        let ok = [PORTS, route, &entry("100.64.0.9", m, "eth0")].concat();
        assert_eq!(errors(&ok), Vec::new());
        let bad = [PORTS, route, &entry("100.64.0.10", m, "eth0")].concat();
        let e = errors(&bad);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].1.contains("no route's gateway"), "{e:?}");
    }

    /// A static entry the table would never be asked for is refused: off every subnet of
    /// its interface (unless a route's gateway through it), our own address, a subnet's
    /// network or broadcast address, a non-unicast address or MAC, a repeat. On its
    /// subnet, or as an off-subnet gateway of a route out of its interface, it is fine.
    #[test]
    fn a_static_neighbour_must_be_one_the_table_is_asked_for() {
        let m = "02:00:00:00:00:aa";
        let text = [
            PORTS.to_string(),
            entry("192.0.2.10", m, "eth0"),
            entry("100.64.0.1", m, "eth1"),
            entry("198.51.100.7", m, "eth0"),
            entry("100.64.0.1", m, "eth0"),
            entry("192.0.2.1", m, "eth0"),
            entry("198.51.100.1", m, "eth0"),
            entry("192.0.2.255", m, "eth0"),
            entry("192.0.2.0", m, "eth0"),
            entry("224.0.0.1", m, "eth0"),
            entry("192.0.2.11", "00:00:00:00:00:00", "eth0"),
            entry("192.0.2.12", "01:00:5e:00:00:01", "eth0"),
            entry("192.0.2.10", "02:00:00:00:00:bb", "eth0"),
            entry("192.0.2.13", m, "bare"),
        ]
        .concat();
        let want = [
            (
                "neighbour.static[2].ip",
                "198.51.100.7 is on no subnet of eth0 (192.0.2.0/24) and no route's gateway",
            ),
            (
                "neighbour.static[3].ip",
                "100.64.0.1 is on no subnet of eth0",
            ),
            ("neighbour.static[4].ip", "192.0.2.1 is an address of eth0"),
            (
                "neighbour.static[5].ip",
                "198.51.100.1 is an address of eth1",
            ),
            (
                "neighbour.static[6].ip",
                "the broadcast address of 192.0.2.0/24 on eth0",
            ),
            (
                "neighbour.static[7].ip",
                "the network address of 192.0.2.0/24 on eth0",
            ),
            ("neighbour.static[8].ip", "not a unicast host address"),
            ("neighbour.static[9].mac", "no station's address"),
            ("neighbour.static[10].mac", "group (multicast) address"),
            (
                "neighbour.static[11].ip",
                "192.0.2.10 on eth0 is also neighbour.static[0]",
            ),
            (
                "neighbour.static[12].ip",
                "on no subnet of bare (it has no address)",
            ),
        ];
        let got = errors(&text);
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for ((k, r), (wk, wr)) in got.iter().zip(want) {
            assert_eq!(k, wk, "{got:#?}");
            assert!(r.contains(wr), "{k}: «{r}» lacks «{wr}»");
        }
    }

    /// The sizes: a per-neighbour queue given longer than the pool could never fill (the
    /// default is left alone); a table above 2^24 entries could outgrow memory; more
    /// static entries than the table holds cannot all be added.
    #[test]
    fn sizes_must_fit_the_pool_and_the_table() {
        let text = format!(
            "[pool]\nbuffers = 64\ncache_size = 16\n[neighbour]\nqueue_len = 65\n\
             max_entries = {}\n{PORTS}",
            MAX_ENTRIES + 1
        );
        let got = errors(&text);
        let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["neighbour.max_entries", "neighbour.queue_len"],
            "{got:#?}"
        );
        assert!(got[0].1.contains("more than 16777216"), "{got:#?}");
        assert!(
            got[1].1.contains("more than the 64 packet buffers"),
            "{got:#?}"
        );
        let fits = format!(
            "[pool]\nbuffers = 64\ncache_size = 16\n[neighbour]\nqueue_len = 64\n\
             max_entries = {MAX_ENTRIES}\n{PORTS}"
        );
        assert_eq!(errors(&fits), []);
        assert_eq!(
            errors(&format!("[pool]\nbuffers = 64\ncache_size = 16\n{PORTS}")),
            []
        );
        let full = format!(
            "[neighbour]\nmax_entries = 1\n{PORTS}{}{}",
            entry("192.0.2.10", "02:00:00:00:00:aa", "eth0"),
            entry("192.0.2.11", "02:00:00:00:00:aa", "eth0")
        );
        let got = errors(&full);
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!(got[0].0, "neighbour.static");
        assert!(
            got[0].1.contains("2 static neighbours do not fit"),
            "{got:#?}"
        );
    }

    /// A static IPv6 neighbour goes to `neighbours6` when the table would be asked for
    /// it: a link-local address (on any link), an address on one of its interface's
    /// prefixes, or the gateway of an IPv6 route out of it; refused, at its key: off-link
    /// (on another interface's prefix, or none), ours (global, or its interface's own
    /// link-local address, derived from 02:00:00:00:00:01 as fe80::ff:fe00:1, RFC 4291
    /// appendix A), not unicast, and a repeat.
    #[test]
    fn static_ipv6_neighbours_must_be_on_link() {
        let ports = r#"
            [[port]]
            name = "eth0"
            mac = "02:00:00:00:00:01"
            addresses = ["192.0.2.1/24", "2001:db8:a::1/64"]
            [[port]]
            name = "eth1"
            mac = "02:00:00:00:00:02"
            addresses = ["198.51.100.1/24", "2001:db8:b::1/64"]
            [[route]]
            prefix = "2001:db8:7::/48"
            via = "2001:db8:ff::1"
            dev = "eth1"
        "#;
        let m = "02:00:00:00:00:aa";
        let good = [
            entry("fe80::1", m, "eth0"),
            entry("2001:db8:a::9", m, "eth0"),
            entry("2001:db8:ff::1", m, "eth1"),
            entry("192.0.2.9", m, "eth0"),
        ];
        let c = parse(&format!("{ports}{}", good.concat())).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(u16, String)> = c
            .neighbours6
            .iter()
            .map(|n| (n.iface, n.ip.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                (0, "fe80::1".to_string()),
                (0, "2001:db8:a::9".to_string()),
                (1, "2001:db8:ff::1".to_string())
            ]
        );
        assert_eq!(c.neighbours.len(), 1);
        let bad = [
            entry("2001:db8:b::9", m, "eth0"),
            entry("2001:db8:ff::1", m, "eth0"),
            entry("2001:db8:a::1", m, "eth1"),
            entry("fe80::ff:fe00:1", m, "eth0"),
            entry("ff02::1", m, "eth0"),
            entry("::", m, "eth0"),
            entry("2001:db8:a::g", m, "eth0"),
            entry("fe80::1", m, "eth0"),
            entry("fe80::1", m, "eth0"),
        ];
        let want = [
            (
                "neighbour.static[0].ip",
                "2001:db8:b::9 is off-link for eth0: not link-local, on no prefix of it (2001:db8:a::/64) and no IPv6 route's gateway through it",
            ),
            (
                "neighbour.static[1].ip",
                "2001:db8:ff::1 is off-link for eth0",
            ),
            (
                "neighbour.static[2].ip",
                "2001:db8:a::1 is an address of eth0, not a neighbour's",
            ),
            (
                "neighbour.static[3].ip",
                "fe80::ff:fe00:1 is the link-local address of eth0",
            ),
            ("neighbour.static[4].ip", "ff02::1 is a multicast group"),
            ("neighbour.static[5].ip", ":: is the unspecified address"),
            ("neighbour.static[6].ip", "is not an IPv6 address"),
            (
                "neighbour.static[8].ip",
                "fe80::1 on eth0 is also neighbour.static[7]",
            ),
        ];
        let got = errors(&format!("{ports}{}", bad.concat()));
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for ((k, r), (wk, wr)) in got.iter().zip(want) {
            assert_eq!(k, wk, "{got:#?}");
            assert!(r.contains(wr), "{k}: «{r}» lacks «{wr}»");
        }
    }
}
