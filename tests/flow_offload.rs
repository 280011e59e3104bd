//! Flow offload (a FORWARD rule's `offload`, nftables' `flow add @ft`) through the whole
//! graph, in all four variants, checked against the whole path: two routers alike but
//! for the `offload` statement are fed the same frames one at a time, and every frame
//! either sends must be the other's, byte for byte: addresses, ports, TTL and every
//! checksum of what the offload rewrites by its records are what the stages it skips
//! would have written. The router masquerades out eth1 and forwards 192.0.2.1:8080 to
//! an inside server (nftables: `oifname "eth1" masquerade`, `iifname "eth1" tcp dport
//! 8080 dnat to 198.51.100.2:80`), its FORWARD chain `ct state established accept` (with
//! `flow add @ft` in one of the two), `iifname "eth0" accept`, `iifname "eth1" ct status
//! dnat accept`, policy drop. The IPv6 router (no NAT: nftables' flowtable offloads
//! IPv6 as it does IPv4) has the same FORWARD chain but the `ct status dnat` rule.

use std::sync::Arc;

use netbatch_runtime::setup::{StaticNeighbour, StaticNeighbour6};
use netbatch_scenarios::{
    self as support, GW_MAC, Gro, Lab, LabSpec, PEER, PEER6, US, US2, VARIANTS, ip,
};
use netbatch_stack::ct;
use netbatch_stack::filter::{Chain, CtMatch, HookPoint, PortRange, Rule, Verdict};
use netbatch_stack::nat::{self, Action, NatChain, NatRule};
use netbatch_stack::route::{Route, Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;

const GW: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);
const GW2: MacAddr = MacAddr([2, 0, 0, 0, 2, 3]);
const INSIDE: &str = "198.51.100.2";
const OUTSIDE: &str = "192.0.2.1";
const FAR: &str = "203.0.113.7";

fn spec(offload: bool) -> LabSpec {
    spec_with(Gro::Off, offload)
}

/// [`spec`] with `gro` on the inside port.
fn spec_with(gro: Gro, offload: bool) -> LabSpec {
    let mut spec = support::router(gro);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.neighbours.push(StaticNeighbour {
        iface: 1,
        ip: ip("192.0.2.253"),
        mac: GW2,
    });
    let mut fwd = Rule::any(Verdict::Accept);
    fwd.in_if = Some(1);
    fwd.proto = Some(6);
    fwd.dport = Some(PortRange { lo: 8080, hi: 8080 });
    let mut out = Rule::any(Verdict::Accept);
    out.out_if = Some(1);
    spec.graph.nat = Some(nat::Config {
        prerouting: NatChain {
            rules: vec![NatRule {
                matches: fwd,
                action: Action::Dnat {
                    addr: u32::from(ip(INSIDE)),
                    port: Some(80),
                },
            }],
        },
        postrouting: NatChain {
            rules: vec![NatRule {
                matches: out,
                action: Action::Masquerade { ports: None },
            }],
        },
        udp: Default::default(),
    });
    let mut forwarded = Rule::any(Verdict::Accept);
    forwarded.in_if = Some(1);
    forwarded.ct = Some(CtMatch {
        status: ct::status::DST_NAT,
        ..CtMatch::default()
    });
    track_and_filter(&mut spec, offload, vec![forwarded]);
    spec
}

/// Connection tracking (64 entries) and the FORWARD chain `ct state established accept`
/// (with `flow add @ft` when `offload`), `iifname "eth0" accept`, then `more`, policy
/// drop.
fn track_and_filter(spec: &mut LabSpec, offload: bool, more: Vec<Rule>) {
    spec.graph.conntrack = Some(ct::Config {
        max: 64,
        ..ct::Config::default()
    });
    let mut est = Rule::any(Verdict::Accept);
    est.ct = Some(CtMatch {
        state: ct::state_bit::ESTABLISHED,
        ..CtMatch::default()
    });
    est.offload = offload;
    let mut inside = Rule::any(Verdict::Accept);
    inside.in_if = Some(0);
    let mut rules = vec![est, inside];
    rules.extend(more);
    spec.graph.chains.push((
        HookPoint::Forward,
        Chain {
            rules,
            policy: Verdict::Drop,
        },
    ));
}

/// The IPv6 router: [`support::router6`] with connection tracking and the FORWARD
/// chain `ct state established accept` (with `flow add @ft` when `offload`),
/// `iifname "eth0" accept`, policy drop.
fn spec6(offload: bool) -> LabSpec {
    let mut spec = support::router6(Gro::Off);
    track_and_filter(&mut spec, offload, Vec::new());
    spec
}

/// A host beyond the IPv6 router's next hop on eth1.
const FAR6: &str = "2001:db8:300::7";

/// UDP over IPv6 from the inside peer to the far host (eth0) or back (eth1), with hop
/// limit `hl`.
fn udp6(from_outside: bool, sport: u16, dport: u16, hl: u8, data: &[u8]) -> Vec<u8> {
    if from_outside {
        support::frames::udp6(GW_MAC, US2, FAR6, PEER6, sport, dport, hl, data)
    } else {
        support::frames::udp6(PEER, US, PEER6, FAR6, sport, dport, hl, data)
    }
}

/// The IPv6 frame with its traffic class set to `tc`.
fn with_tclass(mut f: Vec<u8>, tc: u8) -> Vec<u8> {
    f[14] = (f[14] & 0xf0) | tc >> 4;
    f[15] = (f[15] & 0x0f) | tc << 4;
    f
}

/// The IPv6 frame with an empty hop-by-hop options header (one PadN option) between
/// the fixed header and the upper-layer one (RFC 8200 4.3); the upper layer's checksum
/// is unchanged (its pseudo-header's length is the upper layer's).
fn with_hop_by_hop(f: Vec<u8>) -> Vec<u8> {
    let (head, rest) = f.split_at(54);
    let mut out = head.to_vec();
    let next = out[20];
    out[20] = 0;
    let len = u16::from_be_bytes([out[18], out[19]]) + 8;
    out[18..20].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    out.extend_from_slice(rest);
    out
}

/// The IPv6 steps, as [`steps`]: UDP recorded both ways then offloaded, hop limits 2
/// and 1, another traffic class, a hop-by-hop header; a TCP exchange, its handshake and
/// FIN on the whole path.
fn steps6() -> Vec<(usize, Vec<u8>, bool)> {
    let t = |from_outside: bool, flags: &str, seq_ack, data: &[u8]| {
        SIX.tcp(!from_outside, flags, seq_ack, data)
    };
    vec![
        (0, udp6(false, 40000, 53, 64, b"q1"), false),
        (1, udp6(true, 53, 40000, 64, b"a1"), false),
        (0, udp6(false, 40000, 53, 64, b"q2"), false),
        (0, udp6(false, 40000, 53, 64, b"q3"), true),
        (1, udp6(true, 53, 40000, 64, b"a2"), true),
        (0, udp6(false, 40000, 53, 2, b"hop limit two"), true),
        // Hop limit 1: the whole path answers time exceeded (RFC 4443 3.3).
        (0, udp6(false, 40000, 53, 1, b"hop limit one"), false),
        (
            0,
            with_tclass(udp6(false, 40000, 53, 64, b"tc"), 0xb8),
            false,
        ),
        (
            0,
            with_tclass(udp6(false, 40000, 53, 64, b"tc2"), 0xb8),
            true,
        ),
        (0, udp6(false, 40000, 53, 64, b"q4"), false),
        (0, udp6(false, 40000, 53, 64, b"q5"), true),
        // An extension header: the whole path, which forwards it all the same.
        (
            0,
            with_hop_by_hop(udp6(false, 40000, 53, 64, b"hbh")),
            false,
        ),
        (0, t(false, "S", (1000, 0), b""), false),
        (1, t(true, "SA", (5000, 1001), b""), false),
        (0, t(false, "A", (1001, 5001), b""), false),
        (0, t(false, "A", (1001, 5001), b"GET /"), true),
        (1, t(true, "A", (5001, 1006), b"200 OK"), true),
        (0, t(false, "FA", (1006, 5007), b""), false),
    ]
}

/// A TCP segment with `flags` (`S`, `A`, `F`, `R`) from `(s, sp)` to `(d, dp)`, from
/// outside (by eth1) or inside (by eth0).
fn tcp(
    from_outside: bool,
    s: (&str, u16),
    d: (&str, u16),
    flags: &str,
    (seq, ack): (u32, u32),
    data: &[u8],
) -> Vec<u8> {
    let macs = if from_outside { (GW, US2) } else { (PEER, US) };
    support::frames::tcp_flags(macs, s, d, flags, seq, ack, data)
}

/// UDP from inside to the far host (eth0) or back to the outside address (eth1).
fn udp(from_outside: bool, sport: u16, dport: u16, ttl: u8, data: &[u8]) -> Vec<u8> {
    if from_outside {
        support::frames::udp(GW, US2, FAR, OUTSIDE, sport, dport, ttl, data)
    } else {
        support::frames::udp(PEER, US, INSIDE, FAR, sport, dport, ttl, data)
    }
}

/// The frame with its IPv4 TOS octet set to `tos` (header checksum made again).
fn with_tos(mut f: Vec<u8>, tos: u8) -> Vec<u8> {
    f[15] = tos;
    support::frames::refresh_ip_checksum(&mut f);
    f
}

/// The frame with its UDP checksum zeroed (none sent, RFC 768).
fn no_udp_sum(mut f: Vec<u8>) -> Vec<u8> {
    f[40] = 0;
    f[41] = 0;
    f
}

/// The steps: the port a frame comes in by, the frame, and whether the offloading
/// router forwards it from `ct-in` (the expectation the module states: a direction is
/// recorded by its first established packet through the FORWARD rule, and a record
/// holds only for the packets it stands for).
fn steps() -> Vec<(usize, Vec<u8>, bool)> {
    let s = (INSIDE, 40000);
    let d = (FAR, 443);
    let (fo, fi) = ((FAR, 5555), (OUTSIDE, 8080));
    vec![
        // UDP masqueraded: new, its reply (records the reply direction), the second
        // datagram out (records the original one), then offloaded both ways.
        (0, udp(false, 40000, 53, 64, b"q1"), false),
        (1, udp(true, 53, 40000, 64, b"a1"), false),
        (0, udp(false, 40000, 53, 64, b"q2"), false),
        (0, udp(false, 40000, 53, 64, b"q3"), true),
        (1, udp(true, 53, 40000, 64, b"a2"), true),
        (0, no_udp_sum(udp(false, 40000, 53, 64, b"q4")), true),
        (0, udp(false, 40000, 53, 2, b"ttl two"), true),
        // TTL 1: the whole path answers time exceeded (RFC 1812 5.3.1).
        (0, udp(false, 40000, 53, 1, b"ttl one"), false),
        // Another TOS: not what the record was routed with (the whole path records it
        // anew), and then the first TOS again.
        (0, with_tos(udp(false, 40000, 53, 64, b"tos"), 0xb8), false),
        (0, with_tos(udp(false, 40000, 53, 64, b"tos2"), 0xb8), true),
        (0, udp(false, 40000, 53, 64, b"q5"), false),
        // TCP out through masquerade: the handshake on the whole path (the SYN-ACK,
        // established, records the reply direction), data offloaded, FIN and RST
        // never.
        (0, tcp(false, s, d, "S", (1000, 0), b""), false),
        (
            1,
            tcp(true, (FAR, 443), (OUTSIDE, 40000), "SA", (5000, 1001), b""),
            false,
        ),
        (0, tcp(false, s, d, "A", (1001, 5001), b""), false),
        (0, tcp(false, s, d, "A", (1001, 5001), b"GET /"), true),
        (
            1,
            tcp(
                true,
                (FAR, 443),
                (OUTSIDE, 40000),
                "A",
                (5001, 1006),
                b"200 OK",
            ),
            true,
        ),
        (
            1,
            tcp(
                true,
                (FAR, 443),
                (OUTSIDE, 40000),
                "A",
                (5007, 1006),
                b"body",
            ),
            true,
        ),
        (0, tcp(false, s, d, "FA", (1006, 5011), b""), false),
        // Port forwarding: the outside client's connection to the inside server.
        (1, tcp(true, fo, fi, "S", (7000, 0), b""), false),
        (
            0,
            tcp(false, (INSIDE, 80), (FAR, 5555), "SA", (9000, 7001), b""),
            false,
        ),
        (1, tcp(true, fo, fi, "A", (7001, 9001), b""), false),
        (1, tcp(true, fo, fi, "A", (7001, 9001), b"hello"), true),
        (
            0,
            tcp(
                false,
                (INSIDE, 80),
                (FAR, 5555),
                "A",
                (9001, 7006),
                b"world",
            ),
            true,
        ),
        (
            0,
            tcp(
                false,
                (INSIDE, 80),
                (FAR, 5555),
                "A",
                (9006, 7006),
                b"again",
            ),
            true,
        ),
        (1, tcp(true, fo, fi, "R", (7006, 0), b""), false),
    ]
}

/// What a lab sent on each port for one step.
fn sent(lab: &mut Lab) -> [Vec<Vec<u8>>; 2] {
    [0, 1].map(|p| lab.tx(p).into_iter().map(|f| f.bytes).collect())
}

/// Every step: the same frames out of both routers; the offloading one forwards from
/// `ct-in` exactly the packets the module says it does, and counts them.
#[test]
fn offloaded_packets_leave_as_the_whole_path_sends_them() {
    same_frames_out(spec, steps());
}

/// [`offloaded_packets_leave_as_the_whole_path_sends_them`] for IPv6.
#[test]
fn offloaded_ipv6_packets_leave_as_the_whole_path_sends_them() {
    let steps = steps6();
    // The hop-by-hop frame is what it says: its upper layer unchanged, the header 8
    // bytes longer, and the whole path forwards it.
    let plain = udp6(false, 40000, 53, 64, b"hbh");
    let hbh = &steps[11].1;
    assert_eq!((hbh.len(), hbh[20], hbh[54]), (plain.len() + 8, 0, 17));
    assert_eq!(hbh[62..], plain[54..]);
    same_frames_out(spec6, steps);
}

/// Feeds `steps` one frame at a time to a router made by `spec` with and without the
/// `offload` statement, in every variant: see the tests above.
fn same_frames_out(spec: fn(bool) -> LabSpec, steps: Vec<(usize, Vec<u8>, bool)>) {
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut whole = Lab::new(&spec(false), mode, dispatch);
        let mut fast = Lab::new(&spec(true), mode, dispatch);
        let mut expected = 0;
        for (i, (port, frame, offloaded)) in steps.iter().cloned().enumerate() {
            let before = fast
                .w
                .host
                .ct
                .as_ref()
                .map_or(0, |c| c.offload.stats.forwarded);
            for lab in [&mut whole, &mut fast] {
                lab.feed(port, [frame.clone()]);
                lab.run();
            }
            let (a, b) = (sent(&mut whole), sent(&mut fast));
            assert_eq!(
                a, b,
                "{v}: step {i}: the offload sends what the whole path sends"
            );
            assert_eq!(
                a.iter().map(Vec::len).sum::<usize>(),
                1,
                "{v}: step {i}: one frame out"
            );
            let after = fast.w.host.ct.as_ref().unwrap().offload.stats.forwarded;
            assert_eq!(
                after - before,
                u64::from(offloaded),
                "{v}: step {i}: offloaded?"
            );
            expected += u64::from(offloaded);
        }
        let ct = fast.w.host.ct.as_ref().unwrap();
        assert_eq!(ct.offload.stats.forwarded, expected, "{v}");
        // NAT counts what the offload translated as its stages would have.
        let slow = whole.w.host.ct.as_ref().unwrap();
        assert_eq!(ct.nat.translated, slow.nat.translated, "{v}");
        // Tracking saw every packet alike: the same states counted.
        assert_eq!(ct.stats.by_state, slow.stats.by_state, "{v}");
        for lab in [whole, fast] {
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// A UDP datagram from inside (`false`) or back (`true`), with its ports, TTL or hop
/// limit and payload: [`udp`] or [`udp6`].
type Udp = fn(bool, u16, u16, u8, &[u8]) -> Vec<u8>;

/// In `spec`'s router, in every variant: a UDP flow's directions recorded and its next
/// datagram offloaded to `first`; then `change` installs a new route table, after which
/// the next datagram leaves on the whole path to `then`, in a new epoch, and the one
/// after is offloaded to `then` too.
fn a_route_change_ends_the_records_in(
    spec: &LabSpec,
    udp: Udp,
    (first, then): (MacAddr, MacAddr),
    change: impl Fn(&mut Lab, netbatch_runtime::config::Config),
) {
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(spec, mode, dispatch);
        let go = |lab: &mut Lab, port: usize, f: Vec<u8>| -> Vec<u8> {
            lab.feed(port, [f]);
            lab.run();
            let mut out = lab.tx(1 - port);
            assert_eq!(out.len(), 1, "{v}: one frame out");
            out.remove(0).bytes
        };
        go(&mut lab, 0, udp(false, 40000, 53, 64, b"q1"));
        go(&mut lab, 1, udp(true, 53, 40000, 64, b"a1"));
        go(&mut lab, 0, udp(false, 40000, 53, 64, b"q2"));
        let f = go(&mut lab, 0, udp(false, 40000, 53, 64, b"q3"));
        assert_eq!(f[..6], first.0, "{v}: by the first route");
        let offloaded = |lab: &Lab| lab.w.host.ct.as_ref().unwrap().offload.stats;
        assert_eq!(offloaded(&lab).forwarded, 1, "{v}");
        let epochs = offloaded(&lab).epochs;

        change(&mut lab, spec.config(mode, dispatch, 4096));
        let f = go(&mut lab, 0, udp(false, 40000, 53, 64, b"q4"));
        assert_eq!(f[..6], then.0, "{v}: by the new route");
        assert_eq!(offloaded(&lab).forwarded, 1, "{v}: on the whole path");
        assert_eq!(offloaded(&lab).epochs, epochs + 1, "{v}: a new epoch");
        let f = go(&mut lab, 0, udp(false, 40000, 53, 64, b"q5"));
        assert_eq!(f[..6], then.0, "{v}: offloaded by the new route");
        assert_eq!(offloaded(&lab).forwarded, 2, "{v}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A new route table (here: the far network via another gateway) ends every record:
/// the next packet takes the whole path and leaves by the new route, and the one
/// after is offloaded again, by the new route.
#[test]
fn a_route_change_ends_the_records() {
    a_route_change_ends_the_records_in(&spec(true), udp, (GW, GW2), |lab, mut cfg| {
        cfg.routes = vec![Route {
            prefix: "203.0.113.0/24".parse().unwrap(),
            kind: RouteKind::Unicast,
            out_if: Some(1),
            gateway: Some(ip("192.0.2.253")),
            multipath: None,
        }];
        lab.w.host.routes = Arc::new(netbatch_runtime::build::route_table(&cfg).unwrap());
    });
}

/// The same for IPv6 (a record's adjacency indexes the table it was chosen in): the far
/// network now on eth1's link, its host's MAC configured.
#[test]
fn an_ipv6_route_change_ends_the_records() {
    let mut s = spec6(true);
    s.neighbours6.push(StaticNeighbour6 {
        iface: 1,
        ip: support::ip6(FAR6),
        mac: GW2,
    });
    a_route_change_ends_the_records_in(&s, udp6, (GW_MAC, GW2), |lab, mut cfg| {
        cfg.routes6 = vec![Route6::new(
            "2001:db8:300::/48".parse().unwrap(),
            RouteKind::Unicast,
            Some(1),
            None,
        )];
        lab.w.host.routes6 = Arc::new(netbatch_runtime::build::route_table6(&cfg).unwrap());
    });
}

/// A connection's frames for [`super_packets_that_only_lose_a_hop_are_offloaded_whole`]:
/// from `inside` to `far` (a `(MAC, address)` pair of each side's sender and our port),
/// TCP with `flags`, or UDP when `flags` is empty.
struct Ends {
    inside: (MacAddr, MacAddr, &'static str),
    far: (MacAddr, MacAddr, &'static str),
    /// The address the far side answers (the inside one, or NAT's outside one).
    answer_to: &'static str,
}

/// The IPv6 router's connection: the inside peer to the far host beyond the next hop.
const SIX: Ends = Ends {
    inside: (PEER, US, PEER6),
    far: (GW_MAC, US2, FAR6),
    answer_to: PEER6,
};

impl Ends {
    fn tcp(&self, out: bool, flags: &str, (seq, ack): (u32, u32), data: &[u8]) -> Vec<u8> {
        let (s, d) = ((self.inside.2, 40000), (self.far.2, 443));
        let (macs, s, d) = if out {
            ((self.inside.0, self.inside.1), s, d)
        } else {
            ((self.far.0, self.far.1), d, (self.answer_to, 40000))
        };
        support::frames::tcp_flags(macs, s, d, flags, seq, ack, data)
    }

    fn udp(&self, out: bool, data: &[u8]) -> Vec<u8> {
        let six = self.inside.2.contains(':');
        let ((sm, dm, src), dst, (sp, dp)) = if out {
            (self.inside, self.far.2, (40000, 53))
        } else {
            (self.far, self.answer_to, (53, 40000))
        };
        if six {
            support::frames::udp6(sm, dm, src, dst, sp, dp, 64, data)
        } else {
            support::frames::udp(sm, dm, src, dst, sp, dp, 64, data)
        }
    }
}

/// Super-packets of connections whose packets only lose a hop (IPv6; IPv4 untranslated)
/// are offloaded whole: GRO (standard and fraglist) merges a burst of one connection's
/// TCP segments or UDP datagrams from inside, the offloading router forwards the
/// super-packet from `ct-in` (its TTL or hop limit, which GSO gives every segment from
/// the head), and both routers send the same frames; the offload counts the wire
/// packets the super-packet carried. A masqueraded connection's super-packets take the
/// whole path (NAT's rewrite of a partial or merged checksum is the NAT stages').
#[test]
fn super_packets_that_only_lose_a_hop_are_offloaded_whole() {
    let burst = 4u32;
    let four = Ends {
        inside: (PEER, US, INSIDE),
        far: (GW, US2, FAR),
        answer_to: INSIDE,
    };
    let masqueraded = Ends {
        answer_to: OUTSIDE,
        ..four
    };
    let plain6 = |gro, offload| {
        let mut s = support::router6(gro);
        track_and_filter(&mut s, offload, Vec::new());
        s
    };
    let plain4 = |gro, offload| {
        let mut s = support::router(gro);
        s.neighbours.push(StaticNeighbour {
            iface: 0,
            ip: ip(INSIDE),
            mac: PEER,
        });
        track_and_filter(&mut s, offload, Vec::new());
        s
    };
    let nat4 = spec_with;
    type Spec<'a> = &'a dyn Fn(Gro, bool) -> LabSpec;
    let families: [(&str, Spec<'_>, &Ends, bool); 3] = [
        ("IPv6", &plain6, &SIX, true),
        ("IPv4", &plain4, &four, true),
        ("IPv4 masqueraded", &nat4, &masqueraded, false),
    ];
    for (family, spec, ends, whole) in families {
        let cases = [
            (
                "tcp",
                vec![
                    (0, ends.tcp(true, "S", (1000, 0), b"")),
                    (1, ends.tcp(false, "SA", (5000, 1001), b"")),
                    (0, ends.tcp(true, "A", (1001, 5001), b"")),
                ],
                (0..burst)
                    .map(|i| ends.tcp(true, "A", (1001 + 100 * i, 5001), &[i as u8; 100]))
                    .collect::<Vec<_>>(),
            ),
            (
                "udp",
                vec![
                    (0, ends.udp(true, b"q1")),
                    (1, ends.udp(false, b"a1")),
                    (0, ends.udp(true, b"q2")),
                ],
                (0..burst)
                    .map(|i| ends.udp(true, &[i as u8; 100]))
                    .collect(),
            ),
        ];
        for gro in [Gro::Standard, Gro::Fraglist] {
            for (what, warm, burst_frames) in &cases {
                for (mode, dispatch) in VARIANTS {
                    let v = format!("{family} {gro:?} {what} {mode:?}/{dispatch:?}");
                    let mut slow = Lab::new(&spec(gro, false), mode, dispatch);
                    let mut fast = Lab::new(&spec(gro, true), mode, dispatch);
                    for lab in [&mut slow, &mut fast] {
                        // The connection's directions recorded, one frame at a time.
                        for (port, f) in warm {
                            lab.feed(*port, [f.clone()]);
                            lab.run();
                        }
                    }
                    let (a, b) = (sent(&mut slow), sent(&mut fast));
                    assert_eq!(a, b, "{v}: the exchange before");
                    assert_eq!(a.iter().map(Vec::len).sum::<usize>(), 3, "{v}: forwarded");
                    let offloaded =
                        |lab: &Lab| lab.w.host.ct.as_ref().unwrap().offload.stats.forwarded;
                    let merged = |lab: &Lab| lab.event("gro", "merged");
                    let (before, merged_before) = (offloaded(&fast), merged(&fast));
                    for lab in [&mut slow, &mut fast] {
                        lab.feed(0, burst_frames.iter().cloned());
                        lab.run();
                    }
                    let (a, b) = (sent(&mut slow), sent(&mut fast));
                    assert_eq!(a, b, "{v}: the offload sends what the whole path sends");
                    assert_eq!(a[1].len(), burst as usize, "{v}: every segment out");
                    assert_eq!(
                        merged(&fast) - merged_before,
                        u64::from(burst - 1),
                        "{v}: one super-packet"
                    );
                    assert_eq!(
                        offloaded(&fast) - before,
                        if whole { u64::from(burst) } else { 0 },
                        "{v}: offloaded whole (counted in wire packets), or not at all"
                    );
                    for lab in [slow, fast] {
                        lab.assert_conserved();
                        lab.stop_and_check_pool();
                    }
                }
            }
        }
    }
}
