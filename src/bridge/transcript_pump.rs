//! Delivers followed transcripts to Lua. Text is gathered for a cycle (a streamed answer is
//! many small pieces, and each call wakes Neovim), then each transcript's text goes in a call
//! of its own (a large stored one in several), and those calls are spread over the next cycle:
//! each call is work Neovim (and the terminal drawing it) does at once, and between calls it
//! answers everyone else. With 8 transcripts streaming, one call for all of them doubled
//! Neovim's p99 latency; sending them back to back raised it by a third.

use std::future::Future;
use std::time::Duration;

use futures::io::AsyncWrite;
use nvim_rs::{Neovim, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::event_pump::{Delivery, call_lua};
use crate::agent::TranscriptText;
use crate::markdown::char_boundary_at_or_before;

const APPEND: &str = "return require('loopr.transcript').append(...)";
/// How long text gathers before it is sent: reads as live, and at 8 transcripts streaming
/// Neovim does a third less work than at 25 ms.
const CYCLE: Duration = Duration::from_millis(40);
/// Text per call at most; more goes in the next call.
const CALL_BYTES: usize = 128 * 1024;

/// Forwards transcript text to Lua until `texts` ends or Neovim goes away.
pub async fn forward_transcripts<W>(neovim: Neovim<W>, texts: UnboundedReceiver<TranscriptText>)
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    pump(texts, CYCLE, |piece| {
        let neovim = neovim.clone();
        async move { deliver_transcript(&neovim, std::slice::from_ref(&piece)).await }
    })
    .await;
}

/// Gathers `texts` for a `cycle`, then hands each call's worth to `deliver`, spread over the
/// next cycle, while text keeps coming; waits when none does.
async fn pump<F, Fut>(mut texts: UnboundedReceiver<TranscriptText>, cycle: Duration, mut deliver: F)
where
    F: FnMut(TranscriptText) -> Fut,
    Fut: Future<Output = Result<(), Delivery>>,
{
    while let Some(first) = texts.recv().await {
        let mut gathered = vec![first];
        let mut due = Instant::now() + cycle;
        loop {
            // Sleeping, then taking what came, wakes this task once per cycle, not once per
            // streamed word.
            tokio::time::sleep_until(due).await;
            while let Ok(text) = texts.try_recv() {
                gathered.push(text);
            }
            if gathered.is_empty() {
                break;
            }
            let pieces: Vec<TranscriptText> = calls(std::mem::take(&mut gathered), CALL_BYTES)
                .into_iter()
                .flatten()
                .collect();
            let spacing = cycle / u32::try_from(pieces.len()).unwrap_or(u32::MAX);
            let mut at = due;
            for piece in pieces {
                tokio::time::sleep_until(at).await;
                at += spacing;
                match deliver(piece).await {
                    Ok(()) => {}
                    Err(Delivery::ChannelClosed) => return,
                    Err(failure) => {
                        tracing::warn!(?failure, "delivering transcript text to Neovim")
                    }
                }
            }
            due = (due + cycle).max(Instant::now());
        }
    }
}

/// `texts` merged per follower (in order) and cut into calls of at most `limit` bytes (Lua
/// appends text as it comes, so a cut may fall anywhere between characters).
fn calls(texts: Vec<TranscriptText>, limit: usize) -> Vec<Vec<TranscriptText>> {
    let mut merged: Vec<TranscriptText> = Vec::new();
    for text in texts {
        match merged.iter_mut().find(|item| item.token == text.token) {
            Some(item) => item.text.push_str(&text.text),
            None => merged.push(text),
        }
    }
    let mut calls = Vec::new();
    let mut call: Vec<TranscriptText> = Vec::new();
    let mut room = limit;
    for item in merged {
        let mut rest = item.text.as_str();
        while !rest.is_empty() {
            if room == 0 {
                calls.push(std::mem::take(&mut call));
                room = limit;
            }
            let mut cut = char_boundary_at_or_before(rest, room);
            if cut == 0 {
                if !call.is_empty() {
                    // Not even one character fits the room left: the next call.
                    room = 0;
                    continue;
                }
                // A character longer than a whole call goes alone.
                cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
            }
            call.push(TranscriptText {
                token: item.token,
                text: rest[..cut].to_owned(),
            });
            room = room.saturating_sub(cut);
            rest = &rest[cut..];
        }
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// Calls `require('loopr.transcript').append(items)` as the host does, `items` a list of
/// `{ token = <integer>, text = <string> }`.
pub async fn deliver_transcript<W>(
    neovim: &Neovim<W>,
    items: &[TranscriptText],
) -> Result<(), Delivery>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let items = Value::Array(
        items
            .iter()
            .map(|item| {
                Value::Map(vec![
                    (Value::from("token"), Value::from(item.token)),
                    (Value::from("text"), Value::from(item.text.as_str())),
                ])
            })
            .collect(),
    );
    call_lua(neovim, APPEND, vec![items]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(token: u64, text: &str) -> TranscriptText {
        TranscriptText {
            token,
            text: text.to_owned(),
        }
    }

    #[test]
    fn pieces_merge_per_follower_and_split_within_the_limit() {
        let calls = calls(
            vec![text(1, "ab\ncd"), text(2, "x"), text(1, "ef\ngh\n")],
            6,
        );
        let flat: Vec<Vec<(u64, &str)>> = calls
            .iter()
            .map(|call| {
                call.iter()
                    .map(|item| (item.token, item.text.as_str()))
                    .collect()
            })
            .collect();
        assert_eq!(
            flat,
            vec![vec![(1, "ab\ncde")], vec![(1, "f\ngh\n"), (2, "x")]]
        );
        let joined: String = calls
            .iter()
            .flatten()
            .filter(|item| item.token == 1)
            .map(|item| item.text.as_str())
            .collect();
        assert_eq!(joined, "ab\ncdef\ngh\n");
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        let calls = calls(vec![text(1, "ééé")], 3);
        let parts: Vec<&str> = calls
            .iter()
            .flatten()
            .map(|item| item.text.as_str())
            .collect();
        assert_eq!(parts, vec!["é", "é", "é"]);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_spread_over_the_cycle_after_the_text_came_and_the_cycle_goes_on() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let start = Instant::now();
        let delivered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&delivered);
        let pump = tokio::spawn(pump(receiver, Duration::from_millis(40), move |piece| {
            let seen = std::sync::Arc::clone(&seen);
            async move {
                let at = Instant::now().duration_since(start).as_millis();
                seen.lock()
                    .expect("lock")
                    .push((at, piece.token, piece.text));
                Ok(())
            }
        }));
        for (token, word) in [(1, "a"), (2, "b"), (1, "c"), (3, "d")] {
            sender.send(text(token, word)).expect("pump runs");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        sender.send(text(2, "e")).expect("pump runs");
        // Nothing for a whole cycle: the pump waits, and starts a new one on the next text.
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.send(text(1, "f")).expect("pump runs");
        drop(sender);
        pump.await.expect("the pump ends with its channel");
        let delivered = delivered.lock().expect("lock").clone();
        // (Tokio's timers count whole milliseconds: 40 / 3 lands on 54 and 67.)
        assert_eq!(
            delivered,
            vec![
                (40, 1, "ac".to_owned()),
                (54, 2, "b".to_owned()),
                (67, 3, "d".to_owned()),
                (80, 2, "e".to_owned()),
                (290, 1, "f".to_owned()),
            ]
        );
    }
}
