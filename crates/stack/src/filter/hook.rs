//! `hook-*`: one stage per hook point, evaluating its chain over the list, for IPv4 and
//! IPv6 packets alike (one chain per hook, nftables' `inet`); an accepted packet leaves by
//! its family's arc (`accept`, `accept6`).
//!
//! `ct state` reads the state `ct-in`/`ct-out` left in the packet's flags. A chain that
//! reads a connection's status or mark, or sets its mark, finds the entry through the
//! worker's table of which entry each buffer belongs to (`Host::ct`), and writes a mark
//! a rule set back to the entry (a new connection's entry keeps it when confirmed).

use netbatch_engine::{Cx, Out, PktList, PktRef, Reason, Stage, Verdict as EngineVerdict};

use super::{Chain, Compiled, HookPoint, Key, Key6, Verdict};
use crate::assemble::{GraphOptions, node};
use crate::declare::{Decl, Decode, Make, To};
use crate::dissect::{L3, MatchKey, MatchKey6};
use crate::host::Host;
use crate::meta::{Field, Fields};
use crate::prefix::{Ipv4Prefix, Ipv6Prefix};

netbatch_engine::reasons! {
    /// Drops by a hook's rules, one reason per hook.
    pub mod reason {
        PREROUTING = "filter_prerouting": "dropped by a PREROUTING rule",
        INPUT = "filter_input": "dropped by an INPUT rule",
        FORWARD = "filter_forward": "dropped by a FORWARD rule",
        OUTPUT = "filter_output": "dropped by an OUTPUT rule",
        POSTROUTING = "filter_postrouting": "dropped by a POSTROUTING rule",
    }
}

netbatch_engine::arcs! {
    /// Arc for accepted IPv4 packets.
    pub ACCEPT = "accept";
    /// Arc for accepted IPv6 packets.
    pub ACCEPT6 = "accept6";
}

/// Whether hook `H` (its index in [`HookPoint::ALL`]) has a chain that can drop: a hook
/// that accepts everything is left out of the graph, and the arcs to it go where it
/// would send each family.
fn present<const H: usize>(o: &GraphOptions) -> bool {
    HookPoint::ALL.get(H).is_some_and(|&h| o.chain(h).is_some())
}

/// The stage of hook `H` (its index in [`HookPoint::ALL`]) with its chain.
#[expect(
    clippy::indexing_slicing,
    reason = "`H` is one of the literals 0..=4 the declarations below pass, indexes of `ALL`"
)]
fn make<const H: usize>(m: &Make<'_>) -> Box<dyn Stage<Host>> {
    let h = HookPoint::ALL[H];
    Box::new(HookStage::new(
        h,
        m.opts.chain(h).cloned().unwrap_or_default(),
    ))
}

/// What every hook reads: the dissector's key, the interfaces, the mark.
const READS: Fields = Fields::of(&[
    Field::L3,
    Field::L4,
    Field::InIf,
    Field::OutIf,
    Field::Mark,
    Field::Gso,
    Field::Ct,
]);

/// `hook-prerouting`, before routing.
pub const PREROUTING: Decl = Decl {
    arcs: &[
        ("accept", To::Node(node::IP4_ROUTE)),
        ("accept6", To::Node(node::IP6_ROUTE)),
    ],
    reasons: &[&[reason::PREROUTING]],
    decode: Decode::Ip,
    reads: READS,
    present: present::<0>,
    ..Decl::new(HookPoint::Prerouting.node(), make::<0>)
};

/// `hook-input`, before local delivery.
pub const INPUT: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::CT_CONFIRM_LOCAL, "accept")),
        ("accept6", To::Via(node::CT_CONFIRM_LOCAL, "accept6")),
    ],
    reasons: &[&[reason::INPUT]],
    decode: Decode::Ip,
    reads: READS,
    present: present::<1>,
    ..Decl::new(HookPoint::Input.node(), make::<1>)
};

/// `hook-forward`, after the forwarding checks.
pub const FORWARD: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::HOOK_POSTROUTING, "accept")),
        ("accept6", To::Via(node::HOOK_POSTROUTING, "accept6")),
    ],
    reasons: &[&[reason::FORWARD]],
    decode: Decode::Ip,
    reads: READS,
    present: present::<2>,
    ..Decl::new(HookPoint::Forward.node(), make::<2>)
};

/// `hook-output`, for what this host sends, after routing.
pub const OUTPUT: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::HOOK_POSTROUTING, "accept")),
        ("accept6", To::Via(node::HOOK_POSTROUTING, "accept6")),
    ],
    reasons: &[&[reason::OUTPUT]],
    decode: Decode::Ip,
    reads: READS,
    present: present::<3>,
    ..Decl::new(HookPoint::Output.node(), make::<3>)
};

/// `hook-postrouting`, before the neighbour stages, for everything leaving.
pub const POSTROUTING: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::NAT_POSTROUTING, "accept")),
        ("accept6", To::Via(node::NAT_POSTROUTING, "accept6")),
    ],
    reasons: &[&[reason::POSTROUTING]],
    decode: Decode::Ip,
    reads: READS,
    present: present::<4>,
    ..Decl::new(HookPoint::Postrouting.node(), make::<4>)
};

/// A hook stage.
#[derive(Debug)]
pub struct HookStage {
    hook: HookPoint,
    chain: Chain,
    /// The chain for IPv4 packets and for IPv6 packets.
    chain4: Compiled<Ipv4Prefix>,
    chain6: Compiled<Ipv6Prefix>,
    /// The one reason this hook drops for (a slice of the set, as `Stage::reasons`).
    reason: &'static [Reason; 1],
    /// Wire packets matched per rule (policy hits in the last slot).
    pub hits: Vec<u64>,
    /// A rule reads or writes the connection's entry (status, mark).
    entry: bool,
    /// A rule asks about connection tracking (`ct state` is read).
    ct: bool,
    /// A rule offloads flows (FORWARD only: [`crate::ct::offload`]).
    offload: bool,
}

impl HookStage {
    /// The stage for `hook` with `chain`.
    pub fn new(hook: HookPoint, chain: Chain) -> Self {
        let reason: &'static [Reason; 1] = match hook {
            HookPoint::Prerouting => &[reason::PREROUTING],
            HookPoint::Input => &[reason::INPUT],
            HookPoint::Forward => &[reason::FORWARD],
            HookPoint::Output => &[reason::OUTPUT],
            HookPoint::Postrouting => &[reason::POSTROUTING],
        };
        let hits = vec![0; chain.rules.len() + 1];
        Self {
            entry: chain.reads_entry(),
            ct: chain.uses_ct(),
            offload: hook == HookPoint::Forward && chain.offloads(),
            hook,
            chain4: chain.compile(),
            chain6: chain.compile(),
            chain,
            reason,
            hits,
        }
    }
}

/// The match key of packet `v` (an IPv4 packet, which the dissector located), at a
/// hook where its interfaces are `in_if` and `out_if`.
#[inline(always)]
pub fn key_of(v: &PktRef<'_>, in_if: u16, out_if: u16) -> Key {
    key4_for(v, in_if, out_if, true)
}

/// [`key_of`] for a chain that may not look at the headers (`headers` false: its rules
/// match only interfaces, marks and connection state), which then reads none of them.
#[inline(always)]
fn key4_for(v: &PktRef<'_>, in_if: u16, out_if: u16, headers: bool) -> Key {
    let (proto, src, dst, ports) = if headers {
        let k = MatchKey::of(v.meta, v.data());
        (k.proto, u32::from(k.src), u32::from(k.dst), k.ports)
    } else {
        (0, 0, 0, None)
    };
    Key {
        proto,
        src,
        dst,
        ports,
        in_if,
        out_if,
        mark: v.meta.mark,
        ct_state: 0,
        ct_status: 0,
        ct_mark: 0,
    }
}

/// The match key of IPv6 packet `v` (see [`key_of`]).
#[inline]
pub fn key6_of(v: &PktRef<'_>, in_if: u16, out_if: u16) -> Key6 {
    let (proto, src, dst, ports) = match MatchKey6::of(v.meta, v.data()) {
        Some(k) => (k.proto, u128::from(k.src), u128::from(k.dst), k.ports),
        None => (0, 0, 0, None),
    };
    Key6 {
        proto,
        src,
        dst,
        ports,
        in_if,
        out_if,
        mark: v.meta.mark,
        ct_state: crate::ct::state_of(v.meta.flags),
        ct_status: 0,
        ct_mark: 0,
    }
}

/// The entry of the connection the packet in buffer `buf` with `flags` belongs to, if
/// it has one.
fn entry_of(st: &Host, buf: u32, flags: u32) -> Option<u32> {
    let s = crate::ct::state_of(flags);
    if s & (crate::ct::state_bit::INVALID | crate::ct::state_bit::UNTRACKED) != 0 {
        return None;
    }
    st.ct.as_deref()?.attached(buf)
}

impl HookStage {
    /// An IPv6 packet's verdict (out of the IPv4 loop).
    #[inline(never)]
    fn eval6(
        &self,
        st: &mut Host,
        buf: u32,
        v: &PktRef<'_>,
        in_if: u16,
        out_if: u16,
    ) -> (Verdict, Option<usize>) {
        let mut k = key6_of(v, in_if, out_if);
        if self.entry {
            with_entry(st, buf, v.meta.flags, &mut k, |k| self.chain6.eval_mut(k))
        } else {
            self.chain6.eval(&k)
        }
    }

    /// An IPv4 packet's verdict by a chain that reads or writes its connection's entry.
    #[inline(never)]
    fn eval4_entry(
        &self,
        st: &mut Host,
        buf: u32,
        v: &PktRef<'_>,
        in_if: u16,
        out_if: u16,
    ) -> (Verdict, Option<usize>) {
        let mut k = key4_for(v, in_if, out_if, self.chain4.reads_headers());
        k.ct_state = crate::ct::state_of(v.meta.flags);
        with_entry(st, buf, v.meta.flags, &mut k, |k| self.chain4.eval_mut(k))
    }
}

/// A rule with `offload` accepted packet `v` (IPv4 or IPv6) in buffer `buf`: its
/// connection's direction is recorded for the offload ([`crate::ct::offload::record`]).
#[inline(never)]
fn offload(st: &mut Host, buf: u32, v: &PktRef<'_>) {
    let Some(idx) = entry_of(st, buf, v.meta.flags) else {
        return;
    };
    if let Some(ct) = st.ct.as_deref_mut() {
        crate::ct::offload::record(ct, idx, v.meta, v.data());
    }
}

/// Evaluates `eval` over key `k` with its connection's status and mark filled in, and
/// writes back a mark a rule set.
fn with_entry<B>(
    st: &mut Host,
    buf: u32,
    flags: u32,
    k: &mut super::KeyOf<B>,
    eval: impl FnOnce(&mut super::KeyOf<B>) -> (Verdict, Option<usize>),
) -> (Verdict, Option<usize>) {
    let idx = entry_of(st, buf, flags);
    if let Some(e) = idx.and_then(|i| st.ct.as_deref()?.table.get(i)) {
        k.ct_status = e.status;
        k.ct_mark = e.mark;
    }
    let before = k.ct_mark;
    let r = eval(k);
    if k.ct_mark != before
        && let Some(e) = idx.and_then(|i| st.ct.as_deref_mut()?.table.get_mut(i))
    {
        e.mark = k.ct_mark;
    }
    r
}

impl Stage<Host> for HookStage {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        self.reason
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        // Rule hits by position; names must be 'static, so the first 16 rules are named
        // and the rest are summed.
        const NAMES: [&str; 16] = [
            "rule_0", "rule_1", "rule_2", "rule_3", "rule_4", "rule_5", "rule_6", "rule_7",
            "rule_8", "rule_9", "rule_10", "rule_11", "rule_12", "rule_13", "rule_14", "rule_15",
        ];
        // `hits` holds a slot per rule and the policy's after them.
        let (rules, policy) = self
            .hits
            .split_at_checked(self.chain.rules.len())
            .unwrap_or((&self.hits, &[]));
        let mut v: Vec<(&'static str, u64)> = NAMES
            .iter()
            .zip(rules)
            .map(|(&name, &h)| (name, h))
            .collect();
        if rules.len() > NAMES.len() {
            v.push(("rules_16_and_above", rules.iter().skip(NAMES.len()).sum()));
        }
        v.push(("policy", policy.iter().sum()));
        v
    }

    fn process(&mut self, st: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        if self.ct || self.entry {
            self.run::<true>(st, cx, list, out);
        } else {
            self.run::<false>(st, cx, list, out);
        }
    }
}

impl HookStage {
    /// The chain over `list`; `CT`: some rule asks about connection tracking (without,
    /// the loop is the stateless one: no state read, no per-rule `ct` check).
    #[inline(always)]
    fn run<const CT: bool>(
        &mut self,
        st: &mut Host,
        cx: &mut Cx<'_>,
        list: &mut PktList,
        out: &mut Out,
    ) {
        let in_ok = self.hook.has_in_if();
        let out_ok = self.hook.has_out_if();
        let policy_slot = self.chain.rules.len();
        let headers = self.chain4.reads_headers();
        let pool = cx.pool;
        out.sort(
            list,
            #[inline(always)]
            |p| {
                let v = pool.get(p);
                let (in_if, out_if) = (
                    if in_ok { v.meta.in_if } else { u16::MAX },
                    if out_ok { v.meta.out_if } else { u16::MAX },
                );
                let six = v.meta.l3_type == L3::Ipv6 as u8;
                let (verdict, rule) = if six {
                    self.eval6(st, p.index(), &v, in_if, out_if)
                } else if !CT {
                    self.chain4
                        .first::<false>(&key4_for(&v, in_if, out_if, headers))
                } else if self.entry {
                    self.eval4_entry(st, p.index(), &v, in_if, out_if)
                } else {
                    let mut k = key4_for(&v, in_if, out_if, headers);
                    k.ct_state = crate::ct::state_of(v.meta.flags);
                    self.chain4.first::<true>(&k)
                };
                // In wire packets, like the drop counters: a GRO super-packet is a hit for
                // each datagram it stands for.
                if let Some(hits) = self.hits.get_mut(rule.unwrap_or(policy_slot)) {
                    *hits += v.meta.wire_packets();
                }
                if CT
                    && self.offload
                    && verdict == Verdict::Accept
                    && rule.is_some_and(|i| self.chain.rules.get(i).is_some_and(|r| r.offload))
                {
                    offload(st, p.index(), &v);
                }
                match verdict {
                    Verdict::Accept | Verdict::Continue if six => EngineVerdict::To(ACCEPT6),
                    Verdict::Accept | Verdict::Continue => EngineVerdict::To(ACCEPT),
                    Verdict::Drop => EngineVerdict::Drop(self.reason[0]),
                }
            },
        );
    }
}
