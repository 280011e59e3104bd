//! NAT with two or more workers: which worker owns a translated connection, and how
//! both of its directions (and the ICMP errors about it) get there.
//!
//! Each worker has its own conntrack table; RPS steers a packet by the symmetric hash of
//! its connection's endpoints ([`crate::ct::steer_hash`]): both directions of an
//! *untranslated* connection give one hash, hence one worker. A translation changes an
//! endpoint, so the reply tuple on the wire hashes apart from the original. Two
//! mechanisms close the gap, each stated where it is enforced:
//!
//! - **Source NAT and masquerade pick a port that steers home** (as VPP's NAT44-ED and
//!   some CGNATs do): the port allocator ([`super::pick_source`]) takes a translated
//!   port only when the reply tuple it makes steers (this module's [`Home`]: the very
//!   hash RPS computes, over the same RPS map) to the worker deciding it, the worker
//!   that owns the entry. The source port is preserved when it happens to steer home
//!   (one chance in N); else the search walks the range from a hash of the connection,
//!   skipping ports whose replies would steer away (counted, `port_not_home`), with at
//!   most [`super::SEARCH`] looks at the table among the ports that steer home and at
//!   most `SEARCH × workers` ports looked at in all. None: the connection is refused,
//!   `nat_no_port` (some port steered home, all taken) or `nat_not_home` (none did).
//!   ICMP echo identifiers are chosen the same way. Hairpinning is the same case: its
//!   source NAT (after its destination NAT) picks the port. The rule also keeps the
//!   workers from clashing without sharing anything: a reply tuple steers to one worker
//!   only, so two workers can never both take it (each checks its own table alone).
//! - **Destination NAT is foreseen by the steering** ([`Forward`]): the reply of a
//!   `dnat` connection (from the inside host) has nothing NAT may choose, so instead
//!   the steering hashes every packet's endpoints after mapping each endpoint a `dnat`
//!   rule would rewrite (its destination prefix, port range and protocol) to the
//!   rule's target. The mapping is per endpoint and the same in both directions, so an
//!   untranslated connection still gives one hash for both directions, and a
//!   translated one gives the hash of its reply tuple to its original direction (the
//!   public endpoint maps to the inside one the reply comes from). The configuration
//!   refuses, with two or more workers, a `dnat` rule with neither a destination
//!   address nor a destination port (nothing to foresee it by) and a target another
//!   `dnat` rule would map again. Whatever a rule's other matches make of it (an
//!   earlier `accept`, a source match), a translated connection whose reply would still
//!   steer away is refused on its first packet at `nat-postrouting`, `nat_not_home`,
//!   never left half-working.
//!
//! ICMP errors (RFC 5508) are steered by the packet they quote, which is one of the
//! connection's two tuples on the wire (or its inverse): they reach the owner by the
//! same hash. RPS under connection tracking keeps its map fixed (no RFS, no moving of a
//! flow between workers: `RpsParams::symmetric`), so a flow's packets always take one
//! ring to one worker, in order. With one worker there is no [`Home`] and none of this
//! runs.

use std::sync::Arc;

use netbatch_wire::toeplitz::Toeplitz;

use crate::ct::Tuple;
use crate::dissect::L4;
use crate::filter::PortRange;
use crate::prefix::Ipv4Prefix;

/// What a `dnat` rule rewrites, as steering foresees it: an IPv4 endpoint matching
/// `proto`, `dst` and `dport` becomes `to` (and `to_port` for TCP, UDP and UDP-Lite, as
/// [`super::dest`] rewrites).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Forward {
    /// Protocol (none: any).
    pub proto: Option<u8>,
    /// Destination prefix (none: any address).
    pub dst: Option<Ipv4Prefix>,
    /// Destination ports (none: any; some: only protocols with ports).
    pub dport: Option<PortRange>,
    /// The target address.
    pub to: u32,
    /// The target port (none: unchanged).
    pub to_port: Option<u16>,
}

/// Whether protocol `p` carries ports a rule's `dport` can match.
fn ported(p: u8) -> bool {
    matches!(L4::of(p), L4::Tcp | L4::Udp | L4::UdpLite | L4::Sctp)
}

impl Forward {
    /// The forward of `dnat` rule `r` to `to`/`to_port`; `None` when the rule has
    /// neither a destination address nor a destination port to foresee it by.
    pub fn of(r: &crate::filter::Rule, to: u32, to_port: Option<u16>) -> Option<Self> {
        let dst = match r.dst {
            Some(crate::prefix::IpPrefix::V4(p)) => Some(p),
            Some(_) => return None,
            None => None,
        };
        (dst.is_some() || r.dport.is_some()).then_some(Self {
            proto: r.proto,
            dst,
            dport: r.dport,
            to,
            to_port,
        })
    }

    /// The endpoint (`addr`, `port`) of protocol `proto` becomes, if this forward maps it.
    #[inline]
    pub fn map(&self, proto: u8, addr: u32, port: u16) -> Option<(u32, u16)> {
        if self.proto.is_some_and(|p| p != proto)
            || self.dst.is_some_and(|d| !d.contains_bits(addr))
            || self
                .dport
                .is_some_and(|r| !ported(proto) || !r.contains(port))
        {
            return None;
        }
        let port = match self.to_port {
            Some(p) if matches!(L4::of(proto), L4::Tcp | L4::Udp | L4::UdpLite) => p,
            _ => port,
        };
        Some((self.to, port))
    }

    /// Whether an endpoint `self` maps to could be mapped again by `other` (the
    /// configuration refuses such a chain: the mapping must be idempotent).
    pub fn feeds(&self, other: &Self) -> bool {
        let protos = match (self.proto, other.proto) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let addr = other.dst.is_none_or(|d| d.contains_bits(self.to));
        let ports = match (self.to_port, self.dport, other.dport) {
            (_, _, None) => true,
            (Some(p), _, Some(r)) => r.contains(p),
            (None, Some(a), Some(b)) => a.lo <= b.hi && b.lo <= a.hi,
            (None, None, Some(_)) => true,
        };
        protos && addr && ports
    }
}

/// The forwards of `c`'s `dnat` rules (prerouting, in order), and the positions of the
/// rules steering cannot foresee, with why (the configuration refuses them with two or
/// more workers).
pub fn forwards(c: &super::Config) -> (Vec<Forward>, Vec<(usize, &'static str)>) {
    let (mut fw, mut bad) = (Vec::new(), Vec::new());
    for (i, r) in c.prerouting.rules.iter().enumerate() {
        if let super::Action::Dnat { addr, port } = r.action {
            match Forward::of(&r.matches, addr, port) {
                Some(f) => fw.push((i, f)),
                None => bad.push((
                    i,
                    "with two or more workers a dnat rule needs `dst` (an IPv4 prefix) or \
                     `dport`: steering brings a forwarded connection's two directions to one \
                     worker by the endpoint the rule rewrites",
                )),
            }
        }
    }
    for &(i, f) in &fw {
        // Mapped again to itself is harmless (the mapping stays idempotent).
        let again = |g: &Forward| g.to == f.to && g.to_port.is_none_or(|p| Some(p) == f.to_port);
        if fw.iter().any(|(_, g)| f.feeds(g) && !again(g)) {
            bad.push((
                i,
                "with two or more workers a dnat target must not be an endpoint a dnat rule \
                 rewrites (steering maps each endpoint once)",
            ));
        }
    }
    (fw.into_iter().map(|(_, f)| f).collect(), bad)
}

/// The endpoint (`addr`, `port`) as the forwards map it: the first that maps it.
#[inline]
fn mapped(fw: &[Forward], proto: u8, addr: u128, port: u16) -> (u128, u16) {
    for f in fw {
        if let Some((a, p)) = f.map(proto, addr as u32, port) {
            return (u128::from(a), p);
        }
    }
    (addr, port)
}

/// The steering hash of a connection one of whose tuples (either direction, as on the
/// wire) is `k`: the Toeplitz hash of its endpoints in sorted order, after `fw`'s
/// mapping (IPv4); an ICMP query by its addresses and identifier. Never 0.
pub fn tuple_hash(k: &Tuple, t: &Toeplitz, fw: &[Forward]) -> u32 {
    let mut k = *k;
    if matches!(L4::of(k.proto), L4::Icmp | L4::Icmpv6) {
        // A query and its answer differ in type: steer by the identifier alone.
        k.dport = k.sport;
    }
    let (mut a, mut b) = ((k.src, k.sport), (k.dst, k.dport));
    if !fw.is_empty() && !k.v6 {
        a = mapped(fw, k.proto, a.0, a.1);
        b = mapped(fw, k.proto, b.0, b.1);
    }
    let ((lo, lp), (hi, hp)) = if a <= b { (a, b) } else { (b, a) };
    let ports = (lp != 0 || hp != 0).then_some((lp, hp));
    let h = if k.v6 {
        t.ipv6(lo.to_be_bytes(), hi.to_be_bytes(), ports)
    } else {
        t.ipv4((lo as u32).to_be_bytes(), (hi as u32).to_be_bytes(), ports)
    };
    h.max(1)
}

/// The worker of `map` a hash picks (the kernel's `reciprocal_scale`, as RPS picks it).
#[inline]
pub fn worker_of_hash(hash: u32, map: &[u16]) -> Option<u16> {
    let i = ((u64::from(hash) * map.len() as u64) >> 32) as usize;
    map.get(i).copied()
}

/// What a worker knows of the steering with two or more workers: who it is, the RPS
/// map every port shares (the configuration makes them one), the hasher and the
/// forwards RPS uses. A reply tuple is "home" when RPS would bring it here.
#[derive(Clone)]
pub struct Home {
    /// This worker.
    pub me: u16,
    /// The RPS map.
    pub map: Arc<[u16]>,
    /// RPS's hasher (the same key).
    pub toeplitz: Arc<Toeplitz>,
    /// The `dnat` rules' forwards, as RPS has them.
    pub forwards: Arc<[Forward]>,
}

impl core::fmt::Debug for Home {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Home")
            .field("me", &self.me)
            .field("map", &self.map)
            .field("forwards", &self.forwards)
            .finish()
    }
}

impl Home {
    /// The worker RPS steers a packet whose tuple is `t` to.
    #[inline]
    pub fn worker_of(&self, t: &Tuple) -> u16 {
        worker_of_hash(tuple_hash(t, &self.toeplitz, &self.forwards), &self.map).unwrap_or(self.me)
    }

    /// The worker RPS steers packet `v` to (dissected here if it was not): RPS's own
    /// hash ([`crate::ct::steer_hash_with`], with the forwards) and its own pick
    /// ([`worker_of_hash`]) over this map; this worker for a packet without an IP flow,
    /// which RPS keeps where it is. A defrag chain's head hashes with its ports, as the
    /// datagram would have come unfragmented ([`crate::defrag::handoff`]).
    #[inline]
    pub fn worker_of_packet(&self, v: &mut netbatch_engine::PktMut<'_>) -> u16 {
        match crate::ct::steer_hash_with(v, &self.toeplitz, &self.forwards) {
            0 => self.me,
            h => worker_of_hash(h, &self.map).unwrap_or(self.me),
        }
    }

    /// Whether a packet with tuple `t` reaches this worker.
    #[inline]
    pub fn is_home(&self, t: &Tuple) -> bool {
        self.worker_of(t) == self.me
    }

    /// How many workers the map spreads over (what bounds the port search).
    pub fn spread(&self) -> u32 {
        let mut seen = [false; 64];
        let mut n = 0;
        for &w in self.map.iter() {
            if let Some(s) = seen.get_mut(usize::from(w))
                && !*s
            {
                *s = true;
                n += 1;
            }
        }
        n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_wire::toeplitz::MS_KEY;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<core::net::Ipv4Addr>().unwrap())
    }

    /// A forward maps the public endpoint to the target and leaves others; with it an
    /// untranslated connection still hashes alike both ways, and a translated one's
    /// original direction hashes as its reply.
    #[test]
    fn forwards_keep_both_directions_together() {
        let t = Toeplitz::new(&MS_KEY);
        let fw = [Forward {
            proto: Some(6),
            dst: None,
            dport: Some(PortRange { lo: 8080, hi: 8080 }),
            to: ip("192.0.2.10"),
            to_port: Some(80),
        }];
        let pubip = ip("203.0.113.1");
        assert_eq!(fw[0].map(6, pubip, 8080), Some((ip("192.0.2.10"), 80)));
        assert_eq!(fw[0].map(17, pubip, 8080), None, "other protocol");
        assert_eq!(fw[0].map(6, pubip, 8081), None, "other port");
        for sp in [1000u16, 8080, 40000] {
            let orig = Tuple::v4(ip("198.51.100.7").into(), pubip.into(), 6, sp, 8080);
            let reply = Tuple::v4(
                ip("192.0.2.10").into(),
                ip("198.51.100.7").into(),
                6,
                80,
                sp,
            );
            assert_eq!(tuple_hash(&orig, &t, &fw), tuple_hash(&reply, &t, &fw));
            let other = Tuple::v4(ip("198.51.100.7").into(), pubip.into(), 6, sp, 22);
            assert_eq!(
                tuple_hash(&other, &t, &fw),
                tuple_hash(&other.invert(), &t, &fw)
            );
        }
        assert!(!fw[0].feeds(&fw[0]), "the target port 80 is not 8080");
    }
}
