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
mod turns;
mod waits;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use idem_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::{Notify, oneshot};

pub(crate) use group::{GroupLimits, Member, WriteConn};
pub(crate) use turns::Turns;
pub(crate) use waits::{LockWaits, held_elsewhere};

type Task = Box<dyn FnOnce(&mut WriteConn) + Send>;

/// The handle to the writer; `tasks` is `None` once the store is closed.
pub(crate) struct Writer {
    tasks: Option<mpsc::Sender<Task>>,
    thread: Option<JoinHandle<()>>,
    conn: Arc<Mutex<WriteConn>>,
    inflight: Arc<Inflight>,
    coming: Arc<AtomicUsize>,
    waits: Arc<LockWaits>,
    turns: Arc<Turns>,
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
pub(crate) struct Coming {
    count: Option<Arc<AtomicUsize>>,
    /// Poked if the transaction gives up before it ends (its wait for the writer dropped
    /// or timed out): a group waiting for it may be due now.
    turn: Weak<tokio::sync::Mutex<Writer>>,
}

impl Coming {
    /// Counts a transaction coming to the writer `turn` guards until it ends.
    pub(crate) fn new(count: &Arc<AtomicUsize>, turn: &Arc<tokio::sync::Mutex<Writer>>) -> Coming {
        count.fetch_add(1, Ordering::SeqCst);
        Coming {
            count: Some(count.clone()),
            turn: Arc::downgrade(turn),
        }
    }

    /// Ends the count; returns how many others are still coming.
    pub(crate) fn end(mut self) -> usize {
        match self.count.take() {
            Some(c) => c.fetch_sub(1, Ordering::SeqCst) - 1,
            None => 0,
        }
    }
}

impl Drop for Coming {
    fn drop(&mut self) {
        if let Some(c) = self.count.take() {
            c.fetch_sub(1, Ordering::SeqCst);
            // A holder of the writer looks at the group itself when it ends.
            if let Some(turn) = self.turn.upgrade()
                && let Ok(writer) = turn.try_lock()
            {
                writer.poke();
            }
        }
    }
}

impl Writer {
    /// Starts the thread for `conn`.
    pub(crate) fn spawn(conn: Connection, limits: GroupLimits) -> StoreResult<Writer> {
        let (tasks, inbox) = mpsc::channel::<Task>();
        let turns = Arc::new(Turns::new(std::path::Path::new(
            conn.path().unwrap_or_default(),
        )));
        let waits = Arc::new(LockWaits::default());
        let conn = WriteConn::new(conn, limits, turns.clone(), waits.clone())?;
        let conn = Arc::new(Mutex::new(conn));
        let inflight = Arc::new(Inflight::default());
        let coming = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (conn, inflight, coming) = (conn.clone(), inflight.clone(), coming.clone());
            let turns = turns.clone();
            std::thread::Builder::new()
                .name("idem-sqlite-writer".into())
                .spawn(move || serve(&conn, &inbox, &inflight, &coming, &turns))
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
            waits,
            turns,
        })
    }

    /// This process's waits for other connections' write lock, and its turns with
    /// other processes (kept outside the writer's lock).
    pub(crate) fn lock_waits(&self) -> (Arc<LockWaits>, Arc<Turns>) {
        (self.waits.clone(), self.turns.clone())
    }

    /// The counter of transactions coming to this writer (kept outside its lock).
    pub(crate) fn coming_counter(&self) -> Arc<AtomicUsize> {
        self.coming.clone()
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

    /// Opens a member on the thread (beginning a group if none is open) and runs `f` in
    /// it: a transaction's first statement. A member whose caller is gone before it takes
    /// the result is rolled back to its savepoint, so it does not hold the group (and the
    /// file's write lock) open.
    pub(crate) async fn open<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<(Member, StoreResult<R>)> {
        let (reply, rx) = oneshot::channel();
        let span = tracing::debug_span!("idem_sqlite.write");
        let conn = self.conn.clone();
        self.push(Box::new(move |w| {
            let opened = span.in_scope(|| w.enter().map(|m| (m, w.run(m, f))));
            let opened = opened.map(|(m, out)| (Opened(Some((m, conn))), out));
            if let Err(Ok((mut o, _))) = reply.send(opened)
                && let Some((m, _)) = o.0.take()
            {
                w.abandon(m); // the caller left before the reply was sent
            }
        }))?;
        let (mut o, out) = Reply(rx).wait().await?;
        let (m, _) = o.0.take().expect("an opened member is taken once");
        Ok((m, out))
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

/// A member opened on the writer thread for a caller that has not taken it yet: dropped
/// untaken (its caller left after the reply was sent), it rolls back to its savepoint.
struct Opened(Option<(Member, Arc<Mutex<WriteConn>>)>);

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some((m, conn)) = self.0.take() {
            lock(&conn).abandon(m);
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
    turns: &Turns,
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
        let committed = {
            let mut w = lock(conn);
            if let Some(task) = task
                && catch_unwind(AssertUnwindSafe(|| task(&mut w))).is_err()
            {
                tracing::error!("an operation on the SQLite writer thread panicked");
                // Its caller hears the reply channel closed and will never end its member.
                w.drop_orphan();
            }
            let due = w.due(coming.load(Ordering::SeqCst));
            if due {
                w.commit();
            }
            due
        };
        if ran {
            inflight.done();
        }
        if committed {
            // Not under the connection's lock: callers joining no group do not wait.
            turns.stand_aside();
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
