//! The nvim-rs handler: hands Neovim's requests and notifications to the request table,
//! with the host's state.

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};

use super::host_state::HostState;
use super::request_table::{self, find_notification};

type Writer = Compat<tokio::fs::File>;

#[derive(Clone)]
pub struct RpcHandler(HostState);

impl RpcHandler {
    pub fn new(state: HostState) -> RpcHandler {
        RpcHandler(state)
    }
}

#[async_trait]
impl Handler for RpcHandler {
    type Writer = Writer;

    async fn handle_request(
        &self,
        name: String,
        args: Vec<Value>,
        _neovim: Neovim<Writer>,
    ) -> Result<Value, Value> {
        request_table::answer(&self.0, name, args)
            .await
            .map_err(Value::from)
    }

    /// nvim-rs awaits this before it reads the next message, which keeps notifications in
    /// the order Lua sent them: credentials are in place before the request sent after them
    /// starts. Nothing here waits.
    async fn handle_notify(&self, name: String, args: Vec<Value>, _neovim: Neovim<Writer>) {
        tracing::debug!(notification = %name, "notification");
        match find_notification(&name) {
            Some(spec) => request_table::notify(&self.0, spec, args),
            None => tracing::warn!(notification = %name, "unknown notification; ignored"),
        }
    }
}
