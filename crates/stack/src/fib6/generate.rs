//! Generated IPv6 route tables with a realistic length mix, for benchmarks
//! (`ip6-forward`) and size checks.
//!
//! The mix ([`LENGTH_MIX`]) follows today's IPv6 Internet table roughly: about half
//! /48, a third /32–/44 (/32 the largest share of them), some /29, /56 and /64, a few
//! shorter than /29. The placement follows its structure: prefixes up to /28 are
//! aggregates anywhere in the RIRs' blocks (2001::/16, 2400::/12, 2600::/12,
//! 2800::/12, 2a00::/12, 2c00::/12); there are `n / 4` holders (allocations), each a
//! /32; a /29–/32 is some holder's aggregate, and every longer prefix lies inside a
//! holder chosen with a skew (a few holders — PI pools, large ISPs — announce hundreds
//! of more-specifics, most only a few), so that /48s nest in /44s, /40s and /32s as
//! they do in the real table. Nothing falls in 2001:db8::/32, the documentation
//! prefix benchmarks and tests use for their own interfaces.

use std::collections::HashSet;

use super::prefix::{Ipv6Prefix, mask6};

/// Values of generated routes are next-hop indices below this.
pub const GENERATED_HOPS: u32 = 4;

/// Routes per million by prefix length; /48 takes what is left (about 54%).
pub const LENGTH_MIX: [(u8, u32); 22] = [
    (20, 200),
    (24, 300),
    (28, 500),
    (29, 25_000),
    (30, 2_000),
    (31, 2_000),
    (32, 130_000),
    (33, 6_000),
    (34, 6_000),
    (35, 4_000),
    (36, 40_000),
    (38, 5_000),
    (40, 60_000),
    (42, 10_000),
    (44, 70_000),
    (45, 8_000),
    (46, 12_000),
    (47, 10_000),
    (52, 2_000),
    (56, 30_000),
    (60, 5_000),
    (64, 35_000),
];

/// The RIRs' unicast blocks: (top 16 bits, length, weight).
const RIR_BLOCKS: [(u16, u8, u32); 6] = [
    (0x2001, 16, 10),
    (0x2400, 12, 20),
    (0x2600, 12, 25),
    (0x2800, 12, 4),
    (0x2a00, 12, 40),
    (0x2c00, 12, 1),
];

/// The documentation prefix 2001:db8::/32 (RFC 3849), kept free.
const DOC: u128 = 0x2001_0db8 << 96;

/// SplitMix64: small, seedable, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bits128(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }

    /// Uniform in `0..n` (`n > 0`; the bias of a 64-bit modulo is negligible here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random address inside one of the RIR blocks (weighted), never in 2001:db8::/32.
fn rir_address(rng: &mut Rng) -> u128 {
    let total: u32 = RIR_BLOCKS.iter().map(|b| b.2).sum();
    loop {
        let mut pick = rng.below(u64::from(total)) as u32;
        let &(top, len, _) = RIR_BLOCKS
            .iter()
            .find(|b| {
                let hit = pick < b.2;
                pick = pick.saturating_sub(b.2);
                hit
            })
            .unwrap_or(&RIR_BLOCKS[0]);
        let a = (u128::from(top) << 112) | (rng.bits128() & !mask6(len));
        if a & mask6(32) != DOC {
            return a;
        }
    }
}

/// `n` distinct IPv6 routes `(prefix, next-hop index below GENERATED_HOPS)` with the
/// length mix of [`LENGTH_MIX`], placed as the module documentation says; the same
/// `(n, seed)` always gives the same list, in a shuffled (feed-like) order.
pub fn generate_prefixes(n: usize, seed: u64) -> Vec<(Ipv6Prefix, u32)> {
    let mut rng = Rng(seed);
    let holders: Vec<u128> = (0..(n / 4).max(1))
        .map(|_| rir_address(&mut rng) & mask6(32))
        .collect();
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let mut draw = |rng: &mut Rng, len: u8| -> Option<(Ipv6Prefix, u32)> {
        let a = if len <= 28 {
            rir_address(rng)
        } else if len <= 32 {
            // An allocation's aggregate: any holder, however many more-specifics it has.
            // `holders` is never empty, and `below` stays under its length.
            let i = rng.below(holders.len() as u64) as usize;
            holders.get(i).copied().unwrap_or_default()
        } else {
            // Skewed holder choice: index ⌊H·u²⌋ for u uniform in [0, 1).
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let i = ((holders.len() as f64) * u * u) as usize;
            let holder = holders
                .get(i)
                .or(holders.last())
                .copied()
                .unwrap_or_default();
            holder | (rng.bits128() & !mask6(32))
        };
        let p = Ipv6Prefix::truncating(a.into(), len);
        let hop = rng.below(u64::from(GENERATED_HOPS)) as u32;
        seen.insert(p).then_some((p, hop))
    };
    for &(len, per_million) in &LENGTH_MIX {
        let quota = (u64::from(per_million) * n as u64 / 1_000_000) as usize;
        let mut made = 0;
        let mut tries = 0;
        while made < quota && tries < quota * 20 + 1000 {
            tries += 1;
            if let Some(r) = draw(&mut rng, len) {
                out.push(r);
                made += 1;
            }
        }
    }
    while out.len() < n {
        out.extend(draw(&mut rng, 48));
    }
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i as u64 + 1) as usize);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_deterministic_and_outside_documentation_space() {
        let a = generate_prefixes(20_000, 7);
        assert_eq!(a.len(), 20_000);
        assert_eq!(a, generate_prefixes(20_000, 7));
        assert_ne!(a, generate_prefixes(20_000, 8));
        let distinct: HashSet<_> = a.iter().map(|(p, _)| *p).collect();
        assert_eq!(distinct.len(), a.len());
        let doc: Ipv6Prefix = "2001:db8::/32".parse().unwrap();
        let global: Ipv6Prefix = "2000::/3".parse().unwrap();
        for (p, v) in &a {
            assert!(*v < GENERATED_HOPS);
            assert!(global.covers(p), "{p} outside 2000::/3");
            assert!(
                !doc.covers(p) && !p.covers(&doc),
                "{p} overlaps 2001:db8::/32"
            );
        }
        assert!(generate_prefixes(0, 1).is_empty());
        assert_eq!(generate_prefixes(1, 1).len(), 1);
    }

    /// The shares the brief asks for: mostly /48, many /32–/44, some /56–/64; and the
    /// /48s nest under generated shorter prefixes, as in the real table.
    #[test]
    fn length_mix_and_nesting() {
        let n = 50_000;
        let routes = generate_prefixes(n, 1);
        let share = |lo: u8, hi: u8| {
            let c = routes
                .iter()
                .filter(|(p, _)| (lo..=hi).contains(&p.prefix_len()))
                .count();
            c as f64 / n as f64
        };
        let s48 = share(48, 48);
        assert!((0.50..0.58).contains(&s48), "/48 share {s48}");
        let mid = share(32, 44);
        assert!((0.30..0.36).contains(&mid), "/32–/44 share {mid}");
        let long = share(56, 64);
        assert!((0.065..0.075).contains(&long), "/56–/64 share {long}");
        for &(len, per_million) in &LENGTH_MIX {
            let want = (per_million as usize * n) / 1_000_000;
            let got = routes.iter().filter(|(p, _)| p.prefix_len() == len).count();
            assert_eq!(got, want, "/{len}");
        }
        let set: HashSet<Ipv6Prefix> = routes.iter().map(|(p, _)| *p).collect();
        let nested = routes
            .iter()
            .filter(|(p, _)| p.prefix_len() == 48)
            .filter(|(p, _)| (29..48).any(|l| set.contains(&Ipv6Prefix::truncating(p.addr(), l))))
            .count();
        let frac = nested as f64 / (s48 * n as f64);
        assert!(
            frac > 0.3,
            "only {frac} of the /48s nest in a shorter prefix"
        );
    }
}
