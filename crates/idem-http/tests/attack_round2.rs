//! Adversarial review, round 2: attacks on the fixes of 51117e3 and on the transactional
//! enqueue of 5a7754c (`POST /v1/jobs` storing its Idempotency-Key answer in the
//! enqueue's own transaction), on both stores. The two that found defects (a client's
//! `awaits_intent` naming its own settled intent; a purge of a live reservation) failed
//! until they were fixed; the others are attacks that held, kept as regression tests.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use common::{MILL, OPS, SHOP, Server, claim, count, serve_router, serve_with, server_on_clock};
use idem::config::Retention;
use idem::{Clock, Idem, Job, ManualClock};
use idem_http::idempotency::IdempotencyConfig;
use idem_store::{IntentBegin, LeaseToken, PurgeTarget, SqlValue};
use idem_store_tests::TestDb;
use serde_json::{Value, json};

async fn enqueue(s: &Server, token: &str, body: Value) -> i64 {
    let a = s.post(token, "/v1/jobs", None, &body).await;
    assert!(a.status == 201 || a.status == 200, "{a:?}");
    a.json()["job"]["id"].as_i64().unwrap()
}

async fn begin_intent(s: &Server, key: &str, id: i64, fence: i64) -> i64 {
    let begun = s
        .post(
            SHOP,
            &format!("/v1/intents/{key}/begin"),
            None,
            &json!({"job_id": id, "fence": fence, "request": {"amount": 5}, "lease_ms": 60000}),
        )
        .await;
    assert_eq!(begun.json()["outcome"], "begun", "{begun:?}");
    begun.json()["intent"]["fence"].as_i64().unwrap()
}

// ---------------------------------------------------------------------------------------
// Defect 1: `awaits_intent` naming an intent of the job's own that is not unknown.
// ---------------------------------------------------------------------------------------

/// Defect. The fix of 51117e3 checks only that `awaits_intent` names an intent *of this
/// job*, not that its outcome is unknown. A client that began an intent (still
/// `in_progress`) or completed it, then fails its last attempt awaiting that intent,
/// gets the job written `dead` and at once put back by `settled_meanwhile` (the intent
/// is not `unknown`/`manual`, so "settled meanwhile") through `retry_jobs_forced`: a
/// fresh ladder past `max_attempts` and past the effect-key window check, the forced
/// retry that `?force=true` refuses to the same client with 403. Repeatable forever.
async fn awaits_intent_naming_its_own_settled_intent_is_a_forced_retry(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let forced = s
        .post(SHOP, "/v1/jobs/1/retry?force=true", None, &json!({}))
        .await;
    assert_eq!(forced.status, 403, "a forced retry is for operators");
    let mut outcomes = Vec::new();
    for settle in ["completed", "in_progress"] {
        let kind = format!("charge-{settle}");
        let id = enqueue(
            &s,
            SHOP,
            json!({"kind": kind, "queue": "q", "max_attempts": 1}),
        )
        .await;
        let fence = claim(&s, SHOP, &[kind.as_str()], "w").await[0]["fence"]
            .as_i64()
            .unwrap();
        let key = format!("pay:{id}");
        let ifence = begin_intent(&s, &key, id, fence).await;
        if settle == "completed" {
            let done = s
                .post(
                    SHOP,
                    &format!("/v1/intents/{key}/complete"),
                    None,
                    &json!({"fence": ifence, "result": {"ok": true}}),
                )
                .await;
            assert_eq!(done.status, 200, "{done:?}");
        }
        let failed = s
            .post(
                SHOP,
                &format!("/v1/jobs/{id}/fail"),
                None,
                &json!({"fence": fence, "error": "boom", "awaits_intent": key}),
            )
            .await;
        let job = s.get(SHOP, &format!("/v1/jobs/{id}")).await.json();
        // A second claim shows the attempt past max_attempts.
        let again = claim(&s, SHOP, &[kind.as_str()], "w").await;
        outcomes.push(format!(
            "intent {settle}: fail answered {}, job then {} (max_attempts 1), claimed again: {}",
            failed.status,
            job["state"],
            again
                .first()
                .map(|j| format!("attempt {}", j["attempt"]))
                .unwrap_or_else(|| "no".into())
        ));
        let refused_or_dead = failed.status == 422 || job["state"] == "dead";
        if !refused_or_dead {
            continue;
        }
        assert!(again.is_empty(), "{outcomes:?}");
    }
    let all_held = outcomes.iter().all(|o| o.contains("claimed again: no"));
    assert!(
        all_held,
        "a client's last attempt, failed awaiting an intent of its own that was not \
         unknown, was put back to run with a fresh ladder (an operator's forced retry): \
         {outcomes:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// Defect 2: the purge's http-key window is not tied to the layer's lease.
// ---------------------------------------------------------------------------------------

/// Defect. `IdempotencyConfig::check` refuses a layer retention no longer than its lease,
/// but the purge (the purger of every worker, `idem purge`, `POST /v1/purge`) deletes
/// `idem_http_key` rows by `Idem::retention().http_keys`, a separate setting that
/// `Retention::validate` does not check at all (1 s, even 0 s, is accepted) and that
/// `Api::router` never compares with the layer's lease; `purge/http_keys.sql` deletes
/// "whatever their state", an `in_progress` row whose lock is live included. A request
/// still in flight loses its reservation and the repeat runs the handler beside it.
async fn a_purge_deletes_a_live_reservation_and_the_repeat_runs_beside_it(db: &TestDb) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let accepted = Retention {
        http_keys: Duration::from_secs(1),
        ..Retention::default()
    };
    let idem = Idem::from_store(db.store.clone())
        .with_clock(Arc::new(clock.clone()))
        .with_retention(accepted)
        .expect("a 1 s http-key window is accepted by Retention::validate");
    let keys = IdempotencyConfig {
        clock: Arc::new(clock.clone()),
        ..IdempotencyConfig::default()
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(tokio::sync::Notify::new());
    let go = Arc::new(tokio::sync::Notify::new());
    let route = {
        let (runs, entered, go) = (runs.clone(), entered.clone(), go.clone());
        axum::routing::post(move || {
            let (runs, entered, go) = (runs.clone(), entered.clone(), go.clone());
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    entered.notify_one();
                    go.notified().await;
                }
                (StatusCode::CREATED, "charged")
            }
        })
    };
    let s = Arc::new(serve_router(idem.clone(), common::app(&idem, keys, route)).await);
    let first = {
        let s = s.clone();
        tokio::spawn(async move { s.post(SHOP, "/thing", Some("k"), &json!({"n": 1})).await })
    };
    idem_store_tests::harness::within(30, "the first request's handler", entered.notified()).await;
    // 2 s into a 60 s lease: the reservation is live.
    clock.advance(Duration::from_secs(2));
    let purged = idem
        .purge(PurgeTarget::HttpKeys, 100, |_| {})
        .await
        .unwrap();
    let repeat = s.post(SHOP, "/thing", Some("k"), &json!({"n": 1})).await;
    go.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    assert_eq!(
        (runs.load(Ordering::SeqCst), repeat.status),
        (1, 409),
        "the purge deleted {purged} live reservation(s) and the repeat ran the handler \
         beside the first request still in flight: {repeat:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Attacks that held (regression tests).
// ---------------------------------------------------------------------------------------

/// A layer clock with nanoseconds (PostgreSQL keeps microseconds, SQLite milliseconds):
/// the reservation's `created_at` the layer carries is the stored one (RETURNING), so a
/// legitimate holder's completion (the transactional enqueue's and the layer's own) is
/// never mistaken for a lost one, and repeats replay.
async fn a_clock_with_nanoseconds_never_loses_a_completion(db: &TestDb) {
    let start = db.store.now().await.unwrap() + chrono::Duration::nanoseconds(123_456_789);
    let clock = ManualClock::new(start);
    assert_ne!(clock.get().timestamp_subsec_nanos() % 1000, 0);
    let idem = Idem::from_store(db.store.clone()).with_clock(Arc::new(clock.clone()));
    let keys = IdempotencyConfig {
        clock: Arc::new(clock.clone()),
        ..IdempotencyConfig::default()
    };
    let s = serve_with(db, idem, keys).await;
    let body = json!({"kind": "charge", "queue": "q"});
    let first = s.post(SHOP, "/v1/jobs", Some("enq-1"), &body).await;
    let repeat = s.post(SHOP, "/v1/jobs", Some("enq-1"), &body).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(
        (repeat.status, repeat.header("idempotent-replayed")),
        (201, Some("true")),
        "{repeat:?}"
    );
    assert_eq!(first.body, repeat.body);
    let claim_body = json!({"queue": "q", "kinds": ["charge"], "limit": 5, "worker": "w"});
    let c1 = s
        .post(SHOP, "/v1/claims", Some("claim-1"), &claim_body)
        .await;
    let c2 = s
        .post(SHOP, "/v1/claims", Some("claim-1"), &claim_body)
        .await;
    assert_eq!(
        (c1.status, c2.header("idempotent-replayed")),
        (200, Some("true"))
    );
    assert_eq!(c1.body, c2.body);
    assert_eq!(s.job_count().await, 1);
    let completed = count(
        &s,
        "SELECT count(*) FROM idem_http_key WHERE state = 'completed'",
    )
    .await;
    assert_eq!(completed, 2, "every completion was stored");
}

/// The transactional enqueue whose reservation was taken over while it waited (here on
/// an enqueue key another transaction holds, past the reservation's lease): the late
/// holder's `http_key_complete` finds the new fence, its transaction rolls back, and
/// only one job exists, whose answer is the one stored; a third repeat replays it.
/// PostgreSQL only (SQLite's single writer serialises the three).
async fn a_taken_over_keyed_enqueue_rolls_back_its_job(db: &TestDb) {
    let (s, clock) = server_on_clock(db).await;
    let s = Arc::new(s);
    let mut blocker = s.idem.begin().await.unwrap();
    s.idem
        .enqueue_tx(
            &mut blocker,
            Job::new("charge", json!({}))
                .queue("q")
                .enqueue_key("p:shop:dup"),
        )
        .await
        .unwrap();
    let pid = blocker
        .store_tx()
        .query("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .remove(0)
        .remove(0);
    let body = json!({"kind": "charge", "queue": "q", "enqueue_key": "dup", "args": {"n": 1}});
    let send = |s: Arc<Server>, body: Value| {
        tokio::spawn(async move { s.post(SHOP, "/v1/jobs", Some("idem-1"), &body).await })
    };
    let a = send(s.clone(), body.clone());
    blocked_by(&s, &pid, 1).await;
    clock.advance(Duration::from_secs(61));
    let b = send(s.clone(), body.clone());
    blocked_by(&s, &pid, 2).await;
    blocker.rollback().await.unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [201, 409], "a: {a:?}\nb: {b:?}");
    assert_eq!(s.job_count().await, 1, "a: {a:?}\nb: {b:?}");
    let third = s.post(SHOP, "/v1/jobs", Some("idem-1"), &body).await;
    let won = if a.status == 201 { &a } else { &b };
    assert_eq!(third.header("idempotent-replayed"), Some("true"));
    assert_eq!(third.body, won.body);
    let fence = count(&s, "SELECT fence FROM idem_http_key").await;
    assert_eq!(fence, 2);
}

async fn blocked_by(s: &Server, pid: &SqlValue, n: i64) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))";
    let wait = async {
        loop {
            let rows = s
                .idem
                .store()
                .query(sql, std::slice::from_ref(pid))
                .await
                .unwrap();
            if rows[0][0].as_i64().is_some_and(|c| c >= n) {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    idem_store_tests::harness::within(30, "waiting for the enqueues to block", wait).await;
}

/// The transactional enqueue refused before it acts (the built-in `http` kind for a
/// client, an invalid job) stores nothing and frees the key; every operator-only action
/// is 403 for a client, also under an Idempotency-Key, and stores nothing.
async fn client_refusals_and_operator_actions_store_nothing(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let http = json!({"kind": "http", "args": {"url": "http://169.254.169.254/"}});
    let r = s.post(SHOP, "/v1/jobs", Some("h"), &http).await;
    assert_eq!((r.status, r.problem()), (403, "operator_only".into()));
    let bad = json!({"kind": "", "queue": "q"});
    let r = s.post(SHOP, "/v1/jobs", Some("h"), &bad).await;
    assert_eq!(r.status, 422, "{r:?}");
    for (path, body) in [
        ("/v1/purge", json!({})),
        ("/v1/reconcile", json!({})),
        ("/v1/ledger/repair", json!({"apply": true})),
        ("/v1/intents/x/resolve", json!({"resolution": "absent"})),
        ("/v1/jobs/1/retry?force=true", json!({})),
    ] {
        let r = s.post(SHOP, path, Some(&format!("op{path}")), &body).await;
        assert_eq!(r.status, 403, "{path}: {r:?}");
    }
    for path in ["/v1/ledger/verify", "/v1/queues"] {
        assert_eq!(s.get(SHOP, path).await.status, 403, "{path}");
    }
    assert_eq!(s.job_count().await, 0);
    let held = count(
        &s,
        "SELECT count(*) FROM idem_http_key WHERE state <> 'released'",
    )
    .await;
    assert_eq!(held, 0, "a refusal left a key held or an answer stored");
    // The key, freed, serves a corrected request.
    let ok = s
        .post(
            SHOP,
            "/v1/jobs",
            Some("h"),
            &json!({"kind": "k", "queue": "q"}),
        )
        .await;
    assert_eq!(ok.status, 201, "{ok:?}");
    let ops = s.post(OPS, "/v1/jobs", Some("h"), &http).await;
    assert_eq!(ops.status, 201, "the operator's key is its own: {ops:?}");
}

/// The read path of intents (`also_of_its_jobs`), the opaque `after` cursor,
/// `awaits_intent`, discard and attempts: another principal reaches none of shop's
/// records, whatever key or cursor it sends.
async fn another_principal_reaches_none_of_shops_intents_or_jobs(db: &TestDb) {
    let (s, clock) = server_on_clock(db).await;
    let id = enqueue(
        &s,
        SHOP,
        json!({"kind": "charge", "queue": "q", "max_attempts": 1}),
    )
    .await;
    let fence = claim(&s, SHOP, &["charge"], "w").await[0]["fence"]
        .as_i64()
        .unwrap();
    let raw = format!("charge:job:{id}");
    s.idem
        .store()
        .intent_begin(IntentBegin {
            key: raw.clone(),
            fingerprint: "f".into(),
            unkeyed: false,
            lease_ms: 60_000,
            job: LeaseToken { job_id: id, fence },
            now: clock.now(),
        })
        .await
        .unwrap();
    begin_intent(&s, "own", id, fence).await;
    assert_eq!(s.get(SHOP, &format!("/v1/intents/{raw}")).await.status, 200);
    for path in [
        format!("/v1/intents/{raw}"),
        "/v1/intents/own".into(),
        "/v1/intents/p:shop:own".into(),
        format!("/v1/jobs/{id}/attempts"),
    ] {
        let r = s.get(MILL, &path).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
    }
    for after in ["", "a", "charge", "p:shop:", "p:mill:~"] {
        let page = s
            .get(
                MILL,
                &format!("/v1/intents?state=in_progress&after={after}"),
            )
            .await;
        assert_eq!(page.status, 200, "{page:?}");
        assert!(
            page.json()["intents"].as_array().unwrap().is_empty(),
            "{page:?}"
        );
    }
    // Mill's own job cannot await shop's intents, by either name.
    let mid = enqueue(
        &s,
        MILL,
        json!({"kind": "charge", "queue": "q", "max_attempts": 1}),
    )
    .await;
    let mfence = claim(&s, MILL, &["charge"], "m").await[0]["fence"]
        .as_i64()
        .unwrap();
    for key in [raw.as_str(), "own", "p:shop:own"] {
        let r = s
            .post(
                MILL,
                &format!("/v1/jobs/{mid}/fail"),
                None,
                &json!({"fence": mfence, "error": "x", "awaits_intent": key}),
            )
            .await;
        assert_eq!(r.status, 422, "{key}: {r:?}");
    }
    // Shop's job, dead, cannot be discarded by mill.
    let dead = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/fail"),
            None,
            &json!({"fence": fence, "error": "x", "outcome": "permanent"}),
        )
        .await;
    assert_eq!(dead.json()["state"], "dead", "{dead:?}");
    let r = s
        .post(MILL, &format!("/v1/jobs/{id}/discard"), None, &json!({}))
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(s.idem.job(id).await.unwrap().is_some());
}

idem_store_tests::store_cases!(
    awaits_intent_naming_its_own_settled_intent_is_a_forced_retry,
    a_purge_deletes_a_live_reservation_and_the_repeat_runs_beside_it,
    a_clock_with_nanoseconds_never_loses_a_completion,
    client_refusals_and_operator_actions_store_nothing,
    another_principal_reaches_none_of_shops_intents_or_jobs,
);

idem_store_tests::postgres_cases!(a_taken_over_keyed_enqueue_rolls_back_its_job);
