//! The loop record and its parts (`LoopId`, `LoopType`, `LoopStatus`, `LoopRecord`) as stored
//! in `loopr.db` and shown to the shells: ids that sort by creation time and never collide,
//! and the text of each type and status.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A loop identifier: UTC creation time to the millisecond plus 40 random bits, e.g.
/// `20261121-233512-042-3f9c1b7e4d`. Ids sort by creation time, and within one process they
/// strictly increase (a second id in the same millisecond is the first plus one), so neither
/// a burst of loops in one host nor several hosts creating loops at once can collide.
/// Older, shorter ids (`20261121-233512-a3f9`) stay valid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LoopId(String);

/// The random part's range: 40 bits, written as 10 hex digits.
const RANDOM_BITS: u32 = 40;

impl LoopId {
    pub fn generate() -> LoopId {
        let now = time::OffsetDateTime::now_utc();
        let (millisecond, random) = next_unique(now.unix_timestamp_nanos() / 1_000_000);
        let Ok(now) = time::OffsetDateTime::from_unix_timestamp_nanos(millisecond * 1_000_000)
        else {
            return LoopId(format!("{millisecond}-{random:010x}"));
        };
        let format = time::macros::format_description!(
            "[year][month][day]-[hour][minute][second]-[subsecond digits:3]"
        );
        let stamp = now
            .format(&format)
            .unwrap_or_else(|_| millisecond.to_string());
        LoopId(format!("{stamp}-{random:010x}"))
    }

    /// Accepts only ids that are safe as a single directory name.
    pub fn parse(text: &str) -> Option<LoopId> {
        let valid = !text.is_empty()
            && text.len() <= 64
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        valid.then(|| LoopId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The (millisecond, random) pair of the next id: never equal to or below the previous one
/// of this process, even when the clock stands still or steps back.
fn next_unique(millisecond: i128) -> (i128, u64) {
    static LAST: std::sync::Mutex<(i128, u64)> = std::sync::Mutex::new((0, 0));
    let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let limit = 1u64 << RANDOM_BITS;
    let next = if millisecond > last.0 {
        (millisecond, fastrand::u64(..limit / 2))
    } else if last.1 + 1 < limit {
        (last.0, last.1 + 1)
    } else {
        (last.0 + 1, fastrand::u64(..limit / 2))
    };
    *last = next;
    next
}

impl fmt::Display for LoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The levels of the loop hierarchy, and `Verify`: a verification of the working tree against
/// a phase or spec asked on demand, a child of that phase or spec loop that changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopType {
    Plan,
    Spec,
    Phase,
    Code,
    Verify,
}

impl LoopType {
    pub fn as_str(self) -> &'static str {
        match self {
            LoopType::Plan => "plan",
            LoopType::Spec => "spec",
            LoopType::Phase => "phase",
            LoopType::Code => "code",
            LoopType::Verify => "verify",
        }
    }
}

impl FromStr for LoopType {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "plan" => Ok(LoopType::Plan),
            "spec" => Ok(LoopType::Spec),
            "phase" => Ok(LoopType::Phase),
            "code" => Ok(LoopType::Code),
            "verify" => Ok(LoopType::Verify),
            other => Err(format!("unknown loop type {other:?}")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopStatus {
    /// Waiting to run: for its dependencies, a free slot, or a host to resume it; or held
    /// back while its plan tree is at its budget, which its `error` then says.
    Pending,
    Running,
    /// Its artifact exists and waits for the user's review and approval.
    AwaitingApproval,
    Complete,
    Failed,
    Cancelled,
    /// The host that ran the loop exited before the loop finished.
    Interrupted,
    /// Its parent was revised; the artifact that triggered it is stale. Kept for reference.
    Invalidated,
    /// Stopped before a turn because its plan tree reached its budget; its journal is whole,
    /// and approving its tree lets it go on from there.
    Paused,
}

impl LoopStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            LoopStatus::Pending => "pending",
            LoopStatus::Running => "running",
            LoopStatus::AwaitingApproval => "awaiting_approval",
            LoopStatus::Complete => "complete",
            LoopStatus::Failed => "failed",
            LoopStatus::Cancelled => "cancelled",
            LoopStatus::Interrupted => "interrupted",
            LoopStatus::Invalidated => "invalidated",
            LoopStatus::Paused => "paused",
        }
    }
}

impl FromStr for LoopStatus {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "pending" => Ok(LoopStatus::Pending),
            "running" => Ok(LoopStatus::Running),
            "awaiting_approval" => Ok(LoopStatus::AwaitingApproval),
            "complete" => Ok(LoopStatus::Complete),
            "failed" => Ok(LoopStatus::Failed),
            "cancelled" => Ok(LoopStatus::Cancelled),
            "interrupted" => Ok(LoopStatus::Interrupted),
            "invalidated" => Ok(LoopStatus::Invalidated),
            "paused" => Ok(LoopStatus::Paused),
            other => Err(format!("unknown loop status {other:?}")),
        }
    }
}

/// One loop as the shells' status shows it; persisted in `loopr.db`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopRecord {
    pub id: LoopId,
    #[serde(rename = "type")]
    pub loop_type: LoopType,
    pub parent: Option<LoopId>,
    pub status: LoopStatus,
    /// The newest iteration with a stored artifact; 0 before the first.
    pub iteration: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub error: Option<String>,
    pub task: String,
    /// The spec or phase name this loop was spawned for.
    pub name: Option<String>,
    /// The parent's artifact that spawned this loop, relative to the parent's loop directory,
    /// e.g. `iterations/001/artifacts/plan.json`.
    pub triggered_by: Option<String>,
    /// Names of sibling loops that must be complete before this one runs.
    pub depends_on: Vec<String>,
    /// Review passes the current artifact went through.
    pub review_passes: u32,
    /// The user's feedback for the next iteration (a revision's), until it is used.
    pub feedback: Option<String>,
    /// The settings the loop runs with, as JSON; children inherit them.
    pub settings: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
}

impl LoopRecord {
    /// A new loop, pending from now, with nothing spent yet.
    pub fn new_pending(loop_type: LoopType, task: &str, settings: String) -> LoopRecord {
        let now = now_rfc3339();
        LoopRecord {
            id: LoopId::generate(),
            loop_type,
            parent: None,
            status: LoopStatus::Pending,
            iteration: 0,
            tokens_in: 0,
            tokens_out: 0,
            error: None,
            task: task.to_owned(),
            name: None,
            triggered_by: None,
            depends_on: Vec::new(),
            review_passes: 0,
            feedback: None,
            settings,
            created_at: now.clone(),
            updated_at: now,
        }
    }

    /// The loop as a person calls it, its type then a plan's task (cut) or another loop's
    /// name: `plan "Add a --version flag"`, `phase "print-version"`. Both shells name loops
    /// so in their messages.
    pub fn label(&self) -> String {
        let named = match &self.name {
            Some(name) if !name.trim().is_empty() => name.trim().to_owned(),
            _ => {
                let task = self.task.trim();
                let mut cut: String = task.chars().take(LABEL_TASK_CHARS).collect();
                if cut.len() < task.len() {
                    cut.push('…');
                }
                cut
            }
        };
        format!("{} {named:?}", self.loop_type.as_str())
    }
}

/// A plan's task is cut to this many characters in a label, so a message stays one line.
const LABEL_TASK_CHARS: usize = 60;

pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back_and_sort_by_time() {
        let id = LoopId::generate();
        assert_eq!(LoopId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(id.as_str().len(), "20261121-233512-042-3f9c1b7e4d".len());
        assert!(
            LoopId::parse("20261121-233512-a3f9").is_some(),
            "old ids stay valid"
        );
    }

    #[test]
    fn ids_made_in_a_burst_are_unique_and_in_creation_order() {
        // A load run of the old scheme (seconds plus 16 random bits) collided about once in
        // 2,800 loops; a burst like this one collided every time.
        let ids: Vec<LoopId> = (0..50_000).map(|_| LoopId::generate()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(
            sorted, ids,
            "unique, and sorted in the order they were made"
        );
    }

    #[test]
    fn ids_from_threads_at_once_never_collide() {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..5_000).map(|_| LoopId::generate()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<LoopId> = handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("thread"))
            .collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count);
    }

    #[test]
    fn ids_that_could_escape_a_directory_are_rejected() {
        for bad in ["", "../x", "a/b", "a b", ".."] {
            assert_eq!(LoopId::parse(bad), None, "{bad:?}");
        }
    }
}
