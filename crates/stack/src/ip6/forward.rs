//! `ip6-forward`: the hop limit of packets in transit (RFC 8200 3).
//!
//! Hop limit ≤ 1 → ICMPv6 Time Exceeded, code 0 (RFC 4443 3.3: a router that receives a
//! packet with a hop limit of 0, or decrements it to 0, discards it and answers).
//! Otherwise the hop limit is decremented: IPv6 has no header checksum, so nothing else
//! changes. The output MTU is checked once, by `ip6-neighbour`, for forwarded and local
//! packets alike: too large is answered with Packet Too Big (routers never fragment,
//! RFC 8200 5).
//!
//! A packet that leaves by the interface it arrived on may also cause an ICMPv6 Redirect
//! (RFC 4861 8.2, [`super::redirect`]): the packet is forwarded all the same, and the
//! redirect, a new packet, takes the `redirect` arc to `ip6-local-out` after the list.
//!
//! Hop-by-hop options are not processed in transit (RFC 8200 4.3 lets a node skip them
//! unless configured to examine them).

use netbatch_engine::{Cx, Out, PktList, Stage};

use super::icmp_error::Request;
use super::{Cause, header_mut};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `ip6-forward` stops a packet.
    pub mod reason {
        HOP_LIMIT = "ip6_hop_limit_exceeded": "IPv6 hop limit reached zero in transit",
    }
}

netbatch_engine::arcs! {
    /// Arc for packets that go on.
    pub OK = "ok";
    /// Arc to the ICMPv6 error stage.
    pub ERROR = "error";
    /// Arc of the redirects made (new packets), to `ip6-local-out`.
    pub REDIRECT = "redirect";
}

/// The IPv6 forwarding stage.
#[derive(Debug, Default)]
pub struct Ip6Forward {
    /// Redirects made for the list being processed, handed on after it.
    redirects: PktList,
    /// What became of the packets that left by the interface they arrived on.
    counts: crate::ip4::forward::RedirectCounts,
}

/// `ip6-forward`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::HOOK_FORWARD, "accept6")),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
        ("redirect", To::Node(node::IP6_LOCAL_OUT)),
    ],
    reasons: &[reason::ALL, super::input::reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::InIf, Field::OutIf, Field::Adj]),
    writes: Fields::of(&[Field::Origin, Field::Ask]),
    ..Decl::new(node::IP6_FORWARD, |_| Box::new(Ip6Forward::default()))
};

impl Stage<Host> for Ip6Forward {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.counts.named()
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some(mut ip) = header_mut(v.data_mut()) else {
                out.drop(p, super::input::reason::TRUNCATED);
                continue;
            };
            let hl = ip.hop_limit();
            if hl <= 1 {
                Request::new(Cause::HopLimitExceeded).put(v.meta);
                out.push(ERROR, p);
                continue;
            }
            ip.set_hop_limit(hl - 1);
            v.meta.flags |= flag::FORWARDED;
            let back = v.meta.out_if == v.meta.in_if;
            if back && host.params.send_redirects {
                let (o, q) = super::redirect::make(host, cx, &p);
                self.counts.count(o);
                self.redirects.extend(q);
            }
            out.push(OK, p);
        }
        for q in self.redirects.drain(..) {
            out.push(REDIRECT, q);
        }
    }
}
