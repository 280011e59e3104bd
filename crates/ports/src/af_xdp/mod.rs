//! `af_xdp`: a kernel interface through XSK (AF_XDP) sockets whose UMEM is the packet pool.
//!
//! Each worker has one socket per port, bound to the interface's queue whose number is
//! the worker's; a port's sockets come up together ([`open`]), so the interface must have
//! at least one receive queue per worker. Every socket registers the whole packet pool's
//! region as its UMEM (unaligned chunks of [`FRAME_SIZE`] bytes, one per pool buffer,
//! starting at the buffer), so a frame is received straight into a pool buffer and a
//! packet is transmitted from the buffer it is in, whatever port it came from: the kernel
//! is lent buffers by index ([`netbatch_engine::Pool::lend`]) and gives them back on the
//! RX and completion rings. A receiving worker's socket is entered in the port's XSKMAP
//! under its queue number; one tiny XDP program (loaded here with the `bpf()` system
//! call, see `bpf`) redirects each frame to the map slot of the queue it arrived on, and
//! passes it to the kernel's stack when the slot is empty. The program is attached with a
//! BPF link, native (driver) mode first, generic (SKB) mode when the driver has none; the
//! link, program and map are shared by the port's queues and go when the last queue is
//! dropped (closing the link detaches the program, so a crash detaches it too).
//!
//! Binding asks for zero-copy with `XDP_USE_NEED_WAKEUP`, then copy mode with it, then
//! copy mode without it; [`AfXdpQueue::zero_copy`] says which mode the kernel gave. In
//! zero-copy mode the driver maps each page for DMA on its own, and the kernel refuses a
//! chunk that straddles two pages it cannot prove contiguous (and loses it): zero-copy is
//! asked for only when the pool's buffers tile pages ([`Layout::Pages`], which
//! `netbatch run` chooses when [`pool_layout`] finds an interface that offers zero-copy).
//! In copy mode (veth, or a driver without zero-copy) the kernel copies each frame between
//! its own buffers and the pool's, and nothing is copied in user space either way. Copy
//! mode sends 32 frames a `sendto` unless the kernel lets the socket raise that
//! (`XDP_MAX_TX_SKB_BUDGET`, Linux 6.17): the port asks for the TX ring's size.
//!
//! Where the interface defers its interrupts to busy pollers (`napi_defer_hard_irqs` and
//! `gro_flush_timeout` set in sysfs, as the kernel's NAPI documentation describes for
//! preferred busy polling), a receiving socket turns on `SO_PREFER_BUSY_POLL` and every
//! receive call runs the device queue's NAPI poll itself (`recvfrom`, up to 64 frames):
//! the kernel's receive work (driver, XDP, redirect) then runs in the worker, only as
//! fast as the worker takes frames, instead of in a softirq or NAPI thread that would
//! compete with it for the core and fill the RX ring faster than it is emptied. Since
//! Linux 6.13 the kernel gives only zero-copy sockets a NAPI to poll: a socket that has
//! none when its first frames arrive turns busy polling off again (and says so).
//!
//! Invariants (ownership is total: every pool buffer is in exactly one place):
//! - a buffer this queue lent to the kernel (on the fill ring, being filled, on the RX
//!   ring; or on the TX ring, being sent, on the completion ring) has its bit set in
//!   `Lent` and no handle; the bit is set when it is lent and cleared when it comes back
//!   on the RX or completion ring, which is the only time a handle is made for it again
//!   ([`netbatch_engine::Pool::reclaim`]), so a descriptor the kernel hands back twice,
//!   or one for a buffer this queue did not lend, makes no second handle (it is counted
//!   as a dropped frame and otherwise ignored);
//! - a receiving queue keeps up to its fill target (the pool's buffers over
//!   [`FILL_SHARE`], at most [`RING_SIZE`]) lent to the fill ring, replacing each frame it
//!   takes off the RX ring from the worker's cache; a buffer it cannot get is counted in
//!   `rx_nobuf` and lent on a later call (meanwhile the kernel drops what finds no fill
//!   buffer, counted in its `rx_dropped`);
//! - transmitted packets are lent to the TX ring and come back on the completion ring,
//!   which is reaped at the start of every `rx` and `tx` call, into the worker's cache;
//!   the completion ring has a slot for every TX ring entry;
//! - indices are published with one release store per call and ring;
//! - packets the port cannot take now (TX ring full, or the port faulted) stay in the
//!   caller's list and are counted as `tx_refused`; packets that can never be sent here
//!   (empty, longer than a chunk, or GSO super-packets: the port has no segmentation
//!   offload; the configuration refuses an MTU or offloads that would produce them) are
//!   freed, counted by [`AfXdpQueue::tx_dropped`] and reported to the worker, which
//!   counts them as dropped (`frame_too_long`); a packet chained over several buffers is
//!   joined into one new buffer first (the one copy this port makes, counted by
//!   [`AfXdpQueue::copied`]);
//! - once the interface is gone (checked every 100 ms of the worker's clock) or a socket
//!   call fails with `ENXIO`/`ENODEV` (the socket was unbound), the port records a fault
//!   and moves nothing more. An interface that is merely down (`ENETDOWN`) is not a
//!   fault: frames wait in the TX ring and go when it comes back up;
//! - drop order: the socket's rings are unmapped and the socket closed (which unbinds it
//!   and takes it out of the XSKMAP: the kernel writes no lent buffer after that; a
//!   copy-mode frame still in flight on a driver that sends from the UMEM's own pages
//!   holds those pages and may still be read), then every buffer still lent goes back to
//!   the pool, then the port's shared attachment is
//!   released; the last queue's release detaches the program. The pool outlives them:
//!   each queue holds it.
//!
//! Known limits:
//! - the pool's buffers must hold a chunk ([`FRAME_SIZE`] bytes, `[pool] buf_size` ≥
//!   2048), or the port is refused; a received frame can be at most [`MAX_RX_FRAME`]
//!   bytes (the kernel keeps 256 bytes of XDP headroom in each chunk, which is also the
//!   headroom received frames get); longer ones are dropped by the kernel (counted in
//!   `rx_dropped` from the socket's statistics); no multi-buffer (`XDP_USE_SG`);
//! - every socket registers the whole pool, so each pins it (locked memory: root, or
//!   `CAP_IPC_LOCK`, or an `RLIMIT_MEMLOCK` that covers the pool once per socket);
//! - no offloads: frames are plain, received checksums are not validated by the device,
//!   partial checksums are completed in software (in place) before transmission. Frames
//!   that the Linux stack of a veth peer sends with checksum offload arrive with only the
//!   pseudo-header sum in their L4 checksum (the XDP path does not complete it), so such a
//!   peer must have transmit checksumming off;
//! - frames arriving on a queue with no receiving worker go to the kernel's stack.
#![allow(unsafe_code)]

mod bpf;
mod ring;
mod source;
#[cfg(test)]
mod tests;

pub use source::XdpSource;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use netbatch_engine::{BufCache, Layout, Meta, Pkt, PktList, Pool};

use crate::link::Link;
use crate::sys::{self, Interface, PortError};
use crate::{Carries, Port, PortCx, PortStats, QueueSpec, TxDrops};

use ring::{Geometry, OpenError, Socket, UmemArea};

/// Bytes of a UMEM chunk: what the kernel may write from a fill-ring address on, and the
/// longest frame the TX ring takes. Pool buffers must be at least this long.
pub const FRAME_SIZE: u32 = 2048;
/// Entries of each ring (fill, completion, RX, TX).
pub const RING_SIZE: u32 = 2048;
/// A receiving queue lends at most the pool's buffers over this to its fill ring.
pub const FILL_SHARE: u32 = 8;
/// Headroom the kernel keeps in front of a received frame (`XDP_PACKET_HEADROOM`).
const XDP_HEADROOM: u32 = 256;
/// Longest frame the kernel can receive into one chunk.
pub const MAX_RX_FRAME: usize = (FRAME_SIZE - XDP_HEADROOM) as usize;
/// What an AF_XDP port carries: no segmentation offload (a super-packet is never sent
/// whole), and frames of at most [`MAX_RX_FRAME`] bytes.
pub const CARRIES: Carries = Carries {
    tx_offloads_refused: &["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"],
    max_frame: Some(MAX_RX_FRAME),
    // Each pool buffer is a UMEM chunk.
    min_buf_size: Some(FRAME_SIZE),
};
/// Frames a busy poll asks the device queue's NAPI for (`SO_BUSY_POLL_BUDGET`).
const BUSY_POLL_BUDGET: u32 = 64;
/// `SO_BUSY_POLL`, in µs: any non-zero value lets the socket's calls busy poll (a
/// non-blocking call polls once).
const BUSY_POLL_USEC: u32 = 20;

/// Whether interface `name` (of the calling thread's namespace) defers its interrupts to
/// busy pollers: `napi_defer_hard_irqs` and `gro_flush_timeout` both set, as preferred
/// busy polling needs (`Documentation/networking/napi.rst`). Then the port's receiving
/// sockets busy poll.
fn defers_to_busy_polling(name: &str) -> bool {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{name}/{what}"))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    read("napi_defer_hard_irqs") > 0 && read("gro_flush_timeout") > 0
}

/// Longest run of `sendto` kicks in one call (copy mode sends 32 frames a kick unless the
/// kernel lets the socket raise that).
const MAX_TX_KICKS: u32 = RING_SIZE / 32 + 1;

const _: () = assert!(RING_SIZE.is_power_of_two());

/// The ways of binding, in order of preference.
const BIND_MODES: [(u16, &str); 3] = [
    (libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP, "zero-copy"),
    (libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP, "copy"),
    (libc::XDP_COPY, "copy without need-wakeup"),
];

/// Whether a zero-copy driver can use every buffer of `pool`: no chunk straddles a page
/// (the buffers tile pages).
pub fn zero_copy_fits(pool: &Pool) -> bool {
    let stride = pool.stride();
    stride >= FRAME_SIZE as usize && sys::page_size().is_multiple_of(stride)
}

/// The pool layout for AF_XDP ports on `interfaces`: [`Layout::Pages`] (and the first
/// interface that offers zero-copy) when one of them binds an XSK socket in zero-copy
/// mode, so that its driver can use every buffer; [`Layout::Padded`] otherwise (copy
/// mode does not care, and padding keeps consecutive buffers out of each other's L1
/// sets). Probing binds a throwaway socket to queue 0 of each interface.
pub fn pool_layout<'a>(interfaces: impl IntoIterator<Item = &'a str>) -> (Layout, Option<String>) {
    for name in interfaces {
        if offers_zero_copy(name) {
            return (Layout::Pages, Some(name.to_string()));
        }
    }
    (Layout::Padded, None)
}

/// Whether interface `name` binds an XSK socket to its queue 0 in zero-copy mode (a
/// throwaway socket over a few pages of its own, closed at once).
pub fn offers_zero_copy(name: &str) -> bool {
    let Some(ifindex) = sys::ifindex(name) else {
        return false;
    };
    let len = 16 * FRAME_SIZE as usize;
    let Ok(mem) = sys::Mmap::anonymous(len) else {
        return false;
    };
    let area = UmemArea {
        addr: mem.as_ptr(),
        len,
        chunk: FRAME_SIZE,
    };
    let g = Geometry {
        fill: 16,
        comp: 16,
        rx: None,
        tx: 16,
    };
    // The socket goes (closed, unbound) before the memory it registered.
    let bound = Socket::open(&g, &area, ifindex, 0, libc::XDP_ZEROCOPY)
        .is_ok_and(|s| s.zero_copy().unwrap_or(true));
    drop(mem);
    bound
}

/// Opens every worker queue of one port over `pool` (its region becomes each socket's
/// UMEM): `specs` are the port's queues, one per worker, in worker order, all on the
/// same interface. Returns one port per spec, in order.
pub fn open(specs: &[QueueSpec], pool: &Pool) -> Result<Vec<Box<dyn Port>>, PortError> {
    Ok(open_queues(specs, pool)?
        .into_iter()
        .map(|q| Box::new(q) as Box<dyn Port>)
        .collect())
}

/// As [`open`], with the concrete queues (for tools and tests that need their own API).
pub fn open_queues(specs: &[QueueSpec], pool: &Pool) -> Result<Vec<AfXdpQueue>, PortError> {
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
    let buf_size = pool.config().buf_size;
    if buf_size < FRAME_SIZE {
        return Err(PortError::Unsupported {
            port: port.into(),
            what: format!(
                "af_xdp receives into the pool's buffers, which must hold a {FRAME_SIZE}-byte \
                 UMEM chunk: pool.buf_size is {buf_size}"
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

    let (base, len) = pool.region();
    let area = UmemArea {
        addr: base,
        len,
        chunk: FRAME_SIZE,
    };
    let zc_fits = zero_copy_fits(pool);
    let mut socks = Vec::with_capacity(specs.len());
    for s in specs {
        socks.push(bind(s, &iface, &area, zc_fits)?);
    }
    let rx: Vec<(u32, RawFd)> = specs
        .iter()
        .zip(&socks)
        .filter(|(s, _)| s.rx_member.is_some())
        .map(|(s, b)| (queue_of(s), b.sock.fd()))
        .collect();
    let xdp = if rx.is_empty() {
        None
    } else {
        let entries = u32::try_from(workers).unwrap_or(u32::MAX);
        Some(Arc::new(bpf::attach(port, &iface, &rx, entries)?))
    };

    // Receiving sockets busy poll where the interface defers to busy pollers.
    let busy = defers_to_busy_polling(&iface.name);
    let mut socks = socks;
    for (s, b) in specs.iter().zip(&mut socks) {
        if busy && s.rx_member.is_some() {
            b.sock
                .prefer_busy_poll(BUSY_POLL_USEC, BUSY_POLL_BUDGET)
                .map_err(|e| PortError::sys(&s.name, "turn on busy polling", e))?;
            b.busy_poll = true;
        }
    }

    // Everything is bound and attached: only now are buffers lent (nothing above can
    // fail with buffers out).
    let mut cache = pool.cache();
    let link = Arc::new(Link::new(port, &iface.name, iface.index));
    let queues = specs
        .iter()
        .zip(socks)
        .map(|(s, b)| {
            AfXdpQueue::new(
                s,
                iface.clone(),
                b,
                pool,
                xdp.clone(),
                link.clone(),
                &mut cache,
            )
        })
        .collect();
    cache.flush();
    Ok(queues)
}

/// The queue id a spec's socket binds: the worker's number.
fn queue_of(s: &QueueSpec) -> u32 {
    u32::try_from(s.worker).unwrap_or(u32::MAX)
}

/// A bound socket and how it was bound.
struct Bound {
    sock: Socket,
    zero_copy: bool,
    need_wakeup: bool,
    busy_poll: bool,
    /// Why the socket is not in zero-copy mode (when it is not).
    copy_why: Option<String>,
}

/// How long a bind waits for a queue another socket still holds: the kernel releases a
/// closed socket's hold on its queue a moment later (deferred work), so a port opened
/// right after another closed (or after [`offers_zero_copy`] probed it) may find the
/// queue busy for a few milliseconds.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Makes and binds the socket of one spec over `area`, trying the modes in order of
/// preference (zero-copy only when `zc_fits`: the pool's buffers tile pages); a queue
/// that is busy in every mode is tried again until [`BUSY_WAIT`] has passed.
fn bind(
    s: &QueueSpec,
    iface: &Interface,
    area: &UmemArea,
    zc_fits: bool,
) -> Result<Bound, PortError> {
    let start = std::time::Instant::now();
    loop {
        match bind_once(s, iface, area, zc_fits) {
            Err((e, true)) if start.elapsed() < BUSY_WAIT => {
                drop(e);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
            Ok(b) => return Ok(b),
        }
    }
}

/// One round of [`bind`]: the bound socket, or the error and whether every mode found
/// the queue busy.
fn bind_once(
    s: &QueueSpec,
    iface: &Interface,
    area: &UmemArea,
    zc_fits: bool,
) -> Result<Bound, (PortError, bool)> {
    let g = Geometry {
        fill: RING_SIZE,
        comp: RING_SIZE,
        rx: s.rx_member.map(|_| RING_SIZE),
        tx: RING_SIZE,
    };
    let queue = queue_of(s);
    let mut tried = Vec::new();
    let mut last = None;
    let mut busy = true;
    let mut copy_why =
        (!zc_fits).then(|| "zero-copy not tried: the pool's buffers straddle pages".to_string());
    for (flags, mode) in BIND_MODES {
        let zc = flags & libc::XDP_ZEROCOPY != 0;
        if zc && !zc_fits {
            continue;
        }
        match Socket::open(&g, area, iface.index, queue, flags) {
            Ok(sock) => {
                let zero_copy = sock.zero_copy().unwrap_or(zc);
                return Ok(Bound {
                    sock,
                    zero_copy,
                    need_wakeup: flags & libc::XDP_USE_NEED_WAKEUP != 0,
                    busy_poll: false,
                    copy_why: if zero_copy { None } else { copy_why },
                });
            }
            Err(OpenError::Setup(op, e)) => return Err((PortError::sys(&s.name, op, e), false)),
            Err(OpenError::Bind(e)) => {
                busy &= e.raw_os_error() == Some(libc::EBUSY);
                if zc {
                    copy_why = Some(format!("zero-copy refused by the driver: {e}"));
                }
                tried.push(format!("{mode}: {e}"));
                last = Some(e);
            }
        }
    }
    Err((
        PortError::sys(
            &s.name,
            format!(
                "bind AF_XDP socket to {} queue {queue} (tried {})",
                iface.name,
                tried.join("; ")
            ),
            last.unwrap_or_else(|| io::Error::other("no bind mode tried")),
        ),
        busy,
    ))
}

/// The buffers a queue has lent to the kernel, one bit per pool buffer; dropping it
/// gives every buffer still lent back to the pool (declared after the socket, so the
/// socket is closed first).
struct Lent {
    pool: Pool,
    bits: Box<[u64]>,
    count: u32,
}

impl Lent {
    fn new(pool: &Pool) -> Self {
        let words = (pool.config().buffers as usize).div_ceil(64);
        Self {
            pool: pool.clone(),
            bits: vec![0; words].into_boxed_slice(),
            count: 0,
        }
    }

    /// Records `i` as lent.
    #[inline(always)]
    fn lend(&mut self, i: u32) {
        if let Some(w) = self.bits.get_mut((i / 64) as usize) {
            debug_assert!(*w & (1 << (i % 64)) == 0, "buffer {i} lent twice");
            *w |= 1 << (i % 64);
            self.count += 1;
        }
    }

    /// Whether `i` was lent (and is no longer recorded as lent).
    #[inline(always)]
    fn take(&mut self, i: u32) -> bool {
        match self.bits.get_mut((i / 64) as usize) {
            Some(w) if *w & (1 << (i % 64)) != 0 => {
                *w &= !(1 << (i % 64));
                self.count -= 1;
                true
            }
            _ => false,
        }
    }

    /// The buffer and offset a descriptor address names (the kernel's unaligned-mode
    /// encoding: a base in the low 48 bits plus an offset in the high 16), if `len` bytes
    /// from there lie inside one buffer.
    #[inline(always)]
    fn locate(&self, addr: u64, len: u32) -> Option<(u32, usize)> {
        let at = (addr & libc::XSK_UNALIGNED_BUF_ADDR_MASK)
            + (addr >> libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT);
        let (i, off) = self.pool.locate(at)?;
        (off + len as usize <= self.pool.config().buf_size as usize).then_some((i, off))
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut cache = self.pool.cache();
        for (w, word) in self.bits.iter_mut().enumerate() {
            while *word != 0 {
                let b = word.trailing_zeros();
                *word &= !(1 << b);
                let i = (w * 64) as u32 + b;
                // SAFETY: the bit says this queue lent buffer `i` and has not taken it
                // back; clearing it here reclaims it once. The socket (declared before this
                // field) is closed: the kernel has unbound it and touches none of its
                // buffers any more.
                let p = unsafe { self.pool.reclaim(i) };
                cache.free(p);
            }
        }
        self.count = 0;
        cache.flush();
    }
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent").field("count", &self.count).finish()
    }
}

/// One worker's queue of an AF_XDP port.
#[derive(Debug)]
pub struct AfXdpQueue {
    /// The socket and its rings (dropped first: closing it unbinds it).
    sock: Socket,
    /// What the kernel holds of the pool (dropped next: back to the pool).
    lent: Lent,
    name: String,
    iface: Interface,
    index: u16,
    queue: u32,
    zero_copy: bool,
    need_wakeup: bool,
    /// The socket busy polls: every receive call runs the queue's NAPI poll itself.
    busy_poll: bool,
    /// Busy polling was asked for and the socket's NAPI is still to be checked (at the
    /// first frame received: the kernel names it at bind or then).
    busy_check: bool,
    /// Why busy polling, asked for, was turned off.
    busy_off: Option<&'static str>,
    copy_why: Option<String>,
    /// Buffers this queue keeps lent to the fill ring (0 for a transmit-only queue).
    fill_target: u32,
    /// Buffers lent to the fill ring (or being filled, or on the RX ring).
    on_fill: u32,
    /// Buffers lent to the TX ring (or being sent, or on the completion ring).
    in_tx: u32,
    stats: PortStats,
    copied: u64,
    /// Descriptors the kernel handed back naming no buffer this queue lent.
    foreign: u64,
    tx_dropped: u64,
    /// Of `tx_dropped`, what the caller has not been told yet (`take_unsendable`).
    unsendable: u64,
    /// System calls made to wake the kernel: (receive, transmit).
    kicks: (u64, u64),
    health: sys::Health,
    /// The port's XDP attachment (absent when no queue of the port receives).
    xdp: Option<Arc<bpf::Attachment>>,
    /// The interface's link state, shared by the port's queues.
    link: Arc<Link>,
    /// The link's change count when this queue last looked.
    link_seen: u64,
    /// A transmit found the interface down (`ENETDOWN`): what waits in the TX ring is
    /// taken back at the next [`Port::tx_drops`].
    netdown: bool,
    /// Not yet reported to the caller: frames given while the link was down, and frames
    /// taken back from the TX ring.
    link_down: u64,
    flushed: u64,
}

impl AfXdpQueue {
    fn new(
        s: &QueueSpec,
        iface: Interface,
        b: Bound,
        pool: &Pool,
        xdp: Option<Arc<bpf::Attachment>>,
        link: Arc<Link>,
        cache: &mut BufCache,
    ) -> Self {
        let health = sys::Health::new(&s.name, &iface.name, iface.index);
        let fill_target = if b.sock.rx.is_some() {
            (pool.config().buffers / FILL_SHARE).clamp(1, RING_SIZE)
        } else {
            0
        };
        let mut q = Self {
            sock: b.sock,
            lent: Lent::new(pool),
            name: s.name.clone(),
            iface,
            index: s.index,
            queue: queue_of(s),
            zero_copy: b.zero_copy,
            need_wakeup: b.need_wakeup,
            busy_poll: b.busy_poll,
            busy_check: b.busy_poll,
            busy_off: None,
            copy_why: b.copy_why,
            fill_target,
            on_fill: 0,
            in_tx: 0,
            stats: PortStats::default(),
            copied: 0,
            foreign: 0,
            tx_dropped: 0,
            unsendable: 0,
            kicks: (0, 0),
            health,
            xdp,
            link_seen: link.changes(),
            link,
            netdown: false,
            link_down: 0,
            flushed: 0,
        };
        q.refill(cache, 0);
        q.kick_fill();
        q
    }

    /// Whether the socket runs in zero-copy mode (the driver fills and sends pool buffers
    /// itself) rather than copy mode (the kernel copies between its buffers and the pool).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Why the socket is in copy mode (`None` in zero-copy mode).
    pub fn copy_mode_why(&self) -> Option<&str> {
        self.copy_why.as_deref()
    }

    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP` (the kernel says when it
    /// needs a system call to make progress).
    pub fn need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// Whether the socket busy polls (the interface defers its interrupts to busy
    /// pollers): each receive call runs the device queue's NAPI poll in the worker's
    /// context, so the kernel's receive work (XDP, redirect, copy) is the worker's.
    pub fn busy_poll(&self) -> bool {
        self.busy_poll
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
    /// than a chunk ([`FRAME_SIZE`]), empty, or GSO super-packets (the port has no
    /// segmentation offload).
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped
    }

    /// Packets copied in user space to be sent: those chained over several buffers,
    /// joined into one. Every other packet leaves from the buffer it is in.
    pub fn copied(&self) -> u64 {
        self.copied
    }

    /// Buffers lent to the kernel right now: (fill ring, TX ring), each including those
    /// the kernel holds on the way back (RX ring, completion ring).
    pub fn lent(&self) -> (u32, u32) {
        (self.on_fill, self.in_tx)
    }

    /// Descriptors the kernel handed back (RX or completion ring) that named no buffer
    /// this queue had lent: no handle was made for them (a kernel fault; never seen).
    pub fn foreign_descriptors(&self) -> u64 {
        self.foreign
    }

    /// Buffers the queue keeps lent to the fill ring when the pool allows.
    pub fn fill_target(&self) -> u32 {
        self.fill_target
    }

    /// System calls made so far to wake the kernel: (receive, transmit). In copy mode
    /// every transmission needs one per 32 frames; with need-wakeup an idle receive
    /// queue needs none.
    pub fn kicks(&self) -> (u64, u64) {
        self.kicks
    }

    /// Turns busy polling off when the kernel gave the socket no NAPI to poll (copy-mode
    /// sockets on Linux 6.13 and later: the kernel names a socket's NAPI at bind, and only
    /// for zero-copy); receive calls then make no system call that would do nothing.
    #[cold]
    fn check_busy_poll(&mut self) {
        self.busy_check = false;
        if !matches!(self.sock.napi_id(), Ok(id) if id != 0) {
            self.busy_poll = false;
            self.busy_off = Some("busy polling off: the kernel gave the socket no NAPI to poll");
        }
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

    /// Lends buffers from `cache` to the fill ring up to the fill target. `replaced`
    /// frames were just taken off the RX ring: those not replaced for want of a buffer
    /// are counted in `rx_nobuf`.
    fn refill(&mut self, cache: &mut BufCache, replaced: u32) {
        let want = self.fill_target - self.on_fill;
        if want == 0 {
            return;
        }
        assert!(
            cache.pool().same(&self.lent.pool),
            "af_xdp queue {} fed from another pool",
            self.name
        );
        let room = self.sock.fill.free(want).min(want);
        let stride = self.lent.pool.stride() as u64;
        let mut put = 0;
        while put < room {
            let Some(i) = cache.lend() else {
                break;
            };
            if !self.sock.fill.put(put, u64::from(i) * stride) {
                // Cannot happen (`free` showed the slot); the buffer goes back.
                // SAFETY: `i` was lent by `cache.lend` just above and handed to nobody.
                cache.free(unsafe { self.lent.pool.reclaim(i) });
                break;
            }
            self.lent.lend(i);
            put += 1;
        }
        self.sock.fill.submit(put);
        self.on_fill += put;
        self.stats.rx_nobuf += u64::from(replaced.min(room).saturating_sub(put));
    }

    /// Takes transmitted packets back from the completion ring into `cache`.
    fn reap_completions(&mut self, cache: &mut BufCache) {
        let n = self.sock.comp.available(RING_SIZE);
        for i in 0..n {
            let Some(addr) = self.sock.comp.get(i) else {
                break;
            };
            match self.lent.locate(addr, 0) {
                Some((b, _)) if self.lent.take(b) => {
                    self.in_tx -= 1;
                    // SAFETY: the bit said this queue lent buffer `b` (to the TX ring) and
                    // it was cleared just now, so this is its one reclaim; the kernel put
                    // it on the completion ring, so it has finished with it.
                    cache.free(unsafe { self.lent.pool.reclaim(b) });
                }
                // Not a buffer this queue lent: nothing to take back.
                _ => self.foreign += 1,
            }
        }
        self.sock.comp.release(n);
    }

    /// Wakes the kernel if it asks to be told about new fill-ring frames.
    fn kick_fill(&mut self) {
        if self.sock.rx.is_some()
            && !self.busy_poll
            && self.need_wakeup
            && self.sock.fill.needs_wakeup()
        {
            self.kicks.0 += 1;
            if let Err(e) = self.sock.kick_rx() {
                self.check_error("wake receive (recvfrom)", &e);
            }
        }
    }

    /// Makes the kernel transmit what waits in the TX ring: in copy mode only a system
    /// call transmits (32 frames each, or up to the ring's size where the kernel lets the
    /// socket raise it); in zero-copy mode the driver needs one only when it says so.
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
                    // The interface is down: what waits in the ring is taken back at the
                    // round's end (it must not leave when the link returns).
                    Some(libc::ENETDOWN) => {
                        self.netdown = true;
                        return;
                    }
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

    /// Takes back what waits unsent in the TX ring (the link went down: those frames
    /// must not leave when it returns, perhaps seconds later): each pending descriptor
    /// keeps its address and is given a length the kernel refuses (longer than a chunk),
    /// so the kernel, when it next looks, sends none of them; it hands their addresses
    /// back on the completion ring as any other (Linux 6.18 does; a kernel that did not
    /// would leave those buffers lent until the queue closes), where they are reaped.
    /// Returns the frames taken back. Copy mode only: there the kernel reads the TX ring
    /// only inside this queue's own `sendto`; a zero-copy driver reads it on its own, so
    /// its frames are left to the driver.
    fn take_back_pending(&mut self, cache: &mut BufCache) -> u64 {
        self.reap_completions(cache);
        if self.zero_copy || self.sock.tx.pending() == 0 {
            return 0;
        }
        // SAFETY: copy mode (checked above): the kernel consumes the TX ring only in this
        // queue's own `sendto`, and none is in progress during this call.
        let back = unsafe {
            self.sock
                .tx
                .rewrite_pending(|d| libc::xdp_desc { len: u32::MAX, ..d })
        };
        u64::from(back)
    }

    /// Whether a packet can be sent here at all (else it is dropped, `frame_too_long`).
    #[inline(always)]
    fn sendable(m: &Meta) -> bool {
        m.segs <= 1 && m.total_len > 0 && m.total_len <= FRAME_SIZE
    }

    /// Replaces the chained packet `p` by a copy in one new buffer from `cache`; `false`
    /// (nothing changed) when the pool has no buffer or the frame does not fit one.
    fn join(&mut self, cache: &mut BufCache, p: &mut Pkt) -> bool {
        let pool = &self.lent.pool;
        let len = pool.get(p).meta.total_len as usize;
        let Some(mut q) = cache.alloc() else {
            return false;
        };
        let mut v = pool.get_mut(&mut q);
        let Some(dst) = v.append(len) else {
            cache.free(q);
            return false;
        };
        let mut at = 0;
        let mut cur = Some(&*p);
        while let Some(c) = cur {
            let r = pool.get(c);
            let d = r.data();
            if let Some(out) = dst.get_mut(at..at + d.len()) {
                out.copy_from_slice(d);
            }
            at += d.len();
            cur = r.meta.chain.as_ref();
        }
        // What the stack recorded stays true of the joined frame, offsets moved with it.
        let old = pool.get(p).meta;
        let shift = i32::from(v.meta.data) - i32::from(old.data);
        let moved = |o: u16| (i32::from(o) + shift).clamp(0, i32::from(u16::MAX)) as u16;
        v.meta.flags = old.flags;
        v.meta.l3 = moved(old.l3);
        v.meta.l4 = moved(old.l4);
        v.meta.l3_type = old.l3_type;
        v.meta.l4_type = old.l4_type;
        v.meta.l2_len = old.l2_len;
        v.meta.in_port = old.in_port;
        v.meta.out_if = old.out_if;
        v.meta.hash = old.hash;
        v.meta.mark = old.mark;
        core::mem::swap(p, &mut q);
        cache.free(q);
        self.copied += 1;
        true
    }
}

impl Port for AfXdpQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        format!(
            "queue {}: {}, {} mode{}{}{}, UMEM = the packet pool ({} B stride{}){}{}",
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
            },
            match self.sock.tx_budget {
                Some(n) if !self.zero_copy => format!(", up to {n} frames a send"),
                _ => String::new(),
            },
            match (self.busy_poll, self.busy_off) {
                (true, _) => format!(", preferred busy polling ({BUSY_POLL_BUDGET} frames a poll)"),
                (false, Some(why)) => format!(", {why}"),
                (false, None) => String::new(),
            },
            self.lent.pool.stride(),
            if self.lent.pool.layout() == Layout::Pages {
                ", page-tiled"
            } else {
                ""
            },
            if self.fill_target > 0 {
                format!(", {} buffers lent to the fill ring", self.fill_target)
            } else {
                String::new()
            },
            match &self.copy_why {
                Some(why) => format!(" ({why})"),
                None => String::new(),
            },
        )
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        self.health.due(cx.now_ns);
        if self.health.failed() {
            return 0;
        }
        self.reap_completions(cx.cache);
        // Frames a previous call left in the TX ring (copy mode sends 32 a kick).
        self.kick_tx();
        if self.busy_poll {
            // The device queue's NAPI runs here, in this call (one poll of up to
            // `BUSY_POLL_BUDGET` frames): what it receives is on the RX ring after it.
            self.kicks.0 += 1;
            if let Err(e) = self.sock.kick_rx() {
                self.check_error("busy poll (recvfrom)", &e);
            }
        }
        let Some(rx) = self.sock.rx.as_mut() else {
            return 0;
        };
        let n = rx.available(u32::try_from(max).unwrap_or(u32::MAX));
        let mut got = 0u64;
        for k in 0..n {
            let Some(d) = rx.get(k) else {
                break;
            };
            let Some((b, off)) = self
                .lent
                .locate(d.addr, d.len)
                .filter(|&(b, _)| self.lent.take(b))
            else {
                // Not a frame inside a buffer this queue lent: no handle is made.
                self.stats.rx_dropped += 1;
                self.foreign += 1;
                continue;
            };
            self.on_fill -= 1;
            // SAFETY: the bit said this queue lent buffer `b` (to the fill ring) and it was
            // cleared just now, so this is its one reclaim; the kernel put it on the RX
            // ring, so it has finished writing it.
            let mut p = unsafe { self.lent.pool.reclaim(b) };
            let len = d.len as usize;
            if len == 0 || len > MAX_RX_FRAME {
                self.stats.rx_dropped += 1;
                cx.cache.free(p);
                continue;
            }
            let v = self.lent.pool.get_mut(&mut p);
            // The buffer's metadata is whatever its last life left: start afresh.
            *v.meta = Meta::new(off as u16);
            v.meta.len = len as u16;
            v.meta.total_len = len as u32;
            v.meta.in_port = self.index;
            self.stats.rx_bytes += len as u64;
            out.push(p);
            got += 1;
        }
        rx.release(n);
        if self.busy_check && got > 0 {
            self.check_busy_poll();
        }
        self.stats.rx_packets += got;
        self.refill(cx.cache, n);
        self.kick_fill();
        got
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        self.health.due(cx.now_ns);
        if self.health.failed() {
            self.stats.tx_refused += pkts.len() as u64;
            return 0;
        }
        if !self.link.up() {
            // Nothing is handed to a kernel that would hold it in the ring (interface
            // down) or drop it unseen (no carrier).
            let w: u64 = pkts
                .iter()
                .map(|p| self.lent.pool.get(p).meta.wire_packets())
                .sum();
            self.link_down += w;
            self.stats.tx_link_down += w;
            cx.cache.free_all(pkts);
            return 0;
        }
        self.reap_completions(cx.cache);
        let want = u32::try_from(pkts.len()).unwrap_or(u32::MAX);
        let slots = self.sock.tx.free(want).min(want) as usize;
        // What is taken: as many as the ring has slots for, chained packets joined into
        // one buffer on the way (a packet that cannot be joined for want of a buffer
        // stays, with those behind it).
        let mut take = 0;
        while take < slots {
            let Some(p) = pkts.get_mut(take) else {
                break;
            };
            let m = self.lent.pool.get(p).meta;
            if m.chain.is_some() && Self::sendable(m) && !self.join(cx.cache, p) {
                break;
            }
            take += 1;
        }
        let mut sent = 0u32;
        for mut p in pkts.drain(..take) {
            let base = self.lent.pool.offset_of(&p);
            let v = self.lent.pool.get_mut(&mut p);
            if !Self::sendable(v.meta) || v.meta.chain.is_some() {
                let w = v.meta.wire_packets();
                self.tx_dropped += w;
                self.unsendable += w;
                cx.cache.free(p);
                continue;
            }
            let (at, n) = (usize::from(v.meta.data), usize::from(v.meta.len));
            if let Some(frame) = v.buf.get_mut(at..at + n) {
                crate::complete_partial(v.meta, frame);
            }
            let len = u32::from(v.meta.len);
            let desc = libc::xdp_desc {
                addr: base + u64::from(v.meta.data),
                len,
                options: 0,
            };
            if !self.sock.tx.put(sent, desc) {
                // Cannot happen (`free` showed the slots): dropped as unsendable.
                self.tx_dropped += 1;
                self.unsendable += 1;
                cx.cache.free(p);
                continue;
            }
            let i = self.lent.pool.lend(p);
            self.lent.lend(i);
            self.stats.tx_bytes += u64::from(len);
            sent += 1;
        }
        self.in_tx += sent;
        self.stats.tx_packets += u64::from(sent);
        self.stats.tx_refused += pkts.len() as u64;
        self.sock.tx.submit(sent);
        self.kick_tx();
        u64::from(sent)
    }

    fn take_unsendable(&mut self) -> u64 {
        core::mem::take(&mut self.unsendable)
    }

    fn tx_drops(&mut self, cx: &mut PortCx<'_>) -> TxDrops {
        let changes = self.link.changes();
        if (changes != self.link_seen || self.netdown) && !self.health.failed() {
            // The link changed since the last look (went down, perhaps up again): what
            // the ring still holds was handed over before, and leaves never.
            self.link_seen = changes;
            self.netdown = false;
            let back = self.take_back_pending(cx.cache);
            self.flushed += back;
            self.stats.tx_link_down += back;
            self.stats.tx_packets -= back.min(self.stats.tx_packets);
        }
        // The kernel's own drops of what it took (no carrier, a full peer), booked by
        // the queues that sent, none more than it sent.
        let kernel = self.link.take_tx_dropped(self.stats.tx_packets);
        self.stats.tx_packets -= kernel;
        self.stats.tx_kernel_dropped += kernel;
        TxDrops {
            link_down: core::mem::take(&mut self.link_down),
            flushed: core::mem::take(&mut self.flushed),
            kernel,
        }
    }

    fn link(&self) -> Option<Arc<Link>> {
        Some(self.link.clone())
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
