//! A verification in words: its findings counted, a finding in a line, and what the code
//! loop's model is told of a round (what blocks the phase, or that it passed). Pure.

use crate::artifacts::{Finding, Severity, StoredVerification, VerificationReport};

/// "1 critical, 2 minor findings" (or "no findings"): a report's findings counted by
/// severity, the worst first.
pub fn findings_counted(report: &VerificationReport) -> String {
    let counts: Vec<String> = [Severity::Critical, Severity::Major, Severity::Minor]
        .into_iter()
        .filter_map(|severity| {
            let count = report
                .findings
                .iter()
                .filter(|finding| finding.severity == severity)
                .count();
            (count > 0).then(|| format!("{count} {}", severity.as_str()))
        })
        .collect();
    match report.findings.len() {
        0 => "no findings".to_owned(),
        1 => format!("{} finding", counts.join(", ")),
        _ => format!("{} findings", counts.join(", ")),
    }
}

/// A finding in a line (a quickfix entry's text): the message, the requirement it concerns,
/// the fix.
pub fn finding_text(finding: &Finding) -> String {
    let mut text = finding.message.trim().to_owned();
    if let Some(requirement) = &finding.requirement {
        text.push_str(&format!(" [{requirement}]"));
    }
    if let Some(fix) = finding
        .fix
        .as_deref()
        .map(str::trim)
        .filter(|fix| !fix.is_empty())
    {
        text.push_str(&format!(" Fix: {fix}"));
    }
    text
}

/// A verification round's findings that block the phase, for the code loop's model: what was
/// found, where, and what to do (`again`: what has its work checked again, such as "call
/// complete_phase again").
pub fn verification_findings(
    verification: &StoredVerification,
    max_rounds: u32,
    again: &str,
) -> String {
    let mut text = format!(
        "Verification round {}/{max_rounds} checked the changes against the phase's \
         requirements and found problems that block the phase: {}\n",
        verification.round,
        verification.report.summary.trim()
    );
    text.push_str(&finding_lines(&verification.report.findings));
    text.push_str(&format!(
        "Fix them, then {again}: the validation, then the verification, run again."
    ));
    text
}

/// The most bytes of findings a round sends the code loop's model: they stay in its
/// conversation, which the context budget never shortens.
const MAX_FINDINGS_TEXT_BYTES: usize = 12 * 1024;

/// `findings` a line each, the worst first, while they fit in `MAX_FINDINGS_TEXT_BYTES`;
/// the rest counted.
fn finding_lines(findings: &[Finding]) -> String {
    let mut worst_first: Vec<&Finding> = findings.iter().collect();
    worst_first.sort_by_key(|finding| std::cmp::Reverse(finding.severity));
    let mut text = String::new();
    for (shown, finding) in worst_first.iter().enumerate() {
        let lines = match finding.end_line {
            Some(end) if end > finding.line => format!("{}-{end}", finding.line),
            _ => finding.line.to_string(),
        };
        let line = format!(
            "- {} {}:{lines}: {}\n",
            finding.severity.as_str(),
            finding.file,
            finding_text(finding)
        );
        if text.len() + line.len() > MAX_FINDINGS_TEXT_BYTES {
            let left = findings.len() - shown;
            text.push_str(&format!(
                "- and {left} more finding{} not shown here; fix these first\n",
                if left == 1 { "" } else { "s" }
            ));
            break;
        }
        text.push_str(&line);
    }
    text
}

/// The note a passing verification leaves in the code loop's conversation (and transcript).
pub fn verification_passed(verification: &StoredVerification) -> String {
    format!(
        "Verification round {} passed ({}): {}",
        verification.round,
        findings_counted(&verification.report),
        verification.report.summary.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{VerificationScope, VerificationVerdict};

    #[test]
    fn the_findings_sent_back_read_as_sentences_one_finding_a_line() {
        let verification = StoredVerification {
            scope: VerificationScope::Phase("print-version".to_owned()),
            at: "2026-11-26T10:00:00Z".to_owned(),
            requirements: vec!["R1".to_owned()],
            artifact_iteration: Some(1),
            round: 1,
            block_on: Severity::Critical,
            blocking: true,
            report: VerificationReport {
                verdict: VerificationVerdict::Fail,
                summary: "R1 is not met.".to_owned(),
                findings: vec![Finding {
                    severity: Severity::Critical,
                    requirement: Some("R1".to_owned()),
                    file: "src/main.rs".to_owned(),
                    line: 2,
                    end_line: Some(4),
                    message: "--version is never matched".to_owned(),
                    fix: Some("Match it first".to_owned()),
                }],
            },
        };
        assert_eq!(
            verification_findings(&verification, 2, "call complete_phase again"),
            "Verification round 1/2 checked the changes against the phase's requirements and \
             found problems that block the phase: R1 is not met.\n\
             - critical src/main.rs:2-4: --version is never matched [R1] Fix: Match it first\n\
             Fix them, then call complete_phase again: the validation, then the verification, \
             run again."
        );
    }

    #[test]
    fn the_findings_sent_back_are_bounded_the_worst_first() {
        let finding = |severity, line| Finding {
            severity,
            requirement: None,
            file: "src/lib.rs".to_owned(),
            line,
            end_line: None,
            message: "m".repeat(1000),
            fix: Some("f".repeat(1000)),
        };
        let mut findings: Vec<Finding> = (1..=49)
            .map(|line| finding(Severity::Minor, line))
            .collect();
        findings.push(finding(Severity::Critical, 50));
        let lines = finding_lines(&findings);
        assert!(
            lines.len() <= MAX_FINDINGS_TEXT_BYTES + 200,
            "{} bytes go to the model",
            lines.len()
        );
        assert!(
            lines.starts_with("- critical src/lib.rs:50: "),
            "{}",
            &lines[..60]
        );
        let last = lines.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("- and ") && last.contains(" more finding"),
            "it ends: {last}"
        );
    }
}
