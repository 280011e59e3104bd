//! `ip4-defrag`: IPv4 fragments gathered before connection tracking
//! ([`crate::defrag`]), after `ip4-input` and before `ct-in`; in the graph only with
//! tracking. A datagram is told by its source, destination, protocol and identification
//! (RFC 791 3.2). Refused as they come, each counted: a fragment with no data, one not
//! the last whose data is not a multiple of 8 bytes (RFC 791: offsets count 8-byte
//! units), one reaching past 65,535 bytes, and a first fragment without the whole
//! transport header (RFC 1858: the ports and TCP's flags must be in the first
//! fragment). A datagram for this host that times out with its first fragment received
//! is answered with time exceeded, code 1 (RFC 792); a forwarded one is dropped silently,
//! as Linux's conntrack defragmentation does (`frag_expire_skip_icmp`).
//!
//! `ip4-reassemble` is the same stage on the local delivery path, Linux's `ip_defrag` in
//! `ip_local_deliver`: always in the graph, it sees only the fragments `ip4-local` sends
//! it (a fragment for this host that no defragmentation before tracking gathered), and
//! sends the datagram it makes whole back to `ip4-local`. It shares the host's store with
//! `ip4-defrag` (with tracking every fragment is gathered there first, and none comes
//! here), so it is one reassembler with one bound; the forwarding path never meets it.

use netbatch_engine::{Meta, Reason};

use super::header;
use super::icmp_error::{Cause, Request};
use crate::assemble::{GraphOptions, node};
use crate::declare::{Decl, Decode, To};
use crate::defrag::stage::Family;
use crate::defrag::{Config, Key, Piece, Store, reason};
use crate::dissect::L4;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

/// The IPv4 side of [`Defrag`](crate::defrag::stage::Defrag).
#[derive(Debug)]
pub struct V4;

/// Bytes of the transport header the first fragment must hold for protocol `l4`: what
/// tracking and the rules read of it.
pub(crate) fn first_needs(l4: L4) -> u32 {
    match l4 {
        L4::Tcp => 20,
        L4::Sctp => 12,
        L4::Udp | L4::UdpLite | L4::Icmp | L4::Icmpv6 => 8,
        L4::Other => 0,
    }
}

impl Family for V4 {
    fn timeout(cfg: &Config) -> u32 {
        cfg.timeout4
    }

    fn store(host: &mut Host) -> &mut Option<Box<Store>> {
        &mut host.defrag4
    }

    #[inline(always)]
    fn read(m: &Meta, d: &[u8]) -> Result<Option<(Piece, u32)>, Reason> {
        let Some(ip) = header(d) else {
            return Ok(None);
        };
        // A datagram made whole already (handed over by the worker that gathered it)
        // goes on as it is.
        if !ip.is_fragment() || m.flags & flag::DEFRAG_CHAIN != 0 {
            return Ok(None);
        }
        let ihl = ip.header_len() as u32;
        let len = (d.len() as u32).saturating_sub(ihl);
        let (off, more) = (u32::from(ip.frag_offset()), ip.more_frags());
        if len == 0 || more && !len.is_multiple_of(8) {
            return Err(reason::BAD_LENGTH);
        }
        if ihl + off + len > 65_535 {
            return Err(reason::OVERSIZE);
        }
        if off == 0 && len < first_needs(L4::of(m.l4_type)) {
            return Err(reason::TINY_FIRST);
        }
        let key = Key {
            src: u128::from(u32::from(ip.src())),
            dst: u128::from(u32::from(ip.dst())),
            id: u32::from(ip.ident()),
            proto: m.l4_type,
        };
        Ok(Some((
            Piece {
                key,
                off,
                len,
                more,
            },
            ihl,
        )))
    }

    fn answer_timeout(host: &Host, m: &mut Meta, d: &[u8]) -> bool {
        let local = header(d).is_some_and(|ip| host.is_local(ip.dst()));
        if local {
            Request::new(Cause::ReassemblyTimeout).put(m);
        }
        local
    }
}

/// Whether the graph defragments: with connection tracking.
pub(crate) fn present(o: &GraphOptions) -> bool {
    o.conntrack.is_some()
}

/// `ip4-defrag`: after `ip4-input`, before `ct-in`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::CT_IN, "accept")),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4]),
    writes: Fields::of(&[Field::Gso, Field::Ask]),
    present,
    ..Decl::new(node::IP4_DEFRAG, crate::defrag::stage::make::<V4>)
};

/// `ip4-reassemble`: fragments for this host, from `ip4-local` and back to it whole.
pub const LOCAL_DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Node(node::IP4_LOCAL)),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4]),
    writes: Fields::of(&[Field::Gso, Field::Ask]),
    ..Decl::new(node::IP4_REASSEMBLE, crate::defrag::stage::make::<V4>)
};
