//! Errors of the IPv6 forwarding table. Every error is reported before anything is
//! modified, so a failed call leaves the table as it was.

use std::fmt;

/// Why a route could not be added to a [`Fib6`](super::Fib6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fib6Error {
    /// The value is `u32::MAX`, which the table keeps for "no route".
    ValueTooLarge {
        /// The rejected value.
        value: u32,
    },
    /// The route needs trie nodes beyond the table's limit.
    NodesExhausted {
        /// The configured maximum number of nodes.
        max_nodes: u32,
    },
}

impl fmt::Display for Fib6Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ValueTooLarge { value } => {
                write!(
                    f,
                    "route value {value} is reserved (at most {})",
                    u32::MAX - 1
                )
            }
            Self::NodesExhausted { max_nodes } => {
                write!(f, "all {max_nodes} IPv6 trie nodes are in use")
            }
        }
    }
}

impl std::error::Error for Fib6Error {}
