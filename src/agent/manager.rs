//! `LoopManager`, the facade the shells drive, and what its parts share. Each part is one
//! job: `project_registry` (open projects; adopting the loops of hosts that are gone),
//! `new_loops`, `tree_operations` (approve, revise, retry, cancel), `plan_runs` (running every phase of a plan or spec), `queries`, `code_changes`
//! (changes, undo), `verify` (verifying the working tree on demand), `scheduler` (what runs next), `supervisor` (one loop task and what
//! follows its end) and `ready` (what a tree whose work stopped has ready). Tree semantics (what a revision invalidates, what a cancel reaches) are
//! store transactions; the manager emits what they changed and stops what they stopped.

mod budget;
mod code_changes;
mod commit_hold;
mod commit_phase;
mod new_loops;
mod phase_done;
mod plan_runs;
mod project_registry;
mod queries;
mod ready;
mod repository_pin;
mod rewind;
mod scheduler;
mod supervisor;
mod transcripts;
mod tree_operations;
mod verify;

pub use plan_runs::Started;
pub use project_registry::ResumeCounts;
pub use queries::{Spend, StatusRow};
pub use rewind::RewindReport;
pub use tree_operations::Cancelled;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::events::{EventSink, LoopEvent};
use super::jobs::JobError;
use super::loop_names::shortest_name;
use super::phases::PhaseLookupError;
use super::settings::LoopSettings;
use crate::llm::SharedEnv;
use crate::llm::{LlmError, LlmProvider};
use crate::next_step::NextStep;
use crate::store::{
    HostLock, LoopDb, LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, StatusChange,
    StoreError, host_is_alive,
};
use crate::tools::UnfitRoot;
use crate::tools::{Approver, OpenBuffers, ProjectRoot};

/// Builds the model client for a loop from its settings.
pub type ProviderFactory =
    Arc<dyn Fn(&LoopSettings) -> Result<Arc<dyn LlmProvider>, LlmError> + Send + Sync>;

/// The production providers, with the variables current when a loop starts.
pub fn provider_factory(env: SharedEnv) -> ProviderFactory {
    Arc::new(move |settings: &LoopSettings| {
        let provider = crate::llm::providers::build(
            &settings.provider_settings(),
            &env.current(),
            settings.retry_policy(),
        )?;
        Ok(crate::llm::with_tool_protocol(
            provider,
            settings.tool_protocol,
            settings.tool_format,
        ))
    })
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("project root {path}: {source}")]
    Root {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0}: loops write anywhere in their project, so it cannot be one. Work in a project: \
         the root is the nearest directory above the current file that holds one of \
         root_markers (a setting, default .git), or the directory given as the root"
    )]
    UnfitRoot(#[from] UnfitRoot),
    #[error("the task is empty; describe the change to plan, e.g. \"Add a --version flag\"")]
    EmptyTask,
    #[error("the feedback is empty; say what should change")]
    EmptyFeedback,
    /// A settings check's message, its next step attached (`next_step::attach`).
    #[error("invalid setting: {}", crate::next_step::split(.0).0)]
    Settings(String),
    #[error(transparent)]
    Provider(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("no {0} loop in this project")]
    NothingTo(&'static str),
    #[error("no loop is running in this project and none was named")]
    NoTranscriptTarget,
    #[error("no loop {0} in this project")]
    UnknownLoop(String),
    #[error("loop {id} is {status}; {hint}")]
    WrongState {
        id: String,
        status: &'static str,
        hint: &'static str,
    },
    #[error(
        "no approved phase named {0:?} in this project (phases that are not yet written, wait \
         for review or were invalidated cannot run)"
    )]
    UnknownPhase(String),
    #[error("loop {id} is {status}; the phase changed while its code loop was being created")]
    PhaseChanged { id: String, status: &'static str },
    #[error(
        "{name}, this phase's code loop, is interrupted (the host that ran it is gone); retry \
         it to go on from where it stopped, or cancel it to start a new one"
    )]
    /// `name`: the loop as the user types it (`{phase}/code`), see `code_loop_interrupted`.
    CodeLoopInterrupted { name: String },
    #[error("no code loop has run for phase {0:?}")]
    NoCodeLoop(String),
    #[error(transparent)]
    /// A name that means no loop, or several.
    Name(#[from] PhaseLookupError),
    #[error("{0}")]
    Baseline(String),
    #[error("the stored artifact of loop {id} cannot be read: {message}")]
    StoredArtifact { id: String, message: String },
    /// A name that means no phase or spec the working tree could be verified against.
    #[error("no phase or spec named {name:?} to verify")]
    NothingToVerify { name: String, choices: Vec<String> },
    /// No name given, and more than one phase or spec it could mean.
    #[error("which phase or spec to verify? This project has {}", .choices.len())]
    WhichToVerify { choices: Vec<String> },
    #[error("this project has no phase or spec to verify yet: plan a change first")]
    NoVerifyTarget,
}

impl ManagerError {
    /// The phase's code loop `id` is interrupted: the error names it as the user types it
    /// among `records` (the project's loops), `{phase}/code`, else by its id.
    pub(super) fn code_loop_interrupted(records: &[LoopRecord], id: &LoopId) -> ManagerError {
        let name = records
            .iter()
            .find(|record| record.id == *id)
            .map_or_else(|| id.to_string(), |record| shortest_name(records, record));
        ManagerError::CodeLoopInterrupted { name }
    }

    /// What the user can do about it, if a shell can help; each shell words it.
    pub fn next_step(&self) -> Option<NextStep> {
        match self {
            ManagerError::NoTranscriptTarget => Some(NextStep::NameTranscript),
            ManagerError::UnknownPhase(_) | ManagerError::PhaseChanged { .. } => {
                Some(NextStep::ListLoops)
            }
            ManagerError::CodeLoopInterrupted { name } => {
                Some(NextStep::RetryOrCancel { name: name.clone() })
            }
            ManagerError::NoCodeLoop(phase) => Some(NextStep::StartCodeLoop {
                phase: phase.clone(),
            }),
            ManagerError::Settings(message) => crate::next_step::split(message).1,
            ManagerError::NothingToVerify { choices, .. }
            | ManagerError::WhichToVerify { choices }
                if !choices.is_empty() =>
            {
                Some(NextStep::NameVerifyTarget {
                    choices: choices.clone(),
                })
            }
            ManagerError::NothingToVerify { .. } => Some(NextStep::ListLoops),
            _ => None,
        }
    }
}

/// What the shell running the manager lends its loops, and what it wants run.
pub struct ShellServices {
    /// Who is asked before a code loop changes something.
    pub approver: Arc<dyn Approver>,
    /// Where files open in the editor are edited.
    pub buffers: Arc<dyn OpenBuffers>,
    /// What opening a project runs besides the loops the shell starts.
    pub on_open: OnOpen,
}

/// Whether opening a project takes over the loops that hosts which are gone left unfinished:
/// each shell's choice. `LoopManager::resume` takes them over either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOpen {
    /// Adopt and run them (and let the trees a larger budget allows go on): an editor picks up
    /// what the last one left.
    ResumeInterrupted,
    /// Leave them as they are: a run of its own (the command line's `plan`) runs only what it
    /// starts, and an explicit resume takes the rest.
    LeaveInterrupted,
}

/// Starts, schedules, tracks and cancels loops. Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct LoopManager {
    shared: Arc<Shared>,
}

struct Shared {
    loopr_home: PathBuf,
    host_pid: u32,
    /// Asks the user (or policy) before code loops change anything.
    approver: Arc<dyn Approver>,
    buffers: Arc<dyn OpenBuffers>,
    on_open: OnOpen,
    events: Arc<dyn EventSink>,
    provider_factory: ProviderFactory,
    policies: super::policy_cache::PolicyCache,
    projects: Mutex<HashMap<PathBuf, Project>>,
    running: Mutex<HashMap<LoopId, CancellationToken>>,
    /// Phase commits under way, by project root (`commit_hold`): no code loop starts while
    /// one is.
    committing: Mutex<HashMap<PathBuf, Vec<commit_hold::Committing>>>,
    /// Serialises scheduling so two loops finishing at once cannot overfill the slots.
    scheduling: Mutex<()>,
    /// Serialises moving plan runs on, so two loops ending at once start one next phase.
    advancing_runs: Mutex<()>,
    shutting_down: AtomicBool,
    /// Loop tasks under way, including their supervision (recording the end, scheduling what
    /// follows); a shell waiting for quiet watches it.
    busy: tokio::sync::watch::Sender<usize>,
    /// Running loops' transcripts, for whoever follows them.
    transcripts: Arc<super::transcript::TranscriptHub>,
    /// The budget plan trees are held to (the user's, once a shell sets it).
    tree_budget: Arc<crate::budget::TreeBudget>,
    /// MCP servers, shared by the loops and stopped with the host.
    mcp: Arc<crate::mcp::McpPool>,
    /// The user's coding agents as a shell last gave them (their `env` values).
    agents: Arc<super::current_agents::CurrentAgents>,
    /// Each stopped tree's state when its readiness was last told (by root): loops of one
    /// tree that end together tell it once.
    told_ready: Mutex<HashMap<LoopId, String>>,
    _host_lock: Option<HostLock>,
}

#[derive(Clone)]
struct Project {
    root: ProjectRoot,
    layout: ProjectLayout,
    db: LoopDb,
}

impl LoopManager {
    pub fn new(
        loopr_home: PathBuf,
        events: Arc<dyn EventSink>,
        provider_factory: ProviderFactory,
        shell: ShellServices,
    ) -> LoopManager {
        let host_pid = std::process::id();
        let host_lock = match HostLock::acquire(&loopr_home, host_pid) {
            Ok(lock) => Some(lock),
            Err(err) => {
                tracing::error!(error = %err, "taking the host lock; other hosts may take over this host's loops");
                None
            }
        };
        LoopManager {
            shared: Arc::new(Shared {
                loopr_home,
                host_pid,
                approver: shell.approver,
                buffers: shell.buffers,
                on_open: shell.on_open,
                events,
                provider_factory,
                policies: super::policy_cache::PolicyCache::default(),
                projects: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                committing: Mutex::new(HashMap::new()),
                scheduling: Mutex::new(()),
                advancing_runs: Mutex::new(()),
                shutting_down: AtomicBool::new(false),
                busy: tokio::sync::watch::Sender::new(0),
                transcripts: super::transcript::TranscriptHub::new(),
                tree_budget: Arc::default(),
                mcp: Arc::new(crate::mcp::McpPool::new()),
                agents: Arc::default(),
                told_ready: Mutex::new(HashMap::new()),
                _host_lock: host_lock,
            }),
        }
    }

    /// Stops every loop this host runs without recording them as cancelled: they stay
    /// running in the store, owned by a host that is about to exit, so the next host resumes
    /// them. Used when the shell (Neovim) goes away.
    pub fn shut_down(&self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        for token in lock(&self.shared.running).values() {
            token.cancel();
        }
        for commit in lock(&self.shared.committing).values().flatten() {
            commit.cancel.cancel();
        }
        self.shared.mcp.shut_down();
    }

    /// The host's MCP servers: their state for a shell's MCP status, a probe for its health
    /// check.
    pub fn mcp(&self) -> &crate::mcp::McpPool {
        &self.shared.mcp
    }

    /// How many loop tasks are under way, including the bookkeeping after each ends; changes
    /// are observable through the receiver.
    pub fn watch_busy(&self) -> tokio::sync::watch::Receiver<usize> {
        self.shared.busy.subscribe()
    }

    /// Loops this host is running now.
    pub fn running_count(&self) -> usize {
        lock(&self.shared.running).len()
    }

    /// Whether the host that ran as `owner` is gone, as its lock tells (this host is not: what
    /// holds its pid in an open project is its own, the leftovers of an earlier host with the
    /// same pid having been disowned when the project was opened).
    fn host_is_gone(&self, owner: u32) -> bool {
        owner != self.shared.host_pid && !host_is_alive(&self.shared.loopr_home, owner)
    }

    fn emit_status(
        &self,
        id: &LoopId,
        loop_type: LoopType,
        status: LoopStatus,
        error: Option<String>,
    ) {
        self.shared.events.emit(LoopEvent::LoopUpdated {
            id: id.clone(),
            root: self.root_of(id),
            loop_type,
            status,
            error,
        });
    }

    /// The root of the open project that holds loop `id`: a shell looks the loop up there,
    /// whichever project its current buffer belongs to.
    fn root_of(&self, id: &LoopId) -> Option<std::path::PathBuf> {
        let projects: Vec<Project> = lock(&self.shared.projects).values().cloned().collect();
        projects
            .into_iter()
            .find(|project| matches!(project.db.get(id), Ok(Some(_))))
            .map(|project| project.root.path().to_path_buf())
    }

    /// Tells the shells about a status the store changed.
    fn emit_change(&self, change: StatusChange) {
        self.emit_status(&change.id, change.loop_type, change.status, change.error);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps stay consistent under panics (single inserts and removes), so poisoning is
    // not a reason to stop.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
