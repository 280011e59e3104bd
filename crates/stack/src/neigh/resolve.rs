//! `neighbour`: resolves the next hop's MAC and pushes the Ethernet header.
//!
//! First, the output MTU (the one place it is checked): a packet longer than it (a
//! super-packet whose segments are) goes to `ip4-fragment`, which fragments it and sends
//! the fragments back, or answers ICMP fragmentation needed.
//!
//! Resolved → header pushed, on to the port's `tx-<port>` node (a super-packet the port
//! cannot take whole, and what follows it to that port in the list, to `gso`). Stale →
//! sent, and a unicast ARP probe is due once per retransmit interval. Unresolved → the
//! packet waits in the neighbour's queue (bounded in wire packets; the oldest are dropped
//! to make room, `neigh_queue_full`) and a broadcast ARP request goes out (originated).
//! Broadcast and multicast next hops map to their MACs without ARP (RFC 1112 6.4). Within a list, each
//! adjacency (for an on-link route, each destination) is resolved once: its L2 header is
//! kept in a small direct-mapped cache for the rest of the list.

use netbatch_engine::{Cx, Next, Out, PktList, Stage};
use netbatch_wire::ethernet::{EtherType, MacAddr};

use super::Lookup;
use crate::arp::build_request;
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::iface::Iface;
use crate::l2::output::{MAX_HEADER_LEN, copy_header, write_header};
use crate::meta::{Field, Fields};
use crate::prefix::class;
use crate::route::ADJ_ON_LINK;
use crate::tx::{port_arc, with_port_arcs};

netbatch_engine::arcs! {
    /// Arc to transmit.
    pub TX = "tx";
    /// Arc to fragmentation (larger than the output MTU).
    pub FRAG = "frag";
    /// Arc to GSO (a super-packet for a port without the matching offload).
    pub GSO = "gso";
}

/// `neighbour`: one arc per port to its `tx-<port>` node besides its own.
pub const DECL: Decl = Decl {
    arcs: &[
        ("tx", To::Node(node::TX)),
        ("frag", To::Node(node::IP4_FRAGMENT)),
        ("gso", To::Node(node::GSO)),
    ],
    port_arcs: true,
    reasons: &[super::reason::ALL, crate::ip4::input::reason::ALL],
    decode: Decode::Out,
    reads: Fields::of(&[Field::L3, Field::Adj, Field::OutIf, Field::Gso]),
    writes: Fields::of(&[Field::Ask]),
    ..Decl::new(node::NEIGHBOUR, |m| Box::new(Neighbour::new(m.ports)))
};

/// Bits of the per-list rewrite cache index.
const CACHE_BITS: u32 = 3;
/// Slots of the per-list rewrite cache.
const CACHE: usize = 1 << CACHE_BITS;

/// The neighbour stage.
#[derive(Debug)]
pub struct Neighbour {
    /// `tx`, `frag`, `gso`, then one `tx-<port>` arc per port.
    arcs: Vec<&'static str>,
}

impl Neighbour {
    /// A neighbour stage for a host with these ports, with one transmit arc per port
    /// (`tx-<name>`, see [`crate::tx::TxPort`]).
    pub fn new(ports: &[&str]) -> Self {
        Self {
            arcs: with_port_arcs(ARCS, ports),
        }
    }

    /// The arc to `port`'s transmit node (the generic `tx` if there is none).
    pub(crate) fn port_arc(&self, port: u16) -> Next {
        port_arc(&self.arcs, ARCS.len(), port).unwrap_or(TX)
    }
}

/// The MAC of a broadcast or multicast next hop on an interface, if it is one.
fn group_mac(nh: u32, host: &Host, out_if: u16) -> Option<MacAddr> {
    if class::is_multicast(nh) {
        let b = nh.to_be_bytes();
        return Some(MacAddr([0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]]));
    }
    if class::is_limited_broadcast(nh) {
        return Some(MacAddr::BROADCAST);
    }
    let iface = host.ifaces.get(usize::from(out_if))?;
    iface
        .addrs
        .iter()
        .any(|a| a.subnet().broadcast().is_some_and(|b| u32::from(b) == nh))
        .then_some(MacAddr::BROADCAST)
}

/// The L2 header for one adjacency (interface and next hop): destination and source MAC,
/// the interface's VLAN tags, the IPv4 ethertype. Built once per list for each adjacency
/// met and copied in front of every packet that follows (VPP's adjacency rewrite).
#[derive(Clone, Copy)]
pub(crate) struct Rewrite<K> {
    /// What it is for: for IPv4 the adjacency, and for an on-link one the destination
    /// ([`Rewrite::key`]); a value no packet has for an empty slot.
    pub(crate) key: K,
    len: u8,
    arc: Next,
    /// GSO kinds the port takes whole: bit `kind - 1` per `gso` kind.
    gso_ok: u8,
    bytes: [u8; MAX_HEADER_LEN],
}

/// The GSO kinds a port with `f` transmits whole, one bit per kind (the kernel's
/// `skb_gso_ok`: a fraglist chain needs the list offload and the L4 one).
pub(crate) fn gso_kinds(f: &crate::offload::Features) -> u8 {
    use crate::meta::gso;
    let bit = |kind: u8| 1u8 << (kind - 1);
    let mut k = 0u8;
    if f.tx_tcp_segmentation {
        k |= bit(gso::TCPV4) | bit(gso::TCPV6);
    }
    if f.tx_udp_segmentation {
        k |= bit(gso::UDPV4) | bit(gso::UDPV6);
    }
    if f.tx_gso_list && f.tx_tcp_segmentation {
        k |= bit(gso::FRAGLIST_TCPV4) | bit(gso::FRAGLIST_TCPV6);
    }
    if f.tx_gso_list && f.tx_udp_segmentation {
        k |= bit(gso::FRAGLIST_UDPV4) | bit(gso::FRAGLIST_UDPV6);
    }
    k
}

impl Rewrite<u64> {
    /// The key of adjacency `adj` toward `on_link` (0 through a gateway).
    #[inline(always)]
    fn key(adj: u32, on_link: u32) -> u64 {
        (u64::from(adj) << 32) | u64::from(on_link)
    }
}

impl<K: Copy> Rewrite<K> {
    /// A slot whose key is `none` (which no packet has).
    pub(crate) const fn empty(none: K) -> Self {
        Self {
            key: none,
            len: 0,
            arc: Next(0),
            gso_ok: 0,
            bytes: [0; MAX_HEADER_LEN],
        }
    }

    /// The link header of frames from `iface` to `dst` carrying `ethertype`, sent by arc
    /// `arc` to a port taking the GSO kinds `gso_ok` whole.
    pub(crate) fn new(
        iface: &Iface,
        key: K,
        dst: MacAddr,
        ethertype: EtherType,
        arc: Next,
        gso_ok: u8,
    ) -> Self {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        let len = write_header(&mut bytes, iface, dst, ethertype);
        Self {
            key,
            len: len as u8,
            arc,
            gso_ok,
            bytes,
        }
    }

    /// Pushes the link header in front of packet `v`; `false` when the headroom is too
    /// small (the packet is unchanged).
    #[inline(always)]
    pub(crate) fn push_onto(&self, v: &mut netbatch_engine::PktMut<'_>) -> bool {
        let n = usize::from(self.len);
        let Some(h) = v.push(n) else {
            return false;
        };
        copy_header(h, &self.bytes);
        true
    }

    /// The port's transmit arc.
    #[inline(always)]
    pub(crate) fn arc(&self) -> Next {
        self.arc
    }

    /// The arc of a packet of kind `gso_type` when a super-packet may be in the list
    /// (`via_gso` not empty, or this one is): `gso` (the calling stage's arc to GSO) for a
    /// super-packet the port cannot take whole and for everything after one for the same
    /// port in this list (`via_gso`: one bit per arc modulo 64, the list's), else the
    /// port's.
    #[inline]
    pub(crate) fn detour(&self, gso_type: u8, via_gso: &mut u64, gso: Next) -> Next {
        let kind = gso_type & crate::meta::gso::KIND;
        let bit = 1u64 << (self.arc.0 & 63);
        let ok = kind
            .checked_sub(1)
            .and_then(|b| 1u8.checked_shl(u32::from(b)))
            .is_some_and(|b| self.gso_ok & b != 0);
        if kind != 0 && !ok {
            *via_gso |= bit;
        }
        if *via_gso & bit != 0 { gso } else { self.arc }
    }
}

impl Neighbour {
    /// Asks the table for the MAC of `nh` on `out_if` (sending a unicast refresh probe if
    /// the entry is stale and one is due); broadcast and multicast next hops map directly.
    fn resolve(
        host: &mut Host,
        cx: &mut Cx<'_>,
        out_if: u16,
        nh: u32,
        out: &mut Out,
    ) -> Option<MacAddr> {
        match host.neigh.lookup(out_if, nh, cx.now_ns) {
            Lookup::Mac(m) => Some(m),
            Lookup::StaleMac(m) => {
                if host.neigh.want_refresh(out_if, nh, cx.now_ns)
                    && let Some(iface) = host.ifaces.get(usize::from(out_if))
                {
                    match build_request(cx.pool, cx.cache, iface, out_if, nh.into(), Some(m)) {
                        Some(r) => {
                            host.stats.arp_requests_out += 1;
                            cx.originate(1);
                            out.push(TX, r);
                        }
                        None => host.stats.alloc_failures += 1,
                    }
                }
                Some(m)
            }
            Lookup::Pending(_) | Lookup::Miss => group_mac(nh, host, out_if),
        }
    }

    /// The rewrite of adjacency `adj` (toward `on_link`, 0 through its gateway) out of
    /// `out_if`, resolved now; `Err(next hop)` when its MAC is not known. Out of line:
    /// once per adjacency and list, and inlined its locals crowded the per-packet loop.
    #[cold]
    #[inline(never)]
    fn rewrite(
        &self,
        host: &mut Host,
        cx: &mut Cx<'_>,
        out_if: u16,
        adj: u32,
        on_link: u32,
        out: &mut Out,
    ) -> Result<Rewrite<u64>, u32> {
        let nh = match on_link {
            0 => host.hop(adj).map_or(0, |h| h.gateway),
            dst => dst,
        };
        let mac = Self::resolve(host, cx, out_if, nh, out).ok_or(nh)?;
        // The caller found `out_if` (for its MTU) before asking.
        let iface = host.ifaces.get(usize::from(out_if)).ok_or(nh)?;
        let gso_ok = host
            .ports
            .get(usize::from(iface.port))
            .map_or(0, |p| gso_kinds(&p.features));
        Ok(Rewrite::new(
            iface,
            Rewrite::key(adj, on_link),
            mac,
            EtherType::IPV4,
            self.port_arc(iface.port),
            gso_ok,
        ))
    }

    /// Queues `p` behind the resolution of `nh` and sends a request if one is due.
    fn wait(
        host: &mut Host,
        cx: &mut Cx<'_>,
        out_if: u16,
        nh: u32,
        p: netbatch_engine::Pkt,
        out: &mut Out,
    ) {
        let wire = u32::try_from(cx.pool.get(&p).meta.wire_packets()).unwrap_or(u32::MAX);
        let mut evicted = Vec::new();
        let (probe, refused) = host
            .neigh
            .queue(out_if, nh, (p, wire), cx.now_ns, &mut evicted);
        let why = if refused {
            crate::neigh::reason::TABLE_FULL
        } else {
            crate::neigh::reason::QUEUE_FULL
        };
        for e in evicted {
            out.drop(e, why);
        }
        if let Some(pr) = probe
            && let Some(iface) = host.ifaces.get(usize::from(pr.iface))
        {
            match build_request(cx.pool, cx.cache, iface, pr.iface, pr.target, pr.unicast) {
                Some(r) => {
                    host.stats.arp_requests_out += 1;
                    cx.originate(1);
                    out.push(TX, r);
                }
                None => host.stats.alloc_failures += 1,
            }
        }
    }
}

impl Stage<Host> for Neighbour {
    fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        super::reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        // Rewrites resolved in this list, direct-mapped by next hop: interleaved flows to
        // a few next hops resolve each once per list. Only valid within the list (the
        // table may change between lists), so it starts empty every call.
        let mut cache = [Rewrite::empty(u64::MAX); CACHE];
        let mut mtu_if = (u16::MAX, 0u16);
        // Ports (by arc, modulo 64) whose packets go through `gso` for the rest of the
        // list: once a super-packet for a port takes the detour, the packets after it
        // follow it there, so none of them reaches the port before its segments (with
        // `buckets` dispatch the port's queue would otherwise fill first).
        let mut via_gso = 0u64;
        // Borrowing the pool through its own reference leaves `cx` free for the slow paths.
        let pool = cx.pool;
        for mut p in list.drain(..) {
            let mut v = pool.get_mut(&mut p);
            let (out_if, adj, len, gso, gso_type) = (
                v.meta.out_if,
                v.meta.adj,
                v.meta.len,
                v.meta.gso_size,
                v.meta.gso_type,
            );
            // On link (no gateway), the next hop is the packet's own destination; through
            // a gateway, the adjacency says it all.
            let on_link = if adj & ADJ_ON_LINK == 0 {
                0
            } else {
                match crate::ip4::header(v.data()) {
                    Some(ip) => u32::from(ip.dst()),
                    None => {
                        out.drop(p, crate::ip4::input::reason::TRUNCATED);
                        continue;
                    }
                }
            };
            if out_if != mtu_if.0 {
                let Some(i) = host.ifaces.get(usize::from(out_if)) else {
                    out.drop(p, netbatch_engine::reason::PORT_DOWN);
                    continue;
                };
                mtu_if = (out_if, i.mtu);
            }
            // The packet starts at its IP header: its length (a super-packet's segment
            // length) is what the MTU bounds.
            if len > mtu_if.1
                && (gso == 0
                    || crate::ip4::fragment::wire_len(v.data(), v.meta) > usize::from(mtu_if.1))
            {
                out.push(FRAG, p);
                continue;
            }
            let key = Rewrite::key(adj, on_link);
            let slot = (adj ^ on_link).wrapping_mul(0x9e37_79b9) as usize >> (32 - CACHE_BITS);
            #[expect(
                clippy::indexing_slicing,
                reason = "`slot` is the top CACHE_BITS bits of a 32-bit hash: below CACHE"
            )]
            let rw = &mut cache[slot];
            if rw.key != key {
                match self.rewrite(host, cx, out_if, adj, on_link, out) {
                    Ok(new) => *rw = new,
                    Err(nh) => {
                        Self::wait(host, cx, out_if, nh, p, out);
                        continue;
                    }
                }
            }
            if !rw.push_onto(&mut v) {
                out.drop(p, netbatch_engine::reason::NO_HEADROOM);
                continue;
            }
            // The common case in one test: a plain packet, no detour taken in this list.
            if u64::from(gso_type) | via_gso == 0 {
                out.push(rw.arc, p);
                continue;
            }
            out.push(rw.detour(gso_type, &mut via_gso, GSO), p);
        }
    }
}
