//! `host-inject`: frames the kernel sends through a tap leave by the tap's wire port,
//! unchanged.
//!
//! The kernel in the control namespace routed them, resolved their next hop and wrote
//! their link header (the tap carries the wire port's MAC), so nothing is looked up here:
//! the frame goes to its wire port's transmit node. What the wire port could not carry is
//! refused: a frame shorter than an Ethernet header (`host_truncated`), one longer than
//! the wire port's MTU after its link header (`host_over_mtu`: the tap's MTU may have been
//! raised in the namespace). Received frames enter here, not at `eth-input`, when their
//! port is a tap of a pair (the worker picks the entry per port).

use netbatch_engine::{Cx, Out, PktList, Reason, Stage};
use netbatch_wire::ethernet::HEADER_LEN;

use super::{Pair, reason};
use crate::assemble::node;
use crate::declare::Decl;
use crate::host::Host;
use crate::meta::{Field, Fields, gso};
use crate::tx::{port_arc, with_port_arcs};

/// The inject stage: one `tx-<port>` arc per port.
#[derive(Debug)]
pub struct HostInject {
    arcs: Vec<&'static str>,
    /// Frames sent on from the kernel.
    injected: u64,
}

impl HostInject {
    /// The stage for a host with these ports.
    pub fn new(ports: &[&str]) -> Self {
        Self {
            arcs: with_port_arcs(&[], ports),
            injected: 0,
        }
    }
}

/// `host-inject`, with host interface pairs: where a tap's frames enter; one arc per
/// port to its `tx-<port>` node.
pub const DECL: Decl = Decl {
    port_arcs: true,
    reasons: &[reason::ALL],
    reads: Fields::of(&[Field::InPort, Field::Gso]),
    writes: Fields::of(&[Field::L3, Field::L4]),
    present: |o| o.host_pairs,
    ..Decl::new(node::HOST_INJECT, |m| Box::new(HostInject::new(m.ports)))
};

impl Stage<Host> for HostInject {
    fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("injected", self.injected)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        // Hoisted per run of one tap (a list from one poll is one port).
        let (mut cur, mut to) = (u16::MAX, None);
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let port = v.meta.in_port;
            if port != cur {
                cur = port;
                to = match host.ports.get(usize::from(port)).map(|x| x.pair) {
                    Some(Pair::Inject(w)) => port_arc(&self.arcs, 0, w)
                        .zip(host.ports.get(usize::from(w)).map(|x| u32::from(x.mtu))),
                    _ => None,
                };
            }
            let Some((arc, mtu)) = to else {
                out.drop(p, reason::NO_PAIR);
                continue;
            };
            if v.data().len() < HEADER_LEN {
                out.drop(p, reason::TRUNCATED);
                continue;
            }
            crate::dissect::frame(&mut v);
            let l2 = u32::from(v.meta.l2_len).max(HEADER_LEN as u32);
            let too_long = if v.meta.gso_type == gso::NONE {
                v.meta.total_len.saturating_sub(l2) > mtu
            } else {
                u32::from(v.meta.gso_size) > mtu
            };
            if too_long {
                out.drop(p, reason::OVER_MTU);
                continue;
            }
            self.injected += v.meta.wire_packets();
            out.push(arc, p);
        }
    }
}
