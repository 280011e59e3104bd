//! The `linux` control plane: netbatch follows the kernel routing table of a control
//! network namespace over rtnetlink, as VPP's linux-cp and grout's FRR plugin do, so an
//! unmodified FRR, BIRD or iproute2 in that namespace drives netbatch's FIBs (IPv4 and
//! IPv6) and neighbours (ARP and NDP).
//!
//! ```text
//! ip route / FRR / BIRD ──> kernel of namespace NAME ──rtnetlink──> mirror thread
//!                                                                     │ Control::apply_routes
//!                                                                     │ (one publication per batch)
//!                                                                     v
//!                                                   workers switch tables between lists
//! ```
//!
//! Kernel interfaces are matched to netbatch's by name (a kernel interface `r1` is the
//! netbatch port or VLAN interface `r1`). Routes of the configured table with a next
//! hop on a known interface become netbatch routes (a multipath route with every live
//! next hop netbatch has, with its weights); blackhole, unreachable and prohibit
//! routes keep their kind; local, broadcast and multicast routes, routes on unknown
//! interfaces and the rest are skipped and counted by reason ([`convert::Skip`]); so are
//! the IPv6 routes the kernel keeps for itself (each interface's `fe80::/64`, multicast).
//! Neighbours the kernel has a MAC for become static neighbours and go when the kernel
//! deletes them or fails to reach them.
//!
//! Invariants:
//! - One thread, alone in the namespace (`setns` on that thread only), reads the
//!   notifications and publishes changes; it never blocks a worker: routes reach them
//!   through [`Control::apply_routes`] and [`Control::apply_routes6`], one table
//!   publication per family and batch, so readers see whole batches only.
//! - A batch is what arrived together: the socket is drained until it would block, or
//!   [`MAX_BATCH`] prefixes are pending, or the batch window passes ([`BATCH_TIME`], or
//!   three times the last publication's duration when longer, so publishing takes at
//!   most about a third of the thread's time under churn).
//! - At start, after a lost notification (`ENOBUFS`), and after what the kernel does
//!   without notifying route by route (a link going down, up or away, an address
//!   deleted),
//!   the mirror dumps links, routes and neighbours and applies the difference from what
//!   it mirrored as one batch: a route that did not change is not touched.
//! - Only the mirror's own routes and neighbours are removed (see `mirror.rs`).
//! - With `[linux] vrfs`, netbatch's VRFs are the VRF devices controlling netbatch
//!   interfaces' kernel twins (`mirror::State::vrf_view`), recomputed after any link
//!   notification or dump and applied, when it differs from what was applied, through
//!   [`Control::set_kernel_vrfs`], the reload's own way of changing VRFs. A change
//!   builds VRF tables again under the table threads, so each is asked to resync
//!   (`Request::Refresh`) and puts back the routes it mirrored there.

pub mod convert;
pub mod links;
mod mirror;
mod netlink;
mod pairs;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netbatch_ports::sys::{EventFd, wait_readable};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::neighbour::NeighbourMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use serde_json::{Value, json};

use crate::config::LinuxConfig;
use crate::control::{Control, RouteChangeOf};
use convert::{NeighChange, Skip};
use mirror::{Mirrored, State};
use netbatch_stack::route::rule::TABLE_MAIN;
use netbatch_stack::route::{V4, V6};
use netlink::{DumpError, RecvError, Rtnl};

/// Pending prefixes and neighbours at which a batch is published without waiting for
/// the socket to be drained.
pub const MAX_BATCH: usize = 100_000;

/// The shortest batch window.
pub const BATCH_TIME: Duration = Duration::from_millis(50);

/// Under churn, a batch window lasts at least this many times the last publication:
/// publishing (a copy of the table, which grows with it) then takes at most about a
/// third of the thread's time, leaving the rest to reading.
const PUBLISH_SHARE: u32 = 3;

/// The notification socket's receive buffer: what the kernel may queue while a batch is
/// published (about 150,000 route notifications) before it overruns.
pub const RCVBUF: usize = 128 << 20;

/// The longest a dump may take.
const DUMP_TIMEOUT: Duration = Duration::from_secs(120);

/// Publications tried beyond the first to isolate the routes netbatch refuses in a
/// batch.
const SPLITS: u32 = 16;

/// Dumps redone when the kernel's table changed during one, before giving up.
const DUMP_TRIES: usize = 5;

/// The mirror's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Netlink messages read (notifications and dumps).
    pub messages: u64,
    /// Notifications read.
    pub notifications: u64,
    /// Routes added to netbatch's tables (IPv4 and IPv6).
    pub routes_added: u64,
    /// Routes of netbatch's tables replaced.
    pub routes_replaced: u64,
    /// Routes deleted from netbatch's tables.
    pub routes_deleted: u64,
    /// Static neighbours set (ARP and NDP).
    pub neighbours_set: u64,
    /// Neighbours deleted.
    pub neighbours_deleted: u64,
    /// Interfaces whose addresses or MTU changed to follow their pair's tap.
    pub interface_changes: u64,
    /// Messages (or parts of them) not mirrored, by reason.
    pub skipped: BTreeMap<&'static str, u64>,
    /// Route table publications.
    pub batches: u64,
    /// Route changes in the last publication.
    pub last_batch_changes: u64,
    /// How long the last publication took, in microseconds.
    pub last_batch_us: u64,
    /// Full resyncs after the first sync.
    pub resyncs: u64,
    /// Route and neighbour changes the last sync or resync applied.
    pub last_resync_changes: u64,
    /// Lost notifications (socket overruns).
    pub overruns: u64,
    /// Errors: changes netbatch refused, undecodable messages, failed dumps.
    pub errors: u64,
    /// The last error.
    pub last_error: Option<String>,
    /// IPv4 routes of netbatch's table that are the mirror's now.
    pub routes: u64,
    /// IPv6 routes of netbatch's table that are the mirror's now.
    pub routes6: u64,
    /// Static neighbours (of both families) that are the mirror's now.
    pub neighbours: u64,
    /// Kernel policy rules (both families, Linux's defaults aside) netbatch follows.
    pub rules: u64,
    /// VRFs netbatch has from the kernel's VRF devices now (`[linux] vrfs`).
    pub vrfs: u64,
    /// Changes of netbatch's VRFs made to follow the kernel's.
    pub vrf_changes: u64,
}

impl MirrorStats {
    /// Adds another table's thread's counters (the routes of every mirrored table
    /// together; the last batch and error are the latest of either).
    fn add(&mut self, o: &Self) {
        self.messages += o.messages;
        self.notifications += o.notifications;
        self.routes_added += o.routes_added;
        self.routes_replaced += o.routes_replaced;
        self.routes_deleted += o.routes_deleted;
        for (k, v) in &o.skipped {
            *self.skipped.entry(k).or_default() += v;
        }
        self.batches += o.batches;
        self.resyncs += o.resyncs;
        self.overruns += o.overruns;
        self.errors += o.errors;
        if o.last_error.is_some() {
            self.last_error.clone_from(&o.last_error);
        }
        self.routes += o.routes;
        self.routes6 += o.routes6;
    }

    fn skip(&mut self, s: Skip) {
        *self.skipped.entry(s.name()).or_default() += 1;
    }

    fn error(&mut self, e: impl Into<String>) {
        let e = e.into();
        tracing::warn!(target: "netbatch::linux", "{e}");
        self.errors += 1;
        self.last_error = Some(e);
    }

    /// Route and neighbour changes applied so far.
    pub fn changes(&self) -> u64 {
        self.routes_added
            + self.routes_replaced
            + self.routes_deleted
            + self.neighbours_set
            + self.neighbours_deleted
    }

    /// The counters as a JSON document (for `show` and `/metrics`); `skipped` has every
    /// reason, zero or not.
    pub fn to_json(&self) -> Value {
        let skipped: serde_json::Map<String, Value> = Skip::ALL
            .iter()
            .map(|s| {
                (
                    s.name().to_string(),
                    json!(self.skipped.get(s.name()).copied().unwrap_or(0)),
                )
            })
            .collect();
        json!({
            "messages": self.messages,
            "notifications": self.notifications,
            "routes_added": self.routes_added,
            "routes_replaced": self.routes_replaced,
            "routes_deleted": self.routes_deleted,
            "neighbours_set": self.neighbours_set,
            "neighbours_deleted": self.neighbours_deleted,
            "interface_changes": self.interface_changes,
            "skipped": skipped,
            "batches": self.batches,
            "last_batch_changes": self.last_batch_changes,
            "last_batch_us": self.last_batch_us,
            "resyncs": self.resyncs,
            "last_resync_changes": self.last_resync_changes,
            "overruns": self.overruns,
            "errors": self.errors,
            "last_error": self.last_error,
            "routes": self.routes,
            "routes6": self.routes6,
            "neighbours": self.neighbours,
            "rules": self.rules,
            "vrfs": self.vrfs,
            "vrf_changes": self.vrf_changes,
        })
    }
}

/// What a resync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resynced {
    /// Route changes applied (0 when netbatch already agreed with the kernel).
    pub route_changes: u64,
    /// Neighbour changes applied.
    pub neighbour_changes: u64,
    /// Messages dumped.
    pub dumped: u64,
    /// How long it took.
    pub took: Duration,
}

enum Request {
    Resync(mpsc::Sender<Result<Resynced, String>>),
    /// A resync nobody waits for: netbatch's table was built again under the mirror
    /// (the VRFs changed), the routes it owned there must be put back.
    Refresh,
}

/// How one mirror thread reaches another: the table threads, for the one that follows
/// the VRF devices.
#[derive(Clone)]
struct Peer {
    requests: mpsc::Sender<Request>,
    wake: Arc<EventFd>,
}

/// A running mirror; its thread stops when it is dropped.
pub struct Mirror {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    requests: mpsc::Sender<Request>,
    stats: Arc<Mutex<MirrorStats>>,
    cfg: LinuxConfig,
    /// The mirrors of `[linux] tables`, one thread each.
    extra: Vec<Self>,
}

impl core::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mirror")
            .field("namespace", &self.cfg.namespace)
            .field("table", &self.cfg.table)
            .finish()
    }
}

/// How the mirror runs, beyond its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// The notification socket's receive buffer, in bytes ([`RCVBUF`]).
    pub rcvbuf: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self { rcvbuf: RCVBUF }
    }
}

/// Starts mirroring the namespace and table of `cfg` into `control`'s datapath: the
/// thread enters the namespace, subscribes, syncs fully, and this returns once that
/// first sync is applied (or with why the mirror could not start).
pub fn start(control: Arc<Control>, cfg: &LinuxConfig) -> Result<Mirror, String> {
    start_tuned(control, cfg, Tuning::default())
}

/// [`start`] with `tuning`. The table mirrored into `main` has its own thread, and so
/// has each of `[linux] tables` (routes only: the first thread follows the neighbours
/// and interfaces).
pub fn start_tuned(
    control: Arc<Control>,
    cfg: &LinuxConfig,
    tuning: Tuning,
) -> Result<Mirror, String> {
    let peers = Arc::new(Mutex::new(Vec::new()));
    let mut main = spawn(
        control.clone(),
        cfg,
        tuning,
        cfg.table,
        TABLE_MAIN,
        peers.clone(),
    )?;
    for &t in &cfg.tables {
        let m = spawn(control.clone(), cfg, tuning, t, t, Arc::default())?;
        peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Peer {
                requests: m.requests.clone(),
                wake: m.wake.clone(),
            });
        main.extra.push(m);
    }
    Ok(main)
}

/// One mirror thread: kernel table `table` into netbatch's table `into` (`main`: with
/// the neighbours, interfaces, pairs and VRF devices; another: its routes only).
/// `peers`: the table threads, which the first refreshes when the VRFs change.
fn spawn(
    control: Arc<Control>,
    cfg: &LinuxConfig,
    tuning: Tuning,
    table: u32,
    into: u32,
    peers: Arc<Mutex<Vec<Peer>>>,
) -> Result<Mirror, String> {
    let routes_only = into != TABLE_MAIN;
    let path = cfg.netns_path();
    let what = format!("linux: namespace {}", cfg.namespace);
    let wake = Arc::new(EventFd::new().map_err(|e| format!("{what}: eventfd: {e}"))?);
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Mutex::new(MirrorStats::default()));
    let (req_tx, req_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Resynced, String>>();
    let (t_wake, t_stop, t_stats) = (wake.clone(), stop.clone(), stats.clone());
    let pairs = cfg.pairs && !routes_only;
    let follow_vrfs = cfg.vrfs && !routes_only;
    let mirrored_tables = cfg.tables.clone();
    let t_what = what.clone();
    let thread = std::thread::Builder::new()
        .name("netbatch-linux".into())
        .spawn(move || {
            let open = || -> Result<(Rtnl, Rtnl), String> {
                netbatch_ports::sys::enter_netns(&path)
                    .map_err(|e| format!("{t_what}: cannot enter {}: {e}", path.display()))?;
                let groups = [
                    netlink::RTNLGRP_LINK,
                    netlink::RTNLGRP_NEIGH,
                    netlink::RTNLGRP_IPV4_IFADDR,
                    netlink::RTNLGRP_IPV4_ROUTE,
                    netlink::RTNLGRP_IPV6_IFADDR,
                    netlink::RTNLGRP_IPV6_ROUTE,
                    netlink::RTNLGRP_IPV4_RULE,
                    netlink::RTNLGRP_IPV6_RULE,
                ];
                let listen = Rtnl::open(&groups, tuning.rcvbuf)
                    .map_err(|e| format!("{t_what}: rtnetlink socket: {e}"))?;
                let dumper =
                    Rtnl::open(&[], 0).map_err(|e| format!("{t_what}: rtnetlink socket: {e}"))?;
                Ok((listen, dumper))
            };
            let (listen, mut dumper) = match open() {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            if !routes_only && let Err(e) = pairs::assign(&mut dumper, &control.host_pairs()) {
                let _ = ready_tx.send(Err(format!("{t_what}: host interface pairs: {e}")));
                return;
            }
            let names = control.clone();
            let mut t = Thread {
                state: State::new(table, Box::new(move |n: &str| names.iface_index(n)), pairs),
                control,
                listen,
                dumper,
                shared: t_stats,
                last_publish: Duration::ZERO,
                pairs,
                into,
                routes_only,
                rules_dirty: !routes_only,
                follow_vrfs,
                vrfs_applied: None,
                mirrored_tables,
                peers,
            };
            let first = t.resync("start");
            t.publish();
            let ok = first.is_ok();
            let _ = ready_tx.send(first);
            if ok {
                t.serve(&t_stop, &t_wake, &req_rx);
            }
        })
        .map_err(|e| format!("{what}: cannot start the mirror thread: {e}"))?;
    let mirror = Mirror {
        thread: Some(thread),
        stop,
        wake,
        requests: req_tx,
        stats,
        cfg: cfg.clone(),
        extra: Vec::new(),
    };
    match ready_rx.recv() {
        Ok(Ok(r)) => {
            tracing::info!(
                target: "netbatch::linux",
                "{what}: mirroring table {table} into {} ({} route and {} neighbour changes applied in {:?})",
                netbatch_stack::route::rule::table_name(into),
                r.route_changes,
                r.neighbour_changes,
                r.took
            );
            Ok(mirror)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "{what}: the mirror thread ended before its first sync"
        )),
    }
}

impl Mirror {
    /// The counters now (of every table's thread: routes added to any table count).
    pub fn stats(&self) -> MirrorStats {
        let mut s = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for m in &self.extra {
            s.add(&m.stats());
        }
        s
    }

    /// The mirror's configuration.
    pub fn config(&self) -> &LinuxConfig {
        &self.cfg
    }

    /// Dumps the kernel's state now and applies the difference (what an overrun does),
    /// for every mirrored table.
    pub fn resync(&self) -> Result<Resynced, String> {
        let mut r = self.resync_one()?;
        for m in &self.extra {
            let x = m.resync_one()?;
            r.route_changes += x.route_changes;
            r.dumped += x.dumped;
            r.took += x.took;
        }
        Ok(r)
    }

    fn resync_one(&self) -> Result<Resynced, String> {
        let (tx, rx) = mpsc::channel();
        self.requests
            .send(Request::Resync(tx))
            .map_err(|_| "the mirror thread has stopped".to_string())?;
        self.wake.wake();
        rx.recv_timeout(DUMP_TIMEOUT * 2)
            .map_err(|_| "the mirror thread did not answer".to_string())?
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The mirror thread's own state.
struct Thread {
    state: State,
    control: Arc<Control>,
    listen: Rtnl,
    dumper: Rtnl,
    shared: Arc<Mutex<MirrorStats>>,
    last_publish: Duration,
    /// Host interface pairs: addresses are dumped and followed.
    pairs: bool,
    /// netbatch's table the kernel table's routes go to (`main`, or a numbered one).
    into: u32,
    /// Routes only: the neighbours, interfaces and rules are another mirror's (the one
    /// of the table mirrored into `main`).
    routes_only: bool,
    /// A rule changed (or a resync began): the rules are dumped and handed over whole
    /// at the next flush (a namespace has a few rules, not a table's worth).
    rules_dirty: bool,
    /// netbatch's VRFs follow the kernel's VRF devices (`[linux] vrfs`).
    follow_vrfs: bool,
    /// The VRF view netbatch has (none applied yet: `None`).
    vrfs_applied: Option<mirror::VrfView>,
    /// The kernel tables mirrored beside `main` (`[linux] tables`).
    mirrored_tables: Vec<u32>,
    /// Their threads.
    peers: Arc<Mutex<Vec<Peer>>>,
}

/// The kernel's rules netbatch follows, IPv4 and IPv6, as one dump found them.
type MirroredRules = (
    Vec<netbatch_stack::route::rule::RuleOf<V4>>,
    Vec<netbatch_stack::route::rule::RuleOf<V6>>,
);

impl Thread {
    fn serve(&mut self, stop: &AtomicBool, wake: &EventFd, requests: &mpsc::Receiver<Request>) {
        while !stop.load(Ordering::Acquire) {
            wait_readable(&[self.listen.fd(), wake.fd()], 1000);
            wake.clear();
            while let Ok(req) = requests.try_recv() {
                self.drain();
                match req {
                    Request::Resync(reply) => {
                        let r = self.resync("asked");
                        // The counters include it when the answer arrives.
                        self.publish();
                        let _ = reply.send(r);
                    }
                    Request::Refresh => {
                        let _ = self.resync("VRFs changed");
                    }
                }
            }
            self.drain();
            if let Some(why) = self.state.take_resync() {
                let _ = self.resync(why);
            }
            self.publish();
        }
    }

    /// Reads notifications until the socket would block, publishing a batch whenever
    /// the batch is full or its window has passed, and the rest at the end.
    ///
    /// After an overrun too the socket is emptied before the resync's dump: the kernel
    /// reports one overrun per congestion and ends the congestion only when the queue
    /// is empty (`NETLINK_S_CONGESTED`), so what it drops after the dump started is
    /// reported again.
    fn drain(&mut self) {
        let mut started: Option<Instant> = None;
        loop {
            match self.listen.recv() {
                Ok(Some(d)) => {
                    started.get_or_insert_with(Instant::now);
                    for m in netlink::messages(d) {
                        self.state.stats.messages += 1;
                        match m {
                            Ok(m) => {
                                if let netlink_packet_core::NetlinkPayload::InnerMessage(inner) =
                                    &m.payload
                                {
                                    if matches!(
                                        inner,
                                        RouteNetlinkMessage::NewRule(_)
                                            | RouteNetlinkMessage::DelRule(_)
                                    ) {
                                        self.rules_dirty |= !self.routes_only;
                                    } else {
                                        self.state.notified(inner, m.header.flags);
                                    }
                                }
                            }
                            Err(e) => {
                                self.state.stats.error(format!("notification: {e}"));
                                self.state.want_resync("undecodable notification");
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(RecvError::Lost(why)) => {
                    self.state.stats.overruns += 1;
                    tracing::warn!(target: "netbatch::linux", "notifications lost: {why}; resync follows");
                    self.state.want_resync("notifications lost");
                }
                Err(RecvError::Io(e)) => {
                    self.state.stats.error(format!("receive: {e}"));
                    break;
                }
            }
            let window = BATCH_TIME.max(self.last_publish * PUBLISH_SHARE);
            if self.state.pending() >= MAX_BATCH || started.is_some_and(|s| s.elapsed() >= window) {
                self.flush();
                started = None;
            }
        }
        self.flush();
    }

    /// Applies what is pending and publishes the counters with it: the counters' lock
    /// is held while the tables change, so whoever sees a change in the tables and then
    /// asks [`Mirror::stats`] gets counters that include it. Returns (route changes,
    /// neighbour changes) applied.
    ///
    /// The one slow read, the kernel's rules (a netlink dump), is done before the lock
    /// is taken; under it are only netbatch's own publications.
    fn flush(&mut self) -> (u64, u64) {
        let rules = if !self.routes_only && self.rules_dirty {
            self.rules_dirty = false;
            self.dump_rules()
        } else {
            None
        };
        let shared = self.shared.clone();
        let mut published = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let applied = self.apply_pending(rules);
        self.count_owned();
        published.clone_from(&self.state.stats);
        applied
    }

    /// Applies what is pending: the route changes as one publication, then the
    /// neighbours. Returns (route changes, neighbour changes) applied.
    fn apply_pending(&mut self, rules: Option<MirroredRules>) -> (u64, u64) {
        // Interfaces first: a new address's connected subnet is what later routes'
        // gateways are on.
        if self.routes_only {
            let _ = self.state.iface_changes();
            let _ = self.state.neighbour_changes();
            return (self.flush_routes::<V4>() + self.flush_routes::<V6>(), 0);
        }
        for c in self.state.iface_changes() {
            let (changed, refused) =
                match self.control.set_iface(c.iface, &c.addrs, &c.addrs6, c.mtu) {
                    Ok(c) => (c, None),
                    Err((c, e)) => (c, Some(e)),
                };
            self.state.stats.interface_changes += u64::from(changed);
            if let Some(e) = refused {
                self.state.stats.error(format!("interface: {e}"));
            }
        }
        // VRFs before routes: an interface's connected routes move with it, and a route
        // of `main` via its subnet follows.
        if self.follow_vrfs && self.state.take_links_seen() {
            self.flush_vrfs();
        }
        // Rules before routes: a route for a table a new rule looks up lands in it.
        if let Some((v4, v6)) = rules {
            let n = (v4.len() + v6.len()) as u64;
            match self.control.set_mirrored_rules(v4, v6) {
                Ok(()) => self.state.stats.rules = n,
                Err(e) => self.state.stats.error(format!("rules: {e}")),
            }
        }
        let routes = self.flush_routes::<V4>() + self.flush_routes::<V6>();
        let mut neighbours = 0;
        for c in self.state.neighbour_changes() {
            let r = match c {
                NeighChange::Set(i, IpAddr::V4(ip), mac) => self.control.set_neighbour(i, ip, mac),
                NeighChange::Set(i, IpAddr::V6(ip), mac) => self.control.set_neighbour6(i, ip, mac),
                NeighChange::Delete(i, IpAddr::V4(ip)) => {
                    self.control.delete_neighbour(i, ip).map(|_| ())
                }
                NeighChange::Delete(i, IpAddr::V6(ip)) => {
                    self.control.delete_neighbour6(i, ip).map(|_| ())
                }
            };
            match r {
                Ok(()) => {
                    self.state.neighbour_applied(c);
                    neighbours += 1;
                }
                Err(e) => self.state.stats.error(format!("neighbour {c:?}: {e}")),
            }
        }
        (routes, neighbours)
    }

    /// Makes netbatch's VRFs the kernel's VRF devices' ([`mirror::State::vrf_view`]),
    /// when they differ from what was applied, through the control plane's one way of
    /// changing VRFs ([`Control::set_kernel_vrfs`]); then the table threads resync, so
    /// that the routes they mirrored into a table built again are back. A refusal is
    /// counted and tried again at the next link change or resync.
    fn flush_vrfs(&mut self) {
        let view = self.state.vrf_view();
        if self.vrfs_applied.as_ref() == Some(&view) {
            return;
        }
        for (name, why) in &view.refused {
            self.state.stats.skip(*why);
            tracing::warn!(target: "netbatch::linux", "VRF device {name} not followed: {}", why.description());
        }
        for v in &view.vrfs {
            if !self.mirrored_tables.contains(&v.table) {
                self.state.stats.skip(Skip::VrfUnmirrored);
                tracing::warn!(target: "netbatch::linux", "VRF {} (table {}): its kernel table is not in [linux] tables, its routes are not mirrored", v.name, v.table);
            }
        }
        match self
            .control
            .set_kernel_vrfs(view.vrfs.clone(), &view.members)
        {
            Ok(changed) => {
                self.state.stats.vrfs = view.vrfs.len() as u64;
                self.vrfs_applied = Some(view);
                if changed {
                    self.state.stats.vrf_changes += 1;
                    let peers = self
                        .peers
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    for p in peers {
                        if p.requests.send(Request::Refresh).is_ok() {
                            p.wake.wake();
                        }
                    }
                }
            }
            Err(e) => self.state.stats.error(format!("VRFs: {e}")),
        }
    }

    /// Dumps the namespace's rules: those netbatch can follow (the rest counted by
    /// reason), for [`Thread::apply_pending`] to hand to the control plane; a failed
    /// dump asks for a resync (`None`).
    fn dump_rules(&mut self) -> Option<MirroredRules> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        let names = self.control.clone();
        let iface = |n: &str| names.iface_index(n);
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut m = netlink_packet_route::rule::RuleMessage::default();
            m.header.family = family;
            let stats = &mut self.state.stats;
            let r = self
                .dumper
                .dump(RouteNetlinkMessage::GetRule(m), DUMP_TIMEOUT, |msg, _| {
                    let RouteNetlinkMessage::NewRule(m) = msg else {
                        return;
                    };
                    let got = match m.header.family {
                        AddressFamily::Inet6 => {
                            convert::rule_of::<V6>(m, &iface).map(|r| r.map(|r| v6.push(r)))
                        }
                        _ => convert::rule_of::<V4>(m, &iface).map(|r| r.map(|r| v4.push(r))),
                    };
                    if let Err(s) = got {
                        stats.skip(s);
                    }
                });
            if let Err(e) = r {
                let e = match e {
                    DumpError::Interrupted => "interrupted".to_string(),
                    DumpError::Failed(e) => e,
                };
                self.state.stats.error(format!("rule dump: {e}"));
                self.rules_dirty = true;
                return None;
            }
        }
        Some((v4, v6))
    }

    /// Applies the pending route changes of family `F` as one publication; how many.
    fn flush_routes<F: Mirrored>(&mut self) -> u64 {
        let table = F::live(&self.control, self.into);
        let plan = self.state.route_changes::<F>(&table);
        drop(table);
        if plan.changes.is_empty() {
            return 0;
        }
        let t = Instant::now();
        let routes = self.apply::<F>(&plan.changes, &plan.existed);
        self.last_publish = t.elapsed();
        self.state.stats.last_batch_us = self.last_publish.as_micros() as u64;
        self.state.stats.last_batch_changes = routes;
        routes
    }

    /// Publishes `changes` at once. A batch netbatch refuses for one of its routes (a
    /// full table) is halved, and the halves tried in turn, until the refused routes
    /// are alone or [`SPLITS`] more publications were tried (each copies the table);
    /// what is still refused then is counted as errors and left to the next resync.
    /// Returns how many were applied.
    fn apply<F: Mirrored>(&mut self, changes: &[RouteChangeOf<F>], existed: &[bool]) -> u64 {
        let mut budget = SPLITS;
        self.apply_split(changes, existed, &mut budget)
    }

    fn apply_split<F: Mirrored>(
        &mut self,
        changes: &[RouteChangeOf<F>],
        existed: &[bool],
        budget: &mut u32,
    ) -> u64 {
        match F::publish(&self.control, self.into, changes) {
            Ok(_) => {
                self.state.stats.batches += 1;
                self.state.routes_applied(changes, existed);
                changes.len() as u64
            }
            // A route refused: nothing was applied.
            Err(e) if e.starts_with("route ") && changes.len() > 1 && *budget >= 2 => {
                *budget -= 2;
                let h = changes.len() / 2;
                self.apply_split(&changes[..h], &existed[..h], budget)
                    + self.apply_split(&changes[h..], &existed[h..], budget)
            }
            Err(e) => {
                self.state.stats.error(format!(
                    "{} {} route change(s) not applied: {e}",
                    changes.len(),
                    F::NAME
                ));
                0
            }
        }
    }

    /// Dumps links, routes and neighbours and applies the difference as one batch.
    fn resync(&mut self, why: &str) -> Result<Resynced, String> {
        let t = Instant::now();
        // What was read before is applied first: the difference is from a known state.
        self.flush();
        // This resync is what any asked for.
        let _ = self.state.take_resync();
        let mut dumped = 0u64;
        let mut done = false;
        for _ in 0..DUMP_TRIES {
            self.state.begin_resync();
            match self.dump_all() {
                Ok(n) => {
                    dumped = n;
                    done = true;
                    break;
                }
                Err(DumpError::Interrupted) => continue,
                Err(DumpError::Failed(e)) => {
                    let e = format!("resync ({why}): {e}");
                    self.state.stats.error(e.clone());
                    // Tried again at the next turn of the loop (at most once a second).
                    self.state.want_resync("failed resync");
                    return Err(e);
                }
            }
        }
        if !done {
            let e = format!("resync ({why}): the table kept changing during {DUMP_TRIES} dumps");
            self.state.stats.error(e.clone());
            self.state.want_resync("dump interrupted");
            return Err(e);
        }
        self.state.end_resync();
        self.rules_dirty |= !self.routes_only;
        self.state.stats.messages += dumped;
        // One publication per family, whatever its size.
        let (route_changes, neighbour_changes) = self.flush();
        if why != "start" {
            self.state.stats.resyncs += 1;
            tracing::info!(
                target: "netbatch::linux",
                "resync ({why}): {route_changes} route and {neighbour_changes} neighbour change(s)"
            );
        }
        self.state.stats.last_resync_changes = route_changes + neighbour_changes;
        Ok(Resynced {
            route_changes,
            neighbour_changes,
            dumped,
            took: t.elapsed(),
        })
    }

    fn dump_all(&mut self) -> Result<u64, DumpError> {
        let route = |family| {
            let mut m = RouteMessage::default();
            m.header.address_family = family;
            RouteNetlinkMessage::GetRoute(m)
        };
        let neigh = |family| {
            let mut m = NeighbourMessage::default();
            m.header.family = family;
            RouteNetlinkMessage::GetNeighbour(m)
        };
        let addr = |family| {
            let mut m = AddressMessage::default();
            m.header.family = family;
            RouteNetlinkMessage::GetAddress(m)
        };
        let mut n = 0;
        let mut reqs = vec![RouteNetlinkMessage::GetLink(LinkMessage::default())];
        if self.pairs {
            reqs.push(addr(AddressFamily::Inet));
            reqs.push(addr(AddressFamily::Inet6));
        }
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            reqs.push(route(family));
        }
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            reqs.push(neigh(family));
        }
        for req in reqs {
            let state = &mut self.state;
            n += self
                .dumper
                .dump(req, DUMP_TIMEOUT, |m, flags| state.dumped(m, flags))?
                as u64;
        }
        Ok(n)
    }

    /// Counts the routes and neighbours the mirror owns.
    fn count_owned(&mut self) {
        let (r, r6, n) = self.state.owned();
        self.state.stats.routes = r as u64;
        self.state.stats.routes6 = r6 as u64;
        self.state.stats.neighbours = n as u64;
    }

    /// Makes the counters visible to [`Mirror::stats`].
    fn publish(&mut self) {
        self.count_owned();
        let mut s = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.clone_from(&self.state.stats);
    }
}

#[cfg(test)]
mod tests;
