//! Agent loops: a conversation with the model that runs tools until an artifact tool succeeds.
//! `LoopManager` starts, tracks and cancels loops and records them in the store; it reports
//! what happens as `LoopEvent`s to whatever shell listens (the Neovim bridge, or a CLI).

mod artifact_store;
mod events;
mod manager;
mod plan_loop;
mod progress;
mod prompts;
mod settings;

pub use events::{EventSink, LoopEvent};
pub use manager::{LoopManager, ManagerError, ProviderFactory, anthropic_from_env};
pub use plan_loop::LoopError;
pub use settings::LoopSettings;
