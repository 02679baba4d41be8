//! Delivers followed transcripts to Lua: the text arriving within a short window is gathered
//! (a streamed answer is many small pieces, and each call wakes Neovim), then each
//! transcript's text goes in a call of its own, a large stored one in several: each call is
//! work Neovim does at once, and between calls it answers everyone else (with 8 transcripts
//! streaming, one call for all of them doubled Neovim's p99 latency).

use std::time::Duration;

use futures::io::AsyncWrite;
use nvim_rs::{Neovim, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::event_pump::{Delivery, call_lua};
use crate::agent::TranscriptText;
use crate::markdown::char_boundary_at_or_before;

const APPEND: &str = "return require('loopr.transcript').append(...)";
/// How long text gathers before it is sent; well under a frame, so it reads as live.
const GATHER: Duration = Duration::from_millis(25);
/// Text per call at most; more goes in the next call.
const CALL_BYTES: usize = 128 * 1024;

/// Forwards transcript text to Lua until `texts` ends or Neovim goes away.
pub async fn forward_transcripts<W>(neovim: Neovim<W>, mut texts: UnboundedReceiver<TranscriptText>)
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    while let Some(first) = texts.recv().await {
        // Sleeping, then taking what came, wakes this task once per call, not once per
        // streamed word.
        tokio::time::sleep(GATHER).await;
        let mut gathered = vec![first];
        while let Ok(text) = texts.try_recv() {
            gathered.push(text);
        }
        for piece in calls(gathered, CALL_BYTES).into_iter().flatten() {
            match deliver_transcript(&neovim, std::slice::from_ref(&piece)).await {
                Ok(()) => {}
                Err(Delivery::ChannelClosed) => return,
                Err(failure) => tracing::warn!(?failure, "delivering transcript text to Neovim"),
            }
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
}
