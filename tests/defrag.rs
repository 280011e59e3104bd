//! Defragmentation before connection tracking through the whole graph, in all four
//! variants: fragmented UDP through the stateful router (`ct state established,related
//! accept; ct state new iif eth0 accept; drop`) and, for IPv4, masquerade on eth1. Each
//! datagram is cut into fragments here, by hand (RFC 791 / RFC 8200 4.5), and what
//! leaves is checked against independent expectations: the fragments as they came
//! (sizes, offsets, identification), the translated addresses, and the datagram the far
//! end reassembles from them with its UDP checksum recomputed in full. Then the bounds:
//! a flood of partial datagrams from spoofed sources leaves the store at its bound, an
//! established connection keeps working, every fragment is dropped or held (counted),
//! and timeouts drop the rest, answering with time exceeded as Linux does.

use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::fragments::{
    eth, fragment4, fragment6, reassemble4, reassemble6, udp4, udp4_sum_ok, udp6, udp6_sum_ok,
};
use netbatch_scenarios::{self as support, GW_MAC, Gro, Lab, LabSpec, PEER, US, US2, VARIANTS, ip};
use netbatch_stack::ct;
use netbatch_stack::defrag;
use netbatch_stack::filter::{HookPoint, Rule, Verdict};
use netbatch_stack::nat::{self, Action, NatChain, NatRule};
use netbatch_wire::checksum::reference::ones_complement_sum;

const INSIDE: &str = "198.51.100.2";
const OUTSIDE: &str = "192.0.2.1";
const FAR: &str = "203.0.113.7";
const INSIDE6: &str = "2001:db8:100::2";
const FAR6: &str = "2001:db8:300::7";
const S: u64 = 1_000_000_000;

fn spec(d: defrag::Config) -> LabSpec {
    let mut spec = support::router6(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.graph.chains = vec![(HookPoint::Forward, support::stateful_forward())];
    spec.graph.conntrack = Some(ct::Config {
        max: 64,
        ..ct::Config::default()
    });
    spec.graph.defrag = d;
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
    spec
}

fn addr4(p: &[u8], at: usize) -> String {
    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&p[at..at + 4]).unwrap()).to_string()
}

fn port_at(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

/// The IP packets of frames sent on port `i`.
fn sent(lab: &mut Lab, i: usize) -> Vec<Vec<u8>> {
    lab.tx(i)
        .into_iter()
        .map(|f| f.bytes[14..].to_vec())
        .collect()
}

/// A fragmented UDP datagram from the inside host out through masquerade, fed in
/// reverse order, and its fragmented answer back: each leaves as the fragments it came
/// as (sizes, offsets), tracked and translated as one datagram (source 192.0.2.1 on
/// every fragment, the port in the first, the UDP checksum right over the whole); an
/// unsolicited fragmented datagram from outside is dropped whole by the stateful chain
/// (before defragmentation each fragment was `invalid`, and the chain dropped them all,
/// the wanted ones too).
#[test]
fn fragmented_udp_through_masquerade_both_ways() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(defrag::Config::default()), mode, dispatch);
        let out = udp4(INSIDE, 40000, FAR, 53, 0x4242, &payload);
        let frags = fragment4(&out, &[1480, 1480, 0]);
        lab.feed(0, frags.iter().rev().map(|f| eth(PEER.0, US.0, f)));
        lab.run();
        let got = sent(&mut lab, 1);
        assert_eq!(got.len(), 3, "{v}: three fragments out");
        for (g, f) in got.iter().zip(&frags) {
            assert_eq!(g.len(), f.len(), "{v}: the size it came with");
            assert_eq!(&g[4..8], &f[4..8], "{v}: identification and offset kept");
            assert_eq!(addr4(g, 12), OUTSIDE, "{v}: every fragment translated");
            assert_eq!(g[8], 63, "{v}: TTL decremented on every fragment");
        }
        let d = reassemble4(&got);
        assert_eq!(
            (port_at(&d, 20), addr4(&d, 16), port_at(&d, 22)),
            (40000, FAR.into(), 53),
            "{v}: port kept"
        );
        assert!(
            udp4_sum_ok(&d),
            "{v}: UDP checksum over the translated datagram"
        );
        assert_eq!(&d[28..], &payload[..], "{v}: the payload");

        // The answer, fragmented in two, in order.
        let back = udp4(FAR, 53, OUTSIDE, 40000, 0x0909, &payload[..2000]);
        let frags = fragment4(&back, &[1480, 0]);
        lab.feed(1, frags.iter().map(|f| eth(GW_MAC.0, US2.0, f)));
        lab.run();
        let got = sent(&mut lab, 0);
        assert_eq!(got.len(), 2, "{v}: two fragments in");
        let d = reassemble4(&got);
        assert_eq!(
            (addr4(&d, 12), addr4(&d, 16), port_at(&d, 22)),
            (FAR.into(), INSIDE.into(), 40000),
            "{v}: back to the inside host"
        );
        assert!(udp4_sum_ok(&d), "{v}: UDP checksum of the answer");
        assert!(got.iter().all(|g| addr4(g, 16) == INSIDE), "{v}");

        // Unsolicited, fragmented, to the inside host: dropped whole by the chain's
        // policy.
        let x = udp4(FAR, 53, INSIDE, 40001, 0x0a0a, &payload[..2000]);
        lab.feed(
            1,
            fragment4(&x, &[1480, 0])
                .iter()
                .map(|f| eth(GW_MAC.0, US2.0, f)),
        );
        lab.run();
        assert!(lab.tx(0).is_empty(), "{v}: nothing unsolicited inside");
        let drops = lab.drops();
        assert_eq!(
            drops.get("filter_forward").copied(),
            Some(2),
            "{v}: the unsolicited datagram's two fragments, dropped as one: {drops:?}"
        );
        let ct = lab.w.host.ct.as_ref().unwrap();
        assert_eq!(ct.nat.snat, 1, "{v}");
        assert_eq!(
            ct.stats.invalid[10], 0,
            "{v}: no fragment tracked as invalid"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// IPv6: a fragmented UDP datagram out (new, accepted from inside), its fragmented
/// answer in (established: the whole datagram tracked on its first fragment), an
/// unsolicited fragmented one dropped whole; each leaves as the fragments it came as,
/// hop limit decremented on every one, and reassembles to the datagram sent.
#[test]
fn fragmented_udp6_tracked_both_ways() {
    let payload: Vec<u8> = (0..2500u32).map(|i| (i * 13) as u8).collect();
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(&spec(defrag::Config::default()), mode, dispatch);
        let out = udp6(INSIDE6, 40000, FAR6, 53, &payload);
        let frags = fragment6(&out, &[1232, 0], 0x1234_5678);
        lab.feed(0, frags.iter().rev().map(|f| eth(PEER.0, US.0, f)));
        lab.run();
        let got = sent(&mut lab, 1);
        assert_eq!(got.len(), 2, "{v}: two fragments out");
        for (g, f) in got.iter().zip(&frags) {
            assert_eq!(g.len(), f.len(), "{v}: the size it came with");
            assert_eq!(&g[40..48], &f[40..48], "{v}: the Fragment header kept");
            assert_eq!(g[7], 63, "{v}: hop limit decremented on every fragment");
        }
        let d = reassemble6(&got);
        assert!(udp6_sum_ok(&d), "{v}: UDP checksum");
        assert_eq!(&d[48..], &payload[..], "{v}: the payload");

        let back = udp6(FAR6, 53, INSIDE6, 40000, &payload[..1500]);
        lab.feed(
            1,
            fragment6(&back, &[1232, 0], 7)
                .iter()
                .map(|f| eth(GW_MAC.0, US2.0, f)),
        );
        lab.run();
        let got = sent(&mut lab, 0);
        assert_eq!(got.len(), 2, "{v}: the answer's two fragments in");
        assert!(udp6_sum_ok(&reassemble6(&got)), "{v}");

        let x = udp6(FAR6, 53, INSIDE6, 40001, &payload[..1500]);
        lab.feed(
            1,
            fragment6(&x, &[1232, 0], 8)
                .iter()
                .map(|f| eth(GW_MAC.0, US2.0, f)),
        );
        lab.run();
        assert!(lab.tx(0).is_empty(), "{v}: nothing unsolicited inside");
        assert_eq!(lab.drops().get("filter_forward").copied(), Some(2), "{v}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A flood of first fragments from spoofed sources (never completed) fills the store to
/// its bound and no further: every fragment is held or dropped as `defrag_store_full`,
/// an established connection's packets keep passing, conservation is exact with the
/// fragments held; 30 s later the forwarded partial datagrams are dropped silently
/// (`defrag_timeout`, Linux's conntrack defragmentation sends no error for them), the
/// store is empty and fragmented datagrams pass again.
#[test]
fn fragment_flood_leaves_the_store_at_its_bound() {
    let payload: Vec<u8> = vec![0x55; 1600];
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let bound = defrag::Config {
            max_buffers: 48,
            max_datagrams: 32,
            ..defrag::Config::default()
        };
        let mut lab = Lab::new(&spec(bound), mode, dispatch);
        // An established connection first: a query out and its answer.
        lab.feed(
            0,
            [support::frames::udp(
                PEER, US, INSIDE, FAR, 5000, 53, 64, b"q",
            )],
        );
        lab.run();
        assert_eq!(lab.tx(1).len(), 1, "{v}");
        lab.feed(
            1,
            [support::frames::udp(
                GW_MAC, US2, FAR, OUTSIDE, 53, 5000, 64, b"a",
            )],
        );
        lab.run();
        assert_eq!(lab.tx(0).len(), 1, "{v}");

        // 1000 first fragments, each from another spoofed source in 203.0.113.0/24 and
        // 198.18.0.0/15, in batches.
        let mut flood = 0u64;
        for batch in 0..10u32 {
            let frames: Vec<Vec<u8>> = (0..100u32)
                .map(|i| {
                    let n = batch * 100 + i;
                    let src = format!("198.18.{}.{}", n / 250, n % 250 + 1);
                    let p = udp4(&src, 1000, INSIDE, 9, n as u16, &payload);
                    eth(GW_MAC.0, US2.0, &fragment4(&p, &[1480, 0])[0])
                })
                .collect();
            flood += frames.len() as u64;
            lab.feed(1, frames);
            lab.run();
        }
        let held = lab.w.held();
        assert_eq!(
            held, 32,
            "{v}: one fragment per datagram slot, at the bound"
        );
        assert_eq!(
            lab.dropped(defrag::reason::STORE_FULL),
            flood - held,
            "{v}: every other fragment refused, counted"
        );
        lab.assert_conserved();
        // The established connection still works through the flood.
        lab.feed(
            1,
            [support::frames::udp(
                GW_MAC, US2, FAR, OUTSIDE, 53, 5000, 64, b"a2",
            )],
        );
        lab.run();
        assert_eq!(lab.tx(0).len(), 1, "{v}: the established answer passes");
        lab.tx(1);

        // The flood's datagrams time out (30 s), silently: they were forwarded.
        lab.advance(31 * S);
        assert_eq!(lab.w.held(), 0, "{v}: the store empty");
        assert_eq!(lab.dropped(defrag::reason::TIMEOUT), 32, "{v}");
        assert!(
            lab.tx(1).is_empty(),
            "{v}: no error for forwarded datagrams"
        );
        lab.assert_conserved();
        // And a fragmented datagram of the connection passes again.
        let d = udp4(INSIDE, 5000, FAR, 53, 0x77, &payload);
        lab.feed(
            0,
            fragment4(&d, &[1480, 0])
                .iter()
                .map(|f| eth(PEER.0, US.0, f)),
        );
        lab.run();
        assert_eq!(sent(&mut lab, 1).len(), 2, "{v}");
        lab.assert_conserved();
        // Held at shutdown: the host frees the store's buffers.
        let p = udp4(INSIDE, 5000, FAR, 53, 0x78, &payload);
        lab.feed(0, [eth(PEER.0, US.0, &fragment4(&p, &[1480, 0])[0])]);
        lab.run();
        assert_eq!(lab.w.held(), 1, "{v}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// Timeouts answered as Linux answers them: an incomplete datagram for the router itself
/// with its first fragment gets ICMP time exceeded, code 1, quoting that fragment (RFC
/// 792; Linux's `ip_expire` answers local ones); an IPv6 one forwarded gets ICMPv6 Time
/// Exceeded code 1 after 60 s (RFC 8200 4.5, `ip6frag_expire_frag_queue`), not at 59 s;
/// one without its first fragment gets nothing. Held fragments count as `held` until
/// then.
#[test]
fn timeouts_answer_as_linux_does() {
    held_fragments_time_out_as_linux(&spec(defrag::Config::default()), (INSIDE6, 40000, FAR6, 53));
}

/// Fragments kept at their size that do not fit the egress MTU (eth1 at 1000 bytes) are
/// fragmented again by `ip4-fragment` (Linux refragments to the egress MTU where the
/// kept `frag_max_size` does not fit): 1500-byte fragments leave as 996 + 524, the last
/// as it came; every piece translated, and the far end reassembles the datagram sent,
/// its UDP checksum right.
#[test]
fn kept_fragments_too_large_for_the_egress_mtu_are_fragmented_again() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut s = spec(defrag::Config::default());
        s.ports[1].mtu = 1000;
        let mut lab = Lab::new(&s, mode, dispatch);
        let out = udp4(INSIDE, 40000, FAR, 53, 0x5151, &payload);
        let frags = fragment4(&out, &[1480, 1480, 0]);
        lab.feed(0, frags.iter().map(|f| eth(PEER.0, US.0, f)));
        lab.run();
        let got = sent(&mut lab, 1);
        // In any order: the buckets dispatch sends the small last fragment on before
        // the pieces `ip4-fragment` made (fragments need no order).
        let mut sizes: Vec<usize> = got.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes,
            [68, 524, 524, 996, 996],
            "{v}: 976 data bytes a piece"
        );
        assert!(got.iter().all(|g| addr4(g, 12) == OUTSIDE), "{v}");
        let d = reassemble4(&got);
        assert_eq!(port_at(&d, 20), 40000, "{v}");
        assert!(udp4_sum_ok(&d), "{v}: UDP checksum");
        assert_eq!(&d[28..], &payload[..], "{v}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// The router without tracking (local delivery reassembles all the same), or with it
/// (`spec`'s stateful router: `ip4-defrag`/`ip6-defrag` gather, `ct-confirm-local` hands
/// the datagram on whole).
fn local_spec(tracked: bool) -> LabSpec {
    if tracked {
        return spec(defrag::Config::default());
    }
    let mut spec = support::router6(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec
}

/// Reads every datagram of socket `s` as the application does: per datagram its source
/// port, the wire packets it stands for and its payload gathered over its parts; counted
/// delivered.
fn read_all(lab: &mut Lab, s: netbatch_stack::udp::socket::SocketId) -> Vec<(u16, u16, Vec<u8>)> {
    let mut got = Vec::new();
    lab.w
        .host
        .sockets
        .get(s)
        .unwrap()
        .recv_batch(&mut got, usize::MAX);
    let pool = lab.w.pool().clone();
    let out = got
        .iter()
        .map(|p| {
            let d = netbatch_stack::udp::datagram(&pool.get(p)).expect("a datagram");
            let bytes: Vec<u8> = d.payload_parts(&pool).flatten().copied().collect();
            assert_eq!(bytes.len(), d.payload_len(&pool));
            (d.src_port, d.segments, bytes)
        })
        .collect();
    lab.w.acct.delivered += got
        .iter()
        .map(|p| pool.get(p).meta.wire_packets())
        .sum::<u64>();
    pool.cache().free_all(&mut got);
    out
}

/// A fragmented UDP datagram to a local socket, IPv4 (3000 bytes in 1480-byte
/// fragments, fed in reverse) and IPv6 (2500 bytes in 1232-byte ones), with and without
/// tracking, in all four variants: the socket gets the datagram whole, its payload the
/// bytes sent, standing for the fragments it came as; one with a wrong checksum (a byte
/// of its last fragment flipped) and one whose fragments overlap are refused with their
/// reasons; one to a port without a socket is answered port unreachable; conservation
/// exact and the store empty.
#[test]
fn fragmented_udp_reaches_a_local_socket_whole() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 11 + i / 256) as u8).collect();
    for tracked in [false, true] {
        for (mode, dispatch) in VARIANTS {
            let v = format!("tracked {tracked} {mode:?}/{dispatch:?}");
            let mut lab = Lab::new(&local_spec(tracked), mode, dispatch);
            let s4 = lab.w.host.sockets.bind(ip("0.0.0.0"), 5001, 16).unwrap();
            let s6 = lab
                .w
                .host
                .sockets
                .bind(support::ip6("::"), 5001, 16)
                .unwrap();
            let p = udp4(INSIDE, 40000, "198.51.100.1", 5001, 0x3131, &payload);
            let frags = fragment4(&p, &[1480, 1480, 0]);
            lab.feed(0, frags.iter().rev().map(|f| eth(PEER.0, US.0, f)));
            let p6 = udp6(INSIDE6, 40000, support::US6, 5001, &payload[..2500]);
            let frags6 = fragment6(&p6, &[1232, 0], 0x0102_0304);
            lab.feed(0, frags6.iter().map(|f| eth(PEER.0, US.0, f)));
            // A wrong checksum: the last fragment's last byte changed.
            let q = udp4(INSIDE, 40001, "198.51.100.1", 5001, 0x3232, &payload);
            let mut bad = fragment4(&q, &[1480, 1480, 0]);
            *bad[2].last_mut().unwrap() ^= 0x5a;
            lab.feed(0, bad.iter().map(|f| eth(PEER.0, US.0, f)));
            // Overlapping fragments (RFC 5722 drops the datagram; Linux drops IPv4's).
            let o = udp4(
                INSIDE,
                40002,
                "198.51.100.1",
                5001,
                0x3333,
                &payload[..2000],
            );
            // Its first 1480 bytes, then a last fragment from byte 1000.
            let over = [
                fragment4(&o, &[1480, 0])[0].clone(),
                fragment4(&o, &[1000, 0])[1].clone(),
            ];
            lab.feed(0, over.iter().map(|f| eth(PEER.0, US.0, f)));
            // No socket on port 6000: port unreachable, quoting the first fragment.
            let n = udp4(INSIDE, 40003, "198.51.100.1", 6000, 0x3434, &payload);
            let none = fragment4(&n, &[1480, 1480, 0]);
            lab.feed(0, none.iter().map(|f| eth(PEER.0, US.0, f)));
            lab.run();
            let errs = sent(&mut lab, 0);
            assert_eq!(errs.len(), 1, "{v}: one ICMP error");
            assert_eq!(
                (errs[0][9], errs[0][20], errs[0][21]),
                (1, 3, 3),
                "{v}: port unreachable"
            );
            assert_eq!(
                &errs[0][28..48],
                &none[0][..20],
                "{v}: quoting the first fragment"
            );

            let got = read_all(&mut lab, s4);
            assert_eq!(got.len(), 1, "{v}: one IPv4 datagram");
            assert_eq!(got[0].0, 40000, "{v}");
            assert_eq!(got[0].1, 3, "{v}: standing for its three fragments");
            assert!(got[0].2 == payload, "{v}: the payload sent, byte for byte");
            let got6 = read_all(&mut lab, s6);
            assert_eq!(got6.len(), 1, "{v}: one IPv6 datagram");
            assert_eq!(got6[0].1, 2, "{v}");
            assert!(got6[0].2 == payload[..2500], "{v}: the IPv6 payload");
            let drops = lab.drops();
            assert_eq!(
                drops.get("udp_checksum").copied(),
                Some(3),
                "{v}: the bad datagram's three fragments: {drops:?}"
            );
            assert_eq!(
                lab.dropped(defrag::reason::OVERLAP),
                2,
                "{v}: the overlapping datagram, all of it: {drops:?}"
            );
            assert_eq!(lab.w.held(), 0, "{v}: nothing left in the store");
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// Whether the ICMPv6 checksum of IPv6 packet `p` (no extension headers) is right.
fn icmp6_sum_ok(p: &[u8]) -> bool {
    let mut ph = p[8..40].to_vec();
    ph.extend_from_slice(&[0, 0]);
    ph.extend_from_slice(&((p.len() - 40) as u16).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 58]);
    ph.extend_from_slice(&p[40..]);
    ones_complement_sum(&ph) == 0xffff
}

/// A 3000-byte ICMP echo request (etherparse's) in three fragments, and a 2500-byte
/// ICMPv6 one in two, to the router, with and without tracking, in all four variants:
/// each is answered with as many fragments, each the size its request fragment was,
/// which reassemble (as the far end does, by hand here) to the echo reply: type 0 or
/// 129, addresses swapped, identifier, sequence and payload echoed, checksum right over
/// the whole message.
#[test]
fn a_fragmented_echo_request_is_answered() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 5 + 1) as u8).collect();
    for tracked in [false, true] {
        for (mode, dispatch) in VARIANTS {
            let v = format!("tracked {tracked} {mode:?}/{dispatch:?}");
            let mut lab = Lab::new(&local_spec(tracked), mode, dispatch);
            let mut req = support::frames::echo_request(
                PEER,
                US,
                INSIDE,
                "198.51.100.1",
                0x77,
                5,
                64,
                &payload,
            )[14..]
                .to_vec();
            req[4..6].copy_from_slice(&0x5151u16.to_be_bytes());
            let frags = fragment4(&req, &[1480, 1480, 0]);
            lab.feed(0, frags.iter().map(|f| eth(PEER.0, US.0, f)));
            let req6 = support::frames::echo_request6(
                PEER,
                US,
                INSIDE6,
                support::US6,
                0x78,
                6,
                64,
                &payload[..2500],
            )[14..]
                .to_vec();
            let frags6 = fragment6(&req6, &[1232, 0], 0xabcd);
            lab.feed(0, frags6.iter().rev().map(|f| eth(PEER.0, US.0, f)));
            lab.run();
            let got = sent(&mut lab, 0);
            let (r4, r6): (Vec<_>, Vec<_>) = got.into_iter().partition(|g| g[0] >> 4 == 4);
            assert_eq!(r4.len(), 3, "{v}: three reply fragments");
            for (g, f) in r4.iter().zip(&frags) {
                assert_eq!(g.len(), f.len(), "{v}: each the size it came as");
                assert_eq!(
                    (addr4(g, 12), addr4(g, 16)),
                    ("198.51.100.1".into(), INSIDE.into()),
                    "{v}"
                );
            }
            let d = reassemble4(&r4);
            assert_eq!(d.len(), req.len(), "{v}");
            assert_eq!(d[20], 0, "{v}: an echo reply");
            assert_eq!(ones_complement_sum(&d[20..]), 0xffff, "{v}: its checksum");
            assert_eq!(&d[24..], &req[24..], "{v}: identifier, sequence, payload");

            assert_eq!(r6.len(), 2, "{v}: two IPv6 reply fragments");
            let mut by_off = r6.clone();
            by_off.sort_by_key(|g| u16::from_be_bytes([g[42], g[43]]) & 0xfff8);
            for (g, f) in by_off.iter().zip(&frags6) {
                assert_eq!(g.len(), f.len(), "{v}: each the size it came as");
            }
            let d6 = reassemble6(&r6);
            assert_eq!(
                (&d6[8..24], &d6[24..40]),
                (&req6[24..40], &req6[8..24]),
                "{v}: addresses swapped"
            );
            assert_eq!(d6[40], 129, "{v}: an echo reply");
            assert!(
                icmp6_sum_ok(&d6),
                "{v}: its checksum over the whole message"
            );
            assert_eq!(&d6[44..], &req6[44..], "{v}: identifier, sequence, payload");
            assert_eq!(lab.w.host.stats.icmp_echo_replies, 1, "{v}");
            assert_eq!(lab.w.host.stats.icmp6_echo_replies, 1, "{v}");
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// Without tracking, local delivery's reassembly times out as Linux's does: an IPv4
/// datagram to the router missing its last fragment is answered after 30 s (not 29)
/// with time exceeded code 1 quoting its first fragment (`ip_expire`); an IPv6 one after
/// 60 s with Time Exceeded code 1 (RFC 8200 4.5); one whose first fragment never came
/// is dropped silently. The fragments count as held until then.
#[test]
fn local_reassembly_times_out_as_linux_does() {
    held_fragments_time_out_as_linux(&local_spec(false), (INSIDE6, 7, support::US6, 7));
}

/// Under `spec`, in every variant: an IPv4 first fragment to the router alone, a lone
/// later fragment of another datagram, and an IPv6 first fragment alone (sent between
/// the ends `six`: source, port, destination, port) are held; at 30 s (not 29) the IPv4
/// one is answered with a time exceeded, code 1, quoting it, at 60 s the IPv6 one with
/// ICMPv6's (RFC 792, RFC 8200 4.5, as Linux), the lone later fragment dropped silently.
fn held_fragments_time_out_as_linux(spec: &LabSpec, six: (&str, u16, &str, u16)) {
    let payload: Vec<u8> = vec![0xaa; 2000];
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = Lab::new(spec, mode, dispatch);
        let p = udp4(INSIDE, 7, "198.51.100.1", 7, 0x0101, &payload);
        let f = fragment4(&p, &[1480, 0]);
        lab.feed(0, [eth(PEER.0, US.0, &f[0])]);
        let q = udp4(INSIDE, 7, "198.51.100.1", 7, 0x0202, &payload);
        lab.feed(0, [eth(PEER.0, US.0, &fragment4(&q, &[1480, 0])[1])]);
        let p6 = udp6(six.0, six.1, six.2, six.3, &payload);
        let f6 = fragment6(&p6, &[1232, 0], 99);
        lab.feed(0, [eth(PEER.0, US.0, &f6[0])]);
        lab.run();
        assert_eq!(lab.w.held(), 3, "{v}: three fragments held");
        lab.assert_conserved();
        lab.advance(29 * S);
        assert!(lab.tx(0).is_empty(), "{v}: nothing before 30 s");
        lab.advance(2 * S);
        let got = sent(&mut lab, 0);
        assert_eq!(got.len(), 1, "{v}: one ICMP error at 31 s");
        let e = &got[0];
        assert_eq!(
            (e[9], e[20], e[21]),
            (1, 11, 1),
            "{v}: time exceeded, code 1"
        );
        assert_eq!(addr4(e, 16), INSIDE, "{v}: to the sender");
        assert_eq!(&e[28..48], &f[0][..20], "{v}: quoting the first fragment");
        assert_eq!(lab.w.held(), 1, "{v}: the IPv6 fragment still held");
        lab.advance(28 * S);
        assert!(lab.tx(0).is_empty(), "{v}: IPv6 not before 60 s");
        lab.advance(2 * S);
        let got = sent(&mut lab, 0);
        assert_eq!(got.len(), 1, "{v}: one ICMPv6 error");
        let e = &got[0];
        assert_eq!(
            (e[6], e[40], e[41]),
            (58, 3, 1),
            "{v}: Time Exceeded, code 1"
        );
        assert_eq!(&e[48..88], &f6[0][..40], "{v}: quoting the first fragment");
        assert_eq!(lab.w.held(), 0, "{v}");
        assert_eq!(
            lab.dropped(defrag::reason::TIMEOUT),
            1,
            "{v}: the lone later fragment"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
