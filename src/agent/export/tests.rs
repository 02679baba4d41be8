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
    let (layout, db) = (
        fixture.layout.clone(),
        LoopDb::open(&fixture.layout.database()).expect("db"),
    );
    stored(
        &layout,
        &db,
        &mut fixture.spec,
        ArtifactKind::Spec,
        spec_json("Second title"),
        2,
    );
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
