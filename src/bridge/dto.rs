//! The shapes that cross the RPC boundary, and their conversion to and from msgpack values:
//! request parameters, replies and events, each in its own file.
//! A few core types go on the wire as they serialise (`LoopSettings` in the parameters,
//! `Standing`, MCP servers' status and the provider variables in replies), so a change to
//! their serde form is a change of the wire: the generated Lua types follow it.

mod events;
mod msgpack;
mod replies;
mod requests;

pub use events::*;
pub use msgpack::*;
pub use replies::*;
pub use requests::*;

/// A Lua table as msgpack sends it, for the tests.
#[cfg(test)]
pub(crate) fn lua_table(pairs: Vec<(&str, nvim_rs::Value)>) -> nvim_rs::Value {
    nvim_rs::Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (nvim_rs::Value::from(k), v))
            .collect(),
    )
}
