//! NAT44 on connection tracking, as Linux's nf_nat: a connection's translation is
//! decided by the NAT chains on its first packet (destination NAT at PREROUTING, source
//! NAT and masquerade at POSTROUTING), kept in its entry as the rewritten reply tuple
//! (what a reply carries on the wire, so that replies find the entry) with the `snat` /
//! `dnat` status bits, fixed when the entry is confirmed, and applied to every later
//! packet of the connection in either direction, and to the ICMP errors about it
//! (RFC 5508), by [`stage`]'s two stages.
//!
//! A packet in direction `d` of a connection whose tuples are `t[0]`, `t[1]` arrives
//! looking like `t[d]` and leaves looking like `invert(t[d ^ 1])`: `nat-prerouting`
//! changes the destination end (original direction of a `dnat` connection, reply
//! direction of an `snat` one), `nat-postrouting` the source end (the converse). An ICMP
//! error's quoted packet is the inverse: it arrives as `invert(t[d])` and leaves as
//! `t[d ^ 1]`.
//!
//! Source NAT picks the address from its range by a hash of the inside source address
//! (an inside host keeps one outside address: RFC 4787 REQ-2, "paired"), keeps the
//! source port when the translated reply tuple is free and the port is in the range
//! (port preservation, RFC 4787 REQ-3), else searches the range from a hash of the
//! connection, at most [`SEARCH`] ports (Linux's bound), and refuses the connection
//! when none is free (dropped, `nat_no_port`). A port is "free" when no confirmed entry
//! and no translation decided in the same call has the reply tuple it would make: ports
//! are reused towards different remote endpoints (endpoint-dependent, as Linux).
//! Without a port range: ports below 1024 map into 1-1023, the others into
//! 1024-65535, ICMP identifiers into the whole 0-65535 (as Linux).
//!
//! With two or more workers, a translated port is taken only when its reply steers to
//! the worker deciding it, and destination NAT is foreseen by the steering: see
//! [`steer`].
//!
//! UDP can be given endpoint-independent mapping and filtering instead (RFC 4787 REQ-1,
//! REQ-8): [`mapping`].
//!
//! Only IPv4 is translated; IPv6 packets pass the stages untouched. The stages are in
//! the graph only when NAT is configured.

pub mod mapping;
pub mod rewrite;
pub mod stage;
pub mod steer;

use crate::ct::Tuple;
use crate::dissect::L4;
use crate::filter::{Chain, Compiled, Key, PortRange, Rule, Verdict};
use crate::prefix::Ipv4Prefix;

/// Ports tried at most when the preferred one is taken (Linux's
/// `nf_nat_l4proto_unique_tuple` gives up after 128 attempts too).
pub const SEARCH: u32 = 128;

/// What a NAT rule does when it matches (nftables' NAT statements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `snat to ADDR[-ADDR][:PORT[-PORT]]`: the source to an address of the range
    /// (inclusive, host order) and a port of the range.
    Snat {
        /// First and last address.
        addrs: (u32, u32),
        /// Ports (None: as Linux, by the source port's class).
        ports: Option<PortRange>,
    },
    /// `masquerade [to :PORT-PORT]`: source NAT to the egress interface's address.
    Masquerade {
        /// Ports.
        ports: Option<PortRange>,
    },
    /// `dnat to ADDR[:PORT]`: the destination to this address (and port).
    Dnat {
        /// Address (host order).
        addr: u32,
        /// Port, None: unchanged.
        port: Option<u16>,
    },
    /// `accept`: no translation, and no later rule looked at.
    Accept,
}

impl Action {
    /// nftables' words for it.
    pub fn describe(&self) -> String {
        let ip = |a: u32| core::net::Ipv4Addr::from(a).to_string();
        let ports = |p: &Option<PortRange>| match p {
            Some(r) if r.lo == r.hi => format!(":{}", r.lo),
            Some(r) => format!(":{}-{}", r.lo, r.hi),
            None => String::new(),
        };
        match self {
            Self::Snat { addrs, ports: p } if addrs.0 == addrs.1 => {
                format!("snat to {}{}", ip(addrs.0), ports(p))
            }
            Self::Snat { addrs, ports: p } => {
                format!("snat to {}-{}{}", ip(addrs.0), ip(addrs.1), ports(p))
            }
            Self::Masquerade { ports: None } => "masquerade".into(),
            Self::Masquerade { ports: p } => format!("masquerade to {}", ports(p)),
            Self::Dnat { addr, port } => match port {
                Some(p) => format!("dnat to {}:{p}", ip(*addr)),
                None => format!("dnat to {}", ip(*addr)),
            },
            Self::Accept => "accept".into(),
        }
    }
}

/// One NAT rule: its matches (a filter rule's, verdict accept) and its action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NatRule {
    /// The matches.
    pub matches: Rule,
    /// The action.
    pub action: Action,
}

/// A NAT chain: the first matching rule decides; none: no translation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatChain {
    /// Rules in order.
    pub rules: Vec<NatRule>,
}

/// NAT chains compiled for IPv4 matching.
#[derive(Debug, Clone)]
pub struct CompiledChain {
    chain: Compiled<Ipv4Prefix>,
    actions: Vec<Action>,
}

impl CompiledChain {
    /// `c` compiled.
    pub fn new(c: &NatChain) -> Self {
        let chain = Chain {
            rules: c
                .rules
                .iter()
                .map(|r| Rule {
                    verdict: Verdict::Accept,
                    ..r.matches.clone()
                })
                .collect(),
            policy: Verdict::Accept,
        };
        Self {
            chain: chain.compile(),
            actions: c.rules.iter().map(|r| r.action).collect(),
        }
    }

    /// The action of the first rule matching `k`, with its position.
    pub fn eval(&self, k: &Key) -> Option<(usize, Action)> {
        let (_, i) = self.chain.eval(k);
        let i = i?;
        Some((i, *self.actions.get(i)?))
    }
}

/// NAT's settings: a chain per hook, and UDP's mapping and filtering behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `type nat hook prerouting`: `dnat` (and `accept`).
    pub prerouting: NatChain,
    /// `type nat hook postrouting`: `snat`, `masquerade` (and `accept`).
    pub postrouting: NatChain,
    /// UDP's mapping and filtering (RFC 4787): endpoint-dependent, as Linux, unless
    /// set ([`mapping`]).
    pub udp: mapping::UdpBehaviour,
}

impl Config {
    /// Whether any rule translates (else the stages are left out).
    pub fn is_empty(&self) -> bool {
        self.prerouting.rules.is_empty() && self.postrouting.rules.is_empty()
    }
}

/// Why NAT refused a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No free port in the range after the bounded search.
    NoPort,
    /// Masquerade on an interface without an IPv4 address.
    NoAddress,
    /// Two or more workers: no port of the bounded search makes a reply tuple that
    /// steers to this worker, or a translation the steering did not foresee (a `dnat`
    /// whose reply would reach another worker): [`steer`].
    NotHome,
}

/// Counters of NAT (per worker, in wire packets or connections as named).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatStats {
    /// Connections given a source translation.
    pub snat: u64,
    /// Connections given a destination translation.
    pub dnat: u64,
    /// Source translations that kept the source port.
    pub port_preserved: u64,
    /// Source translations that searched the range for a port.
    pub port_searched: u64,
    /// Connections refused: no free port.
    pub no_port: u64,
    /// Connections refused: masquerade without an address.
    pub no_address: u64,
    /// Connections refused: their reply would steer to another worker ([`steer`]).
    pub not_home: u64,
    /// Ports the search passed over because their replies steer to another worker.
    pub port_not_home: u64,
    /// Packets (wire) whose headers were rewritten.
    pub translated: u64,
    /// ICMP errors (wire) translated with their quoted headers.
    pub icmp_errors: u64,
    /// Packets dropped: too short for the rewrite.
    pub truncated: u64,
}

impl NatStats {
    /// Counters by name, for `show` and `/metrics`.
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("snat", self.snat),
            ("dnat", self.dnat),
            ("port_preserved", self.port_preserved),
            ("port_searched", self.port_searched),
            ("refused_no_port", self.no_port),
            ("refused_no_address", self.no_address),
            ("refused_not_home", self.not_home),
            ("port_not_home", self.port_not_home),
            ("translated", self.translated),
            ("icmp_errors_translated", self.icmp_errors),
            ("truncated", self.truncated),
        ]
    }
}

/// Whether protocol `p` is translated with its ports (or, ICMP, identifier).
fn has_ids(p: u8) -> bool {
    matches!(L4::of(p), L4::Tcp | L4::Udp | L4::UdpLite | L4::Icmp)
}

/// The identifier a reply tuple's NAT end carries on the wire: its destination port, or
/// for ICMP the identifier (the same field both ways).
fn nat_id(t: &Tuple) -> u16 {
    if L4::of(t.proto) == L4::Icmp {
        t.sport
    } else {
        t.dport
    }
}

fn with_nat_id(t: &mut Tuple, id: u16) {
    if L4::of(t.proto) == L4::Icmp {
        t.sport = id;
    } else {
        t.dport = id;
    }
}

/// The ports source NAT may use for a connection whose original tuple is `orig`.
fn port_range(orig: &Tuple, r: Option<PortRange>) -> PortRange {
    match (r, L4::of(orig.proto)) {
        (Some(r), _) => r,
        (None, L4::Icmp) => PortRange { lo: 0, hi: 65535 },
        (None, _) if orig.sport < 1024 => PortRange { lo: 1, hi: 1023 },
        (None, _) => PortRange {
            lo: 1024,
            hi: 65535,
        },
    }
}

/// A hash of `x` under `seed` (the connection tracker's fixed-seed mix).
fn mix(seed: u64, x: u64) -> u64 {
    let r = u128::from(seed ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (r as u64) ^ ((r >> 64) as u64)
}

/// The address of range `addrs` source NAT gives connection `orig`'s inside host: one
/// per host, by a hash of its address (RFC 4787 REQ-2, "paired").
pub fn source_address(orig: &Tuple, addrs: (u32, u32), seed: u64) -> u32 {
    let (lo, hi) = (addrs.0.min(addrs.1), addrs.0.max(addrs.1));
    let n = u64::from(hi - lo) + 1;
    lo + (mix(seed, orig.src as u64) % n) as u32
}

/// Picks the source translation of a new connection whose tuples are `t` (the reply
/// tuple with any destination NAT already in it) to `addrs` and `ports`: the reply
/// tuple rewritten, or the refusal. `used` says whether a reply tuple is taken; `home`
/// (two or more workers) which reply tuples steer to this worker, and over how many
/// workers the steering spreads, which widens the search: at most [`SEARCH`] looks at
/// `used` among the ports that steer home, `SEARCH × workers` ports in all.
pub fn pick_source(
    t: &[Tuple; 2],
    addrs: (u32, u32),
    ports: Option<PortRange>,
    seed: u64,
    mut used: impl FnMut(&Tuple) -> bool,
    home: Option<&steer::Home>,
    stats: &mut NatStats,
) -> Result<Tuple, Refusal> {
    let is_home = |r: &Tuple| home.is_none_or(|h| h.is_home(r));
    let spread = home.map_or(1, steer::Home::spread);
    let orig = t[0];
    let addr = source_address(&orig, addrs, seed);
    let mut reply = t[1];
    reply.dst = u128::from(addr);
    if !has_ids(orig.proto) {
        return if !is_home(&reply) {
            Err(Refusal::NotHome)
        } else if used(&reply) {
            Err(Refusal::NoPort)
        } else {
            Ok(reply)
        };
    }
    let range = port_range(&orig, ports);
    let own = nat_id(&t[1]);
    if range.contains(own) {
        if !is_home(&reply) {
            stats.port_not_home += 1;
        } else if !used(&reply) {
            stats.port_preserved += 1;
            return Ok(reply);
        }
    }
    stats.port_searched += 1;
    let size = u32::from(range.hi - range.lo) + 1;
    let h = mix(
        seed,
        orig.hash(seed) ^ u64::from(addr) << 16 ^ u64::from(orig.sport),
    );
    let start = (h % u64::from(size)) as u32;
    let (mut looks, mut homed) = (0, false);
    for i in 0..SEARCH.saturating_mul(spread).min(size) {
        let p = range.lo as u32 + (start + i) % size;
        with_nat_id(&mut reply, p as u16);
        if !is_home(&reply) {
            stats.port_not_home += 1;
            continue;
        }
        homed = true;
        if !used(&reply) {
            return Ok(reply);
        }
        looks += 1;
        if looks == SEARCH {
            break;
        }
    }
    Err(if homed {
        Refusal::NoPort
    } else {
        Refusal::NotHome
    })
}

/// The reply tuple of a new connection `t` after destination NAT to `addr` and `port`.
pub fn dest(t: &[Tuple; 2], addr: u32, port: Option<u16>) -> Tuple {
    let mut reply = t[1];
    reply.src = u128::from(addr);
    if let Some(p) = port
        && matches!(L4::of(reply.proto), L4::Tcp | L4::Udp | L4::UdpLite)
    {
        reply.sport = p;
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn conn(sport: u16) -> [Tuple; 2] {
        let t = Tuple::v4(
            "192.0.2.10".parse().unwrap(),
            "198.51.100.7".parse().unwrap(),
            17,
            sport,
            53,
        );
        [t, t.invert()]
    }

    /// A free port is kept (port preservation); a taken one makes the search pick
    /// another in the range; a range with every port taken refuses, after at most
    /// `SEARCH` looks.
    #[test]
    fn ports_preserved_then_searched_then_refused() {
        let nat = ip("203.0.113.1");
        let mut st = NatStats::default();
        let r = pick_source(&conn(40000), (nat, nat), None, 1, |_| false, None, &mut st).unwrap();
        assert_eq!((r.dst as u32, r.dport), (nat, 40000));
        assert_eq!(r.src, conn(40000)[1].src);
        assert_eq!(st.port_preserved, 1);
        // 40000 taken: another port of 1024-65535.
        let r = pick_source(
            &conn(40000),
            (nat, nat),
            None,
            1,
            |t| t.dport == 40000,
            None,
            &mut st,
        )
        .unwrap();
        assert!(r.dport >= 1024 && r.dport != 40000, "{}", r.dport);
        // A port below 1024 stays below (Linux's classes).
        let r = pick_source(
            &conn(53),
            (nat, nat),
            None,
            1,
            |t| t.dport == 53,
            None,
            &mut st,
        )
        .unwrap();
        assert!((1..1024).contains(&r.dport) && r.dport != 53);
        // Outside the configured range: moved into it.
        let range = Some(PortRange { lo: 2000, hi: 2003 });
        let r = pick_source(&conn(40000), (nat, nat), range, 1, |_| false, None, &mut st).unwrap();
        assert!((2000..=2003).contains(&r.dport));
        let mut looks = 0;
        assert_eq!(
            pick_source(
                &conn(40000),
                (nat, nat),
                range,
                1,
                |_| {
                    looks += 1;
                    true
                },
                None,
                &mut st
            ),
            Err(Refusal::NoPort)
        );
        assert_eq!(looks, 4);
        let mut looks = 0;
        let _ = pick_source(
            &conn(40000),
            (nat, nat),
            None,
            1,
            |_| {
                looks += 1;
                true
            },
            None,
            &mut st,
        );
        assert_eq!(looks, 1 + SEARCH, "bounded search");
    }

    /// An address range: one inside host always gets the same address, and it is in
    /// the range.
    #[test]
    fn address_from_range_is_per_host() {
        let (a, b) = (ip("203.0.113.1"), ip("203.0.113.4"));
        let mut st = NatStats::default();
        let first = pick_source(&conn(1), (a, b), None, 9, |_| false, None, &mut st).unwrap();
        for p in 2..50 {
            let r = pick_source(&conn(p), (a, b), None, 9, |_| false, None, &mut st).unwrap();
            assert_eq!(r.dst, first.dst);
        }
        assert!((a..=b).contains(&(first.dst as u32)));
    }

    /// ICMP: the identifier is the translated "port", in the reply tuple's `sport`.
    #[test]
    fn icmp_identifier_is_the_port() {
        let t = Tuple::v4(
            "192.0.2.10".parse().unwrap(),
            "198.51.100.7".parse().unwrap(),
            1,
            77,
            8 << 8,
        );
        let nat = ip("203.0.113.1");
        let mut st = NatStats::default();
        let r = pick_source(
            &[t, t.invert()],
            (nat, nat),
            None,
            1,
            |x| x.sport == 77,
            None,
            &mut st,
        )
        .unwrap();
        assert_ne!(r.sport, 77);
        assert_eq!(r.dport, 0, "echo reply type, code 0");
        let d = dest(&[t, t.invert()], nat, Some(80));
        assert_eq!(
            (d.src as u32, d.sport),
            (nat, 77),
            "ICMP has no port to forward"
        );
    }

    #[test]
    fn actions_read_as_nft_writes_them() {
        let a = ip("203.0.113.1");
        let b = ip("203.0.113.4");
        let p = Some(PortRange { lo: 1024, hi: 2048 });
        assert_eq!(
            Action::Snat {
                addrs: (a, b),
                ports: p
            }
            .describe(),
            "snat to 203.0.113.1-203.0.113.4:1024-2048"
        );
        assert_eq!(
            Action::Dnat {
                addr: a,
                port: Some(8080)
            }
            .describe(),
            "dnat to 203.0.113.1:8080"
        );
        assert_eq!(Action::Masquerade { ports: None }.describe(), "masquerade");
    }
}
