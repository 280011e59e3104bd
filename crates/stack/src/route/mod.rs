//! Routes: the control-plane table (what the configuration and route files say) and the
//! data-plane view the stages use (an LPM table whose values index a dense array of
//! [`Hop`]s).
//!
//! Route kinds follow `ip route`: unicast (connected when it has no gateway), local (our
//! own addresses, /32), broadcast (directed subnet broadcasts and 255.255.255.255),
//! blackhole, unreachable, prohibit.
//!
//! The table also keeps the set of our own addresses (its local /32 routes), so a received
//! packet claiming one of them as its source is found without a second lookup: Linux's
//! `fib_validate_source` refuses those as martians (`accept_local` is off by default).

use core::fmt;
use core::net::Ipv4Addr;

use crate::fib::{FibError, Table};
use crate::prefix::Ipv4Prefix;

netbatch_engine::reasons! {
    /// What routing refuses, for every address family.
    pub mod reason {
        NO_ROUTE = "no_route": "no route to the destination",
        BLACKHOLE = "route_blackhole": "route is a blackhole",
        UNREACHABLE = "route_unreachable": "route is unreachable",
        PROHIBIT = "route_prohibit": "route is administratively prohibited",
        FORWARDING_DISABLED = "forwarding_disabled": "not for us and forwarding is off",
        FORWARD_L2_BROADCAST = "forward_l2_broadcast": "unicast IP in a link-layer broadcast or multicast frame is not forwarded",
        LOCAL_SOURCE = "local_source": "received packet claims one of our addresses as its source (martian)",
    }
}

pub mod file;

/// What a route does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// Deliver locally: the destination is one of our addresses.
    Local,
    /// Deliver locally as broadcast.
    Broadcast,
    /// Forward out of `out_if`, to `gateway` or (when none) straight to the destination.
    Unicast,
    /// Discard silently.
    Blackhole,
    /// Discard with ICMP host unreachable.
    Unreachable,
    /// Discard with ICMP administratively prohibited.
    Prohibit,
}

/// A route as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Ipv4Prefix,
    /// Kind.
    pub kind: RouteKind,
    /// Output interface (unicast, local and broadcast routes).
    pub out_if: Option<u16>,
    /// Next-hop router (unicast routes via a gateway).
    pub gateway: Option<Ipv4Addr>,
}

/// The fast-path form of a route: what the routing stage needs, 8 bytes. Hops are kept
/// once each in a dense array; a hop's index there is the adjacency routing writes in
/// `Meta::adj` for the output stages (VPP's adjacency: interface and next hop). Indices
/// never change for the life of a [`Routes`] value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hop {
    /// [`RouteKind`] as a byte.
    pub kind: RouteKind,
    /// Output interface (`u16::MAX` if none).
    pub out_if: u16,
    /// Gateway address bits, or 0 for "the destination itself".
    pub gateway: u32,
}

/// Set in an adjacency whose next hop is the packet's own destination (a connected
/// route, no gateway): the output stages then key the neighbour by the destination.
pub const ADJ_ON_LINK: u32 = 1 << 31;

/// Why a route was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// The LPM table refused it (table full).
    Fib(String),
    /// More distinct next hops than the table can index.
    TooManyHops,
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fib(e) => write!(f, "forwarding table: {e}"),
            Self::TooManyHops => f.write_str("more than 16 million distinct next hops"),
        }
    }
}

impl std::error::Error for RouteError {}

impl From<FibError> for RouteError {
    fn from(e: FibError) -> Self {
        Self::Fib(e.to_string())
    }
}

/// Routes plus their LPM index. Shared read-only by the workers; a change is made on a
/// copy that replaces the shared one (the control plane's), so adjacency indices (into
/// `hops`, which only grows) stay valid for packets that carry one meanwhile.
#[derive(Clone)]
pub struct Routes {
    fib: Table,
    hops: Vec<Hop>,
    hop_index: hashbrown::HashMap<Hop, u32, foldhash::fast::RandomState>,
    routes: hashbrown::HashMap<Ipv4Prefix, Route, foldhash::fast::RandomState>,
    local: LocalAddrs,
}

/// Our own addresses (the local /32 routes), for the source check of every received
/// packet: a 64-bit filter answers "not ours" for most sources in a few instructions, a
/// short list answers exactly for the rest.
#[derive(Debug, Clone, Default)]
pub struct LocalAddrs {
    filter: u64,
    addrs: Vec<u32>,
}

impl LocalAddrs {
    /// The position of address bits `a`'s bit in the filter.
    #[inline(always)]
    pub fn bit_index(a: u32) -> u32 {
        a.wrapping_mul(0x9e37_79b1) >> 26
    }

    /// The filter bit of address bits `a`.
    #[inline(always)]
    fn bit(a: u32) -> u64 {
        1 << Self::bit_index(a)
    }

    /// The filter: a clear bit at [`Self::bit_index`] means "not ours" (a stage keeps it
    /// for its list, and asks [`Self::listed`] only when the bit is set).
    #[inline(always)]
    pub fn filter(&self) -> u64 {
        self.filter
    }

    /// Whether address bits `a` are ours.
    #[inline(always)]
    pub fn contains(&self, a: u32) -> bool {
        self.filter & Self::bit(a) != 0 && self.listed(a)
    }

    /// Whether address bits `a` are in the list (the exact answer behind the filter).
    #[inline(always)]
    pub fn listed(&self, a: u32) -> bool {
        self.addrs.contains(&a)
    }

    fn set(&mut self, a: u32, present: bool) {
        self.addrs.retain(|&x| x != a);
        if present {
            self.addrs.push(a);
        }
        self.filter = self.addrs.iter().fold(0, |f, &x| f | Self::bit(x));
    }

    /// Follows a change of the route for `prefix` (now `r`, or none).
    fn follow(&mut self, prefix: Ipv4Prefix, r: Option<&Route>) {
        if prefix.prefix_len() == 32 {
            self.set(prefix.bits(), r.is_some_and(|r| r.kind == RouteKind::Local));
        }
    }
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("routes", &self.routes.len())
            .field("hops", &self.hops.len())
            .finish()
    }
}

impl Default for Routes {
    fn default() -> Self {
        Self::new()
    }
}

impl Routes {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            fib: Table::new(),
            hops: Vec::new(),
            hop_index: hashbrown::HashMap::default(),
            routes: hashbrown::HashMap::default(),
            local: LocalAddrs::default(),
        }
    }

    fn hop_of(&mut self, r: &Route) -> Result<u32, RouteError> {
        let hop = Hop {
            kind: r.kind,
            out_if: r.out_if.unwrap_or(u16::MAX),
            gateway: r.gateway.map_or(0, u32::from),
        };
        if let Some(&i) = self.hop_index.get(&hop) {
            return Ok(i);
        }
        let i = u32::try_from(self.hops.len()).map_err(|_| RouteError::TooManyHops)?;
        // Below the adjacency's flag bit, and within the FIB's 24-bit values.
        if i >= (1 << 24) - 1 {
            return Err(RouteError::TooManyHops);
        }
        self.hops.push(hop);
        self.hop_index.insert(hop, i);
        Ok(i)
    }

    /// Adds or replaces the route for `r.prefix`.
    pub fn insert(&mut self, r: Route) -> Result<(), RouteError> {
        let h = self.hop_of(&r)?;
        self.fib.insert(r.prefix.bits(), r.prefix.prefix_len(), h)?;
        self.local.follow(r.prefix, Some(&r));
        self.routes.insert(r.prefix, r);
        Ok(())
    }

    /// Replaces every route, rebuilding the LPM table in bulk (fast for large tables).
    pub fn load(&mut self, routes: impl IntoIterator<Item = Route>) -> Result<(), RouteError> {
        self.routes.clear();
        for r in routes {
            // A later line for the same prefix replaces the earlier one, as `ip route replace`.
            self.routes.insert(r.prefix, r);
        }
        let all: Vec<Route> = self.routes.values().copied().collect();
        let mut entries = Vec::with_capacity(all.len());
        for r in &all {
            entries.push((r.prefix.bits(), r.prefix.prefix_len(), self.hop_of(r)?));
        }
        self.fib.bulk_load(entries)?;
        self.local = LocalAddrs::default();
        for r in &all {
            self.local.follow(r.prefix, Some(r));
        }
        Ok(())
    }

    /// Removes the route for exactly `p`.
    pub fn remove(&mut self, p: Ipv4Prefix) -> Option<Route> {
        let r = self.routes.remove(&p)?;
        self.fib.remove(p.bits(), p.prefix_len());
        self.local.follow(p, None);
        Some(r)
    }

    /// The route configured for exactly `p`.
    pub fn get(&self, p: &Ipv4Prefix) -> Option<&Route> {
        self.routes.get(p)
    }

    /// Whether `a` is one of our own addresses (has a local /32 route).
    #[inline(always)]
    pub fn is_local_addr(&self, a: u32) -> bool {
        self.local.contains(a)
    }

    /// Our own addresses (the local /32 routes).
    #[inline(always)]
    pub fn local_addrs(&self) -> &LocalAddrs {
        &self.local
    }

    /// Longest-prefix match: the hop for destination bits `dst`.
    #[inline(always)]
    pub fn lookup(&self, dst: u32) -> Option<Hop> {
        self.lookup_adj(dst).map(|(_, h)| h)
    }

    /// Longest-prefix match: the adjacency (the hop's index, with [`ADJ_ON_LINK`] when
    /// it has no gateway) and the hop for destination `dst`.
    #[inline(always)]
    pub fn lookup_adj(&self, dst: u32) -> Option<(u32, Hop)> {
        let i = self.fib.lookup(dst)?;
        let h = *self.hops.get(i as usize)?;
        Some((if h.gateway == 0 { i | ADJ_ON_LINK } else { i }, h))
    }

    /// The hop of adjacency `adj` (from [`Routes::lookup_adj`]).
    #[inline(always)]
    pub fn hop(&self, adj: u32) -> Option<Hop> {
        self.hops.get((adj & !ADJ_ON_LINK) as usize).copied()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// All routes (unordered).
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.values()
    }

    /// Bytes used by the LPM table.
    pub fn fib_bytes(&self) -> usize {
        self.fib.memory_bytes()
    }
}
