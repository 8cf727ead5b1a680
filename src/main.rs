//! The `localpv` binary: one executable, one subcommand per component.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Run the node agent: publish local disks as PVs, wipe and recycle released volumes.
    #[cfg(feature = "node")]
    Node(localpv::agent::Options),
    /// Serve the kube-scheduler extender: filter and score nodes by free matching local PVs.
    // NB: boxed: its flags outgrew the other variants (clippy's large_enum_variant).
    Extender(Box<localpv::extender::Options>),
    /// Explain offline why a pod fits or not on each node of a dumped cluster.
    Explain(localpv::explain::Options),
    /// Print the LocalDisk CustomResourceDefinition as YAML.
    Crd,
    /// List the disks the node agents found, on every node (also `kubectl localpv disks`).
    Disks(localpv::disks_cli::Options),
}

/// Runs one async component to completion on a multi-threaded runtime.
fn run_async(fut: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
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
    match runtime.block_on(fut) {
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

/// Logs to stderr; `RUST_LOG` overrides the default `info` level, `LOCALPV_LOG_FORMAT=json` switches to JSON.
/// Colours only on a terminal, and never with `NO_COLOR` set (<https://no-color.org>): a pod's log is a pipe.
fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("LOCALPV_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn run_crd() -> ExitCode {
    match localpv::inventory::crd_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: failed to serialise the CRD: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_disks(opts: localpv::disks_cli::Options) -> ExitCode {
    run_async(async move {
        print!("{}", localpv::disks_cli::run(&opts).await?);
        Ok(())
    })
}

/// Installed as `kubectl-localpv`, kubectl runs us for `kubectl localpv ...` with the same arguments; only the
/// name shown in help and errors changes.
fn parse_cli() -> Cli {
    let plugin = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|argv0| argv0.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|name| name.ends_with("kubectl-localpv"));
    let mut command = Cli::command();
    if plugin {
        command = command.bin_name("kubectl localpv");
    }
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|error| error.exit())
}

fn main() -> ExitCode {
    let cli = parse_cli();
    init_tracing();
    match cli.command {
        #[cfg(feature = "node")]
        Command::Node(opts) => run_async(localpv::agent::run(opts)),
        Command::Extender(opts) => run_async(localpv::extender::run(*opts)),
        Command::Explain(opts) => run_explain(opts),
        Command::Crd => run_crd(),
        Command::Disks(opts) => run_disks(opts),
    }
}
