//! The JSON schemas of the replies and events, named as the Lua side names their classes,
//! from which the LuaCATS annotations are generated. The replies are those of the request
//! table, so a new request's reply is here without a line more. It stands beside
//! `dto/` (the shapes) and the table rather than in either, since it reads both.

use heck::ToUpperCamelCase;
use schemars::{Schema, SchemaGenerator};

use super::dto::EventMessage;

/// Core types a reply holds, by the name schemars gives them, and their LuaCATS class.
const CORE_CLASSES: &[(&str, &str)] = &[
    ("ServerStatus", "loopr.McpServerStatus"),
    ("ProviderVariables", "loopr.ProviderVariables"),
];

/// Every class the replies and events hold: its LuaCATS name and its schema. A `$ref` names
/// its target by the LuaCATS name (`#/$defs/loopr.Spend`), which is in the list too, except
/// `lsp.*` ones, which are Neovim's own.
pub fn wire_schemas() -> Vec<(&'static str, Schema)> {
    let mut generator = SchemaGenerator::default();
    super::request_table::reply_schemas(&mut generator);
    let event = generator.subschema_for::<EventMessage>();
    let mut schemas = Vec::new();
    let definitions =
        crate::schema::keys_sorted(serde_json::Value::Object(generator.take_definitions(true)));
    let serde_json::Value::Object(definitions) = definitions else {
        return Vec::new();
    };
    for (name, schema) in definitions {
        let class = CORE_CLASSES
            .iter()
            .find(|(core, _)| *core == name)
            .map_or(name.as_str(), |(_, class)| class);
        if class.starts_with("lsp.") || Some(class) == event_name(&event).as_deref() {
            continue;
        }
        if let Ok(schema) = Schema::try_from(schema) {
            schemas.push((interned(class), schema));
        }
    }
    schemas.extend(event_schemas());
    schemas
}

/// The definition a `$ref` schema points to.
fn event_name(reference: &Schema) -> Option<String> {
    reference
        .get("$ref")
        .and_then(serde_json::Value::as_str)
        .and_then(|target| target.rsplit('/').next())
        .map(str::to_owned)
}

/// `loopr.Event`, which names every event, then one class per event (`loop_updated` is
/// `loopr.LoopUpdatedEvent`), each with its `event` field.
fn event_schemas() -> Vec<(&'static str, Schema)> {
    let all = schemars::schema_for!(EventMessage);
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
        let name = interned(&format!("loopr.{}Event", tag.to_upper_camel_case()));
        if let Ok(schema) = Schema::try_from(crate::schema::keys_sorted(variant)) {
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

/// `name` for as long as the program runs, made once for all calls.
fn interned(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = names.iter().find(|known| **known == name) {
        return known;
    }
    let made: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(made);
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every class the host sends is in the list once, the request table's replies, nested
    /// classes, core types and each event among them, all in Lua's namespace.
    #[test]
    fn every_reply_and_event_has_one_class() {
        let schemas = wire_schemas();
        let mut names: Vec<&str> = schemas.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), schemas.len(), "a class is listed twice");
        for expected in [
            "loopr.LoopRecord",
            "loopr.Spend",
            "loopr.TaskUserData",
            "loopr.ProviderReply",
            "loopr.ProviderVariables",
            "loopr.McpServerStatus",
        ] {
            assert!(names.contains(&expected), "{expected} not in {names:?}");
        }
        assert!(
            names.iter().all(|name| name.starts_with("loopr.")),
            "{names:?}"
        );
        let events = names.iter().filter(|name| name.ends_with("Event")).count();
        assert_eq!(events, 12, "{names:?}");
    }

    /// The classes are generated (`lua/loopr/generated/wire.lua`); a hand-written copy in
    /// the Lua sources would drift from them.
    #[test]
    fn no_lua_source_declares_a_class_of_the_wire_by_hand() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/loopr");
        let generated: Vec<&str> = wire_schemas().iter().map(|(name, _)| *name).collect();
        let mut copies = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read the Lua sources") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("---@class ") {
                    let name = rest.split([' ', ':']).next().unwrap_or_default();
                    if generated.contains(&name) {
                        copies.push(format!("{}: {name}", path.display()));
                    }
                }
            }
        }
        assert!(
            copies.is_empty(),
            "declared by hand, generated already: {copies:?}"
        );
    }
}
