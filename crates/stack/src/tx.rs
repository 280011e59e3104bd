//! `tx`: puts finished frames on their port's transmit queue; the worker flushes the
//! queues to the ports in bursts after each poll.

use netbatch_engine::{Cx, DropReason, Out, PktList, Stage};

use crate::host::Host;

/// The transmit stage.
#[derive(Debug, Default)]
pub struct Tx;

impl Stage<Host> for Tx {
    fn arcs(&self) -> &'static [&'static str] {
        &[]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut cur_if = u16::MAX;
        let mut port = usize::MAX;
        for p in list.drain(..) {
            let out_if = cx.pool.get(&p).meta.out_if;
            if out_if != cur_if {
                match host.ifaces.get(usize::from(out_if)) {
                    Some(i) => {
                        cur_if = out_if;
                        port = usize::from(i.port);
                    }
                    None => {
                        out.drop(p, DropReason::PortDown);
                        continue;
                    }
                }
            }
            match host.tx.get_mut(port) {
                Some(q) => q.push(p),
                None => out.drop(p, DropReason::PortDown),
            }
        }
    }
}
