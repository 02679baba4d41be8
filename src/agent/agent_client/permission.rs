//! `session/request_permission`: the agent asks before one of its own tools acts. What such a
//! tool does is neither confined nor seen by Loopr, so the user is always asked (the loop's
//! approval settings and its "accept all" never answer for them) and shown the call's title,
//! what it does (inferred from what it carries: a command makes it an execute call whatever it
//! declares, a diff an edit), its command, its diffs, or else its raw input. The answer is one
//! of the options the agent offered. "Allow always" is kept here alone, by what the call does,
//! and never for a command, a fetch or a call of another kind: each of those is asked. A diff
//! the user accepted is remembered so that the agent's write making exactly that change is
//! not asked again (`files.rs`); a cancelled loop answers `cancelled`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, ToolCallContent, ToolCallUpdateFields,
    ToolKind,
};

use super::kind_word;
use crate::tools::{AGENT_OWN_TOOL, ApprovalRequest, ChangeKind, Decision, ToolContext, file_diff};

/// The most of a call's raw input shown when it carries neither a command nor a diff.
const MAX_INPUT_CHARS: usize = 4000;

/// A change of a file the user accepted in a permission request: the agent's write making
/// exactly this change is not asked again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AcceptedDiff {
    pub(super) path: PathBuf,
    /// `None` for a file the change creates.
    pub(super) old_text: Option<String>,
    pub(super) new_text: String,
}

/// The kinds of call the user allowed from now on in this loop, and the diffs accepted and
/// not yet written.
#[derive(Default)]
pub(super) struct Permissions {
    allowed_always: Mutex<HashSet<&'static str>>,
    accepted_diffs: Mutex<Vec<AcceptedDiff>>,
}

/// What the user's answer becomes: the agent's options preferred, and whether Loopr keeps
/// "always" for this kind of call from now on.
enum Answer {
    Allow(&'static [PermissionOptionKind], bool),
    Reject,
}

const ONCE_FIRST: &[PermissionOptionKind] = &[
    PermissionOptionKind::AllowOnce,
    PermissionOptionKind::AllowAlways,
];
const ALWAYS_FIRST: &[PermissionOptionKind] = &[
    PermissionOptionKind::AllowAlways,
    PermissionOptionKind::AllowOnce,
];
const ONLY_ONCE: &[PermissionOptionKind] = &[PermissionOptionKind::AllowOnce];

impl Permissions {
    /// The user's answer to `request`, as the option of the agent's it chose.
    pub(super) async fn decide(
        &self,
        context: &ToolContext,
        request: RequestPermissionRequest,
    ) -> RequestPermissionResponse {
        if context.cancel.is_cancelled() {
            return cancelled();
        }
        let fields = &request.tool_call.fields;
        let kind = call_kind(fields);
        let word = kind_word(kind);
        let keeps_always = kept_always(kind);
        if keeps_always && self.allowed(word) {
            self.remember_diffs(fields);
            return choose(&request.options, ALWAYS_FIRST);
        }
        let title = fields
            .title
            .clone()
            .unwrap_or_else(|| format!("a {word} call"));
        let detail = {
            let root = context.root.clone();
            let request = request.clone();
            tokio::task::spawn_blocking(move || describe(&root, &request, kind))
                .await
                .unwrap_or_else(|err| format!("(its details could not be shown: {err})"))
        };
        let asked = ApprovalRequest {
            loop_id: context.loop_id.clone(),
            kind: change_kind(kind),
            tool: AGENT_OWN_TOOL,
            subject: title,
            detail,
        };
        let offers_once = offers(&request.options, PermissionOptionKind::AllowOnce);
        let answer = match context.approver.decide(asked, &context.cancel).await {
            None => return cancelled(),
            Some(Decision::Reject(_)) => Answer::Reject,
            // Only "allow always" is offered, and Loopr allows no such call for good.
            Some(_) if !keeps_always && !offers_once => Answer::Reject,
            Some(_) if !keeps_always => Answer::Allow(ONLY_ONCE, false),
            Some(Decision::AcceptAllOfKind) => Answer::Allow(ALWAYS_FIRST, true),
            Some(Decision::Accept) => Answer::Allow(ONCE_FIRST, false),
        };
        match answer {
            Answer::Reject => choose(
                &request.options,
                &[
                    PermissionOptionKind::RejectOnce,
                    PermissionOptionKind::RejectAlways,
                ],
            ),
            Answer::Allow(preferred, keep) => {
                let response = choose(&request.options, preferred);
                // Allowed always by the agent, it will not ask again: kept here too.
                if keep
                    || chose(
                        &response,
                        &request.options,
                        PermissionOptionKind::AllowAlways,
                    )
                {
                    self.allowed_always
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .insert(word);
                }
                self.remember_diffs(fields);
                response
            }
        }
    }

    fn allowed(&self, word: &str) -> bool {
        self.allowed_always
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(word)
    }

    /// Keeps the diffs of a call the user allowed.
    fn remember_diffs(&self, fields: &ToolCallUpdateFields) {
        let diffs = fields
            .content
            .iter()
            .flatten()
            .filter_map(|content| match content {
                ToolCallContent::Diff(diff) => Some(AcceptedDiff {
                    path: diff.path.clone(),
                    old_text: diff.old_text.clone(),
                    new_text: diff.new_text.clone(),
                }),
                _ => None,
            });
        self.accepted_diffs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(diffs);
    }

    /// The accepted diff writing `content` to `path`, taken: a change accepted once is
    /// written once unasked.
    pub(super) fn take_accepted_diff(
        &self,
        path: &std::path::Path,
        content: &str,
    ) -> Option<AcceptedDiff> {
        let mut diffs = self
            .accepted_diffs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let found = diffs
            .iter()
            .position(|diff| diff.path == path && diff.new_text == content)?;
        Some(diffs.remove(found))
    }
}

/// What a call does, read from what it carries before what it declares: a command makes it
/// an execute call (an agent may declare one "read"), a diff an edit.
fn call_kind(fields: &ToolCallUpdateFields) -> ToolKind {
    let contents = fields.content.iter().flatten();
    let runs = fields.raw_input.as_ref().and_then(command_of).is_some()
        || contents
            .clone()
            .any(|content| matches!(content, ToolCallContent::Terminal(_)));
    if runs {
        return ToolKind::Execute;
    }
    if contents
        .clone()
        .any(|content| matches!(content, ToolCallContent::Diff(_)))
    {
        return ToolKind::Edit;
    }
    fields.kind.unwrap_or_default()
}

/// Whether "allow always" may hold for calls of `kind`. Never for a command (each is asked),
/// a fetch, a mode switch (a mode may allow everything) or a call of another kind.
fn kept_always(kind: ToolKind) -> bool {
    matches!(
        kind,
        ToolKind::Read
            | ToolKind::Edit
            | ToolKind::Delete
            | ToolKind::Move
            | ToolKind::Search
            | ToolKind::Think
    )
}

fn offers(options: &[PermissionOption], kind: PermissionOptionKind) -> bool {
    options.iter().any(|option| option.kind == kind)
}

/// Whether `response` selected an option of `kind`.
fn chose(
    response: &RequestPermissionResponse,
    options: &[PermissionOption],
    kind: PermissionOptionKind,
) -> bool {
    match &response.outcome {
        RequestPermissionOutcome::Selected(selected) => options
            .iter()
            .any(|option| option.option_id == selected.option_id && option.kind == kind),
        _ => false,
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

/// The approval kind a call of `kind` is shown as. The request's tool (`AGENT_OWN_TOOL`)
/// makes the loop's policy ask it whatever its settings say for this kind.
fn change_kind(kind: ToolKind) -> ChangeKind {
    match kind {
        ToolKind::Execute => ChangeKind::Command,
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move => ChangeKind::Edit,
        _ => ChangeKind::Mcp,
    }
}

/// What the user is shown of the call: what it does, its command, its diffs, else its raw
/// input, and what accepting means with this agent. CPU-heavy for large diffs: call it off
/// the async threads.
fn describe(
    root: &crate::tools::ProjectRoot,
    request: &RequestPermissionRequest,
    kind: ToolKind,
) -> String {
    let fields = &request.tool_call.fields;
    let word = kind_word(kind);
    let mut detail = format!(
        "The agent asks to use its own tool ({word}); what its own tools do is not \
         confined by Loopr's sandbox.\n"
    );
    let declared = fields.kind.unwrap_or_default();
    if declared != kind {
        let _ = writeln!(
            detail,
            "It is asked as {word} for what it carries; it says \"{}\".",
            kind_word(declared)
        );
    }
    let command = fields.raw_input.as_ref().and_then(command_of);
    if let Some(command) = &command {
        // Every line of it marked, so that none reads as part of a diff.
        for (index, line) in command.split('\n').enumerate() {
            let _ = writeln!(detail, "{} {line}", if index == 0 { '$' } else { '>' });
        }
    }
    let mut diffs = 0;
    for content in fields.content.iter().flatten() {
        let ToolCallContent::Diff(diff) = content else {
            continue;
        };
        diffs += 1;
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
    if let (None, 0, Some(input)) = (&command, diffs, fields.raw_input.as_ref()) {
        let text = serde_json::to_string_pretty(input).unwrap_or_default();
        let shown: String = text.chars().take(MAX_INPUT_CHARS).collect();
        detail.push_str(&shown);
        if shown.len() < text.len() {
            detail.push_str("\n[... the rest of its input not shown]");
        }
        detail.push('\n');
    }
    detail.push_str(&what_accepting_means(&request.options, kind));
    detail
}

/// What `a` and `A` answer the agent, said before the user answers.
fn what_accepting_means(options: &[PermissionOption], kind: ToolKind) -> String {
    let word = kind_word(kind);
    let once = offers(options, PermissionOptionKind::AllowOnce);
    match (kept_always(kind), once) {
        (true, true) => {
            format!(
                "a allows this call once; A allows its {word} calls for the rest of this loop.\n"
            )
        }
        (true, false) => format!(
            "This agent offers no \"allow once\": accepting allows its {word} calls for the \
             rest of this loop.\n"
        ),
        (false, true) => format!("Each {word} call is asked: a and A allow this one only.\n"),
        (false, false) => format!(
            "This agent offers no \"allow once\", and Loopr allows no {word} call for good: \
             whatever you answer, the agent is told it is rejected.\n"
        ),
    }
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
