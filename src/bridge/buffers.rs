//! Edits to files open in Neovim go into their buffers as an LSP `WorkspaceEdit`, applied by
//! `require('loopr.edits')`: they show at once and `u` undoes them. The functions here are
//! generic over the channel's writer so the tests call Lua exactly as the host does.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::io::AsyncWrite;
use nvim_rs::Neovim;
use nvim_rs::compat::tokio::Compat;

use super::dto::to_value;
use super::lua_call::exec_lua_within;
use crate::tools::{BufferCheck, BufferEdit, OpenBuffers, line_replacement};

type Writer = Compat<tokio::fs::File>;

const APPLY: &str = "return require('loopr.edits').apply(...)";
const CHECK: &str = "return require('loopr.edits').check(...)";
const RELOAD: &str = "return require('loopr.edits').reload(...)";
const UNSAVED_TEXT: &str = "return require('loopr.edits').unsaved_text(...)";
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
        match self.neovim.get() {
            Some(neovim) => apply_edit(neovim, path, old, new).await,
            None => BufferEdit::NotLoaded,
        }
    }

    async fn check(&self, path: &Path) -> BufferCheck {
        match self.neovim.get() {
            Some(neovim) => check_buffer(neovim, path).await,
            None => BufferCheck::NotLoaded,
        }
    }

    async fn reload(&self, paths: &[PathBuf]) {
        if let Some(neovim) = self.neovim.get() {
            reload_buffers(neovim, paths).await;
        }
    }

    async fn unsaved_text(&self, path: &Path) -> Option<String> {
        match self.neovim.get() {
            Some(neovim) => unsaved_buffer_text(neovim, path).await,
            None => None,
        }
    }
}

/// Calls `require('loopr.edits').unsaved_text(path)`: what the buffer showing `path` holds
/// where it has unsaved changes; `None` where none does, or Neovim does not answer in time.
pub async fn unsaved_buffer_text<W>(neovim: &Neovim<W>, path: &Path) -> Option<String>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    match exec_lua_within(neovim, UNSAVED_TEXT, vec![path_value(path)], TIMEOUT).await {
        Some(Ok(value)) => value.as_str().map(str::to_owned),
        Some(Err(err)) => {
            tracing::warn!(error = %err, path = %path.display(), "reading a buffer in Neovim");
            None
        }
        None => {
            tracing::warn!(path = %path.display(), "Neovim did not answer a buffer read in time");
            None
        }
    }
}

/// Calls `require('loopr.edits').reload(paths)`: buffers showing files a command changed
/// are brought up to date, or (with unsaved changes) the user is told.
pub async fn reload_buffers<W>(neovim: &Neovim<W>, paths: &[PathBuf])
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    if paths.is_empty() {
        return;
    }
    let list = nvim_rs::Value::Array(paths.iter().map(|path| path_value(path)).collect());
    match exec_lua_within(neovim, RELOAD, vec![list], TIMEOUT).await {
        Some(Ok(_)) => {}
        Some(Err(err)) => tracing::warn!(error = %err, "reloading buffers in Neovim"),
        None => tracing::warn!("Neovim did not answer a buffer reload in time"),
    }
}

/// Calls `require('loopr.edits').apply(path, edit, old, deadline)`: the buffer showing `path`
/// (if any) takes the change from `old`, the file's text now, to `new`, and is saved.
pub async fn apply_edit<W>(neovim: &Neovim<W>, path: &Path, old: &str, new: &str) -> BufferEdit
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    apply_edit_within(neovim, path, old, new, TIMEOUT).await
}

/// `apply_edit`, waiting at most `timeout` for Neovim. An edit that times out is reported as
/// not made, so it must never be made later, when a blocked Neovim gets to it: it carries a
/// deadline (milliseconds since the epoch, half of `timeout` from now) after which Lua
/// refuses to start it. An edit started in time has the other half to be made and answered.
pub async fn apply_edit_within<W>(
    neovim: &Neovim<W>,
    path: &Path,
    old: &str,
    new: &str,
    timeout: Duration,
) -> BufferEdit
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let Some(edit) = workspace_edit(path, old, new) else {
        return BufferEdit::NotLoaded;
    };
    let Ok(edit) = to_value(&edit) else {
        return BufferEdit::NotLoaded;
    };
    let deadline = epoch_millis(SystemTime::now() + timeout / 2);
    let args = vec![
        path_value(path),
        edit,
        nvim_rs::Value::from(old),
        nvim_rs::Value::from(deadline),
    ];
    match exec_lua_within(neovim, APPLY, args, timeout).await {
        Some(Ok(value)) => match value.as_str() {
            Some("applied") => BufferEdit::Applied,
            Some("not_loaded") => BufferEdit::NotLoaded,
            // Unsaved changes, or a buffer that could not be brought up to date with its file.
            Some("modified" | "stale") => BufferEdit::UnsavedChanges,
            Some("late") => {
                tracing::warn!(path = %path.display(), "Neovim got to an edit after its deadline");
                BufferEdit::UnsavedChanges
            }
            other => {
                tracing::warn!(answer = ?other, path = %path.display(), "unexpected answer to an edit");
                BufferEdit::UnsavedChanges
            }
        },
        Some(Err(err)) => {
            tracing::warn!(error = %err, path = %path.display(), "applying an edit in Neovim");
            // Not knowing whether the buffer took it, do not write behind its back.
            BufferEdit::UnsavedChanges
        }
        None => {
            tracing::warn!(path = %path.display(), "Neovim did not answer an edit in time");
            BufferEdit::UnsavedChanges
        }
    }
}

/// Calls `require('loopr.edits').check(path)`: whether the buffer showing `path` could take
/// an edit. Changes nothing.
pub async fn check_buffer<W>(neovim: &Neovim<W>, path: &Path) -> BufferCheck
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let args = vec![path_value(path)];
    match exec_lua_within(neovim, CHECK, args, TIMEOUT).await {
        Some(Ok(value)) => match value.as_str() {
            Some("not_loaded") => BufferCheck::NotLoaded,
            Some("ready") => BufferCheck::Ready,
            _ => BufferCheck::UnsavedChanges,
        },
        Some(Err(err)) => {
            tracing::warn!(error = %err, path = %path.display(), "checking a buffer in Neovim");
            BufferCheck::UnsavedChanges
        }
        None => {
            tracing::warn!(path = %path.display(), "Neovim did not answer a buffer check in time");
            BufferCheck::UnsavedChanges
        }
    }
}

/// Milliseconds since the epoch, what Lua's `vim.uv.gettimeofday()` tells too; a clock
/// before the epoch gives 0, a deadline long past.
fn epoch_millis(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

fn path_value(path: &Path) -> nvim_rs::Value {
    nvim_rs::Value::from(path.to_string_lossy().into_owned())
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
