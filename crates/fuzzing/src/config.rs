//! The configuration loader over any text.
//!
//! `Config::parse` either accepts the text or refuses it with at least one error, each
//! naming a key and a reason; nothing panics, and an accepted configuration goes on to
//! the build's host step (interfaces, route table, static neighbours), which may refuse
//! it, with an error, but not panic. The same text is also read as a route file (`ip route` lines), whose errors
//! name a line of the text.
//!
//! `route_files` entries name files to read. The check resolves relative names in a
//! directory that does not exist, and skips texts naming an absolute path or a parent
//! directory, so that no input makes the fuzzer read a real file (`/dev/zero` would never
//! end).

use std::net::Ipv4Addr;
use std::path::{Component, Path};

use netbatch_runtime::build;
use netbatch_runtime::config::Config;
use netbatch_stack::route::RouteKind;
use netbatch_stack::route::file::{self as route_file, Resolve};

/// Where relative route files are looked for: a directory that does not exist.
const DIR: &str = "/nonexistent/netbatch-fuzz";

/// Two interfaces for the route-file reading: `eth0` on 192.0.2.0/24, `eth1` on
/// 198.51.100.0/24.
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
        match gw.octets() {
            [192, 0, 2, _] => Some(0),
            [198, 51, 100, _] => Some(1),
            _ => None,
        }
    }
}

/// Whether the text names, in `route_files`, a path that could reach a real file.
fn names_a_real_path(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else {
        return false;
    };
    let Some(toml::Value::Array(files)) = table.get("route_files") else {
        return false;
    };
    files.iter().any(|f| {
        f.as_str().is_some_and(|f| {
            Path::new(f)
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        })
    })
}

/// The configuration check (see the module documentation). The input is the text, read
/// as UTF-8 with invalid sequences replaced.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    route_lines(&text);
    if names_a_real_path(&text) {
        return;
    }
    match Config::parse(&text, Path::new(DIR), "fuzz.toml") {
        Ok(cfg) => {
            assert!(!cfg.ports.iter().any(|p| p.setup.name.is_empty()));
            if let Err(e) = build::host(&cfg) {
                assert!(!e.to_string().is_empty());
            }
        }
        Err(errs) => {
            assert_eq!(errs.file, "fuzz.toml");
            assert!(!errs.errors.is_empty(), "refused without a reason");
            for e in &errs.errors {
                assert!(!e.key.trim().is_empty(), "an error without a key: {e:?}");
                assert!(
                    !e.reason.trim().is_empty(),
                    "an error without a reason: {e:?}"
                );
            }
            assert!(!errs.to_string().is_empty());
        }
    }
}

/// The text as a route file: every route it accepts is complete, and an error names a
/// line of the text and says what is wrong.
fn route_lines(text: &str) {
    match route_file::parse(text, &Two) {
        Ok(routes) => {
            assert!(routes.len() <= text.lines().count());
            for r in routes {
                match r.kind {
                    RouteKind::Unicast => assert!(r.out_if.is_some(), "{r:?}"),
                    _ => assert!(r.out_if.is_none() && r.gateway.is_none(), "{r:?}"),
                }
            }
        }
        Err(e) => {
            assert!(e.line >= 1 && e.line <= text.lines().count(), "{e:?}");
            assert!(!e.reason.trim().is_empty(), "{e:?}");
        }
    }
}
