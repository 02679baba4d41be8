//! The `loopr` binary. `loopr rpc` is what Neovim starts with `jobstart(..., {rpc = true})`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use loopr::agent::anthropic_from_env;
use loopr::bridge::{HostOptions, serve_neovim};
use loopr::store::loopr_home_from_env;

#[derive(Parser)]
#[command(
    name = "loopr",
    version,
    about = "Loopr: plans from a one-line request, for Neovim"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve Neovim over msgpack-RPC on stdin/stdout (started by the plugin).
    Rpc {
        /// Where to write the log.
        #[arg(long)]
        log_file: PathBuf,
        /// error, warn, info, debug or trace.
        #[arg(long, default_value = "info")]
        log_level: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Rpc {
            log_file,
            log_level,
        } => run_rpc(&log_file, &log_level),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // stderr, never stdout: stdout is the RPC channel.
            eprintln!("loopr: {err:#}");
            tracing::error!(error = %format!("{err:#}"), "host exited with an error");
            ExitCode::FAILURE
        }
    }
}

fn run_rpc(log_file: &std::path::Path, log_level: &str) -> anyhow::Result<()> {
    let _log_guard = loopr::logging::init(log_file, log_level)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        "host starting"
    );
    let loopr_home = loopr_home_from_env()
        .context("neither LOOPR_HOME nor HOME is set; set LOOPR_HOME to a writable directory")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve_neovim(HostOptions {
        loopr_home,
        provider_factory: anthropic_from_env(),
        test_hooks: std::env::var_os("LOOPR_TEST_HOOKS").is_some_and(|value| value == "1"),
    }))?;
    // Loops were cancelled when the channel closed; don't wait for in-flight HTTP to unwind.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    tracing::info!("host stopped");
    Ok(())
}
