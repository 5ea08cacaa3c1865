//! `idem serve` as a user starts it: refusals before it listens, and a server killed
//! (SIGKILL) in the middle of a keyed request, whose key stays blocked only until the
//! reservation's lease ends.

mod common;

use std::time::{Duration, Instant};

use common::serve::{Api, Serve, signal};
use common::*;
use idem::Idem;
use serde_json::json;

const TOKEN: &str = "shop-token-0123456789abcdef";

/// `--dev` serves without authentication, so it refuses an address other than loopback;
/// without `--dev` and without a token the server refuses to start. Neither opens the
/// database.
#[test]
fn refusals_come_before_the_server_listens() {
    let tmp = tempfile::tempdir().unwrap();
    let url = sqlite_url(&tmp.path().join("never.db"));
    idem_on(
        tmp.path(),
        &url,
        &["serve", "--dev", "--listen", "0.0.0.0:0"],
    )
    .expect(2)
    .warns(&["loopback"]);
    let mut cmd = idem(tmp.path());
    cmd.args(["--database-url", &url, "serve", "--listen", "127.0.0.1:0"])
        .env_remove("IDEM_API_TOKENS")
        .env_remove("IDEM_CONFIG")
        .current_dir(tmp.path());
    output(cmd, vec![]).expect(5).warns(&["no tokens", "--dev"]);
    let mut short = idem(tmp.path());
    short
        .args(["--database-url", &url, "serve", "--listen", "127.0.0.1:0"])
        .env("IDEM_API_TOKENS", "shop=short")
        .env_remove("IDEM_CONFIG")
        .current_dir(tmp.path());
    output(short, vec![]).expect(5).warns(&["at least 16"]);
    assert!(!tmp.path().join("never.db").exists());
}

fn start(tmp: &std::path::Path, url: &str) -> Serve {
    start_with(tmp, url, &[])
}

/// [`start`] with more arguments (a `--config`).
fn start_with(tmp: &std::path::Path, url: &str, more: &[&str]) -> Serve {
    let mut cmd = idem(tmp);
    cmd.current_dir(tmp)
        .args(["--database-url", url, "serve", "--no-workers"])
        .args(["--listen", "127.0.0.1:0"])
        .args(more)
        .env("IDEM_API_TOKENS", format!("shop={TOKEN}"))
        .env_remove("IDEM_CONFIG");
    Serve::start(cmd)
}

/// PostgreSQL, where the test can hold the job table locked so that a keyed enqueue is
/// stopped inside its handler, after its reservation committed: the server is killed
/// there. The repeat on a new server gets 409 with Retry-After while the reservation's
/// lock lasts; once it has ended (the test moves the row's lock into the past, as time
/// would) the repeat runs, and one job exists.
#[test]
fn a_server_killed_mid_request_blocks_its_key_until_the_lease_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    let mut first = start(tmp.path(), &pg.url);
    let api = Api::new(&first.base);
    let (idem, blocker) = lock_job_table(&api, &pg.url);
    let body = json!({"kind": "mail", "args": {"to": "a@example.com"}});
    let request = {
        let base = first.base.clone();
        let body = body.clone();
        std::thread::spawn(move || {
            let api = Api::new(&base);
            // The server dies under this request: no answer comes, and the send panics
            // in this thread, which the test does not join on success.
            api.send(
                reqwest::Method::POST,
                "/v1/jobs",
                TOKEN,
                Some(body),
                Some("k1"),
            )
        })
    };
    // The reservation committed before the handler stopped at the lock.
    wait_for_reservation(&api, &idem);
    signal(first.running.pid(), libc::SIGKILL);
    let _ = first.running.exit();
    api.rt.block_on(blocker.rollback()).expect("unlock");
    let _ = request.join();

    let second = start(tmp.path(), &pg.url);
    let api = Api::new(&second.base);
    let blocked = api.send(
        reqwest::Method::POST,
        "/v1/jobs",
        TOKEN,
        Some(body.clone()),
        Some("k1"),
    );
    assert_eq!(blocked.status, 409, "{}", blocked.body);
    assert_eq!(
        blocked.body["type"],
        "urn:idem:problem:idempotency_key_in_flight"
    );
    let wait: u64 = blocked.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    let jobs = api.get("/v1/jobs", TOKEN);
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        0,
        "the killed request enqueued nothing"
    );

    api.rt
        .block_on(idem.store().query(
            "UPDATE idem_http_key SET locked_until = now() - interval '1 second' \
             RETURNING 1",
            &[],
        ))
        .unwrap();
    let ran = api.send(
        reqwest::Method::POST,
        "/v1/jobs",
        TOKEN,
        Some(body.clone()),
        Some("k1"),
    );
    assert_eq!(ran.status, 201, "{}", ran.body);
    assert_eq!(ran.headers["idempotent-replayed"], "false");
    let replay = api.send(
        reqwest::Method::POST,
        "/v1/jobs",
        TOKEN,
        Some(body),
        Some("k1"),
    );
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(replay.body, ran.body);
    let jobs = api.get("/v1/jobs", TOKEN);
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);
    api.rt.block_on(idem.store().close());
}

/// SIGTERM lets a request in flight finish: on PostgreSQL, a keyed enqueue waits on a
/// locked job table when the signal comes; the server stops taking connections but the
/// request completes (201) once the lock goes, and the process exits 0.
#[test]
fn sigterm_lets_a_request_in_flight_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    let mut server = start(tmp.path(), &pg.url);
    let api = Api::new(&server.base);
    let (idem, blocker) = lock_job_table(&api, &pg.url);
    let request = {
        let base = server.base.clone();
        std::thread::spawn(move || {
            let body = json!({"kind": "mail", "args": {}});
            Api::new(&base).send(
                reqwest::Method::POST,
                "/v1/jobs",
                TOKEN,
                Some(body),
                Some("k2"),
            )
        })
    };
    wait_for_reservation(&api, &idem);
    signal(server.running.pid(), libc::SIGTERM);
    // The stop is under way (it waits for the request) before the lock goes.
    server
        .running
        .wait_for("the stop", |l| l.contains("stopping").then_some(()));
    api.rt.block_on(blocker.rollback()).expect("unlock");
    let answer = request.join().expect("the request thread");
    assert_eq!(answer.status, 201, "{}", answer.body);
    let status = server.running.exit();
    assert!(status.success(), "{status}: {}", server.running.output());
    api.rt.block_on(idem.store().close());
}

/// A client on `url` and a transaction of its holding the job table locked against
/// inserts: a keyed enqueue then stops inside its handler, after its reservation.
fn lock_job_table(api: &Api, url: &str) -> (Idem, idem::Tx) {
    let idem = api.rt.block_on(Idem::open(url)).expect("open the database");
    let mut blocker = api.rt.block_on(idem.begin()).expect("begin");
    api.rt
        .block_on(blocker.execute("LOCK TABLE idem_job IN EXCLUSIVE MODE", &[]))
        .expect("lock the job table");
    (idem, blocker)
}

/// Waits until a request has reserved its Idempotency-Key (the reservation commits
/// before the handler runs).
fn wait_for_reservation(api: &Api, idem: &Idem) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = api
            .rt
            .block_on(idem.store().query(
                "SELECT count(*) FROM idem_http_key WHERE state = 'in_progress'",
                &[],
            ))
            .unwrap();
        if rows[0][0] == idem::SqlValue::Int(1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the request never reserved its key"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// With `--no-workers` the rescuer still runs (it did not at first, though the startup
/// line said so): a claim whose worker died is taken back once its lease ends. The
/// rescue runs on the server's real clock, so the test polls the job, with a deadline
/// that only guards against a hang.
fn no_workers_still_rescues(tmp: &std::path::Path, url: &str) {
    let config = tmp.join("idem.toml");
    std::fs::write(
        &config,
        "[worker]\nlease = \"3s\"\nrescue_interval = \"200ms\"\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let server = start_with(tmp, url, &["--config", &config]);
    let api = Api::new(&server.base);
    let (status, enqueued) = api.post("/v1/jobs", TOKEN, json!({"kind": "py", "queue": "q"}));
    assert_eq!(status, 201, "{enqueued}");
    let id = enqueued["job"]["id"].as_i64().unwrap();
    let claim = json!({"queue": "q", "kinds": ["py"], "lease_ms": 1000, "worker": "dies"});
    let (status, claimed) = api.post("/v1/claims", TOKEN, claim);
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(claimed["jobs"][0]["id"].as_i64(), Some(id));
    // The worker dies now, holding the job.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut state = String::new();
    while Instant::now() < deadline {
        let job = api.get(&format!("/v1/jobs/{id}"), TOKEN);
        state = job["state"].as_str().unwrap().to_string();
        if state != "running" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(
        state, "running",
        "a claim whose worker died was never rescued under idem serve --no-workers"
    );
}

#[test]
fn sqlite_no_workers_still_rescues() {
    let tmp = tempfile::tempdir().unwrap();
    let url = migrated_sqlite(tmp.path(), &tmp.path().join("idem.db"));
    no_workers_still_rescues(tmp.path(), &url);
}

#[test]
fn postgres_no_workers_still_rescues() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    no_workers_still_rescues(tmp.path(), &pg.url);
}
