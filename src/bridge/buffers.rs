//! Edits to files open in Neovim go into their buffers as an LSP `WorkspaceEdit`, applied by
//! `vim.lsp.util.apply_workspace_edit`: they show at once and `u` undoes them.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use nvim_rs::Neovim;
use nvim_rs::compat::tokio::Compat;

use super::dto::to_value;
use crate::tools::{BufferEdit, OpenBuffers, line_replacement};

type Writer = Compat<tokio::fs::File>;

const APPLY: &str = "return require('loopr.edits').apply(...)";
/// Neovim answers at once unless it is blocked (a prompt); then the edit waits no longer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The Neovim session, known once the channel is up.
#[derive(Clone, Default)]
pub struct NeovimBuffers {
    neovim: Arc<OnceLock<Neovim<Writer>>>,
}

impl NeovimBuffers {
    pub fn connect(&self, neovim: Neovim<Writer>) {
        let _ = self.neovim.set(neovim);
    }
}

#[async_trait]
impl OpenBuffers for NeovimBuffers {
    async fn apply(&self, path: &Path, old: &str, new: &str) -> BufferEdit {
        let Some(neovim) = self.neovim.get() else {
            return BufferEdit::NotLoaded;
        };
        let Some(edit) = workspace_edit(path, old, new) else {
            return BufferEdit::NotLoaded;
        };
        let Ok(edit) = to_value(&edit) else {
            return BufferEdit::NotLoaded;
        };
        let path_value = nvim_rs::Value::from(path.to_string_lossy().into_owned());
        let answer =
            tokio::time::timeout(TIMEOUT, neovim.exec_lua(APPLY, vec![path_value, edit])).await;
        match answer {
            Ok(Ok(value)) => match value.as_str() {
                Some("applied") => BufferEdit::Applied,
                Some("modified") => BufferEdit::UnsavedChanges,
                _ => BufferEdit::NotLoaded,
            },
            Ok(Err(err)) => {
                tracing::warn!(error = %err, path = %path.display(), "applying an edit in Neovim");
                // Not knowing whether the buffer took it, do not write behind its back.
                BufferEdit::UnsavedChanges
            }
            Err(_) => {
                tracing::warn!(path = %path.display(), "Neovim did not answer an edit in time");
                BufferEdit::UnsavedChanges
            }
        }
    }
}

/// One whole-line `TextEdit` on `path`: positions at column 0, so the offset encoding does
/// not matter.
fn workspace_edit(path: &Path, old: &str, new: &str) -> Option<lsp_types::WorkspaceEdit> {
    let uri: lsp_types::Uri = url::Url::from_file_path(path).ok()?.as_str().parse().ok()?;
    let (start, end, replacement) = line_replacement(old, new);
    let position = |line: usize| lsp_types::Position {
        line: u32::try_from(line).unwrap_or(u32::MAX),
        character: 0,
    };
    let edit = lsp_types::TextEdit {
        range: lsp_types::Range {
            start: position(start),
            end: position(end),
        },
        new_text: replacement,
    };
    Some(lsp_types::WorkspaceEdit {
        changes: Some(std::iter::once((uri, vec![edit])).collect()),
        ..Default::default()
    })
}
