//! Neighbour resolution across workers, both families: whichever worker receives the
//! answer (an ARP reply, a neighbour advertisement), every worker whose packets wait for
//! that neighbour sends them.
//!
//! The kernel spreads a link's frames over the workers by a hash seeded at boot, so which
//! worker gets the answer to another worker's question is chance. Here it is the test's
//! choice: two workers each receive from both ports (each has its own queue of each), the
//! test feeds the packets to be forwarded to worker 1 and the answer to worker 0, and
//! steps the workers itself, so the case is the same on every machine and every run.

use netbatch_engine::Mode;
use netbatch_scenarios::{Gro, LabSpec, PEER, Team, US, US2, US6, US26, frames, ip, ip6, router6};
use netbatch_stack::neigh::State;
use netbatch_stack::route::{Route, Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;

/// The next hop neither worker knows yet, by family, and its MAC.
const GW4: &str = "192.0.2.99";
const GW6: &str = "2001:db8:200::99";
const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 2, 0x99]);
/// A node that is asked about by nobody.
const STRANGER6: &str = "2001:db8:200::77";

/// The dual-stack router of the scenario tests, with 198.18.0.0/15 and 2001:db8:400::/48
/// routed through next hops on eth1 whose MACs are not configured.
fn spec() -> LabSpec {
    let mut spec = router6(Gro::Off);
    spec.routes.push(Route {
        prefix: "198.18.0.0/15".parse().expect("prefix"),
        kind: RouteKind::Unicast,
        out_if: Some(1),
        gateway: Some(ip(GW4)),
        multipath: None,
    });
    spec.routes6.push(Route6::new(
        "2001:db8:400::/48".parse().expect("prefix"),
        RouteKind::Unicast,
        Some(1),
        Some(ip6(GW6)),
    ));
    spec
}

/// Two workers, each receiving from both ports on its own queue; no RPS: what a worker's
/// queue receives, that worker processes.
fn team(mode: Mode) -> Team {
    Team::new(&spec(), mode, vec![vec![0, 1], vec![0, 1]], vec![], None)
}

fn to_forward(v6: bool, n: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            if v6 {
                frames::udp6(
                    PEER,
                    US,
                    netbatch_scenarios::PEER6,
                    "2001:db8:400::1",
                    4000,
                    53,
                    64,
                    &[i; 16],
                )
            } else {
                frames::udp(
                    PEER,
                    US,
                    "198.51.100.2",
                    "198.18.0.1",
                    4000,
                    53,
                    64,
                    &[i; 16],
                )
            }
        })
        .collect()
}

/// The answer to worker 1's question, as the next hop sends it: an ARP reply to our
/// address on eth1, or a solicited advertisement with the target's link-layer address.
fn answer(v6: bool) -> Vec<u8> {
    if v6 {
        frames::neighbor_advert(
            GW_MAC,
            US2,
            GW6,
            US26,
            GW6,
            (true, true, true),
            Some(GW_MAC),
        )
    } else {
        frames::arp(2, GW_MAC, GW4, US2, "192.0.2.1", US2)
    }
}

/// Whether `f` is a request for the next hop (ARP request or neighbour solicitation).
fn is_request(f: &[u8], v6: bool) -> bool {
    if v6 {
        f.len() > 54 && f[12..14] == [0x86, 0xdd] && f[20] == 58 && f[54] == 135
    } else {
        f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 1]
    }
}

/// Packets queued on worker 1 wait for a next hop whose answer worker 0 receives: they
/// leave worker 1, to the answered MAC, in order, and both workers know the neighbour.
fn answer_reaches_the_other_worker(mode: Mode, v6: bool) {
    let what = format!("{mode:?}, {}", if v6 { "IPv6" } else { "IPv4" });
    let mut t = team(mode);
    let sent = to_forward(v6, 3);
    t.feed(1, 0, sent.clone());
    t.step(1);
    let asked = t.port(1, 1).take_tx();
    assert_eq!(asked.len(), 1, "{what}: worker 1 asks once: {asked:02x?}");
    assert!(
        is_request(&asked[0].bytes, v6),
        "{what}: {:02x?}",
        asked[0].bytes
    );
    assert!(
        t.port(0, 1).take_tx().is_empty(),
        "{what}: worker 0 asked nothing"
    );

    // The answer lands on worker 0, which never asked.
    t.feed(0, 1, [answer(v6)]);
    t.step(0);
    for _ in 0..3 {
        t.step(1);
    }
    let out = t.port(1, 1).take_tx();
    assert_eq!(
        out.len(),
        sent.len(),
        "{what}: worker 1 sent what waited: {out:02x?}"
    );
    for (f, s) in out.iter().zip(&sent) {
        assert_eq!(&f.bytes[0..6], &GW_MAC.0, "{what}: to the answered MAC");
        assert_eq!(&f.bytes[6..12], &US2.0, "{what}: from eth1");
        let at = if v6 { 14 + 40 + 8 } else { 14 + 20 + 8 };
        assert_eq!(
            &f.bytes[at..],
            &s[at..],
            "{what}: in order, payload unchanged"
        );
    }
    // Both workers now know the neighbour, and each sends to it without asking.
    for w in 0..2 {
        let state = if v6 {
            let e = t.workers[w].host.neigh6.entries();
            e.iter()
                .find(|e| e.ip == ip6(GW6))
                .map(|e| (e.state, e.mac))
        } else {
            let e = t.workers[w].host.neigh.entries();
            e.iter().find(|e| e.ip == ip(GW4)).map(|e| (e.state, e.mac))
        };
        assert_eq!(
            state,
            Some((State::Reachable, Some(GW_MAC))),
            "{what}: worker {w}'s entry"
        );
        t.feed(w, 0, to_forward(v6, 1));
        t.step(w);
        let out = t.port(w, 1).take_tx();
        assert_eq!(
            out.len(),
            1,
            "{what}: worker {w} forwards at once: {out:02x?}"
        );
        assert_eq!(&out[0].bytes[0..6], &GW_MAC.0);
    }
    t.settle();
    t.assert_conserved();
    let a = t.acct();
    assert_eq!(a.dropped, 0, "{what}: nothing dropped: {a:?}");
    t.stop_and_check_pool();
}

#[test]
fn an_arp_reply_on_one_worker_releases_what_waits_on_the_other() {
    for mode in [Mode::List, Mode::Packet] {
        answer_reaches_the_other_worker(mode, false);
    }
}

#[test]
fn an_advertisement_on_one_worker_releases_what_waits_on_the_other() {
    for mode in [Mode::List, Mode::Packet] {
        answer_reaches_the_other_worker(mode, true);
    }
}

/// An advertisement nobody asked for makes no entry on any worker (RFC 4861 7.2.5: "If
/// no entry exists, the advertisement SHOULD be silently discarded"), whichever worker
/// receives it, and after an answered question the next unsolicited one is still not
/// taken for an answer.
#[test]
fn an_advertisement_nobody_asked_for_makes_no_entry_anywhere() {
    let mut t = team(Mode::List);
    let unsolicited = |target: &str| {
        frames::neighbor_advert(
            GW_MAC,
            US2,
            target,
            US26,
            target,
            (false, false, true),
            Some(GW_MAC),
        )
    };
    t.feed(0, 1, [unsolicited(STRANGER6)]);
    t.feed(1, 1, [unsolicited(STRANGER6)]);
    // Worker 1 asks for GW6 and gets its answer on worker 0.
    t.feed(1, 0, to_forward(true, 1));
    t.step(1);
    t.feed(0, 1, [answer(true)]);
    t.step(0);
    t.step(1);
    t.settle();
    // The question was answered: nothing is pending anywhere now, and the stranger is
    // still unknown to both.
    t.feed(0, 1, [unsolicited(STRANGER6)]);
    t.settle();
    for w in 0..2 {
        let e = t.workers[w].host.neigh6.entries();
        assert!(
            e.iter().all(|e| e.ip != ip6(STRANGER6)),
            "worker {w} made an entry for an unsolicited advertisement: {e:?}"
        );
        assert!(
            e.iter().any(|e| e.ip == ip6(GW6)),
            "worker {w} knows the answered neighbour: {e:?}"
        );
    }
    let _ = US6;
    t.assert_conserved();
    t.stop_and_check_pool();
}
