//! Second attack on the put-back of a job awaiting an intent (commit 9e7bcfb), through
//! the HTTP API; the engine's cases are in `crates/idem/tests/attack_awaiting_2.rs`.

mod common;

use common::{SHOP, claim, serve};
use idem_store_tests::TestDb;
use serde_json::json;

/// Found by the attack (both stores), fixed. `BeginOutcome::Reconcile` tells an HTTP
/// worker "Fail the job
/// with `awaits_intent` set to this key", but `POST /v1/jobs/{id}/fail` accepts
/// `awaits_intent` only for an intent whose `job_id` is that job. A second job with the
/// same logical request (same key, same request) meets the first job's `unknown` intent
/// at its begin (`reconcile`) and is refused (422) when it follows that advice. The
/// engine lets a Rust handler await another job's intent (`awaiting_reconciliation` of
/// the row its begin met; `job/put_back.sql` takes every dead job awaiting the key), so
/// only an HTTP worker's job cannot: failed `retry` it spends its attempts meeting the
/// same unknown intent and ends an ordinary dead letter (attempts used up), failed
/// `permanent` it is an ordinary dead letter at once; either way no resolution of the
/// key puts it back, so it stays dead for good once the intent is settled.
///
/// Replay: jobs A and B claimed; A begins `pay:1` and marks it unknown; B begins the same
/// key with the same request (`reconcile`) and fails with `awaits_intent: "pay:1"`.
async fn a_job_meeting_another_jobs_unknown_intent_can_await_it(db: &TestDb) {
    let s = serve(db).await;
    for _ in 0..2 {
        let a = s
            .post(
                SHOP,
                "/v1/jobs",
                None,
                &json!({"kind": "charge", "queue": "q"}),
            )
            .await;
        assert_eq!(a.status, 201, "{a:?}");
    }
    let claimed = claim(&s, SHOP, &["charge"], "w").await;
    assert_eq!(claimed.len(), 2);
    let (a, b) = (&claimed[0], &claimed[1]);
    let (a_id, a_fence) = (a["id"].as_i64().unwrap(), a["fence"].as_i64().unwrap());
    let (b_id, b_fence) = (b["id"].as_i64().unwrap(), b["fence"].as_i64().unwrap());
    let request = json!({"amount": 5});
    let key = "pay:1";

    let begun = s
        .post(
            SHOP,
            &format!("/v1/intents/{key}/begin"),
            None,
            &json!({"job_id": a_id, "fence": a_fence, "request": request, "lease_ms": 60000}),
        )
        .await;
    assert_eq!(begun.json()["outcome"], "begun", "{begun:?}");
    let ifence = begun.json()["intent"]["fence"].as_i64().unwrap();
    let unknown = s
        .post(
            SHOP,
            &format!("/v1/intents/{key}/unknown"),
            None,
            &json!({"fence": ifence, "error": "the answer never came"}),
        )
        .await;
    assert_eq!(unknown.status, 200, "{unknown:?}");

    let met = s
        .post(
            SHOP,
            &format!("/v1/intents/{key}/begin"),
            None,
            &json!({"job_id": b_id, "fence": b_fence, "request": request, "lease_ms": 60000}),
        )
        .await;
    assert_eq!(met.json()["outcome"], "reconcile", "{met:?}");

    let failed = s
        .post(
            SHOP,
            &format!("/v1/jobs/{b_id}/fail"),
            None,
            &json!({"fence": b_fence, "error": "awaits reconciliation", "awaits_intent": key}),
        )
        .await;
    assert_eq!(
        failed.status,
        200,
        "the begin said `reconcile` (\"Fail the job with awaits_intent set to this key\"), \
         and the fail doing so was refused: {}",
        String::from_utf8_lossy(&failed.body)
    );
}

idem_store_tests::store_cases!(a_job_meeting_another_jobs_unknown_intent_can_await_it);
