//! Transactions: what a `StoreTx` writes is visible only after `commit`, a rollback or a
//! drop discards it, and a caller's own statements (`execute`/`query` with `SqlValue`,
//! `$n` placeholders on every store) commit or roll back together with idem's writes —
//! the basis of `enqueue_tx` and of `Transactional` effects.

use chrono::TimeZone;
use idem_store::{
    AttemptOutcome, Backend, JobComplete, JobInsert, JobLock, JobState, SqlValue, StoreError,
    StoreTx,
};
use serde_json::json;

use crate::TestDb;
use crate::fixture::{
    all_jobs, at, attempts, claim_params, get, insert_one, job, outcomes, running, t0,
};

/// A portable table of the caller's own.
const CREATE_NOTE: &str = "CREATE TABLE t_note (id BIGINT PRIMARY KEY, note TEXT)";
const INSERT_NOTE: &str = "INSERT INTO t_note (id, note) VALUES ($1, $2)";
const SELECT_NOTES: &str = "SELECT id, note FROM t_note ORDER BY id";

async fn create_note_table(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    tx.execute(CREATE_NOTE, &[]).await.expect("create t_note");
    tx.commit().await.expect("commit");
}

async fn insert_job(tx: &mut Box<dyn StoreTx>, kind: &str) -> i64 {
    let params = JobInsert {
        jobs: vec![job(kind)],
        now: Some(t0()),
        ..Default::default()
    };
    tx.job_insert(params)
        .await
        .expect("job_insert in tx")
        .remove(0)
        .id
}

async fn notes(db: &TestDb) -> Vec<Vec<SqlValue>> {
    db.store
        .query(SELECT_NOTES, &[])
        .await
        .expect("select notes")
}

/// Both stores and their transactions say which backend they are.
pub async fn tx_backend_is_reported(db: &TestDb) {
    assert_eq!(db.store.backend(), db.backend);
    let tx = db.store.begin().await.expect("begin");
    assert_eq!(tx.backend(), db.backend);
    tx.rollback().await.expect("rollback");
}

/// Writes of a committed transaction are visible; before the commit they are visible
/// inside it and not outside.
pub async fn tx_commit_publishes_writes(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let id = insert_job(&mut tx, "committed").await;
    let inside = tx
        .query("SELECT count(*) FROM idem_job WHERE id = $1", &[id.into()])
        .await
        .expect("query in tx");
    assert_eq!(
        inside,
        vec![vec![SqlValue::Int(1)]],
        "a transaction reads its own writes"
    );
    assert_eq!(
        db.store.job_get(id).await.expect("job_get"),
        None,
        "visible before commit"
    );
    tx.commit().await.expect("commit");
    assert_eq!(get(db, id).await.kind, "committed");
}

/// A rolled-back transaction leaves no job, no claim and no completion behind.
pub async fn tx_rollback_discards_writes(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let id = insert_job(&mut tx, "rolled_back").await;
    tx.rollback().await.expect("rollback");
    assert_eq!(db.store.job_get(id).await.expect("job_get"), None);
    let waiting = insert_one(db, job("waiting"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let claimed = tx
        .job_claim(claim_params("default", 1, t0()))
        .await
        .expect("claim in tx");
    assert_eq!(claimed.len(), 1);
    tx.rollback().await.expect("rollback");
    assert_eq!(
        get(db, waiting.id).await,
        waiting,
        "a rolled-back claim left a trace"
    );
}

/// Dropping a transaction without commit rolls it back, and the store stays usable.
pub async fn tx_drop_discards_writes(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let id = insert_job(&mut tx, "dropped").await;
    drop(tx);
    assert_eq!(db.store.job_get(id).await.expect("job_get"), None);
    // The next write goes through: the dropped transaction released the writer. (Its id
    // may be reused: a rolled-back id is never promised to stay unused.)
    let next = insert_one(db, job("after_drop"), t0()).await;
    assert_eq!(all_jobs(db).await, vec![next]);
}

/// `execute` and `query` run a caller's statements with `$n` placeholders: rows affected
/// are counted, integers, text and NULL read back as bound, and a query matching
/// nothing returns no rows.
pub async fn tx_execute_and_query_round_trip(db: &TestDb) {
    create_note_table(db).await;
    let mut tx = db.store.begin().await.expect("begin");
    let rows: [(i64, SqlValue); 3] = [
        (1, "one".into()),
        (2, SqlValue::Null),
        (3, "ünïcödé 🦀".into()),
    ];
    for (id, note) in rows.clone() {
        assert_eq!(
            tx.execute(INSERT_NOTE, &[id.into(), note])
                .await
                .expect("insert"),
            1
        );
    }
    let changed = tx
        .execute(
            "UPDATE t_note SET note = $1 WHERE id >= $2",
            &["late".into(), SqlValue::Int(3)],
        )
        .await
        .expect("update");
    assert_eq!(changed, 1);
    let one = tx
        .query("SELECT note FROM t_note WHERE id = $1", &[SqlValue::Int(1)])
        .await
        .expect("query in tx");
    assert_eq!(one, vec![vec![SqlValue::Text("one".into())]]);
    tx.commit().await.expect("commit");
    let expected = vec![
        vec![SqlValue::Int(1), SqlValue::Text("one".into())],
        vec![SqlValue::Int(2), SqlValue::Null],
        vec![SqlValue::Int(3), SqlValue::Text("late".into())],
    ];
    assert_eq!(notes(db).await, expected);
    // Aggregates read back portably when cast: PostgreSQL's sum(bigint) is NUMERIC.
    let totals = "SELECT CAST(sum(id) AS BIGINT), count(*), count(note) FROM t_note";
    let totals = db.store.query(totals, &[]).await.expect("aggregates");
    assert_eq!(
        totals,
        vec![vec![SqlValue::Int(6), SqlValue::Int(3), SqlValue::Int(2)]]
    );
    let none = db
        .store
        .query("SELECT id FROM t_note WHERE id > $1", &[SqlValue::Int(3)]);
    assert!(
        none.await.expect("empty select").is_empty(),
        "no rows is an empty result"
    );
}

/// Every [`SqlValue`] binds, and reads back as its store documents: PostgreSQL returns
/// the same variant; SQLite returns its storage class (booleans and timestamps as
/// integers — timestamps in milliseconds — and JSON as text).
pub async fn tx_sql_values_round_trip_by_dialect(db: &TestDb) {
    let create = "CREATE TABLE t_value (id BIGINT PRIMARY KEY, b BOOLEAN, r DOUBLE PRECISION, \
                  y BYTEA, j JSONB, ts TIMESTAMPTZ)";
    let ts = chrono::Utc
        .timestamp_millis_opt(1_900_000_000_123)
        .single()
        .expect("ts");
    let doc = json!({"k": [1, "two", null], "ü": true});
    let bound = vec![
        SqlValue::Int(1),
        SqlValue::Bool(true),
        SqlValue::Real(-2.5),
        SqlValue::Bytes(vec![0, 1, 254, 255]),
        SqlValue::Json(doc.clone()),
        SqlValue::Timestamp(ts),
    ];
    let mut tx = db.store.begin().await.expect("begin");
    tx.execute(create, &[]).await.expect("create t_value");
    let insert = "INSERT INTO t_value (id, b, r, y, j, ts) VALUES ($1, $2, $3, $4, $5, $6)";
    assert_eq!(tx.execute(insert, &bound).await.expect("insert"), 1);
    tx.execute("INSERT INTO t_value (id) VALUES ($1)", &[SqlValue::Int(2)])
        .await
        .expect("nulls");
    tx.commit().await.expect("commit");
    let rows = db
        .store
        .query("SELECT id, b, r, y, j, ts FROM t_value ORDER BY id", &[])
        .await
        .expect("select");
    let expected_first = match db.backend {
        Backend::Postgres => bound,
        Backend::Sqlite => vec![
            SqlValue::Int(1),
            SqlValue::Int(1),
            SqlValue::Real(-2.5),
            SqlValue::Bytes(vec![0, 1, 254, 255]),
            SqlValue::Text(doc.to_string()),
            SqlValue::Int(ts.timestamp_millis()),
        ],
    };
    let mut nulls = vec![SqlValue::Int(2)];
    nulls.extend(std::iter::repeat_n(SqlValue::Null, 5));
    assert_eq!(rows, vec![expected_first, nulls]);
}

/// A caller's failing statement reports what happened: a unique violation is
/// [`StoreError::Duplicate`], and the caller's transaction can still be rolled back.
pub async fn tx_unique_violation_is_duplicate(db: &TestDb) {
    create_note_table(db).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.execute(INSERT_NOTE, &[SqlValue::Int(1), "first".into()])
        .await
        .expect("insert");
    let again = tx
        .execute(INSERT_NOTE, &[SqlValue::Int(1), "again".into()])
        .await;
    assert!(matches!(again, Err(StoreError::Duplicate(_))), "{again:?}");
    tx.rollback().await.expect("rollback after an error");
    assert!(notes(db).await.is_empty());
}

/// A job inserted in the caller's transaction commits with the caller's own row, or
/// rolls back with it (`enqueue_tx`).
pub async fn tx_job_shares_the_callers_transaction(db: &TestDb) {
    create_note_table(db).await;
    for commit in [true, false] {
        let id = if commit { 1 } else { 2 };
        let mut tx = db.store.begin().await.expect("begin");
        tx.execute(INSERT_NOTE, &[SqlValue::Int(id), "order".into()])
            .await
            .expect("insert");
        let job_id = insert_job(&mut tx, &format!("follow-up-{id}")).await;
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        assert_eq!(
            db.store.job_get(job_id).await.expect("job_get").is_some(),
            commit
        );
    }
    assert_eq!(
        notes(db).await,
        vec![vec![SqlValue::Int(1), SqlValue::Text("order".into())]]
    );
    assert_eq!(all_jobs(db).await.len(), 1);
}

/// A `Transactional` effect: fence check, the caller's write, and the completion in one
/// transaction. Rolled back, nothing of it remains and the claim is still current;
/// committed, the effect and the completion are there together.
pub async fn tx_effect_commits_with_the_completion(db: &TestDb) {
    create_note_table(db).await;
    let row = running(db, job("effect"), t0()).await;
    for commit in [false, true] {
        let mut tx = db.store.begin().await.expect("begin");
        tx.job_lock(JobLock::of(row.lease_token()))
            .await
            .expect("fence check");
        tx.execute(INSERT_NOTE, &[SqlValue::Int(7), "effect".into()])
            .await
            .expect("effect");
        let params = JobComplete {
            result: None,
            lease: row.lease_token(),
            now: Some(at(1_000)),
        };
        let done = tx.job_complete(params).await.expect("complete in tx");
        assert_eq!(done.state, JobState::Completed);
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
            assert_eq!(
                get(db, row.id).await,
                row,
                "rolled-back completion left a trace"
            );
            assert!(notes(db).await.is_empty(), "rolled-back effect left a row");
            assert!(
                attempts(db, row.id).await.is_empty(),
                "rolled-back attempt row"
            );
        }
    }
    assert_eq!(get(db, row.id).await.state, JobState::Completed);
    assert_eq!(
        notes(db).await,
        vec![vec![SqlValue::Int(7), SqlValue::Text("effect".into())]]
    );
    let outcomes = outcomes(db, row.id).await;
    assert_eq!(outcomes, vec![AttemptOutcome::Completed]);
}
