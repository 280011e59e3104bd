//! ICMP Redirect for Host (RFC 792, RFC 1812 5.2.7.2), made by `ip4-forward` beside the
//! packet it forwards.
//!
//! A redirect is no error: the packet itself is still forwarded (as Linux forwards it),
//! and the redirect is a new packet, made in a buffer of its own and counted as
//! originated, that goes to `ip4-local-out`. It is sent when all of these hold:
//! - `send_redirects` is on (`[icmp] send_redirects`, Linux's
//!   `net.ipv4.conf.*.send_redirects`);
//! - the packet leaves by the interface it arrived on (RFC 1812 5.2.7.2);
//! - its source and the next hop share a subnet of that interface (RFC 1812 5.2.7.2: the
//!   sender could reach the next hop itself; Linux asks that the source be on-link, its
//!   route back a connected one, and, with `shared_media` off, that source and next hop
//!   share a subnet);
//! - it carries no source route (RFC 1812 5.2.7.2);
//! - an ICMP error could be sent about it (`icmp_error::may_answer`, as Linux's
//!   `icmp_send` checks for a redirect too: no redirect about an ICMP error, a non-first
//!   fragment, a broadcast or multicast, a martian source);
//! - the redirect rate limit allows it ([`crate::host::Host::redirect_limit`], a token
//!   bucket of its own: Linux's `icmp_ratelimit` does not cover redirects, its
//!   `icmp_ratemask` leaves type 5 out, and it backs off per sender instead; sharing the
//!   error bucket would let redirects starve Time Exceeded and Unreachable);
//! - a buffer can be had (else counted in `alloc_failures`).
//!
//! The redirect is code 1 (Redirect for Host: RFC 1812 5.2.7.2, routers must not send
//! network redirects), its gateway the route's next hop, or the destination itself when
//! that is on-link. It quotes as much of the packet as fits in 576 bytes (RFC 1812
//! 4.3.2.3), as forwarding left it (TTL decremented, as Linux quotes it), and goes from
//! our address toward the sender (`icmp_error::error_source`) with the
//! precedence of ICMP errors.

use core::net::Ipv4Addr;

use netbatch_engine::{Cx, Meta, Pkt};
use netbatch_wire::icmpv4::{Icmpv4Packet, Icmpv4Type};
use netbatch_wire::ipv4::Ipv4Packet;

use super::{header, icmp_error, options};
use crate::host::Host;
use crate::meta::flag;

/// Largest redirect datagram (RFC 1812 4.3.2.3).
const MAX_LEN: usize = 576;

/// The code of a Redirect for Host (RFC 792).
pub const CODE_HOST: u8 = 1;

/// What became of a packet that could have been redirected (for the stage's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A redirect was made.
    Sent,
    /// None may be sent about it (see the module doc).
    NotEligible,
    /// The rate limit refused it.
    RateLimited,
    /// No buffer could be had.
    NoBuffer,
}

/// The gateway a redirect about the packet `d` (from its IPv4 header) with metadata `m`,
/// forwarded back out of the interface it arrived on, names (the next hop), and the
/// packet's sender the redirect goes to, when one may be sent (see the module doc).
fn gateway(host: &Host, m: &Meta, d: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let ip = header(d)?;
    let hop = host.hop(m.adj)?;
    let (src, dst) = (ip.src(), ip.dst());
    let gw = if hop.gateway == 0 {
        dst
    } else {
        Ipv4Addr::from(hop.gateway)
    };
    let iface = host.ifaces.get(usize::from(m.in_if))?;
    if !iface
        .addrs
        .iter()
        .any(|a| a.subnet().contains(src) && a.subnet().contains(gw))
    {
        return None;
    }
    if ip.header_len() > 20 {
        let h = d.get(..ip.header_len())?;
        if !options::scan(h).is_ok_and(|f| f.srr.is_none()) {
            return None;
        }
    }
    icmp_error::may_answer(d, m.flags).then_some((gw, src))
}

/// Makes the redirect about packet `p` (forwarded, out of the interface it arrived on)
/// into a new buffer, when one may be sent: the new packet, for `ip4-local-out`.
#[cold]
#[inline(never)]
pub fn make(host: &mut Host, cx: &mut Cx<'_>, p: &Pkt) -> (Outcome, Option<Pkt>) {
    let pool = cx.pool;
    let v = pool.get(p);
    let (m, d) = (v.meta, v.data());
    let Some((gw, sender)) = gateway(host, m, d) else {
        return (Outcome::NotEligible, None);
    };
    let Some(src) = icmp_error::error_source(host, d, m.flags, m.in_if) else {
        return (Outcome::NotEligible, None);
    };
    if !host.redirect_limit.allow(cx.now_ns) {
        host.stats.icmp_redirects_rate_limited += 1;
        return (Outcome::RateLimited, None);
    }
    let Some(mut q) = cx.cache.alloc() else {
        host.stats.alloc_failures += 1;
        return (Outcome::NoBuffer, None);
    };
    let quoted = d.get(..MAX_LEN - 28).unwrap_or(d);
    let quote = quoted.len();
    let (trace, in_if) = (m.flags & flag::TRACE, m.in_if);
    let ident = host.next_ident();
    let mut w = pool.get_mut(&mut q);
    // The outer header, then the ICMP message: its 8-byte header and the quote.
    let room = w
        .append(28 + quote)
        .and_then(|b| b.split_first_chunk_mut::<20>())
        .and_then(|(outer, msg)| {
            msg.get_mut(8..)?.copy_from_slice(quoted);
            Some((outer, msg))
        });
    let Some((outer, msg)) = room else {
        cx.cache.free(q);
        host.stats.alloc_failures += 1;
        return (Outcome::NoBuffer, None);
    };
    icmp_error::outer_header(src, sender, quote, ident)
        .emit(&mut Ipv4Packet::new_unchecked(outer.as_mut_slice()));
    let mut icmp = Icmpv4Packet::new_unchecked(msg);
    icmp.set_msg_type(Icmpv4Type::REDIRECT);
    icmp.set_code(CODE_HOST);
    icmp.set_rest_of_header(u32::from(gw));
    icmp.fill_checksum();
    w.meta.flags = trace | flag::ORIGINATED | flag::IP_CSUM_OK;
    w.meta.in_if = in_if;
    w.meta.out_if = u16::MAX;
    cx.originate(1);
    host.stats.icmp_redirects_out += 1;
    (Outcome::Sent, Some(q))
}
