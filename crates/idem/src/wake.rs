//! Waking workers when jobs are enqueued.
//!
//! In the same process, an enqueue wakes the claim loops at once (a `Notify`). Across
//! processes, where the store has a channel (PostgreSQL's LISTEN/NOTIFY), an announcer
//! task sends the queues enqueued into after the transaction committed; it sends one
//! announcement at a time and folds whatever arrived meanwhile into the next, so a busy
//! producer costs the database a handful of notifications per second, not one per
//! enqueue. Workers in other processes listen (`worker/listener.rs`) and fall back to
//! polling if a notification is lost.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use idem_store::Store;
use tokio::sync::{Notify, mpsc};

/// Wakes this process's claim loops and announces to other processes.
#[derive(Clone, Default)]
pub(crate) struct Waker {
    local: Arc<Notify>,
    announcer: Arc<OnceLock<mpsc::UnboundedSender<String>>>,
}

impl Waker {
    /// The in-process signal claim loops wait on.
    pub(crate) fn local(&self) -> &Notify {
        &self.local
    }

    /// Jobs now wait in `queues`: wake local workers and announce to the others.
    pub(crate) fn jobs_waiting<'a>(
        &self,
        store: &Arc<dyn Store>,
        queues: impl IntoIterator<Item = &'a str>,
    ) {
        self.local.notify_waiters();
        if !store.has_channel() {
            return;
        }
        let tx = self.announcer.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(announce_loop(store.clone(), rx));
            tx
        });
        for q in queues {
            let _ = tx.send(q.to_owned());
        }
    }
}

async fn announce_loop(store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(first) = rx.recv().await {
        let mut queues = BTreeSet::from([first]);
        while let Ok(q) = rx.try_recv() {
            queues.insert(q);
        }
        let queues: Vec<String> = queues.into_iter().collect();
        if let Err(e) = store.announce(&queues).await {
            tracing::debug!(error = %e, "announcing enqueued jobs failed; workers will poll");
        }
    }
}
