//! JSON schema to LuaCATS annotations (`---@class`, `---@field`, `---@alias`): the Lua
//! language server's view of what the host defines in Rust. General: any schemars schema
//! (settings, the wire's replies and events) and a class name give the lines.

use heck::ToUpperCamelCase;
use serde_json::Value;

use super::shape::{alternatives, choices, nullable, type_name};

/// Whether a class's fields may be left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optional {
    /// As the schema says: fields not `required` are optional.
    AsRequired,
    /// Every field (a table of options, each with a default).
    All,
    /// Only fields that may be `null` (a resolved configuration).
    Nullable,
}

/// The annotations of `schema`: one `---@class` (or `---@alias`) per definition in its
/// `$defs`, named `<namespace>.<Definition>`, then `class` for the schema itself.
pub fn luacats(schema: &Value, class: &str, namespace: &str) -> Vec<String> {
    let mut lines = definitions(schema, namespace);
    lines.extend(class_lines(schema, class, namespace, Optional::AsRequired));
    lines
}

/// The annotations of the definitions in `schema`'s `$defs`.
pub fn definitions(schema: &Value, namespace: &str) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
        let mut defs: Vec<(&String, &Value)> = defs.iter().collect();
        defs.sort_by_key(|(name, _)| *name);
        for (name, definition) in defs {
            let full = format!("{namespace}.{name}");
            lines.extend(class_lines(
                definition,
                &full,
                namespace,
                Optional::AsRequired,
            ));
        }
    }
    lines
}

/// The annotation of one definition: an alias for an enum or a union, a class for an object.
pub fn class_lines(node: &Value, class: &str, namespace: &str, optional: Optional) -> Vec<String> {
    let description = one_line(node.get("description"));
    if let Some(values) = choices(node) {
        let union = values
            .iter()
            .map(|v| format!("\"{v}\""))
            .collect::<Vec<_>>()
            .join("|");
        return vec![format!("---@alias {class} {union}")];
    }
    if node.get("properties").is_none()
        && let Some(variants) = alternatives(node)
    {
        // A tagged union: a class per variant, and the alias of them all.
        let mut lines = Vec::new();
        let mut names = Vec::new();
        for (index, variant) in variants.iter().enumerate() {
            let name = format!("{class}.{}", variant_name(variant, index));
            lines.extend(class_lines(variant, &name, namespace, optional));
            names.push(name);
        }
        lines.push(format!("---@alias {class} {}", names.join("|")));
        return lines;
    }
    let mut lines = vec![match description {
        Some(description) => format!("---@class {class} {description}"),
        None => format!("---@class {class}"),
    }];
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|all| all.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        // By name, whatever order serde_json keeps keys in.
        let mut properties: Vec<(&String, &Value)> = properties.iter().collect();
        properties.sort_by_key(|(name, _)| *name);
        for (name, property) in properties {
            let may_be_left_out = match optional {
                Optional::All => true,
                Optional::Nullable => nullable(property),
                Optional::AsRequired => !required.contains(&name.as_str()),
            };
            let mark = if may_be_left_out { "?" } else { "" };
            let mut lua_type = lua_type(property, namespace);
            // What may be given (not what is resolved): a boolean for a table it switches.
            if matches!(optional, Optional::All) && property.get("x-switch").is_some() {
                lua_type.push_str("|boolean");
            }
            let line = match one_line(property.get("description")) {
                Some(description) => format!("---@field {name}{mark} {lua_type} {description}"),
                None => format!("---@field {name}{mark} {lua_type}"),
            };
            lines.push(line);
        }
    }
    lines
}

/// The Lua type of a schema node: definitions by their class name.
pub fn lua_type(node: &Value, namespace: &str) -> String {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        // A definition named with its namespace already (`loopr.Spend`, `lsp.Location`).
        if name.contains('.') {
            return name.to_owned();
        }
        return format!("{namespace}.{name}");
    }
    if let Some(values) = choices(node) {
        return values
            .iter()
            .map(|v| format!("\"{v}\""))
            .collect::<Vec<_>>()
            .join("|");
    }
    if let Some(all) = alternatives(node) {
        let types: Vec<String> = all
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            .map(|a| lua_type(a, namespace))
            .collect();
        return types.join("|");
    }
    match type_name(node) {
        Some("boolean") => "boolean".to_owned(),
        Some("integer") => "integer".to_owned(),
        Some("number") => "number".to_owned(),
        Some("string") => "string".to_owned(),
        Some("array") => {
            let item = node
                .get("items")
                .map_or("any".to_owned(), |items| lua_type(items, namespace));
            if item.contains('|') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        Some("object") => match node.get("additionalProperties") {
            Some(value) if value.is_object() => {
                format!("table<string, {}>", lua_type(value, namespace))
            }
            _ => "table".to_owned(),
        },
        _ => "any".to_owned(),
    }
}

/// A variant's name: its tag's value (`{"kind": {"const": "loop_updated"}}` is
/// `LoopUpdated`), else its position.
fn variant_name(variant: &Value, index: usize) -> String {
    let tag = variant
        .get("properties")
        .and_then(Value::as_object)
        .and_then(|properties| {
            properties
                .values()
                .find_map(|p| p.get("const").and_then(Value::as_str))
        });
    match tag {
        Some(tag) => tag.to_upper_camel_case(),
        None => format!("Variant{index}"),
    }
}

/// A description on one line, as annotations take it.
fn one_line(description: Option<&Value>) -> Option<String> {
    let text = description?.as_str()?;
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!joined.is_empty()).then_some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_become_classes_and_enums_aliases() {
        let schema = json!({
            "type": "object",
            "description": "A thing.",
            "properties": {
                "mode": { "$ref": "#/$defs/Mode" },
                "count": { "type": ["integer", "null"], "description": "How many." },
                "names": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["mode"],
            "$defs": { "Mode": { "type": "string", "enum": ["ask", "auto"] } }
        });
        assert_eq!(
            luacats(&schema, "x.Thing", "x"),
            vec![
                "---@alias x.Mode \"ask\"|\"auto\"",
                "---@class x.Thing A thing.",
                "---@field count? integer How many.",
                "---@field mode x.Mode",
                "---@field names? string[]",
            ]
        );
    }
}
