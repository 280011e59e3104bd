//! `udp-input` and `udp6-input`: RFC 768 checks, socket lookup, queueing, for IPv4 and
//! IPv6 (one stage written once over the family, [`UdpIp`]).
//!
//! Length field at least 8 and within the IP payload (`UdpBadLength`; a shorter UDP
//! length trims the datagram, as Linux does); checksum verified unless zero (RFC 768:
//! zero means none; over IPv6 a zero checksum is dropped, `udp6_zero_checksum`, RFC 8200
//! 8.1) or already verified by the device; no socket → the host kernel when
//! the port is paired with a host interface ([`crate::hostif`]: its daemons' sockets),
//! else ICMP port unreachable
//! (RFC 1122 4.1.3.1) unless the datagram was broadcast or multicast; full queue →
//! `SocketQueueFull`. The socket of the previous datagram is reused when the destination
//! address and port match (hoisted per list).
//!
//! A GRO super-datagram is queued whole only to a socket that asked for them (`UDP_GRO`)
//! and only when its payloads were merged (standard GRO); for any other socket it is
//! segmented here and each datagram queued on its own (the kernel's
//! `udp_unexpected_gso`). A super-datagram whose checksum nobody verified is segmented
//! before the checks.
//!
//! A datagram reassembled from fragments (a defrag chain, [`crate::defrag`]) is checked
//! whole: its UDP length against the reassembled length, its checksum over every
//! fragment's data; then it is queued whole (counted as its fragments, the wire packets
//! it came as), its later fragments' headers pulled so that the socket reads the payload
//! over the chain as it reads a super-datagram's ([`super::Datagram::payload_parts`]).
//! Refused, it keeps its fragments' headers: the ICMP error quotes the head, the host
//! kernel of a paired port gets the fragments.

use core::marker::PhantomData;

use netbatch_engine::{Cx, Meta, Out, Pkt, PktList, Stage};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::Protocol;
use netbatch_wire::udp::{self, UdpPacket};

use super::socket::{SocketId, SocketWriter, Table, TableCache};
use crate::assemble::node;
use crate::declare::{Decl, Decode, Take, To};
use crate::host::Host;
use crate::meta::{Field, Fields, flag, gso};

netbatch_engine::reasons! {
    /// Why `udp-input` does not deliver a datagram (RFC 768).
    pub mod reason {
        TRUNCATED = "udp_truncated": "UDP header cut short",
        BAD_LENGTH = "udp_bad_length": "UDP length field inconsistent with the IP payload",
        CHECKSUM = "udp_checksum": "UDP checksum wrong",
        NO_SOCKET = "no_socket": "no socket bound to the UDP destination port",
        QUEUE_FULL = "socket_queue_full": "socket receive queue full",
        ZERO_CHECKSUM6 = "udp6_zero_checksum": "UDP over IPv6 without a checksum (RFC 8200 8.1)",
    }
}

/// What the UDP stage needs to know of the IP family under it.
pub trait UdpIp: Send + 'static {
    /// Address bits.
    type Bits: Copy + Eq + core::fmt::Debug + Send + 'static;
    /// Whether a zero checksum means "none" (IPv4); over IPv6 it is refused.
    const ZERO_CHECKSUM_IS_NONE: bool;
    /// The kind of a merged super-datagram of this family.
    const GSO_KIND: u8;
    /// A view of the fixed IP header.
    type Header<'a>: Copy;
    /// The fixed IP header `d` starts with, if whole.
    fn header(d: &[u8]) -> Option<Self::Header<'_>>;
    /// Its destination bits.
    fn dst(h: &Self::Header<'_>) -> Self::Bits;
    /// The checksum accumulator of its pseudo-header for a UDP length of `ulen`.
    fn pseudo(h: &Self::Header<'_>, ulen: usize) -> u64;
    /// The socket for a datagram to `dst:port`.
    fn lookup(t: &Table, dst: Self::Bits, port: u16) -> Option<SocketId>;
    /// Asks the family's ICMP error stage for port unreachable about the packet.
    fn no_socket(meta: &mut Meta);
}

/// UDP over IPv4.
#[derive(Debug, Default)]
pub struct V4;

/// UDP over IPv6.
#[derive(Debug, Default)]
pub struct V6;

impl UdpIp for V4 {
    type Bits = u32;
    const ZERO_CHECKSUM_IS_NONE: bool = true;
    const GSO_KIND: u8 = gso::UDPV4;

    type Header<'a> = netbatch_wire::ipv4::Ipv4Packet<&'a [u8; 20]>;

    #[inline(always)]
    fn header(d: &[u8]) -> Option<Self::Header<'_>> {
        crate::ip4::header(d)
    }

    #[inline(always)]
    fn dst(h: &Self::Header<'_>) -> u32 {
        u32::from(h.dst())
    }

    #[inline(always)]
    fn pseudo(h: &Self::Header<'_>, ulen: usize) -> u64 {
        checksum::pseudo_header_v4(h.src(), h.dst(), Protocol::UDP.0, ulen as u16)
    }

    #[inline(always)]
    fn lookup(t: &Table, dst: u32, port: u16) -> Option<SocketId> {
        t.lookup(dst, port)
    }

    fn no_socket(meta: &mut Meta) {
        crate::ip4::icmp_error::Request::new(crate::ip4::icmp_error::Cause::NoSocket).put(meta);
    }
}

impl UdpIp for V6 {
    type Bits = u128;
    const ZERO_CHECKSUM_IS_NONE: bool = false;
    const GSO_KIND: u8 = gso::UDPV6;

    type Header<'a> = netbatch_wire::ipv6::Ipv6Packet<&'a [u8; 40]>;

    #[inline(always)]
    fn header(d: &[u8]) -> Option<Self::Header<'_>> {
        crate::ip6::header(d)
    }

    #[inline(always)]
    fn dst(h: &Self::Header<'_>) -> u128 {
        u128::from(h.dst())
    }

    #[inline(always)]
    fn pseudo(h: &Self::Header<'_>, ulen: usize) -> u64 {
        checksum::pseudo_header_v6(h.src(), h.dst(), Protocol::UDP.0, ulen as u32)
    }

    #[inline(always)]
    fn lookup(t: &Table, dst: u128, port: u16) -> Option<SocketId> {
        t.lookup6(dst, port)
    }

    fn no_socket(meta: &mut Meta) {
        crate::ip6::icmp_error::Request::new(crate::ip6::Cause::NoSocket).put(meta);
    }
}

netbatch_engine::arcs! {
    /// Arc to the ICMP error stage (no socket).
    pub ERROR = "error";
    /// Arc to the host kernel (no socket, the port paired: [`crate::hostif`]).
    pub HOST = "host";
}

/// The UDP input stage of IP family `F` (`udp-input` for [`V4`], `udp6-input` for [`V6`]).
#[derive(Debug)]
pub struct UdpInputOf<F: UdpIp> {
    segs: Vec<Pkt>,
    tables: TableCache,
    /// The previous datagram's socket, kept across calls (per-packet mode calls with one
    /// datagram) while the table stays the same.
    hint: Option<(F::Bits, u16, Option<SocketId>)>,
    hint_gen: u64,
    /// Super-datagrams segmented before queueing.
    pub segmented: u64,
    family: PhantomData<F>,
}

impl<F: UdpIp> Default for UdpInputOf<F> {
    fn default() -> Self {
        Self {
            segs: Vec::new(),
            tables: TableCache::default(),
            hint: None,
            hint_gen: 0,
            segmented: 0,
            family: PhantomData,
        }
    }
}

/// `udp-input`.
pub type UdpInput = UdpInputOf<V4>;
/// `udp6-input`.
pub type Udp6Input = UdpInputOf<V6>;

/// What UDP input reads of a datagram's metadata, either version.
const READS: Fields = Fields::of(&[
    Field::L3,
    Field::L4,
    Field::InPort,
    Field::L2Class,
    Field::Dest,
    Field::Csum,
    Field::Gso,
]);

/// `udp-input`: takes IPv4 protocol 17 (RFC 768).
pub const DECL: Decl = Decl {
    arcs: &[
        ("error", To::Node(node::IP4_ICMP_ERROR)),
        ("host", crate::hostif::TO_HOST),
    ],
    takes: &[Take::v4(17, "udp")],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Ports,
    reads: READS,
    writes: Fields::of(&[Field::Csum, Field::Ask]),
    ..Decl::new(node::UDP_INPUT, |_| Box::new(UdpInput::default()))
};

/// `udp6-input`: takes IPv6 upper-layer protocol 17.
pub const DECL6: Decl = Decl {
    arcs: &[
        ("error", To::Node(node::IP6_ICMP_ERROR)),
        ("host", crate::hostif::TO_HOST),
    ],
    takes: &[Take::v6(17, "udp")],
    reasons: &[reason::ALL, crate::hostif::reason::ALL],
    decode: Decode::Ports,
    reads: READS,
    writes: Fields::of(&[Field::Csum, Field::Ask]),
    ..Decl::new(node::UDP6_INPUT, |_| Box::new(Udp6Input::default()))
};

/// Per-list state: the socket table, the socket of the previous datagram (destination,
/// port, socket), and the queue of the socket of the current run of datagrams, locked
/// once for the whole run.
struct Batch<'t, B> {
    table: &'t Table,
    hint: Option<(B, u16, Option<SocketId>)>,
    writer: Option<(SocketId, SocketWriter<'t>)>,
}

impl<'t, B> Batch<'t, B> {
    /// The locked queue of `sock` (locking it, and releasing the previous one, when the
    /// run changes socket); `None` if the socket is gone. The same socket as the last
    /// datagram's is the hot case, always inlined; a change of socket is called out of
    /// line (so how the crate is split into codegen units does not decide).
    #[inline(always)]
    fn writer(&mut self, sock: SocketId) -> Option<&mut SocketWriter<'t>> {
        if self.writer.as_ref().is_none_or(|(id, _)| *id != sock) {
            return self.switch(sock);
        }
        self.writer.as_mut().map(|(_, w)| w)
    }

    /// Releases the current socket's lock and takes `sock`'s.
    #[inline(never)]
    fn switch(&mut self, sock: SocketId) -> Option<&mut SocketWriter<'t>> {
        self.writer = None;
        let s = self.table.get(sock)?;
        self.writer = Some((sock, s.writer()));
        self.writer.as_mut().map(|(_, w)| w)
    }
}

impl<F: UdpIp> UdpInputOf<F> {
    /// Checks and queues one datagram (`SUPER`: a super-datagram; the plain version,
    /// the hot one, has every super-datagram branch folded away).
    #[inline(always)]
    fn one<const SUPER: bool>(
        &mut self,
        host: &mut Host,
        cx: &mut Cx<'_>,
        mut p: Pkt,
        b: &mut Batch<'_, F::Bits>,
        out: &mut Out,
    ) {
        let mut v = cx.pool.get_mut(&mut p);
        let defragged = SUPER && v.meta.flags & flag::DEFRAG_CHAIN != 0;
        if SUPER && v.meta.flags & flag::L4_CSUM_OK == 0 && !defragged {
            self.unverified(host, cx, p, b, out);
            return;
        }
        let chained = SUPER && v.meta.chain.is_some();
        let d = v.data();
        let ihl = crate::dissect::ihl(v.meta).unwrap_or(usize::MAX);
        let (Some(ip), Some(u)) = (F::header(d), d.get(ihl..)) else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let Some(uh) = u.first_chunk::<{ udp::HEADER_LEN }>() else {
            out.drop(p, reason::TRUNCATED);
            return;
        };
        let uh = UdpPacket::new_unchecked(uh);
        let ulen_avail = if chained {
            (v.meta.total_len as usize).saturating_sub(ihl)
        } else {
            u.len()
        };
        let ulen = usize::from(uh.len());
        if ulen < 8 || ulen > ulen_avail || (chained && ulen != ulen_avail) {
            out.drop(p, reason::BAD_LENGTH);
            return;
        }
        let dport = uh.dst_port();
        // The datagram's checksum, unless the device verified it (a zero one means none
        // over IPv4, RFC 768, and is refused over IPv6, RFC 8200 8.1).
        if uh.checksum() == 0 && !F::ZERO_CHECKSUM_IS_NONE {
            out.drop(p, reason::ZERO_CHECKSUM6);
            return;
        }
        if uh.checksum() != 0
            && v.meta.flags & flag::L4_CSUM_OK == 0
            && !u
                .get(..ulen)
                .is_some_and(|dg| checksum::verifies(checksum::sum(dg, F::pseudo(&ip, ulen))))
        {
            out.drop(p, reason::CHECKSUM);
            return;
        }
        let dst = F::dst(&ip);
        if ulen < ulen_avail {
            v.truncate(ihl + ulen);
        }
        v.meta.flags |= flag::L4_CSUM_OK;
        let sock = match b.hint {
            Some((a, port, s)) if a == dst && port == dport => s,
            _ => {
                let s = F::lookup(b.table, dst, dport);
                b.hint = Some((dst, dport, s));
                s
            }
        };
        let wire = if SUPER { v.meta.wire_packets() } else { 1 };
        let whole = SUPER && v.meta.gso_type & gso::KIND == F::GSO_KIND;
        let Some(sock) = sock else {
            if crate::hostif::punt_port(host, v.meta.in_port).is_some() {
                out.push(HOST, p);
            } else if v.meta.flags
                & (flag::L3_BROADCAST
                    | flag::L3_MULTICAST
                    | flag::L2_BROADCAST
                    | flag::L2_MULTICAST)
                != 0
            {
                out.drop(p, reason::NO_SOCKET);
            } else {
                F::no_socket(v.meta);
                out.push(ERROR, p);
            }
            return;
        };
        if !SUPER || wire == 1 {
            // The common case: the run's socket queue is locked already.
            match b.writer(sock) {
                Some(w) => {
                    if let Err(p) = w.push(p, 1) {
                        out.drop(p, reason::QUEUE_FULL);
                    }
                }
                None => out.drop(p, reason::NO_SOCKET),
            }
            return;
        }
        b.writer = None;
        let Some(s) = b.table.get(sock) else {
            out.drop(p, reason::NO_SOCKET);
            return;
        };
        if defragged {
            if !crate::defrag::gather(cx.pool, &mut p) {
                out.drop(p, reason::TRUNCATED);
            } else if let Err(p) = s.enqueue(p, wire) {
                out.drop(p, reason::QUEUE_FULL);
            }
            return;
        }
        if whole && s.gro() {
            if let Err(p) = s.enqueue(p, wire) {
                out.drop(p, reason::QUEUE_FULL);
            }
            return;
        }
        // A super-datagram for a socket that takes single datagrams.
        match crate::gso::segment(cx.pool, cx.cache, p, &mut self.segs) {
            Ok(()) => {
                self.segmented += 1;
                for q in self.segs.drain(..) {
                    if let Err(q) = s.enqueue(q, 1) {
                        out.drop(q, reason::QUEUE_FULL);
                    }
                }
            }
            Err((p, r)) => out.drop(p, r),
        }
    }
}

impl<F: UdpIp> UdpInputOf<F> {
    /// A super-datagram.
    #[cold]
    #[inline(never)]
    fn super_datagram(
        &mut self,
        host: &mut Host,
        cx: &mut Cx<'_>,
        p: Pkt,
        b: &mut Batch<'_, F::Bits>,
        out: &mut Out,
    ) {
        self.one::<true>(host, cx, p, b, out);
    }

    /// A datagram reassembled from fragments: its checksum verified over the chain (no
    /// device verifies a fragment's), then checked and queued as a super-datagram is.
    #[cold]
    #[inline(never)]
    fn defragged(
        &mut self,
        host: &mut Host,
        cx: &mut Cx<'_>,
        mut p: Pkt,
        b: &mut Batch<'_, F::Bits>,
        out: &mut Out,
    ) {
        if chain_sum_ok::<F>(cx.pool, &p) == Some(false) {
            out.drop(p, reason::CHECKSUM);
            return;
        }
        cx.pool.get_mut(&mut p).meta.flags |= flag::L4_CSUM_OK;
        self.one::<true>(host, cx, p, b, out);
    }

    /// A super-datagram whose checksum nobody verified: each datagram is checked on its
    /// own.
    #[cold]
    #[inline(never)]
    fn unverified(
        &mut self,
        host: &mut Host,
        cx: &mut Cx<'_>,
        p: Pkt,
        b: &mut Batch<'_, F::Bits>,
        out: &mut Out,
    ) {
        match crate::gso::segment(cx.pool, cx.cache, p, &mut self.segs) {
            Ok(()) => {
                self.segmented += 1;
                let mut segs = core::mem::take(&mut self.segs);
                for q in segs.drain(..) {
                    self.one::<false>(host, cx, q, b, out);
                }
                self.segs = segs;
            }
            Err((p, r)) => out.drop(p, r),
        }
    }
}

/// Whether the UDP checksum of the defrag chain `p` is right, summed over the head's
/// UDP header and data and every later fragment's data (RFC 768: over the whole
/// datagram). `None` when there is nothing to verify here: no checksum (zero), or a
/// header or length the checks that follow refuse.
fn chain_sum_ok<F: UdpIp>(pool: &netbatch_engine::Pool, p: &Pkt) -> Option<bool> {
    let v = pool.get(p);
    let d = v.data();
    let ihl = crate::dissect::ihl(v.meta)?;
    let ip = F::header(d)?;
    let u = d.get(ihl..)?;
    let uh = UdpPacket::new_unchecked(u.first_chunk::<{ udp::HEADER_LEN }>()?);
    let ulen = usize::from(uh.len());
    if uh.checksum() == 0 || ulen + ihl != v.meta.total_len as usize {
        return None;
    }
    // Every part but the last is a whole number of 8-byte units: the sums add up.
    let mut acc = checksum::sum(u, F::pseudo(&ip, ulen));
    for part in crate::defrag::later_data(pool, p) {
        acc = checksum::sum(part, acc);
    }
    Some(checksum::verifies(acc))
}

impl<F: UdpIp> Stage<Host> for UdpInputOf<F> {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("segmented", self.segmented)]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut tables = core::mem::take(&mut self.tables);
        tables.get(&host.sockets);
        let generation = tables.generation();
        let table = tables.get(&host.sockets);
        let mut b = Batch {
            table,
            hint: self.hint.filter(|_| generation == self.hint_gen),
            writer: None,
        };
        for p in list.drain(..) {
            let m = cx.pool.get(&p).meta;
            if m.gso_type == gso::NONE && m.flags & flag::DEFRAG_CHAIN == 0 {
                self.one::<false>(host, cx, p, &mut b, out);
            } else if m.gso_type == gso::NONE {
                self.defragged(host, cx, p, &mut b, out);
            } else {
                self.super_datagram(host, cx, p, &mut b, out);
            }
        }
        self.hint = b.hint;
        self.hint_gen = generation;
        drop(b);
        self.tables = tables;
    }
}
