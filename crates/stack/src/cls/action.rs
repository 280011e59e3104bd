//! A filter's actions, written as `tc` writes them (`tc-actions(8)`, `tc-police(8)`,
//! `tc-mirred(8)`, `tc-skbedit(8)`), run in order until one ends the packet's
//! classification:
//!
//! | text | does | then |
//! |---|---|---|
//! | `pass` (`ok`) | nothing | stop: on to L2 input |
//! | `drop` (`shot`) | drops (`cls_drop`) | stop |
//! | `skbedit mark N` (`mark N`) | sets the packet mark | next action (the last passes) |
//! | `mirred egress redirect dev P` | sends the frame out of port `P` as received | stop |
//! | `mirred egress mirror dev P` | sends a copy out of port `P` | next action |
//! | `police rate R burst B [conform-exceed E[/C]]` | token bucket (`R` in `bit`, `kbit`, `mbit`, `gbit` or bytes per second `bps`, `kbps`, `mbps`; `B` in bytes, `k`, `m`) | `C` (default `ok`) when within the rate, `E` (default `drop`) beyond it; each `pass`, `drop` or `pipe` (next action) |
//! | `goto chain N` | classifies again in chain `N` (a later chain) | stop |

use core::fmt;

use super::police::Police;

/// What happens after an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Classification ends; the packet goes on.
    Pass,
    /// The packet is dropped.
    Drop,
    /// The next action runs.
    Pipe,
}

impl Control {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "ok" | "pass" => Ok(Self::Pass),
            "drop" | "shot" => Ok(Self::Drop),
            "pipe" => Ok(Self::Pipe),
            other => Err(format!(
                "'{other}' is not a police result (pass, drop or pipe)"
            )),
        }
    }
}

/// One action of a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Stop, the packet goes on.
    Pass,
    /// Drop.
    Drop,
    /// Set the packet mark.
    Mark(u32),
    /// Out of this port, as received.
    Redirect(u16),
    /// A copy out of this port.
    Mirror(u16),
    /// A token bucket.
    Police(Police),
    /// Classify again in this chain.
    Goto(u32),
}

impl Action {
    /// Parses one action as `tc` writes it; `port` names a port's index.
    pub fn parse(text: &str, port: impl Fn(&str) -> Option<u16>) -> Result<Self, String> {
        let w: Vec<&str> = text.split_whitespace().collect();
        let num = |s: &str| -> Result<u32, String> {
            let r = match s.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16),
                None => s.parse(),
            };
            r.map_err(|_| format!("'{s}' is not a number"))
        };
        let dev = |name: &str| port(name).ok_or_else(|| format!("no port named '{name}'"));
        match w.as_slice() {
            ["pass" | "ok"] => Ok(Self::Pass),
            ["drop" | "shot"] => Ok(Self::Drop),
            ["skbedit", "mark", n] | ["mark", n] => Ok(Self::Mark(num(n)?)),
            ["mirred", "egress", "redirect", "dev", p] => Ok(Self::Redirect(dev(p)?)),
            ["mirred", "egress", "mirror", "dev", p] => Ok(Self::Mirror(dev(p)?)),
            ["goto", "chain", n] => Ok(Self::Goto(num(n)?)),
            ["police", rest @ ..] => Self::police(rest),
            _ => Err(format!(
                "'{text}' is not an action (pass, drop, skbedit mark N, mirred egress redirect|mirror dev PORT, police rate R burst B [conform-exceed E/C], goto chain N)"
            )),
        }
    }

    fn police(w: &[&str]) -> Result<Self, String> {
        let (mut rate, mut burst) = (None, None);
        let (mut exceed, mut conform) = (Control::Drop, Control::Pass);
        let mut it = w.iter();
        while let Some(&k) = it.next() {
            let Some(&v) = it.next() else {
                return Err(format!("police: '{k}' needs a value"));
            };
            match k {
                "rate" => rate = Some(rate_bytes(v)?),
                "burst" | "buffer" | "maxburst" => burst = Some(size_bytes(v)?),
                "conform-exceed" => {
                    let (e, c) = v.split_once('/').unwrap_or((v, "ok"));
                    exceed = Control::parse(e)?;
                    conform = Control::parse(c)?;
                }
                other => return Err(format!("police: unknown '{other}'")),
            }
        }
        let rate = rate.ok_or("police needs a rate")?;
        let burst = burst.ok_or("police needs a burst")?;
        if rate == 0 || burst == 0 {
            return Err("police: rate and burst must be above 0".into());
        }
        Ok(Self::Police(Police::new(rate, burst, conform, exceed)))
    }
}

/// A rate in `tc`'s units, as bytes per second.
fn rate_bytes(s: &str) -> Result<u64, String> {
    let units: [(&str, f64); 8] = [
        ("gbit", 1e9 / 8.0),
        ("mbit", 1e6 / 8.0),
        ("kbit", 1e3 / 8.0),
        ("bit", 1.0 / 8.0),
        ("gbps", 1e9),
        ("mbps", 1e6),
        ("kbps", 1e3),
        ("bps", 1.0),
    ];
    let (n, scale) = units
        .iter()
        .find_map(|(u, f)| s.strip_suffix(u).map(|n| (n, *f)))
        .unwrap_or((s, 1.0 / 8.0));
    let v: f64 = n.parse().map_err(|_| format!("'{s}' is not a rate"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("'{s}' is not a rate"));
    }
    Ok((v * scale) as u64)
}

/// A size in `tc`'s units (`k` and `m` are 1024 and 1024², a bare number bytes).
fn size_bytes(s: &str) -> Result<u64, String> {
    let (n, scale) = if let Some(n) = s.strip_suffix("kb").or_else(|| s.strip_suffix('k')) {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix("mb").or_else(|| s.strip_suffix('m')) {
        (n, 1024 * 1024)
    } else {
        (s.strip_suffix('b').unwrap_or(s), 1)
    };
    n.parse::<u64>()
        .map(|v| v.saturating_mul(scale))
        .map_err(|_| format!("'{s}' is not a size"))
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pass => f.write_str("pass"),
            Self::Drop => f.write_str("drop"),
            Self::Mark(m) => write!(f, "skbedit mark {m}"),
            Self::Redirect(p) => write!(f, "mirred egress redirect port {p}"),
            Self::Mirror(p) => write!(f, "mirred egress mirror port {p}"),
            Self::Police(p) => write!(f, "police {p}"),
            Self::Goto(c) => write!(f, "goto chain {c}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(n: &str) -> Option<u16> {
        (n == "eth1").then_some(1)
    }

    #[test]
    fn actions_parse_as_tc_writes_them() {
        assert_eq!(Action::parse("drop", port), Ok(Action::Drop));
        assert_eq!(
            Action::parse("skbedit mark 0x10", port),
            Ok(Action::Mark(16))
        );
        assert_eq!(
            Action::parse("mirred egress redirect dev eth1", port),
            Ok(Action::Redirect(1))
        );
        assert_eq!(Action::parse("goto chain 3", port), Ok(Action::Goto(3)));
        let Ok(Action::Police(p)) =
            Action::parse("police rate 8mbit burst 10k conform-exceed drop/pipe", port)
        else {
            panic!("police");
        };
        assert_eq!((p.rate, p.burst), (1_000_000, 10_240));
        assert_eq!((p.exceed, p.conform), (Control::Drop, Control::Pipe));
        assert!(Action::parse("mirred egress redirect dev eth9", port).is_err());
        assert!(Action::parse("police rate 1mbit", port).is_err());
        assert!(Action::parse("teleport", port).is_err());
    }
}
