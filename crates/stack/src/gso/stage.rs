//! `gso`: super-packets whose output port lacks the matching offload are segmented here,
//! after the neighbour stage has put the link header on them, and go on to the port's
//! transmit node as wire packets. Plain packets that follow a super-packet to the same
//! port in a list pass through unchanged, so the port sees them in list order. A super-packet that cannot be segmented is dropped
//! whole (every wire packet it stands for counted) with the reason.

use netbatch_engine::{Cx, Out, Pkt, PktList, Reason, Stage};

use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::host::Host;
use crate::meta::{Field, Fields};
use crate::tx::{port_arc, with_port_arcs};

netbatch_engine::arcs! {
    /// Arc to the generic transmit stage (ports without their own arc).
    pub TX = "tx";
}

/// The GSO stage.
#[derive(Debug)]
pub struct Gso {
    /// `tx`, then one `tx-<port>` arc per port.
    arcs: Vec<&'static str>,
    segs: Vec<Pkt>,
    /// Super-packets segmented.
    pub segmented: u64,
    /// Wire packets produced.
    pub segments: u64,
}

impl Gso {
    /// The stage for a host with these ports.
    pub fn new(ports: &[&str]) -> Self {
        Self {
            arcs: with_port_arcs(ARCS, ports),
            segs: Vec::new(),
            segmented: 0,
            segments: 0,
        }
    }
}

/// `gso`: one arc per port to its `tx-<port>` node besides its own.
pub const DECL: Decl = Decl {
    arcs: &[("tx", To::Node(node::TX))],
    port_arcs: true,
    reasons: &[super::reason::ALL],
    decode: Decode::Out,
    reads: Fields::of(&[Field::L3, Field::L4, Field::OutIf, Field::Gso, Field::Csum]),
    writes: Fields::of(&[Field::Gso, Field::Csum]),
    ..Decl::new(node::GSO, |m| Box::new(Gso::new(m.ports)))
};

impl Stage<Host> for Gso {
    fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    fn reasons(&self) -> &'static [Reason] {
        super::reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("segmented", self.segmented), ("segments", self.segments)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let (mut cur_if, mut arc) = (u16::MAX, TX);
        for p in list.drain(..) {
            let out_if = cx.pool.get(&p).meta.out_if;
            if out_if != cur_if {
                cur_if = out_if;
                arc = host
                    .ifaces
                    .get(usize::from(out_if))
                    .and_then(|i| port_arc(&self.arcs, ARCS.len(), i.port))
                    .unwrap_or(TX);
            }
            if cx.pool.get(&p).meta.gso_type == crate::meta::gso::NONE {
                // A plain packet that followed a super-packet here, to keep its place.
                out.push(arc, p);
                continue;
            }
            match super::segment(cx.pool, cx.cache, p, &mut self.segs) {
                Ok(()) => {
                    self.segmented += 1;
                    self.segments += self.segs.len() as u64;
                    out.push_list(arc, &mut self.segs);
                }
                Err((p, reason)) => out.drop(p, reason),
            }
        }
    }
}
