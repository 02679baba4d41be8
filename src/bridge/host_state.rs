//! What the request table's calls need, held once for the host's life: the manager,
//! approvals, credentials, the transcript and reply queues; and the calls of its rows that
//! are more than one line (following a transcript, the provider's state, probing MCP
//! servers, the notifications' updates). The table and the nvim-rs handler both use it.

use super::dto::{
    AgentProbeParams, AgentProbeReply, BudgetParams, CredentialsParams, LimitsReply, McpParams,
    McpProbeParams, McpProbeReply, ProviderParams, ProviderReply, TranscriptParams,
    TranscriptReply,
};
use super::event_pump::OutgoingQueue;
use super::words::manager_error;
use std::sync::Arc;

use crate::agent::{InteractiveApprover, LoopManager, TranscriptText};
use crate::llm::{ProviderEnv, SharedEnv};

/// The host's state, cloned into each request's task (every part is shared).
#[derive(Clone)]
pub struct HostState {
    pub(super) manager: LoopManager,
    pub(super) approvals: Arc<InteractiveApprover>,
    pub(super) credentials: SharedEnv,
    /// Where followed transcripts' text goes (to Lua, through the transcript pump).
    pub(super) transcripts: tokio::sync::mpsc::UnboundedSender<TranscriptText>,
    /// Where the answers to asynchronous requests go, behind the events already queued.
    pub(super) outgoing: OutgoingQueue,
    pub(super) test_hooks: bool,
}

impl HostState {
    pub fn new(
        manager: LoopManager,
        approvals: Arc<InteractiveApprover>,
        credentials: SharedEnv,
        transcripts: tokio::sync::mpsc::UnboundedSender<TranscriptText>,
        outgoing: OutgoingQueue,
        test_hooks: bool,
    ) -> HostState {
        HostState {
            manager,
            approvals,
            credentials,
            transcripts,
            outgoing,
            test_hooks,
        }
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

    /// `agent_probe`: starts each configured coding agent and initializes it.
    pub(super) async fn agent_probe(
        &self,
        params: AgentProbeParams,
    ) -> Result<Vec<AgentProbeReply>, String> {
        let settings = &params.settings;
        crate::acp::check_agents(&settings.agents, settings.code_agent.as_deref())
            .map_err(|err| format!("Loopr: {err}"))?;
        let probed = crate::acp::probe_agents(
            &settings.agents,
            &params.root,
            crate::acp::INITIALIZE_TIMEOUT,
        )
        .await;
        Ok(probed
            .into_iter()
            .map(|(name, probed)| AgentProbeReply::new(name, probed))
            .collect())
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
