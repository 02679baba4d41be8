//! Logging to a file through tracing. stdout belongs to msgpack-RPC, so nothing may log there.

use std::path::Path;

use anyhow::Context;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Log lines that may wait for the writer thread; a burst of trace logging fits.
const LINES_WAITING: usize = 4096;

/// Starts logging to `log_file` at `level` (`error`, `warn`, `info`, `debug`, `trace`) for
/// Loopr's own messages; dependencies log warnings and errors only, so transport internals
/// never reach the file. Keep the guard alive until exit or buffered lines are lost.
pub fn init(log_file: &Path, level: &str) -> anyhow::Result<WorkerGuard> {
    let level = level.trim().to_ascii_lowercase();
    if !["error", "warn", "info", "debug", "trace"].contains(&level.as_str()) {
        anyhow::bail!("log level {level:?} is not one of error, warn, info, debug, trace");
    }
    let dir = log_file
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = log_file
        .file_name()
        .with_context(|| format!("log file {} has no file name", log_file.display()))?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating log directory {}", dir.display()))?;
    let appender = tracing_appender::rolling::never(dir, file_name);
    // The default queue holds 128,000 lines, allocated up front: a third of the host's start
    // time. Lines beyond this many waiting are dropped (counted by the appender), never waited
    // for.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LINES_WAITING)
        .finish(appender);
    let filter = EnvFilter::try_new(format!("warn,loopr={level}"))
        .with_context(|| format!("building log filter for level {level}"))?;
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init()
        .map_err(|err| anyhow::anyhow!("starting the logger: {err}"))?;
    install_panic_logger();
    Ok(guard)
}

/// Panics are logged before the default hook prints them to stderr, so the log file tells
/// what went wrong even when Neovim discards stderr.
fn install_panic_logger() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panic");
        default_hook(info);
    }));
}
