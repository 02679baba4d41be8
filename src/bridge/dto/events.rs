//! The loop events as `require('loopr.events').dispatch` receives them.

use schemars::JsonSchema;
use serde::Serialize;

use crate::agent::{FailureLocation, LoopEvent};
use crate::store::Standing;

/// Events as `require('loopr.events').dispatch` receives them.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.Event")]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventMessage {
    LoopUpdated {
        id: String,
        /// The root of the loop's project: where Lua asks about the loop.
        #[serde(skip_serializing_if = "Option::is_none")]
        root: Option<String>,
        #[serde(rename = "type")]
        loop_type: &'static str,
        status: &'static str,
        /// Why it failed (or its note), without the way on: the loop's status row words that
        /// (`way_on`).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// What the host's loop rules answer for the loop: the plugin keeps no copy of a rule.
        #[serde(flatten)]
        standing: Standing,
    },
    Progress {
        loop_id: String,
        message: String,
        /// The tokens of the answer under way so far (estimated), while the model answers.
        #[serde(skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
    },
    ArtifactCreated {
        loop_id: String,
        kind: &'static str,
        path: String,
        json_path: String,
        iteration: u32,
        /// The loop's stored settings make it wait for review of this artifact.
        gated: bool,
    },
    ApprovalRequested {
        id: u64,
        loop_id: String,
        kind: &'static str,
        tool: &'static str,
        subject: String,
        detail: String,
    },
    ApprovalClosed {
        id: u64,
    },
    Validation {
        loop_id: String,
        phase: String,
        iteration: u32,
        passed: bool,
        command: String,
        output: String,
        /// Places in the project's files the output names, as the common test runners and
        /// compilers write them: the quickfix entries when 'errorformat' finds none.
        locations: Vec<ValidationLocation>,
    },
    /// A verification's findings, for the quickfix list `Loopr: <label> verification`.
    Verification {
        loop_id: String,
        /// The phase's or spec's name.
        label: String,
        /// The code loop's round (1, 2, ...); 0 for one asked on demand.
        round: u32,
        /// Its findings stop the phase (`verify.block_on`).
        blocking: bool,
        /// What to tell the user: the verdict, the findings counted, where to see them.
        message: String,
        /// One quickfix entry per finding.
        items: Vec<VerificationItem>,
    },
    Notice {
        loop_id: String,
        level: &'static str,
        message: String,
    },
    /// The done tasks of a phase changed: its phase.md at `path` was ticked in place.
    TasksUpdated {
        /// The phase loop.
        loop_id: String,
        path: String,
        /// The numbers of the done tasks, from 1.
        done: Vec<usize>,
    },
    /// The coding agent running a phase's code loop reported its plan, for the quickfix
    /// list `Loopr: <phase> agent todo` (replaced whole each time).
    AgentPlan {
        loop_id: String,
        phase: String,
        items: Vec<AgentPlanItem>,
    },
    /// No loop of the plan tree of `root` runs or is about to: `message` says what it has
    /// ready and the commands to go on with, and replaces what its loops said they were doing.
    Ready {
        root: String,
        message: String,
    },
}

impl From<LoopEvent> for EventMessage {
    fn from(event: LoopEvent) -> EventMessage {
        match event {
            LoopEvent::LoopUpdated {
                id,
                root,
                loop_type,
                status,
                error,
            } => EventMessage::LoopUpdated {
                id: id.to_string(),
                root: root.map(|root| root.to_string_lossy().into_owned()),
                loop_type: loop_type.as_str(),
                status: status.as_str(),
                standing: Standing::of(status, error.as_deref()),
                error: error
                    .as_deref()
                    .map(|error| crate::next_step::split(error).0.to_owned()),
            },
            LoopEvent::Progress {
                loop_id,
                message,
                tokens,
                ..
            } => EventMessage::Progress {
                loop_id: loop_id.to_string(),
                message,
                tokens,
            },
            LoopEvent::ArtifactCreated {
                loop_id,
                kind,
                markdown_path,
                json_path,
                iteration,
                gated,
            } => EventMessage::ArtifactCreated {
                loop_id: loop_id.to_string(),
                kind: kind.as_str(),
                path: markdown_path.to_string_lossy().into_owned(),
                json_path: json_path.to_string_lossy().into_owned(),
                iteration,
                gated,
            },
            LoopEvent::ApprovalRequested { id, request } => EventMessage::ApprovalRequested {
                id,
                loop_id: request.loop_id,
                kind: request.kind.as_str(),
                tool: request.tool,
                subject: request.subject,
                detail: request.detail,
            },
            LoopEvent::ApprovalClosed { id } => EventMessage::ApprovalClosed { id },
            LoopEvent::ValidationFinished {
                loop_id,
                phase,
                iteration,
                passed,
                command,
                output,
                locations,
                root,
            } => EventMessage::Validation {
                loop_id: loop_id.to_string(),
                phase,
                iteration,
                passed,
                command,
                output,
                locations: locations
                    .into_iter()
                    .map(|location| ValidationLocation::in_root(&root, location))
                    .collect(),
            },
            LoopEvent::VerificationFinished {
                loop_id,
                root,
                label,
                verification,
            } => EventMessage::Verification {
                loop_id: loop_id.to_string(),
                message: crate::bridge::words::verification(&label, &verification),
                label,
                round: verification.round,
                blocking: verification.blocking,
                items: verification
                    .report
                    .findings
                    .into_iter()
                    .map(|finding| VerificationItem::in_root(&root, finding))
                    .collect(),
            },
            LoopEvent::Notice {
                loop_id,
                level,
                message,
            } => EventMessage::Notice {
                loop_id,
                level: level.as_str(),
                message: crate::bridge::words::hinted(&message),
            },
            LoopEvent::TasksUpdated {
                loop_id,
                markdown_path,
                done,
            } => EventMessage::TasksUpdated {
                loop_id: loop_id.to_string(),
                path: markdown_path.to_string_lossy().into_owned(),
                done,
            },
            LoopEvent::AgentPlan {
                loop_id,
                phase,
                entries,
            } => EventMessage::AgentPlan {
                loop_id: loop_id.to_string(),
                phase,
                items: entries
                    .into_iter()
                    .map(|entry| AgentPlanItem {
                        text: entry.content,
                        status: entry.status,
                    })
                    .collect(),
            },
            LoopEvent::TreeReady { root, label, ready } => EventMessage::Ready {
                root: root.to_string(),
                message: crate::bridge::words::tree_ready(&label, &ready),
            },
        }
    }
}

/// One entry of a coding agent's plan.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.AgentPlanItem")]
pub struct AgentPlanItem {
    pub text: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: &'static str,
}

/// A place a validation's output names, as a quickfix entry takes it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.ValidationLocation")]
pub struct ValidationLocation {
    /// The file's absolute path; it exists, inside the project.
    pub filename: String,
    pub lnum: u32,
    /// 1-based; 0 when only the line is known.
    pub col: u32,
    pub text: String,
}

impl ValidationLocation {
    fn in_root(root: &std::path::Path, location: FailureLocation) -> ValidationLocation {
        ValidationLocation {
            filename: root.join(&location.path).display().to_string(),
            lnum: location.line,
            col: location.column,
            text: location.text,
        }
    }
}

/// A verification's finding as a quickfix entry takes it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.VerificationItem")]
pub struct VerificationItem {
    /// The file's absolute path, inside the project.
    pub filename: String,
    pub lnum: u32,
    /// The last line concerned; 0 when only one.
    pub end_lnum: u32,
    /// `E` (critical), `W` (major) or `I` (minor).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The message, the requirement it concerns and the fix.
    pub text: String,
}

impl VerificationItem {
    fn in_root(root: &std::path::Path, finding: crate::artifacts::Finding) -> VerificationItem {
        VerificationItem {
            filename: root.join(&finding.file).display().to_string(),
            lnum: finding.line,
            end_lnum: finding.end_line.unwrap_or(0),
            kind: match finding.severity {
                crate::artifacts::Severity::Critical => "E",
                crate::artifacts::Severity::Major => "W",
                crate::artifacts::Severity::Minor => "I",
            },
            text: crate::agent::finding_text(&finding),
        }
    }
}
