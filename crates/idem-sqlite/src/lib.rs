//! The embedded SQLite store of idem, the default (`sqlite://idem.db`).
//!
//! One file, WAL journal, `synchronous=FULL` unless told otherwise, and a busy timeout.
//! The driver is rusqlite, and the thread model is what makes the store fast:
//!
//! - **One write connection per store** (`writer/`), owned by a writer thread. Store
//!   operations (claims, batched completions, enqueues) are closures sent to that
//!   thread: `job_complete_many` is one closure, so one hop between threads, not one
//!   per statement.
//! - **Group commit**: every write transaction is a `SAVEPOINT` inside one outer
//!   `BEGIN IMMEDIATE` transaction shared with the transactions around it, which commits
//!   when none is coming, when it is full, or when its window (2 ms) has passed. A
//!   caller hears "committed" only after that durable `COMMIT`; a failing transaction
//!   rolls back to its savepoint and undoes only its own writes. Several handlers'
//!   effect transactions thus share one disk flush.
//! - **The write lock is held from the first statement**: claims need no `SKIP
//!   LOCKED`, a fence check cannot be overtaken before commit, and several processes
//!   on one file queue on the lock (up to the busy timeout) instead of failing a
//!   read-to-write upgrade.
//! - **An open [`SqliteTx`] holds the writer's turn** (an async mutex) until it
//!   commits, rolls back or is dropped; store operations wait for it. Its statements run
//!   on the caller's thread under the connection's mutex, with no thread switch; only a
//!   first statement that must begin a group, and the group's `COMMIT`, go to the
//!   writer thread. Dropping it rolls back its savepoint.
//! - **Reads** (`job_get`, `job_list`, `now`, [`Store::query`], …) run on up to `readers`
//!   separate connections on tokio's blocking pool (`reader.rs`), beside the writer.
//!
//! SQL lives in `queries/<area>/<op>.sql`, one statement per file, at the same paths as in
//! `idem-postgres`, with SQLite's numbered `?N` placeholders, prepared once per connection
//! and cached; migrations in `migrations/`, numbered as there. Callers' own statements use
//! `$1`, `$2`, … as on PostgreSQL (`value.rs` binds them by number).
#![warn(missing_docs)]

// The chaos-break features reach idem-store, whose `compile_error!` refuses them in a
// release build.
#[doc(hidden)]
pub mod ceiling;
#[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
mod chaos;
mod connect;
mod error;
mod migrate;
mod notify;
mod ops;
mod reader;
mod row;
mod tx;
mod value;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_store::fast_path;
use idem_store::{
    AttemptRow, Backend, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail, JobHeartbeat,
    JobInsert, JobList, JobRow, LeaseRenewal, Purge, PurgeTarget, QueueCount, SqlValue, Store,
    StoreResult, StoreTx, Timestamp,
};
use rusqlite::Connection;
use tokio::sync::Mutex;

pub use connect::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_GROUP_COMMIT_MAX, DEFAULT_GROUP_COMMIT_WINDOW, DEFAULT_READERS,
    Durability, SqliteOptions, busy_waits,
};
pub use error::interpret_error;
pub use rusqlite;
pub use tx::SqliteTx;

use crate::connect::Target;
use crate::reader::Readers;
use crate::writer::Writer;

/// An idem store in one SQLite file.
///
/// The URL may carry `?synchronous=normal` (or `full`, the default) to choose the commit
/// durability; other query parameters go to SQLite as URI parameters (`mode`, `vfs`, …).
/// Clones share the writer thread and the read connections.
#[derive(Clone)]
pub struct SqliteStore {
    writer: WriterLock,
    readers: Arc<Readers>,
    notify: notify::Notify,
}

/// The one writer, and how long a caller waits for it before giving up.
#[derive(Clone)]
pub(crate) struct WriterLock {
    writer: Arc<Mutex<Writer>>,
    wait: Duration,
    /// Transactions asking for the writer or running on it ([`writer::Coming`]).
    coming: Arc<std::sync::atomic::AtomicUsize>,
    /// The writer's waits for other processes' write lock, to tell whose fault a long
    /// wait for the writer was.
    waits: Arc<writer::LockWaits>,
    turns: Arc<writer::Turns>,
}

impl WriterLock {
    /// The writer, once no open transaction holds it; [`idem_store::StoreError::Busy`]
    /// after the busy timeout instead of waiting forever (a handler writing through the
    /// client while its own transaction is open would), naming the cause: another
    /// process holding the file's write lock when the writer is waiting for it now, else
    /// an open transaction of this process.
    /// Counts a transaction from now until it ends.
    pub(crate) fn coming(&self) -> writer::Coming {
        writer::Coming::new(&self.coming, &self.writer)
    }

    pub(crate) async fn acquire(&self) -> StoreResult<tokio::sync::OwnedMutexGuard<Writer>> {
        let lock = self.writer.clone().lock_owned();
        tokio::time::timeout(self.wait, lock).await.map_err(|_| {
            idem_store::StoreError::Busy(match self.waits.current() {
                Some(waited) => writer::held_elsewhere(waited, self.turns.holder()),
                None => format!(
                    "the SQLite writer stayed held by an open transaction of this process \
                     for {:?} (the busy timeout); inside a transaction, write through that \
                     transaction, not through the client",
                    self.wait
                ),
            })
        })
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://path` or
    /// `sqlite:path`) and starts its writer thread. Does not migrate; call
    /// [`Store::migrate`].
    pub async fn connect(url: &str, options: SqliteOptions) -> StoreResult<Self> {
        SqliteStore::start(Target::parse(url, &options)?, options).await
    }

    /// Opens the database at `url` only if its file exists, writing nothing on the way:
    /// no file is created and the journal mode is left as the file has it. A missing
    /// file is [`idem_store::StoreError::NotFound`]. Does not migrate; see
    /// [`Store::schema_status`].
    ///
    /// ```no_run
    /// # async fn demo() -> idem_store::StoreResult<()> {
    /// use idem_sqlite::{SqliteOptions, SqliteStore};
    /// use idem_store::Store;
    ///
    /// let store = SqliteStore::open_existing("sqlite://idem.db", SqliteOptions::default()).await?;
    /// store.schema_status().await?.require_current()?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_existing(url: &str, options: SqliteOptions) -> StoreResult<Self> {
        SqliteStore::start(Target::parse(url, &options)?.existing()?, options).await
    }

    /// Opens the writer's connection on `target` and starts its thread.
    async fn start(target: Target, options: SqliteOptions) -> StoreResult<Self> {
        #[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
        chaos::check();
        let url = target.url().to_owned();
        let opener = target.clone();
        let conn = tokio::task::spawn_blocking(move || opener.open(true))
            .await
            .map_err(|e| {
                idem_store::StoreError::Unavailable(format!("cannot open {url}: {e}"))
            })??;
        let notify = notify::channel(std::path::Path::new(conn.path().unwrap_or_default()));
        let limits = writer::GroupLimits {
            max: options.group_commit_max.max(1),
            window: options.group_commit_window,
            busy_timeout: options.busy_timeout,
        };
        let spawned = Writer::spawn(conn, limits)?;
        let (waits, turns) = spawned.lock_waits();
        let writer = WriterLock {
            waits,
            turns,
            coming: spawned.coming_counter(),
            writer: Arc::new(Mutex::new(spawned)),
            wait: options.busy_timeout,
        };
        let readers = Readers::new(target, options.readers);
        Ok(SqliteStore {
            writer,
            readers,
            notify,
        })
    }

    /// A write transaction that does nothing, for tests of the writer lock.
    #[cfg(test)]
    async fn now_write_probe(&self) -> StoreResult<()> {
        self.write(|_| Ok(())).await
    }

    /// Runs `op` as its own transaction, a member of the writer's group commit: one hop
    /// to the writer thread, then the wait for the group's durable commit. The lock is
    /// held only to send, so operations queue on the thread back to back.
    async fn write<R: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        let coming = self.writer.coming();
        let reply = self.writer.acquire().await?.send_member(op, coming)?;
        reply.wait().await
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn migrate(&self) -> StoreResult<usize> {
        // Read first: a process starting against an up-to-date schema takes no write
        // lock, so it does not queue behind other processes' writes to start.
        let status = self.readers.run(migrate::status).await?;
        if status.pending.is_empty() && status.newer.is_empty() {
            return Ok(0);
        }
        self.write(migrate::run).await
    }

    async fn schema_status(&self) -> StoreResult<idem_store::migration::SchemaStatus> {
        self.readers.run(migrate::status).await
    }

    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>> {
        Ok(Box::new(SqliteTx::begin(&self.writer).await?))
    }

    async fn now(&self) -> StoreResult<Timestamp> {
        row::ms_to_ts(self.readers.run(ops::clock::now).await?)
    }

    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>> {
        self.readers.run(move |c| ops::job::get(c, id)).await
    }

    async fn job_awaiting(&self, key: String) -> StoreResult<Option<JobRow>> {
        self.readers.run(move |c| ops::job::awaiting(c, &key)).await
    }

    async fn job_list(&self, p: JobList) -> StoreResult<Vec<JobRow>> {
        self.readers.run(move |c| ops::job::list(c, &p)).await
    }

    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
        self.readers
            .run(move |c| ops::job_attempt::list(c, job_id))
            .await
    }

    async fn job_first_attempts(&self, ids: Vec<i64>) -> StoreResult<Vec<(i64, Timestamp)>> {
        self.readers
            .run(move |c| ops::job_attempt::first_started(c, &ids))
            .await
    }

    async fn queue_waiting(&self) -> StoreResult<Vec<idem_store::QueueWaiting>> {
        self.readers.run(ops::queue::waiting).await
    }

    async fn queue_paused(&self) -> StoreResult<Vec<idem_store::PausedQueue>> {
        self.readers.run(ops::queue::paused).await
    }

    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>> {
        self.readers.run(ops::queue::counts).await
    }

    async fn queue_finished(
        &self,
        params: idem_store::QueueFinishedList,
    ) -> StoreResult<Vec<idem_store::QueueFinished>> {
        self.readers
            .run(move |c| ops::queue::finished(c, &params))
            .await
    }

    async fn effect_list(
        &self,
        params: idem_store::EffectList,
    ) -> StoreResult<Vec<idem_store::EffectRecord>> {
        self.readers
            .run(move |c| ops::effect::list(c, &params))
            .await
    }

    async fn intent_get(&self, key: String) -> StoreResult<Option<idem_store::IntentRow>> {
        self.readers.run(move |c| ops::intent::get(c, &key)).await
    }

    async fn intent_counts(&self) -> StoreResult<Vec<idem_store::IntentCount>> {
        self.readers.run(ops::intent::counts).await
    }

    async fn batch_get(&self, batch_id: i64) -> StoreResult<Option<idem_store::BatchRow>> {
        self.readers
            .run(move |c| ops::batch::get(c, batch_id))
            .await
    }

    async fn batch_list(&self, p: idem_store::BatchList) -> StoreResult<Vec<idem_store::BatchRow>> {
        self.readers.run(move |c| ops::batch::list(c, &p)).await
    }

    async fn batch_children(&self, p: idem_store::BatchChildren) -> StoreResult<Vec<JobRow>> {
        self.readers.run(move |c| ops::batch::children(c, &p)).await
    }

    async fn batch_states(&self, batch_id: i64) -> StoreResult<Vec<(idem_store::JobState, i64)>> {
        self.readers
            .run(move |c| ops::batch::states(c, batch_id))
            .await
    }

    async fn intent_list(
        &self,
        p: idem_store::IntentList,
    ) -> StoreResult<Vec<idem_store::IntentRow>> {
        self.readers.run(move |c| ops::intent::list(c, &p)).await
    }

    async fn intent_begin(
        &self,
        p: idem_store::IntentBegin,
    ) -> StoreResult<idem_store::IntentBegun> {
        self.write(move |c| ops::intent::begin(c, &p)).await
    }

    async fn intent_renew(&self, p: idem_store::IntentRenew) -> StoreResult<idem_store::IntentRow> {
        self.write(move |c| ops::intent::renew(c, &p)).await
    }

    async fn intent_finish(
        &self,
        p: idem_store::IntentFinish,
    ) -> StoreResult<idem_store::IntentRow> {
        self.write(move |c| ops::intent::finish(c, &p)).await
    }

    async fn intent_resolve(
        &self,
        p: idem_store::IntentResolve,
    ) -> StoreResult<idem_store::IntentRow> {
        self.write(move |c| ops::intent::resolve(c, &p)).await
    }

    async fn http_key_reserve(
        &self,
        p: idem_store::HttpKeyReserve,
    ) -> StoreResult<idem_store::HttpKeyReserved> {
        self.write(move |c| ops::http_key::reserve(c, &p)).await
    }

    async fn http_key_complete(&self, p: idem_store::HttpKeyComplete) -> StoreResult<bool> {
        self.write(move |c| ops::http_key::complete(c, &p)).await
    }

    async fn http_key_release(&self, p: idem_store::HttpKeyRelease) -> StoreResult<bool> {
        self.write(move |c| ops::http_key::release(c, &p)).await
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<idem_store::LedgerMismatch>> {
        self.readers.run(ops::ledger::verify).await
    }

    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let (sql, args) = (sql.to_owned(), args.to_vec());
        self.readers
            .run(move |c| value::query(c, &sql, &args))
            .await
    }

    async fn close(&self) {
        notify::close(&self.notify);
        self.writer.writer.lock().await.close().await;
        self.readers.close();
    }

    fn has_channel(&self) -> bool {
        self.notify.is_some()
    }

    async fn announce(&self, queues: &[String]) -> StoreResult<()> {
        notify::announce(&self.notify, queues)
    }

    async fn subscribe(&self) -> StoreResult<Option<Box<dyn idem_store::Wakeups>>> {
        notify::subscribe(&self.notify)
    }

    async fn job_insert_rows(&self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        self.write(move |c| ops::job::insert(c, p)).await
    }

    async fn job_discard(&self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        self.write(move |c| ops::job::discard(c, &p)).await
    }

    async fn purge(&self, p: Purge) -> StoreResult<u64> {
        self.write(move |c| ops::purge::delete(c, &p)).await
    }

    async fn purge_count(&self, target: PurgeTarget, before: Timestamp) -> StoreResult<u64> {
        let before = crate::row::ts_to_ms(before);
        self.readers
            .run(move |c| ops::purge::count(c, target, before))
            .await
    }

    async fn job_claim(&self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        self.write(move |c| ops::job::claim(c, &p)).await
    }

    async fn job_heartbeat(&self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        self.write(move |c| ops::job::heartbeat(c, &p)).await
    }

    // Completions and failures of jobs outside batches take one hop each; what that hop
    // leaves alone (children of batches, and stale claims, which are refused again) goes
    // through a transaction that counts the batch (`StoreTx`'s methods).

    async fn job_complete(&self, p: JobComplete) -> StoreResult<JobRow> {
        let first = p.clone();
        let first = self
            .write(move |c| ops::job::complete(c, &first, false))
            .await;
        fast_path::complete_rest(self, p, first).await
    }

    async fn job_complete_many(&self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        let first = p.clone();
        let done = self
            .write(move |c| ops::job::complete_many(c, &first, false))
            .await?;
        fast_path::complete_many_rest(self, p, done).await
    }

    async fn job_fail(&self, p: JobFail) -> StoreResult<JobRow> {
        let first = p.clone();
        let first = self.write(move |c| ops::job::fail(c, &first, false)).await;
        fast_path::fail_rest(self, p, first).await
    }
}

#[cfg(test)]
mod busy_tests {
    use super::*;

    /// A write through the store while a transaction holds the writer fails with `Busy`
    /// after the busy timeout instead of waiting forever, and works once it ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_waiting_on_an_open_transaction_gives_up_with_the_cause() {
        let dir = std::env::temp_dir().join(format!("idem-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("busy.db").display());
        let options = SqliteOptions {
            busy_timeout: Duration::from_millis(200),
            ..SqliteOptions::default()
        };
        let store = SqliteStore::connect(&url, options).await.unwrap();
        store.migrate().await.unwrap();
        let tx = store.begin().await.unwrap();
        let err = store.now_write_probe().await.unwrap_err();
        assert!(matches!(err, idem_store::StoreError::Busy(_)), "{err}");
        assert!(
            err.to_string().contains("write through that transaction"),
            "{err}"
        );
        tx.rollback().await.unwrap();
        store.now_write_probe().await.unwrap();
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
