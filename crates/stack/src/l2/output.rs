//! Building Ethernet headers for transmission: the one place VLAN tags are written.

use netbatch_engine::PktMut;
use netbatch_wire::ethernet::{self, EtherType, EthernetFrame, MacAddr};
use netbatch_wire::vlan::{self, VlanHeader};

use crate::iface::{Iface, Tags};

/// The longest link header [`write_header`] writes (two tags).
pub const MAX_HEADER_LEN: usize = ethernet::HEADER_LEN + 2 * vlan::HEADER_LEN;

/// Writes the link header of a frame from `iface` to `dst` carrying `ethertype` at the
/// start of `h` (Ethernet II, then the interface's tags: an 802.1ad S-tag before an
/// 802.1Q C-tag); returns its length. `h` must hold `14 + iface.tags.len()` bytes.
#[inline]
pub fn write_header(h: &mut [u8], iface: &Iface, dst: MacAddr, ethertype: EtherType) -> usize {
    // The tags, outermost first: (TPID, VID).
    let (tags, n) = match iface.tags {
        Tags::None => ([(EtherType::VLAN, 0); 2], 0),
        Tags::Dot1q(vid) => ([(EtherType::VLAN, vid); 2], 1),
        Tags::QinQ(s, c) => ([(EtherType::QINQ, s), (EtherType::VLAN, c)], 2),
    };
    // Each header's type field names what follows it: the next tag's TPID, then
    // `ethertype` after the last.
    let type_after = |i: usize| match tags.get(i) {
        Some(&(tpid, _)) if i < n => tpid,
        _ => ethertype,
    };
    let (eth, rest) = h.split_at_mut(ethernet::HEADER_LEN);
    let mut eth = EthernetFrame::new_unchecked(eth);
    eth.set_dst(dst);
    eth.set_src(iface.mac);
    eth.set_ethertype(type_after(0));
    let chunks = rest.chunks_exact_mut(vlan::HEADER_LEN).zip(tags);
    for (i, (t, (_, vid))) in chunks.take(n).enumerate() {
        let mut tag = VlanHeader::new_unchecked(t);
        tag.set_tci(vid);
        tag.set_ethertype(type_after(i + 1));
    }
    ethernet::HEADER_LEN + n * vlan::HEADER_LEN
}

/// Fills `dst` with a link header made earlier, the first `dst.len()` bytes of `src`
/// (untagged or tagged). The untagged header, by far the most common, is a fixed-size
/// copy of a few moves; a tagged one is copied out of line (inlined, the compiler merges
/// the two into a call to `memcpy` of a length known only at run time).
#[inline(always)]
pub fn copy_header(dst: &mut [u8], src: &[u8; MAX_HEADER_LEN]) {
    if let Ok(to) = <&mut [u8; ethernet::HEADER_LEN]>::try_from(&mut *dst) {
        *to = *src.first_chunk().unwrap_or(&[0; ethernet::HEADER_LEN]);
    } else {
        copy_tagged(dst, src);
    }
}

/// [`copy_header`]'s tagged case.
#[cold]
#[inline(never)]
fn copy_tagged(dst: &mut [u8], src: &[u8; MAX_HEADER_LEN]) {
    if let Some(from) = src.get(..dst.len()) {
        dst.copy_from_slice(from);
    }
}

/// Pushes an Ethernet header (with the interface's VLAN tags) in front of the packet.
/// Returns `false` if the headroom is too small (the packet is unchanged).
#[inline]
pub fn push_header(v: &mut PktMut<'_>, iface: &Iface, dst: MacAddr, ethertype: EtherType) -> bool {
    let n = ethernet::HEADER_LEN + iface.tags.len();
    let Some(h) = v.push(n) else { return false };
    write_header(h, iface, dst, ethertype);
    true
}
