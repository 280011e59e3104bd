//! `netbatch`: a listified userspace network datapath.
#![forbid(unsafe_code)]

mod bench;
mod check_config;
mod ctl;
mod flood;
mod generate;
mod lab;
mod replay;
mod run;
mod trace_pcap;

use clap::{Parser, Subcommand};

/// A userspace network datapath that processes received packets a list at a time.
#[derive(Debug, Parser)]
#[command(
    name = "netbatch",
    version,
    about,
    long_about = "A userspace network datapath for Linux that processes received packets \
                  a list at a time through every stage (listified receive), with a \
                  per-packet twin of the same stage code. `netbatch run CONFIG` serves \
                  on real interfaces; `show`, `route`, `trace`... talk to it through its \
                  control socket; `bench` measures; `lab up` builds namespaces to try it \
                  in.",
    after_help = "Files: /etc/netbatch/*.toml (configurations; docs/configuration.md), \
                  /run/netbatch/NAME.sock (control sockets)."
)]
pub(crate) struct Cli {
    /// More log detail on stderr (-v debug, -vv trace); RUST_LOG (as the `tracing`
    /// crate's filters: `netbatch=debug`) overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log on stderr (warnings and errors only).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Log lines as text (for a person) or as JSON objects, one a line (for a log
    /// collector: `timestamp`, `level`, `target`, `fields.message`).
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the benchmark scenarios (in-memory generator, no privileges needed).
    Bench(bench::Args),
    /// Receive every frame of a capture, write what is transmitted to a pcapng file.
    Replay(replay::Args),
    /// Serve on the configured interfaces until SIGINT or SIGTERM (SIGHUP reloads the
    /// configuration, SIGUSR1 logs the counters), then print counters.
    Run(run::Args),
    /// Validate a configuration file and explain each error with its key.
    CheckConfig(check_config::Args),
    /// Send a UDP flood on an interface through af_packet or af_xdp (a traffic source for
    /// routers).
    Flood(flood::Args),
    /// Show a running datapath's tables: runtime, errors, ports, routes, neigh, rules,
    /// sockets, softnet, counters, conntrack (`show conntrack [proto P] [src A] [dst A]
    /// [sport N] [dport N] [state S] [mark V[/M]]`, as `conntrack -L` lists).
    Show(ctl::Words),
    /// The connection tables: `conntrack flush [FILTER...]` (the filters of
    /// `show conntrack`) deletes the entries it selects, as `conntrack -F`/`-D`.
    Conntrack(ctl::Words),
    /// Clear a running datapath's counters (`clear counters`; `show` counts from then).
    Clear(ctl::Words),
    /// Change a running datapath's routes: `route add|replace|del` and an `ip route` line
    /// (or an `ip -6 route` one: `route add 2001:db8::/32 via fe80::1 dev eth1`).
    Route(ctl::Words),
    /// Change a running datapath's neighbours: `neigh add|replace ADDR lladdr MAC dev IF`,
    /// `neigh del ADDR dev IF` (ADDR IPv4 or IPv6).
    Neigh(ctl::Words),
    /// Change a running datapath's filter rules: `rule add HOOK [index N] KEY VALUE...`
    /// (the keys of `[[filter.HOOK.rule]]`), `rule del HOOK N`; or its policy routing
    /// rules, as `ip rule` writes them: `rule add|del [-6] [pref N] [from P] [to P]
    /// [iif DEV] [fwmark V/M] [ipproto P] [sport R] [dport R] [tos T] lookup T|goto N|
    /// blackhole|unreachable|prohibit|nop [suppress_prefixlength N]`.
    Rule(ctl::Words),
    /// Make a running datapath re-read its configuration file (as SIGHUP does): what can
    /// change live is applied, or the whole reload is refused with the keys and reasons.
    Reload(ctl::Words),
    /// Per-stage TSC timing of a running datapath (`timing on|off`; `show runtime`).
    Timing(ctl::Words),
    /// The mirrored kernel routing table (`[linux]`): `linux resync` dumps it again and
    /// applies the difference.
    Linux(ctl::Words),
    /// Trace packets through a running datapath: `trace add --count N [--port P]
    /// [--match EXPR]`, `trace show [--pcapng FILE]`, `trace clear` (`--help`: the
    /// match grammar).
    Trace(ctl::TraceArgs),
    /// Build (`up`) or remove (`down`) a router namespace between two host namespaces,
    /// dual-stack, to try netbatch in (root).
    Lab(lab::Args),
    /// Write the man pages or the shell completions (for packaging).
    #[command(hide = true)]
    Generate(generate::Args),
}

/// Logs go to stderr, at the level `-v`/`-q` or `RUST_LOG` asks for, as text or as
/// JSON lines (`--log-format json`).
fn init_logs(verbose: u8, quiet: bool, json: bool) {
    use tracing_subscriber::EnvFilter;
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        logs.json().with_current_span(false).try_init()
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
    };
}

/// Whether this processor runs the code the build made: `.cargo/config.toml` lets the
/// compiler use POPCNT on x86-64, and a processor without it would stop at the first
/// use with an illegal instruction instead of a message.
fn cpu_supported() -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "popcnt"))]
    if !std::arch::is_x86_feature_detected!("popcnt") {
        eprintln!(
            "netbatch: this build needs a processor with the POPCNT instruction (x86-64 \
             since 2008); rebuild without `target-feature=+popcnt` in .cargo/config.toml"
        );
        return false;
    }
    true
}

fn main() -> std::process::ExitCode {
    if !cpu_supported() {
        return std::process::ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    init_logs(cli.verbose, cli.quiet, cli.log_format == "json");
    let r = match cli.cmd {
        Cmd::Bench(a) => bench::main(&a),
        Cmd::Replay(a) => replay::main(&a),
        Cmd::Run(a) => run::main(&a),
        Cmd::CheckConfig(a) => check_config::main(&a),
        Cmd::Flood(a) => flood::main(&a),
        Cmd::Show(a) => ctl::main("show", &a),
        Cmd::Conntrack(a) => ctl::main("conntrack", &a),
        Cmd::Clear(a) => ctl::main("clear", &a),
        Cmd::Route(a) => ctl::main("route", &a),
        Cmd::Neigh(a) => ctl::main("neigh", &a),
        Cmd::Rule(a) => ctl::main("rule", &a),
        Cmd::Reload(a) => ctl::main("reload", &a),
        Cmd::Timing(a) => ctl::main("timing", &a),
        Cmd::Linux(a) => ctl::main("linux", &a),
        Cmd::Trace(a) => ctl::trace(&a),
        Cmd::Lab(a) => lab::main(&a),
        Cmd::Generate(a) => generate::main(&a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The error and its causes on one line; no backtrace (they are for bugs).
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
