//! The control socket's commands on VRFs' and numbered tables: `route add|replace|del
//! ROUTE vrf NAME|table N` and `show routes vrf NAME|table N`.
//!
//! A change is made on the configuration's routes of the table, the table is built
//! again from them (a VRF's interfaces' routes, then its routes: a table of a VRF or a
//! numbered one is small), and the workers' policy is replaced by one with that table in
//! the same slot ([`netbatch_stack::route::rule::PolicyOf::with_table`]), so that an
//! adjacency a packet holds still names its table. A route for a table that has none yet
//! takes a new slot. `main` (`table main`, or no `vrf`/`table`) is the route commands'
//! own.

use std::collections::BTreeMap;
use std::sync::Arc;

use netbatch_stack::route::file::AnyRoute;
use netbatch_stack::route::rule::{PolicyOf, RuleOf, TABLE_LOCAL, TABLE_MAIN};
use netbatch_stack::route::{Family, RouteOf, RoutesOf, V4, V6};
use serde_json::json;

use super::{Control, Reply, show};
use crate::config::{Config, VrfConfig};

/// Whether the words of a route command name a table other than `main` (`vrf NAME`, or
/// `table N` with N not main).
pub(super) fn names_a_table(words: &[&str]) -> bool {
    selector(words).is_some_and(|(by, which, _)| by == "vrf" || which != "main")
}

/// The `vrf NAME` or `table N` of a route command's words, and the words without it.
fn selector<'a>(words: &[&'a str]) -> Option<(&'a str, &'a str, Vec<String>)> {
    let at = words.iter().position(|&w| w == "vrf" || w == "table")?;
    let (by, which) = (*words.get(at)?, *words.get(at + 1)?);
    let rest = words
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != at && i != at + 1)
        .map(|(_, w)| (*w).to_string())
        .collect();
    Some((by, which, rest))
}

/// Where each family's numbered tables and rules are: the configuration's routes of a
/// table and its rules, the workers' policy.
pub(super) trait Tabled: Family {
    /// The configured routes of each numbered table.
    fn tables(cfg: &mut Config) -> &mut BTreeMap<u32, Vec<RouteOf<Self>>>;
    /// The configured policy rules (after Linux's defaults).
    fn rules(cfg: &mut Config) -> &mut Vec<RuleOf<Self>>;
    /// The kernel's rules the Linux mirror follows.
    fn mirrored(st: &mut super::State) -> &mut Vec<RuleOf<Self>>;
    /// Worker `w`'s policy.
    fn policy(w: &netbatch_datapath::worker::Worker) -> Arc<PolicyOf<Self>>;
    /// Makes worker `w` route by `p`.
    fn install(w: &mut netbatch_datapath::worker::Worker, p: &Arc<PolicyOf<Self>>);
    /// The family's half of what [`Config::table`] builds.
    fn pick(
        t: (
            netbatch_stack::route::Routes,
            netbatch_stack::route::Routes6,
        ),
    ) -> RoutesOf<Self>;
}

impl Tabled for V4 {
    fn tables(cfg: &mut Config) -> &mut BTreeMap<u32, Vec<RouteOf<Self>>> {
        &mut cfg.tables
    }
    fn rules(cfg: &mut Config) -> &mut Vec<RuleOf<Self>> {
        &mut cfg.rules
    }
    fn mirrored(st: &mut super::State) -> &mut Vec<RuleOf<Self>> {
        &mut st.mirrored_rules
    }
    fn policy(w: &netbatch_datapath::worker::Worker) -> Arc<PolicyOf<Self>> {
        w.host.policy.clone()
    }
    fn install(w: &mut netbatch_datapath::worker::Worker, p: &Arc<PolicyOf<Self>>) {
        w.host.policy = p.clone();
    }
    fn pick(
        t: (
            netbatch_stack::route::Routes,
            netbatch_stack::route::Routes6,
        ),
    ) -> RoutesOf<Self> {
        t.0
    }
}

impl Tabled for V6 {
    fn tables(cfg: &mut Config) -> &mut BTreeMap<u32, Vec<RouteOf<Self>>> {
        &mut cfg.tables6
    }
    fn rules(cfg: &mut Config) -> &mut Vec<RuleOf<Self>> {
        &mut cfg.rules6
    }
    fn mirrored(st: &mut super::State) -> &mut Vec<RuleOf<Self>> {
        &mut st.mirrored_rules6
    }
    fn policy(w: &netbatch_datapath::worker::Worker) -> Arc<PolicyOf<Self>> {
        w.host.policy6.clone()
    }
    fn install(w: &mut netbatch_datapath::worker::Worker, p: &Arc<PolicyOf<Self>>) {
        w.host.policy6 = p.clone();
    }
    fn pick(
        t: (
            netbatch_stack::route::Routes,
            netbatch_stack::route::Routes6,
        ),
    ) -> RoutesOf<Self> {
        t.1
    }
}

impl Control {
    /// `show routes vrf NAME|table N`.
    pub(super) fn show_table(&self, by: &str, which: &str) -> Reply {
        let st = self.state();
        let id = match st.cfg.table_named(by, which) {
            Ok(TABLE_MAIN) => return show::routes(&st.routes, &st.routes6, &st.cfg.iface_names()),
            Ok(id) => id,
            Err(e) => return Reply::err(format!("show routes {by} {which}: {e}")),
        };
        // The table the workers route by: the configuration's routes of it, and what
        // the Linux mirror put in it.
        let names = st.cfg.iface_names();
        drop(st);
        show::routes(
            &self.live_table::<V4>(id),
            &self.live_table::<V6>(id),
            &names,
        )
    }

    /// `route add|replace|del ROUTE vrf NAME|table N`.
    pub(super) fn route_in_table(&self, op: &str, words: &[&str]) -> Reply {
        let Some((by, which, rest)) = selector(words) else {
            return Reply::err(format!("route {op}: which table?"));
        };
        let line = rest.join(" ");
        let mut st = self.state();
        let id = match st.cfg.table_named(by, which) {
            Ok(TABLE_LOCAL) => {
                return Reply::err(format!(
                    "route {op} {line} table local: netbatch makes the local routes from the addresses"
                ));
            }
            Ok(id) => id,
            Err(e) => return Reply::err(format!("route {op} {line}: {e}")),
        };
        // A gateway without dev is on one of the VRF's subnets (main's for a numbered
        // table that is no VRF's).
        let vrf = st.cfg.vrf_name(id).unwrap_or("").to_string();
        let alone = matches!(op, "del" | "delete") && rest.len() == 1;
        let parsed = if alone {
            st.cfg.parse_route_in(&format!("blackhole {line}"), &vrf)
        } else {
            st.cfg.parse_route_in(&line, &vrf)
        };
        let what = format!("{by} {which}");
        match parsed {
            Ok(AnyRoute::V4(r)) => self.table_route::<V4>(&mut st.cfg, op, &line, &what, id, r),
            Ok(AnyRoute::V6(r)) => self.table_route::<V6>(&mut st.cfg, op, &line, &what, id, r),
            Err(e) => Reply::err(format!("route {op} {line} {what}: {e}")),
        }
    }

    /// `route add|replace|del` of `r` in table `id` of its family.
    fn table_route<F: Tabled>(
        &self,
        cfg: &mut Config,
        op: &str,
        line: &str,
        which: &str,
        id: u32,
        r: RouteOf<F>,
    ) -> Reply {
        let routes = F::tables(cfg).entry(id).or_default();
        let at = routes.iter().position(|x| x.prefix == r.prefix);
        let done = match (op, at) {
            ("add", Some(_)) => {
                return Reply::err(format!(
                    "route add {line} {which}: a route for {} exists (use route replace)",
                    r.prefix
                ));
            }
            ("del" | "delete", None) => {
                return Reply::err(format!(
                    "route del {line} {which}: no route for {}",
                    r.prefix
                ));
            }
            ("del" | "delete", Some(i)) => {
                routes.remove(i);
                "deleted"
            }
            (_, Some(i)) => {
                routes[i] = r.clone();
                "replaced"
            }
            (_, None) => {
                routes.push(r.clone());
                "added"
            }
        };
        let before = cfg.clone();
        let undo = |cfg: &mut Config| *cfg = before.clone();
        let table = match cfg.table(id) {
            Ok(t) => Arc::new(F::pick(t)),
            Err(e) => {
                undo(cfg);
                return Reply::err(format!("route {op} {line} {which}: {e}"));
            }
        };
        // The workers' policy with the table in its slot.
        if let Err(e) =
            self.change_policy::<F>(|p| p.with_table(id, table).map_err(|e| e.to_string()))
        {
            undo(cfg);
            return Reply::err(format!("route {op} {line} {which}: {e}"));
        }
        let text = format!(
            "{done}: {} {which}",
            show::route_line(&r, &cfg.iface_names())
        );
        tracing::info!(target: "netbatch::control", "route {text}");
        Reply::ok(
            text,
            json!({ "route": done, "family": F::NAME, "prefix": r.prefix.to_string(), "table": id }),
        )
    }
}

impl Control {
    /// Replaces every worker's policy of family `F` by `change` of the one they route
    /// by now (worker 0's: they all hold the same), between two of their rounds.
    pub(super) fn change_policy<F: Tabled>(
        &self,
        change: impl FnOnce(&PolicyOf<F>) -> Result<PolicyOf<F>, String>,
    ) -> Result<(), String> {
        let policy = self.live_policy::<F>()?;
        let next = Arc::new(change(&policy)?);
        self.remote
            .on_each(move |_, w| F::install(w, &next))
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The policy of family `F` the workers route by (worker 0's).
    pub(super) fn live_policy<F: Tabled>(&self) -> Result<Arc<PolicyOf<F>>, String> {
        let v = self
            .remote
            .on_each(|i, w| (i == 0).then(|| F::policy(w)))
            .map_err(|e| e.to_string())?;
        v.into_iter()
            .flatten()
            .next()
            .ok_or_else(|| "no worker".to_string())
    }
}

impl Control {
    /// Numbered table `id` of family `F` as the workers route by it (empty when the
    /// policy has none).
    pub(super) fn live_table<F: Tabled>(&self, id: u32) -> Arc<RoutesOf<F>> {
        self.live_policy::<F>()
            .ok()
            .and_then(|p| p.tables().get(&id).cloned())
            .unwrap_or_else(|| Arc::new(RoutesOf::compact()))
    }

    /// Applies `changes` to numbered table `id` of family `F` (a VRF's or another) as
    /// one change of the workers' policy, the table in its slot: what the Linux mirror
    /// does for a kernel table other than the one it mirrors into `main`.
    fn apply_to_table<F: Tabled>(
        &self,
        id: u32,
        changes: &[crate::control::RouteChangeOf<F>],
    ) -> Result<(usize, usize), String> {
        use crate::control::RouteChangeOf;
        if changes.is_empty() {
            return Ok((0, 0));
        }
        let _st = self.state();
        let mut next = (*self.live_table::<F>(id)).clone();
        let done = super::applied(changes, |c| match c {
            RouteChangeOf::Replace(r) => next.insert(r.clone()).map(|()| true),
            RouteChangeOf::Delete(p) => Ok(next.remove(*p).is_some()),
        })?;
        let next = Arc::new(next);
        self.change_policy::<F>(|p| p.with_table(id, next).map_err(|e| e.to_string()))?;
        Ok(done)
    }

    /// Numbered table `id` (IPv4) as the workers route by it.
    pub fn table_routes(&self, id: u32) -> Arc<RoutesOf<V4>> {
        self.live_table::<V4>(id)
    }

    /// Numbered table `id` (IPv6) as the workers route by it.
    pub fn table_routes6(&self, id: u32) -> Arc<RoutesOf<V6>> {
        self.live_table::<V6>(id)
    }

    /// Applies `changes` to numbered IPv4 table `id` (see [`Control::apply_routes`]
    /// for `main`).
    pub fn apply_table_routes(
        &self,
        id: u32,
        changes: &[crate::control::RouteChange],
    ) -> Result<(usize, usize), String> {
        self.apply_to_table::<V4>(id, changes)
    }

    /// Applies `changes` to numbered IPv6 table `id`.
    pub fn apply_table_routes6(
        &self,
        id: u32,
        changes: &[crate::control::RouteChange6],
    ) -> Result<(usize, usize), String> {
        self.apply_to_table::<V6>(id, changes)
    }
}

impl Control {
    /// Makes netbatch's VRFs `vrfs`, with the interfaces of `members` (netbatch
    /// interface, VRF name) in them and every other interface in `main`: what the Linux
    /// mirror does when the namespace's VRF devices or their members change
    /// (`[linux] vrfs`). The change is planned and applied as a reload's VRF part is
    /// (`Control::plan_tables`): an interface takes its connected and local routes
    /// with it, every VRF's table, old and new, is built again in its slot (routes the
    /// mirror had put in it come back with that table's next resync). Refused whole,
    /// changing nothing: a VRF named `main` or twice, a table Linux keeps (0, `default`,
    /// `main`, `local`) or two VRFs on one table, a member naming no VRF or an interface
    /// netbatch has not. Returns whether anything changed.
    pub fn set_kernel_vrfs(
        &self,
        vrfs: Vec<VrfConfig>,
        members: &[(u16, String)],
    ) -> Result<bool, String> {
        use netbatch_stack::route::rule::TABLE_DEFAULT;
        let mut st = self.state();
        let n = st.cfg.iface_names().len();
        for (i, v) in vrfs.iter().enumerate() {
            if v.name.is_empty() || v.name == "main" {
                return Err(format!("VRF '{}': not a usable VRF name", v.name));
            }
            if matches!(v.table, 0 | TABLE_DEFAULT | TABLE_MAIN | TABLE_LOCAL) {
                return Err(format!(
                    "VRF '{}': table {} is Linux's own",
                    v.name, v.table
                ));
            }
            if let Some(o) = vrfs[..i]
                .iter()
                .find(|o| o.name == v.name || o.table == v.table)
            {
                return Err(format!(
                    "VRFs '{}' and '{}' have the same name or table ({})",
                    o.name, v.name, v.table
                ));
            }
        }
        let mut iface_vrfs = vec![String::new(); n];
        for (i, name) in members {
            if !vrfs.iter().any(|v| &v.name == name) {
                return Err(format!("interface {i}: no VRF named '{name}'"));
            }
            let slot = iface_vrfs
                .get_mut(usize::from(*i))
                .ok_or_else(|| format!("no interface {i}"))?;
            slot.clone_from(name);
        }
        // Empty when every interface is main's, as the configuration has it.
        if iface_vrfs.iter().all(String::is_empty) {
            iface_vrfs.clear();
        }
        if st.cfg.vrfs == vrfs && st.cfg.iface_vrfs == iface_vrfs {
            return Ok(false);
        }
        let mut new = st.cfg.clone();
        new.vrfs = vrfs;
        new.iface_vrfs = iface_vrfs;
        let plan = self.plan_tables(&mut st, &mut new)?;
        let mut done = Vec::new();
        self.apply_tables(&mut st, plan, &new, &mut done)
            .map_err(|e| format!("stopped after {}: {e}", done.join(", ")))?;
        let names = new.iface_names();
        let what: Vec<String> = new
            .vrfs
            .iter()
            .map(|v| {
                let of: Vec<&str> = new
                    .iface_vrfs
                    .iter()
                    .zip(&names)
                    .filter(|(m, _)| **m == v.name)
                    .map(|(_, n)| n.as_str())
                    .collect();
                format!("{} (table {}: {})", v.name, v.table, of.join(" "))
            })
            .collect();
        tracing::info!(
            target: "netbatch::control",
            "VRFs from the kernel: {} ({})",
            if what.is_empty() { "none".to_string() } else { what.join(", ") },
            done.join(", ")
        );
        Ok(true)
    }
}
