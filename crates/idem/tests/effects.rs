//! Effect keys on both stores: of two executions racing on one key exactly one makes the
//! effect and the other is told it was already done; a stale execution cannot claim a
//! key at all; a rolled-back claim leaves no key behind. And an effect transaction
//! tells which claim it belongs to (job id, attempt, fence).

mod common;

use std::sync::Arc;

use common::*;
use idem::{
    EffectClaimed, EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError, LeaseToken,
};
use idem_store_tests::harness::within;
use idem_store_tests::{TestDb, open_store};
use tokio::sync::{Barrier, mpsc};

/// Claims `receipt-mail:{order}` after a barrier shared with the other worker, writes the
/// effect row only if the claim is new, and completes; reports what it was told.
struct Receipt {
    barrier: Arc<Barrier>,
    seen: mpsc::UnboundedSender<(i64, EffectClaimed)>,
}

#[derive(serde::Deserialize)]
struct Order {
    order: i64,
}

impl Handler for Receipt {
    const KIND: &'static str = "receipt";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Order;

    async fn run(&self, cx: &mut JobContext, args: Order) -> Result<(), JobError> {
        self.barrier.wait().await;
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        let claimed = tx
            .claim_effect(&EffectKey::new("receipt-mail").part(args.order))
            .await?;
        if claimed.is_new() {
            let sql = "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, $2, 'mail')";
            tx.execute(sql, &[lease.job_id.into(), lease.fence.into()])
                .await?;
        }
        tx.complete().await?;
        let _ = self.seen.send((lease.job_id, claimed));
        Ok(())
    }
}

/// Two jobs for the same order (a producer's duplicate), run by two workers on two
/// connection pools at once: one mail.
async fn two_executions_race_on_one_key(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let jobs = idem
        .enqueue_many(
            (0..2)
                .map(|_| Job::new("receipt", serde_json::json!({"order": 42})).queue("mail"))
                .collect(),
        )
        .await
        .unwrap();
    let (barrier, (seen, mut seen_rx)) = (Arc::new(Barrier::new(2)), mpsc::unbounded_channel());
    let mut handles = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..2 {
        let store = open_store(&db.url).await.expect("another pool");
        let mut w = Idem::from_store(store.clone())
            .worker(config("mail", 1))
            .unwrap();
        w.register(Receipt {
            barrier: barrier.clone(),
            seen: seen.clone(),
        })
        .unwrap();
        handles.push(w.start());
        stores.push(store);
    }
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        outcomes.push(
            within(60, "both executions finish", seen_rx.recv())
                .await
                .unwrap(),
        );
    }
    for h in handles {
        within(30, "shutdown", h.shutdown()).await;
    }
    for s in stores {
        s.close().await;
    }
    let news: Vec<i64> = outcomes
        .iter()
        .filter(|(_, c)| c.is_new())
        .map(|(j, _)| *j)
        .collect();
    assert_eq!(
        news.len(),
        1,
        "exactly one execution owns the effect: {outcomes:?}"
    );
    let done = outcomes.iter().find_map(|(_, c)| match c {
        EffectClaimed::Done(r) => Some(r.clone()),
        EffectClaimed::New => None,
    });
    let done = done.expect("the other execution is told the effect is done");
    assert_eq!(
        done.job_id, news[0],
        "the record names the job that made the effect"
    );
    assert_eq!(done.key, "receipt-mail:42");
    let rows = effects(&idem).await;
    assert_eq!(rows.len(), 1, "one mail: {rows:?}");
    assert_eq!(rows[0].0, news[0]);
    assert!(
        jobs.iter().any(|j| j.id == news[0]),
        "the owner is one of the two jobs"
    );
}

/// Commits its effect without completing on the first attempt and fails; completes on the
/// second. `stable: false` puts the attempt number in the key (the mistake the detector
/// exists for).
struct Retried {
    stable: bool,
    done: mpsc::UnboundedSender<bool>,
}

impl Handler for Retried {
    const KIND: &'static str = "retried";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        let mut key = EffectKey::new("receipt-mail").part(42);
        if !self.stable {
            key = key.part(attempt);
        }
        let mut tx = cx.begin().await?;
        let claimed = tx.claim_effect(&key).await?;
        if attempt == 1 {
            tx.commit().await?;
            return Err(JobError::retry(
                "the mail server hung up after the outbox row",
            ));
        }
        tx.complete().await?;
        let _ = self.done.send(claimed.is_new());
        Ok(())
    }
}

async fn run_retried(db: &TestDb, stable: bool) -> (bool, u64) {
    let idem = client(db, None);
    idem.enqueue(Job::new("retried", serde_json::json!({})).queue("r"))
        .await
        .unwrap();
    let (done, mut done_rx) = mpsc::unbounded_channel();
    let mut w = idem.worker(immediate_retries("r", 1)).unwrap();
    w.register(Retried { stable, done }).unwrap();
    let w = w.start();
    let new_on_retry = within(30, "the retry completes", done_rx.recv())
        .await
        .unwrap();
    within(30, "shutdown", w.shutdown()).await;
    (new_on_retry, idem.metrics().unstable_effect_keys)
}

async fn an_unstable_key_is_detected(db: &TestDb) {
    let (new_on_retry, unstable) = run_retried(db, false).await;
    assert!(
        new_on_retry,
        "a key with the attempt number in it looks new on the retry"
    );
    assert_eq!(unstable, 1, "and the detector counts it");
}

async fn a_stable_key_is_not_flagged(db: &TestDb) {
    let (new_on_retry, unstable) = run_retried(db, true).await;
    assert!(!new_on_retry, "the retry finds the effect done");
    assert_eq!(unstable, 0, "the detector stays silent");
}

/// Fails its first attempt; on the next, writes its effect row with the job id and fence
/// its effect transaction tells, and reports the job and the lease it was told.
struct ToldItsClaim {
    told: mpsc::UnboundedSender<(idem::JobRow, LeaseToken)>,
}

impl Handler for ToldItsClaim {
    const KIND: &'static str = "told";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let mut tx = cx.begin().await?;
        let (job, lease) = (tx.job().clone(), tx.lease());
        if job.attempt == 1 {
            return Err(JobError::retry("the first attempt fails")); // tx rolls back
        }
        let sql = "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, $2, $3)";
        let row = [
            lease.job_id.into(),
            lease.fence.into(),
            job.kind.as_str().into(),
        ];
        tx.execute(sql, &row).await?;
        tx.complete().await?;
        let _ = self.told.send((job, lease));
        Ok(())
    }
}

/// An effect transaction tells its job's id, attempt and fence: on the second attempt,
/// attempt 2 under fence 2, the claim the job completed under.
async fn an_effect_transaction_tells_its_claim(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let job = idem
        .enqueue(Job::new("told", serde_json::json!({})).queue("t"))
        .await
        .unwrap();
    let (told, mut told_rx) = mpsc::unbounded_channel();
    let mut w = idem.worker(immediate_retries("t", 1)).unwrap();
    w.register(ToldItsClaim { told }).unwrap();
    let w = w.start();
    let (seen, lease) = within(30, "the retry completes", told_rx.recv())
        .await
        .unwrap();
    within(30, "shutdown", w.shutdown()).await;
    let done = common::job(&idem, job.id).await;
    assert_eq!(
        (seen.id, seen.attempt, seen.kind.as_str()),
        (job.id, 2, "told")
    );
    assert_eq!((done.state, done.attempt), (idem::JobState::Completed, 2));
    assert_eq!(
        lease,
        LeaseToken {
            job_id: job.id,
            fence: 2
        }
    );
    assert_eq!(
        lease,
        done.lease_token(),
        "the claim the job completed under"
    );
    let rows = effects(&idem).await;
    assert_eq!(
        rows,
        vec![(job.id, 2, "told".to_owned())],
        "one row, from attempt 2"
    );
}

idem_store_tests::store_cases!(
    two_executions_race_on_one_key,
    an_effect_transaction_tells_its_claim,
    an_unstable_key_is_detected,
    a_stable_key_is_not_flagged,
);
