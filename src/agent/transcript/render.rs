//! The transcript's words: journal entries, and the pieces of a turn under way, as markdown
//! for a person reading along. Blocks longer than a few lines are wrapped in `<details>`, which
//! the transcript window folds; tool results are capped (the model saw them whole, the journal
//! keeps them whole).

use std::collections::HashMap;

use serde_json::Value;

use crate::agent::journal::Entry;
use crate::llm::{ContentBlock, StopReason, Usage};
use crate::markdown::{char_boundary_at_or_before, code_span, fence_for};

/// Blocks longer than this many lines are folded.
const FOLD_LINES: usize = 8;
/// A tool result shows at most this many lines, and bytes.
const RESULT_LINES: usize = 60;
const RESULT_BYTES: usize = 6 * 1024;
/// A call's input up to this long shows on the call's line.
const INLINE_INPUT_CHARS: usize = 100;

/// Turns what a loop says and does into transcript text, keeping what the next piece needs:
/// the turn count, which tool each call id named, and how the text so far ends (so blocks are
/// set apart by one blank line whatever the model's text ended with).
#[derive(Debug)]
pub struct Renderer {
    turn: u32,
    turn_open: bool,
    /// Text of the open turn arrived as it was streamed; its answer does not repeat it.
    streamed: bool,
    /// Newlines ending the text so far, up to two.
    trailing_newlines: u8,
    tool_names: HashMap<String, String>,
}

impl Default for Renderer {
    fn default() -> Renderer {
        Renderer::continuing(0)
    }
}

impl Renderer {
    /// A renderer for a run that has had `turns` turns already.
    pub fn continuing(turns: u32) -> Renderer {
        Renderer {
            turn: turns,
            turn_open: false,
            streamed: false,
            trailing_newlines: 2,
            tool_names: HashMap::new(),
        }
    }

    /// A stored entry, whole.
    pub fn entry(&mut self, entry: &Entry) -> String {
        match entry {
            Entry::RunStart { at, rules, .. } => self.run_start(at, rules),
            Entry::User { content } => self.user(content),
            Entry::Assistant {
                content,
                model,
                usage,
                stop_reason,
                truncated_tool_calls,
                ..
            } => {
                let mut out = self.open_turn();
                self.streamed = false;
                out.push_str(&self.answer_end(
                    content,
                    model,
                    usage,
                    stop_reason.as_ref(),
                    truncated_tool_calls,
                ));
                out
            }
            Entry::Retry {
                attempt,
                delay_ms,
                reason,
            } => self.retry(*attempt, *delay_ms, reason),
            Entry::State { .. } => String::new(),
            Entry::Note { at, text } => {
                let quoted: Vec<String> = text.lines().map(|line| format!("> {line}")).collect();
                self.block(format!("> Loopr, {at}:\n{}\n", quoted.join("\n")))
            }
        }
    }

    pub fn run_start(&mut self, at: &str, rules: &[String]) -> String {
        self.turn = 0;
        self.turn_open = false;
        let mut out = self.block(format!("## Run started {at}\n"));
        if !rules.is_empty() {
            out.push_str(&self.block(format!("Project rules: {}\n", rules.join(", "))));
        }
        out
    }

    /// Text the model streamed; the turn's heading comes first if this starts the turn.
    pub fn text_delta(&mut self, delta: &str) -> String {
        let mut out = self.open_turn();
        let delta = printable(delta);
        if !delta.is_empty() {
            self.streamed = true;
            self.push(&mut out, &delta);
        }
        out
    }

    /// An attempt failed and the turn is asked again.
    pub fn retry(&mut self, attempt: u32, delay_ms: u64, reason: &str) -> String {
        let mut out = self.open_turn();
        out.push_str(&self.block(format!(
            "↻ attempt {attempt} failed ({reason}); asking again in {:.1} s\n",
            delay_ms as f64 / 1000.0
        )));
        out
    }

    /// The model's answer once it is whole: its calls (its text too, unless streamed) and
    /// what the turn cost. Closes the turn.
    pub fn answer_end(
        &mut self,
        content: &[ContentBlock],
        model: &str,
        usage: &Usage,
        stop_reason: Option<&StopReason>,
        truncated_tool_calls: &[String],
    ) -> String {
        let mut out = self.open_turn();
        for block in content {
            match block {
                ContentBlock::Text { text } if !self.streamed => {
                    let text = printable(text);
                    self.push(&mut out, &text);
                }
                ContentBlock::Text { .. } | ContentBlock::ToolResult { .. } => {}
                ContentBlock::ToolCall {
                    id,
                    name,
                    input,
                    input_error,
                } => {
                    self.tool_names.insert(id.clone(), name.clone());
                    let call = call_block(name, input, input_error.as_deref());
                    out.push_str(&self.block(call));
                }
            }
        }
        let footer = turn_footer(self.turn, model, usage, stop_reason, truncated_tool_calls);
        out.push_str(&self.block(footer));
        self.turn_open = false;
        self.streamed = false;
        out
    }

    /// Our message: tool results, and what we told the model.
    pub fn user(&mut self, content: &[ContentBlock]) -> String {
        let mut out = String::new();
        for block in content {
            let text = match block {
                ContentBlock::ToolResult {
                    id,
                    content,
                    is_error,
                } => {
                    let name = self.tool_names.get(id).map_or("tool", String::as_str);
                    result_block(name, content, *is_error)
                }
                ContentBlock::Text { text } => message_block(text),
                ContentBlock::ToolCall { .. } => continue,
            };
            out.push_str(&self.block(text));
        }
        out
    }

    fn open_turn(&mut self) -> String {
        if self.turn_open {
            return String::new();
        }
        self.turn_open = true;
        self.streamed = false;
        self.turn += 1;
        self.block(format!("### Turn {}\n", self.turn))
    }

    /// `text` (ending in a newline) as a block of its own: after a blank line, followed by one.
    fn block(&mut self, text: String) -> String {
        let mut out = String::new();
        for _ in self.trailing_newlines..2 {
            out.push('\n');
        }
        self.trailing_newlines = 2;
        self.push(&mut out, &text);
        self.push(&mut out, "\n");
        out
    }

    fn push(&mut self, out: &mut String, text: &str) {
        let ending = text.len() - text.trim_end_matches('\n').len();
        self.trailing_newlines = if ending == text.len() {
            (usize::from(self.trailing_newlines) + ending).min(2) as u8
        } else {
            ending.min(2) as u8
        };
        out.push_str(text);
    }
}

/// The whole stored transcript: `title`, then every entry.
pub fn render_entries(title: &str, entries: &[Entry]) -> String {
    let mut renderer = Renderer::default();
    let mut out = format!("# {title}\n\n");
    if entries.is_empty() {
        out.push_str("_Nothing yet: the loop has not started._\n\n");
    }
    for entry in entries {
        out.push_str(&renderer.entry(entry));
    }
    out
}

fn call_block(name: &str, input: &Value, input_error: Option<&str>) -> String {
    if let Some(problem) = input_error {
        return format!("→ **{name}** ✗ unusable input: {problem}\n");
    }
    if name.starts_with("review_")
        && let Some(verdict) = input.get("verdict").and_then(Value::as_str)
    {
        let mut text = format!("→ **{name}**: **{verdict}**\n");
        for issue in input
            .get("issues")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            text.push_str(&format!("- {}\n", issue.replace('\n', " ")));
        }
        return text;
    }
    let compact = input.to_string();
    if compact.chars().count() <= INLINE_INPUT_CHARS {
        return format!("→ **{name}** {}\n", code_span(&compact));
    }
    let pretty = serde_json::to_string_pretty(input).unwrap_or(compact);
    let lines = pretty.lines().count();
    let fenced = fenced(&pretty, "json");
    if lines > FOLD_LINES {
        format!(
            "<details><summary>→ {name} ({lines} lines of input)</summary>\n\n{fenced}</details>\n"
        )
    } else {
        format!("→ **{name}**\n\n{fenced}")
    }
}

fn result_block(name: &str, content: &str, is_error: bool) -> String {
    let lines = content.lines().count();
    if content.trim().is_empty() {
        return format!("← **{name}** (empty)\n");
    }
    let shown = fenced(&printable(&capped(content)), "text");
    let size = if lines == 1 {
        "1 line".to_owned()
    } else {
        format!("{lines} lines")
    };
    if is_error {
        // Errors stay open: they are what the model reacts to next.
        return format!("← **{name}** ✗ error\n\n{shown}");
    }
    if lines > FOLD_LINES {
        format!("<details><summary>← {name} · {size}</summary>\n\n{shown}</details>\n")
    } else {
        format!("← **{name}** · {size}\n\n{shown}")
    }
}

fn message_block(text: &str) -> String {
    let quoted: String = printable(text)
        .trim_end()
        .lines()
        .map(|line| {
            if line.is_empty() {
                ">\n".to_owned()
            } else {
                format!("> {line}\n")
            }
        })
        .collect();
    let lines = quoted.lines().count();
    if lines > FOLD_LINES {
        format!(
            "<details><summary>Loopr → model ({lines} lines)</summary>\n\n{quoted}\n</details>\n"
        )
    } else {
        format!("**Loopr → model:**\n\n{quoted}")
    }
}

/// What `content` shows in the transcript: at most `RESULT_LINES` lines and `RESULT_BYTES`
/// bytes, and how much was left out.
fn capped(content: &str) -> String {
    let mut end = 0;
    for (count, line) in content.split_inclusive('\n').enumerate() {
        if count == RESULT_LINES || end + line.len() > RESULT_BYTES {
            break;
        }
        end += line.len();
    }
    if end == 0 {
        // One line longer than the byte cap: cut it at a character boundary.
        end = char_boundary_at_or_before(content, RESULT_BYTES);
    }
    let shown = content[..end].trim_end_matches('\n');
    if end >= content.len() {
        return shown.to_owned();
    }
    let rest = &content[end..];
    format!(
        "{shown}\n… {} more lines, {} bytes (the model saw them; the journal keeps them)",
        rest.lines().count(),
        thousands(rest.len() as u64)
    )
}

/// `text` as a buffer line can hold it: no carriage returns (CRLF text reads as LF), NULs
/// shown as the symbol for them.
fn printable(text: &str) -> String {
    text.replace('\r', "").replace('\0', "\u{2400}")
}

fn fenced(body: &str, info: &str) -> String {
    let fence = fence_for(body);
    format!("{fence}{info}\n{body}\n{fence}\n")
}

fn turn_footer(
    turn: u32,
    model: &str,
    usage: &Usage,
    stop_reason: Option<&StopReason>,
    truncated_tool_calls: &[String],
) -> String {
    let mut parts = vec![format!("turn {turn}")];
    if !model.is_empty() {
        parts.push(model.to_owned());
    }
    // `~` marks Loopr's estimate of what a server that reports no usage spent.
    let about = if usage.estimated { "~" } else { "" };
    let mut input = format!("{about}{} in", thousands(usage.total_input()));
    let cached: Vec<String> = [
        (usage.cache_read_tokens, "from cache"),
        (usage.cache_write_tokens, "to cache"),
    ]
    .into_iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{} {what}", thousands(count)))
    .collect();
    if !cached.is_empty() {
        input.push_str(&format!(" ({})", cached.join(", ")));
    }
    parts.push(input);
    parts.push(format!("{about}{} out", thousands(usage.output_tokens)));
    // `max_tokens`, or the server's context well before it: the note that follows says which.
    if usage.estimated {
        parts.push("estimated: the server reported no usage".to_owned());
    }
    if stop_reason == Some(&StopReason::MaxTokens) {
        parts.push("stopped at a length limit".to_owned());
    }
    if !truncated_tool_calls.is_empty() {
        parts.push(format!("cut off: {}", truncated_tool_calls.join(", ")));
    }
    format!("_{}_\n", parts.join(" · "))
}

/// `1234567` as `1,234,567`.
fn thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(content: Vec<ContentBlock>, usage: Usage) -> Entry {
        Entry::Assistant {
            content,
            model: "m1".to_owned(),
            usage,
            stop_reason: None,
            truncated_tool_calls: Vec::new(),
            reported_usd_micros: 0,
        }
    }

    #[test]
    fn a_turn_reads_as_heading_text_calls_footer_then_results() {
        let entries = vec![
            Entry::RunStart {
                version: 1,
                at: "2026-11-23T05:00:00Z".to_owned(),
                rules: vec!["AGENTS.md (12 bytes)".to_owned()],
            },
            Entry::User {
                content: vec![ContentBlock::text("Plan: add a flag")],
            },
            assistant(
                vec![
                    ContentBlock::text("Looking first."),
                    ContentBlock::tool_call("c1", "read_file", json!({"path": "src/main.rs"})),
                ],
                Usage {
                    input_tokens: 1200,
                    output_tokens: 56,
                    cache_read_tokens: 3000,
                    ..Usage::default()
                },
            ),
            Entry::User {
                content: vec![ContentBlock::ToolResult {
                    id: "c1".to_owned(),
                    content: "fn main() {}\n".to_owned(),
                    is_error: false,
                }],
            },
            Entry::State { state: json!({}) },
        ];
        let text = render_entries("Transcript of plan loop x", &entries);
        assert_eq!(
            text,
            "# Transcript of plan loop x\n\n## Run started 2026-11-23T05:00:00Z\n\n\
             Project rules: AGENTS.md (12 bytes)\n\n\
             **Loopr → model:**\n\n> Plan: add a flag\n\n### Turn 1\n\nLooking first.\n\n\
             → **read_file** `{\"path\":\"src/main.rs\"}`\n\n\
             _turn 1 · m1 · 4,200 in (3,000 from cache) · 56 out_\n\n\
             ← **read_file** · 1 line\n\n```text\nfn main() {}\n```\n\n"
        );
    }

    #[test]
    fn streamed_text_is_not_repeated_and_blocks_start_on_their_own_line() {
        let mut renderer = Renderer::default();
        let mut live = renderer.text_delta("Let me ");
        live.push_str(&renderer.text_delta("look."));
        live.push_str(&renderer.answer_end(
            &[
                ContentBlock::text("Let me look."),
                ContentBlock::tool_call("c1", "grep", json!({"pattern": "x"})),
            ],
            "m1",
            &Usage::default(),
            None,
            &[],
        ));
        assert_eq!(
            live,
            "### Turn 1\n\nLet me look.\n\n→ **grep** `{\"pattern\":\"x\"}`\n\n\
             _turn 1 · m1 · 0 in · 0 out_\n\n"
        );
    }

    #[test]
    fn estimated_tokens_read_as_estimates() {
        let mut renderer = Renderer::default();
        let footer = renderer.answer_end(
            &[ContentBlock::text("Done.")],
            "gemma3",
            &Usage {
                input_tokens: 1_700,
                output_tokens: 25,
                estimated: true,
                ..Usage::default()
            },
            None,
            &[],
        );
        assert!(
            footer.contains(
                "_turn 1 · gemma3 · ~1,700 in · ~25 out · estimated: the server reported no \
                 usage_"
            ),
            "{footer}"
        );
    }

    #[test]
    fn long_results_fold_and_are_capped_errors_stay_open() {
        let mut renderer = Renderer::default();
        renderer.answer_end(
            &[
                ContentBlock::tool_call("c1", "read_file", json!({"path": "big"})),
                ContentBlock::tool_call("c2", "grep", json!({"pattern": "("})),
            ],
            "m1",
            &Usage::default(),
            None,
            &[],
        );
        let big: String = (0..500).map(|n| format!("line {n}\n")).collect();
        let text = renderer.user(&[
            ContentBlock::ToolResult {
                id: "c1".to_owned(),
                content: big,
                is_error: false,
            },
            ContentBlock::ToolResult {
                id: "c2".to_owned(),
                content: "invalid regex".to_owned(),
                is_error: true,
            },
        ]);
        assert!(
            text.starts_with(
                "<details><summary>← read_file · 500 lines</summary>\n\n```text\nline 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("line 59\n… 440 more lines"), "{text}");
        assert!(!text.contains("line 60\n"), "{text}");
        assert!(
            text.contains("</details>\n\n← **grep** ✗ error\n\n```text\ninvalid regex\n```\n"),
            "{text}"
        );
    }

    #[test]
    fn review_verdicts_and_retries_are_spelled_out() {
        let mut renderer = Renderer::default();
        let retry = renderer.retry(1, 1500, "server overloaded (529)");
        let answer = renderer.answer_end(
            &[ContentBlock::tool_call(
                "r1",
                "review_plan",
                json!({"verdict": "revise", "issues": ["No tests", "Wrong path"]}),
            )],
            "reviewer",
            &Usage::default(),
            Some(&StopReason::ToolUse),
            &[],
        );
        assert_eq!(
            retry,
            "### Turn 1\n\n↻ attempt 1 failed (server overloaded (529)); asking again in 1.5 s\n\n"
        );
        assert!(
            answer.starts_with("→ **review_plan**: **revise**\n- No tests\n- Wrong path\n\n"),
            "{answer}"
        );
    }

    #[test]
    fn a_note_is_quoted_with_its_time() {
        let text = Renderer::default().entry(&Entry::Note {
            at: "2026-11-26T12:00:00Z".to_owned(),
            text: "Phase p was not committed: the pre-commit hook failed\nlint: bad".to_owned(),
        });
        assert_eq!(
            text,
            "> Loopr, 2026-11-26T12:00:00Z:\n> Phase p was not committed: the pre-commit hook \
             failed\n> lint: bad\n\n"
        );
    }

    #[test]
    fn carriage_returns_and_nuls_never_reach_the_buffer() {
        let mut renderer = Renderer::default();
        let text = renderer.text_delta("line one\r\nline\0two");
        renderer.answer_end(
            &[ContentBlock::tool_call(
                "c1",
                "read_file",
                json!({"path": "x"}),
            )],
            "m1",
            &Usage::default(),
            None,
            &[],
        );
        let result = renderer.user(&[ContentBlock::ToolResult {
            id: "c1".to_owned(),
            content: "a\r\nb\0c".to_owned(),
            is_error: false,
        }]);
        for shown in [text, result] {
            assert!(!shown.contains('\r') && !shown.contains('\0'), "{shown:?}");
            assert!(shown.contains('\u{2400}'), "{shown:?}");
        }
    }

    #[test]
    fn numbers_read_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
