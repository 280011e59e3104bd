//! IP datagrams cut into fragments by hand, as RFC 791 3.2 and RFC 8200 4.5 say, and
//! put back together the way a receiver does: the independent side of the
//! defragmentation tests (`tests/defrag.rs`, `tests/defrag_workers.rs`).

use netbatch_wire::checksum::reference::ones_complement_sum;

use crate::{ip, ip6};

/// A UDP datagram (IPv4 header, no options, DF clear, identification `id`) with a valid
/// checksum: `payload` from `s:sp` to `d:dp`.
pub fn udp4(s: &str, sp: u16, d: &str, dp: u16, id: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&ip(s).octets());
    p.extend_from_slice(&ip(d).octets());
    let c = !ones_complement_sum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let ulen = (8 + payload.len()) as u16;
    let mut u = Vec::new();
    u.extend_from_slice(&sp.to_be_bytes());
    u.extend_from_slice(&dp.to_be_bytes());
    u.extend_from_slice(&ulen.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let mut ph = p[12..20].to_vec();
    ph.extend_from_slice(&[0, 17]);
    ph.extend_from_slice(&ulen.to_be_bytes());
    ph.extend_from_slice(&u);
    let c = !ones_complement_sum(&ph);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    p.extend_from_slice(&u);
    p
}

/// IPv4 packet `p` (20-byte header) cut into fragments of `sizes` data bytes (each but
/// the last a multiple of 8), as RFC 791 3.2 says: same header, total length, MF on all
/// but the last, offset in 8-byte units, checksum.
pub fn fragment4(p: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let data = &p[20..];
    let mut off = 0;
    let mut out = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len();
        let n = if last { data.len() - off } else { n };
        let mut h = p[..20].to_vec();
        h[2..4].copy_from_slice(&((20 + n) as u16).to_be_bytes());
        let word = (off / 8) as u16 | if last { 0 } else { 0x2000 };
        h[6..8].copy_from_slice(&word.to_be_bytes());
        h[10] = 0;
        h[11] = 0;
        let c = !ones_complement_sum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(&data[off..off + n]);
        out.push(h);
        off += n;
    }
    out
}

/// An Ethernet frame of `ip` from `src` to `dst` (type by the IP version).
pub fn eth(src: [u8; 6], dst: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(if ip[0] >> 4 == 6 {
        &[0x86, 0xdd]
    } else {
        &[0x08, 0x00]
    });
    f.extend_from_slice(ip);
    f
}

/// What a receiver reassembles from IPv4 fragments `frags` (their IP packets): the
/// first one's header with the whole length and no MF, the data in offset order
/// (contiguous, checked); with every fragment's header checksum checked.
pub fn reassemble4(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut pieces: Vec<(usize, &[u8])> = frags
        .iter()
        .map(|f| {
            assert_eq!(ones_complement_sum(&f[..20]), 0xffff, "fragment checksum");
            let w = u16::from_be_bytes([f[6], f[7]]);
            (usize::from(w & 0x1fff) * 8, &f[20..])
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    let first = frags
        .iter()
        .find(|f| f[6] & 0x1f == 0 && f[7] == 0)
        .expect("a first fragment");
    let mut p = first[..20].to_vec();
    for (off, d) in pieces {
        assert_eq!(off, p.len() - 20, "contiguous");
        p.extend_from_slice(d);
    }
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[6] = 0;
    p[7] = 0;
    p
}

/// Whether the UDP checksum of IPv4 datagram `p` is right (a full recomputation).
pub fn udp4_sum_ok(p: &[u8]) -> bool {
    let mut ph = p[12..20].to_vec();
    ph.extend_from_slice(&[0, 17]);
    ph.extend_from_slice(&((p.len() - 20) as u16).to_be_bytes());
    ph.extend_from_slice(&p[20..]);
    ones_complement_sum(&ph) == 0xffff
}

/// A UDP datagram over IPv6 with a valid checksum: `payload` from `s:sp` to `d:dp`.
pub fn udp6(s: &str, sp: u16, d: &str, dp: u16, payload: &[u8]) -> Vec<u8> {
    let ulen = (8 + payload.len()) as u16;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&ip6(s).octets());
    p.extend_from_slice(&ip6(d).octets());
    let mut u = Vec::new();
    u.extend_from_slice(&sp.to_be_bytes());
    u.extend_from_slice(&dp.to_be_bytes());
    u.extend_from_slice(&ulen.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let mut ph = p[8..40].to_vec();
    ph.extend_from_slice(&[0, 0]);
    ph.extend_from_slice(&ulen.to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    ph.extend_from_slice(&u);
    let c = !ones_complement_sum(&ph);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    p.extend_from_slice(&u);
    p
}

/// IPv6 packet `p` (no extension headers) cut into fragments of `sizes` data bytes (RFC
/// 8200 4.5: the fixed header with next header 44, a Fragment header naming the
/// original next header, offset, M, identification `id`).
pub fn fragment6(p: &[u8], sizes: &[usize], id: u32) -> Vec<Vec<u8>> {
    let data = &p[40..];
    let mut off = 0;
    let mut out = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len();
        let n = if last { data.len() - off } else { n };
        let mut h = p[..40].to_vec();
        h[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        h[6] = 44;
        h.extend_from_slice(&[p[6], 0]);
        h.extend_from_slice(&((off as u16) | u16::from(!last)).to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        h.extend_from_slice(&data[off..off + n]);
        out.push(h);
        off += n;
    }
    out
}

/// What a receiver reassembles from IPv6 fragments: the fixed header (next header from
/// the Fragment header, the whole payload length) and the data in offset order.
pub fn reassemble6(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut pieces: Vec<(usize, &[u8])> = frags
        .iter()
        .map(|f| {
            assert_eq!(f[6], 44, "a Fragment header");
            let w = u16::from_be_bytes([f[42], f[43]]);
            (usize::from(w & 0xfff8), &f[48..])
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    let mut p = frags[0][..40].to_vec();
    p[6] = frags[0][40];
    for (off, d) in pieces {
        assert_eq!(off, p.len() - 40, "contiguous");
        p.extend_from_slice(d);
    }
    let plen = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p
}

/// Whether the UDP checksum of IPv6 datagram `p` is right.
pub fn udp6_sum_ok(p: &[u8]) -> bool {
    let mut ph = p[8..40].to_vec();
    ph.extend_from_slice(&[0, 0]);
    ph.extend_from_slice(&((p.len() - 40) as u16).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    ph.extend_from_slice(&p[40..]);
    ones_complement_sum(&ph) == 0xffff
}
