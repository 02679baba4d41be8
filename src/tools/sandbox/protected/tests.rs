//! Tests of what the sandbox keeps read-only inside writable places (git directories and
//! what their config runs).

use super::*;

/// A project in a directory of its own, beside which a test may put more.
struct Tree {
    _temp: tempfile::TempDir,
    base: PathBuf,
    project: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = temp.path().canonicalize().expect("canonical");
        let project = base.join("project");
        std::fs::create_dir(&project).expect("project");
        Tree {
            _temp: temp,
            base,
            project,
        }
    }

    fn dir(&self, path: &str) -> PathBuf {
        let dir = self.base.join(path);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn file(&self, path: &str, text: &str) -> PathBuf {
        let file = self.base.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, text).expect("write");
        file
    }
}

#[test]
fn the_git_of_the_project_of_nested_repositories_and_what_git_files_name_stay_read_only() {
    let tree = Tree::new();
    let git = tree
        .dir("project/.git/hooks")
        .parent()
        .expect("git")
        .to_owned();
    tree.dir("project/.git/modules/sub/hooks");
    let nested = tree.dir("project/vendor/lib/.git");
    let deep = tree.dir("project/a/b/c/d/e/.git");
    let submodule = tree.file("project/sub/.git", "gitdir: ../.git/modules/sub\n");
    let main = tree.dir("main/.git");
    tree.dir("main/.git/worktrees/wt");
    tree.file("main/.git/worktrees/wt/commondir", "../..\n");
    let worktree = tree.file(
        "project/wt/.git",
        &format!("gitdir: {}\n", main.join("worktrees/wt").display()),
    );

    let mut expected = vec![git, deep, submodule, nested, worktree];
    expected.sort();
    // The submodule's Git directory is inside the project's .git; the worktree's main
    // repository is outside every writable place, so read-only already.
    assert_eq!(read_only_paths(&tree.project, &[], false, None), expected);

    // With the project's parent writable, the main repository and its worktree's directory
    // (inside it) are kept read-only too.
    expected.push(main);
    expected.sort();
    assert_eq!(
        read_only_paths(&tree.project, std::slice::from_ref(&tree.base), false, None),
        expected
    );
}

#[test]
fn links_are_not_followed_and_only_small_regular_files_are_read() {
    let tree = Tree::new();
    let outside = tree.dir("outside");
    tree.dir("outside/repo/.git");
    std::os::unix::fs::symlink(&outside, tree.project.join("link")).expect("symlink");
    std::os::unix::fs::symlink(&tree.project, tree.project.join("loop")).expect("symlink");
    let fifo = tree.dir("project/fifo").join(".git");
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let huge = tree.file(
        "project/huge/.git",
        &format!("gitdir: {}\n", "x".repeat(10_000)),
    );

    let project = tree.project.clone();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(read_only_paths(&project, &[], false, None)));
    let kept = receiver
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a FIFO named .git never blocks the search");
    assert_eq!(kept, vec![fifo, huge]);
}

#[test]
fn the_state_directory_is_kept_read_only_only_inside_a_writable_place() {
    let tree = Tree::new();
    let state = tree.dir("home/.loopr");
    let home = tree.base.join("home");
    assert_eq!(
        read_only_paths(&tree.project, &[], true, Some(&state)),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        read_only_paths(&tree.project, &[home], true, Some(&state)),
        vec![state]
    );
}

#[test]
fn allow_git_leaves_every_git_writable() {
    let tree = Tree::new();
    tree.dir("project/.git");
    tree.dir("project/vendor/lib/.git");
    assert_eq!(
        read_only_paths(&tree.project, &[], true, None),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn what_a_repositorys_config_runs_from_the_working_tree_stays_read_only() {
    let tree = Tree::new();
    // Husky's hooks directory, a fsmonitor script and an included config file, all in the
    // working tree (the included file names a pager script of its own).
    tree.file(
        "project/.git/config",
        "[core]\n\tbare = false\n\thooksPath = .husky/_ ; husky\n\
         \tfsmonitor = \"tools/watch.sh\"\n[include]\n\tpath = ../extra.gitconfig\n\
         [remote \"origin\"]\n\turl = https://example.com/app.git\n",
    );
    tree.file(
        "project/extra.gitconfig",
        "[core]\n\tpager = scripts/page --color\n",
    );
    let hooks = tree.dir("project/.husky/_");
    let monitor = tree.file("project/tools/watch.sh", "#!/bin/sh\n");
    let pager = tree.file("project/scripts/page", "#!/bin/sh\n");
    let included = tree.base.join("project/extra.gitconfig");
    let kept = read_only_paths(&tree.project, &[], false, None);
    for path in [&hooks, &monitor, &included, &pager] {
        assert!(kept.contains(path), "{} in {kept:?}", path.display());
    }
    assert!(
        read_only_paths(&tree.project, &[], true, None).is_empty(),
        "allow_git lets commands write all of it"
    );
}

#[test]
fn the_repositories_in_a_writable_place_beside_the_project_stay_read_only_too() {
    let tree = Tree::new();
    let src = tree.dir("src");
    let other = tree.dir("src/other/.git/hooks");
    let deeper = tree.dir("src/group/team/app/.git");
    let too_deep = tree.dir("src/a/b/c/d/e/.git");
    let kept = read_only_paths(&tree.project, &[src], false, None);
    for path in [other.parent().expect(".git"), deeper.as_path()] {
        assert!(
            kept.iter().any(|kept| kept == path),
            "{} in {kept:?}",
            path.display()
        );
    }
    assert!(
        !kept.contains(&too_deep),
        "only the first levels of a writable place are searched: {kept:?}"
    );
}
