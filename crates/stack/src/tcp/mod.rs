//! TCP to our own addresses: netbatch terminates no TCP itself. `tcp-input` hands such
//! packets on its `host` arc: to the kernel of a host interface pair ([`crate::hostif`]),
//! or to the node the graph names, else they are dropped (`tcp_no_handler`).

use netbatch_engine::{Cx, Out, PktList, Stage};

use crate::host::Host;

netbatch_engine::reasons! {
    /// Why local TCP is dropped.
    pub mod reason {
        NO_HANDLER = "tcp_no_handler": "TCP to a local address and no host port to hand it to",
    }
}

netbatch_engine::arcs! {
    /// Arc to the host hand-off.
    pub HOST = "host";
}

/// The local TCP stage.
#[derive(Debug, Default)]
pub struct TcpInput;

impl Stage<Host> for TcpInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, _: &mut Host, _: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for p in list.drain(..) {
            out.push(HOST, p);
        }
    }
}
