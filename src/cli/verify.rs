//! `loopr verify NAME`: verifies the working tree against a phase or spec without Neovim and
//! without changing anything. Progress goes to stderr, each finding to stdout as
//! `file:line: severity: message`; the run says whether the verification passed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::{
    HeadlessRefusal, StopSignals, headless_manager, hinted, only_loop, settle, with_next_step,
};
use crate::agent::{LoopSettings, ProviderFactory, finding_text};
use crate::artifacts::StoredVerification;
use crate::store::LoopStatus;

/// Verifies the working tree against phase or spec `name`; returns what it found (it passed
/// unless `blocking`: a finding at or above `verify.block_on`, or a failing verdict). A
/// verification that could not finish is an error.
pub async fn run_verify(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    name: &str,
    settings: LoopSettings,
) -> anyhow::Result<StoredVerification> {
    let mut signals = StopSignals::catch()?;
    // The verifier only reads: nothing is approved.
    let (manager, mut events) =
        headless_manager(loopr_home, provider_factory, Arc::new(HeadlessRefusal));
    let verify_id = manager
        .start_verification(&root, name, settings)
        .map_err(with_next_step)
        .context("starting the verification")?;
    say!("loopr: verification {verify_id} started for {name}");
    let select = only_loop(&root, &verify_id);
    settle(&manager, &root, false, &mut events, &select, &mut signals).await?;
    let record = select(&manager)?
        .into_iter()
        .next()
        .context("the verification's record is gone")?;
    let verification = match (record.status, manager.verification_of(&root, &verify_id)?) {
        (LoopStatus::Complete, Some(verification)) => verification,
        (status, _) => anyhow::bail!(
            "the verification did not finish: it is {}{}",
            status.as_str(),
            record
                .error
                .as_deref()
                .map(|error| format!(": {}", hinted(error)))
                .unwrap_or_default()
        ),
    };
    Ok(verification)
}

/// Each finding as `file:line: severity: message`, what compilers print and editors jump to.
pub fn print_findings(
    out: &mut impl Write,
    verification: &StoredVerification,
) -> anyhow::Result<()> {
    for finding in &verification.report.findings {
        let line = format!(
            "{}:{}: {}: {}",
            finding.file,
            finding.line,
            finding.severity.as_str(),
            finding_text(finding)
        );
        // One line each: the model wrote the text, and a line break must not start another.
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        writeln!(out, "{}", crate::terminal_text::for_terminal(&line))?;
    }
    Ok(())
}
