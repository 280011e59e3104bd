//! `udp-input`: RFC 768 checks, socket lookup, queueing.
//!
//! Length field at least 8 and within the IP payload (`UdpBadLength`; a shorter UDP
//! length trims the datagram, as Linux does); checksum verified unless zero (RFC 768:
//! zero means none) or already verified by the device; no socket → ICMP port unreachable
//! (RFC 1122 4.1.3.1) unless the datagram was broadcast or multicast; full queue →
//! `SocketQueueFull`. The socket of the previous datagram is reused when the destination
//! address and port match (hoisted per list).

use core::net::Ipv4Addr;

use netbatch_engine::meta::flag;
use netbatch_engine::{Cx, DropReason, Next, Out, PktList, Stage};
use netbatch_wire::checksum;

use super::socket::SocketId;
use crate::host::Host;

/// Arc to the ICMP error stage (no socket).
pub const ERROR: Next = Next(0);

/// The UDP input stage.
#[derive(Debug, Default)]
pub struct UdpInput;

impl Stage<Host> for UdpInput {
    fn arcs(&self) -> &[&'static str] {
        &["error"]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut hint: Option<(u32, u16, Option<SocketId>)> = None;
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let d = v.data();
            let ihl = usize::from(v.meta.l4.wrapping_sub(v.meta.l3));
            let (Some(ip), Some(u)) = (d.first_chunk::<20>(), d.get(ihl..)) else {
                out.drop(p, DropReason::UdpTruncated);
                continue;
            };
            let Some(uh) = u.first_chunk::<8>() else {
                out.drop(p, DropReason::UdpTruncated);
                continue;
            };
            let ulen_avail = u.len();
            let ulen = usize::from(u16::from_be_bytes([uh[4], uh[5]]));
            if ulen < 8 || ulen > ulen_avail {
                out.drop(p, DropReason::UdpBadLength);
                continue;
            }
            let src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
            let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
            let dport = u16::from_be_bytes([uh[2], uh[3]]);
            let csum = u16::from_be_bytes([uh[6], uh[7]]);
            if csum != 0 && v.meta.flags & flag::L4_CSUM_OK == 0 {
                let acc = checksum::pseudo_header_v4(
                    Ipv4Addr::from(src),
                    Ipv4Addr::from(dst),
                    17,
                    ulen as u16,
                );
                if checksum::fold(checksum::sum(&u[..ulen], acc)) != 0xffff {
                    out.drop(p, DropReason::UdpChecksum);
                    continue;
                }
            }
            if ulen < ulen_avail {
                v.truncate(ihl + ulen);
            }
            v.meta.flags |= flag::L4_CSUM_OK;
            let sock = match hint {
                Some((a, port, s)) if a == dst && port == dport => s,
                _ => {
                    let s = host.sockets.lookup(dst, dport);
                    hint = Some((dst, dport, s));
                    s
                }
            };
            let wire = v.meta.wire_packets();
            let Some(sock) = sock else {
                if v.meta.flags
                    & (flag::L3_BROADCAST
                        | flag::L3_MULTICAST
                        | flag::L2_BROADCAST
                        | flag::L2_MULTICAST)
                    != 0
                {
                    out.drop(p, DropReason::NoSocket);
                } else {
                    v.meta.reason = DropReason::NoSocket as u16;
                    out.push(ERROR, p);
                }
                continue;
            };
            match host.sockets.get_mut(sock) {
                Some(s) => {
                    if let Err(p) = s.enqueue(p, wire) {
                        out.drop(p, DropReason::SocketQueueFull);
                    }
                }
                None => out.drop(p, DropReason::NoSocket),
            }
        }
    }
}
