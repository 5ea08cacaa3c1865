//! Attacks on the batch API (review of the fan-in change), through a real server on
//! loopback, on both stores: another principal's jobs reached through a batch, a
//! repeated creation, repeated keyed adds, and oversized results.

mod common;

use common::{MILL, OPS, SHOP, Server, claim, count, serve};
use idem_store_tests::TestDb;
use serde_json::{Value, json};

fn child(n: i64) -> Value {
    json!({"kind": "tally", "queue": "q", "args": {"shop": n}})
}

fn keyed_child(n: i64) -> Value {
    json!({"kind": "tally", "queue": "q", "args": {"shop": n}, "enqueue_key": format!("tally-{n}")})
}

fn successor() -> Value {
    json!({"kind": "report", "queue": "q", "args": {"month": "2026-11"}})
}

/// Creates a batch as `token` (201 asserted); the answer's JSON.
async fn create(s: &Server, token: &str, body: Value) -> Value {
    let a = s.post(token, "/v1/batches", None, &body).await;
    assert_eq!(a.status, 201, "{a:?}");
    a.json()
}

/// The ids of the jobs in a page (`jobs`) or an answer (`children[].job`).
fn ids_in(v: &Value) -> Vec<i64> {
    if let Some(jobs) = v["jobs"].as_array() {
        return jobs.iter().map(|j| j["id"].as_i64().unwrap()).collect();
    }
    v["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["job"]["id"].as_i64().unwrap())
        .collect()
}

async fn batches(s: &Server) -> i64 {
    count(s, "SELECT count(*) FROM idem_batch").await
}

/// DEFECT (both stores). Attack: an operator adds a child (the operator-only `http`
/// kind, with a secret in its headers) to a client's open batch, which an operator may
/// do (it sees every batch). Found: the child is the operator's job (principal `ops`,
/// made by `job_of` for the operator), which the client cannot read at
/// `GET /v1/jobs/{id}` (404), yet `GET /v1/batches/{id}/children` shows it to the client
/// whole, args and headers included: the listing checks the batch's principal only,
/// not each job's (`sees_job`).
async fn a_client_reads_no_job_of_another_principal_through_its_batch(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1)], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let secret = json!({
        "kind": "http", "queue": "q",
        "args": {"url": "https://ledger.internal/post", "headers": {"authorization": "Bearer ops-secret"}}
    });
    let path = format!("/v1/batches/{id}/children");
    let added = s
        .post(OPS, &path, None, &json!({"children": [secret]}))
        .await;
    assert_eq!(added.status, 200, "{added:?}");
    let ops_child = ids_in(&added.json())[0];
    assert_eq!(
        s.get(SHOP, &format!("/v1/jobs/{ops_child}")).await.status,
        404,
        "the operator's job is not the client's to read"
    );
    let page = s.get(SHOP, &path).await;
    assert_eq!(page.status, 200, "{page:?}");
    let shown = page.json();
    for job in shown["jobs"].as_array().unwrap() {
        let id = job["id"].as_i64().unwrap();
        let own = s.get(SHOP, &format!("/v1/jobs/{id}")).await.status;
        assert_eq!(
            own, 200,
            "the batch's children page shows the client job {id}, which it may not read: {job}"
        );
    }
}

/// FIXED (both stores; failed before the fix). Attack: a client repeats
/// `POST /v1/batches` (a retry after a timeout, without an Idempotency-Key) whose
/// children carry enqueue keys, as a repeated `POST /v1/jobs` with an `enqueue_key`
/// answers the first job. Found: the repeat created a second batch whose children all
/// came back `deduplicated` (the first batch's, counted in no shard of the second), so
/// the second batch was sealed with none, finished in the request and its successor was
/// claimable at once, while no child had run. Now: the repeat is refused (409, a child's
/// key is held by another batch's child) and writes nothing; no report runs early.
async fn a_repeated_create_with_keyed_children_runs_no_successor_early(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [keyed_child(1), keyed_child(2)]});
    let first = create(&s, SHOP, body.clone()).await;
    let again = s.post(SHOP, "/v1/batches", None, &body).await;
    assert_eq!(again.status, 409, "{again:?}");
    let listed = s.get(SHOP, "/v1/batches").await.json();
    assert_eq!(
        listed["batches"].as_array().map(Vec::len),
        Some(1),
        "nothing written by the repeat: {listed}; first {first}"
    );
    let reports = claim(&s, SHOP, &["report"], "w").await;
    assert!(
        reports.is_empty(),
        "a report is claimable before any tally ran: {reports:?}"
    );
}

/// HELD (both stores). Attack: `POST /v1/batches/{id}/children` repeated with the same
/// Idempotency-Key (and concurrently, twice at once): one set of children is added, the
/// repeat replays the first answer byte for byte, and the batch counts them once.
async fn a_keyed_add_repeated_adds_its_children_once(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let path = format!("/v1/batches/{id}/children");
    let add = json!({"children": [child(1), child(2)]});
    let (a, b) = tokio::join!(
        s.post(SHOP, &path, Some("add-1"), &add),
        s.post(SHOP, &path, Some("add-1"), &add)
    );
    let statuses = [a.status, b.status];
    assert!(
        statuses.contains(&200) && statuses.iter().all(|s| *s == 200 || *s == 409),
        "{a:?} {b:?}"
    );
    let first = if a.status == 200 { a } else { b };
    let again = s.post(SHOP, &path, Some("add-1"), &add).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    let shown = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(shown["total"], 2);
    assert_eq!(s.job_count().await, 2);
    let other = s.post(MILL, &path, Some("add-1"), &add).await;
    assert_eq!(other.status, 404, "another principal's key reaches nothing");
    assert_eq!((batches(&s).await, s.job_count().await), (1, 2));
}

/// HELD (both stores). Attack: a child completed through the worker protocol with a
/// result of more than 64 KiB of JSON (inside the 1 MiB body limit) is refused with 422
/// before anything is written: the child stays running under its claim, is not counted,
/// and the batch has no successor; completing it again with a small result finishes
/// the batch once.
async fn an_oversized_result_is_refused_and_writes_nothing(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1)]});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let job = claim(&s, SHOP, &["tally"], "w").await.remove(0);
    let job_id = job["id"].as_i64().unwrap();
    let big = json!({"pad": "x".repeat(idem::MAX_RESULT_BYTES)});
    let done = s
        .post(
            SHOP,
            &format!("/v1/jobs/{job_id}/complete"),
            None,
            &json!({"fence": job["fence"], "result": big}),
        )
        .await;
    assert_eq!(done.status, 422, "{done:?}");
    let shown = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (shown["state"].as_str(), shown["completed"].as_i64()),
        (Some("sealed"), Some(0))
    );
    let row = s.get(SHOP, &format!("/v1/jobs/{job_id}")).await.json();
    assert_eq!(row["state"], "running");
    let small = json!({"fence": job["fence"], "result": {"total": 3}});
    let ok = s
        .post(SHOP, &format!("/v1/jobs/{job_id}/complete"), None, &small)
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let shown = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (shown["state"].as_str(), shown["completed"].as_i64()),
        (Some("finished"), Some(1))
    );
    assert_eq!(claim(&s, SHOP, &["report"], "w").await.len(), 1);
}

idem_store_tests::store_cases!(
    a_client_reads_no_job_of_another_principal_through_its_batch,
    a_repeated_create_with_keyed_children_runs_no_successor_early,
    a_keyed_add_repeated_adds_its_children_once,
    an_oversized_result_is_refused_and_writes_nothing,
);
