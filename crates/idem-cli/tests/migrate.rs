//! `idem migrate --status` lists applied and pending migrations without applying them;
//! `idem migrate` says what it applies; a database newer than the build is refused by
//! both.

mod common;

use common::*;

fn versions(list: &serde_json::Value) -> Vec<i64> {
    let list = list.as_array().expect("a list of migrations");
    list.iter()
        .map(|m| m["version"].as_i64().expect("a version"))
        .collect()
}

#[test]
fn status_lists_the_pending_then_nothing_after_migrate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (db, url) = old_sqlite(data.path(), OLDER);
    let lacking = lacking();
    let lacking: Vec<&str> = lacking.iter().map(String::as_str).collect();

    let all = idem_store::migration::COUNT;
    idem_on(tmp.path(), &url, &["migrate", "--status"])
        .expect(SCHEMA_NOT_CURRENT)
        .says(&lacking)
        .says(&["0001_job"]);
    let json = idem_on(tmp.path(), &url, &["migrate", "--status", "--json"]).json();
    assert_eq!(versions(&json["applied"]), versions_upto(OLDER));
    assert_eq!(versions(&json["pending"]).len(), all - OLDER);
    assert_eq!(
        sqlite_versions(&db),
        versions_upto(OLDER),
        "--status migrated"
    );

    idem_on(tmp.path(), &url, &["migrate"])
        .expect(0)
        .says(&lacking);
    idem_on(tmp.path(), &url, &["migrate", "--status"]).expect(0);
    let json = idem_on(tmp.path(), &url, &["migrate", "--status", "--json"]).json();
    assert_eq!(versions(&json["applied"]), versions_upto(all));
    assert_eq!(versions(&json["pending"]), Vec::<i64>::new());
}

#[test]
fn a_database_newer_than_the_build_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("newer.db");
    let url = migrated_sqlite(tmp.path(), &db);
    sqlite_exec(
        &db,
        "INSERT INTO idem_migration (version, name, applied_at) VALUES (99, 'from_the_future', 0)",
    );
    for args in [&["migrate", "--status"][..], &["migrate"], &["queues"]] {
        idem_on(tmp.path(), &url, args)
            .expect(SCHEMA_NOT_CURRENT)
            .warns(&["upgrade idem"]);
    }
    let json = idem_on(tmp.path(), &url, &["migrate", "--status", "--json"]).json();
    assert_eq!(versions(&json["newer"]), vec![99]);
}
