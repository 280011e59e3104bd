//! `ip4-forward`: TTL for packets in transit (RFC 1812 5.2.1, 5.3.1).
//!
//! TTL ≤ 1 → ICMP time exceeded (RFC 1812 5.3.1: a router MUST NOT forward a packet whose
//! TTL would reach 0). Otherwise TTL is decremented and the header checksum updated
//! incrementally (RFC 1624 eqn. 3). The output MTU is checked once, by the neighbour
//! stage, for forwarded and local packets alike: too large goes to `ip4-fragment`, which
//! fragments or, with DF, answers ICMP fragmentation needed (RFC 1191).

use crate::meta::flag;
use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::checksum;

use super::header_mut;
use crate::host::Host;

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
}

/// The forwarding stage.
#[derive(Debug, Default)]
pub struct Ip4Forward;

impl Stage<Host> for Ip4Forward {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, _: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some(mut ip) = header_mut(v.data_mut()) else {
                out.drop(p, crate::ip4::input::reason::TRUNCATED);
                continue;
            };
            let ttl = ip.ttl();
            if ttl <= 1 {
                v.meta.note = crate::ip4::icmp_error::Cause::TtlExpired.note();
                out.push(ERROR, p);
                continue;
            }
            // TTL shares a 16-bit word with the protocol: RFC 1624 eqn. 3 on that word.
            let old = u16::from_be_bytes([ttl, ip.protocol().0]);
            ip.set_ttl(ttl - 1);
            ip.set_checksum(checksum::update16(ip.checksum(), old, old - 0x0100));
            v.meta.flags |= flag::FORWARDED;
            out.push(OK, p);
        }
    }
}
