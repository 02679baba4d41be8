//! Asking the loop's server about its context window once, when a loop starts (off Neovim's
//! path), and fitting the loop's limits to the answer (`limits::fit_limits`); a server that
//! cannot be asked leaves the settings' values, with a warning in the log.

use super::context::LoopContext;
use super::limits::{Limits, fit_limits};
use crate::llm::ServerWindow;

/// Asks the loop's server about its window (for the model of the loop's level) and fits the
/// limits to it. A cancel stops the asking; the settings' values then hold.
pub async fn ask_server(context: &LoopContext) -> Limits {
    let settings = &context.settings;
    let unasked = fit_limits(settings, &ServerWindow::NotAsked);
    if settings.max_tokens.is_some()
        && settings.context_budget.is_some()
        && !settings.provider.sends_num_ctx()
    {
        // Nothing to fit; the window `num_ctx` sets still bounds the budget.
        return unasked;
    }
    let Ok(model) = settings.model_for(context.record.loop_type.as_str()) else {
        return unasked;
    };
    let server = tokio::select! {
        biased;
        _ = context.cancel.cancelled() => return unasked,
        server = context.provider.server_window(&model) => server,
    };
    let limits = fit_limits(settings, &server);
    let id = context.record.id.as_str();
    match (&server, limits.window) {
        (ServerWindow::Unavailable(why), None) => tracing::warn!(
            loop_id = id,
            %why,
            max_tokens = limits.max_tokens,
            context_budget = limits.context_budget.tokens,
            "the server could not be asked for its context window; the limits are the \
             settings' (set max_tokens and context_budget to fit the server)"
        ),
        (ServerWindow::Reported(_), None) => tracing::warn!(
            loop_id = id,
            max_tokens = limits.max_tokens,
            context_budget = limits.context_budget.tokens,
            "the server does not say its context window; the limits are the settings' (set \
             max_tokens and context_budget to fit the server)"
        ),
        (_, Some(window)) => tracing::info!(
            loop_id = id,
            window = window.tokens,
            window_from = window.from,
            max_tokens = limits.max_tokens,
            context_budget = limits.context_budget.tokens,
            "limits fitted to the context window"
        ),
        (ServerWindow::NotAsked, None) => {}
    }
    limits
}
