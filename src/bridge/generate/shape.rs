//! A JSON schema (as schemars writes it) read as the shapes a shell checks a value against:
//! `$ref`s resolved, `null` alternatives taken as "may be left out", and each shape worded as
//! what an option expects.

use serde_json::{Map, Value, json};

/// What a value must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Boolean,
    Integer {
        min: Option<Value>,
        max: Option<Value>,
    },
    Number {
        min: Option<Value>,
        above: Option<Value>,
    },
    Text {
        nonempty: bool,
        pattern: Option<String>,
        url: bool,
    },
    OneOf(Vec<String>),
    List(Box<Shape>),
    Record(Record),
    Map {
        key: Box<Shape>,
        value: Box<Shape>,
    },
    Any,
}

/// A table with known keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub fields: Vec<Field>,
    pub required: Vec<String>,
    /// Keys of which exactly one must be given (`oneOf` of `required`).
    pub exactly_one_of: Vec<String>,
    /// The boolean key a boolean given for the whole table sets (`x-switch`: `verify =
    /// false` is `verify = { enabled = false }`).
    pub switch: Option<String>,
}

/// One key of a record, with what the schema says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub description: Option<String>,
    pub shape: Shape,
    /// `null` is allowed: the key may be left out.
    pub nullable: bool,
    pub default: Option<Value>,
    /// Words for what the field expects where the shape's would say too little.
    pub expects: Option<String>,
    /// The unit of a number, said after it.
    pub unit: Option<String>,
}

/// A schema and its `$defs`.
pub struct Schema<'a> {
    root: &'a Value,
}

impl<'a> Schema<'a> {
    pub fn new(root: &'a Value) -> Schema<'a> {
        Schema { root }
    }

    /// The definition `node` refers to, or `node`.
    pub fn resolve(&self, node: &'a Value) -> &'a Value {
        let target = node
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix("#/$defs/"))
            .and_then(|name| self.root.get("$defs")?.get(name));
        match target {
            Some(target) => self.resolve(target),
            None => node,
        }
    }

    /// The fields of the record `node`, in the schema's order.
    pub fn fields(&self, node: &'a Value) -> Vec<Field> {
        let node = self.resolve(node);
        let Some(properties) = node.get("properties").and_then(Value::as_object) else {
            return Vec::new();
        };
        properties
            .iter()
            .map(|(name, property)| Field {
                name: name.clone(),
                description: text(property, "description")
                    .map(|words| words.split_whitespace().collect::<Vec<_>>().join(" ")),
                shape: match (self.shape(property), text(property, "x-switch")) {
                    (Shape::Record(record), Some(switch)) => Shape::Record(Record {
                        switch: Some(switch),
                        ..record
                    }),
                    (shape, _) => shape,
                },
                nullable: nullable(property),
                default: property.get("default").cloned(),
                expects: text(property, "x-expects"),
                unit: text(property, "x-unit"),
            })
            .collect()
    }

    /// What `node` accepts, `null` aside.
    pub fn shape(&self, node: &'a Value) -> Shape {
        let node = self.resolve(node);
        if let Some(values) = choices(node) {
            return Shape::OneOf(values);
        }
        if let Some(alternatives) = alternatives(node) {
            let mut kept = alternatives.iter().filter(|a| !is_null(self.resolve(a)));
            if let (Some(only), None) = (kept.next(), kept.next()) {
                return self.shape(only);
            }
        }
        match type_name(node) {
            Some("boolean") => Shape::Boolean,
            Some("integer") => Shape::Integer {
                min: node.get("minimum").cloned(),
                max: node.get("maximum").cloned(),
            },
            Some("number") => Shape::Number {
                min: node.get("minimum").cloned(),
                above: node.get("exclusiveMinimum").cloned(),
            },
            Some("string") => Shape::Text {
                nonempty: node.get("minLength").and_then(Value::as_u64).unwrap_or(0) > 0,
                pattern: text(node, "pattern"),
                url: node.get("format").and_then(Value::as_str) == Some("uri"),
            },
            Some("array") => Shape::List(Box::new(
                node.get("items")
                    .map_or(Shape::Any, |items| self.shape(items)),
            )),
            Some("object") if node.get("properties").is_some() => Shape::Record(Record {
                fields: self.fields(node),
                required: strings(node.get("required")),
                exactly_one_of: exactly_one_of(node),
                switch: None,
            }),
            Some("object") => {
                let names = node.get("propertyNames").cloned().unwrap_or(json!({}));
                let names = merged(&json!({ "type": "string" }), &names);
                let key = Schema::new(&names).shape(&names);
                Shape::Map {
                    key: Box::new(key),
                    value: Box::new(
                        node.get("additionalProperties")
                            .filter(|value| value.is_object())
                            .map_or(Shape::Any, |value| self.shape(value)),
                    ),
                }
            }
            _ => Shape::Any,
        }
    }
}

/// The string values an enum allows (`enum`, `const`, or `oneOf`/`anyOf` of those), `null`
/// aside; `None` if `node` is not such an enum.
pub fn choices(node: &Value) -> Option<Vec<String>> {
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        return Some(
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        );
    }
    if let Some(value) = node.get("const").and_then(Value::as_str) {
        return Some(vec![value.to_owned()]);
    }
    let mut values = Vec::new();
    for alternative in alternatives(node)? {
        if is_null(alternative) {
            continue;
        }
        values.extend(choices(alternative)?);
    }
    (!values.is_empty()).then_some(values)
}

/// `oneOf` or `anyOf`, whichever the node has.
pub fn alternatives(node: &Value) -> Option<&Vec<Value>> {
    node.get("oneOf")
        .or_else(|| node.get("anyOf"))
        .and_then(Value::as_array)
}

/// The type besides `null` (`"type": ["integer", "null"]` is an integer).
pub fn type_name(node: &Value) -> Option<&str> {
    match node.get("type")? {
        Value::String(name) => Some(name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .find(|name| *name != "null"),
        _ => None,
    }
}

/// Whether `null` is allowed.
pub fn nullable(node: &Value) -> bool {
    let typed = match node.get("type") {
        Some(Value::Array(names)) => names.iter().any(|name| name == "null"),
        _ => false,
    };
    typed || alternatives(node).is_some_and(|all| all.iter().any(is_null))
}

fn is_null(node: &Value) -> bool {
    node.get("type").and_then(Value::as_str) == Some("null")
}

fn text(node: &Value, key: &str) -> Option<String> {
    node.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn strings(node: Option<&Value>) -> Vec<String> {
    node.and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `oneOf: [{required: [a]}, {required: [b]}]`: exactly one of a and b.
fn exactly_one_of(node: &Value) -> Vec<String> {
    alternatives(node)
        .map(|all| {
            all.iter()
                .filter_map(|alternative| {
                    let required = strings(alternative.get("required"));
                    (required.len() == 1).then(|| required[0].clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn merged(base: &Value, over: &Value) -> Value {
    let mut all: Map<String, Value> = base.as_object().cloned().unwrap_or_default();
    if let Some(over) = over.as_object() {
        all.extend(over.clone());
    }
    Value::Object(all)
}

/// A number as Lua and people write it: `1`, not `1.0`.
pub fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{}", n as i64),
        _ => value.to_string(),
    }
}

/// `"a", "b", "c"`.
pub fn quoted(values: &[String], last: &str) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    match quoted.split_last() {
        Some((final_one, rest)) if !rest.is_empty() && last != ", " => {
            format!("{}{last}{final_one}", rest.join(", "))
        }
        _ => quoted.join(", "),
    }
}

impl Shape {
    /// What a value of this shape is, in the words of `setup()`'s messages ("an integer >= 1",
    /// "one of \"json\", \"yaml\"").
    pub fn expects(&self) -> String {
        match self {
            Shape::Boolean => "a boolean".to_owned(),
            Shape::Integer { min, max } => match (min, max) {
                (Some(min), Some(max)) => {
                    format!("an integer from {} to {}", number(min), number(max))
                }
                (Some(min), None) => format!("an integer >= {}", number(min)),
                (None, Some(max)) => format!("an integer <= {}", number(max)),
                (None, None) => "an integer".to_owned(),
            },
            Shape::Number { min, above } => match (min, above) {
                (_, Some(above)) => format!("a number > {}", number(above)),
                (Some(min), None) => format!("a number >= {}", number(min)),
                (None, None) => "a number".to_owned(),
            },
            Shape::Text { url: true, .. } => "a URL".to_owned(),
            Shape::Text {
                pattern: Some(pattern),
                ..
            } => format!("a string matching {pattern}"),
            Shape::Text { nonempty, .. } => {
                if *nonempty {
                    "a non-empty string".to_owned()
                } else {
                    "a string".to_owned()
                }
            }
            Shape::OneOf(values) => format!("one of {}", quoted(values, ", ")),
            Shape::List(item) => match item.as_ref() {
                Shape::OneOf(values) => format!("a list of {}", quoted(values, ", ")),
                Shape::Text { .. } => "a list of strings".to_owned(),
                item => format!("a list of values, each {}", item.expects()),
            },
            Shape::Record(record) => record.expects(),
            Shape::Map { key, value } => {
                let key = match key.as_ref() {
                    Shape::Text {
                        pattern: Some(pattern),
                        ..
                    } => format!("name (matching {pattern})"),
                    _ => "name".to_owned(),
                };
                format!("a table of {key} = {}", value.expects())
            }
            Shape::Any => "any value".to_owned(),
        }
    }
}

impl Record {
    fn expects(&self) -> String {
        let names: Vec<String> = self.fields.iter().map(|f| f.name.clone()).collect();
        let each: Vec<String> = self.fields.iter().map(Field::expects).collect();
        let alike = each.windows(2).all(|pair| pair[0] == pair[1]);
        let plain = self.required.is_empty() && self.exactly_one_of.is_empty();
        if alike && plain && self.fields.len() > 1 {
            let each = match self.fields.first().map(|f| &f.shape) {
                Some(Shape::OneOf(values)) if f_none(&self.fields) => quoted(values, " or "),
                _ => each.first().cloned().unwrap_or_default(),
            };
            return format!("a table with keys {}, each {each}", quoted(&names, ", "));
        }
        let keys: Vec<String> = self
            .fields
            .iter()
            .map(|field| {
                let required = if self.required.contains(&field.name) {
                    ", required"
                } else {
                    ""
                };
                format!("{} ({}{required})", field.name, field.expects())
            })
            .collect();
        let mut words = format!("a table with keys {}", keys.join(", "));
        if !self.exactly_one_of.is_empty() {
            words.push_str(&format!(
                "; exactly one of {}",
                self.exactly_one_of.join(", ")
            ));
        }
        if let Some(switch) = &self.switch {
            words.push_str(&format!(", or a boolean (its {switch} alone)"));
        }
        words
    }
}

/// Whether no field words its expectation itself.
fn f_none(fields: &[Field]) -> bool {
    fields.iter().all(|field| field.expects.is_none())
}

impl Field {
    /// What the field expects, with its unit.
    pub fn expects(&self) -> String {
        let words = self.expects.clone().unwrap_or_else(|| self.shape.expects());
        match &self.unit {
            Some(unit) => format!("{words} ({unit})"),
            None => words,
        }
    }
}
