//! The mock remote through real HTTP: keyed dedup and replay, unkeyed duplicates and their
//! lookup, every fault, the gate, the log and shutdown. Every wait is a signal.

use std::time::Duration;

use idem_mock_remote::{Fault, MockRemote, Mode};
use reqwest::{Client, Response, StatusCode, Url};
use serde_json::{Value, json};

/// A client that ignores proxy settings from the environment.
fn client() -> Client {
    builder().build().unwrap()
}

/// A client builder without proxies, with the TLS provider the workspace builds (ring:
/// reqwest comes without one).
fn builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder().no_proxy()
}

/// `POST /effects` with an optional key and a small JSON body.
async fn post(
    client: &Client,
    remote: &MockRemote,
    key: Option<&str>,
) -> reqwest::Result<Response> {
    let mut request = client
        .post(format!("{}/effects", remote.url()))
        .json(&json!({ "n": 1 }));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await
}

/// `GET /effects?reference=K`: the status and the listed ids.
async fn lookup(
    client: &Client,
    remote: &MockRemote,
    reference: &str,
) -> (StatusCode, Vec<String>) {
    let mut url = Url::parse(&format!("{}/effects", remote.url())).unwrap();
    url.query_pairs_mut().append_pair("reference", reference);
    let response = client.get(url).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let ids = body["ids"].as_array().into_iter().flatten();
    (
        status,
        ids.map(|id| id.as_str().unwrap().to_owned()).collect(),
    )
}

/// The `201` answer's `id`.
async fn created_id(response: Response) -> String {
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

fn replayed(response: &Response) -> bool {
    response
        .headers()
        .get("Idempotent-Replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn keyed_dedups_and_replays_the_same_id() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    let first = post(&client, &remote, Some("k1")).await.unwrap();
    assert!(!replayed(&first));
    let first_id = created_id(first).await;
    let second = post(&client, &remote, Some("k1")).await.unwrap();
    assert!(replayed(&second));
    assert_eq!(created_id(second).await, first_id);
    assert_eq!((remote.applied_total(), remote.applied_for("k1")), (1, 1));
    assert_eq!(remote.copies("k1"), vec![first_id.clone()]);
    assert_eq!(
        lookup(&client, &remote, "k1").await,
        (StatusCode::OK, vec![first_id])
    );
}

#[tokio::test]
async fn keyed_applies_every_request_without_a_key() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    let a = created_id(post(&client, &remote, None).await.unwrap()).await;
    let b = created_id(post(&client, &remote, None).await.unwrap()).await;
    assert_ne!(a, b);
    assert_eq!(remote.applied_total(), 2);
}

#[tokio::test]
async fn unkeyed_applies_twice_and_the_lookup_lists_both() {
    let remote = MockRemote::start(Mode::Unkeyed).unwrap();
    let client = client();
    let first = post(&client, &remote, Some("k1")).await.unwrap();
    let second = post(&client, &remote, Some("k1")).await.unwrap();
    assert!(!replayed(&second));
    let ids = vec![created_id(first).await, created_id(second).await];
    assert_ne!(ids[0], ids[1]);
    assert_eq!(remote.applied_for("k1"), 2);
    assert_eq!(remote.copies("k1"), ids);
    assert_eq!(lookup(&client, &remote, "k1").await, (StatusCode::OK, ids));
    assert_eq!(
        lookup(&client, &remote, "other").await,
        (StatusCode::NOT_FOUND, vec![])
    );
}

#[tokio::test]
async fn apply_then_hang_applies_while_the_client_times_out_and_others_are_served() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    remote.inject(Fault::ApplyThenHang);
    let impatient = builder().timeout(Duration::from_millis(300)).build();
    let hung = tokio::spawn(post_owned(
        impatient.unwrap(),
        remote.url().to_owned(),
        "hung",
    ));
    remote.wait_for_applied(1).await;
    let served = post(&client(), &remote, Some("other")).await.unwrap();
    assert_eq!(served.status(), StatusCode::CREATED);
    assert!(hung.await.unwrap().unwrap_err().is_timeout());
    assert_eq!(
        (remote.applied_for("hung"), remote.applied_for("other")),
        (1, 1)
    );
    let log = remote.log();
    let hung_entry = log
        .iter()
        .find(|e| e.key.as_deref() == Some("hung"))
        .unwrap();
    assert_eq!(
        (hung_entry.applied.as_deref(), hung_entry.status),
        (Some("r-1"), None)
    );
}

/// `post` for a spawned task, which cannot borrow the remote.
async fn post_owned(client: Client, url: String, key: &str) -> reqwest::Result<Response> {
    let request = client
        .post(format!("{url}/effects"))
        .header("Idempotency-Key", key);
    request.json(&json!({ "n": 1 })).send().await
}

#[tokio::test]
async fn lookup_status_answers_the_next_lookup_only() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    remote.inject(Fault::LookupStatus(503));
    let id = created_id(post(&client, &remote, Some("k1")).await.unwrap()).await;
    assert_eq!(
        lookup(&client, &remote, "k1").await,
        (StatusCode::SERVICE_UNAVAILABLE, vec![])
    );
    assert_eq!(
        lookup(&client, &remote, "k1").await,
        (StatusCode::OK, vec![id])
    );
}

#[tokio::test]
async fn held_requests_wait_at_the_gate_until_released() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    remote.hold();
    let url = remote.url().to_owned();
    let a = tokio::spawn(post_owned(client(), url.clone(), "a"));
    let b = tokio::spawn(post_owned(client(), url, "b"));
    remote.wait_for_waiting(2).await;
    assert_eq!(remote.applied_total(), 0);
    assert_eq!(
        lookup(&client(), &remote, "a").await.0,
        StatusCode::NOT_FOUND
    );
    remote.release();
    assert_eq!(a.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!(b.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!((remote.applied_for("a"), remote.applied_for("b")), (1, 1));
}

#[tokio::test]
async fn status_faults_do_not_apply_and_are_taken_in_order() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    for status in [503, 400, 409, 429] {
        remote.inject(Fault::Status(status));
    }
    for status in [503, 400, 409, 429] {
        let response = post(&client, &remote, Some("k1")).await.unwrap();
        assert_eq!(response.status().as_u16(), status);
    }
    assert_eq!(remote.applied_total(), 0);
    created_id(post(&client, &remote, Some("k1")).await.unwrap()).await;
    assert_eq!((remote.applied_for("k1"), remote.requests_total()), (1, 5));
}

#[tokio::test]
async fn apply_then_status_applies_and_a_keyed_retry_replays() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    remote.inject(Fault::ApplyThenStatus(500));
    let failed = post(&client, &remote, Some("k1")).await.unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(remote.applied_for("k1"), 1);
    let retry = post(&client, &remote, Some("k1")).await.unwrap();
    assert!(replayed(&retry));
    assert_eq!(created_id(retry).await, remote.copies("k1")[0]);
    assert_eq!(remote.applied_total(), 1);
}

#[tokio::test]
async fn delay_then_applies_normally() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    remote.inject(Fault::Delay(Duration::from_millis(20)));
    created_id(post(&client(), &remote, Some("k1")).await.unwrap()).await;
    assert_eq!(remote.applied_for("k1"), 1);
}

#[tokio::test]
async fn a_delayed_request_applies_after_its_client_gave_up() {
    let remote = MockRemote::start(Mode::Unkeyed).unwrap();
    remote.inject(Fault::Delay(Duration::from_millis(300)));
    let impatient = builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    assert!(post(&impatient, &remote, Some("k1")).await.is_err());
    // A late copy, as a real service makes one; without it this would wait for ever.
    let late = tokio::time::timeout(Duration::from_secs(10), remote.wait_for_applied(1));
    late.await
        .expect("the delayed request was dropped with its connection");
    assert_eq!(remote.applied_for("k1"), 1);
}

#[tokio::test]
async fn wait_for_requests_resolves_on_arrival() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    remote.hold();
    let pending = tokio::spawn(post_owned(client(), remote.url().to_owned(), "k1"));
    remote.wait_for_requests(1).await;
    assert_eq!((remote.requests_total(), remote.applied_total()), (1, 0));
    remote.release();
    pending.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_log_records_every_request() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let client = client();
    remote.inject(Fault::Status(503));
    post(&client, &remote, Some("k1")).await.unwrap();
    post(&client, &remote, Some("k1")).await.unwrap();
    post(&client, &remote, Some("k1")).await.unwrap();
    lookup(&client, &remote, "k1").await;
    let log = remote.log();
    let summary: Vec<_> = log
        .iter()
        .map(|e| (e.method, e.applied.as_deref(), e.replayed, e.status))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("POST", None, false, Some(503)),
            ("POST", Some("r-1"), false, Some(201)),
            ("POST", None, true, Some(201)),
            ("GET", None, false, Some(200)),
        ]
    );
    assert!(log.iter().all(|e| e.key.as_deref() == Some("k1")));
    assert_eq!(log[0].body, Some(json!({ "n": 1 })));
}

#[tokio::test]
async fn an_unparsable_body_is_refused_without_applying() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    let url = format!("{}/effects", remote.url());
    let response = client().post(url).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!((remote.applied_total(), remote.requests_total()), (0, 1));
}

#[tokio::test]
async fn shutdown_answers_hung_requests_and_closes_the_port() {
    let remote = MockRemote::start(Mode::Keyed).unwrap();
    remote.inject(Fault::ApplyThenHang);
    let url = remote.url().to_owned();
    let hung = tokio::spawn(post_owned(client(), url.clone(), "k1"));
    remote.wait_for_applied(1).await;
    remote.shutdown().await;
    let answer = hung.await.unwrap();
    assert!(answer.is_err() || answer.unwrap().status() == StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        post_owned(client(), url, "k2")
            .await
            .unwrap_err()
            .is_connect()
    );
}
