//! Inbound Idempotency-Key records: `http_key_reserve` takes a key of a principal in one
//! conditional write on `(principal, key)`. A new key is `Reserved` with fence 1; a key
//! held by a live reservation, or completed within its retention, is `Held` with the row
//! as stored and the store's time, whatever the fingerprint, and nothing changes. A key
//! is taken over, with fence + 1, when it was released, when it is past its retention
//! (`created_at <= now - retention`, whatever it holds), or when its reservation's lock
//! ended (`locked_until <= now`) and the fingerprint is the same. The holding request's
//! completion and release carry its fence and change nothing unless that fence still
//! holds the key in progress. Principals never share a key, and purges go by
//! `created_at` alone. The races run last: a reservation that waits for another
//! transaction's reservation, release or completion judges the row as committed.

use std::sync::Arc;

use idem_store::{
    HttpKeyComplete, HttpKeyRelease, HttpKeyReserve, HttpKeyReserved, HttpKeyRow, HttpKeyState,
    Purge, PurgeTarget, StoreResult, StoreTx, Timestamp,
};
use serde_json::json;
use tokio::sync::Barrier;

use crate::TestDb;
use crate::fixture::{assert_waits_for, at, spawn_started};
use crate::harness::within;

/// The principal of most cases.
const ALICE: &str = "alice";
/// Another principal.
const BOB: &str = "bob";
/// The fingerprint of most requests.
const FP: &str = "fp-post-/v1/jobs-1";
/// Another request's fingerprint.
const OTHER_FP: &str = "fp-post-/v1/jobs-2";
/// How long a reservation blocks repeats, in milliseconds.
const LEASE_MS: i64 = 30_000;
/// How long a record is kept, in milliseconds (24 h).
const RETENTION_MS: i64 = 86_400_000;

/// The params of a reservation of `key` of `principal` for a request with `fingerprint`
/// at `at(ms)`.
fn params(principal: &str, key: &str, fingerprint: &str, ms: i64) -> HttpKeyReserve {
    HttpKeyReserve {
        principal: principal.to_owned(),
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
        lease_ms: LEASE_MS,
        retention_ms: RETENTION_MS,
        now: Some(at(ms)),
    }
}

/// Reserves `key` of `principal` for `fingerprint` at `at(ms)`, in its own transaction.
async fn reserve(
    db: &TestDb,
    principal: &str,
    key: &str,
    fingerprint: &str,
    ms: i64,
) -> HttpKeyReserved {
    let p = params(principal, key, fingerprint, ms);
    db.store
        .http_key_reserve(p)
        .await
        .expect("http_key_reserve")
}

/// The row of a `Reserved` answer; panics on any other.
#[track_caller]
fn reserved(answer: HttpKeyReserved) -> HttpKeyRow {
    match answer {
        HttpKeyReserved::Reserved(row) => row,
        other => panic!("expected Reserved, got {other:?}"),
    }
}

/// The answer `Held` with `row` at `at(ms)`.
fn held(row: &HttpKeyRow, ms: i64) -> HttpKeyReserved {
    HttpKeyReserved::Held {
        row: row.clone(),
        now: at(ms),
    }
}

/// The row a reservation of `key` of `principal` for `fingerprint` at `at(ms)` writes
/// with `fence`: in progress, locked for [`LEASE_MS`], no response.
fn fresh(principal: &str, key: &str, fingerprint: &str, ms: i64, fence: i64) -> HttpKeyRow {
    HttpKeyRow {
        principal: principal.to_owned(),
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
        state: HttpKeyState::InProgress,
        fence,
        locked_until: at(ms + LEASE_MS),
        status: None,
        headers: None,
        body: None,
        created_at: at(ms),
    }
}

/// A stored response: status, headers, body.
#[derive(Clone)]
struct Response {
    status: i32,
    headers: serde_json::Value,
    body: Vec<u8>,
}

/// A response whose body is not UTF-8 (and holds a NUL, a lone continuation byte and a
/// CR LF), with headers whose order matters.
fn binary_response() -> Response {
    Response {
        status: 201,
        headers: json!([
            ["content-type", "application/octet-stream"],
            ["x-request-id", "r-1"],
            ["content-type", "ignored-duplicate"]
        ]),
        body: vec![0xff, 0xfe, 0x00, 0x80, b'\r', b'\n', 0xc3, 0x28, 0x7f],
    }
}

/// The params of the completion of the reservation `row` with `response`, under `fence`.
fn complete_params(row: &HttpKeyRow, fence: i64, response: &Response) -> HttpKeyComplete {
    HttpKeyComplete {
        principal: row.principal.clone(),
        key: row.key.clone(),
        fence,
        created_at: row.created_at,
        status: response.status,
        headers: response.headers.clone(),
        body: response.body.clone(),
    }
}

/// Completes the key of `row` under `fence` with `response`.
async fn complete(db: &TestDb, row: &HttpKeyRow, fence: i64, response: &Response) -> bool {
    let p = complete_params(row, fence, response);
    db.store
        .http_key_complete(p)
        .await
        .expect("http_key_complete")
}

/// The params of the release of the key of `row` under `fence`.
fn release_params(row: &HttpKeyRow, fence: i64) -> HttpKeyRelease {
    HttpKeyRelease {
        principal: row.principal.clone(),
        key: row.key.clone(),
        fence,
        created_at: row.created_at,
    }
}

/// Releases the key of `row` under `fence`.
async fn release(db: &TestDb, row: &HttpKeyRow, fence: i64) -> bool {
    let p = release_params(row, fence);
    db.store
        .http_key_release(p)
        .await
        .expect("http_key_release")
}

/// `row` completed with `response`.
fn completed(row: &HttpKeyRow, response: &Response) -> HttpKeyRow {
    HttpKeyRow {
        state: HttpKeyState::Completed,
        status: Some(response.status),
        headers: Some(response.headers.clone()),
        body: Some(response.body.clone()),
        ..row.clone()
    }
}

/// State and fence of the stored record of `key` of `principal`, read with plain SQL
/// (a released row answers no reservation without being taken).
async fn state_of(db: &TestDb, principal: &str, key: &str) -> Option<(String, i64)> {
    let sql = "SELECT state, fence FROM idem_http_key WHERE principal = $1 AND key = $2";
    let rows = db
        .store
        .query(sql, &[principal.into(), key.into()])
        .await
        .expect("read idem_http_key");
    rows.first().map(|r| {
        let state = r[0].as_str().expect("state is text").to_owned();
        (state, r[1].as_i64().expect("fence is an integer"))
    })
}

/// How many records `idem_http_key` holds.
async fn records(db: &TestDb) -> i64 {
    let rows = db
        .store
        .query("SELECT count(*) FROM idem_http_key", &[])
        .await
        .expect("count idem_http_key");
    rows[0][0].as_i64().expect("a count")
}

/// The first reservation of a key gets fence 1, in progress, locked until now + lease,
/// created now, with no response.
pub async fn http_key_first_reserve_gets_fence_one(db: &TestDb) {
    let answer = reserve(db, ALICE, "k-1", FP, 1_000).await;
    assert_eq!(
        answer,
        HttpKeyReserved::Reserved(fresh(ALICE, "k-1", FP, 1_000, 1))
    );
    assert_eq!(records(db).await, 1);
}

/// While a reservation's lock lasts, another reservation of the key, with the same or
/// another fingerprint, is `Held` with the row as stored and the store's time, and
/// changes nothing.
pub async fn http_key_reserve_while_in_progress_is_held(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    for (fingerprint, ms) in [(FP, 1_000), (OTHER_FP, 2_000), (FP, 1_000 + LEASE_MS - 1)] {
        let answer = reserve(db, ALICE, "k-1", fingerprint, ms).await;
        assert_eq!(answer, held(&row, ms), "{fingerprint} at {ms}");
    }
    let again = reserve(db, ALICE, "k-1", OTHER_FP, 1_000 + LEASE_MS).await;
    assert_eq!(
        again,
        held(&row, 1_000 + LEASE_MS),
        "another fingerprint does not take a lapsed reservation"
    );
}

/// A completion under the reservation's fence stores status, headers (in order) and the
/// body byte for byte, a body that is not UTF-8 and an empty one alike; a repeat gets it
/// back as `Held`, also long after the lock ended (within the retention). A second
/// completion or a release of the completed key changes nothing.
pub async fn http_key_complete_stores_the_response_byte_for_byte(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-bin", FP, 1_000).await);
    let response = binary_response();
    assert!(
        complete(db, &row, 1, &response).await,
        "the holder completes"
    );
    let done = completed(&row, &response);
    let late = 1_000 + 10 * LEASE_MS;
    assert_eq!(
        reserve(db, ALICE, "k-bin", FP, late).await,
        held(&done, late)
    );
    assert_eq!(
        reserve(db, ALICE, "k-bin", OTHER_FP, late).await,
        held(&done, late)
    );

    let empty = Response {
        status: 204,
        headers: json!([]),
        body: Vec::new(),
    };
    let row = reserved(reserve(db, ALICE, "k-empty", FP, 2_000).await);
    assert!(complete(db, &row, 1, &empty).await);
    let answer = reserve(db, ALICE, "k-empty", FP, 3_000).await;
    assert_eq!(answer, held(&completed(&row, &empty), 3_000));
    if let HttpKeyReserved::Held { row, .. } = answer {
        assert_eq!(
            row.body,
            Some(Vec::new()),
            "an empty body is not a missing one"
        );
    }

    let bin = completed(&fresh(ALICE, "k-bin", FP, 1_000, 1), &response);
    assert!(!complete(db, &bin, 1, &empty).await, "completed once");
    assert!(
        !release(db, &bin, 1).await,
        "a completed key is not released"
    );
    assert_eq!(
        reserve(db, ALICE, "k-bin", FP, late).await,
        held(&done, late)
    );
}

/// A completion or release under a fence that does not hold the key (one above the
/// current) returns `false` and changes nothing; the holder's own completion then works.
pub async fn http_key_complete_with_a_stale_fence_changes_nothing(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let response = binary_response();
    assert!(
        !complete(db, &row, 2, &response).await,
        "fence 2 does not hold it"
    );
    assert!(
        !complete(db, &row, 0, &response).await,
        "fence 0 does not hold it"
    );
    assert!(!release(db, &row, 2).await, "nor releases it");
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, 2_000).await,
        held(&row, 2_000)
    );
    assert!(complete(db, &row, 1, &response).await, "the holder's fence");
    let done = completed(&row, &response);
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, 3_000).await,
        held(&done, 3_000)
    );
}

/// A released key keeps its row (`released`, same fence) and the next reservation, with
/// any fingerprint, takes it with fence 2 as a fresh reservation.
pub async fn http_key_release_then_another_fingerprint_takes_it_with_fence_two(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    assert!(release(db, &row, 1).await, "the holder releases");
    assert_eq!(
        state_of(db, ALICE, "k-1").await,
        Some(("released".to_owned(), 1))
    );
    assert!(!release(db, &row, 1).await, "released once");
    let answer = reserve(db, ALICE, "k-1", OTHER_FP, 2_000).await;
    assert_eq!(
        answer,
        HttpKeyReserved::Reserved(fresh(ALICE, "k-1", OTHER_FP, 2_000, 2))
    );
}

/// A reservation whose lock has ended (`locked_until <= now`) is taken over only by a
/// request with the same fingerprint, with fence 2; before the end, or with another
/// fingerprint, it is `Held` and unchanged.
pub async fn http_key_lapsed_reservation_is_taken_over_only_with_the_same_fingerprint(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let ends = 1_000 + LEASE_MS;
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, ends - 1).await,
        held(&row, ends - 1)
    );
    for ms in [ends, ends + 5 * LEASE_MS] {
        let answer = reserve(db, ALICE, "k-1", OTHER_FP, ms).await;
        assert_eq!(answer, held(&row, ms), "another fingerprint at {ms}");
    }
    let taken = reserve(db, ALICE, "k-1", FP, ends).await;
    assert_eq!(
        taken,
        HttpKeyReserved::Reserved(fresh(ALICE, "k-1", FP, ends, 2))
    );
}

/// A record past its retention (`created_at <= now - retention`) is taken as if absent,
/// whatever it holds and whatever the fingerprint: a completed response, or a
/// reservation of another fingerprint. One millisecond earlier it still answers.
pub async fn http_key_completed_row_past_retention_is_taken_over(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-done", FP, 1_000).await);
    let response = binary_response();
    assert!(complete(db, &row, 1, &response).await);
    let expires = 1_000 + RETENTION_MS;
    assert_eq!(
        reserve(db, ALICE, "k-done", OTHER_FP, expires - 1).await,
        held(&completed(&row, &response), expires - 1)
    );
    let taken = reserve(db, ALICE, "k-done", OTHER_FP, expires).await;
    assert_eq!(
        taken,
        HttpKeyReserved::Reserved(fresh(ALICE, "k-done", OTHER_FP, expires, 2))
    );

    reserved(reserve(db, ALICE, "k-open", FP, 1_000).await);
    let taken = reserve(db, ALICE, "k-open", OTHER_FP, expires).await;
    assert_eq!(
        taken,
        HttpKeyReserved::Reserved(fresh(ALICE, "k-open", OTHER_FP, expires, 2))
    );
}

/// After a takeover, the earlier request's completion and release under its old fence
/// return `false` and leave the new reservation as it is; the new holder's completion
/// stores its response.
pub async fn http_key_old_fence_writes_nothing_after_a_takeover(db: &TestDb) {
    let old = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let ends = 1_000 + LEASE_MS;
    let new = reserved(reserve(db, ALICE, "k-1", FP, ends).await);
    assert_eq!(new.fence, 2);
    let response = binary_response();
    assert!(
        !complete(db, &old, 1, &response).await,
        "the old fence completes nothing"
    );
    assert!(
        !release(db, &old, 1).await,
        "the old fence releases nothing"
    );
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, ends + 1).await,
        held(&new, ends + 1)
    );
    assert!(complete(db, &new, 2, &response).await);
    let done = completed(&new, &response);
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, ends + 2).await,
        held(&done, ends + 2)
    );
    assert!(!complete(db, &old, 1, &binary_response()).await);
}

/// Two principals with the same key hold two records: each is reserved with fence 1,
/// and one's completion or release never touches the other's.
pub async fn http_key_principals_are_independent(db: &TestDb) {
    let a = reserved(reserve(db, ALICE, "shared", FP, 1_000).await);
    let b = reserved(reserve(db, BOB, "shared", OTHER_FP, 1_000).await);
    assert_eq!(a, fresh(ALICE, "shared", FP, 1_000, 1));
    assert_eq!(b, fresh(BOB, "shared", OTHER_FP, 1_000, 1));
    let response = binary_response();
    assert!(complete(db, &a, 1, &response).await);
    assert_eq!(reserve(db, BOB, "shared", FP, 2_000).await, held(&b, 2_000));
    assert!(release(db, &b, 1).await);
    let done = completed(&a, &response);
    assert_eq!(
        reserve(db, ALICE, "shared", FP, 3_000).await,
        held(&done, 3_000)
    );
    assert_eq!(
        state_of(db, BOB, "shared").await,
        Some(("released".to_owned(), 1))
    );
}

/// Purges `limit` Idempotency-Key records created before `before`; how many went.
async fn purge(db: &TestDb, before: Timestamp, limit: u32) -> u64 {
    let params = Purge {
        target: PurgeTarget::HttpKeys,
        before,
        limit,
    };
    db.store.purge(params).await.expect("purge")
}

/// How many records a purge with cutoff `before` would delete.
async fn count(db: &TestDb, before: Timestamp) -> u64 {
    let count = db.store.purge_count(PurgeTarget::HttpKeys, before).await;
    count.expect("purge_count")
}

/// A purge deletes records created before the cutoff (strictly), oldest first and at
/// most `limit` at a time, whatever their state (in progress, completed, released),
/// except a reservation whose lock outlives the cutoff: a request that may still run
/// keeps its key, and goes once a later cutoff passes its lock. A record reserved anew
/// counts from its takeover. The count agrees throughout.
pub async fn http_key_purge_goes_by_created_at_only(db: &TestDb) {
    let response = binary_response();
    let open = reserved(reserve(db, ALICE, "k-open", FP, 1_000).await);
    let done = reserved(reserve(db, ALICE, "k-done", FP, 2_000).await);
    assert!(complete(db, &done, 1, &response).await);
    let gone = reserved(reserve(db, BOB, "k-gone", FP, 3_000).await);
    assert!(release(db, &gone, 1).await);
    let retaken = reserved(reserve(db, BOB, "k-again", FP, 500).await);
    assert!(release(db, &retaken, 1).await);
    reserved(reserve(db, BOB, "k-again", FP, 9_000).await);
    reserved(reserve(db, ALICE, "k-late", FP, 5_000).await);
    assert_eq!(open.locked_until, at(1_000 + LEASE_MS), "still locked");

    let cutoff = at(5_000);
    assert_eq!(count(db, at(2_000)).await, 0, "the cutoff is strict");
    assert_eq!(
        count(db, cutoff).await,
        2,
        "the live reservation is not counted"
    );
    assert_eq!(purge(db, cutoff, 1).await, 1);
    assert_eq!(state_of(db, ALICE, "k-done").await, None, "oldest first");
    assert_eq!(count(db, cutoff).await, 1);
    assert_eq!(purge(db, cutoff, 10).await, 1);
    assert_eq!(purge(db, cutoff, 10).await, 0);
    assert_eq!(count(db, cutoff).await, 0);
    assert_eq!(state_of(db, BOB, "k-gone").await, None);
    assert_eq!(
        state_of(db, ALICE, "k-open").await,
        Some(("in_progress".to_owned(), 1)),
        "its lock outlives the cutoff"
    );
    assert_eq!(
        state_of(db, BOB, "k-again").await,
        Some(("in_progress".to_owned(), 2)),
        "reserved anew after the cutoff"
    );
    assert_eq!(
        state_of(db, ALICE, "k-late").await,
        Some(("in_progress".to_owned(), 1)),
        "created at the cutoff"
    );
    assert_eq!(records(db).await, 3);
    let past_its_lock = at(1_000 + LEASE_MS);
    assert_eq!(
        count(db, past_its_lock).await,
        1,
        "its lock ends at the cutoff"
    );
    assert_eq!(purge(db, past_its_lock, 10).await, 1);
    assert_eq!(state_of(db, ALICE, "k-open").await, None);
    assert_eq!(records(db).await, 2);
}

/// Twenty requests reserve one new key at once, each in its own transaction: exactly one
/// is `Reserved` (fence 1) and every other is `Held` with its row, which is what is
/// stored. Repeated over several keys.
pub async fn http_key_reserve_concurrently_gives_the_key_once(db: &TestDb) {
    const RACERS: usize = 20;
    for round in 0..5 {
        let key = format!("race:{round}");
        let start = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, start) = (db.store.clone(), start.clone());
                let fingerprint = if i % 2 == 0 { FP } else { OTHER_FP };
                let p = params(ALICE, &key, fingerprint, 1_000);
                tokio::spawn(async move {
                    start.wait().await;
                    store.http_key_reserve(p).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            let got = within(60, "a concurrent reservation", task).await;
            answers.push(got.expect("reserve task").expect("http_key_reserve"));
        }
        let winners: Vec<&HttpKeyRow> = answers
            .iter()
            .filter_map(|a| match a {
                HttpKeyReserved::Reserved(row) => Some(row),
                HttpKeyReserved::Held { .. } => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "one reservation holds {key}: {answers:?}");
        let winner = winners[0].clone();
        assert_eq!(winner.fence, 1);
        for a in answers
            .iter()
            .filter(|a| !matches!(a, HttpKeyReserved::Reserved(_)))
        {
            assert_eq!(a, &held(&winner, 1_000), "a loser of {key}");
        }
    }
}

/// Starts `params` on another connection; returns once the task runs.
async fn spawn_reserve(
    db: &TestDb,
    params: HttpKeyReserve,
) -> tokio::task::JoinHandle<StoreResult<HttpKeyReserved>> {
    let store = db.store.clone();
    spawn_started(async move { store.http_key_reserve(params).await }).await
}

/// The answer of a reservation started with [`spawn_reserve`].
async fn answer(racer: tokio::task::JoinHandle<StoreResult<HttpKeyReserved>>) -> HttpKeyReserved {
    let got = within(30, "the racing reservation", racer).await;
    got.expect("reserve task").expect("racing http_key_reserve")
}

/// Reserves in the open transaction `tx`, which must take the key.
async fn reserved_in(tx: &mut Box<dyn StoreTx>, params: HttpKeyReserve) -> HttpKeyRow {
    reserved(tx.http_key_reserve(params).await.expect("reserve in tx"))
}

/// A reservation of a key another transaction has reserved but not committed waits for
/// it, and then answers `Held` with the committed row: never a second `Reserved`.
pub async fn http_key_reserve_waits_for_an_uncommitted_reservation(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let first = reserved_in(&mut tx, params(ALICE, "k-1", FP, 1_000)).await;
    let racer = spawn_reserve(db, params(ALICE, "k-1", OTHER_FP, 2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the reservation");
    assert_eq!(answer(racer).await, held(&first, 2_000));
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, 3_000).await,
        held(&first, 3_000)
    );
}

/// A reservation of a key whose reservation another transaction made and rolled back
/// waits for it, and then takes the key itself with fence 1.
pub async fn http_key_reserve_takes_a_key_whose_reservation_rolled_back(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    reserved_in(&mut tx, params(ALICE, "k-1", FP, 1_000)).await;
    let racer = spawn_reserve(db, params(ALICE, "k-1", OTHER_FP, 2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.rollback().await.expect("rollback");
    let expected = fresh(ALICE, "k-1", OTHER_FP, 2_000, 1);
    assert_eq!(answer(racer).await, HttpKeyReserved::Reserved(expected));
}

/// A reservation racing the release of the key, not yet committed, waits for it and then
/// takes the released key with fence 2 (judging the committed `released` row, not the
/// in-progress row it first met).
pub async fn http_key_reserve_waits_for_a_release_and_takes_the_key(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let released = tx.http_key_release(release_params(&row, 1)).await;
    assert!(released.expect("release in tx"), "the holder releases");
    let racer = spawn_reserve(db, params(ALICE, "k-1", OTHER_FP, 2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the release");
    let expected = fresh(ALICE, "k-1", OTHER_FP, 2_000, 2);
    assert_eq!(answer(racer).await, HttpKeyReserved::Reserved(expected));
}

/// A takeover of a lapsed reservation racing that reservation's completion, not yet
/// committed, waits for it and then answers `Held` with the completed row: the request
/// is never run a second time.
pub async fn http_key_takeover_waits_for_the_holders_completion(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let response = binary_response();
    let mut tx = db.store.begin().await.expect("begin");
    let done = tx
        .http_key_complete(complete_params(&row, 1, &response))
        .await;
    assert!(done.expect("complete in tx"), "the holder completes");
    let late = 1_000 + 2 * LEASE_MS;
    let racer = spawn_reserve(db, params(ALICE, "k-1", FP, late)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the completion");
    assert_eq!(answer(racer).await, held(&completed(&row, &response), late));
}

/// A completion by a request whose lapsed reservation another transaction is taking over,
/// not yet committed, waits for it and is then refused (`false`): the new holder's
/// reservation stands.
pub async fn http_key_complete_waits_for_a_takeover_and_writes_nothing(db: &TestDb) {
    let old = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    let ends = 1_000 + LEASE_MS;
    let mut tx = db.store.begin().await.expect("begin");
    let new = reserved_in(&mut tx, params(ALICE, "k-1", FP, ends)).await;
    assert_eq!(new.fence, 2);
    let store = db.store.clone();
    let p = complete_params(&old, 1, &binary_response());
    let racer = spawn_started(async move { store.http_key_complete(p).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the takeover");
    let got = within(30, "the stale completion", racer).await;
    assert!(!got.expect("complete task").expect("http_key_complete"));
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, ends + 1).await,
        held(&new, ends + 1)
    );
}

/// A purge that picked a record past the cutoff while a request was taking it over (past
/// its retention), not yet committed, leaves it once the takeover commits: the record
/// now counts from its new reservation.
pub async fn http_key_purge_spares_a_key_reserved_anew_meanwhile(db: &TestDb) {
    let row = reserved(reserve(db, ALICE, "k-1", FP, 1_000).await);
    assert!(complete(db, &row, 1, &binary_response()).await);
    let expires = 1_000 + RETENTION_MS;
    let mut tx = db.store.begin().await.expect("begin");
    let new = reserved_in(&mut tx, params(ALICE, "k-1", OTHER_FP, expires)).await;
    assert_eq!(new.fence, 2);
    let store = db.store.clone();
    let p = Purge {
        target: PurgeTarget::HttpKeys,
        before: at(2_000),
        limit: 10,
    };
    let racer = spawn_started(async move { store.purge(p).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the takeover");
    let purged = within(30, "the purge", racer).await.expect("purge task");
    assert_eq!(purged.expect("purge"), 0, "the record reserved anew stays");
    assert_eq!(
        reserve(db, ALICE, "k-1", FP, expires + 1).await,
        held(&new, expires + 1)
    );
}
