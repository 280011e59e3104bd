//! IPv4, one stage per file, named after the packet's path:
//!
//! `ip4-input` (validation) → `ip4-route` (local or forward) → `ip4-local` (protocol
//! demux) | `ip4-forward` (TTL, MTU) → … and, for packets this host originates,
//! `ip4-local-out` (route and finish the header). `ip4-fragment` takes what the
//! neighbour stage finds too large for its output MTU. `ip4-icmp-error` turns a packet
//! that carries a request for an ICMP error (`icmp_error::Request`) into that ICMP error,
//! in place. `options` holds what the stages do with the IP options a router acts on.
//!
//! Invariant after `ip4-input`: the packet starts at a valid IPv4 header
//! (`Meta::data == Meta::l3`), its length equals the header's total length, the header
//! checksum has been verified, and `Meta::l4` points past the header.

pub mod defrag;
pub mod forward;
pub mod fragment;
pub mod icmp_error;
pub mod input;
pub mod local;
pub mod local_out;
pub mod options;
pub mod redirect;
pub mod route;

use netbatch_wire::ipv4::{HEADER_LEN, Ipv4Packet};

/// A view of the fixed part of the IPv4 header `d` starts with; `None` when `d` is
/// shorter. Stages after `ip4-input` see packets whose header is whole, so they treat
/// `None` as a truncated packet.
#[inline(always)]
pub(crate) fn header(d: &[u8]) -> Option<Ipv4Packet<&[u8; HEADER_LEN]>> {
    d.first_chunk().map(Ipv4Packet::new_unchecked)
}

/// As [`header`], to rewrite fields in place.
#[inline(always)]
pub(crate) fn header_mut(d: &mut [u8]) -> Option<Ipv4Packet<&mut [u8; HEADER_LEN]>> {
    d.first_chunk_mut().map(Ipv4Packet::new_unchecked)
}
