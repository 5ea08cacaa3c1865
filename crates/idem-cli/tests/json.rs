//! Every `--json` document has exactly the fields `docs/cli-json.md` names, on both
//! stores: the test reads the field tables of that file, runs each command it lists on a
//! database where each document has something to show, and compares the keys. Every
//! document the file describes is checked at least once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/cli-json.md");

/// The field names of each document (`### \`name\``, then its table's first column).
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let mut docs = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in DOC.lines() {
        if let Some(name) = line.strip_prefix("### `") {
            current = Some(name.trim_end_matches('`').to_owned());
            docs.insert(current.clone().unwrap(), BTreeSet::new());
        } else if let (Some(name), Some(row)) = (&current, line.strip_prefix("| `")) {
            let field = row.split('`').next().unwrap().to_owned();
            docs.get_mut(name).unwrap().insert(field);
        }
    }
    docs
}

/// Compares documents with the file's field tables, and remembers which were checked.
struct Checker {
    docs: BTreeMap<String, BTreeSet<String>>,
    checked: BTreeSet<String>,
}

impl Checker {
    /// `value` is a `name` document: an object with exactly its documented fields.
    fn check<'a>(&mut self, name: &str, value: &'a Value) -> &'a Value {
        let fields = (self.docs.get(name)).unwrap_or_else(|| panic!("no `{name}` in the doc"));
        let keys: BTreeSet<String> = value
            .as_object()
            .unwrap_or_else(|| panic!("`{name}` is not an object: {value}"))
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            &keys, fields,
            "`{name}`: the keys printed (left) and documented (right)"
        );
        self.checked.insert(name.to_owned());
        value
    }

    /// `value` is a non-empty array of `name` documents.
    fn each(&mut self, name: &str, value: &Value) {
        let items = value
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {value}"));
        assert!(!items.is_empty(), "no `{name}` to check in {value}");
        for item in items {
            self.check(name, item);
        }
    }
}

/// `idem args… --json` (or as given, for commands that always print JSON), exit `code`.
fn json(tmp: &Path, db: &TestDb, args: &[&str], code: i32) -> Value {
    let out = db.idem(tmp, args);
    out.expect(code);
    out.json()
}

/// A database where every document has something to show: a dead job with an attempt,
/// an unknown intent, a ledger mismatch, a batch; returns the dead job's id.
fn populate(tmp: &Path, db: &TestDb) -> i64 {
    let dead = db.enqueue(tmp, "k", "mail");
    db.kill(&[dead]);
    let now = db.now();
    db.exec(&format!(
        "INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, \
         finished_at) VALUES ({dead}, 1, 1, 'dead', 'boom', {now}, {now})"
    ));
    db.exec(&format!(
        "INSERT INTO idem_intent (key, state, fingerprint, unkeyed, fence, attempt, job_id, \
         job_fence, error, created_at, updated_at) VALUES ('http:job:{dead}', 'unknown', 'f', \
         {}, 1, 1, {dead}, 1, 'timed out', {now}, {now})",
        db.no()
    ));
    db.exec(&format!(
        "INSERT INTO idem_ledger_balance (account, balance, updated_at) VALUES ('alice', 5, {now})"
    ));
    dead
}

fn jobs_and_dead_letters(c: &mut Checker, tmp: &Path, db: &TestDb, dead: i64) {
    let id = dead.to_string();
    c.each("job", &json(tmp, db, &["jobs", "list", "--json"], 0));
    c.each("job", &json(tmp, db, &["dead", "list", "--json"], 0));
    for show in ["jobs", "dead"] {
        let shown = json(tmp, db, &[show, "show", &id, "--json"], 0);
        c.check("job show", &shown);
        c.check("job", &shown["job"]);
        c.each("attempt", &shown["attempts"]);
    }
    let enqueued = json(tmp, db, &["enqueue", "--kind", "k"], 0);
    c.check("enqueued", &enqueued);
    let other = enqueued["job"]["id"].to_string();
    c.check(
        "job",
        &json(tmp, db, &["jobs", "cancel", &other, "--json"], 0),
    );
    let preview = json(
        tmp,
        db,
        &["dead", "retry", "--all", "--dry-run", "--json"],
        0,
    );
    c.check("bulk preview", &preview);
    // The cancelled job is retried; a job that is not dead or cancelled is left alone.
    let alive = db.enqueue(tmp, "k", "mail").to_string();
    let outcome = json(
        tmp,
        db,
        &["dead", "retry", &id, &other, &alive, "--json"],
        1,
    );
    c.check("bulk outcome", &outcome);
    c.each("left alone", &outcome["left_alone"]);
    let steered = json(tmp, db, &["queues", "pause", "mail", "--json"], 0);
    c.check("queue steered", &steered);
    let queues = json(tmp, db, &["queues", "--json"], 0);
    c.check("queues", &queues);
    c.each("queue count", &queues["counts"]);
    c.each("queue waiting", &queues["waiting"]);
    c.each("paused queue", &queues["paused"]);
    c.check(
        "queue steered",
        &json(tmp, db, &["queues", "resume", "mail", "--json"], 0),
    );
}

fn intents(c: &mut Checker, tmp: &Path, db: &TestDb, dead: i64) {
    let key = format!("http:job:{dead}");
    c.each("intent", &json(tmp, db, &["intents", "list", "--json"], 0));
    c.check(
        "intent",
        &json(tmp, db, &["intents", "show", &key, "--json"], 0),
    );
    let report = json(tmp, db, &["reconcile", "--json"], 0);
    assert_eq!(
        c.check("reconcile report", &report)["skipped"],
        1,
        "{report}"
    );
    let args = ["intents", "resolve", &key, "--absent", "--json"];
    let resolved = json(tmp, db, &args, 0);
    c.check("intent resolution", &resolved);
    c.check("intent", &resolved["intent"]);
}

fn batches(c: &mut Checker, tmp: &Path, data: &Path, db: &TestDb) {
    let children = data.join("children.jsonl");
    std::fs::write(&children, "{\"kind\": \"c\"}\n").unwrap();
    let children = children.display().to_string();
    let args = [
        "batches",
        "create",
        "--successor",
        "s",
        "--children",
        &children,
        "--open",
    ];
    let created = json(tmp, db, &args, 0);
    c.check("batch created", &created);
    c.check("batch", &created["batch"]);
    c.each("enqueued", &created["children"]);
    let id = created["batch"]["id"].to_string();
    c.check(
        "batch created",
        &json(
            tmp,
            db,
            &["batches", "add", &id, "--children", &children],
            0,
        ),
    );
    c.check(
        "batch",
        &json(tmp, db, &["batches", "seal", &id, "--json"], 0),
    );
    c.each("batch", &json(tmp, db, &["batches", "list", "--json"], 0));
    let shown = json(tmp, db, &["batches", "show", &id, "--json"], 0);
    c.check("batch show", &shown);
    c.check("batch", &shown["batch"]);
    c.each(
        "job",
        &json(tmp, db, &["batches", "children", &id, "--json"], 0),
    );
}

fn operations(c: &mut Checker, tmp: &Path, db: &TestDb) {
    c.each(
        "ledger mismatch",
        &json(tmp, db, &["ledger", "verify", "--json"], 1),
    );
    c.each(
        "ledger mismatch",
        &json(tmp, db, &["ledger", "repair", "--json"], 0),
    );
    c.each(
        "purge target",
        &json(tmp, db, &["purge", "--dry-run", "--json"], 0),
    );
    c.each("purge target", &json(tmp, db, &["purge", "--json"], 0));
    let status = json(tmp, db, &["migrate", "--status", "--json"], 0);
    c.check("schema status", &status);
    c.each("migration", &status["applied"]);
    c.check(
        "config report",
        &json(tmp, db, &["config", "check", "--json"], 0),
    );
    let guarantees = json(tmp, db, &["guarantees", "--json"], 0);
    c.check("guarantees", &guarantees);
    c.each("effect class", &guarantees["classes"]);
    c.each("job kind guarantee", &guarantees["kinds"]);
}

#[test]
fn every_json_document_has_the_documented_fields() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (tmp, data) = (tmp.path(), data.path());
    for db in TestDb::each(tmp, data) {
        let mut c = Checker {
            docs: documented(),
            checked: BTreeSet::new(),
        };
        let dead = populate(tmp, &db);
        jobs_and_dead_letters(&mut c, tmp, &db, dead);
        intents(&mut c, tmp, &db, dead);
        batches(&mut c, tmp, data, &db);
        operations(&mut c, tmp, &db);
        let unchecked: Vec<&String> = c.docs.keys().filter(|d| !c.checked.contains(*d)).collect();
        assert!(
            unchecked.is_empty(),
            "documented but never checked: {unchecked:?}"
        );
    }
}
