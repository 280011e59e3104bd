//! `netbatch`: a listified userspace network datapath.
#![forbid(unsafe_code)]

mod bench;
mod check_config;
mod flood;
mod replay;
mod run;

use clap::{Parser, Subcommand};

/// A userspace network datapath that processes received packets a list at a time.
#[derive(Debug, Parser)]
#[command(name = "netbatch", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the benchmark scenarios (in-memory generator, no privileges needed).
    Bench(bench::Args),
    /// Receive every frame of a capture, write what is transmitted to a pcapng file.
    Replay(replay::Args),
    /// Serve on the configured interfaces until SIGINT or SIGTERM, then print counters.
    Run(run::Args),
    /// Validate a configuration file and explain each error with its key.
    CheckConfig(check_config::Args),
    /// Send a UDP flood on an interface through af_packet (a traffic source for routers).
    Flood(flood::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Bench(a) => bench::main(&a),
        Cmd::Replay(a) => replay::main(&a),
        Cmd::Run(a) => run::main(&a),
        Cmd::CheckConfig(a) => check_config::main(&a),
        Cmd::Flood(a) => flood::main(&a),
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
