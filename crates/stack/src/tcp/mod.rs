//! TCP to our own addresses: netbatch terminates no TCP itself. `tcp-input` hands such
//! packets to the host kernel when a host port (TAP) is configured, else drops them
//! (`TcpNoHandler`).

use netbatch_engine::{Cx, Next, Out, PktList, Stage};

use crate::host::Host;

/// Arc to the host hand-off.
pub const HOST: Next = Next(0);

/// The local TCP stage.
#[derive(Debug, Default)]
pub struct TcpInput;

impl Stage<Host> for TcpInput {
    fn arcs(&self) -> &[&'static str] {
        &["host"]
    }

    fn process(&mut self, _: &mut Host, _: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for p in list.drain(..) {
            out.push(HOST, p);
        }
    }
}
