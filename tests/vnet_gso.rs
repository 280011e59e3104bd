//! A TCP super-frame as the kernel hands it to an AF_PACKET or tap port (a virtio-net
//! header saying TSO, the checksum partial), imported by the port and segmented by the
//! stack's GSO, gives back the very segments a sender without TSO would have sent (built by
//! etherparse): the port's and the stack's halves of the offload contract, end to end.

use netbatch_engine::{Pool, PoolConfig};
use netbatch_packet::meta::gso;
use netbatch_ports::PortCx;
use netbatch_ports::frame_bytes;
use netbatch_ports::vnet::{F_NEEDS_CSUM, GSO_TCPV4, RxInfo, VnetHdr, import};
use netbatch_wire::checksum;

#[test]
fn tcp_super_frame_becomes_a_gso_packet_that_segments_into_the_original_segments() {
    let pool = Pool::new(PoolConfig {
        buffers: 256,
        ..PoolConfig::default()
    })
    .unwrap();
    let mut cache = pool.cache();
    // Five 1000-byte segments as a sender without TSO would have sent them.
    let payload: Vec<u8> = (0..4600u32).map(|i| (i * 7 % 251) as u8).collect();
    let seg = |i: usize, psh: bool| {
        let mut b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [198, 51, 100, 2], 64)
            .tcp(40000, 80, 1000 + (i * 1000) as u32, 512)
            .ack(77);
        if psh {
            b = b.psh();
        }
        let mut v = Vec::new();
        let end = ((i + 1) * 1000).min(payload.len());
        b.write(&mut v, &payload[i * 1000..end]).unwrap();
        v
    };
    let want: Vec<Vec<u8>> = (0..5).map(|i| seg(i, i == 4)).collect();
    // The super-frame: the first segment's headers with the total length, PSH, and
    // the pseudo-header sum over the whole TCP length in the checksum field.
    let big = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([192, 0, 2, 1], [198, 51, 100, 2], 64)
        .tcp(40000, 80, 1000, 512)
        .ack(77)
        .psh();
    let mut frame = Vec::new();
    big.write(&mut frame, &payload).unwrap();
    let ps = checksum::fold(checksum::pseudo_header_v4(
        [192, 0, 2, 1].into(),
        [198, 51, 100, 2].into(),
        6,
        (20 + payload.len()) as u16,
    ));
    frame[50..52].copy_from_slice(&ps.to_be_bytes());
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
    };
    let rx = RxInfo {
        in_port: 0,
        room: 1920,
        tag: None,
        hash: 0,
    };
    let mut cx = PortCx {
        pool: &pool,
        cache: &mut cache,
        now_ns: 0,
    };
    let (p, _) = import(&mut cx, &frame, &h, &rx).unwrap();
    {
        let m = pool.get(&p).meta;
        assert_eq!((m.gso_type, m.gso_size, m.segs), (gso::TCPV4, 1000, 5));
        assert_eq!(m.total_len as usize, frame.len());
        assert!(m.chain.is_some(), "4654 bytes do not fit one buffer");
    }
    assert_eq!(
        frame_bytes(&pool, &p),
        frame,
        "the chain holds the frame's bytes in order"
    );
    // What the stack's GSO makes of it: the segments a sender without TSO sends.
    let mut p = p;
    {
        let v = pool.get_mut(&mut p);
        v.meta.l3 = v.meta.data + 14;
        v.meta.l4 = v.meta.data + 34;
    }
    let mut out = Vec::new();
    let Ok(()) = netbatch_stack::gso::segment(&pool, &mut cache, p, &mut out) else {
        panic!("segmentation failed")
    };
    let got: Vec<Vec<u8>> = out.iter().map(|q| frame_bytes(&pool, q)).collect();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // IP IDs: etherparse writes 0 on every packet, GSO increments from the head's.
        let mut w = w.clone();
        w[18..20].copy_from_slice(&(i as u16).to_be_bytes());
        w[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&w[14..34]);
        w[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(g, &w, "segment {i}");
    }
    cache.free_all(&mut out);
    cache.flush();
    assert_eq!(pool.free_in_pool(), 256);
}
