//! UDP send for applications, with an optional segment size (like `UDP_SEGMENT`): one
//! call hands the stack a super-datagram that leaves as `ceil(len / segment_size)`
//! datagrams, segmented at transmit by GSO (or taken whole by a port with
//! `tx-udp-segmentation`).
//!
//! The rules are the kernel's (`udp_send_skb`, the `udpgso` selftest): a payload no
//! longer than the segment size goes as one plain datagram; a segment that would not fit
//! the route's MTU with its headers, more than [`MAX_SEGMENTS`] segments, or more than
//! [`MAX_PAYLOAD`] bytes in all are refused. The super-datagram is laid out as GRO builds
//! one (headers and the first segment in the first buffer, one segment per chained
//! buffer, payload sums recorded), so GSO never copies it.

use core::fmt;
use core::net::{IpAddr, SocketAddr};

use crate::meta::{flag, gso};
use netbatch_engine::{Cx, Pkt};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use netbatch_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use netbatch_wire::udp::{self, UdpPacket};

use super::socket::SocketId;
use crate::host::Host;
use crate::route::RouteKind;

/// The most segments in one send (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 128;
/// The most payload bytes in one send: an IPv4 packet of 65,535 bytes (an IPv6 payload
/// length would allow 20 bytes more; the smaller bound keeps one rule for both).
pub const MAX_PAYLOAD: usize = 65_535 - 20 - 8;

/// Why a send was refused (nothing was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The socket is closed.
    NoSocket,
    /// No usable route to the destination (or the route drops).
    NoRoute,
    /// More than [`MAX_PAYLOAD`] bytes, or (without segmentation) more than one buffer
    /// holds (`EMSGSIZE`).
    TooLong,
    /// A segment with its headers exceeds the route's MTU or a buffer (`EINVAL`).
    SegmentTooLarge,
    /// More than [`MAX_SEGMENTS`] segments (`EINVAL`).
    TooManySegments,
    /// Not enough free buffers (`ENOBUFS`).
    NoBuffer,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoSocket => "the socket is closed",
            Self::NoRoute => "no route to the destination",
            Self::TooLong => "message too long",
            Self::SegmentTooLarge => "segment size does not fit the path MTU or a buffer",
            Self::TooManySegments => "more segments than one send may carry",
            Self::NoBuffer => "no free packet buffers",
        })
    }
}

impl std::error::Error for SendError {}

/// Where a send goes: source address, the route's MTU, the IP header length.
struct Path {
    src: IpAddr,
    mtu: usize,
    ip_len: usize,
}

/// The source and MTU of a send from an address `bound` (unspecified: ours toward the
/// destination) to `dst`, by the route to it.
fn path(host: &Host, bound: IpAddr, dst: IpAddr) -> Result<Path, SendError> {
    match dst {
        IpAddr::V4(d) => {
            let hop = host.routes.lookup(u32::from(d)).ok_or(SendError::NoRoute)?;
            let (src, mtu) = match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => (d, usize::from(u16::MAX)),
                RouteKind::Unicast => {
                    let iface = host
                        .ifaces
                        .get(usize::from(hop.out_if))
                        .ok_or(SendError::NoRoute)?;
                    let src = iface.source_for(d).ok_or(SendError::NoRoute)?;
                    (src, usize::from(iface.mtu))
                }
                _ => return Err(SendError::NoRoute),
            };
            let src = match bound {
                IpAddr::V4(b) if !b.is_unspecified() => b,
                IpAddr::V4(_) => src,
                IpAddr::V6(_) => return Err(SendError::NoRoute),
            };
            Ok(Path {
                src: IpAddr::V4(src),
                mtu,
                ip_len: 20,
            })
        }
        IpAddr::V6(d) => {
            let hop = host
                .routes6
                .lookup(u128::from(d))
                .ok_or(SendError::NoRoute)?;
            let (src, mtu) = match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => (d, usize::from(u16::MAX)),
                RouteKind::Unicast => {
                    let iface = host
                        .ifaces
                        .get(usize::from(hop.out_if))
                        .ok_or(SendError::NoRoute)?;
                    (iface.source6_for(d), usize::from(iface.mtu))
                }
                _ => return Err(SendError::NoRoute),
            };
            let src = match bound {
                IpAddr::V6(b) if !b.is_unspecified() => b,
                IpAddr::V6(_) => src,
                IpAddr::V4(_) => return Err(SendError::NoRoute),
            };
            Ok(Path {
                src: IpAddr::V6(src),
                mtu,
                ip_len: 40,
            })
        }
    }
}

/// Sends `payload` from socket `sock` to `dst` (IPv4 or IPv6, the socket's family), cut
/// into datagrams of `segment_size` payload bytes (0: one datagram). Returns the
/// datagrams that will leave. The packet is queued for `ip4-local-out` (`ip6-local-out`)
/// and runs through the graph at the worker's next step.
pub fn send(
    host: &mut Host,
    cx: &mut Cx<'_>,
    sock: SocketId,
    dst: impl Into<SocketAddr>,
    payload: &[u8],
    segment_size: u16,
) -> Result<u16, SendError> {
    let dst: SocketAddr = dst.into();
    let s = host.sockets.get(sock).ok_or(SendError::NoSocket)?;
    let (bound, sport) = (s.addr, s.port);
    let Path { src, mtu, ip_len } = path(host, bound, dst.ip())?;
    let hdr = ip_len + udp::HEADER_LEN;
    if payload.len() > MAX_PAYLOAD {
        return Err(SendError::TooLong);
    }
    let room = cx.pool.config().buf_size as usize - usize::from(cx.pool.config().headroom);
    let g = usize::from(segment_size);
    let gso = g != 0 && payload.len() > g;
    let n = if gso {
        if hdr + g > mtu || hdr + g > room {
            return Err(SendError::SegmentTooLarge);
        }
        let n = payload.len().div_ceil(g);
        if n > MAX_SEGMENTS {
            return Err(SendError::TooManySegments);
        }
        n
    } else {
        if hdr + payload.len() > room {
            return Err(SendError::TooLong);
        }
        1
    };
    let seg = if gso { g } else { payload.len() };
    // Every buffer first: a shortage sends nothing.
    let mut bufs: Vec<Pkt> = Vec::with_capacity(n);
    for _ in 0..n {
        match cx.cache.alloc() {
            Some(p) => bufs.push(p),
            None => {
                cx.cache.free_all(&mut bufs);
                return Err(SendError::NoBuffer);
            }
        }
    }
    // Payloads, each buffer's sum recorded, chained behind the head in order.
    let mut psum = 0u64;
    let mut chain: Option<Pkt> = None;
    for (i, mut p) in bufs.drain(..).enumerate().rev() {
        let rest = payload.get(i * seg..).unwrap_or_default();
        let part = rest.get(..seg).unwrap_or(rest);
        let mut v = cx.pool.get_mut(&mut p);
        let at = if i == 0 { hdr } else { 0 };
        let Some(b) = v.append(at + part.len()).and_then(|b| b.get_mut(at..)) else {
            unreachable!("sizes checked against the buffer room")
        };
        b.copy_from_slice(part);
        let ps = checksum::fold(checksum::sum(part, 0));
        v.meta.csum_payload = u32::from(ps);
        v.meta.flags |= flag::PAYLOAD_SUM;
        v.meta.chain = chain.take();
        psum = checksum::add_part(psum, ps, (i * seg) % 2 == 1);
        chain = Some(p);
    }
    let Some(mut head) = chain else {
        unreachable!("n >= 1")
    };
    let ulen = (8 + payload.len()) as u16;
    let ident = match src {
        IpAddr::V4(_) => {
            let ident = host.next_ident();
            host.ip_ident = host.ip_ident.wrapping_add(n as u16 - 1);
            ident
        }
        IpAddr::V6(_) => 0,
    };
    let mut v = cx.pool.get_mut(&mut head);
    // The head holds `hdr` bytes of headers before its part of the payload.
    let headers = v
        .data_mut()
        .split_at_mut_checked(ip_len)
        .and_then(|(h, u)| Some((h, u.first_chunk_mut::<{ udp::HEADER_LEN }>()?)));
    let Some((h, u)) = headers else {
        cx.cache.free(head);
        return Err(SendError::NoBuffer);
    };
    let acc = match (src, dst.ip()) {
        (IpAddr::V4(s4), IpAddr::V4(d4)) => {
            Ipv4Repr {
                src: s4,
                dst: d4,
                protocol: Protocol::UDP,
                payload_len: usize::from(ulen),
                ttl: 64,
                dscp_ecn: 0,
                ident,
                dont_frag: false,
            }
            .emit(&mut Ipv4Packet::new_unchecked(h));
            checksum::pseudo_header_v4(s4, d4, Protocol::UDP.0, ulen)
        }
        (IpAddr::V6(s6), IpAddr::V6(d6)) => {
            Ipv6Repr {
                src: s6,
                dst: d6,
                next_header: Protocol::UDP,
                payload_len: usize::from(ulen),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut Ipv6Packet::new_unchecked(h));
            checksum::pseudo_header_v6(s6, d6, Protocol::UDP.0, u32::from(ulen))
        }
        _ => unreachable!("`path` keeps the source in the destination's family"),
    };
    let mut uh = UdpPacket::new_unchecked(u.as_mut_slice());
    uh.set_src_port(sport);
    uh.set_dst_port(dst.port());
    uh.set_len(ulen);
    uh.set_checksum(0);
    // The checksum from the header and the payload parts' sums, without reading them again.
    let c = checksum::sum(u.as_slice(), acc + psum);
    UdpPacket::new_unchecked(u.as_mut_slice())
        .set_checksum(udp::checksum_on_wire(checksum::finish(c)));
    v.meta.in_port = u16::MAX;
    v.meta.out_if = u16::MAX;
    v.meta.flags = (v.meta.flags & flag::PAYLOAD_SUM) | flag::ORIGINATED | flag::L4_CSUM_OK;
    let v6 = src.is_ipv6();
    if gso {
        v.meta.gso_type = if v6 { gso::UDPV6 } else { gso::UDPV4 };
        v.meta.gso_size = segment_size;
        v.meta.segs = n as u16;
        v.meta.total_len = (hdr + payload.len()) as u32;
    } else {
        v.meta.flags &= !flag::PAYLOAD_SUM;
    }
    if let Some(s) = host.sockets.get(sock) {
        s.count_sent(n as u64);
    }
    cx.originate(n as u64);
    let entry = if v6 {
        crate::host::Entry::LocalOut6
    } else {
        crate::host::Entry::LocalOut
    };
    host.injected.push(entry, head);
    Ok(n as u16)
}
