//! `neighbour`: resolves the next hop's MAC and pushes the Ethernet header.
//!
//! Resolved → header pushed, on to `tx`. Stale → sent, and a unicast ARP probe is due
//! once per retransmit interval. Unresolved → the packet waits in the neighbour's bounded
//! queue (the oldest is dropped when it is full, `NeighQueueFull`) and a broadcast ARP
//! request goes out (originated). Broadcast and multicast next hops map to their MACs
//! without ARP (RFC 1112 6.4). The previous packet's answer is reused when the interface
//! and next hop repeat (hoisted per list).

use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};
use netbatch_wire::ethernet::{EtherType, MacAddr};

use super::Lookup;
use crate::arp::build_request;
use crate::host::Host;
use crate::l2::output::push_header;
use crate::prefix::class;

/// Arc to transmit.
pub const TX: Next = Next(0);

/// The neighbour stage.
#[derive(Debug, Default)]
pub struct Neighbour;

/// The MAC of a broadcast or multicast next hop on an interface, if it is one.
fn group_mac(nh: u32, host: &Host, out_if: u16) -> Option<MacAddr> {
    if class::is_multicast(nh) {
        let b = nh.to_be_bytes();
        return Some(MacAddr([0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]]));
    }
    if class::is_limited_broadcast(nh) {
        return Some(MacAddr::BROADCAST);
    }
    let iface = host.ifaces.get(usize::from(out_if))?;
    iface
        .addrs
        .iter()
        .any(|a| a.subnet().broadcast().is_some_and(|b| u32::from(b) == nh))
        .then_some(MacAddr::BROADCAST)
}

impl Stage<Host> for Neighbour {
    fn arcs(&self) -> &'static [&'static str] {
        &["tx"]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut hint: Option<(u16, u32, MacAddr)> = None;
        for mut p in list.drain(..) {
            let (out_if, nh) = {
                let m = cx.pool.get(&p).meta;
                (m.out_if, m.next_hop)
            };
            if usize::from(out_if) >= host.ifaces.len() {
                out.drop(p, DropReason::PortDown);
                continue;
            }
            let mac = match hint {
                Some((i, n, mac)) if i == out_if && n == nh => Some(mac),
                _ => match host.neigh.lookup(out_if, nh, cx.now_ns) {
                    Lookup::Mac(m) => Some(m),
                    Lookup::StaleMac(m) => {
                        if host.neigh.want_refresh(out_if, nh, cx.now_ns) {
                            let iface = &host.ifaces[usize::from(out_if)];
                            match build_request(
                                cx.pool,
                                cx.cache,
                                iface,
                                out_if,
                                nh.into(),
                                Some(m),
                            ) {
                                Some(r) => {
                                    host.stats.arp_requests_out += 1;
                                    cx.originate(1);
                                    out.push(TX, r);
                                }
                                None => host.stats.alloc_failures += 1,
                            }
                        }
                        Some(m)
                    }
                    Lookup::Pending(_) | Lookup::Miss => group_mac(nh, host, out_if),
                },
            };
            if let Some(mac) = mac {
                hint = Some((out_if, nh, mac));
                let iface = &host.ifaces[usize::from(out_if)];
                let mut v = cx.pool.get_mut(&mut p);
                if push_header(&mut v, iface, mac, EtherType::IPV4) {
                    out.push(TX, p);
                } else {
                    out.drop(p, DropReason::NoHeadroom);
                }
                continue;
            }
            let (probe, evicted, refused) = host.neigh.queue(out_if, nh, p, cx.now_ns);
            if let Some(e) = evicted {
                out.drop(
                    e,
                    if refused {
                        DropReason::NeighTableFull
                    } else {
                        DropReason::NeighQueueFull
                    },
                );
            }
            if let Some(pr) = probe {
                let iface = &host.ifaces[usize::from(pr.iface)];
                match build_request(cx.pool, cx.cache, iface, pr.iface, pr.target, pr.unicast) {
                    Some(r) => {
                        host.stats.arp_requests_out += 1;
                        cx.originate(1);
                        out.push(TX, r);
                    }
                    None => host.stats.alloc_failures += 1,
                }
            }
        }
    }
}
