//! What lists and shows print: with `--json`, one JSON document on stdout and nothing
//! else; as tables, one row per record however many lines a job's last error has, with
//! the full text left to `show` and `--json`.

mod common;

use std::path::Path;

use common::*;

/// A last error of three lines, as a failing handler's backtrace leaves it.
const ERROR: &str = "first line\nsecond line\n\tat third line";

/// A migrated SQLite database in `data` with a job available and a job dead whose kind
/// has a newline and whose last error has three lines; its URL and the dead job's id.
fn database_with_a_dead_job(tmp: &Path, data: &Path) -> (String, i64) {
    let db = data.join("idem.db");
    let url = migrated_sqlite(tmp, &db);
    enqueue(tmp, &url, "fine");
    let dead = enqueue(tmp, &url, "bad");
    sqlite_exec(
        &db,
        &format!(
            "UPDATE idem_job SET state = 'dead', kind = 'bad' || char(10) || 'kind', \
             last_error = '{}', finalized_at = created_at WHERE id = {dead}",
            ERROR
                .replace('\n', "' || char(10) || '")
                .replace('\t', "' || char(9) || '")
        ),
    );
    (url, dead)
}

#[test]
fn lists_and_shows_print_json_and_only_json_on_stdout() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, dead) = database_with_a_dead_job(tmp.path(), data.path());
    let id = dead.to_string();
    let json = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--json");
        let out = idem_on(tmp.path(), &url, &args);
        out.expect(0);
        out.json()
    };
    let jobs = json(&["jobs", "list"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(2), "{jobs}");
    assert_eq!(jobs[0]["last_error"], ERROR);
    let dead_jobs = json(&["dead", "list"]);
    assert_eq!(dead_jobs.as_array().map(Vec::len), Some(1), "{dead_jobs}");
    for show in [&["jobs", "show", &id][..], &["dead", "show", &id]] {
        let shown = json(show);
        assert_eq!(shown["job"]["id"], dead, "{shown}");
        assert_eq!(shown["job"]["last_error"], ERROR);
        assert!(shown["attempts"].is_array(), "{shown}");
    }
    let queues = json(&["queues"]);
    assert!(
        queues["counts"].as_array().is_some_and(|q| q.len() == 2),
        "{queues}"
    );
    assert!(queues["waiting"].is_array(), "{queues}");
    assert_eq!(json(&["ledger", "verify"]), serde_json::json!([]));
    assert!(json(&["migrate", "--status"])["pending"].is_array());
    let out = idem_on(tmp.path(), &url, &["config", "check", "--json"]);
    assert!(out.expect(0).json()["horizon"].is_object(), "{out}");
}

#[test]
fn a_multi_line_error_prints_as_one_table_row() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, dead) = database_with_a_dead_job(tmp.path(), data.path());
    for (args, rows) in [(&["jobs", "list"][..], 2), (&["dead", "list"], 1)] {
        let out = idem_on(tmp.path(), &url, args);
        let lines: Vec<&str> = out.expect(0).stdout.lines().collect();
        assert_eq!(lines.len(), 1 + rows, "header and one line per job; {out}");
        let row = lines
            .iter()
            .find(|l| l.contains("first line"))
            .expect("the dead job");
        assert!(
            row.contains(r"first line\nsecond line\n\tat third"),
            "{out}"
        );
        assert!(row.contains(r"bad\nkind"), "{out}");
    }
    let out = idem_on(tmp.path(), &url, &["dead", "show", &dead.to_string()]);
    let text = &out.expect(0).stdout;
    for line in ["first line", "second line", "at third line"] {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "show lost {line:?}; {out}"
        );
    }
}

/// A job of a kind no worker has a handler for is never claimed: `idem queues` shows it
/// waiting, by queue and kind, with how long the oldest has been due.
#[test]
fn queues_shows_the_kinds_that_wait() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    enqueue(tmp.path(), &url, "nobody-handles-this");
    let out = idem_on(tmp.path(), &url, &["queues"]);
    out.expect(0)
        .says(&["waiting kind", "nobody-handles-this", "ago"]);
    let json = idem_on(tmp.path(), &url, &["queues", "--json"]).json();
    assert_eq!(json["waiting"][0]["kind"], "nobody-handles-this", "{json}");
    assert_eq!(json["waiting"][0]["count"], 1, "{json}");
}
