//! `session/request_permission`: the agent asks before one of its own tools acts. The user is
//! asked through the loop's approver, shown the call's title and kind and, where it carries
//! them, its diff or its command; the answer is one of the options the agent offered (allow
//! once, allow always, reject). "Allow always" holds for that kind of call for the rest of the
//! loop; a cancelled loop answers `cancelled`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Mutex;

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, ToolCallContent, ToolKind,
};

use crate::tools::{ApprovalRequest, ChangeKind, Decision, ToolContext, file_diff};

/// What the approver is told asks: the agent's own tool, not one of Loopr's.
const ASKING_TOOL: &str = "agent";
/// The most of a call's raw input shown when it names no command.
const MAX_INPUT_CHARS: usize = 4000;

/// The kinds of call the user allowed from now on, in this loop.
#[derive(Default)]
pub(super) struct Permissions {
    allowed_always: Mutex<HashSet<&'static str>>,
}

impl Permissions {
    /// The user's answer to `request`, as the option of the agent's it chose.
    pub(super) async fn decide(
        &self,
        context: &ToolContext,
        request: RequestPermissionRequest,
    ) -> RequestPermissionResponse {
        let kind = request.tool_call.fields.kind.unwrap_or_default();
        let kind_word = kind_word(kind);
        if context.cancel.is_cancelled() {
            return cancelled();
        }
        if self.allowed(kind_word) {
            return choose(
                &request.options,
                &[
                    PermissionOptionKind::AllowAlways,
                    PermissionOptionKind::AllowOnce,
                ],
            );
        }
        let title = request
            .tool_call
            .fields
            .title
            .clone()
            .unwrap_or_else(|| format!("a {kind_word} call"));
        let detail = {
            let root = context.root.clone();
            let request = request.clone();
            tokio::task::spawn_blocking(move || describe(&root, &request, kind_word))
                .await
                .unwrap_or_else(|err| format!("(its details could not be shown: {err})"))
        };
        let asked = ApprovalRequest {
            loop_id: context.loop_id.clone(),
            kind: change_kind(kind),
            tool: ASKING_TOOL,
            subject: title,
            detail,
        };
        match context.approver.decide(asked, &context.cancel).await {
            None => cancelled(),
            Some(Decision::Accept) => choose(
                &request.options,
                &[
                    PermissionOptionKind::AllowOnce,
                    PermissionOptionKind::AllowAlways,
                ],
            ),
            Some(Decision::AcceptAllOfKind) => {
                self.allowed_always
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(kind_word);
                choose(
                    &request.options,
                    &[
                        PermissionOptionKind::AllowAlways,
                        PermissionOptionKind::AllowOnce,
                    ],
                )
            }
            Some(Decision::Reject(_)) => choose(
                &request.options,
                &[
                    PermissionOptionKind::RejectOnce,
                    PermissionOptionKind::RejectAlways,
                ],
            ),
        }
    }

    fn allowed(&self, kind_word: &str) -> bool {
        self.allowed_always
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(kind_word)
    }
}

/// The first of the agent's options of the first kind in `preferred` it offered; without
/// one, `cancelled` (the only answer the protocol leaves).
fn choose(
    options: &[PermissionOption],
    preferred: &[PermissionOptionKind],
) -> RequestPermissionResponse {
    preferred
        .iter()
        .find_map(|kind| options.iter().find(|option| option.kind == *kind))
        .map_or_else(cancelled, |option| {
            RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
                SelectedPermissionOutcome::new(option.option_id.clone()),
            ))
        })
}

fn cancelled() -> RequestPermissionResponse {
    RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled)
}

/// The approval kind a call of `kind` is asked as. A change of files is an edit; anything
/// else the agent's own tools do (run a command, fetch, ...) happens outside Loopr's sandbox
/// and web rules, so it is asked as a call of another program's tool, never as one of
/// Loopr's sandboxed commands (whose allow-list and "auto" would let it through unseen).
fn change_kind(kind: ToolKind) -> ChangeKind {
    match kind {
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move => ChangeKind::Edit,
        _ => ChangeKind::Mcp,
    }
}

/// `kind` in words, also the key "allow always" is kept by.
fn kind_word(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Read => "read",
        ToolKind::Edit => "edit",
        ToolKind::Delete => "delete",
        ToolKind::Move => "move",
        ToolKind::Search => "search",
        ToolKind::Execute => "execute",
        ToolKind::Think => "think",
        ToolKind::Fetch => "fetch",
        ToolKind::SwitchMode => "switch mode",
        _ => "other",
    }
}

/// What the user is shown of the call: its kind, then its diffs, else its command, else its
/// raw input. CPU-heavy for large diffs: call it off the async threads.
fn describe(
    root: &crate::tools::ProjectRoot,
    request: &RequestPermissionRequest,
    kind_word: &str,
) -> String {
    let fields = &request.tool_call.fields;
    let mut detail = format!(
        "The agent asks to use its own tool ({kind_word}); what its own tools do is not \
         confined by Loopr's sandbox.\n"
    );
    let diffs: Vec<_> = fields
        .content
        .iter()
        .flatten()
        .filter_map(|content| match content {
            ToolCallContent::Diff(diff) => Some(diff),
            _ => None,
        })
        .collect();
    for diff in &diffs {
        let shown = if diff.path.starts_with(root.path()) {
            root.relative_display(&diff.path)
        } else {
            diff.path.display().to_string()
        };
        detail.push_str(&file_diff(
            &shown,
            diff.old_text.as_deref().unwrap_or_default(),
            &diff.new_text,
        ));
    }
    if !diffs.is_empty() {
        return detail;
    }
    if let Some(input) = fields.raw_input.as_ref() {
        match command_of(input) {
            Some(command) => {
                let _ = writeln!(detail, "$ {command}");
            }
            None => {
                let text = serde_json::to_string_pretty(input).unwrap_or_default();
                let shown: String = text.chars().take(MAX_INPUT_CHARS).collect();
                detail.push_str(&shown);
                if shown.len() < text.len() {
                    detail.push_str("\n[... the rest of its input not shown]");
                }
                detail.push('\n');
            }
        }
    }
    detail
}

/// The command a call's raw input carries (`"command": "..."` or `["cmd", "arg"]`), if any.
fn command_of(input: &serde_json::Value) -> Option<String> {
    let command = input.get("command").unwrap_or(input);
    match command {
        serde_json::Value::String(line) => Some(line.clone()),
        serde_json::Value::Array(words) if !words.is_empty() => words
            .iter()
            .map(|word| word.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(|words| words.join(" ")),
        _ => None,
    }
}
