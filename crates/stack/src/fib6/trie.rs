//! The IPv6 forwarding table: a direct-indexed first stage over the top
//! [`DIRECT_BITS`] address bits, then tree-bitmap nodes of [`STRIDE`] bits (see the
//! module documentation of [`fib6`](super) for the design and its invariants).
//!
//! Node encoding: `internal` has bit `(1 << rl) | v` set when the node holds the prefix
//! of relative length `rl` (0 to 5) whose `rl` bits below the node's depth are `v`: the
//! positions 1 to 63 of a binary heap, so that a longer prefix always has a higher
//! position. `children` has bit `c` set when the child for the next six address bits
//! `c` exists. A node's children are contiguous in `nodes` from `child_base`, its
//! values contiguous in `results` from `result_base`, both in bit order: the `i`-th set
//! bit's entry is at `base + i`.

use netbatch_engine::ZeroedArray;
use std::collections::HashMap;
use std::fmt;

use super::Fib6Error;
use super::prefix::{Ipv6Prefix, mask6};

/// Address bits resolved by the direct-indexed first stage.
pub const DIRECT_BITS: u32 = 16;
/// Address bits resolved by each trie node below the first stage.
pub const STRIDE: u32 = 6;
/// Largest value a route may carry (`u32::MAX` is the table's "no route").
pub const MAX_VALUE: u32 = u32::MAX - 1;
/// Default limit on trie nodes (24 bytes each): 8 Mi nodes, 192 MiB.
pub const DEFAULT_MAX_NODES: u32 = 1 << 23;
/// Upper bound for the configurable node limit (indices stay 32-bit with room for the
/// free blocks that compaction allows).
pub const MAX_NODES_LIMIT: u32 = 1 << 30;

const DIRECT_LEN: usize = 1 << DIRECT_BITS;
const NONE: u32 = u32::MAX;
/// Free arena slots tolerated before compaction, whatever the table's size.
const COMPACT_MIN: usize = 1 << 12;
/// Nodes on the longest path: depths `DIRECT_BITS + STRIDE * i` up to 128.
const MAX_LEVELS: usize = ((128 - DIRECT_BITS) / STRIDE + 1) as usize;
/// Largest block of children or values (one per bit of a 64-bit map).
const MAX_BLOCK: usize = 64;

// First-stage keys fit a `u32` (and its table a few MiB); six bits per node give 64
// children and 63 prefix positions: one `u64` map each.
const _: () = assert!(DIRECT_BITS <= 24 && STRIDE == 6);
// `Fib6::lookup8` reads a level's six bits from one half of the address: no node depth
// (`DIRECT_BITS + STRIDE * k`) has its six bits straddle bit 64.
const _: () = assert!((64 - DIRECT_BITS).is_multiple_of(STRIDE));

/// A trie node (24 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Node {
    internal: u64,
    children: u64,
    child_base: u32,
    result_base: u32,
}

/// A first-stage entry: the root of the subtree below it (0: none) and the value of
/// the longest route of at most [`DIRECT_BITS`] bits covering it ([`NONE`]: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    node: u32,
    value: u32,
}

const EMPTY_SLOT: Slot = Slot {
    node: 0,
    value: NONE,
};

impl Slot {
    /// The slot a first-stage word holds: the node in the low 32 bits, the value in the
    /// high ones stored as `value ^ NONE`, so that a zero word is [`EMPTY_SLOT`] (the
    /// first stage is zeroed memory, committed only where a route writes).
    #[inline(always)]
    fn of(w: u64) -> Self {
        Self {
            node: w as u32,
            value: (w >> 32) as u32 ^ NONE,
        }
    }

    /// The first-stage word of this slot ([`Slot::of`] back).
    #[inline(always)]
    fn word(self) -> u64 {
        u64::from(self.node) | u64::from(self.value ^ NONE) << 32
    }
}

/// First-stage words per 4 KiB page, and depth bytes per page (a copy copies only the
/// pages that hold something).
const PAGE_WORDS: usize = 4096 / size_of::<u64>();
const PAGE_BYTES: usize = 4096;

/// The longest routes a sparse table ([`Fib6::sparse`]) keeps out of the first stage, in
/// a side table of one entry per /8: a default route or a /3 would otherwise write 512
/// KiB or 64 KiB of it.
const WIDE_MAX: u32 = 8;

/// For each six-bit chunk `c`, the internal positions of the prefixes of relative
/// length 0 to 5 that contain it: `(1 << rl) | (c >> (6 - rl))`.
#[expect(
    clippy::indexing_slicing,
    reason = "evaluated when compiling, `c < 64` the table's length"
)]
const MATCH: [u64; 64] = {
    let mut t = [0u64; 64];
    let mut c = 0;
    while c < 64 {
        let mut rl = 0;
        while rl < 6 {
            t[c] |= 1 << ((1 << rl) | (c >> (6 - rl)));
            rl += 1;
        }
        c += 1;
    }
    t
};

/// Number of set bits of `bits` below bit `i` (`i < 64`).
#[inline(always)]
fn rank(bits: u64, i: u32) -> u32 {
    (bits & ((1u64 << i) - 1)).count_ones()
}

/// Number of set bits of `bits` at or below bit `63 - z` (`z < 64`): [`rank`] of the
/// bit above, by a shift that moves it to the top (a shift and a count, where a mask
/// takes three more instructions).
#[inline(always)]
fn rank_to_top(bits: u64, z: u32) -> u32 {
    (bits << z).count_ones()
}

/// Address bits `[d, d + 6)` of `a` (zeros past bit 127).
#[inline(always)]
fn chunk(a: u128, d: u32) -> u32 {
    a.checked_shl(d).map_or(0, |x| (x >> 122) as u32)
}

/// First-stage index of address bits `a`.
#[inline(always)]
fn slot_index(a: u128) -> usize {
    (a >> (128 - DIRECT_BITS)) as usize
}

/// Depth of the node that holds a prefix of length `len > DIRECT_BITS`.
#[inline(always)]
fn node_depth(len: u32) -> u32 {
    DIRECT_BITS + STRIDE * ((len - DIRECT_BITS) / STRIDE)
}

/// Internal position of prefix `p` of length `len` in its node at depth `d`.
#[inline(always)]
fn position(p: u128, len: u32, d: u32) -> u32 {
    let rl = len - d;
    (1 << rl) | (chunk(p, d) >> (STRIDE - rl))
}

/// Decodes a value word.
#[inline(always)]
fn decode(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

/// Checks that a route value is storable.
fn check_value(value: u32) -> Result<(), Fib6Error> {
    if value > MAX_VALUE {
        return Err(Fib6Error::ValueTooLarge { value });
    }
    Ok(())
}

/// Sizes of a [`Fib6`], for reports and for the memory bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fib6Stats {
    /// Routes in the table.
    pub routes: usize,
    /// Routes of at most [`DIRECT_BITS`] bits (kept in the first stage).
    pub short_routes: usize,
    /// Trie nodes in use.
    pub nodes: usize,
    /// Node slots in the arena (in use, free, and the reserved slot 0).
    pub node_slots: usize,
    /// Value slots in use (one per route longer than [`DIRECT_BITS`]).
    pub results: usize,
    /// Value slots in the arena (in use and free).
    pub result_slots: usize,
    /// Heap bytes held, as [`Fib6::memory_bytes`].
    pub memory_bytes: usize,
}

/// IPv6 longest-prefix-match table from prefixes to `u32` values (next-hop or
/// adjacency indices), with bulk build, incremental updates and allocation-free
/// lookups.
pub struct Fib6 {
    /// The first stage, one word per slot ([`Slot::of`]); zeroed memory, so that a table
    /// of few routes (a VRF's) commits only the pages its routes write.
    direct: ZeroedArray<u64, DIRECT_LEN>,
    /// Length of the route that owns each first-stage value (meaningless without one).
    depth: ZeroedArray<u8, DIRECT_LEN>,
    /// On 4 KiB pages, never huge ones (a VRF's table: [`Fib6::sparse`]).
    small: bool,
    /// A sparse table's routes of at most [`WIDE_MAX`] bits, one entry per /8: the
    /// longest covering it (value or [`NONE`], and its length); empty in a table that is
    /// not sparse. A first-stage slot without a value of its own answers from here.
    wide: Vec<(u32, u8)>,
    /// Routes of length `l <= DIRECT_BITS` by length, keyed by their first-stage index.
    short: Vec<HashMap<u32, u32>>,
    /// Node arena; slot 0 is reserved (0 means "no node").
    nodes: Vec<Node>,
    results: Vec<u32>,
    /// Free blocks by size (1 to 64): their first slots.
    free_nodes: Vec<Vec<u32>>,
    free_results: Vec<Vec<u32>>,
    free_node_slots: usize,
    free_result_slots: usize,
    live_nodes: usize,
    short_routes: usize,
    routes: usize,
    max_nodes: u32,
}

impl Default for Fib6 {
    fn default() -> Self {
        Self::new()
    }
}

/// Zeroed first-stage arrays, on 4 KiB pages when `small`.
fn first_stage(small: bool) -> (ZeroedArray<u64, DIRECT_LEN>, ZeroedArray<u8, DIRECT_LEN>) {
    if small {
        (ZeroedArray::new_small(), ZeroedArray::new_small())
    } else {
        (ZeroedArray::new(), ZeroedArray::new())
    }
}

impl Clone for Fib6 {
    /// A copy as sparse as the original: its first stage starts zeroed and only the
    /// pages that hold something are copied (a copy of every page would commit them all).
    fn clone(&self) -> Self {
        let (mut direct, mut depth) = first_stage(self.small);
        for (to, from) in direct
            .chunks_exact_mut(PAGE_WORDS)
            .zip(self.direct.chunks_exact(PAGE_WORDS))
        {
            if from.iter().any(|&w| w != 0) {
                to.copy_from_slice(from);
            }
        }
        for (to, from) in depth
            .chunks_exact_mut(PAGE_BYTES)
            .zip(self.depth.chunks_exact(PAGE_BYTES))
        {
            if from.iter().any(|&b| b != 0) {
                to.copy_from_slice(from);
            }
        }
        Self {
            direct,
            depth,
            small: self.small,
            wide: self.wide.clone(),
            short: self.short.clone(),
            nodes: self.nodes.clone(),
            results: self.results.clone(),
            free_nodes: self.free_nodes.clone(),
            free_results: self.free_results.clone(),
            free_node_slots: self.free_node_slots,
            free_result_slots: self.free_result_slots,
            live_nodes: self.live_nodes,
            short_routes: self.short_routes,
            routes: self.routes,
            max_nodes: self.max_nodes,
        }
    }
}

impl fmt::Debug for Fib6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fib6")
            .field("stats", &self.stats())
            .field("max_nodes", &self.max_nodes)
            .finish_non_exhaustive()
    }
}

impl Fib6 {
    /// An empty table with at most [`DEFAULT_MAX_NODES`] nodes.
    pub fn new() -> Self {
        Self::with_max_nodes(DEFAULT_MAX_NODES)
    }

    /// An empty table with at most `max_nodes` trie nodes (clamped to
    /// [`MAX_NODES_LIMIT`]).
    pub fn with_max_nodes(max_nodes: u32) -> Self {
        Self::sized(max_nodes, false)
    }

    /// An empty table for a VRF, of which there may be a thousand: its first stage on
    /// 4 KiB pages, never advised to huge ones, so that it commits only the pages its
    /// routes write (a route of at most /16 writes its range of slots, a longer one one
    /// slot: a few pages for a few routes, not the whole 576 KiB).
    pub fn sparse() -> Self {
        Self::sized(DEFAULT_MAX_NODES, true)
    }

    fn sized(max_nodes: u32, small: bool) -> Self {
        let (direct, depth) = first_stage(small);
        Self {
            direct,
            depth,
            small,
            wide: if small {
                vec![(NONE, 0); 1 << WIDE_MAX]
            } else {
                Vec::new()
            },
            short: (0..=DIRECT_BITS).map(|_| HashMap::new()).collect(),
            nodes: vec![Node::default()],
            results: Vec::new(),
            free_nodes: vec![Vec::new(); MAX_BLOCK + 1],
            free_results: vec![Vec::new(); MAX_BLOCK + 1],
            free_node_slots: 0,
            free_result_slots: 0,
            live_nodes: 0,
            short_routes: 0,
            routes: 0,
            max_nodes: max_nodes.min(MAX_NODES_LIMIT),
        }
    }

    /// Builds a table from `(prefix, value)` routes in bulk (sorted once, each node
    /// written once, the arenas packed). For a prefix given twice the last value wins.
    ///
    /// Errors: a value above [`MAX_VALUE`], or more than [`DEFAULT_MAX_NODES`] nodes.
    pub fn from_routes<I>(routes: I) -> Result<Self, Fib6Error>
    where
        I: IntoIterator<Item = (Ipv6Prefix, u32)>,
    {
        Self::build(DEFAULT_MAX_NODES, false, routes)
    }

    /// Replaces every route with `routes`, built in bulk as [`Fib6::from_routes`],
    /// keeping the node limit. On error the table is unchanged.
    pub fn bulk_load<I>(&mut self, routes: I) -> Result<(), Fib6Error>
    where
        I: IntoIterator<Item = (Ipv6Prefix, u32)>,
    {
        *self = Self::build(self.max_nodes, self.small, routes)?;
        Ok(())
    }

    fn build<I>(max_nodes: u32, small: bool, routes: I) -> Result<Self, Fib6Error>
    where
        I: IntoIterator<Item = (Ipv6Prefix, u32)>,
    {
        let mut list = Vec::new();
        for (p, value) in routes {
            check_value(value)?;
            list.push((p.bits(), p.prefix_len(), value));
        }
        // Stable: among equal prefixes the input order is kept, and the last one stays.
        list.sort_by_key(|&(a, l, _)| (a, l));
        list.dedup_by(|next, kept| {
            let same = (next.0, next.1) == (kept.0, kept.1);
            if same {
                *kept = *next;
            }
            same
        });

        let mut fib = Self::sized(max_nodes, small);
        let (short, long): (Vec<_>, Vec<_>) = list
            .into_iter()
            .partition(|&(_, l, _)| u32::from(l) <= DIRECT_BITS);
        for &(a, l, v) in &short {
            fib.insert_short(a, u32::from(l), v);
        }
        let mut rest = &long[..];
        while let Some(&(first, _, _)) = rest.first() {
            let s = slot_index(first);
            let n = rest.partition_point(|&(a, _, _)| slot_index(a) == s);
            let (group, tail) = rest.split_at(n);
            rest = tail;
            fib.take_nodes(1)?;
            let root = fib.alloc_nodes(1);
            fib.build_node(group, DIRECT_BITS, root)?;
            fib.set_node(s, root);
        }
        fib.routes = fib.short_routes + long.len();
        fib.nodes.shrink_to_fit();
        fib.results.shrink_to_fit();
        Ok(fib)
    }

    /// Fills node `at` at depth `d` from `routes`: sorted by (address, length), all
    /// at least `d` long and inside the node's prefix.
    #[expect(
        clippy::indexing_slicing,
        reason = "positions and chunks are below 64; `at` and the blocks come from the arenas; groups lie in `routes`"
    )]
    fn build_node(&mut self, routes: &[(u128, u8, u32)], d: u32, at: u32) -> Result<(), Fib6Error> {
        let mut internal = 0u64;
        let mut values = [0u32; 64];
        let mut children = 0u64;
        // (chunk, start, end) of each child's routes, by increasing chunk.
        let mut groups = [(0u32, 0usize, 0usize); MAX_BLOCK];
        let mut ngroups = 0;
        let mut i = 0;
        while i < routes.len() {
            let (a, l, v) = routes[i];
            let l = u32::from(l);
            let c = chunk(a, d);
            if l - d < STRIDE {
                let pos = position(a, l, d);
                internal |= 1 << pos;
                values[pos as usize] = v;
                i += 1;
                continue;
            }
            // In (address, length) order the shorter prefixes starting a chunk's range
            // come before its longer ones: a child's routes are contiguous.
            let end = i + routes[i..]
                .iter()
                .position(|&(b, m, _)| u32::from(m) < d + STRIDE || chunk(b, d) != c)
                .unwrap_or(routes.len() - i);
            debug_assert!(children >> c == 0, "child routes not contiguous");
            children |= 1 << c;
            groups[ngroups] = (c, i, end);
            ngroups += 1;
            i = end;
        }
        let k = children.count_ones() as usize;
        self.take_nodes(k)?;
        let child_base = if k > 0 { self.alloc_nodes(k) } else { 0 };
        let nr = internal.count_ones() as usize;
        let result_base = if nr > 0 { self.alloc_results(nr) } else { 0 };
        let mut bits = internal;
        let mut j = result_base as usize;
        while bits != 0 {
            let pos = bits.trailing_zeros();
            self.results[j] = values[pos as usize];
            j += 1;
            bits &= bits - 1;
        }
        self.nodes[at as usize] = Node {
            internal,
            children,
            child_base,
            result_base,
        };
        for (idx, &(_, start, end)) in groups[..ngroups].iter().enumerate() {
            self.build_node(&routes[start..end], d + STRIDE, child_base + idx as u32)?;
        }
        Ok(())
    }

    /// Counts `k` more nodes in use, or fails if that passes the limit.
    fn take_nodes(&mut self, k: usize) -> Result<(), Fib6Error> {
        if self.live_nodes + k > self.max_nodes as usize {
            return Err(Fib6Error::NodesExhausted {
                max_nodes: self.max_nodes,
            });
        }
        self.live_nodes += k;
        Ok(())
    }

    /// Value of the longest prefix containing address bits `addr`
    /// (`u128::from(Ipv6Addr)`, or `u128::from_be_bytes` of the header's 16 bytes).
    ///
    /// One first-stage load, then one node per six bits down to the longest route;
    /// never panics, never allocates.
    #[inline]
    pub fn lookup(&self, addr: u128) -> Option<u32> {
        let slot = self.slot(addr);
        let mut best = slot.value;
        let mut n = slot.node;
        let mut a = addr << DIRECT_BITS;
        while n != 0 {
            n = self.step(n, &mut a, &mut best);
        }
        decode(best)
    }

    /// Value and length of the longest prefix containing address bits `addr` (policy
    /// routing's `suppress_prefixlength` needs the length). The length is known from
    /// where the value was found: the first stage keeps its routes' lengths, and in a node
    /// at depth `d` the matched position's highest bit is its relative length. Never
    /// panics, never allocates.
    pub fn lookup_len(&self, addr: u128) -> Option<(u32, u8)> {
        let slot = self.slot(addr);
        let mut best = slot.value;
        let mut len = u32::from(self.first_len(addr));
        let mut n = slot.node;
        let mut d = DIRECT_BITS;
        while n != 0 && d < 128 {
            let Some(node) = self.nodes.get(n as usize) else {
                break;
            };
            let c = chunk(addr, d);
            let m = node.internal & MATCH.get(c as usize).copied().unwrap_or(0);
            if m != 0 {
                let pos = 63 - m.leading_zeros();
                let r = node.result_base.wrapping_add(rank(node.internal, pos));
                if let Some(&v) = self.results.get(r as usize) {
                    best = v;
                    // Position `(1 << rl) | v`: its highest bit is `rl`.
                    len = d + (31 - pos.leading_zeros());
                }
            }
            if node.children & (1 << c) == 0 {
                break;
            }
            n = node.child_base.wrapping_add(rank(node.children, c));
            d += STRIDE;
        }
        decode(best).map(|v| (v, len as u8))
    }

    /// The first-stage entry of `addr`.
    #[inline(always)]
    fn slot(&self, addr: u128) -> Slot {
        let mut slot = self
            .direct
            .get(slot_index(addr))
            .map_or(EMPTY_SLOT, |&w| Slot::of(w));
        if slot.value == NONE && !self.wide.is_empty() {
            slot.value = self.wide(addr).0;
        }
        slot
    }

    /// A sparse table's widest routes' answer for `addr`: value ([`NONE`]: none) and
    /// length.
    #[inline]
    fn wide(&self, addr: u128) -> (u32, u8) {
        self.wide
            .get((addr >> (128 - WIDE_MAX)) as usize)
            .copied()
            .unwrap_or((NONE, 0))
    }

    /// The length of the route a lookup's first stage answered `addr` with: the slot's
    /// own, or in a sparse table the side table's when the slot has none.
    fn first_len(&self, addr: u128) -> u8 {
        let s = slot_index(addr);
        match self.direct.get(s) {
            Some(&w) if Slot::of(w).value != NONE => self.depth.get(s).copied().unwrap_or(0),
            _ => self.wide(addr).1,
        }
    }

    /// The root node below first-stage slot `s` (0: none).
    #[inline(always)]
    fn node_at(&self, s: usize) -> u32 {
        self.direct.get(s).map_or(0, |&w| Slot::of(w).node)
    }

    /// Sets the root node below first-stage slot `s`.
    #[inline(always)]
    fn set_node(&mut self, s: usize, n: u32) {
        if let Some(w) = self.direct.get_mut(s) {
            let mut slot = Slot::of(*w);
            slot.node = n;
            *w = slot.word();
        }
    }

    /// One node of a lookup: records the node's longest match of the next six bits of
    /// `a` (which it consumes) in `best`, returns the child to visit or 0.
    #[inline(always)]
    fn step(&self, n: u32, a: &mut u128, best: &mut u32) -> u32 {
        let c = (*a >> 122) as u32;
        *a <<= STRIDE;
        self.step_chunk(n, c, best)
    }

    /// [`Fib6::step`] given the node's six address bits `c` (below 64).
    #[inline(always)]
    fn step_chunk(&self, n: u32, c: u32, best: &mut u32) -> u32 {
        let Some(node) = self.nodes.get(n as usize) else {
            return 0;
        };
        let c = c & 63;
        let m = node.internal & MATCH.get(c as usize).copied().unwrap_or(0);
        if m != 0 {
            // The longest match is m's highest set bit: shifted to bit 63, it and the
            // positions below it remain, and they count its value's index plus one.
            let r = node
                .result_base
                .wrapping_add(rank_to_top(node.internal, m.leading_zeros()))
                .wrapping_sub(1);
            if let Some(&v) = self.results.get(r as usize) {
                *best = v;
            }
        }
        // Children `c` and below, child `c` at bit 63 (the sign): set when it exists,
        // and then the count less one is its rank.
        let upto = node.children << (63 - c);
        if (upto as i64) < 0 {
            node.child_base
                .wrapping_add(upto.count_ones())
                .wrapping_sub(1)
        } else {
            0
        }
    }

    /// Eight lookups walked in lockstep, so that their memory loads overlap.
    ///
    /// The lanes descend one level at a time together, so they share the level's
    /// depth: each lane's six bits are read from its address's high or low half by the
    /// same shift (node depths are `16 + 6k`: 16 to 58 lie in the high half, 64 to 124
    /// in the low one, none straddles), rather than each lane shifting its own 128-bit
    /// remainder and keeping it.
    #[inline]
    pub fn lookup8(&self, addrs: &[u128; 8]) -> [Option<u32>; 8] {
        let slots = addrs.map(|a| self.slot(a));
        let mut best = slots.map(|slot| slot.value);
        let mut node = slots.map(|slot| slot.node);
        let hi = addrs.map(|a| (a >> 64) as u64);
        let lo = addrs.map(|a| a as u64);
        let mut d = DIRECT_BITS;
        while d < 64 {
            if !self.level8(&mut node, &hi, d, &mut best) {
                return best.map(decode);
            }
            d += STRIDE;
        }
        while d < 128 {
            if !self.level8(&mut node, &lo, d - 64, &mut best) {
                break;
            }
            d += STRIDE;
        }
        best.map(decode)
    }

    /// One level of [`Fib6::lookup8`]: each lane still in the tree steps through its
    /// node, with the six bits at `shift` (at most 58) of its half-address `bits[i]`.
    /// Whether any lane is left in the tree.
    #[inline(always)]
    fn level8(
        &self,
        node: &mut [u32; 8],
        bits: &[u64; 8],
        shift: u32,
        best: &mut [u32; 8],
    ) -> bool {
        let mut live = 0;
        for ((n, &b), best) in node.iter_mut().zip(bits).zip(best) {
            if *n != 0 {
                let c = ((b << shift) >> (64 - STRIDE)) as u32;
                *n = self.step_chunk(*n, c, best);
                live |= *n;
            }
        }
        live != 0
    }

    /// Looks up `addrs[i]` into `out[i]` for `i < min(addrs.len(), out.len())`, eight
    /// at a time with [`Fib6::lookup8`].
    pub fn lookup_batch(&self, addrs: &[u128], out: &mut [Option<u32>]) {
        let n = addrs.len().min(out.len());
        let addrs = addrs.get(..n).unwrap_or_default();
        let out = out.get_mut(..n).unwrap_or_default();
        let (src, src_rest) = addrs.as_chunks::<8>();
        let (dst, dst_rest) = out.as_chunks_mut::<8>();
        for (a, o) in src.iter().zip(dst) {
            *o = self.lookup8(a);
        }
        for (&a, o) in src_rest.iter().zip(dst_rest) {
            *o = self.lookup(a);
        }
    }

    /// Longest-prefix match returning the route itself (control-plane speed).
    pub fn longest_match(&self, addr: u128) -> Option<(Ipv6Prefix, u32)> {
        let slot = self.slot(addr);
        let mut best = decode(slot.value).map(|v| (u32::from(self.first_len(addr)), v));
        let mut n = slot.node;
        let mut d = DIRECT_BITS;
        while n != 0 {
            let Some(&node) = self.nodes.get(n as usize) else {
                break;
            };
            let c = chunk(addr, d);
            let m = node.internal & MATCH.get(c as usize).copied().unwrap_or(0);
            if m != 0 {
                let pos = 63 - m.leading_zeros();
                let rl = 31 - pos.leading_zeros();
                let r = node.result_base + rank(node.internal, pos);
                if let Some(&v) = self.results.get(r as usize) {
                    best = Some((d + rl, v));
                }
            }
            if node.children & (1 << c) == 0 {
                break;
            }
            n = node.child_base + rank(node.children, c);
            d += STRIDE;
        }
        let (len, v) = best?;
        let len = len as u8;
        Some((Ipv6Prefix::from_bits(addr & mask6(len), len).ok()?, v))
    }

    /// Adds or replaces the route for `prefix`; returns the previous value of exactly
    /// this prefix.
    ///
    /// Errors (table unchanged): a value above [`MAX_VALUE`], or the node limit.
    #[expect(
        clippy::indexing_slicing,
        reason = "`slot_index` is below DIRECT_LEN; a node alloc_nodes gives is in `nodes`"
    )]
    pub fn insert(&mut self, prefix: Ipv6Prefix, value: u32) -> Result<Option<u32>, Fib6Error> {
        check_value(value)?;
        let (p, l) = (prefix.bits(), u32::from(prefix.prefix_len()));
        if l <= DIRECT_BITS {
            return Ok(self.insert_short(p, l, value));
        }
        let s = slot_index(p);
        let target = node_depth(l);
        let missing = self.missing_nodes(p, target);
        if self.live_nodes + missing > self.max_nodes as usize {
            return Err(Fib6Error::NodesExhausted {
                max_nodes: self.max_nodes,
            });
        }
        let mut n = self.node_at(s);
        if n == 0 {
            n = self.alloc_nodes(1);
            self.nodes[n as usize] = Node::default();
            self.live_nodes += 1;
            self.set_node(s, n);
        }
        let mut d = DIRECT_BITS;
        while d < target {
            n = self.child_or_insert(n, chunk(p, d));
            d += STRIDE;
        }
        let old = self.set_result(n, position(p, l, d), value);
        if old.is_none() {
            self.routes += 1;
        }
        self.maybe_compact();
        Ok(old)
    }

    /// Nodes an insert of a prefix of address bits `p` held at depth `target` creates.
    #[expect(
        clippy::indexing_slicing,
        reason = "`slot_index` < DIRECT_LEN; a live node's children are a block in `nodes`"
    )]
    fn missing_nodes(&self, p: u128, target: u32) -> usize {
        let levels = ((target - DIRECT_BITS) / STRIDE + 1) as usize;
        let mut n = self.node_at(slot_index(p));
        if n == 0 {
            return levels;
        }
        let mut d = DIRECT_BITS;
        let mut present = 1;
        while d < target {
            let node = self.nodes[n as usize];
            let c = chunk(p, d);
            if node.children & (1 << c) == 0 {
                break;
            }
            n = node.child_base + rank(node.children, c);
            present += 1;
            d += STRIDE;
        }
        levels - present
    }

    /// Removes the route for exactly `prefix`; returns its value, or `None` if there
    /// was none.
    #[expect(
        clippy::indexing_slicing,
        reason = "`slot_index` < DIRECT_LEN; a path of MAX_LEVELS; live nodes' blocks are in the arenas"
    )]
    pub fn remove(&mut self, prefix: Ipv6Prefix) -> Option<u32> {
        let (p, l) = (prefix.bits(), u32::from(prefix.prefix_len()));
        if l <= DIRECT_BITS {
            return self.remove_short(p, l);
        }
        let s = slot_index(p);
        let target = node_depth(l);
        let mut path = [(0u32, 0u32); MAX_LEVELS];
        let mut depth = 0;
        let mut n = self.node_at(s);
        if n == 0 {
            return None;
        }
        let mut d = DIRECT_BITS;
        while d < target {
            let node = self.nodes[n as usize];
            let c = chunk(p, d);
            if node.children & (1 << c) == 0 {
                return None;
            }
            path[depth] = (n, c);
            depth += 1;
            n = node.child_base + rank(node.children, c);
            d += STRIDE;
        }
        let pos = position(p, l, d);
        if self.nodes[n as usize].internal & (1 << pos) == 0 {
            return None;
        }
        let old = self.clear_result(n, pos);
        self.routes -= 1;
        // Remove the nodes left empty, bottom up.
        let mut cur = n;
        loop {
            let node = self.nodes[cur as usize];
            if node.internal != 0 || node.children != 0 {
                break;
            }
            match depth.checked_sub(1) {
                None => {
                    self.free_node_block(cur, 1);
                    self.live_nodes -= 1;
                    self.set_node(s, 0);
                    break;
                }
                Some(up) => {
                    depth = up;
                    let (parent, c) = path[up];
                    self.remove_child(parent, c);
                    cur = parent;
                }
            }
        }
        self.maybe_compact();
        Some(old)
    }

    /// Value of exactly `prefix`, if it is a route.
    pub fn get(&self, prefix: Ipv6Prefix) -> Option<u32> {
        let (p, l) = (prefix.bits(), u32::from(prefix.prefix_len()));
        if l <= DIRECT_BITS {
            return self
                .short
                .get(l as usize)?
                .get(&(slot_index(p) as u32))
                .copied();
        }
        let target = node_depth(l);
        let mut n = self.slot(p).node;
        let mut d = DIRECT_BITS;
        while n != 0 && d < target {
            let node = *self.nodes.get(n as usize)?;
            let c = chunk(p, d);
            n = if node.children & (1 << c) == 0 {
                0
            } else {
                node.child_base + rank(node.children, c)
            };
            d += STRIDE;
        }
        let node = self.nodes.get(n as usize).filter(|_| n != 0)?;
        let pos = position(p, l, d);
        (node.internal & (1 << pos) != 0).then_some(())?;
        let r = node.result_base + rank(node.internal, pos);
        self.results.get(r as usize).copied()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }

    /// The node limit.
    pub fn max_nodes(&self) -> u32 {
        self.max_nodes
    }

    /// Every route, sorted by (address, length).
    pub fn routes(&self) -> Vec<(Ipv6Prefix, u32)> {
        let mut out = Vec::with_capacity(self.routes);
        for (map, len) in self.short.iter().zip(0u8..) {
            for (&key, &v) in map {
                let bits = u128::from(key) << (128 - DIRECT_BITS);
                out.extend(Ipv6Prefix::from_bits(bits, len).ok().map(|p| (p, v)));
            }
        }
        for (s, slot) in self.direct.iter().map(|&w| Slot::of(w)).enumerate() {
            if slot.node != 0 {
                let bits = (s as u128) << (128 - DIRECT_BITS);
                self.collect(slot.node, bits, DIRECT_BITS, &mut out);
            }
        }
        out.sort_unstable_by_key(|&(p, _)| (p.bits(), p.prefix_len()));
        out
    }

    /// Appends the routes of the subtree of node `n` (prefix `bits`, depth `d`).
    fn collect(&self, n: u32, bits: u128, d: u32, out: &mut Vec<(Ipv6Prefix, u32)>) {
        let Some(&node) = self.nodes.get(n as usize) else {
            return;
        };
        let mut internal = node.internal;
        let mut j = node.result_base as usize;
        while internal != 0 {
            let pos = internal.trailing_zeros();
            let rl = 31 - pos.leading_zeros();
            let v = u128::from(pos - (1 << rl));
            let p = bits | (v << (128 - d - rl));
            let len = (d + rl) as u8;
            out.extend(
                Ipv6Prefix::from_bits(p, len)
                    .ok()
                    .zip(self.results.get(j).copied()),
            );
            j += 1;
            internal &= internal - 1;
        }
        let mut children = node.children;
        let mut child = node.child_base;
        while children != 0 {
            let c = u128::from(children.trailing_zeros());
            self.collect(child, bits | (c << (122 - d)), d + STRIDE, out);
            child += 1;
            children &= children - 1;
        }
    }

    /// Heap bytes held: the first stage, both arenas (capacity), free lists and the
    /// map of short routes.
    pub fn memory_bytes(&self) -> usize {
        let free: usize = self
            .free_nodes
            .iter()
            .chain(&self.free_results)
            .map(|f| f.capacity() * 4 + size_of::<Vec<u32>>())
            .sum();
        let short: usize = self
            .short
            .iter()
            .map(|m| m.capacity() * (size_of::<(u32, u32)>() + 1) + size_of::<HashMap<u32, u32>>())
            .sum();
        size_of::<Self>()
            + self.direct.len() * size_of::<u64>()
            + self.depth.len()
            + self.nodes.capacity() * size_of::<Node>()
            + self.results.capacity() * 4
            + free
            + short
    }

    /// Sizes, for reports.
    pub fn stats(&self) -> Fib6Stats {
        Fib6Stats {
            routes: self.routes,
            short_routes: self.short_routes,
            nodes: self.live_nodes,
            node_slots: self.nodes.len(),
            results: self.routes - self.short_routes,
            result_slots: self.results.len(),
            memory_bytes: self.memory_bytes(),
        }
    }

    // ---- routes of at most DIRECT_BITS bits: the first stage ----

    /// Adds or replaces a short route: the first-stage entries of its range that hold
    /// no route or a route no longer than it take its value.
    #[expect(
        clippy::indexing_slicing,
        reason = "a map per length up to DIRECT_BITS; a short prefix's range is in the first stage"
    )]
    fn insert_short(&mut self, p: u128, l: u32, v: u32) -> Option<u32> {
        let key = slot_index(p);
        let old = self.short[l as usize].insert(key as u32, v);
        if old.is_none() {
            self.short_routes += 1;
            self.routes += 1;
        }
        if !self.wide.is_empty() && l <= WIDE_MAX {
            self.set_wide(key, l);
            return old;
        }
        let range = key..key + (1 << (DIRECT_BITS - l));
        for (w, depth) in self.direct[range.clone()]
            .iter_mut()
            .zip(&mut self.depth[range])
        {
            let mut slot = Slot::of(*w);
            if slot.value == NONE || u32::from(*depth) <= l {
                slot.value = v;
                *depth = l as u8;
                *w = slot.word();
            }
        }
        old
    }

    /// Sets a sparse table's side entries in the range of the route of length `l` at
    /// first-stage index `key` (added or removed) to the longest route of at most
    /// [`WIDE_MAX`] bits covering each.
    fn set_wide(&mut self, key: usize, l: u32) {
        let first = key >> (DIRECT_BITS - WIDE_MAX);
        for i in first..first + (1 << (WIDE_MAX - l)) {
            let k = (i << (DIRECT_BITS - WIDE_MAX)) as u32;
            let best = (0..=WIDE_MAX).rev().find_map(|cl| {
                let ck = k & !((1u32 << (DIRECT_BITS - cl)) - 1);
                self.short
                    .get(cl as usize)?
                    .get(&ck)
                    .map(|&v| (v, cl as u8))
            });
            if let Some(e) = self.wide.get_mut(i) {
                *e = best.unwrap_or((NONE, 0));
            }
        }
    }

    /// Removes a short route: the entries it owns (its length in its range) fall back
    /// to the longest shorter route covering it, or to none.
    #[expect(
        clippy::indexing_slicing,
        reason = "a map per length up to DIRECT_BITS; a short prefix's range is in the first stage"
    )]
    fn remove_short(&mut self, p: u128, l: u32) -> Option<u32> {
        let key = slot_index(p);
        let old = self.short[l as usize].remove(&(key as u32))?;
        self.short_routes -= 1;
        self.routes -= 1;
        if !self.wide.is_empty() && l <= WIDE_MAX {
            self.set_wide(key, l);
            return Some(old);
        }
        // A sparse table's routes of at most WIDE_MAX bits answer from the side table,
        // never from the slots.
        let lowest = if self.wide.is_empty() {
            0
        } else {
            WIDE_MAX + 1
        };
        let cover = (lowest..l).rev().find_map(|cl| {
            let k = (key as u32) & !((1u32 << (DIRECT_BITS - cl)) - 1);
            self.short[cl as usize].get(&k).map(|&v| (cl, v))
        });
        let range = key..key + (1 << (DIRECT_BITS - l));
        for (w, depth) in self.direct[range.clone()]
            .iter_mut()
            .zip(&mut self.depth[range])
        {
            let mut slot = Slot::of(*w);
            if slot.value != NONE && u32::from(*depth) == l {
                match cover {
                    Some((cl, v)) => {
                        slot.value = v;
                        *depth = cl as u8;
                    }
                    None => slot.value = NONE,
                }
                *w = slot.word();
            }
        }
        Some(old)
    }

    // ---- arena blocks ----

    /// A block of `k` (1 to 64) node slots: a free one of that size, or new ones.
    #[expect(
        clippy::indexing_slicing,
        reason = "`k <= MAX_BLOCK`: there is a free list per block size up to MAX_BLOCK"
    )]
    fn alloc_nodes(&mut self, k: usize) -> u32 {
        if let Some(b) = self.free_nodes[k].pop() {
            self.free_node_slots -= k;
            return b;
        }
        let b = self.nodes.len();
        self.nodes.resize(b + k, Node::default());
        b as u32
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "`k <= MAX_BLOCK`: there is a free list per block size up to MAX_BLOCK"
    )]
    fn free_node_block(&mut self, b: u32, k: usize) {
        if k > 0 {
            self.free_nodes[k].push(b);
            self.free_node_slots += k;
        }
    }

    /// A block of `k` (1 to 63) value slots.
    #[expect(
        clippy::indexing_slicing,
        reason = "`k <= MAX_BLOCK`: there is a free list per block size up to MAX_BLOCK"
    )]
    fn alloc_results(&mut self, k: usize) -> u32 {
        if let Some(b) = self.free_results[k].pop() {
            self.free_result_slots -= k;
            return b;
        }
        let b = self.results.len();
        self.results.resize(b + k, NONE);
        b as u32
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "`k <= MAX_BLOCK`: there is a free list per block size up to MAX_BLOCK"
    )]
    fn free_result_block(&mut self, b: u32, k: usize) {
        if k > 0 {
            self.free_results[k].push(b);
            self.free_result_slots += k;
        }
    }

    /// The child `c` of node `n`, created empty if missing (the children move to a
    /// block one larger).
    #[expect(
        clippy::indexing_slicing,
        reason = "node indexes are live nodes, blocks in `nodes`; value blocks are in `results`"
    )]
    fn child_or_insert(&mut self, n: u32, c: u32) -> u32 {
        let node = self.nodes[n as usize];
        let r = rank(node.children, c);
        if node.children & (1 << c) != 0 {
            return node.child_base + r;
        }
        let k = node.children.count_ones();
        let nb = self.alloc_nodes(k as usize + 1);
        let ob = node.child_base;
        let (ob, nb_, r_, k_) = (ob as usize, nb as usize, r as usize, k as usize);
        self.nodes.copy_within(ob..ob + r_, nb_);
        self.nodes.copy_within(ob + r_..ob + k_, nb_ + r_ + 1);
        self.nodes[nb_ + r_] = Node::default();
        self.free_node_block(ob as u32, k_);
        let node = &mut self.nodes[n as usize];
        node.children |= 1 << c;
        node.child_base = nb;
        self.live_nodes += 1;
        nb + r
    }

    /// Drops the (empty) child `c` of node `n` (the others move to a block one
    /// smaller).
    #[expect(
        clippy::indexing_slicing,
        reason = "node indexes are live nodes, blocks in `nodes`; value blocks are in `results`"
    )]
    fn remove_child(&mut self, n: u32, c: u32) {
        let node = self.nodes[n as usize];
        let (r, k, ob) = (
            rank(node.children, c) as usize,
            node.children.count_ones() as usize,
            node.child_base as usize,
        );
        let nb = if k > 1 {
            let nb = self.alloc_nodes(k - 1) as usize;
            self.nodes.copy_within(ob..ob + r, nb);
            self.nodes.copy_within(ob + r + 1..ob + k, nb + r);
            nb as u32
        } else {
            0
        };
        self.free_node_block(ob as u32, k);
        let node = &mut self.nodes[n as usize];
        node.children &= !(1 << c);
        node.child_base = nb;
        self.live_nodes -= 1;
    }

    /// Sets the value at internal position `pos` of node `n`; returns the one replaced.
    #[expect(
        clippy::indexing_slicing,
        reason = "node indexes are live nodes, blocks in `nodes`; value blocks are in `results`"
    )]
    fn set_result(&mut self, n: u32, pos: u32, v: u32) -> Option<u32> {
        let node = self.nodes[n as usize];
        let r = rank(node.internal, pos) as usize;
        let ob = node.result_base as usize;
        if node.internal & (1 << pos) != 0 {
            return Some(std::mem::replace(&mut self.results[ob + r], v));
        }
        let k = node.internal.count_ones() as usize;
        let nb = self.alloc_results(k + 1);
        let nb_ = nb as usize;
        self.results.copy_within(ob..ob + r, nb_);
        self.results.copy_within(ob + r..ob + k, nb_ + r + 1);
        self.results[nb_ + r] = v;
        self.free_result_block(ob as u32, k);
        let node = &mut self.nodes[n as usize];
        node.internal |= 1 << pos;
        node.result_base = nb;
        None
    }

    /// Clears internal position `pos` (set) of node `n`; returns its value.
    #[expect(
        clippy::indexing_slicing,
        reason = "node indexes are live nodes, blocks in `nodes`; value blocks are in `results`"
    )]
    fn clear_result(&mut self, n: u32, pos: u32) -> u32 {
        let node = self.nodes[n as usize];
        let (r, k, ob) = (
            rank(node.internal, pos) as usize,
            node.internal.count_ones() as usize,
            node.result_base as usize,
        );
        let old = self.results[ob + r];
        let nb = if k > 1 {
            let nb = self.alloc_results(k - 1) as usize;
            self.results.copy_within(ob..ob + r, nb);
            self.results.copy_within(ob + r + 1..ob + k, nb + r);
            nb as u32
        } else {
            0
        };
        self.free_result_block(ob as u32, k);
        let node = &mut self.nodes[n as usize];
        node.internal &= !(1 << pos);
        node.result_base = nb;
        old
    }

    /// Packs the arenas again when free slots outnumber used ones (and a floor).
    fn maybe_compact(&mut self) {
        let used_results = self.results.len() - self.free_result_slots;
        if self.free_node_slots > self.live_nodes.max(COMPACT_MIN)
            || self.free_result_slots > used_results.max(COMPACT_MIN)
        {
            self.compact();
        }
    }

    /// Copies every subtree into new, packed arenas (depth first, children blocks
    /// kept whole), dropping the free lists.
    #[expect(
        clippy::indexing_slicing,
        reason = "`s` < DIRECT_LEN, the first stage's length; a root is a live node"
    )]
    fn compact(&mut self) {
        let mut nodes = Vec::with_capacity(self.live_nodes + 1);
        nodes.push(Node::default());
        let mut results = Vec::with_capacity(self.routes - self.short_routes);
        for s in 0..DIRECT_LEN {
            let root = self.node_at(s);
            if root != 0 {
                let at = nodes.len();
                nodes.push(self.nodes[root as usize]);
                self.copy_subtree(&mut nodes, &mut results, at);
                self.set_node(s, at as u32);
            }
        }
        self.nodes = nodes;
        self.results = results;
        self.free_nodes.iter_mut().for_each(|f| *f = Vec::new());
        self.free_results.iter_mut().for_each(|f| *f = Vec::new());
        self.free_node_slots = 0;
        self.free_result_slots = 0;
    }

    /// Copies the children and values of `nodes[at]` (still pointing into the old
    /// arenas) and, recursively, their subtrees.
    #[expect(
        clippy::indexing_slicing,
        reason = "`at` was pushed; a live node's child and value blocks are in the old arenas"
    )]
    fn copy_subtree(&self, nodes: &mut Vec<Node>, results: &mut Vec<u32>, at: usize) {
        let node = nodes[at];
        let nr = node.internal.count_ones() as usize;
        let rb = if nr > 0 { results.len() } else { 0 };
        let ob = node.result_base as usize;
        results.extend_from_slice(&self.results[ob..ob + nr]);
        let k = node.children.count_ones() as usize;
        let cb = if k > 0 { nodes.len() } else { 0 };
        let ob = node.child_base as usize;
        nodes.extend_from_slice(&self.nodes[ob..ob + k]);
        nodes[at].result_base = rb as u32;
        nodes[at].child_base = cb as u32;
        for i in 0..k {
            self.copy_subtree(nodes, results, cb + i);
        }
    }

    /// Test helper: checks the structural invariants of the module docs and that the
    /// first stage agrees with the short routes.
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        // 0: not accounted for, 1: in use, 2: on a free list.
        fn mark(uses: &mut [u8], start: usize, len: usize, to: u8, what: &str) {
            for u in &mut uses[start..start + len] {
                assert_eq!(*u, 0, "{what}");
                *u = to;
            }
        }
        let mut node_use = vec![0u8; self.nodes.len()];
        let mut result_use = vec![0u8; self.results.len()];
        for (k, list) in self.free_nodes.iter().enumerate() {
            for &b in list {
                mark(&mut node_use, b as usize, k, 2, "free node blocks overlap");
            }
        }
        for (k, list) in self.free_results.iter().enumerate() {
            for &b in list {
                mark(
                    &mut result_use,
                    b as usize,
                    k,
                    2,
                    "free value blocks overlap",
                );
            }
        }
        assert_eq!(node_use[0], 0, "slot 0 is reserved");
        let mut long_routes = 0;
        let mut stack = Vec::new();
        for slot in self.direct.iter().map(|&w| Slot::of(w)) {
            if slot.node != 0 {
                assert_eq!(node_use[slot.node as usize], 0, "root shared or free");
                node_use[slot.node as usize] = 1;
                stack.push((slot.node, DIRECT_BITS));
            }
        }
        while let Some((n, d)) = stack.pop() {
            let node = self.nodes[n as usize];
            assert!(node.internal != 0 || node.children != 0, "empty node kept");
            assert_eq!(node.internal & 1, 0, "position 0 used");
            // Positions of relative length rl exist only up to bit 128.
            for pos in 1..64u32 {
                let rl = 31 - pos.leading_zeros();
                if node.internal & (1 << pos) != 0 {
                    assert!(d + rl <= 128, "prefix past /128");
                }
            }
            assert!(node.children == 0 || d + STRIDE <= 128, "child past /128");
            let nr = node.internal.count_ones() as usize;
            let rb = node.result_base as usize;
            mark(&mut result_use, rb, nr, 1, "value slot shared or free");
            long_routes += nr;
            let k = node.children.count_ones();
            for i in 0..k {
                let child = node.child_base + i;
                assert_ne!(child, 0);
                assert_eq!(node_use[child as usize], 0, "node shared or free");
                node_use[child as usize] = 1;
                stack.push((child, d + STRIDE));
            }
        }
        assert!(node_use[1..].iter().all(|&u| u != 0), "leaked node slot");
        assert!(result_use.iter().all(|&u| u != 0), "leaked value slot");
        let live = node_use.iter().filter(|&&u| u == 1).count();
        assert_eq!(live, self.live_nodes);
        assert_eq!(self.free_node_slots, self.nodes.len() - 1 - live);
        assert_eq!(
            self.free_result_slots,
            self.results.len() - long_routes,
            "free value count"
        );
        assert!(self.live_nodes <= self.max_nodes as usize);
        let short: usize = self.short.iter().map(HashMap::len).sum();
        assert_eq!(short, self.short_routes);
        assert_eq!(self.routes, short + long_routes);
        // The first stage holds the longest short route of each slot.
        let lowest = if self.wide.is_empty() {
            0
        } else {
            WIDE_MAX + 1
        };
        for (i, &(v, l)) in self.wide.iter().enumerate() {
            let k = (i << (DIRECT_BITS - WIDE_MAX)) as u32;
            let want = (0..=WIDE_MAX).rev().find_map(|cl| {
                let ck = k & !((1u32 << (DIRECT_BITS - cl)) - 1);
                self.short[cl as usize].get(&ck).map(|&v| (v, cl as u8))
            });
            assert_eq!(decode(v).map(|v| (v, l)), want, "side entry {i:#x}");
        }
        for (s, slot) in self.direct.iter().map(|&w| Slot::of(w)).enumerate() {
            let want = (lowest..=DIRECT_BITS).rev().find_map(|l| {
                let k = (s as u32) & !((1u32 << (DIRECT_BITS - l)) - 1);
                self.short[l as usize].get(&k).map(|&v| (l as u8, v))
            });
            let got = decode(slot.value).map(|v| (self.depth[s], v));
            assert_eq!(got, want, "first-stage slot {s:#x}");
        }
    }
}
