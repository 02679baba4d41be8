use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    ApprovalRequest, ChangeKind, Tool, ToolContext, ToolError, file_diff, parse_input,
    read_existing, refuse_secret, write_through_buffers,
};
use crate::schema::input_schema_for;

/// Replace one exact piece of text in a file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// Path relative to the project root.
    pub path: String,
    /// The exact text to replace, including whitespace and indentation; it must occur exactly
    /// once in the file.
    #[schemars(length(min = 1))]
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
}

pub struct EditFileTool;

#[async_trait]
impl Tool for EditFileTool {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn description(&self) -> &'static str {
        "Replace an exact piece of text in an existing file. old_string must occur exactly once: \
         copy it from read_file output (without the line numbers) and include enough \
         surrounding lines to make it unique."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<EditFileInput>()
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: EditFileInput = parse_input(self.name(), input)?;
        if input.old_string.is_empty() {
            return Err(ToolError::InvalidInput(
                "old_string is empty; give the exact text to replace".to_owned(),
            ));
        }
        let path = context.root.resolve_for_write(&input.path)?;
        refuse_secret(context, &path)?;
        let shown = context.root.relative_display(&path);
        let file_error = |message: String| ToolError::File {
            path: shown.clone(),
            message,
        };
        let text = read_existing(&path, &shown)?
            .ok_or_else(|| file_error("does not exist; create it with write_file".to_owned()))?;
        let edited =
            replace_once(&text, &input.old_string, &input.new_string).map_err(file_error)?;
        context
            .approve(ApprovalRequest {
                loop_id: String::new(),
                kind: ChangeKind::Edit,
                tool: "edit_file",
                subject: shown.clone(),
                detail: file_diff(&shown, &text, &edited),
            })
            .await?;
        write_through_buffers(context, &input.path, shown.clone(), &text, edited).await?;
        Ok(format!("edited {shown}"))
    }
}

/// `text` with its single occurrence of `old` replaced, or why that is not possible.
pub fn replace_once(text: &str, old: &str, new: &str) -> Result<String, String> {
    match text.matches(old).count() {
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
