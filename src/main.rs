//! The `localpv` binary: one executable, one subcommand per component.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "localpv",
    version,
    about = "Local persistent volumes for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the kube-scheduler extender: filter and score nodes by free matching local PVs.
    Extender(localpv::extender::Options),
    /// Explain offline why a pod fits or not on each node of a dumped cluster.
    Explain(localpv::explain::Options),
}

fn run_extender(opts: localpv::extender::Options) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: failed to start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(localpv::extender::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_explain(opts: localpv::explain::Options) -> ExitCode {
    match localpv::explain::run(&opts) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {:#}", anyhow::Error::from(error));
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Extender(opts) => run_extender(opts),
        Command::Explain(opts) => run_explain(opts),
    }
}
