//! How the model is asked to call tools: the provider's own tool calling, or one of the text
//! protocols a model without it can follow (tool calls written in its answer, read back by
//! `llm::text_protocol`).

use serde::{Deserialize, Serialize};

/// The protocol a loop's model calls tools with.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolProtocol {
    /// The provider's tool calling (Anthropic tool_use, OpenAI tool_calls, Ollama tools).
    #[default]
    Native,
    /// Sections as XML tags: `<thinking>`, `<action>` (the calls), `<answer>`.
    Xml,
    /// Sections under Markdown headers: `# Thinking`, `# Action`, `# Answer`.
    Markdown,
    /// A `## Tool Calls` heading with one fenced JSON block per call.
    ToolCalls,
}

impl ToolProtocol {
    pub const ALL: [ToolProtocol; 4] = [
        ToolProtocol::Native,
        ToolProtocol::Xml,
        ToolProtocol::Markdown,
        ToolProtocol::ToolCalls,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolProtocol::Native => "native",
            ToolProtocol::Xml => "xml",
            ToolProtocol::Markdown => "markdown",
            ToolProtocol::ToolCalls => "tool_calls",
        }
    }

    /// Whether calls are read out of the answer's text rather than sent by the provider.
    pub fn is_text(self) -> bool {
        self != ToolProtocol::Native
    }
}

/// Whether the request tells the server to use its tools (OpenAI's `tool_choice`). Some
/// servers put the tools into the prompt only when it is sent (llama-cpp-python); without it
/// they leave the choice to the model, as every server does when the field is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model calls tools or answers in text, as it decides.
    Auto,
    /// The model must call at least one tool.
    Required,
}

impl ToolChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
        }
    }
}

/// How calls are written inside the `action` section of the `xml` and `markdown` protocols.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolFormat {
    /// `{"tool": NAME, "args": {...}}`, or an array of them.
    #[default]
    Json,
    /// `tool: NAME` and `args:`, or a list of those.
    Yaml,
}

impl ToolFormat {
    pub const ALL: [ToolFormat; 2] = [ToolFormat::Json, ToolFormat::Yaml];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolFormat::Json => "json",
            ToolFormat::Yaml => "yaml",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_and_write_as_the_settings_spell_them() {
        for protocol in ToolProtocol::ALL {
            let json = serde_json::to_value(protocol).expect("json");
            assert_eq!(json, protocol.as_str());
            assert_eq!(
                serde_json::from_value::<ToolProtocol>(json).expect("back"),
                protocol
            );
        }
        for format in ToolFormat::ALL {
            let json = serde_json::to_value(format).expect("json");
            assert_eq!(json, format.as_str());
        }
        assert!(serde_json::from_value::<ToolProtocol>("tools".into()).is_err());
    }
}
