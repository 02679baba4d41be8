//! Reading an answer's body within the attempt's bounds, the same for every provider: any byte
//! proves the server alive (keep-alive comments included), so silence is bounded by the idle
//! timeout; the request timeout bounds the wait for the answer to begin and, once it has, for
//! each next real piece of it (a server that only sends keep-alives still ends); an answer that
//! keeps making progress is never cut by a clock, only by a cap on its size.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::stream_failure::StreamFailure;

/// Bytes an answer may take on the wire for each token it may have; every wire wraps a token in
/// a chunk of JSON (llama-cpp-python's are about 230 bytes, its tool-call fragments 450).
const BYTES_PER_TOKEN: u64 = 1024;
/// The cap for a small `max_tokens`, which a whole answer with its framing may still pass.
const MIN_ANSWER_BYTES: u64 = 4 << 20;

/// Bytes one piece of an answer (an SSE event, an NDJSON line) may take: a piece is read whole
/// before any of it is used, and none a real server sends comes near this.
pub const MAX_PIECE_BYTES: usize = 1 << 20;

/// Why a piece of the answer (`what`: "event", "line") is not read on.
pub fn piece_too_long(what: &str) -> StreamFailure {
    StreamFailure::Protocol(format!(
        "one {what} of the answer is longer than {} MiB",
        MAX_PIECE_BYTES >> 20
    ))
}

/// The bounds of one attempt's answer.
#[derive(Clone, Copy, Debug)]
pub struct AnswerLimits {
    /// Silence after which the attempt counts as stalled.
    pub idle: Duration,
    /// How long the wait for the answer's next real piece may last (the request timeout).
    pub progress: Duration,
    /// When the answer must have begun: its head and its first real piece.
    pub start_by: Instant,
    /// Bytes the body may take.
    pub max_bytes: u64,
}

impl AnswerLimits {
    /// The bounds of an attempt starting now: `progress` to begin, `idle` of silence at most,
    /// and room for `max_tokens` tokens.
    pub fn starting_now(idle: Duration, progress: Duration, max_tokens: u32) -> AnswerLimits {
        AnswerLimits {
            idle,
            progress,
            start_by: Instant::now() + progress,
            max_bytes: u64::from(max_tokens)
                .saturating_mul(BYTES_PER_TOKEN)
                .max(MIN_ANSWER_BYTES),
        }
    }

    /// What is left of the wait for the answer's head.
    pub fn until_start(&self) -> Duration {
        self.start_by.saturating_duration_since(Instant::now())
    }
}

/// An answer's body, read a piece at a time within its [`AnswerLimits`]. The reader of the
/// wire says when a real piece of the answer came ([`AnswerBody::progressed`]).
pub struct AnswerBody<S> {
    bytes: S,
    limits: AnswerLimits,
    /// When the wait for the next real piece ends.
    progress_by: Instant,
    /// Whether a real piece came.
    started: bool,
    received: u64,
}

impl<S, E> AnswerBody<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    pub fn new(bytes: S, limits: AnswerLimits) -> AnswerBody<S> {
        AnswerBody {
            bytes,
            limits,
            progress_by: limits.start_by,
            started: false,
            received: 0,
        }
    }

    /// The next bytes, `None` at the body's end.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, StreamFailure> {
        let left = self.progress_by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.no_progress());
        }
        let wait = self.limits.idle.min(left);
        let next = match tokio::time::timeout(wait, self.bytes.next()).await {
            Ok(next) => next,
            Err(_) if wait < self.limits.idle => return Err(self.no_progress()),
            Err(_) => return Err(StreamFailure::Stalled(self.limits.idle)),
        };
        match next {
            None => Ok(None),
            Some(Err(err)) if self.started => Err(StreamFailure::Transport(innermost(&err))),
            Some(Err(err)) => Err(StreamFailure::DroppedBeforeAnswer(innermost(&err))),
            Some(Ok(chunk)) => {
                self.received = self.received.saturating_add(chunk.len() as u64);
                if self.received > self.limits.max_bytes {
                    return Err(StreamFailure::TooLong {
                        limit: self.limits.max_bytes,
                    });
                }
                Ok(Some(chunk))
            }
        }
    }

    /// A real piece of the answer came (not a keep-alive): the wait for the next one starts.
    pub fn progressed(&mut self) {
        self.started = true;
        self.progress_by = Instant::now() + self.limits.progress;
    }

    /// The whole body, read by the time the answer had to begin: an answer sent whole has no
    /// pieces of its own, so none of its bytes is progress (a server trickling it still ends).
    pub async fn read_all(mut self) -> Result<Vec<u8>, StreamFailure> {
        let mut whole = Vec::new();
        while let Some(chunk) = self.next_chunk().await? {
            self.started = true;
            whole.extend_from_slice(&chunk);
        }
        Ok(whole)
    }

    fn no_progress(&self) -> StreamFailure {
        StreamFailure::NoProgress {
            waited: self.limits.progress,
            started: self.started,
        }
    }
}

/// What an error comes down to: its innermost cause (reqwest's "error decoding response body"
/// says less than the "end of file before message length reached" under it).
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(
        pieces: Vec<(Duration, &'static str)>,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
        Box::pin(
            futures::stream::iter(pieces).then(|(delay, piece)| async move {
                tokio::time::sleep(delay).await;
                Ok(Bytes::from_static(piece.as_bytes()))
            }),
        )
    }

    fn limits(max_tokens: u32) -> AnswerLimits {
        AnswerLimits::starting_now(Duration::from_secs(10), Duration::from_secs(60), max_tokens)
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alives_reset_the_idle_timeout_but_never_count_as_progress() {
        // A keep-alive every 8 s, under the 10 s idle timeout, for longer than the 60 s
        // request timeout.
        let pings = std::iter::repeat_n((Duration::from_secs(8), ": ping\n\n"), 20).collect();
        let mut body = AnswerBody::new(chunks(pings), limits(100));
        let begin = Instant::now();
        let failure = loop {
            match body.next_chunk().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the pings end first"),
                Err(failure) => break failure,
            }
        };
        assert_eq!(
            failure,
            StreamFailure::NoProgress {
                waited: Duration::from_secs(60),
                started: false
            }
        );
        assert_eq!(begin.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_making_progress_outlasts_the_request_timeout() {
        // A piece every 8 s for 160 s, against a 60 s request timeout.
        let pieces = std::iter::repeat_n((Duration::from_secs(8), "data: x\n\n"), 20).collect();
        let mut body = AnswerBody::new(chunks(pieces), limits(100));
        let mut read = 0;
        while let Some(chunk) = body.next_chunk().await.expect("no failure") {
            body.progressed();
            read += chunk.len();
        }
        assert_eq!(read, 20 * "data: x\n\n".len());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_sent_whole_and_trickled_ends_at_the_request_timeout() {
        // A piece every 8 s, under the 10 s idle timeout, for far longer than the 60 s
        // request timeout: nothing of a whole answer is progress until it is done.
        let pieces = std::iter::repeat_n((Duration::from_secs(8), "{"), 1000).collect();
        let body = AnswerBody::new(chunks(pieces), limits(100));
        let begin = Instant::now();
        assert_eq!(
            body.read_all().await,
            Err(StreamFailure::NoProgress {
                waited: Duration::from_secs(60),
                started: true
            })
        );
        assert_eq!(begin.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn silence_stalls_after_the_idle_timeout() {
        let pieces = vec![
            (Duration::ZERO, "data: x\n\n"),
            (Duration::from_secs(11), "data: late\n\n"),
        ];
        let mut body = AnswerBody::new(chunks(pieces), limits(100));
        body.next_chunk().await.expect("the first piece");
        body.progressed();
        assert_eq!(
            body.next_chunk().await,
            Err(StreamFailure::Stalled(Duration::from_secs(10)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_its_cap_is_stopped_and_says_so() {
        let endless = Box::pin(futures::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 64 * 1024]))
        }));
        let mut body = AnswerBody::new(endless, limits(8));
        let failure = loop {
            match body.next_chunk().await {
                Ok(Some(_)) => body.progressed(),
                Ok(None) => panic!("the stream is endless"),
                Err(failure) => break failure,
            }
        };
        assert_eq!(
            failure,
            StreamFailure::TooLong {
                limit: MIN_ANSWER_BYTES
            }
        );
        assert_eq!(limits(100_000).max_bytes, 100_000 * BYTES_PER_TOKEN);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_broken_before_the_answer_began_is_told_apart() {
        let broken = || {
            Box::pin(futures::stream::iter([
                Ok(Bytes::from_static(b": ping\n\n")),
                Err(std::io::Error::other(
                    "end of file before message length reached",
                )),
            ]))
        };
        let mut body = AnswerBody::new(broken(), limits(100));
        body.next_chunk().await.expect("a ping");
        assert!(matches!(
            body.next_chunk().await,
            Err(StreamFailure::DroppedBeforeAnswer(_))
        ));
        let mut body = AnswerBody::new(broken(), limits(100));
        body.next_chunk().await.expect("a piece");
        body.progressed();
        assert!(matches!(
            body.next_chunk().await,
            Err(StreamFailure::Transport(_))
        ));
    }
}
