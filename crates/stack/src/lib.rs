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
#![forbid(unsafe_code)]

// What ports and the stack agree a packet is (its metadata's meaning, the dissector, device
// offloads) lives in `netbatch-packet`, which ports depend on instead of the stack; the
// stack's modules name it as their own.
pub use netbatch_packet::{dissect, meta, offload};

pub mod arp;
pub mod assemble;
pub mod cls;
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

pub use assemble::{Entries, GraphOptions, build, entries, node};

/// Every set of drop reasons the stack declares, one per protocol module (for reports,
/// and for the check that no two reasons share a name).
pub const REASON_SETS: &[&[netbatch_engine::Reason]] = &[
    l2::input::reason::ALL,
    arp::input::reason::ALL,
    neigh::reason::ALL,
    ip4::input::reason::ALL,
    ip6::input::reason::ALL,
    route::reason::ALL,
    ip6::route::reason::ALL,
    ip6::local::reason::ALL,
    ip6::forward::reason::ALL,
    ip6::icmp_error::reason::ALL,
    ip6::local_out::reason::ALL,
    icmp6::input::reason::ALL,
    nd::input::reason::ALL,
    nd::resolve::reason::ALL,
    ip4::local::reason::ALL,
    ip4::forward::reason::ALL,
    ip4::fragment::reason::ALL,
    ip4::icmp_error::reason::ALL,
    filter::hook::reason::ALL,
    udp::input::reason::ALL,
    tcp::reason::ALL,
    icmp::input::reason::ALL,
    gso::reason::ALL,
    tx::reason::ALL,
    cls::stage::reason::ALL,
    hostif::reason::ALL,
];
pub use host::{Host, HostParams, HostStats};
