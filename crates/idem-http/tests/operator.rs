//! The operator endpoints that mirror the CLI, through a real server on both stores.

mod common;

use common::{MILL, OPS, SHOP, serve};
use idem_store_tests::TestDb;
use serde_json::json;

async fn dead_job(s: &common::Server, token: &str) -> i64 {
    let a = s
        .post(
            token,
            "/v1/jobs",
            None,
            &json!({"kind": "mail", "queue": "q", "max_attempts": 1}),
        )
        .await;
    let id = a.json()["job"]["id"].as_i64().unwrap();
    let claimed = s
        .post(
            token,
            "/v1/claims",
            None,
            &json!({"queue": "q", "kinds": ["mail"], "worker": "w"}),
        )
        .await;
    assert_eq!(claimed.json()["jobs"][0]["id"].as_i64(), Some(id));
    let failed = s
        .post(
            token,
            &format!("/v1/jobs/{id}/fail"),
            None,
            &json!({"fence": 1, "error": "no", "outcome": "permanent"}),
        )
        .await;
    assert_eq!(failed.json()["state"], "dead", "{failed:?}");
    id
}

/// Attempts and discard act on a principal's own jobs; another's are 404.
async fn attempts_and_discard_follow_the_principal(db: &TestDb) {
    let s = serve(db).await;
    let id = dead_job(&s, SHOP).await;
    let attempts = s.get(SHOP, &format!("/v1/jobs/{id}/attempts")).await;
    assert_eq!(attempts.status, 200);
    let a = &attempts.json()["attempts"][0];
    assert_eq!(
        (a["fence"].as_i64(), a["outcome"].as_str()),
        (Some(1), Some("dead"))
    );
    assert_eq!(
        s.get(MILL, &format!("/v1/jobs/{id}/attempts")).await.status,
        404
    );
    let theirs = s
        .post(MILL, &format!("/v1/jobs/{id}/discard"), None, &json!({}))
        .await;
    assert_eq!(theirs.status, 404);
    let mine = s
        .post(SHOP, &format!("/v1/jobs/{id}/discard"), None, &json!({}))
        .await;
    assert_eq!(mine.status, 200, "{mine:?}");
    assert!(s.idem.job(id).await.unwrap().is_none());
    let live = s
        .post(SHOP, "/v1/jobs", None, &json!({"kind": "mail"}))
        .await;
    let live = live.json()["job"]["id"].as_i64().unwrap();
    let refused = s
        .post(SHOP, &format!("/v1/jobs/{live}/discard"), None, &json!({}))
        .await;
    assert_eq!(
        (refused.status, refused.problem()),
        (409, "not_dead".to_string())
    );
}

/// Purge, the ledger and reconciliation are for operators.
async fn purge_ledger_and_reconcile_are_for_operators(db: &TestDb) {
    let s = serve(db).await;
    for (path, body) in [
        ("/v1/purge", json!({"dry_run": true})),
        ("/v1/ledger/repair", json!({})),
        ("/v1/reconcile", json!({})),
    ] {
        let a = s.post(SHOP, path, None, &body).await;
        assert_eq!(
            (a.status, a.problem()),
            (403, "operator_only".to_string()),
            "{path}"
        );
    }
    assert_eq!(s.get(SHOP, "/v1/ledger/verify").await.status, 403);
    let purge = s
        .post(OPS, "/v1/purge", None, &json!({"dry_run": true}))
        .await;
    assert_eq!(purge.status, 200, "{purge:?}");
    assert_eq!(
        purge.json()["targets"].as_array().unwrap().len(),
        idem_store::PurgeTarget::ALL.len()
    );
    let verify = s.get(OPS, "/v1/ledger/verify").await;
    assert_eq!(verify.json()["mismatches"], json!([]));
    let reconcile = s.post(OPS, "/v1/reconcile", None, &json!({})).await;
    assert_eq!(
        reconcile.status, 503,
        "this test server has no kinds to reconcile"
    );
}

/// An operator pauses and resumes a queue; claims through the API stop meanwhile while
/// enqueues go on; a client principal may do neither; a bad name is 422.
async fn an_operator_pauses_and_resumes_a_queue(db: &TestDb) {
    let s = serve(db).await;
    let refused = s.post(SHOP, "/v1/queues/q/pause", None, &json!({})).await;
    assert_eq!(
        (refused.status, refused.problem()),
        (403, "operator_only".into())
    );
    let paused = s.post(OPS, "/v1/queues/q/pause", None, &json!({})).await;
    assert_eq!(paused.status, 200, "{paused:?}");
    assert_eq!(
        paused.json(),
        json!({"queue": "q", "state": "paused", "changed": true})
    );
    let again = s.post(OPS, "/v1/queues/q/pause", None, &json!({})).await;
    assert_eq!(again.json()["changed"], false);
    let listed = s.get(OPS, "/v1/queues").await.json();
    assert_eq!(listed["paused"][0]["queue"], "q", "{listed}");
    assert_eq!(listed["paused"][0]["paused_by"], "ops", "{listed}");

    let job = s
        .post(
            SHOP,
            "/v1/jobs",
            None,
            &json!({"kind": "mail", "queue": "q"}),
        )
        .await;
    assert_eq!(job.status, 201, "enqueues go on: {job:?}");
    let claim = json!({"queue": "q", "kinds": ["mail"], "worker": "w"});
    let none = s.post(SHOP, "/v1/claims", None, &claim).await;
    assert_eq!(none.json()["jobs"], json!([]), "{none:?}");

    let refused = s.post(SHOP, "/v1/queues/q/resume", None, &json!({})).await;
    assert_eq!(refused.status, 403);
    let resumed = s.post(OPS, "/v1/queues/q/resume", None, &json!({})).await;
    assert_eq!(resumed.json()["changed"], true, "{resumed:?}");
    let some = s.post(SHOP, "/v1/claims", None, &claim).await;
    assert_eq!(some.json()["jobs"][0]["id"], job.json()["job"]["id"]);
    let bad = s
        .post(OPS, "/v1/queues/a%20b/pause", None, &json!({}))
        .await;
    assert_eq!(bad.status, 422, "{bad:?}");
}

idem_store_tests::store_cases!(
    attempts_and_discard_follow_the_principal,
    purge_ledger_and_reconcile_are_for_operators,
    an_operator_pauses_and_resumes_a_queue,
);
