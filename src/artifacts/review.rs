//! The review tool an artifact loop answers after each artifact: its input, the verdict that
//! decides whether the loop moves on, and the focus of each pass.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ArtifactKind;
use super::validation::{ValidationReport, parse_against_schema};
use crate::llm::ToolSpec;

/// A structured review of the artifact just created: the verdict decides whether the loop
/// moves on or the model revises the artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewInput {
    /// "approve" if it is right for this pass's focus, "revise" if it must change.
    pub verdict: Verdict,
    /// The problems found, each specific and actionable; none when approving.
    #[serde(default)]
    pub issues: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    Revise,
}

/// The five passes of the Rule of Five, in order: what each looks at.
pub const REVIEW_FOCI: [(&str, &str); 5] = [
    (
        "completeness",
        "Does it cover everything the request needs, with nothing missing?",
    ),
    (
        "correctness",
        "Is every statement true of this project, and is the approach sound?",
    ),
    (
        "edge cases",
        "Are failure modes, unusual inputs and risks handled?",
    ),
    (
        "architecture",
        "Does it fit the project's existing structure and conventions?",
    ),
    (
        "clarity",
        "Is it unambiguous and concrete enough to implement without guessing?",
    ),
];

/// The single judged review a spec gets.
pub const SPEC_JUDGEMENT: (&str, &str) = (
    "judgement",
    "Is this spec implementable as written, and is every acceptance criterion testable?",
);

pub fn review_tool_name(kind: ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::Plan => "review_plan",
        ArtifactKind::Spec => "review_spec",
        ArtifactKind::Phase => "review_phase",
    }
}

pub fn review_tool_spec(kind: ArtifactKind) -> ToolSpec {
    ToolSpec::offered(
        review_tool_name(kind),
        format!(
            "Your verdict on the {kind} you created, for the review pass asked for. After \
             \"revise\", call {} with the complete revised {kind}.",
            kind.tool_name(),
            kind = kind.as_str()
        ),
        &crate::schema::input_schema_for::<ReviewInput>(),
        Some(json!({
            "verdict": "revise",
            "issues": ["Nothing says how the new flag is tested."]
        })),
    )
}

pub fn validate_review(kind: ArtifactKind, input: &Value) -> Result<ReviewInput, ValidationReport> {
    parse_against_schema(review_tool_name(kind), input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reviews_need_a_known_verdict() {
        let review = validate_review(
            ArtifactKind::Plan,
            &json!({"verdict": "revise", "issues": ["x"]}),
        )
        .expect("valid");
        assert_eq!(review.verdict, Verdict::Revise);
        let report =
            validate_review(ArtifactKind::Plan, &json!({"verdict": "maybe"})).expect_err("invalid");
        assert_eq!(report.tool, "review_plan");
        assert_eq!(report.issues[0].location, "verdict");
    }
}
