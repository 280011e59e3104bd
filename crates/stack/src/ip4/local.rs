//! `ip4-local`: local delivery demux by IP protocol.
//!
//! A fragment goes to `ip4-reassemble` ([`crate::ip4::defrag`]; Linux's `ip_defrag` in
//! `ip_local_deliver`), which sends its datagram back here once whole, as a defrag chain
//! (`flag::DEFRAG_CHAIN`: the head, the first fragment with the transport header, and
//! the later fragments chained behind it); with tracking, `ip4-defrag` made the chain
//! already and `ct-confirm-local` leaves it whole. A chain is demultiplexed by its head
//! like any packet: the transport stages read the datagram over the chain. A protocol
//! some stage takes goes to that stage (its declaration registers it,
//! [`crate::declare::Take`]: UDP, ICMP and TCP in the stack), one table load per packet;
//! any other protocol asks for ICMP protocol unreachable
//! (RFC 1122 3.2.2.1), which `ip4-icmp-error` suppresses for broadcasts. On a port paired
//! with a host interface ([`crate::hostif`]) fragments and other protocols (OSPF, VRRP,
//! ...) go to the kernel instead, which reassembles and answers. The fragment check is
//! the one this stage always made: reassembly costs a packet that is no fragment nothing.

use netbatch_engine::{Cx, Out, PktList, Stage};

use super::header;
use super::icmp_error::{Cause, Request};
use crate::assemble::node;
use crate::declare::{Decl, Decode, Demux, Family, To};
use crate::host::Host;
use crate::hostif::punt_port;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `ip4-local` does not deliver a packet.
    pub mod reason {
        UNKNOWN_PROTOCOL = "unknown_protocol": "no handler for the IP protocol",
    }
}

netbatch_engine::arcs! {
    /// Arc to the ICMP error stage.
    pub ERROR = "error";
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
    /// Arc to `ip4-reassemble` (fragments).
    pub REASSEMBLE = "reassemble";
}

/// `ip4-local`, the IPv4 local protocol demux: after its own arcs, one to each stage
/// that takes an IPv4 protocol.
pub const DECL: Decl = Decl {
    arcs: &[
        ("error", To::Node(node::IP4_ICMP_ERROR)),
        ("host", crate::hostif::TO_HOST),
        ("reassemble", To::Node(node::IP4_REASSEMBLE)),
    ],
    demux: Some(Family::V4),
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4, Field::InPort]),
    writes: Fields::of(&[Field::Ask]),
    ..Decl::new(node::IP4_LOCAL, |m| Box::new(Ip4Local::new(m.demux(ARCS))))
};

/// The local delivery stage.
#[derive(Debug, Clone)]
pub struct Ip4Local {
    /// The arc to the stage of each protocol.
    demux: Demux,
}

impl Ip4Local {
    /// The stage over `demux` (made from its own arcs, [`ARCS`]).
    pub fn new(demux: Demux) -> Self {
        Self { demux }
    }
}

impl Stage<Host> for Ip4Local {
    fn arcs(&self) -> &[&'static str] {
        self.demux.arcs()
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            // MF set or a non-zero offset (the packet starts at its IP header); a datagram
            // made whole (its head is a fragment too) is delivered.
            if header(v.data()).is_some_and(|ip| ip.is_fragment())
                && v.meta.flags & flag::DEFRAG_CHAIN == 0
            {
                if punt_port(host, v.meta.in_port).is_some() {
                    out.push(HOST, p);
                } else {
                    out.push(REASSEMBLE, p);
                }
                continue;
            }
            match self.demux.next(v.meta.l4_type) {
                Some(a) => out.push(a, p),
                None if punt_port(host, v.meta.in_port).is_some() => out.push(HOST, p),
                None => {
                    Request::new(Cause::UnknownProtocol).put(v.meta);
                    out.push(ERROR, p);
                }
            }
        }
    }
}
