//! The `write_file` tool: creates or replaces a project file whole, after the user's approval.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChangeKind, Tool, ToolContext, ToolError, change_file, parse_input};
use crate::schema::input_schema_for;

/// Create or replace a file of the project.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// Relative to the project root; missing directories are created.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

pub struct WriteFileTool;

/// What a write is asked about as.
const CHANGE: ChangeKind = ChangeKind::Write;

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Create a file or replace its whole content (edit_file changes part of one)."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<WriteFileInput>()
    }

    fn example(&self) -> Value {
        json!({"path": "docs/usage.md", "content": "# Usage\n\nRun `demo --help` to see the options.\n"})
    }

    fn change_kind(&self) -> Option<ChangeKind> {
        Some(CHANGE)
    }

    fn use_when(&self) -> Option<&'static str> {
        Some("new files")
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: WriteFileInput = parse_input(self.name(), input)?;
        let content = input.content;
        let changed = change_file(
            context,
            CHANGE,
            self.name(),
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
