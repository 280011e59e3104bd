//! The classifier against the obvious linear walk, and keys against hand-made frames.

use super::*;
use crate::dissect;
use proptest::prelude::*;

/// An untagged UDP frame 198.51.100.7:4000 → 203.0.113.9:5000, TOS 0x10, TTL 64, by hand.
fn udp_frame() -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[15] = 0x10;
    f[16..18].copy_from_slice(&28u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 51, 100, 7]);
    f[30..34].copy_from_slice(&[203, 0, 113, 9]);
    f[34..36].copy_from_slice(&4000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5000u16.to_be_bytes());
    f
}

fn key_of(frame: &[u8], in_port: u16) -> Key {
    let mut m = Meta::new(0);
    m.len = frame.len() as u16;
    m.in_port = in_port;
    dissect::frame_in(&mut m, frame);
    Key::of(&m, frame)
}

#[test]
fn keys_hold_each_field_where_it_belongs() {
    let k = key_of(&udp_frame(), 3);
    assert_eq!(k.get(Field::DstMac), 0x0200_0000_0001);
    assert_eq!(k.get(Field::SrcMac), 0x0200_0000_0002);
    assert_eq!(k.get(Field::EthType), 0x0800);
    assert_eq!(k.get(Field::IpProto), 17);
    assert_eq!(k.get(Field::IpTos), 0x10);
    assert_eq!(k.get(Field::IpTtl), 64);
    assert_eq!(k.get(Field::SrcIp), 0xc633_6407);
    assert_eq!(k.get(Field::DstIp), 0xcb00_7109);
    assert_eq!(k.get(Field::SrcPort), 4000);
    assert_eq!(k.get(Field::DstPort), 5000);
    assert_eq!(k.get(Field::InPort), 3);
    assert_eq!(k.get(Field::VlanId), 0);
    // Tagged: VLAN 100, priority 5, then IPv4.
    let f = udp_frame();
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00, 0xa0, 100]);
    t.extend_from_slice(&f[12..]);
    let k = key_of(&t, 0);
    assert_eq!(k.get(Field::EthType), 0x8100);
    assert_eq!((k.get(Field::VlanId), k.get(Field::VlanPrio)), (100, 5));
    assert_eq!(k.get(Field::VlanEthType), 0x0800);
    assert_eq!(k.get(Field::DstPort), 5000);
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// What flower's dissector (the kernel's `fl_classify`) would read, on frames where a
/// first version of the key read more or less (found against a model of flower written
/// from the kernel's source).
#[test]
fn keys_read_what_flowers_dissector_reads() {
    // A first fragment (MF, offset 0) of UDP to port 53: flower reads no L4 field of a
    // fragment.
    let frag = hex(
        "0200000000010200000000020800450000244d2e200040118997c0000202c000020104d20035001000005a5d544f4679706b00000000000000000000",
    );
    let k = key_of(&frag, 0);
    assert_eq!((k.get(Field::IpProto), k.get(Field::DstPort)), (17, 0));
    // TCP with a reserved bit (0x802): the 12 bits of the flags word, reserved ones in.
    let tcp = hex(
        "0200000000010200000000020800450000304d2e00004006a996c0000202c000020104d2005001020304000000005802ffffb51d00005a5d544f4679706b",
    );
    assert_eq!(key_of(&tcp, 0).get(Field::TcpFlags), 0x802);
    // Three tags: the outer one is the VLAN key whatever is inside.
    let tags = hex(
        "020000000001020000000002810000058100000681000007 0800450000244d2e00004011a997c0000202c000020100010002001016365a5d544f4679706b",
    );
    let k = key_of(&tags, 0);
    assert_eq!(
        (k.get(Field::VlanId), k.get(Field::VlanEthType)),
        (5, 0x8100)
    );
    // An IPv4 header with IHL 4: no IPv4 field at all.
    let mut short = udp_frame();
    short[14] = 0x44;
    let k = key_of(&short, 0);
    assert_eq!((k.get(Field::SrcIp), k.get(Field::IpProto)), (0, 0));
    // TCP with a data offset of 4: no flags.
    let mut t = tcp.clone();
    t[14 + 20 + 12] = 0x48;
    assert_eq!(key_of(&t, 0).get(Field::TcpFlags), 0);
}

/// An IPv6 frame from 2001:db8::7 to 2001:db8:1::9 (traffic class 0xb8, hop limit 3),
/// tagged with `tags` (TPID, TCI), whose fixed header names `next`, then `rest`, by hand.
fn ip6_frame(tags: &[(u16, u16)], next: u8, rest: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x86, 0xdd, 0x6b, 0x80, 0, 0]);
    f.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 3]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    f.extend_from_slice(rest);
    f
}

/// IPv6 keys as flower reads them: addresses in their four words, traffic class and hop
/// limit in the TOS and TTL fields, the upper layer past a destination options header,
/// ICMPv6 type and code in the ICMP fields; a fragment's protocol but no L4 field.
#[test]
fn ipv6_keys_are_read_as_flower_reads_them() {
    let udp = [0x0f, 0xa0, 0x13, 0x88, 0, 8, 0, 0]; // 4000 → 5000
    let dest_opts = [17, 0, 1, 4, 0, 0, 0, 0];
    let k = key_of(&ip6_frame(&[], 60, &[&dest_opts[..], &udp].concat()), 2);
    assert_eq!(k.get(Field::EthType), 0x86dd);
    assert_eq!(
        (
            k.get(Field::IpProto),
            k.get(Field::IpTos),
            k.get(Field::IpTtl)
        ),
        (17, 0xb8, 3)
    );
    assert_eq!(
        (k.get(Field::SrcIp6Hi), k.get(Field::SrcIp6Lo)),
        (0x2001_0db8_0000_0000, 7)
    );
    assert_eq!(
        (k.get(Field::DstIp6Hi), k.get(Field::DstIp6Lo)),
        (0x2001_0db8_0001_0000, 9)
    );
    assert_eq!((k.get(Field::SrcPort), k.get(Field::DstPort)), (4000, 5000));
    assert_eq!((k.get(Field::SrcIp), k.get(Field::DstIp)), (0, 0));
    // Tagged ICMPv6 echo request: the tag, then ICMP type 128 code 0.
    let k = key_of(
        &ip6_frame(&[(0x8100, 0x2005)], 58, &[128, 0, 0, 0, 0, 1, 0, 1]),
        0,
    );
    assert_eq!(
        (
            k.get(Field::VlanId),
            k.get(Field::VlanPrio),
            k.get(Field::VlanEthType)
        ),
        (5, 1, 0x86dd)
    );
    assert_eq!((k.get(Field::IcmpType), k.get(Field::IcmpCode)), (128, 0));
    assert_eq!(k.get(Field::DstIp6Lo), 9);
    // A first fragment of UDP: the protocol it carries, no port.
    let frag = [17, 0, 0, 1, 0, 0, 0, 5];
    let k = key_of(&ip6_frame(&[], 44, &[&frag[..], &udp].concat()), 0);
    assert_eq!((k.get(Field::IpProto), k.get(Field::DstPort)), (17, 0));
}

/// IPv6 filters (addresses by prefix, protocol, port) beside IPv4 ones of the same shape:
/// each family's packets find their own filter.
#[test]
fn ipv6_filters_match_ipv6_packets() {
    let mut v6 = Match::default();
    v6.set(Field::EthType, 0x86dd, 0xffff);
    let (hi, _) = ip6_bits("2001:db8:1::".parse().unwrap());
    v6.set(Field::DstIp6Hi, hi, u64::MAX << 16); // /48
    v6.set(Field::IpProto, 17, 0xff);
    v6.set(Field::DstPort, 5000, 0xffff);
    let mut v4 = Match::default();
    v4.set(Field::EthType, 0x0800, 0xffff);
    v4.set(Field::DstIp, 0xcb00_7100, 0xffff_ff00);
    v4.set(Field::IpProto, 17, 0xff);
    v4.set(Field::DstPort, 5000, 0xffff);
    let f = |prio, matches| Filter {
        chain: 0,
        prio,
        matches,
        actions: vec![Action::Pass],
    };
    let c = Classifier::new(vec![f(1, v4), f(2, v6)]).unwrap();
    let udp = [0x0f, 0xa0, 0x13, 0x88, 0, 8, 0, 0];
    let k6 = key_of(&ip6_frame(&[], 17, &udp), 0);
    let k4 = key_of(&udp_frame(), 0);
    assert_eq!(c.classify(0, &k6), Some(1));
    assert_eq!(c.classify(0, &k4), Some(0));
    assert_eq!(c.classify_linear(0, &k6), Some(1));
    // Another /48, or another port: no filter.
    let mut other = ip6_frame(&[], 17, &udp);
    other[14 + 24 + 5] = 2;
    assert_eq!(c.classify(0, &key_of(&other, 0)), None);
    let mut port = ip6_frame(&[], 17, &udp);
    port[14 + 40 + 3] = 0x89;
    assert_eq!(c.classify(0, &key_of(&port, 0)), None);
}

/// Random filters over a few masks, ranges among them, several chains; random keys near
/// the filters' values: tuple-space search gives what a walk in priority order gives.
fn arb_filter() -> impl Strategy<Value = Filter> {
    let field = prop::sample::select(vec![
        Field::SrcIp,
        Field::DstIp,
        Field::IpProto,
        Field::DstPort,
        Field::SrcPort,
        Field::VlanId,
        Field::InPort,
        Field::TcpFlags,
        Field::SrcIp6Lo,
        Field::DstIp6Hi,
    ]);
    (
        prop::collection::vec((field, 0u64..4, any::<bool>()), 1..4),
        0u32..3,
        0u32..50,
        prop::option::of((0u16..4, 0u16..4)),
    )
        .prop_map(|(fs, chain, prio, range)| {
            let mut m = Match::default();
            for (f, v, wide) in fs {
                let mask = if wide { f.max() } else { 1 };
                m.set(f, v, mask);
            }
            if let Some((a, b)) = range {
                m.dst_range = Some(Range {
                    min: a.min(b),
                    max: a.max(b),
                });
            }
            Filter {
                chain,
                prio,
                matches: m,
                actions: vec![Action::Pass],
            }
        })
}

proptest! {
    #[test]
    fn tuple_space_search_agrees_with_a_linear_walk(
        filters in prop::collection::vec(arb_filter(), 0..40),
        keys in prop::collection::vec(prop::collection::vec((0u64..4, 0u64..4), 10), 1..40),
    ) {
        let Ok(c) = Classifier::new(filters) else { return Ok(()); };
        let fields = [Field::SrcIp, Field::DstIp, Field::IpProto, Field::DstPort, Field::SrcPort,
            Field::VlanId, Field::InPort, Field::TcpFlags, Field::SrcIp6Lo, Field::DstIp6Hi];
        for vals in keys {
            let mut k = Key::default();
            for (f, (v, _)) in fields.iter().zip(&vals) {
                k.set(*f, *v);
            }
            for chain in 0..3 {
                prop_assert_eq!(c.classify(chain, &k), c.classify_linear(chain, &k));
            }
        }
    }
}

#[test]
fn duplicates_and_backward_gotos_are_refused() {
    let mut m = Match::default();
    m.set(Field::IpProto, 17, 0xff);
    let f = |chain, prio, actions| Filter {
        chain,
        prio,
        matches: m,
        actions,
    };
    assert_eq!(
        Classifier::new(vec![
            f(0, 1, vec![Action::Pass]),
            f(0, 1, vec![Action::Drop])
        ])
        .err(),
        Some(ClsError::Duplicate(0, 1))
    );
    assert_eq!(
        Classifier::new(vec![f(1, 1, vec![Action::Goto(1)])]).err(),
        Some(ClsError::GotoBackwards(0, 1))
    );
    assert_eq!(
        Classifier::new(vec![f(0, 1, vec![Action::Goto(4)])]).err(),
        Some(ClsError::NoChain(0, 4))
    );
    assert!(
        Classifier::new(vec![
            f(0, 1, vec![Action::Goto(4)]),
            f(4, 1, vec![Action::Drop])
        ])
        .is_ok()
    );
}
