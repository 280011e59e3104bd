//! `ip6-route`: decides local delivery or forwarding by longest-prefix match over /0 to
//! /128 ([`crate::fib6`]).
//!
//! In order, per packet:
//! - a source that is one of our addresses (a global one, or the receiving interface's
//!   link-local address) is martian: `local_source`, as for IPv4 (nobody else may send as
//!   us; DAD probes come from `::`);
//! - a multicast destination is local when this node listens to the group on the
//!   receiving interface: all-nodes `ff02::1`, all-routers `ff02::2` (a router, RFC 4291
//!   2.8), the solicited-node group of one of the interface's addresses, its
//!   Subnet-Router anycast ones included (RFC 4861 7.2.1);
//!   on a port paired with a host interface every other group is local too (the kernel's
//!   daemons join theirs: OSPFv3, MLD, RIPng), elsewhere it is dropped
//!   (`ip6_multicast_not_joined`: no multicast routing);
//! - a link-local destination is local when it is the receiving interface's link-local
//!   address or `fe80::` (the link-local prefix's Subnet-Router anycast address, RFC
//!   4291 2.6.1, which Linux's routers join too) and is never forwarded otherwise (`ip6_link_local_dest`, RFC 4291 2.5.6:
//!   link-local addresses are scoped to their link);
//! - a packet delivered locally whose extension header chain `ip6-input` let through
//!   unwalked (`flag::EXT_UNWALKED`: RFC 8200 4 leaves such a chain to the node that
//!   processes it, RFC 7045 2.2 has routers forward it) is refused here with the walk's
//!   reason, and a Parameter Problem (code 1) where RFC 8200 asks for one; forwarded, it
//!   goes on unexamined;
//! - everything else is looked up in the FIB: local routes deliver; unicast routes
//!   forward, unless forwarding is off, the frame was link-layer broadcast or multicast
//!   (`forward_l2_broadcast`, as for IPv4), the source is unspecified
//!   (`ip6_forward_source_unspecified`: no node may be answered) or link-local and
//!   leaving by another interface (Destination Unreachable, beyond scope of the source
//!   address: RFC 4443 3.1, RFC 4007 9, as Linux's `ip6_forward`; sent back out of its
//!   own link it is forwarded, and redirected, as Linux does); blackhole drops silently; unreachable and prohibit routes and a
//!   missing route send the packet to `ip6-icmp-error` with a request for the error (`ip6::icmp_error::Request`).
//!
//! With policy rules other than the default ones ([`crate::route::rule`]: `Host::policy6`
//! walks), the route of a packet bound for the FIB is the rules' decision instead of the
//! lookup of `main`, as in `ip4-route` (the key: source, destination, receiving
//! interface, mark, the upper-layer protocol past the extension headers and its ports,
//! the traffic class; one walk for a run of packets with the same key); a rule's
//! `unreachable` and `prohibit` send Destination Unreachable codes 0 and 1 (Linux's
//! `ip6_null_entry` and `ip6_prohibit_entry`). Link-local and multicast destinations are
//! decided before, as without rules.
//!
//! A destination equal to the previous packet's reuses its result without a lookup (the
//! route hint, for one list only); a multipath route's next hop is chosen by the flow
//! hash of the IPv6 4-tuple (as `ip4-route` does, [`crate::route::RoutesOf::lookup_flow`]).
//! A lookup the hint cannot save looks ahead (unless the next packet has the same
//! destination, as in a burst of one flow): it takes with it the destinations of the
//! next packets (up to seven more, each different from the one before, within 16
//! packets) and walks the tree for all eight in lockstep
//! ([`crate::route::RoutesOf::lookup_hop8`]), so that interleaved flows pay the FIB's
//! dependent loads once per eight packets rather than once per packet; what is looked up
//! ahead is used by the packets it was looked up for, in order (a lookup depends only on
//! the destination and the table, which does not change within a list). Per list, the
//! receiving interface and the verdict on the last source are kept as the hint is.

use core::net::Ipv6Addr;
use std::sync::LazyLock;

use netbatch_engine::{Cx, Out, Pkt, PktList, Pool, Reason, Stage};
use netbatch_wire::ipv6::{self as wire6, ALL_NODES, ALL_ROUTERS};
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

use super::icmp_error::Request;
use super::{Cause, addrs};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::iface::Iface;
use crate::meta::{Field, Fields, flag};
use crate::route::rule::{Key6, Policy6};
use crate::route::{Hop6, RouteKind, Routes6};

netbatch_engine::reasons! {
    /// Why `ip6-route` drops a packet (besides the routing reasons every family shares,
    /// [`crate::route::reason`]).
    pub mod reason {
        LINK_LOCAL_DEST = "ip6_link_local_dest": "link-local destination that is not ours (never forwarded)",
        MULTICAST_NOT_JOINED = "ip6_multicast_not_joined": "IPv6 multicast group not joined on the interface (no multicast routing)",
        SOURCE_UNSPECIFIED = "ip6_forward_source_unspecified": "packet from the unspecified address cannot be forwarded",
        BEYOND_SCOPE = "ip6_beyond_scope": "link-local source cannot leave its link",
    }
}

netbatch_engine::arcs! {
    /// Arc for local delivery.
    pub LOCAL = "local";
    /// Arc for forwarding.
    pub FORWARD = "forward";
    /// Arc to the ICMPv6 error stage.
    pub ERROR = "error";
}

/// The reasons the stage declares: its own and the shared routing ones.
static REASONS: LazyLock<Vec<Reason>> = LazyLock::new(|| {
    crate::route::reason::ALL
        .iter()
        .chain(reason::ALL)
        .copied()
        .collect()
});

/// The Toeplitz key of the flow hash: RPS's, as in `ip4-route`.
static FLOW_KEY: LazyLock<Toeplitz> = LazyLock::new(|| Toeplitz::new(&MS_KEY));

/// Whether this node listens to multicast group `g` on `iface` (see the module doc).
#[inline]
fn joined(iface: &Iface, g: u128) -> bool {
    if g == u128::from(ALL_NODES) || g == u128::from(ALL_ROUTERS) {
        return true;
    }
    let g = Ipv6Addr::from(g);
    wire6::is_solicited_node(g)
        && (wire6::solicited_node(iface.ll6) == g
            || iface
                .addrs6
                .iter()
                .any(|a| wire6::solicited_node(a.addr) == g)
            || iface
                .subnet_anycast6()
                .any(|a| wire6::solicited_node(a) == g))
}

/// The IPv6 routing stage.
#[derive(Debug, Default)]
pub struct Ip6Route {
    /// Packets whose destination was the previous one's (lookups the hint saved).
    pub hint_hits: u64,
    /// Walks of the policy rules (a packet whose key was the previous one's reuses its
    /// decision and is not counted).
    pub policy_walks: u64,
    /// The look-ahead, emptied at the start of each list (kept here so that a call does
    /// not initialise its arrays: per-packet mode calls once per packet).
    ahead: Ahead,
}

/// Packets a look-ahead reads past the one that needs a lookup.
const WINDOW: usize = 16;

/// Lookups made ahead of the packets that need them: destinations in the order their
/// packets come, each with what [`Routes6::lookup_hop`] gives for it. Only valid within
/// one list (the table may change between lists): [`Ahead::clear`] at every list.
#[derive(Debug, Default)]
struct Ahead {
    dst: [u128; 8],
    found: [Option<(u32, Hop6)>; 8],
    /// Entries filled.
    len: usize,
    /// The first entry not used yet.
    next: usize,
}

impl Ahead {
    /// Forgets what was looked up (for another list).
    #[inline(always)]
    fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
    }

    /// What the FIB has for `dst`, the destination of the packet before `rest`: from an
    /// entry looked up ahead when there is one for it, else looked up now with the
    /// destinations of up to seven later packets (of the next [`WINDOW`]), each
    /// different from the one before it and bound for the FIB (neither multicast nor
    /// link-local), walked in lockstep ([`Routes6::lookup_hop8`]). Any entry for `dst`
    /// is its lookup's result: the table does not change within a list.
    #[inline(always)]
    fn lookup(
        &mut self,
        routes: &Routes6,
        pool: &Pool,
        dst: u128,
        rest: &[Pkt],
    ) -> Option<(u32, Hop6)> {
        while self.next < self.len {
            let k = self.next;
            self.next += 1;
            // `len` is at most 8, the arrays' length.
            if self.dst.get(k) == Some(&dst) {
                return self.found.get(k).copied().flatten();
            }
        }
        self.fill(routes, pool, dst, rest)
    }

    /// Looks up `dst` and what follows it (see [`Ahead::lookup`]); returns `dst`'s.
    #[inline(never)]
    fn fill(
        &mut self,
        routes: &Routes6,
        pool: &Pool,
        dst: u128,
        rest: &[Pkt],
    ) -> Option<(u32, Hop6)> {
        self.dst[0] = dst;
        let mut n = 1;
        let mut last = dst;
        for (k, q) in rest.iter().take(WINDOW).enumerate() {
            let Some(d) = pool
                .get(q)
                .data()
                .get(24..40)
                .and_then(|a| a.try_into().ok())
            else {
                continue;
            };
            let d = u128::from_be_bytes(d);
            if k == 0 && d == dst {
                // The next packet goes where this one does (a burst of one flow): the hint
                // will serve it, and a look-ahead would read packets for nothing.
                break;
            }
            if d == last || d >> 118 >= SPECIAL {
                continue;
            }
            last = d;
            if let Some(slot) = self.dst.get_mut(n) {
                *slot = d;
            }
            n += 1;
            if n == 8 {
                break;
            }
        }
        if n == 1 {
            // Nothing else to look up: one walk.
            self.len = 0;
            self.next = 0;
            return routes.lookup_hop(dst);
        }
        // Fewer than eight: the rest repeat the last (`last`), whose walk is then made again in
        // the same lockstep (cheaper than a second pass).
        for d in self.dst.iter_mut().skip(n) {
            *d = last;
        }
        routes.lookup_hop8(&self.dst, &mut self.found);
        self.len = n;
        self.next = 1;
        self.found[0]
    }
}

/// `dst >> 118` at or above this: fe80::/10 (link-local, `0x3fa`), fec0::/10 (`0x3fb`,
/// routed as any other) or ff00::/8 (multicast, `0x3fc` and above).
const SPECIAL: u128 = 0xfe80 >> 6;
/// `dst >> 118` of fe80::/10.
const LINK_LOCAL: u128 = 0xfe80 >> 6;
/// `dst >> 118` from here up: ff00::/8.
const MULTICAST: u128 = 0xff00 >> 6;

/// Where a packet the FIB found a unicast hop for goes (the forwarding checks;
/// `forwarding`: the host's setting).
#[inline(always)]
fn forward(
    forwarding: bool,
    src: u128,
    adj: u32,
    hop: Hop6,
    v: &mut netbatch_engine::PktMut<'_>,
) -> Result<(), Reason> {
    if !forwarding {
        return Err(crate::route::reason::FORWARDING_DISABLED);
    }
    if v.meta.flags & flag::L2_HOST == 0 {
        return Err(crate::route::reason::FORWARD_L2_BROADCAST);
    }
    if src == 0 {
        return Err(reason::SOURCE_UNSPECIFIED);
    }
    v.meta.out_if = hop.out_if;
    v.meta.adj = adj;
    Ok(())
}

/// Delivers `p` (flagged local) to `ip6-local`, unless `ip6-input` let its extension
/// header chain through unwalked (`flag::EXT_UNWALKED`): a router forwards such a packet,
/// the node it is for refuses it (RFC 8200 4), with a Parameter Problem where the RFC asks
/// for one.
#[inline(always)]
fn deliver(pool: &Pool, p: Pkt, out: &mut Out) {
    if pool.get(&p).meta.flags & flag::EXT_UNWALKED == 0 {
        out.push(LOCAL, p);
    } else {
        refuse(pool, p, out);
    }
}

/// Refuses a packet for us whose extension header chain failed `ip6-input`'s walk (see
/// [`deliver`]): to `ip6-icmp-error` with the cause and pointer, or dropped for the walk's
/// reason.
#[cold]
#[inline(never)]
fn refuse(pool: &Pool, mut p: Pkt, out: &mut Out) {
    let v = pool.get_mut(&mut p);
    let f = super::input::refusal(v.data());
    match f.error {
        Some((cause, pointer)) => {
            Request::with(cause, pointer).put(v.meta);
            out.push(ERROR, p);
        }
        None => out.drop(p, f.reason),
    }
}

/// Routes packet `p` to `dst`, which has no plain hop: by the next hop of its multipath
/// route for the packet's flow hash, or to ICMPv6 as having no route (out of the loop, as
/// `ip4-route` does it).
#[cold]
#[inline(never)]
fn multipath_or_none(host: &Host, cx: &Cx<'_>, src: u128, dst: u128, mut p: Pkt, out: &mut Out) {
    let mut v = cx.pool.get_mut(&mut p);
    match host
        .routes6
        .lookup_flow(dst, || dissect::flow_hash(&mut v, &FLOW_KEY))
    {
        Some((adj, hop)) => match forward(host.params.forwarding, src, adj, hop, &mut v) {
            Ok(()) if wire6::is_link_local(src.into()) && hop.out_if != v.meta.in_if => {
                Request::new(Cause::BeyondScope).put(v.meta);
                out.push(ERROR, p);
            }
            Ok(()) => out.push(FORWARD, p),
            Err(r) => out.drop(p, r),
        },
        None => {
            Request::new(Cause::NoRoute).put(v.meta);
            out.push(ERROR, p);
        }
    }
}

/// What policy routing decided for a packet, as the stage acts on it.
type Policed = crate::route::rule::Policed<crate::route::V6, Cause>;

/// The rules' decision for packet `v` from `src` to `dst`: the run's last when the key
/// is the same, else walked (counted in `walked`) and kept for the next packet unless it
/// asked for the flow hash (as `ip4-route`'s).
#[inline(never)]
fn policy_route(
    policy: &Policy6,
    main: &Routes6,
    last: &mut Option<(Key6, Policed)>,
    walked: &mut u64,
    (src, dst): (u128, u128),
    v: &mut netbatch_engine::PktMut<'_>,
) -> Policed {
    let uses = policy.uses();
    let d = v.data();
    let r = dissect::Dissected::load(v.meta);
    // The traffic class and the upper layer the dissector found past the extension
    // headers; the fixed header's next header when it found none.
    let (tos, proto) = match dissect::ip_fields(&r, d) {
        Some(f) => (f.tos, f.proto),
        None => dissect::ip6_class_and_next(&r, d).unwrap_or((0, 0)),
    };
    let (sport, dport) = if uses.sport || uses.dport {
        dissect::ports(&r, d).unwrap_or((0, 0))
    } else {
        (0, 0)
    };
    let key = Key6 {
        src,
        dst,
        iif: v.meta.in_if,
        mark: v.meta.mark,
        proto,
        sport,
        dport,
        tos,
    };
    policy.decide_run(
        main,
        key,
        (last, walked),
        || dissect::flow_hash(v, &FLOW_KEY),
        Policed::of,
    )
}

/// `ip6-route`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("local", To::Via(node::HOOK_INPUT, "accept6")),
        ("forward", To::Node(node::IP6_FORWARD)),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
    ],
    reasons: &[
        reason::ALL,
        crate::route::reason::ALL,
        super::input::reason::ALL,
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[
        Field::L3,
        Field::L4,
        Field::InPort,
        Field::InIf,
        Field::L2Class,
        Field::Hash,
    ]),
    writes: Fields::of(&[
        Field::Dest,
        Field::Adj,
        Field::OutIf,
        Field::Ask,
        Field::Hash,
    ]),
    ..Decl::new(node::IP6_ROUTE, |_| Box::new(Ip6Route::default()))
};

impl Ip6Route {
    /// Routes packet `p` from `src` to `dst`, bound for the FIB, by the policy rules'
    /// decision (the last of this list, `last`, when the key is the same): acted on as
    /// `process` acts on a lookup's hop, or dropped or sent to ICMPv6 as the rules'
    /// action says.
    #[inline(never)]
    fn by_policy(
        walked: &mut u64,
        host: &Host,
        cx: &Cx<'_>,
        mut p: Pkt,
        (src, dst): (u128, u128),
        last: &mut Option<(Key6, Policed)>,
        out: &mut Out,
    ) {
        let pool = cx.pool;
        let mut v = pool.get_mut(&mut p);
        let (adj, hop) = match policy_route(
            &host.policy6,
            &host.routes6,
            last,
            walked,
            (src, dst),
            &mut v,
        ) {
            Policed::Hop(adj, hop) => (adj, hop),
            Policed::Drop(r) => return out.drop(p, r),
            Policed::Error(c) => {
                Request::new(c).put(v.meta);
                return out.push(ERROR, p);
            }
        };
        // The arms of `process`'s match, for a hop the rules found: written twice, as one
        // inlined helper for both cost the loop 5 to 8 instructions a packet
        // (scripts/instructions); a change to one is a change to both.
        let in_if = v.meta.in_if;
        match hop.kind {
            RouteKind::Local | RouteKind::Broadcast => {
                v.meta.flags |= flag::LOCAL;
                deliver(pool, p, out);
            }
            RouteKind::Unicast => match forward(host.params.forwarding, src, adj, hop, &mut v) {
                Ok(()) if src >> 118 == LINK_LOCAL && hop.out_if != in_if => {
                    Request::new(Cause::BeyondScope).put(v.meta);
                    out.push(ERROR, p);
                }
                Ok(()) => out.push(FORWARD, p),
                Err(r) => out.drop(p, r),
            },
            RouteKind::Blackhole => out.drop(p, crate::route::reason::BLACKHOLE),
            RouteKind::Unreachable => {
                Request::new(Cause::RouteUnreachable).put(v.meta);
                out.push(ERROR, p);
            }
            RouteKind::Prohibit => {
                Request::new(Cause::RouteProhibit).put(v.meta);
                out.push(ERROR, p);
            }
            // The walk never ends on a throw route.
            RouteKind::Throw => {
                Request::new(Cause::NoRoute).put(v.meta);
                out.push(ERROR, p);
            }
        }
    }
}

impl Stage<Host> for Ip6Route {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        &REASONS
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("route_hint_hits", self.hint_hits),
            ("policy_walks", self.policy_walks),
        ]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let host: &Host = host;
        let routes = &*host.routes6;
        let local = routes.local_addrs();
        let forwarding = host.params.forwarding;
        let pool = cx.pool;
        // The route hint: the last destination looked up, and what it found.
        let mut hint_dst: Option<u128> = None;
        let mut hint: Option<(u32, Hop6)> = None;
        let ahead = &mut self.ahead;
        ahead.clear();
        // The last (source, receiving interface) checked and whether the source is ours
        // there (one of our global addresses, or that interface's link-local address).
        let mut src_hint: Option<(u128, u16, bool)> = None;
        // The last receiving interface.
        let mut iface_hint: Option<(u16, &Iface)> = None;
        let walks = host.policy6.walks();
        // The rules' last decision in this list, and its key.
        let mut policed: Option<(Key6, Policed)> = None;
        let mut pkts = list.drain(..);
        while let Some(mut p) = pkts.next() {
            let mut v = pool.get_mut(&mut p);
            let Some((src, dst)) = v.data().first_chunk().map(addrs) else {
                out.drop(p, super::input::reason::TRUNCATED);
                continue;
            };
            let in_if = v.meta.in_if;
            let iface = match iface_hint {
                Some((i, f)) if i == in_if => f,
                _ => {
                    let Some(f) = host.ifaces.get(usize::from(in_if)) else {
                        out.drop(p, netbatch_engine::reason::PORT_DOWN);
                        continue;
                    };
                    iface_hint = Some((in_if, f));
                    f
                }
            };
            let ours = match src_hint {
                Some((s, i, o)) if s == src && i == in_if => o,
                _ => {
                    let o = local.contains(src) || u128::from(iface.ll6) == src;
                    src_hint = Some((src, in_if, o));
                    o
                }
            };
            if ours {
                out.drop(p, crate::route::reason::LOCAL_SOURCE);
                continue;
            }
            // Multicast (ff00::/8) and link-local (fe80::/10) destinations: one test of the
            // top ten bits for both before the FIB.
            let top = dst >> 118;
            if top >= SPECIAL {
                if top >= MULTICAST {
                    if joined(iface, dst)
                        || crate::hostif::punt_port(host, v.meta.in_port).is_some()
                    {
                        v.meta.flags |= flag::LOCAL | flag::L3_MULTICAST;
                        deliver(pool, p, out);
                    } else {
                        out.drop(p, reason::MULTICAST_NOT_JOINED);
                    }
                    continue;
                }
                if top == LINK_LOCAL {
                    // Ours: the interface's link-local address, or `fe80::`, the
                    // Subnet-Router anycast address of the link-local prefix.
                    if u128::from(iface.ll6) == dst || dst == u128::from(wire6::LINK_LOCAL_ANYCAST)
                    {
                        v.meta.flags |= flag::LOCAL;
                        deliver(pool, p, out);
                    } else {
                        out.drop(p, reason::LINK_LOCAL_DEST);
                    }
                    continue;
                }
            }
            if walks {
                // The rules choose the route (out of the loop: without rules, this test
                // is all they cost).
                Self::by_policy(
                    &mut self.policy_walks,
                    host,
                    cx,
                    p,
                    (src, dst),
                    &mut policed,
                    out,
                );
                continue;
            }
            if hint_dst == Some(dst) {
                self.hint_hits += 1;
            } else {
                hint = ahead.lookup(routes, pool, dst, pkts.as_slice());
                hint_dst = Some(dst);
            }
            let Some((adj, hop)) = hint else {
                multipath_or_none(host, cx, src, dst, p, out);
                continue;
            };
            match hop.kind {
                RouteKind::Local | RouteKind::Broadcast => {
                    v.meta.flags |= flag::LOCAL;
                    deliver(pool, p, out);
                }
                RouteKind::Unicast => match forward(forwarding, src, adj, hop, &mut v) {
                    // RFC 4007 9: a link-local source never leaves its link (sent back
                    // on the link it came from, it stays on it: Linux forwards it, and
                    // redirects its sender).
                    Ok(()) if src >> 118 == LINK_LOCAL && hop.out_if != in_if => {
                        Request::new(Cause::BeyondScope).put(v.meta);
                        out.push(ERROR, p);
                    }
                    Ok(()) => out.push(FORWARD, p),
                    Err(r) => out.drop(p, r),
                },
                RouteKind::Blackhole => out.drop(p, crate::route::reason::BLACKHOLE),
                RouteKind::Unreachable => {
                    Request::new(Cause::RouteUnreachable).put(v.meta);
                    out.push(ERROR, p);
                }
                RouteKind::Prohibit => {
                    Request::new(Cause::RouteProhibit).put(v.meta);
                    out.push(ERROR, p);
                }
                // Nothing left to go on to: no route (Linux: network unreachable).
                RouteKind::Throw => {
                    Request::new(Cause::NoRoute).put(v.meta);
                    out.push(ERROR, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_wire::ethernet::MacAddr;

    /// The groups a router's interface listens to: all-nodes, all-routers, and the
    /// solicited-node groups of its link-local and global addresses (RFC 4291 2.7.1,
    /// 2.8); not another node's solicited-node group, nor other groups.
    #[test]
    fn joined_groups_are_a_routers() {
        let mut f = Iface::new(
            "eth0",
            0,
            Default::default(),
            MacAddr([2, 0, 0, 0, 0, 1]),
            1500,
            vec![],
        );
        f.addrs6.push("2001:db8::1:2:3/64".parse().unwrap());
        let g = |s: &str| u128::from(s.parse::<Ipv6Addr>().unwrap());
        // fe80::ff:fe00:1 (from the MAC) → ff02::1:ff00:1; 2001:db8::1:2:3 → ff02::1:ff02:3.
        for yes in ["ff02::1", "ff02::2", "ff02::1:ff00:1", "ff02::1:ff02:3"] {
            assert!(joined(&f, g(yes)), "{yes}");
        }
        for no in ["ff02::5", "ff02::1:ff00:2", "ff05::2", "ff02::16"] {
            assert!(!joined(&f, g(no)), "{no}");
        }
    }
}
