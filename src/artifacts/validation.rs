//! What artifact validation shares: the report of everything wrong with one artifact call
//! (written for the model), schema checking with advice, name and content checks.

use std::collections::HashMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::{InputIssue, input_schema_for, schema_issues};

/// An accepted artifact and its markdown, references linked.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked<T> {
    pub artifact: T,
    pub markdown: String,
}

/// Everything wrong with one artifact tool call, written for the model: each issue names the
/// field and what to change, and the whole report asks for a corrected call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationReport {
    pub tool: &'static str,
    pub issues: Vec<InputIssue>,
}

impl fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} rejected the input ({} problem{}); nothing was saved. Fix every problem below \
             and call {} again with the complete corrected input:",
            self.tool,
            self.issues.len(),
            if self.issues.len() == 1 { "" } else { "s" },
            self.tool
        )?;
        for issue in &self.issues {
            writeln!(f, "- {}: {}", issue.location, issue.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationReport {}

/// Adds advice to the schema validator's terse messages.
pub fn with_schema_hint(mut issue: InputIssue) -> InputIssue {
    let hint = match issue.keyword.as_str() {
        "pattern" if issue.location.starts_with("requirements[") => {
            Some("write \"R\" and a number, e.g. \"R1\"")
        }
        "pattern" => Some("use lowercase words joined by hyphens, e.g. \"user-auth\""),
        "additionalProperties" => Some("remove the fields the schema does not define"),
        "required" => Some("add the missing field"),
        "minItems" | "maxItems" => Some("change the number of items to fit the limit"),
        "minLength" => Some("write a non-empty value"),
        "type" => Some("use the type the schema gives for this field"),
        _ => None,
    };
    if let Some(hint) = hint {
        issue.message = format!("{}; {hint}", issue.message);
    }
    issue
}

/// Checks `input` against the schema generated from `T` and parses it; every schema problem is
/// reported at once, with advice.
pub fn parse_against_schema<T: JsonSchema + DeserializeOwned>(
    tool: &'static str,
    input: &Value,
) -> Result<T, ValidationReport> {
    let report = |issues| ValidationReport { tool, issues };
    let problems: Vec<InputIssue> = schema_issues(&input_schema_for::<T>(), input)
        .into_iter()
        .map(with_schema_hint)
        .collect();
    if !problems.is_empty() {
        return Err(report(problems));
    }
    serde_json::from_value(input.clone())
        .map_err(|err| report(vec![InputIssue::rule("input", err.to_string())]))
}

pub fn is_kebab_case(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|word| {
            !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Issues for names that are not kebab-case or repeat an earlier one; `what` is the list
/// field (`specs`, `phases`). Returns the index of each name's first use.
pub fn name_issues<'a>(
    what: &str,
    names: impl Iterator<Item = &'a str>,
    issues: &mut Vec<InputIssue>,
) -> HashMap<&'a str, usize> {
    let mut first_index: HashMap<&str, usize> = HashMap::new();
    for (index, name) in names.enumerate() {
        let location = format!("{what}[{index}].name");
        if !is_kebab_case(name) {
            issues.push(InputIssue::rule(
                location.clone(),
                format!(
                    "{name:?} is not kebab-case; use lowercase words joined by hyphens, e.g. \"user-auth\""
                ),
            ));
        }
        if let Some(&first) = first_index.get(name) {
            issues.push(InputIssue::rule(
                location,
                format!("{name:?} is already the name of {what}[{first}]; give each a unique name"),
            ));
        } else {
            first_index.insert(name, index);
        }
    }
    first_index
}

/// Counts the characters of content in rendered markdown: lines that are neither blank nor
/// headings, as the seed measures sparseness.
pub fn content_chars(markdown: &str) -> usize {
    markdown
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| line.chars().count())
        .sum()
}

/// An issue if the rendered artifact has less content than `minimum` characters.
pub fn sparseness_issue(kind: &str, markdown: &str, minimum: usize) -> Option<InputIssue> {
    let found = content_chars(markdown);
    (found < minimum).then(|| {
        InputIssue::rule(
            "input",
            format!(
                "the {kind} is too sparse: {found} characters of content, at least {minimum} \
                 needed; add concrete detail (what, where, how it is verified)"
            ),
        )
    })
}

/// Test helper: a scope with no parent where no absolute path exists.
#[cfg(test)]
pub fn detached_scope() -> super::ReferenceScope<'static> {
    fn nothing_exists(_: &std::path::Path) -> bool {
        false
    }
    super::ReferenceScope {
        parent: None,
        path_exists: &nothing_exists,
    }
}

/// Test helper: `issues` has one at `location` whose message contains `needle`.
#[cfg(test)]
pub fn assert_has_issue(issues: &[InputIssue], location: &str, needle: &str) {
    assert!(
        issues
            .iter()
            .any(|issue| issue.location == location && issue.message.contains(needle)),
        "expected an issue at {location} containing {needle:?}, got {issues:#?}"
    );
}
