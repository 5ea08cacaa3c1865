//! The producer's trace context through the API, on both stores: a `traceparent` header on
//! `POST /v1/jobs` is kept with the job and handed to the worker that claims it (for its
//! span to link to); a header that is not one line of printable characters is ignored.

mod common;

use common::{SHOP, Server, claim, serve};
use idem_store_tests::TestDb;
use serde_json::json;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Enqueues a job of `kind` in queue `q` with `traceparent` as the header, if any.
async fn enqueue(s: &Server, kind: &str, traceparent: Option<&str>) -> serde_json::Value {
    let mut req = s
        .http
        .post(format!("{}/v1/jobs", s.base))
        .bearer_auth(SHOP)
        .json(&json!({"kind": kind, "queue": "q"}));
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let answer = req.send().await.unwrap();
    assert_eq!(answer.status(), 201);
    answer.json().await.unwrap()
}

/// The header's context reaches the claiming worker; a malformed one is dropped.
async fn a_traceparent_travels_from_producer_to_worker(db: &TestDb) {
    let s = serve(db).await;
    let traced = enqueue(&s, "traced", Some(TRACEPARENT)).await;
    assert_eq!(traced["job"]["trace_parent"], TRACEPARENT);
    enqueue(&s, "spaced", Some("00 4bf92f35 bad")).await;
    enqueue(&s, "plain", None).await;
    let jobs = claim(&s, SHOP, &["traced", "spaced", "plain"], "w").await;
    let of = |kind: &str| {
        let job = jobs.iter().find(|j| j["kind"] == kind).expect("claimed");
        job.get("trace_parent").cloned()
    };
    assert_eq!(of("traced"), Some(json!(TRACEPARENT)));
    assert_eq!(of("spaced"), None, "a malformed traceparent is ignored");
    assert_eq!(of("plain"), None);
}

idem_store_tests::store_cases!(a_traceparent_travels_from_producer_to_worker);
