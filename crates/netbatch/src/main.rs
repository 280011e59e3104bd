//! `netbatch`: a listified userspace network datapath.
#![forbid(unsafe_code)]

mod bench;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench(a) => bench::main(&a),
    }
}
