//! `[filter.<hook>]`: a rule chain per hook (prerouting, input, forward, output,
//! postrouting), each with its policy and its rules' matches, interfaces named as the
//! ports define them.

use netbatch_stack::filter::{Chain, HookPoint, PortRange, Rule, Verdict};
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
struct ChainFile {
    #[serde(default = "default_policy")]
    policy: String,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleFile>,
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
struct RuleFile {
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
    action: String,
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
        let policy = verdict(&c.policy, &format!("{key}.policy"), e).unwrap_or(Verdict::Accept);
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
            format!("'{hook_name}' is not a hook (prerouting, input, forward, output, postrouting)")
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
        let value = match v.parse::<i64>() {
            Ok(n) if numeric => toml::Value::Integer(n),
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
    let mut rule =
        Rule::any(verdict(&r.action, &format!("{rkey}.action"), e).unwrap_or(Verdict::Accept));
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
        let num = |t: &str| match t.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => t.parse().ok(),
        };
        let (v, mask) = m.split_once('/').unwrap_or((m, "0xffffffff"));
        match (num(v), num(mask)) {
            (Some(v), Some(mask)) => rule.mark = Some((v, mask)),
            _ => e.add(
                format!("{rkey}.mark"),
                format!("'{m}' is not a mark (V or V/MASK)"),
            ),
        }
    }
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
        other => {
            e.add(key, format!("unknown verdict '{other}' (accept or drop)"));
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
