//! `tx`: puts finished frames on their port's transmit queue; the worker flushes the
//! queues to the ports in bursts after each poll. `tx-<port>` is one port's own
//! transmit node, which the output stages reach by a per-port arc.
//!
//! No frame leaves above its interface's MTU: the neighbour stage checks every routed
//! packet (and sends what is too long to fragmentation), and what reaches the port by
//! `tx` instead (ARP, frames handed to the transmit entry) is checked here, a plain frame
//! by its length after the link header, a super-packet by its segment size
//! (`tx_over_mtu`).

use netbatch_engine::{Cx, Next, Out, PktList, Stage};

use crate::assemble::node;
use crate::declare::{Decl, Decode};
use crate::host::Host;
use crate::meta::{Field, Fields, gso};

netbatch_engine::reasons! {
    /// Why `tx` drops a frame.
    pub mod reason {
        OVER_MTU = "tx_over_mtu": "frame longer than its interface's MTU at transmit",
    }
}

/// The name of port `port`'s transmit node (`tx-<port>`), interned once per process.
pub fn node_name(port: &str) -> &'static str {
    netbatch_engine::intern(&format!("tx-{port}"))
}

/// A stage's arcs: its own `fixed` ones, then one `tx-<port>` arc per port.
pub fn with_port_arcs(fixed: &[&'static str], ports: &[&str]) -> Vec<&'static str> {
    let mut arcs = fixed.to_vec();
    arcs.extend(ports.iter().map(|p| node_name(p)));
    arcs
}

/// The arc to port `port`'s transmit node in `arcs` (made by [`with_port_arcs`] with
/// `fixed` arcs in front), if the port has one.
#[inline]
pub fn port_arc(arcs: &[&'static str], fixed: usize, port: u16) -> Option<Next> {
    let a = usize::from(port) + fixed;
    (a < arcs.len()).then_some(())?;
    u8::try_from(a).ok().map(Next)
}

/// `tx`: the generic transmit node, for frames built outside the IP path.
pub const DECL: Decl = Decl {
    reasons: &[reason::ALL],
    decode: Decode::Out,
    reads: Fields::of(&[Field::OutIf, Field::Gso]),
    ..Decl::new(node::TX, |_| Box::new(Tx))
};

/// `tx-<port>`: one transmit node per port (named as [`node_name`] names them).
pub const PORT_DECL: Decl = Decl {
    decode: Decode::Out,
    per_port: true,
    ..Decl::new("tx-<port>", |m| Box::new(TxPort::new(m.port)))
};

/// The transmit stage.
#[derive(Debug, Default)]
pub struct Tx;

impl Stage<Host> for Tx {
    fn arcs(&self) -> &[&'static str] {
        &[]
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut cur_if = u16::MAX;
        let mut port = usize::MAX;
        // The interface's MTU and link header length.
        let (mut mtu, mut l2) = (0u32, 0u32);
        for p in list.drain(..) {
            let m = cx.pool.get(&p).meta;
            let out_if = m.out_if;
            if out_if != cur_if {
                match host.ifaces.get(usize::from(out_if)) {
                    Some(i) => {
                        cur_if = out_if;
                        port = usize::from(i.port);
                        mtu = u32::from(i.mtu);
                        l2 = (netbatch_wire::ethernet::HEADER_LEN + i.tags.len()) as u32;
                    }
                    None => {
                        out.drop(p, netbatch_engine::reason::PORT_DOWN);
                        continue;
                    }
                }
            }
            let too_long = if m.gso_type == gso::NONE {
                m.total_len.saturating_sub(l2) > mtu
            } else {
                u32::from(m.gso_size) > mtu
            };
            if too_long {
                out.drop(p, reason::OVER_MTU);
                continue;
            }
            match host.tx.get_mut(port) {
                Some(q) => q.push(p),
                None => out.drop(p, netbatch_engine::reason::PORT_DOWN),
            }
        }
    }
}

/// `tx-<port>`: the transmit node of one port. The neighbour stage already knows each
/// packet's port, so its packets arrive here grouped by port and the whole list is
/// appended to the port's queue without reading a single packet.
#[derive(Debug)]
pub struct TxPort {
    port: usize,
}

impl TxPort {
    /// The transmit node of port `port`.
    pub fn new(port: u16) -> Self {
        Self {
            port: usize::from(port),
        }
    }
}

impl Stage<Host> for TxPort {
    fn arcs(&self) -> &[&'static str] {
        &[]
    }

    fn process(&mut self, host: &mut Host, _: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        match host.tx.get_mut(self.port) {
            Some(q) if q.is_empty() => core::mem::swap(q, list),
            Some(q) => q.append(list),
            None => {
                for p in list.drain(..) {
                    out.drop(p, netbatch_engine::reason::PORT_DOWN);
                }
            }
        }
    }
}
