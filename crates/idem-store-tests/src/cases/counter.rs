//! `counter_next`: numbers tied to effect keys. Distinct keys get 1, 2, 3…; the same key
//! gets its number again; a rolled-back allocation gives its number back (no gap); a
//! claim that is not current cannot allocate.

use idem_store::{CounterAssigned, CounterNext, JobRow};

use crate::TestDb;
use crate::fixture::{job_in, reclaimed, running, t0};

fn next(job: &JobRow, counter: &str, key: &str) -> CounterNext {
    CounterNext {
        counter: counter.into(),
        key: key.into(),
        lease: job.lease_token(),
        now: None,
    }
}

/// Numbers follow allocation order per counter, repeat per key, and come back on rollback.
pub async fn counter_numbers_have_no_gaps_and_repeat_per_key(db: &TestDb) {
    let job = running(db, job_in("c1", "invoice"), t0()).await;
    let assigned = |number, new| CounterAssigned { number, new };
    let mut tx = db.store.begin().await.expect("begin");
    assert_eq!(
        tx.counter_next(next(&job, "invoice", "inv:a"))
            .await
            .expect("a"),
        assigned(1, true)
    );
    assert_eq!(
        tx.counter_next(next(&job, "invoice", "inv:b"))
            .await
            .expect("b"),
        assigned(2, true)
    );
    assert_eq!(
        tx.counter_next(next(&job, "invoice", "inv:a"))
            .await
            .expect("a again"),
        assigned(1, false)
    );
    assert_eq!(
        tx.counter_next(next(&job, "receipt", "rcp:a"))
            .await
            .expect("other counter"),
        assigned(1, true)
    );
    tx.commit().await.expect("commit");
    let mut tx = db.store.begin().await.expect("begin");
    assert_eq!(
        tx.counter_next(next(&job, "invoice", "inv:c"))
            .await
            .expect("c"),
        assigned(3, true)
    );
    tx.rollback().await.expect("rollback");
    let mut tx = db.store.begin().await.expect("begin");
    let d = tx
        .counter_next(next(&job, "invoice", "inv:d"))
        .await
        .expect("d");
    assert_eq!(
        d,
        assigned(3, true),
        "a rolled-back allocation leaves no gap"
    );
    tx.commit().await.expect("commit");
}

/// A claim whose fence is no longer current cannot allocate: `LeaseLost`.
pub async fn counter_next_refuses_a_stale_claim(db: &TestDb) {
    let current = reclaimed(db, job_in("c2", "invoice"), t0()).await;
    let stale = JobRow {
        fence: current.fence - 1,
        ..current.clone()
    };
    let mut tx = db.store.begin().await.expect("begin");
    let err = tx
        .counter_next(next(&stale, "invoice", "inv:x"))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let ok = tx
        .counter_next(next(&current, "invoice", "inv:x"))
        .await
        .expect("current");
    assert_eq!(
        ok,
        CounterAssigned {
            number: 1,
            new: true
        }
    );
    tx.rollback().await.expect("rollback");
}

/// One effect key holds a number on each of several counters (an order's invoice number
/// and its receipt number), each allocated once.
pub async fn counter_one_key_numbers_on_two_counters(db: &TestDb) {
    let job = running(db, job_in("c3", "order"), t0()).await;
    let assigned = |number, new| CounterAssigned { number, new };
    let mut tx = db.store.begin().await.expect("begin");
    for (counter, want) in [
        ("invoice", assigned(1, true)),
        ("receipt", assigned(1, true)),
        ("invoice", assigned(1, false)),
        ("receipt", assigned(1, false)),
    ] {
        let got = tx.counter_next(next(&job, counter, "order:7")).await;
        assert_eq!(got.expect(counter), want, "{counter}");
    }
    tx.commit().await.expect("commit");
}
