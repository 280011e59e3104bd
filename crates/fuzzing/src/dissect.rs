//! The dissector over any frame.
//!
//! What `dissect::parse` records must equal a second walk of the headers through the wire
//! views (Ethernet, up to two tags, an IPv4 header whose length check passes and whose
//! version is 4) and, for IPv6, by hand over the bytes (the fixed header and the
//! extension header chain to the upper layer); its offsets stay inside the frame. The packet path (`frame`, in a pool
//! buffer at an offset taken from the input) records the same, again after the record is
//! cleared, and after the link header is pulled the offsets move by its length. Every
//! reader of the record (ports, flow key and hash, TCP flags, ICMP type, VLAN ids, the
//! filters' match key, the IP header length) answers what the bytes at the recorded
//! places say, and nothing where the documentation says there is nothing.

use std::cell::RefCell;
use std::net::Ipv6Addr;
use std::sync::OnceLock;

use netbatch_engine::{BufCache, Pkt, Pool, PoolConfig};
use netbatch_stack::dissect::{
    self, Dissected, FlowKey, FlowKey6, L3, L4, MatchKey, icmp_type, ports, tcp_flags, vids,
};
use netbatch_stack::meta::flag;
use netbatch_wire::ethernet::{EtherType, EthernetFrame};
use netbatch_wire::icmpv4::Icmpv4Packet;
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::tcp::TcpPacket;
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};
use netbatch_wire::vlan::{self, VlanHeader};

/// The second reading: the record `parse` should make of `d`, and the VLAN ids of its
/// tags.
fn walk(d: &[u8]) -> (Dissected, Vec<u16>) {
    let mut r = Dissected {
        l3_type: L3::Unparsed,
        l2_len: 0,
        l3: 0,
        l4: 0,
        l4_type: 0,
        flags: 0,
    };
    let Ok(eth) = EthernetFrame::new_checked(d) else {
        r.l3_type = L3::L2Truncated;
        return (r, Vec::new());
    };
    let mut et = eth.ethertype();
    let mut rest = eth.payload();
    let mut vids = Vec::new();
    while et == EtherType::VLAN || et == EtherType::QINQ {
        if vids.len() == 2 {
            r.l3_type = L3::VlanTooDeep;
            return (r, Vec::new());
        }
        let Ok(tag) = VlanHeader::new_checked(rest) else {
            r.l3_type = L3::VlanTruncated;
            return (r, Vec::new());
        };
        vids.push(tag.vid());
        et = tag.ethertype();
        rest = &rest[vlan::HEADER_LEN..];
    }
    let l2 = d.len() - rest.len();
    r.l2_len = l2 as u8;
    r.l3 = l2 as u16;
    r.flags = match vids.len() {
        0 => 0,
        1 => flag::VLAN,
        _ => flag::VLAN | flag::QINQ,
    };
    r.l3_type = match et {
        EtherType::IPV4 => L3::Ipv4,
        EtherType::IPV6 => L3::Ipv6,
        EtherType::ARP => L3::Arp,
        _ => L3::Other,
    };
    if r.l3_type == L3::Ipv4
        && let Ok(ip) = Ipv4Packet::new_checked(rest)
        && ip.version() == 4
    {
        r.l4 = (l2 + ip.header_len()) as u16;
        r.l4_type = ip.protocol().0;
    }
    if r.l3_type == L3::Ipv6 {
        walk6(rest, l2, &mut r);
    }
    (r, vids)
}

/// The second reading of an IPv6 packet `ip` (starting `l2` bytes into the frame), over
/// its bytes by hand: the fixed header (40 bytes, version 6), then the extension headers
/// of RFC 8200 4 within the payload length and the frame, at most 8 of them and 256
/// bytes: Hop-by-Hop (only first), Routing and Destination Options (8-byte units after
/// the first 8), Fragment (8 bytes; one with a non-zero offset ends the walk, its next
/// header being the upper layer), Authentication (RFC 4302 2.2: 4-byte units plus 2).
/// The mobility, HIP, shim6 and experimental values are refused: no upper layer. The
/// first Fragment header says whether the packet is a fragment (an atomic one, offset 0
/// and M clear, is not: RFC 6946) and whether it is a later one.
fn walk6(ip: &[u8], l2: usize, r: &mut Dissected) {
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return;
    }
    let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let bytes = &ip[..ip.len().min(40 + payload)];
    let mut next = ip[6];
    let mut at = 40;
    let mut headers = 0;
    let mut first_fragment: Option<(u16, bool)> = None;
    let found = |r: &mut Dissected, at: usize, next: u8, frag: Option<(u16, bool)>| {
        r.l4 = (l2 + at) as u16;
        r.l4_type = next;
        if let Some((offset, more)) = frag
            && (offset != 0 || more)
        {
            r.flags |= flag::FRAG6;
            if offset != 0 {
                r.flags |= flag::FRAG6_LATER;
            }
        }
    };
    loop {
        match next {
            0 if at != 40 => return,
            0 | 43 | 44 | 51 | 60 => {}
            135 | 139 | 140 | 253 | 254 => return,
            upper => return found(r, at, upper, first_fragment),
        }
        if headers == 8 {
            return;
        }
        let Some(&len_byte) = bytes.get(at + 1) else {
            return;
        };
        let len = match next {
            44 => 8,
            51 => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        if at + len - 40 > 256 || at + len > bytes.len() {
            return;
        }
        headers += 1;
        if next == 44 {
            let offset = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) >> 3;
            let more = bytes[at + 3] & 1 != 0;
            let first = *first_fragment.get_or_insert((offset, more));
            if offset != 0 {
                return found(r, at + 8, bytes[at], Some(first));
            }
        }
        next = bytes[at];
        at += len;
    }
}

thread_local! {
    /// A small pool of large buffers for the packet path, one per thread.
    static POOL: RefCell<Option<(Pool, BufCache)>> = const { RefCell::new(None) };
}

/// Largest frame the packet path is tried with (what fits after the largest headroom).
const ROOM: usize = 16384 - 512;

/// Runs `f` on a buffer of the thread's pool, given back afterwards.
fn with_buffer(f: impl FnOnce(&Pool, &mut Pkt)) {
    POOL.with(|cell| {
        let mut slot = cell.borrow_mut();
        let (pool, cache) = slot.get_or_insert_with(|| {
            let pool = Pool::new(PoolConfig {
                buffers: 4,
                buf_size: 16384,
                headroom: 128,
                cache_size: 2,
                huge_pages: false,
            })
            .expect("a small pool");
            let cache = pool.cache();
            (pool, cache)
        });
        let mut p = cache.alloc().expect("a free buffer");
        f(pool, &mut p);
        cache.free(p);
    });
}

/// The dissector's check (see the module documentation). The input is the frame; its
/// length picks where in the buffer the frame starts.
pub fn dissect(d: &[u8]) {
    let r = dissect::parse(d);
    let (want, tag_vids) = walk(d);
    assert_eq!(r, want, "{d:02x?}");
    assert!(usize::from(r.l2_len) <= d.len());
    if r.l4 != 0 {
        assert!(usize::from(r.l4) >= usize::from(r.l3) + 20);
        assert!(usize::from(r.l4) <= d.len(), "L4 past the frame");
        assert!(r.l4_kind().is_some());
    } else {
        assert_eq!(r.l4_kind(), None);
    }
    readers(&r, d, &tag_vids);

    if d.len() <= ROOM {
        let headroom = 128 + d.len() % 384;
        with_buffer(|pool, p| {
            let mut v = pool.get_mut(p);
            assert!(v.set_data(headroom, d));
            dissect::frame(&mut v);
            assert_eq!(
                Dissected::load(v.meta),
                r,
                "the packet path records as parse does"
            );
            let key = MatchKey::of(v.meta, v.data());
            assert_eq!(key, match_key(&r, d));
            let ihl = dissect::ihl(v.meta);
            assert_eq!(ihl, (r.l4 != 0).then(|| usize::from(r.l4 - r.l3)));
            // Dissected once: a second call keeps the record; cleared, the same again.
            dissect::frame(&mut v);
            assert_eq!(Dissected::load(v.meta), r);
            v.meta.l3_type = L3::Unparsed as u8;
            dissect::frame(&mut v);
            assert_eq!(Dissected::load(v.meta), r, "re-dissected");
            // L2 input pulls the link header: the record's offsets follow the data.
            if matches!(r.l3_type, L3::Ipv4 | L3::Ipv6 | L3::Arp | L3::Other) {
                let l2 = usize::from(r.l2_len);
                assert!(v.pull(l2));
                let moved = Dissected::load(v.meta);
                assert_eq!(moved.l3, 0);
                assert_eq!(moved.l4, if r.l4 == 0 { 0 } else { r.l4 - r.l3 });
                assert_eq!(MatchKey::of(v.meta, v.data()), match_key(&r, d));
            }
            let t = rss();
            let h = dissect::flow_hash(&mut v, t);
            assert_eq!(h, dissect::hash_frame(d, t));
            assert_eq!(v.meta.flags & flag::HASH_VALID != 0, h != 0);
        });
    }

    // The same bytes as a packet this host originates: an IPv4 header at the start.
    let ip = d;
    if ip.len() <= ROOM {
        with_buffer(|pool, p| {
            let mut v = pool.get_mut(p);
            assert!(v.set_data(128, ip));
            dissect::ip4_packet(&mut v);
            let got = Dissected::load(v.meta);
            assert_eq!((got.l3_type, got.l2_len, got.l3), (L3::Ipv4, 0, 0));
            let l4 = match Ipv4Packet::new_checked(ip) {
                Ok(h) if h.version() == 4 => Some((h.header_len() as u16, h.protocol().0)),
                _ => None,
            };
            assert_eq!((got.l4 != 0).then_some((got.l4, got.l4_type)), l4);
        });
    }
}

/// The hasher of the default RSS key, built once.
fn rss() -> &'static Toeplitz {
    static T: OnceLock<Toeplitz> = OnceLock::new();
    T.get_or_init(|| Toeplitz::new(&MS_KEY))
}

/// The fixed IPv4 header at the recorded L3 offset, if the record says IPv4 and the
/// frame holds 20 bytes there.
fn ip_at<'a>(r: &Dissected, d: &'a [u8]) -> Option<Ipv4Packet<&'a [u8]>> {
    if r.l3_type != L3::Ipv4 {
        return None;
    }
    let h = d.get(usize::from(r.l3)..)?;
    (h.len() >= 20).then(|| Ipv4Packet::new_unchecked(&h[..20]))
}

/// The ports of a packet recorded as `r`: located L4 of a protocol with ports, not a
/// later fragment, four bytes in the frame.
fn ports_of(r: &Dissected, d: &[u8]) -> Option<(u16, u16)> {
    let (proto, later_fragment) = match ip_at(r, d) {
        Some(ip) => (ip.protocol().0, ip.frag_offset() != 0),
        None if r.l3_type == L3::Ipv6 => (r.l4_type, r.flags & flag::FRAG6_LATER != 0),
        None => return None,
    };
    let has_ports = matches!(proto, 6 | 17 | 132 | 136);
    if r.l4 == 0 || !has_ports || later_fragment {
        return None;
    }
    let p = d.get(usize::from(r.l4)..usize::from(r.l4) + 4)?;
    Some((
        u16::from_be_bytes([p[0], p[1]]),
        u16::from_be_bytes([p[2], p[3]]),
    ))
}

/// The IPv6 flow of a packet recorded as `r`: its addresses read at the recorded L3
/// offset when its upper layer was located, the ports unless it is a fragment.
fn flow6_of(r: &Dissected, d: &[u8]) -> Option<FlowKey6> {
    if r.l3_type != L3::Ipv6 || r.l4 == 0 {
        return None;
    }
    let h = d.get(usize::from(r.l3)..usize::from(r.l3) + 40)?;
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&h[at..at + 16]).unwrap());
    Some(FlowKey6 {
        src: addr(8),
        dst: addr(24),
        proto: r.l4_type,
        ports: if r.flags & flag::FRAG6 != 0 {
            None
        } else {
            ports_of(r, d)
        },
    })
}

fn match_key(r: &Dissected, d: &[u8]) -> MatchKey {
    match ip_at(r, d) {
        Some(ip) => MatchKey {
            proto: ip.protocol().0,
            src: ip.src(),
            dst: ip.dst(),
            ports: ports_of(r, d),
        },
        None => MatchKey::NONE,
    }
}

/// Every reader of the record against the bytes it points at.
fn readers(r: &Dissected, d: &[u8], tag_vids: &[u16]) {
    let ip = ip_at(r, d);
    assert_eq!(ports(r, d), ports_of(r, d));
    let flow = FlowKey::of(r, d);
    match ip.filter(|ip| ip.version() == 4) {
        Some(ip) => {
            let want = FlowKey {
                src: ip.src(),
                dst: ip.dst(),
                proto: ip.protocol().0,
                ports: if ip.is_fragment() {
                    None
                } else {
                    ports_of(r, d)
                },
            };
            assert_eq!(flow, Some(want));
        }
        None => assert_eq!(flow, None),
    }
    let flow6 = FlowKey6::of(r, d);
    assert_eq!(flow6, flow6_of(r, d));
    let t = rss();
    let h = dissect::hash_frame(d, t);
    match (flow, flow6) {
        (Some(k), _) => {
            let (s, t2) = (k.src.octets(), k.dst.octets());
            assert_eq!(h, t.ipv4(s, t2, k.ports).max(1));
        }
        (None, Some(k)) => {
            let (s, t2) = (k.src.octets(), k.dst.octets());
            assert_eq!(h, t.ipv6(s, t2, k.ports).max(1));
        }
        (None, None) => assert_eq!(h, 0),
    }
    // TCP flags and ICMP types are read for IPv4 only (the classifier's keys).
    let l4 = d.get(usize::from(r.l4)..).unwrap_or(&[]);
    let v4 = ip.is_some();
    let later_fragment = ip.is_some_and(|ip| ip.frag_offset() != 0);
    let tcp = (v4 && r.l4_kind() == Some(L4::Tcp) && !later_fragment && l4.len() >= 20)
        .then(|| TcpPacket::new_unchecked(&l4[..20]).flags());
    assert_eq!(tcp_flags(r, d), tcp);
    let icmp =
        (v4 && r.l4_kind() == Some(L4::Icmp) && !later_fragment && l4.len() >= 8).then(|| {
            let m = Icmpv4Packet::new_unchecked(&l4[..8]);
            (m.msg_type(), m.code())
        });
    assert_eq!(icmp_type(r, d), icmp);
    let (outer, inner) = vids(r.flags, d);
    assert_eq!(
        (outer, inner),
        (tag_vids.first().copied(), tag_vids.get(1).copied())
    );
}
