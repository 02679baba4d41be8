//! Why an answer stopped at a length limit: at `max_tokens`, or, well before it, at the
//! server's context window (a local server with a small context ends the answer with the same
//! finish reason, `length`, once the conversation and the answer fill its context). The model
//! is told which, so that it is not asked to be shorter than a limit it never reached.

use crate::llm::{StopReason, Turn, Usage};

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
    /// Why `turn` stopped, if it stopped at a length limit. `usage` is the turn's as the turn
    /// engine settled it: the server's, or, when it reported none, the host's estimate.
    pub(super) fn of(turn: &Turn, usage: &Usage, max_tokens: u32) -> Option<CutOff> {
        if turn.stop_reason != Some(StopReason::MaxTokens) {
            return None;
        }
        let answer_tokens = usage.output_tokens;
        let (share, of) = BELOW_THE_LIMIT;
        if answer_tokens.saturating_mul(of) >= u64::from(max_tokens) * share {
            return Some(CutOff::TokenLimit { max_tokens });
        }
        Some(CutOff::ContextWindow {
            answer_tokens,
            window: usage.total_input().saturating_add(answer_tokens),
            estimated: usage.estimated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ContentBlock;

    fn cut_at_length(text: &str) -> Turn {
        Turn {
            content: vec![ContentBlock::text(text)],
            truncated_tool_calls: Vec::new(),
            stop_reason: Some(StopReason::MaxTokens),
            usage: None,
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
        let turn = cut_at_length("a long answer");
        assert_eq!(
            CutOff::of(&turn, &usage(900, 512), 512),
            Some(CutOff::TokenLimit { max_tokens: 512 })
        );
    }

    #[test]
    fn an_answer_stopped_well_below_max_tokens_filled_the_servers_context() {
        let turn = cut_at_length("the server's context ended it");
        assert_eq!(
            CutOff::of(&turn, &usage(1_900, 148), 4_096),
            Some(CutOff::ContextWindow {
                answer_tokens: 148,
                window: 2_048,
                estimated: false
            })
        );
    }

    #[test]
    fn estimated_numbers_are_said_to_be_estimates() {
        // The recorded llama-cpp-python stream ends at `length` with no usage at all.
        let turn = cut_at_length("about a hundred tokens");
        let estimate = Usage {
            estimated: true,
            ..usage(1_950, 104)
        };
        assert_eq!(
            CutOff::of(&turn, &estimate, 4_096),
            Some(CutOff::ContextWindow {
                answer_tokens: 104,
                window: 2_054,
                estimated: true
            })
        );
        let long = Usage {
            estimated: true,
            ..usage(1_950, 2_000)
        };
        assert_eq!(
            CutOff::of(&turn, &long, 512),
            Some(CutOff::TokenLimit { max_tokens: 512 })
        );
    }

    #[test]
    fn counts_no_model_could_give_do_not_overflow() {
        let turn = cut_at_length("x");
        assert_eq!(
            CutOff::of(&turn, &usage(u64::MAX, u64::MAX), 512),
            Some(CutOff::TokenLimit { max_tokens: 512 })
        );
        assert_eq!(
            CutOff::of(&turn, &usage(u64::MAX, 10), 4_096),
            Some(CutOff::ContextWindow {
                answer_tokens: 10,
                window: u64::MAX,
                estimated: false
            })
        );
    }

    #[test]
    fn an_answer_that_ended_on_its_own_was_not_cut_off() {
        let mut turn = cut_at_length("done");
        turn.stop_reason = Some(StopReason::EndTurn);
        assert_eq!(CutOff::of(&turn, &usage(10, 1), 512), None);
    }
}
