//! ARP for Ethernet/IPv4 (RFC 826): the input stage and the request builder.

pub mod input;

use core::net::Ipv4Addr;

use crate::meta::flag;
use netbatch_engine::{BufCache, Pkt, Pool};
use netbatch_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use netbatch_wire::ethernet::{EtherType, MacAddr};

use crate::iface::Iface;
use crate::l2::output::push_header;

/// An ARP packet padded to the 46-byte minimum Ethernet payload (IEEE 802.3: 64-byte
/// frames with the FCS), as hardware pads it: what requests and replies carry, whatever
/// padding the packet they answer had.
pub(crate) const PADDED_LEN: usize = 46;

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
    let Some(b) = v.append(PADDED_LEN) else {
        cache.free(p);
        return None;
    };
    b.fill(0);
    let request = ArpRepr {
        operation: ArpOperation::Request,
        sha: iface.mac,
        spa,
        tha: to.unwrap_or(MacAddr([0; 6])),
        tpa: target,
    };
    request.emit(&mut ArpPacket::new_unchecked(b));
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
