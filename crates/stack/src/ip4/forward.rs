//! `ip4-forward`: TTL for packets in transit (RFC 1812 5.2.1, 5.3.1).
//!
//! TTL ≤ 1 → ICMP time exceeded (RFC 1812 5.3.1: a router MUST NOT forward a packet whose
//! TTL would reach 0). Otherwise TTL is decremented and the header checksum updated
//! incrementally (RFC 1624 eqn. 3). The output MTU is checked once, by the neighbour
//! stage, for forwarded and local packets alike: too large goes to `ip4-fragment`, which
//! fragments or, with DF, answers ICMP fragmentation needed (RFC 1191).
//!
//! A header with options has Record Route and Timestamp processed (RFC 1812 5.3.13,
//! [`super::options::forward`]) with our address on the outgoing interface, and its
//! checksum recomputed; the fast path reads one more octet to know there are none.
//!
//! A packet that leaves by the interface it arrived on may also cause an ICMP Redirect
//! (RFC 1812 5.2.7.2, [`super::redirect`]): the packet is forwarded all the same, and the
//! redirect, a new packet, takes the `redirect` arc to `ip4-local-out` after the list.
//! The fast path pays one comparison of the two interfaces for it.

use core::net::Ipv4Addr;

use netbatch_engine::{Cx, Out, PktList, Stage, Verdict};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::Ipv4Packet;

use super::icmp_error::{Cause, Request};
use super::{header_mut, options, redirect};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `ip4-forward` stops a packet.
    pub mod reason {
        TTL_EXPIRED = "ttl_expired": "TTL reached zero in transit",
    }
}

netbatch_engine::arcs! {
    /// Arc for packets that go on.
    pub OK = "ok";
    /// Arc to the ICMP error stage.
    pub ERROR = "error";
    /// Arc of the redirects made (new packets), to `ip4-local-out`.
    pub REDIRECT = "redirect";
}

/// Records a forwarded packet's passage in the options of its header (at the start of
/// `d`), leaving by interface `out_if`; `Err(pointer)` if an option is malformed.
#[inline(never)]
fn record_options(host: &Host, now_ns: u64, out_if: u16, d: &mut [u8]) -> Result<(), usize> {
    let Some(&first) = d.first() else {
        return Ok(());
    };
    let ihl = usize::from(first & 0x0f) * 4;
    let Some(h) = d.get_mut(..ihl) else {
        return Ok(());
    };
    let found = options::scan(h)?;
    if !found.records() {
        return Ok(());
    }
    let Some(&[a, b, c, e]) = h.get(16..20) else {
        return Ok(());
    };
    let dst = Ipv4Addr::new(a, b, c, e);
    let out_addr = host
        .ifaces
        .get(usize::from(out_if))
        .and_then(|i| i.source_for(dst))
        .map_or(0, u32::from);
    let now_ms = host.utc_ms_since_midnight(now_ns);
    if options::forward(h, &found, out_addr, now_ms, |a| {
        host.routes.is_local_addr(a)
    }) {
        let mut ip = Ipv4Packet::new_unchecked(h);
        ip.fill_checksum();
    }
    Ok(())
}

/// The forwarding stage.
#[derive(Debug, Default)]
pub struct Ip4Forward {
    /// Redirects made for the list being processed, handed on after it.
    redirects: PktList,
    /// What became of the packets that left by the interface they arrived on.
    counts: RedirectCounts,
}

/// Counters of the redirects a forwarding stage made or did not make, by
/// [`redirect::Outcome`] (the stage's event counters, for either family).
#[derive(Debug, Default, Clone, Copy)]
pub struct RedirectCounts {
    /// Redirects sent.
    pub sent: u64,
    /// Refused by the rate limit.
    pub rate_limited: u64,
    /// No buffer for one.
    pub no_buffer: u64,
}

impl RedirectCounts {
    /// Counts `o`.
    pub fn count(&mut self, o: redirect::Outcome) {
        match o {
            redirect::Outcome::Sent => self.sent += 1,
            redirect::Outcome::RateLimited => self.rate_limited += 1,
            redirect::Outcome::NoBuffer => self.no_buffer += 1,
            redirect::Outcome::NotEligible => {}
        }
    }

    /// The stage counters, by name.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        [
            ("sent_redirect", self.sent),
            ("redirect_rate_limited", self.rate_limited),
            ("redirect_no_buffer", self.no_buffer),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

/// `ip4-forward`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::HOOK_FORWARD, "accept")),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
        ("redirect", To::Node(node::IP4_LOCAL_OUT)),
    ],
    reasons: &[reason::ALL, super::input::reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::InIf, Field::OutIf, Field::Adj]),
    writes: Fields::of(&[Field::Origin, Field::Ask]),
    ..Decl::new(node::IP4_FORWARD, |_| Box::new(Ip4Forward::default()))
};

impl Stage<Host> for Ip4Forward {
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
        let (pool, now_ns) = (cx.pool, cx.now_ns);
        let send_redirects = host.params.send_redirects;
        let (redirects, counts) = (&mut self.redirects, &mut self.counts);
        out.sort(
            list,
            #[inline(always)]
            move |p| {
                let mut v = pool.get_mut(p);
                let Some(mut ip) = header_mut(v.data_mut()) else {
                    return Verdict::Drop(crate::ip4::input::reason::TRUNCATED);
                };
                let ttl = ip.ttl();
                if ttl <= 1 {
                    Request::new(Cause::TtlExpired).put(v.meta);
                    return Verdict::To(ERROR);
                }
                // TTL shares a 16-bit word with the protocol: RFC 1624 eqn. 3 on that word,
                // which decreases by 0x0100 (TTL ≥ 2, so without wrapping).
                ip.set_ttl(ttl - 1);
                ip.set_checksum(checksum::update16_sub(ip.checksum(), 0x0100));
                if ip.header_len() > 20 {
                    let out_if = v.meta.out_if;
                    if let Err(pointer) = record_options(host, now_ns, out_if, v.data_mut()) {
                        Request::with(Cause::ParamProblem, pointer as u32).put(v.meta);
                        return Verdict::To(ERROR);
                    }
                }
                v.meta.flags |= flag::FORWARDED;
                if v.meta.out_if == v.meta.in_if && send_redirects {
                    let (o, q) = redirect::make(host, cx, p);
                    counts.count(o);
                    redirects.extend(q);
                }
                Verdict::To(OK)
            },
        );
        for q in self.redirects.drain(..) {
            out.push(REDIRECT, q);
        }
    }
}
