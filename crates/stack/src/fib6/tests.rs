//! Tests of the IPv6 table against hand-derived answers and against a linear scan.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use proptest::prelude::*;

use super::*;

fn pfx(s: &str) -> Ipv6Prefix {
    s.parse().expect("prefix")
}

fn a(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().expect("address"))
}

/// Longest-prefix match by linear scan: the independent answer.
fn linear_lpm(routes: &BTreeMap<Ipv6Prefix, u32>, addr: u128) -> Option<u32> {
    routes
        .iter()
        .filter(|(p, _)| p.contains_bits(addr))
        .max_by_key(|(p, _)| p.prefix_len())
        .map(|(_, &v)| v)
}

/// Single, batched and route-returning lookups all give `want` for `addrs`.
fn expect(fib: &Fib6, addrs: &[u128], want: &[Option<u32>]) {
    let mut batch = vec![Some(u32::MAX); addrs.len()];
    fib.lookup_batch(addrs, &mut batch);
    for ((&addr, &w), &b) in addrs.iter().zip(want).zip(&batch) {
        let shown = Ipv6Addr::from(addr);
        assert_eq!(fib.lookup(addr), w, "lookup {shown}");
        assert_eq!(b, w, "batch {shown}");
        assert_eq!(fib.longest_match(addr).map(|(_, v)| v), w, "match {shown}");
        assert_eq!(
            fib.lookup_len(addr),
            fib.longest_match(addr).map(|(p, v)| (v, p.prefix_len())),
            "length {shown}"
        );
    }
}

#[test]
fn empty_table_matches_nothing() {
    let fib = Fib6::new();
    expect(&fib, &[0, 1, a("2001:db8::1"), u128::MAX], &[None; 4]);
    assert!(fib.is_empty());
    assert_eq!(fib.stats().nodes, 0);
    fib.check_invariants();
}

/// `::/0` covers every address (RFC 4291 2.5: the unspecified prefix of length 0).
#[test]
fn default_route() {
    let mut fib = Fib6::new();
    assert_eq!(fib.insert(Ipv6Prefix::DEFAULT, 9), Ok(None));
    let addrs = [0, 1, a("2001:db8::1"), a("fe80::1"), u128::MAX];
    expect(&fib, &addrs, &[Some(9); 5]);
    assert_eq!(
        fib.longest_match(a("2001:db8::1")),
        Some((Ipv6Prefix::DEFAULT, 9))
    );
    assert_eq!(fib.insert(Ipv6Prefix::DEFAULT, 10), Ok(Some(9)));
    expect(&fib, &addrs, &[Some(10); 5]);
    assert_eq!(fib.remove(Ipv6Prefix::DEFAULT), Some(10));
    assert_eq!(fib.remove(Ipv6Prefix::DEFAULT), None);
    expect(&fib, &addrs, &[None; 5]);
    fib.check_invariants();
}

/// A /128 matches its one address only; the addresses beside it fall to the cover.
#[test]
fn host_routes() {
    let mut fib = Fib6::new();
    fib.insert(pfx("2001:db8::/32"), 32).unwrap();
    for (s, v) in [
        ("::/128", 1),
        ("::1/128", 2),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 3),
        ("2001:db8::1/128", 4),
        ("2001:db8:0:0:8000::/128", 5),
    ] {
        fib.insert(pfx(s), v).unwrap();
    }
    let addrs = [
        0,
        1,
        2,
        u128::MAX,
        u128::MAX - 1,
        a("2001:db8::1"),
        a("2001:db8::"),
        a("2001:db8::2"),
        a("2001:db8::8000:0:0:0"),
        a("2001:db8::8000:0:0:1"),
    ];
    let want = [
        Some(1),
        Some(2),
        None,
        Some(3),
        None,
        Some(4),
        Some(32),
        Some(32),
        Some(5),
        Some(32),
    ];
    expect(&fib, &addrs, &want);
    assert_eq!(fib.get(pfx("::1/128")), Some(2));
    assert_eq!(fib.get(pfx("::2/128")), None);
    assert_eq!(
        fib.longest_match(a("2001:db8::1")),
        Some((pfx("2001:db8::1/128"), 4))
    );
    fib.check_invariants();
}

/// /64 inside /48 inside /32 under a default: each address gets the longest that
/// contains it, and removing the longer route restores the shorter one's answer.
#[test]
fn nested_routes_and_removal_restores_shorter_match() {
    let mut fib = Fib6::new();
    fib.insert(Ipv6Prefix::DEFAULT, 0).unwrap();
    fib.insert(pfx("2001:db8::/32"), 32).unwrap();
    fib.insert(pfx("2001:db8:1::/48"), 48).unwrap();
    fib.insert(pfx("2001:db8:1:2::/64"), 64).unwrap();
    let addrs = [
        a("2001:db8:1:2::1"),
        a("2001:db8:1:2:ffff:ffff:ffff:ffff"),
        a("2001:db8:1:3::1"),
        a("2001:db8:1:1:ffff:ffff:ffff:ffff"),
        a("2001:db8:2::1"),
        a("2001:db9::1"),
    ];
    expect(
        &fib,
        &addrs,
        &[Some(64), Some(64), Some(48), Some(48), Some(32), Some(0)],
    );
    assert_eq!(
        fib.longest_match(addrs[2]),
        Some((pfx("2001:db8:1::/48"), 48))
    );
    assert_eq!(fib.remove(pfx("2001:db8:1:2::/64")), Some(64));
    expect(
        &fib,
        &addrs,
        &[Some(48), Some(48), Some(48), Some(48), Some(32), Some(0)],
    );
    assert_eq!(fib.remove(pfx("2001:db8:1::/48")), Some(48));
    expect(
        &fib,
        &addrs,
        &[Some(32), Some(32), Some(32), Some(32), Some(32), Some(0)],
    );
    assert_eq!(fib.remove(pfx("2001:db8::/32")), Some(32));
    expect(&fib, &addrs, &[Some(0); 6]);
    assert_eq!(fib.stats().nodes, 0, "every node freed with its last route");
    fib.check_invariants();
}

/// One route of every length 0..=128 along one address: the address that leaves the
/// chain at bit `l` (agrees on the first `l` bits, differs at bit `l`) is matched by
/// the /l and nothing longer. Covers every first-stage and node boundary.
#[test]
fn chain_of_every_length() {
    let base = a("2a00:1450:4007:80f::200e");
    let route = |l: u8| Ipv6Prefix::truncating(base.into(), l);
    let leave = |l: u8| base ^ (1u128 << (127 - u32::from(l)));
    let mut fib = Fib6::new();
    for l in (0..=128).rev() {
        fib.insert(route(l), u32::from(l)).unwrap();
    }
    assert_eq!(fib.len(), 129);
    fib.check_invariants();
    let addrs: Vec<u128> = (0..128).map(leave).chain([base]).collect();
    let want: Vec<Option<u32>> = (0..=128).map(Some).collect();
    expect(&fib, &addrs, &want);
    // Bulk build of the same routes: same answers, same (canonical) shape.
    let bulk = Fib6::from_routes((0..=128).map(|l| (route(l), u32::from(l)))).unwrap();
    expect(&bulk, &addrs, &want);
    assert_eq!(bulk.stats().nodes, fib.stats().nodes);
    assert_eq!(bulk.routes(), fib.routes());
    // Removing the odd lengths: each address falls to the even route below it.
    for l in (1..=128).step_by(2) {
        assert_eq!(fib.remove(route(l)), Some(u32::from(l)));
    }
    let want: Vec<Option<u32>> = (0..=128).map(|l| Some(l & !1)).collect();
    expect(&fib, &addrs, &want);
    fib.check_invariants();
}

/// Eight lanes whose walks end at different depths, on either side of bit 64 (where
/// `lookup8` moves to the addresses' low halves), in one batch and in every rotation:
/// each lane gets its own answer, a lane that has left the tree staying out while the
/// others go on.
#[test]
fn lockstep_lanes_of_mixed_depths() {
    let base = a("2a00:1450:4007:80f::200e");
    let route = |l: u8| Ipv6Prefix::truncating(base.into(), l);
    let leave = |l: u8| base ^ (1u128 << (127 - u32::from(l)));
    // Routes at every third length: an address leaving the chain at bit `l` matches
    // the longest of them no longer than `l`.
    let fib = Fib6::from_routes((0..=128u8).step_by(3).map(|l| (route(l), u32::from(l)))).unwrap();
    let lens = [128u8, 0, 64, 17, 63, 100, 22, 58];
    for r in 0..8 {
        let l = |i: usize| lens[(i + r) % 8];
        let addrs: [u128; 8] = std::array::from_fn(|i| match l(i) {
            128 => base,
            l => leave(l),
        });
        let got = fib.lookup8(&addrs);
        for i in 0..8 {
            let want = Some(u32::from(l(i).min(126)) / 3 * 3);
            assert_eq!(got[i], want, "lane {i} leaving at {}", l(i));
            assert_eq!(fib.lookup(addrs[i]), want);
        }
    }
}

#[test]
fn replace_get_len_and_iteration() {
    let mut fib = Fib6::new();
    assert_eq!(fib.insert(pfx("2001:db8::/32"), 1), Ok(None));
    assert_eq!(fib.insert(pfx("2001:db8::/32"), 2), Ok(Some(1)));
    assert_eq!(fib.insert(pfx("2001:db8:1::/48"), 3), Ok(None));
    assert_eq!(fib.insert(pfx("2001::/16"), 4), Ok(None));
    assert_eq!(fib.insert(pfx("2001::/16"), 5), Ok(Some(4)));
    assert_eq!(fib.len(), 3);
    assert_eq!(fib.get(pfx("2001:db8::/32")), Some(2));
    assert_eq!(fib.get(pfx("2001:db8::/33")), None);
    assert_eq!(fib.get(pfx("2001::/16")), Some(5));
    assert_eq!(fib.get(pfx("2000::/15")), None);
    assert_eq!(fib.remove(pfx("2001:db8::/33")), None);
    assert_eq!(fib.remove(pfx("2001:db8:2::/48")), None);
    assert_eq!(fib.remove(pfx("2002::/16")), None);
    assert_eq!(
        fib.routes(),
        [
            (pfx("2001::/16"), 5),
            (pfx("2001:db8::/32"), 2),
            (pfx("2001:db8:1::/48"), 3)
        ]
    );
    assert!(format!("{fib:?}").contains("routes: 3"));
    fib.check_invariants();
}

#[test]
fn values_and_node_limit_errors_leave_the_table_unchanged() {
    let mut fib = Fib6::new();
    assert_eq!(
        fib.insert(pfx("2001:db8::/32"), u32::MAX),
        Err(Fib6Error::ValueTooLarge { value: u32::MAX })
    );
    assert_eq!(fib.insert(pfx("::/0"), MAX_VALUE), Ok(None));
    expect(&fib, &[1], &[Some(MAX_VALUE)]);
    // A /48 below the first stage needs nodes at depths 16, 22, 28, 34, 40 and 46.
    let mut small = Fib6::with_max_nodes(6);
    small.insert(pfx("2001:db8:1::/48"), 1).unwrap();
    assert_eq!(small.stats().nodes, 6);
    // 2001:db8:100::/48 leaves that path at bit 39 (node 34): it needs two more.
    let err = Fib6Error::NodesExhausted { max_nodes: 6 };
    assert_eq!(small.insert(pfx("2001:db8:100::/48"), 9), Err(err));
    // 2001:db8:2::/48 differs at bit 46 only (node 46) and the /40 is held by node 40.
    assert_eq!(small.insert(pfx("2001:db8:2::/48"), 2), Ok(None));
    assert_eq!(small.insert(pfx("2001:db8::/40"), 3), Ok(None));
    assert_eq!(small.len(), 3);
    small.check_invariants();
    expect(
        &small,
        &[
            a("2001:db8:1::1"),
            a("2001:db8:2::1"),
            a("2001:db8:3::1"),
            a("2001:db8:100::1"),
        ],
        &[Some(1), Some(2), Some(3), None],
    );
    assert_eq!(
        small.bulk_load([(pfx("2001:db8:1::/48"), 1), (pfx("2001:db9:1::/48"), 1)]),
        Err(err)
    );
    assert_eq!(small.len(), 3, "failed bulk load left the table as it was");
    assert_eq!(
        small.bulk_load([(pfx("::/0"), u32::MAX)]),
        Err(Fib6Error::ValueTooLarge { value: u32::MAX })
    );
    assert_eq!(small.get(pfx("2001:db8::/40")), Some(3));
    assert_eq!(Fib6::with_max_nodes(u32::MAX).max_nodes(), MAX_NODES_LIMIT);
    assert!(!err.to_string().is_empty());
}

/// Removing most routes frees so many arena slots that the arenas are packed again,
/// and the answers stay right.
#[test]
fn churn_compacts_the_arenas() {
    let routes = generate_prefixes(20_000, 3);
    let mut fib = Fib6::new();
    for &(p, v) in &routes {
        fib.insert(p, v).unwrap();
    }
    let full = fib.stats();
    let (gone, kept) = routes.split_at(19_000);
    for &(p, v) in gone {
        assert_eq!(fib.remove(p), Some(v));
    }
    fib.check_invariants();
    let after = fib.stats();
    assert!(
        after.node_slots < full.node_slots / 4,
        "{after:?} after {full:?}"
    );
    let model: BTreeMap<Ipv6Prefix, u32> = kept.iter().copied().collect();
    let bulk = Fib6::from_routes(kept.iter().copied()).unwrap();
    assert_eq!(bulk.stats().nodes, after.nodes);
    let probes: Vec<u128> = routes.iter().map(|(p, _)| p.bits() | 1).collect();
    for &addr in &probes {
        let want = linear_lpm(&model, addr);
        assert_eq!(fib.lookup(addr), want);
        assert_eq!(bulk.lookup(addr), want);
    }
}

/// The memory bound for a full table: 200,000 generated routes (see `generate`).
///
/// Each route longer than /16 costs one 4-byte value, and nodes only where its path
/// leaves the paths of the routes before it. A /48 alone under its /32 holder adds the
/// nodes at depths 34, 40 and 46 (72 bytes); the holders' own paths (depths 16 to 28)
/// are shared. So about three nodes per route is the worst the generated mix should
/// need: 200,000 × (3 × 24 + 4) ≈ 15.2 MB, plus the first stage (576 KiB) and the
/// slack of the arenas' growth. Bulk build packs the arenas; inserting one at a time
/// may leave free blocks and doubled capacity: twice the bound.
#[test]
fn full_table_memory_is_bounded() {
    let routes = generate_prefixes(200_000, 42);
    let fib = Fib6::from_routes(routes.iter().copied()).unwrap();
    let stats = fib.stats();
    let first_stage = (1 << DIRECT_BITS) * 9;
    let bound = 200_000 * (3 * 24 + 4) + first_stage + (1 << 20);
    assert_eq!(stats.routes, 200_000);
    assert!(
        stats.nodes <= 3 * 200_000,
        "{} nodes for 200,000 routes",
        stats.nodes
    );
    assert!(
        stats.memory_bytes <= bound,
        "{} bytes, bound {bound}: {stats:?}",
        stats.memory_bytes
    );
    let mut incremental = Fib6::new();
    for &(p, v) in &routes {
        incremental.insert(p, v).unwrap();
    }
    let inc = incremental.stats();
    assert_eq!(inc.nodes, stats.nodes, "same shape either way");
    assert!(
        inc.memory_bytes <= 2 * bound,
        "{} bytes incrementally, bound {}",
        inc.memory_bytes,
        2 * bound
    );
    // Spot checks against a hash per length (an independent LPM): the match found is
    // a route containing the address, and no longer route contains it.
    let set: std::collections::HashMap<Ipv6Prefix, u32> = routes.iter().copied().collect();
    for (i, (p, _)) in routes.iter().enumerate().step_by(97) {
        let addr = p.bits() | (p.bits().rotate_left(i as u32) & !mask6(p.prefix_len()));
        let (m, v) = fib.longest_match(addr).expect("inside a route");
        assert_eq!(set.get(&m), Some(&v));
        assert!(m.contains_bits(addr) && m.prefix_len() >= p.prefix_len());
        let longer = (m.prefix_len() + 1..=128)
            .any(|l| set.contains_key(&Ipv6Prefix::truncating(addr.into(), l)));
        assert!(
            !longer,
            "a route longer than {m} contains {}",
            Ipv6Addr::from(addr)
        );
        assert_eq!(fib.lookup(addr), Some(v));
        assert_eq!(incremental.lookup(addr), Some(v));
    }
}

// ---- property test ----

/// Addresses near a few bases: the base's first `j` bits (random `j`), then random
/// bits, so that generated prefixes nest and sit beside each other at every length.
fn arb_addr(bases: [u128; 3]) -> impl Strategy<Value = u128> {
    prop_oneof![
        8 => (0..3usize, 0u32..=128, any::<u128>()).prop_map(move |(i, j, r)| {
            bases[i] ^ r.checked_shr(j).unwrap_or(0)
        }),
        1 => any::<u128>(),
    ]
}

fn arb_len() -> impl Strategy<Value = u8> {
    // Lengths up to /16 fill up to 65,536 first-stage slots each: keep them rarer.
    prop_oneof![1 => 0u8..=16, 6 => 17u8..=128]
}

fn arb_route(bases: [u128; 3]) -> impl Strategy<Value = (Ipv6Prefix, u32)> {
    (arb_addr(bases), arb_len(), 0..=MAX_VALUE)
        .prop_map(|(addr, len, v)| (Ipv6Prefix::truncating(addr.into(), len), v))
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Ipv6Prefix, u32),
    /// Remove the route inserted by the `i`-th insert so far (modulo their number).
    Remove(usize),
}

fn arb_case() -> impl Strategy<Value = (Vec<Op>, Vec<u128>, Vec<(usize, u128)>)> {
    any::<[u128; 3]>().prop_flat_map(|bases| {
        let op = prop_oneof![
            3 => arb_route(bases).prop_map(|(p, v)| Op::Insert(p, v)),
            1 => any::<usize>().prop_map(Op::Remove),
        ];
        (
            prop::collection::vec(op, 0..400),
            prop::collection::vec(arb_addr(bases), 200),
            prop::collection::vec((any::<usize>(), any::<u128>()), 200),
        )
    })
}

/// Probe addresses: both ends of every route and the addresses just outside them,
/// random addresses inside routes (`picks`), and the near-base / random `extra`.
fn probes(routes: &[Ipv6Prefix], picks: &[(usize, u128)], extra: &[u128]) -> Vec<u128> {
    let mut out = vec![0, u128::MAX];
    for p in routes {
        let last = p.bits() | !mask6(p.prefix_len());
        out.extend([
            p.bits(),
            p.bits().wrapping_sub(1),
            last,
            last.wrapping_add(1),
        ]);
    }
    if !routes.is_empty() {
        for &(i, bits) in picks {
            let p = routes[i % routes.len()];
            out.push(p.bits() | (bits & !mask6(p.prefix_len())));
        }
    }
    out.extend_from_slice(extra);
    out
}

fn assert_matches(fib: &Fib6, model: &BTreeMap<Ipv6Prefix, u32>, addrs: &[u128]) {
    assert_eq!(fib.len(), model.len());
    let mut batch = vec![None; addrs.len()];
    fib.lookup_batch(addrs, &mut batch);
    for (&addr, &got) in addrs.iter().zip(&batch) {
        let want = linear_lpm(model, addr);
        let shown = Ipv6Addr::from(addr);
        assert_eq!(fib.lookup(addr), want, "lookup {shown}");
        assert_eq!(got, want, "batch {shown}");
        let m = fib.longest_match(addr);
        assert_eq!(m.map(|(_, v)| v), want, "match {shown}");
        // The matched length, against the linear scan's longest covering prefix.
        let want_len = model
            .keys()
            .filter(|p| p.contains_bits(addr))
            .map(|p| p.prefix_len())
            .max();
        assert_eq!(fib.lookup_len(addr), want.zip(want_len), "length {shown}");
        if let Some((p, v)) = m {
            assert!(p.contains_bits(addr) && model.get(&p) == Some(&v), "{p}");
        }
    }
}

/// [`matches_linear_scan`]'s case on a table (`sparse`: a VRF's, [`Fib6::sparse`]), its
/// copy, and the same routes loaded in bulk.
fn linear_scan_case(
    sparse: bool,
    ops: &[Op],
    extra: &[u128],
    picks: &[(usize, u128)],
) -> Result<(), TestCaseError> {
    let new = || if sparse { Fib6::sparse() } else { Fib6::new() };
    let mut fib = new();
    let mut model = BTreeMap::new();
    let mut inserted = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(p, v) => {
                prop_assert_eq!(fib.insert(p, v).unwrap(), model.insert(p, v));
                inserted.push(p);
            }
            Op::Remove(i) if !inserted.is_empty() => {
                let p = inserted[i % inserted.len()];
                prop_assert_eq!(fib.remove(p), model.remove(&p));
            }
            Op::Remove(_) => {}
        }
        if step % 100 == 99 {
            let routes: Vec<Ipv6Prefix> = model.keys().copied().collect();
            assert_matches(&fib, &model, &probes(&routes, &picks[..20], &extra[..20]));
        }
    }
    for (p, v) in &model {
        prop_assert_eq!(fib.get(*p), Some(*v));
    }
    let routes: Vec<Ipv6Prefix> = inserted.clone();
    let addrs = probes(&routes, picks, extra);
    assert_matches(&fib, &model, &addrs);
    fib.check_invariants();
    let listed: Vec<(Ipv6Prefix, u32)> = model.iter().map(|(p, v)| (*p, *v)).collect();
    prop_assert_eq!(fib.routes(), listed.clone());

    let mut bulk = new();
    bulk.bulk_load(listed.iter().copied()).unwrap();
    assert_matches(&fib.clone(), &model, &addrs);
    bulk.check_invariants();
    assert_matches(&bulk, &model, &addrs);
    prop_assert_eq!(bulk.stats().nodes, fib.stats().nodes);
    prop_assert_eq!(bulk.stats().results, fib.stats().results);

    for p in &inserted {
        prop_assert_eq!(fib.remove(*p), model.remove(p));
    }
    prop_assert!(fib.is_empty());
    prop_assert_eq!(fib.stats().nodes, 0);
    fib.check_invariants();
    assert_matches(&fib, &model, &addrs[..50.min(addrs.len())]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The table answers as a linear scan over its routes after interleaved inserts
    /// and removes; a bulk build of the same routes answers the same with the same
    /// shape; removing everything frees every node.
    #[test]
    fn matches_linear_scan((ops, extra, picks) in arb_case()) {
        for sparse in [false, true] {
            linear_scan_case(sparse, &ops, &extra, &picks)?;
        }
    }

    /// Bulk loading a list with repeated prefixes keeps the last value of each, as
    /// inserting them in order does.
    #[test]
    fn bulk_load_last_duplicate_wins(
        routes in any::<[u128; 3]>().prop_flat_map(|b| prop::collection::vec(arb_route(b), 0..200)),
        dup in prop::collection::vec((any::<usize>(), 0..=MAX_VALUE), 0..50),
    ) {
        let mut list = routes.clone();
        if !routes.is_empty() {
            list.extend(dup.iter().map(|&(i, v)| (routes[i % routes.len()].0, v)));
        }
        let mut one_by_one = Fib6::new();
        for &(p, v) in &list {
            one_by_one.insert(p, v).unwrap();
        }
        let mut bulk = Fib6::new();
        bulk.insert(pfx("::/0"), 1).unwrap();
        bulk.bulk_load(list.iter().copied()).unwrap();
        prop_assert_eq!(bulk.routes(), one_by_one.routes());
        bulk.check_invariants();
    }
}
