//! Request bodies that cost each turn only what the turn added. A conversation only grows, and
//! every request repeats it whole: serializing megabytes of old tool results on every turn
//! would make a long loop's late turns the slowest. A provider keeps here the JSON it made of
//! each message (keyed by the exact shared message and the one before it, which some wires
//! read) and splices the messages into the body.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde::Serialize;

use super::Message;
use super::per_message::PerMessage;

#[derive(Default)]
pub struct WireCache {
    /// Per message: a comma, then its wire messages comma-separated (empty when it has none).
    units: PerMessage<Bytes>,
}

impl WireCache {
    /// The JSON array of `lead` (wire messages before the conversation, such as a system
    /// message) and the wire messages `render` makes of each message, given the one before
    /// it (as `comma_separated` JSON). Messages rendered for an earlier request are reused.
    pub fn messages_array<L: Serialize>(
        &self,
        lead: &[L],
        messages: &[Arc<Message>],
        render: impl Fn(Option<&Message>, &Message) -> serde_json::Result<Vec<u8>>,
    ) -> serde_json::Result<Vec<u8>> {
        let mut parts = Vec::new();
        self.array_parts(&mut parts, lead, messages, render)?;
        Ok(parts.concat())
    }

    /// The request body: `head` (which serializes as a JSON object) with a `messages` field
    /// holding what `messages_array` makes. The kept messages are not copied: the body is
    /// sent as their pieces (a long conversation is megabytes).
    pub fn body<L: Serialize>(
        &self,
        head: &impl Serialize,
        lead: &[L],
        messages: &[Arc<Message>],
        render: impl Fn(Option<&Message>, &Message) -> serde_json::Result<Vec<u8>>,
    ) -> serde_json::Result<RequestBytes> {
        let mut opening = serde_json::to_vec(head)?;
        if opening.pop() != Some(b'}') {
            return Err(serde::ser::Error::custom("a request body is a JSON object"));
        }
        if opening.len() > 1 {
            opening.push(b',');
        }
        opening.extend_from_slice(b"\"messages\":");
        let mut parts = vec![Bytes::from(opening)];
        self.array_parts(&mut parts, lead, messages, render)?;
        parts.push(Bytes::from_static(b"}"));
        Ok(RequestBytes::new(parts))
    }

    /// Like `body`, but the last message is made by `render_last` and not kept: a wire that
    /// marks the end of the conversation sends that message unmarked once it is no longer
    /// the last.
    pub fn body_with_last<L: Serialize>(
        &self,
        head: &impl Serialize,
        lead: &[L],
        messages: &[Arc<Message>],
        render: impl Fn(Option<&Message>, &Message) -> serde_json::Result<Vec<u8>>,
        render_last: impl Fn(Option<&Message>, &Message) -> serde_json::Result<Vec<u8>>,
    ) -> serde_json::Result<RequestBytes> {
        let Some((last, kept)) = messages.split_last() else {
            return self.body(head, lead, messages, render);
        };
        let mut body = self.body(head, lead, kept, render)?;
        let previous = kept.last().map(|previous| &**previous);
        let rendered = render_last(previous, last)?;
        body.insert_before_end(&rendered);
        Ok(body)
    }

    fn array_parts<L: Serialize>(
        &self,
        parts: &mut Vec<Bytes>,
        lead: &[L],
        messages: &[Arc<Message>],
        render: impl Fn(Option<&Message>, &Message) -> serde_json::Result<Vec<u8>>,
    ) -> serde_json::Result<()> {
        let units = self.units.made(messages, |previous, message| {
            let rendered = render(previous, message)?;
            let mut json = Vec::with_capacity(rendered.len() + 1);
            if !rendered.is_empty() {
                json.push(b',');
                json.extend_from_slice(&rendered);
            }
            Ok::<_, serde_json::Error>(Bytes::from(json))
        })?;
        let mut lead = comma_separated(lead)?;
        if !lead.is_empty() {
            lead.insert(0, b',');
        }
        parts.push(Bytes::from_static(b"["));
        // Each piece carries its leading comma, so a message is one piece of the body (and
        // one slot of a vectored write); the first piece's comma is sliced off.
        let mut first = true;
        for part in std::iter::once(Bytes::from(lead)).chain(units) {
            if part.is_empty() {
                continue;
            }
            parts.push(if std::mem::take(&mut first) {
                part.slice(1..)
            } else {
                part
            });
        }
        parts.push(Bytes::from_static(b"]"));
        Ok(())
    }
}

/// A request body as pieces that share the cache's bytes; sent with its exact length.
#[derive(Clone, Debug)]
pub struct RequestBytes {
    parts: Arc<[Bytes]>,
    len: u64,
}

impl RequestBytes {
    fn new(parts: Vec<Bytes>) -> RequestBytes {
        let len = parts.iter().map(|part| part.len() as u64).sum();
        RequestBytes {
            parts: parts.into(),
            len,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Adds `json` as the last element of the messages array, which the body's last two
    /// pieces close (`]` and `}`).
    fn insert_before_end(&mut self, json: &[u8]) {
        let mut parts: Vec<Bytes> = self.parts.iter().cloned().collect();
        let closing = parts.split_off(parts.len().saturating_sub(2));
        if !json.is_empty() {
            let array_is_empty = parts.last().is_some_and(|part| part.as_ref() == b"[");
            let mut piece = Vec::with_capacity(json.len() + 1);
            if !array_is_empty {
                piece.push(b',');
            }
            piece.extend_from_slice(json);
            parts.push(Bytes::from(piece));
        }
        parts.extend(closing);
        *self = RequestBytes::new(parts);
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole body in one buffer (tests, error reports).
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.concat()
    }

    /// A body for one attempt (each retry sends it again).
    pub fn to_body(&self) -> reqwest::Body {
        reqwest::Body::wrap(PartsBody {
            parts: Arc::clone(&self.parts),
            next: 0,
            remaining: self.len,
        })
    }
}

struct PartsBody {
    parts: Arc<[Bytes]>,
    next: usize,
    remaining: u64,
}

impl http_body::Body for PartsBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let body = &mut *self;
        while let Some(part) = body.parts.get(body.next) {
            body.next += 1;
            if !part.is_empty() {
                body.remaining -= part.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(part.clone()))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// `items` as JSON, separated by commas (the inside of an array).
pub fn comma_separated<T: Serialize>(items: &[T]) -> serde_json::Result<Vec<u8>> {
    let mut json = Vec::new();
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            json.push(b',');
        }
        serde_json::to_writer(&mut json, item)?;
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Role, shared};
    use std::cell::Cell;

    fn render(previous: Option<&Message>, message: &Message) -> serde_json::Result<Vec<u8>> {
        let after = previous.map_or("none", |p| {
            if p.role == Role::User {
                "user"
            } else {
                "assistant"
            }
        });
        comma_separated(&[
            serde_json::json!({"text": format!("{:?}", message.content), "after": after}),
        ])
    }

    #[test]
    fn a_growing_conversation_renders_only_its_new_messages_and_reads_the_same() {
        let cache = WireCache::default();
        let mut messages = shared(vec![Message::user_text("one")]);
        let renders = Cell::new(0);
        let counting = |previous: Option<&Message>, message: &Message| {
            renders.set(renders.get() + 1);
            render(previous, message)
        };
        let lead = [serde_json::json!({"role": "system"})];
        cache
            .messages_array(&lead, &messages, counting)
            .expect("json");
        messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: vec![crate::llm::ContentBlock::text("two")],
        }));
        messages.push(Arc::new(Message::user_text("three")));
        let cached = cache
            .messages_array(&lead, &messages, counting)
            .expect("json");
        assert_eq!(renders.get(), 3, "each message rendered once");
        let fresh = WireCache::default()
            .messages_array(&lead, &messages, render)
            .expect("json");
        assert_eq!(cached, fresh);
        let parsed: serde_json::Value = serde_json::from_slice(&cached).expect("valid JSON");
        assert_eq!(parsed.as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn a_changed_message_and_what_follows_it_are_rendered_again() {
        let cache = WireCache::default();
        let mut messages = shared(vec![
            Message::user_text("one"),
            Message::user_text("two"),
            Message::user_text("three"),
        ]);
        let none: [serde_json::Value; 0] = [];
        cache
            .messages_array(&none, &messages, render)
            .expect("json");
        // A message replaced (feedback joined to it) is another Arc: never served stale.
        Arc::make_mut(&mut messages[1])
            .content
            .push(crate::llm::ContentBlock::text("more"));
        let cached = cache
            .messages_array(&none, &messages, render)
            .expect("json");
        let fresh = WireCache::default()
            .messages_array(&none, &messages, render)
            .expect("json");
        assert_eq!(cached, fresh);
        assert!(String::from_utf8_lossy(&cached).contains("more"));
    }

    #[test]
    fn the_last_message_made_apart_joins_the_body_and_is_never_kept() {
        let cache = WireCache::default();
        let mut messages = shared(vec![Message::user_text("one"), Message::user_text("two")]);
        let none: [serde_json::Value; 0] = [];
        let marked = |_: Option<&Message>, message: &Message| {
            comma_separated(&[serde_json::json!({"marked": format!("{:?}", message.content)})])
        };
        let head = serde_json::json!({"model": "m"});
        let body = cache
            .body_with_last(&head, &none, &messages, render, marked)
            .expect("body");
        let parsed: serde_json::Value = serde_json::from_slice(&body.to_vec()).expect("json");
        assert_eq!(body.len() as usize, body.to_vec().len());
        let sent = parsed["messages"].as_array().expect("messages");
        assert_eq!(sent.len(), 2);
        assert!(sent[0].get("marked").is_none() && sent[1].get("marked").is_some());
        // Next turn, "two" is no longer last: it goes out as `render` makes it.
        messages.push(Arc::new(Message::user_text("three")));
        let next = cache
            .body_with_last(&head, &none, &messages, render, marked)
            .expect("body");
        let fresh = WireCache::default()
            .body_with_last(&head, &none, &messages, render, marked)
            .expect("body");
        assert_eq!(next.to_vec(), fresh.to_vec());
        let only = WireCache::default()
            .body_with_last(&head, &none, &messages[..1], render, marked)
            .expect("body")
            .to_vec();
        let parsed: serde_json::Value = serde_json::from_slice(&only).expect("one message");
        assert_eq!(parsed["messages"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn messages_are_spliced_into_the_body() {
        let cache = WireCache::default();
        let messages = shared(vec![Message::user_text("one")]);
        let lead = [serde_json::json!({"role": "system"})];
        let body = cache
            .body(&serde_json::json!({"model": "m"}), &lead, &messages, render)
            .expect("body")
            .to_vec();
        let parsed: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(parsed["model"], "m");
        assert_eq!(parsed["messages"].as_array().map(Vec::len), Some(2));
        let none: [serde_json::Value; 0] = [];
        let empty = WireCache::default()
            .body(&serde_json::json!({}), &none, &[], render)
            .expect("body")
            .to_vec();
        assert_eq!(empty, b"{\"messages\":[]}".to_vec());
    }
}
