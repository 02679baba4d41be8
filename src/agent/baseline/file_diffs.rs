//! What a loop changed, as one unified diff per file against what the file held before the
//! loop's first change of it: what a verification reads.

use super::file_state::{Found, found_at};
use super::{Baseline, BaselineError, Before};
use crate::tools::{ProjectRoot, file_diff};

/// One changed file: its path relative to the project root and its diff (or, when it
/// cannot be compared, a line saying why).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDiff {
    pub path: String,
    pub diff: String,
}

impl Baseline {
    /// Every file the loop changed, in path order, with its unified diff. What is now in a
    /// file's place is read without following a link, and only up to a bound. Blocking (and
    /// CPU-heavy on large files): run it off the async threads.
    pub fn file_diffs(&self, root: &ProjectRoot) -> Result<Vec<FileDiff>, BaselineError> {
        self.manifest()?;
        let mut diffs = Vec::new();
        for (relative, entry) in self.ledger() {
            let before = match &entry.before {
                Before::Absent => Ok(String::new()),
                Before::Stored(hash) => self
                    .read_blob(hash)
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                    .map_err(|err| format!("what it held before is lost from the baseline: {err}")),
                Before::Unknown => {
                    Err("changed by a command; what it held before is unknown".to_owned())
                }
            };
            let now = match found_at(root, &root.path().join(&relative)) {
                Found::Absent => Ok(String::new()),
                Found::File(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                Found::TooLarge(size) => Err(format!("{size} bytes, too large to compare")),
                Found::Other(what) => Err(what),
            };
            let diff = match (before, now) {
                (Ok(before), Ok(now)) if before == now => continue,
                (Ok(before), Ok(now)) => file_diff(&relative, &before, &now),
                (Err(why), _) | (_, Err(why)) => format!("{relative}: {why}\n"),
            };
            diffs.push(FileDiff {
                path: relative,
                diff,
            });
        }
        Ok(diffs)
    }
}
