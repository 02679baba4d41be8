//! The SQLite loop database (`LoopDb`): the connection, the schema and its migrations, and
//! single-row reads and updates. Changes that reach beyond one loop live in `db/tree.rs`, the
//! budget's in `db/budget.rs`, which host owns a loop in `db/owners.rs`, runs of a plan or
//! spec in `db/plan_runs.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use super::records::{LoopId, LoopRecord, LoopStatus, LoopType, now_rfc3339};
use super::stored_settings::{secrets_removed, settings_without_secrets};
use crate::llm::Usage;
use crate::pricing::ModelUsage;

mod budget;
mod owners;
mod plan_runs;
mod tree;

pub use budget::{Held, Paused, TreeSpend, WentOn};
pub use plan_runs::{PlanRun, PlanRunState};
pub use tree::{CancelledTree, CodeLoopRefused, Refused, StatusChange};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("loop database {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("creating {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("loop database {path} holds an invalid row: {message}")]
    InvalidRow { path: PathBuf, message: String },
    #[error("no loop with id {0}")]
    UnknownLoop(String),
    #[error(
        "loop database {path} was written by a newer version of Loopr (schema {found}; this \
         one knows up to {supported}): update Loopr, or point LOOPR_HOME elsewhere; the \
         database is left as it is"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
}

/// The loop records of one project, in `loopr.db`. Several hosts (one per Neovim) may open the
/// same database; SQLite's WAL mode and busy timeout serialise their writes. Every change that
/// must not be seen half-done (a parent completing together with its children appearing) is
/// one transaction; those that reach beyond one loop are in `tree.rs`.
#[derive(Clone)]
pub struct LoopDb {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

const SCHEMA_VERSION: i64 = 8;

impl LoopDb {
    pub fn open(path: &Path) -> Result<LoopDb, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let sqlite_error = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let mut connection = Connection::open(path).map_err(sqlite_error)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(sqlite_error)?;
        use_write_ahead_log(&connection).map_err(sqlite_error)?;
        connection
            .pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite_error)?;
        match migrate(&mut connection).map_err(sqlite_error)? {
            Migrated::UpToDate => {}
            Migrated::Newer(found) => {
                return Err(StoreError::NewerSchema {
                    path: path.to_path_buf(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
        }
        Ok(LoopDb {
            path: path.to_path_buf(),
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    pub fn insert(&self, record: &LoopRecord, host_pid: u32) -> Result<(), StoreError> {
        self.with_connection(|connection| insert_row(connection, record, host_pid))
    }

    pub fn set_status(
        &self,
        id: &LoopId,
        status: LoopStatus,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                params![id.as_str(), status.as_str(), error, now_rfc3339()],
            )
        })?;
        self.require_changed(changed, id)
    }

    /// Replaces the `error` note of a loop that is still `status`; false (and nothing written)
    /// if its status changed meanwhile, for example because a retry started it again: a note
    /// about the earlier state must not overwrite the newer one.
    pub fn set_error_if_status(
        &self,
        id: &LoopId,
        status: LoopStatus,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET error = ?3, updated_at = ?4 WHERE id = ?1 AND status = ?2",
                params![id.as_str(), status.as_str(), error, now_rfc3339()],
            )
        })?;
        Ok(changed == 1)
    }

    /// Cancels a loop that no task runs (pending or awaiting approval); false if it is in any
    /// other state by now, for example because the scheduler just started it.
    pub fn cancel_idle(&self, id: &LoopId) -> Result<bool, StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET status = 'cancelled', updated_at = ?2
                 WHERE id = ?1 AND status IN ('pending', 'awaiting_approval')",
                params![id.as_str(), now_rfc3339()],
            )
        })?;
        Ok(changed == 1)
    }

    /// Moves a pending loop to running for this host, no longer held (its tree's budget
    /// allows it now); false if it was not pending (another host or a cancel got there first).
    pub fn claim(&self, id: &LoopId, host_pid: u32) -> Result<bool, StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET status = 'running', host_pid = ?2, updated_at = ?3,
                                  cancel_requested = 0, error = NULL
                 WHERE id = ?1 AND status = 'pending'",
                params![id.as_str(), host_pid, now_rfc3339()],
            )
        })?;
        Ok(changed == 1)
    }

    pub fn set_tokens(
        &self,
        id: &LoopId,
        tokens_in: u64,
        tokens_out: u64,
    ) -> Result<(), StoreError> {
        // Written every turn, and also in the loop's journal: this commit does not wait for
        // the disk (a power cut may lose the last counts, never the database's consistency,
        // which WAL keeps). Every other write still syncs.
        let changed =
            self.with_connection(|connection| {
                connection.pragma_update(None, "synchronous", "NORMAL")?;
                let changed = connection.execute(
                "UPDATE loops SET tokens_in = ?2, tokens_out = ?3, updated_at = ?4 WHERE id = ?1",
                params![id.as_str(), sql_count(tokens_in), sql_count(tokens_out), now_rfc3339()],
            );
                connection.pragma_update(None, "synchronous", "FULL")?;
                changed
            })?;
        self.require_changed(changed, id)
    }

    /// Records a turn's tokens: the loop's totals (`tokens_in` counts every kind of input)
    /// and what each model spent of every kind, added to what the loop spent before. One
    /// transaction, not waiting for the disk, like `set_tokens`.
    pub fn add_turn_usage(
        &self,
        id: &LoopId,
        tokens_in: u64,
        tokens_out: u64,
        spent: &[ModelUsage],
    ) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.pragma_update(None, "synchronous", "NORMAL")?;
            let written = add_turn_usage_in(connection, id, tokens_in, tokens_out, spent);
            connection.pragma_update(None, "synchronous", "FULL")?;
            written
        })?;
        self.require_changed(changed, id)
    }

    /// The tokens every loop spent, per model.
    pub fn usage_by_loop(&self) -> Result<HashMap<LoopId, Vec<ModelUsage>>, StoreError> {
        let rows = self.with_connection(|connection| {
            let mut statement = connection.prepare(
                "SELECT loop_id, model, input, output, cache_write, cache_read, estimated,
                     reported_usd_micros
                 FROM loop_usage ORDER BY loop_id, model",
            )?;
            statement
                .query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, model_usage(row, 1)?))
                })?
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mut by_loop: HashMap<LoopId, Vec<ModelUsage>> = HashMap::new();
        for (id, usage) in rows {
            if let Some(id) = LoopId::parse(&id) {
                by_loop.entry(id).or_default().push(usage);
            }
        }
        Ok(by_loop)
    }

    pub fn set_review_passes(&self, id: &LoopId, passes: u32) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET review_passes = ?2, updated_at = ?3 WHERE id = ?1",
                params![id.as_str(), passes, now_rfc3339()],
            )
        })?;
        self.require_changed(changed, id)
    }

    /// Records that iteration `iteration` holds the loop's artifact, and uses up the feedback
    /// that produced it.
    pub fn set_iteration(&self, id: &LoopId, iteration: u32) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET iteration = ?2, feedback = NULL, review_passes = 0, updated_at = ?3
                 WHERE id = ?1",
                params![id.as_str(), iteration, now_rfc3339()],
            )
        })?;
        self.require_changed(changed, id)
    }

    /// Whether a running loop should go on: it is still running and nobody (in any host)
    /// asked to cancel it or invalidated it meanwhile.
    pub fn still_wanted(&self, id: &LoopId) -> Result<bool, StoreError> {
        self.flag(
            "SELECT status = 'running' AND cancel_requested = 0 FROM loops WHERE id = ?1",
            id,
        )
    }

    /// Whether a cancel was asked of the loop while it ran.
    pub fn cancel_requested(&self, id: &LoopId) -> Result<bool, StoreError> {
        self.flag("SELECT cancel_requested FROM loops WHERE id = ?1", id)
    }

    /// A yes-or-no column of loop `id`; no such loop reads as no.
    fn flag(&self, sql: &str, id: &LoopId) -> Result<bool, StoreError> {
        let flag = self.with_connection(|connection| {
            connection
                .query_row(sql, params![id.as_str()], |row| row.get::<_, bool>(0))
                .optional()
        })?;
        Ok(flag.unwrap_or(false))
    }

    /// Uses up the user's feedback of a loop that took it into its run.
    pub fn clear_feedback(&self, id: &LoopId) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET feedback = NULL, updated_at = ?2 WHERE id = ?1",
                params![id.as_str(), now_rfc3339()],
            )
        })?;
        self.require_changed(changed, id)
    }

    pub fn get(&self, id: &LoopId) -> Result<Option<LoopRecord>, StoreError> {
        let row = self.with_connection(|connection| {
            connection
                .query_row(
                    &format!("{SELECT_RECORD} WHERE id = ?1"),
                    params![id.as_str()],
                    RawRecord::from_row,
                )
                .optional()
        })?;
        row.map(|raw| raw.into_record(&self.path)).transpose()
    }

    /// Every loop, newest first.
    pub fn list(&self) -> Result<Vec<LoopRecord>, StoreError> {
        self.query(
            &format!("{SELECT_RECORD} ORDER BY created_at DESC, id DESC"),
            &[],
        )
    }

    /// Direct children of `id`, in creation order.
    pub fn children(&self, id: &LoopId) -> Result<Vec<LoopRecord>, StoreError> {
        self.query(
            &format!("{SELECT_RECORD} WHERE parent = ?1 ORDER BY created_at, rowid"),
            &[id.as_str()],
        )
    }

    /// Pending loops owned by `host_pid`, oldest first.
    pub fn pending_for_host(&self, host_pid: u32) -> Result<Vec<LoopRecord>, StoreError> {
        self.query(
            &format!("{SELECT_RECORD} WHERE status = 'pending' AND host_pid = ?1 ORDER BY created_at, rowid"),
            &[&host_pid.to_string()],
        )
    }

    fn query(&self, sql: &str, arguments: &[&str]) -> Result<Vec<LoopRecord>, StoreError> {
        let rows = self.with_connection(|connection| {
            let mut statement = connection.prepare(sql)?;
            statement
                .query_map(
                    rusqlite::params_from_iter(arguments.iter()),
                    RawRecord::from_row,
                )?
                .collect::<Result<Vec<_>, _>>()
        })?;
        rows.into_iter()
            .map(|raw| raw.into_record(&self.path))
            .collect()
    }

    fn require_changed(&self, changed: usize, id: &LoopId) -> Result<(), StoreError> {
        if changed == 0 {
            Err(StoreError::UnknownLoop(id.to_string()))
        } else {
            Ok(())
        }
    }

    fn with_connection<T>(
        &self,
        operation: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let connection = self.lock();
        operation(&connection).map_err(|source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    fn with_transaction<T>(
        &self,
        operation: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut connection = self.lock();
        let run = |connection: &mut Connection| {
            let transaction =
                connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let value = operation(&transaction)?;
            transaction.commit()?;
            Ok(value)
        };
        run(&mut connection).map_err(|source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (statements and
        // transactions are atomic), so the connection stays usable after poisoning.
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A bad row met inside a transaction aborts it like any SQLite error would.
fn store_to_sqlite(err: StoreError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(err.to_string())))
}

/// Every loop row is written here: its settings go in without secrets.
fn insert_row(connection: &Connection, record: &LoopRecord, host_pid: u32) -> rusqlite::Result<()> {
    let depends_on = serde_json::to_string(&record.depends_on).unwrap_or_else(|_| "[]".to_owned());
    connection.execute(
        "INSERT INTO loops (id, loop_type, parent, status, iteration, tokens_in, tokens_out,
                            error, task, created_at, updated_at, host_pid, name, triggered_by,
                            depends_on, review_passes, feedback, settings)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        params![
            record.id.as_str(),
            record.loop_type.as_str(),
            record.parent.as_ref().map(LoopId::as_str),
            record.status.as_str(),
            record.iteration,
            sql_count(record.tokens_in),
            sql_count(record.tokens_out),
            record.error,
            record.task,
            record.created_at,
            record.updated_at,
            host_pid,
            record.name,
            record.triggered_by,
            depends_on,
            record.review_passes,
            record.feedback,
            settings_without_secrets(&record.settings),
        ],
    )?;
    Ok(())
}

fn add_turn_usage_in(
    connection: &Connection,
    id: &LoopId,
    tokens_in: u64,
    tokens_out: u64,
    spent: &[ModelUsage],
) -> rusqlite::Result<usize> {
    let transaction = connection.unchecked_transaction()?;
    let changed = transaction.execute(
        "UPDATE loops SET tokens_in = ?2, tokens_out = ?3, updated_at = ?4 WHERE id = ?1",
        params![
            id.as_str(),
            sql_count(tokens_in),
            sql_count(tokens_out),
            now_rfc3339()
        ],
    )?;
    if changed == 1 {
        for entry in spent {
            let usage = &entry.usage;
            transaction.execute(
                "INSERT INTO loop_usage
                     (loop_id, model, input, output, cache_write, cache_read, estimated,
                      reported_usd_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (loop_id, model) DO UPDATE SET
                     input = input + excluded.input,
                     output = output + excluded.output,
                     cache_write = cache_write + excluded.cache_write,
                     cache_read = cache_read + excluded.cache_read,
                     estimated = MAX(estimated, excluded.estimated),
                     reported_usd_micros = reported_usd_micros + excluded.reported_usd_micros",
                params![
                    id.as_str(),
                    entry.model,
                    sql_count(usage.input_tokens),
                    sql_count(usage.output_tokens),
                    sql_count(usage.cache_write_tokens),
                    sql_count(usage.cache_read_tokens),
                    usage.estimated,
                    sql_count(entry.reported_usd_micros),
                ],
            )?;
        }
    }
    transaction.commit()?;
    Ok(changed)
}

/// A `ModelUsage` from the row's columns from `first`: model, input, output, cache write,
/// cache read, estimated, reported cost.
fn model_usage(row: &Row<'_>, first: usize) -> rusqlite::Result<ModelUsage> {
    let count = |index: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(row.get::<_, i64>(first + index)?).unwrap_or_default())
    };
    Ok(ModelUsage {
        model: row.get(first)?,
        usage: Usage {
            input_tokens: count(1)?,
            output_tokens: count(2)?,
            cache_write_tokens: count(3)?,
            cache_read_tokens: count(4)?,
            estimated: row.get::<_, i64>(first + 5)? != 0,
        },
        reported_usd_micros: count(6)?,
    })
}

/// SQLite integers are signed; token counts never get near the limit, but saturate rather
/// than wrap if they ever did.
fn sql_count(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

const SELECT_RECORD: &str =
    "SELECT id, loop_type, parent, status, iteration, tokens_in, tokens_out,
                                    error, task, created_at, updated_at, name, triggered_by,
                                    depends_on, review_passes, feedback, settings FROM loops";

struct RawRecord {
    id: String,
    loop_type: String,
    parent: Option<String>,
    status: String,
    iteration: u32,
    tokens_in: i64,
    tokens_out: i64,
    error: Option<String>,
    task: String,
    created_at: String,
    updated_at: String,
    name: Option<String>,
    triggered_by: Option<String>,
    depends_on: String,
    review_passes: u32,
    feedback: Option<String>,
    settings: String,
}

impl RawRecord {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<RawRecord> {
        Ok(RawRecord {
            id: row.get(0)?,
            loop_type: row.get(1)?,
            parent: row.get(2)?,
            status: row.get(3)?,
            iteration: row.get(4)?,
            tokens_in: row.get(5)?,
            tokens_out: row.get(6)?,
            error: row.get(7)?,
            task: row.get(8)?,
            created_at: row.get(9)?,
            updated_at: row.get(10)?,
            name: row.get(11)?,
            triggered_by: row.get(12)?,
            depends_on: row.get(13)?,
            review_passes: row.get(14)?,
            feedback: row.get(15)?,
            settings: row.get(16)?,
        })
    }

    fn into_record(self, path: &Path) -> Result<LoopRecord, StoreError> {
        let invalid = |message: String| StoreError::InvalidRow {
            path: path.to_path_buf(),
            message,
        };
        let id = LoopId::parse(&self.id).ok_or_else(|| invalid(format!("bad id {:?}", self.id)))?;
        let parent = match self.parent {
            Some(parent) => Some(
                LoopId::parse(&parent).ok_or_else(|| invalid(format!("bad parent {parent:?}")))?,
            ),
            None => None,
        };
        let depends_on: Vec<String> = serde_json::from_str(&self.depends_on)
            .map_err(|err| invalid(format!("bad depends_on {:?}: {err}", self.depends_on)))?;
        Ok(LoopRecord {
            id,
            loop_type: self.loop_type.parse::<LoopType>().map_err(invalid)?,
            parent,
            status: self.status.parse::<LoopStatus>().map_err(invalid)?,
            iteration: self.iteration,
            tokens_in: u64::try_from(self.tokens_in).unwrap_or_default(),
            tokens_out: u64::try_from(self.tokens_out).unwrap_or_default(),
            error: self.error,
            task: self.task,
            name: self.name,
            triggered_by: self.triggered_by,
            depends_on,
            review_passes: self.review_passes,
            feedback: self.feedback,
            settings: self.settings,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// Puts the database in WAL mode, which lasts in the file. Switching takes a lock that SQLite
/// does not wait for (the busy handler is not called), so hosts that open a new database at
/// the same moment retry briefly instead of failing.
fn use_write_ahead_log(connection: &Connection) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut backoff = Duration::from_millis(1);
    loop {
        let mode: String = connection.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
        if mode.eq_ignore_ascii_case("wal") {
            return Ok(());
        }
        match connection.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => return Ok(()),
            Err(err)
                if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
            Err(err) => return Err(err),
        }
    }
}

/// What `migrate` found.
enum Migrated {
    /// The database has (now) this host's schema.
    UpToDate,
    /// A newer Loopr's schema, of this version: this host must not read or write it, since
    /// what it does not know of (a new column, a new status) it would lose or misread.
    Newer(i64),
}

fn migrate(connection: &mut Connection) -> rusqlite::Result<Migrated> {
    let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Ok(Migrated::Newer(version));
    }
    if version == SCHEMA_VERSION {
        return Ok(Migrated::UpToDate);
    }
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    // Another host may have migrated between the read above and taking the lock: only the
    // version read under the lock says what is left to do.
    let version: i64 = transaction.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Ok(Migrated::Newer(version));
    }
    if version == SCHEMA_VERSION {
        return Ok(Migrated::UpToDate);
    }
    if version < 1 {
        transaction.execute_batch(
            "CREATE TABLE IF NOT EXISTS loops (
                 id TEXT PRIMARY KEY,
                 loop_type TEXT NOT NULL,
                 parent TEXT REFERENCES loops(id),
                 status TEXT NOT NULL,
                 iteration INTEGER NOT NULL DEFAULT 0,
                 tokens_in INTEGER NOT NULL DEFAULT 0,
                 tokens_out INTEGER NOT NULL DEFAULT 0,
                 error TEXT,
                 task TEXT NOT NULL,
                 created_at TEXT NOT NULL,
                 updated_at TEXT NOT NULL,
                 host_pid INTEGER NOT NULL
             );
             CREATE INDEX IF NOT EXISTS loops_by_status ON loops(status);",
        )?;
    }
    if version < 2 {
        transaction.execute_batch(
            "ALTER TABLE loops ADD COLUMN name TEXT;
             ALTER TABLE loops ADD COLUMN triggered_by TEXT;
             ALTER TABLE loops ADD COLUMN depends_on TEXT NOT NULL DEFAULT '[]';
             ALTER TABLE loops ADD COLUMN review_passes INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE loops ADD COLUMN feedback TEXT;
             ALTER TABLE loops ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
             CREATE INDEX IF NOT EXISTS loops_by_parent ON loops(parent);",
        )?;
    }
    if version < 3 {
        // A cancel asked of a running loop, recorded where every host sees it.
        transaction.execute_batch(
            "ALTER TABLE loops ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    if version < 4 {
        // Tokens per loop and model, the four kinds apart, so a cost can be priced per model;
        // and, per plan tree, what it had spent when the user last let it go past its budget.
        // Counts an earlier version kept only in total move over under an empty model name.
        transaction.execute_batch(
            "CREATE TABLE IF NOT EXISTS loop_usage (
                 loop_id TEXT NOT NULL REFERENCES loops(id),
                 model TEXT NOT NULL,
                 input INTEGER NOT NULL DEFAULT 0,
                 output INTEGER NOT NULL DEFAULT 0,
                 cache_write INTEGER NOT NULL DEFAULT 0,
                 cache_read INTEGER NOT NULL DEFAULT 0,
                 PRIMARY KEY (loop_id, model)
             );
             INSERT OR IGNORE INTO loop_usage (loop_id, model, input, output)
                 SELECT id, '', tokens_in, tokens_out FROM loops
                 WHERE tokens_in > 0 OR tokens_out > 0;
             CREATE TABLE IF NOT EXISTS budget_grants (
                 root_id TEXT PRIMARY KEY REFERENCES loops(id),
                 tokens INTEGER NOT NULL,
                 usd REAL NOT NULL,
                 granted_at TEXT NOT NULL
             );",
        )?;
    }
    let mut secrets_removed_from = 0;
    if version < 5 {
        // Earlier versions kept every setting with each loop, MCP servers' `env` values
        // (tokens) included: only their names stay.
        secrets_removed_from = remove_stored_secrets(&transaction)?;
    }
    if version < 6 {
        // Whether a loop's tokens of a model are Loopr's estimate (the server reported none),
        // in part or whole.
        transaction.execute_batch(
            "ALTER TABLE loop_usage ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    if version < 7 {
        // Runs of a plan or spec: every phase in order, surviving the host.
        transaction.execute_batch(plan_runs::CREATE_PLAN_RUNS)?;
    }
    if version < 8 && !has_column(&transaction, "loop_usage", "reported_usd_micros")? {
        // What a coding agent reported its tokens cost (millionths of a dollar), counted
        // against a dollar budget in place of a price.
        transaction.execute_batch(
            "ALTER TABLE loop_usage
                 ADD COLUMN reported_usd_micros INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    transaction.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    transaction.commit()?;
    if secrets_removed_from > 0 {
        forget_overwritten_pages(connection)?;
    }
    Ok(Migrated::UpToDate)
}

/// Whether `table` has `column` (a database an earlier version left may have it already).
fn has_column(transaction: &Transaction, table: &str, column: &str) -> rusqlite::Result<bool> {
    let mut statement = transaction.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = statement
        .query_map([], |row| row.get::<_, String>(1))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names.iter().any(|name| name == column))
}

/// Blanks the secrets in every loop's stored settings (overwriting what they held, with
/// `secure_delete`); returns how many loops held some.
fn remove_stored_secrets(transaction: &Transaction) -> rusqlite::Result<usize> {
    transaction.pragma_update(None, "secure_delete", true)?;
    let mut select = transaction.prepare("SELECT id, settings FROM loops")?;
    let stored: Vec<(String, String)> = select
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut changed = 0;
    for (id, settings) in stored {
        if let Some(settings) = secrets_removed(&settings) {
            transaction.execute(
                "UPDATE loops SET settings = ?2 WHERE id = ?1",
                params![id, settings],
            )?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// After rows were overwritten: their old content may still be in the write-ahead log and in
/// the database file's old pages until a checkpoint copies the new pages over them. One that
/// truncates the log leaves neither (another host reading at this moment may keep it from
/// finishing; its next checkpoint does).
fn forget_overwritten_pages(connection: &Connection) -> rusqlite::Result<()> {
    connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn record(id: &str, created_at: &str) -> LoopRecord {
        LoopRecord {
            id: LoopId::parse(id).expect("id"),
            status: LoopStatus::Running,
            created_at: created_at.to_owned(),
            updated_at: created_at.to_owned(),
            ..LoopRecord::new_pending(LoopType::Plan, "Add a flag", "{}".to_owned())
        }
    }

    pub(super) fn child(id: &str, parent: &str, name: &str) -> LoopRecord {
        LoopRecord {
            parent: LoopId::parse(parent),
            name: Some(name.to_owned()),
            depends_on: vec!["other".to_owned()],
            triggered_by: Some("iterations/001/artifacts/plan.json".to_owned()),
            status: LoopStatus::Pending,
            ..record(id, "2026-01-03T00:00:00Z")
        }
    }

    pub(super) fn open(dir: &tempfile::TempDir) -> LoopDb {
        LoopDb::open(&dir.path().join("p/loopr.db")).expect("open")
    }

    #[test]
    fn records_survive_reopening_and_list_newest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = open(&dir);
            db.insert(&record("a-1", "2026-01-01T00:00:00Z"), 1)
                .expect("insert");
            db.insert(&record("b-2", "2026-01-02T00:00:00Z"), 1)
                .expect("insert");
            let id = LoopId::parse("a-1").expect("id");
            db.set_tokens(&id, 120, 45).expect("tokens");
            // Only the token counts skip waiting for the disk; everything after syncs again.
            let synchronous: i64 = db
                .with_connection(|connection| {
                    connection.pragma_query_value(None, "synchronous", |row| row.get(0))
                })
                .expect("pragma");
            assert_eq!(synchronous, 2, "FULL");
            db.set_status(&id, LoopStatus::Failed, Some("turn limit"))
                .expect("status");
        }
        let records = open(&dir).list().expect("list");
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].id.as_str(), "b-2");
        assert_eq!(records[1].status, LoopStatus::Failed);
        assert_eq!(records[1].error.as_deref(), Some("turn limit"));
        assert_eq!((records[1].tokens_in, records[1].tokens_out), (120, 45));
    }

    #[test]
    fn a_version_one_database_is_migrated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loopr.db");
        {
            let connection = Connection::open(&path).expect("open");
            connection
                .execute_batch(
                    "CREATE TABLE loops (id TEXT PRIMARY KEY, loop_type TEXT NOT NULL, parent TEXT,
                         status TEXT NOT NULL, iteration INTEGER NOT NULL DEFAULT 0,
                         tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0,
                         error TEXT, task TEXT NOT NULL, created_at TEXT NOT NULL,
                         updated_at TEXT NOT NULL, host_pid INTEGER NOT NULL);
                     INSERT INTO loops VALUES ('old-1', 'plan', NULL, 'complete', 1, 5, 6, NULL,
                         'Old task', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 9);
                     PRAGMA user_version = 1;",
                )
                .expect("v1 schema");
        }
        let db = LoopDb::open(&path).expect("migrate");
        let old = db.list().expect("list");
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].task, "Old task");
        assert!(old[0].depends_on.is_empty());
    }

    /// A database at `path` with the loops `old-1` (120 tokens in, 45 out) and `old-2`, then
    /// made by `earlier` what an earlier Loopr left.
    fn earlier_database(path: &Path, earlier: impl FnOnce(&Connection) -> rusqlite::Result<()>) {
        let db = LoopDb::open(path).expect("open");
        db.insert(&record("old-1", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        db.insert(&record("old-2", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        db.set_tokens(&LoopId::parse("old-1").expect("id"), 120, 45)
            .expect("tokens");
        db.with_connection(earlier)
            .expect("as an earlier Loopr left it");
    }

    #[test]
    fn a_version_three_database_keeps_its_token_counts_under_an_unrecorded_model() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loopr.db");
        earlier_database(&path, |connection| {
            connection.execute_batch(
                "DROP TABLE loop_usage; DROP TABLE budget_grants; PRAGMA user_version = 3;",
            )
        });
        let db = LoopDb::open(&path).expect("migrate");
        let usage = db.usage_by_loop().expect("usage");
        let old = LoopId::parse("old-1").expect("id");
        assert_eq!(
            usage.get(&old),
            Some(&vec![ModelUsage {
                model: String::new(),
                usage: Usage {
                    input_tokens: 120,
                    output_tokens: 45,
                    ..Usage::default()
                },
                reported_usd_micros: 0,
            }])
        );
        assert_eq!(usage.len(), 1, "a loop that spent nothing has no row");
        // New turns add per model, beside what was moved over.
        let spent = [ModelUsage {
            model: "claude-haiku-4-5".to_owned(),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 2,
                cache_write_tokens: 3,
                cache_read_tokens: 4,
                ..Usage::default()
            },
            reported_usd_micros: 0,
        }];
        db.add_turn_usage(&old, 137, 47, &spent).expect("turn");
        db.add_turn_usage(&old, 154, 49, &spent).expect("turn");
        let usage = db.usage_by_loop().expect("usage");
        assert_eq!(usage[&old].len(), 2);
        assert_eq!(usage[&old][1].usage.cache_read_tokens, 8, "added up");
        let record = db.get(&old).expect("get").expect("stored");
        assert_eq!((record.tokens_in, record.tokens_out), (154, 49));
    }

    #[test]
    fn tokens_once_estimated_stay_marked_as_estimates_in_the_loop_and_its_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let id = LoopId::parse("llama-1").expect("id");
        db.insert(&record("llama-1", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        let turn = |estimated| {
            [ModelUsage {
                model: "gemma3".to_owned(),
                usage: Usage {
                    input_tokens: 1_000,
                    output_tokens: 50,
                    estimated,
                    ..Usage::default()
                },
                reported_usd_micros: 0,
            }]
        };
        db.add_turn_usage(&id, 1_000, 50, &turn(false))
            .expect("a counted turn");
        assert!(!db.usage_by_loop().expect("usage")[&id][0].usage.estimated);
        db.add_turn_usage(&id, 2_000, 100, &turn(true))
            .expect("an estimated turn");
        db.add_turn_usage(&id, 3_000, 150, &turn(false))
            .expect("a counted turn again");
        let usage = db.usage_by_loop().expect("usage");
        assert_eq!(usage[&id][0].usage.input_tokens, 3_000);
        assert!(
            usage[&id][0].usage.estimated,
            "a sum with an estimate in it"
        );
        let tree = db.tree_spend(&id).expect("tree");
        assert!(tree.usage[0].usage.estimated);
    }

    /// Whether any file of the database (the main file, its write-ahead log) holds `needle`.
    fn database_files_hold(path: &Path, needle: &str) -> bool {
        ["", "-wal"].iter().any(|suffix| {
            std::fs::read(format!("{}{suffix}", path.display())).is_ok_and(|bytes| {
                bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
    }

    const TOKEN: &str = "ghp-never-stored-4e1a";

    fn settings_with_token() -> String {
        format!(
            r#"{{"max_turns":9,"mcp":{{"servers":{{"github":{{"command":"gh-mcp","env":{{"GITHUB_TOKEN":"{TOKEN}"}}}}}}}}}}"#
        )
    }

    #[test]
    fn a_loop_is_stored_without_the_secrets_of_its_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let mut parent = record("with-token", "2026-01-01T00:00:00Z");
        parent.settings = settings_with_token();
        db.insert(&parent, 1).expect("insert");
        let stored = db.get(&parent.id).expect("get").expect("stored");
        assert!(!stored.settings.contains(TOKEN), "{}", stored.settings);
        assert!(
            stored.settings.contains(r#""GITHUB_TOKEN":"""#),
            "{}",
            stored.settings
        );
        drop(db);
        assert!(!database_files_hold(&dir.path().join("p/loopr.db"), TOKEN));
    }

    #[test]
    fn a_version_four_database_loses_the_secrets_it_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loopr.db");
        // The token stored with the settings.
        earlier_database(&path, |connection| {
            connection.execute(
                "UPDATE loops SET settings = ?1 WHERE id = 'old-1'",
                params![settings_with_token()],
            )?;
            connection.execute_batch(
                "ALTER TABLE loop_usage DROP COLUMN estimated; PRAGMA user_version = 4;",
            )
        });
        assert!(database_files_hold(&path, TOKEN), "the old record holds it");
        let db = LoopDb::open(&path).expect("migrate");
        let old = db
            .get(&LoopId::parse("old-1").expect("id"))
            .expect("get")
            .expect("kept");
        let settings: serde_json::Value = serde_json::from_str(&old.settings).expect("json");
        assert_eq!(settings["max_turns"], 9, "the rest is kept");
        assert_eq!(
            settings["mcp"]["servers"]["github"]["env"],
            serde_json::json!({"GITHUB_TOKEN": ""}),
            "the name is kept"
        );
        assert!(
            !database_files_hold(&path, TOKEN),
            "nothing of the token is left in the database's files, even while open"
        );
        drop(db);
        assert!(!database_files_hold(&path, TOKEN));
    }

    #[test]
    fn a_database_of_a_newer_loopr_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loopr.db");
        let newer = SCHEMA_VERSION + 1;
        {
            let db = LoopDb::open(&path).expect("open");
            db.insert(&record("new-1", "2026-01-01T00:00:00Z"), 1)
                .expect("insert");
            db.with_connection(|connection| connection.pragma_update(None, "user_version", newer))
                .expect("as a newer Loopr leaves it");
        }
        let refused = match LoopDb::open(&path) {
            Ok(_) => panic!("an older host opened a newer database"),
            Err(err) => err,
        };
        let message = refused.to_string();
        assert!(
            matches!(refused, StoreError::NewerSchema { found, .. } if found == newer),
            "{message}"
        );
        assert!(
            message.contains("newer version of Loopr") && message.contains("update"),
            "{message}"
        );
        let connection = Connection::open(&path).expect("reopen");
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("version");
        assert_eq!(version, newer, "left as the newer Loopr wrote it");
    }

    #[test]
    fn hosts_opening_a_new_project_at_once_all_succeed() {
        // Every round is a fresh database that several hosts open at the same instant, as
        // Neovims started together in one project do.
        for round in 0..20 {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join(format!("p{round}/loopr.db"));
            let start = Arc::new(std::sync::Barrier::new(6));
            let openers: Vec<_> = (0..6)
                .map(|_| {
                    let path = path.clone();
                    let start = start.clone();
                    std::thread::spawn(move || {
                        start.wait();
                        LoopDb::open(&path).map(|_| ())
                    })
                })
                .collect();
            for opener in openers {
                let opened = opener.join().expect("thread");
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
        }
    }

    #[test]
    fn a_note_for_a_status_is_written_only_while_the_loop_still_has_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("a-1", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        let id = LoopId::parse("a-1").expect("id");
        db.set_status(&id, LoopStatus::Complete, None)
            .expect("status");
        assert!(
            db.set_error_if_status(
                &id,
                LoopStatus::Complete,
                Some("undone: 1 file(s) restored")
            )
            .expect("note")
        );
        let stored = db.get(&id).expect("get").expect("stored");
        assert_eq!(stored.status, LoopStatus::Complete);
        assert_eq!(stored.error.as_deref(), Some("undone: 1 file(s) restored"));

        // A retry starts the loop again while the note about its completed run is on its way.
        db.set_status(&id, LoopStatus::Running, None)
            .expect("status");
        assert!(
            !db.set_error_if_status(
                &id,
                LoopStatus::Complete,
                Some("undone: 2 file(s) restored")
            )
            .expect("note")
        );
        let stored = db.get(&id).expect("get").expect("stored");
        assert_eq!(stored.status, LoopStatus::Running, "the newer status stays");
        assert_eq!(stored.error, None, "and so does its note");
    }

    #[test]
    fn updating_an_unknown_loop_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let missing = LoopId::parse("nope").expect("id");
        assert!(matches!(
            db.set_status(&missing, LoopStatus::Complete, None),
            Err(StoreError::UnknownLoop(_))
        ));
    }
}
