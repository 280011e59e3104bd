//! `[[vrf]]`: VRFs (virtual routing and forwarding instances), as Linux's VRF devices
//! have them (`ip link add NAME type vrf table N`).
//!
//! ```toml
//! [[vrf]]
//! name = "blue"       # how ports, VLANs and routes name it
//! table = 10          # its route table (1 to 4294967295, not main, local or default)
//!
//! [[port]]
//! name = "p1"
//! vrf = "blue"        # the untagged interface's VRF (default: main)
//! [[port.vlan]]
//! id = 7
//! vrf = "blue"        # a VLAN interface's own (default: main)
//!
//! [[route]]
//! prefix = "0.0.0.0/0"
//! via = "192.0.2.1"
//! vrf = "blue"        # the same as table = 10
//! ```
//!
//! A VRF's interfaces' addresses make their local, connected and broadcast routes in the
//! VRF's table, not in `main`; an address or subnet may repeat in another VRF (each VRF
//! has its own table), not within one. A route's gateway without `dev` is looked for on
//! the subnets of the route's own VRF; a `dev` in another VRF leaks the route there.
//! Refused, with the key: a VRF named twice, or `main`; two VRFs on one table; a VRF on
//! `main`, `local`, `default` or 0; a port, VLAN or route naming a VRF that is not
//! defined; a route with a `table` that is not its `vrf`'s.
//! `netbatch_stack::route::rule::PolicyOf` says how a VRF's packets are routed.

use std::collections::BTreeMap;

use netbatch_stack::route::rule::{TABLE_DEFAULT, TABLE_LOCAL, TABLE_MAIN, table_name};
use netbatch_stack::route::{Routes, Routes6, RoutesOf};

use super::Errs;
use super::rules::{Val, table_id};

/// One `[[vrf]]` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct VrfFile {
    name: String,
    table: Val,
}

/// A VRF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfConfig {
    /// Its name.
    pub name: String,
    /// Its route table.
    pub table: u32,
}

/// The VRFs of `[[vrf]]`, each checked (see the module documentation).
pub(super) fn validate(raw: &[VrfFile], e: &mut Errs) -> Vec<VrfConfig> {
    let mut out: Vec<VrfConfig> = Vec::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut tables: BTreeMap<u32, usize> = BTreeMap::new();
    for (vi, v) in raw.iter().enumerate() {
        let key = format!("vrf[{vi}]");
        let mut ok = true;
        if v.name.is_empty() || v.name.contains(char::is_whitespace) || v.name == "main" {
            e.add(
                format!("{key}.name"),
                format!(
                    "'{}' is not a usable VRF name (main is the table of interfaces without a vrf)",
                    v.name
                ),
            );
            ok = false;
        } else if let Some(first) = names.insert(&v.name, vi) {
            e.add(
                format!("{key}.name"),
                format!("VRF '{}' is defined twice: vrf[{first}] too", v.name),
            );
            ok = false;
        }
        let table = match table_id(&v.table) {
            Ok(t @ (TABLE_MAIN | TABLE_LOCAL | TABLE_DEFAULT)) => {
                e.add(
                    format!("{key}.table"),
                    format!(
                        "table {} is Linux's own: a VRF has a numbered table of its own",
                        table_name(t)
                    ),
                );
                None
            }
            Ok(t) => match tables.get(&t) {
                Some(&first) => {
                    e.add(
                        format!("{key}.table"),
                        format!("table {t} is also vrf[{first}]'s: each VRF has its own table"),
                    );
                    None
                }
                None => {
                    tables.insert(t, vi);
                    Some(t)
                }
            },
            Err(why) => {
                e.add(format!("{key}.table"), why);
                None
            }
        };
        if let (true, Some(table)) = (ok, table) {
            out.push(VrfConfig {
                name: v.name.clone(),
                table,
            });
        }
    }
    out
}

/// Refuses each interface's `vrf` that names no VRF (`iface_vrfs`: the VRF name of each
/// interface, "" for main, with the key that set it).
pub(super) fn check_members(iface_vrfs: &[(String, String)], vrfs: &[VrfConfig], e: &mut Errs) {
    for (name, key) in iface_vrfs {
        if !name.is_empty() && !vrfs.iter().any(|v| &v.name == name) {
            e.add(key, unknown(name, vrfs));
        }
    }
}

/// Why `name` is no VRF.
pub(super) fn unknown(name: &str, vrfs: &[VrfConfig]) -> String {
    let known: Vec<&str> = vrfs.iter().map(|v| v.name.as_str()).collect();
    if known.is_empty() {
        format!("no VRF named '{name}' (no [[vrf]] is defined)")
    } else {
        format!("no VRF named '{name}' (the VRFs: {})", known.join(", "))
    }
}

impl super::Config {
    /// The table of the VRF named `name`.
    pub fn vrf_table(&self, name: &str) -> Option<u32> {
        self.vrfs.iter().find(|v| v.name == name).map(|v| v.table)
    }

    /// The name of the VRF of table `table`, if one has it.
    pub fn vrf_name(&self, table: u32) -> Option<&str> {
        self.vrfs
            .iter()
            .find(|v| v.table == table)
            .map(|v| v.name.as_str())
    }

    /// The table a command names: `vrf NAME` (the VRF's), or `table N` (`main`,
    /// `default`, `local` or 1 to 4294967295).
    pub fn table_named(&self, by: &str, which: &str) -> Result<u32, String> {
        match by {
            "vrf" => self
                .vrf_table(which)
                .ok_or_else(|| unknown(which, &self.vrfs)),
            _ => table_id(&Val::Text(which.to_string())),
        }
    }

    /// Table `id` of both families as this configuration builds it: a VRF's (its
    /// interfaces' routes, then its configured ones) or a numbered table's (its
    /// configured routes), compact ([`RoutesOf::compact`]).
    pub fn table(&self, id: u32) -> Result<(Routes, Routes6), crate::setup::SetupError> {
        if self.vrf_name(id).is_none() {
            // A numbered table: its routes alone, as `Config::policies` builds it.
            let mut t = RoutesOf::compact();
            t.load(self.tables.get(&id).into_iter().flatten().cloned())?;
            let mut t6 = RoutesOf::compact();
            t6.load(self.tables6.get(&id).into_iter().flatten().cloned())?;
            return Ok((t, t6));
        }
        let iif = self.iface_tables();
        let setups: Vec<_> = self.ports.iter().map(|p| p.setup.clone()).collect();
        let (_, ifaces) = crate::setup::interfaces(&setups)?;
        let of = |i: u16| iif.get(usize::from(i)) == Some(&id);
        let none = Vec::new();
        let none6 = Vec::new();
        let t = crate::setup::build_into(
            RoutesOf::compact(),
            &ifaces,
            self.tables.get(&id).unwrap_or(&none),
            of,
        )?;
        let t6 = crate::setup::build_into6(
            RoutesOf::compact(),
            &ifaces,
            self.tables6.get(&id).unwrap_or(&none6),
            of,
        )?;
        Ok((t, t6))
    }

    /// Each interface's VRF table ([`TABLE_MAIN`] for main), in interface order.
    pub fn iface_tables(&self) -> Vec<u32> {
        self.iface_vrfs
            .iter()
            .map(|n| self.vrf_table(n).unwrap_or(TABLE_MAIN))
            .collect()
    }
}
