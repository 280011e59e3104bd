//! `nd-input`: neighbour solicitations and advertisements for us (RFC 4861 7).
//!
//! Both are validated as RFC 4861 7.1.1 and 7.1.2 ask (`nd_invalid`): hop limit 255 (so
//! they come from the link itself), code 0, at least 24 bytes, a target that is not
//! multicast, well-formed options, a solicitation from `::` only to a solicited-node
//! group and without a source link-layer address, an advertisement to a multicast group
//! never marked solicited. `icmp6-input` verified the checksum.
//!
//! A solicitation whose target is one of the receiving interface's addresses (its
//! link-local address, or a global one; `nd_target_not_ours` otherwise) is answered in
//! its own buffer with an advertisement (7.2.4): from the target, with our MAC as the
//! target link-layer address, router and override flags set; solicited and to the
//! soliciting node, or, for a duplicate address detection probe (source `::`), to
//! all-nodes and not solicited. The soliciting node's link-layer address, when it gave
//! one, is recorded as stale (7.2.3), releasing what waited for it.
//!
//! An advertisement updates the neighbour cache as 7.2.5 says
//! ([`crate::neigh::NeighTableOf::advert`]), releasing what waited; one for an address
//! that is ours is another node claiming it (`nd_duplicate_address`, RFC 4862 5.4.4).
//! On a port paired with a host interface the advertisement also goes to the kernel,
//! which resolves its own neighbours through the same port.

use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};
use netbatch_wire::ipv6::{ALL_NODES, HEADER_LEN, Ipv6Packet, Ipv6Repr, Protocol};
use netbatch_wire::ndp::{self, NdpRepr, NeighborPacket};

use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `nd-input` drops a message.
    pub mod reason {
        INVALID = "nd_invalid": "neighbour discovery message failed RFC 4861 validation",
        NOT_OURS = "nd_target_not_ours": "neighbour solicitation for an address not on the receiving interface",
        DUPLICATE = "nd_duplicate_address": "neighbour advertisement for one of our addresses (another node claims it)",
    }
}

netbatch_engine::arcs! {
    /// Arc to `ip6-local-out` (advertisements answering solicitations).
    pub REPLY = "reply";
    /// Arc to `ip6-neighbour` (packets released by a resolution).
    pub NEIGHBOUR = "neighbour";
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
}

/// The neighbour discovery input stage.
#[derive(Debug, Default)]
pub struct NdInput {
    waiting: Vec<Pkt>,
}

/// `nd-input`: neighbour solicitations and advertisements, from `icmp6-input`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("reply", To::Node(node::IP6_LOCAL_OUT)),
        ("neighbour", To::Node(node::IP6_NEIGHBOUR)),
        ("host", crate::hostif::TO_HOST),
    ],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Icmp,
    reads: Fields::of(&[Field::L3, Field::L4, Field::InPort, Field::InIf]),
    writes: Fields::of(&[Field::OutIf, Field::Origin]),
    ..Decl::new(node::ND_INPUT, |_| Box::new(NdInput::default()))
};

impl Stage<Host> for NdInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let at = usize::from(v.meta.l4.wrapping_sub(v.meta.data));
            let d = v.data();
            let (Some(ip), Some(msg)) = (super::super::ip6::header(d), d.get(at..)) else {
                out.drop(p, reason::INVALID);
                continue;
            };
            let (src, dst, hl) = (ip.src(), ip.dst(), ip.hop_limit());
            let Ok(nd) = NdpRepr::parse(&NeighborPacket::new_unchecked(msg)) else {
                out.drop(p, reason::INVALID);
                continue;
            };
            if nd.check_ip(src, dst, hl).is_err() {
                out.drop(p, reason::INVALID);
                continue;
            }
            let ifx = v.meta.in_if;
            let Some(iface) = host.ifaces.get(usize::from(ifx)) else {
                out.drop(p, netbatch_engine::reason::PORT_DOWN);
                continue;
            };
            match nd {
                NdpRepr::NeighborSolicit {
                    target,
                    source_lladdr,
                } => {
                    // One of our Subnet-Router anycast addresses (RFC 4291 2.6.1) is
                    // answered too, without the override flag (RFC 4861 7.2.7).
                    let anycast = !iface.has_addr6(target) && iface.has_anycast6(target);
                    if !anycast && !iface.has_addr6(target) {
                        out.drop(p, reason::NOT_OURS);
                        continue;
                    }
                    let our_mac = iface.mac;
                    if let (false, Some(mac)) = (src.is_unspecified(), source_lladdr)
                        && host
                            .neigh6
                            .learn_stale(ifx, src, mac, cx.now_ns, &mut self.waiting)
                    {
                        host.publish_neighbour6(ifx, src);
                    }
                    for w in self.waiting.drain(..) {
                        out.push(NEIGHBOUR, w);
                    }
                    let dad = src.is_unspecified();
                    let reply = NdpRepr::NeighborAdvert {
                        router_flag: host.params.forwarding,
                        solicited_flag: !dad,
                        override_flag: !anycast,
                        target,
                        target_lladdr: Some(our_mac),
                    };
                    let to = if dad { ALL_NODES } else { src };
                    // From the target; an anycast target from our address toward the
                    // asker, as Linux's `ndisc_send_na` (an anycast address is no source
                    // of ours there).
                    let from = if anycast {
                        iface.source6_for(to)
                    } else {
                        target
                    };
                    let len = reply.buffer_len();
                    let have = v.data().len();
                    if have > HEADER_LEN + len {
                        v.truncate(HEADER_LEN + len);
                    } else if v.append(HEADER_LEN + len - have).is_none() {
                        out.drop(p, netbatch_engine::reason::NO_HEADROOM);
                        continue;
                    }
                    let (h, m) = v.data_mut().split_at_mut(HEADER_LEN);
                    Ipv6Repr {
                        src: from,
                        dst: to,
                        next_header: Protocol::ICMPV6,
                        payload_len: len,
                        hop_limit: ndp::HOP_LIMIT,
                        traffic_class: 0,
                        flow_label: 0,
                    }
                    .emit(&mut Ipv6Packet::new_unchecked(h));
                    reply.emit(&mut NeighborPacket::new_unchecked(m), from, to);
                    let m = &mut *v.meta;
                    m.flags = (m.flags & flag::TRACE) | flag::ORIGINATED;
                    m.out_if = ifx;
                    host.stats.nd_adverts_out += 1;
                    out.push(REPLY, p);
                }
                NdpRepr::NeighborAdvert {
                    solicited_flag,
                    override_flag,
                    target,
                    target_lladdr,
                    ..
                } => {
                    // Another router may advertise a Subnet-Router anycast address we
                    // share (RFC 4861 7.2.7): no duplicate.
                    if iface.has_addr6(target)
                        || (host.is_local6(target, ifx) && !host.is_anycast6(target, ifx))
                    {
                        out.drop(p, reason::DUPLICATE);
                        continue;
                    }
                    let mut known = host.neigh6.advert(
                        ifx,
                        target,
                        target_lladdr,
                        solicited_flag,
                        override_flag,
                        cx.now_ns,
                        &mut self.waiting,
                    );
                    // No entry here, but another worker is soliciting the target: the
                    // workers' tables are one cache, so the advertisement answers it
                    // (7.2.5 applied as the asking worker would, whose entry is
                    // incomplete: reachable when solicited, else stale).
                    if !known
                        && let Some(mac) = target_lladdr
                        && host.asked6(ifx, target, cx.now_ns)
                    {
                        known = if solicited_flag {
                            host.neigh6
                                .learn(ifx, target, mac, cx.now_ns, true, &mut self.waiting)
                        } else {
                            host.neigh6
                                .learn_stale(ifx, target, mac, cx.now_ns, &mut self.waiting)
                        };
                    }
                    if known && target_lladdr.is_some() {
                        host.publish_neighbour6(ifx, target);
                    }
                    for w in self.waiting.drain(..) {
                        out.push(NEIGHBOUR, w);
                    }
                    if crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                        out.push(HOST, p);
                    } else {
                        cx.deliver(1);
                        cx.cache.free(p);
                    }
                }
            }
        }
    }
}
