//! Runs of a plan or a spec in the store (`plan_runs`): which tree runs, where it stands and
//! the code loop it last started, so a run survives its host like a loop does.

use rusqlite::{OptionalExtension, Row, params};

use super::{LoopDb, StoreError};
use crate::store::records::{LoopId, now_rfc3339};
use crate::store::stored_settings::settings_without_secrets;

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanRunState {
    /// It goes on as its phases are done.
    Running,
    /// A loop it needs ended without success; a retry of it lets the run go on.
    Stopped,
    /// Every phase is done.
    Done,
    /// The user stopped it.
    Cancelled,
}

impl PlanRunState {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanRunState::Running => "running",
            PlanRunState::Stopped => "stopped",
            PlanRunState::Done => "done",
            PlanRunState::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Option<PlanRunState> {
        [
            PlanRunState::Running,
            PlanRunState::Stopped,
            PlanRunState::Done,
            PlanRunState::Cancelled,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }

    /// Whether the run still moves when its loops do (running, or stopped until a retry).
    pub fn is_live(self) -> bool {
        matches!(self, PlanRunState::Running | PlanRunState::Stopped)
    }
}

/// One run of a plan or spec loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRun {
    /// The plan or spec loop it runs.
    pub target: LoopId,
    pub state: PlanRunState,
    /// The code loop it last started or waited for.
    pub code_loop: Option<LoopId>,
    /// Where it stands, in words (`phase 3 of 7 (parse): its code loop runs`).
    pub note: String,
    /// The settings its code loops start with (without secrets).
    pub settings: String,
}

impl PlanRun {
    /// The run as a status list shows it on its plan's or spec's row: `run: phase 3 of 7
    /// (parse): its code loop runs`, `run stopped at ...`, `run done: 7 of 7 phases done`.
    pub fn shown(&self) -> String {
        match self.state {
            PlanRunState::Running => format!("run: {}", self.note),
            PlanRunState::Done => format!("run done: {}", self.note),
            PlanRunState::Stopped | PlanRunState::Cancelled => format!("run {}", self.note),
        }
    }
}

impl LoopDb {
    /// Starts (or starts again) the run of `target`, with the settings its code loops get.
    pub fn start_plan_run(&self, target: &LoopId, settings: &str) -> Result<(), StoreError> {
        self.with_connection(|connection| {
            connection.execute(
                "INSERT INTO plan_runs (target_id, state, code_loop, note, settings, updated_at)
                 VALUES (?1, 'running', NULL, '', ?2, ?3)
                 ON CONFLICT (target_id) DO UPDATE SET state = 'running', code_loop = NULL,
                     note = '', settings = excluded.settings, updated_at = excluded.updated_at",
                params![
                    target.as_str(),
                    settings_without_secrets(settings),
                    now_rfc3339()
                ],
            )
        })?;
        Ok(())
    }

    /// Every run the project had, newest first.
    pub fn plan_runs(&self) -> Result<Vec<PlanRun>, StoreError> {
        let rows = self.with_connection(|connection| {
            let mut statement = connection.prepare(
                "SELECT target_id, state, code_loop, note, settings FROM plan_runs
                 ORDER BY updated_at DESC",
            )?;
            statement
                .query_map([], raw_run)?
                .collect::<Result<Vec<_>, _>>()
        })?;
        rows.into_iter().map(|raw| self.run_from(raw)).collect()
    }

    /// The run of `target`, if it has one.
    pub fn plan_run(&self, target: &LoopId) -> Result<Option<PlanRun>, StoreError> {
        let raw = self.with_connection(|connection| {
            connection
                .query_row(
                    "SELECT target_id, state, code_loop, note, settings FROM plan_runs
                     WHERE target_id = ?1",
                    params![target.as_str()],
                    raw_run,
                )
                .optional()
        })?;
        raw.map(|raw| self.run_from(raw)).transpose()
    }

    /// Records where the run of `target` stands.
    pub fn update_plan_run(
        &self,
        target: &LoopId,
        state: PlanRunState,
        code_loop: Option<&LoopId>,
        note: &str,
    ) -> Result<(), StoreError> {
        self.with_connection(|connection| {
            connection.execute(
                "UPDATE plan_runs SET state = ?2, code_loop = ?3, note = ?4, updated_at = ?5
                 WHERE target_id = ?1",
                params![
                    target.as_str(),
                    state.as_str(),
                    code_loop.map(LoopId::as_str),
                    note,
                    now_rfc3339()
                ],
            )
        })?;
        Ok(())
    }

    fn run_from(&self, raw: RawRun) -> Result<PlanRun, StoreError> {
        let invalid = |message: String| StoreError::InvalidRow {
            path: self.path.clone(),
            message,
        };
        let (target, state, code_loop, note, settings) = raw;
        Ok(PlanRun {
            target: LoopId::parse(&target)
                .ok_or_else(|| invalid(format!("bad run target {target:?}")))?,
            state: PlanRunState::parse(&state)
                .ok_or_else(|| invalid(format!("bad run state {state:?}")))?,
            code_loop: code_loop.as_deref().and_then(LoopId::parse),
            note,
            settings,
        })
    }
}

type RawRun = (String, String, Option<String>, String, String);

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
    ))
}

/// The table, created by the schema's version 7.
pub(super) const CREATE_PLAN_RUNS: &str = "CREATE TABLE IF NOT EXISTS plan_runs (
     target_id TEXT PRIMARY KEY REFERENCES loops(id),
     state TEXT NOT NULL,
     code_loop TEXT,
     note TEXT NOT NULL DEFAULT '',
     settings TEXT NOT NULL DEFAULT '{}',
     updated_at TEXT NOT NULL
 );";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::tests::{open, record};

    #[test]
    fn a_run_is_recorded_updated_and_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let plan = record("p-1", "2026-01-01T00:00:00Z");
        db.insert(&plan, 1).expect("insert");
        db.start_plan_run(&plan.id, "{}").expect("start");
        let code = LoopId::parse("c-2").expect("id");
        db.update_plan_run(&plan.id, PlanRunState::Stopped, Some(&code), "stopped")
            .expect("update");
        let run = db.plan_run(&plan.id).expect("read").expect("a run");
        assert_eq!(run.state, PlanRunState::Stopped);
        assert_eq!(run.code_loop, Some(code));
        db.start_plan_run(&plan.id, "{}").expect("again");
        let runs = db.plan_runs().expect("runs");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].state, PlanRunState::Running);
        assert_eq!(runs[0].code_loop, None);
    }
}
