//! `[filter.<hook>]`: a rule chain per hook (prerouting, input, forward, output,
//! postrouting), each with its policy and its rules' matches, interfaces named as the
//! ports define them. Connection tracking in nftables' terms: `ct_state =
//! "established,related"` (new, established, related, invalid, untracked),
//! `ct_status = "assured"` (snat, dnat, assured, seen-reply: any of them),
//! `ct_mark = "V"` or `"V/MASK"`, `ct_mark_set = "V"` or `"mark"` (the packet's mark,
//! as the classifier set it), and `action = "continue"` for a rule that only sets.
//! `offload = true` on an accepting FORWARD rule offloads the established flows it
//! accepts (nftables' `flow add @ft`: `netbatch_stack::ct::offload`).

use netbatch_stack::filter::{Chain, CtMatch, HookPoint, MarkSet, PortRange, Rule, Verdict};
use netbatch_stack::route::file::Resolve;

use super::Errs;
use super::ports::Names;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilterFile {
    prerouting: Option<ChainFile>,
    input: Option<ChainFile>,
    forward: Option<ChainFile>,
    output: Option<ChainFile>,
    postrouting: Option<ChainFile>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChainFile {
    #[serde(default = "default_policy")]
    pub(super) policy: String,
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<RuleFile>,
}

fn default_policy() -> String {
    "accept".into()
}

#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum PortSpec {
    Number(u16),
    Text(String),
}

#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum ProtoSpec {
    Number(u8),
    Text(String),
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleFile {
    proto: Option<ProtoSpec>,
    src: Option<String>,
    dst: Option<String>,
    sport: Option<PortSpec>,
    dport: Option<PortSpec>,
    #[serde(rename = "in")]
    in_if: Option<String>,
    #[serde(rename = "out")]
    out_if: Option<String>,
    /// Packet mark, `V` or `V/MASK`.
    mark: Option<String>,
    /// `ct state`: states, comma-separated.
    ct_state: Option<String>,
    /// `ct status`: status bits, comma-separated (any of them).
    ct_status: Option<String>,
    /// `ct mark`, `V` or `V/MASK`.
    ct_mark: Option<String>,
    /// `ct mark set`: `V` or `mark`.
    ct_mark_set: Option<String>,
    pub(super) action: String,
    /// Flow offload (FORWARD, accept): nftables' `flow add @ft`.
    pub(super) offload: Option<bool>,
    /// A NAT rule's target (`[nat.*]` only): `ADDR[-ADDR][:PORT[-PORT]]`.
    pub(super) to: Option<String>,
}

/// A number, decimal or `0x` hexadecimal.
fn num(t: &str) -> Option<u32> {
    match t.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `V` or `V/MASK`.
fn value_mask(m: &str) -> Option<(u32, u32)> {
    let (v, mask) = m.split_once('/').unwrap_or((m, "0xffffffff"));
    Some((num(v.trim())?, num(mask.trim())?))
}

/// The `ct_*` keys of rule `r` under `rkey`.
fn ct_keys(r: &RuleFile, rule: &mut Rule, rkey: &str, e: &mut Errs) {
    use netbatch_stack::ct::{state_bit, status};
    let mut c = CtMatch::default();
    if let Some(s) = &r.ct_state {
        for w in s.split(',').map(str::trim) {
            match state_bit::NAMES.iter().position(|n| *n == w) {
                Some(i) => c.state |= 1 << i,
                None => e.add(
                    format!("{rkey}.ct_state"),
                    format!("unknown state '{w}' ({})", state_bit::NAMES.join(", ")),
                ),
            }
        }
    }
    if let Some(s) = &r.ct_status {
        for w in s.split(',').map(str::trim) {
            c.status |= match w {
                "snat" => status::SRC_NAT,
                "dnat" => status::DST_NAT,
                "assured" => status::ASSURED,
                "seen-reply" => status::SEEN_REPLY,
                other => {
                    e.add(
                        format!("{rkey}.ct_status"),
                        format!("unknown status '{other}' (snat, dnat, assured, seen-reply)"),
                    );
                    0
                }
            };
        }
    }
    if let Some(m) = &r.ct_mark {
        match value_mask(m) {
            Some(vm) => c.mark = Some(vm),
            None => e.add(
                format!("{rkey}.ct_mark"),
                format!("'{m}' is not a mark (V or V/MASK)"),
            ),
        }
    }
    if c != CtMatch::default() {
        rule.ct = Some(c);
    }
    if let Some(m) = &r.ct_mark_set {
        match (m.trim(), num(m.trim())) {
            ("mark", _) => rule.ct_mark_set = Some(MarkSet::Packet),
            (_, Some(v)) => rule.ct_mark_set = Some(MarkSet::Value(v)),
            _ => e.add(
                format!("{rkey}.ct_mark_set"),
                format!("'{m}' is neither a mark value nor 'mark' (the packet's)"),
            ),
        }
    }
    if rule.verdict == Verdict::Continue && rule.ct_mark_set.is_none() {
        e.add(
            format!("{rkey}.action"),
            "'continue' does nothing without ct_mark_set",
        );
    }
}

/// Validates `[filter]`, hook by hook; `names` are the interfaces the ports define.
pub(super) fn validate(raw: &FilterFile, names: &Names, e: &mut Errs) -> Vec<(HookPoint, Chain)> {
    let hooks = [
        (HookPoint::Prerouting, &raw.prerouting),
        (HookPoint::Input, &raw.input),
        (HookPoint::Forward, &raw.forward),
        (HookPoint::Output, &raw.output),
        (HookPoint::Postrouting, &raw.postrouting),
    ];
    let mut chains = Vec::new();
    for (hook, chain) in hooks {
        let Some(c) = chain else { continue };
        let key = format!("filter.{}", hook.name());
        let mut policy = verdict(&c.policy, &format!("{key}.policy"), e).unwrap_or(Verdict::Accept);
        if policy == Verdict::Continue {
            e.add(format!("{key}.policy"), "a policy is accept or drop");
            policy = Verdict::Accept;
        }
        let rules = c
            .rules
            .iter()
            .enumerate()
            .map(|(ri, r)| rule(r, hook, &format!("{key}.rule[{ri}]"), names, e))
            .collect();
        chains.push((hook, Chain { rules, policy }));
    }
    chains
}

/// A rule written on a command line, `HOOK KEY VALUE...` with the keys of a
/// `[[filter.HOOK.rule]]` table (`forward proto udp dport 5201 action drop`); the same
/// checks as in a file, the first problem as the error.
pub(super) fn rule_from_words(
    words: &[String],
    names: &Names,
) -> Result<(HookPoint, Rule), String> {
    let Some((hook_name, pairs)) = words.split_first() else {
        return Err("a rule needs a hook (prerouting, input, forward, output, postrouting)".into());
    };
    let hook = HookPoint::ALL
        .into_iter()
        .find(|h| h.name() == hook_name)
        .ok_or_else(|| {
            format!("'{hook_name}' is not a hook (prerouting, input, forward, output, postrouting), nor a policy rule's selector (from, to, iif, fwmark, pref, …)")
        })?;
    if !pairs.len().is_multiple_of(2) {
        return Err(format!(
            "'{}' has no value (a rule is KEY VALUE pairs)",
            pairs[pairs.len() - 1]
        ));
    }
    let mut t = toml::Table::new();
    for kv in pairs.chunks(2) {
        let (k, v) = (&kv[0], &kv[1]);
        let numeric = matches!(k.as_str(), "proto" | "sport" | "dport");
        let value = match (v.parse::<i64>(), v.parse::<bool>()) {
            (Ok(n), _) if numeric => toml::Value::Integer(n),
            (_, Ok(b)) if k == "offload" => toml::Value::Boolean(b),
            _ => toml::Value::String(v.clone()),
        };
        if t.insert(k.clone(), value).is_some() {
            return Err(format!("'{k}' is given twice"));
        }
    }
    if !t.contains_key("action") {
        return Err("a rule needs 'action accept' or 'action drop'".into());
    }
    let raw: RuleFile = t
        .try_into()
        .map_err(|e: toml::de::Error| e.message().trim_end().to_string())?;
    let mut e = Errs::default();
    let r = rule(&raw, hook, hook.name(), names, &mut e);
    match e.0.into_iter().next() {
        Some(err) => Err(err.to_string()),
        None => Ok((hook, r)),
    }
}

/// One rule of the chain at `hook`, under `rkey`.
fn rule(r: &RuleFile, hook: HookPoint, rkey: &str, names: &Names, e: &mut Errs) -> Rule {
    if r.to.is_some() {
        e.add(
            format!("{rkey}.to"),
            "'to' is for NAT rules ([nat.prerouting], [nat.postrouting])",
        );
    }
    let v = verdict(&r.action, &format!("{rkey}.action"), e).unwrap_or(Verdict::Accept);
    let mut rule = matches_of(r, v, hook, rkey, names, e);
    if r.offload == Some(true) {
        if hook != HookPoint::Forward {
            e.add(
                format!("{rkey}.offload"),
                format!("flow offload is a forward rule's statement (nftables' `flow add` in a forward chain), not {hook}'s"),
            );
        } else if v != Verdict::Accept {
            e.add(
                format!("{rkey}.offload"),
                "flow offload needs action = \"accept\": it forwards what the rule accepts",
            );
        } else {
            rule.offload = true;
        }
    }
    rule
}

/// The matches of rule `r` at `hook` under `rkey`, with verdict `v` (a NAT rule's
/// matches are a filter rule's).
pub(super) fn matches_of(
    r: &RuleFile,
    v: Verdict,
    hook: HookPoint,
    rkey: &str,
    names: &Names,
    e: &mut Errs,
) -> Rule {
    let mut rule = Rule::any(v);
    rule.proto = match &r.proto {
        None => None,
        Some(ProtoSpec::Number(n)) => Some(*n),
        Some(ProtoSpec::Text(t)) => match t.as_str() {
            "icmp" => Some(1),
            "tcp" => Some(6),
            "udp" => Some(17),
            other => {
                e.add(
                    format!("{rkey}.proto"),
                    format!("unknown protocol '{other}' (icmp, tcp, udp or a number)"),
                );
                None
            }
        },
    };
    rule.src = r
        .src
        .as_ref()
        .and_then(|s| e.parse(&format!("{rkey}.src"), s, "a prefix"));
    rule.dst = r
        .dst
        .as_ref()
        .and_then(|s| e.parse(&format!("{rkey}.dst"), s, "a prefix"));
    rule.sport = r
        .sport
        .as_ref()
        .and_then(|p| port_range(p, &format!("{rkey}.sport"), e));
    rule.dport = r
        .dport
        .as_ref()
        .and_then(|p| port_range(p, &format!("{rkey}.dport"), e));
    if let Some(m) = &r.mark {
        match value_mask(m) {
            Some(vm) => rule.mark = Some(vm),
            None => e.add(
                format!("{rkey}.mark"),
                format!("'{m}' is not a mark (V or V/MASK)"),
            ),
        }
    }
    ct_keys(r, &mut rule, rkey, e);
    if (rule.sport.is_some() || rule.dport.is_some()) && !matches!(rule.proto, Some(6) | Some(17)) {
        e.add(rkey, "port matches need proto = \"tcp\" or \"udp\"");
    }
    for (field, val, allowed, slot) in [
        ("in", &r.in_if, hook.has_in_if(), &mut rule.in_if),
        ("out", &r.out_if, hook.has_out_if(), &mut rule.out_if),
    ] {
        let Some(name) = val else { continue };
        if !allowed {
            e.add(
                format!("{rkey}.{field}"),
                format!("packets at {hook} have no {field}put interface"),
            );
            continue;
        }
        match names.iface(name) {
            Some(i) => *slot = Some(i),
            None => e.add(
                format!("{rkey}.{field}"),
                format!("no interface named '{name}'"),
            ),
        }
    }
    rule
}

fn verdict(s: &str, key: &str, e: &mut Errs) -> Option<Verdict> {
    match s {
        "accept" => Some(Verdict::Accept),
        "drop" => Some(Verdict::Drop),
        "continue" => Some(Verdict::Continue),
        other => {
            e.add(
                key,
                format!("unknown verdict '{other}' (accept, drop or continue)"),
            );
            None
        }
    }
}

fn port_range(p: &PortSpec, key: &str, e: &mut Errs) -> Option<PortRange> {
    match p {
        PortSpec::Number(n) => Some(PortRange { lo: *n, hi: *n }),
        PortSpec::Text(s) => match s.parse::<PortRange>() {
            Ok(r) => Some(r),
            Err(m) => {
                e.add(key, m);
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;
    use netbatch_stack::filter::HookPoint;

    const PORTS: &str =
        "[[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n";

    /// `offload = true` is a FORWARD rule's that accepts, as nftables' `flow add` is a
    /// forward chain's statement: elsewhere, on a drop, or in a NAT rule it is refused
    /// at its key. Accepted, it turns tracking on (offloading needs connections), and
    /// a command-line rule takes it too.
    #[test]
    fn offload_is_an_accepting_forward_rules() {
        let bad = format!(
            "{PORTS}[filter.input]\n[[filter.input.rule]]\noffload = true\naction = \"accept\"\n\
             [filter.forward]\n[[filter.forward.rule]]\noffload = true\naction = \"drop\"\n\
             [nat.postrouting]\n[[nat.postrouting.rule]]\noffload = true\naction = \"masquerade\"\n"
        );
        let e = parse(&bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for k in [
            "filter.input.rule[0].offload",
            "filter.forward.rule[0].offload",
            "nat.postrouting.rule[0].offload",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        let good = format!(
            "{PORTS}[filter.forward]\npolicy = \"drop\"\n[[filter.forward.rule]]\nct_state = \"established\"\noffload = true\naction = \"accept\"\n"
        );
        let c = parse(&good).unwrap();
        assert!(c.graph.offloads() && c.graph.conntrack.is_some());
        let words: Vec<String> = "forward proto udp offload true action accept"
            .split(' ')
            .map(String::from)
            .collect();
        let (hook, rule) = c.parse_rule(&words).unwrap();
        assert!(hook == HookPoint::Forward && rule.offload);
    }
}
