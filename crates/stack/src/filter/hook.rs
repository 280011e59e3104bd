//! `hook-*`: one stage per hook point, evaluating its chain over the list, for IPv4 and
//! IPv6 packets alike (one chain per hook, nftables' `inet`); an accepted packet leaves by
//! its family's arc (`accept`, `accept6`).

use netbatch_engine::{Cx, Out, PktList, PktRef, Reason, Stage};

use super::{Chain, HookPoint, Key, Verdict};
use crate::dissect::{L3, MatchKey, MatchKey6};
use crate::host::Host;

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

/// A hook stage.
#[derive(Debug)]
pub struct HookStage {
    hook: HookPoint,
    chain: Chain,
    /// The one reason this hook drops for (a slice of the set, as `Stage::reasons`).
    reason: &'static [Reason],
    /// Wire packets matched per rule (policy hits in the last slot).
    pub hits: Vec<u64>,
}

impl HookStage {
    /// The stage for `hook` with `chain`.
    pub fn new(hook: HookPoint, chain: Chain) -> Self {
        let reason: &'static [Reason] = match hook {
            HookPoint::Prerouting => &[reason::PREROUTING],
            HookPoint::Input => &[reason::INPUT],
            HookPoint::Forward => &[reason::FORWARD],
            HookPoint::Output => &[reason::OUTPUT],
            HookPoint::Postrouting => &[reason::POSTROUTING],
        };
        let hits = vec![0; chain.rules.len() + 1];
        Self {
            hook,
            chain,
            reason,
            hits,
        }
    }
}

/// The match key of packet `v` (an IP packet, which the dissector located), at a hook
/// where its interfaces are `in_if` and `out_if`.
#[inline(always)]
pub fn key_of(v: &PktRef<'_>, in_if: u16, out_if: u16) -> Key {
    if v.meta.l3_type == L3::Ipv6 as u8 {
        return key6_of(v, in_if, out_if);
    }
    let k = MatchKey::of(v.meta, v.data());
    Key {
        proto: k.proto,
        v6: false,
        src: u128::from(u32::from(k.src)),
        dst: u128::from(u32::from(k.dst)),
        ports: k.ports,
        in_if,
        out_if,
        mark: v.meta.mark,
    }
}

/// [`key_of`] for an IPv6 packet.
#[inline(never)]
fn key6_of(v: &PktRef<'_>, in_if: u16, out_if: u16) -> Key {
    let (proto, src, dst, ports) = match MatchKey6::of(v.meta, v.data()) {
        Some(k) => (k.proto, u128::from(k.src), u128::from(k.dst), k.ports),
        None => (0, 0, 0, None),
    };
    Key {
        proto,
        v6: true,
        src,
        dst,
        ports,
        in_if,
        out_if,
        mark: v.meta.mark,
    }
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
        let n = self.chain.rules.len();
        let mut v: Vec<(&'static str, u64)> = self.hits[..n.min(16)]
            .iter()
            .enumerate()
            .map(|(i, &h)| (NAMES[i], h))
            .collect();
        if n > 16 {
            v.push(("rules_16_and_above", self.hits[16..n].iter().sum()));
        }
        v.push(("policy", self.hits[n]));
        v
    }

    fn process(&mut self, _: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let in_ok = self.hook.has_in_if();
        let out_ok = self.hook.has_out_if();
        let policy_slot = self.chain.rules.len();
        for p in list.drain(..) {
            let v = cx.pool.get(&p);
            let k = key_of(
                &v,
                if in_ok { v.meta.in_if } else { u16::MAX },
                if out_ok { v.meta.out_if } else { u16::MAX },
            );
            let (verdict, rule) = self.chain.eval(&k);
            // In wire packets, like the drop counters: a GRO super-packet is a hit for
            // each datagram it stands for.
            self.hits[rule.unwrap_or(policy_slot)] += v.meta.wire_packets();
            match verdict {
                Verdict::Accept if v.meta.l3_type == L3::Ipv6 as u8 => out.push(ACCEPT6, p),
                Verdict::Accept => out.push(ACCEPT, p),
                Verdict::Drop => out.drop(p, self.reason[0]),
            }
        }
    }
}
