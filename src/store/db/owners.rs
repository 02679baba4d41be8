//! Which host each unfinished loop belongs to. A pending or running loop holds the pid of the
//! host that runs it (or will); once that host is gone, the loop is interrupted: shown so, and
//! left as it is until a host adopts it (a resume) or a retry starts it again. Whether a host
//! is gone is the caller's answer (`host_is_alive`, from the host's lock).

use std::collections::HashMap;

use rusqlite::params;

use super::{LoopDb, SELECT_RECORD, StoreError, tree::records_in};
use crate::store::records::{LoopId, LoopRecord, LoopStatus, now_rfc3339};

/// The owner of loops that belong to no host: no process has pid 0, so no host holds its lock.
const NO_HOST: u32 = 0;

impl LoopDb {
    /// Pending and running loops with the host each belongs to.
    fn unfinished_with_owners(&self) -> Result<Vec<(LoopId, u32)>, StoreError> {
        let rows: Vec<(String, u32)> = self.with_connection(|connection| {
            let mut statement = connection.prepare(
                "SELECT id, host_pid FROM loops WHERE status IN ('pending', 'running')
                 ORDER BY created_at, rowid",
            )?;
            statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, owner)| Some((LoopId::parse(&id)?, owner)))
            .collect())
    }

    /// Loops left pending or running by a host that is gone (`host_is_gone(owner)`) become
    /// pending and owned by `host_pid`, so this host resumes them. Each takeover is guarded by
    /// the owner seen, so two hosts adopting at once cannot both win. Returns the ids this host
    /// adopted.
    pub fn adopt_orphans(
        &self,
        host_pid: u32,
        host_is_gone: impl Fn(u32) -> bool,
    ) -> Result<Vec<LoopId>, StoreError> {
        let mut adopted = Vec::new();
        for (id, owner) in self.unfinished_with_owners()? {
            if !host_is_gone(owner) {
                continue;
            }
            let changed = self.with_connection(|connection| {
                connection.execute(
                    "UPDATE loops SET status = 'pending', host_pid = ?2, updated_at = ?3
                     WHERE id = ?1 AND host_pid = ?4 AND status IN ('pending', 'running')",
                    params![id.as_str(), host_pid, now_rfc3339(), owner],
                )
            })?;
            if changed == 1 {
                adopted.push(id);
            }
        }
        Ok(adopted)
    }

    /// How many loops are left pending or running by hosts that are gone: what a host that
    /// resumes the project adopts.
    pub fn count_orphans(&self, host_is_gone: impl Fn(u32) -> bool) -> Result<usize, StoreError> {
        let gone = memoized(host_is_gone);
        Ok(self
            .unfinished_with_owners()?
            .into_iter()
            .filter(|(_, owner)| gone(*owner))
            .count())
    }

    /// Gives the pending and running loops that hold `host_pid` to no host: called by a host
    /// opening the project for the first time, before it has started anything there, so they
    /// were left by an earlier host with the same pid (pids are reused, in a container every
    /// run may have the same one). Without this the new host would take them for its own:
    /// run them unasked, and show them running while no task runs them. Returns how many.
    pub fn disown_leftovers(&self, host_pid: u32) -> Result<usize, StoreError> {
        self.with_connection(|connection| {
            connection.execute(
                "UPDATE loops SET host_pid = ?2
                 WHERE host_pid = ?1 AND status IN ('pending', 'running')",
                params![host_pid, NO_HOST],
            )
        })
    }

    /// Every loop, newest first, as the user should see it: a running loop whose host is gone
    /// (`host_is_gone(owner)`) is `Interrupted`, since nothing runs it until a host adopts it.
    /// Read as one snapshot.
    pub fn list_as_seen(
        &self,
        host_is_gone: impl Fn(u32) -> bool,
    ) -> Result<Vec<LoopRecord>, StoreError> {
        let path = self.path.clone();
        let (mut records, running) = self.with_connection(|connection| {
            // Deferred: a read that must not hold the write lock other hosts wait for.
            let snapshot = connection.unchecked_transaction()?;
            let records = records_in(
                &snapshot,
                &format!("{SELECT_RECORD} ORDER BY created_at DESC, id DESC"),
                [],
                &path,
            )?;
            let running: HashMap<String, u32> = snapshot
                .prepare("SELECT id, host_pid FROM loops WHERE status = 'running'")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            snapshot.commit()?;
            Ok((records, running))
        })?;
        let gone = memoized(host_is_gone);
        for record in &mut records {
            let interrupted = record.status == LoopStatus::Running
                && running
                    .get(record.id.as_str())
                    .is_some_and(|owner| gone(*owner));
            if interrupted {
                record.status = LoopStatus::Interrupted;
            }
        }
        Ok(records)
    }
}

/// `host_is_gone`, asked once per host: each answer takes a file lock probe.
fn memoized(host_is_gone: impl Fn(u32) -> bool) -> impl Fn(u32) -> bool {
    let known = std::cell::RefCell::new(HashMap::new());
    move |owner| {
        *known
            .borrow_mut()
            .entry(owner)
            .or_insert_with(|| host_is_gone(owner))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{open, record};
    use super::*;
    use crate::store::{HostLock, host_is_alive};

    fn id(text: &str) -> LoopId {
        LoopId::parse(text).expect("id")
    }

    /// A loop made at `created_at`, now `status`.
    fn loop_in(status: LoopStatus, name: &str, created_at: &str) -> LoopRecord {
        LoopRecord {
            status,
            ..record(name, created_at)
        }
    }

    /// The status loop `name` has among `seen`.
    fn status_of(seen: &[LoopRecord], name: &str) -> Option<LoopStatus> {
        seen.iter()
            .find(|record| record.id.as_str() == name)
            .map(|record| record.status)
    }

    #[test]
    fn orphans_of_dead_hosts_are_adopted_and_claimed_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("dead-1", "2026-01-01T00:00:00Z"), 111)
            .expect("insert");
        db.insert(&record("live-1", "2026-01-01T00:00:00Z"), 222)
            .expect("insert");
        let adopted = db.adopt_orphans(333, |owner| owner != 222).expect("adopt");
        assert_eq!(adopted, vec![id("dead-1")]);
        let pending = db.pending_for_host(333).expect("pending");
        assert_eq!(pending.len(), 1);
        assert!(db.claim(&adopted[0], 333).expect("claim"));
        assert!(
            !db.claim(&adopted[0], 333).expect("claim"),
            "a loop is claimed once"
        );
    }

    #[test]
    fn a_host_that_saw_an_orphan_before_another_adopted_it_does_not_take_it_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("orphan-1", "2026-01-01T00:00:00Z"), 111)
            .expect("insert");
        let other_host = db.clone();
        // Host B decides between its read and its write; host A adopts and starts the loop
        // in exactly that gap.
        let adopted_by_b = db
            .adopt_orphans(444, |owner| {
                assert_eq!(
                    other_host
                        .adopt_orphans(333, |o| o == 111)
                        .expect("A adopts")
                        .len(),
                    1
                );
                assert!(other_host.claim(&id("orphan-1"), 333).expect("A claims"));
                owner == 111
            })
            .expect("B adopts");
        assert!(adopted_by_b.is_empty());
        let record = db.get(&id("orphan-1")).expect("get").expect("exists");
        assert_eq!(record.status, LoopStatus::Running);
        assert!(db.pending_for_host(444).expect("pending").is_empty());
    }

    /// Liveness as the hosts know it: a real lock file, held by a live host, left unheld by
    /// a killed one.
    #[test]
    fn a_running_loop_whose_host_is_gone_is_seen_interrupted() {
        let home = tempfile::tempdir().expect("home");
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        let live = HostLock::acquire(home.path(), 5101).expect("lock");
        std::fs::write(home.path().join("hosts/5102.lock"), "").expect("a killed host's");
        db.insert(&record("live-run", "2026-01-01T00:00:00Z"), 5101)
            .expect("insert");
        db.insert(&record("dead-run", "2026-01-02T00:00:00Z"), 5102)
            .expect("insert");
        let waiting = loop_in(LoopStatus::Pending, "dead-wait", "2026-01-03T00:00:00Z");
        db.insert(&waiting, 5102).expect("insert");
        let asked = std::cell::Cell::new(0);
        let seen = db
            .list_as_seen(|owner| {
                asked.set(asked.get() + 1);
                !host_is_alive(home.path(), owner)
            })
            .expect("list");
        let status = |name: &str| status_of(&seen, name);
        assert_eq!(status("live-run"), Some(LoopStatus::Running));
        assert_eq!(status("dead-run"), Some(LoopStatus::Interrupted));
        assert_eq!(
            status("dead-wait"),
            Some(LoopStatus::Pending),
            "a pending loop waits for a host to resume it"
        );
        assert_eq!(asked.get(), 2, "each host asked about once");
        assert_eq!(
            db.get(&id("dead-run")).expect("get").map(|r| r.status),
            Some(LoopStatus::Running),
            "only seen so: the store keeps it for a host to adopt"
        );
        assert_eq!(
            db.count_orphans(|owner| !host_is_alive(home.path(), owner))
                .expect("count"),
            2
        );
        drop(live);
    }

    #[test]
    fn loops_an_earlier_host_with_the_same_pid_left_belong_to_no_host_once_disowned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(&dir);
        db.insert(&record("left-running", "2026-01-01T00:00:00Z"), 77)
            .expect("insert");
        let left_pending = loop_in(LoopStatus::Pending, "left-pending", "2026-01-02T00:00:00Z");
        db.insert(&left_pending, 77).expect("insert");
        let finished = loop_in(LoopStatus::Complete, "finished", "2026-01-03T00:00:00Z");
        db.insert(&finished, 77).expect("insert");
        db.insert(&record("other-host", "2026-01-04T00:00:00Z"), 78)
            .expect("insert");

        assert_eq!(db.disown_leftovers(77).expect("disown"), 2);
        assert!(
            db.pending_for_host(77).expect("pending").is_empty(),
            "the new host with pid 77 does not run them"
        );
        // Pid 77 lives (the new host); they are still seen as another host's, gone.
        let gone = |owner: u32| owner != 77 && owner != 78;
        let seen = db.list_as_seen(gone).expect("list");
        let status = |name: &str| status_of(&seen, name);
        assert_eq!(status("left-running"), Some(LoopStatus::Interrupted));
        assert_eq!(status("other-host"), Some(LoopStatus::Running));
        assert_eq!(db.count_orphans(gone).expect("count"), 2);
        let adopted = db.adopt_orphans(77, gone).expect("adopt");
        assert_eq!(adopted, vec![id("left-running"), id("left-pending")]);
    }
}
