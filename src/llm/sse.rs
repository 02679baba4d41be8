//! Server-sent events read from an answer's body (the WHATWG event-stream format): lines ended
//! by LF, CRLF or CR, split anywhere across reads; `event:` and `data:` fields, an event
//! dispatched at a blank line; comments (`: ping - ...`) read and dropped, their bytes still
//! proving the server alive. One field no standard has is kept: llama.cpp's `llama-server`
//! reports a failure in the stream as an `error: {...}` line, which a standard reader drops.

use bytes::Bytes;
use futures::Stream;

use super::StreamFailure;
use super::answer_body::{AnswerBody, MAX_PIECE_BYTES, piece_too_long};

/// What the stream carried.
#[derive(Clone, Debug, PartialEq)]
pub enum SseItem {
    Event {
        /// The `event:` name; empty when it had none.
        name: String,
        /// The `data:` lines, joined with newlines.
        data: String,
    },
    /// The value of an `error:` field (llama-server).
    Error(String),
}

/// Reads [`SseItem`]s from an answer's body.
pub struct SseReader<S> {
    body: AnswerBody<S>,
    buffer: Vec<u8>,
    /// Where the unread part of `buffer` starts.
    start: usize,
    /// Up to where the unread part is known to hold no line ending: a long line coming in
    /// small pieces is searched once, not again with every piece.
    searched: usize,
    name: String,
    data: String,
    has_data: bool,
    error: Option<String>,
    ended: bool,
}

impl<S, E> SseReader<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    pub fn new(body: AnswerBody<S>) -> SseReader<S> {
        SseReader {
            body,
            buffer: Vec::new(),
            start: 0,
            searched: 0,
            name: String::new(),
            data: String::new(),
            has_data: false,
            error: None,
            ended: false,
        }
    }

    /// The body the events come from (the reader of the wire tells it about progress).
    pub fn body(&mut self) -> &mut AnswerBody<S> {
        &mut self.body
    }

    /// The next event or error field; `None` at the body's end (an event the body ended in
    /// the middle of is dropped, as the format says).
    pub async fn next(&mut self) -> Result<Option<SseItem>, StreamFailure> {
        loop {
            while let Some(line) = self.next_line() {
                if let Some(item) = self.take_line(&line) {
                    return Ok(Some(item));
                }
            }
            if self.ended {
                return Ok(None);
            }
            // What is left unread is one line not yet ended, part of the event being read.
            if self.buffer.len() - self.start + self.data.len() > MAX_PIECE_BYTES {
                return Err(piece_too_long("event"));
            }
            match self.body.next_chunk().await? {
                Some(chunk) => {
                    self.buffer.drain(..self.start);
                    self.searched -= self.start;
                    self.start = 0;
                    self.buffer.extend_from_slice(&chunk);
                }
                None => self.ended = true,
            }
        }
    }

    /// The next whole line, without its ending. A CR at the end of what came so far waits for
    /// the next read, which may bring its LF.
    fn next_line(&mut self) -> Option<String> {
        let from = self.searched.max(self.start);
        let Some(offset) = self.buffer[from..]
            .iter()
            .position(|byte| *byte == b'\n' || *byte == b'\r')
        else {
            self.searched = self.buffer.len();
            return None;
        };
        let end = from + offset;
        let ending = match (self.buffer[end], self.buffer.get(end + 1)) {
            (b'\r', Some(b'\n')) => 2,
            (b'\r', None) if !self.ended => {
                self.searched = end;
                return None;
            }
            _ => 1,
        };
        let line = String::from_utf8_lossy(&self.buffer[self.start..end]).into_owned();
        self.start = end + ending;
        self.searched = self.start;
        Some(line)
    }

    fn take_line(&mut self, line: &str) -> Option<SseItem> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "error" => self.error = Some(value.to_owned()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseItem> {
        let name = std::mem::take(&mut self.name);
        let data = std::mem::take(&mut self.data);
        let has_data = std::mem::replace(&mut self.has_data, false);
        if let Some(error) = self.error.take() {
            return Some(SseItem::Error(error));
        }
        has_data.then_some(SseItem::Event { name, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::answer_body::AnswerLimits;
    use std::time::Duration;

    async fn read_all(pieces: Vec<&'static [u8]>) -> Vec<SseItem> {
        let stream = futures::stream::iter(
            pieces
                .into_iter()
                .map(|piece| Ok::<_, std::io::Error>(Bytes::from_static(piece))),
        );
        let limits =
            AnswerLimits::starting_now(Duration::from_secs(5), Duration::from_secs(5), 100);
        let mut reader = SseReader::new(AnswerBody::new(stream, limits));
        let mut items = Vec::new();
        while let Some(item) = reader.next().await.expect("no failure") {
            items.push(item);
        }
        items
    }

    fn event(name: &str, data: &str) -> SseItem {
        SseItem::Event {
            name: name.to_owned(),
            data: data.to_owned(),
        }
    }

    const STREAM: &[u8] = b": ping - 2026-11-25 21:04:39.062661+00:00\n\n\
        event: message_start\r\ndata: {\"a\": 1}\r\n\r\n\
        data: first\rdata:second\r\r\
        id: 7\nretry: 10\nfield without colon\ndata: x\n\n\
        error: {\"code\":400}\n\n\
        data: [DONE]\n\n\
        data: cut off";

    #[tokio::test]
    async fn fields_events_and_comments_read_alike_at_every_split() {
        let expected = vec![
            event("message_start", "{\"a\": 1}"),
            event("", "first\nsecond"),
            event("", "x"),
            SseItem::Error("{\"code\":400}".to_owned()),
            event("", "[DONE]"),
        ];
        assert_eq!(read_all(vec![STREAM]).await, expected);
        for split in 1..STREAM.len() {
            let (head, tail) = STREAM.split_at(split);
            assert_eq!(
                read_all(vec![head, tail]).await,
                expected,
                "split at byte {split}"
            );
        }
    }

    #[tokio::test]
    async fn a_long_line_in_one_byte_pieces_is_read_whole() {
        let line: &'static [u8] = Box::leak(
            format!("data: {}\n\n", "x".repeat(200_000))
                .into_bytes()
                .into_boxed_slice(),
        );
        let items = read_all(line.chunks(1).collect()).await;
        assert_eq!(items, vec![event("", &"x".repeat(200_000))]);
    }

    #[tokio::test]
    async fn a_line_split_inside_a_character_is_read_whole() {
        let text = "data: wörld\n\n".as_bytes();
        let at = text.iter().position(|byte| *byte >= 0x80).expect("ö") + 1;
        let (head, tail) = text.split_at(at);
        let head: &'static [u8] = Box::leak(head.to_vec().into_boxed_slice());
        let tail: &'static [u8] = Box::leak(tail.to_vec().into_boxed_slice());
        assert_eq!(read_all(vec![head, tail]).await, vec![event("", "wörld")]);
    }

    #[tokio::test]
    async fn an_event_longer_than_its_cap_fails_before_it_ends() {
        let line = vec![b'x'; 64 * 1024];
        // `data:` lines with no blank line to end the event, each under the cap, far past it.
        let pieces = std::iter::once(b"data: ".to_vec())
            .chain(std::iter::repeat_n(line, 64).flat_map(|line| [line, b"\ndata: ".to_vec()]))
            .map(|piece| Ok::<_, std::io::Error>(Bytes::from(piece)));
        let limits =
            AnswerLimits::starting_now(Duration::from_secs(5), Duration::from_secs(5), 100_000);
        let mut reader = SseReader::new(AnswerBody::new(futures::stream::iter(pieces), limits));
        let result = reader.next().await;
        assert!(
            matches!(&result, Err(StreamFailure::Protocol(message)) if message.contains("1 MiB")),
            "{result:?}"
        );
        // One line with no end at all.
        let endless = futures::stream::iter(
            std::iter::repeat_n(vec![b'x'; 64 * 1024], 64)
                .map(|piece| Ok::<_, std::io::Error>(Bytes::from(piece))),
        );
        let mut reader = SseReader::new(AnswerBody::new(endless, limits));
        assert!(matches!(
            reader.next().await,
            Err(StreamFailure::Protocol(_))
        ));
    }
}
