use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{ChangeKind, Tool, ToolContext, ToolError, change_file, parse_input};
use crate::schema::input_schema_for;

/// Create or replace a file of the project.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// Path relative to the project root; missing directories are created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

pub struct WriteFileTool;

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Create a file, or replace a file's whole content. Prefer edit_file for changes to an \
         existing file. Paths are relative to the project root; .git is never written."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<WriteFileInput>()
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: WriteFileInput = parse_input(self.name(), input)?;
        let content = input.content;
        let changed = change_file(
            context,
            ChangeKind::Write,
            "write_file",
            &input.path,
            move |_current, _shown| Ok(content),
        )
        .await?;
        Ok(format!(
            "{} {} ({} bytes)",
            if changed.created {
                "created"
            } else {
                "replaced"
            },
            changed.shown,
            changed.length
        ))
    }
}
