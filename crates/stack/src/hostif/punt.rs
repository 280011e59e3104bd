//! `host-punt`: a received packet netbatch does not consume goes to the kernel through
//! the tap paired with its port, as it arrived.
//!
//! The link header `eth-input` pulled is still in front of the packet (stages before this
//! one change nothing there): it is put back, so the kernel sees the frame with its
//! destination MAC (the port's, which the tap carries), VLAN tags and all. A super-packet
//! (GRO) is segmented first: the tap is opened without offloads. A datagram reassembled
//! for local delivery (a defrag chain) goes as the fragments it came as
//! ([`crate::defrag::split`]): the kernel reassembles them itself.

use netbatch_engine::{Cx, Out, Pkt, PktList, Reason, Stage};

use super::{punt_port, reason};
use crate::assemble::node;
use crate::declare::Decl;
use crate::host::Host;
use crate::meta::{Field, Fields, flag, gso};
use crate::tx::{port_arc, with_port_arcs};

/// The punt stage: one `tx-<port>` arc per port (taps among them).
#[derive(Debug)]
pub struct HostPunt {
    arcs: Vec<&'static str>,
    segs: Vec<Pkt>,
    /// The fragments of a defrag chain being handed over.
    frags: Vec<Pkt>,
    /// Wire packets handed to the kernel.
    punted: u64,
    /// Super-packets segmented on the way.
    segmented: u64,
}

impl HostPunt {
    /// The stage for a host with these ports.
    pub fn new(ports: &[&str]) -> Self {
        Self {
            arcs: with_port_arcs(&[], ports),
            segs: Vec::new(),
            frags: Vec::new(),
            punted: 0,
            segmented: 0,
        }
    }
}

/// Puts the link header the packet arrived with back in front of it; false when the
/// packet was not received (no link header is recorded for it) or its record does not
/// describe where its data starts now.
fn restore_link_header(v: &mut netbatch_engine::PktMut<'_>) -> bool {
    let m = &v.meta;
    if m.flags & flag::ORIGINATED != 0 || m.l2_len == 0 {
        return false;
    }
    let Some(start) = m.l3.checked_sub(u16::from(m.l2_len)) else {
        return false;
    };
    match m.data.checked_sub(start) {
        Some(back) => v.push(usize::from(back)).is_some(),
        None => false,
    }
}

/// `host-punt`, with host interface pairs: one arc per port to its `tx-<port>` node.
pub const DECL: Decl = Decl {
    port_arcs: true,
    reasons: &[reason::ALL],
    reads: Fields::of(&[Field::InPort, Field::L3, Field::Origin, Field::Gso]),
    present: |o| o.host_pairs,
    ..Decl::new(node::HOST_PUNT, |m| Box::new(HostPunt::new(m.ports)))
};

impl Stage<Host> for HostPunt {
    fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("punted", self.punted), ("segmented", self.segmented)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for p in list.drain(..) {
            if cx.pool.get(&p).meta.flags & flag::DEFRAG_CHAIN == 0 {
                self.one(host, cx, p, out);
                continue;
            }
            let mut frags = core::mem::take(&mut self.frags);
            crate::defrag::split(cx.pool, p, &mut frags);
            for q in frags.drain(..) {
                self.one(host, cx, q, out);
            }
            self.frags = frags;
        }
    }
}

impl HostPunt {
    /// Hands `p` to the kernel of its port's pair.
    fn one(&mut self, host: &Host, cx: &mut Cx<'_>, mut p: Pkt, out: &mut Out) {
        let mut v = cx.pool.get_mut(&mut p);
        let arc = punt_port(host, v.meta.in_port).and_then(|t| port_arc(&self.arcs, 0, t));
        let Some(arc) = arc.filter(|_| restore_link_header(&mut v)) else {
            out.drop(p, reason::NO_PAIR);
            return;
        };
        let wire = v.meta.wire_packets();
        if v.meta.gso_type == gso::NONE {
            self.punted += wire;
            out.push(arc, p);
            return;
        }
        match crate::gso::segment(cx.pool, cx.cache, p, &mut self.segs) {
            Ok(()) => {
                self.punted += wire;
                self.segmented += 1;
                for q in self.segs.drain(..) {
                    out.push(arc, q);
                }
            }
            Err((p, r)) => out.drop(p, r),
        }
    }
}
