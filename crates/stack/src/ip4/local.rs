//! `ip4-local`: local delivery demux by IP protocol.
//!
//! Fragments are dropped (`Ip4FragReassembly`: netbatch does not reassemble); UDP, ICMP
//! and TCP go to their stages; any other protocol asks for ICMP protocol unreachable
//! (RFC 1122 3.2.2.1), which `ip4-icmp-error` suppresses for broadcasts.

use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};

use super::be16;
use crate::host::Host;

/// Arc to UDP.
pub const UDP: Next = Next(0);
/// Arc to ICMP.
pub const ICMP: Next = Next(1);
/// Arc to TCP (host hand-off or drop).
pub const TCP: Next = Next(2);
/// Arc to the ICMP error stage.
pub const ERROR: Next = Next(3);

/// The local delivery stage.
#[derive(Debug, Default)]
pub struct Ip4Local;

impl Stage<Host> for Ip4Local {
    fn arcs(&self) -> &[&'static str] {
        &["udp", "icmp", "tcp", "error"]
    }

    fn process(&mut self, _: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            let d = v.data();
            // MF set or a non-zero offset.
            if be16(d, 6) & 0x3fff != 0 {
                out.drop(p, DropReason::Ip4FragReassembly);
                continue;
            }
            match d[9] {
                17 => out.push(UDP, p),
                1 => out.push(ICMP, p),
                6 => out.push(TCP, p),
                _ => {
                    v.meta.reason = DropReason::UnknownProtocol as u16;
                    out.push(ERROR, p);
                }
            }
        }
    }
}
