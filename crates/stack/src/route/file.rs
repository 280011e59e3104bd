//! Route files, one route per line in `ip route` syntax, IPv4 and IPv6 lines mixed (the
//! IPv6 ones as `ip -6 route` takes them):
//!
//! ```text
//! # comment
//! 198.51.100.0/24 via 192.0.2.254 dev eth1
//! 203.0.113.0/24 via 192.0.2.254          # dev found from the gateway's subnet
//! 192.0.2.128/25 dev eth1                  # directly connected
//! blackhole 10.66.0.0/16
//! unreachable 10.67.0.0/16
//! prohibit 10.68.0.0/16
//! throw 10.69.0.0/16                       # policy routing: on to the next rule
//! default via 192.0.2.254 dev eth1
//! 10.70.0.0/16 nexthop via 192.0.2.254 dev eth1 weight 1 nexthop via 198.51.100.1 weight 2
//! 2001:db8:1::/48 via fe80::1 dev eth1     # a link-local gateway names its link
//! 2001:db8:2::/48 via 2001:db8:ff::1       # dev found from the gateway's on-link prefix
//! default via 2001:db8:ff::fe              # IPv6: the gateway says so
//! ::/0 dev eth1
//! blackhole 2001:db8:dead::/48
//! 2001:db8:3::/48 nexthop via fe80::1 dev eth1 nexthop via fe80::2 dev eth1 weight 3
//! ```
//!
//! A multipath route lists its next hops after the prefix, each `nexthop [via GATEWAY]
//! [dev NAME] [weight N]` (weight 1 to 256, 1 when left out; the device found from the
//! gateway's subnet when left out), as `ip route add` takes them. A route with a single
//! `nexthop` is a single-path route (its weight means nothing), as the kernel keeps it.
//!
//! A line's family is its prefix's; `default` is IPv6 when its first gateway is (as
//! `ip route add default via 2001:db8::1` takes it) and IPv4 otherwise, so an IPv6
//! default route without a gateway is written `::/0`. Every gateway of a line is of its
//! family. What an IPv6 line may not say, and an IPv4 one may:
//! - a gateway that is no router's unicast address: the unspecified address (RFC 4291
//!   2.5.2), loopback (2.5.3), a multicast group (2.7: a next hop is one neighbour, RFC
//!   4861 5.2), IPv4-mapped (2.5.5.2);
//! - a link-local gateway (`fe80::/10`) without `dev`: a link-local address names a node
//!   only together with its link (RFC 4291 2.5.6, RFC 4007 6), and every link has them;
//! - a prefix inside `fe80::/10` or `ff00::/8`: `ip6-route` never looks link-local or
//!   multicast destinations up (they are scoped to their link, or groups), so the route
//!   could only be a mistake.
//!
//! Without `dev`, a gateway must be on-link: on a connected subnet (IPv4) or an
//! interface's on-link prefix (IPv6); with `dev`, the gateway is taken as on-link
//! through it (`ip route`'s `onlink`).
//!
//! Parsing is a single pass over the bytes with no allocation per line beyond the result,
//! so a million-line file (of either family) loads in well under a second.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{
    Family, MAX_WEIGHT, MultipathOf, NextHopOf, Route, Route6, RouteKind, RouteOf, V4, V6,
};
use crate::prefix::{Ipv4Prefix, Ipv6Prefix, PrefixError};

/// A route of either family, as a line gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyRoute {
    /// An IPv4 route.
    V4(Route),
    /// An IPv6 route.
    V6(Route6),
}

/// The routes of a file, each family apart, each in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileRoutes {
    /// The IPv4 routes.
    pub v4: Vec<Route>,
    /// The IPv6 routes.
    pub v6: Vec<Route6>,
}

/// A route file line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for LineError {}

/// Resolves names and gateways while parsing.
pub trait Resolve {
    /// The interface index of a device name.
    fn iface(&self, name: &str) -> Option<u16>;
    /// The interface whose connected subnet holds `gw`.
    fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16>;
    /// The interface with an on-link prefix holding IPv6 `gw` (never a link-local one:
    /// every link has those). The default is none: interfaces without IPv6 prefixes.
    fn iface_for_gateway6(&self, gw: Ipv6Addr) -> Option<u16> {
        let _ = gw;
        None
    }
}

/// What the route syntax needs to know of an address family (shared with the
/// configuration's `[[route]]`, which checks the same things).
pub trait LineFamily: Family {
    /// The family's name in messages (`IPv4`, `IPv6`).
    const IP: &'static str;
    /// The other family's name.
    const OTHER: &'static str;
    /// What a prefix of the family looks like, in messages.
    const PREFIX_FORM: &'static str;
    /// What an off-link gateway is not on, in messages.
    const OFF_LINK: &'static str;
    /// `a` as this family's address, if it is one.
    fn addr_of(a: IpAddr) -> Option<Self::Addr>;
    /// A prefix word (`default` included).
    fn prefix(word: &str) -> Result<Self::Prefix, String>;
    /// Why a route for `p` could never be used, if so (see the module documentation).
    fn unused_prefix(p: &Self::Prefix) -> Option<String>;
    /// Why `gw` cannot be a next hop's gateway, if it cannot.
    fn bad_gateway(gw: Self::Addr) -> Option<String>;
    /// Whether `gw` names a router only together with its link (then `dev` is needed).
    fn scoped(gw: Self::Addr) -> bool;
    /// The interface `gw` is on-link through, when the next hop does not say.
    fn gateway_iface(r: &dyn Resolve, gw: Self::Addr) -> Option<u16>;
    /// The route as either family's.
    fn any(r: RouteOf<Self>) -> AnyRoute;
}

impl LineFamily for V4 {
    const IP: &'static str = "IPv4";
    const OTHER: &'static str = "IPv6";
    const PREFIX_FORM: &'static str = "a prefix (a.b.c.d/len, host bits zero)";
    const OFF_LINK: &'static str = "is not on a connected subnet";
    fn addr_of(a: IpAddr) -> Option<Ipv4Addr> {
        match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }
    }
    fn prefix(word: &str) -> Result<Ipv4Prefix, String> {
        if word == "default" {
            return Ok(Ipv4Prefix::truncating(Ipv4Addr::UNSPECIFIED, 0));
        }
        word.parse::<Ipv4Prefix>()
            .map_err(|e: PrefixError| e.to_string())
    }
    fn unused_prefix(_: &Ipv4Prefix) -> Option<String> {
        None
    }
    fn bad_gateway(_: Ipv4Addr) -> Option<String> {
        None
    }
    fn scoped(_: Ipv4Addr) -> bool {
        false
    }
    fn gateway_iface(r: &dyn Resolve, gw: Ipv4Addr) -> Option<u16> {
        r.iface_for_gateway(gw)
    }
    fn any(r: Route) -> AnyRoute {
        AnyRoute::V4(r)
    }
}

/// Whether `p` lies inside `within` (both IPv6).
fn inside(p: &Ipv6Prefix, within: u128, len: u8) -> bool {
    p.prefix_len() >= len && (p.bits() ^ within) >> (128 - u32::from(len)) == 0
}

impl LineFamily for V6 {
    const IP: &'static str = "IPv6";
    const OTHER: &'static str = "IPv4";
    const PREFIX_FORM: &'static str = "an IPv6 prefix (addr/len, host bits zero)";
    const OFF_LINK: &'static str = "is not on-link (on no interface's IPv6 prefix)";
    fn addr_of(a: IpAddr) -> Option<Ipv6Addr> {
        match a {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }
    }
    fn prefix(word: &str) -> Result<Ipv6Prefix, String> {
        if word == "default" {
            return Ok(Ipv6Prefix::DEFAULT);
        }
        // A length too large for the parser's byte still gets its own reason.
        if let Some((_, l)) = word.split_once('/')
            && let Ok(n) = l.parse::<u32>()
            && n > 128
        {
            return Err(format!("'{word}': prefix length {n} is above 128"));
        }
        word.parse::<Ipv6Prefix>().map_err(|e| e.to_string())
    }
    fn unused_prefix(p: &Ipv6Prefix) -> Option<String> {
        if inside(p, 0xfe80 << 112, 10) {
            Some(format!(
                "{p} is link-local (inside fe80::/10): link-local destinations are never \
                 routed (RFC 4291 2.5.6), so the route would never be used"
            ))
        } else if inside(p, 0xff << 120, 8) {
            Some(format!(
                "{p} is multicast (inside ff00::/8): netbatch does not route multicast, so \
                 the route would never be used"
            ))
        } else {
            None
        }
    }
    fn bad_gateway(gw: Ipv6Addr) -> Option<String> {
        let s = gw.segments();
        let why = if gw.is_unspecified() {
            "the unspecified address (RFC 4291 2.5.2)"
        } else if gw.is_loopback() {
            "the loopback address (RFC 4291 2.5.3), which never leaves a node"
        } else if gw.is_multicast() {
            "a multicast group (ff00::/8): a next hop is one neighbour (RFC 4861 5.2)"
        } else if s[..5] == [0; 5] && s[5] == 0xffff {
            "IPv4-mapped (::ffff:0:0/96, RFC 4291 2.5.5.2), which no wire carries"
        } else {
            return None;
        };
        Some(format!("gateway {gw} is {why}, no router's address"))
    }
    fn scoped(gw: Ipv6Addr) -> bool {
        netbatch_wire::ipv6::is_link_local(gw)
    }
    fn gateway_iface(r: &dyn Resolve, gw: Ipv6Addr) -> Option<u16> {
        r.iface_for_gateway6(gw)
    }
    fn any(r: Route6) -> AnyRoute {
        AnyRoute::V6(r)
    }
}

/// Why next hop gateway `gw` is unusable for a next hop with (`dev`) or without an
/// output interface named, if it is; `add_dev` is how the message says to name one.
pub fn gateway_problem<F: LineFamily>(gw: F::Addr, dev: bool, add_dev: &str) -> Option<String> {
    if let Some(why) = F::bad_gateway(gw) {
        return Some(why);
    }
    (!dev && F::scoped(gw)).then(|| {
        format!(
            "gateway {gw} is link-local, which names a router only together with its link \
             (RFC 4007 6); {add_dev}"
        )
    })
}

/// Parses one line (without its comment); `Ok(None)` for a blank line.
pub fn parse_line(text: &str, r: &dyn Resolve) -> Result<Option<AnyRoute>, String> {
    let text = text.split('#').next().unwrap_or("");
    let mut words = text.split_ascii_whitespace();
    let Some(first) = words.next() else {
        return Ok(None);
    };
    let special = match first {
        "blackhole" => Some(RouteKind::Blackhole),
        "unreachable" => Some(RouteKind::Unreachable),
        "prohibit" => Some(RouteKind::Prohibit),
        "throw" => Some(RouteKind::Throw),
        _ => None,
    };
    let pword = match special {
        Some(_) => words.next().ok_or("missing prefix")?,
        None => first,
    };
    let v6 = if pword == "default" {
        // The first gateway's family, as `ip route` infers it.
        text.split_ascii_whitespace()
            .skip_while(|w| *w != "via")
            .nth(1)
            .is_some_and(|w| w.contains(':'))
    } else {
        pword.contains(':')
    };
    let (kind, word) = (special.map(|k| (k, first)), pword);
    if v6 {
        line::<V6>(kind, word, &mut words, r).map(|r| Some(AnyRoute::V6(r)))
    } else {
        line::<V4>(kind, word, &mut words, r).map(|r| Some(AnyRoute::V4(r)))
    }
}

/// The route of a line whose prefix word is `pword`, after it `words`; `kind` is the
/// special kind and its word, when the line began with one.
fn line<'a, F: LineFamily>(
    kind: Option<(RouteKind, &str)>,
    pword: &str,
    words: &mut impl Iterator<Item = &'a str>,
    r: &dyn Resolve,
) -> Result<RouteOf<F>, String> {
    let p = F::prefix(pword)?;
    if let Some(why) = F::unused_prefix(&p) {
        return Err(why);
    }
    if let Some((kind, first)) = kind {
        if let Some(extra) = words.next() {
            return Err(format!("unexpected '{extra}' after a {first} route"));
        }
        return Ok(RouteOf::new(p, kind, None, None));
    }
    let mut gateway = None;
    let mut dev = None;
    while let Some(w) = words.next() {
        match w {
            "via" => {
                gateway = Some(address::<F>(
                    words.next().ok_or("'via' needs an address")?,
                    &p,
                )?);
            }
            "dev" => dev = Some(device(words.next().ok_or("'dev' needs a device name")?, r)?),
            "nexthop" if gateway.is_none() && dev.is_none() => {
                return multipath(p, words, r);
            }
            "nexthop" => {
                return Err(
                    "unexpected 'nexthop' after 'via' or 'dev' (a route has one next hop, \
                     or only 'nexthop's)"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "unexpected '{other}' (expected 'via', 'dev' or 'nexthop')"
                ));
            }
        }
    }
    let out_if = out_if::<F>(dev, gateway, r)?;
    Ok(RouteOf::new(p, RouteKind::Unicast, Some(out_if), gateway))
}

/// A gateway address word of a route for `p`, of the route's family.
pub fn address<F: LineFamily>(word: &str, p: &F::Prefix) -> Result<F::Addr, String> {
    let a = word
        .parse::<IpAddr>()
        .map_err(|_| format!("'{word}' is not an {} address", F::IP))?;
    F::addr_of(a).ok_or_else(|| {
        format!(
            "'{word}' is an {} address: the gateway of an {} route ({p}) is an {} address",
            F::OTHER,
            F::IP,
            F::IP
        )
    })
}

/// The interface a device name word names.
fn device(word: &str, r: &dyn Resolve) -> Result<u16, String> {
    r.iface(word)
        .ok_or_else(|| format!("no interface named '{word}'"))
}

/// The output interface of a next hop given `dev` and `via` (either may be left out).
fn out_if<F: LineFamily>(
    dev: Option<u16>,
    gateway: Option<F::Addr>,
    r: &dyn Resolve,
) -> Result<u16, String> {
    if let Some(g) = gateway
        && let Some(why) = gateway_problem::<F>(g, dev.is_some(), "add 'dev NAME'")
    {
        return Err(why);
    }
    match (dev, gateway) {
        (Some(d), _) => Ok(d),
        (None, Some(g)) => F::gateway_iface(r, g)
            .ok_or_else(|| format!("gateway {g} {}; add 'dev NAME'", F::OFF_LINK)),
        (None, None) => Err("a route needs 'via GATEWAY' or 'dev NAME'".into()),
    }
}

/// The rest of a multipath route's line (after its first `nexthop`).
fn multipath<'a, F: LineFamily>(
    p: F::Prefix,
    words: &mut impl Iterator<Item = &'a str>,
    r: &dyn Resolve,
) -> Result<RouteOf<F>, String> {
    let mut hops = Vec::new();
    let mut more = true;
    while more {
        let n = hops.len() + 1;
        let (hop, next) = next_hop::<F>(words, &p, r).map_err(|e| format!("nexthop {n}: {e}"))?;
        hops.push(hop);
        more = next;
    }
    if let [one] = hops[..] {
        return Ok(RouteOf::new(
            p,
            RouteKind::Unicast,
            Some(one.out_if),
            one.gateway,
        ));
    }
    Ok(RouteOf::multipath(
        p,
        MultipathOf::new(hops).map_err(|e| e.to_string())?,
    ))
}

/// One `nexthop`'s words, up to the next `nexthop` (then `true`) or the end of the line.
fn next_hop<'a, F: LineFamily>(
    words: &mut impl Iterator<Item = &'a str>,
    p: &F::Prefix,
    r: &dyn Resolve,
) -> Result<(NextHopOf<F>, bool), String> {
    let (mut gateway, mut dev, mut weight) = (None, None, None);
    let mut next = false;
    while let Some(w) = words.next() {
        let mut arg = |need: &str| words.next().ok_or_else(|| format!("'{w}' needs {need}"));
        let seen = match w {
            "via" => gateway
                .replace(address::<F>(arg("an address")?, p)?)
                .is_some(),
            "dev" => dev.replace(device(arg("a device name")?, r)?).is_some(),
            "weight" => {
                let word = arg("a number")?;
                let v = word
                    .parse::<u16>()
                    .ok()
                    .filter(|v| (1..=MAX_WEIGHT).contains(v))
                    .ok_or_else(|| {
                        format!("weight '{word}' is not a number from 1 to {MAX_WEIGHT}")
                    })?;
                weight.replace(v).is_some()
            }
            "nexthop" => {
                next = true;
                break;
            }
            other => {
                return Err(format!(
                    "unexpected '{other}' (expected 'via', 'dev', 'weight' or 'nexthop')"
                ));
            }
        };
        if seen {
            return Err(format!("'{w}' given twice"));
        }
    }
    if gateway.is_none() && dev.is_none() {
        return Err("a next hop needs 'via GATEWAY' or 'dev NAME'".into());
    }
    let hop = NextHopOf {
        gateway,
        out_if: out_if::<F>(dev, gateway, r)?,
        weight: weight.unwrap_or(1),
    };
    Ok((hop, next))
}

/// Reads a whole file line by line, handing each route to `take` with its 1-based line;
/// stops at the first bad line.
pub fn each_route(
    text: &str,
    r: &dyn Resolve,
    mut take: impl FnMut(AnyRoute, usize),
) -> Result<(), LineError> {
    for (i, line) in text.lines().enumerate() {
        match parse_line(line, r) {
            Ok(Some(route)) => take(route, i + 1),
            Ok(None) => {}
            Err(reason) => {
                return Err(LineError {
                    line: i + 1,
                    reason,
                });
            }
        }
    }
    Ok(())
}

/// Parses a whole file, both families; stops at the first bad line.
pub fn parse_all(text: &str, r: &dyn Resolve) -> Result<FileRoutes, LineError> {
    let mut out = FileRoutes {
        v4: Vec::with_capacity(text.len() / 40),
        v6: Vec::new(),
    };
    each_route(text, r, |route, _| match route {
        AnyRoute::V4(x) => out.v4.push(x),
        AnyRoute::V6(x) => out.v6.push(x),
    })?;
    Ok(out)
}

/// Parses a whole file and returns its IPv4 routes (its IPv6 lines are parsed and
/// checked as well, then left out: [`parse_all`] keeps them); stops at the first bad
/// line.
pub fn parse(text: &str, r: &dyn Resolve) -> Result<Vec<Route>, LineError> {
    parse_all(text, r).map(|f| f.v4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::NextHop;

    struct Two;
    impl Resolve for Two {
        fn iface(&self, name: &str) -> Option<u16> {
            match name {
                "eth0" => Some(0),
                "eth1" => Some(1),
                _ => None,
            }
        }
        fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
            (gw.octets()[..3] == [192, 0, 2]).then_some(1)
        }
        /// eth1 has 2001:db8:ff::/64 on-link.
        fn iface_for_gateway6(&self, gw: Ipv6Addr) -> Option<u16> {
            (gw.segments()[..4] == [0x2001, 0xdb8, 0xff, 0]).then_some(1)
        }
    }

    fn v6(line: &str) -> Route6 {
        match parse_line(line, &Two) {
            Ok(Some(AnyRoute::V6(r))) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn a6(s: &str) -> Option<Ipv6Addr> {
        Some(s.parse().expect("address"))
    }

    /// `ip -6 route` lines (ip-route(8)): the family from the prefix, or for `default`
    /// from the gateway; a link-local gateway with its device; the device of a global
    /// gateway found from its interface's on-link prefix; special kinds; `nexthop`s.
    #[test]
    fn parses_ip6_route_lines() {
        let p = |s: &str| s.parse::<Ipv6Prefix>().expect("prefix");
        assert_eq!(
            v6("2001:db8:1::/48 via fe80::1 dev eth1"),
            Route6::new(
                p("2001:db8:1::/48"),
                RouteKind::Unicast,
                Some(1),
                a6("fe80::1")
            )
        );
        assert_eq!(
            v6("2001:db8:2::/48 via 2001:db8:ff::9   # found from eth1's prefix"),
            Route6::new(
                p("2001:db8:2::/48"),
                RouteKind::Unicast,
                Some(1),
                a6("2001:db8:ff::9")
            )
        );
        assert_eq!(
            v6("default via 2001:db8::ffff dev eth0"),
            Route6::new(p("::/0"), RouteKind::Unicast, Some(0), a6("2001:db8::ffff"))
        );
        assert_eq!(
            v6("::/0 dev eth1"),
            Route6::new(p("::/0"), RouteKind::Unicast, Some(1), None)
        );
        assert_eq!(
            v6("blackhole 2001:db8:dead::/48"),
            Route6::new(p("2001:db8:dead::/48"), RouteKind::Blackhole, None, None)
        );
        assert_eq!(
            v6("unreachable 2001:db8:5::/48").kind,
            RouteKind::Unreachable
        );
        assert_eq!(v6("prohibit 2001:db8:6::/48").kind, RouteKind::Prohibit);
        assert_eq!(v6("throw 2001:db8:7::/48").kind, RouteKind::Throw);
        assert_eq!(v6("2001:db8::7 dev eth0").prefix, p("2001:db8::7/128"));
        let m =
            v6("2001:db8:3::/48 nexthop via fe80::1 dev eth1 nexthop via 2001:db8:ff::2 weight 3");
        let hops = m.multipath.as_ref().map(|m| m.hops().to_vec());
        assert_eq!(
            hops,
            Some(vec![
                NextHopOf {
                    gateway: a6("fe80::1"),
                    out_if: 1,
                    weight: 1
                },
                NextHopOf {
                    gateway: a6("2001:db8:ff::2"),
                    out_if: 1,
                    weight: 3
                },
            ])
        );
        assert_eq!((m.out_if, m.gateway), (Some(1), a6("fe80::1")));
        assert_eq!(
            v6("default nexthop via fe80::1 dev eth0 nexthop via fe80::2 dev eth1").prefix,
            Ipv6Prefix::DEFAULT
        );
        // `default` without an IPv6 gateway is IPv4's, as `ip route` takes it.
        assert!(matches!(
            parse_line("default dev eth1", &Two),
            Ok(Some(AnyRoute::V4(_)))
        ));
    }

    /// What an IPv6 line may not say, each refused with its reason.
    #[test]
    fn bad_ip6_lines_say_why() {
        let cases = [
            (
                "2001:db8::1/32 dev eth0",
                "'2001:db8::1/32' has host bits set beyond its length",
            ),
            ("2001:db8::/129 dev eth0", "prefix length 129 is above 128"),
            ("2001:db8::/300 dev eth0", "prefix length 300 is above 128"),
            (
                "2001:db8::/48 via 2001:db8:99::1",
                "gateway 2001:db8:99::1 is not on-link (on no interface's IPv6 prefix); add 'dev NAME'",
            ),
            (
                "2001:db8::/48 via fe80::1",
                "gateway fe80::1 is link-local, which names a router only together with its link (RFC 4007 6); add 'dev NAME'",
            ),
            (
                "2001:db8::/48 via ff02::1 dev eth0",
                "gateway ff02::1 is a multicast group",
            ),
            (
                "2001:db8::/48 via :: dev eth0",
                "gateway :: is the unspecified address",
            ),
            (
                "2001:db8::/48 via ::1 dev eth0",
                "gateway ::1 is the loopback address",
            ),
            ("2001:db8::/48 via ::ffff:192.0.2.9 dev eth1", "IPv4-mapped"),
            (
                "2001:db8::/48 via 192.0.2.9",
                "'192.0.2.9' is an IPv4 address: the gateway of an IPv6 route (2001:db8::/48) is an IPv6 address",
            ),
            (
                "10.0.0.0/8 via 2001:db8:ff::1",
                "'2001:db8:ff::1' is an IPv6 address: the gateway of an IPv4 route (10.0.0.0/8) is an IPv4 address",
            ),
            (
                "default via 2001:db8:ff::1 nexthop dev eth0",
                "unexpected 'nexthop'",
            ),
            (
                "default nexthop via fe80::1 dev eth0 nexthop via 192.0.2.9",
                "nexthop 2: '192.0.2.9' is an IPv4 address",
            ),
            (
                "2001:db8::/48 nexthop via fe80::1 dev eth0 nexthop via fe80::2",
                "nexthop 2: gateway fe80::2 is link-local",
            ),
            (
                "fe80::/64 dev eth0",
                "fe80::/64 is link-local (inside fe80::/10)",
            ),
            ("blackhole ff00::/8", "ff00::/8 is multicast"),
            (
                "2001:db8::/48 via 2001:db8:ff::zz",
                "'2001:db8:ff::zz' is not an IPv6 address",
            ),
            ("2001:db8::/48 dev eth9", "no interface named 'eth9'"),
            ("2001:db8::/48", "needs 'via"),
            ("2001:db8::/48 dev eth0 metric 1024", "unexpected 'metric'"),
        ];
        for (text, want) in cases {
            let e = parse(&format!("10.0.0.0/8 dev eth0\n{text}\n"), &Two).unwrap_err();
            assert_eq!(e.line, 2, "{text}");
            assert!(e.reason.contains(want), "{text}: {}", e.reason);
        }
        // A prefix merely covering link-local or multicast space is fine.
        assert_eq!(v6("8000::/1 dev eth0").prefix.prefix_len(), 1);
        assert_eq!(v6("fe00::/7 dev eth0").prefix.prefix_len(), 7);
    }

    /// IPv4 and IPv6 lines mix in one file; each family keeps its file order.
    #[test]
    fn a_file_mixes_families() {
        let text = "10.1.0.0/16 via 192.0.2.9\n2001:db8:1::/48 via fe80::1 dev eth1\n\
                    # both\n10.2.0.0/16 dev eth0\nblackhole 2001:db8:dead::/48\n";
        let f = parse_all(text, &Two).unwrap();
        let v4: Vec<String> = f.v4.iter().map(|r| r.prefix.to_string()).collect();
        let v6: Vec<String> = f.v6.iter().map(|r| r.prefix.to_string()).collect();
        assert_eq!(v4, ["10.1.0.0/16", "10.2.0.0/16"]);
        assert_eq!(v6, ["2001:db8:1::/48", "2001:db8:dead::/48"]);
        assert_eq!(parse(text, &Two).unwrap(), f.v4);
        let mut lines = Vec::new();
        each_route(text, &Two, |_, l| lines.push(l)).unwrap();
        assert_eq!(lines, [1, 2, 4, 5]);
    }

    #[test]
    fn parses_ip_route_lines() {
        let text = "# routes\n\n198.51.100.0/24 via 192.0.2.254 dev eth1\n203.0.113.0/24 via 192.0.2.9\n\
                    10.0.0.0/8 dev eth0  # connected\nblackhole 10.66.0.0/16\nunreachable 10.67.0.0/16\n\
                    prohibit 10.68.0.0/16\ndefault via 192.0.2.1\n";
        let rs = parse(text, &Two).unwrap();
        assert_eq!(rs.len(), 7);
        assert_eq!(
            rs[0],
            Route {
                prefix: "198.51.100.0/24".parse().unwrap(),
                kind: RouteKind::Unicast,
                out_if: Some(1),
                gateway: Some("192.0.2.254".parse().unwrap()),
                multipath: None,
            }
        );
        assert_eq!(
            rs[1].out_if,
            Some(1),
            "device found from the gateway's subnet"
        );
        assert_eq!((rs[2].out_if, rs[2].gateway), (Some(0), None));
        assert_eq!(rs[3].kind, RouteKind::Blackhole);
        assert_eq!(rs[4].kind, RouteKind::Unreachable);
        assert_eq!(rs[5].kind, RouteKind::Prohibit);
        assert_eq!(rs[6].prefix.prefix_len(), 0);
    }

    #[test]
    fn bad_lines_name_the_line_and_the_problem() {
        let cases = [
            ("10.0.0.0/8 via 1.2.3\n", "not an IPv4 address"),
            ("10.0.0.1/8 dev eth0\n", "host bits"),
            ("10.0.0.0/8 dev eth9\n", "no interface named 'eth9'"),
            ("10.0.0.0/8 via 8.8.8.8\n", "not on a connected subnet"),
            ("10.0.0.0/8\n", "needs 'via"),
            ("10.0.0.0/8 dev eth0 metric 5\n", "unexpected 'metric'"),
            ("blackhole\n", "missing prefix"),
            // Multipath lines: each error names its next hop and the word.
            (
                "10.0.0.0/8 nexthop via 192.0.2.9 nexthop via 8.8.8.8\n",
                "nexthop 2: gateway 8.8.8.8 is not on a connected subnet",
            ),
            (
                "10.0.0.0/8 nexthop via 192.0.2.9 weight 0 nexthop dev eth0\n",
                "nexthop 1: weight '0' is not a number from 1 to 256",
            ),
            (
                "10.0.0.0/8 nexthop via 192.0.2.9 weight 257 nexthop dev eth0\n",
                "weight '257'",
            ),
            (
                "10.0.0.0/8 nexthop dev eth0 weight two nexthop dev eth1\n",
                "weight 'two'",
            ),
            (
                "10.0.0.0/8 nexthop dev eth0 nexthop dev eth1 weight\n",
                "nexthop 2: 'weight' needs a number",
            ),
            (
                "10.0.0.0/8 nexthop dev eth0 nexthop weight 2\n",
                "nexthop 2: a next hop needs 'via GATEWAY' or 'dev NAME'",
            ),
            ("10.0.0.0/8 nexthop\n", "nexthop 1: a next hop needs"),
            (
                "10.0.0.0/8 nexthop dev eth0 nexthop dev eth1 metric 5\n",
                "nexthop 2: unexpected 'metric'",
            ),
            (
                "10.0.0.0/8 nexthop dev eth0 dev eth1 nexthop dev eth1\n",
                "nexthop 1: 'dev' given twice",
            ),
            (
                "10.0.0.0/8 nexthop via 192.0.2.9 via 192.0.2.8 nexthop dev eth0\n",
                "nexthop 1: 'via' given twice",
            ),
            (
                "10.0.0.0/8 nexthop dev eth9 nexthop dev eth0\n",
                "nexthop 1: no interface named 'eth9'",
            ),
            (
                "10.0.0.0/8 nexthop via 192.0.2 nexthop dev eth0\n",
                "nexthop 1: '192.0.2' is not an IPv4 address",
            ),
            (
                "10.0.0.0/8 via 192.0.2.9 nexthop dev eth0\n",
                "unexpected 'nexthop' after 'via' or 'dev'",
            ),
            (
                "blackhole 10.0.0.0/8 nexthop dev eth0\n",
                "unexpected 'nexthop' after a blackhole route",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&format!("# ok\n{text}"), &Two).unwrap_err();
            assert_eq!(e.line, 2, "{text}");
            assert!(e.reason.contains(want), "{text}: {}", e.reason);
        }
    }

    /// `ip route`'s multipath syntax (ip-route(8): `nexthop NH` with `via`, `dev` and
    /// `weight`): next hops in order, weight 1 when left out, the device found from the
    /// gateway's subnet as for a single-path route; one `nexthop` alone is a plain route.
    #[test]
    fn parses_multipath_lines() {
        let text = "10.1.0.0/16 nexthop via 192.0.2.9 dev eth1 weight 1 nexthop via 192.0.2.10 weight 3\n\
                    10.2.0.0/16 nexthop dev eth0 nexthop via 192.0.2.9 nexthop dev eth1 weight 256 # three\n\
                    10.3.0.0/16 nexthop via 192.0.2.9 weight 7\n\
                    default nexthop via 192.0.2.1 nexthop via 192.0.2.2\n";
        let rs = parse(text, &Two).unwrap();
        assert_eq!(rs.len(), 4);
        let gw = |s: &str| Some(s.parse::<Ipv4Addr>().unwrap());
        let hop = |gateway, out_if, weight| NextHop {
            gateway,
            out_if,
            weight,
        };
        let hops = |r: &Route| r.multipath.as_ref().map(|m| m.hops().to_vec());
        assert_eq!(
            hops(&rs[0]),
            Some(vec![
                hop(gw("192.0.2.9"), 1, 1),
                hop(gw("192.0.2.10"), 1, 3)
            ])
        );
        assert_eq!(rs[0].kind, RouteKind::Unicast);
        assert_eq!(
            (rs[0].out_if, rs[0].gateway),
            (Some(1), gw("192.0.2.9")),
            "the first next hop is the route's out_if and gateway"
        );
        assert_eq!(
            hops(&rs[1]),
            Some(vec![
                hop(None, 0, 1),
                hop(gw("192.0.2.9"), 1, 1),
                hop(None, 1, 256)
            ])
        );
        assert_eq!(
            rs[2],
            Route::new(
                "10.3.0.0/16".parse().unwrap(),
                RouteKind::Unicast,
                Some(1),
                gw("192.0.2.9")
            ),
            "a single nexthop is a single-path route"
        );
        assert_eq!(rs[3].prefix.prefix_len(), 0);
        assert_eq!(rs[3].multipath.as_ref().map(|m| m.hops().len()), Some(2));
        // More than 256 next hops are refused.
        let many: String = (0..257).map(|_| " nexthop dev eth0").collect();
        let e = parse(&format!("10.0.0.0/8{many}\n"), &Two).unwrap_err();
        assert!(e.reason.contains("257 next hops (at most 256)"), "{e}");
    }
}
