//! IPv4, one stage per file, named after the packet's path:
//!
//! `ip4-input` (validation) → `ip4-route` (local or forward) → `ip4-local` (protocol
//! demux) | `ip4-forward` (TTL, MTU) → … and, for packets this host originates,
//! `ip4-local-out` (route and finish the header). `ip4-icmp-error` turns a packet whose
//! `Meta::reason` names an ICMP-worthy failure into that ICMP error, in place.
//!
//! Invariant after `ip4-input`: the packet starts at a valid IPv4 header
//! (`Meta::data == Meta::l3`), its length equals the header's total length, the header
//! checksum has been verified, and `Meta::l4` points past the header.

pub mod forward;
pub mod icmp_error;
pub mod input;
pub mod local;
pub mod local_out;
pub mod route;

/// Reads a big-endian u16.
#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32.
#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
