//! The PostgreSQL pool of `idem worker`: 0 is refused naming the flag or the config key;
//! on PostgreSQL a `--pool-size` too small for the worker's own duties is refused naming
//! the flag and the key, and the default is capped at 60 connections, so a worker that
//! wants more starts and warns with the way out. The numbers are the pool for
//! transactions, the setting's share after the claim and engine pools. SQLite has no pool and ignores the setting.

mod common;

use common::*;

#[test]
fn a_pool_size_of_zero_is_refused_naming_the_flag_or_the_key() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    idem_on(tmp.path(), &url, &["worker", "--pool-size", "0"])
        .expect(2)
        .warns(&["--pool-size is 0"]);
    let config = tmp.path().join("idem.toml");
    std::fs::write(&config, "[worker]\npool_size = 0\n").unwrap();
    let config = config.to_str().unwrap();
    for command in [
        &["worker", "--config", config][..],
        &["config", "check", "--config", config],
    ] {
        idem_on(tmp.path(), &url, command)
            .expect(BAD_CONFIG)
            .warns(&["worker.pool_size is 0"]);
    }
}

#[test]
fn sqlite_ignores_the_pool_size() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    let mut worker = Worker::start(tmp.path(), &url, &["--pool-size", "1"]);
    let report = worker.stop();
    assert!(report.contains("claimed 0"), "{report}");
}

#[test]
fn postgres_a_small_pool_is_refused_and_a_capped_one_warned_naming_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    // The default queue at the default concurrency: 10 jobs + 7 of the worker's own, for
    // transactions; 5 connections leave 3 for them, 23 leave 17.
    idem_on(tmp.path(), &pg.url, &["worker", "--pool-size", "5"])
        .expect(BAD_CONFIG)
        .warns(&[
            "the PostgreSQL pool has 3 connections for transactions",
            "raise --pool-size or [worker] pool_size to 23 or more",
        ]);
    let mut worker = Worker::start(tmp.path(), &pg.url, &["--concurrency", "200"]);
    worker.stop();
    let out = worker.0.output();
    assert!(
        out.contains("the PostgreSQL pool has 48 connections for transactions")
            && out.contains("Raise --pool-size or [worker] pool_size to 219"),
        "{out}"
    );
}
