//! UDP (RFC 768): the input stage, the socket table and the send path.
//!
//! Invariant after `udp-input`: the packet's length is exactly IP header + UDP length,
//! the checksum (when present) has been verified, and the packet sits in exactly one
//! socket queue.

pub mod input;
pub mod output;
pub mod socket;

use core::net::IpAddr;

use netbatch_engine::{Pkt, PktRef, Pool};
use netbatch_wire::udp::{self, UdpPacket};

/// A received datagram as an application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Sender address.
    pub src: IpAddr,
    /// Sender port.
    pub src_port: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dst_port: u16,
    /// Payload in the first buffer (all of it for a plain datagram; a super-datagram's
    /// first segment or segments, the rest in [`Datagram::payload_parts`]).
    pub payload: &'a [u8],
    /// Segment size of a GRO super-datagram (0 for a plain datagram), like `UDP_GRO`'s
    /// cmsg.
    pub segment_size: u16,
    /// Wire datagrams this stands for (1 for a plain datagram).
    pub segments: u16,
    more: Option<&'a Pkt>,
}

impl<'a> Datagram<'a> {
    /// The whole payload as the slices it lies in, in order (one slice for a plain
    /// datagram; a GRO super-datagram has one per merged segment, no byte copied).
    /// Every slice but the last holds whole segments.
    pub fn payload_parts(&self, pool: &'a Pool) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut next = self.more;
        core::iter::once(self.payload).chain(core::iter::from_fn(move || {
            let v = pool.get(next?);
            next = v.meta.chain.as_ref();
            Some(v.data())
        }))
    }

    /// Whether the payload continues in chained buffers (a GRO super-datagram).
    #[inline]
    pub fn is_chained(&self) -> bool {
        self.more.is_some()
    }

    /// Payload bytes over every part.
    pub fn payload_len(&self, pool: &'a Pool) -> usize {
        self.payload_parts(pool).map(<[u8]>::len).sum()
    }
}

/// Reads a queued datagram. Valid for packets taken from a socket queue (the UDP stage
/// established the invariant); `None` if the packet is not laid out as one.
pub fn datagram<'a>(v: &PktRef<'a>) -> Option<Datagram<'a>> {
    let l3 = usize::from(v.meta.l3);
    let l4 = usize::from(v.meta.l4);
    let end = usize::from(v.meta.data) + usize::from(v.meta.len);
    let b: &'a [u8] = v.buf;
    let (src, dst) = if v.meta.l3_type == crate::dissect::L3::Ipv6 as u8 {
        let ip = crate::ip6::header(b.get(l3..)?)?;
        (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()))
    } else {
        let ip = crate::ip4::header(b.get(l3..)?)?;
        (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()))
    };
    let u = UdpPacket::new_unchecked(b.get(l4..)?.first_chunk::<{ udp::HEADER_LEN }>()?);
    let payload = b.get(l4 + udp::HEADER_LEN..end)?;
    Some(Datagram {
        src,
        dst,
        src_port: u.src_port(),
        dst_port: u.dst_port(),
        payload,
        segment_size: v.meta.gso_size,
        segments: v.meta.segs.max(1),
        more: v.meta.chain.as_ref(),
    })
}
