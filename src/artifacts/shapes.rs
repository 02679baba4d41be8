//! The shapes of the three artifacts as the model writes them (plan, spec, phase) and as they
//! are stored; their JSON schemas are what the artifact tools offer. Checking them is each
//! artifact's own module's, writing them as Markdown `render`'s.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A plan: what will be built, and the specs that will build it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanArtifact {
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// What will be built, why, and the approach.
    #[schemars(length(min = 1))]
    pub overview: String,
    /// The specs, each a coherent piece of work.
    #[schemars(length(min = 1, max = 10))]
    pub specs: Vec<SpecReference>,
    /// What is out of scope.
    #[serde(default)]
    pub non_goals: Vec<String>,
    /// Risks and their mitigations.
    #[serde(default)]
    pub risks: Vec<String>,
}

/// One spec of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecReference {
    /// Unique kebab-case name.
    #[schemars(regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"), length(max = 64))]
    pub name: String,
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// What this spec accomplishes.
    #[schemars(length(min = 1))]
    pub description: String,
    /// Names of the specs that must be complete before this one starts.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// What it builds on: "#slug" of a heading of plan.md ("### Spec 2: JWT auth & keys" is
    /// "#spec-2-jwt-auth--keys"), "output:" and another spec's name, a URL, or an absolute
    /// path. Rendered as links in plan.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
}

/// A spec: one part of a plan, detailed enough to split into 3 to 7 phases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = requirements_required)]
pub struct SpecArtifact {
    /// Exactly the name the plan gave the spec.
    #[schemars(regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"), length(max = 64))]
    pub name: String,
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// What the spec accomplishes and how: design, constraints.
    #[schemars(length(min = 1))]
    pub overview: String,
    /// What it requires; each covered by a phase.
    // Required of the model (`requirements_required`), not of what is stored: a spec stored
    // before requirements existed has none, and reads its acceptance criteria as requirements
    // (`SpecArtifact::requirements_or_criteria`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub requirements: Vec<Requirement>,
    /// The phases that implement it, in order.
    #[schemars(length(min = 3, max = 7))]
    pub phases: Vec<PhaseReference>,
    /// Verifiable conditions that hold when it is complete.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    /// How it will be tested.
    #[serde(default)]
    pub test_strategy: Option<String>,
}

/// One requirement of a spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// Unique: R1, R2, ...
    #[schemars(regex(pattern = r"^R[1-9][0-9]*$"))]
    pub id: String,
    /// EARS form: "WHEN <trigger> THE SYSTEM SHALL <response>".
    #[schemars(length(min = 1))]
    pub text: String,
    /// How to verify it.
    #[schemars(length(min = 1))]
    pub check: String,
}

/// Makes `requirements` required in the schema the model is offered, which the field's serde
/// default (for specs stored before it) would leave optional.
fn requirements_required(schema: &mut schemars::Schema) {
    let required = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let serde_json::Value::Array(names) = required {
        names.push("requirements".into());
    }
}

impl SpecArtifact {
    /// The spec's requirements; for a spec stored before requirements existed, its acceptance
    /// criteria as R1...Rn (the one place old specs are read as new ones).
    pub fn requirements_or_criteria(&self) -> Vec<Requirement> {
        if !self.requirements.is_empty() {
            return self.requirements.clone();
        }
        self.acceptance_criteria
            .iter()
            .enumerate()
            .map(|(index, criterion)| Requirement {
                id: format!("R{}", index + 1),
                text: criterion.clone(),
                check: criterion.clone(),
            })
            .collect()
    }
}

/// One phase of a spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseReference {
    /// Unique kebab-case name.
    #[schemars(regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"), length(max = 64))]
    pub name: String,
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// What this phase accomplishes.
    #[schemars(length(min = 1))]
    pub description: String,
    /// Files it creates or modifies, relative to the project root.
    #[serde(default)]
    pub files: Vec<String>,
    /// How to verify it is complete, e.g. a test command.
    #[serde(default)]
    pub validation: Option<String>,
    /// What it builds on: "#slug" of a heading of spec.md or plan.md ("## Test Strategy" is
    /// "#test-strategy"), "output:" and the name of a phase or of a spec of the plan, a URL,
    /// or an absolute path. Rendered as links in spec.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// Ids of the requirements it covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
}

/// A phase: concrete tasks for the code loop, and the command that proves them done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseArtifact {
    /// Exactly the name the spec gave the phase.
    #[schemars(regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"), length(max = 64))]
    pub name: String,
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// What the phase accomplishes, in a sentence or two.
    #[schemars(length(min = 1))]
    pub objective: String,
    /// Specific tasks for the code loop, in order.
    #[schemars(length(min = 1))]
    pub tasks: Vec<TaskItem>,
    /// Shell command, run in the project root, that passes once the phase is done.
    #[schemars(length(min = 1))]
    pub validation_command: String,
    /// How to know the phase is complete.
    #[serde(default)]
    pub success_criteria: Vec<String>,
}

/// One task of a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskItem {
    /// What needs to be done.
    #[schemars(length(min = 1))]
    pub description: String,
    /// The file it creates, modifies or deletes, relative to the project root.
    #[serde(default)]
    pub file: Option<String>,
    /// What happens to `file`.
    #[serde(default)]
    pub action: Option<TaskAction>,
    /// What it builds on: "#slug" of a heading of phase.md or spec.md ("### Phase 2: Print
    /// it" is "#phase-2-print-it"), "output:" and a phase's name, a URL, or an absolute path.
    /// Rendered as links in phase.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// Ids of the spec's requirements it satisfies; each one the spec gave this phase is
    /// cited by a task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    Create,
    Modify,
    Delete,
}

impl TaskAction {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskAction::Create => "create",
            TaskAction::Modify => "modify",
            TaskAction::Delete => "delete",
        }
    }
}
