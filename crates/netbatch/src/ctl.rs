//! The operator's commands to a running `netbatch run`, through its control socket:
//! `show`, `clear`, `route`, `neigh`, `rule`, `reload`, `timing`, `trace`, `conntrack`.
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

/// The grammar of `trace add --match`, for `netbatch trace --help` (the parser is
/// `netbatch_stack::trace::Match`; docs/operating.md says the same).
pub(crate) const MATCH_GRAMMAR: &str = "\
--match EXPR: which received frames to trace, tcpdump-like (a subset). EXPR is one or
more TERMs joined by `and` (or `&&`); each may be preceded by `not` (or `!`). All must
hold. There is no `or` and there are no parentheses.
  TERM := proto NAME|N     IP protocol: udp, tcp, icmp, icmp6, sctp, udplite or 0-255
                           (IPv6: the upper layer's, after the extension headers)
        | udp | tcp | icmp | icmp6 | sctp | udplite      (the same, bare)
        | src ADDR|PREFIX  source address (also `src host ADDR`, `src net PREFIX`)
        | dst ADDR|PREFIX  destination address (`dst host`, `dst net` too)
        | host ADDR        source or destination address
        | net PREFIX       source or destination address in PREFIX
        | src port N | dst port N | port N     (port: either; 0-65535)
  ADDR is an IPv4 or IPv6 address; PREFIX is ADDR/LEN with no host bits set
  (192.0.2.0/24, 2001:db8::/32). An address term matches its own family only. A port
  term matches only packets with ports (TCP, UDP, SCTP, UDP-Lite; not a later
  fragment). A frame without an IP header the dissector could locate (ARP, a cut
  header) matches no term, and so every `not TERM`.
Examples:
  netbatch trace add --count 5 --match 'icmp'
  netbatch trace add --count 20 --port lan --match 'udp and dst port 53 and not src 192.0.2.7'
  netbatch trace add --match 'icmp6 and host 2001:db8:2::2'
  netbatch trace show --pcapng trace.pcapng     (each packet's path as its comment)
A refused expression names the word the parser stopped at: `at 'or': expected 'and'
between terms`.";

/// `netbatch trace add|show|clear`, `show` optionally writing the traced packets as
/// pcapng with each packet's path as its comment.
#[derive(Debug, clap::Args)]
#[command(after_long_help = MATCH_GRAMMAR, after_help = "The --match grammar: see --help.")]
pub(crate) struct TraceArgs {
    /// add, show or clear.
    op: String,
    /// Packets to trace (per worker, as VPP's `trace add`).
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Only packets received on this port.
    #[arg(long)]
    port: Option<String>,
    /// Only packets matching this expression: terms over the dissector's keys joined by
    /// `and`, each optionally negated with `not` (`udp and dst 192.0.2.1 and dst port
    /// 53`); the grammar is under `netbatch trace --help`.
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

#[cfg(test)]
mod tests {
    use super::MATCH_GRAMMAR;
    use netbatch_stack::trace::Match;

    /// The help's examples are expressions the parser takes, and what the help says the
    /// parser refuses it refuses with the words quoted: the help cannot drift from
    /// `netbatch_stack::trace::Match`.
    #[test]
    fn the_match_grammar_in_the_help_is_the_parsers() {
        let examples: Vec<&str> = MATCH_GRAMMAR
            .lines()
            .filter_map(|l| l.split("--match '").nth(1))
            .filter_map(|rest| rest.split('\'').next())
            .collect();
        assert_eq!(examples.len(), 3, "{examples:?}");
        for e in &examples {
            e.parse::<Match>()
                .unwrap_or_else(|err| panic!("{e}: {err}"));
        }
        for term in [
            "proto 17",
            "udplite",
            "sctp",
            "src host 192.0.2.1",
            "src net 192.0.2.0/24",
            "dst 2001:db8::/32",
            "net 2001:db8::/32",
            "src port 7",
            "port 7",
            "! udp && not tcp",
        ] {
            assert!(term.parse::<Match>().is_ok(), "{term}");
        }
        let refused = "udp or tcp".parse::<Match>().unwrap_err().to_string();
        let words = MATCH_GRAMMAR
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            words.contains(&format!("`{refused}`")),
            "the help quotes «{refused}»"
        );
    }
}
