//! The maintenance duties run in one process at a time: of two workers (or two `idem
//! serve` maintenances) on one store, only the elected one rescues expired leases, even
//! when they share a name; once it stops (resigning), the other is elected within a
//! third of a lease and rescues; a candidate stalled inside its election transaction
//! (PostgreSQL) does not hang the leader's shutdown. The last three cases came from the
//! adversarial review of this change (each failed on the first version).

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, JobContext, JobError, SqlValue, WorkerProtocol};
use idem_store::{InsertClaim, JobInsert, LeaderElect, NewJob};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::pg_wait_until_blocked_by;
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
    // Returns once their leases have ended on the database's clock, which the sweeps
    // judge by (a sweep in the same millisecond would find them current).
    let ends = rows.iter().filter_map(|r| r.job.lease_expires_at).max();
    let ends = ends.expect("leased");
    within(30, "the orphans' leases end", async {
        while idem.now().await.expect("now") <= ends {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Jobs of the queue in `state`.
async fn count(idem: &Idem, state: &str) -> i64 {
    let sql =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = '{state}'");
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

async fn completed(idem: &Idem) -> i64 {
    count(idem, "completed").await
}

async fn until_count(idem: &Idem, state: &str, n: i64) {
    within(60, &format!("{n} jobs {state}"), async {
        while count(idem, state).await != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

async fn until_completed(idem: &Idem, n: i64) {
    until_count(idem, "completed", n).await;
}

fn named(name: &str, rescue_every: Duration) -> idem::WorkerConfig {
    leased(name, LEASE, rescue_every)
}

fn leased(name: &str, lease: Duration, rescue_every: Duration) -> idem::WorkerConfig {
    let mut c = config(QUEUE, 4).lease(lease);
    c.name = Some(name.to_owned());
    c.rescue_interval = rescue_every;
    c
}

async fn leader(idem: &Idem) -> Option<String> {
    maintenance_leader(idem).await.map(|(h, _)| h)
}

/// Waits until `holder` leads; returns its fence.
async fn until_leader(idem: &Idem, holder: &str) -> i64 {
    within(30, &format!("{holder} is elected"), async {
        loop {
            if let Some((h, fence)) = maintenance_leader(idem).await
                && h == holder
            {
                return fence;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
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

/// Two `idem serve --no-workers` (one API behind a load balancer): each starts the
/// maintenance duties as "idem-serve" (`serve.rs`), so every instance leads at once.
/// The first is elected and sweeps (then hourly); the second, sweeping every 20 ms,
/// must follow, so the second orphans stay running. Current code: it rescues them.
async fn two_idem_serve_instances_do_not_both_lead(db: &TestDb) {
    let idem = client(db, None);
    orphans(&idem, 3).await;
    let first = WorkerProtocol::new(idem.clone(), named("x", Duration::from_secs(3600))).unwrap();
    let (stop_first, first_tasks) = first.start_maintenance("idem-serve");
    until_leader(&idem, "idem-serve").await;
    until_count(&idem, "retryable", 3).await;

    let second = WorkerProtocol::new(idem.clone(), named("y", Duration::from_millis(20))).unwrap();
    let (stop_second, second_tasks) = second.start_maintenance("idem-serve");
    orphans(&idem, 3).await;
    // A negative, so a bounded wait: fifteen of the second's sweeps, had it been elected.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let running = count(&idem, "running").await;
    for (stop, tasks) in [(stop_second, second_tasks), (stop_first, first_tasks)] {
        let _ = stop.send(true);
        for t in tasks {
            let _ = t.await;
        }
    }
    assert_eq!(
        running, 3,
        "the second idem-serve follows, so the orphans wait for the first's next sweep"
    );
}

/// `elector.rs`: a leader that stops resigns, and a follower tries again within a third
/// of a lease, so the next is elected well before the old lease would have ended. At
/// first a follower slept until the end of the lease it saw: after a resignation
/// nobody led for up to a whole lease, as if the leader had died. Here the lease is 6 s
/// and `a` renewed at most 2 s before it stopped, so its lease had at least 4 s left:
/// `b` elected within 4 s of the shutdown was elected because `a` resigned.
async fn a_resigning_leader_is_replaced_within_a_third_of_a_lease(db: &TestDb) {
    let lease = Duration::from_secs(6);
    let idem = client(db, None);
    let mut a = idem
        .worker(leased("a", lease, Duration::from_secs(3600)))
        .unwrap();
    a.register(Noop).unwrap();
    let a = a.start();
    let fence = until_leader(&idem, "a").await;
    let mut b = idem
        .worker(leased("b", lease, Duration::from_secs(3600)))
        .unwrap();
    b.register(Noop).unwrap();
    let b = b.start();
    within(30, "b starts", b.ready()).await;
    assert_eq!(
        maintenance_leader(&idem).await.map(|(_, f)| f),
        Some(fence),
        "a leads"
    );

    a.shutdown().await;
    within(
        4,
        "b elected within 4 s of a's resignation (lease 6 s)",
        until_leader(&idem, "b"),
    )
    .await;
    b.shutdown().await;
}

/// PostgreSQL: a candidate (another process, here the test) stops between its election
/// statement and its commit, holding the leadership row's lock. The leader `a` shuts
/// down: its elector's renewal or resignation waits on that row without a timeout, and
/// `shutdown` with it, for as long as the candidate is stopped.
async fn a_leader_s_shutdown_does_not_hang_on_a_stalled_candidate(db: &TestDb) {
    let idem = client(db, None);
    let mut a = idem.worker(named("a", Duration::from_secs(3600))).unwrap();
    a.register(Noop).unwrap();
    let a = a.start();
    until_leader(&idem, "a").await;
    within(30, "a starts", a.ready()).await;

    let mut stalled = db.store.begin().await.expect("begin");
    let seen = stalled
        .leader_elect(LeaderElect {
            name: "maintenance".to_owned(),
            holder: "stalled".to_owned(),
            ttl_ms: 2_000,
            now: None,
        })
        .await
        .expect("the stalled candidate's election");
    assert!(seen.holder.starts_with('a'), "a leads: {seen:?}");
    // a's elector renews every third of its lease: it reaches the locked row.
    within(
        30,
        "a's renewal blocks",
        pg_wait_until_blocked_by(db, &mut stalled),
    )
    .await;
    within(
        20,
        "a's shutdown while a candidate is stalled",
        a.shutdown(),
    )
    .await;
    drop(stalled);
}

idem_store_tests::store_cases!(
    only_the_elected_worker_rescues,
    a_worker_of_the_same_name_does_not_share_the_leadership,
    two_idem_serve_instances_do_not_both_lead,
    a_resigning_leader_is_replaced_within_a_third_of_a_lease,
);

idem_store_tests::postgres_cases!(a_leader_s_shutdown_does_not_hang_on_a_stalled_candidate);
