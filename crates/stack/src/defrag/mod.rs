//! Defragmentation before connection tracking, IPv4 and IPv6, as Linux's
//! `nf_defrag_ipv4`/`nf_defrag_ipv6` do for conntrack: the fragments of one datagram
//! are gathered before `ct-in`, so that the datagram is tracked, filtered and
//! translated as one (its L4 header is in the first fragment), and it leaves as the
//! fragments it came as; and reassembly for local delivery, as Linux's `ip_local_deliver`
//! does tracked or not (`ip4-reassemble`/`ip6-reassemble`, the same stage over the same
//! store, behind `ip4-local`/`ip6-local`).
//!
//! Representation (no payload is copied): when the last missing fragment arrives, the
//! datagram goes on as one packet, a *defrag chain*: the first fragment's buffer (offset
//! 0, with the L4 header) is the head, the later fragments' buffers are chained behind
//! it in offset order, each with its own received IP header (`Meta::chain`), and the
//! head carries [`flag::DEFRAG_CHAIN`], `segs` = the number of fragments (wire packets)
//! and `total_len` = the reassembled datagram's length (the head's IP header and every
//! fragment's data). Every stage up to the confirm stages sees the head: the hooks and
//! the tracker read its L4 header, NAT rewrites its addresses, ports and L4 checksum
//! (incrementally: the checksum covers the whole datagram, and what changes is in the
//! head), forwarding its TTL. `ct-confirm` and `ct-confirm-local` then split the chain
//! back into its fragments ([`split`]), copying into each later fragment's header what
//! the head's may have had changed (TOS/traffic class, TTL/hop limit, addresses), so
//! that each leaves as it came, sized as it came (Linux's `frag_max_size`): where one
//! does not fit the egress MTU, `ip4-fragment` fragments it again (a DF-marked one gets
//! fragmentation needed), and an IPv6 one gets Packet Too Big, as Linux does. Local
//! delivery takes the chain whole: the transport stages read the datagram's data over
//! it ([`later_data`]), a socket gets it with the later fragments' headers pulled
//! ([`gather`]), an echo reply leaves split as the request came.
//!
//! The store ([`Store`], one per family in each worker's stage): datagrams keyed as RFC
//! 791 says for IPv4 (source, destination, protocol, identification) and RFC 8200 4.5
//! for IPv6 (source, destination, identification). Bounds, each refusal counted under
//! its reason: buffers held (wire packets, [`Config::max_buffers`]), datagrams in flight
//! ([`Config::max_datagrams`]), fragments per datagram ([`Config::max_fragments`]), a
//! timeout from a datagram's first fragment (Linux's `ipfrag_time`, 30 s, and
//! `ip6frag_time`, 60 s). Overlapping fragments drop the whole datagram (RFC 5722 for
//! IPv6; Linux drops overlapping IPv4 fragments as well); an exact duplicate is dropped
//! alone (RFC 8200 4.5 allows it, Linux does it). Nothing is allocated per packet: the
//! slots and their fragment lists are made at start.

pub mod handoff;
pub mod stage;

use std::collections::HashMap;

use netbatch_engine::{Pkt, Pool, Reason};

use crate::meta::flag;

netbatch_engine::reasons! {
    /// Why defragmentation drops a fragment.
    pub mod reason {
        OVERLAP = "defrag_overlap": "fragment overlapping another of its datagram: the whole datagram dropped (RFC 5722)",
        DUPLICATE = "defrag_duplicate": "exact duplicate of a fragment held",
        TOO_MANY = "defrag_too_many_fragments": "datagram of more fragments than allowed: the whole datagram dropped",
        STORE_FULL = "defrag_store_full": "fragment store at its bound of buffers or datagrams",
        TIMEOUT = "defrag_timeout": "datagram not complete within the reassembly timeout",
        OVERSIZE = "defrag_oversize": "fragment reaching past the largest datagram (65,535 bytes)",
        TINY_FIRST = "defrag_tiny_first": "first fragment without the whole transport header (RFC 1858, RFC 7112)",
        BAD_LENGTH = "defrag_bad_length": "fragment with no data, or not the last and not a multiple of 8 bytes",
        INCONSISTENT = "defrag_inconsistent": "fragments disagreeing on the datagram's end: the whole datagram dropped",
    }
}

/// Settings (`[defrag]`): the bounds of one family's store in each worker, shared by
/// reassembly for local delivery and defragmentation before tracking, as Linux's
/// `ipfrag_*` sysctls bound both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Fragments (buffers, wire packets) one family's store holds per worker (at most an
    /// eighth of the buffer pool: the receive path keeps the rest).
    pub max_buffers: usize,
    /// Datagrams in flight in one family's store per worker.
    pub max_datagrams: usize,
    /// Fragments of one datagram.
    pub max_fragments: usize,
    /// Seconds an IPv4 datagram may take to arrive whole (Linux's `ipfrag_time`).
    pub timeout4: u32,
    /// Seconds an IPv6 datagram may take (Linux's `ip6frag_time`).
    pub timeout6: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_buffers: 1024,
            max_datagrams: 256,
            max_fragments: 64,
            timeout4: 30,
            timeout6: 60,
        }
    }
}

/// A datagram's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Key {
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Identification (IPv4: 16 bits).
    pub id: u32,
    /// IPv4's protocol (0 for IPv6, whose key has none).
    pub proto: u8,
}

/// One fragment as the store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Its datagram.
    pub key: Key,
    /// Offset of its data in the datagram's payload, bytes.
    pub off: u32,
    /// Bytes of data.
    pub len: u32,
    /// More fragments follow.
    pub more: bool,
}

/// What became of a fragment the store was given.
#[derive(Debug)]
pub enum Added {
    /// Held until its datagram is whole.
    Held,
    /// Its datagram is whole: its fragments, in offset order, are in the scratch list;
    /// `end` is its data's length.
    Complete {
        /// Bytes of data (the end of the last fragment).
        end: u32,
    },
    /// Dropped alone (the datagram, if any, is kept).
    Refused(Pkt, Reason),
    /// Dropped with its whole datagram: the datagram's other fragments are in the
    /// scratch list.
    Discarded(Pkt, Reason),
}

/// A fragment held.
#[derive(Debug)]
struct Held {
    off: u32,
    end: u32,
    pkt: Pkt,
}

/// A datagram in flight.
#[derive(Debug, Default)]
struct Slot {
    key: Key,
    /// When its first fragment arrived (ns).
    since: u64,
    /// Its end (payload bytes), once the last fragment came.
    end: Option<u32>,
    /// Data bytes held.
    have: u32,
    /// Fragments, in offset order.
    frags: Vec<Held>,
    live: bool,
}

/// Counters of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams completed.
    pub reassembled: u64,
    /// Fragments in completed datagrams.
    pub fragments: u64,
    /// Datagrams timed out.
    pub timed_out: u64,
    /// Datagrams discarded whole (overlap, too many fragments, inconsistent ends).
    pub discarded: u64,
}

/// The fragments of one family's datagrams in flight, bounded.
#[derive(Debug)]
pub struct Store {
    cfg: Config,
    timeout_ns: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: HashMap<Key, u32>,
    held: usize,
    /// The earliest `since` of a live slot (`u64::MAX` when none).
    oldest: u64,
    /// Counters.
    pub stats: Stats,
}

impl Store {
    /// A store for `cfg` with datagrams timing out after `timeout_s` seconds, allocated
    /// whole now.
    pub fn new(cfg: Config, timeout_s: u32) -> Self {
        let slots = (0..cfg.max_datagrams)
            .map(|_| Slot {
                frags: Vec::with_capacity(cfg.max_fragments),
                ..Slot::default()
            })
            .collect();
        Self {
            cfg,
            timeout_ns: u64::from(timeout_s) * 1_000_000_000,
            slots,
            free: (0..cfg.max_datagrams as u32).rev().collect(),
            index: HashMap::with_capacity(cfg.max_datagrams),
            held: 0,
            oldest: u64::MAX,
            stats: Stats::default(),
        }
    }

    /// Fragments (wire packets) held.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Datagrams in flight.
    pub fn datagrams(&self) -> usize {
        self.index.len()
    }

    /// Frees slot `s`, moving its fragments to `out` in offset order.
    fn release(&mut self, s: u32, out: &mut Vec<Pkt>) {
        let Some(slot) = self.slots.get_mut(s as usize) else {
            return;
        };
        self.index.remove(&slot.key);
        self.held -= slot.frags.len();
        out.extend(slot.frags.drain(..).map(|h| h.pkt));
        slot.live = false;
        self.free.push(s);
    }

    /// Adds fragment `p`, described by `pc`, arrived at `now` (ns). Whatever the store
    /// hands back (a whole datagram, a discarded one) is put in `out`, cleared first.
    pub fn add(&mut self, p: Pkt, pc: Piece, now: u64, out: &mut Vec<Pkt>) -> Added {
        out.clear();
        let end = pc.off + pc.len;
        let s = match self.index.get(&pc.key) {
            Some(&s) => s,
            None => {
                if self.held >= self.cfg.max_buffers {
                    return Added::Refused(p, reason::STORE_FULL);
                }
                let Some(s) = self.free.pop() else {
                    return Added::Refused(p, reason::STORE_FULL);
                };
                let Some(slot) = self.slots.get_mut(s as usize) else {
                    return Added::Refused(p, reason::STORE_FULL);
                };
                *slot = Slot {
                    key: pc.key,
                    since: now,
                    end: None,
                    have: 0,
                    frags: core::mem::take(&mut slot.frags),
                    live: true,
                };
                self.index.insert(pc.key, s);
                self.oldest = self.oldest.min(now);
                s
            }
        };
        let Some(slot) = self.slots.get_mut(s as usize) else {
            return Added::Refused(p, reason::STORE_FULL);
        };
        // Where it goes: before the first fragment starting at or after it.
        let at = slot.frags.partition_point(|h| h.off < pc.off);
        if slot
            .frags
            .get(at)
            .is_some_and(|h| h.off == pc.off && h.end == end)
        {
            return Added::Refused(p, reason::DUPLICATE);
        }
        let past_end = if pc.more {
            slot.end.is_some_and(|e| end > e)
        } else {
            slot.end.is_some_and(|e| e != end) || slot.frags.last().is_some_and(|h| h.end > end)
        };
        let why = if past_end {
            // Two ends, or data past the end (RFC 791's total length, RFC 8200's
            // payload length of the last fragment, disagree).
            Some(reason::INCONSISTENT)
        } else if at
            .checked_sub(1)
            .and_then(|i| slot.frags.get(i))
            .is_some_and(|h| h.end > pc.off)
            || slot.frags.get(at).is_some_and(|h| h.off < end)
        {
            Some(reason::OVERLAP)
        } else if slot.frags.len() >= self.cfg.max_fragments {
            Some(reason::TOO_MANY)
        } else if self.held >= self.cfg.max_buffers {
            return Added::Refused(p, reason::STORE_FULL);
        } else {
            None
        };
        if let Some(r) = why {
            self.stats.discarded += 1;
            self.release(s, out);
            return Added::Discarded(p, r);
        }
        slot.frags.insert(
            at,
            Held {
                off: pc.off,
                end,
                pkt: p,
            },
        );
        slot.have += pc.len;
        if !pc.more {
            slot.end = Some(end);
        }
        self.held += 1;
        // Whole: the end is known and the data, which no two fragments share, fills it.
        if slot.end == Some(slot.have) {
            let end = slot.have;
            self.stats.reassembled += 1;
            self.stats.fragments += slot.frags.len() as u64;
            self.release(s, out);
            return Added::Complete { end };
        }
        Added::Held
    }

    /// Takes out the next datagram begun before `now - timeout`, its fragments in `out`
    /// (cleared first) in offset order; whether its first fragment was among them is
    /// then `out`'s first fragment's offset being 0 (the caller reads it). `None` when
    /// none is due.
    pub fn expire_one(&mut self, now: u64, out: &mut Vec<Pkt>) -> Option<bool> {
        out.clear();
        if self.index.is_empty() {
            self.oldest = u64::MAX;
            return None;
        }
        if now < self.oldest.saturating_add(self.timeout_ns) {
            return None;
        }
        let due = self
            .slots
            .iter()
            .position(|s| s.live && now >= s.since.saturating_add(self.timeout_ns))?;
        let first = self
            .slots
            .get(due)
            .and_then(|s| s.frags.first())
            .is_some_and(|h| h.off == 0);
        self.stats.timed_out += 1;
        self.release(due as u32, out);
        self.oldest = self
            .slots
            .iter()
            .filter(|s| s.live)
            .map(|s| s.since)
            .min()
            .unwrap_or(u64::MAX);
        Some(first)
    }

    /// Gives every fragment held to `out` (a stage going away).
    pub fn drain(&mut self, out: &mut Vec<Pkt>) {
        for s in 0..self.slots.len() as u32 {
            if self.slots.get(s as usize).is_some_and(|x| x.live) {
                let mut v = Vec::new();
                self.release(s, &mut v);
                out.append(&mut v);
            }
        }
        self.oldest = u64::MAX;
    }
}

/// Chains the fragments of a whole datagram (`frags`, in offset order, the first at
/// offset 0; emptied) behind the first, which it returns: `segs` the number of
/// fragments, `total_len` `datagram_len` (the head's IP header and the datagram's data),
/// [`flag::DEFRAG_CHAIN`] set.
pub fn chain(pool: &Pool, frags: &mut Vec<Pkt>, datagram_len: u32) -> Option<Pkt> {
    let n = frags.len();
    let mut next: Option<Pkt> = None;
    while frags.len() > 1 {
        let mut q = frags.pop()?;
        pool.get_mut(&mut q).meta.chain = next.take();
        next = Some(q);
    }
    let mut head = frags.pop()?;
    let m = pool.get_mut(&mut head).meta;
    m.chain = next;
    m.segs = n as u16;
    m.total_len = datagram_len;
    m.flags |= flag::DEFRAG_CHAIN;
    Some(head)
}

/// The bytes of the IP header a later fragment takes from its head when a chain is
/// split: (start, end) ranges of the fixed header, per family.
const COPIED4: [(usize, usize); 3] = [(1, 2), (8, 9), (12, 20)];
const COPIED6: [(usize, usize); 2] = [(0, 4), (7, 40)];

/// Splits the defrag chain `p` (a head with [`flag::DEFRAG_CHAIN`]) into its fragments,
/// pushed to `out` in order, head first: each later fragment gets the head's TOS or
/// traffic class and flow label, TTL or hop limit and addresses (what the stages may
/// have changed on the head; IPv4's header checksum recomputed), and the head's
/// routing, marks and tracking; the head becomes a plain packet again. A packet without
/// the flag is pushed as it is.
pub fn split(pool: &Pool, mut p: Pkt, out: &mut Vec<Pkt>) {
    let v = pool.get_mut(&mut p);
    if v.meta.flags & flag::DEFRAG_CHAIN == 0 {
        out.push(p);
        return;
    }
    v.meta.flags &= !flag::DEFRAG_CHAIN;
    v.meta.segs = 1;
    // A plain packet's total is its buffer's (what `truncate` and the ports expect).
    v.meta.total_len = u32::from(v.meta.len);
    let mut next = v.meta.chain.take();
    let keep = flag::VLAN | flag::QINQ | flag::FRAG6 | flag::FRAG6_LATER | flag::RESERVED;
    let m = &*v.meta;
    let (flags, out_if, adj, mark, hash) = (m.flags, m.out_if, m.adj, m.mark, m.hash);
    let six = v.data().first().is_some_and(|b| b >> 4 == 6);
    let mut hdr = [0u8; 40];
    let n = if six { 40 } else { 20 };
    if let (Some(h), Some(d)) = (hdr.get_mut(..n), v.data().get(..n)) {
        h.copy_from_slice(d);
    }
    out.push(p);
    while let Some(mut q) = next {
        let mut w = pool.get_mut(&mut q);
        next = w.meta.chain.take();
        w.meta.flags = (w.meta.flags & keep) | (flags & !keep);
        (w.meta.out_if, w.meta.adj, w.meta.mark, w.meta.hash) = (out_if, adj, mark, hash);
        let d = w.data_mut();
        let copied: &[(usize, usize)] = if six { &COPIED6 } else { &COPIED4 };
        for &(a, b) in copied {
            if let (Some(to), Some(from)) = (d.get_mut(a..b), hdr.get(a..b)) {
                to.copy_from_slice(from);
            }
        }
        if !six {
            let ihl = d.first().map_or(20, |b| usize::from(b & 0x0f) * 4);
            if let Some(h) = d.get_mut(..ihl) {
                netbatch_wire::ipv4::Ipv4Packet::new_unchecked(h).fill_checksum();
            }
        }
        out.push(q);
    }
}

/// Where the data of fragment `d` (from its IP header) starts: after the IPv4 header,
/// or after the IPv6 Fragment header the extension header walk finds. `None` for a
/// packet laid out as no fragment is (the store holds none such).
pub fn data_at(d: &[u8]) -> Option<usize> {
    let first = *d.first()?;
    if first >> 4 == 6 {
        let ip = netbatch_wire::ipv6::Ipv6Packet::new_checked(d).ok()?;
        let f = crate::dissect::ip6_walk(&ip).ok()?.fragment?;
        Some(f.at + netbatch_wire::ipv6ext::FRAGMENT_HEADER_LEN).filter(|&n| n <= d.len())
    } else {
        Some(usize::from(first & 0x0f) * 4).filter(|&n| n >= 20 && n <= d.len())
    }
}

/// The data of the later fragments of the defrag chain whose head is `p`, in offset
/// order (their IP headers, and IPv6 Fragment headers, left out; nothing copied). The
/// head's own data is the caller's (it knows where its transport header starts).
pub fn later_data<'a>(pool: &'a Pool, p: &'a Pkt) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut next = pool.get(p).meta.chain.as_ref();
    core::iter::from_fn(move || {
        let v = pool.get(next?);
        next = v.meta.chain.as_ref();
        let d = v.data();
        Some(data_at(d).and_then(|at| d.get(at..)).unwrap_or_default())
    })
}

/// Turns the defrag chain `p` into the form a socket reads, as a GRO super-datagram's
/// continuation buffers are: each later fragment's headers pulled so that its buffer
/// holds only its data; the head keeps its headers and `total_len` (the datagram's
/// length). Once gathered the chain can no longer be split. `false` (nothing changed
/// past the failing buffer) for a later fragment laid out as none the store holds.
pub fn gather(pool: &Pool, p: &mut Pkt) -> bool {
    let mut next = pool.get_mut(p).meta.chain.as_mut();
    while let Some(q) = next {
        let mut w = pool.get_mut(q);
        let Some(at) = data_at(w.data()) else {
            return false;
        };
        if !w.pull(at) {
            return false;
        }
        next = w.meta.chain.as_mut();
    }
    true
}

#[cfg(test)]
mod tests;
