//! Operator commands open what exists: a mistyped SQLite path creates nothing and is "not
//! found"; a database at an older schema is reported with its pending migrations and left
//! as it was, by reading and writing commands alike, until `idem migrate`; a read-only
//! PostgreSQL session runs every read.

mod common;

use common::*;

/// Every operator command except `idem migrate`: those that read and those that write jobs.
const COMMANDS: [&[&str]; 15] = [
    &["queues"],
    &["queues", "pause", "q"],
    &["queues", "resume", "q"],
    &["jobs", "list"],
    &["jobs", "show", "1"],
    &["dead", "list"],
    &["dead", "show", "1"],
    &["ledger", "verify"],
    &["ledger", "repair"],
    &["migrate", "--status"],
    &["enqueue", "--kind", "k"],
    &["jobs", "cancel", "1"],
    &["dead", "retry", "1"],
    &["dead", "discard", "1"],
    &["purge"],
];

#[test]
fn a_mistyped_sqlite_path_creates_nothing_and_is_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let typo = data.path().join("typo.db");
    for args in COMMANDS {
        idem_on(tmp.path(), &sqlite_url(&typo), args)
            .expect(NOT_FOUND)
            .warns(&[&typo.display().to_string(), "idem migrate"]);
        assert_eq!(
            entries(data.path()),
            Vec::<String>::new(),
            "{args:?} created a file"
        );
    }
}

#[test]
fn an_older_schema_is_reported_and_left_as_it_was_until_migrate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (db, url) = old_sqlite(data.path(), OLDER);
    let mut expected = lacking();
    expected.push("idem migrate".to_owned());
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let before = std::fs::read(&db).unwrap();
    for args in COMMANDS {
        idem_on(tmp.path(), &url, args)
            .expect(SCHEMA_NOT_CURRENT)
            .warns(&expected);
        let recorded = sqlite_versions(&db);
        assert_eq!(recorded, versions_upto(OLDER), "{args:?} migrated");
        let unchanged = std::fs::read(&db).unwrap() == before;
        assert!(unchanged, "{args:?} wrote {}", db.display());
    }
    idem_on(tmp.path(), &url, &["migrate"]).expect(0);
    let all = idem_store::migration::COUNT;
    assert_eq!(sqlite_versions(&db), versions_upto(all));
    idem_on(tmp.path(), &url, &["enqueue", "--kind", "k"]).expect(0);
    idem_on(tmp.path(), &url, &["jobs", "list"])
        .expect(0)
        .says(&[" k "]);
}

#[test]
fn a_read_only_postgres_session_runs_the_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    let id = enqueue(tmp.path(), &pg.url, "k").to_string();
    let read_only = pg.read_only_url();
    for args in [
        &["queues"][..],
        &["jobs", "list"],
        &["jobs", "show", &id],
        &["dead", "list"],
        &["dead", "show", &id],
        &["ledger", "verify"],
        &["ledger", "repair"],
        &["migrate", "--status"],
    ] {
        idem_on(tmp.path(), &read_only, args).expect(0);
    }
    let out = idem_on(tmp.path(), &read_only, &["enqueue", "--kind", "k"]);
    assert_ne!(out.code, Some(0), "a read-only session enqueued; {out}");
}
