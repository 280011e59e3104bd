//! `arp-input`: answers requests for our addresses and learns neighbours (RFC 826).
//!
//! Checks: 28 bytes and a known operation (`ArpMalformed`), Ethernet/IPv4 only
//! (`ArpUnsupported`), a unicast sender MAC and a sender address that is neither ours nor
//! a broadcast, limited or the directed broadcast of one of our subnets (`ArpBadSender`;
//! someone claiming our address is a conflict, not a neighbour, and no station owns a
//! broadcast address; Linux's reverse route check of the sender, `fib_validate_source`,
//! refuses ours always and a broadcast with `rp_filter` on). A sender address of 0.0.0.0
//! (an RFC 5227 probe) is answered but not learned.
//!
//! Learning follows RFC 826's merge rule: an existing entry for the sender is updated
//! from any ARP packet (this covers gratuitous ARP); a new entry is made only when the
//! packet was for one of our addresses. Packets that were waiting for the sender leave
//! on the `neighbour` arc, in order. A request for us is turned into the reply in place,
//! cut or padded to the minimum frame (its padding zeroed).

use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::Error;
use netbatch_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use netbatch_wire::ethernet::EtherType;

use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::l2::output::push_header;
use crate::meta::{Field, Fields, flag};
use crate::prefix::class;
use crate::route::RouteKind;

netbatch_engine::reasons! {
    /// Why `arp-input` drops a packet.
    pub mod reason {
        MALFORMED = "arp_malformed": "ARP packet truncated or with an unknown operation",
        UNSUPPORTED = "arp_unsupported": "ARP for a hardware/protocol pair other than Ethernet/IPv4",
        NOT_FOR_US = "arp_not_for_us": "ARP request for an address that is not ours",
        BAD_SENDER = "arp_bad_sender": "ARP sender address is invalid (multicast, broadcast, ours)",
    }
}

netbatch_engine::arcs! {
    /// Arc to transmit (replies).
    pub TX = "tx";
    /// Arc back to the neighbour stage (packets released by a resolution).
    pub NEIGHBOUR = "neighbour";
    /// Arc to the host kernel (replies, once learned from, on a paired port:
    /// [`crate::hostif`]).
    pub HOST = "host";
}

/// The ARP input stage.
#[derive(Debug, Default)]
pub struct ArpInput {
    waiting: Vec<netbatch_engine::Pkt>,
}

/// `arp-input`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("tx", To::Node(node::TX)),
        ("neighbour", To::Node(node::NEIGHBOUR)),
        ("host", crate::hostif::TO_HOST),
    ],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Arp,
    reads: Fields::of(&[Field::InPort, Field::InIf, Field::L3]),
    writes: Fields::of(&[Field::OutIf, Field::Origin]),
    ..Decl::new(node::ARP_INPUT, |_| Box::new(ArpInput::default()))
};

impl Stage<Host> for ArpInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let arp = match ArpRepr::parse(&ArpPacket::new_unchecked(v.data())) {
                Ok(a) => a,
                Err(Error::Unsupported) => {
                    out.drop(p, reason::UNSUPPORTED);
                    continue;
                }
                // Cut short, or an operation other than request and reply.
                Err(_) => {
                    out.drop(p, reason::MALFORMED);
                    continue;
                }
            };
            let ArpRepr { sha, spa, tpa, .. } = arp;
            let ifx = v.meta.in_if;
            let Some(iface) = host.ifaces.get(usize::from(ifx)) else {
                out.drop(p, netbatch_engine::reason::PORT_DOWN);
                continue;
            };
            let spa_bits = u32::from(spa);
            if sha.is_multicast()
                || (spa_bits != 0 && (class::is_martian_source(spa_bits)))
                || iface.has_addr(spa)
                || matches!(host.routes.lookup(spa_bits), Some(h) if h.kind == RouteKind::Broadcast)
            {
                out.drop(p, reason::BAD_SENDER);
                continue;
            }
            let for_us = iface.has_addr(tpa);
            let learned = spa_bits != 0
                && host
                    .neigh
                    .learn(ifx, spa, sha, cx.now_ns, for_us, &mut self.waiting);
            if learned {
                host.publish_neighbour(ifx, spa);
            }
            for w in self.waiting.drain(..) {
                out.push(NEIGHBOUR, w);
            }
            if !for_us {
                if learned {
                    cx.deliver(1);
                    cx.cache.free(p);
                } else {
                    out.drop(p, reason::NOT_FOR_US);
                }
                continue;
            }
            if arp.operation == ArpOperation::Reply {
                if crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                    // The kernel of a host interface pair asked too (its own requests
                    // leave through the pair): it learns from the same reply.
                    out.push(HOST, p);
                    continue;
                }
                cx.deliver(1);
                cx.cache.free(p);
                continue;
            }
            // A request for us: answer in place, the size of an ARP reply whatever the
            // request's padding (whose bytes are not ours to send back).
            let our_mac = iface.mac;
            let len = v.data().len();
            if len > super::PADDED_LEN {
                v.truncate(super::PADDED_LEN);
            } else if v.append(super::PADDED_LEN - len).is_none() {
                out.drop(p, netbatch_engine::reason::NO_HEADROOM);
                continue;
            }
            if let Some(pad) = v.data_mut().get_mut(netbatch_wire::arp::PACKET_LEN..) {
                pad.fill(0);
            }
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                sha: our_mac,
                spa: tpa,
                tha: sha,
                tpa: spa,
            };
            reply.emit(&mut ArpPacket::new_unchecked(v.data_mut()));
            if !push_header(&mut v, iface, sha, EtherType::ARP) {
                out.drop(p, netbatch_engine::reason::NO_HEADROOM);
                continue;
            }
            v.meta.out_if = ifx;
            v.meta.flags = (v.meta.flags & flag::TRACE) | flag::ORIGINATED;
            host.stats.arp_replies_out += 1;
            out.push(TX, p);
        }
    }
}
