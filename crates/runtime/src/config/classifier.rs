//! `[[classifier.filter]]`: the ingress classifier's filters, in `tc filter … flower`
//! terms (`tc-flower(8)`): `dev` (a port; none: every port), `chain`, `prio` (default:
//! the filter's place in the file), `protocol`, the match keys, and `actions` (each as
//! `tc` writes an action, see `netbatch_stack::cls::action`).
//!
//! A value is `V` or `V/MASK` (MAC and IP addresses also `ADDR/LEN`); ports also
//! `MIN-MAX`. As `tc` does, keys of a layer need the layer named: IP keys (`src_ip`,
//! `dst_ip`, `ip_proto`, `ip_tos`, `ip_ttl`) need `protocol = "ip"` or `"ipv6"` (or that
//! `vlan_ethtype`), and the addresses are of that family (for IPv6, `ip_tos` is the
//! traffic class and `ip_ttl` the hop limit); ports need `ip_proto` tcp, udp or sctp,
//! `tcp_flags` tcp, `icmp_type`/`icmp_code` icmp (IPv4) or icmpv6 (IPv6), VLAN keys
//! `protocol = "802.1q"` or `"802.1ad"`. A mask wider than its field, a range upside down, a repeated filter, a
//! `goto chain` to a chain without filters (or not after the filter's own), and an action
//! naming a port that does not exist are refused at their key.

use std::sync::Arc;

use netbatch_stack::cls::{Action, Classifier, ClsError, Field, Filter, Match, Range, ip6_bits};

use netbatch_wire::ethernet::EtherType;

use super::Errs;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClassifierFile {
    #[serde(default, rename = "filter")]
    filters: Vec<FilterFile>,
}

/// A number or text (ports, TOS, flags may be written either way).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
enum Val {
    Number(u64),
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
struct FilterFile {
    dev: Option<String>,
    #[serde(default)]
    chain: u32,
    prio: Option<u32>,
    protocol: Option<String>,
    dst_mac: Option<String>,
    src_mac: Option<String>,
    vlan_id: Option<Val>,
    vlan_prio: Option<Val>,
    vlan_ethtype: Option<String>,
    src_ip: Option<String>,
    dst_ip: Option<String>,
    ip_proto: Option<Val>,
    ip_tos: Option<Val>,
    ip_ttl: Option<Val>,
    src_port: Option<Val>,
    dst_port: Option<Val>,
    tcp_flags: Option<Val>,
    icmp_type: Option<Val>,
    icmp_code: Option<Val>,
    #[serde(default = "default_actions")]
    actions: Vec<String>,
}

fn default_actions() -> Vec<String> {
    vec!["pass".into()]
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// An ethertype by tc's name or number.
fn ethertype(s: &str) -> Option<u64> {
    let t = match s.to_ascii_lowercase().as_str() {
        "ip" | "ipv4" => EtherType::IPV4,
        "ipv6" => EtherType::IPV6,
        "arp" => EtherType::ARP,
        "802.1q" | "8021q" => EtherType::VLAN,
        "802.1ad" | "8021ad" => EtherType::QINQ,
        other => return number(other).filter(|&v| v <= 0xffff),
    };
    Some(u64::from(t.0))
}

/// `V` or `V/MASK` of a field, numbers decimal or hex.
fn masked(field: Field, s: &str) -> Result<(u64, u64), String> {
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (v, number(m).ok_or_else(|| format!("'{m}' is not a mask"))?),
        None => (s, field.max()),
    };
    let v = number(v).ok_or_else(|| format!("'{v}' is not a number"))?;
    if m > field.max() {
        return Err(format!(
            "mask {m:#x} is wider than {field} ({} bits)",
            field.max().count_ones()
        ));
    }
    if v > field.max() {
        return Err(format!(
            "{v} does not fit {field} (at most {})",
            field.max()
        ));
    }
    Ok((v, m))
}

/// A MAC address, `MAC/MASK` or `MAC/LEN`.
fn mac(s: &str) -> Result<(u64, u64), String> {
    let bits = |t: &str| -> Option<u64> {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() != 6 {
            return None;
        }
        parts.iter().try_fold(0u64, |a, p| {
            u8::from_str_radix(p, 16)
                .ok()
                .map(|b| (a << 8) | u64::from(b))
        })
    };
    let full = (1u64 << 48) - 1;
    let (a, m) = match s.split_once('/') {
        None => (s, full),
        Some((a, m)) => match m.parse::<u32>() {
            Ok(len) if len <= 48 => (
                a,
                if len == 0 {
                    0
                } else {
                    full << (48 - len) & full
                },
            ),
            Ok(len) => return Err(format!("/{len} is longer than a MAC address (48 bits)")),
            Err(_) => (
                a,
                bits(m).ok_or_else(|| format!("'{m}' is not a MAC mask"))?,
            ),
        },
    };
    Ok((
        bits(a).ok_or_else(|| format!("'{a}' is not a MAC address"))?,
        m,
    ))
}

/// An IPv4 address, `ADDR/LEN` or `ADDR/MASK`.
fn ip(s: &str) -> Result<(u64, u64), String> {
    let addr = |t: &str| {
        t.parse::<core::net::Ipv4Addr>()
            .map(|a| u64::from(u32::from(a)))
            .map_err(|_| format!("'{t}' is not an IPv4 address"))
    };
    match s.split_once('/') {
        None => Ok((addr(s)?, 0xffff_ffff)),
        Some((a, m)) => {
            let mask = match m.parse::<u32>() {
                Ok(len) if len <= 32 => (u64::from(u32::MAX) << (32 - len)) & 0xffff_ffff,
                Ok(len) => return Err(format!("/{len} is longer than an IPv4 address")),
                Err(_) => addr(m)?,
            };
            Ok((addr(a)?, mask))
        }
    }
}

/// The high and low 64-bit halves of an IPv6 address (or mask), as the key holds them.
type Halves = (u64, u64);

/// An IPv6 address, `ADDR/LEN` or `ADDR/MASK`: the halves of its value and mask.
fn ip6(s: &str) -> Result<(Halves, Halves), String> {
    let addr = |t: &str| {
        t.parse::<core::net::Ipv6Addr>()
            .map(ip6_bits)
            .map_err(|_| format!("'{t}' is not an IPv6 address"))
    };
    match s.split_once('/') {
        None => Ok((addr(s)?, (u64::MAX, u64::MAX))),
        Some((a, m)) => {
            let mask = match m.parse::<u32>() {
                Ok(len) if len <= 128 => {
                    let bits = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                    ((bits >> 64) as u64, bits as u64)
                }
                Ok(len) => return Err(format!("/{len} is longer than an IPv6 address")),
                Err(_) => addr(m)?,
            };
            Ok((addr(a)?, mask))
        }
    }
}

/// An IP protocol by name or number.
fn proto(v: &Val) -> Result<u64, String> {
    let t = v.text();
    match t.to_ascii_lowercase().as_str() {
        "icmp" => Ok(1),
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmpv6" => Ok(58),
        "sctp" => Ok(132),
        other => number(other).filter(|&n| n <= 255).ok_or_else(|| {
            format!("'{t}' is not an IP protocol (tcp, udp, sctp, icmp, icmpv6 or 0-255)")
        }),
    }
}

/// One filter's match, or the errors at its keys.
fn filter_match(f: &FilterFile, key: &str, ports: &[String], e: &mut Errs) -> Match {
    let mut m = Match::default();
    let mut put = |field: Field, r: Result<(u64, u64), String>, e: &mut Errs| match r {
        Ok((v, mask)) => m.set(field, v, mask),
        Err(why) => e.add(format!("{key}.{}", field.name()), why),
    };
    if let Some(d) = &f.dev {
        match ports.iter().position(|p| p == d) {
            Some(i) => put(Field::InPort, Ok((i as u64, Field::InPort.max())), e),
            None => e.add(format!("{key}.dev"), format!("no port named '{d}'")),
        }
    }
    let protocol = match f.protocol.as_deref() {
        None | Some("all") => None,
        Some(p) => match ethertype(p) {
            Some(t) => {
                put(Field::EthType, Ok((t, 0xffff)), e);
                Some(t)
            }
            None => {
                e.add(
                    format!("{key}.protocol"),
                    format!("'{p}' is not an ethertype"),
                );
                None
            }
        },
    };
    let tagged = protocol
        .is_some_and(|p| p == u64::from(EtherType::VLAN.0) || p == u64::from(EtherType::QINQ.0));
    let inner = match f.vlan_ethtype.as_deref() {
        None => None,
        Some(_) if !tagged => {
            e.add(
                format!("{key}.vlan_ethtype"),
                "needs protocol = \"802.1q\" or \"802.1ad\"",
            );
            None
        }
        Some(t) => match ethertype(t) {
            Some(v) => {
                put(Field::VlanEthType, Ok((v, 0xffff)), e);
                Some(v)
            }
            None => {
                e.add(
                    format!("{key}.vlan_ethtype"),
                    format!("'{t}' is not an ethertype"),
                );
                None
            }
        },
    };
    for (field, val) in [(Field::VlanId, &f.vlan_id), (Field::VlanPrio, &f.vlan_prio)] {
        if let Some(v) = val {
            if !tagged {
                e.add(
                    format!("{key}.{}", field.name()),
                    "needs protocol = \"802.1q\" or \"802.1ad\"",
                );
            } else {
                put(field, masked(field, &v.text()), e);
            }
        }
    }
    if let Some(s) = &f.dst_mac {
        put(Field::DstMac, mac(s), e);
    }
    if let Some(s) = &f.src_mac {
        put(Field::SrcMac, mac(s), e);
    }
    let is = |t: EtherType| protocol == Some(u64::from(t.0)) || inner == Some(u64::from(t.0));
    let (v4, v6) = (is(EtherType::IPV4), is(EtherType::IPV6));
    let needs_ip = |name: &str, e: &mut Errs| {
        if !v4 && !v6 {
            e.add(
                format!("{key}.{name}"),
                "needs protocol = \"ip\" or \"ipv6\" (or that vlan_ethtype)",
            );
        }
        v4 || v6
    };
    for (field, (hi, lo), val) in [
        (Field::SrcIp, (Field::SrcIp6Hi, Field::SrcIp6Lo), &f.src_ip),
        (Field::DstIp, (Field::DstIp6Hi, Field::DstIp6Lo), &f.dst_ip),
    ] {
        let Some(s) = val else { continue };
        if !needs_ip(field.name(), e) {
            continue;
        }
        if v4 {
            put(field, ip(s), e);
            continue;
        }
        match ip6(s) {
            Ok(((vh, vl), (mh, ml))) => {
                put(hi, Ok((vh, mh)), e);
                put(lo, Ok((vl, ml)), e);
            }
            Err(why) => e.add(format!("{key}.{}", field.name()), why),
        }
    }
    let mut ip_proto = None;
    if let Some(v) = &f.ip_proto
        && needs_ip("ip_proto", e)
    {
        match proto(v) {
            Ok(p) => {
                put(Field::IpProto, Ok((p, 0xff)), e);
                ip_proto = Some(p);
            }
            Err(why) => e.add(format!("{key}.ip_proto"), why),
        }
    }
    for (field, val) in [(Field::IpTos, &f.ip_tos), (Field::IpTtl, &f.ip_ttl)] {
        if let Some(v) = val
            && needs_ip(field.name(), e)
        {
            put(field, masked(field, &v.text()), e);
        }
    }
    let needs_proto = |name: &str, want: &[u64], what: &str, e: &mut Errs| {
        let ok = ip_proto.is_some_and(|p| want.contains(&p));
        if !ok {
            e.add(format!("{key}.{name}"), format!("needs ip_proto {what}"));
        }
        ok
    };
    let mut ranges = (None, None);
    for (field, val) in [(Field::SrcPort, &f.src_port), (Field::DstPort, &f.dst_port)] {
        let Some(v) = val else { continue };
        if !needs_proto(field.name(), &[6, 17, 132], "tcp, udp or sctp", e) {
            continue;
        }
        let t = v.text();
        match t.split_once('-') {
            Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
                (Ok(a), Ok(b)) if a <= b => {
                    let r = Some(Range { min: a, max: b });
                    if field == Field::SrcPort {
                        ranges.0 = r;
                    } else {
                        ranges.1 = r;
                    }
                }
                (Ok(a), Ok(b)) => e.add(
                    format!("{key}.{}", field.name()),
                    format!("range {a}-{b} is upside down"),
                ),
                _ => e.add(
                    format!("{key}.{}", field.name()),
                    format!("'{t}' is not a port range"),
                ),
            },
            None => put(field, masked(field, &t), e),
        }
    }
    if let Some(v) = &f.tcp_flags
        && needs_proto("tcp_flags", &[6], "tcp", e)
    {
        put(Field::TcpFlags, masked(Field::TcpFlags, &v.text()), e);
    }
    // ICMP's keys for IPv4, ICMPv6's for IPv6 (tc picks flower's attributes by both).
    let (icmp, icmp_name) = if v6 { (58, "icmpv6") } else { (1, "icmp") };
    for (field, val) in [
        (Field::IcmpType, &f.icmp_type),
        (Field::IcmpCode, &f.icmp_code),
    ] {
        if let Some(v) = val
            && needs_proto(field.name(), &[icmp], icmp_name, e)
        {
            put(field, masked(field, &v.text()), e);
        }
    }
    (m.src_range, m.dst_range) = ranges;
    m
}

/// Validates the filters; the classifier (none without filters).
pub(super) fn validate(
    raw: &ClassifierFile,
    ports: &[String],
    e: &mut Errs,
) -> Option<Arc<Classifier>> {
    if raw.filters.is_empty() {
        return None;
    }
    let before = e.0.len();
    let mut filters = Vec::with_capacity(raw.filters.len());
    for (i, f) in raw.filters.iter().enumerate() {
        let key = format!("classifier.filter[{i}]");
        let matches = filter_match(f, &key, ports, e);
        let mut actions = Vec::with_capacity(f.actions.len());
        if f.actions.is_empty() {
            e.add(
                format!("{key}.actions"),
                "give at least one action (pass, if nothing else)",
            );
        }
        for (j, a) in f.actions.iter().enumerate() {
            match Action::parse(a, |n| ports.iter().position(|p| p == n).map(|i| i as u16)) {
                Ok(a) => actions.push(a),
                Err(why) => e.add(format!("{key}.actions[{j}]"), why),
            }
        }
        filters.push(Filter {
            chain: f.chain,
            prio: f.prio.unwrap_or(i as u32 + 1),
            matches,
            actions,
        });
    }
    if e.0.len() > before {
        return None;
    }
    match Classifier::new(filters) {
        Ok(c) => Some(Arc::new(c)),
        Err(err) => {
            let i = match err {
                ClsError::Duplicate(_, i)
                | ClsError::NoChain(i, _)
                | ClsError::GotoBackwards(i, _) => i,
            };
            e.add(format!("classifier.filter[{i}]"), err.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    fn errors(text: &str) -> Vec<(String, String)> {
        match Config::parse(text, std::path::Path::new("."), "t.toml") {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|e| (e.key, e.reason)).collect(),
        }
    }

    const PORTS: &str = "[[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n[[port]]\nname = \"eth1\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"198.51.100.1/24\"]\n";

    #[test]
    fn filters_in_tc_terms_validate() {
        let text = format!(
            "{PORTS}
[[classifier.filter]]
dev = \"eth0\"
prio = 10
protocol = \"ip\"
src_ip = \"10.0.0.0/8\"
ip_proto = \"udp\"
dst_port = \"1000-2000\"
ip_tos = \"0x10/0xfc\"
actions = [\"skbedit mark 7\", \"police rate 1mbit burst 10k conform-exceed drop/pass\"]

[[classifier.filter]]
protocol = \"802.1q\"
vlan_id = 5
vlan_ethtype = \"ip\"
ip_proto = \"tcp\"
tcp_flags = \"0x02\"
actions = [\"goto chain 1\"]

[[classifier.filter]]
chain = 1
dst_mac = \"02:00:00:00:00:00/40\"
actions = [\"mirred egress redirect dev eth1\"]
"
        );
        let cfg = Config::parse(&text, std::path::Path::new("."), "t.toml").expect("valid");
        let c = cfg.graph.classifier.expect("a classifier");
        assert_eq!(c.filters().len(), 3);
        assert_eq!(
            c.filters()[1].prio,
            2,
            "default priority: place in the file"
        );
    }

    /// IPv6 filters as tc writes them: addresses by length or mask, `icmpv6` type and
    /// code, traffic class and hop limit; the IPv6 address halves in the key; and what tc
    /// refuses (an address of the other family, ICMP keys under the other ICMP).
    #[test]
    fn ipv6_filters_validate_and_their_mistakes_are_refused() {
        use netbatch_stack::cls::Field;
        let text = format!(
            "{PORTS}
[[classifier.filter]]
protocol = \"ipv6\"
src_ip = \"2001:db8::/32\"
dst_ip = \"2001:db8:1::5/ffff:ffff:ffff::\"
ip_proto = \"udp\"
dst_port = 53
ip_tos = \"0xb8/0xfc\"
ip_ttl = 255

[[classifier.filter]]
protocol = \"802.1q\"
vlan_ethtype = \"ipv6\"
ip_proto = \"icmpv6\"
icmp_type = 128
icmp_code = 0
actions = [\"drop\"]
"
        );
        let cfg = Config::parse(&text, std::path::Path::new("."), "t.toml").expect("valid");
        let c = cfg.graph.classifier.expect("a classifier");
        let m = &c.filters()[0].matches;
        assert_eq!(
            (m.key.get(Field::SrcIp6Hi), m.mask.get(Field::SrcIp6Hi)),
            (0x2001_0db8_0000_0000, 0xffff_ffff_0000_0000)
        );
        assert_eq!(m.mask.get(Field::SrcIp6Lo), 0);
        assert_eq!(
            (m.key.get(Field::DstIp6Hi), m.mask.get(Field::DstIp6Hi)),
            (0x2001_0db8_0001_0000, 0xffff_ffff_ffff_0000)
        );
        assert_eq!(m.mask.get(Field::DstIp6Lo), 0, "the mask's low half");
        assert_eq!(m.mask.get(Field::SrcIp), 0, "no IPv4 key");
        let m = &c.filters()[1].matches;
        assert_eq!(
            (m.key.get(Field::IpProto), m.key.get(Field::IcmpType)),
            (58, 128)
        );
        let text = format!(
            "{PORTS}
[[classifier.filter]]
protocol = \"ipv6\"
dst_ip = \"192.0.2.1\"
src_ip = \"2001:db8::/129\"
ip_proto = \"icmp\"
icmp_type = 8

[[classifier.filter]]
protocol = \"ip\"
dst_ip = \"2001:db8::1\"
ip_proto = \"icmpv6\"
icmp_code = 0
"
        );
        let errs = errors(&text);
        let has = |k: &str, why: &str| errs.iter().any(|(key, r)| key == k && r.contains(why));
        assert!(
            has("classifier.filter[0].dst_ip", "not an IPv6 address"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[0].src_ip", "longer than an IPv6"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[0].icmp_type", "needs ip_proto icmpv6"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[1].dst_ip", "not an IPv4 address"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[1].icmp_code", "needs ip_proto icmp"),
            "{errs:?}"
        );
    }

    #[test]
    fn mistakes_are_refused_at_their_key() {
        let text = format!(
            "{PORTS}
[[classifier.filter]]
protocol = \"ip\"
ip_tos = \"0x10/0x1ff\"
src_port = 80
dst_port = \"20-10\"
ip_proto = \"udp\"
actions = [\"mirred egress redirect dev eth7\", \"goto chain 3\"]

[[classifier.filter]]
src_ip = \"10.0.0.1\"
vlan_id = 3
actions = [\"drop\"]
"
        );
        let errs = errors(&text);
        let has = |k: &str, why: &str| errs.iter().any(|(key, r)| key == k && r.contains(why));
        assert!(
            has("classifier.filter[0].ip_tos", "wider than ip_tos"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[0].dst_port", "upside down"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[0].actions[0]", "no port named 'eth7'"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[1].src_ip", "needs protocol"),
            "{errs:?}"
        );
        assert!(
            has("classifier.filter[1].vlan_id", "needs protocol"),
            "{errs:?}"
        );
        // Once the keys are right, the chain is checked.
        let text = format!("{PORTS}\n[[classifier.filter]]\nactions = [\"goto chain 3\"]\n");
        let errs = errors(&text);
        assert!(
            errs.iter()
                .any(|(k, r)| k == "classifier.filter[0]" && r.contains("chain 3")),
            "{errs:?}"
        );
    }
}
