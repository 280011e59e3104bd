//! Packet header views and Internet checksums for netbatch.
//!
//! Every protocol module follows the same pattern:
//!
//! * a *view* (`EthernetFrame<T>`, `Ipv4Packet<T>`, ...) wraps any buffer `T: AsRef<[u8]>` and
//!   reads or writes header fields in place, without copying;
//! * a *repr* (`EthernetRepr`, `Ipv4Repr`, ...) is a plain struct of decoded fields with
//!   `parse` (view → repr, validating) and `emit` (repr → view, writing every header byte).
//!
//! # The length rule
//!
//! A view is created either with `new_unchecked(buf)`, which does no checking at all, or with
//! `new_checked(buf)`, which is `new_unchecked` followed by `check_len()`.
//!
//! **After `check_len()` succeeds, no accessor may panic.** `check_len` verifies every length
//! that any getter, `payload()` or checksum method relies on (for IPv4: at least 20 bytes,
//! `IHL >= 5`, and at least `IHL * 4` bytes). Accessors that depend on a length field which may
//! disagree with the buffer (the IPv4 total length, the UDP length) clamp to the buffer instead
//! of panicking. Two caveats:
//!
//! * setters that change a length field (`set_header_len`, ...) can break the guarantee; call
//!   `check_len()` again after changing them;
//! * the guarantee assumes the buffer's `AsRef` returns the same slice every time.
//!
//! With `new_unchecked` the accessors index the buffer directly and panic when it is too short.
//!
//! The crate denies `clippy::indexing_slicing`. Code that walks variable-length data (IPv4
//! and TCP options, the extension header chain, IPv6 and NDP options) reads with `get`,
//! `split_first_chunk`, `split_at_checked` and slice patterns, so it cannot panic whatever
//! the bytes say. Indexing is left only where a length checked once covers it, each place
//! under an `#[expect]` whose reason names that length: the view accessors (after
//! `check_len`), `emit` and the setters (into a buffer the caller sized), the fixed-offset
//! helpers of [`bytes`], and the checksum loops, whose indices their loop bounds cover and
//! whose forms without indexing cost the fast path instructions (`scripts/instructions`).
//!
//! # Emitting
//!
//! `Repr::emit` writes every header field, so the buffer may hold stale data from an earlier
//! packet. **Wrap a reused buffer with `new_unchecked` before emitting**, never `new_checked`:
//! the old bytes may fail the check (or pass it by accident), and `emit` does not need it.
//! `emit` panics if the buffer is shorter than the repr's `buffer_len()` / `header_len()`.
//!
//! # Checksums
//!
//! [`checksum`] holds the RFC 1071 sum, folding and the RFC 1624 incremental update. Views offer
//! `verify_checksum` / `fill_checksum`; transport views take the IPv4 addresses for the
//! pseudo-header and expect their buffer to span exactly the segment (pass
//! [`Ipv4Packet::payload`], which is already trimmed to the IPv4 total length).
//!
//! IPv6 ([`ipv6`], [`ipv6ext`], [`icmpv6`], [`ndp`]) follows the same rules; its checksums start
//! from [`checksum::pseudo_header_v6`], and extension header offsets count from the IPv6 header.
#![no_std]
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing)]

/// The constructors every view shares: `new_unchecked`, `new_checked` (which runs the
/// view's own `check_len`) and `into_inner`. Used inside each view's
/// `impl<T: AsRef<[u8]>>` block.
macro_rules! view_constructors {
    () => {
        /// Wraps a buffer without checking its length. Use it when emitting into a buffer
        /// sized for the header; never on received bytes.
        #[inline]
        pub const fn new_unchecked(buffer: T) -> Self {
            Self { buffer }
        }

        /// Wraps a buffer and runs [`Self::check_len`]: once it succeeds, no accessor
        /// panics.
        #[inline]
        pub fn new_checked(buffer: T) -> Result<Self> {
            let p = Self::new_unchecked(buffer);
            p.check_len()?;
            Ok(p)
        }

        /// Returns the wrapped buffer.
        #[inline]
        pub fn into_inner(self) -> T {
            self.buffer
        }
    };
}

pub mod arp;
pub mod bytes;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod ndp;
pub mod tcp;
pub mod toeplitz;
pub mod udp;
pub mod vlan;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
pub use icmpv4::{Icmpv4Packet, Icmpv4Repr, Icmpv4Type};
pub use ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
pub use tcp::{TcpFlags, TcpOption, TcpOptionIter, TcpPacket, TcpRepr, TcpTimestamp};
pub use udp::{UdpPacket, UdpRepr};
pub use vlan::{VlanHeader, VlanRepr};

use core::fmt;

/// Why a buffer could not be viewed or parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or a length field) requires.
    Truncated,
    /// A field holds a value the format does not allow.
    Malformed,
    /// A checksum does not verify.
    Checksum,
    /// The packet is well formed but uses a variant this crate does not handle.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "buffer too short for the header",
            Self::Malformed => "header field holds an invalid value",
            Self::Checksum => "checksum does not verify",
            Self::Unsupported => "unsupported packet variant",
        })
    }
}

impl core::error::Error for Error {}

/// Result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range of a header field.
pub(crate) type Field = core::ops::Range<usize>;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn error_display_is_one_line() {
        for e in [
            Error::Truncated,
            Error::Malformed,
            Error::Checksum,
            Error::Unsupported,
        ] {
            let s = e.to_string();
            assert!(!s.is_empty() && !s.contains('\n'));
        }
    }
}
