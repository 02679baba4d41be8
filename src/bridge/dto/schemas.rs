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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The fields of every `---@class loopr.*` the Lua sources declare by hand, by class.
    fn lua_classes() -> BTreeMap<String, BTreeSet<String>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/loopr");
        let mut classes = BTreeMap::new();
        for entry in std::fs::read_dir(dir).expect("read the Lua sources") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
            let mut current: Option<String> = None;
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("---@class ") {
                    let name = rest.split([' ', ':']).next().unwrap_or_default().to_owned();
                    classes.insert(name.clone(), BTreeSet::new());
                    current = Some(name);
                } else if let Some(rest) = line.strip_prefix("---@field ") {
                    let field = rest.split([' ', '?']).next().unwrap_or_default().to_owned();
                    if let Some(fields) = current.as_ref().and_then(|name| classes.get_mut(name)) {
                        fields.insert(field);
                    }
                } else {
                    current = None;
                }
            }
        }
        classes
    }

    fn properties(schema: &Schema) -> BTreeSet<String> {
        schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|fields| fields.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The generated annotations are a drop-in: a class Lua declares today has the fields the
    /// host sends.
    #[test]
    fn the_schemas_have_the_fields_of_the_classes_lua_declares() {
        let lua = lua_classes();
        let schemas = wire_schemas();
        let mut names: Vec<&str> = schemas.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), schemas.len(), "a class is listed twice");
        let mut differing = Vec::new();
        for (name, schema) in &schemas {
            assert!(name.starts_with("loopr."), "{name}");
            let Some(declared) = lua.get(*name) else {
                continue;
            };
            let mut sent = properties(schema);
            if name.ends_with("Event") && *name != "loopr.Event" {
                // Lua declares `event` once, on `loopr.Event`, which each event extends.
                sent.remove("event");
            }
            if &sent != declared {
                differing.push(format!("{name}: Lua {declared:?}, host {sent:?}"));
            }
        }
        assert!(differing.is_empty(), "{}", differing.join("\n"));
        // Every event has its class, and Lua declares each of them today.
        let events: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| name.ends_with("Event"))
            .collect();
        assert_eq!(events.len(), 8, "{events:?}");
        for name in events {
            assert!(lua.contains_key(name), "{name} is not a Lua class");
        }
    }
}
