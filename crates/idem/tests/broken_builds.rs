//! The test-only broken builds break what they say they break, on both stores
//! (ARCHITECTURE.md, "Test-only broken builds"). Compiled only with one of their features:
//!
//! ```text
//! cargo test -p idem --features chaos-break-fence --test broken_builds
//! cargo test -p idem --features chaos-break-effect-key --test broken_builds
//! ```
//!
//! `chaos-break-fence`: the scene of `tests/fencing.rs` turned around. Worker A claims a
//! job and stalls before its effect transaction; its lease expires, the job is rescued,
//! and worker B claims it and commits its effect row and the completion. Then A goes on:
//! its `cx.begin()` is accepted, its effect row (made without an effect key) commits under
//! its stale fence, and its completion too. Below the engine, each write of a stale claim
//! that the fence guards in a normal build is accepted, except the heartbeat and the
//! failure, which the break keeps.
//!
//! `chaos-break-effect-key`: an attempt that claims its effect key (and posts a ledger
//! entry), makes its effect and ends without completing (its transaction dropped, as by a
//! crash) leaves the key and the entry committed and its effect row gone; the next attempt
//! finds the key taken and the entry posted, and makes nothing: the effect is lost.
//!
//! Time is injected; every wait is on a signal.
#![cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]

mod common;

/// Rows of a caller's query whose columns are all integers.
async fn ints(idem: &idem::Idem, sql: &str) -> Vec<Vec<i64>> {
    let rows = idem.store().query(sql, &[]).await.unwrap();
    let int = |v: &idem::SqlValue| v.as_i64().expect("an integer column");
    rows.iter().map(|r| r.iter().map(int).collect()).collect()
}

#[cfg(feature = "chaos-break-fence")]
mod fence {
    use super::common::*;
    use super::ints;
    use idem::{
        AttemptOutcome, EffectClass, Handler, Idem, IdemError, Job, JobContext, JobError, JobState,
        LeaseToken,
    };
    use idem_store::{
        CounterNext, EffectClaim, EffectClaimed, JobComplete, JobCompleteMany, JobFail, JobLock,
        LedgerPost, LedgerPosted,
    };
    use idem_store_tests::fixture::{
        LEASE_MS, assert_lease_lost, heartbeat, job_in, reclaimed, t0,
    };
    use idem_store_tests::{TestDb, harness::within};

    const QUEUE: &str = "broken";

    /// Worker A's handler: reports its claim, waits to be released, then opens its effect
    /// transaction, writes its effect row with no effect key and completes; reports how
    /// that went.
    struct Zombie {
        started: Once<LeaseToken>,
        release: Gate,
        done: Once<Result<(), IdemError>>,
    }

    impl Handler for Zombie {
        const KIND: &'static str = EFFECT_KIND;
        const EFFECT: EffectClass = EffectClass::Transactional;
        type Args = serde_json::Value;

        async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
            self.started.fire(cx.lease()).await;
            self.release.wait().await;
            let done = write_without_key(cx).await;
            self.done.fire(done).await;
            Ok(())
        }
    }

    /// The effect row under this claim's fence, and the completion, in one effect
    /// transaction; no effect key.
    async fn write_without_key(cx: &mut JobContext) -> Result<(), IdemError> {
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        let sql = "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, $2, 'A')";
        tx.execute(sql, &[lease.job_id.into(), lease.fence.into()])
            .await?;
        tx.complete().await
    }

    /// Starts a worker of [`QUEUE`] running `handler`.
    fn start<H: Handler>(idem: &Idem, handler: H) -> idem::WorkerHandle {
        let mut w = idem.worker(config(QUEUE, 1)).unwrap();
        w.register(handler).unwrap();
        w.start()
    }

    /// The goal scene: a stale worker's effect row and completion commit after the job
    /// was rescued and completed by the worker that reclaimed it.
    async fn a_stale_worker_commits_its_effect_and_completes(db: &TestDb) {
        let (a, b) = stale_and_live_clients(db).await;
        create_effect_table(&a).await;
        let new = Job::new(EFFECT_KIND, serde_json::json!({})).queue(QUEUE);
        let id = a.enqueue(new).await.unwrap().job.id;

        let (started, started_rx) = Once::new();
        let (release, release_tx) = Gate::new();
        let (done, done_rx) = Once::new();
        let zombie = Zombie {
            started,
            release,
            done,
        };
        let worker_a = start(&a, zombie);
        let stale = within(30, "A starts the job", started_rx).await.unwrap();
        assert_eq!(
            stale,
            LeaseToken {
                job_id: id,
                fence: 1
            }
        );

        // B's clock is past A's lease: the job is rescued, and B claims and completes it.
        assert_eq!(b.rescue().await.unwrap().len(), 1);
        let (b_done, b_done_rx) = Once::new();
        let worker_b = start(
            &b,
            WriteEffect {
                worker: "B",
                done: b_done,
            },
        );
        let b_commit = within(30, "B commits", b_done_rx).await.unwrap();
        assert_eq!(
            b_commit,
            (2, true),
            "B commits under fence 2 with a new key"
        );
        within(30, "B shuts down", worker_b.shutdown()).await;

        release_tx.send(()).unwrap();
        let a_commit = within(30, "A's handler reports", done_rx).await.unwrap();
        assert!(
            a_commit.is_ok(),
            "the stale effect transaction must commit: {a_commit:?}"
        );
        let report = within(30, "A shuts down", worker_a.shutdown()).await;
        assert_eq!((report.completed, report.lease_lost), (1, 0));

        let rows = effects(&a).await;
        assert_eq!(rows, [(id, 1, "A".to_owned()), (id, 2, "B".to_owned())]);
        let keys = ints(&a, "SELECT job_id, fence FROM idem_effect").await;
        assert_eq!(keys, [[id, 2]], "A wrote no effect key");
        let after = job(&a, id).await;
        assert_eq!((after.state, after.fence), (JobState::Completed, 2));
        let history = a.attempts(id).await.unwrap();
        let outcomes: Vec<_> = history.iter().map(|h| (h.fence, h.outcome)).collect();
        assert_eq!(
            outcomes,
            [
                (1, AttemptOutcome::LeaseExpired),
                (2, AttemptOutcome::Completed)
            ]
        );
    }

    /// Below the engine: every write a stale claim makes with the fence guarding it in a
    /// normal build is accepted, except its heartbeat and its failure.
    async fn stale_writes_are_accepted_below_the_engine(db: &TestDb) {
        let now = Some(t0());
        let current = reclaimed(db, job_in(QUEUE, EFFECT_KIND), t0()).await;
        let stale = LeaseToken {
            job_id: current.id,
            fence: current.fence - 1,
        };
        let mut tx = db.store.begin().await.unwrap();
        let lock = JobLock {
            lease: stale,
            idle_timeout_ms: None,
        };
        assert_eq!(tx.job_lock(lock).await.unwrap().fence, current.fence);
        let key = EffectClaim {
            key: "stale-key".into(),
            kind: "stale".into(),
            lease: stale,
            now,
        };
        assert!(matches!(tx.effect_claim(key).await, Ok(EffectClaimed::New)));
        let entry = LedgerPost {
            entry_key: "stale-entry".into(),
            account: "stale-account".into(),
            amount: 1,
            lease: stale,
            now,
        };
        assert!(matches!(tx.ledger_post(entry).await, Ok(LedgerPosted::New)));
        let number = CounterNext {
            counter: "stale-counter".into(),
            key: "stale-number".into(),
            lease: stale,
            now,
        };
        assert!(tx.counter_next(number).await.unwrap().new);
        tx.commit().await.unwrap();

        // Kept: the heartbeat still finds the lease lost, and a failure is refused.
        assert!(heartbeat(db, vec![stale], LEASE_MS, t0()).await.is_empty());
        let fail = JobFail {
            lease: stale,
            error: "stale".into(),
            retry_in_ms: Some(0),
            snooze: false,
            now,
        };
        assert_lease_lost(db.store.job_fail(fail).await, stale);

        let complete = JobComplete {
            lease: stale,
            result: None,
            now,
        };
        let completed = db.store.job_complete(complete).await.unwrap();
        assert_eq!(completed.state, JobState::Completed);
        // Completed already, and completed again in a batch: its attempt is kept once.
        let many = JobCompleteMany {
            leases: vec![stale],
            results: Vec::new(),
            now,
        };
        assert_eq!(
            db.store.job_complete_many(many).await.unwrap(),
            [stale.job_id]
        );
        let history = db.store.job_attempts(stale.job_id).await.unwrap();
        let fences: Vec<i64> = history.iter().map(|h| h.fence).collect();
        assert_eq!(fences, [1, 2]);
    }

    idem_store_tests::store_cases!(
        a_stale_worker_commits_its_effect_and_completes,
        stale_writes_are_accepted_below_the_engine
    );
}

#[cfg(feature = "chaos-break-effect-key")]
mod effect_key {
    use super::common::*;
    use super::ints;
    use idem::{EffectClass, EffectKey, Handler, Job, JobContext, JobError, JobState};
    use idem_store_tests::{TestDb, harness::within};
    use tokio::sync::mpsc;

    const QUEUE: &str = "broken";

    /// What one attempt saw: its number, whether its effect key and its ledger entry were
    /// new.
    type Seen = (i32, bool, bool);

    /// Posts the job's ledger entry, claims its effect key, writes its effect row when the
    /// key is new, and completes; except the first attempt, which drops its
    /// transaction instead of completing (a crash after the claim) and fails.
    struct CrashesOnce {
        seen: mpsc::UnboundedSender<Seen>,
    }

    impl Handler for CrashesOnce {
        const KIND: &'static str = EFFECT_KIND;
        const EFFECT: EffectClass = EffectClass::Transactional;
        type Args = serde_json::Value;

        async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
            let (lease, attempt) = (cx.lease(), cx.job().attempt);
            let mut tx = cx.begin().await?;
            let entry = EffectKey::new("test-entry").part(lease.job_id);
            let new_entry = tx.ledger_post(&entry, "test-account", 5).await?.is_new();
            let new_key = write_effect(&mut tx, lease, "worker").await?;
            let _ = self.seen.send((attempt, new_key, new_entry));
            if attempt == 1 {
                drop(tx);
                return Err(JobError::retry("crashed after claiming its effect key"));
            }
            tx.complete().await?;
            Ok(())
        }
    }

    /// The key and the entry of an attempt that ended before completing stay committed
    /// without its effect row; the retry finds them and makes nothing.
    async fn a_claimed_key_commits_before_its_effect(db: &TestDb) {
        let idem = client(db, None);
        create_effect_table(&idem).await;
        let new = Job::new(EFFECT_KIND, serde_json::json!({})).queue(QUEUE);
        let id = idem.enqueue(new).await.unwrap().job.id;
        let (seen, mut attempts) = events();
        let mut worker = idem.worker(immediate_retries(QUEUE, 1)).unwrap();
        worker.register(CrashesOnce { seen }).unwrap();
        let worker = worker.start();
        let first = within(30, "attempt 1", attempts.recv()).await;
        let second = within(30, "attempt 2", attempts.recv()).await;
        let report = within(30, "the worker shuts down", worker.shutdown()).await;
        assert_eq!(
            first,
            Some((1, true, true)),
            "attempt 1 claims the key and the entry"
        );
        assert_eq!(
            second,
            Some((2, false, false)),
            "attempt 2 finds both taken"
        );
        assert_eq!((report.completed, report.retried), (1, 1));

        assert!(effects(&idem).await.is_empty(), "the effect is lost");
        let keys = ints(&idem, "SELECT job_id, fence FROM idem_effect").await;
        assert_eq!(keys, [[id, 1]], "attempt 1's key committed");
        let sql = "SELECT (SELECT count(*) FROM idem_ledger_entry), \
                   (SELECT balance FROM idem_ledger_balance WHERE account = 'test-account')";
        assert_eq!(
            ints(&idem, sql).await,
            [[1, 5]],
            "attempt 1's entry committed"
        );
        assert_eq!(job(&idem, id).await.state, JobState::Completed);
    }

    idem_store_tests::store_cases!(a_claimed_key_commits_before_its_effect);
}
