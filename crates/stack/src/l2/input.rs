//! `eth-input`: Ethernet and VLAN demux.
//!
//! Reads what the dissector found (dissecting the frame first if no earlier stage did)
//! and checks, per packet: frame at least 14 bytes (`l2_truncated`); source MAC unicast
//! (IEEE 802: a group address is never a valid source, `l2_source_multicast`);
//! destination ours, broadcast or multicast (`l2_other_host` otherwise: a router does not
//! pick up frames for other stations); at most two tags, whole (`l2_vlan_too_deep`,
//! `l2_vlan_truncated`), mapped to a configured (sub-)interface (`l2_vlan_unknown`);
//! ethertype IPv4, ARP or IPv6 (`l2_unknown_ethertype`). The port's info is looked up
//! once per run of packets from the same port (a list from one poll is one port). The
//! link header is pulled: later stages see the packet start at its L3 header.

use netbatch_engine::{Cx, Meta, Next, Out, PktList, Reason, Stage, Verdict};
use netbatch_wire::ethernet::{EthernetFrame, HEADER_LEN, MacAddr};

use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::{self, L3};
use crate::host::Host;
use crate::iface::Tags;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `eth-input` drops a frame.
    pub mod reason {
        TRUNCATED = "l2_truncated": "frame shorter than an Ethernet header",
        OTHER_HOST = "l2_other_host": "destination MAC is another host's",
        UNKNOWN_ETHERTYPE = "l2_unknown_ethertype": "no handler for the ethertype",
        VLAN_TRUNCATED = "l2_vlan_truncated": "VLAN tag cut short",
        VLAN_TOO_DEEP = "l2_vlan_too_deep": "more than two VLAN tags",
        VLAN_UNKNOWN = "l2_vlan_unknown": "VLAN not configured on the port",
        SOURCE_MULTICAST = "l2_source_multicast": "source MAC is multicast or broadcast",
    }
}

netbatch_engine::arcs! {
    /// Arc to ARP input.
    pub ARP = "arp";
    /// Arc to IPv4 input.
    pub IP4 = "ip4";
    /// Arc to IPv6 input.
    pub IP6 = "ip6";
}

/// The L2 input stage.
#[derive(Debug, Default)]
pub struct EthInput;

/// The arc of each `L3` kind the dissector records (`Meta::l3_type`), if it has one.
#[expect(
    clippy::indexing_slicing,
    reason = "evaluated when compiling: an index out of the table fails the build"
)]
const NEXT: [Option<Next>; 5] = {
    let mut t = [None; 5];
    t[L3::Ipv4 as usize] = Some(IP4);
    t[L3::Ipv6 as usize] = Some(IP6);
    t[L3::Arp as usize] = Some(ARP);
    t
};

/// The drop reason of a link header the dissector could not get past.
#[cold]
fn link_error(kind: u8) -> Reason {
    if kind == L3::VlanTooDeep as u8 {
        reason::VLAN_TOO_DEEP
    } else {
        reason::VLAN_TRUNCATED
    }
}

/// The six bytes of a MAC address as one integer, to compare addresses in one go.
#[inline(always)]
fn mac_bits(m: &[u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(m);
    u64::from_ne_bytes(b)
}

/// The tag stack of a frame the dissector found tags on.
#[inline]
fn tags_of(m: &Meta, d: &[u8]) -> Tags {
    match dissect::vids(m.flags, d) {
        (Some(s), Some(c)) => Tags::QinQ(s, c),
        // Priority-tagged (VID 0) frames belong to the untagged interface.
        (Some(0) | None, _) => Tags::None,
        (Some(v), None) => Tags::Dot1q(v),
    }
}

/// `eth-input`, where received frames enter (after GRO and the classifier, when present).
pub const DECL: Decl = Decl {
    arcs: &[
        ("arp", To::Node(node::ARP_INPUT)),
        ("ip4", To::Node(node::IP4_INPUT)),
        ("ip6", To::Node(node::IP6_INPUT)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Link,
    reads: Fields::of(&[Field::InPort, Field::L3]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::InIf, Field::L2Class]),
    ..Decl::new(node::ETH_INPUT, |_| Box::new(EthInput))
};

impl Stage<Host> for EthInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        // Hoisted per run of one port.
        let mut cur_port = u16::MAX;
        // Our MAC as `mac_bits`; no frame's destination before the first port is known.
        let mut our_mac = u64::MAX;
        let mut native = None;
        let pool = cx.pool;
        out.sort(
            list,
            #[inline(always)]
            move |p| {
                let mut v = pool.get_mut(p);
                let port = v.meta.in_port;
                if port != cur_port {
                    let Some(info) = host.ports.get(usize::from(port)) else {
                        return Verdict::Drop(netbatch_engine::reason::PORT_DOWN);
                    };
                    cur_port = port;
                    our_mac = mac_bits(&info.mac.0);
                    native = info.native_if;
                }
                let (m, d) = v.split();
                dissect::frame_in(m, d);
                let kind = m.l3_type;
                let Some(h) = d.first_chunk::<HEADER_LEN>() else {
                    return Verdict::Drop(reason::TRUNCATED);
                };
                let eth = EthernetFrame::new_unchecked(h);
                if eth.src().is_multicast() {
                    return Verdict::Drop(reason::SOURCE_MULTICAST);
                }
                let dst = eth.dst();
                let class = if mac_bits(&dst.0) == our_mac {
                    flag::L2_HOST
                } else if dst.is_unicast() {
                    return Verdict::Drop(reason::OTHER_HOST);
                } else if dst == MacAddr::BROADCAST {
                    flag::L2_BROADCAST
                } else {
                    flag::L2_MULTICAST
                };
                // A broken tag stack is reported before the interface it does not select.
                if kind >= L3::VlanTruncated as u8 {
                    return Verdict::Drop(link_error(kind));
                }
                let iface = if m.flags & flag::VLAN != 0 {
                    // `port` is in `ports`: it was looked up when `cur_port` was set.
                    host.ports
                        .get(usize::from(port))
                        .and_then(|info| info.iface_for(tags_of(m, d)))
                } else {
                    native
                };
                let Some(iface) = iface else {
                    return Verdict::Drop(reason::VLAN_UNKNOWN);
                };
                m.in_if = iface;
                m.flags |= class;
                let l2 = usize::from(m.l2_len);
                v.pull(l2);
                match NEXT.get(usize::from(kind)).copied().flatten() {
                    Some(arc) => Verdict::To(arc),
                    None => Verdict::Drop(reason::UNKNOWN_ETHERTYPE),
                }
            },
        );
    }
}
