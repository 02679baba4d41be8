//! The command-line shell: `loopr plan` and `loopr status` run the same core as Neovim does,
//! for scripts and CI. Progress goes to stderr; the summary to stdout. SIGINT and SIGTERM stop
//! the run's loops (and the commands they run) and end it with `Interrupted`.

/// `eprintln!` for what the user reads on the terminal: text from outside (the model, the
/// project's files, commands, servers) goes through `for_terminal`, never obeyed.
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::terminal_text::for_terminal(&format!($($arg)*)))
    };
}

mod rewind;
mod table;
mod verify;
mod words;

pub use rewind::{Restoring, restore};
pub use verify::{print_findings, run_verify};

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::agent::{
    LoopEvent, LoopManager, LoopSettings, OnOpen, ProviderFactory, ShellServices, Started,
    TreeReady,
};
use crate::mcp::McpSettings;
use crate::pricing::PriceTable;
use crate::store::{
    LoopDb, LoopId, LoopRecord, LoopStatus, PlanRunState, ProjectLayout, host_is_alive,
};
use crate::tools::{AcceptAll, ApprovalRequest, Approver, ChangeKind, Decision, NoBuffers};
use table::{Spent, write_table};
use tokio_util::sync::CancellationToken;
use words::{clause, hinted, verification_lines, with_next_step};

/// Without `--yes` nobody is there to approve a change: each is rejected with a reason the
/// model reads (and the loop reports).
pub struct HeadlessRefusal;

#[async_trait::async_trait]
impl Approver for HeadlessRefusal {
    async fn decide(
        &self,
        request: ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Option<Decision> {
        let reason = if request.kind == ChangeKind::Fetch {
            "fetches cannot be approved in a headless run; the user must list the host in \
             the web_fetch_allow_hosts setting or set approvals.fetch to \"auto\""
        } else {
            "changes cannot be approved in a headless run; the user must rerun with --yes"
        };
        Some(Decision::Reject(reason.to_owned()))
    }
}

/// The approver for a headless run: everything with `--yes`, nothing without.
pub fn headless_approver(yes: bool) -> Arc<dyn Approver> {
    if yes {
        Arc::new(AcceptAll)
    } else {
        Arc::new(HeadlessRefusal)
    }
}

/// A headless run ended by SIGINT or SIGTERM. Its loops were stopped (their commands killed)
/// and left as they were in the store, so `loopr resume` (or Neovim) continues them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "stopped by {}: its loops were interrupted and stay resumable; `loopr resume` continues them",
    self.name()
)]
pub enum Interrupted {
    Interrupt,
    Terminate,
}

impl Interrupted {
    pub fn name(self) -> &'static str {
        match self {
            Interrupted::Interrupt => "SIGINT",
            Interrupted::Terminate => "SIGTERM",
        }
    }

    /// 128 and the signal's number, as a shell reports a process the signal ended.
    pub fn exit_status(self) -> u8 {
        match self {
            Interrupted::Interrupt => 130,
            Interrupted::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, caught from the start of a run so that neither ends the process before
/// its commands are killed.
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn catch() -> anyhow::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals {
                interrupt: signal(SignalKind::interrupt()).context("catching SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("catching SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    async fn next(&mut self) -> Interrupted {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => Interrupted::Interrupt,
                _ = self.terminate.recv() => Interrupted::Terminate,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Interrupted::Interrupt
        }
    }
}

/// How long the loops get to stop (kill their commands, close their requests) after a signal.
const STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Stops every loop this process runs, as a host that Neovim left does: cancelled tokens kill
/// their commands, and the loops stay in the store as they were, to be resumed. Resumable
/// rather than cancelled because a signal often is not the user's decision about the work
/// (a CI timeout, a shutdown), and the tokens already spent are not thrown away; `:LooprCancel`
/// cancels for good. Waits until the loop tasks ended (a second signal stops waiting).
async fn stop_loops(manager: &LoopManager, signals: &mut StopSignals, signal: Interrupted) {
    say!("loopr: {}: stopping the loops", signal.name());
    manager.shut_down();
    let mut busy = manager.watch_busy();
    tokio::select! {
        stopped = tokio::time::timeout(STOP_TIMEOUT, busy.wait_for(|running| *running == 0)) => {
            if stopped.is_err() {
                tracing::warn!("loops still running {}s after {}", STOP_TIMEOUT.as_secs(), signal.name());
            }
        }
        _ = signals.next() => {}
    }
}

/// The manager of a headless run, and the events it reports. Every run leaves the loops that
/// hosts which are gone left unfinished as they were when it opens the project: `plan` and
/// `run` run their own, `resume` takes them over explicitly, and `cancel` ends one it names.
fn headless_manager(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    approver: Arc<dyn Approver>,
) -> (LoopManager, UnboundedReceiver<LoopEvent>) {
    let (sender, events) = tokio::sync::mpsc::unbounded_channel();
    let shell = ShellServices {
        approver,
        buffers: Arc::new(NoBuffers),
        on_open: OnOpen::LeaveInterrupted,
    };
    let manager = LoopManager::new(loopr_home, Arc::new(sender), provider_factory, shell);
    (manager, events)
}

/// Says once, on stderr, that the project has loops that hosts which are gone left
/// unfinished, which this run leaves alone.
fn tell_about_loops_left(manager: &LoopManager, root: &Path) -> anyhow::Result<()> {
    let left = manager.left_unfinished(root)?;
    if left > 0 {
        say!(
            "loopr: {left} unfinished loop(s) of this project that no host runs were left as \
             they were; `loopr resume` continues them"
        );
    }
    Ok(())
}

pub struct PlanOptions {
    pub root: PathBuf,
    pub task: String,
    pub approve_all: bool,
    pub settings: LoopSettings,
}

/// Runs a plan loop and, with `approve_all`, the whole hierarchy below it (approving only
/// there), until nothing in it can move. Returns whether every loop of it completed. Other
/// loops of the project are left as they are.
pub async fn run_plan(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    options: PlanOptions,
) -> anyhow::Result<bool> {
    let mut signals = StopSignals::catch()?;
    // Plans only read the project: nothing is approved.
    let (manager, mut events) =
        headless_manager(loopr_home, provider_factory, Arc::new(HeadlessRefusal));
    let plan_id = manager
        .start_plan(&options.root, &options.task, options.settings)
        .map_err(with_next_step)
        .context("starting the plan")?;
    say!("loopr: plan loop {plan_id} started");
    tell_about_loops_left(&manager, &options.root)?;
    let select = |manager: &LoopManager| tree_records(manager, &options.root, &plan_id);
    settle(
        &manager,
        &options.root,
        options.approve_all,
        &mut events,
        &select,
        &mut signals,
    )
    .await?;
    summarize(&manager, &options.root, &select(&manager)?)
}

/// Resumes the project's unfinished loops (left behind by a host that died) and, with
/// `approve_all`, everything they spawn, until nothing can move. Returns whether every loop
/// it resumed, and what they spawned, completed; loops that had ended before do not count. `mcp` is the user's current MCP settings, where the loops' servers get their `env` values
/// (a loop's stored settings name the variables only).
pub async fn resume(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    approve_all: bool,
    approver: Arc<dyn Approver>,
    mcp: &McpSettings,
) -> anyhow::Result<bool> {
    let mut signals = StopSignals::catch()?;
    let (manager, mut events) = headless_manager(loopr_home, provider_factory, approver);
    manager.mcp().use_current(mcp);
    let counts = manager.resume(&root).context("opening the project")?;
    say!("loopr: {} unfinished loop(s)", counts.active);
    if counts.waiting_for_budget > 0 {
        say!(
            "loopr: {} loop(s) wait for their plan tree's budget (paused or held); approve \
             the tree's plan to go on",
            counts.waiting_for_budget
        );
    }
    // This run's loops: the trees of those unfinished now, whole. Trees that ended before
    // (an old plan the user cancelled) neither fail the run nor fill its table.
    let resumed = roots_of_unfinished(&manager.status(&root)?);
    if resumed.is_empty() {
        say!("loopr: nothing to resume; the project's loops:");
        let all: Vec<LoopRecord> = manager.status(&root)?.into_iter().rev().collect();
        summarize(&manager, &root, &all)?;
        return Ok(true);
    }
    let select = |manager: &LoopManager| trees_of(manager, &root, &resumed);
    settle(
        &manager,
        &root,
        approve_all,
        &mut events,
        &select,
        &mut signals,
    )
    .await?;
    summarize(&manager, &root, &select(&manager)?)
}

/// Implements a phase with a code loop until its validation passes; returns whether it did.
pub async fn run_code(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    phase: &str,
    settings: LoopSettings,
    approver: Arc<dyn Approver>,
) -> anyhow::Result<bool> {
    let mut signals = StopSignals::catch()?;
    let (manager, mut events) = headless_manager(loopr_home, provider_factory, approver);
    let started = manager
        .run(&root, phase, settings)
        .map_err(with_next_step)
        .context("starting the code loop")?;
    let code_id = match started {
        Started::Code(code_id) => code_id,
        Started::Tree(target) => {
            return follow_run(&manager, &root, &target, &mut events, &mut signals).await;
        }
    };
    say!("loopr: code loop {code_id} started for phase {phase}");
    tell_about_loops_left(&manager, &root)?;
    let select = only_loop(&root, &code_id);
    settle(&manager, &root, false, &mut events, &select, &mut signals).await?;
    summarize(&manager, &root, &select(&manager)?)
}

/// Follows the run of every phase of plan or spec `target` until nothing of it can move;
/// returns whether the run is done (every phase implemented).
async fn follow_run(
    manager: &LoopManager,
    root: &Path,
    target: &LoopId,
    events: &mut UnboundedReceiver<LoopEvent>,
    signals: &mut StopSignals,
) -> anyhow::Result<bool> {
    say!("loopr: running every phase of loop {target}");
    tell_about_loops_left(manager, root)?;
    let select = |manager: &LoopManager| trees_of(manager, root, std::slice::from_ref(target));
    settle(manager, root, false, events, &select, signals).await?;
    summarize(manager, root, &select(manager)?)?;
    let run = manager.plan_run(root, target)?;
    if let Some(run) = &run {
        say!("loopr: {}", crate::next_step::neutral(&run.shown()));
    }
    Ok(run.is_some_and(|run| run.state == PlanRunState::Done))
}

/// What a run of one loop settles on: loop `id` of the project at `root`, alone.
fn only_loop<'a>(
    root: &'a Path,
    id: &'a LoopId,
) -> impl Fn(&LoopManager) -> anyhow::Result<Vec<LoopRecord>> + 'a {
    move |manager| {
        Ok(manager
            .status(root)?
            .into_iter()
            .filter(|record| &record.id == id)
            .collect())
    }
}

/// Cancels loop `id` and every active loop below it, as `:LooprCancel` does, and says on
/// stderr what changed: loops no host runs (waiting, or interrupted: their host is gone) end
/// at once; loops another host runs are asked to stop, which it does before their next turn.
pub async fn cancel(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    id: &str,
) -> anyhow::Result<()> {
    let (manager, mut events) =
        headless_manager(loopr_home, provider_factory, Arc::new(HeadlessRefusal));
    let cancelled = manager
        .cancel(&root, Some(id))
        .map_err(with_next_step)
        .with_context(|| format!("cancelling loop {id}"))?;
    let mut reporter = Reporter::default();
    while let Ok(event) = events.try_recv() {
        reporter.report(&event);
    }
    for running in &cancelled.run_elsewhere {
        say!(
            "loopr: {running} runs in another host, which was asked to stop it: it ends \
             cancelled before its next turn"
        );
    }
    // Opening the project started a sweep of what killed hosts left; it ends with this run.
    let _ = manager.watch_busy().wait_for(|busy| *busy == 0).await;
    Ok(())
}

fn summarize(manager: &LoopManager, root: &Path, records: &[LoopRecord]) -> anyhow::Result<bool> {
    let usage = manager.usage_by_loop(root)?;
    let coverage = manager.coverage(root)?;
    write_table(
        &mut std::io::stdout().lock(),
        records,
        &Spent {
            usage: &usage,
            prices: None,
        },
        &coverage,
    )?;
    Ok(records
        .iter()
        .all(|record| record.status == LoopStatus::Complete))
}

/// Waits, reporting events, until this process runs nothing and nothing more can start;
/// approves what waits for review when `approve_all`. Loops other hosts run, or that wait on
/// something that will not happen (an unapproved sibling), do not keep it waiting. A signal
/// stops the loops and ends the wait with `Interrupted`.
async fn settle(
    manager: &LoopManager,
    root: &Path,
    approve_all: bool,
    events: &mut UnboundedReceiver<LoopEvent>,
    select: &dyn Fn(&LoopManager) -> anyhow::Result<Vec<LoopRecord>>,
    signals: &mut StopSignals,
) -> anyhow::Result<()> {
    let mut busy = manager.watch_busy();
    // Looked for at the start, when a loop comes to wait for approval, and when all is quiet;
    // not after every event: reading the whole tree each time competes with the loops for
    // the store.
    let mut look_for_approvals = approve_all;
    let mut reporter = Reporter::default();
    loop {
        let approved = look_for_approvals && approve_waiting(manager, root, select)?;
        look_for_approvals = false;
        if !approved && *busy.borrow_and_update() == 0 {
            if approve_all && approve_waiting(manager, root, select)? {
                continue;
            }
            // Quiet: give whatever of this run could still start its chance, then stop if
            // nothing did.
            manager.start_ready(root)?;
            if *busy.borrow_and_update() == 0 {
                while let Ok(event) = events.try_recv() {
                    reporter.report(&event);
                }
                return Ok(());
            }
        }
        tokio::select! {
            signal = signals.next() => {
                stop_loops(manager, signals, signal).await;
                while let Ok(event) = events.try_recv() {
                    reporter.report(&event);
                }
                return Err(signal.into());
            }
            event = events.recv() => match event {
                Some(event) => {
                    look_for_approvals |= approve_all && awaits_approval(&event);
                    reporter.report(&event);
                }
                None => return Ok(()),
            },
            changed = busy.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
        }
        while let Ok(event) = events.try_recv() {
            look_for_approvals |= approve_all && awaits_approval(&event);
            reporter.report(&event);
        }
    }
}

/// Approves every loop of `select` that waits for approval; returns whether there was one.
fn approve_waiting(
    manager: &LoopManager,
    root: &Path,
    select: &dyn Fn(&LoopManager) -> anyhow::Result<Vec<LoopRecord>>,
) -> anyhow::Result<bool> {
    let mut approved = false;
    for record in select(manager)? {
        if record.status == LoopStatus::AwaitingApproval {
            manager.approve(root, Some(record.id.as_str()))?;
            say!(
                "loopr: approved {} {}",
                record.loop_type.as_str(),
                record.id
            );
            approved = true;
        }
    }
    Ok(approved)
}

fn awaits_approval(event: &LoopEvent) -> bool {
    matches!(
        event,
        LoopEvent::LoopUpdated {
            status: LoopStatus::AwaitingApproval,
            ..
        }
    )
}

/// Says on stderr what the loops report. A loop's lines name it as a person calls it
/// (`code "print-version"`), as its progress lines do; its status lines keep its id, which
/// `loopr cancel` and `loopr transcript` take.
#[derive(Default)]
struct Reporter {
    /// Each loop's label, from its progress lines (every loop reports progress first).
    labels: HashMap<String, String>,
}

impl Reporter {
    /// How lines name loop `loop_id`: its label once known, else its id.
    fn name<'a>(&'a self, loop_id: &'a str) -> &'a str {
        self.labels.get(loop_id).map_or(loop_id, String::as_str)
    }

    fn report(&mut self, event: &LoopEvent) {
        match event {
            LoopEvent::LoopUpdated {
                id,
                loop_type,
                status,
                error,
                ..
            } => match error {
                Some(error) => say!(
                    "loopr: {} {id} {}: {}",
                    loop_type.as_str(),
                    status.as_str(),
                    hinted(error)
                ),
                None => say!("loopr: {} {id} {}", loop_type.as_str(), status.as_str()),
            },
            LoopEvent::Progress {
                loop_id,
                label,
                message,
                ..
            } => {
                self.labels.insert(loop_id.to_string(), label.clone());
                say!("loopr: {label}: {message}");
            }
            LoopEvent::VerificationFinished {
                label,
                verification,
                ..
            } => say!("{}", verification_lines(label, verification)),
            // The warning as the tree paused said it, with the same next step.
            LoopEvent::TreeReady {
                ready: TreeReady::AtBudget { .. },
                ..
            } => {}
            LoopEvent::TreeReady { label, ready, .. } => {
                let step = ready.next_step().map(|step| clause(&step));
                say!("loopr: {label}: {ready}{}", step.unwrap_or_default());
            }
            LoopEvent::ApprovalRequested { request, .. } => say!(
                "loopr: {}: {} {} needs approval",
                self.name(&request.loop_id),
                request.kind.as_str(),
                request.subject
            ),
            LoopEvent::ApprovalClosed { .. } => {}
            LoopEvent::Notice {
                loop_id,
                level,
                message,
            } => say!(
                "loopr: {}: {}: {}",
                self.name(loop_id),
                level.as_str(),
                hinted(message)
            ),
            LoopEvent::ValidationFinished {
                loop_id,
                iteration,
                passed,
                command,
                output,
                ..
            } => {
                let verdict = if *passed { "passed" } else { "failed" };
                say!(
                    "loopr: {}: iteration {iteration}: `{command}` {verdict}",
                    self.name(loop_id.as_str())
                );
                if !passed {
                    say!("{output}");
                }
            }
            LoopEvent::ArtifactCreated {
                loop_id,
                kind,
                markdown_path,
                ..
            } => say!(
                "loopr: {}: {} written to {}",
                self.name(loop_id.as_str()),
                kind.as_str(),
                markdown_path.display()
            ),
            LoopEvent::AgentPlan {
                loop_id, entries, ..
            } => {
                let done = entries
                    .iter()
                    .filter(|entry| entry.status == "completed")
                    .count();
                say!(
                    "loopr: {}: the agent's plan: {done} of {} entries done",
                    self.name(loop_id.as_str()),
                    entries.len()
                );
            }
            LoopEvent::TasksUpdated {
                loop_id,
                markdown_path,
                done,
            } => {
                let done: Vec<String> = done.iter().map(ToString::to_string).collect();
                say!(
                    "loopr: {}: tasks {} done in {}",
                    self.name(loop_id.as_str()),
                    done.join(", "),
                    markdown_path.display()
                );
            }
        }
    }
}

/// The plan loop and everything below it, parents first.
fn tree_records(
    manager: &LoopManager,
    root: &Path,
    plan_id: &LoopId,
) -> anyhow::Result<Vec<LoopRecord>> {
    trees_of(manager, root, std::slice::from_ref(plan_id))
}

/// The top loops (plans, or loops started on their own) of the trees that hold an unfinished
/// loop of `records`, each once.
fn roots_of_unfinished(records: &[LoopRecord]) -> Vec<LoopId> {
    let parents: HashMap<&LoopId, &LoopId> = records
        .iter()
        .filter_map(|record| record.parent.as_ref().map(|parent| (&record.id, parent)))
        .collect();
    let mut roots: Vec<LoopId> = Vec::new();
    for record in records.iter().filter(|record| record.status.is_active()) {
        let mut top = &record.id;
        // Bounded by the number of loops: a broken store cannot make it climb forever.
        for _ in 0..records.len() {
            match parents.get(top) {
                Some(parent) => top = parent,
                None => break,
            }
        }
        if !roots.contains(top) {
            roots.push(top.clone());
        }
    }
    roots
}

/// The loops `tops` and everything below them, parents first.
fn trees_of(
    manager: &LoopManager,
    root: &Path,
    tops: &[LoopId],
) -> anyhow::Result<Vec<LoopRecord>> {
    let mut all = manager.status(root)?;
    all.reverse();
    let mut members: HashSet<LoopId> = tops.iter().cloned().collect();
    let mut tree = Vec::new();
    for record in all {
        let belongs = members.contains(&record.id)
            || record
                .parent
                .as_ref()
                .is_some_and(|parent| members.contains(parent));
        if belongs {
            members.insert(record.id.clone());
            tree.push(record);
        }
    }
    Ok(tree)
}

/// What a command whose reader closed its stdout exits with: 128 and SIGPIPE's number, as a
/// shell reports a command the closed pipe ended (and as `rg` exits).
pub const CLOSED_STDOUT_STATUS: u8 = 141;

/// Whether `err` comes from writing to a stdout whose reader is gone (`loopr status | head`):
/// the command ends quietly then, as other command-line tools do.
pub fn stdout_was_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether the project at `root` has Loopr state: its database under `loopr_home`, at the
/// place the host would open it. Reads nothing else and creates nothing.
pub fn has_state(loopr_home: &Path, root: &Path) -> anyhow::Result<bool> {
    let root = root
        .canonicalize()
        .with_context(|| format!("project root {}", root.display()))?;
    Ok(ProjectLayout::new(loopr_home, &root).database().is_file())
}

/// Prints the project's loops, oldest first, their cost priced by `prices` if given, else
/// by the prices each loop started with; a running loop whose host is gone is interrupted,
/// and stderr says what continues it. Reads the database only: unlike a host, it does not
/// resume anything.
pub fn print_status(
    loopr_home: &Path,
    root: &Path,
    prices: Option<&PriceTable>,
) -> anyhow::Result<()> {
    let root = root
        .canonicalize()
        .with_context(|| format!("project root {}", root.display()))?;
    let layout = ProjectLayout::new(loopr_home, &root);
    let database = layout.database();
    let (mut records, usage, runs) = if database.exists() {
        let db = LoopDb::open(&database)?;
        let records = db.list_as_seen(|owner| !host_is_alive(loopr_home, owner))?;
        (records, db.usage_by_loop()?, db.plan_runs()?)
    } else {
        (Vec::new(), HashMap::new(), Vec::new())
    };
    records.reverse();
    let coverage = crate::agent::coverage_by_loop(&layout, &records);
    write_table(
        &mut std::io::stdout().lock(),
        &records,
        &Spent {
            usage: &usage,
            prices,
        },
        &coverage,
    )?;
    // Where each run of a plan or spec stands, below the table.
    let mut stdout = std::io::stdout().lock();
    for run in &runs {
        let label = records
            .iter()
            .find(|record| record.id == run.target)
            .map_or_else(|| run.target.to_string(), LoopRecord::label);
        let line = format!("{label}: {}", run.shown());
        writeln!(stdout, "{}", crate::terminal_text::for_terminal(&line))?;
    }
    drop(stdout);
    let interrupted = records
        .iter()
        .filter(|record| record.status == LoopStatus::Interrupted)
        .count();
    if interrupted > 0 {
        say!(
            "loopr: {interrupted} loop(s) interrupted: the host running them exited; `loopr \
             resume` continues them, `loopr cancel <id>` ends one"
        );
    }
    Ok(())
}

/// Prints loop `id`'s stored transcript.
pub fn print_transcript(loopr_home: &Path, root: &Path, id: &str) -> anyhow::Result<()> {
    let root = root
        .canonicalize()
        .with_context(|| format!("project root {}", root.display()))?;
    let layout = ProjectLayout::new(loopr_home, &root);
    let missing = || {
        anyhow::anyhow!(
            "no loop {id} in {}; `loopr status` lists the project's loops",
            root.display()
        )
    };
    let database = layout.database();
    if !database.exists() {
        return Err(missing());
    }
    let loop_id = LoopId::parse(id).ok_or_else(missing)?;
    let record = LoopDb::open(&database)?
        .get(&loop_id)?
        .ok_or_else(missing)?;
    let text = crate::agent::stored_transcript(&layout, &record)?;
    std::io::stdout()
        .lock()
        .write_all(crate::terminal_text::for_terminal(&text).as_bytes())?;
    Ok(())
}
