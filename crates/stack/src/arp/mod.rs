//! ARP for Ethernet/IPv4 (RFC 826): the input stage and the request builder.

pub mod input;

use core::net::Ipv4Addr;

use crate::meta::flag;
use netbatch_engine::{BufCache, Pkt, Pool};
use netbatch_wire::ethernet::{EtherType, MacAddr};

use crate::iface::Iface;
use crate::l2::output::push_header;

/// Writes the 28-byte ARP body.
pub(crate) fn write_body(
    b: &mut [u8],
    oper: u16,
    sha: MacAddr,
    spa: Ipv4Addr,
    tha: MacAddr,
    tpa: Ipv4Addr,
) {
    b[0..2].copy_from_slice(&1u16.to_be_bytes());
    b[2..4].copy_from_slice(&EtherType::IPV4.0.to_be_bytes());
    b[4] = 6;
    b[5] = 4;
    b[6..8].copy_from_slice(&oper.to_be_bytes());
    b[8..14].copy_from_slice(&sha.0);
    b[14..18].copy_from_slice(&spa.octets());
    b[18..24].copy_from_slice(&tha.0);
    b[24..28].copy_from_slice(&tpa.octets());
}

/// Builds a complete ARP request frame asking for `target` on `iface` (index `if_index`),
/// broadcast or unicast to `to` (refreshing a stale entry). `None` if no buffer is free
/// or the interface has no address to ask from.
pub fn build_request(
    pool: &Pool,
    cache: &mut BufCache,
    iface: &Iface,
    if_index: u16,
    target: Ipv4Addr,
    to: Option<MacAddr>,
) -> Option<Pkt> {
    let spa = iface.source_for(target)?;
    let mut p = cache.alloc()?;
    let mut v = pool.get_mut(&mut p);
    // Pad to the 46-byte Ethernet minimum payload, as hardware would.
    let Some(b) = v.append(46) else {
        cache.free(p);
        return None;
    };
    b.fill(0);
    write_body(b, 1, iface.mac, spa, to.unwrap_or(MacAddr([0; 6])), target);
    if !push_header(
        &mut v,
        iface,
        to.unwrap_or(MacAddr::BROADCAST),
        EtherType::ARP,
    ) {
        cache.free(p);
        return None;
    }
    v.meta.out_if = if_index;
    v.meta.flags = flag::ORIGINATED;
    Some(p)
}
