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
//! ```
//!
//! Parsing is a single pass over the bytes with no allocation per line beyond the result,
//! so a million-line file loads in well under a second.

use core::fmt;
use core::net::Ipv4Addr;

use super::{Route, RouteKind};
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
        return Ok(Some(Route {
            prefix: p,
            kind,
            out_if: None,
            gateway: None,
        }));
    }
    let p = prefix(first)?;
    let mut gateway = None;
    let mut dev = None;
    while let Some(w) = words.next() {
        match w {
            "via" => {
                let g = words.next().ok_or("'via' needs an address")?;
                gateway = Some(
                    g.parse::<Ipv4Addr>()
                        .map_err(|_| format!("'{g}' is not an IPv4 address"))?,
                );
            }
            "dev" => {
                let d = words.next().ok_or("'dev' needs a device name")?;
                dev = Some(
                    r.iface(d)
                        .ok_or_else(|| format!("no interface named '{d}'"))?,
                );
            }
            other => return Err(format!("unexpected '{other}' (expected 'via' or 'dev')")),
        }
    }
    let out_if = match (dev, gateway) {
        (Some(d), _) => d,
        (None, Some(g)) => r
            .iface_for_gateway(g)
            .ok_or_else(|| format!("gateway {g} is not on a connected subnet; add 'dev NAME'"))?,
        (None, None) => return Err("a route needs 'via GATEWAY' or 'dev NAME'".into()),
    };
    Ok(Some(Route {
        prefix: p,
        kind: RouteKind::Unicast,
        out_if: Some(out_if),
        gateway,
    }))
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
        ];
        for (text, want) in cases {
            let e = parse(&format!("# ok\n{text}"), &Two).unwrap_err();
            assert_eq!(e.line, 2, "{text}");
            assert!(e.reason.contains(want), "{text}: {}", e.reason);
        }
    }
}
