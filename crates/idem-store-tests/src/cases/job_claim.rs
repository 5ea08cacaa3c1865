//! `job_claim`: one statement claims up to `limit` due jobs of one queue in priority,
//! `run_at`, id order; each claimed job is `running` with attempt and fence up by one and
//! a lease to `now + lease_ms`; no job is ever handed to two claims, even when many
//! claims race (PostgreSQL: `SKIP LOCKED` across pooled connections; SQLite: the single
//! writer).

use std::collections::HashSet;
use std::sync::Arc;

use idem_store::{Backend, JobClaim, JobRow, JobState, NewJob, Store};
use tokio::sync::Barrier;

use crate::fixture::{
    LEASE_MS, QUEUE, all_jobs, assert_waits_for, at, claim, claim_params, fail, get, ids,
    ids_in_state, insert, insert_one, job, job_in, running, spawn_started, t0,
};
use crate::harness::within;
use crate::{TestDb, open_store};

/// A claim sets state, attempt, fence, owner, `attempted_at` and the lease exactly.
pub async fn claim_sets_the_lease(db: &TestDb) {
    let inserted = insert_one(db, job("lease"), t0()).await;
    let now = at(5_000);
    let params = JobClaim {
        worker: "worker-a".into(),
        lease_ms: 45_000,
        ..claim_params(QUEUE, 1, now)
    };
    let rows = db.store.job_claim(params).await.expect("job_claim");
    let expected = JobRow {
        state: JobState::Running,
        attempt: 1,
        fence: 1,
        lease_owner: Some("worker-a".into()),
        lease_expires_at: Some(at(50_000)),
        attempted_at: Some(now),
        ..inserted
    };
    assert_eq!(rows, vec![expected.clone()]);
    assert_eq!(
        get(db, expected.id).await,
        expected,
        "stored row after claim"
    );
}

/// A claim takes only jobs of its queue.
pub async fn claim_respects_the_queue(db: &TestDb) {
    let mail = insert(db, vec![job_in("mail", "m1"), job_in("mail", "m2")], t0()).await;
    let ledger = insert_one(db, job_in("ledger", "l1"), t0()).await;
    assert_eq!(ids(&claim(db, "mail", 10, t0()).await), ids(&mail));
    assert!(claim(db, "nowhere", 10, t0()).await.is_empty());
    assert_eq!(get(db, ledger.id).await.state, JobState::Available);
    assert_eq!(ids(&claim(db, "ledger", 10, t0()).await), vec![ledger.id]);
}

/// Claim order: lower priority first, then earlier `run_at`, then lower id.
pub async fn claim_orders_by_priority_run_at_and_id(db: &TestDb) {
    // (name, priority, run_at offset), inserted in this order.
    let spec = [
        ("a", 1, -1_000),
        ("b", 0, -1_000),
        ("c", 0, -2_000),
        ("d", -1, 0),
        ("e", 0, -2_000),
    ];
    let expected_order = ["d", "c", "e", "b", "a"];
    for queue in ["one_by_one", "batched"] {
        let jobs = spec
            .iter()
            .map(|(kind, priority, offset)| NewJob {
                priority: *priority,
                run_at: Some(at(*offset)),
                ..job_in(queue, kind)
            })
            .collect();
        insert(db, jobs, t0()).await;
    }
    let mut order = Vec::new();
    for _ in 0..spec.len() {
        let rows = claim(db, "one_by_one", 1, t0()).await;
        assert_eq!(rows.len(), 1, "claims so far: {order:?}");
        order.push(rows[0].kind.clone());
    }
    assert_eq!(order, expected_order, "claim order one at a time");
    let first_two: HashSet<String> = claim(db, "batched", 2, t0())
        .await
        .into_iter()
        .map(|j| j.kind)
        .collect();
    let expected: HashSet<String> = expected_order[..2].iter().map(|k| k.to_string()).collect();
    assert_eq!(
        first_two, expected,
        "a claim of 2 takes the first two in claim order"
    );
}

/// A claim takes at most `limit` jobs; a limit of 0 takes none.
pub async fn claim_respects_the_limit(db: &TestDb) {
    insert(db, (0..5).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    assert!(claim(db, QUEUE, 0, t0()).await.is_empty(), "limit 0");
    assert_eq!(claim(db, QUEUE, 2, t0()).await.len(), 2);
    assert_eq!(claim(db, QUEUE, 10, t0()).await.len(), 3);
    assert!(claim(db, QUEUE, 10, t0()).await.is_empty());
}

/// A scheduled job is not claimed before its `run_at`, and is claimed once `now` reaches
/// it (the boundary included).
pub async fn claim_waits_for_run_at(db: &TestDb) {
    let scheduled = NewJob {
        run_at: Some(at(60_000)),
        ..job("later")
    };
    let row = insert_one(db, scheduled, t0()).await;
    assert_eq!(row.state, JobState::Scheduled);
    assert!(
        claim(db, QUEUE, 10, t0()).await.is_empty(),
        "claimed at insert time"
    );
    assert!(
        claim(db, QUEUE, 10, at(59_999)).await.is_empty(),
        "claimed 1 ms early"
    );
    let claimed = claim(db, QUEUE, 10, at(60_000)).await;
    assert_eq!(ids(&claimed), vec![row.id], "claimed when due");
    assert_eq!((claimed[0].attempt, claimed[0].fence), (1, 1));
}

/// A retryable job is claimed again once its retry time has come: attempt 2, fence 2.
pub async fn claim_takes_due_retryable_jobs(db: &TestDb) {
    let first = running(db, job("flaky"), t0()).await;
    let failed = fail(db, first.lease_token(), Some(10_000), at(1_000))
        .await
        .expect("fail");
    assert_eq!(
        (failed.state, failed.run_at),
        (JobState::Retryable, at(11_000))
    );
    assert!(
        claim(db, QUEUE, 10, at(10_999)).await.is_empty(),
        "claimed before retry time"
    );
    let again = claim(db, QUEUE, 10, at(11_000)).await;
    assert_eq!(ids(&again), vec![first.id]);
    let row = &again[0];
    assert_eq!(
        (row.state, row.attempt, row.fence),
        (JobState::Running, 2, 2)
    );
    assert_eq!(row.lease_expires_at, Some(at(11_000 + LEASE_MS)));
    assert_eq!(row.attempted_at, Some(at(11_000)));
}

/// Running, finished and cancelled jobs are never claimed.
pub async fn claim_skips_jobs_not_waiting(db: &TestDb) {
    let jobs = insert(db, (0..4).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let claimed = claim(db, QUEUE, 3, t0()).await;
    assert_eq!(claimed.len(), 3);
    crate::fixture::complete(db, claimed[0].lease_token(), t0())
        .await
        .expect("complete");
    fail(db, claimed[1].lease_token(), None, t0())
        .await
        .expect("fail to dead");
    crate::fixture::cancel(db, jobs[3].id, t0())
        .await
        .expect("cancel");
    assert!(claim(db, QUEUE, 10, at(3_600_000)).await.is_empty());
}

/// Successive claims get different jobs, and together all of them.
pub async fn claim_gives_each_job_once(db: &TestDb) {
    let jobs = insert(db, (0..10).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let mut seen = Vec::new();
    for (limit, expected) in [(4, 4), (4, 4), (4, 2), (4, 0)] {
        let rows = claim(db, QUEUE, limit, t0()).await;
        assert_eq!(rows.len(), expected, "claimed so far: {seen:?}");
        seen.extend(ids(&rows));
    }
    seen.sort_unstable();
    assert_eq!(seen, ids(&jobs), "every job claimed exactly once");
}

/// A claim racing another claim's open transaction never takes the jobs that one holds:
/// PostgreSQL skips the locked rows at once (the racer finishes while the transaction is
/// open); SQLite queues the racer behind the single writer.
pub async fn claim_skips_jobs_another_claim_holds(db: &TestDb) {
    let jobs = insert(db, (0..5).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let held = tx
        .job_claim(claim_params(QUEUE, 2, t0()))
        .await
        .expect("claim in tx");
    let store = db.store.clone();
    let mut racer = spawn_started(async move {
        let params = JobClaim {
            worker: "racer".into(),
            ..claim_params(QUEUE, 10, t0())
        };
        store.job_claim(params).await
    })
    .await;
    let early = match db.backend {
        Backend::Postgres => Some(within(30, "claim beside a claim", &mut racer).await),
        Backend::Sqlite => {
            assert_waits_for(db, &mut tx, &racer).await;
            None
        }
    };
    tx.commit().await.expect("commit");
    let taken = match early {
        Some(taken) => taken,
        None => within(30, "claim after a claim", racer).await,
    }
    .expect("racer task")
    .expect("racing job_claim");
    let mut held = ids(&held);
    held.sort_unstable();
    let mut taken = ids(&taken);
    taken.sort_unstable();
    assert_eq!(held, ids(&jobs[..2]), "the first claim takes the first two");
    assert_eq!(
        taken,
        ids(&jobs[2..]),
        "the racer takes the rest, and only the rest"
    );
}

/// Eight claimers race on one queue of 200 jobs: no job is claimed twice (every fence is
/// still 1) and together they claim all.
pub async fn claim_concurrently_never_duplicates(db: &TestDb) {
    let stores = vec![db.store.clone()];
    race_claimers(db, stores).await;
}

/// The same race between two stores on one database, as between two worker processes
/// (SQLite: two write connections queueing on the file's lock; PostgreSQL: two pools).
pub async fn claim_concurrently_across_stores_never_duplicates(db: &TestDb) {
    let other = open_store(&db.url)
        .await
        .expect("a second store on the url");
    race_claimers(db, vec![db.store.clone(), other.clone()]).await;
    other.close().await;
}

/// Eight claimers spread over `stores` race for 200 jobs; checks no job went twice and
/// all went.
async fn race_claimers(db: &TestDb, stores: Vec<Arc<dyn Store>>) {
    const JOBS: usize = 200;
    const CLAIMERS: usize = 8;
    let jobs = insert(db, (0..JOBS).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let start = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|n| {
            let store = stores[n % stores.len()].clone();
            tokio::spawn(claim_until_empty(store, start.clone(), n))
        })
        .collect();
    let mut claimed = Vec::new();
    for task in tasks {
        let got = within(120, "a concurrent claimer", task)
            .await
            .expect("claimer panicked");
        claimed.extend(got);
    }
    let unique: HashSet<i64> = claimed.iter().copied().collect();
    assert_eq!(unique.len(), claimed.len(), "a job was claimed twice");
    claimed.sort_unstable();
    assert_eq!(claimed, ids(&jobs), "all jobs claimed");
    assert_eq!(ids_in_state(db, JobState::Running).await.len(), JOBS);
    for row in all_jobs(db).await {
        assert_eq!(
            (row.attempt, row.fence),
            (1, 1),
            "job {} claimed more than once",
            row.id
        );
    }
}

/// One racing claimer: waits for the others, then claims 3 at a time until nothing is
/// left; returns the ids it claimed.
async fn claim_until_empty(store: Arc<dyn Store>, start: Arc<Barrier>, n: usize) -> Vec<i64> {
    start.wait().await;
    let mut mine = Vec::new();
    loop {
        let params = JobClaim {
            worker: format!("claimer-{n}"),
            ..claim_params(QUEUE, 3, t0())
        };
        let rows = store.job_claim(params).await.expect("concurrent job_claim");
        if rows.is_empty() {
            return mine;
        }
        assert!(
            rows.iter()
                .all(|r| r.lease_owner.as_deref() == Some(&*format!("claimer-{n}")))
        );
        mine.extend(ids(&rows));
    }
}

/// A claim that names kinds takes only jobs of those kinds, in claim order, and leaves
/// the others waiting as they were (no attempt spent); naming no kind at all takes
/// nothing, and `None` takes any kind.
pub async fn claim_takes_only_the_kinds_asked_for(db: &TestDb) {
    let rows = insert(db, vec![job("known"), job("unknown"), job("known")], t0()).await;
    let params = |kinds: Option<Vec<&str>>| JobClaim {
        kinds: kinds.map(|k| k.into_iter().map(str::to_owned).collect()),
        ..claim_params(QUEUE, 10, at(1))
    };
    let none = db
        .store
        .job_claim(params(Some(vec![])))
        .await
        .expect("claim");
    assert!(none.is_empty(), "no kind named, nothing taken: {none:?}");
    let known = db
        .store
        .job_claim(params(Some(vec!["known", "other"])))
        .await;
    assert_eq!(ids(&known.expect("claim")), vec![rows[0].id, rows[2].id]);
    let waiting = get(db, rows[1].id).await;
    assert_eq!(waiting, rows[1], "the unknown kind waits untouched");
    let any = db.store.job_claim(params(None)).await.expect("claim");
    assert_eq!(ids(&any), vec![rows[1].id]);
}
