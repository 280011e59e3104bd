//! `[[route]]` and `route_files`: inline routes first, then the routes of each file (read
//! relative to the configuration's directory), out through the interfaces the ports
//! define.

use core::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use netbatch_stack::prefix::Ipv4Prefix;
use netbatch_stack::route::file::{self as route_file, Resolve};
use netbatch_stack::route::{Route, RouteKind};

use super::Errs;
use super::ports::Names;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteFile {
    prefix: String,
    via: Option<String>,
    dev: Option<String>,
    #[serde(default = "default_route_kind")]
    kind: String,
}

fn default_route_kind() -> String {
    "unicast".into()
}

/// Validates `[[route]]` (`raw`) and then reads `route_files` (`files`, relative to
/// `dir`); `names` are the interfaces the ports define.
pub(super) fn validate(
    raw: &[RouteFile],
    files: &[String],
    dir: &Path,
    names: &Names,
    e: &mut Errs,
) -> Vec<Route> {
    let mut routes = Vec::new();
    for (ri, r) in raw.iter().enumerate() {
        let key = format!("route[{ri}]");
        if let Some(route) = inline(r, &key, names, e) {
            routes.push(route);
        }
    }
    for (fi, f) in files.iter().enumerate() {
        let key = format!("route_files[{fi}]");
        let path = if Path::new(f).is_absolute() {
            PathBuf::from(f)
        } else {
            dir.join(f)
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => match route_file::parse(&text, names) {
                Ok(rs) => routes.extend(rs),
                Err(le) => e.add(key, format!("{}: {le}", path.display())),
            },
            Err(err) => e.add(key, format!("cannot read {}: {err}", path.display())),
        }
    }
    routes
}

/// One `[[route]]` under `key`.
fn inline(r: &RouteFile, key: &str, names: &Names, e: &mut Errs) -> Option<Route> {
    let prefix = if r.prefix == "default" {
        Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 0).ok()
    } else {
        e.parse::<Ipv4Prefix>(
            &format!("{key}.prefix"),
            &r.prefix,
            "a prefix (a.b.c.d/len, host bits zero)",
        )
    }?;
    let kind = match r.kind.as_str() {
        "unicast" => RouteKind::Unicast,
        "blackhole" => RouteKind::Blackhole,
        "unreachable" => RouteKind::Unreachable,
        "prohibit" => RouteKind::Prohibit,
        other => {
            e.add(
                format!("{key}.kind"),
                format!("unknown route kind '{other}' (unicast, blackhole, unreachable, prohibit)"),
            );
            return None;
        }
    };
    if kind != RouteKind::Unicast {
        if r.via.is_some() || r.dev.is_some() {
            e.add(key, format!("a {} route takes no via or dev", r.kind));
        }
        return Some(Route {
            prefix,
            kind,
            out_if: None,
            gateway: None,
        });
    }
    let gw = r
        .via
        .as_ref()
        .and_then(|v| e.parse::<Ipv4Addr>(&format!("{key}.via"), v, "an IPv4 address"));
    let dev = match &r.dev {
        Some(d) => match names.iface(d) {
            Some(i) => Some(i),
            None => {
                e.add(format!("{key}.dev"), format!("no interface named '{d}'"));
                return None;
            }
        },
        None => None,
    };
    let out_if = match (dev, gw) {
        (Some(d), _) => d,
        (None, Some(g)) => match names.iface_for_gateway(g) {
            Some(i) => i,
            None => {
                e.add(
                    format!("{key}.via"),
                    format!("gateway {g} is not on a connected subnet; add dev"),
                );
                return None;
            }
        },
        (None, None) => {
            if r.via.is_none() {
                e.add(key, "a unicast route needs via or dev");
            }
            return None;
        }
    };
    Some(Route {
        prefix,
        kind,
        out_if: Some(out_if),
        gateway: gw,
    })
}
