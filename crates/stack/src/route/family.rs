//! Address families: what the route table needs to know of IPv4 and IPv6 to hold either
//! (the address and prefix types, the bits a FIB indexes, the FIB itself). The table's
//! logic (adjacencies, multipath groups, our own addresses) is written once over a
//! [`Family`]; each family's FIB is its own (DIR-24-8 for IPv4, a tree bitmap for IPv6).

use core::fmt::{Debug, Display};
use core::hash::Hash;
use core::net::{Ipv4Addr, Ipv6Addr};

use crate::fib::Table;
use crate::fib6::{Fib6, Ipv6Prefix};
use crate::prefix::Ipv4Prefix;

/// An address family the route table can hold.
pub trait Family:
    Copy + Clone + Debug + Default + PartialEq + Eq + Hash + Send + Sync + 'static
{
    /// An address.
    type Addr: Copy + Eq + Hash + Ord + Debug + Display + Send + Sync;
    /// An address as the FIB indexes it (0 is the unspecified address).
    type Bits: Copy
        + Eq
        + Hash
        + Ord
        + Debug
        + Default
        + Send
        + Sync
        + core::ops::BitAnd<Output = Self::Bits>
        + core::ops::Not<Output = Self::Bits>;
    /// A prefix (no host bits).
    type Prefix: Copy + Eq + Hash + Ord + Debug + Display + Send + Sync;
    /// The longest-prefix-match table, prefix → value.
    type Fib: Clone + Send + Sync;

    /// The family's name as `ip route` says it (`inet`, `inet6`).
    const NAME: &'static str;
    /// The bits of the packet's TOS byte (IPv4) or traffic class (IPv6) a policy rule's
    /// `tos` is compared with, and the only bits such a rule may set (Linux 6.x: IPv4
    /// rules compare the three bits of the old TOS field, `IPTOS_RT_MASK`, IPv6 rules the
    /// whole DSCP; the ECN bits never).
    const RULE_TOS_MASK: u8;
    /// Linux's default policy rules, `(pref, table)`: both families look up `local` at 0
    /// and `main` at 32766; IPv4 also looks up `default` at 32767.
    const DEFAULT_RULES: &'static [(u32, u32)];
    /// The bits of address `a`.
    fn bits(a: Self::Addr) -> Self::Bits;
    /// The address of bits `b`.
    fn addr(b: Self::Bits) -> Self::Addr;
    /// The length of prefix `p`.
    fn prefix_len(p: &Self::Prefix) -> u8;
    /// The address bits of prefix `p`.
    fn prefix_bits(p: &Self::Prefix) -> Self::Bits;
    /// Whether `p` is a host route (/32, /128).
    fn is_host(p: &Self::Prefix) -> bool;
    /// The host route of bits `b`.
    fn host(b: Self::Bits) -> Self::Prefix;
    /// Spreads bits `b` over 32 bits (for the filter of our own addresses).
    fn spread(b: Self::Bits) -> u32;
    /// An empty FIB.
    fn fib_new() -> Self::Fib;
    /// An empty FIB for a table expected to stay small (a VRF's or a numbered one):
    /// IPv4's compact DIR-24-8 ([`crate::fib::Fib::compact`]); IPv6's tree as any.
    fn fib_compact() -> Self::Fib;
    /// Inserts or replaces `p` → `v`.
    fn fib_insert(f: &mut Self::Fib, p: &Self::Prefix, v: u32) -> Result<(), String>;
    /// Removes exactly `p`.
    fn fib_remove(f: &mut Self::Fib, p: &Self::Prefix);
    /// Replaces every route, in bulk.
    fn fib_load(f: &mut Self::Fib, routes: Vec<(Self::Prefix, u32)>) -> Result<(), String>;
    /// Longest-prefix match.
    fn fib_lookup(f: &Self::Fib, b: Self::Bits) -> Option<u32>;
    /// Longest-prefix match, with the length of the prefix matched.
    fn fib_lookup_len(f: &Self::Fib, b: Self::Bits) -> Option<(u32, u8)>;
    /// Whether prefix `p` covers address bits `b`.
    fn prefix_contains(p: &Self::Prefix, b: Self::Bits) -> bool;
    /// Bytes the FIB uses.
    fn fib_bytes(f: &Self::Fib) -> usize;
    /// How the table's first level is backed, and its bytes in huge pages now.
    fn fib_pages(f: &Self::Fib) -> (netbatch_engine::Backing, Option<u64>);
}

/// IPv4.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct V4;

/// IPv6.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct V6;

impl Family for V4 {
    type Addr = Ipv4Addr;
    type Bits = u32;
    type Prefix = Ipv4Prefix;
    type Fib = Table;
    const NAME: &'static str = "inet";
    const RULE_TOS_MASK: u8 = 0x1c;
    const DEFAULT_RULES: &'static [(u32, u32)] = &[(0, 255), (32766, 254), (32767, 253)];

    #[inline(always)]
    fn bits(a: Ipv4Addr) -> u32 {
        u32::from(a)
    }
    #[inline(always)]
    fn addr(b: u32) -> Ipv4Addr {
        Ipv4Addr::from(b)
    }
    fn prefix_len(p: &Ipv4Prefix) -> u8 {
        p.prefix_len()
    }
    fn prefix_bits(p: &Ipv4Prefix) -> u32 {
        p.bits()
    }
    fn is_host(p: &Ipv4Prefix) -> bool {
        p.prefix_len() == 32
    }
    fn host(b: u32) -> Ipv4Prefix {
        Ipv4Prefix::truncating(Ipv4Addr::from(b), 32)
    }
    #[inline(always)]
    fn spread(b: u32) -> u32 {
        b
    }
    fn fib_new() -> Table {
        Table::new()
    }
    fn fib_compact() -> Table {
        Table::compact()
    }
    fn fib_insert(f: &mut Table, p: &Ipv4Prefix, v: u32) -> Result<(), String> {
        f.insert(p.bits(), p.prefix_len(), v)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn fib_remove(f: &mut Table, p: &Ipv4Prefix) {
        f.remove(p.bits(), p.prefix_len());
    }
    fn fib_load(f: &mut Table, routes: Vec<(Ipv4Prefix, u32)>) -> Result<(), String> {
        f.bulk_load(
            routes
                .into_iter()
                .map(|(p, v)| (p.bits(), p.prefix_len(), v)),
        )
        .map_err(|e| e.to_string())
    }
    #[inline(always)]
    fn fib_lookup(f: &Table, b: u32) -> Option<u32> {
        f.lookup(b)
    }
    #[inline(always)]
    fn fib_lookup_len(f: &Table, b: u32) -> Option<(u32, u8)> {
        f.lookup_len(b)
    }
    #[inline(always)]
    fn prefix_contains(p: &Ipv4Prefix, b: u32) -> bool {
        p.contains_bits(b)
    }
    fn fib_bytes(f: &Table) -> usize {
        f.memory_bytes()
    }

    fn fib_pages(f: &Table) -> (netbatch_engine::Backing, Option<u64>) {
        f.fib().pages()
    }
}

impl Family for V6 {
    type Addr = Ipv6Addr;
    type Bits = u128;
    type Prefix = Ipv6Prefix;
    type Fib = Fib6;
    const NAME: &'static str = "inet6";
    const RULE_TOS_MASK: u8 = 0xfc;
    const DEFAULT_RULES: &'static [(u32, u32)] = &[(0, 255), (32766, 254)];

    #[inline(always)]
    fn bits(a: Ipv6Addr) -> u128 {
        u128::from(a)
    }
    #[inline(always)]
    fn addr(b: u128) -> Ipv6Addr {
        Ipv6Addr::from(b)
    }
    fn prefix_len(p: &Ipv6Prefix) -> u8 {
        p.prefix_len()
    }
    fn prefix_bits(p: &Ipv6Prefix) -> u128 {
        p.bits()
    }
    fn is_host(p: &Ipv6Prefix) -> bool {
        p.prefix_len() == 128
    }
    fn host(b: u128) -> Ipv6Prefix {
        Ipv6Prefix::host(Ipv6Addr::from(b))
    }
    #[inline(always)]
    fn spread(b: u128) -> u32 {
        // The interface identifier varies most between one node's addresses.
        (b as u32) ^ ((b >> 32) as u32) ^ ((b >> 64) as u32) ^ ((b >> 96) as u32)
    }
    fn fib_new() -> Fib6 {
        Fib6::new()
    }
    fn fib_compact() -> Fib6 {
        Fib6::sparse()
    }
    fn fib_insert(f: &mut Fib6, p: &Ipv6Prefix, v: u32) -> Result<(), String> {
        f.insert(*p, v).map(|_| ()).map_err(|e| e.to_string())
    }
    fn fib_remove(f: &mut Fib6, p: &Ipv6Prefix) {
        f.remove(*p);
    }
    fn fib_load(f: &mut Fib6, routes: Vec<(Ipv6Prefix, u32)>) -> Result<(), String> {
        f.bulk_load(routes).map_err(|e| e.to_string())
    }
    #[inline(always)]
    fn fib_lookup(f: &Fib6, b: u128) -> Option<u32> {
        f.lookup(b)
    }
    #[inline(always)]
    fn fib_lookup_len(f: &Fib6, b: u128) -> Option<(u32, u8)> {
        f.lookup_len(b)
    }
    #[inline(always)]
    fn prefix_contains(p: &Ipv6Prefix, b: u128) -> bool {
        p.contains_bits(b)
    }
    fn fib_bytes(f: &Fib6) -> usize {
        f.memory_bytes()
    }

    fn fib_pages(_: &Fib6) -> (netbatch_engine::Backing, Option<u64>) {
        // The IPv6 table's first level is 64 Ki slots, less than a huge page.
        (netbatch_engine::Backing::Small, Some(0))
    }
}
