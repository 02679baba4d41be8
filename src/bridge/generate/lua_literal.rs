//! JSON values written as Lua table constructors, for generated Lua and the help's
//! examples; `null` is nil (left out of tables).

use serde_json::Value;

use super::shape::number;

/// How strings are quoted: generated Lua uses single quotes, the help double ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quote {
    Single,
    Double,
}

/// `value` as Lua, on one line where it fits in `width` columns (after `indent`), else
/// spread over lines indented from `indent`.
pub fn lua(value: &Value, indent: usize, width: usize, quote: Quote) -> String {
    let inline = inline(value, quote);
    if inline.len() + indent <= width || !is_table(value) {
        return inline;
    }
    let inner = " ".repeat(indent + 2);
    let items: Vec<String> = match value {
        Value::Array(items) => items
            .iter()
            .map(|item| format!("{inner}{},", lua(item, indent + 2, width, quote)))
            .collect(),
        Value::Object(fields) => sorted(fields)
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(key, v)| {
                let key = key_of(key, quote);
                format!("{inner}{key} = {},", lua(v, indent + 2, width, quote))
            })
            .collect(),
        _ => Vec::new(),
    };
    format!("{{\n{}\n{}}}", items.join("\n"), " ".repeat(indent))
}

/// A table's fields by name, whatever order `serde_json` keeps them in.
fn sorted(fields: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut fields: Vec<(&String, &Value)> = fields.iter().collect();
    fields.sort_by_key(|(key, _)| *key);
    fields
}

/// `value` as Lua on one line.
pub fn inline(value: &Value, quote: Quote) -> String {
    match value {
        Value::Null => "nil".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => number(value),
        Value::String(s) => string(s, quote),
        Value::Array(items) if items.is_empty() => "{}".to_owned(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|item| inline(item, quote)).collect();
            format!("{{ {} }}", items.join(", "))
        }
        Value::Object(fields) => {
            let items: Vec<String> = sorted(fields)
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(key, v)| format!("{} = {}", key_of(key, quote), inline(v, quote)))
                .collect();
            if items.is_empty() {
                "{}".to_owned()
            } else {
                format!("{{ {} }}", items.join(", "))
            }
        }
    }
}

/// A Lua string literal. Single quotes give way to double ones for a text holding more of
/// the first than of the second (fewer escapes), as StyLua's `AutoPreferSingle` writes it
/// (`scripts/fmt.sh` then changes nothing).
pub fn string(text: &str, quote: Quote) -> String {
    let count = |mark| text.chars().filter(|c| *c == mark).count();
    let mark = match quote {
        Quote::Single if count('\'') > count('"') => '"',
        Quote::Single => '\'',
        Quote::Double => '"',
    };
    let escaped = text
        .replace('\\', "\\\\")
        .replace(mark, &format!("\\{mark}"))
        .replace('\n', "\\n");
    format!("{mark}{escaped}{mark}")
}

fn key_of(key: &str, quote: Quote) -> String {
    let identifier = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if identifier {
        key.to_owned()
    } else {
        format!("[{}]", string(key, quote))
    }
}

fn is_table(value: &Value) -> bool {
    matches!(value, Value::Array(_) | Value::Object(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_strings_and_nil_read_as_lua() {
        assert_eq!(
            inline(
                &json!({ "a-b": [1, "it's"], "c": null, "d": {} }),
                Quote::Single
            ),
            "{ ['a-b'] = { 1, \"it's\" }, d = {} }"
        );
        assert_eq!(
            inline(&json!("say \"hi\""), Quote::Double),
            "\"say \\\"hi\\\"\""
        );
        assert_eq!(inline(&json!(2.5), Quote::Single), "2.5");
    }

    #[test]
    fn the_quote_needing_fewer_escapes_is_chosen_as_stylua_does() {
        assert_eq!(
            string("a plan's, spec's, phase's (`\"code\"`)", Quote::Single),
            "\"a plan's, spec's, phase's (`\\\"code\\\"`)\""
        );
        assert_eq!(
            string("it's \"x\" and \"y\"", Quote::Single),
            "'it\\'s \"x\" and \"y\"'"
        );
    }
}
