//! The export against a real store and project folder: edits kept and told once, replaced
//! parts removed, a planted link refused.

use serde_json::json;

use super::*;
use crate::agent::artifact_store::store_artifact;
use crate::artifacts::ArtifactKind;

struct Fixture {
    _temp: tempfile::TempDir,
    project: PathBuf,
    root: ProjectRoot,
    layout: ProjectLayout,
    db: LoopDb,
    plan: LoopRecord,
    spec: LoopRecord,
}

fn stored(
    fixture_layout: &ProjectLayout,
    db: &LoopDb,
    record: &mut LoopRecord,
    kind: ArtifactKind,
    json: serde_json::Value,
    iteration: u32,
) {
    store_artifact(
        fixture_layout,
        &record.id,
        iteration,
        kind,
        &json,
        "# stored\n",
        None,
    )
    .expect("stored");
    db.set_iteration(&record.id, iteration).expect("iteration");
    record.iteration = iteration;
}

fn spec_json(title: &str) -> serde_json::Value {
    json!({"name": "version-flag", "title": title, "overview": "O.",
           "requirements": [], "phases": [
               {"name": "parse-flag", "title": "Parse", "description": "D."}],
           "acceptance_criteria": [], "test_strategy": null})
}

impl Fixture {
    fn new() -> Fixture {
        let temp = tempfile::tempdir().expect("temp");
        let project = temp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let root = ProjectRoot::new(&project).expect("root");
        let layout = ProjectLayout::new(&temp.path().join("home"), &project);
        std::fs::create_dir_all(layout.project_dir()).expect("home");
        let db = LoopDb::open(&layout.database()).expect("db");
        let mut plan = LoopRecord::new_pending(
            LoopType::Plan,
            "Add a --version flag",
            r#"{"export_dir": "docs/plans"}"#.to_owned(),
        );
        db.insert(&plan, 1).expect("plan");
        let plan_json = json!({"title": "Version", "overview": "O.", "specs": [
            {"name": "version-flag", "title": "Parse", "description": "D.", "dependencies": []}],
            "non_goals": [], "risks": []});
        stored(&layout, &db, &mut plan, ArtifactKind::Plan, plan_json, 1);
        let mut spec = LoopRecord {
            parent: Some(plan.id.clone()),
            name: Some("version-flag".to_owned()),
            triggered_by: Some("iterations/001/artifacts/plan.json".to_owned()),
            ..LoopRecord::new_pending(LoopType::Spec, "Parse", "{}".to_owned())
        };
        db.insert(&spec, 1).expect("spec");
        stored(
            &layout,
            &db,
            &mut spec,
            ArtifactKind::Spec,
            spec_json("First title"),
            1,
        );
        Fixture {
            _temp: temp,
            project,
            root,
            layout,
            db,
            plan,
            spec,
        }
    }

    /// Stores the spec's `iteration`, titled `title`.
    fn revise_spec(&mut self, title: &str, iteration: u32) {
        let (layout, db) = (
            self.layout.clone(),
            LoopDb::open(&self.layout.database()).expect("db"),
        );
        stored(
            &layout,
            &db,
            &mut self.spec,
            ArtifactKind::Spec,
            spec_json(title),
            iteration,
        );
    }

    fn export(&self) -> Result<Vec<String>, ExportError> {
        export_plan_tree(&self.db, &self.layout, &self.root, &self.spec.id)
    }

    fn file(&self, path: &str) -> String {
        std::fs::read_to_string(
            self.project
                .join("docs/plans/add-a-version-flag")
                .join(path),
        )
        .unwrap_or_else(|err| panic!("{path}: {err}"))
    }
}

#[test]
fn an_edited_file_is_kept_and_told_once_while_the_others_are_updated() {
    let mut fixture = Fixture::new();
    assert_eq!(fixture.export().expect("exported"), Vec::<String>::new());
    assert!(fixture.file("README.md").contains("# Plan: Version"));
    assert!(
        fixture
            .file("version-flag/README.md")
            .contains("# Spec: First title")
    );
    let inode = |path: &str| {
        use std::os::unix::fs::MetadataExt;
        let dir = fixture.project.join("docs/plans/add-a-version-flag");
        std::fs::metadata(dir.join(path)).expect("exported").ino()
    };
    let before = inode("README.md");
    fixture.export().expect("again");
    assert_eq!(
        inode("README.md"),
        before,
        "an unchanged file is not written again"
    );

    let edited = fixture
        .project
        .join("docs/plans/add-a-version-flag/README.md");
    std::fs::write(&edited, "my notes\n").expect("edit");
    fixture.revise_spec("Second title", 2);
    let told = fixture.export().expect("exported");
    assert_eq!(
        told,
        [
            "docs/plans/add-a-version-flag/README.md was edited since Loopr exported it, so Loopr \
          left it as it is and the plan's newer text is not in it; delete or move the file to \
          have it exported again"
        ]
    );
    assert_eq!(fixture.file("README.md"), "my notes\n");
    assert!(
        fixture
            .file("version-flag/README.md")
            .contains("# Spec: Second title")
    );
    assert_eq!(
        fixture.export().expect("again"),
        Vec::<String>::new(),
        "told once"
    );

    // Deleted, it is exported again.
    std::fs::remove_file(&edited).expect("delete");
    assert_eq!(fixture.export().expect("again"), Vec::<String>::new());
    assert!(fixture.file("README.md").contains("# Plan: Version"));
    let _ = &fixture.plan;
}

#[test]
fn a_replaced_spec_files_go_unless_edited_and_a_file_loopr_never_wrote_is_left_alone() {
    let fixture = Fixture::new();
    fixture.export().expect("exported");
    let spec_readme = fixture
        .project
        .join("docs/plans/add-a-version-flag/version-flag/README.md");
    assert!(spec_readme.exists());
    fixture
        .db
        .set_status(&fixture.spec.id, LoopStatus::Invalidated, None)
        .expect("invalidated");
    fixture.export().expect("exported");
    assert!(
        !spec_readme.exists(),
        "an invalidated spec's file is removed"
    );
    assert!(
        !spec_readme.parent().expect("folder").exists(),
        "and its empty folder"
    );

    let theirs = fixture
        .project
        .join("docs/plans/add-a-version-flag/README.md");
    std::fs::remove_file(&theirs).expect("remove");
    std::fs::write(&theirs, "someone else's\n").expect("theirs");
    let record = fixture.layout.project_dir().join(EXPORT_RECORD);
    std::fs::remove_file(record).expect("forget what Loopr wrote");
    let told = fixture.export().expect("exported");
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("README.md was not written by Loopr"),
        "{told:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&theirs).expect("kept"),
        "someone else's\n"
    );
}

#[test]
fn a_link_planted_at_the_export_folder_is_refused() {
    let fixture = Fixture::new();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::create_dir(fixture.project.join("docs")).expect("docs");
    std::os::unix::fs::symlink(outside.path(), fixture.project.join("docs/plans")).expect("link");
    let err = fixture.export().expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the plan could not be exported to docs/plans: docs/plans is a symbolic link or \
         something else that is not a folder; Loopr does not write through links; make it a \
         folder of the project or set export_dir to another one"
    );
    assert_eq!(std::fs::read_dir(outside.path()).expect("list").count(), 0);
}

/// Names the export a child process runs as a second host: the fixture's directory and the
/// loop whose tree it exports.
const SECOND_HOST: &str = "LOOPR_TEST_EXPORT_SECOND_HOST";

/// Not a test of its own: the body of a second host, run by the tests below in a child
/// process of this test binary (a host of its own, sharing only the files). Writes what it
/// would tell the user to `told-<loop>.json` in the fixture's directory.
#[test]
#[ignore = "a second host, run in a child process by the tests below"]
fn export_as_a_second_host() {
    let Ok(task) = std::env::var(SECOND_HOST) else {
        return;
    };
    let (dir, id) = task.split_once('|').expect("dir|id");
    let dir = Path::new(dir);
    let project = dir.join("project");
    let root = ProjectRoot::new(&project).expect("root");
    let layout = ProjectLayout::new(&dir.join("home"), &project);
    let db = LoopDb::open(&layout.database()).expect("db");
    let id = LoopId::parse(id).expect("loop id");
    let told = export_plan_tree(&db, &layout, &root, &id).expect("exported");
    let json = serde_json::to_vec(&told).expect("json");
    std::fs::write(dir.join(format!("told-{id}.json")), json).expect("told");
}

/// Two FIFOs through which a test holds a child at a `test_hooks::hold_point`.
struct Hold {
    dir: PathBuf,
}

impl Hold {
    fn new(parent: &Path, name: &str) -> Hold {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).expect("hold dir");
        for fifo in ["arrived", "release"] {
            crate::test_support::mkfifo(&dir.join(fifo));
        }
        Hold { dir }
    }

    /// Returns once a child is held (its open of `arrived` meets this one).
    fn arrived(&self) {
        std::fs::File::open(self.dir.join("arrived")).expect("arrived");
    }

    fn release(&self) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("release"))
            .expect("release");
    }
}

impl Fixture {
    /// A second host exporting the tree of `loop_id`, held at `point` when given.
    fn second_host(&self, loop_id: &LoopId, hold: Option<(&str, &Hold)>) -> std::process::Child {
        let mut command = std::process::Command::new(std::env::current_exe().expect("exe"));
        command
            .args([
                "--exact",
                "agent::export::tests::export_as_a_second_host",
                "--ignored",
                "--nocapture",
                "--quiet",
            ])
            .env(
                SECOND_HOST,
                format!("{}|{loop_id}", self._temp.path().display()),
            )
            .stdout(std::process::Stdio::null());
        if let Some((point, hold)) = hold {
            command
                .env("LOOPR_TEST_HOOKS", "1")
                .env("LOOPR_TEST_HOLD_AT", point)
                .env("LOOPR_TEST_HOLD_DIR", &hold.dir);
        }
        command.spawn().expect("second host")
    }

    /// A second plan of the same project, with its artifact stored.
    fn another_plan(&self) -> LoopRecord {
        let mut plan = LoopRecord::new_pending(
            LoopType::Plan,
            "Add a --help flag",
            r#"{"export_dir": "docs/plans"}"#.to_owned(),
        );
        self.db.insert(&plan, 1).expect("plan");
        let plan_json = json!({"title": "Help", "overview": "O.", "specs": [],
            "non_goals": [], "risks": []});
        stored(
            &self.layout,
            &self.db,
            &mut plan,
            ArtifactKind::Plan,
            plan_json,
            1,
        );
        plan
    }

    /// What the second host that exported the tree of `loop_id` told, once it succeeded.
    fn told_by(&self, mut child: std::process::Child, loop_id: &LoopId) -> Vec<String> {
        assert!(child.wait().expect("second host").success());
        let told = self._temp.path().join(format!("told-{loop_id}.json"));
        serde_json::from_slice(&std::fs::read(told).expect("told")).expect("json")
    }
}

#[test]
fn a_users_edit_landing_after_the_check_is_kept_and_told() {
    let mut fixture = Fixture::new();
    fixture.export().expect("exported");
    fixture.revise_spec("Second title", 2);
    let hold = Hold::new(fixture._temp.path(), "hold");
    let host = fixture.second_host(&fixture.spec.id, Some(("export_write", &hold)));
    // The host has found the spec's file as it exported it and is about to replace it.
    hold.arrived();
    let spec_readme = fixture
        .project
        .join("docs/plans/add-a-version-flag/version-flag/README.md");
    std::fs::write(&spec_readme, "my notes\n").expect("the user's edit");
    hold.release();
    let told = fixture.told_by(host, &fixture.spec.id);
    assert_eq!(
        std::fs::read_to_string(&spec_readme).expect("kept"),
        "my notes\n"
    );
    assert_eq!(
        told,
        [
            "docs/plans/add-a-version-flag/version-flag/README.md was edited since Loopr \
             exported it, so Loopr left it as it is and the plan's newer text is not in it; \
             delete or move the file to have it exported again"
        ]
    );
    assert_eq!(fixture.export().expect("again"), Vec::<String>::new());
}

#[test]
fn two_hosts_exporting_one_project_at_once_keep_one_consistent_record() {
    let fixture = Fixture::new();
    let other = fixture.another_plan();
    let first = Hold::new(fixture._temp.path(), "first");
    let second = Hold::new(fixture._temp.path(), "second");
    // The first host holds between reading the record and writing it.
    let first_host = fixture.second_host(&fixture.spec.id, Some(("export_record_read", &first)));
    first.arrived();
    // The second host either waits for the first (held where it finds the record locked) or,
    // with nothing keeping it out, runs to its end; either way `second.arrived()` returns.
    let mut second_host = fixture.second_host(&other.id, Some(("export_lock_busy", &second)));
    let (exited_tx, exited_rx) = std::sync::mpsc::channel();
    let watcher = {
        let arrived = second.dir.join("arrived");
        std::thread::spawn(move || {
            let status = second_host.wait().expect("second host");
            exited_tx.send(status).expect("told");
            let _ = std::fs::OpenOptions::new().write(true).open(arrived);
        })
    };
    second.arrived();
    first.release();
    if exited_rx.try_recv().is_err() {
        second.release();
        assert!(exited_rx.recv().expect("exited").success());
        // Meets the watcher's open of `arrived` once the second host is gone.
        second.arrived();
    }
    watcher.join().expect("watcher");
    assert!(fixture.told_by(first_host, &fixture.spec.id).is_empty());

    let record = read_record(&fixture.layout.project_dir().join(EXPORT_RECORD));
    let mut plans: Vec<(String, usize)> = record
        .plans
        .values()
        .map(|plan| (plan.folder.clone(), plan.files.len()))
        .collect();
    plans.sort();
    assert_eq!(
        plans,
        [
            ("add-a-help-flag".to_owned(), 1),
            ("add-a-version-flag".to_owned(), 2)
        ],
        "both hosts' files are in the record"
    );
    let again = export_plan_tree(&fixture.db, &fixture.layout, &fixture.root, &other.id);
    assert_eq!(again.expect("exported"), Vec::<String>::new());
    assert_eq!(fixture.export().expect("exported"), Vec::<String>::new());
}
