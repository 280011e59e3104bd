//! Control-plane route set: one hash map per prefix length.
//!
//! Invariants: `by_len[l]` holds only prefixes of length `l` without host bits;
//! bit `l` of `nonempty` is set exactly when `by_len[l]` is non-empty; `count` is the
//! total number of routes. Lookups are slow-path (up to 33 hash probes).

use std::collections::HashMap;

use super::{FibError, check_prefix, prefix_mask};

/// Set of IPv4 routes `(prefix, len) -> value` with exact-match and longest-prefix-match
/// queries. Values are opaque `u32`s chosen by the caller.
#[derive(Clone, Debug)]
pub struct Rib {
    by_len: [HashMap<u32, u32>; 33],
    nonempty: u64,
    count: usize,
}

impl Default for Rib {
    fn default() -> Self {
        Self::new()
    }
}

impl Rib {
    /// Creates an empty RIB.
    pub fn new() -> Self {
        Self {
            by_len: std::array::from_fn(|_| HashMap::new()),
            nonempty: 0,
            count: 0,
        }
    }

    /// Adds or replaces a route; returns the previous value of exactly this prefix.
    ///
    /// Errors with [`FibError::InvalidLength`] or [`FibError::HostBits`].
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<Option<u32>, FibError> {
        check_prefix(prefix, len)?;
        Ok(self.insert_checked(prefix, len, value))
    }

    /// [`Rib::insert`] for a prefix already validated by [`check_prefix`].
    #[expect(
        clippy::indexing_slicing,
        reason = "`check_prefix` bounds `len` by 32: `by_len` has 33 maps"
    )]
    pub(super) fn insert_checked(&mut self, prefix: u32, len: u8, value: u32) -> Option<u32> {
        let old = self.by_len[usize::from(len)].insert(prefix, value);
        if old.is_none() {
            self.count += 1;
            self.nonempty |= 1 << len;
        }
        old
    }

    /// Removes a route; returns its value, or `None` if it was not present.
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<u32> {
        let map = self.by_len.get_mut(usize::from(len))?;
        let old = map.remove(&prefix)?;
        self.count -= 1;
        if map.is_empty() {
            self.nonempty &= !(1 << len);
        }
        Some(old)
    }

    /// Value of exactly this prefix, if present.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.by_len.get(usize::from(len))?.get(&prefix).copied()
    }

    /// Longest-prefix match: value of the longest route containing `addr`.
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        self.longest_match(addr).map(|(_, _, value)| value)
    }

    /// Longest-prefix match returning the whole route `(prefix, len, value)`.
    pub fn longest_match(&self, addr: u32) -> Option<(u32, u8, u32)> {
        let (len, value) = self.longest_within(addr, self.nonempty)?;
        Some((addr & prefix_mask(len), len, value))
    }

    /// Longest route strictly shorter than `len` that contains `prefix`, as
    /// `(length, value)`: what covers the addresses of `prefix/len` once it is removed.
    pub fn covering(&self, prefix: u32, len: u8) -> Option<(u8, u32)> {
        let shorter = (1u64 << len.min(33)) - 1;
        self.longest_within(prefix, self.nonempty & shorter)
    }

    /// Longest route containing `addr` among the lengths whose bit is set in `lengths`.
    fn longest_within(&self, addr: u32, mut lengths: u64) -> Option<(u8, u32)> {
        while lengths != 0 {
            let len = 63 - lengths.leading_zeros() as u8;
            if let Some(&value) =
                (self.by_len.get(usize::from(len))).and_then(|m| m.get(&(addr & prefix_mask(len))))
            {
                return Some((len, value));
            }
            lengths &= !(1 << len);
        }
        None
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.count
    }

    /// `true` if there are no routes.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// All routes as `(prefix, len, value)`, by increasing `len`; order within one
    /// length is unspecified.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u8, u32)> + '_ {
        self.by_len.iter().zip(0u8..).flat_map(|(map, len)| {
            map.iter()
                .map(move |(&prefix, &value)| (prefix, len, value))
        })
    }

    /// Approximate heap bytes held (hash table capacity, including control bytes).
    pub fn memory_bytes(&self) -> usize {
        let per_slot = size_of::<(u32, u32)>() + 1;
        size_of::<Self>()
            + self
                .by_len
                .iter()
                .map(|m| m.capacity() * per_slot)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from_be_bytes([a, b, c, d])
    }

    #[test]
    fn insert_get_remove() {
        let mut rib = Rib::new();
        assert_eq!(rib.insert(ip(10, 0, 0, 0), 8, 1), Ok(None));
        assert_eq!(rib.insert(ip(10, 0, 0, 0), 8, 2), Ok(Some(1)));
        assert_eq!(rib.get(ip(10, 0, 0, 0), 8), Some(2));
        assert_eq!(rib.get(ip(10, 0, 0, 0), 9), None);
        assert_eq!(rib.get(ip(10, 0, 0, 0), 40), None);
        assert_eq!(rib.len(), 1);
        assert_eq!(rib.remove(ip(10, 0, 0, 0), 8), Some(2));
        assert_eq!(rib.remove(ip(10, 0, 0, 0), 8), None);
        assert_eq!(rib.remove(0, 200), None);
        assert!(rib.is_empty());
        assert_eq!(rib.nonempty, 0);
    }

    #[test]
    fn rejects_bad_prefixes() {
        let mut rib = Rib::new();
        assert_eq!(
            rib.insert(ip(10, 0, 0, 1), 8, 1),
            Err(FibError::HostBits {
                prefix: ip(10, 0, 0, 1),
                len: 8
            })
        );
        assert_eq!(
            rib.insert(0, 33, 1),
            Err(FibError::InvalidLength { len: 33 })
        );
        assert_eq!(
            rib.insert(1, 0, 1),
            Err(FibError::HostBits { prefix: 1, len: 0 })
        );
        assert!(rib.is_empty());
    }

    #[test]
    fn lookup_and_covering() {
        let mut rib = Rib::new();
        rib.insert(0, 0, 100).unwrap();
        rib.insert(ip(10, 0, 0, 0), 8, 8).unwrap();
        rib.insert(ip(10, 1, 0, 0), 16, 16).unwrap();
        rib.insert(ip(10, 1, 2, 3), 32, 32).unwrap();
        assert_eq!(rib.lookup(ip(10, 1, 2, 3)), Some(32));
        assert_eq!(rib.lookup(ip(10, 1, 2, 4)), Some(16));
        assert_eq!(rib.lookup(ip(10, 2, 0, 0)), Some(8));
        assert_eq!(rib.lookup(ip(11, 0, 0, 0)), Some(100));
        assert_eq!(
            rib.longest_match(ip(10, 1, 9, 9)),
            Some((ip(10, 1, 0, 0), 16, 16))
        );
        assert_eq!(rib.covering(ip(10, 1, 2, 3), 32), Some((16, 16)));
        assert_eq!(rib.covering(ip(10, 1, 0, 0), 16), Some((8, 8)));
        assert_eq!(rib.covering(0, 0), None);
        let lens: Vec<u8> = rib.iter().map(|(_, len, _)| len).collect();
        assert_eq!(lens, [0, 8, 16, 32]);
    }
}
