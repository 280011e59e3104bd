//! The configuration file (TOML): what `netbatch run`, `replay` and `check-config` read.
//!
//! Parsing is strict: an unknown key is an error (so a typo is never silently ignored),
//! and every semantic problem is reported with the key it belongs to
//! (`port[1].addresses[0]`), all of them at once. A configuration either validates
//! entirely or nothing starts. See `examples/` for commented files.

use core::fmt;
use core::net::Ipv4Addr;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use netbatch_engine::{Dispatch, Mode, PoolConfig};
use netbatch_stack::GraphOptions;
use netbatch_stack::filter::{Chain, HookPoint, PortRange, Rule, Verdict};
use netbatch_stack::host::HostParams;
use netbatch_stack::iface::Tags;
use netbatch_stack::neigh::NeighParams;
use netbatch_stack::offload::Features;
use netbatch_stack::prefix::{IfAddr, Ipv4Prefix};
use netbatch_stack::route::file::{self as route_file, Resolve};
use netbatch_stack::route::{Route, RouteKind};
use netbatch_wire::ethernet::MacAddr;
use serde::Deserialize;

use crate::setup::{IfaceSetup, PortSetup, StaticNeighbour};

/// One problem in a configuration: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Key path (`port[0].mac`), or the file for syntax errors.
    pub key: String,
    /// What is wrong, in a sentence.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// Every problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file.
    pub file: String,
    /// The problems, in file order.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} error{}",
            self.file,
            self.errors.len(),
            if self.errors.len() == 1 { "" } else { "s" }
        )?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

// ---------------------------------------------------------------------------------------
// The file as written.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    datapath: DatapathFile,
    #[serde(default)]
    pool: PoolFile,
    #[serde(default)]
    icmp: IcmpFile,
    #[serde(default)]
    neighbour: NeighFile,
    #[serde(default, rename = "port")]
    ports: Vec<PortFile>,
    #[serde(default, rename = "route")]
    routes: Vec<RouteFile>,
    #[serde(default)]
    route_files: Vec<String>,
    #[serde(default)]
    filter: FilterFile,
    #[serde(default, rename = "app")]
    apps: Vec<AppFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DatapathFile {
    #[serde(default = "default_mode")]
    mode: String,
    #[serde(default = "default_dispatch")]
    dispatch: String,
    #[serde(default = "yes")]
    forwarding: bool,
    #[serde(default = "default_burst")]
    burst: usize,
    #[serde(default = "default_budget")]
    budget: usize,
    /// Time a round may take, in µs (`netdev_budget_usecs`).
    #[serde(default = "default_time_cap_us")]
    time_cap_us: u64,
    /// Worker threads.
    #[serde(default = "default_workers")]
    workers: usize,
    /// Cores to pin the workers to (one per worker), or none.
    #[serde(default)]
    cores: Vec<usize>,
    /// RPS: off | backlog | direct | deferred.
    #[serde(default = "default_rps")]
    rps: String,
    /// Packets each backlog ring holds (`netdev_max_backlog`).
    #[serde(default = "default_max_backlog")]
    max_backlog: usize,
    /// RFS: flows follow the worker whose application reads them.
    #[serde(default = "yes")]
    rfs: bool,
    /// Busy polling before an idle worker sleeps, in µs.
    #[serde(default = "default_idle_spin_us")]
    idle_spin_us: u64,
}

impl Default for DatapathFile {
    fn default() -> Self {
        Self {
            mode: default_mode(),
            dispatch: default_dispatch(),
            forwarding: true,
            burst: default_burst(),
            budget: default_budget(),
            time_cap_us: default_time_cap_us(),
            workers: default_workers(),
            cores: Vec::new(),
            rps: default_rps(),
            max_backlog: default_max_backlog(),
            rfs: true,
            idle_spin_us: default_idle_spin_us(),
        }
    }
}

fn default_time_cap_us() -> u64 {
    2000
}
fn default_workers() -> usize {
    1
}
fn default_rps() -> String {
    "off".into()
}
fn default_max_backlog() -> usize {
    1000
}
fn default_idle_spin_us() -> u64 {
    50
}

fn default_mode() -> String {
    "list".into()
}
fn default_dispatch() -> String {
    "buckets".into()
}
fn yes() -> bool {
    true
}
fn default_burst() -> usize {
    64
}
fn default_budget() -> usize {
    300
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    buffers: Option<u32>,
    buf_size: Option<u32>,
    headroom: Option<u16>,
    cache_size: Option<u32>,
    huge_pages: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct IcmpFile {
    rate: Option<u64>,
    burst: Option<u64>,
    echo: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NeighFile {
    max_entries: Option<usize>,
    queue_len: Option<usize>,
    reachable_ms: Option<u64>,
    retrans_ms: Option<u64>,
    max_probes: Option<u32>,
    gc_stale_ms: Option<u64>,
    #[serde(default, rename = "static")]
    statics: Vec<StaticFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticFile {
    ip: String,
    mac: String,
    dev: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortFile {
    name: String,
    #[serde(default = "default_kind")]
    kind: String,
    /// The port's MAC (default for af_packet and af_xdp: the interface's own).
    mac: Option<String>,
    #[serde(default = "default_mtu")]
    mtu: u16,
    addresses: Option<Vec<String>>,
    #[serde(default)]
    features: Vec<String>,
    /// GRO mode: off | standard | fraglist (sets the rx-gro features).
    gro: Option<String>,
    #[serde(default)]
    vlan: Vec<VlanFile>,
    /// Kernel interface for kernel-backed ports (af_packet, af_xdp, tap).
    interface: Option<String>,
    /// Generator settings (kind = "gen").
    generator: Option<GenFile>,
    /// Workers that receive from this port (one queue each).
    #[serde(default = "default_rx_workers")]
    rx_workers: Vec<usize>,
    /// Workers RPS spreads this port's packets over (default: all, when RPS is on).
    rps_map: Option<Vec<usize>>,
}

fn default_rx_workers() -> Vec<usize> {
    vec![0]
}

fn default_kind() -> String {
    "pcap".into()
}
fn default_mtu() -> u16 {
    1500
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VlanFile {
    id: Option<u16>,
    qinq: Option<[u16; 2]>,
    name: Option<String>,
    #[serde(default)]
    addresses: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenFile {
    src: String,
    dst: String,
    #[serde(default = "default_proto")]
    proto: String,
    #[serde(default = "default_flows")]
    flows: u16,
    #[serde(default = "default_sport")]
    sport: u16,
    dport: u16,
    #[serde(default = "default_size")]
    payload: usize,
    dst_mac: Option<String>,
    #[serde(default)]
    order: Option<String>,
}

fn default_proto() -> String {
    "udp".into()
}
fn default_flows() -> u16 {
    1
}
fn default_sport() -> u16 {
    10000
}
fn default_size() -> usize {
    18
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    prefix: String,
    via: Option<String>,
    dev: Option<String>,
    #[serde(default = "default_route_kind")]
    kind: String,
}

fn default_route_kind() -> String {
    "unicast".into()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterFile {
    prerouting: Option<ChainFile>,
    input: Option<ChainFile>,
    forward: Option<ChainFile>,
    output: Option<ChainFile>,
    postrouting: Option<ChainFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainFile {
    #[serde(default = "default_policy")]
    policy: String,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleFile>,
}

fn default_policy() -> String {
    "accept".into()
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PortSpec {
    Number(u16),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProtoSpec {
    Number(u8),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    proto: Option<ProtoSpec>,
    src: Option<String>,
    dst: Option<String>,
    sport: Option<PortSpec>,
    dport: Option<PortSpec>,
    #[serde(rename = "in")]
    in_if: Option<String>,
    #[serde(rename = "out")]
    out_if: Option<String>,
    action: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppFile {
    kind: String,
    bind: String,
    #[serde(default = "default_queue")]
    queue: usize,
    #[serde(default)]
    check: bool,
    /// Receive GRO super-datagrams whole (like `UDP_GRO`).
    #[serde(default)]
    gro: bool,
    /// Worker the application runs on.
    #[serde(default)]
    worker: usize,
}

fn default_queue() -> usize {
    1024
}

// ---------------------------------------------------------------------------------------
// The validated configuration.

/// Where a port's frames come from and go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// Frames from a capture (`replay`) or from the test harness.
    Pcap,
    /// The in-memory traffic generator.
    Gen(GenSpec),
    /// An AF_PACKET socket on a kernel interface.
    AfPacket(String),
    /// An AF_XDP socket on a kernel interface.
    AfXdp(String),
    /// A TAP device exchanging frames with the host kernel.
    Tap(String),
}

impl PortKind {
    /// The kernel interface of a kernel-backed port.
    pub fn interface(&self) -> Option<&str> {
        match self {
            Self::AfPacket(i) | Self::AfXdp(i) | Self::Tap(i) => Some(i),
            Self::Pcap | Self::Gen(_) => None,
        }
    }
}

impl std::fmt::Display for PortKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pcap => f.write_str("pcap"),
            Self::Gen(_) => f.write_str("gen"),
            Self::AfPacket(i) => write!(f, "af_packet on {i}"),
            Self::AfXdp(i) => write!(f, "af_xdp on {i}"),
            Self::Tap(i) => write!(f, "tap {i}"),
        }
    }
}

/// Generator settings of a `gen` port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenSpec {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// UDP (false) or TCP (true).
    pub tcp: bool,
    /// Flows (source ports `sport ..`).
    pub flows: u16,
    /// First source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Payload bytes.
    pub payload: usize,
    /// Destination MAC (default: the port's own, as if sent to the datapath).
    pub dst_mac: Option<MacAddr>,
    /// Flow order.
    pub order: netbatch_ports::generator::FlowOrder,
}

/// A configured port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Addresses and interfaces.
    pub setup: PortSetup,
    /// Backend.
    pub kind: PortKind,
    /// Workers that receive from it.
    pub rx_workers: Vec<u16>,
    /// Workers RPS spreads its packets over (empty: not steered).
    pub rps_map: Vec<u16>,
}

/// A built-in application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppConfig {
    /// Receives and counts.
    UdpSink {
        /// Worker it runs on.
        worker: usize,
        /// Address bound.
        addr: Ipv4Addr,
        /// Port bound.
        port: u16,
        /// Queue length.
        queue: usize,
        /// Check per-flow sequence numbers.
        check: bool,
        /// Take GRO super-datagrams whole (`UDP_GRO`).
        gro: bool,
    },
    /// Sends every datagram back to its sender.
    UdpEcho {
        /// Worker it runs on.
        worker: usize,
        /// Address bound.
        addr: Ipv4Addr,
        /// Port bound.
        port: u16,
        /// Queue length.
        queue: usize,
    },
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Batch mode.
    pub mode: Mode,
    /// Dispatch strategy.
    pub dispatch: Dispatch,
    /// Frames per queue per round.
    pub burst: usize,
    /// Frames per round.
    pub budget: usize,
    /// Time a round may take, in ns.
    pub time_cap_ns: u64,
    /// Worker threads.
    pub workers: usize,
    /// How they run (pinning, idle busy-poll).
    pub run: crate::datapath::RunParams,
    /// RPS (none: off).
    pub rps: Option<crate::rps::RpsParams>,
    /// Buffer pool.
    pub pool: PoolConfig,
    /// Host settings.
    pub host: HostParams,
    /// Ports in order.
    pub ports: Vec<PortConfig>,
    /// Routes (from the file and route files).
    pub routes: Vec<Route>,
    /// Static neighbours.
    pub neighbours: Vec<StaticNeighbour>,
    /// Hooks.
    pub graph: GraphOptions,
    /// Applications.
    pub apps: Vec<AppConfig>,
}

/// Collects errors with their keys.
#[derive(Default)]
struct Errs(Vec<ConfigError>);

impl Errs {
    fn add(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.0.push(ConfigError {
            key: key.into(),
            reason: reason.into(),
        });
    }

    fn parse<T: core::str::FromStr>(&mut self, key: &str, s: &str, what: &str) -> Option<T>
    where
        T::Err: fmt::Display,
    {
        match s.parse::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                self.add(key, format!("'{s}' is not {what}: {e}"));
                None
            }
        }
    }
}

/// Interface names to indices, as `setup::interfaces` numbers them.
struct Names {
    names: Vec<String>,
    subnets: Vec<Vec<IfAddr>>,
}

impl Resolve for Names {
    fn iface(&self, name: &str) -> Option<u16> {
        self.names.iter().position(|n| n == name).map(|i| i as u16)
    }
    fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        self.subnets
            .iter()
            .position(|s| s.iter().any(|a| a.subnet().contains(gw)))
            .map(|i| i as u16)
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
            file: file.clone(),
            errors: vec![ConfigError {
                key: file.clone(),
                reason: format!("cannot read: {e}"),
            }],
        })?;
        Self::parse(&text, path.parent().unwrap_or(Path::new(".")), &file)
    }

    /// Validates configuration text; route files are resolved relative to `dir`.
    pub fn parse(text: &str, dir: &Path, file: &str) -> Result<Self, ConfigErrors> {
        let raw: File = toml::from_str(text).map_err(|e| ConfigErrors {
            file: file.into(),
            errors: vec![ConfigError {
                key: file.into(),
                reason: e.to_string().trim_end().replace('\n', "\n    "),
            }],
        })?;
        let mut e = Errs::default();
        let cfg = validate(&raw, dir, &mut e);
        if e.0.is_empty() {
            // `validate` only returns None when it recorded an error.
            cfg.ok_or_else(|| ConfigErrors {
                file: file.into(),
                errors: vec![],
            })
        } else {
            Err(ConfigErrors {
                file: file.into(),
                errors: e.0,
            })
        }
    }
}

fn addresses(list: &[String], key: &str, e: &mut Errs) -> Vec<IfAddr> {
    list.iter()
        .enumerate()
        .filter_map(|(i, a)| {
            e.parse::<IfAddr>(
                &format!("{key}[{i}]"),
                a,
                "an interface address (a.b.c.d/len)",
            )
        })
        .collect()
}

fn port_range(p: &PortSpec, key: &str, e: &mut Errs) -> Option<PortRange> {
    match p {
        PortSpec::Number(n) => Some(PortRange { lo: *n, hi: *n }),
        PortSpec::Text(s) => match s.parse::<PortRange>() {
            Ok(r) => Some(r),
            Err(m) => {
                e.add(key, m);
                None
            }
        },
    }
}

fn validate(raw: &File, dir: &Path, e: &mut Errs) -> Option<Config> {
    let mode = e.parse::<Mode>("datapath.mode", &raw.datapath.mode, "a batch mode");
    let dispatch = e.parse::<Dispatch>(
        "datapath.dispatch",
        &raw.datapath.dispatch,
        "a dispatch strategy",
    );
    if !(1..=netbatch_engine::LIST_MAX).contains(&raw.datapath.burst) {
        e.add(
            "datapath.burst",
            format!(
                "{} is out of range (1 to {})",
                raw.datapath.burst,
                netbatch_engine::LIST_MAX
            ),
        );
    }
    let workers = raw.datapath.workers;
    if !(1..=64).contains(&workers) {
        e.add(
            "datapath.workers",
            format!("{workers} is out of range (1 to 64)"),
        );
    }
    if !raw.datapath.cores.is_empty() && raw.datapath.cores.len() != workers {
        e.add(
            "datapath.cores",
            format!(
                "{} cores for {workers} workers: give one core per worker, or none",
                raw.datapath.cores.len()
            ),
        );
    }
    let rps = match raw.datapath.rps.as_str() {
        "off" => None,
        other => match other.parse::<crate::rps::RpsPolicy>() {
            Ok(policy) => Some(crate::rps::RpsParams {
                policy,
                max_backlog: raw.datapath.max_backlog,
                rfs_log: if raw.datapath.rfs { 15 } else { 0 },
                ..crate::rps::RpsParams::default()
            }),
            Err(m) => {
                e.add("datapath.rps", format!("{m} or off"));
                None
            }
        },
    };
    if raw.datapath.max_backlog == 0 || raw.datapath.max_backlog > 1 << 20 {
        e.add(
            "datapath.max_backlog",
            format!(
                "{} is out of range (1 to 1048576)",
                raw.datapath.max_backlog
            ),
        );
    }
    if raw.datapath.time_cap_us == 0 {
        e.add("datapath.time_cap_us", "must be at least 1");
    }
    if raw.datapath.budget < raw.datapath.burst {
        e.add(
            "datapath.budget",
            format!(
                "{} is below datapath.burst ({})",
                raw.datapath.budget, raw.datapath.burst
            ),
        );
    }
    let d = PoolConfig::default();
    let pool = PoolConfig {
        buffers: raw.pool.buffers.unwrap_or(d.buffers),
        buf_size: raw.pool.buf_size.unwrap_or(d.buf_size),
        headroom: raw.pool.headroom.unwrap_or(d.headroom),
        cache_size: raw.pool.cache_size.unwrap_or(d.cache_size),
        huge_pages: raw.pool.huge_pages.unwrap_or(d.huge_pages),
    };
    if let Err(err) = pool.validate() {
        e.add("pool", err.to_string());
    }
    let nd = NeighParams::default();
    let neigh = NeighParams {
        max_entries: raw.neighbour.max_entries.unwrap_or(nd.max_entries),
        queue_len: raw.neighbour.queue_len.unwrap_or(nd.queue_len),
        reachable_ms: raw.neighbour.reachable_ms.unwrap_or(nd.reachable_ms),
        retrans_ms: raw.neighbour.retrans_ms.unwrap_or(nd.retrans_ms),
        max_probes: raw.neighbour.max_probes.unwrap_or(nd.max_probes),
        gc_stale_ms: raw.neighbour.gc_stale_ms.unwrap_or(nd.gc_stale_ms),
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
    let hd = HostParams::default();
    let host = HostParams {
        forwarding: raw.datapath.forwarding,
        icmp_rate: raw.icmp.rate.unwrap_or(hd.icmp_rate),
        icmp_burst: raw.icmp.burst.unwrap_or(hd.icmp_burst),
        neigh,
        icmp_echo: raw.icmp.echo.unwrap_or(true),
    };

    // Ports and the interface names they define, in `setup::interfaces` order.
    let mut ports = Vec::new();
    let mut names = Names {
        names: Vec::new(),
        subnets: Vec::new(),
    };
    let mut seen_ports = HashSet::new();
    let mut seen_addrs = HashSet::new();
    if raw.ports.is_empty() {
        e.add("port", "at least one [[port]] is needed");
    }
    for (pi, p) in raw.ports.iter().enumerate() {
        let key = format!("port[{pi}]");
        if p.name.is_empty() || p.name.contains(char::is_whitespace) {
            e.add(
                format!("{key}.name"),
                format!("'{}' is not a usable name", p.name),
            );
        }
        if !seen_ports.insert(p.name.clone()) {
            e.add(
                format!("{key}.name"),
                format!("'{}' is used by another port", p.name),
            );
        }
        let mac_text = match (&p.mac, p.kind.as_str(), &p.interface) {
            (Some(m), _, _) => Some(m.clone()),
            (None, "af_packet" | "af_xdp", Some(i)) => match netbatch_ports::sys::mac_of(i) {
                Some(m) => Some(
                    m.iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(":"),
                ),
                None => {
                    e.add(
                        format!("{key}.mac"),
                        format!(
                            "not given, and interface '{i}' (whose address is the default) was not found"
                        ),
                    );
                    None
                }
            },
            (None, _, _) => {
                e.add(
                    format!("{key}.mac"),
                    format!("a {} port needs a MAC address", p.kind),
                );
                None
            }
        };
        let mac = mac_text.and_then(|t| {
            e.parse::<MacAddr>(
                &format!("{key}.mac"),
                &t,
                "a MAC address (aa:bb:cc:dd:ee:ff)",
            )
        });
        if let Some(m) = mac
            && !m.is_unicast()
        {
            e.add(
                format!("{key}.mac"),
                format!("{m} is a group address; a port needs a unicast MAC"),
            );
        }
        if !(68..=9000).contains(&p.mtu) {
            e.add(
                format!("{key}.mtu"),
                format!("{} is out of range (68 to 9000)", p.mtu),
            );
        }
        let mut features = Features::default();
        match p.gro.as_deref() {
            None | Some("off") => {}
            // The ethtool switches each mode stands for.
            Some("standard") => {
                features.rx_gro = true;
                features.rx_udp_gro_forwarding = true;
            }
            Some("fraglist") => {
                features.rx_gro = true;
                features.rx_gro_list = true;
            }
            Some(other) => e.add(
                format!("{key}.gro"),
                format!("unknown GRO mode '{other}' (off, standard, fraglist)"),
            ),
        }
        for (fi, f) in p.features.iter().enumerate() {
            if !features.set(f, true) {
                e.add(
                    format!("{key}.features[{fi}]"),
                    format!(
                        "unknown feature '{f}' (known: {})",
                        Features::NAMES.join(", ")
                    ),
                );
            }
        }
        let addrs = p
            .addresses
            .as_ref()
            .map(|a| addresses(a, &format!("{key}.addresses"), e));
        for a in addrs.iter().flatten() {
            if !seen_addrs.insert(a.addr) {
                e.add(
                    format!("{key}.addresses"),
                    format!("{} is configured twice", a.addr),
                );
            }
        }
        let mut vlans = Vec::new();
        for (vi, v) in p.vlan.iter().enumerate() {
            let vkey = format!("{key}.vlan[{vi}]");
            let tags = match (v.id, v.qinq) {
                (Some(id), None) if (1..=4094).contains(&id) => Tags::Dot1q(id),
                (None, Some([s, c])) if (1..=4094).contains(&s) && (1..=4094).contains(&c) => {
                    Tags::QinQ(s, c)
                }
                (Some(_), Some(_)) => {
                    e.add(&vkey, "give either id or qinq, not both");
                    continue;
                }
                (None, None) => {
                    e.add(&vkey, "needs id = VID or qinq = [S-VID, C-VID]");
                    continue;
                }
                _ => {
                    e.add(&vkey, "VLAN ids must be between 1 and 4094");
                    continue;
                }
            };
            if vlans.iter().any(|x: &IfaceSetup| x.tags == tags) {
                e.add(&vkey, "this VLAN is configured twice on the port");
            }
            let name = v.name.clone().unwrap_or_else(|| match tags {
                Tags::Dot1q(id) => format!("{}.{id}", p.name),
                Tags::QinQ(s, c) => format!("{}.{s}.{c}", p.name),
                Tags::None => p.name.clone(),
            });
            let addrs = addresses(&v.addresses, &format!("{vkey}.addresses"), e);
            vlans.push(IfaceSetup { name, tags, addrs });
        }
        let kind = match p.kind.as_str() {
            "pcap" => Some(PortKind::Pcap),
            "gen" => gen_spec(p, &key, e).map(PortKind::Gen),
            "af_packet" | "af_xdp" | "tap" => match &p.interface {
                Some(i) if !i.is_empty() && i.len() < 16 => Some(match p.kind.as_str() {
                    "af_packet" => PortKind::AfPacket(i.clone()),
                    "af_xdp" => PortKind::AfXdp(i.clone()),
                    _ => PortKind::Tap(i.clone()),
                }),
                Some(i) => {
                    e.add(
                        format!("{key}.interface"),
                        format!("'{i}' is not a kernel interface name (1 to 15 characters)"),
                    );
                    None
                }
                None => {
                    e.add(
                        format!("{key}.interface"),
                        format!("a {} port needs the kernel interface to use", p.kind),
                    );
                    None
                }
            },
            other => {
                e.add(
                    format!("{key}.kind"),
                    format!(
                        "unknown port kind '{other}' (known: pcap, gen, af_packet, af_xdp, tap)"
                    ),
                );
                None
            }
        };
        if p.interface.is_some() && matches!(p.kind.as_str(), "pcap" | "gen") {
            e.add(
                format!("{key}.interface"),
                format!("a {} port has no kernel interface", p.kind),
            );
        }
        // What a kernel backend cannot do: take some super-packets whole on transmit, or
        // carry long frames (an AF_XDP frame is a UMEM frame less the XDP headroom).
        let (no_tx, max_mtu): (&[&str], Option<usize>) = match p.kind.as_str() {
            "af_xdp" => (
                &["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"],
                Some(netbatch_ports::af_xdp::MAX_RX_FRAME - 14 - 8),
            ),
            // Fraglist chains have no virtio-net header form.
            "af_packet" | "tap" => (&["tx-gso-list"], None),
            _ => (&[], None),
        };
        for (fi, f) in p.features.iter().enumerate() {
            if no_tx.contains(&f.as_str()) {
                e.add(
                    format!("{key}.features[{fi}]"),
                    format!(
                        "{} ports cannot send '{f}' super-packets whole; leave it off and \
                         the stack segments them",
                        p.kind
                    ),
                );
            }
        }
        if let Some(max) = max_mtu
            && usize::from(p.mtu) > max
        {
            e.add(
                format!("{key}.mtu"),
                format!(
                    "{} is too long for {} (at most {max}: its frames are {} bytes, with \
                     room for two VLAN tags)",
                    p.mtu,
                    p.kind,
                    netbatch_ports::af_xdp::MAX_RX_FRAME
                ),
            );
        }
        if p.generator.is_some() && p.kind != "gen" {
            e.add(
                format!("{key}.generator"),
                "only a gen port has generator settings",
            );
        }
        if let Some(a) = &addrs {
            names.names.push(p.name.clone());
            names.subnets.push(a.clone());
        }
        for v in &vlans {
            names.names.push(v.name.clone());
            names.subnets.push(v.addrs.clone());
        }
        let rx_workers = worker_list(e, &format!("{key}.rx_workers"), &p.rx_workers, workers);
        let rps_map = match &p.rps_map {
            Some(m) => {
                if m.is_empty() {
                    e.add(format!("{key}.rps_map"), "lists no worker");
                }
                worker_list(e, &format!("{key}.rps_map"), m, workers)
            }
            None => (0..workers.min(64) as u16).collect(),
        };
        if let (Some(mac), Some(kind)) = (mac, kind) {
            ports.push(PortConfig {
                setup: PortSetup {
                    name: p.name.clone(),
                    mac,
                    mtu: p.mtu,
                    features,
                    addrs,
                    vlans,
                },
                kind,
                rx_workers,
                rps_map: if rps.is_some() { rps_map } else { Vec::new() },
            });
        }
    }
    let mut iface_names = HashSet::new();
    for n in &names.names {
        if !iface_names.insert(n) {
            e.add("port", format!("interface name '{n}' is used twice"));
        }
    }

    // Routes: inline, then route files.
    let mut routes = Vec::new();
    for (ri, r) in raw.routes.iter().enumerate() {
        let key = format!("route[{ri}]");
        let Some(prefix) = (if r.prefix == "default" {
            Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 0).ok()
        } else {
            e.parse::<Ipv4Prefix>(
                &format!("{key}.prefix"),
                &r.prefix,
                "a prefix (a.b.c.d/len, host bits zero)",
            )
        }) else {
            continue;
        };
        let kind = match r.kind.as_str() {
            "unicast" => RouteKind::Unicast,
            "blackhole" => RouteKind::Blackhole,
            "unreachable" => RouteKind::Unreachable,
            "prohibit" => RouteKind::Prohibit,
            other => {
                e.add(
                    format!("{key}.kind"),
                    format!(
                        "unknown route kind '{other}' (unicast, blackhole, unreachable, prohibit)"
                    ),
                );
                continue;
            }
        };
        if kind != RouteKind::Unicast {
            if r.via.is_some() || r.dev.is_some() {
                e.add(&key, format!("a {} route takes no via or dev", r.kind));
            }
            routes.push(Route {
                prefix,
                kind,
                out_if: None,
                gateway: None,
            });
            continue;
        }
        let gw = r
            .via
            .as_ref()
            .and_then(|v| e.parse::<Ipv4Addr>(&format!("{key}.via"), v, "an IPv4 address"));
        let dev = match &r.dev {
            Some(d) => match names.iface(d) {
                Some(i) => Some(i),
                None => {
                    e.add(format!("{key}.dev"), format!("no interface named '{d}'"));
                    continue;
                }
            },
            None => None,
        };
        let out_if = match (dev, gw) {
            (Some(d), _) => d,
            (None, Some(g)) => match names.iface_for_gateway(g) {
                Some(i) => i,
                None => {
                    e.add(
                        format!("{key}.via"),
                        format!("gateway {g} is not on a connected subnet; add dev"),
                    );
                    continue;
                }
            },
            (None, None) => {
                if r.via.is_none() {
                    e.add(&key, "a unicast route needs via or dev");
                }
                continue;
            }
        };
        routes.push(Route {
            prefix,
            kind,
            out_if: Some(out_if),
            gateway: gw,
        });
    }
    for (fi, f) in raw.route_files.iter().enumerate() {
        let key = format!("route_files[{fi}]");
        let path = if Path::new(f).is_absolute() {
            PathBuf::from(f)
        } else {
            dir.join(f)
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => match route_file::parse(&text, &names) {
                Ok(rs) => routes.extend(rs),
                Err(le) => e.add(key, format!("{}: {le}", path.display())),
            },
            Err(err) => e.add(key, format!("cannot read {}: {err}", path.display())),
        }
    }

    // Static neighbours.
    let mut neighbours = Vec::new();
    for (si, s) in raw.neighbour.statics.iter().enumerate() {
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

    // Filter chains; the GRO stage when any port does GRO.
    let mut graph = GraphOptions {
        gro: ports.iter().any(|p| p.setup.features.any_rx_gro()),
        ..GraphOptions::default()
    };
    let hooks = [
        (HookPoint::Prerouting, &raw.filter.prerouting),
        (HookPoint::Input, &raw.filter.input),
        (HookPoint::Forward, &raw.filter.forward),
        (HookPoint::Output, &raw.filter.output),
        (HookPoint::Postrouting, &raw.filter.postrouting),
    ];
    for (hook, chain) in hooks {
        let Some(c) = chain else { continue };
        let key = format!("filter.{}", hook.name());
        let policy = verdict(&c.policy, &format!("{key}.policy"), e).unwrap_or(Verdict::Accept);
        let mut rules = Vec::new();
        for (ri, r) in c.rules.iter().enumerate() {
            let rkey = format!("{key}.rule[{ri}]");
            let mut rule = Rule::any(
                verdict(&r.action, &format!("{rkey}.action"), e).unwrap_or(Verdict::Accept),
            );
            rule.proto = match &r.proto {
                None => None,
                Some(ProtoSpec::Number(n)) => Some(*n),
                Some(ProtoSpec::Text(t)) => match t.as_str() {
                    "icmp" => Some(1),
                    "tcp" => Some(6),
                    "udp" => Some(17),
                    other => {
                        e.add(
                            format!("{rkey}.proto"),
                            format!("unknown protocol '{other}' (icmp, tcp, udp or a number)"),
                        );
                        None
                    }
                },
            };
            rule.src = r
                .src
                .as_ref()
                .and_then(|s| e.parse(&format!("{rkey}.src"), s, "a prefix"));
            rule.dst = r
                .dst
                .as_ref()
                .and_then(|s| e.parse(&format!("{rkey}.dst"), s, "a prefix"));
            rule.sport = r
                .sport
                .as_ref()
                .and_then(|p| port_range(p, &format!("{rkey}.sport"), e));
            rule.dport = r
                .dport
                .as_ref()
                .and_then(|p| port_range(p, &format!("{rkey}.dport"), e));
            if (rule.sport.is_some() || rule.dport.is_some())
                && !matches!(rule.proto, Some(6) | Some(17))
            {
                e.add(&rkey, "port matches need proto = \"tcp\" or \"udp\"");
            }
            for (field, val, allowed, slot) in [
                ("in", &r.in_if, hook.has_in_if(), &mut rule.in_if),
                ("out", &r.out_if, hook.has_out_if(), &mut rule.out_if),
            ] {
                let Some(name) = val else { continue };
                if !allowed {
                    e.add(
                        format!("{rkey}.{field}"),
                        format!("packets at {hook} have no {field}put interface"),
                    );
                    continue;
                }
                match names.iface(name) {
                    Some(i) => *slot = Some(i),
                    None => e.add(
                        format!("{rkey}.{field}"),
                        format!("no interface named '{name}'"),
                    ),
                }
            }
            rules.push(rule);
        }
        graph.chains.push((hook, Chain { rules, policy }));
    }

    // Applications.
    let mut apps = Vec::new();
    let mut binds = HashSet::new();
    for (ai, a) in raw.apps.iter().enumerate() {
        let key = format!("app[{ai}]");
        let Some(sa) =
            e.parse::<core::net::SocketAddrV4>(&format!("{key}.bind"), &a.bind, "an address:port")
        else {
            continue;
        };
        if sa.port() == 0 {
            e.add(format!("{key}.bind"), "port 0 cannot be bound");
        }
        if a.queue == 0 {
            e.add(format!("{key}.queue"), "must be at least 1");
        } else if a.queue > pool.buffers as usize {
            // The queue is allocated whole at bind, and could never fill past the pool.
            e.add(
                format!("{key}.queue"),
                format!(
                    "{} is more than the {} packet buffers there are (pool.buffers)",
                    a.queue, pool.buffers
                ),
            );
        }
        if !binds.insert(sa) {
            e.add(
                format!("{key}.bind"),
                format!("{sa} is bound by another app"),
            );
        }
        match a.kind.as_str() {
            _ if a.worker >= workers => e.add(
                format!("{key}.worker"),
                format!(
                    "worker {} does not exist (datapath.workers = {workers})",
                    a.worker
                ),
            ),
            "udp-sink" => apps.push(AppConfig::UdpSink {
                worker: a.worker,
                addr: *sa.ip(),
                port: sa.port(),
                queue: a.queue,
                check: a.check,
                gro: a.gro,
            }),
            "udp-echo" if a.gro => e.add(
                format!("{key}.gro"),
                "udp-echo answers datagram by datagram; only udp-sink takes super-datagrams",
            ),
            "udp-echo" => apps.push(AppConfig::UdpEcho {
                worker: a.worker,
                addr: *sa.ip(),
                port: sa.port(),
                queue: a.queue,
            }),
            other => e.add(
                format!("{key}.kind"),
                format!("unknown app '{other}' (udp-sink, udp-echo)"),
            ),
        }
    }

    Some(Config {
        mode: mode?,
        dispatch: dispatch?,
        burst: raw.datapath.burst,
        budget: raw.datapath.budget,
        time_cap_ns: raw.datapath.time_cap_us.saturating_mul(1000),
        workers,
        run: crate::datapath::RunParams {
            idle_spin_ns: raw.datapath.idle_spin_us.saturating_mul(1000),
            cores: raw.datapath.cores.clone(),
        },
        rps,
        pool,
        host,
        ports,
        routes,
        neighbours,
        graph,
        apps,
    })
}

/// Worker indices under `key`, each checked against `workers`.
fn worker_list(e: &mut Errs, key: &str, list: &[usize], workers: usize) -> Vec<u16> {
    for (i, &w) in list.iter().enumerate() {
        if w >= workers {
            e.add(
                format!("{key}[{i}]"),
                format!("worker {w} does not exist (datapath.workers = {workers})"),
            );
        }
    }
    list.iter()
        .map(|&w| w.min(usize::from(u16::MAX)) as u16)
        .collect()
}

fn verdict(s: &str, key: &str, e: &mut Errs) -> Option<Verdict> {
    match s {
        "accept" => Some(Verdict::Accept),
        "drop" => Some(Verdict::Drop),
        other => {
            e.add(key, format!("unknown verdict '{other}' (accept or drop)"));
            None
        }
    }
}

fn gen_spec(p: &PortFile, key: &str, e: &mut Errs) -> Option<GenSpec> {
    let Some(g) = &p.generator else {
        e.add(
            format!("{key}.generator"),
            "a gen port needs [port.generator] settings",
        );
        return None;
    };
    let gk = format!("{key}.generator");
    let src = e.parse::<Ipv4Addr>(&format!("{gk}.src"), &g.src, "an IPv4 address");
    let dst = e.parse::<Ipv4Addr>(&format!("{gk}.dst"), &g.dst, "an IPv4 address");
    let tcp = match g.proto.as_str() {
        "udp" => false,
        "tcp" => true,
        other => {
            e.add(
                format!("{gk}.proto"),
                format!("'{other}' is not udp or tcp"),
            );
            false
        }
    };
    if g.flows == 0 {
        e.add(format!("{gk}.flows"), "must be at least 1");
    }
    let dst_mac = g
        .dst_mac
        .as_ref()
        .and_then(|m| e.parse::<MacAddr>(&format!("{gk}.dst_mac"), m, "a MAC address"));
    let order = match &g.order {
        None => netbatch_ports::generator::FlowOrder::Bursty { burst: 64 },
        Some(o) => e.parse(&format!("{gk}.order"), o, "a flow order")?,
    };
    Some(GenSpec {
        src: src?,
        dst: dst?,
        tcp,
        flows: g.flows,
        sport: g.sport,
        dport: g.dport,
        payload: g.payload,
        dst_mac,
        order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigErrors> {
        Config::parse(text, Path::new("."), "test.toml")
    }

    const GOOD: &str = r#"
        [datapath]
        mode = "packet"
        dispatch = "runs"
        workers = 2
        rps = "deferred"

        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
        gro = "fraglist"

        [[port]]
        name = "eth1"
        mac = "02:00:00:00:00:02"
        addresses = ["198.51.100.1/24"]
        features = ["tx-tcp-segmentation"]
        [[port.vlan]]
        id = 100
        addresses = ["203.0.113.1/28"]

        [[route]]
        prefix = "10.0.0.0/8"
        via = "198.51.100.254"

        [[route]]
        prefix = "10.66.0.0/16"
        kind = "blackhole"

        [[neighbour.static]]
        ip = "198.51.100.254"
        mac = "02:00:00:00:00:fe"
        dev = "eth1"

        [filter.forward]
        policy = "accept"
        [[filter.forward.rule]]
        proto = "udp"
        dport = "9000-9100"
        in = "eth0"
        action = "drop"

        [[app]]
        kind = "udp-sink"
        bind = "0.0.0.0:5001"
        gro = true
        worker = 1
    "#;

    #[test]
    fn a_good_file_validates() {
        let c = parse(GOOD).unwrap();
        assert_eq!((c.mode, c.dispatch), (Mode::Packet, Dispatch::Runs));
        assert_eq!(c.ports.len(), 2);
        assert!(c.ports[1].setup.features.tx_tcp_segmentation);
        // gro = "fraglist" is rx-gro + rx-gro-list, and puts the gro stage in the graph.
        let f = c.ports[0].setup.features;
        assert!(f.rx_gro && f.rx_gro_list && !f.rx_udp_gro_forwarding);
        assert!(!c.ports[1].setup.features.any_rx_gro());
        assert!(c.graph.gro);
        assert!(matches!(
            c.apps[0],
            AppConfig::UdpSink {
                gro: true,
                worker: 1,
                ..
            }
        ));
        // Two workers, RPS deferred: every port spread over both, received on worker 0.
        assert_eq!(c.workers, 2);
        assert_eq!(
            c.rps.as_ref().map(|r| r.policy),
            Some(crate::rps::RpsPolicy::Deferred)
        );
        assert_eq!(
            (c.ports[0].rx_workers.clone(), c.ports[0].rps_map.clone()),
            (vec![0], vec![0, 1])
        );
        assert_eq!(c.ports[1].setup.vlans[0].name, "eth1.100");
        assert_eq!(c.routes[0].out_if, Some(1), "gateway on eth1's subnet");
        assert_eq!(c.routes[1].kind, RouteKind::Blackhole);
        assert_eq!(c.neighbours[0].iface, 1);
        let (hook, chain) = &c.graph.chains[0];
        assert_eq!(*hook, HookPoint::Forward);
        assert_eq!(chain.rules[0].dport, Some(PortRange { lo: 9000, hi: 9100 }));
        assert_eq!(chain.rules[0].in_if, Some(0));
        assert_eq!(c.apps.len(), 1);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_place() {
        let e = parse("[datapath]\nmod = \"list\"\n").unwrap_err();
        assert_eq!(e.errors.len(), 1);
        assert!(e.errors[0].reason.contains("mod"), "{e}");
        assert!(e.errors[0].reason.contains("line 2"), "{e}");
    }

    #[test]
    fn every_semantic_error_is_reported_with_its_key() {
        let bad = r#"
            [datapath]
            mode = "batch"
            burst = 0
            workers = 2
            rps = "sometimes"
            cores = [0]
            [[port]]
            name = "eth0"
            mac = "01:00:5e:00:00:01"
            addresses = ["192.0.2.1/33", "192.0.2.300/24"]
            features = ["tso"]
            gro = "on"
            rx_workers = [3]
            [[port]]
            name = "eth0"
            kind = "af_xdp"
            mac = "02:00:00:00:00:02"
            [[route]]
            prefix = "10.0.0.1/8"
            via = "192.0.2.254"
            [[route]]
            prefix = "10.1.0.0/16"
            via = "8.8.8.8"
            [[route]]
            prefix = "10.2.0.0/16"
            dev = "eth9"
            [filter.input]
            [[filter.input.rule]]
            dport = 53
            out = "eth0"
            action = "reject"
            [[app]]
            kind = "udp-sink"
            bind = "0.0.0.0:0"
            [[app]]
            kind = "udp-echo"
            bind = "0.0.0.0:7"
            gro = true
            [[app]]
            kind = "udp-sink"
            bind = "0.0.0.0:9"
            worker = 2
            [[app]]
            kind = "udp-sink"
            bind = "0.0.0.0:10"
            queue = 20000
        "#;
        let e = parse(bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for want in [
            "datapath.mode",
            "datapath.burst",
            "port[0].mac",
            "port[0].addresses[0]",
            "port[0].addresses[1]",
            "port[0].features[0]",
            "port[0].gro",
            "port[1].name",
            "port[1].interface",
            "route[0].prefix",
            "route[1].via",
            "route[2].dev",
            "filter.input.rule[0].action",
            "filter.input.rule[0]",
            "filter.input.rule[0].out",
            "app[0].bind",
            "app[1].gro",
            "app[2].worker",
            "app[3].queue",
            "datapath.rps",
            "datapath.cores",
            "port[0].rx_workers[0]",
        ] {
            assert!(keys.contains(&want), "missing {want} in:\n{e}");
        }
        let text = e.to_string();
        assert!(
            text.contains("port[0].features[0]: unknown feature 'tso'"),
            "{text}"
        );
        assert!(
            text.contains("port[0].gro: unknown GRO mode 'on' (off, standard, fraglist)"),
            "{text}"
        );
        assert!(
            text.contains("route[0].prefix: '10.0.0.1/8' is not a prefix"),
            "{text}"
        );
        assert!(
            text.contains("filter.input.rule[0].out: packets at input have no output interface"),
            "{text}"
        );
    }

    /// A kernel backend is not configured to do what it cannot: AF_XDP has no
    /// segmentation offload and frames of 2048 - 256 bytes, and neither AF_PACKET nor TAP
    /// can send a fraglist chain whole.
    #[test]
    fn backends_refuse_offloads_and_mtus_they_cannot_carry() {
        let bad = r#"
            [[port]]
            name = "x0"
            kind = "af_xdp"
            interface = "veth0"
            mac = "02:00:00:00:00:01"
            mtu = 9000
            features = ["rx-gro", "tx-tcp-segmentation", "tx-gso-list"]
            [[port]]
            name = "p0"
            kind = "af_packet"
            interface = "veth1"
            mac = "02:00:00:00:00:02"
            features = ["tx-tcp-segmentation", "tx-gso-list"]
        "#;
        let e = parse(bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "port[0].features[1]",
                "port[0].features[2]",
                "port[0].mtu",
                "port[1].features[1]"
            ],
            "{e}"
        );
        // 1792-byte frames: 14 bytes of Ethernet header and 8 of VLAN tags leave 1770.
        assert!(e.to_string().contains("at most 1770"), "{e}");
        let ok = r#"
            [[port]]
            name = "x0"
            kind = "af_xdp"
            interface = "veth0"
            mac = "02:00:00:00:00:01"
            mtu = 1770
            [[port]]
            name = "p0"
            kind = "af_packet"
            interface = "veth1"
            mac = "02:00:00:00:00:02"
            features = ["tx-tcp-segmentation", "tx-udp-segmentation"]
        "#;
        if let Err(e) = parse(ok) {
            panic!("refused: {e}");
        }
    }
}
