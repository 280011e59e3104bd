//! `ip6-icmp-error`: turns a packet that carries a [`Request`] (the [`Cause`] of an
//! ICMPv6-worthy failure, and the pointer or MTU its message carries) into that error
//! (RFC 4443), in its own buffer, and sends it to `ip6-local-out`.
//!
//! The error is built in the offending packet's buffer (nothing is allocated): a fresh
//! IPv6 header and the ICMPv6 header are pushed in front of as much of the packet as fits
//! in the minimum MTU (1280 bytes in all, RFC 4443 2.4 (c)). A forwarded packet is quoted
//! as it was received (its hop limit restored). A super-packet becomes one error; the wire
//! packets it stood for beyond the first are counted as dropped for the cause's reason.
//!
//! No error is sent (RFC 4443 2.4 (e)) about: an ICMPv6 error message or a Redirect
//! (e.1, e.2); a packet to a multicast address, or in a link-layer multicast or broadcast
//! frame, except Packet Too Big and Parameter Problem code 2 (e.3–e.5); a packet whose
//! source does not name one node, the unspecified or a multicast address (e.6); a packet
//! we originated. Errors are rate limited by a token bucket (2.4 (f)).
//!
//! The source of the error (RFC 4443 2.2): the packet's destination when it was one of our
//! unicast addresses; else our address toward the sender as its route back chooses it
//! (the link-local address for a link-local sender, who can be answered only on its
//! link), falling back to the interface the packet arrived on.

use core::net::Ipv6Addr;

use netbatch_engine::{Cx, Out, PktList, Reason, Stage};
use netbatch_wire::icmpv6::{self, Icmpv6Packet, Icmpv6Type};
use netbatch_wire::ipv6::{self as wire6, HEADER_LEN, Ipv6Packet, Ipv6Repr, Protocol};

use super::{Cause, header, header_mut};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::{self, Dissected, L4};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};
use crate::route::RouteKind;

netbatch_engine::reasons! {
    /// Why `ip6-icmp-error` drops a packet it has no cause for.
    pub mod reason {
        NO_CAUSE = "icmp6_error_no_cause": "sent to the ICMPv6 error stage without a cause (bug guard)",
    }
}

netbatch_engine::arcs! {
    /// Arc to `ip6-local-out`.
    pub OUT = "out";
}

/// Hop limit of the errors (Linux's default for its own packets).
const HOP_LIMIT: u8 = 64;

/// The longest quote: the error fits in the minimum MTU.
const MAX_QUOTE: usize = icmpv6::MAX_ERROR_LEN - icmpv6::HEADER_LEN;

/// A request for an ICMPv6 error: a [`Cause`] and the parameter its message carries.
pub type Request = crate::ask::Request<Cause>;

/// The ICMPv6 error generator.
#[derive(Debug, Default)]
pub struct Ip6IcmpError {
    sent: [u64; Cause::ALL.len()],
}

/// Whether an error for `cause` may answer the packet `d` (starting at its IPv6 header)
/// with metadata `m` (see the module doc).
fn may_answer(d: &[u8], m: &netbatch_engine::Meta, cause: Cause) -> bool {
    if m.flags & flag::ORIGINATED != 0 {
        return false;
    }
    let Some(ip) = header(d) else {
        return false;
    };
    let (src, dst) = (ip.src(), ip.dst());
    if src.is_unspecified() || src.is_multicast() {
        return false;
    }
    if !cause.answers_multicast()
        && (dst.is_multicast()
            || m.flags & (flag::L2_BROADCAST | flag::L2_MULTICAST | flag::L3_MULTICAST) != 0)
    {
        return false;
    }
    // An ICMPv6 error or Redirect is never answered; a later fragment cannot tell.
    let r = Dissected::load(m);
    if r.l4_kind() == Some(L4::Icmpv6) && m.flags & flag::FRAG6_LATER == 0 {
        match dissect::icmp6_type(&r, d) {
            Some((t, _)) if !t.is_error() && t != Icmpv6Type::REDIRECT => {}
            _ => return false,
        }
    }
    true
}

/// The source address of an error about the packet `d` (see the module doc), which
/// arrived on interface `in_if` with flags `flags`.
fn error_source(host: &Host, d: &[u8], flags: u32, in_if: u16) -> Option<Ipv6Addr> {
    let ip = header(d)?;
    let (sender, dst) = (ip.src(), ip.dst());
    if flags & flag::LOCAL != 0 && !dst.is_multicast() && host.is_local6(dst, in_if) {
        return Some(dst);
    }
    let arrived = host.ifaces.get(usize::from(in_if));
    if wire6::is_link_local(sender) {
        return arrived.map(|i| i.ll6);
    }
    // Toward the sender in the VRF the packet came from.
    if let Some(hop) = host
        .policy6
        .vrf_routes(&host.routes6, in_if)
        .0
        .lookup(u128::from(sender))
        && hop.kind == RouteKind::Unicast
        && let Some(i) = host.ifaces.get(usize::from(hop.out_if))
    {
        return Some(i.source6_for(sender));
    }
    arrived.map(|i| i.source6_for(sender))
}

/// `ip6-icmp-error`. It drops, when no error may be sent, with the reason of the failure
/// that asked for it: those sets are declared here too.
pub const DECL: Decl = Decl {
    arcs: &[("out", To::Node(node::IP6_LOCAL_OUT))],
    reasons: &[
        reason::ALL,
        crate::ip6::input::reason::ALL,
        crate::route::reason::ALL,
        crate::ip6::route::reason::ALL,
        crate::ip6::local::reason::ALL,
        crate::udp::input::reason::ALL,
        crate::ip6::forward::reason::ALL,
        crate::nd::resolve::reason::ALL,
        crate::neigh::reason::ALL,
        crate::defrag::reason::ALL,
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[
        Field::Ask,
        Field::L3,
        Field::L4,
        Field::InIf,
        Field::L2Class,
        Field::Dest,
        Field::Origin,
        Field::Gso,
    ]),
    writes: Fields::of(&[Field::OutIf, Field::Origin, Field::Gso, Field::Ask]),
    ..Decl::new(node::IP6_ICMP_ERROR, |_| Box::new(Ip6IcmpError::default()))
};

impl Stage<Host> for Ip6IcmpError {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        Cause::ALL
            .iter()
            .zip(self.sent)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.counter(), n))
            .collect()
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some(Request { cause, param }) = Request::take(&mut *v.meta) else {
                out.drop(p, reason::NO_CAUSE);
                continue;
            };
            let ((ty, code), why) = (cause.icmp(), cause.reason());
            if !may_answer(v.data(), v.meta, cause) {
                host.stats.icmp6_errors_suppressed += 1;
                out.drop(p, why);
                continue;
            }
            let in_if = v.meta.in_if;
            let Some(src) = error_source(host, v.data(), v.meta.flags, in_if) else {
                host.stats.icmp6_errors_suppressed += 1;
                out.drop(p, why);
                continue;
            };
            if !host.icmp6_limit.allow(cx.now_ns) {
                host.stats.icmp6_errors_rate_limited += 1;
                out.drop(p, why);
                continue;
            }
            let wire = v.meta.wire_packets();
            if let Some(chain) = v.meta.chain.take() {
                cx.cache.free(chain);
            }
            let forwarded = v.meta.flags & flag::FORWARDED != 0;
            let Some(mut ip) = header_mut(v.data_mut()) else {
                out.drop(p, why);
                continue;
            };
            if forwarded {
                // Quote the header as it was received: undo forwarding's decrement.
                ip.set_hop_limit(ip.hop_limit().wrapping_add(1));
            }
            let sender = ip.src();
            let quote = usize::from(v.meta.len).min(MAX_QUOTE);
            v.truncate(quote);
            let Some(h) = v
                .push(HEADER_LEN + icmpv6::HEADER_LEN)
                .and_then(|h| h.get_mut(..HEADER_LEN))
            else {
                out.drop(p, why);
                continue;
            };
            Ipv6Repr {
                src,
                dst: sender,
                next_header: Protocol::ICMPV6,
                payload_len: icmpv6::HEADER_LEN + quote,
                hop_limit: HOP_LIMIT,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut Ipv6Packet::new_unchecked(h));
            let Some(msg) = v.data_mut().get_mut(HEADER_LEN..) else {
                out.drop(p, why);
                continue;
            };
            let mut icmp = Icmpv6Packet::new_unchecked(msg);
            icmp.set_msg_type(Icmpv6Type(ty));
            icmp.set_code(code);
            // The MTU of Packet Too Big, the pointer of Parameter Problem, else unused
            // (RFC 4443 3.1–3.4).
            icmp.set_rest_of_header(match cause.icmp().0 {
                2 | 4 => param,
                _ => 0,
            });
            icmp.fill_checksum(src, sender);
            let m = &mut *v.meta;
            m.flags = (m.flags & flag::TRACE) | flag::ORIGINATED;
            // A link-local sender is answered on the link it is on.
            m.out_if = if wire6::is_link_local(sender) {
                in_if
            } else {
                u16::MAX
            };
            m.gso_size = 0;
            m.gso_type = 0;
            m.segs = 1;
            host.stats.icmp6_errors_out += 1;
            if let Some((_, n)) = Cause::ALL
                .iter()
                .zip(&mut self.sent)
                .find(|(c, _)| **c == cause)
            {
                *n += 1;
            }
            if wire > 1 {
                out.count_drop(why, wire - 1);
            }
            out.push(OUT, p);
        }
    }
}
