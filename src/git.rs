//! Git as the host runs it (checkpoints, a phase's commit): never through a shell, with the
//! commands' environment allow-list (no secret, no `GIT_DIR` or other variable redirecting
//! git), no pager, no prompt, no lock taken for a read, every call bounded in time and
//! output, its process group killed when the call is dropped (a cancel).
//!
//! The working tree is the model's and so an attacker's, and so may be the repository when a
//! command created it (`git init`, a `.git` file) after Loopr first saw the project: git is
//! told not to run the user's hooks or fsmonitor unless a call asks for hooks (`with_hooks`,
//! the caller decides where those run), not to trace to files, not to sign, to take the work
//! tree Loopr found (never `core.worktree`), and to read attributes from the empty tree, so
//! no `filter.*` program runs, unless a call asks for the user's filters (`with_filters`) or
//! signature (`signed`): only the phase commit does, in a repository it checked.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// How long one git call may take unless the caller says otherwise: adding a large tree to a
/// temporary index takes seconds, not minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of standard output kept from one call (paths of a large tree fit); more fails the
/// call rather than being cut, since a caller parses it.
const MAX_STDOUT: usize = 32 * 1024 * 1024;
/// Bytes of standard error kept, for the error's text.
const MAX_STDERR: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git could not be started: {0}")]
    Spawn(std::io::Error),
    #[error("git {command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("git {command} took longer than {seconds}s and was stopped")]
    TimedOut { command: String, seconds: u64 },
    #[error("git {command} wrote more than {limit} bytes; it was stopped")]
    TooMuchOutput { command: String, limit: usize },
    #[error("reading git {command}'s output: {source}")]
    Io {
        command: String,
        source: std::io::Error,
    },
}

/// The empty tree's name in a SHA-1 repository, and in a SHA-256 one: the attributes' source
/// that has none.
const EMPTY_TREE_SHA1: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
const EMPTY_TREE_SHA256: &str = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321";

/// Variables a signing program needs to reach the user's keys: given to a signed call only.
const SIGNING_VARIABLES: [&str; 3] = ["SSH_AUTH_SOCK", "GNUPGHOME", "GPG_TTY"];

/// Variables that would make git trace to a file or descriptor, each turned off for every
/// call (a repository's config cannot set them; the user's global config could).
const TRACE_VARIABLES: [&str; 9] = [
    "GIT_TRACE",
    "GIT_TRACE2",
    "GIT_TRACE2_EVENT",
    "GIT_TRACE2_PERF",
    "GIT_TRACE_PACKET",
    "GIT_TRACE_PERFORMANCE",
    "GIT_TRACE_SETUP",
    "GIT_TRACE_SHALLOW",
    "GIT_TRACE_CURL",
];

/// A repository's work tree, where the host runs git.
#[derive(Clone, Debug)]
pub struct Git {
    work_tree: PathBuf,
    /// The repository's git directory (absolute, as git names it).
    git_dir: PathBuf,
    /// The empty tree in the repository's object format.
    empty_tree: &'static str,
}

impl Git {
    /// The repository whose work tree holds `dir`, if git knows one (no git installed, or no
    /// repository, is `None`: the callers then do without).
    /// A work tree git names outside `dir` (a `core.worktree` the repository's config sets)
    /// is none either.
    pub async fn find(dir: &Path) -> Option<Git> {
        let probe = Git {
            work_tree: dir.to_owned(),
            git_dir: PathBuf::new(),
            empty_tree: EMPTY_TREE_SHA1,
        };
        let mut command = probe.command([
            "rev-parse",
            "--show-toplevel",
            "--show-object-format",
            "--absolute-git-dir",
        ]);
        command.work_tree_given = false;
        let output = command.output().await.ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        let mut lines = text.lines();
        let (top, format, git_dir) = (lines.next()?, lines.next()?, lines.next()?);
        if top.is_empty() {
            return None;
        }
        let inside = match (dir.canonicalize(), Path::new(top).canonicalize()) {
            (Ok(dir), Ok(top)) => dir.starts_with(top),
            _ => false,
        };
        if !inside {
            tracing::warn!(dir = %dir.display(), work_tree = top, "git names a work tree that does not hold the folder; doing without git");
            return None;
        }
        Some(Git {
            work_tree: PathBuf::from(top),
            git_dir: PathBuf::from(git_dir),
            empty_tree: if format == "sha256" {
                EMPTY_TREE_SHA256
            } else {
                EMPTY_TREE_SHA1
            },
        })
    }

    /// The repository's git directory, absolute.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The top of the work tree.
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// A git call in the work tree with these arguments.
    pub fn command<I, S>(&self, args: I) -> GitCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        GitCommand {
            work_tree: self.work_tree.clone(),
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: Vec::new(),
            stdin: None,
            hooks: false,
            filters: false,
            signed: false,
            work_tree_given: true,
            empty_tree: self.empty_tree,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// One git call, built then run once.
#[derive(Debug)]
pub struct GitCommand {
    work_tree: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    stdin: Option<Vec<u8>>,
    hooks: bool,
    /// The repository's attributes choose filters (`with_filters`).
    filters: bool,
    /// `commit.gpgSign` holds, with what a signing program needs (`signed`).
    signed: bool,
    /// The work tree is given to git (`GIT_WORK_TREE`), so `core.worktree` cannot move it;
    /// only the probe that finds it goes without.
    work_tree_given: bool,
    empty_tree: &'static str,
    timeout: Duration,
}

/// What a git call that succeeded wrote.
#[derive(Debug)]
pub struct GitOutput {
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl GitCommand {
    /// Sets a variable for this call (`GIT_INDEX_FILE` for a temporary index, the author).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> GitCommand {
        self.env
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Bytes written to git's standard input.
    pub fn stdin(mut self, bytes: Vec<u8>) -> GitCommand {
        self.stdin = Some(bytes);
        self
    }

    /// Lets git run the repository's hooks (a commit made as the user's would be).
    pub fn with_hooks(mut self) -> GitCommand {
        self.hooks = true;
        self
    }

    /// Lets the repository's attributes run its filters (`filter.*.clean`, LFS), as the
    /// user's own `git add` would: only for a repository the caller trusts.
    pub fn with_filters(mut self) -> GitCommand {
        self.filters = true;
        self
    }

    /// Signs as the user's config asks (`commit.gpgSign`), passing the signing program the
    /// variables that reach the user's keys (`SSH_AUTH_SOCK`, `GNUPGHOME`, `GPG_TTY`).
    pub fn signed(mut self) -> GitCommand {
        self.signed = true;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> GitCommand {
        self.timeout = timeout;
        self
    }

    /// Runs the call; a non-zero exit is `GitError::Failed` with git's error text.
    pub async fn output(self) -> Result<GitOutput, GitError> {
        let ran = self.run().await?;
        if ran.success {
            Ok(ran.output)
        } else {
            Err(GitError::Failed {
                command: ran.command,
                stderr: ran.output.stderr,
            })
        }
    }

    /// Runs the call; whether it exited zero, and what it wrote either way.
    pub async fn checked_output(self) -> Result<(bool, GitOutput), GitError> {
        let ran = self.run().await?;
        Ok((ran.success, ran.output))
    }

    async fn run(self) -> Result<Ran, GitError> {
        let name = self
            .args
            .iter()
            .find(|arg| !arg.to_string_lossy().starts_with('-'))
            .map(|arg| arg.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut command = tokio::process::Command::new("git");
        command
            .arg("--no-pager")
            .arg("-c")
            .arg("core.fsmonitor=false");
        if !self.hooks {
            command.arg("-c").arg("core.hooksPath=/dev/null");
        }
        // A call with hooks runs the user's commit hooks, whose own git calls keep their config.
        if !self.signed && !self.hooks {
            command
                .args(["-c", "commit.gpgSign=false"])
                .args(["-c", "tag.gpgSign=false"]);
        }
        command
            .args(&self.args)
            .current_dir(&self.work_tree)
            .env_clear()
            .envs(crate::tools::command_environment(&[]))
            .envs(TRACE_VARIABLES.map(|name| (name, "0")));
        if self.work_tree_given {
            command.env("GIT_WORK_TREE", &self.work_tree);
        }
        if !self.filters && !self.hooks {
            command.env("GIT_ATTR_SOURCE", self.empty_tree);
        }
        if self.signed {
            for name in SIGNING_VARIABLES {
                if let Some(value) = std::env::var_os(name) {
                    command.env(name, value);
                }
            }
        }
        command
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .env("LC_ALL", "C")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
        wrapped
            .wrap(process_wrap::tokio::ProcessGroup::leader())
            .wrap(process_wrap::tokio::KillOnDrop);
        let mut child = wrapped.spawn().map_err(GitError::Spawn)?;
        let stdin = child.stdin().take();
        let stdout = child.stdout().take();
        let stderr = child.stderr().take();
        let input = self.stdin;
        let command_name = name.clone();
        let work = async move {
            let feed = async move {
                if let (Some(mut pipe), Some(bytes)) = (stdin, input) {
                    // git may exit before reading it all (a failure); its status says why.
                    let _ = pipe.write_all(&bytes).await;
                }
            };
            let (_, out, err) = tokio::join!(
                feed,
                read_bounded(stdout, MAX_STDOUT),
                read_bounded(stderr, MAX_STDERR)
            );
            let io = |source| GitError::Io {
                command: command_name.clone(),
                source,
            };
            let (out, out_cut) = out.map_err(io)?;
            let (err, _) = err.map_err(io)?;
            if out_cut {
                return Err(GitError::TooMuchOutput {
                    command: command_name.clone(),
                    limit: MAX_STDOUT,
                });
            }
            let status = child.wait().await.map_err(io)?;
            Ok((status.success(), out, err))
        };
        let (success, stdout, stderr) =
            tokio::time::timeout(self.timeout, work)
                .await
                .map_err(|_| GitError::TimedOut {
                    command: name.clone(),
                    seconds: self.timeout.as_secs(),
                })??;
        let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
        Ok(Ran {
            success,
            command: name,
            output: GitOutput { stdout, stderr },
        })
    }
}

/// A call that ran to its exit: whether it succeeded, the subcommand, what it wrote.
struct Ran {
    success: bool,
    command: String,
    output: GitOutput,
}

/// Reads at most `limit` bytes of `pipe` and drains the rest; whether it was cut.
async fn read_bounded(
    pipe: Option<impl AsyncRead + Unpin>,
    limit: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let Some(pipe) = pipe else {
        return Ok((Vec::new(), false));
    };
    let mut kept = Vec::new();
    let mut limited = pipe.take(limit as u64 + 1);
    limited.read_to_end(&mut kept).await?;
    let cut = kept.len() > limit;
    kept.truncate(limit);
    if cut {
        // Drained, so git is not stuck on a full pipe before the timeout kills it.
        let mut rest = limited.into_inner();
        tokio::io::copy(&mut rest, &mut tokio::io::sink()).await?;
    }
    Ok((kept, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(dir: &Path) {
        let status = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir)
            .status()
            .expect("git init");
        assert!(status.success());
    }

    #[tokio::test]
    async fn finds_the_work_tree_above_a_folder_and_none_outside_a_repository() {
        let outside = tempfile::tempdir().expect("tempdir");
        assert!(Git::find(outside.path()).await.is_none());
        let repo = tempfile::tempdir().expect("tempdir");
        init(repo.path());
        std::fs::create_dir(repo.path().join("sub")).expect("sub");
        let git = Git::find(&repo.path().join("sub")).await.expect("found");
        assert_eq!(
            git.work_tree().canonicalize().expect("canonical"),
            repo.path().canonicalize().expect("canonical")
        );
    }

    #[tokio::test]
    async fn a_failure_carries_git_s_words_and_stdin_reaches_git() {
        let repo = tempfile::tempdir().expect("tempdir");
        init(repo.path());
        let git = Git::find(repo.path()).await.expect("found");
        let err = git
            .command(["rev-parse", "--verify", "no-such-ref"])
            .output()
            .await
            .expect_err("no such ref");
        assert!(
            err.to_string().starts_with("git rev-parse failed:"),
            "{err}"
        );
        let hashed = git
            .command(["hash-object", "--stdin"])
            .stdin(b"hello\n".to_vec())
            .output()
            .await
            .expect("hash");
        assert_eq!(
            String::from_utf8_lossy(&hashed.stdout).trim(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[tokio::test]
    async fn hooks_run_only_when_asked() {
        let repo = tempfile::tempdir().expect("tempdir");
        init(repo.path());
        let hook = repo.path().join(".git/hooks/pre-commit");
        std::fs::write(&hook, "#!/bin/sh\ntouch hook-ran\n").expect("hook");
        let mut permissions = std::fs::metadata(&hook).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&hook, permissions).expect("chmod");
        let git = Git::find(repo.path()).await.expect("found");
        let commit = |git: &Git| {
            git.command(["commit", "-q", "--allow-empty", "-m", "x"])
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
        };
        commit(&git).output().await.expect("commit");
        assert!(!repo.path().join("hook-ran").exists(), "hooks are off");
        commit(&git).with_hooks().output().await.expect("commit");
        assert!(repo.path().join("hook-ran").exists(), "hooks asked for");
    }

    /// A repository a command planted: a clean filter its attributes choose, a signing
    /// program, traces to a file. None of them runs for a call without hooks.
    #[tokio::test]
    async fn a_planted_filter_signer_or_trace_never_runs_for_a_plain_call() {
        let repo = tempfile::tempdir().expect("tempdir");
        init(repo.path());
        let marker = repo.path().join("marker");
        let run = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(repo.path())
                .status()
                .expect("git");
            assert!(status.success(), "{args:?}");
        };
        let touch = format!("touch {}; cat", marker.display());
        run(&["config", "filter.x.clean", &touch]);
        run(&["config", "commit.gpgSign", "true"]);
        run(&[
            "config",
            "gpg.program",
            &format!("{}/signer", repo.path().display()),
        ]);
        std::fs::write(
            repo.path().join("signer"),
            format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
        )
        .expect("signer");
        let mut permissions = std::fs::metadata(repo.path().join("signer"))
            .expect("meta")
            .permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(repo.path().join("signer"), permissions).expect("chmod");
        std::fs::write(repo.path().join(".gitattributes"), "*.txt filter=x\n").expect("attrs");
        std::fs::write(repo.path().join("a.txt"), "hello\n").expect("file");
        let git = Git::find(repo.path()).await.expect("found");
        git.command(["add", "-A"]).output().await.expect("add");
        assert!(!marker.exists(), "the planted clean filter ran");
        let tree = git.command(["write-tree"]).output().await.expect("tree");
        let tree = String::from_utf8_lossy(&tree.stdout).trim().to_owned();
        git.command(["commit-tree", &tree, "-m", "x"])
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .await
            .expect("an unsigned commit");
        assert!(!marker.exists(), "the planted signing program ran");
        // The user's filters run where the caller asks for them.
        std::fs::write(repo.path().join("b.txt"), "again\n").expect("file");
        git.command(["add", "b.txt"])
            .with_filters()
            .output()
            .await
            .expect("add");
        assert!(marker.exists(), "filters asked for");
    }

    #[tokio::test]
    async fn a_work_tree_the_config_moves_elsewhere_is_none() {
        let repo = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        init(repo.path());
        let status = std::process::Command::new("git")
            .args(["config", "core.worktree"])
            .arg(elsewhere.path())
            .current_dir(repo.path())
            .status()
            .expect("git");
        assert!(status.success());
        assert!(Git::find(repo.path()).await.is_none());
    }
}
