//! `[nat.prerouting]` and `[nat.postrouting]`: NAT44 chains in nftables' terms (a
//! `type nat` chain per hook), looked at for a connection's first packet only. A rule
//! has a filter rule's matches (`proto`, `src`, `dst`, ports, `in`/`out`, `mark`,
//! `ct_*`) and an `action`: in prerouting `dnat` with `to = "ADDR"` or `"ADDR:PORT"`
//! (nft's `dnat to ADDR:PORT`; a port needs `proto` tcp or udp); in postrouting `snat`
//! with `to = "ADDR"`, `"ADDR-ADDR"`, each optionally `":PORT"` or `":PORT-PORT"` (nft's
//! `snat to 203.0.113.1-203.0.113.4:1024-2048`) and `masquerade` (the egress interface's
//! address; `to = ":PORT-PORT"` optional); `accept` anywhere: no translation, no later
//! rule. A chain's policy is accept (a NAT chain decides translations, not fates).
//! NAT turns connection tracking on.
//!
//! `[nat] udp_mapping` and `udp_filtering`: UDP's behaviour (RFC 4787),
//! `"endpoint-dependent"` (the default, Linux's) or `"endpoint-independent"` (REQ-1: one
//! outside endpoint per inside endpoint whatever the remote; REQ-8: what any remote sends
//! to it is let in, as destination NAT). Independent filtering needs independent
//! mapping, and independent mapping one worker.

use core::net::Ipv4Addr;

use netbatch_stack::filter::{HookPoint, PortRange, Verdict};
use netbatch_stack::nat::{Action, Config, NatChain, NatRule};

use super::Errs;
use super::filter::{ChainFile, matches_of};
use super::ports::Names;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NatFile {
    prerouting: Option<ChainFile>,
    postrouting: Option<ChainFile>,
    udp_mapping: Option<String>,
    udp_filtering: Option<String>,
}

/// `endpoint-independent` (true) or `endpoint-dependent` (false) at `key`.
fn behaviour(v: Option<&str>, key: &str, e: &mut Errs) -> bool {
    match v {
        None | Some("endpoint-dependent") => false,
        Some("endpoint-independent") => true,
        Some(other) => {
            e.add(
                key,
                format!(
                    "'{other}' is not a behaviour netbatch has: \"endpoint-independent\" (RFC \
                     4787) or \"endpoint-dependent\" (Linux's)"
                ),
            );
            false
        }
    }
}

/// `ADDR` or `ADDR-ADDR`.
fn addrs(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let (a, b) = (
        a.trim().parse::<Ipv4Addr>().ok()?,
        b.trim().parse::<Ipv4Addr>().ok()?,
    );
    let (a, b) = (u32::from(a), u32::from(b));
    (a <= b).then_some((a, b))
}

/// `ADDR[-ADDR][:PORTS]` split at the port's colon.
fn split_port(s: &str) -> (&str, Option<&str>) {
    match s.split_once(':') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    }
}

/// The action of rule `r` (`action`, `to`) in the chain of `hook`, under `rkey`.
fn action(
    act: &str,
    to: Option<&str>,
    proto: Option<u8>,
    hook: HookPoint,
    rkey: &str,
    e: &mut Errs,
) -> Option<Action> {
    let tkey = format!("{rkey}.to");
    let ports = |p: Option<&str>, e: &mut Errs| -> Option<Option<PortRange>> {
        match p {
            None => Some(None),
            Some(p) => match p.parse::<PortRange>() {
                Ok(r) if !matches!(proto, Some(6) | Some(17)) => {
                    e.add(
                        tkey.clone(),
                        "a port needs proto = \"tcp\" or \"udp\" (nft: a port needs an l4 protocol)",
                    );
                    let _ = r;
                    None
                }
                Ok(r) => Some(Some(r)),
                Err(m) => {
                    e.add(tkey.clone(), m);
                    None
                }
            },
        }
    };
    let wrong = |want: &str, e: &mut Errs| {
        e.add(
            format!("{rkey}.action"),
            format!("'{act}' belongs in [nat.{want}]"),
        );
        None
    };
    match act {
        "accept" => {
            if to.is_some() {
                e.add(tkey, "'accept' translates nothing: no 'to'");
                return None;
            }
            Some(Action::Accept)
        }
        "dnat" if hook != HookPoint::Prerouting => wrong("prerouting", e),
        "snat" | "masquerade" if hook != HookPoint::Postrouting => wrong("postrouting", e),
        "dnat" => {
            let Some(t) = to else {
                e.add(tkey, "dnat needs 'to' (ADDR or ADDR:PORT)");
                return None;
            };
            let (a, p) = split_port(t);
            let Ok(addr) = a.trim().parse::<Ipv4Addr>() else {
                e.add(
                    tkey,
                    format!("'{t}' is not ADDR or ADDR:PORT (an IPv4 address)"),
                );
                return None;
            };
            let r = ports(p, e)?;
            if r.is_some_and(|r| r.lo != r.hi) {
                e.add(tkey, "dnat takes one port");
                return None;
            }
            Some(Action::Dnat {
                addr: u32::from(addr),
                port: r.map(|r| r.lo),
            })
        }
        "snat" => {
            let Some(t) = to else {
                e.add(
                    tkey,
                    "snat needs 'to' (ADDR, ADDR-ADDR, optionally :PORT or :PORT-PORT)",
                );
                return None;
            };
            let (a, p) = split_port(t);
            let Some(addrs) = addrs(a) else {
                e.add(
                    tkey,
                    format!("'{a}' is not an IPv4 address or an ascending range ADDR-ADDR"),
                );
                return None;
            };
            Some(Action::Snat {
                addrs,
                ports: ports(p, e)?,
            })
        }
        "masquerade" => {
            let p = match to {
                None => None,
                Some(t) => match t.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => {
                        e.add(
                            tkey,
                            "masquerade's 'to' is :PORT-PORT (the address is the interface's)",
                        );
                        return None;
                    }
                },
            };
            Some(Action::Masquerade {
                ports: ports(p, e)?,
            })
        }
        other => {
            e.add(
                format!("{rkey}.action"),
                format!("unknown NAT action '{other}' (dnat, snat, masquerade, accept)"),
            );
            None
        }
    }
}

/// Validates `[nat]`; `None` when there is none.
pub(super) fn validate(raw: Option<&NatFile>, names: &Names, e: &mut Errs) -> Option<Config> {
    let raw = raw?;
    let mut cfg = Config::default();
    cfg.udp.independent_mapping = behaviour(raw.udp_mapping.as_deref(), "nat.udp_mapping", e);
    cfg.udp.independent_filtering = behaviour(raw.udp_filtering.as_deref(), "nat.udp_filtering", e);
    if cfg.udp.independent_filtering && !cfg.udp.independent_mapping {
        e.add(
            "nat.udp_filtering",
            "endpoint-independent filtering lets in what is sent to a mapping: it needs \
             udp_mapping = \"endpoint-independent\"",
        );
    }
    for (hook, chain, slot) in [
        (HookPoint::Prerouting, &raw.prerouting, &mut cfg.prerouting),
        (
            HookPoint::Postrouting,
            &raw.postrouting,
            &mut cfg.postrouting,
        ),
    ] {
        let Some(c) = chain else { continue };
        let key = format!("nat.{}", hook.name());
        if c.policy != "accept" {
            e.add(
                format!("{key}.policy"),
                "a NAT chain's policy is accept (it decides translations, not fates)",
            );
        }
        let mut rules = Vec::new();
        for (ri, r) in c.rules.iter().enumerate() {
            let rkey = format!("{key}.rule[{ri}]");
            let m = matches_of(r, Verdict::Accept, hook, &rkey, names, e);
            if m.ct_mark_set.is_some() {
                e.add(
                    format!("{rkey}.ct_mark_set"),
                    "a NAT rule translates; set marks in a [filter] chain",
                );
            }
            if r.offload.is_some() {
                e.add(
                    format!("{rkey}.offload"),
                    "a NAT rule translates; offload flows in a [filter.forward] rule",
                );
            }
            if let Some(a) = action(&r.action, r.to.as_deref(), m.proto, hook, &rkey, e) {
                rules.push(NatRule {
                    matches: m,
                    action: a,
                });
            }
        }
        *slot = NatChain { rules };
    }
    Some(cfg)
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;
    use netbatch_stack::nat::Action;

    const PORTS: &str = "[[port]]\nname = \"inside\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n\
        [[port]]\nname = \"outside\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"203.0.113.1/24\"]\n";

    /// The statements as nft writes them, and tracking turned on by them.
    #[test]
    fn statements_parse_as_nft_writes_them() {
        let text = format!(
            "{PORTS}[[nat.prerouting.rule]]\nin = \"outside\"\nproto = \"tcp\"\ndport = 8080\naction = \"dnat\"\nto = \"192.0.2.10:80\"\n\
             [[nat.postrouting.rule]]\nout = \"outside\"\nsrc = \"192.0.2.0/24\"\nproto = \"udp\"\naction = \"snat\"\nto = \"203.0.113.5-203.0.113.6:1024-2047\"\n\
             [[nat.postrouting.rule]]\nsrc = \"192.0.2.99/32\"\naction = \"accept\"\n\
             [[nat.postrouting.rule]]\nout = \"outside\"\naction = \"masquerade\"\n"
        );
        let c = parse(&text).unwrap();
        let n = c.graph.nat.as_ref().unwrap();
        let d: Vec<String> = n
            .prerouting
            .rules
            .iter()
            .chain(&n.postrouting.rules)
            .map(|r| r.action.describe())
            .collect();
        assert_eq!(
            d,
            [
                "dnat to 192.0.2.10:80",
                "snat to 203.0.113.5-203.0.113.6:1024-2047",
                "accept",
                "masquerade"
            ]
        );
        assert!(c.graph.conntrack.is_some(), "NAT needs tracking");
        assert!(matches!(n.postrouting.rules[1].action, Action::Accept));
    }

    /// Every mistake refused at its key.
    #[test]
    fn mistakes_are_refused_with_their_keys() {
        let text = format!(
            "{PORTS}[nat.prerouting]\npolicy = \"drop\"\n[[nat.prerouting.rule]]\naction = \"snat\"\nto = \"203.0.113.1\"\n\
             [[nat.prerouting.rule]]\naction = \"dnat\"\nto = \"192.0.2.10:80\"\n\
             [[nat.postrouting.rule]]\naction = \"snat\"\nto = \"203.0.113.9-203.0.113.1\"\n\
             [[nat.postrouting.rule]]\naction = \"masquerade\"\nto = \"203.0.113.1\"\n\
             [[nat.postrouting.rule]]\naction = \"redirect\"\n\
             [[filter.forward.rule]]\naction = \"accept\"\nto = \"1.2.3.4\"\n"
        );
        let e = parse(&text).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        for k in [
            "nat.prerouting.policy",
            "nat.prerouting.rule[0].action",
            "nat.prerouting.rule[1].to",
            "nat.postrouting.rule[0].to",
            "nat.postrouting.rule[1].to",
            "nat.postrouting.rule[2].action",
            "filter.forward.rule[0].to",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
    }

    /// Two workers: accepted with RPS over one map and dnat rules steering can foresee
    /// (their forwards handed to RPS); refused without RPS, with ports spread over
    /// different workers, with a dnat rule that has neither `dst` nor `dport`, and with
    /// a dnat target another dnat rule would rewrite again, each at its key.
    #[test]
    fn two_workers_need_steering_that_brings_replies_home() {
        let two = "[datapath]\nworkers = 2\nrps = \"deferred\"\n";
        let good = format!(
            "{PORTS}{two}[[nat.prerouting.rule]]\nin = \"outside\"\nproto = \"tcp\"\ndport = 8080\naction = \"dnat\"\nto = \"192.0.2.10:80\"\n\
             [[nat.postrouting.rule]]\nout = \"outside\"\naction = \"masquerade\"\n"
        );
        let c = parse(&good).unwrap();
        let rps = c.rps.as_ref().unwrap();
        assert!(rps.symmetric);
        assert_eq!(rps.forwards.len(), 1);
        assert_eq!(rps.forwards[0].to_port, Some(80));
        let off = good.replace("rps = \"deferred\"", "rps = \"off\"");
        let e = parse(&off).unwrap_err();
        assert!(e.errors.iter().any(|x| x.key == "datapath.rps"), "{e:?}");
        let maps = good.replace(
            "addresses = [\"203.0.113.1/24\"]\n",
            "addresses = [\"203.0.113.1/24\"]\nrps_map = [1]\n",
        );
        let e = parse(&maps).unwrap_err();
        assert!(e.errors.iter().any(|x| x.key == "port[1].rps_map"), "{e:?}");
        let blind = format!(
            "{PORTS}{two}[[nat.prerouting.rule]]\nin = \"outside\"\naction = \"dnat\"\nto = \"192.0.2.10\"\n"
        );
        let e = parse(&blind).unwrap_err();
        assert!(
            e.errors.iter().any(|x| x.key == "nat.prerouting.rule[0]"),
            "{e:?}"
        );
        let chained = format!(
            "{PORTS}{two}[[nat.prerouting.rule]]\nproto = \"tcp\"\ndport = 80\naction = \"dnat\"\nto = \"192.0.2.10:8080\"\n\
             [[nat.prerouting.rule]]\nproto = \"tcp\"\ndport = 8080\naction = \"dnat\"\nto = \"192.0.2.11:80\"\n"
        );
        let e = parse(&chained).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        assert!(
            keys.contains(&"nat.prerouting.rule[0]") && keys.contains(&"nat.prerouting.rule[1]"),
            "{keys:?}"
        );
        // The same ruleset with one worker: nothing to steer, accepted.
        assert!(parse(&chained.replace("workers = 2", "workers = 1")).is_ok());
    }

    /// UDP's behaviour: the two RFC 4787 words, endpoint-dependent by default; a word
    /// netbatch does not have, filtering without mapping, and independent mapping with
    /// two workers refused at their keys.
    #[test]
    fn udp_behaviour_is_read_and_its_conflicts_refused() {
        let masq = "[[nat.postrouting.rule]]\nout = \"outside\"\naction = \"masquerade\"\n";
        let c = parse(&format!("{PORTS}{masq}")).unwrap();
        let udp = c.graph.nat.as_ref().unwrap().udp;
        assert!(!udp.independent_mapping && !udp.independent_filtering);
        let both = "[nat]\nudp_mapping = \"endpoint-independent\"\nudp_filtering = \"endpoint-independent\"\n";
        let c = parse(&format!("{PORTS}{both}{masq}")).unwrap();
        let udp = c.graph.nat.as_ref().unwrap().udp;
        assert!(udp.independent_mapping && udp.independent_filtering);
        let keys = |text: String| -> Vec<String> {
            parse(&text)
                .unwrap_err()
                .errors
                .into_iter()
                .map(|x| x.key)
                .collect()
        };
        let k = keys(format!(
            "{PORTS}[nat]\nudp_mapping = \"address-dependent\"\n{masq}"
        ));
        assert_eq!(k, ["nat.udp_mapping"]);
        let k = keys(format!(
            "{PORTS}[nat]\nudp_filtering = \"endpoint-independent\"\n{masq}"
        ));
        assert_eq!(k, ["nat.udp_filtering"]);
        let two = "[datapath]\nworkers = 2\nrps = \"deferred\"\n";
        let k = keys(format!("{PORTS}{two}{both}{masq}"));
        assert_eq!(k, ["nat.udp_mapping"]);
    }
}
