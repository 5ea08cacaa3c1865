//! The Idempotency-Key layer through a real server on loopback, on both stores
//! (DESIGN.md section 6).

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use common::{MILL, SHOP, Server, app, counted_route, serve, serve_router, serve_with};
use idem::{Idem, ManualClock};
use idem_http::idempotency::IdempotencyConfig;
use idem_store_tests::TestDb;
use serde_json::json;
use tokio::sync::{Notify, mpsc};

fn job(kind: &str) -> serde_json::Value {
    json!({"kind": kind, "args": {"n": 1}})
}

/// 20 identical POSTs at once with one key: one job; every answer is the first answer or
/// a 409 in flight.
async fn concurrent_identical_posts_run_the_handler_once(db: &TestDb) {
    let server = serve(db).await;
    let body = job("mail");
    let answers = futures::future::join_all(
        (0..20).map(|_| server.post(SHOP, "/v1/jobs", Some("order-1"), &body)),
    )
    .await;
    assert_eq!(server.job_count().await, 1, "the handler ran once");
    let firsts: Vec<_> = answers
        .iter()
        .filter(|a| a.header("idempotent-replayed") == Some("false"))
        .collect();
    assert_eq!(firsts.len(), 1, "one answer ran the handler: {answers:?}");
    let first = firsts[0];
    assert_eq!(first.status, 201);
    for a in &answers {
        match a.status {
            201 => assert_eq!(a.body, first.body, "a replay is the first answer"),
            409 => {
                assert_eq!(a.problem(), "idempotency_key_in_flight");
                assert!(a.header("retry-after").is_some());
            }
            other => panic!("unexpected {other}: {a:?}"),
        }
    }
}

/// A replay is byte-identical and says so; the same key with another body is 422 and
/// changes nothing.
async fn replay_is_byte_identical_and_another_body_is_422(db: &TestDb) {
    let server = serve(db).await;
    let first = server.post(SHOP, "/v1/jobs", Some("k"), &job("mail")).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let again = server.post(SHOP, "/v1/jobs", Some("k"), &job("mail")).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("content-type"), first.header("content-type"));
    let other = server.post(SHOP, "/v1/jobs", Some("k"), &job("sms")).await;
    assert_eq!(other.status, 422);
    assert_eq!(other.problem(), "idempotency_key_reused");
    assert_eq!(server.job_count().await, 1);
}

/// Two principals with one key each get their own result.
async fn principals_never_share_a_key(db: &TestDb) {
    let server = serve(db).await;
    let a = server.post(SHOP, "/v1/jobs", Some("same"), &job("a")).await;
    let b = server.post(MILL, "/v1/jobs", Some("same"), &job("b")).await;
    assert_eq!((a.status, b.status), (201, 201));
    assert_ne!(a.json()["job"]["id"], b.json()["job"]["id"]);
    let a2 = server.post(SHOP, "/v1/jobs", Some("same"), &job("a")).await;
    let b2 = server.post(MILL, "/v1/jobs", Some("same"), &job("b")).await;
    assert_eq!((a2.body, b2.body), (a.body, b.body));
    assert_eq!(server.job_count().await, 2);
}

/// Key order and whitespace in the JSON body replay; array order does not.
async fn canonical_json_decides_the_fingerprint(db: &TestDb) {
    let server = serve(db).await;
    let first = server
        .post_raw(
            SHOP,
            "/v1/jobs",
            Some("c"),
            br#"{"kind":"k","args":{"x":1,"y":[1,2]}}"#,
        )
        .await;
    assert_eq!(first.status, 201);
    let reordered = server
        .post_raw(
            SHOP,
            "/v1/jobs",
            Some("c"),
            b"{ \"args\" : { \"y\": [1, 2],\n \"x\": 1 },  \"kind\": \"k\" }",
        )
        .await;
    assert_eq!(reordered.header("idempotent-replayed"), Some("true"));
    assert_eq!(reordered.body, first.body);
    let swapped = server
        .post_raw(
            SHOP,
            "/v1/jobs",
            Some("c"),
            br#"{"kind":"k","args":{"x":1,"y":[2,1]}}"#,
        )
        .await;
    assert_eq!(swapped.status, 422);
    assert_eq!(server.job_count().await, 1);
}

/// Malformed keys are 400 and store nothing.
async fn invalid_keys_are_400_and_store_nothing(db: &TestDb) {
    let server = serve(db).await;
    let long = "k".repeat(256);
    for key in ["", "   ", long.as_str(), "tab\there", "\"unterminated"] {
        let a = server.post(SHOP, "/v1/jobs", Some(key), &job("mail")).await;
        assert_eq!(a.status, 400, "{key:?}: {a:?}");
        assert_eq!(a.problem(), "idempotency_key_invalid");
    }
    let non_ascii = server
        .http
        .post(format!("{}/v1/jobs", server.base))
        .bearer_auth(SHOP)
        .header("content-type", "application/json")
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        )
        .body(serde_json::to_vec(&job("mail")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(non_ascii.status(), 400);
    let two_lines = server
        .http
        .post(format!("{}/v1/jobs", server.base))
        .bearer_auth(SHOP)
        .header("content-type", "application/json")
        .header("idempotency-key", "a")
        .header("idempotency-key", "a")
        .body(serde_json::to_vec(&job("mail")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(two_lines.status(), 400);
    assert_eq!(server.key_records().await, 0);
    assert_eq!(server.job_count().await, 0);
    let ok = server
        .post(SHOP, "/v1/jobs", Some(&"k".repeat(255)), &job("mail"))
        .await;
    assert_eq!(ok.status, 201, "255 characters are a key");
}

/// Requests refused before the handler acted store nothing: a bad token, a body that is
/// not a job.
async fn refused_requests_store_nothing(db: &TestDb) {
    let server = serve(db).await;
    let unauthenticated = server
        .post(
            "wrong-token-0123456789",
            "/v1/jobs",
            Some("r"),
            &job("mail"),
        )
        .await;
    assert_eq!(unauthenticated.status, 401);
    assert_eq!(unauthenticated.problem(), "unauthorized");
    let invalid = server
        .post(SHOP, "/v1/jobs", Some("r"), &json!({"kind": ""}))
        .await;
    assert_eq!(invalid.status, 422, "{invalid:?}");
    let malformed = server.post_raw(SHOP, "/v1/jobs", Some("r"), b"{").await;
    assert_eq!(malformed.status, 400);
    let fine = server.post(SHOP, "/v1/jobs", Some("r"), &job("mail")).await;
    assert_eq!(fine.status, 201, "the key was never held: {fine:?}");
    assert_eq!(fine.header("idempotent-replayed"), Some("false"));
}

/// GET ignores the header, even a malformed one.
async fn get_ignores_the_header(db: &TestDb) {
    let server = serve(db).await;
    let a = server
        .http
        .get(format!("{}/v1/jobs", server.base))
        .bearer_auth(SHOP)
        .header("idempotency-key", "")
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 200);
    assert_eq!(server.key_records().await, 0);
}

/// A 5xx stores nothing and frees the key: the repeat runs the handler again.
async fn a_5xx_leaves_the_key_free(db: &TestDb) {
    let idem = Idem::from_store(db.store.clone());
    let (route, runs) = counted_route(|run| match run {
        0 => (StatusCode::SERVICE_UNAVAILABLE, "try again".into()),
        _ => (StatusCode::CREATED, "made".into()),
    });
    let server = serve_router(
        idem.clone(),
        app(&idem, IdempotencyConfig::default(), route),
    )
    .await;
    let first = server.post_raw("", "/thing", Some("five"), b"{}").await;
    assert_eq!(first.status, 503);
    let second = server.post_raw("", "/thing", Some("five"), b"{}").await;
    assert_eq!(
        (second.status, second.header("idempotent-replayed")),
        (201, Some("false"))
    );
    let third = server.post_raw("", "/thing", Some("five"), b"{}").await;
    assert_eq!(
        (third.status, third.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A request whose server stopped mid-request (its handler never finishes) blocks its
/// key with 409 and Retry-After until the reservation's lease ends, then a repeat runs.
async fn a_server_stopped_mid_request_blocks_the_key_until_the_lease_ends(db: &TestDb) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let keys = || IdempotencyConfig {
        lease: Duration::from_secs(60),
        clock: Arc::new(clock.clone()),
        ..IdempotencyConfig::default()
    };
    let idem = Idem::from_store(db.store.clone());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let never = Arc::new(Notify::new());
    let held = never.clone();
    let hanging = post(move || {
        let entered = entered_tx.clone();
        let never = held.clone();
        async move {
            let _ = entered.send(());
            never.notified().await;
            "unreachable"
        }
    });
    let first = serve_router(idem.clone(), app(&idem, keys(), hanging)).await;
    let url = format!("{}/thing", first.base);
    let request = tokio::spawn({
        let http = first.http.clone();
        async move {
            let _ = http
                .post(url)
                .header("idempotency-key", "stuck")
                .body("{}")
                .send()
                .await;
        }
    });
    entered.recv().await.expect("the handler started");
    drop(first);
    request.abort();

    let (working, runs) = counted_route(|_| (StatusCode::CREATED, "made".into()));
    let second: Server = serve_router(idem.clone(), app(&idem, keys(), working)).await;
    let blocked = second.post_raw("", "/thing", Some("stuck"), b"{}").await;
    assert_eq!(blocked.status, 409);
    assert_eq!(blocked.problem(), "idempotency_key_in_flight");
    let wait: u64 = blocked.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    clock.advance(Duration::from_secs(59));
    let still = second.post_raw("", "/thing", Some("stuck"), b"{}").await;
    assert_eq!(still.status, 409);
    clock.advance(Duration::from_secs(2));
    let ran = second.post_raw("", "/thing", Some("stuck"), b"{}").await;
    assert_eq!(
        (ran.status, ran.header("idempotent-replayed")),
        (201, Some("false"))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    never.notify_waiters();
}

/// Records older than the retention are a new request.
async fn a_record_past_its_retention_is_a_new_request(db: &TestDb) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let keys = IdempotencyConfig {
        clock: Arc::new(clock.clone()),
        ..IdempotencyConfig::default()
    };
    let server = serve_with(db, Idem::from_store(db.store.clone()), keys).await;
    let first = server
        .post(SHOP, "/v1/jobs", Some("old"), &job("mail"))
        .await;
    assert_eq!(first.status, 201);
    clock.advance(Duration::from_secs(24 * 3600 - 1));
    let replay = server
        .post(SHOP, "/v1/jobs", Some("old"), &job("mail"))
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    clock.advance(Duration::from_secs(2));
    let fresh = server
        .post(SHOP, "/v1/jobs", Some("old"), &job("mail"))
        .await;
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
    assert_eq!(server.job_count().await, 2);
}

idem_store_tests::store_cases!(
    concurrent_identical_posts_run_the_handler_once,
    replay_is_byte_identical_and_another_body_is_422,
    principals_never_share_a_key,
    canonical_json_decides_the_fingerprint,
    invalid_keys_are_400_and_store_nothing,
    refused_requests_store_nothing,
    get_ignores_the_header,
    a_5xx_leaves_the_key_free,
    a_server_stopped_mid_request_blocks_the_key_until_the_lease_ends,
    a_record_past_its_retention_is_a_new_request,
);
