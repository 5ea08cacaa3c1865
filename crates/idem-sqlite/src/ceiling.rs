//! Ceilings for `idem bench`: the statements of the store's hot paths in the tightest loop
//! rusqlite allows, on one connection of their own, with no writer thread, no async
//! runtime and no worker. What the engine reaches is compared with these.
//!
//! Each loop runs the same query files as the store's operations (`include_str!` of the
//! same paths), prepared once and cached. They are measuring tools, not store operations:
//! nothing here is used by the store itself.

use std::path::Path;
use std::time::{Duration, Instant};

use idem_store::{LeaseToken, StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags, params};

use crate::Durability;
use crate::error::interpret_error;
use crate::ops::job::{JobValues, insert_rows};

const CLAIM: &str = include_str!("../queries/job/claim.sql");
const LOCK: &str = include_str!("../queries/job/lock.sql");
const COMPLETE: &str = include_str!("../queries/job/complete.sql");
const GET: &str = include_str!("../queries/job/get.sql");
const NEXT_ID: &str = include_str!("../queries/job/next_id.sql");
const COMPLETE_MANY: &str = include_str!("../queries/job/complete_many.sql");
/// Lease of the ceiling's claims: long enough for any run.
const LEASE_MS: i64 = 3_600_000;
const WORKER: &str = "bench-ceiling";

/// Opens `path` (an existing, migrated store file) as the store's writer opens it: WAL,
/// `durability`, the statement cache.
fn open(path: &Path, durability: Durability) -> StoreResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    crate::connect::untracked_allocations();
    let c = Connection::open_with_flags(path, flags).map_err(interpret_error)?;
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    c.set_prepared_statement_cache_capacity(32);
    c.busy_timeout(Duration::from_secs(10))
        .and_then(|()| {
            c.execute_batch(&format!(
                "PRAGMA synchronous = {sync}; PRAGMA temp_store = MEMORY;"
            ))
        })
        .map_err(interpret_error)?;
    Ok(c)
}

/// Brings the log to the state of a long-lived writer's before a timed loop: the file at
/// least its checkpoint size (`wal_autocheckpoint` pages), checkpointed, the next write
/// at its beginning. Commits then overwrite the file instead of growing it; an `fsync`
/// that grows the file also writes the file system's metadata and costs several times
/// as much (measured in docs/performance.md).
fn warm_wal(c: &Connection) -> StoreResult<()> {
    let pages: i64 = c
        .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
        .map_err(interpret_error)?;
    let page: i64 = c
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .map_err(interpret_error)?;
    let pad = "CREATE TABLE idem_ceiling_pad (b BLOB); \
               INSERT INTO idem_ceiling_pad VALUES (zeroblob(?1)); \
               DROP TABLE idem_ceiling_pad;";
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(interpret_error)?;
    for sql in pad.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let args: &[&dyn rusqlite::ToSql] = match sql.contains("?1") {
            true => &[&((pages + 100) * page)],
            false => &[],
        };
        c.execute(sql, args).map_err(interpret_error)?;
    }
    c.execute_batch("COMMIT").map_err(interpret_error)?;
    c.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
        .map_err(interpret_error)
}

fn exec(c: &Connection, sql: &str, args: impl rusqlite::Params) -> StoreResult<usize> {
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    stmt.execute(args).map_err(interpret_error)
}

/// Claims up to `limit` jobs of `queue` in one `BEGIN IMMEDIATE` transaction (the store's
/// `job_claim`); the leases of the jobs claimed.
fn claim(c: &Connection, queue: &str, limit: usize) -> StoreResult<Vec<LeaseToken>> {
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(interpret_error)?;
    let mut stmt = c.prepare_cached(CLAIM).map_err(interpret_error)?;
    let none = None::<String>;
    let args = params![
        queue,
        limit as i64,
        WORKER,
        LEASE_MS,
        None::<i64>,
        none,
        none
    ];
    let leases = stmt
        .query_map(args, |r| {
            Ok(LeaseToken {
                job_id: r.get("id")?,
                fence: r.get("fence")?,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(interpret_error)?;
    drop(stmt);
    c.execute_batch("COMMIT").map_err(interpret_error)?;
    Ok(leases)
}

/// Claims every waiting job of `queue` on the store file at `path` (untimed: the
/// preparation of [`fenced`]'s loop), `batch` per claim.
pub fn claim_all(path: &Path, queue: &str, batch: usize) -> StoreResult<Vec<LeaseToken>> {
    let c = open(path, Durability::Normal)?;
    let mut all = Vec::new();
    loop {
        let got = claim(&c, queue, batch)?;
        if got.is_empty() {
            return Ok(all);
        }
        all.extend(got);
    }
}

/// The fenced path of each claimed job in `leases`, one after another on one connection:
/// the fence check (`job/lock.sql`), the effect row (`effect_sql`, binding the job id and
/// fence as `$1`, `$2`) and the completion (`job/complete.sql`, then the row by
/// `job/get.sql`; a completed attempt has no attempt row). Each job is a `SAVEPOINT` released after its completion,
/// and every `group` jobs share one `BEGIN IMMEDIATE … COMMIT` (group 1: a transaction
/// per job, without a savepoint). Returns the time the loop took.
pub fn fenced(
    path: &Path,
    leases: &[LeaseToken],
    effect_sql: &str,
    durability: Durability,
    group: usize,
) -> StoreResult<Duration> {
    let c = open(path, durability)?;
    warm_wal(&c)?;
    let started = Instant::now();
    for chunk in leases.chunks(group.max(1)) {
        c.execute_batch("BEGIN IMMEDIATE")
            .map_err(interpret_error)?;
        for lease in chunk {
            if group > 1 {
                c.execute_batch("SAVEPOINT job").map_err(interpret_error)?;
            }
            fenced_job(&c, *lease, effect_sql)?;
            if group > 1 {
                c.execute_batch("RELEASE job").map_err(interpret_error)?;
            }
        }
        c.execute_batch("COMMIT").map_err(interpret_error)?;
    }
    Ok(started.elapsed())
}

/// One job's statements of the fenced path; `LeaseLost` if its claim is not current.
fn fenced_job(c: &Connection, lease: LeaseToken, effect_sql: &str) -> StoreResult<()> {
    let (id, fence) = (lease.job_id, lease.fence);
    let mut lock = c.prepare_cached(LOCK).map_err(interpret_error)?;
    if !lock.exists(params![id, fence]).map_err(interpret_error)? {
        return Err(StoreError::lease_lost(lease));
    }
    exec(c, effect_sql, params![id, fence])?;
    let args = params![id, fence, None::<i64>, None::<String>, true];
    if exec(c, COMPLETE, args)? != 1 {
        return Err(StoreError::lease_lost(lease));
    }
    let mut get = c.prepare_cached(GET).map_err(interpret_error)?;
    if !get.exists([id]).map_err(interpret_error)? {
        return Err(StoreError::lease_lost(lease));
    }
    Ok(())
}

/// Inserts `n` jobs into `queue` as the store's bulk insert writes them (`job/insert.sql`,
/// many rows per execution, every column bound), `batch` jobs per
/// `BEGIN IMMEDIATE … COMMIT`, with the rows encoded beforehand (untimed). Returns the
/// time the loop took.
pub fn bulk(
    path: &Path,
    queue: &str,
    n: usize,
    batch: usize,
    durability: Durability,
) -> StoreResult<Duration> {
    let c = open(path, durability)?;
    warm_wal(&c)?;
    let now = crate::ops::clock::now(&c)?;
    let first: i64 = c
        .query_row(NEXT_ID, [], |r| r.get(0))
        .map_err(interpret_error)?;
    let args: Vec<String> = (0..n).map(|i| format!("{{\"i\":{i}}}")).collect();
    let rows: Vec<JobValues<'_>> = (first + 1..)
        .zip(&args)
        .map(|(id, args)| JobValues {
            id,
            kind: "bench",
            queue,
            args,
            priority: 0,
            state: idem_store::JobState::Available,
            max_attempts: 25,
            run_at: now,
            created_at: now,
            lease: None,
            enqueue_key: None,
            principal: None,
            batch_id: None,
            follows_job: None,
            follows_batch: None,
            trace_parent: None,
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(batch.max(1)) {
        c.execute_batch("BEGIN IMMEDIATE")
            .map_err(interpret_error)?;
        insert_rows(&c, chunk)?;
        c.execute_batch("COMMIT").map_err(interpret_error)?;
    }
    Ok(started.elapsed())
}

/// The no-op drain of `queue` on one connection: claim `batch` jobs (one transaction),
/// complete them all (another), until the queue is empty.
/// Returns the jobs drained and the time it took.
pub fn drain(
    path: &Path,
    queue: &str,
    durability: Durability,
    batch: usize,
) -> StoreResult<(usize, Duration)> {
    let c = open(path, durability)?;
    warm_wal(&c)?;
    let (started, mut n) = (Instant::now(), 0);
    loop {
        let leases = claim(&c, queue, batch)?;
        if leases.is_empty() {
            return Ok((n, started.elapsed()));
        }
        n += leases.len();
        complete_many(&c, &leases)?;
    }
}

/// `job/complete_many.sql` in one `BEGIN IMMEDIATE` transaction (the store's
/// `job_complete_many`).
fn complete_many(c: &Connection, leases: &[LeaseToken]) -> StoreResult<()> {
    let list = serde_json::to_string(leases)
        .map_err(|e| StoreError::Invalid(format!("cannot encode the leases: {e}")))?;
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(interpret_error)?;
    let mut stmt = c.prepare_cached(COMPLETE_MANY).map_err(interpret_error)?;
    stmt.query_map(params![list, None::<i64>, true], |r| r.get::<_, i64>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(interpret_error)?;
    drop(stmt);
    c.execute_batch("COMMIT").map_err(interpret_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SqliteOptions, SqliteStore};
    use idem_store::{JobInsert, NewJob, Store};

    const EFFECT: &str = "INSERT INTO bench_effect (job_id, fence) VALUES ($1, $2)";

    fn job(queue: &str) -> NewJob {
        NewJob::new("k", queue, serde_json::json!({}), 1)
    }

    async fn count(store: &SqliteStore, sql: &str) -> i64 {
        store.query(sql, &[]).await.unwrap()[0][0].as_i64().unwrap()
    }

    /// The loops do what the store's operations do: every job fenced-completed once,
    /// with its effect row and attempt row, in groups that do not divide the jobs
    /// evenly; a stale lease is refused; the drain completes what it claims.
    #[tokio::test]
    async fn the_ceiling_loops_complete_every_job_once() {
        let dir = std::env::temp_dir().join(format!("idem-ceiling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.db");
        let url = format!("sqlite://{}", path.display());
        let store = SqliteStore::connect(&url, SqliteOptions::default())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let mut tx = store.begin().await.unwrap();
        tx.execute(
            "CREATE TABLE bench_effect (job_id BIGINT, fence BIGINT)",
            &[],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        for queue in ["f", "d"] {
            let jobs = (0..10).map(|_| job(queue)).collect();
            store
                .job_insert(JobInsert {
                    jobs,
                    ..JobInsert::default()
                })
                .await
                .unwrap();
        }
        let p = path.clone();
        let (took, stale) = tokio::task::spawn_blocking(move || {
            let leases = claim_all(&p, "f", 4).unwrap();
            assert_eq!(leases.len(), 10);
            let took = fenced(&p, &leases, EFFECT, Durability::Normal, 3).unwrap();
            (
                took,
                fenced(&p, &leases[..1], EFFECT, Durability::Normal, 1),
            )
        })
        .await
        .unwrap();
        assert!(took > Duration::ZERO);
        assert!(stale.unwrap_err().is_lease_lost());
        let p = path.clone();
        let (n, _) = tokio::task::spawn_blocking(move || drain(&p, "d", Durability::Normal, 4))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 10);
        let done = "SELECT count(*) FROM idem_job WHERE state = 'completed'";
        assert_eq!(count(&store, done).await, 20);
        assert_eq!(
            count(&store, "SELECT count(*) FROM idem_job_attempt").await,
            0,
            "a completed attempt is its job's row"
        );
        assert_eq!(count(&store, "SELECT count(*) FROM bench_effect").await, 10);
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
