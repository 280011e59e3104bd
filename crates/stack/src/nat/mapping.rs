//! Endpoint-independent mapping and filtering of UDP (RFC 4787), the behaviour a NAT
//! must have for the applications that learn their outside endpoint from a server and
//! hand it to peers (games, VoIP, WebRTC's STUN):
//!
//! - **Mapping** (REQ-1): every UDP connection from one inside endpoint (address and
//!   port) gets one outside endpoint, whatever the remote endpoint, for as long as one
//!   of its connections lives. Linux's NAT (and netbatch's default) is endpoint-dependent:
//!   a port is reused towards different remotes, and one inside endpoint can leave by
//!   different ports. Here an outside endpoint belongs to one inside endpoint only.
//! - **Filtering** (REQ-8, endpoint-independent): a datagram from any remote endpoint to
//!   a mapped outside endpoint is let in, to the inside endpoint, as a connection of its
//!   own (destination NAT, `ct status dnat`, so a firewall can accept it by that).
//!
//! A mapping lives while connections hold it: each connection that uses it (created by
//! source NAT, or let in by filtering) holds one reference, taken when its translation
//! is decided and given back when its entry goes (expired, evicted, flushed, or never
//! confirmed): the table queues the entries it removes that hold one
//! ([`crate::ct::Table::released`]), and tracking gives their references back at its
//! next list. A mapping is keyed by its inside endpoint and outside address (source NAT
//! to a range keeps one outside address per inside host, RFC 4787 REQ-2, so two egress
//! addresses make two mappings).
//!
//! Bounds: a mapping is held by at least one connection, so there are never more than
//! the connection table's `max`; both maps are allocated at first use for twice that,
//! so that inserting never allocates (a map at most half full rehashes in place).

use hashbrown::HashMap;

use crate::ct::Tuple;
use crate::ct::status;

/// UDP's NAT behaviour (RFC 4787 4.1 and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpBehaviour {
    /// Endpoint-independent mapping (REQ-1); false: endpoint-dependent, as Linux.
    pub independent_mapping: bool,
    /// Endpoint-independent filtering (REQ-8: the NAT lets in what any remote sends to
    /// a mapping); needs `independent_mapping`.
    pub independent_filtering: bool,
}

/// An inside endpoint and the outside address it is mapped to: the key of a mapping.
type Inside = (u32, u16, u32);

/// One mapping: the outside port and the connections holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapped {
    port: u16,
    refs: u32,
}

/// Counters of the mappings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MappingStats {
    /// Mappings made.
    pub created: u64,
    /// New connections that took an existing mapping's outside endpoint.
    pub reused: u64,
    /// Connections let in by endpoint-independent filtering.
    pub filtered_in: u64,
    /// Mappings that went with their last connection.
    pub expired: u64,
}

/// The worker's mappings.
#[derive(Debug, Clone)]
pub struct Mappings {
    by_inside: HashMap<Inside, Mapped>,
    /// Outside address and port to the inside address and port.
    by_outside: HashMap<(u32, u16), (u32, u16)>,
    /// Counters.
    pub stats: MappingStats,
}

impl Mappings {
    /// Room for the mappings of a table of `max` connections.
    pub fn new(max: usize) -> Self {
        let room = max.saturating_mul(2).max(16);
        Self {
            by_inside: HashMap::with_capacity(room),
            by_outside: HashMap::with_capacity(room),
            stats: MappingStats::default(),
        }
    }

    /// Mappings held now.
    pub fn len(&self) -> usize {
        self.by_inside.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_inside.is_empty()
    }

    /// The outside port inside endpoint `(addr, port)` is mapped to on outside address
    /// `out`.
    pub fn outside_port(&self, addr: u32, port: u16, out: u32) -> Option<u16> {
        self.by_inside.get(&(addr, port, out)).map(|m| m.port)
    }

    /// The inside endpoint outside endpoint `(out, port)` belongs to.
    pub fn inside_of(&self, out: u32, port: u16) -> Option<(u32, u16)> {
        self.by_outside.get(&(out, port)).copied()
    }

    /// Whether outside endpoint `(out, port)` belongs to a mapping.
    pub fn taken(&self, out: u32, port: u16) -> bool {
        self.by_outside.contains_key(&(out, port))
    }

    /// One more connection holds the mapping of inside endpoint `(addr, port)` to
    /// `(out, out_port)`, made if there was none.
    pub fn hold(&mut self, (addr, port): (u32, u16), (out, out_port): (u32, u16)) {
        match self.by_inside.get_mut(&(addr, port, out)) {
            Some(m) => m.refs += 1,
            None => {
                self.by_inside.insert(
                    (addr, port, out),
                    Mapped {
                        port: out_port,
                        refs: 1,
                    },
                );
                self.by_outside.insert((out, out_port), (addr, port));
                self.stats.created += 1;
            }
        }
    }

    /// A connection holding a mapping went: its entry's tuples `t` and status `s`
    /// (which of its ends is inside: a source-translated connection's original source,
    /// a filtered-in one's reply source).
    pub fn release(&mut self, t: &[Tuple; 2], s: u16) {
        let ((a, p), (out, _)) = ends(t, s);
        let key = (a, p, out);
        let Some(m) = self.by_inside.get_mut(&key) else {
            return;
        };
        m.refs = m.refs.saturating_sub(1);
        if m.refs == 0 {
            let port = m.port;
            self.by_inside.remove(&key);
            self.by_outside.remove(&(key.2, port));
            self.stats.expired += 1;
        }
    }
}

/// The inside and outside endpoints of the mapping a connection with tuples `t` and
/// status `s` uses: a source-translated connection's original source and reply
/// destination, a filtered-in one's (destination NAT) reply source and original
/// destination.
pub fn ends(t: &[Tuple; 2], s: u16) -> ((u32, u16), (u32, u16)) {
    if s & status::DST_NAT != 0 {
        ((t[1].src as u32, t[1].sport), (t[0].dst as u32, t[0].dport))
    } else {
        ((t[0].src as u32, t[0].sport), (t[1].dst as u32, t[1].dport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    /// A source-translated UDP connection's tuples: inside `a:ap` to remote `r:rp`,
    /// leaving as `out:op`.
    fn snat(a: &str, ap: u16, r: &str, rp: u16, out: &str, op: u16) -> [Tuple; 2] {
        let o = Tuple::v4(a.parse().unwrap(), r.parse().unwrap(), 17, ap, rp);
        let mut reply = o.invert();
        reply.dst = u128::from(ip(out));
        reply.dport = op;
        [o, reply]
    }

    /// A mapping lives while connections hold it: two hold it, the first going leaves
    /// it, the second going removes it both ways.
    #[test]
    fn a_mapping_lives_while_connections_hold_it() {
        let mut m = Mappings::new(8);
        let (inside, out) = ((ip("192.0.2.10"), 5000), (ip("203.0.113.1"), 7000));
        m.hold(inside, out);
        m.hold(inside, out);
        assert_eq!(m.outside_port(inside.0, 5000, out.0), Some(7000));
        assert_eq!(m.inside_of(out.0, 7000), Some(inside));
        assert!(m.taken(out.0, 7000) && !m.taken(out.0, 7001));
        let c1 = snat("192.0.2.10", 5000, "198.51.100.1", 53, "203.0.113.1", 7000);
        let c2 = snat("192.0.2.10", 5000, "198.51.100.2", 53, "203.0.113.1", 7000);
        m.release(&c1, status::SRC_NAT);
        assert_eq!(m.len(), 1);
        m.release(&c2, status::SRC_NAT);
        assert!(m.is_empty());
        assert!(!m.taken(out.0, 7000));
        assert_eq!((m.stats.created, m.stats.expired), (1, 1));
    }

    /// A filtered-in connection (remote to the outside endpoint, translated to the
    /// inside one) names its inside end in its reply tuple.
    #[test]
    fn a_filtered_in_connection_releases_by_its_reply() {
        let mut m = Mappings::new(8);
        let (inside, out) = ((ip("192.0.2.10"), 5000), (ip("203.0.113.1"), 7000));
        m.hold(inside, out);
        m.hold(inside, out);
        let o = Tuple::v4(
            "198.51.100.9".parse().unwrap(),
            "203.0.113.1".parse().unwrap(),
            17,
            9999,
            7000,
        );
        let mut reply = o.invert();
        reply.src = u128::from(inside.0);
        reply.sport = 5000;
        m.release(&[o, reply], status::DST_NAT);
        assert_eq!(m.len(), 1, "one of two references given back");
    }
}
