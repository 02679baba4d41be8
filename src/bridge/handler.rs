use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};

use super::dto::{
    ApprovalParams, CancelParams, ChangesReply, CredentialsParams, LoopIdReply, LoopIdsParams,
    LoopRecordReply, PhaseParams, PlanParams, ProviderParams, ProviderReply, ReviseParams,
    RootParams, RunParams, StatusParams, TasksParams, TasksReply, UndoParams, UndoReply, params,
    to_value,
};
use std::sync::Arc;

use crate::agent::{InteractiveApprover, LoopManager};
use crate::llm::{ProviderEnv, SharedEnv};

type Writer = Compat<tokio::fs::File>;

#[derive(Clone)]
pub struct RpcHandler {
    manager: LoopManager,
    approvals: Arc<InteractiveApprover>,
    credentials: SharedEnv,
    test_hooks: bool,
}

impl RpcHandler {
    pub fn new(
        manager: LoopManager,
        approvals: Arc<InteractiveApprover>,
        credentials: SharedEnv,
        test_hooks: bool,
    ) -> RpcHandler {
        RpcHandler {
            manager,
            approvals,
            credentials,
            test_hooks,
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
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&UndoReply::new(loop_id.to_string(), report))
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
                let id = self
                    .manager
                    .start_plan(&params.root, &params.task, params.settings)
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "status" => {
                let params: StatusParams = params(method, args)?;
                let records: Vec<LoopRecordReply> = self
                    .manager
                    .status_with_spend(&params.root, &params.price_table()?)
                    .map_err(|err| format!("Loopr: {err}"))?
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
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&TasksReply::new(phases)?)
            }
            "cancel" => {
                let params: CancelParams = params(method, args)?;
                let id = self
                    .manager
                    .cancel(&params.root, params.id.as_deref())
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "loop_ids" => {
                let params: LoopIdsParams = params(method, args)?;
                let ids: Vec<String> = self
                    .manager
                    .status(&params.root)
                    .map_err(|err| format!("Loopr: {err}"))?
                    .into_iter()
                    .filter(|record| params.matches(record.status))
                    .map(|record| record.id.to_string())
                    .collect();
                to_value(&ids)
            }
            "run" => {
                let params: RunParams = params(method, args)?;
                let id = self
                    .manager
                    .start_code(&params.root, &params.phase, params.settings)
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "changes" => {
                let params: PhaseParams = params(method, args)?;
                let (loop_id, hunks) = self
                    .manager
                    .changes(&params.root, &params.phase)
                    .map_err(|err| format!("Loopr: {err}"))?;
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
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "revise" => {
                let params: ReviseParams = params(method, args)?;
                let id = self
                    .manager
                    .revise(&params.root, &params.id, &params.feedback)
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "resume" => {
                let params: RootParams = params(method, args)?;
                let active = self
                    .manager
                    .resume(&params.root)
                    .map_err(|err| format!("Loopr: {err}"))?;
                Ok(Value::from(active))
            }
            "retry" => {
                let params: CancelParams = params(method, args)?;
                let id = self
                    .manager
                    .retry(&params.root, params.id.as_deref())
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&LoopIdReply {
                    loop_id: id.to_string(),
                })
            }
            "phase_names" => {
                let params: RootParams = params(method, args)?;
                let names = self
                    .manager
                    .phase_selectors(&params.root)
                    .map_err(|err| format!("Loopr: {err}"))?;
                to_value(&names)
            }
            "credentials" => {
                let params = CredentialsParams::from_args(args)?;
                let env = ProviderEnv::new(params.env);
                // Which variables are set, never their values.
                tracing::info!(variables = ?env, "provider variables from Neovim for loops started from now on");
                self.credentials.replace(env);
                Ok(Value::Nil)
            }
            "provider" => {
                let params: ProviderParams = params("provider", args)?;
                to_value(&provider_reply(
                    &params.settings,
                    &self.credentials.current(),
                ))
            }
            "version" => Ok(Value::from(env!("CARGO_PKG_VERSION"))),
            "__panic" if self.test_hooks => panic!("panic requested through the __panic test hook"),
            other => Err(format!(
                "Loopr: unknown request {other:?}; the host understands plan, run, approval, \
                 changes, undo, status, cancel, approve, revise, retry, resume, tasks, loop_ids, \
                 phase_names, credentials, provider and version (is the plugin newer than the binary? \
                 rebuild it)"
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
        tracing::debug!(method = %name, "request");
        let handler = self.clone();
        let method = name.clone();
        // The work runs in its own task so that a panic becomes an error reply instead of a
        // request Neovim waits on forever.
        let outcome = tokio::spawn(async move { handler.dispatch(&method, args).await }).await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => {
                tracing::info!(method = %name, error = %message, "request failed");
                Err(Value::from(message))
            }
            Err(join_error) => {
                tracing::error!(method = %name, error = %join_error, "request handler panicked");
                Err(Value::from(format!(
                    "Loopr: internal error while handling {name}; details are in the log (:LooprLog)"
                )))
            }
        }
    }
}

/// The provider `settings` lead to, for `:checkhealth loopr`.
fn provider_reply(settings: &crate::agent::LoopSettings, env: &ProviderEnv) -> ProviderReply {
    let info = crate::llm::providers::resolve(&settings.provider_settings(), env);
    let mut problem = info.problem().map(|err| err.to_string());
    let mut models = std::collections::BTreeMap::new();
    for level in crate::agent::MODEL_LEVELS {
        match settings.model_for(level) {
            Ok(model) => {
                models.insert(level, model);
            }
            Err(err) => problem = problem.or(Some(err)),
        }
    }
    ProviderReply {
        info,
        models,
        problem,
        tool_protocol: settings.tool_protocol,
        tool_format: settings.tool_format,
    }
}
