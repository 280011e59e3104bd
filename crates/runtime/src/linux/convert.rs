//! From rtnetlink messages to netbatch's routes and neighbours: what a kernel route,
//! neighbour or link means for the mirror, or why it is skipped.
//!
//! Invariants:
//! - Every message gives an answer: a route, neighbour change or link, or a [`Skip`]
//!   naming why not. Nothing panics on what the kernel (or anyone) sends.
//! - [`route_of_family`] is the only place a kernel route becomes a netbatch route
//!   (IPv4 or IPv6), written once over the family ([`KernelFamily`]).
//! - A kernel route is identified in its table by destination and metric (the TOS of
//!   IPv4 routes other than 0 is not followed); the best (lowest) metric is the one the
//!   kernel forwards by, and the only one netbatch may mirror.
//! - IPv6 routes the kernel keeps for itself are skipped as its IPv4 local and broadcast
//!   routes are: each interface's `fe80::/64` (link-local destinations are scoped to
//!   their interface by `ip6-route` itself, RFC 4291 2.5.6), and multicast (`ff00::/8`,
//!   in the local table like every local route, which is another table than the
//!   mirrored one).

use core::net::{Ipv4Addr, Ipv6Addr};

use netbatch_stack::prefix::{If6Addr, Ipv4Prefix, Ipv6Prefix};
use netbatch_stack::route::{Family, MultipathOf, NextHopOf, RouteKind, RouteOf, V4, V6};
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
    /// Neither IPv4 nor IPv6 (a bridge's neighbours, MPLS routes).
    OtherFamily = "other_family": "not an IPv4 or IPv6 route, neighbour or address",
    /// In another routing table than the mirrored one.
    OtherTable = "other_table": "route in another kernel table than the mirrored one",
    /// A route with a TOS.
    Tos = "tos": "route for one TOS only (netbatch routes by destination)",
    /// A cached clone (`RTM_F_CLONED`), not a route of the table.
    Cloned = "cloned": "cached route, not in the table",
    /// Local, broadcast, anycast or multicast.
    LocalOrBroadcast = "local_or_broadcast": "local, broadcast, anycast or multicast route (netbatch derives those from its own addresses)",
    /// A route or address inside fe80::/10.
    LinkLocal = "link_local": "IPv6 link-local route or address (fe80::/10: netbatch scopes link-local addresses per interface itself)",
    /// Throw, NAT, external resolve, or a type the kernel added later.
    UnsupportedType = "unsupported_type": "route type netbatch has no equivalent for (throw, nat, xresolve)",
    /// No known output interface (unknown to netbatch, or none).
    UnknownInterface = "unknown_interface": "output interface has no netbatch interface of its name",
    /// A gateway of another family (`via inet6`).
    ForeignGateway = "foreign_gateway": "next hop's gateway is of another family than the route",
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
    /// A policy rule with a selector or action netbatch has not.
    RuleUnsupported = "rule_unsupported": "policy rule with a selector or action netbatch has not (oif, uidrange, l3mdev, tun_id, realms, suppress_ifgroup)",
    /// A VRF device whose table or name netbatch cannot give a VRF.
    VrfTable = "vrf_table": "VRF device on a table Linux keeps (0, default, main, local) or named main: its members stay in main",
    /// Two VRF devices with netbatch members on one table.
    VrfShared = "vrf_shared": "VRF device on the table of another VRF device with netbatch members: neither is followed",
    /// A VRF followed whose table is not one of `[linux] tables`.
    VrfUnmirrored = "vrf_table_not_mirrored": "VRF followed whose kernel table is not in [linux] tables: its routes are not mirrored",
    /// A policy rule whose `iif` is no netbatch interface.
    RuleInterface = "rule_interface": "policy rule whose iif has no netbatch interface of its name",
}

/// What the mirror does for a kernel neighbour message (IPv4 or IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighChange {
    /// The kernel knows this address's MAC: make it a static neighbour.
    Set(u16, IpAddr, MacAddr),
    /// The kernel has no usable address any more (deleted or failed).
    Delete(u16, IpAddr),
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
    /// The index of its controller (`IFLA_MASTER`: the VRF or bridge it is enslaved
    /// to), if it has one.
    pub controller: Option<u32>,
    /// For a VRF device (`IFLA_INFO_KIND` `vrf`): its routing table
    /// (`IFLA_VRF_TABLE`, nested in `IFLA_INFO_DATA`). `None` for every other kind.
    pub vrf_table: Option<u32>,
}

/// A kernel route of the mirrored table: its key and what netbatch makes of it (a route,
/// or why it cannot be mirrored, in which case the prefix has no mirrored route while
/// this is the kernel's best).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRouteOf<F: Family> {
    /// Destination.
    pub prefix: F::Prefix,
    /// Metric (`RTA_PRIORITY`, 0 when absent).
    pub metric: u32,
    /// The netbatch route, or why there is none.
    pub route: Result<RouteOf<F>, Skip>,
    /// Why the route is mirrored only in part (a multipath route without some hops).
    pub partial: Option<Skip>,
    /// The live next hops the message gave (usable or not).
    pub hops: usize,
}

/// A kernel IPv4 route.
pub type KernelRoute = KernelRouteOf<V4>;
/// A kernel IPv6 route.
pub type KernelRoute6 = KernelRouteOf<V6>;

/// What reading a kernel route needs to know of its address family.
pub trait KernelFamily: Family {
    /// The family's `rtm_family`.
    const AF: AddressFamily;
    /// Whether the kernel keeps a multipath route of the family as sibling routes, one
    /// per next hop (IPv6, `fib6_add_rt2node`): `ip route append` of a next hop is then
    /// notified as the merged route (with its next hops, the appended one first, where a
    /// dump lists them in the order they were added: the mirror orders them by
    /// interface and gateway), and `ip route del PREFIX via A` of one next hop as that
    /// next hop alone. IPv4 keeps a multipath route whole.
    const SIBLINGS: bool;
    /// An address of the family, if `a` is one.
    fn route_addr(a: &RouteAddress) -> Option<Self::Addr>;
    /// An address of the family, if `a` is one (a rule's selector).
    fn ip_addr(a: &IpAddr) -> Option<Self::Addr>;
    /// The prefix `dst/len` (`dst` absent: the default route), if one.
    fn prefix(dst: Option<Self::Addr>, len: u8) -> Option<Self::Prefix>;
    /// Why a route for `p` is the kernel's own business, if it is (see the module
    /// documentation).
    fn kernel_owned(p: &Self::Prefix) -> Option<Skip>;
}

impl KernelFamily for V4 {
    const AF: AddressFamily = AddressFamily::Inet;
    const SIBLINGS: bool = false;
    fn route_addr(a: &RouteAddress) -> Option<Ipv4Addr> {
        match a {
            RouteAddress::Inet(a) => Some(*a),
            _ => None,
        }
    }
    fn ip_addr(a: &IpAddr) -> Option<Ipv4Addr> {
        match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        }
    }
    fn prefix(dst: Option<Ipv4Addr>, len: u8) -> Option<Ipv4Prefix> {
        Ipv4Prefix::new(dst.unwrap_or(Ipv4Addr::UNSPECIFIED), len).ok()
    }
    fn kernel_owned(_: &Ipv4Prefix) -> Option<Skip> {
        None
    }
}

impl KernelFamily for V6 {
    const AF: AddressFamily = AddressFamily::Inet6;
    const SIBLINGS: bool = true;
    fn route_addr(a: &RouteAddress) -> Option<Ipv6Addr> {
        match a {
            RouteAddress::Inet6(a) => Some(*a),
            _ => None,
        }
    }
    fn ip_addr(a: &IpAddr) -> Option<Ipv6Addr> {
        match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        }
    }
    fn prefix(dst: Option<Ipv6Addr>, len: u8) -> Option<Ipv6Prefix> {
        Ipv6Prefix::new(dst.unwrap_or(Ipv6Addr::UNSPECIFIED), len).ok()
    }
    fn kernel_owned(p: &Ipv6Prefix) -> Option<Skip> {
        let within = |net: u128, len: u8| {
            p.prefix_len() >= len && (p.bits() ^ net) >> (128 - u32::from(len)) == 0
        };
        if within(0xfe80 << 112, 10) {
            Some(Skip::LinkLocal)
        } else if within(0xff << 120, 8) {
            Some(Skip::LocalOrBroadcast)
        } else {
            None
        }
    }
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

/// What kernel IPv4 route `msg` is for netbatch ([`route_of_family`]).
pub fn route_of(
    msg: &RouteMessage,
    table: u32,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<KernelRoute, Skip> {
    route_of_family::<V4>(msg, table, iface)
}

/// What kernel IPv6 route `msg` is for netbatch ([`route_of_family`]).
pub fn route6_of(
    msg: &RouteMessage,
    table: u32,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<KernelRoute6, Skip> {
    route_of_family::<V6>(msg, table, iface)
}

/// What kernel route `msg` of family `F` is for netbatch: `Err` when it is no route of
/// table `table` the mirror follows, or one the kernel keeps for itself (ignored
/// whole); otherwise its key and the netbatch route (or why the kernel's route cannot
/// be one). `iface` maps a kernel interface index to the netbatch interface of the same
/// name.
pub fn route_of_family<F: KernelFamily>(
    msg: &RouteMessage,
    table: u32,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<KernelRouteOf<F>, Skip> {
    let h = &msg.header;
    if h.address_family != F::AF {
        return Err(Skip::OtherFamily);
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
            RouteAttribute::Destination(d) => dst = Some(F::route_addr(d).ok_or(Skip::Malformed)?),
            RouteAttribute::Gateway(g) => gateway = Some(g),
            RouteAttribute::Via(_) => gateway = Some(&FOREIGN),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Priority(m) => metric = *m,
            RouteAttribute::MultiPath(v) => hops = Some(v.as_slice()),
            RouteAttribute::NhId(_) => nh_object = true,
            _ => {}
        }
    }
    let prefix = F::prefix(dst, h.destination_prefix_length).ok_or(Skip::Malformed)?;
    if let Some(s) = F::kernel_owned(&prefix) {
        return Err(s);
    }
    let mut partial = None;
    let mut given = 0;
    let none = |kind| Ok(RouteOf::new(prefix, kind, None, None));
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
            let (mut usable, mut left_out) = (Vec::new(), None);
            for (i, g, weight) in single.into_iter().chain(multi) {
                given += 1;
                let gateway = match g.map(F::route_addr) {
                    None => None,
                    Some(Some(a)) => Some(a),
                    Some(None) => {
                        left_out = Some(Skip::ForeignGateway);
                        continue;
                    }
                };
                match iface(i) {
                    Some(out_if) => usable.push(NextHopOf {
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
                if F::SIBLINGS {
                    // The kernel lists siblings in the order they were added in a dump,
                    // but the one notified first: one order for both.
                    usable.sort_by_key(|h| (h.out_if, h.gateway));
                }
                if let [one] = usable.as_slice() {
                    Ok(RouteOf::new(
                        prefix,
                        RouteKind::Unicast,
                        Some(one.out_if),
                        one.gateway,
                    ))
                } else {
                    MultipathOf::new(usable)
                        .map(|m| RouteOf::multipath(prefix, m))
                        .map_err(|_| Skip::Malformed)
                }
            }
        }
        _ => Err(Skip::UnsupportedType),
    };
    Ok(KernelRouteOf {
        prefix,
        metric,
        route,
        partial,
        hops: given,
    })
}

/// Stands for a gateway of another family (`RTA_VIA`).
static FOREIGN: RouteAddress = RouteAddress::Other(Vec::new());

/// What kernel neighbour message `msg` (an `RTM_DELNEIGH` when `deleted`), of an IPv4
/// (ARP) or IPv6 (NDP) entry, means for netbatch's static neighbours. Usable states are
/// the kernel's `NUD_VALID` but `NUD_NOARP`: permanent, reachable, stale, delay and
/// probe (the kernel sends to the address in all of them); failed and incomplete
/// entries delete.
pub fn neighbour_of(
    msg: &NeighbourMessage,
    deleted: bool,
    iface: impl Fn(u32) -> Option<u16>,
) -> Result<NeighChange, Skip> {
    let h = &msg.header;
    if !matches!(h.family, AddressFamily::Inet | AddressFamily::Inet6) {
        return Err(Skip::OtherFamily);
    }
    if h.flags.contains(NeighbourFlags::Proxy) {
        return Err(Skip::NeighbourProxy);
    }
    let ifi = iface(h.ifindex).ok_or(Skip::UnknownInterface)?;
    let mut ip = None;
    let mut ll = None;
    for a in &msg.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a))
                if h.family == AddressFamily::Inet =>
            {
                ip = Some(IpAddr::V4(*a));
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(a))
                if h.family == AddressFamily::Inet6 =>
            {
                ip = Some(IpAddr::V6(*a));
            }
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

/// The interface a link message describes. The kernel puts `IFLA_MASTER` in every
/// `RTM_NEWLINK` of an enslaved interface (`rtnl_fill_ifinfo`), so its absence means
/// no controller. A VRF device's table is read only when `IFLA_INFO_KIND` says `vrf`
/// (another kind's `IFLA_INFO_DATA` attribute 1 means something else); a VRF device
/// whose message lacks the table (`IFLA_VRF_TABLE`) is not taken for one.
pub fn link_of(msg: &LinkMessage) -> LinkInfo {
    use netlink_packet_route::link::{InfoData, InfoKind, InfoVrf, LinkInfo as Nested};
    let nested = msg
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::LinkInfo(v) => Some(v.as_slice()),
            _ => None,
        })
        .unwrap_or_default();
    let is_vrf = nested
        .iter()
        .any(|i| matches!(i, Nested::Kind(InfoKind::Vrf)));
    let vrf_table = nested.iter().filter(|_| is_vrf).find_map(|i| match i {
        Nested::Data(InfoData::Vrf(v)) => v.iter().find_map(|x| match x {
            InfoVrf::TableId(t) => Some(*t),
            _ => None,
        }),
        _ => None,
    });
    LinkInfo {
        controller: msg.attributes.iter().find_map(|a| match a {
            LinkAttribute::Controller(m) if *m != 0 => Some(*m),
            _ => None,
        }),
        vrf_table,
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
        return Err(Skip::OtherFamily);
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

/// The interface index and IPv6 address of an address message (`IFA_ADDRESS`; a
/// point-to-point link's `IFA_LOCAL` when present). A link-local address is skipped
/// ([`Skip::LinkLocal`]): each netbatch interface has its own, from its MAC or
/// configured.
pub fn address6_of(msg: &AddressMessage) -> Result<(u32, If6Addr), Skip> {
    if msg.header.family != AddressFamily::Inet6 {
        return Err(Skip::OtherFamily);
    }
    let addr = |want_local: bool| {
        msg.attributes.iter().find_map(|a| match (a, want_local) {
            (AddressAttribute::Local(IpAddr::V6(v)), true)
            | (AddressAttribute::Address(IpAddr::V6(v)), false) => Some(*v),
            _ => None,
        })
    };
    let a = addr(true).or_else(|| addr(false)).ok_or(Skip::Malformed)?;
    if msg.header.prefix_len > 128 {
        return Err(Skip::Malformed);
    }
    if netbatch_wire::ipv6::is_link_local(a) {
        return Err(Skip::LinkLocal);
    }
    Ok((
        msg.header.index,
        If6Addr {
            addr: a,
            len: msg.header.prefix_len,
        },
    ))
}

#[cfg(test)]
mod tests;

/// `FRA_SPORT_MASK` (`linux/fib_rules.h`).
const FRA_SPORT_MASK: u16 = 28;
/// `FRA_DPORT_MASK`.
const FRA_DPORT_MASK: u16 = 29;

/// Whether a port mask attribute is all ones.
fn full_mask(n: &netlink_packet_core::DefaultNla) -> bool {
    use netlink_packet_core::Nla;
    let mut v = vec![0u8; n.value_len()];
    n.emit_value(&mut v);
    v == [0xff, 0xff]
}

/// The kernel's rule `msg` as a netbatch rule of family `F`: `Ok(None)` for one of
/// Linux's default rules (`0: lookup local`, `32766: lookup main`, `32767: lookup
/// default`: netbatch has its own), `Err` with why for one it cannot follow. `iface`
/// gives the netbatch interface of a kernel interface's name. The kernel leaves out an
/// attribute at its default (`fib_nl_fill_rule`): a mark's mask is all ones unless
/// given, no `suppress_prefixlength` is -1.
pub fn rule_of<F: KernelFamily>(
    msg: &netlink_packet_route::rule::RuleMessage,
    iface: impl Fn(&str) -> Option<u16>,
) -> Result<Option<netbatch_stack::route::rule::RuleOf<F>>, Skip> {
    use netbatch_stack::route::rule::{
        Action, Mark, PortRange, RuleOf, TABLE_DEFAULT, TABLE_LOCAL, TABLE_MAIN,
    };
    use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags};
    let h = &msg.header;
    if h.family != F::AF {
        return Err(Skip::OtherFamily);
    }
    let mut r = RuleOf::<F>::new(0, Action::Nop);
    r.not = h.flags.contains(RuleFlags::Invert);
    r.tos = (h.tos != 0).then_some(h.tos);
    let mut table = u32::from(h.table);
    let (mut mark, mut mask, mut goto) = (None, None, None);
    let (mut src, mut dst) = (None, None);
    for a in &msg.attributes {
        match a {
            RuleAttribute::Priority(p) => r.pref = *p,
            RuleAttribute::Source(ip) => src = Some(F::ip_addr(ip).ok_or(Skip::Malformed)?),
            RuleAttribute::Destination(ip) => dst = Some(F::ip_addr(ip).ok_or(Skip::Malformed)?),
            RuleAttribute::Iifname(n) => r.iif = Some(iface(n).ok_or(Skip::RuleInterface)?),
            RuleAttribute::FwMark(m) => mark = Some(*m),
            RuleAttribute::FwMask(m) => mask = Some(*m),
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Goto(t) => goto = Some(*t),
            RuleAttribute::SuppressPrefixLen(n) if *n != u32::MAX => {
                r.suppress_prefixlength = Some(u8::try_from(*n).map_err(|_| Skip::Malformed)?);
            }
            RuleAttribute::SuppressPrefixLen(_) | RuleAttribute::Protocol(_) => {}
            RuleAttribute::IpProtocol(p) => r.ipproto = Some(u8::from(*p)).filter(|&p| p != 0),
            RuleAttribute::SourcePortRange(p) => {
                r.sport = Some(PortRange::new(p.start, p.end).map_err(|_| Skip::Malformed)?);
            }
            RuleAttribute::DestinationPortRange(p) => {
                r.dport = Some(PortRange::new(p.start, p.end).map_err(|_| Skip::Malformed)?);
            }
            RuleAttribute::L3MDev(false) => {}
            RuleAttribute::SuppressIfGroup(g) if *g == u32::MAX => {}
            // A port range's mask (`FRA_SPORT_MASK`, `FRA_DPORT_MASK`, newer kernels)
            // of all ones is the range alone.
            RuleAttribute::Other(n)
                if matches!(
                    netlink_packet_core::Nla::kind(n),
                    FRA_SPORT_MASK | FRA_DPORT_MASK
                ) && full_mask(n) => {}
            _ => return Err(Skip::RuleUnsupported),
        }
    }
    if src.is_some() || h.src_len != 0 {
        r.from = Some(F::prefix(src, h.src_len).ok_or(Skip::Malformed)?);
    }
    if dst.is_some() || h.dst_len != 0 {
        r.to = Some(F::prefix(dst, h.dst_len).ok_or(Skip::Malformed)?);
    }
    if mark.is_some() || mask.is_some() {
        r.fwmark = Some(Mark::linux(mark.unwrap_or(0), mask));
    }
    r.action = match h.action {
        RuleAction::ToTable => Action::Lookup(table),
        RuleAction::Goto => Action::Goto(goto.ok_or(Skip::Malformed)?),
        RuleAction::Nop => Action::Nop,
        RuleAction::Blackhole => Action::Blackhole,
        RuleAction::Unreachable => Action::Unreachable,
        RuleAction::Prohibit => Action::Prohibit,
        _ => return Err(Skip::RuleUnsupported),
    };
    let default = [
        (0, TABLE_LOCAL),
        (32766, TABLE_MAIN),
        (32767, TABLE_DEFAULT),
    ]
    .iter()
    .any(|&(p, t)| r == RuleOf::new(p, Action::Lookup(t)));
    Ok((!default).then_some(r))
}
