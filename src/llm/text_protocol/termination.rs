//! A typed final answer: one JSON object of a Rust type, its schema shown to the model, the
//! answer checked against it with every problem named.

use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::commonmark;
use super::instructions::example_arguments;
use super::issue::{FormatIssue, IssueKind};
use crate::schema::{input_schema_for, schema_issues};

/// The final answer as a JSON object of type `T` (the plain-text termination is
/// `ParsedAnswer::answer` itself).
pub struct JsonTermination<T> {
    schema: Value,
    answer_type: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned + JsonSchema> Default for JsonTermination<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: DeserializeOwned + JsonSchema> JsonTermination<T> {
    pub fn new() -> Self {
        JsonTermination {
            schema: input_schema_for::<T>(),
            answer_type: PhantomData,
        }
    }

    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// What the final answer must be, for the system prompt.
    pub fn instructions(&self) -> String {
        let mut text = format!(
            "Your final answer is one JSON object valid under this JSON Schema (a ```json fence \
             around it is fine):\n{}",
            self.schema
        );
        if let Some(example) = example_arguments(&self.schema) {
            text.push_str(&format!("\nExample:\n{example}"));
        }
        text
    }

    /// The final answer's text read as `T`, or every problem with it.
    pub fn parse(&self, answer: &str) -> Result<T, Vec<FormatIssue>> {
        let fences = commonmark::fenced_blocks(answer);
        let body = match fences.first() {
            Some(fence) if fence.closed => fence.content.as_str(),
            Some(fence) => return Err(vec![super::calls::unclosed_fence(&fence.content)]),
            None => answer,
        };
        let value: Value = serde_json::from_str(body.trim()).map_err(|error| {
            vec![
                FormatIssue::new(
                    IssueKind::Syntax,
                    format!("the final answer is not valid JSON ({error})"),
                    "give it as one JSON object valid under the schema, nothing around it",
                )
                .quoting(body),
            ]
        })?;
        let problems = schema_issues(&self.schema, &value);
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|problem| {
                    FormatIssue::new(
                        IssueKind::InvalidAnswer,
                        format!(
                            "the final answer does not match its schema at {}",
                            problem.location
                        ),
                        format!("fix it: {}", problem.message),
                    )
                })
                .collect());
        }
        serde_json::from_value(value).map_err(|error| {
            vec![FormatIssue::new(
                IssueKind::InvalidAnswer,
                format!("the final answer does not fit its type ({error})"),
                "give it as the schema describes",
            )]
        })
    }
}
