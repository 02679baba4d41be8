//! Durable state under `$LOOPR_HOME`: the per-project directory layout, atomic file writes and
//! the SQLite database of loop records.

mod append_log;
mod atomic;
mod db;
mod host_lock;
mod layout;
mod leftovers;
mod records;
mod rules;
mod stored_settings;

pub use append_log::{AppendLog, LogLines};
pub use atomic::{
    make_durable, replace_symlink, write_atomic, write_atomic_keeping_mode, write_atomic_unsynced,
    write_new_files,
};
pub use db::{
    CancelledTree, CodeLoopRefused, Held, LoopDb, Paused, PlanRun, PlanRunState, Refused,
    StatusChange, StoreError, TreeSpend, WentOn,
};
pub use host_lock::{HostLock, host_is_alive};
pub use layout::{ProjectLayout, loopr_home_from_env};
pub use leftovers::{remove_if_leftover, sweep_state_dir};
pub use records::{LoopId, LoopRecord, LoopStatus, LoopType, now_rfc3339};
pub use rules::{
    Awaited, Purpose, REWOUND_NOTE_PREFIX, Standing, UNDONE_NOTE_PREFIX, approvable, awaited,
    awaits_approval, code_turn_holder, default_retry, held_at_budget, holds_working_tree, note,
    retried_with, retryable, rewound, runnable_phase, runs_as_a_tree, shown_status, siblings,
    tree_work, undone, verifiable, waits_for_budget, waits_for_commit, work_stands,
};
