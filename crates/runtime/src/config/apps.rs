//! `[[app]]`: the built-in applications, each bound to distinct addresses and ports, on
//! a worker that exists, with a queue the pool can fill.
//!
//! The address bound is `0.0.0.0` (every IPv4 address), one of the interfaces' addresses,
//! or a broadcast address of ours (a subnet's directed broadcast, or
//! `255.255.255.255`): what Linux's `bind` takes without `IP_FREEBIND` (a local or
//! broadcast address in `inet_bind`; multicast too, but netbatch receives no multicast).
//! An IPv6 address is written in brackets (`[::]:5001`, `[2001:db8::1]:53`, RFC 3986
//! 3.2.2): `::` (every IPv6 address: an IPv6 socket, which takes no IPv4 datagrams, as
//! with `IPV6_V6ONLY`) or one of the interfaces' IPv6 addresses, global or link-local
//! (what `inet6_bind` takes). Anything else is refused: no datagram would ever reach
//! the socket.
//!
//! `bind` is `address:port`. A `udp-sink` may read several ports of one address: a range
//! (`0.0.0.0:5001-5004`), a list (`0.0.0.0:5001,5003`) or both (`0.0.0.0:53,5001-5004`),
//! one socket per port (each with its own `queue`), one sink reading them all. Every
//! socket counts against the others: no address and port is bound twice.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// A built-in application. The IPv4 and IPv6 forms of each are variants of their own
/// (`UdpSink`, `UdpSink6`): the address's type says which family its sockets take.
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
    /// A `udp-sink` on an IPv6 address (fields as [`AppConfig::UdpSink`]'s).
    UdpSink6 {
        /// Worker it runs on.
        worker: usize,
        /// Address bound (`::`: every IPv6 address).
        addr: Ipv6Addr,
        /// Ports bound, one socket each, in order (at least one).
        ports: Vec<u16>,
        /// Queue length of each socket.
        queue: usize,
        /// Check per-flow sequence numbers.
        check: bool,
        /// Take GRO super-datagrams whole (`UDP_GRO`).
        gro: bool,
        /// Record the latency to each datagram's reading.
        latency: bool,
    },
    /// A `udp-echo` on an IPv6 address (fields as [`AppConfig::UdpEcho`]'s).
    UdpEcho6 {
        /// Worker it runs on.
        worker: usize,
        /// Address bound (`::`: every IPv6 address).
        addr: Ipv6Addr,
        /// Port bound.
        port: u16,
        /// Queue length.
        queue: usize,
    },
}

/// What a sink does besides reading: check sequence numbers, take super-datagrams,
/// record latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkOptions {
    /// Check per-flow sequence numbers.
    pub check: bool,
    /// Take GRO super-datagrams whole.
    pub gro: bool,
    /// Record latencies.
    pub latency: bool,
}

/// What an application is, whatever its address's family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppKind {
    /// A sink on these ports.
    Sink(Vec<u16>, SinkOptions),
    /// An echo on this port.
    Echo(u16),
}

impl AppConfig {
    /// The worker it runs on, the address its sockets bind and their queue length.
    pub fn binding(&self) -> (usize, IpAddr, usize) {
        match *self {
            Self::UdpSink {
                worker,
                addr,
                queue,
                ..
            }
            | Self::UdpEcho {
                worker,
                addr,
                queue,
                ..
            } => (worker, addr.into(), queue),
            Self::UdpSink6 {
                worker,
                addr,
                queue,
                ..
            }
            | Self::UdpEcho6 {
                worker,
                addr,
                queue,
                ..
            } => (worker, addr.into(), queue),
        }
    }

    /// What it does.
    pub fn kind(&self) -> AppKind {
        match self {
            Self::UdpSink {
                ports,
                check,
                gro,
                latency,
                ..
            }
            | Self::UdpSink6 {
                ports,
                check,
                gro,
                latency,
                ..
            } => AppKind::Sink(
                ports.clone(),
                SinkOptions {
                    check: *check,
                    gro: *gro,
                    latency: *latency,
                },
            ),
            Self::UdpEcho { port, .. } | Self::UdpEcho6 { port, .. } => AppKind::Echo(*port),
        }
    }
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
    let mut binds: HashMap<SocketAddr, usize> = HashMap::new();
    for (ai, a) in raw.iter().enumerate() {
        let key = format!("app[{ai}]");
        let (addr, ports) = match bind(&a.bind) {
            Ok(b) => b,
            Err(why) => {
                e.add(
                    format!("{key}.bind"),
                    format!(
                        "'{}' is not an address:port, [IPv6 address]:port (or a udp-sink's \
                         address:ports): {why}",
                        a.bind
                    ),
                );
                continue;
            }
        };
        if ports.contains(&0) {
            e.add(format!("{key}.bind"), "port 0 cannot be bound");
        }
        let not_ours = match addr {
            IpAddr::V4(a) => not_ours(a, names),
            IpAddr::V6(a) => not_ours6(a, names),
        };
        if let Some(why) = not_ours {
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
            let sa = SocketAddr::new(addr, port);
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
        let (worker, queue) = (a.worker, a.queue);
        match a.kind.as_str() {
            _ if a.worker >= workers => e.add(
                format!("{key}.worker"),
                format!(
                    "worker {} does not exist (datapath.workers = {workers})",
                    a.worker
                ),
            ),
            "udp-sink" => apps.push(match addr {
                IpAddr::V4(addr) => AppConfig::UdpSink {
                    worker,
                    addr,
                    ports,
                    queue,
                    check: a.check,
                    gro: a.gro,
                    latency: false,
                },
                IpAddr::V6(addr) => AppConfig::UdpSink6 {
                    worker,
                    addr,
                    ports,
                    queue,
                    check: a.check,
                    gro: a.gro,
                    latency: false,
                },
            }),
            "udp-echo" if a.gro => e.add(
                format!("{key}.gro"),
                "udp-echo answers datagram by datagram; only udp-sink takes super-datagrams",
            ),
            "udp-echo" if ports.len() > 1 => e.add(
                format!("{key}.bind"),
                "udp-echo binds one port; only udp-sink reads several",
            ),
            "udp-echo" => apps.push(match addr {
                IpAddr::V4(addr) => AppConfig::UdpEcho {
                    worker,
                    addr,
                    port: ports[0],
                    queue,
                },
                IpAddr::V6(addr) => AppConfig::UdpEcho6 {
                    worker,
                    addr,
                    port: ports[0],
                    queue,
                },
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

/// Why IPv6 `addr` cannot be bound, if it cannot (see the module's note).
fn not_ours6(addr: Ipv6Addr, names: &Names) -> Option<String> {
    if addr.is_unspecified()
        || names.addrs6().any(|(_, a)| a.addr == addr)
        || names.link_locals().any(|(_, a)| a == addr)
    {
        return None;
    }
    Some(if addr.is_multicast() {
        format!("{addr} is a multicast group, and netbatch's sockets join no group")
    } else {
        format!(
            "{addr} is not an IPv6 address of any interface, so nothing would reach it \
             ([::] binds every IPv6 address)"
        )
    })
}

/// `address:ports`: an IPv4 address, or an IPv6 address in brackets, and one or more
/// ports, each a port or a range `lo-hi` as a filter rule writes it, separated by commas.
fn bind(text: &str) -> Result<(IpAddr, Vec<u16>), String> {
    let (addr, list) = if let Some(rest) = text.strip_prefix('[') {
        let (a, list) = rest
            .split_once("]:")
            .ok_or("an IPv6 address is written [address]:port")?;
        let a = a
            .parse::<Ipv6Addr>()
            .map_err(|err| format!("'{a}': {err}"))?;
        (IpAddr::V6(a), list)
    } else {
        let (a, list) = text.rsplit_once(':').ok_or("no ':port'")?;
        if a.contains(':') {
            return Err(format!(
                "'{a}': an IPv6 address is written in brackets, [{a}]:port"
            ));
        }
        let a = a
            .parse::<Ipv4Addr>()
            .map_err(|err| format!("'{a}': {err}"))?;
        (IpAddr::V4(a), list)
    };
    let mut ports = Vec::new();
    for item in list.split(',') {
        let r: PortRange = item.parse()?;
        ports.extend(r.lo..=r.hi);
    }
    Ok((addr, ports))
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, Ipv6Addr};

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
                _ => None,
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

    /// An IPv6 address is bound in brackets (RFC 3986 3.2.2), with ports as for IPv4:
    /// `::` (every IPv6 address), a global address of ours, or an interface's link-local
    /// address (derived from its MAC here: 02:00:00:00:00:01 gives fe80::ff:fe00:1, RFC
    /// 4291 appendix A); the same port on `0.0.0.0` and `::` are two sockets.
    #[test]
    fn ipv6_addresses_are_bound_in_brackets() {
        let ports = r#"
            [[port]]
            name = "eth0"
            mac = "02:00:00:00:00:01"
            addresses = ["192.0.2.1/24", "2001:db8::1/64"]
        "#;
        let text = format!(
            r#"{ports}
            [[app]]
            kind = "udp-sink"
            bind = "[::]:5001-5002"
            [[app]]
            kind = "udp-echo"
            bind = "[2001:db8::1]:53"
            [[app]]
            kind = "udp-echo"
            bind = "[fe80::ff:fe00:1]:7"
            [[app]]
            kind = "udp-sink"
            bind = "0.0.0.0:5001"
            "#
        );
        let c = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let any6 = Ipv6Addr::UNSPECIFIED;
        assert!(matches!(
            &c.apps[0],
            AppConfig::UdpSink6 { addr, ports, .. } if *addr == any6 && ports == &[5001, 5002]
        ));
        let ours: Ipv6Addr = "2001:db8::1".parse().expect("address");
        assert!(matches!(c.apps[1], AppConfig::UdpEcho6 { addr, port: 53, .. } if addr == ours));
        let ll: Ipv6Addr = "fe80::ff:fe00:1".parse().expect("address");
        assert!(matches!(c.apps[2], AppConfig::UdpEcho6 { addr, port: 7, .. } if addr == ll));
        assert_eq!(c.apps[1].binding(), (0, ours.into(), 1024));

        let bad = [
            (
                "[2001:db8::2]:9",
                "2001:db8::2 is not an IPv6 address of any interface",
            ),
            ("[ff02::1]:9", "ff02::1 is a multicast group"),
            ("[::]:5001", "[::]:5001 is bound by another app"),
            (
                "2001:db8::1:53",
                "an IPv6 address is written in brackets, [2001:db8::1]:port",
            ),
            (
                "[2001:db8::1]53",
                "an IPv6 address is written [address]:port",
            ),
            ("[2001:db8::g]:53", "'2001:db8::g'"),
            ("[::]:0", "port 0 cannot be bound"),
        ];
        let mut text = format!("{ports}\n[[app]]\nkind = \"udp-sink\"\nbind = \"[::]:5001\"\n");
        for (b, _) in bad {
            text += &format!("[[app]]\nkind = \"udp-sink\"\nbind = \"{b}\"\n");
        }
        let e = parse(&text).unwrap_err();
        assert_eq!(e.errors.len(), bad.len(), "{e}");
        for (x, (i, (_, why))) in e.errors.iter().zip(bad.iter().enumerate()) {
            assert_eq!(x.key, format!("app[{}].bind", i + 1), "{e}");
            assert!(
                x.reason.contains(why),
                "{}: «{}» lacks «{why}»",
                x.key,
                x.reason
            );
        }
    }
}
