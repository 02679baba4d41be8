//! Artifacts: the structured answers of the artifact tools (`create_plan`, `create_spec`,
//! `create_phase`), their validation and their markdown rendering. The JSON is the source of
//! truth; the markdown is rendered from it and never parsed back. Pure: no I/O (file checks go
//! through a probe the caller supplies).

mod coverage;
mod export_links;
mod phase;
mod plan;
mod references;
mod render;
mod requirements;
mod review;
mod shapes;
mod spec;
mod validation;
mod verification;

pub use coverage::{
    FindingCounts, PhaseVerification, RequirementCoverage, SpecCoverage, Unverified, spec_coverage,
};
pub use export_links::{
    ExportPhase, ExportSpec, ExportTree, ExportedFile, export_files, path_slug, unique_slug,
};
pub use phase::{CREATE_PHASE, FileState, create_phase_spec, validate_phase};
pub use plan::{CREATE_PLAN, create_plan_spec, linked_plan_document, validate_plan};
pub use references::{
    ACCEPTED_FORMS, LinkedDocument, ReferenceLinks, ReferenceScope, github_slug, heading_slugs,
};
pub use render::{
    RenderedPhase, RenderedSections, render_phase, render_phase_markdown, render_phase_with,
    render_plan, render_plan_markdown, render_spec, render_spec_markdown, set_task_boxes,
};
pub use requirements::PhaseRequirements;
pub use review::{
    REVIEW_FOCI, ReviewInput, SPEC_JUDGEMENT, Verdict, review_tool_name, review_tool_spec,
    validate_review,
};
pub use shapes::{
    PhaseArtifact, PhaseReference, PlanArtifact, Requirement, SpecArtifact, SpecReference,
    TaskAction, TaskItem,
};
pub use spec::{CREATE_SPEC, create_spec_spec, linked_spec_document, validate_spec};
pub use validation::{Checked, ValidationReport};
pub use verification::{
    Finding, MAX_FINDING_TEXT_CHARS, MAX_FINDINGS, MAX_SUMMARY_CHARS, Severity, StoredVerification,
    VerificationReport, VerificationScope, VerificationVerdict,
};

/// The kinds of artifact a loop can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactKind {
    Plan,
    Spec,
    Phase,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Plan => "plan",
            ArtifactKind::Spec => "spec",
            ArtifactKind::Phase => "phase",
        }
    }

    /// The artifact tool the model calls to produce this kind.
    pub fn tool_name(self) -> &'static str {
        match self {
            ArtifactKind::Plan => CREATE_PLAN,
            ArtifactKind::Spec => CREATE_SPEC,
            ArtifactKind::Phase => CREATE_PHASE,
        }
    }

    /// The progress line while the host checks a call of this kind's artifact tool.
    pub fn describe_call(self) -> String {
        match self {
            ArtifactKind::Plan => "checking the plan".to_owned(),
            ArtifactKind::Spec | ArtifactKind::Phase => crate::tools::calling(self.tool_name()),
        }
    }
}
