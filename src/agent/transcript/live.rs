//! A running loop's side of its transcript: renders what happens as it happens and hands the
//! pieces to the hub, tagged with the journal batch they will be written in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::hub::TranscriptHub;
use super::render::Renderer;
use crate::agent::journal::Entry;
use crate::llm::{ContentBlock, StopReason, Usage};
use crate::store::LoopId;

pub(crate) struct LiveTranscript {
    hub: Arc<TranscriptHub>,
    id: LoopId,
    renderer: Mutex<Renderer>,
    /// The journal batch the turn under way will be written as.
    batch: AtomicU64,
}

impl LiveTranscript {
    /// Loop `id`'s transcript, whose journal holds `batches` whole batches and whose run has
    /// had `turns` turns.
    pub fn new(hub: Arc<TranscriptHub>, id: LoopId, batches: u64, turns: u32) -> LiveTranscript {
        LiveTranscript {
            hub,
            id,
            renderer: Mutex::new(Renderer::continuing(turns)),
            batch: AtomicU64::new(batches),
        }
    }

    fn renderer(&self) -> MutexGuard<'_, Renderer> {
        self.renderer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn emit(&self, text: String) {
        self.hub.emit(&self.id, self.batch(), text);
    }

    pub fn entry(&self, entry: &Entry) {
        let text = self.renderer().entry(entry);
        self.emit(text);
    }

    pub fn text_delta(&self, delta: &str) {
        let text = self.renderer().text_delta(delta);
        self.emit(text);
    }

    pub fn retry(&self, attempt: u32, delay_ms: u64, reason: &str) {
        let text = self.renderer().retry(attempt, delay_ms, reason);
        self.emit(text);
    }

    pub fn answer_end(
        &self,
        content: &[ContentBlock],
        model: &str,
        usage: &Usage,
        stop_reason: Option<&StopReason>,
        truncated_tool_calls: &[String],
    ) {
        let text =
            self.renderer()
                .answer_end(content, model, usage, stop_reason, truncated_tool_calls);
        self.emit(text);
    }

    /// The turn under way is kept to be written; what follows belongs to the next batch.
    pub fn next_batch(&self) {
        self.batch.fetch_add(1, Ordering::Relaxed);
    }

    /// The journal batch the turn under way will be written as.
    pub fn batch(&self) -> u64 {
        self.batch.load(Ordering::Relaxed)
    }

    /// What `written` needs, for a write made off this thread.
    pub fn hub(&self) -> Arc<TranscriptHub> {
        self.hub.clone()
    }
}

/// Emits a batch written at once rather than turn by turn (a run's start).
pub(crate) fn emit_batch(hub: &TranscriptHub, id: &LoopId, batch: u64, entries: &[Entry]) {
    let mut renderer = Renderer::default();
    let text: String = entries.iter().map(|entry| renderer.entry(entry)).collect();
    hub.emit(id, batch, text);
}

impl Drop for LiveTranscript {
    fn drop(&mut self) {
        self.hub.ended(&self.id);
    }
}
