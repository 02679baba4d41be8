//! Writing an accepted artifact into its iteration directory.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::artifacts::ArtifactKind;
use crate::llm::Message;
use crate::store::{LoopId, ProjectLayout, replace_symlink, write_atomic};

pub struct StoredArtifact {
    pub markdown_path: PathBuf,
}

/// Writes `<kind>.json`, then `<kind>.md`, then the conversation that produced them (if given), each
/// atomically, and only then moves `current` to this iteration, so `current` never points at
/// a half-written iteration.
pub fn store_artifact<T: Serialize>(
    layout: &ProjectLayout,
    loop_id: &LoopId,
    iteration: u32,
    kind: ArtifactKind,
    artifact: &T,
    markdown: &str,
    conversation: Option<&[std::sync::Arc<Message>]>,
) -> Result<StoredArtifact, std::io::Error> {
    let artifacts_dir = layout.artifacts_dir(loop_id, iteration);
    let json_path = artifacts_dir.join(format!("{}.json", kind.as_str()));
    let markdown_path = artifacts_dir.join(format!("{}.md", kind.as_str()));
    let json = serde_json::to_vec_pretty(artifact).map_err(std::io::Error::other)?;
    write_with_context(&json_path, &json)?;
    crate::test_hooks::pause_point(&format!("during_artifact_write:{}", kind.as_str()));
    write_with_context(&markdown_path, markdown.as_bytes())?;
    if let Some(conversation) = conversation.filter(|messages| !messages.is_empty()) {
        let conversation_path = layout
            .iteration_dir(loop_id, iteration)
            .join("conversation.json");
        let conversation = serde_json::to_vec(conversation).map_err(std::io::Error::other)?;
        write_with_context(&conversation_path, &conversation)?;
    }
    let link = layout.current_link(loop_id);
    replace_symlink(&ProjectLayout::iteration_relative(iteration), &link).map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!(
                "pointing {} at iteration {iteration}: {err}",
                link.display()
            ),
        )
    })?;
    Ok(StoredArtifact { markdown_path })
}

fn write_with_context(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes).map_err(|err| {
        std::io::Error::new(err.kind(), format!("writing {}: {err}", path.display()))
    })
}
