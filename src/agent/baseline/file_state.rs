//! What is at a project path now, as the baseline and its ledger identify it: a fingerprint
//! (the hash of the bytes, or size and modification time for a file too large to hash), and
//! what the changes list and undo find there, without following a link.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{MAX_COMPARED_FILE, MAX_HASHED_FILE, STAT_FINGERPRINT};
use crate::tools::{FileStat, ProjectFile, ProjectRoot, ReadBudget, ReadError};

pub(crate) fn hash_of(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// What is at `path` now, without following a link, as the ledger's `after` says it: the
/// fingerprint of a regular file, a description of anything else, `None` when nothing is.
pub(crate) fn what_is_at(
    root: &ProjectRoot,
    path: &Path,
    budget: &ReadBudget,
) -> Result<Option<String>, ReadError> {
    match ProjectFile::open(root, path) {
        Ok(file) => fingerprint(file, budget).map(Some),
        Err(ReadError::NotFound) => Ok(None),
        Err(ReadError::Symlink(target)) => Ok(Some(format!("link:{}", target.display()))),
        Err(ReadError::NotRegular(kind)) => Ok(Some(format!("special:{kind}"))),
        Err(ReadError::ThroughLink) => Ok(Some("through-link".to_owned())),
        Err(err) => Err(err),
    }
}

/// What identifies the content of `file`: the hash of its bytes (as blobs are named), or,
/// when it is larger than `MAX_HASHED_FILE`, grows while read or `budget` does not allow
/// reading it, its size and modification time.
pub(super) fn fingerprint(file: ProjectFile, budget: &ReadBudget) -> Result<String, ReadError> {
    let by_stat = stat_fingerprint(file.metadata());
    if file.size() > MAX_HASHED_FILE {
        return Ok(by_stat);
    }
    let mut hasher = Sha256::new();
    if file.read_pieces(budget, |piece| hasher.update(piece))? {
        Ok(hex(&hasher.finalize()))
    } else {
        Ok(by_stat)
    }
}

pub(super) fn stat_fingerprint(metadata: &std::fs::Metadata) -> String {
    let stat = FileStat::of(metadata);
    format!("{STAT_FINGERPRINT}{}:{}", stat.size, stat.modified_ns)
}

/// What is at a changed file's path as the changes list shows it.
pub(super) enum Found {
    Absent,
    /// A regular file, read whole.
    File(Vec<u8>),
    /// A regular file larger than `MAX_COMPARED_FILE`, of this size.
    TooLarge(u64),
    /// Anything else, described.
    Other(String),
}

/// What is at `path` now, looked at without following a link.
pub(super) fn found_at(root: &ProjectRoot, path: &Path) -> Found {
    match ProjectFile::open(root, path).and_then(|file| file.read_all(MAX_COMPARED_FILE)) {
        Ok(bytes) => Found::File(bytes),
        Err(ReadError::NotFound) => Found::Absent,
        Err(ReadError::TooLarge(size)) => Found::TooLarge(size),
        Err(ReadError::Symlink(target)) => Found::Other(format!(
            "now a symbolic link to {} (not followed)",
            target.display()
        )),
        Err(ReadError::NotRegular(kind)) => Found::Other(format!("now {kind}, not a regular file")),
        Err(ReadError::ThroughLink) => Found::Other(
            "a directory on its path is now a symbolic link or a file (not followed)".to_owned(),
        ),
        Err(err) => Found::Other(format!("cannot be read: {err}")),
    }
}

/// A changed file as undo finds it.
pub(crate) struct Current {
    /// What it holds, when it exists and is no larger than `MAX_COMPARED_FILE`.
    pub(crate) bytes: Option<Vec<u8>>,
    /// What identifies it the way `after` (the ledger's) does; `None` when it does not exist.
    pub(crate) fingerprint: Option<String>,
}

/// What is at `path` now, for undo; an error when it is not a regular file reached without a
/// link, which undo does not replace.
pub(crate) fn current_state(
    root: &ProjectRoot,
    path: &Path,
    after: Option<&str>,
) -> Result<Current, ReadError> {
    let file = match ProjectFile::open(root, path) {
        Ok(file) => file,
        Err(ReadError::NotFound) => {
            return Ok(Current {
                bytes: None,
                fingerprint: None,
            });
        }
        Err(err) => return Err(err),
    };
    let by_stat = after
        .is_some_and(|after| after.starts_with(STAT_FINGERPRINT))
        .then(|| stat_fingerprint(file.metadata()));
    if file.size() > MAX_COMPARED_FILE {
        let unlimited = ReadBudget::new(u64::MAX, CancellationToken::new());
        let fingerprint = match by_stat {
            Some(by_stat) => by_stat,
            None => fingerprint(file, &unlimited)?,
        };
        return Ok(Current {
            bytes: None,
            fingerprint: Some(fingerprint),
        });
    }
    let bytes = file.read_all(MAX_COMPARED_FILE)?;
    Ok(Current {
        fingerprint: Some(by_stat.unwrap_or_else(|| hash_of(&bytes))),
        bytes: Some(bytes),
    })
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
