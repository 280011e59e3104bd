//! `mem`: a port over in-memory frames. Receive takes frames from a queue, each once the
//! worker's clock has reached its timestamp; transmit records what leaves. The pcap port and the scenario tests are
//! built on it.
//!
//! A frame larger than a buffer's room is dropped at receive and counted
//! (`rx_dropped`), as a NIC drops an oversize frame; so is a frame that finds no free
//! buffer (`rx_nobuf`), as a NIC drops what arrives while its ring has no descriptors. Both
//! are reported to the worker ([`Port::take_rx_drops`]), which counts them as received
//! and dropped: every frame fed to the port is accounted for, and a replay never waits
//! for buffers that only later frames could free.

use std::collections::VecDeque;

use netbatch_engine::PktList;
use netbatch_packet::meta::gso;
use netbatch_packet::offload::Features;

use crate::{Carries, Port, PortCx, PortStats, RxDrops, frame_bytes};

/// What a `mem` port carries: anything (a super-packet is recorded whole).
pub const CARRIES: Carries = Carries::ANYTHING;

/// A frame that left through the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxFrame {
    /// Time it left (the worker's clock).
    pub ts_ns: u64,
    /// Its bytes (a super-packet taken whole is one frame with `segs > 1`).
    pub bytes: Vec<u8>,
    /// Wire packets it stands for.
    pub segs: u16,
    /// GSO segment size of a super-packet (0 for a plain frame).
    pub gso_size: u16,
}

/// The in-memory port.
#[derive(Debug)]
pub struct MemPort {
    name: String,
    index: u16,
    features: Features,
    room: usize,
    rx: VecDeque<(u64, Vec<u8>)>,
    tx: Vec<TxFrame>,
    stats: PortStats,
    drops: RxDrops,
}

impl MemPort {
    /// A port named `name` stamping `Meta::in_port = index`; `room` is the bytes a buffer
    /// holds after its headroom.
    pub fn new(name: &str, index: u16, room: usize) -> Self {
        Self {
            name: name.into(),
            index,
            features: Features::default(),
            room,
            rx: VecDeque::new(),
            tx: Vec::new(),
            stats: PortStats::default(),
            drops: RxDrops::default(),
        }
    }

    /// Declares offloads (e.g. `tx-tcp-segmentation` so super-packets are recorded whole).
    pub fn with_features(mut self, f: Features) -> Self {
        self.features = f;
        self
    }

    /// Queues a frame for reception at time `ts_ns`.
    pub fn push_rx(&mut self, ts_ns: u64, frame: Vec<u8>) {
        self.rx.push_back((ts_ns, frame));
    }

    /// Frames still waiting to be received.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }

    /// Timestamp of the next frame to be received.
    pub fn next_rx_ts(&self) -> Option<u64> {
        self.rx.front().map(|f| f.0)
    }

    /// Frames transmitted so far.
    pub fn tx_frames(&self) -> &[TxFrame] {
        &self.tx
    }

    /// Takes the transmitted frames.
    pub fn take_tx(&mut self) -> Vec<TxFrame> {
        core::mem::take(&mut self.tx)
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        let (mut n, mut seen) = (0, 0);
        // Dropped frames count against `max` too, so one call stays bounded.
        while seen < max {
            let Some((ts, frame)) = self.rx.front() else {
                break;
            };
            if *ts > cx.now_ns {
                // Not yet: frames arrive at their timestamps.
                break;
            }
            seen += 1;
            if frame.len() > self.room {
                self.stats.rx_dropped += 1;
                self.drops.too_long += 1;
                self.rx.pop_front();
                continue;
            }
            let Some(mut p) = cx.cache.alloc() else {
                self.stats.rx_nobuf += 1;
                self.drops.no_buffer += 1;
                self.rx.pop_front();
                continue;
            };
            let Some((_, frame)) = self.rx.pop_front() else {
                break;
            };
            let mut v = cx.pool.get_mut(&mut p);
            if let Some(b) = v.append(frame.len()) {
                b.copy_from_slice(&frame);
            }
            v.meta.in_port = self.index;
            if self.features.rx_checksum {
                // Located once: the stages read the record this leaves.
                netbatch_packet::dissect::frame(&mut v);
                let r = netbatch_packet::dissect::Dissected::load(v.meta);
                if l4_checksum_ok(&r, v.data()) {
                    v.meta.flags |= netbatch_packet::meta::flag::L4_CSUM_OK;
                }
            }

            self.stats.rx_packets += 1;

            self.stats.rx_bytes += frame.len() as u64;
            out.push(p);
            n += 1;
        }
        n as u64
    }

    fn take_rx_drops(&mut self) -> RxDrops {
        core::mem::take(&mut self.drops)
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        let mut wire = 0;
        for p in pkts.drain(..) {
            let v = cx.pool.get(&p);
            let (segs, gso_size) = (
                v.meta.segs.max(1),
                if v.meta.gso_type == gso::NONE {
                    0
                } else {
                    v.meta.gso_size
                },
            );
            let mut bytes = frame_bytes(cx.pool, &p);
            // What the device's checksum offload puts on the wire.
            crate::complete_partial(v.meta, &mut bytes);
            self.stats.tx_packets += u64::from(segs);
            self.stats.tx_bytes += bytes.len() as u64;
            self.tx.push(TxFrame {
                ts_ns: cx.now_ns,
                bytes,
                segs,
                gso_size,
            });
            wire += u64::from(segs);
            cx.cache.free(p);
        }
        wire
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Whether `frame`, dissected as `r`, is Ethernet (VLAN tags allowed) / IPv4 or IPv6 / TCP or
/// UDP with a valid L4 checksum: what a NIC with receive checksum offload reports.
fn l4_checksum_ok(r: &netbatch_packet::dissect::Dissected, frame: &[u8]) -> bool {
    use netbatch_packet::dissect::{L3, L4};
    use netbatch_wire::checksum;
    let Some(kind @ (L4::Tcp | L4::Udp)) = r.l4_kind() else {
        return false;
    };
    if r.l3_type == L3::Ipv6 {
        return l4_checksum6_ok(r, kind, frame);
    }
    if r.l3_type != L3::Ipv4 {
        return false;
    }
    let ip = &frame[usize::from(r.l3)..];
    let Ok(p) = netbatch_wire::ipv4::Ipv4Packet::new_checked(ip) else {
        return false;
    };
    if p.is_fragment() || usize::from(p.total_len()) > ip.len() {
        return false;
    }
    let l4 = p.payload();
    if kind == L4::Udp
        && netbatch_wire::udp::UdpPacket::new_checked(l4).is_ok_and(|u| u.checksum() == 0)
    {
        return false; // no checksum to validate
    }
    let len = u16::try_from(l4.len()).unwrap_or(u16::MAX);
    checksum::fold(checksum::sum(
        l4,
        checksum::pseudo_header_v4(p.src(), p.dst(), r.l4_type, len),
    )) == 0xffff
}

/// [`l4_checksum_ok`] over IPv6 (RFC 8200 8.1 pseudo-header): a whole packet (not a
/// fragment) within the frame, and a UDP checksum that is not zero (over IPv6 a zero one
/// is no checksum to validate either).
fn l4_checksum6_ok(
    r: &netbatch_packet::dissect::Dissected,
    kind: netbatch_packet::dissect::L4,
    frame: &[u8],
) -> bool {
    use netbatch_wire::checksum;
    let ip = &frame[usize::from(r.l3)..];
    let Ok(p) = netbatch_wire::ipv6::Ipv6Packet::new_checked(ip) else {
        return false;
    };
    let end = netbatch_wire::ipv6::HEADER_LEN + usize::from(p.payload_len());
    let at = usize::from(r.l4 - r.l3);
    if r.flags & netbatch_packet::meta::flag::FRAG6 != 0 || end > ip.len() || at > end {
        return false;
    }
    let l4 = &ip[at..end];
    if kind == netbatch_packet::dissect::L4::Udp
        && netbatch_wire::udp::UdpPacket::new_checked(l4).is_ok_and(|u| u.checksum() == 0)
    {
        return false;
    }
    let pseudo = checksum::pseudo_header_v6(p.src(), p.dst(), r.l4_type, l4.len() as u32);
    checksum::verifies(checksum::sum(l4, pseudo))
}

#[cfg(test)]
mod tests {
    use netbatch_engine::{Pool, PoolConfig};

    use super::*;

    fn four_buffers() -> Pool {
        Pool::new(PoolConfig {
            buffers: 4,
            cache_size: 4,
            ..PoolConfig::default()
        })
        .expect("pool")
    }

    /// Like a NIC, the port drops what it cannot take instead of holding it back: a frame
    /// longer than a buffer, and frames arriving while no buffer is free. Each is counted
    /// once, in the port's counters and in what the caller is told.
    #[test]
    fn frames_without_a_buffer_or_too_long_are_dropped_and_reported() {
        let pool = four_buffers();
        let mut cache = pool.cache();
        let room = pool.config().room();
        let mut port = MemPort::new("m0", 0, room);
        port.push_rx(0, vec![0xaa; room + 1]);
        for i in 0..6u8 {
            port.push_rx(0, vec![i; 60]);
        }
        // A frame not due yet stays.
        port.push_rx(10, vec![9; 60]);
        let mut out = Vec::new();
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut cache,
            now_ns: 5,
        };
        // Seven frames are due: one too long, four get the pool's four buffers, two
        // find none.
        assert_eq!(port.rx(&mut cx, &mut out, 64), 4);
        assert_eq!(out.len(), 4);
        let firsts: Vec<u8> = out.iter().map(|p| pool.get(p).data()[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 3], "in arrival order");
        assert_eq!(
            port.take_rx_drops(),
            RxDrops {
                no_buffer: 2,
                too_long: 1
            }
        );
        assert_eq!(port.take_rx_drops(), RxDrops::default(), "reported once");
        let s = port.stats();
        assert_eq!((s.rx_packets, s.rx_dropped, s.rx_nobuf), (4, 1, 2));
        assert_eq!(port.rx_pending(), 1);
        cache.free_all(&mut out);
        cache.flush();
    }

    /// One call looks at no more than `max` frames, dropped ones included.
    #[test]
    fn a_call_is_bounded_by_max_even_when_dropping() {
        let pool = four_buffers();
        let mut cache = pool.cache();
        let room = pool.config().room();
        let mut port = MemPort::new("m0", 0, room);
        for _ in 0..10 {
            port.push_rx(0, vec![0; room + 1]);
        }
        let mut out = Vec::new();
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut cache,
            now_ns: 0,
        };
        assert_eq!(port.rx(&mut cx, &mut out, 3), 0);
        assert_eq!(port.rx_pending(), 7);
        assert_eq!(port.take_rx_drops().too_long, 3);
    }
}
