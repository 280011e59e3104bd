//! UDP (RFC 768): the input stage and the socket table.
//!
//! Invariant after `udp-input`: the packet's length is exactly IP header + UDP length,
//! the checksum (when present) has been verified, and the packet sits in exactly one
//! socket queue.

pub mod input;
pub mod socket;

use core::net::Ipv4Addr;

use netbatch_engine::PktRef;

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
    let ip = b.get(l3..)?.first_chunk::<20>()?;
    let u = b.get(l4..)?.first_chunk::<8>()?;
    let payload = b.get(l4 + 8..end)?;
    Some(Datagram {
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        src_port: u16::from_be_bytes([u[0], u[1]]),
        dst_port: u16::from_be_bytes([u[2], u[3]]),
        payload,
        segment_size: v.meta.gso_size,
    })
}
