//! `loopr rewind [--force] ID`: the working tree back as it was before a phase; `loopr undo
//! [--force] ID`: a phase's changes, or its rewind, undone. What was restored and what was
//! left goes to `out` (stdout, from `main.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use super::{HeadlessRefusal, headless_manager, with_next_step};
use crate::agent::{ProviderFactory, RewindReport, SkipReason, UndoReport};

/// Which of the two a run of `restore` does.
#[derive(Clone, Copy, Debug)]
pub enum Restoring {
    /// `loopr rewind`: the tree back as it was before the phase.
    Rewind,
    /// `loopr undo`: the phase's changes, or its rewind, undone.
    Undo,
}

/// Rewinds the working tree to before phase `phase` (a name, `spec/phase`, or a loop id), or
/// undoes what its newest code loop changed (or its rewind), as `what` says; says what
/// changed.
pub async fn restore(
    what: Restoring,
    loopr_home: PathBuf,
    provider_factory: ProviderFactory,
    root: PathBuf,
    phase: &str,
    force: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let (manager, _events) =
        headless_manager(loopr_home, provider_factory, Arc::new(HeadlessRefusal));
    match what {
        Restoring::Rewind => {
            let (code_id, report) = manager
                .rewind(&root, phase, force)
                .await
                .map_err(with_next_step)
                .with_context(|| format!("rewinding to before {phase}"))?;
            tell_rewound(out, &root, phase, &code_id, &report)?;
        }
        Restoring::Undo => {
            let (_, report) = manager
                .undo(&root, phase, force)
                .await
                .map_err(with_next_step)
                .with_context(|| format!("undoing {phase}"))?;
            tell_undone(out, &root, phase, &report)?;
        }
    }
    // Opening the project started a sweep of what killed hosts left; it ends with this run.
    let _ = manager.watch_busy().wait_for(|busy| *busy == 0).await;
    Ok(())
}

/// What a rewind to before `phase` (of code loop `code_id`) did, and whether it is undone.
fn tell_rewound(
    out: &mut dyn Write,
    root: &Path,
    phase: &str,
    code_id: &impl std::fmt::Display,
    report: &RewindReport,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "rewound to before {phase}: restored {} file(s), {} code loop(s) rewound",
        report.files.restored.len(),
        report.rewound.len()
    )?;
    list_files(
        out,
        root,
        &report.files,
        &format!("loopr rewind --force {phase}"),
    )?;
    if report.undoable {
        writeln!(
            out,
            "the tree as it was before the rewind is kept as git ref \
             refs/loopr/{code_id}/rewound; `loopr undo {phase}` undoes the rewind"
        )?;
    } else {
        writeln!(
            out,
            "made from the baselines (no git checkpoint): it cannot be undone"
        )?;
    }
    Ok(())
}

/// What an undo of `phase`'s changes, or of its rewind, did.
fn tell_undone(
    out: &mut dyn Write,
    root: &Path,
    phase: &str,
    report: &UndoReport,
) -> anyhow::Result<()> {
    let what = if report.rewind_undone {
        format!("the rewind to before {phase}")
    } else {
        format!("{phase}'s changes")
    };
    writeln!(
        out,
        "undid {what}: restored {} file(s)",
        report.restored.len()
    )?;
    list_files(out, root, report, &format!("loopr undo --force {phase}"))
}

/// The files `report` restored and left, relative to `root`, and the command that overwrites
/// the ones a forced undo restores (`forced`), when there are any.
fn list_files(
    out: &mut dyn Write,
    root: &std::path::Path,
    report: &UndoReport,
    forced: &str,
) -> anyhow::Result<()> {
    let base = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let shown = |path: &std::path::Path| {
        let path = path
            .strip_prefix(&base)
            .unwrap_or(path)
            .display()
            .to_string();
        crate::terminal_text::for_terminal(&path).into_owned()
    };
    for path in &report.restored {
        writeln!(out, "  restored {}", shown(path))?;
    }
    for (path, reason) in &report.skipped {
        writeln!(out, "  left {}: {}", shown(path), reason.describe())?;
    }
    let mut forcible: Vec<&str> = Vec::new();
    for (_, reason) in &report.skipped {
        let words = match reason {
            SkipReason::ChangedSince => "changed since",
            SkipReason::ChangedDuringCommand => "changed during a command",
            SkipReason::WrittenByAgent(_) => "written by the coding agent",
            SkipReason::UnsavedBuffer | SkipReason::Unrestorable(_) => continue,
        };
        if !forcible.contains(&words) {
            forcible.push(words);
        }
    }
    if !forcible.is_empty() {
        writeln!(
            out,
            "review them; `{forced}` overwrites the files {}",
            forcible.join(" or ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_left_are_named_with_why_and_the_command_that_overwrites_them() {
        let root = Path::new("/no/such/project");
        let report = UndoReport {
            restored: vec![root.join("notes.txt")],
            skipped: vec![
                (
                    root.join("README.md"),
                    SkipReason::WrittenByAgent("claude".to_owned()),
                ),
                (root.join("main.rs"), SkipReason::ChangedSince),
                (root.join("open.rs"), SkipReason::UnsavedBuffer),
            ],
            rewind_undone: false,
        };
        let mut out = Vec::new();
        list_files(&mut out, root, &report, "loopr undo --force a-1").expect("listed");
        assert_eq!(
            String::from_utf8(out).expect("text"),
            "  restored notes.txt\n  \
             left README.md: written by the coding agent claude's own tools during its turn; it \
             may hold your edits saved meanwhile\n  \
             left main.rs: changed since the loop changed it\n  \
             left open.rs: open with unsaved changes\n\
             review them; `loopr undo --force a-1` overwrites the files written by the coding \
             agent or changed since\n"
        );
    }
}
