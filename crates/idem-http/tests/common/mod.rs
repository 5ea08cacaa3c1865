//! Shared pieces of the HTTP tests: a real `Api` served on a loopback port over a test
//! database, and a client that speaks to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use idem::{Idem, ManualClock, SqlValue, WorkerConfig, WorkerProtocol};
use idem_http::Principal;
use idem_http::api::{Api, Limits};
use idem_http::auth::{Auth, Tokens};
use idem_http::idempotency::{IdempotencyConfig, IdempotencyLayer};
use idem_store_tests::TestDb;
use serde_json::{Value, json};

/// The token of the client principal `shop`.
pub const SHOP: &str = "shop-token-0123456789";
/// The token of the client principal `mill`.
pub const MILL: &str = "mill-token-0123456789";
/// The token of the operator principal `ops`.
pub const OPS: &str = "ops-token-0123456789";

/// A server on loopback; stopped when dropped.
pub struct Server {
    pub base: String,
    pub idem: Idem,
    pub http: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The tokens of the tests' three principals.
pub fn tokens() -> Auth {
    let mut t = Tokens::new();
    t.add(Principal::client("shop"), SHOP).unwrap();
    t.add(Principal::client("mill"), MILL).unwrap();
    t.add(Principal::operator("ops"), OPS).unwrap();
    Auth::Tokens(Arc::new(t))
}

/// A server over `db` with the default settings and the tests' tokens.
pub async fn serve(db: &TestDb) -> Server {
    serve_with(
        db,
        Idem::from_store(db.store.clone()),
        IdempotencyConfig::default(),
    )
    .await
}

/// A server over `db` through `idem` (its clock) with `keys` as the layer's settings.
pub async fn serve_with(db: &TestDb, idem: Idem, keys: IdempotencyConfig) -> Server {
    let _ = db;
    let protocol = WorkerProtocol::new(idem.clone(), WorkerConfig::default()).unwrap();
    let api = Api {
        idem: idem.clone(),
        protocol,
        auth: tokens(),
        idempotency: keys,
        limits: Limits::default(),
        reconciler: None,
    };
    serve_router(idem, api.router().unwrap()).await
}

/// Serves `router` on a loopback port.
pub async fn serve_router(idem: Idem, router: axum::Router) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Server {
        base: format!("http://{addr}"),
        idem,
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
        task,
    }
}

/// One answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The problem's stable name.
    pub fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let t = self.json()["type"].as_str().unwrap().to_string();
        t.strip_prefix("urn:idem:problem:").unwrap().to_string()
    }
}

impl Server {
    /// `POST path` with `body` (raw bytes, sent as JSON), the token and optional key.
    pub async fn post_raw(
        &self,
        token: &str,
        path: &str,
        key: Option<&str>,
        body: &[u8],
    ) -> Answer {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        answer(req.send().await.unwrap()).await
    }

    pub async fn post(&self, token: &str, path: &str, key: Option<&str>, body: &Value) -> Answer {
        self.post_raw(token, path, key, &serde_json::to_vec(body).unwrap())
            .await
    }

    pub async fn get(&self, token: &str, path: &str) -> Answer {
        let req = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token);
        answer(req.send().await.unwrap()).await
    }

    /// Rows of `idem_http_key`.
    pub async fn key_records(&self) -> i64 {
        count(self, "SELECT count(*) FROM idem_http_key").await
    }

    /// How many jobs there are.
    pub async fn job_count(&self) -> i64 {
        count(self, "SELECT count(*) FROM idem_job").await
    }
}

pub async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.bytes().await.unwrap().to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// A server over `db` whose client and layer run on one injected clock, and the clock.
pub async fn server_on_clock(db: &TestDb) -> (Server, ManualClock) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let idem = Idem::from_store(db.store.clone()).with_clock(Arc::new(clock.clone()));
    let keys = IdempotencyConfig {
        clock: Arc::new(clock.clone()),
        ..IdempotencyConfig::default()
    };
    (serve_with(db, idem, keys).await, clock)
}

/// Claims up to 10 jobs of `kinds` from queue `q` as `worker`.
pub async fn claim(s: &Server, token: &str, kinds: &[&str], worker: &str) -> Vec<Value> {
    let a = s
        .post(
            token,
            "/v1/claims",
            None,
            &json!({"queue": "q", "kinds": kinds, "limit": 10, "worker": worker}),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    a.json()["jobs"].as_array().unwrap().clone()
}

/// The first column of the first row of `sql` (a count), 0 for NULL.
pub async fn count(s: &Server, sql: &str) -> i64 {
    let rows = s.idem.store().query(sql, &[]).await.unwrap();
    match &rows[0][0] {
        SqlValue::Int(n) => *n,
        SqlValue::Null => 0,
        other => panic!("count: {other:?}"),
    }
}

/// An app of the test's own behind the layer (the layer is reusable by any axum app).
pub fn app(
    idem: &Idem,
    keys: IdempotencyConfig,
    route: axum::routing::MethodRouter,
) -> axum::Router {
    axum::Router::new()
        .route("/thing", route)
        .layer(IdempotencyLayer::new(idem.store().clone(), keys).unwrap())
}

/// A `POST` route that counts its runs and answers `answer(run)` (run 0 first).
pub fn counted_route(
    answer: fn(usize) -> (axum::http::StatusCode, String),
) -> (
    axum::routing::MethodRouter,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let route = axum::routing::post(move || {
        let runs = counted.clone();
        async move { answer(runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst)) }
    });
    (route, runs)
}
