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

use crate::meta::flag;
use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};

use super::be16;
use crate::host::Host;

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
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            t => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 || i + len > opts.len() {
                    return None;
                }
                if t & 0x80 != 0 {
                    out[n..n + len].copy_from_slice(&opts[i..i + len]);
                    n += len;
                }
                i += len;
            }
        }
    }
    let padded = n.div_ceil(4) * 4;
    out[n..padded].fill(0);
    Some(padded)
}

impl Ip4Fragment {
    /// Splits `p` (data at its IPv4 header, longer than `mtu`) into fragments pushed to
    /// `out` in order, or drops it with a reason.
    fn fragment(&mut self, cx: &mut Cx<'_>, mut p: Pkt, mtu: usize, out: &mut Out) {
        let v = cx.pool.get(&p);
        let d = v.data();
        let ihl = usize::from(d[0] & 0x0f) * 4;
        let total = d.len();
        let payload = total - ihl;
        let flags_off = be16(d, 6);
        let orig_off = usize::from(flags_off & 0x1fff) * 8;
        let orig_mf = flags_off & 0x2000 != 0;
        let mut opts = [0u8; 40];
        let Some(other_opts) = copied_options(&d[20..ihl], &mut opts) else {
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
        let mut header = [0u8; 20];
        header.copy_from_slice(&d[..20]);
        let mut frags = core::mem::take(&mut self.spare);
        let mut off = first;
        for q in &mut frags {
            let n = other.min(payload - off);
            let last = off + n == payload;
            let src = &cx.pool.get(&p).data()[ihl + off..ihl + off + n];
            let mut w = cx.pool.get_mut(q);
            let Some(b) = w.append(other_ihl + n) else {
                unreachable!("a fragment fits a buffer the packet fit")
            };
            b[..20].copy_from_slice(&header);
            b[0] = 0x40 | (other_ihl / 4) as u8;
            b[20..other_ihl].copy_from_slice(&opts[..other_opts]);
            b[other_ihl..].copy_from_slice(src);
            b[2..4].copy_from_slice(&((other_ihl + n) as u16).to_be_bytes());
            let mf = if !last || orig_mf { 0x2000 } else { 0 };
            let fo = ((orig_off + off) / 8) as u16 | mf | (flags_off & 0x4000);
            b[6..8].copy_from_slice(&fo.to_be_bytes());
            netbatch_wire::ipv4::fill_header_checksum(b, other_ihl);
            w.meta.l3 = w.meta.data;
            w.meta.l4 = w.meta.data + other_ihl as u16;
            (w.meta.in_if, w.meta.out_if, w.meta.adj, w.meta.flags) = (in_if, out_if, adj, flags);
            off += n;
        }
        // The first fragment is the packet itself, cut short.
        let mut v = cx.pool.get_mut(&mut p);
        v.truncate(ihl + first);
        let h = v.data_mut();
        h[2..4].copy_from_slice(&((ihl + first) as u16).to_be_bytes());
        let fo = (orig_off / 8) as u16 | 0x2000 | (flags_off & 0x4000);
        h[6..8].copy_from_slice(&fo.to_be_bytes());
        netbatch_wire::ipv4::fill_header_checksum(h, ihl);
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
            if d.len() < 20 || wire_len(d, v.meta.gso_size) <= mtu {
                out.push(OK, p);
            } else if be16(d, 6) & 0x4000 != 0 {
                if v.meta.flags & flag::FORWARDED != 0 {
                    // RFC 1191: tell the sender the MTU of the hop that is too small.
                    v.meta.note = crate::ip4::icmp_error::Cause::FragNeeded.note();
                    v.meta.scratch = mtu as u32;
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

/// The size on the wire of the IP packet `d` (of a super-packet: of each segment).
#[inline]
pub(crate) fn wire_len(d: &[u8], gso_size: u16) -> usize {
    if gso_size == 0 {
        return d.len();
    }
    let ihl = usize::from(d[0] & 0x0f) * 4;
    ihl + super::forward::l4_header_len(d, ihl) + usize::from(gso_size)
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
