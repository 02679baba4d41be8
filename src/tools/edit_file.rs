//! The `edit_file` tool: replaces one exact, unique piece of text in a project file (keeping
//! its line endings), after the user's approval.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChangeKind, Tool, ToolContext, ToolError, change_file, parse_input};
use crate::schema::input_schema_for;

/// Replace one exact piece of text in a file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// Relative to the project root.
    pub path: String,
    /// The exact text to replace, whitespace included.
    #[schemars(length(min = 1))]
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
}

pub struct EditFileTool;

/// What an edit is asked about as.
const CHANGE: ChangeKind = ChangeKind::Edit;

#[async_trait]
impl Tool for EditFileTool {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn description(&self) -> &'static str {
        "Replace text that occurs exactly once in a file: copy it from read_file's output \
         without the line numbers, with enough lines around it to be unique."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<EditFileInput>()
    }

    fn example(&self) -> Value {
        json!({"path": "src/main.rs", "old_string": "let verbose = false;", "new_string": "let verbose = args.verbose;"})
    }

    fn change_kind(&self) -> Option<ChangeKind> {
        Some(CHANGE)
    }

    fn use_when(&self) -> Option<&'static str> {
        Some("exact, unique replacements")
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: EditFileInput = parse_input(self.name(), input)?;
        if input.old_string.is_empty() {
            return Err(ToolError::InvalidInput(
                "old_string is empty; give the exact text to replace".to_owned(),
            ));
        }
        let EditFileInput {
            path,
            old_string,
            new_string,
        } = input;
        let changed = change_file(
            context,
            CHANGE,
            self.name(),
            &path,
            move |current, shown| {
                let file_error = |message: String| ToolError::File {
                    path: shown.to_owned(),
                    message,
                };
                let text = current.ok_or_else(|| {
                    file_error("does not exist; create it with write_file".to_owned())
                })?;
                replace_once(text, &old_string, &new_string).map_err(file_error)
            },
        )
        .await?;
        Ok(format!("edited {}", changed.shown))
    }
}

/// `text` with its single occurrence of `old` replaced by `new`, or why that is not
/// possible. In a file with CRLF line endings, `old` and `new` may use plain `\n` (as
/// `read_file` shows the lines); the replacement keeps the file's line endings.
pub fn replace_once(text: &str, old: &str, new: &str) -> Result<String, String> {
    let mut count = text.matches(old).count();
    if text.contains("\r\n") {
        let (old_crlf, new_crlf) = (with_crlf(old), with_crlf(new));
        let crlf_count = text.matches(old_crlf.as_str()).count();
        if crlf_count > 0 || count == 0 {
            count = crlf_count;
            if count == 1 {
                return Ok(text.replacen(old_crlf.as_str(), &new_crlf, 1));
            }
        }
    }
    match count {
        1 => Ok(text.replacen(old, new, 1)),
        0 => Err(
            "old_string does not occur in the file; read the file and copy the exact text, \
             including whitespace"
                .to_owned(),
        ),
        count => Err(format!(
            "old_string occurs {count} times; include more surrounding lines so it occurs exactly once"
        )),
    }
}

/// `text` with every line ending `\r\n`.
fn with_crlf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}
