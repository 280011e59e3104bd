//! Building Ethernet headers for transmission.

use netbatch_engine::PktMut;
use netbatch_wire::ethernet::{EtherType, MacAddr};

use crate::iface::{Iface, Tags};

/// Pushes an Ethernet header (with the interface's VLAN tags) in front of the packet.
/// Returns `false` if the headroom is too small (the packet is unchanged).
#[inline]
pub fn push_header(v: &mut PktMut<'_>, iface: &Iface, dst: MacAddr, ethertype: EtherType) -> bool {
    let n = 14 + iface.tags.len();
    let Some(h) = v.push(n) else { return false };
    h[0..6].copy_from_slice(&dst.0);
    h[6..12].copy_from_slice(&iface.mac.0);
    let mut at = 12;
    match iface.tags {
        Tags::None => {}
        Tags::Dot1q(vid) => {
            h[12..14].copy_from_slice(&EtherType::VLAN.0.to_be_bytes());
            h[14..16].copy_from_slice(&vid.to_be_bytes());
            at = 16;
        }
        Tags::QinQ(s, c) => {
            h[12..14].copy_from_slice(&EtherType::QINQ.0.to_be_bytes());
            h[14..16].copy_from_slice(&s.to_be_bytes());
            h[16..18].copy_from_slice(&EtherType::VLAN.0.to_be_bytes());
            h[18..20].copy_from_slice(&c.to_be_bytes());
            at = 20;
        }
    }
    h[at..at + 2].copy_from_slice(&ethertype.0.to_be_bytes());
    true
}
