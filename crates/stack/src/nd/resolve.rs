//! `ip6-neighbour`: the output MTU, the next hop's MAC by neighbour discovery, the link
//! header (the IPv6 twin of `neighbour`).
//!
//! First the output MTU, the one place it is checked: a forwarded packet longer than it
//! (a super-packet whose segments are) is answered with Packet Too Big carrying the MTU
//! (RFC 8200 5, RFC 4443 3.2; routers never fragment); one we originated is dropped
//! (`ip6_local_too_big`: netbatch does not fragment its own IPv6 packets either).
//!
//! The next hop is the packet's destination for an on-link adjacency (`ADJ_ON_LINK`: a
//! connected route, or a link-scope destination `ip6-local-out` sent by an interface),
//! else the route's gateway. A multicast destination maps to `33:33` and its last four
//! bytes (RFC 2464 7). Otherwise the neighbour cache: reachable → sent; stale → sent,
//! and a unicast solicitation probes it once due (RFC 4861 7.3.3); unknown or
//! incomplete → the packet waits in the neighbour's bounded queue (in wire packets;
//! `neigh_queue_full` for what is pushed out) and a multicast solicitation goes to the
//! target's solicited-node group (originated). Within a list each adjacency (with its
//! interface, and for an on-link one the destination) is resolved once: its link header
//! is kept in a small direct-mapped cache for the rest of the list, and pushed in front
//! of every packet that follows; a packet through a gateway is matched to it by its
//! adjacency alone, without reading its destination or its route's hop.

use netbatch_engine::{Cx, Next, Out, Pkt, PktList, Stage};
use netbatch_wire::ethernet::{EtherType, MacAddr};
use netbatch_wire::ipv6 as wire6;

use super::build_solicit;
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::ip6::Cause;
use crate::ip6::icmp_error::Request;
use crate::meta::{Field, Fields, flag};
use crate::neigh::Lookup;
use crate::neigh::resolve::{Rewrite, gso_kinds};
use crate::route::ADJ_ON_LINK;
use crate::tx::{port_arc, with_port_arcs};

netbatch_engine::reasons! {
    /// Why `ip6-neighbour` does not send a packet (besides the neighbour queue's reasons,
    /// [`crate::neigh::reason`]).
    pub mod reason {
        TOO_BIG = "ip6_packet_too_big": "IPv6 packet larger than the next link's MTU (routers do not fragment)",
        LOCAL_TOO_BIG = "ip6_local_too_big": "IPv6 packet we made is larger than its link's MTU (no fragmentation)",
    }
}

netbatch_engine::arcs! {
    /// Arc to transmit (solicitations).
    pub TX = "tx";
    /// Arc to the ICMPv6 error stage (Packet Too Big).
    pub ERROR = "error";
    /// Arc to GSO (a super-packet for a port without the matching offload).
    pub GSO = "gso";
}

/// Bits of the per-list rewrite cache index.
const CACHE_BITS: u32 = 3;
/// Slots of the per-list rewrite cache.
const CACHE: usize = 1 << CACHE_BITS;

/// The key of a rewrite: the adjacency, the output interface, and for an on-link
/// adjacency the destination (0 through a gateway, whose adjacency names its next hop).
/// It determines the next hop, so one key is one rewrite; no packet has `u16::MAX` as
/// its output interface here, which marks an empty slot.
type Key = (u32, u16, u128);

/// An empty slot's key.
const NO_KEY: Key = (u32::MAX, u16::MAX, 0);

/// The IPv6 neighbour stage.
#[derive(Debug)]
pub struct Ip6Neighbour {
    /// `tx`, `error`, `gso`, then one `tx-<port>` arc per port.
    arcs: Vec<&'static str>,
}

impl Ip6Neighbour {
    /// The stage for a host with these ports (one `tx-<port>` arc each).
    pub fn new(ports: &[&str]) -> Self {
        Self {
            arcs: with_port_arcs(ARCS, ports),
        }
    }

    /// The arc to `port`'s transmit node.
    fn port_arc(&self, port: u16) -> Next {
        port_arc(&self.arcs, ARCS.len(), port).unwrap_or(TX)
    }

    /// The MAC of next hop `nh` on `out_if`, if it is known now (sending a probe of a
    /// stale entry when one is due); a multicast next hop maps directly.
    fn resolve(
        host: &mut Host,
        cx: &mut Cx<'_>,
        out_if: u16,
        nh: u128,
        out: &mut Out,
    ) -> Option<MacAddr> {
        if let Some(m) = wire6::multicast_mac(nh.into()) {
            return Some(m);
        }
        match host.neigh6.lookup(out_if, nh, cx.now_ns) {
            Lookup::Mac(m) => Some(m),
            Lookup::StaleMac(m) => {
                if host.neigh6.want_refresh(out_if, nh, cx.now_ns)
                    && let Some(iface) = host.ifaces.get(usize::from(out_if))
                {
                    match build_solicit(cx.pool, cx.cache, iface, out_if, nh.into(), Some(m)) {
                        Some(r) => {
                            host.stats.nd_solicits_out += 1;
                            cx.originate(1);
                            out.push(TX, r);
                        }
                        None => host.stats.alloc_failures += 1,
                    }
                }
                Some(m)
            }
            Lookup::Pending(_) | Lookup::Miss => None,
        }
    }

    /// Queues `p` behind the resolution of `nh` and solicits it if one is due.
    fn wait(host: &mut Host, cx: &mut Cx<'_>, out_if: u16, nh: u128, p: Pkt, out: &mut Out) {
        let wire = u32::try_from(cx.pool.get(&p).meta.wire_packets()).unwrap_or(u32::MAX);
        let mut evicted = Vec::new();
        let (probe, refused) = host
            .neigh6
            .queue(out_if, nh, (p, wire), cx.now_ns, &mut evicted);
        let why = if refused {
            crate::neigh::reason::TABLE_FULL
        } else {
            crate::neigh::reason::QUEUE_FULL
        };
        for e in evicted {
            out.drop(e, why);
        }
        if let Some(pr) = probe {
            host.asking6(pr.iface, pr.target, cx.now_ns);
            let Some(iface) = host.ifaces.get(usize::from(pr.iface)) else {
                return;
            };
            match build_solicit(cx.pool, cx.cache, iface, pr.iface, pr.target, pr.unicast) {
                Some(r) => {
                    host.stats.nd_solicits_out += 1;
                    cx.originate(1);
                    out.push(TX, r);
                }
                None => host.stats.alloc_failures += 1,
            }
        }
    }
}

/// The length of the wire packets the packet `m` (starting at its IPv6 header, `d`)
/// stands for: its own, or for a super-packet its headers plus one segment.
#[inline]
fn wire_len(d: &[u8], m: &netbatch_engine::Meta) -> usize {
    if m.gso_size == 0 {
        return usize::from(m.len);
    }
    let l4 = m.l4.wrapping_sub(m.data) as usize;
    l4 + l4_header_len(d.get(l4..).unwrap_or_default(), m) + usize::from(m.gso_size)
}

/// The upper-layer header length of a super-packet whose upper-layer header `l4` starts:
/// TCP's is in the packet (options included); UDP's is 8.
#[inline]
fn l4_header_len(l4: &[u8], m: &netbatch_engine::Meta) -> usize {
    use crate::meta::gso;
    match m.gso_type & gso::KIND {
        gso::TCPV6 | gso::FRAGLIST_TCPV6 | gso::TCPV4 | gso::FRAGLIST_TCPV4 => {
            netbatch_wire::tcp::TcpPacket::new_checked(l4).map_or(20, |t| t.header_len())
        }
        _ => 8,
    }
}

/// `ip6-neighbour`: one arc per port to its `tx-<port>` node besides its own.
pub const DECL: Decl = Decl {
    arcs: &[
        ("tx", To::Node(node::TX)),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
        ("gso", To::Node(node::GSO)),
    ],
    port_arcs: true,
    reasons: &[
        reason::ALL,
        crate::neigh::reason::ALL,
        crate::ip6::input::reason::ALL,
    ],
    decode: Decode::Out,
    reads: Fields::of(&[
        Field::L3,
        Field::L4,
        Field::Adj,
        Field::OutIf,
        Field::Origin,
        Field::Gso,
    ]),
    writes: Fields::of(&[Field::Ask]),
    ..Decl::new(node::IP6_NEIGHBOUR, |m| {
        Box::new(Ip6Neighbour::new(m.ports))
    })
};

impl Stage<Host> for Ip6Neighbour {
    fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        static REASONS: std::sync::LazyLock<Vec<netbatch_engine::Reason>> =
            std::sync::LazyLock::new(|| {
                crate::neigh::reason::ALL
                    .iter()
                    .chain(reason::ALL)
                    .copied()
                    .collect()
            });
        &REASONS
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut cache = [Rewrite::<Key>::empty(NO_KEY); CACHE];
        let mut mtu_if = (u16::MAX, 0u16);
        let mut via_gso = 0u64;
        let pool = cx.pool;
        for mut p in list.drain(..) {
            let mut v = pool.get_mut(&mut p);
            let (out_if, adj, len, gso_type) =
                (v.meta.out_if, v.meta.adj, v.meta.len, v.meta.gso_type);
            if usize::from(len) < wire6::HEADER_LEN {
                out.drop(p, crate::ip6::input::reason::TRUNCATED);
                continue;
            }
            // On link (no gateway), the next hop is the packet's own destination; through
            // a gateway, the adjacency says it all (as `neighbour` keys IPv4's).
            let on_link = if adj & ADJ_ON_LINK == 0 {
                0
            } else {
                match v
                    .data()
                    .get(24..40)
                    .and_then(|a| <[u8; 16]>::try_from(a).ok())
                {
                    Some(d) => u128::from_be_bytes(d),
                    None => {
                        out.drop(p, crate::ip6::input::reason::TRUNCATED);
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
            if len > mtu_if.1 && wire_len(v.data(), v.meta) > usize::from(mtu_if.1) {
                if v.meta.flags & flag::ORIGINATED != 0 {
                    out.drop(p, reason::LOCAL_TOO_BIG);
                } else {
                    Request::with(Cause::PacketTooBig, u32::from(mtu_if.1)).put(v.meta);
                    out.push(ERROR, p);
                }
                continue;
            }
            let key = (adj, out_if, on_link);
            let slot = (adj ^ (on_link as u32) ^ ((on_link >> 96) as u32) ^ u32::from(out_if))
                .wrapping_mul(0x9e37_79b9) as usize
                >> (32 - CACHE_BITS);
            #[expect(
                clippy::indexing_slicing,
                reason = "`slot` is the top CACHE_BITS bits of a 32-bit hash: below CACHE"
            )]
            let rw = &mut cache[slot];
            if rw.key != key {
                let nh = if adj & ADJ_ON_LINK != 0 {
                    on_link
                } else {
                    host.hop6(adj).map_or(0, |h| h.gateway)
                };
                match Self::resolve(host, cx, out_if, nh, out) {
                    Some(mac) => {
                        // Found above (for its MTU).
                        let Some(iface) = host.ifaces.get(usize::from(out_if)) else {
                            out.drop(p, netbatch_engine::reason::PORT_DOWN);
                            continue;
                        };
                        let gso_ok = host
                            .ports
                            .get(usize::from(iface.port))
                            .map_or(0, |p| gso_kinds(&p.features));
                        *rw = Rewrite::new(
                            iface,
                            key,
                            mac,
                            EtherType::IPV6,
                            self.port_arc(iface.port),
                            gso_ok,
                        );
                    }
                    None => {
                        Self::wait(host, cx, out_if, nh, p, out);
                        continue;
                    }
                }
            }
            if !rw.push_onto(&mut v) {
                out.drop(p, netbatch_engine::reason::NO_HEADROOM);
                continue;
            }
            if u64::from(gso_type) | via_gso == 0 {
                out.push(rw.arc(), p);
                continue;
            }
            out.push(rw.detour(gso_type, &mut via_gso, GSO), p);
        }
    }
}
