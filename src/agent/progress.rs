//! One-line descriptions of what a loop is doing, for the progress display.

use serde_json::Value;

use crate::llm::ProviderEvent;

pub fn describe_tool_call(name: &str, input: &Value) -> String {
    let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default();
    match name {
        "read_file" => format!("reading {}", text("path")),
        "list_files" => match (text("path"), text("glob")) {
            ("", "") => "listing files".to_owned(),
            (path, "") => format!("listing files in {path}"),
            ("", glob) => format!("listing files matching {glob}"),
            (path, glob) => format!("listing files in {path} matching {glob}"),
        },
        "grep" => format!("searching for {:?}", text("pattern")),
        "create_plan" => "checking the plan".to_owned(),
        other => format!("calling {other}"),
    }
}

/// The progress line for `event`; streamed text has none (the transcript shows it).
pub fn describe_provider_event(event: &ProviderEvent) -> Option<String> {
    Some(match event {
        ProviderEvent::TextDelta { .. } => return None,
        ProviderEvent::ToolCallStarted { name } => format!("model is writing a {name} call"),
        ProviderEvent::Retrying {
            attempt,
            max_retries,
            delay,
            reason,
        } => format!(
            "{reason}; retrying in {:.1}s (retry {attempt} of {max_retries})",
            delay.as_secs_f64()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn tool_calls_read_as_actions() {
        assert_eq!(
            describe_tool_call("read_file", &json!({"path": "src/a.rs"})),
            "reading src/a.rs"
        );
        assert_eq!(
            describe_tool_call("list_files", &json!({"glob": "*.rs"})),
            "listing files matching *.rs"
        );
        assert_eq!(
            describe_tool_call("grep", &json!({"pattern": "fn main"})),
            "searching for \"fn main\""
        );
    }

    #[test]
    fn retries_say_why_and_when() {
        let text = describe_provider_event(&ProviderEvent::Retrying {
            attempt: 1,
            max_retries: 2,
            delay: Duration::from_millis(1500),
            reason: "HTTP 529 overloaded_error".to_owned(),
        });
        assert_eq!(
            text.as_deref(),
            Some("HTTP 529 overloaded_error; retrying in 1.5s (retry 1 of 2)")
        );
    }
}
