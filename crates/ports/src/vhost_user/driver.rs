//! The driver's side of a vhost-user virtio-net device: what a guest's virtio-net driver
//! behind QEMU, or DPDK's `net_virtio_user`, is to a backend. The benchmark's source and
//! sink use it (`netbatch flood --via vhost_user`), and tests use it against netbatch's
//! own backend. It connects to a backend's socket as the vhost-user frontend (the `vhost`
//! crate's `Frontend`) and shares with it a memory of its own: a file on `/dev/shm`,
//! unlinked once open, mapped by `vm-memory`. That memory holds two split virtqueues
//! (virtio 1.2 §2.7), queue 0 (the device's receive queue: frames the backend sends) and
//! queue 1 (transmit), and their buffers.
//!
//! Invariants:
//! - every descriptor points into the shared memory, at a buffer of its own queue;
//! - a transmit descriptor holds one frame (a zeroed virtio-net header and the frame),
//!   written once when the driver is made and never changed: a descriptor handed out
//!   again always carries the same bytes;
//! - a receive descriptor is handed back to the backend as soon as its frame is counted;
//! - the driver polls: its avail rings ask for no interrupts (`VRING_AVAIL_F_NO_INTERRUPT`,
//!   §2.7.7), and it kicks only when the backend has not said it polls
//!   (`VRING_USED_F_NO_NOTIFY`). No event index is negotiated.
//!
//! It negotiates `VIRTIO_F_VERSION_1` (a 12-byte header) and the vhost-user protocol
//! features bit when the backend offers them, no offload: frames go as they are.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{Ordering, fence};

use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::ring;

/// `VIRTIO_F_VERSION_1` (virtio 1.2 §6).
const VERSION_1: u64 = 1 << 32;
/// `VHOST_USER_F_PROTOCOL_FEATURES`.
const PROTOCOL_FEATURES: u64 = 1 << 30;
/// Bytes of each buffer, one cache line more than 2 KiB: buffers 2 KiB apart put their
/// first lines in the same few cache sets, and the device (netbatch or DPDK's vhost
/// library alike) then misses on every header it reads (measured: 5.8 → 7.0 Mpps
/// through netbatch, 8.8 → 9.6 through `l3fwd`). A guest's buffers are not laid out
/// in such lockstep.
const BUF: u64 = 2048 + 64;
/// Bytes of one queue's ring area (descriptors, avail ring, used ring) for the largest
/// queue: 16 × 1024 + 6 + 2 × 1024, then the used ring 4096-aligned, 6 + 8 × 1024.
const RING_AREA: u64 = 64 << 10;
/// The queues: receive (0) and transmit (1).
const RX: usize = 0;
const TX: usize = 1;

/// One split virtqueue in the shared memory, as the driver keeps it.
#[derive(Debug, Clone, Copy)]
struct Ring {
    /// Entries: a power of two (checked at connect), so a slot is an index masked.
    size: u16,
    desc: u64,
    avail: u64,
    used: u64,
    /// The next avail index the driver publishes.
    next_avail: u16,
    /// The used index up to which the driver has looked.
    seen_used: u16,
}

impl Ring {
    fn new(q: usize, size: u16) -> Self {
        let desc = q as u64 * RING_AREA;
        let avail = desc + 16 * u64::from(size);
        let used = (avail + 6 + 2 * u64::from(size)).next_multiple_of(4096);
        Self {
            size,
            desc,
            avail,
            used,
            next_avail: 0,
            seen_used: 0,
        }
    }

    /// Guest address of buffer `i` of queue `q`.
    fn buffer(q: usize, size: u16, i: u16) -> u64 {
        2 * RING_AREA + (q as u64 * u64::from(size) + u64::from(i)) * BUF
    }
}

/// What [`Driver::receive`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// Frames (virtio-net header not counted).
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A vhost-user virtio-net driver on one backend socket.
pub struct Driver {
    fe: Frontend,
    mem: GuestMemoryMmap,
    _file: File,
    rings: [Ring; 2],
    kicks: [EventFd; 2],
    calls: [EventFd; 2],
    hdr: usize,
    /// Transmitted frames the backend has taken off the ring.
    pub taken: u64,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("rings", &self.rings)
            .field("hdr", &self.hdr)
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Driver {
    /// Connects to the backend at `path` with queues of `size` entries (a power of two,
    /// 64 to 1024), its transmit descriptors holding `frames` (round robin; each at most
    /// a buffer less the header).
    pub fn connect(path: &Path, size: u16, frames: &[Vec<u8>]) -> io::Result<Self> {
        if !(64..=1024).contains(&size) || !size.is_power_of_two() {
            return Err(err(
                "queue size",
                format!("{size}: a power of two, 64 to 1024"),
            ));
        }
        if frames.is_empty() {
            return Err(err("frames", "none to send"));
        }
        let mem_size = 2 * RING_AREA + 2 * u64::from(size) * BUF;
        // Shared memory: a file on tmpfs, unlinked at once (its descriptor is what the
        // backend maps).
        let name = format!(
            "/dev/shm/netbatch-driver-{}-{}",
            std::process::id(),
            unique()
        );
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&name)
            .map_err(|e| err(&name, e))?;
        let _ = std::fs::remove_file(&name);
        file.set_len(mem_size)
            .map_err(|e| err("shared memory", e))?;
        let region = (
            GuestAddress(0),
            mem_size as usize,
            Some(FileOffset::new(file.try_clone()?, 0)),
        );
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([region])
            .map_err(|e| err("shared memory", e))?;
        // One region, mapped whole: the backend finds an address `a` of it at
        // `base + a` of this process (vhost-user gives ring addresses as the frontend's).
        let base = mem
            .get_host_address(GuestAddress(0))
            .map_err(|e| err("shared memory", e))? as u64;
        let host = |a: u64| -> io::Result<u64> { Ok(base + a) };
        let mut fe = Frontend::connect(path, 2).map_err(|e| err("vhost-user connect", e))?;
        fe.set_owner().map_err(|e| err("SET_OWNER", e))?;
        let offered = fe.get_features().map_err(|e| err("GET_FEATURES", e))?;
        let acked = offered & (VERSION_1 | PROTOCOL_FEATURES);
        fe.set_features(acked).map_err(|e| err("SET_FEATURES", e))?;
        if acked & PROTOCOL_FEATURES != 0 {
            let pf = fe
                .get_protocol_features()
                .map_err(|e| err("GET_PROTOCOL_FEATURES", e))?;
            fe.set_protocol_features(pf & VhostUserProtocolFeatures::REPLY_ACK)
                .map_err(|e| err("SET_PROTOCOL_FEATURES", e))?;
        }
        let table = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: mem_size,
            userspace_addr: host(0)?,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        fe.set_mem_table(&[table])
            .map_err(|e| err("SET_MEM_TABLE", e))?;
        let hdr = if acked & VERSION_1 != 0 { 12 } else { 10 };
        let rings = [Ring::new(RX, size), Ring::new(TX, size)];
        let new_fd = || EventFd::new(EFD_NONBLOCK).map_err(|e| err("eventfd", e));
        let kicks = [new_fd()?, new_fd()?];
        let calls = [new_fd()?, new_fd()?];
        let mut d = Self {
            fe,
            mem,
            _file: file,
            rings,
            kicks,
            calls,
            hdr,
            taken: 0,
        };
        d.fill(frames)?;
        for q in [RX, TX] {
            let r = d.rings[q];
            let config = VringConfigData {
                queue_max_size: size,
                queue_size: size,
                flags: 0,
                desc_table_addr: host(r.desc)?,
                used_ring_addr: host(r.used)?,
                avail_ring_addr: host(r.avail)?,
                log_addr: None,
            };
            let fe = &mut d.fe;
            fe.set_vring_num(q, size)
                .map_err(|e| err("SET_VRING_NUM", e))?;
            fe.set_vring_addr(q, &config)
                .map_err(|e| err("SET_VRING_ADDR", e))?;
            fe.set_vring_base(q, 0)
                .map_err(|e| err("SET_VRING_BASE", e))?;
            fe.set_vring_call(q, &d.calls[q])
                .map_err(|e| err("SET_VRING_CALL", e))?;
            fe.set_vring_kick(q, &d.kicks[q])
                .map_err(|e| err("SET_VRING_KICK", e))?;
            if acked & PROTOCOL_FEATURES != 0 {
                fe.set_vring_enable(q, true)
                    .map_err(|e| err("SET_VRING_ENABLE", e))?;
            }
        }
        // The receive queue's buffers, all offered from the start.
        d.publish(RX)?;
        Ok(d)
    }

    /// Writes both queues' descriptors and avail rings (no interrupts), the transmit
    /// buffers' frames, and makes every receive buffer available.
    fn fill(&mut self, frames: &[Vec<u8>]) -> io::Result<()> {
        let size = self.rings[RX].size;
        let hdr = self.hdr;
        for q in [RX, TX] {
            let r = self.rings[q];
            self.put(r.avail, ring::AVAIL_F_NO_INTERRUPT)?;
            for i in 0..size {
                let buf = Ring::buffer(q, size, i);
                let (len, flags) = if q == RX {
                    (BUF as u32, ring::F_WRITE)
                } else {
                    let f = &frames[usize::from(i) % frames.len()];
                    if f.len() + hdr > BUF as usize {
                        return Err(err("frame", format!("{} bytes: too long", f.len())));
                    }
                    self.mem
                        .write_slice(&vec![0u8; hdr], GuestAddress(buf))
                        .map_err(|e| err("shared memory", e))?;
                    self.mem
                        .write_slice(f, GuestAddress(buf + hdr as u64))
                        .map_err(|e| err("shared memory", e))?;
                    ((hdr + f.len()) as u32, 0)
                };
                let d = r.desc + 16 * u64::from(i);
                self.put(d, buf)?;
                self.put(d + 8, len)?;
                self.put(d + 12, flags)?;
                self.put(d + 14, 0u16)?;
                if q == RX {
                    self.put(r.avail + 4 + 2 * u64::from(i), i)?;
                }
            }
        }
        self.rings[RX].next_avail = size;
        Ok(())
    }

    fn put<T: vm_memory::ByteValued>(&self, a: u64, v: T) -> io::Result<()> {
        self.mem
            .write_obj(v, GuestAddress(a))
            .map_err(|e| err("shared memory", e))
    }

    fn get<T: vm_memory::ByteValued>(&self, a: u64) -> io::Result<T> {
        self.mem
            .read_obj(GuestAddress(a))
            .map_err(|e| err("shared memory", e))
    }

    /// Publishes queue `q`'s avail index (after the entries it covers) and kicks the
    /// backend unless it said it polls.
    fn publish(&mut self, q: usize) -> io::Result<()> {
        let r = self.rings[q];
        fence(Ordering::Release);
        self.mem
            .store(r.next_avail, GuestAddress(r.avail + 2), Ordering::Release)
            .map_err(|e| err("shared memory", e))?;
        fence(Ordering::SeqCst);
        let flags: u16 = self.get(r.used)?;
        if flags & ring::USED_F_NO_NOTIFY == 0 {
            // A full counter only delays the kick to the backend's next poll.
            let _ = self.kicks[q].write(1);
        }
        Ok(())
    }

    /// The backend's used index of queue `q`.
    fn used_index(&self, q: usize) -> io::Result<u16> {
        self.mem
            .load(GuestAddress(self.rings[q].used + 2), Ordering::Acquire)
            .map_err(|e| err("shared memory", e))
    }

    /// Puts up to `n` frames on the transmit queue (as many as it has room for: the
    /// descriptors the backend has used are reused); returns how many.
    pub fn send(&mut self, n: usize) -> io::Result<usize> {
        let used = self.used_index(TX)?;
        let r = &mut self.rings[TX];
        self.taken += u64::from(used.wrapping_sub(r.seen_used));
        r.seen_used = used;
        let room = usize::from(r.size - r.next_avail.wrapping_sub(used));
        let k = n.min(room);
        let (avail, size, start) = (r.avail, r.size, r.next_avail);
        for j in 0..k as u16 {
            let slot = start.wrapping_add(j) & (size - 1);
            self.put(avail + 4 + 2 * u64::from(slot), slot)?;
        }
        if k > 0 {
            self.rings[TX].next_avail = start.wrapping_add(k as u16);
            self.publish(TX)?;
        }
        Ok(k)
    }

    /// Counts the frames the backend has put on the receive queue since the last call
    /// and hands their buffers back.
    pub fn receive(&mut self) -> io::Result<Received> {
        let used = self.used_index(RX)?;
        let r = self.rings[RX];
        let new = used.wrapping_sub(r.seen_used);
        if new == 0 {
            return Ok(Received::default());
        }
        let mut got = Received::default();
        for j in 0..new {
            let slot = r.seen_used.wrapping_add(j) & (r.size - 1);
            let e = r.used + 4 + 8 * u64::from(slot);
            let (id, len): (u32, u32) = (self.get(e)?, self.get(e + 4)?);
            got.frames += 1;
            got.bytes += u64::from(len).saturating_sub(self.hdr as u64);
            let at = r.next_avail.wrapping_add(j) & (r.size - 1);
            self.put(r.avail + 4 + 2 * u64::from(at), id as u16)?;
        }
        let r = &mut self.rings[RX];
        r.seen_used = used;
        r.next_avail = r.next_avail.wrapping_add(new);
        self.publish(RX)?;
        Ok(got)
    }
}

/// A number no other driver of this process has used (for the memory file's name).
fn unique() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
