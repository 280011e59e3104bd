//! Netfilter-like hooks: an ordered rule chain per hook point, first match wins, then
//! the chain's policy.
//!
//! Hook points follow the kernel's: PREROUTING (after IPv4 input checks), INPUT (local
//! delivery), FORWARD (after the TTL decrement), OUTPUT (locally originated),
//! POSTROUTING (everything leaving). A hook with no rules and an accept policy is left
//! out of the graph altogether, so it costs nothing (the kernel's static key).
//!
//! Matching reads the packet's [`MatchKey`](crate::dissect::MatchKey) or, for IPv6,
//! [`MatchKey6`](crate::dissect::MatchKey6): the IP header at `Meta::l3` and, for
//! protocols with ports (TCP, UDP, SCTP, UDP-Lite) in a packet that is not a later
//! fragment, the ports where the dissector located the L4 header (a rule with a port
//! match never matches a packet whose ports are unknown). For IPv6 the protocol is the
//! upper layer's, after the extension headers.
//!
//! One chain per hook serves both families, as nftables' `inet` tables do: a rule with
//! an IPv4 prefix matches IPv4 packets only, one with an IPv6 prefix IPv6 packets only,
//! one without a prefix both. A hook evaluates a chain compiled per family
//! ([`Chain::compile`]): the rules that can match the family, in order, with their
//! positions in the chain (hits are counted by position) and prefixes of that family, so
//! that an IPv4 packet is matched over 32-bit addresses as if IPv6 did not exist.
//!
//! Connection tracking's matches and statement, in nftables' terms ([`CtMatch`],
//! [`MarkSet`]): `ct state` (a set: new, established, related, invalid, untracked),
//! `ct status` (any of snat, dnat, assured, seen-reply), `ct mark V/M`, and
//! `ct mark set` (a value, or the packet's mark: what the classifier set). A rule whose
//! verdict is [`Verdict::Continue`] applies its statement and lets the chain go on, as
//! an nftables rule without a verdict.

use core::fmt;

use crate::prefix::{IpPrefix, Ipv4Prefix, Ipv6Prefix};

pub mod hook;

/// A hook point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookPoint {
    /// Before routing.
    Prerouting,
    /// Before local delivery.
    Input,
    /// Before forwarding.
    Forward,
    /// Locally originated, after routing.
    Output,
    /// Before the neighbour stage, for everything leaving.
    Postrouting,
}

impl HookPoint {
    /// Every hook, in packet-path order.
    pub const ALL: [Self; 5] = [
        Self::Prerouting,
        Self::Input,
        Self::Forward,
        Self::Output,
        Self::Postrouting,
    ];

    /// Lower-case name (`prerouting`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Prerouting => "prerouting",
            Self::Input => "input",
            Self::Forward => "forward",
            Self::Output => "output",
            Self::Postrouting => "postrouting",
        }
    }

    /// The graph node name of this hook's stage.
    pub const fn node(self) -> &'static str {
        match self {
            Self::Prerouting => "hook-prerouting",
            Self::Input => "hook-input",
            Self::Forward => "hook-forward",
            Self::Output => "hook-output",
            Self::Postrouting => "hook-postrouting",
        }
    }

    /// Whether packets at this hook have an input interface.
    pub fn has_in_if(self) -> bool {
        matches!(self, Self::Prerouting | Self::Input | Self::Forward)
    }

    /// Whether packets at this hook have an output interface.
    pub fn has_out_if(self) -> bool {
        matches!(self, Self::Forward | Self::Output | Self::Postrouting)
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a matching rule (or the policy) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Let the packet continue.
    Accept,
    /// Drop it (counted with the hook's drop reason).
    Drop,
    /// Apply the rule's statement (`ct mark set`) and go on to the next rule (an
    /// nftables rule without a verdict). Never a chain's policy.
    Continue,
}

/// What a rule asks of the packet's connection (nftables' `ct` expressions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CtMatch {
    /// `ct state`: any of these bits (`crate::ct::state_bit`); 0: not asked.
    pub state: u8,
    /// `ct status`: any of these status bits (`crate::ct::status`); 0: not asked.
    pub status: u16,
    /// `ct mark` (value, mask).
    pub mark: Option<(u32, u32)>,
}

/// `ct mark set`: what a matching rule writes in its connection's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkSet {
    /// This value.
    Value(u32),
    /// The packet's mark (`ct mark set meta mark`: the classifier's `skbedit mark`).
    Packet,
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Whether `p` is in the range.
    #[inline(always)]
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

impl core::str::FromStr for PortRange {
    type Err = String;
    /// `80` or `1000-2000`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a port or a port range (e.g. 80 or 1000-2000)");
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            ),
            None => {
                let p = s.trim().parse().map_err(|_| bad())?;
                (p, p)
            }
        };
        if lo > hi {
            return Err(format!("port range '{s}' is empty (low above high)"));
        }
        Ok(Self { lo, hi })
    }
}

/// One rule as configured: every field that is set must match; a prefix's family
/// restricts the rule to that family.
pub type Rule = RuleOf<IpPrefix>;

impl Rule {
    /// A rule that matches everything.
    pub fn any(verdict: Verdict) -> Self {
        Self {
            proto: None,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            in_if: None,
            out_if: None,
            mark: None,
            ct: None,
            ct_mark_set: None,
            offload: false,
            verdict,
        }
    }
}

/// The prefixes of one address family, as a compiled rule holds them.
pub trait FamilyPrefix: Copy + fmt::Debug + Send + Sync + 'static {
    /// Address bits.
    type Bits: Copy + fmt::Debug;
    /// Whether bits `a` are in the prefix.
    fn contains_bits(&self, a: Self::Bits) -> bool;
    /// The prefix of this family a rule's prefix is, if it is of this family.
    fn of(p: &IpPrefix) -> Option<Self>;
}

impl FamilyPrefix for Ipv4Prefix {
    type Bits = u32;
    #[inline(always)]
    fn contains_bits(&self, a: u32) -> bool {
        Self::contains_bits(self, a)
    }
    fn of(p: &IpPrefix) -> Option<Self> {
        match p {
            IpPrefix::V4(p) => Some(*p),
            IpPrefix::V6(_) => None,
        }
    }
}

impl FamilyPrefix for Ipv6Prefix {
    type Bits = u128;
    #[inline(always)]
    fn contains_bits(&self, a: u128) -> bool {
        Self::contains_bits(self, a)
    }
    fn of(p: &IpPrefix) -> Option<Self> {
        match p {
            IpPrefix::V6(p) => Some(*p),
            IpPrefix::V4(_) => None,
        }
    }
}

/// The fields rules look at, read once per packet, for a family whose addresses are
/// `B` (IPv4: `u32`, IPv6: `u128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyOf<B> {
    /// IP protocol (IPv6: the upper layer's).
    pub proto: u8,
    /// Source address bits.
    pub src: B,
    /// Destination address bits.
    pub dst: B,
    /// Ports (TCP, UDP, SCTP, UDP-Lite), when known: [`MatchKey`](crate::dissect::MatchKey).
    pub ports: Option<(u16, u16)>,
    /// Input interface (`u16::MAX` if none).
    pub in_if: u16,
    /// Output interface (`u16::MAX` if none).
    pub out_if: u16,
    /// Packet mark.
    pub mark: u32,
    /// `ct state` bit of the packet (`crate::ct::state_bit`).
    pub ct_state: u8,
    /// Its connection's status bits (0 without one, or when no rule asks).
    pub ct_status: u16,
    /// Its connection's mark (0 without one, or when no rule asks).
    pub ct_mark: u32,
}

/// An IPv4 packet's key.
pub type Key = KeyOf<u32>;
/// An IPv6 packet's key.
pub type Key6 = KeyOf<u128>;

/// One rule over prefixes `P`: as configured ([`Rule`], either family's prefixes) or
/// compiled for one family (its prefixes of that family). Every field that is set must
/// match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuleOf<P> {
    /// IP protocol number.
    pub proto: Option<u8>,
    /// Source prefix.
    pub src: Option<P>,
    /// Destination prefix.
    pub dst: Option<P>,
    /// Source port range (TCP/UDP).
    pub sport: Option<PortRange>,
    /// Destination port range (TCP/UDP).
    pub dport: Option<PortRange>,
    /// Input interface.
    pub in_if: Option<u16>,
    /// Output interface.
    pub out_if: Option<u16>,
    /// Packet mark (value, mask): what the ingress classifier's `skbedit mark` set
    /// (iptables' `-m mark --mark V/M`).
    pub mark: Option<(u32, u32)>,
    /// Connection tracking matches.
    pub ct: Option<CtMatch>,
    /// `ct mark set`, done when the rule matches.
    pub ct_mark_set: Option<MarkSet>,
    /// Flow offload (nftables' `flow add @ft`, FORWARD only): an established TCP or UDP
    /// connection's direction (IPv4 or IPv6) this rule accepts is forwarded by `ct-in`
    /// from its next packet on ([`crate::ct::offload`]).
    pub offload: bool,
    /// What to do on a match.
    pub verdict: Verdict,
}

impl<P: FamilyPrefix> RuleOf<P> {
    /// Whether the rule matches `k`.
    #[inline]
    pub fn matches(&self, k: &KeyOf<P::Bits>) -> bool {
        self.matches_ct::<true>(k)
    }

    /// [`RuleOf::matches`]; `CT` false skips the `ct` matches (a chain with none).
    #[inline(always)]
    pub fn matches_ct<const CT: bool>(&self, k: &KeyOf<P::Bits>) -> bool {
        if let Some(p) = self.proto
            && p != k.proto
        {
            return false;
        }
        if let Some(p) = &self.src
            && !p.contains_bits(k.src)
        {
            return false;
        }
        if let Some(p) = &self.dst
            && !p.contains_bits(k.dst)
        {
            return false;
        }
        if self.sport.is_some() || self.dport.is_some() {
            let Some((sp, dp)) = k.ports else {
                return false;
            };
            if self.sport.is_some_and(|r| !r.contains(sp))
                || self.dport.is_some_and(|r| !r.contains(dp))
            {
                return false;
            }
        }
        if self.in_if.is_some_and(|i| i != k.in_if) || self.out_if.is_some_and(|i| i != k.out_if) {
            return false;
        }
        if self.mark.is_some_and(|(v, m)| k.mark & m != v & m) {
            return false;
        }
        if CT
            && let Some(c) = &self.ct
            && !c.matches(k)
        {
            return false;
        }
        true
    }
}

impl CtMatch {
    /// Whether the packet whose key is `k` has what the match asks.
    #[inline]
    fn matches<B>(&self, k: &KeyOf<B>) -> bool {
        (self.state == 0 || self.state & k.ct_state != 0)
            && (self.status == 0 || self.status & k.ct_status != 0)
            && self.mark.is_none_or(|(v, m)| k.ct_mark & m == v & m)
    }
}

/// A chain compiled for one family ([`Chain::compile`]): the rules that can match it, in
/// order, each with its position in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled<P> {
    rules: Vec<(usize, RuleOf<P>)>,
    policy: Verdict,
    /// Whether a rule matches a header field (protocol, an address, a port): without,
    /// the key's header fields are never looked at and need not be read.
    headers: bool,
}

impl<P: FamilyPrefix> Compiled<P> {
    /// Whether a rule looks at the packet's headers (protocol, addresses, ports), or
    /// only at what its metadata holds (interfaces, mark, connection state).
    #[inline]
    pub fn reads_headers(&self) -> bool {
        self.headers
    }

    /// The verdict for `k` and the position in the chain of the rule that decided (None:
    /// the policy), for a chain without statements (`ct mark set`): a `continue` rule
    /// decides nothing.
    #[inline]
    pub fn eval(&self, k: &KeyOf<P::Bits>) -> (Verdict, Option<usize>) {
        self.first::<true>(k)
    }

    /// [`Compiled::eval`]; `CT` false for a chain whose rules ask nothing of
    /// connection tracking (their `ct` matches are not looked at).
    #[inline(always)]
    pub fn first<const CT: bool>(&self, k: &KeyOf<P::Bits>) -> (Verdict, Option<usize>) {
        for (i, r) in &self.rules {
            if r.matches_ct::<CT>(k) && (!CT || r.verdict != Verdict::Continue) {
                return (r.verdict, Some(*i));
            }
        }
        (self.policy, None)
    }

    /// [`Compiled::eval`] with the rules' statements: a matching rule's `ct mark set`
    /// writes `k.ct_mark` (later rules see it); a `continue` rule lets the next ones
    /// decide.
    pub fn eval_mut(&self, k: &mut KeyOf<P::Bits>) -> (Verdict, Option<usize>) {
        for (i, r) in &self.rules {
            if r.matches(k) {
                if let Some(set) = r.ct_mark_set {
                    k.ct_mark = match set {
                        MarkSet::Value(v) => v,
                        MarkSet::Packet => k.mark,
                    };
                }
                if r.verdict != Verdict::Continue {
                    return (r.verdict, Some(*i));
                }
            }
        }
        (self.policy, None)
    }
}

/// A hook's rules and policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Rules in order.
    pub rules: Vec<Rule>,
    /// Verdict when no rule matches.
    pub policy: Verdict,
}

impl Default for Chain {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            policy: Verdict::Accept,
        }
    }
}

impl Chain {
    /// Whether the hook would accept everything (so the stage can be left out).
    pub fn is_noop(&self) -> bool {
        self.policy == Verdict::Accept
            && self.rules.iter().all(|r| {
                matches!(r.verdict, Verdict::Accept | Verdict::Continue)
                    && r.ct_mark_set.is_none()
                    && !r.offload
            })
    }

    /// Whether a rule asks about connection tracking (the graph then tracks).
    pub fn uses_ct(&self) -> bool {
        self.rules.iter().any(|r| {
            r.ct.is_some() || r.ct_mark_set.is_some() || r.offload || r.verdict == Verdict::Continue
        })
    }

    /// Whether a rule offloads flows ([`crate::ct::offload`]).
    pub fn offloads(&self) -> bool {
        self.rules.iter().any(|r| r.offload)
    }

    /// Whether a rule reads or writes the connection's entry (its status or mark), not
    /// only the state the packet carries.
    pub fn reads_entry(&self) -> bool {
        self.rules.iter().any(|r| {
            r.ct_mark_set.is_some() || r.ct.is_some_and(|c| c.status != 0 || c.mark.is_some())
        })
    }

    /// The chain for the family of prefixes `P`: the rules without a prefix of the other
    /// family, their prefixes of this one.
    pub fn compile<P: FamilyPrefix>(&self) -> Compiled<P> {
        let mut rules = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let (src, dst) = (r.src.as_ref().map(P::of), r.dst.as_ref().map(P::of));
            if matches!(src, Some(None)) || matches!(dst, Some(None)) {
                continue;
            }
            rules.push((
                i,
                RuleOf {
                    proto: r.proto,
                    src: src.flatten(),
                    dst: dst.flatten(),
                    sport: r.sport,
                    dport: r.dport,
                    in_if: r.in_if,
                    out_if: r.out_if,
                    mark: r.mark,
                    ct: r.ct,
                    ct_mark_set: r.ct_mark_set,
                    offload: r.offload,
                    verdict: r.verdict,
                },
            ));
        }
        let headers = rules.iter().any(|(_, r)| {
            r.proto.is_some()
                || r.src.is_some()
                || r.dst.is_some()
                || r.sport.is_some()
                || r.dport.is_some()
        });
        Compiled {
            rules,
            policy: self.policy,
            headers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(proto: u8, src: &str, dst: &str, ports: Option<(u16, u16)>) -> Key {
        Key {
            proto,
            src: u32::from(src.parse::<core::net::Ipv4Addr>().unwrap()),
            dst: u32::from(dst.parse::<core::net::Ipv4Addr>().unwrap()),
            ports,
            in_if: 0,
            out_if: 1,
            mark: 0,
            ct_state: crate::ct::state_bit::UNTRACKED,
            ct_status: 0,
            ct_mark: 0,
        }
    }

    /// Whether `r` alone matches IPv4 key `k` (compiled for IPv4).
    fn hit4(r: &Rule, k: &Key) -> bool {
        one(r).compile::<Ipv4Prefix>().eval(k).1.is_some()
    }

    /// Whether `r` alone matches IPv6 key `k` (compiled for IPv6).
    fn hit6(r: &Rule, k: &Key6) -> bool {
        one(r).compile::<Ipv6Prefix>().eval(k).1.is_some()
    }

    fn one(r: &Rule) -> Chain {
        Chain {
            rules: vec![r.clone()],
            policy: Verdict::Accept,
        }
    }

    /// A mark rule compares the masked bits only (iptables' `--mark 0x10/0xf0`).
    #[test]
    fn mark_matches_under_its_mask() {
        let mut r = Rule::any(Verdict::Drop);
        r.mark = Some((0x10, 0xf0));
        let mut k = key(17, "10.0.0.1", "10.0.0.2", None);
        for (mark, hit) in [(0x10, true), (0x1f, true), (0x20, false), (0, false)] {
            k.mark = mark;
            assert_eq!(hit4(&r, &k), hit, "{mark:#x}");
        }
    }

    #[test]
    fn first_match_wins_then_policy() {
        let mut drop_udp_range = Rule::any(Verdict::Drop);
        drop_udp_range.proto = Some(17);
        drop_udp_range.dport = Some("9000-9100".parse().unwrap());
        let mut allow_admin = Rule::any(Verdict::Accept);
        allow_admin.src = Some("192.0.2.0/24".parse().unwrap());
        let chain = Chain {
            rules: vec![allow_admin, drop_udp_range],
            policy: Verdict::Accept,
        };
        let c = chain.compile::<Ipv4Prefix>();
        assert_eq!(
            c.eval(&key(17, "198.51.100.1", "10.0.0.1", Some((1, 9050)))),
            (Verdict::Drop, Some(1))
        );
        assert_eq!(
            c.eval(&key(17, "192.0.2.7", "10.0.0.1", Some((1, 9050)))),
            (Verdict::Accept, Some(0))
        );
        assert_eq!(
            c.eval(&key(17, "198.51.100.1", "10.0.0.1", Some((1, 8999)))),
            (Verdict::Accept, None)
        );
        assert_eq!(
            c.eval(&key(6, "198.51.100.1", "10.0.0.1", Some((1, 9050)))),
            (Verdict::Accept, None)
        );
        // Unknown ports (a non-first fragment) never match a port rule.
        assert_eq!(
            c.eval(&key(17, "198.51.100.1", "10.0.0.1", None)),
            (Verdict::Accept, None)
        );
        assert!(!chain.is_noop());
        assert!(Chain::default().is_noop());
    }

    /// A rule's prefix family restricts it to that family; a rule without prefixes
    /// matches both (nftables' `inet`).
    #[test]
    fn prefixes_select_their_family() {
        let six = |src: &str, dst: &str| Key6 {
            proto: 17,
            src: u128::from(src.parse::<core::net::Ipv6Addr>().unwrap()),
            dst: u128::from(dst.parse::<core::net::Ipv6Addr>().unwrap()),
            ports: Some((1, 53)),
            in_if: 0,
            out_if: 1,
            mark: 0,
            ct_state: 0,
            ct_status: 0,
            ct_mark: 0,
        };
        let mut r6 = Rule::any(Verdict::Drop);
        r6.dst = Some("2001:db8:1::/48".parse().unwrap());
        assert!(hit6(&r6, &six("2001:db8::1", "2001:db8:1:2::3")));
        assert!(!hit6(&r6, &six("2001:db8::1", "2001:db8:2::3")));
        // No IPv4 packet matches an IPv6 prefix, whatever its bits.
        assert!(!hit4(&r6, &key(17, "0.0.0.1", "0.0.0.3", Some((1, 53)))));
        let mut r4 = Rule::any(Verdict::Drop);
        r4.src = Some("0.0.0.0/0".parse().unwrap());
        assert!(!hit6(&r4, &six("::1", "::2")), "an IPv4 /0 is IPv4 only");
        assert!(hit4(&r4, &key(17, "10.0.0.1", "10.0.0.2", None)));
        let mut both = Rule::any(Verdict::Drop);
        both.dport = Some("53".parse().unwrap());
        assert!(hit6(&both, &six("2001:db8::1", "2001:db8::2")));
        assert!(hit4(&both, &key(17, "10.0.0.1", "10.0.0.2", Some((1, 53)))));
        // Positions are the chain's: an IPv6 rule before an IPv4 one is skipped for IPv4
        // and still counts for IPv6 at its place.
        let chain = Chain {
            rules: vec![r6.clone(), r4.clone()],
            policy: Verdict::Accept,
        };
        assert_eq!(
            chain
                .compile::<Ipv4Prefix>()
                .eval(&key(17, "10.0.0.1", "10.0.0.2", None)),
            (Verdict::Drop, Some(1))
        );
        assert_eq!(
            chain
                .compile::<Ipv6Prefix>()
                .eval(&six("2001:db8::1", "2001:db8:1::9")),
            (Verdict::Drop, Some(0))
        );
    }

    #[test]
    fn interface_matches() {
        let mut r = Rule::any(Verdict::Drop);
        r.out_if = Some(1);
        assert!(hit4(&r, &key(1, "1.1.1.1", "2.2.2.2", None)));
        r.in_if = Some(3);
        assert!(!hit4(&r, &key(1, "1.1.1.1", "2.2.2.2", None)));
    }

    #[test]
    fn port_ranges_parse() {
        assert_eq!("80".parse::<PortRange>(), Ok(PortRange { lo: 80, hi: 80 }));
        assert_eq!("1-2".parse::<PortRange>(), Ok(PortRange { lo: 1, hi: 2 }));
        assert!("2-1".parse::<PortRange>().unwrap_err().contains("empty"));
        assert!("x".parse::<PortRange>().is_err());
        assert!("70000".parse::<PortRange>().is_err());
    }
}
