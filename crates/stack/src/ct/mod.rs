//! Connection tracking, as Linux's nf_conntrack: an entry per connection holding both
//! directions' tuples, its state, status bits and mark, in a bounded table of its own
//! per worker ([`table`]), and trackers per protocol ([`tcp`], [`udp`], [`icmp`]; other
//! protocols as Linux's generic tracker: by addresses and protocol).
//!
//! Where it runs (the stages in [`stage`]): `ct-in` after `ip4-input`/`ip6-input` and
//! before the PREROUTING hook (Linux's conntrack at NF_IP_PRI_CONNTRACK on
//! PREROUTING), `ct-out` after `ip4-local-out`/`ip6-local-out` and before the OUTPUT
//! hook; `ct-confirm` after the POSTROUTING hook and `ct-confirm-local` after the INPUT
//! hook link a new connection's entry into the table only when its first packet got
//! that far (Linux's confirm at the last hook): a packet a rule drops leaves no entry.
//! They are in the graph only when conntrack is configured or a rule asks about it.
//!
//! What a packet learns is in its flags ([`crate::meta::flag::CT_TRACKED`], its state
//! [`CtState`] and direction) and, for the rules that read the entry (`ct status`,
//! `ct mark`), in the worker's table of which entry each buffer is attached to
//! ([`ConnTrack::attached`]), indexed by buffer: the metadata line is full.
//!
//! Bounds: `max` entries per worker, allocated at start; a full table evicts an
//! unassured entry (Linux's `early_drop`) or refuses the new connection, counted
//! (`ct_table_full`). Invalid packets are not dropped here: they go on marked invalid
//! (for `ct state invalid` rules), each counted under its reason ([`Invalid`]).

pub mod icmp;
pub mod offload;
pub mod stage;
pub mod table;
pub mod tcp;
pub mod timeouts;
pub mod tuple;
pub mod udp;

use netbatch_wire::bytes::get_u16;
use netbatch_wire::tcp::TcpPacket;

pub use table::{Entry, Refusal, Table, TableStats, status};
pub use tcp::{TcpConfig, TcpState};
pub use timeouts::Timeouts;
pub use tuple::Tuple;

use crate::dissect::{self, Addrs, Dissected, L4};
use crate::meta::flag;

/// A packet's connection state as the rules see it (nftables' `ct state`; in the
/// packet's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CtState {
    /// The first packets of a connection, in its original direction, before any reply.
    New = 0,
    /// A connection that has seen packets both ways (either direction).
    Established = 1,
    /// An ICMP error about a tracked connection.
    Related = 2,
    /// Not a valid packet of any connection.
    Invalid = 3,
}

/// `ct state` as a set of bits, nftables' (new, established, related, invalid,
/// untracked).
pub mod state_bit {
    /// `new`.
    pub const NEW: u8 = 1 << 0;
    /// `established`.
    pub const ESTABLISHED: u8 = 1 << 1;
    /// `related`.
    pub const RELATED: u8 = 1 << 2;
    /// `invalid`.
    pub const INVALID: u8 = 1 << 3;
    /// `untracked`: no conntrack stage saw the packet, or one left it untracked
    /// (ICMPv6 neighbour discovery).
    pub const UNTRACKED: u8 = 1 << 4;
    /// The names, in bit order.
    pub const NAMES: [&str; 5] = ["new", "established", "related", "invalid", "untracked"];
}

/// The `ct state` bit of a packet with `flags`.
#[inline(always)]
pub fn state_of(flags: u32) -> u8 {
    if flags & flag::CT_TRACKED == 0 {
        state_bit::UNTRACKED
    } else {
        1 << ((flags & flag::CT_STATE) >> flag::CT_STATE_SHIFT)
    }
}

/// Why a packet is invalid (each counted; nftables sees `ct state invalid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// TCP's reasons.
    Tcp(tcp::Invalid),
    /// An ICMP error quoting no tracked connection.
    IcmpOrphan,
    /// An ICMP message that can start nothing (an answer without its request, a type
    /// Linux does not track).
    IcmpNew,
    /// A fragment not made whole before tracking (only where defragmentation is not in
    /// front: `ct-out`, or a fragment of a datagram this host sends).
    Fragment,
    /// Headers cut short.
    Truncated,
}

impl Invalid {
    /// Counter names, in [`Invalid::slot`] order.
    pub const NAMES: [&str; 12] = [
        "tcp_invalid_flags",
        "tcp_invalid_new",
        "tcp_invalid_state",
        "tcp_seq_over_window",
        "tcp_seq_under_window",
        "tcp_ack_over_sent",
        "tcp_ack_under_window",
        "tcp_rst_bad_ack",
        "icmp_error_no_connection",
        "icmp_cannot_start",
        "fragment_not_reassembled",
        "truncated",
    ];

    /// Its counter slot.
    pub fn slot(self) -> usize {
        match self {
            Self::Tcp(t) => tcp::Invalid::ALL.iter().position(|&x| x == t).unwrap_or(0),
            Self::IcmpOrphan => 8,
            Self::IcmpNew => 9,
            Self::Fragment => 10,
            Self::Truncated => 11,
        }
    }

    /// Its counter name.
    pub fn name(self) -> &'static str {
        Self::NAMES.get(self.slot()).copied().unwrap_or("invalid")
    }
}

/// Settings (the `[conntrack]` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Entries per worker's table.
    pub max: usize,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// TCP's settings.
    pub tcp: TcpConfig,
    /// Hash seed (fixed: tables are laid out the same on every run).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max: 65_536,
            timeouts: Timeouts::default(),
            tcp: TcpConfig::default(),
            seed: 0x6e62_6374_2d73_6565,
        }
    }
}

/// What a packet is to the tracker, read once from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A TCP segment.
    Tcp(tcp::Segment),
    /// A datagram protocol with ports (UDP, UDP-Lite, SCTP).
    Datagram,
    /// An ICMP query or answer.
    IcmpQuery,
    /// An ICMP error and the tuple of the packet it quotes.
    IcmpError(Option<Tuple>),
    /// Another protocol: by addresses and protocol.
    Generic,
    /// Left untracked.
    Untracked,
    /// Invalid before any lookup.
    Invalid(Invalid),
}

/// A packet as the tracker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Its tuple.
    pub tuple: Tuple,
    /// What it is.
    pub kind: Kind,
    /// Wire packets it stands for (a super-packet's segments).
    pub wire: u64,
    /// Bytes (over the chain).
    pub bytes: u64,
}

impl Seen {
    /// Reads the IP packet whose metadata is `m` and data `d` (from its IP header, as
    /// after `eth-input`, or a packet this host made).
    #[inline(always)]
    pub fn read(m: &netbatch_engine::Meta, d: &[u8]) -> Self {
        // The common datagram: an IPv4 flow with ports, not a fragment.
        if let Some(f) = dissect::flow4_of(m, d)
            && L4::of(f.proto) != L4::Tcp
        {
            return Self {
                tuple: Tuple {
                    src: u128::from(f.src),
                    dst: u128::from(f.dst),
                    sport: f.sport,
                    dport: f.dport,
                    proto: f.proto,
                    v6: false,
                },
                kind: Kind::Datagram,
                wire: m.wire_packets(),
                bytes: m.packet_len() as u64,
            };
        }
        Self::read_any(m, d)
    }

    /// [`Seen::read`] of any packet: out of line, so that the common datagram's read
    /// stays small where it is inlined.
    #[inline(never)]
    fn read_any(m: &netbatch_engine::Meta, d: &[u8]) -> Self {
        let r = Dissected::load(m);
        let wire = m.wire_packets();
        let bytes = m.packet_len() as u64;
        let mut seen = Self {
            tuple: Tuple::default(),
            kind: Kind::Untracked,
            wire,
            bytes,
        };
        let Some(ip) = dissect::ip_fields(&r, d) else {
            seen.kind = Kind::Invalid(Invalid::Truncated);
            return seen;
        };
        let (v6, src, dst) = match ip.addrs {
            Addrs::V4(s, d) => (false, u128::from(u32::from(s)), u128::from(u32::from(d))),
            Addrs::V6(s, d) => (true, u128::from(s), u128::from(d)),
        };
        seen.tuple = Tuple {
            src,
            dst,
            sport: 0,
            dport: 0,
            proto: ip.proto,
            v6,
        };
        // A datagram `ip4-defrag`/`ip6-defrag` made whole is tracked on its first
        // fragment, which holds its L4 header; any other fragment cannot be.
        if ip.fragment && m.flags & flag::DEFRAG_CHAIN == 0 {
            seen.kind = Kind::Invalid(Invalid::Fragment);
            return seen;
        }
        let l4 = usize::from(r.l4);
        let Some(h) = d.get(l4..) else {
            seen.kind = Kind::Invalid(Invalid::Truncated);
            return seen;
        };
        seen.kind = match L4::of(ip.proto) {
            L4::Tcp => {
                let doff = h.get(12).map_or(0, |b| usize::from(b >> 4) * 4);
                let hdr = (m.l4.wrapping_sub(m.data) as usize).saturating_add(doff);
                let len = (m.packet_len().saturating_sub(hdr)) as u32;
                match (tcp::Segment::read(h, len), TcpPacket::new_checked(h).ok()) {
                    (Some(s), Some(t)) => {
                        seen.tuple.sport = t.src_port();
                        seen.tuple.dport = t.dst_port();
                        Kind::Tcp(s)
                    }
                    _ => Kind::Invalid(Invalid::Truncated),
                }
            }
            L4::Udp | L4::UdpLite | L4::Sctp => match h.first_chunk::<4>() {
                Some(p) => {
                    seen.tuple.sport = get_u16(p, 0);
                    seen.tuple.dport = get_u16(p, 2);
                    Kind::Datagram
                }
                None => Kind::Invalid(Invalid::Truncated),
            },
            L4::Icmp | L4::Icmpv6 => match h.first_chunk::<8>() {
                Some(ih) => {
                    let (t, c) = (ih[0], ih[1]);
                    match icmp::class(v6, t) {
                        icmp::Class::Query => {
                            seen.tuple.sport = get_u16(ih, 4);
                            seen.tuple.dport = u16::from(t) << 8 | u16::from(c);
                            Kind::IcmpQuery
                        }
                        icmp::Class::Error => {
                            let q = h.get(8..).unwrap_or_default();
                            Kind::IcmpError(if v6 {
                                icmp::quoted6(q)
                            } else {
                                icmp::quoted4(q)
                            })
                        }
                        icmp::Class::Untracked => Kind::Untracked,
                        icmp::Class::Other => Kind::Invalid(Invalid::IcmpNew),
                    }
                }
                None => Kind::Invalid(Invalid::Truncated),
            },
            L4::Other => Kind::Generic,
        };
        seen
    }
}

/// What tracking found for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A new connection: entry `idx`, allocated and not confirmed.
    New(u32),
    /// A packet of connection `idx` in direction `dir` (state new until a reply was
    /// seen, established after).
    Known {
        /// The entry.
        idx: u32,
        /// 0: original, 1: reply.
        dir: usize,
        /// The connection has seen a reply.
        replied: bool,
    },
    /// An ICMP error about connection `idx`, travelling in direction `dir`.
    Related {
        /// The entry.
        idx: u32,
        /// Its direction.
        dir: usize,
    },
    /// Invalid.
    Invalid(Invalid),
    /// Not tracked.
    Untracked,
    /// A new connection refused: the table is full.
    Refused(Refusal),
}

/// Counters of what tracking found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtStats {
    /// Packets (wire) by what they were: new, established, related, invalid, untracked.
    pub by_state: [u64; 5],
    /// Invalid packets (wire) by reason ([`Invalid::NAMES`]).
    pub invalid: [u64; 12],
    /// TCP segments the state machine ignored (accepted, state unchanged).
    pub tcp_ignored: u64,
    /// TCP connections reopened from TIME_WAIT or CLOSE by a new SYN.
    pub tcp_reopened: u64,
    /// Packets that reused the previous packet's lookup (a run of one flow).
    pub run_hits: u64,
}

/// A worker's connection tracking: its table, settings and which entry each buffer is
/// attached to.
#[derive(Debug, Clone)]
pub struct ConnTrack {
    /// The table.
    pub table: Table,
    /// Settings.
    pub cfg: Config,
    /// `attached[buffer index]`: the entry (low 32 bits) and its generation (high) the
    /// buffer's packet belongs to, meaningful while the packet carries
    /// `flag::CT_TRACKED` with an entry (new, established or related).
    attached: Vec<u64>,
    /// The last lookup of this list: tuple, entry, direction.
    hint: Option<(Tuple, u32, usize)>,
    /// Counters.
    pub stats: CtStats,
    /// NAT's counters ([`crate::nat`]: its stages work on this table).
    pub nat: crate::nat::NatStats,
    /// Endpoint-independent UDP mappings ([`crate::nat::mapping`]), made by the NAT
    /// stages when configured.
    pub mappings: Option<crate::nat::mapping::Mappings>,
    /// Flow offload's epoch and counters ([`offload`]).
    pub offload: offload::Offload,
}

impl ConnTrack {
    /// Tracking with `cfg` (`cfg.max` entries) for a pool of `buffers` buffers.
    pub fn new(cfg: &Config, buffers: usize) -> Self {
        Self {
            table: Table::new(cfg.max, cfg.seed),
            cfg: cfg.clone(),
            attached: vec![0; buffers],
            hint: None,
            stats: CtStats::default(),
            nat: crate::nat::NatStats::default(),
            mappings: None,
            offload: offload::Offload::default(),
        }
    }

    /// Forgets the previous packet's lookup (a new list begins, or entries went).
    #[inline]
    pub fn begin_list(&mut self) {
        self.hint = None;
        // The mappings the entries gone since the last list held.
        if !self.table.released.is_empty() {
            for (t, s) in self.table.released.drain(..) {
                if let Some(m) = self.mappings.as_mut() {
                    m.release(&t, s);
                }
            }
        }
    }

    /// The entry buffer `buf`'s packet is attached to, if it is still that entry.
    #[inline]
    pub fn attached(&self, buf: u32) -> Option<u32> {
        let a = *self.attached.get(buf as usize)?;
        let (idx, generation) = (a as u32, (a >> 32) as u32);
        self.table
            .get(idx)
            .filter(|e| e.generation == generation)
            .map(|_| idx)
    }

    /// Attaches buffer `buf`'s packet to entry `idx`; returns the NAT flag bits of the
    /// entry's status ([`stage::nat_flags`]).
    #[inline]
    pub fn attach(&mut self, buf: u32, idx: u32) -> u32 {
        let (generation, s) = self
            .table
            .get(idx)
            .map_or((0, 0), |e| (e.generation, e.status));
        if let Some(a) = self.attached.get_mut(buf as usize) {
            *a = u64::from(generation) << 32 | u64::from(idx);
        }
        stage::nat_flags(s)
    }

    /// Tracks packet `s` at time `now` (ns).
    #[inline(always)]
    pub fn track(&mut self, s: &Seen, now: u64) -> Found {
        // The common packet, inline: a datagram of the flow the previous packet of the
        // list belonged to (a run), its entry still live.
        if let Kind::Datagram = s.kind
            && let Some((t, idx, dir)) = self.hint
            && t == s.tuple
            && let Some(e) = self.table.get_mut(idx)
            && e.has(status::CONFIRMED)
            && e.expires > now
        {
            let replied = datagram(e, dir, s, now, &self.cfg.timeouts);
            self.stats.run_hits += s.wire;
            if let Some(c) = self.stats.by_state.get_mut(usize::from(replied)) {
                *c += s.wire;
            }
            return Found::Known { idx, dir, replied };
        }
        self.track_any(s, now)
    }

    /// [`ConnTrack::track`] of any packet.
    #[inline(never)]
    fn track_any(&mut self, s: &Seen, now: u64) -> Found {
        let found = self.track_inner(s, now);
        let slot = match found {
            Found::New(_) => 0,
            Found::Known { dir, replied, .. } => usize::from(dir == 1 || replied),
            Found::Related { .. } => 2,
            Found::Invalid(why) => {
                if let Some(c) = self.stats.invalid.get_mut(why.slot()) {
                    *c += s.wire;
                }
                3
            }
            Found::Untracked | Found::Refused(_) => 4,
        };
        if let Some(c) = self.stats.by_state.get_mut(slot) {
            *c += s.wire;
        }
        found
    }

    #[inline(always)]
    fn track_inner(&mut self, s: &Seen, now: u64) -> Found {
        match s.kind {
            Kind::Untracked => return Found::Untracked,
            Kind::Invalid(why) => return Found::Invalid(why),
            Kind::IcmpError(q) => {
                // The error travels against the quoted packet, whose inverse is the
                // tuple the error's own direction has on the wire (with NAT, the
                // quote is the translated packet: its inverse is the rewritten reply
                // tuple, as Linux's `icmp_error_message` looks it up).
                return match q.and_then(|t| self.table.lookup(&t.invert(), now)) {
                    Some((idx, dir)) => Found::Related { idx, dir },
                    None => Found::Invalid(Invalid::IcmpOrphan),
                };
            }
            _ => {}
        }
        let hit = match self.hint {
            Some((t, idx, dir)) if t == s.tuple => match self.table.get(idx) {
                Some(e) if e.has(status::CONFIRMED) && e.expires > now => {
                    self.stats.run_hits += s.wire;
                    Some((idx, dir))
                }
                _ => self.table.lookup(&s.tuple, now),
            },
            _ => self.table.lookup(&s.tuple, now),
        };
        let Some((idx, dir)) = hit else {
            self.hint = None;
            return self.new_connection(s, now);
        };
        self.hint = Some((s.tuple, idx, dir));
        match self.update(idx, dir, s, now) {
            Ok(f) => f,
            Err(Reopen) => {
                self.table.remove(idx);
                self.table.stats.deleted += 1;
                self.stats.tcp_reopened += 1;
                self.hint = None;
                self.new_connection(s, now)
            }
        }
    }

    /// A new connection for `s`: checked by its tracker, then an entry allocated (not
    /// linked: [`ConnTrack::confirm`]).
    #[inline(never)]
    fn new_connection(&mut self, s: &Seen, now: u64) -> Found {
        let mut conn = tcp::TcpConn::default();
        let timeout = match s.kind {
            Kind::Tcp(seg) => match tcp::TcpConn::new(&seg, &self.cfg.tcp) {
                Ok(c) => {
                    conn = c;
                    c.timeout(&self.cfg.timeouts, &self.cfg.tcp)
                }
                Err(why) => return Found::Invalid(Invalid::Tcp(why)),
            },
            Kind::IcmpQuery => {
                if !Tuple::icmp_request(s.tuple.v6, s.tuple.icmp_type()) {
                    return Found::Invalid(Invalid::IcmpNew);
                }
                self.cfg.timeouts.icmp
            }
            Kind::Datagram => self.cfg.timeouts.udp,
            _ => self.cfg.timeouts.generic,
        };
        let idx = match self.table.alloc(&s.tuple, now) {
            Ok(i) => i,
            Err(r) => return Found::Refused(r),
        };
        if let Some(e) = self.table.get_mut(idx) {
            let generation = e.generation.wrapping_add(1);
            *e = Entry {
                tuple: [s.tuple, s.tuple.invert()],
                tcp: conn,
                status: 0,
                mark: 0,
                expires: now + timeouts::ns(timeout),
                packets: [s.wire, 0],
                bytes: [s.bytes, 0],
                generation,
            };
        }
        Found::New(idx)
    }

    /// Packet `s` of entry `idx` in direction `dir`.
    fn update(&mut self, idx: u32, dir: usize, s: &Seen, now: u64) -> Result<Found, Reopen> {
        let Self {
            table, cfg, stats, ..
        } = self;
        let (tcfg, t) = (&cfg.tcp, &cfg.timeouts);
        let Some(e) = table.get_mut(idx) else {
            return Ok(Found::Untracked);
        };
        let timeout = match s.kind {
            Kind::Tcp(seg) => match e.tcp.packet(dir, &seg, tcfg) {
                tcp::Verdict::Accept { assured } => {
                    if assured {
                        e.status |= status::ASSURED;
                    }
                    Some(e.tcp.timeout(t, tcfg))
                }
                tcp::Verdict::Ignore => {
                    stats.tcp_ignored += s.wire;
                    None
                }
                tcp::Verdict::Invalid(why) => return Ok(Found::Invalid(Invalid::Tcp(why))),
                tcp::Verdict::Reopen => return Err(Reopen),
            },
            Kind::Datagram => {
                let replied = datagram(e, dir, s, now, t);
                return Ok(Found::Known { idx, dir, replied });
            }
            Kind::IcmpQuery => Some(t.icmp),
            _ => Some(t.generic),
        };
        if dir == 1 {
            e.status |= status::SEEN_REPLY;
        }
        if let Some(to) = timeout {
            e.expires = now + timeouts::ns(to);
        }
        if let (Some(p), Some(b)) = (e.packets.get_mut(dir), e.bytes.get_mut(dir)) {
            *p += s.wire;
            *b += s.bytes;
        }
        Ok(Found::Known {
            idx,
            dir,
            replied: e.has(status::SEEN_REPLY),
        })
    }

    /// Confirms new entry `idx` (its packet left its last hook): linked into the
    /// table, or, when its connection was confirmed meanwhile, given back and that
    /// connection's entry returned.
    pub fn confirm(&mut self, idx: u32, now: u64) -> u32 {
        self.hint = None;
        match self.table.link(idx, now) {
            Ok(()) => idx,
            Err(other) => other,
        }
    }

    /// Gives back new entry `idx` of generation `generation` if it was never confirmed (its
    /// packet was dropped or turned into another).
    pub fn discard(&mut self, idx: u32, generation: u32) {
        if self
            .table
            .get(idx)
            .is_some_and(|e| e.generation == generation && !e.has(status::CONFIRMED))
        {
            self.table.discard(idx);
        }
    }
}

/// Datagram `s` of entry `e` in direction `dir` at time `now`: the entry's timeout (by
/// `t`), assurance, reply bit and counters updated. Returns whether the connection has
/// seen a reply.
#[inline(always)]
fn datagram(e: &mut Entry, dir: usize, s: &Seen, now: u64, t: &Timeouts) -> bool {
    let replied = dir == 1 || e.has(status::SEEN_REPLY);
    let (to, assured) = udp::timeout(t, replied);
    if assured {
        e.status |= status::ASSURED;
    }
    if dir == 1 {
        e.status |= status::SEEN_REPLY;
    }
    e.expires = now + timeouts::ns(to);
    if let (Some(p), Some(b)) = (e.packets.get_mut(dir), e.bytes.get_mut(dir)) {
        *p += s.wire;
        *b += s.bytes;
    }
    replied
}

/// A TCP SYN reopening a closed connection.
struct Reopen;

#[cfg(test)]
mod tests;

/// A rule's `ct` match in the words of the configuration (`ct_state established,related
/// ct_status assured ct_mark 0x1/0xff `), as `show rules` prints it.
pub fn describe_match(c: &crate::filter::CtMatch) -> String {
    let mut s = String::new();
    if c.state != 0 {
        let names: Vec<&str> = state_bit::NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| c.state & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        s += &format!("ct_state {} ", names.join(","));
    }
    if c.status != 0 {
        let names: Vec<&str> = [
            (status::SRC_NAT, "snat"),
            (status::DST_NAT, "dnat"),
            (status::ASSURED, "assured"),
            (status::SEEN_REPLY, "seen-reply"),
        ]
        .iter()
        .filter(|(b, _)| c.status & b != 0)
        .map(|(_, n)| *n)
        .collect();
        s += &format!("ct_status {} ", names.join(","));
    }
    if let Some((v, m)) = c.mark {
        s += &format!("ct_mark {v:#x}/{m:#x} ");
    }
    s
}

/// The steering hash of packet `v` (dissected here if it was not) under connection
/// tracking: the Toeplitz hash of its connection's endpoints in sorted order, so that
/// both directions give one hash (an ICMP query by its addresses and identifier, an
/// ICMP error by the packet it quotes, a fragment by its addresses); 0 for a packet
/// without an IP flow. The device's hash is not used: it tells the directions apart.
pub fn steer_hash(
    v: &mut netbatch_engine::PktMut<'_>,
    t: &netbatch_wire::toeplitz::Toeplitz,
) -> u32 {
    steer_hash_with(v, t, &[])
}

/// [`steer_hash`] with NAT's forwards: each endpoint a `dnat` rule would rewrite is
/// hashed as its target ([`crate::nat::steer`]), so a port-forwarded connection's two
/// directions give one hash too.
pub fn steer_hash_with(
    v: &mut netbatch_engine::PktMut<'_>,
    t: &netbatch_wire::toeplitz::Toeplitz,
    fw: &[crate::nat::steer::Forward],
) -> u32 {
    dissect::frame(v);
    let s = Seen::read(v.meta, v.data());
    if matches!(s.kind, Kind::Invalid(Invalid::Truncated)) || s.tuple.proto == 0 && s.tuple.src == 0
    {
        return 0;
    }
    let k = match s.kind {
        Kind::IcmpError(Some(q)) => q,
        _ => s.tuple,
    };
    crate::nat::steer::tuple_hash(&k, t, fw)
}
