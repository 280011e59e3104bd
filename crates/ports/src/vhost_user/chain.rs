//! Descriptor chains of a split virtqueue, checked before a byte of them is used.
//!
//! Invariants:
//! - a chain is accepted only when it is whole: at least one descriptor, its last one
//!   without `VIRTQ_DESC_F_NEXT` (virtio 1.2 §2.7.5); a bad `next` index, an unreadable
//!   descriptor, a chain longer than its table (a loop) or an indirect descriptor inside
//!   an indirect table or a chain (§2.7.5.3.1) make it broken, or empty when nothing
//!   came before;
//! - every descriptor points where the driver said it would write or read: a transmit
//!   (guest → netbatch) chain has no write-only descriptor, a receive chain only
//!   write-only ones (§2.7.4.2: "device-readable before device-writable");
//! - every `(address, length)` lies inside the peer's memory table
//!   (`GuestMemory::check_range`), so no later copy can touch anything else; an
//!   indirect table must lie in one region of it (as a ring must, [`super::ring`]);
//! - at most [`MAX_DESCS`] descriptors are kept, in a fixed array (no allocation per
//!   chain);
//! - any failure names its reason ([`Malformed`]), for the caller to count.

use vm_memory::{Bytes, GuestAddress, Permissions};

use super::ring::{DESC_LEN, Desc, F_INDIRECT, F_NEXT, F_WRITE, Memory, Ring, Slice, read_desc};

/// Descriptors a chain may have (Linux's virtio-net uses at most 19 for a 64 KiB
/// super-frame: a header and 17 pages, or a header and one linear buffer for small ones).
pub const MAX_DESCS: usize = 64;

/// Why a chain was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// No descriptor at all (the head index is past the table, or the head's indirect
    /// table is misaligned or holds another indirect descriptor).
    Empty,
    /// The walk stopped before a descriptor without `NEXT`: a bad `next` index, a
    /// descriptor outside memory, a loop, or an indirect table inside an indirect table.
    Broken,
    /// A write-only descriptor where the device reads, or a read-only one where it writes.
    Direction,
    /// A buffer outside the peer's memory.
    Memory,
    /// More than [`MAX_DESCS`] descriptors.
    TooMany,
    /// A transmitted chain shorter than its virtio-net header and an Ethernet header.
    Short,
    /// A transmitted chain longer than the largest super-frame.
    Long,
}

impl Malformed {
    /// Every reason, in counter order.
    pub const ALL: [Self; 7] = [
        Self::Empty,
        Self::Broken,
        Self::Direction,
        Self::Memory,
        Self::TooMany,
        Self::Short,
        Self::Long,
    ];

    /// The counter's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "vhost_chain_empty",
            Self::Broken => "vhost_chain_broken",
            Self::Direction => "vhost_chain_direction",
            Self::Memory => "vhost_chain_memory",
            Self::TooMany => "vhost_chain_too_many",
            Self::Short => "vhost_frame_short",
            Self::Long => "vhost_frame_long",
        }
    }

    /// What it means, for `show errors` and the metrics' help.
    pub fn description(self) -> &'static str {
        match self {
            Self::Empty => {
                "vhost-user chain with no descriptor (head past the table, bad indirect table)"
            }
            Self::Broken => "vhost-user chain broken (bad next index, loop, nested indirect table)",
            Self::Direction => {
                "vhost-user descriptor of the wrong direction (write-only where read, or the reverse)"
            }
            Self::Memory => "vhost-user buffer outside the peer's memory",
            Self::TooMany => "vhost-user chain of more descriptors than a frame may take",
            Self::Short => "vhost-user frame shorter than its virtio-net and Ethernet headers",
            Self::Long => "vhost-user frame longer than the largest super-frame",
        }
    }

    /// Its index in [`Malformed::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A checked chain: its buffers in order and their total length.
#[derive(Debug, Clone)]
pub struct Segments {
    seg: [(u64, u32); MAX_DESCS],
    n: usize,
    total: usize,
}

impl Default for Segments {
    fn default() -> Self {
        Self {
            seg: [(0, 0); MAX_DESCS],
            n: 0,
            total: 0,
        }
    }
}

impl Segments {
    /// Bytes over every buffer.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The buffers.
    pub fn iter(&self) -> impl Iterator<Item = (GuestAddress, usize)> + '_ {
        self.seg[..self.n]
            .iter()
            .map(|&(a, l)| (GuestAddress(a), l as usize))
    }

    /// Walks the chain whose head is `head` (popped from `ring`, whose memory is `mem`)
    /// into `self`; `writable`: the device writes into it (the guest's receive queue).
    pub fn walk(
        &mut self,
        ring: &Ring<'_>,
        head: u16,
        mem: &mut Memory<'_>,
        writable: bool,
    ) -> Result<(), Malformed> {
        self.n = 0;
        self.total = 0;
        if head >= ring.size() {
            return Err(Malformed::Empty);
        }
        let d = read_desc(ring.table(), head).ok_or(Malformed::Empty)?;
        if d.flags & F_INDIRECT == 0 {
            return self.follow(ring.table(), ring.size(), head, Some(d), mem, writable);
        }
        // §2.7.5.3.1: an indirect descriptor is the chain's only one in the ring, and its
        // table a whole number of descriptors.
        if d.flags & F_NEXT != 0 {
            return Err(Malformed::Broken);
        }
        let len = d.len as usize;
        if len == 0 || !len.is_multiple_of(DESC_LEN) || len / DESC_LEN > usize::from(u16::MAX) {
            return Err(Malformed::Empty);
        }
        let table = mem.slice(d.addr, len).ok_or(Malformed::Empty)?;
        self.follow(&table, (len / DESC_LEN) as u16, 0, None, mem, writable)
    }

    /// Follows a chain through `table` (of `count` descriptors) from `i` (`first`: its
    /// descriptor, already read). A chain longer than the table loops: broken. An
    /// indirect descriptor inside it is refused (§2.7.5.3.1: not in an indirect table,
    /// nor chained): with nothing before it the chain is empty, else broken.
    fn follow(
        &mut self,
        table: &Slice<'_>,
        count: u16,
        mut i: u16,
        mut first: Option<Desc>,
        mem: &mut Memory<'_>,
        writable: bool,
    ) -> Result<(), Malformed> {
        for _ in 0..count {
            let d = match first.take() {
                Some(d) => d,
                None => read_desc(table, i).ok_or(if self.n == 0 {
                    Malformed::Empty
                } else {
                    Malformed::Broken
                })?,
            };
            if d.flags & F_INDIRECT != 0 {
                return Err(if self.n == 0 {
                    Malformed::Empty
                } else {
                    Malformed::Broken
                });
            }
            if self.n == MAX_DESCS {
                return Err(Malformed::TooMany);
            }
            if (d.flags & F_WRITE != 0) != writable {
                return Err(Malformed::Direction);
            }
            let access = if writable {
                Permissions::Write
            } else {
                Permissions::Read
            };
            if !mem.mapped(d.addr, d.len as usize, access) {
                return Err(Malformed::Memory);
            }
            self.seg[self.n] = (d.addr, d.len);
            self.n += 1;
            self.total += d.len as usize;
            if d.flags & F_NEXT == 0 {
                return Ok(());
            }
            if d.next >= count {
                return Err(Malformed::Broken);
            }
            i = d.next;
        }
        Err(Malformed::Broken)
    }

    /// Copies the chain's bytes from offset `at` into `out` (as many as fit and exist);
    /// returns how many. The ranges were checked by [`Segments::walk`], so a failure here
    /// means the memory table changed under the copy: `None`.
    #[inline]
    pub fn read(&self, mem: &mut Memory<'_>, mut at: usize, out: &mut [u8]) -> Option<usize> {
        let mut o = 0;
        for &(addr, len) in &self.seg[..self.n] {
            let len = len as usize;
            if o == out.len() {
                break;
            }
            if at >= len {
                at -= len;
                continue;
            }
            let k = (len - at).min(out.len() - o);
            let from = addr.checked_add(at as u64)?;
            let to = &mut out[o..o + k];
            // One region (the common case) in one copy; across regions, piece by piece.
            match mem.slice(from, k) {
                Some(v) if v.copy_to(to) == k => {}
                _ => mem.map().read_slice(to, GuestAddress(from)).ok()?,
            }
            o += k;
            at = 0;
        }
        Some(o)
    }
}

/// A checked transmit chain's bytes: one buffer already translated (a chain of one
/// descriptor, the common case, checked by [`Ring::single`]), or the buffers of a
/// walked chain ([`Segments`]).
pub trait ChainBytes {
    /// Bytes in all.
    fn total(&self) -> usize;

    /// Copies the bytes from offset `at` into `out` (as many as fit and exist); returns
    /// how many (`None`: the memory table changed under the copy).
    fn read(&self, mem: &mut Memory<'_>, at: usize, out: &mut [u8]) -> Option<usize>;
}

impl ChainBytes for Slice<'_> {
    #[inline(always)]
    fn total(&self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn read(&self, _mem: &mut Memory<'_>, at: usize, out: &mut [u8]) -> Option<usize> {
        let k = self.len().saturating_sub(at).min(out.len());
        Some(self.subslice(at, k).ok()?.copy_to(&mut out[..k]))
    }
}

impl ChainBytes for Segments {
    #[inline(always)]
    fn total(&self) -> usize {
        self.total
    }

    #[inline(always)]
    fn read(&self, mem: &mut Memory<'_>, at: usize, out: &mut [u8]) -> Option<usize> {
        Self::read(self, mem, at, out)
    }
}

/// A cursor writing into a receive chain's buffers in order.
#[derive(Debug)]
pub struct Writer<'a> {
    segs: &'a Segments,
    i: usize,
    off: usize,
    written: usize,
}

impl<'a> Writer<'a> {
    /// At the chain's first byte.
    pub fn new(segs: &'a Segments) -> Self {
        Self {
            segs,
            i: 0,
            off: 0,
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Room left.
    pub fn room(&self) -> usize {
        self.segs.total - self.written
    }

    /// Moves `n` bytes on without writing (`None`: fewer are left).
    pub fn skip(&mut self, mut n: usize) -> Option<()> {
        while n > 0 {
            let (_, len) = *self.segs.seg[..self.segs.n].get(self.i)?;
            let k = (len as usize - self.off).min(n);
            self.off += k;
            self.written += k;
            n -= k;
            if self.off == len as usize {
                self.i += 1;
                self.off = 0;
            }
        }
        Some(())
    }

    /// Writes as much of `b` as fits; returns how much (`None`: the memory table changed
    /// under the copy).
    pub fn write(&mut self, mem: &mut Memory<'_>, mut b: &[u8]) -> Option<usize> {
        let mut n = 0;
        while !b.is_empty() && self.i < self.segs.n {
            let (addr, len) = self.segs.seg[self.i];
            let len = len as usize;
            if self.off == len {
                self.i += 1;
                self.off = 0;
                continue;
            }
            let k = (len - self.off).min(b.len());
            let to = addr.checked_add(self.off as u64)?;
            match mem.slice(to, k) {
                Some(v) => v.copy_from(&b[..k]),
                None => mem.map().write_slice(&b[..k], GuestAddress(to)).ok()?,
            }
            self.off += k;
            self.written += k;
            n += k;
            b = &b[k..];
        }
        Some(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use virtio_bindings::bindings::virtio_ring::{
        VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
    };
    use virtio_queue::Queue;
    use virtio_queue::desc::{RawDescriptor, split::Descriptor as SplitDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::GuestMemoryMmap;

    /// 1 MiB of guest memory at 0 (rings at 0, buffers from 0x1_0000); nothing above.
    pub(crate) fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap()
    }

    pub(crate) fn desc(addr: u64, len: u32, flags: u32, next: u16) -> RawDescriptor {
        RawDescriptor::from(SplitDescriptor::new(addr, len, flags as u16, next))
    }

    /// Puts `descs` at the start of the table (the first is the head), makes it the one
    /// available chain and walks it.
    fn walk(descs: &[RawDescriptor], writable: bool) -> Result<Segments, Malformed> {
        let m = memory();
        let vq = MockSplitQueue::new(&m, 16);
        for (i, d) in descs.iter().enumerate() {
            vq.desc_table().store(i as u16, *d).unwrap();
        }
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        walk_first(&m, &vq, writable)
    }

    /// Pops the first available chain of `vq` and walks it.
    fn walk_first(
        m: &GuestMemoryMmap,
        vq: &MockSplitQueue<'_, GuestMemoryMmap>,
        writable: bool,
    ) -> Result<Segments, Malformed> {
        let q: Queue = vq.create_queue().unwrap();
        let mut mem = Memory::new(m);
        let mut ring = Ring::open(&q, &mut mem).expect("the rings are mapped");
        let head = ring.pop().expect("one chain available");
        let mut s = Segments::default();
        s.walk(&ring, head, &mut mem, writable).map(|()| s)
    }

    const N: u32 = VRING_DESC_F_NEXT;
    const W: u32 = VRING_DESC_F_WRITE;

    #[test]
    fn a_well_formed_chain_is_kept_in_order() {
        let s = walk(&[desc(0x1_0000, 12, N, 1), desc(0x2_0000, 60, 0, 0)], false).unwrap();
        assert_eq!(s.total(), 72);
        let v: Vec<_> = s.iter().map(|(a, l)| (a.0, l)).collect();
        assert_eq!(v, [(0x1_0000, 12), (0x2_0000, 60)]);
        let s = walk(&[desc(0x1_0000, 1526, W, 0)], true).unwrap();
        assert_eq!(s.total(), 1526);
    }

    #[test]
    fn a_loop_is_broken_not_endless() {
        // 0 → 1 → 0 → …: the crate stops after the queue's size; the last still says NEXT.
        let e = walk(&[desc(0x1_0000, 12, N, 1), desc(0x2_0000, 60, N, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Broken);
        // A descriptor pointing at itself.
        let e = walk(&[desc(0x1_0000, 12, N, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Broken);
    }

    #[test]
    fn a_next_index_past_the_table_is_broken() {
        let e = walk(&[desc(0x1_0000, 12, N, 40)], false);
        assert_eq!(e.unwrap_err(), Malformed::Broken);
    }

    #[test]
    fn a_write_only_buffer_in_a_transmit_chain_is_refused() {
        let e = walk(&[desc(0x1_0000, 12, N, 1), desc(0x2_0000, 60, W, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Direction);
        // And a readable one where the device writes.
        let e = walk(&[desc(0x1_0000, 64, 0, 0)], true);
        assert_eq!(e.unwrap_err(), Malformed::Direction);
    }

    #[test]
    fn a_buffer_outside_the_guest_memory_is_refused() {
        // Entirely outside (the memory ends at 1 MiB).
        let e = walk(&[desc(0x20_0000, 64, 0, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Memory);
        // Straddling the end.
        let e = walk(&[desc(0xf_fff0, 64, 0, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Memory);
        // Wrapping the address space.
        let e = walk(&[desc(u64::MAX - 8, 64, 0, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Memory);
    }

    #[test]
    fn a_head_past_the_table_is_empty() {
        let m = memory();
        let vq = MockSplitQueue::new(&m, 16);
        vq.avail().ring().ref_at(0).unwrap().store(99);
        vq.avail().idx().store(1);
        assert_eq!(walk_first(&m, &vq, false).unwrap_err(), Malformed::Empty);
    }

    #[test]
    fn a_nested_or_misaligned_indirect_table_is_refused() {
        let m = memory();
        // An indirect table at 0x8_0000 whose one entry is itself indirect.
        m.write_obj(
            desc(0x8_0000, 16, VRING_DESC_F_INDIRECT, 0),
            GuestAddress(0x8_0000),
        )
        .unwrap();
        let vq = MockSplitQueue::new(&m, 16);
        vq.desc_table()
            .store(0, desc(0x8_0000, 16, VRING_DESC_F_INDIRECT, 0))
            .unwrap();
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        assert_eq!(walk_first(&m, &vq, false).unwrap_err(), Malformed::Empty);
        // A table whose length is not a whole number of descriptors.
        let e = walk(&[desc(0x8_0000, 20, VRING_DESC_F_INDIRECT, 0)], false);
        assert_eq!(e.unwrap_err(), Malformed::Empty);
    }

    #[test]
    fn an_indirect_table_is_followed() {
        let m = memory();
        m.write_obj(desc(0x1_0000, 12, N, 1), GuestAddress(0x8_0000))
            .unwrap();
        m.write_obj(desc(0x2_0000, 50, 0, 0), GuestAddress(0x8_0010))
            .unwrap();
        let vq = MockSplitQueue::new(&m, 16);
        vq.desc_table()
            .store(0, desc(0x8_0000, 32, VRING_DESC_F_INDIRECT, 0))
            .unwrap();
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        let s = walk_first(&m, &vq, false).unwrap();
        assert_eq!(s.total(), 62);
    }

    #[test]
    fn more_descriptors_than_kept_is_refused() {
        let m = memory();
        // An indirect table of 80 chained descriptors of 1 byte each.
        for i in 0..80u16 {
            let d = if i == 79 {
                desc(0x1_0000 + u64::from(i), 1, 0, 0)
            } else {
                desc(0x1_0000 + u64::from(i), 1, N, i + 1)
            };
            m.write_obj(d, GuestAddress(0x8_0000 + 16 * u64::from(i)))
                .unwrap();
        }
        let vq = MockSplitQueue::new(&m, 16);
        vq.desc_table()
            .store(0, desc(0x8_0000, 80 * 16, VRING_DESC_F_INDIRECT, 0))
            .unwrap();
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        assert_eq!(walk_first(&m, &vq, false).unwrap_err(), Malformed::TooMany);
    }

    #[test]
    fn read_and_write_follow_the_buffers_in_order() {
        let m = memory();
        let s = {
            let vq = MockSplitQueue::new(&m, 16);
            vq.desc_table()
                .store(0, desc(0x1_0000, 3, W | N, 1))
                .unwrap();
            vq.desc_table().store(1, desc(0x2_0000, 5, W, 0)).unwrap();
            vq.avail().ring().ref_at(0).unwrap().store(0);
            vq.avail().idx().store(1);
            walk_first(&m, &vq, true).unwrap()
        };
        let mut mem = Memory::new(&m);
        let mut w = Writer::new(&s);
        assert_eq!(w.write(&mut mem, b"abcd").unwrap(), 4);
        assert_eq!(
            w.write(&mut mem, b"efghij").unwrap(),
            4,
            "8 bytes of room in all"
        );
        assert_eq!((w.written(), w.room()), (8, 0));
        let mut a = [0u8; 3];
        m.read_slice(&mut a, GuestAddress(0x1_0000)).unwrap();
        assert_eq!(&a, b"abc");
        let mut b = [0u8; 5];
        m.read_slice(&mut b, GuestAddress(0x2_0000)).unwrap();
        assert_eq!(&b, b"defgh");
        let mut out = [0u8; 6];
        assert_eq!(s.read(&mut mem, 1, &mut out), Some(6));
        assert_eq!(&out, b"bcdefg");
        let mut big = [0u8; 20];
        assert_eq!(s.read(&mut mem, 0, &mut big), Some(8));
    }

    /// What `virtio-queue`'s own iterator makes of the chain at `head` (the second
    /// implementation): the descriptors it yields, and whether the last still says NEXT.
    fn crate_walk(
        m: &GuestMemoryMmap,
        vq: &MockSplitQueue<'_, GuestMemoryMmap>,
    ) -> (Vec<(u64, u32, bool)>, bool) {
        use virtio_queue::QueueOwnedT;
        let mut q: Queue = vq.create_queue().unwrap();
        let chain = q.iter(m).unwrap().next().expect("one chain available");
        let mut last_next = false;
        let v = chain
            .map(|d| {
                last_next = d.has_next();
                (d.addr().0, d.len(), d.is_write_only())
            })
            .collect();
        (v, last_next)
    }

    proptest::proptest! {
        /// Over any direct descriptor table of 16 entries (addresses in and out of the
        /// memory, any flags but INDIRECT, any next index) and any head: the walk never
        /// panics; it accepts exactly the chains the crate's iterator follows to a
        /// descriptor without NEXT whose descriptors are all of one direction and in
        /// memory (and not more than fit), and then keeps the same buffers in order.
        #[test]
        fn the_walk_agrees_with_the_crates_iterator(
            table in proptest::collection::vec(
                (0u64..0x12_0000, 0u32..0x2_0000, 0u16..4, 0u16..20), 16),
            head in 0u16..18,
            writable: bool,
        ) {
            let m = memory();
            let vq = MockSplitQueue::new(&m, 16);
            for (i, &(addr, len, flags, next)) in table.iter().enumerate() {
                vq.desc_table()
                    .store(i as u16, desc(addr, len, u32::from(flags), next))
                    .unwrap();
            }
            vq.avail().ring().ref_at(0).unwrap().store(head);
            vq.avail().idx().store(1);
            let ours = walk_first(&m, &vq, writable);
            let (theirs, last_next) = crate_walk(&m, &vq);
            let fits = |&(a, l, _): &(u64, u32, bool)| {
                a.checked_add(u64::from(l)).is_some_and(|e| e <= 0x10_0000)
            };
            let whole = !theirs.is_empty() && !last_next;
            let good = whole
                && theirs.iter().all(|d| d.2 == writable && fits(d))
                && theirs.len() <= MAX_DESCS;
            proptest::prop_assert_eq!(ours.is_ok(), good, "ours {:?}, crate {:?}", ours, theirs);
            if let Ok(s) = ours {
                let kept: Vec<_> = s.iter().map(|(a, l)| (a.0, l as u32, writable)).collect();
                proptest::prop_assert_eq!(kept, theirs);
            }
        }
    }
}
