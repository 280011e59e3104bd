//! The configuration file (TOML): what `netbatch run`, `replay` and `check-config` read.
//!
//! Parsing is strict: an unknown key is an error (so a typo is never silently ignored),
//! and every problem is reported with the key it belongs to (`port[1].addresses[0]`),
//! all of them at once: every unknown key with the nearest known key of its table
//! ("did you mean `rx_workers`?"), every value of the wrong type (`shape`), and the
//! sections' checks of the rest. A configuration either validates
//! entirely or nothing starts. Each section validates its own keys, in a module of its
//! own; this one runs them in turn and hands on what later sections need (the worker
//! count, the pool size, the interface names and addresses the ports define, the
//! routes). See `examples/` for commented files.
//!
//! Besides malformed values, what can only be a mistake is refused, naming the other
//! party where there is one: a MAC that is no station's or is on two ports, an
//! interface address that is no host's, one address or subnet on two interfaces, a
//! prefix routed twice, a static neighbour the table would never be asked for, an app
//! bound to an address that is not ours, sizes the pool cannot hold (each section's
//! module states its rules). What a file alone cannot say (whether its kernel interfaces
//! exist here with the queues and kind the ports need, whether the memory is there) is
//! [`Config::check_machine`]'s, which `check-config` and [`Config::load_for_run`] ask;
//! [`Config::load`] asks the kernel only for a port's default MAC, so configurations for
//! other machines still load for `replay` and the tests.
//!
//! A `udp-sink` app reads one or more ports of one address, one socket per port:
//! `bind = "0.0.0.0:5001"`, a range `"0.0.0.0:5001-5004"`, a list `"0.0.0.0:5001,5003"`
//! (or ranges in a list); an IPv6 address is written in brackets (`"[::]:5001"`). Port 0
//! is refused, and no socket is bound twice.
//!
//! Routes and static neighbours are IPv4 or IPv6 by their addresses, each family into
//! its own list ([`Config::routes`], [`Config::routes6`]; [`Config::neighbours`],
//! [`Config::neighbours6`]), checked by the same rules with each family's notions
//! (`routes` and `neighbour` say which).
//!
//! A configuration can also be made in code: [`Config::new`] gives what a file with only
//! those `[[port]]`s would (every other key at its default), and its fields are then set
//! directly; [`PortConfig::new`] is a port with no other keys. The tests and the
//! benchmark build their datapaths so, through [`crate::build`] as `run` and `replay` do.

mod apps;
mod classifier;
mod conntrack;
mod control;
mod datapath;
mod defrag;
mod filter;
mod icmp;
mod linux;
mod machine;
mod nat;
mod neighbour;
mod pool;
mod ports;
mod routes;
mod rules;
mod shape;
mod vrf;

use core::fmt;
use std::path::Path;

use netbatch_engine::{Dispatch, Mode, PoolConfig};
use netbatch_stack::GraphOptions;
use netbatch_stack::host::HostParams;
use netbatch_stack::route::Route;
use serde::Deserialize;

use crate::setup::StaticNeighbour;

pub use apps::{AppConfig, AppKind, SinkOptions};
pub use control::{ControlConfig, SOCKET_DIR, group_id};
pub use linux::LinuxConfig;
pub(crate) use ports::any_gro;
pub use ports::{GenSpec, PortConfig, PortKind};
pub use rules::{AnyRule, RuleWords, starts_policy_rule};
pub use vrf::VrfConfig;

/// What a configuration is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `netbatch run`: live ports on this machine.
    Run,
    /// `netbatch replay` (and the benchmark, the tests): any port kind; the ports are
    /// in memory.
    Replay,
}

impl Purpose {
    /// The command it is for.
    pub fn name(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Replay => "replay",
        }
    }
}

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

/// The file as written: one table (or array of tables) per section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    datapath: datapath::DatapathFile,
    #[serde(default)]
    pool: pool::PoolFile,
    #[serde(default)]
    icmp: icmp::IcmpFile,
    #[serde(default)]
    neighbour: neighbour::NeighFile,
    #[serde(default, rename = "port")]
    ports: Vec<ports::PortFile>,
    #[serde(default, rename = "route")]
    routes: Vec<routes::RouteFile>,
    #[serde(default)]
    route_files: Vec<String>,
    #[serde(default, rename = "rule")]
    rules: Vec<rules::RuleFile>,
    #[serde(default, rename = "vrf")]
    vrfs: Vec<vrf::VrfFile>,
    #[serde(default)]
    filter: filter::FilterFile,
    conntrack: Option<conntrack::ConntrackFile>,
    defrag: Option<defrag::DefragFile>,
    nat: Option<nat::NatFile>,
    #[serde(default)]
    classifier: classifier::ClassifierFile,
    #[serde(default, rename = "app")]
    apps: Vec<apps::AppFile>,
    #[serde(default)]
    control: control::ControlFile,
    #[serde(default)]
    metrics: control::MetricsFile,
    #[serde(default)]
    linux: Option<linux::LinuxFile>,
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
    pub run: netbatch_datapath::threads::RunParams,
    /// RPS (none: off).
    pub rps: Option<netbatch_datapath::rps::RpsParams>,
    /// Buffer pool.
    pub pool: PoolConfig,
    /// Host settings.
    pub host: HostParams,
    /// Ports in order.
    pub ports: Vec<PortConfig>,
    /// Routes (from the file and route files).
    pub routes: Vec<Route>,
    /// IPv6 routes (from the file and route files).
    pub routes6: Vec<netbatch_stack::route::Route6>,
    /// Policy rules (`[[rule]]`), after Linux's default ones, in file order.
    pub rules: Vec<netbatch_stack::route::rule::Rule>,
    /// IPv6 policy rules.
    pub rules6: Vec<netbatch_stack::route::rule::Rule6>,
    /// Routes of numbered tables (`[[route]]` with a `table`), by table.
    pub tables: std::collections::BTreeMap<u32, Vec<Route>>,
    /// IPv6 routes of numbered tables, by table.
    pub tables6: std::collections::BTreeMap<u32, Vec<netbatch_stack::route::Route6>>,
    /// VRFs (`[[vrf]]`).
    pub vrfs: Vec<VrfConfig>,
    /// Each interface's VRF name, in interface order ("" for main; interfaces beyond
    /// the list are main's).
    pub iface_vrfs: Vec<String>,
    /// Static neighbours.
    pub neighbours: Vec<StaticNeighbour>,
    /// Static IPv6 neighbours.
    pub neighbours6: Vec<crate::setup::StaticNeighbour6>,
    /// Hooks and hand-offs. `gro` is not read: the build puts the GRO stage in when some
    /// port does GRO, whatever the ports are by then.
    pub graph: GraphOptions,
    /// Applications.
    pub apps: Vec<AppConfig>,
    /// The control socket and the metrics endpoint.
    pub control: ControlConfig,
    /// The kernel routing table mirrored (`[linux]`), if any.
    pub linux: Option<LinuxConfig>,
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

impl Config {
    /// The configuration of a file with only these `ports` (not validated): every other
    /// setting at the default an empty file gets.
    pub fn new(ports: Vec<PortConfig>) -> Self {
        let raw = File::default();
        let mut e = Errs::default();
        let dp = datapath::validate(&raw.datapath, &mut e);
        let pool = pool::validate(&raw.pool, &dp, &mut e);
        let neigh = neighbour::tunables(&raw.neighbour, pool.buffers, &mut e);
        let host = icmp::host(&raw.icmp, &dp, neigh);
        debug_assert!(e.0.is_empty(), "the defaults are valid");
        let graph = GraphOptions::default();
        Self {
            mode: dp.mode.unwrap_or(Mode::List),
            dispatch: dp.dispatch.unwrap_or(Dispatch::Buckets),
            burst: dp.burst,
            budget: dp.budget,
            time_cap_ns: dp.time_cap_ns,
            workers: dp.workers,
            run: dp.run,
            rps: dp.rps,
            pool,
            host,
            ports,
            routes: Vec::new(),
            routes6: Vec::new(),
            rules: Vec::new(),
            rules6: Vec::new(),
            tables: Default::default(),
            tables6: Default::default(),
            vrfs: Vec::new(),
            iface_vrfs: Vec::new(),
            neighbours: Vec::new(),
            neighbours6: Vec::new(),
            graph,
            apps: Vec::new(),
            control: ControlConfig::default(),
            linux: None,
        }
    }

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

    /// What this configuration needs of the machine it is to run on, and lacks: its
    /// kernel interfaces (that they exist, have the MTU, queues and kind the ports need)
    /// and the memory for the pool; every problem with its key (see `machine`).
    pub fn check_machine(&self) -> Vec<ConfigError> {
        machine::check(self, &machine::Here)
    }

    /// Everything that stops this (valid) configuration from serving `purpose`, with its
    /// key: for [`Purpose::Run`], ports that are not live interfaces (`pcap`, `gen`) and,
    /// when `machine`, what this machine lacks ([`Self::check_machine`]). `netbatch run`
    /// ([`Self::load_for_run`]) and `netbatch check-config` both ask here, so that what
    /// one accepts the other does too.
    pub fn unfit_for(&self, purpose: Purpose, machine: bool) -> Vec<ConfigError> {
        let mut out = Vec::new();
        if purpose == Purpose::Run {
            for (i, p) in self.ports.iter().enumerate() {
                let (kind, cmd) = match p.kind {
                    PortKind::Pcap => ("pcap", "replay"),
                    PortKind::Gen(_) => ("gen", "bench"),
                    _ => continue,
                };
                out.push(ConfigError {
                    key: format!("port[{i}].kind"),
                    reason: format!(
                        "kind {kind} is not a live interface: `netbatch run` cannot serve \
                         port '{}' (the file is for `netbatch {cmd}`; a live port is \
                         af_packet, af_xdp or tap with `interface = \"NAME\"`, or vhost_user with `socket = \"PATH\"`)",
                        p.setup.name
                    ),
                });
            }
            if machine {
                out.extend(self.check_machine());
            }
        }
        out
    }

    /// Reads and validates a configuration file, then checks that `netbatch run` can
    /// serve it on this machine ([`Self::unfit_for`]): what `netbatch run` starts from.
    pub fn load_for_run(path: &Path) -> Result<Self, ConfigErrors> {
        let cfg = Self::load(path)?;
        let errors = cfg.unfit_for(Purpose::Run, true);
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors {
                file: path.display().to_string(),
                errors,
            })
        }
    }

    /// Reads and validates a configuration file and checks this machine has what it
    /// needs ([`Self::check_machine`]), without asking about the ports' kinds: what a
    /// reload of a running datapath reads (a reload cannot change the ports, that needs a
    /// restart and is refused, so they are those already serving), and what the tests'
    /// datapaths over in-memory ports start from.
    pub fn load_on_this_machine(path: &Path) -> Result<Self, ConfigErrors> {
        let cfg = Self::load(path)?;
        let errors = cfg.check_machine();
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors {
                file: path.display().to_string(),
                errors,
            })
        }
    }

    /// A filter rule written on a command line (`HOOK KEY VALUE...`, the keys of a
    /// `[[filter.HOOK.rule]]`), checked as the file's rules are, with this
    /// configuration's interface names.
    pub fn parse_rule(
        &self,
        words: &[String],
    ) -> Result<
        (
            netbatch_stack::filter::HookPoint,
            netbatch_stack::filter::Rule,
        ),
        String,
    > {
        filter::rule_from_words(words, &ports::Names::of(&self.ports))
    }

    /// A route written on a command line (an `ip route` line, or an `ip -6 route` one),
    /// with this configuration's interface names, subnets and prefixes.
    pub fn parse_route(&self, line: &str) -> Result<netbatch_stack::route::file::AnyRoute, String> {
        self.parse_route_in(line, "")
    }

    /// A route written on a command line for the VRF named `vrf` ("" for main): a
    /// gateway without `dev` is looked for on that VRF's subnets.
    pub fn parse_route_in(
        &self,
        line: &str,
        vrf: &str,
    ) -> Result<netbatch_stack::route::file::AnyRoute, String> {
        let names = ports::Names::of(&self.ports).with_vrfs(
            self.iface_vrfs
                .iter()
                .map(|v| (v.clone(), String::new()))
                .collect(),
        );
        netbatch_stack::route::file::parse_line(line, &ports::Scoped { names: &names, vrf })?
            .ok_or_else(|| "no route given".to_string())
    }

    /// The interface index of `name` (as routes and neighbours number interfaces).
    pub fn iface_index(&self, name: &str) -> Option<u16> {
        use netbatch_stack::route::file::Resolve;
        ports::Names::of(&self.ports).iface(name)
    }

    /// The port of interface `i`, whether it is the port's untagged interface, and the
    /// interface's addresses (interfaces numbered as [`Self::iface_names`] lists them).
    pub fn iface_addrs_mut(
        &mut self,
        i: u16,
    ) -> Option<(usize, bool, &mut Vec<netbatch_stack::prefix::IfAddr>)> {
        let mut n = 0usize;
        for (pi, p) in self.ports.iter_mut().enumerate() {
            let untagged = p.setup.addrs.as_mut().map(|a| (true, a)).into_iter();
            let tagged = p.setup.vlans.iter_mut().map(|v| (false, &mut v.addrs));
            for (native, a) in untagged.chain(tagged) {
                if n == usize::from(i) {
                    return Some((pi, native, a));
                }
                n += 1;
            }
        }
        None
    }

    /// The IPv6 addresses of interface `i` (interfaces numbered as
    /// [`Self::iface_names`] lists them).
    pub fn iface_addrs6_mut(
        &mut self,
        i: u16,
    ) -> Option<&mut Vec<netbatch_stack::prefix::If6Addr>> {
        let mut n = 0usize;
        for p in &mut self.ports {
            let untagged = p.setup.addrs.is_some().then_some(&mut p.setup.addrs6);
            let tagged = p.setup.vlans.iter_mut().map(|v| &mut v.addrs6);
            for a in untagged.into_iter().chain(tagged) {
                if n == usize::from(i) {
                    return Some(a);
                }
                n += 1;
            }
        }
        None
    }

    /// Interface names in interface order.
    pub fn iface_names(&self) -> Vec<String> {
        ports::Names::of(&self.ports).into_names()
    }

    /// Validates configuration text; route files are resolved relative to `dir`. Every
    /// error is reported at once: unknown keys (each with the nearest known key of its
    /// table), values of the wrong type, then the sections' checks of what was left.
    pub fn parse(text: &str, dir: &Path, file: &str) -> Result<Self, ConfigErrors> {
        let read = shape::read::<File>(text);
        let mut errors = read.errors.clone();
        let cfg = read.value.as_ref().and_then(|raw| {
            let mut e = Errs::default();
            let cfg = validate(raw, dir, &mut e);
            // A value removed for its type took its default: errors about it are not
            // about the file.
            errors.extend(e.0.into_iter().filter(|x| !read.covers(&x.key)));
            cfg
        });
        match cfg {
            Some(c) if errors.is_empty() => Ok(c),
            _ => Err(ConfigErrors {
                file: file.into(),
                errors,
            }),
        }
    }
}

/// Validates the sections in file order, each reporting its own errors, and passes on
/// what later ones need: the worker count and RPS settings, the pool size, the
/// NAT with two or more workers ([`netbatch_stack::nat::steer`]): RPS on (it steers a
/// connection's replies to the worker owning it), every port spread over the same
/// workers (a reply may come in on another port than its connection's first packet),
/// and every `dnat` rule one steering can foresee; its forwards.
fn nat_workers(
    n: &netbatch_stack::nat::Config,
    dp: &datapath::Datapath,
    ports: &[PortConfig],
    e: &mut Errs,
) -> Vec<netbatch_stack::nat::steer::Forward> {
    if dp.rps.is_none() {
        e.add(
            "datapath.rps",
            format!(
                "NAT with {} workers needs RPS: its symmetric steering brings a translated \
                 connection's replies to the worker whose table holds it",
                dp.workers
            ),
        );
    }
    if let Some(first) = ports.first() {
        for (i, p) in ports.iter().enumerate().skip(1) {
            if p.rps_map != first.rps_map {
                e.add(
                    format!("port[{i}].rps_map"),
                    format!(
                        "{:?} differs from port[0]'s {:?}: with NAT and two or more workers \
                         every port spreads over the same workers (a reply may come in on \
                         another port than its connection's first packet)",
                        p.rps_map, first.rps_map
                    ),
                );
            }
        }
    }
    if n.udp.independent_mapping {
        e.add(
            "nat.udp_mapping",
            format!(
                "endpoint-independent mapping needs one worker: with {} workers a \
                 connection's port is chosen so its replies steer to the worker that owns \
                 it, and one inside endpoint's connections to different remote ends are \
                 owned by different workers",
                dp.workers
            ),
        );
    }
    let (fw, bad) = netbatch_stack::nat::steer::forwards(n);
    for (i, why) in bad {
        e.add(format!("nat.prerouting.rule[{i}]"), why);
    }
    fw
}

/// interface names and addresses the ports define, the routes (whose gateways static
/// neighbours may be).
fn validate(raw: &File, dir: &Path, e: &mut Errs) -> Option<Config> {
    let dp = datapath::validate(&raw.datapath, e);
    let pool = pool::validate(&raw.pool, &dp, e);
    let neigh = neighbour::tunables(&raw.neighbour, pool.buffers, e);
    let host = icmp::host(&raw.icmp, &dp, neigh);
    let (ports, names) = ports::validate(&raw.ports, dp.workers, dp.rps.is_some(), e);
    pool::fits_ports(&pool, raw.ports.iter().map(ports::kind_of).enumerate(), e);
    let vrfs = vrf::validate(&raw.vrfs, e);
    let iface_vrfs = ports::iface_vrfs(&raw.ports, e);
    vrf::check_members(&iface_vrfs, &vrfs, e);
    let names = names.with_vrfs(iface_vrfs);
    let (routes, routes6) = routes::validate(&raw.routes, &raw.route_files, dir, &names, e);
    let (tables, tables6) = rules::tables(&raw.routes, &names, &vrfs, e);
    let (rules, rules6) = rules::validate(&raw.rules, &names, e);
    let (neighbours, neighbours6) = neighbour::statics(
        &raw.neighbour,
        &names,
        (&routes, &routes6),
        neigh.max_entries,
        e,
    );
    let port_names: Vec<String> = ports.iter().map(|p| p.setup.name.clone()).collect();
    let graph = GraphOptions {
        chains: filter::validate(&raw.filter, &names, e),
        classifier: classifier::validate(&raw.classifier, &port_names, e),
        conntrack: conntrack::validate(raw.conntrack.as_ref(), dp.workers, e),
        defrag: defrag::validate(raw.defrag.as_ref(), e),
        nat: nat::validate(raw.nat.as_ref(), &names, e),
        ..GraphOptions::default()
    };
    let mut graph = graph;
    // NAT with two or more workers: replies are steered home (`nat::steer`): by RPS,
    // over one map, with the dnat rules foreseen.
    let forwards = match &graph.nat {
        Some(n) if dp.workers > 1 => nat_workers(n, &dp, &ports, e),
        _ => Vec::new(),
    };
    if graph.conntrack.is_none()
        && (graph.nat.is_some() || graph.chains.iter().any(|(_, c)| c.uses_ct()))
    {
        graph.conntrack = conntrack::validate(Some(&Default::default()), dp.workers, e);
    }
    let mut dp = dp;
    if let Some(r) = dp.rps.as_mut() {
        // Per-worker tables: both directions of a connection must reach one worker.
        r.symmetric = graph.conntrack.is_some();
        r.forwards = forwards;
    }
    let apps = apps::validate(&raw.apps, dp.workers, pool.buffers, &names, e);
    let control = control::validate(&raw.control, &raw.metrics, e);
    let linux = linux::validate(raw.linux.as_ref(), e);
    if linux.as_ref().is_some_and(|l| l.vrfs) {
        // One source of VRFs: the kernel's devices, not the file.
        let why = "VRFs come from the control namespace's VRF devices here (`linux.vrfs = true`): \
            make it with `ip link add NAME type vrf table N` and `ip link set DEV master NAME` there";
        for i in 0..raw.vrfs.len() {
            e.add(format!("vrf[{i}]"), why);
        }
        for (v, key) in names.vrfs() {
            if !v.is_empty() {
                e.add(key.clone(), why);
            }
        }
    }
    let mut ports = ports;
    let mut graph = graph;
    if let Some(l) = &linux {
        linux::pair_ports(&mut ports, l, dp.workers, e);
        graph.host_pairs = l.pairs;
    }
    Some(Config {
        mode: dp.mode?,
        dispatch: dp.dispatch?,
        burst: dp.burst,
        budget: dp.budget,
        time_cap_ns: dp.time_cap_ns,
        workers: dp.workers,
        run: dp.run,
        rps: dp.rps,
        pool,
        host,
        ports,
        routes,
        routes6,
        rules,
        rules6,
        tables,
        tables6,
        vrfs,
        // Empty when every interface is main's, as `Config::new` makes it.
        iface_vrfs: if names.vrfs().iter().all(|(v, _)| v.is_empty()) {
            Vec::new()
        } else {
            names.vrfs().iter().map(|(v, _)| v.clone()).collect()
        },
        neighbours,
        neighbours6,
        graph,
        apps,
        control,
        linux,
    })
}

/// Validates `text` as a file in the current directory.
#[cfg(test)]
fn parse_test(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("."), "test.toml")
}

#[cfg(test)]
mod tests {
    use netbatch_engine::{Dispatch, Mode};
    use netbatch_stack::filter::{HookPoint, PortRange};
    use netbatch_stack::route::RouteKind;

    use super::AppConfig;
    use super::parse_test as parse;

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
        assert!(crate::build::Builder::new(&c).graph_options().gro);
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
            Some(netbatch_datapath::rps::RpsPolicy::Deferred)
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

    /// `Config::new` is what a file with only those ports gives: every other setting at
    /// the same default, the GRO stage when a port does GRO.
    #[test]
    fn new_is_a_file_with_only_its_ports() {
        let file = parse(
            r#"
            [[port]]
            name = "eth0"
            mac = "02:00:00:00:00:01"
            addresses = ["192.0.2.1/24"]
            gro = "fraglist"
            [[port]]
            name = "eth1"
            mac = "02:00:00:00:00:02"
            addresses = ["198.51.100.1/24"]
            "#,
        )
        .unwrap();
        let made = super::Config::new(
            file.ports
                .iter()
                .map(|p| super::PortConfig::new(p.setup.clone()))
                .collect(),
        );
        assert_eq!(format!("{made:?}"), format!("{file:?}"));
        assert!(crate::build::Builder::new(&made).graph_options().gro);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_place() {
        let e = parse(
            "[datapath]\nmod = \"list\"\n[[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\n",
        )
        .unwrap_err();
        assert_eq!(e.errors.len(), 1, "{e}");
        assert_eq!(e.errors[0].key, "datapath.mod", "{e}");
        assert!(e.errors[0].reason.contains("did you mean `mode`"), "{e}");
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

    /// docs/configuration.md lists every key the reader knows, in its table's section:
    /// each table is probed with a key it cannot know, and the keys the refusal lists
    /// (serde's own list of the struct's fields) must each have a row (`| \`key\` |`)
    /// in the section whose heading names the table.
    #[test]
    fn the_reference_lists_every_key() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
        )
        .expect("docs/configuration.md");
        let probes: &[(&str, &str)] = &[
            ("Keys at the top level", ""),
            ("`[datapath]`", "[datapath]\n"),
            ("`[pool]`", "[pool]\n"),
            ("`[icmp]`", "[icmp]\n"),
            ("`[neighbour]`", "[neighbour]\n"),
            ("`[[neighbour.static]]`", "[[neighbour.static]]\n"),
            ("`[[port]]`", "[[port]]\n"),
            ("`[[port.vlan]]`", "[[port]]\nname = \"a\"\n[[port.vlan]]\n"),
            (
                "`[port.generator]`",
                "[[port]]\nname = \"a\"\n[port.generator]\n",
            ),
            ("`[[route]]`", "[[route]]\n"),
            (
                "`nexthops = [{ ... }]`",
                "[[route]]\nprefix = \"default\"\nnexthops = [{ __probe = 1 }]\n",
            ),
            ("`[[rule]]`", "[[rule]]\n"),
            ("`[[vrf]]`", "[[vrf]]\n"),
            ("`[filter]`", "[filter]\n"),
            ("`[filter.HOOK]`", "[filter.forward]\n"),
            ("`[[filter.HOOK.rule]]`", "[[filter.forward.rule]]\n"),
            ("`[defrag]`", "[defrag]\n"),
            ("`[nat]`", "[nat]\n"),
            ("`[nat.HOOK]`", "[nat.postrouting]\n"),
            (
                "`[[nat.HOOK.rule]]`",
                "[[nat.postrouting.rule]]\naction = \"accept\"\n",
            ),
            ("`[classifier]`", "[classifier]\n"),
            ("`[[classifier.filter]]`", "[[classifier.filter]]\n"),
            ("`[[app]]`", "[[app]]\n"),
            ("`[control]`", "[control]\n"),
            ("`[metrics]`", "[metrics]\n"),
            ("`[linux]`", "[linux]\n"),
        ];
        let mut checked = 0;
        for (heading, table) in probes {
            let text = if table.contains("__probe") {
                table.to_string()
            } else {
                format!("{table}__probe = 1\n")
            };
            let e = parse(&text).expect_err("an unknown key");
            let refusal = e
                .errors
                .iter()
                .find(|x| x.key.ends_with("__probe"))
                .unwrap_or_else(|| panic!("{heading}: {e}"));
            let keys: Vec<&str> = refusal
                .reason
                .split("this table's keys: ")
                .nth(1)
                .unwrap_or_else(|| panic!("{heading}: {}", refusal.reason))
                .split(", ")
                .collect();
            let start = doc
                .lines()
                .position(|l| l.starts_with('#') && l.contains(heading) || l.starts_with(heading))
                .unwrap_or_else(|| panic!("no section {heading} in docs/configuration.md"));
            let section: Vec<&str> = doc
                .lines()
                .skip(start + 1)
                .take_while(|l| !l.starts_with("## ") && !l.starts_with("### "))
                .collect();
            for k in keys {
                let row = format!("| `{k}` |");
                let top_table = format!("`[{k}]`");
                let top_array = format!("`[[{k}]]`");
                let listed = section.iter().any(|l| l.starts_with(&row))
                    || (heading.starts_with("Keys at the top")
                        && doc.lines().any(|l| {
                            l.starts_with('#') && (l.contains(&top_table) || l.contains(&top_array))
                        }));
                assert!(listed, "docs/configuration.md, {heading}: no row for `{k}`");
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked} keys checked");
    }

    /// `load` reads the file alone (a configuration for another machine loads);
    /// `load_for_run` also refuses what this machine lacks, at the key it belongs to: here
    /// a kernel interface that is not there (a made-up name that no test creates).
    #[test]
    fn load_for_run_checks_the_machine_and_load_does_not() {
        let dir = tempfile::Builder::new()
            .prefix("netbatch-config-run-")
            .tempdir()
            .unwrap();
        let f = dir.path().join("absent.toml");
        std::fs::write(
            &f,
            "[[port]]\nname = \"up\"\nkind = \"af_packet\"\ninterface = \"nb-absent0\"\n\
             mac = \"02:00:5e:00:53:01\"\naddresses = [\"192.0.2.1/24\"]\n",
        )
        .unwrap();
        let loaded = super::Config::load(&f);
        let for_run = super::Config::load_for_run(&f);
        assert!(loaded.is_ok(), "{:?}", loaded.err());
        let e = for_run.expect_err("nb-absent0 is not on this machine");
        assert_eq!(e.errors.len(), 1, "{e}");
        assert_eq!(e.errors[0].key, "port[0].interface", "{e}");
        assert!(
            e.errors[0].reason.contains("no interface 'nb-absent0'"),
            "{e}"
        );
    }
}
