//! `[linux]`: the kernel routing table netbatch follows ([`crate::linux`]).
//!
//! `namespace = "NAME"` names the control network namespace (`/run/netns/NAME`, as
//! `ip netns add NAME` makes it) whose routes, neighbours and links are mirrored;
//! `table` (default 254, `main`) is the kernel table whose routes become netbatch's.
//! Without the section nothing is mirrored.
//!
//! Refused: a namespace name that is not a file name of `/run/netns` (empty, with a
//! `/`, `.` or `..`, longer than a Linux file name), and tables 0 (`unspec`, which no
//! route is in) and 255 (`local`, which holds only local and broadcast routes, never
//! mirrored).

use std::path::PathBuf;

use super::Errs;

/// The directory `ip netns` keeps named namespaces in.
pub(crate) const NETNS_DIR: &str = "/run/netns";

/// The kernel's main routing table (`RT_TABLE_MAIN`).
pub(crate) const TABLE_MAIN: u32 = 254;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LinuxFile {
    namespace: Option<String>,
    table: Option<i64>,
}

/// What the mirror follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinuxConfig {
    /// The control namespace's name.
    pub namespace: String,
    /// The kernel routing table mirrored.
    pub table: u32,
}

impl LinuxConfig {
    /// The mirror of namespace `namespace`'s main table.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            table: TABLE_MAIN,
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
    ok.then_some(LinuxConfig { namespace, table })
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
