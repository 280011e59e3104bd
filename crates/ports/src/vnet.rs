//! Frames from the kernel with their offload state: the virtio-net header that packet
//! sockets (`PACKET_VNET_HDR`) and TAP devices (`IFF_VNET_HDR`) put in front of a frame,
//! and the import of such a frame into pool buffers.
//!
//! Why it matters: the Linux stack hands a device with checksum and segmentation offload
//! (veth, a NIC's GRO) frames whose L4 checksum holds only the pseudo-header sum
//! (`CHECKSUM_PARTIAL`) and super-frames of up to 64 KiB (TSO, GRO). Forwarded as they
//! are, they would leave broken or oversize. Here
//! - a partial checksum is completed over the frame (`NEEDS_CSUM`: sum from
//!   `csum_start`, stored at `csum_start + csum_offset`), and the frame is marked
//!   checksum-verified, as the kernel counts `CHECKSUM_PARTIAL` valid;
//! - a kernel-validated checksum (`DATA_VALID`) marks the frame verified;
//! - a TCPv4 or UDPv4 super-frame becomes a standard GSO super-packet (headers and the
//!   first bytes in one buffer, the rest chained, `gso_size`/`segs` set, checksum left
//!   partial), which the stack carries once and the `gso` stage segments at transmit;
//!   other GSO kinds (IPv6, UFO) are refused, counted by the caller;
//! - a VLAN tag the kernel took out of the frame (`tp_vlan_tci`) is put back, so the
//!   stack's VLAN demux sees the frame as it was on the wire.
//!
//! The header is in host byte order (legacy virtio, little-endian on the hosts netbatch
//! runs on), 10 bytes.

use netbatch_engine::Pkt;
use netbatch_packet::meta::{flag, gso};
use netbatch_wire::bytes::put_u16;
use netbatch_wire::checksum;
use netbatch_wire::tcp::TcpPacket;
use netbatch_wire::udp;

use crate::PortCx;

/// Bytes of the header.
pub const LEN: usize = 10;

/// `flags`: the L4 checksum is partial and must be completed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the kernel validated the checksum.
pub const F_DATA_VALID: u8 = 2;

/// `gso_type`: not a super-frame.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: TCP over IPv4.
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: UDP fragmentation offload (obsolete; refused).
pub const GSO_UDP: u8 = 3;
/// `gso_type`: TCP over IPv6.
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: UDP segmentation (USO), IPv4 or IPv6 by the frame.
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` flag: ECN (CWR) seen.
pub const GSO_ECN: u8 = 0x80;

/// A parsed header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `F_*` flags.
    pub flags: u8,
    /// `GSO_*` type.
    pub gso_type: u8,
    /// Bytes of headers (a hint; not trusted).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed bytes start, from the frame's first byte.
    pub csum_start: u16,
    /// Where the checksum field is, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads a header from its 10 bytes.
    pub fn parse(b: &[u8; LEN]) -> Self {
        let h = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: h(2),
            gso_size: h(4),
            csum_start: h(6),
            csum_offset: h(8),
        }
    }

    /// Its 10 bytes.
    pub fn bytes(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// The header with MRG_RXBUF's `num_buffers` behind it (12 bytes; a driver without
    /// MRG_RXBUF or VERSION_1 takes the first 10), built in a register rather than
    /// byte by byte on the stack (a copy reading such an array back in wider pieces
    /// stalls). Little-endian, as VERSION_1 defines the fields (and as [`Self::bytes`]
    /// lays them out on the little-endian machines netbatch runs on).
    #[inline]
    pub fn with_count(&self, num_buffers: u16) -> [u8; LEN + 2] {
        let w = u128::from(self.flags)
            | u128::from(self.gso_type) << 8
            | u128::from(self.hdr_len) << 16
            | u128::from(self.gso_size) << 32
            | u128::from(self.csum_start) << 48
            | u128::from(self.csum_offset) << 64
            | u128::from(num_buffers) << 80;
        let Some(b) = w.to_le_bytes().first_chunk::<{ LEN + 2 }>().copied() else {
            unreachable!("16 bytes hold 12")
        };
        b
    }

    /// The header describing a frame the stack transmits (`data`: its first buffer's
    /// bytes): its partial checksum and, for a super-packet the port takes whole, its
    /// segmentation.
    pub fn for_tx(m: &netbatch_engine::Meta, data: &[u8]) -> Self {
        let mut h = Self::default();
        if let Some((l4, field)) = netbatch_packet::offload::partial_checksum(m)
            && l4 < data.len()
        {
            h.flags = F_NEEDS_CSUM;
            h.csum_start = l4 as u16;
            h.csum_offset = field as u16;
        }
        match m.gso_type & gso::KIND {
            gso::TCPV4 if m.segs > 1 => {
                h.gso_type = GSO_TCPV4;
                h.gso_size = m.gso_size;
            }
            gso::TCPV6 if m.segs > 1 => {
                h.gso_type = GSO_TCPV6;
                h.gso_size = m.gso_size;
            }
            gso::UDPV4 | gso::UDPV6 if m.segs > 1 => {
                h.gso_type = GSO_UDP_L4;
                h.gso_size = m.gso_size;
            }
            _ => {}
        }
        h
    }
}

/// Why a frame could not be imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportError {
    /// No free buffer (the caller counts `rx_nobuf`).
    NoBuffer,
    /// The frame cannot be taken (oversize without GSO, a GSO kind netbatch does not
    /// segment, offsets outside the frame); the caller counts `rx_dropped`.
    Refused,
}

/// A VLAN tag the kernel removed from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrippedTag {
    /// Its TPID (0x8100 or 0x88a8).
    pub tpid: u16,
    /// Its TCI.
    pub tci: u16,
}

/// What the port knows of a received frame besides its bytes and offload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxInfo {
    /// The port's index (`Meta::in_port`).
    pub in_port: u16,
    /// Bytes a pool buffer holds after its headroom.
    pub room: usize,
    /// A VLAN tag the kernel took out of the frame.
    pub tag: Option<StrippedTag>,
    /// The kernel's flow hash (0: none).
    pub hash: u32,
}

/// Copies `frame` (with its offload header `hdr`) into pool buffers as the port's packet;
/// returns it and the wire packets it stands for.
pub fn import(
    cx: &mut PortCx<'_>,
    frame: &[u8],
    hdr: &VnetHdr,
    rx: &RxInfo,
) -> Result<(Pkt, u16), ImportError> {
    let (tag, room) = (rx.tag, rx.room);
    let extra = if tag.is_some() { 4 } else { 0 };
    let len = frame.len() + extra;
    let shift = |x: u16| usize::from(x) + if usize::from(x) >= 12 { extra } else { 0 };
    // UDP segmentation names no family: the IP header says which; a TCP kind must be
    // the frame's family.
    let v6 = is_ipv6(frame, tag);
    let gso_kind = match (hdr.gso_type & !GSO_ECN, v6) {
        (GSO_NONE, _) => None,
        (GSO_TCPV4, false) => Some(gso::TCPV4),
        (GSO_TCPV6, true) => Some(gso::TCPV6),
        (GSO_UDP_L4, true) => Some(gso::UDPV6),
        (GSO_UDP_L4, false) => Some(gso::UDPV4),
        _ => return Err(ImportError::Refused),
    };
    let partial = hdr.flags & F_NEEDS_CSUM != 0;
    let (cs, co) = (shift(hdr.csum_start), usize::from(hdr.csum_offset));
    if partial && cs + co + 2 > len {
        return Err(ImportError::Refused);
    }
    // A super-frame: the payload behind the L4 header is cut into `gso_size` segments.
    let train = match gso_kind {
        Some(kind) if partial && hdr.gso_size > 0 => {
            let l4h = l4_header_len(frame, hdr, kind).ok_or(ImportError::Refused)?;
            let hdrs = cs + l4h;
            let payload = len.checked_sub(hdrs).ok_or(ImportError::Refused)?;
            let segs = payload.div_ceil(usize::from(hdr.gso_size));
            if hdrs > room || segs > usize::from(u16::MAX) {
                return Err(ImportError::Refused);
            }
            (segs > 1).then_some((kind, segs as u16))
        }
        Some(_) => return Err(ImportError::Refused),
        None => None,
    };
    if train.is_none() && len > room {
        return Err(ImportError::Refused);
    }
    // The frame's bytes as they were on the wire (tag put back), in `room` pieces: the
    // pieces behind the first are built back to front, so each is linked to the next
    // as it is made.
    let piece = |at: usize| Wire {
        frame,
        tag,
        at,
        len,
    };
    let mut next: Option<Pkt> = None;
    for i in (1..len.div_ceil(room)).rev() {
        let Some(mut q) = cx.cache.alloc() else {
            if let Some(n) = next {
                cx.cache.free(n);
            }
            return Err(ImportError::NoBuffer);
        };
        let mut w = cx.pool.get_mut(&mut q);
        let Some(b) = w.append((len - i * room).min(room)) else {
            unreachable!("room is the buffer's data room")
        };
        piece(i * room).fill(b);
        w.meta.chain = next.take();
        next = Some(q);
    }
    let Some(mut head) = cx.cache.alloc() else {
        if let Some(n) = next {
            cx.cache.free(n);
        }
        return Err(ImportError::NoBuffer);
    };
    let mut v = cx.pool.get_mut(&mut head);
    let Some(b) = v.append(len.min(room)) else {
        unreachable!("room is the buffer's data room")
    };
    piece(0).fill(b);
    if partial && train.is_none() {
        // Not a super-frame: finish the checksum the sender left to the device.
        complete(v.data_mut(), cs, co);
    }
    v.meta.in_port = rx.in_port;
    if partial || hdr.flags & F_DATA_VALID != 0 {
        v.meta.flags |= flag::L4_CSUM_OK;
    }
    if rx.hash != 0 {
        v.meta.hash = rx.hash;
        v.meta.flags |= flag::HASH_VALID;
    }
    v.meta.chain = next;
    v.meta.total_len = len as u32;
    let mut wire = 1;
    if let Some((kind, segs)) = train {
        v.meta.gso_type = kind;
        v.meta.gso_size = hdr.gso_size;
        v.meta.segs = segs;
        v.meta.flags |= flag::L4_CSUM_PARTIAL;
        wire = segs;
    }
    Ok((head, wire))
}

/// Whether `frame` (its ethertype after the MACs, or after a tag still in it) carries
/// IPv6; a tag the kernel stripped is not in the frame.
fn is_ipv6(frame: &[u8], stripped: Option<StrippedTag>) -> bool {
    // A stripped tag's TPID is not the frame's type: the type is at 12 either way.
    let et = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut at = 12;
    if stripped.is_none() {
        while matches!(et(at), Some(0x8100 | 0x88a8)) {
            at += 4;
        }
    }
    et(at) == Some(0x86dd)
}

/// The L4 header length of a super-frame, read at `csum_start`.
fn l4_header_len(frame: &[u8], hdr: &VnetHdr, kind: u8) -> Option<usize> {
    // Offsets in `frame` (the tag, if any, is not in it).
    let l4 = frame.get(usize::from(hdr.csum_start)..)?;
    if kind == gso::TCPV4 || kind == gso::TCPV6 {
        let tcp = TcpPacket::new_checked(l4).ok()?;
        Some(tcp.header_len())
    } else {
        (l4.len() >= udp::HEADER_LEN).then_some(udp::HEADER_LEN)
    }
}

/// Completes a partial checksum: the one's-complement sum of `d[start..]` (whose field at
/// `start + off` holds the pseudo-header sum), stored inverted at the field (RFC 1071).
/// A result of zero is sent as all ones, as the kernel's `skb_checksum_help` does: UDP
/// must (RFC 768), and for TCP the two are the same ones'-complement value.
pub fn complete(d: &mut [u8], start: usize, off: usize) {
    if start + off + 2 > d.len() {
        return;
    }
    let c = udp::checksum_on_wire(checksum::checksum(&d[start..]));
    put_u16(d, start + off, c);
}

/// A cursor over a frame's wire bytes: the frame with a removed tag put back after the
/// MAC addresses.
struct Wire<'a> {
    frame: &'a [u8],
    tag: Option<StrippedTag>,
    at: usize,
    len: usize,
}

impl Wire<'_> {
    /// Fills `out` with the next bytes.
    fn fill(&mut self, out: &mut [u8]) {
        let mut o = 0;
        while o < out.len() && self.at < self.len {
            let k = match self.tag {
                Some(t) if self.at < 16 && self.frame.len() >= 12 => {
                    if self.at < 12 {
                        let n = (12 - self.at).min(out.len() - o);
                        out[o..o + n].copy_from_slice(&self.frame[self.at..self.at + n]);
                        n
                    } else {
                        let mut tag = [0u8; 4];
                        tag[..2].copy_from_slice(&t.tpid.to_be_bytes());
                        tag[2..].copy_from_slice(&t.tci.to_be_bytes());
                        let n = (16 - self.at).min(out.len() - o);
                        out[o..o + n].copy_from_slice(&tag[self.at - 12..self.at - 12 + n]);
                        n
                    }
                }
                _ => {
                    let from = self.at - if self.tag.is_some() { 4 } else { 0 };
                    let n = (self.len - self.at).min(out.len() - o);
                    out[o..o + n].copy_from_slice(&self.frame[from..from + n]);
                    n
                }
            };
            o += k;
            self.at += k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::{Pool, PoolConfig};
    use netbatch_packet::meta::gso;

    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// Ethernet/IPv4/UDP from 192.0.2.1:1000 to 198.51.100.2:2000 with `payload`, its UDP
    /// checksum field holding the pseudo-header sum (as a sender with offload leaves it).
    fn partial_udp(payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 2], 64)
            .udp(1000, 2000);
        let mut good = Vec::new();
        b.write(&mut good, payload).unwrap();
        let mut partial = good.clone();
        let l4_len = (8 + payload.len()) as u16;
        let ps = checksum::fold(checksum::pseudo_header_v4(
            [192, 0, 2, 1].into(),
            [198, 51, 100, 2].into(),
            17,
            l4_len,
        ));
        partial[40..42].copy_from_slice(&ps.to_be_bytes());
        (good, partial)
    }

    /// What the kernel says of an untagged UDP/IPv4 frame with a partial checksum.
    const UDP_PARTIAL: VnetHdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 34,
        csum_offset: 6,
    };

    /// `import` at time 0, without a flow hash.
    fn imp(
        pool: &Pool,
        cache: &mut netbatch_engine::BufCache,
        frame: &[u8],
        h: &VnetHdr,
        tag: Option<StrippedTag>,
        in_port: u16,
        room: usize,
    ) -> Result<Pkt, ImportError> {
        let mut cx = PortCx {
            pool,
            cache,
            now_ns: 0,
        };
        let rx = RxInfo {
            in_port,
            room,
            tag,
            hash: 0,
        };
        import(&mut cx, frame, h, &rx).map(|(p, _)| p)
    }

    fn bytes(pool: &Pool, p: &Pkt) -> Vec<u8> {
        crate::frame_bytes(pool, p)
    }

    #[test]
    fn with_count_is_the_ten_bytes_then_the_count() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 0x0136,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let w = h.with_count(0x0203);
        assert_eq!(w[..LEN], h.bytes());
        assert_eq!(w[LEN..], [0x03, 0x02]);
        // Little-endian by hand: hdr_len 0x0136 at bytes 2 and 3.
        assert_eq!(w[2..4], [0x36, 0x01]);
    }

    #[test]
    fn header_round_trips_in_host_order() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let b = h.bytes();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 1);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 1448);
        assert_eq!(VnetHdr::parse(&b), h);
    }

    #[test]
    fn partial_checksum_is_completed_to_what_a_sender_without_offload_writes() {
        let pool = pool();
        let mut cache = pool.cache();
        let (good, partial) = partial_udp(b"hello, netbatch");
        assert_ne!(good, partial);
        let h = UDP_PARTIAL;
        let p = imp(&pool, &mut cache, &partial, &h, None, 3, 1920).unwrap();
        assert_eq!(
            bytes(&pool, &p),
            good,
            "etherparse computes the full checksum"
        );
        let m = pool.get(&p).meta;
        assert_eq!(m.in_port, 3);
        assert_ne!(m.flags & flag::L4_CSUM_OK, 0);
        assert_eq!(m.gso_type, gso::NONE);
        cache.free(p);
    }

    #[test]
    fn stripped_vlan_tag_is_put_back_and_offsets_follow() {
        let pool = pool();
        let mut cache = pool.cache();
        let (good, partial) = partial_udp(b"tagged");
        let h = UDP_PARTIAL;
        let tag = StrippedTag {
            tpid: 0x8100,
            tci: 0x2064,
        };
        let p = imp(&pool, &mut cache, &partial, &h, Some(tag), 0, 1920).unwrap();
        let mut want = good[..12].to_vec();
        want.extend_from_slice(&[0x81, 0x00, 0x20, 0x64]);
        want.extend_from_slice(&good[12..]);
        assert_eq!(bytes(&pool, &p), want);
        cache.free(p);
    }

    /// IPv6 super-frames: `GSO_TCPV6` and `GSO_UDP_L4` over IPv6 become IPv6 super-packets
    /// (the family of `GSO_UDP_L4` read from the frame), with the segment count the
    /// payload and the segment size give; the transmit header names them back.
    #[test]
    fn ipv6_super_frames_become_ipv6_super_packets() {
        let pool = pool();
        let mut cache = pool.cache();
        let payload = vec![7u8; 2500];
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv6(
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
            .udp(1000, 2000);
        let mut udp6 = Vec::new();
        b.write(&mut udp6, &payload).unwrap();
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            gso_size: 1000,
            csum_start: 54,
            csum_offset: 6,
            ..VnetHdr::default()
        };
        let p = imp(&pool, &mut cache, &udp6, &h, None, 0, 1920).expect("imported");
        {
            let m = &pool.get(&p).meta;
            assert_eq!((m.gso_type, m.gso_size, m.segs), (gso::UDPV6, 1000, 3));
            let back = VnetHdr::for_tx(m, &[]);
            assert_eq!((back.gso_type, back.gso_size), (GSO_UDP_L4, 1000));
        }
        cache.free(p);
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv6(
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
            .tcp(1000, 2000, 1, 65535);
        let mut tcp6 = Vec::new();
        b.write(&mut tcp6, &payload).unwrap();
        let h = VnetHdr {
            gso_type: GSO_TCPV6,
            csum_offset: 16,
            ..h
        };
        let p = imp(&pool, &mut cache, &tcp6, &h, None, 0, 1920).expect("imported");
        {
            let m = &pool.get(&p).meta;
            assert_eq!((m.gso_type, m.gso_size, m.segs), (gso::TCPV6, 1000, 3));
            let back = VnetHdr::for_tx(m, &[]);
            assert_eq!((back.gso_type, back.gso_size), (GSO_TCPV6, 1000));
        }
        cache.free(p);
        // A TCP kind of the other family is refused.
        let wrong = VnetHdr {
            gso_type: GSO_TCPV4,
            ..h
        };
        assert_eq!(
            imp(&pool, &mut cache, &tcp6, &wrong, None, 0, 1920).unwrap_err(),
            ImportError::Refused
        );
        cache.flush();
        assert_eq!(pool.free_in_pool(), 256);
    }

    /// Kinds netbatch does not take (UFO's `GSO_UDP`, a TCP kind of the frame's other
    /// family) and offsets outside the frame are refused.
    #[test]
    fn unsupported_gso_kinds_and_bad_offsets_are_refused_and_leak_nothing() {
        let pool = pool();
        let mut cache = pool.cache();
        let (_, partial) = partial_udp(&[0u8; 100]);
        for h in [
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_TCPV6,
                gso_size: 100,
                csum_start: 34,
                csum_offset: 16,
                ..VnetHdr::default()
            },
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_UDP,
                gso_size: 100,
                csum_start: 34,
                csum_offset: 6,
                ..VnetHdr::default()
            },
            VnetHdr {
                flags: F_NEEDS_CSUM,
                csum_start: 140,
                csum_offset: 6,
                ..VnetHdr::default()
            },
        ] {
            assert_eq!(
                imp(&pool, &mut cache, &partial, &h, None, 0, 1920).unwrap_err(),
                ImportError::Refused
            );
        }
        // Oversize without GSO.
        let big = vec![0u8; 3000];
        assert_eq!(
            imp(&pool, &mut cache, &big, &VnetHdr::default(), None, 0, 1920).unwrap_err(),
            ImportError::Refused
        );
        cache.flush();
        assert_eq!(pool.free_in_pool(), 256);
    }
}
