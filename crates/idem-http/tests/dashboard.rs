//! The dashboard over HTTP, on both stores: login and sessions, actions refused without
//! a session, without the CSRF token, with a wrong one or from another site (the database
//! checked afterwards), bulk actions that take only the previewed ids, user data escaped,
//! and the security headers of every page.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{OPS, SHOP, Server, serve_router, tokens};
use idem::{Idem, ManualClock, WorkerConfig, WorkerProtocol};
use idem_http::api::{Api, Limits};
use idem_http::auth::Auth;
use idem_http::dashboard::{CSP, Dashboard, SESSION_TTL};
use idem_http::idempotency::IdempotencyConfig;
use idem_store::JobState;
use idem_store_tests::TestDb;
use serde_json::json;

/// Form fields, or extra request headers.
type Pairs<'a> = &'a [(&'a str, &'a str)];

/// Args a producer could send: markup that must reach the page as text.
const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";

/// The API and the dashboard over `db` through `idem`, authenticated by `auth`.
async fn serve_dashboard(idem: Idem, auth: Auth) -> Server {
    let protocol = WorkerProtocol::new(idem.clone(), WorkerConfig::default()).unwrap();
    let api = Api {
        idem: idem.clone(),
        protocol,
        auth: auth.clone(),
        idempotency: IdempotencyConfig::default(),
        limits: Limits::default(),
        reconciler: None,
    };
    let dashboard = Dashboard {
        idem: idem.clone(),
        auth,
        kinds: vec![("mail".into(), idem::EffectClass::Transactional)],
        limits: Limits::default(),
    };
    let router = api.router().unwrap().merge(dashboard.router());
    serve_router(idem, router).await
}

async fn serve(db: &TestDb) -> Server {
    serve_dashboard(Idem::from_store(db.store.clone()), tokens()).await
}

/// A browser without redirects or a cookie jar of its own: the session cookie is kept
/// by hand, so each test says which requests carry it.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookie: Option<String>,
}

struct Page {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The CSRF token of the page's forms.
    fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").expect("a form") + 19;
        self.body[at..at + 64].to_string()
    }
}

fn form_encode(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let pairs: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    pairs.join("&")
}

impl Browser {
    fn new(s: &Server) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: s.base.clone(),
            cookie: None,
        }
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = match &self.cookie {
            Some(c) => req.header("cookie", format!("idem_session={c}")),
            None => req,
        };
        let r = req.send().await.unwrap();
        let headers = r.headers().clone();
        if let Some(set) = headers.get("set-cookie").and_then(|v| v.to_str().ok()) {
            let value = set.trim_start_matches("idem_session=");
            let id = value.split(';').next().unwrap_or("");
            self.cookie = (!id.is_empty()).then(|| id.to_string());
        }
        Page {
            status: r.status().as_u16(),
            headers,
            body: r.text().await.unwrap(),
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn post(&mut self, path: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Page {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_encode(fields));
        for (name, value) in extra {
            req = req.header(*name, *value);
        }
        self.send(req).await
    }

    /// A browser logged in as the operator `ops`.
    async fn operator(s: &Server) -> Browser {
        let mut b = Browser::new(s);
        let page = b.login(OPS).await;
        assert_eq!(page.status, 303, "{}", page.body);
        b
    }

    /// Logs in with `token`; the answer.
    async fn login(&mut self, token: &str) -> Page {
        self.post("/login", &[("token", token)], &[]).await
    }
}

/// A job of `kind` with `args` in queue `q` that died on its only attempt with `error`.
async fn dead_job(s: &Server, kind: &str, args: serde_json::Value, error: &str) -> i64 {
    let body = json!({"kind": kind, "queue": "q", "args": args, "max_attempts": 1});
    let a = s.post(OPS, "/v1/jobs", None, &body).await;
    let id = a.json()["job"]["id"].as_i64().unwrap();
    let claim = json!({"queue": "q", "kinds": [kind], "worker": "w-1"});
    let claimed = s.post(OPS, "/v1/claims", None, &claim).await;
    assert_eq!(claimed.json()["jobs"][0]["id"].as_i64(), Some(id));
    let fail = json!({"fence": 1, "error": error, "outcome": "permanent"});
    let failed = s
        .post(OPS, &format!("/v1/jobs/{id}/fail"), None, &fail)
        .await;
    assert_eq!(failed.json()["state"], "dead", "{:?}", failed.json());
    id
}

async fn state_of(s: &Server, id: i64) -> JobState {
    s.idem.job(id).await.unwrap().expect("the job").state
}

/// Pages need a session: without one a read goes to the login page. A wrong token and
/// a client principal's token open none; an operator's opens one whose cookie is
/// HttpOnly, SameSite=Strict, Path=/; logout ends it.
async fn login_opens_a_session_for_operators_only(db: &TestDb) {
    let s = serve(db).await;
    let mut b = Browser::new(&s);
    let page = b.get("/").await;
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/login"))
    );
    let wrong = b.login("not-a-configured-token-0000").await;
    assert_eq!((wrong.status, b.cookie.as_deref()), (401, None));
    let client = b.login(SHOP).await;
    assert_eq!((client.status, b.cookie.as_deref()), (403, None));
    assert!(
        client.body.contains("operator principals"),
        "{}",
        client.body
    );
    let ok = b.login(OPS).await;
    assert_eq!(ok.status, 303);
    let set = ok.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert_eq!(b.cookie.as_ref().map(String::len), Some(64));
    let home = b.get("/").await;
    assert_eq!(home.status, 200, "{}", home.body);
    assert!(home.body.contains("ops"));
    let csrf = home.csrf();
    let session = b.cookie.clone();
    let out = b.post("/logout", &[("csrf", &csrf)], &[]).await;
    assert_eq!((out.status, out.header("location")), (303, Some("/login")));
    b.cookie = session;
    assert_eq!(b.get("/").await.status, 303, "the old cookie opens nothing");
}

/// A session ends after its TTL, on the injected clock.
async fn a_session_expires(db: &TestDb) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let idem = Idem::from_store(db.store.clone()).with_clock(Arc::new(clock.clone()));
    let s = serve_dashboard(idem, tokens()).await;
    let mut b = Browser::operator(&s).await;
    clock.advance(SESSION_TTL - Duration::from_secs(1));
    assert_eq!(b.get("/jobs").await.status, 200);
    clock.advance(Duration::from_secs(2));
    let page = b.get("/jobs").await;
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/login"))
    );
}

/// Every action is refused, and changes nothing in the database, without a session,
/// without the CSRF token, with another token, with another session's token, or when the
/// browser says it came from another site; with all of them it acts.
async fn actions_without_session_or_csrf_change_nothing(db: &TestDb) {
    let s = serve(db).await;
    let id = dead_job(&s, "mail", json!({}), "no").await;
    let mut other = Browser::operator(&s).await;
    let other_csrf = other.get("/").await.csrf();
    let mut b = Browser::new(&s);
    let path = format!("/jobs/{id}/action");
    let nobody = b
        .post(&path, &[("action", "retry"), ("csrf", &other_csrf)], &[])
        .await;
    assert_eq!(nobody.status, 401, "no session");
    b.login(OPS).await;
    let csrf = b.get(&format!("/jobs/{id}")).await.csrf();
    let wrong = "0".repeat(64);
    let refused: [(Pairs, Pairs); 5] = [
        (&[("action", "retry")], &[]),
        (&[("action", "retry"), ("csrf", &wrong)], &[]),
        (&[("action", "retry"), ("csrf", &other_csrf)], &[]),
        (
            &[("action", "retry"), ("csrf", &csrf)],
            &[("sec-fetch-site", "cross-site")],
        ),
        (
            &[("action", "retry"), ("csrf", &csrf)],
            &[("origin", "http://evil.example")],
        ),
    ];
    for (fields, headers) in refused {
        let page = b.post(&path, fields, headers).await;
        assert_eq!(page.status, 403, "{fields:?} {headers:?}: {}", page.body);
        assert_eq!(
            state_of(&s, id).await,
            JobState::Dead,
            "{fields:?} {headers:?}"
        );
    }
    let bulk = [
        ("action", "discard"),
        ("ids", &id.to_string()),
        ("csrf", &wrong),
    ];
    assert_eq!(b.post("/dead/bulk", &bulk, &[]).await.status, 403);
    assert_eq!(
        state_of(&s, id).await,
        JobState::Dead,
        "bulk discard refused"
    );
    let same_site = [("sec-fetch-site", "same-origin")];
    let done = b
        .post(&path, &[("action", "retry"), ("csrf", &csrf)], &same_site)
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(state_of(&s, id).await, JobState::Available);
}

/// A bulk action's preview lists the dead jobs it will take, and the action takes
/// exactly those: a job that died after the preview stays dead.
async fn bulk_acts_only_on_the_previewed_ids(db: &TestDb) {
    let s = serve(db).await;
    let first = dead_job(&s, "mail", json!({}), "no").await;
    let second = dead_job(&s, "mail", json!({}), "no").await;
    let mut b = Browser::operator(&s).await;
    let preview = b.get("/dead/preview?action=retry&queue=q&kind=mail").await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview
            .body
            .contains("<strong id=\"preview-count\">2</strong>")
    );
    assert!(preview.body.contains(&format!("{second}, {first}")));
    let late = dead_job(&s, "mail", json!({}), "no").await;
    let ids = format!("{second},{first}");
    let fields = [
        ("action", "retry"),
        ("ids", &ids),
        ("csrf", &preview.csrf()),
    ];
    let done = b.post("/dead/bulk", &fields, &[]).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("retry: 2 of 2 previewed jobs"),
        "{}",
        done.body
    );
    assert_eq!(state_of(&s, first).await, JobState::Available);
    assert_eq!(state_of(&s, second).await, JobState::Available);
    assert_eq!(state_of(&s, late).await, JobState::Dead, "not previewed");
}

/// Job args, kinds and errors holding markup are shown as text on every page that
/// shows them, and every page sends the strict policy and the other headers.
async fn user_data_is_escaped_and_pages_are_locked_down(db: &TestDb) {
    let s = serve(db).await;
    let args = json!({"to": SCRIPT, "note": IMG});
    let id = dead_job(&s, "mail", args, &format!("boom {SCRIPT} {IMG}")).await;
    let mut b = Browser::operator(&s).await;
    for path in [
        format!("/jobs/{id}"),
        "/jobs".into(),
        "/dead".into(),
        "/".into(),
        "/intents?state=all".into(),
        "/batches".into(),
        "/guarantees".into(),
        "/ledger".into(),
        format!("/jobs/{id}/confirm?action=retry"),
    ] {
        let page = b.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(page.header("content-security-policy"), Some(CSP), "{path}");
        assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
        assert!(!page.body.contains("<script>alert"), "{path}");
        assert!(!page.body.contains("<img"), "{path}");
        assert_eq!(
            page.body.matches("<script").count(),
            1,
            "{path}: one script tag"
        );
        assert!(!page.body.contains(" style="), "{path}: no inline style");
    }
    let job = b.get(&format!("/jobs/{id}")).await.body;
    assert!(
        job.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{job}"
    );
    assert!(
        job.contains("\\&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "{job}"
    );
    assert!(job.contains("boom &lt;script&gt;"), "the error: {job}");
    let list = b.get("/dead").await.body;
    assert!(
        list.contains("boom &lt;script&gt;alert(1)&lt;/script&gt;"),
        "{list}"
    );
}

/// The job page shows every attempt with its fence and outcome, the effect keys the job
/// recorded and its intents; a fragment request gets the live part alone.
async fn the_job_page_shows_attempts_effect_keys_and_intents(db: &TestDb) {
    let s = serve(db).await;
    s.post(
        OPS,
        "/v1/jobs",
        None,
        &json!({"kind": "charge", "queue": "q"}),
    )
    .await;
    let claim = json!({"queue": "q", "kinds": ["charge"], "worker": "w-7"});
    let job = s.post(OPS, "/v1/claims", None, &claim).await.json()["jobs"][0].clone();
    let id = job["id"].as_i64().unwrap();
    let row = s.idem.job(id).await.unwrap().unwrap();
    let mut tx = db.store.begin().await.unwrap();
    let effect = idem_store::EffectClaim {
        key: "charge:order-42".into(),
        kind: "charge".into(),
        lease: row.lease_token(),
        now: None,
    };
    tx.effect_claim(effect).await.unwrap();
    tx.commit().await.unwrap();
    let begin = json!({"job_id": id, "fence": 1, "request": {}, "lease_ms": 60000});
    let begun = s.post(OPS, "/v1/intents/pay-42/begin", None, &begin).await;
    assert_eq!(begun.status, 200, "{:?}", begun.json());
    let mut b = Browser::operator(&s).await;
    let running = b.get(&format!("/jobs/{id}")).await.body;
    for text in [
        "w-7",
        "class=\"countdown\"",
        "charge:order-42",
        "pay-42",
        "in_progress",
    ] {
        assert!(running.contains(text), "{text}: {running}");
    }
    let unknown = json!({"fence": 1, "error": "timed out"});
    s.post(OPS, "/v1/intents/pay-42/unknown", None, &unknown)
        .await;
    let fail = json!({"fence": 1, "error": "lost", "awaits_intent": "pay-42"});
    s.post(OPS, &format!("/v1/jobs/{id}/fail"), None, &fail)
        .await;
    let attempts = b.get(&format!("/jobs/{id}")).await.body;
    assert!(
        attempts.contains("<td class=\"num\">1</td><td class=\"num\">1</td>"),
        "{attempts}"
    );
    let fragment = b
        .send(
            b.http
                .get(format!("{}/jobs/{id}", s.base))
                .header("x-idem-fragment", "1"),
        )
        .await;
    assert!(!fragment.body.starts_with("<!DOCTYPE"), "{}", fragment.body);
    assert!(fragment.body.contains("charge:order-42"));
    let intents = b.get("/intents").await;
    assert!(intents.body.contains("pay-42"), "{}", intents.body);
    let fields = [("key", "pay-42"), ("resolution", "absent"), ("csrf", "x")];
    assert_eq!(b.post("/intents/resolve", &fields, &[]).await.status, 403);
    let intent = s.idem.intent("pay-42").await.unwrap().unwrap();
    assert_eq!(
        intent.state,
        idem_store::IntentState::Unknown,
        "refused: unchanged"
    );
    let csrf = intents.csrf();
    let fields = [("key", "pay-42"), ("resolution", "absent"), ("csrf", &csrf)];
    assert_eq!(b.post("/intents/resolve", &fields, &[]).await.status, 303);
    let intent = s.idem.intent("pay-42").await.unwrap().unwrap();
    assert_eq!(intent.state, idem_store::IntentState::Released);
    assert_eq!(
        state_of(&s, id).await,
        JobState::Available,
        "its job runs again"
    );
}

/// The queues page pauses and resumes a queue with the session's CSRF token, shows it
/// paused, and refuses the same forms without the token, changing nothing.
async fn pause_and_resume_a_queue(db: &TestDb) {
    let s = serve(db).await;
    let id = dead_job(&s, "mail", json!({}), "no").await;
    let paused = || async { s.idem.paused_queues().await.unwrap().len() };
    let mut b = Browser::operator(&s).await;
    let home = b.get("/").await;
    assert!(
        home.body.contains("button class=\"pause\""),
        "{}",
        home.body
    );
    let forged = [("queue", "q"), ("pause", "true"), ("csrf", "nope")];
    assert_eq!(b.post("/queues/pause", &forged, &[]).await.status, 403);
    assert_eq!(paused().await, 0, "refused: not paused");
    let csrf = home.csrf();
    let pause = [("queue", "q"), ("pause", "true"), ("csrf", &csrf)];
    assert_eq!(b.post("/queues/pause", &pause, &[]).await.status, 303);
    let queues = s.idem.paused_queues().await.unwrap();
    assert_eq!(queues[0].paused_by.as_deref(), Some("ops"));
    let home = b.get("/").await.body;
    assert!(home.contains("class=\"badge paused\""), "{home}");
    assert!(b.get(&format!("/jobs/{id}")).await.status == 200);
    let resume = [("queue", "q"), ("pause", "false"), ("csrf", &csrf)];
    assert_eq!(b.post("/queues/pause", &resume, &[]).await.status, 303);
    assert_eq!(paused().await, 0, "resumed");
}

/// The queue counts are read once per interval for every browser together: a second
/// browser's page, and a fragment refresh, right after the first get the same read (a job
/// enqueued meanwhile is not counted yet), not a new count over the job table.
async fn queue_counts_are_shared_between_browsers(db: &TestDb) {
    let s = serve(db).await;
    let read_at = |page: &Page| {
        let at = page.body.find("data-read-at=\"").expect("the read's time") + 14;
        page.body[at..at + 27].to_string()
    };
    let server = &s;
    let enqueue_in = |queue: &'static str| async move {
        let job = json!({"kind": "mail", "queue": queue});
        server.post(OPS, "/v1/jobs", None, &job).await
    };
    enqueue_in("first").await;
    let mut one = Browser::operator(&s).await;
    let first = one.get("/").await;
    assert!(first.body.contains(">first</a>"), "{}", first.body);
    enqueue_in("later").await;
    let mut two = Browser::operator(&s).await;
    let second = two.get("/").await;
    assert_eq!(read_at(&second), read_at(&first), "{}", second.body);
    assert!(
        !second.body.contains(">later</a>"),
        "counted again: {}",
        second.body
    );
    let request = one
        .http
        .get(format!("{}/", s.base))
        .header("x-idem-fragment", "1");
    let refresh = one.send(request).await;
    assert_eq!(read_at(&refresh), read_at(&first));
}

/// `--dev`: a page read opens a session for the operator `dev` with no login, and its
/// actions still need the session's CSRF token.
async fn dev_mode_needs_no_login_but_still_csrf(db: &TestDb) {
    let s = serve_dashboard(Idem::from_store(db.store.clone()), Auth::Dev).await;
    let id = dead_job_dev(&s).await;
    let mut b = Browser::new(&s);
    let page = b.get("/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("dev") && b.cookie.is_some());
    let path = format!("/jobs/{id}/action");
    assert_eq!(
        b.post(&path, &[("action", "discard")], &[]).await.status,
        403
    );
    assert_eq!(state_of(&s, id).await, JobState::Dead);
}

async fn dead_job_dev(s: &Server) -> i64 {
    // Under --dev any bearer token (or none) is the operator `dev`.
    dead_job(s, "mail", json!({}), "no").await
}

idem_store_tests::store_cases!(
    login_opens_a_session_for_operators_only,
    a_session_expires,
    actions_without_session_or_csrf_change_nothing,
    bulk_acts_only_on_the_previewed_ids,
    user_data_is_escaped_and_pages_are_locked_down,
    the_job_page_shows_attempts_effect_keys_and_intents,
    pause_and_resume_a_queue,
    queue_counts_are_shared_between_browsers,
    dev_mode_needs_no_login_but_still_csrf,
);
