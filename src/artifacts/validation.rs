use std::fmt;

use crate::schema::InputIssue;

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
