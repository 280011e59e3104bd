//! `[[app]]`: the built-in applications, each bound to a distinct address and port, on
//! a worker that exists, with a queue the pool can fill.

use core::net::{Ipv4Addr, SocketAddrV4};
use std::collections::HashSet;

use super::Errs;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AppFile {
    kind: String,
    bind: String,
    #[serde(default = "default_queue")]
    queue: usize,
    #[serde(default)]
    check: bool,
    /// Receive GRO super-datagrams whole (like `UDP_GRO`).
    #[serde(default)]
    gro: bool,
    /// Worker the application runs on.
    #[serde(default)]
    worker: usize,
}

fn default_queue() -> usize {
    1024
}

/// A built-in application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppConfig {
    /// Receives and counts.
    UdpSink {
        /// Worker it runs on.
        worker: usize,
        /// Address bound.
        addr: Ipv4Addr,
        /// Port bound.
        port: u16,
        /// Queue length.
        queue: usize,
        /// Check per-flow sequence numbers.
        check: bool,
        /// Take GRO super-datagrams whole (`UDP_GRO`).
        gro: bool,
    },
    /// Sends every datagram back to its sender.
    UdpEcho {
        /// Worker it runs on.
        worker: usize,
        /// Address bound.
        addr: Ipv4Addr,
        /// Port bound.
        port: u16,
        /// Queue length.
        queue: usize,
    },
}

/// Validates `[[app]]`, against the `workers` there are and the pool's `buffers`.
pub(super) fn validate(
    raw: &[AppFile],
    workers: usize,
    buffers: u32,
    e: &mut Errs,
) -> Vec<AppConfig> {
    let mut apps = Vec::new();
    let mut binds = HashSet::new();
    for (ai, a) in raw.iter().enumerate() {
        let key = format!("app[{ai}]");
        let Some(sa) = e.parse::<SocketAddrV4>(&format!("{key}.bind"), &a.bind, "an address:port")
        else {
            continue;
        };
        if sa.port() == 0 {
            e.add(format!("{key}.bind"), "port 0 cannot be bound");
        }
        if a.queue == 0 {
            e.add(format!("{key}.queue"), "must be at least 1");
        } else if a.queue > buffers as usize {
            // The queue is allocated whole at bind, and could never fill past the pool.
            e.add(
                format!("{key}.queue"),
                format!(
                    "{} is more than the {} packet buffers there are (pool.buffers)",
                    a.queue, buffers
                ),
            );
        }
        if !binds.insert(sa) {
            e.add(
                format!("{key}.bind"),
                format!("{sa} is bound by another app"),
            );
        }
        match a.kind.as_str() {
            _ if a.worker >= workers => e.add(
                format!("{key}.worker"),
                format!(
                    "worker {} does not exist (datapath.workers = {workers})",
                    a.worker
                ),
            ),
            "udp-sink" => apps.push(AppConfig::UdpSink {
                worker: a.worker,
                addr: *sa.ip(),
                port: sa.port(),
                queue: a.queue,
                check: a.check,
                gro: a.gro,
            }),
            "udp-echo" if a.gro => e.add(
                format!("{key}.gro"),
                "udp-echo answers datagram by datagram; only udp-sink takes super-datagrams",
            ),
            "udp-echo" => apps.push(AppConfig::UdpEcho {
                worker: a.worker,
                addr: *sa.ip(),
                port: sa.port(),
                queue: a.queue,
            }),
            other => e.add(
                format!("{key}.kind"),
                format!("unknown app '{other}' (udp-sink, udp-echo)"),
            ),
        }
    }
    apps
}
