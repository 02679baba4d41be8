//! Why an answer stopped at a length limit: at `max_tokens`, or, well before it, at the
//! server's context window (a local server with a small context ends the answer with the same
//! finish reason, `length`, once the conversation and the answer fill its context). The model
//! is told which, so that it is not asked to be shorter than a limit it never reached.

use super::context_budget::estimate_message;
use crate::llm::{Message, Role, StopReason, Turn};

/// An answer that ends below this share of `max_tokens` did not reach it.
const BELOW_THE_LIMIT: (u64, u64) = (3, 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CutOff {
    /// The answer used up `max_tokens`.
    TokenLimit { max_tokens: u32 },
    /// The answer (`answer_tokens`) stopped well before `max_tokens`: the server's context,
    /// probably of `window` tokens (what was sent and the answer), was full. `estimated`
    /// when the server reported no usage and the numbers are the host's estimates.
    ContextWindow {
        answer_tokens: u64,
        window: u64,
        estimated: bool,
    },
}

impl CutOff {
    /// Why `turn` stopped, if it stopped at a length limit. `sent_tokens` estimates what was
    /// sent, for a server that reports no usage; asked only when needed.
    pub(super) fn of(
        turn: &Turn,
        max_tokens: u32,
        sent_tokens: impl FnOnce() -> u64,
    ) -> Option<CutOff> {
        if turn.stop_reason != Some(StopReason::MaxTokens) {
            return None;
        }
        let reported = turn.usage.output_tokens > 0;
        let answer_tokens = if reported {
            turn.usage.output_tokens
        } else {
            estimate_message(&Message {
                role: Role::Assistant,
                content: turn.content.clone(),
            })
        };
        let (share, of) = BELOW_THE_LIMIT;
        if answer_tokens * of >= u64::from(max_tokens) * share {
            return Some(CutOff::TokenLimit { max_tokens });
        }
        let input = turn.usage.total_input();
        let (input, estimated) = if reported && input > 0 {
            (input, false)
        } else {
            (sent_tokens(), true)
        };
        Some(CutOff::ContextWindow {
            answer_tokens,
            window: input + answer_tokens,
            estimated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ContentBlock, Usage};

    fn cut_at_length(text: &str, usage: Usage) -> Turn {
        Turn {
            content: vec![ContentBlock::text(text)],
            truncated_tool_calls: Vec::new(),
            stop_reason: Some(StopReason::MaxTokens),
            usage,
            unreadable: None,
        }
    }

    fn usage(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn an_answer_that_used_up_max_tokens_hit_the_token_limit() {
        let turn = cut_at_length("a long answer", usage(900, 512));
        assert_eq!(
            CutOff::of(&turn, 512, || unreachable!("usage was reported")),
            Some(CutOff::TokenLimit { max_tokens: 512 })
        );
    }

    #[test]
    fn an_answer_stopped_well_below_max_tokens_filled_the_servers_context() {
        let turn = cut_at_length("the server's context ended it", usage(1_900, 148));
        assert_eq!(
            CutOff::of(&turn, 4_096, || unreachable!("usage was reported")),
            Some(CutOff::ContextWindow {
                answer_tokens: 148,
                window: 2_048,
                estimated: false
            })
        );
    }

    #[test]
    fn without_usage_the_numbers_are_estimated() {
        // The recorded llama-cpp-python stream ends at `length` with no usage at all.
        let turn = cut_at_length(&"word ".repeat(60), Usage::default());
        let Some(CutOff::ContextWindow {
            answer_tokens,
            window,
            estimated: true,
        }) = CutOff::of(&turn, 4_096, || 1_950)
        else {
            panic!("an answer of about 100 tokens did not reach 4,096");
        };
        assert!((100..=120).contains(&answer_tokens), "{answer_tokens}");
        assert_eq!(window, 1_950 + answer_tokens);
        let long = cut_at_length(&"word ".repeat(2_000), Usage::default());
        assert_eq!(
            CutOff::of(&long, 512, || unreachable!("the limit was reached")),
            Some(CutOff::TokenLimit { max_tokens: 512 })
        );
    }

    #[test]
    fn an_answer_that_ended_on_its_own_was_not_cut_off() {
        let mut turn = cut_at_length("done", usage(10, 1));
        turn.stop_reason = Some(StopReason::EndTurn);
        assert_eq!(CutOff::of(&turn, 512, || 0), None);
    }
}
