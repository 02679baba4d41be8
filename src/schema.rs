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

/// Where a schema is registered with the validator, which never fetches it: every schema
/// here is self-contained.
const SCHEMA_LOCATION: &str = "urn:loopr:input-schema";

/// Checks `instance` against `schema`, listing every violation with a readable location.
pub fn schema_issues(schema: &Value, instance: &Value) -> Vec<InputIssue> {
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    let invalid = |err: boon::CompileError| {
        vec![InputIssue::rule(
            "(schema)",
            format!("the host's own schema is invalid: {err}"),
        )]
    };
    if let Err(err) = compiler.add_resource(SCHEMA_LOCATION, schema.clone()) {
        return invalid(err);
    }
    let index = match compiler.compile(SCHEMA_LOCATION, &mut schemas) {
        Ok(index) => index,
        Err(err) => return invalid(err),
    };
    let mut issues = Vec::new();
    if let Err(error) = schemas.validate(instance, index) {
        collect_issues(&error, instance, &mut issues);
    }
    issues
}

/// The validator reports a tree: schema, `$ref` and `allOf` nodes only group the failures of
/// their parts, which are the issues. `anyOf`/`oneOf` stay one issue: listing why each
/// alternative failed would mostly describe alternatives the caller did not mean.
fn collect_issues(error: &boon::ValidationError, instance: &Value, issues: &mut Vec<InputIssue>) {
    use boon::ErrorKind;
    let grouping = matches!(
        error.kind,
        ErrorKind::Group
            | ErrorKind::Schema { .. }
            | ErrorKind::Reference { .. }
            | ErrorKind::AllOf
    );
    if grouping && !error.causes.is_empty() {
        for cause in &error.causes {
            collect_issues(cause, instance, issues);
        }
        return;
    }
    let pointer = error.instance_location.to_string();
    let location = readable_location(&pointer);
    // One issue per missing property, so that the count in a report is the count of fixes.
    if let ErrorKind::Required { want } = &error.kind {
        issues.extend(want.iter().map(|name| InputIssue {
            location: location.clone(),
            message: format!("{name:?} is a required property"),
            keyword: "required".to_owned(),
        }));
        return;
    }
    let value = instance.pointer(&pointer).unwrap_or(&Value::Null);
    issues.push(InputIssue {
        location,
        message: describe(&error.kind, value),
        keyword: keyword(&error.kind).to_owned(),
    });
}

/// The JSON Schema keyword that failed; what the advice in artifact reports is chosen by.
fn keyword(kind: &boon::ErrorKind) -> &'static str {
    use boon::ErrorKind;
    match kind {
        // boon names this keyword in the singular.
        ErrorKind::AdditionalProperties { .. } => "additionalProperties",
        ErrorKind::FalseSchema => "false",
        other => other.keyword_path().map_or("", |path| path.keyword),
    }
}

/// One failure in words: the offending value (shortened), then what the schema wants.
fn describe(kind: &boon::ErrorKind, value: &Value) -> String {
    use boon::ErrorKind;
    let shown = shorten(value);
    let plural = |count: usize, one: &str, many: &str| {
        format!("{count} {}", if count == 1 { one } else { many })
    };
    match kind {
        ErrorKind::AdditionalProperties { got } => {
            let names: Vec<String> = got.iter().map(|name| format!("'{name}'")).collect();
            let verb = if names.len() == 1 { "was" } else { "were" };
            format!(
                "Additional properties are not allowed ({} {verb} unexpected)",
                names.join(", ")
            )
        }
        ErrorKind::Type { want, .. } => {
            let types: Vec<String> = want.iter().map(|t| format!("\"{t}\"")).collect();
            if types.len() == 1 {
                format!("{shown} is not of type {}", types[0])
            } else {
                format!("{shown} is not of types {}", types.join(", "))
            }
        }
        ErrorKind::MinItems { want, .. } => {
            format!("{shown} has less than {}", plural(*want, "item", "items"))
        }
        ErrorKind::MaxItems { want, .. } => {
            format!("{shown} has more than {}", plural(*want, "item", "items"))
        }
        ErrorKind::MinLength { want, .. } => {
            format!(
                "{shown} is shorter than {}",
                plural(*want, "character", "characters")
            )
        }
        ErrorKind::MaxLength { want, .. } => {
            format!(
                "{shown} is longer than {}",
                plural(*want, "character", "characters")
            )
        }
        ErrorKind::Pattern { want, .. } => format!("{shown} does not match \"{want}\""),
        ErrorKind::Enum { want } => {
            let options: Vec<String> = want.iter().map(Value::to_string).collect();
            format!("{shown} is not one of {}", options.join(", "))
        }
        ErrorKind::Const { want } => format!("{want} was expected"),
        ErrorKind::Minimum { want, .. } => format!("{shown} is less than the minimum of {want}"),
        ErrorKind::Maximum { want, .. } => {
            format!("{shown} is greater than the maximum of {want}")
        }
        ErrorKind::AnyOf => {
            format!("{shown} is not valid under any of the schemas listed in the 'anyOf' keyword")
        }
        ErrorKind::OneOf(None) => {
            format!("{shown} is not valid under any of the schemas listed in the 'oneOf' keyword")
        }
        ErrorKind::OneOf(Some(_)) => format!(
            "{shown} is valid under more than one of the schemas listed in the 'oneOf' keyword"
        ),
        other => format!("{shown}: {other}"),
    }
}

/// `value` as JSON, cut to a length that keeps one issue on one readable line.
fn shorten(value: &Value) -> String {
    const LIMIT: usize = 60;
    let text = value.to_string();
    if text.chars().count() <= LIMIT {
        return text;
    }
    let cut: String = text.chars().take(LIMIT).collect();
    format!("{cut}…")
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
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outline {
        title: String,
        #[schemars(length(min = 1, max = 2))]
        sections: Vec<Section>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Section {
        #[schemars(regex(pattern = r"^[a-z]+$"))]
        name: String,
        kind: Kind,
        pages: Option<u32>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Prose,
        Table,
    }

    fn issues_for(instance: Value) -> Vec<(String, String, String)> {
        schema_issues(&input_schema_for::<Outline>(), &instance)
            .into_iter()
            .map(|issue| (issue.location, issue.keyword, issue.message))
            .collect()
    }

    #[test]
    fn a_valid_instance_has_no_issues() {
        let valid =
            json!({"title": "T", "sections": [{"name": "intro", "kind": "prose", "pages": 2}]});
        assert_eq!(issues_for(valid), Vec::new());
    }

    #[test]
    fn every_violation_is_named_with_its_path_keyword_and_value() {
        let issues = issues_for(json!({
            "sections": [
                {"name": "Intro", "kind": "poem", "pages": "two", "extra": 1},
                {"kind": "table"}
            ],
            "colour": "red"
        }));
        let expected = [
            ("input", "required", "\"title\" is a required property"),
            ("input", "additionalProperties", "'colour' was unexpected"),
            (
                "sections[0]",
                "additionalProperties",
                "'extra' was unexpected",
            ),
            (
                "sections[0].name",
                "pattern",
                "\"Intro\" does not match \"^[a-z]+$\"",
            ),
            (
                "sections[0].kind",
                "enum",
                "\"poem\" is not one of \"prose\", \"table\"",
            ),
            (
                "sections[0].pages",
                "type",
                "\"two\" is not of types \"null\", \"integer\"",
            ),
            ("sections[1]", "required", "\"name\" is a required property"),
        ];
        for (location, keyword, needle) in expected {
            assert!(
                issues
                    .iter()
                    .any(|(l, k, m)| l == location && k == keyword && m.contains(needle)),
                "expected {keyword} at {location} containing {needle:?}, got {issues:#?}"
            );
        }
        assert_eq!(issues.len(), expected.len(), "{issues:#?}");
    }

    #[test]
    fn item_counts_name_the_limit_and_long_values_are_shortened() {
        let section = json!({"name": "a", "kind": "table", "pages": null});
        let too_many = issues_for(json!({"title": "T", "sections": [section, section, section]}));
        assert_eq!(too_many.len(), 1, "{too_many:#?}");
        let (location, keyword, message) = &too_many[0];
        assert_eq!(
            (location.as_str(), keyword.as_str()),
            ("sections", "maxItems")
        );
        assert!(message.ends_with("… has more than 2 items"), "{message}");
        let none = issues_for(json!({"title": "T", "sections": []}));
        assert_eq!(none[0].2, "[] has less than 1 item");
    }

    #[test]
    fn an_invalid_schema_is_reported_not_panicked_on() {
        let issues = schema_issues(&json!({"type": 5}), &json!({}));
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].location, "(schema)");
        assert!(
            issues[0]
                .message
                .contains("the host's own schema is invalid")
        );
    }

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
