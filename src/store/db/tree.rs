//! What changes to one loop mean for the loops around it (its children, descendants and the
//! siblings waiting for it), each as one transaction that reads what it changes: another host
//! writing the same database between the read and the write cannot make the change half-true.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{LoopDb, RawRecord, SELECT_RECORD, StoreError, insert_row, store_to_sqlite};
use crate::store::records::{LoopId, LoopRecord, LoopStatus, LoopType, now_rfc3339};
use crate::store::rules::{
    approvable, awaited, dependency_ended_note, retried_with, retryable, revisable, siblings,
};

/// Why the store refused to change a loop: the state it found, read in the same transaction
/// as the refused change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub status: LoopStatus,
    /// A cancel was asked of the loop while it ran.
    pub cancel_requested: bool,
}

/// A loop whose status a tree operation changed, for the shells to hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusChange {
    pub id: LoopId,
    pub loop_type: LoopType,
    pub status: LoopStatus,
    pub error: Option<String>,
}

impl StatusChange {
    pub(super) fn of(
        record: &LoopRecord,
        status: LoopStatus,
        error: Option<String>,
    ) -> StatusChange {
        StatusChange {
            id: record.id.clone(),
            loop_type: record.loop_type,
            status,
            error,
        }
    }
}

/// What `cancel_tree` did.
#[derive(Debug, Default)]
pub struct CancelledTree {
    /// In order: each loop it cancelled (it was pending, awaiting approval, paused, or
    /// running for a host that is gone), followed by the loops that waited for it and failed
    /// with it.
    pub changes: Vec<StatusChange>,
    /// Running loops of live hosts, for their host to stop (their supervisor records the end).
    pub running: Vec<LoopId>,
}

impl CancelledTree {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.running.is_empty()
    }
}

/// Why `insert_code_loop` inserted nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeLoopRefused {
    /// The phase is no longer as the caller chose it; its state now.
    PhaseChanged(Refused),
    /// The phase already has this active code loop (or interrupted one: its host is gone).
    Busy { id: LoopId, status: LoopStatus },
}

/// The outcome of a transaction that first checks the loop it changes.
pub(super) enum Checked<T, R = Refused> {
    Done(T),
    Refused(R),
    Unknown,
}

impl LoopDb {
    /// Sets the status of a running or approval-waiting loop and inserts its children,
    /// atomically: after a crash either both happened or neither did, so children are never
    /// spawned twice. Refused if the loop is in any other state by now (a revision or cancel
    /// came first) or a cancel was asked of it while it finished.
    pub fn finish_with_children(
        &self,
        id: &LoopId,
        status: LoopStatus,
        children: &[LoopRecord],
        host_pid: u32,
    ) -> Result<Result<(), Refused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(id, |transaction| {
            let changed = transaction.execute(
                "UPDATE loops SET status = ?2, error = NULL, updated_at = ?3
                 WHERE id = ?1 AND status IN ('running', 'awaiting_approval')
                       AND cancel_requested = 0",
                params![id.as_str(), status.as_str(), now_rfc3339()],
            )?;
            if changed == 0 {
                return refusal(transaction, id, &path);
            }
            for child in children {
                insert_row(transaction, child, host_pid)?;
            }
            Ok(Checked::Done(()))
        })
    }

    /// Completes the loop the user approved and inserts the children its artifact of
    /// `iteration` spawns, in one transaction. Refused unless the loop is still `approvable`,
    /// still at that iteration (a newer artifact was not what the user saw) and no cancel
    /// was asked of it.
    pub fn approve(
        &self,
        id: &LoopId,
        iteration: u32,
        children: &[LoopRecord],
        host_pid: u32,
    ) -> Result<Result<(), Refused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(id, |transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(Checked::Unknown);
            };
            if !approvable(&record) || record.iteration != iteration || cancel_requested {
                return Ok(Checked::Refused(Refused {
                    status: record.status,
                    cancel_requested,
                }));
            }
            transaction.execute(
                "UPDATE loops SET status = 'complete', error = NULL, updated_at = ?2 WHERE id = ?1",
                params![id.as_str(), now_rfc3339()],
            )?;
            for child in children {
                insert_row(transaction, child, host_pid)?;
            }
            Ok(Checked::Done(()))
        })
    }

    /// Inserts `code`, a code loop for `phase` (its parent), if the phase is still as the
    /// caller read it (same status and iteration: not revised or invalidated since) and has
    /// no active code loop: two hosts starting one for the same phase at once cannot both
    /// succeed. The active one it refuses for is reported as the user sees it: interrupted
    /// when it runs for a host that is gone (`host_is_gone(owner)`).
    pub fn insert_code_loop(
        &self,
        code: &LoopRecord,
        phase: &LoopRecord,
        host_pid: u32,
        host_is_gone: impl FnOnce(u32) -> bool,
    ) -> Result<Result<(), CodeLoopRefused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(&phase.id, |transaction| {
            let Some((now, cancel_requested)) = loop_in(transaction, &phase.id, &path)? else {
                return Ok(Checked::Unknown);
            };
            if now.status != phase.status || now.iteration != phase.iteration {
                return Ok(Checked::Refused(CodeLoopRefused::PhaseChanged(Refused {
                    status: now.status,
                    cancel_requested,
                })));
            }
            let active = children_in(transaction, &phase.id, &path)?
                .into_iter()
                .find(|child| child.loop_type == LoopType::Code && child.status.is_active());
            if let Some(active) = active {
                let interrupted = active.status == LoopStatus::Running
                    && host_is_gone(owner_in(transaction, &active.id)?);
                return Ok(Checked::Refused(CodeLoopRefused::Busy {
                    id: active.id,
                    status: if interrupted {
                        LoopStatus::Interrupted
                    } else {
                        active.status
                    },
                }));
            }
            insert_row(transaction, code, host_pid)?;
            Ok(Checked::Done(()))
        })
    }

    /// Prepares a `revisable` loop for another iteration with the user's feedback: it becomes
    /// pending, owned by `host_pid` (the host that will run it, which need not be the one that
    /// ran it before), and every descendant not yet invalidated becomes invalidated. One
    /// transaction, descendants read inside it, so a child a sibling inserts at the same
    /// moment cannot escape. Returns the descendants it invalidated, parents first.
    pub fn revise(
        &self,
        id: &LoopId,
        feedback: &str,
        host_pid: u32,
    ) -> Result<Result<Vec<StatusChange>, Refused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(id, |transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(Checked::Unknown);
            };
            if !revisable(&record) {
                return Ok(Checked::Refused(Refused {
                    status: record.status,
                    cancel_requested,
                }));
            }
            let now = now_rfc3339();
            transaction.execute(
                "UPDATE loops SET status = 'pending', feedback = ?2, error = NULL, updated_at = ?3,
                                  host_pid = ?4
                 WHERE id = ?1",
                params![id.as_str(), feedback, now, host_pid],
            )?;
            let mut invalidated = Vec::new();
            for below in descendants_in(transaction, id, &path)? {
                if below.status == LoopStatus::Invalidated {
                    continue;
                }
                transaction.execute(
                    "UPDATE loops SET status = 'invalidated', updated_at = ?2 WHERE id = ?1",
                    params![below.id.as_str(), now],
                )?;
                invalidated.push(StatusChange::of(&below, LoopStatus::Invalidated, None));
            }
            Ok(Checked::Done(invalidated))
        })
    }

    /// Makes a loop that ended without success (`retryable`, as the user sees it: one running
    /// in the store for a host that is gone, `host_is_gone(owner)`, is interrupted) pending
    /// again, owned by `host_pid`, with the others `retried_with` it: what it changed besides
    /// the loop itself. Refused in any other state.
    pub fn retry(
        &self,
        id: &LoopId,
        host_pid: u32,
        host_is_gone: impl FnOnce(u32) -> bool,
    ) -> Result<Result<Vec<StatusChange>, Refused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(id, |transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(Checked::Unknown);
            };
            let interrupted =
                record.status == LoopStatus::Running && host_is_gone(owner_in(transaction, id)?);
            let seen = if interrupted {
                LoopStatus::Interrupted
            } else {
                record.status
            };
            if !retryable(seen) {
                return Ok(Checked::Refused(Refused {
                    status: record.status,
                    cancel_requested,
                }));
            }
            let now = now_rfc3339();
            transaction.execute(
                "UPDATE loops SET status = 'pending', error = NULL, host_pid = ?2, updated_at = ?3
                 WHERE id = ?1",
                params![id.as_str(), host_pid, now],
            )?;
            // The loops it waits for that ended without success, and those that failed
            // waiting for them, run (and wait) again with it.
            let siblings = match &record.parent {
                Some(parent) => children_in(transaction, parent, &path)?,
                None => Vec::new(),
            };
            let target = siblings
                .iter()
                .find(|sibling| sibling.id == record.id)
                .unwrap_or(&record);
            let mut changes = Vec::new();
            for other in retried_with(target, &siblings).into_iter().skip(1) {
                let changed = transaction.execute(
                    "UPDATE loops SET status = 'pending', error = NULL, host_pid = ?2,
                     updated_at = ?3
                     WHERE id = ?1 AND status IN ('failed', 'cancelled')",
                    params![other.id.as_str(), host_pid, now],
                )?;
                if changed == 1 {
                    changes.push(StatusChange::of(other, LoopStatus::Pending, None));
                }
            }
            Ok(Checked::Done(changes))
        })
    }

    /// Cancels loop `id` and every loop below it, in one transaction: loops no task runs
    /// (pending, awaiting approval, paused, and interrupted ones: running for a host that is
    /// gone, `host_is_gone(owner)`, which will never stop them) become cancelled here, and the
    /// pending siblings that waited for one of them fail (and those waiting for them); running
    /// ones of live hosts get `cancel_requested` and are returned for their host to stop.
    pub fn cancel_tree(
        &self,
        id: &LoopId,
        host_is_gone: impl Fn(u32) -> bool,
    ) -> Result<CancelledTree, StoreError> {
        let path = self.path.clone();
        self.with_transaction(|transaction| {
            let Some((target, _)) = loop_in(transaction, id, &path)? else {
                return Ok(CancelledTree::default());
            };
            let mut tree = vec![target];
            tree.extend(descendants_in(transaction, id, &path)?);
            let now = now_rfc3339();
            let mut cancelled = Vec::new();
            let mut outcome = CancelledTree::default();
            for record in tree {
                if !record.status.is_cancellable() {
                    continue;
                }
                // A host that is gone never will stop its loop: it is cancelled here.
                let host_stops_it = record.status == LoopStatus::Running
                    && !host_is_gone(owner_in(transaction, &record.id)?);
                if host_stops_it {
                    transaction.execute(
                        "UPDATE loops SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1",
                        params![record.id.as_str(), now],
                    )?;
                    outcome.running.push(record.id);
                } else {
                    transaction.execute(
                        "UPDATE loops SET status = 'cancelled', updated_at = ?2 WHERE id = ?1",
                        params![record.id.as_str(), now],
                    )?;
                    cancelled.push(record);
                }
            }
            // After the whole tree is cancelled, so its own loops are not failed as well.
            for record in &cancelled {
                outcome
                    .changes
                    .push(StatusChange::of(record, LoopStatus::Cancelled, None));
                fail_waiting_dependents(
                    transaction,
                    record,
                    LoopStatus::Cancelled,
                    &path,
                    &mut outcome.changes,
                )?;
            }
            Ok(outcome)
        })
    }

    /// Records how a running loop ended and, unless it completed, fails the pending siblings
    /// that waited for it (and those waiting for them), in one transaction. A cancel asked
    /// while the loop was finishing wins over its success. `None` (and nothing written) if
    /// it is no longer running, for example because a revision invalidated it meanwhile;
    /// otherwise every status it changed, the loop's own first.
    pub fn end_running(
        &self,
        id: &LoopId,
        status: LoopStatus,
        error: Option<&str>,
    ) -> Result<Option<Vec<StatusChange>>, StoreError> {
        let path = self.path.clone();
        self.with_transaction(|transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(None);
            };
            if record.status != LoopStatus::Running {
                return Ok(None);
            }
            let status = if cancel_requested && status == LoopStatus::Complete {
                LoopStatus::Cancelled
            } else {
                status
            };
            transaction.execute(
                "UPDATE loops SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                params![id.as_str(), status.as_str(), error, now_rfc3339()],
            )?;
            let mut changes = vec![StatusChange::of(&record, status, error.map(str::to_owned))];
            if status != LoopStatus::Complete {
                fail_waiting_dependents(transaction, &record, status, &path, &mut changes)?;
            }
            Ok(Some(changes))
        })
    }

    /// Pending loops owned by `host_pid` whose dependencies (siblings spawned by the same
    /// parent artifact) are complete, oldest first: what this host may start now. Read as
    /// one snapshot.
    pub fn ready_for_host(&self, host_pid: u32) -> Result<Vec<LoopRecord>, StoreError> {
        let path = self.path.clone();
        self.with_connection(|connection| {
            // Deferred: a read that must not hold the write lock other hosts wait for.
            let snapshot = connection.unchecked_transaction()?;
            let pending = records_in(
                &snapshot,
                &format!(
                    "{SELECT_RECORD} WHERE status = 'pending' AND host_pid = ?1
                     ORDER BY created_at, rowid"
                ),
                params![host_pid],
                &path,
            )?;
            let mut ready = Vec::new();
            for record in pending {
                if dependencies_complete(&snapshot, &record, &path)? {
                    ready.push(record);
                }
            }
            snapshot.commit()?;
            Ok(ready)
        })
    }

    /// Every loop below `id`, parents before children.
    pub fn descendants(&self, id: &LoopId) -> Result<Vec<LoopRecord>, StoreError> {
        let path = self.path.clone();
        self.with_connection(|connection| descendants_in(connection, id, &path))
    }

    pub(super) fn checked_transaction<T, R>(
        &self,
        id: &LoopId,
        operation: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<Checked<T, R>>,
    ) -> Result<Result<T, R>, StoreError> {
        match self.with_transaction(operation)? {
            Checked::Done(value) => Ok(Ok(value)),
            Checked::Refused(refused) => Ok(Err(refused)),
            Checked::Unknown => Err(StoreError::UnknownLoop(id.to_string())),
        }
    }
}

/// The pid of the host loop `id` belongs to, read through `connection`.
fn owner_in(connection: &Connection, id: &LoopId) -> rusqlite::Result<u32> {
    connection.query_row(
        "SELECT host_pid FROM loops WHERE id = ?1",
        params![id.as_str()],
        |row| row.get(0),
    )
}

/// Loop `id` and whether a cancel was asked of it, read through `connection` (inside the
/// caller's transaction).
pub(super) fn loop_in(
    connection: &Connection,
    id: &LoopId,
    path: &Path,
) -> rusqlite::Result<Option<(LoopRecord, bool)>> {
    let Some(raw) = connection
        .query_row(
            &format!("{SELECT_RECORD} WHERE id = ?1"),
            params![id.as_str()],
            RawRecord::from_row,
        )
        .optional()?
    else {
        return Ok(None);
    };
    let record = raw.into_record(path).map_err(store_to_sqlite)?;
    let cancel_requested: bool = connection.query_row(
        "SELECT cancel_requested FROM loops WHERE id = ?1",
        params![id.as_str()],
        |row| row.get(0),
    )?;
    Ok(Some((record, cancel_requested)))
}

/// Why loop `id` was not changed, as the transaction sees it now.
fn refusal<T>(connection: &Connection, id: &LoopId, path: &Path) -> rusqlite::Result<Checked<T>> {
    Ok(match loop_in(connection, id, path)? {
        Some((record, cancel_requested)) => Checked::Refused(Refused {
            status: record.status,
            cancel_requested,
        }),
        None => Checked::Unknown,
    })
}

/// The pending siblings that wait for `ended` (same parent artifact, naming it among their
/// dependencies) can never start now: they fail with the reason, and so, in turn, do the
/// loops waiting for them. Appends what it changed to `changes`.
fn fail_waiting_dependents(
    connection: &Connection,
    ended: &LoopRecord,
    ended_status: LoopStatus,
    path: &Path,
    changes: &mut Vec<StatusChange>,
) -> rusqlite::Result<()> {
    let (Some(parent), Some(name)) = (&ended.parent, &ended.name) else {
        return Ok(());
    };
    for sibling in children_in(connection, parent, path)? {
        let waits_for_it = sibling.status == LoopStatus::Pending
            && siblings(ended, &sibling)
            && sibling
                .depends_on
                .iter()
                .any(|dependency| dependency == name);
        if !waits_for_it {
            continue;
        }
        let reason = dependency_ended_note(name, ended_status);
        let changed = connection.execute(
            "UPDATE loops SET status = 'failed', error = ?2, updated_at = ?3
             WHERE id = ?1 AND status = 'pending'",
            params![sibling.id.as_str(), reason, now_rfc3339()],
        )?;
        if changed == 1 {
            changes.push(StatusChange::of(&sibling, LoopStatus::Failed, Some(reason)));
            fail_waiting_dependents(connection, &sibling, LoopStatus::Failed, path, changes)?;
        }
    }
    Ok(())
}

/// Whether every sibling `record` depends on (by name, spawned by the same parent artifact)
/// is complete.
fn dependencies_complete(
    connection: &Connection,
    record: &LoopRecord,
    path: &Path,
) -> rusqlite::Result<bool> {
    if record.depends_on.is_empty() {
        return Ok(true);
    }
    let Some(parent) = &record.parent else {
        return Ok(true);
    };
    let siblings = children_in(connection, parent, path)?;
    Ok(awaited(record, &siblings).is_empty())
}

/// The root of loop `id`'s plan tree (`id` itself for a root, or an unknown loop).
pub(super) fn root_in(connection: &Connection, id: &LoopId) -> rusqlite::Result<LoopId> {
    let root: Option<String> = connection
        .query_row(
            "WITH RECURSIVE up(id, parent) AS (
                 SELECT id, parent FROM loops WHERE id = ?1
                 UNION ALL
                 SELECT loops.id, loops.parent FROM loops JOIN up ON loops.id = up.parent
             )
             SELECT id FROM up WHERE parent IS NULL",
            params![id.as_str()],
            |row| row.get(0),
        )
        .optional()?;
    Ok(root
        .as_deref()
        .and_then(LoopId::parse)
        .unwrap_or_else(|| id.clone()))
}

/// Direct children of `id`, in creation order.
pub(super) fn children_in(
    connection: &Connection,
    id: &LoopId,
    path: &Path,
) -> rusqlite::Result<Vec<LoopRecord>> {
    records_in(
        connection,
        &format!("{SELECT_RECORD} WHERE parent = ?1 ORDER BY created_at, rowid"),
        params![id.as_str()],
        path,
    )
}

/// Every loop below `id`, parents before children.
pub(super) fn descendants_in(
    connection: &Connection,
    id: &LoopId,
    path: &Path,
) -> rusqlite::Result<Vec<LoopRecord>> {
    records_in(
        connection,
        &format!(
            "WITH RECURSIVE tree(id, depth) AS (
                 SELECT id, 1 FROM loops WHERE parent = ?1
                 UNION ALL
                 SELECT loops.id, tree.depth + 1 FROM loops JOIN tree ON loops.parent = tree.id
             )
             {SELECT_RECORD} JOIN tree USING (id) ORDER BY tree.depth, created_at, rowid"
        ),
        params![id.as_str()],
        path,
    )
}

pub(super) fn records_in(
    connection: &Connection,
    sql: &str,
    arguments: impl rusqlite::Params,
    path: &Path,
) -> rusqlite::Result<Vec<LoopRecord>> {
    let mut statement = connection.prepare(sql)?;
    let rows = statement
        .query_map(arguments, RawRecord::from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|raw| raw.into_record(path).map_err(store_to_sqlite))
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use super::super::tests::{child, open, record};
    use super::*;
    use crate::pricing::ModelUsage;

    const FIRST_ARTIFACT: &str = "iterations/001/artifacts/plan.json";

    pub(in crate::store::db) fn id(text: &str) -> LoopId {
        LoopId::parse(text).expect("id")
    }

    /// A loop of the tree: named `name`, spawned by its parent's first artifact, depending
    /// on nothing, with an artifact of its own (iteration 1).
    pub(in crate::store::db) fn node(
        id: &str,
        parent: Option<&str>,
        name: &str,
        status: LoopStatus,
    ) -> LoopRecord {
        LoopRecord {
            parent: parent.and_then(LoopId::parse),
            name: Some(name.to_owned()),
            depends_on: Vec::new(),
            triggered_by: parent.map(|_| FIRST_ARTIFACT.to_owned()),
            status,
            iteration: 1,
            ..record(id, "2026-01-03T00:00:00Z")
        }
    }

    fn waiting_for(dependencies: &[&str], record: LoopRecord) -> LoopRecord {
        LoopRecord {
            depends_on: dependencies.iter().map(|name| (*name).to_owned()).collect(),
            ..record
        }
    }

    pub(in crate::store::db) fn insert_all(db: &LoopDb, records: &[LoopRecord]) {
        for record in records {
            db.insert(record, 1).expect("insert");
        }
    }

    /// Every loop's status, by id: what a test expects of the whole database, so a change to
    /// a loop it did not name shows.
    pub(in crate::store::db) fn statuses(db: &LoopDb) -> Vec<(String, LoopStatus)> {
        let mut statuses: Vec<_> = db
            .list()
            .expect("list")
            .into_iter()
            .map(|record| (record.id.to_string(), record.status))
            .collect();
        statuses.sort_by(|a, b| a.0.cmp(&b.0));
        statuses
    }

    pub(in crate::store::db) fn expected(
        pairs: &[(&str, LoopStatus)],
    ) -> Vec<(String, LoopStatus)> {
        let mut pairs: Vec<_> = pairs
            .iter()
            .map(|(id, status)| ((*id).to_owned(), *status))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs
    }

    fn change(id_text: &str, loop_type: LoopType, status: LoopStatus) -> StatusChange {
        StatusChange {
            id: id(id_text),
            loop_type,
            status,
            error: None,
        }
    }

    pub(in crate::store::db) fn spent(model: &str, input: u64) -> Vec<ModelUsage> {
        vec![ModelUsage {
            model: model.to_owned(),
            usage: crate::llm::Usage {
                input_tokens: input,
                output_tokens: 1,
                ..crate::llm::Usage::default()
            },
            reported_usd_micros: 0,
        }]
    }

    #[test]
    fn finishing_with_children_is_atomic_and_keeps_their_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("plan-1", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        let parent = id("plan-1");
        let children = [
            child("spec-1", "plan-1", "first"),
            child("spec-2", "plan-1", "second"),
        ];
        db.finish_with_children(&parent, LoopStatus::Complete, &children, 1)
            .expect("finish")
            .expect("running");
        let stored = db.children(&parent).expect("children");
        assert_eq!(stored, children.to_vec());
        // A second attempt (say, after a crash and resume) is refused as a whole: no
        // duplicates, and the refusal says what the loop is now.
        assert_eq!(
            db.finish_with_children(&parent, LoopStatus::Complete, &children, 1)
                .expect("finish"),
            Err(Refused {
                status: LoopStatus::Complete,
                cancel_requested: false
            })
        );
        assert_eq!(db.children(&parent).expect("children").len(), 2);
        assert_eq!(
            db.get(&parent).expect("get").expect("exists").status,
            LoopStatus::Complete
        );
        assert!(matches!(
            db.finish_with_children(&id("nope"), LoopStatus::Complete, &[], 1),
            Err(StoreError::UnknownLoop(_))
        ));
    }

    #[test]
    fn revising_invalidates_every_descendant_and_makes_the_loop_pending() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(
            &LoopRecord {
                status: LoopStatus::AwaitingApproval,
                iteration: 1,
                ..record("plan-1", "2026-01-01T00:00:00Z")
            },
            1,
        )
        .expect("insert");
        db.insert(&child("spec-1", "plan-1", "s"), 1)
            .expect("insert");
        db.insert(&child("phase-1", "spec-1", "p"), 1)
            .expect("insert");
        let plan = id("plan-1");
        let invalidated = db
            .revise(&plan, "split it differently", 7)
            .expect("revise")
            .expect("revisable");
        assert_eq!(invalidated.len(), 2);
        assert_eq!(
            db.pending_for_host(7).expect("pending").len(),
            1,
            "the revising host runs the revision"
        );
        assert_eq!(
            db.revise(&plan, "again", 7).expect("revise"),
            Err(Refused {
                status: LoopStatus::Pending,
                cancel_requested: false
            }),
            "a pending loop is not revised twice"
        );
        let records = db.list().expect("list");
        for record in &records {
            let expected = if record.id == plan {
                LoopStatus::Pending
            } else {
                LoopStatus::Invalidated
            };
            assert_eq!(record.status, expected, "{}", record.id);
        }
        let revised = db.get(&plan).expect("get").expect("exists");
        assert_eq!(revised.feedback.as_deref(), Some("split it differently"));
        db.set_iteration(&plan, 2).expect("iteration");
        assert_eq!(db.get(&plan).expect("get").expect("exists").feedback, None);
    }

    #[test]
    fn revising_invalidates_exactly_the_descendants() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-a", Some("plan-1"), "a", LoopStatus::Complete),
                node(
                    "phase-a1",
                    Some("spec-a"),
                    "a1",
                    LoopStatus::AwaitingApproval,
                ),
                node("code-a1", Some("phase-a1"), "a1", LoopStatus::Running),
                node("phase-a2", Some("spec-a"), "a2", LoopStatus::Invalidated),
                waiting_for(
                    &["a"],
                    node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
                ),
                node("plan-2", None, "plan", LoopStatus::Complete),
                node("spec-c", Some("plan-2"), "c", LoopStatus::Pending),
            ],
        );
        assert_eq!(
            db.revise(&id("spec-a"), "narrower", 9)
                .expect("revise")
                .expect("revisable"),
            vec![
                change("phase-a1", LoopType::Plan, LoopStatus::Invalidated),
                change("code-a1", LoopType::Plan, LoopStatus::Invalidated),
            ],
            "parents first; the already invalidated phase is not reported again"
        );
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-1", LoopStatus::Complete),
                ("spec-a", LoopStatus::Pending),
                ("phase-a1", LoopStatus::Invalidated),
                ("code-a1", LoopStatus::Invalidated),
                ("phase-a2", LoopStatus::Invalidated),
                ("spec-b", LoopStatus::Pending),
                ("plan-2", LoopStatus::Complete),
                ("spec-c", LoopStatus::Pending),
            ])
        );
        let revised = db.get(&id("spec-a")).expect("get").expect("exists");
        assert_eq!(revised.feedback.as_deref(), Some("narrower"));
        assert_eq!(
            db.pending_for_host(9).expect("pending"),
            vec![revised],
            "the revising host runs the revision, and only it"
        );
    }

    #[test]
    fn a_revision_that_cannot_read_a_descendant_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::AwaitingApproval),
                node("spec-a", Some("plan-1"), "a", LoopStatus::Pending),
                node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
            ],
        );
        db.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET depends_on = 'not json' WHERE id = 'spec-b'",
                [],
            )
        })
        .expect("corrupt a row");
        assert!(db.revise(&id("plan-1"), "again", 1).is_err());
        let statuses: Vec<_> = ["plan-1", "spec-a"]
            .iter()
            .map(|loop_id| db.get(&id(loop_id)).expect("get").expect("exists"))
            .map(|record| (record.status, record.feedback))
            .collect();
        assert_eq!(
            statuses,
            vec![
                (LoopStatus::AwaitingApproval, None),
                (LoopStatus::Pending, None)
            ],
            "the revision is undone as a whole"
        );
    }

    #[test]
    fn a_revision_is_refused_with_the_state_it_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let no_artifact_yet = LoopRecord {
            iteration: 0,
            ..node("plan-0", None, "plan", LoopStatus::Failed)
        };
        let code_without_iteration = LoopRecord {
            loop_type: LoopType::Code,
            iteration: 0,
            ..node("code-1", None, "p", LoopStatus::Failed)
        };
        insert_all(
            &db,
            &[
                node("plan-r", None, "plan", LoopStatus::Running),
                node("plan-p", None, "plan", LoopStatus::Pending),
                node("plan-i", None, "plan", LoopStatus::Invalidated),
                no_artifact_yet,
                code_without_iteration,
            ],
        );
        let before = statuses(&db);
        for (loop_id, status) in [
            ("plan-r", LoopStatus::Running),
            ("plan-p", LoopStatus::Pending),
            ("plan-i", LoopStatus::Invalidated),
            ("plan-0", LoopStatus::Failed),
        ] {
            assert_eq!(
                db.revise(&id(loop_id), "again", 1).expect("revise"),
                Err(Refused {
                    status,
                    cancel_requested: false
                }),
                "{loop_id}"
            );
        }
        assert_eq!(statuses(&db), before, "a refused revision changes nothing");
        assert!(matches!(
            db.revise(&id("nope"), "again", 1),
            Err(StoreError::UnknownLoop(_))
        ));
        assert_eq!(
            db.revise(&id("code-1"), "fix the test", 1).expect("revise"),
            Ok(Vec::new()),
            "a code loop's feedback starts its next iteration"
        );
    }

    #[test]
    fn children_a_finishing_loop_inserts_during_a_revision_are_invalidated_with_it() {
        // Two hosts on one database: one revises the plan while the other's spec finishes
        // and inserts its phases. Whatever the interleaving, nothing below the revised plan
        // may stay able to run.
        for round in 0..100 {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("loopr.db");
            let revising_host = LoopDb::open(&path).expect("open");
            let finishing_host = LoopDb::open(&path).expect("open");
            revising_host
                .insert(
                    &LoopRecord {
                        status: LoopStatus::Complete,
                        iteration: 1,
                        ..record("plan-1", "2026-01-01T00:00:00Z")
                    },
                    1,
                )
                .expect("plan");
            revising_host
                .insert(
                    &LoopRecord {
                        status: LoopStatus::Running,
                        ..child("spec-1", "plan-1", "s")
                    },
                    2,
                )
                .expect("spec");
            let start = Arc::new(std::sync::Barrier::new(2));
            let finishing = {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    let phase = child("phase-1", "spec-1", "p");
                    // Refused when the revision came first: the spec is invalidated.
                    let _ = finishing_host.finish_with_children(
                        &id("spec-1"),
                        LoopStatus::Complete,
                        &[phase],
                        2,
                    );
                })
            };
            start.wait();
            let plan = id("plan-1");
            revising_host
                .revise(&plan, "again", 1)
                .expect("revise")
                .expect("revisable");
            finishing.join().expect("thread");
            for below in revising_host.descendants(&plan).expect("descendants") {
                assert_eq!(
                    below.status,
                    LoopStatus::Invalidated,
                    "round {round}: {} escaped the revision",
                    below.id
                );
            }
        }
    }

    #[test]
    fn a_cancel_asked_of_a_finishing_loop_wins_over_its_success() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("plan-1", "2026-01-01T00:00:00Z"), 1)
            .expect("insert");
        let plan = id("plan-1");
        assert!(db.still_wanted(&plan).expect("wanted"));
        let tree = db.cancel_tree(&plan, |_| false).expect("cancel");
        assert_eq!(tree.running, vec![plan.clone()]);
        assert!(tree.changes.is_empty(), "a running loop ends when it stops");
        assert!(!db.still_wanted(&plan).expect("wanted"), "the loop sees it");
        // The loop's task had already finished: its success and children are refused...
        assert_eq!(
            db.finish_with_children(
                &plan,
                LoopStatus::Complete,
                &[child("spec-1", "plan-1", "s")],
                1
            )
            .expect("finish"),
            Err(Refused {
                status: LoopStatus::Running,
                cancel_requested: true
            })
        );
        assert!(db.children(&plan).expect("children").is_empty());
        // ...and its end is recorded, and reported, as cancelled.
        assert_eq!(
            db.end_running(&plan, LoopStatus::Complete, None)
                .expect("end"),
            Some(vec![change(
                "plan-1",
                LoopType::Plan,
                LoopStatus::Cancelled
            )])
        );
        let now = db.get(&plan).expect("get").expect("exists");
        assert_eq!(now.status, LoopStatus::Cancelled);
        // A retry is a new run: the old request is gone once it is claimed.
        assert_eq!(
            db.retry(&plan, 1, |_| false).expect("retry"),
            Ok(Vec::new())
        );
        assert!(db.claim(&plan, 1).expect("claim"));
        assert!(db.still_wanted(&plan).expect("wanted"));
    }

    #[test]
    fn cancelling_a_tree_cancels_what_waits_stops_what_runs_and_fails_what_waited_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let older_artifact = LoopRecord {
            triggered_by: Some("iterations/000/artifacts/plan.json".to_owned()),
            ..waiting_for(
                &["a"],
                node("spec-d", Some("plan-1"), "d", LoopStatus::Pending),
            )
        };
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-a", Some("plan-1"), "a", LoopStatus::AwaitingApproval),
                node("phase-a1", Some("spec-a"), "a1", LoopStatus::Pending),
                node("phase-a2", Some("spec-a"), "a2", LoopStatus::Running),
                node("phase-a3", Some("spec-a"), "a3", LoopStatus::Complete),
                waiting_for(
                    &["a"],
                    node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
                ),
                waiting_for(
                    &["b"],
                    node("spec-c", Some("plan-1"), "c", LoopStatus::Pending),
                ),
                older_artifact,
                node("spec-e", Some("plan-1"), "e", LoopStatus::Pending),
            ],
        );
        let tree = db.cancel_tree(&id("spec-a"), |_| false).expect("cancel");
        let failed = |loop_id: &str, reason: &str| StatusChange {
            error: Some(reason.to_owned()),
            ..change(loop_id, LoopType::Plan, LoopStatus::Failed)
        };
        assert_eq!(
            tree.changes,
            vec![
                change("spec-a", LoopType::Plan, LoopStatus::Cancelled),
                failed("spec-b", "its dependency a ended cancelled"),
                failed("spec-c", "its dependency b ended failed"),
                change("phase-a1", LoopType::Plan, LoopStatus::Cancelled),
            ]
        );
        assert_eq!(tree.running, vec![id("phase-a2")]);
        assert!(db.cancel_requested(&id("phase-a2")).expect("flag"));
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-1", LoopStatus::Complete),
                ("spec-a", LoopStatus::Cancelled),
                ("phase-a1", LoopStatus::Cancelled),
                ("phase-a2", LoopStatus::Running),
                ("phase-a3", LoopStatus::Complete),
                ("spec-b", LoopStatus::Failed),
                ("spec-c", LoopStatus::Failed),
                ("spec-d", LoopStatus::Pending),
                ("spec-e", LoopStatus::Pending),
            ])
        );
        assert_eq!(
            db.get(&id("spec-c")).expect("get").expect("exists").error,
            Some("its dependency b ended failed".to_owned())
        );
        assert!(
            db.cancel_tree(&id("phase-a3"), |_| false)
                .expect("cancel")
                .is_empty(),
            "nothing active below a finished loop"
        );
    }

    /// A running loop whose host is gone is cancelled at once, as a pending one is, with its
    /// dependents failed: no host will ever stop it, and no host adopts it later. A running
    /// loop of a live host is only asked to stop.
    #[test]
    fn cancelling_a_loop_whose_host_is_gone_ends_it_at_once() {
        const GONE: u32 = 2;
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-live", Some("plan-1"), "live", LoopStatus::Running),
                waiting_for(
                    &["a"],
                    node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
                ),
            ],
        );
        db.insert(
            &node("spec-a", Some("plan-1"), "a", LoopStatus::Running),
            GONE,
        )
        .expect("insert");
        let gone = |owner: u32| owner == GONE;

        let tree = db.cancel_tree(&id("spec-a"), gone).expect("cancel");
        assert_eq!(
            tree.changes,
            vec![
                change("spec-a", LoopType::Plan, LoopStatus::Cancelled),
                StatusChange {
                    error: Some("its dependency a ended cancelled".to_owned()),
                    ..change("spec-b", LoopType::Plan, LoopStatus::Failed)
                },
            ]
        );
        assert!(tree.running.is_empty(), "no host is asked to stop it");
        let tree = db.cancel_tree(&id("plan-1"), gone).expect("cancel");
        assert!(tree.changes.is_empty());
        assert_eq!(tree.running, vec![id("spec-live")]);
        assert!(db.cancel_requested(&id("spec-live")).expect("flag"));
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-1", LoopStatus::Complete),
                ("spec-live", LoopStatus::Running),
                ("spec-a", LoopStatus::Cancelled),
                ("spec-b", LoopStatus::Failed),
            ])
        );
        assert!(
            db.adopt_orphans(3, gone).expect("adopt").is_empty(),
            "a resume finds nothing of it to run"
        );
        assert!(!db.claim(&id("spec-a"), 3).expect("claim"));
    }

    #[test]
    fn a_loop_that_ends_without_success_fails_the_loops_waiting_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-a", Some("plan-1"), "a", LoopStatus::Running),
                waiting_for(
                    &["a"],
                    node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
                ),
                waiting_for(
                    &["b"],
                    node("spec-c", Some("plan-1"), "c", LoopStatus::Pending),
                ),
                node("spec-e", Some("plan-1"), "e", LoopStatus::Pending),
            ],
        );
        let changes = db
            .end_running(&id("spec-a"), LoopStatus::Failed, Some("turn limit"))
            .expect("end")
            .expect("running");
        assert_eq!(
            changes,
            vec![
                StatusChange {
                    error: Some("turn limit".to_owned()),
                    ..change("spec-a", LoopType::Plan, LoopStatus::Failed)
                },
                StatusChange {
                    error: Some("its dependency a ended failed".to_owned()),
                    ..change("spec-b", LoopType::Plan, LoopStatus::Failed)
                },
                StatusChange {
                    error: Some("its dependency b ended failed".to_owned()),
                    ..change("spec-c", LoopType::Plan, LoopStatus::Failed)
                },
            ]
        );
        assert_eq!(
            db.get(&id("spec-e")).expect("get").expect("exists").status,
            LoopStatus::Pending
        );
        assert_eq!(
            db.end_running(&id("spec-a"), LoopStatus::Cancelled, None)
                .expect("end"),
            None,
            "a loop no longer running keeps the end recorded first"
        );
    }

    #[test]
    fn a_loop_that_completes_lets_the_loops_waiting_for_it_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let spec_b = waiting_for(
            &["a"],
            node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
        );
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-a", Some("plan-1"), "a", LoopStatus::Running),
                spec_b.clone(),
            ],
        );
        assert!(db.ready_for_host(1).expect("ready").is_empty());
        assert_eq!(
            db.end_running(&id("spec-a"), LoopStatus::Complete, None)
                .expect("end"),
            Some(vec![change("spec-a", LoopType::Plan, LoopStatus::Complete)])
        );
        assert_eq!(db.ready_for_host(1).expect("ready"), vec![spec_b]);
    }

    #[test]
    fn ready_loops_are_the_hosts_pending_ones_whose_dependencies_are_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let spec_b = waiting_for(
            &["a"],
            node("spec-b", Some("plan-1"), "b", LoopStatus::Pending),
        );
        let plan_2 = node("plan-2", None, "plan", LoopStatus::Pending);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-a", Some("plan-1"), "a", LoopStatus::Complete),
                spec_b.clone(),
                waiting_for(
                    &["a", "b"],
                    node("spec-c", Some("plan-1"), "c", LoopStatus::Pending),
                ),
                LoopRecord {
                    // Its "a" is the one the parent's newer artifact spawns, not spec-a.
                    triggered_by: Some("iterations/002/artifacts/plan.json".to_owned()),
                    ..waiting_for(
                        &["a"],
                        node("spec-d", Some("plan-1"), "d", LoopStatus::Pending),
                    )
                },
                plan_2.clone(),
            ],
        );
        db.insert(&node("plan-3", None, "plan", LoopStatus::Pending), 2)
            .expect("another host's loop");
        assert_eq!(db.ready_for_host(1).expect("ready"), vec![spec_b, plan_2]);
    }

    #[test]
    fn approving_completes_an_approvable_loop_at_the_iteration_the_user_saw() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-w", None, "plan", LoopStatus::AwaitingApproval),
                LoopRecord {
                    iteration: 2,
                    ..node("plan-f", None, "plan", LoopStatus::Failed)
                },
                LoopRecord {
                    loop_type: LoopType::Code,
                    ..node("code-f", None, "p", LoopStatus::Failed)
                },
                LoopRecord {
                    iteration: 2,
                    ..node("plan-n", None, "plan", LoopStatus::AwaitingApproval)
                },
                node("plan-p", None, "plan", LoopStatus::Pending),
                node("plan-c", None, "plan", LoopStatus::Running),
            ],
        );
        let spec =
            |loop_id: &str, parent: &str| node(loop_id, Some(parent), "s", LoopStatus::Pending);
        db.approve(&id("plan-w"), 1, &[spec("spec-w", "plan-w")], 1)
            .expect("approve")
            .expect("approvable");
        db.approve(&id("plan-f"), 2, &[spec("spec-f", "plan-f")], 1)
            .expect("approve")
            .expect("its last good iteration is approvable");
        // A cancel asked while it ran, which then failed: not approvable.
        db.cancel_tree(&id("plan-c"), |_| false).expect("cancel");
        db.end_running(&id("plan-c"), LoopStatus::Failed, Some("boom"))
            .expect("end");
        let refused = |status, cancel_requested| {
            Err(Refused {
                status,
                cancel_requested,
            })
        };
        let attempts = [
            ("code-f", 1, refused(LoopStatus::Failed, false)),
            ("plan-n", 1, refused(LoopStatus::AwaitingApproval, false)),
            ("plan-p", 1, refused(LoopStatus::Pending, false)),
            ("plan-c", 1, refused(LoopStatus::Failed, true)),
        ];
        for (loop_id, iteration, outcome) in attempts {
            assert_eq!(
                db.approve(&id(loop_id), iteration, &[spec("spec-x", loop_id)], 1)
                    .expect("approve"),
                outcome,
                "{loop_id}"
            );
        }
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-w", LoopStatus::Complete),
                ("spec-w", LoopStatus::Pending),
                ("plan-f", LoopStatus::Complete),
                ("spec-f", LoopStatus::Pending),
                ("code-f", LoopStatus::Failed),
                ("plan-n", LoopStatus::AwaitingApproval),
                ("plan-p", LoopStatus::Pending),
                ("plan-c", LoopStatus::Failed),
            ]),
            "refused approvals spawn nothing"
        );
        assert!(matches!(
            db.approve(&id("nope"), 1, &[], 1),
            Err(StoreError::UnknownLoop(_))
        ));
    }

    #[test]
    fn retrying_makes_an_unsuccessful_loop_pending_for_the_retrying_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                LoopRecord {
                    error: Some("turn limit".to_owned()),
                    ..node("plan-f", None, "plan", LoopStatus::Failed)
                },
                node("plan-x", None, "plan", LoopStatus::Cancelled),
                node("plan-i", None, "plan", LoopStatus::Interrupted),
                node("plan-c", None, "plan", LoopStatus::Complete),
                node("plan-v", None, "plan", LoopStatus::Invalidated),
                node("plan-a", None, "plan", LoopStatus::AwaitingApproval),
            ],
        );
        // Running in the store: one for a host that lives, one for a host that is gone.
        db.insert(&node("plan-r", None, "plan", LoopStatus::Running), 8)
            .expect("insert");
        db.insert(&node("plan-g", None, "plan", LoopStatus::Running), 9)
            .expect("insert");
        let gone = |owner: u32| owner == 9;
        for loop_id in ["plan-f", "plan-x", "plan-i", "plan-g"] {
            assert_eq!(
                db.retry(&id(loop_id), 4, gone).expect("retry"),
                Ok(Vec::new()),
                "{loop_id}"
            );
        }
        let pending = db.pending_for_host(4).expect("pending");
        assert_eq!(pending.len(), 4);
        assert!(pending.iter().all(|record| record.error.is_none()));
        for (loop_id, status) in [
            ("plan-c", LoopStatus::Complete),
            ("plan-v", LoopStatus::Invalidated),
            ("plan-a", LoopStatus::AwaitingApproval),
            ("plan-f", LoopStatus::Pending),
            ("plan-r", LoopStatus::Running),
        ] {
            assert_eq!(
                db.retry(&id(loop_id), 4, gone).expect("retry"),
                Err(Refused {
                    status,
                    cancel_requested: false
                }),
                "{loop_id}"
            );
        }
        assert_eq!(db.pending_for_host(4).expect("pending").len(), 4);
    }

    fn code_loop_for(loop_id: &str, phase: &LoopRecord) -> LoopRecord {
        LoopRecord {
            loop_type: LoopType::Code,
            iteration: 0,
            ..node(loop_id, Some(phase.id.as_str()), "p", LoopStatus::Pending)
        }
    }

    #[test]
    fn a_code_loop_starts_only_for_the_phase_as_chosen_and_only_once_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let phase = node("phase-1", None, "p", LoopStatus::Complete);
        let earlier = LoopRecord {
            status: LoopStatus::Failed,
            ..code_loop_for("code-0", &phase)
        };
        insert_all(&db, &[phase.clone(), earlier]);
        assert_eq!(
            db.insert_code_loop(&code_loop_for("code-1", &phase), &phase, 1, |_| false)
                .expect("insert"),
            Ok(()),
            "a code loop that ended does not block the next"
        );
        // Chosen by a host that read the phase before another host started code-1.
        let code_2 = code_loop_for("code-2", &phase);
        assert_eq!(
            db.insert_code_loop(&code_2, &phase, 1, |_| false)
                .expect("insert"),
            Err(CodeLoopRefused::Busy {
                id: id("code-1"),
                status: LoopStatus::Pending
            })
        );
        // Its host, 1, started it and was killed.
        assert!(db.claim(&id("code-1"), 1).expect("claim"));
        assert_eq!(
            db.insert_code_loop(&code_2, &phase, 2, |owner| owner == 1)
                .expect("insert"),
            Err(CodeLoopRefused::Busy {
                id: id("code-1"),
                status: LoopStatus::Interrupted
            })
        );
        db.set_status(&id("code-1"), LoopStatus::Cancelled, None)
            .expect("status");
        db.revise(&id("phase-1"), "smaller steps", 1)
            .expect("revise")
            .expect("revisable");
        assert_eq!(
            db.insert_code_loop(&code_loop_for("code-3", &phase), &phase, 1, |_| false)
                .expect("insert"),
            Err(CodeLoopRefused::PhaseChanged(Refused {
                status: LoopStatus::Pending,
                cancel_requested: false
            })),
            "the phase was revised after it was chosen"
        );
        let codes: Vec<_> = db
            .children(&phase.id)
            .expect("children")
            .into_iter()
            .map(|code| code.id.to_string())
            .collect();
        assert_eq!(codes, vec!["code-0", "code-1"]);
    }
}
