//! What a loop's name means. A loop sits on a path in its plan tree, `plan/spec/phase/code`:
//! the plan is named by the first words of its task joined by `_`, a spec or phase by its
//! name, a phase's code loop `code`, a verification asked of a phase or spec `verify`. A
//! selector is that path or any part of it that ends with the loop's own name (`phase`, `spec/phase`, `plan/phase`, `phase/code`), or the loop's
//! id; any part may be a loop id too. A name planned twice means the newest plan's loop unless
//! the plan is named; of loops on one path (a phase's code loops) the newest.

use std::collections::HashMap;

use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType};

/// How many characters of its task a plan's name keeps (whole words), so paths stay short.
const PLAN_NAME_CHARS: usize = 24;

/// What a code loop is called on its path, below its phase.
const CODE_LOOP_NAME: &str = "code";

/// What a verification asked on demand is called on its path, below its phase or spec.
const VERIFY_LOOP_NAME: &str = "verify";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoopNameError {
    /// Nothing the command takes is named so (each shell words what to do about it).
    #[error("nothing is named {0:?}")]
    NotFound(String),
    /// The candidates are all of one plan: another plan's loop never competes with the
    /// newest plan's, so naming the spec (or the loop id) is what tells them apart.
    #[error(
        "{selector:?} names {} {noun}s: {}; say which: {} (a longer plan/spec/phase path or \
         the loop id also does). The loops: {}",
        .candidates.len(),
        paths(.candidates),
        selectors(.candidates),
        details(.candidates)
    )]
    Ambiguous {
        selector: String,
        noun: &'static str,
        candidates: Vec<Candidate>,
    },
}

/// One loop an ambiguous selector could mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// `plan/spec/phase`.
    pub path: String,
    /// The shortest selector that names it alone, else its loop id.
    pub selector: String,
    pub id: LoopId,
    pub status: LoopStatus,
}

fn paths(candidates: &[Candidate]) -> String {
    join(
        candidates.iter().map(|candidate| candidate.path.clone()),
        ", ",
    )
}

fn selectors(candidates: &[Candidate]) -> String {
    join(
        candidates
            .iter()
            .map(|candidate| candidate.selector.clone()),
        " or ",
    )
}

fn details(candidates: &[Candidate]) -> String {
    join(
        candidates.iter().map(|candidate| {
            format!(
                "{} (loop {}, {})",
                candidate.path,
                candidate.id,
                candidate.status.as_str()
            )
        }),
        ", ",
    )
}

fn join(items: impl Iterator<Item = String>, separator: &str) -> String {
    items.collect::<Vec<_>>().join(separator)
}

/// A plan's name: the first words of its task, joined by `_`, as many whole words as fit in
/// `PLAN_NAME_CHARS` (at least the first, cut). A `/` separates the parts of a path, so it
/// separates words here too.
pub fn plan_name(task: &str) -> String {
    let mut name = String::new();
    for word in task.split(|c: char| c.is_whitespace() || c == '/') {
        if word.is_empty() {
            continue;
        }
        let joined = if name.is_empty() {
            word.to_owned()
        } else {
            format!("{name}_{word}")
        };
        if joined.chars().count() > PLAN_NAME_CHARS {
            if name.is_empty() {
                name = word.chars().take(PLAN_NAME_CHARS).collect();
            }
            break;
        }
        name = joined;
    }
    name
}

/// The shortest name a command taking any loop reads as `record` among `records` (the loops
/// of its project), else its id: what a message tells the user to type.
pub fn shortest_name(records: &[LoopRecord], record: &LoopRecord) -> String {
    LoopNames::new(records).shortest_selector(record, &Wanted::ANY_LOOP)
}

/// What a selector asks for: which loops may be meant, and which of those the command takes.
pub struct Wanted<'f> {
    /// What the loops are called in messages: "phase", "loop".
    pub noun: &'static str,
    /// The loops a name may mean at all (phases only, say): others never compete.
    pub kind: &'f dyn Fn(&LoopRecord) -> bool,
    /// Of those, the loops the command takes (a phase that may run, say).
    pub eligible: &'f dyn Fn(&LoopRecord) -> bool,
}

impl Wanted<'static> {
    /// Any loop, as a command that takes any loop reads a name (it says itself when it cannot
    /// take the loop named).
    pub const ANY_LOOP: Wanted<'static> = Wanted {
        noun: "loop",
        kind: &any_loop,
        eligible: &any_loop,
    };
}

fn any_loop(_: &LoopRecord) -> bool {
    true
}

/// The loops of one project and the paths of their trees.
pub struct LoopNames<'a> {
    records: &'a [LoopRecord],
    by_id: HashMap<&'a LoopId, &'a LoopRecord>,
}

impl<'a> LoopNames<'a> {
    pub fn new(records: &'a [LoopRecord]) -> LoopNames<'a> {
        LoopNames {
            records,
            by_id: records.iter().map(|record| (&record.id, record)).collect(),
        }
    }

    /// `record` and its ancestors, its plan first. Bounded by the number of loops, so a cycle
    /// a damaged store might hold cannot hang it.
    fn lineage(&self, record: &'a LoopRecord) -> Vec<&'a LoopRecord> {
        let mut lineage = vec![record];
        let mut current = record;
        for _ in 0..self.records.len() {
            match current.parent.as_ref().and_then(|id| self.by_id.get(id)) {
                Some(parent) => {
                    lineage.push(parent);
                    current = parent;
                }
                None => break,
            }
        }
        lineage.reverse();
        lineage
    }

    /// The id of `record`'s tree: its plan's, or the missing loop its topmost known
    /// ancestor names as parent. Ids sort by creation, so the greatest is the newest tree.
    fn tree(&self, record: &'a LoopRecord) -> &'a LoopId {
        let top = self.lineage(record)[0];
        top.parent.as_ref().unwrap_or(&top.id)
    }

    /// `plan/spec/phase`: how a person reads where `record` is.
    pub fn path(&self, record: &'a LoopRecord) -> String {
        join(self.lineage(record).into_iter().map(part_name), "/")
    }

    /// Whether `selector` names `record`: its last part is `record` (by name or id), and the
    /// parts before it name ancestors, in order.
    fn names(&self, record: &'a LoopRecord, selector: &[&str]) -> bool {
        let Some((own, before)) = selector.split_last() else {
            return false;
        };
        if !part_is(record, own) {
            return false;
        }
        let lineage = self.lineage(record);
        let mut ancestors = lineage[..lineage.len() - 1].iter();
        before
            .iter()
            .all(|part| ancestors.any(|ancestor| part_is(ancestor, part)))
    }

    /// The one loop `selector` names among those `wanted`. Of the loops it names, those of
    /// the newest plan compete; of these, the eligible; of these, a current loop wins over
    /// those a revision replaced (reached by id, or when no current one is eligible).
    pub fn resolve(
        &self,
        selector: &str,
        wanted: &Wanted<'_>,
    ) -> Result<&'a LoopRecord, LoopNameError> {
        let selector = selector.trim();
        match self.found(selector, wanted).as_slice() {
            [only] => Ok(only),
            [] => Err(LoopNameError::NotFound(selector.to_owned())),
            several => {
                let mut candidates: Vec<Candidate> = several
                    .iter()
                    .map(|record| Candidate {
                        path: self.path(record),
                        selector: self.shortest_selector(record, wanted),
                        id: record.id.clone(),
                        status: record.status,
                    })
                    .collect();
                // In the order a person scans them, whatever order the store keeps.
                candidates.sort_by(|a, b| (&a.path, &a.id).cmp(&(&b.path, &b.id)));
                Err(LoopNameError::Ambiguous {
                    selector: selector.to_owned(),
                    noun: wanted.noun,
                    candidates,
                })
            }
        }
    }

    /// The loops `selector` names that compete, as `resolve` says: one when it names one.
    fn found(&self, selector: &str, wanted: &Wanted<'_>) -> Vec<&'a LoopRecord> {
        let parts: Vec<&str> = selector.split('/').map(str::trim).collect();
        let named: Vec<&'a LoopRecord> = self
            .records
            .iter()
            .filter(|record| (wanted.kind)(record) && self.names(record, &parts))
            .collect();
        let newest_tree = named.iter().map(|record| self.tree(record)).max();
        let eligible: Vec<&'a LoopRecord> = named
            .into_iter()
            .filter(|record| Some(self.tree(record)) == newest_tree && (wanted.eligible)(record))
            .collect();
        let current: Vec<&'a LoopRecord> = eligible
            .iter()
            .copied()
            .filter(|record| record.status != LoopStatus::Invalidated)
            .collect();
        let mut found = if current.is_empty() {
            eligible
        } else {
            current
        };
        // Loops on one path (a phase's code loops, one after another): the newest.
        let first_path = found.first().map(|record| self.path(record));
        if found
            .iter()
            .all(|record| Some(self.path(record)) == first_path)
        {
            found.sort_by(|a, b| b.id.cmp(&a.id));
            found.truncate(1);
        }
        found
    }

    /// The shortest selector that names `record` alone among the loops `wanted`: its own
    /// name, then with its spec, then with its plan, then its whole path; else its id. A
    /// code loop is named with its phase at least (`phase/code`), a verification with its phase
    /// or spec (`phase/verify`).
    pub fn shortest_selector(&self, record: &'a LoopRecord, wanted: &Wanted<'_>) -> String {
        let names: Vec<String> = self.lineage(record).into_iter().map(part_name).collect();
        let Some((own, before)) = names.split_last() else {
            return record.id.to_string();
        };
        // Every choice of the parts before its own (bit i: `before[i]`), fewest parts
        // first, then those nearest to it (`spec/phase` before `plan/phase`).
        let below_its_artifact = matches!(record.loop_type, LoopType::Code | LoopType::Verify);
        let nearest =
            (below_its_artifact && !before.is_empty()).then(|| 1u32 << (before.len() - 1));
        let mut masks: Vec<u32> = (0..1u32 << before.len())
            .filter(|mask| nearest.is_none_or(|bit| mask & bit != 0))
            .collect();
        masks.sort_by_key(|mask| (mask.count_ones(), std::cmp::Reverse(*mask)));
        let choices = masks.into_iter().map(|mask| {
            (0..before.len())
                .filter(|bit| mask & (1 << bit) != 0)
                .map(|bit| &before[bit])
                .chain([own])
                .collect::<Vec<_>>()
        });
        choices
            .into_iter()
            .map(|choice| join(choice.into_iter().cloned(), "/"))
            .find(|selector| {
                matches!(self.found(selector, wanted).as_slice(), [only] if only.id == record.id)
            })
            .unwrap_or_else(|| record.id.to_string())
    }

    /// What to complete an argument with: the shortest selector, as the command resolves
    /// it (`wanted`), of every loop `wanted` takes that `listed` accepts; sorted, each once.
    pub fn selectors(
        &self,
        wanted: &Wanted<'_>,
        listed: &dyn Fn(&LoopRecord) -> bool,
    ) -> Vec<String> {
        let mut selectors: Vec<String> = self
            .records
            .iter()
            .filter(|record| (wanted.kind)(record) && (wanted.eligible)(record) && listed(record))
            .map(|record| self.shortest_selector(record, wanted))
            .collect();
        selectors.sort();
        selectors.dedup();
        selectors
    }
}

/// What a part of a path is called: a plan by its task's first words, a code loop `code`,
/// another loop by its name.
fn part_name(record: &LoopRecord) -> String {
    match (&record.name, record.loop_type) {
        (_, LoopType::Code) => CODE_LOOP_NAME.to_owned(),
        (_, LoopType::Verify) => VERIFY_LOOP_NAME.to_owned(),
        (Some(name), _) if !name.is_empty() => name.clone(),
        _ => plan_name(&record.task),
    }
}

/// Whether `part` of a selector names `record`: its loop id, or its name (a plan's in any
/// case: people retype a task's words as they remember them).
fn part_is(record: &LoopRecord, part: &str) -> bool {
    record.id.as_str() == part || part_name(record).eq_ignore_ascii_case(part)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A complete loop with one iteration, its id, type, parent and name given.
    pub(in crate::agent) fn record(
        id: &str,
        loop_type: LoopType,
        parent: Option<&str>,
        name: &str,
    ) -> LoopRecord {
        LoopRecord {
            id: LoopId::parse(id).expect("id"),
            parent: parent.and_then(LoopId::parse),
            name: (!name.is_empty()).then(|| name.to_owned()),
            status: LoopStatus::Complete,
            iteration: 1,
            ..LoopRecord::new_pending(loop_type, "task", "{}".to_owned())
        }
    }

    fn plan(id: &str, task: &str) -> LoopRecord {
        LoopRecord {
            task: task.to_owned(),
            ..record(id, LoopType::Plan, None, "")
        }
    }

    /// Two plans, each with a spec `cli` and a phase `setup`; the newer also has `docs/setup`.
    fn two_plans() -> Vec<LoopRecord> {
        vec![
            plan("p1", "Add a --version flag"),
            record("p1s", LoopType::Spec, Some("p1"), "cli"),
            record("p1ph", LoopType::Phase, Some("p1s"), "setup"),
            plan("p2", "Print the version in --help and in the README"),
            record("p2s", LoopType::Spec, Some("p2"), "cli"),
            record("p2ph", LoopType::Phase, Some("p2s"), "setup"),
            record("p2d", LoopType::Spec, Some("p2"), "docs"),
            record("p2dph", LoopType::Phase, Some("p2d"), "readme"),
            record("p2c", LoopType::Code, Some("p2ph"), "setup"),
        ]
    }

    fn phases<'f>(eligible: &'f dyn Fn(&LoopRecord) -> bool) -> Wanted<'f> {
        Wanted {
            noun: "phase",
            kind: &|record| record.loop_type == LoopType::Phase,
            eligible,
        }
    }

    fn resolved(records: &[LoopRecord], selector: &str) -> Result<String, LoopNameError> {
        LoopNames::new(records)
            .resolve(selector, &phases(&|_| true))
            .map(|record| record.id.to_string())
    }

    #[test]
    fn a_plan_is_named_by_the_first_words_of_its_task() {
        assert_eq!(plan_name("Add a --version flag"), "Add_a_--version_flag");
        assert_eq!(
            plan_name("Print the version in --help and in the README"),
            "Print_the_version_in"
        );
        assert_eq!(plan_name("Fix src/main.rs"), "Fix_src_main.rs");
        assert_eq!(plan_name("x".repeat(30).as_str()), "x".repeat(24));
    }

    #[test]
    fn the_newest_plan_wins_unless_the_plan_is_named() {
        let records = two_plans();
        assert_eq!(resolved(&records, "setup").as_deref(), Ok("p2ph"));
        assert_eq!(resolved(&records, "cli/setup").as_deref(), Ok("p2ph"));
        assert_eq!(
            resolved(&records, "Add_a_--version_flag/setup").as_deref(),
            Ok("p1ph")
        );
        assert_eq!(
            resolved(&records, "add_a_--version_flag/cli/setup").as_deref(),
            Ok("p1ph")
        );
        assert_eq!(resolved(&records, "p1/setup").as_deref(), Ok("p1ph"));
        assert_eq!(resolved(&records, "p1ph").as_deref(), Ok("p1ph"));
        assert_eq!(
            resolved(&records, "Add_a_--version_flag/readme"),
            Err(LoopNameError::NotFound(
                "Add_a_--version_flag/readme".to_owned()
            ))
        );
    }

    #[test]
    fn a_code_loop_is_named_below_its_phase() {
        let records = two_plans();
        let names = LoopNames::new(&records);
        let code = &records[8];
        assert_eq!(names.path(code), "Print_the_version_in/cli/setup/code");
        let id = |selector: &str| {
            names
                .resolve(selector, &Wanted::ANY_LOOP)
                .map(|r| r.id.to_string())
        };
        assert_eq!(
            id("cli/setup").as_deref(),
            Ok("p2ph"),
            "the phase, not its code"
        );
        assert_eq!(id("setup/code").as_deref(), Ok("p2c"));
        assert_eq!(
            names.shortest_selector(code, &Wanted::ANY_LOOP),
            "setup/code"
        );
    }

    #[test]
    fn a_phases_newest_code_loop_wins() {
        let mut records = two_plans();
        records.push(record("p2c2", LoopType::Code, Some("p2ph"), "setup"));
        let names = LoopNames::new(&records);
        let id = |selector: &str| {
            names
                .resolve(selector, &Wanted::ANY_LOOP)
                .map(|r| r.id.to_string())
        };
        assert_eq!(id("setup/code").as_deref(), Ok("p2c2"));
        assert_eq!(id("p2c").as_deref(), Ok("p2c"));
    }

    #[test]
    fn an_ambiguity_shows_full_paths_first_then_the_names_that_work() {
        let mut records = two_plans();
        records.push(record("p2dsetup", LoopType::Phase, Some("p2d"), "setup"));
        let text = resolved(&records, "setup")
            .expect_err("two in the newest plan")
            .to_string();
        assert!(
            text.starts_with(
                "\"setup\" names 2 phases: Print_the_version_in/cli/setup, \
                 Print_the_version_in/docs/setup; say which: cli/setup or docs/setup"
            ),
            "{text}"
        );
        assert!(
            text.contains("docs/setup (loop p2dsetup, complete)"),
            "{text}"
        );
    }

    #[test]
    fn completion_offers_the_shortest_name_of_each_loop() {
        let records = two_plans();
        let names = LoopNames::new(&records);
        assert_eq!(
            names.selectors(&phases(&|_| true), &|_| true),
            vec!["Add_a_--version_flag/setup", "readme", "setup"]
        );
    }
}
