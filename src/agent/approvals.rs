//! Who approves a code loop's changes. `PolicyApprover` applies the user's settings (ask or
//! accept automatically per kind of change, commands on the allow-list, "accept all of this
//! kind" for the rest of the loop) and asks the rest of an `InteractiveApprover`, which any
//! shell answers: it announces each request as an event and waits for `resolve`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use regex::Regex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::events::{EventSink, LoopEvent, NoticeLevel};
use crate::tools::{ApprovalRequest, Approver, ChangeKind, Decision};

/// Ask the user, or accept without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    Ask,
    Auto,
}

/// Per kind of change: ask the user, or accept without asking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Creating or overwriting a file.
    pub write: ApprovalMode,
    /// Replacing text in a file.
    pub edit: ApprovalMode,
    /// Running a shell command.
    pub command: ApprovalMode,
    /// `web_fetch` of a host not in `web_fetch_allow_hosts`.
    pub fetch: ApprovalMode,
    /// A call of an MCP server's tool not marked read-only.
    pub mcp: ApprovalMode,
}

impl Default for ApprovalSettings {
    fn default() -> ApprovalSettings {
        ApprovalSettings {
            write: ApprovalMode::Ask,
            edit: ApprovalMode::Ask,
            command: ApprovalMode::Ask,
            fetch: ApprovalMode::Ask,
            mcp: ApprovalMode::Ask,
        }
    }
}

impl ApprovalSettings {
    fn mode(&self, kind: ChangeKind) -> ApprovalMode {
        match kind {
            ChangeKind::Write => self.write,
            ChangeKind::Edit => self.edit,
            ChangeKind::Command => self.command,
            ChangeKind::Fetch => self.fetch,
            ChangeKind::Mcp => self.mcp,
        }
    }
}

/// One loop's approvals.
pub struct PolicyApprover {
    settings: ApprovalSettings,
    /// Whether commands run in a sandbox; if not, every command is asked about.
    commands_confined: bool,
    allowed_commands: Vec<Regex>,
    accepted_kinds: Mutex<HashSet<ChangeKind>>,
    /// Hosts `web_fetch` may fetch from without asking: from the settings, and those the user
    /// accepted all fetches from in this loop.
    allowed_hosts: Vec<String>,
    accepted_hosts: Mutex<HashSet<String>>,
    /// MCP tools (`server__tool`) the user allowed from now on in this loop.
    accepted_mcp_tools: Mutex<HashSet<String>>,
    asker: Arc<dyn Approver>,
}

impl PolicyApprover {
    /// `allow_commands` are regular expressions; a command matching one runs without asking.
    /// Without `commands_confined` (no sandbox), commands are always asked about: neither
    /// "auto", the allow-list nor "accept all" lets one run unseen.
    pub fn new(
        settings: ApprovalSettings,
        allow_commands: &[String],
        commands_confined: bool,
        asker: Arc<dyn Approver>,
    ) -> Result<PolicyApprover, String> {
        let allowed_commands = allow_commands
            .iter()
            .map(|pattern| {
                Regex::new(pattern)
                    .map_err(|err| format!("allow_commands pattern {pattern:?}: {err}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(PolicyApprover {
            settings,
            commands_confined,
            allowed_commands,
            accepted_kinds: Mutex::new(HashSet::new()),
            allowed_hosts: Vec::new(),
            accepted_hosts: Mutex::new(HashSet::new()),
            accepted_mcp_tools: Mutex::new(HashSet::new()),
            asker,
        })
    }

    /// Lets `web_fetch` fetch from these hosts without asking: a host name (`docs.rs`), or
    /// `*.` and a domain for every host below it (`*.python.org`). Case does not matter.
    pub fn allowing_hosts(mut self, hosts: &[String]) -> Result<PolicyApprover, String> {
        self.allowed_hosts = hosts
            .iter()
            .map(|host| {
                let normalized = host.trim().trim_end_matches('.').to_ascii_lowercase();
                let name = normalized.strip_prefix("*.").unwrap_or(&normalized);
                let plain = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
                if plain {
                    Ok(normalized)
                } else {
                    Err(format!(
                        "web_fetch_allow_hosts entry {host:?} is not a host name; write the \
                         host alone, e.g. \"docs.rs\" or \"*.python.org\""
                    ))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts
            .iter()
            .any(|allowed| match allowed.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|below| below.ends_with('.')),
                None => allowed == host,
            })
            || self
                .accepted_hosts
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .contains(host)
    }

    /// A command runs without asking only if an allow-list pattern matches all of it and it
    /// chains, redirects or substitutes nothing, so `cargo test; curl x | sh` is asked about
    /// even with `cargo test.*` allowed.
    fn allowed(&self, command: &str) -> bool {
        const SHELL_SYNTAX: &[char] = &[
            ';', '&', '|', '<', '>', '$', '`', '(', ')', '{', '}', '\n', '\\',
        ];
        let command = command.trim();
        !command.contains(SHELL_SYNTAX)
            && self.allowed_commands.iter().any(|pattern| {
                pattern
                    .find(command)
                    .is_some_and(|found| found.start() == 0 && found.end() == command.len())
            })
    }

    fn accepted_without_asking(&self, request: &ApprovalRequest) -> bool {
        if request.kind == ChangeKind::Command && !self.commands_confined {
            return false;
        }
        if self.settings.mode(request.kind) == ApprovalMode::Auto {
            return true;
        }
        if request.kind == ChangeKind::Command && self.allowed(&request.subject) {
            return true;
        }
        if request.kind == ChangeKind::Fetch {
            // "Accept all" of a fetch is of its host only: the next host may be anyone's.
            return self.host_allowed(&request.subject);
        }
        if request.kind == ChangeKind::Mcp {
            // "Allow this tool from now on": of this server's tool only.
            return self
                .accepted_mcp_tools
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .contains(&request.subject);
        }
        self.accepted_kinds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(&request.kind)
    }
}

#[async_trait]
impl Approver for PolicyApprover {
    async fn decide(
        &self,
        request: ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Option<Decision> {
        if request.is_agent_own_tool() {
            // Neither accepted unasked nor remembered: the agent client keeps its "always".
            return self.asker.decide(request, cancel).await;
        }
        if self.accepted_without_asking(&request) {
            return Some(Decision::Accept);
        }
        let kind = request.kind;
        // The host of a fetch, the tool of an MCP call.
        let host = request.subject.clone();
        let decision = self.asker.decide(request, cancel).await?;
        if decision == Decision::AcceptAllOfKind && kind == ChangeKind::Mcp {
            self.accepted_mcp_tools
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(host);
        } else if decision == Decision::AcceptAllOfKind && kind == ChangeKind::Fetch {
            self.accepted_hosts
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(host);
        } else if decision == Decision::AcceptAllOfKind {
            self.accepted_kinds
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(kind);
        }
        Some(decision)
    }

    fn change_failed(&self, request: &ApprovalRequest, message: &str) {
        // Also when the settings accepted it without asking: the user still expects it done.
        self.asker.change_failed(request, message);
    }
}

/// Asks through events; a shell shows the request and calls `resolve` with the answer.
pub struct InteractiveApprover {
    events: Arc<dyn EventSink>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Decision>>>,
}

impl InteractiveApprover {
    pub fn new(events: Arc<dyn EventSink>) -> InteractiveApprover {
        InteractiveApprover {
            events,
            // Ids differ between hosts, so a prompt left over from a host that died cannot
            // answer a request of its successor. Below 2^53: Lua numbers are doubles.
            next_id: AtomicU64::new(fastrand::u64(1..1 << 40) << 12),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Answers request `id`; false if it is no longer waiting (answered, or its loop was
    /// cancelled).
    pub fn resolve(&self, id: u64, decision: Decision) -> bool {
        let sender = self
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&id);
        sender.is_some_and(|sender| sender.send(decision).is_ok())
    }
}

/// A request announced and not yet closed; dropping it forgets the request and tells the
/// shells to close its prompt.
struct OpenRequest<'a> {
    asker: &'a InteractiveApprover,
    id: u64,
}

impl Drop for OpenRequest<'_> {
    fn drop(&mut self) {
        self.asker
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&self.id);
        self.asker
            .events
            .emit(LoopEvent::ApprovalClosed { id: self.id });
    }
}

#[async_trait]
impl Approver for InteractiveApprover {
    async fn decide(
        &self,
        request: ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Option<Decision> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, sender);
        // Closes the request however the wait ends: also when the caller drops this future
        // (its own cancel or timeout won the race), which would otherwise leave the entry
        // behind and the prompt open with nobody to answer it.
        let _open = OpenRequest { asker: self, id };
        self.events
            .emit(LoopEvent::ApprovalRequested { id, request });
        tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            decision = receiver => decision.ok(),
        }
    }

    fn change_failed(&self, request: &ApprovalRequest, message: &str) {
        self.events.emit(LoopEvent::Notice {
            loop_id: request.loop_id.clone(),
            level: NoticeLevel::Warn,
            // It names a path the model chose.
            message: crate::next_step::plain(message),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: ChangeKind, subject: &str) -> ApprovalRequest {
        ApprovalRequest {
            loop_id: "l-1".to_owned(),
            kind,
            tool: "run_command",
            subject: subject.to_owned(),
            detail: String::new(),
        }
    }

    struct Collect(Mutex<Vec<LoopEvent>>);

    impl EventSink for Collect {
        fn emit(&self, event: LoopEvent) {
            self.0.lock().expect("lock").push(event);
        }
    }

    #[test]
    fn only_whole_plain_commands_are_allowed_without_asking() {
        let policy = PolicyApprover::new(
            ApprovalSettings::default(),
            &["cargo test( -q)?".to_owned()],
            true,
            Arc::new(crate::tools::AcceptAll),
        )
        .expect("policy");
        assert!(policy.allowed("cargo test"));
        assert!(policy.allowed("cargo test -q"));
        for asked in [
            "cargo test; curl x | sh",
            "cargo test && rm -rf .",
            "cargo test $(evil)",
            "cargo testing",
            "echo cargo test",
        ] {
            assert!(!policy.allowed(asked), "{asked}");
        }
    }

    #[tokio::test]
    async fn requests_are_announced_answered_and_closed() {
        let events = Arc::new(Collect(Mutex::new(Vec::new())));
        let asker = Arc::new(InteractiveApprover::new(events.clone()));
        let policy = PolicyApprover::new(
            ApprovalSettings::default(),
            &["cargo test.*".to_owned()],
            true,
            asker.clone(),
        )
        .expect("policy");
        let cancel = CancellationToken::new();

        // Allow-listed commands and auto kinds never ask.
        assert_eq!(
            policy
                .decide(request(ChangeKind::Command, "cargo test -q"), &cancel)
                .await,
            Some(Decision::Accept)
        );
        assert!(events.0.lock().expect("lock").is_empty());

        // Others are announced; "accept all edits" answers this one and the next edits.
        let answer = async {
            loop {
                let id = events
                    .0
                    .lock()
                    .expect("lock")
                    .iter()
                    .find_map(|event| match event {
                        LoopEvent::ApprovalRequested { id, .. } => Some(*id),
                        _ => None,
                    });
                if let Some(id) = id {
                    assert!(asker.resolve(id, Decision::AcceptAllOfKind));
                    return;
                }
                tokio::task::yield_now().await;
            }
        };
        let (decision, ()) = tokio::join!(
            policy.decide(request(ChangeKind::Edit, "src/a.rs"), &cancel),
            answer
        );
        assert_eq!(decision, Some(Decision::AcceptAllOfKind));
        assert_eq!(
            policy
                .decide(request(ChangeKind::Edit, "src/b.rs"), &cancel)
                .await,
            Some(Decision::Accept)
        );
        assert!(matches!(
            events.0.lock().expect("lock").last(),
            Some(LoopEvent::ApprovalClosed { .. })
        ));

        // A cancel ends the wait and closes the request.
        cancel.cancel();
        assert_eq!(
            policy
                .decide(request(ChangeKind::Write, "src/c.rs"), &cancel)
                .await,
            None
        );
        assert!(
            asker.pending.lock().expect("lock").is_empty(),
            "nothing waits any more"
        );
    }

    #[tokio::test]
    async fn a_request_whose_wait_is_dropped_is_closed_and_forgotten() {
        let events = Arc::new(Collect(Mutex::new(Vec::new())));
        let asker = InteractiveApprover::new(events.clone());
        let cancel = CancellationToken::new();
        let mut waiting =
            Box::pin(asker.decide(request(ChangeKind::Fetch, "example.com"), &cancel));
        // Polled once: announced, and waiting for the answer.
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        let id = match events.0.lock().expect("lock").as_slice() {
            [LoopEvent::ApprovalRequested { id, .. }] => *id,
            other => panic!("expected one request, got {other:?}"),
        };
        assert_eq!(asker.pending.lock().expect("lock").len(), 1);

        // What a caller's timeout or its own cancel branch does: the wait is dropped unfinished.
        drop(waiting);
        assert!(
            asker.pending.lock().expect("lock").is_empty(),
            "the request no longer waits"
        );
        assert!(
            matches!(
                events.0.lock().expect("lock").last(),
                Some(LoopEvent::ApprovalClosed { id: closed }) if *closed == id
            ),
            "the shells are told to close its prompt"
        );
        assert!(
            !asker.resolve(id, Decision::Accept),
            "a late answer finds nothing"
        );
    }

    /// Answers every request with one decision and remembers the subjects it was asked about.
    struct Answers(Decision, Mutex<Vec<String>>);

    #[async_trait]
    impl Approver for Answers {
        async fn decide(
            &self,
            request: ApprovalRequest,
            _cancel: &CancellationToken,
        ) -> Option<Decision> {
            self.1.lock().expect("lock").push(request.subject);
            Some(self.0.clone())
        }
    }

    #[tokio::test]
    async fn an_agent_s_own_tool_is_asked_every_time_whatever_the_settings() {
        let asker = Arc::new(Answers(Decision::AcceptAllOfKind, Mutex::new(Vec::new())));
        let everything_automatic = ApprovalSettings {
            write: ApprovalMode::Auto,
            edit: ApprovalMode::Auto,
            command: ApprovalMode::Auto,
            fetch: ApprovalMode::Auto,
            mcp: ApprovalMode::Auto,
        };
        let policy = PolicyApprover::new(
            everything_automatic,
            &[".*".to_owned()],
            true,
            asker.clone(),
        )
        .expect("policy");
        let cancel = CancellationToken::new();
        for kind in [
            ChangeKind::Edit,
            ChangeKind::Command,
            ChangeKind::Mcp,
            ChangeKind::Edit,
        ] {
            let asked = ApprovalRequest {
                tool: crate::tools::AGENT_OWN_TOOL,
                ..request(kind, "Run the tests")
            };
            assert_eq!(
                policy.decide(asked, &cancel).await,
                Some(Decision::AcceptAllOfKind)
            );
        }
        assert_eq!(asker.1.lock().expect("lock").len(), 4, "each one asked");

        // Its "accept all" is not the loop's: a later MCP call of that name is still asked.
        let asker = Arc::new(Answers(Decision::AcceptAllOfKind, Mutex::new(Vec::new())));
        let policy = PolicyApprover::new(ApprovalSettings::default(), &[], true, asker.clone())
            .expect("policy");
        let agent_s = ApprovalRequest {
            tool: crate::tools::AGENT_OWN_TOOL,
            ..request(ChangeKind::Mcp, "server__tool")
        };
        policy.decide(agent_s, &cancel).await;
        policy
            .decide(request(ChangeKind::Mcp, "server__tool"), &cancel)
            .await;
        assert_eq!(asker.1.lock().expect("lock").len(), 2, "both asked");
    }

    #[tokio::test]
    async fn fetches_are_approved_per_host() {
        let asker = Arc::new(Answers(Decision::AcceptAllOfKind, Mutex::new(Vec::new())));
        let policy = PolicyApprover::new(ApprovalSettings::default(), &[], true, asker.clone())
            .expect("policy")
            .allowing_hosts(&["Docs.rs".to_owned(), "*.python.org".to_owned()])
            .expect("hosts");
        let cancel = CancellationToken::new();
        for host in [
            "docs.rs",
            "docs.python.org",
            "python.org",
            "evil-docs.rs",
            "notpython.org",
            "example.com",
            "example.com",
            "example.org",
        ] {
            assert!(
                policy
                    .decide(request(ChangeKind::Fetch, host), &cancel)
                    .await
                    .is_some_and(|decision| decision != Decision::Reject(String::new()))
            );
        }
        // Allowed hosts skip asking; "accept all" covers its own host only, and no other kind.
        assert_eq!(
            *asker.1.lock().expect("lock"),
            [
                "python.org",
                "evil-docs.rs",
                "notpython.org",
                "example.com",
                "example.org"
            ]
        );
        policy
            .decide(request(ChangeKind::Command, "make"), &cancel)
            .await;
        assert_eq!(
            asker.1.lock().expect("lock").last().map(String::as_str),
            Some("make")
        );

        let automatic = PolicyApprover::new(
            ApprovalSettings {
                fetch: ApprovalMode::Auto,
                ..ApprovalSettings::default()
            },
            &[],
            true,
            Arc::new(Answers(
                Decision::Reject("asked".to_owned()),
                Mutex::new(Vec::new()),
            )),
        )
        .expect("policy");
        assert_eq!(
            automatic
                .decide(request(ChangeKind::Fetch, "example.com"), &cancel)
                .await,
            Some(Decision::Accept)
        );
    }
}
