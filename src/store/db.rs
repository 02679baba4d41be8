use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::records::{LoopId, LoopRecord, LoopStatus, LoopType, now_rfc3339};

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
}

/// The loop records of one project, in `loopr.db`. Several hosts (one per Neovim) may open the
/// same database; SQLite's WAL mode and busy timeout serialise their writes.
#[derive(Clone)]
pub struct LoopDb {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

const SCHEMA_VERSION: i64 = 1;

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
        let connection = Connection::open(path).map_err(sqlite_error)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(sqlite_error)?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(sqlite_error)?;
        connection
            .pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite_error)?;
        migrate(&connection).map_err(sqlite_error)?;
        Ok(LoopDb {
            path: path.to_path_buf(),
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    pub fn insert(&self, record: &LoopRecord, host_pid: u32) -> Result<(), StoreError> {
        self.with_connection(|connection| {
            connection.execute(
                "INSERT INTO loops (id, loop_type, parent, status, iteration, tokens_in, tokens_out,
                                    error, task, created_at, updated_at, host_pid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
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
                ],
            )
        })?;
        Ok(())
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

    pub fn set_progress(
        &self,
        id: &LoopId,
        iteration: u32,
        tokens_in: u64,
        tokens_out: u64,
    ) -> Result<(), StoreError> {
        let changed = self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET iteration = ?2, tokens_in = ?3, tokens_out = ?4, updated_at = ?5
                 WHERE id = ?1",
                params![
                    id.as_str(),
                    iteration,
                    sql_count(tokens_in),
                    sql_count(tokens_out),
                    now_rfc3339()
                ],
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
        let rows = self.with_connection(|connection| {
            let mut statement = connection.prepare(&format!(
                "{SELECT_RECORD} ORDER BY created_at DESC, id DESC"
            ))?;
            statement
                .query_map([], RawRecord::from_row)?
                .collect::<Result<Vec<_>, _>>()
        })?;
        rows.into_iter()
            .map(|raw| raw.into_record(&self.path))
            .collect()
    }

    /// Marks loops left pending or running by a host that no longer runs as interrupted, so
    /// `:LooprStatus` after a crash tells the truth. Returns the ids it changed.
    pub fn mark_orphans_interrupted(
        &self,
        host_is_alive: impl Fn(u32) -> bool,
    ) -> Result<Vec<LoopId>, StoreError> {
        let active: Vec<(String, u32)> = self.with_connection(|connection| {
            let mut statement = connection
                .prepare("SELECT id, host_pid FROM loops WHERE status IN ('pending', 'running')")?;
            statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mut interrupted = Vec::new();
        for (id, host_pid) in active {
            if host_is_alive(host_pid) {
                continue;
            }
            let Some(id) = LoopId::parse(&id) else {
                continue;
            };
            self.set_status(
                &id,
                LoopStatus::Interrupted,
                Some("the host running this loop exited before it finished"),
            )?;
            interrupted.push(id);
        }
        Ok(interrupted)
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

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (statements are
        // atomic), so the connection stays usable after poisoning.
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// SQLite integers are signed; token counts never get near the limit, but saturate rather
/// than wrap if they ever did.
fn sql_count(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

const SELECT_RECORD: &str =
    "SELECT id, loop_type, parent, status, iteration, tokens_in, tokens_out,
                                    error, task, created_at, updated_at FROM loops";

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
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

fn migrate(connection: &Connection) -> rusqlite::Result<()> {
    let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    connection.execute_batch(
        "BEGIN;
         CREATE TABLE IF NOT EXISTS loops (
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
         CREATE INDEX IF NOT EXISTS loops_by_status ON loops(status);
         PRAGMA user_version = 1;
         COMMIT;",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, created_at: &str) -> LoopRecord {
        LoopRecord {
            id: LoopId::parse(id).expect("id"),
            created_at: created_at.to_owned(),
            updated_at: created_at.to_owned(),
            ..LoopRecord::start(LoopType::Plan, None, "Add a flag")
        }
    }

    #[test]
    fn records_survive_reopening_and_list_newest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p/loopr.db");
        {
            let db = LoopDb::open(&path).expect("open");
            db.insert(&record("a-1", "2026-01-01T00:00:00Z"), 1)
                .expect("insert");
            db.insert(&record("b-2", "2026-01-02T00:00:00Z"), 1)
                .expect("insert");
            let id = LoopId::parse("a-1").expect("id");
            db.set_progress(&id, 1, 120, 45).expect("progress");
            db.set_status(&id, LoopStatus::Failed, Some("turn limit"))
                .expect("status");
        }
        let db = LoopDb::open(&path).expect("reopen");
        let records = db.list().expect("list");
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].id.as_str(), "b-2");
        assert_eq!(records[1].status, LoopStatus::Failed);
        assert_eq!(records[1].error.as_deref(), Some("turn limit"));
        assert_eq!((records[1].tokens_in, records[1].tokens_out), (120, 45));
    }

    #[test]
    fn orphaned_running_loops_become_interrupted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = LoopDb::open(&dir.path().join("loopr.db")).expect("open");
        db.insert(&record("dead-1", "2026-01-01T00:00:00Z"), 111)
            .expect("insert");
        db.insert(&record("live-1", "2026-01-01T00:00:00Z"), 222)
            .expect("insert");
        let changed = db.mark_orphans_interrupted(|pid| pid == 222).expect("mark");
        assert_eq!(changed, vec![LoopId::parse("dead-1").expect("id")]);
        let dead = db.get(&changed[0]).expect("get").expect("exists");
        assert_eq!(dead.status, LoopStatus::Interrupted);
    }

    #[test]
    fn updating_an_unknown_loop_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = LoopDb::open(&dir.path().join("loopr.db")).expect("open");
        let missing = LoopId::parse("nope").expect("id");
        assert!(matches!(
            db.set_status(&missing, LoopStatus::Complete, None),
            Err(StoreError::UnknownLoop(_))
        ));
    }
}
