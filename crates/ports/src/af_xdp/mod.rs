//! `af_xdp`: a kernel interface through XSK (AF_XDP) sockets.
//!
//! Each worker has one socket per port, bound to the interface's queue whose number is
//! the worker's; a port's sockets come up together ([`open`]), so the interface must have
//! at least one receive queue per worker. Every socket has its own UMEM of [`FRAMES`]
//! frames of [`FRAME_SIZE`] bytes (aligned mode): the lower half is lent to the kernel
//! through the fill ring to receive into, the upper half is a free stack of frames to
//! transmit from. A receiving worker's socket is entered in the port's XSKMAP under its
//! queue number; one tiny XDP program (loaded here with the `bpf()` system call, see
//! `bpf`) redirects each frame to the map slot of the queue it arrived on, and passes it
//! to the kernel's stack when the slot is empty. The program is attached with a BPF
//! link, native (driver) mode first, generic (SKB) mode when the driver has none; the
//! link, program and map are shared by the port's queues and go when the last queue is
//! dropped (closing the link detaches the program, so a crash detaches it too).
//!
//! Binding asks for zero-copy with `XDP_USE_NEED_WAKEUP`, then copy mode with it, then
//! copy mode without it; [`AfXdpQueue::zero_copy`] says which mode the kernel gave.
//!
//! Invariants:
//! - a receive frame is either on the fill ring, held by the kernel (being filled or on
//!   the RX ring), or in [`AfXdpQueue::rx`] between being taken from the RX ring and put
//!   back on the fill ring in the same call; the fill ring has a slot for every receive
//!   frame, so a frame always goes back;
//! - a transmit frame is either on the free stack, on the TX ring, or held by the kernel
//!   until it comes back on the completion ring, which is reaped at the start of every
//!   `rx` and `tx` call; the completion ring has a slot for every transmit frame;
//! - indices are published with one release store per call and ring;
//! - frames the port cannot take now (TX ring or free stack full, or the port faulted)
//!   stay in the caller's list and are counted as `tx_refused`; frames that can never be
//!   sent here (longer than a UMEM frame, or GSO super-packets: the port has no
//!   segmentation offload; the configuration refuses an MTU or offloads that would
//!   produce them) are freed, counted by [`AfXdpQueue::tx_dropped`] and reported to the
//!   worker, which counts them as dropped (`frame_too_long`);
//! - once the interface is gone (checked every 100 ms of the worker's clock) or a socket
//!   call fails with `ENXIO`/`ENODEV` (the socket was unbound), the port records a fault
//!   and moves nothing more. An interface that is merely down (`ENETDOWN`) is not a
//!   fault: frames wait in the TX ring and go when it comes back up;
//! - drop order: the socket's rings and UMEM are unmapped, the socket closed (which takes
//!   it out of the XSKMAP), then the port's shared attachment is released; the last
//!   queue's release detaches the program.
//!
//! Known limits:
//! - copy mode between the UMEM and the pool: the pool's memory is not the UMEM, so even
//!   a zero-copy socket costs one copy per frame each way;
//! - a received frame can be at most [`MAX_RX_FRAME`] bytes (the kernel keeps 256 bytes
//!   of XDP headroom in each frame); longer ones are dropped by the kernel (counted in
//!   `rx_dropped` from the socket's statistics); no multi-buffer (`XDP_USE_SG`);
//! - no offloads: frames are plain, received checksums are not validated by the device,
//!   partial checksums are completed in software before transmission. Frames that the
//!   Linux stack of a veth peer sends with checksum offload arrive with only the
//!   pseudo-header sum in their L4 checksum (the XDP path does not complete it), so such
//!   a peer must have transmit checksumming off;
//! - frames arriving on a queue with no receiving worker go to the kernel's stack.
#![allow(unsafe_code)]

mod bpf;
mod ring;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use netbatch_engine::{Pkt, PktList, Pool};

use crate::sys::{self, Interface, PortError};
use crate::{Carries, Port, PortCx, PortStats, QueueSpec};

use ring::{Geometry, OpenError, Socket};

/// Bytes per UMEM frame.
pub const FRAME_SIZE: u32 = 2048;
/// UMEM frames per socket (8 MiB with [`FRAME_SIZE`]).
pub const FRAMES: u32 = 4096;
/// UMEM frames lent to the kernel to receive into (the rest transmit).
pub const RX_FRAMES: u32 = FRAMES / 2;
/// UMEM frames to transmit from.
pub const TX_FRAMES: u32 = FRAMES - RX_FRAMES;
/// Entries of each ring (fill, completion, RX, TX): room for every frame of its half.
pub const RING_SIZE: u32 = 2048;
/// Headroom the kernel keeps in front of a received frame (`XDP_PACKET_HEADROOM`).
const XDP_HEADROOM: u32 = 256;
/// Longest frame the kernel can receive into one UMEM frame.
pub const MAX_RX_FRAME: usize = (FRAME_SIZE - XDP_HEADROOM) as usize;
/// What an AF_XDP port carries: no segmentation offload (a super-packet is never sent
/// whole), and frames of at most [`MAX_RX_FRAME`] bytes.
pub const CARRIES: Carries = Carries {
    tx_offloads_refused: &["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"],
    max_frame: Some(MAX_RX_FRAME),
};
/// Longest run of `sendto` kicks in one call (copy mode sends at most 32 frames a kick).
const MAX_TX_KICKS: u32 = RING_SIZE / 32 + 1;

const _: () =
    assert!(RING_SIZE.is_power_of_two() && RING_SIZE >= RX_FRAMES && RING_SIZE >= TX_FRAMES);
const _: () = assert!(FRAME_SIZE.is_power_of_two() && (FRAME_SIZE == 2048 || FRAME_SIZE == 4096));

/// The ways of binding, in order of preference.
const BIND_MODES: [(u16, &str); 3] = [
    (libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP, "zero-copy"),
    (libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP, "copy"),
    (libc::XDP_COPY, "copy without need-wakeup"),
];

/// Opens every worker queue of one port: `specs` are the port's queues, one per worker,
/// in worker order, all on the same interface. Returns one port per spec, in order.
pub fn open(specs: &[QueueSpec]) -> Result<Vec<Box<dyn Port>>, PortError> {
    Ok(open_queues(specs)?
        .into_iter()
        .map(|q| Box::new(q) as Box<dyn Port>)
        .collect())
}

/// As [`open`], with the concrete queues (for tools and tests that need their own API).
pub fn open_queues(specs: &[QueueSpec]) -> Result<Vec<AfXdpQueue>, PortError> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    let port = first.name.as_str();
    if let Some(s) = specs.iter().find(|s| s.interface != first.interface) {
        return Err(PortError::Unsupported {
            port: port.into(),
            what: format!(
                "af_xdp queues of one port must share an interface ({} and {})",
                first.interface, s.interface
            ),
        });
    }
    let iface = Interface::lookup(port, &first.interface)?;
    let have = iface.rx_queues() as usize;
    let workers = specs
        .iter()
        .map(|s| s.worker + 1)
        .max()
        .unwrap_or(0)
        .max(specs.len());
    if have < workers {
        return Err(PortError::Unsupported {
            port: port.into(),
            what: format!(
                "af_xdp on {} needs one queue per worker: {} worker{}, {} queue{} (create the \
                 interface with more queues or run fewer workers)",
                iface.name,
                workers,
                if workers == 1 { "" } else { "s" },
                have,
                if have == 1 { "" } else { "s" },
            ),
        });
    }

    let mut socks = Vec::with_capacity(specs.len());
    for s in specs {
        socks.push(bind(s, &iface)?);
    }
    let rx: Vec<(u32, RawFd)> = specs
        .iter()
        .zip(&socks)
        .filter(|(s, _)| s.rx_member.is_some())
        .map(|(s, (sock, _))| (queue_of(s), sock.fd()))
        .collect();
    let xdp = if rx.is_empty() {
        None
    } else {
        let entries = u32::try_from(workers).unwrap_or(u32::MAX);
        Some(Arc::new(bpf::attach(port, &iface, &rx, entries)?))
    };

    Ok(specs
        .iter()
        .zip(socks)
        .map(|(s, (sock, (zero_copy, need_wakeup)))| {
            AfXdpQueue::new(s, iface.clone(), sock, zero_copy, need_wakeup, xdp.clone())
        })
        .collect())
}

/// The queue id a spec's socket binds: the worker's number.
fn queue_of(s: &QueueSpec) -> u32 {
    u32::try_from(s.worker).unwrap_or(u32::MAX)
}

/// Makes and binds the socket of one spec, trying the modes in order of preference;
/// returns it with (zero-copy, need-wakeup).
fn bind(s: &QueueSpec, iface: &Interface) -> Result<(Socket, (bool, bool)), PortError> {
    let g = Geometry {
        frames: FRAMES,
        frame_size: FRAME_SIZE,
        fill: RING_SIZE,
        comp: RING_SIZE,
        rx: s.rx_member.map(|_| RING_SIZE),
        tx: RING_SIZE,
    };
    let queue = queue_of(s);
    let mut tried = Vec::new();
    let mut last = None;
    for (flags, mode) in BIND_MODES {
        match Socket::open(&g, iface.index, queue, flags) {
            Ok(sock) => {
                let zc = sock.zero_copy().unwrap_or(flags & libc::XDP_ZEROCOPY != 0);
                return Ok((sock, (zc, flags & libc::XDP_USE_NEED_WAKEUP != 0)));
            }
            Err(OpenError::Setup(op, e)) => return Err(PortError::sys(&s.name, op, e)),
            Err(OpenError::Bind(e)) => {
                tried.push(format!("{mode}: {e}"));
                last = Some(e);
            }
        }
    }
    Err(PortError::sys(
        &s.name,
        format!(
            "bind AF_XDP socket to {} queue {queue} (tried {})",
            iface.name,
            tried.join("; ")
        ),
        last.unwrap_or_else(|| io::Error::other("no bind mode tried")),
    ))
}

/// One worker's queue of an AF_XDP port.
#[derive(Debug)]
pub struct AfXdpQueue {
    /// The socket, its rings and UMEM (dropped first).
    sock: Socket,
    name: String,
    iface: Interface,
    index: u16,
    queue: u32,
    room: usize,
    zero_copy: bool,
    need_wakeup: bool,
    /// Transmit frames (UMEM addresses) free to use.
    tx_free: Vec<u64>,
    stats: PortStats,
    tx_dropped: u64,
    /// Of `tx_dropped`, what the caller has not been told yet (`take_unsendable`).
    unsendable: u64,
    /// System calls made to wake the kernel: (receive, transmit).
    kicks: (u64, u64),
    health: sys::Health,
    /// The port's XDP attachment (absent when no queue of the port receives).
    xdp: Option<Arc<bpf::Attachment>>,
}

impl AfXdpQueue {
    fn new(
        s: &QueueSpec,
        iface: Interface,
        sock: Socket,
        zero_copy: bool,
        need_wakeup: bool,
        xdp: Option<Arc<bpf::Attachment>>,
    ) -> Self {
        let tx_free = (RX_FRAMES..FRAMES)
            .rev()
            .map(|i| u64::from(i) * u64::from(FRAME_SIZE))
            .collect();
        let health = sys::Health::new(&s.name, &iface.name, iface.index);
        let mut q = Self {
            sock,
            name: s.name.clone(),
            iface,
            index: s.index,
            queue: queue_of(s),
            room: s.room,
            zero_copy,
            need_wakeup,
            tx_free,
            stats: PortStats::default(),
            tx_dropped: 0,
            unsendable: 0,
            kicks: (0, 0),
            health,
            xdp,
        };
        if q.sock.rx.is_some() {
            // Lend every receive frame to the kernel: the fill ring holds them all.
            for i in 0..RX_FRAMES {
                let put = q.sock.fill.put(i, u64::from(i) * u64::from(FRAME_SIZE));
                debug_assert!(put, "the fill ring has a slot for every receive frame");
            }
            q.sock.fill.submit(RX_FRAMES);
            q.kick_fill();
        }
        q
    }

    /// Whether the socket runs in zero-copy mode (the driver fills and sends UMEM frames
    /// itself) rather than copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP` (the kernel says when it
    /// needs a system call to make progress).
    pub fn need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// How the port's XDP program runs: `Some(true)` in the driver (native mode),
    /// `Some(false)` in the stack (generic/SKB mode), `None` when the port has no
    /// receiving queue and so no program.
    pub fn native_xdp(&self) -> Option<bool> {
        self.xdp.as_ref().map(|a| a.native())
    }

    /// The interface queue the socket is bound to.
    pub fn queue_id(&self) -> u32 {
        self.queue
    }

    /// Wire packets freed without being sent because they can never be sent here: longer
    /// than a UMEM frame ([`FRAME_SIZE`]), empty, or GSO super-packets (the port has no
    /// segmentation offload).
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped
    }

    /// System calls made so far to wake the kernel: (receive, transmit). In copy mode
    /// every transmission needs one per 32 frames; with need-wakeup an idle receive
    /// queue needs none.
    pub fn kicks(&self) -> (u64, u64) {
        self.kicks
    }

    /// Records a fault if `e` says the socket is no longer bound to a device.
    fn check_error(&mut self, op: &str, e: &io::Error) {
        if matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV)) {
            self.health.fail(format!(
                "AF_XDP queue {} of {}: {op}: {e}",
                self.queue, self.iface.name
            ));
        }
    }

    /// Takes transmitted frames back from the completion ring.
    fn reap_completions(&mut self) {
        let n = self.sock.comp.available(RING_SIZE);
        let tx_lo = u64::from(RX_FRAMES) * u64::from(FRAME_SIZE);
        let tx_hi = u64::from(FRAMES) * u64::from(FRAME_SIZE);
        for i in 0..n {
            if let Some(addr) = self.sock.comp.get(i) {
                let base = addr & !u64::from(FRAME_SIZE - 1);
                if (tx_lo..tx_hi).contains(&base) && self.tx_free.len() < TX_FRAMES as usize {
                    self.tx_free.push(base);
                }
            }
        }
        self.sock.comp.release(n);
    }

    /// Wakes the kernel if it asks to be told about new fill-ring frames.
    fn kick_fill(&mut self) {
        if self.need_wakeup && self.sock.fill.needs_wakeup() {
            self.kicks.0 += 1;
            if let Err(e) = self.sock.kick_rx() {
                self.check_error("wake receive (recvfrom)", &e);
            }
        }
    }

    /// Makes the kernel transmit what waits in the TX ring: in copy mode only a system
    /// call transmits (at most 32 frames each); in zero-copy mode the driver needs one
    /// only when it says so.
    fn kick_tx(&mut self) {
        let mut pending = self.sock.tx.pending();
        if pending == 0 {
            return;
        }
        if self.zero_copy && self.need_wakeup && !self.sock.tx.needs_wakeup() {
            return;
        }
        for _ in 0..MAX_TX_KICKS {
            self.kicks.1 += 1;
            match self.sock.kick_tx() {
                Ok(()) => {}
                Err(e) => match e.raw_os_error() {
                    // Busy, out of buffers, or more left than one call sends: go on or
                    // retry on the next call.
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                    | Some(libc::EINTR) => {}
                    _ => {
                        self.check_error("transmit (sendto)", &e);
                        return;
                    }
                },
            }
            if self.zero_copy {
                return;
            }
            let now = self.sock.tx.pending();
            if now == 0 || now >= pending {
                return;
            }
            pending = now;
        }
    }
}

/// Copies a frame over its buffer chain into `dst` (exactly `Meta::total_len` bytes long).
fn copy_chain(pool: &Pool, p: &Pkt, dst: &mut [u8]) {
    let mut at = 0;
    let mut cur = Some(p);
    while let Some(q) = cur {
        let v = pool.get(q);
        let d = v.data();
        if let Some(out) = dst.get_mut(at..at + d.len()) {
            out.copy_from_slice(d);
        }
        at += d.len();
        cur = v.meta.chain.as_ref();
    }
}

impl Port for AfXdpQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        format!(
            "queue {}: {}, {} mode{}",
            self.queue_id(),
            match self.native_xdp() {
                Some(true) => "native XDP",
                Some(false) => "generic XDP",
                None => "transmit only",
            },
            if self.zero_copy() {
                "zero-copy"
            } else {
                "copy"
            },
            if self.need_wakeup() {
                ", need-wakeup"
            } else {
                ""
            }
        )
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        self.health.due(cx.now_ns);
        if self.health.failed() {
            return 0;
        }
        self.reap_completions();
        // Frames a previous call left in the TX ring (copy mode sends 32 a kick).
        self.kick_tx();
        let Some(rx) = self.sock.rx.as_mut() else {
            return 0;
        };
        let n = rx.available(u32::try_from(max).unwrap_or(u32::MAX));
        if n == 0 {
            self.kick_fill();
            return 0;
        }
        // Every receive frame fits on the fill ring (`RING_SIZE == RX_FRAMES`): refreshing
        // its consumer index once makes a slot for each frame taken below.
        let room = self.sock.fill.free(n);
        debug_assert!(
            room >= n,
            "the fill ring has a slot for every receive frame"
        );
        let rx_hi = u64::from(RX_FRAMES) * u64::from(FRAME_SIZE);
        let (mut taken, mut refill, mut got) = (0u32, 0u32, 0usize);
        while taken < n {
            let Some(d) = rx.get(taken) else {
                break;
            };
            let base = d.addr & !u64::from(FRAME_SIZE - 1);
            let len = d.len as usize;
            let in_frame = (d.addr - base) as usize + len <= FRAME_SIZE as usize;
            if base < rx_hi && in_frame && len <= self.room {
                let Some(mut p) = cx.cache.alloc() else {
                    // Leave the frame on the RX ring for the next call.
                    self.stats.rx_nobuf += 1;
                    break;
                };
                let mut v = cx.pool.get_mut(&mut p);
                let copied = match v.append(len) {
                    // SAFETY: the frame was taken from the RX ring and goes back on the
                    // fill ring only below, so the kernel is not writing it.
                    Some(dst) => unsafe { self.sock.umem.read_frame(d.addr, dst) },
                    None => false,
                };
                if copied {
                    v.meta.in_port = self.index;
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    out.push(p);
                    got += 1;
                } else {
                    self.stats.rx_dropped += 1;
                    cx.cache.free(p);
                }
            } else {
                // Malformed descriptor, or longer than a pool buffer holds.
                self.stats.rx_dropped += 1;
            }
            if base < rx_hi {
                let put = self.sock.fill.put(refill, base);
                debug_assert!(put, "the fill ring has a slot for every receive frame");
                refill += u32::from(put);
            }
            taken += 1;
        }
        rx.release(taken);
        self.sock.fill.submit(refill);
        self.kick_fill();
        got as u64
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        self.health.due(cx.now_ns);
        if self.health.failed() {
            self.stats.tx_refused += pkts.len() as u64;
            return 0;
        }
        self.reap_completions();
        let want = u32::try_from(pkts.len()).unwrap_or(u32::MAX);
        let slots = self
            .sock
            .tx
            .free(want)
            .min(u32::try_from(self.tx_free.len()).unwrap_or(u32::MAX));
        let (mut sent, mut consumed) = (0u32, 0usize);
        for p in pkts.iter() {
            if sent >= slots {
                break;
            }
            let v = cx.pool.get(p);
            let len = v.meta.total_len as usize;
            // A super-packet would need segmentation, which the port does not offer.
            if v.meta.segs > 1 || len == 0 || len > FRAME_SIZE as usize {
                self.tx_dropped += u64::from(v.meta.segs.max(1));
                self.unsendable += u64::from(v.meta.segs.max(1));
                consumed += 1;
                continue;
            }
            let Some(addr) = self.tx_free.pop() else {
                break;
            };
            // SAFETY: `addr` came off the free stack, so the frame is not on the TX
            // ring and not held by the kernel until it is published below.
            let Some(frame) = (unsafe { self.sock.umem.frame_mut(addr, len) }) else {
                // Outside the UMEM: cannot happen for a free-stack address.
                self.tx_free.push(addr);
                break;
            };
            copy_chain(cx.pool, p, frame);
            crate::complete_partial(v.meta, frame);
            let desc = libc::xdp_desc {
                addr,
                len: len as u32,
                options: 0,
            };
            if !self.sock.tx.put(sent, desc) {
                self.tx_free.push(addr);
                break;
            }
            sent += 1;
            consumed += 1;
            self.stats.tx_bytes += len as u64;
        }
        for p in pkts.drain(..consumed) {
            cx.cache.free(p);
        }
        self.stats.tx_packets += u64::from(sent);
        self.stats.tx_refused += pkts.len() as u64;
        self.sock.tx.submit(sent);
        self.kick_tx();
        u64::from(sent)
    }

    fn take_unsendable(&mut self) -> u64 {
        core::mem::take(&mut self.unsendable)
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        if let Ok(k) = self.sock.kernel_stats() {
            // Frames the kernel could not deliver: no fill frame, too long, RX ring full.
            s.rx_dropped += k.rx_dropped + k.rx_ring_full;
        }
        s
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn fault(&self) -> Option<&str> {
        self.health.fault()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        // After a fault nothing will arrive: no descriptor to wait on.
        match (&self.sock.rx, self.health.failed()) {
            (Some(_), false) => Some(self.sock.fd()),
            _ => None,
        }
    }
}
