//! `[control]` and `[metrics]`: how a running datapath is seen and steered.
//!
//! `[control]`: `socket` (a path; by default `/run/netbatch/<name>.sock`, `<name>` the
//! configuration file's stem or `name`), `group` (a group whose members may use the
//! socket besides its owner: mode 0660 instead of 0600), `enabled` (default true),
//! `trace_keep` (traced packets `trace show` keeps, the last ones: default 100).
//! `[metrics]`: `listen` (`address:port`) serves Prometheus text at `/metrics`; absent,
//! nothing listens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Errs;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlFile {
    enabled: Option<bool>,
    name: Option<String>,
    socket: Option<String>,
    group: Option<String>,
    trace_keep: Option<i64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsFile {
    listen: Option<String>,
}

/// The control socket's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Serve the control socket.
    pub enabled: bool,
    /// The datapath's name (the socket's default file name).
    pub name: Option<String>,
    /// The socket's path, when configured.
    pub socket: Option<PathBuf>,
    /// A group allowed besides the owner: name and id.
    pub group: Option<(String, u32)>,
    /// Where Prometheus metrics are served.
    pub metrics: Option<SocketAddr>,
    /// Traced packets `trace show` keeps (the last ones; older ones are let go).
    pub trace_keep: usize,
}

/// Traced packets kept by default (each about 5 kB with its records).
pub(crate) const TRACE_KEEP: usize = 100;
/// Most traced packets that may be kept.
pub(crate) const TRACE_KEEP_MAX: usize = 100_000;

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            name: None,
            socket: None,
            group: None,
            metrics: None,
            trace_keep: TRACE_KEEP,
        }
    }
}

/// The directory control sockets go to by default.
pub const SOCKET_DIR: &str = "/run/netbatch";

impl ControlConfig {
    /// The socket path of the datapath configured in file `config` (the configured
    /// path, else `/run/netbatch/<name>.sock`).
    pub fn socket_path(&self, config: &Path) -> PathBuf {
        if let Some(p) = &self.socket {
            return p.clone();
        }
        let name = self.name.clone().unwrap_or_else(|| {
            config
                .file_stem()
                .map_or_else(|| "netbatch".into(), |s| s.to_string_lossy().into_owned())
        });
        Path::new(SOCKET_DIR).join(format!("{name}.sock"))
    }
}

impl ControlConfig {
    /// Only the `[control]` and `[metrics]` sections of the file at `path` (what a client
    /// needs to find the socket): the rest of the file is not checked, so a client can
    /// reach a datapath whose file is being edited, and hear the reload refused.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let t: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let section = |k: &str| {
            t.get(k)
                .cloned()
                .unwrap_or(toml::Value::Table(toml::Table::new()))
        };
        let c: ControlFile = section("control")
            .try_into()
            .map_err(|e: toml::de::Error| {
                format!("{}: control: {}", path.display(), e.message())
            })?;
        let m: MetricsFile = section("metrics")
            .try_into()
            .map_err(|e: toml::de::Error| {
                format!("{}: metrics: {}", path.display(), e.message())
            })?;
        let mut e = Errs::default();
        let v = validate(&c, &m, &mut e);
        match e.0.first() {
            Some(err) => Err(format!("{}: {err}", path.display())),
            None => Ok(v),
        }
    }
}

/// The id of group `name` (from `/etc/group`), or why not.
pub fn group_id(name: &str) -> Result<u32, String> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let text = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("cannot read /etc/group: {e}"))?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let n = f.next()?;
            let _ = f.next()?;
            let gid = f.next()?.parse::<u32>().ok()?;
            (n == name).then_some(gid)
        })
        .next()
        .ok_or_else(|| format!("no group named '{name}' in /etc/group"))
}

pub(super) fn validate(c: &ControlFile, m: &MetricsFile, e: &mut Errs) -> ControlConfig {
    let mut out = ControlConfig {
        enabled: c.enabled.unwrap_or(true),
        ..ControlConfig::default()
    };
    if let Some(n) = &c.name {
        if n.is_empty() || n.contains('/') || n.starts_with('.') {
            e.add(
                "control.name",
                format!("'{n}' is not a file name (no '/', not empty, not starting with '.')"),
            );
        } else {
            out.name = Some(n.clone());
        }
    }
    if let Some(s) = &c.socket {
        let p = PathBuf::from(s);
        if p.file_name().is_none() || s.ends_with('/') {
            e.add("control.socket", format!("'{s}' is not a file path"));
        } else if s.len() >= 108 {
            // sun_path holds 108 bytes with the terminating zero.
            e.add(
                "control.socket",
                format!(
                    "'{s}' is {} bytes long; a Unix socket path holds at most 107",
                    s.len()
                ),
            );
        } else {
            out.socket = Some(p);
        }
    }
    if let Some(g) = &c.group {
        match group_id(g) {
            Ok(id) => out.group = Some((g.clone(), id)),
            Err(why) => e.add("control.group", why),
        }
    }
    if let Some(k) = c.trace_keep {
        match usize::try_from(k) {
            Ok(n) if (1..=TRACE_KEEP_MAX).contains(&n) => out.trace_keep = n,
            _ => e.add(
                "control.trace_keep",
                format!("{k} is not 1 to {TRACE_KEEP_MAX} (traced packets kept for trace show)"),
            ),
        }
    }
    if let Some(l) = &m.listen {
        match l.parse::<SocketAddr>() {
            Ok(a) => out.metrics = Some(a),
            Err(_) => e.add(
                "metrics.listen",
                format!(
                    "'{l}' is not address:port (for example \"127.0.0.1:9433\" or \"[::1]:9433\")"
                ),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &str, m: &str) -> Result<ControlConfig, Vec<String>> {
        let c: ControlFile = toml::from_str(c).expect("toml");
        let m: MetricsFile = toml::from_str(m).expect("toml");
        let mut e = Errs::default();
        let v = validate(&c, &m, &mut e);
        if e.0.is_empty() {
            Ok(v)
        } else {
            Err(e.0.iter().map(ToString::to_string).collect())
        }
    }

    /// The default socket is named after the file; a name or a path overrides it.
    #[test]
    fn the_socket_path_follows_the_name_or_the_file() {
        let d = check("", "").expect("valid");
        assert_eq!(
            d.socket_path(Path::new("/etc/netbatch/edge.toml")),
            PathBuf::from("/run/netbatch/edge.sock")
        );
        let n = check("name = \"r1\"", "").expect("valid");
        assert_eq!(
            n.socket_path(Path::new("x.toml")),
            PathBuf::from("/run/netbatch/r1.sock")
        );
        let p = check("socket = \"/tmp/a.sock\"", "").expect("valid");
        assert_eq!(
            p.socket_path(Path::new("x.toml")),
            PathBuf::from("/tmp/a.sock")
        );
    }

    /// Mistakes are refused at their key with the reason.
    #[test]
    fn mistakes_name_their_key() {
        let e = check(
            "name = \"a/b\"\ngroup = \"no-such-group-here\"",
            "listen = \"9433\"",
        )
        .expect_err("invalid");
        assert!(e[0].starts_with("control.name:"), "{e:?}");
        assert!(e[1].starts_with("control.group: no group named"), "{e:?}");
        assert!(
            e[2].starts_with("metrics.listen: '9433' is not address:port"),
            "{e:?}"
        );
        let long = format!("socket = \"/tmp/{}\"", "s".repeat(110));
        assert!(check(&long, "").expect_err("too long")[0].contains("at most 107"));
        let root = check("group = \"root\"", "listen = \"127.0.0.1:9433\"").expect("valid");
        assert_eq!(root.group, Some(("root".into(), 0)));
        assert_eq!(root.metrics, Some("127.0.0.1:9433".parse().expect("addr")));
    }
}
