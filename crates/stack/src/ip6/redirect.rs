//! ICMPv6 Redirect (RFC 4861 4.5, 8.2), made by `ip6-forward` beside the packet it
//! forwards.
//!
//! A redirect is no error: the packet itself is still forwarded (as Linux forwards it),
//! and the redirect is a new packet, made in a buffer of its own and counted as
//! originated, that goes to `ip6-local-out`. It is sent when all of these hold:
//! - `send_redirects` is on (`[icmp] send_redirects`; Linux always sends them when
//!   forwarding);
//! - the packet leaves by the interface it arrived on (RFC 4861 8.2);
//! - its source is a neighbour on that link (RFC 4861 8.2: link-local, or inside an
//!   on-link prefix of the interface; Linux sends none for an off-link source either);
//! - the better first hop is the destination itself (an on-link route: the target is the
//!   destination) or a router named by its link-local address (RFC 4861 8.2: the target
//!   of a redirect to a router is its link-local address; like Linux's
//!   `ndisc_send_redirect`, a route through a global gateway address makes none, as the
//!   router's link-local address is not known);
//! - the redirect rate limit allows it ([`crate::host::Host::redirect6_limit`], a token
//!   bucket of its own: Linux's ICMPv6 rate limit exempts informational messages such as
//!   137, and it limits redirects per source and destination instead; sharing the error
//!   bucket would let redirects starve Time Exceeded and Unreachable);
//! - a buffer can be had (else counted in `alloc_failures`).
//!
//! No source-routed packet is forwarded here (`ip6-local` refuses a routing header with
//! segments left), so RFC 4861 8.2's exclusion of them holds by construction; a routing
//! header seen in transit is not ours to process and does not stop a redirect (as Linux).
//!
//! The redirect goes from the interface's link-local address to the packet's source with
//! hop limit 255 (RFC 4861 4.5, 7.1); it names the target and the destination, carries
//! the target's link-layer address when the neighbour cache knows it (Target Link-Layer
//! Address option) and a Redirected Header option quoting as much of the packet as it
//! was received (hop limit not yet decremented) as keeps the redirect within the
//! minimum MTU, 1280 bytes, cut to a multiple of 8 bytes as the option's length counts
//! them (as Linux cuts it).

use core::net::Ipv6Addr;

use netbatch_engine::{Cx, Meta, Pkt};
use netbatch_wire::icmpv6::{Icmpv6Packet, Icmpv6Type};
use netbatch_wire::ipv6::{self as wire6, HEADER_LEN, Ipv6Packet, Ipv6Repr, Protocol};
use netbatch_wire::{MacAddr, ndp};

use super::header;
use crate::host::Host;
use crate::meta::flag;

/// The minimum MTU (RFC 8200 5): the largest redirect.
const MAX_LEN: usize = 1280;
/// The ICMPv6 header, reserved word, target and destination (RFC 4861 4.5).
const FIXED: usize = 8 + 16 + 16;

pub use crate::ip4::redirect::Outcome;

/// The target of a redirect about the packet `d` (from its IPv6 header) with metadata
/// `m`, forwarded back out of the interface it arrived on, when one may be sent (see the
/// module doc).
fn target(host: &Host, m: &Meta, d: &[u8]) -> Option<Ipv6Addr> {
    let ip = header(d)?;
    let hop = host.hop6(m.adj)?;
    let (src, dst) = (ip.src(), ip.dst());
    let iface = host.ifaces.get(usize::from(m.in_if))?;
    if !(wire6::is_link_local(src) || iface.addrs6.iter().any(|a| a.subnet().contains(src))) {
        return None;
    }
    if src.is_unspecified() || src.is_multicast() || dst.is_multicast() {
        return None;
    }
    if hop.gateway == 0 {
        return Some(dst);
    }
    let gw = Ipv6Addr::from(hop.gateway);
    wire6::is_link_local(gw).then_some(gw)
}

/// Writes the ICMPv6 message of a redirect into `msg`, which is sized for it (its
/// checksum is left zero): the fixed part naming `target` and `dst`, the target's
/// link-layer address option when `tlla` is known, then the Redirected Header option of
/// `rd_len` bytes quoting `quote` (RFC 4861 4.5, 4.6.1, 4.6.3). `None` if `msg` is not
/// that long.
fn write_message(
    msg: &mut [u8],
    target: Ipv6Addr,
    dst: Ipv6Addr,
    tlla: Option<MacAddr>,
    rd_len: usize,
    quote: Option<&[u8]>,
) -> Option<()> {
    let (fixed, rest) = msg.split_first_chunk_mut::<FIXED>()?;
    fixed[..8].fill(0);
    fixed[0] = Icmpv6Type::REDIRECT.0;
    fixed[8..24].copy_from_slice(&target.octets());
    fixed[24..40].copy_from_slice(&dst.octets());
    let rest = match tlla {
        Some(mac) => {
            let (opt, rest) = rest.split_first_chunk_mut::<{ ndp::LL_ADDR_OPTION_LEN }>()?;
            opt[0] = ndp::option_type::TARGET_LL_ADDR;
            opt[1] = 1;
            opt[2..8].copy_from_slice(&mac.0);
            rest
        }
        None => rest,
    };
    let (rd, quoted) = rest.split_first_chunk_mut::<8>()?;
    *rd = [0; 8];
    rd[0] = ndp::option_type::REDIRECTED_HEADER;
    rd[1] = (rd_len / 8) as u8;
    let quote = quote.filter(|q| q.len() == quoted.len())?;
    quoted.copy_from_slice(quote);
    // Quoted as received: undo forwarding's decrement of the hop limit.
    if let Some(hl) = quoted.get_mut(7) {
        *hl = hl.wrapping_add(1);
    }
    Some(())
}

/// Makes the redirect about packet `p` (forwarded, out of the interface it arrived on,
/// its hop limit already decremented) into a new buffer, when one may be sent: the new
/// packet, for `ip6-local-out`.
#[cold]
#[inline(never)]
pub fn make(host: &mut Host, cx: &mut Cx<'_>, p: &Pkt) -> (Outcome, Option<Pkt>) {
    let pool = cx.pool;
    let v = pool.get(p);
    let (m, d) = (v.meta, v.data());
    let Some(target) = target(host, m, d) else {
        return (Outcome::NotEligible, None);
    };
    let Some(iface) = host.ifaces.get(usize::from(m.in_if)) else {
        return (Outcome::NotEligible, None);
    };
    let (from, in_if, trace) = (iface.ll6, m.in_if, m.flags & flag::TRACE);
    let tlla = host.neigh6.mac_of(in_if, target).map(|(mac, _)| mac);
    if !host.redirect6_limit.allow(cx.now_ns) {
        host.stats.icmp6_redirects_rate_limited += 1;
        return (Outcome::RateLimited, None);
    }
    let Some(mut q) = cx.cache.alloc() else {
        host.stats.alloc_failures += 1;
        return (Outcome::NoBuffer, None);
    };
    let Some(ip) = header(d) else {
        cx.cache.free(q);
        return (Outcome::NotEligible, None);
    };
    let (to, dst) = (ip.src(), ip.dst());
    let tlla_len = if tlla.is_some() {
        ndp::LL_ADDR_OPTION_LEN
    } else {
        0
    };
    // The Redirected Header option: 8 bytes of header, then the packet, in 8-byte units.
    let room = MAX_LEN - HEADER_LEN - FIXED - tlla_len;
    let rd_len = room.min(d.len() + 8) & !7;
    let quote = rd_len - 8;
    let payload = FIXED + tlla_len + rd_len;
    let mut w = pool.get_mut(&mut q);
    let room = w
        .append(HEADER_LEN + payload)
        .and_then(|b| b.split_first_chunk_mut::<HEADER_LEN>())
        .and_then(|(ip6, msg)| {
            write_message(msg, target, dst, tlla, rd_len, d.get(..quote))?;
            Some((ip6, msg))
        });
    let Some((ip6, msg)) = room else {
        cx.cache.free(q);
        host.stats.alloc_failures += 1;
        return (Outcome::NoBuffer, None);
    };
    Ipv6Repr {
        src: from,
        dst: to,
        next_header: Protocol::ICMPV6,
        payload_len: payload,
        hop_limit: ndp::HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(ip6.as_mut_slice()));
    Icmpv6Packet::new_unchecked(msg).fill_checksum(from, to);
    w.meta.flags = trace | flag::ORIGINATED;
    w.meta.in_if = in_if;
    // The source is on this link: it leaves by it (needed for a link-local source).
    w.meta.out_if = in_if;
    cx.originate(1);
    host.stats.icmp6_redirects_out += 1;
    (Outcome::Sent, Some(q))
}
