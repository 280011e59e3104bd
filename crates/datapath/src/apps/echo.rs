//! UDP echo: every datagram read from its socket is sent back to its sender, in the same
//! buffer (addresses and ports swapped, a fresh IPv4 or IPv6 header without options or
//! extension headers, checksums recomputed), through `ip4-local-out` or `ip6-local-out`
//! like any application send.

use netbatch_engine::{Cx, Pkt};
use netbatch_stack::Host;
use netbatch_stack::meta::flag;
use std::sync::Arc;

use netbatch_stack::dissect::L3;
use netbatch_stack::host::Entry;
use netbatch_stack::udp::socket::UdpSocket;
use netbatch_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use netbatch_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use netbatch_wire::udp::UdpPacket;

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
    /// Datagrams reassembled from fragments, read and not echoed: the echo would be one
    /// datagram over several buffers, and netbatch fragments no such datagram it sends.
    pub reassembled: u64,
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
            reassembled: 0,
        }
    }
}

/// Turns a queued datagram (starting at its IPv4 header, as the UDP stage leaves it) into
/// its echo: a fresh 20-byte IPv4 header (options dropped) from us to its sender, the
/// ports swapped and the UDP checksum recomputed. Returns `false` if the datagram is not
/// whole (the UDP stage checked it; a bug otherwise).
fn make_echo(b: &mut netbatch_engine::PktMut<'_>, ident: u16) -> bool {
    if b.meta.data != b.meta.l3 {
        return false;
    }
    let Ok(ip) = Ipv4Packet::new_checked(b.data()) else {
        return false;
    };
    let ihl = ip.header_len();
    let Ok(udp) = UdpPacket::new_checked(&b.data()[ihl..]) else {
        return false;
    };
    // The reply goes back: its source is the request's destination.
    let reply = Ipv4Repr {
        src: ip.dst(),
        dst: ip.src(),
        protocol: Protocol::UDP,
        payload_len: 0,
        ttl: 64,
        dscp_ecn: ip.dscp_ecn(),
        ident,
        dont_frag: false,
    };
    let (sport, dport) = (udp.src_port(), udp.dst_port());
    if !b.pull(ihl - Ipv4Repr::HEADER_LEN) {
        return false;
    }
    let payload_len = b.data().len() - Ipv4Repr::HEADER_LEN;
    let (h, l4) = b.data_mut().split_at_mut(Ipv4Repr::HEADER_LEN);
    Ipv4Repr {
        payload_len,
        ..reply
    }
    .emit(&mut Ipv4Packet::new_unchecked(h));
    let mut udp = UdpPacket::new_unchecked(l4);
    udp.set_src_port(dport);
    udp.set_dst_port(sport);
    udp.fill_checksum(reply.src, reply.dst);
    b.meta.flags = (b.meta.flags & flag::TRACE) | flag::ORIGINATED;
    b.meta.out_if = u16::MAX;
    true
}

/// As [`make_echo`] for a datagram over IPv6 (its UDP header at `Meta::l4`, after any
/// extension headers, which the echo does not carry): a fresh 40-byte header from the
/// address it was sent to. A datagram sent to a link-local address is answered by the
/// interface it came in on.
fn make_echo6(b: &mut netbatch_engine::PktMut<'_>) -> bool {
    if b.meta.data != b.meta.l3 || b.meta.l4 < b.meta.l3 + 40 {
        return false;
    }
    let Ok(ip) = Ipv6Packet::new_checked(b.data()) else {
        return false;
    };
    let (src, dst) = (ip.dst(), ip.src());
    let ext = usize::from(b.meta.l4 - b.meta.l3) - Ipv6Repr::HEADER_LEN;
    if !b.pull(ext) {
        return false;
    }
    let payload_len = b.data().len() - Ipv6Repr::HEADER_LEN;
    let (h, l4) = b.data_mut().split_at_mut(Ipv6Repr::HEADER_LEN);
    let Ok(mut udp) = UdpPacket::new_checked(&mut *l4) else {
        return false;
    };
    Ipv6Repr {
        src,
        dst,
        next_header: Protocol::UDP,
        payload_len,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(h));
    let (sport, dport) = (udp.src_port(), udp.dst_port());
    udp.set_src_port(dport);
    udp.set_dst_port(sport);
    udp.set_checksum(0);
    let acc = netbatch_wire::checksum::pseudo_header_v6(src, dst, 17, payload_len as u32);
    let c = netbatch_wire::checksum::finish(netbatch_wire::checksum::sum(&*l4, acc));
    UdpPacket::new_unchecked(l4).set_checksum(netbatch_wire::udp::checksum_on_wire(c));
    let in_if = b.meta.in_if;
    b.meta.flags = (b.meta.flags & flag::TRACE) | flag::ORIGINATED;
    b.meta.out_if = if netbatch_wire::ipv6::is_link_local(dst) {
        in_if
    } else {
        u16::MAX
    };
    true
}

impl App for UdpEcho {
    fn name(&self) -> &str {
        "udp-echo"
    }

    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize {
        let n = self.socket.recv_batch(&mut self.buf, self.batch);
        for mut p in self.buf.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            if v.meta.chain.is_some() {
                // Read (delivered, as the wire packets it came as), not echoed.
                cx.deliver(v.meta.wire_packets());
                self.reassembled += 1;
                cx.cache.free(p);
                continue;
            }
            let (ok, entry) = if v.meta.l3_type == L3::Ipv6 as u8 {
                (make_echo6(&mut v), Entry::LocalOut6)
            } else {
                let ident = host.next_ident();
                (make_echo(&mut v, ident), Entry::LocalOut)
            };
            // The application read the datagram (delivered) and sends a new one.
            cx.deliver(1);
            if ok {
                cx.originate(1);
                self.echoed += 1;
                host.injected.push(entry, p);
            } else {
                self.failed += 1;
                cx.cache.free(p);
            }
        }
        n
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("echoed", self.echoed),
            ("failed", self.failed),
            ("reassembled", self.reassembled),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::{Pool, PoolConfig};

    /// A request with IP options, TOS 0x28 and TTL 3 (built by etherparse) becomes its
    /// echo, as etherparse reads it: addresses and ports swapped, a 20-byte header with
    /// TTL 64, the TOS kept and the given identification, valid header and UDP
    /// checksums, the payload untouched.
    #[test]
    fn a_request_becomes_its_echo() {
        let pool = Pool::new(PoolConfig {
            buffers: 8,
            cache_size: 4,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut cache = pool.cache();
        let headroom = usize::from(pool.config().headroom);
        let payload = b"echo me, please";
        let mut ip = etherparse::Ipv4Header::new(
            (8 + payload.len()) as u16,
            3,
            etherparse::IpNumber::UDP,
            [198, 51, 100, 7],
            [198, 51, 100, 1],
        )
        .unwrap();
        ip.dscp = etherparse::IpDscp::try_new(0x28 >> 2).unwrap();
        ip.options = [1, 1, 1, 0].into(); // NOP, NOP, NOP, end of options
        let udp = etherparse::UdpHeader::with_ipv4_checksum(4000, 7, &ip, payload).unwrap();
        let mut bytes = ip.to_bytes().to_vec();
        bytes.extend_from_slice(&udp.to_bytes());
        bytes.extend_from_slice(payload);

        let mut p = cache.alloc().unwrap();
        let mut v = pool.get_mut(&mut p);
        assert!(v.set_data(headroom, &bytes));
        v.meta.l3 = v.meta.data;
        assert!(make_echo(&mut v, 0x1234));

        let (h, rest) = etherparse::Ipv4Header::from_slice(v.data()).unwrap();
        assert_eq!(
            (h.source, h.destination),
            ([198, 51, 100, 1], [198, 51, 100, 7])
        );
        assert_eq!((h.time_to_live, h.dscp.value() << 2), (64, 0x28));
        assert_eq!((h.identification, h.options.len()), (0x1234, 0));
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        assert_eq!(usize::from(h.total_len), 20 + 8 + payload.len());
        let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
        assert_eq!((u.source_port, u.destination_port), (7, 4000));
        assert_eq!(data, payload);
        assert_eq!(u.checksum, u.calc_checksum_ipv4(&h, data).unwrap());
        assert!(v.meta.flags & flag::ORIGINATED != 0);
        cache.free(p);
    }
}
