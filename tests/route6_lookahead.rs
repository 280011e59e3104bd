//! `ip6-route` looks destinations up ahead, eight in lockstep, when the route hint cannot
//! help. Here hundreds of interleaved flows to a table of generated prefixes over four
//! gateways, with packets that never reach the FIB mixed in (multicast, link-local, a
//! source that is ours with the destination of the packet after it), and destinations
//! without a route: each forwarded frame must leave for the gateway a linear
//! longest-prefix scan of the table names, every variant the same (per-packet mode looks
//! each destination up alone, list mode ahead), the others dropped or answered as
//! without look-ahead.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use netbatch_runtime::setup::StaticNeighbour6;
use netbatch_scenarios::frames;
use netbatch_scenarios::{GW_MAC, Gro, Lab, PEER, PEER6, US, US6, VARIANTS, router6};
use netbatch_stack::fib6::generate_prefixes;
use netbatch_stack::route::{Route6, RouteKind};
use netbatch_wire::ethernet::MacAddr;

/// What a variant sent on eth1 and dropped, by reason.
type Outcome = (Vec<Vec<u8>>, BTreeMap<&'static str, u64>);

/// The gateways on eth1 (2001:db8:200::fe is the lab's own) and their MACs.
fn gateways() -> [(Ipv6Addr, MacAddr); 4] {
    let ip = |s: &str| s.parse::<Ipv6Addr>().expect("address");
    [
        (ip("2001:db8:200::fe"), GW_MAC),
        (ip("2001:db8:200::10"), MacAddr([2, 0, 0, 0, 3, 1])),
        (ip("2001:db8:200::11"), MacAddr([2, 0, 0, 0, 3, 2])),
        (ip("2001:db8:200::12"), MacAddr([2, 0, 0, 0, 3, 3])),
    ]
}

/// SplitMix64, for the destinations' host bits.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn lookups_made_ahead_forward_as_lookups_one_by_one() {
    let gws = gateways();
    let table = generate_prefixes(3_000, 11);
    let mut spec = router6(Gro::Off);
    for (p, hop) in &table {
        spec.routes6.push(Route6::new(
            *p,
            RouteKind::Unicast,
            Some(1),
            Some(gws[*hop as usize % 4].0),
        ));
    }
    for &(ip, mac) in &gws[1..] {
        spec.neighbours6
            .push(StaticNeighbour6 { iface: 1, ip, mac });
    }
    // The gateway's MAC a linear scan of the table gives for `d` (none: no route).
    let expect = |d: Ipv6Addr| {
        table
            .iter()
            .filter(|(p, _)| p.contains(d))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|(_, hop)| gws[*hop as usize % 4].1)
    };
    // 120 destinations inside the table, visited round-robin with repeats, and things
    // that must not take or disturb a look-ahead.
    let mut rng = Rng(5);
    let dsts: Vec<Ipv6Addr> = (0..120)
        .map(|_| {
            let (p, _) = table[(rng.next() % table.len() as u64) as usize];
            let host = ((u128::from(rng.next()) << 64) | u128::from(rng.next()))
                & !netbatch_stack::fib6::mask6(p.prefix_len());
            Ipv6Addr::from(p.bits() | host)
        })
        .collect();
    let mut input = Vec::new();
    let mut want = Vec::new();
    let udp = |src: &str, dst: &str, i: usize| {
        frames::udp6(PEER, US, src, dst, 4000 + i as u16, 53, 64, &[i as u8; 16])
    };
    for i in 0..700 {
        let d = dsts[(i * 7 + i / 50) % dsts.len()];
        match i % 23 {
            // Ours as the source, then the same destination from the peer.
            5 => {
                input.push(udp(US6, &d.to_string(), i));
                input.push(udp(PEER6, &d.to_string(), i));
                want.push(expect(d));
            }
            9 => input.push(udp(PEER6, "ff02::5", i)),
            13 => input.push(udp(PEER6, "fe80::99", i)),
            // No route (the documentation prefix is outside the generated table).
            17 => input.push(udp(PEER6, "2001:db8:dead::1", i)),
            // Three in a row to one destination: the hint between look-aheads.
            19 => {
                for _ in 0..3 {
                    input.push(udp(PEER6, &d.to_string(), i));
                    want.push(expect(d));
                }
            }
            _ => {
                input.push(udp(PEER6, &d.to_string(), i));
                want.push(expect(d));
            }
        }
    }
    assert!(want.iter().all(Option::is_some), "every flow has a route");
    let mut first: Option<Outcome> = None;
    for (mode, dispatch) in VARIANTS {
        let mut lab = Lab::new(&spec, mode, dispatch);
        lab.feed(0, input.iter().cloned());
        lab.run();
        let eth1: Vec<Vec<u8>> = lab.tx(1).into_iter().map(|f| f.bytes).collect();
        let got: Vec<Option<MacAddr>> = eth1
            .iter()
            .map(|f| Some(MacAddr(f[0..6].try_into().expect("MAC"))))
            .collect();
        assert_eq!(got, want, "{mode:?}/{dispatch:?}: next hops");
        lab.assert_conserved();
        let drops = lab.drops();
        let every = |k: usize| Some((0..700).filter(|i| i % 23 == k).count() as u64);
        assert_eq!(drops.get("local_source").copied(), every(5), "{drops:?}");
        let multicast = drops.get("ip6_multicast_not_joined").copied();
        assert_eq!(multicast, every(9), "{drops:?}");
        let link_local = drops.get("ip6_link_local_dest").copied();
        assert_eq!(link_local, every(13), "{drops:?}");
        lab.stop_and_check_pool();
        match &first {
            None => first = Some((eth1, drops)),
            Some(f) => assert_eq!(&(eth1, drops), f, "{mode:?}/{dispatch:?} differs"),
        }
    }
}
