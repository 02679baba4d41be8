//! A call as written checked against the tools: a name, a known tool, arguments valid under
//! the tool's schema. A call that fails is never returned, only reported.

use serde_json::Value;

use super::calls::{RawArgs, RawCall};
use super::issue::{FormatIssue, IssueKind};
use super::syntax::CallKeys;
use super::typing::{TypeIssue, typed};
use crate::llm::ToolSpec;
use crate::schema::schema_issues;

/// The tool's name and its arguments, or `None` with the problem in `issues`.
pub(super) fn validate(
    call: RawCall,
    keys: CallKeys,
    tools: &[ToolSpec],
    issues: &mut Vec<FormatIssue>,
) -> Option<(String, Value)> {
    let known = known_tools(tools);
    if call.name.trim().is_empty() {
        issues.push(
            FormatIssue::new(
                IssueKind::EmptyName,
                "a call names no tool",
                format!(
                    "give every call a \"{}\" naming the tool to run: {known}",
                    keys.name
                ),
            )
            .quoting(&call.quote),
        );
        return None;
    }
    let Some(tool) = tools.iter().find(|tool| tool.name == call.name) else {
        issues.push(
            FormatIssue::new(
                IssueKind::UnknownTool,
                format!("there is no tool named \"{}\"", call.name),
                format!("call one of the tools there are: {known}"),
            )
            .quoting(&call.quote),
        );
        return None;
    };
    let args = match call.args {
        RawArgs::Json(args) => args,
        RawArgs::Yaml(node) => {
            let mut type_issues = Vec::new();
            let args = typed(&node, Some(&tool.input_schema), "input", &mut type_issues);
            if !type_issues.is_empty() {
                let problems: Vec<String> = type_issues
                    .into_iter()
                    .map(|TypeIssue { location, message }| format!("{location}: {message}"))
                    .collect();
                issues.push(invalid_arguments(&tool.name, &call.quote, &problems));
                return None;
            }
            args
        }
    };
    let problems: Vec<String> = schema_issues(&tool.input_schema, &args)
        .into_iter()
        .map(|issue| format!("{}: {}", issue.location, issue.message))
        .collect();
    if !problems.is_empty() {
        let quoted = crate::schema::keys_sorted(args.clone()).to_string();
        issues.push(invalid_arguments(&tool.name, &quoted, &problems));
        return None;
    }
    Some((tool.name.clone(), args))
}

fn invalid_arguments(tool: &str, quote: &str, problems: &[String]) -> FormatIssue {
    FormatIssue::new(
        IssueKind::InvalidArguments,
        format!("the arguments of the call of \"{tool}\" do not match its parameters"),
        format!(
            "fix them as its parameters say and call it again ({})",
            problems.join("; ")
        ),
    )
    .quoting(quote)
}

fn known_tools(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return "there are none; give your answer instead".to_owned();
    }
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    names.join(", ")
}
