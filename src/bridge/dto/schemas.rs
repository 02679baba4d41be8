//! The JSON schemas of the replies and events, named as the Lua side names their classes,
//! from which the LuaCATS annotations are generated.

use schemars::{JsonSchema, Schema, schema_for};

use super::events::EventMessage;
use super::replies::{
    ChangeItemReply, ChangesReply, LoopIdReply, LoopRecordReply, McpProbeReply, PhaseTasksReply,
    RefusedRulesReply, ResumeReply, RulesReply, SkippedFileReply, SpendReply, TaskItemReply,
    TaskUserData, TasksReply, TranscriptReply, UndoReply,
};

/// Every reply and event class: its LuaCATS name and its schema. A class nested in another
/// is listed too; `$ref`s name their target by its LuaCATS name (`lsp.*` ones are Neovim's).
pub fn wire_schemas() -> Vec<(&'static str, Schema)> {
    let mut schemas = vec![
        named::<LoopRecordReply>(),
        named::<SpendReply>(),
        named::<LoopIdReply>(),
        named::<ResumeReply>(),
        named::<TranscriptReply>(),
        named::<ChangesReply>(),
        named::<ChangeItemReply>(),
        named::<UndoReply>(),
        named::<SkippedFileReply>(),
        named::<TasksReply>(),
        named::<PhaseTasksReply>(),
        named::<TaskItemReply>(),
        named::<TaskUserData>(),
        named::<RulesReply>(),
        named::<RefusedRulesReply>(),
        named::<McpProbeReply>(),
        (
            "loopr.McpServerStatus",
            schema_for!(crate::mcp::ServerStatus),
        ),
    ];
    schemas.extend(event_schemas());
    schemas
}

/// A bridge type's schema under the name its `#[schemars(rename)]` gives it.
fn named<T: JsonSchema>() -> (&'static str, Schema) {
    let name: &'static str = match T::schema_name() {
        std::borrow::Cow::Borrowed(name) => name,
        std::borrow::Cow::Owned(name) => Box::leak(name.into_boxed_str()),
    };
    (name, schema_for!(T))
}

/// `loopr.Event`, which names every event, then one class per event (`loop_updated` is
/// `loopr.LoopUpdatedEvent`), each with its `event` field.
fn event_schemas() -> Vec<(&'static str, Schema)> {
    let all = schema_for!(EventMessage);
    let variants = all
        .get("oneOf")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut tags = Vec::new();
    let mut schemas = Vec::new();
    for variant in variants {
        let Some(tag) = variant
            .pointer("/properties/event/const")
            .and_then(serde_json::Value::as_str)
        else {
            continue;
        };
        tags.push(tag.to_owned());
        let name: &'static str = Box::leak(format!("loopr.{}Event", camel_case(tag)).into());
        if let Ok(schema) = Schema::try_from(variant) {
            schemas.push((name, schema));
        }
    }
    let base = serde_json::json!({
        "type": "object",
        "description": "An event as `require('loopr.events').dispatch` receives it.",
        "properties": { "event": { "type": "string", "enum": tags } },
        "required": ["event"],
    });
    if let Ok(schema) = Schema::try_from(base) {
        schemas.insert(0, ("loopr.Event", schema));
    }
    schemas
}

fn camel_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}
