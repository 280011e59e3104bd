//! NAT44 with two workers (`nat::steer`): the two-port router of `tests/nat.rs` (eth0
//! inside 198.51.100.0/24, eth1 outside 192.0.2.1), both ports received by both workers
//! and spread over both by RPS (symmetric, as under connection tracking, with the
//! `dnat` rules foreseen), the nftables ruleset
//!
//! ```text
//! table ip nat {
//!   chain prerouting { type nat hook prerouting priority dstnat;
//!     iifname "eth1" tcp dport 8080 dnat to 198.51.100.2:80
//!     iifname "eth1" udp dport 5353 dnat to 198.51.100.2:53
//!     iifname "eth0" ip daddr 192.0.2.1 tcp dport 8080 dnat to 198.51.100.2:80 }
//!   chain postrouting { type nat hook postrouting priority srcnat;
//!     oifname "eth1" masquerade
//!     oifname "eth0" ip saddr 198.51.100.0/24 ct status dnat masquerade }
//! }
//! ```
//!
//! For many flows drawn from a fixed seed (masquerade of UDP, TCP and ICMP echo; port
//! forwarding of TCP and UDP; hairpinning), each first packet is fed to a worker of the
//! test's choosing. The test then finds the worker whose table holds the connection,
//! and checks, with an expectation independent of the code under test, that its reply
//! and the ICMP errors about it come back to that worker: the reply tuple, as it is
//! on the wire after the translation, steers there by RPS's own function (the worker's
//! `nat_home`), and end to end: the reply (and an ICMP error quoting the connection)
//! is fed to the *other* worker's queue, RPS hands it over, and it leaves translated
//! back to the inside (or outside) host as RFC 5508 and the ruleset say. A reply
//! reaching a worker without the entry would not be translated (it would be addressed
//! to the router itself), so each check fails if steering does.

use etherparse::PacketBuilder;
use netbatch_datapath::rps::{RpsParams, RpsPolicy};
use netbatch_engine::Mode;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::{self as support, Gro, LabSpec, PEER, Team, US, US2, ip};
use netbatch_stack::ct::{self, Tuple};
use netbatch_stack::filter::{CtMatch, PortRange, Rule, Verdict};
use netbatch_stack::nat::{self, Action, NatChain, NatRule};
use netbatch_wire::ethernet::MacAddr;

const GW: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);
const INSIDE: &str = "198.51.100.2";
const INSIDE2: &str = "198.51.100.3";
const INSIDE2_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 3]);
const OUTSIDE: &str = "192.0.2.1";
const ROUTER_IN: &str = "198.51.100.1";
const FAR_ROUTER: &str = "203.0.113.254";

fn ruleset() -> nat::Config {
    let fwd = |proto: u8, dport: u16, to: u16| {
        let mut r = Rule::any(Verdict::Accept);
        r.in_if = Some(1);
        r.proto = Some(proto);
        r.dport = Some(PortRange {
            lo: dport,
            hi: dport,
        });
        NatRule {
            matches: r,
            action: Action::Dnat {
                addr: u32::from(ip(INSIDE)),
                port: Some(to),
            },
        }
    };
    let mut hairpin = Rule::any(Verdict::Accept);
    hairpin.in_if = Some(0);
    hairpin.dst = Some(format!("{OUTSIDE}/32").parse().unwrap());
    hairpin.proto = Some(6);
    hairpin.dport = Some(PortRange { lo: 8080, hi: 8080 });
    let mut out = Rule::any(Verdict::Accept);
    out.out_if = Some(1);
    let mut back = Rule::any(Verdict::Accept);
    back.out_if = Some(0);
    back.src = Some("198.51.100.0/24".parse().unwrap());
    back.ct = Some(CtMatch {
        status: ct::status::DST_NAT,
        ..CtMatch::default()
    });
    let masq = Action::Masquerade { ports: None };
    nat::Config {
        prerouting: NatChain {
            rules: vec![
                fwd(6, 8080, 80),
                fwd(17, 5353, 53),
                NatRule {
                    matches: hairpin,
                    action: Action::Dnat {
                        addr: u32::from(ip(INSIDE)),
                        port: Some(80),
                    },
                },
            ],
        },
        postrouting: NatChain {
            rules: vec![
                NatRule {
                    matches: out,
                    action: masq,
                },
                NatRule {
                    matches: back,
                    action: masq,
                },
            ],
        },
        udp: Default::default(),
    }
}

/// Two workers, each receiving both ports, RPS spreading both over both.
fn team() -> Team {
    let mut spec: LabSpec = support::router(Gro::Off);
    for (a, mac) in [(INSIDE, PEER), (INSIDE2, INSIDE2_MAC)] {
        spec.neighbours.push(StaticNeighbour {
            iface: 0,
            ip: ip(a),
            mac,
        });
    }
    spec.graph.conntrack = Some(ct::Config {
        max: 4096,
        ..ct::Config::default()
    });
    let rules = ruleset();
    let (forwards, refused) = nat::steer::forwards(&rules);
    assert!(refused.is_empty(), "every dnat rule can be foreseen");
    spec.graph.nat = Some(rules);
    spec.params.send_redirects = false;
    // What the configuration sets under NAT with two workers (`config::nat_workers`).
    let rps = RpsParams {
        policy: RpsPolicy::Deferred,
        rfs_log: 0,
        symmetric: true,
        forwards,
        ..RpsParams::default()
    };
    let both = vec![vec![0, 1], vec![0, 1]];
    Team::new(&spec, Mode::List, both.clone(), both, Some(rps))
}

/// Every frame sent on port `p` by either worker.
fn sent(team: &mut Team, p: usize) -> Vec<Vec<u8>> {
    (0..2)
        .flat_map(|w| team.port(w, p).take_tx())
        .map(|f| f.bytes[14..].to_vec())
        .collect()
}

fn one(team: &mut Team, p: usize, what: &str) -> Vec<u8> {
    let got = sent(team, p);
    assert_eq!(got.len(), 1, "{what}: one packet on port {p}");
    got.into_iter().next().unwrap()
}

fn addr(p: &[u8], at: usize) -> String {
    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&p[at..at + 4]).unwrap()).to_string()
}

fn port(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

/// Source and destination address and port of an IPv4 packet (no options) with ports.
fn ends(p: &[u8]) -> (String, u16, String, u16) {
    (addr(p, 12), port(p, 20), addr(p, 16), port(p, 22))
}

/// The tuple of an IPv4 packet as the tracker keys it (an echo by its identifier and
/// type).
fn tuple_of(p: &[u8]) -> Tuple {
    let (s, d) = (ip(&addr(p, 12)), ip(&addr(p, 16)));
    match p[9] {
        1 => Tuple::v4(
            s,
            d,
            1,
            port(p, 24),
            u16::from(p[20]) << 8 | u16::from(p[21]),
        ),
        proto => Tuple::v4(s, d, proto, port(p, 20), port(p, 22)),
    }
}

/// The worker whose table holds the connection with original tuple `t` (exactly one).
fn owner(team: &mut Team, t: &Tuple) -> usize {
    let holders: Vec<usize> = (0..2)
        .filter(|&w| {
            team.workers[w]
                .host
                .ct
                .as_mut()
                .and_then(|c| c.table.lookup(t, 0))
                .is_some_and(|(_, dir)| dir == 0)
        })
        .collect();
    assert_eq!(holders.len(), 1, "one worker holds {t:?}: {holders:?}");
    holders[0]
}

/// The worker RPS steers a packet with tuple `t` to (the owner's own view of it).
fn steered(team: &Team, w: usize, t: &Tuple) -> usize {
    let h = team.workers[w]
        .host
        .nat_home
        .as_ref()
        .expect("two workers under NAT know their home");
    usize::from(h.worker_of(t))
}

fn tcp(
    (sm, dm): (MacAddr, MacAddr),
    (s, sp): (&str, u16),
    (d, dp): (&str, u16),
    syn_ack: Option<u32>,
    seq: u32,
) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2(sm.0, dm.0)
        .ipv4(ip(s).octets(), ip(d).octets(), 64)
        .tcp(sp, dp, seq, 64240)
        .syn();
    if let Some(a) = syn_ack {
        b = b.ack(a);
    }
    let mut v = Vec::new();
    b.write(&mut v, &[]).unwrap();
    v
}

/// An ICMP error (`kind`, code `code`) from `from` to `to` quoting the first 28 bytes
/// of `quoted` (an IPv4 packet), written by hand with its checksum.
fn icmp_error(
    (sm, dm): (MacAddr, MacAddr),
    from: &str,
    to: &str,
    (kind, code): (u8, u8),
    quoted: &[u8],
) -> Vec<u8> {
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&quoted[..28]);
    let c = netbatch_wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let b = PacketBuilder::ethernet2(sm.0, dm.0).ipv4(ip(from).octets(), ip(to).octets(), 64);
    let mut v = Vec::new();
    b.write(&mut v, etherparse::IpNumber::ICMP, &icmp).unwrap();
    v
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

/// Masquerade with two workers: UDP, TCP and ICMP echo flows from two inside hosts to
/// far hosts, each first packet fed to a worker drawn from the seed. The reply tuple
/// each translation made steers to the worker holding the connection; the reply, fed
/// to the other worker's queue, comes back translated to the inside host; a
/// time-exceeded quoting the translated packet (a router beyond), fed to the other
/// worker too, comes back to the inside host quoting the packet as it was sent.
#[test]
fn masquerade_replies_and_errors_reach_the_owner() {
    let mut team = team();
    let mut rng = Rng(0x6e61_7477_0001);
    let mut owned = [0usize; 2];
    for i in 0..90u32 {
        let (host, mac) = if rng.below(2) == 0 {
            (INSIDE, PEER)
        } else {
            (INSIDE2, INSIDE2_MAC)
        };
        let far = format!("203.0.113.{}", 1 + rng.below(200));
        let sp = 1024 + rng.below(60_000) as u16;
        let dp = 1 + rng.below(60_000) as u16;
        let w = rng.below(2) as usize;
        let what = format!("flow {i} ({host}:{sp} to {far}:{dp}, fed to worker {w})");
        let first = match i % 3 {
            0 => support::frames::udp(mac, US, host, &far, sp, dp, 2, b"query"),
            1 => tcp((mac, US), (host, sp), (&far, dp), None, 1000),
            _ => support::frames::echo_request(mac, US, host, &far, sp, 1, 2, b"ping"),
        };
        let orig = tuple_of(&first[14..]);
        team.feed(w, 0, [first]);
        team.settle();
        let out = one(&mut team, 1, &what);
        assert_eq!(addr(&out, 12), OUTSIDE, "{what}: masqueraded");
        let o = owner(&mut team, &orig);
        owned[o] += 1;
        // The reply as it will be on the wire: the inverse of what left.
        let reply = tuple_of(&out).invert();
        assert_eq!(
            steered(&team, o, &reply),
            o,
            "{what}: the reply tuple steers to the owner"
        );
        let other = 1 - o;
        let back = match i % 3 {
            0 => support::frames::udp(GW, US2, &far, OUTSIDE, dp, port(&out, 20), 64, b"answer"),
            1 => tcp(
                (GW, US2),
                (&far, dp),
                (OUTSIDE, port(&out, 20)),
                Some(1001),
                7,
            ),
            _ => {
                let b = PacketBuilder::ethernet2(GW.0, US2.0)
                    .ipv4(ip(&far).octets(), ip(OUTSIDE).octets(), 64)
                    .icmpv4_echo_reply(port(&out, 24), 1);
                let mut r = Vec::new();
                b.write(&mut r, b"ping").unwrap();
                r
            }
        };
        team.feed(other, 1, [back]);
        team.settle();
        let p = one(&mut team, 0, &format!("{what}: the reply"));
        assert_eq!(
            addr(&p, 16),
            host,
            "{what}: the reply reached the inside host"
        );
        let to_port = if i % 3 == 2 {
            port(&p, 24)
        } else {
            port(&p, 22)
        };
        assert_eq!(to_port, sp, "{what}: its port (identifier) translated back");
        // A router beyond reports the translated packet (the UDP and echo went out with
        // TTL 2): time exceeded, fed to the worker that does not own the connection.
        let err = icmp_error((GW, US2), FAR_ROUTER, OUTSIDE, (11, 0), &out);
        team.feed(other, 1, [err]);
        team.settle();
        let p = one(&mut team, 0, &format!("{what}: the error"));
        assert_eq!(
            (addr(&p, 12), addr(&p, 16), p[20]),
            (FAR_ROUTER.into(), host.into(), 11),
            "{what}: the error reached the inside host"
        );
        let q = &p[28..];
        assert_eq!(
            tuple_of(q),
            orig,
            "{what}: quoting the packet as it was sent"
        );
    }
    assert!(
        owned[0] > 10 && owned[1] > 10,
        "the flows spread: {owned:?}"
    );
    let (not_home, handed): (u64, u64) = team.workers.iter().fold((0, 0), |(a, b), w| {
        (
            a + w.host.ct.as_ref().map_or(0, |c| c.nat.port_not_home),
            b + w.steer.as_ref().map_or(0, |s| s.stats.handed_off),
        )
    });
    assert!(
        not_home > 10,
        "ports whose replies would have gone to the other worker were passed over: {not_home}"
    );
    assert!(
        handed >= 180,
        "replies and errors were handed over: {handed}"
    );
    team.assert_conserved();
    team.stop_and_check_pool();
}

/// Port forwarding and hairpinning with two workers: TCP and UDP from far hosts to the
/// outside address's forwarded ports, each first packet fed to a worker drawn from the
/// seed, reach the inside server; its reply (fed to the other worker) leaves from the
/// outside address and forwarded port; an error about it from a router beyond, and the
/// inside server's port unreachable about a forwarded datagram, come back translated;
/// an inside host's connection to the outside address (hairpinning: dnat, then
/// masquerade to the router's inside address) gets its reply to the right worker too.
#[test]
fn forwarded_and_hairpinned_connections_reach_the_owner() {
    let mut team = team();
    let mut rng = Rng(0x6e61_7477_0002);
    let mut owned = [0usize; 2];
    for i in 0..60u32 {
        let far = format!("203.0.113.{}", 1 + rng.below(200));
        let rp = 1024 + rng.below(60_000) as u16;
        let w = rng.below(2) as usize;
        let what = format!("flow {i} ({far}:{rp}, fed to worker {w})");
        match i % 3 {
            // TCP forwarded: SYN in, SYN-ACK out, an error about the SYN-ACK back in.
            0 => {
                let syn = tcp((GW, US2), (&far, rp), (OUTSIDE, 8080), None, 5000);
                let orig = tuple_of(&syn[14..]);
                team.feed(w, 1, [syn]);
                team.settle();
                let p = one(&mut team, 0, &what);
                assert_eq!(ends(&p), (far.clone(), rp, INSIDE.into(), 80), "{what}");
                let o = owner(&mut team, &orig);
                owned[o] += 1;
                assert_eq!(steered(&team, o, &tuple_of(&p).invert()), o, "{what}");
                let syn_ack = tcp((PEER, US), (INSIDE, 80), (&far, rp), Some(5001), 9);
                team.feed(1 - o, 0, [syn_ack]);
                team.settle();
                let out = one(&mut team, 1, &format!("{what}: the reply"));
                assert_eq!(
                    ends(&out),
                    (OUTSIDE.into(), 8080, far.clone(), rp),
                    "{what}"
                );
                let err = icmp_error((GW, US2), FAR_ROUTER, OUTSIDE, (11, 0), &out);
                team.feed(1 - o, 1, [err]);
                team.settle();
                let e = one(&mut team, 0, &format!("{what}: the error"));
                assert_eq!(addr(&e, 16), INSIDE, "{what}: the error to the server");
                assert_eq!(ends(&e[28..]), (INSIDE.into(), 80, far, rp), "{what}");
            }
            // UDP forwarded; the server's port unreachable about it goes out as the
            // outside address's, quoting the datagram as the far host sent it.
            1 => {
                let d = support::frames::udp(GW, US2, &far, OUTSIDE, rp, 5353, 64, b"q");
                let orig = tuple_of(&d[14..]);
                team.feed(w, 1, [d]);
                team.settle();
                let p = one(&mut team, 0, &what);
                assert_eq!(ends(&p), (far.clone(), rp, INSIDE.into(), 53), "{what}");
                let o = owner(&mut team, &orig);
                owned[o] += 1;
                assert_eq!(steered(&team, o, &tuple_of(&p).invert()), o, "{what}");
                let err = icmp_error((PEER, US), INSIDE, &far, (3, 3), &p);
                team.feed(1 - o, 0, [err]);
                team.settle();
                let e = one(&mut team, 1, &format!("{what}: the error"));
                assert_eq!(
                    (addr(&e, 12), addr(&e, 16)),
                    (OUTSIDE.into(), far.clone()),
                    "{what}: the error from the outside address"
                );
                assert_eq!(ends(&e[28..]), (far, rp, OUTSIDE.into(), 5353), "{what}");
            }
            // Hairpin: INSIDE2 to the outside address's forwarded port.
            _ => {
                let sp = rp;
                let syn = tcp((INSIDE2_MAC, US), (INSIDE2, sp), (OUTSIDE, 8080), None, 77);
                let orig = tuple_of(&syn[14..]);
                team.feed(w, 0, [syn]);
                team.settle();
                let p = one(&mut team, 0, &what);
                let (s, np, d, dp) = ends(&p);
                assert_eq!(
                    (s.as_str(), d.as_str(), dp),
                    (ROUTER_IN, INSIDE, 80),
                    "{what}"
                );
                let o = owner(&mut team, &orig);
                owned[o] += 1;
                assert_eq!(steered(&team, o, &tuple_of(&p).invert()), o, "{what}");
                let syn_ack = tcp((PEER, US), (INSIDE, 80), (ROUTER_IN, np), Some(78), 3);
                team.feed(1 - o, 0, [syn_ack]);
                team.settle();
                let back = one(&mut team, 0, &format!("{what}: the reply"));
                assert_eq!(
                    ends(&back),
                    (OUTSIDE.into(), 8080, INSIDE2.into(), sp),
                    "{what}"
                );
            }
        }
    }
    assert!(owned[0] > 5 && owned[1] > 5, "the flows spread: {owned:?}");
    let refused: u64 = team
        .workers
        .iter()
        .map(|w| w.host.ct.as_ref().map_or(0, |c| c.nat.not_home))
        .sum();
    assert_eq!(refused, 0, "every dnat was foreseen by the steering");
    team.assert_conserved();
    team.stop_and_check_pool();
}

/// A translation the steering did not foresee is refused, counted, never left
/// half-working: with the steering built without the dnat rules' forwards, a forwarded
/// connection's reply may steer to the other worker; such a connection is dropped as
/// `nat_not_home` on its first packet. (The Toeplitz hash is linear: the two tuples'
/// hashes differ by the hash of the addresses' and ports' difference, the same for
/// every far host here, so with two workers either every flow of this forward steers
/// home or none does; with this key, none does.)
#[test]
fn an_unforeseen_dnat_is_refused_not_broken() {
    let mut spec: LabSpec = support::router(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.graph.conntrack = Some(ct::Config::default());
    spec.graph.nat = Some(ruleset());
    let rps = RpsParams {
        policy: RpsPolicy::Deferred,
        rfs_log: 0,
        symmetric: true,
        forwards: Vec::new(),
        ..RpsParams::default()
    };
    let both = vec![vec![0, 1], vec![0, 1]];
    let mut team = Team::new(&spec, Mode::List, both.clone(), both, Some(rps));
    let mut forwarded = 0;
    for i in 0..40u16 {
        let far = format!("203.0.113.{}", 1 + i);
        team.feed(
            0,
            1,
            [support::frames::udp(
                GW,
                US2,
                &far,
                OUTSIDE,
                2000 + i,
                5353,
                64,
                b"q",
            )],
        );
        team.settle();
        forwarded += sent(&mut team, 0).len() as u64;
    }
    let refused: u64 = team
        .workers
        .iter()
        .map(|w| w.host.ct.as_ref().map_or(0, |c| c.nat.not_home))
        .sum();
    assert_eq!(forwarded + refused, 40, "each forwarded or refused");
    assert_eq!(
        (refused, forwarded),
        (40, 0),
        "the forward's replies all steer away"
    );
    let drops: u64 = team
        .workers
        .iter()
        .flat_map(|w| w.snapshot())
        .flat_map(|n| n.drops)
        .filter(|(r, _)| r.name() == "nat_not_home")
        .map(|(_, c)| c)
        .sum();
    assert_eq!(drops, refused, "each refusal a counted drop");
    team.assert_conserved();
    team.stop_and_check_pool();
}
