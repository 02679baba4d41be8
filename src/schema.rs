//! JSON Schemas for tool inputs, generated from the Rust input types so the schema the model
//! sees and the type the host parses cannot drift apart.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The schema of `T` as a self-contained object schema: subschemas inlined (no `$ref`), no
/// `$schema` or `title` keys, which tool definitions do not need.
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// One problem with a tool input: where (`specs[1].name`) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputIssue {
    pub location: String,
    pub message: String,
    /// The JSON Schema keyword that failed (`required`, `pattern`, ...), empty for rules
    /// checked outside the schema.
    pub keyword: String,
}

impl InputIssue {
    pub fn rule(location: impl Into<String>, message: impl Into<String>) -> InputIssue {
        InputIssue {
            location: location.into(),
            message: message.into(),
            keyword: String::new(),
        }
    }
}

/// Checks `instance` against `schema`, listing every violation with a readable location.
pub fn schema_issues(schema: &Value, instance: &Value) -> Vec<InputIssue> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(validator) => validator,
        Err(err) => {
            return vec![InputIssue::rule(
                "(schema)",
                format!("the host's own schema is invalid: {err}"),
            )];
        }
    };
    validator
        .iter_errors(instance)
        .map(|error| InputIssue {
            location: readable_location(error.instance_path().as_str()),
            message: error.to_string(),
            keyword: error.kind().keyword().to_owned(),
        })
        .collect()
}

/// `/specs/1/dependencies/0` → `specs[1].dependencies[0]`; the root is `input`.
pub fn readable_location(pointer: &str) -> String {
    let mut location = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.chars().all(|c| c.is_ascii_digit()) && !segment.is_empty() {
            location.push_str(&format!("[{segment}]"));
        } else {
            if !location.is_empty() {
                location.push('.');
            }
            location.push_str(&segment);
        }
    }
    if location.is_empty() {
        "input".to_owned()
    } else {
        location
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_read_like_field_paths() {
        assert_eq!(readable_location(""), "input");
        assert_eq!(
            readable_location("/specs/1/dependencies/0"),
            "specs[1].dependencies[0]"
        );
        assert_eq!(readable_location("/title"), "title");
    }
}
