//! `netbatch lab up|down`: a router and two hosts in network namespaces, to try netbatch
//! on (and for the quick start): the kernel's namespaces and veth pairs, dual-stack, with
//! documentation addresses only (RFC 5737, RFC 3849).
//!
//! ```text
//!  NAME-h1                      NAME-r (netbatch serves here)                NAME-h2
//!  eth0 ──── veth ──── veth-lan [ lan  netbatch  wan ] veth-wan ──── veth ──── eth0
//!  192.0.2.2/24              192.0.2.1/24      198.51.100.1/24              198.51.100.2/24
//!  2001:db8:1::2/64          2001:db8:1::1/64  2001:db8:2::1/64             2001:db8:2::2/64
//! ```
//!
//! The hosts' kernels route through the router's addresses (default routes of both
//! families). In `NAME-r` the kernel keeps no address on the veth ends and IPv6 off on
//! them (`disable_ipv6`, and the namespace's `default` so that they are made so): two
//! stacks answering for one link, the kernel's neighbour discovery beside netbatch's,
//! would confuse the hosts. `lo` is up in every namespace (netbatch's `/metrics` listens
//! on the router namespace's 127.0.0.1). `lab up` writes the router's configuration
//! (the shipped `examples/live-router.toml`, built into the binary) to
//! `/run/netbatch-lab/NAME.toml`: its file stem names the control socket, so
//! `netbatch show --name NAME` finds it. `lab down` stops what runs in the lab's
//! namespaces (SIGTERM: netbatch prints its counters), deletes the namespaces (their
//! veth pairs go with them) and the configuration.
//!
//! The namespaces and links are made with iproute2's `ip`, each command printed as it
//! runs; a failure stops `lab up` and undoes what it made.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The router's configuration: the shipped dual-stack example, the same file.
pub(crate) const ROUTER_TOML: &str = include_str!("../../../examples/live-router.toml");

/// Where `lab up` writes the router's configuration.
pub(crate) const LAB_DIR: &str = "/run/netbatch-lab";

/// The lab's name when none is given.
const DEFAULT_NAME: &str = "nblab";

/// Arguments of `netbatch lab`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// up: make the namespaces, links and addresses and write the router's
    /// configuration; down: stop what runs in them and remove them.
    #[arg(value_parser = ["up", "down"])]
    op: String,
    /// The lab's name: its namespaces are NAME-h1, NAME-r and NAME-h2, its configuration
    /// /run/netbatch-lab/NAME.toml (its control socket /run/netbatch/NAME.sock).
    #[arg(long, default_value = DEFAULT_NAME, value_parser = lab_name)]
    name: String,
}

/// A lab name: short enough for namespace names, made of what `ip netns` takes.
fn lab_name(s: &str) -> Result<String, String> {
    if s.is_empty()
        || s.len() > 24
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "'{s}': 1 to 24 letters, digits, '-' or '_' (it names namespaces and a file)"
        ));
    }
    Ok(s.to_string())
}

/// The lab's namespaces, hosts first.
fn namespaces(name: &str) -> [String; 3] {
    [
        format!("{name}-h1"),
        format!("{name}-r"),
        format!("{name}-h2"),
    ]
}

/// The router configuration's path.
pub(crate) fn config_path(name: &str) -> PathBuf {
    Path::new(LAB_DIR).join(format!("{name}.toml"))
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    if !netbatch_ports::sys::is_root() {
        bail!("netbatch lab makes network namespaces: run it as root (sudo)");
    }
    match a.op.as_str() {
        "up" => up(&a.name),
        _ => down(&a.name),
    }
}

/// Runs `ip ARGS`, printing the command; fails with its error output.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    eprintln!("+ ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2): is it installed?")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Sets sysctl `key` (a path under /proc/sys/net) to `value` inside namespace `ns`.
fn sysctl(ns: &str, key: &str, value: &str) -> anyhow::Result<()> {
    eprintln!(
        "+ ip netns exec {ns} sysctl -w {}={value}",
        key.replace('/', ".")
    );
    let path = Path::new("/run/netns").join(ns);
    let file = Path::new("/proc/sys/net").join(key);
    let value = value.to_string();
    // /proc/sys/net shows the opening thread's namespace: a thread of its own enters it.
    std::thread::spawn(move || -> std::io::Result<()> {
        netbatch_ports::sys::enter_netns(&path)?;
        std::fs::write(&file, value)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the sysctl thread panicked"))?
    .with_context(|| format!("setting net.{} in {ns}", key.replace('/', ".")))
}

fn up(name: &str) -> anyhow::Result<()> {
    let ns = namespaces(name);
    if let Some(n) = ns.iter().find(|n| Path::new("/run/netns").join(n).exists()) {
        bail!(
            "namespace {n} exists: the lab '{name}' is up (`netbatch lab down --name {name}` first)"
        );
    }
    let r = build(name, &ns);
    if let Err(e) = r {
        // Nothing half made is left behind.
        let _ = remove(name, &ns, false);
        return Err(e);
    }
    let cfg = config_path(name);
    std::fs::create_dir_all(LAB_DIR).with_context(|| format!("creating {LAB_DIR}"))?;
    std::fs::write(&cfg, ROUTER_TOML).with_context(|| format!("writing {}", cfg.display()))?;
    let [h1, r, h2] = &ns;
    println!(
        "lab '{name}' is up: {h1} (192.0.2.2, 2001:db8:1::2) -- {r} -- {h2} (198.51.100.2, 2001:db8:2::2)
router configuration: {cfg}
  serve it:      ip netns exec {r} netbatch run {cfg}
  ping through:  ip netns exec {h1} ping 198.51.100.2; ip netns exec {h1} ping 2001:db8:2::2
  look at it:    netbatch show ports --name {name}; ip netns exec {r} curl -s http://127.0.0.1:9433/metrics
  remove it:     netbatch lab down --name {name}",
        cfg = cfg.display()
    );
    Ok(())
}

/// Makes the namespaces, the two veth pairs, the addresses and routes.
fn build(_name: &str, ns: &[String; 3]) -> anyhow::Result<()> {
    let [h1, r, h2] = ns;
    for n in ns {
        ip(&["netns", "add", n])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    // The router's kernel: IPv6 off on the links netbatch serves (made so from the start).
    sysctl(r, "ipv6/conf/default/disable_ipv6", "1")?;
    for (host, end, mine, gw, mine6, gw6) in [
        (
            h1,
            "veth-lan",
            "192.0.2.2/24",
            "192.0.2.1",
            "2001:db8:1::2/64",
            "2001:db8:1::1",
        ),
        (
            h2,
            "veth-wan",
            "198.51.100.2/24",
            "198.51.100.1",
            "2001:db8:2::2/64",
            "2001:db8:2::1",
        ),
    ] {
        ip(&[
            "link", "add", "eth0", "netns", host, "type", "veth", "peer", "name", end, "netns", r,
        ])?;
        sysctl(r, &format!("ipv6/conf/{end}/disable_ipv6"), "1")?;
        ip(&["-n", r, "link", "set", end, "up"])?;
        // The host's address usable at once: no duplicate address detection to wait for.
        sysctl(host, "ipv6/conf/eth0/accept_dad", "0")?;
        ip(&["-n", host, "addr", "add", mine, "dev", "eth0"])?;
        ip(&[
            "-n", host, "-6", "addr", "add", mine6, "dev", "eth0", "nodad",
        ])?;
        ip(&["-n", host, "link", "set", "eth0", "up"])?;
        ip(&["-n", host, "route", "add", "default", "via", gw])?;
        ip(&["-n", host, "-6", "route", "add", "default", "via", gw6])?;
    }
    Ok(())
}

fn down(name: &str) -> anyhow::Result<()> {
    let ns = namespaces(name);
    let any = ns.iter().any(|n| Path::new("/run/netns").join(n).exists());
    let cfg = config_path(name);
    if !any && !cfg.exists() {
        bail!(
            "no lab '{name}' here (no namespace {}, no {})",
            ns[1],
            cfg.display()
        );
    }
    remove(name, &ns, true)?;
    println!("lab '{name}' is down");
    Ok(())
}

/// The processes whose network namespace is the one of file `path`.
fn pids_in(path: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let want = (m.dev(), m.ino());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|n| (n.dev(), n.ino()) == want)
        })
        .collect()
}

/// Stops what runs in the namespaces (SIGTERM, then after 5 s SIGKILL), deletes them
/// and the configuration. Goes on past failures, reporting the first.
fn remove(name: &str, ns: &[String; 3], stop: bool) -> anyhow::Result<()> {
    let mut first: Option<anyhow::Error> = None;
    if stop {
        let paths: Vec<PathBuf> = ns.iter().map(|n| Path::new("/run/netns").join(n)).collect();
        let running =
            |paths: &[PathBuf]| -> Vec<u32> { paths.iter().flat_map(|p| pids_in(p)).collect() };
        let pids = running(&paths);
        for &pid in &pids {
            eprintln!("+ kill -TERM {pid}  # {}", comm(pid));
            signal(pid, "TERM");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running(&paths).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in running(&paths) {
            eprintln!("+ kill -KILL {pid}  # {} did not stop in 5 s", comm(pid));
            signal(pid, "KILL");
        }
    }
    for n in ns.iter().rev() {
        if Path::new("/run/netns").join(n).exists()
            && let Err(e) = ip(&["netns", "del", n])
        {
            first.get_or_insert(e);
        }
    }
    let cfg = config_path(name);
    if cfg.exists()
        && let Err(e) = std::fs::remove_file(&cfg)
    {
        first.get_or_insert(anyhow::anyhow!("removing {}: {e}", cfg.display()));
    }
    first.map_or(Ok(()), Err)
}

/// Sends signal `sig` to `pid` (the shell's `kill`, which every system has).
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status();
}

/// A process's command name, for the log.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_are_checked() {
        assert_eq!(lab_name("nblab"), Ok("nblab".into()));
        assert!(lab_name("a b").is_err());
        assert!(lab_name("").is_err());
        assert!(lab_name(&"x".repeat(25)).is_err());
        assert_eq!(namespaces("t")[1], "t-r");
        assert_eq!(config_path("t"), Path::new("/run/netbatch-lab/t.toml"));
    }

    /// The configuration the lab serves is the shipped example, valid for `run` (the file
    /// alone: this machine has no lab), dual-stack on the interfaces the lab makes.
    #[test]
    fn the_lab_serves_the_shipped_dual_stack_example() {
        let cfg = netbatch_runtime::config::Config::parse(ROUTER_TOML, Path::new("."), "lab")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            cfg.unfit_for(netbatch_runtime::config::Purpose::Run, false)
                .is_empty()
        );
        let names: Vec<Option<&str>> = cfg.ports.iter().map(|p| p.kind.interface()).collect();
        assert_eq!(names, [Some("veth-lan"), Some("veth-wan")]);
        assert!(
            cfg.ports.iter().all(|p| !p.setup.addrs6.is_empty()),
            "IPv6 on both ports"
        );
        assert_eq!(
            cfg.control.metrics.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:9433")
        );
    }
}
