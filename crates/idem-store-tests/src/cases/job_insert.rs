//! `job_insert`: one statement for any number of jobs, rows back in the order given,
//! `scheduled` versus `available` by `run_at` against `now`, plain defaults, and args that
//! round-trip unchanged.

use chrono::TimeZone;
use idem_store::{JobInsert, JobRow, JobState, NewJob, StoreError};
use serde_json::json;

use crate::TestDb;
use crate::fixture::{MAX_ATTEMPTS, QUEUE, all_jobs, at, claim, get, insert, insert_one, job, t0};

/// One job: the returned row is the stored row, with every default in place.
pub async fn insert_one_stores_the_defaults(db: &TestDb) {
    let new = NewJob {
        args: json!({"order_id": 42}),
        priority: 7,
        ..job("receipt-mail")
    };
    let row = insert_one(db, new, t0()).await;
    let expected = JobRow {
        follows_job: None,
        follows_batch: None,
        trace_parent: None,
        result: None,
        id: row.id,
        kind: "receipt-mail".into(),
        queue: QUEUE.into(),
        args: json!({"order_id": 42}),
        priority: 7,
        state: JobState::Available,
        attempt: 0,
        max_attempts: MAX_ATTEMPTS,
        run_at: t0(),
        fence: 0,
        lease_owner: None,
        lease_expires_at: None,
        batch_id: None,
        created_at: t0(),
        attempted_at: None,
        finalized_at: None,
        last_error: None,
        snoozes: 0,
        enqueue_key: None,
        principal: None,
    };
    assert_eq!(row, expected);
    assert_eq!(get(db, row.id).await, expected, "job_get after insert");
}

/// The producer's trace context is kept with the job, and read back with it.
pub async fn insert_keeps_the_trace_parent(db: &TestDb) {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = NewJob {
        trace_parent: Some(tp.to_owned()),
        ..job("traced")
    };
    let row = insert_one(db, traced, t0()).await;
    assert_eq!(row.trace_parent.as_deref(), Some(tp));
    assert_eq!(get(db, row.id).await.trace_parent.as_deref(), Some(tp));
    let plain = insert_one(db, job("plain"), t0()).await;
    assert_eq!(get(db, plain.id).await.trace_parent, None);
}

/// Many jobs in one call: the rows come back in the order given (not sorted by kind,
/// queue or priority), with ids increasing in that order.
pub async fn insert_many_keeps_the_given_order(db: &TestDb) {
    let spec = [
        ("e", "q2", 3),
        ("a", "q1", -1),
        ("d", "q3", 0),
        ("b", "q1", 9),
        ("c", "q2", 2),
    ];
    let jobs: Vec<NewJob> = spec
        .iter()
        .map(|(kind, queue, priority)| NewJob {
            queue: (*queue).into(),
            priority: *priority,
            ..job(kind)
        })
        .collect();
    let rows = insert(db, jobs.clone(), t0()).await;
    let got: Vec<(&str, &str, i16)> = rows
        .iter()
        .map(|r| (r.kind.as_str(), r.queue.as_str(), r.priority))
        .collect();
    assert_eq!(got, spec.to_vec(), "rows in the order given");
    assert!(
        rows.windows(2).all(|w| w[0].id < w[1].id),
        "ids increase: {rows:?}"
    );
    for row in &rows {
        assert_eq!(&get(db, row.id).await, row, "stored row of job {}", row.id);
    }
}

/// A job whose `run_at` is after `now` is `scheduled`; at or before `now` (or `None`) it
/// is `available`, and `run_at` defaults to `now`.
pub async fn insert_state_follows_run_at(db: &TestDb) {
    let cases = [
        (None, JobState::Available, t0()),
        (Some(at(-60_000)), JobState::Available, at(-60_000)),
        (Some(t0()), JobState::Available, t0()),
        (Some(at(1)), JobState::Scheduled, at(1)),
        (Some(at(3_600_000)), JobState::Scheduled, at(3_600_000)),
    ];
    let jobs = cases
        .iter()
        .map(|(run_at, _, _)| NewJob {
            run_at: *run_at,
            ..job("timed")
        })
        .collect();
    let rows = insert(db, jobs, t0()).await;
    for (row, (run_at, state, stored_run_at)) in rows.iter().zip(cases) {
        assert_eq!(
            (row.state, row.run_at),
            (state, stored_run_at),
            "run_at {run_at:?}"
        );
        assert_eq!(row.created_at, t0(), "created_at is now");
    }
}

/// Args come back exactly as given: nested objects and arrays, unicode, escapes, the
/// extremes of i64, floats, booleans, null, empty containers, bare scalars.
pub async fn insert_round_trips_args(db: &TestDb) {
    let values = args_samples();
    let jobs = values
        .iter()
        .map(|args| NewJob {
            args: args.clone(),
            ..job("args")
        })
        .collect();
    let rows = insert(db, jobs, t0()).await;
    for (row, args) in rows.iter().zip(&values) {
        assert_eq!(&row.args, args, "returned args");
        assert_eq!(&get(db, row.id).await.args, args, "stored args");
    }
}

fn args_samples() -> Vec<serde_json::Value> {
    let mut deep = json!("bottom");
    for i in 0..20 {
        deep = json!({ format!("level{i}"): [deep, i] });
    }
    vec![
        json!({"order": {"id": 42, "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B", "qty": 1}]}}),
        json!({"text": "日本語 ünïcödé emoji 🦀 \"quoted\" back\\slash\nnew line\ttab"}),
        json!({"zebra": 1, "apple": 2, "Mango": 3, "ключ": "значение"}),
        json!({"max": i64::MAX, "min": i64::MIN, "neg": -17, "zero": 0}),
        json!({"half": 0.5, "tenth": 0.1, "neg": -2.25, "big": 1.0e100}),
        json!({"t": true, "f": false, "n": null, "empty_obj": {}, "empty_arr": []}),
        json!([1, "two", [3], {"four": 4}]),
        json!("a bare string"),
        json!(12345),
        json!({"u64max": u64::MAX, "exp": 1e-7, "negzero": -0.0}),
        json!(null),
        json!({}),
        deep,
    ]
}

/// The extremes of every field round-trip: priorities and `max_attempts` at their
/// type's bounds, `run_at` a century before and after `now`, 255-character unicode
/// kind and queue.
pub async fn insert_round_trips_extreme_values(db: &TestDb) {
    let long: String = "é".repeat(255);
    let past = chrono::Utc
        .with_ymd_and_hms(1930, 1, 1, 0, 0, 0)
        .single()
        .expect("past");
    let future = chrono::Utc
        .with_ymd_and_hms(2130, 12, 31, 23, 59, 59)
        .single()
        .expect("future")
        + chrono::Duration::milliseconds(999);
    let jobs = vec![
        NewJob {
            priority: i16::MIN,
            max_attempts: i32::MAX,
            run_at: Some(past),
            ..job("low")
        },
        NewJob {
            priority: i16::MAX,
            max_attempts: 1,
            run_at: Some(future),
            ..job("high")
        },
        NewJob {
            kind: long.clone(),
            queue: long.clone(),
            ..job("x")
        },
    ];
    let rows = insert(db, jobs.clone(), t0()).await;
    for (row, new) in rows.iter().zip(&jobs) {
        let stored = get(db, row.id).await;
        assert_eq!(&stored, row);
        let got = (
            &*row.kind,
            &*row.queue,
            row.priority,
            row.max_attempts,
            row.run_at,
        );
        let want = (
            &*new.kind,
            &*new.queue,
            new.priority,
            new.max_attempts,
            new.run_at.unwrap_or(t0()),
        );
        assert_eq!(got, want);
    }
    assert_eq!(rows[0].state, JobState::Available);
    assert_eq!(rows[1].state, JobState::Scheduled);
    let first = claim(db, QUEUE, 1, t0()).await;
    assert_eq!(first[0].id, rows[0].id, "priority i16::MIN goes first");
}

/// An empty batch inserts nothing and returns nothing.
pub async fn insert_empty_batch_is_a_no_op(db: &TestDb) {
    assert!(insert(db, vec![], t0()).await.is_empty());
    let mut tx = db.store.begin().await.expect("begin");
    let rows = tx
        .job_insert(JobInsert {
            jobs: vec![],
            now: None,
            ..Default::default()
        })
        .await
        .expect("empty job_insert in a transaction");
    assert!(rows.is_empty());
    tx.commit().await.expect("commit");
    assert!(all_jobs(db).await.is_empty());
}

/// An empty kind or queue, or `max_attempts` below 1, is refused with
/// [`StoreError::Invalid`], and the whole batch is refused with it.
pub async fn insert_refuses_invalid_jobs(db: &TestDb) {
    let bad = [
        NewJob {
            kind: String::new(),
            ..job("k")
        },
        NewJob {
            queue: String::new(),
            ..job("k")
        },
        NewJob {
            max_attempts: 0,
            ..job("k")
        },
    ];
    for invalid in bad {
        let batch = vec![job("fine"), invalid.clone()];
        let result = db
            .store
            .job_insert(JobInsert {
                jobs: batch,
                now: Some(t0()),
                ..Default::default()
            })
            .await;
        assert!(
            matches!(result, Err(StoreError::Invalid(_))),
            "inserting {invalid:?}: expected Invalid, got {result:?}"
        );
    }
    assert!(
        all_jobs(db).await.is_empty(),
        "a refused batch inserts nothing"
    );
}

/// With `now: None` the database clock stamps the job: `created_at` and `run_at` fall
/// between two readings of [`idem_store::Store::now`].
pub async fn insert_uses_the_database_clock(db: &TestDb) {
    let before = db.store.now().await.expect("now");
    let rows = db
        .store
        .job_insert(JobInsert {
            jobs: vec![job("clock")],
            now: None,
            ..Default::default()
        })
        .await
        .expect("job_insert");
    let after = db.store.now().await.expect("now");
    let row = &rows[0];
    assert!(
        before <= row.created_at && row.created_at <= after,
        "created_at {} not within [{before}, {after}]",
        row.created_at
    );
    assert_eq!(row.run_at, row.created_at, "run_at defaults to now");
    assert_eq!(row.state, JobState::Available);
    let wall = chrono::Utc::now();
    let skew = (wall - before).num_seconds().abs();
    assert!(
        skew < 300,
        "database clock {before} is {skew} s from this host's {wall}"
    );
}
