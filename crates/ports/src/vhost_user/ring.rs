//! A split virtqueue (virtio 1.2 §2.7) as a worker uses it for one burst.
//!
//! `virtio-queue`'s `Queue` keeps the queue's state between bursts (addresses, size,
//! the next available and used indices, EVENT_IDX); a burst works on the rings
//! themselves, translated into the peer's memory once, and hands the indices back at the
//! end. This is how DPDK's vhost library works too, and it is where the time went: the
//! crate reads the driver's available index (a cache line the driver's core is writing)
//! at every chain it pops, stores the used index (a line the driver's core is reading) at
//! every chain it returns, and looks the guest address up among the memory regions at
//! every descriptor and copy.
//!
//! Invariants:
//! - the three rings are translated once per burst and must each lie in one region of
//!   the peer's memory (as DPDK's vhost library requires); a queue whose ring does not is
//!   not served ([`Ring::open`] says no);
//! - the available index is read with `Acquire` when the burst starts and again only when
//!   the burst has caught up with it; the entries and descriptors it covers are read
//!   after it (§2.7.13.2: the driver publishes the index after the ring entry);
//! - a driver that claims more chains than the ring holds is not read at all, and a
//!   burst takes at most one ring's worth of chains (its used entries never lap the
//!   ring, and a driver republishing chains cannot keep the worker in one burst);
//! - used entries are written as chains finish, the used index is stored once, with
//!   `Release`, when the burst ends ([`Ring::close`]), after every entry and every byte
//!   written into the driver's buffers (§2.7.14);
//! - whether the driver wants to be signalled is decided once per burst, over every entry
//!   the burst added: EVENT_IDX's used event crossed (§2.7.10), or no
//!   `VRING_AVAIL_F_NO_INTERRUPT` without EVENT_IDX (§2.7.7.2);
//! - every access is bounds-checked by `vm-memory`'s volatile slices: a driver's bad
//!   index or address is an error the caller counts, never a read outside its memory.

use std::num::Wrapping;
use std::sync::atomic::{Ordering, fence};

use virtio_bindings::bindings::virtio_ring::{
    VRING_AVAIL_F_NO_INTERRUPT, VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
    VRING_USED_F_NO_NOTIFY,
};
use virtio_queue::{Queue, QueueT};
use vm_memory::{
    Bytes, GuestAddress, GuestMemory, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    Permissions, VolatileSlice,
};

/// Bytes of guest memory, bounds-checked.
pub type Slice<'m> = VolatileSlice<'m, ()>;

/// The ring flags (§2.7.5, §2.7.7, §2.7.10), as the rings store them (16 bits), from
/// `virtio-bindings`: descriptor chained on, written by the device, an indirect table;
/// the driver asks not to be signalled; the device asks not to be kicked.
pub(crate) const F_NEXT: u16 = VRING_DESC_F_NEXT as u16;
pub(crate) const F_WRITE: u16 = VRING_DESC_F_WRITE as u16;
pub(crate) const F_INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;
pub(crate) const AVAIL_F_NO_INTERRUPT: u16 = VRING_AVAIL_F_NO_INTERRUPT as u16;
pub(crate) const USED_F_NO_NOTIFY: u16 = VRING_USED_F_NO_NOTIFY as u16;
/// A split descriptor's size.
pub(crate) const DESC_LEN: usize = 16;

/// The peer's memory, with the region the last translation found kept at hand (a
/// driver's buffers are nearly always in one region).
pub struct Memory<'m> {
    mem: &'m GuestMemoryMmap,
    hit: Option<(u64, Slice<'m>)>,
}

impl<'m> Memory<'m> {
    /// Over `mem`, nothing translated yet.
    pub fn new(mem: &'m GuestMemoryMmap) -> Self {
        Self { mem, hit: None }
    }

    /// The memory map itself (for ranges across regions).
    pub fn map(&self) -> &'m GuestMemoryMmap {
        self.mem
    }

    /// The `len` bytes at `addr` when they lie in one region.
    #[inline(always)]
    pub fn slice(&mut self, addr: u64, len: usize) -> Option<Slice<'m>> {
        if let Some((start, whole)) = self.hit
            && let Some(off) = addr.checked_sub(start)
            && let Ok(off) = usize::try_from(off)
            && let Ok(s) = whole.subslice(off, len)
        {
            return Some(s);
        }
        self.miss(addr, len)
    }

    #[cold]
    fn miss(&mut self, addr: u64, len: usize) -> Option<Slice<'m>> {
        let r = GuestMemoryBackend::find_region(self.mem, GuestAddress(addr))?;
        let whole = r.as_volatile_slice().ok()?;
        let start = r.start_addr().0;
        self.hit = Some((start, whole));
        let off = usize::try_from(addr - start).ok()?;
        whole.subslice(off, len).ok()
    }

    /// Whether `[addr, addr + len)` is the peer's memory: in one region (the common
    /// case), or else across regions.
    pub fn mapped(&mut self, addr: u64, len: usize, access: Permissions) -> bool {
        self.slice(addr, len).is_some()
            || GuestMemory::check_range(self.mem, GuestAddress(addr), len, access)
    }
}

/// A descriptor as read from a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    /// The buffer's guest address.
    pub addr: u64,
    /// Its length.
    pub len: u32,
    /// `VIRTQ_DESC_F_*`.
    pub flags: u16,
    /// The next descriptor's index, with `VIRTQ_DESC_F_NEXT`.
    pub next: u16,
}

/// Reads descriptor `i` of `table` (`None`: outside it, or misaligned).
#[inline]
pub fn read_desc(table: &Slice<'_>, i: u16) -> Option<Desc> {
    let at = usize::from(i) * DESC_LEN;
    Some(Desc {
        addr: u64::from_le(table.load::<u64>(at, Ordering::Relaxed).ok()?),
        len: u32::from_le(table.load::<u32>(at + 8, Ordering::Relaxed).ok()?),
        flags: u16::from_le(table.load::<u16>(at + 12, Ordering::Relaxed).ok()?),
        next: u16::from_le(table.load::<u16>(at + 14, Ordering::Relaxed).ok()?),
    })
}

/// One burst's view of a split virtqueue.
pub struct Ring<'m> {
    desc: Slice<'m>,
    avail: Slice<'m>,
    used: Slice<'m>,
    size: u16,
    event_idx: bool,
    next_avail: Wrapping<u16>,
    avail_idx: Wrapping<u16>,
    next_used: Wrapping<u16>,
    /// The next available and used indices when the burst started.
    first_avail: Wrapping<u16>,
    first_used: Wrapping<u16>,
}

impl<'m> Ring<'m> {
    /// The rings of `q` in `mem` (`None`: one of them is not in one region, or the
    /// queue has no size or one not a power of 2).
    pub fn open(q: &Queue, mem: &mut Memory<'m>) -> Option<Self> {
        let size = q.size();
        // §2.7: a split queue's size is a power of 2 (`Queue` refuses any other), so a
        // slot is an index masked, not divided.
        if !size.is_power_of_two() {
            return None;
        }
        let n = usize::from(size);
        let desc = mem.slice(q.desc_table(), n * DESC_LEN)?;
        // flags, idx, ring[size], used_event.
        let avail = mem.slice(q.avail_ring(), 4 + 2 * n + 2)?;
        // flags, idx, ring[size] of (id, len), avail_event.
        let used = mem.slice(q.used_ring(), 4 + 8 * n + 2)?;
        let next_avail = Wrapping(q.next_avail());
        let next_used = Wrapping(q.next_used());
        let mut r = Self {
            desc,
            avail,
            used,
            size,
            event_idx: q.event_idx_enabled(),
            next_avail,
            avail_idx: next_avail,
            next_used,
            first_avail: next_avail,
            first_used: next_used,
        };
        r.avail_idx = r.read_avail_idx();
        Some(r)
    }

    /// The driver's available index (`Acquire`: the entries before it are its).
    fn read_avail_idx(&self) -> Wrapping<u16> {
        match self.avail.load::<u16>(2, Ordering::Acquire) {
            // A driver claiming more than the ring holds is not read.
            Ok(i) if (Wrapping(u16::from_le(i)) - self.next_avail).0 <= self.size => {
                Wrapping(u16::from_le(i))
            }
            _ => self.next_avail,
        }
    }

    /// The descriptor table.
    pub fn table(&self) -> &Slice<'m> {
        &self.desc
    }

    /// The queue's size.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// The next available chain's head index (not checked: past the table is the
    /// caller's [`super::chain::Malformed::Empty`]).
    #[inline]
    pub fn pop(&mut self) -> Option<u16> {
        // A burst takes at most a ring's worth: no used index is published before it
        // ends, so a driver cannot rightly offer more, and a lying one cannot hold the
        // worker here or make the burst's used entries lap the ring.
        if (self.next_avail - self.first_avail).0 >= self.size {
            return None;
        }
        if self.next_avail == self.avail_idx {
            self.avail_idx = self.read_avail_idx();
            if self.next_avail == self.avail_idx {
                return None;
            }
        }
        let slot = usize::from(self.next_avail.0 & (self.size - 1));
        let head = self
            .avail
            .load::<u16>(4 + 2 * slot, Ordering::Relaxed)
            .ok()?;
        self.next_avail += 1;
        Some(u16::from_le(head))
    }

    /// Whether no chain is available (as far as the burst has read the driver's index).
    pub fn is_empty(&self) -> bool {
        self.next_avail == self.avail_idx
    }

    /// Whether the burst kept a chain it popped (returned or not).
    pub fn took_any(&self) -> bool {
        self.next_avail != self.first_avail
    }

    /// The buffer of chain `head` when the chain is one direct descriptor of the
    /// direction asked (`writable`: the device writes) in one region of the peer's
    /// memory: the common case, taken without a walk. `None`: anything else, for
    /// [`super::chain::Segments::walk`] to follow or refuse with its reason.
    #[inline(always)]
    pub fn single(&self, head: u16, writable: bool, mem: &mut Memory<'m>) -> Option<Slice<'m>> {
        if head >= self.size {
            return None;
        }
        let d = read_desc(&self.desc, head)?;
        let want = if writable { F_WRITE } else { 0 };
        if d.flags & (F_NEXT | F_INDIRECT | F_WRITE) != want {
            return None;
        }
        mem.slice(d.addr, d.len as usize)
    }

    /// Gives the last popped chain back (it is popped again next).
    #[inline]
    pub fn unpop(&mut self) {
        self.next_avail -= 1;
    }

    /// Returns chain `head` to the driver with `len` bytes written into it (a head past
    /// the table has nothing to return).
    #[inline]
    pub fn put_used(&mut self, head: u16, len: u32) {
        if head >= self.size {
            return;
        }
        let at = 4 + 8 * usize::from(self.next_used.0 & (self.size - 1));
        let ok = self
            .used
            .store(u32::from(head).to_le(), at, Ordering::Relaxed)
            .and_then(|()| self.used.store(len.to_le(), at + 4, Ordering::Relaxed));
        if ok.is_ok() {
            self.next_used += 1;
        }
    }

    /// Ends the burst: publishes the used entries, hands the indices back to `q`, and
    /// says whether the driver asked to be signalled for what was returned.
    pub fn close(self, q: &mut Queue) -> bool {
        q.set_next_avail(self.next_avail.0);
        q.set_next_used(self.next_used.0);
        if self.next_used == self.first_used {
            return false;
        }
        // Every entry and every byte written into the driver's buffers before the index.
        let _ = self
            .used
            .store(self.next_used.0.to_le(), 2, Ordering::Release);
        // The index is out before the driver's wish is read (it may change it after).
        fence(Ordering::SeqCst);
        let n = usize::from(self.size);
        if self.event_idx {
            let Ok(event) = self.avail.load::<u16>(4 + 2 * n, Ordering::Relaxed) else {
                return true;
            };
            let (new, old) = (self.next_used, self.first_used);
            (new - Wrapping(u16::from_le(event)) - Wrapping(1)) < (new - old)
        } else {
            self.avail
                .load::<u16>(0, Ordering::Relaxed)
                .map_or(true, |f| u16::from_le(f) & AVAIL_F_NO_INTERRUPT == 0)
        }
    }
}

/// Reads the guest memory's `u16` at `addr` (tests and the slow path).
#[cfg(test)]
pub(crate) fn read_u16(m: &GuestMemoryMmap, addr: u64) -> u16 {
    u16::from_le(m.read_obj(GuestAddress(addr)).expect("mapped"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::chain::tests::{desc, memory};
    use virtio_queue::mock::MockSplitQueue;

    #[test]
    fn a_burst_reads_the_heads_in_order_and_publishes_its_used_entries_once() {
        let m = memory();
        let vq = MockSplitQueue::new(&m, 16);
        for (k, h) in [3u16, 7, 1].iter().enumerate() {
            vq.avail().ring().ref_at(k).unwrap().store(*h);
            vq.desc_table()
                .store(*h, desc(0x1_0000 * u64::from(*h), 64, 0, 0))
                .unwrap();
        }
        vq.avail().idx().store(3);
        let mut q: Queue = vq.create_queue().unwrap();
        let mut mem = Memory::new(&m);
        let mut r = Ring::open(&q, &mut mem).unwrap();
        assert_eq!(r.pop(), Some(3));
        assert_eq!(r.pop(), Some(7));
        r.unpop();
        assert_eq!(r.pop(), Some(7));
        assert_eq!(
            read_desc(r.table(), 7).unwrap(),
            Desc {
                addr: 0x7_0000,
                len: 64,
                flags: 0,
                next: 0
            }
        );
        r.put_used(3, 10);
        r.put_used(99, 10); // past the table: nothing returned
        r.put_used(7, 20);
        let used_idx = vq.used_addr().0 + 2;
        assert_eq!(
            read_u16(&m, used_idx),
            0,
            "not published before the burst ends"
        );
        // No EVENT_IDX, no NO_INTERRUPT flag: the driver wants a signal.
        assert!(r.close(&mut q));
        assert_eq!(read_u16(&m, used_idx), 2);
        assert_eq!((q.next_avail(), q.next_used()), (2, 2));
        let e = vq.used_addr().0 + 4;
        let rd = |a: u64| u32::from_le(m.read_obj(GuestAddress(a)).unwrap());
        assert_eq!((rd(e), rd(e + 4), rd(e + 8), rd(e + 12)), (3, 10, 7, 20));
        // The next burst starts where this one ended.
        let mut r = Ring::open(&q, &mut mem).unwrap();
        assert_eq!(r.pop(), Some(1));
        assert_eq!(r.pop(), None);
        assert!(!r.close(&mut q), "nothing returned: nothing to signal");
    }

    #[test]
    fn a_driver_claiming_more_than_the_ring_holds_is_not_read() {
        let m = memory();
        let vq = MockSplitQueue::new(&m, 16);
        vq.avail().idx().store(17);
        let q: Queue = vq.create_queue().unwrap();
        let mut mem = Memory::new(&m);
        let mut r = Ring::open(&q, &mut mem).unwrap();
        assert_eq!(r.pop(), None);
    }

    /// A 16-entry queue laid out by hand (the mock's used ring overlaps its available
    /// ring's tail): descriptors at 0, available ring at 0x1000, used ring at 0x2000,
    /// with `heads` available.
    fn by_hand(m: &GuestMemoryMmap, heads: &[u16]) -> Queue {
        let mut q = Queue::new(16).unwrap();
        q.set_desc_table_address(Some(0), Some(0));
        q.set_avail_ring_address(Some(0x1000), Some(0));
        q.set_used_ring_address(Some(0x2000), Some(0));
        q.set_ready(true);
        for (k, h) in heads.iter().enumerate() {
            m.write_obj(h.to_le(), GuestAddress(0x1004 + 2 * k as u64))
                .unwrap();
        }
        m.write_obj((heads.len() as u16).to_le(), GuestAddress(0x1002))
            .unwrap();
        q
    }

    #[test]
    fn a_burst_takes_at_most_a_rings_worth() {
        let m = memory();
        let heads: Vec<u16> = (0..16).collect();
        let mut q = by_hand(&m, &heads);
        let mut mem = Memory::new(&m);
        let mut r = Ring::open(&q, &mut mem).unwrap();
        for h in 0..16 {
            assert_eq!(r.pop(), Some(h));
            r.put_used(h, 0);
        }
        // A driver that goes on offering within the burst (it cannot have seen any
        // chain returned) is not read on.
        m.write_obj(32u16.to_le(), GuestAddress(0x1002)).unwrap();
        assert_eq!(r.pop(), None);
        assert!(r.close(&mut q));
        assert_eq!((q.next_avail(), q.next_used()), (16, 16));
        // The next burst goes on.
        let mut r = Ring::open(&q, &mut mem).unwrap();
        assert_eq!(r.pop(), Some(0));
    }

    #[test]
    fn event_idx_signals_only_when_the_used_event_is_crossed() {
        let m = memory();
        let mut q = by_hand(&m, &[0, 1, 2, 3]);
        q.set_event_idx(true);
        // used_event (after the available ring's 16 entries): signal once entry 2 is used.
        m.write_obj(2u16.to_le(), GuestAddress(0x1000 + 4 + 2 * 16))
            .unwrap();
        let mut mem = Memory::new(&m);
        let mut r = Ring::open(&q, &mut mem).unwrap();
        for _ in 0..2 {
            let h = r.pop().unwrap();
            r.put_used(h, 0);
        }
        assert!(!r.close(&mut q), "used 0 and 1: the event (2) not crossed");
        let mut r = Ring::open(&q, &mut mem).unwrap();
        for _ in 0..2 {
            let h = r.pop().unwrap();
            r.put_used(h, 0);
        }
        assert!(r.close(&mut q), "used 2 and 3: crossed");
    }

    #[test]
    fn without_event_idx_the_no_interrupt_flag_is_obeyed() {
        let m = memory();
        let mut q = by_hand(&m, &[5]);
        m.write_obj(AVAIL_F_NO_INTERRUPT.to_le(), GuestAddress(0x1000))
            .unwrap();
        let mut mem = Memory::new(&m);
        let mut r = Ring::open(&q, &mut mem).unwrap();
        let h = r.pop().unwrap();
        r.put_used(h, 60);
        assert!(!r.close(&mut q));
        assert_eq!(read_u16(&m, 0x2002), 1, "published all the same");
    }

    #[test]
    fn a_ring_outside_the_memory_is_not_served() {
        let m = memory();
        let vq = MockSplitQueue::new(&m, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        q.set_desc_table_address(Some(0xf_ff80), Some(0));
        let mut mem = Memory::new(&m);
        assert!(Ring::open(&q, &mut mem).is_none());
    }
}
