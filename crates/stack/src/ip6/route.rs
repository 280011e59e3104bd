//! `ip6-route`: decides local delivery or forwarding by longest-prefix match over /0 to
//! /128 ([`crate::fib6`]).
//!
//! In order, per packet:
//! - a source that is one of our addresses (a global one, or the receiving interface's
//!   link-local address) is martian: `local_source`, as for IPv4 (nobody else may send as
//!   us; DAD probes come from `::`);
//! - a multicast destination is local when this node listens to the group on the
//!   receiving interface: all-nodes `ff02::1`, all-routers `ff02::2` (a router, RFC 4291
//!   2.8), the solicited-node group of one of the interface's addresses (RFC 4861 7.2.1);
//!   on a port paired with a host interface every other group is local too (the kernel's
//!   daemons join theirs: OSPFv3, MLD, RIPng), elsewhere it is dropped
//!   (`ip6_multicast_not_joined`: no multicast routing);
//! - a link-local destination is local when it is the receiving interface's link-local
//!   address and is never forwarded otherwise (`ip6_link_local_dest`, RFC 4291 2.5.6:
//!   link-local addresses are scoped to their link);
//! - everything else is looked up in the FIB: local routes deliver; unicast routes
//!   forward, unless forwarding is off, the frame was link-layer broadcast or multicast
//!   (`forward_l2_broadcast`, as for IPv4), the source is unspecified
//!   (`ip6_forward_source_unspecified`: no node may be answered) or link-local (Destination
//!   Unreachable, beyond scope of the source address: RFC 4443 3.1, RFC 4007 9, as Linux's
//!   `ip6_forward`); blackhole drops silently; unreachable and prohibit routes and a
//!   missing route send the packet to `ip6-icmp-error` with the cause in `Meta::note`.
//!
//! A destination equal to the previous packet's reuses its result without a lookup (the
//! route hint, for one list only); a multipath route's next hop is chosen by the flow
//! hash of the IPv6 4-tuple (as `ip4-route` does, [`crate::route::RoutesOf::lookup_flow`]).

use core::net::Ipv6Addr;
use std::sync::LazyLock;

use netbatch_engine::{Cx, Out, Pkt, PktList, Reason, Stage};
use netbatch_wire::ipv6::{self as wire6, ALL_NODES, ALL_ROUTERS};
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

use super::{Cause, addrs};
use crate::dissect;
use crate::host::Host;
use crate::iface::Iface;
use crate::meta::flag;
use crate::route::{Hop6, RouteKind};

netbatch_engine::reasons! {
    /// Why `ip6-route` drops a packet (besides the routing reasons every family shares,
    /// [`crate::route::reason`]).
    pub mod reason {
        LINK_LOCAL_DEST = "ip6_link_local_dest": "link-local destination that is not ours (never forwarded)",
        MULTICAST_NOT_JOINED = "ip6_multicast_not_joined": "IPv6 multicast group not joined on the interface (no multicast routing)",
        SOURCE_UNSPECIFIED = "ip6_forward_source_unspecified": "packet from the unspecified address cannot be forwarded",
        BEYOND_SCOPE = "ip6_beyond_scope": "link-local source cannot leave its link",
    }
}

netbatch_engine::arcs! {
    /// Arc for local delivery.
    pub LOCAL = "local";
    /// Arc for forwarding.
    pub FORWARD = "forward";
    /// Arc to the ICMPv6 error stage.
    pub ERROR = "error";
}

/// The reasons the stage declares: its own and the shared routing ones.
static REASONS: LazyLock<Vec<Reason>> = LazyLock::new(|| {
    crate::route::reason::ALL
        .iter()
        .chain(reason::ALL)
        .copied()
        .collect()
});

/// The Toeplitz key of the flow hash: RPS's, as in `ip4-route`.
static FLOW_KEY: LazyLock<Toeplitz> = LazyLock::new(|| Toeplitz::new(&MS_KEY));

/// Whether this node listens to multicast group `g` on `iface` (see the module doc).
#[inline]
fn joined(iface: &Iface, g: u128) -> bool {
    if g == u128::from(ALL_NODES) || g == u128::from(ALL_ROUTERS) {
        return true;
    }
    let g = Ipv6Addr::from(g);
    wire6::is_solicited_node(g)
        && (wire6::solicited_node(iface.ll6) == g
            || iface
                .addrs6
                .iter()
                .any(|a| wire6::solicited_node(a.addr) == g))
}

/// The IPv6 routing stage.
#[derive(Debug, Default)]
pub struct Ip6Route {
    /// Packets whose destination was the previous one's (lookups the hint saved).
    pub hint_hits: u64,
}

/// Where a packet the FIB found a unicast hop for goes (the forwarding checks).
#[inline(always)]
fn forward(
    host: &Host,
    src: u128,
    adj: u32,
    hop: Hop6,
    v: &mut netbatch_engine::PktMut<'_>,
) -> Result<(), Reason> {
    if !host.params.forwarding {
        return Err(crate::route::reason::FORWARDING_DISABLED);
    }
    if v.meta.flags & flag::L2_HOST == 0 {
        return Err(crate::route::reason::FORWARD_L2_BROADCAST);
    }
    if src == 0 {
        return Err(reason::SOURCE_UNSPECIFIED);
    }
    v.meta.out_if = hop.out_if;
    v.meta.adj = adj;
    Ok(())
}

/// Routes packet `p` to `dst`, which has no plain hop: by the next hop of its multipath
/// route for the packet's flow hash, or to ICMPv6 as having no route (out of the loop, as
/// `ip4-route` does it).
#[cold]
#[inline(never)]
fn multipath_or_none(host: &Host, cx: &Cx<'_>, src: u128, dst: u128, mut p: Pkt, out: &mut Out) {
    let mut v = cx.pool.get_mut(&mut p);
    match host
        .routes6
        .lookup_flow(dst, || dissect::flow_hash(&mut v, &FLOW_KEY))
    {
        Some((adj, hop)) => match forward(host, src, adj, hop, &mut v) {
            Ok(()) if wire6::is_link_local(src.into()) => {
                v.meta.note = Cause::BeyondScope.note();
                out.push(ERROR, p);
            }
            Ok(()) => out.push(FORWARD, p),
            Err(r) => out.drop(p, r),
        },
        None => {
            v.meta.note = Cause::NoRoute.note();
            out.push(ERROR, p);
        }
    }
}

impl Stage<Host> for Ip6Route {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        &REASONS
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("route_hint_hits", self.hint_hits)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let routes = &*host.routes6;
        let local = routes.local_addrs();
        let mut hint: Option<(u128, Option<(u32, Hop6)>)> = None;
        // The last source checked and whether it is ours (a global address), for the list.
        let mut src_hint: Option<(u128, bool)> = None;
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some((src, dst)) = v.data().first_chunk().map(addrs) else {
                out.drop(p, super::input::reason::TRUNCATED);
                continue;
            };
            let ours = match src_hint {
                Some((s, o)) if s == src => o,
                _ => {
                    let o = local.contains(src);
                    src_hint = Some((src, o));
                    o
                }
            };
            let Some(iface) = host.ifaces.get(usize::from(v.meta.in_if)) else {
                out.drop(p, netbatch_engine::reason::PORT_DOWN);
                continue;
            };
            if ours || u128::from(iface.ll6) == src {
                out.drop(p, crate::route::reason::LOCAL_SOURCE);
                continue;
            }
            // Multicast (ff00::/8) and link-local (fe80::/10) destinations: one test of the
            // top byte for both before the FIB.
            if dst >> 120 == 0xff {
                if joined(iface, dst) || crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                    v.meta.flags |= flag::LOCAL | flag::L3_MULTICAST;
                    out.push(LOCAL, p);
                } else {
                    out.drop(p, reason::MULTICAST_NOT_JOINED);
                }
                continue;
            }
            if dst >> 118 == 0xfe80 >> 6 {
                if u128::from(iface.ll6) == dst {
                    v.meta.flags |= flag::LOCAL;
                    out.push(LOCAL, p);
                } else {
                    out.drop(p, reason::LINK_LOCAL_DEST);
                }
                continue;
            }
            let found = match hint {
                Some((d, h)) if d == dst => {
                    self.hint_hits += 1;
                    h
                }
                _ => {
                    let h = routes.lookup_hop(dst);
                    hint = Some((dst, h));
                    h
                }
            };
            let Some((adj, hop)) = found else {
                multipath_or_none(host, cx, src, dst, p, out);
                continue;
            };
            match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => {
                    v.meta.flags |= flag::LOCAL;
                    out.push(LOCAL, p);
                }
                RouteKind::Unicast => match forward(host, src, adj, hop, &mut v) {
                    // RFC 4007 9: a link-local source never leaves its link.
                    Ok(()) if src >> 118 == 0xfe80 >> 6 => {
                        v.meta.note = Cause::BeyondScope.note();
                        out.push(ERROR, p);
                    }
                    Ok(()) => out.push(FORWARD, p),
                    Err(r) => out.drop(p, r),
                },
                RouteKind::Blackhole => out.drop(p, crate::route::reason::BLACKHOLE),
                RouteKind::Unreachable => {
                    v.meta.note = Cause::RouteUnreachable.note();
                    out.push(ERROR, p);
                }
                RouteKind::Prohibit => {
                    v.meta.note = Cause::RouteProhibit.note();
                    out.push(ERROR, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_wire::ethernet::MacAddr;

    /// The groups a router's interface listens to: all-nodes, all-routers, and the
    /// solicited-node groups of its link-local and global addresses (RFC 4291 2.7.1,
    /// 2.8); not another node's solicited-node group, nor other groups.
    #[test]
    fn joined_groups_are_a_routers() {
        let mut f = Iface::new(
            "eth0",
            0,
            Default::default(),
            MacAddr([2, 0, 0, 0, 0, 1]),
            1500,
            vec![],
        );
        f.addrs6.push("2001:db8::1:2:3/64".parse().unwrap());
        let g = |s: &str| u128::from(s.parse::<Ipv6Addr>().unwrap());
        // fe80::ff:fe00:1 (from the MAC) → ff02::1:ff00:1; 2001:db8::1:2:3 → ff02::1:ff02:3.
        for yes in ["ff02::1", "ff02::2", "ff02::1:ff00:1", "ff02::1:ff02:3"] {
            assert!(joined(&f, g(yes)), "{yes}");
        }
        for no in ["ff02::5", "ff02::1:ff00:2", "ff05::2", "ff02::16"] {
            assert!(!joined(&f, g(no)), "{no}");
        }
    }
}
