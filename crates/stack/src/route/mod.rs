//! Routes: the control-plane table (what the configuration and route files say) and the
//! data-plane view the stages use (an LPM table whose values index a dense array of
//! [`Hop`]s, or a multipath group of them).
//!
//! Route kinds follow `ip route`: unicast (connected when it has no gateway), local (our
//! own addresses, /32), broadcast (directed subnet broadcasts and 255.255.255.255),
//! blackhole, unreachable, prohibit, throw (for policy routing: [`rule`]).
//!
//! The table also keeps the set of our own addresses (its local /32 routes), so a received
//! packet claiming one of them as its source is found without a second lookup: Linux's
//! `fib_validate_source` refuses those as martians (`accept_local` is off by default).
//!
//! # Multipath (ECMP)
//!
//! A unicast route may have several next hops, each with a weight of 1 to 256 (`ip route
//! add PREFIX nexthop via A dev X weight 1 nexthop via B dev Y weight 2`). Its FIB value
//! is then a *group* (flagged by [`FIB_GROUP`], below which every hop index stays), whose
//! next hops are chosen by *hash-threshold* over the cumulative weights (RFC 2992, as
//! Linux's `fib_select_multipath`): the flow hash, spread by an odd multiplier
//! ([`SPREAD`], a bijection, so that the choice is not the one RPS makes from the same
//! hash's top bits), is read as a fraction `x` of 2³², and the next hop `i` with
//! `W₀ + … + Wᵢ₋₁ ≤ x·ΣW < W₀ + … + Wᵢ` is taken. A group stores that as a table of
//! ΣW/g slots (`g` the weights' greatest common divisor), next hop `i` repeated `Wᵢ/g`
//! times in the route's order, so the choice is one multiply and one load: slot
//! `⌊x·slots⌋`. Every hash value maps to one next hop and the shares are exactly the
//! weights' (to 2⁻³²); a flow keeps its next hop as long as the route does not change,
//! and a change of weights moves only the flows whose threshold range moved. With hash 0
//! (no flow) the first next hop is chosen.
//!
//! Resolution happens in routing ([`Routes::lookup_flow`]): what it writes in `Meta::adj`
//! is always a hop's adjacency, so the output stages never see a group. A single-path
//! lookup costs what it did without groups: a group's value lies beyond the hop array, so
//! the group test is the failure branch of that array's bounds check. A loop that looks
//! up plain hops only ([`Routes::lookup_hop`]: the route hint, a check of a route's kind)
//! has not even the (cold) call to a group's resolution in it, which would cost it
//! registers.
//!
//! # Invariants
//!
//! Hops and groups are only appended for the life of a [`Routes`] value (and its copies:
//! the control plane changes a copy and publishes it), so an adjacency a packet carries
//! (in a neighbour queue, say) stays valid. Hop indices are below [`MAX_HOPS`], group
//! indices below [`FIB_GROUP`]; a group has at least two slots and its slots are adjacencies of hops.

use core::fmt;

use crate::fib::FibError;

pub mod family;
pub use family::{Family, V4, V6};

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
        RULE_BLACKHOLE = "rule_blackhole": "a policy rule's action is blackhole",
        RULE_UNREACHABLE = "rule_unreachable": "a policy rule's action is unreachable",
        RULE_PROHIBIT = "rule_prohibit": "a policy rule's action is prohibit",
    }
}

pub mod file;
pub mod rule;

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
    /// Not in this table (`ip route add throw`): policy routing goes on with the next
    /// rule ([`rule`]); where no rule is left, as no route.
    Throw,
}

/// A route as configured.
///
/// A multipath route has its next hops in `multipath`; its `out_if` and `gateway` are
/// its first next hop's (what [`Route::multipath`] sets), so that code that knows only
/// single-path routes sees it through its first next hop, as Linux's `ip route del
/// PREFIX via A` matches a multipath route by its first next hop. Routing reads only
/// `multipath` when it is set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteOf<F: Family> {
    /// Destination prefix.
    pub prefix: F::Prefix,
    /// Kind.
    pub kind: RouteKind,
    /// Output interface (unicast, local and broadcast routes).
    pub out_if: Option<u16>,
    /// Next-hop router (unicast routes via a gateway).
    pub gateway: Option<F::Addr>,
    /// The next hops of a multipath (unicast) route; `None` for every other route. Boxed
    /// so that a single-path route stays one word larger than it was, not four.
    pub multipath: Option<Box<MultipathOf<F>>>,
}

/// An IPv4 route.
pub type Route = RouteOf<V4>;
/// An IPv6 route.
pub type Route6 = RouteOf<V6>;

impl<F: Family> RouteOf<F> {
    /// A single-path route (or one with no next hop: blackhole, unreachable, prohibit).
    pub fn new(
        prefix: F::Prefix,
        kind: RouteKind,
        out_if: Option<u16>,
        gateway: Option<F::Addr>,
    ) -> Self {
        Self {
            prefix,
            kind,
            out_if,
            gateway,
            multipath: None,
        }
    }

    /// A unicast route over the next hops `m` (its `out_if` and `gateway` the first's).
    pub fn multipath(prefix: F::Prefix, m: MultipathOf<F>) -> Self {
        let first = m.first();
        Self {
            prefix,
            kind: RouteKind::Unicast,
            out_if: Some(first.out_if),
            gateway: first.gateway,
            multipath: Some(Box::new(m)),
        }
    }

    /// The route's next hops: a multipath route's, the one of a route with an output
    /// interface (weight 1), none for the others.
    pub fn next_hops(&self) -> impl Iterator<Item = NextHopOf<F>> + '_ {
        let single = match (&self.multipath, self.out_if) {
            (None, Some(out_if)) => Some(NextHopOf {
                gateway: self.gateway,
                out_if,
                weight: 1,
            }),
            _ => None,
        };
        self.multipath
            .iter()
            .flat_map(|m| m.hops().iter().copied())
            .chain(single)
    }
}

/// One next hop of a multipath route (`nexthop via A dev X weight N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHopOf<F: Family> {
    /// Next-hop router, or `None` for "the destination itself" (`nexthop dev X`).
    pub gateway: Option<F::Addr>,
    /// Output interface.
    pub out_if: u16,
    /// Weight, 1 to [`MAX_WEIGHT`]: the next hop's share of the flows is its weight over
    /// the sum of the route's weights.
    pub weight: u16,
}

/// A next hop of an IPv4 multipath route.
pub type NextHop = NextHopOf<V4>;
/// A next hop of an IPv6 multipath route.
pub type NextHop6 = NextHopOf<V6>;

/// The largest weight of a next hop (Linux keeps `weight - 1` in a byte).
pub const MAX_WEIGHT: u16 = 256;

/// The most next hops a multipath route may have.
pub const MAX_NEXT_HOPS: usize = 256;

/// The next hops of a multipath route: two to [`MAX_NEXT_HOPS`], each of weight 1 to
/// [`MAX_WEIGHT`], in the order given (which is the order of their threshold ranges).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipathOf<F: Family> {
    hops: Box<[NextHopOf<F>]>,
}

/// The next hops of an IPv4 multipath route.
pub type Multipath = MultipathOf<V4>;
/// The next hops of an IPv6 multipath route.
pub type Multipath6 = MultipathOf<V6>;

/// Why next hops do not make a multipath route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultipathError {
    /// Fewer than two next hops (one is a single-path route).
    TooFew,
    /// More than [`MAX_NEXT_HOPS`].
    TooMany(usize),
    /// A weight outside 1 to [`MAX_WEIGHT`], of the next hop at this index.
    Weight(usize, u16),
}

impl fmt::Display for MultipathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooFew => f.write_str("a multipath route needs at least two next hops"),
            Self::TooMany(n) => write!(f, "{n} next hops (at most {MAX_NEXT_HOPS})"),
            Self::Weight(i, w) => {
                write!(f, "next hop {} has weight {w} (1 to {MAX_WEIGHT})", i + 1)
            }
        }
    }
}

impl std::error::Error for MultipathError {}

impl<F: Family> MultipathOf<F> {
    /// Checks `hops` (count and weights).
    pub fn new(hops: Vec<NextHopOf<F>>) -> Result<Self, MultipathError> {
        if hops.len() < 2 {
            return Err(MultipathError::TooFew);
        }
        if hops.len() > MAX_NEXT_HOPS {
            return Err(MultipathError::TooMany(hops.len()));
        }
        if let Some((i, h)) = hops
            .iter()
            .enumerate()
            .find(|(_, h)| !(1..=MAX_WEIGHT).contains(&h.weight))
        {
            return Err(MultipathError::Weight(i, h.weight));
        }
        Ok(Self { hops: hops.into() })
    }

    /// The next hops, in order.
    pub fn hops(&self) -> &[NextHopOf<F>] {
        &self.hops
    }

    /// The first next hop.
    pub fn first(&self) -> NextHopOf<F> {
        // `new` made sure there are at least two.
        self.hops.first().copied().unwrap_or(NextHopOf {
            gateway: None,
            out_if: u16::MAX,
            weight: 1,
        })
    }
}

/// The fast-path form of a route: what the routing stage needs, 8 bytes. Hops are kept
/// once each in a dense array; a hop's index there is the adjacency routing writes in
/// `Meta::adj` for the output stages (VPP's adjacency: interface and next hop). Indices
/// never change for the life of a [`Routes`] value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HopOf<F: Family> {
    /// [`RouteKind`] as a byte.
    pub kind: RouteKind,
    /// Output interface (`u16::MAX` if none).
    pub out_if: u16,
    /// Gateway address bits, or 0 for "the destination itself".
    pub gateway: F::Bits,
}

/// An IPv4 hop.
pub type Hop = HopOf<V4>;
/// An IPv6 hop.
pub type Hop6 = HopOf<V6>;

/// Set in an adjacency whose next hop is the packet's own destination (a connected
/// route, no gateway): the output stages then key the neighbour by the destination.
pub const ADJ_ON_LINK: u32 = 1 << 31;

/// The bits of an adjacency that say which numbered table's hop it is (0: the main
/// table's, `Host::routes`; `s`: the table in the policy's slot `s`, a VRF's or a
/// numbered one, see [`rule::PolicyOf::hop`]). Eleven bits, so that 2,047 tables (a
/// thousand VRFs of both kinds of use, and numbered tables besides) each have a slot;
/// hop indices stay below [`MAX_HOPS`], under these bits, so a table's own
/// [`RoutesOf::hop`] finds nothing for an adjacency that has them (its index is then
/// beyond every hop), and one of another table is never taken for one of its own.
pub const ADJ_TABLE: u32 = 0x7ff << ADJ_TABLE_SHIFT;

/// The shift of [`ADJ_TABLE`].
pub const ADJ_TABLE_SHIFT: u32 = 20;

/// The most distinct hops a table may hold (their indices stay below [`ADJ_TABLE`]'s
/// bits): 1,048,576, far more than the next hops of a full Internet table.
pub const MAX_HOPS: u32 = 1 << ADJ_TABLE_SHIFT;

/// Set in a FIB value that indexes a multipath group (the rest of the value) rather than
/// a hop: the top bit of the FIB's 24-bit values. Hop and group indices stay below it.
pub const FIB_GROUP: u32 = 1 << 23;

/// The odd multiplier that spreads a flow hash before a group reads it as a fraction.
pub const SPREAD: u32 = 0x9e37_79b1;

/// The slot of `slots` that flow hash `hash` picks (see the module documentation).
#[inline(always)]
pub fn slot_of(hash: u32, slots: u32) -> u32 {
    ((u64::from(hash.wrapping_mul(SPREAD)) * u64::from(slots)) >> 32) as u32
}

/// Why a route was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// The LPM table refused it (table full).
    Fib(String),
    /// More distinct next hops than the table can index.
    TooManyHops,
    /// More distinct multipath groups (or group slots) than the table can index.
    TooManyGroups,
    /// Next hops on a route that is not unicast.
    MultipathKind(RouteKind),
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fib(e) => write!(f, "forwarding table: {e}"),
            Self::TooManyHops => write!(f, "more than {MAX_HOPS} distinct next hops"),
            Self::TooManyGroups => f.write_str("more than 8 million distinct multipath groups"),
            Self::MultipathKind(k) => write!(f, "a {k:?} route cannot have next hops"),
        }
    }
}

impl std::error::Error for RouteError {}

impl From<FibError> for RouteError {
    fn from(e: FibError) -> Self {
        Self::Fib(e.to_string())
    }
}

/// The hops and multipath groups of a [`Routes`], append-only, each kept once.
#[derive(Clone)]
struct Adjacencies<F: Family> {
    hops: Vec<HopOf<F>>,
    hop_index: hashbrown::HashMap<HopOf<F>, u32, foldhash::fast::RandomState>,
    /// Each group's slots: (first, count) in `slots`.
    groups: Vec<(u32, u32)>,
    /// The groups' slots, each an adjacency (a hop index, with [`ADJ_ON_LINK`] when the
    /// hop has no gateway): next hop `i` of a group `Wᵢ/g` times, in the route's order.
    slots: Vec<u32>,
    group_index: hashbrown::HashMap<Box<[u32]>, u32, foldhash::fast::RandomState>,
}

impl<F: Family> Default for Adjacencies<F> {
    fn default() -> Self {
        Self {
            hops: Vec::new(),
            hop_index: hashbrown::HashMap::default(),
            groups: Vec::new(),
            slots: Vec::new(),
            group_index: hashbrown::HashMap::default(),
        }
    }
}

/// Greatest common divisor.
fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<F: Family> Adjacencies<F> {
    /// The adjacency of `hop` (its index, with [`ADJ_ON_LINK`] when it has no gateway).
    #[inline(always)]
    fn adj(i: u32, hop: &HopOf<F>) -> u32 {
        if hop.gateway == F::Bits::default() {
            i | ADJ_ON_LINK
        } else {
            i
        }
    }

    /// The index of `hop`, added if new.
    fn hop(&mut self, hop: HopOf<F>) -> Result<u32, RouteError> {
        if let Some(&i) = self.hop_index.get(&hop) {
            return Ok(i);
        }
        let i = u32::try_from(self.hops.len()).map_err(|_| RouteError::TooManyHops)?;
        // Below the table tag (and so below the group flag, so that a group's value is
        // never a hop's index).
        if i >= MAX_HOPS {
            return Err(RouteError::TooManyHops);
        }
        self.hops.push(hop);
        self.hop_index.insert(hop, i);
        Ok(i)
    }

    /// The FIB value of route `r`: its hop's index, or its group's with [`FIB_GROUP`].
    fn value_of(&mut self, r: &RouteOf<F>) -> Result<u32, RouteError> {
        match &r.multipath {
            None => self.hop(HopOf {
                kind: r.kind,
                out_if: r.out_if.unwrap_or(u16::MAX),
                gateway: r.gateway.map_or(F::Bits::default(), F::bits),
            }),
            Some(_) if r.kind != RouteKind::Unicast => Err(RouteError::MultipathKind(r.kind)),
            Some(m) => self.group(m).map(|g| g | FIB_GROUP),
        }
    }

    /// The index of the group of next hops `m`, added if new.
    fn group(&mut self, m: &MultipathOf<F>) -> Result<u32, RouteError> {
        let g = m.hops().iter().fold(0, |g, h| gcd(g, u32::from(h.weight)));
        let mut slots = Vec::new();
        for h in m.hops() {
            let hop = HopOf {
                kind: RouteKind::Unicast,
                out_if: h.out_if,
                gateway: h.gateway.map_or(F::Bits::default(), F::bits),
            };
            let adj = Self::adj(self.hop(hop)?, &hop);
            let n = u32::from(h.weight) / g.max(1);
            slots.extend((0..n).map(|_| adj));
        }
        let slots: Box<[u32]> = slots.into();
        if let Some(&i) = self.group_index.get(&slots) {
            return Ok(i);
        }
        let i = u32::try_from(self.groups.len()).map_err(|_| RouteError::TooManyGroups)?;
        let start = u32::try_from(self.slots.len()).map_err(|_| RouteError::TooManyGroups)?;
        let len = slots.len() as u32;
        if i >= FIB_GROUP || start.checked_add(len).is_none() {
            return Err(RouteError::TooManyGroups);
        }
        self.slots.extend_from_slice(&slots);
        self.groups.push((start, len));
        self.group_index.insert(slots, i);
        Ok(i)
    }

    /// The adjacency and hop of FIB value `v` that is not a hop index: next hop of
    /// group `v & !FIB_GROUP` for flow hash `hash`.
    #[cold]
    #[inline(never)]
    fn pick(&self, v: u32, hash: u32) -> Option<(u32, HopOf<F>)> {
        let &(start, len) = self.groups.get((v & !FIB_GROUP) as usize)?;
        let adj = *self
            .slots
            .get(start as usize + slot_of(hash, len) as usize)?;
        let hop = *self.hops.get((adj & !ADJ_ON_LINK) as usize)?;
        Some((adj, hop))
    }
}

/// Routes plus their LPM index. Shared read-only by the workers; a change is made on a
/// copy that replaces the shared one (the control plane's), so adjacency indices (into
/// hops, which only grow) stay valid for packets that carry one meanwhile.
pub struct RoutesOf<F: Family> {
    fib: F::Fib,
    adj: Adjacencies<F>,
    routes: hashbrown::HashMap<F::Prefix, RouteOf<F>, foldhash::fast::RandomState>,
    local: LocalAddrs<F>,
}

/// The IPv4 routes.
pub type Routes = RoutesOf<V4>;
/// The IPv6 routes.
pub type Routes6 = RoutesOf<V6>;

impl RoutesOf<V6> {
    /// [`RoutesOf::lookup_hop`] for eight destinations into `found`, their FIB walks in
    /// lockstep ([`crate::fib6::Fib6::lookup8`]) so that their memory loads overlap.
    #[inline]
    pub fn lookup_hop8(&self, dst: &[u128; 8], found: &mut [Option<(u32, Hop6)>; 8]) {
        for (f, v) in found.iter_mut().zip(self.fib.lookup8(dst)) {
            *f = v.and_then(|i| {
                let h = *self.adj.hops.get(i as usize)?;
                Some((Adjacencies::adj(i, &h), h))
            });
        }
    }
}

impl<F: Family> Clone for RoutesOf<F> {
    fn clone(&self) -> Self {
        Self {
            fib: self.fib.clone(),
            adj: self.adj.clone(),
            routes: self.routes.clone(),
            local: self.local.clone(),
        }
    }
}

/// Our own addresses (the local /32 routes), for the source check of every received
/// packet: a 64-bit filter answers "not ours" for most sources in a few instructions, a
/// short list answers exactly for the rest.
#[derive(Debug, Clone)]
pub struct LocalAddrs<F: Family> {
    filter: u64,
    addrs: Vec<F::Bits>,
}

impl<F: Family> Default for LocalAddrs<F> {
    fn default() -> Self {
        Self {
            filter: 0,
            addrs: Vec::new(),
        }
    }
}

impl<F: Family> LocalAddrs<F> {
    /// The position of address bits `a`'s bit in the filter.
    #[inline(always)]
    pub fn bit_index(a: F::Bits) -> u32 {
        F::spread(a).wrapping_mul(0x9e37_79b1) >> 26
    }

    /// The filter bit of address bits `a`.
    #[inline(always)]
    fn bit(a: F::Bits) -> u64 {
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
    pub fn contains(&self, a: F::Bits) -> bool {
        self.filter & Self::bit(a) != 0 && self.listed(a)
    }

    /// Whether address bits `a` are in the list (the exact answer behind the filter).
    #[inline(always)]
    pub fn listed(&self, a: F::Bits) -> bool {
        self.addrs.contains(&a)
    }

    fn set(&mut self, a: F::Bits, present: bool) {
        self.addrs.retain(|&x| x != a);
        if present {
            self.addrs.push(a);
        }
        self.filter = self.addrs.iter().fold(0, |f, &x| f | Self::bit(x));
    }

    /// Follows a change of the route for `prefix` (now `r`, or none).
    fn follow(&mut self, prefix: F::Prefix, r: Option<&RouteOf<F>>) {
        if F::is_host(&prefix) {
            let local = r.is_some_and(|r| r.kind == RouteKind::Local);
            self.set(F::prefix_bits(&prefix), local);
        }
    }
}

impl<F: Family> fmt::Debug for RoutesOf<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("routes", &self.routes.len())
            .field("hops", &self.adj.hops.len())
            .field("groups", &self.adj.groups.len())
            .finish()
    }
}

impl<F: Family> Default for RoutesOf<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: Family> RoutesOf<F> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            fib: F::fib_new(),
            adj: Adjacencies::default(),
            routes: hashbrown::HashMap::default(),
            local: LocalAddrs::default(),
        }
    }

    /// An empty table expected to stay small (a VRF's, a numbered one): its FIB is
    /// [`Family::fib_compact`]'s, which commits memory for what its routes write only.
    pub fn compact() -> Self {
        Self {
            fib: F::fib_compact(),
            ..Self::new()
        }
    }

    /// Adds or replaces the route for `r.prefix`.
    pub fn insert(&mut self, r: RouteOf<F>) -> Result<(), RouteError> {
        let v = self.adj.value_of(&r)?;
        F::fib_insert(&mut self.fib, &r.prefix, v).map_err(RouteError::Fib)?;
        self.local.follow(r.prefix, Some(&r));
        self.routes.insert(r.prefix, r);
        Ok(())
    }

    /// Replaces every route, rebuilding the LPM table in bulk (fast for large tables).
    pub fn load(&mut self, routes: impl IntoIterator<Item = RouteOf<F>>) -> Result<(), RouteError> {
        self.routes.clear();
        for r in routes {
            // A later line for the same prefix replaces the earlier one, as `ip route replace`.
            self.routes.insert(r.prefix, r);
        }
        let mut entries = Vec::with_capacity(self.routes.len());
        for r in self.routes.values() {
            entries.push((r.prefix, self.adj.value_of(r)?));
        }
        F::fib_load(&mut self.fib, entries).map_err(RouteError::Fib)?;
        self.local = LocalAddrs::default();
        for r in self.routes.values() {
            self.local.follow(r.prefix, Some(r));
        }
        Ok(())
    }

    /// Removes the route for exactly `p`.
    pub fn remove(&mut self, p: F::Prefix) -> Option<RouteOf<F>> {
        let r = self.routes.remove(&p)?;
        F::fib_remove(&mut self.fib, &p);
        self.local.follow(p, None);
        Some(r)
    }

    /// The route configured for exactly `p`.
    pub fn get(&self, p: &F::Prefix) -> Option<&RouteOf<F>> {
        self.routes.get(p)
    }

    /// Whether `a` is one of our own addresses (has a local /32 route).
    #[inline(always)]
    pub fn is_local_addr(&self, a: F::Bits) -> bool {
        self.local.contains(a)
    }

    /// Our own addresses (the local /32 routes).
    #[inline(always)]
    pub fn local_addrs(&self) -> &LocalAddrs<F> {
        &self.local
    }

    /// Longest-prefix match: the hop for destination bits `dst` (a multipath route's
    /// first next hop).
    #[inline(always)]
    pub fn lookup(&self, dst: F::Bits) -> Option<HopOf<F>> {
        self.lookup_adj(dst).map(|(_, h)| h)
    }

    /// Longest-prefix match: the adjacency (the hop's index, with [`ADJ_ON_LINK`] when
    /// it has no gateway) and the hop for destination `dst`; for a multipath route, its
    /// first next hop's (for callers with no flow; see [`Routes::lookup_flow`]).
    #[inline(always)]
    pub fn lookup_adj(&self, dst: F::Bits) -> Option<(u32, HopOf<F>)> {
        self.lookup_flow(dst, || 0)
    }

    /// As [`Routes::lookup_adj`] for a single-path route; `None` for a multipath route
    /// (and for no route): what a route hint may keep, and enough to check a route's
    /// kind (multipath routes are unicast), with no call to a group's resolution in it.
    #[inline(always)]
    pub fn lookup_hop(&self, dst: F::Bits) -> Option<(u32, HopOf<F>)> {
        let i = F::fib_lookup(&self.fib, dst)?;
        let h = *self.adj.hops.get(i as usize)?;
        Some((Adjacencies::adj(i, &h), h))
    }

    /// As [`Routes::lookup_adj`], a multipath route's next hop chosen by the flow hash
    /// `hash()`, which is called only for a multipath route.
    #[inline(always)]
    pub fn lookup_flow(&self, dst: F::Bits, hash: impl FnOnce() -> u32) -> Option<(u32, HopOf<F>)> {
        let i = F::fib_lookup(&self.fib, dst)?;
        match self.adj.hops.get(i as usize) {
            Some(h) => Some((Adjacencies::adj(i, h), *h)),
            // Group values are above every hop index.
            None => self.adj.pick(i, hash()),
        }
    }

    /// As [`Routes::lookup_flow`], with the length of the prefix matched (for policy
    /// routing's `suppress_prefixlength`; the FIB knows it at no extra cost, see
    /// [`crate::fib::Fib::lookup_len`] and [`crate::fib6::Fib6::lookup_len`]).
    #[inline]
    pub fn lookup_flow_len(
        &self,
        dst: F::Bits,
        hash: impl FnOnce() -> u32,
    ) -> Option<(u32, HopOf<F>, u8)> {
        let (i, len) = F::fib_lookup_len(&self.fib, dst)?;
        let (adj, hop) = match self.adj.hops.get(i as usize) {
            Some(h) => (Adjacencies::adj(i, h), *h),
            None => self.adj.pick(i, hash())?,
        };
        Some((adj, hop, len))
    }

    /// The hop of adjacency `adj` (from [`Routes::lookup_adj`]).
    #[inline(always)]
    pub fn hop(&self, adj: u32) -> Option<HopOf<F>> {
        self.adj.hops.get((adj & !ADJ_ON_LINK) as usize).copied()
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
    pub fn iter(&self) -> impl Iterator<Item = &RouteOf<F>> {
        self.routes.values()
    }

    /// Bytes used by the LPM table.
    pub fn fib_bytes(&self) -> usize {
        F::fib_bytes(&self.fib)
    }

    /// How the LPM table's large first level is backed (huge pages or not), and how many
    /// of its bytes the kernel backs with huge pages now, if that can be read.
    pub fn fib_pages(&self) -> (netbatch_engine::Backing, Option<u64>) {
        F::fib_pages(&self.fib)
    }

    /// Number of distinct hops and of distinct multipath groups (both only grow).
    pub fn adjacencies(&self) -> (usize, usize) {
        (self.adj.hops.len(), self.adj.groups.len())
    }
}

#[cfg(test)]
mod tests {
    use core::net::Ipv4Addr;
    use std::cell::Cell;
    use std::collections::BTreeMap;

    use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};
    use proptest::prelude::*;

    use super::*;
    use crate::dissect::FlowKey;
    use crate::prefix::Ipv4Prefix;

    fn pfx(s: &str) -> Ipv4Prefix {
        s.parse().expect("prefix")
    }

    fn addr(s: &str) -> Ipv4Addr {
        s.parse().expect("address")
    }

    fn hop(gw: &str, out_if: u16, weight: u16) -> NextHop {
        NextHop {
            gateway: Some(addr(gw)),
            out_if,
            weight,
        }
    }

    fn mp(hops: &[NextHop]) -> Multipath {
        Multipath::new(hops.to_vec()).expect("next hops")
    }

    /// The multiplicative inverse of odd `a` modulo 2³² (Newton's iteration).
    fn inverse(a: u32) -> u32 {
        let mut x = a;
        for _ in 0..5 {
            x = x.wrapping_mul(2u32.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    }

    /// The flow hash whose spread value is `x` (so that tests can aim at a threshold).
    fn hash_at(x: u32) -> u32 {
        x.wrapping_mul(inverse(SPREAD))
    }

    /// Hash-threshold by hand for weights 1 and 2 (RFC 2992): the first third of the
    /// spread hash's range is the first next hop's, the rest the second's; the boundary
    /// is ⌈2³²/3⌉ = 0x5555_5556.
    #[test]
    fn weights_one_and_two_split_the_hash_range_at_one_third() {
        assert_eq!(SPREAD.wrapping_mul(inverse(SPREAD)), 1);
        let mut r = Routes::new();
        let (a, b) = (hop("192.0.2.9", 1, 1), hop("198.51.100.9", 2, 2));
        r.insert(Route::multipath(pfx("10.0.0.0/8"), mp(&[a, b])))
            .expect("route");
        let dst = u32::from(addr("10.1.2.3"));
        let via = |x: u32| {
            let (adj, h) = r.lookup_flow(dst, || hash_at(x)).expect("route");
            assert_eq!(r.hop(adj), Some(h), "the adjacency names the hop");
            (h.out_if, Ipv4Addr::from(h.gateway))
        };
        let first = (1, addr("192.0.2.9"));
        let second = (2, addr("198.51.100.9"));
        for x in [0, 1, 0x5555_5554, 0x5555_5555] {
            assert_eq!(via(x), first, "{x:#x}");
        }
        for x in [0x5555_5556, 0x8000_0000, u32::MAX] {
            assert_eq!(via(x), second, "{x:#x}");
        }
        // Without a flow, and for the callers that have none: the first next hop.
        assert_eq!(r.lookup(dst).map(|h| h.out_if), Some(1));
        assert_eq!(r.lookup_adj(dst), r.lookup_flow(dst, || 0));
        // Weights 2 and 4 are the same shares: one table of three slots serves both.
        r.insert(Route::multipath(
            pfx("10.9.0.0/16"),
            mp(&[NextHop { weight: 2, ..a }, NextHop { weight: 4, ..b }]),
        ))
        .expect("route");
        assert_eq!(r.adj.groups, [(0, 3)]);
        assert_eq!(r.adjacencies(), (2, 1));
    }

    /// A connected next hop (`nexthop dev X`) is on-link, as a connected route's hop is.
    #[test]
    fn a_next_hop_without_gateway_is_on_link() {
        let mut r = Routes::new();
        let on_link = NextHop {
            gateway: None,
            out_if: 3,
            weight: 1,
        };
        r.insert(Route::multipath(
            pfx("10.0.0.0/8"),
            mp(&[on_link, hop("192.0.2.9", 1, 1)]),
        ))
        .expect("route");
        let dst = u32::from(addr("10.0.0.7"));
        let (adj, h) = r.lookup_flow(dst, || hash_at(0)).expect("route");
        assert_eq!(
            (adj & ADJ_ON_LINK, h.out_if, h.gateway),
            (ADJ_ON_LINK, 3, 0)
        );
        let (adj, h) = r.lookup_flow(dst, || hash_at(u32::MAX)).expect("route");
        assert_eq!((adj & ADJ_ON_LINK, h.out_if), (0, 1));
    }

    /// Replacing and removing routes never invalidates an adjacency handed out before
    /// (a packet in a neighbour queue holds one), and groups are kept once.
    #[test]
    fn adjacencies_outlive_route_changes() {
        let mut r = Routes::new();
        let (a, b, c) = (
            hop("192.0.2.9", 1, 1),
            hop("192.0.2.10", 1, 1),
            hop("192.0.2.11", 1, 5),
        );
        let p = pfx("10.0.0.0/8");
        r.insert(Route::multipath(p, mp(&[a, b]))).expect("route");
        let dst = u32::from(addr("10.0.0.1"));
        let held: Vec<(u32, Hop)> = [0, u32::MAX]
            .iter()
            .map(|&x| r.lookup_flow(dst, || hash_at(x)).expect("route"))
            .collect();
        let mut copy = r.clone();
        copy.insert(Route::multipath(p, mp(&[c, a])))
            .expect("route");
        copy.remove(p);
        copy.insert(Route::multipath(p, mp(&[a, b])))
            .expect("route");
        for (adj, h) in held {
            assert_eq!(copy.hop(adj), Some(h));
        }
        assert_eq!(copy.adjacencies(), (3, 2), "the group of a, b is kept once");
        // A multipath route must be unicast.
        let mut bad = Route::multipath(pfx("10.1.0.0/16"), mp(&[a, b]));
        bad.kind = RouteKind::Blackhole;
        assert_eq!(
            copy.insert(bad),
            Err(RouteError::MultipathKind(RouteKind::Blackhole))
        );
    }

    #[test]
    fn next_hops_are_checked() {
        let a = hop("192.0.2.9", 1, 1);
        assert_eq!(Multipath::new(vec![a]), Err(MultipathError::TooFew));
        assert_eq!(
            Multipath::new(vec![a; MAX_NEXT_HOPS + 1]),
            Err(MultipathError::TooMany(MAX_NEXT_HOPS + 1))
        );
        assert!(Multipath::new(vec![a; MAX_NEXT_HOPS]).is_ok());
        for w in [0, MAX_WEIGHT + 1] {
            assert_eq!(
                Multipath::new(vec![a, NextHop { weight: w, ..a }]),
                Err(MultipathError::Weight(1, w))
            );
        }
        let m = mp(&[a, NextHop { weight: 256, ..a }]);
        let r = Route::multipath(pfx("10.0.0.0/8"), m.clone());
        assert_eq!(r.next_hops().collect::<Vec<_>>(), m.hops());
        let single = Route::new(pfx("10.0.0.0/8"), RouteKind::Unicast, Some(2), None);
        assert_eq!(
            single.next_hops().collect::<Vec<_>>(),
            [NextHop {
                gateway: None,
                out_if: 2,
                weight: 1
            }]
        );
        let none = Route::new(pfx("10.0.0.0/8"), RouteKind::Blackhole, None, None);
        assert_eq!(none.next_hops().count(), 0);
    }

    // ---- property tests ----

    /// Top octets the generated prefixes cluster in, so that they overlap.
    const CLUSTERS: [u32; 3] = [10, 172, 192];

    fn mask(len: u8) -> u32 {
        if len == 0 { 0 } else { u32::MAX << (32 - len) }
    }

    fn arb_addr() -> impl Strategy<Value = u32> {
        prop_oneof![
            9 => (0..CLUSTERS.len(), 0u32..3, 0u32..4, any::<u8>())
                .prop_map(|(c, b, c3, d)| (CLUSTERS[c] << 24) | (b << 16) | (c3 << 8) | u32::from(d)),
            1 => any::<u32>(),
        ]
    }

    fn arb_prefix() -> impl Strategy<Value = Ipv4Prefix> {
        (arb_addr(), prop_oneof![1 => 0u8..=8, 20 => 9u8..=32]).prop_map(|(a, len)| {
            Ipv4Prefix::new(Ipv4Addr::from(a & mask(len)), len).expect("masked prefix")
        })
    }

    /// A next hop from a small set of gateways and interfaces (so that hops repeat),
    /// with a weight that is often small and sometimes anything.
    fn arb_next_hop() -> impl Strategy<Value = NextHop> {
        (
            prop::option::of(0u8..6),
            0u16..3,
            prop_oneof![3 => 1u16..=4, 1 => 1u16..=MAX_WEIGHT],
        )
            .prop_map(|(g, out_if, weight)| NextHop {
                gateway: g.map(|g| Ipv4Addr::new(192, 0, 2, 10 + g)),
                out_if,
                weight,
            })
    }

    fn arb_route() -> impl Strategy<Value = Route> {
        let kind = prop_oneof![
            6 => Just(RouteKind::Unicast),
            1 => Just(RouteKind::Local),
            1 => Just(RouteKind::Broadcast),
            1 => Just(RouteKind::Blackhole),
            1 => Just(RouteKind::Unreachable),
            1 => Just(RouteKind::Prohibit),
        ];
        prop_oneof![
            2 => (arb_prefix(), kind, prop::option::of(0u16..3), prop::option::of(0u8..6))
                .prop_map(|(p, k, out_if, g)| {
                    Route::new(p, k, out_if, g.map(|g| Ipv4Addr::new(192, 0, 2, 10 + g)))
                }),
            1 => (arb_prefix(), prop::collection::vec(arb_next_hop(), 2..6))
                .prop_map(|(p, hops)| Route::multipath(p, Multipath::new(hops).expect("hops"))),
        ]
    }

    /// Longest-prefix match by linear scan over the routes.
    fn linear(routes: &BTreeMap<Ipv4Prefix, Route>, a: u32) -> Option<&Route> {
        routes
            .values()
            .filter(|r| a & mask(r.prefix.prefix_len()) == r.prefix.bits())
            .max_by_key(|r| r.prefix.prefix_len())
    }

    /// The next hop hash-threshold picks for flow hash `h` (RFC 2992, written from the
    /// cumulative weights, not from the slot table): the first `i` with
    /// `x·ΣW < (W₀ + … + Wᵢ)·2³²`, `x` the spread hash.
    fn threshold(hops: &[NextHop], h: u32) -> NextHop {
        let x = u64::from(h.wrapping_mul(SPREAD));
        let total: u64 = hops.iter().map(|n| u64::from(n.weight)).sum();
        let mut cum = 0u64;
        for n in hops {
            cum += u64::from(n.weight);
            if x * total < cum << 32 {
                return *n;
            }
        }
        unreachable!("the last next hop's threshold is the whole range")
    }

    /// The hop a next hop makes.
    fn hop_of(n: &NextHop) -> Hop {
        Hop {
            kind: RouteKind::Unicast,
            out_if: n.out_if,
            gateway: n.gateway.map_or(0, u32::from),
        }
    }

    /// `routes` answers every probe as the linear scan of `model` does: a single-path
    /// route's hop, without asking for a flow hash and as the route hint's plain-hop
    /// lookup (so single-path lookups are what they were), and a multipath route's next hop by hash-threshold for each hash in
    /// `hashes` (its first for [`Routes::lookup_adj`]); every adjacency names its hop and
    /// is on-link exactly when the hop has no gateway.
    fn assert_matches(
        routes: &Routes,
        model: &BTreeMap<Ipv4Prefix, Route>,
        probes: &[u32],
        hashes: &[u32],
    ) {
        assert_eq!(routes.len(), model.len());
        for &a in probes {
            let want = linear(model, a);
            let check = |got: Option<(u32, Hop)>, want: Option<Hop>| {
                assert_eq!(got.map(|(_, h)| h), want, "{}", Ipv4Addr::from(a));
                if let Some((adj, h)) = got {
                    assert_eq!(routes.hop(adj), Some(h));
                    assert_eq!(adj & ADJ_ON_LINK != 0, h.gateway == 0);
                }
            };
            match want {
                None => {
                    check(routes.lookup_adj(a), None);
                    assert_eq!(routes.lookup_hop(a), None);
                }
                Some(r) => match &r.multipath {
                    None => {
                        let single = Hop {
                            kind: r.kind,
                            out_if: r.out_if.unwrap_or(u16::MAX),
                            gateway: r.gateway.map_or(0, u32::from),
                        };
                        check(routes.lookup_adj(a), Some(single));
                        let asked = Cell::new(false);
                        let got = routes.lookup_flow(a, || {
                            asked.set(true);
                            1
                        });
                        assert!(!asked.get(), "a single-path lookup hashes nothing");
                        assert_eq!(got, routes.lookup_adj(a));
                        assert_eq!(routes.lookup_hop(a), got, "a plain hop for the hint");
                    }
                    Some(m) => {
                        assert_eq!(routes.lookup_hop(a), None, "no plain hop for the hint");
                        check(routes.lookup_adj(a), Some(hop_of(&m.first())));
                        for &h in hashes {
                            let want = hop_of(&threshold(m.hops(), h));
                            check(routes.lookup_flow(a, || h), Some(want));
                        }
                    }
                },
            }
        }
    }

    /// Both ends of every route, their neighbours, and `extra`.
    fn probes(routes: &[Route], extra: &[u32]) -> Vec<u32> {
        let mut out = vec![0, u32::MAX];
        for r in routes {
            let (first, last) = (
                r.prefix.bits(),
                r.prefix.bits() | !mask(r.prefix.prefix_len()),
            );
            out.extend([first, first.wrapping_sub(1), last, last.wrapping_add(1)]);
        }
        out.extend_from_slice(extra);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The FIB with multipath groups answers as a linear scan over the routes does,
        /// after inserts (a later route for a prefix replaces the earlier), after a bulk
        /// load of the same list, and after removals.
        #[test]
        fn lookups_match_a_linear_scan(
            list in prop::collection::vec(arb_route(), 0..120),
            extra in prop::collection::vec(arb_addr(), 100),
            hashes in prop::collection::vec(any::<u32>(), 8),
            deletes in prop::collection::vec(any::<bool>(), 120),
        ) {
            let probes = probes(&list, &extra);
            let mut model = BTreeMap::new();
            let mut routes = Routes::new();
            for r in &list {
                routes.insert(r.clone()).expect("route");
                model.insert(r.prefix, r.clone());
            }
            assert_matches(&routes, &model, &probes, &hashes);

            let mut bulk = Routes::new();
            bulk.load(list.iter().cloned()).expect("routes");
            assert_matches(&bulk, &model, &probes, &hashes);
            drop(bulk);

            for (r, &del) in list.iter().zip(&deletes) {
                if del {
                    prop_assert_eq!(routes.remove(r.prefix), model.remove(&r.prefix));
                }
            }
            assert_matches(&routes, &model, &probes, &hashes);
        }

        /// For random flows (5-tuples hashed as the dissector does, with RPS's key):
        /// every packet of a flow takes the same next hop, looked up again, in a copy of
        /// the table with other routes changed, and in a table rebuilt from the same
        /// routes; over 20,000 flows each next hop's share is its weight's, each count
        /// within 6 standard deviations of the binomial expectation n·Wᵢ/ΣW (a chance
        /// failure has odds below 1 in 10⁸ per count).
        #[test]
        fn flows_keep_their_next_hop_and_shares_follow_the_weights(
            weights in prop::collection::vec(prop_oneof![1u16..=4, 1u16..=MAX_WEIGHT], 2..5),
            seed in any::<u64>(),
        ) {
            let hops: Vec<NextHop> = weights
                .iter()
                .enumerate()
                .map(|(i, &w)| NextHop {
                    gateway: Some(Ipv4Addr::new(192, 0, 2, 10 + i as u8)),
                    out_if: i as u16,
                    weight: w,
                })
                .collect();
            let p = pfx("10.0.0.0/8");
            let route = Route::multipath(p, mp(&hops));
            let mut routes = Routes::new();
            routes.insert(Route::new(pfx("0.0.0.0/0"), RouteKind::Unicast, Some(9), None))
                .expect("route");
            routes.insert(route.clone()).expect("route");
            let mut changed = routes.clone();
            changed.insert(Route::multipath(pfx("172.16.0.0/12"), mp(&hops[..2]))).expect("route");
            changed.remove(pfx("0.0.0.0/0"));
            let mut rebuilt = Routes::new();
            rebuilt.load([route]).expect("routes");

            let t = Toeplitz::new(&MS_KEY);
            let mut rng = seed;
            let mut next = move || {
                // splitmix64: any seed, 0 included, gives a full-period stream.
                rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let z = (rng ^ (rng >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            let n = 20_000u32;
            let mut counts = vec![0u32; hops.len()];
            for _ in 0..n {
                let (r1, r2) = (next(), next());
                let flow = FlowKey {
                    src: Ipv4Addr::from((r1 >> 32) as u32),
                    dst: Ipv4Addr::from((10 << 24) | (r1 as u32 & 0x00ff_ffff)),
                    proto: if r2 & 1 == 0 { 17 } else { 6 },
                    ports: Some(((r2 >> 16) as u16, (r2 >> 32) as u16)),
                };
                let h = flow.toeplitz(&t).max(1);
                let dst = u32::from(flow.dst);
                let out = |t: &Routes| t.lookup_flow(dst, || h).map(|(_, hop)| hop.out_if);
                let first = out(&routes).expect("route");
                prop_assert_eq!(out(&routes), Some(first));
                prop_assert_eq!(out(&changed), Some(first));
                prop_assert_eq!(out(&rebuilt), Some(first));
                counts[usize::from(first)] += 1;
            }
            let total: u32 = weights.iter().map(|&w| u32::from(w)).sum();
            for (i, (&c, &w)) in counts.iter().zip(&weights).enumerate() {
                let share = f64::from(w) / f64::from(total);
                let expect = f64::from(n) * share;
                let sigma = (expect * (1.0 - share)).sqrt();
                prop_assert!(
                    (f64::from(c) - expect).abs() <= 6.0 * sigma + 1.0,
                    "next hop {} (weight {} of {}): {} flows, expected {:.0} ± {:.0}",
                    i, w, total, c, expect, 6.0 * sigma
                );
            }
        }
    }
}
