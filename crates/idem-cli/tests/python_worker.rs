//! The example worker in Python (`examples/python/idem_worker.py`) against a real `idem
//! serve`, on both stores.
//!
//! Two worker processes share 200 jobs and one is killed with SIGKILL while it holds
//! jobs. Once their leases end, the rescuer puts them back and the other worker completes
//! them: every job ends `completed` with one `completed` attempt, no id is printed
//! `completed` twice, and a write under the dead worker's fence is refused. The server
//! runs with `--no-workers`: its rescuer still sweeps every queue (every 500 ms here), so
//! a dead worker's claims come back with no worker in the server's process.
//!
//! The intent protocol of its `charge` kind, against mock remotes: a keyed call answered
//! 500 after it was applied is sent again under its key and applied once; an unkeyed one
//! goes to `unknown` and its job waits dead until an operator settles the intent, then
//! completes without sending again; a 404 fails the intent and the job.
//!
//! Skipped, with a notice, when `python3` is not on PATH.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::serve::{Api, Serve, signal};
use common::*;
use idem_mock_remote::{Fault, MockRemote, Mode};
use serde_json::{Value, json};

const WORKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/python/idem_worker.py"
);

/// The client principal's token: its jobs, claims and intents.
const TOKEN: &str = "shop-token-0123456789abcdef";
/// An operator's token: settling an intent by hand.
const OPERATOR_TOKEN: &str = "ops-token-0123456789abcdef";

/// A failed attempt retries after 200 ms; expired leases are swept every 500 ms.
const CONFIG: &str = "[retry]\nladder = [\"200ms\"]\njitter = 0.0\n\
                      [worker]\nrescue_interval = \"500ms\"\n";

/// The lease the Python workers ask for (their heartbeat runs every third of it).
const LEASE_MS: &str = "2000";

const QUEUE: &str = "py";

/// The longest the jobs may take to settle once the workers run; only a hang reaches it.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn sqlite_a_killed_python_worker_loses_no_job() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    if python_missing() {
        return;
    }
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    a_killed_worker_loses_no_job(tmp.path(), &url);
}

#[test]
fn postgres_a_killed_python_worker_loses_no_job() {
    let tmp = tempfile::tempdir().unwrap();
    if python_missing() {
        return;
    }
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    a_killed_worker_loses_no_job(tmp.path(), &pg.url);
}

#[test]
fn sqlite_python_charges_go_through_intents() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    if python_missing() {
        return;
    }
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    charges_go_through_intents(tmp.path(), &url);
}

#[test]
fn postgres_python_charges_go_through_intents() {
    let tmp = tempfile::tempdir().unwrap();
    if python_missing() {
        return;
    }
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    charges_go_through_intents(tmp.path(), &pg.url);
}

fn a_killed_worker_loses_no_job(tmp: &Path, url: &str) {
    let mut serve = serve(tmp, url);
    let api = Api::new(&serve.base);
    // First in claim order (priority -1), so the first worker's first claim takes them;
    // they sleep through their first attempt, until that worker is killed.
    let slow: BTreeSet<i64> = (0..4)
        .map(|_| {
            enqueue_job(
                &api,
                "count",
                json!({"sleep_ms": 600_000, "sleep_attempts": 1}),
                -1,
            )
        })
        .collect();
    let mut all = slow.clone();
    all.extend((0..196).map(|_| enqueue_job(&api, "count", json!({"sleep_ms": 50}), 0)));
    let mut a = PyWorker::start(&serve.base, "py-a", "count", 8);
    let mut holding = BTreeSet::new();
    while holding != slow {
        let id = a
            .running
            .wait_for("py-a starting a job", |l| id_after(l, "started "));
        if slow.contains(&id) {
            holding.insert(id);
        }
    }
    let mut b = PyWorker::start(&serve.base, "py-b", "count", 4);
    b.running
        .wait_for("py-b completing a job", |l| id_after(l, "completed "));
    let running = jobs(&api, "running");
    let held: Vec<&Value> = running.iter().filter(|j| slow.contains(&id(j))).collect();
    assert_eq!(held.len(), slow.len(), "{running:#?}");
    for job in held {
        assert_eq!(job["lease_owner"], "py-a", "{job}");
        assert_eq!(job["fence"], 1, "{job}");
    }
    signal(a.running.pid(), libc::SIGKILL);
    a.running.exit();

    let deadline = Instant::now() + SETTLE_LIMIT;
    while jobs(&api, "completed").len() < all.len() {
        assert!(
            Instant::now() < deadline,
            "not every job completed: {:#?}\npy-b: {}",
            jobs(&api, "running"),
            b.running.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for id in &slow {
        // The killed worker's claim is stale: its writes are refused and change nothing.
        for action in ["complete", "heartbeat"] {
            let path = format!("/v1/jobs/{id}/{action}");
            let (status, problem) = api.post(&path, TOKEN, json!({"fence": 1}));
            assert_eq!(status, 409, "{path}: {problem}");
            assert_eq!(problem["type"], "urn:idem:problem:lease_lost", "{problem}");
        }
    }
    for id in &all {
        let job = api.get(&format!("/v1/jobs/{id}"), TOKEN);
        assert_eq!(job["state"], "completed", "{job}");
    }
    signal(b.running.pid(), libc::SIGTERM);
    let status = b.running.exit();
    assert!(status.success(), "py-b: {status}: {}", b.running.output());
    serve.stop();

    let (by_a, by_b) = (a.ids("completed "), b.ids("completed "));
    let mut printed = BTreeSet::new();
    for id in by_a.iter().chain(&by_b) {
        assert!(all.contains(id), "completed {id} is no job of this test");
        assert!(printed.insert(*id), "job {id} printed `completed` twice");
    }
    assert!(slow.iter().all(|id| by_b.contains(id)), "{by_b:?}");
    // A job whose completion the server recorded just before py-a was killed went
    // unprinted: at most one per slot of py-a.
    let unprinted: Vec<&i64> = all.difference(&printed).collect();
    assert!(unprinted.len() <= 8, "never printed: {unprinted:?}");

    let idem = api
        .rt
        .block_on(idem::Idem::open(url))
        .expect("open the store");
    for id in &all {
        let attempts = api.rt.block_on(idem.attempts(*id)).expect("attempts");
        let outcomes: Vec<(&str, i64)> = attempts
            .iter()
            .map(|a| (a.outcome.as_str(), a.fence))
            .collect();
        let completed = outcomes.iter().filter(|(o, _)| *o == "completed").count();
        assert_eq!(completed, 1, "job {id}: {outcomes:?}");
        if slow.contains(id) {
            assert_eq!(
                outcomes,
                [("lease_expired", 1), ("completed", 2)],
                "job {id}"
            );
        }
    }
    api.rt
        .block_on(idem_store::Store::close(idem.store().as_ref()));
}

fn charges_go_through_intents(tmp: &Path, url: &str) {
    let mut serve = serve(tmp, url);
    let api = Api::new(&serve.base);
    let (keyed, unkeyed) = {
        let _runtime = api.rt.enter();
        let keyed = MockRemote::start(Mode::Keyed).expect("start a keyed remote");
        let unkeyed = MockRemote::start(Mode::Unkeyed).expect("start an unkeyed remote");
        (keyed, unkeyed)
    };
    // Each remote's first call is applied and then answered 500: the outcome is unclear.
    keyed.inject(Fault::ApplyThenStatus(500));
    unkeyed.inject(Fault::ApplyThenStatus(500));
    let effects = |remote: &MockRemote| format!("{}/effects", remote.url());
    let charge = |url: String, keyed: bool| {
        enqueue_job(
            &api,
            "charge",
            json!({"url": url, "amount": 10, "keyed": keyed}),
            0,
        )
    };
    // Claimed one at a time, in this order.
    let retried = charge(effects(&keyed), true);
    let settled = charge(effects(&unkeyed), false);
    let refused = charge(format!("{}/missing", keyed.url()), true);
    let plain = charge(effects(&keyed), true);
    let key = |id: i64| format!("charge:job:{id}");
    let mut worker = PyWorker::start(&serve.base, "py-c", "charge", 1);

    let job = wait_for_state(&api, settled, "dead");
    assert!(
        job["last_error"].as_str().unwrap_or("").contains("unknown"),
        "{job}"
    );
    let intent = api.get(&format!("/v1/intents/{}", key(settled)), TOKEN);
    assert_eq!(intent["state"], "unknown", "{intent}");
    // An operator settles it (the remote has the call); the job runs again and completes
    // from the intent's record, without calling.
    let path = format!("/v1/intents/p:shop:{}/resolve", key(settled));
    let (status, resolved) = api.post(&path, OPERATOR_TOKEN, json!({"resolution": "applied"}));
    assert_eq!(status, 200, "{resolved}");
    assert_eq!(resolved["job_retried"], true, "{resolved}");

    for id in [retried, settled, plain] {
        wait_for_state(&api, id, "completed");
        let intent = api.get(&format!("/v1/intents/{}", key(id)), TOKEN);
        assert_eq!(intent["state"], "completed", "{intent}");
    }
    wait_for_state(&api, refused, "dead");
    let intent = api.get(&format!("/v1/intents/{}", key(refused)), TOKEN);
    assert_eq!(intent["state"], "failed", "{intent}");
    // The keyed call was sent twice under one key and applied once.
    let intent = api.get(&format!("/v1/intents/{}", key(retried)), TOKEN);
    assert_eq!(intent["attempt"], 2, "{intent}");
    assert_eq!(keyed.applied_for(&key(retried)), 1);
    assert_eq!(keyed.applied_for(&key(plain)), 1);
    assert_eq!(keyed.applied_for(&key(refused)), 0);
    assert_eq!(unkeyed.applied_for(&key(settled)), 1);
    assert_eq!(
        unkeyed.requests_total(),
        1,
        "the unkeyed call was sent again"
    );

    signal(worker.running.pid(), libc::SIGTERM);
    let status = worker.running.exit();
    assert!(
        status.success(),
        "py-c: {status}: {}",
        worker.running.output()
    );
    let completed: BTreeSet<i64> = worker.ids("completed ").into_iter().collect();
    assert_eq!(completed, BTreeSet::from([retried, settled, plain]));
    serve.stop();
    api.rt.block_on(keyed.shutdown());
    api.rt.block_on(unkeyed.shutdown());
}

/// True (after a notice) when there is no `python3` to run the example with.
fn python_missing() -> bool {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: python3 is not on PATH, and the example worker is Python");
    }
    !found
}

/// `idem serve --no-workers` on a free loopback port, with the tokens of [`TOKEN`] and
/// [`OPERATOR_TOKEN`] and the settings of [`CONFIG`] (its rescuer sweeps every 500 ms).
fn serve(tmp: &Path, url: &str) -> Serve {
    let config = tmp.join("idem-serve.toml");
    std::fs::write(&config, CONFIG).expect("write the config file");
    let mut cmd = idem(tmp);
    cmd.arg("--database-url")
        .arg(url)
        .args([
            "serve",
            "--no-workers",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .env(
            "IDEM_API_TOKENS",
            format!("shop={TOKEN},ops={OPERATOR_TOKEN}"),
        )
        .env("IDEM_API_OPERATORS", "ops");
    Serve::start(cmd)
}

/// One `python3 idem_worker.py` on [`QUEUE`] with the client token.
struct PyWorker {
    running: Running,
}

impl PyWorker {
    fn start(base: &str, name: &str, kinds: &str, concurrency: usize) -> PyWorker {
        let mut cmd = Command::new("python3");
        cmd.arg(WORKER)
            .args(["--url", base, "--queue", QUEUE, "--kinds", kinds])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--lease-ms", LEASE_MS, "--name", name])
            .env("IDEM_TOKEN", TOKEN);
        PyWorker {
            running: Running::start(cmd),
        }
    }

    /// The ids of the lines `<prefix><id>` it printed.
    fn ids(&self, prefix: &str) -> Vec<i64> {
        let lines = self.running.seen.iter();
        lines.filter_map(|l| id_after(l, prefix)).collect()
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

fn id_after(line: &str, prefix: &str) -> Option<i64> {
    line.strip_prefix(prefix)?.trim().parse().ok()
}

fn id(job: &Value) -> i64 {
    job["id"].as_i64().expect("a job id")
}

/// Enqueues a job on [`QUEUE`]; its id.
fn enqueue_job(api: &Api, kind: &str, args: Value, priority: i16) -> i64 {
    let job = json!({"queue": QUEUE, "kind": kind, "args": args, "priority": priority});
    let (status, body) = api.post("/v1/jobs", TOKEN, job);
    assert_eq!(status, 201, "POST /v1/jobs: {body}");
    id(&body["job"])
}

/// The jobs of [`QUEUE`] in `state` (this test has at most 500).
fn jobs(api: &Api, state: &str) -> Vec<Value> {
    let page = api.get(
        &format!("/v1/jobs?queue={QUEUE}&state={state}&limit=500"),
        TOKEN,
    );
    assert!(page["next"].is_null(), "more than one page: {page}");
    page["jobs"].as_array().expect("jobs").clone()
}

/// Polls job `id` until it is in `state`; the job.
fn wait_for_state(api: &Api, id: i64, state: &str) -> Value {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let job = api.get(&format!("/v1/jobs/{id}"), TOKEN);
        if job["state"] == state {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} is not {state}: {job}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
