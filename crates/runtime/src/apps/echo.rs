//! UDP echo: every datagram read from its socket is sent back to its sender, in the same
//! buffer (addresses and ports swapped, a fresh IPv4 header, checksums recomputed), through
//! `ip4-local-out` like any application send.

use netbatch_engine::{Cx, Pkt};
use netbatch_stack::Host;
use netbatch_stack::meta::flag;
use std::sync::Arc;

use netbatch_stack::udp::socket::UdpSocket;
use netbatch_wire::checksum;

use super::App;

/// The echo application.
#[derive(Debug)]
pub struct UdpEcho {
    socket: Arc<UdpSocket>,
    batch: usize,
    buf: Vec<Pkt>,
    /// Datagrams echoed.
    pub echoed: u64,
    /// Datagrams that could not be echoed (malformed layout or too little headroom).
    pub failed: u64,
}

impl UdpEcho {
    /// An echo server reading `socket`.
    pub fn new(socket: Arc<UdpSocket>, batch: usize) -> Self {
        Self {
            socket,
            batch,
            buf: Vec::with_capacity(batch),
            echoed: 0,
            failed: 0,
        }
    }
}

/// Turns a queued datagram (starting at its IPv4 header, as the UDP stage leaves it) into
/// its echo. Returns `false` if the layout is not as expected.
fn make_echo(b: &mut netbatch_engine::PktMut<'_>, ident: u16) -> bool {
    let ihl = usize::from(b.meta.l4.wrapping_sub(b.meta.l3));
    if b.meta.data != b.meta.l3 || ihl < 20 {
        return false;
    }
    // Drop IP options: a fresh 20-byte header right before the UDP header.
    let d = b.data();
    if d.len() < ihl + 8 {
        return false;
    }
    let (src, dst, tos) = (
        [d[12], d[13], d[14], d[15]],
        [d[16], d[17], d[18], d[19]],
        d[1],
    );
    if !b.pull(ihl - 20) {
        return false;
    }
    let total = b.meta.len;
    let m = b.data_mut();
    m[0] = 0x45;
    m[1] = tos;
    m[2..4].copy_from_slice(&total.to_be_bytes());
    m[4..6].copy_from_slice(&ident.to_be_bytes());
    m[6..8].copy_from_slice(&[0, 0]);
    m[8] = 64;
    m[9] = 17;
    m[10..12].copy_from_slice(&[0, 0]);
    m[12..16].copy_from_slice(&dst);
    m[16..20].copy_from_slice(&src);
    let (sp, dp) = ([m[20], m[21]], [m[22], m[23]]);
    m[20..22].copy_from_slice(&dp);
    m[22..24].copy_from_slice(&sp);
    m[26..28].copy_from_slice(&[0, 0]);
    let ulen = u16::from_be_bytes([m[24], m[25]]);
    let acc = checksum::pseudo_header_v4(dst.into(), src.into(), 17, ulen);
    let end = (20 + usize::from(ulen)).min(m.len());
    let c = netbatch_wire::udp::checksum_on_wire(checksum::finish(checksum::sum(&m[20..end], acc)));
    m[26..28].copy_from_slice(&c.to_be_bytes());
    b.meta.l3 = b.meta.data;
    b.meta.l4 = b.meta.data + 20;
    b.meta.flags = (b.meta.flags & flag::TRACE) | flag::ORIGINATED;
    b.meta.out_if = u16::MAX;
    true
}

impl App for UdpEcho {
    fn name(&self) -> &str {
        "udp-echo"
    }

    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize {
        let n = self.socket.recv_batch(&mut self.buf, self.batch);
        for mut p in self.buf.drain(..) {
            let ident = host.next_ident();
            let ok = make_echo(&mut cx.pool.get_mut(&mut p), ident);
            // The application read the datagram (delivered) and sends a new one.
            cx.deliver(1);
            if ok {
                cx.originate(1);
                self.echoed += 1;
                host.injected.push(netbatch_stack::host::Entry::LocalOut, p);
            } else {
                self.failed += 1;
                cx.cache.free(p);
            }
        }
        n
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("echoed", self.echoed), ("failed", self.failed)]
    }
}
