//! The ingress classifier: `tc flower`-like filters on the dissector's keys, before L2
//! input (where tc's ingress hook sits, after GRO).
//!
//! A packet's [`Key`] packs every field a filter can match into nine 64-bit words, read
//! once per packet through the dissector's readers of what it recorded (`cls-ingress`
//! dissects a frame no stage dissected yet): five for the link, VLAN, IP and L4 fields
//! (IPv4 addresses in word 3), four for the IPv6 addresses. A group whose mask has no
//! IPv6 address bits masks, hashes and compares the first five alone, so IPv4 filters
//! cost what they did before IPv6 keys were added. A filter is a [`Match`] (a masked key, and optionally port
//! ranges, which no mask can express) with a priority, a chain and a list of actions.
//!
//! Classification is tuple-space search, as flower does it: the filters of a chain are
//! grouped by mask (and range shape), one hash table per group keyed by the masked key.
//! Groups are probed in order of their best priority, and the search stops as soon as no
//! later group can hold a better match: the result is the matching filter of lowest
//! priority number in the chain, exactly what a linear walk in priority order gives
//! (checked against one by a property test). A chain without a match passes the packet.
//!
//! Invariants: a `Classifier` is immutable once built (filters are added at build time;
//! counters and policers live in the stage); masks never have bits outside their field;
//! every filter is in exactly one group of its chain.

pub mod action;
pub mod police;
pub mod stage;

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

use netbatch_engine::Meta;

use crate::dissect::{self, Addrs, Dissected};

pub use action::{Action, Control};

/// Words in a [`Key`].
pub const WORDS: usize = 9;

/// Words of a [`Key`] every group masks and hashes; the rest hold IPv6 addresses.
const V4_WORDS: usize = 5;

/// The fields a filter can match, where they sit in a [`Key`]: (word, shift, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Destination MAC address.
    DstMac,
    /// Outermost ethertype (802.1Q or 802.1ad for a tagged frame), tc's `protocol`.
    EthType,
    /// Source MAC address.
    SrcMac,
    /// Outer VLAN id.
    VlanId,
    /// Outer VLAN priority (PCP).
    VlanPrio,
    /// The ethertype after the outer tag, tc's `vlan_ethtype`.
    VlanEthType,
    /// IP protocol.
    IpProto,
    /// IPv4 TOS byte or IPv6 traffic class (DSCP and ECN).
    IpTos,
    /// IPv4 TTL or IPv6 hop limit.
    IpTtl,
    /// ICMP or ICMPv6 type.
    IcmpType,
    /// ICMP or ICMPv6 code.
    IcmpCode,
    /// IPv4 source address.
    SrcIp,
    /// IPv4 destination address.
    DstIp,
    /// IPv6 source address, high 64 bits.
    SrcIp6Hi,
    /// IPv6 source address, low 64 bits.
    SrcIp6Lo,
    /// IPv6 destination address, high 64 bits.
    DstIp6Hi,
    /// IPv6 destination address, low 64 bits.
    DstIp6Lo,
    /// L4 source port.
    SrcPort,
    /// L4 destination port.
    DstPort,
    /// TCP flags (the 12 bits of RFC 9293's control field).
    TcpFlags,
    /// Input port (index).
    InPort,
}

impl Field {
    /// Every field.
    pub const ALL: [Self; 21] = [
        Self::DstMac,
        Self::EthType,
        Self::SrcMac,
        Self::VlanId,
        Self::VlanPrio,
        Self::VlanEthType,
        Self::IpProto,
        Self::IpTos,
        Self::IpTtl,
        Self::IcmpType,
        Self::IcmpCode,
        Self::SrcIp,
        Self::DstIp,
        Self::SrcIp6Hi,
        Self::SrcIp6Lo,
        Self::DstIp6Hi,
        Self::DstIp6Lo,
        Self::SrcPort,
        Self::DstPort,
        Self::TcpFlags,
        Self::InPort,
    ];

    /// (word, shift, width in bits).
    pub const fn place(self) -> (usize, u32, u32) {
        match self {
            Self::DstMac => (0, 16, 48),
            Self::EthType => (0, 0, 16),
            Self::SrcMac => (1, 16, 48),
            Self::VlanPrio => (1, 12, 3),
            Self::VlanId => (1, 0, 12),
            Self::VlanEthType => (2, 48, 16),
            Self::IpProto => (2, 40, 8),
            Self::IpTos => (2, 32, 8),
            Self::IpTtl => (2, 24, 8),
            Self::IcmpType => (2, 16, 8),
            Self::IcmpCode => (2, 8, 8),
            Self::SrcIp => (3, 32, 32),
            Self::DstIp => (3, 0, 32),
            Self::SrcPort => (4, 48, 16),
            Self::DstPort => (4, 32, 16),
            Self::TcpFlags => (4, 16, 12),
            Self::InPort => (4, 0, 16),
            Self::SrcIp6Hi => (5, 0, 64),
            Self::SrcIp6Lo => (6, 0, 64),
            Self::DstIp6Hi => (7, 0, 64),
            Self::DstIp6Lo => (8, 0, 64),
        }
    }

    /// The largest value (and widest mask) of the field.
    pub const fn max(self) -> u64 {
        let (_, _, w) = self.place();
        if w == 64 { u64::MAX } else { (1 << w) - 1 }
    }

    /// tc's name of the field.
    pub const fn name(self) -> &'static str {
        match self {
            Self::DstMac => "dst_mac",
            Self::EthType => "protocol",
            Self::SrcMac => "src_mac",
            Self::VlanId => "vlan_id",
            Self::VlanPrio => "vlan_prio",
            Self::VlanEthType => "vlan_ethtype",
            Self::IpProto => "ip_proto",
            Self::IpTos => "ip_tos",
            Self::IpTtl => "ip_ttl",
            Self::IcmpType => "icmp_type",
            Self::IcmpCode => "icmp_code",
            Self::SrcIp | Self::SrcIp6Hi | Self::SrcIp6Lo => "src_ip",
            Self::DstIp | Self::DstIp6Hi | Self::DstIp6Lo => "dst_ip",
            Self::SrcPort => "src_port",
            Self::DstPort => "dst_port",
            Self::TcpFlags => "tcp_flags",
            Self::InPort => "indev",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The matchable fields of one packet, packed (see [`Field::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Key(pub [u64; WORDS]);

impl core::hash::Hash for Key {
    /// One word: the key's own mix of its words (what the group tables use as is).
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(self.mix());
    }
}

impl Key {
    /// Sets `field` to `v` (cut to its width).
    pub fn set(&mut self, field: Field, v: u64) {
        let (w, s, _) = field.place();
        if let Some(word) = self.0.get_mut(w) {
            *word = (*word & !(field.max() << s)) | ((v & field.max()) << s);
        }
    }

    /// The value of `field`.
    pub fn get(&self, field: Field) -> u64 {
        let (w, s, _) = field.place();
        self.0.get(w).map_or(0, |word| (word >> s) & field.max())
    }

    /// The key masked by `m`.
    #[inline(always)]
    pub fn masked(&self, m: &Self) -> Self {
        self.masked_to(m, m.has_v6())
    }

    /// The key masked by `m`, whose IPv6 address words are all 0 unless `v6` (a group
    /// knows which once, at build time: the IPv4 probe masks five words, not nine).
    #[inline(always)]
    fn masked_to(&self, m: &Self, v6: bool) -> Self {
        let mut k = [0; WORDS];
        for ((o, &a), &b) in k.iter_mut().zip(&self.0).zip(&m.0).take(V4_WORDS) {
            *o = a & b;
        }
        if v6 {
            for ((o, &a), &b) in k.iter_mut().zip(&self.0).zip(&m.0).skip(V4_WORDS) {
                *o = a & b;
            }
        }
        Self(k)
    }

    /// Whether any IPv6 address word is set.
    #[inline(always)]
    fn has_v6(&self) -> bool {
        self.0.iter().skip(V4_WORDS).any(|&w| w != 0)
    }

    /// Sets the IPv6 source and destination address words.
    fn set_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let (s, d) = (u128::from(src), u128::from(dst));
        self.0[5] = (s >> 64) as u64;
        self.0[6] = s as u64;
        self.0[7] = (d >> 64) as u64;
        self.0[8] = d as u64;
    }

    /// The key of a received frame `d` (from its Ethernet header), dissected as `m`
    /// records, read as the kernel's flow dissector reads it for flower: the outer VLAN
    /// tag whatever follows it; IP fields (IPv4's TOS and TTL, IPv6's traffic class and
    /// hop limit, the addresses, the protocol: for IPv6 the upper layer past the extension
    /// headers) only from a header the dissector located the upper layer of; L4 fields
    /// (ports, ICMP or ICMPv6 type and code, TCP flags) only from a packet that is not a
    /// fragment (flower does not parse the first fragment's either), TCP flags only from
    /// a whole TCP header with a data offset of at least 5. Every field is read through
    /// the dissector's readers. Fields the frame does not have are 0.
    #[inline]
    pub fn of(m: &Meta, d: &[u8]) -> Self {
        let mut w = [0u64; WORDS];
        if let Some((dst, src, ethertype)) = dissect::link(d) {
            w[0] = (dst << 16) | u64::from(ethertype);
            w[1] = src << 16;
        }
        if let Some((_, tci, inner)) = dissect::outer_tag(d) {
            let tci = u64::from(tci);
            // Priority and id; the DEI bit is not a key.
            w[1] |= (tci & 0xe000) >> 1 | (tci & 0x0fff);
            w[2] = u64::from(inner.0) << 48;
        }
        w[4] = u64::from(m.in_port);
        let r = Dissected::load(m);
        let Some(ip) = dissect::ip_fields(&r, d) else {
            return Self(w);
        };
        w[2] |= u64::from(ip.proto) << 40 | u64::from(ip.tos) << 32 | u64::from(ip.ttl) << 24;
        let mut k = match ip.addrs {
            Addrs::V4(src, dst) => {
                w[3] = u64::from(u32::from(src)) << 32 | u64::from(u32::from(dst));
                Self(w)
            }
            Addrs::V6(src, dst) => {
                let mut k = Self(w);
                k.set_v6(src, dst);
                k
            }
        };
        if ip.fragment {
            return k;
        }
        if let Some((t, c)) = dissect::icmp_type_code(&r, d, &ip) {
            k.0[2] |= u64::from(t) << 16 | u64::from(c) << 8;
        }
        if let Some(f) = dissect::tcp_control(&r, d, &ip) {
            k.0[4] |= u64::from(f) << 16;
        }
        if let Some((sp, dp)) = dissect::whole_ports(&r, d, &ip) {
            k.0[4] |= u64::from(sp) << 48 | u64::from(dp) << 32;
        }
        k
    }

    /// A hash of the key (for the group tables).
    #[inline(always)]
    fn mix(&self) -> u64 {
        let step = |h: u64, x: u64| (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        let mut h = self.0.iter().take(V4_WORDS).fold(0, |h, &x| step(h, x));
        // Equal keys hash alike: the IPv6 words count when any is set.
        if self.has_v6() {
            h = self.0.iter().skip(V4_WORDS).fold(h, |h, &x| step(h, x));
        }
        h
    }
}

/// An inclusive port range a filter asks for (tc flower's `src_port MIN-MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    /// Lowest.
    pub min: u16,
    /// Highest.
    pub max: u16,
}

impl Range {
    fn holds(&self, v: u64) -> bool {
        (u64::from(self.min)..=u64::from(self.max)).contains(&v)
    }
}

/// What a filter matches: a masked key, and port ranges (the range's field is not in the
/// mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Match {
    /// Values (only the masked bits count).
    pub key: Key,
    /// Which bits of the key count.
    pub mask: Key,
    /// Source port range.
    pub src_range: Option<Range>,
    /// Destination port range.
    pub dst_range: Option<Range>,
}

impl Match {
    /// Matches `field` against `v` under `mask` (cut to the field's width).
    pub fn set(&mut self, field: Field, v: u64, mask: u64) {
        let mut cur = self.mask.get(field);
        cur |= mask & field.max();
        self.mask.set(field, cur);
        self.key.set(field, v & mask);
    }

    /// Whether packet key `k` matches (the slow, obvious way).
    pub fn matches(&self, k: &Key) -> bool {
        k.masked(&self.mask) == self.key.masked(&self.mask) && self.ranges_hold(k)
    }

    #[inline(always)]
    fn ranges_hold(&self, k: &Key) -> bool {
        self.src_range
            .is_none_or(|r| r.holds(k.get(Field::SrcPort)))
            && self
                .dst_range
                .is_none_or(|r| r.holds(k.get(Field::DstPort)))
    }

    /// The group a filter with this match belongs to: its mask and which ranges it has.
    fn shape(&self) -> (Key, bool, bool) {
        (
            self.mask,
            self.src_range.is_some(),
            self.dst_range.is_some(),
        )
    }
}

/// One filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Chain it is in.
    pub chain: u32,
    /// Priority (lower first).
    pub prio: u32,
    /// What it matches.
    pub matches: Match,
    /// What it does, in order.
    pub actions: Vec<Action>,
}

/// What makes two filters the same filter: chain, priority, mask, masked key, ranges.
type FilterId = (u32, u32, Key, Key, Option<Range>, Option<Range>);

/// The filters of one mask group, by masked key; each bucket in priority order.
#[derive(Debug, Clone)]
struct Group {
    mask: Key,
    /// The mask has IPv6 address bits (else the probe masks five words).
    v6: bool,
    ranged: bool,
    /// Best priority in the group.
    best: u32,
    table: hashbrown::HashMap<Key, Vec<u32>, FixedHash>,
}

/// The hasher of the group tables: the key hashes itself.
#[derive(Debug, Clone, Copy, Default)]
struct FixedHash;

impl core::hash::BuildHasher for FixedHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// Takes a [`Key`]'s own mix as its hash (a key hashes itself with one `write_u64`).
#[derive(Debug, Clone, Copy)]
struct KeyHasher(u64);

impl core::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }
}

/// The filters of one chain, as groups probed in priority order.
#[derive(Debug, Clone, Default)]
pub struct ChainTables {
    groups: Vec<Group>,
}

/// A built classifier: the filters, per chain the groups to search, and the policers'
/// buckets (one per police action, shared by every worker as tc's are by every CPU).
#[derive(Debug, Default)]
pub struct Classifier {
    filters: Vec<Filter>,
    chains: hashbrown::HashMap<u32, ChainTables, foldhash::fast::FixedState>,
    policers:
        hashbrown::HashMap<(u32, u8), std::sync::Mutex<police::Bucket>, foldhash::fast::FixedState>,
}

impl Clone for Classifier {
    /// The same filters, with full buckets.
    fn clone(&self) -> Self {
        Self {
            filters: self.filters.clone(),
            chains: self.chains.clone(),
            policers: Self::policers(&self.filters),
        }
    }
}

/// Why filters could not be built into a classifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClsError {
    /// Two filters of one chain share a priority, mask and key (tc: "File exists").
    Duplicate(usize, usize),
    /// A `goto chain` to a chain without filters.
    NoChain(usize, u32),
    /// A filter's `goto chain` goes to its own chain or an earlier one (tc refuses a
    /// jump that could loop only at run time; we refuse it at build time).
    GotoBackwards(usize, u32),
}

impl fmt::Display for ClsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicate(a, b) => write!(
                f,
                "filter {b} repeats filter {a} (same chain, priority and match)"
            ),
            Self::NoChain(i, c) => write!(f, "filter {i} goes to chain {c}, which has no filters"),
            Self::GotoBackwards(i, c) => write!(
                f,
                "filter {i} goes to chain {c}, not after its own: chains may only go forward"
            ),
        }
    }
}

impl std::error::Error for ClsError {}

impl Classifier {
    /// Builds the tables of `filters` (their order is their index, in counters).
    pub fn new(filters: Vec<Filter>) -> Result<Self, ClsError> {
        let mut chains: hashbrown::HashMap<u32, ChainTables, foldhash::fast::FixedState> =
            hashbrown::HashMap::default();
        let mut seen: hashbrown::HashMap<FilterId, usize> = hashbrown::HashMap::default();
        for (i, f) in filters.iter().enumerate() {
            let m = &f.matches;
            let id = (
                f.chain,
                f.prio,
                m.mask,
                m.key.masked(&m.mask),
                m.src_range,
                m.dst_range,
            );
            if let Some(&j) = seen.get(&id) {
                return Err(ClsError::Duplicate(j, i));
            }
            seen.insert(id, i);
            let c = chains.entry(f.chain).or_default();
            let (mask, rs, rd) = m.shape();
            let gi = match c
                .groups
                .iter()
                .position(|g| g.mask == mask && g.ranged == (rs || rd))
            {
                Some(g) => g,
                None => {
                    c.groups.push(Group {
                        mask,
                        v6: mask.has_v6(),
                        ranged: rs || rd,
                        best: f.prio,
                        table: hashbrown::HashMap::default(),
                    });
                    c.groups.len() - 1
                }
            };
            #[expect(
                clippy::indexing_slicing,
                reason = "`gi` is a group's position in `c.groups`, found or just pushed"
            )]
            let g = &mut c.groups[gi];
            g.best = g.best.min(f.prio);
            g.table
                .entry(m.key.masked(&mask))
                .or_default()
                .push(i as u32);
        }
        for c in chains.values_mut() {
            for g in &mut c.groups {
                for b in g.table.values_mut() {
                    b.sort_by_key(|&i| (filters.get(i as usize).map(|f| f.prio), i));
                }
            }
            c.groups.sort_by_key(|g| g.best);
        }
        for (i, f) in filters.iter().enumerate() {
            for a in &f.actions {
                if let Action::Goto(to) = *a {
                    if to <= f.chain {
                        return Err(ClsError::GotoBackwards(i, to));
                    }
                    if !chains.contains_key(&to) {
                        return Err(ClsError::NoChain(i, to));
                    }
                }
            }
        }
        let policers = Self::policers(&filters);
        Ok(Self {
            filters,
            chains,
            policers,
        })
    }

    /// A full bucket for every police action, by (filter, action).
    fn policers(
        filters: &[Filter],
    ) -> hashbrown::HashMap<(u32, u8), std::sync::Mutex<police::Bucket>, foldhash::fast::FixedState>
    {
        let mut m = hashbrown::HashMap::default();
        for (i, f) in filters.iter().enumerate() {
            for (j, a) in f.actions.iter().enumerate() {
                if let Action::Police(p) = *a {
                    m.insert(
                        (i as u32, j as u8),
                        std::sync::Mutex::new(police::Bucket::new(p)),
                    );
                }
            }
        }
        m
    }

    /// What the police action `action` of filter `filter` decides for a packet of
    /// `bytes` at `now_ns` (pass when there is no such policer).
    pub fn police(&self, filter: u32, action: u8, bytes: u64, now_ns: u64) -> Control {
        match self.policers.get(&(filter, action)) {
            Some(b) => b
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .admit(bytes, now_ns),
            None => Control::Pass,
        }
    }

    /// The filters, by index.
    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }

    /// Whether there are no filters.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Mask groups of `chain` (for reports and benchmarks).
    pub fn groups(&self, chain: u32) -> usize {
        self.chains.get(&chain).map_or(0, |c| c.groups.len())
    }

    /// The filter of `chain` that `k` matches with the lowest priority number (ties:
    /// the one given first), if any.
    #[inline]
    pub fn classify(&self, chain: u32, k: &Key) -> Option<u32> {
        self.search(self.chain(chain), k)
    }

    /// The tables of `chain` (a stage looks chain 0 up once per list).
    #[inline]
    pub fn chain(&self, chain: u32) -> Option<&ChainTables> {
        self.chains.get(&chain)
    }

    /// [`Self::classify`] in tables [`Self::chain`] gave.
    #[inline]
    pub fn search(&self, c: Option<&ChainTables>, k: &Key) -> Option<u32> {
        let c = c?;
        let mut best: Option<(u32, u32)> = None;
        for g in &c.groups {
            if best.is_some_and(|(p, _)| p < g.best) {
                break;
            }
            let Some(bucket) = g.table.get(&k.masked_to(&g.mask, g.v6)) else {
                continue;
            };
            for &i in bucket {
                let Some(f) = self.filters.get(i as usize) else {
                    continue;
                };
                if best.is_some_and(|(p, j)| (p, j) <= (f.prio, i)) {
                    break;
                }
                if !g.ranged || f.matches.ranges_hold(k) {
                    best = Some((f.prio, i));
                    break;
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// [`Self::classify`] the obvious way: every filter of the chain in priority order
    /// (the oracle of the property test, and of nothing else).
    pub fn classify_linear(&self, chain: u32, k: &Key) -> Option<u32> {
        self.filters
            .iter()
            .enumerate()
            .filter(|(_, f)| f.chain == chain && f.matches.matches(k))
            .min_by_key(|(i, f)| (f.prio, *i))
            .map(|(i, _)| i as u32)
    }
}

/// An address as key bits.
pub fn ip_bits(a: Ipv4Addr) -> u64 {
    u64::from(u32::from(a))
}

/// An IPv6 address as key bits: its high and low 64 bits ([`Field::SrcIp6Hi`] and
/// [`Field::SrcIp6Lo`], or the destination's).
pub fn ip6_bits(a: Ipv6Addr) -> (u64, u64) {
    let v = u128::from(a);
    ((v >> 64) as u64, v as u64)
}

#[cfg(test)]
mod tests;
