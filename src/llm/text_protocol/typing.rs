//! YAML nodes typed by the tool's JSON Schema: a field typed string keeps its text as written
//! (`no`, `on`, `1.10`, `007`), integers, numbers and booleans are parsed where the schema
//! asks for them, and anything the schema does not type is read as YAML 1.2's core schema
//! reads it.

use saphyr_parser::ScalarStyle;
use serde_json::{Map, Number, Value};

use super::yaml::Node;
use crate::schema::schema_issues;

/// A value that does not parse as the type its field has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TypeIssue {
    pub(super) location: String,
    pub(super) message: String,
}

pub(super) fn typed(
    node: &Node,
    schema: Option<&Value>,
    location: &str,
    issues: &mut Vec<TypeIssue>,
) -> Value {
    let Some(schema) = schema else {
        return untyped(node, location, issues);
    };
    let types = schema_types(schema);
    if types.is_empty()
        && let Some(value) = first_fitting_alternative(node, schema, location)
    {
        return value;
    }
    match node {
        Node::Scalar { text, style } => typed_scalar(text, *style, &types, location, issues)
            .unwrap_or_else(|| untyped(node, location, issues)),
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    let item_schema = schema
                        .get("prefixItems")
                        .and_then(|prefix| prefix.get(index))
                        .or_else(|| schema.get("items").filter(|items| items.is_object()));
                    typed(item, item_schema, &format!("{location}[{index}]"), issues)
                })
                .collect(),
        ),
        Node::Map(entries) => typed_map(entries, Some(schema), location, issues),
    }
}

/// The types a schema allows: its `type`, else the types of its `const` or `enum` values.
fn schema_types(schema: &Value) -> Vec<&'static str> {
    let named = |name: &str| -> Option<&'static str> {
        [
            "null", "boolean", "integer", "number", "string", "array", "object",
        ]
        .into_iter()
        .find(|known| *known == name)
    };
    match schema.get("type") {
        Some(Value::String(name)) => return named(name).into_iter().collect(),
        Some(Value::Array(names)) => {
            return names
                .iter()
                .filter_map(Value::as_str)
                .filter_map(named)
                .collect();
        }
        _ => {}
    }
    let values: Vec<&Value> = match (schema.get("const"), schema.get("enum")) {
        (Some(value), _) => vec![value],
        (None, Some(Value::Array(values))) => values.iter().collect(),
        _ => Vec::new(),
    };
    let mut types = Vec::new();
    for value in values {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(number) if number.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        if !types.contains(&kind) {
            types.push(kind);
        }
    }
    types
}

/// For `anyOf` / `oneOf`: the value as the first alternative it is valid under types it.
fn first_fitting_alternative(node: &Node, schema: &Value, location: &str) -> Option<Value> {
    let alternatives = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)?;
    alternatives.iter().find_map(|alternative| {
        let mut issues = Vec::new();
        let value = typed(node, Some(alternative), location, &mut issues);
        (issues.is_empty() && schema_issues(alternative, &value).is_empty()).then_some(value)
    })
}

/// `None` when the schema allows no scalar type: the value is then read untyped and the
/// schema check names the mismatch.
fn typed_scalar(
    text: &str,
    style: ScalarStyle,
    types: &[&str],
    location: &str,
    issues: &mut Vec<TypeIssue>,
) -> Option<Value> {
    let scalar_types: Vec<&str> = types
        .iter()
        .copied()
        .filter(|t| !matches!(*t, "array" | "object"))
        .collect();
    if scalar_types.is_empty() {
        return None;
    }
    let plain = style == ScalarStyle::Plain;
    if plain && scalar_types.contains(&"null") && is_null_text(text) {
        return Some(Value::Null);
    }
    if scalar_types.contains(&"string") {
        return Some(Value::String(text.to_owned()));
    }
    let trimmed = text.trim();
    if scalar_types.contains(&"boolean")
        && let Some(value) = parse_bool(trimmed)
    {
        return Some(Value::Bool(value));
    }
    if (scalar_types.contains(&"integer") || scalar_types.contains(&"number"))
        && let Some(value) = parse_integer(trimmed)
    {
        return Some(value);
    }
    if scalar_types.contains(&"number")
        && let Some(value) = parse_float(trimmed)
    {
        return Some(value);
    }
    let wanted: Vec<String> = scalar_types.iter().map(|t| describe_type(t)).collect();
    issues.push(TypeIssue {
        location: location.to_owned(),
        message: format!("`{text}` is not {}", wanted.join(" or ")),
    });
    Some(Value::String(text.to_owned()))
}

fn describe_type(name: &str) -> String {
    match name {
        "boolean" => "a boolean (true or false)".to_owned(),
        "integer" => "an integer".to_owned(),
        "number" => "a number".to_owned(),
        "null" => "null".to_owned(),
        other => format!("a {other}"),
    }
}

fn typed_map(
    entries: &[(Node, Node)],
    schema: Option<&Value>,
    location: &str,
    issues: &mut Vec<TypeIssue>,
) -> Value {
    let mut object = Map::new();
    for (key, value) in entries {
        let Node::Scalar { text: key, .. } = key else {
            issues.push(TypeIssue {
                location: location.to_owned(),
                message: "a key is not a plain name".to_owned(),
            });
            continue;
        };
        let field = if location == "input" {
            key.clone()
        } else {
            format!("{location}.{key}")
        };
        if object.contains_key(key) {
            issues.push(TypeIssue {
                location: field,
                message: "is given twice".to_owned(),
            });
            continue;
        }
        let field_schema = schema.and_then(|schema| {
            schema
                .get("properties")
                .and_then(|properties| properties.get(key))
                .or_else(|| {
                    schema
                        .get("additionalProperties")
                        .filter(|additional| additional.is_object())
                })
        });
        let value = typed(value, field_schema, &field, issues);
        object.insert(key.clone(), value);
    }
    Value::Object(object)
}

/// A node the schema does not type, read as YAML 1.2's core schema reads it.
fn untyped(node: &Node, location: &str, issues: &mut Vec<TypeIssue>) -> Value {
    match node {
        Node::Scalar { text, style } => {
            if *style != ScalarStyle::Plain {
                return Value::String(text.clone());
            }
            if is_null_text(text) {
                return Value::Null;
            }
            parse_bool(text)
                .map(Value::Bool)
                .or_else(|| parse_integer(text))
                .or_else(|| parse_float(text))
                .unwrap_or_else(|| Value::String(text.clone()))
        }
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| untyped(item, &format!("{location}[{index}]"), issues))
                .collect(),
        ),
        Node::Map(entries) => typed_map(entries, None, location, issues),
    }
}

fn is_null_text(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// YAML 1.2 core integers: decimal with an optional sign, `0o` octal, `0x` hexadecimal.
fn parse_integer(text: &str) -> Option<Value> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (radix, digits) = if let Some(octal) = digits.strip_prefix("0o") {
        (8, octal)
    } else if let Some(hex) = digits.strip_prefix("0x") {
        (16, hex)
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        let value = 0i64.checked_sub_unsigned(magnitude)?;
        Some(Value::Number(value.into()))
    } else {
        Some(Value::Number(magnitude.into()))
    }
}

/// Finite decimal numbers only: JSON has no infinity or NaN.
fn parse_float(text: &str) -> Option<Value> {
    let shaped = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && text.chars().any(|c| c.is_ascii_digit());
    if !shaped {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    Number::from_f64(value).map(Value::Number)
}

/// Whether a plain scalar with this text is a string even where no schema types it.
pub(super) fn reads_as_string(text: &str) -> bool {
    !is_null_text(text)
        && parse_bool(text).is_none()
        && parse_integer(text).is_none()
        && parse_float(text).is_none()
}
