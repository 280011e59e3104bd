//! The ingress classifier through the whole graph, from hand-made frames: each action
//! does what `tc-actions(8)` says (drop, mark seen by a socket and by a hook rule,
//! redirect and mirror leave the other port byte for byte, goto continues in the later
//! chain), in every mode, conservation and the pool checked; and a police action holds
//! a flood at twice its rate to that rate within 5 %.

use std::sync::Arc;

use netbatch_scenarios::frames;
use netbatch_scenarios::{Gro, Lab, US, VARIANTS, ip, router};
use netbatch_stack::cls::{Action, Classifier, Field, Filter, Match};
use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_wire::ethernet::MacAddr;

const H1: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// A filter in chain `chain`, priority `prio`, matching UDP to `dport` (or, with
/// `src`, that source address), doing `actions` (in tc's words; port 1 is eth1).
fn filter(
    chain: u32,
    prio: u32,
    dport: Option<u16>,
    src: Option<&str>,
    actions: &[&str],
) -> Filter {
    let mut m = Match::default();
    m.set(Field::EthType, 0x0800, 0xffff);
    m.set(Field::IpProto, 17, 0xff);
    if let Some(p) = dport {
        m.set(Field::DstPort, u64::from(p), 0xffff);
    }
    if let Some(s) = src {
        m.set(Field::SrcIp, u64::from(u32::from(ip(s))), 0xffff_ffff);
    }
    Filter {
        chain,
        prio,
        matches: m,
        actions: actions
            .iter()
            .map(|a| Action::parse(a, |n| (n == "eth1").then_some(1)).expect("action"))
            .collect(),
    }
}

fn udp(dport: u16) -> Vec<u8> {
    frames::udp(
        H1,
        US,
        "198.51.100.7",
        "198.51.100.1",
        4000,
        dport,
        64,
        b"cls",
    )
}

#[test]
fn each_action_does_what_tc_says() {
    let cls = Classifier::new(vec![
        filter(0, 1, Some(7000), None, &["drop"]),
        filter(0, 2, Some(7001), None, &["skbedit mark 9", "pass"]),
        filter(0, 3, Some(7002), None, &["mirred egress redirect dev eth1"]),
        filter(0, 4, Some(7003), None, &["mirred egress mirror dev eth1"]),
        filter(0, 5, Some(7004), None, &["goto chain 1"]),
        filter(0, 6, Some(7005), None, &["skbedit mark 0x20"]),
        filter(1, 1, None, Some("198.51.100.7"), &["drop"]),
    ])
    .expect("filters");
    for (mode, dispatch) in VARIANTS {
        let mut spec = router(Gro::Off);
        spec.graph.classifier = Some(Arc::new(cls.clone()));
        // INPUT drops what the classifier marked 0x20 (and nothing else).
        let mut by_mark = Rule::any(Verdict::Drop);
        by_mark.mark = Some((0x20, 0xff));
        spec.graph.chains = vec![(
            HookPoint::Input,
            Chain {
                rules: vec![by_mark],
                policy: Verdict::Accept,
            },
        )];
        let mut lab = Lab::new(&spec, mode, dispatch);
        let any = ip("0.0.0.0");
        let s1 = lab.w.host.sockets.bind(any, 7001, 8).unwrap();
        let s3 = lab.w.host.sockets.bind(any, 7003, 8).unwrap();
        let s6 = lab.w.host.sockets.bind(any, 7006, 8).unwrap();
        let sent: Vec<Vec<u8>> = [7000, 7001, 7002, 7003, 7004, 7005, 7006].map(udp).to_vec();
        lab.feed(0, sent.clone());
        lab.run();
        let what = format!("{mode:?} {dispatch:?}");
        let cls_drops = lab.dropped(netbatch_stack::cls::stage::reason::DROP);
        assert_eq!(cls_drops, 2, "{what}: 7000 and, in chain 1, 7004");
        // Accounted while the datagrams wait in their sockets (reading them here takes
        // them out of the datapath's books).
        lab.assert_conserved();
        let mut got = Vec::new();
        let pool = lab.w.pool().clone();
        for (s, mark) in [(s1, 9), (s3, 0), (s6, 0)] {
            let sock = lab.w.host.sockets.get(s).unwrap();
            assert_eq!(sock.recv_batch(&mut got, 8), 1, "{what}: one datagram");
            assert_eq!(pool.get(&got[0]).meta.mark, mark, "{what}");
            let mut c = pool.cache();
            c.free_all(&mut got);
        }
        let out = lab.tx(1);
        assert_eq!(out.len(), 2, "{what}: redirected and mirrored");
        assert_eq!(out[0].bytes, sent[2], "{what}: redirected as received");
        assert_eq!(out[1].bytes, sent[3], "{what}: the mirror is a copy");
        assert_eq!(
            lab.dropped(netbatch_stack::filter::hook::reason::INPUT),
            1,
            "{what}: 7005, marked 0x20, meets the INPUT rule on the mark"
        );
        lab.stop_and_check_pool();
    }
}

/// A UDP train merged by GRO (both modes) and redirected to eth1 leaves as the frames
/// it was made of, each as received.
#[test]
fn a_redirected_super_packet_leaves_as_its_frames() {
    let cls = Classifier::new(vec![filter(
        0,
        1,
        Some(5000),
        None,
        &["mirred egress redirect dev eth1"],
    )])
    .unwrap();
    for gro in [Gro::Standard, Gro::Fraglist] {
        for (mode, dispatch) in VARIANTS {
            let mut spec = router(gro);
            spec.graph.classifier = Some(Arc::new(cls.clone()));
            let mut lab = Lab::new(&spec, mode, dispatch);
            let train: Vec<Vec<u8>> = (0..20u16)
                .map(|i| {
                    let mut f = frames::udp(
                        H1,
                        US,
                        "198.51.100.7",
                        "203.0.113.9",
                        4000,
                        5000,
                        64,
                        &[i as u8; 1200],
                    );
                    frames::set_ip_ident(&mut f, i);
                    f
                })
                .collect();
            lab.feed(0, train.clone());
            lab.run();
            let out = lab.tx(1);
            let what = format!("{gro:?} {mode:?} {dispatch:?}");
            assert_eq!(out.len(), train.len(), "{what}");
            for (o, t) in out.iter().zip(&train) {
                assert_eq!(&o.bytes, t, "{what}: as received, in order");
            }
            lab.assert_conserved();
            lab.stop_and_check_pool();
        }
    }
}

/// 1000-byte frames (14 + 986) at 250 per second for 8 s (2 Mbit/s) through a police
/// action of 1 Mbit/s with a one-frame burst, to be forwarded: what leaves is 1 Mbit/s
/// within 5 % (RFC 2697's committed rate, one bucket), the rest counted `cls_police`.
#[test]
fn police_holds_a_flood_at_twice_the_rate_to_the_rate() {
    let mut m = Match::default();
    m.set(Field::EthType, 0x0800, 0xffff);
    let cls = Classifier::new(vec![Filter {
        chain: 0,
        prio: 1,
        matches: m,
        actions: vec![
            Action::parse(
                "police rate 1mbit burst 1000 conform-exceed drop/pass",
                |_| None,
            )
            .unwrap(),
        ],
    }])
    .unwrap();
    for (mode, dispatch) in VARIANTS {
        let mut spec = router(Gro::Off);
        spec.graph.classifier = Some(Arc::new(cls.clone()));
        let mut lab = Lab::new(&spec, mode, dispatch);
        let frame = frames::udp(
            H1,
            US,
            "198.51.100.7",
            "203.0.113.9",
            4000,
            5000,
            64,
            &[0u8; 958],
        );
        assert_eq!(frame.len(), 1000);
        const SECONDS: u64 = 8;
        let n = 250 * SECONDS;
        let mut passed = 0;
        for _ in 0..n {
            lab.feed(0, [frame.clone()]);
            lab.advance(4_000_000);
            passed += lab.tx(1).len() as u64;
        }
        let want = 1_000_000 / 8 * SECONDS / 1000; // frames the rate carries
        let err = (passed as f64 - want as f64).abs() / want as f64;
        assert!(
            err <= 0.05,
            "{mode:?} {dispatch:?}: {passed} passed, {want} expected"
        );
        assert_eq!(
            lab.dropped(netbatch_stack::cls::stage::reason::POLICE),
            n - passed
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
