//! The msgpack-RPC handler: decodes each request and notification Lua sends, calls the manager and encodes its
//! reply or error.

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};

use super::dto::{
    ApprovalParams, BudgetParams, CancelParams, ChangesReply, CredentialsParams, LimitsReply,
    LoopIdReply, LoopIdsParams, LoopRecordReply, McpParams, McpProbeParams, McpProbeReply,
    PhaseParams, PlanParams, ProviderParams, ProviderReply, RefusedRulesReply, ResumeReply,
    ReviseParams, RootParams, RulesParams, RulesReply, RunParams, StatusParams, TasksParams,
    TasksReply, TranscriptCloseParams, TranscriptParams, TranscriptReply, UndoParams, UndoReply,
    params, to_value,
};
use super::event_pump::OutgoingQueue;
use super::words::manager_error;
use std::sync::Arc;

use crate::agent::{InteractiveApprover, LoopManager, TranscriptText};
use crate::llm::{ProviderEnv, SharedEnv};

type Writer = Compat<tokio::fs::File>;

#[derive(Clone)]
pub struct RpcHandler {
    manager: LoopManager,
    approvals: Arc<InteractiveApprover>,
    credentials: SharedEnv,
    /// Where followed transcripts' text goes (to Lua, through the transcript pump).
    transcripts: tokio::sync::mpsc::UnboundedSender<TranscriptText>,
    /// Where the answers to asynchronous requests go, behind the events already queued.
    outgoing: OutgoingQueue,
    test_hooks: bool,
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
    fn start_request(&self, args: Vec<Value>) {
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

    fn replace_credentials(&self, args: Vec<Value>) -> Result<(), String> {
        let params = CredentialsParams::from_args(args)?;
        let env = ProviderEnv::new(params.env);
        // Which variables are set, never their values.
        tracing::info!(variables = ?env, "provider variables from Neovim for loops started from now on");
        self.credentials.replace(env);
        Ok(())
    }

    /// `budget` notification: every plan tree is held to the user's budget from now on (so
    /// before the request sent after it starts); the trees it lets go on are found in the
    /// background.
    fn set_budget(&self, args: Vec<Value>) {
        let params: BudgetParams = match params("budget", args) {
            Ok(params) => params,
            Err(err) => {
                tracing::error!(error = %err, "budget notification refused");
                return;
            }
        };
        if let Err(err) = self.manager.set_tree_budget(params.budget, params.prices) {
            tracing::error!(error = %err, "budget notification refused");
            return;
        }
        let manager = self.manager.clone();
        tokio::task::spawn_blocking(move || manager.resume_within_budget());
    }

    /// `mcp` notification: the MCP servers of the user's `setup()`, where loops (those
    /// resumed included) take their servers' `env` values from, since none is stored.
    fn set_mcp(&self, args: Vec<Value>) {
        match McpParams::from_args(args) {
            Ok(McpParams(settings)) => {
                tracing::info!(
                    servers = ?settings.servers.keys().collect::<Vec<_>>(),
                    "MCP settings from Neovim for loops started from now on"
                );
                self.manager.mcp().use_current(&settings);
            }
            Err(err) => tracing::error!(error = %err, "mcp notification refused"),
        }
    }

    async fn dispatch(&self, method: &str, args: Vec<Value>) -> Result<Value, String> {
        match method {
            "undo" => {
                let params: UndoParams = params(method, args)?;
                let (loop_id, report) = self
                    .manager
                    .undo(&params.root, &params.phase, params.force)
                    .await
                    .map_err(manager_error)?;
                to_value(&UndoReply::new(loop_id.to_string(), report))
            }
            "mcp_status" => to_value(&self.manager.mcp().status()),
            "provider" => {
                let params: ProviderParams = params(method, args)?;
                let env = self.credentials.current();
                let mut reply = provider_reply(&params.settings, &env);
                if reply.problem.is_none() {
                    reply.limits = server_limits(&params.settings, &env).await;
                }
                to_value(&reply)
            }
            "mcp_probe" => {
                let params: McpProbeParams = params(method, args)?;
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
                let replies: Vec<McpProbeReply> = probed
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
                    .collect();
                to_value(&replies)
            }
            _ => {
                // The rest read and write SQLite (with fsync) and walk files: the blocking
                // pool's work, so the async workers that stream model answers never wait.
                let handler = self.clone();
                let method = method.to_owned();
                match tokio::task::spawn_blocking(move || handler.dispatch_blocking(&method, args))
                    .await
                {
                    Ok(reply) => reply,
                    Err(join_error) if join_error.is_panic() => {
                        std::panic::resume_unwind(join_error.into_panic())
                    }
                    Err(join_error) => Err(format!("Loopr: {join_error}")),
                }
            }
        }
    }

    fn dispatch_blocking(&self, method: &str, args: Vec<Value>) -> Result<Value, String> {
        match method {
            "plan" => {
                let params: PlanParams = params(method, args)?;
                // Tests hold the request here to show the editor does not wait for it.
                crate::test_hooks::hold_point("plan_request");
                let id = self
                    .manager
                    .start_plan(&params.root, &params.task, params.settings)
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "transcript" => {
                let params: TranscriptParams = params(method, args)?;
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
                to_value(&TranscriptReply {
                    loop_id: record.id.to_string(),
                    loop_type: record.loop_type.as_str(),
                    status: record.status.as_str(),
                })
            }
            "transcript_close" => {
                let params: TranscriptCloseParams = params(method, args)?;
                Ok(Value::from(self.manager.unfollow_transcript(params.token)))
            }
            "status" => {
                let params: StatusParams = params(method, args)?;
                let records: Vec<LoopRecordReply> = self
                    .manager
                    .status_with_spend(&params.root, &params.price_table()?)
                    .map_err(manager_error)?
                    .into_iter()
                    .map(LoopRecordReply::new)
                    .collect();
                to_value(&records)
            }
            "tasks" => {
                let params: TasksParams = params(method, args)?;
                let phases = self
                    .manager
                    .tasks(&params.root, &params.selector())
                    .map_err(manager_error)?;
                to_value(&TasksReply::new(phases)?)
            }
            "cancel" => {
                let params: CancelParams = params(method, args)?;
                let cancelled = self
                    .manager
                    .cancel(&params.root, params.id.as_deref())
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: cancelled.id.to_string(),
                })
            }
            "loop_ids" => {
                let params: LoopIdsParams = params(method, args)?;
                let ids: Vec<String> = self
                    .manager
                    .status(&params.root)
                    .map_err(manager_error)?
                    .into_iter()
                    .filter(|record| params.matches(record))
                    .map(|record| record.id.to_string())
                    .collect();
                to_value(&ids)
            }
            "run" => {
                let params: RunParams = params(method, args)?;
                let id = self
                    .manager
                    .start_code(&params.root, &params.phase, params.settings)
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "changes" => {
                let params: PhaseParams = params(method, args)?;
                let (loop_id, hunks) = self
                    .manager
                    .changes(&params.root, &params.phase)
                    .map_err(manager_error)?;
                to_value(&ChangesReply::new(loop_id.to_string(), hunks)?)
            }
            "approval" => {
                let params: ApprovalParams = params(method, args)?;
                let answered = self.approvals.resolve(params.id, params.decision()?);
                Ok(Value::from(answered))
            }
            "approve" => {
                let params: CancelParams = params(method, args)?;
                let id = self
                    .manager
                    .approve(&params.root, params.id.as_deref())
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "revise" => {
                let params: ReviseParams = params(method, args)?;
                let id = self
                    .manager
                    .revise(&params.root, &params.id, &params.feedback)
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "resume" => {
                let params: RootParams = params(method, args)?;
                let counts = self.manager.resume(&params.root).map_err(manager_error)?;
                to_value(&ResumeReply::from(counts))
            }
            "retry" => {
                let params: CancelParams = params(method, args)?;
                let id = self
                    .manager
                    .retry(&params.root, params.id.as_deref())
                    .map_err(manager_error)?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "phase_names" => {
                let params: RootParams = params(method, args)?;
                let names = self
                    .manager
                    .phase_selectors(&params.root)
                    .map_err(manager_error)?;
                to_value(&names)
            }
            "credentials" => {
                self.replace_credentials(args)?;
                Ok(Value::Nil)
            }
            "rules" => {
                let params: RulesParams = params("rules", args)?;
                let (rules, refused) = crate::agent::project_rules(&params.root, &params.settings)
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&RulesReply {
                    used: rules.summary(),
                    refused: refused
                        .into_iter()
                        .map(|refused| RefusedRulesReply {
                            path: refused.path,
                            reason: refused.reason,
                        })
                        .collect(),
                })
            }
            "version" => Ok(Value::from(env!("CARGO_PKG_VERSION"))),
            "__panic" if self.test_hooks => panic!("panic requested through the __panic test hook"),
            other => Err(format!(
                "Loopr: unknown request {other:?}; the host understands plan, run, approval, \
                 changes, undo, status, transcript, transcript_close, cancel, approve, revise, \
                 retry, resume, tasks, loop_ids, phase_names, credentials, provider, rules, \
                 mcp_status, mcp_probe and version \
                 (is the plugin newer than the binary? rebuild it)"
            )),
        }
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
        match name.as_str() {
            "request" => self.start_request(args),
            "credentials" => {
                if let Err(message) = self.replace_credentials(args) {
                    tracing::error!(error = %message, "credentials notification refused");
                }
            }
            "budget" => self.set_budget(args),
            "mcp" => self.set_mcp(args),
            other => tracing::warn!(notification = other, "unknown notification; ignored"),
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
