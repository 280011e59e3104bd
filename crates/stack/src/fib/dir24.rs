//! DIR-24-8 data-plane table (strides 24 and 8).
//!
//! `tbl24` has one entry per /24, indexed by the top 24 address bits. An entry either
//! holds a route or points to a tbl8 group of 256 entries indexed by the low 8 bits.
//!
//! Entry encoding (`u32`):
//!
//! | bits  | meaning                                                   |
//! |-------|-----------------------------------------------------------|
//! | 31    | `EXT`: the entry points to a tbl8 group (tbl24 only)      |
//! | 25–30 | depth: length of the owning route (0–32)                  |
//! | 24    | `VALID`: the entry holds a route                          |
//! | 0–23  | route value, or the group index when `EXT` is set        |
//!
//! `0` is the reserved "no route" entry, so a freshly zeroed table is empty.
//!
//! Invariants:
//! * tbl24 entries are `0`, a valid route of depth `<= 24`, or `EXT | group` with a
//!   live group; tbl8 entries are `0` or valid routes, never `EXT`.
//! * Each entry holds the longest route covering all its addresses, and its depth
//!   is that route's length.
//! * Each live group is referenced by exactly one tbl24 entry and has at least one
//!   entry of depth `> 24`; groups on the free list are unreferenced.
//! * `tbl8.len() == 256 * groups` with `groups <= max_groups <= MAX_GROUPS_LIMIT`.
//!
//! # Compact tables
//!
//! A table made by [`Fib::compact`] (a VRF's, of which there may be a thousand) keeps
//! its routes of [`SHORT_MAX`] bits or fewer out of tbl24, in `short`, one entry per /8
//! (the longest such route covering it), and its tbl24 on 4 KiB pages never advised to
//! huge ones: a default route or a /8 would otherwise write 64 MiB or 256 KiB of tbl24
//! and commit it, and a huge page would commit 2 MiB at its first write. So such a
//! table commits what its routes longer than /8 write: a page of tbl24 for each /14
//! they touch, and 1 KiB a tbl8 group. An entry of tbl24 (or of a group) that no route
//! longer than /8 owns stays empty, and a lookup that finds an empty entry answers
//! from `short`. A table made by [`Fib::new`] expands every route into tbl24 as
//! before, its `short` always empty: its lookups pay for `short` only when they find
//! no route.

use std::fmt;

use netbatch_engine::{Backing, ZeroedArray};

use super::rib::Rib;
use super::{FibError, check_route, check_value};

/// Default maximum number of tbl8 groups (256 entries, 1 KiB each).
pub const DEFAULT_MAX_GROUPS: u32 = 65_536;
/// Upper bound for the configurable number of tbl8 groups (group indexes are 24 bits).
pub const MAX_GROUPS_LIMIT: u32 = 1 << 24;
/// Largest route value a FIB can store (24 bits).
pub const MAX_VALUE: u32 = (1 << 24) - 1;

/// The longest routes a compact table keeps out of tbl24 (see the module documentation).
pub const SHORT_MAX: u8 = 8;

const TBL24_LEN: usize = 1 << 24;
const GROUP_LEN: usize = 256;

const EXT: u32 = 1 << 31;
const VALID: u32 = 1 << 24;
const DEPTH_SHIFT: u32 = 25;
const PAYLOAD: u32 = 0x00FF_FFFF;
const EMPTY: u32 = 0;

/// Entry for a route of length `len` with `value`.
#[inline(always)]
const fn route_entry(len: u8, value: u32) -> u32 {
    VALID | ((len as u32) << DEPTH_SHIFT) | value
}

/// Depth of a non-`EXT` entry (0 for the empty entry).
#[inline(always)]
const fn depth(entry: u32) -> u8 {
    ((entry >> DEPTH_SHIFT) & 0x3F) as u8
}

/// `entry & !PAYLOAD` of the entries owned by a route of length `len`.
#[inline(always)]
const fn owned_tag(len: u8) -> u32 {
    VALID | ((len as u32) << DEPTH_SHIFT)
}

/// Route value of a non-`EXT` entry.
#[inline(always)]
const fn decode(entry: u32) -> Option<u32> {
    if entry & VALID != 0 {
        Some(entry & PAYLOAD)
    } else {
        None
    }
}

/// Index into `tbl8` of the first entry of the group an `EXT` entry points to.
#[inline(always)]
const fn group_base(entry: u32) -> usize {
    ((entry & PAYLOAD) as usize) * GROUP_LEN
}

/// tbl24 index range `(start, count)` of a prefix with `len <= 24`.
const fn tbl24_span(prefix: u32, len: u8) -> (usize, usize) {
    ((prefix >> 8) as usize, 1 << (24 - len))
}

/// `short` index range `(start, count)` of a prefix with `len <= 8`.
const fn short_span(prefix: u32, len: u8) -> (usize, usize) {
    ((prefix >> 24) as usize, 1 << (8 - len))
}

/// In-group range `(start, count)` of a prefix with `24 < len <= 32`.
const fn tbl8_span(prefix: u32, len: u8) -> (usize, usize) {
    ((prefix & 0xFF) as usize, 1 << (32 - len))
}

/// DIR-24-8 longest-prefix-match table: one load per lookup for routes up to /24,
/// two loads otherwise.
///
/// Build it in bulk with [`Fib::from_routes`] / [`Fib::rebuild`], or keep it in sync
/// with a [`Rib`] through [`Table`](super::Table). `tbl24` takes 64 MiB of virtual
/// memory; pages are only committed when written.
pub struct Fib {
    tbl24: ZeroedArray<u32, TBL24_LEN>,
    tbl8: Vec<u32>,
    free_groups: Vec<u32>,
    max_groups: u32,
    /// A compact table's routes of [`SHORT_MAX`] bits or fewer, one entry per /8 (all
    /// empty in a table that is not compact).
    short: Box<[u32; 256]>,
    compact: bool,
}

/// tbl24 entries a clone checks at once: one 4 KiB page of them.
const PAGE_ENTRIES: usize = 1024;

impl Clone for Fib {
    /// A copy built on the heap (the derived clone of a boxed array would build the
    /// 64 MiB array on the stack first) and as sparse as the original: the copy starts
    /// zeroed (pages the kernel maps only when written) and only the pages of tbl24
    /// that hold an entry are copied, so a table of a few routes costs a few pages of
    /// resident memory, not 64 MiB (a copy of every page writes every page).
    fn clone(&self) -> Self {
        let mut tbl24 = if self.compact {
            ZeroedArray::<u32, TBL24_LEN>::new_small()
        } else {
            ZeroedArray::<u32, TBL24_LEN>::new()
        };
        for (to, from) in tbl24
            .chunks_exact_mut(PAGE_ENTRIES)
            .zip(self.tbl24.chunks_exact(PAGE_ENTRIES))
        {
            if from.iter().any(|&e| e != EMPTY) {
                to.copy_from_slice(from);
            }
        }
        Self {
            tbl24,
            tbl8: self.tbl8.clone(),
            free_groups: self.free_groups.clone(),
            max_groups: self.max_groups,
            short: self.short.clone(),
            compact: self.compact,
        }
    }
}

impl Default for Fib {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Fib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fib")
            .field("groups_in_use", &self.groups_in_use())
            .field("groups_allocated", &self.groups_allocated())
            .field("max_groups", &self.max_groups)
            .finish_non_exhaustive()
    }
}

impl Fib {
    /// Creates an empty FIB with [`DEFAULT_MAX_GROUPS`] tbl8 groups at most.
    pub fn new() -> Self {
        Self::with_max_groups(DEFAULT_MAX_GROUPS)
    }

    /// Creates an empty FIB with at most `max_groups` tbl8 groups (clamped to
    /// [`MAX_GROUPS_LIMIT`]). Group memory is allocated on demand.
    pub fn with_max_groups(max_groups: u32) -> Self {
        // A zeroed mapping of its own (EMPTY is 0): pages are mapped lazily, as 2 MiB
        // pages where huge tables are on.
        let tbl24 = ZeroedArray::<u32, TBL24_LEN>::new();
        Self {
            tbl24,
            tbl8: Vec::new(),
            free_groups: Vec::new(),
            max_groups: max_groups.min(MAX_GROUPS_LIMIT),
            short: Box::new([EMPTY; 256]),
            compact: false,
        }
    }

    /// An empty compact FIB (see the module documentation) with at most `max_groups`
    /// tbl8 groups.
    pub fn compact(max_groups: u32) -> Self {
        Self {
            tbl24: ZeroedArray::<u32, TBL24_LEN>::new_small(),
            compact: true,
            ..Self::with_max_groups(max_groups)
        }
    }

    /// Whether the table is compact.
    pub fn is_compact(&self) -> bool {
        self.compact
    }

    /// An empty FIB like this one (compact or not, the same group limit).
    fn empty_like(&self) -> Self {
        if self.compact {
            Self::compact(self.max_groups)
        } else {
            Self::with_max_groups(self.max_groups)
        }
    }

    /// The value of the route in `short` for `addr` (a compact table's routes of
    /// [`SHORT_MAX`] bits or fewer): what a lookup that found an empty entry answers.
    #[inline(always)]
    #[expect(clippy::indexing_slicing, reason = "`addr >> 24` < 256")]
    fn short_entry(&self, addr: u32) -> u32 {
        self.short[(addr >> 24) as usize]
    }

    /// Builds a FIB from `(prefix, len, value)` routes in one pass per prefix length
    /// (each route is written once, shortest first). For a duplicated prefix the last
    /// occurrence wins.
    ///
    /// Errors on an invalid route (see [`FibError`]) or when more than
    /// [`DEFAULT_MAX_GROUPS`] groups are needed.
    pub fn from_routes<I>(routes: I) -> Result<Self, FibError>
    where
        I: IntoIterator<Item = (u32, u8, u32)>,
    {
        let mut by_len: [Vec<(u32, u32)>; 33] = std::array::from_fn(|_| Vec::new());
        for (prefix, len, value) in routes {
            check_route(prefix, len, value)?;
            (by_len.get_mut(usize::from(len)))
                .ok_or(FibError::InvalidLength { len })?
                .push((prefix, value));
        }
        let mut fib = Self::new();
        for (routes, len) in by_len.iter().zip(0u8..) {
            for &(prefix, value) in routes {
                fib.fill_route(prefix, len, value)?;
            }
        }
        Ok(fib)
    }

    /// Replaces the contents with the routes of `rib`, built in bulk, keeping the
    /// group limit. On error (value over [`MAX_VALUE`], groups exhausted) `self` is
    /// unchanged.
    pub fn rebuild(&mut self, rib: &Rib) -> Result<(), FibError> {
        *self = self.build_from_rib(rib)?;
        Ok(())
    }

    /// Bulk build from a RIB (whose iterator yields routes by increasing length), of a
    /// FIB like this one.
    pub(super) fn build_from_rib(&self, rib: &Rib) -> Result<Self, FibError> {
        let mut fib = self.empty_like();
        for (prefix, len, value) in rib.iter() {
            check_value(value)?;
            fib.fill_route(prefix, len, value)?;
        }
        Ok(fib)
    }

    /// Value of the longest prefix containing `addr`, or `None` if no route matches.
    #[inline]
    #[expect(
        clippy::indexing_slicing,
        reason = "`addr >> 8` < 2^24, tbl24's length; an EXT entry names a live group of tbl8"
    )]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let entry = self.tbl24[(addr >> 8) as usize];
        let entry = if entry & EXT != 0 {
            self.tbl8[group_base(entry) | (addr & 0xFF) as usize]
        } else {
            entry
        };
        if entry & VALID != 0 {
            return Some(entry & PAYLOAD);
        }
        decode(self.short_entry(addr))
    }

    /// Value and length of the longest prefix containing `addr` (policy routing's
    /// `suppress_prefixlength` needs the length): every entry stores its route's depth,
    /// so this costs what [`Fib::lookup`] does.
    #[inline]
    pub fn lookup_len(&self, addr: u32) -> Option<(u32, u8)> {
        let entry = self
            .tbl24
            .get((addr >> 8) as usize)
            .copied()
            .unwrap_or(EMPTY);
        let entry = if entry & EXT != 0 {
            self.tbl8
                .get(group_base(entry) | (addr & 0xFF) as usize)
                .copied()
                .unwrap_or(EMPTY)
        } else {
            entry
        };
        let entry = if entry & VALID != 0 {
            entry
        } else {
            self.short_entry(addr)
        };
        decode(entry).map(|v| (v, depth(entry)))
    }

    /// Four lookups at once: all tbl24 loads are issued before any tbl8 load so the
    /// cache misses overlap.
    #[inline]
    #[expect(
        clippy::indexing_slicing,
        reason = "`addr >> 8` < 2^24, tbl24's length; an EXT entry names a live group of tbl8"
    )]
    pub fn lookup4(&self, addrs: [u32; 4]) -> [Option<u32>; 4] {
        let first = addrs.map(|addr| self.tbl24[(addr >> 8) as usize]);
        let entries: [u32; 4] = std::array::from_fn(|i| {
            let entry = first[i];
            let entry = if entry & EXT != 0 {
                self.tbl8[group_base(entry) | (addrs[i] & 0xFF) as usize]
            } else {
                entry
            };
            if entry & VALID != 0 {
                entry
            } else {
                self.short_entry(addrs[i])
            }
        });
        entries.map(decode)
    }

    /// Looks up `addrs[i]` into `out[i]` for `i < min(addrs.len(), out.len())`, four at
    /// a time with [`Fib::lookup4`].
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        let n = addrs.len().min(out.len());
        let addrs = addrs.get(..n).unwrap_or_default();
        let out = out.get_mut(..n).unwrap_or_default();
        let (src, src_rest) = addrs.as_chunks::<4>();
        let (dst, dst_rest) = out.as_chunks_mut::<4>();
        for (&a, o) in src.iter().zip(dst) {
            *o = self.lookup4(a);
        }
        for (&a, o) in src_rest.iter().zip(dst_rest) {
            *o = self.lookup(a);
        }
    }

    /// Number of tbl8 groups currently in use.
    pub fn groups_in_use(&self) -> usize {
        self.groups_allocated() - self.free_groups.len()
    }

    /// Maximum number of tbl8 groups.
    pub fn max_groups(&self) -> u32 {
        self.max_groups
    }

    /// Number of tbl8 groups ever allocated (in use or on the free list).
    fn groups_allocated(&self) -> usize {
        self.tbl8.len() / GROUP_LEN
    }

    /// How tbl24 is backed, and how many of its bytes the kernel backs with huge pages
    /// now (when it can be read).
    pub fn pages(&self) -> (Backing, Option<u64>) {
        (self.tbl24.backing(), self.tbl24.huge_bytes())
    }

    /// Heap bytes reserved: the whole 64 MiB tbl24 (virtual; only written pages are
    /// resident), tbl8 capacity and the free list.
    pub fn memory_bytes(&self) -> usize {
        size_of::<Self>()
            + TBL24_LEN * 4
            + self.tbl8.capacity() * 4
            + self.free_groups.capacity() * 4
    }

    /// Bulk write of a route, valid only while routes arrive by non-decreasing length:
    /// every entry of the range is overwritten unconditionally.
    #[expect(
        clippy::indexing_slicing,
        reason = "a valid route's span is in tbl24 (len <= 24) or in its live group of tbl8"
    )]
    fn fill_route(&mut self, prefix: u32, len: u8, value: u32) -> Result<(), FibError> {
        let entry = route_entry(len, value);
        if self.compact && len <= SHORT_MAX {
            let (start, count) = short_span(prefix, len);
            self.short[start..start + count].fill(entry);
            return Ok(());
        }
        if len <= 24 {
            let (start, count) = tbl24_span(prefix, len);
            let range = &mut self.tbl24[start..start + count];
            debug_assert!(
                range.iter().all(|&e| e & EXT == 0),
                "routes not sorted by length"
            );
            range.fill(entry);
        } else {
            let base = self.group_of(prefix)?;
            let (start, count) = tbl8_span(prefix, len);
            self.tbl8[base + start..base + start + count].fill(entry);
        }
        Ok(())
    }

    /// Incremental insert (or value update) of a validated route: overwrites the
    /// entries of its range whose depth is `<= len`. Fails only when a new group is
    /// needed and none is left, and then changes nothing.
    #[expect(
        clippy::indexing_slicing,
        reason = "a valid route's span is in tbl24 (len <= 24) or in its live group of tbl8"
    )]
    pub(super) fn insert_route(
        &mut self,
        prefix: u32,
        len: u8,
        value: u32,
    ) -> Result<(), FibError> {
        let new = route_entry(len, value);
        if self.compact && len <= SHORT_MAX {
            let (start, count) = short_span(prefix, len);
            for e in &mut self.short[start..start + count] {
                if depth(*e) <= len {
                    *e = new;
                }
            }
            return Ok(());
        }
        if len <= 24 {
            let (start, count) = tbl24_span(prefix, len);
            for slot in &mut self.tbl24[start..start + count] {
                let entry = *slot;
                if entry & EXT != 0 {
                    let base = group_base(entry);
                    for e in &mut self.tbl8[base..base + GROUP_LEN] {
                        if depth(*e) <= len {
                            *e = new;
                        }
                    }
                } else if depth(entry) <= len {
                    *slot = new;
                }
            }
        } else {
            let base = self.group_of(prefix)?;
            let (start, count) = tbl8_span(prefix, len);
            for e in &mut self.tbl8[base + start..base + start + count] {
                if depth(*e) <= len {
                    *e = new;
                }
            }
        }
        Ok(())
    }

    /// Incremental delete of a route: the entries it owns (depth exactly `len` in its
    /// range) become `cover`, the longest remaining route shorter than `len` containing
    /// the prefix, as `(len, value)`. Collapses the group of a > /24 route when it no
    /// longer holds anything longer than /24.
    #[expect(
        clippy::indexing_slicing,
        reason = "a valid route's span is in tbl24 (len <= 24) or in its live group of tbl8"
    )]
    pub(super) fn remove_route(&mut self, prefix: u32, len: u8, cover: Option<(u8, u32)>) {
        debug_assert!(cover.is_none_or(|(cover_len, _)| cover_len < len));
        let tag = owned_tag(len);
        if self.compact && len <= SHORT_MAX {
            // Its cover is shorter still: in `short` too.
            let replacement =
                cover.map_or(EMPTY, |(cover_len, value)| route_entry(cover_len, value));
            let (start, count) = short_span(prefix, len);
            for e in &mut self.short[start..start + count] {
                if *e & !PAYLOAD == tag {
                    *e = replacement;
                }
            }
            return;
        }
        // A compact table's short routes are in `short`: an entry they cover is empty.
        let cover = cover.filter(|&(cover_len, _)| !self.compact || cover_len > SHORT_MAX);
        let replacement = cover.map_or(EMPTY, |(cover_len, value)| route_entry(cover_len, value));
        if len <= 24 {
            // Groups always keep their > /24 entries here, so none can collapse.
            let (start, count) = tbl24_span(prefix, len);
            for slot in &mut self.tbl24[start..start + count] {
                let entry = *slot;
                if entry & EXT != 0 {
                    let base = group_base(entry);
                    for e in &mut self.tbl8[base..base + GROUP_LEN] {
                        if *e & !PAYLOAD == tag {
                            *e = replacement;
                        }
                    }
                } else if entry & !PAYLOAD == tag {
                    *slot = replacement;
                }
            }
        } else {
            let index = (prefix >> 8) as usize;
            let entry = self.tbl24[index];
            debug_assert!(entry & EXT != 0, "route longer than /24 without a group");
            if entry & EXT == 0 {
                return;
            }
            let base = group_base(entry);
            let (start, count) = tbl8_span(prefix, len);
            for e in &mut self.tbl8[base + start..base + start + count] {
                if *e & !PAYLOAD == tag {
                    *e = replacement;
                }
            }
            let group = &self.tbl8[base..base + GROUP_LEN];
            let first = group[0];
            if group.iter().all(|&e| e == first) {
                debug_assert!(depth(first) <= 24);
                self.tbl24[index] = first;
                self.free_groups.push(entry & PAYLOAD);
            }
        }
    }

    /// Base tbl8 index of the group of the /24 containing `prefix`, allocating one
    /// (filled with the current tbl24 entry) if there is none yet.
    #[expect(
        clippy::indexing_slicing,
        reason = "`prefix >> 8` is below 2^24, tbl24's length"
    )]
    fn group_of(&mut self, prefix: u32) -> Result<usize, FibError> {
        let index = (prefix >> 8) as usize;
        let entry = self.tbl24[index];
        if entry & EXT != 0 {
            return Ok(group_base(entry));
        }
        let group = self.alloc_group(entry)?;
        self.tbl24[index] = EXT | group;
        Ok(group_base(group))
    }

    /// Takes a group from the free list or appends a new one, with every entry set to
    /// `fill`.
    #[expect(
        clippy::indexing_slicing,
        reason = "a group on the free list was allocated: its 256 entries are in tbl8"
    )]
    fn alloc_group(&mut self, fill: u32) -> Result<u32, FibError> {
        if let Some(group) = self.free_groups.pop() {
            let base = group_base(group);
            self.tbl8[base..base + GROUP_LEN].fill(fill);
            return Ok(group);
        }
        let allocated = self.groups_allocated();
        if allocated >= self.max_groups as usize {
            return Err(FibError::Tbl8Exhausted {
                max_groups: self.max_groups,
            });
        }
        if self.tbl8.len() == self.tbl8.capacity() {
            // Double, but never reserve past the configured maximum.
            let limit = self.max_groups as usize * GROUP_LEN;
            let extra = self
                .tbl8
                .capacity()
                .max(GROUP_LEN)
                .min(limit - self.tbl8.len());
            self.tbl8.reserve_exact(extra);
        }
        self.tbl8.resize(self.tbl8.len() + GROUP_LEN, fill);
        Ok(allocated as u32)
    }

    /// Test helper: checks the structural invariants of the module docs (not FIB == RIB).
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        let allocated = self.groups_allocated();
        assert_eq!(self.tbl8.len() % GROUP_LEN, 0);
        assert!(allocated <= self.max_groups as usize);
        let mut refs = vec![0u8; allocated];
        for &group in &self.free_groups {
            refs[group as usize] = 2;
        }
        // Fast path: a chunk whose largest entry is below the smallest /25 entry holds
        // no group pointer and no deep entry; only the empty/VALID form is left to check.
        let deep = route_entry(25, 0);
        let chunks = self.tbl24.chunks(1024);
        let slow = chunks.filter(|c| {
            c.iter().fold(0, |m, &e| m.max(e)) >= deep
                || c.iter().any(|&e| e != EMPTY && e & VALID == 0)
        });
        for &entry in slow.flatten() {
            if entry & EXT != 0 {
                assert_eq!(entry & !(EXT | PAYLOAD), 0, "EXT entry with extra bits");
                let group = (entry & PAYLOAD) as usize;
                assert!(group < allocated, "dangling group");
                assert_eq!(refs[group], 0, "group referenced twice or free");
                refs[group] = 1;
                let entries = &self.tbl8[group_base(entry)..group_base(entry) + GROUP_LEN];
                assert!(entries.iter().all(|&e| e & EXT == 0), "EXT in tbl8");
                assert!(entries.iter().all(|&e| e & VALID != 0 || e == EMPTY));
                assert!(entries.iter().any(|&e| depth(e) > 24), "collapsible group");
            } else {
                assert!(entry & VALID != 0 || entry == EMPTY, "malformed entry");
                assert!(depth(entry) <= 24, "deep entry in tbl24");
            }
        }
        assert!(refs.iter().all(|&r| r != 0), "leaked group");
        assert_eq!(
            refs.iter().filter(|&&r| r == 1).count(),
            self.groups_in_use()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        assert_eq!(decode(EMPTY), None);
        let e = route_entry(0, 0);
        assert_ne!(e, EMPTY);
        assert_eq!((decode(e), depth(e)), (Some(0), 0));
        let e = route_entry(32, MAX_VALUE);
        assert_eq!((decode(e), depth(e)), (Some(MAX_VALUE), 32));
        assert_eq!(e & EXT, 0);
        assert_eq!(e & !PAYLOAD, owned_tag(32));
    }

    #[test]
    fn from_routes_basic() {
        let fib = Fib::from_routes([
            (0x0A00_0000, 8, 1),
            (0x0A01_0200, 25, 3),
            (0x0A01_0000, 16, 2),
            (0x0A01_0200, 25, 4),
        ])
        .unwrap();
        fib.check_invariants();
        assert_eq!(fib.lookup(0x0A01_0201), Some(4));
        assert_eq!(fib.lookup(0x0A01_0281), Some(2));
        assert_eq!(fib.lookup(0x0A02_0000), Some(1));
        assert_eq!(fib.lookup(0x0B00_0000), None);
        assert_eq!(fib.groups_in_use(), 1);
        assert_eq!(
            fib.lookup4([0x0A01_0201, 0x0A01_0281, 0x0A02_0000, 0x0B00_0000]),
            [Some(4), Some(2), Some(1), None]
        );
        let addrs = [
            0x0A01_0201,
            0x0A01_0281,
            0x0A02_0000,
            0x0B00_0000,
            0x0A01_0200,
            7,
        ];
        let mut out = [Some(99); 6];
        fib.lookup_batch(&addrs, &mut out);
        assert_eq!(out, [Some(4), Some(2), Some(1), None, Some(4), None]);
    }

    /// A clone copies only the pages of tbl24 that hold entries: it still answers every
    /// address as the original does, entries at the edges of a page, in a page of
    /// their own, in groups and none included.
    #[test]
    fn a_sparse_clone_answers_as_the_original() {
        let mut fib = Fib::new();
        // Page 0 (its first entry), a page's last /24, the next page's first, a group.
        let routes = [
            (0x0000_0000, 24, 1),
            (0x0003_FF00, 24, 2),
            (0x0004_0000, 24, 3),
            (0xC633_6480, 25, 4),
            (0xC000_0000, 8, 5),
        ];
        for (p, l, v) in routes {
            fib.insert_route(p, l, v).unwrap();
        }
        let copy = fib.clone();
        copy.check_invariants();
        for a in [
            0x0000_0001,
            0x0003_FFFF,
            0x0004_0000,
            0x0004_0100,
            0xC633_6481,
            0xC633_6401,
            0xC0FF_FFFF,
            0xBFFF_FFFF,
            0xFFFF_FFFF,
        ] {
            assert_eq!(copy.lookup(a), fib.lookup(a), "{a:#010x}");
        }
        // Every tbl24 entry, not a sample.
        assert!(copy.tbl24.iter().eq(fib.tbl24.iter()));
        assert_eq!(copy.tbl8, fib.tbl8);
    }

    #[test]
    fn from_routes_errors() {
        assert_eq!(
            Fib::from_routes([(1, 24, 0)]).unwrap_err(),
            FibError::HostBits { prefix: 1, len: 24 }
        );
        assert_eq!(
            Fib::from_routes([(0, 0, MAX_VALUE + 1)]).unwrap_err(),
            FibError::ValueTooLarge {
                value: MAX_VALUE + 1
            }
        );
        assert_eq!(
            Fib::from_routes([(0, 33, 0)]).unwrap_err(),
            FibError::InvalidLength { len: 33 }
        );
    }

    #[test]
    fn rebuild_keeps_limit_and_is_atomic() {
        let mut rib = Rib::new();
        rib.insert(0x0A00_0080, 25, 1).unwrap();
        rib.insert(0x0B00_0080, 25, 2).unwrap();
        let mut fib = Fib::with_max_groups(1);
        assert_eq!(
            fib.rebuild(&rib),
            Err(FibError::Tbl8Exhausted { max_groups: 1 })
        );
        assert_eq!(fib.lookup(0x0A00_0080), None);
        rib.remove(0x0B00_0080, 25);
        fib.rebuild(&rib).unwrap();
        assert_eq!(fib.lookup(0x0A00_0080), Some(1));
        assert_eq!(fib.max_groups(), 1);
        fib.check_invariants();
        assert_eq!(
            Fib::with_max_groups(u32::MAX).max_groups(),
            MAX_GROUPS_LIMIT
        );
    }
}
