//! The RPC handler: answers Neovim's requests through the request table, applies its
//! notifications, and holds what the table's calls need (the manager, approvals, credentials,
//! the transcript and reply queues).

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};

use super::dto::{
    BudgetParams, CredentialsParams, LimitsReply, McpParams, McpProbeParams, McpProbeReply,
    ProviderParams, ProviderReply, RawArgs, TranscriptParams, TranscriptReply,
};
use super::event_pump::OutgoingQueue;
use super::request_table::{self, find_notification, find_request, unknown_request};
use super::words::manager_error;
use std::sync::Arc;

use crate::agent::{InteractiveApprover, LoopManager, TranscriptText};
use crate::llm::{ProviderEnv, SharedEnv};

type Writer = Compat<tokio::fs::File>;

#[derive(Clone)]
pub struct RpcHandler {
    pub(super) manager: LoopManager,
    pub(super) approvals: Arc<InteractiveApprover>,
    pub(super) credentials: SharedEnv,
    /// Where followed transcripts' text goes (to Lua, through the transcript pump).
    pub(super) transcripts: tokio::sync::mpsc::UnboundedSender<TranscriptText>,
    /// Where the answers to asynchronous requests go, behind the events already queued.
    pub(super) outgoing: OutgoingQueue,
    pub(super) test_hooks: bool,
}

impl RpcHandler {
    pub fn new(
        manager: LoopManager,
        approvals: Arc<InteractiveApprover>,
        credentials: SharedEnv,
        transcripts: tokio::sync::mpsc::UnboundedSender<TranscriptText>,
        outgoing: OutgoingQueue,
        test_hooks: bool,
    ) -> RpcHandler {
        RpcHandler {
            manager,
            approvals,
            credentials,
            transcripts,
            outgoing,
            test_hooks,
        }
    }

    /// Runs request `method` in its own task, so that a panic becomes an error reply instead
    /// of an answer Neovim waits for forever.
    async fn answer(&self, method: String, args: Vec<Value>) -> Result<Value, String> {
        tracing::debug!(%method, "request");
        let handler = self.clone();
        let name = method.clone();
        let outcome = tokio::spawn(async move { handler.dispatch(&name, args).await }).await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => {
                tracing::info!(%method, error = %message, "request failed");
                Err(message)
            }
            Err(join_error) => {
                tracing::error!(%method, error = %join_error, "request handler panicked");
                Err(format!(
                    "Loopr: internal error while handling {method}; details are in the log (:LooprLog)"
                ))
            }
        }
    }

    /// `request` notification `[token, method, params]`: the editor goes on at once; the
    /// answer comes as `require('loopr.host').reply(token, err, result)`, queued behind the
    /// events the request caused.
    pub(super) fn start_request(&self, RawArgs(args): RawArgs) {
        let mut args = args.into_iter();
        let token = args.next().and_then(|token| token.as_i64());
        let method = args
            .next()
            .and_then(|method| method.as_str().map(str::to_owned));
        let Some(token) = token else {
            // Without a token there is no one to answer; only a mismatched plugin sends this.
            tracing::error!("request notification without [token, method, params]; ignored");
            return;
        };
        let Some(method) = method else {
            self.outgoing.reply(
                token,
                Err(
                    "Loopr: a request notification needs [token, method, params] (is the plugin \
                     newer than the binary? rebuild it)"
                        .to_owned(),
                ),
            );
            return;
        };
        if let Some(spec) = find_request(&method, self.test_hooks)
            && !spec.notification
        {
            self.outgoing.reply(
                token,
                Err(format!(
                    "Loopr: {method} is answered only as a request Neovim waits for, not as a \
                     request notification (is the plugin newer than the binary? rebuild it)"
                )),
            );
            return;
        }
        let handler = self.clone();
        tokio::spawn(async move {
            let outcome = handler.answer(method, args.collect()).await;
            if handler.test_hooks {
                // Tests kill the host here: the work is done, the answer not yet sent.
                let _ = tokio::task::spawn_blocking(|| {
                    crate::test_hooks::hold_point("request_answered")
                })
                .await;
            }
            handler.outgoing.reply(token, outcome);
        });
    }

    pub(super) fn replace_credentials(&self, params: CredentialsParams) {
        let env = ProviderEnv::new(params.env);
        // Which variables are set, never their values.
        tracing::info!(variables = ?env, "provider variables from Neovim for loops started from now on");
        self.credentials.replace(env);
    }

    /// `budget` notification: every plan tree is held to the user's budget from now on (so
    /// before the request sent after it starts); the trees it lets go on are found in the
    /// background.
    pub(super) fn set_budget(&self, params: BudgetParams) {
        if let Err(err) = self.manager.set_tree_budget(params.budget, params.prices) {
            tracing::error!(error = %err, "budget notification refused");
            return;
        }
        let manager = self.manager.clone();
        tokio::task::spawn_blocking(move || manager.resume_within_budget());
    }

    /// `mcp` notification: the MCP servers of the user's `setup()`, where loops (those
    /// resumed included) take their servers' `env` values from, since none is stored.
    pub(super) fn set_mcp(&self, McpParams(settings): McpParams) {
        tracing::info!(
            servers = ?settings.servers.keys().collect::<Vec<_>>(),
            "MCP settings from Neovim for loops started from now on"
        );
        self.manager.mcp().use_current(&settings);
    }

    async fn dispatch(&self, method: &str, args: Vec<Value>) -> Result<Value, String> {
        let spec = find_request(method, self.test_hooks).ok_or_else(|| unknown_request(method))?;
        request_table::run(self, spec, args).await
    }

    /// `transcript`: follows the loop the parameters lead to.
    pub(super) fn follow_transcript(
        &self,
        params: TranscriptParams,
    ) -> Result<TranscriptReply, String> {
        let target = self
            .manager
            .transcript_target(&params.root, params.id.as_deref(), params.path.as_deref())
            .map_err(manager_error)?;
        let record = self
            .manager
            .follow_transcript(
                &params.root,
                target.id.as_str(),
                params.token,
                self.transcripts.clone(),
            )
            .map_err(manager_error)?;
        Ok(TranscriptReply {
            loop_id: record.id.to_string(),
            loop_type: record.loop_type.as_str(),
            status: record.status.as_str(),
        })
    }

    /// `provider`: what the settings lead to, and, when a loop could start, the server's
    /// limits.
    pub(super) async fn provider(&self, params: ProviderParams) -> ProviderReply {
        let env = self.credentials.current();
        let mut reply = provider_reply(&params.settings, &env);
        if reply.problem.is_none() {
            reply.limits = server_limits(&params.settings, &env).await;
        }
        reply
    }

    /// `mcp_probe`: starts the configured servers and lists their tools.
    pub(super) async fn mcp_probe(
        &self,
        params: McpProbeParams,
    ) -> Result<Vec<McpProbeReply>, String> {
        params
            .settings
            .mcp
            .check()
            .map_err(|err| format!("Loopr: {err}"))?;
        let probed = self
            .manager
            .mcp()
            .probe(&params.root, &params.settings.mcp)
            .await;
        Ok(probed
            .into_iter()
            .map(|(name, listed)| match listed {
                Ok(tools) => McpProbeReply {
                    name,
                    tools: Some(tools),
                    error: None,
                },
                Err(error) => McpProbeReply {
                    name,
                    tools: None,
                    error: Some(error),
                },
            })
            .collect())
    }
}

#[async_trait]
impl Handler for RpcHandler {
    type Writer = Writer;

    async fn handle_request(
        &self,
        name: String,
        args: Vec<Value>,
        _neovim: Neovim<Writer>,
    ) -> Result<Value, Value> {
        self.answer(name, args).await.map_err(Value::from)
    }

    /// nvim-rs awaits this before it reads the next message, which keeps notifications in
    /// the order Lua sent them: credentials are in place before the request sent after them
    /// starts. Nothing here waits.
    async fn handle_notify(&self, name: String, args: Vec<Value>, _neovim: Neovim<Writer>) {
        tracing::debug!(notification = %name, "notification");
        match find_notification(&name) {
            Some(spec) => request_table::notify(self, spec, args),
            None => tracing::warn!(notification = %name, "unknown notification; ignored"),
        }
    }
}

/// What the server of `settings` says about its window (asked as a loop asks it: once per
/// host run, bounded), and the limits fitted to it; None where no provider can be built.
async fn server_limits(
    settings: &crate::agent::LoopSettings,
    env: &ProviderEnv,
) -> Option<LimitsReply> {
    let model = settings.model_for("plan").ok()?;
    let provider =
        crate::llm::providers::build(&settings.provider_settings(), env, settings.retry_policy())
            .ok()?;
    let server = provider.server_window(&model).await;
    Some(LimitsReply::new(settings, &server))
}

/// The provider `settings` lead to, for `:checkhealth loopr`.
fn provider_reply(settings: &crate::agent::LoopSettings, env: &ProviderEnv) -> ProviderReply {
    let mut info = crate::llm::providers::resolve(&settings.provider_settings(), env);
    info.base_url = crate::llm::url_to_show(&info.base_url);
    let mut problem = info.problem().map(|err| err.to_string());
    let mut models = std::collections::BTreeMap::new();
    for level in crate::agent::MODEL_LEVELS {
        match settings.model_for(level) {
            Ok(model) => {
                models.insert(level, model);
            }
            Err(err) => problem = problem.or(Some(super::words::hinted(&err))),
        }
    }
    ProviderReply {
        info,
        models,
        problem,
        tool_protocol: settings.tool_protocol,
        tool_format: settings.tool_format,
        limits: None,
    }
}
