//! The XSK socket of one queue: its UMEM registration and its four rings.
//!
//! Invariants (the reason this module may hold `unsafe`):
//! - a ring's mapping is exactly `desc + size × entry` bytes, and the producer, consumer
//!   and flags words and the descriptor array the kernel reported are checked to lie
//!   inside it, aligned, before any access; indices are masked with `size - 1` (sizes are
//!   powers of two), so no slot address leaves the mapping;
//! - the shared index words are only touched atomically: the side that produces publishes
//!   its index with a release store after writing the entries, the other side reads it
//!   with an acquire load before reading them; each side writes only its own index;
//! - an entry is read (consumer rings) only between the consumer index and a producer
//!   index loaded with acquire, and written (producer rings) only between the producer
//!   index and the kernel's consumer index plus the ring size, so the kernel never
//!   touches a slot while we do;
//! - this module never touches UMEM bytes: the memory is the caller's (the packet pool's
//!   region), registered with the kernel, which pins its pages until the socket is
//!   released; who may touch which buffer when is the caller's business (see the
//!   parent module);
//! - fields drop in declaration order: the rings are unmapped, then the socket is closed
//!   (which unbinds it: the kernel writes no UMEM byte after the close returns).
#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering, fence};

use crate::sys::{self, Mmap};

/// Where one ring's fields lie in its mapping (`struct xdp_ring_offset`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RingOffsets {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`: the four rings' layouts, as `XDP_MMAP_OFFSETS` reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct MmapOffsets {
    rx: RingOffsets,
    tx: RingOffsets,
    fr: RingOffsets,
    cr: RingOffsets,
}

/// `struct xdp_statistics` (the kernel's drop counters of one socket).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KernelStats {
    /// Frames dropped for lack of a fill-ring frame or for being too long.
    pub(super) rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub(super) rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring.
    pub(super) tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub(super) rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub(super) rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was found empty.
    pub(super) tx_ring_empty_descs: u64,
}

/// One mapped ring with entries of type `T` (a `u64` address or an `xdp_desc`).
#[derive(Debug)]
struct RingMap<T> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    size: u32,
    _entry: PhantomData<T>,
}

impl<T: Copy> RingMap<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of `fd`.
    fn map(fd: &OwnedFd, off: &RingOffsets, size: u32, pgoff: i64) -> io::Result<Self> {
        let bad =
            |what: &str| io::Error::other(format!("kernel reported a bad ring layout: {what}"));
        let usz = |v: u64| usize::try_from(v).map_err(|_| bad("offset out of range"));
        let (producer, consumer, flags, desc) = (
            usz(off.producer)?,
            usz(off.consumer)?,
            usz(off.flags)?,
            usz(off.desc)?,
        );
        let len = desc
            .checked_add(size as usize * size_of::<T>())
            .ok_or_else(|| bad("ring too large"))?;
        for w in [producer, consumer, flags] {
            if w % align_of::<AtomicU32>() != 0 || w + size_of::<AtomicU32>() > len {
                return Err(bad("index word outside the ring"));
            }
        }
        if desc % align_of::<T>() != 0 || !size.is_power_of_two() {
            return Err(bad("misaligned descriptors"));
        }
        // The mapping is page aligned, so offsets aligned for a type give aligned addresses.
        let map = Mmap::of_fd(fd, len, pgoff)?;
        Ok(Self {
            map,
            producer,
            consumer,
            flags,
            desc,
            size,
            _entry: PhantomData,
        })
    }

    /// The shared word at `off` (one of the three checked offsets).
    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the offsets checked in `map`: inside the mapping and
        // 4-byte aligned (the mapping is page aligned). The mapping lives as long as
        // `self`, which the returned reference borrows. The kernel only accesses these
        // words atomically (READ_ONCE / smp_store_release), as do we.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    /// The address of the slot for ring index `idx` (masked: always inside the mapping).
    fn slot(&self, idx: u32) -> *mut T {
        let i = (idx & (self.size - 1)) as usize;
        self.map
            .as_ptr()
            .wrapping_add(self.desc + i * size_of::<T>())
            .cast()
    }
}

/// A ring we produce into and the kernel consumes from (fill, TX).
#[derive(Debug)]
pub(super) struct ProdRing<T> {
    ring: RingMap<T>,
    /// Our producer index (what has been published, plus nothing pending).
    prod: u32,
    /// The kernel's consumer index as last read.
    cons: u32,
}

impl<T: Copy> ProdRing<T> {
    fn new(ring: RingMap<T>) -> Self {
        let prod = ring.word(ring.producer).load(Ordering::Relaxed);
        let cons = ring.word(ring.consumer).load(Ordering::Acquire);
        Self { ring, prod, cons }
    }

    /// Slots free for writing, re-reading the kernel's consumer index when the cached
    /// value shows fewer than `want`.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let free = self.ring.size - self.prod.wrapping_sub(self.cons);
        if free >= want {
            return free;
        }
        self.cons = self.ring.word(self.ring.consumer).load(Ordering::Acquire);
        self.ring.size - self.prod.wrapping_sub(self.cons)
    }

    /// Writes entry `i` past the producer index; `false` (nothing written) unless the
    /// last [`free`](Self::free) showed that slot free.
    pub(super) fn put(&mut self, i: u32, v: T) -> bool {
        if i >= self.ring.size - self.prod.wrapping_sub(self.cons) {
            return false;
        }
        // SAFETY: the slot is inside the mapping (masked index) and aligned (checked in
        // `RingMap::map`); it lies between our producer index and the kernel's consumer
        // index plus the ring size, so the kernel has consumed it and will not read it
        // until we publish it with `submit`.
        unsafe { self.ring.slot(self.prod.wrapping_add(i)).write(v) };
        true
    }

    /// Publishes `n` entries written with `put` (one release store).
    pub(super) fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.prod = self.prod.wrapping_add(n);
        self.ring
            .word(self.ring.producer)
            .store(self.prod, Ordering::Release);
    }

    /// Entries published and not yet consumed by the kernel.
    pub(super) fn pending(&mut self) -> u32 {
        self.cons = self.ring.word(self.ring.consumer).load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons)
    }

    /// Overwrites each entry published and not yet consumed with what `f` makes of it;
    /// returns how many there were.
    ///
    /// # Safety
    /// The kernel must not be consuming this ring during the call: a copy-mode TX ring,
    /// which the kernel consumes only inside the owner's own `sendto`.
    pub(super) unsafe fn rewrite_pending(&mut self, mut f: impl FnMut(T) -> T) -> u32 {
        self.cons = self.ring.word(self.ring.consumer).load(Ordering::Acquire);
        let n = self.prod.wrapping_sub(self.cons);
        for i in 0..n {
            let slot = self.ring.slot(self.cons.wrapping_add(i));
            // SAFETY: the slot is inside the mapping (masked index) and aligned (checked in
            // `RingMap::map`); it lies between the kernel's consumer index and our producer
            // index, published but not consumed, and the caller vouches that the kernel
            // does not consume during this call.
            unsafe { slot.write(f(slot.read())) };
        }
        // The rewritten entries are seen by the kernel's next look at the ring.
        fence(Ordering::Release);
        n
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to look at the ring.
    pub(super) fn needs_wakeup(&self) -> bool {
        // Order our producer store before the flag load: the kernel sets the flag, then
        // looks at the ring once more, so one side always sees the other.
        fence(Ordering::SeqCst);
        self.ring.word(self.ring.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// A ring the kernel produces into and we consume from (RX, completion).
#[derive(Debug)]
pub(super) struct ConsRing<T> {
    ring: RingMap<T>,
    /// The kernel's producer index as last read.
    prod: u32,
    /// Our consumer index.
    cons: u32,
}

impl<T: Copy> ConsRing<T> {
    fn new(ring: RingMap<T>) -> Self {
        let prod = ring.word(ring.producer).load(Ordering::Acquire);
        let cons = ring.word(ring.consumer).load(Ordering::Relaxed);
        Self { ring, prod, cons }
    }

    /// Entries ready to be read, at most `max` (re-reads the producer index when the
    /// cached one shows fewer).
    pub(super) fn available(&mut self, max: u32) -> u32 {
        let mut n = self.prod.wrapping_sub(self.cons);
        if n < max {
            self.prod = self.ring.word(self.ring.producer).load(Ordering::Acquire);
            n = self.prod.wrapping_sub(self.cons);
        }
        n.min(max)
    }

    /// Entry `i` past the consumer index, if the kernel has published it.
    pub(super) fn get(&self, i: u32) -> Option<T> {
        if i >= self.prod.wrapping_sub(self.cons) {
            return None;
        }
        // SAFETY: the slot is inside the mapping (masked index) and aligned (checked in
        // `RingMap::map`); it lies between our consumer index and a producer index read
        // with acquire, so the kernel wrote it before publishing and will not write it
        // again until we release it.
        Some(unsafe { self.ring.slot(self.cons.wrapping_add(i)).read() })
    }

    /// Hands `n` read entries back to the kernel (one release store).
    pub(super) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cons = self.cons.wrapping_add(n);
        self.ring
            .word(self.ring.consumer)
            .store(self.cons, Ordering::Release);
    }
}

/// `XDP_MAX_TX_SKB_BUDGET` (`linux/if_xdp.h`, Linux 6.17): frames a copy-mode `sendto`
/// sends at most (32 unless set; at most the TX ring's size).
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;

/// Sizes of one socket's rings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// Fill ring entries.
    pub(super) fill: u32,
    /// Completion ring entries.
    pub(super) comp: u32,
    /// RX ring entries (`None`: the socket only transmits).
    pub(super) rx: Option<u32>,
    /// TX ring entries.
    pub(super) tx: u32,
}

/// The memory a socket registers as its UMEM: page aligned, `len` bytes, that the kernel
/// may read and write at the addresses given to it on the fill and TX rings.
#[derive(Debug, Clone, Copy)]
pub(super) struct UmemArea {
    /// The first byte (page aligned).
    pub(super) addr: *mut u8,
    /// Bytes.
    pub(super) len: usize,
    /// Bytes of a chunk: the most the kernel writes from a fill-ring address on, and the
    /// longest frame it takes from the TX ring.
    pub(super) chunk: u32,
}

/// Why a socket could not be made.
#[derive(Debug)]
pub(super) enum OpenError {
    /// A step before binding failed (the same on every retry).
    Setup(&'static str, io::Error),
    /// Binding with the asked flags failed (another mode may work).
    Bind(io::Error),
}

/// An XSK socket with its UMEM and rings.
#[derive(Debug)]
pub(super) struct Socket {
    /// The fill ring (frames handed to the kernel to receive into).
    pub(super) fill: ProdRing<u64>,
    /// The completion ring (transmitted frames handed back).
    pub(super) comp: ConsRing<u64>,
    /// The RX ring (received frames).
    pub(super) rx: Option<ConsRing<libc::xdp_desc>>,
    /// The TX ring (frames to transmit).
    pub(super) tx: ProdRing<libc::xdp_desc>,
    /// Frames copy mode sends per system call, when the kernel let us raise it from 32.
    pub(super) tx_budget: Option<u32>,
    /// The socket.
    fd: OwnedFd,
}

impl Socket {
    /// Creates a socket over `umem` (registered in unaligned-chunk mode: a chunk may
    /// start at any address, so the fill ring takes buffer starts whatever their
    /// stride, and a TX descriptor any frame inside the area) with its rings, and binds it
    /// to queue `queue` of interface `ifindex` with `sxdp_flags = flags`.
    ///
    /// The kernel pins the area's pages for as long as the socket lives and writes frames
    /// into the chunks given to it on the fill ring: the caller keeps the area mapped for
    /// the socket's life and gives the kernel only memory nothing else uses meanwhile.
    pub(super) fn open(
        g: &Geometry,
        umem: &UmemArea,
        ifindex: u32,
        queue: u32,
        flags: u16,
    ) -> Result<Self, OpenError> {
        use OpenError::Setup;
        let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0)
            .map_err(|e| Setup("create AF_XDP socket", e))?;
        let raw = fd.as_raw_fd();
        let reg = libc::xdp_umem_reg {
            addr: umem.addr as u64,
            len: umem.len as u64,
            chunk_size: umem.chunk,
            headroom: 0,
            flags: libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG,
            tx_metadata_len: 0,
        };
        sys::setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| Setup("register UMEM", e))?;
        sys::setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_FILL_RING, &g.fill)
            .map_err(|e| Setup("size fill ring", e))?;
        sys::setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_COMPLETION_RING, &g.comp)
            .map_err(|e| Setup("size completion ring", e))?;
        if let Some(n) = g.rx {
            sys::setsockopt(raw, libc::SOL_XDP, libc::XDP_RX_RING, &n)
                .map_err(|e| Setup("size RX ring", e))?;
        }
        sys::setsockopt(raw, libc::SOL_XDP, libc::XDP_TX_RING, &g.tx)
            .map_err(|e| Setup("size TX ring", e))?;
        // Copy mode sends 32 frames a system call unless told otherwise (Linux 6.17 on:
        // up to the TX ring's size); an older kernel does not know the option.
        let tx_budget = sys::setsockopt(raw, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &g.tx)
            .is_ok()
            .then_some(g.tx);
        let off: MmapOffsets = sys::getsockopt(raw, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
            .map_err(|e| Setup("read ring offsets", e))?;
        // The page offsets are the kernel's fixed ring selectors (they fit an off_t).
        let fill = RingMap::map(&fd, &off.fr, g.fill, libc::XDP_UMEM_PGOFF_FILL_RING as i64)
            .map_err(|e| Setup("map fill ring", e))?;
        let comp = RingMap::map(
            &fd,
            &off.cr,
            g.comp,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
        )
        .map_err(|e| Setup("map completion ring", e))?;
        let rx = match g.rx {
            Some(n) => Some(
                RingMap::map(&fd, &off.rx, n, libc::XDP_PGOFF_RX_RING)
                    .map_err(|e| Setup("map RX ring", e))?,
            ),
            None => None,
        };
        let tx = RingMap::map(&fd, &off.tx, g.tx, libc::XDP_PGOFF_TX_RING)
            .map_err(|e| Setup("map TX ring", e))?;
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        sys::bind(raw, &addr).map_err(OpenError::Bind)?;
        Ok(Self {
            fill: ProdRing::new(fill),
            comp: ConsRing::new(comp),
            rx: rx.map(ConsRing::new),
            tx: ProdRing::new(tx),
            tx_budget,
            fd,
        })
    }

    /// The socket's descriptor.
    pub(super) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether the kernel runs the socket in zero-copy mode (`XDP_OPTIONS`).
    pub(super) fn zero_copy(&self) -> io::Result<bool> {
        let opts: u32 = sys::getsockopt(self.fd(), libc::SOL_XDP, libc::XDP_OPTIONS)?;
        Ok(opts & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// Turns on preferred busy polling: the socket's `recvfrom`/`sendto`/`poll` run the
    /// device queue's NAPI poll (up to `budget` frames) in the caller's context, and the
    /// kernel leaves that NAPI to them (where the device defers its interrupts).
    pub(super) fn prefer_busy_poll(&self, usec: u32, budget: u32) -> io::Result<()> {
        let one: i32 = 1;
        let usec = i32::try_from(usec).unwrap_or(i32::MAX);
        let budget = i32::try_from(budget).unwrap_or(i32::MAX);
        sys::setsockopt(self.fd(), libc::SOL_SOCKET, libc::SO_PREFER_BUSY_POLL, &one)?;
        sys::setsockopt(self.fd(), libc::SOL_SOCKET, libc::SO_BUSY_POLL, &usec)?;
        sys::setsockopt(
            self.fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL_BUDGET,
            &budget,
        )
    }

    /// The NAPI instance the kernel recorded for the socket's receive queue
    /// (`SO_INCOMING_NAPI_ID`; 0 before the first frame, or when the device has none):
    /// what its busy polls run.
    pub(super) fn napi_id(&self) -> io::Result<u32> {
        sys::getsockopt(self.fd(), libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID)
    }

    /// The kernel's drop counters for the socket.
    pub(super) fn kernel_stats(&self) -> io::Result<KernelStats> {
        sys::getsockopt(self.fd(), libc::SOL_XDP, libc::XDP_STATISTICS)
    }

    /// Asks the kernel to transmit what the TX ring holds (`sendto` with no data).
    pub(super) fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: no buffer and no address are passed (null with zero lengths), which
        // the kernel accepts for AF_XDP; the descriptor is owned by `self`.
        let r = unsafe {
            libc::sendto(
                self.fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Asks the kernel to look at the fill ring again (`recvfrom` with no buffer).
    pub(super) fn kick_rx(&self) -> io::Result<()> {
        // SAFETY: no buffer and no address are passed (null with zero lengths), which
        // the kernel accepts for AF_XDP; the descriptor is owned by `self`.
        let r = unsafe {
            libc::recvfrom(
                self.fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}
