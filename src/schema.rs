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

/// The schema a model is shown for a tool: `full` without what changes nothing it accepts,
/// so that a small context is not spent on it, and the host may check an input against
/// either. Gone: every `title`; the description of the whole input (the tool's own says it)
/// and of array items (their array's says it), and the line breaks of the others; empty
/// defaults (`null`, `false`, `[]`); `format` on numbers (`uint`, `double`: schemars'
/// annotations, never checked); a `type` that `enum` or `const` already implies; and a
/// nullable union written long-hand (`anyOf` of a typed schema and `{"type": "null"}`) is
/// written as the one schema with `"null"` among its types. `$schema` stays: it decides how
/// a server's schema is read.
pub fn model_schema(full: &Value) -> Value {
    let mut schema = full.clone();
    trim(&mut schema, Place::Whole);
    schema
}

/// Where a subschema sits, which decides whether its description says anything new.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Whole,
    Items,
    Inner,
}

/// Keywords whose values are maps of schemas (`properties`) or a schema (`not`) or lists of
/// schemas (`anyOf`): the places `trim` looks into. Any other keyword is left as it is.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
const SCHEMA_VALUES: [&str; 9] = [
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
];
const SCHEMA_LISTS: [&str; 4] = ["anyOf", "oneOf", "allOf", "prefixItems"];

fn trim(schema: &mut Value, place: Place) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    for keyword in SCHEMA_MAPS {
        if let Some(Value::Object(map)) = node.get_mut(keyword) {
            map.values_mut().for_each(|sub| trim(sub, Place::Inner));
        }
    }
    for keyword in SCHEMA_VALUES {
        if let Some(sub) = node.get_mut(keyword) {
            trim(sub, Place::Inner);
        }
    }
    for keyword in SCHEMA_LISTS {
        if let Some(Value::Array(list)) = node.get_mut(keyword) {
            list.iter_mut().for_each(|sub| trim(sub, Place::Inner));
        }
    }
    match node.get_mut("items") {
        Some(Value::Array(tuple)) => tuple.iter_mut().for_each(|sub| trim(sub, Place::Items)),
        Some(items) => trim(items, Place::Items),
        None => {}
    }
    merge_nullable_union(node);
    node.remove("title");
    if place == Place::Inner {
        if let Some(Value::String(text)) = node.get_mut("description") {
            *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        }
    } else {
        node.remove("description");
    }
    if node.get("default").is_some_and(is_empty_value) {
        node.remove("default");
    }
    let types: Vec<String> = declared_types(node)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    if !types.is_empty()
        && types
            .iter()
            .all(|kind| matches!(*kind, "integer" | "number" | "null"))
    {
        node.remove("format");
    }
    let implied = match (node.get("const"), node.get("enum")) {
        (Some(value), _) => fits_types(value, &types),
        (None, Some(Value::Array(values))) => values.iter().all(|value| fits_types(value, &types)),
        _ => false,
    };
    if implied {
        node.remove("type");
    }
}

/// `{"anyOf": [S, {"type": "null"}]}` as S with `"null"` among its types, when that accepts
/// the same: S has a `type` and nothing else that a null could fail (every other keyword
/// applies to one type only), and shares no keyword with the union around it.
fn merge_nullable_union(node: &mut serde_json::Map<String, Value>) {
    const APPLY_TO_NULL: [&str; 11] = [
        "enum",
        "const",
        "not",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$dynamicRef",
        "if",
        "then",
        "else",
    ];
    let Some(Value::Array(alternatives)) = node.get("anyOf") else {
        return;
    };
    let is_null = |schema: &Value| schema == &serde_json::json!({"type": "null"});
    let [first, second] = alternatives.as_slice() else {
        return;
    };
    let typed = match (is_null(first), is_null(second)) {
        (false, true) => first,
        (true, false) => second,
        _ => return,
    };
    let Some(typed) = typed.as_object() else {
        return;
    };
    let mergeable = !declared_types(typed).is_empty()
        && !typed
            .keys()
            .any(|key| APPLY_TO_NULL.contains(&key.as_str()))
        && !typed
            .keys()
            .any(|key| key != "anyOf" && node.contains_key(key));
    if !mergeable {
        return;
    }
    let mut merged = typed.clone();
    let mut types: Vec<Value> = declared_types(typed).into_iter().map(Value::from).collect();
    if !types.contains(&Value::from("null")) {
        types.push(Value::from("null"));
    }
    merged.insert("type".to_owned(), Value::Array(types));
    node.remove("anyOf");
    node.extend(merged);
}

/// The names in a schema's `type`, one or a list.
fn declared_types(node: &serde_json::Map<String, Value>) -> Vec<&str> {
    match node.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn fits_types(value: &Value, types: &[&str]) -> bool {
    types.iter().any(|kind| match (*kind, value) {
        ("null", Value::Null)
        | ("boolean", Value::Bool(_))
        | ("string", Value::String(_))
        | ("array", Value::Array(_))
        | ("object", Value::Object(_))
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(number)) => {
            number.is_i64() || number.is_u64() || number.as_f64().is_some_and(|n| n.fract() == 0.0)
        }
        _ => false,
    })
}

fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        Value::Bool(true) | Value::Number(_) => false,
    }
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
    match CompiledSchema::new(schema) {
        Ok(compiled) => compiled.issues(instance),
        Err(invalid) => invalid,
    }
}

/// A schema compiled once to check many instances: compiling (which checks the schema
/// against its draft's meta-schema) costs far more than one check.
pub struct CompiledSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl CompiledSchema {
    /// `schema` compiled, or the one issue saying it is invalid.
    pub fn new(schema: &Value) -> Result<CompiledSchema, Vec<InputIssue>> {
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        let invalid = |err: boon::CompileError| {
            vec![InputIssue::rule(
                "(schema)",
                format!("the host's own schema is invalid: {err}"),
            )]
        };
        compiler
            .add_resource(SCHEMA_LOCATION, schema.clone())
            .map_err(invalid)?;
        let index = compiler
            .compile(SCHEMA_LOCATION, &mut schemas)
            .map_err(invalid)?;
        Ok(CompiledSchema { schemas, index })
    }

    /// Every violation of the schema in `instance`, with a readable location.
    pub fn issues(&self, instance: &Value) -> Vec<InputIssue> {
        let mut issues = Vec::new();
        if let Err(error) = self.schemas.validate(instance, self.index) {
            collect_issues(&error, instance, &mut issues);
        }
        issues
    }
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

/// Inputs near `valid`, each wrong in one place or not: every value replaced by values of
/// other types and edge values, every field removed, an unknown field added, every list
/// emptied and grown past any limit. For tests that compare what two schemas accept.
#[cfg(test)]
pub(crate) fn inputs_near(valid: &Value) -> Vec<Value> {
    fn pointers(value: &Value, at: String, found: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    pointers(field, format!("{at}/{key}"), found);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    pointers(item, format!("{at}/{index}"), found);
                }
            }
            _ => {}
        }
        found.push(at);
    }
    let replacements = [
        Value::Null,
        Value::Bool(true),
        serde_json::json!(0),
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!(1_000_000_000),
        serde_json::json!(""),
        serde_json::json!("Not Kebab <case>"),
        Value::String("a".repeat(300)),
        serde_json::json!([]),
        serde_json::json!({}),
    ];
    let mut places = Vec::new();
    pointers(valid, String::new(), &mut places);
    let mut near = Vec::new();
    for place in places {
        let changed = |change: &dyn Fn(&mut Value)| {
            let mut input = valid.clone();
            if let Some(target) = input.pointer_mut(&place) {
                change(target);
            }
            input
        };
        for replacement in &replacements {
            near.push(changed(&|target| *target = replacement.clone()));
        }
        match valid.pointer(&place) {
            Some(Value::Object(fields)) => {
                for key in fields.keys() {
                    near.push(changed(&|target| {
                        target.as_object_mut().map(|fields| fields.remove(key));
                    }));
                }
                near.push(changed(&|target| {
                    target["unexpected"] = Value::from(1);
                }));
            }
            Some(Value::Array(items)) if !items.is_empty() => {
                let grown = Value::Array(items.iter().cycle().take(12).cloned().collect());
                near.push(changed(&|target| *target = grown.clone()));
                near.push(changed(&|target| {
                    target.as_array_mut().map(|items| items.remove(0));
                }));
            }
            _ => {}
        }
    }
    near
}

/// The inputs near `valid` that `full` and `model` judge differently, with what each said.
#[cfg(test)]
pub(crate) fn judged_differently(full: &Value, model: &Value, valid: &Value) -> Vec<String> {
    // Each schema compiled once for all the inputs; an invalid one refuses every input.
    let (full, model) = (CompiledSchema::new(full), CompiledSchema::new(model));
    let issues = |schema: &Result<CompiledSchema, Vec<InputIssue>>, input: &Value| match schema {
        Ok(compiled) => compiled.issues(input),
        Err(invalid) => invalid.clone(),
    };
    let mut differences = Vec::new();
    for input in std::iter::once(valid.clone()).chain(inputs_near(valid)) {
        let (by_full, by_model) = (issues(&full, &input), issues(&model, &input));
        if by_full.is_empty() != by_model.is_empty() {
            differences.push(format!(
                "{input}: the full schema says {by_full:?}, the model's {by_model:?}"
            ));
        }
    }
    differences
}

/// `value` with every object's keys in sorted order. `serde_json` keeps keys in insertion
/// order when a dependency turns on its `preserve_order` feature (the ACP SDK does), and the
/// generated files and the settings' checks read schemas in key order: sorted, that order
/// does not depend on which features the build unifies.
pub fn keys_sorted(value: Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(String, Value)> = object.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.cmp(b));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, keys_sorted(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(keys_sorted).collect()),
        other => other,
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

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    /// A report.
    struct Report {
        /// How many pages,
        /// at most ten.
        #[schemars(range(min = 1, max = 10))]
        pages: Option<u32>,
        /// How loud, as a ratio.
        volume: f64,
        kind: Option<Kind>,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default)]
        draft: bool,
        /// Its sections.
        sections: Vec<Section>,
    }

    #[test]
    fn the_model_schema_drops_what_changes_nothing() {
        let full = input_schema_for::<Report>();
        assert_eq!(full["properties"]["pages"]["format"], "uint32", "{full:#}");
        let model = model_schema(&full);
        assert_eq!(
            model,
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "pages": {
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "maximum": 10,
                        "description": "How many pages, at most ten."
                    },
                    "volume": {"type": "number", "description": "How loud, as a ratio."},
                    "kind": {"enum": ["prose", "table", null]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "draft": {"type": "boolean"},
                    "sections": {
                        "type": "array",
                        "description": "Its sections.",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "name": {"type": "string", "pattern": "^[a-z]+$"},
                                "kind": {"enum": ["prose", "table"]},
                                "pages": {"type": ["integer", "null"], "minimum": 0}
                            },
                            "required": ["name", "kind"]
                        }
                    }
                },
                "required": ["volume", "sections"]
            }),
            "{model:#}"
        );
    }

    #[test]
    fn an_input_the_full_schema_refuses_the_model_schema_refuses_too() {
        let full = input_schema_for::<Report>();
        let valid = json!({
            "pages": 3, "volume": 0.5, "kind": "table", "tags": ["a"], "draft": true,
            "sections": [{"name": "intro", "kind": "prose", "pages": 2}]
        });
        assert_eq!(schema_issues(&full, &valid), Vec::new());
        let near = inputs_near(&valid);
        let refused = near
            .iter()
            .filter(|input| !schema_issues(&full, input).is_empty())
            .count();
        assert!(refused > 50, "the inputs near it test refusals: {refused}");
        let model = model_schema(&full);
        assert_eq!(
            judged_differently(&full, &model, &valid),
            Vec::<String>::new()
        );
        assert!(
            !schema_issues(&model, &json!({"pages": -1, "volume": 1, "sections": []})).is_empty()
        );
    }

    #[test]
    fn a_servers_nullable_union_titles_and_defaults_are_written_short() {
        let full = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "SearchArguments",
            "type": "object",
            "properties": {
                "query": {"title": "Query", "type": "string", "minLength": 1},
                "limit": {
                    "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}],
                    "default": null,
                    "title": "Limit",
                    "description": "Most results."
                },
                "mode": {"anyOf": [{"enum": ["fast", "deep"]}, {"type": "null"}], "default": null}
            },
            "required": ["query"]
        });
        let model = model_schema(&full);
        assert_eq!(
            model,
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "limit": {"type": ["integer", "null"], "minimum": 1, "description": "Most results."},
                    "mode": {"anyOf": [{"enum": ["fast", "deep"]}, {"type": "null"}]}
                },
                "required": ["query"]
            }),
            "{model:#}"
        );
        let valid = json!({"query": "rust", "limit": 5, "mode": "fast"});
        assert_eq!(
            judged_differently(&full, &model, &valid),
            Vec::<String>::new()
        );
        let with_nulls = json!({"query": "rust", "limit": null, "mode": null});
        assert_eq!(
            judged_differently(&full, &model, &with_nulls),
            Vec::<String>::new()
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
