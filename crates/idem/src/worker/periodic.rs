//! The ticker of one [`Periodic`] schedule: waits for each tick on the database's clock
//! and enqueues its job under the tick's enqueue key, until the worker stops claiming.
//!
//! What must stay true: a tick's job is enqueued only with its tick key (so every
//! process that runs the schedule may enqueue it, and one job results); a starting
//! worker enqueues at most one past tick (the latest of the catch-up window), and no
//! tick older than the window (and 10 s) after a stall; a failed
//! enqueue is tried again until the next tick is due, then the tick is given up with an
//! error in the log.

use std::sync::Arc;
use std::time::Duration;

use idem_store::Timestamp;
use tokio::sync::watch;

use crate::Idem;
use crate::cron::Periodic;

/// How late a tick may be reached and still be enqueued, whatever the catch-up window.
const STALL: Duration = Duration::from_secs(10);

/// How long a failed enqueue of a tick waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Enqueues `p`'s ticks until `stop` turns true.
pub(super) async fn periodic_loop(idem: Idem, p: Arc<Periodic>, mut stop: watch::Receiver<bool>) {
    let mut after = loop {
        match idem.now().await {
            Ok(now) => break start_after(&p, now),
            Err(e) => {
                tracing::warn!(periodic = p.name(), error = %e, "reading the database clock failed; trying again");
                if wait(RETRY, &mut stop).await {
                    return;
                }
            }
        }
    };
    while let Some(tick) = p.next_after(after) {
        let Some(now) = until(&idem, tick, &mut stop).await else {
            return;
        };
        // After a stall (a paused process), ticks older than the catch-up window (and
        // than STALL, so that a tick reached a little late still counts) are given up,
        // as a restart would give them up.
        let oldest = now - chrono_span(p.catch_up_window().max(STALL));
        if tick < oldest {
            tracing::warn!(periodic = p.name(), %tick, "ticks older than the catch-up window were missed (the process stalled); they are not enqueued");
            after = oldest;
            continue;
        }
        if !enqueue(&idem, &p, tick, &mut stop).await {
            return;
        }
        after = tick;
    }
    tracing::info!(periodic = p.name(), "the schedule has no more ticks");
}

/// Where a starting worker's ticks begin: just before the latest tick of the catch-up
/// window (the one a restart may have missed; older ones are not enqueued), else now.
fn start_after(p: &Periodic, now: Timestamp) -> Timestamp {
    let mut latest = None;
    let mut t = now - chrono_span(p.catch_up_window());
    while let Some(tick) = p.next_after(t).filter(|tick| *tick <= now) {
        latest = Some(tick);
        t = tick;
    }
    match latest {
        Some(tick) => tick - chrono::Duration::milliseconds(1),
        None => now,
    }
}

/// Waits until the database's clock reaches `tick`; the clock's reading then, or `None`
/// when stopped first.
async fn until(
    idem: &Idem,
    tick: Timestamp,
    stop: &mut watch::Receiver<bool>,
) -> Option<Timestamp> {
    loop {
        let Ok(now) = idem.now().await else {
            if wait(RETRY, stop).await {
                return None;
            }
            continue;
        };
        match (tick - now).to_std() {
            Ok(left) if !left.is_zero() => {
                if wait(left, stop).await {
                    return None;
                }
            }
            _ => return Some(now),
        }
    }
}

/// Enqueues `tick`'s job, trying again until the next tick is due; false when stopped.
async fn enqueue(
    idem: &Idem,
    p: &Periodic,
    tick: Timestamp,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let next = p.next_after(tick);
    loop {
        match idem.enqueue(p.job_for(tick)).await {
            Ok(job) => {
                tracing::debug!(periodic = p.name(), job_id = job.id, deduplicated = job.deduplicated, %tick, "tick enqueued");
                return true;
            }
            Err(e) => {
                let now = idem.now().await.ok();
                if let (Some(now), Some(next)) = (now, next)
                    && now >= next
                {
                    tracing::error!(periodic = p.name(), %tick, error = %e, "enqueueing a tick failed until the next tick was due; this tick is given up");
                    return true;
                }
                tracing::warn!(periodic = p.name(), %tick, error = %e, "enqueueing a tick failed; trying again");
                if wait(RETRY, stop).await {
                    return false;
                }
            }
        }
    }
}

/// Sleeps `d`; true when `stop` turned true first.
async fn wait(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

fn chrono_span(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
