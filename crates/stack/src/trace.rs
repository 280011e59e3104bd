//! The stack's side of the packet trace (VPP's `trace add` / `show trace`): which frames
//! to trace ([`Match`], a tcpdump-like expression over the dissector's keys, turned into
//! the engine's matcher), and how to show what was traced ([`Report`]: one header line
//! per packet, then one line per stage with what the stage reads of the packet and what
//! it decided, arcs and drop reasons by name).
//!
//! Invariants:
//! - Frames are read only through the dissector ([`crate::dissect`]) and the wire views
//!   at the offsets it (or the trace record) gives; nothing here finds headers itself.
//! - Matching and showing never panic, whatever the bytes: a frame without the header
//!   a term asks about does not match it (a `not` of it does); a view whose bytes were
//!   not kept says so.
//! - A parse error names the word it stopped at.

use core::fmt::{self, Write as _};
use core::net::{IpAddr, Ipv4Addr};
use core::str::FromStr;
use std::collections::HashMap;

use netbatch_engine::{ArcTarget, Matcher, Meta, TraceDump, TraceEvent, TraceRecord, View};
use netbatch_wire::arp::ArpPacket;
use netbatch_wire::bytes::get_u16;
use netbatch_wire::ethernet::{EthernetFrame, HEADER_LEN as ETH_LEN};
use netbatch_wire::icmpv4::Icmpv4Packet;
use netbatch_wire::icmpv6::Icmpv6Type;
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::ipv6::Ipv6Packet;
use netbatch_wire::tcp::TcpFlags;

use crate::dissect::{self, Dissected, FlowKey, FlowKey6, L3, L4};
use crate::meta::flag;
use crate::prefix::{IpPrefix, Ipv4Prefix, Ipv6Prefix};
use crate::route::{ADJ_ON_LINK, ADJ_TABLE, Routes};

/// One condition of a [`Match`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    /// The IP protocol number.
    Proto(u8),
    /// Source address in the prefix.
    Src(IpPrefix),
    /// Destination address in the prefix.
    Dst(IpPrefix),
    /// Source or destination address in the prefix.
    Either(IpPrefix),
    /// Source port.
    SrcPort(u16),
    /// Destination port.
    DstPort(u16),
    /// Source or destination port.
    Port(u16),
}

/// What a frame holds that terms test: its IP addresses and protocol (for IPv6 the upper
/// layer's), and its ports.
struct Keys {
    flow: Option<(u8, IpAddr, IpAddr)>,
    ports: Option<(u16, u16)>,
}

impl Keys {
    fn of(frame: &[u8]) -> Self {
        let r = dissect::parse(frame);
        let flow = match FlowKey::of(&r, frame) {
            Some(k) => Some((k.proto, IpAddr::V4(k.src), IpAddr::V4(k.dst))),
            None => {
                FlowKey6::of(&r, frame).map(|k| (k.proto, IpAddr::V6(k.src), IpAddr::V6(k.dst)))
            }
        };
        Self {
            flow,
            ports: dissect::ports(&r, frame),
        }
    }
}

/// Whether address `a` is in prefix `p` (of the same family).
fn within(p: IpPrefix, a: IpAddr) -> bool {
    match (p, a) {
        (IpPrefix::V4(p), IpAddr::V4(a)) => p.contains(a),
        (IpPrefix::V6(p), IpAddr::V6(a)) => p.contains(a),
        _ => false,
    }
}

impl Term {
    fn holds(self, k: &Keys) -> bool {
        let Some((proto, src, dst)) = k.flow else {
            return false;
        };
        match self {
            Self::Proto(p) => proto == p,
            Self::Src(n) => within(n, src),
            Self::Dst(n) => within(n, dst),
            Self::Either(n) => within(n, src) || within(n, dst),
            Self::SrcPort(p) => k.ports.is_some_and(|(s, _)| s == p),
            Self::DstPort(p) => k.ports.is_some_and(|(_, d)| d == p),
            Self::Port(p) => k.ports.is_some_and(|(s, d)| s == p || d == p),
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proto(p) => match proto_name(*p) {
                Some(n) => write!(f, "proto {n}"),
                None => write!(f, "proto {p}"),
            },
            Self::Src(n) => write!(f, "src {}", Host(*n)),
            Self::Dst(n) => write!(f, "dst {}", Host(*n)),
            Self::Either(n) if is_host(n) => write!(f, "host {}", Host(*n)),
            Self::Either(n) => write!(f, "net {n}"),
            Self::SrcPort(p) => write!(f, "src port {p}"),
            Self::DstPort(p) => write!(f, "dst port {p}"),
            Self::Port(p) => write!(f, "port {p}"),
        }
    }
}

/// Whether prefix `p` is one address.
fn is_host(p: &IpPrefix) -> bool {
    match p {
        IpPrefix::V4(p) => p.prefix_len() == 32,
        IpPrefix::V6(p) => p.prefix_len() == 128,
    }
}

/// A prefix written as an address when it is one.
struct Host(IpPrefix);

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpPrefix::V4(p) if p.prefix_len() == 32 => write!(f, "{}", p.addr()),
            IpPrefix::V6(p) if p.prefix_len() == 128 => write!(f, "{}", p.addr()),
            p => write!(f, "{p}"),
        }
    }
}

/// The protocols named in expressions and views.
const PROTOS: &[(&str, u8)] = &[
    ("icmp", 1),
    ("tcp", 6),
    ("udp", 17),
    ("icmp6", 58),
    ("sctp", 132),
    ("udplite", 136),
];

fn proto_name(p: u8) -> Option<&'static str> {
    PROTOS.iter().find(|&&(_, n)| n == p).map(|&(s, _)| s)
}

/// Which received frames to trace: terms over the dissector's keys, all of which must
/// hold (tcpdump's syntax, a subset):
///
/// - `proto udp|tcp|icmp|icmp6|sctp|udplite|N`, or the bare name (`udp`); for IPv6 the
///   upper layer's protocol, after the extension headers;
/// - `src A`, `dst A` (an IPv4 or IPv6 address or a prefix `A/len`; `src net A/len` and
///   `src host A` too), `host A` (source or destination), `net A/len` (source or
///   destination);
/// - `src port N`, `dst port N`, `port N` (either; only a packet with ports matches:
///   TCP, UDP, SCTP, UDP-Lite, not a later fragment);
/// - `not TERM` (or `!`); terms joined by `and` (or `&&`).
///
/// Every term needs an IP header whose upper layer the dissector located: a frame
/// without one (ARP, a cut header) matches none, and every `not`. An address term
/// matches its own family only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// (negated, term), all of which must hold.
    terms: Vec<(bool, Term)>,
}

/// Why an expression was refused; names the word it stopped at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchError {
    /// The offending word (empty when the expression ended too early, then `after`
    /// names the last word).
    pub word: String,
    /// The word before, when the expression ended too early.
    pub after: Option<String>,
    /// What was expected.
    pub expected: String,
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.after {
            Some(a) if self.word.is_empty() => {
                write!(f, "expression ends after '{a}': expected {}", self.expected)
            }
            _ if self.word.is_empty() => write!(f, "empty expression: expected {}", self.expected),
            _ => write!(f, "at '{}': expected {}", self.word, self.expected),
        }
    }
}

impl std::error::Error for MatchError {}

const A_TERM: &str = "a term (proto, udp, tcp, icmp, icmp6, src, dst, host, net, port, not)";

/// The words of an expression, consumed front to back.
struct Words<'a> {
    words: Vec<&'a str>,
    at: usize,
}

impl<'a> Words<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.at).copied();
        self.at += 1;
        w
    }

    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }

    /// An error at the word just taken (or at the end).
    fn error(&self, word: Option<&str>, expected: &str) -> MatchError {
        match word {
            Some(w) => MatchError {
                word: w.into(),
                after: None,
                expected: expected.into(),
            },
            None => MatchError {
                word: String::new(),
                after: self
                    .at
                    .checked_sub(2)
                    .and_then(|i| self.words.get(i))
                    .map(|w| (*w).into()),
                expected: expected.into(),
            },
        }
    }

    fn number<T: FromStr>(&mut self, what: &str) -> Result<T, MatchError> {
        let w = self.next();
        w.and_then(|w| w.parse().ok())
            .ok_or_else(|| self.error(w, what))
    }

    fn prefix(&mut self, host_only: bool) -> Result<IpPrefix, MatchError> {
        let w = self.next();
        let what = if host_only {
            "an IPv4 or IPv6 address"
        } else {
            "an IPv4 or IPv6 address or prefix (a.b.c.d/len, x:y::/len, no host bits)"
        };
        let p = match w {
            Some(s) if host_only => s.parse::<IpAddr>().ok().map(|a| match a {
                IpAddr::V4(a) => IpPrefix::V4(Ipv4Prefix::host(a)),
                IpAddr::V6(a) => IpPrefix::V6(Ipv6Prefix::host(a)),
            }),
            Some(s) => s.parse::<IpPrefix>().ok(),
            None => None,
        };
        p.ok_or_else(|| self.error(w, what))
    }

    fn term(&mut self) -> Result<(bool, Term), MatchError> {
        // Negations are counted in a loop (a client's `not not not ...` must not grow the
        // stack: the expression comes over the control socket).
        let mut neg = false;
        while matches!(self.peek(), Some("not" | "!")) {
            self.next();
            neg = !neg;
        }
        let (inner, t) = self.term_plain()?;
        Ok((neg ^ inner, t))
    }

    fn term_plain(&mut self) -> Result<(bool, Term), MatchError> {
        let w = self.next();
        let t = match w {
            Some("proto") => {
                let p = self.next();
                let n = p.and_then(|p| {
                    PROTOS
                        .iter()
                        .find(|&&(s, _)| s == p)
                        .map(|&(_, n)| n)
                        .or_else(|| p.parse().ok())
                });
                Term::Proto(n.ok_or_else(|| {
                    self.error(
                        p,
                        "a protocol (udp, tcp, icmp, icmp6, sctp, udplite or 0-255)",
                    )
                })?)
            }
            Some(s) if PROTOS.iter().any(|&(n, _)| n == s) => {
                Term::Proto(PROTOS.iter().find(|&&(n, _)| n == s).map_or(0, |&(_, n)| n))
            }
            Some(dir @ ("src" | "dst")) => {
                let src = dir == "src";
                match self.peek() {
                    Some("port") => {
                        self.next();
                        let p = self.number("a port number (0-65535)")?;
                        if src {
                            Term::SrcPort(p)
                        } else {
                            Term::DstPort(p)
                        }
                    }
                    Some(k @ ("host" | "net")) => {
                        self.next();
                        let n = self.prefix(k == "host")?;
                        if src { Term::Src(n) } else { Term::Dst(n) }
                    }
                    _ => {
                        let n = self.prefix(false)?;
                        if src { Term::Src(n) } else { Term::Dst(n) }
                    }
                }
            }
            Some("host") => Term::Either(self.prefix(true)?),
            Some("net") => Term::Either(self.prefix(false)?),
            Some("port") => Term::Port(self.number("a port number (0-65535)")?),
            other => return Err(self.error(other, A_TERM)),
        };
        Ok((false, t))
    }
}

impl FromStr for Match {
    type Err = MatchError;

    fn from_str(s: &str) -> Result<Self, MatchError> {
        let mut w = Words {
            words: s.split_whitespace().collect(),
            at: 0,
        };
        let mut terms = vec![w.term()?];
        while let Some(j) = w.next() {
            if j != "and" && j != "&&" {
                return Err(w.error(Some(j), "'and' between terms"));
            }
            terms.push(w.term()?);
        }
        Ok(Self { terms })
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (neg, t)) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            if *neg {
                f.write_str("not ")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

impl Match {
    /// Whether frame `frame` (from its Ethernet header) satisfies every term.
    pub fn matches(&self, frame: &[u8]) -> bool {
        let k = Keys::of(frame);
        self.terms.iter().all(|&(neg, t)| t.holds(&k) != neg)
    }

    /// The engine's matcher for this expression (see `TraceSpec::matcher`).
    pub fn matcher(self) -> Matcher {
        Box::new(move |f: &[u8]| self.matches(f))
    }
}

/// Shows a [`TraceDump`] of one worker: per packet, a header line and one line per
/// stage decision; also the text of each packet's path alone (a pcapng comment).
///
/// ```text
/// Packet 1 worker 0 port eth0 at 2024-05-01T00:00:01.000000000Z len 98
///   eth-input: 02:00:00:00:00:02 -> 02:00:00:00:00:01 ipv4 192.0.2.2 -> 192.0.2.1 icmp ttl 64 len 84 -> ip4-input (ip4)
///   ip4-input: 192.0.2.2 -> 192.0.2.1 icmp ttl 64 len 84 -> ip4-route (ok)
///   ...
///   neighbour: adj 1 next-hop 192.0.2.2 out-if 0 02:00:00:00:00:01 -> 02:00:00:00:00:02 ipv4 ... -> tx-eth0
///   tx-eth0: ... taken (queued, delivered or sent)
/// ```
///
/// A stage's line shows what the stage reads, as its declaration says ([`Decode`]: the
/// link header for `gro`, `cls-ingress`, `eth-input`; ARP for `arp-input`; the IP header
/// for the IP stages and the hooks, with ports and TCP flags for `udp-input` and
/// `tcp-input`, the ICMP type for `icmp-input`, `icmp6-input`, `nd-input`; the adjacency,
/// next hop, output interface and pushed link header for `neighbour`, `ip6-neighbour`,
/// `ip4-fragment`, `gso` and `tx*`; the IP header and the stage's own words for a stage
/// that declares [`Decode::Upper`]; by what the packet holds for the others), as the
/// stage left the packet (a packet answered in place shows the answer),
/// then its decision: `-> node (arc)`, `drop reason (description)`, or `taken` (then as
/// the packet entered the stage).
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// What was collected.
    pub dump: &'a TraceDump,
    /// The worker's number.
    pub worker: usize,
    /// Port names, by port index.
    pub ports: &'a [String],
    /// Added to the worker's clock for UTC (`Host::clock_to_utc_ns`).
    pub clock_to_utc_ns: u64,
    /// The route table the adjacencies index, to name gateways (`Host::routes`).
    pub routes: Option<&'a Routes>,
}

impl Report<'_> {
    /// Every packet, in order of first appearance, then a line for lost records.
    pub fn text(&self) -> String {
        let by_id = self.by_id();
        let mut s = String::new();
        for id in self.dump.ids() {
            s.push_str(&self.header(id));
            s.push('\n');
            for l in self.lines(by_id.get(&id).map_or(&[][..], Vec::as_slice)) {
                let _ = writeln!(s, "  {l}");
            }
        }
        if self.dump.lost > 0 {
            let _ = writeln!(
                s,
                "{} records did not fit (the record limit was reached)",
                self.dump.lost
            );
        }
        s
    }

    /// The path of each marked packet, in marking order (the pcapng comments).
    pub fn paths(&self) -> Vec<(u32, String)> {
        let by_id = self.by_id();
        self.dump
            .packets
            .iter()
            .map(|p| {
                let recs = by_id.get(&p.id).map_or(&[][..], Vec::as_slice);
                (p.id, self.lines(recs).join("\n"))
            })
            .collect()
    }

    /// The records of each packet, in order.
    fn by_id(&self) -> HashMap<u32, Vec<&TraceRecord>> {
        let mut m: HashMap<u32, Vec<&TraceRecord>> = HashMap::new();
        for r in &self.dump.records {
            m.entry(r.id).or_default().push(r);
        }
        m
    }

    /// The header line of packet `id`: its number, worker, port, time (UTC) and length.
    pub fn header(&self, id: u32) -> String {
        match self.dump.packets.iter().find(|p| p.id == id) {
            Some(p) => format!(
                "Packet {id} worker {} port {} at {} len {}",
                self.worker,
                self.port_name(p.port),
                utc(self.utc_ns(p.ts_ns)),
                p.orig_len
            ),
            None => format!("Packet {id} worker {} (not marked on receipt)", self.worker),
        }
    }

    /// The path of packet `id`, one stage decision a line (what a pcapng comment holds).
    pub fn path(&self, id: u32) -> String {
        let recs: Vec<&TraceRecord> = self.dump.records_of(id).collect();
        self.lines(&recs).join("\n")
    }

    /// A time of the worker's clock in nanoseconds since the Unix epoch.
    pub fn utc_ns(&self, ts_ns: u64) -> u64 {
        ts_ns.saturating_add(self.clock_to_utc_ns)
    }

    fn port_name(&self, port: u16) -> String {
        self.ports
            .get(usize::from(port))
            .cloned()
            .unwrap_or_else(|| format!("#{port}"))
    }

    /// One line per decision of `recs` (one packet's records, in order).
    fn lines(&self, recs: &[&TraceRecord]) -> Vec<String> {
        let mut out = Vec::with_capacity(recs.len());
        let mut k = 0;
        while let Some(&r) = recs.get(k) {
            k += 1;
            let node = self.dump.nodes.get(usize::from(r.node));
            let name = node.map_or("?", |n| n.name);
            let mut l = format!("{name}: {}", view_text(name, &r.view, self.routes));
            match r.event {
                TraceEvent::Next(a) => match node.and_then(|n| n.arcs.get(usize::from(a))) {
                    Some(&(arc, ArcTarget::Node(to))) if arc == to => {
                        let _ = write!(l, " -> {to}");
                    }
                    Some(&(arc, ArcTarget::Node(to))) => {
                        let _ = write!(l, " -> {to} ({arc})");
                    }
                    Some(&(arc, ArcTarget::Drop(reason))) => {
                        let _ = write!(
                            l,
                            " -> {arc}: drop {} ({})",
                            reason.name(),
                            reason.description()
                        );
                        // The drop this arc caused is the next record: said already.
                        if recs.get(k).is_some_and(|n| {
                            n.node == r.node && n.event == TraceEvent::Drop(reason)
                        }) {
                            k += 1;
                        }
                    }
                    None => {
                        let _ = write!(l, " -> arc {a}");
                    }
                },
                TraceEvent::Drop(reason) => {
                    let _ = write!(l, " drop {} ({})", reason.name(), reason.description());
                }
                TraceEvent::Taken => l.push_str(" taken (queued, delivered or sent)"),
            }
            out.push(l);
        }
        out
    }
}

/// What the trace shows of a packet at a stage: what the stage reads. Each stage
/// declares its own ([`crate::declare::Decl::decode`]).
#[derive(Debug, Clone, Copy)]
pub enum Decode {
    /// By what the packet holds: its IP header, ARP, else the link header.
    Auto,
    /// Link header (MACs, tags, ethertype) and the IP addresses.
    Link,
    /// ARP.
    Arp,
    /// IP header.
    Ip,
    /// IP with ports (and TCP flags).
    Ports,
    /// IP and the ICMP type.
    Icmp,
    /// Adjacency, output interface, the link header once pushed, IP.
    Out,
    /// The IP header, then what the stage's own function says of its upper-layer
    /// header: the function gets the bytes from where the dissector located that header
    /// to the end of what the record kept (at most [`netbatch_engine::trace::HEAD`] bytes
    /// from the frame's start, so possibly none), and is not called for a packet whose
    /// upper layer is not located or not in it (a later fragment). A protocol the stack
    /// does not know brings its own words this way.
    Upper(fn(&[u8]) -> String),
}

impl PartialEq for Decode {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Self::Upper(a), Self::Upper(b)) => core::ptr::fn_addr_eq(*a, *b),
            _ => core::mem::discriminant(self) == core::mem::discriminant(o),
        }
    }
}

impl Eq for Decode {}

/// A recorded view, read through the dissector: the record's offsets made relative to
/// the bytes kept.
struct Glimpse<'a> {
    v: &'a View,
    r: Dissected,
    d: &'a [u8],
}

impl<'a> Glimpse<'a> {
    fn new(v: &'a View) -> Self {
        let mut m = Meta::new(v.head_at);
        (m.l3, m.l4, m.l3_type, m.l4_type, m.l2_len, m.flags) =
            (v.l3, v.l4, v.l3_type, v.l4_type, v.l2_len, v.flags);
        Self {
            v,
            r: Dissected::load(&m),
            d: v.head(),
        }
    }

    /// The fixed IPv6 header, when the packet is IPv6 and it was kept.
    fn ip6(&self) -> Option<Ipv6Packet<&'a [u8; 40]>> {
        if self.r.l3_type != L3::Ipv6 {
            return None;
        }
        self.d
            .get(usize::from(self.r.l3)..)?
            .first_chunk::<40>()
            .map(Ipv6Packet::new_unchecked)
    }

    /// The fixed IPv4 header, when the packet is IPv4 and it was kept.
    fn ip(&self) -> Option<Ipv4Packet<&'a [u8; 20]>> {
        if self.r.l3_type != L3::Ipv4 {
            return None;
        }
        self.d
            .get(usize::from(self.r.l3)..)?
            .first_chunk::<20>()
            .map(Ipv4Packet::new_unchecked)
    }

    /// The kept bytes from the upper-layer header on, when the dissector located one
    /// and the packet is not a later fragment (which holds none).
    fn upper(&self) -> Option<&'a [u8]> {
        let later = match self.r.l3_type {
            L3::Ipv4 => self.ip()?.frag_offset() != 0,
            L3::Ipv6 => self.r.flags & flag::FRAG6_LATER != 0,
            _ => return None,
        };
        if self.r.l4 == 0 || later {
            return None;
        }
        self.d.get(usize::from(self.r.l4)..)
    }

    /// The link header: where the packet starts while it has one in front of its L3
    /// header, else where the one it arrived with was (pulled, still in front).
    fn link(&self) -> Option<&'a [u8]> {
        let v = self.v;
        let at = if v.data < v.l3 || v.l3_type == 0 {
            v.data
        } else {
            v.l3.checked_sub(u16::from(v.l2_len))?
        };
        let b = self.v.from(at);
        (b.len() >= ETH_LEN).then_some(b)
    }
}

fn view_text(node: &str, v: &View, routes: Option<&Routes>) -> String {
    let g = Glimpse::new(v);
    let how = match crate::declare::decode_of(node) {
        Decode::Auto => match g.r.l3_type {
            L3::Ipv4 | L3::Ipv6 => Decode::Ip,
            L3::Arp => Decode::Arp,
            _ => Decode::Link,
        },
        d => d,
    };
    let mut s = String::new();
    match how {
        Decode::Auto | Decode::Link => {
            link_text(&mut s, &g);
            if g.ip().is_some() || g.ip6().is_some() {
                s.push(' ');
                ip_text(&mut s, &g, false);
            }
        }
        Decode::Arp => arp_text(&mut s, &g),
        Decode::Ip => ip_text(&mut s, &g, false),
        Decode::Ports => ip_text(&mut s, &g, true),
        Decode::Icmp => {
            ip_text(&mut s, &g, false);
            icmp_text(&mut s, &g);
        }
        Decode::Upper(words) => {
            ip_text(&mut s, &g, false);
            if let Some(b) = g.upper() {
                let w = words(b);
                if !w.is_empty() {
                    s.push(' ');
                    s.push_str(&w);
                }
            }
        }
        Decode::Out => {
            let _ = write!(s, "adj {}", v.adj & !(ADJ_ON_LINK | ADJ_TABLE));
            let table = (v.adj & ADJ_TABLE) >> crate::route::ADJ_TABLE_SHIFT;
            if table != 0 {
                let _ = write!(s, " of numbered table {table}");
            }
            let next_hop = if v.adj & ADJ_ON_LINK != 0 {
                g.ip()
                    .map(|ip| IpAddr::V4(ip.dst()))
                    .or_else(|| g.ip6().map(|ip| IpAddr::V6(ip.dst())))
            } else if g.r.l3_type == L3::Ipv6 || table != 0 {
                // The IPv6 routes and the numbered tables are not in the report: the
                // adjacency says it.
                None
            } else {
                routes
                    .and_then(|r| r.hop(v.adj))
                    .filter(|h| h.gateway != 0)
                    .map(|h| IpAddr::V4(Ipv4Addr::from(h.gateway)))
            };
            if let Some(n) = next_hop {
                let _ = write!(s, " next-hop {n}");
            }
            if v.out_if != u16::MAX {
                let _ = write!(s, " out-if {}", v.out_if);
            }
            if v.data < v.l3 {
                s.push(' ');
                link_text(&mut s, &g);
            }
            s.push(' ');
            ip_text(&mut s, &g, false);
        }
    }
    if v.mark != 0 {
        let _ = write!(s, " mark {:#x}", v.mark);
    }
    if let Some(ask) = crate::ask::describe(v.ask) {
        let _ = write!(s, " asks {ask}");
    }
    s
}

/// `src -> dst`, the tags and what follows them.
fn link_text(s: &mut String, g: &Glimpse<'_>) {
    let Some(b) = g.link() else {
        s.push_str("(link header not kept)");
        return;
    };
    let e = EthernetFrame::new_unchecked(b);
    let _ = write!(s, "{} -> {}", e.src(), e.dst());
    let r = dissect::parse(b);
    match dissect::vids(r.flags, b) {
        (Some(o), Some(i)) => {
            let _ = write!(s, " vlan {o}.{i}");
        }
        (Some(o), None) => {
            let _ = write!(s, " vlan {o}");
        }
        _ => {}
    }
    let kind = match r.l3_type {
        L3::Ipv4 => "ipv4".to_string(),
        L3::Ipv6 => "ipv6".to_string(),
        L3::Arp => "arp".to_string(),
        L3::Other => format!("{:#06x}", get_u16(b, usize::from(r.l2_len) - 2)),
        L3::VlanTruncated => "vlan tag cut short".to_string(),
        L3::VlanTooDeep => "more than two vlan tags".to_string(),
        L3::L2Truncated | L3::Unparsed => "truncated".to_string(),
    };
    let _ = write!(s, " {kind}");
}

/// `src -> dst proto ttl N len N` (ports after the addresses with `ports`, TCP flags);
/// for IPv6 `hlim N`, and the upper layer's protocol.
fn ip_text(s: &mut String, g: &Glimpse<'_>, ports: bool) {
    if let Some(ip6) = g.ip6() {
        ip6_text(s, g, &ip6, ports);
        return;
    }
    let Some(ip) = g.ip() else {
        s.push_str(match g.r.l3_type {
            L3::Ipv4 => "(ipv4 header not kept)",
            L3::Ipv6 => "(ipv6 header not kept)",
            _ => "(not ip)",
        });
        return;
    };
    let pp = if ports {
        dissect::ports(&g.r, g.d)
    } else {
        None
    };
    match pp {
        Some((sp, dp)) => {
            let _ = write!(s, "{}:{sp} -> {}:{dp}", ip.src(), ip.dst());
        }
        None => {
            let _ = write!(s, "{} -> {}", ip.src(), ip.dst());
        }
    }
    let p = ip.protocol().0;
    match proto_name(p) {
        Some(n) => s.push_str(&format!(" {n}")),
        None => s.push_str(&format!(" proto {p}")),
    }
    if ports
        && L4::of(p) == L4::Tcp
        && let Some(f) = dissect::tcp_flags(&g.r, g.d)
    {
        let _ = write!(s, " [{}]", tcp_flags_text(f));
    }
    let _ = write!(s, " ttl {} len {}", ip.ttl(), ip.total_len());
    if ip.is_fragment() {
        let _ = write!(
            s,
            " frag {}{}",
            ip.frag_offset(),
            if ip.more_frags() { "+" } else { "" }
        );
    }
}

/// [`ip_text`] for an IPv6 packet.
fn ip6_text(s: &mut String, g: &Glimpse<'_>, ip: &Ipv6Packet<&[u8; 40]>, ports: bool) {
    let pp = if ports {
        dissect::ports(&g.r, g.d)
    } else {
        None
    };
    match pp {
        Some((sp, dp)) => {
            let _ = write!(s, "[{}]:{sp} -> [{}]:{dp}", ip.src(), ip.dst());
        }
        None => {
            let _ = write!(s, "{} -> {}", ip.src(), ip.dst());
        }
    }
    let p = g.r.l4_type;
    match (g.r.l4 != 0, proto_name(p)) {
        (false, _) => s.push_str(&format!(" next-header {}", ip.next_header().0)),
        (true, Some(n)) => s.push_str(&format!(" {n}")),
        (true, None) => s.push_str(&format!(" proto {p}")),
    }
    if ports
        && L4::of(p) == L4::Tcp
        && let Some(f) = dissect::tcp_flags(&g.r, g.d)
    {
        let _ = write!(s, " [{}]", tcp_flags_text(f));
    }
    let _ = write!(
        s,
        " hlim {} len {}",
        ip.hop_limit(),
        40 + usize::from(ip.payload_len())
    );
    if g.r.flags & flag::FRAG6 != 0 {
        s.push_str(" frag");
    }
}

/// tcpdump's letters for the control bits.
fn tcp_flags_text(f: TcpFlags) -> String {
    const LETTERS: &[(TcpFlags, char)] = &[
        (TcpFlags::SYN, 'S'),
        (TcpFlags::FIN, 'F'),
        (TcpFlags::RST, 'R'),
        (TcpFlags::PSH, 'P'),
        (TcpFlags::URG, 'U'),
        (TcpFlags::ECE, 'E'),
        (TcpFlags::CWR, 'W'),
        (TcpFlags::ACK, '.'),
    ];
    let s: String = LETTERS
        .iter()
        .filter(|(b, _)| f.contains(*b))
        .map(|&(_, c)| c)
        .collect();
    if s.is_empty() { "none".into() } else { s }
}

/// ` echo-request id N seq N`, ` unreachable code N`… for ICMPv6 (the first bytes of the
/// upper layer, as the dissector located it).
fn icmp6_text(s: &mut String, g: &Glimpse<'_>) {
    let Some((Icmpv6Type(t), code)) = dissect::icmp6_type(&g.r, g.d) else {
        return;
    };
    let Some(h) =
        g.d.get(usize::from(g.r.l4)..)
            .and_then(<[u8]>::first_chunk::<8>)
    else {
        return;
    };
    const NAMES: &[(u8, &str)] = &[
        (1, "unreachable"),
        (2, "packet-too-big"),
        (3, "time-exceeded"),
        (4, "parameter-problem"),
        (128, "echo-request"),
        (129, "echo-reply"),
        (133, "router-solicitation"),
        (134, "router-advertisement"),
        (135, "neighbor-solicitation"),
        (136, "neighbor-advertisement"),
        (137, "redirect"),
    ];
    match NAMES.iter().find(|&&(n, _)| n == t) {
        Some((_, n)) => {
            let _ = write!(s, " {n}");
        }
        None => {
            let _ = write!(s, " type {t}");
        }
    }
    if code != 0 || t < 128 {
        let _ = write!(s, " code {code}");
    }
    if matches!(t, 128 | 129) {
        let _ = write!(s, " id {} seq {}", get_u16(h, 4), get_u16(h, 6));
    }
    if matches!(t, 135 | 136)
        && let Some(a) =
            g.d.get(usize::from(g.r.l4) + 8..)
                .and_then(<[u8]>::first_chunk::<16>)
    {
        let _ = write!(s, " target {}", core::net::Ipv6Addr::from(*a));
    }
}

/// ` echo-request id N seq N`, ` unreachable code N`…
fn icmp_text(s: &mut String, g: &Glimpse<'_>) {
    if g.r.l3_type == L3::Ipv6 {
        icmp6_text(s, g);
        return;
    }
    let Some((t, code)) = dissect::icmp_type(&g.r, g.d) else {
        return;
    };
    const NAMES: &[(u8, &str)] = &[
        (0, "echo-reply"),
        (3, "unreachable"),
        (4, "source-quench"),
        (5, "redirect"),
        (8, "echo-request"),
        (11, "time-exceeded"),
        (12, "parameter-problem"),
    ];
    match NAMES.iter().find(|&&(n, _)| n == t.0) {
        Some((_, n)) => {
            let _ = write!(s, " {n}");
        }
        None => {
            let _ = write!(s, " type {}", t.0);
        }
    }
    if code != 0 || t.is_error() {
        let _ = write!(s, " code {code}");
    }
    if matches!(t.0, 0 | 8)
        && let Some(h) =
            g.d.get(usize::from(g.r.l4)..)
                .and_then(<[u8]>::first_chunk::<8>)
    {
        let m = Icmpv4Packet::new_unchecked(&h[..]);
        let _ = write!(s, " id {} seq {}", m.ident(), m.seq_no());
    }
}

/// `request who-has T tell S` / `reply S is-at M`.
fn arp_text(s: &mut String, g: &Glimpse<'_>) {
    let b =
        g.d.get(usize::from(g.r.l3)..)
            .and_then(<[u8]>::first_chunk::<{ netbatch_wire::arp::PACKET_LEN }>);
    let Some(b) = b.filter(|_| g.r.l3_type == L3::Arp) else {
        s.push_str("(arp packet not kept)");
        return;
    };
    let a = ArpPacket::new_unchecked(&b[..]);
    let _ = match a.oper() {
        1 => write!(s, "arp request who-has {} tell {}", a.tpa(), a.spa()),
        2 => write!(s, "arp reply {} is-at {}", a.spa(), a.sha()),
        op => write!(s, "arp op {op} {} -> {}", a.spa(), a.tpa()),
    };
}

/// Nanoseconds since the Unix epoch as an RFC 3339 UTC time.
pub fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (y, m, d) = civil_date((secs / 86_400) as i64);
    let day = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        day / 3600,
        day / 60 % 60,
        day % 60,
        ns % 1_000_000_000
    )
}

/// The Gregorian date of a day counted from 1970-01-01 (counting in 400-year eras of
/// 146,097 days from 0000-03-01, so that a leap day ends its year).
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use etherparse::PacketBuilder;
    use netbatch_engine::{Accounting, Cx, Dispatch, Graph, Pool, PoolConfig, TraceSpec};
    use netbatch_wire::ethernet::MacAddr;

    use super::*;
    use crate::host::{Host, HostParams};
    use crate::iface::{Iface, Port, Tags};
    use crate::route::{Route, RouteKind};

    const US: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip(s: &str) -> [u8; 4] {
        s.parse::<Ipv4Addr>().unwrap().octets()
    }

    fn build(b: PacketBuilderStep, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut v, payload).unwrap();
        v
    }

    type PacketBuilderStep = etherparse::PacketBuilderStep<etherparse::UdpHeader>;

    fn udp(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
        build(
            PacketBuilder::ethernet2(PEER, US)
                .ipv4(ip(src), ip(dst), 64)
                .udp(sport, dport),
            b"hello",
        )
    }

    fn tcp_syn(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(PEER, US)
            .ipv4(ip(src), ip(dst), 64)
            .tcp(sport, dport, 1000, 65535)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        v
    }

    fn echo(src: &str, dst: &str, id: u16, seq: u16) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(PEER, US)
            .ipv4(ip(src), ip(dst), 64)
            .icmpv4_echo_request(id, seq);
        let mut v = Vec::new();
        b.write(&mut v, &[0xab; 56]).unwrap();
        v
    }

    fn udp_vlan(vid: u16, src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
        build(
            PacketBuilder::ethernet2(PEER, US)
                .single_vlan(etherparse::VlanId::try_new(vid).unwrap())
                .ipv4(ip(src), ip(dst), 64)
                .udp(sport, dport),
            b"hi",
        )
    }

    /// An ARP request from 192.0.2.2 for 192.0.2.1, by hand (RFC 826 layout).
    fn arp_request() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend(PEER);
        f.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend(PEER);
        f.extend(ip("192.0.2.2"));
        f.extend([0; 6]);
        f.extend(ip("192.0.2.1"));
        f
    }

    #[test]
    fn expressions_parse_to_their_terms() {
        for (text, canonical) in [
            ("udp", "proto udp"),
            ("proto 17", "proto udp"),
            ("proto 47", "proto 47"),
            ("proto tcp and dst port 80", "proto tcp and dst port 80"),
            (
                "src 192.0.2.2 && dst net 198.51.100.0/24",
                "src 192.0.2.2 and dst 198.51.100.0/24",
            ),
            ("host 10.1.2.3", "host 10.1.2.3"),
            ("net 10.1.2.3/32", "host 10.1.2.3"),
            ("src host 10.1.2.3", "src 10.1.2.3"),
            (
                "net 10.0.0.0/8 and not port 22",
                "net 10.0.0.0/8 and not port 22",
            ),
            (
                "! icmp and src port 5000",
                "not proto icmp and src port 5000",
            ),
            ("not not udp", "proto udp"),
        ] {
            let m: Match = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(m.to_string(), canonical, "{text}");
        }
    }

    /// A very long run of negations (from a client) parses without recursion: its
    /// parity decides.
    #[test]
    fn long_negations_do_not_grow_the_stack() {
        let even = format!("{}icmp", "not ".repeat(200_000));
        assert_eq!(
            even.parse::<Match>().map(|m| m.to_string()),
            Ok("proto icmp".into())
        );
        let odd = format!("{}icmp", "! ".repeat(100_001));
        assert_eq!(
            odd.parse::<Match>().map(|m| m.to_string()),
            Ok("not proto icmp".into())
        );
    }

    #[test]
    fn parse_errors_name_the_offending_word() {
        for (text, word, msg) in [
            ("bogus", "bogus", "at 'bogus': expected a term"),
            ("proto xyz", "xyz", "at 'xyz': expected a protocol"),
            ("proto 256", "256", "at '256': expected a protocol"),
            ("udp or tcp", "or", "at 'or': expected 'and' between terms"),
            ("port 70000", "70000", "at '70000': expected a port number"),
            (
                "src 10.0.0.1/8",
                "10.0.0.1/8",
                "at '10.0.0.1/8': expected an IPv4 or IPv6 address or prefix",
            ),
            (
                "host 10.0.0.0/8",
                "10.0.0.0/8",
                "at '10.0.0.0/8': expected an IPv4 or IPv6 address",
            ),
            ("udp and and", "and", "at 'and': expected a term"),
            (
                "dst port",
                "",
                "expression ends after 'port': expected a port number",
            ),
            (
                "udp and",
                "",
                "expression ends after 'and': expected a term",
            ),
            ("", "", "empty expression: expected a term"),
        ] {
            let e = text.parse::<Match>().unwrap_err();
            assert_eq!(e.word, word, "{text}");
            assert!(e.to_string().starts_with(msg), "{text}: {e}");
        }
    }

    /// Each expression against frames etherparse built (and two by hand): which match.
    #[test]
    fn expressions_match_hand_made_frames() {
        let mut later_fragment = udp("192.0.2.2", "198.51.100.7", 5000, 53);
        later_fragment[14 + 6..14 + 8].copy_from_slice(&[0x00, 0x10]); // offset 128 bytes
        let frames: Vec<(&str, Vec<u8>)> = vec![
            ("udp", udp("192.0.2.2", "198.51.100.7", 5000, 53)),
            ("tcp", tcp_syn("192.0.2.9", "198.51.100.7", 40000, 80)),
            ("icmp", echo("192.0.2.2", "192.0.2.1", 7, 1)),
            ("vlan", udp_vlan(100, "10.1.2.3", "192.0.2.1", 53, 9)),
            ("arp", arp_request()),
            ("frag", later_fragment),
            (
                "cut",
                udp("192.0.2.2", "198.51.100.7", 5000, 53)[..30].to_vec(),
            ),
        ];
        let cases: &[(&str, &[&str])] = &[
            ("udp", &["udp", "vlan", "frag"]),
            ("proto 6", &["tcp"]),
            ("icmp", &["icmp"]),
            ("src 192.0.2.2", &["udp", "icmp", "frag"]),
            ("dst 198.51.100.0/24", &["udp", "tcp", "frag"]),
            ("host 192.0.2.1", &["icmp", "vlan"]),
            ("net 10.0.0.0/8", &["vlan"]),
            ("port 53", &["udp", "vlan"]),
            ("dst port 53", &["udp"]),
            ("src port 53", &["vlan"]),
            ("tcp and dst port 80", &["tcp"]),
            ("udp and not port 53", &["frag"]),
            ("not udp", &["tcp", "icmp", "arp", "cut"]),
        ];
        for (expr, want) in cases {
            let m: Match = expr.parse().unwrap();
            let got: Vec<&str> = frames
                .iter()
                .filter(|(_, f)| m.matches(f))
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(&got, want, "{expr}");
        }
        // The matcher is the same test, boxed for the engine.
        let m = "icmp".parse::<Match>().unwrap().matcher();
        assert!(m(&frames[2].1) && !m(&frames[0].1));
    }

    #[test]
    fn utc_times_follow_the_gregorian_calendar() {
        // Dates from the system's calendar (Python's datetime.utcfromtimestamp).
        for (secs, want) in [
            (0u64, "1970-01-01T00:00:00"),
            (86_399, "1970-01-01T23:59:59"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_714_521_600, "2024-05-01T00:00:00"),
            (4_107_542_400, "2100-03-01T00:00:00"),
        ] {
            assert_eq!(utc(secs * 1_000_000_000 + 5), format!("{want}.000000005Z"));
        }
    }

    /// A host with eth0 (US, 192.0.2.1/24) and the peer 192.0.2.2 (PEER) known.
    fn host() -> Host {
        let mac = MacAddr(US);
        let port = Port {
            name: "eth0".into(),
            mac,
            mtu: 1500,
            native_if: Some(0),
            vlans: Vec::new(),
            features: Default::default(),
            pair: Default::default(),
        };
        let iface = Iface::new(
            "eth0",
            0,
            Tags::None,
            mac,
            1500,
            vec!["192.0.2.1/24".parse().unwrap()],
        );
        // The routes an address implies: its subnet, connected, and itself, local.
        let mut routes = Routes::new();
        let route = |p: &str, kind| Route {
            prefix: p.parse().unwrap(),
            kind,
            out_if: Some(0),
            gateway: None,
            multipath: None,
        };
        routes
            .load([
                route("192.0.2.0/24", RouteKind::Unicast),
                route("192.0.2.1/32", RouteKind::Local),
            ])
            .unwrap();
        let mut h = Host::new(
            vec![port],
            vec![iface],
            Arc::new(routes),
            HostParams::default(),
        );
        assert!(
            h.neigh
                .add_static(0, "192.0.2.2".parse().unwrap(), MacAddr(PEER))
        );
        h
    }

    /// Runs `frames` (received on port 0, one list, at 1 s) through the real graph,
    /// armed with `spec`, and returns what the trace collected.
    fn trace_through_stack(spec: TraceSpec, frames: &[Vec<u8>], d: Dispatch) -> TraceDump {
        let pool = Pool::new(PoolConfig {
            buffers: 64,
            cache_size: 8,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut cache = pool.cache();
        let mut g: Graph<Host> = crate::build(&Default::default(), &["eth0"], d).unwrap();
        let entry = crate::entries(&g).unwrap().receive;
        let mut h = host();
        g.trace_mut().arm(spec);
        let mut list = Vec::new();
        for f in frames {
            let mut p = cache.alloc().unwrap();
            assert!(pool.get_mut(&mut p).set_data(128, f));
            g.trace_mut().maybe_mark(&pool, &mut p, 0, 1_000_000_000);
            list.push(p);
        }
        let mut acct = Accounting::default();
        let mut cx = Cx {
            pool: &pool,
            cache: &mut cache,
            now_ns: 1_000_000_000,
            acct: &mut acct,
        };
        g.run(&mut h, &mut cx, entry, &mut list);
        h.drain_all(&mut cache);
        g.take_trace()
    }

    /// (node, event) names of packet `id`'s records.
    fn path(d: &TraceDump, id: u32) -> Vec<(&'static str, String)> {
        d.records_of(id)
            .map(|r| {
                let n = &d.nodes[usize::from(r.node)];
                let e = match r.event {
                    TraceEvent::Next(a) => format!("-> {}", n.arcs[usize::from(a)].0),
                    TraceEvent::Drop(x) => format!("drop {}", x.name()),
                    TraceEvent::Taken => "taken".into(),
                };
                (n.name, e)
            })
            .collect()
    }

    /// An echo request to us, traced through the real graph, takes the path of
    /// ARCHITECTURE's IPv4 graph: L2 input, IPv4 input, routing (local), local demux
    /// (ICMP), ICMP input (answered in place), local output, the neighbour stage
    /// (the peer's MAC is known) and its port's transmit node, which takes it. The
    /// UDP datagram before it does not match, so is not traced.
    #[test]
    fn a_traced_echo_request_takes_the_expected_path() {
        for d in [Dispatch::Runs, Dispatch::Buckets] {
            let m: Match = "icmp and host 192.0.2.2".parse().unwrap();
            let frames = [
                udp("192.0.2.2", "192.0.2.1", 5000, 9),
                echo("192.0.2.2", "192.0.2.1", 7, 1),
            ];
            let dump = trace_through_stack(TraceSpec::new(5).matcher(m.matcher()), &frames, d);
            assert_eq!(dump.packets.len(), 1, "{d:?}");
            let p = &dump.packets[0];
            assert_eq!((p.id, p.port, p.orig_len), (1, 0, 98));
            assert_eq!(p.data, frames[1]);
            let want: Vec<(&str, String)> = [
                ("eth-input", "-> ip4"),
                ("ip4-input", "-> ok"),
                ("ip4-route", "-> local"),
                ("ip4-local", "-> icmp"),
                ("icmp-input", "-> reply"),
                ("ip4-local-out", "-> ok"),
                ("neighbour", "-> tx-eth0"),
                ("tx-eth0", "taken"),
            ]
            .iter()
            .map(|&(n, e)| (n, e.to_string()))
            .collect();
            let got = path(&dump, 1);
            assert_eq!(got[..3], want[..3], "{d:?}");
            assert_eq!(got.last(), want.last(), "{d:?}");
            assert_eq!(got, want, "{d:?}");
        }
    }

    /// The report of that echo: the header and each stage's view, decoded from the
    /// recorded bytes, with the values the frame was built with (and those the stages
    /// give the reply).
    #[test]
    fn the_report_shows_each_stage_view() {
        let m: Match = "icmp".parse().unwrap();
        let frames = [echo("192.0.2.2", "192.0.2.1", 7, 1)];
        let dump = trace_through_stack(
            TraceSpec::new(1).matcher(m.matcher()),
            &frames,
            Dispatch::Buckets,
        );
        let ports = ["eth0".to_string()];
        let r = Report {
            dump: &dump,
            worker: 3,
            ports: &ports,
            clock_to_utc_ns: 1_714_521_600_000_000_000,
            routes: None,
        };
        let text = r.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Packet 1 worker 3 port eth0 at 2024-05-01T00:00:01.000000000Z len 98"
        );
        assert_eq!(
            lines[1],
            "  eth-input: 02:00:00:00:00:02 -> 02:00:00:00:00:01 ipv4 \
             192.0.2.2 -> 192.0.2.1 icmp ttl 64 len 84 -> ip4-input (ip4)"
        );
        assert_eq!(
            lines[2],
            "  ip4-input: 192.0.2.2 -> 192.0.2.1 icmp ttl 64 len 84 -> ip4-route (ok)"
        );
        assert_eq!(
            lines[5],
            "  icmp-input: 192.0.2.1 -> 192.0.2.2 icmp ttl 64 len 84 echo-reply id 7 seq 1 \
             -> ip4-local-out (reply)"
        );
        // The reply's adjacency is the connected route's (on link: the next hop is the
        // destination), its link header the one the neighbour stage pushed.
        assert!(
            lines[7].starts_with("  neighbour: adj ")
                && lines[7].ends_with(
                    " next-hop 192.0.2.2 out-if 0 02:00:00:00:00:01 -> 02:00:00:00:00:02 ipv4 \
                     192.0.2.1 -> 192.0.2.2 icmp ttl 64 len 84 -> tx-eth0"
                ),
            "{}",
            lines[7]
        );
        assert!(
            lines[8].starts_with("  tx-eth0: ")
                && lines[8].ends_with(" taken (queued, delivered or sent)")
        );
        assert_eq!(lines.len(), 9, "{text}");
        // The pcapng comment is the path alone.
        let want_path: Vec<&str> = lines[1..].iter().map(|l| &l[2..]).collect();
        assert_eq!(r.path(1), want_path.join("\n"));
        assert_eq!(r.paths(), [(1, want_path.join("\n"))]);
    }

    /// Drops are shown with their reason and its description; an arc that drops is
    /// one line (the arc and the drop it causes); IPv6 packets are shown by their
    /// addresses, upper layer, hop limit and length.
    #[test]
    fn drops_show_reason_and_description() {
        let mut bad_sum = udp("192.0.2.2", "192.0.2.1", 5000, 9);
        bad_sum[14 + 10] ^= 0xff; // the IPv4 header checksum
        // TCP to us: this graph has no handler for it, so `tcp-input`'s `host` arc drops.
        let tcp = {
            let b = PacketBuilder::ethernet2(PEER, US)
                .ipv4(ip("192.0.2.2"), ip("192.0.2.1"), 64)
                .tcp(40000, 22, 1, 1000);
            let mut v = Vec::with_capacity(b.size(0));
            b.write(&mut v, &[]).unwrap();
            v
        };
        let ip6 = build(
            PacketBuilder::ethernet2(PEER, US)
                .ipv6(
                    [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                    [0xff; 16],
                    64,
                )
                .udp(1, 2),
            b"x",
        );
        let dump = trace_through_stack(TraceSpec::new(3), &[bad_sum, tcp, ip6], Dispatch::Runs);
        let ports = ["eth0".to_string()];
        let text = Report {
            dump: &dump,
            worker: 0,
            ports: &ports,
            clock_to_utc_ns: 0,
            routes: None,
        }
        .text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("Packet 1 worker 0 port eth0 at 1970-01-01T00:00:01"));
        assert!(lines[2].starts_with("  ip4-input: 192.0.2.2 -> 192.0.2.1 udp"));
        assert!(
            lines[2].ends_with(" drop ip4_checksum (IPv4 header checksum wrong)"),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("Packet 2 "));
        let tcp_line = lines
            .iter()
            .find(|l| l.starts_with("  tcp-input: "))
            .expect("tcp-input");
        assert!(
            tcp_line.ends_with(&format!(
                " -> host: drop tcp_no_handler ({})",
                crate::tcp::reason::NO_HANDLER.description()
            )),
            "{tcp_line}"
        );
        let p3 = lines
            .iter()
            .position(|l| l.starts_with("Packet 3 "))
            .expect("packet 3");
        assert!(
            lines[p3 + 1].starts_with("  eth-input: 02:00:00:00:00:02 -> 02:00:00:00:00:01 ipv6")
        );
        assert_eq!(
            lines[p3 + 2],
            "  ip6-input: fe80::1 -> ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff udp hlim 64 len 49 \
             -> ip6-route (ok)"
        );
        assert_eq!(
            lines[p3 + 3],
            format!(
                "  ip6-route: fe80::1 -> ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff udp hlim 64 \
                 len 49 drop ip6_multicast_not_joined ({})",
                crate::ip6::route::reason::MULTICAST_NOT_JOINED.description()
            )
        );
        assert_eq!(lines.len(), p3 + 4, "{text}");
    }
}
