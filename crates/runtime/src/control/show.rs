//! `netbatch show`: each table for a person (aligned columns, as VPP's `show runtime`
//! and iproute2 print them) and the same data for a program (`--json`).
//!
//! Every table is made from a counters document (`run::summed`: `totals` and one
//! document per worker) or from the tables the control plane keeps; nothing here reads
//! a worker. Ratios (vectors per call, TSC cycles per packet, idle share) are computed
//! here from the counts, so they stay right after `clear counters` ([`since`]).

use std::fmt::Write as _;

use netbatch_stack::filter::{Chain, HookPoint, Rule, Verdict};
use netbatch_stack::neigh::NeighViewOf;
use netbatch_stack::route::{Family, RouteKind, RouteOf, Routes, Routes6, RoutesOf};
use serde_json::{Map, Value, json};

use super::Reply;

/// Keys that are levels, not counts: `since` keeps them as they are now.
const GAUGES: &[&str] = &[
    "held_packets",
    "neighbours",
    "neighbours6",
    "routes",
    "routes6",
    "backlog_len",
    "packets_per_call",
    "cycles_per_packet",
];

/// The counts of `now` minus those of `base` (the document at `clear counters`):
/// numbers are subtracted (levels kept), arrays of named objects matched by name.
pub fn since(now: &Value, base: &Value) -> Value {
    match (now, base) {
        (Value::Object(n), Value::Object(b)) => {
            let mut out = Map::new();
            for (k, v) in n {
                let d = match b.get(k) {
                    Some(bv) if !GAUGES.contains(&k.as_str()) => since(v, bv),
                    _ => v.clone(),
                };
                out.insert(k.clone(), d);
            }
            Value::Object(out)
        }
        (Value::Array(n), Value::Array(b)) => Value::Array(
            n.iter()
                .enumerate()
                .map(|(i, v)| {
                    let matched = match v.get("name") {
                        Some(name) => b.iter().find(|x| x.get("name") == Some(name)),
                        None => b.get(i),
                    };
                    matched.map_or_else(|| v.clone(), |bv| since(v, bv))
                })
                .collect(),
        ),
        (Value::Number(n), Value::Number(b)) => match (n.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => json!(x.saturating_sub(y)),
            _ => Value::Number(n.clone()),
        },
        _ => now.clone(),
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn workers(c: &Value) -> &[Value] {
    c["workers"].as_array().map_or(&[], Vec::as_slice)
}

/// A table with a header row, columns aligned (text left, numbers right).
struct Table {
    head: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(head: &[&'static str]) -> Self {
        Self {
            head: head.to_vec(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    fn render(&self, out: &mut String) {
        let n = self.head.len();
        let mut w: Vec<usize> = self.head.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.len());
            }
        }
        let numeric = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_digit() || c == '.' || c == '%' || c == '-')
        };
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                if i > 0 && numeric(c) {
                    let _ = write!(l, "{c:>width$}", width = w[i]);
                } else {
                    let _ = write!(l, "{c:<width$}", width = w[i]);
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(self.head.clone(), out);
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect(), out);
        }
    }
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// `show runtime`: per worker, its busy/idle share and per stage the calls, vectors per
/// call, packets and TSC cycles per packet (those only while `timing on`).
pub fn runtime(c: &Value) -> Reply {
    let mut text = String::new();
    let mut data = Vec::new();
    for (i, w) in workers(c).iter().enumerate() {
        let s = &w["worker"];
        let (busy, idle) = (u(s, "busy_ns"), u(s, "idle_ns"));
        let idle_share = if busy + idle == 0 {
            0.0
        } else {
            idle as f64 / (busy + idle) as f64
        };
        let _ = writeln!(
            text,
            "worker {i}: rounds {} processed {} idle {:.1}% time_squeeze {}",
            u(s, "rounds"),
            u(s, "processed"),
            idle_share * 100.0,
            u(s, "time_squeeze")
        );
        let mut t = Table::new(&[
            "Name",
            "Calls",
            "Vectors",
            "Vectors/Call",
            "TSC cyc/pkt",
            "Drops",
        ]);
        let mut stages = Vec::new();
        for st in w["stages"].as_array().into_iter().flatten() {
            let (p, calls, cyc) = (u(st, "packets"), u(st, "calls"), u(st, "cycles"));
            let drops: u64 = st["drops"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_u64())
                .sum();
            if calls == 0 && drops == 0 {
                continue;
            }
            t.row(vec![
                st["name"].as_str().unwrap_or("?").to_string(),
                calls.to_string(),
                p.to_string(),
                ratio(p, calls),
                if cyc == 0 { "-".into() } else { ratio(cyc, p) },
                drops.to_string(),
            ]);
            stages.push(json!({
                "name": st["name"], "calls": calls, "vectors": p,
                "vectors_per_call": if calls == 0 { 0.0 } else { p as f64 / calls as f64 },
                "tsc_cycles": cyc,
                "tsc_cycles_per_packet": if p == 0 { 0.0 } else { cyc as f64 / p as f64 },
                "drops": drops,
            }));
        }
        t.render(&mut text);
        text.push('\n');
        data.push(json!({
            "worker": i, "rounds": u(s, "rounds"), "processed": u(s, "processed"),
            "busy_ns": busy, "idle_ns": idle, "idle_share": idle_share,
            "stages": stages,
        }));
    }
    if workers(c).iter().all(|w| {
        w["stages"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|s| u(s, "cycles") == 0)
    }) {
        text +=
            "(TSC cycles per packet: per-stage timing is off; `netbatch timing on` turns it on)\n";
    }
    Reply::ok(text, json!({ "workers": data }))
}

/// Adds to `show runtime` how the packet pool and the IPv4 FIB's first level are backed
/// (`m` as `Control::memory` makes it).
pub fn memory(r: &mut Reply, m: Value) {
    let mib = |v: &Value| {
        v.as_u64()
            .map_or_else(|| "?".to_string(), |b| (b >> 20).to_string())
    };
    let line = format!(
        "memory: packet pool on {} ({} of {} MiB in huge pages), IPv4 FIB first level on {} ({} MiB in huge pages)\n",
        m["pool"].as_str().unwrap_or("?"),
        mib(&m["pool_huge_bytes"]),
        mib(&m["pool_bytes"]),
        m["fib4"].as_str().unwrap_or("?"),
        mib(&m["fib4_huge_bytes"]),
    );
    r.text.insert_str(0, &line);
    r.data["memory"] = m;
}

/// `show errors`: per stage and reason, the wire packets dropped, with the reason's
/// description (VPP's `show errors`), summed over the workers. The description is the
/// one the workers' documents carry with the reason (`drop_reasons`: that of the reason
/// the stage dropped with, so also of a stage the registry does not list), else the
/// registry's.
pub fn errors(c: &Value) -> Reply {
    let mut sums: Vec<(String, String, u64)> = Vec::new();
    for w in workers(c) {
        for st in w["stages"].as_array().into_iter().flatten() {
            let stage = st["name"].as_str().unwrap_or("?");
            for (r, n) in st["drops"].as_object().into_iter().flatten() {
                let n = n.as_u64().unwrap_or(0);
                match sums.iter_mut().find(|(s, x, _)| s == stage && x == r) {
                    Some(e) => e.2 += n,
                    None => sums.push((stage.to_string(), r.clone(), n)),
                }
            }
        }
    }
    // A port's own receive drops (before any stage), on the port's line as `port NAME`.
    let mut port_descriptions: Vec<(String, String)> = Vec::new();
    for w in workers(c) {
        for p in w["ports"].as_array().into_iter().flatten() {
            let node = format!("port {}", p["name"].as_str().unwrap_or("?"));
            for r in p["rx_drop_reasons"].as_array().into_iter().flatten() {
                let (reason, n) = (r["reason"].as_str().unwrap_or("?"), r["count"].as_u64());
                match sums.iter_mut().find(|(s, x, _)| *s == node && x == reason) {
                    Some(e) => e.2 += n.unwrap_or(0),
                    None => sums.push((node.clone(), reason.to_string(), n.unwrap_or(0))),
                }
                if let Some(d) = r["description"].as_str() {
                    port_descriptions.push((reason.to_string(), d.to_string()));
                }
            }
        }
    }
    sums.retain(|e| e.2 > 0);
    sums.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    let mut t = Table::new(&["Count", "Node", "Reason", "Description"]);
    let mut data = Vec::new();
    let carried = |name: &str| {
        workers(c)
            .iter()
            .flat_map(|w| w["drop_reasons"].as_array().into_iter().flatten())
            .find(|r| r["name"] == name)
            .and_then(|r| r["description"].as_str())
            .map(str::to_string)
            .or_else(|| {
                port_descriptions
                    .iter()
                    .find(|(r, _)| r == name)
                    .map(|(_, d)| d.clone())
            })
    };
    for (stage, r, n) in &sums {
        let d = carried(r).unwrap_or_else(|| describe(r).to_string());
        t.row(vec![n.to_string(), stage.clone(), r.clone(), d.clone()]);
        data.push(json!({ "count": n, "node": stage, "reason": r, "description": d }));
    }
    let mut text = String::new();
    t.render(&mut text);
    Reply::ok(text, json!({ "errors": data }))
}

fn describe(name: &str) -> &'static str {
    netbatch_datapath::reason_sets()
        .into_iter()
        .flatten()
        .find(|r| r.name() == name)
        .map_or("", |r| r.description())
}

/// `show links`: each kernel port's link as the link watch follows it: up or down (and
/// why), how often it changed, and what the kernel dropped of what it was given to send.
pub fn links(l: &Value) -> Reply {
    let mut text = String::new();
    for k in l.as_array().into_iter().flatten() {
        let b = |f: &str| k[f].as_bool().unwrap_or(false);
        let state = match (b("admin_up"), b("carrier")) {
            (true, true) => "up",
            (true, false) => "down (no carrier)",
            (false, _) => "down (administratively)",
        };
        let _ = writeln!(
            text,
            "port {}: link {} {state}, {} change(s), kernel tx_dropped {}",
            k["port"].as_str().unwrap_or("?"),
            k["interface"].as_str().unwrap_or("?"),
            u(k, "changes"),
            u(k, "kernel_tx_dropped"),
        );
    }
    Reply::ok(text, l.clone())
}

/// `show ports`: per port its kind and link state, per queue (one per worker) packets,
/// bytes and drops; `rx_dropped` are frames the kernel or the ring dropped before we saw
/// them, `rx_nobuf` frames without a buffer, `tx_refused` frames the port did not take.
pub fn ports(c: &Value, kinds: &[String], links: &[Value]) -> Reply {
    let mut text = String::new();
    let mut data = Vec::new();
    let first = workers(c).first();
    let n = first
        .and_then(|w| w["ports"].as_array())
        .map_or(0, Vec::len);
    for pi in 0..n {
        let name = first.map_or("?", |w| w["ports"][pi]["name"].as_str().unwrap_or("?"));
        let link = links.get(pi).and_then(Value::as_str).unwrap_or("-");
        let kind = kinds.get(pi).map_or("?", String::as_str);
        let _ = writeln!(text, "port {name}: {kind}, link {link}");
        let mut t = Table::new(&[
            "queue",
            "rx_packets",
            "rx_bytes",
            "rx_dropped",
            "rx_nobuf",
            "tx_packets",
            "tx_bytes",
            "tx_refused",
        ]);
        let mut queues = Vec::new();
        for (wi, w) in workers(c).iter().enumerate() {
            let p = &w["ports"][pi];
            t.row(vec![
                format!("worker {wi}"),
                u(p, "rx_packets").to_string(),
                u(p, "rx_bytes").to_string(),
                u(p, "rx_dropped").to_string(),
                u(p, "rx_nobuf").to_string(),
                u(p, "tx_packets").to_string(),
                u(p, "tx_bytes").to_string(),
                u(p, "tx_refused").to_string(),
            ]);
            let mut q = p.clone();
            if let Some(o) = q.as_object_mut() {
                o.insert("worker".into(), json!(wi));
            }
            queues.push(q);
        }
        t.render(&mut text);
        // How each worker's queue works, in the backend's words (which do not name the
        // worker: the line does).
        for (wi, w) in workers(c).iter().enumerate() {
            if let Some(mode) = w["ports"][pi]["mode"].as_str().filter(|m| !m.is_empty()) {
                let _ = writeln!(text, "  worker {wi}: {mode}");
            }
        }
        text.push('\n');
        data.push(json!({ "name": name, "kind": kind, "link": links.get(pi).cloned().unwrap_or(Value::Null), "queues": queues }));
    }
    Reply::ok(text, json!({ "ports": data }))
}

fn iface(names: &[String], i: Option<u16>) -> String {
    match i {
        Some(i) => names
            .get(usize::from(i))
            .cloned()
            .unwrap_or_else(|| format!("if{i}")),
        None => "-".into(),
    }
}

/// A route as `ip route` prints it (an IPv6 one as `ip -6 route` does, without the
/// metric and preference netbatch does not have: connected and local IPv6 routes have
/// no scope word, as the kernel's have universe scope).
pub fn route_line<F: Family>(r: &RouteOf<F>, names: &[String]) -> String {
    let v6 = F::NAME == "inet6";
    let dev = |r: &RouteOf<F>| {
        r.out_if
            .map(|i| format!(" dev {}", iface(names, Some(i))))
            .unwrap_or_default()
    };
    let p = if F::prefix_len(&r.prefix) == 0 {
        "default".to_string()
    } else {
        r.prefix.to_string()
    };
    if let Some(m) = &r.multipath {
        // As `ip route` prints RTA_MULTIPATH: the prefix, then a tab-indented line a hop.
        let mut s = p;
        for h in m.hops() {
            s += "\n\tnexthop";
            if let Some(g) = h.gateway {
                let _ = write!(s, " via {g}");
            }
            let _ = write!(
                s,
                " dev {} weight {}",
                iface(names, Some(h.out_if)),
                h.weight
            );
        }
        return s;
    }
    let addr = F::addr(F::prefix_bits(&r.prefix));
    match r.kind {
        RouteKind::Unicast => match r.gateway {
            Some(g) => format!("{p} via {g}{}", dev(r)),
            None if v6 => format!("{p}{}", dev(r)),
            None => format!("{p}{} scope link", dev(r)),
        },
        RouteKind::Local if v6 => format!("local {addr}{}", dev(r)),
        RouteKind::Local => format!("local {addr}{} scope host", dev(r)),
        RouteKind::Broadcast => format!("broadcast {addr}{} scope link", dev(r)),
        RouteKind::Blackhole => format!("blackhole {p}"),
        RouteKind::Unreachable => format!("unreachable {p}"),
        RouteKind::Prohibit => format!("prohibit {p}"),
        RouteKind::Throw => format!("throw {p}"),
    }
}

/// One family's routes in order of address, then length (as `ip route show table all`
/// orders them), as lines and as data.
fn route_rows<F: Family>(t: &RoutesOf<F>, names: &[String], text: &mut String) -> Vec<Value> {
    let mut rs: Vec<&RouteOf<F>> = t.iter().collect();
    rs.sort_by_key(|r| (F::prefix_bits(&r.prefix), F::prefix_len(&r.prefix)));
    let mut data = Vec::with_capacity(rs.len());
    for r in rs {
        let line = route_line(r, names);
        text.push_str(&line);
        text.push('\n');
        data.push(json!({
            "prefix": r.prefix.to_string(),
            "kind": format!("{:?}", r.kind).to_lowercase(),
            "gateway": r.gateway.map(|g| g.to_string()),
            "dev": r.out_if.map(|i| iface(names, Some(i))),
            "line": line,
        }));
    }
    data
}

/// `show routes`: the IPv4 table, then the IPv6 one (`ip route`, then `ip -6 route`);
/// `routes` and `routes6` in the data.
pub fn routes(t: &Routes, t6: &Routes6, names: &[String]) -> Reply {
    let mut text = String::new();
    let data = route_rows(t, names, &mut text);
    let data6 = route_rows(t6, names, &mut text);
    Reply::ok(text, json!({ "routes": data, "routes6": data6 }))
}

/// One family's neighbour entries over the workers, as `ip neigh` prints them (an entry
/// once, from the first worker that has it, with the workers that know it).
fn neigh_rows<F: Family>(
    per: &[Vec<NeighViewOf<F>>],
    names: &[String],
    text: &mut String,
) -> Vec<Value> {
    let mut seen: Vec<(NeighViewOf<F>, Vec<usize>)> = Vec::new();
    for (wi, es) in per.iter().enumerate() {
        for e in es {
            match seen
                .iter_mut()
                .find(|(x, _)| x.iface == e.iface && x.ip == e.ip)
            {
                Some((_, ws)) => ws.push(wi),
                None => seen.push((*e, vec![wi])),
            }
        }
    }
    seen.sort_by_key(|(e, _)| (e.iface, e.ip));
    let mut data = Vec::new();
    for (e, ws) in &seen {
        let dev = iface(names, Some(e.iface));
        let mac = e.mac.map(|m| m.to_string());
        let _ = write!(text, "{} dev {dev}", e.ip);
        if let Some(m) = &mac {
            let _ = write!(text, " lladdr {m}");
        }
        let _ = write!(text, " {}", e.state.name());
        if e.queued > 0 {
            let _ = write!(text, " queued {}", e.queued);
        }
        if per.len() > 1 {
            let _ = write!(text, " workers {ws:?}");
        }
        text.push('\n');
        data.push(json!({
            "address": e.ip.to_string(), "dev": dev, "lladdr": mac,
            "state": e.state.name(), "queued": e.queued, "workers": ws,
        }));
    }
    data
}

/// `show neigh`: every worker's IPv4 entries, then its IPv6 ones (`ip neigh`, then
/// `ip -6 neigh`); `neighbours` and `neighbours6` in the data.
pub fn neigh<A: Family, B: Family>(
    per: &[Vec<NeighViewOf<A>>],
    per6: &[Vec<NeighViewOf<B>>],
    names: &[String],
) -> Reply {
    let mut text = String::new();
    let data = neigh_rows(per, names, &mut text);
    let data6 = neigh_rows(per6, names, &mut text);
    Reply::ok(text, json!({ "neighbours": data, "neighbours6": data6 }))
}

/// A rule in the words `rule add` takes.
pub fn rule_text(r: &Rule, names: &[String]) -> String {
    let mut s = String::new();
    if let Some(p) = r.proto {
        let name = match p {
            1 => "icmp".to_string(),
            6 => "tcp".into(),
            17 => "udp".into(),
            n => n.to_string(),
        };
        let _ = write!(s, "proto {name} ");
    }
    if let Some(p) = r.src {
        let _ = write!(s, "src {p} ");
    }
    if let Some(p) = r.dst {
        let _ = write!(s, "dst {p} ");
    }
    for (k, pr) in [("sport", r.sport), ("dport", r.dport)] {
        if let Some(pr) = pr {
            if pr.lo == pr.hi {
                let _ = write!(s, "{k} {} ", pr.lo);
            } else {
                let _ = write!(s, "{k} {}-{} ", pr.lo, pr.hi);
            }
        }
    }
    if let Some(i) = r.in_if {
        let _ = write!(s, "in {} ", iface(names, Some(i)));
    }
    if let Some(i) = r.out_if {
        let _ = write!(s, "out {} ", iface(names, Some(i)));
    }
    if let Some((v, m)) = r.mark {
        let _ = write!(s, "mark {v:#x}/{m:#x} ");
    }
    if let Some(c) = r.ct {
        let _ = write!(s, "{}", netbatch_stack::ct::describe_match(&c));
    }
    match r.ct_mark_set {
        Some(netbatch_stack::filter::MarkSet::Value(v)) => {
            let _ = write!(s, "ct_mark_set {v:#x} ");
        }
        Some(netbatch_stack::filter::MarkSet::Packet) => {
            let _ = write!(s, "ct_mark_set mark ");
        }
        None => {}
    }
    if r.offload {
        let _ = write!(s, "offload true ");
    }
    let _ = write!(s, "action {}", verdict(r.verdict));
    s
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Accept => "accept",
        Verdict::Drop => "drop",
        Verdict::Continue => "continue",
    }
}

/// `show rules`: per hook its policy and rules, numbered as `rule del` takes them, with
/// the wire packets each matched (since the hook's rules last changed).
pub fn rules(chains: &[(HookPoint, Chain)], c: &Value, names: &[String]) -> Reply {
    let hits = |node: &str, ev: &str| -> u64 {
        workers(c)
            .iter()
            .flat_map(|w| w["stages"].as_array().into_iter().flatten())
            .filter(|s| s["name"] == node)
            .map(|s| u(&s["events"], ev))
            .sum()
    };
    let mut text = String::new();
    let mut data = Vec::new();
    for h in HookPoint::ALL {
        let Some((_, chain)) = chains.iter().rev().find(|(p, _)| *p == h) else {
            continue;
        };
        let node = h.node();
        let _ = writeln!(
            text,
            "hook {} (policy {}, {} hits)",
            h.name(),
            verdict(chain.policy),
            hits(node, "policy")
        );
        let mut rows = Vec::new();
        // Numbered as `rule del HOOK N` takes them; hits in wire packets.
        let mut t = Table::new(&["index", "hits", "rule"]);
        for (i, r) in chain.rules.iter().enumerate() {
            let ev = if i < 16 {
                format!("rule_{i}")
            } else {
                "rules_16_and_above".into()
            };
            let n = hits(node, &ev);
            let words = rule_text(r, names);
            t.row(vec![i.to_string(), n.to_string(), words.clone()]);
            rows.push(json!({ "index": i, "hits": n, "rule": words }));
        }
        if chain.rules.is_empty() {
            text += "  no rules: every packet takes the policy\n";
        } else {
            let mut table = String::new();
            t.render(&mut table);
            for l in table.lines() {
                let _ = writeln!(text, "  {l}");
            }
        }
        data.push(json!({ "hook": h.name(), "policy": verdict(chain.policy), "policy_hits": hits(node, "policy"), "rules": rows }));
    }
    if data.is_empty() {
        text += "no rules\n";
    }
    Reply::ok(text, json!({ "hooks": data }))
}

/// `show sockets`: bound UDP sockets with their queue (wire packets) and counters.
pub fn sockets(socks: &[Value]) -> Reply {
    let mut t = Table::new(&[
        "Local",
        "Queued",
        "Capacity",
        "Enqueued",
        "Queue full",
        "Read",
        "Sent",
    ]);
    for s in socks {
        t.row(vec![
            s["local"].as_str().unwrap_or("?").to_string(),
            u(s, "queued").to_string(),
            u(s, "capacity").to_string(),
            u(s, "enqueued").to_string(),
            u(s, "queue_full").to_string(),
            u(s, "read").to_string(),
            u(s, "sent").to_string(),
        ]);
    }
    let mut text = String::new();
    t.render(&mut text);
    Reply::ok(text, json!({ "sockets": socks }))
}

/// `show linux`: the kernel-table mirror's counters (events applied, skips by reason,
/// resyncs, overruns, errors) and what it holds.
pub fn linux(l: &Value) -> Reply {
    let mut text = String::new();
    let n = |k: &str| u(l, k);
    let _ = writeln!(
        text,
        "mirrored: {} route(s), {} IPv6 route(s), {} neighbour(s)\nroutes added {} replaced {} deleted {}; neighbours set {} deleted {}; interfaces changed {}",
        n("routes"),
        n("routes6"),
        n("neighbours"),
        n("routes_added"),
        n("routes_replaced"),
        n("routes_deleted"),
        n("neighbours_set"),
        n("neighbours_deleted"),
        n("interface_changes")
    );
    let _ = writeln!(
        text,
        "messages {} (notifications {}), publications {} (last: {} changes in {} us), resyncs {} (last: {} changes), overruns {}, errors {}",
        n("messages"),
        n("notifications"),
        n("batches"),
        n("last_batch_changes"),
        n("last_batch_us"),
        n("resyncs"),
        n("last_resync_changes"),
        n("overruns"),
        n("errors")
    );
    if n("vrfs") > 0 || n("vrf_changes") > 0 {
        let _ = writeln!(
            text,
            "VRFs from the kernel's VRF devices: {} (changed {} time(s))",
            n("vrfs"),
            n("vrf_changes")
        );
    }
    if let Some(e) = l.get("last_error").and_then(Value::as_str) {
        let _ = writeln!(text, "last error: {e}");
    }
    for (reason, c) in l["skipped"].as_object().into_iter().flatten() {
        if c.as_u64().unwrap_or(0) > 0 {
            let _ = writeln!(text, "skipped {reason}: {c}");
        }
    }
    Reply::ok(text, l.clone())
}

/// `show softnet`: per worker what `/proc/net/softnet_stat` shows per CPU.
pub fn softnet(c: &Value) -> Reply {
    const COLUMNS: [&str; 9] = [
        "processed",
        "rounds",
        "time_squeeze",
        "dropped",
        "received_rps",
        "backlog_polls",
        "backlog_len",
        "handed_off",
        "taken_over",
    ];
    let mut head = vec!["worker"];
    head.extend(COLUMNS);
    let mut t = Table::new(&head);
    let mut data = Vec::new();
    for (i, w) in workers(c).iter().enumerate() {
        let s = &w["worker"];
        let mut row = vec![i.to_string()];
        for k in COLUMNS {
            row.push(if s.get(k).is_some() {
                u(s, k).to_string()
            } else {
                "-".into()
            });
        }
        t.row(row);
        let mut d = s.clone();
        if let Some(o) = d.as_object_mut() {
            o.insert("worker".into(), json!(i));
        }
        data.push(d);
    }
    let mut text = String::new();
    t.render(&mut text);
    Reply::ok(text, json!({ "softnet": data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(rx: u64, drops: u64, held: u64) -> Value {
        json!({
            "totals": {"rx_packets": rx, "held_packets": held},
            "workers": [{
                "rx_packets": rx, "held_packets": held,
                "stages": [
                    {"name": "ip4-input", "packets": rx, "calls": rx / 4, "cycles": 0, "drops": {}, "events": {}},
                    {"name": "ip4-route", "packets": rx, "calls": rx / 4, "cycles": 0, "drops": {"no_route": drops}, "events": {}},
                ],
                "ports": [{"name": "p0", "rx_packets": rx, "rx_bytes": rx * 60}],
                "worker": {"rounds": 10, "processed": rx, "busy_ns": 300, "idle_ns": 700},
            }],
        })
    }

    /// After a clear, counts are what came since; levels (held) are as they are now;
    /// stages are matched by name even when a graph change reordered them.
    #[test]
    fn since_subtracts_counts_and_keeps_levels() {
        let base = doc(100, 10, 5);
        let mut now = doc(180, 25, 7);
        now["workers"][0]["stages"]
            .as_array_mut()
            .expect("array")
            .reverse();
        let d = since(&now, &base);
        assert_eq!(d["totals"]["rx_packets"], 80);
        assert_eq!(d["totals"]["held_packets"], 7);
        let route = d["workers"][0]["stages"]
            .as_array()
            .expect("stages")
            .iter()
            .find(|s| s["name"] == "ip4-route")
            .expect("ip4-route");
        assert_eq!(route["drops"]["no_route"], 15);
        assert_eq!(route["packets"], 80);
        assert_eq!(d["workers"][0]["ports"][0]["rx_bytes"], 80 * 60);
    }

    /// `show runtime` computes vectors per call and the idle share from the counts;
    /// `show errors` names the reason with its description.
    #[test]
    fn runtime_and_errors_tables_say_what_the_counts_say() {
        let c = doc(400, 30, 0);
        let r = runtime(&c);
        assert!(r.text.contains("idle 70.0%"), "{}", r.text);
        let line = r
            .text
            .lines()
            .find(|l| l.starts_with("ip4-route"))
            .expect("row");
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells, ["ip4-route", "100", "400", "4.00", "-", "30"]);
        assert_eq!(r.data["workers"][0]["stages"][1]["vectors_per_call"], 4.0);
        let e = errors(&c);
        let row = e.text.lines().nth(1).expect("one error row");
        let cells: Vec<&str> = row.split_whitespace().take(3).collect();
        assert_eq!(cells, ["30", "ip4-route", "no_route"], "{row}");
        assert!(row.contains(describe("no_route")) && !describe("no_route").is_empty());
    }

    /// A reason the registry does not list (a stage's graph added it: the toy protocol
    /// of `tests/toy_protocol.rs`) is described as the worker's document carries it.
    #[test]
    fn errors_describe_a_reason_as_the_workers_carry_it() {
        let mut c = doc(10, 0, 0);
        c["workers"][0]["stages"][0]["drops"] = json!({"made_up_reason": 3});
        c["workers"][0]["drop_reasons"] =
            json!([{"name": "made_up_reason", "description": "a made-up description"}]);
        assert_eq!(describe("made_up_reason"), "");
        let e = errors(&c);
        let row = e.text.lines().nth(1).expect("one error row");
        assert!(row.ends_with("a made-up description"), "{row}");
        assert_eq!(e.data["errors"][0]["description"], "a made-up description");
    }

    /// A port's own receive drops are rows of `show errors`, node `port NAME`, summed over
    /// the workers' queues, with the backend's description; zero counts are no rows.
    #[test]
    fn errors_list_a_ports_own_drops_by_reason() {
        let mut c = doc(10, 0, 0);
        let reasons = |n: u64| {
            json!([
                {"reason": "vhost_chain_memory", "description": "outside memory", "count": n},
                {"reason": "vhost_frame_long", "description": "too long", "count": 0}
            ])
        };
        c["workers"][0]["ports"][0]["rx_drop_reasons"] = reasons(2);
        let mut w1 = c["workers"][0].clone();
        w1["stages"] = json!([]);
        w1["ports"][0]["rx_drop_reasons"] = reasons(3);
        c["workers"].as_array_mut().unwrap().push(w1);
        let e = errors(&c);
        let rows: Vec<&Value> = e.data["errors"].as_array().unwrap().iter().collect();
        let port = rows
            .iter()
            .find(|r| r["node"] == "port p0")
            .expect("the port's row");
        assert_eq!(port["count"], 5);
        assert_eq!(port["reason"], "vhost_chain_memory");
        assert_eq!(port["description"], "outside memory");
        assert!(!rows.iter().any(|r| r["reason"] == "vhost_frame_long"));
    }

    /// `show ports` names each worker once on its queue's line (the backend's words do
    /// not name it), and `show rules` puts a header over each hook's numbered rules.
    #[test]
    fn ports_and_rules_tables_have_one_worker_name_and_a_header() {
        let mut c = doc(10, 0, 0);
        c["workers"][0]["ports"][0]["mode"] = json!("TPACKET_V3 ring 4 MiB");
        let p = ports(
            &c,
            &["af_packet on veth0, mtu 1500".to_string()],
            &[json!("up")],
        );
        assert!(
            p.text
                .starts_with("port p0: af_packet on veth0, mtu 1500, link up\n"),
            "{}",
            p.text
        );
        assert!(
            p.text.contains("\n  worker 0: TPACKET_V3 ring 4 MiB\n"),
            "{}",
            p.text
        );
        assert_eq!(p.text.matches("worker 0:").count(), 1, "{}", p.text);
        let mut rule = Rule::any(Verdict::Drop);
        rule.proto = Some(17);
        rule.dport = Some(netbatch_stack::filter::PortRange { lo: 9999, hi: 9999 });
        let chains = vec![(
            HookPoint::Forward,
            Chain {
                rules: vec![rule],
                policy: Verdict::Accept,
            },
        )];
        let r = rules(&chains, &c, &["p0".to_string()]);
        let lines: Vec<&str> = r.text.lines().collect();
        assert_eq!(
            lines[0], "hook forward (policy accept, 0 hits)",
            "{}",
            r.text
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["index", "hits", "rule"],
            "{}",
            r.text
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["0", "0", "proto", "udp", "dport", "9999", "action", "drop"],
            "{}",
            r.text
        );
    }

    /// Routes print as `ip route` prints them.
    #[test]
    fn routes_print_as_ip_route_does() {
        let names = vec!["p0".to_string(), "p1".to_string()];
        let r = |s: &str, kind, out_if, gw: Option<&str>| netbatch_stack::route::Route {
            prefix: s.parse().expect("prefix"),
            kind,
            out_if,
            gateway: gw.map(|g| g.parse().expect("addr")),
            multipath: None,
        };
        assert_eq!(
            route_line(
                &r(
                    "0.0.0.0/0",
                    RouteKind::Unicast,
                    Some(1),
                    Some("198.51.100.2")
                ),
                &names
            ),
            "default via 198.51.100.2 dev p1"
        );
        assert_eq!(
            route_line(
                &r("192.0.2.0/24", RouteKind::Unicast, Some(0), None),
                &names
            ),
            "192.0.2.0/24 dev p0 scope link"
        );
        assert_eq!(
            route_line(&r("192.0.2.1/32", RouteKind::Local, Some(0), None), &names),
            "local 192.0.2.1 dev p0 scope host"
        );
        assert_eq!(
            route_line(
                &r("203.0.113.0/24", RouteKind::Blackhole, None, None),
                &names
            ),
            "blackhole 203.0.113.0/24"
        );
    }

    /// A multipath route prints as `ip route` prints one (iproute2's `print_rta_multipath`:
    /// the prefix, then each next hop on its own tab-indented line with its weight), a
    /// next hop without gateway as `nexthop dev X`.
    #[test]
    fn multipath_routes_print_as_ip_route_does() {
        use netbatch_stack::route::{Multipath, NextHop};
        let names = vec!["p0".to_string(), "p1".to_string()];
        let hop = |gw: Option<&str>, out_if, weight| NextHop {
            gateway: gw.map(|g| g.parse().expect("addr")),
            out_if,
            weight,
        };
        let m = Multipath::new(vec![
            hop(Some("192.0.2.9"), 0, 1),
            hop(Some("198.51.100.9"), 1, 2),
            hop(None, 1, 256),
        ])
        .expect("next hops");
        let r = netbatch_stack::route::Route::multipath(
            "10.0.0.0/8".parse().expect("prefix"),
            m.clone(),
        );
        assert_eq!(
            route_line(&r, &names),
            "10.0.0.0/8\n\tnexthop via 192.0.2.9 dev p0 weight 1\n\
             \tnexthop via 198.51.100.9 dev p1 weight 2\n\tnexthop dev p1 weight 256"
        );
        let d = netbatch_stack::route::Route::multipath("0.0.0.0/0".parse().expect("prefix"), m);
        assert!(
            route_line(&d, &names)
                .starts_with("default\n\tnexthop via 192.0.2.9 dev p0 weight 1\n"),
            "{}",
            route_line(&d, &names)
        );
    }

    /// IPv6 routes print as `ip -6 route` prints them (iproute2's `print_route`, without
    /// the metric and `pref` netbatch has not): connected and local routes have no scope
    /// word, a default route is `default`, multipath as for IPv4.
    #[test]
    fn ipv6_routes_print_as_ip_6_route_does() {
        use netbatch_stack::route::{Multipath6, NextHop6, Route6};
        let names = vec!["p0".to_string(), "p1".to_string()];
        let r = |s: &str, kind, out_if, gw: Option<&str>| {
            Route6::new(
                s.parse().expect("prefix"),
                kind,
                out_if,
                gw.map(|g| g.parse().expect("addr")),
            )
        };
        for (route, line) in [
            (
                r("::/0", RouteKind::Unicast, Some(1), Some("fe80::1")),
                "default via fe80::1 dev p1",
            ),
            (
                r("2001:db8:1::/64", RouteKind::Unicast, Some(0), None),
                "2001:db8:1::/64 dev p0",
            ),
            (
                r("2001:db8:1::1/128", RouteKind::Local, Some(0), None),
                "local 2001:db8:1::1 dev p0",
            ),
            (
                r("2001:db8:dead::/48", RouteKind::Blackhole, None, None),
                "blackhole 2001:db8:dead::/48",
            ),
            (
                r("2001:db8:5::/48", RouteKind::Unreachable, None, None),
                "unreachable 2001:db8:5::/48",
            ),
        ] {
            assert_eq!(route_line(&route, &names), line);
        }
        let hop = |gw: &str, out_if, weight| NextHop6 {
            gateway: Some(gw.parse().expect("addr")),
            out_if,
            weight,
        };
        let m = Multipath6::new(vec![hop("fe80::1", 0, 1), hop("2001:db8::2", 1, 3)])
            .expect("next hops");
        let r = Route6::multipath("2001:db8:3::/48".parse().expect("prefix"), m);
        assert_eq!(
            route_line(&r, &names),
            "2001:db8:3::/48\n\tnexthop via fe80::1 dev p0 weight 1\n\
             \tnexthop via 2001:db8::2 dev p1 weight 3"
        );
    }
}
