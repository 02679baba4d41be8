//! Artifacts: the structured answers of the artifact tools (`create_plan`, later
//! `create_spec` and `create_phase`), their validation and their markdown rendering. The JSON
//! is the source of truth; the markdown is rendered from it and never parsed back.

mod plan;
mod render;
mod validation;

pub use plan::{CREATE_PLAN, PlanArtifact, SpecReference, create_plan_spec, validate_plan};
pub use render::render_plan_markdown;
pub use validation::ValidationReport;

/// The kinds of artifact a loop can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactKind {
    Plan,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Plan => "plan",
        }
    }

    /// The artifact tool the model calls to produce this kind.
    pub fn tool_name(self) -> &'static str {
        match self {
            ArtifactKind::Plan => CREATE_PLAN,
        }
    }
}
