//! The listener: where the store has a channel between processes (PostgreSQL's
//! LISTEN/NOTIFY), it wakes this worker's claim loops when another process announces
//! jobs in one of the worker's queues.
//!
//! What must stay true: the listener only hastens a claim, it never decides one; the
//! claim loops still poll (`poll_interval`), so a lost notification or a broken
//! connection delays a job, never strands it. `listening` is true only while a
//! subscription is live, so `WorkerHandle::ready` means announcements are heard.

use std::sync::Arc;

use idem_store::Wakeups;
use tokio::sync::watch;

use super::Shared;

/// Wakes the claim loops when another process announces jobs in one of this worker's
/// queues (where the store has a channel); subscribes again after a broken connection.
pub(super) async fn listen_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let store = shared.idem.store.clone();
    if !store.has_channel() {
        return;
    }
    while !*stop.borrow() {
        let mut wakeups = match store.subscribe().await {
            Ok(Some(w)) => w,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(worker = %shared.name, error = %e, "cannot listen for new jobs; polling");
                tokio::select! {
                    _ = tokio::time::sleep(shared.config.poll_interval) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        shared.listening.send_replace(true);
        if relay(&shared, wakeups.as_mut(), &mut stop).await {
            return;
        }
        shared.listening.send_replace(false);
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
