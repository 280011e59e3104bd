//! Route files, one route per line in `ip route` syntax:
//!
//! ```text
//! # comment
//! 198.51.100.0/24 via 192.0.2.254 dev eth1
//! 203.0.113.0/24 via 192.0.2.254          # dev found from the gateway's subnet
//! 192.0.2.128/25 dev eth1                  # directly connected
//! blackhole 10.66.0.0/16
//! unreachable 10.67.0.0/16
//! prohibit 10.68.0.0/16
//! default via 192.0.2.254 dev eth1
//! 10.70.0.0/16 nexthop via 192.0.2.254 dev eth1 weight 1 nexthop via 198.51.100.1 weight 2
//! ```
//!
//! A multipath route lists its next hops after the prefix, each `nexthop [via GATEWAY]
//! [dev NAME] [weight N]` (weight 1 to 256, 1 when left out; the device found from the
//! gateway's subnet when left out), as `ip route add` takes them. A route with a single
//! `nexthop` is a single-path route (its weight means nothing), as the kernel keeps it.
//!
//! Parsing is a single pass over the bytes with no allocation per line beyond the result,
//! so a million-line file loads in well under a second.

use core::fmt;
use core::net::Ipv4Addr;

use super::{MAX_WEIGHT, Multipath, NextHop, Route, RouteKind};
use crate::prefix::{Ipv4Prefix, PrefixError};

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
}

fn prefix(word: &str) -> Result<Ipv4Prefix, String> {
    if word == "default" {
        return Ok(Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 0).unwrap_or_else(|_| unreachable!()));
    }
    word.parse::<Ipv4Prefix>()
        .map_err(|e: PrefixError| e.to_string())
}

/// Parses one line (without its comment); `Ok(None)` for a blank line.
pub fn parse_line(text: &str, r: &dyn Resolve) -> Result<Option<Route>, String> {
    let text = text.split('#').next().unwrap_or("");
    let mut words = text.split_ascii_whitespace();
    let Some(first) = words.next() else {
        return Ok(None);
    };
    let special = match first {
        "blackhole" => Some(RouteKind::Blackhole),
        "unreachable" => Some(RouteKind::Unreachable),
        "prohibit" => Some(RouteKind::Prohibit),
        _ => None,
    };
    if let Some(kind) = special {
        let p = prefix(words.next().ok_or("missing prefix")?)?;
        if let Some(extra) = words.next() {
            return Err(format!("unexpected '{extra}' after a {first} route"));
        }
        return Ok(Some(Route::new(p, kind, None, None)));
    }
    let p = prefix(first)?;
    let mut gateway = None;
    let mut dev = None;
    while let Some(w) = words.next() {
        match w {
            "via" => gateway = Some(address(words.next().ok_or("'via' needs an address")?)?),
            "dev" => dev = Some(device(words.next().ok_or("'dev' needs a device name")?, r)?),
            "nexthop" if gateway.is_none() && dev.is_none() => {
                return multipath(p, &mut words, r).map(Some);
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
    let out_if = out_if(dev, gateway, r)?;
    Ok(Some(Route::new(
        p,
        RouteKind::Unicast,
        Some(out_if),
        gateway,
    )))
}

/// An IPv4 address word.
fn address(word: &str) -> Result<Ipv4Addr, String> {
    word.parse::<Ipv4Addr>()
        .map_err(|_| format!("'{word}' is not an IPv4 address"))
}

/// The interface a device name word names.
fn device(word: &str, r: &dyn Resolve) -> Result<u16, String> {
    r.iface(word)
        .ok_or_else(|| format!("no interface named '{word}'"))
}

/// The output interface of a next hop given `dev` and `via` (either may be left out).
fn out_if(dev: Option<u16>, gateway: Option<Ipv4Addr>, r: &dyn Resolve) -> Result<u16, String> {
    match (dev, gateway) {
        (Some(d), _) => Ok(d),
        (None, Some(g)) => r
            .iface_for_gateway(g)
            .ok_or_else(|| format!("gateway {g} is not on a connected subnet; add 'dev NAME'")),
        (None, None) => Err("a route needs 'via GATEWAY' or 'dev NAME'".into()),
    }
}

/// The rest of a multipath route's line (after its first `nexthop`).
fn multipath<'a>(
    p: Ipv4Prefix,
    words: &mut impl Iterator<Item = &'a str>,
    r: &dyn Resolve,
) -> Result<Route, String> {
    let mut hops = Vec::new();
    let mut more = true;
    while more {
        let n = hops.len() + 1;
        let (hop, next) = next_hop(words, r).map_err(|e| format!("nexthop {n}: {e}"))?;
        hops.push(hop);
        more = next;
    }
    if let [one] = hops[..] {
        return Ok(Route::new(
            p,
            RouteKind::Unicast,
            Some(one.out_if),
            one.gateway,
        ));
    }
    Ok(Route::multipath(
        p,
        Multipath::new(hops).map_err(|e| e.to_string())?,
    ))
}

/// One `nexthop`'s words, up to the next `nexthop` (then `true`) or the end of the line.
fn next_hop<'a>(
    words: &mut impl Iterator<Item = &'a str>,
    r: &dyn Resolve,
) -> Result<(NextHop, bool), String> {
    let (mut gateway, mut dev, mut weight) = (None, None, None);
    let mut next = false;
    while let Some(w) = words.next() {
        let mut arg = |need: &str| words.next().ok_or_else(|| format!("'{w}' needs {need}"));
        let seen = match w {
            "via" => gateway.replace(address(arg("an address")?)?).is_some(),
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
    let hop = NextHop {
        gateway,
        out_if: out_if(dev, gateway, r)?,
        weight: weight.unwrap_or(1),
    };
    Ok((hop, next))
}

/// Parses a whole file; stops at the first bad line.
pub fn parse(text: &str, r: &dyn Resolve) -> Result<Vec<Route>, LineError> {
    let mut out = Vec::with_capacity(text.len() / 40);
    for (i, line) in text.lines().enumerate() {
        match parse_line(line, r) {
            Ok(Some(route)) => out.push(route),
            Ok(None) => {}
            Err(reason) => {
                return Err(LineError {
                    line: i + 1,
                    reason,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
