//! What a command written by an attacker can try in the sandbox, under bubblewrap and under
//! Landlock, each run by a real code loop (`loopr run --yes`): reaching a Unix socket
//! outside (io_uring included), the system calls the sandbox refuses, the metadata of files
//! outside the writable places, `.git` (nested ones too) under a writable parent, and the
//! state directory. Each test is skipped, saying why, where its mechanism cannot run.
//!
//! The commands run `loopr-test-sandbox-probe` (`tests/support/sandbox_probe.rs`), which makes
//! its attempts with raw system calls.

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/nvim.rs"]
mod nvim;
#[path = "support/sandboxed.rs"]
mod sandboxed;
#[path = "support/scenario.rs"]
mod scenario;

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};

use serde_json::json;

use sandboxed::{
    CommandResult, planned_project, run_commands, sandbox_settings_with, settings_or_skip,
};

/// The probe as cargo built it: under the checkout's `target/`, which a command does not see
/// when the checkout is under /tmp (the sandbox's /tmp is its own).
const BUILT_PROBE: &str = env!("CARGO_BIN_EXE_loopr-test-sandbox-probe");

/// The probe where every sandboxed command sees it: a copy outside /tmp, made once per test
/// process.
fn probe_binary() -> &'static str {
    static COPY: std::sync::OnceLock<(tempfile::TempDir, String)> = std::sync::OnceLock::new();
    let (_dir, path) = COPY.get_or_init(|| {
        let dir = outside();
        let path = dir.path().join("loopr-test-sandbox-probe");
        std::fs::copy(BUILT_PROBE, &path).expect("copy the probe out of /tmp's reach");
        let path = path.to_str().expect("a UTF-8 path").to_owned();
        (dir, path)
    });
    path
}

/// The tests `<name>::under_bubblewrap` and `<name>::under_landlock`, which run
/// `name(mechanism)`.
macro_rules! under_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn under_bubblewrap() {
                super::$name("bubblewrap").await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn under_landlock() {
                super::$name("landlock").await;
            }
        }
    };
}

/// A directory of the test's own outside the project and outside /tmp (which the sandbox
/// replaces with its own): where "the user's" files and sockets are.
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("loopr-outside-")
        .tempdir_in("/var/tmp")
        .expect("a directory in /var/tmp")
}

/// The probe's `name: outcome` lines.
fn outcomes(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, outcome)| (name.to_owned(), outcome.to_owned()))
        .collect()
}

fn probe(arguments: &str) -> String {
    format!("{} {arguments}", probe_binary())
}

/// Runs `commands` in a freshly planned project under `mechanism` with the `sandbox` table;
/// `None` where the mechanism cannot run here. `prepare` shapes the project first.
async fn run_in(
    mechanism: &str,
    sandbox: impl FnOnce(&nvim::TestDirs) -> serde_json::Value,
    prepare: impl FnOnce(&nvim::TestDirs),
    commands: impl FnOnce(&nvim::TestDirs) -> Vec<String>,
) -> Option<(nvim::TestDirs, Vec<CommandResult>)> {
    settings_or_skip(mechanism)?;
    let (fake, dirs) = planned_project().await;
    prepare(&dirs);
    let settings = sandbox_settings_with(mechanism, sandbox(&dirs)).expect("settings");
    let results = run_commands(&fake, &dirs, &settings, &commands(&dirs)).await;
    Some((dirs, results))
}

/// Listeners of "the user's" (a Neovim server, the session bus, ssh-agent, journald) outside
/// the project: a stream socket and a datagram socket.
struct UserSockets {
    stream: UnixListener,
    datagram: UnixDatagram,
    stream_path: PathBuf,
    datagram_path: PathBuf,
}

impl UserSockets {
    fn bind(dir: &Path) -> UserSockets {
        let stream_path = dir.join("user.sock");
        let datagram_path = dir.join("user.dgram");
        let stream = UnixListener::bind(&stream_path).expect("stream socket");
        stream.set_nonblocking(true).expect("nonblocking");
        let datagram = UnixDatagram::bind(&datagram_path).expect("datagram socket");
        datagram.set_nonblocking(true).expect("nonblocking");
        UserSockets {
            stream,
            datagram,
            stream_path,
            datagram_path,
        }
    }

    fn probe_arguments(&self) -> String {
        format!(
            "unix-escapes {} {}",
            self.stream_path.display(),
            self.datagram_path.display()
        )
    }

    /// How many connections and datagrams reached the sockets (taking them).
    fn reached(&self) -> usize {
        let mut reached = 0;
        while self.stream.accept().is_ok() {
            reached += 1;
        }
        let mut buffer = [0; 16];
        while self.datagram.recv(&mut buffer).is_ok() {
            reached += 1;
        }
        assert!(
            matches!(self.stream.accept(), Err(err) if err.kind() == ErrorKind::WouldBlock),
            "the listener still works"
        );
        reached
    }
}

async fn no_unix_socket_outside_is_reached(mechanism: &str) {
    let outside = outside();
    let sockets = UserSockets::bind(outside.path());
    // Without a sandbox the probe's ways work on this machine, so a refusal below is the
    // sandbox's doing.
    let unconfined = std::process::Command::new(probe_binary())
        .args(sockets.probe_arguments().split(' '))
        .output()
        .expect("run the probe");
    let unconfined = outcomes(&String::from_utf8_lossy(&unconfined.stdout));
    assert_eq!(unconfined["socket"], "connected", "{unconfined:?}");
    if unconfined["io_uring"] != "connected" {
        eprintln!("io_uring does not work here: {}", unconfined["io_uring"]);
    }
    assert!(sockets.reached() > 0);

    let Some((_dirs, results)) = run_in(
        mechanism,
        |_| json!({}),
        |_| {},
        |_| vec![probe(&sockets.probe_arguments())],
    )
    .await
    else {
        return;
    };
    let confined = outcomes(&results[0].text);
    assert_eq!(
        confined.keys().collect::<Vec<_>>(),
        [
            "io_uring",
            "socket",
            "socketpair-datagram-connect",
            "socketpair-datagram-sendto",
            "socketpair-stream"
        ],
        "{}",
        results[0].text
    );
    for (way, outcome) in &confined {
        assert_ne!(outcome, "connected", "{way} reached a socket outside");
    }
    assert_eq!(
        confined["socket"], "socket: Operation not permitted (os error 1)",
        "{confined:?}"
    );
    assert_eq!(
        confined["io_uring"], "io_uring_setup: Operation not permitted (os error 1)",
        "{confined:?}"
    );
    assert_eq!(sockets.reached(), 0, "a command reached a socket outside");
}

under_both!(no_unix_socket_outside_is_reached);

const EPERM: &str = "Operation not permitted (os error 1)";

/// What each call of `sandbox_probe refused-syscalls` must answer in the sandbox.
fn refusals() -> Vec<(&'static str, &'static str)> {
    let mut refusals = vec![
        ("io_uring_setup", EPERM),
        ("ptrace", EPERM),
        ("process_vm_readv", EPERM),
        ("process_vm_writev", EPERM),
        ("pidfd_getfd", EPERM),
        ("unshare(CLONE_NEWUSER)", EPERM),
        ("clone(CLONE_NEWUSER)", EPERM),
        // So that libc falls back to clone, whose flags the filter can read.
        ("clone3", "Function not implemented (os error 38)"),
        ("setns", EPERM),
        ("bpf", EPERM),
        ("perf_event_open", EPERM),
        ("userfaultfd", EPERM),
        ("keyctl", EPERM),
        ("add_key", EPERM),
        ("request_key", EPERM),
        ("mount", EPERM),
        ("umount2", EPERM),
        ("open_tree", EPERM),
        ("mount_setattr", EPERM),
        ("name_to_handle_at", EPERM),
        ("open_by_handle_at", EPERM),
        ("ioctl(TIOCSTI)", EPERM),
        ("ioctl(TIOCLINUX)", EPERM),
        ("socket(AF_UNIX)", EPERM),
        (
            "socket(AF_ALG)",
            "Address family not supported by protocol (os error 97)",
        ),
        (
            "socket(AF_VSOCK)",
            "Address family not supported by protocol (os error 97)",
        ),
        ("socketpair(AF_UNIX, SOCK_DGRAM)", EPERM),
    ];
    if cfg!(target_arch = "x86_64") {
        refusals.push(("x32 getpid", EPERM));
    }
    refusals
}

async fn refused_calls_fail_and_ordinary_work_runs(mechanism: &str) {
    let Some((_dirs, results)) = run_in(
        mechanism,
        |_| json!({}),
        |_| {},
        |_| {
            vec![
                probe("refused-syscalls"),
                probe("ordinary-work"),
                "printf 'b\\na\\n' | sort | head -n 1 && (true &) && wait && echo shell ok"
                    .to_owned(),
            ]
        },
    )
    .await
    else {
        return;
    };
    let answered = outcomes(&results[0].text);
    let mut wrong = Vec::new();
    for (call, expected) in refusals() {
        match answered.get(call) {
            Some(outcome) if outcome == expected => {}
            other => wrong.push(format!("{call}: {other:?}, expected {expected}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n\n{}",
        wrong.join("\n"),
        results[0].text
    );
    let ordinary = &results[1];
    assert!(!ordinary.is_error, "{}", ordinary.text);
    assert_eq!(
        outcomes(&ordinary.text)
            .values()
            .filter(|o| *o == "ok")
            .count(),
        8,
        "{}",
        ordinary.text
    );
    assert!(
        !results[2].is_error && results[2].text.contains("a\nshell ok"),
        "{}",
        results[2].text
    );
}

under_both!(refused_calls_fail_and_ordinary_work_runs);

/// A file's mode, modification time and `user.loopr` attribute.
fn metadata_of(path: &Path) -> (u32, std::time::SystemTime, Option<Vec<u8>>) {
    let metadata = std::fs::metadata(path).expect("metadata");
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    let mut value = [0u8; 64];
    // SAFETY: NUL-terminated path and attribute name, a buffer of its length.
    let length = unsafe {
        libc::getxattr(
            name.as_ptr(),
            c"user.loopr".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    let attribute = usize::try_from(length)
        .ok()
        .map(|length| value[..length].to_vec());
    (
        metadata.permissions().mode() & 0o7777,
        metadata.modified().expect("mtime"),
        attribute,
    )
}

fn change_metadata(path: &Path) -> String {
    let path = path.display();
    format!(
        "chmod 600 {path}; touch -d 2001-01-01 {path}; {} set-xattr {path}",
        probe_binary()
    )
}

async fn metadata_outside_the_writable_places_is_unchanged(mechanism: &str) {
    let outside = outside();
    let theirs = outside.path().join("theirs.txt");
    std::fs::write(&theirs, "keep\n").expect("a file outside");
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let before = metadata_of(&theirs);
    let Some((dirs, results)) = run_in(
        mechanism,
        |_| json!({}),
        |dirs| std::fs::write(dirs.project.join("ours.txt"), "ours\n").expect("ours"),
        |_| {
            vec![
                change_metadata(&theirs),
                change_metadata(Path::new("ours.txt")),
            ]
        },
    )
    .await
    else {
        return;
    };
    assert_eq!(
        metadata_of(&theirs),
        before,
        "a command changed a file's metadata outside the project: {}",
        results[0].text
    );
    assert!(results[0].is_error, "{}", results[0].text);
    assert!(!results[1].is_error, "{}", results[1].text);
    let (mode, modified, attribute) = metadata_of(&dirs.project.join("ours.txt"));
    assert_eq!(mode, 0o600);
    // 2001-01-01 is before the billionth second (2001-09-09).
    let billionth = std::time::Duration::from_secs(1_000_000_000);
    assert!(modified < std::time::SystemTime::UNIX_EPOCH + billionth);
    assert_eq!(attribute.as_deref(), Some(&b"probe"[..]));
}

under_both!(metadata_outside_the_writable_places_is_unchanged);

/// Repositories in and around the project: its own `.git`, a nested clone, a submodule (a
/// `.git` file pointing into the project's `.git`), and a worktree of a repository beside
/// the project (a `.git` file pointing outside it, whose `commondir` leads to that repository).
fn make_repositories(dirs: &nvim::TestDirs) {
    let project = &dirs.project;
    let beside = project.parent().expect("parent").join("main-repo/.git");
    for dir in [
        project.join(".git/hooks"),
        project.join(".git/modules/sub/hooks"),
        project.join("vendor/lib/.git/hooks"),
        project.join("sub"),
        project.join("wt"),
        project.join(".husky/_"),
        project.parent().expect("parent").join("other/.git/hooks"),
        beside.join("hooks"),
        beside.join("worktrees/wt"),
    ] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(project.join("sub/.git"), "gitdir: ../.git/modules/sub\n").expect("sub");
    // Husky's hooks: in the working tree, ignored, run by the user's next commit.
    std::fs::write(
        project.join(".git/config"),
        "[core]\n\thooksPath = .husky/_\n",
    )
    .expect("config");
    std::fs::write(
        project.join("wt/.git"),
        format!("gitdir: {}\n", beside.join("worktrees/wt").display()),
    )
    .expect("wt");
    std::fs::write(beside.join("worktrees/wt/commondir"), "../..\n").expect("commondir");
}

/// Commands that write the internals of every repository in and beside the project, with
/// the file each makes (under the project's parent).
const GIT_WRITES: [(&str, &str); 7] = [
    ("touch .git/hooks/x", "project/.git/hooks/x"),
    // Another repository in the writable place beside the project.
    ("touch ../other/.git/hooks/x", "other/.git/hooks/x"),
    ("touch .husky/_/pre-commit", "project/.husky/_/pre-commit"),
    (
        "touch vendor/lib/.git/hooks/x",
        "project/vendor/lib/.git/hooks/x",
    ),
    (
        "touch .git/modules/sub/hooks/x",
        "project/.git/modules/sub/hooks/x",
    ),
    ("touch ../main-repo/.git/hooks/x", "main-repo/.git/hooks/x"),
    (
        "touch ../main-repo/.git/worktrees/wt/x",
        "main-repo/.git/worktrees/wt/x",
    ),
];

/// `GIT_WRITES`, then one that points the submodule elsewhere and one that writes beside the
/// project (which the writable parent allows).
fn write_repositories(_: &nvim::TestDirs) -> Vec<String> {
    GIT_WRITES
        .iter()
        .map(|(command, _)| command.to_string())
        .chain([
            "echo 'gitdir: /tmp/evil' > sub/.git".to_owned(),
            "touch ../beside.txt".to_owned(),
        ])
        .collect()
}

fn writable_parent(dirs: &nvim::TestDirs, allow_git: bool) -> serde_json::Value {
    json!({
        "writable": [dirs.project.parent().expect("parent")],
        "allow_git": allow_git,
    })
}

async fn git_stays_read_only_under_a_writable_parent(mechanism: &str) {
    let Some((dirs, results)) = run_in(
        mechanism,
        |dirs| writable_parent(dirs, false),
        make_repositories,
        write_repositories,
    )
    .await
    else {
        return;
    };
    let around = dirs.project.parent().expect("parent");
    for ((_, written), result) in GIT_WRITES.iter().zip(&results) {
        assert!(
            !around.join(written).exists(),
            "{written} was written: {}",
            result.text
        );
        assert!(result.is_error, "{}", result.text);
    }
    let pointed = &results[GIT_WRITES.len()];
    assert_eq!(
        std::fs::read_to_string(dirs.project.join("sub/.git")).expect("sub/.git"),
        "gitdir: ../.git/modules/sub\n",
        "{}",
        pointed.text
    );
    assert!(pointed.is_error, "{}", pointed.text);
    let beside = &results[GIT_WRITES.len() + 1];
    assert!(!beside.is_error, "{}", beside.text);
    assert!(around.join("beside.txt").exists());
}

under_both!(git_stays_read_only_under_a_writable_parent);

async fn allow_git_lets_commands_write_git(mechanism: &str) {
    let Some((dirs, results)) = run_in(
        mechanism,
        |dirs| writable_parent(dirs, true),
        make_repositories,
        write_repositories,
    )
    .await
    else {
        return;
    };
    for result in &results {
        assert!(!result.is_error, "{}", result.text);
    }
    assert!(dirs.project.join(".git/hooks/x").exists());
    assert!(dirs.project.join("vendor/lib/.git/hooks/x").exists());
}

under_both!(allow_git_lets_commands_write_git);

async fn the_state_directory_is_never_writable(mechanism: &str) {
    let Some((dirs, results)) = run_in(
        mechanism,
        // The state directory allowed by name (what holds it is HOME, which may not be
        // writable; a project holding it is refused).
        |dirs| json!({"writable": [dirs.loopr_home]}),
        |_| {},
        |dirs| {
            let state = dirs.loopr_home.display();
            vec![
                format!("touch {state}/planted"),
                format!("touch {state}/*/loopr.db && ls {state}/*/loopr.db"),
                "touch allowed.txt".to_owned(),
            ]
        },
    )
    .await
    else {
        return;
    };
    assert!(
        !dirs.loopr_home.join("planted").exists(),
        "a command wrote into the state directory: {}",
        results[0].text
    );
    assert!(results[0].is_error, "{}", results[0].text);
    assert!(
        results[1].is_error,
        "a command touched a loop database: {}",
        results[1].text
    );
    assert!(!results[2].is_error, "{}", results[2].text);
    assert!(dirs.project.join("allowed.txt").exists());
}

under_both!(the_state_directory_is_never_writable);

/// Where Loopr has no seccomp filter (an architecture it does not know), neither bubblewrap
/// nor Landlock is claimed as a sandbox: without the filter a command reaches the user's Unix
/// sockets through them, so every command must be asked about instead.
#[test]
fn without_a_seccomp_filter_no_sandbox_is_claimed() {
    let sandbox = |mode: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_loopr"))
            .args([
                "sandbox",
                "--settings",
                &json!({ "sandbox": { "mode": mode } }).to_string(),
            ])
            .env("LOOPR_TEST_HOOKS", "1")
            .env("LOOPR_TEST_NO_SECCOMP", "1")
            .output()
            .expect("run loopr sandbox")
    };
    let auto = sandbox("auto");
    let described = String::from_utf8_lossy(&auto.stdout);
    assert!(!auto.status.success(), "{described}");
    assert!(
        described.starts_with("none: ") && described.contains("no seccomp filter"),
        "{described}"
    );
    for mode in ["bubblewrap", "landlock"] {
        let explicit = sandbox(mode);
        let refused = String::from_utf8_lossy(&explicit.stderr);
        assert!(!explicit.status.success(), "{mode}: {refused}");
        assert!(refused.contains("no seccomp filter"), "{mode}: {refused}");
    }
}
