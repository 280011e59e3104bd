//! Errors of the forwarding table. Every error is reported before anything is
//! modified, so a failed call leaves the table as it was.

use std::fmt;
use std::net::Ipv4Addr;

/// Why a route could not be added to a [`Rib`](super::Rib), [`Fib`](super::Fib) or
/// [`Table`](super::Table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FibError {
    /// The prefix length is greater than 32.
    InvalidLength {
        /// The rejected length.
        len: u8,
    },
    /// The prefix has bits set beyond its length (e.g. `10.0.0.1/8`).
    HostBits {
        /// The rejected prefix address.
        prefix: u32,
        /// Its length.
        len: u8,
    },
    /// The route value does not fit the 24-bit payload of a FIB entry.
    ValueTooLarge {
        /// The rejected value.
        value: u32,
    },
    /// Every tbl8 group is in use; a route longer than /24 in a new /24 cannot be added.
    Tbl8Exhausted {
        /// The configured maximum number of groups.
        max_groups: u32,
    },
}

impl fmt::Display for FibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::InvalidLength { len } => write!(f, "prefix length {len} is greater than 32"),
            Self::HostBits { prefix, len } => {
                write!(
                    f,
                    "prefix {}/{len} has host bits set",
                    Ipv4Addr::from(prefix)
                )
            }
            Self::ValueTooLarge { value } => {
                write!(f, "route value {value} does not fit in 24 bits")
            }
            Self::Tbl8Exhausted { max_groups } => {
                write!(f, "all {max_groups} tbl8 groups are in use")
            }
        }
    }
}

impl std::error::Error for FibError {}
