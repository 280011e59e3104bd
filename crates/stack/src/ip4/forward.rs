//! `ip4-forward`: TTL and MTU for packets in transit (RFC 1812 5.2.1, 5.3.1).
//!
//! TTL ≤ 1 → ICMP time exceeded (RFC 1812 5.3.1: a router MUST NOT forward a packet whose
//! TTL would reach 0). Larger than the output MTU with DF → ICMP fragmentation needed
//! with the MTU (RFC 1191); without DF → dropped (`FragUnsupported`: netbatch does not
//! fragment). Otherwise TTL is decremented and the header checksum updated incrementally
//! (RFC 1624 eqn. 3). A super-packet is checked by its segment size.

use netbatch_engine::meta::flag;
use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};
use netbatch_wire::checksum;

use super::be16;
use crate::host::Host;

/// Arc for packets that go on.
pub const OK: Next = Next(0);
/// Arc to the ICMP error stage.
pub const ERROR: Next = Next(1);

/// Length of the TCP or UDP header after an IPv4 header of `ihl` bytes.
#[inline]
pub(crate) fn l4_header_len(d: &[u8], ihl: usize) -> usize {
    match d[9] {
        6 => d.get(ihl + 12).map_or(20, |&o| usize::from(o >> 4) * 4),
        _ => 8,
    }
}

/// The forwarding stage.
#[derive(Debug, Default)]
pub struct Ip4Forward;

impl Stage<Host> for Ip4Forward {
    fn arcs(&self) -> &'static [&'static str] {
        &["ok", "error"]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut cur_if = u16::MAX;
        let mut mtu = 0usize;
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            if v.meta.out_if != cur_if {
                let Some(i) = host.ifaces.get(usize::from(v.meta.out_if)) else {
                    out.drop(p, DropReason::PortDown);
                    continue;
                };
                cur_if = v.meta.out_if;
                mtu = usize::from(i.mtu);
            }
            let ihl = usize::from(v.meta.l4 - v.meta.l3);
            let d = v.data();
            let ttl = d[8];
            if ttl <= 1 {
                v.meta.reason = DropReason::TtlExpired as u16;
                out.push(ERROR, p);
                continue;
            }
            let wire_len = if v.meta.gso_size != 0 {
                // Segments carry gso_size bytes of payload after the L3 and L4 headers.
                ihl + l4_header_len(d, ihl) + usize::from(v.meta.gso_size)
            } else {
                d.len()
            };
            if wire_len > mtu {
                if be16(d, 6) & 0x4000 != 0 {
                    v.meta.reason = DropReason::FragNeeded as u16;
                    v.meta.scratch = mtu as u32;
                    out.push(ERROR, p);
                } else {
                    out.drop(p, DropReason::FragUnsupported);
                }
                continue;
            }
            let m = v.data_mut();
            let old = be16(m, 8);
            m[8] = ttl - 1;
            let hc = checksum::update16(be16(m, 10), old, be16(m, 8));
            m[10..12].copy_from_slice(&hc.to_be_bytes());
            v.meta.flags |= flag::FORWARDED;
            out.push(OK, p);
        }
    }
}
