//! `ip4-local-out`: routes packets this host originates (echo replies, ICMP errors,
//! application sends) and finishes their header.
//!
//! The packet starts at its IPv4 header with `src` possibly 0.0.0.0 (filled from the
//! output interface, RFC 1122 3.3.4.2 style source selection) and the header checksum
//! unset (computed here). A destination that is ours loops back to `ip4-local`. No ICMP
//! error is generated about our own packets: failures are drops.
//!
//! A packet made in answer to a received one (an echo reply, an ICMP error: it still
//! has the port it came in by) is routed in the VRF of the interface that one came in
//! by (`Host::routes_for`); what netbatch originates itself (application sends) is
//! routed in `main`.

use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::ipv4::Ipv4Packet;

use super::header;
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};
use crate::route::RouteKind;

netbatch_engine::arcs! {
    /// Arc toward the output hooks and the neighbour stage.
    pub OK = "ok";
    /// Arc back into local delivery (destination is ours).
    pub LOCAL = "local";
}

/// The local output stage.
#[derive(Debug, Default)]
pub struct Ip4LocalOut;

/// `ip4-local-out`: where packets this host makes enter.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::CT_OUT, "accept")),
        ("local", To::Node(node::IP4_LOCAL)),
    ],
    reasons: &[crate::route::reason::ALL, super::input::reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::OutIf, Field::Origin]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Dest, Field::Adj, Field::OutIf]),
    ..Decl::new(node::IP4_LOCAL_OUT, |_| Box::new(Ip4LocalOut))
};

impl Stage<Host> for Ip4LocalOut {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        crate::route::reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some((src, dst)) = header(v.data()).map(|ip| (ip.src(), ip.dst())) else {
                out.drop(p, crate::ip4::input::reason::TRUNCATED);
                continue;
            };
            // An answer to a packet of a VRF is routed in that VRF.
            let (routes, tag) = host.routes_for(v.meta.in_port, v.meta.in_if);
            let Some((adj, hop)) = routes.lookup_adj(u32::from(dst)) else {
                out.drop(p, crate::route::reason::NO_ROUTE);
                continue;
            };
            dissect::ip4_packet(&mut v);
            let Some(ihl) = dissect::ihl(v.meta) else {
                out.drop(p, crate::ip4::input::reason::HEADER_LEN);
                continue;
            };
            let Some(mut ip) = v.data_mut().get_mut(..ihl).map(Ipv4Packet::new_unchecked) else {
                out.drop(p, crate::ip4::input::reason::TRUNCATED);
                continue;
            };
            match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => {
                    if src.is_unspecified() {
                        ip.set_src(dst);
                    }
                    ip.fill_checksum();
                    v.meta.flags |= flag::LOCAL | flag::L2_HOST;
                    if hop.kind == RouteKind::Broadcast {
                        v.meta.flags |= flag::L3_BROADCAST;
                    }
                    out.push(LOCAL, p);
                }
                RouteKind::Unicast => {
                    let Some(iface) = host.ifaces.get(usize::from(hop.out_if)) else {
                        out.drop(p, netbatch_engine::reason::PORT_DOWN);
                        continue;
                    };
                    if src.is_unspecified() {
                        let Some(src) = iface.source_for(dst) else {
                            out.drop(p, crate::route::reason::NO_ROUTE);
                            continue;
                        };
                        ip.set_src(src);
                    }
                    ip.fill_checksum();
                    v.meta.out_if = hop.out_if;
                    v.meta.adj = adj | tag;
                    out.push(OK, p);
                }
                RouteKind::Blackhole => out.drop(p, crate::route::reason::BLACKHOLE),
                RouteKind::Unreachable => out.drop(p, crate::route::reason::UNREACHABLE),
                RouteKind::Prohibit => out.drop(p, crate::route::reason::PROHIBIT),
                RouteKind::Throw => out.drop(p, crate::route::reason::NO_ROUTE),
            }
        }
    }
}
