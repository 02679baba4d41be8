//! The words the loops say to the model.

use serde_json::Value;

use super::cut_off::CutOff;
use super::repetition::ordinal;
use crate::artifacts::{ArtifactKind, PlanArtifact, SpecArtifact, SpecReference};
use crate::llm::ToolSpec;
use crate::llm::text_protocol::{TextProtocol, render_call};
use crate::tools::{ChangeKind, ToolRegistry};

pub fn system_prompt(kind: ArtifactKind, project_name: &str, tool_names: &[&str]) -> String {
    let tools = tool_names.join(", ");
    let (stage, deliver) = match kind {
        ArtifactKind::Plan => (
            "the planning stage: turn the user's request into a plan that other loops will \
             implement spec by spec",
            "- Split the work into 1 to 10 specs, each a coherent piece that can be specified \
             and implemented on its own. Give each a unique kebab-case name (e.g. \"user-auth\") \
             and list, in dependencies, the specs that must be complete before it can start. No \
             cycles.\n- State non-goals and risks honestly.",
        ),
        ArtifactKind::Spec => (
            "the specification stage: detail one spec of an approved plan so it can be split \
             into phases",
            "- Split the spec into 3 to 7 phases (Rule of Five), each a step that can be \
             implemented and verified on its own, with unique kebab-case names.\n- State \
             the requirements (R1, R2, ...) and name in each phase the ids it covers; every \
             requirement is covered by a phase.\n- Give acceptance criteria that can be \
             checked and a test strategy.",
        ),
        ArtifactKind::Phase => (
            "the phase stage: turn one phase of a spec into concrete tasks for the code loop",
            "- List specific tasks, each naming the file it touches (relative to the project \
             root) and whether it is created, modified or deleted: files to modify or delete \
             must exist, files to create must not.\n- Give the shell command that passes once \
             the phase is done (validation_command).",
        ),
    };
    let tool = kind.tool_name();
    format!(
        "You are {stage}, working inside the project \"{project_name}\".

How to work:
- First explore the project with the read-only tools ({tools}) until you understand the parts \
the work touches: layout, conventions, tests, build. Paths are relative to the project root.
- Then deliver your answer by calling the {tool} tool. Do not write the answer as text: {tool} \
is the only way to answer. The host validates it, stores it and renders it as markdown for \
the user to review.
{deliver}
- Be concrete: name files, modules and commands you saw.
- If {tool} reports problems, fix all of them and call it again with the complete input."
    )
}

pub fn code_system_prompt(project_name: &str, tools: &ToolRegistry) -> String {
    format!(
        "You are the code stage of Loopr, working inside the project \"{project_name}\": you \
implement one phase of an approved spec, in the user's editor.

How to work:
- Read what you need first ({names}); paths are relative to the project root.
- {changing}. The user may review and reject a change; a rejection comes back with their \
reason: take it into account.
- Keep to the phase's tasks; do not touch unrelated files.
- As you finish tasks, call mark_tasks_done with their numbers as phase.md shows them.
- When the tasks are done, call complete_phase. The host runs the phase's validation command; \
if it fails you get its output: fix the cause and call complete_phase again.",
        names = tools.names().join(", "),
        changing = changing_tools(tools),
    )
}

/// What the code prompt calls the tools of each kind of change, in the order it names them:
/// the narrowest change first.
const CHANGES_NAMED: [(&str, &[ChangeKind]); 2] = [
    ("Change files with", &[ChangeKind::Edit, ChangeKind::Write]),
    ("run commands with", &[ChangeKind::Command]),
];

/// "Change files with edit_file (exact, unique replacements) or write_file (new files), and
/// run commands with run_command": the changing tools of `tools`, each as its kind of change
/// and its `use_when` say.
fn changing_tools(tools: &ToolRegistry) -> String {
    let clauses: Vec<String> = CHANGES_NAMED
        .iter()
        .filter_map(|(verb, kinds)| {
            let named: Vec<String> = kinds
                .iter()
                .flat_map(|kind| {
                    tools
                        .iter()
                        .filter(move |tool| tool.change_kind() == Some(*kind))
                })
                .map(|tool| match tool.use_when() {
                    Some(when) => format!("{} ({when})", tool.name()),
                    None => tool.name().to_owned(),
                })
                .collect();
            (!named.is_empty()).then(|| format!("{verb} {}", one_of(&named)))
        })
        .collect();
    clauses.join(", and ")
}

/// "a", "a or b", "a, b or c".
fn one_of(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [only] => only.clone(),
        [first @ .., last] => format!("{} or {last}", first.join(", ")),
    }
}

pub fn code_task_message(
    phase_markdown: &str,
    spec: Option<&SpecArtifact>,
    plan: Option<&PlanArtifact>,
) -> String {
    let mut message = String::from("Implement this phase.\n\n");
    message.push_str(phase_markdown.trim());
    message.push('\n');
    if let Some(spec) = spec {
        message.push_str(&format!(
            "\nIt belongs to the spec \"{}\": {}\n\n{}\n",
            spec.name,
            spec.title,
            spec.overview.trim()
        ));
    }
    if let Some(plan) = plan {
        message.push_str(&format!(
            "\nThe plan: {}\n\n{}\n",
            plan.title,
            plan.overview.trim()
        ));
    }
    message
}

pub fn plan_task_message(task: &str) -> String {
    format!("Plan this change:\n\n{}", task.trim())
}

pub fn spec_task_message(plan: &PlanArtifact, spec: &SpecReference) -> String {
    let mut message = format!(
        "Write the spec named \"{}\" of this approved plan.\n\n# Plan: {}\n\n{}\n\nSpecs of the plan:\n",
        spec.name,
        plan.title,
        plan.overview.trim()
    );
    for other in &plan.specs {
        let marker = if other.name == spec.name {
            " <- this one"
        } else {
            ""
        };
        message.push_str(&format!("- {}: {}{marker}\n", other.name, other.title));
    }
    message.push_str(&format!(
        "\n# Spec \"{}\": {}\n\n{}\n",
        spec.name,
        spec.title,
        spec.description.trim()
    ));
    if !spec.dependencies.is_empty() {
        message.push_str(&format!(
            "\nIt builds on the specs {}, which are complete.\n",
            spec.dependencies.join(", ")
        ));
    }
    message.push_str(&format!(
        "\nCall {} with name \"{}\" once you know the files involved.",
        ArtifactKind::Spec.tool_name(),
        spec.name
    ));
    message
}

pub fn phase_task_message(spec: &SpecArtifact, index: usize) -> String {
    let phase = &spec.phases[index.min(spec.phases.len().saturating_sub(1))];
    let mut message = format!(
        "Write phase {} of {} of the spec \"{}\": turn it into concrete tasks.\n\n# Spec: {}\n\n{}\n\nPhases of the spec:\n",
        index + 1,
        spec.phases.len(),
        spec.name,
        spec.title,
        spec.overview.trim()
    );
    for (position, other) in spec.phases.iter().enumerate() {
        let marker = if position == index {
            " <- this one"
        } else {
            ""
        };
        message.push_str(&format!(
            "{}. {}: {}{marker}\n",
            position + 1,
            other.name,
            other.title
        ));
    }
    message.push_str(&format!(
        "\n# Phase \"{}\": {}\n\n{}\n",
        phase.name,
        phase.title,
        phase.description.trim()
    ));
    if !phase.files.is_empty() {
        message.push_str(&format!(
            "\nFiles named by the spec: {}\n",
            phase.files.join(", ")
        ));
    }
    if let Some(validation) = phase.validation.as_deref() {
        message.push_str(&format!("Validation named by the spec: {validation}\n"));
    }
    let known = spec.requirements_or_criteria();
    let assigned: Vec<_> = known
        .iter()
        .filter(|requirement| phase.requirements.contains(&requirement.id))
        .collect();
    if !assigned.is_empty() {
        message.push_str(
            "\nRequirements this phase covers; cite each in the requirements of a task that \
             satisfies it:\n",
        );
        for requirement in assigned {
            message.push_str(&format!("- {}: {}\n", requirement.id, requirement.text));
        }
    }
    message.push_str(&format!(
        "\nCall {} with name \"{}\" once you know exactly which files change.",
        ArtifactKind::Phase.tool_name(),
        phase.name
    ));
    message
}

pub fn revision_request(
    kind: ArtifactKind,
    iteration: u32,
    previous: &Value,
    feedback: &str,
) -> String {
    format!(
        "\n\nYou wrote this {kind} before (iteration {iteration}):\n\n```json\n{}\n```\n\nThe user \
         reviewed it and asks for these changes:\n\n{}\n\nCall {} with the complete revised {kind}.",
        serde_json::to_string_pretty(previous).unwrap_or_default(),
        feedback.trim(),
        kind.tool_name(),
        kind = kind.as_str(),
    )
}

pub fn review_request(
    kind: ArtifactKind,
    pass: usize,
    passes: usize,
    focus: &str,
    question: &str,
    review_tool: &str,
) -> String {
    format!(
        "Review pass {pass} of {passes}: {focus}. Review the {kind} you just created with fresh \
         eyes, checking it against the project where needed. {question} Then call {review_tool} \
         with verdict \"approve\", or \"revise\" and the issues; after \"revise\", call {} with \
         the complete revised {kind}.",
        kind.tool_name(),
        kind = kind.as_str(),
    )
}

/// The user's feedback on a code loop's work, which starts a new iteration (`again`: what
/// has the work checked again, such as "call complete_phase again").
pub fn code_revision_request(feedback: &str, again: &str) -> String {
    format!(
        "The user reviewed the changes so far and asks for more work:\n\n{feedback}\n\nMake \
         these changes, then {again}."
    )
}

/// What the model is told when it called nothing: that the task needs `tool`, and, in a text
/// protocol (where not calling may mean not knowing how), a call of it written in the
/// protocol's syntax with the tool's example.
pub fn nudge_to_call(tool: &ToolSpec, protocol: Option<TextProtocol>) -> String {
    let name = &tool.name;
    let mut nudge = format!(
        "You have not called {name} yet. The task is only done when {name} succeeds: keep \
         exploring with the tools if you must, then call {name}."
    );
    if let (Some(protocol), Some(example)) = (protocol, tool.example.as_ref()) {
        nudge.push_str(&format!(
            " A call is written like this, with your own arguments:\n\n{}",
            render_call(&protocol, name, example)
        ));
    }
    nudge
}

/// The note after an answer whose calls to `names` were cut off, by `cut_off`.
pub fn truncated_tool_call_note(names: &[String], cut_off: &CutOff) -> String {
    let names = names.join(", ");
    let stopped = match cut_off {
        CutOff::TokenLimit { max_tokens } => format!(
            "Your previous answer hit the max_tokens limit ({max_tokens}) while writing a call \
             to {names}"
        ),
        CutOff::ContextWindow {
            answer_tokens,
            window,
            estimated,
        } => format!(
            "{} while writing a call to {names}",
            stopped_by_the_server(*answer_tokens, *window, *estimated, "your previous answer")
        ),
    };
    format!(
        "{stopped}; its input was incomplete, so it was not run. Call it again with more \
         concise input."
    )
}

/// What a reply that broke a text protocol is told first when `cut_off` ended it.
pub fn cut_off_reply_note(cut_off: &CutOff) -> String {
    let stopped = match cut_off {
        CutOff::TokenLimit { max_tokens } => {
            format!("Your reply was cut off at the limit of {max_tokens} tokens")
        }
        CutOff::ContextWindow {
            answer_tokens,
            window,
            estimated,
        } => stopped_by_the_server(*answer_tokens, *window, *estimated, "your reply"),
    };
    format!(
        "{stopped}, so its end is missing; keep the thinking short and make fewer or smaller \
         calls."
    )
}

/// "The server stopped your reply after 148 tokens, probably at its context window of 2048
/// tokens (the conversation and your reply together)"; "about" where the numbers are the
/// host's estimates.
fn stopped_by_the_server(answer_tokens: u64, window: u64, estimated: bool, what: &str) -> String {
    let about = if estimated { "about " } else { "" };
    let mut sentence = format!(
        "the server stopped {what} after {about}{answer_tokens} tokens, probably at its context \
         window of {about}{window} tokens (the conversation and {what} together)"
    );
    sentence[..1].make_ascii_uppercase();
    sentence
}

/// Added to the results of a turn whose calls failed exactly as in the turns before it, the
/// `times`th time in a row; at `stop_at` the loop stops.
pub fn repeated_failure_note(times: u32, stop_at: u32) -> String {
    format!(
        "This is the {} time this exact call failed with the same error; do something \
         different: change the input as the error says, or take another step first. The loop \
         stops if the same call fails the same way {stop_at} times in a row.",
        ordinal(times)
    )
}

/// Added to the note for an answer that ran no call, the `times`th such answer in a row.
pub fn repeated_inaction_note(times: u32, stop_at: u32) -> String {
    format!(
        "This is the {} answer in a row that ran no tool call; do something different: call a \
         tool now. The loop stops after {stop_at} such answers in a row.",
        ordinal(times)
    )
}

/// Added to the feedback on an answer a text protocol could not read for the same reason as
/// the ones before it, the `times`th time in a row.
pub fn repeated_unreadable_note(times: u32) -> String {
    format!(
        "This is the {} time your answer could not be read for the same reason; do something \
         different: write the call exactly in the format shown.",
        ordinal(times)
    )
}

/// The answer to a call whose input could not be read.
pub fn unusable_input(tool: &str, problem: &str) -> String {
    format!(
        "{tool} was not run: {problem}. Call it again with its arguments as one JSON object \
         that matches the tool's schema."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::create_plan_spec;
    use crate::llm::text_protocol::parse;
    use crate::llm::{ToolFormat, ToolProtocol};

    #[test]
    fn a_nudge_in_a_text_protocol_shows_a_call_written_in_its_syntax() {
        let tool = create_plan_spec();
        let example = tool.example.clone().expect("create_plan has an example");
        for (protocol, format) in [
            (ToolProtocol::Xml, ToolFormat::Json),
            (ToolProtocol::Xml, ToolFormat::Yaml),
            (ToolProtocol::Markdown, ToolFormat::Json),
            (ToolProtocol::Markdown, ToolFormat::Yaml),
            (ToolProtocol::ToolCalls, ToolFormat::Json),
        ] {
            let protocol = TextProtocol::new(protocol, format).expect("a text protocol");
            let nudge = nudge_to_call(&tool, Some(protocol));
            assert!(
                nudge.starts_with("You have not called create_plan yet."),
                "{nudge}"
            );
            let call = render_call(&protocol, "create_plan", &example);
            assert!(nudge.contains(&call), "{protocol:?}: {nudge}");
            let shown = &nudge[nudge.find(&call).expect("the call")..];
            let parsed = parse(&protocol, shown, std::slice::from_ref(&tool));
            assert_eq!(parsed.issues, Vec::new(), "{protocol:?}: {nudge}");
            assert_eq!(parsed.calls.len(), 1, "{protocol:?}: {nudge}");
            assert_eq!(parsed.calls[0].input, example);
        }
    }

    #[test]
    fn an_answer_cut_off_at_max_tokens_is_told_the_limit() {
        let limit = CutOff::TokenLimit { max_tokens: 512 };
        assert_eq!(
            cut_off_reply_note(&limit),
            "Your reply was cut off at the limit of 512 tokens, so its end is missing; keep the \
             thinking short and make fewer or smaller calls."
        );
        assert_eq!(
            truncated_tool_call_note(&["create_plan".to_owned()], &limit),
            "Your previous answer hit the max_tokens limit (512) while writing a call to \
             create_plan; its input was incomplete, so it was not run. Call it again with more \
             concise input."
        );
    }

    #[test]
    fn an_answer_the_servers_context_stopped_is_told_so_not_the_token_limit() {
        let reported = CutOff::ContextWindow {
            answer_tokens: 148,
            window: 2_048,
            estimated: false,
        };
        assert_eq!(
            cut_off_reply_note(&reported),
            "The server stopped your reply after 148 tokens, probably at its context window of \
             2048 tokens (the conversation and your reply together), so its end is missing; keep \
             the thinking short and make fewer or smaller calls."
        );
        let estimated = CutOff::ContextWindow {
            answer_tokens: 150,
            window: 2_100,
            estimated: true,
        };
        assert_eq!(
            truncated_tool_call_note(&["read_file".to_owned(), "grep".to_owned()], &estimated),
            "The server stopped your previous answer after about 150 tokens, probably at its \
             context window of about 2100 tokens (the conversation and your previous answer \
             together) while writing a call to read_file, grep; its input was incomplete, so it \
             was not run. Call it again with more concise input."
        );
    }

    #[test]
    fn the_code_prompt_names_each_changing_tool_as_the_tool_says() {
        let tools = ToolRegistry::for_loop(crate::store::LoopType::Code, true);
        assert_eq!(
            code_system_prompt("demo", &tools),
            "You are the code stage of Loopr, working inside the project \"demo\": you \
             implement one phase of an approved spec, in the user's editor.\n\nHow to work:\n- \
             Read what you need first (read_file, list_files, grep, write_file, edit_file, \
             run_command, web_fetch); paths are relative to the project root.\n- Change files \
             with edit_file (exact, unique replacements) or write_file (new files), and run \
             commands with run_command. The user may review and reject a change; a rejection \
             comes back with their reason: take it into account.\n- Keep to the phase's tasks; \
             do not touch unrelated files.\n- As you finish tasks, call mark_tasks_done with \
             their numbers as phase.md shows them.\n- When the tasks are done, call \
             complete_phase. The host runs the phase's validation command; if it fails you get \
             its output: fix the cause and call complete_phase again."
        );
        assert_eq!(one_of(&["a".to_owned()]), "a");
        assert_eq!(
            one_of(&["a".to_owned(), "b".to_owned(), "c".to_owned()]),
            "a, b or c"
        );
    }

    #[test]
    fn a_nudge_with_native_tool_calling_names_the_tool_only() {
        let nudge = nudge_to_call(&create_plan_spec(), None);
        assert_eq!(
            nudge,
            "You have not called create_plan yet. The task is only done when create_plan \
             succeeds: keep exploring with the tools if you must, then call create_plan."
        );
    }
}
