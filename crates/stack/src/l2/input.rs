//! `eth-input`: Ethernet and VLAN demux.
//!
//! Per packet: frame at least 14 bytes (`L2Truncated`); source MAC unicast (IEEE 802:
//! a group address is never a valid source, `L2SourceMulticast`); destination ours,
//! broadcast or multicast (`L2OtherHost` otherwise: a router does not pick up frames for
//! other stations); up to two tags mapped to a configured (sub-)interface
//! (`L2VlanUnknown`, `L2VlanTruncated`, `L2VlanTooDeep`); ethertype IPv4, ARP or IPv6
//! (`L2UnknownEtherType`). The port's info is looked up once per run of packets from
//! the same port (a list from one poll is one port).

use crate::meta::flag;
use netbatch_engine::{Cx, Out, PktList, Stage};
use netbatch_wire::ethernet::{EtherType, HEADER_LEN, MacAddr};

use crate::host::Host;
use crate::iface::Tags;

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
        IP6_UNSUPPORTED = "ip6_unsupported": "IPv6 is not enabled",
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

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl Stage<Host> for EthInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        // Hoisted per run of one port.
        let mut cur_port = u16::MAX;
        let mut our_mac = MacAddr([0; 6]);
        let mut native = None;
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let port = v.meta.in_port;
            if port != cur_port {
                let Some(info) = host.ports.get(usize::from(port)) else {
                    out.drop(p, netbatch_engine::reason::PORT_DOWN);
                    continue;
                };
                cur_port = port;
                our_mac = info.mac;
                native = info.native_if;
            }
            let d = v.data();
            if d.len() < HEADER_LEN {
                out.drop(p, reason::TRUNCATED);
                continue;
            }
            if d[6] & 1 != 0 {
                out.drop(p, reason::SOURCE_MULTICAST);
                continue;
            }
            let class = if d[..6] == our_mac.0 {
                flag::L2_HOST
            } else if d[0] & 1 == 0 {
                out.drop(p, reason::OTHER_HOST);
                continue;
            } else if d[..6] == [0xff; 6] {
                flag::L2_BROADCAST
            } else {
                flag::L2_MULTICAST
            };
            let mut et = be16(d, 12);
            let mut off = HEADER_LEN;
            let iface = if et == EtherType::VLAN.0 || et == EtherType::QINQ.0 {
                // Tagged: map the tag stack to a sub-interface.
                let mut vids = [0u16; 2];
                let mut n = 0;
                let mut bad = None;
                while et == EtherType::VLAN.0 || et == EtherType::QINQ.0 {
                    if n == 2 {
                        bad = Some(reason::VLAN_TOO_DEEP);
                        break;
                    }
                    if d.len() < off + 4 {
                        bad = Some(reason::VLAN_TRUNCATED);
                        break;
                    }
                    vids[n] = be16(d, off) & 0x0fff;
                    et = be16(d, off + 2);
                    off += 4;
                    n += 1;
                }
                if let Some(r) = bad {
                    out.drop(p, r);
                    continue;
                }
                let tags = match (n, vids) {
                    // Priority-tagged (VID 0) frames belong to the untagged interface.
                    (1, [0, _]) => Tags::None,
                    (1, [v0, _]) => Tags::Dot1q(v0),
                    (_, [s, c]) => Tags::QinQ(s, c),
                };
                v.meta.flags |= flag::VLAN;
                host.ports[usize::from(port)].iface_for(tags)
            } else {
                native
            };
            let Some(iface) = iface else {
                out.drop(p, reason::VLAN_UNKNOWN);
                continue;
            };
            v.meta.in_if = iface;
            v.meta.flags |= class;
            v.pull(off);
            v.meta.l3 = v.meta.data;
            match et {
                0x0800 => out.push(IP4, p),
                0x0806 => out.push(ARP, p),
                0x86dd => out.push(IP6, p),
                _ => out.drop(p, reason::UNKNOWN_ETHERTYPE),
            }
        }
    }
}
