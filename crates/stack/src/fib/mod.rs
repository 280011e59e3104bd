//! IPv4 longest-prefix-match forwarding: a control-plane [`Rib`] and a data-plane
//! [`Fib`] (DIR-24-8, the two-level layout of DPDK's `rte_lpm`), kept in sync by
//! [`Table`].
//!
//! # Invariants
//!
//! * A route is `(prefix, len) -> value` with `len <= 32` and no bit of `prefix` set
//!   below the first `len` bits. Violations are rejected with [`FibError`], never
//!   silently masked. Values stored in a [`Fib`] are at most [`MAX_VALUE`] (24 bits).
//! * After every [`Table`] operation, `table.fib().lookup(a) == table.rib().lookup(a)`
//!   for every address `a` (FIB == RIB). An operation that returns an error leaves the
//!   table unchanged.
//! * Every FIB entry stores the length ("depth") of the route that owns it: the
//!   longest route covering all addresses that map to the entry. Incremental updates
//!   rely on this: an insert of length `l` only overwrites entries of depth `<= l`, a
//!   delete of length `l` only rewrites entries of depth exactly `l`.
//! * Every live tbl8 group is referenced by exactly one tbl24 entry and holds at least
//!   one entry of depth `> 24`. When a delete makes all 256 entries of a group equal,
//!   the group is collapsed back into its tbl24 entry and put on the free list.
//! * Nothing panics on caller input; running out of tbl8 groups is
//!   [`FibError::Tbl8Exhausted`]. The module contains no `unsafe`.
//!
//! Mutation needs `&mut`; sharing a table between a writer and concurrent readers
//! (e.g. by swapping snapshots) is left to the caller.

mod dir24;
mod error;
mod rib;
mod table;

pub use dir24::{DEFAULT_MAX_GROUPS, Fib, MAX_GROUPS_LIMIT, MAX_VALUE, SHORT_MAX};
pub use error::FibError;
pub use rib::Rib;
pub use table::Table;

/// Network mask for a prefix length `len <= 32` (`0` for `len == 0`).
const fn prefix_mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

/// Checks `len <= 32` and that no host bits are set below `len`.
fn check_prefix(prefix: u32, len: u8) -> Result<(), FibError> {
    if len > 32 {
        return Err(FibError::InvalidLength { len });
    }
    if prefix & !prefix_mask(len) != 0 {
        return Err(FibError::HostBits { prefix, len });
    }
    Ok(())
}

/// Checks that a route value fits the 24 bits of a FIB entry.
fn check_value(value: u32) -> Result<(), FibError> {
    if value > MAX_VALUE {
        return Err(FibError::ValueTooLarge { value });
    }
    Ok(())
}

/// [`check_prefix`] and [`check_value`] together.
fn check_route(prefix: u32, len: u8, value: u32) -> Result<(), FibError> {
    check_prefix(prefix, len)?;
    check_value(value)
}
