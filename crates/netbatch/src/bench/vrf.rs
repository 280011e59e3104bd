//! `ip4-forward-vrf` and `ip4-forward-vrf1`: `ip4-forward` through VRFs. `gen0` has
//! `--vrfs` VLAN interfaces (VIDs 1 to N), each in a VRF of its own with the same
//! address (198.51.100.1/24: the VRFs overlap); each VRF's table holds `--vrf-routes`
//! generated routes (a default route, and prefixes clustered in a /12 of the VRF's own,
//! as a tenant's table is: mostly /24, some /20–/23, a few /25–/32) leaked to main's
//! `gen1` (`dev gen1`, four gateways). `ip4-forward-vrf` spreads its 1024 flows over
//! every VRF (flow `i` on VLAN `i mod N + 1`), `ip4-forward-vrf1` sends them all into
//! VRF 1 of the same configuration: the ratio of their cycles per packet is what the
//! number of VRFs costs a lookup.
//!
//! Memory: the VRFs' tables are built once (shared by the variants), and the process's
//! resident memory (`/proc/self/statm`) is read before and after: the growth over the
//! number of VRFs is what a VRF costs (its compact IPv4 FIB, its route and hop maps),
//! printed with a plain DIR-24-8 table of the same routes for comparison.

use core::net::Ipv4Addr;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use netbatch_engine::{Dispatch, Pool};
use netbatch_ports::generator::{FlowSpec, L4};
use netbatch_runtime::build::Builder;
use netbatch_runtime::config::{Config, PortConfig, VrfConfig};
use netbatch_runtime::setup::IfaceSetup;
use netbatch_stack::iface::Tags;
use netbatch_stack::prefix::{Ipv4Prefix, mask};
use netbatch_stack::route::rule::{Policy, Policy6};
use netbatch_stack::route::{Route, RouteKind, Routes};

use super::forward::{GATEWAYS, GEN0_MAC, GEN1_MAC, Rng, SENDER_MAC, gen_ports};
use super::scenarios::{Bench, Common, Expect, Variant, WorkerBench, config, port};

/// The interface index of `gen1` (after `gen0`'s untagged interface and its VLANs).
fn gen1_if(vrfs: usize) -> u16 {
    (vrfs + 1) as u16
}

/// The table of VRF `i` (from 0).
fn table_of(i: usize) -> u32 {
    1000 + i as u32
}

/// `n` distinct routes of VRF `vrf`: a default route, and the rest clustered in a /12 of
/// its own (mostly /24, then /20–/23, /25–/30 and /32), each via one of the gateways out
/// of `gen1` (interface `out_if`).
fn vrf_routes(vrf: usize, n: usize, out_if: u16) -> Vec<Route> {
    let mut rng = Rng(0x7672_6600 + vrf as u64);
    // A /12 with a first octet of 11 to 100: no special-purpose range.
    let base = ((11 + (rng.next() % 90) as u32) << 24) | (((rng.next() % 16) as u32) << 20);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    let mut add = |out: &mut Vec<Route>, p: Ipv4Prefix, gw: Ipv4Addr| {
        if out.len() < n && seen.insert(p) {
            out.push(Route::new(p, RouteKind::Unicast, Some(out_if), Some(gw)));
        }
    };
    if n > 0 {
        add(
            &mut out,
            Ipv4Prefix::truncating(Ipv4Addr::UNSPECIFIED, 0),
            GATEWAYS[0],
        );
    }
    while out.len() < n {
        let r = rng.next();
        let len = match r % 100 {
            0..=79 => 24,
            80..=94 => 20 + (r >> 8) as u8 % 4,
            95..=98 => 25 + (r >> 8) as u8 % 6,
            _ => 32,
        };
        let a = base | ((r >> 16) as u32 & 0x000f_ffff);
        let p = Ipv4Prefix::truncating(Ipv4Addr::from(a & mask(len)), len);
        add(&mut out, p, GATEWAYS[(r >> 40) as usize % GATEWAYS.len()]);
    }
    out
}

/// Resident bytes of this process now.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The configuration both variants share: its routes (by VRF), and what building them
/// cost.
#[derive(Clone)]
struct Shared {
    cfg: Config,
    routes: Arc<Vec<Vec<Route>>>,
    per_vrf_bytes: u64,
}

/// The configurations built so far, by (VRFs, routes in each).
type Built = std::sync::Mutex<Vec<((usize, usize), Shared)>>;

/// One configuration per (VRFs, routes) for the whole process.
fn shared(c: &Common) -> anyhow::Result<Shared> {
    static ALL: OnceLock<Built> = OnceLock::new();
    let all = ALL.get_or_init(Default::default);
    let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
    let key = (c.vrfs, c.vrf_routes);
    if let Some((_, s)) = all.iter().find(|(k, _)| *k == key) {
        return Ok(s.clone());
    }
    let n = c.vrfs;
    let mut gen0 = port("gen0", GEN0_MAC, "198.51.100.1/24")?;
    gen0.setup.vlans = (0..n)
        .map(|i| IfaceSetup {
            name: format!("gen0.{}", i + 1),
            tags: Tags::Dot1q((i + 1) as u16),
            addrs: vec!["198.51.100.1/24".parse().expect("address")],
            addrs6: Vec::new(),
        })
        .collect();
    let mut gen1 = port("gen1", GEN1_MAC, "192.0.2.1/24")?;
    gen1.rx_workers.clear();
    let mut cfg = Config::new(vec![gen0, gen1]);
    cfg.vrfs = (0..n)
        .map(|i| VrfConfig {
            name: format!("v{i}"),
            table: table_of(i),
        })
        .collect();
    cfg.iface_vrfs = std::iter::once(String::new())
        .chain((0..n).map(|i| format!("v{i}")))
        .chain(std::iter::once(String::new()))
        .collect();
    let routes: Vec<Vec<Route>> = (0..n)
        .map(|i| vrf_routes(i, c.vrf_routes, gen1_if(n)))
        .collect();
    cfg.tables = routes
        .iter()
        .enumerate()
        .map(|(i, r)| (table_of(i), r.clone()))
        .collect::<BTreeMap<_, _>>();
    cfg.neighbours = super::forward::gateway_neighbours(gen1_if(n));
    // What the VRFs' tables cost: built alone, before and after.
    let before = rss();
    let t0 = Instant::now();
    let built: (Policy, Policy6) = cfg.policies().context("VRF tables")?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let grown = rss().saturating_sub(before);
    let tables = built.0.tables().len();
    drop(built);
    // A plain (main-like) DIR-24-8 of VRF 0's routes, for comparison.
    let before = rss();
    let mut plain = Routes::new();
    plain.load(routes.first().cloned().unwrap_or_default())?;
    let plain_bytes = rss().saturating_sub(before);
    drop(plain);
    let per_vrf_bytes = grown / n.max(1) as u64;
    eprintln!(
        "ip4-forward-vrf: {n} VRFs of {} routes ({tables} IPv4 tables) built in {ms:.0} ms; \
         resident memory grew {} KiB, {} KiB a VRF (a plain DIR-24-8 of one VRF's routes: {} KiB)",
        c.vrf_routes,
        grown >> 10,
        per_vrf_bytes >> 10,
        plain_bytes >> 10,
    );
    let s = Shared {
        cfg,
        routes: Arc::new(routes),
        per_vrf_bytes,
    };
    all.push((key, s.clone()));
    Ok(s)
}

/// 1024 flows: flow `i` in VRF `i mod vrfs` (on its VLAN), to a destination inside one
/// of that VRF's routes.
fn flows(routes: &[Vec<Route>], vrfs: usize) -> Vec<FlowSpec> {
    let mut rng = Rng(7);
    (0..1024)
        .map(|i| {
            let v = i % vrfs.max(1);
            let table = &routes[v];
            // Not the default route: a prefix of the VRF's own.
            let r = &table[1 + (rng.next() % (table.len().max(2) as u64 - 1)) as usize];
            let host_bits = !mask(r.prefix.prefix_len());
            let dst = r.prefix.bits() | (rng.next() as u32 & host_bits);
            FlowSpec {
                src_mac: SENDER_MAC,
                dst_mac: GEN0_MAC,
                vlan: Some((v + 1) as u16),
                src: Ipv4Addr::new(198, 51, 100, 2 + (i % 200) as u8).into(),
                dst: Ipv4Addr::from(dst).into(),
                l4: L4::Udp,
                sport: 1024 + i as u16,
                dport: 9,
                payload_len: 14, // 64 bytes on the wire with the VLAN tag and the FCS
                ttl: 64,
                dont_frag: false,
            }
        })
        .collect()
}

/// Builds a variant: flows over every VRF (`ip4-forward-vrf`) or all in VRF 1
/// (`ip4-forward-vrf1`).
pub(crate) fn build(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    anyhow::ensure!(
        c.vrfs >= 1 && c.vrf_routes >= 2,
        "--vrfs 1 or more, --vrf-routes 2 or more"
    );
    let s = shared(c)?;
    let spread = if v.scenario == "ip4-forward-vrf1" {
        1
    } else {
        c.vrfs
    };
    let mut cfg = config(v, c, Vec::<PortConfig>::new(), Dispatch::Buckets);
    cfg.ports = s.cfg.ports.clone();
    cfg.vrfs = s.cfg.vrfs.clone();
    cfg.iface_vrfs = s.cfg.iface_vrfs.clone();
    cfg.tables = s.cfg.tables.clone();
    cfg.neighbours = s.cfg.neighbours.clone();
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("pool")?;
    let room = pool.config().room();
    let ports = gen_ports(flows(&s.routes, spread), c, room)?;
    let w = Builder::new(&cfg).worker(ports, pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![
            ("vrfs".into(), c.vrfs as u64),
            ("vrf_routes".into(), c.vrf_routes as u64),
            ("flows_in_vrfs".into(), spread as u64),
            ("resident_bytes_per_vrf".into(), s.per_vrf_bytes),
        ],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vrf_routes_are_distinct_clustered_and_have_a_default() {
        let r = vrf_routes(3, 1000, 9);
        assert_eq!(r.len(), 1000);
        let distinct: HashSet<_> = r.iter().map(|x| x.prefix).collect();
        assert_eq!(distinct.len(), 1000);
        assert_eq!(r[0].prefix.prefix_len(), 0);
        // All but the default in one /12.
        let base = r[1].prefix.bits() & mask(12);
        assert!(r[1..].iter().all(|x| x.prefix.bits() & mask(12) == base));
        assert!(r.iter().all(|x| x.out_if == Some(9)));
    }
}
