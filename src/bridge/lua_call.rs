//! Calls into Neovim's Lua with a time limit that does not break the channel.

use std::time::Duration;

use futures::io::AsyncWrite;
use nvim_rs::error::CallError;
use nvim_rs::{Neovim, Value};

/// Calls `code` with `args` in Neovim; `None` when no answer came within `timeout` (Neovim is
/// blocked, at a prompt say). The call itself goes on in its own task until the answer comes:
/// nvim-rs 0.9 ends its whole RPC loop when an answer arrives for a call nobody waits for any
/// more, so dropping a timed-out call would cut the host off from Neovim once it answers.
pub async fn exec_lua_within<W>(
    neovim: &Neovim<W>,
    code: &'static str,
    args: Vec<Value>,
    timeout: Duration,
) -> Option<Result<Value, Box<CallError>>>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let neovim = neovim.clone();
    let call = tokio::spawn(async move { neovim.exec_lua(code, args).await });
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(crashed)) => {
            tracing::warn!(error = %crashed, "a call into Neovim crashed");
            None
        }
        Err(_) => None,
    }
}
