//! Read connections: up to `readers` of them, opened on first need and reused, each
//! read run on tokio's blocking pool. WAL lets them read beside the writer thread.

use std::sync::{Arc, Mutex};

use idem_store::StoreResult;
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::connect::Target;
use crate::writer::closed;

/// The read connections of a store.
pub(crate) struct Readers {
    target: Target,
    idle: Mutex<Vec<Connection>>,
    slots: Arc<Semaphore>,
}

impl Readers {
    pub(crate) fn new(target: Target, readers: u32) -> Arc<Readers> {
        let slots = Arc::new(Semaphore::new(readers.max(1) as usize));
        let idle = Mutex::new(Vec::new());
        Arc::new(Readers {
            target,
            idle,
            slots,
        })
    }

    /// Runs `f` on a read connection.
    pub(crate) async fn run<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        let this = Arc::clone(self);
        // The caller's span (a job attempt's) follows the read to its blocking thread.
        let span = tracing::debug_span!("idem_sqlite.read");
        let task = tokio::task::spawn_blocking(move || {
            let _in = span.enter();
            let conn = this.take()?;
            let out = f(&conn);
            this.put(conn);
            drop(permit);
            out
        });
        task.await.map_err(|e| {
            idem_store::StoreError::Database(format!("a read on SQLite failed: {e}"))
        })?
    }

    fn take(&self) -> StoreResult<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => self.target.open(false),
        }
    }

    fn put(&self, conn: Connection) {
        if !self.slots.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
    }

    /// Refuses later reads and closes the idle connections.
    pub(crate) fn close(&self) {
        self.slots.close();
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
