//! Hand-made fragment sets through the store and the family readers, against the bytes
//! of the datagram they were cut from (built here, independently of the code under
//! test): in order, reversed, duplicated, overlapping, missing the last, timed out, too
//! many, the store full, inconsistent ends; the split gives each fragment the head's
//! rewritten header.

use netbatch_engine::{BufCache, Pkt, Pool, PoolConfig};
use netbatch_wire::checksum;

use super::stage::Family;
use super::*;
use crate::ip4::defrag::V4;
use crate::ip6::defrag::V6;

fn pool() -> Pool {
    Pool::new(PoolConfig {
        buffers: 256,
        huge_pages: false,
        ..PoolConfig::default()
    })
    .expect("pool")
}

/// The UDP datagram the IPv4 fragments are cut from: 192.0.2.1:5000 → 198.51.100.2:53,
/// 8 + 40 bytes, IP identification 0x1234, TTL 64.
fn datagram4() -> Vec<u8> {
    let payload: Vec<u8> = (0..40u8).collect();
    let mut udp = vec![0x13, 0x88, 0, 53, 0, 48, 0, 0];
    udp.extend_from_slice(&payload);
    let mut d = ip4_header(20 + udp.len(), 0, false);
    d.extend_from_slice(&udp);
    d
}

/// An IPv4 header for a packet of `total` bytes at fragment offset `off` (bytes) with MF
/// `more`.
fn ip4_header(total: usize, off: usize, more: bool) -> Vec<u8> {
    let word = (off / 8) as u16 | if more { 0x2000 } else { 0 };
    let mut h = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        (word >> 8) as u8,
        word as u8,
        64,
        17,
        0,
        0,
        192,
        0,
        2,
        1,
        198,
        51,
        100,
        2,
    ];
    let c = checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// The fragment of `datagram4()`'s data `[off, off + len)`.
fn frag4(off: usize, len: usize) -> Vec<u8> {
    let d = datagram4();
    let data = &d[20..];
    let more = off + len < data.len();
    let mut f = ip4_header(20 + len, off, more);
    f.extend_from_slice(&data[off..off + len]);
    f
}

/// A buffer holding IP packet `bytes`, dissected as after input.
fn buffer(pool: &Pool, cache: &mut BufCache, bytes: &[u8]) -> Pkt {
    let mut p = cache.alloc().expect("buffer");
    let mut v = pool.get_mut(&mut p);
    assert!(v.set_data(128, bytes));
    if bytes[0] >> 4 == 6 {
        crate::dissect::ip6_packet(&mut v);
    } else {
        crate::dissect::ip4_packet(&mut v);
    }
    p
}

/// What the store does with the fragments `frags` (IPv4 or IPv6 by their bytes), each
/// read by its family's reader, at time `now`.
struct Run {
    pool: Pool,
    cache: BufCache,
    store: Store,
    scratch: Vec<Pkt>,
    freed: usize,
}

#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Held,
    Complete(Vec<u8>, u16),
    Refused(&'static str),
    Discarded(&'static str, usize),
    Unread(&'static str),
}

impl Run {
    fn new(cfg: Config) -> Self {
        let pool = pool();
        let cache = pool.cache();
        Self {
            pool,
            cache,
            store: Store::new(cfg, 30),
            scratch: Vec::new(),
            freed: 0,
        }
    }

    fn add(&mut self, bytes: &[u8], now: u64) -> Fate {
        let p = buffer(&self.pool, &mut self.cache, bytes);
        let v = self.pool.get(&p);
        let six = bytes[0] >> 4 == 6;
        let read = if six {
            V6::read(v.meta, v.data())
        } else {
            V4::read(v.meta, v.data())
        };
        let (pc, hl) = match read {
            Ok(Some(x)) => x,
            Ok(None) => panic!("not a fragment"),
            Err(r) => {
                self.cache.free(p);
                return Fate::Unread(r.name());
            }
        };
        match self.store.add(p, pc, now, &mut self.scratch) {
            Added::Held => Fate::Held,
            Added::Complete { end } => {
                let first = self.pool.get(&self.scratch[0]);
                let head_hl = if six {
                    V6::read(first.meta, first.data()).unwrap().unwrap().1
                } else {
                    hl.min(20)
                };
                let head = chain(&self.pool, &mut self.scratch, head_hl + end).unwrap();
                let segs = self.pool.get(&head).meta.segs;
                let bytes = gather(&self.pool, &head, six);
                self.cache.free(head);
                Fate::Complete(bytes, segs)
            }
            Added::Refused(p, r) => {
                self.cache.free(p);
                self.freed += 1;
                Fate::Refused(r.name())
            }
            Added::Discarded(p, r) => {
                let n = self.scratch.len();
                self.cache.free(p);
                self.cache.free_all(&mut self.scratch);
                self.freed += 1 + n;
                Fate::Discarded(r.name(), n)
            }
        }
    }
}

/// The datagram a defrag chain stands for, rebuilt as a receiver reassembles it: the
/// head's header (IPv4: MF cleared, total length and checksum of the whole; IPv6: the
/// Fragment header taken out), then every fragment's data in chain order.
fn gather(pool: &Pool, head: &Pkt, six: bool) -> Vec<u8> {
    let v = pool.get(head);
    assert!(v.meta.flags & flag::DEFRAG_CHAIN != 0);
    let d = v.data();
    let (mut out, mut next);
    if six {
        // The head reads as a fragment to the family's reader alone: the stage passes a
        // chain on whole.
        assert!(matches!(V6::read(v.meta, d), Ok(None)));
        let at = crate::ip6::defrag::read6(v.meta, d).unwrap().unwrap().1 as usize;
        // Fixed header with the Fragment header's next header in place of 44.
        out = d[..40].to_vec();
        out[6] = d[40];
        out.extend_from_slice(&d[at..]);
        next = v.meta.chain.as_ref();
        while let Some(q) = next {
            let w = pool.get(q);
            let at = V6::read(w.meta, w.data()).unwrap().unwrap().1 as usize;
            out.extend_from_slice(&w.data()[at..]);
            next = w.meta.chain.as_ref();
        }
        let plen = (out.len() - 40) as u16;
        out[4..6].copy_from_slice(&plen.to_be_bytes());
    } else {
        assert!(
            matches!(V4::read(v.meta, d), Ok(None)),
            "a chain passes whole"
        );
        out = d.to_vec();
        next = v.meta.chain.as_ref();
        while let Some(q) = next {
            let w = pool.get(q);
            out.extend_from_slice(&w.data()[20..]);
            next = w.meta.chain.as_ref();
        }
        let total = out.len() as u16;
        out[2..4].copy_from_slice(&total.to_be_bytes());
        out[6] = 0;
        out[7] = 0;
        out[10] = 0;
        out[11] = 0;
        let c = checksum::checksum(&out[..20]);
        out[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            v.meta.total_len as usize,
            out.len(),
            "the head's total_len is the datagram's"
        );
    }
    out
}

const S: u64 = 1_000_000_000;

#[test]
fn in_order_reversed_and_duplicated_give_the_datagram() {
    let whole = datagram4();
    let sets: [&[(usize, usize)]; 3] = [
        &[(0, 16), (16, 16), (32, 16)],
        &[(32, 16), (16, 16), (0, 16)],
        &[(16, 24), (0, 16), (40, 8)],
    ];
    for set in sets {
        let mut r = Run::new(Config::default());
        let n = set.len();
        for (i, &(o, l)) in set.iter().enumerate() {
            let f = r.add(&frag4(o, l), 0);
            if i + 1 < n {
                assert_eq!(f, Fate::Held, "{set:?} at {i}");
                assert_eq!(r.store.held(), i + 1);
            } else {
                assert_eq!(f, Fate::Complete(whole.clone(), n as u16), "{set:?}");
            }
        }
        assert_eq!((r.store.held(), r.store.datagrams()), (0, 0));
    }
    // A duplicate is dropped alone; the datagram completes.
    let mut r = Run::new(Config::default());
    assert_eq!(r.add(&frag4(16, 16), 0), Fate::Held);
    assert_eq!(r.add(&frag4(16, 16), 0), Fate::Refused("defrag_duplicate"));
    assert_eq!(r.add(&frag4(0, 16), 0), Fate::Held);
    assert_eq!(r.add(&frag4(0, 16), 0), Fate::Refused("defrag_duplicate"));
    assert_eq!(r.add(&frag4(32, 16), 0), Fate::Complete(whole, 3));
    assert_eq!(r.store.stats.reassembled, 1);
}

#[test]
fn overlaps_inconsistent_ends_and_too_many_drop_the_datagram() {
    // Overlapping the first fragment (the RFC 1858 attack on the TCP header, in UDP).
    let mut r = Run::new(Config::default());
    assert_eq!(r.add(&frag4(0, 16), 0), Fate::Held);
    assert_eq!(r.add(&frag4(32, 16), 0), Fate::Held);
    assert_eq!(
        r.add(&frag4(8, 16), 0),
        Fate::Discarded("defrag_overlap", 2)
    );
    assert_eq!((r.store.held(), r.store.datagrams()), (0, 0));
    // Overlapping from before: a later fragment reaching into a held one.
    assert_eq!(r.add(&frag4(16, 16), 0), Fate::Held);
    assert_eq!(
        r.add(&frag4(8, 16), 0),
        Fate::Discarded("defrag_overlap", 1)
    );
    // Two last fragments ending apart.
    assert_eq!(r.add(&frag4(32, 16), 0), Fate::Held);
    let mut short_last = ip4_header(20 + 8, 32, false);
    short_last.extend_from_slice(&[0; 8]);
    assert_eq!(
        r.add(&short_last, 0),
        Fate::Discarded("defrag_inconsistent", 1)
    );
    // Data past the known end.
    assert_eq!(r.add(&short_last, 0), Fate::Held);
    let mut past = ip4_header(20 + 8, 40, true);
    past.extend_from_slice(&[0; 8]);
    assert_eq!(
        r.add(&past, 0),
        Fate::Discarded("defrag_inconsistent", 1),
        "data at 40..48 with MF set, past the end at 40"
    );
    // At most two fragments per datagram.
    let mut r = Run::new(Config {
        max_fragments: 2,
        ..Config::default()
    });
    assert_eq!(r.add(&frag4(0, 16), 0), Fate::Held);
    assert_eq!(r.add(&frag4(16, 16), 0), Fate::Held);
    assert_eq!(
        r.add(&frag4(32, 16), 0),
        Fate::Discarded("defrag_too_many_fragments", 2)
    );
    assert_eq!(r.store.stats.discarded, 1);
}

#[test]
fn missing_last_times_out_and_the_store_is_bounded() {
    let mut r = Run::new(Config {
        max_buffers: 3,
        max_datagrams: 2,
        ..Config::default()
    });
    assert_eq!(r.add(&frag4(0, 16), 0), Fate::Held);
    assert_eq!(r.add(&frag4(16, 16), S), Fate::Held);
    let mut out = Vec::new();
    assert_eq!(r.store.expire_one(29 * S, &mut out), None, "29 s: not yet");
    // Another datagram (identification 0x1235): a third buffer, then the bound.
    let other = |off: usize, len: usize| {
        let mut f = frag4(off, len);
        f[5] = 0x35;
        f[10] = 0;
        f[11] = 0;
        let c = checksum::checksum(&f[..20]);
        f[10..12].copy_from_slice(&c.to_be_bytes());
        f
    };
    assert_eq!(r.add(&other(16, 16), 2 * S), Fate::Held);
    assert_eq!(r.store.held(), 3);
    assert_eq!(
        r.add(&other(0, 16), 2 * S),
        Fate::Refused("defrag_store_full")
    );
    // A third datagram: no slot.
    let mut third = frag4(0, 16);
    third[5] = 0x99;
    assert_eq!(r.add(&third, 2 * S), Fate::Refused("defrag_store_full"));
    // 30 s after its first fragment, the first datagram goes, its first fragment first.
    assert_eq!(r.store.expire_one(30 * S, &mut out), Some(true));
    assert_eq!(out.len(), 2);
    let offs: Vec<u16> = out
        .iter()
        .map(|p| {
            let d = r.pool.get(p).data().to_vec();
            u16::from_be_bytes([d[6], d[7]]) & 0x1fff
        })
        .collect();
    assert_eq!(offs, [0, 2], "in offset order (8-byte units)");
    r.cache.free_all(&mut out);
    assert_eq!(r.store.expire_one(30 * S, &mut out), None);
    // The other one, without its first fragment, at 32 s.
    assert_eq!(r.store.expire_one(32 * S, &mut out), Some(false));
    r.cache.free_all(&mut out);
    assert_eq!((r.store.held(), r.store.datagrams()), (0, 0));
    assert_eq!(r.store.stats.timed_out, 2);
}

#[test]
fn readers_refuse_what_cannot_be_reassembled() {
    let mut r = Run::new(Config::default());
    // Not a multiple of 8 and not the last.
    let mut odd = ip4_header(20 + 12, 0, true);
    odd.extend_from_slice(&[0; 12]);
    assert_eq!(r.add(&odd, 0), Fate::Unread("defrag_bad_length"));
    // A first fragment of UDP with 0 data bytes... and one of 8 is enough for UDP.
    let mut tiny = ip4_header(20, 0, true);
    tiny[10] = 0;
    assert_eq!(r.add(&tiny, 0), Fate::Unread("defrag_bad_length"));
    // TCP needs 20 bytes in the first fragment.
    let mut tcp = ip4_header(20 + 8, 0, true);
    tcp[9] = 6;
    tcp[10] = 0;
    tcp[11] = 0;
    let c = checksum::checksum(&tcp[..20]);
    tcp[10..12].copy_from_slice(&c.to_be_bytes());
    tcp.extend_from_slice(&[0; 8]);
    assert_eq!(r.add(&tcp, 0), Fate::Unread("defrag_tiny_first"));
    // Past 65,535 bytes: offset 65,528 (8191 units) with 16 bytes.
    let mut big = ip4_header(20 + 16, 65_528, false);
    big.extend_from_slice(&[0; 16]);
    assert_eq!(r.add(&big, 0), Fate::Unread("defrag_oversize"));
}

/// The IPv6 datagram the IPv6 fragments are cut from: UDP 2001:db8::1:5000 →
/// 2001:db8:1::2:53, 8 + 40 bytes.
fn datagram6() -> Vec<u8> {
    let mut d = ip6_fixed(48, 17);
    d.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 48, 0, 0]);
    d.extend((0..40u8).map(|b| b ^ 0x5a));
    d
}

fn ip6_fixed(plen: usize, next: u8) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0, (plen >> 8) as u8, plen as u8, next, 64];
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h
}

/// The IPv6 fragment of `datagram6()`'s data `[off, off + len)`, identification 7.
fn frag6(off: usize, len: usize) -> Vec<u8> {
    let d = datagram6();
    let data = &d[40..];
    let more = off + len < data.len();
    let mut f = ip6_fixed(8 + len, 44);
    let word = (off as u16) | u16::from(more);
    f.extend_from_slice(&[17, 0, (word >> 8) as u8, word as u8, 0, 0, 0, 7]);
    f.extend_from_slice(&data[off..off + len]);
    f
}

#[test]
fn ipv6_fragments_in_any_order_give_the_datagram() {
    let whole = datagram6();
    for set in [[(0, 24), (24, 16), (40, 8)], [(40, 8), (0, 24), (24, 16)]] {
        let mut r = Run::new(Config::default());
        assert_eq!(r.add(&frag6(set[0].0, set[0].1), 0), Fate::Held);
        assert_eq!(r.add(&frag6(set[1].0, set[1].1), 0), Fate::Held);
        assert_eq!(
            r.add(&frag6(set[2].0, set[2].1), 0),
            Fate::Complete(whole.clone(), 3)
        );
    }
    // RFC 5722: an overlap drops the datagram.
    let mut r = Run::new(Config::default());
    assert_eq!(r.add(&frag6(0, 24), 0), Fate::Held);
    assert_eq!(
        r.add(&frag6(16, 16), 0),
        Fate::Discarded("defrag_overlap", 1)
    );
    // RFC 7112: a first fragment must hold the UDP header.
    let mut cut = ip6_fixed(8 + 8, 44);
    cut.extend_from_slice(&[60, 0, 0, 1, 0, 0, 0, 9]);
    // A Destination Options header of 8 bytes naming UDP, and no UDP header.
    cut.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(r.add(&cut, 0), Fate::Unread("defrag_tiny_first"));
}

#[test]
fn split_gives_every_fragment_the_heads_header() {
    let mut r = Run::new(Config::default());
    for (o, l) in [(0, 16), (16, 16)] {
        assert_eq!(r.add(&frag4(o, l), 0), Fate::Held);
    }
    let p = buffer(&r.pool, &mut r.cache, &frag4(32, 16));
    let (pc, _) = {
        let v = r.pool.get(&p);
        V4::read(v.meta, v.data()).unwrap().unwrap()
    };
    assert!(matches!(
        r.store.add(p, pc, 0, &mut r.scratch),
        Added::Complete { end: 48 }
    ));
    let mut head = chain(&r.pool, &mut r.scratch, 68).unwrap();
    // What NAT and forwarding do to the head: a new source (203.0.113.1), TTL 63.
    {
        let mut v = r.pool.get_mut(&mut head);
        let d = v.data_mut();
        d[8] = 63;
        d[12..16].copy_from_slice(&[203, 0, 113, 1]);
        d[10] = 0;
        d[11] = 0;
        let c = checksum::checksum(&d[..20]);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        v.meta.out_if = 1;
    }
    let mut out = Vec::new();
    split(&r.pool, head, &mut out);
    assert_eq!(out.len(), 3);
    for (i, p) in out.iter().enumerate() {
        let v = r.pool.get(p);
        let d = v.data();
        let expect = frag4(i * 16, 16);
        assert_eq!(d[8], 63, "TTL of fragment {i}");
        assert_eq!(&d[12..16], &[203, 0, 113, 1], "source of fragment {i}");
        assert_eq!(checksum::checksum(&d[..20]), 0, "header checksum of {i}");
        assert_eq!(&d[2..8], &expect[2..8], "own length, id and offset of {i}");
        assert_eq!(&d[20..], &expect[20..], "own data of {i}");
        assert_eq!((v.meta.segs, v.meta.out_if), (1, 1));
        assert_eq!(
            v.meta.total_len,
            u32::from(v.meta.len),
            "a plain packet's total"
        );
        assert!(v.meta.chain.is_none() && v.meta.flags & flag::DEFRAG_CHAIN == 0);
    }
    r.cache.free_all(&mut out);
}
