//! `loopr rewind [--force] ID`: the working tree back as it was before a phase, as
//! `:LooprRewind` does, without Neovim. What was restored and what was left goes to `out`
//! (stdout, from `main.rs`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::{HeadlessRefusal, headless_manager, with_next_step};
use crate::agent::ProviderFactory;

/// Rewinds the working tree to before phase `phase` (a name, `spec/phase`, or a loop id) and
/// says what changed.
pub async fn rewind(
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    phase: &str,
    force: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let (manager, _events) =
        headless_manager(loopr_home, provider_factory, Arc::new(HeadlessRefusal));
    let (code_id, report) = manager
        .rewind(&root, phase, force)
        .await
        .map_err(with_next_step)
        .with_context(|| format!("rewinding to before {phase}"))?;
    let base = root.canonicalize().unwrap_or_else(|_| root.clone());
    let shown = |path: &std::path::Path| {
        let path = path
            .strip_prefix(&base)
            .unwrap_or(path)
            .display()
            .to_string();
        crate::terminal_text::for_terminal(&path).into_owned()
    };
    writeln!(
        out,
        "rewound to before {phase}: restored {} file(s), {} code loop(s) rewound",
        report.files.restored.len(),
        report.rewound.len()
    )?;
    for path in &report.files.restored {
        writeln!(out, "  restored {}", shown(path))?;
    }
    for (path, reason) in &report.files.skipped {
        writeln!(out, "  left {}: {}", shown(path), reason.describe())?;
    }
    if report
        .files
        .skipped
        .iter()
        .any(|(_, reason)| reason.forcible())
    {
        writeln!(
            out,
            "review them; `loopr rewind --force {phase}` overwrites the files changed since"
        )?;
    }
    if report.undoable {
        writeln!(
            out,
            "the tree as it was before the rewind is kept as git ref \
             refs/loopr/{code_id}/rewound; `loopr` cannot undo it: in Neovim, \
             :LooprUndo {phase} does"
        )?;
    } else {
        writeln!(
            out,
            "made from the baselines (no git checkpoint): it cannot be undone"
        )?;
    }
    // Opening the project started a sweep of what killed hosts left; it ends with this run.
    let _ = manager.watch_busy().wait_for(|busy| *busy == 0).await;
    Ok(())
}
