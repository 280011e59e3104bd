//! `ip6-forward`: the IPv6 twin of `ip4-forward`. 78-byte frames on the wire (74 + FCS:
//! Ethernet, IPv6, UDP, 12 bytes of payload; the smallest IPv6 frame benchmarks use) of
//! 1024 UDP flows received on `gen0`, routed by a FIB of generated IPv6 prefixes
//! ([`netbatch_stack::fib6::generate_prefixes`]: mostly /48, many /32–/44, some
//! /56–/64), forwarded out of `gen1` to one of four next hops.
//!
//! The FIB size is a variant axis (`--fib6 10000,200000`): each size is generated once
//! with a fixed seed and shared by every variant of that size. Flow destinations are
//! drawn inside the generated prefixes (random host bits), so lookups hit many different
//! entries at every depth of the tree. Addresses of the ports, sources and next hops are
//! in the documentation prefix 2001:db8::/32, which the generated table never covers.
//! As in `ip4-forward` the generator sends each flow's template unchanged.

use core::net::Ipv6Addr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use netbatch_engine::{Dispatch, Pool};
use netbatch_ports::generator::{FlowSpec, L4};
use netbatch_runtime::build::{self, Builder};
use netbatch_runtime::config::{Config, PortConfig};
use netbatch_runtime::setup::StaticNeighbour6;
use netbatch_stack::fib6::{Ipv6Prefix, generate_prefixes, mask6};
use netbatch_stack::route::{Route6, RouteKind, Routes6};
use netbatch_wire::ethernet::MacAddr;

use super::forward::{Rng, gen_ports};
use super::scenarios::{Bench, Common, Expect, Variant, WorkerBench, config, port};

const GEN0_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 0]);
const GEN1_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 1]);
const SENDER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 9, 9]);
/// The receiving port's subnet (the sources live there) and the sending port's.
const GEN0_NET: u128 = 0x2001_0db8_0001_u128 << 80;
const GEN1_NET: u128 = 0x2001_0db8_0002_u128 << 80;
/// Next hops on gen1's subnet: 2001:db8:2::10 to ::13.
const GATEWAYS: [u128; 4] = [
    GEN1_NET | 0x10,
    GEN1_NET | 0x11,
    GEN1_NET | 0x12,
    GEN1_NET | 0x13,
];
/// Payload bytes: 14 + 40 + 8 + 12 = 74 bytes, 78 on the wire with the FCS.
const PAYLOAD: usize = 12;
/// Flows, as `ip4-forward`.
const FLOWS: usize = 1024;
/// The seed of the generated table (the same table in every run).
const SEED: u64 = 0x6e65_7462_6174_6336;

/// `gen0` (2001:db8:1::1/64), which receives, and `gen1` (2001:db8:2::1/64), which only
/// transmits. Each keeps an IPv4 address too, as `ip4-forward`'s ports have.
fn ports() -> anyhow::Result<Vec<PortConfig>> {
    let mut gen0 = port("gen0", GEN0_MAC, "198.51.100.1/24")?;
    gen0.setup.addrs6 = vec!["2001:db8:1::1/64".parse()?];
    let mut gen1 = port("gen1", GEN1_MAC, "192.0.2.1/24")?;
    gen1.setup.addrs6 = vec!["2001:db8:2::1/64".parse()?];
    gen1.rx_workers.clear();
    Ok(vec![gen0, gen1])
}

/// `n` generated prefixes as unicast routes out of gen1 via the four gateways (the
/// generator's value picks the gateway).
pub(crate) fn generate_routes6(n: usize) -> Vec<Route6> {
    generate_prefixes(n, SEED)
        .into_iter()
        .map(|(p, hop)| {
            let gw = GATEWAYS[hop as usize % GATEWAYS.len()];
            Route6::new(p, RouteKind::Unicast, Some(1), Some(Ipv6Addr::from(gw)))
        })
        .collect()
}

/// A generated IPv6 route table: the table, the flows whose destinations lie inside its
/// prefixes, its load time.
#[derive(Clone)]
struct Table6 {
    table: Arc<Routes6>,
    flows: Vec<FlowSpec>,
    load_ms: f64,
}

/// One table per size for the whole process (the variants of one size share it).
fn shared_table(n: usize) -> anyhow::Result<Table6> {
    static TABLES: OnceLock<std::sync::Mutex<Vec<(usize, Table6)>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    let mut t = tables.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tab)) = t.iter().find(|(k, _)| *k == n) {
        return Ok(tab.clone());
    }
    let mut cfg = Config::new(ports()?);
    cfg.routes6 = generate_routes6(n);
    let t0 = Instant::now();
    let table = Arc::new(build::route_table6(&cfg)?);
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "ip6-forward: {} routes loaded in {load_ms:.0} ms ({} KiB FIB)",
        table.len(),
        table.fib_bytes() >> 10
    );
    let tab = Table6 {
        table,
        flows: flows(&cfg.routes6, FLOWS),
        load_ms,
    };
    t.push((n, tab.clone()));
    Ok(tab)
}

/// `count` flows whose destinations lie inside the generated routes, from sources on
/// gen0's subnet (never its own address).
fn flows(routes: &[Route6], count: usize) -> Vec<FlowSpec> {
    let mut rng = Rng(42);
    (0..count)
        .map(|i| {
            let r = &routes[(rng.next() % routes.len() as u64) as usize];
            let p: Ipv6Prefix = r.prefix;
            let host =
                ((u128::from(rng.next()) << 64) | u128::from(rng.next())) & !mask6(p.prefix_len());
            FlowSpec {
                src_mac: SENDER_MAC,
                dst_mac: GEN0_MAC,
                vlan: None,
                src: Ipv6Addr::from(GEN0_NET | 0x100 | (i as u128 % 200)).into(),
                dst: Ipv6Addr::from(p.bits() | host).into(),
                l4: L4::Udp,
                sport: 1024 + i as u16,
                dport: 9,
                payload_len: PAYLOAD,
                ttl: 64,
                dont_frag: false,
            }
        })
        .collect()
}

/// Builds an `ip6-forward` variant over the shared table of its FIB size.
pub(crate) fn build_forward6(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    let n = v.fib.context("ip6-forward needs a FIB size")?;
    let Table6 {
        table,
        flows,
        load_ms,
    } = shared_table(n)?;
    let mut cfg = config(v, c, ports()?, Dispatch::Buckets);
    cfg.neighbours6 = GATEWAYS
        .iter()
        .enumerate()
        .map(|(i, &ip)| StaticNeighbour6 {
            iface: 1,
            ip: Ipv6Addr::from(ip),
            mac: MacAddr([0x02, 0, 0, 0, 2, i as u8]),
        })
        .collect();
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("pool")?;
    let room = pool.config().room();
    let ports = gen_ports(flows, c, room)?;
    let w = Builder::new(&cfg).routes6(table).worker(ports, pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![
            ("routes6".into(), n as u64),
            ("route_load_us".into(), (load_ms * 1e3) as u64),
        ],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flow's destination is covered by a generated route and by none of the
    /// ports' subnets, and no source is one of the ports' addresses.
    #[test]
    fn flows_hit_generated_routes() {
        let routes = generate_routes6(2_000);
        assert_eq!(routes.len(), 2_000);
        let fl = flows(&routes, FLOWS);
        let doc: Ipv6Prefix = "2001:db8::/32".parse().unwrap();
        for f in &fl {
            let (core::net::IpAddr::V6(s), core::net::IpAddr::V6(d)) = (f.src, f.dst) else {
                panic!("not IPv6: {f:?}")
            };
            assert!(routes.iter().any(|r| r.prefix.contains(d)), "{d}");
            assert!(!doc.contains(d), "{d}");
            assert!(doc.contains(s) && u128::from(s) != GEN0_NET | 1, "{s}");
        }
        let distinct: std::collections::HashSet<_> = fl.iter().map(|f| f.dst).collect();
        assert!(distinct.len() > FLOWS * 9 / 10);
    }
}
