//! `[[app]]`: the built-in applications, each bound to distinct addresses and ports, on
//! a worker that exists, with a queue the pool can fill.
//!
//! The address bound is `0.0.0.0` (every address), one of the interfaces' addresses, or
//! a broadcast address of ours (a subnet's directed broadcast, or `255.255.255.255`):
//! what Linux's `bind` takes without `IP_FREEBIND` (a local or broadcast address in
//! `inet_bind`; multicast too, but netbatch receives no multicast). Anything else is
//! refused: no datagram would ever reach the socket.
//!
//! `bind` is `address:port`. A `udp-sink` may read several ports of one address: a range
//! (`0.0.0.0:5001-5004`), a list (`0.0.0.0:5001,5003`) or both (`0.0.0.0:53,5001-5004`),
//! one socket per port (each with its own `queue`), one sink reading them all. Every
//! socket counts against the others: no address and port is bound twice.

use core::net::{Ipv4Addr, SocketAddrV4};
use netbatch_stack::filter::PortRange;
use netbatch_stack::prefix::class;
use std::collections::HashMap;

use super::Errs;
use super::ports::Names;

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
        /// Ports bound, one socket each, in order (at least one).
        ports: Vec<u16>,
        /// Queue length of each socket.
        queue: usize,
        /// Check per-flow sequence numbers.
        check: bool,
        /// Take GRO super-datagrams whole (`UDP_GRO`).
        gro: bool,
        /// Record the latency from each frame's receive timestamp to its reading (set in
        /// code, by the benchmark; a file has no key for it, as no report shows it).
        latency: bool,
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

/// Validates `[[app]]`, against the `workers` there are, the pool's `buffers` and the
/// interfaces' addresses (`names`).
pub(super) fn validate(
    raw: &[AppFile],
    workers: usize,
    buffers: u32,
    names: &Names,
    e: &mut Errs,
) -> Vec<AppConfig> {
    let mut apps = Vec::new();
    // Every socket bound so far, and the app that binds it.
    let mut binds: HashMap<SocketAddrV4, usize> = HashMap::new();
    for (ai, a) in raw.iter().enumerate() {
        let key = format!("app[{ai}]");
        let (addr, ports) = match bind(&a.bind) {
            Ok(b) => b,
            Err(why) => {
                e.add(
                    format!("{key}.bind"),
                    format!(
                        "'{}' is not an address:port (or a udp-sink's address:ports): {why}",
                        a.bind
                    ),
                );
                continue;
            }
        };
        if ports.contains(&0) {
            e.add(format!("{key}.bind"), "port 0 cannot be bound");
        }
        if let Some(why) = not_ours(addr, names) {
            e.add(format!("{key}.bind"), why);
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
        for &port in &ports {
            let sa = SocketAddrV4::new(addr, port);
            match binds.insert(sa, ai) {
                Some(other) if other == ai => {
                    e.add(format!("{key}.bind"), format!("{sa} is listed twice"));
                }
                Some(_) => e.add(
                    format!("{key}.bind"),
                    format!("{sa} is bound by another app"),
                ),
                None => {}
            }
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
                addr,
                ports,
                queue: a.queue,
                check: a.check,
                gro: a.gro,
                latency: false,
            }),
            "udp-echo" if a.gro => e.add(
                format!("{key}.gro"),
                "udp-echo answers datagram by datagram; only udp-sink takes super-datagrams",
            ),
            "udp-echo" if ports.len() > 1 => e.add(
                format!("{key}.bind"),
                "udp-echo binds one port; only udp-sink reads several",
            ),
            "udp-echo" => apps.push(AppConfig::UdpEcho {
                worker: a.worker,
                addr,
                port: ports[0],
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

/// Why `addr` cannot be bound, if it cannot (see the module's note).
fn not_ours(addr: Ipv4Addr, names: &Names) -> Option<String> {
    let bits = u32::from(addr);
    if addr.is_unspecified() || class::is_limited_broadcast(bits) {
        return None;
    }
    if names
        .addrs()
        .any(|(_, a)| a.addr == addr || a.subnet().broadcast() == Some(addr))
    {
        return None;
    }
    Some(if class::is_multicast(bits) {
        format!("{addr} is a multicast group, and netbatch receives no multicast")
    } else {
        format!(
            "{addr} is not an address of any interface, so nothing would reach it \
             (0.0.0.0 binds every address)"
        )
    })
}

/// `address:ports`: an IPv4 address and one or more ports, each a port or a range
/// `lo-hi` as a filter rule writes it, separated by commas.
fn bind(text: &str) -> Result<(Ipv4Addr, Vec<u16>), String> {
    let (addr, list) = text.rsplit_once(':').ok_or("no ':port'")?;
    let addr = addr
        .parse::<Ipv4Addr>()
        .map_err(|err| format!("'{addr}': {err}"))?;
    let mut ports = Vec::new();
    for item in list.split(',') {
        let r: PortRange = item.parse()?;
        ports.extend(r.lo..=r.hi);
    }
    Ok((addr, ports))
}

#[cfg(test)]
mod tests {
    use core::net::Ipv4Addr;

    use super::super::parse_test as parse;
    use super::AppConfig;

    const PORT: &str = r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
    "#;

    /// A sink reads a range and a list of ports of one address, one socket each; an echo
    /// binds one port.
    #[test]
    fn a_sink_binds_ports_ranges_and_lists() {
        let text = format!(
            r#"{PORT}
            [[app]]
            kind = "udp-sink"
            bind = "0.0.0.0:5001-5004"
            [[app]]
            kind = "udp-sink"
            bind = "192.0.2.1:53,6000-6001, 7000"
            [[app]]
            kind = "udp-echo"
            bind = "192.0.2.1:7"
            "#
        );
        let c = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let sinks: Vec<(Ipv4Addr, Vec<u16>)> = c
            .apps
            .iter()
            .filter_map(|a| match a {
                AppConfig::UdpSink { addr, ports, .. } => Some((*addr, ports.clone())),
                AppConfig::UdpEcho { .. } => None,
            })
            .collect();
        assert_eq!(
            sinks,
            [
                (Ipv4Addr::UNSPECIFIED, vec![5001, 5002, 5003, 5004]),
                (Ipv4Addr::new(192, 0, 2, 1), vec![53, 6000, 6001, 7000])
            ]
        );
        assert!(matches!(c.apps[2], AppConfig::UdpEcho { port: 7, .. }));
    }

    /// Each socket of a range is checked as a single bind is: port 0, a port bound by
    /// another app or listed twice; a backwards range, a bad port and an echo on several
    /// ports are refused, each with the app's bind key.
    #[test]
    fn every_socket_of_a_range_is_checked() {
        let bad = [
            ("0.0.0.0:0-3", "port 0 cannot be bound"),
            ("0.0.0.0:4999-5001", "0.0.0.0:5001 is bound by another app"),
            ("0.0.0.0:6000,6000", "0.0.0.0:6000 is listed twice"),
            ("0.0.0.0:7002-7001", "port range '7002-7001' is empty"),
            ("0.0.0.0:70000", "'70000' is not a port"),
            ("0.0.0.0", "no ':port'"),
        ];
        let mut text =
            format!("{PORT}\n[[app]]\nkind = \"udp-sink\"\nbind = \"0.0.0.0:5001-5004\"\n");
        for (b, _) in bad {
            text += &format!("[[app]]\nkind = \"udp-sink\"\nbind = \"{b}\"\n");
        }
        text += "[[app]]\nkind = \"udp-echo\"\nbind = \"0.0.0.0:8000-8001\"\n";
        let e = parse(&text).unwrap_err();
        for (i, (_, why)) in bad.iter().enumerate() {
            let want = format!("app[{}].bind", i + 1);
            assert!(
                e.errors
                    .iter()
                    .any(|x| x.key == want && x.reason.contains(why)),
                "no '{why}' for {want} in:\n{e}"
            );
        }
        let last = format!("app[{}].bind", bad.len() + 1);
        assert!(
            e.errors
                .iter()
                .any(|x| x.key == last && x.reason.contains("udp-echo binds one port")),
            "{e}"
        );
        assert_eq!(e.errors.len(), bad.len() + 1, "{e}");
    }

    /// The address bound is one a datagram can reach: any, ours (native or VLAN), a
    /// subnet broadcast of ours or the limited broadcast, as Linux's `bind` allows; an
    /// address of no interface, or a multicast group, is refused.
    #[test]
    fn an_app_binds_only_addresses_that_are_ours() {
        let ports = r#"
            [[port]]
            name = "eth0"
            mac = "02:00:00:00:00:01"
            addresses = ["192.0.2.1/24"]
            [[port.vlan]]
            id = 5
            addresses = ["198.51.100.1/24"]
        "#;
        let binds = [
            ("0.0.0.0:1", None),
            ("192.0.2.1:2", None),
            ("198.51.100.1:3", None),
            ("192.0.2.255:4", None),
            ("255.255.255.255:5", None),
            (
                "192.0.2.9:6",
                Some("192.0.2.9 is not an address of any interface"),
            ),
            (
                "10.0.0.1:7",
                Some("10.0.0.1 is not an address of any interface"),
            ),
            ("239.1.1.1:8", Some("netbatch receives no multicast")),
        ];
        let mut text = ports.to_string();
        for (b, _) in binds {
            text += &format!("[[app]]\nkind = \"udp-sink\"\nbind = \"{b}\"\n");
        }
        let e = match parse(&text) {
            Ok(_) => panic!("accepted"),
            Err(e) => e,
        };
        let want: Vec<(String, &str)> = binds
            .iter()
            .enumerate()
            .filter_map(|(i, (_, w))| w.map(|w| (format!("app[{i}].bind"), w)))
            .collect();
        assert_eq!(e.errors.len(), want.len(), "{e}");
        for (x, (k, w)) in e.errors.iter().zip(&want) {
            assert_eq!(&x.key, k, "{e}");
            assert!(x.reason.contains(w), "{e}");
        }
    }
}
