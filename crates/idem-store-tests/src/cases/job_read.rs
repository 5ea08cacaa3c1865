//! Reads outside transactions: `job_get`, `job_list` (filters, newest first, keyset
//! pagination with `before_id`), `job_attempts` (oldest first), `job_first_attempts`
//! (the earliest start per job), `queue_counts`, `queue_finished` (jobs finalized in a
//! range, with their run and wait times), `now`,
//! and the connection itself: the test URL reaches the same database from a second
//! store, and `close` makes later calls `Unavailable`.

use std::collections::BTreeMap;

use idem_store::{
    AttemptOutcome, JobFail, JobList, JobState, QueueCount, QueueFinished, QueueFinishedList,
    StoreError,
};

use crate::fixture::{
    at, attempts, claim, complete, fail, get, ids, insert, insert_one, job, job_in, list, running,
    t0,
};
use crate::{TestDb, open_store};

/// `job_get` of an id that was never inserted is `None`.
pub async fn read_get_of_a_missing_job_is_none(db: &TestDb) {
    assert_eq!(db.store.job_get(1).await.expect("job_get"), None);
    let row = insert_one(db, job("one"), t0()).await;
    assert_eq!(db.store.job_get(row.id + 1).await.expect("job_get"), None);
    assert_eq!(db.store.job_get(-1).await.expect("job_get"), None);
}

/// `job_list` filters by state, queue and kind (together too), newest id first, at
/// most `limit` rows (none for a limit of 0).
pub async fn read_list_filters_newest_first(db: &TestDb) {
    let jobs = insert(
        db,
        vec![
            job_in("q1", "k1"),
            job_in("q1", "k2"),
            job_in("q2", "k1"),
            job_in("q2", "k2"),
            job_in("q1", "k1"),
        ],
        t0(),
    )
    .await;
    let all = ids(&jobs);
    let pick = |idx: &[usize]| idx.iter().rev().map(|&i| all[i]).collect::<Vec<_>>();
    claim(db, "q2", 1, t0()).await; // jobs[2] runs
    let by = |state: Option<JobState>, queue: Option<&str>, kind: Option<&str>| JobList {
        state,
        queue: queue.map(str::to_owned),
        kind: kind.map(str::to_owned),
        ..JobList::default()
    };
    assert_eq!(
        ids(&list(db, by(None, None, None)).await),
        pick(&[0, 1, 2, 3, 4])
    );
    assert_eq!(
        ids(&list(db, by(None, Some("q1"), None)).await),
        pick(&[0, 1, 4])
    );
    assert_eq!(
        ids(&list(db, by(None, None, Some("k1"))).await),
        pick(&[0, 2, 4])
    );
    assert_eq!(
        ids(&list(db, by(Some(JobState::Running), None, None)).await),
        pick(&[2])
    );
    let available_q2 = by(Some(JobState::Available), Some("q2"), None);
    assert_eq!(ids(&list(db, available_q2).await), pick(&[3]));
    assert_eq!(
        ids(&list(db, by(None, Some("q1"), Some("k1"))).await),
        pick(&[0, 4])
    );
    assert!(
        list(db, by(Some(JobState::Dead), None, None))
            .await
            .is_empty()
    );
    assert!(list(db, by(None, Some("nowhere"), None)).await.is_empty());
    let two = JobList {
        limit: 2,
        ..JobList::default()
    };
    assert_eq!(
        ids(&db.store.job_list(two).await.expect("job_list")),
        pick(&[3, 4])
    );
    let none = JobList {
        limit: 0,
        ..JobList::default()
    };
    assert!(
        db.store.job_list(none).await.expect("job_list").is_empty(),
        "limit 0"
    );
}

/// Paging with `before_id` = the last id of the previous page walks every job once,
/// newest first, and ends with an empty page.
pub async fn read_list_pages_with_before_id(db: &TestDb) {
    let jobs = insert(db, (0..25).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    insert(db, vec![job_in("other", "noise")], t0()).await;
    let mut seen = Vec::new();
    let mut before_id = None;
    for expected in [10, 10, 5, 0] {
        let params = JobList {
            queue: Some("default".into()),
            before_id,
            limit: 10,
            ..JobList::default()
        };
        let page = db.store.job_list(params).await.expect("job_list");
        assert_eq!(page.len(), expected, "page after {before_id:?}");
        before_id = page.last().map(|j| j.id).or(before_id);
        seen.extend(ids(&page));
    }
    let mut expected = ids(&jobs);
    expected.reverse();
    assert_eq!(seen, expected);
}

/// `job_attempts` lists every finished attempt, oldest first, with attempt and fence;
/// a job with none (or no job) lists nothing.
pub async fn read_attempts_oldest_first(db: &TestDb) {
    let row = insert_one(db, job("thrice"), t0()).await;
    for n in 1..=3_i64 {
        let now = at(n * 10_000);
        let claimed = claim(db, "default", 1, now).await.remove(0);
        if n < 3 {
            fail(db, claimed.lease_token(), Some(0), at(n * 10_000 + 1))
                .await
                .expect("fail");
        } else {
            complete(db, claimed.lease_token(), at(n * 10_000 + 1))
                .await
                .expect("complete");
        }
    }
    let got: Vec<_> = attempts(db, row.id)
        .await
        .iter()
        .map(|a| (a.attempt, a.fence, a.outcome, a.started_at, a.finished_at))
        .collect();
    let expected: Vec<_> = (1..=3_i64)
        .map(|n| {
            let outcome = if n < 3 {
                AttemptOutcome::Retryable
            } else {
                AttemptOutcome::Completed
            };
            (
                n as i32,
                n,
                outcome,
                Some(at(n * 10_000)),
                at(n * 10_000 + 1),
            )
        })
        .collect();
    assert_eq!(got, expected);
    let fresh = insert_one(db, job("fresh"), t0()).await;
    assert!(attempts(db, fresh.id).await.is_empty());
    assert!(attempts(db, row.id + 1_000).await.is_empty());
    // A completed attempt has no row of its own (its job's row stands for it); one that
    // an earlier build recorded is read instead, never both.
    let recorded = "INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, \
                    started_at, finished_at) \
                    SELECT id, attempt, fence, 'completed', NULL, attempted_at, finalized_at \
                    FROM idem_job WHERE id = $1";
    let mut tx = db.store.begin().await.expect("begin");
    let written = tx.execute(recorded, &[row.id.into()]).await;
    assert_eq!(written.expect("an earlier build's row"), 1);
    tx.commit().await.expect("commit");
    let again: Vec<_> = attempts(db, row.id)
        .await
        .iter()
        .map(|a| (a.attempt, a.fence, a.outcome, a.started_at, a.finished_at))
        .collect();
    assert_eq!(again, expected);
}

/// `job_first_attempts` gives, per listed job, when its earliest recorded attempt
/// started (a snoozed or failed one counts: it ran), in id order; a job that never ran,
/// a missing id and an empty list give nothing.
pub async fn read_first_attempts_are_the_earliest_start_per_job(db: &TestDb) {
    let twice = running(db, job_in("a", "twice"), t0()).await;
    fail(db, twice.lease_token(), Some(0), at(1))
        .await
        .expect("fail");
    let again = claim(db, "a", 1, at(5_000)).await.remove(0);
    complete(db, again.lease_token(), at(5_001))
        .await
        .expect("complete");
    let snoozed = running(db, job_in("b", "snoozed"), at(2_000)).await;
    let snooze = JobFail {
        lease: snoozed.lease_token(),
        error: "later".into(),
        retry_in_ms: Some(0),
        snooze: true,
        now: Some(at(2_001)),
    };
    db.store.job_fail(snooze).await.expect("snooze");
    claim(db, "b", 1, at(3_000)).await.remove(0);
    let never = insert_one(db, job_in("c", "never"), t0()).await;
    let once = running(db, job_in("d", "once"), at(4_000)).await;
    complete(db, once.lease_token(), at(4_001))
        .await
        .expect("complete");
    let asked = vec![never.id, snoozed.id, twice.id, once.id, twice.id + 1_000];
    let first = db
        .store
        .job_first_attempts(asked)
        .await
        .expect("first attempts");
    let expected = vec![
        (twice.id, t0()),
        (snoozed.id, at(2_000)),
        (once.id, at(4_000)),
    ];
    assert_eq!(first, expected, "a completed first attempt counts too");
    let none = db.store.job_first_attempts(vec![]).await.expect("none");
    assert!(none.is_empty());
}

/// `queue_counts` counts jobs per queue and state, and lists no empty pair.
pub async fn read_queue_counts(db: &TestDb) {
    assert!(
        db.store
            .queue_counts()
            .await
            .expect("queue_counts")
            .is_empty()
    );
    insert(
        db,
        vec![
            job_in("mail", "a"),
            job_in("mail", "b"),
            job_in("mail", "c"),
        ],
        t0(),
    )
    .await;
    insert(db, vec![job_in("ledger", "d"), job_in("ledger", "e")], t0()).await;
    let later = idem_store::NewJob {
        run_at: Some(at(60_000)),
        ..job_in("ledger", "f")
    };
    insert_one(db, later, t0()).await;
    let mail = claim(db, "mail", 2, t0()).await;
    complete(db, mail[0].lease_token(), at(1))
        .await
        .expect("complete");
    let mut got: BTreeMap<(String, &str), i64> = BTreeMap::new();
    for QueueCount {
        queue,
        state,
        count,
    } in db.store.queue_counts().await.expect("queue_counts")
    {
        assert!(
            got.insert((queue, state.as_str()), count).is_none(),
            "a pair listed twice"
        );
    }
    let expected: BTreeMap<(String, &str), i64> = [
        (("ledger".into(), "available"), 2),
        (("ledger".into(), "scheduled"), 1),
        (("mail".into(), "available"), 1),
        (("mail".into(), "completed"), 1),
        (("mail".into(), "running"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, expected);
}

/// The database clock is close to this host's clock (same machine in tests).
pub async fn read_now_is_the_database_clock(db: &TestDb) {
    let first = db.store.now().await.expect("now");
    let second = db.store.now().await.expect("now");
    assert!(
        first <= second,
        "the database clock went back: {first} then {second}"
    );
    let skew = (chrono::Utc::now() - second).num_seconds().abs();
    assert!(
        skew < 300,
        "database clock {second} is {skew} s from this host's clock"
    );
}

/// [`TestDb::url`] reaches the same database from a second store (as another process
/// would): each sees the other's jobs, and it finds the schema already migrated.
pub async fn read_url_reaches_the_same_database(db: &TestDb) {
    let other = open_store(&db.url)
        .await
        .unwrap_or_else(|e| panic!("open {}: {e}", db.url));
    let mine = insert_one(db, job("from_the_harness"), t0()).await;
    assert_eq!(
        other.job_get(mine.id).await.expect("job_get via url"),
        Some(mine.clone())
    );
    let theirs = other
        .job_insert(idem_store::JobInsert {
            jobs: vec![job("from_the_url")],
            now: Some(t0()),
            ..Default::default()
        })
        .await
        .expect("job_insert via url")
        .remove(0);
    assert_eq!(get(db, theirs.id).await, theirs.job);
    assert_eq!(
        other.migrate().await.expect("migrate via url"),
        0,
        "already migrated"
    );
    other.close().await;
}

/// After `close`, calls fail with [`StoreError::Unavailable`].
pub async fn read_close_makes_calls_unavailable(db: &TestDb) {
    let other = open_store(&db.url).await.expect("open a second store");
    let row = insert_one(db, job("x"), t0()).await;
    assert!(
        other
            .job_get(row.id)
            .await
            .expect("job_get before close")
            .is_some()
    );
    other.close().await;
    let result = other.job_get(row.id).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "job_get after close: {result:?}"
    );
    let result = other.begin().await.map(|_| ());
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "begin after close: {result:?}"
    );
    assert_eq!(
        get(db, row.id).await,
        row,
        "the harness's store is still open"
    );
}

/// `queue_waiting` counts the waiting jobs (available, scheduled, retryable) of each queue
/// and kind, with the earliest `run_at`; running and finished jobs are not waiting.
pub async fn read_queue_waiting(db: &TestDb) {
    assert!(db.store.queue_waiting().await.expect("waiting").is_empty());
    let later = idem_store::NewJob {
        run_at: Some(at(60_000)),
        ..job_in("mail", "digest")
    };
    insert_one(db, later, t0()).await;
    insert(
        db,
        vec![job_in("mail", "receipt"), job_in("mail", "receipt")],
        at(5),
    )
    .await;
    insert(db, vec![job_in("ledger", "orphan")], at(7)).await;
    let running = running(db, job_in("busy", "receipt"), t0()).await;
    let got: Vec<(String, String, i64, idem_store::Timestamp)> = db
        .store
        .queue_waiting()
        .await
        .expect("waiting")
        .into_iter()
        .map(|w| (w.queue, w.kind, w.count, w.oldest_run_at))
        .collect();
    let want = [
        ("ledger", "orphan", 1, at(7)),
        ("mail", "digest", 1, at(60_000)),
        ("mail", "receipt", 2, at(5)),
    ]
    .map(|(q, k, n, t)| (q.to_owned(), k.to_owned(), n, t));
    assert_eq!(got, want, "the running job of {} waits not", running.queue);
}

/// `queue_finished` counts per queue the jobs that completed or died in `[since, until)`,
/// with their summed run time (started → finalized) and wait (due → started); jobs
/// finalized outside the range, cancelled or unfinished are not counted.
pub async fn read_queue_finished_counts_a_range(db: &TestDb) {
    let a = insert_one(db, job_in("qf1", "a"), t0()).await;
    let b = insert_one(db, job_in("qf1", "b"), t0()).await;
    let a_run = claim(db, "qf1", 1, at(500)).await.remove(0);
    let b_run = claim(db, "qf1", 1, at(1_000)).await.remove(0);
    assert_eq!((a_run.id, b_run.id), (a.id, b.id));
    complete(db, a_run.lease_token(), at(2_500))
        .await
        .expect("complete");
    fail(db, b_run.lease_token(), None, at(1_500))
        .await
        .expect("dead");
    let late = running(db, job_in("qf2", "c"), t0()).await;
    complete(db, late.lease_token(), at(10_000))
        .await
        .expect("late");
    running(db, job_in("qf2", "d"), t0()).await;
    let range = |since, until| {
        db.store.queue_finished(QueueFinishedList {
            since: at(since),
            until: at(until),
        })
    };
    let both = QueueFinished {
        queue: "qf1".into(),
        completed: 1,
        dead: 1,
        timed: 2,
        run_ms: 2_000 + 500,
        wait_ms: 500 + 1_000,
    };
    assert_eq!(range(1_000, 3_000).await.expect("finished"), vec![both]);
    let dead_only = QueueFinished {
        queue: "qf1".into(),
        completed: 0,
        dead: 1,
        timed: 1,
        run_ms: 500,
        wait_ms: 1_000,
    };
    assert_eq!(
        range(1_500, 2_500).await.expect("until excluded"),
        vec![dead_only]
    );
    assert!(range(3_000, 9_000).await.expect("empty").is_empty());
}
