//! The mirror's state, apart from sockets and workers: the kernel's table as its
//! messages described it, which routes and neighbours of netbatch's are the mirror's,
//! and the changes that make netbatch agree with the kernel.
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
//! - With host interface pairs (`follow_ifaces`), the IPv4 addresses and MTU of each
//!   kernel interface named as a netbatch interface are that interface's: a change marks
//!   the interface, and its whole kernel state is handed over ([`State::iface_changes`]);
//!   netbatch compares and changes only what differs.

use core::net::Ipv4Addr;

use hashbrown::{HashMap, HashSet};
use netbatch_stack::prefix::{IfAddr, Ipv4Prefix};
use netbatch_stack::route::{Route, Routes};
use netbatch_wire::ethernet::MacAddr;
use netlink_packet_core::NLM_F_APPEND;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::AddressMessage;

use super::MirrorStats;
use super::convert::{self, KernelRoute, NeighChange, Skip};
use crate::control::RouteChange;

/// What netbatch makes of one kernel route (a route, or why none).
type Cand = Result<Route, Skip>;

/// The kernel routes of one prefix, by metric (nearly always one).
#[derive(Debug, Clone, Default)]
enum Cands {
    #[default]
    None,
    One(u32, Cand),
    Many(Vec<(u32, Cand)>),
}

impl Cands {
    /// Whether a route with metric `m` is there.
    fn has(&self, m: u32) -> bool {
        match self {
            Self::None => false,
            Self::One(k, _) => *k == m,
            Self::Many(v) => v.iter().any(|(k, _)| *k == m),
        }
    }

    fn set(&mut self, m: u32, c: Cand) {
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
    fn best(&self) -> Option<&Cand> {
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
#[derive(Debug, Clone, Default)]
struct Slot {
    cands: Cands,
    owned: bool,
    dirty: bool,
}

/// A kernel interface.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    name: String,
    /// The netbatch interface of the same name.
    iface: Option<u16>,
    up: bool,
    mtu: Option<u32>,
}

/// Why a message asks for a full resync.
pub(crate) type ResyncWhy = &'static str;

/// What a message touched.
enum Touched {
    Nothing,
    Route(Ipv4Prefix),
    Neighbour((u16, Ipv4Addr)),
    /// A netbatch interface's addresses or MTU.
    Iface(u16),
    Resync(ResyncWhy),
}

/// The kernel's table, links and neighbours as its messages told them.
#[derive(Default)]
struct Kernel {
    links: HashMap<u32, Link>,
    routes: HashMap<Ipv4Prefix, Slot>,
    neighbours: HashMap<(u16, Ipv4Addr), MacAddr>,
    /// Prefixes with an appended route the kernel does not use (its deletion may
    /// uncover it).
    aliases: HashSet<Ipv4Prefix>,
    /// IPv4 addresses by kernel interface (followed with host interface pairs only).
    addrs: HashMap<u32, Vec<IfAddr>>,
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
                Err(Skip::NotIpv4) => Touched::Nothing,
                Err(s) => {
                    stats.skip(s);
                    Touched::Nothing
                }
            },
            RouteNetlinkMessage::NewRoute(m) | RouteNetlinkMessage::DelRoute(m) => {
                let deleted = matches!(msg, RouteNetlinkMessage::DelRoute(_));
                let k = match convert::route_of(m, table, |i| self.iface(i)) {
                    Ok(k) => k,
                    Err(s) => {
                        if !deleted && !matches!(s, Skip::OtherTable | Skip::NotIpv4) {
                            stats.skip(s);
                        }
                        return Touched::Nothing;
                    }
                };
                self.route(k, deleted, flags & NLM_F_APPEND != 0, stats)
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
                        if s != Skip::NotIpv4 {
                            stats.skip(s);
                        }
                        Touched::Nothing
                    }
                }
            }
            RouteNetlinkMessage::NewLink(m) => {
                let info = convert::link_of(m);
                let prev = self.links.get(&info.index).cloned();
                let Some(name) = info.name.or_else(|| prev.as_ref().map(|p| p.name.clone())) else {
                    stats.skip(Skip::Malformed);
                    return Touched::Nothing;
                };
                let link = Link {
                    iface: names(&name),
                    name,
                    up: info.up,
                    mtu: info.mtu.or_else(|| prev.as_ref().and_then(|p| p.mtu)),
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
                if header.family == netlink_packet_route::AddressFamily::Inet
                    && self.iface(header.index).is_some() =>
            {
                if let Ok((index, a)) = convert::address_of(m)
                    && let Some(v) = self.addrs.get_mut(&index)
                {
                    v.retain(|x| *x != a);
                }
                // Routes through gateways of the address's subnet go with it, silently.
                Touched::Resync("address deleted")
            }
            _ => Touched::Nothing,
        }
    }

    fn route(
        &mut self,
        k: KernelRoute,
        deleted: bool,
        append: bool,
        stats: &mut MirrorStats,
    ) -> Touched {
        let slot = self.routes.entry(k.prefix).or_default();
        if deleted {
            slot.cands.remove(k.metric);
            if self.aliases.remove(&k.prefix) {
                return Touched::Resync("aliased route deleted");
            }
        } else if append && slot.cands.has(k.metric) {
            stats.skip(Skip::AppendedAlias);
            self.aliases.insert(k.prefix);
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
        Touched::Route(k.prefix)
    }
}

/// Route changes planned for netbatch, in the order to apply them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) changes: Vec<RouteChange>,
    /// For each, whether netbatch had a route for the prefix before (a replace, or a
    /// delete, rather than an add).
    pub(crate) existed: Vec<bool>,
}

impl Plan {
    fn push(&mut self, c: RouteChange, existed: bool) {
        self.changes.push(c);
        self.existed.push(existed);
    }
}

/// The netbatch interface of a kernel interface's name.
pub(crate) type Names = Box<dyn Fn(&str) -> Option<u16> + Send>;

/// The mirror's state.
pub(crate) struct State {
    table: u32,
    names: Names,
    kernel: Kernel,
    dirty: Vec<Ipv4Prefix>,
    /// Neighbours the mirror set in netbatch.
    neighbours: HashMap<(u16, Ipv4Addr), MacAddr>,
    neigh_dirty: HashSet<(u16, Ipv4Addr)>,
    resync: Option<ResyncWhy>,
    /// How many prefixes are owned.
    owned: usize,
    /// A fresh view being filled by a dump.
    fresh: Option<Kernel>,
    /// Interfaces' addresses and MTUs are followed (host interface pairs).
    follow_ifaces: bool,
    iface_dirty: HashSet<u16>,
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
            kernel: Kernel::default(),
            dirty: Vec::new(),
            neighbours: HashMap::new(),
            neigh_dirty: HashSet::new(),
            resync: None,
            owned: 0,
            fresh: None,
            stats: MirrorStats::default(),
        }
    }

    /// Takes in a notification (`flags`: its netlink header's).
    pub(crate) fn notified(&mut self, msg: &RouteNetlinkMessage, flags: u16) {
        self.stats.notifications += 1;
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
            Touched::Route(p) => {
                if let Some(s) = self.kernel.routes.get_mut(&p)
                    && !s.dirty
                {
                    s.dirty = true;
                    self.dirty.push(p);
                }
            }
            Touched::Neighbour(k) => {
                self.neigh_dirty.insert(k);
            }
            Touched::Iface(i) => {
                self.iface_dirty.insert(i);
            }
            Touched::Resync(why) => self.want_resync(why),
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

    /// Prefixes waiting to be compared with netbatch's table.
    pub(crate) fn pending(&self) -> usize {
        self.dirty.len() + self.neigh_dirty.len() + self.iface_dirty.len()
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
        for (p, old) in self.kernel.routes.drain() {
            if old.owned {
                fresh.routes.entry(p).or_default().owned = true;
            }
        }
        self.dirty.clear();
        for (p, s) in fresh.routes.iter_mut() {
            s.dirty = true;
            self.dirty.push(*p);
        }
        self.neigh_dirty.clear();
        self.neigh_dirty.extend(fresh.neighbours.keys().copied());
        self.neigh_dirty.extend(self.neighbours.keys().copied());
        if self.follow_ifaces {
            self.iface_dirty
                .extend(fresh.links.values().filter_map(|l| l.iface));
        }
        self.kernel = fresh;
    }

    /// For each netbatch interface whose kernel interface changed since the last call:
    /// its IPv4 addresses and MTU there (with host interface pairs only).
    pub(crate) fn iface_changes(&mut self) -> Vec<(u16, Vec<IfAddr>, Option<u16>)> {
        let mut out = Vec::new();
        let mut dirty: Vec<u16> = self.iface_dirty.drain().collect();
        dirty.sort_unstable();
        for i in dirty {
            let mut addrs = Vec::new();
            let mut mtu = None;
            for (index, l) in &self.kernel.links {
                if l.iface != Some(i) {
                    continue;
                }
                addrs.extend(self.kernel.addrs.get(index).into_iter().flatten().copied());
                mtu = l.mtu.and_then(|m| u16::try_from(m).ok()).or(mtu);
            }
            out.push((i, addrs, mtu));
        }
        out
    }

    /// The route changes that make `table` (netbatch's) agree with the kernel for the
    /// prefixes touched since the last call.
    pub(crate) fn route_changes(&mut self, table: &Routes) -> Plan {
        let mut out = Plan::default();
        for p in core::mem::take(&mut self.dirty) {
            let Some(s) = self.kernel.routes.get_mut(&p) else {
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
                        self.owned += 1;
                    }
                }
                (Some(w), h) => out.push(RouteChange::Replace(w.clone()), h.is_some()),
                (None, Some(_)) if s.owned => out.push(RouteChange::Delete(p), true),
                (None, None) if s.owned => {
                    // Removed from netbatch by someone else already.
                    s.owned = false;
                    self.owned -= 1;
                }
                (None, _) => {}
            }
            if s.cands.is_empty() && !s.owned {
                self.kernel.routes.remove(&p);
            }
        }
        out
    }

    /// Records that `changes` were applied to netbatch's table (counted, owned);
    /// `existed` as in [`Plan`].
    pub(crate) fn routes_applied(&mut self, changes: &[RouteChange], existed: &[bool]) {
        for (c, &existed) in changes.iter().zip(existed) {
            match c {
                RouteChange::Replace(r) => {
                    if existed {
                        self.stats.routes_replaced += 1;
                    } else {
                        self.stats.routes_added += 1;
                    }
                    if let Some(s) = self.kernel.routes.get_mut(&r.prefix)
                        && !s.owned
                    {
                        s.owned = true;
                        self.owned += 1;
                    }
                }
                RouteChange::Delete(p) => {
                    self.stats.routes_deleted += 1;
                    if let Some(s) = self.kernel.routes.get_mut(p) {
                        if s.owned {
                            s.owned = false;
                            self.owned -= 1;
                        }
                        if s.cands.is_empty() {
                            self.kernel.routes.remove(p);
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

    /// Routes and neighbours of netbatch's that are the mirror's now.
    pub(crate) fn owned(&self) -> (usize, usize) {
        (self.owned, self.neighbours.len())
    }
}

#[cfg(test)]
mod tests;
