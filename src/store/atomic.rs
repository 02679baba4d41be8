use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` so that readers see either the old file or the whole new one:
/// a temporary file in the same directory is written, fsynced and renamed over the target,
/// then the directory is fsynced so the rename itself survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_dir(path)?;
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".loopr-tmp-")
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|err| err.error)?;
    sync_dir(dir)
}

/// Points the symlink `link` at `target` (a path relative to the link's directory) by creating
/// a new link under a temporary name and renaming it over the old one.
pub fn replace_symlink(target: &Path, link: &Path) -> io::Result<()> {
    let dir = parent_dir(link)?;
    std::fs::create_dir_all(dir)?;
    let temp_link = dir.join(format!(
        ".loopr-link-{}-{:08x}",
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
