//! `idem serve` as a child process, and a blocking client of its API for the test's
//! thread.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Running;

/// A running `idem serve`; killed when dropped.
pub struct Serve {
    pub running: Running,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Serve {
    /// Runs `cmd` (an `idem … serve --listen 127.0.0.1:0 …`), reads the address from its
    /// listening line and waits until `GET /healthz` answers 200.
    pub fn start(cmd: Command) -> Serve {
        let mut running = Running::start(cmd);
        let base = running.wait_for("the listening line", |l| {
            let rest = l.strip_prefix("idem serve: listening on ")?;
            rest.split_whitespace().next().map(str::to_owned)
        });
        let serve = Serve { running, base };
        serve.wait_healthy();
        serve
    }

    /// Polls `GET /healthz`, with a short backoff, until the server answers 200.
    fn wait_healthy(&self) {
        let api = Api::new(&self.base);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut pause = Duration::from_millis(10);
        loop {
            let answer = api.status("/healthz");
            if answer == Some(200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/healthz answered {answer:?}: {}",
                self.running.output()
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// SIGTERM, then a clean exit.
    pub fn stop(&mut self) {
        signal(self.running.pid(), libc::SIGTERM);
        let status = self.running.exit();
        assert!(
            status.success(),
            "idem serve: {status}: {}",
            self.running.output()
        );
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

/// Sends `sig` to a child of the test.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// One answer: status, headers, and the body as JSON (or a JSON string of its text).
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

/// The HTTP API, called from the test's thread.
pub struct Api {
    pub rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    base: String,
}

impl Api {
    pub fn new(base: &str) -> Api {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        Api {
            rt,
            http,
            base: base.to_owned(),
        }
    }

    /// `method path` with `token`, an optional JSON body and an optional Idempotency-Key.
    pub fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Answer {
        let url = format!("{}{path}", self.base);
        self.rt.block_on(async {
            let mut request = self.http.request(method, &url).bearer_auth(token);
            if let Some(body) = body {
                request = request.json(&body);
            }
            if let Some(key) = key {
                request = request.header("idempotency-key", key);
            }
            let answer = request
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            let status = answer.status().as_u16();
            let headers = answer.headers().clone();
            let text = answer.text().await.expect("a body");
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Answer {
                status,
                headers,
                body,
            }
        })
    }

    /// Status and JSON body of `method path`.
    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let a = self.send(method, path, token, body, None);
        (a.status, a.body)
    }

    /// `GET path`, which must answer 200; its body.
    pub fn get(&self, path: &str, token: &str) -> Value {
        let (status, body) = self.call(reqwest::Method::GET, path, token, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, token, Some(body))
    }

    /// The status of an unauthenticated GET, or `None` when nothing answered.
    pub fn status(&self, path: &str) -> Option<u16> {
        let url = format!("{}{path}", self.base);
        let answer = self
            .rt
            .block_on(async { self.http.get(&url).send().await.ok() });
        answer.map(|r| r.status().as_u16())
    }
}
