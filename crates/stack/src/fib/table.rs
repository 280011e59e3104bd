//! [`Table`]: a [`Rib`] and a [`Fib`] updated together.
//!
//! Invariant: after every call the FIB answers exactly like the RIB's longest-prefix
//! match; a call that returns an error has changed neither.

use std::fmt;

use super::dir24::{DEFAULT_MAX_GROUPS, Fib};
use super::rib::Rib;
use super::{FibError, check_route};

/// IPv4 routing table: control-plane route set plus the DIR-24-8 lookup structure.
#[derive(Clone)]
pub struct Table {
    rib: Rib,
    fib: Fib,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("routes", &self.rib.len())
            .field("fib", &self.fib)
            .finish()
    }
}

impl Table {
    /// Creates an empty table with at most [`DEFAULT_MAX_GROUPS`] tbl8 groups.
    pub fn new() -> Self {
        Self::with_max_groups(DEFAULT_MAX_GROUPS)
    }

    /// Creates an empty table with at most `max_groups` tbl8 groups (one per /24 that
    /// contains routes longer than /24).
    pub fn with_max_groups(max_groups: u32) -> Self {
        Self {
            rib: Rib::new(),
            fib: Fib::with_max_groups(max_groups),
        }
    }

    /// An empty compact table (a VRF's: see [`Fib::compact`]), with at most
    /// [`DEFAULT_MAX_GROUPS`] tbl8 groups.
    pub fn compact() -> Self {
        Self {
            rib: Rib::new(),
            fib: Fib::compact(DEFAULT_MAX_GROUPS),
        }
    }

    /// Adds or replaces a route; returns the previous value of exactly this prefix.
    ///
    /// Errors (table unchanged): `len > 32`, host bits set, `value` over
    /// [`MAX_VALUE`](super::MAX_VALUE), or no tbl8 group left.
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<Option<u32>, FibError> {
        check_route(prefix, len, value)?;
        self.fib.insert_route(prefix, len, value)?;
        Ok(self.rib.insert_checked(prefix, len, value))
    }

    /// Removes a route; returns its value, or `None` if it was not present (including
    /// for invalid prefixes).
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<u32> {
        let old = self.rib.remove(prefix, len)?;
        let cover = self.rib.covering(prefix, len);
        self.fib.remove_route(prefix, len, cover);
        Some(old)
    }

    /// Value of exactly this prefix, if present.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.rib.get(prefix, len)
    }

    /// Longest-prefix match through the FIB (the fast path).
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        self.fib.lookup(addr)
    }

    /// Longest-prefix match with the matched route's length; see [`Fib::lookup_len`].
    #[inline]
    pub fn lookup_len(&self, addr: u32) -> Option<(u32, u8)> {
        self.fib.lookup_len(addr)
    }

    /// Four independent lookups with overlapping loads; see [`Fib::lookup4`].
    #[inline]
    pub fn lookup4(&self, addrs: [u32; 4]) -> [Option<u32>; 4] {
        self.fib.lookup4(addrs)
    }

    /// Batched lookups; see [`Fib::lookup_batch`].
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        self.fib.lookup_batch(addrs, out);
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.rib.len()
    }

    /// `true` if there are no routes.
    pub fn is_empty(&self) -> bool {
        self.rib.is_empty()
    }

    /// All routes as `(prefix, len, value)`, by increasing `len`.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u8, u32)> + '_ {
        self.rib.iter()
    }

    /// Replaces all routes with `routes` (last occurrence of a duplicated prefix wins)
    /// and rebuilds the FIB in bulk. On error the table is unchanged.
    pub fn bulk_load<I>(&mut self, routes: I) -> Result<(), FibError>
    where
        I: IntoIterator<Item = (u32, u8, u32)>,
    {
        let mut rib = Rib::new();
        for (prefix, len, value) in routes {
            check_route(prefix, len, value)?;
            rib.insert_checked(prefix, len, value);
        }
        let fib = self.fib.build_from_rib(&rib)?;
        self.rib = rib;
        self.fib = fib;
        Ok(())
    }

    /// Approximate heap bytes of RIB and FIB (see [`Fib::memory_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.rib.memory_bytes() + self.fib.memory_bytes()
    }

    /// The control-plane route set.
    pub fn rib(&self) -> &Rib {
        &self.rib
    }

    /// The data-plane lookup structure.
    pub fn fib(&self) -> &Fib {
        &self.fib
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::super::{MAX_VALUE, prefix_mask};
    use super::*;

    const fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from_be_bytes([a, b, c, d])
    }

    /// Checks structure, and FIB == RIB == `expected` on `addrs`.
    fn check(t: &Table, addrs: &[u32], expected: &[Option<u32>]) {
        t.fib.check_invariants();
        for (&a, &e) in addrs.iter().zip(expected) {
            assert_eq!(t.lookup(a), e, "addr {}", std::net::Ipv4Addr::from(a));
            assert_eq!(
                t.rib.lookup(a),
                e,
                "rib addr {}",
                std::net::Ipv4Addr::from(a)
            );
        }
    }

    #[test]
    fn default_route_only() {
        let mut t = Table::new();
        assert_eq!(t.lookup(ip(1, 2, 3, 4)), None);
        assert_eq!(t.insert(0, 0, 7), Ok(None));
        check(&t, &[0, ip(1, 2, 3, 4), u32::MAX], &[Some(7); 3]);
        assert_eq!(t.remove(0, 0), Some(7));
        check(&t, &[0, ip(1, 2, 3, 4), u32::MAX], &[None; 3]);
        assert!(t.is_empty());
    }

    #[test]
    fn slash8_inside_default() {
        let mut t = Table::new();
        t.insert(0, 0, 1).unwrap();
        t.insert(ip(10, 0, 0, 0), 8, 2).unwrap();
        let addrs = [
            ip(9, 255, 255, 255),
            ip(10, 0, 0, 0),
            ip(10, 255, 255, 255),
            ip(11, 0, 0, 0),
        ];
        check(&t, &addrs, &[Some(1), Some(2), Some(2), Some(1)]);
        t.remove(ip(10, 0, 0, 0), 8);
        check(&t, &addrs, &[Some(1); 4]);
    }

    #[test]
    fn slash24_25_32_then_delete_25() {
        let mut t = Table::new();
        t.insert(ip(192, 168, 1, 0), 24, 24).unwrap();
        t.insert(ip(192, 168, 1, 0), 25, 25).unwrap();
        t.insert(ip(192, 168, 1, 5), 32, 32).unwrap();
        let addrs = [
            ip(192, 168, 1, 0),
            ip(192, 168, 1, 5),
            ip(192, 168, 1, 127),
            ip(192, 168, 1, 128),
            ip(192, 168, 1, 255),
            ip(192, 168, 2, 0),
        ];
        check(
            &t,
            &addrs,
            &[Some(25), Some(32), Some(25), Some(24), Some(24), None],
        );
        assert_eq!(t.fib.groups_in_use(), 1);
        assert_eq!(t.remove(ip(192, 168, 1, 0), 25), Some(25));
        check(
            &t,
            &addrs,
            &[Some(24), Some(32), Some(24), Some(24), Some(24), None],
        );
        assert_eq!(t.fib.groups_in_use(), 1);
        assert_eq!(t.remove(ip(192, 168, 1, 5), 32), Some(32));
        check(
            &t,
            &addrs,
            &[Some(24), Some(24), Some(24), Some(24), Some(24), None],
        );
        assert_eq!(t.fib.groups_in_use(), 0, "group collapsed into tbl24");
    }

    #[test]
    fn delete_slash24_keeps_slash32_and_falls_back_to_slash16() {
        let mut t = Table::new();
        t.insert(ip(10, 1, 0, 0), 16, 16).unwrap();
        t.insert(ip(10, 1, 2, 0), 24, 24).unwrap();
        t.insert(ip(10, 1, 2, 3), 32, 32).unwrap();
        let addrs = [
            ip(10, 1, 2, 2),
            ip(10, 1, 2, 3),
            ip(10, 1, 2, 4),
            ip(10, 1, 3, 0),
        ];
        check(&t, &addrs, &[Some(24), Some(32), Some(24), Some(16)]);
        assert_eq!(t.remove(ip(10, 1, 2, 0), 24), Some(24));
        check(&t, &addrs, &[Some(16), Some(32), Some(16), Some(16)]);
        assert_eq!(t.fib.groups_in_use(), 1);
        t.remove(ip(10, 1, 2, 3), 32);
        check(&t, &addrs, &[Some(16); 4]);
        assert_eq!(t.fib.groups_in_use(), 0);
    }

    #[test]
    fn overlapping_inserts_in_both_orders() {
        let routes = [
            (ip(10, 0, 0, 0), 8, 1),
            (ip(10, 1, 0, 0), 16, 2),
            (ip(10, 1, 1, 0), 24, 3),
            (ip(10, 1, 1, 128), 25, 4),
            (ip(10, 1, 1, 192), 26, 5),
            (ip(10, 1, 1, 200), 32, 6),
        ];
        let addrs = [
            ip(10, 9, 9, 9),
            ip(10, 1, 9, 9),
            ip(10, 1, 1, 1),
            ip(10, 1, 1, 130),
            ip(10, 1, 1, 193),
            ip(10, 1, 1, 200),
            ip(10, 1, 1, 201),
        ];
        let expected = [
            Some(1),
            Some(2),
            Some(3),
            Some(4),
            Some(5),
            Some(6),
            Some(5),
        ];
        let mut fwd = Table::new();
        let mut rev = Table::new();
        for &(p, l, v) in &routes {
            fwd.insert(p, l, v).unwrap();
        }
        for &(p, l, v) in routes.iter().rev() {
            rev.insert(p, l, v).unwrap();
        }
        check(&fwd, &addrs, &expected);
        check(&rev, &addrs, &expected);
        // Remove in the opposite orders as well.
        for &(p, l, _) in &routes {
            fwd.remove(p, l).unwrap();
        }
        for &(p, l, _) in routes.iter().rev() {
            rev.remove(p, l).unwrap();
        }
        check(&fwd, &addrs, &[None; 7]);
        check(&rev, &addrs, &[None; 7]);
        assert_eq!((fwd.fib.groups_in_use(), rev.fib.groups_in_use()), (0, 0));
    }

    #[test]
    fn full_address_range() {
        let mut t = Table::new();
        t.insert(0, 32, 1).unwrap();
        t.insert(u32::MAX, 32, 2).unwrap();
        t.insert(0, 1, 3).unwrap();
        t.insert(0x8000_0000, 1, 4).unwrap();
        let addrs = [0, 1, 0x7FFF_FFFF, 0x8000_0000, u32::MAX - 1, u32::MAX];
        check(
            &t,
            &addrs,
            &[Some(1), Some(3), Some(3), Some(4), Some(4), Some(2)],
        );
        t.remove(0, 1);
        t.remove(u32::MAX, 32);
        check(
            &t,
            &addrs,
            &[Some(1), None, None, Some(4), Some(4), Some(4)],
        );
        t.insert(0, 0, MAX_VALUE).unwrap();
        check(
            &t,
            &addrs,
            &[
                Some(1),
                Some(MAX_VALUE),
                Some(MAX_VALUE),
                Some(4),
                Some(4),
                Some(4),
            ],
        );
    }

    #[test]
    fn same_prefix_twice_replaces_value() {
        let mut t = Table::new();
        assert_eq!(t.insert(ip(10, 0, 0, 0), 16, 1), Ok(None));
        assert_eq!(t.insert(ip(10, 0, 0, 0), 16, 2), Ok(Some(1)));
        assert_eq!(t.insert(ip(10, 0, 0, 64), 26, 3), Ok(None));
        assert_eq!(t.insert(ip(10, 0, 0, 64), 26, 4), Ok(Some(3)));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(ip(10, 0, 0, 0), 16), Some(2));
        check(
            &t,
            &[ip(10, 0, 0, 1), ip(10, 0, 0, 65)],
            &[Some(2), Some(4)],
        );
        assert_eq!(t.fib.groups_in_use(), 1);
    }

    #[test]
    fn rejects_invalid_routes() {
        let mut t = Table::new();
        assert_eq!(
            t.insert(ip(10, 0, 0, 1), 24, 1),
            Err(FibError::HostBits {
                prefix: ip(10, 0, 0, 1),
                len: 24
            })
        );
        assert_eq!(t.insert(0, 33, 1), Err(FibError::InvalidLength { len: 33 }));
        assert_eq!(
            t.insert(0, 8, MAX_VALUE + 1),
            Err(FibError::ValueTooLarge {
                value: MAX_VALUE + 1
            })
        );
        assert_eq!(t.remove(0, 33), None);
        assert!(t.is_empty());
        assert_eq!(
            t.bulk_load([(0, 0, 1), (3, 31, 1)]),
            Err(FibError::HostBits { prefix: 3, len: 31 })
        );
        assert!(t.is_empty());
        assert_eq!(t.lookup(0), None);
        assert!(!FibError::InvalidLength { len: 33 }.to_string().is_empty());
    }

    #[test]
    fn tbl8_exhaustion_is_an_error_and_groups_are_reused() {
        let mut t = Table::with_max_groups(1);
        t.insert(ip(10, 0, 0, 0), 8, 8).unwrap();
        t.insert(ip(10, 0, 0, 0), 25, 1).unwrap();
        t.insert(ip(10, 0, 0, 128), 25, 2).unwrap(); // same /24: same group
        let err = FibError::Tbl8Exhausted { max_groups: 1 };
        assert_eq!(t.insert(ip(10, 0, 1, 0), 32, 3), Err(err));
        assert_eq!(t.len(), 3);
        check(&t, &[ip(10, 0, 1, 0)], &[Some(8)]);
        t.remove(ip(10, 0, 0, 0), 25).unwrap();
        t.remove(ip(10, 0, 0, 128), 25).unwrap();
        assert_eq!(t.fib.groups_in_use(), 0);
        assert_eq!(t.insert(ip(10, 0, 1, 0), 32, 3), Ok(None));
        check(
            &t,
            &[ip(10, 0, 1, 0), ip(10, 0, 1, 1), ip(10, 0, 0, 1)],
            &[Some(3), Some(8), Some(8)],
        );
        // A bulk load needing two groups fails and leaves the table as it was.
        assert_eq!(
            t.bulk_load([(ip(1, 0, 0, 0), 25, 1), (ip(2, 0, 0, 0), 25, 2)]),
            Err(err)
        );
        assert_eq!(t.len(), 2);
        check(&t, &[ip(10, 0, 1, 0), ip(1, 0, 0, 0)], &[Some(3), None]);
        assert_eq!(
            Table::with_max_groups(0).insert(0, 25, 0),
            Err(FibError::Tbl8Exhausted { max_groups: 0 })
        );
    }

    #[test]
    fn bulk_load_iter_and_memory() {
        let mut t = Table::new();
        t.insert(ip(1, 0, 0, 0), 8, 9).unwrap();
        let routes = [
            (ip(10, 0, 0, 0), 8, 1),
            (ip(10, 0, 0, 7), 32, 2),
            (ip(10, 0, 0, 0), 8, 3),
        ];
        t.bulk_load(routes).unwrap();
        assert_eq!(t.len(), 2);
        let mut all: Vec<_> = t.iter().collect();
        all.sort_unstable();
        assert_eq!(all, [(ip(10, 0, 0, 0), 8, 3), (ip(10, 0, 0, 7), 32, 2)]);
        check(
            &t,
            &[ip(1, 0, 0, 0), ip(10, 0, 0, 7), ip(10, 0, 0, 8)],
            &[None, Some(2), Some(3)],
        );
        assert!(t.memory_bytes() >= (1 << 24) * 4 + 256 * 4);
        assert!(format!("{t:?}").contains("routes: 2"));
    }

    // ---- property tests ----

    /// Top octets the generated prefixes cluster in, so that they overlap.
    const CLUSTERS: [u32; 3] = [10, 172, 192];

    fn arb_len() -> impl Strategy<Value = u8> {
        // Short prefixes are costly (a /0 writes 2^24 entries), keep them rare.
        prop_oneof![1 => 0u8..=8, 24 => 9u8..=24, 15 => 25u8..=32]
    }

    /// Address clustered in a few /8s, /16s and /24s.
    fn arb_addr() -> impl Strategy<Value = u32> {
        prop_oneof![
            9 => (0..CLUSTERS.len(), 0u32..3, prop_oneof![0u32..6, 0u32..256], any::<u8>())
                .prop_map(|(c, b, c3, d)| (CLUSTERS[c] << 24) | (b << 16) | (c3 << 8) | u32::from(d)),
            1 => any::<u32>(),
        ]
    }

    fn arb_route() -> impl Strategy<Value = (u32, u8, u32)> {
        (arb_addr(), arb_len(), 0..=MAX_VALUE)
            .prop_map(|(addr, len, value)| (addr & prefix_mask(len), len, value))
    }

    /// Longest-prefix match by linear scan over the routes.
    fn linear_lpm(routes: &BTreeMap<(u32, u8), u32>, addr: u32) -> Option<u32> {
        routes
            .iter()
            .filter(|&(&(prefix, len), _)| addr & prefix_mask(len) == prefix)
            .max_by_key(|&(&(_, len), _)| len)
            .map(|(_, &value)| value)
    }

    /// Probe addresses: both ends of each route and their neighbours, addresses inside
    /// routes (from `picks`) and the clustered / random `extra` addresses.
    fn probes(routes: &[(u32, u8, u32)], picks: &[(usize, u32)], extra: &[u32]) -> Vec<u32> {
        let mut out = vec![0, u32::MAX];
        for &(prefix, len, _) in routes {
            let last = prefix | !prefix_mask(len);
            out.extend([prefix, prefix.wrapping_sub(1), last, last.wrapping_add(1)]);
        }
        if !routes.is_empty() {
            for &(i, bits) in picks {
                let (prefix, len, _) = routes[i % routes.len()];
                out.push(prefix | (bits & !prefix_mask(len)));
            }
        }
        out.extend_from_slice(extra);
        out
    }

    /// FIB (single and batched lookups) == linear scan of `model` on `addrs`.
    fn assert_matches(t: &Table, model: &BTreeMap<(u32, u8), u32>, addrs: &[u32]) {
        assert_eq!(t.len(), model.len());
        let mut batch = vec![None; addrs.len()];
        t.lookup_batch(addrs, &mut batch);
        for (&addr, &got) in addrs.iter().zip(&batch) {
            let want = linear_lpm(model, addr);
            assert_eq!(
                t.lookup(addr),
                want,
                "addr {}",
                std::net::Ipv4Addr::from(addr)
            );
            assert_eq!(got, want, "batch addr {}", std::net::Ipv4Addr::from(addr));
            // The matched route's length, from the linear scan's longest covering route.
            let len = model
                .keys()
                .filter(|&&(prefix, len)| addr & prefix_mask(len) == prefix)
                .map(|&(_, len)| len)
                .max();
            assert_eq!(
                t.lookup_len(addr),
                want.zip(len),
                "length addr {}",
                std::net::Ipv4Addr::from(addr)
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Both kinds of table, plain and compact (its short routes kept apart).
        #[test]
        fn matches_linear_scan(
            routes in prop::collection::vec(arb_route(), 0..300),
            picks in prop::collection::vec((any::<usize>(), any::<u32>()), 150),
            extra in prop::collection::vec(arb_addr(), 150),
            deletes in prop::collection::vec(any::<bool>(), 300),
            compact in any::<bool>(),
        ) {
            let addrs = probes(&routes, &picks, &extra);
            let mut model = BTreeMap::new();
            let new = || if compact { Table::compact() } else { Table::new() };
            let mut t = new();
            for &(prefix, len, value) in &routes {
                let prev = t.insert(prefix, len, value).unwrap();
                prop_assert_eq!(prev, model.insert((prefix, len), value));
            }
            assert_matches(&t, &model, &addrs);
            t.fib.check_invariants();

            // Bulk load of the same list (duplicates: last wins) gives the same answers.
            let mut bulk = new();
            bulk.bulk_load(routes.iter().copied()).unwrap();
            prop_assert_eq!(bulk.fib.is_compact(), compact);
            assert_matches(&bulk, &model, &addrs);
            bulk.fib.check_invariants();
            let from_routes = Fib::from_routes(routes.iter().copied()).unwrap();
            for &addr in &addrs {
                prop_assert_eq!(from_routes.lookup(addr), t.lookup(addr));
            }
            drop((bulk, from_routes));

            // Random deletions.
            for (&(prefix, len, _), &del) in routes.iter().zip(&deletes) {
                if del {
                    prop_assert_eq!(t.remove(prefix, len), model.remove(&(prefix, len)));
                }
            }
            assert_matches(&t, &model, &addrs);
            t.fib.check_invariants();

            // Deleting everything empties the FIB and frees every group.
            for &(prefix, len, _) in &routes {
                prop_assert_eq!(t.remove(prefix, len), model.remove(&(prefix, len)));
            }
            prop_assert_eq!(t.fib.groups_in_use(), 0);
            assert_matches(&t, &model, &addrs);
            // A copy answers as the original (a compact one stays compact).
            let copy = t.fib.clone();
            prop_assert_eq!(copy.is_compact(), compact);
        }
    }
}
