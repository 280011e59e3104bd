//! Flow offload, as Linux's flowtable (`nf_flow_table`; nftables' `flow add @ft`): the
//! established flows a FORWARD rule asks for are forwarded by `ct-in` itself.
//!
//! A FORWARD rule with `offload` that accepts a TCP or UDP packet of an established
//! connection, IPv4 or IPv6 ([`record`]), writes a record for the packet's direction of
//! the connection: where routing sent it (adjacency and output interface), what that
//! was decided on besides the addresses and ports (input interface, packet mark, TOS or
//! traffic class), and, for IPv4, the rewrite the direction's packets get, worked out
//! once from the connection's tuples: the addresses and ports NAT gives them and the
//! change to each checksum (RFC 1624 eqn. 3, the TTL's decrement included). IPv6 is not
//! translated and has no header checksum: its packets only lose a hop (RFC 8200 3). The records sit beside the table
//! (one pair per entry, allocated when a graph first offloads), each with the
//! generation of the entry it is for. The next packets of that direction ([`forward`])
//! are tracked as every packet is (the TCP window, timeouts, counters, the entry's
//! state: an offloaded connection is tracked exactly, where Linux's flowtable stops
//! tracking), rewritten by the record (RFC 1812 5.3.1: TTL decremented; [`forward6`]:
//! the hop limit), and handed to the family's neighbour stage (the MTU check and the
//! link header are its, as for every packet). They skip `nat-prerouting`, the
//! PREROUTING, FORWARD and POSTROUTING chains (their rule counters and `ct mark set`
//! statements too), routing, `ip4-forward`/`ip6-forward` and `ct-confirm`, as an
//! offloaded flow skips the netfilter hooks in Linux: the rule says that its verdict
//! stands for the flow. Linux's flowtable offloads TCP and UDP over both families
//! only; so does this.
//!
//! A record holds while (else the packet takes the whole path, which may write it
//! again):
//! - the table's epoch is the one it was written in: a new graph (a reload, any rule
//!   change) and a new route table or policy of either family (any route, rule or VRF
//!   change) start a new epoch ([`Offload::begin_list`]), so no record outlives the
//!   state it stood for (its adjacency indexes the table it was chosen in);
//! - the packet arrives on the interface, with the mark and the TOS, it was written for;
//! - the packet is one the whole path would forward changed only by NAT and TTL:
//!   of the record's family, IPv4 without options or IPv6 without extension headers
//!   (the L4 header right after the fixed one), TTL or hop limit above 1 (else time
//!   exceeded), received for our MAC, not a reassembled datagram, a TCP segment without
//!   SYN, FIN or RST (Linux's flowtable hands those back too), long enough for the
//!   headers it rewrites; when translated, also not a super-packet, its L4 checksum not
//!   left to the device (what only loses a hop, IPv6 or untranslated IPv4, goes as it
//!   is, super-packets included: GSO gives every segment the head's TTL or hop limit,
//!   as on the whole path);
//! - it does not leave by the interface it came in on (a redirect may be due).

use std::sync::Arc;

use netbatch_engine::PktMut;
use netbatch_wire::checksum;
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::ipv6::{self, Ipv6Packet};
use netbatch_wire::tcp::TcpFlags;

use super::{ConnTrack, Tuple};
use crate::dissect::{L3, L4};
use crate::meta::{flag, gso};
use crate::route::rule::{Policy, Policy6};
use crate::route::{Routes, Routes6};

/// What a FORWARD rule's `offload` recorded for one direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    /// The epoch it was written in; 0: none.
    pub epoch: u32,
    /// The generation of the entry it is for.
    pub generation: u32,
    /// Routing's adjacency (`Meta::adj`).
    pub adj: u32,
    /// The packet mark it was decided with.
    pub mark: u32,
    /// The addresses the packet leaves with (source, destination).
    pub addrs: [u32; 2],
    /// The ports it leaves with (source, destination).
    pub ports: [u16; 2],
    /// The IPv4 header checksum's change (addresses and TTL), `~m + m'` folded.
    pub ip_delta: u16,
    /// The TCP/UDP checksum's change (pseudo-header addresses and ports), folded.
    pub l4_delta: u16,
    /// Input interface.
    pub in_if: u16,
    /// Output interface.
    pub out_if: u16,
    /// The TOS octet (IPv6: the traffic class) it was decided with (policy routing may
    /// match it).
    pub tos: u8,
    /// UDP: a zero checksum (none sent) stays zero.
    pub udp: bool,
    /// For IPv6 packets ([`forward6`]; the address, port and checksum fields unused).
    pub six: bool,
    /// The translations it makes (NAT's `translated` counts each: 0, 1 or 2).
    pub nat: u8,
}

/// Counters of the offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffloadStats {
    /// Packets (wire) forwarded by the offload.
    pub forwarded: u64,
    /// Records written by a FORWARD rule.
    pub recorded: u64,
    /// Epochs begun (graphs, route tables, policies changed).
    pub epochs: u64,
}

impl OffloadStats {
    /// Counters by name, for `show` and `/metrics`.
    pub fn named(&self) -> [(&'static str, u64); 3] {
        [
            ("offload_forwarded", self.forwarded),
            ("offload_recorded", self.recorded),
            ("offload_epochs", self.epochs),
        ]
    }
}

/// The worker's offload state: the current epoch, what it stands for, the records.
#[derive(Debug, Clone, Default)]
pub struct Offload {
    /// The current epoch (never 0 once begun).
    pub epoch: u32,
    /// The route tables and policies of the current epoch, held so that a new one is told
    /// apart by address (a held one cannot be freed and its address reused).
    tables: Option<Held>,
    /// A pair of records (one per direction) per entry of the table; empty until a graph
    /// offloads.
    records: Vec<[Record; 2]>,
    /// Counters.
    pub stats: OffloadStats,
}

/// What records' routes and next hops are chosen by: both families' route tables and
/// policies (a record's adjacency indexes its family's table), as the worker's host
/// holds them.
#[derive(Debug, Clone, Copy)]
pub struct Tables<'a> {
    /// IPv4 routes.
    pub routes: &'a Arc<Routes>,
    /// IPv4 policy rules.
    pub policy: &'a Arc<Policy>,
    /// IPv6 routes.
    pub routes6: &'a Arc<Routes6>,
    /// IPv6 policy rules.
    pub policy6: &'a Arc<Policy6>,
}

/// [`Tables`] held (an epoch's).
type Held = (Arc<Routes>, Arc<Policy>, Arc<Routes6>, Arc<Policy6>);

impl Offload {
    /// At the start of a list of a graph that offloads, for a table of `max` entries: a
    /// new epoch when `fresh` (the stage was just made: a new graph) or when a route
    /// table or policy of either family is not the epoch's.
    #[inline]
    pub fn begin_list(&mut self, fresh: bool, max: usize, now: Tables<'_>) {
        let same = self.tables.as_ref().is_some_and(|(r, p, r6, p6)| {
            Arc::ptr_eq(r, now.routes)
                && Arc::ptr_eq(p, now.policy)
                && Arc::ptr_eq(r6, now.routes6)
                && Arc::ptr_eq(p6, now.policy6)
        });
        if fresh || !same {
            self.new_epoch(max, now);
        }
    }

    #[cold]
    fn new_epoch(&mut self, max: usize, now: Tables<'_>) {
        if self.records.len() != max {
            self.records = vec![[Record::default(); 2]; max];
        }
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.tables = Some((
            now.routes.clone(),
            now.policy.clone(),
            now.routes6.clone(),
            now.policy6.clone(),
        ));
        self.stats.epochs += 1;
    }
}

/// Whether the offload may take packet `m`: received for our MAC, not a reassembled
/// datagram; when it is translated (`!hop_only`: NAT rewrites its addresses or ports and
/// their checksums), also a single frame (no super-packet, no chain) whose L4 checksum is
/// not left to the device. A packet that only loses a hop (IPv6, or IPv4 without NAT,
/// whose header checksum is always whole) goes as it is: the change touches no L4
/// checksum, and GSO gives every segment of a super-packet or chain the head's TTL or
/// hop limit ([`crate::gso`]), as on the whole path.
#[inline(always)]
fn fits(m: &netbatch_engine::Meta, hop_only: bool) -> bool {
    // The single frame first: the common case, and all a translated packet may be.
    let no = flag::DEFRAG_CHAIN | flag::GRO_CHAIN | flag::L4_CSUM_PARTIAL;
    let single = m.flags & (flag::L2_HOST | no) == flag::L2_HOST
        && m.gso_type == gso::NONE
        && m.chain.is_none();
    single || hop_only && m.flags & (flag::L2_HOST | flag::DEFRAG_CHAIN) == flag::L2_HOST
}

/// `~old + new` over the two 16-bit halves of a 32-bit field (RFC 1624 eqn. 3, unfolded).
fn change32(old: u32, new: u32) -> u32 {
    let o = !old;
    (o >> 16) + (o & 0xffff) + (new >> 16) + (new & 0xffff)
}

/// `~old + new` of a 16-bit field.
fn change16(old: u16, new: u16) -> u32 {
    u32::from(!old) + u32::from(new)
}

/// `~m + m'` of the TTL/protocol word when TTL goes down by one (TTL ≥ 2): `m' = m -
/// 0x0100`, so the sum is `0xffff - 0x0100`.
const TTL_DELTA: u32 = 0xfeff;

/// The record's rewrite for a packet arriving as tuple `t_in` and leaving as the
/// inverse of `t_other` (the other direction's tuple as the wire has it): Linux's
/// `nf_nat_packet` gives the original direction each translation and the reply
/// direction their inverse, which is what leaving as `invert(t_other)` is.
fn rewrite_of(r: &mut Record, t_in: &Tuple, t_other: &Tuple) {
    let (src, dst) = (t_in.src as u32, t_in.dst as u32);
    let (nsrc, ndst) = (t_other.dst as u32, t_other.src as u32);
    let (nsport, ndport) = (t_other.dport, t_other.sport);
    let addrs = change32(src, nsrc) + change32(dst, ndst);
    r.addrs = [nsrc, ndst];
    r.ports = [nsport, ndport];
    r.ip_delta = checksum::fold(u64::from(addrs + TTL_DELTA));
    r.l4_delta = checksum::fold(u64::from(
        addrs + change16(t_in.sport, nsport) + change16(t_in.dport, ndport),
    ));
}

/// Records, for the direction of packet `m` (the metadata of IPv4 or IPv6 packet `d`,
/// attached to entry `idx` in `ct`), where the FORWARD hook saw it go and how it is
/// rewritten: called when a rule with `offload` accepted it.
pub fn record(ct: &mut ConnTrack, idx: u32, m: &netbatch_engine::Meta, d: &[u8]) {
    let six = m.l3_type == L3::Ipv6 as u8;
    if super::state_of(m.flags) != super::state_bit::ESTABLISHED || m.in_if == m.out_if {
        return;
    }
    // The L4 header right after the fixed one (no IPv4 options, no IPv6 extension
    // header), as the dissector located it, and the TOS or traffic class routing saw.
    let fixed = if six { ipv6::HEADER_LEN } else { 20 };
    if usize::from(m.l4.wrapping_sub(m.l3)) != fixed {
        return;
    }
    let h = d
        .get(usize::from(m.l3.wrapping_sub(m.data))..)
        .unwrap_or_default();
    let tos = if six {
        let Some(h) = h.first_chunk::<{ ipv6::HEADER_LEN }>() else {
            return;
        };
        Ipv6Packet::new_unchecked(h).traffic_class()
    } else {
        let Some(h) = h.first_chunk::<20>() else {
            return;
        };
        Ipv4Packet::new_unchecked(h).dscp_ecn()
    };
    let Some(e) = ct.table.get(idx) else { return };
    let nat = (e.status & super::status::SRC_NAT != 0) as u8
        + (e.status & super::status::DST_NAT != 0) as u8;
    if !fits(m, six || nat == 0) {
        return;
    }
    let udp = match L4::of(e.tuple[0].proto) {
        L4::Udp => true,
        L4::Tcp => false,
        _ => return,
    };
    let dir = usize::from(m.flags & flag::CT_REPLY != 0);
    let (Some(t_in), Some(t_other)) = (e.tuple.get(dir), e.tuple.get(dir ^ 1)) else {
        return;
    };
    let mut new = Record {
        epoch: ct.offload.epoch,
        generation: e.generation,
        adj: m.adj,
        mark: m.mark,
        in_if: m.in_if,
        out_if: m.out_if,
        tos,
        udp,
        six,
        nat,
        ..Record::default()
    };
    if !six {
        rewrite_of(&mut new, t_in, t_other);
    }
    let Some(r) = ct
        .offload
        .records
        .get_mut(idx as usize)
        .and_then(|p| p.get_mut(dir))
    else {
        return;
    };
    if *r != new {
        *r = new;
        ct.offload.stats.recorded += 1;
    }
}

/// What [`forward`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not offloaded: the packet takes the whole path, untouched.
    Path,
    /// Forwarded: rewritten, on to the neighbour stage.
    Forwarded,
}

/// Forwards IPv4 packet `v` in direction `dir` of established entry `idx` (`tcp`: a
/// TCP segment's flags; `None`: a datagram), by the direction's record if it holds (see
/// the module): its addresses, ports and checksums rewritten, TTL decremented, the
/// record's adjacency and output interface.
#[inline(always)]
pub fn forward(
    ct: &mut ConnTrack,
    idx: u32,
    dir: usize,
    tcp: Option<u16>,
    v: &mut PktMut<'_>,
) -> Outcome {
    let ConnTrack {
        offload,
        table,
        nat,
        ..
    } = ct;
    let Some(r) = holding(offload, table, idx, dir, v.meta, false) else {
        return Outcome::Path;
    };
    let Some(at) = l4_checksum_at(r, tcp) else {
        return Outcome::Path;
    };
    let Some((ip, th)) = fixed_and_l4::<20>(v, at) else {
        return Outcome::Path;
    };
    // TTL above 1 (RFC 1812 5.3.1: else time exceeded, on the whole path), the TOS the
    // record was made with (no options: `fixed_and_l4` found the L4 header at 20 bytes).
    let h = Ipv4Packet::new_unchecked(&*ip);
    let (ttl, tos) = (h.ttl(), h.dscp_ecn());
    if ttl < 2 || tos != r.tos {
        return Outcome::Path;
    }
    rewrite(ip, ttl - 1, th, at, r);
    nat.translated += u64::from(r.nat);
    hand_on(v, (r.out_if, r.adj), &mut offload.stats)
}

/// The fixed IP header (`N` bytes) of packet `v` and its L4 header through the checksum
/// at `at`, when the L4 header follows the fixed one directly (no IPv4 options, no IPv6
/// extension header) and the packet holds both.
#[inline(always)]
fn fixed_and_l4<'a, const N: usize>(
    v: &'a mut PktMut<'_>,
    at: usize,
) -> Option<(&'a mut [u8; N], &'a mut [u8])> {
    let m = &*v.meta;
    if usize::from(m.l4.wrapping_sub(m.l3)) != N {
        return None;
    }
    let l3 = usize::from(m.l3.wrapping_sub(m.data));
    let (ip, th) = v.data_mut().get_mut(l3..)?.split_first_chunk_mut::<N>()?;
    Some((ip, th.get_mut(..at + 2)?))
}

/// Sends packet `v`, rewritten, where its record says: `(output interface, adjacency)`,
/// on to the neighbour stage; counted in the wire packets it carries.
#[inline(always)]
fn hand_on(v: &mut PktMut<'_>, (out_if, adj): (u16, u32), stats: &mut OffloadStats) -> Outcome {
    stats.forwarded += v.meta.wire_packets();
    v.meta.out_if = out_if;
    v.meta.adj = adj;
    v.meta.flags |= flag::FORWARDED;
    Outcome::Forwarded
}

/// The record of direction `dir` of entry `idx` if it holds for a packet of the family
/// (`six`) with metadata `m`: of this epoch and this entry generation, made for the
/// interface and mark the packet came with, the packet one it may take ([`fits`]).
#[inline(always)]
fn holding<'a>(
    offload: &'a Offload,
    table: &super::Table,
    idx: u32,
    dir: usize,
    m: &netbatch_engine::Meta,
    six: bool,
) -> Option<&'a Record> {
    let r = offload.records.get(idx as usize)?.get(dir)?;
    let holds = r.epoch == offload.epoch
        && r.six == six
        && r.in_if == m.in_if
        && r.mark == m.mark
        && fits(m, six || r.nat == 0)
        && table.get(idx).is_some_and(|e| e.generation == r.generation);
    holds.then_some(r)
}

/// The offset of the L4 checksum in the header of the protocol record `r` was made for
/// (TCP's, UDP's), if the packet is of it (`tcp`: a TCP segment's flags; `None`: a
/// datagram) and, TCP, has none of SYN, FIN and RST.
#[inline(always)]
fn l4_checksum_at(r: &Record, tcp: Option<u16>) -> Option<usize> {
    const ENDS: u16 = TcpFlags::SYN.bits() | TcpFlags::FIN.bits() | TcpFlags::RST.bits();
    match tcp {
        Some(f) if !r.udp && f & ENDS == 0 => Some(16),
        None if r.udp => Some(6),
        _ => None,
    }
}

/// [`forward`] for IPv6 packet `v`: by the direction's record if it holds, the hop
/// limit decremented (RFC 8200 3; nothing else changes: no header checksum, no
/// translation), the record's adjacency and output interface. Out of line: the IPv4
/// offload's loop in `ct-in` stays as tight as without it.
#[inline(never)]
pub fn forward6(
    ct: &mut ConnTrack,
    idx: u32,
    dir: usize,
    tcp: Option<u16>,
    v: &mut PktMut<'_>,
) -> Outcome {
    let ConnTrack { offload, table, .. } = ct;
    let Some(r) = holding(offload, table, idx, dir, v.meta, true) else {
        return Outcome::Path;
    };
    // No extension header: the L4 header, through its checksum, right after.
    let Some(at) = l4_checksum_at(r, tcp) else {
        return Outcome::Path;
    };
    let Some((ip, _)) = fixed_and_l4::<{ ipv6::HEADER_LEN }>(v, at) else {
        return Outcome::Path;
    };
    // Hop limit above 1 (RFC 4443 3.3: else time exceeded, on the whole path), the
    // traffic class the record was made with.
    let mut h = Ipv6Packet::new_unchecked(ip);
    let hl = h.hop_limit();
    if hl < 2 || h.traffic_class() != r.tos {
        return Outcome::Path;
    }
    h.set_hop_limit(hl - 1);
    hand_on(v, (r.out_if, r.adj), &mut offload.stats)
}

/// Checksum `hc` after a change whose folded `~m + m'` is `d` (RFC 1624 eqn. 3).
#[inline(always)]
fn apply(hc: u16, d: u16) -> u16 {
    let s = u32::from(!hc) + u32::from(d);
    let s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// Rewrites IPv4 header `ip` (20 bytes: TTL to `ttl`, one less than it was) and its
/// TCP/UDP header `th` (through its checksum at `at`) by record `r`. Untranslated, only
/// the TTL and the header checksum change, as on the whole path: the L4 header is left
/// as it came (its checksum may be a partial one the device completes).
#[inline(always)]
fn rewrite(ip: &mut [u8; 20], ttl: u8, th: &mut [u8], at: usize, r: &Record) {
    let mut h = Ipv4Packet::new_unchecked(&mut *ip);
    h.set_ttl(ttl);
    let hc = apply(h.checksum(), r.ip_delta);
    h.set_checksum(hc);
    if r.nat == 0 {
        return;
    }
    if let Some(a) = ip.last_chunk_mut::<8>() {
        *a = (u64::from(r.addrs[0]) << 32 | u64::from(r.addrs[1])).to_be_bytes();
    }
    if let Some(p) = th.first_chunk_mut::<4>() {
        *p = (u32::from(r.ports[0]) << 16 | u32::from(r.ports[1])).to_be_bytes();
    }
    if let Some(c) = th
        .get_mut(at..at + 2)
        .and_then(|c| c.first_chunk_mut::<2>())
    {
        let cs = u16::from_be_bytes(*c);
        // RFC 768: a UDP checksum of zero is none, and stays; one that comes out zero
        // is sent as all ones.
        if !(r.udp && cs == 0) {
            let mut n = apply(cs, r.l4_delta);
            if r.udp && n == 0 {
                n = 0xffff;
            }
            *c = n.to_be_bytes();
        }
    }
}
