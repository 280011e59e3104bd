//! The UDP socket table: bind by (address, port) with `0.0.0.0` as wildcard, bounded
//! receive queues of packet handles, batch receive.
//!
//! Lookup order: exact local address first, then the wildcard (RFC 1122 4.1.3.5: the
//! most specific binding wins). A queue never grows past its configured length; a full
//! queue is a counted drop at the UDP stage.

use core::fmt;
use core::net::Ipv4Addr;
use std::collections::VecDeque;

use netbatch_engine::{BufCache, Pkt};

/// A socket's index in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketId(pub u32);

/// Counters of one socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Datagrams queued (wire datagrams: a GRO super-datagram counts its segments).
    pub queued: u64,
    /// Datagrams refused because the queue was full.
    pub queue_full: u64,
    /// Datagrams read by the application.
    pub read: u64,
    /// Datagrams sent (wire datagrams: a segmented send counts its segments).
    pub sent: u64,
}

/// One bound UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    /// Local address (`0.0.0.0` = any).
    pub addr: Ipv4Addr,
    /// Local port.
    pub port: u16,
    /// Receive super-datagrams with their segment size instead of one datagram per
    /// segment (like `UDP_GRO`).
    pub gro: bool,
    queue: VecDeque<Pkt>,
    cap: usize,
    /// Counters.
    pub stats: SocketStats,
}

impl UdpSocket {
    /// Queued handles.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queue capacity in handles.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Appends a datagram; gives it back if the queue is full.
    #[inline]
    pub fn enqueue(&mut self, p: Pkt, wire: u64) -> Result<(), Pkt> {
        if self.queue.len() >= self.cap {
            self.stats.queue_full += wire;
            return Err(p);
        }
        self.stats.queued += wire;
        self.queue.push_back(p);
        Ok(())
    }

    /// Moves up to `max` queued datagrams to `out`, oldest first; returns how many.
    #[inline(always)]
    pub fn recv_batch(&mut self, out: &mut Vec<Pkt>, max: usize) -> usize {
        let n = max.min(self.queue.len());
        out.reserve(n);
        for p in self.queue.drain(..n) {
            out.push(p);
        }
        self.stats.read += n as u64;
        n
    }
}

/// Why a bind failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindError {
    /// Another socket holds that address and port.
    InUse(Ipv4Addr, u16),
    /// Port 0 is not bindable here.
    PortZero,
    /// Queue length 0.
    ZeroQueue,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InUse(a, p) => write!(f, "{a}:{p} is already bound"),
            Self::PortZero => f.write_str("cannot bind port 0"),
            Self::ZeroQueue => f.write_str("socket queue length must be at least 1"),
        }
    }
}

impl std::error::Error for BindError {}

fn key(addr: u32, port: u16) -> u64 {
    (u64::from(addr) << 16) | u64::from(port)
}

/// All UDP sockets of a worker.
#[derive(Debug, Default)]
pub struct Sockets {
    socks: Vec<Option<UdpSocket>>,
    map: hashbrown::HashMap<u64, u32, foldhash::fast::FixedState>,
    exact_binds: usize,
}

impl Sockets {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `addr:port` with a queue of `queue_len` datagrams.
    pub fn bind(
        &mut self,
        addr: Ipv4Addr,
        port: u16,
        queue_len: usize,
    ) -> Result<SocketId, BindError> {
        if port == 0 {
            return Err(BindError::PortZero);
        }
        if queue_len == 0 {
            return Err(BindError::ZeroQueue);
        }
        let k = key(u32::from(addr), port);
        if self.map.contains_key(&k) {
            return Err(BindError::InUse(addr, port));
        }
        let s = UdpSocket {
            addr,
            port,
            gro: false,
            queue: VecDeque::with_capacity(queue_len),
            cap: queue_len,
            stats: SocketStats::default(),
        };
        let id = match self.socks.iter().position(Option::is_none) {
            Some(i) => {
                self.socks[i] = Some(s);
                i
            }
            None => {
                self.socks.push(Some(s));
                self.socks.len() - 1
            }
        };
        let id = u32::try_from(id).unwrap_or_else(|_| unreachable!("fewer than 2^32 sockets"));
        self.map.insert(k, id);
        if !addr.is_unspecified() {
            self.exact_binds += 1;
        }
        Ok(SocketId(id))
    }

    /// Closes a socket, freeing what its queue held.
    pub fn close(&mut self, id: SocketId, cache: &mut BufCache) {
        if let Some(Some(mut s)) = self.socks.get_mut(id.0 as usize).map(Option::take) {
            self.map.remove(&key(u32::from(s.addr), s.port));
            if !s.addr.is_unspecified() {
                self.exact_binds -= 1;
            }
            for p in s.queue.drain(..) {
                cache.free(p);
            }
        }
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
    pub fn get_mut(&mut self, id: SocketId) -> Option<&mut UdpSocket> {
        self.socks.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// A socket by id.
    pub fn get(&self, id: SocketId) -> Option<&UdpSocket> {
        self.socks.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// Every open socket.
    pub fn iter(&self) -> impl Iterator<Item = (SocketId, &UdpSocket)> {
        self.socks
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (SocketId(i as u32), s)))
    }

    /// Wire datagrams queued over all sockets (they are "held"; a super-datagram counts
    /// its segments).
    pub fn held(&self, pool: &netbatch_engine::Pool) -> u64 {
        self.socks
            .iter()
            .flatten()
            .flat_map(|s| s.queue.iter())
            .map(|p| pool.get(p).meta.wire_packets())
            .sum()
    }

    /// Frees everything queued (at shutdown).
    pub fn drain_all(&mut self, cache: &mut BufCache) {
        for s in self.socks.iter_mut().flatten() {
            for p in s.queue.drain(..) {
                cache.free(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_binding_wins_over_wildcard() {
        let mut t = Sockets::new();
        let any = t.bind(Ipv4Addr::UNSPECIFIED, 53, 4).unwrap();
        let one = t.bind("192.0.2.1".parse().unwrap(), 53, 4).unwrap();
        assert_eq!(t.lookup(0xc000_0201, 53), Some(one));
        assert_eq!(t.lookup(0xc000_0202, 53), Some(any));
        assert_eq!(t.lookup(0xc000_0201, 54), None);
        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 53, 4),
            Err(BindError::InUse(Ipv4Addr::UNSPECIFIED, 53))
        );
        assert_eq!(
            t.bind(Ipv4Addr::UNSPECIFIED, 0, 4),
            Err(BindError::PortZero)
        );
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
        let mut t = Sockets::new();
        let id = t.bind(Ipv4Addr::UNSPECIFIED, 9, 3).unwrap();
        let mut idx = Vec::new();
        for _ in 0..4 {
            let p = c.alloc().unwrap();
            idx.push(p.index());
            match t.get_mut(id).unwrap().enqueue(p, 1) {
                Ok(()) => {}
                Err(p) => c.free(p),
            }
        }
        let s = t.get_mut(id).unwrap();
        assert_eq!((s.stats.queued, s.stats.queue_full), (3, 1));
        let mut out = Vec::new();
        assert_eq!(s.recv_batch(&mut out, 2), 2);
        assert_eq!(out.iter().map(Pkt::index).collect::<Vec<_>>(), idx[..2]);
        c.free_all(&mut out);
        assert_eq!(t.held(&pool), 1);
        t.close(id, &mut c);
        assert_eq!(t.held(&pool), 0);
        drop(c);
        assert_eq!(pool.free_in_pool(), 8);
    }
}
