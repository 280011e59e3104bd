//! Tests of the rule walk: cases whose answers are the Linux kernel's (each was asked of
//! `ip route get … iif` in a namespace on Linux 6.18, as the comments say), and
//! properties against a model that looks routes up by linear scan.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::prefix::{Ipv4Prefix, Ipv6Prefix};
use crate::route::{MultipathOf, NextHopOf, Route, Route6, RouteOf, Routes, V4, V6};

fn p4(s: &str) -> Ipv4Prefix {
    s.parse().expect("prefix")
}

fn p6(s: &str) -> Ipv6Prefix {
    s.parse().expect("prefix")
}

fn a4(s: &str) -> u32 {
    u32::from(s.parse::<Ipv4Addr>().expect("address"))
}

fn a6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().expect("address"))
}

/// A unicast route via `gw` out of interface `out_if`.
fn via(p: &str, gw: &str, out_if: u16) -> Route {
    Route::new(
        p4(p),
        RouteKind::Unicast,
        Some(out_if),
        Some(gw.parse().expect("gw")),
    )
}

fn kind(p: &str, k: RouteKind) -> Route {
    Route::new(p4(p), k, None, None)
}

/// Tables from `(id, routes)`.
fn tables<F: Family>(list: Vec<(u32, Vec<RouteOf<F>>)>) -> BTreeMap<u32, RoutesOf<F>> {
    list.into_iter()
        .map(|(id, routes)| {
            let mut t = RoutesOf::new();
            t.load(routes).expect("routes");
            (id, t)
        })
        .collect()
}

/// The main table of the namespace the kernel answered in: 192.0.2.1/24 on interface
/// 0, 198.51.100.1/24 on interface 1 (connected, local and broadcast routes).
fn main4() -> Vec<Route> {
    vec![
        Route::new(p4("192.0.2.0/24"), RouteKind::Unicast, Some(0), None),
        Route::new(p4("192.0.2.1/32"), RouteKind::Local, Some(0), None),
        Route::new(p4("192.0.2.255/32"), RouteKind::Broadcast, Some(0), None),
        Route::new(p4("198.51.100.0/24"), RouteKind::Unicast, Some(1), None),
        Route::new(p4("198.51.100.1/32"), RouteKind::Local, Some(1), None),
        Route::new(p4("198.51.100.255/32"), RouteKind::Broadcast, Some(1), None),
    ]
}

/// A key from `src` to `dst` in by interface `iif`, UDP, no mark, ports or TOS.
fn key(src: &str, dst: &str, iif: u16) -> Key {
    Key {
        src: a4(src),
        dst: a4(dst),
        iif,
        mark: 0,
        proto: 17,
        sport: 0,
        dport: 0,
        tos: 0,
    }
}

/// What a decision says, as `ip route get` shows it: the table and gateway, or the
/// route's kind, or the error.
fn said(d: Decision) -> String {
    match d {
        DecisionOf::Route { table, hop, .. } => match hop.kind {
            RouteKind::Unicast if hop.gateway != 0 => {
                format!("{} via {}", table_name(table), Ipv4Addr::from(hop.gateway))
            }
            k => format!("{} {k:?}", table_name(table)),
        },
        DecisionOf::Refused { how, .. } => format!("rule {how:?}"),
        DecisionOf::NoRoute => "no route".into(),
    }
}

fn rule(pref: u32, action: Action) -> Rule {
    Rule::new(pref, action)
}

fn rules(list: Vec<Rule>) -> Rules {
    let mut r = Rules::new();
    for x in list {
        r.add(x).expect("rule");
    }
    r
}

#[test]
fn the_default_rules_are_linuxs_and_route_by_main() {
    let r = Rules::new();
    assert!(r.is_default());
    let shown: Vec<String> = r.iter().map(|x| x.describe(|i| i.to_string())).collect();
    assert_eq!(
        shown,
        [
            "0:\tfrom all lookup local",
            "32766:\tfrom all lookup main",
            "32767:\tfrom all lookup default"
        ]
    );
    let r6 = Rules6::new();
    assert!(r6.is_default());
    assert_eq!(r6.len(), 2, "IPv6 has no default-table rule");
    let mut main = main4();
    main.push(via("203.0.113.0/24", "198.51.100.2", 1));
    let t = tables(vec![(TABLE_MAIN, main)]);
    let d = |dst| said(r.decide(&t, &key("192.0.2.9", dst, 0), || 0));
    // Our address and a directed broadcast: the local view of main, at rule 0.
    assert_eq!(d("198.51.100.1"), "local Local");
    assert_eq!(d("192.0.2.255"), "local Broadcast");
    assert_eq!(d("203.0.113.7"), "main via 198.51.100.2");
    assert_eq!(d("198.51.100.7"), "main Unicast");
    assert_eq!(d("233.252.0.1"), "no route");
    // A route in table default is found after main misses.
    let mut t = t;
    t.insert(
        TABLE_DEFAULT,
        tables(vec![(0, vec![via("0.0.0.0/0", "192.0.2.3", 0)])])
            .remove(&0)
            .expect("table"),
    );
    assert_eq!(
        said(r.decide(&t, &key("192.0.2.9", "233.252.0.1", 0), || 0)),
        "default via 192.0.2.3"
    );
    assert!(r.decide(&t, &key("192.0.2.9", "233.252.0.1", 0), || 0) != DecisionOf::NoRoute);
}

/// Routes of every kind in a numbered table, reached by `from 192.0.2.0/24 lookup 100`;
/// the kernel answered: the gateway, `Invalid argument` (blackhole), `No route to host`
/// (unreachable route), `Permission denied` (prohibit), and for the throw route and a
/// miss `Network is unreachable` (the walk went on to main and default, which had none).
#[test]
fn a_tables_routes_end_the_walk_except_throw() {
    let mut main = main4();
    main.push(via("203.0.113.240/28", "192.0.2.77", 0));
    let t = tables(vec![
        (TABLE_MAIN, main),
        (
            100,
            vec![
                via("203.0.113.0/24", "198.51.100.2", 1),
                kind("203.0.113.64/26", RouteKind::Blackhole),
                kind("203.0.113.128/26", RouteKind::Unreachable),
                kind("203.0.113.192/27", RouteKind::Prohibit),
                kind("203.0.113.224/27", RouteKind::Throw),
            ],
        ),
    ]);
    let mut from = rule(100, Action::Lookup(100));
    from.from = Some(p4("192.0.2.0/24"));
    let r = rules(vec![from]);
    let d = |dst| said(r.decide(&t, &key("192.0.2.9", dst, 0), || 0));
    assert_eq!(d("203.0.113.5"), "100 via 198.51.100.2");
    assert_eq!(d("203.0.113.70"), "100 Blackhole");
    assert_eq!(d("203.0.113.130"), "100 Unreachable");
    assert_eq!(d("203.0.113.200"), "100 Prohibit");
    assert_eq!(d("203.0.113.230"), "no route");
    // Thrown, then found in main (the kernel: the same walk).
    assert_eq!(d("203.0.113.245"), "main via 192.0.2.77");
    // Not from 192.0.2.0/24: main only.
    assert_eq!(
        said(r.decide(&t, &key("198.51.100.9", "203.0.113.5", 1), || 0)),
        "no route"
    );
}

/// `goto 150` with no rule at 150 went on to the next rule (table 200); once a rule of
/// priority 150 existed, it jumped there, and past it when that rule did not match
/// (the kernel: `unresolved` goto, then resolved).
#[test]
fn goto_jumps_to_exactly_its_priority_or_goes_on() {
    let t = tables(vec![
        (TABLE_MAIN, main4()),
        (200, vec![via("203.0.113.0/24", "192.0.2.2", 0)]),
        (201, vec![via("203.0.113.0/24", "192.0.2.3", 0)]),
        (202, vec![via("203.0.113.0/24", "192.0.2.4", 0)]),
    ]);
    let dst = Some(p4("203.0.113.0/24"));
    let mut go = rule(10, Action::Goto(150));
    go.to = dst;
    let mut r20 = rule(20, Action::Lookup(200));
    r20.to = dst;
    let mut r160 = rule(160, Action::Lookup(201));
    r160.to = dst;
    let mut r = rules(vec![go, r20, r160]);
    let k = key("198.51.100.9", "203.0.113.5", 1);
    assert_eq!(said(r.decide(&t, &k, || 0)), "200 via 192.0.2.2");
    // Not the first rule above 150: 150 itself.
    let mut r150 = rule(150, Action::Lookup(202));
    r150.tos = Some(0x10);
    r.add(r150).expect("rule");
    assert_eq!(said(r.decide(&t, &k, || 0)), "201 via 192.0.2.3");
    let tos = Key { tos: 0x10, ..k };
    assert_eq!(said(r.decide(&t, &tos, || 0)), "202 via 192.0.2.4");
    // A second rule of priority 150 (added later) is not the target: the first is.
    r.add(rule(150, Action::Blackhole)).expect("rule");
    assert_eq!(said(r.decide(&t, &tos, || 0)), "202 via 192.0.2.4");
    assert_eq!(said(r.decide(&t, &k, || 0)), "rule Blackhole");
}

/// The kernel's answers with `lookup 203 suppress_prefixlength 25`, `lookup 202
/// suppress_prefixlength 0`, `lookup 201`: an unreachable /25 ends the walk (no
/// suppression of a failed lookup), a /25 unicast route is suppressed, a /24 in 202 is
/// taken; a blackhole default route under `suppress_prefixlength 0` ends it too.
#[test]
fn suppress_prefixlength_refuses_short_routes_not_errors() {
    let mut t = tables(vec![
        (TABLE_MAIN, main4()),
        (201, vec![via("203.0.113.0/24", "192.0.2.3", 0)]),
        (
            202,
            vec![
                via("203.0.113.0/24", "192.0.2.4", 0),
                kind("0.0.0.0/0", RouteKind::Blackhole),
            ],
        ),
        (
            203,
            vec![
                via("203.0.113.0/24", "192.0.2.5", 0),
                kind("203.0.113.0/25", RouteKind::Unreachable),
                via("203.0.113.128/25", "192.0.2.9", 0),
            ],
        ),
    ]);
    let mut s25 = rule(5, Action::Lookup(203));
    s25.suppress_prefixlength = Some(25);
    let mut s0 = rule(6, Action::Lookup(202));
    s0.suppress_prefixlength = Some(0);
    let r = rules(vec![s25, s0, rule(7, Action::Lookup(201))]);
    let d = |t: &BTreeMap<u32, Routes>, dst| said(r.decide(t, &key("198.51.100.9", dst, 1), || 0));
    assert_eq!(d(&t, "203.0.113.5"), "203 Unreachable");
    assert_eq!(d(&t, "203.0.113.200"), "202 via 192.0.2.4");
    assert_eq!(d(&t, "192.0.2.77"), "202 Blackhole");
    // Without the unreachable /25, 203's /24 is suppressed (24 ≤ 25).
    if let Some(x) = t.get_mut(&203) {
        x.remove(p4("203.0.113.0/25"));
    }
    assert_eq!(d(&t, "203.0.113.5"), "202 via 192.0.2.4");
    if let Some(x) = t.get_mut(&202) {
        x.insert(via("203.0.113.0/26", "192.0.2.10", 0))
            .expect("route");
    }
    assert_eq!(d(&t, "203.0.113.5"), "202 via 192.0.2.10");
    assert_eq!(d(&t, "203.0.113.100"), "202 via 192.0.2.4");
}

/// IPv4 rules compare the TOS field's three bits (`tos & 0x1c`), IPv6 rules the whole
/// DSCP (`tclass & 0xfc`): each row is the kernel's answer for rules `tos 0x10 lookup
/// 200`, `tos 0x04 lookup 201` (and, for IPv6, `tos 0xfc lookup 201`).
#[test]
fn tos_is_compared_as_linux_6_compares_it() {
    let t = tables(vec![
        (TABLE_MAIN, main4()),
        (200, vec![via("203.0.113.0/24", "192.0.2.2", 0)]),
        (201, vec![via("203.0.113.0/24", "192.0.2.3", 0)]),
    ]);
    let mut a = rule(10, Action::Lookup(200));
    a.tos = Some(0x10);
    let mut b = rule(11, Action::Lookup(201));
    b.tos = Some(0x04);
    let r = rules(vec![a, b]);
    for (tos, want) in [
        (0x00, "no route"),
        (0x10, "200 via 192.0.2.2"),
        (0x11, "200 via 192.0.2.2"),
        (0x12, "200 via 192.0.2.2"),
        (0x13, "200 via 192.0.2.2"),
        (0x14, "no route"),
        (0x30, "200 via 192.0.2.2"),
        (0x50, "200 via 192.0.2.2"),
        (0x90, "200 via 192.0.2.2"),
        (0xb0, "200 via 192.0.2.2"),
        (0x04, "201 via 192.0.2.3"),
        (0x24, "201 via 192.0.2.3"),
        (0xe4, "201 via 192.0.2.3"),
        (0xfc, "no route"),
        (0x1c, "no route"),
    ] {
        let k = Key {
            tos,
            ..key("198.51.100.9", "203.0.113.5", 1)
        };
        assert_eq!(said(r.decide(&t, &k, || 0)), want, "tos {tos:#04x}");
    }

    let gw = |s: &str| Some(s.parse::<Ipv6Addr>().expect("gw"));
    let t6 = tables(vec![
        (
            200,
            vec![Route6::new(
                p6("2001:db8:9::/48"),
                RouteKind::Unicast,
                Some(1),
                gw("2001:db8:2::3"),
            )],
        ),
        (
            201,
            vec![Route6::new(
                p6("2001:db8:9::/48"),
                RouteKind::Unicast,
                Some(1),
                gw("2001:db8:2::4"),
            )],
        ),
    ]);
    let mut r6 = Rules6::new();
    for (pref, tos, table) in [(10, 0x10, 200), (11, 0x04, 201), (12, 0xfc, 201)] {
        let mut x = Rule6::new(pref, Action::Lookup(table));
        x.tos = Some(tos);
        r6.add(x).expect("rule");
    }
    for (tos, want) in [
        (0x00, None),
        (0x10, Some(200)),
        (0x11, Some(200)),
        (0x13, Some(200)),
        (0x14, None),
        (0x30, None),
        (0x90, None),
        (0x04, Some(201)),
        (0x24, None),
        (0xe4, None),
        (0xfc, Some(201)),
        (0x1c, None),
    ] {
        let k = Key6 {
            src: a6("2001:db8:1::9"),
            dst: a6("2001:db8:9::5"),
            iif: 0,
            mark: 0,
            proto: 17,
            sport: 0,
            dport: 0,
            tos,
        };
        let got = match r6.decide(&t6, &k, || 0) {
            DecisionOf::Route { table, .. } => Some(table),
            _ => None,
        };
        assert_eq!(got, want, "traffic class {tos:#04x}");
    }
}

/// `fwmark 0` without a mask matches every mark (the kernel keeps mask 0 and shows the
/// rule as `from all lookup 200`); `fwmark 0x10/0x30` and `not fwmark 0x10/0x30`
/// split the marks as the kernel did.
#[test]
fn marks_match_under_their_mask() {
    assert_eq!(Mark::linux(0, None), Mark { value: 0, mask: 0 });
    assert!(Mark::linux(0, None).matches(7));
    assert_eq!(Mark::linux(5, None).mask, u32::MAX);
    let t = tables(vec![
        (TABLE_MAIN, main4()),
        (200, vec![via("203.0.113.0/24", "192.0.2.2", 0)]),
        (201, vec![via("203.0.113.0/24", "192.0.2.3", 0)]),
    ]);
    let mut a = rule(5, Action::Lookup(200));
    a.fwmark = Some(Mark::linux(0x10, Some(0x30)));
    let mut b = rule(6, Action::Lookup(201));
    b.fwmark = a.fwmark;
    b.not = true;
    let r = rules(vec![a, b]);
    for (mark, want) in [
        (0x10, 200),
        (0x11, 200),
        (0x20, 201),
        (0x50, 200),
        (0x1f0, 201),
    ] {
        let k = Key {
            mark,
            ..key("198.51.100.9", "203.0.113.5", 1)
        };
        let got = match r.decide(&t, &k, || 0) {
            DecisionOf::Route { table, .. } => table,
            d => panic!("{d:?}"),
        };
        assert_eq!(got, want, "mark {mark:#x}");
    }
}

/// The kernel's answers for `ipproto tcp sport 100-200 lookup 200`, `ipproto udp dport
/// 53 lookup 201`, `iif vb0 lookup 202`, `sport 5-6 lookup 203` (ICMP has no ports: 0).
#[test]
fn protocol_ports_and_interface_select() {
    let t = tables(vec![
        (TABLE_MAIN, main4()),
        (200, vec![via("203.0.113.0/24", "192.0.2.2", 0)]),
        (201, vec![via("203.0.113.0/24", "192.0.2.3", 0)]),
        (202, vec![via("203.0.113.0/24", "192.0.2.10", 0)]),
        (203, vec![via("203.0.113.0/24", "192.0.2.5", 0)]),
    ]);
    let mut a = rule(5, Action::Lookup(200));
    a.ipproto = Some(6);
    a.sport = Some(PortRange::new(100, 200).expect("range"));
    let mut b = rule(6, Action::Lookup(201));
    b.ipproto = Some(17);
    b.dport = Some(PortRange::new(53, 53).expect("range"));
    let mut c = rule(7, Action::Lookup(202));
    c.iif = Some(0);
    let mut d = rule(9, Action::Lookup(203));
    d.sport = Some(PortRange::new(5, 6).expect("range"));
    let r = rules(vec![a, b, c, d]);
    let k = |iif, proto, sport, dport| Key {
        proto,
        sport,
        dport,
        ..key("198.51.100.9", "203.0.113.5", iif)
    };
    let table = |k: Key| match r.decide(&t, &k, || 0) {
        DecisionOf::Route { table, .. } => Some(table),
        _ => None,
    };
    assert_eq!(table(k(1, 6, 150, 1)), Some(200));
    assert_eq!(table(k(1, 6, 250, 1)), None);
    assert_eq!(table(k(1, 17, 150, 53)), Some(201));
    assert_eq!(table(k(1, 6, 150, 53)), Some(200));
    assert_eq!(table(k(1, 1, 0, 0)), None);
    assert_eq!(table(k(0, 17, 5, 53)), Some(201));
    assert_eq!(table(k(0, 17, 7, 54)), Some(202));
    assert_eq!(table(k(1, 17, 5, 54)), Some(203));
    assert_eq!(table(k(1, 17, 7, 54)), None);
}

#[test]
fn rule_actions_refuse() {
    let t = tables(vec![(TABLE_MAIN, main4())]);
    let mut list = Vec::new();
    for (pref, net, action) in [
        (50, "203.0.113.0/26", Action::Blackhole),
        (51, "203.0.113.64/26", Action::Unreachable),
        (52, "203.0.113.128/26", Action::Prohibit),
        (53, "203.0.113.192/26", Action::Nop),
    ] {
        let mut x = rule(pref, action);
        x.to = Some(p4(net));
        list.push(x);
    }
    let r = rules(list);
    let d = |dst| r.decide(&t, &key("192.0.2.9", dst, 0), || 0);
    assert_eq!(
        d("203.0.113.1"),
        DecisionOf::Refused {
            rule: 1,
            how: Refusal::Blackhole
        }
    );
    assert_eq!(
        d("203.0.113.65"),
        DecisionOf::Refused {
            rule: 2,
            how: Refusal::Unreachable
        }
    );
    assert_eq!(
        d("203.0.113.129"),
        DecisionOf::Refused {
            rule: 3,
            how: Refusal::Prohibit
        }
    );
    assert_eq!(d("203.0.113.193"), DecisionOf::NoRoute);
    // Our own address is decided by rule 0 before any of them.
    let mut first = rule(0, Action::Blackhole);
    first.to = Some(p4("192.0.2.1/32"));
    let r = rules(vec![first]);
    assert!(matches!(
        r.decide(&t, &key("198.51.100.9", "192.0.2.1", 1), || 0),
        DecisionOf::Route {
            rule: 0,
            table: TABLE_LOCAL,
            ..
        }
    ));
}

/// What the kernel refuses, refused (`ip rule add`: "Backward goto not supported",
/// "Invalid dsfield (tos): ECN bits must be 0", "Invalid tos", "Invalid sport range").
#[test]
fn bad_rules_are_refused() {
    let mut r = Rules::new();
    assert_eq!(r.add(rule(5, Action::Lookup(0))), Err(RuleError::TableZero));
    assert_eq!(
        r.add(rule(5, Action::Goto(5))),
        Err(RuleError::BackwardGoto { pref: 5, target: 5 })
    );
    assert_eq!(
        r.add(rule(5, Action::Goto(4))),
        Err(RuleError::BackwardGoto { pref: 5, target: 4 })
    );
    for tos in [0x00, 0x02, 0x03, 0x20, 0x1e] {
        let mut x = rule(1, Action::Lookup(1));
        x.tos = Some(tos);
        assert_eq!(
            r.add(x),
            Err(RuleError::Tos { tos, mask: 0x1c }),
            "{tos:#x}"
        );
    }
    let mut x = Rule6::new(1, Action::Lookup(1));
    x.tos = Some(0x02);
    assert!(Rules6::new().add(x.clone()).is_err());
    x.tos = Some(0xfc);
    assert!(Rules6::new().add(x).is_ok());
    for (lo, hi) in [(0, 5), (5, 65535), (9, 5), (0, 0)] {
        assert_eq!(PortRange::new(lo, hi), Err(RuleError::Ports(lo, hi)));
    }
    assert!(PortRange::new(1, 65534).is_ok());
    assert_eq!(
        r.remove(|x| x.pref == 0).map(|_| ()),
        Err(RuleError::LocalRule)
    );
    assert_eq!(
        r.remove(|x| x.pref == 7).map(|_| ()),
        Err(RuleError::NotFound)
    );
    assert_eq!(
        r.remove(|x| x.pref == 32767).map(|x| x.action),
        Ok(Action::Lookup(253))
    );
    assert!(!r.is_default());
    assert!(r.iter().all(|x| x.pref != 32767));
}

/// Linux numbers a rule added without a priority one below the second rule's.
#[test]
fn the_default_priority_is_below_the_second_rule() {
    let mut r = Rules::new();
    assert_eq!(r.default_pref(), 32765);
    r.add(rule(5, Action::Lookup(7))).expect("rule");
    assert_eq!(r.default_pref(), 4);
    r.add(rule(0, Action::Lookup(7))).expect("rule");
    assert_eq!(r.default_pref(), 0);
}

/// A multipath route's next hop is chosen by the flow hash, asked once whatever the
/// number of tables looked up; a single-path walk asks none.
#[test]
fn the_flow_hash_is_asked_once_and_only_for_multipath() {
    let hop = |g: &str, i| NextHopOf {
        gateway: Some(g.parse().expect("gw")),
        out_if: i,
        weight: 1,
    };
    let m = MultipathOf::new(vec![hop("192.0.2.2", 0), hop("198.51.100.2", 1)]).expect("hops");
    let t = tables::<V4>(vec![
        (TABLE_MAIN, main4()),
        (1, vec![Route::multipath(p4("203.0.113.0/24"), m)]),
        (2, vec![via("203.0.113.0/25", "192.0.2.3", 0)]),
    ]);
    let mut sup = rule(1, Action::Lookup(2));
    sup.suppress_prefixlength = Some(25);
    let r = rules(vec![sup, rule(2, Action::Lookup(1))]);
    let calls = core::cell::Cell::new(0);
    let d = r.decide(&t, &key("192.0.2.9", "203.0.113.5", 0), || {
        calls.set(calls.get() + 1);
        u32::MAX
    });
    assert_eq!(calls.get(), 1);
    let want = t
        .get(&1)
        .and_then(|x| x.lookup_flow(a4("203.0.113.5"), || u32::MAX));
    assert!(
        matches!(d, DecisionOf::Route { table: 1, adj, hop, .. } if Some((adj, hop)) == want),
        "{d:?}"
    );
    calls.set(0);
    let d = r.decide(&t, &key("192.0.2.9", "192.0.2.7", 0), || {
        calls.set(calls.get() + 1);
        0
    });
    assert_eq!(calls.get(), 0);
    assert!(matches!(
        d,
        DecisionOf::Route {
            table: TABLE_MAIN,
            ..
        }
    ));
}

// ---- properties ----

/// Addresses in three /24s, so that prefixes and keys meet.
fn arb_addr() -> impl Strategy<Value = u32> {
    (
        prop::sample::select(vec![0xc000_0200u32, 0xc633_6400, 0xcb00_7100]),
        prop_oneof![Just(0u32), Just(1), Just(255), 0u32..256],
    )
        .prop_map(|(net, host)| net | host)
}

fn arb_prefix() -> impl Strategy<Value = Ipv4Prefix> {
    (
        arb_addr(),
        // A short prefix costs a table load a write of much of DIR-24-8's first level:
        // rarer.
        prop_oneof![
            1 => Just(0u8),
            2 => Just(16u8),
            40 => prop::sample::select(vec![24u8, 25, 26, 28, 30, 32]),
        ],
    )
        .prop_map(|(a, len)| Ipv4Prefix::truncating(Ipv4Addr::from(a), len))
}

const TABLE_IDS: [u32; 6] = [1, 2, 3, TABLE_DEFAULT, TABLE_MAIN, TABLE_LOCAL];

fn arb_route() -> impl Strategy<Value = Route> {
    let kind = prop_oneof![
        6 => Just(RouteKind::Unicast),
        1 => Just(RouteKind::Local),
        1 => Just(RouteKind::Broadcast),
        1 => Just(RouteKind::Blackhole),
        1 => Just(RouteKind::Unreachable),
        1 => Just(RouteKind::Prohibit),
        2 => Just(RouteKind::Throw),
    ];
    (arb_prefix(), kind, 0u16..3, prop::option::of(1u8..5)).prop_map(|(p, k, i, g)| {
        if k == RouteKind::Unicast {
            Route::new(p, k, Some(i), g.map(|g| Ipv4Addr::new(192, 0, 2, g)))
        } else if matches!(k, RouteKind::Local | RouteKind::Broadcast) {
            Route::new(p, k, Some(i), None)
        } else {
            Route::new(p, k, None, None)
        }
    })
}

fn arb_tables() -> impl Strategy<Value = BTreeMap<u32, Vec<Route>>> {
    prop::collection::vec(
        (
            prop::sample::select(vec![1u32, 2, 3, TABLE_DEFAULT, TABLE_MAIN]),
            prop::collection::vec(arb_route(), 0..10),
        ),
        0..6,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn arb_range() -> impl Strategy<Value = PortRange> {
    prop::sample::select(vec![(1u16, 10u16), (5, 5), (8, 20), (100, 65534)])
        .prop_map(|(lo, hi)| PortRange::new(lo, hi).expect("range"))
}

/// A rule of priority 1 to 40 (often equal to another's), with random selectors and any
/// action; a goto's target lies ahead.
fn arb_rule() -> impl Strategy<Value = Rule> {
    let action = prop_oneof![
        10 => prop::sample::select(TABLE_IDS.to_vec()).prop_map(Action::Lookup),
        3 => (1u32..12).prop_map(Action::Goto),
        1 => Just(Action::Nop),
        1 => Just(Action::Blackhole),
        1 => Just(Action::Unreachable),
        1 => Just(Action::Prohibit),
    ];
    let selectors = (
        any::<u8>(),
        prop::option::of(arb_prefix()),
        prop::option::of(arb_prefix()),
        prop::option::of(0u16..3),
        prop::option::of((
            prop::sample::select(vec![0u32, 1, 2, 3, 0x10]),
            prop::option::of(prop::sample::select(vec![0x1u32, 0x3, 0xff])),
        )),
        prop::option::of(prop::sample::select(vec![1u8, 6, 17])),
        prop::option::of(arb_range()),
        prop::option::of(arb_range()),
        prop::option::of(prop::sample::select(vec![0x04u8, 0x08, 0x10, 0x1c])),
    );
    (
        1u32..40,
        selectors,
        action,
        prop::option::of(prop::sample::select(vec![0u8, 16, 24, 25, 28, 32])),
    )
        .prop_map(|(pref, s, action, suppress)| {
            let (not, from, to, iif, mark, ipproto, sport, dport, tos) = s;
            let action = match action {
                Action::Goto(d) => Action::Goto(pref + d),
                a => a,
            };
            Rule {
                pref,
                not: not < 25,
                from,
                to,
                iif,
                fwmark: mark.map(|(v, m)| Mark::linux(v, m)),
                ipproto,
                sport,
                dport,
                tos,
                action,
                suppress_prefixlength: suppress.filter(|_| matches!(action, Action::Lookup(_))),
            }
        })
}

fn arb_key() -> impl Strategy<Value = Key> {
    (
        arb_addr(),
        arb_addr(),
        0u16..3,
        prop::sample::select(vec![0u32, 1, 2, 3, 0x10, 0x11, 0xff]),
        prop::sample::select(vec![1u8, 6, 17]),
        0u16..25,
        0u16..25,
        prop::sample::select(vec![0u8, 0x04, 0x08, 0x10, 0x11, 0x14, 0x1c, 0x30, 0xfc]),
    )
        .prop_map(|(src, dst, iif, mark, proto, sport, dport, tos)| Key {
            src,
            dst,
            iif,
            mark,
            proto,
            sport,
            dport,
            tos,
        })
}

fn build_tables(t: &BTreeMap<u32, Vec<Route>>) -> BTreeMap<u32, Routes> {
    t.iter()
        .map(|(&id, routes)| {
            let mut r = Routes::new();
            r.load(routes.iter().cloned()).expect("routes");
            (id, r)
        })
        .collect()
}

/// The rules of `list` a rule set takes, in order (those the kernel would take for one
/// already there left out), as it keeps them (a `/0` prefix and `fwmark 0/0` are no
/// selector).
fn accepted(list: &[Rule]) -> Vec<Rule> {
    let mut set = Rules::new();
    let mut out = Vec::new();
    for r in list {
        if set.add(r.clone()).is_ok() {
            out.push(Rule {
                from: r.from.filter(|p| p.prefix_len() != 0),
                to: r.to.filter(|p| p.prefix_len() != 0),
                fwmark: r.fwmark.filter(|m| *m != Mark { value: 0, mask: 0 }),
                ..r.clone()
            });
        }
    }
    out
}

/// The rule set of the rules of `list` it takes.
fn build_rules(list: &[Rule]) -> Rules {
    rules(accepted(list))
}

/// The route of `routes` for `dst` by linear scan (a later route of the same prefix
/// replaces an earlier one, as a table load does).
fn linear(routes: &[Route], dst: u32) -> Option<&Route> {
    let mut by_prefix: BTreeMap<Ipv4Prefix, &Route> = BTreeMap::new();
    for r in routes {
        by_prefix.insert(r.prefix, r);
    }
    by_prefix
        .into_values()
        .filter(|r| {
            let len = r.prefix.prefix_len();
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            dst & mask == r.prefix.bits()
        })
        .max_by_key(|r| r.prefix.prefix_len())
}

/// What the model says, comparable with [`RulesOf::decide`]'s decision: the deciding
/// rule (by its content), the table and the route's (kind, interface, gateway).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    Route(Rule, u32, RouteKind, u16, u32),
    Refused(Rule, Refusal),
    NoRoute,
}

fn said_of(rules: &Rules, d: Decision) -> Said {
    let rule_at = |i: usize| {
        rules
            .iter()
            .nth(i)
            .cloned()
            .expect("the deciding rule exists")
    };
    match d {
        DecisionOf::Route {
            table, rule, hop, ..
        } => Said::Route(rule_at(rule), table, hop.kind, hop.out_if, hop.gateway),
        DecisionOf::Refused { rule, how } => Said::Refused(rule_at(rule), how),
        DecisionOf::NoRoute => Said::NoRoute,
    }
}

/// Whether `r` matches `k`, selector by selector, written from the module's description.
fn model_matches(r: &Rule, k: &Key) -> bool {
    let inside = |p: &Option<Ipv4Prefix>, a: u32| {
        p.is_none_or(|p| {
            let shift = 32 - u32::from(p.prefix_len());
            shift == 32 || a >> shift == p.bits() >> shift
        })
    };
    let ports =
        |r: &Option<PortRange>, port: u16| r.is_none_or(|r| r.lo() <= port && port <= r.hi());
    let all = inside(&r.from, k.src)
        && inside(&r.to, k.dst)
        && r.iif.is_none_or(|i| i == k.iif)
        && r.fwmark.is_none_or(|m| k.mark & m.mask == m.value & m.mask)
        && r.ipproto.is_none_or(|p| p == k.proto)
        && ports(&r.sport, k.sport)
        && ports(&r.dport, k.dport)
        && r.tos.is_none_or(|t| (k.tos >> 2) & 7 == t >> 2);
    if r.not { !all } else { all }
}

/// The walk, recursively from rule `i` of `sorted` (the rules in priority order, equal
/// priorities in the order added), tables looked up by linear scan.
fn model(sorted: &[Rule], tables: &BTreeMap<u32, Vec<Route>>, k: &Key, i: usize) -> Said {
    let Some(r) = sorted.get(i) else {
        return Said::NoRoute;
    };
    if !model_matches(r, k) {
        return model(sorted, tables, k, i + 1);
    }
    let table = match r.action {
        Action::Goto(t) => {
            let at = sorted.iter().position(|x| x.pref == t).unwrap_or(i + 1);
            return model(sorted, tables, k, at);
        }
        Action::Nop => return model(sorted, tables, k, i + 1),
        Action::Blackhole => return Said::Refused(r.clone(), Refusal::Blackhole),
        Action::Unreachable => return Said::Refused(r.clone(), Refusal::Unreachable),
        Action::Prohibit => return Said::Refused(r.clone(), Refusal::Prohibit),
        Action::Lookup(t) => t,
    };
    let in_table = if table == TABLE_LOCAL {
        TABLE_MAIN
    } else {
        table
    };
    let found = tables
        .get(&in_table)
        .and_then(|routes| linear(routes, k.dst))
        .filter(|route| {
            let ok = matches!(
                route.kind,
                RouteKind::Unicast | RouteKind::Local | RouteKind::Broadcast
            );
            let suppressed = ok
                && r.suppress_prefixlength
                    .is_some_and(|n| route.prefix.prefix_len() <= n);
            let local_only = table == TABLE_LOCAL
                && !matches!(route.kind, RouteKind::Local | RouteKind::Broadcast);
            route.kind != RouteKind::Throw && !suppressed && !local_only
        });
    match found {
        Some(route) => Said::Route(
            r.clone(),
            table,
            route.kind,
            route.out_if.unwrap_or(u16::MAX),
            route.gateway.map_or(0, u32::from),
        ),
        None => model(sorted, tables, k, i + 1),
    }
}

/// The rules as the walk orders them: the defaults, then `list` in the order added,
/// stably by priority.
fn sorted(list: &[Rule]) -> Vec<Rule> {
    let mut all: Vec<Rule> = Rules::new().iter().cloned().collect();
    all.extend_from_slice(list);
    all.sort_by_key(|r| r.pref);
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The walk over the FIBs decides as the recursive model over linear scans does,
    /// for random rule sets (every selector and action, gotos, suppression) and tables
    /// (every route kind, throw included), and keeps the rules in priority order.
    #[test]
    fn the_walk_decides_as_the_model(
        list in prop::collection::vec(arb_rule(), 0..14),
        t in arb_tables(),
        keys in prop::collection::vec(arb_key(), 40),
    ) {
        let list = accepted(&list);
        let rules = build_rules(&list);
        let order = sorted(&list);
        prop_assert_eq!(rules.iter().cloned().collect::<Vec<_>>(), order.clone());
        let fibs = build_tables(&t);
        for k in &keys {
            let got = said_of(&rules, rules.decide(&fibs, k, || 0));
            prop_assert_eq!(got, model(&order, &t, k, 0), "key {:?}", k);
        }
    }

    /// Rules of distinct priorities decide the same whatever order they were added in.
    #[test]
    fn the_order_added_does_not_matter_across_priorities(
        list in prop::collection::vec(arb_rule(), 0..12),
        t in arb_tables(),
        keys in prop::collection::vec(arb_key(), 30),
        seed in any::<u64>(),
    ) {
        let mut seen = std::collections::BTreeSet::new();
        let list: Vec<Rule> = list.into_iter().filter(|r| seen.insert(r.pref)).collect();
        let mut shuffled = list.clone();
        // A Fisher-Yates shuffle driven by the seed.
        let mut s = seed | 1;
        for i in (1..shuffled.len()).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            shuffled.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let (a, b) = (build_rules(&list), build_rules(&shuffled));
        prop_assert_eq!(&a, &b);
        let fibs = build_tables(&t);
        for k in &keys {
            prop_assert_eq!(a.decide(&fibs, k, || 0), b.decide(&fibs, k, || 0));
        }
    }

    /// A `nop` rule, or a goto to a priority no rule has, changes no decision (but the
    /// deciding rule's index, which counts it).
    #[test]
    fn nops_and_unresolved_gotos_change_nothing(
        list in prop::collection::vec(arb_rule(), 0..12),
        extra in arb_rule(),
        t in arb_tables(),
        keys in prop::collection::vec(arb_key(), 30),
    ) {
        let list = accepted(&list);
        // (Not where an unresolved goto of the list points: the new rule would resolve it.)
        prop_assume!(list.iter().all(|r| r.action != Action::Goto(extra.pref)));
        let base = build_rules(&list);
        let fibs = build_tables(&t);
        let free = (extra.pref + 1..extra.pref + 100)
            .find(|p| list.iter().all(|r| r.pref != *p))
            .expect("a free priority");
        for action in [Action::Nop, Action::Goto(free)] {
            let mut with = base.clone();
            // (Unless the kernel would take it for a rule already there.)
            if with.add(Rule { action, suppress_prefixlength: None, ..extra.clone() }).is_err() {
                continue;
            }
            for k in &keys {
                prop_assert_eq!(
                    said_of(&with, with.decide(&fibs, k, || 0)),
                    said_of(&base, base.decide(&fibs, k, || 0))
                );
            }
        }
    }

    /// A goto from priority `p` to `t` skips, for the packets it matches, exactly the
    /// rules of priorities strictly between (in a rule set with no other goto).
    #[test]
    fn a_goto_skips_the_rules_between(
        list in prop::collection::vec(arb_rule(), 0..14),
        goto in arb_rule(),
        span in 1u32..15,
        t in arb_tables(),
        keys in prop::collection::vec(arb_key(), 30),
    ) {
        let list: Vec<Rule> = list
            .into_iter()
            .filter(|r| !matches!(r.action, Action::Goto(_)))
            .collect();
        let list = accepted(&list);
        let (p, target) = (goto.pref, goto.pref + span);
        let g = Rule { action: Action::Goto(target), suppress_prefixlength: None, ..goto };
        // A rule at the target (a nop changes nothing) so that the goto resolves.
        let mut with = list.clone();
        with.push(Rule::new(target, Action::Nop));
        let mut with = accepted(&with);
        let plain = build_rules(&with);
        with.push(g.clone());
        let jumping = build_rules(&with);
        prop_assert_eq!(jumping.len(), plain.len() + 1, "the goto taken");
        let skipped: Vec<Rule> = with[..with.len() - 1]
            .iter()
            .filter(|r| r.pref <= p || r.pref >= target)
            .cloned()
            .collect();
        let skipping = build_rules(&skipped);
        let fibs = build_tables(&t);
        for k in &keys {
            // The rules before the goto are the same in all three sets; past it, the
            // walk goes on at the target's priority if the goto matches, else with the
            // rules between.
            let want = if g.matches(k) {
                said_of(&skipping, skipping.decide(&fibs, k, || 0))
            } else {
                said_of(&plain, plain.decide(&fibs, k, || 0))
            };
            prop_assert_eq!(said_of(&jumping, jumping.decide(&fibs, k, || 0)), want, "key {:?}", k);
        }
    }

    /// `not` matches exactly the keys its rule without `not` does not.
    #[test]
    fn not_is_the_complement(r in arb_rule(), keys in prop::collection::vec(arb_key(), 50)) {
        let flipped = Rule { not: !r.not, ..r.clone() };
        for k in &keys {
            prop_assert_ne!(r.matches(k), flipped.matches(k));
        }
    }

    /// A first rule `lookup T suppress_prefixlength N` decides exactly when T's route
    /// (by linear scan) is a drop, or a unicast, local or broadcast route longer than
    /// `N` bits; otherwise the decision is the default rules'.
    #[test]
    fn suppression_is_by_the_matched_length(
        t in arb_tables(),
        table in prop::sample::select(vec![1u32, 2, 3]),
        n in 0u8..=32,
        keys in prop::collection::vec(arb_key(), 40),
    ) {
        let mut s = Rule::new(1, Action::Lookup(table));
        s.suppress_prefixlength = Some(n);
        let with = build_rules(&[s]);
        let without = Rules::new();
        let fibs = build_tables(&t);
        for k in &keys {
            let local = matches!(
                t.get(&TABLE_MAIN).and_then(|m| linear(m, k.dst)).map(|r| r.kind),
                Some(RouteKind::Local | RouteKind::Broadcast)
            );
            let route = t.get(&table).and_then(|routes| linear(routes, k.dst));
            let decides = route.is_some_and(|r| match r.kind {
                RouteKind::Throw => false,
                RouteKind::Unicast | RouteKind::Local | RouteKind::Broadcast => {
                    r.prefix.prefix_len() > n
                }
                _ => true,
            });
            let got = with.decide(&fibs, k, || 0);
            if local {
                let ok = matches!(got, DecisionOf::Route { table: TABLE_LOCAL, .. });
                prop_assert!(ok, "local view: {:?}", got);
            } else if decides {
                let ok = matches!(got, DecisionOf::Route { table: x, rule: 1, .. } if x == table);
                prop_assert!(ok, "table {}: {:?}", table, got);
            } else {
                prop_assert_eq!(
                    said_of(&with, got),
                    said_of(&without, without.decide(&fibs, k, || 0))
                );
            }
        }
    }
}

/// The IPv6 walk finds the matched length too (`suppress_prefixlength` over `fib6`).
#[test]
fn ipv6_suppression_uses_the_matched_length() {
    let gw = Some("2001:db8:2::2".parse::<Ipv6Addr>().expect("gw"));
    let t = tables::<V6>(vec![
        (
            1,
            vec![
                Route6::new(p6("2001:db8::/32"), RouteKind::Unicast, Some(1), gw),
                Route6::new(p6("2001:db8:9:8::/64"), RouteKind::Unicast, Some(0), gw),
                Route6::new(p6("2001:db8:9:8:7::/80"), RouteKind::Unicast, Some(2), gw),
            ],
        ),
        (
            2,
            vec![Route6::new(p6("::/0"), RouteKind::Unicast, Some(3), gw)],
        ),
    ]);
    let mut r = Rules6::new();
    let mut s = Rule6::new(1, Action::Lookup(1));
    s.suppress_prefixlength = Some(64);
    r.add(s).expect("rule");
    r.add(Rule6::new(2, Action::Lookup(2))).expect("rule");
    let out = |dst: &str| {
        let k = Key6 {
            src: a6("2001:db8:1::9"),
            dst: a6(dst),
            iif: 0,
            mark: 0,
            proto: 6,
            sport: 0,
            dport: 0,
            tos: 0,
        };
        match r.decide(&t, &k, || 0) {
            DecisionOf::Route { table, hop, .. } => (table, hop.out_if),
            d => panic!("{d:?}"),
        }
    };
    assert_eq!(out("2001:db8:5::1"), (2, 3), "/32 suppressed");
    assert_eq!(out("2001:db8:9:8::1"), (2, 3), "/64 suppressed");
    assert_eq!(out("2001:db8:9:8:7::1"), (1, 2), "/80 kept");
    let _ = V4;
}

/// A route found in a numbered table has an adjacency that names the table
/// (`ADJ_TABLE`): the policy finds its hop there, and the main table, which has its own
/// hops at the same indices, finds nothing for it; a main route's adjacency is main's.
#[test]
fn a_numbered_tables_adjacency_names_its_table() {
    use std::sync::Arc;

    use crate::route::{ADJ_ON_LINK, ADJ_TABLE, ADJ_TABLE_SHIFT};

    let main = tables(vec![(TABLE_MAIN, main4())])
        .remove(&TABLE_MAIN)
        .expect("main");
    let numbered: BTreeMap<u32, Arc<Routes>> = tables(vec![
        (7, vec![via("203.0.113.0/24", "198.51.100.7", 1)]),
        (9, vec![via("203.0.113.0/24", "198.51.100.9", 1)]),
    ])
    .into_iter()
    .map(|(id, t)| (id, Arc::new(t)))
    .collect();
    let mut r = Rules::new();
    let mut x = rule(1, Action::Lookup(9));
    x.iif = Some(1);
    r.add(x).expect("rule");
    r.add(rule(2, Action::Lookup(7))).expect("rule");
    let policy = Policy::new(r, numbered).expect("policy");
    assert!(policy.walks());
    for (iif, slot, gw) in [(1u16, 2u32, "198.51.100.9"), (0, 1, "198.51.100.7")] {
        let d = policy.decide(&main, &key("192.0.2.9", "203.0.113.5", iif), || 0);
        let DecisionOf::Route { adj, hop, .. } = d else {
            panic!("{d:?}")
        };
        assert_eq!(
            (adj & ADJ_TABLE) >> ADJ_TABLE_SHIFT,
            slot,
            "slot of its table"
        );
        assert_eq!(policy.hop(&main, adj), Some(hop));
        assert_eq!(hop.gateway, a4(gw));
        assert_eq!(main.hop(adj), None, "not main's");
    }
    // Main's own routes keep plain adjacencies.
    let d = policy.decide(&main, &key("203.0.113.5", "192.0.2.7", 1), || 0);
    let DecisionOf::Route {
        adj, hop, table, ..
    } = d
    else {
        panic!("{d:?}")
    };
    assert_eq!((table, adj & ADJ_TABLE), (TABLE_MAIN, 0));
    assert_ne!(adj & ADJ_ON_LINK, 0);
    assert_eq!(policy.hop(&main, adj), Some(hop));
    // The default rules and no table default: nothing to walk.
    assert!(
        !Policy::new(Rules::new(), BTreeMap::new())
            .expect("policy")
            .walks()
    );
    let default: BTreeMap<u32, Arc<Routes>> = tables(vec![(
        TABLE_DEFAULT,
        vec![via("0.0.0.0/0", "192.0.2.3", 0)],
    )])
    .into_iter()
    .map(|(id, t)| (id, Arc::new(t)))
    .collect();
    assert!(Policy::new(Rules::new(), default).expect("policy").walks());
}

/// More numbered tables than an adjacency can name are refused.
#[test]
fn at_most_max_tables_tables() {
    use std::sync::Arc;

    let one = |i: u32| {
        let mut t = Routes::new();
        t.insert(via("203.0.113.0/24", "198.51.100.7", 1))
            .expect("route");
        (i, Arc::new(t))
    };
    // (Numbered from 1000: main and local would not count.)
    let fits: BTreeMap<u32, Arc<Routes>> = (1000..1000 + MAX_TABLES as u32).map(one).collect();
    assert!(Policy::new(Rules::new(), fits).is_ok());
    let over: BTreeMap<u32, Arc<Routes>> = (1000..=1000 + MAX_TABLES as u32).map(one).collect();
    assert_eq!(
        Policy::new(Rules::new(), over).map(|_| ()),
        Err(RuleError::TooManyTables(MAX_TABLES + 1))
    );
}

/// What the kernel refused as `File exists` (asked by hand of `ip rule add` on Linux
/// 6.18), refused: the same rule, the same with `not`, a goto to another target, a rule
/// without a destination after one with it (not the other way round), `fwmark 0` as no
/// mark; taken: another `suppress_prefixlength`, another priority.
#[test]
fn a_rule_like_one_already_there_is_refused_as_linux_does() {
    let to = |pref, action| {
        let mut x = rule(pref, action);
        x.to = Some(p4("192.0.2.0/24"));
        x
    };
    let mut r = Rules::new();
    r.add(to(5, Action::Lookup(7))).expect("rule");
    let exists = |x| matches!(x, Err(RuleError::Exists { pref: 5, .. }));
    assert!(exists(r.add(to(5, Action::Lookup(7)))));
    assert!(exists(r.add(Rule {
        not: true,
        ..to(5, Action::Lookup(7))
    })));
    let mut suppress = to(5, Action::Lookup(7));
    suppress.suppress_prefixlength = Some(3);
    r.add(suppress).expect("another suppress_prefixlength");
    r.add(to(6, Action::Lookup(7))).expect("another priority");
    r.add(to(5, Action::Goto(9))).expect("rule");
    assert!(exists(r.add(to(5, Action::Goto(10)))));
    // No destination, after the same with one: the kernel compares only what is given.
    assert!(exists(r.add(rule(5, Action::Lookup(7)))));
    let mut mark0 = rule(5, Action::Lookup(7));
    mark0.fwmark = Some(Mark::linux(0, None));
    assert!(exists(r.add(mark0)));
    // The other way round: a destination after none is taken.
    let mut r = Rules::new();
    r.add(rule(5, Action::Lookup(7))).expect("rule");
    r.add(to(5, Action::Lookup(7)))
        .expect("a destination after none");
    // The defaults are there already.
    assert!(matches!(
        Rules::new().add(rule(0, Action::Lookup(TABLE_LOCAL))),
        Err(RuleError::Exists { pref: 0, .. })
    ));
}

/// VRFs (`PolicyOf::with_vrfs`): interface 2 is in VRF 10, interface 3 in VRF 20, both
/// with 10.0.0.1/24 on them (overlapping) and 203.0.113.0/24 to gateways of their own;
/// main has its own 203.0.113.0/24. A packet is routed in its interface's VRF, its
/// addresses local only there, no route there is no route (never main's), a rule before
/// priority 1000 still applies to it and one after does not, and each decision's
/// adjacency names the VRF's table.
#[test]
fn a_vrfs_packets_route_in_its_table_as_linux_l3mdev() {
    use std::sync::Arc;

    use crate::route::{ADJ_TABLE, ADJ_TABLE_SHIFT};

    let mut main_routes = main4();
    main_routes.push(via("203.0.113.0/24", "192.0.2.9", 0));
    let main = tables(vec![(TABLE_MAIN, main_routes)])
        .remove(&TABLE_MAIN)
        .expect("main");
    let vrf = |iif: u16, gw: &str| {
        vec![
            Route::new(p4("10.0.0.0/24"), RouteKind::Unicast, Some(iif), None),
            Route::new(p4("10.0.0.1/32"), RouteKind::Local, Some(iif), None),
            Route::new(p4("10.0.0.255/32"), RouteKind::Broadcast, Some(iif), None),
            via("203.0.113.0/24", gw, iif),
        ]
    };
    let numbered: BTreeMap<u32, Arc<Routes>> = tables(vec![
        (10, vrf(2, "10.0.0.10")),
        (20, vrf(3, "10.0.0.20")),
        (100, vec![via("198.18.0.0/15", "192.0.2.7", 0)]),
    ])
    .into_iter()
    .map(|(id, t)| (id, Arc::new(t)))
    .collect();
    let iif = [TABLE_MAIN, TABLE_MAIN, 10, 20];
    let policy = Policy::with_vrfs(Rules::new(), numbered.clone(), &iif).expect("policy");
    assert!(policy.walks() && policy.has_vrfs() && policy.uses().iif);
    assert_eq!(policy.vrf_tables(), &[10, 20]);
    let said_in = |p: &Policy, src: &str, dst: &str, iif: u16| {
        said(p.decide(&main, &key(src, dst, iif), || 0))
    };
    for p in [
        policy.clone(),
        // The same with a rule that does not match: the walk, not the one lookup.
        Policy::with_vrfs(
            rules(vec![{
                let mut r = rule(500, Action::Blackhole);
                r.fwmark = Some(Mark::linux(9, None));
                r
            }]),
            numbered.clone(),
            &iif,
        )
        .expect("policy"),
    ] {
        assert_eq!(
            said_in(&p, "10.0.0.5", "203.0.113.1", 2),
            "10 via 10.0.0.10"
        );
        assert_eq!(
            said_in(&p, "10.0.0.5", "203.0.113.1", 3),
            "20 via 10.0.0.20"
        );
        assert_eq!(
            said_in(&p, "198.51.100.5", "203.0.113.1", 1),
            "main via 192.0.2.9"
        );
        // Its own address is local in each VRF; main's is nothing there.
        assert_eq!(said_in(&p, "10.0.0.5", "10.0.0.1", 3), "20 Local");
        assert_eq!(said_in(&p, "10.0.0.5", "192.0.2.1", 2), "no route");
        // And a VRF's address is not main's.
        assert_eq!(said_in(&p, "198.51.100.5", "10.0.0.1", 1), "no route");
    }
    // A rule before 1000 applies to a VRF's packets; one after it does not. Its `iif`
    // is the VRF's interface, as Linux matches it (its VRF device never does: checked in
    // the kernel lab under Debian's 6.1).
    let mut early = rule(100, Action::Lookup(100));
    early.iif = Some(2);
    let late = rule(2000, Action::Prohibit);
    let p = Policy::with_vrfs(rules(vec![early, late]), numbered.clone(), &iif).expect("policy");
    assert_eq!(
        said_in(&p, "10.0.0.5", "198.18.0.1", 2),
        "100 via 192.0.2.7"
    );
    assert_eq!(
        said_in(&p, "10.0.0.5", "203.0.113.1", 2),
        "10 via 10.0.0.10"
    );
    assert_eq!(said_in(&p, "10.0.0.5", "198.18.0.1", 3), "no route");
    assert_eq!(
        said_in(&p, "198.51.100.5", "198.18.0.1", 1),
        "rule Prohibit"
    );
    // The adjacency names the VRF's table: its hop is found there, not in main.
    let d = policy.decide(&main, &key("10.0.0.5", "203.0.113.1", 3), || 0);
    let DecisionOf::Route { adj, hop, rule, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(rule, L3MDEV_RULE);
    assert_ne!((adj & ADJ_TABLE) >> ADJ_TABLE_SHIFT, 0);
    assert_eq!(policy.hop(&main, adj), Some(hop));
    assert_eq!(main.hop(adj), None);
    assert_eq!(policy.vrf_routes(&main, 3).1, adj & ADJ_TABLE);
    assert_eq!(policy.vrf_routes(&main, 1).1, 0);
    // A table replaced keeps its slot (an adjacency held still names it), a new table
    // takes the next one.
    let mut changed = (*numbered[&20]).clone();
    changed
        .insert(via("203.0.113.0/24", "10.0.0.21", 3))
        .expect("route");
    let next = policy.with_table(20, Arc::new(changed)).expect("policy");
    assert_eq!(next.hop(&main, adj), Some(hop), "the held adjacency's hop");
    assert_eq!(
        said_in(&next, "10.0.0.5", "203.0.113.1", 3),
        "20 via 10.0.0.21"
    );
    let added = next
        .with_table(
            7,
            Arc::new(tables(vec![(7, main4())]).remove(&7).expect("7")),
        )
        .expect("policy");
    assert_eq!(added.hop(&main, adj), Some(hop));
    assert_eq!(added.tables().len(), 4);
    // Interfaces moved between VRFs (a reload): interface 3 to main, interface 1 into
    // VRF 10, a new VRF 30 (no routes yet) on interface 0. Every decision is the one a
    // policy built afresh with that membership makes, and the held adjacency of table 20
    // still finds its hop (its slot is kept though no interface is in VRF 20 now).
    let moved = [30, 10, 10, TABLE_MAIN];
    let live = policy.with_iif_tables(&moved).expect("policy");
    let fresh = Policy::with_vrfs(Rules::new(), numbered.clone(), &moved).expect("policy");
    assert_eq!(live.vrf_tables(), &[10, 30]);
    assert_eq!(live.vrf_tables(), fresh.vrf_tables());
    for iif in 0..4 {
        for (src, dst) in [
            ("10.0.0.5", "203.0.113.1"),
            ("10.0.0.5", "10.0.0.1"),
            ("198.51.100.5", "198.18.0.1"),
            ("198.51.100.5", "192.0.2.1"),
        ] {
            assert_eq!(
                said_in(&live, src, dst, iif),
                said_in(&fresh, src, dst, iif),
                "{src} -> {dst} in by {iif}"
            );
        }
    }
    assert_eq!(
        said_in(&live, "10.0.0.5", "203.0.113.1", 1),
        "10 via 10.0.0.10"
    );
    assert_eq!(said_in(&live, "10.0.0.5", "203.0.113.1", 0), "no route");
    assert_eq!(
        said_in(&live, "10.0.0.5", "203.0.113.1", 3),
        "main via 192.0.2.9"
    );
    assert_eq!(live.hop(&main, adj), Some(hop), "the held adjacency's hop");
}
