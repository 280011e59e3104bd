//! Neighbour discovery for IPv6 over Ethernet (RFC 4861), as `crate::arp` is for IPv4:
//! `nd-input` (solicitations answered, advertisements applied), `ip6-neighbour`
//! ([`resolve`]: the output MTU, the neighbour's MAC, the link header) and the builder of
//! the solicitations both send.
//!
//! The neighbour cache is [`crate::neigh::NeighTable6`]: the ARP table's states and
//! bounded queues, with the updates of RFC 4861 7.2.3 and 7.2.5
//! ([`crate::neigh::NeighTableOf::learn_stale`], [`crate::neigh::NeighTableOf::advert`]).
//! Unreachability detection (7.3) is the table's: a stale entry in use is probed by
//! unicast solicitations after a delay, and removed when they stay unanswered;
//! resolution gives up after `max_probes` multicast solicitations, and what waited is
//! answered with Address Unreachable.

pub mod input;
pub mod resolve;

use core::net::Ipv6Addr;

use netbatch_engine::{BufCache, Pkt, Pool};
use netbatch_wire::ethernet::{EtherType, MacAddr};
use netbatch_wire::ipv6::{self as wire6, HEADER_LEN, Ipv6Packet, Ipv6Repr, Protocol};
use netbatch_wire::ndp::{self, NdpRepr, NeighborPacket};

use crate::iface::Iface;
use crate::l2::output::push_header;
use crate::meta::flag;

/// Builds a complete neighbour solicitation frame asking for `target` on `iface` (index
/// `if_index`): multicast to the target's solicited-node group, or unicast to `to`
/// (probing a stale entry, RFC 4861 7.3.3), from our address toward the target with our
/// MAC in a source link-layer address option (RFC 4861 7.2.2). `None` if no buffer is
/// free.
pub fn build_solicit(
    pool: &Pool,
    cache: &mut BufCache,
    iface: &Iface,
    if_index: u16,
    target: Ipv6Addr,
    to: Option<MacAddr>,
) -> Option<Pkt> {
    let src = iface.source6_for(target);
    let (dst, mac) = match to {
        Some(m) => (target, m),
        None => {
            let g = wire6::solicited_node(target);
            (g, wire6::multicast_mac(g)?)
        }
    };
    let msg = NdpRepr::NeighborSolicit {
        target,
        source_lladdr: Some(iface.mac),
    };
    let len = msg.buffer_len();
    let mut p = cache.alloc()?;
    let mut v = pool.get_mut(&mut p);
    let Some(b) = v.append(HEADER_LEN + len) else {
        cache.free(p);
        return None;
    };
    let (h, m) = b.split_at_mut(HEADER_LEN);
    Ipv6Repr {
        src,
        dst,
        next_header: Protocol::ICMPV6,
        payload_len: len,
        hop_limit: ndp::HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(h));
    msg.emit(&mut NeighborPacket::new_unchecked(m), src, dst);
    if !push_header(&mut v, iface, mac, EtherType::IPV6) {
        cache.free(p);
        return None;
    }
    v.meta.out_if = if_index;
    v.meta.flags = flag::ORIGINATED;
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::PoolConfig;

    /// A solicitation as RFC 4861 4.3 and 7.2.2 lay it out, checked byte by byte against
    /// hand-made expectations and by etherparse (an independent parser).
    #[test]
    fn solicitations_are_rfc4861s() {
        let pool = Pool::new(PoolConfig {
            buffers: 4,
            cache_size: 2,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let mut f = Iface::new(
            "eth0",
            0,
            Default::default(),
            MacAddr([2, 0, 0, 0, 0, 1]),
            1500,
            vec![],
        );
        f.addrs6.push("2001:db8::1/64".parse().unwrap());
        let target: Ipv6Addr = "2001:db8::abcd:ef12".parse().unwrap();
        let p = build_solicit(&pool, &mut c, &f, 0, target, None).expect("buffer");
        let d = pool.get(&p).data().to_vec();
        // Ethernet: 33:33:ff + the low 24 bits of the target, our MAC, 0x86dd.
        assert_eq!(
            &d[..14],
            &[
                0x33, 0x33, 0xff, 0xcd, 0xef, 0x12, 2, 0, 0, 0, 0, 1, 0x86, 0xdd
            ]
        );
        let ip = etherparse::Ipv6HeaderSlice::from_slice(&d[14..]).expect("IPv6");
        assert_eq!(ip.hop_limit(), 255);
        assert_eq!(ip.source_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            ip.destination_addr(),
            "ff02::1:ffcd:ef12".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(ip.payload_length(), 32);
        let icmp = etherparse::Icmpv6Slice::from_slice(&d[54..]).expect("ICMPv6");
        assert_eq!((icmp.type_u8(), icmp.code_u8()), (135, 0));
        assert!(icmp.is_checksum_valid(ip.source(), ip.destination()));
        // Reserved word, the target, then the source link-layer address option.
        assert_eq!(&d[58..62], &[0; 4]);
        assert_eq!(&d[62..78], &target.octets());
        assert_eq!(&d[78..86], &[1, 1, 2, 0, 0, 0, 0, 1]);
        c.free(p);
        // A probe of a stale entry: unicast to its MAC and address.
        let m = MacAddr([2, 0, 0, 0, 0, 9]);
        let p = build_solicit(&pool, &mut c, &f, 0, target, Some(m)).expect("buffer");
        let d = pool.get(&p).data().to_vec();
        assert_eq!(&d[..6], &m.0);
        assert_eq!(&d[14 + 24..14 + 40], &target.octets());
        c.free(p);
    }
}
