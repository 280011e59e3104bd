//! `ip4-route`: decides local delivery or forwarding by longest-prefix match.
//!
//! Multicast destinations are local (delivered to a socket bound to the group's port,
//! else dropped without ICMP). A destination equal to the previous packet's reuses its
//! result without a lookup (the kernel's route hint, `ip_list_rcv_finish`); the hint lives
//! for one list only, so per-packet mode never has one.
//!
//! A source that is the directed broadcast of one of our subnets is martian (RFC 1812
//! 5.3.7, 4.2.2.11 (e): `{<Network-prefix>, -1}` is never a source): such a packet is
//! dropped (`Ip4MartianSource`) whatever its destination, neither forwarded nor answered,
//! as Linux's `fib_validate_source` does when the reverse lookup of the source finds a
//! broadcast route (`IP_INVALID_SOURCE`; Linux looks only with `rp_filter` on, the
//! common distribution default, netbatch always). A source that is one of our own
//! addresses is martian too (`local_source`: Linux's `fib_validate_source` with
//! `accept_local` off, its default): nobody else may send as us, whether the packet is
//! for us or to be forwarded; a 64-bit filter of our addresses clears most sources in a
//! few instructions. Both verdicts are kept for the last source of the list.
//! `ip4-input` has already refused the sources martian by class.
//!
//! A source-routed packet for us (`ip4-input` let it through only with
//! `accept_source_route` on) whose route is not exhausted is sent on to the route's next
//! address ([`super::options::next_source_hop`]); a strict route whose next address is not
//! on a connected network gets ICMP source route failed (RFC 1812 5.2.4.1).
//!
//! A multipath route's next hop is chosen by the packet's flow hash (the one recorded in
//! `Meta::hash`, the port's or RPS's, else the dissector's `flow_hash` with RPS's key,
//! so that a flow gets the same hash whoever computes it), as
//! [`Routes::lookup_flow`] describes: every packet of a flow takes the same next hop,
//! whatever list it comes in. The route hint keeps only plain hops ([`Routes::lookup_hop`]):
//! for a destination with a multipath route it holds "no plain hop", and each packet to
//! it is then looked up again and hashed out of the loop (the next packet may be another
//! flow), so single-path routing costs what it did. A source-routed packet sent on to its
//! route's next address takes a multipath route's first next hop.
//!
//! With policy rules other than the default ones ([`crate::route::rule`]: `Host::policy`
//! walks), the route is the rules' decision instead of the lookup of `main`, made after
//! the source checks and multicast: the packet's key (source, destination, receiving
//! interface, mark, protocol, ports, TOS: only the fields some rule selects on, so that
//! packets differing in the others share a decision) is walked once for a run of
//! packets with the same key, the decision kept for the next packet as the route hint
//! keeps a lookup (not when a multipath route made it depend on the flow hash). A rule's
//! `blackhole` drops (`rule_blackhole`), its `unreachable` and `prohibit` send ICMP
//! network unreachable and administratively prohibited (`rule_unreachable`,
//! `rule_prohibit`, as Linux's `ENETUNREACH` and `EACCES`), and no decision is no route;
//! a route found is acted on as the lookup's would be. Without such rules the stage
//! pays one test of a flag per packet.
//!
//! A unicast packet received as link-layer broadcast or multicast is not forwarded (RFC
//! 1812 5.3.4). Unreachable and prohibit routes and a missing route send the packet to
//! `ip4-icmp-error` with a request for the error (`ip4::icmp_error::Request`); blackhole routes drop silently.

use std::sync::LazyLock;

use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

use super::icmp_error::{Cause, Request};
use super::{header, options};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};
use crate::prefix::class;
use crate::route::rule::{Key, Policy};
use crate::route::{Hop, RouteKind, Routes};

netbatch_engine::arcs! {
    /// Arc for local delivery.
    pub LOCAL = "local";
    /// Arc for forwarding.
    pub FORWARD = "forward";
    /// Arc to the ICMP error stage.
    pub ERROR = "error";
}

/// Whether `src` is one of our subnets' directed broadcasts (a broadcast route covers
/// it). Those are only made for subnets of length ≤ 30, whose broadcast ends in at least
/// two one bits: the other three quarters of sources need no lookup.
#[inline(always)]
fn is_broadcast_source(routes: &Routes, src: u32) -> bool {
    // A plain hop's lookup: no multipath route is a broadcast route.
    src & 3 == 3 && matches!(routes.lookup_hop(src), Some((_, h)) if h.kind == RouteKind::Broadcast)
}

/// The Toeplitz key of the flow hash: RPS's (`datapath::rps`), so that the hash this
/// stage computes for a packet RPS did not hash is the one RPS would have recorded.
static FLOW_KEY: LazyLock<Toeplitz> = LazyLock::new(|| Toeplitz::new(&MS_KEY));

/// Routes packet `p` to `dst`, which has no plain hop: by the next hop of
/// its multipath route for the packet's flow hash, forwarded as the `Unicast` arm of
/// [`Ip4Route::process`] forwards (a multipath route's next hops are unicast), or to
/// ICMP as having no route. Out of the loop, with what the loop holds anyway: the route
/// hint keeps "no plain hop" for such a destination, so every packet to it comes here
/// and is hashed, and single-path routing pays nothing for multipath.
#[cold]
#[inline(never)]
fn multipath_or_none(host: &Host, cx: &Cx<'_>, dst: u32, mut p: Pkt, out: &mut Out) {
    let mut v = cx.pool.get_mut(&mut p);
    // The recorded hash (the port's, or RPS's), else the dissector's, recorded.
    match host
        .routes
        .lookup_flow(dst, || dissect::flow_hash(&mut v, &FLOW_KEY))
    {
        Some(_) if !host.params.forwarding => {
            out.drop(p, crate::route::reason::FORWARDING_DISABLED);
        }
        Some(_) if v.meta.flags & flag::L2_HOST == 0 => {
            out.drop(p, crate::route::reason::FORWARD_L2_BROADCAST);
        }
        Some((adj, hop)) => {
            v.meta.out_if = hop.out_if;
            v.meta.adj = adj;
            out.push(FORWARD, p);
        }
        None => {
            Request::new(Cause::NoRoute).put(v.meta);
            out.push(ERROR, p);
        }
    }
}

/// What policy routing decided for a packet, as the stage acts on it.
type Policed = crate::route::rule::Policed<crate::route::V4, Cause>;

/// The rules' key of packet `v` from `src` to `dst`, whose header is `ip`, masked to
/// what the rules select on (see the module documentation): the TOS, protocol and ports
/// as the dissector recorded them (`ip4-input` saw to it that it located the header),
/// read only when a rule selects on them.
#[inline(always)]
fn policy_key(
    policy: &Policy,
    ip: &netbatch_wire::ipv4::Ipv4Packet<&[u8; 20]>,
    (src, dst): (u32, u32),
    v: &netbatch_engine::PktMut<'_>,
) -> Key {
    let uses = policy.uses();
    let (tos, proto, (sport, dport)) = if uses.tos || uses.proto || uses.sport || uses.dport {
        let l4 = dissect::Dissected::load(v.meta).l4;
        dissect::ip4_rule_fields(ip, l4, v.data(), uses.sport || uses.dport)
    } else {
        (0, 0, (0, 0))
    };
    policy.key(Key {
        src,
        dst,
        iif: v.meta.in_if,
        mark: v.meta.mark,
        proto,
        sport,
        dport,
        tos,
    })
}

/// The rules' decision for `key` (packet `v`'s, masked), which the previous packet's in
/// the list (`last`) did not decide: walked (counted in `walked`) and kept for the next
/// packet unless it asked for the flow hash.
#[inline(never)]
fn policy_walk(
    policy: &Policy,
    main: &Routes,
    key: Key,
    (last, walked): (&mut Option<(Key, Policed)>, &mut u64),
    v: &mut netbatch_engine::PktMut<'_>,
) -> Policed {
    policy.walk_run(
        main,
        key,
        (last, walked),
        || dissect::flow_hash(v, &FLOW_KEY),
        Policed::of,
    )
}

/// What a source-routed packet for us does next.
enum SourceRoute {
    /// No source route, or an exhausted one: it is ours.
    Deliver,
    /// On to the route's next address, by this adjacency and hop.
    Forward(u32, Hop),
    /// An ICMP error (with the pointer of a Parameter Problem).
    Error(Request),
}

/// Follows the source route of the packet `d` (starting at its header, with options)
/// that is addressed to us: the next listed address that is not ours becomes its
/// destination, with our address toward it recorded in its slot (addresses of ours on
/// the way are stepped over, as Linux does).
#[inline(never)]
fn source_route(routes: &Routes, ifaces: &[crate::iface::Iface], d: &mut [u8]) -> SourceRoute {
    let ihl = d.first().map_or(0, |b| usize::from(b & 0x0f) * 4);
    let Some(h) = d.get_mut(..ihl) else {
        return SourceRoute::Deliver;
    };
    let (o, strict) = match options::scan(h) {
        Ok(f) => match f.srr {
            Some(s) => s,
            None => return SourceRoute::Deliver,
        },
        Err(pointer) => {
            return SourceRoute::Error(Request::with(Cause::ParamProblem, pointer as u32));
        }
    };
    let verdict = loop {
        let Some(next) = options::source_route_next(h, o) else {
            break SourceRoute::Deliver;
        };
        let Some((adj, hop)) = routes.lookup_adj(next) else {
            break SourceRoute::Error(Request::new(Cause::NoRoute));
        };
        if hop.kind == RouteKind::Local {
            options::next_source_hop(h, o, next, next);
            continue;
        }
        if hop.kind != RouteKind::Unicast || (strict && hop.gateway != 0) {
            break SourceRoute::Error(Request::new(Cause::SourceRouteFailed));
        }
        let out_addr = ifaces
            .get(usize::from(hop.out_if))
            .and_then(|i| i.source_for(next.into()))
            .map_or(0, u32::from);
        options::next_source_hop(h, o, next, out_addr);
        break SourceRoute::Forward(adj, hop);
    };
    netbatch_wire::ipv4::Ipv4Packet::new_unchecked(h).fill_checksum();
    verdict
}

/// The routing stage.
#[derive(Debug, Default)]
pub struct Ip4Route {
    /// Packets whose destination was the previous one's, whose lookup the route hint
    /// saved (for reports; a multipath destination's packets are still looked up and
    /// hashed one by one, out of the loop).
    pub hint_hits: u64,
    /// Walks of the policy rules (a packet whose key was the previous one's reuses its
    /// decision and is not counted).
    pub policy_walks: u64,
}

/// `ip4-route`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("local", To::Via(node::HOOK_INPUT, "accept")),
        ("forward", To::Node(node::IP4_FORWARD)),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
    ],
    reasons: &[crate::route::reason::ALL, super::input::reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[
        Field::L3,
        Field::L4,
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
    ..Decl::new(node::IP4_ROUTE, |_| Box::new(Ip4Route::default()))
};

/// Where `by_policy` sends a packet.
enum Then {
    /// Out of this arc.
    Push(netbatch_engine::Next),
    /// Dropped for this reason.
    Drop(netbatch_engine::Reason),
}

impl Ip4Route {
    /// Acts on the policy rules' decision for packet `v` as `process` acts on a lookup's
    /// hop, or drops it or sends it to ICMP as the rules' action says; returns where it
    /// goes. Out of the loop: without rules, the loop pays only for testing whether there
    /// are any.
    #[inline(never)]
    fn by_policy(host: &Host, mut v: netbatch_engine::PktMut<'_>, decided: Policed) -> Then {
        let routes = &*host.routes;
        let (adj, hop) = match decided {
            Policed::Hop(adj, hop) => (adj, hop),
            Policed::Drop(r) => return Then::Drop(r),
            Policed::Error(c) => {
                Request::new(c).put(v.meta);
                return Then::Push(ERROR);
            }
        };
        // The arms of `process`'s match, for a hop the rules found: written twice, as one
        // inlined helper for both cost the loop 5 to 8 instructions a packet
        // (scripts/instructions); a change to one is a change to both.
        let options = header(v.data()).is_some_and(|ip| ip.header_len() > 20);
        match hop.kind {
            RouteKind::Local if options && host.params.accept_source_route => {
                match source_route(routes, &host.ifaces, v.data_mut()) {
                    SourceRoute::Deliver => {
                        v.meta.flags |= flag::LOCAL;
                        Then::Push(LOCAL)
                    }
                    SourceRoute::Forward(adj, hop) if host.params.forwarding => {
                        v.meta.out_if = hop.out_if;
                        v.meta.adj = adj;
                        Then::Push(FORWARD)
                    }
                    SourceRoute::Forward(..) => {
                        Then::Drop(crate::route::reason::FORWARDING_DISABLED)
                    }
                    SourceRoute::Error(request) => {
                        request.put(v.meta);
                        Then::Push(ERROR)
                    }
                }
            }
            RouteKind::Local => {
                v.meta.flags |= flag::LOCAL;
                Then::Push(LOCAL)
            }
            RouteKind::Broadcast => {
                v.meta.flags |= flag::LOCAL | flag::L3_BROADCAST;
                Then::Push(LOCAL)
            }
            RouteKind::Unicast if !host.params.forwarding => {
                Then::Drop(crate::route::reason::FORWARDING_DISABLED)
            }
            RouteKind::Unicast if v.meta.flags & flag::L2_HOST == 0 => {
                Then::Drop(crate::route::reason::FORWARD_L2_BROADCAST)
            }
            RouteKind::Unicast => {
                v.meta.out_if = hop.out_if;
                v.meta.adj = adj;
                Then::Push(FORWARD)
            }
            RouteKind::Blackhole => Then::Drop(crate::route::reason::BLACKHOLE),
            RouteKind::Unreachable => {
                Request::new(Cause::RouteUnreachable).put(v.meta);
                Then::Push(ERROR)
            }
            RouteKind::Prohibit => {
                Request::new(Cause::RouteProhibit).put(v.meta);
                Then::Push(ERROR)
            }
            // The walk never ends on a throw route.
            RouteKind::Throw => {
                Request::new(Cause::NoRoute).put(v.meta);
                Then::Push(ERROR)
            }
        }
    }
}

impl Stage<Host> for Ip4Route {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        crate::route::reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("route_hint_hits", self.hint_hits),
            ("policy_walks", self.policy_walks),
        ]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let routes = &*host.routes;
        let forwarding = host.params.forwarding;
        // The last destination looked up (none matches `u64::MAX`) and what it found.
        let mut hint_dst = u64::MAX;
        let mut hint: Option<(u32, Hop)> = None;
        let local = routes.local_addrs();
        // The last source checked (none matches `u64::MAX`) and its verdict: 0 a valid
        // source, 1 ours, 2 a directed broadcast.
        let (mut src_hint, mut src_bad) = (u64::MAX, 0u8);
        let walks = host.policy.walks();
        // The rules' last decision in this list, and its key.
        let mut policed: Option<(Key, Policed)> = None;
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some(ip) = header(v.data()) else {
                out.drop(p, crate::ip4::input::reason::TRUNCATED);
                continue;
            };
            let (src, dst) = (u32::from(ip.src()), u32::from(ip.dst()));
            // The last source's verdict is kept for the list, as the route hint is.
            if u64::from(src) != src_hint {
                src_hint = u64::from(src);
                src_bad = if local.contains(src) {
                    1
                } else {
                    u8::from(is_broadcast_source(routes, src)) * 2
                };
            }
            if src_bad != 0 {
                out.drop(
                    p,
                    if src_bad == 1 {
                        crate::route::reason::LOCAL_SOURCE
                    } else {
                        crate::ip4::input::reason::MARTIAN_SOURCE
                    },
                );
                continue;
            }
            if class::is_multicast(dst) {
                v.meta.flags |= flag::LOCAL | flag::L3_MULTICAST;
                out.push(LOCAL, p);
                continue;
            }
            if walks {
                // The rules choose the route: the key read and compared here, the
                // previous packet's decision reused when its key was the same, the walk
                // and what follows out of the loop (without rules, the test of `walks`
                // is all they cost).
                let key = policy_key(&host.policy, &ip, (src, dst), &v);
                let decided = match policed {
                    Some((k, d)) if k.same(&key) => d,
                    _ => policy_walk(
                        &host.policy,
                        routes,
                        key,
                        (&mut policed, &mut self.policy_walks),
                        &mut v,
                    ),
                };
                match Self::by_policy(host, v, decided) {
                    Then::Push(arc) => out.push(arc, p),
                    Then::Drop(r) => out.drop(p, r),
                }
                continue;
            }
            if u64::from(dst) == hint_dst {
                self.hint_hits += 1;
            } else {
                hint = routes.lookup_hop(dst);
                hint_dst = u64::from(dst);
            }
            let Some((adj, hop)) = hint else {
                // No plain hop: a multipath route (resolved for this packet's flow) or none.
                // (`hint_dst` is `dst` here, and live in any case.)
                multipath_or_none(host, cx, hint_dst as u32, p, out);
                continue;
            };
            match hop.kind {
                RouteKind::Local if ip.header_len() > 20 && host.params.accept_source_route => {
                    let mut v = v;
                    match source_route(routes, &host.ifaces, v.data_mut()) {
                        SourceRoute::Deliver => {
                            v.meta.flags |= flag::LOCAL;
                            out.push(LOCAL, p);
                        }
                        SourceRoute::Forward(adj, hop) if forwarding => {
                            v.meta.out_if = hop.out_if;
                            v.meta.adj = adj;
                            out.push(FORWARD, p);
                        }
                        SourceRoute::Forward(..) => {
                            out.drop(p, crate::route::reason::FORWARDING_DISABLED);
                        }
                        SourceRoute::Error(request) => {
                            request.put(v.meta);
                            out.push(ERROR, p);
                        }
                    }
                }
                RouteKind::Local => {
                    v.meta.flags |= flag::LOCAL;
                    out.push(LOCAL, p);
                }
                RouteKind::Broadcast => {
                    v.meta.flags |= flag::LOCAL | flag::L3_BROADCAST;
                    out.push(LOCAL, p);
                }
                RouteKind::Unicast => {
                    if !forwarding {
                        out.drop(p, crate::route::reason::FORWARDING_DISABLED);
                    } else if v.meta.flags & flag::L2_HOST == 0 {
                        out.drop(p, crate::route::reason::FORWARD_L2_BROADCAST);
                    } else {
                        v.meta.out_if = hop.out_if;
                        v.meta.adj = adj;
                        out.push(FORWARD, p);
                    }
                }
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
    use core::net::Ipv4Addr;

    use super::*;
    use crate::prefix::Ipv4Prefix;
    use crate::route::Route;

    #[test]
    fn directed_broadcasts_end_in_two_one_bits() {
        // The pre-check of `is_broadcast_source` rests on this: every subnet that has a
        // directed broadcast (length ≤ 30) has it end in at least two one bits.
        for len in 0..=32u8 {
            for a in [0u32, 0x0a09_0001, 0xc000_0201, 0xc633_64fe, u32::MAX] {
                let p = Ipv4Prefix::truncating(Ipv4Addr::from(a), len);
                match p.broadcast() {
                    Some(b) => assert_eq!(u32::from(b) & 3, 3, "{p}"),
                    None => assert!(len >= 31, "{p}"),
                }
            }
        }
    }

    #[test]
    fn broadcast_sources_are_those_with_a_broadcast_route() {
        let mut r = Routes::new();
        let add = |r: &mut Routes, p: &str, kind| {
            r.insert(Route {
                prefix: p.parse().expect("prefix"),
                kind,
                out_if: Some(0),
                gateway: None,
                multipath: None,
            })
            .expect("route");
        };
        add(&mut r, "192.0.2.0/24", RouteKind::Unicast);
        add(&mut r, "192.0.2.255/32", RouteKind::Broadcast);
        add(&mut r, "192.0.2.1/32", RouteKind::Local);
        add(&mut r, "10.9.0.0/16", RouteKind::Unicast);
        add(&mut r, "10.9.255.255/32", RouteKind::Broadcast);
        add(&mut r, "0.0.0.0/0", RouteKind::Unicast);
        let bits = |s: &str| u32::from(s.parse::<Ipv4Addr>().expect("address"));
        for s in ["192.0.2.255", "10.9.255.255"] {
            assert!(is_broadcast_source(&r, bits(s)), "{s}");
        }
        for s in [
            "192.0.2.1",
            "192.0.2.254",
            "192.0.2.127",
            "10.9.0.255",
            "10.10.255.255",
            "203.0.113.255",
        ] {
            assert!(!is_broadcast_source(&r, bits(s)), "{s}");
        }
    }
}
