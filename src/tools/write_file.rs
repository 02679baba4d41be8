use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    ApprovalRequest, ChangeKind, Tool, ToolContext, ToolError, file_diff, parse_input,
    read_existing, refuse_secret, write_through_buffers,
};
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
        let path = context.root.resolve_for_write(&input.path)?;
        refuse_secret(context, &path)?;
        let shown = context.root.relative_display(&path);
        let current = read_existing(&path, &shown)?.unwrap_or_default();
        context
            .approve(ApprovalRequest {
                loop_id: String::new(),
                kind: ChangeKind::Write,
                tool: "write_file",
                subject: shown.clone(),
                detail: file_diff(&shown, &current, &input.content),
            })
            .await?;
        let existed = path.exists();
        let length = input.content.len();
        write_through_buffers(context, &input.path, shown.clone(), &current, input.content).await?;
        Ok(format!(
            "{} {shown} ({length} bytes)",
            if existed { "replaced" } else { "created" }
        ))
    }
}
