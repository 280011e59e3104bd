//! `ip4-forward`: 64-byte frames of 1024 flows received on `gen0`, routed by a FIB of
//! realistic prefix lengths, forwarded out of `gen1` to one of four next hops.
//!
//! The FIB (`--routes`, 10,000 by default, up to a million) is generated once with a
//! fixed seed and shared by every variant. Its length mix follows today's Internet table
//! roughly: mostly /24, many /16–/23, few shorter, a few longer. Flow destinations are
//! drawn inside the generated routes, so lookups hit many different entries.

use core::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use netbatch_engine::{Dispatch, Pool};
use netbatch_ports::Port;
use netbatch_ports::generator::{FlowSpec, GenConfig, GenPort, L4};
use netbatch_runtime::build::{self, Builder};
use netbatch_runtime::config::{Config, PortConfig};
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_stack::prefix::Ipv4Prefix;
use netbatch_stack::route::rule::{Action, Mark, PortRange, Rule};
use netbatch_stack::route::{Route, RouteKind, Routes};
use netbatch_wire::ethernet::MacAddr;

use super::scenarios::{Bench, Common, Expect, Variant, WorkerBench, config, port};

/// Routes per prefix length per million, /8 to /32 (/24 takes what is left).
const MIX: [(u8, u32); 24] = [
    (8, 16),
    (9, 13),
    (10, 37),
    (11, 100),
    (12, 300),
    (13, 600),
    (14, 1_100),
    (15, 2_000),
    (16, 13_000),
    (17, 8_000),
    (18, 14_000),
    (19, 25_000),
    (20, 45_000),
    (21, 50_000),
    (22, 110_000),
    (23, 100_000),
    (25, 4_000),
    (26, 4_000),
    (27, 3_000),
    (28, 3_000),
    (29, 3_000),
    (30, 2_000),
    (31, 500),
    (32, 3_000),
];

/// The seed of the generated routes (every variant and `--export-peer` route the same).
const ROUTE_SEED: u64 = 0x6e65_7462_6174_6368;

pub(super) const GEN0_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 0]);
pub(super) const GEN1_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 1]);
pub(super) const SENDER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 9, 9]);
/// Next hops on gen1's subnet (TEST-NET-1).
pub(super) const GATEWAYS: [Ipv4Addr; 4] = [
    Ipv4Addr::new(192, 0, 2, 10),
    Ipv4Addr::new(192, 0, 2, 11),
    Ipv4Addr::new(192, 0, 2, 12),
    Ipv4Addr::new(192, 0, 2, 13),
];

/// SplitMix64: a small, good, seedable generator (no dependency needed for test data).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `gen0`, which receives, and `gen1`, which only transmits (no worker receives from
/// it: it is never polled).
fn ports() -> anyhow::Result<Vec<PortConfig>> {
    let mut gen1 = port("gen1", GEN1_MAC, "192.0.2.1/24")?;
    gen1.rx_workers.clear();
    Ok(vec![port("gen0", GEN0_MAC, "198.51.100.1/24")?, gen1])
}

/// The generator ports of a forwarding bench: `gen0` receives `flows` in `c`'s order,
/// `gen1` (never polled) only transmits, built from the first flow.
pub(super) fn gen_ports(
    flows: Vec<FlowSpec>,
    c: &Common,
    room: usize,
) -> anyhow::Result<Vec<Box<dyn Port>>> {
    let gen_cfg = GenConfig {
        sequence: false,
        ..GenConfig::new(flows, c.flow_order)
    };
    let gen0 = GenPort::new("gen0", 0, &gen_cfg, room)?;
    let gen1 = GenPort::new(
        "gen1",
        1,
        &GenConfig {
            flows: gen_cfg.flows[..1].to_vec(),
            ..gen_cfg.clone()
        },
        room,
    )?;
    Ok(vec![Box::new(gen0), Box::new(gen1)])
}

/// Generates `n` distinct unicast routes via the four gateways, outside the connected
/// and reserved ranges.
pub(crate) fn generate_routes(n: usize, seed: u64) -> Vec<Route> {
    let mut rng = Rng(seed);
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let total: u32 = MIX.iter().map(|(_, c)| c).sum();
    let mut quota: Vec<(u8, usize)> = MIX
        .iter()
        .map(|&(l, c)| (l, (u64::from(c) * n as u64 / 1_000_000) as usize))
        .collect();
    let assigned: usize = quota.iter().map(|(_, q)| q).sum();
    let _ = total;
    quota.push((24, n.saturating_sub(assigned)));
    for (len, count) in quota {
        let mut made = 0;
        let mut tries = 0;
        while made < count && tries < count * 20 + 1000 {
            tries += 1;
            let a = rng.next() as u32;
            // Public unicast space only: 1.0.0.0 – 223.255.255.255, not 127/8, not the
            // documentation nets we use for interfaces.
            let first = a >> 24;
            if first == 0
                || first == 127
                || first >= 224
                || first == 10
                || first == 192
                || first == 198
            {
                continue;
            }
            let Ok(p) = Ipv4Prefix::new(Ipv4Addr::from(a & netbatch_stack::prefix::mask(len)), len)
            else {
                continue;
            };
            if !seen.insert(p) {
                continue;
            }
            let gw = GATEWAYS[(rng.next() % GATEWAYS.len() as u64) as usize];
            out.push(Route {
                prefix: p,
                kind: RouteKind::Unicast,
                out_if: Some(1),
                gateway: Some(gw),
                multipath: None,
            });
            made += 1;
        }
    }
    out
}

/// A generated route table: the table, 1024 flows whose destinations lie inside its
/// routes, its load time.
#[derive(Clone)]
struct Table {
    table: Arc<Routes>,
    flows: Vec<FlowSpec>,
    load_ms: f64,
}

/// One route table per route count for the whole process (variants share it).
fn shared_table(n: usize) -> anyhow::Result<Table> {
    static TABLES: OnceLock<std::sync::Mutex<Vec<(usize, Table)>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    let mut t = tables.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tab)) = t.iter().find(|(k, _)| *k == n) {
        return Ok(tab.clone());
    }
    let mut cfg = Config::new(ports()?);
    cfg.routes = generate_routes(n, ROUTE_SEED);
    let t0 = Instant::now();
    let table = Arc::new(build::route_table(&cfg)?);
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let (backing, huge) = table.fib_pages();
    eprintln!(
        "ip4-forward: {} routes loaded in {load_ms:.0} ms ({} MiB FIB, its first level on {backing}{})",
        table.len(),
        table.fib_bytes() >> 20,
        huge.map_or_else(String::new, |b| format!(
            ", {} MiB of it in huge pages now",
            b >> 20
        ))
    );
    let tab = Table {
        table,
        flows: flows(&cfg.routes, 1024),
        load_ms,
    };
    t.push((n, tab.clone()));
    Ok(tab)
}

/// 1024 flows whose destinations lie inside the generated routes.
fn flows(routes: &[Route], count: usize) -> Vec<FlowSpec> {
    let mut rng = Rng(42);
    (0..count)
        .map(|i| {
            let r = &routes[(rng.next() % routes.len() as u64) as usize];
            let host_bits = !netbatch_stack::prefix::mask(r.prefix.prefix_len());
            let dst = r.prefix.bits() | (rng.next() as u32 & host_bits);
            FlowSpec {
                src_mac: SENDER_MAC,
                dst_mac: GEN0_MAC,
                vlan: None,
                src: Ipv4Addr::new(198, 51, 100, 2 + (i % 200) as u8).into(),
                dst: Ipv4Addr::from(dst).into(),
                l4: L4::Udp,
                sport: 1024 + i as u16,
                dport: 9,
                payload_len: 18, // 14 + 20 + 8 + 18 = 60 bytes, 64 on the wire with the FCS
                ttl: 64,
                dont_frag: false,
            }
        })
        .collect()
}

/// Writes what `ip4-forward` routes with `routes` routes, for a peer fed the same work:
/// `DIR/ip4-forward.routes` (`PREFIX GATEWAY`, one route per line, all out of `gen1`) and
/// `DIR/ip4-forward.pcap` (one frame of each of the 1024 flows, in the generator's order).
pub(crate) fn export_peer(dir: &std::path::Path, routes: usize) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let table = generate_routes(routes, ROUTE_SEED);
    let mut text = String::new();
    for r in &table {
        let gw = r.gateway.map_or_else(|| "-".to_string(), |g| g.to_string());
        let _ = writeln!(text, "{} {gw}", r.prefix);
    }
    let path = dir.join("ip4-forward.routes");
    std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
    let flows = flows(&table, 1024);
    let gen_cfg = GenConfig {
        sequence: false,
        ..GenConfig::new(flows, netbatch_ports::generator::FlowOrder::Interleaved)
    };
    let port = GenPort::new("gen0", 0, &gen_cfg, 2048)?;
    let frames: Vec<netbatch_ports::pcap::CapturedFrame> = (0..port.flows())
        .filter_map(|i| port.frame_for(i, 0))
        .map(|bytes| netbatch_ports::pcap::CapturedFrame { ts_ns: 0, bytes })
        .collect();
    let path = dir.join("ip4-forward.pcap");
    netbatch_ports::pcap::write_pcap(&path, &frames)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    eprintln!(
        "ip4-forward: {} routes and {} frames written to {}",
        table.len(),
        frames.len(),
        dir.display()
    );
    Ok(())
}

/// The four gateways as static neighbours on interface `iface` (each its own MAC), so
/// that no forwarding scenario resolves a neighbour while it is measured.
pub(super) fn gateway_neighbours(iface: u16) -> Vec<StaticNeighbour> {
    GATEWAYS
        .iter()
        .enumerate()
        .map(|(i, &ip)| StaticNeighbour {
            iface,
            ip,
            mac: MacAddr([0x02, 0, 0, 0, 2, i as u8]),
        })
        .collect()
}

/// A forwarding variant's configuration: `gen0` receiving, `gen1` sending to the four
/// gateways, which are static neighbours.
fn forward_config(v: &Variant, c: &Common) -> anyhow::Result<Config> {
    let mut cfg = config(v, c, ports()?, Dispatch::Buckets);
    cfg.neighbours = gateway_neighbours(1);
    Ok(cfg)
}

/// Numbered route tables by number.
type Tables = std::collections::BTreeMap<u32, Vec<Route>>;

/// `ip4-forward-rules`' policy: `n` rules (priorities 100 on) before the default ones,
/// none matching the benchmark's frames, each looking up a numbered table of one route
/// (an empty table would be as none). They cycle through the selectors an edge router's
/// rules use: a source prefix, a firewall mark, the other port as `iif`, a destination
/// prefix, TCP to a port range and a TOS, so that the rules' key holds the frames' source,
/// destination, ports, mark, TOS and input port, and runs of one flow are what the route
/// stage can reuse a decision for, not the whole list.
fn policy_rules(n: usize) -> anyhow::Result<(Vec<Rule>, Tables)> {
    let mut rules = Vec::with_capacity(n);
    let mut tables = std::collections::BTreeMap::new();
    for i in 0..n {
        let (pref, table) = (100 + i as u32, 100 + i as u32);
        let mut r = Rule::new(pref, Action::Lookup(table));
        let octet = (i % 250) as u8;
        match i % 6 {
            // TEST-NET-3: none of the frames come from it.
            0 => r.from = Some(Ipv4Prefix::new(Ipv4Addr::new(203, 0, 113, octet), 32)?),
            1 => r.fwmark = Some(Mark::linux(0x100 + i as u32, Some(0xffff))),
            // gen1 only transmits.
            2 => r.iif = Some(1),
            // 192.0.2.0/24 is gen1's own subnet: no flow is sent to it.
            3 => r.to = Some(Ipv4Prefix::new(Ipv4Addr::new(192, 0, 2, octet), 32)?),
            4 => {
                r.ipproto = Some(6);
                r.dport = Some(PortRange::new(22, 25)?);
            }
            _ => r.tos = Some(0x10),
        }
        rules.push(r);
        tables.insert(
            table,
            vec![Route {
                prefix: Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 0)?,
                kind: RouteKind::Unicast,
                out_if: Some(1),
                gateway: Some(GATEWAYS[i % GATEWAYS.len()]),
                multipath: None,
            }],
        );
    }
    Ok((rules, tables))
}

/// Builds an `ip4-forward` variant over the shared table built from the generated
/// routes (which stands for the configuration's routes); `ip4-forward-rules` adds
/// `--policy-rules` rules before the main table ([`policy_rules`]).
pub(crate) fn build_forward(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    let Table {
        table,
        flows,
        load_ms,
    } = shared_table(c.routes)?;
    let mut cfg = forward_config(v, c)?;
    if v.scenario == "ip4-forward-rules" {
        (cfg.rules, cfg.tables) = policy_rules(c.policy_rules)?;
    }
    if v.workers > 1 {
        return super::team::build_forward_team(v, c, cfg, table, flows, None);
    }
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("pool")?;
    let room = pool.config().room();
    let ports = gen_ports(flows, c, room)?;
    let w = Builder::new(&cfg).routes(table).worker(ports, pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![
            ("routes".into(), c.routes as u64),
            ("route_load_us".into(), (load_ms * 1e3) as u64),
            ("policy_rules".into(), cfg.rules.len() as u64),
        ],
    }))
}

/// `ct-forward`: `ip4-forward`'s 1024 flows of 64-byte UDP through a FORWARD chain that
/// accepts only `ct state established` (policy drop), with conntrack on. Each flow's
/// connection is established before the run (its first datagram and a reply tracked, as
/// after a first exchange), so every packet is a lookup, a state update and the rule.
pub(crate) fn build_ct_forward(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    build_tracked_forward(v, c, false, false)
}

/// `nat44-forward`: `ct-forward` with source NAT: a POSTROUTING NAT chain `snat to
/// 198.18.0.1` (RFC 2544's benchmarking range) over every flow, each flow's translation
/// made as its first packet would make it (port preservation where free, the search
/// else) before the run, so every packet is the lookup, the rule and the rewrite of its
/// source address and port with their checksums.
pub(crate) fn build_nat44_forward(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    build_tracked_forward(v, c, true, false)
}

/// `nat44-offload`: `nat44-forward` whose FORWARD rule offloads what it accepts
/// (`offload = true`, nftables' `flow add @ft`): each flow's first packet in the run
/// takes the whole path and records its direction, the next ones are forwarded by
/// `ct-in` (tracked, translated, TTL, on to the neighbour stage).
pub(crate) fn build_nat44_offload(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    build_tracked_forward(v, c, true, true)
}

fn build_tracked_forward(
    v: &Variant,
    c: &Common,
    snat: bool,
    offload: bool,
) -> anyhow::Result<Box<dyn Bench>> {
    use netbatch_stack::ct::{self, ConnTrack, Found, Kind, Seen, Tuple};
    use netbatch_stack::filter::{Chain, CtMatch, HookPoint, Rule, Verdict};
    use netbatch_stack::nat;
    let Table {
        table,
        flows,
        load_ms,
    } = shared_table(c.routes)?;
    let mut cfg = forward_config(v, c)?;
    let ct_cfg = ct::Config {
        max: 65_536,
        ..ct::Config::default()
    };
    cfg.graph.conntrack = Some(ct_cfg.clone());
    let mut est = Rule::any(Verdict::Accept);
    est.ct = Some(CtMatch {
        state: ct::state_bit::ESTABLISHED,
        ..CtMatch::default()
    });
    est.offload = offload;
    cfg.graph.chains.push((
        HookPoint::Forward,
        Chain {
            rules: vec![est],
            policy: Verdict::Drop,
        },
    ));
    let nat_addr = u32::from(Ipv4Addr::new(198, 18, 0, 1));
    if snat {
        cfg.graph.nat = Some(nat::Config {
            postrouting: nat::NatChain {
                rules: vec![nat::NatRule {
                    matches: Rule::any(Verdict::Accept),
                    action: nat::Action::Snat {
                        addrs: (nat_addr, nat_addr),
                        ports: None,
                    },
                }],
            },
            ..nat::Config::default()
        });
    }
    // Each flow established as after a first exchange (its translation made as its
    // first packet would make it), in the table of the worker that receives it.
    let establish = |flows: &[FlowSpec], buffers: usize| -> ConnTrack {
        let mut tracked = ConnTrack::new(&ct_cfg, buffers);
        let now = netbatch_engine::time::mono_ns();
        for f in flows {
            let (core::net::IpAddr::V4(s), core::net::IpAddr::V4(d)) = (f.src, f.dst) else {
                continue;
            };
            let first = Seen {
                tuple: Tuple::v4(s, d, 17, f.sport, f.dport),
                kind: Kind::Datagram,
                wire: 1,
                bytes: 60,
            };
            let mut reply_tuple = first.tuple.invert();
            if let Found::New(i) = tracked.track(&first, now) {
                if snat && let Some(e) = tracked.table.get(i).copied() {
                    let ConnTrack { table, nat, .. } = &mut tracked;
                    if let Ok(r) = nat::pick_source(
                        &e.tuple,
                        (nat_addr, nat_addr),
                        None,
                        ct_cfg.seed,
                        |t| table.lookup(t, now).is_some(),
                        None,
                        nat,
                    ) && let Some(e) = table.get_mut(i)
                    {
                        e.tuple[1] = r;
                        e.status |= ct::status::SRC_NAT;
                        reply_tuple = r;
                    }
                }
                tracked.confirm(i, now);
            }
            let reply = Seen {
                tuple: reply_tuple,
                ..first
            };
            tracked.track(&reply, now);
        }
        tracked
    };
    if v.workers > 1 {
        // Several workers, each its own receive queue of its share of the flows (as
        // RSS spreads them), each share established in its worker's own table.
        let init = |mine: &[FlowSpec], h: &mut netbatch_stack::host::Host, buffers: usize| {
            h.ct = Some(Box::new(establish(mine, buffers)));
        };
        return super::team::build_forward_team(v, c, cfg, table, flows, Some(&init));
    }
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("pool")?;
    let room = pool.config().room();
    let buffers = pool.config().buffers as usize;
    let tracked = establish(&flows, buffers);
    let established = tracked.table.len() as u64;
    let ports = gen_ports(flows, c, room)?;
    let mut w = Builder::new(&cfg).routes(table).worker(ports, pool)?;
    w.host.ct = Some(Box::new(tracked));
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![
            ("routes".into(), c.routes as u64),
            ("route_load_us".into(), (load_ms * 1e3) as u64),
            ("established_flows".into(), established),
        ],
    }))
}

/// `ct-setup`: new connections per second. 65,536 UDP flows of 64-byte datagrams (each
/// its own source address and port) through conntrack with a 4,096-entry table and a
/// FORWARD chain accepting `ct state new`: a flow comes round only after 65,535 others,
/// long after its unreplied entry was evicted, so nearly every packet is a new
/// connection: tracked, allocated (evicting an unassured entry: Linux's early_drop),
/// confirmed. The `ct_inserted` fact says how many were.
pub(crate) fn build_ct_setup(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    use netbatch_stack::ct;
    use netbatch_stack::filter::{Chain, CtMatch, HookPoint, Rule, Verdict};
    let Table { table, flows, .. } = shared_table(c.routes)?;
    let mut cfg = forward_config(v, c)?;
    cfg.graph.conntrack = Some(ct::Config {
        max: 4096,
        ..ct::Config::default()
    });
    let mut new = Rule::any(Verdict::Accept);
    new.ct = Some(CtMatch {
        state: ct::state_bit::NEW,
        ..CtMatch::default()
    });
    cfg.graph.chains.push((
        HookPoint::Forward,
        Chain {
            rules: vec![new],
            policy: Verdict::Drop,
        },
    ));
    let many: Vec<FlowSpec> = (0..65_536u32)
        .map(|i| FlowSpec {
            src: Ipv4Addr::new(198, 51, 100, 2 + (i % 200) as u8).into(),
            sport: 1024 + (i / 200) as u16,
            dst: flows[i as usize % flows.len()].dst,
            ..flows[0].clone()
        })
        .collect();
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("pool")?;
    let room = pool.config().room();
    let ports = gen_ports(many, c, room)?;
    let w = Builder::new(&cfg).routes(table).worker(ports, pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![("flows".into(), 65_536), ("ct_max".into(), 4096)],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's rules must select none of its frames, or the scenario would
    /// measure other tables' routes: each of the 1024 flows' keys (as the route stage
    /// builds them: received on gen0, mark 0, TOS 0) falls through all of them.
    #[test]
    fn benchmark_rules_match_none_of_the_flows() {
        use netbatch_stack::route::rule::{Key, RulesOf};
        let (rules, tables) = policy_rules(16).unwrap();
        assert_eq!((rules.len(), tables.len()), (16, 16));
        let mut set = RulesOf::new();
        for r in &rules {
            set.add(r.clone()).unwrap();
        }
        let routes = generate_routes(1000, 7);
        for f in flows(&routes, 1024) {
            let (core::net::IpAddr::V4(src), core::net::IpAddr::V4(dst)) = (f.src, f.dst) else {
                panic!("IPv4 flows")
            };
            let k = Key {
                src: u32::from(src),
                dst: u32::from(dst),
                iif: 0,
                mark: 0,
                proto: 17,
                sport: f.sport,
                dport: f.dport,
                tos: 0,
            };
            assert!(rules.iter().all(|r| !r.matches(&k)), "{k:?}");
        }
    }

    #[test]
    fn generated_routes_are_distinct_and_follow_the_mix() {
        let r = generate_routes(10_000, 1);
        assert_eq!(r.len(), 10_000);
        let distinct: std::collections::HashSet<_> = r.iter().map(|x| x.prefix).collect();
        assert_eq!(distinct.len(), r.len());
        let l24 = r.iter().filter(|x| x.prefix.prefix_len() == 24).count();
        assert!(l24 > 5_000, "mostly /24: {l24}");
        assert!(r.iter().any(|x| x.prefix.prefix_len() == 32));
        assert!(
            r.iter()
                .all(|x| !x.prefix.contains(Ipv4Addr::new(192, 0, 2, 1)))
        );
    }
}
