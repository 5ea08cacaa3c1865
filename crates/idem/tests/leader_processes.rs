//! The maintenance duties (rescue, purge) run in one elected process: three real worker
//! processes (this test binary, run as children with `--ignored --exact
//! leader_worker`) on one PostgreSQL schema, each a worker with a 2 s lease (the
//! leadership's too) and a rescue every 100 ms.
//!
//! - One leader at a time, named in `idem_leader`; the others follow.
//! - The leader killed (SIGKILL) while it holds jobs: another process is elected within
//!   one lease (plus one try) of the kill, under the next fence, and rescues the dead
//!   leader's jobs, which complete.

mod common;

use std::time::Duration;

use common::*;
use idem::{Idem, Job, SqlValue, WorkerConfig};
use idem_store_tests::{TestDb, harness::within, open_store};

const CHILD_ENV: &str = "IDEM_LEADER_URL";
const NAME_ENV: &str = "IDEM_LEADER_WORKER";
const QUEUE: &str = "led";
const KIND: &str = "sleepy";
const READY: &str = "IDEM_WORKER_READY";
const PROCESSES: usize = 3;
const LEASE: Duration = Duration::from_secs(2);

/// A job that sleeps long enough to be held when its worker dies.
struct Sleepy;

impl idem::Handler for Sleepy {
    const KIND: &'static str = KIND;
    const EFFECT: idem::EffectClass = idem::EffectClass::Transactional;
    type Args = serde::de::IgnoredAny;

    async fn run(
        &self,
        _: &mut idem::JobContext,
        _: serde::de::IgnoredAny,
    ) -> Result<(), idem::JobError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    }
}

/// The child process: one worker named by the environment until its stdin closes.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn leader_worker() {
    as_child("leader_worker", CHILD_ENV, |url| async move {
        let name = std::env::var(NAME_ENV).expect("worker name");
        let idem = Idem::from_store(open_store(&url).await.expect("child opens the store"));
        let mut config = WorkerConfig::default().only_queue(QUEUE, 4).lease(LEASE);
        config.name = Some(name);
        config.rescue_interval = Duration::from_millis(100);
        let mut w = idem.worker(config).expect("worker");
        w.register(Sleepy).expect("register");
        let running = w.start();
        println!("{READY}");
        let _ = tokio::task::spawn_blocking(|| {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
        })
        .await;
        running.shutdown().await;
    });
}

async fn count(idem: &Idem, sql: &str) -> i64 {
    let rows = idem.store().query(sql, &[]).await.expect("count");
    match rows.first().map(Vec::as_slice) {
        Some([SqlValue::Int(n)]) => *n,
        other => panic!("{sql}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_a_lease_and_its_jobs_are_rescued() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let idem = Idem::from_store(db.store.clone());
    let mut children = Vec::new();
    for i in 1..=PROCESSES {
        let name = format!("p{i}");
        let env = [(CHILD_ENV, db.url.as_str()), (NAME_ENV, name.as_str())];
        let mut child = spawn_test_child("leader_worker", &env);
        let mut lines = until_ready(&mut child, &name, READY).await;
        // Its later output is read, so it never writes to a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        children.push((name, child));
    }
    let (old, old_fence) = within(30, "a leader is elected", async {
        loop {
            if let Some(l) = maintenance_leader(&idem).await {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(old_fence, 1, "the first election");

    // Enough jobs that the leader holds some when it dies.
    let jobs: Vec<Job> = (0..60)
        .map(|_| Job::new(KIND, serde_json::json!({})).queue(QUEUE))
        .collect();
    idem.enqueue_many(jobs).await.expect("enqueue");
    let held_by_old =
        format!("SELECT count(*) FROM idem_job WHERE state = 'running' AND lease_owner = '{old}'");
    within(30, "the leader holds jobs", async {
        while count(&idem, &held_by_old).await == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let index = children
        .iter()
        .position(|(n, _)| *n == old)
        .expect("leader");
    let (_, mut dead) = children.remove(index);
    dead.start_kill().expect("SIGKILL the leader");
    let killed_at = std::time::Instant::now();
    dead.wait().await.expect("reaped");

    let (new, new_fence) = within(30, "another leader is elected", async {
        loop {
            if let Some((h, f)) = maintenance_leader(&idem).await
                && h != old
            {
                return (h, f);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let moved = killed_at.elapsed();
    eprintln!("leadership moved from {old} to {new} {moved:?} after the kill");
    assert_eq!(new_fence, old_fence + 1, "the next fence");
    assert!(
        moved <= LEASE + LEASE / 2,
        "leadership moved after {moved:?}, more than one lease ({LEASE:?}) and a try"
    );

    let unfinished =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state <> 'completed'");
    within(
        60,
        "every job completes, the dead leader's rescued",
        async {
            while count(&idem, &unfinished).await > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    // Only the dead leader lost leases: the rescues of its jobs.
    let rescued = format!(
        "SELECT count(*) FROM idem_job_attempt a JOIN idem_job j ON j.id = a.job_id \
         WHERE j.queue = '{QUEUE}' AND a.outcome = 'lease_expired'"
    );
    assert!(
        count(&idem, &rescued).await > 0,
        "the dead leader's jobs were rescued (their lost attempts recorded)"
    );
    for (_, mut child) in children {
        drop(child.stdin.take());
        let status = within(60, "a worker process stops", child.wait()).await;
        assert!(status.expect("wait").success());
    }
    db.cleanup().await;
}
