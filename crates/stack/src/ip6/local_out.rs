//! `ip6-local-out`: routes IPv6 packets this host originates (echo replies, neighbour
//! advertisements, ICMPv6 errors, application sends) and finishes them.
//!
//! The packet starts at its IPv6 header. A link-scope destination (link-local unicast,
//! a multicast group) cannot be routed: it leaves by the interface its maker named in
//! `Meta::out_if` (the one the packet it answers arrived on), on link (`ip6_no_scope`
//! when none is named: RFC 4007 6, a link-local address means nothing without its zone).
//! Other destinations are looked up: one of our addresses loops back to `ip6-local`, a
//! unicast route sends it on, the other kinds drop it (no ICMPv6 error is made about our
//! own packets). A source left unspecified (an application bound to `::`) is filled with
//! our address toward the destination ([`crate::iface::Iface::source6_for`]) and the
//! upper-layer checksum (UDP, ICMPv6) computed again over the new pseudo-header.

use core::net::Ipv6Addr;

use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::checksum;
use netbatch_wire::ipv6::{self as wire6, HEADER_LEN, Ipv6Packet};

use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};
use crate::route::{ADJ_ON_LINK, RouteKind};

netbatch_engine::reasons! {
    /// Why `ip6-local-out` drops a packet we made.
    pub mod reason {
        NO_SCOPE = "ip6_no_scope": "link-scope IPv6 destination with no interface to send it by",
    }
}

netbatch_engine::arcs! {
    /// Arc toward the output hooks and `ip6-neighbour`.
    pub OK = "ok";
    /// Arc back into local delivery (destination is ours).
    pub LOCAL = "local";
}

/// The IPv6 local output stage.
#[derive(Debug, Default)]
pub struct Ip6LocalOut;

/// Writes `src` into the packet `d` (from its IPv6 header) and its upper layer's checksum
/// again, for UDP and ICMPv6 whose header starts at `l4` (bytes into `d`).
fn fill_source(d: &mut [u8], src: Ipv6Addr, l4: Option<usize>, proto: u8) {
    let Some(h) = d.first_chunk_mut::<HEADER_LEN>() else {
        return;
    };
    let mut ip = Ipv6Packet::new_unchecked(h);
    ip.set_src(src);
    let dst = ip.dst();
    let (Some(l4), at) = (
        l4,
        match proto {
            17 => 6,
            58 => 2,
            _ => return,
        },
    ) else {
        return;
    };
    let Some(msg) = d.get_mut(l4..) else {
        return;
    };
    let Some(field) = msg.get_mut(at..at + 2) else {
        return;
    };
    field.fill(0);
    let len = msg.len();
    let acc = checksum::pseudo_header_v6(src, dst, proto, len as u32);
    let c = checksum::finish(checksum::sum(msg, acc));
    // UDP sends 0xffff for a sum of zero (0 means "no checksum", RFC 8200 8.1 forbids it).
    let c = if proto == 17 && c == 0 { 0xffff } else { c };
    if let Some(field) = msg.get_mut(at..at + 2) {
        field.copy_from_slice(&c.to_be_bytes());
    }
}

/// `ip6-local-out`: where IPv6 packets this host makes enter.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::CT_OUT, "accept6")),
        ("local", To::Node(node::IP6_LOCAL)),
    ],
    reasons: &[
        reason::ALL,
        crate::route::reason::ALL,
        super::input::reason::ALL,
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::OutIf, Field::Origin]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Dest, Field::Adj, Field::OutIf]),
    ..Decl::new(node::IP6_LOCAL_OUT, |_| Box::new(Ip6LocalOut))
};

impl Stage<Host> for Ip6LocalOut {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        static REASONS: std::sync::LazyLock<Vec<netbatch_engine::Reason>> =
            std::sync::LazyLock::new(|| {
                crate::route::reason::ALL
                    .iter()
                    .chain(reason::ALL)
                    .copied()
                    .collect()
            });
        &REASONS
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some((src, dst)) = super::header(v.data()).map(|ip| (ip.src(), ip.dst())) else {
                out.drop(p, super::input::reason::TRUNCATED);
                continue;
            };
            dissect::ip6_packet(&mut v);
            let link_scope = wire6::is_link_local(dst)
                || wire6::multicast_scope(dst).is_some_and(|s| s <= wire6::scope::LINK_LOCAL);
            let (out_if, adj) = if link_scope {
                if v.meta.out_if == u16::MAX {
                    out.drop(p, reason::NO_SCOPE);
                    continue;
                }
                (v.meta.out_if, ADJ_ON_LINK)
            } else {
                // An answer to a packet of a VRF is routed in that VRF.
                let (routes, tag) = host.routes6_for(v.meta.in_port, v.meta.in_if);
                let Some((adj, hop)) = routes.lookup_adj(u128::from(dst)) else {
                    out.drop(p, crate::route::reason::NO_ROUTE);
                    continue;
                };
                match hop.kind {
                    RouteKind::Unicast => (hop.out_if, adj | tag),
                    RouteKind::Local | RouteKind::Broadcast => {
                        if src.is_unspecified() {
                            let (l4, proto) = (dissect::ihl(v.meta), v.meta.l4_type);
                            fill_source(v.data_mut(), dst, l4, proto);
                        }
                        v.meta.flags |= flag::LOCAL | flag::L2_HOST;
                        out.push(LOCAL, p);
                        continue;
                    }
                    RouteKind::Blackhole => {
                        out.drop(p, crate::route::reason::BLACKHOLE);
                        continue;
                    }
                    RouteKind::Unreachable => {
                        out.drop(p, crate::route::reason::UNREACHABLE);
                        continue;
                    }
                    RouteKind::Prohibit => {
                        out.drop(p, crate::route::reason::PROHIBIT);
                        continue;
                    }
                    RouteKind::Throw => {
                        out.drop(p, crate::route::reason::NO_ROUTE);
                        continue;
                    }
                }
            };
            let Some(iface) = host.ifaces.get(usize::from(out_if)) else {
                out.drop(p, netbatch_engine::reason::PORT_DOWN);
                continue;
            };
            if src.is_unspecified() {
                let s = iface.source6_for(dst);
                let (l4, proto) = (dissect::ihl(v.meta), v.meta.l4_type);
                fill_source(v.data_mut(), s, l4, proto);
            }
            v.meta.out_if = out_if;
            v.meta.adj = adj;
            out.push(OK, p);
        }
    }
}
