//! `[[rule]]` and numbered tables: what is taken, and what is refused with its key.

use netbatch_stack::route::RouteKind;
use netbatch_stack::route::rule::{Action, DecisionOf, Key, Mark, PortRange, TABLE_MAIN};

use super::super::parse_test as parse;

const PORTS: &str = r#"
[[port]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["192.0.2.1/24", "2001:db8:1::1/64"]

[[port]]
name = "eth1"
mac = "02:00:00:00:00:02"
addresses = ["198.51.100.1/24", "2001:db8:2::1/64"]
"#;

/// The errors of `text` after the ports, as `key: reason` lines.
fn errors(text: &str) -> Vec<String> {
    match parse(&format!("{PORTS}{text}")) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

/// Whether one error is at `key` and says `says`.
fn refused(text: &str, key: &str, says: &str) {
    let errs = errors(text);
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{key}: ")) && e.contains(says)),
        "wanted {key}: …{says}…, got {errs:#?}"
    );
}

#[test]
fn rules_and_tables_are_read() {
    let cfg = parse(&format!(
        r#"{PORTS}
[[route]]
prefix = "0.0.0.0/0"
via = "198.51.100.254"
table = 100

[[route]]
prefix = "203.0.113.0/24"
kind = "throw"
table = 100

[[route]]
prefix = "::/0"
via = "2001:db8:2::fe"
table = "100"

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.254"
table = "main"

[[rule]]
pref = 10
not = true
from = "192.0.2.0/24"
to = "all"
iif = "eth1"
fwmark = "0x10/0x30"
ipproto = "tcp"
sport = 53
dport = "1000-2000"
tos = "0x10"
table = 100
suppress_prefixlength = 0

[[rule]]
pref = 20
family = "inet6"
goto = 30

[[rule]]
pref = 30
to = "2001:db8:ff::/48"
action = "prohibit"

[[rule]]
pref = 40
fwmark = 0
table = "default"
"#
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.routes.len(), 1, "the main one");
    assert_eq!(cfg.tables.keys().copied().collect::<Vec<_>>(), [100]);
    assert_eq!(cfg.tables[&100].len(), 2);
    assert_eq!(cfg.tables[&100][1].kind, RouteKind::Throw);
    assert_eq!(cfg.tables6[&100].len(), 1);
    assert_eq!(cfg.rules.len(), 2);
    let r = &cfg.rules[0];
    assert_eq!(
        (
            r.pref,
            r.not,
            r.iif,
            r.ipproto,
            r.tos,
            r.action,
            r.suppress_prefixlength
        ),
        (
            10,
            true,
            Some(1),
            Some(6),
            Some(0x10),
            Action::Lookup(100),
            Some(0)
        )
    );
    assert_eq!(r.to, None, "all is no selector");
    assert_eq!(r.fwmark, Some(Mark::linux(0x10, Some(0x30))));
    assert_eq!(r.sport, PortRange::new(53, 53).ok());
    assert_eq!(r.dport, PortRange::new(1000, 2000).ok());
    assert_eq!(cfg.rules[1].fwmark, Some(Mark { value: 0, mask: 0 }));
    assert_eq!(cfg.rules6.len(), 2);
    assert_eq!(cfg.rules6[0].action, Action::Goto(30));
    assert_eq!(cfg.rules6[1].action, Action::Prohibit);

    // Built: rule 10 looks 203.0.113.7 up in table 100, whose throw sends it to main.
    let (p4, p6) = cfg.policies().expect("policies");
    assert!(p4.walks() && p6.walks());
    let main = crate::build::route_table(&cfg).expect("main");
    let k = Key {
        src: u32::from(core::net::Ipv4Addr::new(198, 51, 100, 9)),
        dst: u32::from(core::net::Ipv4Addr::new(203, 0, 113, 7)),
        iif: 0,
        mark: 0,
        proto: 17,
        sport: 0,
        dport: 0,
        tos: 0,
    };
    assert!(matches!(
        p4.decide(&main, &k, || 0),
        DecisionOf::Route {
            table: TABLE_MAIN,
            ..
        }
    ));
}

#[test]
fn every_bad_key_is_refused_with_its_reason() {
    refused("[[rule]]\ntable = 5\n", "rule[0].pref", "priority");
    refused(
        "[[rule]]\npref = -1\ntable = 5\n",
        "rule[0].pref",
        "not a priority",
    );
    refused("[[rule]]\npref = 1\n", "rule[0]", "needs an action");
    refused(
        "[[rule]]\npref = 1\ntable = 5\naction = \"nop\"\n",
        "rule[0]",
        "one action",
    );
    refused(
        "[[rule]]\npref = 1\ntable = 0\n",
        "rule[0].table",
        "table 0",
    );
    refused(
        "[[rule]]\npref = 1\ntable = \"moon\"\n",
        "rule[0].table",
        "not a table",
    );
    refused("[[rule]]\npref = 5\ngoto = 5\n", "rule[0].goto", "forward");
    refused(
        "[[rule]]\npref = 1\naction = \"lookup\"\n",
        "rule[0].action",
        "table = N",
    );
    refused(
        "[[rule]]\npref = 1\naction = \"drop\"\n",
        "rule[0].action",
        "not an action",
    );
    refused(
        "[[rule]]\npref = 1\nfrom = \"192.0.2.0/33\"\ntable = 5\n",
        "rule[0].from",
        "not a prefix",
    );
    refused(
        "[[rule]]\npref = 1\nfrom = \"192.0.2.0/24\"\nto = \"2001:db8::/32\"\ntable = 5\n",
        "rule[0].to",
        "IPv6 prefix in an IPv4 rule",
    );
    refused(
        "[[rule]]\npref = 1\nfamily = \"ipx\"\ntable = 5\n",
        "rule[0].family",
        "not a family",
    );
    refused(
        "[[rule]]\npref = 1\niif = \"eth9\"\ntable = 5\n",
        "rule[0].iif",
        "no interface 'eth9'",
    );
    refused(
        "[[rule]]\npref = 1\nfwmark = \"0x1/x\"\ntable = 5\n",
        "rule[0].fwmark",
        "not a mark",
    );
    refused(
        "[[rule]]\npref = 1\nipproto = \"ospf\"\ntable = 5\n",
        "rule[0].ipproto",
        "not a protocol",
    );
    refused(
        "[[rule]]\npref = 1\nsport = 0\ntable = 5\n",
        "rule[0].sport",
        "1 to 65534",
    );
    refused(
        "[[rule]]\npref = 1\ndport = \"9-5\"\ntable = 5\n",
        "rule[0].dport",
        "9-5",
    );
    refused(
        "[[rule]]\npref = 1\ndport = 65535\ntable = 5\n",
        "rule[0].dport",
        "65534",
    );
    // IPv4 compares only the old TOS field's three bits, IPv6 the DSCP; never ECN.
    refused(
        "[[rule]]\npref = 1\ntos = \"0x20\"\ntable = 5\n",
        "rule[0].tos",
        "IPv4 rules do not compare",
    );
    refused(
        "[[rule]]\npref = 1\ntos = 2\ntable = 5\n",
        "rule[0].tos",
        "do not compare",
    );
    refused(
        "[[rule]]\npref = 1\nfamily = \"inet6\"\ntos = 1\ntable = 5\n",
        "rule[0].tos",
        "IPv6 rules do not compare",
    );
    assert!(
        errors("[[rule]]\npref = 1\nfamily = \"inet6\"\ntos = \"0xb8\"\ntable = 5\n").is_empty()
    );
    refused(
        "[[rule]]\npref = 1\naction = \"blackhole\"\nsuppress_prefixlength = 0\n",
        "rule[0].suppress_prefixlength",
        "needs table",
    );
    refused(
        "[[rule]]\npref = 1\ntable = 5\nsuppress_prefixlength = 33\n",
        "rule[0].suppress_prefixlength",
        "0 to 32",
    );
    refused(
        "[[rule]]\npref = 1\ntable = 5\nweight = 3\n",
        "rule[0].weight",
        "unknown",
    );
    // What `ip rule add` refuses as `File exists`: a rule like one before it.
    refused(
        "[[rule]]\npref = 5\nto = \"192.0.2.0/24\"\ntable = 7\n\
         [[rule]]\npref = 5\nnot = true\ntable = 7\n",
        "rule[1]",
        "File exists) (rule[0])",
    );
    refused(
        "[[rule]]\npref = 0\ntable = \"local\"\n",
        "rule[0]",
        "File exists",
    );
    // Numbered tables.
    refused(
        "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\ntable = \"local\"\n",
        "route[0].table",
        "netbatch's own",
    );
    refused(
        "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\ntable = 0\n",
        "route[0].table",
        "table 0",
    );
    refused(
        "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\ntable = 7\n\
         [[route]]\nprefix = \"0.0.0.0/0\"\nkind = \"blackhole\"\ntable = 7\n",
        "route[1].prefix",
        "routed twice in table 7: route[0] and route[1]",
    );
    refused(
        "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"203.0.113.1\"\ntable = 7\n",
        "route[0].via",
        "203.0.113.1",
    );
    // The same prefix in two tables, and in main, is no repeat.
    assert!(
        errors(
            "[[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\ntable = 7\n\
             [[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\ntable = 8\n\
             [[route]]\nprefix = \"0.0.0.0/0\"\nvia = \"192.0.2.254\"\n"
        )
        .is_empty()
    );
}
