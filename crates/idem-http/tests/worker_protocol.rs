//! The worker protocol through a real server on loopback, on both stores: claims by
//! kind and principal, and every write of a claim fenced.

mod common;

use std::time::Duration;

use common::{MILL, OPS, SHOP, Server, claim, server_on_clock};
use idem::ManualClock;
use idem_store_tests::TestDb;
use serde_json::json;

async fn enqueue(s: &Server, token: &str, kind: &str) -> i64 {
    let a = s
        .post(
            token,
            "/v1/jobs",
            None,
            &json!({"kind": kind, "queue": "q"}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    a.json()["job"]["id"].as_i64().unwrap()
}

/// A claim by worker A whose lease expired and was taken by worker B (fence 2).
async fn reclaimed(s: &Server, clock: &ManualClock) -> (i64, i64) {
    let id = enqueue(s, SHOP, "mail").await;
    let first = claim(s, SHOP, &["mail"], "a").await;
    assert_eq!(first[0]["fence"], 1);
    clock.advance(Duration::from_secs(31));
    s.idem.rescue().await.unwrap();
    clock.advance(Duration::from_secs(60));
    let second = claim(s, SHOP, &["mail"], "b").await;
    assert_eq!(
        (second[0]["id"].as_i64(), second[0]["fence"].as_i64()),
        (Some(id), Some(2))
    );
    (id, 1)
}

/// A stale fence on heartbeat, complete or fail is 409 `lease_lost`, and the job is left
/// as the live claim holds it.
async fn a_stale_fence_is_lease_lost_and_changes_nothing(db: &TestDb) {
    let (s, clock) = server_on_clock(db).await;
    let (id, stale) = reclaimed(&s, &clock).await;
    let before = s.idem.job(id).await.unwrap().unwrap();
    for (path, body) in [
        ("heartbeat", json!({"fence": stale})),
        ("complete", json!({"fence": stale})),
        ("fail", json!({"fence": stale, "error": "boom"})),
        (
            "fail",
            json!({"fence": stale, "error": "boom", "outcome": "permanent"}),
        ),
        ("complete", json!({"fence": 99})),
    ] {
        let a = s
            .post(SHOP, &format!("/v1/jobs/{id}/{path}"), None, &body)
            .await;
        assert_eq!(a.status, 409, "{path}: {a:?}");
        assert_eq!(a.problem(), "lease_lost");
        assert_eq!(
            s.idem.job(id).await.unwrap().unwrap(),
            before,
            "{path} changed the job"
        );
    }
    let done = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/complete"),
            None,
            &json!({"fence": 2}),
        )
        .await;
    assert_eq!(
        (done.status, done.json()["state"].as_str()),
        (200, Some("completed"))
    );
}

/// The live claim heartbeats and fails along the ladder.
async fn the_live_claim_heartbeats_and_fails_along_the_ladder(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let id = enqueue(&s, SHOP, "mail").await;
    let jobs = claim(&s, SHOP, &["mail"], "a").await;
    let fence = jobs[0]["fence"].as_i64().unwrap();
    let beat = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/heartbeat"),
            None,
            &json!({"fence": fence, "lease_ms": 5000}),
        )
        .await;
    assert_eq!(beat.status, 200, "{beat:?}");
    let too_long = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/heartbeat"),
            None,
            &json!({"fence": fence, "lease_ms": 3_600_000}),
        )
        .await;
    assert_eq!(too_long.status, 422);
    let failed = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/fail"),
            None,
            &json!({"fence": fence, "error": "smtp down"}),
        )
        .await;
    assert_eq!(failed.status, 200, "{failed:?}");
    assert_eq!(failed.json()["state"], "retryable");
    assert_eq!(failed.json()["last_error"], "smtp down");
}

/// Claims take only the kinds asked for, and a client principal's own jobs only; an
/// operator's claim takes any principal's.
async fn claims_follow_kinds_and_principals(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let shop_mail = enqueue(&s, SHOP, "mail").await;
    let shop_sms = enqueue(&s, SHOP, "sms").await;
    let mill_mail = enqueue(&s, MILL, "mail").await;
    let got = claim(&s, SHOP, &["mail"], "w").await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"].as_i64(), Some(shop_mail));
    let ops = claim(&s, OPS, &["mail", "sms"], "w").await;
    let mut ids: Vec<i64> = ops.iter().map(|j| j["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, vec![shop_sms, mill_mail]);
    let empty = s
        .post(
            SHOP,
            "/v1/claims",
            None,
            &json!({"queue": "q", "kinds": [], "worker": "w"}),
        )
        .await;
    assert_eq!(empty.status, 422, "{empty:?}");
}

/// A client principal sees and acts on its own jobs only; the others' are 404, as if
/// they did not exist.
async fn a_principal_sees_its_own_jobs_only(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let mine = enqueue(&s, SHOP, "mail").await;
    let theirs = enqueue(&s, MILL, "mail").await;
    assert_eq!(s.get(SHOP, &format!("/v1/jobs/{mine}")).await.status, 200);
    let hidden = s.get(SHOP, &format!("/v1/jobs/{theirs}")).await;
    assert_eq!(
        (hidden.status, hidden.problem()),
        (404, "not_found".to_string())
    );
    for action in ["cancel", "retry", "heartbeat", "complete"] {
        let a = s
            .post(
                SHOP,
                &format!("/v1/jobs/{theirs}/{action}"),
                None,
                &json!({"fence": 1}),
            )
            .await;
        assert_eq!(a.status, 404, "{action}: {a:?}");
    }
    let listed = s.get(SHOP, "/v1/jobs").await.json();
    let ids: Vec<i64> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![mine]);
    let all = s.get(OPS, "/v1/jobs").await.json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(s.get(SHOP, "/v1/queues").await.status, 403);
    assert_eq!(s.get(OPS, "/v1/queues").await.status, 200);
    assert_eq!(
        s.idem.job(theirs).await.unwrap().unwrap().state,
        idem::JobState::Available
    );
}

/// Enqueue keys of two principals never meet: the same key gives each its own job.
async fn enqueue_keys_are_per_principal(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let body = json!({"kind": "mail", "enqueue_key": "order-1"});
    let a = s.post(SHOP, "/v1/jobs", None, &body).await;
    let again = s.post(SHOP, "/v1/jobs", None, &body).await;
    let b = s.post(MILL, "/v1/jobs", None, &body).await;
    assert_eq!((a.status, again.status, b.status), (201, 200, 201));
    assert_eq!(again.json()["deduplicated"], true);
    assert_eq!(again.json()["job"]["id"], a.json()["job"]["id"]);
    assert_ne!(b.json()["job"]["id"], a.json()["job"]["id"]);
    assert_eq!(a.json()["job"]["enqueue_key"], "order-1");
}

idem_store_tests::store_cases!(
    a_stale_fence_is_lease_lost_and_changes_nothing,
    the_live_claim_heartbeats_and_fails_along_the_ladder,
    claims_follow_kinds_and_principals,
    a_principal_sees_its_own_jobs_only,
    enqueue_keys_are_per_principal,
);
