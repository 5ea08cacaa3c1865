//! Attacks on effects outside the store, against a real HTTP remote on loopback, on both
//! stores. Each case states a rule of DESIGN.md (sections 1 and 5, "Built-in job kind
//! `http`") or of ARCHITECTURE.md's intent invariant and replays one way of breaking
//! it: a settled call sent again under a new key, two jobs sharing one intent, an
//! applied call whose outcome cannot be stored, a job left dead after its intent was
//! settled, a job awaiting reconciliation purged. Time that decides leases and windows
//! is injected; every wait is a signal or a bounded poll of the database.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::remote::*;
use common::*;
use idem::intent::{Lookup, ReconcileOptions};
use idem::{
    EffectClass, EffectKey, Handler, Idem, Intent, IntentGuard, IntentPolicy, IntentResolution,
    IntentRow, IntentState, Job, JobContext, JobError, JobRow, JobState, PurgeTarget, WorkerConfig,
};
use idem_mock_remote::{Fault, MockRemote, Mode};
use idem_store_tests::TestDb;
use idem_store_tests::harness::within;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const DAY: Duration = Duration::from_secs(86_400);

/// The `http` kind with [`LEASE`] and a 5 s call timeout.
fn http() -> idem::builtin::Http {
    http_kind(Duration::from_secs(5))
}

/// [`config`] without a purger: the tests purge by hand, when they mean to.
fn no_purger(queue: &str) -> WorkerConfig {
    let mut c = config(queue, 1);
    c.purge_interval = None;
    c
}

async fn intent(idem: &Idem, key: &str) -> Option<IntentRow> {
    intent_of(idem, key).await
}

/// The POST requests the remote received, with the key each carried.
fn posts(remote: &MockRemote) -> Vec<Option<String>> {
    post_keys(remote)
}

/// Polls the job until `done` holds, for at most `secs` seconds (then the test fails);
/// returns it.
async fn poll_job(idem: &Idem, id: i64, secs: u64, done: impl Fn(&JobRow) -> bool) -> JobRow {
    let reached = async {
        loop {
            let job = common::job(idem, id).await;
            if done(&job) {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(secs, "the job reaches the awaited state", reached).await
}

/// An unkeyed `http` call in queue `out` with enqueue key `pay-1`, which the remote applies
/// and never answers: the intent is `unknown` and the job dead, awaiting reconciliation.
/// Returns the job, the intent's key and the still running worker's handle.
async fn an_unknown_unkeyed_call(
    idem: &Idem,
    remote: &MockRemote,
    lookup: bool,
) -> (
    JobRow,
    &'static str,
    idem::WorkerHandle,
    idem::intent::Reconciler,
) {
    let effects = format!("{}/effects", remote.url());
    let mut args = json!({
        "url": effects, "keyed": false, "timeout_ms": 2000, "body": {"order": 1, "amount": 100},
    });
    if lookup {
        args["lookup_url"] = json!(effects);
    }
    let job = idem
        .enqueue(Job::new("http", args).queue("out").enqueue_key("pay-1"))
        .await
        .unwrap()
        .job;
    remote.inject(Fault::ApplyThenHang);
    let mut w = idem.worker(no_purger("out")).unwrap();
    w.register(http()).unwrap();
    let reconciler = w.reconciler();
    let w = w.start();
    wait_state(idem, job.id, JobState::Dead).await;
    let key = "http:key:out:pay-1";
    let unknown = intent(idem, key).await.expect("the intent");
    assert_eq!(unknown.state, IntentState::Unknown, "{unknown:?}");
    assert_eq!(posts(remote).len(), 1, "sent once");
    (job, key, w, reconciler)
}

/// DESIGN.md: the `http` kind's key "is the same on every attempt", and a job retried
/// once its unknown call was settled "finds the stored outcome". An unkeyed call whose
/// outcome is unknown leaves its job dead; its enqueue key, held by a finished job, is
/// purged once past its window (3 days). An operator who settles the intent after that
/// (`idem intents resolve --applied`, a `manual` intent after a long weekend) retries
/// the job (`retry_settled`, forced past the window check); the job derives its key
/// again, finds no enqueue key, uses `http:job:{id}` and sends the applied call a
/// second time, under a new key the audit never links to the first.
async fn a_settled_http_call_is_not_sent_again_after_its_enqueue_key_is_purged(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let (job, key, w, _) = an_unknown_unkeyed_call(&idem, &remote, false).await;

    clock.advance(4 * DAY);
    let purged = idem.purge(PurgeTarget::EnqueueKeys, 100, |_| {}).await;
    assert_eq!(purged.unwrap(), 1, "the dead job's key is past its window");
    let applied = IntentResolution::Applied {
        result: json!({"settled_by": "operator"}),
        remote_refs: remote.copies(key),
    };
    let (settled, retried) = idem.resolve_intent(key, applied).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(retried, "the job that awaited the intent runs again");
    let after = poll_job(&idem, job.id, 20, |j| {
        matches!(j.state, JobState::Completed | JobState::Dead)
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(after.state, JobState::Completed, "{after:?}");
    let mine = idem::IntentList {
        job_id: Some(job.id),
        limit: 10,
        ..Default::default()
    };
    let intents: Vec<(String, IntentState)> = idem
        .intents(mine)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.state))
        .collect();
    assert_eq!(
        posts(&remote).len(),
        1,
        "the call the operator settled as applied was sent again: requests {:?}, remote \
         copies {}, job {:?}, the job's intents {intents:?}, unstable keys counted {}, \
         duplicates counted {}",
        posts(&remote),
        remote.applied_total(),
        after.state,
        idem.metrics().unstable_effect_keys,
        idem.metrics().duplicate_intents,
    );
}

/// DESIGN.md had the key `http:{queue}:{enqueue_key}`, else `http:job:{id}`. Two
/// different jobs, one without an enqueue key (id N) and one in queue `job` with the
/// enqueue key `N` (both valid), get the same intent key: the second finds the first's
/// completed intent and completes without ever making its call.
async fn two_http_jobs_never_share_an_intent(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    let idem = client(db, None);
    let args = json!({"url": format!("{}/effects", remote.url()), "body": {"ping": true}});
    let first = idem
        .enqueue(Job::new("http", args.clone()).queue("job"))
        .await
        .unwrap()
        .job;
    let second = idem
        .enqueue(
            Job::new("http", args)
                .queue("job")
                .enqueue_key(first.id.to_string()),
        )
        .await
        .unwrap();
    assert!(!second.deduplicated, "two jobs");
    let second = second.job;
    let mut w = idem.worker(no_purger("job")).unwrap();
    w.register(http()).unwrap();
    let w = w.start();
    let a = wait_state(&idem, first.id, JobState::Completed).await;
    let b = poll_job(&idem, second.id, 20, |j| {
        matches!(j.state, JobState::Completed | JobState::Dead)
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(
        posts(&remote).len(),
        2,
        "two jobs, each with its own call: requests {:?}; job {} {:?}, job {} {:?} ({:?})",
        posts(&remote),
        a.id,
        a.state,
        b.id,
        b.state,
        b.last_error,
    );
}

/// A remote on loopback that answers every request `201` with `body`, counting them.
async fn binary_remote(body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap_or(0));
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 201 Created\r\ncontent-type: application/octet-stream\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (format!("http://{addr}/effects"), count)
}

/// DESIGN.md: "2xx completes". A keyed call answered `201` with a binary body (a NUL
/// byte in it) was applied; its intent must record that, so no later attempt sends it
/// again. The result stores an excerpt of the body as a JSON string.
async fn an_applied_call_with_a_binary_answer_completes_its_intent(db: &TestDb) {
    let (url, requests) = binary_remote(b"\x00\x01PDF\x00binary").await;
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let args = json!({"url": url, "body": {"render": 7}});
    let job = idem
        .enqueue(Job::new("http", args).queue("out").enqueue_key("render-7"))
        .await
        .unwrap()
        .job;
    let mut w = idem.worker(no_purger("out")).unwrap();
    w.register(http()).unwrap();
    let w = w.start();
    let first = poll_job(&idem, job.id, 20, |j| {
        requests.load(Ordering::SeqCst) >= 1 && j.state != JobState::Running
    })
    .await;
    let key = "http:key:out:render-7";
    let after_first = intent(&idem, key).await.map(|r| r.state);
    // Past the intent's lease and the retry's delay: what does the next attempt do?
    clock.advance(LEASE + Duration::from_secs(60));
    let later = poll_job(&idem, job.id, 10, |j| {
        requests.load(Ordering::SeqCst) >= 2 || j.state == JobState::Completed
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    let sent = requests.load(Ordering::SeqCst);
    let now = intent(&idem, key).await.map(|r| r.state);
    assert_eq!(
        (after_first, now, sent),
        (
            Some(IntentState::Completed),
            Some(IntentState::Completed),
            1
        ),
        "the applied call's intent: after the first attempt {after_first:?} (job {:?}: \
         {:?}); after the lease {now:?}, the job {:?} ({:?}), requests sent {sent}",
        first.state,
        first.last_error,
        later.state,
        later.last_error,
    );
}

/// A handler of an unkeyed remote whose first attempt makes the call and then "crashes"
/// (parks its guard, the outcome unrecorded); a later attempt that meets the intent in
/// reconciliation tells the test and waits at a gate before it returns (the moment
/// between the answer and the job's write, which a busy pool can stretch).
struct Pay {
    remote: String,
    park: mpsc::UnboundedSender<IntentGuard>,
    met: mpsc::UnboundedSender<(i32, &'static str)>,
    gate: Gate,
}

#[derive(serde::Deserialize, serde::Serialize, Clone)]
struct Order {
    order: i64,
}

impl Pay {
    async fn post(&self, key: &str, order: &Order) -> Result<String, String> {
        post_effect(&self.remote, key, order).await
    }
}

impl Handler for Pay {
    const KIND: &'static str = "pay";
    const EFFECT: EffectClass = EffectClass::UnkeyedRemote;
    type Args = Order;

    async fn run(&self, cx: &mut JobContext, order: Order) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        let key = EffectKey::new("pay").part(order.order);
        let guard = match cx.intent(&key, &order).await? {
            Intent::Begun(guard) => guard,
            Intent::Completed(_) => {
                let _ = self.met.send((attempt, "completed"));
                return Ok(());
            }
            other => {
                let _ = self.met.send((attempt, "reconcile"));
                self.gate.wait().await;
                return Err(other.wait().expect("not begun"));
            }
        };
        let id = guard
            .send(self.post(guard.key(), &order))
            .await?
            .map_err(JobError::retry)?;
        if attempt == 1 {
            let _ = self.park.send(guard);
            return Err(JobError::retry("crashed after the call"));
        }
        guard.complete(json!({"id": id}), vec![id]).await?;
        let _ = self.met.send((attempt, "sent"));
        Ok(())
    }

    fn intent_policy(&self) -> IntentPolicy {
        IntentPolicy {
            lease: LEASE,
            call_timeout: Duration::from_secs(60),
            ..IntentPolicy::default()
        }
    }

    async fn lookup(&self, intent: &IntentRow, _: Order) -> Lookup {
        lookup_copies(&self.remote, intent).await
    }
}

/// A `pay` job whose first attempt crashed after its unkeyed call was applied, and whose
/// second attempt took the call over (`unknown`) and waits at the gate, about to fail
/// dead to await it; a reconciler pass has just found the call applied and settled the
/// intent while the job still ran (so it left the job alone).
struct SettledWhileRunning {
    idem: Idem,
    job: JobRow,
    clock: idem::ManualClock,
    reconciler: idem::intent::Reconciler,
    worker: idem::WorkerHandle,
    opts: ReconcileOptions,
    first_pass: idem::intent::ReconcileReport,
    open: tokio::sync::oneshot::Sender<()>,
    _remote: MockRemote,
    _zombie: IntentGuard,
}

impl SettledWhileRunning {
    async fn start(db: &TestDb, order: i64) -> SettledWhileRunning {
        let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
        let clock = db_clock(db).await;
        let idem = client(db, Some(Arc::new(clock.clone())));
        let job = idem
            .enqueue(Job::new("pay", json!({ "order": order })).queue("pay"))
            .await
            .unwrap()
            .job;
        let (park, mut parked) = events();
        let (met, mut meets) = events();
        let (gate, open) = Gate::new();
        let pay = Pay {
            remote: remote.url().to_owned(),
            park,
            met,
            gate,
        };
        let mut w = idem.worker(no_purger("pay")).unwrap();
        w.register(pay).unwrap();
        let reconciler = w.reconciler();
        let worker = w.start();
        let zombie = within(30, "the first attempt calls and crashes", parked.recv())
            .await
            .expect("a guard");
        assert_eq!(remote.applied_total(), 1);
        wait_state(&idem, job.id, JobState::Retryable).await;
        clock.advance(LEASE + Duration::from_secs(1));
        assert_eq!(
            within(30, "the takeover", meets.recv()).await,
            Some((2, "reconcile"))
        );
        let opts = ReconcileOptions {
            settle: Duration::from_secs(1),
            ..ReconcileOptions::default()
        };
        let first_pass = reconciler.run(opts).await.unwrap();
        assert_eq!(first_pass.applied, 1, "{first_pass:?}");
        SettledWhileRunning {
            idem,
            job,
            clock,
            reconciler,
            worker,
            opts,
            first_pass,
            open,
            _remote: remote,
            _zombie: zombie,
        }
    }
}

/// `awaiting_reconciliation`: a job that met an unknown intent "stays dead until
/// reconciliation or an operator settles the intent and retries the job". The holder
/// of an unkeyed call crashed after sending; the job's next attempt takes the intent
/// over (`unknown`) and is about to fail dead when the reconciler (which `idem worker`
/// runs beside the jobs) finds the call applied: it settles the intent, but the job is
/// still running, so `retry_settled` does nothing; the job then goes dead, and no later
/// pass retries it (the intent is settled). The job never completes.
async fn a_job_dead_on_an_intent_settled_meanwhile_is_retried(db: &TestDb) {
    let run = SettledWhileRunning::start(db, 3).await;
    let (idem, job, reconciler, clock, w) =
        (&run.idem, &run.job, &run.reconciler, &run.clock, run.worker);
    let (opts, first_pass, open) = (run.opts, run.first_pass, run.open);
    let _ = open.send(());
    let failed = poll_job(idem, job.id, 20, |j| j.state != JobState::Running).await;

    clock.advance(Duration::from_secs(5));
    let second_pass = reconciler.run(opts).await.unwrap();
    let last = poll_job(idem, job.id, 10, |j| j.state == JobState::Completed).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(
        last.state,
        JobState::Completed,
        "the intent is {:?}, but its job stays {:?} ({:?}); the passes: {first_pass:?}, \
         then {second_pass:?}; after the first pass the job was {:?}",
        intent(idem, "pay:3").await.map(|r| r.state),
        last.state,
        last.last_error,
        failed.state,
    );
}

/// A job awaiting reconciliation (dead, its unkeyed call `unknown`) "stays dead until
/// reconciliation or an operator settles the intent and retries the job", and the
/// reconciler looks the call up through the job's args (`lookup_url`). The dead-job
/// purge (7 days by default) deletes it anyway: afterwards reconciliation skips the
/// intent for ever (no job, no lookup), and settling it by hand retries nothing.
async fn a_dead_job_awaiting_reconciliation_is_kept(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let (job, key, w, reconciler) = an_unknown_unkeyed_call(&idem, &remote, true).await;
    // The lookup cannot tell: the intent is parked `manual` for an operator.
    remote.inject(Fault::LookupStatus(503));
    clock.advance(Duration::from_secs(5));
    let opts = ReconcileOptions {
        settle: Duration::from_secs(1),
        ..ReconcileOptions::default()
    };
    let parked = reconciler.run(opts).await.unwrap();
    assert_eq!(parked.manual, 1, "{parked:?}");

    clock.advance(8 * DAY);
    let purged = idem
        .purge(PurgeTarget::DeadJobs, 100, |_| {})
        .await
        .unwrap();
    let kept = idem.job(job.id).await.unwrap();
    let absent = idem.resolve_intent(key, IntentResolution::Absent).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(purged, 0, "the only dead job awaits its intent");
    let settled = absent
        .as_ref()
        .map(|(row, retried)| (row.state, *retried))
        .ok();
    assert_eq!(
        settled,
        Some((IntentState::Released, true)),
        "released and put back"
    );
    assert!(
        kept.is_some(),
        "the dead job awaiting its intent was purged ({purged} purged); the operator then \
         settles the intent {key:?} absent and gets {:?}: the call is never sent",
        absent.map(|(row, retried)| (row.state, retried)),
    );
}

/// An enqueue key is valid with 1–255 printable ASCII characters, spaces allowed, and
/// the `http` kind takes its intent key from it; but an effect-key part may hold no
/// space, and a key is at most 512 bytes after `:` and `%` are escaped (3 bytes each).
/// An `http` job with such an enqueue key (`order 42`, or 200 colons) is accepted and
/// then dies on every attempt before calling.
async fn an_http_job_with_any_valid_enqueue_key_can_run(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    let idem = client(db, None);
    let args = json!({"url": format!("{}/effects", remote.url()), "body": {"order": 42}});
    let mut jobs = Vec::new();
    for key in ["order 42".to_owned(), ":".repeat(200)] {
        let job = Job::new("http", args.clone()).queue("out").enqueue_key(key);
        jobs.push(idem.enqueue(job).await.unwrap().job);
    }
    let mut w = idem.worker(no_purger("out")).unwrap();
    w.register(http()).unwrap();
    let w = w.start();
    let mut ends = Vec::new();
    for job in &jobs {
        let end = poll_job(&idem, job.id, 20, |j| {
            matches!(j.state, JobState::Completed | JobState::Dead)
        })
        .await;
        ends.push((end.state, end.last_error));
    }
    within(30, "shutdown", w.shutdown()).await;
    let states: Vec<JobState> = ends.iter().map(|e| e.0).collect();
    assert_eq!(
        (states, posts(&remote).len()),
        (vec![JobState::Completed, JobState::Completed], 2),
        "{ends:?}"
    );
}

idem_store_tests::store_cases!(
    a_settled_http_call_is_not_sent_again_after_its_enqueue_key_is_purged,
    two_http_jobs_never_share_an_intent,
    an_applied_call_with_a_binary_answer_completes_its_intent,
    a_job_dead_on_an_intent_settled_meanwhile_is_retried,
    a_dead_job_awaiting_reconciliation_is_kept,
    an_http_job_with_any_valid_enqueue_key_can_run,
);
