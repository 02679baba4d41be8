//! Any provider, spoken to in a text tool-call protocol: the tools are described in the
//! system prompt instead of sent as tools, the model's calls are read out of its answer, and
//! tool results go back as text. The loops see the same turns as with native tool calling.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::per_message::PerMessage;
use super::text_protocol::{self, TextProtocol};
use super::text_results::render_result;
use super::{
    CallsSent, ChatRequest, ContentBlock, LlmError, LlmProvider, Message, ProviderEvent,
    ServerWindow, ToolFormat, ToolProtocol, ToolSpec, Turn,
};

/// `inner` as the loops use it: itself for native tool calling, or spoken to in a text
/// protocol.
pub fn with_tool_protocol(
    inner: Arc<dyn LlmProvider>,
    protocol: ToolProtocol,
    format: ToolFormat,
) -> Arc<dyn LlmProvider> {
    match TextProtocol::new(protocol, format) {
        Some(protocol) => Arc::new(TextProtocolProvider::new(inner, protocol)),
        None => inner,
    }
}

pub struct TextProtocolProvider {
    inner: Arc<dyn LlmProvider>,
    protocol: TextProtocol,
    /// What each message became as text, kept because a provider keeps its wire form by
    /// message (`WireCache`): a fresh copy every turn would make it serialize the whole
    /// conversation again.
    translated: PerMessage<Arc<Message>>,
    /// The system prompt with the protocol's instructions, for the tools it was made for.
    system: Mutex<Option<System>>,
}

struct System {
    tools: Arc<[ToolSpec]>,
    base: String,
    with_instructions: String,
}

impl TextProtocolProvider {
    pub fn new(inner: Arc<dyn LlmProvider>, protocol: TextProtocol) -> TextProtocolProvider {
        TextProtocolProvider {
            inner,
            protocol,
            translated: PerMessage::default(),
            system: Mutex::new(None),
        }
    }

    fn system_prompt(&self, request: &ChatRequest) -> String {
        let mut cached = self.system.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(system) = cached.as_ref()
            && Arc::ptr_eq(&system.tools, &request.tools)
            && system.base == request.system
        {
            return system.with_instructions.clone();
        }
        let instructions = text_protocol::instructions(&self.protocol, &request.tools);
        let with_instructions = if request.system.is_empty() {
            instructions
        } else {
            format!("{}\n\n{instructions}", request.system)
        };
        *cached = Some(System {
            tools: Arc::clone(&request.tools),
            base: request.system.clone(),
            with_instructions: with_instructions.clone(),
        });
        with_instructions
    }

    /// The conversation with calls left in the text that made them and results as text.
    fn messages(&self, messages: &[Arc<Message>]) -> Vec<Arc<Message>> {
        let made = self.translated.made(messages, |previous, message| {
            Ok::<_, std::convert::Infallible>(Arc::new(self.as_text(previous, message)))
        });
        match made {
            Ok(messages) => messages,
            Err(never) => match never {},
        }
    }

    fn as_text(&self, previous: Option<&Message>, message: &Message) -> Message {
        let tool_name = |id: &str| {
            previous
                .into_iter()
                .flat_map(|previous| &previous.content)
                .find_map(|block| match block {
                    ContentBlock::ToolCall { id: call, name, .. } if call == id => {
                        Some(name.as_str())
                    }
                    _ => None,
                })
                .unwrap_or("tool")
        };
        let content = message
            .content
            .iter()
            .filter_map(|block| match block {
                // The answer's text holds its calls as the model wrote them.
                ContentBlock::ToolCall { .. } => None,
                ContentBlock::Text { text } => Some(ContentBlock::text(text.clone())),
                ContentBlock::ToolResult {
                    id,
                    content,
                    is_error,
                } => Some(ContentBlock::text(render_result(
                    self.protocol.protocol(),
                    tool_name(id),
                    id,
                    content,
                    *is_error,
                ))),
            })
            .collect();
        Message {
            role: message.role,
            content,
        }
    }

    /// The answer with the calls read out of its text, or what to tell the model when it
    /// could not be read.
    /// (An answer cut off at a length limit is told so by the turn engine, which knows what
    /// was sent, and so whether the limit was `max_tokens` or the server's context.)
    fn read(&self, mut turn: Turn, tools: &[ToolSpec]) -> Turn {
        let text = turn.text();
        let parsed = text_protocol::parse(&self.protocol, &text, tools);
        let mut content = vec![ContentBlock::text(text)];
        if parsed.issues.is_empty() {
            content.extend(
                parsed
                    .calls
                    .into_iter()
                    .map(|call| ContentBlock::tool_call(call.id, call.name, call.input)),
            );
        } else {
            turn.unreadable = Some(text_protocol::feedback(&self.protocol, &parsed.issues));
        }
        turn.content = content;
        turn
    }
}

#[async_trait]
impl LlmProvider for TextProtocolProvider {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        let wire = ChatRequest {
            model: request.model.clone(),
            max_tokens: request.max_tokens,
            system: self.system_prompt(request),
            messages: self.messages(&request.messages),
            tools: Arc::from(Vec::new()),
        };
        let turn = self.inner.complete(&wire, on_event, cancel).await?;
        Ok(self.read(turn, &request.tools))
    }

    async fn server_window(&self, model: &str) -> ServerWindow {
        self.inner.server_window(model).await
    }

    fn calls_sent(&self) -> CallsSent {
        CallsSent::InTheText
    }
}
