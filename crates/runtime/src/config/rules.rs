//! `[[rule]]` and `table` on `[[route]]`: policy routing, as `ip rule` and `ip route …
//! table N` have it (`netbatch_stack::route::rule` says how the rules are walked).
//!
//! ```toml
//! [[rule]]
//! pref = 100                      # required: lower first, equal ones in file order
//! from = "192.0.2.0/24"           # selectors, all optional: from, to (a prefix, an
//! iif = "eth0"                    #   address, or "all"), iif (an interface), fwmark
//! fwmark = "0x10/0x30"            #   ("V", "V/MASK" or a number; "0" alone matches
//! ipproto = "tcp"                 #   all, as Linux), ipproto (tcp, udp, icmp,
//! dport = "1000-2000"             #   ipv6-icmp, sctp, udplite, or 0-255), sport and
//! tos = "0x10"                    #   dport (N or "LO-HI", 1 to 65534), tos, not = true
//! table = 100                     # the action: table (lookup: 1 to 4294967295,
//!                                 #   "main", "default", "local"), goto = PREF, or
//!                                 #   action = "blackhole" | "unreachable" |
//!                                 #   "prohibit" | "nop"
//! suppress_prefixlength = 0       # with table: refuse routes this long or shorter
//! family = "inet6"                # when neither from nor to says (default inet)
//!
//! [[route]]
//! prefix = "0.0.0.0/0"
//! via = "198.51.100.254"
//! table = 100                     # a numbered table (default: main)
//! ```
//!
//! Every key is checked on its own, and refused with its key and the reason: a value of
//! the wrong form, a `tos` with bits the family's rules do not compare (IPv4: only 0x04
//! to 0x1c in steps of 4; IPv6: any DSCP, no ECN bit), a port range outside 1 to 65534,
//! `from`/`to`/`family` of different families, no action or two, `suppress_prefixlength`
//! without a lookup or above the family's address length, a goto that does not jump
//! forward, a rule the kernel takes for one before it (`File exists`: see
//! `RulesOf::like`) (the kernel's rules, so that every file netbatch takes, `ip rule`
//! takes). A
//! `table` on a route is `main` (254, the default) or a numbered table; `local` (255) is
//! refused (netbatch makes local routes from the interfaces' addresses) and so is 0. A
//! prefix is routed once per table and family. A rule may look up a table no route
//! names: it is empty, as in Linux. The rules and tables are built into each family's
//! [`Policy`] by [`Config::policies`].

use std::collections::BTreeMap;
use std::sync::Arc;

use netbatch_stack::route::file::{AnyRoute, LineFamily, Resolve};
use netbatch_stack::route::rule::{
    Action, MAX_TABLES, Mark, Policy, Policy6, PortRange, RuleError, RuleOf, RulesOf,
    TABLE_DEFAULT, TABLE_LOCAL, TABLE_MAIN,
};
use netbatch_stack::route::{Family, Route, Route6, RouteError, RouteOf, RoutesOf, V4, V6};

use super::ports::Names;
use super::routes::RouteFile;
use super::{Config, Errs};

/// A number or text (marks, ports, protocols, TOS and tables may be written either way).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub(super) enum Val {
    Number(i64),
    Text(String),
}

impl Val {
    fn text(&self) -> String {
        match self {
            Self::Number(n) => n.to_string(),
            Self::Text(t) => t.clone(),
        }
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleFile {
    pref: Option<i64>,
    #[serde(default)]
    not: bool,
    family: Option<String>,
    from: Option<String>,
    to: Option<String>,
    iif: Option<String>,
    fwmark: Option<Val>,
    ipproto: Option<Val>,
    sport: Option<Val>,
    dport: Option<Val>,
    tos: Option<Val>,
    table: Option<Val>,
    goto: Option<i64>,
    action: Option<String>,
    suppress_prefixlength: Option<i64>,
}

/// A number written in decimal or `0x` hexadecimal.
fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `v` as a number of at most `max`, or an error naming `what`.
fn bounded(v: &Val, max: u64, what: &str) -> Result<u64, String> {
    let n = match v {
        Val::Number(n) => u64::try_from(*n).ok(),
        Val::Text(t) => number(t),
    };
    n.filter(|&n| n <= max)
        .ok_or_else(|| format!("'{}' is not {what} (0 to {max})", v.text()))
}

/// A table's number: `main`, `default`, `local` or 1 to 4294967295.
pub(super) fn table_id(v: &Val) -> Result<u32, String> {
    match v {
        Val::Text(t) if t == "main" => Ok(TABLE_MAIN),
        Val::Text(t) if t == "default" => Ok(TABLE_DEFAULT),
        Val::Text(t) if t == "local" => Ok(TABLE_LOCAL),
        _ => match bounded(v, u64::from(u32::MAX), "a table") {
            Ok(0) => Err("table 0 is no table (1 to 4294967295, main, default, local)".into()),
            Ok(n) => Ok(n as u32),
            Err(_) => Err(format!(
                "'{}' is not a table (1 to 4294967295, main, default, local)",
                v.text()
            )),
        },
    }
}

/// Whether a `[[route]]` with this `table` goes to `main` (no table, or `main`), as
/// `routes` takes it; every other value is this module's (a numbered table, or an
/// error).
pub(super) fn in_main(table: Option<&Val>) -> bool {
    table.is_none_or(|t| table_id(t) == Ok(TABLE_MAIN))
}

/// `ipproto`: a name or 0 to 255 (0 is no selector, as Linux).
fn protocol(v: &Val) -> Result<Option<u8>, String> {
    let named = match v {
        Val::Text(t) => match t.as_str() {
            "tcp" => Some(6),
            "udp" => Some(17),
            "icmp" => Some(1),
            "ipv6-icmp" | "icmpv6" => Some(58),
            "sctp" => Some(132),
            "udplite" => Some(136),
            _ => None,
        },
        Val::Number(_) => None,
    };
    let p = match named {
        Some(p) => p,
        None => bounded(
            v,
            255,
            "a protocol (tcp, udp, icmp, ipv6-icmp, sctp, udplite, or a number)",
        )? as u8,
    };
    Ok((p != 0).then_some(p))
}

/// `sport`/`dport`: `N` or `LO-HI`.
fn ports(v: &Val) -> Result<PortRange, String> {
    let text = v.text();
    let (lo, hi) = match text.split_once('-') {
        Some((a, b)) => (number(a), number(b)),
        None => (number(&text), number(&text)),
    };
    let bad = || format!("'{text}' is not a port or a range LO-HI (ports 1 to 65534)");
    let (lo, hi) = match (lo, hi) {
        (Some(a), Some(b)) => (
            u16::try_from(a).map_err(|_| bad())?,
            u16::try_from(b).map_err(|_| bad())?,
        ),
        _ => return Err(bad()),
    };
    PortRange::new(lo, hi).map_err(|e| e.to_string())
}

/// `fwmark`: `V`, `V/MASK`, or a number.
fn mark(v: &Val) -> Result<Mark, String> {
    let text = v.text();
    let bad = || format!("'{text}' is not a mark (V or V/MASK, 0 to 0xffffffff each)");
    let word = |s: &str| {
        number(s)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(bad)
    };
    match text.split_once('/') {
        Some((a, m)) => Ok(Mark::linux(word(a)?, Some(word(m)?))),
        None => Ok(Mark::linux(word(&text)?, None)),
    }
}

/// A rule's family, from `family`, `from` and `to`.
fn family_of(r: &RuleFile, key: &str, e: &mut Errs) -> Option<bool> {
    let said = match r.family.as_deref() {
        None => None,
        Some("inet" | "ipv4") => Some(false),
        Some("inet6" | "ipv6") => Some(true),
        Some(other) => {
            e.add(
                format!("{key}.family"),
                format!("'{other}' is not a family (inet, inet6)"),
            );
            return None;
        }
    };
    let of = |p: &Option<String>| {
        p.as_deref()
            .filter(|p| *p != "all")
            .map(|p| p.contains(':'))
    };
    let mut v6 = said;
    for (name, p) in [("from", of(&r.from)), ("to", of(&r.to))] {
        match (v6, p) {
            (Some(a), Some(b)) if a != b => {
                e.add(
                    format!("{key}.{name}"),
                    format!(
                        "an {} prefix in an {} rule (from, to and family name one family)",
                        if b { "IPv6" } else { "IPv4" },
                        if a { "IPv6" } else { "IPv4" }
                    ),
                );
                return None;
            }
            (None, Some(b)) => v6 = Some(b),
            _ => {}
        }
    }
    Some(v6.unwrap_or(false))
}

/// One `[[rule]]` under `key`, of family `F`.
fn rule_of<F: LineFamily>(
    r: &RuleFile,
    key: &str,
    names: &Names,
    e: &mut Errs,
) -> Option<RuleOf<F>> {
    let before = e.0.len();
    let field = |name: &str, why: String, e: &mut Errs| e.add(format!("{key}.{name}"), why);
    let pref = match r.pref {
        None => {
            field(
                "pref",
                "a rule needs its priority (0 to 4294967295)".into(),
                e,
            );
            None
        }
        Some(p) => u32::try_from(p).ok().or_else(|| {
            field(
                "pref",
                format!("{p} is not a priority (0 to 4294967295)"),
                e,
            );
            None
        }),
    };
    let prefix = |name: &str, p: &Option<String>, e: &mut Errs| -> Option<F::Prefix> {
        let p = p.as_deref().filter(|p| *p != "all")?;
        match F::prefix(p) {
            Ok(x) => Some(x),
            Err(why) => {
                e.add(
                    format!("{key}.{name}"),
                    format!("'{p}' is not {}: {why}", F::PREFIX_FORM),
                );
                None
            }
        }
    };
    let from = prefix("from", &r.from, e);
    let to = prefix("to", &r.to, e);
    let iif = r.iif.as_deref().and_then(|n| {
        names.iface(n).or_else(|| {
            e.add(format!("{key}.iif"), format!("no interface '{n}'"));
            None
        })
    });
    let fwmark = r.fwmark.as_ref().and_then(|v| {
        mark(v)
            .map_err(|why| e.add(format!("{key}.fwmark"), why))
            .ok()
    });
    let ipproto = r.ipproto.as_ref().and_then(|v| {
        protocol(v)
            .map_err(|why| e.add(format!("{key}.ipproto"), why))
            .ok()
            .flatten()
    });
    let sport = r.sport.as_ref().and_then(|v| {
        ports(v)
            .map_err(|why| e.add(format!("{key}.sport"), why))
            .ok()
    });
    let dport = r.dport.as_ref().and_then(|v| {
        ports(v)
            .map_err(|why| e.add(format!("{key}.dport"), why))
            .ok()
    });
    let tos = r.tos.as_ref().and_then(|v| {
        let t = bounded(v, 255, "a TOS byte")
            .map_err(|why| e.add(format!("{key}.tos"), why))
            .ok()? as u8;
        if t & !F::RULE_TOS_MASK != 0 {
            e.add(
                format!("{key}.tos"),
                format!(
                    "tos {t:#04x} sets bits {} rules do not compare (only {:#04x}: {})",
                    F::IP,
                    F::RULE_TOS_MASK,
                    if F::RULE_TOS_MASK == 0x1c {
                        "the three bits of the old TOS field, as Linux"
                    } else {
                        "the DSCP, never ECN"
                    }
                ),
            );
            return None;
        }
        // 0 is no selector.
        (t != 0).then_some(t)
    });
    let actions = [r.table.is_some(), r.goto.is_some(), r.action.is_some()];
    let action = match actions.iter().filter(|&&a| a).count() {
        0 => {
            e.add(
                key,
                "a rule needs an action: table (lookup), goto, or action = blackhole, unreachable, prohibit or nop",
            );
            None
        }
        1 => {
            if let Some(t) = &r.table {
                table_id(t)
                    .map(Action::Lookup)
                    .map_err(|why| e.add(format!("{key}.table"), why))
                    .ok()
            } else if let Some(g) = r.goto {
                match u32::try_from(g) {
                    Ok(g) => Some(Action::Goto(g)),
                    Err(_) => {
                        e.add(
                            format!("{key}.goto"),
                            format!("{g} is not a priority (0 to 4294967295)"),
                        );
                        None
                    }
                }
            } else {
                match r.action.as_deref().unwrap_or_default() {
                    "blackhole" => Some(Action::Blackhole),
                    "unreachable" => Some(Action::Unreachable),
                    "prohibit" => Some(Action::Prohibit),
                    "nop" => Some(Action::Nop),
                    "lookup" | "goto" => {
                        e.add(
                            format!("{key}.action"),
                            "a lookup is written table = N, a goto goto = PREF (no action key)",
                        );
                        None
                    }
                    other => {
                        e.add(
                            format!("{key}.action"),
                            format!(
                                "'{other}' is not an action (blackhole, unreachable, prohibit, nop)"
                            ),
                        );
                        None
                    }
                }
            }
        }
        _ => {
            e.add(
                key,
                "a rule has one action: table, goto or action, not several",
            );
            None
        }
    };
    let bits = if F::RULE_TOS_MASK == 0x1c { 32 } else { 128 };
    let suppress = r.suppress_prefixlength.and_then(|n| {
        if r.table.is_none() {
            e.add(
                format!("{key}.suppress_prefixlength"),
                "suppress_prefixlength refuses the routes a lookup finds: it needs table",
            );
            return None;
        }
        match u8::try_from(n) {
            Ok(n) if n <= bits => Some(n),
            _ => {
                e.add(
                    format!("{key}.suppress_prefixlength"),
                    format!("{n} is not a prefix length (0 to {bits})"),
                );
                None
            }
        }
    });
    if e.0.len() != before {
        return None;
    }
    Some(RuleOf {
        pref: pref?,
        not: r.not,
        from,
        to,
        iif,
        fwmark,
        ipproto,
        sport,
        dport,
        tos,
        action: action?,
        suppress_prefixlength: suppress,
    })
}

/// The rules of one family after Linux's defaults, each added as the kernel would
/// (refusing what it refuses, at the rule's key).
fn add_all<F: Family>(list: &[(usize, RuleOf<F>)], e: &mut Errs) -> Vec<RuleOf<F>> {
    let mut set = RulesOf::<F>::new();
    let mut out = Vec::new();
    for (ri, r) in list {
        match set.add(r.clone()) {
            Ok(()) => out.push(r.clone()),
            Err(why) => {
                let key = match why {
                    RuleError::BackwardGoto { .. } => format!("rule[{ri}].goto"),
                    RuleError::TableZero => format!("rule[{ri}].table"),
                    RuleError::Tos { .. } => format!("rule[{ri}].tos"),
                    _ => format!("rule[{ri}]"),
                };
                // Name the rule it is like, by its place in the file.
                let like = match why {
                    RuleError::Exists { index, .. } => set
                        .iter()
                        .nth(index)
                        .and_then(|x| list.iter().find(|(_, y)| y == x))
                        .map(|(i, _)| format!(" (rule[{i}])"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                e.add(key, format!("{why}{like}"));
            }
        }
    }
    out
}

/// The IPv4 and IPv6 rules of `[[rule]]`, in file order.
pub(super) fn validate(
    raw: &[RuleFile],
    names: &Names,
    e: &mut Errs,
) -> (Vec<Route4Rule>, Vec<Route6Rule>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (ri, r) in raw.iter().enumerate() {
        let key = format!("rule[{ri}]");
        match family_of(r, &key, e) {
            Some(false) => {
                if let Some(x) = rule_of::<V4>(r, &key, names, e) {
                    v4.push((ri, x));
                }
            }
            Some(true) => {
                if let Some(x) = rule_of::<V6>(r, &key, names, e) {
                    v6.push((ri, x));
                }
            }
            None => {}
        }
    }
    (add_all(&v4, e), add_all(&v6, e))
}

/// An IPv4 rule.
pub(super) type Route4Rule = RuleOf<V4>;
/// An IPv6 rule.
pub(super) type Route6Rule = RuleOf<V6>;

/// The routes of `[[route]]` with a numbered `table`, by table, each family on its own.
pub(super) type Tables = (BTreeMap<u32, Vec<Route>>, BTreeMap<u32, Vec<Route6>>);

/// The `[[route]]`s with a `table` other than main: refused for `local` and invalid
/// tables, checked as `routes` checks main's, a prefix once per table and family.
/// A route with `vrf` goes to the VRF's table (a `table` beside it must be that one),
/// its gateway looked for on the VRF's subnets.
pub(super) fn tables(
    raw: &[RouteFile],
    names: &Names,
    vrfs: &[super::vrf::VrfConfig],
    e: &mut Errs,
) -> Tables {
    let mut v4: BTreeMap<u32, Vec<Route>> = BTreeMap::new();
    let mut v6: BTreeMap<u32, Vec<Route6>> = BTreeMap::new();
    // The first route of each (table, family, prefix), for the repeat's message.
    let mut seen4: BTreeMap<(u32, netbatch_stack::prefix::Ipv4Prefix), usize> = BTreeMap::new();
    let mut seen6: BTreeMap<(u32, netbatch_stack::prefix::Ipv6Prefix), usize> = BTreeMap::new();
    for (ri, r) in raw.iter().enumerate() {
        let key = format!("route[{ri}]");
        // The VRF's name and table, when the route names one.
        let vrf = match r.vrf() {
            Some(v) => match vrfs.iter().find(|x| x.name == v) {
                Some(x) => Some((x.name.as_str(), x.table)),
                None => {
                    e.add(format!("{key}.vrf"), super::vrf::unknown(v, vrfs));
                    continue;
                }
            },
            None => None,
        };
        let table = match (r.table(), vrf) {
            (Some(t), Some((name, vt))) => {
                if table_id(t) != Ok(vt) {
                    e.add(
                        format!("{key}.table"),
                        format!(
                            "table {} is not VRF '{name}''s table ({vt}): give vrf or table",
                            t.text()
                        ),
                    );
                    continue;
                }
                Ok(vt)
            }
            (_, Some((_, vt))) => Ok(vt),
            (Some(t), None) => table_id(t),
            (None, None) => continue,
        };
        // The gateway of a route of a VRF's table is on the VRF's subnets.
        let scope = super::ports::Scoped {
            names,
            vrf: vrfs
                .iter()
                .find(|x| table == Ok(x.table))
                .map_or("", |x| x.name.as_str()),
        };
        let id = match table {
            Ok(TABLE_MAIN) => continue,
            Ok(TABLE_LOCAL) => {
                e.add(
                    format!("{key}.table"),
                    "table local is netbatch's own: it makes local and broadcast routes from the interfaces' addresses",
                );
                continue;
            }
            Ok(id) => id,
            Err(why) => {
                e.add(format!("{key}.table"), why);
                continue;
            }
        };
        let twice = |first: usize, p: &dyn core::fmt::Display| {
            format!(
                "{p} is routed twice in table {id}: route[{first}] and route[{ri}] (one route per prefix and table)"
            )
        };
        match super::routes::inline(r, &key, &scope, e) {
            Some(AnyRoute::V4(route)) => {
                if let Some(&first) = seen4.get(&(id, route.prefix)) {
                    e.add(format!("{key}.prefix"), twice(first, &route.prefix));
                    continue;
                }
                seen4.insert((id, route.prefix), ri);
                v4.entry(id).or_default().push(route);
            }
            Some(AnyRoute::V6(route)) => {
                if let Some(&first) = seen6.get(&(id, route.prefix)) {
                    e.add(format!("{key}.prefix"), twice(first, &route.prefix));
                    continue;
                }
                seen6.insert((id, route.prefix), ri);
                v6.entry(id).or_default().push(route);
            }
            None => {}
        }
    }
    for (ip, n) in [("IPv4", v4.len()), ("IPv6", v6.len())] {
        if n > MAX_TABLES {
            e.add(
                "route",
                format!("{n} numbered {ip} tables (at most {MAX_TABLES} per family)"),
            );
        }
    }
    (v4, v6)
}

/// The numbered tables of family `F`, built.
fn built<F: Family>(
    tables: &BTreeMap<u32, Vec<RouteOf<F>>>,
) -> Result<BTreeMap<u32, Arc<RoutesOf<F>>>, RouteError> {
    tables
        .iter()
        .map(|(&id, routes)| {
            let mut t = RoutesOf::compact();
            t.load(routes.iter().cloned())?;
            Ok((id, Arc::new(t)))
        })
        .collect()
}

/// The rules of family `F` in a set (they were checked when the file was read).
fn set_of<F: Family>(rules: &[RuleOf<F>]) -> Result<RulesOf<F>, RouteError> {
    let mut set = RulesOf::new();
    for r in rules {
        set.add(r.clone())
            .map_err(|e| RouteError::Fib(format!("rule {}: {e}", r.pref)))?;
    }
    Ok(set)
}

/// A policy rule of either family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyRule {
    /// An IPv4 rule.
    V4(RuleOf<V4>),
    /// An IPv6 rule.
    V6(RuleOf<V6>),
}

/// A rule written as `ip rule add|del` takes one (`netbatch rule add|del …`): the rule,
/// and which of its fields the words gave (`ip rule del` removes the first rule that
/// agrees on those).
#[derive(Debug, Clone)]
pub struct RuleWords {
    /// The rule (for a deletion, a field the words did not give is a placeholder).
    pub rule: AnyRule,
    /// The `[[rule]]` keys the words gave.
    pub given: Vec<&'static str>,
}

impl RuleWords {
    /// Whether `r` agrees with these words on every field they gave (`ip rule del`).
    pub fn selects<F: Family>(&self, want: &RuleOf<F>, r: &RuleOf<F>) -> bool {
        self.given.iter().all(|&k| match k {
            "pref" => r.pref == want.pref,
            "not" => r.not == want.not,
            "from" => r.from == want.from,
            "to" => r.to == want.to,
            "iif" => r.iif == want.iif,
            "fwmark" => r.fwmark == want.fwmark,
            "ipproto" => r.ipproto == want.ipproto,
            "sport" => r.sport == want.sport,
            "dport" => r.dport == want.dport,
            "tos" => r.tos == want.tos,
            "table" | "goto" | "action" => r.action == want.action,
            "suppress_prefixlength" => r.suppress_prefixlength == want.suppress_prefixlength,
            _ => true,
        })
    }
}

/// What each `ip rule` word is in `[[rule]]` terms: its key, and whether a value follows.
fn rule_word(w: &str) -> Option<(&'static str, bool)> {
    Some(match w {
        "from" => ("from", true),
        "to" => ("to", true),
        "tos" | "dsfield" => ("tos", true),
        "fwmark" => ("fwmark", true),
        "iif" | "dev" => ("iif", true),
        "ipproto" => ("ipproto", true),
        "sport" => ("sport", true),
        "dport" => ("dport", true),
        "pref" | "priority" | "preference" | "order" => ("pref", true),
        "table" | "lookup" => ("table", true),
        "goto" => ("goto", true),
        "suppress_prefixlength" | "sup_pl" => ("suppress_prefixlength", true),
        "type" => ("action", true),
        "blackhole" | "unreachable" | "prohibit" | "nop" => ("action", false),
        "not" => ("not", false),
        _ => return None,
    })
}

/// Whether `w` may begin a policy rule's words (a selector, an action, a family).
pub fn starts_policy_rule(w: &str) -> bool {
    rule_word(w).is_some() || matches!(w, "-4" | "-6" | "inet" | "inet6")
}

impl Config {
    /// A policy rule written on a command line as `ip rule` takes one (`[-6] [not]
    /// [pref N] [from P] [to P] [iif DEV] [fwmark V[/M]] [ipproto P] [sport R] [dport R]
    /// [tos T] (lookup T | goto N | blackhole | unreachable | prohibit | nop)
    /// [suppress_prefixlength N]`), checked as a `[[rule]]` is, at `rule.KEY`. A rule
    /// added without a priority gets `pref(v6)` (Linux's: one below the second rule's).
    /// For a deletion (`del`), a missing priority or action is no selector.
    pub fn parse_policy_rule(
        &self,
        words: &[&str],
        del: bool,
        pref: impl Fn(bool) -> u32,
    ) -> Result<RuleWords, String> {
        let mut t = toml::Table::new();
        let mut given: Vec<&'static str> = Vec::new();
        let mut it = words.iter();
        while let Some(&w) = it.next() {
            match w {
                "-4" | "inet" => {
                    t.insert("family".into(), "inet".into());
                    continue;
                }
                "-6" | "inet6" => {
                    t.insert("family".into(), "inet6".into());
                    continue;
                }
                _ => {}
            }
            let Some((key, takes)) = rule_word(w) else {
                return Err(format!(
                    "'{w}' is not a rule selector or action netbatch has (from, to, tos, fwmark, iif, ipproto, sport, dport, pref, lookup, goto, blackhole, unreachable, prohibit, nop, suppress_prefixlength)"
                ));
            };
            if given.contains(&key) {
                return Err(format!("'{w}' is given twice"));
            }
            given.push(key);
            let value = if takes {
                let Some(&v) = it.next() else {
                    return Err(format!("'{w}' needs a value"));
                };
                v
            } else {
                w
            };
            let v: toml::Value = match key {
                "not" => true.into(),
                "pref" | "goto" | "suppress_prefixlength" => match number(value) {
                    Some(n) => i64::try_from(n).unwrap_or(i64::MAX).into(),
                    None => return Err(format!("rule.{key}: '{value}' is not a number")),
                },
                _ => value.into(),
            };
            t.insert(key.into(), v);
        }
        let placeholder = |t: &mut toml::Table, given: &[&str]| {
            if !given.contains(&"table") && !given.contains(&"goto") && !given.contains(&"action") {
                t.insert("action".into(), "nop".into());
            }
        };
        if del {
            placeholder(&mut t, &given);
        }
        let raw: RuleFile = toml::Value::Table(t.clone())
            .try_into()
            .map_err(|e| format!("rule: {e}"))?;
        let mut e = Errs(Vec::new());
        let v6 = family_of(&raw, "rule", &mut e);
        let mut raw = raw;
        if raw.pref.is_none() {
            raw.pref = Some(if del {
                0
            } else {
                i64::from(pref(v6 == Some(true)))
            });
        }
        let names = Names::of(&self.ports);
        let rule = match v6 {
            Some(false) => rule_of::<V4>(&raw, "rule", &names, &mut e).map(AnyRule::V4),
            Some(true) => rule_of::<V6>(&raw, "rule", &names, &mut e).map(AnyRule::V6),
            None => None,
        };
        match rule {
            Some(rule) if e.0.is_empty() => Ok(RuleWords { rule, given }),
            _ => Err(e
                .0
                .iter()
                .map(|c| format!("{}: {}", c.key, c.reason))
                .collect::<Vec<_>>()
                .join("; ")),
        }
    }

    /// The policy rules of family `F` (the configured ones, after Linux's defaults) as
    /// a set: `Err` names the rule the kernel would refuse.
    pub fn rule_set<F: Family>(rules: &[RuleOf<F>]) -> Result<RulesOf<F>, RouteError> {
        set_of(rules)
    }

    /// Each family's policy routing: the rules over the numbered tables (`main` is the
    /// route table the workers' hosts are given), with the VRFs: each VRF's table holds
    /// the routes its interfaces' addresses imply, then its configured ones.
    pub fn policies(&self) -> Result<(Policy, Policy6), RouteError> {
        let refused = |e: RuleError| RouteError::Fib(e.to_string());
        let setup = |e: crate::setup::SetupError| RouteError::Fib(e.to_string());
        let iif = self.iface_tables();
        let setups: Vec<_> = self.ports.iter().map(|p| p.setup.clone()).collect();
        let (_, ifaces) = crate::setup::interfaces(&setups).map_err(setup)?;
        let mut t4 = built(&self.tables)?;
        let mut t6 = built(&self.tables6)?;
        for v in &self.vrfs {
            let of = |i: u16| iif.get(usize::from(i)) == Some(&v.table);
            let none = Vec::new();
            let routes = self.tables.get(&v.table).unwrap_or(&none);
            let t = crate::setup::build_into(RoutesOf::compact(), &ifaces, routes, of)
                .map_err(setup)?;
            t4.insert(v.table, Arc::new(t));
            // A VRF without IPv6 gets none: the policy gives it one shared empty table.
            let none6 = Vec::new();
            let routes6 = self.tables6.get(&v.table).unwrap_or(&none6);
            let has6 = (0u16..)
                .zip(&ifaces)
                .any(|(i, f)| of(i) && !f.addrs6.is_empty());
            if has6 || !routes6.is_empty() {
                let t = crate::setup::build_into6(RoutesOf::compact(), &ifaces, routes6, of)
                    .map_err(setup)?;
                t6.insert(v.table, Arc::new(t));
            }
        }
        Ok((
            Policy::with_vrfs(set_of(&self.rules)?, t4, &iif).map_err(refused)?,
            Policy6::with_vrfs(set_of(&self.rules6)?, t6, &iif).map_err(refused)?,
        ))
    }
}

#[cfg(test)]
mod tests;
