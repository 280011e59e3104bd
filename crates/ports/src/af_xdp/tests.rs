//! Tests over real veth pairs (root only; they print a note and pass otherwise). Each
//! test creates its own pair (see `testnet`: tags `x…`), and a guard deletes it even on
//! a panic; the crate's one test lock runs them one at a time, with the other
//! kernel-facing tests; every loop is bounded in count and time.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use netbatch_engine::{BufCache, Layout, Pkt, PktList, Pool, PoolConfig};
use netbatch_packet::meta::flag;
use netbatch_packet::offload::Features;

use super::*;
use crate::sys;
use crate::testnet::{Bridge, Netns, Veth, ip, serial_as_root};

/// A packet socket on one interface, for the far end of the tests.
struct Raw(OwnedFd);

impl Raw {
    fn open(dev: &str) -> Self {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)).unwrap();
        let addr = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as u16,
            sll_protocol: proto,
            sll_ifindex: sys::ifindex(dev).unwrap() as i32,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        sys::bind(fd.as_raw_fd(), &addr).unwrap();
        let one: i32 = 1;
        // PACKET_IGNORE_OUTGOING: do not see our own transmissions.
        sys::setsockopt(fd.as_raw_fd(), libc::SOL_PACKET, 23, &one).unwrap();
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        sys::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv).unwrap();
        Self(fd)
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is a live byte slice of the length passed; the kernel only reads it.
        let r = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(r, frame.len() as isize, "{}", io::Error::last_os_error());
    }

    /// Sends each frame, in order.
    fn send_all(&self, frames: &[Vec<u8>]) {
        for f in frames {
            self.send(f);
        }
    }

    /// One frame, or `None` after the receive timeout.
    fn recv(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is a live, writable buffer of the length passed.
        let r = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let n = usize::try_from(r).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    /// Frames received until `want` marked ones came or `secs` passed.
    fn collect(&self, want: usize, secs: u64) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while got.len() < want && Instant::now() < deadline {
            if let Some(f) = self.recv()
                && is_marked(&f)
            {
                got.push(f);
            }
        }
        got
    }
}

/// The UDP destination port that marks the tests' own frames.
const MARK_PORT: u16 = 7777;

/// An Ethernet/IPv4/UDP frame to `dst` carrying `seq`, with a full checksum.
fn udp_frame(dst: [u8; 6], src: [u8; 6], sport: u16, seq: u16, pad: usize) -> Vec<u8> {
    let mut payload = b"nbx-af-xdp ".to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.resize(payload.len() + pad, 0x5a);
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
        .udp(sport, MARK_PORT);
    let mut v = Vec::new();
    b.write(&mut v, &payload).unwrap();
    v
}

/// `n` frames, frame `i` made by `make(i)`.
fn make_frames(n: u16, make: impl Fn(u16) -> Vec<u8>) -> Vec<Vec<u8>> {
    (0..n).map(make).collect()
}

fn is_marked(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[8, 0])
        && f.get(23) == Some(&17)
        && f.get(36..38) == Some(&MARK_PORT.to_be_bytes())
}

/// The summed length of `frames`, in bytes.
fn total_len(frames: &[Vec<u8>]) -> u64 {
    frames.iter().map(|f| f.len() as u64).sum()
}

/// The pseudo-header sum of the UDP datagram in an Ethernet/IPv4 frame (20-byte IPv4
/// header): what the checksum field of a partial checksum holds.
fn pseudo_sum(f: &[u8]) -> u16 {
    let ip = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
    netbatch_wire::checksum::fold(netbatch_wire::checksum::pseudo_header_v4(
        ip.source_addr(),
        ip.destination_addr(),
        17,
        ip.total_len() - 20,
    ))
}

/// Whether the UDP checksum of an Ethernet/IPv4/UDP frame is right.
fn udp_checksum_ok(f: &[u8]) -> bool {
    let ip = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
    let u = etherparse::UdpHeaderSlice::from_slice(&f[34..]).unwrap();
    let end = 14 + usize::from(ip.total_len());
    let want = u
        .to_header()
        .calc_checksum_ipv4(&ip.to_header(), &f[42..end])
        .unwrap();
    u.checksum() == want
}

fn spec(iface: &str, worker: usize, rx_member: Option<usize>, rx_members: usize) -> QueueSpec {
    QueueSpec {
        name: "x0".into(),
        index: 3,
        interface: iface.into(),
        worker,
        rx_member,
        rx_members,
        features: Features::default(),
        room: 1920,
    }
}

/// The specs of `n` workers that all receive on `iface`.
fn rx_specs(iface: &str, n: usize) -> Vec<QueueSpec> {
    (0..n).map(|w| spec(iface, w, Some(w), n)).collect()
}

/// The queues of `n` workers that all receive on `iface`, over `pool`.
fn rx_queues(iface: &str, n: usize, pool: &Pool) -> Vec<AfXdpQueue> {
    open_queues(&rx_specs(iface, n), pool).unwrap()
}

/// A pool of [`BUFFERS`] buffers laid out as `layout`.
fn test_pool(layout: Layout) -> Pool {
    Pool::with_layout(
        PoolConfig {
            buffers: BUFFERS,
            cache_size: 64,
            ..PoolConfig::default()
        },
        layout,
    )
    .unwrap()
}

fn xdp_shown(dev: &str) -> bool {
    ip(&format!("-d link show dev {dev}")).contains("prog/xdp")
}

/// Reads a counter of `/sys/class/net/DEV/statistics`.
fn dev_stat(dev: &str, what: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{what}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

const BUFFERS: u32 = 1024;

/// A test's bench: under the crate's test lock, a veth pair and its ends' MACs, and a
/// pool of [`BUFFERS`] buffers with a cache. Fields drop in order: the cache, the pool,
/// the pair, the lock last.
struct Bench {
    cache: BufCache,
    pool: Pool,
    v: Veth,
    ma: [u8; 6],
    mb: [u8; 6],
    _serial: MutexGuard<'static, ()>,
}

impl Bench {
    /// A bench whose pair is named after `tag` and has `queues` queues on each end;
    /// `None` when not root.
    fn new(tag: &str, queues: u32) -> Option<Self> {
        let serial = serial_as_root()?;
        let v = Veth::with_queues(tag, queues);
        let (ma, mb) = v.macs();
        let pool = test_pool(Layout::Padded);
        Some(Self {
            cache: pool.cache(),
            pool,
            v,
            ma,
            mb,
            _serial: serial,
        })
    }

    /// The context of one call on a queue.
    fn cx(&mut self) -> PortCx<'_> {
        PortCx {
            pool: &self.pool,
            cache: &mut self.cache,
            now_ns: netbatch_engine::time::mono_ns(),
        }
    }

    /// Each frame in a pool buffer of its own (in order).
    fn list(&mut self, frames: &[impl AsRef<[u8]>]) -> PktList {
        frames
            .iter()
            .map(|f| {
                let f = f.as_ref();
                let mut p = self.cache.alloc().expect("a free buffer");
                self.pool
                    .get_mut(&mut p)
                    .append(f.len())
                    .unwrap()
                    .copy_from_slice(f);
                p
            })
            .collect()
    }

    /// One frame in a chain of pool buffers, one buffer per part (the head's
    /// `total_len` covering them all, as the pool keeps it for chains).
    fn chain(&mut self, parts: &[&[u8]]) -> Pkt {
        let mut l = self.list(parts);
        let mut next = l.pop();
        while let Some(mut p) = l.pop() {
            self.pool.get_mut(&mut p).meta.chain = next;
            next = Some(p);
        }
        let mut head = next.expect("at least one part");
        self.pool.get_mut(&mut head).meta.total_len = parts.iter().map(|p| p.len() as u32).sum();
        head
    }

    /// One receive call on `q`, its frames freed at once; returns what `rx` returned.
    fn rx_discard(&mut self, q: &mut AfXdpQueue) -> u64 {
        let mut l = PktList::new();
        let n = q.rx(&mut self.cx(), &mut l, 64);
        self.cache.free_all(&mut l);
        n
    }

    /// Offers `frames` (copied into pool buffers) to `q` once; returns how many it took
    /// and the list of those it left.
    fn send(&mut self, q: &mut AfXdpQueue, frames: &[Vec<u8>]) -> (u64, PktList) {
        let mut l = self.list(frames);
        let n = q.tx(&mut self.cx(), &mut l);
        (n, l)
    }

    /// Receives on `qs` until `want` marked frames arrived or `secs` passed; returns them
    /// (bytes, in_port) and frees every buffer.
    fn receive(&mut self, qs: &mut [AfXdpQueue], want: usize, secs: u64) -> Vec<(Vec<u8>, u16)> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while got.len() < want && Instant::now() < deadline {
            for q in qs.iter_mut() {
                let mut l = PktList::new();
                q.rx(&mut self.cx(), &mut l, 64);
                for p in l {
                    let bytes = crate::frame_bytes(&self.pool, &p);
                    if is_marked(&bytes) {
                        got.push((bytes, self.pool.get(&p).meta.in_port));
                    }
                    self.cache.free(p);
                }
            }
            sys::wait_readable(&qs.iter().filter_map(|q| q.rx_fd()).collect::<Vec<_>>(), 5);
        }
        self.cache.flush();
        got
    }

    /// Calls `tx` on `q` with nothing to send (each call reaps the completion ring) until
    /// every buffer lent to the TX ring is back and `also` holds, or 2 s passed; then
    /// checks that every one is back.
    fn reap(&mut self, q: &mut AfXdpQueue, also: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while (q.lent().1 > 0 || !also()) && Instant::now() < deadline {
            q.tx(&mut self.cx(), &mut PktList::new());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(q.lent().1, 0, "every transmitted buffer completed");
    }

    /// Buffers the pool can hand out now: its free list and the bench's cache.
    fn free(&self) -> usize {
        self.pool.free_in_pool() + self.cache.cached()
    }

    /// Checks that every buffer is somewhere: free, lent by one of `qs`, or `held`.
    fn all_accounted(&self, qs: &[AfXdpQueue], held: usize) {
        let lent: usize = qs.iter().map(|q| (q.lent().0 + q.lent().1) as usize).sum();
        assert_eq!(
            self.free() + lent + held,
            BUFFERS as usize,
            "free {} + lent {lent} + held {held} = every buffer",
            self.free()
        );
    }

    /// Drops the queues, then checks that every buffer is back in the pool.
    fn finish(mut self, qs: Vec<AfXdpQueue>) {
        for q in &qs {
            assert_eq!(
                q.foreign_descriptors(),
                0,
                "every descriptor named a lent buffer"
            );
        }
        drop(qs);
        self.cache.flush();
        assert_eq!(
            self.pool.free_in_pool(),
            BUFFERS as usize,
            "every buffer back in the pool"
        );
    }
}

#[test]
fn frames_sent_by_the_peer_arrive_whole_and_in_order() {
    let Some(mut t) = Bench::new("xr", 1) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    eprintln!(
        "af_xdp on veth: zero-copy {}, need-wakeup {}, native XDP {:?}",
        qs[0].zero_copy(),
        qs[0].need_wakeup(),
        qs[0].native_xdp()
    );
    assert!(qs[0].rx_fd().is_some());
    assert!(xdp_shown(&t.v.a), "the program is attached");
    let raw = Raw::open(&t.v.b);
    let frames = make_frames(32, |i| {
        udp_frame(t.ma, t.mb, 1000 + i % 4, i, usize::from(i) * 37)
    });
    raw.send_all(&frames);
    let got = t.receive(&mut qs, frames.len(), 2);
    let bytes: Vec<Vec<u8>> = got.iter().map(|g| g.0.clone()).collect();
    assert_eq!(bytes, frames, "same bytes, same order");
    assert!(got.iter().all(|g| g.1 == 3), "in_port stamped");
    let s = qs[0].stats();
    assert!(s.rx_packets >= 32, "{s:?}");
    assert_eq!((s.rx_nobuf, s.rx_dropped), (0, 0), "{s:?}");
    assert_eq!(s.rx_bytes, total_len(&frames));
    assert!(qs[0].fault().is_none());
    // An idle queue polls without system calls.
    let before = qs[0].kicks();
    for _ in 0..1000 {
        t.rx_discard(&mut qs[0]);
    }
    eprintln!(
        "kicks before {before:?}, after 1000 idle polls {:?}",
        qs[0].kicks()
    );
    t.finish(qs);
}

#[test]
fn frames_sent_through_the_queue_reach_the_peer() {
    let Some(mut t) = Bench::new("xt", 1) else {
        return;
    };
    // A transmit-only queue: no program, no RX ring.
    let mut qs = open_queues(&[spec(&t.v.a, 0, None, 0)], &t.pool).unwrap();
    assert!(qs[0].rx_fd().is_none());
    assert_eq!(qs[0].native_xdp(), None);
    assert!(!xdp_shown(&t.v.a));
    let raw = Raw::open(&t.v.b);
    let frames = make_frames(32, |i| udp_frame(t.mb, t.ma, 2000, i, usize::from(i) * 41));
    let free = t.free();
    let (sent, left) = t.send(&mut qs[0], &frames);
    assert_eq!(sent, 32);
    assert!(left.is_empty(), "every frame taken");
    assert_eq!(
        qs[0].lent(),
        (0, 32),
        "a transmit-only queue lends no fill buffer"
    );
    assert_eq!(
        t.free(),
        free - 32,
        "the frames' own buffers are on the TX ring"
    );
    assert_eq!(qs[0].copied(), 0);
    let got = raw.collect(frames.len(), 2);
    assert_eq!(got, frames, "same bytes, same order");
    eprintln!("kicks for 32 frames: {:?}", qs[0].kicks());
    let s = qs[0].stats();
    assert_eq!((s.tx_packets, s.tx_refused), (32, 0));
    assert_eq!(s.tx_bytes, total_len(&frames));
    // Transmitted frames come back through the completion ring.
    t.reap(&mut qs[0], || true);
    assert_eq!(t.free(), free);
    t.finish(qs);
}

#[test]
fn chained_partial_and_oversize_frames_are_sent_completed_or_dropped() {
    let Some(mut t) = Bench::new("xc", 1) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    let raw = Raw::open(&t.v.b);

    // 1: a frame split over two chained buffers.
    let chained = udp_frame(t.mb, t.ma, 3000, 1, 1200);
    let head = t.chain(&[&chained[..800], &chained[800..]]);

    // 2: a frame whose UDP checksum holds only the pseudo-header sum.
    let full = udp_frame(t.mb, t.ma, 3001, 2, 100);
    let mut partial = full.clone();
    partial[40..42].copy_from_slice(&pseudo_sum(&full).to_be_bytes());
    let mut pp = t.chain(&[&partial]);
    let mut v = t.pool.get_mut(&mut pp);
    v.meta.flags |= flag::L4_CSUM_PARTIAL;
    // Located as the stack leaves what it sends.
    netbatch_packet::dissect::frame(&mut v);

    // 3: longer than a UMEM frame (two buffers).
    let big = t.chain(&[&[1; 1500], &[2; 1000]]);

    let mut l: PktList = vec![head, big, pp];
    assert_eq!(qs[0].tx(&mut t.cx(), &mut l), 2);
    assert!(l.is_empty());
    assert_eq!(qs[0].tx_dropped(), 1);
    assert_eq!(qs[0].copied(), 1, "only the chain was copied (joined)");
    // The caller hears of it once, to count it as dropped.
    assert_eq!(qs[0].take_unsendable(), 1);
    assert_eq!(qs[0].take_unsendable(), 0);
    let got = raw.collect(2, 2);
    assert_eq!(got, vec![chained, full], "chain joined, checksum completed");
    t.reap(&mut qs[0], || true);
    t.all_accounted(&qs, 0);
    t.finish(qs);
}

#[test]
fn a_missing_interface_or_too_few_queues_are_refused() {
    let Some(_g) = serial_as_root() else { return };
    let pool = test_pool(Layout::Padded);
    let e = open(&[spec("nbx-nosuch0", 0, Some(0), 1)], &pool)
        .err()
        .unwrap();
    assert!(matches!(e, PortError::NoInterface { .. }), "{e}");
    let v = Veth::with_queues("xq", 1);
    let e = open(&rx_specs(&v.a, 2), &pool).err().unwrap();
    assert!(matches!(e, PortError::Unsupported { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "port x0: af_xdp on {} needs one queue per worker: 2 workers, 1 queue (create the \
             interface with more queues or run fewer workers)",
            v.a
        )
    );
    assert!(!xdp_shown(&v.a), "nothing left attached");
    assert!(open(&[], &pool).unwrap().is_empty());
    // Buffers too short for a UMEM chunk: refused, saying which key.
    let small = Pool::new(PoolConfig {
        buffers: 64,
        buf_size: 1024,
        cache_size: 8,
        ..PoolConfig::default()
    })
    .unwrap();
    let e = open(&rx_specs(&v.a, 1), &small).err().unwrap();
    assert!(matches!(e, PortError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("pool.buf_size is 1024"), "{e}");
    assert!(!xdp_shown(&v.a), "nothing left attached");
    assert_eq!(pool.free_in_pool(), BUFFERS as usize, "nothing lent");
    assert_eq!(small.free_in_pool(), 64, "nothing lent");
}

#[test]
fn two_workers_on_a_two_queue_veth_receive_everything() {
    let Some(mut t) = Bench::new("xm", 2) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 2, &t.pool);
    assert_eq!((qs[0].queue_id(), qs[1].queue_id()), (0, 1));
    let raw = Raw::open(&t.v.b);
    let frames = make_frames(64, |i| udp_frame(t.ma, t.mb, 4000 + i % 16, i, 10));
    raw.send_all(&frames);
    let mut got: Vec<Vec<u8>> = t.receive(&mut qs, 64, 2).into_iter().map(|g| g.0).collect();
    got.sort();
    let mut want = frames.clone();
    want.sort();
    assert_eq!(got, want, "nothing lost, nothing doubled");
    t.finish(qs);
}

#[test]
fn the_program_is_detached_when_the_last_queue_goes() {
    let Some(_g) = serial_as_root() else { return };
    let v = Veth::with_queues("xd", 2);
    let pool = test_pool(Layout::Padded);
    let mut qs = rx_queues(&v.a, 2, &pool);
    assert!(xdp_shown(&v.a));
    let last = qs.pop().unwrap();
    drop(qs);
    assert!(xdp_shown(&v.a), "still attached while a queue lives");
    drop(last);
    let deadline = Instant::now() + Duration::from_secs(2);
    while xdp_shown(&v.a) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!xdp_shown(&v.a), "detached");
    // And the interface can be opened again at once.
    let qs = rx_queues(&v.a, 1, &pool);
    assert!(xdp_shown(&v.a));
    drop(qs);
    assert_eq!(pool.free_in_pool(), BUFFERS as usize, "every buffer back");
}

#[test]
fn an_interface_that_goes_away_is_a_fault() {
    let Some(mut t) = Bench::new("xf", 1) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    let name = t.v.a.clone();
    ip(&format!("link del {name}"));
    let deadline = Instant::now() + Duration::from_secs(2);
    let frame = [udp_frame([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1, 1, 0)];
    let mut rounds = 0;
    while qs[0].fault().is_none() && Instant::now() < deadline && rounds < 10_000 {
        rounds += 1;
        t.rx_discard(&mut qs[0]);
        let (_, mut left) = t.send(&mut qs[0], &frame);
        t.cache.free_all(&mut left);
        std::thread::sleep(Duration::from_millis(5));
    }
    let f = qs[0].fault().expect("fault seen within 2 s").to_string();
    assert!(f.contains("port x0") && f.contains(&name), "{f}");
    eprintln!("fault: {f}");
    assert!(qs[0].rx_fd().is_none(), "nothing to wait for");
    // Nothing moves any more; frames offered stay with the caller.
    assert_eq!(t.rx_discard(&mut qs[0]), 0);
    let (sent, mut left) = t.send(&mut qs[0], &frame);
    assert_eq!(sent, 0);
    assert_eq!(left.len(), 1, "refused frames stay in the list");
    t.cache.free_all(&mut left);
    t.finish(qs);
}

/// Sends `n` datagrams from 192.0.2.1 to 192.0.2.2:[`MARK_PORT`] through the stack of
/// namespace `ns` (from a thread that enters it, then ends).
fn send_udp_in(ns: &Netns, n: usize) {
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: a plain system call on a live descriptor; it moves only this thread
        // into the namespace, and the thread ends after sending.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
        let s = std::net::UdpSocket::bind("192.0.2.1:0").unwrap();
        for i in 0..n {
            s.send_to(format!("netbatch {i}").as_bytes(), ("192.0.2.2", MARK_PORT))
                .unwrap();
        }
    })
    .join()
    .unwrap();
}

/// What the stack of a veth peer sends arrives at the XSK socket as the peer left it:
/// with transmit checksum offload on (the veth default) the UDP checksum holds only the
/// pseudo-header sum; with it off the checksum is complete.
#[test]
fn checksums_from_an_offloading_veth_peer_arrive_partial() {
    let Some(mut t) = Bench::new("xk", 1) else {
        return;
    };
    let ns = Netns::new("xk");
    ns.take(&t.v.b, "192.0.2.1/24");
    ns.run(&format!(
        "ip neigh add 192.0.2.2 lladdr {} dev {} nud permanent",
        t.v.mac_a(),
        t.v.b
    ));
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    for offload in ["on", "off"] {
        if offload == "off" && !ns.succeeds(&format!("ethtool -K {} tx off", t.v.b)) {
            eprintln!("ethtool missing: transmit checksumming not turned off");
            break;
        }
        send_udp_in(&ns, 3);
        let got = t.receive(&mut qs, 3, 2);
        assert_eq!(got.len(), 3, "three datagrams with offload {offload}");
        let ok: Vec<bool> = got.iter().map(|g| udp_checksum_ok(&g.0)).collect();
        eprintln!("peer tx checksumming {offload}: checksums right {ok:?}");
        if offload == "on" {
            // The field holds exactly the pseudo-header sum the stack left for the device.
            // (Should this fail on a newer kernel, the XDP path now completes the sum and
            // the module's documented limit can go.)
            for g in &got {
                assert_eq!(
                    g.0[40..42],
                    pseudo_sum(&g.0).to_be_bytes(),
                    "partial checksum on the wire"
                );
            }
        } else {
            assert!(ok.iter().all(|&b| b), "complete checksums with offload off");
        }
    }
    t.finish(qs);
}

#[test]
fn many_frames_cycle_through_the_rings_both_ways() {
    const N: usize = 64 * 94;
    let Some(mut t) = Bench::new("xs", 1) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);

    // Transmit: more frames than the UMEM has, in bursts of 64; what the ring cannot take
    // now stays in the list and is offered again.
    let peer = t.v.b.clone();
    let peer_want = dev_stat(&peer, "rx_packets") + N as u64;
    let frame = udp_frame(t.mb, t.ma, 5000, 0, 18);
    let (mut sent, mut refused_calls) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut l = PktList::new();
    while sent < N && Instant::now() < deadline {
        let room = 64usize.min(N - sent).saturating_sub(l.len());
        l.extend(t.list(&vec![frame.clone(); room]));
        sent += qs[0].tx(&mut t.cx(), &mut l) as usize;
        if !l.is_empty() {
            refused_calls += 1;
        }
    }
    t.cache.free_all(&mut l);
    assert_eq!(sent, N, "all sent within 5 s");
    t.reap(&mut qs[0], || dev_stat(&peer, "rx_packets") >= peer_want);
    assert!(
        dev_stat(&peer, "rx_packets") >= peer_want,
        "the peer saw them all"
    );
    eprintln!(
        "tx: {N} frames, {refused_calls} calls left frames behind, kicks {:?}",
        qs[0].kicks()
    );

    // Receive: more frames than the fill ring lends, sent in bursts of 64 and drained
    // between bursts.
    let raw = Raw::open(&peer);
    let frame = udp_frame(t.ma, t.mb, 5001, 0, 18);
    let mut got = 0usize;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut burst = 0;
    while burst * 64 < N && Instant::now() < deadline {
        for _ in 0..64 {
            raw.send(&frame);
        }
        burst += 1;
        got += t.receive(&mut qs, 64, 1).len();
    }
    let s = qs[0].stats();
    eprintln!("rx: {got} of {N} frames, {s:?}");
    assert_eq!(got, N, "every frame received");
    assert_eq!(s.rx_dropped, 0);
    // Every buffer is free or lent to the fill ring, none lost on the way.
    assert_eq!(qs[0].lent(), (qs[0].fill_target(), 0));
    t.all_accounted(&qs, 0);
    t.finish(qs);
}

/// Receives on `q` until `want` frames are in `into` or 2 s passed (frames stay there).
fn pull(t: &mut Bench, q: &mut AfXdpQueue, into: &mut PktList, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while into.len() < want && Instant::now() < deadline {
        q.rx(&mut t.cx(), into, 64);
        if let Some(fd) = q.rx_fd() {
            sys::wait_readable(&[fd], 5);
        }
    }
}

/// The bytes of every packet of `l`, in order.
fn bytes_of(pool: &Pool, l: &PktList) -> Vec<Vec<u8>> {
    l.iter().map(|p| crate::frame_bytes(pool, p)).collect()
}

/// Whether `q` has buffer `i` lent to the kernel.
fn lent_by(q: &AfXdpQueue, i: u32) -> bool {
    q.lent.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// Frames land in the buffers already lent to the fill ring, whatever the pool holds; a
/// drained pool leaves the ring unrefilled (counted in `rx_nobuf`), and once the ring is
/// empty the kernel drops what arrives and counts it; buffers freed refill it.
#[test]
fn a_drained_pool_empties_the_fill_ring_and_every_drop_is_counted() {
    let Some(mut t) = Bench::new("xn", 1) else {
        return;
    };
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    let target = qs[0].fill_target();
    assert_eq!(target, BUFFERS / FILL_SHARE);
    assert_eq!(
        qs[0].lent(),
        (target, 0),
        "the fill ring is stocked at open"
    );
    t.all_accounted(&qs, 0);
    let raw = Raw::open(&t.v.b);
    // Hold every free buffer.
    let mut held = PktList::new();
    while let Some(p) = t.cache.alloc() {
        held.push(p);
    }
    assert_eq!(held.len() + target as usize, BUFFERS as usize);

    // 1: fewer frames than the fill ring holds: all arrive, none is replaced.
    let first = make_frames(32, |i| udp_frame(t.ma, t.mb, 6000, i, 0));
    raw.send_all(&first);
    let mut got = PktList::new();
    pull(&mut t, &mut qs[0], &mut got, 32);
    assert_eq!(bytes_of(&t.pool, &got), first, "none lost, order kept");
    assert_eq!(qs[0].stats().rx_nobuf, 32, "no buffer to replace them with");
    assert_eq!(qs[0].lent().0, target - 32);
    t.all_accounted(&qs, held.len() + got.len());

    // 2: more than the ring has left: the kernel drops the rest and counts it.
    let left = target - 32;
    let more = make_frames(left as u16 + 20, |i| udp_frame(t.ma, t.mb, 6001, i, 0));
    raw.send_all(&more);
    let mut got2 = PktList::new();
    pull(&mut t, &mut qs[0], &mut got2, left as usize);
    let deadline = Instant::now() + Duration::from_secs(2);
    while qs[0].stats().rx_dropped < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        bytes_of(&t.pool, &got2),
        more[..left as usize],
        "those with a buffer"
    );
    assert_eq!(
        qs[0].stats().rx_dropped,
        20,
        "the kernel counted those without"
    );
    assert_eq!(qs[0].stats().rx_nobuf, 32 + u64::from(left));
    assert_eq!(qs[0].lent().0, 0, "the fill ring is empty");
    t.all_accounted(&qs, held.len() + got.len() + got2.len());

    // 3: buffers come back: the next call refills the ring and frames arrive again.
    t.cache.free_all(&mut got);
    t.cache.free_all(&mut got2);
    t.cache.free_all(&mut held);
    t.rx_discard(&mut qs[0]);
    assert_eq!(qs[0].lent().0, target, "refilled");
    let last = make_frames(8, |i| udp_frame(t.ma, t.mb, 6002, i, 0));
    raw.send_all(&last);
    let back: Vec<Vec<u8>> = t.receive(&mut qs, 8, 2).into_iter().map(|g| g.0).collect();
    assert_eq!(back, last);
    assert_eq!(qs[0].stats().rx_dropped, 20, "nothing more dropped");
    t.all_accounted(&qs, 0);
    t.finish(qs);
}

/// af_xdp to af_xdp: a received frame leaves from the very buffer it arrived in. Its
/// buffer is the one lent to the TX ring, no buffer is taken from the pool and nothing
/// is copied; the peer gets the same bytes, and every buffer comes back.
#[test]
fn received_frames_leave_from_the_buffers_they_arrived_in() {
    let Some(mut t) = Bench::new("xz", 1) else {
        return;
    };
    let out = Veth::with_queues("xy", 1);
    let mut rxq = rx_queues(&t.v.a, 1, &t.pool);
    let mut txq = open_queues(&[spec(&out.a, 0, None, 0)], &t.pool).unwrap();
    let raw_in = Raw::open(&t.v.b);
    let raw_out = Raw::open(&out.b);
    let frames = make_frames(48, |i| {
        udp_frame(t.ma, t.mb, 7000 + i % 8, i, usize::from(i) * 29)
    });
    raw_in.send_all(&frames);
    let mut l = PktList::new();
    pull(&mut t, &mut rxq[0], &mut l, frames.len());
    assert_eq!(bytes_of(&t.pool, &l), frames);
    let indices: Vec<u32> = l.iter().map(Pkt::index).collect();
    for (p, &i) in l.iter().zip(&indices) {
        assert!(!lent_by(&rxq[0], i), "a received buffer is no longer lent");
        assert_eq!(t.pool.get(p).meta.data, 256, "the kernel's XDP headroom");
    }
    let free = t.free();
    assert_eq!(txq[0].tx(&mut t.cx(), &mut l), frames.len() as u64);
    assert!(l.is_empty(), "every frame taken");
    assert_eq!(txq[0].copied(), 0, "nothing copied");
    assert_eq!(t.free(), free, "no buffer taken from the pool");
    assert_eq!(txq[0].lent(), (0, frames.len() as u32));
    for &i in &indices {
        assert!(lent_by(&txq[0], i), "buffer {i} is on the TX ring");
    }
    assert_eq!(
        raw_out.collect(frames.len(), 2),
        frames,
        "same bytes, same order"
    );
    t.reap(&mut txq[0], || true);
    let mut qs = rxq;
    qs.append(&mut txq);
    t.all_accounted(&qs, 0);
    t.finish(qs);
}

/// Between af_xdp and a port of another kind a frame is copied once, by the other kind:
/// af_xdp to af_packet, the AF_XDP side copies nothing (the packet socket's send copies
/// it into the kernel's buffer); af_packet to af_xdp, the packet socket's receive copied
/// it into a pool buffer, and that buffer goes on the TX ring as it is.
#[test]
fn crossing_to_a_port_of_another_kind_copies_once() {
    let Some(mut t) = Bench::new("xo", 1) else {
        return;
    };
    let other = Veth::with_queues("xp", 1);
    let (oa, ob) = other.macs();
    let mut xq = rx_queues(&t.v.a, 1, &t.pool);
    let mut pq = crate::af_packet::open(&[spec(&other.a, 0, Some(0), 1)]).unwrap();
    let raw_x = Raw::open(&t.v.b);
    let raw_p = Raw::open(&other.b);

    // af_xdp in, af_packet out.
    let frames = make_frames(16, |i| udp_frame(t.ma, t.mb, 8000, i, 100));
    raw_x.send_all(&frames);
    let mut l = PktList::new();
    pull(&mut t, &mut xq[0], &mut l, frames.len());
    let free = t.free();
    assert_eq!(pq[0].tx(&mut t.cx(), &mut l), frames.len() as u64);
    assert!(l.is_empty());
    assert_eq!(
        t.free(),
        free + frames.len(),
        "sent and freed: the kernel copied them"
    );
    assert_eq!(raw_p.collect(frames.len(), 2), frames);
    assert_eq!(xq[0].copied(), 0);

    // af_packet in, af_xdp out.
    let back = make_frames(16, |i| udp_frame(oa, ob, 8001, i, 200));
    raw_p.send_all(&back);
    let mut l = PktList::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while l.len() < back.len() && Instant::now() < deadline {
        let mut got = PktList::new();
        pq[0].rx(&mut t.cx(), &mut got, 64);
        for p in got {
            if is_marked(&crate::frame_bytes(&t.pool, &p)) {
                l.push(p);
            } else {
                t.cache.free(p);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(bytes_of(&t.pool, &l), back);
    let indices: Vec<u32> = l.iter().map(Pkt::index).collect();
    let free = t.free();
    assert_eq!(xq[0].tx(&mut t.cx(), &mut l), back.len() as u64);
    assert_eq!(
        (xq[0].copied(), t.free()),
        (0, free),
        "sent from where it was"
    );
    assert!(indices.iter().all(|&i| lent_by(&xq[0], i)));
    assert_eq!(raw_x.collect(back.len(), 2), back);
    t.reap(&mut xq[0], || true);
    drop(pq);
    t.all_accounted(&xq, 0);
    t.finish(xq);
}

/// Zero-copy is asked for only over a page-tiled pool; veth has no zero-copy, so the
/// socket ends in copy mode either way, and says why.
#[test]
fn zero_copy_is_tried_on_a_page_tiled_pool_and_veth_refuses_it() {
    let Some(_g) = serial_as_root() else { return };
    let v = Veth::with_queues("xw", 1);
    assert!(!offers_zero_copy(&v.a), "veth has no zero-copy");
    assert_eq!(pool_layout([v.a.as_str()]), (Layout::Padded, None));
    for (layout, why) in [
        (Layout::Padded, "straddle pages"),
        (Layout::Pages, "refused by the driver"),
    ] {
        let pool = test_pool(layout);
        assert_eq!(zero_copy_fits(&pool), layout == Layout::Pages);
        let qs = rx_queues(&v.a, 1, &pool);
        assert!(!qs[0].zero_copy());
        let said = qs[0].copy_mode_why().unwrap_or_default().to_string();
        assert!(said.contains(why), "{layout:?}: {said}");
        let d = qs[0].describe();
        assert!(d.contains("copy mode") && d.contains(why), "{d}");
        eprintln!("{layout:?}: {d}");
        drop(qs);
        assert_eq!(pool.free_in_pool(), BUFFERS as usize);
    }
}

#[test]
fn a_second_program_on_the_interface_is_refused() {
    let Some(_g) = serial_as_root() else { return };
    let v = Veth::with_queues("xe", 2);
    let pool = test_pool(Layout::Padded);
    let first = rx_queues(&v.a, 1, &pool);
    // Another port on the other queue needs its own program: the interface has one.
    let e = open(&[spec(&v.a, 1, Some(0), 1)], &pool).err().unwrap();
    assert!(matches!(e, PortError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("already attached"), "{e}");
    assert!(xdp_shown(&v.a), "the first program stays");
    drop(first);
}

#[test]
fn a_bridge_without_native_xdp_gets_generic_mode() {
    let Some(_g) = serial_as_root() else { return };
    let br = Bridge::new("xg");
    let pool = test_pool(Layout::Padded);
    let qs = rx_queues(&br.name, 1, &pool);
    assert_eq!(qs[0].native_xdp(), Some(false));
    assert!(xdp_shown(&br.name));
    assert!(ip(&format!("-d link show dev {}", br.name)).contains("xdpgeneric"));
    drop(qs);
    assert!(!xdp_shown(&br.name));
}

/// Where the interface defers its interrupts to busy pollers, a receiving socket asks
/// to busy poll; a copy-mode socket (veth) gets no NAPI to poll from Linux 6.13 on, so it
/// turns busy polling off at its first frames, says so, and loses nothing either way.
#[test]
fn busy_polling_is_asked_for_where_the_interface_defers_and_dropped_without_a_napi() {
    let Some(mut t) = Bench::new("xb", 1) else {
        return;
    };
    let plain = rx_queues(&t.v.a, 1, &t.pool);
    assert!(!plain[0].busy_poll(), "no deferral set: no busy polling");
    drop(plain);
    for (what, v) in [
        ("napi_defer_hard_irqs", "2"),
        ("gro_flush_timeout", "200000"),
    ] {
        std::fs::write(format!("/sys/class/net/{}/{what}", t.v.a), v).unwrap();
    }
    let mut qs = rx_queues(&t.v.a, 1, &t.pool);
    assert!(qs[0].busy_poll(), "asked for");
    assert!(
        qs[0].describe().contains("preferred busy polling"),
        "{}",
        qs[0].describe()
    );
    let raw = Raw::open(&t.v.b);
    for round in 0..4u16 {
        let frames = make_frames(64, |i| udp_frame(t.ma, t.mb, 9000 + round, i, 10));
        raw.send_all(&frames);
        let got: Vec<Vec<u8>> = t.receive(&mut qs, 64, 2).into_iter().map(|g| g.0).collect();
        assert_eq!(got, frames, "round {round}: none lost, order kept");
    }
    let napi = qs[0].sock.napi_id().unwrap();
    eprintln!("NAPI id {napi}: {}", qs[0].describe());
    if napi == 0 {
        assert!(!qs[0].busy_poll(), "nothing to poll: turned off");
        assert!(
            qs[0].describe().contains("no NAPI to poll"),
            "{}",
            qs[0].describe()
        );
    } else {
        assert!(qs[0].busy_poll(), "a NAPI to poll (an older kernel): kept");
    }
    assert_eq!(qs[0].stats().rx_dropped, 0);
    t.all_accounted(&qs, 0);
    t.finish(qs);
}

/// The kernel-side source: an XDP program run on live frames redirects them to a veth,
/// whose peer receives them (through its NAPI, on as GRO turns it on) with their source
/// ports drawn from the flows'.
#[test]
fn the_xdp_source_sends_frames_into_a_veth() {
    let Some(_g) = serial_as_root() else { return };
    let v = Veth::new("xv");
    let (ma, mb) = v.macs();
    ip(&format!("link set {} up", v.b));
    let gro = std::process::Command::new("ethtool")
        .args(["-K", &v.b, "gro", "on"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        gro,
        "ethtool turns GRO on (veth's NAPI, which XDP frames need)"
    );
    let mut frame = udp_frame(mb, ma, 1024, 1, 10);
    frame[40..42].copy_from_slice(&[0, 0]);
    let raw = Raw::open(&v.b);
    let ifindex = sys::ifindex(&v.a).unwrap();
    let mut with_sum = frame.clone();
    with_sum[40] = 1;
    assert!(
        XdpSource::new(ifindex, &with_sum, 1024, 4).is_err(),
        "checksum refused"
    );
    assert!(
        XdpSource::new(ifindex, &frame[..30], 1024, 4).is_err(),
        "short refused"
    );
    let src = XdpSource::new(ifindex, &frame, 1024, 4).unwrap();
    // 16 at a time: a frame made from an XDP frame takes a page of the packet socket's
    // receive buffer.
    let mut got = Vec::new();
    for _ in 0..4 {
        src.run(16).unwrap();
        got.extend(raw.collect(16, 2));
    }
    assert_eq!(got.len(), 64, "every frame arrived");
    assert_eq!(dev_stat(&v.b, "rx_packets"), 64);
    let mut ports: Vec<u16> = got
        .iter()
        .map(|f| u16::from_be_bytes([f[34], f[35]]))
        .collect();
    assert!(
        got.iter().all(|f| f[36..] == frame[36..]),
        "only the port changes"
    );
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(
        ports,
        [1024, 1025, 1026, 1027],
        "four flows (64 draws miss none)"
    );
}

/// The peer's end goes down (this end loses its carrier, stays up): the kernel takes
/// what the queue hands it and drops it (its `tx_dropped`); the queue books exactly that
/// from the link's posted counter, so those frames are dropped (`kernel`), not counted
/// as sent. Once the link state says down, frames are refused as `link_down` without a
/// system call.
#[test]
fn frames_the_kernel_drops_without_carrier_are_not_counted_as_sent() {
    let Some(mut t) = Bench::new("xk", 1) else {
        return;
    };
    let mut qs = open_queues(&[spec(&t.v.a, 0, None, 0)], &t.pool).unwrap();
    let link = qs[0].link().expect("a link");
    link.post_tx_dropped(dev_stat(&t.v.a, "tx_dropped"));
    ip(&format!("link set {} down", t.v.b));
    let deadline = Instant::now() + Duration::from_secs(2);
    while sys::flags_of(&t.v.a).is_some_and(|f| f & libc::IFF_RUNNING as u32 != 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The link watch has not said so yet (there is none here): the frames go to the
    // kernel, which drops them for want of a carrier.
    let frames = make_frames(32, |i| udp_frame(t.mb, t.ma, 2100, i, 0));
    let (sent, left) = t.send(&mut qs[0], &frames);
    assert_eq!((sent, left.len()), (32, 0));
    t.reap(&mut qs[0], || true);
    let dropped = dev_stat(&t.v.a, "tx_dropped");
    link.post_tx_dropped(dropped);
    let d = qs[0].tx_drops(&mut t.cx());
    assert_eq!(
        d,
        TxDrops {
            link_down: 0,
            flushed: 0,
            kernel: 32
        }
    );
    assert_eq!(link.tx_dropped(), 32, "the interface's own counter");
    let s = qs[0].stats();
    assert_eq!((s.tx_packets, s.tx_kernel_dropped), (0, 32), "{s:?}");
    // Now the state says down: nothing reaches the kernel, not even a system call.
    assert!(link.set(true, false));
    let kicks = qs[0].kicks();
    let (sent, left) = t.send(&mut qs[0], &frames[..8]);
    assert_eq!((sent, left.len()), (0, 0));
    assert_eq!(
        qs[0].kicks(),
        kicks,
        "no system call while the link is down"
    );
    let d = qs[0].tx_drops(&mut t.cx());
    assert_eq!((d.link_down, d.kernel), (8, 0));
    assert_eq!(
        dev_stat(&t.v.a, "tx_dropped"),
        dropped,
        "the kernel saw none"
    );
    assert_eq!(qs[0].stats().tx_link_down, 8);
    t.finish(qs);
}

/// This end goes down while frames wait in the TX ring (the kernel refuses to send,
/// `ENETDOWN`, and keeps them): the queue takes them back at once, so when the link
/// returns they never leave, late; what is sent after does, and every buffer is back.
#[test]
fn frames_waiting_when_the_link_goes_down_never_leave() {
    let Some(mut t) = Bench::new("xd", 1) else {
        return;
    };
    let mut qs = open_queues(&[spec(&t.v.a, 0, None, 0)], &t.pool).unwrap();
    let raw = Raw::open(&t.v.b);
    let free = t.free();
    ip(&format!("link set {} down", t.v.a));
    let stale = make_frames(32, |i| udp_frame(t.mb, t.ma, 2200, i, 0));
    let (sent, left) = t.send(&mut qs[0], &stale);
    assert_eq!((sent, left.len()), (32, 0), "handed to the ring");
    assert_eq!(qs[0].lent().1, 32, "held by the kernel's ring");
    let d = qs[0].tx_drops(&mut t.cx());
    assert_eq!(d.flushed, 32, "{d:?}");
    let s = qs[0].stats();
    assert_eq!((s.tx_packets, s.tx_link_down), (0, 32), "{s:?}");
    ip(&format!("link set {} up", t.v.a));
    let deadline = Instant::now() + Duration::from_secs(2);
    while sys::flags_of(&t.v.a).is_some_and(|f| f & libc::IFF_RUNNING as u32 == 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let fresh = make_frames(8, |i| udp_frame(t.mb, t.ma, 2300, i, 0));
    let (sent, _) = t.send(&mut qs[0], &fresh);
    assert_eq!(sent, 8);
    let got = raw.collect(40, 1);
    assert_eq!(
        got.len(),
        fresh.len(),
        "only what was sent after the link returned"
    );
    assert_eq!(got, fresh);
    // The refused descriptors come back on the completion ring with the others.
    t.reap(&mut qs[0], || true);
    assert_eq!(t.free(), free, "every buffer is free again");
    assert_eq!(qs[0].stats().tx_packets, 8);
    t.finish(qs);
}
