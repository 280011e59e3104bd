//! The control plane of a running datapath: what `netbatch show`, `clear`, `route`,
//! `neigh`, `rule`, `reload` and `trace` ask through the control socket
//! ([`server`]), and what `/metrics` and the signals read.
//!
//! Invariants:
//! - The control plane never stops traffic. It reads and changes a worker only through a
//!   job in the worker's mailbox ([`netbatch_datapath::threads::Remote`]), run between
//!   two rounds, when no packet is inside the graph; a worker never waits for it.
//! - A route change is made on a copy of the table, which replaces the workers' shared
//!   table between lists (RCU-like: a list is routed wholly by the old or wholly by the
//!   new table). Copies come from the current table, so adjacency indices of packets
//!   waiting for a neighbour stay valid. IPv4 and IPv6 have a table each (`host.routes`,
//!   `host.routes6`), changed and published the same way: a command or reload changes
//!   each family's table only if it changes that family's routes.
//! - Route tables are double-buffered: the table a publication retires is kept as the
//!   spare, with the changes it lacks, and the next change is made on it once no worker
//!   holds it (the workers let go of it before the publication returns), after those
//!   changes are replayed on it (`Draft`). Replaying the same inserts and removals in
//!   the same order on an equal table gives an equal table, hop for hop, so the spare
//!   is the live table's copy without a copy being made: steady route churn allocates
//!   no table (an IPv4 table is 64 MiB of DIR-24-8) and the resident set holds two
//!   tables, always, rather than a third for a moment at each change. A table is copied
//!   only when there is no spare yet (the first change) or it is still held.
//! - A change is checked whole before anything is applied: a refused command or reload
//!   changes nothing.
//! - `clear counters` does not touch the workers' counters (their sums must keep
//!   `rx + originated = tx + delivered + dropped + held`, and Prometheus counters must
//!   not go back): it records them as a baseline that `show` subtracts.

pub mod conntrack;
mod policy;
pub mod server;
pub mod show;
mod vrf;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netbatch_datapath::threads::Remote;
use netbatch_datapath::worker::Worker;
use netbatch_stack::filter::{Chain, HookPoint};
use netbatch_stack::route::file::{AnyRoute, LineFamily};
use netbatch_stack::route::rule::PolicyOf;
use netbatch_stack::route::{Family, RouteOf, Routes, Routes6, RoutesOf, V4, V6};
use netbatch_wire::ethernet::MacAddr;
use serde_json::{Value, json};

use crate::build::{BuildError, Builder};
use crate::config::Config;
use crate::setup::{StaticNeighbour, StaticNeighbour6};

/// One change of a batch of routes of family `F` ([`Control::apply_routes`],
/// [`Control::apply_routes6`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteChangeOf<F: Family> {
    /// Add the route, or replace the one for its prefix.
    Replace(RouteOf<F>),
    /// Remove the route for exactly this prefix (if there is one).
    Delete(F::Prefix),
}

/// A change of the IPv4 routes.
pub type RouteChange = RouteChangeOf<V4>;
/// A change of the IPv6 routes.
pub type RouteChange6 = RouteChangeOf<V6>;

/// An answer to a command: success, text for a person, data for `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Whether the command did what it asked.
    pub ok: bool,
    /// For a person (tables, or the error).
    pub text: String,
    /// For a program.
    pub data: Value,
}

impl Reply {
    fn ok(text: impl Into<String>, data: Value) -> Self {
        Self {
            ok: true,
            text: text.into(),
            data,
        }
    }

    fn err(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            ok: false,
            data: json!({ "error": text }),
            text,
        }
    }
}

/// What the control plane keeps: the configuration as changed live, the table the
/// workers hold, the counters at the last clear.
struct State {
    cfg: Config,
    routes: Arc<Routes>,
    routes6: Arc<Routes6>,
    /// The IPv4 table the last publication retired (none before the first).
    spare: Option<Spare<V4>>,
    /// The IPv6 table the last publication retired.
    spare6: Option<Spare<V6>>,
    baseline: Option<Value>,
    /// The control namespace's kernel rules the Linux mirror follows (IPv4, IPv6), walked
    /// with the configured ones.
    mirrored_rules: Vec<netbatch_stack::route::rule::RuleOf<V4>>,
    mirrored_rules6: Vec<netbatch_stack::route::rule::RuleOf<V6>>,
}

/// A table a publication retired, and the changes that made the table that replaced
/// it: replayed in order, they make it the live table again.
struct Spare<F: Family> {
    table: Arc<RoutesOf<F>>,
    behind: Vec<RouteChangeOf<F>>,
}

/// A copy of the live table being changed for the next publication: the spare brought
/// up to date, or a copy made now ([`Control::draft`]). What is done to it is logged, so
/// that the table it replaces can be brought up to date the same way.
struct Draft<F: Family> {
    /// Held by nobody else ([`Arc::make_mut`] never copies it).
    table: Arc<RoutesOf<F>>,
    log: Vec<RouteChangeOf<F>>,
    /// An insert was refused (which may have left an unused hop behind): the draft is
    /// not published, and not kept as the spare.
    refused: bool,
}

impl<F: Family> Draft<F> {
    /// Adds or replaces the route for `r.prefix`.
    fn insert(&mut self, r: RouteOf<F>) -> Result<(), netbatch_stack::route::RouteError> {
        match Arc::make_mut(&mut self.table).insert(r.clone()) {
            Ok(()) => {
                self.log.push(RouteChangeOf::Replace(r));
                Ok(())
            }
            Err(e) => {
                self.refused = true;
                Err(e)
            }
        }
    }

    /// Removes the route for exactly `p`, if there is one.
    fn remove(&mut self, p: F::Prefix) -> Option<RouteOf<F>> {
        let r = Arc::make_mut(&mut self.table).remove(p)?;
        self.log.push(RouteChangeOf::Delete(p));
        Some(r)
    }

    /// The route for exactly `p`.
    fn get(&self, p: &F::Prefix) -> Option<&RouteOf<F>> {
        self.table.get(p)
    }
}

/// Where each family's routes are: the table the workers hold, the configured routes,
/// the table a configuration builds. The control plane's route commands, batches and
/// reloads are written once over it.
trait Published: LineFamily {
    /// The table the workers hold.
    fn live(st: &State) -> &Arc<RoutesOf<Self>>;
    /// Records `t` as the table the workers hold; returns the one they held.
    fn set_live(st: &mut State, t: Arc<RoutesOf<Self>>) -> Arc<RoutesOf<Self>>;
    /// The table the last publication retired.
    fn spare(st: &mut State) -> &mut Option<Spare<Self>>;
    /// The configured routes (the file's, and those of live commands since).
    fn configured(cfg: &mut Config) -> &mut Vec<RouteOf<Self>>;
    /// Makes worker `w` route by `t`.
    fn install(w: &mut Worker, t: &Arc<RoutesOf<Self>>);
    /// The table `cfg` builds (implied routes, then its routes).
    fn built(cfg: &Config) -> Result<RoutesOf<Self>, BuildError>;
}

impl Published for V4 {
    fn live(st: &State) -> &Arc<Routes> {
        &st.routes
    }
    fn set_live(st: &mut State, t: Arc<Routes>) -> Arc<Routes> {
        std::mem::replace(&mut st.routes, t)
    }
    fn spare(st: &mut State) -> &mut Option<Spare<Self>> {
        &mut st.spare
    }
    fn configured(cfg: &mut Config) -> &mut Vec<RouteOf<Self>> {
        &mut cfg.routes
    }
    fn install(w: &mut Worker, t: &Arc<Routes>) {
        w.host.routes = t.clone();
    }
    fn built(cfg: &Config) -> Result<Routes, BuildError> {
        crate::build::route_table(cfg)
    }
}

impl Published for V6 {
    fn live(st: &State) -> &Arc<Routes6> {
        &st.routes6
    }
    fn set_live(st: &mut State, t: Arc<Routes6>) -> Arc<Routes6> {
        std::mem::replace(&mut st.routes6, t)
    }
    fn spare(st: &mut State) -> &mut Option<Spare<Self>> {
        &mut st.spare6
    }
    fn configured(cfg: &mut Config) -> &mut Vec<RouteOf<Self>> {
        &mut cfg.routes6
    }
    fn install(w: &mut Worker, t: &Arc<Routes6>) {
        w.host.routes6 = t.clone();
    }
    fn built(cfg: &Config) -> Result<Routes6, BuildError> {
        crate::build::route_table6(cfg)
    }
}

/// Where each family's neighbours are: the workers' tables and the configured static
/// entries. The neighbour commands are written once over it.
trait Neighbours: Family {
    /// Why `ip` cannot be a neighbour's address, if it cannot.
    fn refused(ip: Self::Addr) -> Option<String>;
    /// Sets a static entry on worker `w` (releasing what waited); `false` if full.
    fn set(w: &mut Worker, iface: u16, ip: Self::Addr, mac: MacAddr) -> bool;
    /// Removes an entry from worker `w` (dropping what waited); whether it had one.
    fn remove(w: &mut Worker, iface: u16, ip: Self::Addr) -> bool;
    /// Whether `cfg` has a static entry for `ip` on `iface`.
    fn configured(cfg: &Config, iface: u16, ip: Self::Addr) -> bool;
    /// Makes `cfg`'s static entry for `ip` on `iface` be `mac`, or none.
    fn configure(cfg: &mut Config, iface: u16, ip: Self::Addr, mac: Option<MacAddr>);
}

impl Neighbours for V4 {
    fn refused(_: Ipv4Addr) -> Option<String> {
        None
    }
    fn set(w: &mut Worker, iface: u16, ip: Ipv4Addr, mac: MacAddr) -> bool {
        w.set_neighbour(iface, ip, mac)
    }
    fn remove(w: &mut Worker, iface: u16, ip: Ipv4Addr) -> bool {
        w.remove_neighbour(iface, ip)
    }
    fn configured(cfg: &Config, iface: u16, ip: Ipv4Addr) -> bool {
        cfg.neighbours
            .iter()
            .any(|n| n.iface == iface && n.ip == ip)
    }
    fn configure(cfg: &mut Config, iface: u16, ip: Ipv4Addr, mac: Option<MacAddr>) {
        cfg.neighbours.retain(|n| !(n.iface == iface && n.ip == ip));
        if let Some(mac) = mac {
            cfg.neighbours.push(StaticNeighbour { iface, ip, mac });
        }
    }
}

impl Neighbours for V6 {
    /// What only a unicast address can be (RFC 4291 2.5.2, 2.5.3, 2.7): a multicast
    /// group's link-layer address is derived (RFC 2464 7), never a neighbour entry's.
    fn refused(ip: Ipv6Addr) -> Option<String> {
        (ip.is_unspecified() || ip.is_loopback() || ip.is_multicast())
            .then(|| format!("{ip} is not a unicast address, so no neighbour has it"))
    }
    fn set(w: &mut Worker, iface: u16, ip: Ipv6Addr, mac: MacAddr) -> bool {
        w.set_neighbour6(iface, ip, mac)
    }
    fn remove(w: &mut Worker, iface: u16, ip: Ipv6Addr) -> bool {
        w.remove_neighbour6(iface, ip)
    }
    fn configured(cfg: &Config, iface: u16, ip: Ipv6Addr) -> bool {
        cfg.neighbours6
            .iter()
            .any(|n| n.iface == iface && n.ip == ip)
    }
    fn configure(cfg: &mut Config, iface: u16, ip: Ipv6Addr, mac: Option<MacAddr>) {
        cfg.neighbours6
            .retain(|n| !(n.iface == iface && n.ip == ip));
        if let Some(mac) = mac {
            cfg.neighbours6.push(StaticNeighbour6 { iface, ip, mac });
        }
    }
}

/// The control plane of one running datapath.
pub struct Control {
    remote: Remote,
    path: PathBuf,
    /// Interface names of the port kinds with a kernel interface (port order).
    kernel_ifaces: Vec<Option<String>>,
    /// Each port's MTU at start: what its interface was checked to carry.
    max_mtu: Vec<u16>,
    state: Mutex<State>,
    trace: Mutex<trace::Collected>,
    /// The kernel-table mirror, once it runs (`[linux]`).
    mirror: Mutex<Option<MirrorHooks>>,
    /// The link watch's document of each port's link, once it runs.
    links: Mutex<Option<LinksHook>>,
}

/// What the control plane reads of the link watch: each port's link as a document.
pub type LinksHook = Arc<dyn Fn() -> Value + Send + Sync>;

/// What the control plane may ask of the kernel-table mirror.
#[derive(Clone)]
pub struct MirrorHooks {
    /// Its counters, as a document.
    pub stats: Arc<dyn Fn() -> Value + Send + Sync>,
    /// A full resync now; what it changed, as a document.
    pub resync: Arc<dyn Fn() -> Result<Value, String> + Send + Sync>,
}

impl core::fmt::Debug for Control {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Control")
            .field("config", &self.path)
            .finish()
    }
}

pub mod trace;

/// The commands, for `help` and for errors.
pub const USAGE: &str = "\
show runtime|errors|ports|routes|neigh|rules|sockets|softnet|counters|linux|links
show routes vrf NAME|table N
show conntrack [proto P] [src A] [dst A] [sport N] [dport N] [state S] [mark V[/M]]
conntrack flush [FILTER...]               (the filters of show conntrack)
clear counters
route add|replace|del ROUTE            (an `ip route` or `ip -6 route` line: PREFIX via GW [dev IF] | PREFIX dev IF | blackhole|unreachable|prohibit PREFIX)
route add|replace|del ROUTE vrf NAME|table N   (in a VRF's or a numbered table)
neigh add|replace ADDRESS lladdr MAC dev IF   (ADDRESS IPv4 or IPv6)
neigh del ADDRESS dev IF
rule add HOOK [index N] KEY VALUE...   (keys of [[filter.HOOK.rule]]: proto src dst sport dport in out mark action)
rule del HOOK N
rule add|del [-6] [pref N] SELECTOR... ACTION  (a policy rule, as ip rule: from to iif fwmark ipproto sport dport tos;
                                       lookup T | goto N | blackhole | unreachable | prohibit | nop; suppress_prefixlength N)
reload                                 (re-read the configuration file)
linux resync                           (dump the mirrored kernel table again, apply the difference)
timing on|off                          (per-stage TSC cycles in show runtime)
trace add --count N [--port P] [--match EXPR]
trace show
trace clear";

impl Control {
    /// The control plane of workers reached through `remote`, started from `cfg` (read
    /// from `path`), whose workers hold `routes` and `routes6`.
    pub fn new(
        remote: Remote,
        cfg: Config,
        path: &Path,
        routes: Arc<Routes>,
        routes6: Arc<Routes6>,
    ) -> Self {
        let kernel_ifaces = cfg
            .ports
            .iter()
            .map(|p| match p.kind {
                // In the control namespace: its name means another interface here.
                crate::config::PortKind::HostTap { .. } => None,
                _ => p.kind.interface().map(str::to_string),
            })
            .collect();
        let max_mtu = cfg.ports.iter().map(|p| p.setup.mtu).collect();
        Self {
            remote,
            path: path.to_path_buf(),
            kernel_ifaces,
            max_mtu,
            state: Mutex::new(State {
                cfg,
                routes,
                routes6,
                spare: None,
                spare6: None,
                baseline: None,
                mirrored_rules: Vec::new(),
                mirrored_rules6: Vec::new(),
            }),
            trace: Mutex::new(trace::Collected::default()),
            mirror: Mutex::new(None),
            links: Mutex::new(None),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it leaves consistent data (changes are applied last).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where `show links`, the counters and `/metrics` read the link watch.
    pub fn set_links(&self, hook: LinksHook) {
        *self
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hook);
    }

    fn links_stats(&self) -> Option<Value> {
        let hook = self
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        hook.map(|h| h())
    }

    /// Where `show linux`, `linux resync`, the counters and `/metrics` reach the mirror.
    pub fn set_mirror(&self, hooks: MirrorHooks) {
        *self
            .mirror
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hooks);
    }

    fn mirror(&self) -> Option<MirrorHooks> {
        self.mirror
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn mirror_stats(&self) -> Option<Value> {
        self.mirror().map(|m| (m.stats)())
    }

    /// `linux resync`: dumps the kernel's table again and applies the difference (none
    /// when netbatch agreed with it). Called without the state lock: the mirror changes
    /// routes through this control plane.
    fn linux_resync(&self) -> Reply {
        let Some(m) = self.mirror() else {
            return Reply::err("linux resync: no kernel table is mirrored (no [linux] section)");
        };
        match (m.resync)() {
            Ok(v) => Reply::ok(
                format!(
                    "resynced: {} route change(s), {} neighbour change(s), {} message(s) dumped",
                    v["route_changes"], v["neighbour_changes"], v["dumped"]
                ),
                v,
            ),
            Err(e) => Reply::err(format!("linux resync: {e}")),
        }
    }

    /// Every worker's counters and their sums (absolute: since the start), with the
    /// kernel-table mirror's (`linux`) when it runs.
    pub fn counters(&self) -> Result<Value, String> {
        let per = self
            .remote
            .on_each(|i, w| {
                let mut v = crate::replay::stats(w);
                // The UDP sockets are shared: their queues count once, with worker 0.
                if i > 0 {
                    v["held_packets"] = serde_json::json!(w.held_own());
                }
                v
            })
            .map_err(|e| e.to_string())?;
        let mut c = crate::run::summed(per);
        if let Some(m) = self.mirror_stats() {
            c["linux"] = m;
        }
        if let Some(l) = self.links_stats() {
            c["links"] = l;
        }
        Ok(c)
    }

    /// How the packet pool and the IPv4 FIB's first level are backed (huge pages or
    /// not) and how much of each the kernel backs with huge pages now (from
    /// `/proc/self/smaps`, read only here: `show runtime` asks, the counters do not).
    fn memory(&self) -> Option<Value> {
        let per = self
            .remote
            .on_each(|i, w| {
                (i == 0).then(|| {
                    let pool = w.pool();
                    let (fib, fib_huge) = w.host.routes.fib_pages();
                    serde_json::json!({
                        "pool": pool.backing().to_string(),
                        "pool_bytes": pool.region().1,
                        "pool_huge_bytes": pool.huge_bytes(),
                        "fib4": fib.to_string(),
                        "fib4_huge_bytes": fib_huge,
                    })
                })
            })
            .ok()?;
        per.into_iter().flatten().next()
    }

    /// Table sizes for `/metrics` that the counters document does not carry: rules and
    /// sockets (routes are in each worker's document).
    pub fn tables(&self) -> Vec<(&'static str, &'static str, u64)> {
        let st = self.state();
        let sockets = self
            .remote
            .on_each(|i, w| {
                if i == 0 {
                    w.host.sockets.iter().len()
                } else {
                    0
                }
            })
            .map(|v| v.into_iter().sum::<usize>())
            .unwrap_or(0);
        // Routes are per worker, in the counters document (the table each worker
        // forwards by); these are the process's own tables.
        vec![
            (
                "rules",
                "Filter rules over every hook",
                st.cfg
                    .graph
                    .chains
                    .iter()
                    .map(|(_, c)| c.rules.len() as u64)
                    .sum(),
            ),
            ("sockets", "Bound UDP sockets", sockets as u64),
        ]
    }

    /// Runs one command (its words, as typed after `netbatch`).
    pub fn handle(&self, argv: &[String]) -> Reply {
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["show", "routes", by @ ("vrf" | "table"), which] => self.show_table(by, which),
            ["show", "conntrack", filters @ ..] => self.conntrack(filters, false),
            ["conntrack", "flush" | "-F", filters @ ..] => self.conntrack(filters, true),
            ["show", what] => self.show(what),
            ["show"] => Reply::err(format!("show what?\n{USAGE}")),
            ["clear", "counters"] => self.clear(),
            [
                "route",
                op @ ("add" | "replace" | "del" | "delete"),
                rest @ ..,
            ] if vrf::names_a_table(rest) => self.route_in_table(op, rest),
            [
                "route",
                op @ ("add" | "replace" | "del" | "delete"),
                rest @ ..,
            ] => self.route(op, &rest.join(" ")),
            [
                "neigh",
                op @ ("add" | "replace"),
                ip,
                "lladdr",
                mac,
                "dev",
                dev,
            ] => self.neigh_set(op, ip, mac, dev),
            ["neigh", "del" | "delete", ip, "dev", dev] => self.neigh_del(ip, dev),
            ["rule", "add", first, ..] if policy::is_policy(first) => {
                self.policy_rule_add(&words[2..])
            }
            ["rule", "del" | "delete", first, ..] if policy::is_policy(first) => {
                self.policy_rule_del(&words[2..])
            }
            ["rule", "add", rest @ ..] => self.rule_add(rest),
            ["rule", "del" | "delete", hook, n] => self.rule_del(hook, n),
            ["reload"] => self.reload(),
            ["linux", "resync"] => self.linux_resync(),
            ["timing", on @ ("on" | "off")] => self.timing(*on == "on"),
            ["trace", rest @ ..] => self.trace_cmd(rest),
            ["help"] => Reply::ok(USAGE, json!({ "usage": USAGE })),
            _ => Reply::err(format!("unknown command '{}'\n{USAGE}", argv.join(" "))),
        }
    }

    /// `show conntrack` (or, with `flush`, `conntrack flush`) over every worker's table.
    fn conntrack(&self, words: &[&str], flush: bool) -> Reply {
        let f = match conntrack::Filter::parse(words) {
            Ok(f) => f,
            Err(e) => return Reply::err(format!("conntrack: {e}")),
        };
        let now = netbatch_engine::time::mono_ns();
        if flush {
            return match self.remote.on_each(move |_, w| {
                w.host
                    .ct
                    .as_deref_mut()
                    .map_or(0, |ct| ct.table.flush(|e| f.matches(e)))
            }) {
                Ok(n) => {
                    let n: usize = n.into_iter().sum();
                    Reply::ok(
                        format!("conntrack: {n} flow entries have been deleted."),
                        json!({ "deleted": n }),
                    )
                }
                Err(e) => Reply::err(e.to_string()),
            };
        }
        match self.remote.on_each(move |i, w| {
            w.host.ct.as_deref().map_or_else(Vec::new, |ct| {
                ct.table
                    .iter(now)
                    .filter(|(_, e)| f.matches(e))
                    .map(|(_, e)| (conntrack::line(e, now, i), conntrack::data(e, now, i)))
                    .collect()
            })
        }) {
            Ok(per) => conntrack::show(per),
            Err(e) => Reply::err(e.to_string()),
        }
    }

    fn show(&self, what: &str) -> Reply {
        let needs_counters = matches!(
            what,
            "runtime"
                | "errors"
                | "ports"
                | "rules"
                | "softnet"
                | "counters"
                | "sockets"
                | "linux"
                | "links"
        );
        let counters = if needs_counters {
            match self.counters() {
                Ok(c) => Some(c),
                Err(e) => return Reply::err(e),
            }
        } else {
            None
        };
        let st = self.state();
        let c = counters.map(|c| match &st.baseline {
            Some(b) => show::since(&c, b),
            None => c,
        });
        let names = st.cfg.iface_names();
        match what {
            "runtime" => {
                let mut r = show::runtime(c.as_ref().unwrap_or(&Value::Null));
                if let Some(m) = self.memory() {
                    show::memory(&mut r, m);
                }
                r
            }
            "errors" => show::errors(c.as_ref().unwrap_or(&Value::Null)),
            "softnet" => show::softnet(c.as_ref().unwrap_or(&Value::Null)),
            "counters" => {
                let c = c.unwrap_or(Value::Null);
                Reply::ok(crate::run::summary(&c), c)
            }
            "ports" => {
                let links: Vec<Value> = self
                    .kernel_ifaces
                    .iter()
                    .map(|i| i.as_deref().map_or(Value::Null, |i| json!(link_state(i))))
                    .collect();
                let kinds: Vec<String> = st
                    .cfg
                    .ports
                    .iter()
                    .map(|p| format!("{}, mtu {}", p.kind, p.setup.mtu))
                    .collect();
                show::ports(c.as_ref().unwrap_or(&Value::Null), &kinds, &links)
            }
            "routes" => show::routes(&st.routes, &st.routes6, &names),
            "links" => match c.as_ref().and_then(|c| c.get("links")) {
                Some(l) => show::links(l),
                None => Reply::err("show links: no link is followed (no af_packet or af_xdp port)"),
            },
            "linux" => match c.as_ref().and_then(|c| c.get("linux")) {
                Some(l) => show::linux(l),
                None => Reply::err("show linux: no kernel table is mirrored (no [linux] section)"),
            },
            "rules" => {
                let mut r = show::rules(
                    &st.cfg.graph.chains,
                    c.as_ref().unwrap_or(&Value::Null),
                    &names,
                );
                drop(st);
                let (text, data) = self.policy_rules(&names);
                r.text += &text;
                r.data["policy"] = data;
                r
            }
            "neigh" => {
                drop(st);
                match self
                    .remote
                    .on_each(|_, w| (w.host.neigh.entries(), w.host.neigh6.entries()))
                {
                    Ok(per) => {
                        let (v4, v6): (Vec<_>, Vec<_>) = per.into_iter().unzip();
                        show::neigh(&v4, &v6, &names)
                    }
                    Err(e) => Reply::err(e.to_string()),
                }
            }
            "sockets" => {
                drop(st);
                match self.remote.on_each(|i, w| {
                    if i > 0 {
                        return Vec::new();
                    }
                    w.host
                        .sockets
                        .iter()
                        .into_iter()
                        .map(|(_, s)| {
                            let t = s.stats();
                            json!({
                                "local": format!("{}:{}", s.addr, s.port),
                                "queued": s.queued_wire(),
                                "capacity": s.capacity(),
                                "enqueued": t.queued,
                                "queue_full": t.queue_full,
                                "read": t.read,
                                "sent": t.sent,
                            })
                        })
                        .collect::<Vec<Value>>()
                }) {
                    Ok(per) => show::sockets(&per.into_iter().flatten().collect::<Vec<_>>()),
                    Err(e) => Reply::err(e.to_string()),
                }
            }
            other => Reply::err(format!(
                "show: unknown table '{other}' (runtime, errors, ports, routes, neigh, rules, sockets, softnet, counters, linux)"
            )),
        }
    }

    fn clear(&self) -> Reply {
        match self.counters() {
            Ok(c) => {
                self.state().baseline = Some(c);
                Reply::ok("counters cleared", json!({ "cleared": true }))
            }
            Err(e) => Reply::err(e),
        }
    }

    fn timing(&self, on: bool) -> Reply {
        match self.remote.on_each(move |_, w| w.graph.set_timing(on)) {
            Ok(_) => Reply::ok(
                format!("per-stage timing {}", if on { "on" } else { "off" }),
                json!({ "timing": on }),
            ),
            Err(e) => Reply::err(e.to_string()),
        }
    }

    /// Applies `changes` in order to a copy of the table and publishes it once: every
    /// worker switches to the result between two lists, never seeing part of the batch
    /// (what a routing daemon's mirror calls). Returns (routes replaced or added,
    /// routes deleted); nothing changes if a route is refused.
    pub fn apply_routes(&self, changes: &[RouteChange]) -> Result<(usize, usize), String> {
        self.apply::<V4>(changes)
    }

    /// [`Self::apply_routes`] for the IPv6 table.
    pub fn apply_routes6(&self, changes: &[RouteChange6]) -> Result<(usize, usize), String> {
        self.apply::<V6>(changes)
    }

    fn apply<F: Published>(&self, changes: &[RouteChangeOf<F>]) -> Result<(usize, usize), String> {
        if changes.is_empty() {
            return Ok((0, 0));
        }
        let mut st = self.state();
        let mut next = Self::draft::<F>(&mut st);
        let done = applied(changes, |c| match c {
            RouteChangeOf::Replace(r) => next.insert(r.clone()).map(|()| true),
            RouteChangeOf::Delete(p) => Ok(next.remove(*p).is_some()),
        })?;
        self.publish_routes::<F>(&mut st, next)?;
        Ok(done)
    }

    /// The route table the workers hold now.
    pub fn routes(&self) -> Arc<Routes> {
        self.state().routes.clone()
    }

    /// The IPv6 route table the workers hold now.
    pub fn routes6(&self) -> Arc<Routes6> {
        self.state().routes6.clone()
    }

    /// Sets a static neighbour on every worker (packets waiting for it leave).
    pub fn set_neighbour(&self, iface: u16, ip: Ipv4Addr, mac: MacAddr) -> Result<(), String> {
        self.set_neighbour_of::<V4>(iface, ip, mac)
    }

    /// Sets a static IPv6 neighbour on every worker (packets waiting for it leave).
    pub fn set_neighbour6(&self, iface: u16, ip: Ipv6Addr, mac: MacAddr) -> Result<(), String> {
        self.set_neighbour_of::<V6>(iface, ip, mac)
    }

    fn set_neighbour_of<F: Neighbours>(
        &self,
        iface: u16,
        ip: F::Addr,
        mac: MacAddr,
    ) -> Result<(), String> {
        match self.remote.on_each(move |_, w| F::set(w, iface, ip, mac)) {
            Ok(v) if v.iter().all(|&ok| ok) => Ok(()),
            Ok(_) => Err("the neighbour table is full".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Removes a neighbour from every worker; whether any had it.
    pub fn delete_neighbour(&self, iface: u16, ip: Ipv4Addr) -> Result<bool, String> {
        self.delete_neighbour_of::<V4>(iface, ip)
    }

    /// Removes an IPv6 neighbour from every worker; whether any had it.
    pub fn delete_neighbour6(&self, iface: u16, ip: Ipv6Addr) -> Result<bool, String> {
        self.delete_neighbour_of::<V6>(iface, ip)
    }

    fn delete_neighbour_of<F: Neighbours>(&self, iface: u16, ip: F::Addr) -> Result<bool, String> {
        self.remote
            .on_each(move |_, w| F::remove(w, iface, ip))
            .map(|v| v.iter().any(|&f| f))
            .map_err(|e| e.to_string())
    }

    /// The interface index of `name` (routes and neighbours number interfaces so).
    pub fn iface_index(&self, name: &str) -> Option<u16> {
        self.state().cfg.iface_index(name)
    }

    /// The wire ports paired with a tap (`[linux] pairs`), each with its untagged
    /// interface's addresses, IPv4 and IPv6: what the taps carry in the control
    /// namespace.
    pub fn host_pairs(
        &self,
    ) -> Vec<(
        String,
        Vec<netbatch_stack::prefix::IfAddr>,
        Vec<netbatch_stack::prefix::If6Addr>,
    )> {
        self.state()
            .cfg
            .ports
            .iter()
            .filter(|p| matches!(p.setup.pair, netbatch_stack::iface::Pair::Punt(_)))
            .map(|p| {
                (
                    p.setup.name.clone(),
                    p.setup.addrs.clone().unwrap_or_default(),
                    p.setup.addrs6.clone(),
                )
            })
            .collect()
    }

    /// Makes interface `i` have addresses `addrs` and IPv6 addresses `addrs6` (the
    /// first the primary; those it has already keep their order) and, when given, its
    /// port the MTU `mtu`, as the kernel interface of its pair has them: the
    /// interface's local, connected and broadcast routes (IPv4), and local and on-link
    /// routes (IPv6), follow in one table publication per family that changed, with the
    /// addresses, on every worker. Returns whether anything changed. Refused, with
    /// nothing changed: an address another interface has. An MTU below 68 (RFC 791) or
    /// above the one the port started with (what its interface was checked to carry)
    /// is refused alone: the addresses still follow, and the error says whether they
    /// changed.
    pub fn set_iface(
        &self,
        i: u16,
        addrs: &[netbatch_stack::prefix::IfAddr],
        addrs6: &[netbatch_stack::prefix::If6Addr],
        mtu: Option<u16>,
    ) -> Result<bool, (bool, String)> {
        use crate::setup::{local_routes, local_routes6, subnet_routes, subnet_routes6};
        let mut st = self.state();
        let names = st.cfg.iface_names();
        let name = names
            .get(usize::from(i))
            .cloned()
            .ok_or_else(|| (false, format!("no interface {i}")))?;
        for (j, other) in names.iter().enumerate() {
            if j == usize::from(i) {
                continue;
            }
            if let Some((_, _, theirs)) = st.cfg.iface_addrs_mut(j as u16)
                && let Some(a) = addrs
                    .iter()
                    .find(|a| theirs.iter().any(|t| t.addr == a.addr))
            {
                return Err((false, format!("{name}: {} is {other}'s address", a.addr)));
            }
            if let Some(theirs) = st.cfg.iface_addrs6_mut(j as u16)
                && let Some(a) = addrs6
                    .iter()
                    .find(|a| theirs.iter().any(|t| t.addr == a.addr))
            {
                return Err((false, format!("{name}: {} is {other}'s address", a.addr)));
            }
        }
        let (port, native, cur) = st
            .cfg
            .iface_addrs_mut(i)
            .ok_or_else(|| (false, format!("no interface {i}")))?;
        let old = cur.clone();
        let old6 = st.cfg.iface_addrs6_mut(i).cloned().unwrap_or_default();
        let new = merged(&old, addrs);
        let new6 = merged(&old6, addrs6);
        let old_mtu = st.cfg.ports[port].setup.mtu;
        // A VLAN's MTU is its port's: only the untagged interface's is followed.
        let mtu = mtu.filter(|&m| native && m != old_mtu);
        if let Some(m) = mtu {
            let max = self.max_mtu.get(port).copied().unwrap_or(old_mtu);
            if !(68..=max).contains(&m) {
                let why = format!(
                    "{name}: MTU {m} refused: port {} started with MTU {max} and takes 68 to {max} (restart with a larger mtu to go above)",
                    st.cfg.ports[port].setup.name
                );
                // The addresses still follow.
                drop(st);
                let changed = self.set_iface(i, addrs, addrs6, None)?;
                return Err((changed, why));
            }
        }
        if new == old && new6 == old6 && mtu.is_none() {
            return Ok(false);
        }
        let routes_of = |a: &[netbatch_stack::prefix::IfAddr]| -> Vec<RouteOf<V4>> {
            subnet_routes(i, a).chain(local_routes(i, a)).collect()
        };
        let routes6_of = |a: &[netbatch_stack::prefix::If6Addr]| -> Vec<RouteOf<V6>> {
            subnet_routes6(i, a).chain(local_routes6(i, a)).collect()
        };
        let err = |e: netbatch_stack::route::RouteError, p: &dyn core::fmt::Display| {
            (false, format!("{name}: route {p}: {e}"))
        };
        // A VRF's interface's routes are in the VRF's table, changed in its slot of the
        // policy (the routes mirrored into it stay); `main`'s in `main`.
        let vrf = st
            .cfg
            .iface_tables()
            .get(usize::from(i))
            .copied()
            .filter(|&t| t != netbatch_stack::route::rule::TABLE_MAIN);
        let table = (new != old)
            .then(|| {
                follow(
                    match vrf {
                        Some(t) => self.table_draft::<V4>(t),
                        None => Self::draft::<V4>(&mut st),
                    },
                    &routes_of(&old),
                    &routes_of(&new),
                )
            })
            .transpose()
            .map_err(|(e, p)| err(e, &p))?
            .map(|d| (d.table, d.log));
        let table6 = (new6 != old6)
            .then(|| {
                follow(
                    match vrf {
                        Some(t) => self.table_draft::<V6>(t),
                        None => Self::draft::<V6>(&mut st),
                    },
                    &routes6_of(&old6),
                    &routes6_of(&new6),
                )
            })
            .transpose()
            .map_err(|(e, p)| err(e, &p))?
            .map(|d| (d.table, d.log));
        let shared = table
            .as_ref()
            .map(|(t, _)| t.clone())
            .filter(|_| vrf.is_none());
        let shared6 = table6
            .as_ref()
            .map(|(t, _)| t.clone())
            .filter(|_| vrf.is_none());
        let (set, set6) = (new.clone(), new6.clone());
        let wire = st.cfg.ports[port].setup.pair;
        self.remote
            .on_each(move |_, w| {
                if let Some(t) = &shared {
                    w.host.routes = t.clone();
                }
                if let Some(t) = &shared6 {
                    w.host.routes6 = t.clone();
                }
                if let Some(f) = w.host.ifaces.get_mut(usize::from(i)) {
                    f.addrs = set.clone();
                    f.addrs6 = set6.clone();
                }
                if let Some(m) = mtu {
                    w.host.set_port_mtu(port as u16, m);
                    if let netbatch_stack::iface::Pair::Punt(t) = wire {
                        w.host.set_port_mtu(t, m);
                    }
                }
            })
            .map_err(|e| (false, e.to_string()))?;
        match vrf {
            Some(id) => {
                if let Some((t, _)) = table {
                    self.change_policy::<V4>(|p| p.with_table(id, t).map_err(|e| e.to_string()))
                        .map_err(|e| (true, format!("{name}: vrf table {id}: {e}")))?;
                }
                if let Some((t, _)) = table6 {
                    self.change_policy::<V6>(|p| p.with_table(id, t).map_err(|e| e.to_string()))
                        .map_err(|e| (true, format!("{name}: vrf table {id}: {e}")))?;
                }
            }
            None => {
                if let Some((t, log)) = table {
                    Self::retire::<V4>(&mut st, t, log);
                }
                if let Some((t, log)) = table6 {
                    Self::retire::<V6>(&mut st, t, log);
                }
            }
        }
        if let Some((_, _, cur)) = st.cfg.iface_addrs_mut(i) {
            *cur = new;
        }
        if let Some(cur) = st.cfg.iface_addrs6_mut(i) {
            *cur = new6;
        }
        if let Some(m) = mtu {
            st.cfg.ports[port].setup.mtu = m;
            if let netbatch_stack::iface::Pair::Punt(t) = wire
                && let Some(p) = st.cfg.ports.get_mut(usize::from(t))
            {
                p.setup.mtu = m;
            }
        }
        Ok(true)
    }

    /// Hands `new` to every worker (each switches between two of its lists); the table
    /// it replaces becomes the spare.
    fn publish_routes<F: Published>(&self, st: &mut State, new: Draft<F>) -> Result<(), String> {
        if new.refused {
            return Err("a route of the change was refused".into());
        }
        let Draft { table, log, .. } = new;
        let shared = table.clone();
        self.remote
            .on_each(move |_, w| F::install(w, &shared))
            .map_err(|e| e.to_string())?;
        Self::retire::<F>(st, table, log);
        Ok(())
    }

    /// Records `new`, which every worker now holds, as the live table, made by `log`
    /// from the one it replaces, which becomes the spare.
    fn retire<F: Published>(st: &mut State, new: Arc<RoutesOf<F>>, log: Vec<RouteChangeOf<F>>) {
        let old = F::set_live(st, new);
        *F::spare(st) = Some(Spare {
            table: old,
            behind: log,
        });
    }

    /// A table to change for the next publication, equal to the live one: the spare,
    /// once nobody holds it, brought up to date by replaying what it lacks; or else (no
    /// spare yet, still held, or a replay refused) a copy of the live table.
    fn draft<F: Published>(st: &mut State) -> Draft<F> {
        if let Some(Spare {
            table: mut shared,
            mut behind,
        }) = F::spare(st).take()
            && let Some(t) = Arc::get_mut(&mut shared)
        {
            let mut replayed = true;
            for c in &behind {
                match c {
                    RouteChangeOf::Replace(r) => {
                        if t.insert(r.clone()).is_err() {
                            replayed = false;
                            break;
                        }
                    }
                    RouteChangeOf::Delete(p) => {
                        t.remove(*p);
                    }
                }
            }
            if replayed {
                behind.clear();
                return Draft {
                    table: shared,
                    log: behind,
                    refused: false,
                };
            }
        }
        Draft {
            table: Arc::new((**F::live(st)).clone()),
            log: Vec::new(),
            refused: false,
        }
    }

    /// A draft of numbered table `id` of family `F` (a VRF's) as the workers route by it:
    /// a copy, published by replacing the table in its slot of the policy.
    fn table_draft<F: Published + vrf::Tabled>(&self, id: u32) -> Draft<F> {
        Draft {
            table: Arc::new((*self.live_table::<F>(id)).clone()),
            log: Vec::new(),
            refused: false,
        }
    }

    /// Keeps `d`, not published, as the spare if it is still equal to the live table.
    fn give_back<F: Published>(st: &mut State, d: Draft<F>) {
        if d.log.is_empty() && !d.refused {
            *F::spare(st) = Some(Spare {
                table: d.table,
                behind: d.log,
            });
        }
    }

    fn route(&self, op: &str, line: &str) -> Reply {
        let mut st = self.state();
        // `route del PREFIX` names the route by its prefix alone (parsed as a route
        // without a target, whose kind `same_target` then ignores).
        let alone = matches!(op, "del" | "delete") && line.split_ascii_whitespace().count() == 1;
        let parsed = if alone {
            st.cfg.parse_route(&format!("blackhole {line}"))
        } else {
            st.cfg.parse_route(line)
        };
        match parsed {
            Ok(AnyRoute::V4(r)) => self.route_of::<V4>(&mut st, op, line, r),
            Ok(AnyRoute::V6(r)) => self.route_of::<V6>(&mut st, op, line, r),
            Err(e) => Reply::err(format!("route {op} {line}: {e}")),
        }
    }

    /// `route add|replace|del` of `r` (parsed from `line`) in its family's table.
    fn route_of<F: Published>(&self, st: &mut State, op: &str, line: &str, r: RouteOf<F>) -> Reply {
        let exists = F::live(st).get(&r.prefix).cloned();
        let what = match (op, exists.clone()) {
            ("add", Some(_)) => {
                return Reply::err(format!(
                    "route add {line}: a route for {} exists (use route replace)",
                    r.prefix
                ));
            }
            ("del" | "delete", None) => {
                return Reply::err(format!("route del {line}: no route for {}", r.prefix));
            }
            ("del" | "delete", Some(old)) => {
                if !same_target(&old, &r, line) {
                    return Reply::err(format!(
                        "route del {line}: the route for {} is '{}'",
                        r.prefix,
                        show::route_line(&old, &st.cfg.iface_names())
                    ));
                }
                "deleted"
            }
            _ if exists.is_some() => "replaced",
            _ => "added",
        };
        let mut next = Self::draft::<F>(st);
        if what == "deleted" {
            next.remove(r.prefix);
        } else if let Err(e) = next.insert(r.clone()) {
            return Reply::err(format!("route {op} {line}: {e}"));
        }
        if let Err(e) = self.publish_routes::<F>(st, next) {
            return Reply::err(e);
        }
        // The live configuration follows, so that a reload compares with what runs.
        // A deleted route is shown as it was (`route del PREFIX` names no target).
        let shown = exists.as_ref().filter(|_| what == "deleted").unwrap_or(&r);
        let text = format!("{what}: {}", show::route_line(shown, &st.cfg.iface_names()));
        let configured = F::configured(&mut st.cfg);
        configured.retain(|x| x.prefix != r.prefix);
        if what != "deleted" {
            configured.push(r.clone());
        }
        tracing::info!(target: "netbatch::control", "route {text}");
        Reply::ok(
            text,
            json!({ "route": what, "family": F::NAME, "prefix": r.prefix.to_string() }),
        )
    }

    fn neigh_set(&self, op: &str, ip: &str, mac: &str, dev: &str) -> Reply {
        let mut st = self.state();
        let Ok(ip) = ip.parse::<IpAddr>() else {
            return Reply::err(format!("neigh {op}: '{ip}' is not an IPv4 or IPv6 address"));
        };
        let Ok(mac) = mac.parse::<MacAddr>() else {
            return Reply::err(format!("neigh {op}: '{mac}' is not a MAC address"));
        };
        let Some(iface) = st.cfg.iface_index(dev) else {
            return Reply::err(format!("neigh {op}: no interface named '{dev}'"));
        };
        match ip {
            IpAddr::V4(ip) => self.neigh_set_of::<V4>(&mut st, op, (ip, mac), (iface, dev)),
            IpAddr::V6(ip) => self.neigh_set_of::<V6>(&mut st, op, (ip, mac), (iface, dev)),
        }
    }

    fn neigh_set_of<F: Neighbours>(
        &self,
        st: &mut State,
        op: &str,
        (ip, mac): (F::Addr, MacAddr),
        (iface, dev): (u16, &str),
    ) -> Reply {
        if let Some(why) = F::refused(ip) {
            return Reply::err(format!("neigh {op}: {why}"));
        }
        if op == "add" && F::configured(&st.cfg, iface, ip) {
            return Reply::err(format!(
                "neigh add: {ip} dev {dev} is a static neighbour already (use neigh replace)"
            ));
        }
        if let Err(e) = self.set_neighbour_of::<F>(iface, ip, mac) {
            return Reply::err(format!("neigh {op}: {e}"));
        }
        F::configure(&mut st.cfg, iface, ip, Some(mac));
        tracing::info!(target: "netbatch::control", "neigh {op} {ip} lladdr {mac} dev {dev}");
        Reply::ok(
            format!("{ip} dev {dev} lladdr {mac} PERMANENT"),
            json!({ "neigh": op, "family": F::NAME, "address": ip.to_string(), "lladdr": mac.to_string(), "dev": dev }),
        )
    }

    fn neigh_del(&self, ip: &str, dev: &str) -> Reply {
        let mut st = self.state();
        let Ok(ip) = ip.parse::<IpAddr>() else {
            return Reply::err(format!("neigh del: '{ip}' is not an IPv4 or IPv6 address"));
        };
        let Some(iface) = st.cfg.iface_index(dev) else {
            return Reply::err(format!("neigh del: no interface named '{dev}'"));
        };
        match ip {
            IpAddr::V4(ip) => self.neigh_del_of::<V4>(&mut st, ip, (iface, dev)),
            IpAddr::V6(ip) => self.neigh_del_of::<V6>(&mut st, ip, (iface, dev)),
        }
    }

    fn neigh_del_of<F: Neighbours>(
        &self,
        st: &mut State,
        ip: F::Addr,
        (iface, dev): (u16, &str),
    ) -> Reply {
        match self.delete_neighbour_of::<F>(iface, ip) {
            Ok(true) => {}
            Ok(false) => return Reply::err(format!("neigh del: no entry for {ip} dev {dev}")),
            Err(e) => return Reply::err(e),
        }
        F::configure(&mut st.cfg, iface, ip, None);
        tracing::info!(target: "netbatch::control", "neigh del {ip} dev {dev}");
        Reply::ok(
            format!("deleted {ip} dev {dev}"),
            json!({ "neigh": "del", "family": F::NAME, "address": ip.to_string(), "dev": dev }),
        )
    }

    fn rule_add(&self, words: &[&str]) -> Reply {
        let mut st = self.state();
        let mut w: Vec<String> = words.iter().map(|s| (*s).to_string()).collect();
        // `rule add HOOK index N ...` inserts before rule N; otherwise the rule goes last.
        let mut index = None;
        if w.len() >= 3 && w[1] == "index" {
            match w[2].parse::<usize>() {
                Ok(n) => index = Some(n),
                Err(_) => return Reply::err(format!("rule add: index '{}' is not a number", w[2])),
            }
            w.drain(1..3);
        }
        let (hook, rule) = match st.cfg.parse_rule(&w) {
            Ok(x) => x,
            Err(e) => return Reply::err(format!("rule add: {e}")),
        };
        let mut cfg = st.cfg.clone();
        let chain = chain_mut(&mut cfg.graph.chains, hook);
        let at = index.unwrap_or(chain.rules.len());
        if at > chain.rules.len() {
            return Reply::err(format!(
                "rule add: index {at} is past the end of {} ({} rules)",
                hook.name(),
                chain.rules.len()
            ));
        }
        let text = format!(
            "{} rule {at}: {}",
            hook.name(),
            show::rule_text(&rule, &st.cfg.iface_names())
        );
        chain.rules.insert(at, rule);
        if let Err(e) = self.swap_graphs(&mut st, cfg) {
            return Reply::err(e);
        }
        tracing::info!(target: "netbatch::control", "rule added: {text}");
        Reply::ok(
            text,
            json!({ "rule": "added", "hook": hook.name(), "index": at }),
        )
    }

    fn rule_del(&self, hook: &str, n: &str) -> Reply {
        let mut st = self.state();
        let Some(h) = HookPoint::ALL.into_iter().find(|h| h.name() == hook) else {
            return Reply::err(format!(
                "rule del: '{hook}' is not a hook (prerouting, input, forward, output, postrouting)"
            ));
        };
        let Ok(n) = n.parse::<usize>() else {
            return Reply::err(format!("rule del: '{n}' is not a rule number"));
        };
        let mut cfg = st.cfg.clone();
        let chain = chain_mut(&mut cfg.graph.chains, h);
        if n >= chain.rules.len() {
            return Reply::err(format!(
                "rule del: {hook} has no rule {n} ({} rules)",
                chain.rules.len()
            ));
        }
        chain.rules.remove(n);
        if let Err(e) = self.swap_graphs(&mut st, cfg) {
            return Reply::err(e);
        }
        tracing::info!(target: "netbatch::control", "rule deleted: {hook} {n}");
        Reply::ok(
            format!("deleted {hook} rule {n}"),
            json!({ "rule": "deleted", "hook": hook, "index": n }),
        )
    }

    /// Builds a graph of `cfg` for every worker (here, not on the workers' threads) and
    /// hands each its own to swap in between two rounds.
    fn swap_graphs(&self, st: &mut State, cfg: Config) -> Result<(), String> {
        let mut graphs = Vec::with_capacity(self.remote.workers());
        for _ in 0..self.remote.workers() {
            graphs.push(Some(Builder::new(&cfg).graph().map_err(|e| e.to_string())?));
        }
        let graphs = Mutex::new(graphs);
        let results = self
            .remote
            .on_each(move |i, w| {
                let g = graphs
                    .lock()
                    .ok()
                    .and_then(|mut g| g.get_mut(i).and_then(Option::take))
                    .ok_or_else(|| format!("worker {i}: no graph was built for it"))?;
                w.replace_graph(g).map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?;
        results.into_iter().collect::<Result<Vec<()>, String>>()?;
        st.cfg.graph = cfg.graph;
        Ok(())
    }

    /// Re-reads the configuration file and applies what can change live, or refuses
    /// the whole reload (with the keys and reasons) and changes nothing.
    ///
    /// Everything that can fail is tried before anything is applied: the file and the
    /// machine, what needs a restart, both route tables, the new graph, the new
    /// applications (bound on a scratch socket table: every old socket is closed before
    /// the new ones are bound, so that is an exact model). Then routes, neighbours, ICMP
    /// settings, graph and applications are applied in turn, each recorded in the live
    /// configuration as it lands (a worker that stops answering midway leaves the live
    /// configuration saying what was applied).
    pub fn reload(&self) -> Reply {
        // systemd (a unit of Type=notify) hears of the reload and of its end: the
        // datapath serves either way, with the new configuration or the old one.
        crate::notify::notify(&format!(
            "RELOADING=1\nSTATUS=reloading {}",
            self.path.display()
        ));
        let r = self.reload_now();
        crate::notify::notify(if r.ok {
            "READY=1\nSTATUS=serving (reloaded)"
        } else {
            "READY=1\nSTATUS=serving (reload refused: the configuration in use is unchanged)"
        });
        r
    }

    fn reload_now(&self) -> Reply {
        let refuse = |text: String| {
            tracing::warn!(target: "netbatch::control", "{}", text.trim_end());
            Reply::err(text)
        };
        // The file first, then what needs a restart, then the machine: a change that
        // needs a restart (more workers) is refused as that, not for what the machine
        // would lack if it were applied (the queues more workers would need).
        let mut new = match Config::load(&self.path) {
            Ok(c) => c,
            Err(e) => return refuse(format!("reload refused, nothing changed: {e}")),
        };
        let mut st = self.state();
        let refused = needs_restart(&st.cfg, &new);
        if !refused.is_empty() {
            let mut text = format!(
                "reload refused, nothing changed: {}: {} setting(s) need a restart\n",
                self.path.display(),
                refused.len()
            );
            for (k, why) in &refused {
                text += &format!("  {k}: {why}\n");
            }
            let mut r = refuse(text);
            r.data = json!({ "error": "reload refused", "restart_needed": refused.iter().map(|(k, w)| json!({"key": k, "reason": w})).collect::<Vec<_>>() });
            return r;
        }
        let lacking = new.check_machine();
        if !lacking.is_empty() {
            let e = crate::config::ConfigErrors {
                file: self.path.display().to_string(),
                errors: lacking,
            };
            return refuse(format!("reload refused, nothing changed: {e}"));
        }
        // With `[linux] vrfs`, the VRFs are the kernel's (the file has none): they stay.
        if new.linux.as_ref().is_some_and(|l| l.vrfs) {
            new.vrfs.clone_from(&st.cfg.vrfs);
            new.iface_vrfs.clone_from(&st.cfg.iface_vrfs);
        }
        let graph_changed = new.graph.chains != st.cfg.graph.chains
            || new.graph.classifier.as_ref().map(|c| c.filters())
                != st.cfg.graph.classifier.as_ref().map(|c| c.filters())
            || new.graph.tcp_to != st.cfg.graph.tcp_to;
        if graph_changed && let Err(e) = Builder::new(&new).graph() {
            return refuse(format!("reload refused, nothing changed: {e}"));
        }
        let apps_changed = new.apps != st.cfg.apps;
        if apps_changed {
            let scratch = netbatch_stack::udp::socket::Sockets::new();
            let fabric = self.remote.fabric().clone();
            for i in 0..self.remote.workers() {
                if let Err(e) = crate::build::apps_for(&new, &scratch, i, Some(&fabric)) {
                    return refuse(format!("reload refused, nothing changed: app: {e}"));
                }
            }
        }
        // Routes, rules, numbered tables and VRFs, planned last of the checks (a plan
        // holds drafts of the tables).
        let tables = match self.plan_tables(&mut st, &mut new) {
            Ok(t) => t,
            Err(e) => return refuse(format!("reload refused, nothing changed: {e}")),
        };
        // Apply.
        let mut done = Vec::new();
        let failed = |done: &[String], e: String| {
            let text = if done.is_empty() {
                format!("reload stopped, nothing changed: {e}")
            } else {
                format!("reload stopped after {}: {e}", done.join(", "))
            };
            tracing::warn!(target: "netbatch::control", "{text}");
            Reply::err(text)
        };
        if let Err(e) = self.apply_tables(&mut st, tables, &new, &mut done) {
            return failed(&done, e);
        }
        let (gone, set) = neigh_diff(&st.cfg.neighbours, &new.neighbours, |n| (n.iface, n.ip));
        let (gone6, set6) = neigh_diff(&st.cfg.neighbours6, &new.neighbours6, |n| (n.iface, n.ip));
        let changes = gone.len() + set.len() + gone6.len() + set6.len();
        if changes > 0 {
            let (g, s, g6, s6) = (gone.clone(), set.clone(), gone6.clone(), set6.clone());
            if let Err(e) = self.remote.on_each(move |_, w| {
                for n in &g {
                    w.remove_neighbour(n.iface, n.ip);
                }
                for n in &s {
                    w.set_neighbour(n.iface, n.ip, n.mac);
                }
                for n in &g6 {
                    w.remove_neighbour6(n.iface, n.ip);
                }
                for n in &s6 {
                    w.set_neighbour6(n.iface, n.ip, n.mac);
                }
            }) {
                return failed(&done, e.to_string());
            }
            done.push(format!(
                "{} neighbour(s) removed, {} set",
                gone.len() + gone6.len(),
                set.len() + set6.len()
            ));
            st.cfg.neighbours = new.neighbours.clone();
            st.cfg.neighbours6 = new.neighbours6.clone();
        }
        if new.host != st.cfg.host {
            let p = new.host;
            if let Err(e) = self.remote.on_each(move |_, w| {
                w.host.params = p;
                use netbatch_stack::ratelimit::TokenBucket;
                w.host.icmp_limit = TokenBucket::new(p.icmp_rate, p.icmp_burst);
                w.host.icmp6_limit = TokenBucket::new(p.icmp_rate, p.icmp_burst);
                w.host.redirect_limit = TokenBucket::new(p.redirect_rate, p.redirect_burst);
                w.host.redirect6_limit = TokenBucket::new(p.redirect_rate, p.redirect_burst);
            }) {
                return failed(&done, e.to_string());
            }
            done.push("ICMP and forwarding settings".into());
            st.cfg.host = new.host;
        }
        if graph_changed {
            if let Err(e) = self.swap_graphs(&mut st, new.clone()) {
                return failed(&done, e);
            }
            done.push("filter rules and classifier".into());
        }
        if apps_changed {
            if let Err(e) = self.replace_apps(&new) {
                return failed(&done, format!("applications: {e}"));
            }
            done.push(format!("{} application(s) restarted", new.apps.len()));
        }
        st.cfg = new;
        let text = if done.is_empty() {
            "reloaded: nothing changed".to_string()
        } else {
            format!("reloaded: {}", done.join(", "))
        };
        tracing::info!(target: "netbatch::control", "{text}");
        Reply::ok(text, json!({ "reloaded": done }))
    }
}

/// What a change of the configuration's routes, rules, numbered tables and VRFs does to
/// the workers' tables, planned and checked whole before anything is applied
/// ([`Control::plan_tables`]); [`Control::apply_tables`] applies it.
struct TablesChange {
    /// `main` (IPv4) with the change, and how many routes changed.
    next: Draft<V4>,
    route_changes: usize,
    next6: Draft<V6>,
    route6_changes: usize,
    /// Each family's next policy, when its rules, numbered tables or VRFs change.
    policy: Option<PolicyOf<V4>>,
    policy6: Option<PolicyOf<V6>>,
    /// The VRFs or the interfaces' VRFs change.
    vrfs: bool,
}

impl Control {
    /// Plans the change from the live configuration's routes, policy rules, numbered
    /// tables and VRFs to `new`'s: the one way VRFs change, whether a reload reads them
    /// from the file or the Linux mirror from the kernel's VRF devices
    /// ([`Control::set_kernel_vrfs`]). Routes: what the file (and live commands since)
    /// gave is compared with what `new` gives, and only the difference changes `main`
    /// (an interface moved into or out of a VRF takes its connected and local routes
    /// with it); routes from elsewhere (a routing daemon's, mirrored) are left alone.
    /// The policy: each numbered table whose routes changed, and every VRF's table old
    /// and new when the VRFs change, built again in its slot, the interfaces' map of
    /// VRFs replaced. Nothing is applied: a refusal changes nothing.
    fn plan_tables(&self, st: &mut State, new: &mut Config) -> Result<TablesChange, String> {
        let (next, route_changes) = route_diff::<V4>(st, new)?;
        let (next6, route6_changes) = match route_diff::<V6>(st, new) {
            Ok(d) => d,
            Err(e) => {
                Self::give_back::<V4>(st, next);
                return Err(e);
            }
        };
        let policy = self.reload_policy::<V4>(st, new);
        let policy6 = self.reload_policy::<V6>(st, new);
        match (policy, policy6) {
            (Ok(policy), Ok(policy6)) => Ok(TablesChange {
                next,
                route_changes,
                next6,
                route6_changes,
                policy,
                policy6,
                vrfs: new.vrfs != st.cfg.vrfs || new.iface_vrfs != st.cfg.iface_vrfs,
            }),
            (Err(e), _) | (_, Err(e)) => {
                Self::give_back::<V4>(st, next);
                Self::give_back::<V6>(st, next6);
                Err(e)
            }
        }
    }

    /// Applies a [`Control::plan_tables`] plan to `new`: `main`'s routes of each family,
    /// then the policies; what was done is added to `done` as it lands, and the live
    /// configuration's routes, rules, tables and VRFs become `new`'s.
    fn apply_tables(
        &self,
        st: &mut State,
        t: TablesChange,
        new: &Config,
        done: &mut Vec<String>,
    ) -> Result<(), String> {
        if t.route_changes > 0 {
            self.publish_routes::<V4>(st, t.next)?;
            done.push(format!("{} route change(s)", t.route_changes));
        } else {
            Self::give_back::<V4>(st, t.next);
        }
        st.cfg.routes.clone_from(&new.routes);
        if t.route6_changes > 0 {
            self.publish_routes::<V6>(st, t.next6)?;
            done.push(format!("{} IPv6 route change(s)", t.route6_changes));
        } else {
            Self::give_back::<V6>(st, t.next6);
        }
        st.cfg.routes6.clone_from(&new.routes6);
        let policy_changed = t.policy.is_some() || t.policy6.is_some();
        if let Some(p) = t.policy {
            self.install_policy::<V4>(p)?;
        }
        if let Some(p) = t.policy6 {
            self.install_policy::<V6>(p)?;
        }
        if policy_changed {
            done.push("policy rules and numbered tables".into());
        }
        st.cfg.rules.clone_from(&new.rules);
        st.cfg.rules6.clone_from(&new.rules6);
        st.cfg.tables.clone_from(&new.tables);
        st.cfg.tables6.clone_from(&new.tables6);
        if t.vrfs {
            done.push("VRFs".into());
        }
        st.cfg.vrfs.clone_from(&new.vrfs);
        st.cfg.iface_vrfs.clone_from(&new.iface_vrfs);
        Ok(())
    }
}

impl Control {
    /// Stops the applications, closes their sockets (what was queued is dropped and
    /// counted, `socket_closed`) and starts those of `cfg`, each on its worker.
    fn replace_apps(&self, cfg: &Config) -> Result<(), String> {
        let e = |e: netbatch_datapath::threads::RemoteError| e.to_string();
        let sockets = self
            .remote
            .on_each(|_, w| {
                w.apps.clear();
                w.host.sockets.clone()
            })
            .map_err(e)?;
        self.remote
            .on_each(|i, w| {
                if i == 0 {
                    w.close_sockets();
                }
            })
            .map_err(e)?;
        let Some(sockets) = sockets.into_iter().next() else {
            return Ok(());
        };
        let fabric = self.remote.fabric().clone();
        let mut per = Vec::with_capacity(self.remote.workers());
        for i in 0..self.remote.workers() {
            per.push(Some(
                crate::build::apps_for(cfg, &sockets, i, Some(&fabric))
                    .map_err(|e| e.to_string())?,
            ));
        }
        let per = Mutex::new(per);
        self.remote
            .on_each(move |i, w| {
                if let Some(apps) = per
                    .lock()
                    .ok()
                    .and_then(|mut p| p.get_mut(i).and_then(Option::take))
                {
                    w.apps = apps;
                }
            })
            .map_err(e)?;
        Ok(())
    }
}

/// The addresses `given`, those of `old` among them first, in their order (the primary
/// stays the primary).
fn merged<T: Copy + PartialEq>(old: &[T], given: &[T]) -> Vec<T> {
    let mut new: Vec<T> = old.iter().filter(|a| given.contains(a)).copied().collect();
    new.extend(given.iter().filter(|a| !old.contains(a)));
    new
}

/// `next` (a draft of the live table) where the routes an interface's addresses implied (`before`) give
/// way to those its addresses imply now (`after`): a route of `before` not in `after`
/// goes if it is still the implied one (a route configured over it stays), a route of
/// `after` is put in unless it is there already.
fn follow<F: Family>(
    mut next: Draft<F>,
    before: &[RouteOf<F>],
    after: &[RouteOf<F>],
) -> Result<Draft<F>, (netbatch_stack::route::RouteError, F::Prefix)> {
    for r in before {
        if !after.iter().any(|n| n.prefix == r.prefix) && next.get(&r.prefix) == Some(r) {
            next.remove(r.prefix);
        }
    }
    for r in after {
        if !before.contains(r) || next.get(&r.prefix).is_none() {
            next.insert(r.clone()).map_err(|e| (e, r.prefix))?;
        }
    }
    Ok(next)
}

/// The routes of family `F` a reload to `new` changes: a copy of the live table with
/// the difference between what the live configuration and `new` build applied (routes
/// neither built are left alone), and the number of changes; or why a table cannot be
/// built.
fn route_diff<F: Published>(st: &mut State, new: &Config) -> Result<(Draft<F>, usize), String> {
    let (old_table, table) = match (F::built(&st.cfg), F::built(new)) {
        (Ok(o), Ok(t)) => (o, t),
        (Err(e), _) | (_, Err(e)) => return Err(format!("routes: {e}")),
    };
    let live = F::live(st).clone();
    let gone: Vec<F::Prefix> = old_table
        .iter()
        .filter(|r| table.get(&r.prefix).is_none() && live.get(&r.prefix) == Some(*r))
        .map(|r| r.prefix)
        .collect();
    let set: Vec<&RouteOf<F>> = table
        .iter()
        .filter(|r| live.get(&r.prefix) != Some(*r))
        .collect();
    drop(live);
    let changes = gone.len() + set.len();
    let mut next = Control::draft::<F>(st);
    for p in gone {
        next.remove(p);
    }
    for r in set {
        next.insert(r.clone())
            .map_err(|e| format!("route {}: {e}", r.prefix))?;
    }
    Ok((next, changes))
}

/// The static neighbours a reload from `old` to `new` removes (an address gone) and
/// sets (new or with another MAC); `key` is an entry's interface and address.
fn neigh_diff<N: Copy + PartialEq, K: PartialEq>(
    old: &[N],
    new: &[N],
    key: impl Fn(&N) -> K,
) -> (Vec<N>, Vec<N>) {
    let gone = old
        .iter()
        .filter(|n| !new.iter().any(|m| key(m) == key(n)))
        .copied()
        .collect();
    let set = new.iter().filter(|n| !old.contains(n)).copied().collect();
    (gone, set)
}

/// Whether `line` (a `route del` argument) names `old`'s target or only its prefix.
fn same_target<F: Family>(old: &RouteOf<F>, given: &RouteOf<F>, line: &str) -> bool {
    // `route del PREFIX` alone matches any route for the prefix; with more words, the
    // target must agree.
    // A multipath target must name the same next hops; a single `via` names the first
    // (as `ip route del PREFIX via A` does).
    let words = line.split_ascii_whitespace().count();
    words <= 1
        || (old.kind == given.kind
            && old.gateway == given.gateway
            && old.out_if == given.out_if
            && (given.multipath.is_none() || old.multipath == given.multipath))
}

fn chain_mut(chains: &mut Vec<(HookPoint, Chain)>, h: HookPoint) -> &mut Chain {
    let i = match chains.iter().rposition(|(p, _)| *p == h) {
        Some(i) => i,
        None => {
            chains.push((h, Chain::default()));
            chains.len() - 1
        }
    };
    &mut chains[i].1
}

/// The settings that differ and need a restart, with their keys.
/// Makes each of `changes` with `one` (which says whether a deletion found its route),
/// stopping at a refused route; how many routes were set and deleted.
pub(super) fn applied<F: Family>(
    changes: &[RouteChangeOf<F>],
    mut one: impl FnMut(&RouteChangeOf<F>) -> Result<bool, netbatch_stack::route::RouteError>,
) -> Result<(usize, usize), String> {
    let (mut set, mut deleted) = (0, 0);
    for c in changes {
        let found = one(c).map_err(|e| match c {
            RouteChangeOf::Replace(r) => format!("route {}: {e}", r.prefix),
            RouteChangeOf::Delete(p) => format!("route {p}: {e}"),
        })?;
        match c {
            RouteChangeOf::Replace(_) => set += 1,
            RouteChangeOf::Delete(_) => deleted += usize::from(found),
        }
    }
    Ok((set, deleted))
}

fn needs_restart(old: &Config, new: &Config) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let differ = |v: &mut Vec<(String, String)>, key: &str, a: String, b: String, what: &str| {
        if a != b {
            v.push((
                key.to_string(),
                format!("{what} cannot change while running (restart to apply)"),
            ));
        }
    };
    differ(
        &mut v,
        "datapath.mode",
        format!("{:?}", old.mode),
        format!("{:?}", new.mode),
        "the batch mode",
    );
    differ(
        &mut v,
        "datapath.dispatch",
        format!("{:?}", old.dispatch),
        format!("{:?}", new.dispatch),
        "the dispatch strategy",
    );
    differ(
        &mut v,
        "datapath.workers",
        old.workers.to_string(),
        new.workers.to_string(),
        "the number of workers",
    );
    differ(
        &mut v,
        "datapath.burst",
        old.burst.to_string(),
        new.burst.to_string(),
        "the burst",
    );
    differ(
        &mut v,
        "datapath.budget",
        old.budget.to_string(),
        new.budget.to_string(),
        "the budget",
    );
    differ(
        &mut v,
        "datapath.time_cap_us",
        old.time_cap_ns.to_string(),
        new.time_cap_ns.to_string(),
        "the round time cap",
    );
    differ(
        &mut v,
        "datapath",
        format!("{:?}", old.run),
        format!("{:?}", new.run),
        "core pinning and idle polling",
    );
    // The dnat rules' forwards ride in the RPS settings (two or more workers with NAT):
    // told apart, under the key that changed.
    let forwards = |c: &Config| {
        c.rps
            .as_ref()
            .map(|r| r.forwards.clone())
            .unwrap_or_default()
    };
    let plain = |c: &Config| {
        c.rps.clone().map(|mut r| {
            r.forwards.clear();
            r
        })
    };
    differ(
        &mut v,
        "datapath.rps",
        format!("{:?}", plain(old)),
        format!("{:?}", plain(new)),
        "RPS",
    );
    differ(
        &mut v,
        "nat.prerouting",
        format!("{:?}", forwards(old)),
        format!("{:?}", forwards(new)),
        "with two or more workers, the dnat rules' destinations and targets (what RPS \
         steers by, so that a forwarded connection's replies reach its worker)",
    );
    differ(
        &mut v,
        "conntrack",
        format!("{:?}", old.graph.conntrack),
        format!("{:?}", new.graph.conntrack),
        "connection tracking (the [conntrack] section, or tracking turned on or off by ct_* rules)",
    );
    differ(
        &mut v,
        "defrag",
        format!("{:?}", old.graph.defrag),
        format!("{:?}", new.graph.defrag),
        "the fragment stores' bounds (made once per worker)",
    );
    differ(
        &mut v,
        "pool",
        format!("{:?}", old.pool),
        format!("{:?}", new.pool),
        "the buffer pool",
    );
    differ(
        &mut v,
        "neighbour",
        format!("{:?}", old.host.neigh),
        format!("{:?}", new.host.neigh),
        "the neighbour table's tunables",
    );
    if old.ports.len() != new.ports.len() {
        v.push(("port".into(), format!(
            "ports cannot be added or removed while running ({} now, {} in the file; restart to apply)",
            old.ports.len(),
            new.ports.len()
        )));
    } else {
        for (i, (a, b)) in old.ports.iter().zip(&new.ports).enumerate() {
            if format!("{a:?}") != format!("{b:?}") {
                v.push((format!("port[{i}]"), format!(
                    "port {} cannot change while running (its kind, interface, addresses, MTU or queues; restart to apply)",
                    a.setup.name
                )));
            }
        }
    }
    differ(
        &mut v,
        "linux",
        format!("{:?}", old.linux),
        format!("{:?}", new.linux),
        "the mirrored kernel table",
    );
    differ(
        &mut v,
        "control",
        format!("{:?}", old.control),
        format!("{:?}", new.control),
        "the control socket and metrics endpoint",
    );
    v
}

/// A kernel interface's operational state (`/sys/class/net/IF/operstate`).
fn link_state(iface: &str) -> String {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/operstate"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into())
}

#[cfg(test)]
mod tests;
