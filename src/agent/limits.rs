//! The token limits a loop runs with: how long an answer may be (`max_tokens`) and how much of
//! the conversation is sent (the context budget). Each is the user's setting, else fitted to
//! the context window the server reported, else the default; a known window also bounds a
//! budget the user set, since a request past it fails. Fitting is pure (`fit_limits`); asking the
//! server is `ask_limits`'s.

use serde::Serialize;

use super::context_budget::ContextBudget;
use super::settings::LoopSettings;
use crate::llm::ServerWindow;

/// An answer's length when nothing else says: what a plan or a phase takes.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// The context budget when nothing else says: what a hosted model's window takes.
pub const DEFAULT_CONTEXT_BUDGET: u32 = 100_000;
/// The shortest answer fitted to a small window: a call with its arguments must fit.
const MIN_FITTED_ANSWER: u32 = 256;

/// A context window and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    pub tokens: u32,
    /// `server` (what it runs the model with), `num_ctx` (the setting, which Ollama is sent),
    /// or `model` (the most the model takes; the server may run it with less).
    pub from: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_tokens: u32,
    pub context_budget: ContextBudget,
    /// The window they were fitted to, if one was known.
    pub window: Option<Window>,
}

/// The limits under `settings`, with what the server said (`NotAsked` when nothing was).
pub fn fit_limits(settings: &LoopSettings, server: &ServerWindow) -> Limits {
    let window = window(settings, server);
    let max_tokens = settings
        .max_tokens
        .unwrap_or_else(|| window.map_or(DEFAULT_MAX_TOKENS, |window| answer_share(window.tokens)));
    let mut tokens = u64::from(settings.context_budget.unwrap_or(DEFAULT_CONTEXT_BUDGET));
    if let Some(window) = window {
        // The answer shares the window with the request; with a `max_tokens` set as large as
        // the window, half of it still goes to the request (the server stops the answer
        // where the window ends).
        let window = u64::from(window.tokens);
        let for_input = window.saturating_sub(u64::from(max_tokens)).max(window / 2);
        tokens = match settings.context_budget {
            Some(set) => u64::from(set).min(for_input),
            None => for_input,
        };
    }
    Limits {
        max_tokens,
        context_budget: ContextBudget {
            tokens,
            keep_turns: usize::try_from(settings.context_keep_turns).unwrap_or(usize::MAX),
        },
        window,
    }
}

/// The window requests go into: the `num_ctx` a provider that sends it (Ollama) is sent first, then what the
/// server runs the model with, then the most the model takes.
fn window(settings: &LoopSettings, server: &ServerWindow) -> Option<Window> {
    let num_ctx = settings
        .num_ctx
        .filter(|_| settings.provider.sends_num_ctx())
        .map(|tokens| Window {
            tokens,
            from: "num_ctx",
        });
    let report = server.report();
    let served = report
        .and_then(|report| report.context_window)
        .map(|tokens| Window {
            tokens,
            from: "server",
        });
    let model = report
        .and_then(|report| report.model_max)
        .map(|tokens| Window {
            tokens,
            from: "model",
        });
    num_ctx.or(served).or(model)
}

/// A quarter of the window for the answer, the rest for the request: a plan or a phase fits
/// in a quarter of any window that holds the prompt, and a small window keeps room to send.
fn answer_share(window: u32) -> u32 {
    (window / 4)
        .clamp(MIN_FITTED_ANSWER, DEFAULT_MAX_TOKENS)
        .min(window / 2)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ProviderName, ServerReport};

    fn reported(context_window: Option<u32>, model_max: Option<u32>) -> ServerWindow {
        ServerWindow::Reported(ServerReport {
            context_window,
            model_max,
            ..ServerReport::default()
        })
    }

    fn local() -> LoopSettings {
        LoopSettings {
            provider: ProviderName::Openai,
            ..LoopSettings::default()
        }
    }

    #[test]
    fn unset_limits_fit_the_window_the_server_reports() {
        let limits = fit_limits(&local(), &reported(Some(4096), None));
        assert_eq!(limits.max_tokens, 1024);
        assert_eq!(limits.context_budget.tokens, 3072);
        assert_eq!(
            limits.window,
            Some(Window {
                tokens: 4096,
                from: "server"
            })
        );
        // The 2,048-token window of the issue: the answer never takes the whole window.
        let small = fit_limits(&local(), &reported(Some(2048), None));
        assert_eq!((small.max_tokens, small.context_budget.tokens), (512, 1536));
        let tiny = fit_limits(&local(), &reported(Some(512), None));
        assert_eq!((tiny.max_tokens, tiny.context_budget.tokens), (256, 256));
        let large = fit_limits(&local(), &reported(Some(131_072), None));
        assert_eq!(
            (large.max_tokens, large.context_budget.tokens),
            (8192, 131_072 - 8192)
        );
    }

    /// A server says what it likes: a window of a token or two still gives an answer room for
    /// a token (a `max_tokens` of 0 is refused by servers, or means "no limit" to some).
    #[test]
    fn a_window_of_a_token_or_two_still_leaves_the_answer_a_token() {
        for window in [1, 2, 3] {
            let limits = fit_limits(&local(), &reported(Some(window), None));
            assert!(limits.max_tokens >= 1, "{window}: {limits:?}");
        }
    }

    #[test]
    fn without_a_window_the_models_maximum_bounds_them_and_without_either_the_defaults_hold() {
        let bounded = fit_limits(&local(), &reported(None, Some(32_768)));
        assert_eq!(
            (bounded.max_tokens, bounded.context_budget.tokens),
            (8192, 32_768 - 8192)
        );
        assert_eq!(bounded.window.map(|window| window.from), Some("model"));
        for server in [
            ServerWindow::NotAsked,
            ServerWindow::Unavailable("connection refused".to_owned()),
            reported(None, None),
        ] {
            let limits = fit_limits(&local(), &server);
            assert_eq!(limits.max_tokens, DEFAULT_MAX_TOKENS, "{server:?}");
            assert_eq!(
                limits.context_budget.tokens,
                u64::from(DEFAULT_CONTEXT_BUDGET)
            );
            assert_eq!(limits.window, None);
        }
    }

    #[test]
    fn the_users_values_stay_and_a_known_window_bounds_the_budget() {
        let set = LoopSettings {
            max_tokens: Some(2000),
            context_budget: Some(50_000),
            ..local()
        };
        let limits = fit_limits(&set, &reported(Some(8192), None));
        assert_eq!(limits.max_tokens, 2000);
        assert_eq!(limits.context_budget.tokens, 8192 - 2000);
        let within = fit_limits(
            &LoopSettings {
                context_budget: Some(5000),
                ..set.clone()
            },
            &reported(Some(8192), None),
        );
        assert_eq!(within.context_budget.tokens, 5000);
        // An answer allowed the whole window still leaves half of it to the request.
        let greedy = fit_limits(
            &LoopSettings {
                max_tokens: Some(8192),
                ..local()
            },
            &reported(Some(8192), None),
        );
        assert_eq!(
            (greedy.max_tokens, greedy.context_budget.tokens),
            (8192, 4096)
        );
        assert_eq!(
            fit_limits(&set, &ServerWindow::NotAsked)
                .context_budget
                .tokens,
            50_000
        );
    }

    #[test]
    fn ollamas_num_ctx_is_the_window_over_what_the_server_says() {
        let ollama = |num_ctx| LoopSettings {
            provider: ProviderName::Ollama,
            model: "qwen3:8b".to_owned(),
            num_ctx,
            ..LoopSettings::default()
        };
        let modelfile = reported(Some(8192), Some(40_960));
        let limits = fit_limits(&ollama(Some(32_768)), &modelfile);
        assert_eq!(
            (limits.max_tokens, limits.context_budget.tokens),
            (8192, 32_768 - 8192)
        );
        assert_eq!(limits.window.map(|window| window.from), Some("num_ctx"));
        let unreachable = ServerWindow::Unavailable("connection refused".to_owned());
        assert_eq!(
            fit_limits(&ollama(Some(16_384)), &unreachable).max_tokens,
            4096,
            "num_ctx holds without the server"
        );
        let from_modelfile = fit_limits(&ollama(None), &modelfile);
        assert_eq!(
            (
                from_modelfile.max_tokens,
                from_modelfile.context_budget.tokens
            ),
            (2048, 6144)
        );
        // num_ctx means nothing to other providers.
        let openai = LoopSettings {
            provider: ProviderName::Openai,
            ..ollama(Some(2048))
        };
        assert_eq!(
            fit_limits(&openai, &ServerWindow::NotAsked).max_tokens,
            8192
        );
    }
}
