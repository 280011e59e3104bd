//! `ip4-local-out`: routes packets this host originates (echo replies, ICMP errors,
//! application sends) and finishes their header.
//!
//! The packet starts at its IPv4 header with `src` possibly 0.0.0.0 (filled from the
//! output interface, RFC 1122 3.3.4.2 style source selection) and the header checksum
//! unset (computed here). A destination that is ours loops back to `ip4-local`. No ICMP
//! error is generated about our own packets: failures are drops.

use core::net::Ipv4Addr;

use crate::meta::flag;
use netbatch_engine::{Cx, Out, PktList, Stage};

use super::be32;
use crate::host::Host;
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
            if v.meta.len < 20 {
                out.drop(p, crate::ip4::input::reason::TRUNCATED);
                continue;
            }
            let dst = be32(v.data(), 16);
            let Some((adj, hop)) = host.routes.lookup_adj(dst) else {
                out.drop(p, crate::route::reason::NO_ROUTE);
                continue;
            };
            let ihl = usize::from(v.data()[0] & 0x0f) * 4;
            v.meta.l3 = v.meta.data;
            v.meta.l4 = v.meta.data + ihl as u16;
            match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => {
                    if be32(v.data(), 12) == 0 {
                        v.data_mut()[12..16].copy_from_slice(&dst.to_be_bytes());
                    }
                    netbatch_wire::ipv4::fill_header_checksum(v.data_mut(), ihl);
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
                    if be32(v.data(), 12) == 0 {
                        let Some(src) = iface.source_for(Ipv4Addr::from(dst)) else {
                            out.drop(p, crate::route::reason::NO_ROUTE);
                            continue;
                        };
                        v.data_mut()[12..16].copy_from_slice(&src.octets());
                    }
                    netbatch_wire::ipv4::fill_header_checksum(v.data_mut(), ihl);
                    v.meta.out_if = hop.out_if;
                    v.meta.adj = adj;
                    out.push(OK, p);
                }
                RouteKind::Blackhole => out.drop(p, crate::route::reason::BLACKHOLE),
                RouteKind::Unreachable => out.drop(p, crate::route::reason::UNREACHABLE),
                RouteKind::Prohibit => out.drop(p, crate::route::reason::PROHIBIT),
            }
        }
    }
}
