//! TCP to our own addresses: netbatch terminates no TCP itself. `tcp-input` hands such
//! packets on its `host` arc: to the kernel of a host interface pair ([`crate::hostif`]),
//! or to the node the graph names, else they are dropped (`tcp_no_handler`).

use netbatch_engine::{Cx, Out, PktList, Stage};

use crate::assemble::{GraphOptions, node};
use crate::declare::{Decl, Decode, Take, To};
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

/// `tcp-input`: takes protocol 6 of both versions (RFC 9293).
pub const DECL: Decl = Decl {
    arcs: &[("host", To::Pick(handler))],
    takes: &[Take::v4(6, "tcp"), Take::v6(6, "tcp")],
    reasons: &[reason::ALL],
    decode: Decode::Ports,
    ..Decl::new(node::TCP_INPUT, |_| Box::new(TcpInput))
};

/// Where local TCP goes: the kernel of a host interface pair when ports are paired (the
/// `tcp_to` node is then not used), else the node `tcp_to` names, else a drop.
fn handler(o: &GraphOptions) -> To {
    match o.tcp_to {
        _ if o.host_pairs => To::Node(node::HOST_PUNT),
        Some(n) => To::Node(n),
        None => To::Drop(reason::NO_HANDLER),
    }
}

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
