//! A phase's commit against real git repositories: only the phase's files, the user's edits
//! and staged changes left as they were, the trailers, the hooks, a HEAD moved meanwhile.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::tools::{AcceptAll, Approver, Decision, RecordingApprover, Sandbox};

/// A repository with a.txt, b.txt and c.txt committed, and an identity of its own.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.name", "Ada Lovelace"]);
        repo.git(&["config", "user.email", "ada@example.com"]);
        for name in ["a.txt", "b.txt", "c.txt"] {
            repo.write(name, &format!("{name} as committed\n"));
        }
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "initial"]);
        repo
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical")
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).expect("write");
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(name)).ok()
    }

    /// Runs git in the repository; its output.
    fn git(&self, args: &[&str]) -> String {
        crate::test_support::git(self.dir.path(), args)
    }

    fn hook(&self, name: &str, script: &str) {
        let path = self.dir.path().join(".git/hooks").join(name);
        std::fs::write(&path, script).expect("hook");
        let mut permissions = std::fs::metadata(&path).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).expect("chmod");
    }

    /// The phase's work: a.txt changed, new.txt created, c.txt deleted. The user's: b.txt
    /// edited, staged.txt staged.
    fn phase_and_user_changes(&self) -> Vec<String> {
        self.write("a.txt", "a.txt as the phase left it\n");
        self.write("new.txt", "created by the phase\n");
        std::fs::remove_file(self.dir.path().join("c.txt")).expect("rm");
        self.write("b.txt", "the user's edit\n");
        self.write("staged.txt", "the user's staged file\n");
        self.git(&["add", "staged.txt"]);
        ["a.txt", "c.txt", "new.txt"].map(str::to_owned).to_vec()
    }

    async fn commit_with(&self, files: &[String], approver: Arc<dyn Approver>) -> CommitOutcome {
        let root = self.root();
        let git = Git::find(&root).await.expect("a repository");
        let message = CommitMessage {
            title: "Print the version".to_owned(),
            text: "Print the version\n\nMake --version print it.\n\nLoopr-Plan: Version flag\nLoopr-Phase: print-version\n".to_owned(),
        };
        let hooks = CommitHooks {
            sandbox: Arc::new(Sandbox::unconfined("a test")),
            root: root.clone(),
            timeout: Duration::from_secs(60),
            approver,
            loop_id: "code-1".to_owned(),
            phase: "print-version".to_owned(),
            cancel: CancellationToken::new(),
        };
        PhaseCommit {
            git: &git,
            root: &root,
            files,
            message: &message,
            scratch: "loopr-commit-code-1",
        }
        .commit(&hooks)
        .await
    }

    async fn commit(&self, files: &[String]) -> CommitOutcome {
        self.commit_with(files, Arc::new(AcceptAll)).await
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }
}

fn not_committed(outcome: CommitOutcome) -> NotCommitted {
    match outcome {
        CommitOutcome::NotCommitted(why) => why,
        other => panic!("committed: {other:?}"),
    }
}

#[tokio::test]
async fn only_the_phase_s_files_are_committed_the_user_s_edit_and_staged_file_stay() {
    let repo = Repo::new();
    let files = repo.phase_and_user_changes();
    let before = repo.head();
    let outcome = repo.commit(&files).await;
    let CommitOutcome::Committed {
        commit,
        short,
        afterwards,
    } = outcome
    else {
        panic!("not committed: {outcome:?}");
    };
    assert_eq!(afterwards, Vec::<String>::new());
    assert_eq!(repo.head(), commit);
    assert!(commit.starts_with(&short), "{short}");
    assert_eq!(repo.git(&["rev-parse", "HEAD~1"]).trim(), before);
    assert_eq!(
        repo.git(&["show", "--name-status", "--format=", "HEAD"]),
        "M\ta.txt\nD\tc.txt\nA\tnew.txt\n"
    );
    assert_eq!(
        repo.git(&["log", "-1", "--format=%an <%ae>%n%s%n%(trailers)"]),
        "Ada Lovelace <ada@example.com>\nPrint the version\nLoopr-Plan: Version flag\nLoopr-Phase: print-version\n\n"
    );
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        " M b.txt\nA  staged.txt\n",
        "the user's edit unstaged, the staged file staged, the phase's files clean"
    );
    assert_eq!(
        repo.git(&["diff", "--cached", "--name-only"]),
        "staged.txt\n"
    );
    assert_eq!(
        repo.git(&["reflog", "-1", "--format=%gs", "main"]),
        "commit: Print the version\n"
    );
    assert_eq!(repo.read("b.txt").as_deref(), Some("the user's edit\n"));
}

#[tokio::test]
async fn a_failing_pre_commit_hook_commits_nothing_and_says_why() {
    let repo = Repo::new();
    repo.hook(
        "pre-commit",
        "#!/bin/sh\necho checking\necho 'lint: a.txt is badly formatted' >&2\nexit 1\n",
    );
    let files = repo.phase_and_user_changes();
    let before = repo.head();
    let status_before = repo.git(&["status", "--porcelain"]);
    let why = not_committed(repo.commit(&files).await).to_string();
    assert!(
        why.starts_with("the pre-commit hook failed (exit status 1); its output ended with:\n"),
        "{why}"
    );
    assert!(
        why.ends_with("checking\nlint: a.txt is badly formatted"),
        "{why}"
    );
    assert_eq!(repo.head(), before);
    assert_eq!(repo.git(&["status", "--porcelain"]), status_before);
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("a.txt as the phase left it\n")
    );
}

#[tokio::test]
async fn the_hooks_see_only_the_phase_s_changes_and_commit_msg_may_add_to_the_message() {
    let repo = Repo::new();
    repo.hook(
        "pre-commit",
        "#!/bin/sh\ngit diff --cached --name-only > \"$(git rev-parse --git-dir)/seen\"\n",
    );
    repo.hook(
        "commit-msg",
        "#!/bin/sh\nprintf 'Reviewed-by: hook\\n' >> \"$1\"\n",
    );
    let files = repo.phase_and_user_changes();
    let outcome = repo.commit(&files).await;
    assert!(
        matches!(outcome, CommitOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.dir.path().join(".git/seen")).expect("seen"),
        "a.txt\nc.txt\nnew.txt\n"
    );
    assert_eq!(
        repo.git(&["log", "-1", "--format=%(trailers:key=Reviewed-by)"]),
        "Reviewed-by: hook\n\n"
    );
}

#[tokio::test]
async fn a_head_the_user_moved_meanwhile_is_not_overwritten() {
    let repo = Repo::new();
    // The user commits while the phase's commit is being made (here, during its hook).
    repo.hook(
        "pre-commit",
        "#!/bin/sh\nenv -u GIT_INDEX_FILE git commit -q --no-verify --allow-empty -m \"the user's commit\"\n",
    );
    let files = repo.phase_and_user_changes();
    let why = not_committed(repo.commit(&files).await);
    assert!(matches!(why, NotCommitted::HeadMoved { .. }), "{why:?}");
    assert!(why.to_string().contains("HEAD moved"), "{why}");
    assert_eq!(
        repo.git(&["log", "--format=%s", "main"]),
        "the user's commit\ninitial\n"
    );
    assert_eq!(
        repo.read("new.txt").as_deref(),
        Some("created by the phase\n"),
        "the changes stay"
    );
}

#[tokio::test]
async fn no_commit_on_a_detached_head_or_during_a_merge() {
    let repo = Repo::new();
    let files = repo.phase_and_user_changes();
    let head = repo.head();
    repo.git(&["checkout", "-q", "--detach"]);
    let why = not_committed(repo.commit(&files).await);
    assert_eq!(why.to_string(), "HEAD is detached (on no branch)");
    repo.git(&["checkout", "-q", "main"]);
    std::fs::write(repo.dir.path().join(".git/MERGE_HEAD"), format!("{head}\n")).expect("merge");
    let why = not_committed(repo.commit(&files).await);
    assert_eq!(why.to_string(), "a merge is in progress");
    assert_eq!(repo.head(), head);
}

#[tokio::test]
async fn an_unborn_branch_gets_a_root_commit_and_no_identity_is_named() {
    let repo = Repo::new();
    repo.git(&["checkout", "-q", "--orphan", "fresh"]);
    repo.git(&["rm", "-rq", "--cached", "."]);
    let files = ["a.txt".to_owned()];
    let outcome = repo.commit(&files).await;
    assert!(
        matches!(outcome, CommitOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(repo.git(&["ls-tree", "--name-only", "fresh"]), "a.txt\n");
    assert_eq!(
        repo.git(&["reflog", "-1", "--format=%gs", "fresh"]),
        "commit (initial): Print the version\n"
    );

    // Empty here wins over any identity the machine's user configured.
    repo.git(&["config", "user.name", ""]);
    repo.git(&["config", "user.email", ""]);
    repo.write("a.txt", "changed again\n");
    let why = not_committed(repo.commit(&files).await).to_string();
    assert!(
        why.contains("set yours with git config --global user.name"),
        "{why}"
    );
}

#[tokio::test]
async fn unsandboxed_hooks_are_asked_about_and_a_refusal_commits_nothing() {
    let repo = Repo::new();
    repo.hook(
        "pre-commit",
        "#!/bin/sh\ntouch \"$(git rev-parse --git-dir)/ran\"\n",
    );
    let files = repo.phase_and_user_changes();
    let head = repo.head();
    let approver = Arc::new(RecordingApprover {
        decision: Decision::Reject("not now".to_owned()),
        asked: Default::default(),
    });
    let why = not_committed(repo.commit_with(&files, approver.clone()).await).to_string();
    assert_eq!(
        why,
        "running the commit hooks (pre-commit) was refused: not now"
    );
    assert!(!repo.dir.path().join(".git/ran").exists());
    assert_eq!(repo.head(), head);
    let asked = approver.asked.lock().expect("lock");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].kind.as_str(), "command");
    assert!(
        asked[0].detail.contains("UNSANDBOXED"),
        "{}",
        asked[0].detail
    );
}

#[tokio::test]
async fn files_holding_what_head_holds_make_no_commit() {
    let repo = Repo::new();
    let head = repo.head();
    let outcome = repo.commit(&["a.txt".to_owned()]).await;
    assert!(
        matches!(outcome, CommitOutcome::NothingToCommit),
        "{outcome:?}"
    );
    assert_eq!(repo.head(), head);
}
