//! The heartbeat: one statement every `heartbeat_interval` extends all of the worker's
//! leases, and a lease it could not extend is flagged to its handler.
//!
//! What must stay true: only the leases of claims still held are sent, each with its
//! fence, so the store renews a claim only while it is current; a lease that came back
//! unrenewed raises its job's `LeaseSignal` (the handler can stop early; its writes
//! would be refused anyway). The heartbeat stops last at shutdown, after the jobs.

use std::collections::HashSet;
use std::sync::Arc;

use idem_store::{JobHeartbeat, LeaseToken};
use tokio::sync::watch;

use super::Shared;

/// Extends every held lease each `heartbeat_interval` until `stop` changes.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(shared.config.heartbeat_interval) => {},
            _ = stop.changed() => return,
        }
        let leases = shared.tokens();
        if leases.is_empty() {
            continue;
        }
        let params = JobHeartbeat {
            leases: leases.clone(),
            lease_ms: shared.lease_ms(),
            now: shared.idem.clock.now(),
        };
        match shared.idem.store.job_heartbeat(params).await {
            Ok(renewed) => mark_lost(&shared, &leases, &renewed),
            Err(e) => tracing::warn!(worker = %shared.name, error = %e, "heartbeat failed"),
        }
    }
}

/// Raises the lost-lease signal of every claim sent but not renewed that is still held.
fn mark_lost(shared: &Shared, sent: &[LeaseToken], renewed: &[idem_store::LeaseRenewal]) {
    let kept: HashSet<LeaseToken> = renewed
        .iter()
        .map(|r| LeaseToken {
            job_id: r.job_id,
            fence: r.fence,
        })
        .collect();
    let held = shared.held.lock().expect("held lock poisoned");
    for token in sent {
        let kept = kept.contains(token);
        if let (false, Some(h)) = (kept, held.get(token))
            && !h.lost.raise()
        {
            tracing::warn!(job_id = token.job_id, fence = token.fence, "lease lost");
        }
    }
}
