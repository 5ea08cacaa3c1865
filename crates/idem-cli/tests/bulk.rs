//! Bulk dead-letter actions act only on the ids they previewed, on both stores: a preview
//! (`--dry-run --json`) names the ids, a job that dies after it is left alone by the
//! action that reads the preview back (`--ids-from`), and `--all` without a terminal
//! acts on nothing unless `--yes`.

mod common;

use std::path::Path;

use common::*;

/// Dead jobs `a` and `b` in queue mail, `web` dead in queue web, `late` in mail alive.
struct Jobs {
    a: i64,
    b: i64,
    web: i64,
    late: i64,
}

fn jobs(tmp: &Path, db: &TestDb) -> Jobs {
    let jobs = Jobs {
        a: db.enqueue(tmp, "k", "mail"),
        b: db.enqueue(tmp, "k", "mail"),
        web: db.enqueue(tmp, "k", "web"),
        late: db.enqueue(tmp, "k", "mail"),
    };
    db.kill(&[jobs.a, jobs.b, jobs.web]);
    jobs
}

/// The preview of `action` on the dead jobs of queue mail: b and a, nothing changed.
fn preview(tmp: &Path, db: &TestDb, action: &str, j: &Jobs) -> String {
    let args = [
        "dead",
        action,
        "--all",
        "--queue",
        "mail",
        "--dry-run",
        "--json",
    ];
    let out = db.idem(tmp, &args);
    let preview = out.expect(0).json();
    assert_eq!(preview["action"], action, "{out}");
    assert_eq!(preview["queue"], "mail", "{out}");
    assert_eq!(preview["count"], 2, "{out}");
    assert_eq!(preview["ids"], serde_json::json!([j.b, j.a]), "{out}");
    for id in [j.a, j.b] {
        assert_eq!(
            db.state(tmp, id).as_deref(),
            Some("dead"),
            "a dry run acted"
        );
    }
    out.stdout.clone()
}

fn acts_only_on_the_previewed_ids(tmp: &Path, data: &Path, db: &TestDb, action: &str) {
    let j = jobs(tmp, db);
    let file = data.join(format!("{action}-preview.json"));
    std::fs::write(&file, preview(tmp, db, action, &j)).unwrap();
    db.kill(&[j.late]); // dies between the preview and the action
    let file = file.display().to_string();
    let out = db.idem(tmp, &["dead", action, "--ids-from", &file, "--json"]);
    let outcome = out.expect(0).json();
    assert_eq!(outcome["asked"], serde_json::json!([j.b, j.a]), "{out}");
    let mut done: Vec<i64> = serde_json::from_value(outcome["done"].clone()).unwrap();
    done.sort();
    assert_eq!(done, vec![j.a, j.b], "{out}");
    let after = match action {
        "retry" => Some("available"),
        _ => None,
    };
    for id in [j.a, j.b] {
        assert_eq!(db.state(tmp, id).as_deref(), after, "job {id}");
    }
    for id in [j.late, j.web] {
        assert_eq!(
            db.state(tmp, id).as_deref(),
            Some("dead"),
            "job {id} acted on"
        );
    }
}

/// Runs `check` on a fresh database of each store.
fn on_each_store(check: impl Fn(&Path, &Path, &TestDb)) {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for db in TestDb::each(tmp.path(), data.path()) {
        check(tmp.path(), data.path(), &db);
    }
}

#[test]
fn a_bulk_retry_acts_only_on_the_previewed_ids() {
    on_each_store(|tmp, data, db| acts_only_on_the_previewed_ids(tmp, data, db, "retry"));
}

#[test]
fn a_bulk_discard_acts_only_on_the_previewed_ids() {
    on_each_store(|tmp, data, db| acts_only_on_the_previewed_ids(tmp, data, db, "discard"));
}

/// Without a terminal, `--all` acts only with `--yes`; the refusal names the ways on.
#[test]
fn all_without_a_terminal_needs_yes() {
    on_each_store(|tmp, _, db| {
        let j = jobs(tmp, db);
        for action in ["retry", "discard"] {
            db.idem(tmp, &["dead", action, "--all", "--queue", "mail"])
                .expect(USAGE)
                .warns(&[
                    "2 job(s) selected (queue mail)",
                    "--yes",
                    "--dry-run --json",
                    "--ids-from",
                ]);
            for id in [j.a, j.b, j.web] {
                assert_eq!(db.state(tmp, id).as_deref(), Some("dead"), "{action} acted");
            }
        }
        db.idem(tmp, &["dead", "retry", "--all", "--queue", "mail", "--yes"])
            .expect(0)
            .says(&["retried 2 of 2 job(s)"]);
        assert_eq!(
            db.state(tmp, j.web).as_deref(),
            Some("dead"),
            "the filter was ignored"
        );
    });
}

/// A preview read back by another action is refused; so is a file without ids.
#[test]
fn ids_from_refuses_another_actions_preview_and_bad_files() {
    on_each_store(|tmp, data, db| {
        let j = jobs(tmp, db);
        let file = data.join("preview.json");
        std::fs::write(&file, preview(tmp, db, "retry", &j)).unwrap();
        let file = file.display().to_string();
        db.idem(tmp, &["dead", "discard", "--ids-from", &file])
            .expect(USAGE)
            .warns(&["previews a retry, not a discard"]);
        let empty = data.join("empty.txt");
        std::fs::write(&empty, "\n").unwrap();
        let empty = empty.display().to_string();
        db.idem(tmp, &["dead", "retry", "--ids-from", &empty])
            .expect(USAGE)
            .warns(&["holds no job id"]);
        assert_eq!(db.state(tmp, j.a).as_deref(), Some("dead"));
    });
}
