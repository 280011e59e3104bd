//! What a configuration needs of the machine it runs on, which the file alone cannot
//! say: `check-config` asks it (unless told the file is for another machine) and
//! `netbatch run` refuses to start without it. [`super::Config::load`] asks the kernel
//! nothing but an af_packet or af_xdp port's default MAC, so `replay`, `bench` and the
//! tests can use configurations written for other machines.
//!
//! Each port's kernel interface is looked up in the caller's network namespace (by
//! index, through the kernel's `if_nametoindex`; what `/sys/class/net/NAME` says is used
//! only when its `ifindex` is that same index, so a `/sys` of another namespace is never
//! believed):
//! - af_packet and af_xdp open an existing interface: it must exist (`port[N].interface`),
//!   and its MTU must be at least the port's (`port[N].mtu`): the kernel refuses longer
//!   frames on it (`EMSGSIZE`);
//! - af_xdp binds worker `w`'s socket to receive queue `w` (see the ports crate's
//!   `af_xdp`), so the interface needs a receive queue per worker: at least
//!   `datapath.workers` of them (`port[N].interface`);
//! - tap creates its device, or attaches to the one of that name: an existing one must
//!   be a TAP device (not TUN, not another kind: `TUNSETIFF` refuses those with `EINVAL`),
//!   multi-queue exactly when there are several workers (`TUNSETIFF` refuses a mismatch
//!   either way); a new one needs `/dev/net/tun` (`port[N].kind`).
//!
//! Memory: the pool is mapped and touched whole at start (`MAP_POPULATE`), and with RPS
//! every ordered pair of workers has a backlog ring of `max_backlog` handles; together
//! they must fit the machine's memory (`MemTotal` in `/proc/meminfo`), or the start fails
//! or the OOM killer ends it (`pool.buffers`, `datapath.max_backlog`).

use std::path::Path;

use super::{Config, ConfigError, PortKind};

/// Interface flags of a TUN/TAP device as `/sys/class/net/NAME/tun_flags` shows them
/// (`<linux/if_tun.h>`).
mod tun {
    /// A TUN device (layer 3).
    pub(super) const IFF_TUN: u32 = 0x0001;
    /// A TAP device (layer 2).
    pub(super) const IFF_TAP: u32 = 0x0002;
    /// Several queues.
    pub(super) const IFF_MULTI_QUEUE: u32 = 0x0100;
}

/// What the kernel says about an interface that exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// MTU (none: not known).
    pub(super) mtu: Option<u32>,
    /// Receive queues (none: `/sys` does not say for this namespace).
    pub(super) rx_queues: Option<usize>,
    /// Whether `/sys` describes this interface (then `tun_flags` is known).
    pub(super) sysfs: bool,
    /// TUN/TAP flags (none: not a TUN/TAP device, when `sysfs`).
    pub(super) tun_flags: Option<u32>,
}

/// What the machine has, as far as a configuration needs it.
pub(super) trait Machine {
    /// The interface `name` (none: there is none).
    fn iface(&self, name: &str) -> Option<Seen>;
    /// Whether `/dev/net/tun` is there (TAP devices can be made).
    fn tun_device(&self) -> bool;
    /// Bytes of memory (none: not known).
    fn memory(&self) -> Option<u64>;
    /// Whether the named network namespace file `path` (`/run/netns/NAME`) is there.
    fn netns(&self, path: &Path) -> bool;
    /// Other network namespaces that have an interface `name`: named ones
    /// (`/run/netns/NAME`), and `None` for the initial namespace (PID 1's); empty when
    /// none has, or when this process may not look (it needs `CAP_SYS_ADMIN`).
    fn elsewhere(&self, _name: &str) -> Vec<Option<String>> {
        Vec::new()
    }
}

/// This machine, in the caller's network namespace.
pub(super) struct Here;

impl Machine for Here {
    fn netns(&self, path: &Path) -> bool {
        path.exists()
    }

    fn iface(&self, name: &str) -> Option<Seen> {
        let index = netbatch_ports::sys::ifindex(name)?;
        let dir = Path::new("/sys/class/net").join(name);
        // A name with a path in it never reaches here (no interface has one), but /sys
        // is only read for plain names.
        let plain = !name.contains('/') && !name.starts_with('.');
        let sysfs = plain
            && std::fs::read_to_string(dir.join("ifindex"))
                .is_ok_and(|t| t.trim().parse::<u32>() == Ok(index));
        let rx_queues = sysfs
            .then(|| std::fs::read_dir(dir.join("queues")).ok())
            .flatten()
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count()
            });
        let tun_flags = sysfs
            .then(|| std::fs::read_to_string(dir.join("tun_flags")).ok())
            .flatten()
            .and_then(|t| u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok());
        Some(Seen {
            mtu: netbatch_ports::sys::mtu_of(name),
            rx_queues,
            sysfs,
            tun_flags,
        })
    }

    fn tun_device(&self) -> bool {
        Path::new("/dev/net/tun").exists()
    }

    fn elsewhere(&self, name: &str) -> Vec<Option<String>> {
        use std::os::unix::fs::MetadataExt;
        // A namespace is known by its file's device and inode (`ip netns identify`).
        let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let Some(here) = id(Path::new("/proc/thread-self/ns/net")) else {
            return Vec::new();
        };
        let mut candidates: Vec<(Option<String>, std::path::PathBuf)> =
            vec![(None, "/proc/1/ns/net".into())];
        if let Ok(dir) = std::fs::read_dir(super::linux::NETNS_DIR) {
            let mut named: Vec<_> = dir
                .filter_map(Result::ok)
                .map(|e| (Some(e.file_name().to_string_lossy().into_owned()), e.path()))
                .collect();
            named.sort();
            candidates.extend(named);
        }
        let mut seen = vec![here];
        let mut out = Vec::new();
        for (label, path) in candidates {
            let Some(ns) = id(&path) else { continue };
            if seen.contains(&ns) {
                continue;
            }
            seen.push(ns);
            // Entering a namespace changes the calling thread only: a thread of its own
            // looks and ends.
            let name = name.to_string();
            let found = std::thread::spawn(move || {
                netbatch_ports::sys::enter_netns(&path).is_ok()
                    && netbatch_ports::sys::ifindex(&name).is_some()
            })
            .join()
            .unwrap_or(false);
            if found {
                out.push(label);
            }
        }
        out
    }

    fn memory(&self) -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    }
}

/// Every problem `cfg` would meet on `m`, with its key.
pub(super) fn check(cfg: &Config, m: &dyn Machine) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let mut add = |key: String, reason: String| out.push(ConfigError { key, reason });
    let workers = cfg.workers;
    for (pi, p) in cfg.ports.iter().enumerate() {
        let key = format!("port[{pi}]");
        let Some(name) = p.kind.interface() else {
            continue;
        };
        let seen = m.iface(name);
        match (&p.kind, seen) {
            (PortKind::AfPacket(_) | PortKind::AfXdp(_), None) => add(
                format!("{key}.interface"),
                format!(
                    "no interface '{name}' on this machine (an {} port opens an existing \
                     one){}",
                    if matches!(p.kind, PortKind::AfXdp(_)) {
                        "af_xdp"
                    } else {
                        "af_packet"
                    },
                    elsewhere_hint(&m.elsewhere(name))
                ),
            ),
            (PortKind::AfPacket(_) | PortKind::AfXdp(_), Some(s)) => {
                if let Some(mtu) = s.mtu
                    && u32::from(p.setup.mtu) > mtu
                {
                    add(
                        format!("{key}.mtu"),
                        format!(
                            "{} is above the MTU of '{name}' ({mtu}): the kernel refuses \
                             longer frames on it",
                            p.setup.mtu
                        ),
                    );
                }
                if let (PortKind::AfXdp(_), Some(q)) = (&p.kind, s.rx_queues)
                    && q < workers
                {
                    add(
                        format!("{key}.interface"),
                        format!(
                            "'{name}' has {q} receive queue{}, and af_xdp binds worker w's \
                             socket to queue w: datapath.workers = {workers} needs {workers} \
                             (create the interface with more queues, or run fewer workers)",
                            if q == 1 { "" } else { "s" }
                        ),
                    );
                }
            }
            (PortKind::Tap(_), None) => {
                if !m.tun_device() {
                    add(
                        format!("{key}.kind"),
                        format!(
                            "a tap port creates '{name}' through /dev/net/tun, which this \
                             machine lacks (load the tun module)"
                        ),
                    );
                }
            }
            (PortKind::Tap(_), Some(s)) => {
                if let Some(why) = tap_mismatch(name, s, workers) {
                    add(format!("{key}.interface"), why);
                }
            }
            // Made in the control namespace, where this machine's view does not look.
            (PortKind::HostTap { .. }, _) => {
                if !m.tun_device() {
                    add(
                        "linux.pairs".into(),
                        format!(
                            "the pair of port '{name}' is a tap made through /dev/net/tun, \
                             which this machine lacks (load the tun module)"
                        ),
                    );
                }
            }
            (PortKind::Pcap | PortKind::Gen(_) | PortKind::VhostUser(_), _) => {}
        }
    }
    if let Some(l) = &cfg.linux
        && !m.netns(&l.netns_path())
    {
        add(
            "linux.namespace".into(),
            format!(
                "no network namespace '{}' on this machine ({} is missing): make it with `ip netns add {}` before netbatch starts",
                l.namespace,
                l.netns_path().display(),
                l.namespace
            ),
        );
    }
    if let Some(total) = m.memory() {
        let pool = u64::from(cfg.pool.buffers) * u64::from(cfg.pool.buf_size);
        let rings = cfg.rps.as_ref().map_or(0, |r| {
            let n = workers.max(1) as u64;
            (n * (n - 1))
                .saturating_mul(r.max_backlog as u64)
                .saturating_mul(size_of::<netbatch_engine::Pkt>() as u64)
        });
        if pool > total {
            add(
                "pool.buffers".into(),
                format!(
                    "{} buffers of {} bytes need {}, more than this machine's {} of memory",
                    cfg.pool.buffers,
                    cfg.pool.buf_size,
                    size(pool),
                    size(total)
                ),
            );
        } else if pool.saturating_add(rings) > total {
            add(
                "datapath.max_backlog".into(),
                format!(
                    "the RPS backlog rings ({} of {} packets, one per ordered pair of \
                     workers) need {}, and with the pool's {} more than this machine's {} of \
                     memory",
                    workers * workers.saturating_sub(1),
                    cfg.rps.as_ref().map_or(0, |r| r.max_backlog),
                    size(rings),
                    size(pool),
                    size(total)
                ),
            );
        }
    }
    out
}

/// Where else an interface of the name is, as the end of a sentence: netbatch opens
/// interfaces in the network namespace it runs in.
fn elsewhere_hint(found: &[Option<String>]) -> String {
    let Some(first) = found.first() else {
        return String::new();
    };
    let names: Vec<String> = found
        .iter()
        .map(|n| match n {
            Some(n) => format!("namespace '{n}'"),
            None => "the initial namespace".to_string(),
        })
        .collect();
    let how = match first {
        Some(n) => format!("`ip netns exec {n} netbatch ...`"),
        None => "`nsenter --net=/proc/1/ns/net netbatch ...`".to_string(),
    };
    format!(
        "; this process's network namespace has none, but {} has one: run netbatch \
         there ({how})",
        names.join(" and ")
    )
}

/// Why an existing interface `name` cannot be a tap port's device for `workers`, if it
/// cannot (`TUNSETIFF`'s checks in the kernel's `tun_set_iff`).
fn tap_mismatch(name: &str, s: Seen, workers: usize) -> Option<String> {
    if !s.sysfs {
        return None;
    }
    let Some(flags) = s.tun_flags else {
        return Some(format!(
            "'{name}' exists and is not a TAP device: a tap port creates its device, or \
             attaches to a TAP device of that name"
        ));
    };
    if flags & tun::IFF_TAP == 0 {
        return Some(format!(
            "'{name}' is a {} device, not a TAP device: a tap port exchanges Ethernet frames",
            if flags & tun::IFF_TUN != 0 {
                "TUN (layer 3)"
            } else {
                "TUN/TAP"
            }
        ));
    }
    let multi = flags & tun::IFF_MULTI_QUEUE != 0;
    if multi != (workers > 1) {
        return Some(format!(
            "'{name}' is a {}-queue TAP device, and with datapath.workers = {workers} a tap \
             port attaches {}: the kernel refuses the mismatch (delete the device, and the \
             port makes its own)",
            if multi { "multi" } else { "single" },
            if workers > 1 {
                "one queue per worker to a multi-queue device"
            } else {
                "to a single-queue device"
            }
        ));
    }
    None
}

/// `bytes` in the largest binary unit that keeps a whole number above 1.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::parse_test as parse;
    use super::{Machine, Seen, check, tun};

    /// A machine made up for a test: its interfaces, whether it has /dev/net/tun, its
    /// memory.
    struct Made {
        ifaces: HashMap<&'static str, Seen>,
        tun: bool,
        memory: Option<u64>,
    }

    impl Machine for Made {
        /// Only the control namespace `cp` exists.
        fn netns(&self, path: &std::path::Path) -> bool {
            path == std::path::Path::new("/run/netns/cp")
        }
        fn iface(&self, name: &str) -> Option<Seen> {
            self.ifaces.get(name).copied()
        }
        fn tun_device(&self) -> bool {
            self.tun
        }
        fn memory(&self) -> Option<u64> {
            self.memory
        }
        /// `gone0` is in namespace `lab-r`.
        fn elsewhere(&self, name: &str) -> Vec<Option<String>> {
            if name == "gone0" {
                vec![Some("lab-r".into())]
            } else {
                Vec::new()
            }
        }
    }

    fn veth(rx_queues: usize, mtu: u32) -> Seen {
        Seen {
            mtu: Some(mtu),
            rx_queues: Some(rx_queues),
            sysfs: true,
            tun_flags: None,
        }
    }

    fn keys_and_reasons(text: &str, m: &Made) -> Vec<(String, String)> {
        let cfg = parse(text).unwrap_or_else(|e| panic!("{e}"));
        check(&cfg, m)
            .into_iter()
            .map(|e| (e.key, e.reason))
            .collect()
    }

    fn port(i: usize, kind: &str, iface: &str) -> String {
        format!(
            "[[port]]\nname = \"p{i}\"\nkind = \"{kind}\"\ninterface = \"{iface}\"\n\
             mac = \"02:00:00:00:00:0{i}\"\naddresses = [\"10.{i}.0.1/24\"]\n"
        )
    }

    /// A missing interface is the `interface` key's problem (not `mac`'s), for each
    /// backend that opens an existing one; a tap port makes its own, given /dev/net/tun.
    #[test]
    fn a_missing_interface_is_named_at_its_key() {
        let text = format!(
            "{}{}{}",
            port(0, "af_packet", "gone0"),
            port(1, "af_xdp", "gone1"),
            port(2, "tap", "new2")
        );
        let mut m = Made {
            ifaces: HashMap::new(),
            tun: true,
            memory: None,
        };
        let got = keys_and_reasons(&text, &m);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "port[0].interface");
        assert!(got[0].1.contains("no interface 'gone0'"), "{got:?}");
        assert!(got[0].1.contains("af_packet"), "{got:?}");
        // Found in another namespace: the message says which, and how to run there.
        assert!(
            got[0].1.ends_with(
                "; this process's network namespace has none, but namespace 'lab-r' has \
                 one: run netbatch there (`ip netns exec lab-r netbatch ...`)"
            ),
            "{got:?}"
        );
        assert!(!got[1].1.contains("namespace"), "{got:?}");
        assert_eq!(got[1].0, "port[1].interface");
        assert!(got[1].1.contains("af_xdp"), "{got:?}");
        m.tun = false;
        let got = keys_and_reasons(&text, &m);
        assert_eq!(got[2].0, "port[2].kind", "{got:?}");
        assert!(got[2].1.contains("/dev/net/tun"), "{got:?}");
    }

    /// `[linux]` needs its namespace; pairs need /dev/net/tun for their taps (made in
    /// the namespace, so not looked for among this namespace's interfaces).
    #[test]
    fn the_control_namespace_must_exist() {
        let text = |ns: &str| {
            format!(
                "{}[linux]\nnamespace = \"{ns}\"\npairs = true\n",
                port(0, "af_packet", "one")
            )
        };
        let mut m = Made {
            ifaces: HashMap::from([("one", veth(1, 1500))]),
            tun: true,
            memory: None,
        };
        assert_eq!(keys_and_reasons(&text("cp"), &m), vec![]);
        let got = keys_and_reasons(&text("nope"), &m);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "linux.namespace");
        assert!(got[0].1.contains("ip netns add nope"), "{got:?}");
        m.tun = false;
        let got = keys_and_reasons(&text("cp"), &m);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "linux.pairs");
        assert!(got[0].1.contains("/dev/net/tun"), "{got:?}");
    }

    /// af_xdp binds worker w to queue w: two workers need two receive queues (the rule
    /// of the ports crate's `af_xdp::open`); af_packet does not care. A port MTU above the
    /// interface's is refused for both.
    #[test]
    fn af_xdp_needs_a_queue_per_worker_and_mtus_must_fit() {
        let text = format!(
            "[datapath]\nworkers = 2\n{}{}",
            port(0, "af_xdp", "one"),
            port(1, "af_packet", "small")
        );
        let m = Made {
            ifaces: HashMap::from([("one", veth(1, 1500)), ("small", veth(1, 1400))]),
            tun: true,
            memory: None,
        };
        let got = keys_and_reasons(&text, &m);
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["port[0].interface", "port[1].mtu"],
            "{got:?}"
        );
        assert!(got[0].1.contains("'one' has 1 receive queue"), "{got:?}");
        assert!(got[0].1.contains("datapath.workers = 2 needs 2"), "{got:?}");
        assert!(got[1].1.contains("MTU of 'small' (1400)"), "{got:?}");
        // Two queues are enough; so is an interface whose queues /sys does not show.
        let m = Made {
            ifaces: HashMap::from([
                ("one", veth(2, 1500)),
                (
                    "small",
                    Seen {
                        rx_queues: None,
                        ..veth(0, 1500)
                    },
                ),
            ]),
            tun: true,
            memory: None,
        };
        assert_eq!(keys_and_reasons(&text, &m), []);
    }

    /// An existing device under a tap port's name must be a TAP device whose queueing
    /// matches the workers, as `TUNSETIFF` demands.
    #[test]
    fn an_existing_tap_device_must_be_one_the_kernel_lets_us_attach_to() {
        let cases: [(Option<u32>, usize, Option<&str>); 6] = [
            (None, 1, Some("is not a TAP device")),
            (Some(tun::IFF_TUN), 1, Some("TUN (layer 3)")),
            (Some(tun::IFF_TAP), 1, None),
            (Some(tun::IFF_TAP), 2, Some("single-queue TAP device")),
            (Some(tun::IFF_TAP | tun::IFF_MULTI_QUEUE), 2, None),
            (
                Some(tun::IFF_TAP | tun::IFF_MULTI_QUEUE),
                1,
                Some("multi-queue TAP device"),
            ),
        ];
        for (flags, workers, want) in cases {
            let rx: Vec<usize> = (0..workers).collect();
            let text = format!(
                "[datapath]\nworkers = {workers}\n{}rx_workers = {rx:?}\n",
                port(0, "tap", "t0")
            );
            let m = Made {
                ifaces: HashMap::from([(
                    "t0",
                    Seen {
                        tun_flags: flags,
                        ..veth(workers, 1500)
                    },
                )]),
                tun: true,
                memory: None,
            };
            let got = keys_and_reasons(&text, &m);
            match want {
                None => assert_eq!(got, [], "{flags:?} {workers}"),
                Some(w) => {
                    assert_eq!(got.len(), 1, "{got:?}");
                    assert_eq!(got[0].0, "port[0].interface");
                    assert!(got[0].1.contains(w), "{flags:?} {workers}: {got:?}");
                }
            }
        }
    }

    /// The pool is touched whole at start: more than the machine's memory is refused at
    /// `pool.buffers`; the RPS rings on top of a pool that fits, at
    /// `datapath.max_backlog`.
    #[test]
    fn the_pool_and_the_backlog_rings_must_fit_memory() {
        let pool = "[pool]\nbuffers = 65536\nbuf_size = 2048\n";
        let p = "[[port]]\nname = \"p\"\nmac = \"02:00:00:00:00:01\"\n";
        let m = |mib: u64| Made {
            ifaces: HashMap::new(),
            tun: true,
            memory: Some(mib << 20),
        };
        // 65536 × 2048 bytes = 128 MiB.
        let got = keys_and_reasons(&format!("{pool}{p}"), &m(127));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "pool.buffers");
        assert!(got[0].1.contains("need 128.0 MiB"), "{got:?}");
        assert_eq!(keys_and_reasons(&format!("{pool}{p}"), &m(128)), []);
        // 4 workers: 12 rings of 65536 four-byte handles = 3 MiB.
        let rps = "[datapath]\nworkers = 4\nrps = \"backlog\"\nmax_backlog = 65536\n";
        let got = keys_and_reasons(&format!("{rps}{pool}{p}"), &m(130));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "datapath.max_backlog");
        assert!(got[0].1.contains("need 3.0 MiB"), "{got:?}");
        assert_eq!(keys_and_reasons(&format!("{rps}{pool}{p}"), &m(131)), []);
    }
}
