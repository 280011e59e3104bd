//! Benchmark scenarios. Each builds, for one variant, something that can receive a given
//! number of frames from an in-memory generator and report what happened to them.

use core::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{Context, bail};
use netbatch_datapath::Worker;
use netbatch_engine::{Dispatch, Mode, NodeSnapshot, Pool, PoolConfig};
use netbatch_ports::generator::{FlowOrder, FlowSpec, GenConfig, GenPort, L4};
use netbatch_ports::{Port, PortCx};
use netbatch_runtime::build;
use netbatch_runtime::config::{AppConfig, Config, PortConfig};
use netbatch_runtime::setup::PortSetup;
use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_wire::ethernet::MacAddr;

use super::gro::GroMode;
use super::smol::SmolBench;
use netbatch_datapath::rps::RpsPolicy;

/// Scenario names `--scenario` accepts.
pub(crate) const NAMES: &[&str] = &[
    "null",
    "udp-local-1b",
    "udp-local-1b-nf1",
    "udp-local-1b-flower",
    "smoltcp-udp-1b",
    "ip4-forward",
    "ip4-forward-rules",
    "ip4-forward-vrf",
    "ip4-forward-vrf1",
    "ct-forward",
    "ct-setup",
    "nat44-forward",
    "nat44-offload",
    "udp-forward-1460",
    "tcp-forward-1460",
    "rps",
    "ip6-forward",
    "udp6-local-1b",
    "udp6-forward-1460",
];

/// What a variant is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Variant {
    pub(crate) scenario: String,
    /// `None` when the scenario has no listified/per-packet distinction (smoltcp).
    pub(crate) mode: Option<Mode>,
    /// `None` when dispatch does not apply.
    pub(crate) dispatch: Option<Dispatch>,
    /// GRO on the receiving port (`None`: the scenario has no GRO variants).
    pub(crate) gro: Option<GroMode>,
    /// Worker threads (1: the worker runs on the benchmark's own thread).
    pub(crate) workers: usize,
    /// RPS policy (`rps` scenario).
    pub(crate) rps: Option<RpsPolicy>,
    /// Routes in the FIB when the FIB size is a variant axis (`ip6-forward`'s `--fib6`).
    pub(crate) fib: Option<usize>,
}

impl Variant {
    pub(crate) fn mode_name(&self) -> &'static str {
        self.mode.map_or("-", Mode::name)
    }
    pub(crate) fn dispatch_name(&self) -> &'static str {
        self.dispatch.map_or("-", Dispatch::name)
    }
    pub(crate) fn gro_name(&self) -> &'static str {
        self.gro.map_or("off", GroMode::name)
    }
    pub(crate) fn rps_name(&self) -> &'static str {
        self.rps.map_or("-", RpsPolicy::name)
    }
    /// The FIB size as a table cell ("-": not an axis of the scenario).
    pub(crate) fn fib_name(&self) -> String {
        self.fib.map_or_else(|| "-".to_string(), |n| n.to_string())
    }
}

/// The axes variants are spread over (`--modes`, `--dispatch`, `--gro`, `--workers`,
/// `--rps-policy`, `--fib6`).
pub(crate) struct Axes<'a> {
    pub(crate) modes: &'a [Mode],
    pub(crate) dispatch: &'a [Dispatch],
    pub(crate) gro: &'a [GroMode],
    pub(crate) workers: &'a [usize],
    pub(crate) rps: &'a [RpsPolicy],
    pub(crate) fib6: &'a [usize],
}

/// Options shared by every scenario.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub(crate) burst: usize,
    pub(crate) flow_order: FlowOrder,
    pub(crate) routes: usize,
    /// VRFs, and routes in each, of ip4-forward-vrf and ip4-forward-vrf1.
    pub(crate) vrfs: usize,
    /// Routes in each VRF's table.
    pub(crate) vrf_routes: usize,
    /// FORWARD rules (none matching) in the GRO scenarios.
    pub(crate) fwd_rules: usize,
    /// Policy rules before the main table in ip4-forward-rules.
    pub(crate) policy_rules: usize,
    /// Classifier filters (none matching) in udp-local-1b-flower.
    pub(crate) filters: usize,
    /// The GRO scenarios' output port takes super-packets whole (TSO/USO, `tx-gso-list`).
    pub(crate) tx_offload: bool,
    /// Offered load of the rps scenario, frames per second.
    pub(crate) rate_pps: Option<u64>,
}

/// The configuration of a variant's datapath over `ports`: the variant's batch mode and
/// dispatch (`dispatch` when it has none), the burst as the NAPI weight, a budget of at
/// least 300 frames.
pub(crate) fn config(
    v: &Variant,
    c: &Common,
    ports: Vec<PortConfig>,
    dispatch: Dispatch,
) -> Config {
    let mut cfg = Config::new(ports);
    cfg.mode = v.mode.unwrap_or(Mode::List);
    cfg.dispatch = v.dispatch.unwrap_or(dispatch);
    cfg.burst = c.burst;
    cfg.budget = c.burst.max(300);
    cfg
}

/// A port with one address, its frames supplied by the benchmark.
pub(crate) fn port(name: &str, mac: MacAddr, addr: &str) -> anyhow::Result<PortConfig> {
    Ok(PortConfig::new(PortSetup::simple(name, mac, addr.parse()?)))
}

/// A UDP sink on worker `worker` reading `ports` of any address (`queue` datagrams per
/// socket); with `check`, it checks every flow's order and records latencies.
pub(crate) fn sink(worker: usize, ports: Vec<u16>, queue: usize, check: bool) -> AppConfig {
    AppConfig::UdpSink {
        worker,
        addr: Ipv4Addr::UNSPECIFIED,
        ports,
        queue,
        check,
        gro: false,
        latency: check,
    }
}

/// Something to measure.
pub(crate) trait Bench {
    /// Receives `n` more frames and takes them as far as they go; returns the frames
    /// received (at least `n`; more when workers on threads ran on while it looked).
    fn run(&mut self, n: u64) -> u64;
    /// Before a measured stretch of runs (workers on threads start).
    fn start(&mut self) {}
    /// After it (workers on threads stop; nothing runs between measurements).
    fn pause(&mut self) {}
    /// Per-stage counters since the last reset.
    fn stages(&self) -> Vec<NodeSnapshot> {
        Vec::new()
    }
    /// Turns per-stage TSC timing on or off.
    fn set_timing(&mut self, _on: bool) {}
    /// Zeroes per-stage counters.
    fn reset(&mut self) {}
    /// Checks nothing went wrong so far (e.g. the sink got every datagram).
    fn verify(&self) -> anyhow::Result<()>;
    /// Scenario-specific counters for the JSON.
    fn extra(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Scenario-specific fields at the top of its JSON result.
    fn top(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
}

pub(crate) const DUT_MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
pub(crate) const PEER_MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0x00, 0x00, 0xfe]);
/// The datapath's address (TEST-NET-2, RFC 5737).
pub(crate) const DUT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// UDP ports of the four streams.
pub(crate) const UDP_PORTS: [u16; 4] = [5001, 5002, 5003, 5004];

/// How the pools the variants were built with are backed (each kind once), for the
/// bench's output.
static POOL_BACKINGS: std::sync::Mutex<Vec<netbatch_engine::Backing>> =
    std::sync::Mutex::new(Vec::new());

/// The backings of the pools built so far.
pub(crate) fn pool_backings() -> Vec<netbatch_engine::Backing> {
    POOL_BACKINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

fn pool(buffers: u32) -> anyhow::Result<Pool> {
    let p = Pool::new(PoolConfig {
        buffers,
        huge_pages: netbatch_engine::huge_tables(),
        ..PoolConfig::default()
    })
    .context("packet pool")?;
    let mut seen = POOL_BACKINGS.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.contains(&p.backing()) {
        seen.push(p.backing());
    }
    Ok(p)
}

/// Four 1-byte UDP streams, as the seeds' netperf run: sender 192.0.2.10 (TEST-NET-1).
fn udp_1b_flows() -> Vec<FlowSpec> {
    UDP_PORTS
        .iter()
        .enumerate()
        .map(|(i, &dport)| FlowSpec {
            src_mac: PEER_MAC,
            dst_mac: DUT_MAC,
            vlan: None,
            src: Ipv4Addr::new(192, 0, 2, 10).into(),
            dst: DUT_ADDR.into(),
            l4: L4::Udp,
            sport: 40000 + i as u16,
            dport,
            payload_len: 1,
            ttl: 64,
            dont_frag: true,
        })
        .collect()
}

fn gen_port(pool: &Pool, flows: Vec<FlowSpec>, order: FlowOrder) -> anyhow::Result<GenPort> {
    let room = pool.config().room();
    let cfg = GenConfig::new(flows, order);
    Ok(GenPort::new("gen0", 0, &cfg, room)?)
}

/// `null`: the harness alone, generator straight to free.
struct Null {
    source: GenPort,
    pool: Pool,
    cache: netbatch_engine::BufCache,
    burst: usize,
    list: Vec<netbatch_engine::Pkt>,
    freed: u64,
}

impl Bench for Null {
    fn run(&mut self, n: u64) -> u64 {
        let mut left = n;
        while left > 0 {
            let want = self.burst.min(left as usize);
            let got = self.source.rx(
                &mut PortCx {
                    pool: &self.pool,
                    cache: &mut self.cache,
                    now_ns: 0,
                },
                &mut self.list,
                want,
            );
            self.freed += got;
            self.cache.free_all(&mut self.list);
            left -= got;
        }
        n
    }
    fn verify(&self) -> anyhow::Result<()> {
        if self.source.stats().rx_packets != self.freed {
            bail!(
                "null: generated {} freed {}",
                self.source.stats().rx_packets,
                self.freed
            );
        }
        Ok(())
    }
}

/// What a worker benchmark must see after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Every frame delivered to the sink (or still queued for it).
    Delivered,
    /// Every frame forwarded.
    Forwarded,
}

/// A worker receiving from a `gen` port.
pub(crate) struct WorkerBench {
    pub(crate) w: Worker,
    pub(crate) expect: Expect,
    /// Scenario facts for the JSON (route count, load time).
    pub(crate) facts: Vec<(String, u64)>,
}

impl WorkerBench {
    fn sink_datagrams(&self) -> u64 {
        self.w
            .apps
            .iter()
            .flat_map(|a| a.counters())
            .filter(|(k, _)| *k == "datagrams")
            .map(|(_, v)| v)
            .sum()
    }
}

impl Bench for WorkerBench {
    fn run(&mut self, n: u64) -> u64 {
        let start = self.w.acct.rx;
        let target = start + n;
        while self.w.acct.rx < target {
            let now = netbatch_engine::time::mono_ns();
            self.w.poll(now);
        }
        self.w.acct.rx - start
    }
    fn stages(&self) -> Vec<NodeSnapshot> {
        self.w.snapshot()
    }
    fn set_timing(&mut self, on: bool) {
        self.w.graph.set_timing(on);
    }
    fn reset(&mut self) {
        self.w.graph.reset_counters();
    }
    fn verify(&self) -> anyhow::Result<()> {
        let a = self.w.acct;
        let held = self.w.held();
        if a.rx + a.originated != a.tx + a.delivered + a.dropped + held {
            bail!("packets unaccounted: {a:?} held {held}");
        }
        match self.expect {
            Expect::Delivered => {
                let got = self.sink_datagrams();
                // The last poll may have left datagrams queued: they are held, not lost.
                if got + held != a.rx || a.dropped != 0 {
                    bail!(
                        "sink got {got} of {} datagrams ({} dropped, {held} held)",
                        a.rx,
                        a.dropped
                    );
                }
            }
            Expect::Forwarded => {
                if a.dropped != 0 || a.tx + held != a.rx {
                    bail!(
                        "forwarded {} of {} frames ({} dropped)",
                        a.tx,
                        a.rx,
                        a.dropped
                    );
                }
            }
        }
        Ok(())
    }
    fn extra(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .w
            .apps
            .iter()
            .flat_map(|a| a.counters())
            .map(|(k, v)| (format!("sink_{k}"), v))
            .collect();
        v.push(("rounds".into(), self.w.stats.rounds));
        v.extend(self.facts.iter().cloned());
        v
    }
}

/// Seed 001's third experiment: `n` ingress filters over 8 masks (as many as tc flower's
/// mask groups the seed's 16 filters made), none of which the 1-byte streams match: every
/// packet is looked up in all 8 groups and passes.
fn flower_filters(n: usize) -> anyhow::Result<netbatch_stack::cls::Classifier> {
    use netbatch_stack::cls::{Action, Classifier, Field, Filter, Match};
    let mut filters = Vec::with_capacity(n);
    for i in 0..n {
        let (shape, j) = (i % 8, (i / 8) as u64);
        let mut m = Match::default();
        let ip = |m: &mut Match| m.set(Field::EthType, 0x0800, 0xffff);
        match shape {
            // UDP to a port the streams do not use.
            0 => {
                ip(&mut m);
                m.set(Field::IpProto, 17, 0xff);
                m.set(Field::DstPort, 10_000 + j % 50_000, 0xffff);
            }
            // A source host in 10/8.
            1 => {
                ip(&mut m);
                m.set(Field::SrcIp, 0x0a00_0000 | j, 0xffff_ffff);
            }
            // A destination /24 in 172.16/12.
            2 => {
                ip(&mut m);
                m.set(
                    Field::DstIp,
                    (0xac10_0000 | j << 8) & 0xffff_ff00,
                    0xffff_ff00,
                );
            }
            // TCP from a port.
            3 => {
                ip(&mut m);
                m.set(Field::IpProto, 6, 0xff);
                m.set(Field::SrcPort, 1 + j % 60_000, 0xffff);
            }
            // A destination MAC.
            4 => m.set(Field::DstMac, 0x02aa_0000_0000 | j, (1 << 48) - 1),
            // A source MAC.
            5 => m.set(Field::SrcMac, 0x02bb_0000_0000 | j, (1 << 48) - 1),
            // A TTL and a UDP port pair no stream has.
            6 => {
                ip(&mut m);
                m.set(Field::IpProto, 17, 0xff);
                m.set(Field::IpTtl, 1 + j % 32, 0xff);
                m.set(Field::SrcPort, 1000 + j / 32, 0xffff);
            }
            // A DSCP class (TOS under its DSCP mask) and a destination host.
            _ => {
                ip(&mut m);
                m.set(Field::IpTos, 0x20, 0xfc);
                m.set(Field::DstIp, 0xc0a8_0000 | j, 0xffff_ffff);
            }
        }
        filters.push(Filter {
            chain: 0,
            prio: i as u32 + 1,
            matches: m,
            actions: vec![Action::Drop],
        });
    }
    Classifier::new(filters).map_err(|e| anyhow::anyhow!("{e}"))
}

fn udp_local(v: &Variant, c: &Common, nf1: bool) -> anyhow::Result<Box<dyn Bench>> {
    let ports = vec![port("gen0", DUT_MAC, &format!("{DUT_ADDR}/24"))?];
    let mut cfg = config(v, c, ports, Dispatch::Runs);
    cfg.pool.buffers = 8192;
    // One sink reading the four streams' sockets.
    cfg.apps = vec![sink(0, UDP_PORTS.to_vec(), 1024, false)];
    if nf1 {
        // Seed 001: one iptables rule that matches nothing of the test traffic.
        let mut r = Rule::any(Verdict::Drop);
        r.proto = Some(17);
        r.dport = Some("9000-9100".parse().map_err(anyhow::Error::msg)?);
        cfg.graph.chains.push((
            HookPoint::Prerouting,
            Chain {
                rules: vec![r],
                policy: Verdict::Accept,
            },
        ));
    }
    let mut facts = Vec::new();
    if v.scenario == "udp-local-1b-flower" {
        let cls = flower_filters(c.filters)?;
        facts.push(("filters".into(), cls.filters().len() as u64));
        facts.push(("filter_masks".into(), cls.groups(0) as u64));
        cfg.graph.classifier = Some(std::sync::Arc::new(cls));
    }
    let pool = Pool::new(cfg.pool).context("packet pool")?;
    let source = gen_port(&pool, udp_1b_flows(), c.flow_order)?;
    let w = build::worker(&cfg, vec![Box::new(source)], pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Delivered,
        facts,
    }))
}

/// The datapath's IPv6 address (documentation prefix, RFC 3849).
pub(crate) const DUT_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// `udp_1b_flows` over IPv6: sender 2001:db8::10 to [`DUT_ADDR6`].
fn udp6_1b_flows() -> Vec<FlowSpec> {
    udp_1b_flows()
        .into_iter()
        .map(|f| FlowSpec {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10).into(),
            dst: DUT_ADDR6.into(),
            ..f
        })
        .collect()
}

/// `udp6-local-1b`: `udp-local-1b` over IPv6. The four streams go to four sockets bound
/// to `[::]:5001-5004`, read by one sink as `udp-local-1b`'s (same batch, same queue
/// length); the configuration's applications bind IPv4 only, so the sockets are opened
/// on the built worker's socket table and the sink added to its applications.
fn udp6_local(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    let mut gen0 = port("gen0", DUT_MAC, &format!("{DUT_ADDR}/24"))?;
    gen0.setup.addrs6 = vec![format!("{DUT_ADDR6}/64").parse()?];
    let mut cfg = config(v, c, vec![gen0], Dispatch::Runs);
    cfg.pool.buffers = 8192;
    let pool = Pool::new(cfg.pool).context("packet pool")?;
    let source = gen_port(&pool, udp6_1b_flows(), c.flow_order)?;
    let mut w = build::worker(&cfg, vec![Box::new(source)], pool)?;
    let socks = UDP_PORTS
        .iter()
        .map(|&p| {
            w.host
                .sockets
                .open(Ipv6Addr::UNSPECIFIED, p, 1024)
                .map(|(_, s)| s)
                .with_context(|| format!("binding [::]:{p}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    w.apps
        .push(Box::new(netbatch_datapath::apps::sink::UdpSink::new(
            socks, 256, false,
        )));
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Delivered,
        facts: Vec::new(),
    }))
}

fn smoltcp_udp(c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    let pool = pool(8192)?;
    let source = gen_port(&pool, udp_1b_flows(), c.flow_order)?;
    let b = SmolBench::new(source, pool, DUT_MAC.0, DUT_ADDR, 24, &UDP_PORTS, c.burst)?;
    Ok(Box::new(b))
}

impl Bench for SmolBench {
    fn run(&mut self, n: u64) -> u64 {
        Self::run(self, n);
        n
    }
    fn verify(&self) -> anyhow::Result<()> {
        if self.received != self.rx {
            bail!(
                "smoltcp delivered {} of {} datagrams",
                self.received,
                self.rx
            );
        }
        Ok(())
    }
    fn extra(&self) -> Vec<(String, u64)> {
        vec![("sink_datagrams".into(), self.received)]
    }
}

/// The variants of scenario `name` along the requested axes.
pub(crate) fn variants(name: &str, ax: &Axes<'_>) -> anyhow::Result<Vec<Variant>> {
    let mk = |mode, dispatch| Variant {
        scenario: name.to_string(),
        mode,
        dispatch,
        gro: None,
        workers: 1,
        rps: None,
        fib: None,
    };
    let mut v = Vec::new();
    match name {
        "null" => v.extend(ax.modes.iter().map(|&m| mk(Some(m), None))),
        "smoltcp-udp-1b" => v.push(mk(None, None)),
        "udp-local-1b" | "ip4-forward" | "ip4-forward-rules" | "ct-forward" | "nat44-forward"
        | "nat44-offload" => {
            for &w in ax.workers {
                for &d in ax.dispatch {
                    for &m in ax.modes {
                        v.push(Variant {
                            workers: w.max(1),
                            ..mk(Some(m), Some(d))
                        });
                    }
                }
            }
        }
        "ip6-forward" => {
            for &n in ax.fib6 {
                for &d in ax.dispatch {
                    for &m in ax.modes {
                        v.push(Variant {
                            fib: Some(n),
                            ..mk(Some(m), Some(d))
                        });
                    }
                }
            }
        }
        "udp-local-1b-nf1"
        | "udp-local-1b-flower"
        | "udp6-local-1b"
        | "ip4-forward-vrf"
        | "ip4-forward-vrf1"
        | "ct-setup" => {
            for &d in ax.dispatch {
                for &m in ax.modes {
                    v.push(mk(Some(m), Some(d)));
                }
            }
        }
        "udp-forward-1460" | "tcp-forward-1460" | "udp6-forward-1460" => {
            for &d in ax.dispatch {
                for &m in ax.modes {
                    for &g in ax.gro {
                        v.push(Variant {
                            gro: Some(g),
                            ..mk(Some(m), Some(d))
                        });
                    }
                }
            }
        }
        "rps" => {
            for &d in ax.dispatch {
                for &m in ax.modes {
                    for &p in ax.rps {
                        v.push(Variant {
                            workers: 2,
                            rps: Some(p),
                            ..mk(Some(m), Some(d))
                        });
                    }
                }
            }
        }
        other => bail!("unknown scenario '{other}' (known: {})", NAMES.join(", ")),
    }
    Ok(v)
}

/// Builds the bench for a variant.
pub(crate) fn build_variant(v: &Variant, c: &Common) -> anyhow::Result<Box<dyn Bench>> {
    match v.scenario.as_str() {
        "null" => {
            let pool = pool(4096)?;
            let source = gen_port(&pool, udp_1b_flows(), c.flow_order)?;
            let burst = if v.mode == Some(Mode::Packet) {
                1
            } else {
                c.burst
            };
            Ok(Box::new(Null {
                cache: pool.cache(),
                source,
                pool,
                burst,
                list: Vec::with_capacity(256),
                freed: 0,
            }))
        }
        "udp-local-1b" if v.workers > 1 => super::team::build_local(v, c, v.workers, None),
        "udp-local-1b" => udp_local(v, c, false),
        "rps" => super::team::build_rps(v, c),
        "udp-local-1b-nf1" => udp_local(v, c, true),
        "udp-local-1b-flower" => udp_local(v, c, false),
        "smoltcp-udp-1b" => smoltcp_udp(c),
        "ip4-forward" | "ip4-forward-rules" => super::forward::build_forward(v, c),
        "ip4-forward-vrf" | "ip4-forward-vrf1" => super::vrf::build(v, c),
        "ct-forward" => super::forward::build_ct_forward(v, c),
        "ct-setup" => super::forward::build_ct_setup(v, c),
        "nat44-forward" => super::forward::build_nat44_forward(v, c),
        "nat44-offload" => super::forward::build_nat44_offload(v, c),
        "udp-forward-1460" => super::gro::build_gro_forward(v, c, false, false),
        "tcp-forward-1460" => super::gro::build_gro_forward(v, c, true, false),
        "ip6-forward" => super::forward6::build_forward6(v, c),
        "udp6-local-1b" => udp6_local(v, c),
        "udp6-forward-1460" => super::gro::build_gro_forward(v, c, false, true),
        other => bail!("unknown scenario '{other}'"),
    }
}
