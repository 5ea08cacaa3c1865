//! The dashboard in a real browser: headless Chromium, driven through WebDriver by
//! chromedriver, against the built `idem serve` with a token, on SQLite and on
//! PostgreSQL. It logs in, sees an enqueued job in the list and opens it (its args hold
//! markup, which must show as text and fire no alert), retries a dead job with the
//! button and its confirmation, and sees the job run to `completed` through the page's
//! live refresh; it pauses a queue; and it keeps screenshots under the target directory.
//!
//! The dead job is a job of the built-in `http` kind, run by the server's own worker
//! against an `idem-mock-remote` that answers its first call 429 (not applied, retry):
//! with one attempt allowed, the job dies; after the retry the remote applies it.
//!
//! WebDriver is spoken over the `reqwest` client the tests already build (a handful of
//! JSON endpoints), not through a WebDriver crate: no build weight added. Without
//! `chromium` and `chromedriver` the test fails under `CI`, and skips with a notice
//! otherwise (`apt-get install chromium chromium-driver`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::serve::{Api, Serve};
use common::*;
use idem_mock_remote::{Fault, MockRemote, Mode};
use serde_json::{Value, json};

const TOKEN: &str = "ops-token-0123456789abcdef";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The longest the test waits for a page to show what it expects.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn dashboard_in_a_browser_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let url = migrated_sqlite(tmp.path(), &tmp.path().join("idem.db"));
    browse(tmp.path(), &url, "sqlite");
}

#[test]
fn dashboard_in_a_browser_on_postgres() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    browse(tmp.path(), &pg.url, "postgres");
}

/// Whether the browser is installed; under `CI` its absence fails the test.
fn browser_installed() -> bool {
    let found = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !found && std::env::var_os("CI").is_some() {
        panic!("CI needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver");
    }
    if !found {
        eprintln!(
            "skipped: no {CHROMIUM} or {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        );
    }
    found
}

fn browse(tmp: &Path, url: &str, store: &str) {
    if !browser_installed() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let remote = {
        let _in = runtime.enter();
        MockRemote::start(Mode::Keyed).expect("the mock remote")
    };
    remote.inject(Fault::Status(429));
    let serve = start(tmp, url);
    let api = Api::new(&serve.base);
    let marked = enqueue(
        &api,
        json!({"kind": "mail", "queue": "outbox", "args": {
        "to": "<script>alert(1)</script>", "note": "\"><img src=x onerror=alert(1)>"}}),
    );
    let call = json!({"url": format!("{}/effects", remote.url()), "body": {"amount": 10}});
    let dead = enqueue(
        &api,
        json!({"kind": "http", "args": call, "max_attempts": 1}),
    );
    wait_for_state(&api, dead, "dead");
    let driver = Chromedriver::start(tmp);
    let shots = runtime.block_on(async {
        let browser = Browser::open(&driver.url, tmp).await;
        let steps = Steps {
            b: &browser,
            base: &serve.base,
            store,
        };
        let outcome =
            futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(steps.run(marked, dead)))
                .await;
        browser.close().await;
        outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    assert_eq!(remote.applied_total(), 1, "{:?}", remote.log());
    for shot in shots {
        println!("dashboard screenshot: {}", shot.display());
    }
    drop(serve);
    runtime.block_on(remote.shutdown());
}

fn start(tmp: &Path, url: &str) -> Serve {
    let mut cmd = idem(tmp);
    cmd.current_dir(tmp)
        .args(["--database-url", url, "serve", "--listen", "127.0.0.1:0"])
        .env("IDEM_API_TOKENS", format!("ops={TOKEN}"))
        .env("IDEM_API_OPERATORS", "ops")
        .env_remove("IDEM_CONFIG");
    Serve::start(cmd)
}

fn enqueue(api: &Api, job: Value) -> i64 {
    let (status, body) = api.post("/v1/jobs", TOKEN, job);
    assert_eq!(status, 201, "{body}");
    body["job"]["id"].as_i64().expect("a job id")
}

/// Polls the API until job `id` is in `state` (the server's worker runs it).
fn wait_for_state(api: &Api, id: i64, state: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let job = api.get(&format!("/v1/jobs/{id}"), TOKEN);
        if job["state"] == state {
            return;
        }
        assert!(Instant::now() < deadline, "job {id} never {state}: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the browser does, step by step.
struct Steps<'a> {
    b: &'a Browser,
    base: &'a str,
    store: &'a str,
}

impl Steps<'_> {
    async fn run(self, marked: i64, dead: i64) -> Vec<PathBuf> {
        self.log_in().await;
        self.open_the_marked_job(marked).await;
        self.retry_the_dead_job(dead).await;
        let job = self
            .b
            .screenshot(&format!("dashboard-{}.png", self.store))
            .await;
        self.pause_a_queue("outbox").await;
        let queues = self
            .b
            .screenshot(&format!("dashboard-{}-queues.png", self.store))
            .await;
        vec![job, queues]
    }

    async fn log_in(&self) {
        self.b.go(&format!("{}/", self.base)).await;
        assert!(self.b.current_url().await.ends_with("/login"));
        let token = self.b.find("#token").await;
        self.b.type_into(&token, TOKEN).await;
        self.b.click(&self.b.find("form.login button").await).await;
        self.b.wait_text("h1", "Queues").await;
        assert_eq!(self.b.current_url().await, format!("{}/", self.base));
    }

    /// The jobs list shows the job; its page shows the markup in its args as text.
    async fn open_the_marked_job(&self, id: i64) {
        self.b.go(&format!("{}/jobs?queue=outbox", self.base)).await;
        let link = self.b.find(&format!("a[href='/jobs/{id}']")).await;
        self.b.click(&link).await;
        self.b.wait_text("h1", &format!("Job {id}")).await;
        let args = self.b.text(&self.b.find("pre.json").await).await;
        assert!(args.contains("<script>alert(1)</script>"), "{args}");
        assert!(args.contains("\\\"><img src=x onerror=alert(1)>"), "{args}");
        assert!(!self.b.alert_open().await, "an alert fired");
        let images = self.b.find_all("main img").await;
        assert!(images.is_empty(), "markup became elements");
    }

    /// The queues page pauses a queue: its row shows the badge.
    async fn pause_a_queue(&self, queue: &str) {
        self.b.go(&format!("{}/", self.base)).await;
        self.b.wait_text("#live table", queue).await;
        let css = format!("input[name='queue'][value='{queue}'] ~ button.pause");
        self.b.click(&self.b.find(&css).await).await;
        self.b.wait_text("#live table", "paused").await;
    }

    /// Retry, confirm, and watch the live refresh show the job completed.
    async fn retry_the_dead_job(&self, id: i64) {
        self.b.go(&format!("{}/jobs/{id}", self.base)).await;
        self.b.wait_text("dl.summary", "dead").await;
        let retry = self.b.find("a.button[href$='action=retry']").await;
        self.b.click(&retry).await;
        self.b
            .wait_text("p.confirm", &format!("Retry job {id}"))
            .await;
        self.b.click(&self.b.find("#confirm").await).await;
        self.b.wait_text("h1", &format!("Job {id}")).await;
        // No reload from here: the page's script swaps the fragment in.
        self.b.wait_text("dl.summary .badge", "completed").await;
        let attempts = self.b.text(&self.b.find("main").await).await;
        assert!(
            attempts.contains("http:job:"),
            "the intent is listed: {attempts}"
        );
    }
}

/// chromedriver on a free port; killed when dropped.
struct Chromedriver {
    running: Running,
    url: String,
}

impl Chromedriver {
    fn start(tmp: &Path) -> Chromedriver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}")).env("TMPDIR", tmp);
        let mut running = Running::start(cmd);
        running.wait_for("chromedriver's start line", |l| {
            l.contains("started successfully").then_some(())
        });
        let url = format!("http://127.0.0.1:{port}");
        Chromedriver { running, url }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

/// A WebDriver session of headless Chromium.
struct Browser {
    http: reqwest::Client,
    session: String,
}

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    async fn open(driver: &str, tmp: &Path) -> Browser {
        let http = reqwest::Client::new();
        let profile = tmp.join("chromium-profile");
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,900".into(),
            format!("--user-data-dir={}", profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let answer = http
            .post(format!("{driver}/session"))
            .json(&caps)
            .send()
            .await;
        let body: Value = answer.expect("chromedriver").json().await.expect("JSON");
        let id = body["value"]["sessionId"].as_str();
        let session = format!(
            "{driver}/session/{}",
            id.unwrap_or_else(|| panic!("{body}"))
        );
        Browser { http, session }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.expect("chromedriver answers");
        let status = answer.status().as_u16();
        let body: Value = answer.json().await.expect("JSON");
        (status, body["value"].clone())
    }

    async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let (status, value) = self.call(method, path, body).await;
        assert_eq!(status, 200, "{path}: {value}");
        value
    }

    async fn go(&self, url: &str) {
        self.ok(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    async fn current_url(&self) -> String {
        let url = self.ok(reqwest::Method::GET, "/url", None).await;
        url.as_str().unwrap_or_default().to_string()
    }

    async fn find_all(&self, css: &str) -> Vec<String> {
        let query = json!({"using": "css selector", "value": css});
        let found = self
            .ok(reqwest::Method::POST, "/elements", Some(query))
            .await;
        let elements = found.as_array().cloned().unwrap_or_default();
        elements
            .iter()
            .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
            .collect()
    }

    /// The first element `css` matches, waiting for it to appear.
    async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(first) = self.find_all(css).await.into_iter().next() {
                return first;
            }
            let page = self.ok(reqwest::Method::GET, "/source", None).await;
            assert!(Instant::now() < deadline, "no {css} in {page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn text(&self, element: &str) -> String {
        let text = self
            .ok(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                None,
            )
            .await;
        text.as_str().unwrap_or_default().to_string()
    }

    /// Waits until the first element `css` matches holds `expected` (the page may be
    /// replaced or refreshed meanwhile).
    async fn wait_text(&self, css: &str, expected: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.find_all(css).await;
            if let Some(first) = found.first() {
                let (status, text) = self
                    .call(
                        reqwest::Method::GET,
                        &format!("/element/{first}/text"),
                        None,
                    )
                    .await;
                if status == 200 && text.as_str().is_some_and(|t| t.contains(expected)) {
                    return;
                }
            }
            if Instant::now() > deadline {
                let page = self.ok(reqwest::Method::GET, "/source", None).await;
                panic!("{css} never showed {expected:?}: {page}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn type_into(&self, element: &str, text: &str) {
        let path = format!("/element/{element}/value");
        self.ok(reqwest::Method::POST, &path, Some(json!({"text": text})))
            .await;
    }

    async fn click(&self, element: &str) {
        let path = format!("/element/{element}/click");
        self.ok(reqwest::Method::POST, &path, Some(json!({}))).await;
    }

    /// Whether a JavaScript alert (or confirm, prompt) is open.
    async fn alert_open(&self) -> bool {
        let (status, _) = self.call(reqwest::Method::GET, "/alert/text", None).await;
        status == 200
    }

    /// Saves a screenshot as `name` in the target directory; its path.
    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.ok(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64_decode(png.as_str().expect("base64"));
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("target dir");
        let path = target.join(name);
        std::fs::write(&path, bytes).expect("write the screenshot");
        path
    }

    async fn close(&self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

/// Standard base64 (WebDriver's screenshot encoding), padding allowed.
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut width) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = ALPHABET
            .iter()
            .position(|a| *a == c)
            .expect("a base64 digit") as u32;
        bits = (bits << 6) | v;
        width += 6;
        if width >= 8 {
            width -= 8;
            out.push((bits >> width) as u8);
            bits &= (1 << width) - 1;
        }
    }
    out
}
