//! The per-worker state every stage shares: ports, interfaces, routes, neighbours,
//! sockets, the ICMP rate limit, transmit queues and the packets that wait to enter the
//! graph from outside a stage call (timers, applications).

use core::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use netbatch_engine::{BufCache, Pkt, PktList};

use crate::iface::{Iface, Port};
use crate::neigh::{NeighParams, NeighTable, NeighTable6};
use crate::ratelimit::TokenBucket;
use crate::route::rule::{Policy, Policy6};
use crate::route::{Routes, Routes6};
use crate::udp::socket::Sockets;

/// Counters of host-level events that are not drops (drops are counted per stage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// ARP requests sent.
    pub arp_requests_out: u64,
    /// ARP replies sent.
    pub arp_replies_out: u64,
    /// ICMP echo replies sent.
    pub icmp_echo_replies: u64,
    /// ICMP errors sent.
    pub icmp_errors_out: u64,
    /// ICMP errors not sent because the RFC forbids one for that packet.
    pub icmp_errors_suppressed: u64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_errors_rate_limited: u64,
    /// ICMP messages received and consumed (not echo requests).
    pub icmp_in_other: u64,
    /// Packets the allocation of a new buffer failed for (ARP requests, neighbour
    /// solicitations).
    pub alloc_failures: u64,
    /// Neighbour solicitations sent (RFC 4861 7.2.2).
    pub nd_solicits_out: u64,
    /// Neighbour advertisements sent in answer to a solicitation (RFC 4861 7.2.4).
    pub nd_adverts_out: u64,
    /// ICMPv6 echo replies sent.
    pub icmp6_echo_replies: u64,
    /// ICMPv6 errors sent.
    pub icmp6_errors_out: u64,
    /// ICMPv6 errors not sent because RFC 4443 2.4(e) forbids one for that packet.
    pub icmp6_errors_suppressed: u64,
    /// ICMPv6 errors not sent because of the rate limit (RFC 4443 2.4(f)).
    pub icmp6_errors_rate_limited: u64,
    /// ICMPv6 messages received and consumed (errors, router messages).
    pub icmp6_in_other: u64,
    /// ICMP Redirects sent (RFC 1812 5.2.7.2).
    pub icmp_redirects_out: u64,
    /// ICMP Redirects not sent because of their rate limit.
    pub icmp_redirects_rate_limited: u64,
    /// ICMPv6 Redirects sent (RFC 4861 8.2).
    pub icmp6_redirects_out: u64,
    /// ICMPv6 Redirects not sent because of their rate limit.
    pub icmp6_redirects_rate_limited: u64,
}

impl HostStats {
    /// Name/value pairs for reports.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("arp_requests_out", self.arp_requests_out),
            ("arp_replies_out", self.arp_replies_out),
            ("icmp_echo_replies", self.icmp_echo_replies),
            ("icmp_errors_out", self.icmp_errors_out),
            ("icmp_errors_suppressed", self.icmp_errors_suppressed),
            ("icmp_errors_rate_limited", self.icmp_errors_rate_limited),
            ("icmp_in_other", self.icmp_in_other),
            ("alloc_failures", self.alloc_failures),
            ("nd_solicits_out", self.nd_solicits_out),
            ("nd_adverts_out", self.nd_adverts_out),
            ("icmp6_echo_replies", self.icmp6_echo_replies),
            ("icmp6_errors_out", self.icmp6_errors_out),
            ("icmp6_errors_suppressed", self.icmp6_errors_suppressed),
            ("icmp6_errors_rate_limited", self.icmp6_errors_rate_limited),
            ("icmp6_in_other", self.icmp6_in_other),
            ("icmp_redirects_out", self.icmp_redirects_out),
            (
                "icmp_redirects_rate_limited",
                self.icmp_redirects_rate_limited,
            ),
            ("icmp6_redirects_out", self.icmp6_redirects_out),
            (
                "icmp6_redirects_rate_limited",
                self.icmp6_redirects_rate_limited,
            ),
        ]
    }
}

/// Where packets made outside a stage call (by timers, applications, other workers)
/// enter the graph: the stack's entry points besides receive, in the order the worker
/// runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Packets that carry a request for an ICMP error (failed resolutions).
    IcmpError,
    /// Locally originated IP packets (application sends).
    LocalOut,
    /// Packets released by a neighbour another worker learned.
    Neighbour,
    /// IPv6 packets that carry a request for an ICMPv6 error (failed resolutions).
    Icmp6Error,
    /// Locally originated IPv6 packets (application sends).
    LocalOut6,
    /// IPv6 packets released by a neighbour another worker learned.
    Neighbour6,
    /// Complete frames (ARP requests and neighbour solicitations from timers).
    Transmit,
}

impl Entry {
    /// Every entry, in the order the worker runs what waits at them.
    pub const ALL: [Self; 7] = [
        Self::IcmpError,
        Self::LocalOut,
        Self::Neighbour,
        Self::Icmp6Error,
        Self::LocalOut6,
        Self::Neighbour6,
        Self::Transmit,
    ];

    /// The graph node packets enter at.
    pub const fn node(self) -> &'static str {
        use crate::assemble::node;
        match self {
            Self::IcmpError => node::IP4_ICMP_ERROR,
            Self::LocalOut => node::IP4_LOCAL_OUT,
            Self::Neighbour => node::NEIGHBOUR,
            Self::Icmp6Error => node::IP6_ICMP_ERROR,
            Self::LocalOut6 => node::IP6_LOCAL_OUT,
            Self::Neighbour6 => node::IP6_NEIGHBOUR,
            Self::Transmit => node::TX,
        }
    }
}

/// Packets produced outside the graph that wait to enter it, one queue per [`Entry`].
#[derive(Debug, Default)]
pub struct Injected {
    queues: [PktList; Entry::ALL.len()],
    /// Packets created outside the graph (ARP requests from timers, application sends)
    /// not yet counted in the worker's accounting.
    pub originated: u64,
}

impl Injected {
    /// The queue of entry `e` (one per entry, in [`Entry::ALL`]'s order).
    #[inline]
    fn queue(&mut self, e: Entry) -> &mut PktList {
        let [
            icmp_error,
            local_out,
            neighbour,
            icmp6_error,
            local_out6,
            neighbour6,
            transmit,
        ] = &mut self.queues;
        match e {
            Entry::IcmpError => icmp_error,
            Entry::LocalOut => local_out,
            Entry::Neighbour => neighbour,
            Entry::Icmp6Error => icmp6_error,
            Entry::LocalOut6 => local_out6,
            Entry::Neighbour6 => neighbour6,
            Entry::Transmit => transmit,
        }
    }

    /// Queues `p` to enter at `e`.
    #[inline]
    pub fn push(&mut self, e: Entry, p: Pkt) {
        self.queue(e).push(p);
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(Vec::is_empty)
    }

    /// Takes what waits at `e` (the worker runs it through the graph).
    pub fn take(&mut self, e: Entry) -> PktList {
        core::mem::take(self.queue(e))
    }

    /// Gives back an emptied list taken from `e`, so that its capacity is reused (unless
    /// packets were queued there meanwhile).
    pub fn give_back(&mut self, e: Entry, l: PktList) {
        let q = self.queue(e);
        if q.is_empty() {
            *q = l;
        }
    }

    /// Wire packets waiting.
    pub fn held(&self, pool: &netbatch_engine::Pool) -> u64 {
        self.queues
            .iter()
            .flatten()
            .map(|p| pool.get(p).meta.wire_packets())
            .sum()
    }

    /// Frees everything waiting.
    pub fn drain_all(&mut self, cache: &mut BufCache) {
        for q in &mut self.queues {
            cache.free_all(q);
        }
    }
}

/// Host-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostParams {
    /// Forward packets not addressed to us.
    pub forwarding: bool,
    /// ICMP errors per second (token refill rate).
    pub icmp_rate: u64,
    /// ICMP error burst.
    pub icmp_burst: u64,
    /// Neighbour table tunables.
    pub neigh: NeighParams,
    /// Answer echo requests.
    pub icmp_echo: bool,
    /// Honour loose and strict source-route options (Linux's `accept_source_route`); when
    /// off, packets carrying them are dropped.
    pub accept_source_route: bool,
    /// Send ICMP and ICMPv6 Redirects (Linux's `send_redirects`; `ip4::redirect`,
    /// `ip6::redirect`).
    pub send_redirects: bool,
    /// Redirects per second, each family (token refill rate).
    pub redirect_rate: u64,
    /// Redirect burst, each family.
    pub redirect_burst: u64,
}

impl Default for HostParams {
    fn default() -> Self {
        Self {
            forwarding: true,
            icmp_rate: 1000,
            icmp_burst: 50,
            neigh: NeighParams::default(),
            icmp_echo: true,
            accept_source_route: false,
            send_redirects: true,
            redirect_rate: 100,
            redirect_burst: 10,
        }
    }
}

/// The state of one worker's stack.
#[derive(Debug)]
pub struct Host {
    /// Physical ports by index.
    pub ports: Vec<Port>,
    /// Logical interfaces by index.
    pub ifaces: Vec<Iface>,
    /// Routes (shared by the workers, read-only on the fast path).
    pub routes: Arc<Routes>,
    /// IPv6 routes (shared as `routes` is).
    pub routes6: Arc<Routes6>,
    /// Policy rules and numbered tables (shared as `routes` is; `routes` is their `main`).
    pub policy: Arc<Policy>,
    /// IPv6 policy rules and numbered tables (`routes6` is their `main`).
    pub policy6: Arc<Policy6>,
    /// Settings.
    pub params: HostParams,
    /// Neighbours (ARP).
    pub neigh: NeighTable,
    /// IPv6 neighbours (neighbour discovery).
    pub neigh6: NeighTable6,
    /// UDP sockets.
    pub sockets: Sockets,
    /// ICMP error rate limit.
    pub icmp_limit: TokenBucket,
    /// ICMPv6 error rate limit (RFC 4443 2.4(f)).
    pub icmp6_limit: TokenBucket,
    /// ICMP Redirect rate limit (its own: see `ip4::redirect`).
    pub redirect_limit: TokenBucket,
    /// ICMPv6 Redirect rate limit (its own: see `ip6::redirect`).
    pub redirect6_limit: TokenBucket,
    /// Per-port transmit queues, flushed by the worker after each poll.
    pub tx: Vec<PktList>,
    /// Packets waiting to enter the graph.
    pub injected: Injected,
    /// Event counters.
    pub stats: HostStats,
    /// Next IPv4 identification for originated packets.
    pub ip_ident: u16,
    /// With several workers: what they learn from ARP, and who this worker is.
    pub neigh_shared: Option<(Arc<crate::neigh::NeighShared>, usize)>,
    neigh_seen: u64,
    learned: Vec<crate::neigh::Learned>,
    /// With several workers: what they learn from neighbour discovery.
    pub neigh6_shared: Option<(Arc<crate::neigh::NeighShared6>, usize)>,
    neigh6_seen: u64,
    learned6: Vec<crate::neigh::LearnedOf<crate::route::V6>>,
    /// Added to the worker's clock, nanoseconds since the Unix epoch (for IP timestamps):
    /// 0 where that clock already is UTC (replay runs on the capture's timestamps).
    pub clock_to_utc_ns: u64,
    /// Connection tracking (`ct-in` makes it on first use when the graph tracks).
    pub ct: Option<Box<crate::ct::ConnTrack>>,
    /// With NAT and two or more workers: which translated connections' replies steer
    /// to this worker ([`crate::nat::steer`]); `None` with one worker.
    pub nat_home: Option<crate::nat::steer::Home>,
    /// The IPv4 fragments held before tracking (`ip4-defrag` makes the store on first
    /// use; the host keeps it, so that a graph rebuilt on reload finds what it held).
    pub defrag4: Option<Box<crate::defrag::Store>>,
    /// The IPv6 fragments held before tracking (`ip6-defrag`).
    pub defrag6: Option<Box<crate::defrag::Store>>,
    /// With two or more workers under tracking and RPS: datagrams made whole here whose
    /// connection another worker owns, for the datapath to hand over
    /// ([`crate::defrag::handoff`]); `None` otherwise.
    pub defrag_handoff: Option<Box<crate::defrag::handoff::HandOff>>,
}

impl Host {
    /// The hop of IPv4 adjacency `adj` (what routing wrote in `Meta::adj`): of the main
    /// table, or of the policy's numbered table the adjacency names.
    #[inline(always)]
    pub fn hop(&self, adj: u32) -> Option<crate::route::Hop> {
        self.policy.hop(&self.routes, adj)
    }

    /// The hop of IPv6 adjacency `adj` (as [`Host::hop`]).
    #[inline(always)]
    pub fn hop6(&self, adj: u32) -> Option<crate::route::Hop6> {
        self.policy6.hop(&self.routes6, adj)
    }

    /// The IPv4 route table that routes a packet we make in answer to one received on
    /// port `in_port`, interface `in_if` (an echo reply, an ICMP error: they answer in
    /// the VRF the packet came from), and the tag the adjacencies found there carry;
    /// `main`'s, untagged, for what we originate ourselves (`in_port` is `u16::MAX`).
    #[inline]
    pub fn routes_for(&self, in_port: u16, in_if: u16) -> (&Routes, u32) {
        if in_port == u16::MAX {
            return (&self.routes, 0);
        }
        self.policy.vrf_routes(&self.routes, in_if)
    }

    /// The IPv6 route table as [`Host::routes_for`].
    #[inline]
    pub fn routes6_for(&self, in_port: u16, in_if: u16) -> (&Routes6, u32) {
        if in_port == u16::MAX {
            return (&self.routes6, 0);
        }
        self.policy6.vrf_routes(&self.routes6, in_if)
    }

    /// Sets port `port`'s MTU, and that of every interface on it.
    pub fn set_port_mtu(&mut self, port: u16, mtu: u16) {
        if let Some(p) = self.ports.get_mut(usize::from(port)) {
            p.mtu = mtu;
        }
        for f in self.ifaces.iter_mut().filter(|f| f.port == port) {
            f.mtu = mtu;
        }
    }

    /// A host over `ports` and `ifaces` with `routes`.
    pub fn new(
        ports: Vec<Port>,
        ifaces: Vec<Iface>,
        routes: Arc<Routes>,
        params: HostParams,
    ) -> Self {
        let tx = ports
            .iter()
            .map(|_| Vec::with_capacity(netbatch_engine::LIST_MAX))
            .collect();
        Self {
            ports,
            ifaces,
            routes,
            routes6: Arc::new(Routes6::new()),
            policy: Arc::new(Policy::default()),
            policy6: Arc::new(Policy6::default()),
            neigh: NeighTable::new(params.neigh),
            neigh6: NeighTable6::new(params.neigh),
            icmp_limit: TokenBucket::new(params.icmp_rate, params.icmp_burst),
            icmp6_limit: TokenBucket::new(params.icmp_rate, params.icmp_burst),
            redirect_limit: TokenBucket::new(params.redirect_rate, params.redirect_burst),
            redirect6_limit: TokenBucket::new(params.redirect_rate, params.redirect_burst),
            params,
            sockets: Sockets::new(),
            tx,
            injected: Injected::default(),
            stats: HostStats::default(),
            ip_ident: 1,
            neigh_shared: None,
            neigh_seen: 0,
            learned: Vec::new(),
            neigh6_shared: None,
            neigh6_seen: 0,
            learned6: Vec::new(),
            clock_to_utc_ns: 0,
            ct: None,
            nat_home: None,
            defrag_handoff: None,
            defrag4: None,
            defrag6: None,
        }
    }

    /// Learns what other workers learned from ARP and neighbour discovery since the last
    /// call, in the state their entries took; packets that were waiting for those
    /// neighbours wait to enter at [`Entry::Neighbour`] (IPv6: [`Entry::Neighbour6`]).
    pub fn sync_neighbours(&mut self, now_ns: u64) {
        if let Some((shared, me)) = &self.neigh_shared {
            self.neigh_seen = shared.since(self.neigh_seen, &mut self.learned);
            let released = self.injected.queue(Entry::Neighbour);
            for l in self.learned.drain(..).filter(|l| l.origin != *me) {
                apply_learned(&mut self.neigh, l, now_ns, released);
            }
        }
        if let Some((shared6, me)) = &self.neigh6_shared {
            self.neigh6_seen = shared6.since(self.neigh6_seen, &mut self.learned6);
            let released = self.injected.queue(Entry::Neighbour6);
            for l in self.learned6.drain(..).filter(|l| l.origin != *me) {
                apply_learned(&mut self.neigh6, l, now_ns, released);
            }
        }
    }

    /// Tells the other workers about an IPv6 neighbour this one learned: the address and
    /// state its own entry now has (an advertisement it ignored changes nothing).
    pub fn publish_neighbour6(&self, iface: u16, ip: Ipv6Addr) {
        if let Some((shared6, me)) = &self.neigh6_shared
            && let Some((mac, state)) = self.neigh6.resolved(iface, ip)
        {
            shared6.publish(*me, iface, ip, mac, state);
        }
    }

    /// Tells the other workers about a neighbour this one learned: the address and state
    /// its own entry now has.
    pub fn publish_neighbour(&self, iface: u16, ip: Ipv4Addr) {
        if let Some((shared, me)) = &self.neigh_shared
            && let Some((mac, state)) = self.neigh.resolved(iface, ip)
        {
            shared.publish(*me, iface, ip, mac, state);
        }
    }

    /// Tells the other workers that this one is soliciting `ip` on `iface` (a first
    /// solicitation or a retry), so that whichever receives the advertisement applies it.
    pub fn asking6(&self, iface: u16, ip: Ipv6Addr, now_ns: u64) {
        if let Some((shared6, _)) = &self.neigh6_shared {
            let until = now_ns + self.neigh6.question_ns();
            shared6.ask(iface, u128::from(ip), now_ns, until);
        }
    }

    /// Whether another worker is soliciting `ip` on `iface` now.
    pub fn asked6(&self, iface: u16, ip: Ipv6Addr, now_ns: u64) -> bool {
        self.neigh6_shared
            .as_ref()
            .is_some_and(|(shared6, _)| shared6.asked(iface, u128::from(ip), now_ns))
    }

    /// The worker time `now_ns` as an RFC 791 timestamp: milliseconds since midnight UT.
    pub fn utc_ms_since_midnight(&self, now_ns: u64) -> u32 {
        (now_ns.wrapping_add(self.clock_to_utc_ns) / 1_000_000 % 86_400_000) as u32
    }

    /// Whether `a` is one of our addresses (any interface).
    pub fn is_local(&self, a: Ipv4Addr) -> bool {
        self.ifaces.iter().any(|i| i.has_addr(a))
    }

    /// Whether `a` is one of our IPv6 addresses: a global one (of an interface in the
    /// VRF of interface `iface`), or the link-local address of interface `iface`
    /// (link-local addresses are scoped to their interface).
    pub fn is_local6(&self, a: Ipv6Addr, iface: u16) -> bool {
        if netbatch_wire::ipv6::is_link_local(a) {
            return self
                .ifaces
                .get(usize::from(iface))
                .is_some_and(|i| i.ll6 == a);
        }
        self.policy6
            .vrf_routes(&self.routes6, iface)
            .0
            .is_local_addr(u128::from(a))
    }

    /// Whether `a` is one of our Subnet-Router anycast addresses (RFC 4291 2.6.1): that of
    /// an on-link prefix of any interface, or `fe80::` on interface `iface` (link-local
    /// addresses are scoped to their interface). An address that is also one of our
    /// unicast addresses is not.
    pub fn is_anycast6(&self, a: Ipv6Addr, iface: u16) -> bool {
        if netbatch_wire::ipv6::is_link_local(a) {
            return self
                .ifaces
                .get(usize::from(iface))
                .is_some_and(|i| i.has_anycast6(a));
        }
        self.ifaces.iter().any(|i| i.has_anycast6(a)) && !self.ifaces.iter().any(|i| i.has_addr6(a))
    }

    /// Packets held in queues and tables right now (socket queues, neighbour queues,
    /// transmit queues not yet flushed, injected packets not yet run), in wire packets.
    pub fn held(&self, pool: &netbatch_engine::Pool) -> u64 {
        self.sockets.held() + self.held_own(pool)
    }

    /// As [`Host::held`] without the socket queues, which every worker shares.
    pub fn held_own(&self, pool: &netbatch_engine::Pool) -> u64 {
        let list = |l: &PktList| {
            l.iter()
                .map(|p| pool.get(p).meta.wire_packets())
                .sum::<u64>()
        };
        self.neigh.held()
            + self.neigh6.held()
            + self.tx.iter().map(list).sum::<u64>()
            + self.injected.held(pool)
            + [&self.defrag4, &self.defrag6]
                .iter()
                .filter_map(|s| s.as_deref())
                .map(|s| s.held() as u64)
                .sum::<u64>()
            + self.defrag_handoff.as_ref().map_or(0, |h| h.held())
    }

    /// Frees everything the host holds (at shutdown).
    pub fn drain_all(&mut self, cache: &mut BufCache) {
        self.sockets.drain_all(cache);
        self.neigh.drain_all(cache);
        self.neigh6.drain_all(cache);
        for q in &mut self.tx {
            cache.free_all(q);
        }
        self.injected.drain_all(cache);
        let mut frags = Vec::new();
        for s in [&mut self.defrag4, &mut self.defrag6].into_iter().flatten() {
            s.drain(&mut frags);
            cache.free_all(&mut frags);
        }
        if let Some(h) = self.defrag_handoff.as_mut() {
            frags.extend(h.drain().map(|(_, p)| p));
            cache.free_all(&mut frags);
        }
    }

    /// The next IPv4 identification value.
    #[inline]
    pub fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }
}

/// Applies what another worker learned to this worker's table: a confirmed neighbour is
/// learned reachable (an entry made if there was none), an unconfirmed one stale.
fn apply_learned<F: crate::route::Family>(
    table: &mut crate::neigh::NeighTableOf<F>,
    l: crate::neigh::LearnedOf<F>,
    now_ns: u64,
    released: &mut Vec<Pkt>,
) {
    match l.state {
        crate::neigh::State::Stale => {
            table.learn_stale(l.iface, l.ip, l.mac, now_ns, released);
        }
        _ => {
            table.learn(l.iface, l.ip, l.mac, now_ns, true, released);
        }
    }
}
