//! Checkpoints against a real git: what they hold, what they leave alone, and restoring from
//! them.

use std::path::Path;

use super::*;
use crate::agent::baseline::SkipReason;
use crate::test_support::git;
use crate::tools::{NoBuffers, ProjectRoot};

fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// What a checkpoint must leave exactly as it was.
fn user_state(dir: &Path) -> Vec<String> {
    [
        &["rev-parse", "HEAD"][..],
        &["status", "--porcelain=v1", "-z"],
        &["branch", "-a", "-v"],
        &["stash", "list"],
        &["reflog", "show", "HEAD"],
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads",
            "refs/tags",
        ],
    ]
    .iter()
    .map(|args| git(dir, args))
    .collect()
}

/// A repository with a commit, a branch, a stash, a staged change, an unstaged one, an
/// untracked file and an ignored one.
fn busy_repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().expect("repo");
    let dir = repo.path();
    git(dir, &["init", "-q", "-b", "main"]);
    write(dir, "a.txt", "a\n");
    write(dir, "staged.txt", "one\n");
    write(dir, ".gitignore", "ignored.log\n");
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "first"]);
    git(dir, &["branch", "side"]);
    write(dir, "a.txt", "stashed\n");
    git(dir, &["stash", "-q"]);
    write(dir, "staged.txt", "two, staged\n");
    git(dir, &["add", "staged.txt"]);
    write(dir, "a.txt", "a, unstaged\n");
    write(dir, "new.txt", "untracked\n");
    write(dir, "ignored.log", "noise\n");
    repo
}

#[tokio::test]
async fn a_checkpoint_holds_the_working_tree_and_leaves_head_index_branches_stash_and_reflog() {
    let repo = busy_repository();
    let dir = repo.path();
    write(dir, "-x", "looks like an option\n");
    write(dir, "we\"ird\nname.txt", "quoted\n");
    #[cfg(unix)]
    crate::test_support::mkfifo(&dir.join("pipe"));
    let state = tempfile::tempdir().expect("state");
    let before = user_state(dir);

    let checkpoints = Checkpoints::find(dir).await.expect("a git work tree");
    let id = LoopId::parse("20261126-120000-000-aaaaaaaaaa").expect("id");
    let commit = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");

    assert_eq!(user_state(dir), before, "nothing of the user's changed");
    assert_eq!(
        git(dir, &["rev-parse", &Checkpoints::ref_name(&id, BEFORE)]).trim(),
        commit
    );
    assert_eq!(
        git(dir, &["rev-parse", &format!("{commit}^")]),
        git(dir, &["rev-parse", "HEAD"]),
        "its parent is HEAD"
    );
    let entries = checkpoints.entries(&commit).await.expect("entries");
    let names: Vec<&str> = entries.keys().filter_map(|name| name.to_str()).collect();
    assert_eq!(
        names,
        vec![
            "-x",
            ".gitignore",
            "a.txt",
            "new.txt",
            "staged.txt",
            "we\"ird\nname.txt"
        ],
        "no ignored file, no FIFO"
    );
    let Some(Entry::File { blob, .. }) = entries.get(Path::new("a.txt")) else {
        panic!("{entries:?}");
    };
    assert_eq!(
        checkpoints.blob(blob).await.expect("blob"),
        b"a, unstaged\n",
        "the working tree's content, not the index's"
    );
    let leftovers: Vec<_> = std::fs::read_dir(state.path())
        .expect("state")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert!(
        leftovers.is_empty(),
        "the temporary index is gone: {leftovers:?}"
    );
}

#[tokio::test]
async fn a_repository_without_a_commit_gets_a_checkpoint_without_a_parent() {
    let repo = tempfile::tempdir().expect("repo");
    git(repo.path(), &["init", "-q"]);
    write(repo.path(), "only.txt", "x\n");
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(repo.path()).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-bbbbbbbbbb").expect("id");
    let commit = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    assert_eq!(
        git(repo.path(), &["status", "--porcelain"]),
        "?? only.txt\n"
    );
    let entries = checkpoints.entries(&commit).await.expect("entries");
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        vec![Path::new("only.txt")]
    );
}

#[tokio::test]
async fn restoring_brings_back_modified_and_deleted_files_removes_created_ones_and_keeps_the_users()
{
    let repo = busy_repository();
    let dir = repo.path();
    write(dir, "bin/run.sh", "#!/bin/sh\necho run\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("bin/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        std::os::unix::fs::symlink("a.txt", dir.join("link")).expect("link");
    }
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-cccccccccc").expect("id");
    let commit = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    // The phase's work, then the user's edit of a file the phase changed.
    write(dir, "a.txt", "the phase's\n");
    std::fs::remove_file(dir.join("bin/run.sh")).expect("rm");
    std::fs::remove_dir(dir.join("bin")).expect("rmdir");
    std::fs::remove_file(dir.join("link")).expect("rm link");
    write(dir, "created.txt", "by the phase\n");
    write(dir, "new.txt", "the phase's, then the user's\n");
    let root = ProjectRoot::new(dir).expect("root");
    let fingerprint = |text: &str| Some(crate::agent::baseline::hash_of(text.as_bytes()));
    let paths = vec![
        PathToRestore {
            relative: "a.txt".into(),
            expected: fingerprint("the phase's\n"),
            earlier: None,
        },
        PathToRestore {
            relative: "bin/run.sh".into(),
            expected: None,
            earlier: None,
        },
        PathToRestore {
            relative: "link".into(),
            expected: None,
            earlier: None,
        },
        PathToRestore {
            relative: "created.txt".into(),
            expected: fingerprint("by the phase\n"),
            earlier: None,
        },
        PathToRestore {
            relative: "new.txt".into(),
            expected: fingerprint("the phase's\n"),
            earlier: None,
        },
    ];
    let entries = checkpoints.entries(&commit).await.expect("entries");
    let restored = restore_paths(&checkpoints, &entries, &root, paths, false, &NoBuffers).await;

    let read = |relative: &str| std::fs::read_to_string(dir.join(relative)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("a, unstaged\n"));
    assert_eq!(read("bin/run.sh").as_deref(), Some("#!/bin/sh\necho run\n"));
    assert_eq!(read("created.txt"), None);
    assert_eq!(
        read("new.txt").as_deref(),
        Some("the phase's, then the user's\n"),
        "changed since: kept"
    );
    assert_eq!(
        restored.report.skipped,
        vec![(dir.join("new.txt"), SkipReason::ChangedSince)]
    );
    assert_eq!(restored.report.restored.len(), 4);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("bin/run.sh"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "executable again");
        assert_eq!(
            std::fs::read_link(dir.join("link")).expect("a link"),
            Path::new("a.txt"),
            "the link as git stored it"
        );
    }
    assert_eq!(restored.now.get(Path::new("created.txt")), Some(&None));
}

#[tokio::test]
async fn only_refs_under_refs_loopr_are_listed_and_deleted() {
    let repo = busy_repository();
    let dir = repo.path();
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-dddddddddd").expect("id");
    checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    let by_loop = checkpoints.refs_by_loop().await.expect("refs");
    let name = Checkpoints::ref_name(&id, BEFORE);
    assert_eq!(
        by_loop.get(id.as_str()),
        Some(&vec![name.clone()]),
        "{by_loop:?}"
    );
    let branches = git(dir, &["branch", "--list"]);
    checkpoints
        .delete_refs(&[name, "refs/heads/side".to_owned()])
        .await
        .expect("deleted");
    assert!(checkpoints.refs_by_loop().await.expect("refs").is_empty());
    assert_eq!(
        git(dir, &["branch", "--list"]),
        branches,
        "a branch is never deleted"
    );
}

#[tokio::test]
async fn a_checkpoint_that_takes_too_long_is_given_up_leaving_no_ref_no_index_and_git_as_it_was() {
    let repo = busy_repository();
    let dir = repo.path();
    // A huge file: hashing it takes far longer than the time allowed here.
    std::fs::File::create(dir.join("huge.bin"))
        .and_then(|file| file.set_len(8 * 1024 * 1024 * 1024))
        .expect("sparse file");
    let state = tempfile::tempdir().expect("state");
    let before = user_state(dir);
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-ffffffffff").expect("id");
    let started = std::time::Instant::now();
    let taken = checkpoints
        .take(&id, BEFORE, state.path(), Duration::from_millis(300))
        .await;
    assert!(
        matches!(taken, Err(CheckpointError::Git(GitError::TimedOut { .. }))),
        "{taken:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(checkpoints.refs_by_loop().await.expect("refs").is_empty());
    assert_eq!(
        std::fs::read_dir(state.path()).expect("state").count(),
        0,
        "no temporary index left"
    );
    assert_eq!(user_state(dir), before);
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_in_place_of_a_gitignore_means_no_checkpoint_instead_of_a_hang() {
    let repo = busy_repository();
    let dir = repo.path();
    std::fs::create_dir(dir.join("src")).expect("mkdir");
    crate::test_support::mkfifo(&dir.join("src/.gitignore"));
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-abababab00").expect("id");
    let taken = tokio::time::timeout(
        Duration::from_secs(20),
        checkpoints.take(&id, BEFORE, state.path(), TAKE_TIMEOUT),
    )
    .await
    .expect("no hang");
    assert_eq!(
        taken.map_err(|err| err.to_string()),
        Err("src/.gitignore is not a regular file, and git would wait on it forever".to_owned())
    );
}

#[tokio::test]
async fn a_project_below_the_top_of_the_work_tree_is_checkpointed_by_its_own_paths() {
    let repo = busy_repository();
    let dir = repo.path();
    write(dir, "project/inner.txt", "inner\n");
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(&dir.join("project")).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-abababab01").expect("id");
    let commit = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    let entries = checkpoints.entries(&commit).await.expect("entries");
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        vec![Path::new("inner.txt")]
    );
    let whole = git(dir, &["ls-tree", "-r", "--name-only", &commit]);
    assert_eq!(
        whole, ".gitignore\na.txt\nproject/inner.txt\nstaged.txt\n",
        "outside the project: HEAD's tree, not the working tree's"
    );
}

/// A file named with bytes that are not UTF-8 (as a command may create one): a phase creates
/// one and changes another; the rewind puts both back by their bytes, and its undo brings the
/// phase's work back.
#[cfg(unix)]
#[tokio::test]
async fn files_named_with_invalid_utf8_are_restored_removed_and_brought_back_by_their_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let repo = busy_repository();
    let dir = repo.path();
    let changed = Path::new(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    let created = Path::new(std::ffi::OsStr::from_bytes(b"sub/n\xffew.txt"));
    std::fs::write(dir.join(changed), "before\n").expect("write");
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-abababab02").expect("id");
    let before = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    let entries = checkpoints.entries(&before).await.expect("entries");
    let names: Vec<String> = entries.keys().map(|name| format!("{name:?}")).collect();
    assert!(
        names.iter().any(|name| name.contains("caf\\xE9.txt")),
        "the name's bytes are kept: {names:?}"
    );
    // The phase's work: one file changed, one created (in a new folder).
    std::fs::write(dir.join(changed), "the phase's\n").expect("write");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join(created), "created\n").expect("write");
    let fingerprint = |text: &str| Some(crate::agent::baseline::hash_of(text.as_bytes()));
    let snapshot = checkpoints
        .take_also(
            &id,
            REWOUND,
            state.path(),
            TAKE_TIMEOUT,
            vec![changed.to_owned(), created.to_owned()],
        )
        .await
        .expect("the rewind's snapshot");
    let root = ProjectRoot::new(dir).expect("root");
    let paths = vec![
        PathToRestore {
            relative: changed.to_owned(),
            expected: fingerprint("the phase's\n"),
            earlier: None,
        },
        PathToRestore {
            relative: created.to_owned(),
            expected: fingerprint("created\n"),
            earlier: None,
        },
    ];
    let rewound = restore_paths(&checkpoints, &entries, &root, paths, false, &NoBuffers).await;
    assert_eq!(rewound.report.skipped, vec![]);
    assert_eq!(
        std::fs::read_to_string(dir.join(changed)).ok().as_deref(),
        Some("before\n")
    );
    assert!(!dir.join(created).exists(), "created: removed");

    // Undone: each path the rewind wrote gets back what the snapshot holds.
    let undo_paths = rewound
        .now
        .iter()
        .map(|(relative, now)| PathToRestore {
            relative: relative.clone(),
            expected: now.clone(),
            earlier: None,
        })
        .collect();
    let snapshot_entries = checkpoints.entries(&snapshot).await.expect("entries");
    let undone = restore_paths(
        &checkpoints,
        &snapshot_entries,
        &root,
        undo_paths,
        false,
        &NoBuffers,
    )
    .await;
    assert_eq!(undone.report.skipped, vec![]);
    assert_eq!(undone.report.restored.len(), 2);
    assert_eq!(
        std::fs::read_to_string(dir.join(changed)).ok().as_deref(),
        Some("the phase's\n")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(created)).ok().as_deref(),
        Some("created\n")
    );
}

/// A file over what git's output may hold (32 MiB) is not restored, and the rewind says so by
/// its name, never skipping it unsaid.
#[tokio::test]
async fn a_file_too_large_to_restore_is_reported_by_name() {
    let repo = busy_repository();
    let dir = repo.path();
    std::fs::write(dir.join("big.bin"), vec![b'x'; 33 * 1024 * 1024]).expect("write");
    let state = tempfile::tempdir().expect("state");
    let checkpoints = Checkpoints::find(dir).await.expect("git");
    let id = LoopId::parse("20261126-120000-000-abababab03").expect("id");
    let before = checkpoints
        .take(&id, BEFORE, state.path(), TAKE_TIMEOUT)
        .await
        .expect("taken");
    std::fs::write(dir.join("big.bin"), "the phase's\n").expect("write");
    let root = ProjectRoot::new(dir).expect("root");
    let entries = checkpoints.entries(&before).await.expect("entries");
    let paths = vec![PathToRestore {
        relative: "big.bin".into(),
        expected: Some(crate::agent::baseline::hash_of(b"the phase's\n")),
        earlier: None,
    }];
    let restored = restore_paths(&checkpoints, &entries, &root, paths, false, &NoBuffers).await;
    assert_eq!(restored.report.restored, Vec::<std::path::PathBuf>::new());
    let [(path, SkipReason::Unrestorable(why))] = restored.report.skipped.as_slice() else {
        panic!("{:?}", restored.report.skipped);
    };
    assert_eq!(path, &dir.join("big.bin"));
    assert!(
        why.starts_with("it is over 32 MiB in the checkpoint, more than a rewind restores"),
        "{why}"
    );
}
