//! Time sources: the TSC for cycle counts, a monotonic clock for timers.
//!
//! The TSC is read through `quanta`, which uses `rdtsc` when the CPU has an invariant TSC
//! (and falls back to the OS clock otherwise, reported by [`tsc_is_native`]).

use std::sync::OnceLock;

static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();

/// The process-wide calibrated clock.
pub fn clock() -> quanta::Clock {
    CLOCK.get_or_init(quanta::Clock::new).clone()
}

/// Reads the cycle counter (TSC ticks when native).
#[inline(always)]
pub fn tsc(c: &quanta::Clock) -> u64 {
    c.raw()
}

/// TSC ticks per second, measured against the OS clock over `ms` milliseconds.
pub fn tsc_hz(ms: u64) -> f64 {
    let c = clock();
    let t0 = std::time::Instant::now();
    let r0 = c.raw();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let r1 = c.raw();
    let dt = t0.elapsed().as_secs_f64();
    (r1.wrapping_sub(r0)) as f64 / dt
}

/// Whether the raw counter is the CPU's TSC (ticks per second far from 1e9 means it is
/// not the nanosecond OS clock; a heuristic good enough for reports).
pub fn tsc_is_native() -> bool {
    let hz = tsc_hz(20);
    !(0.98e9..1.02e9).contains(&hz)
}

/// Nanoseconds on the monotonic OS clock since an arbitrary process-wide origin.
pub fn mono_ns() -> u64 {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    let o = *ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(o.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
