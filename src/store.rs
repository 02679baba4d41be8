//! Durable state under `$LOOPR_HOME`: the per-project directory layout, atomic file writes and
//! the SQLite database of loop records.

mod atomic;
mod db;
mod layout;
mod records;

pub use atomic::{replace_symlink, write_atomic};
pub use db::{LoopDb, StoreError};
pub use layout::{ProjectLayout, loopr_home_from_env};
pub use records::{LoopId, LoopRecord, LoopStatus, LoopType, now_rfc3339};
