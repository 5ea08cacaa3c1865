//! The writer: the store's only write connection, the thread that owns its slow work,
//! and the group commit that shares one durable `COMMIT` among several transactions
//! (`group.rs`).
//!
//! Store operations (claims, batched completions, enqueues) are closures sent to the
//! writer thread, one hop each, run in the order they arrive. An open [`crate::SqliteTx`]
//! runs its statements on the caller's own thread instead, under the connection's mutex,
//! once the closures sent before it have run ([`Writer::idle`]): a handler's statements
//! do not each wait for a thread switch. The thread also begins groups (which may wait on
//! another process's lock) and commits them (a disk flush with `synchronous=FULL`), so
//! neither blocks an async caller. A closure that panics is caught: the thread keeps
//! serving, and the caller sees its reply channel closed.

mod group;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use idem_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::{Notify, oneshot};

pub(crate) use group::{GroupLimits, Member, WriteConn};

type Task = Box<dyn FnOnce(&mut WriteConn) + Send>;

/// The handle to the writer; `tasks` is `None` once the store is closed.
pub(crate) struct Writer {
    tasks: Option<mpsc::Sender<Task>>,
    thread: Option<JoinHandle<()>>,
    conn: Arc<Mutex<WriteConn>>,
    inflight: Arc<Inflight>,
    coming: Arc<AtomicUsize>,
}

/// Closures sent to the thread and not yet run.
#[derive(Default)]
struct Inflight {
    count: AtomicUsize,
    idle: Notify,
}

impl Inflight {
    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// A transaction on its way to the writer: counted from the moment it asks for the
/// writer until it ends, so a member ending knows whether another will join its group.
pub(crate) struct Coming(Option<Arc<AtomicUsize>>);

impl Coming {
    /// Ends the count; returns how many others are still coming.
    pub(crate) fn end(mut self) -> usize {
        self.take()
    }

    fn take(&mut self) -> usize {
        match self.0.take() {
            Some(c) => c.fetch_sub(1, Ordering::SeqCst) - 1,
            None => 0,
        }
    }
}

impl Drop for Coming {
    fn drop(&mut self) {
        self.take();
    }
}

impl Writer {
    /// Starts the thread for `conn`.
    pub(crate) fn spawn(conn: Connection, limits: GroupLimits) -> StoreResult<Writer> {
        let (tasks, inbox) = mpsc::channel::<Task>();
        let conn = Arc::new(Mutex::new(WriteConn::new(conn, limits)));
        let inflight = Arc::new(Inflight::default());
        let coming = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (conn, inflight, coming) = (conn.clone(), inflight.clone(), coming.clone());
            std::thread::Builder::new()
                .name("idem-sqlite-writer".into())
                .spawn(move || serve(&conn, &inbox, &inflight, &coming))
                .map_err(|e| {
                    StoreError::Unavailable(format!("cannot start the writer thread: {e}"))
                })?
        };
        Ok(Writer {
            tasks: Some(tasks),
            thread: Some(thread),
            conn,
            inflight,
            coming,
        })
    }

    /// The counter of transactions coming to this writer (kept outside its lock).
    pub(crate) fn coming_counter(&self) -> Arc<AtomicUsize> {
        self.coming.clone()
    }

    /// Sends `f` to the thread without waiting for it to run. Returns the receiver of its
    /// result, so a caller can let go of the writer before the reply arrives.
    pub(crate) fn send<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteConn) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<Reply<R>> {
        let (reply, rx) = oneshot::channel();
        // The caller's span (a job attempt's) follows the closure to the writer thread.
        let span = tracing::debug_span!("idem_sqlite.write");
        self.push(Box::new(move |w| {
            let _ = reply.send(span.in_scope(|| f(w)));
        }))?;
        Ok(Reply(rx))
    }

    /// Sends `op` to run as one member of the group commit; its result arrives once the
    /// group's `COMMIT` has returned. `coming` ends when the member does.
    pub(crate) fn send_member<R: Send + 'static>(
        &self,
        op: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
        coming: Coming,
    ) -> StoreResult<Reply<R>> {
        let (reply, rx) = oneshot::channel();
        let span = tracing::debug_span!("idem_sqlite.write");
        self.push(Box::new(move |w| {
            span.in_scope(|| {
                w.member(op, move |r| {
                    let _ = reply.send(r);
                })
            });
            coming.end();
        }))?;
        Ok(Reply(rx))
    }

    /// Runs `f` on the thread and waits for its result.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteConn) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        self.send(f)?.wait().await
    }

    /// Has the thread look at the open group (and commit it if it is due). Nothing
    /// happens once closed.
    pub(crate) fn poke(&self) {
        let _ = self.push(Box::new(|_| {}));
    }

    fn push(&self, task: Task) -> StoreResult<()> {
        let tasks = self.tasks.as_ref().ok_or_else(closed)?;
        self.inflight.count.fetch_add(1, Ordering::SeqCst);
        tasks.send(task).map_err(|_| {
            self.inflight.done();
            stopped()
        })
    }

    /// Runs `f` on the caller's thread with the connection.
    pub(crate) fn inline<R>(&self, f: impl FnOnce(&mut WriteConn) -> R) -> R {
        let _span = tracing::debug_span!("idem_sqlite.write").entered();
        f(&mut lock(&self.conn))
    }

    /// Runs `f` with the connection if no one else has it now (the writer thread may be
    /// in a `BEGIN` that waits on another process's lock, which a caller not holding a
    /// savepoint must never block an async thread on).
    pub(crate) fn try_inline<R>(&self, f: impl FnOnce(&mut WriteConn) -> R) -> Option<R> {
        match self.conn.try_lock() {
            Ok(mut w) => Some(f(&mut w)),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(f(&mut p.into_inner())),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Resolves once every closure sent so far has run.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.inflight.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inflight.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// `Unavailable` once the store is closed or the thread has stopped; checked where a
    /// transaction starts without a hop.
    pub(crate) fn ensure_open(&self) -> StoreResult<()> {
        match (&self.tasks, &self.thread) {
            (Some(_), Some(t)) if !t.is_finished() => Ok(()),
            (Some(_), _) => Err(stopped()),
            (None, _) => Err(closed()),
        }
    }

    /// Stops the thread after the closures already sent, commits the open group and
    /// waits until the connection is closed. Later calls fail with `Unavailable`.
    pub(crate) async fn close(&mut self) {
        self.tasks = None;
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// The pending result of a closure sent to the writer.
pub(crate) struct Reply<R>(oneshot::Receiver<StoreResult<R>>);

impl<R> Reply<R> {
    pub(crate) async fn wait(self) -> StoreResult<R> {
        self.0.await.map_err(|_| stopped())?
    }
}

impl Coming {
    /// Counts a transaction coming to the writer of `counter` until it ends.
    pub(crate) fn new(counter: &Arc<AtomicUsize>) -> Coming {
        counter.fetch_add(1, Ordering::SeqCst);
        Coming(Some(counter.clone()))
    }
}

/// The connection, also after a panic in a caller's closure (the transaction it was in
/// is rolled back by that caller's drop).
fn lock(conn: &Mutex<WriteConn>) -> MutexGuard<'_, WriteConn> {
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

fn serve(
    conn: &Mutex<WriteConn>,
    inbox: &mpsc::Receiver<Task>,
    inflight: &Inflight,
    coming: &AtomicUsize,
) {
    loop {
        let deadline = lock(conn).deadline();
        let task = match deadline {
            None => match inbox.recv() {
                Ok(t) => Some(t),
                Err(_) => break,
            },
            Some(at) => match inbox.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(t) => Some(t),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
        };
        let ran = task.is_some();
        {
            let mut w = lock(conn);
            if let Some(task) = task
                && catch_unwind(AssertUnwindSafe(|| task(&mut w))).is_err()
            {
                tracing::error!("an operation on the SQLite writer thread panicked");
            }
            if w.due(coming.load(Ordering::SeqCst)) {
                w.commit();
            }
        }
        if ran {
            inflight.done();
        }
    }
    lock(conn).close();
}

pub(crate) fn closed() -> StoreError {
    StoreError::Unavailable("the SQLite store is closed".into())
}

fn stopped() -> StoreError {
    StoreError::Unavailable(
        "the SQLite writer dropped the operation (it panicked, or the store was closed)".into(),
    )
}
