//! Writing an accepted artifact into its iteration directory.

use std::path::PathBuf;

use serde::Serialize;

use crate::artifacts::ArtifactKind;
use crate::llm::Message;
use crate::store::{LoopId, ProjectLayout, replace_symlink, write_new_files};

#[derive(Debug)]
pub struct StoredArtifact {
    pub markdown_path: PathBuf,
}

/// Writes `<kind>.json`, `<kind>.md` and the conversation that produced them (if given) into
/// iteration `iteration`, and only once all three are on disk whole moves `current` to it, so
/// `current` never points at a half-written iteration. Nothing else points into the new
/// iteration before this returns (the loop's record and journal name it afterwards), so its
/// files are written and synced together rather than one after the other
/// (`write_new_files`).
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
    let mut files = vec![(json_path.as_path(), json.as_slice())];
    files.push((markdown_path.as_path(), markdown.as_bytes()));
    let conversation_path = layout
        .iteration_dir(loop_id, iteration)
        .join("conversation.json");
    let conversation = conversation
        .filter(|messages| !messages.is_empty())
        .map(|messages| serde_json::to_vec(messages).map_err(std::io::Error::other))
        .transpose()?;
    if let Some(conversation) = &conversation {
        files.push((conversation_path.as_path(), conversation.as_slice()));
    }
    write_new_files(&layout.loop_dir(loop_id), &files).map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!(
                "writing iteration {iteration} into {}: {err}",
                artifacts_dir.display()
            ),
        )
    })?;
    // Crash tests kill the host here: every file whole, `current` still on the iteration
    // before.
    crate::test_hooks::pause_point(&format!("during_artifact_write:{}", kind.as_str()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LoopId;

    fn current_target(layout: &ProjectLayout, id: &LoopId) -> PathBuf {
        std::fs::read_link(layout.current_link(id)).expect("current")
    }

    #[test]
    fn a_store_that_fails_between_its_files_leaves_current_on_the_iteration_before() {
        let temp = tempfile::tempdir().expect("temp");
        let layout = ProjectLayout::new(&temp.path().join("home"), temp.path());
        let id = LoopId::generate();
        let first = serde_json::json!({"title": "first"});
        store_artifact(
            &layout,
            &id,
            1,
            ArtifactKind::Spec,
            &first,
            "# First\n",
            None,
        )
        .expect("iteration 1");
        assert_eq!(
            current_target(&layout, &id),
            PathBuf::from("iterations/001")
        );
        // A directory where iteration 2's markdown goes: its JSON is written, its markdown
        // cannot be.
        let blocked = layout.artifacts_dir(&id, 2).join("spec.md");
        std::fs::create_dir_all(blocked.join("occupied")).expect("a directory in the way");
        let second = serde_json::json!({"title": "second"});
        let err = store_artifact(
            &layout,
            &id,
            2,
            ArtifactKind::Spec,
            &second,
            "# Second\n",
            None,
        )
        .expect_err("the markdown cannot be written");
        assert!(err.to_string().contains("iteration 2"), "{err}");
        assert_eq!(
            current_target(&layout, &id),
            PathBuf::from("iterations/001")
        );
        let through_current = layout.loop_dir(&id).join("current/artifacts/spec.md");
        assert_eq!(
            std::fs::read_to_string(through_current).expect("markdown"),
            "# First\n"
        );
    }

    #[test]
    fn a_stored_iteration_holds_every_file_and_current_points_at_it() {
        let temp = tempfile::tempdir().expect("temp");
        let layout = ProjectLayout::new(&temp.path().join("home"), temp.path());
        let id = LoopId::generate();
        let conversation = vec![std::sync::Arc::new(Message::user_text("task"))];
        let stored = store_artifact(
            &layout,
            &id,
            1,
            ArtifactKind::Plan,
            &serde_json::json!({"title": "plan"}),
            "# Plan\n",
            Some(&conversation),
        )
        .expect("stored");
        assert_eq!(
            stored.markdown_path,
            layout.artifacts_dir(&id, 1).join("plan.md")
        );
        let current = layout.loop_dir(&id).join("current");
        assert_eq!(
            std::fs::read_to_string(current.join("artifacts/plan.md")).expect("markdown"),
            "# Plan\n"
        );
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(current.join("artifacts/plan.json")).expect("json"),
        )
        .expect("parses");
        assert_eq!(json["title"], "plan");
        let messages: Vec<Message> = serde_json::from_slice(
            &std::fs::read(current.join("conversation.json")).expect("conversation"),
        )
        .expect("parses");
        assert_eq!(messages.len(), 1);
    }
}
