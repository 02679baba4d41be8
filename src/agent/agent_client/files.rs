//! `fs/read_text_file` and `fs/write_text_file`: a project file read as the tools read one
//! (inside the root, never a secret, no link followed, bounded; what an open buffer holds
//! unsaved where the user has one), and written as `write_file` writes one (approved with its
//! diff, through the open buffer, recorded in the change journal for the changes list, undo,
//! checkpoints and the phase's commit); a write of exactly a change the user accepted in the
//! agent's permission request is not asked twice. What is read carries no credentials.

use agent_client_protocol::v1::schema::{
    ReadTextFileRequest, ReadTextFileResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::absolute_path;
use super::permission::{AcceptedDiff, Permissions};
use crate::tools::{
    ApprovalRequest, Approver, ChangeKind, Decision, MAX_READ_BYTES, ReadError, Tool, ToolContext,
    ToolError, WriteFileTool, file_diff, read_regular, redact_credentials, refuse_secret,
};

/// The most text one read answers with: a longer answer is asked for in parts (`line` and
/// `limit`), well within what one ACP message may carry.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The lines of a project file the agent asked for (`line`, counted from 1, and at most
/// `limit` of them), or all of it.
pub(super) async fn read(
    context: &ToolContext,
    request: ReadTextFileRequest,
) -> Result<ReadTextFileResponse, ToolError> {
    let requested = absolute_path(&request.path)?;
    let path = context.root.resolve_existing(&requested)?;
    refuse_secret(context, &path)?;
    let shown = context.root.relative_display(&path);
    let text = match context.buffers.unsaved_text(&path).await {
        Some(text) => text,
        None => {
            let root = context.root.clone();
            let read = {
                let shown = shown.clone();
                tokio::task::spawn_blocking(move || read_text(&root, &path, &shown))
            };
            tokio::select! {
                biased;
                _ = context.cancel.cancelled() => return Err(ToolError::Cancelled),
                read = read => read.map_err(|err| ToolError::File {
                    path: shown.clone(),
                    message: format!("reading it crashed: {err}"),
                })??,
            }
        }
    };
    let content = lines_asked(&text, &shown, request.line, request.limit)?;
    // What the agent reads goes to its model, as what Loopr's tools read goes to Loopr's.
    Ok(ReadTextFileResponse::new(
        redact_credentials(&content).into_owned(),
    ))
}

/// Writes the agent's `content` as the whole of a project file, exactly as `write_file` does;
/// a write making exactly the change the user accepted when the agent asked permission with
/// its diff is not asked again.
pub(super) async fn write(
    context: &ToolContext,
    permissions: &Permissions,
    request: WriteTextFileRequest,
) -> Result<WriteTextFileResponse, ToolError> {
    let requested = absolute_path(&request.path)?;
    let context = match permissions.take_accepted_diff(&request.path, &request.content) {
        Some(accepted) => accepting(context, &requested, accepted).await?,
        None => context.clone(),
    };
    WriteFileTool
        .call(
            json!({"path": requested, "content": request.content}),
            &context,
        )
        .await?;
    Ok(WriteTextFileResponse::new())
}

/// `context`, its approver accepting unasked the write of `requested` whose diff is the one
/// the user accepted: the same file, and the same diff from the file as it is now (a file
/// changed since differs in its diff, and is asked).
async fn accepting(
    context: &ToolContext,
    requested: &str,
    accepted: AcceptedDiff,
) -> Result<ToolContext, ToolError> {
    let subject = context
        .root
        .relative_display(&context.root.resolve_for_write(requested)?);
    let detail = {
        let shown = subject.clone();
        tokio::task::spawn_blocking(move || {
            file_diff(
                &shown,
                accepted.old_text.as_deref().unwrap_or_default(),
                &accepted.new_text,
            )
        })
        .await
        .map_err(|err| ToolError::File {
            path: subject.clone(),
            message: format!("showing its change crashed: {err}"),
        })?
    };
    Ok(ToolContext {
        approver: Arc::new(AcceptedChange {
            subject,
            detail,
            approver: context.approver.clone(),
        }),
        ..context.clone()
    })
}

/// The loop's approver, but the write of `subject` with exactly `detail` as its diff is
/// accepted: the user accepted that change already.
struct AcceptedChange {
    subject: String,
    detail: String,
    approver: Arc<dyn Approver>,
}

#[async_trait]
impl Approver for AcceptedChange {
    async fn decide(
        &self,
        request: ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Option<Decision> {
        if request.kind == ChangeKind::Write
            && request.subject == self.subject
            && request.detail == self.detail
        {
            return Some(Decision::Accept);
        }
        self.approver.decide(request, cancel).await
    }

    fn change_failed(&self, request: &ApprovalRequest, message: &str) {
        self.approver.change_failed(request, message);
    }
}

/// The text of the file at `path`: a regular file inside `root`, not binary, at most
/// `MAX_READ_BYTES`. Blocking.
fn read_text(
    root: &crate::tools::ProjectRoot,
    path: &std::path::Path,
    shown: &str,
) -> Result<String, ToolError> {
    let file_error = |message: String| ToolError::File {
        path: shown.to_owned(),
        message,
    };
    let bytes = read_regular(root, path, MAX_READ_BYTES).map_err(|err| match err {
        ReadError::TooLarge(size) => file_error(format!(
            "is {size} bytes, larger than the {MAX_READ_BYTES}-byte limit of a read"
        )),
        other => file_error(other.to_string()),
    })?;
    if bytes.iter().take(8192).any(|&byte| byte == 0) {
        return Err(file_error(
            "is a binary file; only text files can be read".to_owned(),
        ));
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    })
}

/// `limit` lines of `text` from line `line` (counted from 1), line endings kept.
fn lines_asked(
    text: &str,
    shown: &str,
    line: Option<u32>,
    limit: Option<u32>,
) -> Result<String, ToolError> {
    let start = usize::try_from(line.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
    let count = limit.map_or(usize::MAX, |limit| {
        usize::try_from(limit).unwrap_or(usize::MAX)
    });
    let total = text.split_inclusive('\n').count();
    if start > 1 && start > total {
        return Err(ToolError::InvalidInput(format!(
            "line {start} is past the end of {shown}, which has {total} lines"
        )));
    }
    let content: String = text
        .split_inclusive('\n')
        .skip(start - 1)
        .take(count)
        .collect();
    if content.len() > MAX_ANSWER_BYTES {
        return Err(ToolError::File {
            path: shown.to_owned(),
            message: format!(
                "the {} bytes asked for are more than the {MAX_ANSWER_BYTES} bytes one read \
                 answers with; read it in parts with line and limit",
                content.len()
            ),
        });
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::lines_asked;

    #[test]
    fn lines_are_taken_from_line_and_up_to_limit_with_their_endings() {
        let text = "one\ntwo\r\nthree";
        assert_eq!(lines_asked(text, "f", None, None).expect("all"), text);
        assert_eq!(
            lines_asked(text, "f", Some(2), Some(1)).expect("one line"),
            "two\r\n"
        );
        assert_eq!(
            lines_asked(text, "f", Some(2), None).expect("to the end"),
            "two\r\nthree"
        );
        assert_eq!(lines_asked("", "f", None, None).expect("empty"), "");
        let past = lines_asked(text, "f", Some(4), None).expect_err("past the end");
        assert_eq!(
            past.to_string(),
            "invalid input: line 4 is past the end of f, which has 3 lines"
        );
    }
}
