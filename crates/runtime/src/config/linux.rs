//! `[linux]`: the kernel routing table netbatch follows ([`crate::linux`]).
//!
//! `namespace = "NAME"` names the control network namespace (`/run/netns/NAME`, as
//! `ip netns add NAME` makes it) whose routes, neighbours and links are mirrored;
//! `table` (default 254, `main`) is the kernel table whose routes become netbatch's.
//! `tables = [10, 20]` mirrors more kernel tables, each into netbatch's table of the
//! same number: a VRF's (as a Linux VRF device's `table`), or a numbered table the
//! rules look up; a routing daemon exporting per VRF (`kernel table N`) drives them.
//! Without the section nothing is mirrored.
//!
//! `pairs = true` pairs every port that has an untagged interface with a tap in the
//! namespace ([`netbatch_stack::hostif`], VPP's linux-cp): the tap has the port's name,
//! MAC, MTU and addresses, what netbatch does not consume of the port's traffic goes to
//! it and what the kernel sends through it leaves by the port. In netbatch the tap is a
//! port of its own, `host-<port>`, received from on every worker (the kernel spreads its
//! flows over every queue). Refused: a port name that cannot be a kernel interface name
//! (longer than 15 bytes), a port already named `host-<port>`.
//!
//! `vrfs = true` makes netbatch's VRFs follow the namespace's VRF devices: a VRF device
//! that is the controller (`ip link set DEV master VRF`) of the kernel interface named
//! as a netbatch interface (a pair's tap, or an interface of that name) is a netbatch
//! VRF of the device's name and table, with that interface in it; enslaving, releasing
//! and deleting change netbatch's VRFs live. The VRFs then have one source: `[[vrf]]`
//! and an interface's `vrf` are refused beside it, at their keys. The VRF's routes are
//! its kernel table's, mirrored when the table is one of `tables`.
//!
//! Refused: a namespace name that is not a file name of `/run/netns` (empty, with a
//! `/`, `.` or `..`, longer than a Linux file name), and tables 0 (`unspec`, which no
//! route is in) and 255 (`local`, which holds only local and broadcast routes, never
//! mirrored).

use std::path::PathBuf;

use netbatch_stack::iface::Pair;

use super::{Errs, PortConfig, PortKind};
use crate::setup::PortSetup;

/// The directory `ip netns` keeps named namespaces in.
pub(crate) const NETNS_DIR: &str = "/run/netns";

/// The kernel's main routing table (`RT_TABLE_MAIN`).
pub(crate) const TABLE_MAIN: u32 = 254;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LinuxFile {
    namespace: Option<String>,
    table: Option<i64>,
    tables: Option<Vec<i64>>,
    pairs: Option<bool>,
    vrfs: Option<bool>,
}

/// What the mirror follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinuxConfig {
    /// The control namespace's name.
    pub namespace: String,
    /// The kernel routing table mirrored (into `main`).
    pub table: u32,
    /// Kernel tables mirrored each into netbatch's table of the same number (a VRF's,
    /// as a Linux VRF device's table, or a numbered table of the rules).
    pub tables: Vec<u32>,
    /// Ports are paired with taps in the namespace.
    pub pairs: bool,
    /// netbatch's VRFs are the namespace's VRF devices (`ip link add NAME type vrf
    /// table N`) that are the controllers of netbatch interfaces' kernel twins; the
    /// file then defines none ([`crate::linux`]).
    pub vrfs: bool,
}

impl LinuxConfig {
    /// The mirror of namespace `namespace`'s main table.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            table: TABLE_MAIN,
            tables: Vec::new(),
            pairs: false,
            vrfs: false,
        }
    }

    /// The namespace's file (`/run/netns/NAME`).
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.namespace)
    }
}

pub(super) fn validate(f: Option<&LinuxFile>, e: &mut Errs) -> Option<LinuxConfig> {
    let f = f?;
    let mut ok = true;
    let namespace = match &f.namespace {
        None => {
            e.add(
                "linux.namespace",
                "missing: name the control namespace whose routes are mirrored (as `ip netns` lists it)",
            );
            ok = false;
            String::new()
        }
        Some(n) if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') => {
            e.add(
                "linux.namespace",
                format!("'{n}' is not a namespace name (a file name in {NETNS_DIR}: not empty, no '/', not '.' or '..')"),
            );
            ok = false;
            String::new()
        }
        Some(n) if n.len() > 255 => {
            e.add(
                "linux.namespace",
                format!(
                    "'{n}' is {} bytes long; a file name holds at most 255",
                    n.len()
                ),
            );
            ok = false;
            String::new()
        }
        Some(n) => n.clone(),
    };
    let table = match f.table {
        None => TABLE_MAIN,
        Some(0) => {
            e.add(
                "linux.table",
                "0 is RT_TABLE_UNSPEC, which holds no route (the main table is 254)",
            );
            ok = false;
            0
        }
        Some(255) => {
            e.add(
                "linux.table",
                "255 is the local table: only local and broadcast routes, which are never mirrored (the main table is 254)",
            );
            ok = false;
            0
        }
        Some(t) => match u32::try_from(t) {
            Ok(t) => t,
            Err(_) => {
                e.add(
                    "linux.table",
                    format!("{t} is not a routing table id (1 to {})", u32::MAX),
                );
                ok = false;
                0
            }
        },
    };
    let mut tables = Vec::new();
    for (i, &t) in f.tables.iter().flatten().enumerate() {
        let key = format!("linux.tables[{i}]");
        match u32::try_from(t) {
            Ok(x) if x == table => {
                e.add(
                    key,
                    format!("table {t} is already mirrored into main (`linux.table`)"),
                );
                ok = false;
            }
            Ok(0 | 253..=255) => {
                e.add(key, format!("{t} is not a table a VRF or a rule can have here (unspec, default, main and local are not; main is `table`)"));
                ok = false;
            }
            Ok(x) if tables.contains(&x) => {
                e.add(key, format!("table {t} is listed twice"));
                ok = false;
            }
            Ok(x) => tables.push(x),
            Err(_) => {
                e.add(
                    key,
                    format!("{t} is not a routing table id (1 to {})", u32::MAX),
                );
                ok = false;
            }
        }
    }
    ok.then_some(LinuxConfig {
        namespace,
        table,
        tables,
        pairs: f.pairs.unwrap_or(false),
        vrfs: f.vrfs.unwrap_or(false),
    })
}

/// The netbatch name of the tap paired with port `port`.
pub(crate) fn pair_name(port: &str) -> String {
    format!("host-{port}")
}

/// Appends the tap of every port that has an untagged interface (`[linux] pairs`) to
/// `ports`, each received from on all `workers`, and marks both ends of each pair.
pub(super) fn pair_ports(
    ports: &mut Vec<PortConfig>,
    linux: &LinuxConfig,
    workers: usize,
    e: &mut Errs,
) {
    if !linux.pairs {
        return;
    }
    let wire = ports.len();
    let names: std::collections::HashSet<String> =
        ports.iter().map(|p| p.setup.name.clone()).collect();
    for i in 0..wire {
        let p = &ports[i];
        if p.setup.addrs.is_none() {
            continue;
        }
        let name = &p.setup.name;
        if name.is_empty() || name.len() > 15 || name.contains('/') || name.contains(' ') {
            e.add(
                "linux.pairs",
                format!("port '{name}' cannot be paired: its tap takes its name, and a kernel interface name has 1 to 15 bytes, no '/' or space"),
            );
            continue;
        }
        let tap_name = pair_name(name);
        if names.contains(&tap_name) {
            e.add(
                "linux.pairs",
                format!("port '{name}' cannot be paired: its tap would be port '{tap_name}', which the file defines"),
            );
            continue;
        }
        let (Ok(w), Ok(t)) = (u16::try_from(i), u16::try_from(ports.len())) else {
            e.add("linux.pairs", "too many ports to pair");
            return;
        };
        let mut setup = PortSetup {
            name: tap_name,
            addrs: None,
            addrs6: Vec::new(),
            ll6: None,
            vlans: Vec::new(),
            features: Default::default(),
            pair: Pair::Inject(w),
            ..p.setup.clone()
        };
        setup.features = Default::default();
        let kind = PortKind::HostTap {
            interface: name.clone(),
            netns: linux.netns_path(),
        };
        ports[i].setup.pair = Pair::Punt(t);
        ports.push(PortConfig {
            setup,
            kind,
            rx_workers: (0..workers.min(usize::from(u16::MAX)) as u16).collect(),
            rps_map: Vec::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Option<LinuxConfig>, Vec<String>> {
        #[derive(serde::Deserialize)]
        struct Top {
            linux: Option<LinuxFile>,
        }
        let t: Top = toml::from_str(text).expect("toml");
        let mut e = Errs::default();
        let v = validate(t.linux.as_ref(), &mut e);
        if e.0.is_empty() {
            Ok(v)
        } else {
            Err(e.0.iter().map(ToString::to_string).collect())
        }
    }

    /// No section, no mirror; the table defaults to the kernel's main table (254, as
    /// `RT_TABLE_MAIN` in `linux/rtnetlink.h`); the namespace file is where `ip netns`
    /// puts it.
    #[test]
    fn the_section_enables_the_mirror_of_the_main_table() {
        assert_eq!(check(""), Ok(None));
        let c = check("[linux]\nnamespace = \"cp\"")
            .expect("valid")
            .expect("on");
        assert_eq!(c, LinuxConfig::new("cp"));
        assert_eq!(c.table, 254);
        assert_eq!(c.netns_path(), PathBuf::from("/run/netns/cp"));
        let t = check("[linux]\nnamespace = \"cp\"\ntable = 100000")
            .expect("valid")
            .expect("on");
        assert_eq!(t.table, 100_000);
        let t = check("[linux]\nnamespace = \"cp\"\ntables = [10, 20]")
            .expect("valid")
            .expect("on");
        assert_eq!((t.table, t.tables), (254, vec![10, 20]));
    }

    /// `tables` names kernel tables mirrored into netbatch's of the same number: main
    /// (already `table`), local, default, unspec, a repeat and a number beyond 32 bits
    /// are refused at the entry's key.
    #[test]
    fn more_tables_are_checked_one_by_one() {
        for (tables, why) in [
            ("[254]", "already mirrored into main"),
            ("[10, 255]", "not a table"),
            ("[0]", "not a table"),
            ("[10, 10]", "listed twice"),
            ("[4294967296]", "not a routing table id"),
        ] {
            let e = check(&format!("[linux]\nnamespace = \"cp\"\ntables = {tables}"))
                .expect_err(tables);
            assert!(
                e.iter()
                    .any(|x| x.starts_with("linux.tables[") && x.contains(why)),
                "{tables}: {e:?}"
            );
        }
    }

    /// `pairs = true` adds, after the file's ports, one tap per port with an untagged
    /// interface: named `host-<port>`, made as the kernel interface `<port>` in the
    /// namespace, with the port's MAC and MTU, no addresses or offloads of its own,
    /// received on every worker; both ends know each other. A port with only VLANs is
    /// not paired; a name a kernel interface cannot have is refused at `linux.pairs`.
    #[test]
    fn pairs_add_a_tap_per_port() {
        let text = "[datapath]\nworkers = 2\n\
            [[port]]\nname = \"r1\"\nkind = \"af_packet\"\ninterface = \"v1\"\nmac = \"02:00:00:00:00:01\"\nmtu = 9000\naddresses = [\"192.0.2.1/24\"]\nfeatures = [\"rx-gro\"]\n\
            [[port]]\nname = \"r2\"\nkind = \"af_packet\"\ninterface = \"v2\"\nmac = \"02:00:00:00:00:02\"\nvlan = [{ id = 5, addresses = [\"198.51.100.1/24\"] }]\n\
            [linux]\nnamespace = \"cp\"\npairs = true\n";
        let c =
            crate::config::Config::parse(text, std::path::Path::new("."), "t.toml").expect("valid");
        assert!(c.graph.host_pairs);
        assert_eq!(c.ports.len(), 3, "r1, r2 and r1's tap");
        let tap = &c.ports[2];
        assert_eq!(tap.setup.name, "host-r1");
        assert_eq!(
            tap.kind,
            PortKind::HostTap {
                interface: "r1".into(),
                netns: "/run/netns/cp".into()
            }
        );
        assert_eq!(tap.setup.mac, c.ports[0].setup.mac);
        assert_eq!(tap.setup.mtu, 9000);
        assert_eq!(tap.setup.addrs, None);
        assert_eq!(tap.setup.features, Default::default());
        assert_eq!(tap.rx_workers, vec![0, 1]);
        assert_eq!(tap.setup.pair, Pair::Inject(0));
        assert_eq!(c.ports[0].setup.pair, Pair::Punt(2));
        assert_eq!(c.ports[1].setup.pair, Pair::None);

        let long = text.replace("name = \"r1\"", "name = \"a-very-long-port-name\"");
        let e = crate::config::Config::parse(&long, std::path::Path::new("."), "t.toml")
            .expect_err("long name");
        assert!(
            e.errors
                .iter()
                .any(|e| e.key == "linux.pairs" && e.reason.contains("1 to 15 bytes")),
            "{e}"
        );
        let off = text.replace("pairs = true", "pairs = false");
        let c =
            crate::config::Config::parse(&off, std::path::Path::new("."), "t.toml").expect("valid");
        assert_eq!(c.ports.len(), 2);
        assert!(!c.graph.host_pairs);
    }

    /// `vrfs = true` takes the VRFs from the namespace's VRF devices: off by default;
    /// beside it a `[[vrf]]` and an interface's `vrf` (untagged or VLAN) are refused,
    /// each at its key with the reason; a file without them is valid and has no VRFs.
    #[test]
    fn kernel_vrfs_are_the_only_vrfs() {
        let c = check("[linux]\nnamespace = \"cp\"")
            .expect("valid")
            .expect("on");
        assert!(!c.vrfs);
        let base = "[[port]]\nname = \"r1\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n\
            [[port]]\nname = \"r2\"\nmac = \"02:00:00:00:00:02\"\nvlan = [{ id = 5, addresses = [\"198.51.100.1/24\"] }]\n\
            [linux]\nnamespace = \"cp\"\nvrfs = true\ntables = [10]\n";
        let parse = |t: &str| crate::config::Config::parse(t, std::path::Path::new("."), "t.toml");
        let c = parse(base).expect("valid");
        let l = c.linux.as_ref().expect("linux");
        assert!(l.vrfs && c.vrfs.is_empty() && c.iface_vrfs.is_empty());
        let with =
            base.replace(
                "addresses = [\"192.0.2.1/24\"]\n",
                "addresses = [\"192.0.2.1/24\"]\nvrf = \"blue\"\n",
            )
            .replace(
                "addresses = [\"198.51.100.1/24\"] }",
                "addresses = [\"198.51.100.1/24\"], vrf = \"blue\" }",
            ) + "[[vrf]]\nname = \"blue\"\ntable = 10\n";
        let e = parse(&with).expect_err("both sources");
        let keys: Vec<&str> = e
            .errors
            .iter()
            .filter(|e| e.reason.contains("linux.vrfs = true"))
            .map(|e| e.key.as_str())
            .collect();
        assert_eq!(
            keys,
            ["vrf[0]", "port[0].vrf", "port[1].vlan[0].vrf"],
            "{e}"
        );
    }

    /// Each mistake is refused at its key with the reason, all of them at once.
    #[test]
    fn mistakes_name_their_key() {
        let e = check("[linux]\ntable = 0").expect_err("invalid");
        assert!(e[0].starts_with("linux.namespace: missing"), "{e:?}");
        assert!(
            e[1].starts_with("linux.table: 0 is RT_TABLE_UNSPEC"),
            "{e:?}"
        );
        for bad in ["", ".", "..", "a/b"] {
            let e = check(&format!("[linux]\nnamespace = \"{bad}\"")).expect_err(bad);
            assert!(e[0].starts_with("linux.namespace: '"), "{e:?}");
        }
        let long = format!("[linux]\nnamespace = \"{}\"", "n".repeat(256));
        assert!(check(&long).expect_err("long")[0].contains("at most 255"));
        let e = check("[linux]\nnamespace = \"cp\"\ntable = 255").expect_err("local");
        assert!(
            e[0].starts_with("linux.table: 255 is the local table"),
            "{e:?}"
        );
        for t in ["-1", "4294967296"] {
            let e = check(&format!("[linux]\nnamespace = \"cp\"\ntable = {t}")).expect_err(t);
            assert!(e[0].contains("is not a routing table id"), "{e:?}");
        }
        let e = toml::from_str::<LinuxFile>("namespace = \"cp\"\ntabel = 1").expect_err("typo");
        assert!(e.to_string().contains("unknown field `tabel`"), "{e}");
    }
}
