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

/// A count of tokens Loopr estimated, as a person reads it: `~350`, `~1.2k`, `~48k`,
/// `~1.3M` (an estimate's digits beyond these mean nothing).
pub fn approximate_tokens(count: u64) -> String {
    if count < 1_000 {
        return format!("~{count}");
    }
    let tenths_of_thousands = (count + 50) / 100;
    if tenths_of_thousands < 100 {
        return format!(
            "~{}.{}k",
            tenths_of_thousands / 10,
            tenths_of_thousands % 10
        );
    }
    let thousands = (count + 500) / 1_000;
    if thousands < 1_000 {
        return format!("~{thousands}k");
    }
    let tenths_of_millions = (count + 50_000) / 100_000;
    format!("~{}.{}M", tenths_of_millions / 10, tenths_of_millions % 10)
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
    fn estimates_read_with_the_digits_that_mean_something() {
        let cases = [
            (0, "~0"),
            (350, "~350"),
            (999, "~999"),
            (1_000, "~1.0k"),
            (1_249, "~1.2k"),
            (9_949, "~9.9k"),
            (9_950, "~10k"),
            (48_400, "~48k"),
            (999_499, "~999k"),
            (999_500, "~1.0M"),
            (1_260_000, "~1.3M"),
        ];
        for (count, shown) in cases {
            assert_eq!(approximate_tokens(count), shown, "{count}");
        }
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
