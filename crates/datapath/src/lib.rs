//! The netbatch datapath: what runs per packet. A worker and its poll loop (`worker`),
//! steering between workers (`rps`), the worker threads, their mailboxes and the port
//! faults that stop them (`threads`), the latency histogram (`latency`) and the built-in
//! applications the workers poll (`apps`).
//!
//! It knows no configuration file, control socket or metrics exporter: the control plane
//! (`netbatch-runtime`) builds workers from a configuration, hands them plain parameters
//! ([`PollParams`], [`rps::RpsParams`], [`threads::RunParams`]) and reaches running
//! workers only through [`threads::Remote`].
#![forbid(unsafe_code)]

pub mod apps;
pub mod latency;
pub mod rps;
pub mod threads;
pub mod worker;

pub use worker::{PollParams, Worker, WorkerStats};

/// Every drop reason the datapath can count: the engine's, the stack's (those its stages
/// declare, `netbatch_stack::reason_sets`) and the worker's and RPS's.
pub fn reason_sets() -> Vec<&'static [netbatch_engine::Reason]> {
    let mut v = vec![netbatch_engine::reason::ALL];
    v.extend(netbatch_stack::reason_sets());
    v.extend([worker::reason::ALL, rps::reason::ALL]);
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_drop_reason_has_its_own_name_and_a_description() {
        assert_eq!(
            netbatch_engine::drop::check_sets(&super::reason_sets()),
            Ok(())
        );
    }
}
