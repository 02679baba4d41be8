//! The one way the host opens a file of the project, whatever wrote it (a command the model
//! ran may have left a FIFO, a link to a device or a sparse file of terabytes): only regular
//! files, never through a symbolic link, never waiting, never more than the caller's limit.
//!
//! Every directory below the root is opened from the one above it with `O_NOFOLLOW`, so a link
//! anywhere on the way is refused, not followed (a check of the path before opening could be
//! raced). The file itself is looked at first (`lstat`: a FIFO, a socket or a device is never
//! opened), then opened `O_NONBLOCK | O_NOFOLLOW` (should it be swapped meanwhile, the open
//! can neither wait for a writer nor follow a link) and checked again on the opened handle.
//! Reads stop at the limit, so a file that grows while it is read costs no more than that.
//! Blocking: call it off the async threads.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use tokio_util::sync::CancellationToken;

use super::ProjectRoot;

/// Why a file's bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("does not exist")]
    NotFound,
    #[error("is {0}, not a regular file; only regular files can be read or changed")]
    NotRegular(&'static str),
    #[error("is a symbolic link to {}; Loopr does not follow links here", .0.display())]
    Symlink(PathBuf),
    #[error(
        "is reached through a symbolic link or something else that is not a directory; Loopr \
         does not follow links here"
    )]
    ThroughLink,
    #[error("is {0} bytes, larger than the limit")]
    TooLarge(u64),
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<Errno> for ReadError {
    fn from(errno: Errno) -> ReadError {
        ReadError::Io(errno.into())
    }
}

/// How a directory on the way is opened: only to name what is in it. Linux's `O_PATH` needs
/// no permission to read the directory; without it (macOS) the directory is opened for reading.
#[cfg(linux_apis)]
pub(super) const DIRECTORY_HANDLE: OFlags =
    OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);
#[cfg(not(linux_apis))]
pub(super) const DIRECTORY_HANDLE: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// A regular file of the project, opened.
pub struct ProjectFile {
    file: std::fs::File,
    metadata: std::fs::Metadata,
}

impl ProjectFile {
    /// Opens `path` (absolute, inside `root`) if it is a regular file reached without a link.
    pub fn open(root: &ProjectRoot, path: &Path) -> Result<ProjectFile, ReadError> {
        let (dirs, name) = names_below(root, path)?;
        let mut dir = rustix::fs::open(root.path(), DIRECTORY_HANDLE, Mode::empty())?;
        for name in dirs {
            dir = open_directory(&dir, name)?;
        }
        ProjectFile::open_in(&dir, name)
    }

    /// Opens `name` in the directory `dir` (opened without a link on the way) if it is a
    /// regular file and not a link.
    pub(super) fn open_in(dir: &OwnedFd, name: &OsStr) -> Result<ProjectFile, ReadError> {
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Err(ReadError::NotFound),
            Err(errno) => return Err(errno.into()),
        };
        let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
        if kind == rustix::fs::FileType::Symlink {
            return Err(symlink_error(dir, name));
        }
        if kind != rustix::fs::FileType::RegularFile {
            return Err(ReadError::NotRegular(kind_name(kind)));
        }
        let opened = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let file = std::fs::File::from(match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Err(ReadError::NotFound),
            // Replaced by a link since the look above.
            Err(Errno::LOOP) => return Err(symlink_error(dir, name)),
            // A socket cannot be opened at all.
            Err(Errno::NXIO) => return Err(ReadError::NotRegular("a socket")),
            Err(errno) => return Err(errno.into()),
        });
        let metadata = file.metadata().map_err(ReadError::Io)?;
        if !metadata.is_file() {
            return Err(ReadError::NotRegular(file_kind(&metadata.file_type())));
        }
        Ok(ProjectFile { file, metadata })
    }

    /// Its size when it was opened.
    pub fn size(&self) -> u64 {
        self.metadata.len()
    }

    pub fn metadata(&self) -> &std::fs::Metadata {
        &self.metadata
    }

    /// A reader of its bytes up to its size when opened (more, written since, is not read).
    pub fn into_reader(self) -> std::io::Take<std::fs::File> {
        let size = self.size();
        self.file.take(size)
    }

    /// All its bytes, at most `limit` of them: `TooLarge` if it has more (or grew past the
    /// limit while read).
    pub fn read_all(self, limit: u64) -> Result<Vec<u8>, ReadError> {
        if self.size() > limit {
            return Err(ReadError::TooLarge(self.size()));
        }
        let size = self.size();
        let bytes = self.read_start(limit.saturating_add(1))?;
        if bytes.len() as u64 > limit {
            return Err(ReadError::TooLarge(size.max(bytes.len() as u64)));
        }
        Ok(bytes)
    }

    /// Its first `limit` bytes (all of them when it has fewer).
    pub fn read_start(self, limit: u64) -> Result<Vec<u8>, ReadError> {
        let expected = self.size().min(limit);
        let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
        self.file
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(ReadError::Io)?;
        Ok(bytes)
    }

    /// Hands its bytes to `consume` a piece at a time, taking them from `budget`: true when
    /// the whole file was read, false when it was not (read only in part, or not at all)
    /// because it is, or grew while read, larger than what the budget had left, or the
    /// budget's cancel came.
    pub fn read_pieces(
        mut self,
        budget: &ReadBudget,
        mut consume: impl FnMut(&[u8]),
    ) -> Result<bool, ReadError> {
        let size = self.size();
        if !budget.take(size) {
            return Ok(false);
        }
        let mut left = size;
        let mut buffer = vec![0; usize::try_from(size).map_or(PIECE, |size| size.clamp(1, PIECE))];
        loop {
            if budget.cancel.is_cancelled() {
                return Ok(false);
            }
            // One byte more than is left tells a file that grew from one that ended.
            let wanted = usize::try_from(left.saturating_add(1))
                .map_or(buffer.len(), |wanted| wanted.min(buffer.len()));
            let read = match self.file.read(&mut buffer[..wanted]) {
                Ok(read) => read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(ReadError::Io(err)),
            };
            if read == 0 {
                budget.give_back(left);
                return Ok(true);
            }
            if read as u64 > left {
                return Ok(false);
            }
            left -= read as u64;
            consume(&buffer[..read]);
        }
    }
}

/// Bytes read per call when a file is read in pieces.
const PIECE: usize = 1024 * 1024;

/// How many bytes a batch of reads (the files one command changed, say) may still take; a
/// cancel of `cancel` leaves it nothing, so what is left of the batch reads no more.
pub struct ReadBudget {
    left: AtomicU64,
    cancel: CancellationToken,
}

impl ReadBudget {
    pub fn new(bytes: u64, cancel: CancellationToken) -> ReadBudget {
        ReadBudget {
            left: AtomicU64::new(bytes),
            cancel,
        }
    }

    /// Takes `wanted` bytes if that many are left (and no cancel came); false if not.
    fn take(&self, wanted: u64) -> bool {
        !self.cancel.is_cancelled()
            && self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(wanted)
                })
                .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.left.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The names of the directories from the root down to `path`'s, and `path`'s own.
fn names_below<'a>(
    root: &ProjectRoot,
    path: &'a Path,
) -> Result<(Vec<&'a OsStr>, &'a OsStr), ReadError> {
    let outside = || {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not inside the project", path.display()),
        ))
    };
    let relative = path.strip_prefix(root.path()).map_err(|_| outside())?;
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => return Err(outside()),
        }
    }
    let Some(name) = names.pop() else {
        return Err(ReadError::NotRegular("a directory"));
    };
    Ok((names, name))
}

/// The directory `name` in `dir`, never through a link.
pub(super) fn open_directory(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, ReadError> {
    match rustix::fs::openat(
        dir,
        name,
        DIRECTORY_HANDLE.union(OFlags::NOFOLLOW),
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(ReadError::NotFound),
        Err(Errno::NOTDIR | Errno::LOOP) => Err(ReadError::ThroughLink),
        Err(errno) => Err(errno.into()),
    }
}

fn symlink_error(dir: &OwnedFd, name: &OsStr) -> ReadError {
    use std::os::unix::ffi::OsStringExt;
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => ReadError::Symlink(PathBuf::from(std::ffi::OsString::from_vec(
            target.into_bytes(),
        ))),
        Err(errno) => errno.into(),
    }
}

fn kind_name(kind: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType;
    match kind {
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Directory => "a directory",
        _ => "a special file",
    }
}

fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        return "a FIFO (named pipe)";
    }
    if kind.is_socket() {
        return "a socket";
    }
    if kind.is_char_device() || kind.is_block_device() {
        return "a device";
    }
    if kind.is_dir() {
        return "a directory";
    }
    "a special file"
}

/// The bytes of the regular file at `path` inside `root`, at most `limit` of them (see
/// `ProjectFile`). Blocking.
pub fn read_regular(root: &ProjectRoot, path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    ProjectFile::open(root, path)?.read_all(limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{mkfifo, returns_within};

    struct Fixture {
        _project: tempfile::TempDir,
        outside: tempfile::TempDir,
        root: ProjectRoot,
    }

    impl Fixture {
        fn new() -> Fixture {
            let project = tempfile::tempdir().expect("project");
            let outside = tempfile::tempdir().expect("outside");
            std::fs::create_dir(project.path().join("src")).expect("mkdir");
            std::fs::write(project.path().join("src/main.rs"), "fn main() {}\n").expect("write");
            std::fs::write(outside.path().join("secret.txt"), "top secret\n").expect("write");
            Fixture {
                root: ProjectRoot::new(project.path()).expect("root"),
                _project: project,
                outside,
            }
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.root.path().join(relative)
        }

        /// What opening and reading `relative` (at most 1 MiB of it) gives, on a thread of
        /// its own so that a blocking open fails the test instead of hanging it.
        fn read(&self, relative: &str) -> Result<Vec<u8>, ReadError> {
            let root = self.root.clone();
            let path = self.path(relative);
            returns_within(relative, move || read_regular(&root, &path, 1024 * 1024))
        }
    }

    #[test]
    fn a_regular_file_is_read_and_what_is_not_one_is_named_without_being_opened() {
        let fixture = Fixture::new();
        mkfifo(&fixture.path("events.fifo"));
        std::os::unix::fs::symlink("/dev/zero", fixture.path("zero")).expect("link");
        let _listener =
            std::os::unix::net::UnixListener::bind(fixture.path("server.sock")).expect("bind");
        assert_eq!(
            fixture.read("src/main.rs").expect("read"),
            b"fn main() {}\n"
        );
        for (relative, expected) in [
            ("events.fifo", "is a FIFO (named pipe), not a regular file"),
            ("server.sock", "is a socket, not a regular file"),
            ("src", "is a directory, not a regular file"),
            ("zero", "is a symbolic link to /dev/zero;"),
            ("missing.txt", "does not exist"),
        ] {
            let err = fixture.read(relative).expect_err(relative);
            assert!(err.to_string().starts_with(expected), "{relative}: {err}");
        }
    }

    #[test]
    fn links_are_never_followed_out_of_the_project_nor_inside_it() {
        let fixture = Fixture::new();
        let outside = fixture.outside.path();
        std::os::unix::fs::symlink(outside.join("secret.txt"), fixture.path("leak")).expect("link");
        std::os::unix::fs::symlink(outside, fixture.path("leakdir")).expect("link");
        std::os::unix::fs::symlink("src", fixture.path("inside")).expect("link");
        assert!(matches!(
            fixture.read("leak"),
            Err(ReadError::Symlink(target)) if target == outside.join("secret.txt")
        ));
        for relative in ["leakdir/secret.txt", "inside/main.rs", "src/main.rs/x"] {
            assert!(
                matches!(fixture.read(relative), Err(ReadError::ThroughLink)),
                "{relative}"
            );
        }
        let root = fixture.root.clone();
        assert!(
            read_regular(&root, &outside.join("secret.txt"), 1024).is_err(),
            "a path outside the root"
        );
    }

    #[test]
    fn a_file_that_grows_while_read_is_cut_at_the_limit() {
        let fixture = Fixture::new();
        let path = fixture.path("growing.log");
        std::fs::write(&path, "x".repeat(100)).expect("write");
        let grow = || {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut file| file.write_all(&[b'y'; 1000]))
                .expect("append");
        };
        // Opened at 100 bytes, 1,100 when read: what the limit allows, and no more.
        let opened = ProjectFile::open(&fixture.root, &path).expect("open");
        grow();
        assert_eq!(opened.size(), 100);
        assert!(matches!(opened.read_all(500), Err(ReadError::TooLarge(_))));
        let opened = ProjectFile::open(&fixture.root, &path).expect("open");
        grow();
        assert_eq!(opened.read_start(500).expect("start").len(), 500);
        let opened = ProjectFile::open(&fixture.root, &path).expect("open");
        let size = opened.size();
        grow();
        let budget = ReadBudget::new(1 << 30, CancellationToken::new());
        let mut read = 0;
        assert!(
            !opened
                .read_pieces(&budget, |piece| read += piece.len() as u64)
                .expect("pieces"),
            "not read whole"
        );
        assert_eq!(read, size, "no more handed on than it held when opened");
    }

    #[test]
    fn pieces_are_read_only_within_the_budget_and_not_after_a_cancel() {
        let fixture = Fixture::new();
        let path = fixture.path("src/main.rs");
        let whole = |budget: &ReadBudget| {
            let mut text = Vec::new();
            ProjectFile::open(&fixture.root, &path)
                .expect("open")
                .read_pieces(budget, |piece| text.extend_from_slice(piece))
                .expect("pieces")
                .then_some(text)
        };
        let cancel = CancellationToken::new();
        let budget = ReadBudget::new(20, cancel.clone());
        assert_eq!(whole(&budget).as_deref(), Some(&b"fn main() {}\n"[..]));
        assert_eq!(whole(&budget), None, "7 bytes left of 20");
        let budget = ReadBudget::new(1 << 30, cancel.clone());
        cancel.cancel();
        assert_eq!(whole(&budget), None);
    }
}
