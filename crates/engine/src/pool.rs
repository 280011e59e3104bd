//! The packet buffer pool: one region allocated at start, fixed-size buffers, a hot
//! metadata block per buffer, and per-worker caches in front of a lock-free free list.
//!
//! Invariants (the reason this module may hold `unsafe`):
//! - A buffer is named by a [`Pkt`] handle. `Pkt` is neither `Copy` nor `Clone` and only
//!   this module constructs one, when it takes an index off a free list; freeing consumes
//!   it. So at any instant at most one `Pkt` exists per buffer, and whoever holds it owns
//!   the buffer: `&Pkt` gives shared access to its bytes and metadata, `&mut Pkt` exclusive
//!   access. That is what makes handing buffers between worker threads sound.
//! - A `Pkt` carries the id of the pool that made it, checked on every access, so a
//!   handle cannot reach another pool's memory. Pool ids are reused only after a pool was
//!   dropped with every buffer back on its free list; a pool dropped with buffers still out
//!   retires its id for the life of the process.
//! - Nothing here allocates after [`Pool::new`]: the free list, the caches and the metadata
//!   array are sized once. Exhaustion is a counted `None`, never a panic.
//! - A device that reads and writes the region itself (an AF_XDP socket registers it as
//!   its UMEM) is lent buffers by index: [`BufCache::lend`] takes a free buffer's index
//!   without making a handle, [`Pool::lend`] turns a handle into its index; either way no
//!   handle for that buffer exists while the device has it, so nothing in Rust reads or
//!   writes its bytes or metadata. [`Pool::reclaim`] (unsafe: the caller vouches that it
//!   lent that index and has not reclaimed it since) makes the one handle again. A lent
//!   buffer is in no free list and in no cache: the lender accounts for it until it comes
//!   back. Lending is not on any path of a pool no device borrows from.
//! - Huge pages: the region is backed by hugetlbfs pages when the system has them
//!   reserved, else by transparent huge pages (the region advised `MADV_HUGEPAGE` before
//!   it is first written, so its faults map 2 MiB pages where the kernel's THP mode is
//!   `always` or `madvise`), else by 4 KiB pages; [`Pool::backing`] says which.
//!   [`ZeroedArray`] gives other large tables (the IPv4 FIB's first level) a zeroed
//!   mapping of their own with the same advice. The advice changes how pages are
//!   backed, never what they hold.
#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::fmt;
use core::num::NonZeroU32;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_queue::ArrayQueue;

use crate::meta::Meta;

/// Bytes of one cache line (the stride padding between buffers).
const CACHE_LINE: usize = 64;

/// Highest buffer count a pool may have: indices use the low 24 bits of a handle.
pub const MAX_BUFFERS: u32 = (1 << 24) - 1;
/// Smallest headroom a pool accepts: enough to push an outer Ethernet + IPv4 + tunnel
/// header in front of a received frame.
pub const MIN_HEADROOM: u16 = 128;

/// Why a pool could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// A configuration field is out of range; the string names it and says why.
    Config(&'static str),
    /// The operating system refused the memory.
    NoMemory(String),
    /// Every pool id is in use (255 live pools, or ids retired by leaky pools).
    NoPoolId,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(why) => write!(f, "bad pool configuration: {why}"),
            Self::NoMemory(why) => write!(f, "cannot allocate packet buffers: {why}"),
            Self::NoPoolId => f.write_str("too many packet pools in this process"),
        }
    }
}

impl std::error::Error for PoolError {}

/// Sizes of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of buffers (1 ..= [`MAX_BUFFERS`]).
    pub buffers: u32,
    /// Bytes per buffer, headroom included; a power of two from 1024 to 65536.
    pub buf_size: u32,
    /// Bytes kept free in front of received data so headers can be pushed (≥ 128).
    pub headroom: u16,
    /// Buffers each worker keeps in its private cache (bulk refill/spill at the edges).
    pub cache_size: u32,
    /// Back the region with 2 MiB huge pages: hugetlbfs pages when the system has them
    /// reserved, else transparent huge pages where the kernel allows them (falls back to
    /// 4 KiB pages; [`Pool::backing`] says which).
    pub huge_pages: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            buffers: 16384,
            buf_size: 2048,
            headroom: 128,
            cache_size: 512,
            huge_pages: true,
        }
    }
}

impl PoolConfig {
    /// Bytes a buffer holds after its headroom (what a port may receive into one).
    pub fn room(&self) -> usize {
        (self.buf_size - u32::from(self.headroom)) as usize
    }

    /// Checks every field is in range.
    pub fn validate(&self) -> Result<(), PoolError> {
        if self.buffers == 0 || self.buffers > MAX_BUFFERS {
            return Err(PoolError::Config("buffers must be between 1 and 16777215"));
        }
        if !self.buf_size.is_power_of_two() || !(1024..=65536).contains(&self.buf_size) {
            return Err(PoolError::Config(
                "buf_size must be a power of two from 1024 to 65536",
            ));
        }
        if self.headroom < MIN_HEADROOM || u32::from(self.headroom) + 256 > self.buf_size {
            return Err(PoolError::Config(
                "headroom must be at least 128 and leave 256 bytes of data room",
            ));
        }
        if self.cache_size == 0 || self.cache_size > 8192 {
            return Err(PoolError::Config("cache_size must be between 1 and 8192"));
        }
        Ok(())
    }
}

/// How buffers are laid out in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// A cache line apart beyond their size (`buf_size + 64`), so that the first data line
    /// of consecutive buffers falls in different L1 sets. Some buffers straddle a page.
    #[default]
    Padded,
    /// Exactly `buf_size` apart, so no buffer of up to a page straddles a page (and larger
    /// ones span whole pages): what a device that maps each page for DMA on its own needs
    /// to use any buffer (AF_XDP zero-copy). Same-offset lines of consecutive buffers
    /// share L1 sets.
    Pages,
}

/// A handle to one packet buffer: owning it means owning the buffer.
///
/// Four bytes: the pool id in the top 8 bits, the buffer index below. Not `Copy`, not
/// `Clone`: move it to hand the buffer on, give it back with [`BufCache::free`].
#[derive(PartialEq, Eq)]
#[must_use = "a packet handle owns a buffer: free it, queue it or pass it on"]
pub struct Pkt(NonZeroU32);

impl Pkt {
    #[inline(always)]
    fn new(pool: u8, index: u32) -> Self {
        debug_assert!(pool != 0 && index <= MAX_BUFFERS);
        // The pool id is never 0, so the value is never 0.
        match NonZeroU32::new((u32::from(pool) << 24) | index) {
            Some(v) => Self(v),
            None => unreachable!("pool ids start at 1"),
        }
    }

    /// The handle of buffer `index` of the pool whose id bits (a handle of index 0's
    /// value) are `id_bits`: no test that the value is non-zero, `id_bits` is.
    #[inline(always)]
    fn of(id_bits: NonZeroU32, index: u32) -> Self {
        debug_assert!(index <= MAX_BUFFERS);
        Self(id_bits | index)
    }

    /// The buffer's index inside its pool (stable for the handle's life; for traces and
    /// for ports that map buffers to device descriptors).
    #[inline(always)]
    pub fn index(&self) -> u32 {
        self.0.get() & MAX_BUFFERS
    }

    #[inline(always)]
    fn pool(&self) -> u8 {
        (self.0.get() >> 24) as u8
    }
}

impl fmt::Debug for Pkt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pkt({}:{})", self.pool(), self.index())
    }
}

#[cold]
#[inline(never)]
fn foreign_handle() -> ! {
    panic!("packet handle used with a foreign pool")
}

/// Pool ids in use; index 0 is never handed out. `true` = taken or retired.
static POOL_IDS: Mutex<[bool; 256]> = Mutex::new([false; 256]);

fn take_pool_id() -> Option<u8> {
    let mut ids = POOL_IDS.lock().unwrap_or_else(|e| e.into_inner());
    let id = (1..256).find(|&i| !ids[i])?;
    ids[id] = true;
    u8::try_from(id).ok()
}

fn release_pool_id(id: u8) {
    let mut ids = POOL_IDS.lock().unwrap_or_else(|e| e.into_inner());
    ids[usize::from(id)] = false;
}

/// Size of a huge page (x86-64 and arm64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Size of a base page.
const PAGE: usize = 4096;

/// How memory is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Pages reserved in hugetlbfs (`MAP_HUGETLB`).
    Hugetlb,
    /// Transparent huge pages asked for with `MADV_HUGEPAGE` (the kernel may still use
    /// 4 KiB pages where it has no free 2 MiB ones: `huge_bytes` says how much).
    Transparent,
    /// 4 KiB pages (huge pages off, or refused).
    Small,
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Hugetlb => "hugetlbfs",
            Self::Transparent => "transparent huge pages",
            Self::Small => "4 KiB pages",
        })
    }
}

/// Whether large tables ask for huge pages ([`ZeroedArray`] asks for none when off).
static HUGE_TABLES: AtomicBool = AtomicBool::new(true);

/// Turns the huge-page advice for large tables on or off for the process (on by default;
/// the bench's `--huge-pages off` and the configuration's `pool.huge_pages = false` turn
/// it off). Tables allocated afterwards follow it.
pub fn set_huge_tables(on: bool) {
    HUGE_TABLES.store(on, Ordering::Relaxed);
}

/// Whether large tables ask for huge pages.
pub fn huge_tables() -> bool {
    HUGE_TABLES.load(Ordering::Relaxed)
}

/// Bytes of the `len` bytes at address `at` that the kernel backs with transparent huge
/// pages right now: the `AnonHugePages` of the mapping holding `at` in
/// `/proc/self/smaps`, at most `len`, if that can be read. The kernel may merge
/// neighbouring mappings with the same flags into one, in which case this counts for all
/// of them, bounded by `len`.
fn huge_bytes_at(at: usize, len: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = (lo..hi).contains(&at);
            continue;
        }
        if inside && first == "AnonHugePages:" {
            let kib: u64 = words.next()?.parse().ok()?;
            return Some((kib * 1024).min(len as u64));
        }
    }
    None
}

/// Types for which all-zero bytes are a valid value, so that a fresh (zeroed) anonymous
/// mapping holds valid values of them.
///
/// # Safety
///
/// Implement only for types whose every field is an integer (or an array of them): all
/// zero bytes must be a valid value, and the type must own nothing.
pub unsafe trait Zeroable: Copy {}

// SAFETY: integers are valid for every bit pattern, zero included, and own nothing.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for u16 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}

/// `N` values of `T` in a mapping of their own, starting zeroed: the kernel maps the pages
/// only when they are first written (an untouched page costs no memory), and the mapping
/// is advised to huge pages before that when huge tables are on ([`set_huge_tables`]),
/// so a large table (the IPv4 FIB's 64 MiB first level) is backed by 2 MiB pages and its
/// lookups miss the TLB far less. The allocator is not used: it may hand out memory it
/// has written already (its dynamic mmap threshold reuses freed chunks), too late for the
/// advice to take effect.
pub struct ZeroedArray<T: Zeroable, const N: usize> {
    ptr: NonNull<[T; N]>,
    backing: Backing,
}

// SAFETY: the array is owned (nothing else refers to the mapping), so it is sent and
// shared as a `Box<[T; N]>` of the same `T` would be.
unsafe impl<T: Zeroable + Send, const N: usize> Send for ZeroedArray<T, N> {}
// SAFETY: as above: `&ZeroedArray` gives only `&[T; N]`.
unsafe impl<T: Zeroable + Sync, const N: usize> Sync for ZeroedArray<T, N> {}

impl<T: Zeroable, const N: usize> ZeroedArray<T, N> {
    const BYTES: usize = N * size_of::<T>();

    /// A zeroed array (aborts as `Box::new` does when the system has no memory for it).
    pub fn new() -> Self {
        Self::with_huge(true)
    }

    /// A zeroed array for a table expected to stay sparse (a VRF's FIB, of which there
    /// may be a thousand): never advised to huge pages, and advised against them (where
    /// the system backs every mapping with them), so that a write commits one 4 KiB page
    /// and not 2 MiB; mapped without reserving swap for the whole array, which is
    /// mostly never written.
    pub fn new_small() -> Self {
        Self::with_huge(false)
    }

    /// A zeroed array, advised to huge pages when `huge` and huge tables are on.
    fn with_huge(huge: bool) -> Self {
        let layout = std::alloc::Layout::new::<[T; N]>();
        if Self::BYTES == 0 || cfg!(miri) {
            // Miri has no mmap of this kind; a zero-sized array needs no mapping. Either
            // way a zeroed allocation stands in for it (a dangling, aligned pointer for a
            // zero-sized one).
            let p = if Self::BYTES == 0 {
                NonNull::<[T; N]>::dangling()
            } else {
                // SAFETY: the layout has a non-zero size here.
                let raw = unsafe { std::alloc::alloc_zeroed(layout) };
                NonNull::new(raw.cast()).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
            };
            return Self {
                ptr: p,
                backing: Backing::Small,
            };
        }
        let flags = if huge {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE
        };
        let r = Region::mmap(Self::BYTES, flags, Backing::Small)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(layout));
        let mut backing = Backing::Small;
        if !huge && Self::BYTES >= HUGE_PAGE {
            // SAFETY: as below: the mapping was just made and nothing refers to it;
            // MADV_NOHUGEPAGE changes only how it is backed (a failure leaves it as the
            // system's default would).
            let _ =
                unsafe { libc::madvise(r.ptr.as_ptr().cast(), Self::BYTES, libc::MADV_NOHUGEPAGE) };
        }
        if huge && huge_tables() && Self::BYTES >= HUGE_PAGE {
            // SAFETY: the mapping was just made, `BYTES` long, and nothing refers to it;
            // MADV_HUGEPAGE changes only how it is backed.
            if unsafe { libc::madvise(r.ptr.as_ptr().cast(), Self::BYTES, libc::MADV_HUGEPAGE) }
                == 0
            {
                backing = Backing::Transparent;
            }
        }
        let ptr = r.ptr.cast::<[T; N]>();
        // The array owns the mapping from here on (its drop unmaps it).
        core::mem::forget(r);
        Self { ptr, backing }
    }

    /// How the array is backed.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Bytes of the array the kernel backs with huge pages now, as `/proc/self/smaps`
    /// counts them (`None` if it cannot be read).
    pub fn huge_bytes(&self) -> Option<u64> {
        match self.backing {
            Backing::Transparent => huge_bytes_at(self.ptr.as_ptr() as usize, Self::BYTES),
            Backing::Hugetlb | Backing::Small => Some(0),
        }
    }
}

impl<T: Zeroable, const N: usize> Default for ZeroedArray<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Zeroable, const N: usize> core::ops::Deref for ZeroedArray<T, N> {
    type Target = [T; N];

    #[inline(always)]
    fn deref(&self) -> &[T; N] {
        // SAFETY: `ptr` is an aligned (page-aligned, or the allocator's for the layout),
        // initialised (zero is a valid `T`) array owned by `self`, borrowed for `&self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: Zeroable, const N: usize> core::ops::DerefMut for ZeroedArray<T, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T; N] {
        // SAFETY: as in `deref`, borrowed exclusively for `&mut self`.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: Zeroable, const N: usize> Drop for ZeroedArray<T, N> {
    fn drop(&mut self) {
        if Self::BYTES == 0 {
            return;
        }
        if cfg!(miri) {
            // SAFETY: allocated by `alloc_zeroed` with this layout in `new`.
            unsafe {
                std::alloc::dealloc(
                    self.ptr.as_ptr().cast(),
                    std::alloc::Layout::new::<[T; N]>(),
                )
            };
            return;
        }
        // SAFETY: the mapping is exactly what `new` mapped, and no reference into it
        // outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), Self::BYTES);
        }
    }
}

impl<T: Zeroable, const N: usize> fmt::Debug for ZeroedArray<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZeroedArray")
            .field("len", &N)
            .field("backing", &self.backing)
            .finish_non_exhaustive()
    }
}

/// The memory region holding every buffer, page aligned (a valid AF_XDP UMEM).
struct Region {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

impl Region {
    fn map(len: usize, huge: bool) -> Result<Self, PoolError> {
        // MAP_POPULATE faults every page in now, not on the fast path later. Miri models
        // only plain anonymous private mappings: under it the pool maps without it (and
        // without huge pages), which changes nothing the pool's own code does.
        let plain = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if cfg!(miri) {
            return Self::mmap(len, plain, Backing::Small);
        }
        if huge {
            if let Ok(r) = Self::mmap(
                len,
                plain | libc::MAP_POPULATE | libc::MAP_HUGETLB,
                Backing::Hugetlb,
            ) {
                return Ok(r);
            }
            // Transparent huge pages: the advice must come before the first fault, so map
            // without populating, advise, then populate (writing, as MAP_POPULATE would).
            let mut r = Self::mmap(len, plain, Backing::Small)?;
            // SAFETY: the region was just mapped, `len` bytes at `ptr`, and nothing else
            // refers to it yet; MADV_HUGEPAGE changes only how it is backed.
            let advised =
                unsafe { libc::madvise(r.ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) } == 0;
            if advised {
                r.backing = Backing::Transparent;
            }
            r.populate();
            return Ok(r);
        }
        Self::mmap(len, plain | libc::MAP_POPULATE, Backing::Small)
    }

    fn mmap(len: usize, flags: i32, backing: Backing) -> Result<Self, PoolError> {
        // SAFETY: an anonymous private mapping with a null hint has no preconditions;
        // the result is checked against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) if p != libc::MAP_FAILED => Ok(Self { ptr, len, backing }),
            _ => Err(PoolError::NoMemory(format!(
                "mmap of {len} bytes: {}",
                std::io::Error::last_os_error()
            ))),
        }
    }

    /// Faults every page of a region mapped without MAP_POPULATE in now (kernels before
    /// 5.14 lack MADV_POPULATE_WRITE: then by writing a zero to each page, which is what
    /// a fresh anonymous page holds already).
    fn populate(&mut self) {
        // SAFETY: the region is `len` bytes at `ptr`, mapped by us and not yet handed
        // out: nothing else refers to it.
        let done = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        } == 0;
        if !done {
            for off in (0..self.len).step_by(PAGE) {
                // SAFETY: `off < len`, inside the mapping; a volatile write of the zero
                // the page already holds, so that the fault happens now.
                unsafe { self.ptr.as_ptr().add(off).write_volatile(0) };
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, and no reference into the
        // region outlives the pool (every accessor borrows the pool).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

struct Shared {
    id: u8,
    region: Region,
    meta: Box<[UnsafeCell<Meta>]>,
    free: ArrayQueue<u32>,
    cfg: PoolConfig,
    stride: usize,
    layout: Layout,
    alloc_failures: AtomicU64,
}

// SAFETY: the only interior mutability is through `UnsafeCell<Meta>` and the region's
// bytes; access to buffer `i` requires a `Pkt` for `i` (by `&` for reads, `&mut` for
// writes) and at most one `Pkt` per buffer exists (module invariant), so two threads can
// never touch the same buffer without that handle having moved between them, which is a
// synchronising hand-off (channel, ring) in safe code.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw region pointer is owned by `Shared` and freed once in Drop.
unsafe impl Send for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // Caches give their buffers back when dropped, so a full free list means no
        // handle of this pool exists any more and the id can be reused safely.
        if self.free.len() == self.cfg.buffers as usize {
            release_pool_id(self.id);
        }
    }
}

/// A packet buffer pool, shared by every worker (clone it to share).
///
/// Besides the shared state, each `Pool` value carries copies of the few fields every
/// access needs (ids, base addresses, sizes), so an access is two multiplies and a
/// compare with no pointer chasing.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
    /// The pool id where a handle keeps it (the top 8 bits): a handle of this pool XOR this is
    /// its index, and that of any other pool is above [`MAX_BUFFERS`].
    id_bits: NonZeroU32,
    stride: usize,
    buf_size: usize,
    meta_base: *mut Meta,
    buf_base: *mut u8,
}

// SAFETY: the raw pointers are copies of `shared`'s region and metadata array, which
// live as long as `shared` (held by this value); access through them follows the same
// handle discipline as `Shared` (see its Sync impl).
unsafe impl Send for Pool {}
// SAFETY: as for Send: shared access only hands out references tied to a `Pkt` borrow.
unsafe impl Sync for Pool {}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.shared.id)
            .field("buffers", &self.shared.cfg.buffers)
            .field("free", &self.shared.free.len())
            .finish()
    }
}

impl Pool {
    /// Allocates the region and metadata once, buffers [`Layout::Padded`]; every buffer
    /// starts on the free list.
    pub fn new(cfg: PoolConfig) -> Result<Self, PoolError> {
        Self::with_layout(cfg, Layout::Padded)
    }

    /// As [`Pool::new`], with the buffers laid out as `layout` says.
    pub fn with_layout(cfg: PoolConfig, layout: Layout) -> Result<Self, PoolError> {
        cfg.validate()?;
        // Padded: buffers are a cache line apart beyond their size. With a power-of-two
        // stride the first data line of every buffer would fall in the same one or two L1
        // sets (the way size is 4 KiB), and a list of 64 packets would thrash them.
        let stride = match layout {
            Layout::Padded => cfg.buf_size as usize + CACHE_LINE,
            Layout::Pages => cfg.buf_size as usize,
        };
        let len = cfg.buffers as usize * stride;
        let region = Region::map(len, cfg.huge_pages)?;
        let id = take_pool_id().ok_or(PoolError::NoPoolId)?;
        let meta = (0..cfg.buffers)
            .map(|_| UnsafeCell::new(Meta::new(cfg.headroom)))
            .collect();
        let free = ArrayQueue::new(cfg.buffers as usize);
        for i in 0..cfg.buffers {
            // Capacity equals the buffer count, so this cannot fail.
            let _ = free.push(i);
        }
        let shared = Shared {
            id,
            region,
            meta,
            free,
            stride,
            layout,
            cfg,
            alloc_failures: AtomicU64::new(0),
        };
        let shared = Arc::new(shared);
        Ok(Self {
            id_bits: Pkt::new(id, 0).0,
            stride: shared.stride,
            buf_size: shared.cfg.buf_size as usize,
            // `UnsafeCell<Meta>` has the layout of `Meta`.
            meta_base: UnsafeCell::raw_get(shared.meta.as_ptr()),
            buf_base: shared.region.ptr.as_ptr(),
            shared,
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.cfg
    }

    /// A new per-worker cache in front of this pool.
    pub fn cache(&self) -> BufCache {
        BufCache {
            pool: self.clone(),
            stack: Vec::with_capacity(self.shared.cfg.cache_size as usize * 2),
            cap: self.shared.cfg.cache_size as usize,
            limit: self.shared.cfg.cache_size as usize * 2,
            alloc_failures: 0,
        }
    }

    /// Buffers on the shared free list (not counting those in worker caches).
    pub fn free_in_pool(&self) -> usize {
        self.shared.free.len()
    }

    /// Allocation attempts that found no buffer, over all caches that have flushed their
    /// counts (see [`BufCache::alloc_failures`] for a cache's own count).
    pub fn alloc_failures(&self) -> u64 {
        self.shared.alloc_failures.load(Ordering::Relaxed)
    }

    /// Base address and length of the region (for registering it with a device, e.g. as
    /// an AF_XDP UMEM). The pool keeps ownership; the pointer is only valid while it lives.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.shared.region.ptr.as_ptr(), self.shared.region.len)
    }

    /// Byte offset of a buffer inside the region.
    #[inline(always)]
    pub fn offset_of(&self, p: &Pkt) -> u64 {
        (self.check(p) as u64) * self.stride as u64
    }

    /// Bytes from one buffer's start to the next's.
    #[inline(always)]
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Whether `other` is this pool (a clone of it), not merely one like it.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// How the buffers are laid out.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// How the region is backed.
    pub fn backing(&self) -> Backing {
        self.shared.region.backing
    }

    /// Bytes of the region the kernel backs with huge pages now (all of it for
    /// hugetlbfs; for transparent huge pages as `/proc/self/smaps` counts them).
    pub fn huge_bytes(&self) -> Option<u64> {
        let r = &self.shared.region;
        match r.backing {
            Backing::Hugetlb => Some(r.len as u64),
            Backing::Small => Some(0),
            Backing::Transparent => huge_bytes_at(r.ptr.as_ptr() as usize, r.len),
        }
    }

    /// The buffer holding byte `offset` of the region and the offset inside it; `None`
    /// past the last buffer or in the padding between two.
    #[inline(always)]
    pub fn locate(&self, offset: u64) -> Option<(u32, usize)> {
        let stride = self.stride as u64;
        let index = offset / stride;
        let within = (offset - index * stride) as usize;
        (index < u64::from(self.shared.cfg.buffers) && within < self.buf_size)
            .then_some((index as u32, within))
    }

    /// Gives up a handle, keeping its buffer out of the pool for a device: the returned
    /// index is the buffer's ([`Pkt::index`]) until [`Pool::reclaim`] makes a handle of
    /// it again. Whatever is chained to the packet stays chained (lend only unchained
    /// packets: a chain is freed with its head, and a lent head is not freed). Nothing is
    /// unsound if the index is never reclaimed: the buffer is then merely lost.
    #[inline(always)]
    pub fn lend(&self, p: Pkt) -> u32 {
        let i = self.check(&p);
        debug_assert!(self.meta_chain_is_empty(i), "a lent packet has no chain");
        i
    }

    #[inline(always)]
    fn meta_chain_is_empty(&self, i: u32) -> bool {
        // SAFETY: `i` passed the pool check with its handle, which the caller still owns
        // (moved into `lend`), so nothing else reaches the metadata.
        unsafe { (*self.meta_ptr(i)).chain.is_none() }
    }

    /// The handle of a lent buffer, again: the buffer is back in Rust's hands with its
    /// bytes as the device left them and its metadata as it was when lent. Panics if
    /// `index` is not a buffer of this pool.
    ///
    /// # Safety
    /// `index` must have been lent by this caller ([`Pool::lend`] or [`BufCache::lend`] on
    /// this pool) and not reclaimed since, and whoever it was lent to (the device) must be
    /// done with it: it neither reads nor writes the buffer any more. Then no other handle
    /// for it exists and this one owns it.
    #[inline(always)]
    pub unsafe fn reclaim(&self, index: u32) -> Pkt {
        assert!(
            index < self.shared.cfg.buffers,
            "reclaimed index {index} is not a buffer of this pool"
        );
        Pkt::of(self.id_bits, index)
    }

    #[inline(always)]
    fn check(&self, p: &Pkt) -> u32 {
        // A handle from another pool would alias that pool's owner: refuse it. One XOR
        // both tests the pool id (any other leaves a bit above the index) and yields the
        // index.
        let i = p.0.get() ^ self.id_bits.get();
        if i > MAX_BUFFERS {
            foreign_handle();
        }
        i
    }

    #[inline(always)]
    fn buf_ptr(&self, index: u32) -> *mut u8 {
        // In bounds: index < buffers, so the offset is inside the region.
        self.buf_base.wrapping_add(index as usize * self.stride)
    }

    #[inline(always)]
    fn meta_ptr(&self, index: u32) -> *mut Meta {
        // In bounds: index < buffers, the metadata array's length.
        self.meta_base.wrapping_add(index as usize)
    }

    /// Read access to a packet: its metadata and its whole buffer.
    #[inline(always)]
    pub fn get<'a>(&'a self, p: &'a Pkt) -> PktRef<'a> {
        let i = self.check(p);
        // SAFETY: `p` passed the pool check, so it is the unique handle for buffer `i` of
        // this pool (only this pool makes handles with its id, one per free index taken),
        // and we hold `&p`, so no `&mut` to this buffer or its metadata exists for 'a.
        // i < buffers, so both pointers are inside allocations kept alive by `self.shared`
        // for as long as `self` is borrowed.
        unsafe {
            PktRef {
                meta: &*self.meta_ptr(i),
                buf: core::slice::from_raw_parts(self.buf_ptr(i), self.buf_size),
            }
        }
    }

    /// Exclusive access to a packet: its metadata and its whole buffer.
    #[inline(always)]
    pub fn get_mut<'a>(&'a self, p: &'a mut Pkt) -> PktMut<'a> {
        let i = self.check(p);
        // SAFETY: as in `get`, and we hold `&mut p`, so this is the only reference to the
        // buffer and its metadata for 'a.
        unsafe {
            PktMut {
                meta: &mut *self.meta_ptr(i),
                buf: core::slice::from_raw_parts_mut(self.buf_ptr(i), self.buf_size),
            }
        }
    }

    /// Hints the CPU to bring a packet's metadata and first data line into cache.
    #[inline(always)]
    pub fn prefetch(&self, p: &Pkt) {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let i = self.check(p);
            let meta = self.meta_ptr(i).cast::<i8>().cast_const();
            let data = self
                .buf_ptr(i)
                .wrapping_add(usize::from(self.shared.cfg.headroom));
            // SAFETY: prefetch never faults and has no effect on program state; both
            // addresses are inside live allocations anyway. SSE is part of x86_64.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(meta);
                _mm_prefetch::<_MM_HINT_T0>(data.cast::<i8>().cast_const());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

/// A worker's private stack of free buffers in front of the shared free list.
///
/// Allocation and free touch only this stack in the steady state; the shared list is
/// visited in bulk when the stack runs dry or overflows.
pub struct BufCache {
    pool: Pool,
    stack: Vec<u32>,
    cap: usize,
    /// `2 * cap`: a free that finds this many spills down to `cap`.
    limit: usize,
    alloc_failures: u64,
}

impl fmt::Debug for BufCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufCache")
            .field("cached", &self.stack.len())
            .finish()
    }
}

impl BufCache {
    /// The pool behind this cache.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Takes a free buffer, reset to empty with the pool's headroom; `None` (counted)
    /// when the pool is exhausted.
    #[inline]
    pub fn alloc(&mut self) -> Option<Pkt> {
        if self.stack.is_empty() {
            self.refill();
        }
        match self.stack.pop() {
            Some(i) => {
                // SAFETY: `i` came off this pool's free stack, so no handle for it exists
                // and nothing else can reach its metadata; i < buffers keeps the pointer
                // inside the metadata array, which `self.pool` keeps alive.
                unsafe { (*self.pool.meta_ptr(i)).reset(self.pool.shared.cfg.headroom) };
                Some(Pkt::of(self.pool.id_bits, i))
            }
            None => {
                self.alloc_failures += 1;
                None
            }
        }
    }

    /// Takes a free buffer for a device, as its index (see [`Pool::lend`]): no handle is
    /// made and the metadata is not reset (whoever reclaims it sets what it needs).
    /// `None` (counted as an allocation failure) when the pool is exhausted.
    #[inline]
    pub fn lend(&mut self) -> Option<u32> {
        if self.stack.is_empty() {
            self.refill();
        }
        let got = self.stack.pop();
        if got.is_none() {
            self.alloc_failures += 1;
        }
        got
    }

    #[cold]
    fn refill(&mut self) {
        let want = self.cap.div_ceil(2).max(1);
        while self.stack.len() < want {
            match self.pool.shared.free.pop() {
                Some(i) => self.stack.push(i),
                None => break,
            }
        }
    }

    /// Gives a buffer back (and every buffer chained behind it).
    #[inline]
    pub fn free(&mut self, mut p: Pkt) {
        loop {
            let i = self.pool.check(&p);
            // SAFETY: `p` passed the pool check and is owned here (moved in), so it is
            // the only handle for buffer `i`; nothing else reaches its metadata.
            let next = unsafe { (*self.pool.meta_ptr(i)).chain.take() };
            // The handle dies here; its index goes back on the free stack.
            if self.stack.len() >= self.limit {
                self.spill();
            }
            self.stack.push(i);
            match next {
                Some(n) => p = n,
                None => break,
            }
        }
    }

    /// Gives back every buffer of `list`, leaving it empty.
    pub fn free_all(&mut self, list: &mut Vec<Pkt>) {
        for p in list.drain(..) {
            self.free(p);
        }
    }

    #[cold]
    fn spill(&mut self) {
        while self.stack.len() > self.cap {
            match self.stack.pop() {
                // The shared list has room for every buffer, so this cannot fail.
                Some(i) => {
                    let _ = self.pool.shared.free.push(i);
                }
                None => break,
            }
        }
    }

    /// Allocation attempts this cache could not serve.
    pub fn alloc_failures(&self) -> u64 {
        self.alloc_failures
    }

    /// Buffers currently parked in this cache.
    pub fn cached(&self) -> usize {
        self.stack.len()
    }

    /// Returns every cached buffer to the shared list (a stopping worker calls this; Drop
    /// does it too).
    pub fn flush(&mut self) {
        for i in self.stack.drain(..) {
            let _ = self.pool.shared.free.push(i);
        }
        self.pool
            .shared
            .alloc_failures
            .fetch_add(self.alloc_failures, Ordering::Relaxed);
        self.alloc_failures = 0;
    }
}

impl Drop for BufCache {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Read view of one packet: metadata plus the whole buffer (headroom included).
pub struct PktRef<'a> {
    /// The packet's metadata.
    pub meta: &'a Meta,
    /// The whole buffer; the frame is `buf[meta.data .. meta.data + meta.len]`.
    pub buf: &'a [u8],
}

impl<'a> PktRef<'a> {
    /// The bytes of the packet in this buffer, from the current start.
    #[inline(always)]
    pub fn data(&self) -> &'a [u8] {
        let start = usize::from(self.meta.data);
        self.buf
            .get(start..start + usize::from(self.meta.len))
            .unwrap_or(&[])
    }
}

/// Exclusive view of one packet: metadata plus the whole buffer (headroom included).
pub struct PktMut<'a> {
    /// The packet's metadata.
    pub meta: &'a mut Meta,
    /// The whole buffer; the frame is `buf[meta.data .. meta.data + meta.len]`.
    pub buf: &'a mut [u8],
}

impl PktMut<'_> {
    /// The bytes of the packet in this buffer, from the current start.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let start = usize::from(self.meta.data);
        self.buf
            .get(start..start + usize::from(self.meta.len))
            .unwrap_or(&[])
    }

    /// The metadata and the packet's bytes together, to read the bytes while recording
    /// what they hold.
    #[inline(always)]
    pub fn split(&mut self) -> (&mut Meta, &[u8]) {
        let start = usize::from(self.meta.data);
        let d = self
            .buf
            .get(start..start + usize::from(self.meta.len))
            .unwrap_or(&[]);
        (self.meta, d)
    }

    /// The bytes of the packet in this buffer, writable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.meta.data);
        self.buf
            .get_mut(start..start + usize::from(self.meta.len))
            .unwrap_or(&mut [])
    }

    /// Bytes free in front of the data.
    #[inline(always)]
    pub fn headroom(&self) -> usize {
        usize::from(self.meta.data)
    }

    /// Bytes free after the data.
    #[inline(always)]
    pub fn tailroom(&self) -> usize {
        self.buf.len() - usize::from(self.meta.data) - usize::from(self.meta.len)
    }

    /// Grows the packet at the front by `n` bytes (into the headroom) and returns them;
    /// `None` if the headroom is too small.
    #[inline]
    pub fn push(&mut self, n: usize) -> Option<&mut [u8]> {
        let n16 = u16::try_from(n).ok()?;
        if n > self.headroom() {
            return None;
        }
        self.meta.data -= n16;
        self.meta.len += n16;
        self.meta.total_len += u32::from(n16);
        let start = usize::from(self.meta.data);
        self.buf.get_mut(start..start + n)
    }

    /// Removes `n` bytes from the front; `false` (nothing changed) if the packet is
    /// shorter than `n`.
    #[inline]
    pub fn pull(&mut self, n: usize) -> bool {
        match u16::try_from(n) {
            Ok(n16) if n16 <= self.meta.len => {
                self.meta.data += n16;
                self.meta.len -= n16;
                self.meta.total_len -= u32::from(n16);
                true
            }
            _ => false,
        }
    }

    /// Keeps only the `len` bytes that start `off` bytes into the data (drops headers in
    /// front and padding behind, in one step); `false` (nothing changed) if they are not
    /// all there.
    #[inline]
    pub fn narrow(&mut self, off: usize, len: usize) -> bool {
        match (u16::try_from(off), u16::try_from(len)) {
            (Ok(o), Ok(l)) if usize::from(o) + usize::from(l) <= usize::from(self.meta.len) => {
                self.meta.data += o;
                self.meta.len = l;
                self.meta.total_len = u32::from(l);
                true
            }
            _ => false,
        }
    }

    /// Cuts the packet (in this buffer) to `len` bytes; a no-op if already shorter.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        if let Ok(l) = u16::try_from(len)
            && l < self.meta.len
        {
            self.meta.total_len -= u32::from(self.meta.len - l);
            self.meta.len = l;
        }
    }

    /// Grows the packet at the tail by `n` bytes and returns them; `None` without room.
    #[inline]
    pub fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        let n16 = u16::try_from(n).ok()?;
        if n > self.tailroom() {
            return None;
        }
        let start = usize::from(self.meta.data) + usize::from(self.meta.len);
        self.meta.len += n16;
        self.meta.total_len += u32::from(n16);
        self.buf.get_mut(start..start + n)
    }

    /// Replaces the packet's bytes with `bytes`, starting at the configured headroom.
    /// Returns `false` (nothing changed) if they do not fit.
    pub fn set_data(&mut self, headroom: usize, bytes: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(headroom..headroom + bytes.len()) else {
            return false;
        };
        let (Ok(h), Ok(l)) = (u16::try_from(headroom), u16::try_from(bytes.len())) else {
            return false;
        };
        dst.copy_from_slice(bytes);
        self.meta.data = h;
        self.meta.len = l;
        self.meta.total_len = u32::from(l);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(buffers: u32, cache: u32) -> Pool {
        Pool::new(PoolConfig {
            buffers,
            cache_size: cache,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// The kernel's transparent huge page mode (`always [madvise] never`: the bracketed
    /// word), if it has THP.
    fn thp_mode() -> Option<String> {
        let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
        let (_, rest) = s.split_once('[')?;
        Some(rest.split_once(']')?.0.to_owned())
    }

    /// A zeroed table advised before its first write is backed by huge pages once
    /// written, as /proc/self/smaps counts them, where the kernel's THP mode allows
    /// advice (`always` or `madvise`); with the advice off the call does nothing.
    #[test]
    #[cfg_attr(miri, ignore = "Miri has no madvise or /proc")]
    fn advised_tables_get_huge_pages_where_the_kernel_allows() {
        let Some(mode) = thp_mode() else {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        };
        let mut t = ZeroedArray::<u64, { 8 * HUGE_PAGE / 8 }>::new();
        let advised = t.backing() == Backing::Transparent;
        assert_eq!(advised, mode != "never", "THP mode {mode}");
        assert!(t.iter().all(|&w| w == 0), "starts zeroed");
        for (i, w) in t.iter_mut().enumerate().step_by(512) {
            *w = i as u64;
        }
        let huge = t.huge_bytes().expect("smaps readable");
        if advised {
            // The kernel may fall back to 4 KiB pages where it has no free 2 MiB page,
            // so ask for one huge page at least of the eight.
            assert!(huge >= HUGE_PAGE as u64, "{huge} bytes in huge pages");
        }
        assert!(huge <= size_of_val(&*t) as u64);
        set_huge_tables(false);
        let off = ZeroedArray::<u64, { 8 * HUGE_PAGE / 8 }>::new();
        set_huge_tables(true);
        assert_eq!(off.backing(), Backing::Small, "huge tables off: no advice");
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri maps plain 4 KiB pages")]
    fn a_pool_says_how_it_is_backed() {
        let p = small(4096, 64);
        let want = match thp_mode().as_deref() {
            None | Some("never") => Backing::Small,
            Some(_) => Backing::Transparent,
        };
        // hugetlbfs first where pages are reserved (none on the machines this runs on
        // unless someone reserved them: then that is the answer).
        let b = p.backing();
        assert!(
            b == want || b == Backing::Hugetlb,
            "{b:?}, expected {want:?}"
        );
        let huge = p.huge_bytes().expect("smaps readable");
        assert!(huge <= (4096 * (2048 + 64)) as u64);
        let off = small_off(4096);
        assert_eq!(off.backing(), Backing::Small);
        assert_eq!(off.huge_bytes(), Some(0));
    }

    fn small_off(buffers: u32) -> Pool {
        Pool::new(PoolConfig {
            buffers,
            huge_pages: false,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn rejects_bad_config_naming_the_field() {
        let e = Pool::new(PoolConfig {
            buf_size: 3000,
            ..PoolConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("buf_size"), "{e}");
        let e = Pool::new(PoolConfig {
            headroom: 64,
            ..PoolConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("headroom"), "{e}");
        let e = Pool::new(PoolConfig {
            buffers: 0,
            ..PoolConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("buffers"), "{e}");
    }

    #[test]
    fn exhaustion_is_counted_not_fatal() {
        let pool = small(8, 4);
        let mut c = pool.cache();
        let got: Vec<Pkt> = (0..8).map(|_| c.alloc().unwrap()).collect();
        assert!(c.alloc().is_none());
        assert!(c.alloc().is_none());
        assert_eq!(c.alloc_failures(), 2);
        let mut got = got;
        c.free_all(&mut got);
        assert!(c.alloc().is_some_and(|p| {
            c.free(p);
            true
        }));
        drop(c);
        assert_eq!(pool.free_in_pool(), 8);
        assert_eq!(pool.alloc_failures(), 2);
    }

    #[test]
    fn handles_are_unique_and_buffers_do_not_overlap() {
        let pool = small(64, 16);
        let mut c = pool.cache();
        let mut ps: Vec<Pkt> = (0..64).map(|_| c.alloc().unwrap()).collect();
        let mut seen = std::collections::HashSet::new();
        for (n, p) in ps.iter_mut().enumerate() {
            assert!(seen.insert(p.index()));
            let mut v = pool.get_mut(p);
            assert_eq!(v.meta.data, 128);
            assert_eq!(v.meta.len, 0);
            v.append(4)
                .unwrap()
                .copy_from_slice(&(n as u32).to_be_bytes());
        }
        for (n, p) in ps.iter().enumerate() {
            assert_eq!(pool.get(p).data(), &(n as u32).to_be_bytes());
        }
        c.free_all(&mut ps);
    }

    #[test]
    fn metadata_is_reset_on_alloc() {
        let pool = small(1, 1);
        let mut c = pool.cache();
        let mut p = c.alloc().unwrap();
        {
            let mut v = pool.get_mut(&mut p);
            v.meta.mark = 7;
            v.meta.in_port = 3;
            assert!(v.append(60).is_some());
        }
        c.free(p);
        let mut p = c.alloc().unwrap();
        let v = pool.get_mut(&mut p);
        assert_eq!((v.meta.mark, v.meta.in_port, v.meta.len), (0, 0, 0));
        c.free(p);
    }

    #[test]
    fn push_pull_truncate_respect_bounds() {
        let pool = small(2, 2);
        let mut c = pool.cache();
        let mut p = c.alloc().unwrap();
        let mut v = pool.get_mut(&mut p);
        assert!(v.append(100).is_some());
        assert!(v.push(129).is_none(), "headroom is 128");
        assert!(v.push(14).is_some());
        assert_eq!((v.meta.data, v.meta.len, v.meta.total_len), (114, 114, 114));
        assert!(v.pull(14));
        assert!(!v.pull(101));
        v.truncate(10);
        assert_eq!(v.data().len(), 10);
        assert!(v.append(2048).is_none());
        c.free(p);
    }

    #[test]
    fn chained_buffers_are_freed_with_their_head() {
        let pool = small(4, 1);
        let mut c = pool.cache();
        let mut head = c.alloc().unwrap();
        let mut mid = c.alloc().unwrap();
        let tail = c.alloc().unwrap();
        pool.get_mut(&mut mid).meta.chain = Some(tail);
        pool.get_mut(&mut head).meta.chain = Some(mid);
        c.free(head);
        drop(c);
        assert_eq!(pool.free_in_pool(), 4);
    }

    #[test]
    #[should_panic(expected = "foreign pool")]
    fn foreign_handle_is_refused() {
        let a = small(1, 1);
        let b = small(1, 1);
        let mut ca = a.cache();
        let p = ca.alloc().unwrap();
        let _ = b.get(&p).data().len();
    }

    #[test]
    fn lent_buffers_are_out_of_the_pool_until_reclaimed() {
        let pool = small(8, 4);
        let mut c = pool.cache();
        // Lent from the cache: an index, no handle, counted nowhere in the pool.
        let a = c.lend().unwrap();
        let mut p = c.alloc().unwrap();
        pool.get_mut(&mut p)
            .append(3)
            .unwrap()
            .copy_from_slice(b"abc");
        let b = pool.lend(p);
        assert_ne!(a, b);
        let mut rest: Vec<Pkt> = core::iter::from_fn(|| c.alloc()).collect();
        assert_eq!(rest.len(), 6, "two buffers are lent");
        assert!(c.lend().is_none(), "exhaustion is a counted None");
        assert_eq!(c.alloc_failures(), 2);
        c.free_all(&mut rest);
        // SAFETY: both were lent above and are reclaimed once each; nothing else has them.
        let (pa, pb) = unsafe { (pool.reclaim(a), pool.reclaim(b)) };
        assert_eq!((pa.index(), pb.index()), (a, b));
        assert_eq!(pool.get(&pb).data(), b"abc", "bytes and metadata as lent");
        c.free(pa);
        c.free(pb);
        drop(c);
        assert_eq!(pool.free_in_pool(), 8);
    }

    #[test]
    fn offsets_locate_their_buffer_in_either_layout() {
        for (layout, stride) in [(Layout::Padded, 2048 + 64), (Layout::Pages, 2048)] {
            let pool = Pool::with_layout(
                PoolConfig {
                    buffers: 4,
                    cache_size: 4,
                    ..PoolConfig::default()
                },
                layout,
            )
            .unwrap();
            assert_eq!((pool.stride(), pool.layout()), (stride, layout));
            let (base, len) = pool.region();
            assert!(!base.is_null() && len >= 4 * stride);
            let mut c = pool.cache();
            let p = c.alloc().unwrap();
            let off = pool.offset_of(&p);
            assert_eq!(off, u64::from(p.index()) * stride as u64);
            assert_eq!(pool.locate(off + 300), Some((p.index(), 300)));
            assert_eq!(pool.locate(3 * stride as u64 + 2047), Some((3, 2047)));
            assert_eq!(pool.locate(4 * stride as u64), None, "past the last buffer");
            if layout == Layout::Padded {
                assert_eq!(pool.locate(2048), None, "in the padding");
            }
            c.free(p);
        }
    }

    #[test]
    #[should_panic(expected = "not a buffer of this pool")]
    fn reclaiming_an_index_past_the_pool_panics() {
        let pool = small(2, 2);
        // SAFETY: the call panics before making a handle.
        let _ = unsafe { pool.reclaim(2) };
    }

    #[test]
    fn buffers_cross_threads_and_come_back() {
        let pool = small(1024, 64);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Pkt>>(4);
        let p2 = pool.clone();
        let consumer = std::thread::spawn(move || {
            let mut c = p2.cache();
            let mut n = 0u64;
            for mut batch in rx {
                for p in &batch {
                    n += u64::from(p2.get(p).data()[0]);
                }
                c.free_all(&mut batch);
            }
            n
        });
        let mut c = pool.cache();
        let mut sent = 0u64;
        // Under Miri (which checks every access of both threads) a few rounds are enough to
        // cross the cache's refill and spill between the threads.
        let rounds = if cfg!(miri) { 12 } else { 200 };
        for round in 0..rounds {
            let mut batch = Vec::new();
            for _ in 0..32 {
                let Some(mut p) = c.alloc() else { break };
                let b = (round % 7) as u8 + 1;
                pool.get_mut(&mut p).append(1).unwrap()[0] = b;
                sent += u64::from(b);
                batch.push(p);
            }
            tx.send(batch).unwrap();
        }
        drop(tx);
        assert_eq!(consumer.join().unwrap(), sent);
        drop(c);
        assert_eq!(pool.free_in_pool(), 1024);
    }
}
