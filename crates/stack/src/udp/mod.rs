//! UDP (RFC 768): the input stage and the socket table.
//!
//! Invariant after `udp-input`: the packet's length is exactly IP header + UDP length,
//! the checksum (when present) has been verified, and the packet sits in exactly one
//! socket queue.

pub mod input;
pub mod socket;

use core::net::Ipv4Addr;

use netbatch_engine::PktRef;

use crate::ip4::{be16, be32};

/// A received datagram as an application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Sender address.
    pub src: Ipv4Addr,
    /// Sender port.
    pub src_port: u16,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Destination port.
    pub dst_port: u16,
    /// Payload (for a GRO super-datagram, the merged payload of every segment).
    pub payload: &'a [u8],
    /// Segment size of a GRO super-datagram (0 for a plain datagram), like `UDP_GRO`'s
    /// cmsg.
    pub segment_size: u16,
}

/// Reads a queued datagram. Valid for packets taken from a socket queue (the UDP stage
/// established the invariant); `None` if the packet is not laid out as one.
pub fn datagram<'a>(v: &PktRef<'a>) -> Option<Datagram<'a>> {
    let l3 = usize::from(v.meta.l3);
    let l4 = usize::from(v.meta.l4);
    let end = usize::from(v.meta.data) + usize::from(v.meta.len);
    let b: &'a [u8] = v.buf;
    if l4 + 8 > end || l3 + 20 > l4 {
        return None;
    }
    Some(Datagram {
        src: Ipv4Addr::from(be32(b, l3 + 12)),
        dst: Ipv4Addr::from(be32(b, l3 + 16)),
        src_port: be16(b, l4),
        dst_port: be16(b, l4 + 2),
        payload: &b[l4 + 8..end],
        segment_size: v.meta.gso_size,
    })
}
