//! What netbatch's fuzz targets check, one function per target, each taking the fuzzer's
//! bytes and panicking when a property fails (the fuzzer reports a panic as a crash).
//!
//! The functions are plain safe Rust, so the same checks run three ways: under libFuzzer
//! (`fuzz/`, `scripts/fuzz`), over the checked-in corpora by `cargo test` (this crate's
//! `tests/corpus.rs`), and by hand on one input when a finding is minimised.
//!
//! - Wire views ([`wire`]): parsing never panics, every accessor of a checked view stays
//!   inside the buffer, and where a repr exists, parse → emit → parse gives the same repr
//!   and emitting it again the same bytes (the input's own bytes where the format has one
//!   encoding). Checksums agree with the RFC 1071 reference, incremental updates with a
//!   recomputation, the table-driven Toeplitz hash with the bitwise one.
//! - The dissector ([`mod@dissect`]): offsets inside the frame, what it records equal to an
//!   independent walk of the headers through the wire views, the same record through the
//!   packet path (`frame`) as through `parse`, and every reader consistent with it.
//! - The whole graph ([`mod@graph`]): frames built from realistic templates with fields (and
//!   raw bytes) from the input, in both batch modes, both dispatch strategies and every
//!   GRO mode, through a worker built from a configuration as `netbatch replay` builds
//!   it; after every burst `rx + originated = tx + delivered + dropped + held`, and after
//!   shutdown every buffer is back in the pool.
//! - The configuration ([`mod@config`]): any text is accepted or refused with errors that
//!   each name a key and a reason; nothing panics.
//!
//! Every input is bounded in work (frames per input, bytes per frame, poll rounds), so a
//! slow input is a finding, not the fuzzer's cost.
#![forbid(unsafe_code)]

pub mod config;
pub mod dissect;
pub mod graph;
mod input;
pub mod wire;
pub mod wire6;

pub use config::config;
pub use dissect::dissect;
pub use graph::graph;
pub use wire::{
    wire_arp, wire_checksum, wire_ethernet, wire_icmpv4, wire_ipv4, wire_tcp, wire_toeplitz,
    wire_udp, wire_vlan,
};
pub use wire6::{wire_icmpv6, wire_ipv6};

/// A fuzz target's check.
pub type Check = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/` file and corpus directory.
pub const TARGETS: &[(&str, Check)] = &[
    ("wire_ethernet", wire_ethernet),
    ("wire_vlan", wire_vlan),
    ("wire_arp", wire_arp),
    ("wire_ipv4", wire_ipv4),
    ("wire_icmpv4", wire_icmpv4),
    ("wire_ipv6", wire_ipv6),
    ("wire_icmpv6", wire_icmpv6),
    ("wire_udp", wire_udp),
    ("wire_tcp", wire_tcp),
    ("wire_checksum", wire_checksum),
    ("wire_toeplitz", wire_toeplitz),
    ("dissect", dissect),
    ("graph", graph),
    ("config", config),
];

/// The check of target `name`.
pub fn check(name: &str) -> Option<Check> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, c)| c)
}
