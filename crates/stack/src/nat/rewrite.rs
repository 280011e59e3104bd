//! The header rewrite of a translated IPv4 packet: one end's address and port (or ICMP
//! query identifier) replaced, every checksum that covers them updated incrementally
//! (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`, which gives what a full recomputation
//! gives): the IPv4 header checksum, TCP's and UDP's (their pseudo-header covers the
//! addresses, RFC 793 3.1, RFC 768). A UDP checksum of zero (none sent, RFC 768) stays
//! zero; an updated UDP checksum that comes out zero is sent as all ones (RFC 768).
//! A packet whose L4 checksum the device is to finish (`L4_CSUM_PARTIAL`: the field holds
//! the pseudo-header's sum, not complemented) gets only the pseudo-header's change: the
//! ports are in the data the device sums.
//!
//! An ICMP error is translated with the header it quotes (RFC 5508 4.2, RFC 5382 7,
//! Linux's `nf_nat_icmp_reply_translation`): the outer header's address on the side the
//! hook changes, the quoted header's on the other side (the quoted packet travelled the
//! other way), the quoted IP checksum and, where the quote holds it, the quoted TCP/UDP
//! checksum incrementally, then the ICMP checksum over the whole message recomputed.
//!
//! Offsets are from the IP header; every access is checked (a short packet is reported,
//! never a panic).

use netbatch_wire::bytes::{get_u16, put_u16};
use netbatch_wire::checksum;

use crate::dissect::L4;

/// Which end of the packet a hook changes (Linux's `nf_nat_manip_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manip {
    /// The source: source NAT, at POSTROUTING.
    Src,
    /// The destination: destination NAT, at PREROUTING.
    Dst,
}

impl Manip {
    /// The other end.
    pub fn other(self) -> Self {
        match self {
            Self::Src => Self::Dst,
            Self::Dst => Self::Src,
        }
    }

    /// Offset of the address in the IPv4 header.
    fn addr_at(self) -> usize {
        match self {
            Self::Src => 12,
            Self::Dst => 16,
        }
    }

    /// Offset of the port in a TCP/UDP header.
    fn port_at(self) -> usize {
        match self {
            Self::Src => 0,
            Self::Dst => 2,
        }
    }
}

/// The packet was cut short of a field the rewrite needs (nothing after the IP header is
/// changed then; the caller drops it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short;

fn get32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(*d.get(at..at + 4)?.first_chunk::<4>()?))
}

fn put32(d: &mut [u8], at: usize, v: u32) -> Option<()> {
    d.get_mut(at..at + 4)?.copy_from_slice(&v.to_be_bytes());
    Some(())
}

fn read16(d: &[u8], at: usize) -> Option<u16> {
    Some(get_u16(d.get(at..at + 2)?.first_chunk::<2>()?, 0))
}

fn write16(d: &mut [u8], at: usize, v: u16) -> Option<()> {
    put_u16(d.get_mut(at..at + 2)?.first_chunk_mut::<2>()?, 0, v);
    Some(())
}

/// Replaces the address at `at` of the IPv4 header `ip` by `new`, updating the header
/// checksum; returns the old address.
fn set_addr(ip: &mut [u8], at: usize, new: u32) -> Option<u32> {
    let old = get32(ip, at)?;
    if old != new {
        put32(ip, at, new)?;
        let hc = read16(ip, 10)?;
        write16(ip, 10, checksum::update32(hc, old, new))?;
    }
    Some(old)
}

/// Where a protocol keeps its checksum and whether zero means none.
fn l4_sum_at(l4: L4) -> Option<(usize, bool)> {
    match l4 {
        L4::Tcp => Some((16, false)),
        L4::Udp => Some((6, true)),
        L4::UdpLite => Some((6, false)),
        _ => None,
    }
}

/// Updates the TCP/UDP checksum at `at` of `h` for an address change `old_a → new_a` and
/// a port change `old_p → new_p` (the ports only when `ports`); `zero_none`: a zero
/// checksum is "none" (UDP) and stays; `partial`: the field holds the pseudo-header's
/// sum for the device to finish.
fn update_l4_sum(
    h: &mut [u8],
    at: usize,
    (old_a, new_a): (u32, u32),
    (old_p, new_p): (u16, u16),
    zero_none: bool,
    partial: bool,
) -> Option<()> {
    let cs = read16(h, at)?;
    if partial {
        // A sum, not its complement: add the change the pseudo-header sees.
        let s = !checksum::update32(!cs, old_a, new_a);
        return write16(h, at, s);
    }
    if zero_none && cs == 0 {
        return Some(());
    }
    let mut s = checksum::update32(cs, old_a, new_a);
    if old_p != new_p {
        s = checksum::update16(s, old_p, new_p);
    }
    if zero_none && s == 0 {
        s = 0xffff;
    }
    write16(h, at, s)
}

/// What the rewrite of a packet needs to know of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Where the L4 header starts, from the IP header.
    pub l4: usize,
    /// The protocol.
    pub proto: L4,
    /// An ICMP query (echo and the others tracked by identifier): the identifier is
    /// its "port".
    pub icmp_query: bool,
    /// The L4 checksum is the device's to finish (`L4_CSUM_PARTIAL`).
    pub partial: bool,
}

/// Rewrites the `m` end of IPv4 packet `ip` (from its IP header) to address `addr` and,
/// for TCP, UDP and UDP-Lite, port `port` (for an ICMP query: its identifier, whichever
/// end), updating the checksums. Other protocols get the address only.
pub fn packet(ip: &mut [u8], lay: Layout, m: Manip, addr: u32, port: u16) -> Result<(), Short> {
    let at = m.addr_at();
    let old_a = get32(ip, at).ok_or(Short)?;
    // The address's change as RFC 1624 adds it (`~m + m'`, 16 bits at a time, not
    // folded yet): the IPv4 header's checksum and the TCP/UDP pseudo-header's take the
    // same, so it is summed once.
    let da = change32(old_a, addr);
    if old_a != addr {
        put32(ip, at, addr).ok_or(Short)?;
        let hc = read16(ip, 10).ok_or(Short)?;
        write16(ip, 10, apply(hc, da)).ok_or(Short)?;
    }
    let h = ip.get_mut(lay.l4..).ok_or(Short)?;
    match lay.proto {
        L4::Tcp | L4::Udp | L4::UdpLite => {
            let old_p = read16(h, m.port_at()).ok_or(Short)?;
            if let Some((at, zero_none)) = l4_sum_at(lay.proto) {
                let cs = read16(h, at).ok_or(Short)?;
                let new = if lay.partial {
                    // A sum, not its complement: add the change the pseudo-header sees
                    // (the ports are in the data the device sums).
                    Some(!apply(!cs, da))
                } else if zero_none && cs == 0 {
                    None
                } else {
                    let s = apply(cs, da + u64::from(!old_p) + u64::from(port));
                    Some(if zero_none && s == 0 { 0xffff } else { s })
                };
                if let Some(v) = new {
                    write16(h, at, v).ok_or(Short)?;
                }
            }
            write16(h, m.port_at(), port).ok_or(Short)?;
        }
        L4::Icmp if lay.icmp_query => {
            // ICMP's checksum covers no pseudo-header: only the identifier changes it.
            let old = read16(h, 4).ok_or(Short)?;
            if old != port {
                let cs = read16(h, 2).ok_or(Short)?;
                write16(h, 2, checksum::update16(cs, old, port)).ok_or(Short)?;
                write16(h, 4, port).ok_or(Short)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The ones' complement change of a 32-bit field from `old` to `new`, unfolded: `~m +
/// m'` over its two 16-bit halves (RFC 1624 eqn. 3).
#[inline(always)]
fn change32(old: u32, new: u32) -> u64 {
    let o = !old;
    u64::from(o >> 16) + u64::from(o & 0xffff) + u64::from(new >> 16) + u64::from(new & 0xffff)
}

/// Checksum `hc` after changes whose unfolded sum is `d`: `~(~HC + d)`, folded.
#[inline(always)]
fn apply(hc: u16, d: u64) -> u16 {
    checksum::finish(u64::from(!hc) + d)
}

/// Rewrites ICMP error `ip` (its ICMP header at `l4`) at a hook changing end `m`: the
/// outer `m` address to `outer`, and the quoted packet's other end to `inner` (address)
/// and `inner_port` (port, or a quoted query's identifier); then the ICMP checksum.
pub fn icmp_error(
    ip: &mut [u8],
    l4: usize,
    m: Manip,
    outer: u32,
    inner: u32,
    inner_port: u16,
) -> Result<(), Short> {
    set_addr(ip, m.addr_at(), outer).ok_or(Short)?;
    let icmp = ip.get_mut(l4..).ok_or(Short)?;
    {
        let q = icmp.get_mut(8..).ok_or(Short)?;
        let ihl = usize::from(q.first().ok_or(Short)? & 0x0f) * 4;
        if ihl < 20 {
            return Err(Short);
        }
        let proto = L4::of(*q.get(9).ok_or(Short)?);
        let im = m.other();
        let old_a = set_addr(q, im.addr_at(), inner).ok_or(Short)?;
        let qh = q.get_mut(ihl..).ok_or(Short)?;
        match proto {
            L4::Tcp | L4::Udp | L4::UdpLite => {
                let old_p = read16(qh, im.port_at()).ok_or(Short)?;
                // The quote may stop before the checksum (RFC 792 quotes 8 bytes: TCP's
                // is beyond them): then only the ports change.
                if let Some((at, zero_none)) = l4_sum_at(proto)
                    && qh.len() >= at + 2
                {
                    update_l4_sum(
                        qh,
                        at,
                        (old_a, inner),
                        (old_p, inner_port),
                        zero_none,
                        false,
                    )
                    .ok_or(Short)?;
                }
                write16(qh, im.port_at(), inner_port).ok_or(Short)?;
            }
            L4::Icmp => {
                let old = read16(qh, 4).ok_or(Short)?;
                if old != inner_port {
                    let cs = read16(qh, 2).ok_or(Short)?;
                    write16(qh, 2, checksum::update16(cs, old, inner_port)).ok_or(Short)?;
                    write16(qh, 4, inner_port).ok_or(Short)?;
                }
            }
            _ => {}
        }
    }
    write16(icmp, 2, 0).ok_or(Short)?;
    let cs = checksum::checksum(icmp);
    write16(icmp, 2, cs).ok_or(Short)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_wire::checksum::reference;

    /// An IPv4 header (no options) with a correct checksum.
    fn ip(proto: u8, src: [u8; 4], dst: [u8; 4], payload: usize) -> Vec<u8> {
        let len = (20 + payload) as u16;
        let mut h = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
        h[2..4].copy_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        let cs = reference::checksum(&h);
        h[10..12].copy_from_slice(&cs.to_be_bytes());
        h
    }

    /// The TCP/UDP checksum of `pkt` recomputed from scratch over the pseudo-header.
    fn l4_sum(pkt: &[u8], at: usize) -> u16 {
        let mut p = pkt.to_vec();
        p[20 + at] = 0;
        p[20 + at + 1] = 0;
        let l4 = &p[20..];
        let mut ph = Vec::new();
        ph.extend_from_slice(&p[12..20]);
        ph.push(0);
        ph.push(p[9]);
        ph.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        ph.extend_from_slice(l4);
        reference::checksum(&ph)
    }

    fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let payload = b"hello, translated world";
        let mut p = ip(6, src, dst, 20 + payload.len());
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sp.to_be_bytes());
        t[2..4].copy_from_slice(&dp.to_be_bytes());
        t[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = 0x18;
        t[14] = 0xff;
        p.extend_from_slice(&t);
        p.extend_from_slice(payload);
        let cs = l4_sum(&p, 16);
        p[36..38].copy_from_slice(&cs.to_be_bytes());
        p
    }

    fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, with_sum: bool) -> Vec<u8> {
        let payload = b"query";
        let mut p = ip(17, src, dst, 8 + payload.len());
        let mut u = vec![0u8; 8];
        u[0..2].copy_from_slice(&sp.to_be_bytes());
        u[2..4].copy_from_slice(&dp.to_be_bytes());
        u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&u);
        p.extend_from_slice(payload);
        if with_sum {
            let cs = l4_sum(&p, 6);
            p[26..28].copy_from_slice(&cs.to_be_bytes());
        }
        p
    }

    fn lay(proto: L4) -> Layout {
        Layout {
            l4: 20,
            proto,
            icmp_query: proto == L4::Icmp,
            partial: false,
        }
    }

    fn ip_sum_ok(p: &[u8]) -> bool {
        reference::ones_complement_sum(&p[..20]) == 0xffff
    }

    const IN: [u8; 4] = [192, 0, 2, 10];
    const FAR: [u8; 4] = [198, 51, 100, 7];
    const NAT: [u8; 4] = [203, 0, 113, 1];

    /// Source NAT of a TCP segment: the bytes are what building the translated segment
    /// from scratch gives (both checksums recomputed in full).
    #[test]
    fn tcp_source_translation_matches_a_fresh_build() {
        let mut p = tcp(IN, FAR, 40000, 80);
        packet(
            &mut p,
            lay(L4::Tcp),
            Manip::Src,
            u32::from_be_bytes(NAT),
            1024,
        )
        .unwrap();
        assert_eq!(p, tcp(NAT, FAR, 1024, 80));
        assert!(ip_sum_ok(&p));
        assert_eq!(
            u16::from_be_bytes([p[36], p[37]]),
            l4_sum(&p, 16),
            "TCP checksum"
        );
        // And back, as a reply's destination.
        let mut r = tcp(FAR, NAT, 80, 1024);
        packet(
            &mut r,
            lay(L4::Tcp),
            Manip::Dst,
            u32::from_be_bytes(IN),
            40000,
        )
        .unwrap();
        assert_eq!(r, tcp(FAR, IN, 80, 40000));
    }

    /// UDP: a checksum is updated, a zero checksum (none) stays zero (RFC 768).
    #[test]
    fn udp_checksum_updated_and_zero_kept() {
        let mut p = udp(IN, FAR, 5353, 53, true);
        packet(
            &mut p,
            lay(L4::Udp),
            Manip::Src,
            u32::from_be_bytes(NAT),
            61000,
        )
        .unwrap();
        assert_eq!(p, udp(NAT, FAR, 61000, 53, true));
        let mut z = udp(IN, FAR, 5353, 53, false);
        packet(
            &mut z,
            lay(L4::Udp),
            Manip::Src,
            u32::from_be_bytes(NAT),
            61000,
        )
        .unwrap();
        assert_eq!(z, udp(NAT, FAR, 61000, 53, false));
        assert_eq!(&z[26..28], &[0, 0]);
        assert!(ip_sum_ok(&z));
    }

    /// A partial checksum (the device finishes it) takes the pseudo-header's change
    /// only: finishing it afterwards gives the right checksum.
    #[test]
    fn partial_checksum_takes_the_pseudo_header_change() {
        let mut p = tcp(IN, FAR, 40000, 80);
        // The pseudo-header's sum, as a stack offloading the checksum leaves it.
        let ph = |p: &[u8]| {
            let mut b = p[12..20].to_vec();
            b.extend_from_slice(&[0, 6]);
            b.extend_from_slice(&((p.len() - 20) as u16).to_be_bytes());
            reference::ones_complement_sum(&b)
        };
        let s = ph(&p);
        p[36..38].copy_from_slice(&s.to_be_bytes());
        let l = Layout {
            partial: true,
            ..lay(L4::Tcp)
        };
        packet(&mut p, l, Manip::Src, u32::from_be_bytes(NAT), 1024).unwrap();
        assert_eq!(u16::from_be_bytes([p[36], p[37]]), ph(&p));
        assert_eq!(&p[20..22], &1024u16.to_be_bytes());
    }

    /// ICMP echo: the identifier is translated, the ICMP checksum follows (it covers no
    /// pseudo-header, so only the identifier changes it).
    #[test]
    fn icmp_echo_identifier_translated() {
        let echo = |src, dst, id: u16| {
            let mut p = ip(1, src, dst, 16);
            let mut e = vec![8, 0, 0, 0];
            e.extend_from_slice(&id.to_be_bytes());
            e.extend_from_slice(&[0, 1, 1, 2, 3, 4, 5, 6, 7, 8]);
            let cs = reference::checksum(&e);
            e[2..4].copy_from_slice(&cs.to_be_bytes());
            p.extend_from_slice(&e);
            p
        };
        let mut p = echo(IN, FAR, 0x1234);
        packet(
            &mut p,
            lay(L4::Icmp),
            Manip::Src,
            u32::from_be_bytes(NAT),
            7,
        )
        .unwrap();
        assert_eq!(p, echo(NAT, FAR, 7));
    }

    /// RFC 5508: a time-exceeded from a router beyond the NAT, quoting the translated
    /// UDP probe, becomes one addressed to the inside host quoting the probe as it sent
    /// it: every checksum (outer IP, ICMP, quoted IP, quoted UDP) equal to a fresh build.
    #[test]
    fn icmp_error_translated_with_its_quote() {
        let router = [198, 51, 100, 254];
        let error = |dst, quoted: &[u8]| {
            let mut p = ip(1, router, dst, 8 + quoted.len());
            let mut e = vec![11, 0, 0, 0, 0, 0, 0, 0];
            e.extend_from_slice(quoted);
            let cs = reference::checksum(&e);
            e[2..4].copy_from_slice(&cs.to_be_bytes());
            p.extend_from_slice(&e);
            p
        };
        let sent = udp(IN, FAR, 33434, 33435, true);
        let translated = udp(NAT, FAR, 1500, 33435, true);
        let mut got = error(NAT, &translated);
        icmp_error(
            &mut got,
            20,
            Manip::Dst,
            u32::from_be_bytes(IN),
            u32::from_be_bytes(IN),
            33434,
        )
        .unwrap();
        assert_eq!(got, error(IN, &sent));
        // A quote cut after 8 bytes of TCP (no checksum in it): the ports still change.
        let sent = tcp(IN, FAR, 40000, 80);
        let translated = tcp(NAT, FAR, 1024, 80);
        let mut got = error(NAT, &translated[..28]);
        icmp_error(
            &mut got,
            20,
            Manip::Dst,
            u32::from_be_bytes(IN),
            u32::from_be_bytes(IN),
            40000,
        )
        .unwrap();
        assert_eq!(got, error(IN, &sent[..28]));
    }

    /// A packet cut short is reported, not a panic.
    #[test]
    fn short_packets_are_refused() {
        let mut p = tcp(IN, FAR, 1, 2);
        p.truncate(30);
        assert_eq!(packet(&mut p, lay(L4::Tcp), Manip::Src, 1, 2), Err(Short));
        let mut e = ip(1, IN, FAR, 8);
        e.extend_from_slice(&[11, 0, 0, 0, 0, 0, 0, 0, 0x45]);
        assert_eq!(icmp_error(&mut e, 20, Manip::Dst, 1, 2, 3), Err(Short));
    }
}
