//! IPv6 longest-prefix-match forwarding: [`Fib6`] maps prefixes of any length /0 to
//! /128 to `u32` values (next-hop or adjacency indices, as the IPv4 [`fib`](crate::fib)
//! does), with a bulk build from a list, incremental insert and remove, and lookups
//! that neither panic nor allocate ([`Fib6::lookup`], [`Fib6::lookup_batch`]).
//! [`Ipv6Prefix`] is the prefix type; [`generate_prefixes`] makes realistic tables for
//! benchmarks.
//!
//! # Design
//!
//! A direct-indexed first stage on the top [`DIRECT_BITS`] = 16 address bits (65,536
//! entries of 8 bytes: the root of the subtree below, and the value of the longest
//! route of at most /16 covering the entry), then a *tree bitmap* (Eatherton, Varghese
//! and Dittia, 2004) of [`STRIDE`] = 6 bits per node. A node is 24 bytes: a 63-bit map
//! of the prefixes of relative length 0–5 it holds (heap order, so the longest match
//! among them is the highest set bit of the map ANDed with a per-chunk mask), a 64-bit
//! map of its children, and the bases of its contiguous child block and value block
//! (indexed by popcount). A lookup is one first-stage load, then one dependent node
//! load per six bits down to the deepest node on its path (a /48 route: six nodes),
//! remembering the last match; [`Fib6::lookup8`] walks eight addresses in lockstep so
//! that their loads overlap.
//!
//! Why this one, for a full table (200,000 routes: mostly /48, many /32–/44, some
//! /56–/64):
//!
//! * Expansion into stride-8 tables (DPDK's `rte_lpm6`, DIR-24-8 carried on to /128)
//!   costs 1 KiB per table, and a route alone in its /40 needs its own tables below the
//!   shared ones: for the generated 200,000 routes, 222,625 tables (217 MiB, plus a
//!   64 MiB first table) against 12 MiB here, far outside any cache.
//! * A hash table per length (VPP's IPv6 FIB, the kernel's old IPv4 `fib_hash`) probes
//!   every length present, longest first: a full table has 20 lengths or more, so an
//!   address under a /32 pays a dozen probes; binary search on lengths (Waldvogel) cuts
//!   that to about seven dependent probes, but needs marker entries that make removal
//!   delicate.
//! * A tree bitmap has no leaf pushing: an insert or remove touches one path (a route
//!   up to /16 only its first-stage range), never a subtree: 150–300 ns per insert at
//!   200,000 to 1,000,000 routes (a compaction, rare, costs one pass over the live
//!   nodes); a route costs one 4-byte value plus the nodes its path does not
//!   share (2.3 nodes, 61 bytes per route with the first stage, at 200,000 generated
//!   routes). Leaf-pushed variants (Poptrie) look up slightly faster but rebuild
//!   subtrees on update.
//!
//! Measured (release build, 2-vCPU AMD EPYC, the 1024 destinations of
//! `ip6-forward`'s flows, cache-warm): at 200,000 routes about 20 ns per lookup and
//! 16 ns per address batched when the POPCNT instruction may be used (`-C
//! target-cpu=x86-64-v2` or newer); the default x86-64 target counts bits in software:
//! about 39 and 28 ns. A million routes build in about 0.25 s in bulk, 0.3 s one by one.
//!
//! # Invariants
//!
//! * Routes are `(Ipv6Prefix, value)` with `value <= MAX_VALUE`: `u32::MAX` is the
//!   table's "no route". The prefix type has no host bits, so no route is malformed.
//! * First stage: entry `s` holds the value and length of the longest route of at most
//!   /16 containing its /16, or none, and the root of the subtree of the routes longer
//!   than /16 inside it, or 0. An insert of length `l` overwrites entries of length
//!   `<= l`; a remove rewrites those of exactly its length with the longest shorter
//!   route (from the per-length map of short routes).
//! * A route of length `l > 16` is held by exactly one node: the one at depth
//!   `d = 16 + 6⌊(l − 16)/6⌋` on its path, at position `(1 << (l − d)) | bits[d..l]`.
//! * A node exists exactly when a route lies at or below it (empty nodes are removed
//!   at once), so the shape is canonical: one-by-one inserts and a bulk build of the
//!   same routes make the same nodes (the tests check it).
//! * Every arena slot is used by exactly one node or value, or on exactly one free
//!   list, or (node slot 0, "no node") reserved.
//! * A failed call (value `u32::MAX`, node limit) changes nothing. Nothing panics on
//!   caller input; lookups check every index and end the walk on a broken one.
//!
//! # Memory bound
//!
//! The first stage is 2¹⁶ × 9 bytes = 576 KiB of zeroed memory, committed by the pages
//! routes write. A VRF's table ([`Fib6::sparse`]: on 4 KiB pages, its routes of /8 or
//! shorter kept in a side table of one entry per /8, not spread over the first stage)
//! commits a page per 512 slots its routes write: a default route and a few /64s cost a
//! few pages, not the whole stage. A route longer than /16 adds one
//! 4-byte value and at most one 24-byte node per level it reaches, `⌊(l − 16)/6⌋ + 1 <=
//! 19`; the node limit ([`Fib6::with_max_nodes`], [`DEFAULT_MAX_NODES`] = 8 Mi nodes,
//! 192 MiB) refuses growth beyond it with [`Fib6Error::NodesExhausted`]. A bulk build
//! packs both arenas. An incremental change moves one child or value block to a block
//! one larger or smaller; freed blocks are reused by size, and once free slots
//! outnumber used ones (and 4,096), the arenas are packed again: each arena holds at
//! most twice its live entries plus 4,096 slots (times the vector's growth).
//! [`Fib6::memory_bytes`] and [`Fib6::stats`] report it.
//!
//! Mutation needs `&mut`; sharing with concurrent readers is the caller's (the route
//! table's copy-and-publish).

mod error;
mod generate;
mod prefix;
mod trie;

#[cfg(test)]
mod tests;

pub use error::Fib6Error;
pub use generate::{GENERATED_HOPS, LENGTH_MIX, generate_prefixes};
pub use prefix::{If6Addr, Ipv6Prefix, Prefix6Error, mask6};
pub use trie::{
    DEFAULT_MAX_NODES, DIRECT_BITS, Fib6, Fib6Stats, MAX_NODES_LIMIT, MAX_VALUE, STRIDE,
};
