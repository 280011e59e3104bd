//! `ip4-local`: local delivery demux by IP protocol.
//!
//! Fragments are dropped (`ip4_frag_reassembly`: netbatch does not reassemble); UDP, ICMP
//! and TCP go to their stages; any other protocol asks for ICMP protocol unreachable
//! (RFC 1122 3.2.2.1), which `ip4-icmp-error` suppresses for broadcasts. On a port paired
//! with a host interface ([`crate::hostif`]) fragments and other protocols (OSPF, VRRP,
//! ...) go to the kernel instead, which reassembles and answers.

use netbatch_engine::{Cx, Out, PktList, Stage};

use super::header;
use crate::dissect::L4;
use crate::host::Host;
use crate::hostif::punt_port;

netbatch_engine::reasons! {
    /// Why `ip4-local` does not deliver a packet.
    pub mod reason {
        FRAG_REASSEMBLY = "ip4_frag_reassembly": "fragment for local delivery (no reassembly)",
        UNKNOWN_PROTOCOL = "unknown_protocol": "no handler for the IP protocol",
    }
}

netbatch_engine::arcs! {
    /// Arc to UDP.
    pub UDP = "udp";
    /// Arc to ICMP.
    pub ICMP = "icmp";
    /// Arc to TCP (host hand-off or drop).
    pub TCP = "tcp";
    /// Arc to the ICMP error stage.
    pub ERROR = "error";
    /// Arc to the host kernel ([`crate::hostif`]).
    pub HOST = "host";
}

/// The local delivery stage.
#[derive(Debug, Default)]
pub struct Ip4Local;

impl Stage<Host> for Ip4Local {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            // MF set or a non-zero offset (the packet starts at its IP header).
            if header(v.data()).is_some_and(|ip| ip.is_fragment()) {
                if punt_port(host, v.meta.in_port).is_some() {
                    out.push(HOST, p);
                } else {
                    out.drop(p, reason::FRAG_REASSEMBLY);
                }
                continue;
            }
            match L4::of(v.meta.l4_type) {
                L4::Udp => out.push(UDP, p),
                L4::Icmp => out.push(ICMP, p),
                L4::Tcp => out.push(TCP, p),
                _ if punt_port(host, v.meta.in_port).is_some() => out.push(HOST, p),
                _ => {
                    v.meta.note = crate::ip4::icmp_error::Cause::UnknownProtocol.note();
                    out.push(ERROR, p);
                }
            }
        }
    }
}
