//! Where the pieces of running loops' transcripts meet whoever follows them.
//!
//! A follower first gets the journal rendered, then the live pieces, with no gap and nothing
//! twice: every piece carries the number of the journal batch (one turn, ending in a state
//! line) it belongs to, and the hub keeps each running loop's pieces until their batch is
//! written. A follower subscribes first (copying those kept pieces), then reads the journal's
//! whole batches; it shows the pieces of later batches only. Batches are only ever written
//! after their pieces were emitted, so whatever the journal lacks is still kept or yet to come.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc::UnboundedSender;

use super::render::render_entries;
use crate::agent::journal::Journal;
use crate::store::LoopId;

/// Text for one follower, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranscriptText {
    /// The follower's token, as given to `follow`.
    pub token: u64,
    pub text: String,
}

#[derive(Clone, Debug)]
struct Piece {
    batch: u64,
    text: String,
}

/// Someone following a loop's transcript.
struct Follower {
    token: u64,
    out: UnboundedSender<TranscriptText>,
    /// The first batch the journal did not hold; `None` while the journal is being read.
    live_from: Option<u64>,
    /// Pieces emitted while the journal was being read.
    waiting: Vec<Piece>,
}

#[derive(Default)]
struct HubState {
    /// Pieces of each running loop whose batch is not yet in its journal.
    kept: HashMap<LoopId, Vec<Piece>>,
    followers: HashMap<LoopId, Vec<Follower>>,
}

/// Shared by a host's loops (which emit) and its shell (which follows).
#[derive(Default)]
pub struct TranscriptHub {
    state: Mutex<HubState>,
}

impl TranscriptHub {
    pub fn new() -> Arc<TranscriptHub> {
        Arc::new(TranscriptHub::default())
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // Each change is a single insert, push or retain: consistent after a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A piece of loop `id`'s transcript, part of journal batch `batch`.
    pub(crate) fn emit(&self, id: &LoopId, batch: u64, text: String) {
        if text.is_empty() {
            return;
        }
        let mut state = self.lock();
        if let Some(followers) = state.followers.get_mut(id) {
            // Sent from here, under the lock, in the order emitted: no task in between to
            // wake for every streamed word.
            followers.retain_mut(|follower| match follower.live_from {
                None => {
                    follower.waiting.push(Piece {
                        batch,
                        text: text.clone(),
                    });
                    true
                }
                Some(from) if batch < from => true,
                Some(_) => follower
                    .out
                    .send(TranscriptText {
                        token: follower.token,
                        text: text.clone(),
                    })
                    .is_ok(),
            });
        }
        let kept = state.kept.entry(id.clone()).or_default();
        match kept.last_mut() {
            Some(last) if last.batch == batch => last.text.push_str(&text),
            _ => kept.push(Piece { batch, text }),
        }
    }

    /// Loop `id`'s journal now holds `batches` whole batches.
    pub(crate) fn written(&self, id: &LoopId, batches: u64) {
        if let Some(kept) = self.lock().kept.get_mut(id) {
            kept.retain(|piece| piece.batch >= batches);
        }
    }

    /// Loop `id` stopped running here: what it emitted but never wrote is not its journal's.
    pub(crate) fn ended(&self, id: &LoopId) {
        self.lock().kept.remove(id);
    }

    /// Registers `token` as following `id`, its pieces waiting until the journal is read;
    /// the pieces kept until then.
    fn subscribe(
        &self,
        id: &LoopId,
        token: u64,
        out: UnboundedSender<TranscriptText>,
    ) -> Vec<Piece> {
        let mut state = self.lock();
        state
            .followers
            .entry(id.clone())
            .or_default()
            .push(Follower {
                token,
                out,
                live_from: None,
                waiting: Vec::new(),
            });
        state.kept.get(id).cloned().unwrap_or_default()
    }

    /// The journal of `id` read for `token`: sends `stored` with the pieces of later batches
    /// (kept at subscription, then those that came while reading), and from now on each
    /// piece as it is emitted. False if `token` stopped following meanwhile.
    fn go_live(
        &self,
        id: &LoopId,
        token: u64,
        mut stored: String,
        stored_batches: u64,
        kept: Vec<Piece>,
    ) -> bool {
        let mut state = self.lock();
        let Some(followers) = state.followers.get_mut(id) else {
            return false;
        };
        let Some(index) = followers
            .iter()
            .position(|follower| follower.token == token)
        else {
            return false;
        };
        let follower = &mut followers[index];
        let waiting = std::mem::take(&mut follower.waiting);
        for piece in kept.iter().chain(&waiting) {
            if piece.batch >= stored_batches {
                stored.push_str(&piece.text);
            }
        }
        follower.live_from = Some(stored_batches);
        let sent = follower
            .out
            .send(TranscriptText {
                token,
                text: stored,
            })
            .is_ok();
        if !sent {
            followers.remove(index);
        }
        sent
    }

    /// Stops the follower `token`; its task ends. Whether it was following.
    pub fn unfollow(&self, token: u64) -> bool {
        let mut state = self.lock();
        let mut stopped = false;
        for followers in state.followers.values_mut() {
            let before = followers.len();
            followers.retain(|follower| follower.token != token);
            stopped |= followers.len() < before;
        }
        state.followers.retain(|_, followers| !followers.is_empty());
        stopped
    }

    /// Follows loop `id` for `token`: sends its stored transcript (headed `title`), then what
    /// it says from now on, to `out`, until `unfollow(token)` or `out` closes.
    pub fn follow(
        self: &Arc<Self>,
        journal: Journal,
        id: &LoopId,
        title: String,
        token: u64,
        out: UnboundedSender<TranscriptText>,
    ) {
        let kept = self.subscribe(id, token, out);
        let hub = Arc::clone(self);
        let id = id.clone();
        tokio::spawn(async move {
            let stored = tokio::task::spawn_blocking(move || journal.whole_entries()).await;
            let (text, stored_batches) = match stored {
                Ok(Ok(whole)) => (render_entries(&title, &whole.entries), whole.batches),
                Ok(Err(err)) => (
                    format!("# {title}\n\n> Loopr: the journal cannot be read: {err}\n"),
                    0,
                ),
                Err(err) => (
                    format!("# {title}\n\n> Loopr: reading the journal failed: {err}\n"),
                    0,
                ),
            };
            hub.go_live(&id, token, text, stored_batches, kept);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::journal::Entry;
    use crate::llm::{ContentBlock, Message};
    use crate::store::ProjectLayout;
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    async fn next(receiver: &mut UnboundedReceiver<TranscriptText>) -> String {
        tokio::time::timeout(std::time::Duration::from_secs(5), receiver.recv())
            .await
            .expect("text within 5 s")
            .expect("the follower runs")
            .text
    }

    #[tokio::test]
    async fn a_follower_gets_the_journal_then_each_unwritten_piece_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = ProjectLayout::new(dir.path(), std::path::Path::new("/project"));
        let id = LoopId::generate();
        std::fs::create_dir_all(layout.loop_dir(&id)).expect("loop dir");
        let journal = Journal::of(&layout, &id);
        let hub = TranscriptHub::new();

        // Batch 0 emitted and written; batch 1 emitted, not yet written.
        hub.emit(&id, 0, "first turn\n".to_owned());
        journal
            .append(
                &Journal::run_start_entries(&Message::user_text("the task"), Vec::new()),
                &serde_json::json!({}),
            )
            .expect("append");
        hub.written(&id, 1);
        hub.emit(&id, 1, "second ".to_owned());
        hub.emit(&id, 1, "turn".to_owned());

        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        hub.follow(journal.clone(), &id, "t".to_owned(), 7, sender);
        let opening = next(&mut receiver).await;
        assert!(opening.starts_with("# t\n\n## Run started"), "{opening}");
        assert!(opening.contains("> the task\n"), "{opening}");
        assert!(opening.ends_with("second turn"), "{opening}");
        assert!(
            !opening.contains("first turn"),
            "written pieces come from the journal"
        );

        // Batch 1 is written while followed; pieces after it arrive live, once.
        journal
            .append(
                &[Entry::User {
                    content: vec![ContentBlock::text("more")],
                }],
                &serde_json::json!({}),
            )
            .expect("append");
        hub.written(&id, 2);
        hub.emit(&id, 2, " third".to_owned());
        assert_eq!(next(&mut receiver).await, " third");

        assert!(hub.unfollow(7));
        assert!(!hub.unfollow(7), "stopped once");
        hub.emit(&id, 2, " unseen".to_owned());
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), receiver.recv())
                .await
                .expect("the follower ended")
                .is_none()
        );
    }

    #[test]
    fn pieces_emitted_while_the_journal_is_read_follow_it_once() {
        let hub = TranscriptHub::new();
        let id = LoopId::generate();
        hub.emit(&id, 1, "kept ".to_owned());
        let (sender, mut receiver) = unbounded_channel();
        let kept = hub.subscribe(&id, 3, sender);
        // While the journal is read: one piece of a batch it turns out to hold, one after.
        hub.emit(&id, 0, "stored already".to_owned());
        hub.emit(&id, 1, "waiting ".to_owned());
        assert!(receiver.try_recv().is_err(), "nothing before the journal");
        assert!(hub.go_live(&id, 3, "journal | ".to_owned(), 1, kept));
        hub.emit(&id, 1, "live".to_owned());
        hub.emit(&id, 0, "stored again".to_owned());
        let texts: Vec<String> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|text| text.text)
            .collect();
        assert_eq!(texts, ["journal | kept waiting ", "live"]);

        assert!(hub.unfollow(3));
        assert!(
            !hub.go_live(&id, 3, String::new(), 0, Vec::new()),
            "a follower that stopped while its journal was read gets nothing"
        );
    }
}
