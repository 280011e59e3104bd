//! A latency histogram: fixed memory, constant-time record, quantiles within 1/16
//! (6.25 %) of the true value.
//!
//! A value `v` lands in the bucket of its highest set bit, split into 16 sub-buckets by
//! the next four bits (values below 16 have a bucket each). Quantiles report a bucket's
//! upper bound, so they never understate.

/// Sub-buckets per power of two.
const SUB: usize = 16;
/// Buckets: 16 exact small values, then 16 per power of two from 2^4 to 2^63.
const BUCKETS: usize = SUB + (64 - 4) * SUB;

/// A histogram of `u64` values (TSC ticks, nanoseconds).
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max: u64,
}

impl core::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("max", &self.max)
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let top = 63 - v.leading_zeros() as usize; // ≥ 4
    let sub = ((v >> (top - 4)) & 0xf) as usize;
    SUB + (top - 4) * SUB + sub
}

/// The largest value of bucket `b`.
fn upper(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let top = (b - SUB) / SUB + 4;
    let sub = ((b - SUB) % SUB) as u64;
    let base = (1u64 << top) | (sub << (top - 4));
    base + ((1u64 << (top - 4)) - 1)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Adds another histogram's values.
    pub fn merge(&mut self, o: &Self) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
        self.max = self.max.max(o.max);
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.total = 0;
        self.max = 0;
    }

    /// The value below which a fraction `q` (0..=1) of the values lie (an upper bound
    /// within 1/16); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return upper(b).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut prev = 0;
        for b in 0..BUCKETS {
            let u = upper(b);
            assert!(b == 0 || u > prev, "bucket {b}");
            assert_eq!(bucket(u), b);
            prev = u;
        }
        assert_eq!(upper(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn quantiles_are_within_a_sixteenth_of_the_truth() {
        let mut h = Histogram::new();
        let mut vals: Vec<u64> = (1..=10_000u64).map(|i| i * i % 100_003 + 1).collect();
        for &v in &vals {
            h.record(v);
        }
        vals.sort_unstable();
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            let exact = vals[((q * vals.len() as f64).ceil() as usize).max(1) - 1];
            let got = h.quantile(q);
            assert!(got >= exact, "q {q}: {got} < {exact}");
            assert!(
                got as f64 <= exact as f64 * (1.0 + 1.0 / 16.0) + 1.0,
                "q {q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), 100_003.min(*vals.last().unwrap()));
    }
}
