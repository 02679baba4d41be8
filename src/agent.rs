//! Agent loops: conversations with the model that run tools until an artifact tool succeeds.
//! `LoopManager` creates, schedules, approves, revises and cancels loops and records them in
//! the store; it reports what happens as `LoopEvent`s to whatever shell listens (the Neovim
//! bridge, or the command line).

mod agent_client;
mod approvals;
mod artifact_loop;
mod artifact_store;
mod ask_limits;
mod baseline;
mod checkpoint;
mod code_loop;
mod context;
mod context_budget;
mod coverage;
mod current_agents;
mod cut_off;
mod events;
mod export;
mod failure_locations;
#[cfg(test)]
mod first_requests;
mod jobs;
mod journal;
mod limits;
mod loop_names;
mod manager;
mod phase_commit;
mod phases;
mod plan_run;
mod plan_tree;
mod policy_cache;
mod progress;
mod prompts;
mod repetition;
mod rules;
mod settings;
mod short_text;
mod task_progress;
mod tasks;
mod transcript;
mod tree_ready;
mod turn;
mod verification;
mod verification_text;
mod verify_on_demand;

pub use approvals::{ApprovalMode, ApprovalSettings, InteractiveApprover, PolicyApprover};
pub use baseline::{Baseline, ChangeStatus, ChangedHunk, FileDiff, SkipReason, UndoReport};
pub use context::LoopError;
pub use coverage::{LoopCoverage, RequirementPlace, RequirementsLeft, coverage_by_loop};
pub use events::{AgentPlanEntry, EventSink, LoopEvent, NoticeLevel};
pub use failure_locations::FailureLocation;
pub use limits::{Limits, Window, fit_limits};
pub use loop_names::{plan_name, shortest_name};
pub use manager::{
    Cancelled, LoopManager, ManagerError, OnOpen, ProviderFactory, ResumeCounts, RewindReport,
    ShellServices, Spend, Started, StatusRow, provider_factory,
};
pub use phases::PhaseLookupError;
pub use progress::approximate_tokens;
pub use rules::{ProjectRules, RefusedRules, project_rules};
pub use settings::{LevelModels, LoopSettings, MODEL_LEVELS, settings_schema};
pub use tasks::{PhaseSelector, PhaseTasks, TaskList, TaskPlace};
pub use transcript::{TranscriptHub, TranscriptText, stored_transcript};
pub use tree_ready::TreeReady;
pub use verification::first_request_tokens;
pub use verification_text::{finding_text, findings_counted};
