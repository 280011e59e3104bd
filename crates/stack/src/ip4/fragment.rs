//! `ip4-fragment`: packets larger than their output MTU, sent here by the neighbour stage
//! (which checks the MTU of every packet on its way out), are fragmented (RFC 791 3.2,
//! "Fragmentation"; RFC 1812 4.2.2.7 requires routers to fragment) and go back to it:
//!
//! - every fragment but the last carries a multiple of 8 payload bytes;
//! - the first fragment keeps all options, later ones only options with the "copied"
//!   flag (RFC 791 3.1), padded to a 4-byte boundary;
//! - offsets add to the packet's own offset, and "more fragments" stays set on the last
//!   fragment when it was set on the packet (re-fragmenting a fragment).
//!
//! The first fragment reuses the packet's buffer; the others are new buffers (counted as
//! originated). If any buffer cannot be had, the whole packet is dropped (`NoBuffer`),
//! since a partial set of fragments can never be reassembled. A packet with DF is not
//! fragmented: a forwarded one is answered with ICMP fragmentation needed carrying the
//! MTU (RFC 1191), a local one is dropped (`FragNeeded`). Super-packets are checked by
//! their segment size; when their segments are too large and DF is clear they are
//! segmented (GSO) and each segment is fragmented.

use netbatch_engine::{Cx, Meta, Out, Pkt, PktList, Stage};
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::tcp::TcpPacket;

use super::header;
use super::icmp_error::{Cause, Request};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::{self, L4};
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why a packet longer than its output MTU is not sent.
    pub mod reason {
        FRAG_NEEDED = "frag_needed": "packet larger than the output MTU with DF set",
        FRAG_UNSUPPORTED = "frag_unsupported": "packet larger than the output MTU (no fragmentation)",
    }
}

netbatch_engine::arcs! {
    /// Arc back to the neighbour stage.
    pub OK = "ok";
    /// Arc to the ICMP error stage (fragmentation needed).
    pub ERROR = "error";
}

/// The fragmentation stage.
#[derive(Debug, Default)]
pub struct Ip4Fragment {
    /// Packets fragmented.
    pub fragmented: u64,
    /// Fragments produced.
    pub fragments: u64,
    spare: Vec<Pkt>,
    segs: Vec<Pkt>,
}

/// The options of a header that later fragments copy (RFC 791: option type bit 0x80),
/// padded with end-of-list bytes to a multiple of 4. `None` if the options are malformed.
fn copied_options(opts: &[u8], out: &mut [u8; 40]) -> Option<usize> {
    let mut n = 0;
    let mut i = 0;
    while let Some(&t) = opts.get(i) {
        match t {
            0 => break,
            1 => i += 1,
            t => {
                let len = usize::from(*opts.get(i + 1)?);
                let opt = opts.get(i..i + len).filter(|_| len >= 2)?;
                if t & 0x80 != 0 {
                    // At most the 40 bytes of options there are.
                    out.get_mut(n..n + len)?.copy_from_slice(opt);
                    n += len;
                }
                i += len;
            }
        }
    }
    let padded = n.div_ceil(4) * 4;
    out.get_mut(n..padded)?.fill(0);
    Some(padded)
}

impl Ip4Fragment {
    /// Splits `p` (data at its IPv4 header, longer than `mtu`) into fragments pushed to
    /// `out` in order, or drops it with a reason.
    fn fragment(&mut self, cx: &mut Cx<'_>, mut p: Pkt, mtu: usize, out: &mut Out) {
        let v = cx.pool.get(&p);
        let d = v.data();
        let (Some(ip), Some(&fixed)) = (header(d), d.first_chunk::<20>()) else {
            out.drop(p, crate::ip4::input::reason::TRUNCATED);
            return;
        };
        let ihl = ip.header_len();
        let total = d.len();
        let payload = total.saturating_sub(ihl);
        let (orig_off, orig_mf) = (usize::from(ip.frag_offset()), ip.more_frags());
        let mut opts = [0u8; 40];
        let Some(other_opts) = d.get(20..ihl).and_then(|o| copied_options(o, &mut opts)) else {
            out.drop(p, crate::ip4::input::reason::BAD_OPTIONS);
            return;
        };
        let Some(opts) = opts.get(..other_opts) else {
            out.drop(p, crate::ip4::input::reason::BAD_OPTIONS);
            return;
        };
        let other_ihl = 20 + other_opts;
        let first = mtu.saturating_sub(ihl) & !7;
        let other = mtu.saturating_sub(other_ihl) & !7;
        if first == 0 || other == 0 {
            out.drop(p, reason::FRAG_UNSUPPORTED);
            return;
        }
        let rest = payload.saturating_sub(first);
        let count = rest.div_ceil(other);
        // All buffers first: a partial set of fragments is useless.
        self.spare.clear();
        for _ in 0..count {
            match cx.cache.alloc() {
                Some(q) => self.spare.push(q),
                None => {
                    cx.cache.free_all(&mut self.spare);
                    out.drop(p, netbatch_engine::reason::NO_BUFFER);
                    return;
                }
            }
        }
        let (in_if, out_if, adj, flags) = (v.meta.in_if, v.meta.out_if, v.meta.adj, v.meta.flags);
        let mut frags = core::mem::take(&mut self.spare);
        let mut off = first;
        // The payload past the first fragment's, in pieces of `other` bytes: `count` of
        // them, one for each buffer.
        let tail = cx
            .pool
            .get(&p)
            .data()
            .get(ihl + first..)
            .unwrap_or_default();
        for (q, src) in frags.iter_mut().zip(tail.chunks(other)) {
            let n = src.len();
            let last = off + n == payload;
            let mut w = cx.pool.get_mut(q);
            let Some((b, body)) = w
                .append(other_ihl + n)
                .and_then(|b| b.split_at_mut_checked(other_ihl))
            else {
                unreachable!("a fragment fits a buffer the packet fit")
            };
            body.copy_from_slice(src);
            if let Some(f) = b.first_chunk_mut::<20>() {
                *f = fixed;
            }
            let mut h = Ipv4Packet::new_unchecked(b);
            h.set_header_len(other_ihl);
            h.options_mut().copy_from_slice(opts);
            h.set_total_len((other_ihl + n) as u16);
            h.set_frag_offset((orig_off + off) as u16);
            // The flags are the packet's (DF clear: a DF packet is answered instead).
            h.set_more_frags(!last || orig_mf);
            h.fill_checksum();
            (w.meta.in_if, w.meta.out_if, w.meta.adj, w.meta.flags) = (in_if, out_if, adj, flags);
            dissect::ip4_packet(&mut w);
            off += n;
        }
        // The first fragment is the packet itself, cut short.
        let mut v = cx.pool.get_mut(&mut p);
        v.truncate(ihl + first);
        if let Some(mut h) = v.data_mut().get_mut(..ihl).map(Ipv4Packet::new_unchecked) {
            h.set_total_len((ihl + first) as u16);
            h.set_more_frags(true);
            h.fill_checksum();
        }
        // Its record stands: truncating kept its headers where they were.
        self.fragmented += 1;
        self.fragments += 1 + frags.len() as u64;
        cx.originate(frags.len() as u64);
        out.push(OK, p);
        for q in frags.drain(..) {
            out.push(OK, q);
        }
        self.spare = frags;
    }
}

/// `ip4-fragment`, off the fast path: the neighbour stage sends what is too long here.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Node(node::NEIGHBOUR)),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL, super::input::reason::ALL],
    decode: Decode::Out,
    reads: Fields::of(&[
        Field::L3,
        Field::L4,
        Field::Adj,
        Field::OutIf,
        Field::InIf,
        Field::Origin,
        Field::Gso,
    ]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Ask]),
    ..Decl::new(node::IP4_FRAGMENT, |_| Box::new(Ip4Fragment::default()))
};

impl Stage<Host> for Ip4Fragment {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("fragmented", self.fragmented),
            ("fragments", self.fragments),
        ]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let mut cur_if = u16::MAX;
        let mut mtu = 0usize;
        for mut p in list.drain(..) {
            let v = cx.pool.get_mut(&mut p);
            if v.meta.out_if != cur_if {
                let Some(i) = host.ifaces.get(usize::from(v.meta.out_if)) else {
                    out.drop(p, netbatch_engine::reason::PORT_DOWN);
                    continue;
                };
                cur_if = v.meta.out_if;
                mtu = usize::from(i.mtu);
            }
            let d = v.data();
            let Some(ip) = header(d) else {
                out.push(OK, p);
                continue;
            };
            if wire_len(d, v.meta) <= mtu {
                out.push(OK, p);
            } else if ip.dont_frag() {
                if v.meta.flags & flag::FORWARDED != 0 {
                    // RFC 1191: tell the sender the MTU of the hop that is too small.
                    Request::with(Cause::FragNeeded, mtu as u32).put(v.meta);
                    out.push(ERROR, p);
                } else {
                    out.drop(p, reason::FRAG_NEEDED);
                }
            } else if v.meta.gso_size != 0 {
                // A super-packet whose segments are too large and may be fragmented:
                // segmented first, each segment then fragmented (the kernel's
                // `ip_finish_output_gso`).
                let mut segs = core::mem::take(&mut self.segs);
                match crate::gso::segment(cx.pool, cx.cache, p, &mut segs) {
                    Ok(()) => {
                        for q in segs.drain(..) {
                            if cx.pool.get(&q).meta.len as usize > mtu {
                                self.fragment(cx, q, mtu, out);
                            } else {
                                out.push(OK, q);
                            }
                        }
                    }
                    Err((p, r)) => out.drop(p, r),
                }
                self.segs = segs;
            } else {
                self.fragment(cx, p, mtu, out);
            }
        }
    }
}

/// The size on the wire of the IP packet `d` with metadata `m` (of a super-packet: of
/// each segment, its IP and L4 headers as the dissector located them).
#[inline]
pub(crate) fn wire_len(d: &[u8], m: &Meta) -> usize {
    if m.gso_size == 0 {
        return d.len();
    }
    let Some(ihl) = dissect::ihl(m) else {
        return d.len();
    };
    let l4 = match L4::of(m.l4_type) {
        L4::Tcp => d
            .get(ihl..)
            .and_then(|t| TcpPacket::new_checked(t).ok())
            .map_or(20, |t| t.header_len()),
        _ => 8,
    };
    ihl + l4 + usize::from(m.gso_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_copied_options_are_kept_and_padded() {
        // NOP, record route (type 7, not copied, len 7), security (type 130, copied, len 4)
        let opts = [1, 7, 7, 4, 0, 0, 0, 0, 130, 4, 0xaa, 0xbb, 0, 0, 0, 0];
        let mut o = [0xffu8; 40];
        assert_eq!(copied_options(&opts, &mut o), Some(4));
        assert_eq!(&o[..4], &[130, 4, 0xaa, 0xbb]);
        // A loose source route (type 131, copied, len 7) pads to 8.
        let lsrr = [131, 7, 4, 1, 2, 3, 4, 0];
        assert_eq!(copied_options(&lsrr, &mut o), Some(8));
        assert_eq!(&o[..8], &[131, 7, 4, 1, 2, 3, 4, 0]);
        assert_eq!(
            copied_options(&[130, 9, 0], &mut o),
            None,
            "runs past the end"
        );
        assert_eq!(copied_options(&[], &mut o), Some(0));
    }
}
