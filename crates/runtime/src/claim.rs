//! One datapath per interface: `run` claims every interface its ports serve before it
//! opens them, and a second `run` on an interface that another one serves refuses to start,
//! naming the interface, the other process and its configuration.
//!
//! Two datapaths on one interface would both receive every frame (each with its own
//! AF_PACKET socket or XDP program) and both answer: every ping would come back twice. A
//! control socket or a metrics port of their own does not make them apart, so the claim is
//! on the interface itself.
//!
//! A claim is an exclusive `flock` on a file named after the interface and the network
//! namespace it is in (its namespace file's inode: the same name in two namespaces is two
//! interfaces), under [`CLAIM_DIR`]. The kernel releases the lock when its holder exits,
//! however it exits (SIGKILL included), so a claim never outlives its process; the file
//! stays, and says who holds it: the holder writes its PID, configuration and control
//! socket into it once it has the lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::{Config, PortKind};

/// Where claims are kept (the directory of the control sockets).
pub const CLAIM_DIR: &str = "/run/netbatch/claims";

/// Why an interface could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another process serves the interface.
    #[error(
        "port {port}: interface {interface} is already served by another netbatch \
         (pid {pid}, config {config}{socket}); stop it first, or serve another interface"
    )]
    Taken {
        /// The port of this configuration.
        port: String,
        /// Its interface.
        interface: String,
        /// The holder's process id (`?` if it did not say).
        pid: String,
        /// The holder's configuration file.
        config: String,
        /// `, control socket PATH`, when it serves one.
        socket: String,
    },
    /// The claim could not be made at all.
    #[error("port {port}: cannot claim interface {interface} ({path}): {error}")]
    Io {
        /// The port.
        port: String,
        /// Its interface.
        interface: String,
        /// The claim file.
        path: String,
        /// What failed.
        error: std::io::Error,
    },
}

/// The claims of one running datapath: held until dropped (or the process ends).
#[derive(Debug)]
pub struct Claims {
    _files: Vec<File>,
}

/// Who a claim says holds it.
fn holder(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
}

/// The inode of the network namespace file `ns` (`/proc/self/ns/net`, or a named one under
/// `/run/netns`).
fn netns_id(ns: &Path) -> std::io::Result<u64> {
    std::fs::metadata(ns).map(|m| m.ino())
}

/// Claims every interface `cfg`'s live ports serve, for a datapath started from
/// `config_path` that serves its control socket at `socket` (if any); `dir` is where
/// claims are kept ([`CLAIM_DIR`] for `run`).
pub fn interfaces(
    cfg: &Config,
    config_path: &Path,
    socket: Option<&Path>,
    dir: &Path,
) -> Result<Claims, ClaimError> {
    let mut files = Vec::new();
    for p in &cfg.ports {
        let (interface, ns) = match &p.kind {
            PortKind::HostTap { netns, .. } => {
                let Some(i) = p.kind.interface() else {
                    continue;
                };
                (i.to_string(), Path::new("/run/netns").join(netns))
            }
            k => {
                let Some(i) = k.interface() else { continue };
                (i.to_string(), PathBuf::from("/proc/self/ns/net"))
            }
        };
        let port = p.setup.name.clone();
        let io = |path: &Path, error| ClaimError::Io {
            port: port.clone(),
            interface: interface.clone(),
            path: path.display().to_string(),
            error,
        };
        let id = netns_id(&ns).map_err(|e| io(&ns, e))?;
        let path = dir.join(format!("netns-{id}-{interface}"));
        let opened = std::fs::create_dir_all(dir).and_then(|()| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        });
        let mut f = match opened {
            Ok(f) => f,
            // A process that may not write where claims are kept is not root; opening the
            // port will say which privilege it lacks. Should it have the capabilities
            // anyway, it serves unclaimed, and says so.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                tracing::warn!(
                    target: "netbatch::run",
                    "port {port}: interface {interface} not claimed ({}: {e}): another datapath on it would not be refused",
                    path.display()
                );
                continue;
            }
            Err(e) => return Err(io(&path, e)),
        };
        match f.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                let socket = holder(&text, "socket")
                    .filter(|s| !s.is_empty())
                    .map(|s| format!(", control socket {s}"))
                    .unwrap_or_default();
                return Err(ClaimError::Taken {
                    port,
                    interface,
                    pid: holder(&text, "pid").unwrap_or_else(|| "?".into()),
                    config: holder(&text, "config").unwrap_or_else(|| "?".into()),
                    socket,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(&path, e)),
        }
        let config = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into());
        let text = format!(
            "pid={}\nconfig={}\nsocket={}\ninterface={interface}\nport={port}\n",
            std::process::id(),
            config.display(),
            socket.map(|s| s.display().to_string()).unwrap_or_default(),
        );
        f.set_len(0)
            .and_then(|()| f.rewind())
            .and_then(|()| f.write_all(text.as_bytes()))
            .map_err(|e| io(&path, e))?;
        files.push(f);
    }
    Ok(Claims { _files: files })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortConfig;
    use crate::setup::PortSetup;

    fn cfg(interfaces: &[&str]) -> Config {
        Config::new(
            interfaces
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut p = PortConfig::new(PortSetup::simple(
                        &format!("p{i}"),
                        netbatch_wire::ethernet::MacAddr([2, 0, 0, 0, 0, i as u8 + 1]),
                        format!("192.0.2.{}/32", i + 1).parse().expect("address"),
                    ));
                    p.kind = PortKind::AfPacket((*name).into());
                    p
                })
                .collect(),
        )
    }

    /// A second claim on an interface is refused while the first is held, naming the
    /// interface, the holder's pid, configuration and socket; another interface is free;
    /// dropping the first frees the interface.
    #[test]
    fn an_interface_is_served_by_one_datapath_at_a_time() {
        let dir = tempfile::tempdir().expect("a directory");
        let first = interfaces(
            &cfg(&["nbclaim0", "nbclaim1"]),
            Path::new("/etc/first.toml"),
            Some(Path::new("/run/netbatch/first.sock")),
            dir.path(),
        )
        .expect("free interfaces are claimed");
        // The claims are file locks: a second open file description (as a second
        // process has) is refused.
        let e = interfaces(
            &cfg(&["nbclaim2", "nbclaim1"]),
            Path::new("/etc/second.toml"),
            None,
            dir.path(),
        )
        .expect_err("nbclaim1 is taken");
        let msg = e.to_string();
        assert!(
            msg.contains("port p1: interface nbclaim1")
                && msg.contains(&format!("pid {}", std::process::id()))
                && msg.contains("config /etc/first.toml")
                && msg.contains("control socket /run/netbatch/first.sock"),
            "{msg}"
        );
        let other = interfaces(
            &cfg(&["nbclaim2"]),
            Path::new("/etc/second.toml"),
            None,
            dir.path(),
        )
        .expect("another interface is free");
        drop(first);
        drop(other);
        interfaces(
            &cfg(&["nbclaim1"]),
            Path::new("/etc/second.toml"),
            None,
            dir.path(),
        )
        .expect("free again once the first datapath let go");
    }
}
