//! What the core tells the shells about a loop's life (`LoopEvent`, `NoticeLevel`), and the
//! `EventSink` each shell implements to hear it.

use std::path::PathBuf;

use super::failure_locations::FailureLocation;
use super::tree_ready::TreeReady;
use crate::artifacts::ArtifactKind;
use crate::store::{LoopId, LoopStatus, LoopType};
use crate::tools::ApprovalRequest;

/// Everything a shell needs to show a loop's life.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopEvent {
    LoopUpdated {
        id: LoopId,
        /// The root of the project the loop belongs to, when the host has it open.
        root: Option<std::path::PathBuf>,
        loop_type: LoopType,
        status: LoopStatus,
        error: Option<String>,
    },
    /// A short line saying what the loop is doing now.
    Progress {
        loop_id: LoopId,
        /// How the shells name the loop (`LoopRecord::label`).
        label: String,
        message: String,
        /// While the model answers: the tokens of the answer so far (estimated from what
        /// streamed in), reported at most once per `ANSWER_PROGRESS_INTERVAL`.
        tokens: Option<u64>,
    },
    ArtifactCreated {
        loop_id: LoopId,
        kind: ArtifactKind,
        /// The rendered markdown.
        markdown_path: PathBuf,
        /// The structured JSON it was rendered from.
        json_path: PathBuf,
        iteration: u32,
        /// The loop's own settings (`review_gates`, as stored when it started) make it wait
        /// for the user's review of this artifact.
        gated: bool,
    },
    /// A change waits for the user's decision (`InteractiveApprover::resolve`).
    ApprovalRequested { id: u64, request: ApprovalRequest },
    /// The request was answered or its loop stopped waiting; any prompt for it can close.
    ApprovalClosed { id: u64 },
    /// A code loop ran its phase's validation command.
    ValidationFinished {
        loop_id: LoopId,
        phase: String,
        iteration: u32,
        passed: bool,
        command: String,
        /// stdout then stderr, for parsing with an errorformat.
        output: String,
        /// The places in the project's files the output names as the common runners write
        /// them, for a shell whose own reading of the output finds none; their paths are
        /// relative to `root`.
        locations: Vec<FailureLocation>,
        /// The project root the command ran in.
        root: PathBuf,
    },
    /// The coding agent running a code loop (`code_agent`) reported its plan: every entry,
    /// the whole list each time.
    AgentPlan {
        loop_id: LoopId,
        phase: String,
        entries: Vec<AgentPlanEntry>,
    },
    /// The done tasks of a phase changed, and its phase.md (ticked in place) with them.
    TasksUpdated {
        /// The phase loop.
        loop_id: LoopId,
        markdown_path: PathBuf,
        /// The numbers of the done tasks, from 1, ascending.
        done: Vec<usize>,
    },
    /// A verification of a phase or spec was answered (and stored): its findings, for the
    /// user to go through.
    VerificationFinished {
        loop_id: LoopId,
        /// The project root; the findings' files are relative to it.
        root: PathBuf,
        /// The phase's or spec's name.
        label: String,
        verification: crate::artifacts::StoredVerification,
    },
    /// No loop of the plan tree of `root` runs or is about to: what its loops last reported
    /// is over, and this is what it has ready.
    TreeReady {
        root: LoopId,
        /// How the shells name the tree's plan (`LoopRecord::label`): the message says which
        /// plan, as several may be under way.
        label: String,
        ready: TreeReady,
    },
    /// Something the user should know that no other event says, e.g. an accepted change
    /// that could not be made.
    Notice {
        loop_id: String,
        level: NoticeLevel,
        message: String,
    },
}

/// One entry of a coding agent's plan: what it means to do, and how far it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPlanEntry {
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeLevel {
    Info,
    Warn,
    Error,
}

impl NoticeLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeLevel::Info => "info",
            NoticeLevel::Warn => "warn",
            NoticeLevel::Error => "error",
        }
    }
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: LoopEvent);
}

impl EventSink for tokio::sync::mpsc::UnboundedSender<LoopEvent> {
    fn emit(&self, event: LoopEvent) {
        // The receiver only goes away when the host shuts down; events are moot then.
        let _ = self.send(event);
    }
}
