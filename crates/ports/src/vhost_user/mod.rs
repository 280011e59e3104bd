//! `vhost_user`: frames exchanged with a virtual machine (QEMU) or a DPDK `virtio_user`
//! peer over shared-memory virtio rings; netbatch is the vhost-user *backend* (the
//! device), the peer the driver. The protocol is the rust-vmm crates' (`vhost`,
//! `vhost-user-backend`), the queues' state `virtio-queue`'s, the peer's memory
//! `vm-memory`'s (bounds-checked volatile accesses); a burst reads and writes the rings
//! through those slices itself ([`ring`]: one available-index read and one used-index
//! store per burst, where the crate's per-chain calls did both for every chain): this
//! module has no `unsafe`.
//!
//! Invariants:
//! - queue pair N (receiveq 2N, transmitq 2N + 1) belongs to worker N: a port offers
//!   one pair per worker and every worker receives (the driver picks the transmit queue,
//!   a queue nobody read would strand its flows); a worker whose pair the driver did not
//!   enable transmits on pair 0, under the vring's lock;
//! - a worker pops, checks and returns every chain of a burst under the vring's write
//!   lock ([`ring`], [`chain`]): a malformed chain (empty, broken, wrong direction,
//!   outside the peer's memory, too many descriptors, too short or long) is returned to
//!   the driver (a used entry of length 0), counted by reason and as `rx_dropped`;
//!   nothing of it is read; a frame with no free buffer stays in the ring (`rx_nobuf`);
//!   a queue whose rings are not each in one region of the peer's memory is not served
//!   (counted, as DPDK's vhost library refuses such a ring);
//! - the driver's virtio-net header (10 bytes, 12 with VERSION_1 or MRG_RXBUF) maps to
//!   netbatch's offloads as for tap ([`crate::vnet`]): partial checksums completed and
//!   marked verified, TCP super-frames (HOST_TSO4/6) imported as GSO super-packets; on
//!   transmit a partial checksum goes as `NEEDS_CSUM` when the driver acked GUEST_CSUM
//!   and is completed here otherwise; a super-packet goes whole only when the driver
//!   acked GUEST_TSO4/6 (offered only with `tx-tcp-segmentation`), else it is counted
//!   unsendable;
//! - notifications (virtio 1.2 §2.7.7, §2.7.10): while a burst finds work the driver's
//!   kicks are off (`VRING_USED_F_NO_NOTIFY`; with EVENT_IDX the avail event is left
//!   where the last empty poll put it, so the driver kicks once on passing it); an empty
//!   poll turns them back on, and wakes its own worker when a chain came in before the
//!   driver could see that (no kick would come for it); kicks for receive buffers given
//!   back are off once a frame was written (the worker looks at that queue at each
//!   transmit and never waits on it); the driver is signalled after a burst only when it asked (EVENT_IDX's used
//!   event crossed by the burst's entries, or no `VRING_AVAIL_F_NO_INTERRUPT` without
//!   EVENT_IDX);
//! - a peer that goes away takes the link down (frames given to `tx` are freed and
//!   counted `link_down`); the next connection (a server socket accepts again, a client
//!   socket reconnects with backoff) brings it back, counted in `connections`.
//!
//! Where bytes are copied, and why:
//! - guest → netbatch: once, from the driver's buffers into a pool buffer, header and
//!   frame together (the header lands in the buffer's headroom), for a frame without
//!   offload that fits one buffer (the common case); a frame with a partial checksum or
//!   a super-frame is gathered into the queue's scratch buffer (a small one after that
//!   first copy was found to carry offloads) and then imported by
//!   [`crate::vnet::import`], which reads its headers from that private copy. The
//!   frame cannot stay in guest memory: netbatch's packets are pool buffers that
//!   outlive the burst, the driver reuses a buffer once it is returned, and
//!   holding descriptors until a frame leaves would tie the guest's ring to netbatch's
//!   queues and break the per-burst rule a stop relies on;
//! - netbatch → guest: once, from the pool buffers into the driver's receive buffers
//!   (which the guest owns). This is what DPDK's vhost library does by default too.
#![deny(unsafe_code)]

mod backend;
pub mod chain;
pub mod driver;
pub mod ring;

use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use netbatch_engine::{Pkt, PktList};
use netbatch_packet::meta::{flag, gso};
use vhost_user_backend::VringT;
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_net::{
    VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
    VIRTIO_NET_F_MRG_RXBUF,
};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryMmap, VolatileMemory};

pub use backend::Mode;
use backend::{Conn, Shared};
use chain::{ChainBytes, Malformed, Segments, Writer};
use ring::{Memory, Ring};

use crate::sys::PortError;
use crate::vnet::{self, ImportError, RxInfo, VnetHdr};
use crate::{Carries, Port, PortCx, PortStats, QueueSpec, TxDrops};

/// What a vhost-user port carries: TCP super-packets go whole with their virtio-net
/// header (when the driver takes them), fraglist chains have no such header form.
pub const CARRIES: Carries = Carries {
    tx_offloads_refused: &["tx-gso-list", "tx-udp-segmentation"],
    max_frame: None,
    min_buf_size: None,
};

/// The longest frame taken from a driver: a 64 KiB super-frame with its link header and
/// a VLAN tag (as tap reads).
const FRAME_MAX: usize = 65_535 + 22;
/// Chains one frame may fill on the guest's receive queue (MRG_RXBUF).
const MAX_BUFFERS: usize = 32;

/// Where and how a port's socket is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The Unix socket's path.
    pub socket: PathBuf,
    /// Whether netbatch listens or connects.
    pub mode: Mode,
    /// The largest ring the driver may set up (a power of two, 64 to 1024).
    pub queue_size: u16,
}

/// Counters of a port (every queue's and the socket's), for `show` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Connections made.
    pub connections: u64,
    /// Connections that ended.
    pub disconnects: u64,
    /// Virtio features the current driver acked (0 when none is connected).
    pub acked: u64,
    /// Chains refused, by reason ([`Malformed::name`], [`Malformed::ALL`] order).
    pub malformed: Vec<(&'static str, u64)>,
    /// Queue pairs not served because a ring was not in one region of the peer's memory
    /// (once per connection and pair).
    pub rings_unmapped: u64,
}

/// Stops the socket thread when the last queue of the port goes.
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// One worker's queue pair of a `vhost_user` port.
pub struct VhostQueue {
    spec: QueueSpec,
    shared: Arc<Shared>,
    _owner: Arc<Owner>,
    generation: u64,
    conn: Option<Arc<Conn>>,
    acked: u64,
    hdr_len: usize,
    segs: Segments,
    first: Segments,
    used: Vec<(u16, u32)>,
    scratch: Vec<u8>,
    stats: PortStats,
    /// Frames of the driver's transmit ring dropped here, by reason: [`Malformed::ALL`]'s,
    /// then offloads refused. They add up to `stats.rx_dropped`.
    rx_bad: [u64; RX_REASONS],
    link_down: u64,
    unsendable: u64,
    /// A ring not in one region was reported for this connection.
    unmapped_said: bool,
    /// Where the receive ring's last poll found nothing and asked to be kicked (see
    /// [`Armed`]): polls that find the ring so leave the request as it is instead of
    /// making it again.
    rx_armed: Option<Armed>,
}

/// An idle receive ring's request for a kick, as made: where it is (the used ring, whose
/// `avail_event` or flags hold it, and the ring's size, which places `avail_event`), how
/// (EVENT_IDX or the flag), and at which index. A ring set up again differently in any
/// of these is asked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Armed {
    used_ring: u64,
    size: u16,
    event_idx: bool,
    next_avail: u16,
}

impl Armed {
    fn of(q: &virtio_queue::Queue) -> Self {
        Self {
            used_ring: q.used_ring(),
            size: q.size(),
            event_idx: q.event_idx_enabled(),
            next_avail: q.next_avail(),
        }
    }
}

/// Receive drop reasons of a queue: each [`Malformed`], and a refused offload.
const RX_REASONS: usize = Malformed::ALL.len() + 1;
/// The refused offload's reason: its name and description.
const OFFLOAD_REFUSED: (&str, &str) = (
    "vhost_offload_refused",
    "vhost-user frame with an offload netbatch does not take (UFO, a GSO kind not the frame's family, offsets outside the frame)",
);

/// Opens every worker's queue pair of one vhost-user port (`specs`: one per worker) and
/// starts its socket thread (a server socket is bound before this returns).
pub fn open(specs: &[QueueSpec], ep: &Endpoint) -> Result<Vec<Box<dyn Port>>, PortError> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    let port = first.name.as_str();
    if let Some(s) = specs.iter().find(|s| s.rx_member.is_none()) {
        return Err(PortError::Unsupported {
            port: port.into(),
            what: format!(
                "a vhost_user port must receive on every worker (worker {} does not): the \
                 driver picks the queue each flow goes to",
                s.worker
            ),
        });
    }
    if !(64..=1024).contains(&ep.queue_size) || !ep.queue_size.is_power_of_two() {
        return Err(PortError::Unsupported {
            port: port.into(),
            what: format!(
                "queue_size {} must be a power of two from 64 to 1024",
                ep.queue_size
            ),
        });
    }
    let pairs = specs.len();
    let offered = backend::offered_features(pairs, first.features.tx_tcp_segmentation);
    let shared = Shared::new(
        port,
        ep.socket.clone(),
        ep.mode,
        pairs,
        ep.queue_size,
        offered,
    )
    .map_err(|e| PortError::sys(port, "making its event descriptors", e))?;
    let shared = Arc::new(shared);
    let listener = backend::listen(&shared)
        .map_err(|e| PortError::sys(port, format!("listening on {}", ep.socket.display()), e))?;
    let s2 = shared.clone();
    std::thread::Builder::new()
        .name(format!("vhost-{port}"))
        .spawn(move || backend::serve(s2, listener))
        .map_err(|e| PortError::sys(port, "starting its socket thread", e))?;
    let owner = Arc::new(Owner(shared.clone()));
    Ok(specs
        .iter()
        .map(|s| Box::new(VhostQueue::new(s, &shared, &owner)) as Box<dyn Port>)
        .collect())
}

impl VhostQueue {
    fn new(spec: &QueueSpec, shared: &Arc<Shared>, owner: &Arc<Owner>) -> Self {
        Self {
            spec: spec.clone(),
            shared: shared.clone(),
            _owner: owner.clone(),
            generation: u64::MAX,
            conn: None,
            acked: 0,
            hdr_len: vnet::LEN,
            segs: Segments::default(),
            first: Segments::default(),
            used: Vec::with_capacity(MAX_BUFFERS),
            scratch: vec![0; FRAME_MAX],
            stats: PortStats::default(),
            rx_bad: [0; RX_REASONS],
            link_down: 0,
            unsendable: 0,
            unmapped_said: false,
            rx_armed: None,
        }
    }

    /// Follows the connection: one relaxed load unless it changed.
    #[inline]
    fn refresh(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        self.generation = g;
        self.unmapped_said = false;
        self.rx_armed = None;
        self.conn = self
            .shared
            .slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.acked = self.shared.acked.load(Ordering::Relaxed);
        let modern = 1u64 << VIRTIO_F_VERSION_1 | 1u64 << VIRTIO_NET_F_MRG_RXBUF;
        self.hdr_len = if self.acked & modern != 0 {
            vnet::LEN + 2
        } else {
            vnet::LEN
        };
    }

    /// The rings of `q` for a burst; a queue whose rings are not each in one region of
    /// the peer's memory is not served (counted once per connection and queue pair, in
    /// [`Status::rings_unmapped`]).
    fn open<'m>(&mut self, q: &virtio_queue::Queue, mem: &mut Memory<'m>) -> Option<Ring<'m>> {
        let r = Ring::open(q, mem);
        if r.is_none() && !self.unmapped_said {
            self.unmapped_said = true;
            self.shared.rings_unmapped.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn acked(&self, bit: u32) -> bool {
        self.acked & (1u64 << bit) != 0
    }

    fn count(&mut self, why: Malformed) {
        self.shared.malformed[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The port's counters.
    pub fn status(&self) -> Status {
        Status {
            connections: self.shared.connections.load(Ordering::Relaxed),
            disconnects: self.shared.disconnects.load(Ordering::Relaxed),
            acked: self.shared.acked.load(Ordering::Relaxed),
            malformed: Malformed::ALL
                .iter()
                .map(|m| {
                    (
                        m.name(),
                        self.shared.malformed[m.index()].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            rings_unmapped: self.shared.rings_unmapped.load(Ordering::Relaxed),
        }
    }

    /// Clears the wake-up the epoll thread posted (one relaxed load when there is none).
    #[inline]
    fn clear_wake(&self) {
        if let Some(w) = self.shared.wake.get(self.spec.worker)
            && w.woken.load(Ordering::Relaxed)
            && w.woken.swap(false, Ordering::Relaxed)
        {
            let _ = w.consumer.consume();
        }
    }
}

/// Takes the checked transmit chain `src` into a packet (`hl`: the virtio-net
/// header's length).
#[inline]
fn take(
    cx: &mut PortCx<'_>,
    m: &mut Memory<'_>,
    src: &impl ChainBytes,
    hl: usize,
    spec: &QueueSpec,
    scratch: &mut [u8],
) -> Took {
    let total = src.total();
    if total < hl + netbatch_wire::ethernet::HEADER_LEN {
        return Took::Bad(Malformed::Short);
    }
    let flen = total - hl;
    if flen > FRAME_MAX {
        return Took::Bad(Malformed::Long);
    }
    let room = spec.room;
    let hdr = if flen <= room {
        // Header and frame in one copy into a pool buffer, the header into its
        // headroom; a frame without offloads stays there.
        let Some(mut p) = cx.cache.alloc() else {
            return Took::NoBuffer;
        };
        let mut v = cx.pool.get_mut(&mut p);
        if v.push(hl).is_none() || v.append(flen).is_none() {
            unreachable!("room is the buffer's data room, the headroom holds a header")
        }
        let b = v.data_mut();
        if src.read(m, 0, b) != Some(total) {
            cx.cache.free(p);
            return Took::Bad(Malformed::Memory);
        }
        let Some(h10) = b.first_chunk::<{ vnet::LEN }>() else {
            unreachable!("the data holds the header")
        };
        let hdr = VnetHdr::parse(h10);
        if hdr.flags & vnet::F_NEEDS_CSUM == 0 && hdr.gso_type == vnet::GSO_NONE {
            v.pull(hl);
            v.meta.in_port = spec.index;
            v.meta.total_len = flen as u32;
            if hdr.flags & vnet::F_DATA_VALID != 0 {
                v.meta.flags |= flag::L4_CSUM_OK;
            }
            return Took::Frame(p, 1, flen);
        }
        cx.cache.free(p);
        hdr
    } else {
        let mut h = [0u8; vnet::LEN];
        if src.read(m, 0, &mut h) != Some(vnet::LEN) {
            return Took::Bad(Malformed::Memory);
        }
        VnetHdr::parse(&h)
    };
    // Offloads: gathered, then imported from the private copy.
    if src.read(m, hl, &mut scratch[..flen]) != Some(flen) {
        return Took::Bad(Malformed::Memory);
    }
    let rx = RxInfo {
        in_port: spec.index,
        room,
        tag: None,
        hash: 0,
    };
    match vnet::import(cx, &scratch[..flen], &hdr, &rx) {
        Ok((p, wire)) => Took::Frame(p, wire, flen),
        Err(ImportError::NoBuffer) => Took::NoBuffer,
        Err(ImportError::Refused) => Took::Refused,
    }
}

/// Whether a vring runs: set up by the driver (ready) and enabled.
fn running(st: &vhost_user_backend::VringState) -> bool {
    st.get_queue().ready() && st.is_enabled()
}

/// What became of a transmit chain.
enum Took {
    /// A packet, the wire packets it stands for, its bytes.
    Frame(Pkt, u16, usize),
    /// No free buffer: the chain goes back to the ring.
    NoBuffer,
    /// A malformed chain.
    Bad(Malformed),
    /// Offloads netbatch does not take (UFO, a GSO kind not the frame's family, offsets
    /// outside the frame), as for tap.
    Refused,
}

impl Port for VhostQueue {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        self.clear_wake();
        self.refresh();
        let Some(conn) = self.conn.take() else {
            return 0;
        };
        let got = self.rx_from(cx, &conn, out, max);
        self.conn = Some(conn);
        got
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        if pkts.is_empty() {
            return 0;
        }
        self.refresh();
        let Some(conn) = self.conn.take() else {
            self.drop_all(cx, pkts);
            return 0;
        };
        let wire = self.tx_to(cx, &conn, pkts);
        self.conn = Some(conn);
        wire
    }

    fn take_unsendable(&mut self) -> u64 {
        std::mem::take(&mut self.unsendable)
    }

    fn tx_drops(&mut self, _cx: &mut PortCx<'_>) -> TxDrops {
        TxDrops {
            link_down: std::mem::take(&mut self.link_down),
            ..TxDrops::default()
        }
    }

    fn link(&self) -> Option<Arc<crate::link::Link>> {
        Some(self.shared.link.clone())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn rx_drop_reasons(&self) -> Vec<(&'static str, &'static str, u64)> {
        Malformed::ALL
            .iter()
            .map(|m| (m.name(), m.description()))
            .chain([OFFLOAD_REFUSED])
            .zip(self.rx_bad)
            .map(|((name, description), n)| (name, description, n))
            .collect()
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn describe(&self) -> String {
        format!(
            "vhost-user {} {}, queue pair {} of {}, rings up to {}",
            match self.shared.mode {
                Mode::Server => "server",
                Mode::Client => "client",
            },
            self.shared.socket.display(),
            self.spec.worker,
            self.shared.pairs,
            self.shared.queue_size
        )
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.shared
            .wake
            .get(self.spec.worker)
            .map(|w| w.consumer.as_raw_fd())
    }
}

impl VhostQueue {
    fn drop_all(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) {
        for p in pkts.drain(..) {
            let w = cx.pool.get(&p).meta.wire_packets();
            self.link_down += w;
            self.stats.tx_link_down += w;
            cx.cache.free(p);
        }
    }

    fn rx_from(&mut self, cx: &mut PortCx<'_>, conn: &Conn, out: &mut PktList, max: usize) -> u64 {
        let qi = 2 * self.spec.worker + 1;
        let Some(vring) = conn.vrings.get(qi) else {
            return 0;
        };
        let guard = conn.mem.memory();
        let m: &GuestMemoryMmap = &guard;
        let mut st = vring.get_mut();
        if !running(&st) {
            self.rx_armed = None;
            return 0;
        }
        let mut mem = Memory::new(m);
        let Some(mut ring) = self.open(st.get_queue(), &mut mem) else {
            return 0;
        };
        if ring.is_empty() && self.rx_armed == Some(Armed::of(st.get_queue())) {
            // Idle since the last poll asked for a kick: nothing to take, nothing to ask.
            return 0;
        }
        let (mut n, mut got) = (0, 0u64);
        while n < max {
            let Some(head) = ring.pop() else {
                break;
            };
            let (hl, spec, scratch) = (self.hdr_len, &self.spec, &mut self.scratch);
            let took = if let Some(b) = ring.single(head, false, &mut mem) {
                take(cx, &mut mem, &b, hl, spec, scratch)
            } else {
                match self.segs.walk(&ring, head, &mut mem, false) {
                    Ok(()) => take(cx, &mut mem, &self.segs, hl, spec, scratch),
                    Err(why) => Took::Bad(why),
                }
            };
            match took {
                Took::Frame(p, wire, bytes) => {
                    self.stats.rx_packets += u64::from(wire);
                    self.stats.rx_bytes += bytes as u64;
                    got += u64::from(wire);
                    out.push(p);
                    n += 1;
                }
                Took::NoBuffer => {
                    // The frame waits in the ring for a buffer.
                    ring.unpop();
                    self.stats.rx_nobuf += 1;
                    break;
                }
                Took::Bad(why) => {
                    self.count(why);
                    self.rx_bad[why.index()] += 1;
                    self.stats.rx_dropped += 1;
                }
                Took::Refused => {
                    self.rx_bad[Malformed::ALL.len()] += 1;
                    self.stats.rx_dropped += 1;
                }
            }
            ring.put_used(head, 0);
        }
        let returned = ring.took_any();
        if ring.close(st.get_queue_mut()) {
            let _ = st.signal_used_queue();
        }
        self.rx_armed = None;
        if returned {
            let _ = st.get_queue_mut().disable_notification(m);
        } else {
            // Idle: kicks are asked for again (the worker may sleep on them).
            let q = st.get_queue_mut();
            match q.enable_notification(m) {
                // A chain made available before the driver could see that gets no
                // kick, so the worker is woken as a kick would.
                Ok(true) => self.shared.wake_worker(self.spec.worker),
                Ok(false) => self.rx_armed = Some(Armed::of(q)),
                Err(_) => {}
            }
        }
        got
    }

    fn tx_to(&mut self, cx: &mut PortCx<'_>, conn: &Conn, pkts: &mut PktList) -> u64 {
        // This worker's receive queue of the driver's, or the first when the driver set
        // up fewer; whether it runs is asked under its write lock (the front-end may stop
        // a ring with GET_VRING_BASE at any time).
        let own = 2 * self.spec.worker;
        let lock = |i: usize| {
            conn.vrings
                .get(i)
                .map(|v| v.get_mut())
                .filter(|st| running(st))
        };
        let Some(mut st) = lock(own).or_else(|| lock(0)) else {
            self.drop_all(cx, pkts);
            return 0;
        };
        let guard = conn.mem.memory();
        let m: &GuestMemoryMmap = &guard;
        let mut mem = Memory::new(m);
        let Some(mut ring) = self.open(st.get_queue(), &mut mem) else {
            self.drop_all(cx, pkts);
            return 0;
        };
        let mrg = self.acked(VIRTIO_NET_F_MRG_RXBUF);
        let csum = self.acked(VIRTIO_NET_F_GUEST_CSUM);
        let (tso4, tso6) = (
            self.acked(VIRTIO_NET_F_GUEST_TSO4),
            self.acked(VIRTIO_NET_F_GUEST_TSO6),
        );
        let hl = self.hdr_len;
        // The header of a frame with nothing to offload, in one buffer.
        let plain_hb = VnetHdr::default().with_count(1);
        // Frames before `taken` were sent or dropped (counted): freed at the end.
        let (mut taken, mut wire) = (0, 0u64);
        'frames: while taken < pkts.len() {
            // The common case first: a frame in one pool buffer, no segmentation, no
            // checksum left to complete (its header is all zeros, whatever was acked),
            // into a chain of one buffer of the driver's.
            let plain = {
                let v = cx.pool.get(&pkts[taken]);
                let meta = v.meta;
                (meta.chain.is_none() && meta.segs <= 1 && meta.flags & flag::L4_CSUM_PARTIAL == 0)
                    .then(|| v.data())
            };
            if let Some(d) = plain {
                let Some(head) = ring.pop() else {
                    // Ring full: the frame stays with the caller.
                    break;
                };
                if let Some(b) = ring.single(head, true, &mut mem)
                    && write_plain(&b, &plain_hb, hl, d).is_some()
                {
                    ring.put_used(head, (hl + d.len()) as u32);
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += d.len() as u64;
                    wire += 1;
                    taken += 1;
                    continue;
                }
                // Anything else takes the general path below (popped again).
                ring.unpop();
            }
            let segs = cx.pool.get(&pkts[taken]).meta.wire_packets();
            // What the driver cannot take is dropped here, counted.
            let (kind, super_packet) = {
                let v = cx.pool.get(&pkts[taken]);
                (v.meta.gso_type & gso::KIND, v.meta.segs > 1)
            };
            let tso_ok = match kind {
                gso::TCPV4 => tso4,
                gso::TCPV6 => tso6,
                _ => false,
            };
            if super_packet && !tso_ok {
                self.unsendable += segs;
                taken += 1;
                continue;
            }
            let mut hdr = {
                let mut v = cx.pool.get_mut(&mut pkts[taken]);
                if !csum {
                    let (at, n) = (usize::from(v.meta.data), usize::from(v.meta.len));
                    if let Some(f) = v.buf.get_mut(at..at + n) {
                        crate::complete_partial(v.meta, f);
                    }
                }
                let (meta, data) = v.split();
                VnetHdr::for_tx(meta, data)
            };
            if !csum {
                hdr.flags = 0;
            }
            let hb = hdr.with_count(1);
            // The frame's pieces: the header, then each buffer of the chain.
            let flen = {
                let mut len = 0;
                let mut cur = Some(&pkts[taken]);
                while let Some(q) = cur {
                    let v = cx.pool.get(q);
                    len += v.data().len();
                    cur = v.meta.chain.as_ref();
                }
                len
            };
            let need = hl + flen;
            // The common case: one buffer of the driver holds it all.
            let Some(head) = ring.pop() else {
                // Ring full: the frame stays with the caller.
                break;
            };
            if let Some(b) = ring.single(head, true, &mut mem)
                && b.len() >= need
                && write_one(&b, &hb, hl, cx.pool, &pkts[taken], flen).is_some()
            {
                ring.put_used(head, need as u32);
                self.stats.tx_packets += segs;
                self.stats.tx_bytes += flen as u64;
                wire += segs;
                taken += 1;
                continue;
            }
            // Anything else is walked below (popped again).
            ring.unpop();
            self.used.clear();
            let mut piece: usize = 0; // bytes of the frame (header included) written
            while piece < need {
                if self.used.len() == MAX_BUFFERS || (!mrg && !self.used.is_empty()) {
                    // The driver's buffers are too small for this frame.
                    for _ in 0..self.used.len() {
                        ring.unpop();
                    }
                    self.unsendable += segs;
                    taken += 1;
                    continue 'frames;
                }
                let Some(head) = ring.pop() else {
                    // Ring full: what was popped goes back, the frame stays with the caller.
                    for _ in 0..self.used.len() {
                        ring.unpop();
                    }
                    break 'frames;
                };
                if self.used.len() == 1 {
                    self.first = self.segs.clone();
                }
                if let Err(why) = self.segs.walk(&ring, head, &mut mem, true) {
                    // Returned unused with every buffer popped for this frame, which
                    // stays with the caller.
                    self.count(why);
                    ring.put_used(head, 0);
                    for &(h, _) in &self.used {
                        ring.put_used(h, 0);
                    }
                    break 'frames;
                }
                let mut w = Writer::new(&self.segs);
                let start = piece;
                let ok = write_frame(&mut w, &mut mem, &hb[..hl], cx.pool, &pkts[taken], piece);
                piece += w.written();
                let Some(()) = ok else {
                    // The memory table changed under the copy.
                    self.count(Malformed::Memory);
                    ring.put_used(head, 0);
                    for &(h, _) in &self.used {
                        ring.put_used(h, 0);
                    }
                    break 'frames;
                };
                self.used.push((head, (piece - start) as u32));
            }
            if self.used.len() > 1 {
                let n = (self.used.len() as u16).to_le_bytes();
                let mut w = Writer::new(&self.first);
                let _ = w.skip(vnet::LEN).and_then(|()| w.write(&mut mem, &n));
            }
            for &(h, len) in &self.used {
                ring.put_used(h, len);
            }
            self.stats.tx_packets += segs;
            self.stats.tx_bytes += flen as u64;
            wire += segs;
            taken += 1;
        }
        for p in pkts.drain(..taken) {
            cx.cache.free(p);
        }
        let any = ring.took_any();
        if ring.close(st.get_queue_mut()) {
            let _ = st.signal_used_queue();
        }
        if any {
            // The driver need not kick for the buffers it gives back: the worker looks
            // at this queue at each transmit and never waits for room (a full ring is a
            // counted drop), so each kick would only wake the backend's thread.
            let _ = st.get_queue_mut().disable_notification(m);
        }
        self.stats.tx_refused += pkts.len() as u64;
        wire
    }
}

/// Writes the header `hb` (its first `hl` bytes) and the frame `p` (`flen` bytes over
/// its chain of pool buffers) into the driver's buffer `b`, which holds both (`None`:
/// it does not).
fn write_one(
    b: &ring::Slice<'_>,
    hb: &[u8; vnet::LEN + 2],
    hl: usize,
    pool: &netbatch_engine::Pool,
    p: &Pkt,
    flen: usize,
) -> Option<()> {
    store_header(b, hb, hl)?;
    let mut at = hl;
    let mut cur = Some(p);
    while let Some(q) = cur {
        let v = pool.get(q);
        let d = v.data();
        b.subslice(at, d.len()).ok()?.copy_from(d);
        at += d.len();
        cur = v.meta.chain.as_ref();
    }
    (at == hl + flen).then_some(())
}

/// Writes the header `hb` (its first `hl` bytes) and the frame `d` into the driver's
/// buffer `b` (`None`: `b` cannot hold both).
#[inline(always)]
fn write_plain(b: &ring::Slice<'_>, hb: &[u8; vnet::LEN + 2], hl: usize, d: &[u8]) -> Option<()> {
    if b.len() < hl + d.len() {
        return None;
    }
    store_header(b, hb, hl)?;
    b.subslice(hl, d.len()).ok()?.copy_from(d);
    Some(())
}

/// Stores the first `hl` bytes of `hb` (the header with or without its buffer count) at
/// the start of `b` as one fixed-size store.
#[inline(always)]
fn store_header(b: &ring::Slice<'_>, hb: &[u8; vnet::LEN + 2], hl: usize) -> Option<()> {
    if hl == vnet::LEN + 2 {
        b.get_ref::<[u8; vnet::LEN + 2]>(0).ok()?.store(*hb);
    } else {
        let Some(h) = hb.first_chunk::<{ vnet::LEN }>() else {
            unreachable!("12 bytes hold 10")
        };
        b.get_ref::<[u8; vnet::LEN]>(0).ok()?.store(*h);
    }
    Some(())
}

/// Writes the frame `p` (after its virtio-net header `hdr`) from byte `at` of the two on,
/// as far as the writer's buffers reach (`None`: the memory table changed under the copy).
fn write_frame(
    w: &mut Writer<'_>,
    m: &mut Memory<'_>,
    hdr: &[u8],
    pool: &netbatch_engine::Pool,
    p: &Pkt,
    at: usize,
) -> Option<()> {
    let mut off = if at < hdr.len() {
        let k = w.write(m, &hdr[at..])?;
        if at + k < hdr.len() {
            return Some(());
        }
        0
    } else {
        at - hdr.len()
    };
    let mut cur = Some(p);
    while let Some(q) = cur {
        if w.room() == 0 {
            break;
        }
        let v = pool.get(q);
        let d = v.data();
        if off >= d.len() {
            off -= d.len();
        } else {
            w.write(m, &d[off..])?;
            off = 0;
        }
        cur = v.meta.chain.as_ref();
    }
    Some(())
}

#[cfg(test)]
mod tests;
