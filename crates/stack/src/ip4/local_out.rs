//! `ip4-local-out`: routes packets this host originates (echo replies, ICMP errors,
//! application sends) and finishes their header.
//!
//! The packet starts at its IPv4 header with `src` possibly 0.0.0.0 (filled from the
//! output interface, RFC 1122 3.3.4.2 style source selection) and the header checksum
//! unset (computed here). A destination that is ours loops back to `ip4-local`. No ICMP
//! error is generated about our own packets: failures are drops.

use core::net::Ipv4Addr;

use netbatch_engine::meta::flag;
use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};

use super::be32;
use crate::host::Host;
use crate::route::RouteKind;

/// Arc toward the output hooks and the neighbour stage.
pub const OK: Next = Next(0);
/// Arc back into local delivery (destination is ours).
pub const LOCAL: Next = Next(1);

/// The local output stage.
#[derive(Debug, Default)]
pub struct Ip4LocalOut;

impl Stage<Host> for Ip4LocalOut {
    fn arcs(&self) -> &[&'static str] {
        &["ok", "local"]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            if v.meta.len < 20 {
                out.drop(p, DropReason::Ip4Truncated);
                continue;
            }
            let dst = be32(v.data(), 16);
            let Some(hop) = host.routes.lookup(dst) else {
                out.drop(p, DropReason::NoRoute);
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
                        out.drop(p, DropReason::PortDown);
                        continue;
                    };
                    if be32(v.data(), 12) == 0 {
                        let Some(src) = iface.source_for(Ipv4Addr::from(dst)) else {
                            out.drop(p, DropReason::NoRoute);
                            continue;
                        };
                        v.data_mut()[12..16].copy_from_slice(&src.octets());
                    }
                    netbatch_wire::ipv4::fill_header_checksum(v.data_mut(), ihl);
                    v.meta.out_if = hop.out_if;
                    v.meta.next_hop = if hop.gateway == 0 { dst } else { hop.gateway };
                    out.push(OK, p);
                }
                RouteKind::Blackhole => out.drop(p, DropReason::RouteBlackhole),
                RouteKind::Unreachable => out.drop(p, DropReason::RouteUnreachable),
                RouteKind::Prohibit => out.drop(p, DropReason::RouteProhibit),
            }
        }
    }
}
