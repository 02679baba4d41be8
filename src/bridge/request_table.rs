//! Every request and notification Lua sends the host, each in one row: its name, its
//! parameters, the call that answers it, its reply, whether it runs on the blocking pool and
//! whether it may come as a `request` notification. The dispatch, its "unknown
//! request" error and the documented list all come from these rows, so a request's name is
//! written once in Rust. Answering a request (in its own task, so a panic becomes an error
//! reply) is here too, since a `request` notification is one of the rows.

use nvim_rs::Value;

use super::dto::{
    AgentProbeParams, AgentProbeReply, ApprovalParams, BudgetParams, CancelParams, ChangesReply,
    CredentialsParams, HelloReply, LoopIdReply, LoopIdsParams, LoopRecordReply, McpParams,
    McpProbeParams, McpProbeReply, NoParams, PhaseParams, PlanParams, ProviderParams,
    ProviderReply, RawArgs, RequirementsParams, RequirementsReply, ResumeReply, ReviseParams,
    RewindReply, RootParams, RulesParams, RulesReply, RunParams, StatusParams, TasksParams,
    TasksReply, TranscriptCloseParams, TranscriptParams, TranscriptReply, UndoParams, UndoReply,
    VerifyParams, WireParams, to_value,
};
use super::host_state::HostState;
use super::words::manager_error;

/// Where a request's call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// On the async workers: calls that wait on the network or on a loop, never on a disk.
    Async,
    /// On the blocking pool: calls that read and write SQLite (with fsync) or walk files, so
    /// the async workers that stream model answers never wait.
    Blocking,
}

/// Who sends a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// The plugin's Lua (a test checks that it does).
    Lua,
    /// Only tests, and only with the test hooks on; unknown otherwise.
    Tests,
    /// No current Lua: an older plugin sent it (before the `credentials` notification, or
    /// before `hello`), and the host still answers it.
    OlderPlugin,
}

/// One request of the table.
#[derive(Debug)]
pub struct RequestSpec {
    pub name: &'static str,
    /// The Rust type its single parameter table reads into.
    pub params: &'static str,
    /// The Rust type of its reply.
    pub reply: &'static str,
    pub runs: Runs,
    /// Whether it may come as a `request` notification (Lua's `host.send`), answered
    /// through the event queue; else only as a request Neovim waits on (`host.request`).
    pub notification: bool,
    pub sender: Sender,
    pub doc: &'static str,
    id: RequestId,
}

/// One notification of the table; none has a reply.
#[derive(Debug)]
pub struct NotificationSpec {
    pub name: &'static str,
    pub doc: &'static str,
    id: NotificationId,
}

/// The table of requests: the rows give `REQUESTS` and `run`, which parses the parameters,
/// calls the row's body where the row says, and encodes its reply.
macro_rules! request_table {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident($params:ty) -> $reply:ty, $runs:ident, notification: $notification:literal,
        sender: $sender:ident => |$host:ident, $bound:ident| $body:expr;
    )*) => {
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        enum RequestId { $($name,)* }

        pub static REQUESTS: &[RequestSpec] = &[$(RequestSpec {
            name: stringify!($name),
            params: stringify!($params),
            reply: stringify!($reply),
            runs: Runs::$runs,
            notification: $notification,
            sender: Sender::$sender,
            doc: concat!($($doc),+),
            id: RequestId::$name,
        },)*];

        /// Puts the schema of every reply in `generator`: its named classes become its
        /// definitions.
        pub(super) fn reply_schemas(generator: &mut schemars::SchemaGenerator) {
            $(generator.subschema_for::<$reply>();)*
        }

        /// Answers request `spec` with `args`, its single parameter table.
        pub(super) async fn run(
            host: &HostState,
            spec: &'static RequestSpec,
            args: Vec<Value>,
        ) -> Result<Value, String> {
            match spec.id {
                $(RequestId::$name => {
                    let parsed = <$params as WireParams>::from_args(spec.name, args)?;
                    let reply: $reply =
                        request_table!(@call $runs, host, parsed, |$host, $bound| $body)?;
                    to_value(&reply)
                })*
            }
        }
    };
    (@call Async, $from:ident, $parsed:ident, |$handler:ident, $bound:ident| $body:expr) => {{
        let $handler = $from;
        let $bound = $parsed;
        let answered: Result<_, String> = $body;
        answered
    }};
    (@call Blocking, $from:ident, $parsed:ident, |$handler:ident, $bound:ident| $body:expr) => {{
        let owned = $from.clone();
        on_blocking_pool(move || {
            let $handler = &owned;
            let $bound = $parsed;
            $body
        })
        .await
    }};
}

/// The table of notifications: the rows give `NOTIFICATIONS` and `notify`.
macro_rules! notification_table {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident($params:ty) => $apply:path;
    )*) => {
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        enum NotificationId { $($name,)* }

        pub static NOTIFICATIONS: &[NotificationSpec] = &[$(NotificationSpec {
            name: stringify!($name),
            doc: concat!($($doc),+),
            id: NotificationId::$name,
        },)*];

        /// Applies notification `spec`; nothing waits on it and nothing answers it, so
        /// parameters it cannot read are logged and dropped.
        pub(super) fn notify(state: &HostState, spec: &NotificationSpec, args: Vec<Value>) {
            match spec.id {
                $(NotificationId::$name => {
                    match <$params as WireParams>::from_args(spec.name, args) {
                        Ok(parsed) => $apply(state, parsed),
                        Err(message) => tracing::error!(
                            notification = spec.name,
                            error = %message,
                            "notification refused"
                        ),
                    }
                })*
            }
        }
    };
}

/// The reply naming loop `id` of the project at `root` as messages word it.
fn named_reply(
    host: &HostState,
    root: &std::path::Path,
    id: crate::store::LoopId,
) -> Result<LoopIdReply, String> {
    let records = host.manager.status(root).map_err(manager_error)?;
    Ok(LoopIdReply::named(&records, id))
}

request_table! {
    /// The host's version and wire protocol, which the plugin checks before it sends anything
    /// else (it refuses a host of another protocol).
    hello(NoParams) -> HelloReply, Async, notification: true, sender: Lua
        => |_host, _params| Ok(HelloReply::current());
    /// Starts planning a task: a plan loop, named in the reply.
    plan(PlanParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| {
            // Tests hold the request here to show the editor does not wait for it.
            crate::test_hooks::hold_point("plan_request");
            host
                .manager
                .start_plan(&params.root, &params.task, params.settings)
                .map(LoopIdReply::new)
                .map_err(manager_error)
        };
    /// Starts a code loop for a phase, or a run of every phase of a plan or spec (each by
    /// name or loop id); a run is named in the reply.
    run(RunParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| match host
            .manager
            .run(
                &params.root,
                &params.phase,
                super::words::with_run_agent(params.settings, params.agent)?,
            )
            .map_err(manager_error)?
        {
            crate::agent::Started::Code(id) => Ok(LoopIdReply::new(id)),
            crate::agent::Started::Tree(id) => named_reply(host, &params.root, id),
        };
    /// Answers an approval a loop waits on; false when it was no longer waited on.
    approval(ApprovalParams) -> bool, Blocking, notification: true, sender: Lua
        => |host, params| Ok(host.approvals.resolve(params.id, params.decision()?));
    /// What a phase's newest code loop changed, one LSP location per hunk.
    changes(PhaseParams) -> ChangesReply, Blocking, notification: false, sender: Lua
        => |host, params| {
            let (loop_id, hunks) = host
                .manager
                .changes(&params.root, &params.phase)
                .map_err(manager_error)?;
            ChangesReply::new(loop_id.to_string(), hunks)
        };
    /// Restores what a phase's newest code loop changed.
    undo(UndoParams) -> UndoReply, Async, notification: true, sender: Lua
        => |host, params| host
            .manager
            .undo(&params.root, &params.phase, params.force)
            .await
            .map(|(loop_id, report)| UndoReply::new(loop_id.to_string(), report))
            .map_err(manager_error);
    /// Puts the working tree back as it was before a phase: its code loop's and every later
    /// one's changes go (from its checkpoint, else the baselines).
    rewind(UndoParams) -> RewindReply, Async, notification: true, sender: Lua
        => |host, params| host
            .manager
            .rewind(&params.root, &params.phase, params.force)
            .await
            .map(|(loop_id, report)| RewindReply::new(loop_id.to_string(), report))
            .map_err(manager_error);
    /// Starts verifying the working tree against a phase or spec (by name or loop id; empty:
    /// the only one), changing nothing: a verification loop, named in the reply.
    verify(VerifyParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .start_verification(&params.root, &params.name, params.settings)
            .map_err(manager_error)
            .and_then(|id| named_reply(host, &params.root, id));
    /// The project's loops, newest first, with what they spent at these prices.
    status(StatusParams) -> Vec<LoopRecordReply>, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .status_with_spend(&params.root, &params.price_table()?)
            .map_err(manager_error)
            .map(LoopRecordReply::rows);
    /// Follows a loop's transcript: its text comes with the token given.
    transcript(TranscriptParams) -> TranscriptReply, Blocking, notification: true, sender: Lua
        => |host, params| host.follow_transcript(params);
    /// Stops following a transcript; false when it was not followed.
    transcript_close(TranscriptCloseParams) -> bool, Blocking, notification: true, sender: Lua
        => |host, params| Ok(host.manager.unfollow_transcript(params.token));
    /// Cancels a loop (by default the newest running one).
    cancel(CancelParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .cancel(&params.root, params.id.as_deref())
            .map_err(manager_error)
            .and_then(|cancelled| named_reply(host, &params.root, cancelled.id));
    /// Approves a loop's artifact, or lets a paused loop go on.
    approve(CancelParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .approve(&params.root, params.id.as_deref())
            .map_err(manager_error)
            .and_then(|approved| named_reply(host, &params.root, approved));
    /// Revises an artifact with the user's feedback.
    revise(ReviseParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .revise(&params.root, &params.id, &params.feedback)
            .map_err(manager_error)
            .and_then(|id| named_reply(host, &params.root, id));
    /// Starts a failed or interrupted loop again.
    retry(CancelParams) -> LoopIdReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .retry(&params.root, params.id.as_deref())
            .map_err(manager_error)
            .and_then(|id| named_reply(host, &params.root, id));
    /// Opens a project and resumes the loops a host that is gone left.
    resume(RootParams) -> ResumeReply, Blocking, notification: true, sender: Lua
        => |host, params| host
            .manager
            .resume(&params.root)
            .map(ResumeReply::from)
            .map_err(manager_error);
    /// The phases' tasks, one LSP location per task.
    tasks(TasksParams) -> TasksReply, Blocking, notification: false, sender: Lua
        => |host, params| TasksReply::new(
            host
                .manager
                .tasks(&params.root, &params.selector())
                .map_err(manager_error)?,
        );
    /// A spec's requirements not yet verified, each at its line in spec.md.
    requirements(RequirementsParams) -> RequirementsReply, Blocking, notification: false,
        sender: Lua => |host, params| host
            .manager
            .requirements(&params.root, params.spec.as_deref(), params.loop_id.as_deref())
            .map(RequirementsReply::from)
            .map_err(manager_error);
    /// Loop ids for completion, optionally only those a command takes.
    loop_ids(LoopIdsParams) -> Vec<String>, Blocking, notification: false, sender: Lua
        => |host, params| Ok(host
            .manager
            .loop_ids(&params.root, params.purpose)
            .map_err(manager_error)?
            .iter()
            .map(ToString::to_string)
            .collect());
    /// Loop names for completion (the shortest that picks each loop), optionally only of
    /// the loops a command takes.
    loop_names(LoopIdsParams) -> Vec<String>, Blocking, notification: false, sender: Lua
        => |host, params| host
            .manager
            .loop_selectors(&params.root, params.purpose)
            .map_err(manager_error);
    /// Phase names and loop ids for completion.
    phase_names(RootParams) -> Vec<String>, Blocking, notification: false, sender: Lua
        => |host, params| host.manager.phase_selectors(&params.root).map_err(manager_error);
    /// Spec names for completion.
    spec_names(RootParams) -> Vec<String>, Blocking, notification: false, sender: Lua
        => |host, params| host.manager.spec_selectors(&params.root).map_err(manager_error);
    /// Phase and spec names for completion of a verification's argument.
    verify_names(RootParams) -> Vec<String>, Blocking, notification: false, sender: Lua
        => |host, params| host.manager.verify_selectors(&params.root).map_err(manager_error);
    /// Replaces the provider variables (a notification since; see `credentials` below).
    credentials(CredentialsParams) -> (), Blocking, notification: false, sender: OlderPlugin
        => |host, params| {
            host.replace_credentials(params);
            Ok(())
        };
    /// The provider the settings lead to, never a key, and the server's limits.
    provider(ProviderParams) -> ProviderReply, Async, notification: false, sender: Lua
        => |host, params| Ok(host.provider(params).await);
    /// The project's rules files under these settings: those used and those refused.
    rules(RulesParams) -> RulesReply, Blocking, notification: false, sender: Lua
        => |_host, params| RulesReply::new(&params.root, &params.settings);
    /// Which environment variables the providers read, for Neovim to pass on.
    provider_variables(NoParams) -> crate::llm::ProviderVariables, Blocking, notification: false,
        sender: Lua => |_host, _params| Ok(crate::llm::provider_variables());
    /// Starts the configured coding agents of a project and initializes each (ACP).
    agent_probe(AgentProbeParams) -> Vec<AgentProbeReply>, Async, notification: false,
        sender: Lua => |host, params| host.agent_probe(params).await;
    /// The host's MCP servers and their state.
    mcp_status(NoParams) -> Vec<crate::mcp::ServerStatus>, Async, notification: false,
        sender: Lua => |host, _params| Ok(host.manager.mcp().status());
    /// Starts the configured MCP servers of a project and lists their tools.
    mcp_probe(McpProbeParams) -> Vec<McpProbeReply>, Async, notification: false, sender: Lua
        => |host, params| host.mcp_probe(params).await;
    /// The host's version (tests send it both ways, as the simplest request; a plugin older
    /// than `hello` asked it for `:checkhealth`).
    version(NoParams) -> &'static str, Blocking, notification: true, sender: OlderPlugin
        => |_host, _params| Ok(env!("CARGO_PKG_VERSION"));
    /// Panics, to show a panic becomes an error reply.
    __panic(NoParams) -> (), Blocking, notification: true, sender: Tests
        => |_host, _params| panic!("panic requested through the __panic test hook");
}

notification_table! {
    /// `[token, method, params]`: a request the editor does not wait for; the answer comes
    /// as `require('loopr.host').reply(token, err, result)`, behind the events it caused.
    request(RawArgs) => start_request;
    /// The provider variables (keys, base URLs) as Neovim's environment has them now.
    credentials(CredentialsParams) => HostState::replace_credentials;
    /// The budget and prices of the user's `setup()`, which every plan tree is held to.
    budget(BudgetParams) => HostState::set_budget;
    /// The MCP servers of the user's `setup()`.
    mcp(McpParams) => HostState::set_mcp;
}

/// The request named `method`, if the host answers it (test-only requests with `test_hooks`).
pub fn find_request(method: &str, test_hooks: bool) -> Option<&'static RequestSpec> {
    REQUESTS
        .iter()
        .find(|spec| spec.name == method && (test_hooks || spec.sender != Sender::Tests))
}

/// The notification named `name`, if the host knows it.
pub fn find_notification(name: &str) -> Option<&'static NotificationSpec> {
    NOTIFICATIONS.iter().find(|spec| spec.name == name)
}

/// The error for a request the host does not know, naming those it does.
pub fn unknown_request(method: &str) -> String {
    let names: Vec<&str> = REQUESTS
        .iter()
        .filter(|spec| spec.sender != Sender::Tests)
        .map(|spec| spec.name)
        .collect();
    let listed = match names.split_last() {
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    format!(
        "Loopr: unknown request {method:?}; the host understands {listed} \
         (is the plugin newer than the binary? rebuild it)"
    )
}

/// Answers request `method` in its own task, so that a panic becomes an error reply instead
/// of an answer Neovim waits for forever.
pub(super) async fn answer(
    state: &HostState,
    method: String,
    args: Vec<Value>,
) -> Result<Value, String> {
    tracing::debug!(%method, "request");
    let owned = state.clone();
    let name = method.clone();
    let outcome = tokio::spawn(async move {
        let spec = find_request(&name, owned.test_hooks).ok_or_else(|| unknown_request(&name))?;
        run(&owned, spec, args).await
    })
    .await;
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
fn start_request(state: &HostState, RawArgs(args): RawArgs) {
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
        state.outgoing.reply(
            token,
            Err(
                "Loopr: a request notification needs [token, method, params] (is the plugin \
                 newer than the binary? rebuild it)"
                    .to_owned(),
            ),
        );
        return;
    };
    if let Some(spec) = find_request(&method, state.test_hooks)
        && !spec.notification
    {
        state.outgoing.reply(
            token,
            Err(format!(
                "Loopr: {method} is answered only as a request Neovim waits for, not as a \
                 request notification (is the plugin newer than the binary? rebuild it)"
            )),
        );
        return;
    }
    let owned = state.clone();
    // The plugin's start-up `hello` is no work a test holds the host after.
    let holdable = method != "hello";
    tokio::spawn(async move {
        let outcome = answer(&owned, method, args.collect()).await;
        if owned.test_hooks && holdable {
            // Tests kill the host here: the work is done, the answer not yet sent.
            let _ =
                tokio::task::spawn_blocking(|| crate::test_hooks::hold_point("request_answered"))
                    .await;
        }
        owned.outgoing.reply(token, outcome);
    });
}

/// The list of requests and notifications, for `doc/loopr.txt` or `ARCHITECTURE.md`: one
/// line per message with its parameters and reply, then what it does.
pub fn documented_requests() -> String {
    let mut text = String::from("Requests (Lua `host.request`, or `host.send` where marked):\n");
    for spec in REQUESTS.iter().filter(|spec| spec.sender != Sender::Tests) {
        let how = match (spec.notification, spec.runs) {
            (true, Runs::Blocking) => " [send; blocking pool]",
            (true, Runs::Async) => " [send]",
            (false, Runs::Blocking) => " [blocking pool]",
            (false, Runs::Async) => "",
        };
        text.push_str(&format!(
            "  {}({}) -> {}{how}\n      {}\n",
            spec.name,
            spec.params,
            spec.reply,
            one_line(spec.doc)
        ));
    }
    text.push_str("Notifications (Lua `vim.rpcnotify`; nothing answers them):\n");
    for spec in NOTIFICATIONS {
        text.push_str(&format!("  {}\n      {}\n", spec.name, one_line(spec.doc)));
    }
    text
}

fn one_line(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs `call` on the blocking pool; its panic goes on as this task's panic (`answer`
/// turns it into an error reply).
async fn on_blocking_pool<R: Send + 'static>(
    call: impl FnOnce() -> Result<R, String> + Send + 'static,
) -> Result<R, String> {
    match tokio::task::spawn_blocking(call).await {
        Ok(reply) => reply,
        Err(join_error) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(join_error) => Err(format!("Loopr: {join_error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// How Lua sends a message.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Way {
        /// `host.request`: Neovim waits for the answer.
        Waited,
        /// `host.send` (and its wrapper `send_for_loop_id`): a `request` notification.
        Sent,
        /// `vim.rpcnotify` with a literal name, or `notify_changed`, which wraps it.
        Notified,
    }

    /// The calls that send a message named by their first string argument.
    const SENDERS: &[(&str, Way)] = &[
        ("request(", Way::Waited),
        ("send(", Way::Sent),
        ("send_for_loop_id(", Way::Sent),
        ("loop_request(", Way::Sent),
        ("vim.rpcnotify, chan, ", Way::Notified),
        ("vim.rpcrequest, chan, ", Way::Waited),
        ("notify_changed(told, chan, ", Way::Notified),
    ];

    /// Every message a Lua file sends with a literal name: (name, way, `file:line`).
    fn lua_messages() -> Vec<(String, Way, String)> {
        let mut found = Vec::new();
        for dir in ["lua/loopr", "plugin"] {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .expect("read the Lua sources")
                .map(|entry| entry.expect("entry").path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
                .collect();
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file).expect("read a Lua file");
                for (number, line) in text.lines().enumerate() {
                    if line.trim_start().starts_with("--") {
                        continue;
                    }
                    for (call, way) in SENDERS {
                        for (at, _) in line.match_indices(call) {
                            let starts_a_name = line[..at]
                                .chars()
                                .next_back()
                                .is_some_and(|before| before.is_alphanumeric() || before == '_');
                            if starts_a_name {
                                continue;
                            }
                            if let Some(name) = quoted(&line[at + call.len()..]) {
                                let place = format!(
                                    "{}:{}",
                                    file.file_name().unwrap_or_default().to_string_lossy(),
                                    number + 1
                                );
                                found.push((name, *way, place));
                            }
                        }
                    }
                }
            }
        }
        found
    }

    /// The string literal `text` starts with, if it does.
    fn quoted(text: &str) -> Option<String> {
        let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let rest = &text[1..];
        rest.find(quote).map(|end| rest[..end].to_owned())
    }

    #[test]
    fn every_message_lua_sends_is_in_the_table_and_every_row_has_a_lua_sender() {
        let sent = lua_messages();
        let mut wrong = Vec::new();
        for (name, way, place) in &sent {
            match way {
                Way::Notified => {
                    if find_notification(name).is_none() {
                        wrong.push(format!(
                            "{place}: notification {name:?} is not in the table"
                        ));
                    }
                }
                Way::Waited | Way::Sent => match find_request(name, false) {
                    None => wrong.push(format!("{place}: request {name:?} is not in the table")),
                    Some(spec) if *way == Way::Sent && !spec.notification => wrong.push(format!(
                        "{place}: {name:?} is sent as a request notification, which its row refuses"
                    )),
                    Some(_) => {}
                },
            }
        }
        let sent_by_lua = |name: &str, notification: bool| {
            sent.iter().any(|(sent_name, way, _)| {
                sent_name == name && (*way == Way::Notified) == notification
            })
        };
        for spec in REQUESTS {
            match (spec.sender, sent_by_lua(spec.name, false)) {
                (Sender::Lua, false) => {
                    wrong.push(format!("request {:?}: no Lua sends it", spec.name))
                }
                (Sender::Tests | Sender::OlderPlugin, true) => wrong.push(format!(
                    "request {:?}: Lua sends it, but its row says {:?}",
                    spec.name, spec.sender
                )),
                _ => {}
            }
        }
        for spec in NOTIFICATIONS {
            if !sent_by_lua(spec.name, true) {
                wrong.push(format!("notification {:?}: no Lua sends it", spec.name));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The scan found the senders at all (a renamed `host.send` would hide every call).
        for way in [Way::Waited, Way::Sent, Way::Notified] {
            assert!(sent.iter().any(|(_, found, _)| *found == way), "{way:?}");
        }
    }

    #[test]
    fn names_are_unique_and_the_unknown_request_error_lists_them() {
        let mut names: Vec<&str> = REQUESTS.iter().map(|spec| spec.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REQUESTS.len());
        let err = unknown_request("frobnicate");
        assert!(
            err.starts_with("Loopr: unknown request \"frobnicate\"; "),
            "{err}"
        );
        assert!(err.contains(" plan, run, approval, "), "{err}");
        assert!(err.contains(" mcp_probe and version "), "{err}");
        assert!(!err.contains("__panic"), "{err}");
        assert!(find_request("__panic", false).is_none());
        assert!(find_request("__panic", true).is_some());
    }

    #[test]
    fn the_documented_list_names_every_message_lua_sends() {
        let documented = documented_requests();
        for (name, _, _) in lua_messages() {
            assert!(
                documented.contains(&format!("\n  {name}")),
                "{name} missing from:\n{documented}"
            );
        }
        assert!(!documented.contains("__panic"), "{documented}");
    }
}
