//! `icmp-input`: ICMP messages for us.
//!
//! Length at least 8 (`IcmpTruncated`), checksum over the whole message
//! (`IcmpChecksum`). An echo request (RFC 792) becomes its echo reply in the same buffer:
//! addresses swapped, type 0, checksum updated incrementally (RFC 1624), a fresh 20-byte
//! IP header (options are not echoed), then `ip4-local-out` routes it back. Echo requests
//! to broadcast or multicast addresses are ignored (Linux's `icmp_echo_ignore_broadcasts`
//! default). Other messages are consumed and counted, or, on a port paired with a host
//! interface, handed to the kernel ([`crate::hostif`]), whose sockets they answer.
//!
//! A message reassembled from fragments (a defrag chain, [`crate::defrag`]) has its
//! checksum verified over every fragment's data. An echo request so made is answered
//! with the fragments it came as, each the size it was (the reply mirrors the request's
//! geometry, so every fragment fits the path it arrived by; `ip4-fragment` splits one
//! that does not fit the route back): the head gets the reply's header (the request's
//! identification and the more-fragments flag kept), the later fragments the head's
//! addresses, TOS and TTL ([`crate::defrag::split`]). Without tracking they are split
//! here; with it the reply goes on whole, tracked as one, and `ct-confirm` splits it.

use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};
use netbatch_wire::checksum;
use netbatch_wire::icmpv4::{Icmpv4Packet, Icmpv4Type};
use netbatch_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};

use crate::assemble::node;
use crate::declare::{Decl, Decode, Take, To};
use crate::host::Host;
use crate::ip4::header;
use crate::meta::{Field, Fields, flag};

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
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
}

/// The ICMP input stage.
#[derive(Debug, Default)]
pub struct IcmpInput {
    /// A reassembled echo request's reply is split into its fragments here (no tracking
    /// in the graph to split it at `ct-confirm`).
    split: bool,
    frags: Vec<Pkt>,
}

/// `icmp-input`: takes IPv4 protocol 1 (RFC 792).
pub const DECL: Decl = Decl {
    arcs: &[
        ("reply", To::Node(node::IP4_LOCAL_OUT)),
        ("host", crate::hostif::TO_HOST),
    ],
    takes: &[Take::v4(1, "icmp")],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Icmp,
    reads: Fields::of(&[Field::L3, Field::L4, Field::InPort, Field::Dest, Field::Gso]),
    writes: Fields::of(&[Field::OutIf, Field::Origin, Field::Csum]),
    ..Decl::new(node::ICMP_INPUT, |m| {
        Box::new(IcmpInput {
            split: m.opts.conntrack.is_none(),
            frags: Vec::new(),
        })
    })
};

impl Stage<Host> for IcmpInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            if cx.pool.get(&p).meta.flags & flag::DEFRAG_CHAIN != 0 {
                self.reassembled(host, cx, p, out);
                continue;
            }
            let mut v = cx.pool.get_mut(&mut p);
            // Not located: `usize::MAX` fails the length check below.
            let ihl = crate::dissect::ihl(v.meta).unwrap_or(usize::MAX);
            let d = v.data();
            let (Some(ip), Some(msg)) = (
                header(d),
                d.get(ihl..).and_then(|m| Icmpv4Packet::new_checked(m).ok()),
            ) else {
                out.drop(p, reason::TRUNCATED);
                continue;
            };
            if !msg.verify_checksum() {
                out.drop(p, reason::CHECKSUM);
                continue;
            }
            if msg.msg_type() != Icmpv4Type::ECHO_REQUEST || !host.params.icmp_echo {
                if crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                    // Echo replies and errors for the kernel's own sockets (its pings,
                    // path MTU discovery): [`crate::hostif`].
                    out.push(HOST, p);
                    continue;
                }
                host.stats.icmp_in_other += 1;
                cx.deliver(v.meta.wire_packets());
                cx.cache.free(p);
                continue;
            }
            if v.meta.flags & (flag::L3_BROADCAST | flag::L3_MULTICAST) != 0 {
                out.drop(p, reason::BROADCAST_ECHO);
                continue;
            }
            let reply = Ipv4Repr {
                src: ip.dst(),
                dst: ip.src(),
                protocol: Protocol::ICMP,
                payload_len: d.len() - ihl,
                ttl: 64,
                dscp_ecn: ip.dscp_ecn(),
                ident: host.next_ident(),
                dont_frag: false,
            };
            // Drop any options: the new 20-byte header goes right before the ICMP message.
            v.pull(ihl - 20);
            let (h, m) = v.data_mut().split_at_mut(20);
            reply.emit(&mut Ipv4Packet::new_unchecked(h));
            // Type 8 → 0, code unchanged: one word of the ICMP header changes (RFC 1624).
            let mut msg = Icmpv4Packet::new_unchecked(m);
            let code = u16::from(msg.code());
            let old = (u16::from(Icmpv4Type::ECHO_REQUEST.0) << 8) | code;
            msg.set_msg_type(Icmpv4Type::ECHO_REPLY);
            // The update is exact unless the reply is all zero (a request of type 8 and
            // nothing else), whose checksum is 0xffff where the update gives 0x0000: that
            // one is summed whole (found by the graph fuzzer).
            match checksum::update16(msg.checksum(), old, code) {
                0 => msg.fill_checksum(),
                c => msg.set_checksum(c),
            }
            v.meta.flags = (v.meta.flags & flag::TRACE) | flag::ORIGINATED | flag::IP_CSUM_OK;
            v.meta.out_if = u16::MAX;
            host.stats.icmp_echo_replies += 1;
            out.push(REPLY, p);
        }
    }
}

impl IcmpInput {
    /// A message reassembled from fragments.
    #[cold]
    #[inline(never)]
    fn reassembled(&mut self, host: &mut Host, cx: &mut Cx<'_>, mut p: Pkt, out: &mut Out) {
        let Some((ihl, ty)) = chain_sum(cx.pool, &p) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let mut v = cx.pool.get_mut(&mut p);
        if !checksum::verifies(ty.1) {
            out.drop(p, reason::CHECKSUM);
            return;
        }
        if ty.0 != Icmpv4Type::ECHO_REQUEST.0 || !host.params.icmp_echo {
            if crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                out.push(HOST, p);
                return;
            }
            host.stats.icmp_in_other += 1;
            cx.deliver(v.meta.wire_packets());
            cx.cache.free(p);
            return;
        }
        if v.meta.flags & (flag::L3_BROADCAST | flag::L3_MULTICAST) != 0 {
            out.drop(p, reason::BROADCAST_ECHO);
            return;
        }
        let Some(ip) = header(v.data()) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let reply = Ipv4Repr {
            src: ip.dst(),
            dst: ip.src(),
            protocol: Protocol::ICMP,
            payload_len: v.data().len() - ihl,
            ttl: 64,
            dscp_ecn: ip.dscp_ecn(),
            // The later fragments keep theirs: the reply's fragments share it.
            ident: ip.ident(),
            dont_frag: false,
        };
        v.pull(ihl - 20);
        let (h, m) = v.data_mut().split_at_mut(20);
        let mut h = Ipv4Packet::new_unchecked(h);
        reply.emit(&mut h);
        h.set_more_frags(true);
        h.fill_checksum();
        let mut msg = Icmpv4Packet::new_unchecked(m);
        let code = u16::from(msg.code());
        let old = (u16::from(Icmpv4Type::ECHO_REQUEST.0) << 8) | code;
        msg.set_msg_type(Icmpv4Type::ECHO_REPLY);
        // The message is more than its header: its sum is never all zero.
        msg.set_checksum(checksum::update16(msg.checksum(), old, code));
        v.meta.flags =
            (v.meta.flags & flag::TRACE) | flag::ORIGINATED | flag::IP_CSUM_OK | flag::DEFRAG_CHAIN;
        v.meta.out_if = u16::MAX;
        host.stats.icmp_echo_replies += 1;
        if !self.split {
            out.push(REPLY, p);
            return;
        }
        crate::defrag::split(cx.pool, p, &mut self.frags);
        for q in self.frags.drain(..) {
            out.push(REPLY, q);
        }
    }
}

/// The header length, and the type and checksum sum of the ICMP message the defrag chain
/// `p` carries, summed over the head's part and every later fragment's data (RFC 792:
/// over the whole message). `None` when the head holds no whole ICMP header.
fn chain_sum(pool: &netbatch_engine::Pool, p: &Pkt) -> Option<(usize, (u8, u64))> {
    let v = pool.get(p);
    let ihl = crate::dissect::ihl(v.meta)?;
    let m = v.data().get(ihl..).filter(|m| m.len() >= 8)?;
    let ty = *m.first()?;
    // Every part but the last is a whole number of 8-byte units: the sums add up.
    let mut acc = checksum::sum(m, 0);
    for part in crate::defrag::later_data(pool, p) {
        acc = checksum::sum(part, acc);
    }
    Some((ihl, (ty, acc)))
}
