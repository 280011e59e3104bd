//! The netbatch runtime: workers and their poll loop, built-in applications, and the
//! assembly of hosts from a description of ports, addresses and routes.
#![forbid(unsafe_code)]

pub mod apps;
pub mod build;
pub mod claim;
pub mod config;
pub mod control;
pub mod datapath;
pub mod latency;
pub mod linux;
pub mod metrics;
pub mod notify;
pub mod replay;
pub mod rps;
pub mod run;
pub mod setup;
pub mod worker;

pub use worker::{PollParams, Worker, WorkerStats};

/// Every drop reason the datapath can count: the engine's, the stack's (those its stages
/// declare, `netbatch_stack::reason_sets`) and the runtime's.
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
