//! The built-in `http` kind from the command line: `idem enqueue http` checks its flags
//! before opening the database; `idem worker` runs the job against a real mock remote;
//! an unkeyed call whose answer is a 500 leaves an `unknown` intent that `idem intents`
//! shows, `idem reconcile` looks up (absent: released, the job put back and sent again)
//! and `idem intents resolve` settles by hand.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use idem_mock_remote::{Fault, MockRemote, Mode};
use serde_json::Value;

/// Flags of `idem enqueue http` that are wrong, and what the error must name.
const BAD_INPUT: [(&[&str], &str); 9] = [
    (&["--url", "ftp://x/y"], "--url"),
    (&["--url", "not a url"], "--url"),
    (&["--url", "http://x/", "--header", "NoColon"], "--header"),
    (
        &["--url", "http://x/", "--header", "Idempotency-Key: k"],
        "set by idem",
    ),
    (&["--url", "http://x/", "--body", "{not json"], "--body"),
    (&["--url", "http://x/", "--timeout-ms", "0"], "--timeout-ms"),
    (&["--url", "http://x/", "--method", "GE T"], "--method"),
    (
        &["--url", "http://x/", "--lookup-url", "mailto:x"],
        "--lookup-url",
    ),
    (&["--url", "http://x/", "--run-at", "tomorrow"], "--run-at"),
];

#[test]
fn enqueue_http_refuses_bad_input_and_creates_nothing() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    let missing = data.path().join("missing.db");
    for (flags, named) in BAD_INPUT {
        let args = [&["enqueue", "http"][..], flags].concat();
        idem_on(tmp.path(), &url, &args)
            .expect(USAGE)
            .warns(&[named]);
        // Checked before the database is opened: a missing one is neither reported nor
        // created.
        idem_on(tmp.path(), &sqlite_url(&missing), &args)
            .expect(USAGE)
            .warns(&[named]);
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
    let jobs = idem_on(tmp.path(), &url, &["jobs", "list", "--json"])
        .expect(0)
        .json();
    assert_eq!(jobs, serde_json::json!([]));
}

#[test]
fn enqueue_http_makes_a_job_of_kind_http() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    let target = "https://api.example.com/charges";
    let out = idem_on(
        tmp.path(),
        &url,
        &[
            "enqueue",
            "http",
            "--url",
            target,
            "--method",
            "put",
            "--header",
            "X-Tenant: acme",
            "--body",
            r#"{"amount": 10}"#,
            "--queue",
            "payments",
            "--enqueue-key",
            "order-1",
        ],
    );
    let id = out.expect(0).json()["job"]["id"]
        .as_i64()
        .expect("a job id");
    let shown = idem_on(
        tmp.path(),
        &url,
        &["jobs", "show", &id.to_string(), "--json"],
    );
    let job = &shown.expect(0).json()["job"];
    assert_eq!(job["kind"], "http", "{shown}");
    assert_eq!(job["queue"], "payments", "{shown}");
    let args = &job["args"];
    assert_eq!(args["url"], target, "{shown}");
    assert_eq!(args["method"], "PUT", "{shown}");
    assert_eq!(args["headers"]["X-Tenant"], "acme", "{shown}");
    assert_eq!(args["body"]["amount"], 10, "{shown}");
    assert_eq!(args["keyed"], true, "{shown}");
    // The generic form still works beside it.
    enqueue(tmp.path(), &url, "k");
}

#[test]
fn intents_reads_on_an_empty_database() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    let list = idem_on(tmp.path(), &url, &["intents", "list"]);
    let lines: Vec<&str> = list.expect(0).stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{list}");
    assert!(lines[0].starts_with("key  state"), "{list}");
    let json = idem_on(tmp.path(), &url, &["intents", "list", "--all", "--json"]);
    assert_eq!(json.expect(0).json(), serde_json::json!([]));
    idem_on(tmp.path(), &url, &["intents", "list", "--state", "lost"])
        .expect(USAGE)
        .warns(&["lost", "unknown"]);
    idem_on(tmp.path(), &url, &["intents", "show", "http:job:9"])
        .expect(NOT_FOUND)
        .warns(&["http:job:9"]);
    idem_on(
        tmp.path(),
        &url,
        &["intents", "resolve", "http:job:9", "--absent"],
    )
    .expect(NOT_FOUND)
    .warns(&["http:job:9"]);
    for args in [
        &["intents", "resolve", "http:job:9"][..],
        &["intents", "resolve", "http:job:9", "--applied", "--absent"],
        &[
            "intents",
            "resolve",
            "http:job:9",
            "--absent",
            "--remote-ref",
            "r1",
        ],
    ] {
        idem_on(tmp.path(), &url, args).expect(USAGE);
    }
    let report = idem_on(tmp.path(), &url, &["reconcile", "--json"])
        .expect(0)
        .json();
    assert_eq!(report["looked_up"], 0);
    idem_on(tmp.path(), &url, &["reconcile"]).expect(0).says(&[
        "jobs_retried",
        "skipped: intents of job kinds this binary does not run",
    ]);
}

/// The commands of this file, as `tests/reads.rs` tries every operator command: each
/// opens the database that exists and never creates or migrates one.
const COMMANDS: [&[&str]; 7] = [
    &["enqueue", "http", "--url", "http://x/"],
    &["worker", "--reconcile-every", "0"],
    &["intents", "list"],
    &["intents", "show", "http:job:1"],
    &["intents", "resolve", "http:job:1", "--absent"],
    &["reconcile"],
    &["reconcile", "--json"],
];

#[test]
fn the_commands_open_what_exists_and_never_migrate() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let typo = data.path().join("typo.db");
    for args in COMMANDS {
        idem_on(tmp.path(), &sqlite_url(&typo), args)
            .expect(NOT_FOUND)
            .warns(&["idem migrate"]);
        assert_eq!(entries(data.path()), Vec::<String>::new(), "{args:?}");
    }
    let (db, url) = old_sqlite(data.path(), OLDER);
    let before = std::fs::read(&db).unwrap();
    for args in COMMANDS {
        idem_on(tmp.path(), &url, args)
            .expect(SCHEMA_NOT_CURRENT)
            .warns(&["idem migrate"]);
        assert_eq!(
            sqlite_versions(&db),
            versions_upto(OLDER),
            "{args:?} migrated"
        );
        assert!(std::fs::read(&db).unwrap() == before, "{args:?} wrote");
    }
}

#[test]
fn a_read_only_postgres_session_runs_the_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    let read_only = pg.read_only_url();
    idem_on(tmp.path(), &read_only, &["intents", "list", "--all"]).expect(0);
    idem_on(tmp.path(), &read_only, &["intents", "show", "http:job:1"]).expect(NOT_FOUND);
    idem_on(tmp.path(), &read_only, &["reconcile", "--json"]).expect(0);
}

/// A migrated database, a remote that ignores idempotency keys, and an unkeyed `http`
/// job whose call the remote answered 500 without applying it: the job is dead and its
/// intent `unknown`.
struct UnknownCall {
    // Dropped first: the remote's server runs on the runtime.
    remote: MockRemote,
    _runtime: tokio::runtime::Runtime,
    tmp: tempfile::TempDir,
    _data: tempfile::TempDir,
    url: String,
    job: String,
    key: String,
}

impl UnknownCall {
    fn new(worker_flags: &[&str]) -> UnknownCall {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let remote = {
            let _in = runtime.enter();
            MockRemote::start(Mode::Unkeyed).expect("start the mock remote")
        };
        remote.inject(Fault::Status(500));
        let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
        let effects = format!("{}/effects", remote.url());
        let out = idem_on(
            tmp.path(),
            &url,
            &[
                "enqueue",
                "http",
                "--url",
                &effects,
                "--unkeyed",
                "--timeout-ms",
                "2000",
                "--lookup-url",
                &effects,
                "--body",
                r#"{"amount": 10}"#,
            ],
        );
        let job = out.expect(0).json()["job"]["id"]
            .as_i64()
            .expect("a job id");
        let job = job.to_string();
        let mut worker = Worker::start(tmp.path(), &url, worker_flags);
        wait_for_job(tmp.path(), &url, &job, "dead");
        let report = worker.stop();
        assert!(report.contains("dead 1"), "{report}");
        assert_eq!(remote.requests_total(), 1, "{:?}", remote.log());
        assert_eq!(remote.applied_total(), 0);
        let key = format!("http:job:{job}");
        UnknownCall {
            remote,
            _runtime: runtime,
            tmp,
            _data: data,
            url,
            job,
            key,
        }
    }

    fn idem(&self, args: &[&str]) -> Out {
        idem_on(self.tmp.path(), &self.url, args)
    }

    /// The intent as `idem intents show KEY --json` prints it.
    fn intent(&self) -> Value {
        self.idem(&["intents", "show", &self.key, "--json"])
            .expect(0)
            .json()
    }
}

/// Polls `idem jobs show` until the job is in `state`; fails at once if it ends in
/// another final state, and after a generous deadline.
fn wait_for_job(tmp: &Path, url: &str, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        let job = idem_on(tmp, url, &["jobs", "show", id, "--json"])
            .expect(0)
            .json()["job"]
            .clone();
        if job["state"] == state {
            return job;
        }
        let settled = ["completed", "dead", "cancelled"].contains(&job["state"].as_str().unwrap());
        assert!(
            !settled && Instant::now() < deadline,
            "job {id} is not {state}: {job}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_unknown_call_is_reconciled_absent_then_sent_again() {
    let call = UnknownCall::new(&[]);
    let intent = call.intent();
    assert_eq!(intent["state"], "unknown", "{intent}");
    assert_eq!(intent["unkeyed"], true, "{intent}");
    call.idem(&["intents", "list"])
        .expect(0)
        .says(&[&call.key, "unknown", "HTTP 500"]);

    let report = call.idem(&["reconcile", "--settle", "0s", "--json"]);
    let json = report.expect(0).json();
    for (counter, n) in [
        ("looked_up", 1),
        ("absent", 1),
        ("jobs_retried", 1),
        ("manual", 0),
    ] {
        assert_eq!(json[counter], n, "{counter}; {report}");
    }
    assert_eq!(call.remote.applied_total(), 0);
    call.idem(&["intents", "show", &call.key])
        .expect(0)
        .says(&["state", "released"]);
    let job = wait_for_job(call.tmp.path(), &call.url, &call.job, "available");
    assert_eq!(job["kind"], "http");
    let attention = call.idem(&["intents", "list"]);
    assert_eq!(attention.expect(0).stdout.lines().count(), 1, "{attention}");

    // Released, the call is sent again under the same key, and applied once.
    let mut worker = Worker::start(call.tmp.path(), &call.url, &["--reconcile-every", "0"]);
    wait_for_job(call.tmp.path(), &call.url, &call.job, "completed");
    worker.stop();
    assert_eq!(call.remote.applied_for(&call.key), 1);
    let intent = call.intent();
    assert_eq!(intent["state"], "completed", "{intent}");
    assert_eq!(
        intent["remote_refs"].as_array().map(Vec::len),
        Some(1),
        "{intent}"
    );
}

#[test]
fn an_unknown_intent_resolved_absent_puts_its_job_back() {
    let call = UnknownCall::new(&["--reconcile-every", "0"]);
    call.idem(&["intents", "resolve", &call.key, "--absent"])
        .expect(0)
        .says(&[
            "is released",
            &format!("job {} was put back to run", call.job),
        ]);
    wait_for_job(call.tmp.path(), &call.url, &call.job, "available");
    assert_eq!(call.intent()["state"], "released");
    // Settled once; a second settlement is refused and changes nothing.
    call.idem(&["intents", "resolve", &call.key, "--applied"])
        .expect(CHECK_FAILED)
        .warns(&["is released", "only unknown or manual"]);
    assert_eq!(call.intent()["state"], "released");
}

#[test]
fn a_call_the_remote_cannot_tell_is_parked_manual_and_resolved_applied() {
    let call = UnknownCall::new(&["--reconcile-every", "0"]);
    call.remote.inject(Fault::LookupStatus(503));
    // A manual intent is what an operator's cron alarms on: exit 1, the report printed.
    let report = call.idem(&["reconcile", "--settle", "0s", "--json"]);
    let json = report.expect(CHECK_FAILED).json();
    assert_eq!(json["manual"], 1, "{report}");
    assert_eq!(json["jobs_retried"], 0, "{report}");
    report.warns(&["parked 1 intent(s) as manual"]);
    call.idem(&["intents", "list"])
        .expect(0)
        .says(&[&call.key, "manual", "lookup at"]);
    wait_for_job(call.tmp.path(), &call.url, &call.job, "dead");

    call.idem(&[
        "intents",
        "resolve",
        &call.key,
        "--applied",
        "--remote-ref",
        "r-1",
    ])
    .expect(0)
    .says(&["is completed", "was put back to run"]);
    let intent = call.intent();
    assert_eq!(intent["result"]["resolved_by"], "operator", "{intent}");
    assert_eq!(
        intent["remote_refs"],
        serde_json::json!(["r-1"]),
        "{intent}"
    );
    call.idem(&["intents", "show", &call.key]).expect(0).says(&[
        "completed",
        "r-1",
        "\"resolved_by\": \"operator\"",
    ]);

    // The job finds the call done and completes without sending it again.
    let mut worker = Worker::start(call.tmp.path(), &call.url, &["--reconcile-every", "0"]);
    wait_for_job(call.tmp.path(), &call.url, &call.job, "completed");
    worker.stop();
    assert_eq!(call.remote.requests_total(), 2, "{:?}", call.remote.log());
    assert_eq!(call.remote.applied_total(), 0);
}
