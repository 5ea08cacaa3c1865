//! Adversarial review of the HTTP API (`idem serve`), on both stores. Each test is an
//! attack: those marked "found by the review" failed until their defect was fixed; the
//! others are attacks that held, kept as regression tests.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use common::{
    MILL, OPS, SHOP, Server, app, claim, count, counted_route, serve_router, server_on_clock,
};
use idem::{Clock, Idem};
use idem_http::idempotency::{IdempotencyConfig, IdempotencyLayer};
use idem_store::{
    HttpKeyComplete, HttpKeyReserve, HttpKeyReserved, IntentBegin, LeaseToken, Purge, PurgeTarget,
};
use idem_store_tests::TestDb;
use serde_json::{Value, json};

async fn enqueue(s: &Server, token: &str, body: Value) -> i64 {
    let a = s.post(token, "/v1/jobs", None, &body).await;
    assert!(a.status == 201 || a.status == 200, "{a:?}");
    a.json()["job"]["id"].as_i64().unwrap()
}

// ---------------------------------------------------------------------------------------
// Found by the review, fixed: 1: an answer too large to store releases the key although the handler acted.
// ---------------------------------------------------------------------------------------

/// Found by the review (fixed). A claim whose answer is over `max_stored_body` (4 MiB by default; five jobs
/// whose args are 900 kB each, every enqueue under the 1 MiB body limit) has claimed its
/// jobs, but the layer answers 500 `response_not_stored` (the fences are lost to the
/// worker) and *releases* the key: the repeat with the same Idempotency-Key runs the
/// claim again and claims five more jobs.
async fn an_answer_too_large_to_store_lets_the_claim_run_twice(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let big = "x".repeat(900_000);
    for _ in 0..10 {
        enqueue(
            &s,
            SHOP,
            json!({"kind": "big", "queue": "q", "args": {"blob": big}}),
        )
        .await;
    }
    let body = json!({"queue": "q", "kinds": ["big"], "limit": 5, "worker": "w"});
    let first = s.post(SHOP, "/v1/claims", Some("claim-1"), &body).await;
    let second = s.post(SHOP, "/v1/claims", Some("claim-1"), &body).await;
    let running = count(&s, "SELECT count(*) FROM idem_job WHERE state = 'running'").await;
    assert_eq!(
        running,
        5,
        "one Idempotency-Key ran the claim handler {} times (first answer {} {}, repeat {} {})",
        running / 5,
        first.status,
        first.header("idempotent-replayed").unwrap_or("-"),
        second.status,
        second.header("idempotent-replayed").unwrap_or("-"),
    );
}

/// Found by the review (fixed; same root cause, the layer on its own). Any handler whose answer is larger
/// than `max_stored_body` runs again on every repeat of its key.
async fn an_answer_too_large_to_store_runs_the_handler_again(db: &TestDb) {
    let idem = Idem::from_store(db.store.clone());
    let (route, runs) = counted_route(|_| (StatusCode::CREATED, "y".repeat(64)));
    let keys = IdempotencyConfig {
        max_stored_body: 16,
        ..IdempotencyConfig::default()
    };
    let s = serve_router(idem.clone(), app(&idem, keys, route)).await;
    let first = s.post_raw("", "/thing", Some("k"), b"{}").await;
    let second = s.post_raw("", "/thing", Some("k"), b"{}").await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler acted and its key was released: first {} second {}",
        first.status,
        second.status
    );
}

// ---------------------------------------------------------------------------------------
// Found by the review, fixed: 2: a retention shorter than the lease (accepted everywhere) lets a repeat take
// over, or a purge delete, a live reservation; after a purge the fence restarts at 1.
// ---------------------------------------------------------------------------------------

/// Found by the review: a retention no longer than the lease was accepted, and
/// reserve.sql took over "a row created at or before now - retention, whatever it holds",
/// including an `in_progress` row whose lock was live, so a repeat ran beside the first.
/// Now the layer refuses such settings, and the store never takes over a live lock.
async fn a_short_retention_lets_a_repeat_run_beside_the_first(db: &TestDb) {
    let short = IdempotencyConfig {
        lease: Duration::from_secs(60),
        retention: Duration::from_secs(10),
        ..IdempotencyConfig::default()
    };
    let refused = IdempotencyLayer::new(db.store.clone(), short).err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|e| e.to_string().contains("retention")),
        "{refused:?}"
    );
    let now = db.store.now().await.unwrap();
    let reserve = |at: chrono::DateTime<chrono::Utc>| HttpKeyReserve {
        principal: "shop".into(),
        key: "k".into(),
        fingerprint: "f".into(),
        lease_ms: 60_000,
        retention_ms: 10_000,
        now: Some(at),
    };
    let first = db.store.http_key_reserve(reserve(now)).await.unwrap();
    assert!(matches!(first, HttpKeyReserved::Reserved(_)));
    let later = now + chrono::Duration::seconds(11);
    let repeat = db.store.http_key_reserve(reserve(later)).await.unwrap();
    assert!(
        matches!(repeat, HttpKeyReserved::Held { .. }),
        "a repeat past the retention took over a reservation whose lock is live: {repeat:?}"
    );
}

/// Found by the review (fixed). A purge deletes an `in_progress` reservation
/// (purge/http_keys.sql: "whatever their state"), and the next reservation starts again
/// at fence 1: the earlier holder's completion, carrying fence 1, was stored over the new
/// holder's reservation. Completions and releases now also carry the reservation's
/// `created_at`, and the layer refuses a retention no longer than its lease.
async fn a_purged_reservation_restarts_the_fence_and_the_old_holder_answers_the_new(db: &TestDb) {
    let store = &db.store;
    let now = store.now().await.unwrap();
    let reserve = |fingerprint: &str, now| HttpKeyReserve {
        principal: "shop".into(),
        key: "k".into(),
        fingerprint: fingerprint.into(),
        lease_ms: 60_000,
        retention_ms: 24 * 3600 * 1000,
        now: Some(now),
    };
    let HttpKeyReserved::Reserved(a) = store.http_key_reserve(reserve("fa", now)).await.unwrap()
    else {
        panic!("first reservation")
    };
    // The purger's cutoff is now - retention.http_keys; a short window (or a request in
    // flight longer than it) puts a live reservation before it.
    let later = now + chrono::Duration::seconds(20);
    store
        .purge(Purge {
            target: PurgeTarget::HttpKeys,
            before: later,
            limit: 100,
        })
        .await
        .unwrap();
    let b = match store.http_key_reserve(reserve("fb", later)).await.unwrap() {
        HttpKeyReserved::Reserved(b) => b,
        HttpKeyReserved::Held { row, .. } => {
            // The purge kept the live reservation: the attack held.
            assert_eq!(row.fence, a.fence);
            return;
        }
    };
    let stored_by_a = store
        .http_key_complete(HttpKeyComplete {
            principal: "shop".into(),
            key: "k".into(),
            fence: a.fence,
            created_at: a.created_at,
            status: 201,
            headers: json!([]),
            body: b"answer of request A".to_vec(),
        })
        .await
        .unwrap();
    // The fence restarts with the row; the reservation's created_at tells A's from B's.
    assert!(
        !stored_by_a,
        "after a purge, A's late completion (fence {}) was stored as the answer of request \
         B (fence {}, another fingerprint)",
        a.fence, b.fence
    );
}

// ---------------------------------------------------------------------------------------
// Found by the review, fixed: 3: intent paging loses intents whose key is outside the principal's namespace.
// ---------------------------------------------------------------------------------------

/// Found by the review (fixed). A client's listing holds every intent of its jobs, also
/// those whose key is not in its `p:{name}:` namespace (one a worker in Rust began for
/// the job under a key of its own). `next` was such a key as stored, and `after`
/// namespaced it again (`p:shop:charge:job:1`), so the next page started past the
/// client's own keys. `next` is now an opaque cursor, used as given.
async fn intent_paging_skips_intents_outside_the_namespace(db: &TestDb) {
    let (s, clock) = server_on_clock(db).await;
    let id = enqueue(&s, SHOP, json!({"kind": "charge", "queue": "q"})).await;
    let claimed = claim(&s, SHOP, &["charge"], "w").await;
    let fence = claimed[0]["fence"].as_i64().unwrap();
    s.idem
        .store()
        .intent_begin(IntentBegin {
            key: format!("charge:job:{id}"),
            fingerprint: "f".into(),
            unkeyed: false,
            lease_ms: 60_000,
            job: LeaseToken { job_id: id, fence },
            now: clock.now(),
        })
        .await
        .unwrap();
    for key in ["a", "b"] {
        let a = s
            .post(
                SHOP,
                &format!("/v1/intents/{key}/begin"),
                None,
                &json!({"job_id": id, "fence": fence, "request": {"k": key}, "lease_ms": 60000}),
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    let all = s.get(SHOP, "/v1/intents?state=in_progress&limit=10").await;
    assert_eq!(
        all.json()["intents"].as_array().unwrap().len(),
        3,
        "{all:?}"
    );
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let path = match &after {
            None => "/v1/intents?state=in_progress&limit=1".to_string(),
            Some(a) => format!("/v1/intents?state=in_progress&limit=1&after={a}"),
        };
        let page = s.get(SHOP, &path).await;
        assert_eq!(page.status, 200, "{page:?}");
        let page = page.json();
        for i in page["intents"].as_array().unwrap() {
            seen.push(i["key"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(
        seen.len(),
        3,
        "paging one by one saw {seen:?}; the listing holds 3"
    );
}

// ---------------------------------------------------------------------------------------
// Found by the review, fixed: 4: `awaits_intent` is trusted: any client gets a forced retry.
// ---------------------------------------------------------------------------------------

/// Found by the review (fixed). A client's `fail` with `awaits_intent` naming an intent that does not exist
/// (or is not this job's, or is not unknown) makes `record_failure`'s
/// `settled_meanwhile` put the job back at once with `retry_jobs_forced`: a fresh ladder
/// past `max_attempts`, past the effect-key window check, which `?force=true` keeps for
/// operators (403 for the same client).
async fn awaits_intent_naming_no_intent_is_a_forced_retry_for_a_client(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let id = enqueue(
        &s,
        SHOP,
        json!({"kind": "charge", "queue": "q", "max_attempts": 1}),
    )
    .await;
    let fence = claim(&s, SHOP, &["charge"], "w").await[0]["fence"]
        .as_i64()
        .unwrap();
    let forced = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/retry?force=true"),
            None,
            &json!({}),
        )
        .await;
    assert_eq!(forced.status, 403, "a forced retry is for operators");
    let failed = s
        .post(
            SHOP,
            &format!("/v1/jobs/{id}/fail"),
            None,
            &json!({"fence": fence, "error": "boom", "awaits_intent": "no-such-intent"}),
        )
        .await;
    let job = s.get(SHOP, &format!("/v1/jobs/{id}")).await.json();
    assert!(
        failed.status == 422 || job["state"] == "dead",
        "the last attempt of a 1-attempt job, failed awaiting an intent that does not \
         exist, was put back to run with a fresh ladder (a forced retry): fail answered {} \
         and the job is {} at attempt {}",
        failed.status,
        job["state"],
        job["attempt"]
    );
}

// ---------------------------------------------------------------------------------------
// Found by the review, fixed: 5: a tiny request stores a huge answer.
// ---------------------------------------------------------------------------------------

/// Found by the review (fixed). An enqueue deduplicated into an existing job answers the whole job (its args,
/// up to the 1 MiB body limit) and the layer stores that answer for 24 h under each new
/// Idempotency-Key: a 90-byte request stores 900 kB, four orders of magnitude, so a
/// client fills the database at ten thousand times its own upload rate.
async fn a_tiny_request_stores_a_huge_answer(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let big = "x".repeat(900_000);
    enqueue(
        &s,
        SHOP,
        json!({"kind": "k", "queue": "q", "enqueue_key": "e", "args": {"blob": big}}),
    )
    .await;
    let small = json!({"kind": "k", "queue": "q", "enqueue_key": "e"});
    let sent = serde_json::to_vec(&small).unwrap().len() as i64;
    for i in 0..10 {
        let a = s
            .post(SHOP, "/v1/jobs", Some(&format!("key-{i}")), &small)
            .await;
        assert_eq!(a.status, 200);
    }
    let stored = count(
        &s,
        "SELECT coalesce(sum(length(body)), 0) FROM idem_http_key",
    )
    .await;
    assert!(
        stored <= 10 * sent * 64,
        "10 requests of {sent} bytes stored {stored} bytes of answers"
    );
}

// ---------------------------------------------------------------------------------------
// Attacks that held (regression tests).
// ---------------------------------------------------------------------------------------

/// A worker whose job was rescued and reclaimed: every write of its old claim and of the
/// intent it held is refused, an unkeyed intent taken over goes to `unknown` (never
/// begun again), and a stale release cannot reopen it for a re-send.
async fn a_stale_worker_commits_nothing_through_the_intent_protocol(db: &TestDb) {
    let (s, clock) = server_on_clock(db).await;
    let id = enqueue(&s, SHOP, json!({"kind": "charge", "queue": "q"})).await;
    let a = claim(&s, SHOP, &["charge"], "a").await;
    let fa = a[0]["fence"].as_i64().unwrap();
    let begin = |fence: i64| {
        json!({"job_id": id, "fence": fence, "request": {"amount": 5}, "unkeyed": true,
               "lease_ms": 1000})
    };
    let begun = s
        .post(SHOP, "/v1/intents/pay:1/begin", None, &begin(fa))
        .await;
    assert_eq!(begun.json()["outcome"], "begun", "{begun:?}");
    let ifence = begun.json()["intent"]["fence"].as_i64().unwrap();
    clock.advance(Duration::from_secs(31));
    s.idem.rescue().await.unwrap();
    clock.advance(Duration::from_secs(60));
    let b = claim(&s, SHOP, &["charge"], "b").await;
    let fb = b[0]["fence"].as_i64().unwrap();
    assert!(fb > fa);
    // A's stale job fence: no begin, heartbeat, completion or failure.
    let stale_begin = s
        .post(SHOP, "/v1/intents/other/begin", None, &begin(fa))
        .await;
    assert_eq!(stale_begin.status, 409, "{stale_begin:?}");
    for (path, body) in [
        ("heartbeat", json!({"fence": fa})),
        ("complete", json!({"fence": fa})),
        ("fail", json!({"fence": fa, "error": "x"})),
        (
            "fail",
            json!({"fence": fa, "error": "x", "awaits_intent": "pay:1"}),
        ),
    ] {
        let r = s
            .post(SHOP, &format!("/v1/jobs/{id}/{path}"), None, &body)
            .await;
        assert_eq!(
            (r.status, r.problem()),
            (409, "lease_lost".into()),
            "{path}"
        );
    }
    // B's begin of the unkeyed intent A may have sent: reconcile, never begun.
    let taken = s
        .post(SHOP, "/v1/intents/pay:1/begin", None, &begin(fb))
        .await;
    assert_eq!(taken.json()["outcome"], "reconcile", "{taken:?}");
    // A's late writes under the old intent fence change nothing.
    for (path, body) in [
        ("renew", json!({"fence": ifence, "lease_ms": 5000})),
        ("release", json!({"fence": ifence})),
        ("complete", json!({"fence": ifence})),
        ("unknown", json!({"fence": ifence, "error": "x"})),
        ("fail", json!({"fence": ifence, "error": "x"})),
    ] {
        let r = s
            .post(SHOP, &format!("/v1/intents/pay:1/{path}"), None, &body)
            .await;
        assert_eq!(r.status, 409, "{path}: {r:?}");
    }
    let again = s
        .post(SHOP, "/v1/intents/pay:1/begin", None, &begin(fb))
        .await;
    assert_eq!(again.json()["outcome"], "reconcile", "{again:?}");
    let row = s.idem.intent("p:shop:pay:1").await.unwrap().unwrap();
    assert_eq!(row.state.to_string(), "unknown");
    let job = s.idem.job(id).await.unwrap().unwrap();
    assert_eq!((job.state.to_string(), job.fence), ("running".into(), fb));
}

/// Another principal can neither read nor act on a job, an intent, a key or an enqueue
/// key of shop's, whatever the id or key (':' and percent-encoding included).
async fn principals_stay_apart(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let id = enqueue(
        &s,
        SHOP,
        json!({"kind": "charge", "queue": "q", "enqueue_key": "mill:x"}),
    )
    .await;
    assert!(claim(&s, MILL, &["charge"], "m").await.is_empty());
    let fence = claim(&s, SHOP, &["charge"], "s").await[0]["fence"]
        .as_i64()
        .unwrap();
    let begun = s
        .post(
            SHOP,
            "/v1/intents/a%3Ab/begin",
            None,
            &json!({"job_id": id, "fence": fence, "request": {}, "lease_ms": 60000}),
        )
        .await;
    assert_eq!(begun.json()["intent"]["key"], "a:b", "{begun:?}");
    for path in [
        format!("/v1/jobs/{id}"),
        "/v1/intents/a:b".to_string(),
        "/v1/intents/a%3Ab".to_string(),
        "/v1/intents/p:shop:a:b".to_string(),
        "/v1/intents/shop:a:b".to_string(),
    ] {
        for token in [MILL] {
            let r = s.get(token, &path).await;
            assert_eq!(r.status, 404, "{path}: {r:?}");
        }
    }
    for (path, body) in [
        (format!("/v1/jobs/{id}/heartbeat"), json!({"fence": fence})),
        (format!("/v1/jobs/{id}/complete"), json!({"fence": fence})),
        (
            format!("/v1/jobs/{id}/fail"),
            json!({"fence": fence, "error": "x"}),
        ),
        (format!("/v1/jobs/{id}/cancel"), json!({})),
        (format!("/v1/jobs/{id}/retry"), json!({})),
        ("/v1/intents/a:b/complete".to_string(), json!({"fence": 1})),
        ("/v1/intents/a:b/release".to_string(), json!({"fence": 1})),
        (
            "/v1/intents/mine/begin".to_string(),
            json!({"job_id": id, "fence": fence, "request": {}, "lease_ms": 60000}),
        ),
    ] {
        let r = s.post(MILL, &path, None, &body).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
    }
    let listed = s.get(MILL, "/v1/intents").await.json();
    assert!(listed["intents"].as_array().unwrap().is_empty());
    let jobs = s.get(MILL, "/v1/jobs").await.json();
    assert!(jobs["jobs"].as_array().unwrap().is_empty());
    let shop_enqueue_key = json!({"kind": "charge", "queue": "q", "enqueue_key": "mill:x"});
    let theirs = s.post(MILL, "/v1/jobs", None, &shop_enqueue_key).await;
    assert_eq!(theirs.status, 201, "mill's own key, never shop's job");
    let colon = json!({"kind": "charge", "queue": "q", "enqueue_key": "x"});
    let shop_like = s.post(MILL, "/v1/jobs", None, &colon).await;
    assert_eq!(shop_like.status, 201);
    // Idempotency-Keys: shop's record is not mill's.
    let body = json!({"kind": "k", "queue": "q"});
    let a = s.post(SHOP, "/v1/jobs", Some("p:mill:k"), &body).await;
    let b = s.post(MILL, "/v1/jobs", Some("p:mill:k"), &body).await;
    assert_eq!((a.status, b.status), (201, 201));
    assert_ne!(a.json()["job"]["id"], b.json()["job"]["id"]);
    let job = s.idem.job(id).await.unwrap().unwrap();
    assert_eq!(
        (job.state.to_string(), job.fence),
        ("running".into(), fence)
    );
}

/// Requests refused before the handler leave no stored answer: a method the route does
/// not take, a path that does not parse, a body the extractor refuses.
async fn refusals_before_the_handler_store_no_answer(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let id = enqueue(&s, SHOP, json!({"kind": "r", "queue": "q"})).await;
    let fence = claim(&s, SHOP, &["r"], "w").await[0]["fence"]
        .as_i64()
        .unwrap();
    let snooze = format!("{{\"fence\":{fence},\"error\":\"e\",\"outcome\":\"snooze\"}}");
    let snooze_path = format!("/v1/jobs/{id}/fail");
    for (i, (path, body)) in [
        ("/v1/intents", &b"{}"[..]),
        ("/v1/jobs/abc/complete", b"{\"fence\":1}"),
        ("/v1/jobs", b"{\"kind\":\"k\",\"extra\":1}"),
        ("/v1/jobs", b"not json"),
        (snooze_path.as_str(), snooze.as_bytes()),
        ("/v1/nowhere", b"{}"),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("refused-{i}");
        let r = s.post_raw(SHOP, path, Some(&key), body).await;
        assert!(r.status >= 400, "{path}: {r:?}");
        let again = s.post_raw(SHOP, path, Some(&key), body).await;
        assert_ne!(again.header("idempotent-replayed"), Some("true"), "{path}");
    }
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM idem_http_key WHERE state = 'completed'"
        )
        .await,
        0
    );
}

/// A replay is the first answer byte for byte, whatever the args hold; a quoted key is the
/// bare key; odd but valid keys work and bad ones are 400.
async fn replays_are_byte_identical_and_keys_are_parsed_strictly(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let body = json!({"kind": "k", "queue": "q",
        "args": {"s": "é\u{1}\u{2028}\"\\</script>", "n": 1e300, "a": [3, 1, 2]}});
    let first = s.post(SHOP, "/v1/jobs", Some("\"q\\\"k\""), &body).await;
    assert_eq!(first.status, 201);
    let bare = s.post(SHOP, "/v1/jobs", Some("q\"k"), &body).await;
    assert_eq!(bare.header("idempotent-replayed"), Some("true"));
    assert_eq!(bare.body, first.body);
    assert_eq!(bare.status, first.status);
    assert_eq!(bare.header("content-type"), first.header("content-type"));
    for key in ["a%3Ab", "a:b", "p:shop:x", &"k".repeat(255)] {
        let r = s.post(SHOP, "/v1/jobs", Some(key), &body).await;
        assert_eq!(r.status, 201, "{key}");
    }
    for key in [&"k".repeat(256)[..], "\"unterminated", "\"a\"b", ""] {
        let r = s.post(SHOP, "/v1/jobs", Some(key), &body).await;
        assert_eq!(r.status, 400, "{key:?}: {r:?}");
    }
    let r = s
        .http
        .post(format!("{}/v1/jobs", s.base))
        .bearer_auth(SHOP)
        .header("content-type", "application/json")
        .header("idempotency-key", "one")
        .header("idempotency-key", "two")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

/// Authorization edge cases are 401 (never 5xx, never another principal); an operator
/// sees everything, a client only its own.
async fn authorization_edge_cases_are_401(db: &TestDb) {
    let (s, _clock) = server_on_clock(db).await;
    let url = format!("{}/v1/jobs", s.base);
    let huge = format!("Bearer {}", "a".repeat(60_000));
    for value in [
        "",
        "Bearer",
        "Bearer ",
        &format!("Bearer  {SHOP}"),
        &format!("Basic {SHOP}"),
        &format!("Bearer {SHOP}x"),
        &format!("Bearer {}", &SHOP[..SHOP.len() - 1]),
        SHOP,
        &huge,
    ] {
        let r = s
            .http
            .get(&url)
            .header("authorization", value)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert!(status == 401 || status == 431, "{value:.40}: {status}");
    }
    let two = s
        .http
        .get(&url)
        .header("authorization", format!("Bearer {SHOP}"))
        .header("authorization", format!("Bearer {OPS}"))
        .send()
        .await
        .unwrap();
    assert_eq!(two.status(), 401);
    let lower = s
        .http
        .get(&url)
        .header("authorization", format!("bearer {SHOP}"))
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status(), 200);
}

idem_store_tests::store_cases!(
    an_answer_too_large_to_store_lets_the_claim_run_twice,
    an_answer_too_large_to_store_runs_the_handler_again,
    a_short_retention_lets_a_repeat_run_beside_the_first,
    a_purged_reservation_restarts_the_fence_and_the_old_holder_answers_the_new,
    intent_paging_skips_intents_outside_the_namespace,
    awaits_intent_naming_no_intent_is_a_forced_retry_for_a_client,
    a_tiny_request_stores_a_huge_answer,
    a_stale_worker_commits_nothing_through_the_intent_protocol,
    principals_stay_apart,
    refusals_before_the_handler_store_no_answer,
    replays_are_byte_identical_and_keys_are_parsed_strictly,
    authorization_edge_cases_are_401,
);
