//! The control socket's policy-rule commands, as `ip rule` has them: `rule add|del
//! SELECTORS ACTION` (`[-6] [not] [pref N] [from P] [to P] [iif DEV] [fwmark V[/M]]
//! [ipproto P] [sport R] [dport R] [tos T]`, then `lookup T`, `goto N`, `blackhole`,
//! `unreachable`, `prohibit` or `nop`, and `suppress_prefixlength N`), and the policy
//! part of `show rules`.
//!
//! A rule is checked as a `[[rule]]` of the file is (at `rule.KEY`), added where Linux
//! adds it (after every rule of its priority or a lower one; a rule added without a
//! priority gets one below the second rule's) and refused where Linux refuses it
//! (`File exists`). `rule del` removes the first rule that agrees with the fields it
//! names, as `ip rule del` does. The workers' policy is replaced by one with the new
//! rules over the same tables in the same slots ([`PolicyOf::with_rules`]), so a
//! packet waiting for a neighbour keeps its route. Linux's default rules (`local`,
//! `main`, `default`) stay: netbatch builds its rules after them.
//!
//! A filter rule's command starts with its hook's name (`rule add forward …`); every
//! other `rule` command is a policy rule's.

use netbatch_stack::filter::HookPoint;
use netbatch_stack::route::rule::{PolicyOf, RuleOf, RulesOf};
use netbatch_stack::route::{V4, V6};
use serde_json::{Value, json};

use super::vrf::Tabled;
use super::{Control, Reply, State};
use crate::config::{AnyRule, Config, RuleWords};

/// The reply to `rule OP LINE` that did `done` (the rule's `ip rule show` line).
fn reply(op: &str, verb: &str, line: &str, done: Result<String, String>) -> Reply {
    match done {
        Ok(text) => {
            tracing::info!(target: "netbatch::control", "policy rule {verb}: {text}");
            Reply::ok(
                format!("{verb} {text}"),
                json!({ "rule": verb, "policy": text }),
            )
        }
        Err(e) => Reply::err(format!("rule {op} {line}: {e}")),
    }
}

/// Whether the words after `rule add|del` are a policy rule's: they begin with a
/// selector, an action or a family, not with a filter hook's name (what begins with
/// neither is the filter commands' to refuse, naming the hooks).
pub(super) fn is_policy(word: &str) -> bool {
    !HookPoint::ALL.iter().any(|h| h.name() == word) && crate::config::starts_policy_rule(word)
}

impl Control {
    /// `rule add SELECTORS ACTION`.
    pub(super) fn policy_rule_add(&self, words: &[&str]) -> Reply {
        let line = words.join(" ");
        let mut st = self.state();
        let defaults = |v6: bool| {
            if v6 {
                Config::rule_set(&st.cfg.rules6).map_or(0, |s| s.default_pref())
            } else {
                Config::rule_set(&st.cfg.rules).map_or(0, |s| s.default_pref())
            }
        };
        let parsed = st.cfg.parse_policy_rule(words, false, defaults);
        let r = match parsed {
            Ok(RuleWords { rule, .. }) => rule,
            Err(e) => return Reply::err(format!("rule add {line}: {e}")),
        };
        let done = match r {
            AnyRule::V4(r) => self.rules_change::<V4>(&mut st, |v| {
                v.push(r.clone());
                Ok(r)
            }),
            AnyRule::V6(r) => self.rules_change::<V6>(&mut st, |v| {
                v.push(r.clone());
                Ok(r)
            }),
        };
        reply("add", "added", &line, done)
    }

    /// `rule del SELECTORS [ACTION]`: the first rule that agrees on what the words give.
    pub(super) fn policy_rule_del(&self, words: &[&str]) -> Reply {
        let line = words.join(" ");
        let mut st = self.state();
        let w = match st.cfg.parse_policy_rule(words, true, |_| 0) {
            Ok(w) => w,
            Err(e) => return Reply::err(format!("rule del {line}: {e}")),
        };
        let done = match &w.rule {
            AnyRule::V4(want) => self.rules_change::<V4>(&mut st, |v| take(v, &w, want)),
            AnyRule::V6(want) => self.rules_change::<V6>(&mut st, |v| take(v, &w, want)),
        };
        reply("del", "deleted", &line, done)
    }

    /// Changes the configured rules of family `F` by `edit` (which returns the rule it
    /// added or removed), checks the whole set as the kernel would, and gives the
    /// workers a policy with the new rules; on a refusal nothing changes.
    fn rules_change<F: Tabled>(
        &self,
        st: &mut State,
        edit: impl FnOnce(&mut Vec<RuleOf<F>>) -> Result<RuleOf<F>, String>,
    ) -> Result<String, String> {
        let mut rules = F::rules(&mut st.cfg).clone();
        let r = edit(&mut rules)?;
        let set = with_mirrored(&rules, F::mirrored(st))?;
        self.change_policy::<F>(|p| Ok(p.with_rules(set)))?;
        *F::rules(&mut st.cfg) = rules;
        let names = st.cfg.iface_names();
        Ok(r.describe(|i| {
            names
                .get(usize::from(i))
                .cloned()
                .unwrap_or_else(|| i.to_string())
        }))
    }

    /// The Linux mirror's rules of the control namespace (Linux's defaults left out):
    /// the workers walk the configured rules and these. A kernel rule like a configured
    /// one (`File exists` between them) is the configured one.
    pub fn set_mirrored_rules(
        &self,
        v4: Vec<RuleOf<V4>>,
        v6: Vec<RuleOf<V6>>,
    ) -> Result<(), String> {
        let mut st = self.state();
        self.mirror_rules_of::<V4>(&mut st, v4)?;
        self.mirror_rules_of::<V6>(&mut st, v6)
    }

    fn mirror_rules_of<F: Tabled>(&self, st: &mut State, v: Vec<RuleOf<F>>) -> Result<(), String> {
        if *F::mirrored(st) == v {
            return Ok(());
        }
        let set = with_mirrored(F::rules(&mut st.cfg), &v)?;
        self.change_policy::<F>(|p| Ok(p.with_rules(set)))?;
        *F::mirrored(st) = v;
        Ok(())
    }

    /// The policy rules of both families as `ip rule show` lists them, from the policy
    /// the workers route by.
    pub(super) fn policy_rules(&self, names: &[String]) -> (String, Value) {
        let name = |i: u16| {
            names
                .get(usize::from(i))
                .cloned()
                .unwrap_or_else(|| i.to_string())
        };
        let mut text = String::new();
        let mut data = serde_json::Map::new();
        fn lines<F: Tabled>(p: &PolicyOf<F>, name: &impl Fn(u16) -> String) -> Vec<String> {
            let mut v: Vec<String> = p.rules().iter().map(|r| r.describe(name)).collect();
            // The VRFs' l3mdev rule is implied by them, as Linux shows it.
            if p.has_vrfs() {
                let at = p
                    .rules()
                    .iter()
                    .position(|r| r.pref > netbatch_stack::route::rule::L3MDEV_PREF)
                    .unwrap_or(v.len());
                v.insert(
                    at,
                    format!(
                        "{}:\tfrom all lookup [l3mdev-table]",
                        netbatch_stack::route::rule::L3MDEV_PREF
                    ),
                );
            }
            v
        }
        let v4 = self.live_policy::<V4>().map(|p| lines(&p, &name));
        let v6 = self.live_policy::<V6>().map(|p| lines(&p, &name));
        for (family, l) in [("inet", v4), ("inet6", v6)] {
            let l = l.unwrap_or_default();
            text += &format!("policy rules ({family}, as ip rule show)\n");
            for x in &l {
                text += &format!("  {x}\n");
            }
            data.insert(family.into(), json!(l));
        }
        (text, Value::Object(data))
    }
}

/// The configured rules `cfg` (checked as the kernel would) and then the mirrored ones
/// `kernel`, each of those the kernel would take for one already there left out.
pub(super) fn with_mirrored<F: Tabled>(
    cfg: &[RuleOf<F>],
    kernel: &[RuleOf<F>],
) -> Result<RulesOf<F>, String> {
    let mut set = Config::rule_set(cfg).map_err(|e| e.to_string())?;
    for r in kernel {
        let _ = set.add(r.clone());
    }
    Ok(set)
}

/// Removes from `v` the first configured rule that `w` selects.
fn take<F: Tabled>(
    v: &mut Vec<RuleOf<F>>,
    w: &RuleWords,
    want: &RuleOf<F>,
) -> Result<RuleOf<F>, String> {
    match v.iter().position(|r| w.selects(want, r)) {
        Some(i) => Ok(v.remove(i)),
        None if RulesOf::<F>::new().iter().any(|r| w.selects(want, r)) => Err(
            "netbatch keeps Linux's default rules (local, main, default): add rules before them instead".into(),
        ),
        None => Err("no such rule (No such file or directory)".into()),
    }
}

impl Control {
    /// For a reload to `new`: the workers' policy of family `F` with `new`'s rules and
    /// numbered tables (each table whose routes changed built again, in its slot), or
    /// `None` when neither changed. Nothing is installed yet: a refusal here changes
    /// nothing.
    pub(super) fn reload_policy<F: Tabled>(
        &self,
        st: &mut State,
        new: &mut Config,
    ) -> Result<Option<PolicyOf<F>>, String> {
        let old = &mut st.cfg;
        let (old_rules, new_rules) = (F::rules(old).clone(), F::rules(new).clone());
        let (old_tables, new_tables) = (F::tables(old).clone(), F::tables(new).clone());
        // VRFs or the interfaces' VRFs changed: every VRF's table, old and new, is built
        // again (an interface's connected and local routes move with it), and the
        // interfaces' map is replaced. `main`'s share of the move (the connected routes
        // an interface takes into or out of it) is the route diff's.
        let vrfs_changed = old.vrfs != new.vrfs || old.iface_vrfs != new.iface_vrfs;
        if old_rules == new_rules && old_tables == new_tables && !vrfs_changed {
            return Ok(None);
        }
        let mut next = (*self.live_policy::<F>()?).clone();
        let vrf_ids: std::collections::BTreeSet<u32> = if vrfs_changed {
            old.vrfs.iter().chain(&new.vrfs).map(|v| v.table).collect()
        } else {
            Default::default()
        };
        let ids: std::collections::BTreeSet<u32> = old_tables
            .keys()
            .chain(new_tables.keys())
            .chain(&vrf_ids)
            .copied()
            .collect();
        for id in ids {
            if !vrf_ids.contains(&id) && old_tables.get(&id) == new_tables.get(&id) {
                continue;
            }
            let t = new.table(id).map_err(|e| format!("table {id}: {e}"))?;
            next = next
                .with_table(id, std::sync::Arc::new(F::pick(t)))
                .map_err(|e| format!("table {id}: {e}"))?;
        }
        if vrfs_changed {
            next = next
                .with_iif_tables(&new.iface_tables())
                .map_err(|e| format!("vrf: {e}"))?;
        }
        let set = with_mirrored(&new_rules, F::mirrored(st))?;
        Ok(Some(next.with_rules(set)))
    }

    /// Installs a policy [`Control::reload_policy`] made.
    pub(super) fn install_policy<F: Tabled>(&self, p: PolicyOf<F>) -> Result<(), String> {
        self.change_policy::<F>(|_| Ok(p))
    }
}
