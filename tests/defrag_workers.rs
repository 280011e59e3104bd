//! Fragmented datagrams with two workers (`defrag::handoff`): the router of
//! `tests/defrag.rs` (eth0 inside, eth1 outside 192.0.2.1, the stateful FORWARD chain
//! `ct state established,related accept; ct state new iif eth0 accept; drop`, IPv4
//! masquerade on eth1), both ports received by both workers and spread over both by
//! RPS, symmetric as under connection tracking.
//!
//! RPS steers a fragment by its addresses alone (a later fragment has no ports), so a
//! datagram is gathered on the worker its addresses pick, while its connection belongs
//! to the worker its endpoints *with ports* pick. The test computes both itself, from
//! the Toeplitz hash (Microsoft's key) of the endpoints in sorted order and the map's
//! `(hash × 2) >> 32`, as the documentation of the steering states it, independently of
//! the code under test; the flows come from a fixed seed, so which datagrams need a
//! hand-off is known before they are sent. Every fragment is fed to the worker that
//! does *not* own the connection. Without the hand-off an outbound datagram would be
//! tracked a second time on the worker its addresses pick (a second entry, another
//! translated port), and a reply would find no entry there: not translated back, and
//! dropped by the chain as new from outside. Each check fails if the hand-off does.

use netbatch_datapath::rps::{RpsParams, RpsPolicy};
use netbatch_engine::Mode;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::fragments::{
    eth, fragment4, fragment6, reassemble4, reassemble6, udp4, udp4_sum_ok, udp6, udp6_sum_ok,
};
use netbatch_scenarios::{self as support, GW_MAC, Gro, PEER, PEER6, Team, US, US2, ip, ip6};
use netbatch_stack::ct::{self, Tuple};
use netbatch_stack::filter::{HookPoint, Rule, Verdict};
use netbatch_stack::nat::{self, Action, NatChain, NatRule};
use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};

const INSIDE: &str = "198.51.100.2";
const OUTSIDE: &str = "192.0.2.1";

/// Two workers, each receiving both ports, RPS spreading both over both with `policy`;
/// backlogs and hand-off rings of `max_backlog` wire packets.
fn team(mode: Mode, policy: RpsPolicy, max_backlog: usize) -> Team {
    let mut spec = support::router6(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.graph.chains = vec![(HookPoint::Forward, support::stateful_forward())];
    spec.graph.conntrack = Some(ct::Config {
        max: 4096,
        ..ct::Config::default()
    });
    let mut out = Rule::any(Verdict::Accept);
    out.out_if = Some(1);
    spec.graph.nat = Some(nat::Config {
        prerouting: NatChain::default(),
        postrouting: NatChain {
            rules: vec![NatRule {
                matches: out,
                action: Action::Masquerade { ports: None },
            }],
        },
        udp: Default::default(),
    });
    spec.params.send_redirects = false;
    // What the configuration sets under tracking with two workers.
    let rps = RpsParams {
        policy,
        rfs_log: 0,
        symmetric: true,
        max_backlog,
        ..RpsParams::default()
    };
    let both = vec![vec![0, 1], vec![0, 1]];
    Team::new(&spec, mode, both.clone(), both, Some(rps))
}

/// The worker of two that `hash` picks (the kernel's `reciprocal_scale`).
fn pick(hash: u32) -> usize {
    ((u64::from(hash) * 2) >> 32) as usize
}

/// The symmetric hash of two endpoints: the Toeplitz hash of the lower (address, port)
/// then the higher, with the ports when there are any; never 0.
fn hash4(a: (&str, u16), b: (&str, u16)) -> u32 {
    let (a, b) = ((u32::from(ip(a.0)), a.1), (u32::from(ip(b.0)), b.1));
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let ports = (lo.1 != 0 || hi.1 != 0).then_some((lo.1, hi.1));
    Toeplitz::new(&MS_KEY)
        .ipv4(lo.0.to_be_bytes(), hi.0.to_be_bytes(), ports)
        .max(1)
}

/// [`hash4`] of IPv6 endpoints.
fn hash6(a: (&str, u16), b: (&str, u16)) -> u32 {
    let (a, b) = ((u128::from(ip6(a.0)), a.1), (u128::from(ip6(b.0)), b.1));
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let ports = (lo.1 != 0 || hi.1 != 0).then_some((lo.1, hi.1));
    Toeplitz::new(&MS_KEY)
        .ipv6(lo.0.to_be_bytes(), hi.0.to_be_bytes(), ports)
        .max(1)
}

/// Every IP packet sent on port `p` by either worker.
fn sent(team: &mut Team, p: usize) -> Vec<Vec<u8>> {
    (0..2)
        .flat_map(|w| team.port(w, p).take_tx())
        .map(|f| f.bytes[14..].to_vec())
        .collect()
}

/// The workers whose tables hold a connection with original tuple `t`.
fn holders(team: &mut Team, t: &Tuple) -> Vec<usize> {
    (0..2)
        .filter(|&w| {
            team.workers[w]
                .host
                .ct
                .as_mut()
                .and_then(|c| c.table.lookup(t, 0))
                .is_some_and(|(_, dir)| dir == 0)
        })
        .collect()
}

/// Datagrams the workers handed to the owner of their connection.
fn handed(team: &Team) -> u64 {
    team.workers
        .iter()
        .map(|w| w.host.defrag_handoff.as_ref().map_or(0, |h| h.datagrams))
        .sum()
}

fn addr4(p: &[u8], at: usize) -> String {
    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&p[at..at + 4]).unwrap()).to_string()
}

fn port_at(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

/// A small seeded generator (xorshift64*): the flows are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Masquerade of fragmented UDP with two workers, in list and per-packet mode and under
/// each RPS policy for the own share. Per flow
/// from the seed: half start with an unfragmented datagram (fed to a worker drawn from
/// the seed), then a datagram of three fragments goes out, fed to the worker that does
/// not own the connection; it leaves as its three fragments, translated to the same
/// port as the connection's first datagram, and the connection has one entry, on its
/// owner. The half that starts fragmented is tracked on its owner too. The reply, in
/// two fragments fed to the non-owner, comes back translated to the inside host as its
/// fragments. The datagrams handed over are exactly those whose addresses pick another
/// worker than their endpoints with ports; conservation is exact over both workers.
#[test]
fn fragmented_masquerade_reaches_the_owner() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for (mode, policy) in [
        (Mode::List, RpsPolicy::Deferred),
        (Mode::Packet, RpsPolicy::Deferred),
        (Mode::List, RpsPolicy::Backlog),
        (Mode::List, RpsPolicy::Direct),
    ] {
        let mode_s = format!("{mode:?}/{policy:?}");
        let mut team = team(mode, policy, 1000);
        let mut rng = Rng(0x6672_6167_0001);
        let (mut want_handed, mut away_out, mut away_back) = (0u64, 0, 0);
        for i in 0..40u16 {
            let far = format!("203.0.113.{}", 1 + rng.below(200));
            let sp = 1024 + rng.below(60_000) as u16;
            let dp = 1 + rng.below(60_000) as u16;
            let what = format!("{mode_s} flow {i} ({INSIDE}:{sp} to {far}:{dp})");
            let orig = Tuple::v4(ip(INSIDE), ip(&far), 17, sp, dp);
            let owner = pick(hash4((INSIDE, sp), (&far, dp)));
            let gathers = pick(hash4((INSIDE, 0), (&far, 0)));
            let mut port = None;
            if i % 2 == 1 {
                let w = rng.below(2) as usize;
                let first = support::frames::udp(PEER, US, INSIDE, &far, sp, dp, 64, b"hello");
                team.feed(w, 0, [first]);
                team.settle();
                let out = sent(&mut team, 1);
                assert_eq!(out.len(), 1, "{what}: the first datagram out");
                port = Some(port_at(&out[0], 20));
                assert_eq!(
                    holders(&mut team, &orig),
                    [owner],
                    "{what}: tracked on its owner"
                );
            }
            // The fragmented datagram, its fragments in reverse order, to the non-owner.
            let dgram = udp4(INSIDE, sp, &far, dp, 2 * i + 1, &payload);
            let frags = fragment4(&dgram, &[1480, 1480, 0]);
            team.feed(
                1 - owner,
                0,
                frags.iter().rev().map(|f| eth(PEER.0, US.0, f)),
            );
            team.settle();
            want_handed += u64::from(gathers != owner);
            away_out += usize::from(gathers != owner);
            let got = sent(&mut team, 1);
            assert_eq!(got.len(), 3, "{what}: three fragments out");
            assert!(
                got.iter().all(|g| addr4(g, 12) == OUTSIDE),
                "{what}: every fragment translated"
            );
            let d = reassemble4(&got);
            assert!(
                udp4_sum_ok(&d),
                "{what}: UDP checksum over the translated datagram"
            );
            assert_eq!(&d[28..], &payload[..], "{what}: the payload");
            let p = port_at(&d, 20);
            if let Some(first) = port {
                assert_eq!(
                    p, first,
                    "{what}: translated as the connection's first datagram"
                );
            }
            assert_eq!(
                holders(&mut team, &orig),
                [owner],
                "{what}: one entry, on the owner"
            );
            // The translated port's reply steers to the owner (NAT picked it so).
            assert_eq!(pick(hash4((&far, dp), (OUTSIDE, p))), owner, "{what}");
            let back = udp4(&far, dp, OUTSIDE, p, 0x8000 | i, &payload[..2000]);
            let frags = fragment4(&back, &[1480, 0]);
            team.feed(1 - owner, 1, frags.iter().map(|f| eth(GW_MAC.0, US2.0, f)));
            team.settle();
            let gathers_back = pick(hash4((&far, 0), (OUTSIDE, 0)));
            want_handed += u64::from(gathers_back != owner);
            away_back += usize::from(gathers_back != owner);
            let got = sent(&mut team, 0);
            assert_eq!(got.len(), 2, "{what}: the reply's two fragments in");
            assert!(got.iter().all(|g| addr4(g, 16) == INSIDE), "{what}");
            let d = reassemble4(&got);
            assert_eq!(
                (addr4(&d, 12), port_at(&d, 20), port_at(&d, 22)),
                (far.clone(), dp, sp),
                "{what}: the reply translated back"
            );
            assert!(udp4_sum_ok(&d), "{what}: UDP checksum of the reply");
        }
        assert!(
            away_out > 5 && away_back > 5,
            "{mode_s}: the seed gives datagrams gathered away from their owner both ways: \
             {away_out} out, {away_back} back"
        );
        assert_eq!(
            handed(&team),
            want_handed,
            "{mode:?}: the datagrams handed over"
        );
        team.assert_conserved();
        team.stop_and_check_pool();
    }
}

/// IPv6 through the stateful chain with two workers (no NAT for IPv6): per flow from
/// the seed, a fragmented datagram from inside fed to the non-owner is tracked on its
/// owner, once (an unfragmented datagram started half the connections); the fragmented
/// answer, fed to the non-owner, is established and reaches the inside host as its two
/// fragments (tracked on the worker its addresses pick it would be new from outside,
/// and dropped).
#[test]
fn fragmented_udp6_reaches_the_owner() {
    let payload: Vec<u8> = (0..2500u32).map(|i| (i * 13) as u8).collect();
    let mut team = team(Mode::List, RpsPolicy::Deferred, 1000);
    let mut rng = Rng(0x6672_6167_0006);
    let (mut want_handed, mut away) = (0u64, 0);
    for i in 0..30u32 {
        let far = format!("2001:db8:300::{:x}", 1 + rng.below(0xfffe));
        let sp = 1024 + rng.below(60_000) as u16;
        let dp = 1 + rng.below(60_000) as u16;
        let what = format!("flow {i} ([{PEER6}]:{sp} to [{far}]:{dp})");
        let orig = Tuple {
            src: u128::from(ip6(PEER6)),
            dst: u128::from(ip6(&far)),
            sport: sp,
            dport: dp,
            proto: 17,
            v6: true,
        };
        let owner = pick(hash6((PEER6, sp), (&far, dp)));
        let gathers = pick(hash6((PEER6, 0), (&far, 0)));
        if i % 2 == 1 {
            let first = support::frames::udp6(PEER, US, PEER6, &far, sp, dp, 64, b"hello");
            team.feed(rng.below(2) as usize, 0, [first]);
            team.settle();
            assert_eq!(
                sent(&mut team, 1).len(),
                1,
                "{what}: the first datagram out"
            );
        }
        let frags = fragment6(&udp6(PEER6, sp, &far, dp, &payload), &[1232, 0], 2 * i + 1);
        team.feed(1 - owner, 0, frags.iter().map(|f| eth(PEER.0, US.0, f)));
        team.settle();
        want_handed += u64::from(gathers != owner);
        away += usize::from(gathers != owner);
        let got = sent(&mut team, 1);
        assert_eq!(got.len(), 2, "{what}: two fragments out");
        assert_eq!(&reassemble6(&got)[48..], &payload[..], "{what}");
        assert_eq!(
            holders(&mut team, &orig),
            [owner],
            "{what}: one entry, on the owner"
        );
        let back = udp6(&far, dp, PEER6, sp, &payload[..1500]);
        let frags = fragment6(&back, &[1232, 0], 0x8000_0000 | i);
        team.feed(1 - owner, 1, frags.iter().map(|f| eth(GW_MAC.0, US2.0, f)));
        team.settle();
        want_handed += u64::from(gathers != owner);
        let got = sent(&mut team, 0);
        assert_eq!(got.len(), 2, "{what}: the answer's two fragments in");
        assert!(udp6_sum_ok(&reassemble6(&got)), "{what}: as sent");
    }
    assert!(away > 5, "the seed gives datagrams gathered away: {away}");
    assert_eq!(handed(&team), want_handed, "the datagrams handed over");
    team.assert_conserved();
    team.stop_and_check_pool();
}

/// A full hand-off ring: with rings of 4 wire packets, three datagrams of three
/// fragments made whole in one poll of the worker their addresses pick, for a
/// connection the other worker owns: the first is handed over (3 wire packets in
/// flight, counted held), the other two find no room and are dropped as
/// `defrag_handoff_full`, counted 6 (their fragments); conservation holds with the
/// first in flight and after it has left, translated, as its three fragments.
#[test]
fn a_full_handoff_ring_is_a_counted_drop() {
    let payload = vec![0x5a; 3000];
    let mut team = team(Mode::List, RpsPolicy::Deferred, 4);
    // A flow gathered on one worker and owned by the other, found from a fixed start.
    let far = "203.0.113.77";
    let gathers = pick(hash4((INSIDE, 0), (far, 0)));
    let sp = (20000..)
        .find(|&sp| pick(hash4((INSIDE, sp), (far, 53))) != gathers)
        .unwrap();
    // Fed to the worker that gathers them: RPS keeps them there, no backlog ring.
    for id in 1..=3 {
        let frags = fragment4(&udp4(INSIDE, sp, far, 53, id, &payload), &[1480, 1480, 0]);
        team.feed(gathers, 0, frags.iter().map(|f| eth(PEER.0, US.0, f)));
    }
    team.step(gathers);
    let full: u64 = team.workers[gathers]
        .snapshot()
        .iter()
        .filter(|n| n.name == "rps")
        .flat_map(|n| n.drops.iter())
        .filter(|(r, _)| r.name() == "defrag_handoff_full")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(full, 6, "two datagrams of three fragments dropped");
    assert_eq!(team.acct().in_flight(), 3, "one datagram in flight");
    team.assert_conserved();
    team.settle();
    let got = sent(&mut team, 1);
    assert_eq!(
        got.len(),
        3,
        "the datagram handed over left as its fragments"
    );
    assert!(got.iter().all(|g| addr4(g, 12) == OUTSIDE));
    assert_eq!(handed(&team), 3, "three queued for the owner");
    team.assert_conserved();
    team.stop_and_check_pool();
}

/// Order within a flow: eight fragmented datagrams of one flow gathered away from its
/// owner, fed in one batch (each datagram's fragments reversed) to the worker that
/// gathers them, then eight more fed to the owner's queue (RPS takes them to the
/// gathering worker, the hand-off back): they leave, each as its fragments, in the
/// order they were sent (told by their identification, which the router keeps).
#[test]
fn a_flows_fragmented_datagrams_keep_their_order() {
    let payload = vec![0x3c; 2000];
    let mut team = team(Mode::List, RpsPolicy::Deferred, 1000);
    let far = "203.0.113.91";
    let gathers = pick(hash4((INSIDE, 0), (far, 0)));
    let sp = (30000..)
        .find(|&sp| pick(hash4((INSIDE, sp), (far, 5353))) != gathers)
        .unwrap();
    for (feed_to, ids) in [(gathers, 100..108u16), (1 - gathers, 200..208)] {
        let frames: Vec<Vec<u8>> = ids
            .clone()
            .flat_map(|id| {
                let f = fragment4(&udp4(INSIDE, sp, far, 5353, id, &payload), &[1480, 0]);
                f.iter()
                    .rev()
                    .map(|f| eth(PEER.0, US.0, f))
                    .collect::<Vec<_>>()
            })
            .collect();
        team.feed(feed_to, 0, frames);
        team.settle();
        let got = sent(&mut team, 1);
        assert_eq!(got.len(), 16, "every fragment out");
        let mut order: Vec<u16> = got.iter().map(|g| port_at(g, 4)).collect();
        order.dedup();
        assert_eq!(
            order,
            ids.collect::<Vec<_>>(),
            "the datagrams in the order sent"
        );
    }
    assert_eq!(handed(&team), 16);
    team.assert_conserved();
    team.stop_and_check_pool();
}
