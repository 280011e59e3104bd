//! GSO: a super-packet becomes the wire packets it stands for.
//!
//! Called where a super-packet cannot go on whole: at transmit on a port without the
//! matching offload (the `gso` stage), before a socket that does not take super-datagrams
//! (`udp-input`, `udp6-input`), and before fragmentation (`ip4-fragment`). The packet's
//! data starts at its link header (`Meta::l3 - Meta::data` bytes of it, none when the
//! data starts at the IP header). IPv4 and IPv6 alike; an IPv6 super-packet's extension
//! headers must be ones every segment can carry unchanged (`ip6_headers`).
//!
//! *Standard* (`TCPV4`, `UDPV4`, `TCPV6`, `UDPV6`): every segment gets the head's headers,
//! rebuilt for it: the IP length (IPv4 total length, IPv6 payload length), and for IPv4
//! the identification (+1 per segment unless the train had a fixed ID) and header
//! checksum; TCP sequence number (+`gso_size` per segment), FIN and PSH only on the last
//! segment (CWR is kept on every segment, as the kernel does for AccECN trains: GRO only
//! merges segments whose CWR bits are equal); UDP length; the L4 checksum from the
//! header, the pseudo-header (IPv4's or IPv6's, RFC 8200 8.1) and the payload's sum. When
//! the super-packet is laid out as GRO builds it (the head holds the headers and one
//! segment, each chained buffer one more segment with headroom for headers) no payload
//! byte moves: headers are written in front of each chained payload, and the checksums
//! use the payload sums GRO recorded. Any other layout (an application's large send) is
//! copied into new buffers.
//!
//! *Fraglist* (`FRAGLIST_*`): the chain is unlinked. Each member re-exposes its own
//! received IP and L4 headers, gets the head's link header, and takes every field the
//! stack may have changed on the head on its way (IPv4: TOS, TTL, addresses, ports, with
//! its checksums updated incrementally, RFC 1624; IPv6: traffic class and flow label,
//! hop limit, addresses, ports, with its L4 checksum updated for the addresses and ports:
//! IPv6 has no header checksum), so a TTL or hop-limit decrement or a rewrite reaches
//! every segment and a member nobody changed keeps its bytes. The head gets its own
//! lengths back.
//!
//! Nothing is changed when segmentation fails: the super-packet is returned with the
//! reason (no buffer, no headroom, a layout that is not a super-packet), for the caller
//! to drop whole.

pub mod stage;

use netbatch_engine::{BufCache, Meta, Pkt, Pool, Reason};
use netbatch_wire::bytes::{get_u16, put_u16};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::{Ipv4Packet, Protocol};
use netbatch_wire::ipv6::{self, Ipv6Packet};
use netbatch_wire::tcp::{TcpFlags, TcpPacket};
use netbatch_wire::udp::{self, UdpPacket};

use crate::dissect::{IP6_EXT_MAX_BYTES, IP6_EXT_MAX_HEADERS, L3, L4};
use crate::l2::output::{MAX_HEADER_LEN, copy_header};
use crate::meta::{flag, gso};

netbatch_engine::reasons! {
    /// Why segmentation gives up.
    pub mod reason {
        FAILED = "gso_failed": "super-packet could not be segmented",
    }
}

/// The longest header block a segment carries: link (22), IPv6 with the longest chain of
/// extension headers the dissector crosses (40 + 256; IPv4: 60), TCP (60).
const MAX_HDR: usize = 22 + ipv6::HEADER_LEN + IP6_EXT_MAX_BYTES + 60;

/// The IPv6 header a segment of a super-packet carries, for the IPv6 packet `d` starts
/// with: its length (the fixed header and the extension headers every segment carries
/// as the first one's) and the upper-layer protocol that follows. Those extension
/// headers are Hop-by-Hop Options (first), Destination Options and a Routing header with
/// no segments left (RFC 8200 4.3, 4.4, 4.6): nothing on the way changes them, and the
/// destination field is the final destination the upper-layer checksum covers (RFC 8200
/// 8.1; with segments left it is not). The walk stops at any other next header, which is
/// returned as the upper layer (a Fragment or Authentication header too: the caller
/// takes only TCP and UDP); within the dissector's bounds
/// ([`IP6_EXT_MAX_HEADERS`], [`IP6_EXT_MAX_BYTES`]). `None` when `d` is not a whole IPv6
/// header and chain.
pub(crate) fn ip6_headers(d: &[u8]) -> Option<(usize, u8)> {
    let h = d.first_chunk::<{ ipv6::HEADER_LEN }>()?;
    if h[0] >> 4 != 6 {
        return None;
    }
    let (mut next, mut at) = (Protocol(h[6]), ipv6::HEADER_LEN);
    for _ in 0..=IP6_EXT_MAX_HEADERS {
        match next {
            Protocol::HOP_BY_HOP if at == ipv6::HEADER_LEN => {}
            Protocol::DEST_OPTS => {}
            // Segments left, the fourth byte (RFC 8200 4.4).
            Protocol::ROUTING if d.get(at + 3) == Some(&0) => {}
            upper => return Some((at, upper.0)),
        }
        let len = (usize::from(*d.get(at + 1)?) + 1) * 8;
        next = Protocol(*d.get(at)?);
        at += len;
        if at - ipv6::HEADER_LEN > IP6_EXT_MAX_BYTES || d.len() < at {
            return None;
        }
    }
    None
}

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
    /// IPv6 (else IPv4).
    v6: bool,
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
    let (tcp, v6) = match m.gso_type & gso::KIND {
        gso::TCPV4 | gso::FRAGLIST_TCPV4 => (true, false),
        gso::UDPV4 | gso::FRAGLIST_UDPV4 => (false, false),
        gso::TCPV6 | gso::FRAGLIST_TCPV6 => (true, true),
        gso::UDPV6 | gso::FRAGLIST_UDPV6 => (false, true),
        _ => return None,
    };
    let (ihl, proto) = if v6 {
        ip6_headers(d.get(l2..)?)?
    } else {
        let ip = Ipv4Packet::new_checked(d.get(l2..)?).ok()?;
        if ip.version() != 4 {
            return None;
        }
        (ip.header_len(), ip.protocol().0)
    };
    let l4 = d.get(l2 + ihl..)?;
    let l4h = match (tcp, L4::of(proto)) {
        (true, L4::Tcp) => TcpPacket::new_checked(l4).ok()?.header_len(),
        (false, L4::Udp) => UdpPacket::new_checked(l4).ok().map(|_| udp::HEADER_LEN)?,
        _ => return None,
    };
    Some(Layout {
        l2,
        ihl,
        l4h,
        tcp,
        v6,
    })
}

/// Whether GSO kind `kind` (flag bits masked off) is a fraglist chain.
#[inline(always)]
fn fraglist(kind: u8) -> bool {
    matches!(
        kind,
        gso::FRAGLIST_TCPV4 | gso::FRAGLIST_UDPV4 | gso::FRAGLIST_TCPV6 | gso::FRAGLIST_UDPV6
    )
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
    fn apply<const V6: bool>(&self, to: &mut Meta, lay: &Layout) {
        to.in_port = self.in_port;
        to.in_if = self.in_if;
        to.out_if = self.out_if;
        to.adj = self.adj;
        to.mark = self.mark;
        to.hash = self.hash;
        to.flags = self.flags;
        to.l2_len = lay.l2 as u8;
        to.l3_type = if V6 { L3::Ipv6 } else { L3::Ipv4 } as u8;
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
    // One version of the code per IP version: the IPv4 one carries no IPv6 test.
    if lay.v6 {
        segment_as::<true>(pool, cache, p, lay, out)
    } else {
        segment_as::<false>(pool, cache, p, lay, out)
    }
}

/// [`segment`] for a super-packet laid out as `lay`, of IP version `V6` (`lay.v6`).
#[inline(always)]
fn segment_as<const V6: bool>(
    pool: &Pool,
    cache: &mut BufCache,
    p: Pkt,
    lay: Layout,
    out: &mut Vec<Pkt>,
) -> Result<(), (Pkt, Reason)> {
    let m = pool.get(&p).meta;
    if m.flags & flag::GRO_CHAIN != 0 {
        unchain::<V6>(pool, p, lay, out)
    } else if fraglist(m.gso_type & gso::KIND) {
        // Only GRO builds chains of whole packets.
        Err((p, reason::FAILED))
    } else {
        segment_standard::<V6>(pool, cache, p, lay, out)
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

/// Sets the L4 header `l4` (of a segment laid out as `lay`, whose pseudo-header sums to
/// `acc`, the payload to `psum`) its checksum.
fn fill_l4_checksum(l4: &mut [u8], lay: &Layout, acc: u64, psum: u64) {
    put_u16(l4, lay.csum_at(), 0);
    let header = l4.get(..lay.l4h).unwrap_or_default();
    let c = checksum::finish(checksum::sum(header, acc + psum));
    // RFC 768 (and RFC 8200 8.1): a computed zero is sent as all ones.
    put_u16(
        l4,
        lay.csum_at(),
        if lay.tcp { c } else { udp::checksum_on_wire(c) },
    );
}

/// The header block of segment `i` (payload `plen` bytes summing to `psum`), rebuilt
/// from the head's in place.
#[expect(
    clippy::indexing_slicing,
    reason = "`t` is a header block of `lay.hdr()` = l2 + ihl + l4h bytes, as `layout` read it"
)]
fn rebuild<const V6: bool>(t: &mut [u8], tr: &Train, i: usize, plen: usize, psum: u64) {
    let (lay, n, gso_size, fixed) = (&tr.lay, tr.n, tr.gso_size, tr.fixed);
    let (iph, l4h) = t[lay.l2..].split_at_mut(lay.ihl);
    let l4_len = lay.l4h + plen;
    let acc = if V6 {
        // The payload length counts the extension headers; no identification, no
        // header checksum.
        let mut ip = Ipv6Packet::new_unchecked(iph);
        ip.set_payload_len((lay.ihl - ipv6::HEADER_LEN + l4_len) as u16);
        checksum::pseudo_header_v6(ip.src(), ip.dst(), lay.proto(), l4_len as u32)
    } else {
        let mut ip = Ipv4Packet::new_unchecked(iph);
        ip.set_total_len((lay.ihl + l4_len) as u16);
        if !fixed {
            ip.set_ident(ip.ident().wrapping_add(i as u16));
        }
        ip.fill_checksum();
        checksum::pseudo_header_v4(ip.src(), ip.dst(), lay.proto(), l4_len as u16)
    };
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
    fill_l4_checksum(l4h, lay, acc, psum);
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

fn segment_standard<const V6: bool>(
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
    let mut block = [0u8; MAX_HDR];
    // (`layout` found the headers in the head.)
    let (Some(t), Some(head_hdr)) = (block.get_mut(..hdr), v.data().get(..hdr)) else {
        return Err((p, reason::FAILED));
    };
    t.copy_from_slice(head_hdr);
    let t = &*t;
    if !gro_layout(pool, v.meta, hdr, gso_size) {
        return segment_copy::<V6>(pool, cache, p, &tr, t, out);
    }
    // Zero copy: the head is the first segment, every chained buffer gets headers pushed.
    let mut mv = pool.get_mut(&mut p);
    let head_meta_psum = payload_sum(mv.meta, mv.data().get(hdr..).unwrap_or_default());
    let Some(seg0) = mv.data_mut().get_mut(..hdr) else {
        return Err((p, reason::FAILED));
    };
    rebuild::<V6>(seg0, &tr, 0, gso_size, head_meta_psum);
    let mut chain = mv.meta.chain.take();
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
        h.copy_from_slice(t);
        rebuild::<V6>(h, &tr, i, plen, psum);
        head.apply::<V6>(w.meta, &lay);
        out.push(q);
        i += 1;
    }
    Ok(())
}

/// Standard segmentation by copying: every segment in a new buffer, then the original
/// chain freed. All buffers are taken first, so a shortage changes nothing.
fn segment_copy<const V6: bool>(
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
    let room = |q: &Pkt| {
        pool.get(q).meta.data as usize + hdr + gso_size <= pool.config().buf_size as usize
    };
    if !out.get(start).is_some_and(room) {
        let mut taken: Vec<Pkt> = out.drain(start..).collect();
        cache.free_all(&mut taken);
        return Err((p, reason::FAILED));
    }
    // A cursor over the payload: the head's bytes after its headers, then each chained
    // buffer's.
    let head = pool.get(&p);
    let mut src: &[u8] = head.data().get(hdr..).unwrap_or_default();
    let mut next = head.meta.chain.as_ref();
    for (i, q) in out.iter_mut().skip(start).enumerate() {
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
            let Some((part, rest)) = src.split_at_checked(src.len().min(gso_size - plen)) else {
                break;
            };
            let Some(b) = w.append(part.len()) else {
                unreachable!("room checked above")
            };
            b.copy_from_slice(part);
            src = rest;
            plen += part.len();
        }
        // The payload sum over the whole segment (its parts may have odd lengths).
        let psum = checksum::sum(w.data().get(hdr..).unwrap_or_default(), 0);
        // (The segment starts with the `hdr` bytes appended first.)
        if let Some(h) = w.data_mut().get_mut(..hdr) {
            rebuild::<V6>(h, tr, i, plen, psum);
        }
        inh.apply::<V6>(w.meta, &lay);
    }
    cache.free(p);
    Ok(())
}

/// The 16-bit words of an IPv4 header the stack may change on its way (TOS with the
/// version byte, flags and fragment offset, TTL with the protocol, the addresses), by
/// byte offset. The identification (4) and total length (2) stay the member's own.
const IP_WORDS: [usize; 7] = [0, 6, 8, 12, 14, 16, 18];

/// The changes the stack made to a super-packet's head, as they apply to a member's own
/// IPv4 header (at offset 0 of `d`) and L4 ports: the bytes to store and what they add to
/// the IP and L4 checksums (RFC 1624 eqn. 3, `HC' = ~(~HC + Σ(~m + m'))`).
struct Delta {
    /// The member's original bytes (IP header and ports) where a change is looked for,
    /// as three words under [`DELTA_MASK`].
    orig: [u64; 3],
    /// The same bytes with the head's changes in, under the same mask.
    new: [u64; 3],
    /// Some word changed.
    changed: bool,
    /// What the changes add to the IP header checksum, folded to 16 bits (0: nothing,
    /// as a fold of anything but 0 is not 0).
    ip_add: u16,
    l4_add: u64,
    /// Offset of the L4 checksum.
    csum_at: usize,
    /// UDP (whose checksum may be absent, RFC 768), else TCP.
    udp: bool,
}

/// The three words of `b` under `mask`.
#[inline(always)]
fn words24(b: &[u8; 24], mask: &[u8; 24]) -> [u64; 3] {
    let mut w = [0u64; 3];
    let (bw, mw) = (b.as_chunks::<8>().0, mask.as_chunks::<8>().0);
    for (w, (b, m)) in w.iter_mut().zip(bw.iter().zip(mw)) {
        *w = u64::from_ne_bytes(*b) & u64::from_ne_bytes(*m);
    }
    w
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
        // (A member has at least 28 bytes of its own headers: `unchain` checked.)
        let orig = d.first_chunk::<24>().copied().unwrap_or([0; 24]);
        let mut new = orig;
        let mut dl = Self {
            orig: words24(&orig, &DELTA_MASK),
            new: [0; 3],
            changed: false,
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
        let mut ip_add = 0u64;
        for at in IP_WORDS.into_iter().chain([20, 22]) {
            let (old, new_w) = (get_u16(&orig, at), want(at));
            if old != new_w {
                put_u16(&mut new, at, new_w);
                let add = u64::from(!old) + u64::from(new_w);
                if at < 20 {
                    ip_add += add;
                }
                // Addresses are in the pseudo-header; ports in the L4 header.
                if at >= 12 {
                    dl.l4_add += add;
                }
            }
        }
        dl.new = words24(&new, &DELTA_MASK);
        dl.changed = dl.new != dl.orig;
        dl.ip_add = checksum::fold(ip_add);
        dl
    }

    /// Applies the delta to member header `d` if its fields are the ones the delta was
    /// worked out from; `false` (nothing changed) otherwise.
    #[inline(always)]
    fn rewrite(&self, d: &mut [u8]) -> bool {
        let Some(h) = d.first_chunk_mut::<24>() else {
            return false;
        };
        // Version 4 with a 20-byte header, and the fields the delta was made from.
        if h[0] != 0x45 || words24(h, &DELTA_MASK) != self.orig {
            return false;
        }
        if !self.changed {
            return true;
        }
        // Every masked byte takes the head's value (the unchanged ones are the same).
        let keep = words24(&[0xff; 24], &DELTA_MASK).map(|m| !m);
        for (w, (new, keep)) in h
            .as_chunks_mut::<8>()
            .0
            .iter_mut()
            .zip(self.new.iter().zip(keep))
        {
            *w = ((u64::from_ne_bytes(*w) & keep) | new).to_ne_bytes();
        }
        if self.ip_add != 0 {
            let c = checksum::add16(get_u16(h, 10), self.ip_add);
            put_u16(h, 10, c);
        }
        l4_checksum_add(d, self.csum_at, self.l4_add, self.udp);
        true
    }
}

/// Adds `add` (a one's-complement sum of the changed words) to the L4 checksum at `at`,
/// if it is in the buffer. A UDP datagram without a checksum keeps none: RFC 768 over
/// IPv4; over IPv6 it is invalid (RFC 8200 8.1) and GRO merges none, so no checksum is
/// made up for it either.
#[inline(always)]
fn l4_checksum_add(d: &mut [u8], at: usize, add: u64, udp: bool) {
    if add == 0 || d.len() < at + 2 {
        return;
    }
    let old = get_u16(d, at);
    if udp && old == 0 {
        return;
    }
    let c = checksum::finish(u64::from(!old) + add);
    put_u16(d, at, if udp { udp::checksum_on_wire(c) } else { c });
}

/// A member's rewrite: the head's changes as they apply to a member's own headers
/// ([`Delta`] for IPv4, [`Delta6`] for IPv6).
trait Rewrite {
    /// Applies the rewrite to member header `d` (from its IP header to the end of its L4
    /// header) if its fields are the ones the rewrite was worked out from; `false`
    /// (nothing changed) otherwise.
    fn apply(&self, d: &mut [u8]) -> bool;
}

impl Rewrite for Delta {
    #[inline(always)]
    fn apply(&self, d: &mut [u8]) -> bool {
        self.rewrite(d)
    }
}

/// The bytes of an IPv6 member a [`Delta6`] reads: its fixed header, then its ports.
const D6: usize = ipv6::HEADER_LEN + 4;

/// Offset of the payload length in the fixed IPv6 header: every member's own.
const D6_PAYLOAD_LEN: usize = 4;

/// The changes the stack made to an IPv6 super-packet's head, as they apply to a member:
/// the 16-bit words of the fixed header (version, traffic class and flow label; next
/// header and hop limit; the addresses) and of the ports that differ from the member's,
/// and what they add to its L4 checksum (the addresses through the pseudo-header, RFC
/// 8200 8.1; the ports; RFC 1624 eqn. 3). IPv6 has no header checksum: a hop-limit
/// decrement is a store.
struct Delta6 {
    /// The member's fixed header and ports, its payload length zeroed.
    orig: [u8; D6],
    /// (offset into the `D6` bytes, new value) of each changed word.
    words: [(usize, u16); D6 / 2],
    n: usize,
    l4_add: u64,
    /// Offset of the upper-layer header (the ports) from the IPv6 header.
    l4: usize,
    /// Offset of the L4 checksum from the IPv6 header.
    csum_at: usize,
    udp: bool,
}

impl Delta6 {
    /// The `D6` bytes of the member header `d` whose upper-layer header is at `l4`.
    #[inline(always)]
    fn view(d: &[u8], l4: usize) -> Option<[u8; D6]> {
        let mut v = [0u8; D6];
        v[..ipv6::HEADER_LEN].copy_from_slice(d.get(..ipv6::HEADER_LEN)?);
        v[ipv6::HEADER_LEN..].copy_from_slice(d.get(l4..l4 + 4)?);
        v[D6_PAYLOAD_LEN..D6_PAYLOAD_LEN + 2].fill(0);
        Some(v)
    }

    /// The delta from member header `d` to the head's `head` (its `D6` bytes).
    fn new(d: &[u8], head: &[u8; D6], lay: &Layout) -> Self {
        let orig = Self::view(d, lay.ihl).unwrap_or([0; D6]);
        let mut dl = Self {
            orig,
            words: [(0, 0); D6 / 2],
            n: 0,
            l4_add: 0,
            l4: lay.ihl,
            csum_at: lay.ihl + lay.csum_at(),
            udp: !lay.tcp,
        };
        for at in (0..D6).step_by(2) {
            let (old, new) = (get_u16(&orig, at), get_u16(head, at));
            if at == D6_PAYLOAD_LEN || old == new {
                continue;
            }
            // (At most one entry per word of the `D6` bytes.)
            if let Some(w) = dl.words.get_mut(dl.n) {
                *w = (at, new);
                dl.n += 1;
            }
            // Addresses (from byte 8) and ports are covered by the L4 checksum.
            if at >= 8 {
                dl.l4_add += u64::from(!old) + u64::from(new);
            }
        }
        dl
    }
}

impl Rewrite for Delta6 {
    fn apply(&self, d: &mut [u8]) -> bool {
        if d.first().is_none_or(|b| b >> 4 != 6) || Self::view(d, self.l4) != Some(self.orig) {
            return false;
        }
        for &(at, v) in self.words.iter().take(self.n) {
            let pos = if at < ipv6::HEADER_LEN {
                at
            } else {
                self.l4 + at - ipv6::HEADER_LEN
            };
            put_u16(d, pos, v);
        }
        l4_checksum_add(d, self.csum_at, self.l4_add, self.udp);
        true
    }
}

/// The pseudo-header sum of a segment laid out as `lay` whose IP header is `ip`, for
/// `l4_len` bytes of L4 header and payload.
fn pseudo_of<const V6: bool>(ip: &[u8], lay: &Layout, l4_len: usize) -> u64 {
    // (`ip` is a whole header, as `layout` read it: the fallback is never taken.)
    if V6 {
        let Some(ip) = ip.first_chunk::<{ ipv6::HEADER_LEN }>() else {
            return 0;
        };
        let ip = Ipv6Packet::new_unchecked(ip);
        checksum::pseudo_header_v6(ip.src(), ip.dst(), lay.proto(), l4_len as u32)
    } else {
        let Some(ip) = ip.first_chunk::<20>() else {
            return 0;
        };
        let ip = Ipv4Packet::new_unchecked(ip);
        checksum::pseudo_header_v4(ip.src(), ip.dst(), lay.proto(), l4_len as u16)
    }
}

/// A GRO-built super-packet of IP version `V6` back into the packets it was made of.
#[expect(
    clippy::indexing_slicing,
    reason = "the head's `l2 + ihl + l4h` header bytes, which `layout` read (checked: +7 a member)"
)]
fn unchain<const V6: bool>(
    pool: &Pool,
    mut p: Pkt,
    lay: Layout,
    out: &mut Vec<Pkt>,
) -> Result<(), (Pkt, Reason)> {
    // Check every member before changing anything.
    let v = pool.get(&p);
    let mut cur = v.meta.chain.as_ref();
    // A member's own headers: at least an IP header and a UDP header.
    let own_min = if V6 { lay.ihl + udp::HEADER_LEN } else { 28 };
    while let Some(q) = cur {
        let m = pool.get(q).meta;
        let (l3, data) = (usize::from(m.l3), usize::from(m.data));
        // Room for the link header in front, and its own headers behind.
        if l3 < lay.l2 || data < l3 + own_min {
            return Err((p, reason::FAILED));
        }
        cur = m.chain.as_ref();
    }
    let mut l2h = [0u8; MAX_HEADER_LEN];
    let l2 = lay.l2.min(MAX_HEADER_LEN);
    l2h[..l2].copy_from_slice(&v.data()[..l2]);
    let mut ports = [0u8; 4];
    ports.copy_from_slice(&v.data()[lay.l2 + lay.ihl..lay.l2 + lay.ihl + 4]);
    let mut iph = [0u8; 20];
    let mut head6 = [0u8; D6];
    if V6 {
        head6[..ipv6::HEADER_LEN].copy_from_slice(&v.data()[lay.l2..lay.l2 + ipv6::HEADER_LEN]);
        head6[ipv6::HEADER_LEN..].copy_from_slice(&ports);
    } else {
        iph.copy_from_slice(&v.data()[lay.l2..lay.l2 + 20]);
    }

    // The head: its own lengths back; a standard head also its own flags (it never had
    // FIN or PSH: those end a train) and its own checksum, from its payload sum.
    let mut hv = pool.get_mut(&mut p);
    let chain = hv.meta.chain.take();
    let standard = !fraglist(hv.meta.gso_type & gso::KIND);
    let psum = (hv.meta.flags & flag::PAYLOAD_SUM != 0).then_some(hv.meta.csum_payload);
    let own = usize::from(hv.meta.len) - lay.l2;
    let (head_ip, head_l4) = hv.data_mut()[lay.l2..].split_at_mut(lay.ihl);
    if V6 {
        // The payload length counts the extension headers; no header checksum.
        Ipv6Packet::new_unchecked(&mut *head_ip).set_payload_len((own - ipv6::HEADER_LEN) as u16);
    } else {
        let mut ip = Ipv4Packet::new_unchecked(&mut *head_ip);
        let old = ip.total_len();
        ip.set_total_len(own as u16);
        ip.set_checksum(checksum::update16(ip.checksum(), old, own as u16));
    }
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
        let acc = pseudo_of::<V6>(head_ip, &lay, l4_len);
        fill_l4_checksum(head_l4, &lay, acc, payload);
    }
    plain(hv.meta);
    let head = Inherit::of(hv.meta);
    out.push(p);

    // The head's changes are the same for every member (GRO merged only segments whose
    // TOS/traffic class, flags, TTL/hop limit, addresses and ports were equal), so they
    // are worked out once, on the first member, and applied to the others as stores and
    // one checksum addition.
    if V6 {
        restore::<true, _>(pool, chain, (&l2h, l2), head, lay, out, |d| {
            Delta6::new(d, &head6, &lay)
        });
    } else {
        restore::<false, _>(pool, chain, (&l2h, l2), head, lay, out, |d| {
            Delta::new(d, &iph, &ports, &lay)
        });
    }
    Ok(())
}

/// Gives every member of fraglist `chain` its own headers back, with the head's link
/// header (the first `l2` bytes of `l2h`) in front and the head's changes (`delta` of a
/// member's header) applied,
/// and the head's metadata `head`, into `out`.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "`front` is `back` bytes, at least `l2` (a checked split costs the fast path)"
)]
fn restore<const V6: bool, D: Rewrite>(
    pool: &Pool,
    mut chain: Option<Pkt>,
    (l2h, l2): (&[u8; MAX_HEADER_LEN], usize),
    head: Inherit,
    lay: Layout,
    out: &mut Vec<Pkt>,
    delta: impl Fn(&[u8]) -> D,
) {
    let mut first: Option<D> = None;
    while let Some(mut q) = chain {
        let mut w = pool.get_mut(&mut q);
        chain = w.meta.chain.take();
        // Back to the member's own IP header, with the head's link header in front.
        let back = usize::from(w.meta.data - w.meta.l3) + l2;
        let Some(front) = w.push(back) else {
            unreachable!("headroom checked above")
        };
        copy_header(&mut front[..l2], l2h);
        let d = &mut front[l2..];
        let dl = first.get_or_insert_with(|| delta(d));
        if !dl.apply(d) {
            // Other header fields than the first member's (GRO never builds that): this
            // member's own delta.
            delta(d).apply(d);
        }
        head.apply::<V6>(w.meta, &lay);
        out.push(q);
    }
}

#[cfg(test)]
mod tests;
