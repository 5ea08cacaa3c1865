//! `idem queues pause|resume`: a pause shows in `idem queues` (who, since when) until the
//! queue is resumed; pausing twice or resuming a queue not paused changes nothing and
//! says so; a bad queue name is refused; on SQLite and on PostgreSQL.

mod common;

use std::path::Path;

use common::*;

fn steer_a_queue(tmp: &Path, url: &str) {
    let json = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--json");
        let out = idem_on(tmp, url, &args);
        out.expect(0);
        out.json()
    };
    enqueue(tmp, url, "k");
    let paused = json(&["queues", "pause", "default"]);
    assert_eq!(paused["changed"], true, "{paused}");
    idem_on(tmp, url, &["queues", "pause", "default"])
        .expect(0)
        .says(&["paused already"]);
    let listed = json(&["queues"]);
    let rows = listed["paused"].as_array().expect("paused list");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["queue"], "default");
    assert_eq!(rows[0]["paused_by"], "cli");
    idem_on(tmp, url, &["queues"])
        .expect(0)
        .says(&["paused queue", "cli"]);
    let resumed = json(&["queues", "resume", "default"]);
    assert_eq!(resumed["changed"], true, "{resumed}");
    idem_on(tmp, url, &["queues", "resume", "default"])
        .expect(0)
        .says(&["was not paused"]);
    assert_eq!(json(&["queues"])["paused"], serde_json::json!([]));
    let refused = idem_on(tmp, url, &["queues", "pause", "two words"]);
    assert_ne!(refused.code, Some(0));
    refused.warns(&["queue", "two words"]);
}

#[test]
fn sqlite_pause_and_resume_a_queue() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    steer_a_queue(tmp.path(), &url);
}

#[test]
fn postgres_pause_and_resume_a_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    steer_a_queue(tmp.path(), &pg.url);
}
