//! The shapes that cross the RPC boundary, and their conversion to and from msgpack values:
//! request parameters, replies and events, each in its own file.
//! Core types are not serialised directly, so the wire format changes only here.

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
