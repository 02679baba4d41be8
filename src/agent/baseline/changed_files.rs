//! Which files a loop changed, by path only: what a phase's commit takes (`phase_commit`).

use super::{Baseline, BaselineError};

impl Baseline {
    /// Every file the loop's tools and commands changed (created, modified or deleted), as
    /// paths relative to the project root with `/` between components, in path order; a file
    /// changed back to what it held is listed too (committing it changes nothing).
    pub fn changed_files(&self) -> Result<Vec<String>, BaselineError> {
        self.manifest()?;
        Ok(self.ledger().into_keys().collect())
    }
}
