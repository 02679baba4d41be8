use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::events::{EventSink, LoopEvent};
use super::plan_loop::{LoopContext, LoopError, run_plan_loop};
use super::settings::LoopSettings;
use crate::llm::anthropic::{AnthropicClient, AnthropicConfig};
use crate::llm::{LlmError, LlmProvider};
use crate::store::{LoopDb, LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, StoreError};
use crate::tools::ProjectRoot;

/// Builds the model client for a loop from the user's settings.
pub type ProviderFactory =
    Arc<dyn Fn(&LoopSettings) -> Result<Arc<dyn LlmProvider>, LlmError> + Send + Sync>;

/// The production provider: Anthropic, configured from the environment.
pub fn anthropic_from_env() -> ProviderFactory {
    Arc::new(|settings: &LoopSettings| {
        let config = AnthropicConfig::from_env(
            settings.max_retries,
            settings.request_timeout(),
            settings.stream_idle_timeout(),
        )?;
        Ok(Arc::new(AnthropicClient::new(config)?) as Arc<dyn LlmProvider>)
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
    #[error("invalid setting: {0}")]
    Settings(String),
    #[error(transparent)]
    Provider(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no running loop in this project to cancel")]
    NothingToCancel,
    #[error("no loop {0} in this project")]
    UnknownLoop(String),
    #[error("loop {id} is {status}, not running; nothing to cancel")]
    NotRunning { id: String, status: &'static str },
}

/// Starts, tracks and cancels loops. Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct LoopManager {
    shared: Arc<Shared>,
}

struct Shared {
    loopr_home: PathBuf,
    host_pid: u32,
    events: Arc<dyn EventSink>,
    provider_factory: ProviderFactory,
    projects: Mutex<HashMap<PathBuf, Project>>,
    running: Mutex<HashMap<LoopId, CancellationToken>>,
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
    ) -> LoopManager {
        LoopManager {
            shared: Arc::new(Shared {
                loopr_home,
                host_pid: std::process::id(),
                events,
                provider_factory,
                projects: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Starts a plan loop for `task` and returns its id at once; the loop runs in the
    /// background and reports through events.
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
        let provider = (self.shared.provider_factory)(&settings)?;
        let project = self.project(root)?;
        let record = LoopRecord::start(LoopType::Plan, None, task);
        project.db.insert(&record, self.shared.host_pid)?;
        let cancel = CancellationToken::new();
        lock(&self.shared.running).insert(record.id.clone(), cancel.clone());
        tracing::info!(loop_id = %record.id, root = %project.root.path().display(), "plan loop started");
        self.emit_status(&record.id, LoopType::Plan, LoopStatus::Running, None);

        let context = LoopContext {
            id: record.id.clone(),
            task: task.to_owned(),
            root: project.root.clone(),
            layout: project.layout.clone(),
            db: project.db.clone(),
            provider,
            settings,
            events: self.shared.events.clone(),
            cancel,
        };
        let manager = self.clone();
        let id = record.id.clone();
        // The loop runs in its own task so a panic inside it ends only that loop; the
        // supervising task records the outcome either way.
        let run = tokio::spawn(async move {
            let result = run_plan_loop(&context).await;
            (context, result)
        });
        tokio::spawn(async move {
            let (status, error) = match run.await {
                Ok((_, Ok(outcome))) => {
                    tracing::info!(loop_id = %id, path = %outcome.markdown_path.display(), iteration = outcome.iteration, "plan loop complete");
                    (LoopStatus::Complete, None)
                }
                Ok((_, Err(LoopError::Cancelled))) => (LoopStatus::Cancelled, None),
                Ok((_, Err(err))) => {
                    tracing::warn!(loop_id = %id, error = %err, "plan loop failed");
                    (LoopStatus::Failed, Some(err.to_string()))
                }
                Err(join_error) => {
                    tracing::error!(loop_id = %id, error = %join_error, "plan loop crashed");
                    (
                        LoopStatus::Failed,
                        Some(format!(
                            "internal error: the loop crashed ({join_error}); see :LooprLog"
                        )),
                    )
                }
            };
            manager.finish(&project.db, &id, status, error);
        });
        Ok(record.id)
    }

    /// Cancels loop `id`, or the newest running loop of the project without one.
    pub fn cancel(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let target = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(text) => {
                let id = LoopId::parse(text)
                    .ok_or_else(|| ManagerError::UnknownLoop(text.to_owned()))?;
                let record = project
                    .db
                    .get(&id)?
                    .ok_or_else(|| ManagerError::UnknownLoop(text.to_owned()))?;
                if !record.status.is_active() {
                    return Err(ManagerError::NotRunning {
                        id: text.to_owned(),
                        status: record.status.as_str(),
                    });
                }
                id
            }
            None => self
                .running_ids(&project)?
                .into_iter()
                .next()
                .ok_or(ManagerError::NothingToCancel)?,
        };
        let token = lock(&self.shared.running).get(&target).cloned();
        match token {
            Some(token) => token.cancel(),
            // Active in the database but not run by this host (another Neovim, or a host that
            // died): nothing to stop here, so record the cancellation directly.
            None => self.finish(&project.db, &target, LoopStatus::Cancelled, None),
        }
        tracing::info!(loop_id = %target, "cancel requested");
        Ok(target)
    }

    pub fn status(&self, root: &Path) -> Result<Vec<LoopRecord>, ManagerError> {
        Ok(self.project(root)?.db.list()?)
    }

    /// Loop ids of the project, newest first; only active ones if `running_only`.
    pub fn loop_ids(&self, root: &Path, running_only: bool) -> Result<Vec<LoopId>, ManagerError> {
        let project = self.project(root)?;
        if running_only {
            return self.running_ids(&project);
        }
        Ok(project
            .db
            .list()?
            .into_iter()
            .map(|record| record.id)
            .collect())
    }

    /// Cancels every loop this host runs; used when Neovim goes away.
    pub fn cancel_all(&self) {
        for token in lock(&self.shared.running).values() {
            token.cancel();
        }
    }

    /// Whether any loop is still running in this host.
    pub fn has_running(&self) -> bool {
        !lock(&self.shared.running).is_empty()
    }

    fn running_ids(&self, project: &Project) -> Result<Vec<LoopId>, ManagerError> {
        Ok(project
            .db
            .list()?
            .into_iter()
            .filter(|record| record.status.is_active())
            .map(|record| record.id)
            .collect())
    }

    fn finish(&self, db: &LoopDb, id: &LoopId, status: LoopStatus, error: Option<String>) {
        lock(&self.shared.running).remove(id);
        if let Err(err) = db.set_status(id, status, error.as_deref()) {
            tracing::error!(loop_id = %id, error = %err, "recording the loop's final status");
        }
        let loop_type = db
            .get(id)
            .ok()
            .flatten()
            .map_or(LoopType::Plan, |record| record.loop_type);
        self.emit_status(id, loop_type, status, error);
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

    /// The project at `root`, opened once per host. Opening it marks loops orphaned by a dead
    /// host as interrupted.
    fn project(&self, root: &Path) -> Result<Project, ManagerError> {
        let root = ProjectRoot::new(root).map_err(|source| ManagerError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        let mut projects = lock(&self.shared.projects);
        if let Some(project) = projects.get(root.path()) {
            return Ok(project.clone());
        }
        let layout = ProjectLayout::new(&self.shared.loopr_home, root.path());
        let db = LoopDb::open(&layout.database())?;
        let interrupted = db.mark_orphans_interrupted(process_is_alive)?;
        if !interrupted.is_empty() {
            tracing::info!(
                count = interrupted.len(),
                "marked loops of exited hosts as interrupted"
            );
        }
        let project = Project { root, layout, db };
        projects.insert(project.root.path().to_path_buf(), project.clone());
        Ok(project)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps stay consistent under panics (single inserts and removes), so poisoning is
    // not a reason to stop.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(unix)]
fn process_is_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks whether the process exists; it sends nothing.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_is_alive(pid: u32) -> bool {
    pid == std::process::id()
}
