//! The listener: where the store has a channel between processes (PostgreSQL's
//! LISTEN/NOTIFY, SQLite's wake-up sockets on Linux), it wakes this worker's claim loops
//! when another process announces jobs in one of the worker's queues.
//!
//! What must stay true: the listener only hastens a claim, it never decides one; the
//! claim loops still poll (`poll_interval`), so a lost announcement or a broken
//! subscription delays a job, never strands it. `listening` is `Live` only while a
//! subscription is live, so `WorkerHandle::ready` means announcements are heard; it is
//! `NoChannel` when the store says it has none here after all (then workers poll).

use std::sync::Arc;

use idem_store::Wakeups;
use tokio::sync::watch;

use super::Shared;

/// Whether this worker hears announcements from other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listening {
    /// Not yet, or the subscription broke and is being made again.
    Waiting,
    /// A subscription is live.
    Live,
    /// The store cannot carry announcements here (or was closed): the worker polls.
    NoChannel,
}

/// Wakes the claim loops when another process announces jobs in one of this worker's
/// queues (where the store has a channel); subscribes again after a broken subscription.
pub(super) async fn listen_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let store = shared.idem.store.clone();
    if !store.has_channel() {
        return;
    }
    while !*stop.borrow() {
        let mut wakeups = match store.subscribe().await {
            Ok(Some(w)) => w,
            Ok(None) => {
                shared.listening.send_replace(Listening::NoChannel);
                return;
            }
            Err(e) => {
                tracing::warn!(worker = %shared.name, error = %e, "cannot listen for new jobs; polling");
                tokio::select! {
                    _ = tokio::time::sleep(shared.config.poll_interval) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        shared.listening.send_replace(Listening::Live);
        let stopped = relay(&shared, wakeups.as_mut(), &mut stop).await;
        shared.listening.send_replace(Listening::Waiting);
        if stopped {
            return;
        }
    }
}

/// Wakes the claim loops for each announcement that names one of this worker's queues
/// (or none, meaning any). Returns `true` when `stop` changed, `false` when the
/// subscription broke.
async fn relay(
    shared: &Shared,
    wakeups: &mut dyn Wakeups,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        let queues = tokio::select! {
            q = wakeups.next() => q,
            _ = stop.changed() => return true,
        };
        match queues {
            Ok(q) if q.is_empty() || q.iter().any(|q| shared.config.queues.contains_key(q)) => {
                shared.idem.waker.local().notify_waiters();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(worker = %shared.name, error = %e, "listening for new jobs failed; subscribing again");
                return false;
            }
        }
    }
}
