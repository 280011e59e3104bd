//! Token bucket (ICMP error rate limit, RFC 1812 4.3.2.8).

/// A token bucket refilled at `rate` tokens per second up to `burst`, in nanosecond time.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_sec: u64,
    burst: u64,
    /// Tokens in units of 1e-9 token, so refill needs no division per call.
    nanotokens: u64,
    last_ns: u64,
    /// Requests refused.
    pub limited: u64,
}

impl TokenBucket {
    /// A full bucket. `rate_per_sec` 0 means "never allow".
    pub fn new(rate_per_sec: u64, burst: u64) -> Self {
        Self {
            rate_per_sec,
            burst,
            nanotokens: burst.saturating_mul(1_000_000_000),
            last_ns: 0,
            limited: 0,
        }
    }

    /// Takes one token at time `now_ns`; `false` (counted) when empty.
    pub fn allow(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        let cap = self.burst.saturating_mul(1_000_000_000);
        self.nanotokens = self
            .nanotokens
            .saturating_add(dt.saturating_mul(self.rate_per_sec))
            .min(cap);
        if self.nanotokens >= 1_000_000_000 {
            self.nanotokens -= 1_000_000_000;
            true
        } else {
            self.limited += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let mut b = TokenBucket::new(1000, 5);
        let t0 = 1_000_000_000;
        assert_eq!((0..10).filter(|_| b.allow(t0)).count(), 5, "burst of 5");
        assert!(!b.allow(t0));
        assert!(b.allow(t0 + 1_000_000), "1 ms at 1000/s refills one token");
        assert!(!b.allow(t0 + 1_000_000));
        assert_eq!(
            (0..100).filter(|_| b.allow(t0 + 1_000_000_000)).count(),
            5,
            "refill capped at burst"
        );
        assert_eq!(b.limited, 10 - 5 + 1 + 1 + 95);
    }

    #[test]
    fn zero_rate_refuses_after_burst() {
        let mut b = TokenBucket::new(0, 1);
        assert!(b.allow(0));
        assert!(!b.allow(u64::MAX / 2));
    }
}
