//! Effects outside the store, against a real HTTP mock remote on loopback, on both
//! stores: two executions of one logical call reach the remote once; a zombie holder
//! whose intent was taken over can write nothing and sends nothing; a different request
//! under a used key is refused before anything is sent; an unkeyed call whose outcome is
//! unknown is reconciled (applied, duplicate, cannot tell), never re-sent blindly; and a
//! paused holder that sends after a takeover leaves a second copy that the audit marks
//! `duplicate`. Time that decides leases is injected; every wait is a signal.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::remote::*;
use common::*;
use idem::intent::{Lookup, ReconcileOptions};
use idem::{
    EffectClass, EffectKey, Handler, Idem, Intent, IntentGuard, IntentPolicy, IntentRow,
    IntentState, Job, JobContext, JobError, JobState,
};
use idem_mock_remote::{Fault, MockRemote, Mode};
use idem_store_tests::harness::within;
use idem_store_tests::{TestDb, open_store};
use tokio::sync::{Barrier, mpsc};

#[derive(serde::Deserialize, serde::Serialize, Clone)]
struct Order {
    order: i64,
    amount: i64,
}

/// Charges an order at the mock remote through an intent keyed by the order. With a
/// barrier, waits at it before reserving; with a pause, the first attempt confirms its
/// lease and then waits for the test before the request leaves. Reports what each
/// attempt met.
struct Charge {
    remote: String,
    class: EffectClass,
    barrier: Option<Arc<Barrier>>,
    met_barrier: std::sync::atomic::AtomicBool,
    met_pause: std::sync::atomic::AtomicBool,
    pause: Option<Arc<Gate>>,
    paused: Option<mpsc::UnboundedSender<()>>,
    park: Option<mpsc::UnboundedSender<IntentGuard>>,
    lease: Duration,
    seen: mpsc::UnboundedSender<(i32, &'static str)>,
}

impl Charge {
    fn new(
        remote: &MockRemote,
        class: EffectClass,
    ) -> (Charge, mpsc::UnboundedReceiver<(i32, &'static str)>) {
        let (seen, rx) = events();
        let charge = Charge {
            remote: remote.url().to_owned(),
            class,
            barrier: None,
            met_barrier: Default::default(),
            met_pause: Default::default(),
            pause: None,
            paused: None,
            park: None,
            lease: LEASE,
            seen,
        };
        (charge, rx)
    }

    async fn post(&self, key: &str, order: &Order) -> Result<String, String> {
        post_effect(&self.remote, key, order).await
    }
}

impl Handler for Charge {
    const KIND: &'static str = "charge";
    const EFFECT: EffectClass = EffectClass::UnkeyedRemote;
    type Args = Order;

    async fn run(&self, cx: &mut JobContext, order: Order) -> Result<(), JobError> {
        if let Some(b) = &self.barrier
            && !self
                .met_barrier
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            b.wait().await;
        }
        let attempt = cx.job().attempt;
        let key = EffectKey::new("charge").part(order.order);
        let intent = cx.intent_as(self.class, &key, &order).await?;
        let guard = match intent {
            Intent::Begun(guard) => guard,
            other => {
                let met = match &other {
                    Intent::InProgress(_) => "in_progress",
                    Intent::Completed(_) => "completed",
                    Intent::Failed(_) => "failed",
                    Intent::Reconcile(_) => "reconcile",
                    Intent::Begun(_) => unreachable!(),
                };
                let _ = self.seen.send((attempt, met));
                return other.wait().map_or(Ok(()), Err);
            }
        };
        let _ = self.seen.send((attempt, "begun"));
        if attempt == 1
            && let Some(park) = &self.park
        {
            let _ = park.send(guard);
            return Err(JobError::retry("parked: the test holds the guard"));
        }
        let sent = guard
            .send(async {
                if !self
                    .met_pause
                    .swap(true, std::sync::atomic::Ordering::SeqCst)
                    && let (Some(pause), Some(paused)) = (&self.pause, &self.paused)
                {
                    let _ = paused.send(());
                    pause.wait().await;
                }
                self.post(guard.key(), &order).await
            })
            .await;
        let sent = match sent {
            Ok(sent) => sent,
            Err(e) => {
                let _ = self.seen.send((attempt, "abandoned"));
                return Err(e.into());
            }
        };
        match sent {
            Ok(id) => {
                let done = guard
                    .complete(serde_json::json!({"id": id}), vec![id])
                    .await;
                let _ = self
                    .seen
                    .send((attempt, if done.is_ok() { "completed-it" } else { "lost" }));
                done?;
                Ok(())
            }
            Err(e) => Err(JobError::retry(e)),
        }
    }

    fn intent_policy(&self) -> IntentPolicy {
        IntentPolicy {
            lease: self.lease,
            call_timeout: self.lease / 2,
            ..IntentPolicy::default()
        }
    }

    async fn lookup(&self, intent: &IntentRow, _: Order) -> Lookup {
        lookup_copies(&self.remote, intent).await
    }
}

fn order(order: i64, amount: i64) -> serde_json::Value {
    serde_json::json!({"order": order, "amount": amount})
}

async fn intent(idem: &Idem, key: &str) -> IntentRow {
    intent_of(idem, key).await.expect("the intent exists")
}

/// Two jobs for one order (a producer's duplicate) run at once on two pools against an
/// unkeyed remote, which would show a second call as a second copy: one attempt begins
/// the intent and calls; the other is told the call is in progress, and its next attempt
/// finds it completed. The remote saw one request.
async fn two_executions_reserve_one_intent_and_call_once(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    remote.hold(); // the first call waits at the remote until the other job has looked
    let idem = client(db, None);
    let jobs: Vec<Job> = (0..2)
        .map(|_| Job::new("charge", order(42, 100)).queue("pay"))
        .collect();
    let jobs = idem.enqueue_many(jobs).await.unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let (seen, mut met_rx) = events();
    let (mut handles, mut stores) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let store = open_store(&db.url).await.expect("another pool");
        let mut w = Idem::from_store(store.clone())
            .worker(config("pay", 1))
            .unwrap();
        let (mut charge, _) = Charge::new(&remote, EffectClass::UnkeyedRemote);
        charge.barrier = Some(barrier.clone());
        // The waiter snoozes until the holder's lease ends (database clock): keep it short.
        charge.lease = Duration::from_secs(2);
        charge.seen = seen.clone();
        w.register(charge).unwrap();
        handles.push(w.start());
        stores.push(store);
    }
    let mut met = Vec::new();
    while met.len() < 2 {
        met.push(
            within(30, "both reserve", met_rx.recv())
                .await
                .expect("seen")
                .1,
        );
    }
    met.sort();
    assert_eq!(
        met,
        ["begun", "in_progress"],
        "one holds the intent, one waits"
    );
    within(30, "the call at the remote", remote.wait_for_waiting(1)).await;
    remote.release();
    for job in &jobs {
        wait_state(&idem, job.job.id, JobState::Completed).await;
    }
    for h in handles {
        within(30, "shutdown", h.shutdown()).await;
    }
    while let Ok(m) = met_rx.try_recv() {
        met.push(m.1);
    }
    met.sort();
    assert_eq!(
        met,
        ["begun", "completed", "completed-it", "in_progress"],
        "{met:?}"
    );
    assert_eq!(remote.requests_total(), 1, "one call reached the remote");
    assert_eq!(remote.applied_total(), 1);
    let row = intent(&idem, "charge:42").await;
    assert_eq!((row.state, row.attempt), (IntentState::Completed, 1));
}

/// A holder whose lease lapsed (the job's next attempt took the intent over and
/// completed the call) can do nothing: its renewal, its send and its completion are all
/// refused, and its send never reaches the remote.
async fn a_zombie_holder_can_not_renew_send_or_complete(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let job = idem
        .enqueue(Job::new("charge", order(7, 100)).queue("pay"))
        .await
        .unwrap()
        .job;
    let (mut charge, mut seen) = Charge::new(&remote, EffectClass::KeyedRemote);
    let (park, mut parked) = events();
    charge.park = Some(park);
    let mut w = idem.worker(config("pay", 1)).unwrap();
    w.register(charge).unwrap();
    let w = w.start();
    let zombie = within(30, "the first attempt parks its guard", parked.recv())
        .await
        .expect("a guard");
    assert_eq!(seen.recv().await, Some((1, "begun")));
    // Once the failed attempt is recorded (its retry is due 5 s later on the injected
    // clock), past the intent's lease and that delay, the next attempt takes over.
    wait_state(&idem, job.id, JobState::Retryable).await;
    clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(
        within(30, "the takeover", seen.recv()).await,
        Some((2, "begun"))
    );
    assert_eq!(
        within(30, "its call", seen.recv()).await,
        Some((2, "completed-it"))
    );
    within(30, "shutdown", w.shutdown()).await;
    let taken = intent(&idem, "charge:7").await;
    assert_eq!(
        (taken.state, taken.attempt, taken.fence),
        (IntentState::Completed, 2, 2)
    );

    let lost = |r: Result<(), idem::IdemError>| {
        let e = r.expect_err("a zombie is refused");
        assert!(
            matches!(
                e,
                idem::IdemError::Store(idem::StoreError::IntentLost { .. })
            ),
            "{e}"
        );
    };
    // The send first: it must find out for itself, before the call starts.
    lost(
        zombie
            .send(async { unreachable!("a zombie's call never starts") })
            .await,
    );
    lost(zombie.confirm().await);
    lost(
        zombie
            .complete(serde_json::json!({}), vec![])
            .await
            .map(|_| ()),
    );
    assert_eq!(remote.requests_total(), 1, "only the takeover's call");
    assert_eq!(
        intent(&idem, "charge:7").await,
        taken,
        "the zombie changed nothing"
    );
}

/// How reconciliation will find the call of [`unknown_http_call`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Found {
    Applied,
    Duplicate,
    CannotTell,
}

/// An unkeyed `http` job whose call the remote applied and then never answered: the
/// client times out, the intent becomes `unknown` and the job stops dead, not sent again.
/// Then reconciliation looks the call up and finds it as `found` says (a second copy is
/// made with the same reference first for `Duplicate`; the lookup answers 503 for
/// `CannotTell`).
async fn unknown_http_call_is_reconciled(db: &TestDb, found: Found) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let effects = format!("{}/effects", remote.url());
    let args = serde_json::json!({
        "url": effects, "keyed": false, "timeout_ms": 2000, "lookup_url": effects,
        "body": {"order": 9, "amount": 100},
    });
    let job = idem
        .enqueue(Job::new("http", args).queue("out").enqueue_key("pay-9"))
        .await
        .unwrap()
        .job;
    remote.inject(Fault::ApplyThenHang);
    let http = http_kind(Duration::from_secs(5));
    let mut w = idem.worker(config("out", 1)).unwrap();
    w.register(http).unwrap();
    let reconciler = w.reconciler();
    let w = w.start();
    let dead = wait_state(&idem, job.id, JobState::Dead).await;
    assert!(
        dead.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("reconcil"),
        "{dead:?}"
    );
    let key = "http:key:out:pay-9";
    let unknown = intent(&idem, key).await;
    assert_eq!(unknown.state, IntentState::Unknown, "{unknown:?}");
    assert_eq!(
        (remote.applied_total(), posts(&remote)),
        (1, 1),
        "not sent again"
    );

    let copies = match found {
        Found::Duplicate => {
            let late = http_client()
                .post(&effects)
                .header("Idempotency-Key", key)
                .json(&serde_json::json!({"late": true}))
                .send()
                .await
                .unwrap();
            assert_eq!(late.status(), 201);
            2
        }
        Found::CannotTell => {
            remote.inject(Fault::LookupStatus(503));
            1
        }
        Found::Applied => 1,
    };
    clock.advance(Duration::from_secs(2));
    let opts = ReconcileOptions {
        settle: Duration::from_secs(1),
        ..ReconcileOptions::default()
    };
    let report = reconciler.run(opts).await.unwrap();
    assert_eq!(report.looked_up, 1, "{report:?}");
    let settled = intent(&idem, key).await;
    let ids = remote.copies(key);
    assert_eq!(ids.len(), copies);
    match found {
        Found::Applied => {
            assert_eq!((report.applied, report.jobs_retried), (1, 1), "{report:?}");
            assert_eq!(
                (settled.state, settled.remote_refs.clone()),
                (IntentState::Completed, ids)
            );
        }
        Found::Duplicate => {
            assert_eq!(
                (report.duplicates, report.jobs_retried),
                (1, 1),
                "{report:?}"
            );
            assert_eq!(
                (settled.state, settled.remote_refs.clone()),
                (IntentState::Duplicate, ids)
            );
            assert_eq!(idem.metrics().duplicate_intents, 1);
        }
        Found::CannotTell => {
            assert_eq!((report.manual, report.jobs_retried), (1, 0), "{report:?}");
            assert_eq!(settled.state, IntentState::Manual);
            assert!(settled.error.as_deref().unwrap_or_default().contains("503"));
            let again = reconciler.run(opts).await.unwrap();
            assert_eq!(
                again.looked_up, 0,
                "manual waits for an operator: {again:?}"
            );
        }
    }
    if found != Found::CannotTell {
        let done = wait_state(&idem, job.id, JobState::Completed).await;
        assert_eq!(
            done.attempt, 1,
            "put back with a fresh count, it ran once more"
        );
    } else {
        assert_eq!(common::job(&idem, job.id).await.state, JobState::Dead);
    }
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(
        posts(&remote),
        copies,
        "the job never sent the call a second time"
    );
}

async fn an_unknown_call_found_applied_completes_without_a_resend(db: &TestDb) {
    unknown_http_call_is_reconciled(db, Found::Applied).await;
}

async fn an_unknown_call_found_twice_is_marked_duplicate(db: &TestDb) {
    unknown_http_call_is_reconciled(db, Found::Duplicate).await;
}

async fn an_unknown_call_the_remote_can_not_tell_about_is_parked_manual(db: &TestDb) {
    unknown_http_call_is_reconciled(db, Found::CannotTell).await;
}

/// An unkeyed call answered 500 (the remote applied nothing, but the caller cannot know)
/// is unknown; the remote's lookup says absent, yet it is not sent again until the settle
/// delay has passed since the outcome became unknown (a request still in flight there
/// must have landed first). After it, the intent is released, the job sends once more,
/// and the remote holds one copy.
async fn an_absent_call_is_sent_again_only_after_the_settle_delay(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let effects = format!("{}/effects", remote.url());
    let args = serde_json::json!({"url": effects, "keyed": false, "lookup_url": effects});
    let job = idem
        .enqueue(Job::new("http", args).queue("out").enqueue_key("pay-4"))
        .await
        .unwrap()
        .job;
    remote.inject(Fault::Status(500));
    let http = http_kind(Duration::from_secs(5));
    let mut w = idem.worker(config("out", 1)).unwrap();
    w.register(http).unwrap();
    let reconciler = w.reconciler();
    let w = w.start();
    wait_state(&idem, job.id, JobState::Dead).await;
    let opts = ReconcileOptions {
        settle: Duration::from_secs(60),
        ..ReconcileOptions::default()
    };
    let early = reconciler.run(opts).await.unwrap();
    assert_eq!((early.settling, early.absent), (1, 0), "{early:?}");
    let key = "http:key:out:pay-4";
    assert_eq!(intent(&idem, key).await.state, IntentState::Unknown);
    assert_eq!(
        common::job(&idem, job.id).await.state,
        JobState::Dead,
        "not put back yet"
    );
    clock.advance(Duration::from_secs(61));
    let late = reconciler.run(opts).await.unwrap();
    assert_eq!((late.absent, late.jobs_retried), (1, 1), "{late:?}");
    wait_state(&idem, job.id, JobState::Completed).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(
        (posts(&remote), remote.applied_for(key)),
        (2, 1),
        "sent again once"
    );
    let row = intent(&idem, key).await;
    assert_eq!((row.state, row.attempt), (IntentState::Completed, 2));
}

/// A call that hangs while its intent's lease can no longer be renewed (here: the lease
/// ended, on the injected clock, so the next renewal is refused) is abandoned by the
/// guard instead of running on past the lease, and the job tries again later.
async fn a_hanging_call_is_abandoned_when_its_lease_can_not_be_renewed(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    remote.inject(Fault::ApplyThenHang);
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    idem.enqueue(Job::new("charge", order(8, 100)).queue("pay"))
        .await
        .unwrap();
    let (mut charge, mut seen) = Charge::new(&remote, EffectClass::KeyedRemote);
    charge.lease = Duration::from_millis(600); // renewed every 200 ms, in real time
    let mut w = idem.worker(config("pay", 1)).unwrap();
    w.register(charge).unwrap();
    let w = w.start();
    assert_eq!(
        within(30, "the call starts", seen.recv()).await,
        Some((1, "begun"))
    );
    within(
        30,
        "the call is applied and hangs",
        remote.wait_for_applied(1),
    )
    .await;
    clock.advance(Duration::from_secs(1));
    let next = within(30, "the guard gives up", seen.recv()).await;
    assert_eq!(next, Some((1, "abandoned")));
    within(30, "shutdown", w.shutdown()).await;
    let row = intent(&idem, "charge:8").await;
    assert_eq!(row.state, IntentState::InProgress, "left to lapse: {row:?}");
    assert_eq!(remote.applied_for("charge:8"), 1);
}

/// The guard renews the lease while the call runs: a call held at the remote for longer
/// than the lease (seen: the stored lease end moved past the first one) still completes,
/// and no other holder could have taken the intent meanwhile.
async fn a_call_longer_than_its_lease_completes_under_renewals(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    remote.hold();
    let idem = client(db, None); // the database clock: renewals move the lease end
    idem.enqueue(Job::new("charge", order(11, 100)).queue("pay"))
        .await
        .unwrap();
    let (mut charge, mut seen) = Charge::new(&remote, EffectClass::KeyedRemote);
    charge.lease = Duration::from_secs(3); // renewed every second
    let mut w = idem.worker(config("pay", 1)).unwrap();
    w.register(charge).unwrap();
    let w = w.start();
    assert_eq!(
        within(30, "the call starts", seen.recv()).await,
        Some((1, "begun"))
    );
    within(
        30,
        "the call waits at the remote",
        remote.wait_for_waiting(1),
    )
    .await;
    let first = intent(&idem, "charge:11")
        .await
        .lease_expires_at
        .expect("a lease");
    let renewed = async {
        loop {
            let now = intent(&idem, "charge:11").await.lease_expires_at;
            if now.is_some_and(|end| end > first + chrono::Duration::seconds(3)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    within(30, "renewals carry the lease past its first end", renewed).await;
    remote.release();
    let done = within(30, "the call completes", seen.recv()).await;
    assert_eq!(done, Some((1, "completed-it")));
    within(30, "shutdown", w.shutdown()).await;
    let row = intent(&idem, "charge:11").await;
    assert_eq!(
        (row.state, row.attempt, row.fence),
        (IntentState::Completed, 1, 1)
    );
}

/// A second job that names the same call (the same key) with a different request is
/// refused before anything is sent: it dies with the mismatch named, the remote saw only
/// the first request, and the first call's record is unchanged.
async fn a_different_request_under_a_used_key_is_refused_unsent(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let idem = client(db, None);
    let first = idem
        .enqueue(Job::new("charge", order(21, 100)).queue("pay"))
        .await
        .unwrap()
        .job;
    let (charge, _seen) = Charge::new(&remote, EffectClass::UnkeyedRemote);
    let mut w = idem.worker(config("pay", 1)).unwrap();
    w.register(charge).unwrap();
    let w = w.start();
    wait_state(&idem, first.id, JobState::Completed).await;
    let before = intent(&idem, "charge:21").await;
    let second = idem
        .enqueue(Job::new("charge", order(21, 999)).queue("pay"))
        .await
        .unwrap()
        .job;
    let dead = wait_state(&idem, second.id, JobState::Dead).await;
    within(30, "shutdown", w.shutdown()).await;
    let error = dead.last_error.unwrap_or_default();
    assert!(error.contains("different request"), "{error}");
    assert_eq!(posts(&remote), 1, "nothing sent for the second job");
    assert_eq!(
        intent(&idem, "charge:21").await,
        before,
        "the record is unchanged"
    );
}

/// How many POST requests the remote received.
fn posts(remote: &MockRemote) -> usize {
    post_keys(remote).len()
}

/// An unkeyed call whose holder is paused after confirming its lease (the request not yet
/// written) loses the intent: the job's next claim does not send again but reconciles;
/// the remote has no copy, so after the settle delay the call is sent once more and
/// completes. Then the paused holder wakes and sends a second copy, and its completion
/// is refused; the audit finds two copies and marks the intent `duplicate`.
async fn a_late_copy_from_a_paused_holder_is_marked_duplicate_by_the_audit(db: &TestDb) {
    let remote = MockRemote::start(Mode::Unkeyed).expect("mock");
    let clock = db_clock(db).await;
    let idem = client(db, Some(Arc::new(clock.clone())));
    let job = idem
        .enqueue(Job::new("charge", order(5, 100)).queue("pay"))
        .await
        .unwrap()
        .job;
    let (mut charge, mut seen) = Charge::new(&remote, EffectClass::UnkeyedRemote);
    let (pause, wake) = Gate::new();
    let (paused_tx, mut paused) = events();
    charge.pause = Some(Arc::new(pause));
    charge.paused = Some(paused_tx);
    let mut w = idem.worker(config("pay", 2)).unwrap();
    w.register(charge).unwrap();
    let reconciler = w.reconciler();
    let w = w.start();
    within(30, "the holder pauses before its request", paused.recv()).await;
    assert_eq!(seen.recv().await, Some((1, "begun")));

    clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(
        idem.rescue().await.unwrap().len(),
        1,
        "the job's lease lapsed too"
    );
    assert_eq!(
        within(30, "the next claim", seen.recv()).await,
        Some((2, "reconcile"))
    );
    wait_state(&idem, job.id, JobState::Dead).await;
    assert_eq!(posts(&remote), 0, "the takeover did not send");

    clock.advance(Duration::from_secs(2));
    let opts = ReconcileOptions {
        settle: Duration::from_secs(1),
        ..ReconcileOptions::default()
    };
    let report = reconciler.run(opts).await.unwrap();
    assert_eq!((report.absent, report.jobs_retried), (1, 1), "{report:?}");
    assert_eq!(
        within(30, "the resend", seen.recv()).await.map(|s| s.1),
        Some("begun")
    );
    let completed = within(30, "its completion", seen.recv()).await;
    assert_eq!(completed.map(|s| s.1), Some("completed-it"));
    wait_state(&idem, job.id, JobState::Completed).await;
    assert_eq!(remote.applied_total(), 1);

    let _ = wake.send(());
    assert_eq!(
        within(30, "the late copy", seen.recv()).await,
        Some((1, "lost"))
    );
    assert_eq!(
        remote.applied_total(),
        2,
        "the paused holder's copy landed late"
    );
    let completed = intent(&idem, "charge:5").await;
    assert_eq!(completed.state, IntentState::Completed, "{completed:?}");

    clock.advance(Duration::from_secs(2));
    let audit = reconciler.run(opts).await.unwrap();
    assert_eq!((audit.audited, audit.audit_duplicates), (1, 1), "{audit:?}");
    let dup = intent(&idem, "charge:5").await;
    assert_eq!(dup.state, IntentState::Duplicate);
    let mut refs = dup.remote_refs.clone();
    refs.sort();
    let mut ids = remote.copies("charge:5");
    ids.sort();
    assert_eq!(refs, ids, "every copy's id, none picked");
    assert_eq!(idem.metrics().duplicate_intents, 1);
    within(30, "shutdown", w.shutdown()).await;
}

idem_store_tests::store_cases!(
    two_executions_reserve_one_intent_and_call_once,
    a_zombie_holder_can_not_renew_send_or_complete,
    an_unknown_call_found_applied_completes_without_a_resend,
    an_unknown_call_found_twice_is_marked_duplicate,
    an_unknown_call_the_remote_can_not_tell_about_is_parked_manual,
    an_absent_call_is_sent_again_only_after_the_settle_delay,
    a_hanging_call_is_abandoned_when_its_lease_can_not_be_renewed,
    a_call_longer_than_its_lease_completes_under_renewals,
    a_different_request_under_a_used_key_is_refused_unsent,
    a_late_copy_from_a_paused_holder_is_marked_duplicate_by_the_audit,
);
