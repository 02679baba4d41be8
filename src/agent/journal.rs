//! A loop's conversation journal: Loopr's own record of what was said, called and answered,
//! one JSON line per entry, appended as each turn ends (`journal.jsonl` in the loop's
//! directory). A turn is whole once its `state` line is written: replay ignores anything
//! after the last one, so a host killed mid-turn loses only that turn. A revision that
//! restarts the conversation begins a new run (`run_start`); replay reads the last run.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::{ContentBlock, Message, Role, StopReason, Usage};
use crate::store::{AppendLog, LoopId, ProjectLayout, now_rfc3339, write_atomic};

/// The format this version writes; a journal from a newer one is refused, not misread.
fn is_zero(value: &u64) -> bool {
    *value == 0
}

pub const JOURNAL_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// A conversation starts; what follows replaces any run before it.
    RunStart {
        version: u32,
        at: String,
        /// The project's rules files the run's system prompt holds (`AGENTS.md (120 bytes)`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<String>,
    },
    /// Our message: the task, tool results, follow-up notes, feedback.
    User { content: Vec<ContentBlock> },
    /// The model's answer, with what it cost.
    Assistant {
        content: Vec<ContentBlock>,
        model: String,
        #[serde(default)]
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// Calls cut off by the token limit, never run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        truncated_tool_calls: Vec<String>,
        /// What a coding agent reported the turn cost, in millionths of a dollar
        /// (`ModelUsage::reported_usd_micros`).
        #[serde(default, skip_serializing_if = "is_zero")]
        reported_usd_micros: u64,
    },
    /// An attempt of the turn failed and was retried (the partial answer thrown away).
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The loop's own state after the turn (review stage, iteration, ...): the turn is whole.
    State { state: Value },
    /// What the host did for the loop outside its conversation (a phase's commit), for the
    /// transcript only: never part of what the model is sent.
    Note { at: String, text: String },
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} was written by a newer Loopr (journal version {version}, this one reads \
         {JOURNAL_VERSION}); update Loopr to resume this loop"
    )]
    Newer { path: String, version: u32 },
    #[error("{path}, line {line}: {message}")]
    Corrupt {
        path: String,
        line: usize,
        message: String,
    },
}

/// The last run of a journal, replayed.
#[derive(Debug)]
pub struct Replayed<S> {
    pub messages: Vec<Message>,
    pub state: S,
    /// Whole turns (batches ending in a state line) in the journal, every run counted.
    pub batches: u64,
}

/// Every whole turn of a journal, every run, for reading back (the transcript).
#[derive(Debug, Default)]
pub struct WholeEntries {
    pub entries: Vec<Entry>,
    /// Whole turns (batches ending in a state line) among them.
    pub batches: u64,
}

#[derive(Clone, Debug)]
pub struct Journal {
    log: AppendLog,
    /// Where versions before the journal kept the run (`run.json`); none for a journal
    /// that never had one (a verification's).
    legacy: Option<std::path::PathBuf>,
}

impl Journal {
    pub fn of(layout: &ProjectLayout, id: &LoopId) -> Journal {
        Journal {
            log: AppendLog::at(layout.journal(id)),
            legacy: Some(layout.run_state(id)),
        }
    }

    /// A journal of its own at `path`, beside a loop's (a verification's conversation).
    pub fn at(path: std::path::PathBuf) -> Journal {
        Journal {
            log: AppendLog::at(path),
            legacy: None,
        }
    }

    /// The last run, if one was stored whole enough to continue: its conversation and the
    /// state of its last whole turn. A run stored by a version before the journal
    /// (`run.json`, the whole conversation and state in one object) is turned into a journal
    /// first.
    pub fn load<S: DeserializeOwned + Serialize>(
        &self,
    ) -> Result<Option<Replayed<S>>, JournalError> {
        if let Some(legacy) = &self.legacy
            && !self.log.exists()
            && legacy.exists()
        {
            self.migrate_legacy::<S>(legacy)?;
        }
        let path = self.log.path().display().to_string();
        let read = self.log.read().map_err(|source| JournalError::Io {
            path: path.clone(),
            source,
        })?;
        if read.torn_tail {
            tracing::warn!(journal = %path, "dropping the torn last line of the journal");
        }
        let mut run: Option<(Vec<Message>, Option<Value>, usize)> = None;
        // Lines up to the last state line: a whole batch ends with one.
        let mut whole_lines = 0;
        let mut batches = 0;
        for (number, line) in read.lines.iter().enumerate() {
            let value: Value =
                serde_json::from_slice(line).map_err(|err| JournalError::Corrupt {
                    path: path.clone(),
                    line: number + 1,
                    message: err.to_string(),
                })?;
            if value.get("type").and_then(Value::as_str) == Some("run_start")
                && let Some(version) = value.get("version").and_then(Value::as_u64)
                && version > u64::from(JOURNAL_VERSION)
            {
                return Err(JournalError::Newer {
                    path,
                    version: u32::try_from(version).unwrap_or(u32::MAX),
                });
            }
            let entry: Entry =
                serde_json::from_value(value).map_err(|err| JournalError::Corrupt {
                    path: path.clone(),
                    line: number + 1,
                    message: err.to_string(),
                })?;
            match entry {
                Entry::RunStart { .. } => run = Some((Vec::new(), None, 0)),
                Entry::User { content } => {
                    if let Some((messages, _, _)) = run.as_mut() {
                        push_alternating(messages, Role::User, content);
                    }
                }
                Entry::Assistant { content, .. } => {
                    if let Some((messages, _, _)) = run.as_mut() {
                        push_alternating(messages, Role::Assistant, content);
                    }
                }
                Entry::Retry { .. } | Entry::Note { .. } => {}
                Entry::State { state } => {
                    whole_lines = number + 1;
                    batches += 1;
                    if let Some((messages, stored, whole)) = run.as_mut() {
                        *stored = Some(state);
                        *whole = messages.len();
                    }
                }
            }
        }
        if whole_lines < read.lines.len() {
            // A batch cut short by a crash: its lines must not join the next one.
            tracing::warn!(journal = %path, lines = read.lines.len() - whole_lines, "dropping the unfinished last turn of the journal");
            self.log
                .keep_lines(whole_lines)
                .map_err(|source| JournalError::Io {
                    path: path.clone(),
                    source,
                })?;
        }
        let Some((mut messages, Some(state), whole)) = run else {
            return Ok(None);
        };
        // Entries after the last state line belong to a turn that never finished.
        messages.truncate(whole);
        let state = serde_json::from_value(state).map_err(|err| JournalError::Corrupt {
            path,
            line: read.lines.len(),
            message: format!("the loop state does not read: {err}"),
        })?;
        Ok(Some(Replayed {
            messages,
            state,
            batches,
        }))
    }

    /// The journal's whole turns, read without changing the file (an unfinished last turn is
    /// left for the loop's own `load` to cut). No journal reads as none.
    pub fn whole_entries(&self) -> Result<WholeEntries, JournalError> {
        if !self.log.exists() {
            return Ok(WholeEntries::default());
        }
        let path = self.log.path().display().to_string();
        let read = self.log.read().map_err(|source| JournalError::Io {
            path: path.clone(),
            source,
        })?;
        let mut whole = WholeEntries::default();
        let mut unfinished = Vec::new();
        for (number, line) in read.lines.iter().enumerate() {
            let entry: Entry =
                serde_json::from_slice(line).map_err(|err| JournalError::Corrupt {
                    path: path.clone(),
                    line: number + 1,
                    message: err.to_string(),
                })?;
            let ends_batch = matches!(entry, Entry::State { .. });
            unfinished.push(entry);
            if ends_batch {
                whole.entries.append(&mut unfinished);
                whole.batches += 1;
            }
        }
        Ok(whole)
    }

    /// Starts a new run with its first message and state.
    pub fn start_run(&self, first: &Message, state: &impl Serialize) -> std::io::Result<()> {
        self.append(&Journal::run_start_entries(first, Vec::new()), state)
    }

    /// The entries that start a run with `first`, told the project's `rules`.
    pub fn run_start_entries(first: &Message, rules: Vec<String>) -> [Entry; 2] {
        [
            Entry::RunStart {
                version: JOURNAL_VERSION,
                at: now_rfc3339(),
                rules,
            },
            Entry::User {
                content: first.content.clone(),
            },
        ]
    }

    /// Appends a note (`Entry::Note`) as a batch of its own, the loop's last state repeated
    /// after it so the batch is whole and a replay reads the same state; returns the batch's
    /// number and the note, for the live transcript. A journal with no whole turn takes none.
    pub fn append_note(&self, text: &str) -> Result<Option<(u64, Entry)>, JournalError> {
        let whole = self.whole_entries()?;
        let Some(state) = whole.entries.iter().rev().find_map(|entry| match entry {
            Entry::State { state } => Some(state.clone()),
            _ => None,
        }) else {
            return Ok(None);
        };
        let note = Entry::Note {
            at: now_rfc3339(),
            text: text.to_owned(),
        };
        self.append(std::slice::from_ref(&note), &state)
            .map_err(|source| JournalError::Io {
                path: self.log.path().display().to_string(),
                source,
            })?;
        Ok(Some((whole.batches, note)))
    }

    /// Appends a turn's entries and the state after it, in one write.
    pub fn append(&self, entries: &[Entry], state: &impl Serialize) -> std::io::Result<()> {
        self.log.append(&Journal::lines(entries, state)?)
    }

    /// Like `append`, on disk only with the next `append` (`AppendLog::append_unsynced`): for
    /// a run's start, which a crash may lose, since a run whose start is lost simply starts
    /// again.
    pub fn append_unsynced(
        &self,
        entries: &[Entry],
        state: &impl Serialize,
    ) -> std::io::Result<()> {
        self.log.append_unsynced(&Journal::lines(entries, state)?)
    }

    fn lines(entries: &[Entry], state: &impl Serialize) -> std::io::Result<Vec<Vec<u8>>> {
        let state = serde_json::to_value(state).map_err(std::io::Error::other)?;
        let mut lines = entries
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(std::io::Error::other)?;
        lines.push(serde_json::to_vec(&Entry::State { state }).map_err(std::io::Error::other)?);
        Ok(lines)
    }

    fn migrate_legacy<S: DeserializeOwned + Serialize>(
        &self,
        legacy_path: &std::path::Path,
    ) -> Result<(), JournalError> {
        #[derive(Deserialize)]
        struct LegacyRun {
            #[serde(default)]
            messages: Vec<Message>,
            #[serde(flatten)]
            state: Value,
        }
        let path = legacy_path.display().to_string();
        let bytes = std::fs::read(legacy_path).map_err(|source| JournalError::Io {
            path: path.clone(),
            source,
        })?;
        let Ok(legacy) = serde_json::from_slice::<LegacyRun>(&bytes) else {
            tracing::warn!(run_state = %path, "an unreadable run.json is left alone; the loop starts over");
            return Ok(());
        };
        // Only a state this version understands is carried over.
        let Ok(state) = serde_json::from_value::<S>(legacy.state) else {
            tracing::warn!(run_state = %path, "run.json holds a state this version does not read; the loop starts over");
            return Ok(());
        };
        let mut entries = vec![Entry::RunStart {
            version: JOURNAL_VERSION,
            at: now_rfc3339(),
            rules: Vec::new(),
        }];
        entries.extend(
            legacy
                .messages
                .into_iter()
                .map(|message| match message.role {
                    Role::User => Entry::User {
                        content: message.content,
                    },
                    Role::Assistant => Entry::Assistant {
                        content: message.content,
                        model: String::new(),
                        usage: Usage::default(),
                        stop_reason: None,
                        truncated_tool_calls: Vec::new(),
                        reported_usd_micros: 0,
                    },
                }),
        );
        let state = serde_json::to_value(&state).map_err(|err| JournalError::Corrupt {
            path: path.clone(),
            line: 0,
            message: err.to_string(),
        })?;
        entries.push(Entry::State { state });
        let mut bytes = Vec::new();
        for entry in &entries {
            let line = serde_json::to_vec(entry).map_err(|err| JournalError::Corrupt {
                path: path.clone(),
                line: 0,
                message: err.to_string(),
            })?;
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
        }
        let io = |source| JournalError::Io {
            path: path.clone(),
            source,
        };
        // The journal is whole before run.json goes: a crash in between repeats this.
        write_atomic(self.log.path(), &bytes).map_err(io)?;
        std::fs::remove_file(legacy_path).map_err(io)?;
        tracing::info!(run_state = %path, "run.json turned into a journal");
        Ok(())
    }
}

/// Adds a message; one of the same role as the last joins it (feedback after our last
/// message), so roles alternate as providers expect.
fn push_alternating(messages: &mut Vec<Message>, role: Role, content: Vec<ContentBlock>) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.extend(content),
        _ => messages.push(Message { role, content }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct TestState {
        stage: String,
        #[serde(default)]
        turns: u32,
    }

    fn journal() -> (tempfile::TempDir, Journal, ProjectLayout, LoopId) {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = ProjectLayout::new(dir.path(), std::path::Path::new("/project"));
        let id = LoopId::generate();
        (dir, Journal::of(&layout, &id), layout, id)
    }

    fn state(stage: &str, turns: u32) -> TestState {
        TestState {
            stage: stage.to_owned(),
            turns,
        }
    }

    fn assistant(text: &str) -> Entry {
        Entry::Assistant {
            content: vec![ContentBlock::text(text)],
            model: "m".to_owned(),
            usage: Usage::default(),
            stop_reason: None,
            truncated_tool_calls: Vec::new(),
            reported_usd_micros: 0,
        }
    }

    fn user(text: &str) -> Entry {
        Entry::User {
            content: vec![ContentBlock::text(text)],
        }
    }

    #[test]
    fn a_run_replays_its_turns_and_last_state() {
        let (_dir, journal, _, _) = journal();
        assert!(journal.load::<TestState>().expect("load").is_none());
        journal
            .start_run(&Message::user_text("task"), &state("drafting", 0))
            .expect("start");
        journal
            .append(&[assistant("a1"), user("r1")], &state("reviewing", 1))
            .expect("turn");
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.messages.len(), 3);
        assert_eq!(run.messages[1].role, Role::Assistant);
        assert_eq!(run.state, state("reviewing", 1));
    }

    #[test]
    fn a_note_is_a_whole_batch_of_its_own_that_replay_leaves_out() {
        let (_dir, journal, _, _) = journal();
        assert!(journal.append_note("too early").expect("note").is_none());
        journal
            .start_run(&Message::user_text("task"), &state("drafting", 0))
            .expect("start");
        journal
            .append(&[assistant("a1"), user("r1")], &state("done", 1))
            .expect("turn");
        let before = journal.load::<TestState>().expect("load").expect("run");
        let (batch, note) = journal
            .append_note("Committed phase p as abc1234: P")
            .expect("note")
            .expect("a whole turn to follow");
        assert_eq!(batch, before.batches);
        assert!(
            matches!(&note, Entry::Note { text, .. } if text == "Committed phase p as abc1234: P")
        );
        let after = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(after.messages, before.messages);
        assert_eq!(after.state, state("done", 1));
        assert_eq!(after.batches, before.batches + 1);
        let whole = journal.whole_entries().expect("entries");
        assert!(whole.entries.contains(&note));
    }

    #[test]
    fn a_turn_without_its_state_line_and_a_torn_line_are_not_replayed() {
        let (_dir, journal, layout, id) = journal();
        journal
            .start_run(&Message::user_text("task"), &state("drafting", 0))
            .expect("start");
        journal
            .append(&[assistant("a1"), user("r1")], &state("drafting", 1))
            .expect("turn");
        // A crash after part of the next turn was written, mid-line.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(layout.journal(&id))
            .expect("open");
        let whole_line = serde_json::to_string(&assistant("a2")).expect("json");
        write!(file, "{whole_line}\n{{\"type\":\"user\",\"cont").expect("tear");
        drop(file);
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.messages.len(), 3, "{:?}", run.messages);
        assert_eq!(run.state, state("drafting", 1));
        // The next turn appends cleanly after the torn line is cut.
        journal
            .append(&[assistant("a2"), user("r2")], &state("drafting", 2))
            .expect("turn");
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.messages.len(), 5);
        assert_eq!(run.state.turns, 2);
    }

    #[test]
    fn our_messages_in_a_row_replay_as_one_so_roles_alternate() {
        let (_dir, journal, _, _) = journal();
        journal
            .start_run(&Message::user_text("task"), &state("drafting", 0))
            .expect("start");
        journal
            .append(
                &[assistant("a1"), user("r1"), user("feedback")],
                &state("drafting", 1),
            )
            .expect("turn");
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.messages.len(), 3);
        assert_eq!(
            run.messages[2].content,
            vec![ContentBlock::text("r1"), ContentBlock::text("feedback")]
        );
    }

    #[test]
    fn a_new_run_replaces_the_one_before() {
        let (_dir, journal, _, _) = journal();
        journal
            .start_run(&Message::user_text("first"), &state("drafting", 0))
            .expect("start");
        journal
            .append(&[assistant("a1"), user("r1")], &state("done", 1))
            .expect("turn");
        journal
            .start_run(&Message::user_text("revise"), &state("drafting", 0))
            .expect("restart");
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.messages, vec![Message::user_text("revise")]);
        assert_eq!(run.state, state("drafting", 0));
    }

    #[test]
    fn a_journal_from_a_newer_version_is_refused_with_the_fix() {
        let (_dir, journal, layout, id) = journal();
        std::fs::create_dir_all(layout.loop_dir(&id)).expect("dir");
        std::fs::write(
            layout.journal(&id),
            "{\"type\":\"run_start\",\"version\":2,\"at\":\"x\"}\n",
        )
        .expect("write");
        let err = journal.load::<TestState>().expect_err("newer").to_string();
        assert!(err.contains("update Loopr"), "{err}");
    }

    #[test]
    fn a_run_json_of_an_earlier_version_becomes_a_journal_and_resumes() {
        let (_dir, journal, layout, id) = journal();
        std::fs::create_dir_all(layout.loop_dir(&id)).expect("dir");
        // As earlier versions stored it: Anthropic-shaped blocks, state beside the messages.
        let legacy = serde_json::json!({
            "stage": "reviewing",
            "turns": 4,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "task"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "grep", "input": {"pattern": "x"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "none"}
                ]}
            ]
        });
        std::fs::write(layout.run_state(&id), legacy.to_string()).expect("write");
        let run = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(run.state, state("reviewing", 4));
        assert_eq!(run.messages.len(), 3);
        assert_eq!(
            run.messages[1].content[0],
            ContentBlock::tool_call("t1", "grep", serde_json::json!({"pattern": "x"}))
        );
        assert!(!layout.run_state(&id).exists(), "run.json is replaced");
        assert!(layout.journal(&id).exists());
        let again = journal.load::<TestState>().expect("load").expect("run");
        assert_eq!(again.messages, run.messages);
    }
}
