//! The operator's commands to a running `netbatch run`, through its control socket:
//! `show`, `clear`, `route`, `neigh`, `rule`, `reload`, `timing`, `trace`.
//!
//! The words after the command go to the datapath as typed; it answers with text for a
//! person (printed on stdout) and data for a program (`--json`). A refused command exits
//! non-zero with the datapath's reason on stderr.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use netbatch_runtime::config::{ControlConfig, SOCKET_DIR};
use netbatch_runtime::control::server::request;

/// Which running datapath to talk to.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Target {
    /// The control socket (default: the only one in /run/netbatch, or the one --config
    /// or --name gives).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// The datapath's configuration file (its socket is `[control] socket`, or
    /// `/run/netbatch/<file stem>.sock`).
    #[arg(long, global = true, conflicts_with = "socket")]
    config: Option<PathBuf>,
    /// The datapath's name (`/run/netbatch/<name>.sock`).
    #[arg(long, global = true, conflicts_with_all = ["socket", "config"])]
    name: Option<String>,
    /// Print the answer as JSON (for programs) instead of tables.
    #[arg(long, global = true)]
    json: bool,
}

impl Target {
    fn path(&self) -> anyhow::Result<PathBuf> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        if let Some(n) = &self.name {
            return Ok(Path::new(SOCKET_DIR).join(format!("{n}.sock")));
        }
        if let Some(c) = &self.config {
            let control = ControlConfig::read(c).map_err(|e| anyhow::anyhow!(e))?;
            return Ok(control.socket_path(c));
        }
        let found: Vec<PathBuf> = std::fs::read_dir(SOCKET_DIR)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                    .collect()
            })
            .unwrap_or_default();
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!(
                "no control socket in {SOCKET_DIR} (is `netbatch run` running? give --socket)"
            ),
            many => bail!(
                "several datapaths run here ({}): say which with --name, --config or --socket",
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// A command's words and where to send them.
#[derive(Debug, clap::Args)]
pub(crate) struct Words {
    /// The command's words (options may come before, between or after them).
    words: Vec<String>,
    #[command(flatten)]
    target: Target,
}

/// Sends `cmd` followed by the words; prints the answer.
pub(crate) fn main(cmd: &str, a: &Words) -> anyhow::Result<()> {
    let mut argv = vec![cmd.to_string()];
    argv.extend(a.words.iter().cloned());
    send(&argv, &a.target).map(drop)
}

fn send(argv: &[String], t: &Target) -> anyhow::Result<serde_json::Value> {
    let path = t.path()?;
    let r = request(&path, argv).map_err(|e| anyhow::anyhow!(e))?;
    if !r.ok {
        bail!("{}", r.text.trim_end());
    }
    if t.json {
        println!("{}", serde_json::to_string_pretty(&r.data)?);
    } else {
        print!("{}", r.text);
        if !r.text.is_empty() && !r.text.ends_with('\n') {
            println!();
        }
    }
    Ok(r.data)
}

/// `netbatch trace add|show|clear`, `show` optionally writing the traced packets as
/// pcapng with each packet's path as its comment.
#[derive(Debug, clap::Args)]
pub(crate) struct TraceArgs {
    /// add, show or clear.
    op: String,
    /// Packets to trace (per worker, as VPP's `trace add`).
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Only packets received on this port.
    #[arg(long)]
    port: Option<String>,
    /// Only packets matching this expression (the dissector's keys: `proto udp and dst
    /// 192.0.2.1 and dst port 53`; see `netbatch trace --help`).
    #[arg(long = "match")]
    matching: Option<String>,
    /// With `show`: also write the traced packets here (pcapng, paths as comments).
    #[arg(long)]
    pcapng: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
}

pub(crate) fn trace(a: &TraceArgs) -> anyhow::Result<()> {
    let mut argv = vec!["trace".to_string(), a.op.clone()];
    if a.op == "add" {
        argv.extend(["--count".into(), a.count.to_string()]);
        if let Some(p) = &a.port {
            argv.extend(["--port".into(), p.clone()]);
        }
        if let Some(m) = &a.matching {
            argv.extend(["--match".into(), m.clone()]);
        }
    }
    let data = send(&argv, &a.target)?;
    if let (Some(path), "show") = (&a.pcapng, a.op.as_str()) {
        let n = crate::trace_pcap::write(path, &data)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("{n} traced packet(s) written to {}", path.display());
    }
    Ok(())
}
