use std::io::{self, Write};
use std::path::Path;

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

fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> io::Result<()> {
    let dir = parent_dir(path)?;
    std::fs::create_dir_all(dir)?;
    // The pid in the name lets the next host remove what a killed one left.
    let mut temp = tempfile::Builder::new()
        .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
        .tempfile_in(dir)?;
    if let Some(permissions) = permissions {
        temp.as_file().set_permissions(permissions)?;
    }
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
        crate::test_hooks::pause_point(&format!("atomic_write:{name}"));
    }
    temp.persist(path).map_err(|err| err.error)?;
    sync_dir(dir)
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
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/plan.json");
        write_atomic(&path, b"first").expect("first write");
        write_atomic(&path, b"second").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("nested"))
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("plan.json")]);
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
