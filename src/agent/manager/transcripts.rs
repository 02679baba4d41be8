//! Which loop's transcript a shell shows, and following it.

use std::path::Path;

use tokio::sync::mpsc::UnboundedSender;

use super::{LoopManager, ManagerError};
use crate::agent::TranscriptText;
use crate::agent::journal::Journal;
use crate::store::{LoopRecord, LoopStatus};

impl LoopManager {
    /// The loop whose transcript to show: `id` when given, else the loop a file of its state
    /// at `path` belongs to (the artifact in the current buffer), else the newest running loop.
    pub fn transcript_target(
        &self,
        root: &Path,
        id: Option<&str>,
        path: Option<&Path>,
    ) -> Result<LoopRecord, ManagerError> {
        let project = self.project(root)?;
        if let Some(id) = id.map(str::trim).filter(|id| !id.is_empty()) {
            return self.record(&project, id);
        }
        if let Some(id) = path.and_then(|path| project.layout.loop_of(path))
            && let Some(record) = project.db.get(&id)?
        {
            return Ok(record);
        }
        project
            .db
            .list()?
            .into_iter()
            .find(|record| record.status == LoopStatus::Running)
            .ok_or(ManagerError::NoTranscriptTarget)
    }

    /// Sends loop `id`'s transcript to `out` as `token`: what its journal holds, then what it
    /// says from now on, until `unfollow_transcript(token)`.
    pub fn follow_transcript(
        &self,
        root: &Path,
        id: &str,
        token: u64,
        out: UnboundedSender<TranscriptText>,
    ) -> Result<LoopRecord, ManagerError> {
        let project = self.project(root)?;
        let record = self.record(&project, id)?;
        let title = crate::agent::transcript::title(&record);
        let journal = Journal::of(&project.layout, &record.id);
        self.shared
            .transcripts
            .follow(journal, &record.id, title, token, out);
        Ok(record)
    }

    /// Stops sending `token`'s transcript; whether it was being sent.
    pub fn unfollow_transcript(&self, token: u64) -> bool {
        self.shared.transcripts.unfollow(token)
    }
}
