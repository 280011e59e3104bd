//! The mirror's state, apart from sockets and workers: the kernel's table as its
//! messages described it, which routes and neighbours of netbatch's are the mirror's,
//! and the changes that make netbatch agree with the kernel. IPv4 and IPv6 routes are
//! kept apart, each family's written once over it ([`Mirrored`]); neighbours of both
//! families together.
//!
//! Invariants:
//! - Messages change only the kernel view ([`Kernel`]) and mark what they touched;
//!   netbatch is changed from the view, for the touched prefixes and neighbours only,
//!   by comparing what the kernel's best route is with what netbatch's table holds:
//!   equal means nothing to do, so replaying a message, or a whole resync, changes
//!   nothing that did not change.
//! - The mirror removes only what it owns: a netbatch route it installed or found
//!   equal to the kernel's, a neighbour it set. A prefix whose kernel route cannot be
//!   mirrored leaves netbatch's own route (from the configuration) alone.
//! - A resync builds a fresh view from a dump and carries ownership over, so what the
//!   kernel dropped while notifications were lost is deleted too.
//! - An IPv6 multipath route is the kernel's sibling routes ([`KernelFamily::SIBLINGS`]):
//!   an appended next hop is notified as the merged route, which replaces the view's;
//!   the deletion of one next hop of several is notified as that next hop alone, which
//!   says nothing of the rest, so it asks for a resync (the dump has the siblings left).
//! - With host interface pairs (`follow_ifaces`), the IPv4 and IPv6 addresses (but
//!   link-local ones: each netbatch interface has its own) and MTU of each kernel
//!   interface named as a netbatch interface are that interface's: a change marks the
//!   interface, and its whole kernel state is handed over ([`State::iface_changes`]);
//!   netbatch compares and changes only what differs.
//! - Each link's controller and, for a VRF device, its table are kept as the kernel
//!   last told them (a notification without a name is partial and changes neither);
//!   the VRF view ([`State::vrf_view`]) is derived from the links alone, so a resync's
//!   dump rebuilds it, and it is ordered (by name, by interface) so that equal kernel
//!   states give equal views.

use core::net::IpAddr;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use netbatch_stack::prefix::{If6Addr, IfAddr, Ipv4Prefix, Ipv6Prefix};
use netbatch_stack::route::{Family, RouteOf, RoutesOf, V4, V6};
use netbatch_wire::ethernet::MacAddr;
use netlink_packet_core::NLM_F_APPEND;
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::MirrorStats;
use super::convert::{self, KernelFamily, KernelRouteOf, NeighChange, Skip};
use crate::control::{Control, RouteChangeOf};
use netbatch_stack::route::rule::TABLE_MAIN;

/// What netbatch makes of one kernel route (a route, or why none).
type Cand<F> = Result<RouteOf<F>, Skip>;

/// The kernel routes of one prefix, by metric (nearly always one).
#[derive(Debug, Clone, Default)]
enum Cands<F: Family> {
    #[default]
    None,
    One(u32, Cand<F>),
    Many(Vec<(u32, Cand<F>)>),
}

impl<F: Family> Cands<F> {
    /// The route with metric `m`, if there is one.
    fn get(&self, m: u32) -> Option<&Cand<F>> {
        match self {
            Self::None => None,
            Self::One(k, c) => (*k == m).then_some(c),
            Self::Many(v) => v.iter().find(|(k, _)| *k == m).map(|(_, c)| c),
        }
    }

    /// Whether a route with metric `m` is there.
    fn has(&self, m: u32) -> bool {
        self.get(m).is_some()
    }

    fn set(&mut self, m: u32, c: Cand<F>) {
        match self {
            Self::None => *self = Self::One(m, c),
            Self::One(k, old) if *k == m => *old = c,
            Self::One(..) => {
                let Self::One(k, old) = core::mem::take(self) else {
                    return;
                };
                *self = Self::Many(vec![(k, old), (m, c)]);
            }
            Self::Many(v) => match v.iter_mut().find(|(k, _)| *k == m) {
                Some(e) => e.1 = c,
                None => v.push((m, c)),
            },
        }
    }

    fn remove(&mut self, m: u32) {
        match self {
            Self::One(k, _) if *k == m => *self = Self::None,
            Self::Many(v) => {
                v.retain(|(k, _)| *k != m);
                if v.is_empty() {
                    *self = Self::None;
                }
            }
            _ => {}
        }
    }

    /// The route the kernel forwards by: the lowest metric.
    fn best(&self) -> Option<&Cand<F>> {
        match self {
            Self::None => None,
            Self::One(_, c) => Some(c),
            Self::Many(v) => v.iter().min_by_key(|(k, _)| *k).map(|(_, c)| c),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Self::None)
    }
}

/// One prefix: the kernel's routes for it and whether netbatch's route is the mirror's.
#[derive(Debug, Clone)]
struct Slot<F: Family> {
    cands: Cands<F>,
    owned: bool,
    dirty: bool,
}

impl<F: Family> Default for Slot<F> {
    fn default() -> Self {
        Self {
            cands: Cands::None,
            owned: false,
            dirty: false,
        }
    }
}

/// One family's kernel routes.
pub(crate) struct Table<F: Family> {
    routes: HashMap<F::Prefix, Slot<F>>,
    /// Prefixes with an appended route the kernel does not use (its deletion may
    /// uncover it).
    aliases: HashSet<F::Prefix>,
}

impl<F: Family> Default for Table<F> {
    fn default() -> Self {
        Self {
            routes: HashMap::new(),
            aliases: HashSet::new(),
        }
    }
}

/// A kernel interface.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    name: String,
    /// The netbatch interface of the same name.
    iface: Option<u16>,
    up: bool,
    mtu: Option<u32>,
    /// Its controller's kernel index (a VRF device, a bridge), if any.
    controller: Option<u32>,
    /// Its table, when it is a VRF device.
    vrf_table: Option<u32>,
}

/// netbatch's VRFs as the kernel's VRF devices make them ([`State::vrf_view`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VrfView {
    /// The VRF devices controlling a netbatch interface's kernel twin, by name.
    pub(crate) vrfs: Vec<crate::config::VrfConfig>,
    /// (netbatch interface, VRF name), by interface.
    pub(crate) members: Vec<(u16, String)>,
    /// VRF devices left out, with why (their members stay in `main`).
    pub(crate) refused: Vec<(String, Skip)>,
}

/// Why a message asks for a full resync.
pub(crate) type ResyncWhy = &'static str;

/// What a message touched.
pub(crate) enum Touched {
    Nothing,
    Route(Ipv4Prefix),
    Route6(Ipv6Prefix),
    Neighbour((u16, IpAddr)),
    /// A netbatch interface's addresses or MTU.
    Iface(u16),
    Resync(ResyncWhy),
}

/// The kernel's tables, links and neighbours as its messages told them.
#[derive(Default)]
pub(crate) struct Kernel {
    links: HashMap<u32, Link>,
    v4: Table<V4>,
    v6: Table<V6>,
    neighbours: HashMap<(u16, IpAddr), MacAddr>,
    /// IPv4 addresses by kernel interface (followed with host interface pairs only).
    addrs: HashMap<u32, Vec<IfAddr>>,
    /// IPv6 addresses by kernel interface, link-local ones left out (likewise).
    addrs6: HashMap<u32, Vec<If6Addr>>,
}

/// One family's pending prefixes and how many of its prefixes are owned.
pub(crate) struct Side<F: Family> {
    dirty: Vec<F::Prefix>,
    owned: usize,
}

impl<F: Family> Default for Side<F> {
    fn default() -> Self {
        Self {
            dirty: Vec::new(),
            owned: 0,
        }
    }
}

/// Both families' sides.
#[derive(Default)]
pub(crate) struct Sides {
    v4: Side<V4>,
    v6: Side<V6>,
}

/// Where the mirror keeps each family's routes, and how it reaches netbatch's table of
/// the family.
pub(crate) trait Mirrored: KernelFamily {
    /// The family's kernel routes.
    fn table(k: &mut Kernel) -> &mut Table<Self>;
    /// The family's pending prefixes and owned count.
    fn side(s: &mut Sides) -> &mut Side<Self>;
    /// What a change of prefix `p` touched.
    fn touched(p: Self::Prefix) -> Touched;
    /// The host's route table (`main`) the workers hold.
    fn live_main(c: &Control) -> Arc<RoutesOf<Self>>;
    /// Numbered table `id` of the workers' policy (a VRF's or not).
    fn live_table(c: &Control, id: u32) -> Arc<RoutesOf<Self>>;
    /// Applies `changes` to `main` in one publication.
    fn publish_main(c: &Control, changes: &[RouteChangeOf<Self>])
    -> Result<(usize, usize), String>;
    /// Applies `changes` to numbered table `id` in one policy change.
    fn publish_table(
        c: &Control,
        id: u32,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String>;

    /// The table netbatch's workers hold as table `into` (`main`, 254, or a numbered one).
    fn live(c: &Control, into: u32) -> Arc<RoutesOf<Self>> {
        if into == TABLE_MAIN {
            Self::live_main(c)
        } else {
            Self::live_table(c, into)
        }
    }

    /// Applies `changes` to netbatch's table `into` in one publication.
    fn publish(
        c: &Control,
        into: u32,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String> {
        if into == TABLE_MAIN {
            Self::publish_main(c, changes)
        } else {
            Self::publish_table(c, into, changes)
        }
    }
}

impl Mirrored for V4 {
    fn table(k: &mut Kernel) -> &mut Table<Self> {
        &mut k.v4
    }
    fn side(s: &mut Sides) -> &mut Side<Self> {
        &mut s.v4
    }
    fn touched(p: Ipv4Prefix) -> Touched {
        Touched::Route(p)
    }
    fn live_main(c: &Control) -> Arc<RoutesOf<Self>> {
        c.routes()
    }
    fn live_table(c: &Control, id: u32) -> Arc<RoutesOf<Self>> {
        c.table_routes(id)
    }
    fn publish_main(
        c: &Control,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String> {
        c.apply_routes(changes)
    }
    fn publish_table(
        c: &Control,
        id: u32,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String> {
        c.apply_table_routes(id, changes)
    }
}

impl Mirrored for V6 {
    fn table(k: &mut Kernel) -> &mut Table<Self> {
        &mut k.v6
    }
    fn side(s: &mut Sides) -> &mut Side<Self> {
        &mut s.v6
    }
    fn touched(p: Ipv6Prefix) -> Touched {
        Touched::Route6(p)
    }
    fn live_main(c: &Control) -> Arc<RoutesOf<Self>> {
        c.routes6()
    }
    fn live_table(c: &Control, id: u32) -> Arc<RoutesOf<Self>> {
        c.table_routes6(id)
    }
    fn publish_main(
        c: &Control,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String> {
        c.apply_routes6(changes)
    }
    fn publish_table(
        c: &Control,
        id: u32,
        changes: &[RouteChangeOf<Self>],
    ) -> Result<(usize, usize), String> {
        c.apply_table_routes6(id, changes)
    }
}

impl Kernel {
    fn iface(&self, index: u32) -> Option<u16> {
        self.links.get(&index).and_then(|l| l.iface)
    }

    /// Takes in one message (`flags`: its netlink header's).
    fn apply(
        &mut self,
        msg: &RouteNetlinkMessage,
        flags: u16,
        table: u32,
        names: &dyn Fn(&str) -> Option<u16>,
        follow_ifaces: bool,
        stats: &mut MirrorStats,
    ) -> Touched {
        match msg {
            RouteNetlinkMessage::NewAddress(m) if follow_ifaces => match convert::address_of(m) {
                Ok((index, a)) => {
                    let Some(i) = self.iface(index) else {
                        return Touched::Nothing;
                    };
                    let v = self.addrs.entry(index).or_default();
                    if v.contains(&a) {
                        return Touched::Nothing;
                    }
                    v.push(a);
                    Touched::Iface(i)
                }
                Err(Skip::OtherFamily) => match convert::address6_of(m) {
                    Ok((index, a)) => {
                        let Some(i) = self.iface(index) else {
                            return Touched::Nothing;
                        };
                        let v = self.addrs6.entry(index).or_default();
                        if v.contains(&a) {
                            return Touched::Nothing;
                        }
                        v.push(a);
                        Touched::Iface(i)
                    }
                    // The kernel's own link-local addresses, or another family's.
                    Err(Skip::LinkLocal | Skip::OtherFamily) => Touched::Nothing,
                    Err(s) => {
                        stats.skip(s);
                        Touched::Nothing
                    }
                },
                Err(s) => {
                    stats.skip(s);
                    Touched::Nothing
                }
            },
            RouteNetlinkMessage::NewRoute(m) | RouteNetlinkMessage::DelRoute(m) => {
                let deleted = matches!(msg, RouteNetlinkMessage::DelRoute(_));
                let append = flags & NLM_F_APPEND != 0;
                match m.header.address_family {
                    AddressFamily::Inet6 => self.route_msg::<V6>(m, table, deleted, append, stats),
                    _ => self.route_msg::<V4>(m, table, deleted, append, stats),
                }
            }
            RouteNetlinkMessage::NewNeighbour(m) | RouteNetlinkMessage::DelNeighbour(m) => {
                let deleted = matches!(msg, RouteNetlinkMessage::DelNeighbour(_));
                match convert::neighbour_of(m, deleted, |i| self.iface(i)) {
                    Ok(NeighChange::Set(i, ip, mac)) => {
                        if self.neighbours.insert((i, ip), mac) == Some(mac) {
                            return Touched::Nothing;
                        }
                        Touched::Neighbour((i, ip))
                    }
                    Ok(NeighChange::Delete(i, ip)) => match self.neighbours.remove(&(i, ip)) {
                        Some(_) => Touched::Neighbour((i, ip)),
                        None => Touched::Nothing,
                    },
                    Err(s) => {
                        if s != Skip::OtherFamily {
                            stats.skip(s);
                        }
                        Touched::Nothing
                    }
                }
            }
            RouteNetlinkMessage::NewLink(m) => {
                let info = convert::link_of(m);
                let prev = self.links.get(&info.index).cloned();
                // A message without a name is partial: what it lacks is as it was.
                let whole = info.name.is_some();
                let Some(name) = info.name.or_else(|| prev.as_ref().map(|p| p.name.clone())) else {
                    stats.skip(Skip::Malformed);
                    return Touched::Nothing;
                };
                let link = Link {
                    iface: names(&name),
                    name,
                    up: info.up,
                    mtu: info.mtu.or_else(|| prev.as_ref().and_then(|p| p.mtu)),
                    controller: if whole {
                        info.controller
                    } else {
                        prev.as_ref().and_then(|p| p.controller)
                    },
                    vrf_table: if whole {
                        info.vrf_table
                    } else {
                        prev.as_ref().and_then(|p| p.vrf_table)
                    },
                };
                self.links.insert(info.index, link.clone());
                match prev {
                    // The kernel flushes a link's routes when it goes down and marks
                    // its multipath next hops dead, revives those when it comes up, and
                    // renaming changes what its routes mean here: none of it is
                    // notified route by route.
                    Some(p) if p.iface != link.iface => Touched::Resync("link renamed"),
                    Some(p) if p.up != link.up && link.iface.is_some() => {
                        Touched::Resync(if link.up { "link up" } else { "link down" })
                    }
                    _ => match link.iface {
                        Some(i) if follow_ifaces => Touched::Iface(i),
                        _ => Touched::Nothing,
                    },
                }
            }
            RouteNetlinkMessage::DelLink(m) => match self.links.remove(&m.header.index) {
                Some(l) if l.iface.is_some() => Touched::Resync("link deleted"),
                _ => Touched::Nothing,
            },
            RouteNetlinkMessage::DelAddress(m @ AddressMessage { header, .. })
                if header.family == AddressFamily::Inet && self.iface(header.index).is_some() =>
            {
                if let Ok((index, a)) = convert::address_of(m)
                    && let Some(v) = self.addrs.get_mut(&index)
                {
                    v.retain(|x| *x != a);
                }
                // Routes through gateways of the address's subnet go with it, silently.
                Touched::Resync("address deleted")
            }
            // An IPv6 address's prefix route goes with a notification, and routes via
            // gateways on it stay: only the interface's addresses change.
            RouteNetlinkMessage::DelAddress(m) if follow_ifaces => match convert::address6_of(m) {
                Ok((index, a)) => {
                    let Some(i) = self.iface(index) else {
                        return Touched::Nothing;
                    };
                    match self.addrs6.get_mut(&index) {
                        Some(v) if v.contains(&a) => {
                            v.retain(|x| *x != a);
                            Touched::Iface(i)
                        }
                        _ => Touched::Nothing,
                    }
                }
                Err(_) => Touched::Nothing,
            },
            _ => Touched::Nothing,
        }
    }

    /// Takes in a route message of family `F`.
    fn route_msg<F: Mirrored>(
        &mut self,
        m: &RouteMessage,
        table: u32,
        deleted: bool,
        append: bool,
        stats: &mut MirrorStats,
    ) -> Touched {
        let k = match convert::route_of_family::<F>(m, table, |i| self.iface(i)) {
            Ok(k) => k,
            Err(s) => {
                if !deleted && !matches!(s, Skip::OtherTable | Skip::OtherFamily) {
                    stats.skip(s);
                }
                return Touched::Nothing;
            }
        };
        self.route(k, deleted, append, stats)
    }

    fn route<F: Mirrored>(
        &mut self,
        k: KernelRouteOf<F>,
        deleted: bool,
        append: bool,
        stats: &mut MirrorStats,
    ) -> Touched {
        let t = F::table(self);
        let slot = t.routes.entry(k.prefix).or_default();
        if deleted {
            if F::SIBLINGS && slot.cands.get(k.metric).is_some_and(|c| *c != k.route) {
                // One next hop of several went; the siblings left are in a dump.
                return Touched::Resync("IPv6 next hop deleted");
            }
            slot.cands.remove(k.metric);
            if t.aliases.remove(&k.prefix) {
                return Touched::Resync("aliased route deleted");
            }
        } else if append && slot.cands.has(k.metric) && !(F::SIBLINGS && k.hops > 1) {
            stats.skip(Skip::AppendedAlias);
            t.aliases.insert(k.prefix);
            return Touched::Nothing;
        } else {
            if let Err(s) = &k.route {
                stats.skip(*s);
            }
            if let Some(s) = k.partial {
                stats.skip(s);
            }
            slot.cands.set(k.metric, k.route);
        }
        F::touched(k.prefix)
    }
}

/// Route changes planned for netbatch's table of family `F`, in the order to apply them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan<F: Family> {
    pub(crate) changes: Vec<RouteChangeOf<F>>,
    /// For each, whether netbatch had a route for the prefix before (a replace, or a
    /// delete, rather than an add).
    pub(crate) existed: Vec<bool>,
}

impl<F: Family> Default for Plan<F> {
    fn default() -> Self {
        Self {
            changes: Vec::new(),
            existed: Vec::new(),
        }
    }
}

impl<F: Family> Plan<F> {
    fn push(&mut self, c: RouteChangeOf<F>, existed: bool) {
        self.changes.push(c);
        self.existed.push(existed);
    }
}

/// A netbatch interface's state in the kernel, to follow (host interface pairs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IfaceChange {
    /// The netbatch interface.
    pub(crate) iface: u16,
    /// Its kernel interface's IPv4 addresses.
    pub(crate) addrs: Vec<IfAddr>,
    /// Its kernel interface's IPv6 addresses, but link-local ones.
    pub(crate) addrs6: Vec<If6Addr>,
    /// Its kernel interface's MTU, when known.
    pub(crate) mtu: Option<u16>,
}

/// The netbatch interface of a kernel interface's name.
pub(crate) type Names = Box<dyn Fn(&str) -> Option<u16> + Send>;

/// The mirror's state.
pub(crate) struct State {
    table: u32,
    names: Names,
    kernel: Kernel,
    sides: Sides,
    /// Neighbours the mirror set in netbatch.
    neighbours: HashMap<(u16, IpAddr), MacAddr>,
    neigh_dirty: HashSet<(u16, IpAddr)>,
    resync: Option<ResyncWhy>,
    /// A fresh view being filled by a dump.
    fresh: Option<Kernel>,
    /// Interfaces' addresses and MTUs are followed (host interface pairs).
    follow_ifaces: bool,
    iface_dirty: HashSet<u16>,
    /// A link was notified, deleted or dumped since the last [`State::take_links_seen`]:
    /// the VRF view may have changed.
    links_seen: bool,
    pub(crate) stats: MirrorStats,
}

impl State {
    /// Mirrors kernel table `table`; `names` gives the netbatch interface of a kernel
    /// interface's name.
    pub(crate) fn new(table: u32, names: Names, follow_ifaces: bool) -> Self {
        Self {
            table,
            names,
            follow_ifaces,
            iface_dirty: HashSet::new(),
            links_seen: false,
            kernel: Kernel::default(),
            sides: Sides::default(),
            neighbours: HashMap::new(),
            neigh_dirty: HashSet::new(),
            resync: None,
            fresh: None,
            stats: MirrorStats::default(),
        }
    }

    /// Takes in a notification (`flags`: its netlink header's).
    pub(crate) fn notified(&mut self, msg: &RouteNetlinkMessage, flags: u16) {
        self.stats.notifications += 1;
        self.links_seen |= matches!(
            msg,
            RouteNetlinkMessage::NewLink(_) | RouteNetlinkMessage::DelLink(_)
        );
        let t = self.kernel.apply(
            msg,
            flags,
            self.table,
            &*self.names,
            self.follow_ifaces,
            &mut self.stats,
        );
        match t {
            Touched::Nothing => {}
            Touched::Route(p) => self.mark::<V4>(p),
            Touched::Route6(p) => self.mark::<V6>(p),
            Touched::Neighbour(k) => {
                self.neigh_dirty.insert(k);
            }
            Touched::Iface(i) => {
                self.iface_dirty.insert(i);
            }
            Touched::Resync(why) => self.want_resync(why),
        }
    }

    /// Marks prefix `p` of family `F` to be compared with netbatch's table.
    fn mark<F: Mirrored>(&mut self, p: F::Prefix) {
        if let Some(s) = F::table(&mut self.kernel).routes.get_mut(&p)
            && !s.dirty
        {
            s.dirty = true;
            F::side(&mut self.sides).dirty.push(p);
        }
    }

    /// Asks for a full resync (after a lost notification, or what the kernel does
    /// without notifying).
    pub(crate) fn want_resync(&mut self, why: ResyncWhy) {
        self.resync.get_or_insert(why);
    }

    /// Whether a resync was asked for, and why (the request is taken).
    pub(crate) fn take_resync(&mut self) -> Option<ResyncWhy> {
        self.resync.take()
    }

    /// Prefixes, neighbours and interfaces waiting to be compared with netbatch's.
    pub(crate) fn pending(&self) -> usize {
        self.sides.v4.dirty.len()
            + self.sides.v6.dirty.len()
            + self.neigh_dirty.len()
            + self.iface_dirty.len()
    }

    /// Starts a resync: the dump's messages go to [`Self::dumped`].
    pub(crate) fn begin_resync(&mut self) {
        self.fresh = Some(Kernel::default());
    }

    /// Takes in one message of a dump.
    pub(crate) fn dumped(&mut self, msg: &RouteNetlinkMessage, flags: u16) {
        let Some(fresh) = self.fresh.as_mut() else {
            return;
        };
        // What a dumped message asks (a resync) is what is being done.
        let _ = fresh.apply(
            msg,
            flags,
            self.table,
            &*self.names,
            self.follow_ifaces,
            &mut self.stats,
        );
    }

    /// Ends a resync: the dumped view replaces the kernel view, ownership carries over,
    /// and every prefix and neighbour either knew is compared with netbatch's anew.
    pub(crate) fn end_resync(&mut self) {
        let Some(mut fresh) = self.fresh.take() else {
            return;
        };
        carry::<V4>(&mut self.kernel, &mut fresh, &mut self.sides);
        carry::<V6>(&mut self.kernel, &mut fresh, &mut self.sides);
        self.neigh_dirty.clear();
        self.neigh_dirty.extend(fresh.neighbours.keys().copied());
        self.neigh_dirty.extend(self.neighbours.keys().copied());
        if self.follow_ifaces {
            self.iface_dirty
                .extend(fresh.links.values().filter_map(|l| l.iface));
        }
        self.kernel = fresh;
        self.links_seen = true;
    }

    /// Whether links changed since the last call (which takes the mark).
    pub(crate) fn take_links_seen(&mut self) -> bool {
        core::mem::take(&mut self.links_seen)
    }

    /// netbatch's VRFs as the kernel's links have them: each VRF device that controls
    /// the kernel interface of a netbatch interface (found by name) is a VRF of the
    /// device's name and table, with that interface in it. A VRF device on a table
    /// netbatch cannot give a VRF (0, `default`, `main`, `local`), named `main`, or on
    /// the table of another VRF device with members, is refused with its members (they
    /// stay in `main`): netbatch would route them by another table than the kernel
    /// does. A VRF device without a netbatch member is no VRF of netbatch's (its table's
    /// routes are still mirrored as a numbered table's when listed in `tables`).
    pub(crate) fn vrf_view(&self) -> VrfView {
        use netbatch_stack::route::rule::{TABLE_DEFAULT, TABLE_LOCAL};
        let links = &self.kernel.links;
        let mut found: Vec<(u16, &str, u32)> = links
            .values()
            .filter_map(|l| {
                let dev = links.get(&l.controller?)?;
                Some((l.iface?, dev.name.as_str(), dev.vrf_table?))
            })
            .collect();
        found.sort_unstable();
        let mut view = VrfView::default();
        let mut devices: Vec<(&str, u32)> = found.iter().map(|&(_, n, t)| (n, t)).collect();
        devices.sort_unstable();
        devices.dedup();
        for &(name, table) in &devices {
            let shared = devices.iter().any(|&(n, t)| t == table && n != name);
            let why = if matches!(table, 0 | TABLE_DEFAULT | TABLE_MAIN | TABLE_LOCAL)
                || name == "main"
            {
                Some(Skip::VrfTable)
            } else if shared {
                Some(Skip::VrfShared)
            } else {
                None
            };
            match why {
                Some(s) => view.refused.push((name.to_string(), s)),
                None => view.vrfs.push(crate::config::VrfConfig {
                    name: name.to_string(),
                    table,
                }),
            }
        }
        view.members = found
            .iter()
            .filter(|(_, n, _)| view.vrfs.iter().any(|v| v.name == *n))
            .map(|&(i, n, _)| (i, n.to_string()))
            .collect();
        view
    }

    /// For each netbatch interface whose kernel interface changed since the last call:
    /// its IPv4 and IPv6 addresses and MTU there (with host interface pairs only).
    pub(crate) fn iface_changes(&mut self) -> Vec<IfaceChange> {
        let mut out = Vec::new();
        let mut dirty: Vec<u16> = self.iface_dirty.drain().collect();
        dirty.sort_unstable();
        for i in dirty {
            let mut c = IfaceChange {
                iface: i,
                ..IfaceChange::default()
            };
            for (index, l) in &self.kernel.links {
                if l.iface != Some(i) {
                    continue;
                }
                c.addrs
                    .extend(self.kernel.addrs.get(index).into_iter().flatten().copied());
                c.addrs6
                    .extend(self.kernel.addrs6.get(index).into_iter().flatten().copied());
                c.mtu = l.mtu.and_then(|m| u16::try_from(m).ok()).or(c.mtu);
            }
            out.push(c);
        }
        out
    }

    /// The route changes that make `table` (netbatch's table of family `F`) agree with
    /// the kernel for the prefixes of the family touched since the last call.
    pub(crate) fn route_changes<F: Mirrored>(&mut self, table: &RoutesOf<F>) -> Plan<F> {
        let mut out = Plan::default();
        let kernel = F::table(&mut self.kernel);
        let side = F::side(&mut self.sides);
        for p in core::mem::take(&mut side.dirty) {
            let Some(s) = kernel.routes.get_mut(&p) else {
                continue;
            };
            s.dirty = false;
            let want = s.cands.best().and_then(|c| c.as_ref().ok());
            let have = table.get(&p);
            match (want, have) {
                (Some(w), Some(h)) if w == h => {
                    // Already there (the configuration's, or replayed): adopted as is.
                    if !s.owned {
                        s.owned = true;
                        side.owned += 1;
                    }
                }
                (Some(w), h) => out.push(RouteChangeOf::Replace(w.clone()), h.is_some()),
                (None, Some(_)) if s.owned => out.push(RouteChangeOf::Delete(p), true),
                (None, None) if s.owned => {
                    // Removed from netbatch by someone else already.
                    s.owned = false;
                    side.owned -= 1;
                }
                (None, _) => {}
            }
            if s.cands.is_empty() && !s.owned {
                kernel.routes.remove(&p);
            }
        }
        out
    }

    /// Records that `changes` were applied to netbatch's table of family `F` (counted,
    /// owned); `existed` as in [`Plan`].
    pub(crate) fn routes_applied<F: Mirrored>(
        &mut self,
        changes: &[RouteChangeOf<F>],
        existed: &[bool],
    ) {
        let kernel = F::table(&mut self.kernel);
        let side = F::side(&mut self.sides);
        for (c, &existed) in changes.iter().zip(existed) {
            match c {
                RouteChangeOf::Replace(r) => {
                    if existed {
                        self.stats.routes_replaced += 1;
                    } else {
                        self.stats.routes_added += 1;
                    }
                    if let Some(s) = kernel.routes.get_mut(&r.prefix)
                        && !s.owned
                    {
                        s.owned = true;
                        side.owned += 1;
                    }
                }
                RouteChangeOf::Delete(p) => {
                    self.stats.routes_deleted += 1;
                    if let Some(s) = kernel.routes.get_mut(p) {
                        if s.owned {
                            s.owned = false;
                            side.owned -= 1;
                        }
                        if s.cands.is_empty() {
                            kernel.routes.remove(p);
                        }
                    }
                }
            }
        }
    }

    /// The neighbour changes that make netbatch's static neighbours agree with the
    /// kernel for those touched since the last call.
    pub(crate) fn neighbour_changes(&mut self) -> Vec<NeighChange> {
        let mut out = Vec::new();
        for k in core::mem::take(&mut self.neigh_dirty) {
            match (self.kernel.neighbours.get(&k), self.neighbours.get(&k)) {
                (Some(w), Some(h)) if w == h => {}
                (Some(w), _) => out.push(NeighChange::Set(k.0, k.1, *w)),
                (None, Some(_)) => out.push(NeighChange::Delete(k.0, k.1)),
                (None, None) => {}
            }
        }
        out
    }

    /// Records that neighbour change `c` was applied.
    pub(crate) fn neighbour_applied(&mut self, c: NeighChange) {
        match c {
            NeighChange::Set(i, ip, mac) => {
                self.stats.neighbours_set += 1;
                self.neighbours.insert((i, ip), mac);
            }
            NeighChange::Delete(i, ip) => {
                self.stats.neighbours_deleted += 1;
                self.neighbours.remove(&(i, ip));
            }
        }
    }

    /// IPv4 routes, IPv6 routes and neighbours of netbatch's that are the mirror's now.
    pub(crate) fn owned(&self) -> (usize, usize, usize) {
        (
            self.sides.v4.owned,
            self.sides.v6.owned,
            self.neighbours.len(),
        )
    }
}

/// Carries family `F`'s ownership from the view `old` to the dumped view `fresh`, and
/// marks every prefix of `fresh` to be compared.
fn carry<F: Mirrored>(old: &mut Kernel, fresh: &mut Kernel, sides: &mut Sides) {
    let fresh_t = F::table(fresh);
    for (p, s) in F::table(old).routes.drain() {
        if s.owned {
            fresh_t.routes.entry(p).or_default().owned = true;
        }
    }
    let side = F::side(sides);
    side.dirty.clear();
    for (p, s) in fresh_t.routes.iter_mut() {
        s.dirty = true;
        side.dirty.push(*p);
    }
}

#[cfg(test)]
mod tests;
