//! A connection's tuple in one direction: addresses, protocol and what tells its
//! connections apart (ports for TCP and UDP, the identifier and type for ICMP echo), as
//! Linux's `nf_conntrack_tuple`. An entry holds two: the original direction's and the
//! reply's ([`Tuple::invert`], or a NAT's rewrite of it later).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::dissect::L4;

/// One direction of a connection.
#[derive(Debug, Clone, Copy, Eq, Default)]
pub struct Tuple {
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// TCP/UDP source port; ICMP echo: the identifier (RFC 792, RFC 4443 4.1).
    pub sport: u16,
    /// TCP/UDP destination port; ICMP: type (high byte) and code (low byte).
    pub dport: u16,
    /// IP protocol (IPv6: the upper layer's).
    pub proto: u8,
    /// IPv6.
    pub v6: bool,
}

/// Field by field, as the derived comparison would, but without a branch per field:
/// connection tracking compares a packet's tuple with the previous packet's per packet.
impl PartialEq for Tuple {
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        ((self.src ^ o.src) | (self.dst ^ o.dst)) == 0
            && (self.sport == o.sport)
                & (self.dport == o.dport)
                & (self.proto == o.proto)
                & (self.v6 == o.v6)
    }
}

/// Over the fields [`PartialEq`] compares, as the derived hash would be.
impl core::hash::Hash for Tuple {
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.src.hash(h);
        self.dst.hash(h);
        self.sport.hash(h);
        self.dport.hash(h);
        self.proto.hash(h);
        self.v6.hash(h);
    }
}

/// ICMP query types and their answers (RFC 792: echo, timestamp, information, RFC 950
/// address mask), the requests Linux's `icmp_pkt_to_tuple` tracks.
const ICMP_PAIRS: [(u8, u8); 4] = [(8, 0), (13, 14), (15, 16), (17, 18)];
/// ICMPv6 echo request and reply (RFC 4443 4.1, 4.2).
const ICMP6_PAIRS: [(u8, u8); 1] = [(128, 129)];

impl Tuple {
    /// An IPv4 tuple.
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, sport: u16, dport: u16) -> Self {
        Self {
            src: u128::from(u32::from(src)),
            dst: u128::from(u32::from(dst)),
            sport,
            dport,
            proto,
            v6: false,
        }
    }

    /// An IPv6 tuple.
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, sport: u16, dport: u16) -> Self {
        Self {
            src: u128::from(src),
            dst: u128::from(dst),
            sport,
            dport,
            proto,
            v6: true,
        }
    }

    /// The ICMP or ICMPv6 message type of an ICMP tuple.
    pub fn icmp_type(&self) -> u8 {
        (self.dport >> 8) as u8
    }

    /// The ICMP query pairs of this tuple's family.
    fn pairs(&self) -> &'static [(u8, u8)] {
        if self.v6 { &ICMP6_PAIRS } else { &ICMP_PAIRS }
    }

    /// Whether the ICMP type `t` starts a connection (a request Linux tracks).
    pub fn icmp_request(v6: bool, t: u8) -> bool {
        let pairs: &[(u8, u8)] = if v6 { &ICMP6_PAIRS } else { &ICMP_PAIRS };
        pairs.iter().any(|&(q, _)| q == t)
    }

    /// Whether the ICMP type `t` answers a request.
    pub fn icmp_answer(v6: bool, t: u8) -> bool {
        let pairs: &[(u8, u8)] = if v6 { &ICMP6_PAIRS } else { &ICMP_PAIRS };
        pairs.iter().any(|&(_, a)| a == t)
    }

    /// The tuple of the other direction: addresses and ports swapped; for ICMP the same
    /// identifier and the answer's type for a request's (and back), as Linux's
    /// `nf_ct_invert_tuple`.
    pub fn invert(&self) -> Self {
        match L4::of(self.proto) {
            L4::Icmp | L4::Icmpv6 => {
                let t = self.icmp_type();
                let inv = self
                    .pairs()
                    .iter()
                    .find_map(|&(q, a)| {
                        if q == t {
                            Some(a)
                        } else if a == t {
                            Some(q)
                        } else {
                            None
                        }
                    })
                    .unwrap_or(t);
                Self {
                    src: self.dst,
                    dst: self.src,
                    sport: self.sport,
                    dport: u16::from(inv) << 8 | (self.dport & 0xff),
                    ..*self
                }
            }
            _ => Self {
                src: self.dst,
                dst: self.src,
                sport: self.dport,
                dport: self.sport,
                ..*self
            },
        }
    }

    /// The source address.
    pub fn src_ip(&self) -> IpAddr {
        addr(self.src, self.v6)
    }

    /// The destination address.
    pub fn dst_ip(&self) -> IpAddr {
        addr(self.dst, self.v6)
    }

    /// The tuple's hash under `seed`: a fixed-seed mix of its words, so that a table's
    /// layout (and a test's) is the same on every run.
    #[inline(always)]
    pub fn hash(&self, seed: u64) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        #[inline(always)]
        fn fold(a: u64, b: u64) -> u64 {
            let r = u128::from(a).wrapping_mul(u128::from(b));
            (r as u64) ^ ((r >> 64) as u64)
        }
        let w = u64::from(self.sport)
            | u64::from(self.dport) << 16
            | u64::from(self.proto) << 32
            | u64::from(self.v6) << 40;
        let mut h = fold(seed ^ (self.src as u64), K ^ w);
        if self.v6 {
            h = fold(h ^ ((self.src >> 64) as u64), K ^ ((self.dst >> 64) as u64));
        }
        fold(h ^ (self.dst as u64), K.rotate_left(17))
    }
}

fn addr(a: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::from(a as u32))
    }
}

/// The protocol's name as `conntrack -L` prints it.
pub fn proto_name(p: u8) -> &'static str {
    match L4::of(p) {
        L4::Tcp => "tcp",
        L4::Udp => "udp",
        L4::Icmp => "icmp",
        L4::Icmpv6 => "icmpv6",
        L4::Sctp => "sctp",
        L4::UdpLite => "udplite",
        L4::Other => "unknown",
    }
}

impl fmt::Display for Tuple {
    /// `conntrack -L`'s way: `src=… dst=… sport=… dport=…` (ICMP: `type=… code=… id=…`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "src={} dst={}", self.src_ip(), self.dst_ip())?;
        match L4::of(self.proto) {
            L4::Icmp | L4::Icmpv6 => write!(
                f,
                " type={} code={} id={}",
                self.icmp_type(),
                self.dport & 0xff,
                self.sport
            ),
            l if l.has_ports() => write!(f, " sport={} dport={}", self.sport, self.dport),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverting_swaps_and_maps_icmp_queries() {
        let a: Ipv4Addr = "192.0.2.1".parse().unwrap();
        let b: Ipv4Addr = "198.51.100.2".parse().unwrap();
        let t = Tuple::v4(a, b, 6, 40000, 80);
        assert_eq!(t.invert(), Tuple::v4(b, a, 6, 80, 40000));
        assert_eq!(t.invert().invert(), t);
        // Echo request (8) ↔ echo reply (0), same identifier (RFC 792).
        let e = Tuple::v4(a, b, 1, 0x1234, 8 << 8);
        assert_eq!(e.invert(), Tuple::v4(b, a, 1, 0x1234, 0));
        let x: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let y: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let e6 = Tuple::v6(x, y, 58, 7, 128 << 8);
        assert_eq!(e6.invert(), Tuple::v6(y, x, 58, 7, 129 << 8));
        assert_eq!(
            e.to_string(),
            "src=192.0.2.1 dst=198.51.100.2 type=8 code=0 id=4660"
        );
    }

    /// Tuples are equal exactly when every field is (the comparison is written out).
    #[test]
    fn equal_exactly_when_every_field_is() {
        let t = Tuple::v6(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            17,
            1,
            2,
        );
        let others = [
            Tuple {
                src: t.src ^ 1 << 100,
                ..t
            },
            Tuple {
                src: t.src ^ 1,
                ..t
            },
            Tuple {
                dst: t.dst ^ 1 << 127,
                ..t
            },
            Tuple { sport: 3, ..t },
            Tuple { dport: 3, ..t },
            Tuple { proto: 6, ..t },
            Tuple { v6: false, ..t },
        ];
        for o in others {
            assert_ne!(t, o);
            assert_ne!(o, t);
            assert_eq!(o, Tuple { ..o });
        }
        assert_eq!(t, Tuple { ..t });
    }

    /// The hash is a function of the tuple and the seed only (the same on every run), and
    /// tells the directions apart.
    #[test]
    fn hash_is_fixed_by_its_seed() {
        let t = Tuple::v4(
            "192.0.2.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
            17,
            1,
            2,
        );
        assert_eq!(t.hash(1), t.hash(1));
        assert_ne!(t.hash(1), t.hash(2));
        assert_ne!(t.hash(1), t.invert().hash(1));
    }
}
