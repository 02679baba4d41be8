//! The `loopr` binary. `loopr rpc` is what Neovim starts with `jobstart(..., {rpc = true})`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use loopr::agent::{LoopSettings, provider_factory};
use loopr::bridge::{HostOptions, serve_neovim};
use loopr::cli::Restoring;
use loopr::llm::{ProviderEnv, SharedEnv};
use loopr::store::loopr_home_from_env;

#[derive(Parser)]
#[command(
    name = "loopr",
    version = loopr::bridge::VERSION_LINE,
    about = "Loopr: plans from a one-line request, for Neovim"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan a change without Neovim: progress on stderr, a summary table on stdout. Exits 0
    /// when every loop completed.
    Plan {
        /// The change to plan, e.g. "Add a --version flag".
        task: String,
        /// Approve every artifact that waits for review, so specs and phases follow.
        #[arg(long)]
        approve_all: bool,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Settings as JSON, with the keys of `require('loopr').setup` that reach the host,
        /// e.g. '{"model": "claude-sonnet-4-5", "max_turns": 10}'.
        #[arg(long, default_value = "{}")]
        settings: String,
        /// Where to write the log (default: no log).
        #[arg(long)]
        log_file: Option<PathBuf>,
        #[arg(long, default_value = "info")]
        log_level: String,
    },
    /// Implement a phase without Neovim: a code loop edits the project and runs the phase's
    /// validation command until it passes. Exits 0 when it does. Given a plan or spec, runs
    /// every phase of it in order, one code loop at a time; exits 0 when all are done.
    Run {
        /// The phase, spec or plan name (or its loop id), as `loopr status` lists it.
        phase: String,
        /// Accept every write, edit, command and fetch without asking (nobody can be asked here).
        #[arg(long)]
        yes: bool,
        /// With --yes, also run commands where no sandbox confines them (refused otherwise).
        #[arg(long)]
        unsandboxed: bool,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Settings as JSON, as for `loopr plan`.
        #[arg(long, default_value = "{}")]
        settings: String,
        /// Have this coding agent of the settings' `agents` write the code, for this run (in
        /// place of `code_agent`); its loops keep it when resumed or retried.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// Verify the working tree against a phase or spec without Neovim, changing nothing: the
    /// findings go to stdout as `file:line: severity: message`. Exits 0 when it passes, 1
    /// when it does not, 2 when it cannot run or finish (130/143 on a signal).
    Verify {
        /// The phase or spec name (or loop id), as `loopr status` lists it.
        name: String,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Settings as JSON, as for `loopr plan`.
        #[arg(long, default_value = "{}")]
        settings: String,
    },
    /// Resume the unfinished loops of a project (after a crash) without Neovim, until nothing
    /// can move. Exits 0 when every loop it resumed (and what they started) completed.
    Resume {
        /// Approve every artifact that waits for review.
        #[arg(long)]
        approve_all: bool,
        /// Accept every change resumed code loops make.
        #[arg(long)]
        yes: bool,
        /// With --yes, also run commands where no sandbox confines them (refused otherwise).
        #[arg(long)]
        unsandboxed: bool,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Settings as JSON, as for `loopr plan`; only `mcp` matters: the loops' MCP servers
        /// get their `env` values from it (loops keep only the names).
        #[arg(long, default_value = "{}")]
        settings: String,
    },
    /// Cancel a loop and every active loop below it, as :LooprCancel does: one no host runs
    /// (waiting, or interrupted) ends at once, one another host runs is stopped by that host.
    Cancel {
        /// The loop's id (`loopr status` lists them).
        id: String,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Put the working tree back as it was before a phase: what its code
    /// loop and every later one changed goes back (from the git checkpoint taken when the
    /// phase's code loop started, else the baselines); files changed since stay unless
    /// --force.
    Rewind {
        /// The phase (a name, spec/phase, or its code loop's id).
        id: String,
        /// Also restore files changed since a loop changed them.
        #[arg(long)]
        force: bool,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Undo what a phase's newest code loop changed, or its rewind when the phase was
    /// rewound; files changed since stay unless --force.
    Undo {
        /// The phase (a name, spec/phase, or its code loop's id).
        id: String,
        /// Also restore files changed since.
        #[arg(long)]
        force: bool,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Exit 0 when the project has Loopr state (its database under $LOOPR_HOME), 1 when it
    /// has none, 2 on error. Creates nothing; the plugin asks this at startup so that it
    /// starts no host in projects Loopr was never used in.
    HasState {
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Say which sandbox commands run in here (exit 0), or why there is none and how to get
    /// one (exit 1); `:checkhealth loopr` asks this.
    Sandbox {
        /// Settings as JSON, as for `loopr plan` (only `sandbox` matters).
        #[arg(long, default_value = "{}")]
        settings: String,
    },
    /// Print a loop's transcript as its journal holds it (markdown, as `:LooprTranscript`
    /// shows it).
    Transcript {
        /// The loop's id (`loopr status` lists them).
        id: String,
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Print the loops of a project, with their tokens and estimated cost.
    Status {
        /// The project root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Settings as JSON, as for `loopr plan` (only `prices` matters; without it each
        /// loop is priced as it started).
        #[arg(long)]
        settings: Option<String>,
    },
    /// Run one command in the Landlock sandbox (the host starts this; see `loopr sandbox`).
    #[command(hide = true)]
    SandboxExec {
        /// The host: the command dies with it.
        #[arg(long)]
        parent_pid: i32,
        /// The project root (writable).
        #[arg(long)]
        root: PathBuf,
        /// Where the command starts.
        #[arg(long)]
        cwd: PathBuf,
        /// More paths the command may write.
        #[arg(long)]
        writable: Vec<PathBuf>,
        /// Paths kept read-only inside the writable ones (`.git`, the state directory).
        #[arg(long)]
        read_only: Vec<PathBuf>,
        #[arg(long)]
        network: bool,
        /// The command, run with `sh -c`.
        #[arg(last = true, required = true)]
        shell_command: String,
    },
    /// Write the files generated from the settings' definitions (Lua option table and types,
    /// the help's options section); with --check, write nothing and fail while one is stale.
    #[command(hide = true)]
    Generate {
        /// Only report stale files (exit 1 when there are any).
        #[arg(long)]
        check: bool,
        /// The repository's root (default: the current directory).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
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

/// `loopr generate`: writes the generated files, or with `check` names the stale ones.
fn run_generate(check: bool, root: &std::path::Path) -> ExitCode {
    use loopr::bridge::generate;
    let outcome = if check {
        generate::stale(root)
    } else {
        generate::write(root)
    };
    match outcome {
        Ok(paths) if check && !paths.is_empty() => {
            eprintln!(
                "loopr: generated files are stale: {}; run `{}` and commit them",
                paths.join(", "),
                generate::COMMAND
            );
            ExitCode::from(1)
        }
        Ok(paths) => {
            for path in paths {
                println!("wrote {path}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("loopr: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    // SAFETY: no other thread exists yet.
    let credentials = SharedEnv::new(unsafe { ProviderEnv::take_from_process() });
    keep_environment_private();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Rpc {
            log_file,
            log_level,
        } => run_rpc(credentials, &log_file, &log_level),
        Command::Plan {
            task,
            approve_all,
            root,
            settings,
            log_file,
            log_level,
        } => run_plan(
            credentials,
            task,
            approve_all,
            root,
            &settings,
            log_file,
            &log_level,
        ),
        Command::Resume {
            approve_all,
            yes,
            unsandboxed,
            root,
            settings,
        } => require_confinement(&loopr::tools::SandboxSettings::default(), yes, unsandboxed)
            .and_then(|()| run_resume(credentials, root, approve_all, yes, &settings)),
        Command::Run {
            phase,
            yes,
            unsandboxed,
            root,
            settings,
            agent,
        } => run_code(
            credentials,
            &phase,
            yes,
            unsandboxed,
            root,
            &settings,
            agent,
        ),
        Command::Verify {
            name,
            root,
            settings,
        } => {
            return match run_verify(credentials, &name, root, &settings) {
                Ok(Verdict::Passed) => ExitCode::SUCCESS,
                Ok(Verdict::Blocking) => {
                    eprintln!(
                        "loopr: the verification does not pass; the findings are listed on stdout"
                    );
                    ExitCode::from(1)
                }
                Err(err) => failure(err, ExitCode::from(VERIFY_ERROR_STATUS)),
            };
        }
        Command::Generate { check, root } => return run_generate(check, &root),
        Command::Cancel { id, root } => run_cancel(credentials, root, &id),
        Command::Rewind { id, force, root } => {
            run_restore(credentials, Restoring::Rewind, root, &id, force)
        }
        Command::Undo { id, force, root } => {
            run_restore(credentials, Restoring::Undo, root, &id, force)
        }
        Command::Transcript { id, root } => {
            loopr_home().and_then(|home| loopr::cli::print_transcript(&home, &root, &id))
        }
        Command::Status { root, settings } => settings
            .as_deref()
            .map(parse_settings)
            .transpose()
            .and_then(|settings| {
                if let Some(settings) = &settings {
                    loopr::pricing::PriceTable::check(&settings.prices)
                        .map_err(|err| anyhow::anyhow!("--settings: {err}"))?;
                }
                let prices = settings.map(|settings| settings.price_table());
                loopr::cli::print_status(&loopr_home()?, &root, prices.as_ref())
            }),
        Command::Sandbox { settings } => {
            return match parse_settings(&settings).and_then(|settings| {
                loopr::tools::Sandbox::new(&settings.sandbox).map_err(anyhow::Error::msg)
            }) {
                Ok(sandbox) => {
                    println!("{}", sandbox.describe());
                    if sandbox.is_confined() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(err) => {
                    eprintln!("loopr: {err:#}");
                    ExitCode::from(2)
                }
            };
        }
        Command::SandboxExec {
            parent_pid,
            root,
            cwd,
            writable,
            read_only,
            network,
            shell_command,
        } => {
            let request = loopr::tools::ExecRequest {
                parent_pid,
                root,
                cwd,
                writable,
                read_only,
                network,
                shell_command,
            };
            let status = loopr::tools::sandbox_exec(&request).unwrap_or_else(|err| {
                eprintln!("Loopr: the sandbox could not be set up: {err}");
                loopr::tools::SANDBOX_SETUP_FAILED
            });
            return ExitCode::from(u8::try_from(status).unwrap_or(u8::MAX));
        }
        Command::HasState { root } => {
            return match loopr_home().and_then(|home| loopr::cli::has_state(&home, &root)) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(err) => {
                    eprintln!("loopr: {err:#}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => failure(err, ExitCode::FAILURE),
    }
}

/// How `loopr verify` exits when the verification could not run or finish: apart from 1, its
/// findings blocking.
const VERIFY_ERROR_STATUS: u8 = 2;

/// Tells the user why a subcommand failed and gives its exit status: `status`, unless the
/// reader closed stdout or a signal stopped the run (each has its own).
fn failure(err: anyhow::Error, status: ExitCode) -> ExitCode {
    if loopr::cli::stdout_was_closed(&err) {
        // The reader stopped early (`loopr transcript ID | head`): nothing to tell.
        return ExitCode::from(loopr::cli::CLOSED_STDOUT_STATUS);
    }
    if let Some(signal) = err.downcast_ref::<loopr::cli::Interrupted>() {
        eprintln!("loopr: {signal}");
        tracing::info!(signal = signal.name(), "headless run stopped by a signal");
        return ExitCode::from(signal.exit_status());
    }
    // stderr, never stdout: stdout is the RPC channel. The error may quote a server.
    eprintln!(
        "{}",
        loopr::terminal_text::for_terminal(&format!("loopr: {err:#}"))
    );
    tracing::error!(error = %format!("{err:#}"), "host exited with an error");
    status
}

/// What a verification that finished found: whether it passes.
enum Verdict {
    Passed,
    Blocking,
}

fn run_rpc(
    credentials: SharedEnv,
    log_file: &std::path::Path,
    log_level: &str,
) -> anyhow::Result<()> {
    let _log_guard = loopr::logging::init(log_file, log_level)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        "host starting"
    );
    let loopr_home = loopr_home()?;
    let runtime = runtime()?;
    runtime.block_on(serve_neovim(HostOptions {
        loopr_home,
        provider_factory: provider_factory(credentials.clone()),
        credentials,
        test_hooks: std::env::var_os("LOOPR_TEST_HOOKS").is_some_and(|value| value == "1"),
    }))?;
    // Loops were cancelled when the channel closed; don't wait for in-flight HTTP to unwind.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    tracing::info!("host stopped");
    Ok(())
}

fn run_plan(
    credentials: SharedEnv,
    task: String,
    approve_all: bool,
    root: PathBuf,
    settings: &str,
    log_file: Option<PathBuf>,
    log_level: &str,
) -> anyhow::Result<()> {
    let _log_guard = log_file
        .map(|file| loopr::logging::init(&file, log_level))
        .transpose()?;
    let settings = parse_settings(settings)?;
    let runtime = runtime()?;
    let all_complete = runtime.block_on(loopr::cli::run_plan(
        loopr_home()?,
        provider_factory(credentials),
        loopr::cli::PlanOptions {
            root,
            task,
            approve_all,
            settings,
        },
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    require_all_complete(all_complete?)
}

fn run_resume(
    credentials: SharedEnv,
    root: PathBuf,
    approve_all: bool,
    yes: bool,
    settings: &str,
) -> anyhow::Result<()> {
    let settings = parse_settings(settings)?;
    settings
        .mcp
        .check()
        .map_err(|err| anyhow::anyhow!("--settings: {err}"))?;
    let runtime = runtime()?;
    let all_complete = runtime.block_on(loopr::cli::resume(
        loopr_home()?,
        provider_factory(credentials),
        root,
        approve_all,
        loopr::cli::headless_approver(yes),
        &settings.mcp,
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    require_all_complete(all_complete?)
}

fn run_cancel(credentials: SharedEnv, root: PathBuf, id: &str) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let cancelled = runtime.block_on(loopr::cli::cancel(
        loopr_home()?,
        provider_factory(credentials),
        root,
        id,
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    cancelled
}

fn run_code(
    credentials: SharedEnv,
    phase: &str,
    yes: bool,
    unsandboxed: bool,
    root: PathBuf,
    settings: &str,
    agent: Option<String>,
) -> anyhow::Result<()> {
    if !yes {
        anyhow::bail!(
            "loopr run changes files and runs commands, and nobody can approve them here; pass \
             --yes to accept every change, or use :LooprRun in Neovim to review them"
        );
    }
    let mut settings = parse_settings(settings)?;
    if let Some(agent) = agent {
        if let Err(unknown) = loopr::acp::configured_agent(&settings.agents, &agent) {
            anyhow::bail!(
                "--agent {agent} names no agent of agents ({}); add it to agents in --settings, \
                 or pass --agent with one of them",
                unknown.configured_words()
            );
        }
        settings.code_agent = Some(agent);
    }
    require_confinement(&settings.sandbox, yes, unsandboxed)?;
    let runtime = runtime()?;
    let passed = runtime.block_on(loopr::cli::run_code(
        loopr_home()?,
        provider_factory(credentials),
        root,
        phase,
        settings,
        loopr::cli::headless_approver(yes),
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    require_all_complete(passed?)
}

fn run_verify(
    credentials: SharedEnv,
    name: &str,
    root: PathBuf,
    settings: &str,
) -> anyhow::Result<Verdict> {
    let settings = parse_settings(settings)?;
    let runtime = runtime()?;
    let verification = runtime.block_on(loopr::cli::run_verify(
        loopr_home()?,
        provider_factory(credentials),
        root,
        name,
        settings,
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    let verification = verification?;
    loopr::cli::print_findings(&mut std::io::stdout().lock(), &verification)?;
    Ok(if verification.blocking {
        Verdict::Blocking
    } else {
        Verdict::Passed
    })
}

/// Where nothing confines commands, each must be seen by a person: `--yes` alone does not
/// accept them unseen, `--unsandboxed` says the user accepts that.
fn require_confinement(
    settings: &loopr::tools::SandboxSettings,
    yes: bool,
    unsandboxed: bool,
) -> anyhow::Result<()> {
    if !yes || unsandboxed {
        return Ok(());
    }
    let sandbox = loopr::tools::Sandbox::new(settings).map_err(|err| anyhow::anyhow!(err))?;
    if !sandbox.is_confined() {
        anyhow::bail!(
            "no sandbox confines commands here ({}); --yes does not run them unseen. Pass \
             --unsandboxed as well to accept that, or use Neovim to approve each command",
            sandbox.describe()
        );
    }
    Ok(())
}

fn parse_settings(settings: &str) -> anyhow::Result<LoopSettings> {
    // The path names the option at fault (`tool_protocol: unknown variant ...`).
    let mut json = serde_json::Deserializer::from_str(settings);
    serde_path_to_error::deserialize(&mut json)
        .map_err(|err| match err.path().to_string().as_str() {
            "." => anyhow::anyhow!("{}", err.inner()),
            path => anyhow::anyhow!("option {path}: {}", err.inner()),
        })
        .context("--settings must be a JSON object of setup options, e.g. '{\"max_turns\": 10}'")
}

fn require_all_complete(all_complete: bool) -> anyhow::Result<()> {
    if all_complete {
        Ok(())
    } else {
        anyhow::bail!("not every loop completed; see the table above")
    }
}

fn loopr_home() -> anyhow::Result<PathBuf> {
    loopr_home_from_env()
        .context("neither LOOPR_HOME nor HOME is set; set LOOPR_HOME to a writable directory")
}

/// The key left the environment, but the environment the process started with stays readable
/// in /proc/<pid>/environ to any process of the user, such as a command a loop runs. Not
/// dumpable, it is readable by root only. macOS has no such switch (a process's arguments and
/// environment stay readable to the user's other processes there); its commands run
/// unsandboxed, as the user, and are always asked about anyway.
fn keep_environment_private() {
    #[cfg(linux_apis)]
    // SAFETY: PR_SET_DUMPABLE with 0 only changes who may inspect this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// `loopr rewind` or `loopr undo` (`what`) on a runtime of its own, what it did on stdout;
/// its tasks left then get 500 ms to end.
fn run_restore(
    credentials: SharedEnv,
    what: Restoring,
    root: PathBuf,
    phase: &str,
    force: bool,
) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let done = runtime.block_on(loopr::cli::restore(
        what,
        loopr_home()?,
        provider_factory(credentials),
        root,
        phase,
        force,
        &mut std::io::stdout().lock(),
    ));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    done
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    /// `loopr --version` names the wire protocol beside the crate's version: what a person
    /// compares with `:checkhealth loopr` when the plugin refuses a host.
    #[test]
    fn version_names_the_version_and_the_protocol() {
        let shown = match Cli::try_parse_from(["loopr", "--version"]) {
            Err(err) if err.kind() == clap::error::ErrorKind::DisplayVersion => err.to_string(),
            Err(err) => panic!("--version failed: {err}"),
            Ok(_) => panic!("--version parsed as a command"),
        };
        assert_eq!(
            shown.trim_end(),
            format!(
                "loopr {} (protocol {})",
                env!("CARGO_PKG_VERSION"),
                loopr::bridge::PROTOCOL_VERSION
            )
        );
    }
}
