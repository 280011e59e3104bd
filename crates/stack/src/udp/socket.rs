//! The UDP socket table: bind by (address, port) with `0.0.0.0` (IPv4) or `::` (IPv6) as
//! wildcard, bounded receive queues of packet handles, batch receive.
//!
//! Lookup order: exact local address first, then the wildcard of the datagram's family
//! (RFC 1122 4.1.3.5: the most specific binding wins). A socket is of one family: one
//! bound to `::` receives IPv6 datagrams only (as with `IPV6_V6ONLY`), so a dual-stack
//! application binds both wildcards. A queue's length and its limit are in wire datagrams (a
//! `UDP_GRO`-like super-datagram counts its segments, as the kernel charges its whole
//! size to the receive buffer); a queue never holds more than its configured length, and
//! a full queue is a counted drop at the UDP stage. Its storage is allocated whole at bind
//! time (at most [`MAX_QUEUE_LEN`] handles), so queueing a datagram never allocates.
//!
//! The table is shared by every worker (a clone of [`Sockets`] is the same table), as a
//! kernel's sockets are shared by its CPUs: whichever worker processes a datagram queues
//! it on the one socket, and the application reads it wherever it runs. The fast path
//! takes no lock for lookups: the binding table is an immutable snapshot replaced on
//! bind and close (a generation counter tells users to refresh theirs), and each
//! socket's queue takes one uncontended lock per batch of datagrams, not per datagram.

use core::fmt;
use core::net::IpAddr;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use netbatch_engine::{BufCache, Pkt};

/// Longest socket queue, in datagrams: a pool has at most this many buffers
/// (`netbatch_engine::pool::MAX_BUFFERS`), so a longer queue could never fill. The queue
/// is preallocated whole, 4 bytes per datagram (64 MiB at this length).
pub const MAX_QUEUE_LEN: usize = netbatch_engine::pool::MAX_BUFFERS as usize;

/// A socket's index in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketId(pub u32);

/// Counters of one socket (wire datagrams: a GRO super-datagram counts its segments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Datagrams queued.
    pub queued: u64,
    /// Datagrams refused because the queue was full.
    pub queue_full: u64,
    /// Datagrams read by the application.
    pub read: u64,
    /// Datagrams sent.
    pub sent: u64,
}

/// A socket's queue and the counters that change with it (one lock for both).
#[derive(Debug, Default)]
struct Queue {
    /// Handles with the wire datagrams each stands for.
    q: VecDeque<(Pkt, u32)>,
    /// Wire datagrams in `q` (what the limit bounds).
    wire: usize,
    queued: u64,
    queue_full: u64,
    read: u64,
}

impl Queue {
    /// Appends `p` (standing for `wire` wire datagrams) if it fits in `cap` wire datagrams
    /// and the socket is open; counts it queued or refused.
    #[inline]
    fn push(&mut self, p: Pkt, wire: u64, cap: usize, closed: bool) -> Result<(), Pkt> {
        let w = usize::try_from(wire.max(1)).unwrap_or(usize::MAX);
        if closed || w > cap - self.wire {
            self.queue_full += wire;
            return Err(p);
        }
        self.q.push_back((p, w as u32));
        self.wire += w;
        self.queued += wire;
        Ok(())
    }
}

/// One bound UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    /// Local address (`0.0.0.0` or `::` = any of its family).
    pub addr: IpAddr,
    /// Local port.
    pub port: u16,
    gro: AtomicBool,
    closed: AtomicBool,
    queue: Mutex<Queue>,
    cap: usize,
    sent: AtomicU64,
    /// The queue's length as of the last change: lets a reader skip an empty queue
    /// without taking its lock (a stale value only delays a read to the next poll).
    len_hint: AtomicUsize,
}

impl UdpSocket {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock cannot leave the queue half-changed (push and
        // drain are the only operations), so a poisoned lock is still usable.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the socket takes GRO super-datagrams whole (like `UDP_GRO`).
    #[inline]
    pub fn gro(&self) -> bool {
        self.gro.load(Ordering::Relaxed)
    }

    /// Asks for super-datagrams whole (`true`) or one datagram per segment.
    pub fn set_gro(&self, on: bool) {
        self.gro.store(on, Ordering::Relaxed);
    }

    /// Queued handles.
    pub fn queued(&self) -> usize {
        self.lock().q.len()
    }

    /// Wire datagrams queued.
    pub fn queued_wire(&self) -> usize {
        self.lock().wire
    }

    /// Queue capacity in wire datagrams (and in handles).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Counters.
    pub fn stats(&self) -> SocketStats {
        let q = self.lock();
        SocketStats {
            queued: q.queued,
            queue_full: q.queue_full,
            read: q.read,
            sent: self.sent.load(Ordering::Relaxed),
        }
    }

    /// Counts `n` datagrams sent from this socket.
    pub fn count_sent(&self, n: u64) {
        self.sent.fetch_add(n, Ordering::Relaxed);
    }

    /// Appends a datagram standing for `wire` wire datagrams; gives it back if the queue
    /// is full or the socket closed.
    #[inline]
    pub fn enqueue(&self, p: Pkt, wire: u64) -> Result<(), Pkt> {
        let mut q = self.lock();
        let r = q.push(p, wire, self.cap, self.closed.load(Ordering::Relaxed));
        self.len_hint.store(q.q.len(), Ordering::Relaxed);
        r
    }

    /// Takes the queue's lock for a run of datagrams: [`SocketWriter::push`] appends each
    /// without locking again; the lock goes with the writer.
    #[inline]
    pub fn writer(&self) -> SocketWriter<'_> {
        SocketWriter {
            q: self.lock(),
            cap: self.cap,
            closed: self.closed.load(Ordering::Relaxed),
            len_hint: &self.len_hint,
        }
    }

    /// Appends `batch` (plain datagrams, in order) under one lock; what does not fit is
    /// left in `batch`, in order, for the caller to drop. Returns how many were queued.
    #[inline]
    pub fn enqueue_batch(&self, batch: &mut Vec<Pkt>) -> usize {
        let mut q = self.lock();
        let room = if self.closed.load(Ordering::Relaxed) {
            0
        } else {
            self.cap.saturating_sub(q.wire)
        };
        let n = room.min(batch.len());
        for p in batch.drain(..n) {
            q.q.push_back((p, 1));
        }
        q.wire += n;
        q.queued += n as u64;
        q.queue_full += batch.len() as u64;
        self.len_hint.store(q.q.len(), Ordering::Relaxed);
        n
    }

    /// Moves up to `max` queued datagrams to `out`, oldest first; returns how many.
    #[inline]
    pub fn recv_batch(&self, out: &mut Vec<Pkt>, max: usize) -> usize {
        if self.len_hint.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let mut q = self.lock();
        let n = max.min(q.q.len());
        out.reserve(n);
        let mut wire = 0;
        for (p, w) in q.q.drain(..n) {
            out.push(p);
            wire += w as usize;
        }
        q.wire -= wire;
        q.read += n as u64;
        self.len_hint.store(q.q.len(), Ordering::Relaxed);
        n
    }

    /// Frees everything queued.
    /// Frees what is queued; returns the wire datagrams it held.
    fn drain(&self, cache: &mut BufCache) -> u64 {
        let mut q = self.lock();
        for (p, _) in q.q.drain(..) {
            cache.free(p);
        }
        let wire = q.wire as u64;
        q.wire = 0;
        self.len_hint.store(0, Ordering::Relaxed);
        wire
    }
}

/// A socket's queue, locked for a run of datagrams.
#[derive(Debug)]
pub struct SocketWriter<'a> {
    q: MutexGuard<'a, Queue>,
    cap: usize,
    closed: bool,
    len_hint: &'a AtomicUsize,
}

impl Drop for SocketWriter<'_> {
    fn drop(&mut self) {
        self.len_hint.store(self.q.q.len(), Ordering::Relaxed);
    }
}

impl SocketWriter<'_> {
    /// Appends a datagram standing for `wire` wire datagrams; gives it back if the queue
    /// is full or the socket closed.
    #[inline]
    pub fn push(&mut self, p: Pkt, wire: u64) -> Result<(), Pkt> {
        self.q.push(p, wire, self.cap, self.closed)
    }
}

/// Why a bind failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindError {
    /// Another socket holds that address and port.
    InUse(IpAddr, u16),
    /// Port 0 is not bindable here.
    PortZero,
    /// Queue length 0.
    ZeroQueue,
    /// Queue length above [`MAX_QUEUE_LEN`].
    QueueTooLong(usize),
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InUse(a, p) => {
                write!(f, "{} is already bound", core::net::SocketAddr::new(*a, *p))
            }
            Self::PortZero => f.write_str("cannot bind port 0"),
            Self::ZeroQueue => f.write_str("socket queue length must be at least 1"),
            Self::QueueTooLong(n) => write!(
                f,
                "socket queue length {n} is above the maximum {MAX_QUEUE_LEN} (the most buffers a pool can have)"
            ),
        }
    }
}

impl std::error::Error for BindError {}

fn key(addr: u32, port: u16) -> u64 {
    (u64::from(addr) << 16) | u64::from(port)
}

/// An immutable view of the bindings, valid until the next bind or close.
#[derive(Debug, Default, Clone)]
pub struct Table {
    socks: Vec<Option<Arc<UdpSocket>>>,
    map: hashbrown::HashMap<u64, u32, foldhash::fast::FixedState>,
    exact_binds: usize,
    /// IPv6 bindings.
    map6: hashbrown::HashMap<(u128, u16), u32, foldhash::fast::FixedState>,
    exact_binds6: usize,
}

impl Table {
    /// The socket for an IPv6 datagram to `dst:port` (address bits), exact binding first.
    #[inline]
    pub fn lookup6(&self, dst: u128, port: u16) -> Option<SocketId> {
        if self.exact_binds6 > 0
            && let Some(&i) = self.map6.get(&(dst, port))
        {
            return Some(SocketId(i));
        }
        self.map6.get(&(0, port)).map(|&i| SocketId(i))
    }

    /// The socket for a datagram to `dst:port` (address bits), exact binding first.
    #[inline]
    pub fn lookup(&self, dst: u32, port: u16) -> Option<SocketId> {
        if self.exact_binds > 0
            && let Some(&i) = self.map.get(&key(dst, port))
        {
            return Some(SocketId(i));
        }
        self.map.get(&key(0, port)).map(|&i| SocketId(i))
    }

    /// A socket by id.
    #[inline]
    pub fn get(&self, id: SocketId) -> Option<&Arc<UdpSocket>> {
        self.socks.get(id.0 as usize).and_then(Option::as_ref)
    }
}

#[derive(Debug, Default)]
struct Shared {
    /// Bumped on every bind and close.
    generation: AtomicU64,
    table: RwLock<Arc<Table>>,
}

/// All UDP sockets of the datapath; clones share the table.
#[derive(Debug, Default, Clone)]
pub struct Sockets {
    shared: Arc<Shared>,
}

/// A user's cached snapshot of the table, refreshed when the table changed.
#[derive(Debug, Default)]
pub struct TableCache {
    generation: u64,
    table: Option<Arc<Table>>,
}

impl TableCache {
    /// The generation of the table last returned.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The current table (one atomic load when nothing changed).
    #[inline]
    pub fn get(&mut self, s: &Sockets) -> &Table {
        let g = s.shared.generation.load(Ordering::Acquire);
        if self.table.is_none() || g != self.generation {
            self.table = Some(s.snapshot());
            self.generation = g;
        }
        match &self.table {
            Some(t) => t,
            None => unreachable!("filled above"),
        }
    }
}

impl Sockets {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bindings now.
    pub fn snapshot(&self) -> Arc<Table> {
        self.shared
            .table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Table)) {
        let mut t = self
            .shared
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = (**t).clone();
        f(&mut next);
        *t = Arc::new(next);
        self.shared.generation.fetch_add(1, Ordering::Release);
    }

    /// Binds `addr:port` with a queue of `queue_len` datagrams (1 ..= [`MAX_QUEUE_LEN`]),
    /// allocated here whole.
    pub fn bind(
        &self,
        addr: impl Into<IpAddr>,
        port: u16,
        queue_len: usize,
    ) -> Result<SocketId, BindError> {
        let addr: IpAddr = addr.into();
        if port == 0 {
            return Err(BindError::PortZero);
        }
        if queue_len == 0 {
            return Err(BindError::ZeroQueue);
        }
        if queue_len > MAX_QUEUE_LEN {
            return Err(BindError::QueueTooLong(queue_len));
        }
        let mut out = Err(BindError::InUse(addr, port));
        self.update(|t| {
            let taken = match addr {
                IpAddr::V4(a) => t.map.contains_key(&key(u32::from(a), port)),
                IpAddr::V6(a) => t.map6.contains_key(&(u128::from(a), port)),
            };
            if taken {
                return;
            }
            let s = Arc::new(UdpSocket {
                addr,
                port,
                gro: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                queue: Mutex::new(Queue {
                    // The whole configured length: pushing up to `cap` never grows it.
                    q: VecDeque::with_capacity(queue_len),
                    ..Queue::default()
                }),
                cap: queue_len,
                sent: AtomicU64::new(0),
                len_hint: AtomicUsize::new(0),
            });
            let id = match t.socks.iter_mut().enumerate().find(|(_, s)| s.is_none()) {
                Some((i, free)) => {
                    *free = Some(s);
                    i
                }
                None => {
                    t.socks.push(Some(s));
                    t.socks.len() - 1
                }
            };
            let id = u32::try_from(id).unwrap_or_else(|_| unreachable!("fewer than 2^32 sockets"));
            match addr {
                IpAddr::V4(a) => {
                    t.map.insert(key(u32::from(a), port), id);
                    t.exact_binds += usize::from(!a.is_unspecified());
                }
                IpAddr::V6(a) => {
                    t.map6.insert((u128::from(a), port), id);
                    t.exact_binds6 += usize::from(!a.is_unspecified());
                }
            }
            out = Ok(SocketId(id));
        });
        out
    }

    /// Binds `addr:port` and returns the socket itself (what an application keeps).
    pub fn open(
        &self,
        addr: impl Into<IpAddr>,
        port: u16,
        queue_len: usize,
    ) -> Result<(SocketId, Arc<UdpSocket>), BindError> {
        let id = self.bind(addr, port, queue_len)?;
        match self.get(id) {
            Some(s) => Ok((id, s)),
            None => unreachable!("just bound"),
        }
    }

    /// Closes a socket, freeing what its queue held (returned: the wire datagrams, for
    /// the caller to count as dropped). A worker still holding the old table sees it
    /// closed and refuses datagrams for it.
    pub fn close(&self, id: SocketId, cache: &mut BufCache) -> u64 {
        let mut gone = None;
        self.update(|t| {
            if let Some(s) = t.socks.get_mut(id.0 as usize).and_then(Option::take) {
                match s.addr {
                    IpAddr::V4(a) => {
                        t.map.remove(&key(u32::from(a), s.port));
                        t.exact_binds -= usize::from(!a.is_unspecified());
                    }
                    IpAddr::V6(a) => {
                        t.map6.remove(&(u128::from(a), s.port));
                        t.exact_binds6 -= usize::from(!a.is_unspecified());
                    }
                }
                gone = Some(s);
            }
        });
        match gone {
            Some(s) => {
                s.closed.store(true, Ordering::Relaxed);
                s.drain(cache)
            }
            None => 0,
        }
    }

    /// The socket for a datagram to `dst:port` (address bits), exact binding first.
    pub fn lookup(&self, dst: u32, port: u16) -> Option<SocketId> {
        self.snapshot().lookup(dst, port)
    }

    /// The socket for an IPv6 datagram to `dst:port` (address bits), exact binding first.
    pub fn lookup6(&self, dst: u128, port: u16) -> Option<SocketId> {
        self.snapshot().lookup6(dst, port)
    }

    /// A socket by id.
    pub fn get(&self, id: SocketId) -> Option<Arc<UdpSocket>> {
        self.snapshot().get(id).cloned()
    }

    /// Every open socket.
    pub fn iter(&self) -> Vec<(SocketId, Arc<UdpSocket>)> {
        self.snapshot()
            .socks
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.clone().map(|s| (SocketId(i as u32), s)))
            .collect()
    }

    /// Wire datagrams queued over all sockets (they are "held"; a super-datagram counts
    /// its segments).
    pub fn held(&self) -> u64 {
        let t = self.snapshot();
        t.socks.iter().flatten().map(|s| s.lock().wire as u64).sum()
    }

    /// Frees everything queued (at shutdown).
    pub fn drain_all(&self, cache: &mut BufCache) {
        for s in self.snapshot().socks.iter().flatten() {
            let _ = s.drain(cache);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn exact_binding_wins_over_wildcard() {
        let t = Sockets::new();
        let any = t.bind(Ipv4Addr::UNSPECIFIED, 53, 4).unwrap();
        let one = t
            .bind("192.0.2.1".parse::<Ipv4Addr>().unwrap(), 53, 4)
            .unwrap();
        assert_eq!(t.lookup(0xc000_0201, 53), Some(one));
        assert_eq!(t.lookup(0xc000_0202, 53), Some(any));
        assert_eq!(t.lookup(0xc000_0201, 54), None);
        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 53, 4),
            Err(BindError::InUse(Ipv4Addr::UNSPECIFIED.into(), 53))
        );
        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 0, 4),
            Err(BindError::PortZero)
        );
    }

    /// IPv6 bindings are their own family: `::` takes IPv6 datagrams only, an exact
    /// IPv6 binding wins over it, and the same port may be bound in both families.
    #[test]
    fn ipv6_bindings_are_their_own_family() {
        let t = Sockets::new();
        let v4 = t.bind(Ipv4Addr::UNSPECIFIED, 53, 4).unwrap();
        let any6 = t.bind(Ipv6Addr::UNSPECIFIED, 53, 4).unwrap();
        let one6 = t
            .bind("2001:db8::1".parse::<Ipv6Addr>().unwrap(), 53, 4)
            .unwrap();
        let a = |s: &str| u128::from(s.parse::<Ipv6Addr>().unwrap());
        assert_eq!(t.lookup6(a("2001:db8::1"), 53), Some(one6));
        assert_eq!(t.lookup6(a("2001:db8::2"), 53), Some(any6));
        assert_eq!(t.lookup(0xc000_0201, 53), Some(v4));
        assert_eq!(
            t.lookup6(a("::c000:201"), 53),
            Some(any6),
            "no IPv4 socket for IPv6"
        );
        assert_eq!(t.lookup6(a("2001:db8::1"), 54), None);
        assert_eq!(
            t.bind(Ipv6Addr::UNSPECIFIED, 53, 4),
            Err(BindError::InUse(Ipv6Addr::UNSPECIFIED.into(), 53))
        );
        let mut c = netbatch_engine::Pool::new(netbatch_engine::PoolConfig {
            buffers: 2,
            cache_size: 2,
            ..Default::default()
        })
        .unwrap();
        let mut cache = c.cache();
        t.close(one6, &mut cache);
        assert_eq!(
            t.lookup6(a("2001:db8::1"), 53),
            Some(any6),
            "closed: the wildcard"
        );
        drop(cache);
        let _ = &mut c;
    }

    #[test]
    fn queue_is_bounded_and_reads_in_order() {
        let pool = netbatch_engine::Pool::new(netbatch_engine::PoolConfig {
            buffers: 8,
            cache_size: 8,
            ..Default::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let t = Sockets::new();
        let id = t.bind(Ipv4Addr::UNSPECIFIED, 9, 3).unwrap();
        let s = t.get(id).unwrap();
        let mut idx = Vec::new();
        let mut batch = Vec::new();
        for _ in 0..4 {
            let p = c.alloc().unwrap();
            idx.push(p.index());
            batch.push(p);
        }
        assert_eq!(s.enqueue_batch(&mut batch), 3);
        assert_eq!(batch.len(), 1, "the one that did not fit is given back");
        c.free_all(&mut batch);
        let st = s.stats();
        assert_eq!((st.queued, st.queue_full), (3, 1));
        let mut out = Vec::new();
        assert_eq!(s.recv_batch(&mut out, 2), 2);
        assert_eq!(out.iter().map(Pkt::index).collect::<Vec<_>>(), idx[..2]);
        c.free_all(&mut out);
        assert_eq!(t.held(), 1);
        t.close(id, &mut c);
        assert_eq!(t.held(), 0);
        // A holder of the old handle finds it closed.
        let p = c.alloc().unwrap();
        let p = s.enqueue(p, 1).unwrap_err();
        c.free(p);
        drop(c);
        assert_eq!(pool.free_in_pool(), 8);
    }

    /// A super-datagram of 3 segments takes 3 of a queue of 4 wire datagrams: one more
    /// plain datagram fits, a second super-datagram does not; reading frees its segments.
    #[test]
    fn queue_limit_counts_wire_datagrams() {
        let pool = netbatch_engine::Pool::new(netbatch_engine::PoolConfig {
            buffers: 8,
            cache_size: 8,
            ..Default::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let t = Sockets::new();
        let id = t.bind(Ipv4Addr::UNSPECIFIED, 9, 4).unwrap();
        let s = t.get(id).unwrap();
        s.enqueue(c.alloc().unwrap(), 3).unwrap();
        s.enqueue(c.alloc().unwrap(), 1).unwrap();
        let refused = s.enqueue(c.alloc().unwrap(), 2).unwrap_err();
        c.free(refused);
        let mut w = s.writer();
        let refused = w.push(c.alloc().unwrap(), 1).unwrap_err();
        drop(w);
        c.free(refused);
        assert_eq!((s.queued(), s.queued_wire(), t.held()), (2, 4, 4));
        let st = s.stats();
        assert_eq!((st.queued, st.queue_full), (4, 3));
        let mut out = Vec::new();
        assert_eq!(s.recv_batch(&mut out, 1), 1);
        assert_eq!(t.held(), 1);
        s.enqueue(c.alloc().unwrap(), 3).unwrap();
        c.free_all(&mut out);
        t.close(id, &mut c);
        drop(c);
        assert_eq!(pool.free_in_pool(), 8);
    }

    #[test]
    fn clones_share_the_table_and_caches_follow_changes() {
        let a = Sockets::new();
        let b = a.clone();
        let mut cache = TableCache::default();
        assert_eq!(cache.get(&b).lookup(0, 7), None);
        let id = a.bind(Ipv4Addr::UNSPECIFIED, 7, 1).unwrap();
        assert_eq!(
            cache.get(&b).lookup(0, 7),
            Some(id),
            "refreshed after a bind"
        );
        let t = std::thread::spawn(move || b.lookup(0, 7));
        assert_eq!(t.join().unwrap(), Some(id));
    }

    /// A queue longer than the old 65,536-handle preallocation (70,000 datagrams) is
    /// allocated whole at bind and never grows while datagrams are queued, through the
    /// UDP stage's writer and through `enqueue`, up to the configured length; the next
    /// one is refused (counted full). Lengths 0 and above `MAX_QUEUE_LEN` are refused.
    #[test]
    fn queue_is_preallocated_to_its_configured_length() {
        const LEN: usize = 70_000;
        let pool = netbatch_engine::Pool::new(netbatch_engine::PoolConfig {
            buffers: LEN as u32 + 1,
            buf_size: 1024,
            cache_size: 512,
            ..Default::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let t = Sockets::new();
        let (_, s) = t.open(Ipv4Addr::UNSPECIFIED, 9, LEN).unwrap();
        let cap = s.lock().q.capacity();
        assert!(cap >= LEN, "capacity {cap} after bind");
        {
            let mut w = s.writer();
            for _ in 0..LEN / 2 {
                assert!(w.push(c.alloc().unwrap(), 1).is_ok());
            }
        }
        for _ in LEN / 2..LEN {
            assert!(s.enqueue(c.alloc().unwrap(), 1).is_ok());
        }
        assert_eq!(s.queued(), LEN);
        let extra = s.enqueue(c.alloc().unwrap(), 1).unwrap_err();
        c.free(extra);
        assert_eq!(s.lock().q.capacity(), cap, "the queue never reallocated");
        assert_eq!(s.stats().queue_full, 1);
        let mut out = Vec::with_capacity(LEN);
        assert_eq!(s.recv_batch(&mut out, usize::MAX), LEN);
        c.free_all(&mut out);
        drop(c);
        assert_eq!(pool.free_in_pool(), LEN + 1);

        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 10, MAX_QUEUE_LEN + 1),
            Err(BindError::QueueTooLong(MAX_QUEUE_LEN + 1))
        );
        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 10, 0),
            Err(BindError::ZeroQueue)
        );
    }
}
