//! The stages of netbatch, one module per protocol and one stage per file, named after
//! the packet's path: `l2::input` (`eth-input`), `arp::input`, `ip4::input`,
//! `filter::hook` (`hook-prerouting` …), `ip4::route`, `ip4::local`, `udp::input`,
//! `icmp::input`, `ip4::forward`, `ip4::icmp_error`, `ip4::local_out`,
//! `neigh::resolve` (`neighbour`), `tx`; for IPv6 `ip6::input`, `ip6::route`,
//! `ip6::local`, `udp::input` (`udp6-input`), `icmp6::input`, `nd::input`,
//! `ip6::forward`, `ip6::icmp_error`, `ip6::local_out`, `nd::resolve` (`ip6-neighbour`).
//!
//! Every stage is list-aware and keeps per-list state (route hint, last socket, last
//! neighbour) hoisted out of its packet loop. Every packet leaves a stage on an arc or
//! with a drop reason; none is lost.
//!
//! Each stage's module also declares how the stage fits in a graph ([`declare::Decl`]:
//! its arcs and where they go, the IP protocols it takes, its drop reasons, its trace
//! view, the metadata it reads and writes); [`assemble::STAGES`] lists the declarations
//! in pipeline order and the graph is assembled from them.
//!
//! The crate denies `clippy::indexing_slicing`: a malformed packet cannot panic a stage
//! through an index out of range. The stages read packets with `get`,
//! `split_at_checked`, `first_chunk`, slice patterns and the wire views, and an offset
//! that does not fit ends in the stage's drop reason. Indexing is left only where an
//! invariant keeps the index in range, each place under an `#[expect]` on the narrowest
//! item whose reason names it: the DIR-24-8 table and the IPv6 trie (lookups, first
//! stages, arenas), GRO's flow buckets, GSO's header block and the headers of a
//! fraglist's head and members (whose checked forms cost the fast path instructions,
//! `scripts/instructions`), the neighbour stages' rewrite caches, the martian tables,
//! and tables filled when compiling. Tests may index (`clippy.toml`).
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing)]

// What ports and the stack agree a packet is (its metadata's meaning, the dissector, device
// offloads) lives in `netbatch-packet`, which ports depend on instead of the stack; the
// stack's modules name it as their own.
pub use netbatch_packet::{dissect, meta, offload};

pub mod arp;
pub mod ask;
pub mod assemble;
pub mod cls;
pub mod ct;
pub mod declare;
pub mod defrag;
pub mod fib;
pub mod fib6;
pub mod filter;
pub mod gro;
pub mod gso;
pub mod host;
pub mod hostif;
pub mod icmp;
pub mod icmp6;
pub mod iface;
pub mod ip4;
pub mod ip6;
pub mod l2;
pub mod nat;
pub mod nd;
pub mod neigh;
pub mod prefix;
pub mod ratelimit;
pub mod route;
pub mod tcp;
pub mod timers;
pub mod trace;
pub mod tx;
pub mod udp;

pub use assemble::{Entries, GraphOptions, STAGES, build, build_from, entries, node};
pub use declare::reason_sets;
pub use host::{Host, HostParams, HostStats};
