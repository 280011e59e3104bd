//! A queue pair driven by hand-built rings in a hand-built guest memory: what the port
//! takes, refuses and writes is checked against the bytes and descriptors the test laid
//! out itself.

use super::*;
use crate::vhost_user::chain::tests::{desc, memory};
use netbatch_engine::{Pool, PoolConfig};
use vhost_user_backend::VringRwLock;
use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic};

const N: u32 = VRING_DESC_F_NEXT;
const W: u32 = VRING_DESC_F_WRITE;
/// The guest's receive ring (queue 0) and transmit ring (queue 1).
const RXQ_AT: u64 = 0x0;
const TXQ_AT: u64 = 0x4000;
const QSIZE: u16 = 16;

fn spec() -> QueueSpec {
    QueueSpec {
        name: "vm".into(),
        index: 3,
        interface: String::new(),
        worker: 0,
        rx_member: Some(0),
        rx_members: 1,
        features: Default::default(),
        room: 1920,
    }
}

/// A vring over `m` where the mock driver put its rings.
fn vring(m: &GuestMemoryMmap, vq: &MockSplitQueue<'_, GuestMemoryMmap>) -> VringRwLock {
    let v = VringRwLock::new(GuestMemoryAtomic::new(m.clone()), QSIZE).unwrap();
    v.set_queue_size(QSIZE);
    v.set_queue_info(vq.desc_table_addr().0, vq.avail_addr().0, vq.used_addr().0)
        .unwrap();
    v.set_queue_ready(true);
    v.set_enabled(true);
    v
}

/// Puts `descs` in the table and makes each head in `heads` available, in order.
fn offer(
    m: &GuestMemoryMmap,
    vq: &MockSplitQueue<'_, GuestMemoryMmap>,
    descs: &[RawDescriptor],
    heads: &[u16],
) {
    for (i, d) in descs.iter().enumerate() {
        vq.desc_table().store(i as u16, *d).unwrap();
    }
    let idx = vq.avail().idx().load();
    for (k, h) in heads.iter().enumerate() {
        let at = vq.avail_addr().0 + 4 + 2 * u64::from(idx.wrapping_add(k as u16) % QSIZE);
        m.write_obj(h.to_le(), GuestAddress(at)).unwrap();
    }
    vq.avail().idx().store(idx.wrapping_add(heads.len() as u16));
}

/// The used ring's entries so far: (head, length).
fn used(m: &GuestMemoryMmap, vq: &MockSplitQueue<'_, GuestMemoryMmap>) -> Vec<(u32, u32)> {
    let at = vq.used_addr().0;
    let n: u16 = m.read_obj(GuestAddress(at + 2)).unwrap();
    (0..u64::from(n))
        .map(|i| {
            let e = at + 4 + 8 * i;
            (
                m.read_obj::<u32>(GuestAddress(e)).unwrap(),
                m.read_obj::<u32>(GuestAddress(e + 4)).unwrap(),
            )
        })
        .collect()
}

/// A 60-byte Ethernet frame whose bytes are their own offsets.
fn frame() -> Vec<u8> {
    (0..60u8).collect()
}

/// Transmits one packet holding [`frame`] through `q`: what `tx` returned, and how many
/// packets it left with the caller (then freed).
fn transmit_frame(q: &mut VhostQueue, pool: &Pool) -> (u64, usize) {
    let mut cache = pool.cache();
    let mut p = cache.alloc().unwrap();
    pool.get_mut(&mut p)
        .append(60)
        .unwrap()
        .copy_from_slice(&frame());
    let mut l = vec![p];
    let mut cx = PortCx {
        pool,
        cache: &mut cache,
        now_ns: 0,
    };
    let sent = q.tx(&mut cx, &mut l);
    let left = l.len();
    for p in l {
        cache.free(p);
    }
    (sent, left)
}

/// Receives what `q` takes in one poll (of at most 64): how many frames (then freed).
fn receive(q: &mut VhostQueue, pool: &Pool) -> u64 {
    let mut cache = pool.cache();
    let mut out = PktList::new();
    let mut cx = PortCx {
        pool,
        cache: &mut cache,
        now_ns: 0,
    };
    let got = q.rx(&mut cx, &mut out, 64);
    for p in out {
        cache.free(p);
    }
    got
}

/// A UDP/IPv4 frame (etherparse's, checksum complete) and the same frame with its
/// checksum field holding only the pseudo-header sum, as for a device to complete.
fn udp_partial() -> (Vec<u8>, Vec<u8>) {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([192, 0, 2, 1], [198, 51, 100, 2], 64)
        .udp(1000, 2000);
    let mut good = Vec::new();
    b.write(&mut good, b"payload!").unwrap();
    let mut partial = good.clone();
    let ps = netbatch_wire::checksum::fold(netbatch_wire::checksum::pseudo_header_v4(
        [192, 0, 2, 1].into(),
        [198, 51, 100, 2].into(),
        17,
        16,
    ));
    partial[40..42].copy_from_slice(&ps.to_be_bytes());
    (good, partial)
}

fn acked_modern() -> u64 {
    1 << VIRTIO_F_VERSION_1 | 1 << VIRTIO_NET_F_MRG_RXBUF | 1 << VIRTIO_NET_F_GUEST_CSUM
}

struct Rig {
    m: GuestMemoryMmap,
    q: VhostQueue,
    pool: Pool,
}

fn rig(acked: u64) -> Rig {
    rig_with(acked, false)
}

/// A rig whose queues have EVENT_IDX on (`event_idx`) or off.
fn rig_with(acked: u64, event_idx: bool) -> Rig {
    let m = memory();
    let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
    let txq = MockSplitQueue::create(&m, GuestAddress(TXQ_AT), QSIZE);
    let vrings = vec![vring(&m, &rxq), vring(&m, &txq)];
    for v in &vrings {
        v.set_queue_event_idx(event_idx);
    }
    let conn = Conn {
        vrings,
        mem: GuestMemoryAtomic::new(m.clone()),
    };
    let shared = Arc::new(Shared::detached("vm", 1, acked, conn));
    let owner = Arc::new(Owner(shared.clone()));
    let q = VhostQueue::new(&spec(), &shared, &owner);
    let pool = Pool::new(PoolConfig {
        buffers: 64,
        ..PoolConfig::default()
    })
    .unwrap();
    Rig { m, q, pool }
}

#[test]
fn malformed_transmit_chains_are_returned_counted_and_never_read() {
    let Rig { m, mut q, pool } = rig(acked_modern());
    let txq = MockSplitQueue::create(&m, GuestAddress(TXQ_AT), QSIZE);
    m.write_slice(&frame(), GuestAddress(0x2_0000)).unwrap();
    offer(
        &m,
        &txq,
        &[
            // 0-1: a 12-byte header (all zero: no offload) and the frame.
            desc(0x1_0000, 12, N, 1),
            desc(0x2_0000, 60, 0, 0),
            // 2-3: a loop.
            desc(0x3_0000, 12, N, 3),
            desc(0x3_1000, 60, N, 2),
            // 4: write-only where the device reads.
            desc(0x3_2000, 72, W, 0),
            // 5: outside the guest's memory (1 MiB).
            desc(0x20_0000, 72, 0, 0),
            // 6: shorter than a header and an Ethernet header.
            desc(0x3_3000, 20, 0, 0),
            // 7: longer than any frame, inside memory.
            desc(0x0, 0xf_0000, 0, 0),
        ],
        &[0, 2, 4, 5, 6, 7, 40],
    );
    let mut cache = pool.cache();
    let mut out = PktList::new();
    let mut cx = PortCx {
        pool: &pool,
        cache: &mut cache,
        now_ns: 0,
    };
    assert_eq!(q.rx(&mut cx, &mut out, 64), 1);
    assert_eq!(out.len(), 1);
    let got = crate::frame_bytes(&pool, &out[0]);
    assert_eq!(got, frame());
    assert_eq!(pool.get(&out[0]).meta.in_port, 3);
    let s = q.stats();
    assert_eq!((s.rx_packets, s.rx_bytes, s.rx_dropped), (1, 60, 6));
    let st = q.status();
    let by = |n: &str| st.malformed.iter().find(|(k, _)| *k == n).unwrap().1;
    assert_eq!(by("vhost_chain_broken"), 1, "{st:?}");
    assert_eq!(by("vhost_chain_direction"), 1);
    assert_eq!(by("vhost_chain_memory"), 1);
    assert_eq!(by("vhost_frame_short"), 1);
    assert_eq!(by("vhost_frame_long"), 1);
    assert_eq!(by("vhost_chain_empty"), 1, "head 40 is past the table");
    // The queue's own receive reasons: the same six, adding up to its rx_dropped.
    let reasons = q.rx_drop_reasons();
    assert_eq!(reasons.iter().map(|r| r.2).sum::<u64>(), s.rx_dropped);
    let one = [
        "vhost_chain_empty",
        "vhost_chain_broken",
        "vhost_chain_direction",
        "vhost_chain_memory",
        "vhost_frame_short",
        "vhost_frame_long",
    ];
    for (name, description, n) in &reasons {
        assert_eq!(*n, u64::from(one.contains(name)), "{name}: {description}");
    }
    assert_eq!(
        reasons.len(),
        8,
        "seven kinds of chain and a refused offload"
    );
    // Every chain but the one past the table went back to the driver, unused (length 0);
    // the crate refuses to return a head past the table.
    assert_eq!(
        used(&m, &txq),
        [(0, 0), (2, 0), (4, 0), (5, 0), (6, 0), (7, 0)]
    );
    for p in out {
        cache.free(p);
    }
}

#[test]
fn a_partial_checksum_is_completed_on_receive() {
    let Rig { m, mut q, pool } = rig(acked_modern());
    let txq = MockSplitQueue::create(&m, GuestAddress(TXQ_AT), QSIZE);
    let (good, partial) = udp_partial();
    let h = VnetHdr {
        flags: vnet::F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 6,
        ..VnetHdr::default()
    };
    let mut hb = h.bytes().to_vec();
    hb.extend_from_slice(&[0, 0]);
    m.write_slice(&hb, GuestAddress(0x1_0000)).unwrap();
    m.write_slice(&partial, GuestAddress(0x2_0000)).unwrap();
    offer(
        &m,
        &txq,
        &[
            desc(0x1_0000, 12, N, 1),
            desc(0x2_0000, partial.len() as u32, 0, 0),
        ],
        &[0],
    );
    let mut cache = pool.cache();
    let mut out = PktList::new();
    let mut cx = PortCx {
        pool: &pool,
        cache: &mut cache,
        now_ns: 0,
    };
    assert_eq!(q.rx(&mut cx, &mut out, 64), 1);
    assert_eq!(
        crate::frame_bytes(&pool, &out[0]),
        good,
        "checksum as etherparse computes it"
    );
    for p in out {
        cache.free(p);
    }
}

#[test]
fn a_frame_spans_merged_receive_buffers_with_its_count_in_the_header() {
    let Rig { m, mut q, pool } = rig(acked_modern());
    let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
    offer(
        &m,
        &rxq,
        &[desc(0x5_0000, 40, W, 0), desc(0x5_1000, 40, W, 0)],
        &[0, 1],
    );
    assert_eq!(transmit_frame(&mut q, &pool), (1, 0));
    // 12 + 60 bytes: 40 in the first buffer, 32 in the second.
    assert_eq!(used(&m, &rxq), [(0, 40), (1, 32)]);
    let mut a = [0u8; 40];
    m.read_slice(&mut a, GuestAddress(0x5_0000)).unwrap();
    assert_eq!(&a[..10], &[0; 10], "no offload");
    assert_eq!(&a[10..12], &2u16.to_le_bytes(), "num_buffers");
    assert_eq!(&a[12..], &frame()[..28]);
    let mut b = [0u8; 32];
    m.read_slice(&mut b, GuestAddress(0x5_1000)).unwrap();
    assert_eq!(&b[..], &frame()[28..]);
    assert_eq!(q.stats().tx_packets, 1);
}

#[test]
fn without_merged_buffers_a_frame_too_big_for_a_buffer_is_unsendable() {
    // Legacy driver: 10-byte header, one buffer per frame.
    let Rig { m, mut q, pool } = rig(0);
    let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
    offer(&m, &rxq, &[desc(0x5_0000, 40, W, 0)], &[0]);
    assert_eq!(transmit_frame(&mut q, &pool), (0, 0));
    assert_eq!(q.take_unsendable(), 1);
    assert!(used(&m, &rxq).is_empty(), "the buffer stays the driver's");
    // A read-only buffer where the device writes: returned unused, counted, and the
    // frame stays with the caller.
    let Rig { m, mut q, pool } = rig(acked_modern());
    let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
    offer(&m, &rxq, &[desc(0x5_0000, 1500, 0, 0)], &[0]);
    assert_eq!(transmit_frame(&mut q, &pool), (0, 1));
    assert_eq!(used(&m, &rxq), [(0, 0)]);
    assert_eq!(q.status().malformed[Malformed::Direction.index()].1, 1);
}

#[test]
fn without_a_peer_transmitted_frames_are_counted_link_down() {
    let shared = Arc::new(
        Shared::new(
            "vm",
            "/nonexistent".into(),
            Mode::Client,
            1,
            256,
            backend::offered_features(1, false),
        )
        .unwrap(),
    );
    let owner = Arc::new(Owner(shared.clone()));
    *shared.done_for_test() = true;
    let mut q = VhostQueue::new(&spec(), &shared, &owner);
    let pool = Pool::new(PoolConfig {
        buffers: 8,
        ..PoolConfig::default()
    })
    .unwrap();
    let mut cache = pool.cache();
    let mut p = cache.alloc().unwrap();
    pool.get_mut(&mut p).append(60).unwrap();
    let mut l = vec![p];
    let mut cx = PortCx {
        pool: &pool,
        cache: &mut cache,
        now_ns: 0,
    };
    assert_eq!(q.tx(&mut cx, &mut l), 0);
    assert!(l.is_empty());
    assert_eq!(q.tx_drops(&mut cx).link_down, 1);
    assert!(!q.link().unwrap().up());
}

#[test]
fn open_refuses_what_it_cannot_serve() {
    let ep = Endpoint {
        socket: "/tmp".into(),
        mode: Mode::Server,
        queue_size: 100,
    };
    let e = open(&[spec()], &ep).err().unwrap().to_string();
    assert!(e.contains("queue_size 100"), "{e}");
    let mut s = spec();
    s.rx_member = None;
    let e = open(
        &[s],
        &Endpoint {
            queue_size: 256,
            ..ep.clone()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("must receive on every worker"), "{e}");
    let e = open(
        &[spec()],
        &Endpoint {
            socket: "/nonexistent-dir/x.sock".into(),
            queue_size: 256,
            ..ep
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("listening on /nonexistent-dir/x.sock"), "{e}");
}

#[test]
fn a_plain_frame_is_written_whole_into_one_buffer_after_an_empty_header() {
    // Modern (12-byte header with its buffer count) and legacy (10 bytes).
    for (acked, hl) in [(acked_modern(), 12usize), (0, 10)] {
        let Rig { m, mut q, pool } = rig(acked);
        let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
        // Stale bytes in the buffer: every byte of the header must be written.
        m.write_slice(&[0xee; 128], GuestAddress(0x5_0000)).unwrap();
        offer(&m, &rxq, &[desc(0x5_0000, 128, W, 0)], &[0]);
        assert_eq!(transmit_frame(&mut q, &pool), (1, 0));
        assert_eq!(used(&m, &rxq), [(0, (hl + 60) as u32)]);
        let mut b = [0u8; 128];
        m.read_slice(&mut b, GuestAddress(0x5_0000)).unwrap();
        // virtio 1.2 5.1.6: no flags, GSO_NONE, and (modern) num_buffers 1.
        let mut want = vec![0u8; 10];
        if hl == 12 {
            want.extend_from_slice(&1u16.to_le_bytes());
        }
        want.extend_from_slice(&frame());
        assert_eq!(&b[..hl + 60], &want[..]);
        assert_eq!(b[hl + 60], 0xee, "nothing written past the frame");
        assert_eq!((q.stats().tx_packets, q.stats().tx_bytes), (1, 60));
    }
}

#[test]
fn an_idle_receive_ring_asks_for_a_kick_at_the_index_it_stopped_at() {
    use virtio_bindings::bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
    let Rig { m, mut q, pool } = rig_with(acked_modern() | 1 << VIRTIO_RING_F_EVENT_IDX, true);
    let txq = MockSplitQueue::create(&m, GuestAddress(TXQ_AT), QSIZE);
    // The used ring's last field (virtio 1.2 2.7.8): where the device asks to be kicked.
    let avail_event = txq.used_addr().0 + 4 + 8 * u64::from(QSIZE);
    let event = || m.read_obj::<u16>(GuestAddress(avail_event)).unwrap();
    m.write_obj(0x7777u16, GuestAddress(avail_event)).unwrap();
    assert_eq!(receive(&mut q, &pool), 0);
    assert_eq!(event(), 0, "asked at index 0");
    // The request stands: a poll that finds the ring as it was does not make it again
    // (a value only this test writes stays).
    m.write_obj(0x7777u16, GuestAddress(avail_event)).unwrap();
    assert_eq!(receive(&mut q, &pool), 0, "still idle");
    assert_eq!(event(), 0x7777, "not asked again");
    // Two frames; the next poll takes both, the one after asks at index 2.
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&frame());
    m.write_slice(&f, GuestAddress(0x1_0000)).unwrap();
    offer(
        &m,
        &txq,
        &[desc(0x1_0000, 72, 0, 0), desc(0x1_0000, 72, 0, 0)],
        &[0, 1],
    );
    assert_eq!(receive(&mut q, &pool), 2, "an armed ring is still read");
    assert_eq!(receive(&mut q, &pool), 0);
    assert_eq!(event(), 2, "asked again where the poll stopped");
    assert_eq!(used(&m, &txq), [(0, 0), (1, 0)]);
    // The front-end moves the used ring (stopped and set up again, same index): the
    // request is made again in the new one.
    let moved = GuestAddress(TXQ_AT + 0x3000);
    let conn = q.shared.slot.lock().unwrap().clone().unwrap();
    let v = &conn.vrings[1];
    v.set_queue_info(txq.desc_table_addr().0, txq.avail_addr().0, moved.0)
        .unwrap();
    let at = moved.0 + 4 + 8 * u64::from(QSIZE);
    m.write_obj(0x7777u16, GuestAddress(at)).unwrap();
    assert_eq!(receive(&mut q, &pool), 0);
    assert_eq!(
        m.read_obj::<u16>(GuestAddress(at)).unwrap(),
        2,
        "asked in the new ring"
    );
}

#[test]
fn without_event_idx_kicks_are_turned_off_while_busy_and_on_when_idle() {
    let Rig { m, mut q, pool } = rig(acked_modern());
    let txq = MockSplitQueue::create(&m, GuestAddress(TXQ_AT), QSIZE);
    // The used ring's flags (virtio 1.2 2.7.8): VIRTQ_USED_F_NO_NOTIFY, the device's wish.
    let flags = || m.read_obj::<u16>(txq.used_addr()).unwrap();
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&frame());
    m.write_slice(&f, GuestAddress(0x1_0000)).unwrap();
    offer(&m, &txq, &[desc(0x1_0000, 72, 0, 0)], &[0]);
    assert_eq!(receive(&mut q, &pool), 1);
    assert_eq!(
        flags() & ring::USED_F_NO_NOTIFY,
        ring::USED_F_NO_NOTIFY,
        "busy"
    );
    assert_eq!(receive(&mut q, &pool), 0);
    assert_eq!(flags() & ring::USED_F_NO_NOTIFY, 0, "idle: kicks wanted");
    offer(&m, &txq, &[desc(0x1_0000, 72, 0, 0)], &[0]);
    assert_eq!(receive(&mut q, &pool), 1);
    assert_eq!(flags() & ring::USED_F_NO_NOTIFY, ring::USED_F_NO_NOTIFY);
    assert_eq!(receive(&mut q, &pool), 0);
    assert_eq!(
        flags() & ring::USED_F_NO_NOTIFY,
        0,
        "asked again after work"
    );
}

#[test]
fn a_partial_checksum_is_offloaded_or_completed_on_transmit() {
    let (good, partial) = udp_partial();
    // The driver takes partial checksums (GUEST_CSUM) or not.
    for csum in [true, false] {
        let acked = if csum {
            acked_modern()
        } else {
            acked_modern() & !(1 << VIRTIO_NET_F_GUEST_CSUM)
        };
        let Rig { m, mut q, pool } = rig(acked);
        let rxq = MockSplitQueue::create(&m, GuestAddress(RXQ_AT), QSIZE);
        offer(&m, &rxq, &[desc(0x5_0000, 256, W, 0)], &[0]);
        let mut cache = pool.cache();
        let mut l = vec![crate::partial_packet(&pool, &mut cache, &partial)];
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut cache,
            now_ns: 0,
        };
        assert_eq!(q.tx(&mut cx, &mut l), 1);
        let n = 12 + partial.len();
        assert_eq!(used(&m, &rxq), [(0, n as u32)]);
        let mut got = vec![0u8; n];
        m.read_slice(&mut got, GuestAddress(0x5_0000)).unwrap();
        let h = VnetHdr::parse(got[..10].try_into().unwrap());
        if csum {
            // virtio 1.2 5.1.6.2: the driver completes from csum_start, field at
            // csum_offset; the frame as the stack left it.
            assert_eq!(h.flags, vnet::F_NEEDS_CSUM);
            assert_eq!((h.csum_start, h.csum_offset), (34, 6));
            assert_eq!(&got[12..], &partial[..]);
        } else {
            assert_eq!(h.flags, 0);
            assert_eq!(&got[12..], &good[..], "checksum as etherparse computes it");
        }
    }
}
