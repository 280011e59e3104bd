//! The contract between ports (devices) and the stack: what a packet's metadata words mean
//! beyond the engine's own ([`meta`]: the flag bits, the kinds of super-packet), the one
//! parse of a packet's headers ([`mod@dissect`]), and what a device does for the stack
//! ([`offload`]: its features by their ethtool names, completing partial checksums).
//!
//! Both sides depend on this crate and neither on the other: a port records what it
//! received (offsets, checksum state, super-packet kind) in these terms, and the stack's
//! stages read them.
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing)]

pub mod dissect;
pub mod meta;
pub mod offload;
