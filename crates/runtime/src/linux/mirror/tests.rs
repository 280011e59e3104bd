//! The mirror's state against a route table standing for netbatch's: kernel
//! notifications and dumps in, the changes that make the table agree out. Expectations
//! are the kernel's own rules (lowest metric wins, a deleted route uncovers the next,
//! an appended alias is unused) and the mirror's ownership rule.

use super::*;
use core::net::Ipv4Addr;
use netbatch_stack::route::{Route, Routes};

use crate::control::RouteChange;
use netbatch_stack::route::RouteKind;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::NeighbourState;
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType,
};

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("address")
}

fn pfx(s: &str) -> Ipv4Prefix {
    s.parse().expect("prefix")
}

fn state() -> State {
    state_with(false)
}

/// The state over kernel links r1 (2), r2 (3) and mgmt0 (4), netbatch interfaces r1 (0)
/// and r2 (1); `pairs`: interfaces' addresses and MTU followed.
fn state_with(pairs: bool) -> State {
    let mut s = State::new(
        254,
        Box::new(|n: &str| match n {
            "r1" => Some(0),
            "r2" => Some(1),
            _ => None,
        }),
        pairs,
    );
    for (i, n) in [(2, "r1"), (3, "r2"), (4, "mgmt0")] {
        s.notified(&link(i, n, true), 0);
    }
    s
}

/// `ip addr add|del ADDR/LEN dev (ifindex)`, as the kernel notifies it (IPv4 with
/// `IFA_LOCAL` and `IFA_ADDRESS`, or IPv6 with `IFA_ADDRESS` only).
fn address(add: bool, index: u32, a: &str, len: u8) -> RouteNetlinkMessage {
    use netlink_packet_route::address::{AddressAttribute, AddressMessage};
    let ip: IpAddr = a.parse().expect("address");
    let mut m = AddressMessage::default();
    m.header.index = index;
    m.header.prefix_len = len;
    m.header.family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    if ip.is_ipv4() {
        m.attributes.push(AddressAttribute::Local(ip));
    }
    m.attributes.push(AddressAttribute::Address(ip));
    if add {
        RouteNetlinkMessage::NewAddress(m)
    } else {
        RouteNetlinkMessage::DelAddress(m)
    }
}

/// A link notification carrying an MTU.
fn link_mtu(index: u32, name: &str, mtu: u32) -> RouteNetlinkMessage {
    let RouteNetlinkMessage::NewLink(mut m) = link(index, name, true) else {
        unreachable!("a link");
    };
    m.attributes.push(LinkAttribute::Mtu(mtu));
    RouteNetlinkMessage::NewLink(m)
}

/// With host interface pairs, the IPv4 and IPv6 addresses and MTU of a kernel interface
/// named as a netbatch interface are handed over whole when they change (as `ip addr`
/// and `ip link set mtu` change them); a repeated message, another interface's or a
/// link-local IPv6 address (the kernel's own) changes nothing; an IPv4 deletion asks
/// for a resync (the kernel drops routes through the subnet silently), after which
/// every interface is handed over again from the dump; an IPv6 deletion (whose prefix
/// route goes with a notification) hands the interface over. Without pairs, addresses
/// are not followed at all.
#[test]
fn pairs_follow_addresses_and_mtu() {
    let ifa = |a: &str, len| IfAddr { addr: ip(a), len };
    let ifa6 = |a: &str, len| If6Addr {
        addr: a.parse().expect("address"),
        len,
    };
    let change = |iface, addrs: Vec<IfAddr>, addrs6: Vec<If6Addr>, mtu| IfaceChange {
        iface,
        addrs,
        addrs6,
        mtu,
    };
    let mut s = state_with(true);
    // The links themselves mark their interfaces: handed over with no address yet.
    assert_eq!(
        s.iface_changes(),
        vec![
            change(0, vec![], vec![], None),
            change(1, vec![], vec![], None)
        ]
    );
    s.notified(&address(true, 2, "192.0.2.1", 24), 0);
    s.notified(&address(true, 2, "192.0.2.1", 24), 0);
    s.notified(&address(true, 4, "203.0.113.9", 24), 0);
    s.notified(&address(true, 2, "fe80::1", 64), 0);
    assert_eq!(
        s.iface_changes(),
        vec![change(0, vec![ifa("192.0.2.1", 24)], vec![], None)]
    );
    assert!(s.iface_changes().is_empty(), "nothing more changed");
    s.notified(&address(true, 2, "2001:db8::1", 64), 0);
    s.notified(&address(true, 2, "2001:db8::1", 64), 0);
    s.notified(&address(true, 2, "198.51.100.1", 25), 0);
    s.notified(&link_mtu(2, "r1", 1400), 0);
    assert_eq!(
        s.iface_changes(),
        vec![change(
            0,
            vec![ifa("192.0.2.1", 24), ifa("198.51.100.1", 25)],
            vec![ifa6("2001:db8::1", 64)],
            Some(1400)
        )]
    );
    s.notified(&address(false, 2, "2001:db8::1", 64), 0);
    assert_eq!(
        s.take_resync(),
        None,
        "an IPv6 deletion is notified route by route"
    );
    assert_eq!(
        s.iface_changes(),
        vec![change(
            0,
            vec![ifa("192.0.2.1", 24), ifa("198.51.100.1", 25)],
            vec![],
            Some(1400)
        )]
    );
    s.notified(&address(false, 2, "192.0.2.1", 24), 0);
    assert!(s.take_resync().is_some(), "a deleted address resyncs");
    s.begin_resync();
    s.dumped(&link_mtu(2, "r1", 1400), 0);
    s.dumped(&link(3, "r2", true), 0);
    s.dumped(&address(true, 2, "198.51.100.1", 25), 0);
    s.dumped(&address(true, 3, "2001:db8:b::1", 64), 0);
    s.end_resync();
    assert_eq!(
        s.iface_changes(),
        vec![
            change(0, vec![ifa("198.51.100.1", 25)], vec![], Some(1400)),
            change(1, vec![], vec![ifa6("2001:db8:b::1", 64)], None)
        ]
    );

    let mut off = state_with(false);
    off.notified(&address(true, 2, "192.0.2.1", 24), 0);
    off.notified(&address(true, 2, "2001:db8::1", 64), 0);
    off.notified(&link_mtu(2, "r1", 1400), 0);
    assert!(off.iface_changes().is_empty());
}

fn link(index: u32, name: &str, up: bool) -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    if up {
        m.header.flags = LinkFlags::Up;
    }
    m.attributes.push(LinkAttribute::IfName(name.into()));
    RouteNetlinkMessage::NewLink(m)
}

/// A route message: `ip route add PREFIX via GW dev (ifindex) metric M`.
fn route(p: &str, gw: Option<&str>, oif: u32, metric: u32) -> RouteMessage {
    let p = pfx(p);
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: AddressFamily::Inet,
        destination_prefix_length: p.prefix_len(),
        table: 254,
        kind: RouteType::Unicast,
        ..RouteHeader::default()
    };
    m.attributes = vec![
        RouteAttribute::Destination(RouteAddress::Inet(p.addr())),
        RouteAttribute::Oif(oif),
        RouteAttribute::Priority(metric),
    ];
    if let Some(g) = gw {
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(ip(g))));
    }
    m
}

fn add(m: &RouteMessage) -> RouteNetlinkMessage {
    RouteNetlinkMessage::NewRoute(m.clone())
}

fn del(m: &RouteMessage) -> RouteNetlinkMessage {
    RouteNetlinkMessage::DelRoute(m.clone())
}

fn via(p: &str, gw: &str, out_if: u16) -> Route {
    Route::new(pfx(p), RouteKind::Unicast, Some(out_if), Some(ip(gw)))
}

/// Plans changes against `t`, applies them to it as the control plane would, and
/// records them; returns the changes.
fn sync(s: &mut State, t: &mut Routes) -> Vec<RouteChange> {
    let plan = s.route_changes::<V4>(t);
    for c in &plan.changes {
        match c {
            RouteChange::Replace(r) => t.insert(r.clone()).expect("room"),
            RouteChange::Delete(p) => {
                t.remove(*p);
            }
        }
    }
    s.routes_applied(&plan.changes, &plan.existed);
    plan.changes
}

/// Add, replace and delete as `ip route` does them; a notification replayed, or one
/// for a route that did not change, changes nothing; several notifications for one
/// prefix between two syncs give its last state only.
#[test]
fn notifications_become_the_changes_that_make_netbatch_agree() {
    let (mut s, mut t) = (state(), Routes::new());
    let a = route("198.51.100.0/24", Some("192.0.2.7"), 2, 0);
    s.notified(&add(&a), 0);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("198.51.100.0/24", "192.0.2.7", 0))]
    );
    assert_eq!((s.stats.routes_added, s.owned().0), (1, 1));
    s.notified(&add(&a), 0);
    assert_eq!(sync(&mut s, &mut t), vec![], "replayed: nothing to do");
    let b = route("198.51.100.0/24", Some("192.0.2.8"), 3, 0);
    s.notified(&add(&b), 0x100);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("198.51.100.0/24", "192.0.2.8", 1))]
    );
    assert_eq!(s.stats.routes_replaced, 1);
    // Deleted and re-added before the next sync: no change at all.
    s.notified(&del(&b), 0);
    s.notified(&add(&b), 0);
    assert_eq!(sync(&mut s, &mut t), vec![]);
    s.notified(&del(&b), 0);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Delete(pfx("198.51.100.0/24"))]
    );
    assert_eq!((s.stats.routes_deleted, s.owned().0), (1, 0));
    assert!(t.get(&pfx("198.51.100.0/24")).is_none());
}

/// Two kernel routes for one prefix with metrics 100 and 200: netbatch has the one of
/// metric 100, as the kernel forwards by it; deleting it uncovers the other.
#[test]
fn the_lowest_metric_is_mirrored_and_its_deletion_uncovers_the_next() {
    let (mut s, mut t) = (state(), Routes::new());
    let hi = route("10.0.0.0/8", Some("192.0.2.2"), 2, 200);
    let lo = route("10.0.0.0/8", Some("198.51.100.2"), 3, 100);
    s.notified(&add(&hi), 0);
    s.notified(&add(&lo), 0);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("10.0.0.0/8", "198.51.100.2", 1))]
    );
    s.notified(&del(&lo), 0);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("10.0.0.0/8", "192.0.2.2", 0))]
    );
}

/// The kernel's best route on an interface netbatch lacks leaves netbatch's own route
/// for the prefix (from its configuration) alone, and hides the kernel's worse route;
/// a configured route equal to the kernel's is adopted (no change), and goes when the
/// kernel deletes it.
#[test]
fn only_what_the_mirror_owns_is_removed() {
    let (mut s, mut t) = (state(), Routes::new());
    t.insert(via("0.0.0.0/0", "192.0.2.254", 0)).expect("room");
    let mgmt = route("0.0.0.0/0", Some("10.9.9.1"), 4, 0);
    let worse = route("0.0.0.0/0", Some("198.51.100.254"), 3, 10);
    s.notified(&add(&worse), 0);
    s.notified(&add(&mgmt), 0);
    assert_eq!(sync(&mut s, &mut t), vec![]);
    assert_eq!(s.stats.skipped.get("unknown_interface"), Some(&1));
    assert_eq!(
        t.get(&pfx("0.0.0.0/0")),
        Some(&via("0.0.0.0/0", "192.0.2.254", 0))
    );
    // Configured 203.0.113.0/24 via 192.0.2.9; the kernel has the same: adopted.
    t.insert(via("203.0.113.0/24", "192.0.2.9", 0))
        .expect("room");
    let same = route("203.0.113.0/24", Some("192.0.2.9"), 2, 0);
    s.notified(&add(&same), 0);
    assert_eq!(sync(&mut s, &mut t), vec![]);
    assert_eq!(s.owned().0, 1);
    s.notified(&del(&same), 0);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Delete(pfx("203.0.113.0/24"))]
    );
}

/// A resync with nothing changed plans nothing; one after lost notifications deletes
/// what the kernel no longer has, adds what it gained and replaces what changed, and
/// keeps routes that did not change untouched.
#[test]
fn a_resync_applies_exactly_the_difference() {
    let (mut s, mut t) = (state(), Routes::new());
    let keep = route("10.1.0.0/16", Some("192.0.2.2"), 2, 0);
    let gone = route("10.2.0.0/16", Some("192.0.2.2"), 2, 0);
    let moved = route("10.3.0.0/16", Some("192.0.2.2"), 2, 0);
    for m in [&keep, &gone, &moved] {
        s.notified(&add(m), 0);
    }
    assert_eq!(sync(&mut s, &mut t).len(), 3);
    let dump = |s: &mut State, routes: &[&RouteMessage]| {
        s.begin_resync();
        for (i, n) in [(2, "r1"), (3, "r2")] {
            s.dumped(&link(i, n, true), 0);
        }
        for r in routes {
            s.dumped(&add(r), 0);
        }
        s.end_resync();
    };
    dump(&mut s, &[&keep, &gone, &moved]);
    assert_eq!(sync(&mut s, &mut t), vec![], "nothing changed");
    let moved2 = route("10.3.0.0/16", Some("198.51.100.2"), 3, 0);
    let new = route("10.4.0.0/16", Some("198.51.100.2"), 3, 0);
    dump(&mut s, &[&keep, &moved2, &new]);
    let mut got = sync(&mut s, &mut t);
    got.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        got,
        vec![
            RouteChange::Delete(pfx("10.2.0.0/16")),
            RouteChange::Replace(via("10.3.0.0/16", "198.51.100.2", 1)),
            RouteChange::Replace(via("10.4.0.0/16", "198.51.100.2", 1)),
        ]
    );
    assert_eq!(s.owned().0, 3);
}

/// What the kernel does without a notification per route asks for a resync: a known
/// link going down (routes flushed, multipath hops dead), up (hops revived) or away, a
/// rename changing what an index means, an address deleted; an unknown link does not.
#[test]
fn silent_kernel_changes_ask_for_a_resync() {
    let mut s = state();
    assert_eq!(s.take_resync(), None);
    s.notified(&link(4, "mgmt0", false), 0);
    assert_eq!(s.take_resync(), None, "mgmt0 is not netbatch's");
    s.notified(&link(2, "r1", false), 0);
    assert_eq!(s.take_resync(), Some("link down"));
    s.notified(&link(2, "r1", false), 0);
    assert_eq!(s.take_resync(), None, "no change of state");
    s.notified(&link(2, "r1", true), 0);
    assert_eq!(s.take_resync(), Some("link up"));
    s.notified(&link(3, "r9", true), 0);
    assert_eq!(s.take_resync(), Some("link renamed"));
    // An IPv4 address deleted from r1 (its subnet's gateways go with it, silently);
    // one of mgmt0's does not matter.
    let addr = |index| {
        let mut a = AddressMessage::default();
        a.header.family = AddressFamily::Inet;
        a.header.index = index;
        RouteNetlinkMessage::DelAddress(a)
    };
    s.notified(&addr(4), 0);
    assert_eq!(s.take_resync(), None);
    s.notified(&addr(2), 0);
    assert_eq!(s.take_resync(), Some("address deleted"));
    let mut l = LinkMessage::default();
    l.header.index = 2;
    s.notified(&RouteNetlinkMessage::DelLink(l), 0);
    assert_eq!(s.take_resync(), Some("link deleted"));
}

/// `ip route append` of a second route with the same key is not used by the kernel, so
/// not mirrored; deleting the first may uncover it, so that asks for a resync.
#[test]
fn appended_aliases_are_counted_not_mirrored() {
    let (mut s, mut t) = (state(), Routes::new());
    let first = route("10.0.0.0/8", Some("192.0.2.2"), 2, 0);
    let alias = route("10.0.0.0/8", Some("198.51.100.2"), 3, 0);
    s.notified(&add(&first), 0);
    s.notified(&add(&alias), NLM_F_APPEND);
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("10.0.0.0/8", "192.0.2.2", 0))]
    );
    assert_eq!(s.stats.skipped.get("appended_alias"), Some(&1));
    s.notified(&del(&first), 0);
    assert_eq!(s.take_resync(), Some("aliased route deleted"));
}

fn neigh(ifindex: u32, addr: &str, mac: Option<[u8; 6]>, deleted: bool) -> RouteNetlinkMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.ifindex = ifindex;
    m.header.state = if mac.is_some() {
        NeighbourState::Reachable
    } else {
        NeighbourState::Failed
    };
    m.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip(
            addr,
        ))));
    if let Some(mac) = mac {
        m.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    }
    if deleted {
        RouteNetlinkMessage::DelNeighbour(m)
    } else {
        RouteNetlinkMessage::NewNeighbour(m)
    }
}

/// Neighbours: set once per MAC (a refreshed entry with the same MAC changes
/// nothing), changed when the MAC changes, deleted when the kernel deletes or fails
/// them, and a resync without them deletes what the mirror set.
#[test]
fn neighbours_are_set_changed_and_deleted_once() {
    let mut s = state();
    let m1 = [2, 0, 0, 0, 0, 1];
    let m2 = [2, 0, 0, 0, 0, 2];
    let run = |s: &mut State| {
        let v = s.neighbour_changes();
        for c in &v {
            s.neighbour_applied(*c);
        }
        v
    };
    s.notified(&neigh(2, "192.0.2.7", Some(m1), false), 0);
    s.notified(&neigh(2, "192.0.2.7", Some(m1), false), 0);
    assert_eq!(
        run(&mut s),
        vec![NeighChange::Set(0, ip("192.0.2.7").into(), MacAddr(m1))]
    );
    s.notified(&neigh(2, "192.0.2.7", Some(m1), false), 0);
    assert_eq!(run(&mut s), vec![]);
    s.notified(&neigh(2, "192.0.2.7", Some(m2), false), 0);
    assert_eq!(
        run(&mut s),
        vec![NeighChange::Set(0, ip("192.0.2.7").into(), MacAddr(m2))]
    );
    s.notified(&neigh(2, "192.0.2.7", None, false), 0);
    assert_eq!(
        run(&mut s),
        vec![NeighChange::Delete(0, ip("192.0.2.7").into())]
    );
    s.notified(&neigh(3, "198.51.100.9", Some(m1), false), 0);
    assert_eq!(run(&mut s).len(), 1);
    s.begin_resync();
    s.end_resync();
    assert_eq!(
        run(&mut s),
        vec![NeighChange::Delete(1, ip("198.51.100.9").into())]
    );
    assert_eq!((s.stats.neighbours_set, s.stats.neighbours_deleted), (3, 2));
}

fn ip6(s: &str) -> core::net::Ipv6Addr {
    s.parse().expect("address")
}

fn pfx6(s: &str) -> Ipv6Prefix {
    s.parse().expect("prefix")
}

/// An IPv6 route message: `ip -6 route add PREFIX [via GW] dev (ifindex) metric M`, or
/// with several next hops `(GW, ifindex)` (RTA_MULTIPATH, as the kernel notifies a
/// multipath route).
fn route6(p: &str, hops: &[(Option<&str>, u32)], metric: u32) -> RouteMessage {
    use netbatch_stack::route::Family;
    let p = pfx6(p);
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: AddressFamily::Inet6,
        destination_prefix_length: V6::prefix_len(&p),
        table: 254,
        kind: RouteType::Unicast,
        ..RouteHeader::default()
    };
    m.attributes = vec![
        RouteAttribute::Destination(RouteAddress::Inet6(p.addr())),
        RouteAttribute::Priority(metric),
    ];
    let gw = |g: Option<&str>| g.map(|g| RouteAttribute::Gateway(RouteAddress::Inet6(ip6(g))));
    match hops {
        [(g, oif)] => {
            m.attributes.push(RouteAttribute::Oif(*oif));
            m.attributes.extend(gw(*g));
        }
        many => {
            let v = many
                .iter()
                .map(|(g, oif)| {
                    let mut h = netlink_packet_route::route::RouteNextHop::default();
                    h.interface_index = *oif;
                    h.attributes.extend(gw(*g));
                    h
                })
                .collect();
            m.attributes.push(RouteAttribute::MultiPath(v));
        }
    }
    m
}

fn via6(p: &str, gw: &str, out_if: u16) -> netbatch_stack::route::Route6 {
    netbatch_stack::route::Route6::new(pfx6(p), RouteKind::Unicast, Some(out_if), Some(ip6(gw)))
}

fn multipath6(p: &str, hops: &[(&str, u16)]) -> netbatch_stack::route::Route6 {
    use netbatch_stack::route::{Multipath6, NextHop6, Route6};
    let hops = hops
        .iter()
        .map(|&(g, out_if)| NextHop6 {
            gateway: Some(ip6(g)),
            out_if,
            weight: 1,
        })
        .collect();
    Route6::multipath(pfx6(p), Multipath6::new(hops).expect("next hops"))
}

/// [`sync`] for the IPv6 table.
fn sync6(
    s: &mut State,
    t: &mut netbatch_stack::route::Routes6,
) -> Vec<crate::control::RouteChange6> {
    let plan = s.route_changes::<V6>(t);
    for c in &plan.changes {
        match c {
            RouteChangeOf::Replace(r) => t.insert(r.clone()).expect("room"),
            RouteChangeOf::Delete(p) => {
                t.remove(*p);
            }
        }
    }
    s.routes_applied(&plan.changes, &plan.existed);
    plan.changes
}

/// IPv6 routes are mirrored into the IPv6 table as IPv4 ones into the IPv4 table, and
/// neither family's notifications plan changes in the other's; the kernel's own
/// `fe80::/64` of each interface is skipped and counted, never mirrored.
#[test]
fn ipv6_notifications_change_the_ipv6_table_only() {
    use crate::control::RouteChange6;
    let (mut s, mut t, mut t6) = (
        state(),
        Routes::new(),
        netbatch_stack::route::Routes6::new(),
    );
    let a = route6("2001:db8:5::/48", &[(Some("fe80::1"), 2)], 1024);
    s.notified(&add(&a), 0);
    s.notified(&add(&route6("fe80::/64", &[(None, 2)], 256)), 0);
    assert_eq!(sync(&mut s, &mut t), vec![], "nothing for IPv4");
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Replace(via6("2001:db8:5::/48", "fe80::1", 0))]
    );
    assert_eq!(s.stats.skipped.get("link_local"), Some(&1));
    assert_eq!((s.owned().0, s.owned().1, s.stats.routes_added), (0, 1, 1));
    let b = route6("2001:db8:5::/48", &[(Some("fe80::2"), 3)], 1024);
    s.notified(&add(&b), 0x100);
    s.notified(&add(&route("10.0.0.0/8", Some("192.0.2.2"), 2, 0)), 0);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Replace(via6("2001:db8:5::/48", "fe80::2", 1))]
    );
    assert_eq!(
        sync(&mut s, &mut t),
        vec![RouteChange::Replace(via("10.0.0.0/8", "192.0.2.2", 0))]
    );
    s.notified(&del(&b), 0);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Delete(pfx6("2001:db8:5::/48"))]
    );
    assert_eq!((s.owned().0, s.owned().1), (1, 0));
}

/// The kernel keeps an IPv6 multipath route as siblings (as `ip monitor` shows on
/// Linux 6.x): `ip -6 route append` of a next hop is notified as the merged route,
/// which replaces the mirrored one (a dump of it, its next hops in another order, is
/// the same route); `ip -6 route del PREFIX via A` of one next hop is
/// notified as that next hop alone, which asks for a resync, after which the route has
/// the next hops left; the deletion of the whole route deletes it. An appended route
/// the kernel does not merge (no gateway) is an unused alias, as for IPv4.
#[test]
fn ipv6_sibling_routes_follow_the_kernel() {
    use crate::control::RouteChange6;
    let (mut s, mut t6) = (state(), netbatch_stack::route::Routes6::new());
    let p = "2001:db8:5::/48";
    let two = route6(p, &[(Some("fe80::1"), 2), (Some("fe80::2"), 3)], 1024);
    s.notified(&add(&two), 0);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Replace(multipath6(
            p,
            &[("fe80::1", 0), ("fe80::2", 1)]
        ))]
    );
    // As Linux 6.x notifies it: the appended next hop first.
    let three = route6(
        p,
        &[
            (Some("2001:db8:a::9"), 2),
            (Some("fe80::1"), 2),
            (Some("fe80::2"), 3),
        ],
        1024,
    );
    s.notified(&add(&three), NLM_F_APPEND);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Replace(multipath6(
            p,
            &[("2001:db8:a::9", 0), ("fe80::1", 0), ("fe80::2", 1)]
        ))]
    );
    assert_eq!(s.stats.skipped.get("appended_alias"), None);
    // A dump lists the siblings in the order they were added: the same route.
    let dump = |s: &mut State, routes: &[&RouteMessage]| {
        s.begin_resync();
        for (i, n) in [(2, "r1"), (3, "r2")] {
            s.dumped(&link(i, n, true), 0);
        }
        for r in routes {
            s.dumped(&add(r), 0);
        }
        s.end_resync();
    };
    let dumped = route6(
        p,
        &[
            (Some("fe80::1"), 2),
            (Some("fe80::2"), 3),
            (Some("2001:db8:a::9"), 2),
        ],
        1024,
    );
    dump(&mut s, &[&dumped]);
    assert_eq!(sync6(&mut s, &mut t6), vec![], "the order is not a change");
    s.notified(&del(&route6(p, &[(Some("fe80::2"), 3)], 1024)), 0);
    assert_eq!(s.take_resync(), Some("IPv6 next hop deleted"));
    assert_eq!(sync6(&mut s, &mut t6), vec![], "nothing before the dump");
    let left = route6(p, &[(Some("fe80::1"), 2), (Some("2001:db8:a::9"), 2)], 1024);
    dump(&mut s, &[&left]);
    let want = multipath6(p, &[("2001:db8:a::9", 0), ("fe80::1", 0)]);
    assert_eq!(sync6(&mut s, &mut t6), vec![RouteChange6::Replace(want)]);
    s.notified(&del(&left), 0);
    assert_eq!(s.take_resync(), None);
    assert_eq!(sync6(&mut s, &mut t6), vec![RouteChange6::Delete(pfx6(p))]);
    // Not merged: a second route without a gateway for the same key.
    let q = "2001:db8:6::/48";
    s.notified(&add(&route6(q, &[(None, 2)], 1024)), 0);
    s.notified(&add(&route6(q, &[(None, 3)], 1024)), NLM_F_APPEND);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Replace(netbatch_stack::route::Route6::new(
            pfx6(q),
            RouteKind::Unicast,
            Some(0),
            None
        ))]
    );
    assert_eq!(s.stats.skipped.get("appended_alias"), Some(&1));
}

/// A resync carries the mirror's ownership of IPv6 routes too: what the dump no longer
/// has is deleted, in the IPv6 table only.
#[test]
fn a_resync_deletes_ipv6_routes_the_kernel_lost() {
    use crate::control::RouteChange6;
    let (mut s, mut t, mut t6) = (
        state(),
        Routes::new(),
        netbatch_stack::route::Routes6::new(),
    );
    let keep4 = route("10.1.0.0/16", Some("192.0.2.2"), 2, 0);
    let keep6 = route6("2001:db8:1::/48", &[(Some("fe80::1"), 2)], 1024);
    let gone6 = route6("2001:db8:2::/48", &[(Some("fe80::1"), 2)], 1024);
    for m in [&keep4, &keep6, &gone6] {
        s.notified(&add(m), 0);
    }
    assert_eq!(
        (sync(&mut s, &mut t).len(), sync6(&mut s, &mut t6).len()),
        (1, 2)
    );
    s.begin_resync();
    for (i, n) in [(2, "r1"), (3, "r2")] {
        s.dumped(&link(i, n, true), 0);
    }
    s.dumped(&add(&keep4), 0);
    s.dumped(&add(&keep6), 0);
    s.end_resync();
    assert_eq!(sync(&mut s, &mut t), vec![]);
    assert_eq!(
        sync6(&mut s, &mut t6),
        vec![RouteChange6::Delete(pfx6("2001:db8:2::/48"))]
    );
    assert_eq!(s.owned(), (1, 1, 0));
}

/// IPv6 (NDP) neighbours are set and deleted as ARP ones, beside them.
#[test]
fn ipv6_neighbours_are_set_and_deleted() {
    let mut s = state();
    let m1 = [2, 0, 0, 0, 0, 1];
    let mut n6 = NeighbourMessage::default();
    n6.header.family = AddressFamily::Inet6;
    n6.header.ifindex = 3;
    n6.header.state = NeighbourState::Stale;
    n6.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet6(
            ip6("fe80::9"),
        )));
    n6.attributes
        .push(NeighbourAttribute::LinkLayerAddress(m1.to_vec()));
    s.notified(&RouteNetlinkMessage::NewNeighbour(n6.clone()), 0);
    s.notified(&neigh(2, "192.0.2.7", Some(m1), false), 0);
    let mut got = s.neighbour_changes();
    got.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        got,
        vec![
            NeighChange::Set(0, ip("192.0.2.7").into(), MacAddr(m1)),
            NeighChange::Set(1, ip6("fe80::9").into(), MacAddr(m1)),
        ]
    );
    for c in got {
        s.neighbour_applied(c);
    }
    s.notified(&RouteNetlinkMessage::DelNeighbour(n6), 0);
    assert_eq!(
        s.neighbour_changes(),
        vec![NeighChange::Delete(1, ip6("fe80::9").into())]
    );
}

/// A VRF device's link notification: `ip link add NAME type vrf table TABLE` (up).
fn vrf_device(index: u32, name: &str, table: u32) -> RouteNetlinkMessage {
    use netlink_packet_route::link::{InfoData, InfoKind, InfoVrf, LinkInfo as Nested};
    let RouteNetlinkMessage::NewLink(mut m) = link(index, name, true) else {
        unreachable!("a link");
    };
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        Nested::Kind(InfoKind::Vrf),
        Nested::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
    ]));
    RouteNetlinkMessage::NewLink(m)
}

/// A link's notification with its controller (`ip link set NAME master …`) or without
/// (`nomaster`).
fn enslaved(index: u32, name: &str, master: Option<u32>) -> RouteNetlinkMessage {
    let RouteNetlinkMessage::NewLink(mut m) = link(index, name, true) else {
        unreachable!("a link");
    };
    if let Some(c) = master {
        m.attributes.push(LinkAttribute::Controller(c));
    }
    RouteNetlinkMessage::NewLink(m)
}

fn vrf(name: &str, table: u32) -> crate::config::VrfConfig {
    crate::config::VrfConfig {
        name: name.into(),
        table,
    }
}

/// The VRF view follows the links as Linux's VRF devices make them: a VRF device is
/// netbatch's VRF once it controls a netbatch interface's kernel twin (by name), and
/// only then; releasing (`nomaster`) and deleting the device put the interface back in
/// main; a device controlling an interface netbatch has not (mgmt0) is no VRF; two
/// devices on one table, or one on `main`, are refused with their members; a resync's
/// dump rebuilds the view.
#[test]
fn vrf_devices_controlling_netbatch_interfaces_are_the_vrfs() {
    let mut s = state();
    assert!(s.take_links_seen(), "the links were notified");
    assert_eq!(s.vrf_view(), VrfView::default());
    s.notified(&vrf_device(10, "blue", 10), 0);
    s.notified(&vrf_device(11, "red", 20), 0);
    assert!(s.take_links_seen());
    assert_eq!(s.vrf_view(), VrfView::default(), "no members yet");
    assert!(!s.take_links_seen(), "taken");
    s.notified(&enslaved(2, "r1", Some(10)), 0);
    s.notified(&enslaved(4, "mgmt0", Some(11)), 0);
    assert!(s.take_links_seen());
    let blue = VrfView {
        vrfs: vec![vrf("blue", 10)],
        members: vec![(0, "blue".into())],
        refused: vec![],
    };
    assert_eq!(s.vrf_view(), blue);
    // r2 into red: two VRFs.
    s.notified(&enslaved(3, "r2", Some(11)), 0);
    assert_eq!(
        s.vrf_view(),
        VrfView {
            vrfs: vec![vrf("blue", 10), vrf("red", 20)],
            members: vec![(0, "blue".into()), (1, "red".into())],
            refused: vec![],
        }
    );
    // A notification without a name is partial: r2 stays red's.
    let RouteNetlinkMessage::NewLink(mut m) = link(3, "r2", true) else {
        unreachable!("a link");
    };
    m.attributes.clear();
    s.notified(&RouteNetlinkMessage::NewLink(m), 0);
    assert_eq!(
        s.vrf_view().members,
        [(0, "blue".into()), (1, "red".into())]
    );
    // red moved onto blue's table: both refused, both interfaces in main.
    s.notified(&vrf_device(11, "red", 10), 0);
    let v = s.vrf_view();
    assert_eq!((v.vrfs.len(), v.members.len()), (0, 0), "{v:?}");
    assert_eq!(
        v.refused,
        [
            ("blue".to_string(), Skip::VrfShared),
            ("red".to_string(), Skip::VrfShared)
        ]
    );
    // On main's table: refused alone.
    s.notified(&vrf_device(11, "red", 254), 0);
    let v = s.vrf_view();
    assert_eq!(v.vrfs, [vrf("blue", 10)]);
    assert_eq!(v.refused, [("red".to_string(), Skip::VrfTable)]);
    // r2 released, red deleted, r1 released: main again.
    s.notified(&enslaved(3, "r2", None), 0);
    let mut d = LinkMessage::default();
    d.header.index = 11;
    s.notified(&RouteNetlinkMessage::DelLink(d), 0);
    assert_eq!(s.vrf_view(), blue);
    s.notified(&enslaved(2, "r1", None), 0);
    assert_eq!(s.vrf_view(), VrfView::default());
    // A dump rebuilds the view.
    s.notified(&enslaved(2, "r1", Some(10)), 0);
    let _ = s.take_links_seen();
    s.begin_resync();
    for m in [
        link(3, "r2", true),
        vrf_device(10, "blue", 10),
        enslaved(2, "r1", None),
        vrf_device(12, "green", 30),
        enslaved(3, "r2", Some(12)),
    ] {
        s.dumped(&m, 0);
    }
    s.end_resync();
    assert!(s.take_links_seen(), "a resync marks the links");
    assert_eq!(
        s.vrf_view(),
        VrfView {
            vrfs: vec![vrf("green", 30)],
            members: vec![(1, "green".into())],
            refused: vec![],
        }
    );
}
