//! Waking workers when jobs are enqueued.
//!
//! In the same process, an enqueue wakes the claim loops at once (a `Notify`). Across
//! processes, where the store has a channel (PostgreSQL's LISTEN/NOTIFY; SQLite's
//! wake-up sockets beside the database file, on Linux), an announcer task sends the
//! queues enqueued into after the transaction committed; it sends one announcement at a
//! time and folds whatever arrived meanwhile into the next, so a busy producer costs a
//! handful of announcements per second, not one per enqueue. Workers in other processes
//! listen (`worker/listener.rs`) and fall back to polling if an announcement is lost.
//! [`Waker::flush`] waits until everything queued so far was sent, so a producer that
//! exits right after enqueueing (`idem enqueue`) still wakes the workers.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use idem_store::Store;
use tokio::sync::{Notify, mpsc, oneshot};

/// What the announcer is given: a queue to announce, or a request to report once
/// everything before it was sent.
enum Message {
    Queue(String),
    Flush(oneshot::Sender<()>),
}

/// Wakes this process's claim loops and announces to other processes.
#[derive(Clone, Default)]
pub(crate) struct Waker {
    local: Arc<Notify>,
    announcer: Arc<OnceLock<mpsc::UnboundedSender<Message>>>,
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
            let _ = tx.send(Message::Queue(q.to_owned()));
        }
    }

    /// Resolves once every announcement queued so far was sent (or failed).
    pub(crate) async fn flush(&self) {
        let Some(tx) = self.announcer.get() else {
            return;
        };
        let (done, sent) = oneshot::channel();
        if tx.send(Message::Flush(done)).is_ok() {
            let _ = sent.await;
        }
    }
}

async fn announce_loop(store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<Message>) {
    while let Some(first) = rx.recv().await {
        let mut queues = BTreeSet::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Queue(q) => queues.insert(q),
                Message::Flush(done) => {
                    flushes.push(done);
                    false
                }
            };
            next = rx.try_recv().ok();
        }
        if !queues.is_empty() {
            let queues: Vec<String> = queues.into_iter().collect();
            if let Err(e) = store.announce(&queues).await {
                tracing::debug!(error = %e, "announcing enqueued jobs failed; workers will poll");
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}
