//! The netbatch control plane: the configuration and the assembly of workers from it,
//! running them over real ports, the control socket, metrics, the mirror of the kernel's
//! tables and replay. The per-packet datapath it drives is `netbatch-datapath`.
#![forbid(unsafe_code)]

pub mod build;
pub mod claim;
pub mod config;
pub mod control;
pub mod linux;
pub mod metrics;
pub mod notify;
pub mod replay;
pub mod run;
pub mod setup;
