//! The netbatch runtime: workers and their poll loop, built-in applications, and the
//! assembly of hosts from a description of ports, addresses and routes.
#![forbid(unsafe_code)]

pub mod apps;
pub mod build;
pub mod config;
pub mod datapath;
pub mod latency;
pub mod replay;
pub mod rps;
pub mod run;
pub mod setup;
pub mod worker;

pub use worker::{PollParams, Worker, WorkerStats};
