//! The per-worker state every stage shares: ports, interfaces, routes, neighbours,
//! sockets, the ICMP rate limit, transmit queues and the packets that wait to enter the
//! graph from outside a stage call (timers, applications).

use core::net::Ipv4Addr;
use std::sync::Arc;

use netbatch_engine::{BufCache, PktList};

use crate::iface::{Iface, Port};
use crate::neigh::{NeighParams, NeighTable};
use crate::ratelimit::TokenBucket;
use crate::route::Routes;
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
    /// Packets the allocation of a new buffer failed for (ARP requests).
    pub alloc_failures: u64,
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
        ]
    }
}

/// Packets produced outside the graph that the worker must run through it.
#[derive(Debug, Default)]
pub struct Injected {
    /// Complete frames for the `tx` stage (ARP requests from timers).
    pub to_tx: PktList,
    /// Packets whose `Meta::reason` asks for an ICMP error (failed resolutions).
    pub to_icmp_error: PktList,
    /// Locally originated IPv4 packets for `ip4-local-out` (application sends).
    pub to_local_out: PktList,
    /// Packets released by a neighbour another worker learned, for `neighbour`.
    pub to_neighbour: PktList,
    /// Packets created outside the graph (ARP requests from timers, application sends)
    /// not yet counted in the worker's accounting.
    pub originated: u64,
}

impl Injected {
    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.to_tx.is_empty()
            && self.to_icmp_error.is_empty()
            && self.to_local_out.is_empty()
            && self.to_neighbour.is_empty()
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
}

impl Default for HostParams {
    fn default() -> Self {
        Self {
            forwarding: true,
            icmp_rate: 1000,
            icmp_burst: 50,
            neigh: NeighParams::default(),
            icmp_echo: true,
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
    /// Settings.
    pub params: HostParams,
    /// Neighbours.
    pub neigh: NeighTable,
    /// UDP sockets.
    pub sockets: Sockets,
    /// ICMP error rate limit.
    pub icmp_limit: TokenBucket,
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
}

impl Host {
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
            neigh: NeighTable::new(params.neigh),
            icmp_limit: TokenBucket::new(params.icmp_rate, params.icmp_burst),
            params,
            sockets: Sockets::new(),
            tx,
            injected: Injected::default(),
            stats: HostStats::default(),
            ip_ident: 1,
            neigh_shared: None,
            neigh_seen: 0,
            learned: Vec::new(),
        }
    }

    /// Learns what other workers learned from ARP since the last call; packets that
    /// were waiting for those neighbours go to `injected.to_neighbour`.
    pub fn sync_neighbours(&mut self, now_ns: u64) {
        let Some((shared, me)) = &self.neigh_shared else {
            return;
        };
        let me = *me;
        self.neigh_seen = shared.since(self.neigh_seen, &mut self.learned);
        for l in self.learned.drain(..) {
            if l.origin != me {
                self.neigh.learn(
                    l.iface,
                    l.ip,
                    l.mac,
                    now_ns,
                    true,
                    &mut self.injected.to_neighbour,
                );
            }
        }
    }

    /// Tells the other workers about a neighbour this one learned.
    pub fn publish_neighbour(
        &self,
        iface: u16,
        ip: Ipv4Addr,
        mac: netbatch_wire::ethernet::MacAddr,
    ) {
        if let Some((shared, me)) = &self.neigh_shared {
            shared.publish(*me, iface, ip, mac);
        }
    }

    /// Whether `a` is one of our addresses (any interface).
    pub fn is_local(&self, a: Ipv4Addr) -> bool {
        self.ifaces.iter().any(|i| i.has_addr(a))
    }

    /// Packets held in queues and tables right now (socket queues, neighbour queues,
    /// transmit queues not yet flushed, injected packets not yet run), in wire packets.
    pub fn held(&self, pool: &netbatch_engine::Pool) -> u64 {
        self.sockets.held(pool) + self.held_own(pool)
    }

    /// As [`Host::held`] without the socket queues, which every worker shares.
    pub fn held_own(&self, pool: &netbatch_engine::Pool) -> u64 {
        let list = |l: &PktList| {
            l.iter()
                .map(|p| pool.get(p).meta.wire_packets())
                .sum::<u64>()
        };
        self.neigh.held()
            + self.tx.iter().map(list).sum::<u64>()
            + list(&self.injected.to_tx)
            + list(&self.injected.to_icmp_error)
            + list(&self.injected.to_local_out)
            + list(&self.injected.to_neighbour)
    }

    /// Frees everything the host holds (at shutdown).
    pub fn drain_all(&mut self, cache: &mut BufCache) {
        self.sockets.drain_all(cache);
        self.neigh.drain_all(cache);
        for q in &mut self.tx {
            cache.free_all(q);
        }
        cache.free_all(&mut self.injected.to_tx);
        cache.free_all(&mut self.injected.to_icmp_error);
        cache.free_all(&mut self.injected.to_local_out);
        cache.free_all(&mut self.injected.to_neighbour);
    }

    /// The next IPv4 identification value.
    #[inline]
    pub fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }
}
