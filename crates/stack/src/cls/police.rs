//! The `police` action's token bucket (`tc-police(8)`, RFC 2697's single rate with one
//! bucket): `burst` bytes of credit, refilled at `rate` bytes per second on the worker's
//! clock; a packet within the credit conforms and spends its bytes, one beyond it
//! exceeds and spends nothing.
//!
//! One bucket per police action, shared by every worker (behind a lock, taken per policed
//! packet), so a rate holds for the whole datapath as tc's does for the whole host.
//!
//! Invariant: the credit never exceeds `burst`. Credit is kept in bytes × 10⁹ so that
//! refills of a few nanoseconds are not lost to rounding.

use core::fmt;

use super::action::Control;

/// A policer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Police {
    /// Bytes per second.
    pub rate: u64,
    /// Bucket depth, bytes.
    pub burst: u64,
    /// Within the rate.
    pub conform: Control,
    /// Beyond it.
    pub exceed: Control,
}

impl Police {
    /// A policer.
    pub const fn new(rate: u64, burst: u64, conform: Control, exceed: Control) -> Self {
        Self {
            rate,
            burst,
            conform,
            exceed,
        }
    }
}

impl fmt::Display for Police {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate {}bps burst {}b conform {:?} exceed {:?}",
            self.rate, self.burst, self.conform, self.exceed
        )
    }
}

const SCALE: u128 = 1_000_000_000;

/// A policer's state.
#[derive(Debug, Clone)]
pub struct Bucket {
    cfg: Police,
    /// Credit in bytes × 10⁹.
    credit: u128,
    last_ns: Option<u64>,
    /// Packets that conformed and exceeded.
    pub conformed: u64,
    /// Packets beyond the rate.
    pub exceeded: u64,
}

impl Bucket {
    /// A full bucket.
    pub fn new(cfg: Police) -> Self {
        Self {
            cfg,
            credit: u128::from(cfg.burst) * SCALE,
            last_ns: None,
            conformed: 0,
            exceeded: 0,
        }
    }

    /// What a packet of `bytes` at `now_ns` gets: the conform or the exceed result.
    pub fn admit(&mut self, bytes: u64, now_ns: u64) -> Control {
        let cap = u128::from(self.cfg.burst) * SCALE;
        if let Some(last) = self.last_ns {
            let dt = u128::from(now_ns.saturating_sub(last));
            self.credit = (self.credit + dt * u128::from(self.cfg.rate)).min(cap);
        }
        self.last_ns = Some(self.last_ns.map_or(now_ns, |l| l.max(now_ns)));
        let need = u128::from(bytes) * SCALE;
        if need <= self.credit {
            self.credit -= need;
            self.conformed += 1;
            self.cfg.conform
        } else {
            self.exceeded += 1;
            self.cfg.exceed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 bytes per second, burst 1500: a 1000-byte packet conforms, the next at once
    /// exceeds (500 left), and 0.5 s later it conforms (1000 again).
    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let mut b = Bucket::new(Police::new(1000, 1500, Control::Pass, Control::Drop));
        assert_eq!(b.admit(1000, 0), Control::Pass);
        assert_eq!(b.admit(1000, 0), Control::Drop);
        assert_eq!(b.admit(1000, 500_000_000), Control::Pass);
        // Ten seconds idle: credit capped at the burst.
        assert_eq!(b.admit(1500, 10_500_000_000), Control::Pass);
        assert_eq!(b.admit(1, 10_500_000_000), Control::Drop);
        assert_eq!((b.conformed, b.exceeded), (3, 2));
    }
}
