//! Writing files so a crash leaves the old or the whole new content: one file replaced
//! (synced, or not yet for blobs made durable later), or a new iteration's files written all
//! at once before anything points at them.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::leftovers::{LINK_PREFIX, TEMP_PREFIX};

/// Writes `bytes` to `path` so that readers see either the old file or the whole new one:
/// a temporary file in the same directory is written, fsynced and renamed over the target,
/// then the directory is fsynced so the rename itself survives a crash. New files are
/// private to the user (state under `$LOOPR_HOME`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, bytes, None)
}

/// Like `write_atomic`, for the user's project files: an existing file keeps its permissions
/// (an executable script stays executable) and a new one gets the usual `rw-r--r--`.
pub fn write_atomic_keeping_mode(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let permissions = std::fs::metadata(path)
        .map(|metadata| metadata.permissions())
        .ok()
        .or_else(default_permissions);
    write_atomic_with(path, bytes, permissions)
}

#[cfg(unix)]
fn default_permissions() -> Option<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Some(std::fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn default_permissions() -> Option<std::fs::Permissions> {
    None
}

/// Writes `bytes` to `path` whole or not at all as far as a killed host goes (a temporary
/// file renamed into place), without syncing it: a power cut may lose it, or leave it short
/// under its name. For copies that are checked before they are trusted and made durable when
/// something comes to depend on them (`make_durable`): a baseline's blobs, named by their
/// hash, where a sync of each of thousands of files would be most of the cost.
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_dir(path)?;
    // The directory is made only when missing: thousands of files go into the same one.
    let temp = match written_temp_file(dir, bytes, None) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            written_temp_file(dir, bytes, None)?
        }
        written => written?,
    };
    put_in_place(temp, path).map(drop)
}

/// Makes the file at `path`, written without a sync, durable: its content, then its entry in
/// its directory.
pub fn make_durable(path: &Path) -> io::Result<()> {
    std::fs::File::open(path)?.sync_all()?;
    sync_dir(parent_dir(path)?)
}

fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> io::Result<()> {
    let dir = parent_dir(path)?;
    std::fs::create_dir_all(dir)?;
    let temp = written_temp_file(dir, bytes, permissions)?;
    temp.as_file().sync_all()?;
    put_in_place(temp, path)?;
    sync_dir(dir)
}

/// Writes `files` (path and content, each somewhere under `under`) into directories that
/// nothing reads until the caller publishes them once this returns: a new iteration that the
/// `current` link, the loop's record and its journal point at only afterwards. Each file is
/// written under a temporary name and renamed into place, so a killed host leaves a file
/// whole or not at all (and temporary files the next host sweeps). Since nothing reads the
/// files before they are published, nothing is ordered that need not be: every file, and
/// every directory from `under` down to each file's, is synced once, all at the same time.
/// Only when this returns is every file on disk whole under its name; a power cut before may
/// leave any of them short, unpublished.
///
/// Two cases are ordered all the same, as they may follow a write that published before it
/// was killed (a retry): a file that is already there is synced before it is replaced, and the
/// directories are synced whoever made them (an attempt that failed or was killed made them
/// without syncing their entries).
pub fn write_new_files(under: &Path, files: &[(&Path, &[u8])]) -> io::Result<()> {
    let dirs = directories_for(under, files)?;
    let mut targets = Vec::with_capacity(files.len() + dirs.len());
    for (path, bytes) in files {
        let temp = written_temp_file(parent_dir(path)?, bytes, None)
            .map_err(|err| with_path(err, path))?;
        if std::fs::symlink_metadata(path).is_ok() {
            temp.as_file()
                .sync_all()
                .map_err(|err| with_path(err, path))?;
        }
        let file = put_in_place(temp, path).map_err(|err| with_path(err, path))?;
        targets.push(SyncTarget::File(file, path));
    }
    targets.extend(dirs.iter().map(|dir| SyncTarget::Dir(dir)));
    let syncs: Vec<_> = targets.iter().map(|target| move || target.sync()).collect();
    all_at_once(&syncs)
}

/// What `write_new_files` syncs.
enum SyncTarget<'a> {
    File(std::fs::File, &'a Path),
    Dir(&'a Path),
}

impl SyncTarget<'_> {
    fn sync(&self) -> io::Result<()> {
        match self {
            SyncTarget::File(file, path) => file.sync_all().map_err(|err| with_path(err, path)),
            SyncTarget::Dir(dir) => sync_dir(dir).map_err(|err| with_path(err, dir)),
        }
    }
}

fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

/// Makes the directories `files` go into and returns those to sync: every directory from
/// `under` down to each file's (a directory is reachable only once its parent's entry is on
/// disk, and a file only once its own directory's is).
fn directories_for(under: &Path, files: &[(&Path, &[u8])]) -> io::Result<BTreeSet<PathBuf>> {
    let mut dirs = BTreeSet::new();
    for (path, _) in files {
        let dir = parent_dir(path)?;
        if !dir.starts_with(under) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not under {}", path.display(), under.display()),
            ));
        }
        std::fs::create_dir_all(dir).map_err(|err| with_path(err, dir))?;
        dirs.extend(
            dir.ancestors()
                .take_while(|ancestor| ancestor.starts_with(under))
                .map(Path::to_path_buf),
        );
    }
    Ok(dirs)
}

/// A temporary file next to where `bytes` go, holding them (not yet synced).
fn written_temp_file(
    dir: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> io::Result<tempfile::NamedTempFile> {
    // The pid in the name lets the next host remove what a killed one left.
    let mut temp = tempfile::Builder::new()
        .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
        .tempfile_in(dir)?;
    if let Some(permissions) = permissions {
        temp.as_file().set_permissions(permissions)?;
    }
    temp.write_all(bytes)?;
    Ok(temp)
}

/// Renames a temporary file over `path`; returns the file.
fn put_in_place(temp: tempfile::NamedTempFile, path: &Path) -> io::Result<std::fs::File> {
    if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
        // Crash tests kill the host here, leaving the temporary file behind.
        crate::test_hooks::pause_point(&format!("atomic_write:{name}"));
    }
    temp.persist(path).map_err(|err| err.error)
}

/// Runs every job, each but the first on a thread of its own, and returns the first error.
/// Syncs issued together share the filesystem's journal commits instead of each waiting for
/// the one before. A job no thread could be started for runs here.
fn all_at_once<F>(jobs: &[F]) -> io::Result<()>
where
    F: Fn() -> io::Result<()> + Sync,
{
    let Some((first, others)) = jobs.split_first() else {
        return Ok(());
    };
    std::thread::scope(|scope| {
        let threads: Vec<_> = others
            .iter()
            .map(|job| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, job)
                    .map_err(|_| job)
            })
            .collect();
        let mut result = first();
        for thread in threads {
            let outcome = match thread {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(job) => job(),
            };
            result = result.and(outcome);
        }
        result
    })
}

/// Points the symlink `link` at `target` (a path relative to the link's directory) by creating
/// a new link under a temporary name and renaming it over the old one.
pub fn replace_symlink(target: &Path, link: &Path) -> io::Result<()> {
    let dir = parent_dir(link)?;
    std::fs::create_dir_all(dir)?;
    let temp_link = dir.join(format!(
        "{LINK_PREFIX}{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ));
    symlink(target, &temp_link)?;
    if let Err(err) = std::fs::rename(&temp_link, link) {
        let _ = std::fs::remove_file(&temp_link);
        return Err(err);
    }
    sync_dir(dir)
}

fn parent_dir(path: &Path) -> io::Result<&Path> {
    path.parent().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no parent directory", path.display()),
        )
    })
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::windows::fs::symlink_dir(target, link)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_content_and_leaves_no_temp_files() {
        type Writer = fn(&Path, &[u8]) -> io::Result<()>;
        for write in [write_atomic as Writer, write_atomic_unsynced] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("nested/plan.json");
            write(&path, b"first").expect("first write");
            write(&path, b"second").expect("second write");
            make_durable(&path).expect("durable");
            assert_eq!(std::fs::read(&path).expect("read"), b"second");
            let names: Vec<_> = std::fs::read_dir(dir.path().join("nested"))
                .expect("read_dir")
                .map(|entry| entry.expect("entry").file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("plan.json")]);
        }
    }

    #[cfg(unix)]
    #[test]
    fn project_writes_keep_the_file_mode_and_state_writes_stay_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        write_atomic_keeping_mode(&script, b"#!/bin/sh\necho hi\n").expect("rewrite");
        let mode = |path: &Path| {
            std::fs::metadata(path)
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(&script), 0o755);
        let new_file = dir.path().join("new.rs");
        write_atomic_keeping_mode(&new_file, b"x").expect("create");
        assert_eq!(mode(&new_file), 0o644);
        let state = dir.path().join("plan.json");
        write_atomic(&state, b"{}").expect("state");
        assert_eq!(mode(&state), 0o600);
    }

    #[test]
    fn new_files_land_whole_and_every_directory_down_to_them_is_synced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loop_dir = dir.path().join("loop");
        std::fs::create_dir_all(&loop_dir).expect("loop dir");
        let artifacts = loop_dir.join("iterations/001/artifacts");
        let json = artifacts.join("spec.json");
        let conversation = loop_dir.join("iterations/001/conversation.json");
        let files: [(&Path, &[u8]); 2] = [(&json, b"{}"), (&conversation, b"[]")];
        let synced = directories_for(&loop_dir, &files).expect("directories");
        // Each new directory is reachable only once its parent's entry is on disk.
        let expected: BTreeSet<PathBuf> = [
            loop_dir.clone(),
            loop_dir.join("iterations"),
            loop_dir.join("iterations/001"),
            artifacts.clone(),
        ]
        .into_iter()
        .collect();
        assert_eq!(synced, expected);
        write_new_files(&loop_dir, &files).expect("written");
        assert_eq!(std::fs::read(&json).expect("json"), b"{}");
        assert_eq!(std::fs::read(&conversation).expect("conversation"), b"[]");
        for written in [&artifacts, &loop_dir.join("iterations/001")] {
            let leftovers: Vec<_> = std::fs::read_dir(written)
                .expect("read_dir")
                .map(|entry| entry.expect("entry").file_name())
                .filter(|name| name.to_string_lossy().starts_with(TEMP_PREFIX))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
        // A retry finds the directories made (by an attempt that may have been killed before
        // it synced their entries): they are synced all the same.
        let again = directories_for(&loop_dir, &files).expect("directories");
        assert_eq!(again, expected);
        write_new_files(&loop_dir, &[(&json, b"{\"again\": true}")]).expect("rewritten");
        assert_eq!(std::fs::read(&json).expect("json"), b"{\"again\": true}");
    }

    #[test]
    fn a_file_outside_the_directory_named_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loop_dir = dir.path().join("loop");
        let outside = dir.path().join("elsewhere/plan.json");
        let err = write_new_files(&loop_dir, &[(&outside, b"{}")]).expect_err("outside");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("is not under"), "{err}");
        assert!(!dir.path().join("elsewhere").exists());
    }

    #[test]
    fn a_file_that_cannot_be_put_in_place_fails_the_batch_naming_it_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = dir.path().join("plan.json");
        let blocked = dir.path().join("plan.md");
        std::fs::create_dir_all(blocked.join("occupied")).expect("a directory in the way");
        let err = write_new_files(dir.path(), &[(&first, b"{}"), (&blocked, b"# Plan\n")])
            .expect_err("a directory is in the way");
        assert!(
            err.to_string().contains(&blocked.display().to_string()),
            "{err}"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name())
            .filter(|name| name.to_string_lossy().starts_with(TEMP_PREFIX))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn replace_symlink_moves_an_existing_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("iterations/001")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("iterations/002")).expect("mkdir");
        let link = dir.path().join("current");
        replace_symlink(Path::new("iterations/001"), &link).expect("first link");
        replace_symlink(Path::new("iterations/002"), &link).expect("second link");
        assert_eq!(
            std::fs::read_link(&link).expect("read_link"),
            Path::new("iterations/002")
        );
    }
}
