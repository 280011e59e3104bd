//! `ip4-route`: decides local delivery or forwarding by longest-prefix match.
//!
//! Multicast destinations are local (delivered to a socket bound to the group's port,
//! else dropped without ICMP). A destination equal to the previous packet's reuses its
//! result without a lookup (the kernel's route hint, `ip_list_rcv_finish`); the hint lives
//! for one list only, so per-packet mode never has one.
//!
//! A unicast packet received as link-layer broadcast or multicast is not forwarded (RFC
//! 1812 5.3.4). Unreachable and prohibit routes and a missing route send the packet to
//! `ip4-icmp-error` with the reason in `Meta::reason`; blackhole routes drop silently.

use netbatch_engine::meta::flag;
use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};

use super::be32;
use crate::host::Host;
use crate::prefix::class;
use crate::route::{Hop, RouteKind};

/// Arc for local delivery.
pub const LOCAL: Next = Next(0);
/// Arc for forwarding.
pub const FORWARD: Next = Next(1);
/// Arc to the ICMP error stage.
pub const ERROR: Next = Next(2);

/// The routing stage.
#[derive(Debug, Default)]
pub struct Ip4Route {
    /// Lookups avoided by the route hint (for reports).
    pub hint_hits: u64,
}

impl Stage<Host> for Ip4Route {
    fn arcs(&self) -> &[&'static str] {
        &["local", "forward", "error"]
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("route_hint_hits", self.hint_hits)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let routes = &*host.routes;
        let forwarding = host.params.forwarding;
        let mut hint: Option<(u32, Option<Hop>)> = None;
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            let dst = be32(v.data(), 16);
            if class::is_multicast(dst) {
                v.meta.flags |= flag::LOCAL | flag::L3_MULTICAST;
                out.push(LOCAL, p);
                continue;
            }
            let hop = match hint {
                Some((d, h)) if d == dst => {
                    self.hint_hits += 1;
                    h
                }
                _ => {
                    let h = routes.lookup(dst);
                    hint = Some((dst, h));
                    h
                }
            };
            let Some(hop) = hop else {
                v.meta.reason = DropReason::NoRoute as u16;
                out.push(ERROR, p);
                continue;
            };
            match hop.kind {
                RouteKind::Local => {
                    v.meta.flags |= flag::LOCAL;
                    out.push(LOCAL, p);
                }
                RouteKind::Broadcast => {
                    v.meta.flags |= flag::LOCAL | flag::L3_BROADCAST;
                    out.push(LOCAL, p);
                }
                RouteKind::Unicast => {
                    if !forwarding {
                        out.drop(p, DropReason::ForwardingDisabled);
                    } else if v.meta.flags & flag::L2_HOST == 0 {
                        out.drop(p, DropReason::ForwardL2Broadcast);
                    } else {
                        v.meta.out_if = hop.out_if;
                        v.meta.next_hop = if hop.gateway == 0 { dst } else { hop.gateway };
                        out.push(FORWARD, p);
                    }
                }
                RouteKind::Blackhole => out.drop(p, DropReason::RouteBlackhole),
                RouteKind::Unreachable => {
                    v.meta.reason = DropReason::RouteUnreachable as u16;
                    out.push(ERROR, p);
                }
                RouteKind::Prohibit => {
                    v.meta.reason = DropReason::RouteProhibit as u16;
                    out.push(ERROR, p);
                }
            }
        }
    }
}
