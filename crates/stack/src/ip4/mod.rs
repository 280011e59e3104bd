//! IPv4, one stage per file, named after the packet's path:
//!
//! `ip4-input` (validation) → `ip4-route` (local or forward) → `ip4-local` (protocol
//! demux) | `ip4-forward` (TTL, MTU) → … and, for packets this host originates,
//! `ip4-local-out` (route and finish the header). `ip4-fragment` takes what the
//! neighbour stage finds too large for its output MTU. `ip4-icmp-error` turns a packet whose
//! `Meta::reason` names an ICMP-worthy failure into that ICMP error, in place.
//!
//! Invariant after `ip4-input`: the packet starts at a valid IPv4 header
//! (`Meta::data == Meta::l3`), its length equals the header's total length, the header
//! checksum has been verified, and `Meta::l4` points past the header.

pub mod forward;
pub mod fragment;
pub mod icmp_error;
pub mod input;
pub mod local;
pub mod local_out;
pub mod route;

/// Reads a big-endian u16 (one bounds check; callers have checked the length).
#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    match b[at..at + 2] {
        [x, y] => u16::from_be_bytes([x, y]),
        _ => unreachable!("a two-byte range has two bytes"),
    }
}

/// Reads a big-endian u32 (one bounds check; callers have checked the length).
#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    match b[at..at + 4] {
        [w, x, y, z] => u32::from_be_bytes([w, x, y, z]),
        _ => unreachable!("a four-byte range has four bytes"),
    }
}
