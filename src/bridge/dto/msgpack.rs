//! msgpack ⇄ JSON: how a request's parameters are read and a reply is encoded.

use nvim_rs::Value;
use serde::{Deserialize, Serialize};

/// The request's single parameter table. Lua sends an empty table as an empty array, so a
/// missing or empty argument reads as an empty map.
pub fn params<T: for<'de> Deserialize<'de>>(method: &str, args: Vec<Value>) -> Result<T, String> {
    let value = match args.into_iter().next() {
        None => Value::Map(Vec::new()),
        Some(Value::Array(items)) if items.is_empty() => Value::Map(Vec::new()),
        Some(value) => value,
    };
    // Through JSON: rmpv's own deserializer cannot read unit enum variants from strings.
    serde_json::from_value(msgpack_to_json(value))
        .map_err(|err| format!("Loopr: bad parameters for {method}: {err}"))
}

fn msgpack_to_json(value: Value) -> serde_json::Value {
    match value {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(flag) => serde_json::Value::Bool(flag),
        Value::Integer(integer) => integer
            .as_i64()
            .map(serde_json::Value::from)
            .or_else(|| integer.as_u64().map(serde_json::Value::from))
            .unwrap_or(serde_json::Value::Null),
        Value::F32(number) => serde_json::Value::from(f64::from(number)),
        Value::F64(number) => serde_json::Value::from(number),
        Value::String(text) => serde_json::Value::String(text.into_str().unwrap_or_default()),
        Value::Binary(bytes) => {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
        Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(msgpack_to_json).collect())
        }
        Value::Map(pairs) => serde_json::Value::Object(
            pairs
                .into_iter()
                .map(|(key, value)| {
                    let key = match key {
                        Value::String(text) => text.into_str().unwrap_or_default(),
                        other => other.to_string(),
                    };
                    (key, msgpack_to_json(value))
                })
                .collect(),
        ),
        Value::Ext(_, bytes) => {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
    }
}

/// Encodes a reply as msgpack with structs as maps. (rmpv's own serializer writes structs as
/// arrays, which Lua would see as lists.)
pub fn to_value<T: Serialize>(reply: &T) -> Result<Value, String> {
    let json =
        serde_json::to_value(reply).map_err(|err| format!("Loopr: encoding the reply: {err}"))?;
    Ok(json_to_msgpack(json))
}

fn json_to_msgpack(json: serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(flag) => Value::from(flag),
        serde_json::Value::Number(number) => {
            if let Some(integer) = number.as_i64() {
                Value::from(integer)
            } else if let Some(integer) = number.as_u64() {
                Value::from(integer)
            } else {
                Value::from(number.as_f64().unwrap_or_default())
            }
        }
        serde_json::Value::String(text) => Value::from(text),
        serde_json::Value::Array(items) => {
            Value::Array(items.into_iter().map(json_to_msgpack).collect())
        }
        serde_json::Value::Object(fields) => Value::Map(
            fields
                .into_iter()
                .map(|(key, value)| (Value::from(key), json_to_msgpack(value)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::dto::lua_table as map;
    use crate::bridge::dto::{EventMessage, LoopIdReply};

    #[test]
    fn replies_encode_structs_as_maps() {
        let value = to_value(&LoopIdReply {
            loop_id: "abc".to_owned(),
            label: String::new(),
        })
        .expect("encode");
        assert_eq!(value, map(vec![("loop_id", Value::from("abc"))]));
        let event = to_value(&EventMessage::Progress {
            loop_id: "abc".to_owned(),
            message: "reading".to_owned(),
            tokens: None,
        })
        .expect("encode");
        assert_eq!(
            event,
            map(vec![
                ("event", Value::from("progress")),
                ("loop_id", Value::from("abc")),
                ("message", Value::from("reading")),
            ])
        );
    }

    #[test]
    fn an_empty_lua_table_reads_as_an_empty_map() {
        #[derive(Deserialize)]
        struct Nothing {}
        assert!(params::<Nothing>("version", vec![Value::Array(vec![])]).is_ok());
        assert!(params::<Nothing>("version", vec![]).is_ok());
    }
}
