//! Handing a datagram made whole to the worker that owns its connection (two or more
//! workers under connection tracking), as VPP hands a reassembled packet off to the
//! thread that owns its session.
//!
//! RPS steers a fragment by its addresses alone (a later fragment has no ports), so the
//! worker that gathers a datagram's fragments is the one its addresses pick, while the
//! connection belongs to the worker its symmetric hash *with ports* picks (and, with
//! NAT, after the `dnat` foresight): the worker RPS steers the connection's unfragmented
//! packets to. When `ip4-defrag`/`ip6-defrag` makes a datagram whole, it asks this
//! module for the datagram's owner, computed by RPS's own function over the head of the
//! chain ([`Home::worker_of_packet`]: `ct::steer_hash_with` and
//! `nat::steer::worker_of_hash`, no second copy), with the RPS map of the port the
//! first fragment came in on. When the owner is another worker the chain (head and its
//! fragments, one handle) is queued here instead of going on.
//!
//! The seam: the stack does not know how workers reach each other. This queue is all
//! it offers; the datapath, which owns the rings between workers, empties it after each
//! run of the graph into a ring to the owner, where the chain enters the graph at the
//! family's defragmentation stage again, which passes a defrag chain on whole (it is
//! not gathered twice, nor counted again as received). What the queue holds counts as
//! `held` in the conservation law (`Host::held_own`) until the datapath takes it.
//! Without a hand-off (one worker, RPS off, no tracking) `Host::defrag_handoff` is
//! `None` and the stage pays one test of it per datagram made whole.

use netbatch_engine::{Pkt, PktList, PktMut};

use crate::nat::steer::Home;

/// Whole datagrams waiting to go to the worker owning their connection.
#[derive(Debug)]
pub struct HandOff {
    /// This worker.
    me: u16,
    /// RPS's view per receiving port (`None`: the port is not steered, and neither is
    /// anything received on it).
    homes: Vec<Option<Home>>,
    /// The chains waiting, and the worker each goes to.
    queue: PktList,
    to: Vec<u16>,
    /// Wire packets (fragments) in `queue`.
    wire: u64,
    /// Datagrams queued for another worker, ever.
    pub datagrams: u64,
}

impl HandOff {
    /// The hand-off of worker `me` whose ports RPS steers as `homes` says (indexed by
    /// receiving port); `None` when no port is steered (nothing to hand off).
    pub fn new(me: u16, homes: Vec<Option<Home>>) -> Option<Self> {
        homes.iter().any(Option::is_some).then(|| Self {
            me,
            homes,
            queue: Vec::new(),
            to: Vec::new(),
            wire: 0,
            datagrams: 0,
        })
    }

    /// The worker owning the connection of the whole datagram `v` (a defrag chain's head,
    /// or any IP packet), when it is not this one: where RPS would have steered it had it
    /// come unfragmented on the port its first fragment came in on.
    #[inline]
    pub fn owner_elsewhere(&self, v: &mut PktMut<'_>) -> Option<u16> {
        let home = self.homes.get(usize::from(v.meta.in_port))?.as_ref()?;
        let w = home.worker_of_packet(v);
        (w != self.me).then_some(w)
    }

    /// Queues `p`, of `wire` wire packets, for worker `to`.
    pub fn push(&mut self, to: u16, p: Pkt, wire: u64) {
        self.queue.push(p);
        self.to.push(to);
        self.wire += wire;
        self.datagrams += 1;
    }

    /// Nothing waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Wire packets waiting.
    pub fn held(&self) -> u64 {
        self.wire
    }

    /// Takes everything waiting, in the order it was queued, each with its worker.
    pub fn drain(&mut self) -> impl Iterator<Item = (u16, Pkt)> + '_ {
        self.wire = 0;
        self.to.drain(..).zip(self.queue.drain(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_engine::{Pool, PoolConfig};
    use netbatch_wire::toeplitz::{MS_KEY, Toeplitz};
    use std::sync::Arc;

    fn home(me: u16) -> Home {
        Home {
            me,
            map: Arc::from(vec![0u16, 1]),
            toeplitz: Arc::new(Toeplitz::new(&MS_KEY)),
            forwards: Arc::from(Vec::new()),
        }
    }

    /// A UDP frame (Ethernet, IPv4) from 198.51.100.7:`sp` to 203.0.113.9:53, by hand.
    fn udp(sp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 28];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&28u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[198, 51, 100, 7]);
        f[30..34].copy_from_slice(&[203, 0, 113, 9]);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
        f
    }

    /// The owner is the worker the symmetric hash with ports picks over the map of the
    /// packet's receiving port, computed independently here from the Toeplitz hash of
    /// the sorted endpoints; a port without a map hands nothing off; what is queued is
    /// held (in wire packets) until drained, in order.
    #[test]
    fn owner_is_the_map_pick_of_the_hash_with_ports() {
        let pool = Pool::new(PoolConfig {
            buffers: 8,
            cache_size: 2,
            ..Default::default()
        })
        .unwrap();
        let mut c = pool.cache();
        let t = Toeplitz::new(&MS_KEY);
        let h0 = HandOff::new(0, vec![Some(home(0)), None]).unwrap();
        let h1 = HandOff::new(1, vec![Some(home(1)), None]).unwrap();
        assert!(HandOff::new(0, vec![None, None]).is_none());
        let mut seen = [0; 2];
        for sp in 1000..1064u16 {
            let mut p = c.alloc().unwrap();
            {
                let mut v = pool.get_mut(&mut p);
                assert!(v.set_data(64, &udp(sp)));
                // Sorted endpoints: 198.51.100.7 < 203.0.113.9.
                let h = t.ipv4([198, 51, 100, 7], [203, 0, 113, 9], Some((sp, 53)));
                let want = ((u64::from(h) * 2) >> 32) as u16;
                seen[usize::from(want)] += 1;
                let (a, b) = (h0.owner_elsewhere(&mut v), h1.owner_elsewhere(&mut v));
                assert_eq!(a, (want != 0).then_some(want), "port {sp}");
                assert_eq!(b, (want != 1).then_some(want), "port {sp}");
                v.meta.in_port = 1;
                assert_eq!(h0.owner_elsewhere(&mut v), None, "port 1 is not steered");
            }
            c.free(p);
        }
        assert!(seen[0] > 10 && seen[1] > 10, "{seen:?}");
        let mut q = h0;
        let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
        q.push(1, a, 3);
        q.push(1, b, 2);
        assert_eq!((q.held(), q.datagrams, q.is_empty()), (5, 2, false));
        let mut out: Vec<Pkt> = q.drain().map(|(w, p)| (assert_eq!(w, 1), p).1).collect();
        assert_eq!((q.held(), q.is_empty()), (0, true));
        c.free_all(&mut out);
    }
}
