//! Budget accounting in the store: what a plan tree spent (its tokens per model and the
//! user's last grant), and the transactions that pause, hold and let go on the loops of a
//! tree held to its budget. Each reads what it changes in the same transaction.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::tree::{Checked, Refused, StatusChange, descendants_in, loop_in, records_in, root_in};
use super::{LoopDb, SELECT_RECORD, StoreError, model_usage, sql_count};
use crate::budget::Grant;
use crate::pricing::ModelUsage;
use crate::store::records::{LoopId, LoopRecord, LoopStatus, now_rfc3339};
use crate::store::rules::waits_for_budget;

/// A plan tree's spend: its root, the tokens of all its loops per model, and what it had
/// spent at the user's last grant past its budget.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeSpend {
    pub root: LoopId,
    pub usage: Vec<ModelUsage>,
    pub grant: Grant,
}

/// What `pause_running` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    pub change: StatusChange,
    /// The root of the loop's plan tree.
    pub root: LoopId,
    /// No other loop of the tree was paused: the user has not been told yet.
    pub first_in_tree: bool,
}

/// What `hold_pending` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub change: StatusChange,
    /// No loop of the tree was paused or held before: the user has not been told yet.
    pub first_in_tree: bool,
}

/// A plan tree went on because the budget it is held to now allows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WentOn {
    pub root: LoopId,
    /// Where the tree stands against its budget, as the caller's decision put it.
    pub standing: String,
    /// Its paused loops, pending again, and its held loops, no longer held.
    pub changes: Vec<StatusChange>,
}

impl LoopDb {
    /// The spend of the plan tree loop `id` belongs to, read as one snapshot.
    pub fn tree_spend(&self, id: &LoopId) -> Result<TreeSpend, StoreError> {
        self.with_connection(|connection| {
            let snapshot = connection.unchecked_transaction()?;
            let root = root_in(&snapshot, id)?;
            let spend = TreeSpend {
                usage: tree_usage_in(&snapshot, &root)?,
                grant: grant_in(&snapshot, &root)?,
                root,
            };
            snapshot.commit()?;
            Ok(spend)
        })
    }

    /// Pauses a running loop whose plan tree reached its budget, noting `reason`; `None`
    /// (and nothing written) if it no longer runs or a cancel was asked of it.
    pub fn pause_running(&self, id: &LoopId, reason: &str) -> Result<Option<Paused>, StoreError> {
        let path = self.path.clone();
        self.with_transaction(|transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(None);
            };
            if record.status != LoopStatus::Running || cancel_requested {
                return Ok(None);
            }
            transaction.execute(
                "UPDATE loops SET status = 'paused', error = ?2, updated_at = ?3 WHERE id = ?1",
                params![id.as_str(), reason, now_rfc3339()],
            )?;
            let root = root_in(transaction, id)?;
            let mut tree = vec![root.clone()];
            tree.extend(
                descendants_in(transaction, &root, &path)?
                    .into_iter()
                    .map(|r| r.id),
            );
            let mut others_paused = 0;
            for other in tree.iter().filter(|other| *other != id) {
                let waiting: bool = transaction.query_row(
                    "SELECT status = 'paused' OR (status = 'pending' AND error IS NOT NULL)
                     FROM loops WHERE id = ?1",
                    params![other.as_str()],
                    |row| row.get(0),
                )?;
                others_paused += usize::from(waiting);
            }
            Ok(Some(Paused {
                change: StatusChange::of(&record, LoopStatus::Paused, Some(reason.to_owned())),
                root,
                first_in_tree: others_paused == 0,
            }))
        })
    }

    /// Lets the paused loops of loop `id`'s plan tree go on: they become pending, owned by
    /// `host_pid`, its held loops are no longer held, and the tree's budget counts from now
    /// on, from the spend `grant_for` makes of the tree's tokens. One transaction. Refused
    /// (with `id`'s state) if nothing in the tree waits for its budget; otherwise the tree's
    /// root and the loops it let go on.
    pub fn resume_paused_tree(
        &self,
        id: &LoopId,
        host_pid: u32,
        grant_for: impl FnOnce(&[ModelUsage]) -> Grant,
    ) -> Result<Result<(LoopId, Vec<StatusChange>), Refused>, StoreError> {
        let path = self.path.clone();
        self.checked_transaction(id, |transaction| {
            let Some((record, cancel_requested)) = loop_in(transaction, id, &path)? else {
                return Ok(Checked::Unknown);
            };
            let root = root_in(transaction, id)?;
            let waiting = waiting_in_tree(transaction, &root, &path)?;
            if waiting.is_empty() {
                return Ok(Checked::Refused(Refused {
                    status: record.status,
                    cancel_requested,
                }));
            }
            let grant = grant_for(&tree_usage_in(transaction, &root)?);
            let now = now_rfc3339();
            transaction.execute(
                "INSERT INTO budget_grants (root_id, tokens, usd, granted_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (root_id) DO UPDATE SET
                     tokens = excluded.tokens, usd = excluded.usd, granted_at = excluded.granted_at",
                params![root.as_str(), sql_count(grant.tokens), grant.usd, now],
            )?;
            let resumed = let_go_on(transaction, waiting, host_pid)?;
            Ok(Checked::Done((root, resumed)))
        })
    }

    /// Lets every plan tree with loops waiting for its budget go on whose budget allows it
    /// now: `decide` gets the tree's root, its tokens per model and its last grant, and says
    /// where the tree stands (`Some`) if it may go on. The grant stays: a budget the user
    /// raised counts from the same point as before. Each tree is one transaction.
    pub fn resume_trees_within(
        &self,
        host_pid: u32,
        mut decide: impl FnMut(&LoopRecord, &[ModelUsage], Grant) -> Option<String>,
    ) -> Result<Vec<WentOn>, StoreError> {
        let path = self.path.clone();
        let roots: Vec<LoopId> = self.with_connection(|connection| {
            let mut roots = Vec::new();
            let waiting = records_in(
                connection,
                &format!(
                    "{SELECT_RECORD} WHERE status = 'paused'
                                      OR (status = 'pending' AND error IS NOT NULL)"
                ),
                [],
                &path,
            )?;
            for record in waiting {
                let root = root_in(connection, &record.id)?;
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
            Ok(roots)
        })?;
        let mut went_on = Vec::new();
        for root in roots {
            let outcome = self.with_transaction(|transaction| {
                let Some((root_record, _)) = loop_in(transaction, &root, &path)? else {
                    return Ok(None);
                };
                let waiting = waiting_in_tree(transaction, &root, &path)?;
                if waiting.is_empty() {
                    return Ok(None);
                }
                let usage = tree_usage_in(transaction, &root)?;
                let grant = grant_in(transaction, &root)?;
                let Some(standing) = decide(&root_record, &usage, grant) else {
                    return Ok(None);
                };
                Ok(Some(WentOn {
                    root: root.clone(),
                    standing,
                    changes: let_go_on(transaction, waiting, host_pid)?,
                }))
            })?;
            went_on.extend(outcome);
        }
        Ok(went_on)
    }

    /// Holds pending loop `id` back because its plan tree reached its budget, noting
    /// `reason`; `None` (and nothing written) if it is no longer pending or already held for
    /// that reason.
    pub fn hold_pending(&self, id: &LoopId, reason: &str) -> Result<Option<Held>, StoreError> {
        let path = self.path.clone();
        self.with_transaction(|transaction| {
            let Some((record, _)) = loop_in(transaction, id, &path)? else {
                return Ok(None);
            };
            if record.status != LoopStatus::Pending || record.error.as_deref() == Some(reason) {
                return Ok(None);
            }
            let root = root_in(transaction, id)?;
            // Before the update: this loop, held already for an older count, was told of too.
            let told_before = !waiting_in_tree(transaction, &root, &path)?.is_empty();
            transaction.execute(
                "UPDATE loops SET error = ?2, updated_at = ?3 WHERE id = ?1",
                params![id.as_str(), reason, now_rfc3339()],
            )?;
            Ok(Some(Held {
                change: StatusChange::of(&record, LoopStatus::Pending, Some(reason.to_owned())),
                first_in_tree: !told_before,
            }))
        })
    }
}

/// The tokens of `root` and every loop below it, per model.
fn tree_usage_in(connection: &Connection, root: &LoopId) -> rusqlite::Result<Vec<ModelUsage>> {
    let mut statement = connection.prepare(
        "WITH RECURSIVE tree(id) AS (
             SELECT ?1
             UNION ALL
             SELECT loops.id FROM loops JOIN tree ON loops.parent = tree.id
         )
         SELECT model, SUM(input), SUM(output), SUM(cache_write), SUM(cache_read),
             MAX(estimated), SUM(reported_usd_micros)
         FROM loop_usage JOIN tree ON loop_usage.loop_id = tree.id
         GROUP BY model ORDER BY model",
    )?;
    statement
        .query_map(params![root.as_str()], |row| model_usage(row, 0))?
        .collect()
}

/// The loops of tree `root` (the root too) that wait for its budget.
fn waiting_in_tree(
    connection: &Connection,
    root: &LoopId,
    path: &Path,
) -> rusqlite::Result<Vec<LoopRecord>> {
    let mut tree = loop_in(connection, root, path)?
        .map(|(root, _)| vec![root])
        .unwrap_or_default();
    tree.extend(descendants_in(connection, root, path)?);
    Ok(tree.into_iter().filter(waits_for_budget).collect())
}

/// Paused loops among `waiting` become pending and held ones lose their reason, all owned by
/// `host_pid`, whose scheduler starts them. Returns what changed, for the shells.
fn let_go_on(
    connection: &Connection,
    waiting: Vec<LoopRecord>,
    host_pid: u32,
) -> rusqlite::Result<Vec<StatusChange>> {
    let now = now_rfc3339();
    let mut changes = Vec::new();
    for loop_record in waiting {
        connection.execute(
            "UPDATE loops SET status = 'pending', error = NULL, host_pid = ?2, updated_at = ?3
             WHERE id = ?1",
            params![loop_record.id.as_str(), host_pid, now],
        )?;
        changes.push(StatusChange::of(&loop_record, LoopStatus::Pending, None));
    }
    Ok(changes)
}

/// What tree `root` had spent when the user last let it go past its budget.
fn grant_in(connection: &Connection, root: &LoopId) -> rusqlite::Result<Grant> {
    Ok(connection
        .query_row(
            "SELECT tokens, usd FROM budget_grants WHERE root_id = ?1",
            params![root.as_str()],
            |row| {
                Ok(Grant {
                    tokens: u64::try_from(row.get::<_, i64>(0)?).unwrap_or_default(),
                    usd: row.get(1)?,
                })
            },
        )
        .optional()?
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::super::tests::open;
    use super::super::tree::tests::{expected, id, insert_all, node, spent, statuses};
    use super::*;
    use crate::store::rules::held_at_budget;

    #[test]
    fn a_tree_spends_as_one_pauses_once_and_resumes_as_a_whole_from_a_grant() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-1", Some("plan-1"), "a", LoopStatus::Running),
                node("spec-2", Some("plan-1"), "b", LoopStatus::Running),
                node("code-1", Some("spec-1"), "c", LoopStatus::Running),
                node("other-1", None, "plan", LoopStatus::Running),
            ],
        );
        db.add_turn_usage(&id("plan-1"), 0, 0, &spent("m1", 100))
            .expect("usage");
        db.add_turn_usage(&id("code-1"), 0, 0, &spent("m1", 20))
            .expect("usage");
        db.add_turn_usage(&id("code-1"), 0, 0, &spent("m2", 5))
            .expect("usage");
        db.add_turn_usage(&id("other-1"), 0, 0, &spent("m1", 1000))
            .expect("usage");

        let spend = db.tree_spend(&id("code-1")).expect("spend");
        assert_eq!(spend.root, id("plan-1"));
        let inputs: Vec<(&str, u64)> = spend
            .usage
            .iter()
            .map(|entry| (entry.model.as_str(), entry.usage.input_tokens))
            .collect();
        assert_eq!(
            inputs,
            [("m1", 120), ("m2", 5)],
            "only this tree, per model"
        );
        assert_eq!(spend.grant, Grant::default());

        let first = db
            .pause_running(&id("code-1"), "over")
            .expect("pause")
            .expect("running");
        assert!(first.first_in_tree);
        assert_eq!(first.root, id("plan-1"));
        let second = db
            .pause_running(&id("spec-2"), "over")
            .expect("pause")
            .expect("running");
        assert!(!second.first_in_tree, "the user was told already");
        assert_eq!(
            db.pause_running(&id("code-1"), "over").expect("pause"),
            None
        );
        let other = db
            .pause_running(&id("other-1"), "over")
            .expect("pause")
            .expect("running");
        assert!(other.first_in_tree, "another tree is told on its own");

        let (root, resumed) = db
            .resume_paused_tree(&id("plan-1"), 9, |usage| Grant {
                tokens: usage.iter().map(|entry| entry.usage.input_tokens).sum(),
                usd: 0.5,
            })
            .expect("resume")
            .expect("paused loops");
        assert_eq!(root, id("plan-1"));
        let mut resumed: Vec<String> = resumed.iter().map(|change| change.id.to_string()).collect();
        resumed.sort();
        assert_eq!(resumed, ["code-1", "spec-2"]);
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-1", LoopStatus::Complete),
                ("spec-1", LoopStatus::Running),
                ("spec-2", LoopStatus::Pending),
                ("code-1", LoopStatus::Pending),
                ("other-1", LoopStatus::Paused),
            ])
        );
        assert_eq!(
            db.pending_for_host(9).expect("pending").len(),
            2,
            "this host runs them"
        );
        assert_eq!(
            db.tree_spend(&id("spec-2")).expect("spend").grant,
            Grant {
                tokens: 125,
                usd: 0.5
            }
        );
        assert_eq!(
            db.resume_paused_tree(&id("plan-1"), 9, |_| Grant::default())
                .expect("resume"),
            Err(Refused {
                status: LoopStatus::Complete,
                cancel_requested: false
            }),
            "nothing left paused"
        );
    }

    #[test]
    fn held_loops_wait_with_paused_ones_and_a_larger_budget_lets_a_tree_go_on_keeping_its_grant() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        insert_all(
            &db,
            &[
                node("plan-1", None, "plan", LoopStatus::Complete),
                node("spec-1", Some("plan-1"), "a", LoopStatus::Pending),
                node("spec-2", Some("plan-1"), "b", LoopStatus::Running),
                node("other-1", None, "plan", LoopStatus::Running),
            ],
        );
        db.add_turn_usage(&id("plan-1"), 0, 0, &spent("m1", 100))
            .expect("usage");
        let held = db
            .hold_pending(&id("spec-1"), "over")
            .expect("hold")
            .expect("pending");
        assert!(held.first_in_tree);
        assert_eq!(held.change.error.as_deref(), Some("over"));
        assert_eq!(
            db.hold_pending(&id("spec-1"), "over").expect("hold"),
            None,
            "held already for that reason: nothing to tell"
        );
        let again = db
            .hold_pending(&id("spec-1"), "over, more")
            .expect("hold")
            .expect("a new count");
        assert!(!again.first_in_tree, "the user was told already");
        let paused = db
            .pause_running(&id("spec-2"), "over")
            .expect("pause")
            .expect("running");
        assert!(!paused.first_in_tree, "held loops were told of");
        db.pause_running(&id("other-1"), "over")
            .expect("pause")
            .expect("running");

        let mut asked = Vec::new();
        let went_on = db
            .resume_trees_within(9, |root, usage, grant| {
                asked.push((root.id.to_string(), usage.len(), grant));
                (root.id == id("plan-1")).then(|| "within".to_owned())
            })
            .expect("resume");
        asked.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            asked,
            [
                ("other-1".to_owned(), 0, Grant::default()),
                ("plan-1".to_owned(), 1, Grant::default())
            ],
            "each waiting tree once"
        );
        assert_eq!(went_on.len(), 1);
        assert_eq!(
            (&went_on[0].root, went_on[0].standing.as_str()),
            (&id("plan-1"), "within")
        );
        assert_eq!(
            statuses(&db),
            expected(&[
                ("plan-1", LoopStatus::Complete),
                ("spec-1", LoopStatus::Pending),
                ("spec-2", LoopStatus::Pending),
                ("other-1", LoopStatus::Paused),
            ])
        );
        let records = db.list().expect("list");
        assert!(
            records
                .iter()
                .filter(|record| record.id != id("other-1"))
                .all(|record| !held_at_budget(record) && record.error.is_none()),
            "nothing of the tree waits any more: {records:#?}"
        );
        assert_eq!(
            db.tree_spend(&id("spec-1")).expect("spend").grant,
            Grant::default(),
            "a larger budget counts from the same point"
        );
        assert!(db.claim(&id("spec-1"), 9).expect("claim"));
    }
}
