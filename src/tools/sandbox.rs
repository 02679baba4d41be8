//! The operating-system sandbox every command a loop runs (`run_command`, the phase's
//! validation command) runs in. The deny-list is a tripwire; this is the guarantee:
//!
//! - files: everything read-only (metadata too) but the project root, a private `/tmp`, and
//!   the `writable` paths of the settings; inside those, `.git` of the project and of the
//!   repositories nested in it (unless `allow_git`) and the state directory stay read-only
//!   (`protected.rs`);
//! - network: none unless `network`;
//! - processes: a PID namespace of its own (with its own `/proc`), so every descendant is
//!   gone when the command ends, times out, is cancelled or its host dies;
//! - the kernel: no Unix sockets, io_uring, new user namespaces, mounts, ptrace, eBPF,
//!   keyrings and other ways past the rest (the seccomp filter, `seccomp.rs`);
//! - environment: an allow-list, never a variable that looks like a secret.
//!
//! Mechanisms, best first: bubblewrap (`bwrap`), Landlock with namespaces (`landlock.rs`,
//! run by `loopr sandbox-exec`: `exec.rs`), none. Without one, commands are still run (with
//! the environment allow-list) but never approved without asking, and the request says so.
//! That is always the case on an OS other than Linux (macOS): bubblewrap, Landlock and seccomp
//! are Linux's, built only with the `linux_apis` cfg (build.rs); `no_sandbox_on` words it.

#[cfg(linux_apis)]
mod bubblewrap;
mod environment;
#[cfg(linux_apis)]
mod exec;
mod exec_request;
#[cfg(linux_apis)]
mod landlock;
mod protected;
#[cfg(linux_apis)]
mod seccomp;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

pub use environment::{changes_what_runs, command_environment, looks_secret};
#[cfg(linux_apis)]
pub use exec::sandbox_exec;
pub use exec_request::{ExecRequest, SETUP_FAILED, SetupError};

use super::output::CommandOutput;

/// How to get a sandbox here.
#[cfg(linux_apis)]
const REMEDY: &str = "install bubblewrap (Debian, Ubuntu: apt install bubblewrap; Fedora: dnf \
     install bubblewrap) to confine them";
#[cfg(not(linux_apis))]
const REMEDY: &str = NOTHING_TO_INSTALL;

/// The remedy where Loopr has no sandbox at all (`no_sandbox_on`).
const NOTHING_TO_INSTALL: &str =
    "there is nothing to install for it: read each command before you approve it";

/// Which mechanism to use.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// The best one available.
    #[default]
    Auto,
    /// Bubblewrap only.
    Bubblewrap,
    /// Landlock only.
    Landlock,
    /// No sandbox: every command is asked about, whatever the approval settings.
    Off,
}

/// `sandbox = { ... }` of the settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// Which sandbox commands run in: "auto" is bubblewrap where it works, else Landlock with
    /// namespaces, else none.
    pub mode: SandboxMode,
    /// Paths commands may write besides the project root and their `/tmp` (absolute, or
    /// starting with `~/`), e.g. a cargo or npm cache.
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of absolute paths"))]
    pub writable: Vec<String>,
    /// Whether commands may use the network.
    pub network: bool,
    /// Whether commands may write the project's `.git`.
    pub allow_git: bool,
    /// Environment variables passed to commands besides the default allow-list (never one
    /// that looks like a secret).
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of variable names"))]
    pub env: Vec<String>,
}

impl SandboxSettings {
    /// The writable paths, `~/` expanded; an error names a path that is not absolute.
    pub fn writable_paths(&self) -> Result<Vec<PathBuf>, String> {
        self.writable
            .iter()
            .map(|path| {
                let expanded = match path.strip_prefix("~/") {
                    Some(rest) => std::env::var_os("HOME")
                        .map(|home| PathBuf::from(home).join(rest))
                        .ok_or_else(|| format!("sandbox.writable {path:?}: HOME is not set"))?,
                    None => PathBuf::from(path),
                };
                if !expanded.is_absolute() {
                    return Err(format!(
                        "sandbox.writable {path:?} is not an absolute path (or ~/...)"
                    ));
                }
                if holds_home(&expanded) {
                    return Err(format!(
                        "sandbox.writable {path:?} holds your home directory: a command could \
                         change what runs outside the sandbox (your shell's start-up files, \
                         ~/.ssh, your editor's and Git's configuration); allow the directories \
                         a build writes instead, e.g. \"~/.cargo\" or \"~/.npm\""
                    ));
                }
                Ok(expanded)
            })
            .collect()
    }
}

/// Whether `path` is the home directory or holds it (`/` included), symlinks resolved.
fn holds_home(path: &Path) -> bool {
    let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) else {
        return path.parent().is_none();
    };
    let home = PathBuf::from(home);
    let home = home.canonicalize().unwrap_or(home);
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    home.starts_with(&path)
}

/// How commands are confined on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Bubblewrap {
        bwrap: PathBuf,
    },
    /// Landlock (of this ABI) for the files, namespaces for the rest.
    Landlock {
        abi: i32,
    },
    /// Commands run unconfined, for this reason; `remedy` says how to get a sandbox.
    Unconfined {
        reason: String,
        remedy: String,
    },
}

/// The sandbox commands of one loop run in.
#[derive(Clone, Debug)]
pub struct Sandbox {
    mechanism: Mechanism,
    writable: Vec<PathBuf>,
    network: bool,
    allow_git: bool,
    /// `$LOOPR_HOME` as the host sees it: never writable by a command.
    state_dir: Option<PathBuf>,
    environment: Vec<(OsString, OsString)>,
}

impl Sandbox {
    /// The sandbox `settings` ask for, on this machine. An explicit mechanism that is not
    /// available is an error naming how to get it.
    pub fn new(settings: &SandboxSettings) -> Result<Sandbox, String> {
        let mechanism = match settings.mode {
            SandboxMode::Off => sandbox_off(cfg!(linux_apis)),
            #[cfg(not(linux_apis))]
            SandboxMode::Bubblewrap | SandboxMode::Landlock => {
                return Err(explicit_mode_without_linux(
                    settings.mode,
                    std::env::consts::OS,
                ));
            }
            #[cfg(linux_apis)]
            SandboxMode::Bubblewrap => match bubblewrap::available() {
                Ok(bwrap) => Mechanism::Bubblewrap { bwrap },
                Err(why) => {
                    return Err(format!(
                        "sandbox.mode = \"bubblewrap\", but {why}; install bubblewrap (Debian, \
                         Ubuntu: apt install bubblewrap) or use sandbox.mode = \"auto\""
                    ));
                }
            },
            #[cfg(linux_apis)]
            SandboxMode::Landlock => match landlock_available() {
                Ok(abi) => Mechanism::Landlock { abi },
                Err(why) => {
                    return Err(format!(
                        "sandbox.mode = \"landlock\", but {why}; use sandbox.mode = \"auto\" \
                         (bubblewrap where it works) or \"off\""
                    ));
                }
            },
            SandboxMode::Auto => detect(),
        };
        Ok(Sandbox {
            mechanism,
            writable: settings.writable_paths()?,
            network: settings.network,
            allow_git: settings.allow_git,
            state_dir: crate::store::loopr_home_from_env(),
            environment: command_environment(&settings.env),
        })
    }

    /// No confinement, with the environment allow-list (for tests of the tools themselves).
    pub fn unconfined(reason: &str) -> Sandbox {
        Sandbox {
            mechanism: Mechanism::Unconfined {
                reason: reason.to_owned(),
                remedy: REMEDY.to_owned(),
            },
            writable: Vec::new(),
            network: true,
            allow_git: true,
            state_dir: None,
            environment: command_environment(&[]),
        }
    }

    pub fn mechanism(&self) -> &Mechanism {
        &self.mechanism
    }

    pub fn is_confined(&self) -> bool {
        !matches!(self.mechanism, Mechanism::Unconfined { .. })
    }

    /// One line for the user: which sandbox, or why there is none and how to get one.
    pub fn describe(&self) -> String {
        let guarantees = || {
            format!(
                "files read-only but the project{}, a private /tmp{}; network {}; own PID namespace",
                if self.allow_git { "" } else { " (not .git)" },
                if self.writable.is_empty() {
                    String::new()
                } else {
                    format!(" and {} writable path(s)", self.writable.len())
                },
                if self.network { "on" } else { "off" },
            )
        };
        match &self.mechanism {
            Mechanism::Bubblewrap { bwrap } => {
                format!("bubblewrap ({}): {}", bwrap.display(), guarantees())
            }
            Mechanism::Landlock { abi } => {
                format!("Landlock ABI {abi} + namespaces: {}", guarantees())
            }
            Mechanism::Unconfined { reason, remedy } => format!(
                "none: {reason}; commands run with your full permissions and are always asked \
                 about; {remedy}"
            ),
        }
    }

    /// The process that runs `sh -c <shell_command>` in `cwd`, confined to `root`. Looks for
    /// the repositories nested in `root` first, on the blocking pool.
    pub async fn command(
        &self,
        shell_command: &str,
        cwd: &Path,
        root: &Path,
    ) -> std::io::Result<tokio::process::Command> {
        let read_only = if self.is_confined() {
            self.read_only_paths(root).await?
        } else {
            Vec::new()
        };
        let mut command = match &self.mechanism {
            #[cfg(linux_apis)]
            Mechanism::Bubblewrap { bwrap } => {
                bubblewrap::command(bwrap, self, shell_command, cwd, root, &read_only)?
            }
            #[cfg(linux_apis)]
            Mechanism::Landlock { .. } => {
                landlock::command(self, shell_command, cwd, root, &read_only)
            }
            // `Sandbox::new` never picks them without Linux.
            #[cfg(not(linux_apis))]
            Mechanism::Bubblewrap { .. } | Mechanism::Landlock { .. } => {
                let _ = read_only;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!(
                        "bubblewrap and Landlock are Linux's: neither confines a command on \
                         {}, and the command was not run",
                        os_name(std::env::consts::OS)
                    ),
                ));
            }
            Mechanism::Unconfined { .. } => {
                let mut command = tokio::process::Command::new("sh");
                command.arg("-c").arg(shell_command).current_dir(cwd);
                command.env_clear().envs(self.environment().iter().cloned());
                command
            }
        };
        command.kill_on_drop(true);
        Ok(command)
    }

    /// What stays read-only inside the writable places for a command in `root`.
    async fn read_only_paths(&self, root: &Path) -> std::io::Result<Vec<PathBuf>> {
        let root = root.to_owned();
        let writable = self.writable.clone();
        let allow_git = self.allow_git;
        let state_dir = self.state_dir.clone();
        tokio::task::spawn_blocking(move || {
            crate::test_hooks::hold_point("sandbox_walk");
            protected::read_only_paths(&root, &writable, allow_git, state_dir.as_deref())
        })
        .await
        .map_err(|err| {
            std::io::Error::other(format!("finding what must stay read-only failed: {err}"))
        })
    }

    /// What the sandbox refused, if the failed command's output shows it ran into it, for the
    /// model to adapt.
    pub fn explain_refusal(&self, output: &CommandOutput) -> Option<String> {
        if !self.is_confined() || output.succeeded() {
            return None;
        }
        let text = format!("{}\n{}", output.stdout, output.stderr);
        let mut refused = Vec::new();
        // Landlock refuses with EACCES, which ordinary permissions give too: only claimed where
        // Landlock is the mechanism.
        let landlock_refused = matches!(self.mechanism, Mechanism::Landlock { .. })
            && text.contains("Permission denied");
        if text.contains("Read-only file system") || landlock_refused {
            refused.push(format!(
                "writing outside the project root: the sandbox makes everything read-only but \
                 the project{}, /tmp and the paths the user allowed (sandbox.writable)",
                if self.allow_git {
                    ""
                } else {
                    " (its .git too)"
                }
            ));
        }
        const NETWORK_ERRORS: [&str; 5] = [
            "Network is unreachable",
            "Could not resolve host",
            "Temporary failure in name resolution",
            "Name or service not known",
            "network is unreachable",
        ];
        if !self.network && NETWORK_ERRORS.iter().any(|error| text.contains(error)) {
            refused.push(
                "network access: commands have no network in the sandbox unless the user sets \
                 sandbox.network = true"
                    .to_owned(),
            );
        }
        (!refused.is_empty()).then(|| format!("the sandbox refused {}", refused.join("; and ")))
    }

    fn environment(&self) -> &[(OsString, OsString)] {
        &self.environment
    }
}

/// The best mechanism here, probed once per process.
fn detect() -> Mechanism {
    static DETECTED: OnceLock<Mechanism> = OnceLock::new();
    DETECTED.get_or_init(best_mechanism).clone()
}

/// Bubblewrap, else Landlock, else none.
#[cfg(linux_apis)]
fn best_mechanism() -> Mechanism {
    match bubblewrap::available() {
        Ok(bwrap) => Mechanism::Bubblewrap { bwrap },
        Err(no_bwrap) => match landlock_available() {
            Ok(abi) => Mechanism::Landlock { abi },
            Err(no_landlock) => Mechanism::Unconfined {
                reason: format!("{no_bwrap}, and {no_landlock}"),
                remedy: REMEDY.to_owned(),
            },
        },
    }
}

/// None: every mechanism Loopr has is Linux's.
#[cfg(not(linux_apis))]
fn best_mechanism() -> Mechanism {
    no_sandbox_on(std::env::consts::OS)
}

/// What commands get on `os` (as `std::env::consts::OS` names it), an OS other than Linux:
/// no sandbox, so they run with the environment allow-list and are always asked about, and
/// nothing the user could install changes that (yet).
#[cfg_attr(linux_apis, allow(dead_code))]
fn no_sandbox_on(os: &str) -> Mechanism {
    Mechanism::Unconfined {
        reason: format!(
            "Loopr has no sandbox for {} yet (bubblewrap and Landlock, the ones it uses, are \
             Linux's)",
            os_name(os)
        ),
        remedy: NOTHING_TO_INSTALL.to_owned(),
    }
}

/// `sandbox.mode = "off"`; on Linux (`linux`) "auto" would confine commands, elsewhere not.
fn sandbox_off(linux: bool) -> Mechanism {
    Mechanism::Unconfined {
        reason: "the sandbox is off (sandbox.mode = \"off\")".to_owned(),
        remedy: if linux {
            "set sandbox.mode = \"auto\" to confine them".to_owned()
        } else {
            "Loopr has no sandbox for this OS yet, so \"auto\" would not confine them either: \
             read each command before you approve it"
                .to_owned()
        },
    }
}

/// Why `mode` (bubblewrap or Landlock), asked for explicitly, cannot be had on `os`.
#[cfg_attr(linux_apis, allow(dead_code))]
fn explicit_mode_without_linux(mode: SandboxMode, os: &str) -> String {
    let mode = serde_json::to_string(&mode).unwrap_or_default();
    format!(
        "sandbox.mode = {mode}, but that sandbox is Linux's and this is {}; use sandbox.mode = \
         \"auto\" or \"off\" (commands then run unsandboxed and are always asked about)",
        os_name(os)
    )
}

/// `os` (as `std::env::consts::OS` names it) as people write it.
fn os_name(os: &str) -> &str {
    match os {
        "macos" => "macOS",
        "ios" => "iOS",
        "freebsd" => "FreeBSD",
        "netbsd" => "NetBSD",
        "openbsd" => "OpenBSD",
        other => other,
    }
}

/// Whether Landlock with namespaces works here (its probe runs a command), asked once per
/// process.
#[cfg(linux_apis)]
fn landlock_available() -> Result<i32, String> {
    static AVAILABLE: OnceLock<Result<i32, String>> = OnceLock::new();
    AVAILABLE.get_or_init(landlock::available).clone()
}

/// `loopr sandbox-exec` elsewhere than on Linux: it refuses (the host never starts it there).
#[cfg(not(linux_apis))]
pub fn sandbox_exec(_request: &ExecRequest) -> Result<i32, SetupError> {
    Err(exec_request::refused_without_linux(std::env::consts::OS))
}

#[cfg(test)]
mod tests;
