//! The maintenance duties run in one process at a time: of two workers on one store,
//! only the elected one rescues expired leases; once it stops (resigning), the other is
//! elected at its next try and rescues.

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, JobContext, JobError, SqlValue};
use idem_store::{InsertClaim, JobInsert, NewJob};
use idem_store_tests::TestDb;
use idem_store_tests::harness::within;

const QUEUE: &str = "led";
/// The workers' lease, which their leadership lasts too.
const LEASE: Duration = Duration::from_secs(2);

struct Noop;

impl Handler for Noop {
    const KIND: &'static str = "noop";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        Ok(())
    }
}

/// Inserts `n` jobs claimed by a worker that died at once (a 1 ms lease).
async fn orphans(idem: &Idem, n: usize) {
    let jobs = (0..n)
        .map(|_| NewJob {
            claim: Some(InsertClaim {
                worker: "dead".to_owned(),
                lease_ms: 1,
            }),
            ..NewJob::new("noop", QUEUE, serde_json::json!({}), 25)
        })
        .collect();
    let insert = JobInsert {
        jobs,
        ..JobInsert::default()
    };
    let rows = idem.store().job_insert(insert).await.expect("insert");
    assert!(rows.iter().all(|r| r.job.state == idem::JobState::Running));
}

async fn completed(idem: &Idem) -> i64 {
    let sql =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'completed'");
    match idem
        .store()
        .query(&sql, &[])
        .await
        .expect("count")
        .first()
        .map(Vec::as_slice)
    {
        Some([SqlValue::Int(n)]) => *n,
        other => panic!("count: {other:?}"),
    }
}

async fn until_completed(idem: &Idem, n: i64) {
    within(60, "the orphans complete", async {
        while completed(idem).await < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

fn named(name: &str, rescue_every: Duration) -> idem::WorkerConfig {
    let mut c = config(QUEUE, 4).lease(LEASE);
    c.name = Some(name.to_owned());
    c.rescue_interval = rescue_every;
    c
}

async fn leader(idem: &Idem) -> Option<String> {
    let sql = "SELECT holder FROM idem_leader WHERE name = 'maintenance'";
    match idem
        .store()
        .query(sql, &[])
        .await
        .expect("leader")
        .first()
        .map(Vec::as_slice)
    {
        // The holder is the worker's name and an instance id.
        Some([SqlValue::Text(h)]) => Some(h.split(" #").next().unwrap_or(h).to_owned()),
        None => None,
        other => panic!("leader: {other:?}"),
    }
}

/// `a` leads and sweeps only when elected (its interval is an hour); `b`, sweeping
/// every 20 ms were it the leader, follows, so orphans wait while `a` runs; once `a`
/// stops and resigns, `b` is elected and rescues them.
async fn only_the_elected_worker_rescues(db: &TestDb) {
    let idem = client(db, None);
    let mut a = idem.worker(named("a", Duration::from_secs(3600))).unwrap();
    a.register(Noop).unwrap();
    let a = a.start();
    within(30, "a is elected", async {
        while leader(&idem).await.as_deref() != Some("a") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mut b = idem.worker(named("b", Duration::from_millis(20))).unwrap();
    b.register(Noop).unwrap();
    let b = b.start();
    within(30, "b starts", b.ready()).await;

    orphans(&idem, 3).await;
    // A negative, so a bounded wait: fifteen of b's sweeps, had it been elected.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.report().rescued, 0, "b follows: it sweeps nothing");
    assert_eq!(
        completed(&idem).await,
        0,
        "the orphans wait for the leader's sweep"
    );

    let a = a.shutdown().await;
    assert_eq!(a.rescued, 0);
    until_completed(&idem, 3).await;
    let b = b.shutdown().await;
    assert_eq!(b.rescued, 3, "b was elected once a resigned, and rescued");
    assert_eq!(leader(&idem).await.as_deref(), Some("b"));
}

/// Two processes given the same worker name (replicas of one configuration) are still
/// two candidates: the second does not take the first's leadership for its own.
async fn a_worker_of_the_same_name_does_not_share_the_leadership(db: &TestDb) {
    let idem = client(db, None);
    let mut a = idem
        .worker(named("same", Duration::from_secs(3600)))
        .unwrap();
    a.register(Noop).unwrap();
    let a = a.start();
    within(30, "the first is elected", async {
        while leader(&idem).await.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mut b = idem
        .worker(named("same", Duration::from_millis(20)))
        .unwrap();
    b.register(Noop).unwrap();
    let b = b.start();
    within(30, "the second starts", b.ready()).await;
    orphans(&idem, 3).await;
    // A negative, so a bounded wait: fifteen of b's sweeps, had it led.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.report().rescued, 0, "the second follows");
    assert_eq!(completed(&idem).await, 0);
    a.shutdown().await;
    until_completed(&idem, 3).await;
    assert_eq!(b.shutdown().await.rescued, 3);
}

idem_store_tests::store_cases!(
    only_the_elected_worker_rescues,
    a_worker_of_the_same_name_does_not_share_the_leadership,
);
