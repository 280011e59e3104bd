//! From rtnetlink messages to netbatch's routes and neighbours: what a kernel route,
//! neighbour or link means for the mirror, or why it is skipped.
//!
//! Invariants:
//! - Every message gives an answer: a route, neighbour change or link, or a [`Skip`]
//!   naming why not. Nothing panics on what the kernel (or anyone) sends.
//! - [`route_of`] is the only place a kernel route becomes a [`Route`].
//! - A kernel route is identified in its table by destination and metric (the TOS of
//!   IPv4 routes other than 0 is not followed); the best (lowest) metric is the one the
//!   kernel forwards by, and the only one netbatch may mirror.

use core::net::Ipv4Addr;

use netbatch_stack::prefix::Ipv4Prefix;
use netbatch_stack::route::{Multipath, NextHop, Route, RouteKind};
use netbatch_wire::ethernet::MacAddr;
use std::net::IpAddr;

use netbatch_stack::prefix::IfAddr;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHop, RouteNextHopFlags,
    RouteType,
};

macro_rules! skips {
    ($($(#[$m:meta])* $v:ident = $name:literal: $what:literal,)*) => {
        /// Why a message was not mirrored.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Skip {
            $($(#[$m])* $v,)*
        }

        impl Skip {
            /// Every reason, in order.
            pub const ALL: &'static [Skip] = &[$(Skip::$v,)*];

            /// Its name in counters.
            pub fn name(self) -> &'static str {
                match self {
                    $(Skip::$v => $name,)*
                }
            }

            /// What it means.
            pub fn description(self) -> &'static str {
                match self {
                    $(Skip::$v => $what,)*
                }
            }
        }
    };
}

skips! {
    /// Not IPv4.
    NotIpv4 = "not_ipv4": "not an IPv4 route or neighbour",
    /// In another routing table than the mirrored one.
    OtherTable = "other_table": "route in another kernel table than the mirrored one",
    /// A route with a TOS.
    Tos = "tos": "route for one TOS only (netbatch routes by destination)",
    /// A cached clone (`RTM_F_CLONED`), not a route of the table.
    Cloned = "cloned": "cached route, not in the table",
    /// Local, broadcast, anycast or multicast.
    LocalOrBroadcast = "local_or_broadcast": "local, broadcast, anycast or multicast route (netbatch derives those from its own addresses)",
    /// Throw, NAT, external resolve, or a type the kernel added later.
    UnsupportedType = "unsupported_type": "route type netbatch has no equivalent for (throw, nat, xresolve)",
    /// No known output interface (unknown to netbatch, or none).
    UnknownInterface = "unknown_interface": "output interface has no netbatch interface of its name",
    /// A gateway of another family (`via inet6`).
    ForeignGateway = "foreign_gateway": "next hop is not an IPv4 address",
    /// A route through a nexthop object whose hops the message does not carry.
    NexthopObject = "nexthop_object": "route uses a nexthop object without its hops (set net.ipv4.nexthop_compat_mode=1)",
    /// A multipath route whose next hops are all dead (their links down).
    DeadNextHops = "dead_next_hops": "every next hop of the route is dead (its link is down)",
    /// A multipath route mirrored without some of its next hops.
    MultipathPartial = "multipath_partial": "multipath route mirrored without its next hops on interfaces netbatch lacks or via other families",
    /// `ip route append` of a second route with the same key: the kernel keeps using the
    /// first.
    AppendedAlias = "appended_alias": "appended route behind one with the same destination and metric (unused by the kernel)",
    /// A neighbour in a state without a usable link-layer address.
    NeighbourState = "neighbour_state": "neighbour without a usable link-layer address (incomplete, noarp, none)",
    /// A proxy ARP entry.
    NeighbourProxy = "neighbour_proxy": "proxy ARP entry",
    /// A link-layer address that is not a MAC.
    BadLladdr = "bad_lladdr": "link-layer address is not 6 bytes",
    /// Required fields missing or inconsistent.
    Malformed = "malformed": "message lacks a field it needs, or a field is inconsistent",
}

/// What the mirror does for a kernel neighbour message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighChange {
    /// The kernel knows this address's MAC: make it a static neighbour.
    Set(u16, Ipv4Addr, MacAddr),
    /// The kernel has no usable address any more (deleted or failed).
    Delete(u16, Ipv4Addr),
}

/// A kernel interface as a link message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// The kernel's index.
    pub index: u32,
    /// Its name (absent in some notifications).
    pub name: Option<String>,
    /// Administratively up.
    pub up: bool,
    /// Its MTU (absent in some notifications).
    pub mtu: Option<u32>,
}

/// A kernel route of the mirrored table: its key and what netbatch makes of it (a route,
/// or why it cannot be mirrored, in which case the prefix has no mirrored route while
/// this is the kernel's best).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination.
    pub prefix: Ipv4Prefix,
    /// Metric (`RTA_PRIORITY`, 0 when absent).
    pub metric: u32,
    /// The netbatch route, or why there is none.
    pub route: Result<Route, Skip>,
    /// Why the route is mirrored only in part (a multipath route without some hops).
    pub partial: Option<Skip>,
}

/// The routing table a route message is in (`RTA_TABLE` when present: tables above 255
/// have only that).
pub fn table_of(msg: &RouteMessage) -> u32 {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(msg.header.table))
}

/// What kernel route `msg` is for netbatch: `Err` when it is no route of table `table`
/// the mirror follows (ignored whole); otherwise its key and the netbatch route (or why
/// the kernel's route cannot be one). `iface` maps a kernel interface index to the
/// netbatch interface of the same name.
pub fn route_of(
    msg: &RouteMessage,
    table: u32,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<KernelRoute, Skip> {
    let h = &msg.header;
    if h.address_family != AddressFamily::Inet {
        return Err(Skip::NotIpv4);
    }
    if table_of(msg) != table {
        return Err(Skip::OtherTable);
    }
    if h.flags.contains(RouteFlags::Cloned) {
        return Err(Skip::Cloned);
    }
    if h.tos != 0 {
        return Err(Skip::Tos);
    }
    let (mut dst, mut gateway, mut oif, mut metric, mut hops, mut nh_object) =
        (None, None, None, 0, None, false);
    for a in &msg.attributes {
        match a {
            RouteAttribute::Destination(RouteAddress::Inet(d)) => dst = Some(*d),
            RouteAttribute::Destination(_) => return Err(Skip::Malformed),
            RouteAttribute::Gateway(g) => gateway = Some(g),
            RouteAttribute::Via(_) => gateway = Some(&FOREIGN),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Priority(m) => metric = *m,
            RouteAttribute::MultiPath(v) => hops = Some(v.as_slice()),
            RouteAttribute::NhId(_) => nh_object = true,
            _ => {}
        }
    }
    let dst = dst.unwrap_or(Ipv4Addr::UNSPECIFIED);
    let prefix = Ipv4Prefix::new(dst, h.destination_prefix_length).map_err(|_| Skip::Malformed)?;
    let mut partial = None;
    let none = |kind| Ok(Route::new(prefix, kind, None, None));
    let route = match h.kind {
        RouteType::BlackHole => none(RouteKind::Blackhole),
        RouteType::Unreachable => none(RouteKind::Unreachable),
        RouteType::Prohibit => none(RouteKind::Prohibit),
        RouteType::Local | RouteType::Broadcast | RouteType::Anycast | RouteType::Multicast => {
            Err(Skip::LocalOrBroadcast)
        }
        RouteType::Unicast => {
            // One next hop (RTA_OIF, RTA_GATEWAY) or several (RTA_MULTIPATH: the kernel
            // keeps weight - 1, and does not use a dead one).
            let single = oif.map(|i| (i, gateway, 1u16));
            let all = hops.unwrap_or_default();
            let multi = all.iter().filter_map(|nh: &RouteNextHop| {
                if nh.flags.contains(RouteNextHopFlags::Dead) {
                    return None;
                }
                let g = nh.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Gateway(g) => Some(g),
                    RouteAttribute::Via(_) => Some(&FOREIGN),
                    _ => None,
                });
                Some((nh.interface_index, g, u16::from(nh.hops) + 1))
            });
            let (mut usable, mut left_out, mut given) = (Vec::new(), None, 0);
            for (i, g, weight) in single.into_iter().chain(multi) {
                given += 1;
                let gateway = match g {
                    None => None,
                    Some(RouteAddress::Inet(a)) => Some(*a),
                    Some(_) => {
                        left_out = Some(Skip::ForeignGateway);
                        continue;
                    }
                };
                match iface(i) {
                    Some(out_if) => usable.push(NextHop {
                        gateway,
                        out_if,
                        weight,
                    }),
                    None => left_out = left_out.or(Some(Skip::UnknownInterface)),
                }
            }
            if given == 0 {
                Err(if !all.is_empty() {
                    Skip::DeadNextHops
                } else if nh_object {
                    Skip::NexthopObject
                } else {
                    Skip::Malformed
                })
            } else if usable.is_empty() {
                Err(left_out.unwrap_or(Skip::Malformed))
            } else {
                if left_out.is_some() {
                    partial = Some(Skip::MultipathPartial);
                }
                if let [one] = usable.as_slice() {
                    Ok(Route::new(
                        prefix,
                        RouteKind::Unicast,
                        Some(one.out_if),
                        one.gateway,
                    ))
                } else {
                    Multipath::new(usable)
                        .map(|m| Route::multipath(prefix, m))
                        .map_err(|_| Skip::Malformed)
                }
            }
        }
        _ => Err(Skip::UnsupportedType),
    };
    Ok(KernelRoute {
        prefix,
        metric,
        route,
        partial,
    })
}

/// Stands for a gateway of another family (`RTA_VIA`).
static FOREIGN: RouteAddress = RouteAddress::Other(Vec::new());

/// What kernel neighbour message `msg` (an `RTM_DELNEIGH` when `deleted`) means for
/// netbatch's static neighbours. Usable states are the kernel's `NUD_VALID` but
/// `NUD_NOARP`: permanent, reachable, stale, delay and probe (the kernel sends to the
/// address in all of them); failed and incomplete entries delete.
pub fn neighbour_of(
    msg: &NeighbourMessage,
    deleted: bool,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<NeighChange, Skip> {
    let h = &msg.header;
    if h.family != AddressFamily::Inet {
        return Err(Skip::NotIpv4);
    }
    if h.flags.contains(NeighbourFlags::Proxy) {
        return Err(Skip::NeighbourProxy);
    }
    let ifi = iface(h.ifindex).ok_or(Skip::UnknownInterface)?;
    let mut ip = None;
    let mut ll = None;
    for a in &msg.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => ip = Some(*a),
            NeighbourAttribute::Destination(_) => return Err(Skip::Malformed),
            NeighbourAttribute::LinkLayerAddress(l) => ll = Some(l.as_slice()),
            _ => {}
        }
    }
    let ip = ip.ok_or(Skip::Malformed)?;
    if deleted {
        return Ok(NeighChange::Delete(ifi, ip));
    }
    match h.state {
        NeighbourState::Permanent
        | NeighbourState::Reachable
        | NeighbourState::Stale
        | NeighbourState::Delay
        | NeighbourState::Probe => {
            let ll = ll.ok_or(Skip::NeighbourState)?;
            let mac: [u8; 6] = ll.try_into().map_err(|_| Skip::BadLladdr)?;
            Ok(NeighChange::Set(ifi, ip, MacAddr(mac)))
        }
        NeighbourState::Failed | NeighbourState::Incomplete => Ok(NeighChange::Delete(ifi, ip)),
        _ => Err(Skip::NeighbourState),
    }
}

/// The interface a link message describes.
pub fn link_of(msg: &LinkMessage) -> LinkInfo {
    LinkInfo {
        index: msg.header.index,
        name: msg.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        }),
        up: msg.header.flags.contains(LinkFlags::Up),
        mtu: msg.attributes.iter().find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        }),
    }
}

/// The interface index and IPv4 address of an address message (`IFA_LOCAL`, the
/// address itself, or else `IFA_ADDRESS`, which is the same on a broadcast link).
pub fn address_of(msg: &AddressMessage) -> Result<(u32, IfAddr), Skip> {
    if msg.header.family != AddressFamily::Inet {
        return Err(Skip::NotIpv4);
    }
    let addr = |want_local: bool| {
        msg.attributes.iter().find_map(|a| match (a, want_local) {
            (AddressAttribute::Local(IpAddr::V4(v)), true)
            | (AddressAttribute::Address(IpAddr::V4(v)), false) => Some(*v),
            _ => None,
        })
    };
    let a = addr(true).or_else(|| addr(false)).ok_or(Skip::Malformed)?;
    if msg.header.prefix_len > 32 {
        return Err(Skip::Malformed);
    }
    Ok((
        msg.header.index,
        IfAddr {
            addr: a,
            len: msg.header.prefix_len,
        },
    ))
}

#[cfg(test)]
mod tests;
