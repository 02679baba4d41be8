//! Files the host itself keeps in the project (the plan's export), written so that a link
//! or a special file planted on the way is never followed: every directory from the root
//! down is made and opened one by one with `O_NOFOLLOW`, a file is replaced by writing a
//! temporary file in its directory, syncing it and renaming it over the old one (a rename
//! replaces a link, never writes through it), and only a regular file is ever read.
//! Blocking: call it off the async threads.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::ProjectRoot;
use super::project_file::{ProjectFile, ReadError, open_directory};

/// Why a folder of the project could not be opened for writing.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error(
        "{} is a symbolic link or something else that is not a folder; Loopr does not write \
         through links",
        .0.display()
    )]
    NotAFolder(PathBuf),
    #[error("{} is not a folder below the project root", .0.display())]
    Outside(PathBuf),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What is at a name in a folder.
#[derive(Debug, PartialEq, Eq)]
pub enum Existing {
    Absent,
    /// A regular file, its bytes.
    File(Vec<u8>),
    /// Something Loopr neither reads nor replaces: a link, a FIFO, a folder, a file over
    /// the limit.
    Other(String),
}

/// What `ProjectFolder::replace` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Replaced {
    Written,
    /// The file no longer held what the caller found there: left as it is, which is this.
    LeftAlone(Existing),
}

/// A folder of the project, opened without following a link.
pub struct ProjectFolder {
    fd: OwnedFd,
}

impl ProjectFolder {
    /// The folder `relative` (to the root, no `..`), made where missing, each part opened
    /// from the one above it without following a link.
    pub fn open_creating(
        root: &ProjectRoot,
        relative: &Path,
    ) -> Result<ProjectFolder, FolderError> {
        let io = |source: std::io::Error| FolderError::Io {
            path: relative.to_path_buf(),
            source,
        };
        let mut fd = rustix::fs::open(
            root.path(),
            super::project_file::DIRECTORY_HANDLE,
            Mode::empty(),
        )
        .map_err(|errno| io(errno.into()))?;
        let mut walked = PathBuf::new();
        for component in relative.components() {
            let Component::Normal(name) = component else {
                return Err(FolderError::Outside(relative.to_path_buf()));
            };
            walked.push(name);
            match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(io(errno.into())),
            }
            fd = match open_directory(&fd, name) {
                Ok(fd) => fd,
                Err(ReadError::ThroughLink) => return Err(FolderError::NotAFolder(walked)),
                Err(ReadError::Io(err)) => return Err(io(err)),
                Err(other) => return Err(io(std::io::Error::other(other.to_string()))),
            };
        }
        Ok(ProjectFolder { fd })
    }

    /// The folder `name` in this one, made where missing.
    pub fn child(&self, name: &str) -> Result<ProjectFolder, FolderError> {
        let shown = || PathBuf::from(name);
        if !is_plain_name(name) {
            return Err(FolderError::Outside(shown()));
        }
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => {
                return Err(FolderError::Io {
                    path: shown(),
                    source: errno.into(),
                });
            }
        }
        match open_directory(&self.fd, OsStr::new(name)) {
            Ok(fd) => Ok(ProjectFolder { fd }),
            Err(ReadError::ThroughLink) => Err(FolderError::NotAFolder(shown())),
            Err(other) => Err(FolderError::Io {
                path: shown(),
                source: std::io::Error::other(other.to_string()),
            }),
        }
    }

    /// What is at `name`: nothing, a regular file of at most `limit` bytes, or something else.
    pub fn existing(&self, name: &str, limit: u64) -> std::io::Result<Existing> {
        let opened =
            ProjectFile::open_in(&self.fd, OsStr::new(name)).and_then(|file| file.read_all(limit));
        match opened {
            Ok(bytes) => Ok(Existing::File(bytes)),
            Err(ReadError::NotFound) => Ok(Existing::Absent),
            Err(ReadError::Io(err)) => Err(err),
            Err(other) => Ok(Existing::Other(other.to_string())),
        }
    }

    /// Replaces `name` with `bytes` whole (a reader sees the old file or the new one), if it
    /// still holds what the caller `found` there: it is looked at again right before the
    /// rename, once the new bytes are written and synced, so an edit made after the caller's
    /// look is kept. What is left unguarded is the few system calls between that second look
    /// and the rename: an edit landing there is replaced. (No lock of ours can keep an editor
    /// out, and Linux has no rename that compares first.)
    /// What is there is read up to `limit` bytes, as `existing` does.
    pub fn replace(
        &self,
        name: &str,
        bytes: &[u8],
        found: &Existing,
        limit: u64,
    ) -> std::io::Result<Replaced> {
        if !is_plain_name(name) {
            return Err(std::io::Error::other(format!(
                "{name:?} is not a file name"
            )));
        }
        let temp = format!(".{name}.loopr-{:08x}.tmp", fastrand::u32(..));
        let file = rustix::fs::openat(
            &self.fd,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let mut file = std::fs::File::from(file);
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| self.still_as_found(name, found, limit))
            .and_then(|now| match now {
                None => rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name)
                    .map(|()| Replaced::Written)
                    .map_err(Into::into),
                Some(now) => Ok(Replaced::LeftAlone(now)),
            });
        if !matches!(written, Ok(Replaced::Written)) {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
        }
        let replaced = written?;
        if replaced == Replaced::Written {
            self.sync()?;
        }
        Ok(replaced)
    }

    /// `None` while `name` holds what was `found` there; else what it holds now.
    fn still_as_found(
        &self,
        name: &str,
        found: &Existing,
        limit: u64,
    ) -> std::io::Result<Option<Existing>> {
        let now = self.existing(name, limit)?;
        Ok((now != *found).then_some(now))
    }

    /// Removes the file `name` (a link is removed, never followed).
    pub fn remove_file(&self, name: &str) -> std::io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => self.sync(),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Removes the folder `name` if it is empty; leaves it otherwise.
    pub fn remove_folder_if_empty(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR);
    }

    /// Makes the folder's entries durable.
    fn sync(&self) -> std::io::Result<()> {
        let readable = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::fsync(&readable).map_err(Into::into)
    }
}

/// One name, not a path: no separator, not `.` or `..`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mkfifo;

    fn project() -> (tempfile::TempDir, ProjectRoot) {
        let temp = tempfile::tempdir().expect("temp");
        let root = ProjectRoot::new(temp.path()).expect("root");
        (temp, root)
    }

    #[test]
    fn folders_are_made_and_files_replaced_whole() {
        let (temp, root) = project();
        let folder = ProjectFolder::open_creating(&root, Path::new("docs/plans")).expect("made");
        let spec = folder.child("spec").expect("child");
        let written = spec.replace("README.md", b"one", &Existing::Absent, 10);
        assert_eq!(written.expect("written"), Replaced::Written);
        let replaced = spec.replace("README.md", b"two", &Existing::File(b"one".to_vec()), 10);
        assert_eq!(replaced.expect("replaced"), Replaced::Written);
        let path = temp.path().join("docs/plans/spec/README.md");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        assert_eq!(
            spec.existing("README.md", 10).expect("looked"),
            Existing::File(b"two".to_vec())
        );
        assert_eq!(
            spec.existing("missing.md", 10).expect("looked"),
            Existing::Absent
        );
        assert!(matches!(
            spec.existing("README.md", 2).expect("looked"),
            Existing::Other(_)
        ));
        spec.remove_file("README.md").expect("removed");
        folder.remove_folder_if_empty("spec");
        assert!(!temp.path().join("docs/plans/spec").exists());
        let names: Vec<_> = std::fs::read_dir(temp.path().join("docs/plans"))
            .expect("list")
            .collect();
        assert!(names.is_empty(), "no temporary file is left: {names:?}");
    }

    #[test]
    fn a_file_changed_after_the_callers_look_is_left_alone() {
        let (temp, root) = project();
        let folder = ProjectFolder::open_creating(&root, Path::new("docs")).expect("made");
        folder
            .replace("plan.md", b"loopr's", &Existing::Absent, 100)
            .expect("written");
        let found = folder.existing("plan.md", 100).expect("looked");
        std::fs::write(temp.path().join("docs/plan.md"), "the user's").expect("edit");
        let replaced = folder
            .replace("plan.md", b"newer", &found, 100)
            .expect("looked again");
        assert_eq!(
            replaced,
            Replaced::LeftAlone(Existing::File(b"the user's".to_vec()))
        );
        assert_eq!(
            folder
                .replace("new.md", b"loopr's", &found, 100)
                .expect("looked again"),
            Replaced::LeftAlone(Existing::Absent)
        );
        let names: Vec<_> = std::fs::read_dir(temp.path().join("docs"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["plan.md"], "the user's file, and no temporary file");
    }

    #[test]
    fn a_link_on_the_way_or_at_the_name_is_never_followed() {
        let (temp, root) = project();
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir(temp.path().join("docs")).expect("docs");
        std::os::unix::fs::symlink(outside.path(), temp.path().join("docs/plans")).expect("link");
        let refused = ProjectFolder::open_creating(&root, Path::new("docs/plans/auth"))
            .err()
            .expect("refused");
        assert!(
            matches!(refused, FolderError::NotAFolder(ref path) if path == Path::new("docs/plans")),
            "{refused}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).expect("list").count(), 0);

        let folder = ProjectFolder::open_creating(&root, Path::new("docs")).expect("docs");
        let target = outside.path().join("bashrc");
        std::fs::write(&target, "mine").expect("target");
        std::os::unix::fs::symlink(&target, temp.path().join("docs/README.md")).expect("link");
        assert!(matches!(
            folder.existing("README.md", 100).expect("looked"),
            Existing::Other(_)
        ));
        mkfifo(&temp.path().join("docs/fifo.md"));
        assert!(matches!(
            folder.existing("fifo.md", 100).expect("looked"),
            Existing::Other(_)
        ));
        let found = folder.existing("README.md", 100).expect("looked");
        folder
            .replace("README.md", b"new", &found, 100)
            .expect("replaces the link itself");
        assert_eq!(std::fs::read(&target).expect("target"), b"mine");
    }
}
