use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::approvals::PolicyApprover;
use super::artifact_loop::{ArtifactOutcome, LoopContext, LoopError, run_artifact_loop};
use super::baseline::{Baseline, ChangedHunk, UndoReport};
use super::code_loop::{run_code_loop, runnable_phase};
use super::events::{EventSink, LoopEvent};
use super::jobs::{self, ChildLoop, JobError};
use super::phases::{PhaseLookupError, phase_selectors, resolve_phase};
use super::settings::LoopSettings;
use super::tasks::{PhaseSelector, PhaseTasks, phase_tasks};
use crate::llm::SharedEnv;
use crate::llm::{LlmError, LlmProvider};
use crate::store::{
    HostLock, LoopDb, LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, StoreError,
    host_is_alive, remove_if_leftover, sweep_state_dir,
};
use crate::tools::{Approver, OpenBuffers, ProjectRoot, project_walker};

/// Builds the model client for a loop from its settings.
pub type ProviderFactory =
    Arc<dyn Fn(&LoopSettings) -> Result<Arc<dyn LlmProvider>, LlmError> + Send + Sync>;

/// The production providers, with the variables current when a loop starts.
pub fn provider_factory(env: SharedEnv) -> ProviderFactory {
    Arc::new(move |settings: &LoopSettings| {
        crate::llm::providers::build(
            &settings.provider_settings(),
            &env.current(),
            settings.retry_policy(),
        )
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
    #[error("the task is empty; describe the change to plan, e.g. \"Add a --version flag\"")]
    EmptyTask,
    #[error("the feedback is empty; say what should change")]
    EmptyFeedback,
    #[error("invalid setting: {0}")]
    Settings(String),
    #[error(transparent)]
    Provider(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("no {0} loop in this project")]
    NothingTo(&'static str),
    #[error("no loop {0} in this project")]
    UnknownLoop(String),
    #[error("loop {id} is {status}; {hint}")]
    WrongState {
        id: String,
        status: &'static str,
        hint: &'static str,
    },
    #[error(
        "no approved phase named {0:?} in this project; see :LooprStatus (phases that are not yet \
         written, wait for review or were invalidated cannot run)"
    )]
    UnknownPhase(String),
    #[error("no code loop has run for phase {0:?}; start one with :LooprRun {0}")]
    NoCodeLoop(String),
    #[error(transparent)]
    Phase(#[from] PhaseLookupError),
    #[error("{0}")]
    Baseline(String),
    #[error("the stored artifact of loop {id} cannot be read: {message}")]
    StoredArtifact { id: String, message: String },
}

/// What the shell running the manager lends its loops.
pub struct ShellServices {
    /// Who is asked before a code loop changes something.
    pub approver: Arc<dyn Approver>,
    /// Where files open in the editor are edited.
    pub buffers: Arc<dyn OpenBuffers>,
}

enum LoopOutcome {
    Artifact(ArtifactOutcome),
    /// The iteration whose validation passed.
    Code(u32),
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
    events: Arc<dyn EventSink>,
    provider_factory: ProviderFactory,
    projects: Mutex<HashMap<PathBuf, Project>>,
    running: Mutex<HashMap<LoopId, CancellationToken>>,
    /// Serialises scheduling so two loops finishing at once cannot overfill the slots.
    scheduling: Mutex<()>,
    shutting_down: AtomicBool,
    /// Loop tasks under way, including their supervision (recording the end, scheduling what
    /// follows); a shell waiting for quiet watches it.
    busy: tokio::sync::watch::Sender<usize>,
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
                events,
                provider_factory,
                projects: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                scheduling: Mutex::new(()),
                shutting_down: AtomicBool::new(false),
                busy: tokio::sync::watch::Sender::new(0),
                _host_lock: host_lock,
            }),
        }
    }

    /// Starts a plan loop for `task` and returns its id at once; loops run in the background
    /// and report through events.
    pub fn start_plan(
        &self,
        root: &Path,
        task: &str,
        settings: LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        let task = task.trim();
        if task.is_empty() {
            return Err(ManagerError::EmptyTask);
        }
        settings.check().map_err(ManagerError::Settings)?;
        // Fail now, not in the background, when the provider cannot be built (no API key).
        (self.shared.provider_factory)(&settings)?;
        let project = self.project(root)?;
        let record = LoopRecord::new_pending(LoopType::Plan, task, settings.to_json());
        project.db.insert(&record, self.shared.host_pid)?;
        tracing::info!(loop_id = %record.id, root = %project.root.path().display(), "plan loop created");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Starts a code loop that implements phase `phase` (a phase name or a phase loop id) and
    /// returns its id at once.
    pub fn start_code(
        &self,
        root: &Path,
        phase: &str,
        settings: LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        settings.check().map_err(ManagerError::Settings)?;
        (self.shared.provider_factory)(&settings)?;
        let project = self.project(root)?;
        let records = project.db.list()?;
        let phase_record = resolve_phase(&records, phase, |record| {
            runnable_phase(record.status, record.iteration)
        })
        .map_err(|err| match err {
            PhaseLookupError::NotFound(_) => ManagerError::UnknownPhase(phase.to_owned()),
            ambiguous => ManagerError::Phase(ambiguous),
        })?;
        if let Some(active) = records.iter().find(|record| {
            record.loop_type == LoopType::Code
                && record.parent.as_ref() == Some(&phase_record.id)
                && record.status.is_active()
        }) {
            return Err(ManagerError::WrongState {
                id: active.id.to_string(),
                status: active.status.as_str(),
                hint: "this phase already has a code loop; cancel it first",
            });
        }
        let record = LoopRecord {
            parent: Some(phase_record.id.clone()),
            name: phase_record.name.clone(),
            triggered_by: Some(
                ProjectLayout::iteration_relative(phase_record.iteration)
                    .join("artifacts/phase.json")
                    .to_string_lossy()
                    .into_owned(),
            ),
            ..LoopRecord::new_pending(LoopType::Code, &phase_record.task, settings.to_json())
        };
        project.db.insert(&record, self.shared.host_pid)?;
        tracing::info!(loop_id = %record.id, phase, "code loop created");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// What the newest code loop of `phase` changed, one entry per hunk. Blocking (it reads
    /// and diffs files): call it off the async threads.
    pub fn changes(
        &self,
        root: &Path,
        phase: &str,
    ) -> Result<(LoopId, Vec<ChangedHunk>), ManagerError> {
        let project = self.project(root)?;
        let code = newest_code_loop(&project, phase)?;
        let hunks = Baseline::at(&project.layout.loop_dir(&code.id))
            .changes(&project.root)
            .map_err(|err| ManagerError::Baseline(err.to_string()))?;
        Ok((code.id, hunks))
    }

    /// Undoes what the newest code loop of `phase` changed: the files its tools and commands
    /// changed go back to what they held before (through open buffers), except files
    /// changed since, which only `force` restores, and files open with unsaved changes.
    /// The loop's record and status event say it was undone.
    pub async fn undo(
        &self,
        root: &Path,
        phase: &str,
        force: bool,
    ) -> Result<(LoopId, UndoReport), ManagerError> {
        let project = self.project(root)?;
        let code = newest_code_loop(&project, phase)?;
        if code.status.is_active() {
            return Err(ManagerError::WrongState {
                id: code.id.to_string(),
                status: code.status.as_str(),
                hint: "its code loop still runs; cancel it first",
            });
        }
        let report = Baseline::at(&project.layout.loop_dir(&code.id))
            .undo(&project.root, self.shared.buffers.as_ref(), force)
            .await
            .map_err(|err| ManagerError::Baseline(err.to_string()))?;
        tracing::info!(
            loop_id = %code.id,
            restored = report.restored.len(),
            skipped = report.skipped.len(),
            "undid a code loop's changes"
        );
        if !report.restored.is_empty() {
            let mut note = format!("undone: {} file(s) restored", report.restored.len());
            if !report.skipped.is_empty() {
                note.push_str(&format!("; {} not restored", report.skipped.len()));
            }
            if let Some(ended) = code.error.as_deref().filter(|e| !e.starts_with("undone:")) {
                note.push_str(&format!("; it had ended with: {ended}"));
            }
            let db = project.db.clone();
            let (id, status, stored_note) = (code.id.clone(), code.status, note.clone());
            // Only while the loop is as undo found it: the buffer round-trips take a while, and
            // a retry or revision meanwhile gave it a newer status this note must not replace.
            let noted = tokio::task::spawn_blocking(move || {
                db.set_error_if_status(&id, status, Some(&stored_note))
            })
            .await
            .map_err(|err| {
                ManagerError::Baseline(format!("recording the undo crashed: {err}"))
            })??;
            if noted {
                self.emit_status(&code.id, code.loop_type, code.status, Some(note));
            } else {
                tracing::info!(loop_id = %code.id, "the loop changed state during the undo; its record is left as it is");
            }
        }
        Ok((code.id, report))
    }

    /// Approves loop `id` (or the newest loop awaiting approval): it completes and its
    /// children spawn from its stored artifact.
    pub fn approve(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| record.status == LoopStatus::AwaitingApproval)
                .ok_or(ManagerError::NothingTo("awaiting approval"))?,
        };
        // A loop whose revision (or review) failed keeps its last good iteration, which the
        // user may still approve.
        let approvable = record.status == LoopStatus::AwaitingApproval
            || (record.status == LoopStatus::Failed
                && record.iteration > 0
                && record.loop_type != LoopType::Code);
        if !approvable {
            return Err(ManagerError::WrongState {
                id: record.id.to_string(),
                status: record.status.as_str(),
                hint: "only loops awaiting approval (or failed loops with an artifact) can be \
                       approved",
            });
        }
        let kind = jobs::artifact_kind(record.loop_type)?;
        let path = project
            .layout
            .artifacts_dir(&record.id, record.iteration)
            .join(format!("{}.json", kind.as_str()));
        let accepted = jobs::read_json(&path)
            .ok()
            .and_then(|json| jobs::restore(kind, &json))
            .ok_or_else(|| ManagerError::StoredArtifact {
                id: record.id.to_string(),
                message: format!("{} is missing or invalid", path.display()),
            })?;
        self.complete_with_children_from(
            &project,
            &record,
            &[LoopStatus::AwaitingApproval, LoopStatus::Failed],
            record.iteration,
            &accepted.children,
        )?;
        tracing::info!(loop_id = %record.id, iteration = record.iteration, "approved");
        self.schedule(&project);
        Ok(record.id)
    }

    /// Runs loop `id` again with the user's feedback. Its children, spawned from the old
    /// artifact, are cancelled and invalidated; their artifacts stay on disk. A code loop
    /// starts a new iteration that gets the feedback.
    pub fn revise(&self, root: &Path, id: &str, feedback: &str) -> Result<LoopId, ManagerError> {
        if feedback.trim().is_empty() {
            return Err(ManagerError::EmptyFeedback);
        }
        let project = self.project(root)?;
        let record = self.record(&project, id)?;
        let revisable = !matches!(
            record.status,
            LoopStatus::Running | LoopStatus::Pending | LoopStatus::Invalidated
        ) && (record.iteration > 0 || record.loop_type == LoopType::Code);
        let wrong_state = |status: LoopStatus| ManagerError::WrongState {
            id: record.id.to_string(),
            status: status.as_str(),
            hint: "only a current loop that has produced its artifact and is not running \
                   can be revised (an invalidated loop's parent was revised: revise the \
                   parent's new children instead)",
        };
        if !revisable {
            return Err(wrong_state(record.status));
        }
        let Some(invalidated) =
            project
                .db
                .revise(&record.id, feedback.trim(), self.shared.host_pid)?
        else {
            let now = self.record(&project, id)?;
            return Err(wrong_state(now.status));
        };
        // After the transaction, so a descendant started in between is stopped too; its
        // supervisor finds it invalidated and leaves that be.
        for (child, loop_type) in &invalidated {
            if let Some(token) = lock(&self.shared.running).get(child) {
                token.cancel();
            }
            self.emit_status(child, *loop_type, LoopStatus::Invalidated, None);
        }
        tracing::info!(loop_id = %record.id, invalidated = invalidated.len(), "revising");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Runs a loop that failed, was cancelled or was interrupted again, from where it stood:
    /// an artifact loop resumes its stored conversation (or starts over if it had none), a
    /// code loop gets a fresh allowance of iterations.
    pub fn retry(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| retryable(record.status))
                .ok_or(ManagerError::NothingTo("failed or cancelled"))?,
        };
        let current = record.status != LoopStatus::Invalidated;
        if !current || !project.db.retry(&record.id, self.shared.host_pid)? {
            let now = self.record(&project, record.id.as_str())?;
            return Err(ManagerError::WrongState {
                id: record.id.to_string(),
                status: now.status.as_str(),
                hint: "only a loop that failed, was cancelled or was interrupted can be retried",
            });
        }
        tracing::info!(loop_id = %record.id, "retrying");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Cancels loop `id` (or the newest active loop) and every active loop below it; a finished
    /// plan can be given to stop the specs and phases it spawned.
    pub fn cancel(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let target = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| record.status.is_active())
                .ok_or(ManagerError::NothingTo("running"))?,
        };
        let tree = project.db.cancel_tree(&target.id)?;
        if tree.is_empty() {
            return Err(ManagerError::WrongState {
                id: target.id.to_string(),
                status: target.status.as_str(),
                hint: "neither it nor any loop below it is active; nothing to cancel",
            });
        }
        for record in &tree.cancelled {
            self.emit_status(&record.id, record.loop_type, LoopStatus::Cancelled, None);
            self.fail_dependents(&project, record, LoopStatus::Cancelled);
        }
        for id in &tree.running {
            // Registered before its claim, so a loop the scheduler is starting right now is
            // found here too; its supervisor records the cancellation when the task stops.
            // (A loop another host runs is stopped by that host.)
            if let Some(token) = lock(&self.shared.running).get(id) {
                token.cancel();
            }
        }
        tracing::info!(loop_id = %target.id, "cancel requested");
        Ok(target.id)
    }

    pub fn status(&self, root: &Path) -> Result<Vec<LoopRecord>, ManagerError> {
        Ok(self.project(root)?.db.list()?)
    }

    /// Every loop, newest first, with the markdown of its current artifact if it has one.
    pub fn status_with_artifacts(
        &self,
        root: &Path,
    ) -> Result<Vec<(LoopRecord, Option<PathBuf>)>, ManagerError> {
        let project = self.project(root)?;
        Ok(project
            .db
            .list()?
            .into_iter()
            .map(|record| {
                let markdown = jobs::artifact_kind(record.loop_type)
                    .ok()
                    .filter(|_| record.iteration > 0)
                    .map(|kind| {
                        project
                            .layout
                            .artifacts_dir(&record.id, record.iteration)
                            .join(format!("{}.md", kind.as_str()))
                    });
                (record, markdown)
            })
            .collect())
    }

    /// The tasks of the current phases matching `selector`.
    pub fn tasks(
        &self,
        root: &Path,
        selector: &PhaseSelector,
    ) -> Result<Vec<PhaseTasks>, ManagerError> {
        let project = self.project(root)?;
        let records = project.db.list()?;
        let selector = match selector {
            PhaseSelector::Named(name) => {
                let phase = resolve_phase(&records, name, |record| {
                    record.status != LoopStatus::Invalidated && record.iteration > 0
                })?;
                PhaseSelector::Loop(phase.id.to_string())
            }
            other => other.clone(),
        };
        Ok(phase_tasks(
            &records,
            &selector,
            &project.root,
            &project.layout,
        ))
    }

    /// The names to complete a phase argument with (`spec/phase` where a name is shared).
    pub fn phase_selectors(&self, root: &Path) -> Result<Vec<String>, ManagerError> {
        Ok(phase_selectors(&self.project(root)?.db.list()?))
    }

    /// Opens the project so this host resumes its unfinished loops; returns how many loops of
    /// the project are active.
    pub fn resume(&self, root: &Path) -> Result<usize, ManagerError> {
        let project = self.project(root)?;
        Ok(project
            .db
            .list()?
            .iter()
            .filter(|record| record.status.is_active())
            .count())
    }

    /// Stops every loop this host runs without recording them as cancelled: they stay
    /// running in the store, owned by a host that is about to exit, so the next host resumes
    /// them. Used when the shell (Neovim) goes away.
    pub fn shut_down(&self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        for token in lock(&self.shared.running).values() {
            token.cancel();
        }
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

    fn record(&self, project: &Project, id: &str) -> Result<LoopRecord, ManagerError> {
        let loop_id = LoopId::parse(id).ok_or_else(|| ManagerError::UnknownLoop(id.to_owned()))?;
        project
            .db
            .get(&loop_id)?
            .ok_or_else(|| ManagerError::UnknownLoop(id.to_owned()))
    }

    /// Starts every pending loop of this host whose dependencies are complete, while slots
    /// are free.
    fn schedule(&self, project: &Project) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let _scheduling = lock(&self.shared.scheduling);
        let pending = match project.db.pending_for_host(self.shared.host_pid) {
            Ok(pending) => pending,
            Err(err) => {
                tracing::error!(error = %err, "listing pending loops");
                return;
            }
        };
        for record in pending {
            let settings = LoopSettings::from_stored(&record.settings);
            let limit = usize::try_from(settings.max_concurrent_loops).unwrap_or(usize::MAX);
            if self.running_count() >= limit {
                continue;
            }
            match dependencies_met(project, &record) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(err) => {
                    tracing::error!(loop_id = %record.id, error = %err, "checking dependencies");
                    continue;
                }
            }
            // The token exists before the claim: a cancel that comes between the claim and
            // the launch finds it, and the loop stops as soon as it starts.
            let cancel = CancellationToken::new();
            lock(&self.shared.running).insert(record.id.clone(), cancel.clone());
            match project.db.claim(&record.id, self.shared.host_pid) {
                Ok(true) => {
                    crate::test_hooks::hold_point("after_claim");
                    self.launch(project, record, settings, cancel);
                }
                Ok(false) => {
                    lock(&self.shared.running).remove(&record.id);
                }
                Err(err) => {
                    lock(&self.shared.running).remove(&record.id);
                    tracing::error!(loop_id = %record.id, error = %err, "claiming a loop");
                }
            }
        }
    }

    fn launch(
        &self,
        project: &Project,
        record: LoopRecord,
        settings: LoopSettings,
        cancel: CancellationToken,
    ) {
        let provider = match (self.shared.provider_factory)(&settings) {
            Ok(provider) => provider,
            Err(err) => {
                lock(&self.shared.running).remove(&record.id);
                self.record_end(project, &record, LoopStatus::Failed, Some(err.to_string()));
                return;
            }
        };
        let policies = settings.tool_policy().and_then(|policy| {
            PolicyApprover::new(
                settings.approvals.clone(),
                &settings.allow_commands,
                policy.sandbox.is_confined(),
                self.shared.approver.clone(),
            )
            .and_then(|approver| approver.allowing_hosts(&settings.web_fetch_allow_hosts))
            .map(|approver| (policy, Arc::new(approver) as Arc<dyn Approver>))
        });
        let (policy, approver) = match policies {
            Ok(policies) => policies,
            Err(err) => {
                lock(&self.shared.running).remove(&record.id);
                self.record_end(
                    project,
                    &record,
                    LoopStatus::Failed,
                    Some(format!("invalid setting: {err}")),
                );
                return;
            }
        };
        tracing::info!(loop_id = %record.id, loop_type = record.loop_type.as_str(), "loop running");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Running, None);
        let context = LoopContext {
            record: record.clone(),
            root: project.root.clone(),
            layout: project.layout.clone(),
            db: project.db.clone(),
            provider,
            settings: settings.clone(),
            events: self.shared.events.clone(),
            cancel: cancel.clone(),
            approver,
            policy: Arc::new(policy),
            buffers: self.shared.buffers.clone(),
        };
        self.shared.busy.send_modify(|busy| *busy += 1);
        // The loop runs in its own task so a panic inside it ends only that loop; the
        // supervising task records the outcome either way.
        let run = tokio::spawn(async move {
            match context.record.loop_type {
                LoopType::Code => run_code_loop(&context).await.map(LoopOutcome::Code),
                _ => run_artifact_loop(&context).await.map(LoopOutcome::Artifact),
            }
        });
        let manager = self.clone();
        let project = project.clone();
        let busy = self.shared.busy.clone();
        tokio::spawn(async move {
            let result = run.await;
            // Recording the end and scheduling what follows are SQLite transactions: the
            // blocking pool's work, not the async workers'.
            let finished = tokio::task::spawn_blocking(move || {
                manager.after_loop(&project, &record, &settings, &cancel, result);
            })
            .await;
            if let Err(err) = finished {
                tracing::error!(error = %err, "recording a loop's end crashed");
            }
            // Whatever happened above, a shell waiting for quiet must not wait forever.
            busy.send_modify(|busy| *busy -= 1);
        });
    }

    /// Records how a loop task ended and starts what may run now.
    fn after_loop(
        &self,
        project: &Project,
        record: &LoopRecord,
        settings: &LoopSettings,
        cancel: &CancellationToken,
        result: Result<Result<LoopOutcome, LoopError>, tokio::task::JoinError>,
    ) {
        lock(&self.shared.running).remove(&record.id);
        match result {
            // A cancel that came while the last answer was being stored still wins.
            Ok(Ok(_)) if cancel.is_cancelled() => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok(Ok(LoopOutcome::Artifact(outcome))) => {
                self.on_artifact(project, record, settings, outcome);
            }
            Ok(Ok(LoopOutcome::Code(iteration))) => {
                tracing::info!(loop_id = %record.id, iteration, "phase implemented and validated");
                self.record_end(project, record, LoopStatus::Complete, None);
            }
            Ok(Err(LoopError::Cancelled)) => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok(Err(err)) => {
                tracing::warn!(loop_id = %record.id, error = %err, "loop failed");
                self.record_end(project, record, LoopStatus::Failed, Some(err.to_string()));
            }
            Err(join_error) => {
                tracing::error!(loop_id = %record.id, error = %join_error, "loop crashed");
                let message =
                    format!("internal error: the loop crashed ({join_error}); see :LooprLog");
                self.record_end(project, record, LoopStatus::Failed, Some(message));
            }
        }
        self.schedule(project);
    }

    fn on_artifact(
        &self,
        project: &Project,
        record: &LoopRecord,
        settings: &LoopSettings,
        outcome: ArtifactOutcome,
    ) {
        crate::test_hooks::pause_point(&format!(
            "after_artifact_write:{}",
            record.loop_type.as_str()
        ));
        let result = if settings.gates(record.loop_type.as_str()) {
            project
                .db
                .finish_with_children(
                    &record.id,
                    LoopStatus::AwaitingApproval,
                    &[],
                    self.shared.host_pid,
                )
                .map(|()| {
                    self.emit_status(
                        &record.id,
                        record.loop_type,
                        LoopStatus::AwaitingApproval,
                        None,
                    )
                })
                .map_err(ManagerError::from)
        } else {
            self.complete_with_children(
                project,
                record,
                outcome.iteration,
                &outcome.accepted.children,
            )
        };
        if let Err(err) = result {
            let still_running = project
                .db
                .get(&record.id)
                .ok()
                .flatten()
                .is_some_and(|now| now.status == LoopStatus::Running);
            if still_running && project.db.cancel_requested(&record.id).unwrap_or(false) {
                // Cancelled while it finished: the cancel wins, no child spawns.
                tracing::info!(loop_id = %record.id, "cancelled as it finished");
                self.record_end(project, record, LoopStatus::Cancelled, None);
            } else if still_running {
                // Not a revision or cancel that came first: the loop cannot go on.
                tracing::error!(loop_id = %record.id, error = %err, "recording the artifact's outcome");
                self.record_end(
                    project,
                    record,
                    LoopStatus::Failed,
                    Some(format!("recording the outcome: {err}")),
                );
            } else {
                tracing::info!(loop_id = %record.id, error = %err, "the loop was revised or cancelled as it finished");
            }
        }
    }

    fn complete_with_children(
        &self,
        project: &Project,
        record: &LoopRecord,
        iteration: u32,
        children: &[ChildLoop],
    ) -> Result<(), ManagerError> {
        self.complete_with_children_from(
            project,
            record,
            &[LoopStatus::Running, LoopStatus::AwaitingApproval],
            iteration,
            children,
        )
    }

    fn complete_with_children_from(
        &self,
        project: &Project,
        record: &LoopRecord,
        from: &[LoopStatus],
        iteration: u32,
        children: &[ChildLoop],
    ) -> Result<(), ManagerError> {
        let kind = jobs::artifact_kind(record.loop_type)?;
        let triggered_by = ProjectLayout::iteration_relative(iteration)
            .join("artifacts")
            .join(format!("{}.json", kind.as_str()))
            .to_string_lossy()
            .into_owned();
        let child_records: Vec<LoopRecord> = children
            .iter()
            .map(|child| LoopRecord {
                parent: Some(record.id.clone()),
                name: Some(child.name.clone()),
                depends_on: child.depends_on.clone(),
                triggered_by: Some(triggered_by.clone()),
                ..LoopRecord::new_pending(child.loop_type, &child.task, record.settings.clone())
            })
            .collect();
        project.db.finish_with_children_from(
            &record.id,
            from,
            LoopStatus::Complete,
            &child_records,
            self.shared.host_pid,
        )?;
        self.emit_status(&record.id, record.loop_type, LoopStatus::Complete, None);
        for child in &child_records {
            self.emit_status(&child.id, child.loop_type, LoopStatus::Pending, None);
        }
        Ok(())
    }

    fn record_end(
        &self,
        project: &Project,
        record: &LoopRecord,
        status: LoopStatus,
        error: Option<String>,
    ) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            // Left running in the store for the next host to resume.
            return;
        }
        match project
            .db
            .finish_running(&record.id, status, error.as_deref())
        {
            Ok(true) => {
                self.emit_status(&record.id, record.loop_type, status, error);
                if status != LoopStatus::Complete {
                    self.fail_dependents(project, record, status);
                }
            }
            Ok(false) => {
                tracing::debug!(loop_id = %record.id, "loop state changed meanwhile; end not recorded")
            }
            Err(err) => {
                tracing::error!(loop_id = %record.id, error = %err, "recording the loop's end")
            }
        }
    }

    /// Siblings waiting for `record` can never start now; they fail with the reason, and so do
    /// the loops waiting for them.
    fn fail_dependents(&self, project: &Project, record: &LoopRecord, ended: LoopStatus) {
        let (Some(parent), Some(name)) = (&record.parent, &record.name) else {
            return;
        };
        let Ok(siblings) = project.db.children(parent) else {
            return;
        };
        for sibling in siblings {
            let waits_for_it = sibling.status == LoopStatus::Pending
                && sibling.triggered_by == record.triggered_by
                && sibling
                    .depends_on
                    .iter()
                    .any(|dependency| dependency == name);
            if !waits_for_it {
                continue;
            }
            let reason = format!("its dependency {name} ended {}", ended.as_str());
            if project
                .db
                .set_status(&sibling.id, LoopStatus::Failed, Some(&reason))
                .is_ok()
            {
                self.emit_status(
                    &sibling.id,
                    sibling.loop_type,
                    LoopStatus::Failed,
                    Some(reason),
                );
                self.fail_dependents(project, &sibling, LoopStatus::Failed);
            }
        }
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
            loop_type,
            status,
            error,
        });
    }

    /// The project at `root`, opened once per host. Opening it adopts loops left behind by a
    /// host that died and schedules them, so they resume.
    fn project(&self, root: &Path) -> Result<Project, ManagerError> {
        let root = ProjectRoot::new(root).map_err(|source| ManagerError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        let project = {
            let mut projects = lock(&self.shared.projects);
            if let Some(project) = projects.get(root.path()) {
                return Ok(project.clone());
            }
            let layout = ProjectLayout::new(&self.shared.loopr_home, root.path());
            let db = LoopDb::open(&layout.database())?;
            let project = Project { root, layout, db };
            projects.insert(project.root.path().to_path_buf(), project.clone());
            project
        };
        self.remove_leftovers(&project);
        let adopted = project
            .db
            .adopt_orphans(self.shared.host_pid, |owner, id, status| {
                if owner == self.shared.host_pid {
                    // Ours by pid, yet no task runs it: left by an earlier host with our pid.
                    status == LoopStatus::Running && !lock(&self.shared.running).contains_key(id)
                } else {
                    !host_is_alive(&self.shared.loopr_home, owner)
                }
            })?;
        if !adopted.is_empty() {
            tracing::info!(
                count = adopted.len(),
                "resuming loops of a host that exited"
            );
            for id in &adopted {
                if let Some(record) = project.db.get(id)? {
                    self.emit_status(id, record.loop_type, LoopStatus::Pending, None);
                }
            }
        }
        self.schedule(&project);
        Ok(project)
    }
}

impl LoopManager {
    /// Removes the temporary files hosts that were killed left in the project's state (now:
    /// it is small) and in the project itself (in the background: a tree walk, which a shell
    /// waiting for quiet waits for).
    fn remove_leftovers(&self, project: &Project) {
        let home = self.shared.loopr_home.clone();
        let removed = sweep_state_dir(project.layout.project_dir(), &home);
        if removed > 0 {
            tracing::info!(
                removed,
                "removed temporary files of killed hosts from the state"
            );
        }
        let root = project.root.clone();
        self.shared.busy.send_modify(|busy| *busy += 1);
        let manager = self.clone();
        let spawned = std::thread::Builder::new()
            .name("loopr-leftovers".to_owned())
            .spawn(move || {
                if let Ok(walker) = project_walker(&root, root.path(), None) {
                    for entry in walker.flatten() {
                        remove_if_leftover(entry.path(), &home);
                    }
                }
                manager.shared.busy.send_modify(|busy| *busy -= 1);
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "starting the leftover sweep");
            self.shared.busy.send_modify(|busy| *busy -= 1);
        }
    }
}

/// The newest code loop of the phase `phase` names (a phase name, `spec/phase`, a phase
/// loop id) or the code loop with id `phase`. Only phases that had a code loop compete for a
/// name.
fn newest_code_loop(project: &Project, phase: &str) -> Result<LoopRecord, ManagerError> {
    let records = project.db.list()?;
    let newest_code_loop_of = |phase_id: &LoopId| {
        records
            .iter()
            .find(|record| {
                record.loop_type == LoopType::Code && record.parent.as_ref() == Some(phase_id)
            })
            .cloned()
    };
    if let Some(code) = records
        .iter()
        .find(|record| record.loop_type == LoopType::Code && record.id.as_str() == phase.trim())
    {
        return Ok(code.clone());
    }
    let phase_record = resolve_phase(&records, phase, |record| {
        newest_code_loop_of(&record.id).is_some()
    })
    .map_err(|err| match err {
        PhaseLookupError::NotFound(_) => ManagerError::NoCodeLoop(phase.to_owned()),
        ambiguous => ManagerError::Phase(ambiguous),
    })?;
    newest_code_loop_of(&phase_record.id).ok_or_else(|| ManagerError::NoCodeLoop(phase.to_owned()))
}

/// Loops `:LooprRetry` can run again.
fn retryable(status: LoopStatus) -> bool {
    matches!(
        status,
        LoopStatus::Failed | LoopStatus::Cancelled | LoopStatus::Interrupted
    )
}

/// A spec may start once the specs it depends on (its siblings from the same parent
/// artifact) are complete.
fn dependencies_met(project: &Project, record: &LoopRecord) -> Result<bool, StoreError> {
    if record.depends_on.is_empty() {
        return Ok(true);
    }
    let Some(parent) = &record.parent else {
        return Ok(true);
    };
    let siblings = project.db.children(parent)?;
    Ok(record.depends_on.iter().all(|dependency| {
        siblings.iter().any(|sibling| {
            sibling.name.as_deref() == Some(dependency.as_str())
                && sibling.triggered_by == record.triggered_by
                && sibling.status == LoopStatus::Complete
        })
    }))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps stay consistent under panics (single inserts and removes), so poisoning is
    // not a reason to stop.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
