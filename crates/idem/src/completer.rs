//! The batch completer: jobs whose handlers returned `Ok` without completing inside
//! their own effect transaction are completed many at a time, one statement per batch.
//!
//! Batching is natural, not timed: with nothing in flight the completer sends whatever is
//! waiting at once, so an idle worker completes each job without delay; while flushes
//! are on their way, a small batch waits for one of them to finish and gathers what
//! arrives meanwhile, so a busy worker completes hundreds per statement. Each job's fence is still checked on its own, in the
//! statement's `WHERE` clause; a claim that is no longer current is answered as lost.
//! A job's slot stays held until its answer arrives, so the worker never holds more
//! leases than its concurrency.

use std::collections::HashSet;
use std::sync::Arc;

use idem_store::{JobCompleteMany, LeaseToken, Store, StoreResult};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};

use crate::clock::Clock;

/// Most jobs completed by one statement.
pub const COMPLETE_BATCH: usize = 1000;

/// A batch this large goes out even while other flushes are in flight; a smaller one
/// waits for one of them to finish, gathering more meanwhile.
pub const EAGER_BATCH: usize = 250;

/// Completion statements in flight at once. While one batch waits for its commit to be
/// flushed, the next can already be on its way, so a store whose commits wait for the
/// disk can flush several together (PostgreSQL's group commit).
pub const FLUSHES_IN_FLIGHT: usize = 2;

/// One job waiting to be completed, with where to send the answer: `true` completed,
/// `false` its claim was no longer current.
struct Pending {
    lease: LeaseToken,
    /// What its handler set with `set_result`.
    result: Option<serde_json::Value>,
    /// A child of a batch: completed in a transaction that counts its batch.
    in_batch: bool,
    reply: oneshot::Sender<StoreResult<bool>>,
}

/// The handle jobs use to ask for completion.
#[derive(Clone)]
pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Completer {
    /// Starts the completer task; it stops when `stop` turns true after the queue drained.
    pub(crate) fn start(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        stop: watch::Receiver<bool>,
    ) -> (Completer, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(store, clock, rx, stop));
        (Completer { tx }, task)
    }

    /// Completes `job` under its fence, keeping `result`; `Ok(false)` when the claim was
    /// lost.
    pub(crate) async fn complete(
        &self,
        job: &idem_store::JobRow,
        result: Option<serde_json::Value>,
    ) -> StoreResult<bool> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            lease: job.lease_token(),
            result,
            in_batch: job.batch_id.is_some(),
            reply,
        };
        if self.tx.send(pending).is_err() {
            return Err(idem_store::StoreError::Unavailable(
                "the worker's completer has stopped".into(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(idem_store::StoreError::Unavailable(
                "the worker's completer stopped before answering".into(),
            ))
        })
    }
}

async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    mut stop: watch::Receiver<bool>,
) {
    let in_flight = Arc::new(Semaphore::new(FLUSHES_IN_FLIGHT));
    let finished = Arc::new(Notify::new());
    let mut open = true;
    while open {
        let first = tokio::select! {
            biased;
            item = rx.recv() => match item {
                Some(item) => item,
                None => break,
            },
            _ = stop.changed() => break,
        };
        let mut batch = vec![first];
        take_waiting(&mut rx, &mut batch);
        // While other flushes are on their way, a small batch waits for one of them to
        // finish and gathers what arrives meanwhile: fewer, larger statements when busy,
        // and still at once when nothing is in flight.
        while batch.len() < EAGER_BATCH {
            let done = finished.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if in_flight.available_permits() == FLUSHES_IN_FLIGHT {
                break;
            }
            tokio::select! {
                _ = done => {}
                item = rx.recv() => match item {
                    Some(item) => batch.push(item),
                    None => open = false,
                },
            }
            take_waiting(&mut rx, &mut batch);
            if !open {
                break;
            }
        }
        let slot = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let (store, clock, finished) = (store.clone(), clock.clone(), finished.clone());
        tokio::spawn(async move {
            flush(store.as_ref(), clock.as_ref(), batch).await;
            drop(slot);
            finished.notify_waiters();
        });
    }
    // Let the flushes still in flight finish before the worker reports.
    let _ = in_flight.acquire_many(FLUSHES_IN_FLIGHT as u32).await;
}

/// Moves what is waiting into `batch`, up to [`COMPLETE_BATCH`].
fn take_waiting(rx: &mut mpsc::UnboundedReceiver<Pending>, batch: &mut Vec<Pending>) {
    while batch.len() < COMPLETE_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

/// Completes `batch`: jobs outside batches with the store's one-statement completion,
/// children of batches in a transaction that also counts their batches (the one-statement
/// path would leave them alone and cost a round trip for nothing).
async fn flush(store: &dyn Store, clock: &dyn Clock, batch: Vec<Pending>) {
    let (children, plain): (Vec<Pending>, Vec<Pending>) =
        batch.into_iter().partition(|p| p.in_batch);
    for (group, in_tx) in [(plain, false), (children, true)] {
        if !group.is_empty() {
            complete_group(store, clock, group, in_tx).await;
        }
    }
}

async fn complete_group(store: &dyn Store, clock: &dyn Clock, group: Vec<Pending>, in_tx: bool) {
    let result = complete_all(store, clock, &group, in_tx).await;
    match result {
        Err(e) if group.len() > 1 && !e.is_retryable() => {
            // One job the store refuses (a result it cannot hold) must not fail the others
            // sent with it: each goes again on its own.
            for p in group {
                let answer = complete_all(store, clock, std::slice::from_ref(&p), in_tx).await;
                answer_all(vec![p], answer);
            }
        }
        answer => answer_all(group, answer),
    }
}

/// Sends each job of `group` its answer from `result` (the ids completed).
fn answer_all(group: Vec<Pending>, result: StoreResult<Vec<i64>>) {
    match result {
        Ok(ids) => {
            let done: HashSet<i64> = ids.into_iter().collect();
            for p in group {
                let _ = p.reply.send(Ok(done.contains(&p.lease.job_id)));
            }
        }
        Err(e) => {
            for p in group {
                let _ = p.reply.send(Err(e.clone()));
            }
        }
    }
}

/// Completes `group` in one statement (in a transaction when `in_tx`), retrying while
/// the store is busy.
async fn complete_all(
    store: &dyn Store,
    clock: &dyn Clock,
    group: &[Pending],
    in_tx: bool,
) -> StoreResult<Vec<i64>> {
    let leases: Vec<LeaseToken> = group.iter().map(|p| p.lease).collect();
    let results: Vec<(i64, serde_json::Value)> = group
        .iter()
        .filter_map(|p| Some((p.lease.job_id, p.result.clone()?)))
        .collect();
    crate::worker::write_retrying(|| {
        let params = JobCompleteMany {
            leases: leases.clone(),
            results: results.clone(),
            now: clock.now(),
        };
        async move {
            if !in_tx {
                return store.job_complete_many(params).await;
            }
            let mut tx = store.begin().await?;
            let ids = tx.job_complete_many(params).await?;
            tx.commit().await?;
            Ok(ids)
        }
    })
    .await
}
