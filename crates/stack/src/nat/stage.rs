//! The NAT stages: `nat-prerouting` (after `ct-in`, before the PREROUTING filter hook:
//! Linux's NAT at `NF_IP_PRI_NAT_DST`, -100, before filter's 0) changes destinations;
//! `nat-postrouting` (after the POSTROUTING filter hook, before `ct-confirm`: Linux's
//! `NF_IP_PRI_NAT_SRC`, 100) changes sources. See the module above for what each does to
//! which packet.
//!
//! Per packet: an IPv4 packet whose connection is tracked (new, established or related,
//! attached to its entry) and whose entry has the translation this hook applies in its
//! direction is rewritten; a new connection's first packet (unconfirmed, original
//! direction) first has its translation decided by the hook's NAT chain. Everything
//! else passes untouched: IPv6, untracked and invalid packets, connections without
//! NAT. A super-packet is rewritten once, on its head: GSO gives every segment the
//! head's addresses and ports (and fraglist members have them copied with their
//! checksums updated, `gso`), so every segment carries the translation.

use netbatch_engine::{Cx, Out, PktList, Reason, Stage, Verdict};

use super::rewrite::{self, Layout, Manip};
use super::{Action, CompiledChain, NatStats, Refusal};
use crate::assemble::{GraphOptions, node};
use crate::ct::{self, ConnTrack, Tuple, state_bit, status};
use crate::declare::{Decl, Decode, To};
use crate::dissect::{L3, L4};
use crate::filter::hook::key_of;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why NAT drops a packet.
    pub mod reason {
        NO_PORT = "nat_no_port": "source NAT found no free port in its range (bounded search)",
        NO_ADDRESS = "nat_no_address": "masquerade on an interface without an IPv4 address",
        TRUNCATED = "nat_truncated": "packet too short for the NAT rewrite",
        NOT_HOME = "nat_not_home": "two or more workers: the translated connection's replies would steer to another worker (no port of the search steers home, or a dnat the steering did not foresee)",
    }
}

netbatch_engine::arcs! {
    /// IPv4 packets.
    pub ACCEPT = "accept";
    /// IPv6 packets (untouched).
    pub ACCEPT6 = "accept6";
}

/// Whether NAT is configured.
fn present(o: &GraphOptions) -> bool {
    o.nat.as_ref().is_some_and(|n| !n.is_empty()) && o.conntrack.is_some()
}

fn make_pre(m: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    let cfg = m.opts.nat.clone().unwrap_or_default();
    let seed = m.opts.conntrack.as_ref().map_or(0, |c| c.seed);
    Box::new(NatStage::new(Manip::Dst, &cfg.prerouting, seed).with_udp(cfg.udp))
}

fn make_post(m: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    let cfg = m.opts.nat.clone().unwrap_or_default();
    let seed = m.opts.conntrack.as_ref().map_or(0, |c| c.seed);
    Box::new(NatStage::new(Manip::Src, &cfg.postrouting, seed).with_udp(cfg.udp))
}

const READS: Fields = Fields::of(&[
    Field::L3,
    Field::L4,
    Field::InIf,
    Field::OutIf,
    Field::Mark,
    Field::Gso,
    Field::Ct,
]);

/// `nat-prerouting`: destination NAT, after `ct-in`.
pub const PREROUTING: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::HOOK_PREROUTING, "accept")),
        ("accept6", To::Via(node::HOOK_PREROUTING, "accept6")),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: READS,
    present,
    ..Decl::new(node::NAT_PREROUTING, make_pre)
};

/// `nat-postrouting`: source NAT, after the POSTROUTING hook.
pub const POSTROUTING: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::CT_CONFIRM, "accept")),
        ("accept6", To::Via(node::CT_CONFIRM, "accept6")),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: READS,
    present,
    ..Decl::new(node::NAT_POSTROUTING, make_post)
};

/// A NAT stage: the end it changes and its chain.
#[derive(Debug)]
pub struct NatStage {
    manip: Manip,
    chain: CompiledChain,
    seed: u64,
    /// The translations decided in this call (original tuple, reply tuple, status
    /// bits): their entries are not in the table's chains until confirmed, so the port
    /// search and a second new entry of one connection look here.
    decided: Vec<(Tuple, Tuple, u16)>,
    /// Rule hits by position.
    hits: Vec<u64>,
    /// UDP's mapping and filtering.
    udp: super::mapping::UdpBehaviour,
}

impl NatStage {
    /// The stage changing `manip` with `chain`, hashing with `seed`.
    pub fn new(manip: Manip, chain: &super::NatChain, seed: u64) -> Self {
        Self {
            manip,
            chain: CompiledChain::new(chain),
            seed,
            decided: Vec::with_capacity(netbatch_engine::LIST_MAX),
            hits: vec![0; chain.rules.len()],
            udp: super::mapping::UdpBehaviour::default(),
        }
    }

    /// The stage with UDP's mapping and filtering behaviour `udp`.
    pub fn with_udp(mut self, udp: super::mapping::UdpBehaviour) -> Self {
        self.udp = udp;
        self
    }

    /// The status bit of the translation this hook makes for a new connection.
    fn own_bit(&self) -> u16 {
        match self.manip {
            Manip::Dst => status::DST_NAT,
            Manip::Src => status::SRC_NAT,
        }
    }

    /// Whether this hook rewrites a packet in direction `dir` of a connection with
    /// status `s` (Linux's `nf_nat_packet`: the original direction gets its own
    /// translation, the reply direction the inverse of the other hook's).
    fn applies(&self, s: u16, dir: usize) -> bool {
        let bit = if dir == 0 {
            self.own_bit()
        } else {
            self.own_bit() ^ (status::SRC_NAT | status::DST_NAT)
        };
        s & bit != 0
    }

    /// Decides the translation of new connection `idx` whose first packet has match
    /// key `k`; the entry's reply tuple and status are rewritten.
    fn decide(
        &mut self,
        ct: &mut ConnTrack,
        idx: u32,
        k: &crate::filter::Key,
        masq: Option<u32>,
        home: Option<&super::steer::Home>,
        now: u64,
    ) -> Result<(), Refusal> {
        let Some(e) = ct.table.get(idx) else {
            return Ok(());
        };
        let (tuple, st) = (e.tuple, e.status);
        // A second new entry of a connection decided in this call takes the first's
        // translation (the confirm stage joins it to the first's entry).
        if let Some(&(_, reply, bits)) = self.decided.iter().find(|(o, _, _)| *o == tuple[0]) {
            if let Some(e) = ct.table.get_mut(idx) {
                e.tuple[1] = reply;
                e.status |= bits;
            }
            // Its entry holds the mapping too, until the confirm stage joins it to
            // the first's (and gives the reference back).
            if bits & status::MAPPED != 0
                && let Some(m) = ct.mappings.as_mut()
            {
                let (inside, outside) = super::mapping::ends(&[tuple[0], reply], bits);
                m.hold(inside, outside);
            }
            return Ok(());
        }
        let mut k = *k;
        k.ct_status = st;
        // Endpoint-independent mapping and filtering (one worker: `home` is None) for
        // UDP connections no destination NAT took.
        let mapped = home.is_none()
            && L4::of(tuple[0].proto) == L4::Udp
            && st & status::DST_NAT == 0
            && !tuple[0].v6;
        let Some((i, action)) = self.chain.eval(&k) else {
            if mapped && self.manip == Manip::Dst && self.udp.independent_filtering {
                self.filter_in(ct, idx, &tuple);
            }
            return Ok(());
        };
        if let Some(h) = self.hits.get_mut(i) {
            *h += 1;
        }
        let mapped = mapped && self.udp.independent_mapping;
        let ConnTrack {
            table,
            nat,
            mappings,
            ..
        } = ct;
        let decided = &self.decided;
        let maps = mappings.as_ref().filter(|_| mapped);
        // A reply tuple is taken when a connection has it.
        let mut used =
            |r: &Tuple| decided.iter().any(|(_, d, _)| d == r) || table.lookup(r, now).is_some();
        let source = |addrs: (u32, u32), ports, used: &mut dyn FnMut(&Tuple) -> bool, nat| {
            let Some(m) = maps else {
                return pick(&tuple, addrs, ports, self.seed, used, home, nat);
            };
            // The inside endpoint's mapping on this address, if it has one; else a port
            // no mapping owns (an outside endpoint belongs to one inside endpoint).
            let a = super::source_address(&tuple[0], addrs, self.seed);
            if let Some(p) = m.outside_port(tuple[0].src as u32, tuple[0].sport, a) {
                let mut r = tuple[1];
                r.dst = u128::from(a);
                r.dport = p;
                return reuse(r, used, nat);
            }
            let mut free = |r: &Tuple| m.taken(r.dst as u32, r.dport) || used(r);
            pick(&tuple, addrs, ports, self.seed, &mut free, home, nat)
        };
        let (reply, bit) = match (self.manip, action) {
            (Manip::Dst, Action::Dnat { addr, port }) => {
                nat.dnat += 1;
                (super::dest(&tuple, addr, port), status::DST_NAT)
            }
            (Manip::Src, Action::Snat { addrs, ports }) => {
                (source(addrs, ports, &mut used, nat)?, status::SRC_NAT)
            }
            (Manip::Src, Action::Masquerade { ports }) => {
                let Some(a) = masq else {
                    nat.no_address += 1;
                    return Err(Refusal::NoAddress);
                };
                (source((a, a), ports, &mut used, nat)?, status::SRC_NAT)
            }
            // `accept`, or an action of the other hook (the configuration refuses it).
            _ => return Ok(()),
        };
        let mut bits = bit;
        if mapped && bit == status::SRC_NAT {
            let m = mappings.get_or_insert_with(|| super::mapping::Mappings::new(table.max()));
            let (inside, outside) = super::mapping::ends(&[tuple[0], reply], bit);
            if m.outside_port(inside.0, inside.1, outside.0).is_some() {
                m.stats.reused += 1;
            }
            m.hold(inside, outside);
            bits |= status::MAPPED;
        }
        if let Some(e) = table.get_mut(idx) {
            e.tuple[1] = reply;
            e.status |= bits;
        }
        self.decided.push((tuple[0], reply, bits));
        Ok(())
    }

    /// Endpoint-independent filtering (RFC 4787 REQ-8): a new UDP connection to an
    /// outside endpoint a mapping owns is let in to its inside endpoint, as destination
    /// NAT holding the mapping.
    fn filter_in(&mut self, ct: &mut ConnTrack, idx: u32, tuple: &[Tuple; 2]) {
        let Some(m) = ct.mappings.as_mut() else {
            return;
        };
        let (out, port) = (tuple[0].dst as u32, tuple[0].dport);
        let Some((a, p)) = m.inside_of(out, port) else {
            return;
        };
        let reply = super::dest(tuple, a, Some(p));
        let bits = status::DST_NAT | status::MAPPED;
        m.hold((a, p), (out, port));
        m.stats.filtered_in += 1;
        ct.nat.dnat += 1;
        if let Some(e) = ct.table.get_mut(idx) {
            e.tuple[1] = reply;
            e.status |= bits;
        }
        self.decided.push((tuple[0], reply, bits));
    }
}

/// Source NAT through an existing mapping: reply tuple `r`, unless a connection has it
/// (then refused: the outside endpoint is the mapping's, no other port will do).
fn reuse(
    r: Tuple,
    used: &mut dyn FnMut(&Tuple) -> bool,
    nat: &mut NatStats,
) -> Result<Tuple, Refusal> {
    if used(&r) {
        nat.no_port += 1;
        return Err(Refusal::NoPort);
    }
    nat.snat += 1;
    Ok(r)
}

/// Source NAT's pick, counted.
fn pick(
    t: &[Tuple; 2],
    addrs: (u32, u32),
    ports: Option<crate::filter::PortRange>,
    seed: u64,
    used: &mut dyn FnMut(&Tuple) -> bool,
    home: Option<&super::steer::Home>,
    nat: &mut NatStats,
) -> Result<Tuple, Refusal> {
    match super::pick_source(t, addrs, ports, seed, used, home, nat) {
        Ok(r) => {
            nat.snat += 1;
            Ok(r)
        }
        Err(r) => {
            if r == Refusal::NotHome {
                nat.not_home += 1;
            } else {
                nat.no_port += 1;
            }
            Err(r)
        }
    }
}

/// What a packet's rewrite is: the address and port its changed end gets, and for an
/// ICMP error its quoted packet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// The address.
    pub addr: u32,
    /// The port (ICMP query: identifier).
    pub port: u16,
    /// An ICMP error's quoted packet: its other end's address and port.
    pub inner: Option<(u32, u16)>,
}

/// The rewrite at a hook changing `m` of a packet in direction `dir` of a connection
/// whose tuples are `t` (`related`: an ICMP error about it). The packet leaves looking
/// like `invert(t[dir ^ 1])`; an error's quote like `t[dir ^ 1]`.
#[inline(always)]
pub fn rewrite_for(t: &[Tuple; 2], dir: usize, m: Manip, related: bool) -> Rewrite {
    let Some(other) = t.get(dir ^ 1) else {
        return Rewrite {
            addr: 0,
            port: 0,
            inner: None,
        };
    };
    let icmp = L4::of(other.proto) == L4::Icmp;
    // `invert(other)`'s source or destination, read off `other` without building the
    // inverse: its source is `other`'s destination and the other way round; ports swap,
    // an ICMP identifier stays where it is.
    let (addr, port) = match m {
        Manip::Src => (
            other.dst as u32,
            if icmp { other.sport } else { other.dport },
        ),
        Manip::Dst => (other.src as u32, other.sport),
    };
    let inner = related.then_some(match m {
        // The quote travelled the other way: the hook changing destinations changes
        // its source.
        Manip::Dst => (other.src as u32, other.sport),
        Manip::Src => (
            other.dst as u32,
            if icmp { other.sport } else { other.dport },
        ),
    });
    Rewrite { addr, port, inner }
}

impl Stage<Host> for NatStage {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        const NAMES: [&str; 8] = [
            "rule_0", "rule_1", "rule_2", "rule_3", "rule_4", "rule_5", "rule_6", "rule_7",
        ];
        let mut v: Vec<(&'static str, u64)> = NAMES
            .iter()
            .zip(&self.hits)
            .map(|(&n, &h)| (n, h))
            .collect();
        if self.hits.len() > NAMES.len() {
            v.push((
                "rules_8_and_above",
                self.hits.iter().skip(NAMES.len()).sum(),
            ));
        }
        v
    }

    fn process(&mut self, st: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let now = cx.now_ns;
        self.decided.clear();
        let Host {
            ct,
            ifaces,
            nat_home,
            ..
        } = st;
        let home = nat_home.as_ref();
        let Some(ct) = ct.as_deref_mut() else {
            for p in list.drain(..) {
                let six = cx.pool.get(&p).meta.l3_type == L3::Ipv6 as u8;
                out.push(if six { ACCEPT6 } else { ACCEPT }, p);
            }
            return;
        };
        let pool = cx.pool;
        out.sort(
            list,
            #[inline(always)]
            |p| self.one(ct, ifaces, home, pool, p, now),
        );
    }
}

impl NatStage {
    /// One packet's fate: looked at, its connection's translation decided if it is the
    /// first packet, rewritten if this hook changes it.
    #[inline(always)]
    fn one(
        &mut self,
        ct: &mut ConnTrack,
        ifaces: &[crate::iface::Iface],
        home: Option<&super::steer::Home>,
        pool: &netbatch_engine::Pool,
        p: &mut netbatch_engine::Pkt,
        now: u64,
    ) -> Verdict {
        let buf = p.index();
        let mut v = pool.get_mut(p);
        let f = v.meta.flags;
        if v.meta.l3_type != L3::Ipv4 as u8 {
            return Verdict::To(ACCEPT6);
        }
        let state = ct::state_of(f);
        if state & (state_bit::NEW | state_bit::ESTABLISHED | state_bit::RELATED) == 0 {
            return Verdict::To(ACCEPT);
        }
        let dir = usize::from(f & flag::CT_REPLY != 0);
        let first = f & flag::CT_UNCONFIRMED != 0 && dir == 0 && state == state_bit::NEW;
        // A packet of a connection decided before: its flags say whether this hook
        // changes it (tracking copied the entry's status there), without the entry.
        if !first && !self.applies(ct::stage::nat_status(f), dir) {
            return Verdict::To(ACCEPT);
        }
        let Some(idx) = ct.attached(buf) else {
            return Verdict::To(ACCEPT);
        };
        if first {
            let (k, masq) = {
                let r = netbatch_engine::PktRef {
                    meta: &*v.meta,
                    buf: &*v.buf,
                };
                match self.manip {
                    Manip::Dst => (key_of(&r, r.meta.in_if, u16::MAX), None),
                    Manip::Src => {
                        let o = r.meta.out_if;
                        let a = ifaces
                            .get(usize::from(o))
                            .and_then(|i| i.primary())
                            .map(u32::from);
                        (key_of(&r, u16::MAX, o), a)
                    }
                }
            };
            let mut k = k;
            k.ct_state = state;
            let mut done = self.decide(ct, idx, &k, masq, home, now);
            // The last NAT hook of a new forwarded connection: whatever was decided
            // (a `dnat` at prerouting, this hook's own pick) must bring its replies
            // to this worker (two or more workers: `steer`).
            if let (Ok(()), Manip::Src, Some(h)) = (done, self.manip, home)
                && let Some(e) = ct.table.get(idx)
                && e.status & (status::SRC_NAT | status::DST_NAT) != 0
                && !h.is_home(&e.tuple[1])
            {
                ct.nat.not_home += 1;
                done = Err(Refusal::NotHome);
            }
            if let Err(why) = done {
                return Verdict::Drop(match why {
                    Refusal::NoPort => reason::NO_PORT,
                    Refusal::NoAddress => reason::NO_ADDRESS,
                    Refusal::NotHome => reason::NOT_HOME,
                });
            }
        }
        let Some(e) = ct.table.get(idx) else {
            return Verdict::To(ACCEPT);
        };
        if first {
            // What was decided, for the hooks after this one.
            v.meta.flags |= ct::stage::nat_flags(e.status);
            if !self.applies(e.status, dir) {
                return Verdict::To(ACCEPT);
            }
        }
        let related = state == state_bit::RELATED;
        let rw = rewrite_for(&e.tuple, dir, self.manip, related);
        let wire = v.meta.wire_packets();
        // The protocol is the connection's (no second parse of the headers the
        // tracker read); the offsets are the dissector's.
        let proto = L4::of(e.tuple[0].proto);
        let (lay, l3) = {
            let m = &*v.meta;
            let l3 = usize::from(m.l3.wrapping_sub(m.data));
            let l4 = usize::from(m.l4.wrapping_sub(m.l3));
            let icmp_query = proto == L4::Icmp
                && !related
                && v.data()
                    .get(l3 + l4)
                    .is_some_and(|&t| ct::icmp::class(false, t) == ct::icmp::Class::Query);
            let lay = Layout {
                l4,
                proto,
                icmp_query,
                partial: m.flags & flag::L4_CSUM_PARTIAL != 0,
            };
            (lay, l3)
        };
        let done = match v.data_mut().get_mut(l3..) {
            None => Err(rewrite::Short),
            Some(ip) => match rw.inner {
                Some((ia, ipt)) => {
                    rewrite::icmp_error(ip, lay.l4, self.manip, rw.addr, ia, ipt).map(|()| true)
                }
                None => rewrite::packet(ip, lay, self.manip, rw.addr, rw.port).map(|()| false),
            },
        };
        match done {
            Ok(error) => {
                ct.nat.translated += wire;
                if error {
                    ct.nat.icmp_errors += wire;
                }
                Verdict::To(ACCEPT)
            }
            Err(rewrite::Short) => {
                ct.nat.truncated += wire;
                Verdict::Drop(reason::TRUNCATED)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<core::net::Ipv4Addr>().unwrap())
    }

    /// A source-NATed UDP connection: the original direction leaves with the outside
    /// address and port (postrouting), the reply comes back to the inside host
    /// (prerouting), an ICMP error about the original direction goes back to the inside
    /// host quoting the packet as it sent it.
    #[test]
    fn rewrites_follow_the_tuples() {
        let o = Tuple::v4(
            "192.0.2.10".parse().unwrap(),
            "198.51.100.7".parse().unwrap(),
            17,
            5000,
            53,
        );
        let mut r = o.invert();
        r.dst = u128::from(ip("203.0.113.1"));
        r.dport = 1024;
        let t = [o, r];
        assert_eq!(
            rewrite_for(&t, 0, Manip::Src, false),
            Rewrite {
                addr: ip("203.0.113.1"),
                port: 1024,
                inner: None
            }
        );
        assert_eq!(
            rewrite_for(&t, 1, Manip::Dst, false),
            Rewrite {
                addr: ip("192.0.2.10"),
                port: 5000,
                inner: None
            }
        );
        assert_eq!(
            rewrite_for(&t, 1, Manip::Dst, true),
            Rewrite {
                addr: ip("192.0.2.10"),
                port: 5000,
                inner: Some((ip("192.0.2.10"), 5000))
            }
        );
    }
}
