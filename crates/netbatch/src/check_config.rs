//! `netbatch check-config`: validates a configuration and explains each error with its key.
//!
//! The file first (every error at once: unknown keys with the key meant, wrong types,
//! the sections' checks), then what the command it is for needs (`--for`, `run` by
//! default): for `run`, live ports (not `pcap` or `gen`) and what this machine has, as
//! `netbatch run` checks it before starting (the same function: `Config::unfit_for`):
//! the ports' kernel interfaces (that they exist, with the MTU, queues and kind the
//! ports need) and the memory for the pool. `--offline` leaves the machine out, for a
//! configuration meant for another machine; `--for replay` checks the file for
//! `netbatch replay`, which takes any port kind.

use std::fmt::Write as _;
use std::path::PathBuf;

use netbatch_runtime::build;
use netbatch_runtime::config::{Config, ConfigErrors, Purpose};
use netbatch_stack::route::RouteKind;

/// Arguments of `netbatch check-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Configuration file.
    file: PathBuf,
    /// Check the file alone, not this machine's interfaces and memory (for a
    /// configuration meant for another machine).
    #[arg(long)]
    offline: bool,
    /// The command the file is for: `run` (live ports on this machine, as `netbatch
    /// run` checks before starting) or `replay` (any port kind; the machine is not
    /// asked).
    #[arg(long = "for", value_name = "COMMAND", default_value = "run", value_parser = ["run", "replay"])]
    purpose: String,
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    let cfg = match Config::load(&a.file) {
        Ok(c) => c,
        Err(e) => {
            eprint!("{e}");
            std::process::exit(1);
        }
    };
    let purpose = if a.purpose == "replay" {
        Purpose::Replay
    } else {
        Purpose::Run
    };
    let errors = cfg.unfit_for(purpose, !a.offline);
    if !errors.is_empty() {
        eprint!(
            "{}",
            ConfigErrors {
                file: a.file.display().to_string(),
                errors,
            }
        );
        // Every port in memory: the file was written for replay.
        let not_live = cfg.unfit_for(Purpose::Run, false).len();
        if purpose == Purpose::Run && not_live > 0 && not_live == cfg.ports.len() {
            eprintln!(
                "  (no port is live: the file is for `netbatch replay`; `netbatch check-config \
                 --for replay {}` checks it for that)",
                a.file.display()
            );
        }
        std::process::exit(1);
    }
    // Build the host too: route table limits and static neighbours are checked there.
    let host = match build::host(&cfg) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{}: routes and neighbours: {e}", a.file.display());
            std::process::exit(1);
        }
    };
    // Written at the end in one piece: a reader that goes away (`| head`) is no error.
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: ok for `netbatch {}`{}",
        a.file.display(),
        purpose.name(),
        match (purpose, a.offline) {
            (Purpose::Replay, _) => " (the file alone: replay takes any port kind)",
            (Purpose::Run, true) => " (the file alone: interfaces and memory not checked)",
            (Purpose::Run, false) => " (on this machine: interfaces and memory checked)",
        }
    );
    let _ = writeln!(
        o,
        "  datapath: {} mode, {} dispatch, burst {}, forwarding {}",
        cfg.mode.name(),
        cfg.dispatch.name(),
        cfg.burst,
        if cfg.host.forwarding { "on" } else { "off" }
    );
    fn list<T: ToString>(v: &[T]) -> String {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
    let _ = writeln!(
        o,
        "  workers: {}{}, rps {}",
        cfg.workers,
        if cfg.run.cores.is_empty() {
            ", not pinned".to_string()
        } else {
            format!(", on cores {}", list(&cfg.run.cores))
        },
        match &cfg.rps {
            None => "off".to_string(),
            Some(r) => format!(
                "{} (backlog {} packets per ring, rfs {})",
                r.policy.name(),
                r.max_backlog,
                if r.rfs_log > 0 { "on" } else { "off" }
            ),
        }
    );
    for p in &cfg.ports {
        let kind = &p.kind;
        let on = p.setup.features.names_on();
        let _ = writeln!(
            o,
            "  port {} ({kind}), mac {}, mtu {}, offloads: {}; received by worker(s) {}{}",
            p.setup.name,
            p.setup.mac,
            p.setup.mtu,
            if on.is_empty() {
                "none".to_string()
            } else {
                on.join(", ")
            },
            list(&p.rx_workers),
            if p.rps_map.is_empty() {
                String::new()
            } else {
                format!(", rps map {}", list(&p.rps_map))
            }
        );
    }
    for i in &host.ifaces {
        let addrs: Vec<String> = i
            .addrs
            .iter()
            .map(ToString::to_string)
            .chain(i.addrs6.iter().map(ToString::to_string))
            .collect();
        let _ = writeln!(
            o,
            "  interface {}: {}; IPv6 link-local {}",
            i.name,
            if addrs.is_empty() {
                "no address".into()
            } else {
                addrs.join(", ")
            },
            i.ll6
        );
    }
    let mut kinds = [0usize; 7];
    for r in host.routes.iter() {
        kinds[r.kind as usize] += 1;
    }
    let mut kinds6 = [0usize; 7];
    for r in host.routes6.iter() {
        kinds6[r.kind as usize] += 1;
    }
    let _ = writeln!(
        o,
        "  routes: {} ({} unicast, {} local, {} broadcast, {} blackhole, {} unreachable, {} prohibit); FIB {} MiB",
        host.routes.len(),
        kinds[RouteKind::Unicast as usize],
        kinds[RouteKind::Local as usize],
        kinds[RouteKind::Broadcast as usize],
        kinds[RouteKind::Blackhole as usize],
        kinds[RouteKind::Unreachable as usize],
        kinds[RouteKind::Prohibit as usize],
        host.routes.fib_bytes() >> 20
    );
    let _ = writeln!(
        o,
        "  IPv6 routes: {} ({} unicast, {} local, {} blackhole, {} unreachable, {} prohibit); FIB {} KiB",
        host.routes6.len(),
        kinds6[RouteKind::Unicast as usize],
        kinds6[RouteKind::Local as usize],
        kinds6[RouteKind::Blackhole as usize],
        kinds6[RouteKind::Unreachable as usize],
        kinds6[RouteKind::Prohibit as usize],
        host.routes6.fib_bytes() >> 10
    );
    // Policy routing: each rule in `ip rule` form, and the numbered tables' sizes.
    let names = |i: u16| {
        host.ifaces
            .get(usize::from(i))
            .map_or_else(|| format!("#{i}"), |f| f.name.clone())
    };
    for (ip, custom, rules, tables) in [
        (
            "",
            !host.policy.rules().is_default(),
            host.policy
                .rules()
                .iter()
                .map(|r| r.describe(names))
                .collect::<Vec<_>>(),
            host.policy
                .tables()
                .iter()
                .map(|(id, t)| (*id, t.len()))
                .collect::<Vec<_>>(),
        ),
        (
            "IPv6 ",
            !host.policy6.rules().is_default(),
            host.policy6
                .rules()
                .iter()
                .map(|r| r.describe(names))
                .collect(),
            host.policy6
                .tables()
                .iter()
                .map(|(id, t)| (*id, t.len()))
                .collect(),
        ),
    ] {
        // Linux's default rules alone, and no table: nothing to say.
        if custom || !tables.is_empty() {
            let _ = writeln!(o, "  {ip}policy rules:");
            for r in &rules {
                let _ = writeln!(o, "    {}", r.replace('\t', " "));
            }
            // A VRF's table is listed with its VRF, below.
            for (id, n) in tables
                .into_iter()
                .filter(|(id, _)| cfg.vrf_name(*id).is_none())
            {
                let _ = writeln!(o, "  {ip}table {id}: {n} routes");
            }
        }
    }
    // VRFs: each with its table, interfaces and routes (the interfaces' own included).
    for v in &cfg.vrfs {
        let ifaces: Vec<String> = cfg
            .iface_tables()
            .iter()
            .zip(0u16..)
            .filter(|(t, _)| **t == v.table)
            .map(|(_, i)| names(i))
            .collect();
        let count = |t: Option<usize>| t.map_or(0, |n| n);
        let n4 = count(host.policy.tables().get(&v.table).map(|t| t.len()));
        let n6 = count(host.policy6.tables().get(&v.table).map(|t| t.len()));
        let _ = writeln!(
            o,
            "  vrf {} table {}: interfaces {}; {n4} IPv4 and {n6} IPv6 routes",
            v.name,
            v.table,
            if ifaces.is_empty() {
                "none".to_string()
            } else {
                ifaces.join(", ")
            }
        );
    }
    for (hook, chain) in &cfg.graph.chains {
        let _ = writeln!(
            o,
            "  filter {hook}: {} rule(s), policy {:?}",
            chain.rules.len(),
            chain.policy
        );
    }
    if let Some(c) = &cfg.graph.classifier {
        let chains: std::collections::BTreeSet<u32> = c.filters().iter().map(|f| f.chain).collect();
        for ch in chains {
            let n = c.filters().iter().filter(|f| f.chain == ch).count();
            let _ = writeln!(
                o,
                "  classifier chain {ch}: {n} filter(s) over {} mask(s)",
                c.groups(ch)
            );
        }
    }
    let _ = writeln!(
        o,
        "  static neighbours: {} IPv4, {} IPv6; apps: {}",
        cfg.neighbours.len(),
        cfg.neighbours6.len(),
        cfg.apps.len()
    );
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), o.as_bytes());
    Ok(())
}
