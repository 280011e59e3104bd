//! GSO: a super-packet becomes the wire packets it stands for.
//!
//! Called where a super-packet cannot go on whole: at transmit on a port without the
//! matching offload (the `gso` stage), before a socket that does not take super-datagrams
//! (`udp-input`), and before fragmentation (`ip4-fragment`). The packet's data starts at
//! its link header (`Meta::l3 - Meta::data` bytes of it, none when the data starts at the
//! IP header).
//!
//! *Standard* (`TCPV4`, `UDPV4`): every segment gets the head's headers, rebuilt for it:
//! IP total length, identification (+1 per segment unless the train had a fixed ID),
//! header checksum; TCP sequence number (+`gso_size` per segment), FIN and PSH only on
//! the last segment (CWR is kept on every segment, as the kernel does for AccECN trains:
//! GRO only merges segments whose CWR bits are equal); UDP length; the L4 checksum from
//! the header, the pseudo-header and the payload's sum. When the super-packet is laid out
//! as GRO builds it (the head holds the headers and one segment, each chained buffer one
//! more segment with headroom for headers) no payload byte moves: headers are written in
//! front of each chained payload, and the checksums use the payload sums GRO recorded.
//! Any other layout (an application's large send) is copied into new buffers.
//!
//! *Fraglist* (`FRAGLIST_*`): the chain is unlinked. Each member re-exposes its own
//! received IP and L4 headers, gets the head's link header, and takes every field the
//! stack may have changed on the head on its way (TOS, TTL, addresses, ports), with its
//! checksums updated incrementally (RFC 1624), so a TTL decrement or a rewrite reaches
//! every segment and a member nobody changed keeps its bytes. The head gets its own
//! lengths back.
//!
//! Nothing is changed when segmentation fails: the super-packet is returned with the
//! reason (no buffer, no headroom, a layout that is not a super-packet), for the caller
//! to drop whole.

pub mod stage;

use core::net::Ipv4Addr;

use netbatch_engine::{BufCache, Meta, Pkt, Pool, Reason};
use netbatch_wire::bytes::{get_u16, put_u16};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::{Ipv4Packet, Protocol};
use netbatch_wire::tcp::{TcpFlags, TcpPacket};
use netbatch_wire::udp::{self, UdpPacket};

use crate::dissect::{L3, L4};
use crate::meta::{flag, gso};

netbatch_engine::reasons! {
    /// Why segmentation gives up.
    pub mod reason {
        FAILED = "gso_failed": "super-packet could not be segmented",
    }
}

/// The longest header block a segment carries: link (22), IPv4 (60), TCP (60).
const MAX_HDR: usize = 142;

/// Where the headers of a super-packet's head are.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Link header bytes before the IP header.
    l2: usize,
    /// IP header length.
    ihl: usize,
    /// L4 header length.
    l4h: usize,
    /// TCP (else UDP: the only kinds of super-packet).
    tcp: bool,
}

impl Layout {
    fn hdr(&self) -> usize {
        self.l2 + self.ihl + self.l4h
    }

    /// Offset of the L4 checksum from the L4 header.
    fn csum_at(&self) -> usize {
        if self.tcp {
            netbatch_wire::tcp::CHECKSUM_AT
        } else {
            udp::CHECKSUM_AT
        }
    }

    /// The IP protocol number.
    fn proto(&self) -> u8 {
        if self.tcp {
            Protocol::TCP.0
        } else {
            Protocol::UDP.0
        }
    }
}

/// Reads the head's header layout; `None` if it is not what its GSO kind says.
fn layout(m: &Meta, d: &[u8]) -> Option<Layout> {
    let l2 = usize::from(m.l3.checked_sub(m.data)?);
    let ip = Ipv4Packet::new_checked(d.get(l2..)?).ok()?;
    let ihl = ip.header_len();
    if ip.version() != 4 {
        return None;
    }
    let tcp = match m.gso_type & gso::KIND {
        gso::TCPV4 | gso::FRAGLIST_TCPV4 => true,
        gso::UDPV4 | gso::FRAGLIST_UDPV4 => false,
        _ => return None,
    };
    let l4 = d.get(l2 + ihl..)?;
    let l4h = match (tcp, L4::of(ip.protocol().0)) {
        (true, L4::Tcp) => TcpPacket::new_checked(l4).ok()?.header_len(),
        (false, L4::Udp) => UdpPacket::new_checked(l4).ok().map(|_| udp::HEADER_LEN)?,
        _ => return None,
    };
    Some(Layout { l2, ihl, l4h, tcp })
}

/// The metadata a segment inherits from its super-packet's head.
#[derive(Debug, Clone, Copy)]
struct Inherit {
    in_port: u16,
    in_if: u16,
    out_if: u16,
    adj: u32,
    mark: u32,
    hash: u32,
    flags: u32,
}

impl Inherit {
    fn of(m: &Meta) -> Self {
        Self {
            in_port: m.in_port,
            in_if: m.in_if,
            out_if: m.out_if,
            adj: m.adj,
            mark: m.mark,
            hash: m.hash,
            flags: m.flags & !flag::PAYLOAD_SUM,
        }
    }

    /// Makes `to` (whose data starts with the head's headers, as laid out in `lay`) a
    /// plain packet of the head's metadata, located as the dissector records it.
    fn apply(&self, to: &mut Meta, lay: &Layout) {
        to.in_port = self.in_port;
        to.in_if = self.in_if;
        to.out_if = self.out_if;
        to.adj = self.adj;
        to.mark = self.mark;
        to.hash = self.hash;
        to.flags = self.flags;
        to.l2_len = lay.l2 as u8;
        to.l3_type = L3::Ipv4 as u8;
        to.l3 = to.data + lay.l2 as u16;
        to.l4 = to.l3 + lay.ihl as u16;
        to.l4_type = lay.proto();
        plain(to);
    }
}

/// Makes `m` describe a plain packet of its own buffer.
fn plain(m: &mut Meta) {
    m.gso_size = 0;
    m.gso_type = gso::NONE;
    m.segs = 1;
    m.total_len = u32::from(m.len);
    m.flags &= !(flag::PAYLOAD_SUM | flag::GRO_CHAIN | flag::L4_CSUM_PARTIAL);
}

/// Segments `p` into its wire packets, appended to `out` in order. On failure `p` comes
/// back unchanged with the reason.
pub fn segment(
    pool: &Pool,
    cache: &mut BufCache,
    p: Pkt,
    out: &mut Vec<Pkt>,
) -> Result<(), (Pkt, Reason)> {
    let v = pool.get(&p);
    let Some(lay) = layout(v.meta, v.data()) else {
        return Err((p, reason::FAILED));
    };
    if v.meta.flags & flag::GRO_CHAIN != 0 {
        unchain(pool, p, lay, out)
    } else if v.meta.gso_type & gso::KIND >= gso::FRAGLIST_TCPV4 {
        // Only GRO builds chains of whole packets.
        Err((p, reason::FAILED))
    } else {
        segment_standard(pool, cache, p, lay, out)
    }
}

/// How a standard super-packet splits.
#[derive(Debug, Clone, Copy)]
struct Train {
    lay: Layout,
    /// Segments.
    n: usize,
    /// Payload bytes per segment (the last may have fewer).
    gso_size: usize,
    /// The IP identification stays the same on every segment.
    fixed: bool,
}

/// Sets the L4 header `l4` (of a segment laid out as `lay`, `l4_len` bytes of L4 header
/// and payload from `src` to `dst`, the payload summing to `psum`) its checksum.
fn fill_l4_checksum(
    l4: &mut [u8],
    lay: &Layout,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    l4_len: usize,
    psum: u64,
) {
    put_u16(l4, lay.csum_at(), 0);
    let acc = checksum::pseudo_header_v4(src, dst, lay.proto(), l4_len as u16);
    let c = checksum::finish(checksum::sum(&l4[..lay.l4h], acc + psum));
    // RFC 768: a computed zero is sent as all ones.
    put_u16(
        l4,
        lay.csum_at(),
        if lay.tcp { c } else { udp::checksum_on_wire(c) },
    );
}

/// The header block of segment `i` (payload `plen` bytes summing to `psum`), rebuilt
/// from the head's in place.
fn rebuild(t: &mut [u8], tr: &Train, i: usize, plen: usize, psum: u64) {
    let (lay, n, gso_size, fixed) = (&tr.lay, tr.n, tr.gso_size, tr.fixed);
    let (iph, l4h) = t[lay.l2..].split_at_mut(lay.ihl);
    let l4_len = lay.l4h + plen;
    let mut ip = Ipv4Packet::new_unchecked(iph);
    ip.set_total_len((lay.ihl + l4_len) as u16);
    if !fixed {
        ip.set_ident(ip.ident().wrapping_add(i as u16));
    }
    ip.fill_checksum();
    let (src, dst) = (ip.src(), ip.dst());
    if lay.tcp {
        let mut tcp = TcpPacket::new_unchecked(&mut l4h[..lay.l4h]);
        tcp.set_seq_number(tcp.seq_number().wrapping_add((i * gso_size) as u32));
        if i + 1 < n {
            // FIN and PSH are the last segment's.
            let mut f = tcp.flags();
            f.remove(TcpFlags::FIN | TcpFlags::PSH);
            tcp.set_flags(f);
        }
    } else {
        UdpPacket::new_unchecked(&mut l4h[..lay.l4h]).set_len(l4_len as u16);
    }
    fill_l4_checksum(l4h, lay, src, dst, l4_len, psum);
}

/// Whether a standard super-packet is laid out as GRO builds it: the head holds one full
/// segment, each chained buffer one segment (the last possibly shorter) with headroom
/// for the headers.
fn gro_layout(pool: &Pool, head: &Meta, hdr: usize, gso_size: usize) -> bool {
    if usize::from(head.len) != hdr + gso_size || head.chain.is_none() {
        return false;
    }
    let mut cur = head.chain.as_ref();
    while let Some(q) = cur {
        let m = pool.get(q).meta;
        let len = usize::from(m.len);
        let last = m.chain.is_none();
        if len == 0 || len > gso_size || (!last && len != gso_size) || usize::from(m.data) < hdr {
            return false;
        }
        cur = m.chain.as_ref();
    }
    true
}

/// Payload sum of one buffer's data: recorded by GRO, or computed.
fn payload_sum(m: &Meta, data: &[u8]) -> u64 {
    if m.flags & flag::PAYLOAD_SUM != 0 {
        u64::from(m.csum_payload)
    } else {
        checksum::sum(data, 0)
    }
}

fn segment_standard(
    pool: &Pool,
    cache: &mut BufCache,
    mut p: Pkt,
    lay: Layout,
    out: &mut Vec<Pkt>,
) -> Result<(), (Pkt, Reason)> {
    let hdr = lay.hdr();
    let v = pool.get(&p);
    let gso_size = usize::from(v.meta.gso_size);
    let total = v.meta.total_len as usize;
    if gso_size == 0 || total <= hdr || hdr > MAX_HDR {
        return Err((p, reason::FAILED));
    }
    let payload = total - hdr;
    let n = payload.div_ceil(gso_size);
    let tr = Train {
        lay,
        n,
        gso_size,
        fixed: v.meta.gso_type & gso::FIXED_ID != 0,
    };
    let mut t = [0u8; MAX_HDR];
    t[..hdr].copy_from_slice(&v.data()[..hdr]);
    if !gro_layout(pool, v.meta, hdr, gso_size) {
        return segment_copy(pool, cache, p, &tr, &t[..hdr], out);
    }
    // Zero copy: the head is the first segment, every chained buffer gets headers pushed.
    let mut mv = pool.get_mut(&mut p);
    let mut chain = mv.meta.chain.take();
    let head_meta_psum = payload_sum(mv.meta, &mv.data()[hdr..]);
    let seg0 = &mut mv.data_mut()[..hdr];
    rebuild(seg0, &tr, 0, gso_size, head_meta_psum);
    plain(mv.meta);
    let head = Inherit::of(mv.meta);
    out.push(p);
    let mut i = 1;
    while let Some(mut q) = chain {
        let mut w = pool.get_mut(&mut q);
        chain = w.meta.chain.take();
        let plen = usize::from(w.meta.len);
        let psum = payload_sum(w.meta, w.data());
        let Some(h) = w.push(hdr) else {
            unreachable!("headroom checked by gro_layout")
        };
        h.copy_from_slice(&t[..hdr]);
        rebuild(h, &tr, i, plen, psum);
        head.apply(w.meta, &lay);
        out.push(q);
        i += 1;
    }
    Ok(())
}

/// Standard segmentation by copying: every segment in a new buffer, then the original
/// chain freed. All buffers are taken first, so a shortage changes nothing.
fn segment_copy(
    pool: &Pool,
    cache: &mut BufCache,
    p: Pkt,
    tr: &Train,
    t: &[u8],
    out: &mut Vec<Pkt>,
) -> Result<(), (Pkt, Reason)> {
    let (n, gso_size, lay) = (tr.n, tr.gso_size, tr.lay);
    let hdr = t.len();
    let start = out.len();
    let inh = Inherit::of(pool.get(&p).meta);
    for _ in 0..n {
        match cache.alloc() {
            Some(q) => out.push(q),
            None => {
                let mut taken: Vec<Pkt> = out.drain(start..).collect();
                cache.free_all(&mut taken);
                return Err((p, netbatch_engine::reason::NO_BUFFER));
            }
        }
    }
    if pool.get(&out[start]).meta.data as usize + hdr + gso_size > pool.config().buf_size as usize {
        let mut taken: Vec<Pkt> = out.drain(start..).collect();
        cache.free_all(&mut taken);
        return Err((p, reason::FAILED));
    }
    // A cursor over the payload: the head's bytes after its headers, then each chained
    // buffer's.
    let head = pool.get(&p);
    let mut src: &[u8] = &head.data()[hdr..];
    let mut next = head.meta.chain.as_ref();
    for (i, q) in out[start..].iter_mut().enumerate() {
        let mut w = pool.get_mut(q);
        let Some(b) = w.append(hdr) else {
            unreachable!("room checked above")
        };
        b.copy_from_slice(t);
        let mut plen = 0;
        while plen < gso_size {
            if src.is_empty() {
                match next {
                    Some(c) => {
                        let cv = pool.get(c);
                        src = cv.data();
                        next = cv.meta.chain.as_ref();
                        continue;
                    }
                    None => break,
                }
            }
            let k = src.len().min(gso_size - plen);
            let Some(b) = w.append(k) else {
                unreachable!("room checked above")
            };
            b.copy_from_slice(&src[..k]);
            src = &src[k..];
            plen += k;
        }
        // The payload sum over the whole segment (its parts may have odd lengths).
        let psum = checksum::sum(&w.data()[hdr..], 0);
        let d = w.data_mut();
        rebuild(&mut d[..hdr], tr, i, plen, psum);
        inh.apply(w.meta, &lay);
    }
    cache.free(p);
    Ok(())
}

/// The 16-bit words of an IPv4 header the stack may change on its way (TOS with the
/// version byte, flags and fragment offset, TTL with the protocol, the addresses), by
/// byte offset. The identification (4) and total length (2) stay the member's own.
const IP_WORDS: [usize; 7] = [0, 6, 8, 12, 14, 16, 18];

/// The changes the stack made to a super-packet's head, as they apply to a member's own
/// IPv4 header (at offset 0 of `d`) and L4 ports: the words to store and what they add to
/// the IP and L4 checksums (RFC 1624 eqn. 3, `HC' = ~(~HC + Σ(~m + m'))`).
struct Delta {
    /// The member's original bytes (IP header and ports) where a change is looked for,
    /// as three words under [`DELTA_MASK`].
    orig: [u64; 3],
    /// (offset, new value) of each changed word.
    words: [(usize, u16); 9],
    n: usize,
    ip_add: u64,
    l4_add: u64,
    /// Offset of the L4 checksum.
    csum_at: usize,
    /// UDP (whose checksum may be absent, RFC 768), else TCP.
    udp: bool,
}

/// The three words of `b` under `mask`.
#[inline(always)]
fn words24(b: &[u8; 24], mask: &[u8; 24]) -> [u64; 3] {
    let w = |x: &[u8; 24], k: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&x[k * 8..k * 8 + 8]);
        u64::from_ne_bytes(a)
    };
    [
        w(b, 0) & w(mask, 0),
        w(b, 1) & w(mask, 1),
        w(b, 2) & w(mask, 2),
    ]
}

/// Bytes of [`Delta::orig`] that must match for the delta to apply: all but the total
/// length, identification and header checksum, which are every member's own.
const DELTA_MASK: [u8; 24] = [
    0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff,
];

impl Delta {
    /// The delta from member header `d` (20-byte IPv4 header, then L4) to the head's
    /// `iph` and `ports`.
    fn new(d: &[u8], iph: &[u8; 20], ports: &[u8; 4], lay: &Layout) -> Self {
        let mut orig = [0u8; 24];
        orig.copy_from_slice(&d[..24]);
        let mut dl = Self {
            orig: words24(&orig, &DELTA_MASK),
            words: [(0, 0); 9],
            n: 0,
            ip_add: 0,
            l4_add: 0,
            csum_at: 20 + lay.csum_at(),
            udp: !lay.tcp,
        };
        let want = |at: usize| {
            if at < 20 {
                get_u16(iph, at)
            } else {
                get_u16(ports, at - 20)
            }
        };
        for at in IP_WORDS.into_iter().chain([20, 22]) {
            let (old, new) = (get_u16(&orig, at), want(at));
            if old != new {
                dl.words[dl.n] = (at, new);
                dl.n += 1;
                let add = u64::from(!old) + u64::from(new);
                if at < 20 {
                    dl.ip_add += add;
                }
                // Addresses are in the pseudo-header; ports in the L4 header.
                if at >= 12 {
                    dl.l4_add += add;
                }
            }
        }
        dl
    }

    /// Applies the delta to member header `d` if its fields are the ones the delta was
    /// worked out from; `false` (nothing changed) otherwise.
    #[inline]
    fn apply(&self, d: &mut [u8]) -> bool {
        let Some(h) = d.first_chunk::<24>() else {
            return false;
        };
        let ip = Ipv4Packet::new_unchecked(&h[..20]);
        if ip.version() != 4 || ip.header_len() != 20 || words24(h, &DELTA_MASK) != self.orig {
            return false;
        }
        if self.n == 0 {
            return true;
        }
        for &(at, v) in &self.words[..self.n] {
            put_u16(d, at, v);
        }
        let mut ip = Ipv4Packet::new_unchecked(&mut d[..20]);
        ip.set_checksum(checksum::finish(u64::from(!ip.checksum()) + self.ip_add));
        let at = self.csum_at;
        if self.l4_add != 0 && d.len() >= at + 2 {
            let old = get_u16(d, at);
            // A UDP datagram without a checksum keeps none (RFC 768).
            if self.udp && old == 0 {
                return true;
            }
            let c = checksum::finish(u64::from(!old) + self.l4_add);
            put_u16(
                d,
                at,
                if self.udp {
                    udp::checksum_on_wire(c)
                } else {
                    c
                },
            );
        }
        true
    }
}

/// A GRO-built super-packet back into the packets it was made of.
fn unchain(pool: &Pool, mut p: Pkt, lay: Layout, out: &mut Vec<Pkt>) -> Result<(), (Pkt, Reason)> {
    // Check every member before changing anything.
    let v = pool.get(&p);
    let mut cur = v.meta.chain.as_ref();
    while let Some(q) = cur {
        let m = pool.get(q).meta;
        let (l3, data) = (usize::from(m.l3), usize::from(m.data));
        // Room for the link header in front, and its own headers behind.
        if l3 < lay.l2 || data < l3 + 28 {
            return Err((p, reason::FAILED));
        }
        cur = m.chain.as_ref();
    }
    let mut l2h = [0u8; 22];
    let l2 = lay.l2.min(22);
    l2h[..l2].copy_from_slice(&v.data()[..l2]);
    let mut iph = [0u8; 20];
    iph.copy_from_slice(&v.data()[lay.l2..lay.l2 + 20]);
    let mut ports = [0u8; 4];
    ports.copy_from_slice(&v.data()[lay.l2 + lay.ihl..lay.l2 + lay.ihl + 4]);

    // The head: its own lengths back; a standard head also its own flags (it never had
    // FIN or PSH: those end a train) and its own checksum, from its payload sum.
    let mut hv = pool.get_mut(&mut p);
    let mut chain = hv.meta.chain.take();
    let standard = hv.meta.gso_type & gso::KIND <= gso::UDPV4;
    let psum = (hv.meta.flags & flag::PAYLOAD_SUM != 0).then_some(hv.meta.csum_payload);
    let own = usize::from(hv.meta.len) - lay.l2;
    let (head_ip, head_l4) = hv.data_mut()[lay.l2..].split_at_mut(lay.ihl);
    let mut ip = Ipv4Packet::new_unchecked(head_ip);
    let old = ip.total_len();
    ip.set_total_len(own as u16);
    ip.set_checksum(checksum::update16(ip.checksum(), old, own as u16));
    let (src, dst) = (ip.src(), ip.dst());
    let l4_len = own - lay.ihl;
    if !lay.tcp {
        UdpPacket::new_unchecked(&mut head_l4[..lay.l4h]).set_len(l4_len as u16);
    }
    if standard {
        if lay.tcp {
            let mut tcp = TcpPacket::new_unchecked(&mut head_l4[..lay.l4h]);
            let mut f = tcp.flags();
            f.remove(TcpFlags::FIN | TcpFlags::PSH);
            tcp.set_flags(f);
        }
        let payload = match psum {
            Some(s) => u64::from(s),
            None => checksum::sum(&head_l4[lay.l4h..], 0),
        };
        fill_l4_checksum(head_l4, &lay, src, dst, l4_len, payload);
    }
    plain(hv.meta);
    let head = Inherit::of(hv.meta);
    out.push(p);

    // The head's changes are the same for every member (GRO merged only segments whose
    // TOS, flags, TTL, addresses and ports were equal), so they are worked out once, on
    // the first member, and applied to the others as stores and one checksum addition.
    let mut delta: Option<Delta> = None;
    while let Some(mut q) = chain {
        let mut w = pool.get_mut(&mut q);
        chain = w.meta.chain.take();
        // Back to the member's own IP header, with the head's link header in front.
        let back = usize::from(w.meta.data - w.meta.l3) + l2;
        let Some(front) = w.push(back) else {
            unreachable!("headroom checked above")
        };
        front[..l2].copy_from_slice(&l2h[..l2]);
        let d = &mut front[l2..];
        let dl = delta.get_or_insert_with(|| Delta::new(d, &iph, &ports, &lay));
        if !dl.apply(d) {
            // Other header fields than the first member's (GRO never builds that): this
            // member's own delta.
            Delta::new(d, &iph, &ports, &lay).apply(d);
        }
        head.apply(w.meta, &lay);
        out.push(q);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
