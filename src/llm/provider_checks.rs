//! Checks every provider passes the same way (tests only): bounds, runtimes and bodies made of
//! pieces for its answer reader, the paused-clock checks that a silent body stalls and that
//! pieces carrying nothing keep a body alive but are no progress, and a request run with the
//! retries it reported.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;

use tokio_util::sync::CancellationToken;

use super::{AnswerLimits, ChatRequest, LlmError, LlmProvider, ProviderEvent, StreamFailure, Turn};

/// An answer's body as a reader takes it.
pub type Body = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// Bounds with `idle` as the idle timeout and room enough for everything else.
pub fn limits(idle: Duration) -> AnswerLimits {
    AnswerLimits::starting_now(idle, Duration::from_secs(3600), 100_000)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A runtime whose clock moves only when every task waits: hours of timeouts pass at once.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// A body of `chunks`, each arriving at once.
pub fn body(chunks: Vec<Vec<u8>>) -> Body {
    Box::pin(futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, std::io::Error>(Bytes::from(chunk))),
    ))
}

/// A body that never sends a byte stalls at the idle timeout.
pub fn assert_a_silent_body_stalls<Read, Reading>(read: Read)
where
    Read: FnOnce(Body, AnswerLimits) -> Reading,
    Reading: Future<Output = Result<Turn, StreamFailure>>,
{
    let silent: Body = Box::pin(futures::stream::pending());
    let result = paused_runtime().block_on(read(silent, limits(Duration::from_secs(30))));
    assert_eq!(result, Err(StreamFailure::Stalled(Duration::from_secs(30))));
}

/// `text` (a piece of real text), then pieces in `empties` every 8 s, under the 10 s idle
/// timeout, for far longer than the 60 s request timeout: the answer makes no progress after
/// its text, and fails when the request timeout has passed since it, not later.
pub fn assert_empty_pieces_are_no_progress<Read, Reading>(
    text: String,
    empties: Vec<String>,
    read: Read,
) where
    Read: FnOnce(Body, AnswerLimits) -> Reading,
    Reading: Future<Output = Result<Turn, StreamFailure>>,
{
    let pieces = std::iter::once(text).chain(empties.into_iter().cycle().take(1000));
    let paced: Body = Box::pin(futures::StreamExt::then(
        futures::stream::iter(pieces),
        |piece| async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            Ok::<_, std::io::Error>(Bytes::from(piece))
        },
    ));
    let limits =
        AnswerLimits::starting_now(Duration::from_secs(10), Duration::from_secs(60), 100_000);
    let (result, elapsed) = paused_runtime().block_on(async {
        let begin = tokio::time::Instant::now();
        let result = read(paced, limits).await;
        (result, begin.elapsed())
    });
    assert_eq!(
        result,
        Err(StreamFailure::NoProgress {
            waited: Duration::from_secs(60),
            started: true
        })
    );
    assert!(elapsed <= Duration::from_secs(68), "{elapsed:?}");
}

/// Runs `request` through `provider` (bounded, so a test never hangs); returns its result and
/// the retries it reported (reason, delay).
pub async fn complete_recording_retries(
    provider: &dyn LlmProvider,
    request: &ChatRequest,
) -> (Result<Turn, LlmError>, Vec<(String, Duration)>) {
    let retries = std::sync::Mutex::new(Vec::new());
    let record = |event: ProviderEvent| {
        if let ProviderEvent::Retrying { reason, delay, .. } = event {
            retries.lock().expect("retries").push((reason, delay));
        }
    };
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        provider.complete(request, &record, &CancellationToken::new()),
    )
    .await
    .expect("the request ends");
    (result, retries.into_inner().expect("retries"))
}
