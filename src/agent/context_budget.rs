//! The context budget: what is sent of a long conversation. A loop resends its whole
//! conversation each turn, and tool results of up to 100 KB a call soon pass any model's
//! context window. Results older than the last few turns are replaced, in what is sent only
//! (the journal keeps them whole), by a short stand-in that says what the result was and how
//! to get it again.
//!
//! Shortening changes an early message, which costs the provider's prompt cache everything
//! after it; so nothing changes until the conversation passes the budget, and then it is
//! shortened well below it (to the low water mark), oldest results first, and not again for
//! several turns. The decision depends on the messages alone: a resumed loop, replaying its
//! journal request by request (`SentView::replayed`), sends what the live loop would have.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::llm::{CallsSent, ContentBlock, Message, Role};
use crate::tools::{ToolSet, call_again};

/// Bytes counted as one token. Real tokenizers give about 4 bytes a token for prose and
/// nearer 3 for code and JSON; counting 3 errs on the side of sending less.
const BYTES_PER_TOKEN: u64 = 3;
/// What each block costs beyond its text (its type, ids, the wire's framing).
const BLOCK_OVERHEAD_BYTES: u64 = 24;
/// Results no longer than this are never shortened: their stand-in would save little. A
/// stand-in is always shorter, so shortening never applies to its own stand-ins.
const SHORTEN_ABOVE_BYTES: usize = 4096;
/// What a stand-in quotes of the result's beginning.
const EXCERPT_LINES: usize = 5;
const EXCERPT_LINE_BYTES: usize = 200;
/// What a stand-in quotes of the call's input.
const INPUT_BYTES: usize = 400;

/// How much of a conversation is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextBudget {
    /// Estimated input tokens a request may reach (system prompt and tools included) before
    /// older results are shortened.
    pub tokens: u64,
    /// The latest turns (an answer of the model and the results of its calls) always sent
    /// whole.
    pub keep_turns: usize,
}

impl ContextBudget {
    /// Where shortening stops once it starts: far enough below the budget that the next
    /// several turns fit without changing the conversation's beginning again.
    pub fn low_water(&self) -> u64 {
        self.tokens / 5 * 3
    }
}

/// How the model gets each offered tool's result again, by the tool's name: what a stand-in
/// ends with. Asked of the loop's tools once, when its conversation starts.
#[derive(Clone, Debug, Default)]
pub struct RereadHints {
    by_tool: BTreeMap<String, String>,
}

impl RereadHints {
    /// The hints of every tool of `offered` (the first set that has a name answers for it).
    pub fn of(offered: &[&dyn ToolSet]) -> RereadHints {
        let mut by_tool = BTreeMap::new();
        for tools in offered {
            for name in tools.tool_names() {
                if let (false, Some(hint)) = (by_tool.contains_key(name), tools.reread_hint(name)) {
                    by_tool.insert(name.to_owned(), hint);
                }
            }
        }
        RereadHints { by_tool }
    }

    /// The hint for a result of `name`; a tool not offered (any more) is called again.
    fn for_tool(&self, name: &str) -> String {
        self.by_tool
            .get(name)
            .cloned()
            .unwrap_or_else(|| call_again(name))
    }
}

/// The estimated tokens of `text` as sent.
pub fn estimate_text(text: &str) -> u64 {
    estimate_bytes(text.len() as u64)
}

/// The estimated tokens of `bytes` bytes of text.
pub fn estimate_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// The estimated tokens of `message` as sent.
pub fn estimate_message(message: &Message) -> u64 {
    estimate_blocks(&message.content)
}

/// The estimated tokens of `blocks` (a message's content, an answer).
pub fn estimate_blocks(blocks: &[ContentBlock]) -> u64 {
    estimate_blocks_sent(blocks, CallsSent::AsBlocks)
}

/// The estimated tokens of `blocks` as a provider that sends calls as `calls` sends them.
pub fn estimate_blocks_sent(blocks: &[ContentBlock], calls: CallsSent) -> u64 {
    let bytes: u64 = blocks
        .iter()
        .filter(|block| {
            calls == CallsSent::AsBlocks || !matches!(block, ContentBlock::ToolCall { .. })
        })
        .map(|block| {
            BLOCK_OVERHEAD_BYTES
                + match block {
                    ContentBlock::Text { text } => text.len() as u64,
                    ContentBlock::ToolCall {
                        id, name, input, ..
                    } => (id.len() + name.len() + json_len(input)) as u64,
                    ContentBlock::ToolResult { id, content, .. } => {
                        (id.len() + content.len()) as u64
                    }
                }
        })
        .sum();
    estimate_bytes(bytes)
}

/// The estimated input tokens of a request of `messages` with `fixed_tokens` (system prompt
/// and tools).
pub fn estimate(messages: &[Arc<Message>], fixed_tokens: u64) -> u64 {
    estimate_sent(messages, fixed_tokens, CallsSent::AsBlocks)
}

/// `estimate` for a provider that sends calls as `calls` says.
pub fn estimate_sent(messages: &[Arc<Message>], fixed_tokens: u64, calls: CallsSent) -> u64 {
    fixed_tokens
        + messages
            .iter()
            .map(|message| estimate_blocks_sent(&message.content, calls))
            .sum::<u64>()
}

fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |json| json.len())
}

/// The messages of `messages` to replace, and their replacements, so that with
/// `fixed_tokens` (system prompt and tools) the conversation fits `budget`. Nothing while
/// it fits; once it does not, the oldest results outside the kept turns are shortened until
/// it is at the low water mark (or nothing more may be shortened).
#[cfg(test)]
pub fn shorten(
    messages: &[Arc<Message>],
    fixed_tokens: u64,
    budget: &ContextBudget,
    hints: &RereadHints,
) -> Vec<(usize, Message)> {
    let estimates: Vec<u64> = messages
        .iter()
        .map(|message| estimate_message(message))
        .collect();
    shorten_estimated(messages, &estimates, fixed_tokens, budget, hints)
}

/// `shorten`, given each message's estimate.
fn shorten_estimated(
    messages: &[Arc<Message>],
    estimates: &[u64],
    fixed_tokens: u64,
    budget: &ContextBudget,
    hints: &RereadHints,
) -> Vec<(usize, Message)> {
    let mut total = fixed_tokens + estimates.iter().sum::<u64>();
    if total <= budget.tokens {
        return Vec::new();
    }
    let target = budget.low_water();
    let mut replacements = Vec::new();
    for index in 0..first_kept(messages, budget.keep_turns) {
        if total <= target {
            break;
        }
        let message = &messages[index];
        if message.role != Role::User {
            continue;
        }
        let calls = index
            .checked_sub(1)
            .map(|previous| &*messages[previous])
            .filter(|previous| previous.role == Role::Assistant);
        if let Some(shortened) = shortened_message(message, calls, hints) {
            total = total - estimates[index] + estimate_message(&shortened);
            replacements.push((index, shortened));
        }
    }
    if total > budget.tokens {
        tracing::warn!(
            estimated_tokens = total,
            budget = budget.tokens,
            "the latest turns alone pass the context budget"
        );
    }
    replacements
}

/// The index of the first message of the last `keep_turns` turns: the `keep_turns`-th
/// answer of the model from the end. With fewer answers, every message is kept.
fn first_kept(messages: &[Arc<Message>], keep_turns: usize) -> usize {
    if keep_turns == 0 {
        return messages.len();
    }
    messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, message)| message.role == Role::Assistant)
        .nth(keep_turns - 1)
        .map_or(0, |(index, _)| index)
}

/// `message` with its long results replaced by stand-ins; None when none is long. `calls`
/// is the model's answer the results answer.
fn shortened_message(
    message: &Message,
    calls: Option<&Message>,
    hints: &RereadHints,
) -> Option<Message> {
    let mut changed = false;
    let content = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::ToolResult {
                id,
                content,
                is_error: false,
            } if content.len() > SHORTEN_ABOVE_BYTES => {
                changed = true;
                ContentBlock::ToolResult {
                    id: id.clone(),
                    content: stand_in(find_call(calls, id), content, hints),
                    is_error: false,
                }
            }
            other => other.clone(),
        })
        .collect();
    changed.then_some(Message {
        role: message.role,
        content,
    })
}

fn find_call<'a>(calls: Option<&'a Message>, result_id: &str) -> Option<(&'a str, &'a Value)> {
    calls?.content.iter().find_map(|block| match block {
        ContentBlock::ToolCall {
            id, name, input, ..
        } if id == result_id => Some((name.as_str(), input)),
        _ => None,
    })
}

/// What the model is sent instead of `content`, the result of `call` (name and input).
pub fn stand_in(call: Option<(&str, &Value)>, content: &str, hints: &RereadHints) -> String {
    let lines = content.lines().count();
    let bytes = content.len();
    let what = match call {
        Some((name, input)) => {
            let input = serde_json::to_string(input).unwrap_or_default();
            format!("the result of {name} {}", clipped(&input, INPUT_BYTES))
        }
        None => "the result of an earlier tool call".to_owned(),
    };
    let mut text = format!(
        "[Shortened by Loopr to keep the conversation within its context budget. This was \
         {what}: {lines} lines, {bytes} bytes. It began:\n"
    );
    for line in content.lines().take(EXCERPT_LINES) {
        text.push_str(&clipped(line, EXCERPT_LINE_BYTES));
        text.push('\n');
    }
    if lines > EXCERPT_LINES {
        text.push_str("…\n");
    }
    let again = match call {
        Some((name, _)) => hints.for_tool(name),
        None => "make the same call again.".to_owned(),
    };
    text.push_str(&format!("To see it again, {again}]"));
    text
}

/// `text` cut to at most `max_bytes` (on a character boundary), marking the cut.
fn clipped(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// What a loop has sent of its conversation: the stand-ins that replaced messages, kept
/// (the same shared messages) so the provider reuses what it made of them and its prompt
/// cache stays valid until the next shortening.
#[derive(Debug, Default)]
pub struct SentView {
    hints: RereadHints,
    stand_ins: BTreeMap<usize, Arc<Message>>,
    /// Each sent message's estimate, with the message it was made of (held, so a message
    /// changed in place is a new one): a long conversation is not measured again every turn.
    estimates: Vec<(Arc<Message>, u64)>,
}

impl SentView {
    /// The view a live loop would have after sending every request of `messages` (one
    /// before each answer of the model): what a resumed loop starts from. Its stand-ins say
    /// how to read results again as `hints` do.
    pub fn replayed(
        messages: &[Arc<Message>],
        fixed_tokens: u64,
        budget: &ContextBudget,
        hints: RereadHints,
    ) -> SentView {
        let mut view = SentView {
            hints,
            ..SentView::default()
        };
        for (index, message) in messages.iter().enumerate() {
            if message.role == Role::Assistant {
                view.messages(&messages[..index], fixed_tokens, budget);
            }
        }
        view
    }

    /// What to send of `messages`, the whole conversation: the stand-ins so far, and more
    /// when it is over the budget.
    pub fn messages(
        &mut self,
        messages: &[Arc<Message>],
        fixed_tokens: u64,
        budget: &ContextBudget,
    ) -> Vec<Arc<Message>> {
        let mut sent: Vec<Arc<Message>> = messages
            .iter()
            .enumerate()
            .map(|(index, message)| Arc::clone(self.stand_ins.get(&index).unwrap_or(message)))
            .collect();
        self.estimates.truncate(sent.len());
        for (index, message) in sent.iter().enumerate() {
            match self.estimates.get_mut(index) {
                Some((known, _)) if Arc::ptr_eq(known, message) => {}
                Some(slot) => *slot = (Arc::clone(message), estimate_message(message)),
                None => self
                    .estimates
                    .push((Arc::clone(message), estimate_message(message))),
            }
        }
        let estimates: Vec<u64> = self
            .estimates
            .iter()
            .map(|(_, estimate)| *estimate)
            .collect();
        for (index, shortened) in
            shorten_estimated(&sent, &estimates, fixed_tokens, budget, &self.hints)
        {
            let shortened = Arc::new(shortened);
            sent[index] = Arc::clone(&shortened);
            self.stand_ins.insert(index, shortened);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpTools;
    use crate::store::LoopType;
    use crate::tools::ToolRegistry;
    use serde_json::json;

    /// What the tools of a code loop, `web_fetch` and no MCP server say of reading a result
    /// again.
    fn code_hints() -> RereadHints {
        RereadHints::of(&[
            &ToolRegistry::for_loop(LoopType::Code, true),
            &McpTools::default(),
        ])
    }

    fn shorten(
        messages: &[Arc<Message>],
        fixed_tokens: u64,
        budget: &ContextBudget,
    ) -> Vec<(usize, Message)> {
        super::shorten(messages, fixed_tokens, budget, &code_hints())
    }

    fn stand_in(call: Option<(&str, &Value)>, content: &str) -> String {
        super::stand_in(call, content, &code_hints())
    }

    fn big(label: &str, lines: usize) -> String {
        (1..=lines)
            .map(|line| format!("{label} line {line:05} of a long tool result"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A conversation of `turns` turns, each reading a file whose content is `lines` lines.
    fn conversation(turns: usize, lines: usize) -> Vec<Arc<Message>> {
        let mut messages = vec![Message::user_text("Plan this change")];
        for turn in 0..turns {
            let id = format!("call{turn}");
            messages.push(Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("Reading."),
                    ContentBlock::tool_call(
                        id.clone(),
                        "read_file",
                        json!({"path": format!("src/file{turn}.rs")}),
                    ),
                ],
            });
            messages.push(Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    id,
                    content: big(&format!("file{turn}"), lines),
                    is_error: false,
                }],
            });
        }
        crate::llm::shared(messages)
    }

    fn total(messages: &[Arc<Message>]) -> u64 {
        messages
            .iter()
            .map(|message| estimate_message(message))
            .sum()
    }

    fn result_text(message: &Message) -> &str {
        match &message.content[0] {
            ContentBlock::ToolResult { content, .. } => content,
            other => panic!("not a result: {other:?}"),
        }
    }

    fn apply(messages: &[Arc<Message>], replacements: Vec<(usize, Message)>) -> Vec<Arc<Message>> {
        let mut sent = messages.to_vec();
        for (index, message) in replacements {
            sent[index] = Arc::new(message);
        }
        sent
    }

    #[test]
    fn under_the_budget_nothing_changes() {
        let messages = conversation(6, 200);
        let budget = ContextBudget {
            tokens: total(&messages) + 1000,
            keep_turns: 1,
        };
        assert!(shorten(&messages, 1000, &budget).is_empty());
    }

    #[test]
    fn over_the_budget_old_results_shorten_to_the_low_water_mark_and_the_last_turns_stay() {
        // Each result is about 2,600 tokens; twelve of them pass a 20,000-token budget.
        let messages = conversation(12, 200);
        let budget = ContextBudget {
            tokens: 20_000,
            keep_turns: 2,
        };
        let fixed = 2_000;
        let replacements = shorten(&messages, fixed, &budget);
        let indexes: Vec<usize> = replacements.iter().map(|(index, _)| *index).collect();
        assert_eq!(
            indexes,
            (0..indexes.len()).map(|n| 2 + 2 * n).collect::<Vec<_>>(),
            "oldest results first, one after the other"
        );
        let sent = apply(&messages, replacements);
        let sent_total = fixed + total(&sent);
        assert!(sent_total <= budget.low_water(), "{sent_total}");
        // Stopped as soon as it was below the low water mark: one result fewer would not do.
        let one_fewer = apply(
            &messages,
            shorten(&messages, fixed, &budget)
                .into_iter()
                .rev()
                .skip(1)
                .collect(),
        );
        assert!(fixed + total(&one_fewer) > budget.low_water());
        for kept in [&sent[22], &sent[24]] {
            assert!(
                result_text(kept).starts_with("file1"),
                "the last two turns are whole"
            );
        }
    }

    #[test]
    fn a_stand_in_names_the_call_and_how_to_read_it_again() {
        let messages = conversation(8, 200);
        let budget = ContextBudget {
            tokens: 10_000,
            keep_turns: 1,
        };
        let sent = apply(&messages, shorten(&messages, 0, &budget));
        let shortened = result_text(&sent[2]);
        assert_eq!(
            shortened,
            "[Shortened by Loopr to keep the conversation within its context budget. This was \
             the result of read_file {\"path\":\"src/file0.rs\"}: 200 lines, 7799 bytes. It \
             began:\nfile0 line 00001 of a long tool result\nfile0 line 00002 of a long tool \
             result\nfile0 line 00003 of a long tool result\nfile0 line 00004 of a long tool \
             result\nfile0 line 00005 of a long tool result\n…\nTo see it again, call \
             read_file again with the same input; start_line and end_line read just the lines \
             you need.]"
        );
        let command = stand_in_for("run_command", json!({"command": "cargo test"}));
        assert!(
            command.contains("run_command {\"command\":\"cargo test\"}"),
            "{command}"
        );
        assert!(command.contains("(the command runs again)"), "{command}");
        let grep = stand_in_for("grep", json!({"pattern": "fn main"}));
        assert!(
            grep.ends_with("call grep again with the same input.]"),
            "{grep}"
        );
        let unknown = stand_in(None, &big("x", 200));
        assert!(unknown.contains("an earlier tool call"), "{unknown}");
        let mcp = stand_in_for("github__search", json!({"query": "x"}));
        assert!(
            mcp.ends_with("To see it again, call github__search again with the same input.]"),
            "{mcp}"
        );
    }

    fn stand_in_for(name: &str, input: Value) -> String {
        stand_in(Some((name, &input)), &big("out", 200))
    }

    #[test]
    fn long_inputs_and_lines_are_clipped_and_a_stand_in_is_never_shortened_again() {
        let long_line = "é".repeat(5000);
        let input = json!({"command": "x".repeat(5000)});
        let text = stand_in(Some(("run_command", &input)), &long_line);
        assert!(text.len() <= SHORTEN_ABOVE_BYTES, "{}", text.len());
        assert!(text.contains("1 lines, 10000 bytes"), "{text}");
    }

    #[test]
    fn errors_and_short_results_stay() {
        let mut messages = conversation(10, 200);
        let error = Arc::new(Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    id: "call0".to_owned(),
                    content: big("failed", 200),
                    is_error: true,
                },
                ContentBlock::ToolResult {
                    id: "short".to_owned(),
                    content: "3 matches".to_owned(),
                    is_error: false,
                },
            ],
        });
        messages[2] = Arc::clone(&error);
        let budget = ContextBudget {
            tokens: 5_000,
            keep_turns: 1,
        };
        let replacements = shorten(&messages, 0, &budget);
        assert!(
            replacements.iter().all(|(index, _)| *index != 2),
            "an error result and a short one are kept"
        );
        assert_eq!(replacements[0].0, 4);
    }

    #[test]
    fn shortening_is_idempotent_and_deterministic() {
        let messages = conversation(12, 200);
        let budget = ContextBudget {
            tokens: 20_000,
            keep_turns: 2,
        };
        let first = shorten(&messages, 500, &budget);
        assert_eq!(first, shorten(&messages, 500, &budget));
        let sent = apply(&messages, first);
        assert!(
            shorten(&sent, 500, &budget).is_empty(),
            "a shortened conversation is left as it is"
        );
    }

    #[test]
    fn the_view_changes_in_steps_not_every_turn() {
        let messages = conversation(30, 200);
        let budget = ContextBudget {
            tokens: 30_000,
            keep_turns: 2,
        };
        let mut view = SentView::default();
        let mut previous: Vec<Arc<Message>> = Vec::new();
        let mut changes = 0;
        for end in (1..=messages.len()).step_by(2) {
            let sent = view.messages(&messages[..end], 1_000, &budget);
            assert!(
                1_000 + total(&sent) <= budget.tokens,
                "turn ending at {end}"
            );
            let changed_before_the_end = previous
                .iter()
                .zip(&sent)
                .any(|(before, now)| !Arc::ptr_eq(before, now));
            changes += usize::from(changed_before_the_end);
            previous = sent;
        }
        // 30 turns of ~2,600 tokens each against a 30,000 budget and a 18,000 low water
        // mark: each shortening makes room for about four turns.
        assert!((4..=8).contains(&changes), "{changes} shortenings");
    }

    #[test]
    fn a_replayed_view_sends_what_the_live_one_sent() {
        let messages = conversation(20, 200);
        let budget = ContextBudget {
            tokens: 25_000,
            keep_turns: 2,
        };
        let mut live = SentView::default();
        for end in (1..messages.len()).step_by(2) {
            live.messages(&messages[..end], 700, &budget);
        }
        let mut replayed = SentView::replayed(&messages, 700, &budget, RereadHints::default());
        let resumed: Vec<Message> = replayed
            .messages(&messages, 700, &budget)
            .iter()
            .map(|message| (**message).clone())
            .collect();
        let continued: Vec<Message> = live
            .messages(&messages, 700, &budget)
            .iter()
            .map(|message| (**message).clone())
            .collect();
        assert_eq!(resumed, continued);
        assert!(
            resumed
                .iter()
                .any(|message| message.content.iter().any(|block| matches!(
                    block,
                    ContentBlock::ToolResult { content, .. } if content.starts_with("[Shortened")
                ))),
            "the replay shortened something"
        );
    }
}
