//! One-line descriptions of what a loop is doing, for the progress display, and how far the
//! answer under way has come.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::context_budget;
use crate::llm::{ProviderEvent, ToolSpec, server_word};
use crate::tools::{ToolSet, calling};

/// How often at most a loop reports its answer growing: often enough to see a slow model
/// (a few tokens a second on a CPU) is alive, rare enough that a fast one (hundreds a second)
/// costs the shells nothing and the CLI's log stays readable.
pub const ANSWER_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The progress line for a call of `name`: the words of the first of `offered` that has the
/// tool, else the default for a tool nobody offered.
pub fn describe_tool_call(offered: &[&dyn ToolSet], name: &str, input: &Value) -> String {
    offered
        .iter()
        .find_map(|tools| tools.describe_call(name, input))
        .unwrap_or_else(|| calling(name))
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

/// The progress line for a retry; the answer's own events go through `AnswerProgress`.
pub fn describe_retry(event: &ProviderEvent) -> Option<String> {
    let ProviderEvent::Retrying {
        attempt,
        max_retries,
        delay,
        reason,
    } = event
    else {
        return None;
    };
    Some(format!(
        "{reason}; retrying in {:.1}s (retry {attempt} of {max_retries})",
        delay.as_secs_f64()
    ))
}

/// What the model has written so far of the answer under way (text and calls' input), as a
/// progress line at most once per `ANSWER_PROGRESS_INTERVAL`: never one per token.
#[derive(Debug, Default)]
pub struct AnswerProgress {
    bytes: u64,
    /// The call being written, with its article (`an edit_file`), once one started.
    call: Option<String>,
    last_report: Option<Instant>,
    /// The tools the loop offers: their names are said with the article they take.
    offered: Option<Arc<[ToolSpec]>>,
}

/// A line saying how far the answer has come, and its estimated tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerReport {
    pub message: String,
    pub tokens: u64,
}

impl AnswerProgress {
    /// Progress of an answer that may call `offered`.
    pub fn offering(offered: Arc<[ToolSpec]>) -> AnswerProgress {
        AnswerProgress {
            offered: Some(offered),
            ..AnswerProgress::default()
        }
    }

    /// `an edit_file`, `a create_plan`: a tool the loop offers with the article its name
    /// takes. A name nobody offered is text the server made up, shown as it came (one line,
    /// short) after `a`: how it is said is anyone's guess.
    fn call_words(&self, name: &str) -> String {
        let offered = self
            .offered
            .as_deref()
            .is_some_and(|tools| tools.iter().any(|tool| tool.name == name));
        if !offered {
            return format!("a {}", server_word(name));
        }
        let vowel = name
            .chars()
            .next()
            .is_some_and(|first| "aeiouAEIOU".contains(first));
        format!("{} {name}", if vowel { "an" } else { "a" })
    }

    /// Counts `event` (at `now`); returns the report due, if one is: the first of an answer
    /// at once, then at most one per interval. A retry starts the count over (the failed
    /// attempt's answer is thrown away).
    pub fn on_event(&mut self, event: &ProviderEvent, now: Instant) -> Option<AnswerReport> {
        match event {
            ProviderEvent::TextDelta { text } => self.bytes += text.len() as u64,
            ProviderEvent::ToolInputDelta { bytes } => self.bytes += *bytes as u64,
            ProviderEvent::ToolCallStarted { name } => self.call = Some(self.call_words(name)),
            ProviderEvent::Retrying { .. } => {
                self.bytes = 0;
                self.call = None;
                return None;
            }
        }
        if self
            .last_report
            .is_some_and(|last| now < last + ANSWER_PROGRESS_INTERVAL)
        {
            return None;
        }
        self.last_report = Some(now);
        let doing = match &self.call {
            Some(call) => format!("model is writing {call} call"),
            None => "model is answering".to_owned(),
        };
        let tokens = context_budget::estimate_bytes(self.bytes);
        let message = match tokens {
            0 => doing,
            1 => format!("{doing}… {} token so far", approximate_tokens(tokens)),
            _ => format!("{doing}… {} tokens so far", approximate_tokens(tokens)),
        };
        Some(AnswerReport { message, tokens })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpTools;
    use crate::store::LoopType;
    use crate::tools::ToolRegistry;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn tool_calls_read_as_actions() {
        let code = ToolRegistry::for_loop(LoopType::Code, true);
        let describe_tool_call = |name: &str, input: &Value| {
            super::describe_tool_call(&[&code, &McpTools::default()], name, input)
        };
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
        // The rest of each tool's words, and the default of a tool with none or nobody offers.
        let more = [
            ("list_files", json!({}), "listing files"),
            ("list_files", json!({"path": "src"}), "listing files in src"),
            (
                "list_files",
                json!({"path": "src", "glob": "*.rs"}),
                "listing files in src matching *.rs",
            ),
            ("write_file", json!({"path": "a"}), "calling write_file"),
            ("github__search", json!({}), "calling github__search"),
        ];
        for (name, input, words) in more {
            assert_eq!(describe_tool_call(name, &input), words, "{name} {input}");
        }
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
    fn the_answer_is_reported_growing_at_most_once_per_interval() {
        let start = Instant::now();
        let mut progress = AnswerProgress::default();
        let text = |text: &str| ProviderEvent::TextDelta {
            text: text.to_owned(),
        };
        let first = progress.on_event(&text("Let me look"), start);
        assert_eq!(
            first,
            Some(AnswerReport {
                message: "model is answering… ~4 tokens so far".to_owned(),
                tokens: 4
            }),
            "the first piece at once"
        );
        // A fast model: a piece every millisecond for just under the interval, then one more.
        let pieces = ANSWER_PROGRESS_INTERVAL.as_millis() as u32;
        let mut reports = Vec::new();
        for millisecond in 1..=pieces {
            let now = start + Duration::from_millis(u64::from(millisecond));
            reports.extend(progress.on_event(&text("abc"), now));
        }
        assert_eq!(reports.len(), 1, "one report per interval: {reports:?}");
        assert_eq!(
            reports[0].tokens,
            (11 + 3 * u64::from(pieces)).div_ceil(3),
            "every piece counted"
        );
        let call = progress.on_event(
            &ProviderEvent::ToolCallStarted {
                name: "create_plan".to_owned(),
            },
            start + ANSWER_PROGRESS_INTERVAL * 2,
        );
        assert!(call.is_some_and(|report| {
            report
                .message
                .starts_with("model is writing a create_plan call… ~")
        }),);
        let input = ProviderEvent::ToolInputDelta { bytes: 3_000 };
        let grown = progress
            .on_event(&input, start + ANSWER_PROGRESS_INTERVAL * 3)
            .expect("due");
        assert!(grown.tokens > 1_000, "a call's input counts: {grown:?}");
        progress.on_event(
            &ProviderEvent::Retrying {
                attempt: 1,
                max_retries: 2,
                delay: Duration::from_secs(1),
                reason: "HTTP 529".to_owned(),
            },
            start + ANSWER_PROGRESS_INTERVAL * 4,
        );
        let again = progress
            .on_event(&text("New"), start + ANSWER_PROGRESS_INTERVAL * 5)
            .expect("due");
        assert_eq!(
            again.message, "model is answering… ~1 token so far",
            "a retry starts over"
        );
    }

    #[test]
    fn a_call_with_nothing_written_yet_is_reported_without_a_count() {
        let mut progress = AnswerProgress::default();
        let report = progress.on_event(
            &ProviderEvent::ToolCallStarted {
                name: "list_files".to_owned(),
            },
            Instant::now(),
        );
        assert_eq!(
            report.map(|report| report.message).as_deref(),
            Some("model is writing a list_files call")
        );
    }

    #[test]
    fn an_offered_tool_is_named_with_the_article_it_takes() {
        let code = ToolRegistry::for_loop(LoopType::Code, true);
        let mut progress = AnswerProgress::offering(code.specs().into());
        let started = |name: &str| ProviderEvent::ToolCallStarted {
            name: name.to_owned(),
        };
        let report = progress.on_event(&started("edit_file"), Instant::now());
        assert_eq!(
            report.map(|report| report.message).as_deref(),
            Some("model is writing an edit_file call")
        );
        let mut progress = AnswerProgress::offering(code.specs().into());
        let report = progress.on_event(&started("read_file"), Instant::now());
        assert_eq!(
            report.map(|report| report.message).as_deref(),
            Some("model is writing a read_file call")
        );
    }

    #[test]
    fn a_call_name_a_server_made_up_is_one_line_and_short() {
        let mut progress = AnswerProgress::default();
        let name = format!("evil\n{}", "x".repeat(100_000));
        let report = progress
            .on_event(&ProviderEvent::ToolCallStarted { name }, Instant::now())
            .expect("a report");
        assert!(report.message.starts_with("model is writing a evil x"));
        assert!(!report.message.contains('\n'));
        assert!(report.message.len() < 200, "{}", report.message.len());
    }

    #[test]
    fn retries_say_why_and_when() {
        let text = describe_retry(&ProviderEvent::Retrying {
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
