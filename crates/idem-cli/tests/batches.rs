//! `idem batches` as a user runs it, on both stores: a batch created from a file of JSON
//! lines, listed and shown, refused when its children file is wrong (exit 2, naming the
//! line, nothing written) and when it is sealed (exit 1); an empty batch finishing at
//! once with one successor, which `idem jobs show` names.

mod common;

use std::path::Path;

use common::*;

/// Runs the whole story against `url`.
fn batches_on(tmp: &Path, url: &str) {
    let kids = tmp.join("kids.jsonl");
    std::fs::write(
        &kids,
        "{\"kind\": \"tally\", \"args\": {\"shop\": 1}}\n\n\
         {\"kind\": \"tally\", \"args\": {\"shop\": 2}, \"enqueue_key\": \"shop-2\"}\n",
    )
    .unwrap();
    let kids = kids.to_str().unwrap();
    let created = idem_on(
        tmp,
        url,
        &[
            "batches",
            "create",
            "--successor",
            "report",
            "--children",
            kids,
        ],
    );
    let created = created.expect(0).json();
    let id = created["batch"]["id"].as_i64().expect("a batch id");
    assert_eq!(created["batch"]["state"], "sealed", "{created}");
    assert_eq!(created["batch"]["total"], 2);
    assert_eq!(created["children"].as_array().map(Vec::len), Some(2));

    let list = idem_on(tmp, url, &["batches", "list", "--json"]);
    let list = list.expect(0).json();
    assert_eq!(list[0]["id"], id, "{list}");
    let shown = idem_on(tmp, url, &["batches", "show", &id.to_string()]);
    shown
        .expect(0)
        .says(&["total         2", "unfinished    2", "available 2"]);
    let page = idem_on(
        tmp,
        url,
        &["batches", "children", &id.to_string(), "--json"],
    );
    let page = page.expect(0).json();
    assert_eq!(page.as_array().map(Vec::len), Some(2), "{page}");
    assert_eq!(page[0]["batch_id"], id);

    let bad = tmp.join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"kind\": \"tally\"}\n{\"kind\": \"tally\", \"oops\": 1}\n",
    )
    .unwrap();
    let refused = idem_on(
        tmp,
        url,
        &[
            "batches",
            "create",
            "--successor",
            "x",
            "--children",
            bad.to_str().unwrap(),
        ],
    );
    refused.expect(2).warns(&["line 2", "unknown field `oops`"]);
    let sealed = idem_on(
        tmp,
        url,
        &["batches", "add", &id.to_string(), "--children", kids],
    );
    sealed.expect(1).warns(&["is sealed"]);
    let missing = idem_on(tmp, url, &["batches", "show", "999999"]);
    missing.expect(3);
    let all = idem_on(tmp, url, &["batches", "list", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        all.as_array().map(Vec::len),
        Some(1),
        "nothing else written: {all}"
    );

    let empty = idem_on(tmp, url, &["batches", "create", "--successor", "report"]);
    let empty = empty.expect(0).json();
    assert_eq!(empty["batch"]["state"], "finished", "{empty}");
    let successor = empty["batch"]["successor_job_id"]
        .as_i64()
        .expect("one successor");
    let show = idem_on(
        tmp,
        url,
        &["jobs", "show", &successor.to_string(), "--json"],
    );
    let job = show.expect(0).json();
    assert_eq!(job["job"]["follows_batch"], empty["batch"]["id"], "{job}");
    let key = format!("batch:{}:done", empty["batch"]["id"]);
    assert_eq!(job["job"]["enqueue_key"], key.as_str());
}

#[test]
fn batches_are_created_listed_shown_and_refused_on_sqlite() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    batches_on(tmp.path(), &url);
}

#[test]
fn batches_are_created_listed_shown_and_refused_on_postgres() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    batches_on(tmp.path(), &pg.url);
}
