//! `icmp-input`: ICMP messages for us.
//!
//! Length at least 8 (`IcmpTruncated`), checksum over the whole message
//! (`IcmpChecksum`). An echo request (RFC 792) becomes its echo reply in the same buffer:
//! addresses swapped, type 0, checksum updated incrementally (RFC 1624), a fresh 20-byte
//! IP header (options are not echoed), then `ip4-local-out` routes it back. Echo requests
//! to broadcast or multicast addresses are ignored (Linux's `icmp_echo_ignore_broadcasts`
//! default). Other messages are consumed and counted.

use crate::meta::flag;
use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::checksum;

use crate::host::Host;
use crate::ip4::be16;

netbatch_engine::reasons! {
    /// Why `icmp-input` drops a message.
    pub mod reason {
        TRUNCATED = "icmp_truncated": "ICMP message cut short",
        CHECKSUM = "icmp_checksum": "ICMP checksum wrong",
        BROADCAST_ECHO = "icmp_broadcast_echo": "echo request to a broadcast or multicast address ignored",
    }
}

netbatch_engine::arcs! {
    /// Arc to `ip4-local-out` (echo replies).
    pub REPLY = "reply";
}

/// The ICMP input stage.
#[derive(Debug, Default)]
pub struct IcmpInput;

impl Stage<Host> for IcmpInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            // `ip4-input` set both; a wrapped difference fails the length check below.
            let ihl = usize::from(v.meta.l4.wrapping_sub(v.meta.l3));
            let d = v.data();
            if d.len() < ihl + 8 {
                out.drop(p, reason::TRUNCATED);
                continue;
            }
            if checksum::fold(checksum::sum(&d[ihl..], 0)) != 0xffff {
                out.drop(p, reason::CHECKSUM);
                continue;
            }
            let ty = d[ihl];
            if ty != 8 || !host.params.icmp_echo {
                host.stats.icmp_in_other += 1;
                cx.deliver(v.meta.wire_packets());
                cx.cache.free(p);
                continue;
            }
            if v.meta.flags & (flag::L3_BROADCAST | flag::L3_MULTICAST) != 0 {
                out.drop(p, reason::BROADCAST_ECHO);
                continue;
            }
            let (tos, src, dst) = (
                [d[1]],
                [d[12], d[13], d[14], d[15]],
                [d[16], d[17], d[18], d[19]],
            );
            // Drop any options: the new 20-byte header goes right before the ICMP message.
            v.pull(ihl - 20);
            let ident = host.next_ident();
            let icmp_len = v.meta.len as usize - 20;
            let m = v.data_mut();
            m[0] = 0x45;
            m[1] = tos[0];
            m[2..4].copy_from_slice(&((20 + icmp_len) as u16).to_be_bytes());
            m[4..6].copy_from_slice(&ident.to_be_bytes());
            m[6..8].copy_from_slice(&[0, 0]);
            m[8] = 64;
            m[9] = 1;
            m[12..16].copy_from_slice(&dst);
            m[16..20].copy_from_slice(&src);
            netbatch_wire::ipv4::fill_header_checksum(m, 20);
            // Type 8 → 0, code unchanged: one word of the ICMP header changes.
            let old = be16(m, 20);
            let new = old & 0x00ff;
            m[20] = 0;
            let hc = checksum::update16(be16(m, 22), old, new);
            m[22..24].copy_from_slice(&hc.to_be_bytes());
            v.meta.l3 = v.meta.data;
            v.meta.l4 = v.meta.data + 20;
            v.meta.flags = (v.meta.flags & flag::TRACE) | flag::ORIGINATED | flag::IP_CSUM_OK;
            v.meta.out_if = u16::MAX;
            host.stats.icmp_echo_replies += 1;
            out.push(REPLY, p);
        }
    }
}
