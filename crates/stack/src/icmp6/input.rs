//! `icmp6-input`: ICMPv6 messages for us (RFC 4443).
//!
//! At least the 4-byte type, code and checksum (`icmp6_truncated`, 8 for an echo request),
//! and a checksum over the pseudo-header and the whole message (`icmp6_checksum`, RFC 4443
//! 2.3). Then by type:
//! - an echo request (RFC 4443 4.1) becomes its echo reply in the same buffer: a fresh
//!   40-byte header (extension headers are not echoed) from the address it was sent to
//!   (for one sent to a multicast group or to a Subnet-Router anycast address, our
//!   address toward the sender: 4.2, and Linux with `anycast_src_echo_reply` off), hop limit
//!   64, type 129, the checksum updated for the one word that changed (RFC 1624) or
//!   computed again when the source changed; `ip6-local-out` routes it back;
//! - neighbour solicitations and advertisements go to `nd-input` (RFC 4861);
//! - error messages (types below 128), echo replies, router solicitations and
//!   advertisements, redirects and MLD are consumed and counted (`icmp6_in_other`) or,
//!   on a port paired with a host interface, handed to the kernel, whose sockets and
//!   daemons they are for (a router ignores redirects and router advertisements, RFC 4861
//!   8.1, 6.2.7);
//! - an informational message of an unknown type is discarded (RFC 4443 2.4 (b),
//!   `icmp6_unknown_informational`).
//!
//! A message reassembled from fragments (a defrag chain, [`crate::defrag`]) has its
//! checksum verified over the pseudo-header and every fragment's data. An echo request
//! so made is answered with the fragments it came as, each the size it was (netbatch
//! does not fragment what it sends over IPv6; the reply mirrors the request's geometry,
//! so each fragment fits the path it arrived by): the head's fixed header rewritten as
//! the reply's (its extension headers and Fragment header kept), the later fragments
//! given its addresses and hop limit ([`crate::defrag::split`]); split here without
//! tracking, at `ct-confirm` with it.

use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};
use netbatch_wire::checksum;
use netbatch_wire::icmpv6::{Icmpv6Packet, Icmpv6Type};
use netbatch_wire::ipv6::{HEADER_LEN, Ipv6Packet, Ipv6Repr, Protocol};

use crate::assemble::node;
use crate::declare::{Decl, Decode, Take, To};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `icmp6-input` drops a message.
    pub mod reason {
        TRUNCATED = "icmp6_truncated": "ICMPv6 message cut short",
        CHECKSUM = "icmp6_checksum": "ICMPv6 checksum wrong",
        UNKNOWN_INFORMATIONAL = "icmp6_unknown_informational": "ICMPv6 informational message of an unknown type",
        ECHO_OFF = "icmp6_echo_off": "echo request not answered (icmp echo is off)",
    }
}

netbatch_engine::arcs! {
    /// Arc to `ip6-local-out` (echo replies).
    pub REPLY = "reply";
    /// Arc to `nd-input` (neighbour solicitations and advertisements).
    pub ND = "nd";
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
}

/// Hop limit of echo replies.
const HOP_LIMIT: u8 = 64;

/// The ICMPv6 input stage.
#[derive(Debug, Default)]
pub struct Icmp6Input {
    /// A reassembled echo request's reply is split into its fragments here (no tracking
    /// in the graph to split it at `ct-confirm`).
    split: bool,
    frags: Vec<Pkt>,
}

/// `icmp6-input`: takes IPv6 upper-layer protocol 58 (RFC 4443).
pub const DECL: Decl = Decl {
    arcs: &[
        ("reply", To::Node(node::IP6_LOCAL_OUT)),
        ("nd", To::Node(node::ND_INPUT)),
        ("host", crate::hostif::TO_HOST),
    ],
    takes: &[Take::v6(58, "icmp")],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Icmp,
    reads: Fields::of(&[Field::L3, Field::L4, Field::InPort, Field::InIf, Field::Gso]),
    writes: Fields::of(&[Field::OutIf, Field::Origin]),
    ..Decl::new(node::ICMP6_INPUT, |m| {
        Box::new(Icmp6Input {
            split: m.opts.conntrack.is_none(),
            frags: Vec::new(),
        })
    })
};

impl Stage<Host> for Icmp6Input {
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
            let at = usize::from(v.meta.l4.wrapping_sub(v.meta.data));
            let d = v.data();
            let (Some(ip), Some(msg @ &[ty, _, _, _, ..])) = (
                crate::ip6::header(d),
                d.get(at..).filter(|_| at >= HEADER_LEN),
            ) else {
                out.drop(p, reason::TRUNCATED);
                continue;
            };
            let (src, dst) = (ip.src(), ip.dst());
            let acc = checksum::pseudo_header_v6(src, dst, Protocol::ICMPV6.0, msg.len() as u32);
            if !checksum::verifies(checksum::sum(msg, acc)) {
                out.drop(p, reason::CHECKSUM);
                continue;
            }
            let ty = Icmpv6Type(ty);
            match ty {
                Icmpv6Type::NEIGHBOR_SOLICIT | Icmpv6Type::NEIGHBOR_ADVERT => {
                    out.push(ND, p);
                    continue;
                }
                Icmpv6Type::ECHO_REQUEST => {}
                // Echo replies, errors, router and MLD messages (RFC 4443, 4861, 3810).
                Icmpv6Type(1..=4 | 129..=134 | 137 | 143) | Icmpv6Type(0..=127) => {
                    not_answered(host, cx, p, out);
                    continue;
                }
                _ => {
                    out.drop(p, reason::UNKNOWN_INFORMATIONAL);
                    continue;
                }
            }
            if msg.len() < 8 {
                out.drop(p, reason::TRUNCATED);
                continue;
            }
            if !host.params.icmp_echo {
                out.drop(p, reason::ECHO_OFF);
                continue;
            }
            let in_if = v.meta.in_if;
            let Some(reply_src) = echo_reply_src(host, src, dst, in_if) else {
                out.drop(p, netbatch_engine::reason::PORT_DOWN);
                continue;
            };
            let msg_len = msg.len();
            // Extension headers are not echoed: the fresh header goes right before the
            // message.
            v.pull(at - HEADER_LEN);
            let (h, m) = v.data_mut().split_at_mut(HEADER_LEN);
            Ipv6Repr {
                src: reply_src,
                dst: src,
                next_header: Protocol::ICMPV6,
                payload_len: msg_len,
                hop_limit: HOP_LIMIT,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut Ipv6Packet::new_unchecked(h));
            let mut msg = Icmpv6Packet::new_unchecked(m);
            let code = u16::from(msg.code());
            msg.set_msg_type(Icmpv6Type::ECHO_REPLY);
            if reply_src == dst {
                // The pseudo-header sums the same addresses swapped: one word changed.
                let old = (u16::from(Icmpv6Type::ECHO_REQUEST.0) << 8) | code;
                let new = (u16::from(Icmpv6Type::ECHO_REPLY.0) << 8) | code;
                msg.set_checksum(checksum::update16(msg.checksum(), old, new));
            } else {
                msg.fill_checksum(reply_src, src);
            }
            let m = &mut *v.meta;
            m.flags = (m.flags & flag::TRACE) | flag::ORIGINATED;
            // A link-local peer is answered on its link; others are routed.
            m.out_if = if netbatch_wire::ipv6::is_link_local(src) {
                in_if
            } else {
                u16::MAX
            };
            host.stats.icmp6_echo_replies += 1;
            out.push(REPLY, p);
        }
    }
}

/// A message netbatch does not answer (echo replies, errors, router and MLD messages:
/// RFC 4443, 4861, 3810): to the kernel on a port paired with a host interface, else
/// counted (`icmp6_in_other`) and consumed as delivered.
fn not_answered(host: &mut Host, cx: &mut Cx<'_>, p: Pkt, out: &mut Out) {
    let m = cx.pool.get(&p).meta;
    if crate::hostif::punt_port(host, m.in_port).is_some() {
        out.push(HOST, p);
    } else {
        host.stats.icmp6_in_other += 1;
        cx.deliver(m.wire_packets());
        cx.cache.free(p);
    }
}

impl Icmp6Input {
    /// A message reassembled from fragments.
    #[cold]
    #[inline(never)]
    fn reassembled(&mut self, host: &mut Host, cx: &mut Cx<'_>, mut p: Pkt, out: &mut Out) {
        let Some((at, ty, acc)) = chain_sum(cx.pool, &p, None) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let mut v = cx.pool.get_mut(&mut p);
        if !checksum::verifies(acc) {
            out.drop(p, reason::CHECKSUM);
            return;
        }
        match Icmpv6Type(ty) {
            Icmpv6Type::ECHO_REQUEST => {}
            // Neighbour discovery is never fragmented (RFC 6980): an unknown
            // informational message here, as below.
            Icmpv6Type(0..=127 | 129..=134 | 137 | 143) => {
                not_answered(host, cx, p, out);
                return;
            }
            _ => {
                out.drop(p, reason::UNKNOWN_INFORMATIONAL);
                return;
            }
        }
        if !host.params.icmp_echo {
            out.drop(p, reason::ECHO_OFF);
            return;
        }
        let Some(ip) = crate::ip6::header(v.data()) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let (src, dst, in_if) = (ip.src(), ip.dst(), v.meta.in_if);
        let Some(reply_src) = echo_reply_src(host, src, dst, in_if) else {
            out.drop(p, netbatch_engine::reason::PORT_DOWN);
            return;
        };
        // The head's fixed header becomes the reply's; its payload length (the head's
        // own) and its extension headers up to the Fragment header stay.
        let d = v.data_mut();
        let Some(h) = d.first_chunk_mut::<HEADER_LEN>() else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let mut ip = Ipv6Packet::new_unchecked(h);
        ip.set_traffic_class(0);
        ip.set_flow_label(0);
        ip.set_hop_limit(HOP_LIMIT);
        ip.set_src(reply_src);
        ip.set_dst(src);
        let Some(msg) = d.get_mut(at..) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let mut msg = Icmpv6Packet::new_unchecked(msg);
        let code = u16::from(msg.code());
        msg.set_msg_type(Icmpv6Type::ECHO_REPLY);
        if reply_src == dst {
            // The pseudo-header sums the same addresses swapped: one word changed.
            let old = (u16::from(Icmpv6Type::ECHO_REQUEST.0) << 8) | code;
            let new = (u16::from(Icmpv6Type::ECHO_REPLY.0) << 8) | code;
            msg.set_checksum(checksum::update16(msg.checksum(), old, new));
        } else {
            // Summed again over the chain, the checksum field zero.
            msg.set_checksum(0);
            let Some((_, _, acc)) = chain_sum(cx.pool, &p, Some((reply_src, src))) else {
                out.drop(p, reason::TRUNCATED);
                return;
            };
            let mut v = cx.pool.get_mut(&mut p);
            if let Some(c) = v.data_mut().get_mut(at + 2..at + 4) {
                c.copy_from_slice(&checksum::finish(acc).to_be_bytes());
            }
        }
        let m = &mut *cx.pool.get_mut(&mut p).meta;
        m.flags = (m.flags & flag::TRACE) | flag::ORIGINATED | flag::DEFRAG_CHAIN;
        m.out_if = if netbatch_wire::ipv6::is_link_local(src) {
            in_if
        } else {
            u16::MAX
        };
        host.stats.icmp6_echo_replies += 1;
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

/// Where the ICMPv6 message of the defrag chain `p` starts in its head, its type, and
/// the checksum sum over the pseudo-header (the head's addresses, or `addrs`) and the
/// whole message: the head's part and every later fragment's data (RFC 4443 2.3).
/// `None` when the head holds no whole echo header.
fn chain_sum(
    pool: &netbatch_engine::Pool,
    p: &Pkt,
    addrs: Option<(core::net::Ipv6Addr, core::net::Ipv6Addr)>,
) -> Option<(usize, u8, u64)> {
    let v = pool.get(p);
    let at = usize::from(v.meta.l4.wrapping_sub(v.meta.data));
    let d = v.data();
    let ip = crate::ip6::header(d)?;
    let m = d.get(at..).filter(|m| at >= HEADER_LEN && m.len() >= 8)?;
    let len = (v.meta.total_len as usize).checked_sub(at)?;
    let (src, dst) = addrs.unwrap_or((ip.src(), ip.dst()));
    let acc = checksum::pseudo_header_v6(src, dst, Protocol::ICMPV6.0, len as u32);
    // Every part but the last is a whole number of 8-byte units: the sums add up.
    let mut acc = checksum::sum(m, acc);
    for part in crate::defrag::later_data(pool, p) {
        acc = checksum::sum(part, acc);
    }
    Some((at, *m.first()?, acc))
}

/// The source of the echo reply to a request from `src` to `dst` received on `in_if`:
/// the address it was sent to; for a group or a Subnet-Router anycast address, ours
/// toward the sender (Linux's `icmpv6_echo_reply`, with `anycast_src_echo_reply` off, its
/// default). `None` when the interface is gone.
fn echo_reply_src(
    host: &Host,
    src: core::net::Ipv6Addr,
    dst: core::net::Ipv6Addr,
    in_if: u16,
) -> Option<core::net::Ipv6Addr> {
    if dst.is_multicast() || host.is_anycast6(dst, in_if) {
        host.ifaces
            .get(usize::from(in_if))
            .map(|i| i.source6_for(src))
    } else {
        Some(dst)
    }
}
