//! The writer thread: one OS thread per store owns the write [`Connection`] and runs the
//! closures async callers send it, in the order they arrive.
//!
//! A closure is one hop: a store operation sends its whole transaction (`BEGIN
//! IMMEDIATE`, statements, `COMMIT`) as one closure; an open [`crate::SqliteTx`] sends one
//! closure per operation (its first one carries the `BEGIN IMMEDIATE`). The channel is FIFO, so a rollback sent from a dropped
//! transaction runs before anything sent after it. A closure that panics is caught: the
//! thread keeps serving, and the caller sees its reply channel closed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread::JoinHandle;

use idem_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

type Task = Box<dyn FnOnce(&Connection) + Send>;

/// The handle to the writer thread; `None` inside once the store is closed.
pub(crate) struct Writer {
    tasks: Option<mpsc::Sender<Task>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub(crate) fn spawn(conn: Connection) -> StoreResult<Writer> {
        let (tasks, inbox) = mpsc::channel::<Task>();
        let thread = std::thread::Builder::new()
            .name("idem-sqlite-writer".into())
            .spawn(move || serve(conn, inbox))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer thread: {e}")))?;
        Ok(Writer {
            tasks: Some(tasks),
            thread: Some(thread),
        })
    }

    /// Sends `f` to the thread without waiting for it to run. Returns the receiver of its
    /// result, so a caller can let go of the writer before the reply arrives.
    pub(crate) fn send<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<Reply<R>> {
        let (reply, rx) = oneshot::channel();
        // The caller's span (a job attempt's) follows the closure to the writer thread.
        let span = tracing::debug_span!("idem_sqlite.write");
        let task: Task = Box::new(move |c| {
            let _ = reply.send(span.in_scope(|| f(c)));
        });
        self.tasks
            .as_ref()
            .ok_or_else(closed)?
            .send(task)
            .map_err(|_| stopped())?;
        Ok(Reply(rx))
    }

    /// Runs `f` on the thread and waits for its result.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        self.send(f)?.wait().await
    }

    /// `Unavailable` once the store is closed or the thread has stopped; checked where a
    /// transaction starts without a hop (its `BEGIN` travels with its first operation).
    pub(crate) fn ensure_open(&self) -> StoreResult<()> {
        match (&self.tasks, &self.thread) {
            (Some(_), Some(t)) if !t.is_finished() => Ok(()),
            (Some(_), _) => Err(stopped()),
            (None, _) => Err(closed()),
        }
    }

    /// Sends `f` and forgets it (a rollback from `Drop`). Nothing happens once closed.
    pub(crate) fn detach(&self, f: impl FnOnce(&Connection) + Send + 'static) {
        if let Some(tasks) = &self.tasks {
            let _ = tasks.send(Box::new(f));
        }
    }

    /// Stops the thread after the closures already sent and waits until the connection is
    /// closed. Later calls fail with `Unavailable`.
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

fn serve(conn: Connection, inbox: mpsc::Receiver<Task>) {
    for task in inbox {
        if catch_unwind(AssertUnwindSafe(|| task(&conn))).is_err() {
            tracing::error!("an operation on the SQLite writer thread panicked");
        }
    }
    if let Err((_, e)) = conn.close() {
        tracing::warn!(error = %e, "closing the SQLite write connection failed");
    }
}

pub(crate) fn closed() -> StoreError {
    StoreError::Unavailable("the SQLite store is closed".into())
}

fn stopped() -> StoreError {
    StoreError::Unavailable(
        "the SQLite writer dropped the operation (it panicked, or the store was closed)".into(),
    )
}
