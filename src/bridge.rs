//! The Neovim shell: msgpack-RPC over stdio with nvim-rs. The only module that knows Neovim
//! or msgpack exists. Requests are answered at once, or, sent as `request` notifications,
//! through the queue that pushes loop events to Lua.

mod buffers;
mod dto;
mod editor_options;
mod event_pump;
pub mod generate;
mod handler;
mod host_state;
mod lua_call;
mod request_table;
mod transcript_pump;
mod wire_schemas;
mod words;

// For the contract tests, which call Lua exactly as the host does.
pub use buffers::{
    apply_edit, apply_edit_within, check_buffer, reload_buffers, unsaved_buffer_text,
};
pub use event_pump::{Delivery, deliver_event, deliver_reply};
pub use request_table::documented_requests;
pub use transcript_pump::deliver_transcript;
pub use wire_schemas::wire_schemas;

use std::path::PathBuf;
use std::sync::Arc;

/// The wire protocol's version as a literal, so `VERSION_LINE` can be put together at
/// compile time (`concat!` takes only literals).
macro_rules! protocol_version {
    () => {
        1
    };
}

/// The version of the wire between the host and its Lua side: the requests, their
/// parameters and replies, and the events. Raised with any change one side would misread;
/// the Lua side refuses a host that reports another (`lua/loopr/generated/version.lua`).
pub const PROTOCOL_VERSION: u32 = protocol_version!();

/// What `loopr --version` prints after the name: `0.1.0 (protocol 1)`.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (protocol ",
    protocol_version!(),
    ")"
);

use anyhow::Context;

use crate::agent::{InteractiveApprover, LoopManager, OnOpen, ProviderFactory, ShellServices};
use crate::llm::SharedEnv;

pub struct HostOptions {
    pub loopr_home: PathBuf,
    pub provider_factory: ProviderFactory,
    /// What `provider_factory` reads; the `credentials` request replaces them.
    pub credentials: SharedEnv,
    /// Enables requests that exist only for tests (`__panic`).
    pub test_hooks: bool,
}

/// Serves Neovim on stdin/stdout until it closes the channel, then stops running loops so the
/// next host resumes them.
pub async fn serve_neovim(options: HostOptions) -> anyhow::Result<()> {
    let (outgoing, outgoing_receiver) = event_pump::OutgoingQueue::new();
    let events: Arc<dyn crate::agent::EventSink> = Arc::new(outgoing.clone());
    let approvals = Arc::new(InteractiveApprover::new(events.clone()));
    let buffers = buffers::NeovimBuffers::default();
    let (transcript_sender, transcript_receiver) = tokio::sync::mpsc::unbounded_channel();
    let manager = LoopManager::new(
        options.loopr_home,
        events,
        options.provider_factory,
        ShellServices {
            approver: approvals.clone(),
            buffers: Arc::new(buffers.clone()),
            // The editor picks up what a host that is gone left: on the plugin's `resume` at
            // start, else on the first request for the project.
            on_open: OnOpen::ResumeInterrupted,
        },
    );
    let handler = handler::RpcHandler::new(host_state::HostState::new(
        manager.clone(),
        approvals,
        options.credentials,
        transcript_sender,
        outgoing,
        options.test_hooks,
    ));
    let (neovim, io_handle) = nvim_rs::create::tokio::new_parent(handler)
        .await
        .context("connecting to Neovim over stdio")?;
    buffers.connect(neovim.clone());
    let transcript_pump = tokio::spawn(transcript_pump::forward_transcripts(
        neovim.clone(),
        transcript_receiver,
    ));
    let pump = tokio::spawn(event_pump::forward_events(neovim, outgoing_receiver));
    let io_result = io_handle.await;
    manager.shut_down();
    pump.abort();
    transcript_pump.abort();
    match io_result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) if err.is_channel_closed() => {
            tracing::info!("Neovim closed the channel; exiting");
            Ok(())
        }
        Ok(Err(err)) => Err(anyhow::anyhow!("RPC connection failed: {err}")),
        Err(err) => Err(anyhow::anyhow!("RPC task failed: {err}")),
    }
}
