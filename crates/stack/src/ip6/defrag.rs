//! `ip6-defrag`: IPv6 fragments gathered before connection tracking
//! ([`crate::defrag`]), after `ip6-input` and before `ct-in`; in the graph only with
//! tracking. A datagram is told by its source, destination and identification (RFC 8200
//! 4.5). Refused as they come, each counted: a fragment with no data, one not the last
//! whose data is not a multiple of 8 bytes (RFC 8200 4.5), one reaching past a 65,535-byte
//! payload, and a first fragment without the whole header chain and transport header
//! (RFC 7112; what tracking reads). A datagram that times out with its first fragment
//! received is answered with Time Exceeded, code 1 (RFC 8200 4.5), as Linux's conntrack
//! defragmentation does (`ip6frag_expire_frag_queue`).
//!
//! `ip6-reassemble` is the same stage on the local delivery path (Linux reassembles in
//! the Fragment header's handler, `ipv6_frag_rcv`, on the way to the upper layer): always
//! in the graph, fed only by `ip6-local` with fragments for this host, sending what it
//! makes whole back there, over the host's one IPv6 store.

use netbatch_engine::{Meta, Reason};
use netbatch_wire::ipv6::Ipv6Packet;

use super::{Cause, header};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::defrag::stage::Family;
use crate::defrag::{Config, Key, Piece, Store, reason};
use crate::dissect::{self, L4};
use crate::host::Host;
use crate::ip4::defrag::{first_needs, present};
use crate::meta::{Field, Fields, flag};

/// The IPv6 side of [`Defrag`](crate::defrag::stage::Defrag).
#[derive(Debug)]
pub struct V6;

impl Family for V6 {
    fn timeout(cfg: &Config) -> u32 {
        cfg.timeout6
    }

    fn store(host: &mut Host) -> &mut Option<Box<Store>> {
        &mut host.defrag6
    }

    #[inline(always)]
    fn read(m: &Meta, d: &[u8]) -> Result<Option<(Piece, u32)>, Reason> {
        // Not a fragment, or a datagram made whole already (handed over by the worker
        // that gathered it): on as it is.
        if m.flags & (flag::FRAG6 | flag::DEFRAG_CHAIN) != flag::FRAG6 {
            return Ok(None);
        }
        read6(m, d)
    }

    fn answer_timeout(_: &Host, m: &mut Meta, _: &[u8]) -> bool {
        super::icmp_error::Request::new(Cause::ReassemblyTimeout).put(m);
        true
    }
}

/// [`V6::read`] of a fragment. Out of line: whole packets do not carry it.
#[inline(never)]
pub(crate) fn read6(m: &Meta, d: &[u8]) -> Result<Option<(Piece, u32)>, Reason> {
    let Some(ip) = header(d) else {
        return Ok(None);
    };
    let Some(up) = Ipv6Packet::new_checked(d)
        .ok()
        .and_then(|v| dissect::ip6_walk(&v).ok())
    else {
        return Ok(None);
    };
    let Some(f) = up.fragment else {
        return Ok(None);
    };
    let data_at = f.at as u32 + 8;
    let len = (d.len() as u32).saturating_sub(data_at);
    let (off, more) = (u32::from(f.offset), f.more);
    if len == 0 || more && !len.is_multiple_of(8) {
        return Err(reason::BAD_LENGTH);
    }
    // The reassembled payload: the headers before the Fragment header, then the data.
    if data_at - 8 - 40 + off + len > 65_535 {
        return Err(reason::OVERSIZE);
    }
    if off == 0 {
        let upper = up.offset as u32 + first_needs(L4::of(m.l4_type));
        if upper > d.len() as u32 {
            return Err(reason::TINY_FIRST);
        }
    }
    let key = Key {
        src: u128::from(ip.src()),
        dst: u128::from(ip.dst()),
        id: f.ident,
        proto: 0,
    };
    Ok(Some((
        Piece {
            key,
            off,
            len,
            more,
        },
        data_at,
    )))
}

/// `ip6-defrag`: after `ip6-input`, before `ct-in`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::CT_IN, "accept6")),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4]),
    writes: Fields::of(&[Field::Gso, Field::Ask]),
    present,
    ..Decl::new(node::IP6_DEFRAG, crate::defrag::stage::make::<V6>)
};

/// `ip6-reassemble`: fragments for this host, from `ip6-local` and back to it whole.
pub const LOCAL_DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Node(node::IP6_LOCAL)),
        ("error", To::Node(node::IP6_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4]),
    writes: Fields::of(&[Field::Gso, Field::Ask]),
    ..Decl::new(node::IP6_REASSEMBLE, crate::defrag::stage::make::<V6>)
};
