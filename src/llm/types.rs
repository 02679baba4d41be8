//! Loopr's own conversation: what was said and called, independent of any provider's wire
//! form. Each provider translates it to its wire and back; the serde form is the stored form
//! (journal, conversation files), which also reads the Anthropic-shaped form earlier versions
//! stored.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One block of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A call the model made. `input` is what it sent; when that was not a JSON object,
    /// `input_error` says why, and the call is answered with an error instead of running.
    #[serde(alias = "tool_use")]
    ToolCall {
        id: String,
        name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input_error: Option<String>,
    },
    ToolResult {
        #[serde(alias = "tool_use_id")]
        id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }

    /// A well-formed call.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, input: Value) -> ContentBlock {
        ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            input,
            input_error: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }
}

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The schema the model is shown (`schema::model_schema`): it accepts what the tool's
    /// full schema accepts, nothing more.
    pub input_schema: Value,
    /// One realistic call's input, which the text protocols show (never sent as a native
    /// tool's definition); `None` for a tool that offers none (an MCP server's), whose
    /// example is then made up from the schema.
    #[serde(skip)]
    pub example: Option<Value>,
}

impl ToolSpec {
    /// The tool as the model is shown it: its full input schema trimmed by
    /// `schema::model_schema`, and its example call.
    pub fn offered(
        name: impl Into<String>,
        description: impl Into<String>,
        full_schema: &Value,
        example: Option<Value>,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: crate::schema::model_schema(full_schema),
            example,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub model: String,
    pub max_tokens: u32,
    pub system: String,
    /// Shared, never changed once sent: a provider may keep what it made of a message for
    /// the next request, which repeats it (`WireCache`).
    pub messages: Vec<Arc<Message>>,
    /// Shared: a loop offers the same tools every turn, and loops of a level the same ones.
    pub tools: Arc<[ToolSpec]>,
}

/// `messages` in the form a request holds them.
/// A token count as a server reported it, at most `u32::MAX`: no model counts more, and a
/// server's number, whatever it is, must leave room for the sums made of it.
pub(crate) fn token_count(value: &Value) -> Option<u64> {
    value.as_u64().map(|count| count.min(u64::from(u32::MAX)))
}

pub fn shared(messages: Vec<Message>) -> Vec<Arc<Message>> {
    messages.into_iter().map(Arc::new).collect()
}

/// Tokens of one turn (or summed over many), the same way for every provider: input read at
/// full price, output, and input written to or read from the provider's prompt cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    /// Loopr's estimate, not the server's count: the server reported no usage (llama.cpp's
    /// servers never do). In a sum, some of its counts are estimates.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Every input token, cached or not.
    pub fn total_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_write_tokens)
            .saturating_add(self.cache_read_tokens)
    }

    pub fn add(&mut self, other: &Usage) {
        // Counts are clamped when read, but a run adds up many turns: never wrap.
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.estimated |= other.estimated;
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    Other(String),
}

/// One complete assistant answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Finished blocks only: a tool call appears here only if its input arrived whole.
    pub content: Vec<ContentBlock>,
    /// Names of tool calls whose input was cut off (by `max_tokens`); they are never run.
    pub truncated_tool_calls: Vec<String>,
    pub stop_reason: Option<StopReason>,
    /// What the server counted; none when it reported nothing (not even a zero), which the
    /// turn engine then estimates.
    pub usage: Option<Usage>,
    /// Set when the answer was to follow a text protocol and could not be read: what to tell
    /// the model (the problems and their fixes). Nothing of such an answer runs.
    pub unreadable: Option<String>,
}

/// A tool call of a turn, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
    /// Why `input` is unusable (not a JSON object); such a call never runs.
    pub input_error: Option<String>,
}

impl Turn {
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolCall {
                    id,
                    name,
                    input,
                    input_error,
                } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                    input_error: input_error.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_stored_as_before_unless_it_is_an_estimate() {
        let counted = Usage {
            input_tokens: 3,
            ..Usage::default()
        };
        let stored = serde_json::to_value(counted).expect("json");
        assert_eq!(stored.get("estimated"), None, "earlier versions read it");
        let estimated = Usage {
            estimated: true,
            ..counted
        };
        let stored = serde_json::to_value(estimated).expect("json");
        assert_eq!(stored["estimated"], true);
        assert_eq!(
            serde_json::from_value::<Usage>(stored).expect("read back"),
            estimated
        );
        let mut sum = counted;
        sum.add(&estimated);
        assert!(sum.estimated, "a sum with an estimate in it is one");
    }

    #[test]
    fn sums_of_any_counts_a_server_sends_saturate_instead_of_overflowing() {
        let huge = Usage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_write_tokens: 1,
            cache_read_tokens: 1,
            estimated: false,
        };
        assert_eq!(huge.total_input(), u64::MAX);
        let mut sum = huge;
        sum.add(&huge);
        assert_eq!((sum.input_tokens, sum.output_tokens), (u64::MAX, u64::MAX));
    }

    #[test]
    fn a_count_is_clamped_where_it_is_read() {
        assert_eq!(
            token_count(&serde_json::json!(u64::MAX)),
            Some(u64::from(u32::MAX))
        );
        assert_eq!(token_count(&serde_json::json!(12)), Some(12));
        assert_eq!(token_count(&serde_json::json!(-3)), None);
        assert_eq!(token_count(&serde_json::json!("12")), None);
    }

    #[test]
    fn the_anthropic_shaped_form_earlier_versions_stored_still_reads() {
        let old = serde_json::json!([
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "grep", "input": {"pattern": "x"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "none", "is_error": true}
            ]}
        ]);
        let messages: Vec<Message> = serde_json::from_value(old).expect("old form");
        assert_eq!(
            messages[0].content[0],
            ContentBlock::tool_call("t1", "grep", serde_json::json!({"pattern": "x"}))
        );
        assert_eq!(
            messages[1].content[0],
            ContentBlock::ToolResult {
                id: "t1".to_owned(),
                content: "none".to_owned(),
                is_error: true
            }
        );
        let stored = serde_json::to_value(&messages).expect("json");
        assert_eq!(stored[0]["content"][0]["type"], "tool_call");
        assert_eq!(stored[1]["content"][0]["id"], "t1");
    }
}
