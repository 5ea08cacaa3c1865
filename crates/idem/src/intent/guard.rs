//! [`IntentGuard`]: what the holder of an intent carries while its call runs.
//!
//! A task renews the intent's lease every third of it. The guard knows, on the local
//! monotonic clock, a time by which the lease has surely not lapsed yet (when the last
//! renewal was sent, plus the lease: the database set the lease from a later instant),
//! and [`IntentGuard::send`] abandons the call a fifth of a lease before that time if
//! renewals stop getting through, or at once when one finds the intent taken over.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_store::{
    IntentFinish, IntentOutcome, IntentRenew, IntentRow, IntentToken, Store, StoreError,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::IntentPolicy;
use crate::client::Idem;
use crate::clock::Clock;
use crate::error::IdemError;

/// Until when the lease surely holds (`None`: the intent was taken over).
type Deadline = Option<Instant>;

/// The holder of an intent: its key (the key to send to the remote), its fence, and the
/// lease kept alive while it lives. Record the outcome with one of
/// [`complete`](Self::complete), [`fail`](Self::fail), [`unknown`](Self::unknown) or
/// [`release`](Self::release); a guard dropped without one stops renewing, and its
/// intent is taken over (or reconciled) once the lease lapses.
#[derive(Debug)]
pub struct IntentGuard {
    row: IntentRow,
    renewal: Arc<Renewal>,
    deadline: watch::Receiver<Deadline>,
    renewer: tokio::task::JoinHandle<()>,
}

/// What the renewal task and the guard share.
struct Renewal {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    token: IntentToken,
    lease: Duration,
    deadline: watch::Sender<Deadline>,
}

impl std::fmt::Debug for Renewal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewal")
            .field("token", &self.token)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Renewal {
    /// Renews once; moves the deadline on success, clears it when the intent was taken
    /// over.
    async fn renew(&self) -> Result<(), IdemError> {
        let sent = Instant::now();
        let params = IntentRenew {
            token: self.token.clone(),
            lease_ms: crate::client::millis(self.lease),
            now: self.clock.now(),
        };
        match self.store.intent_renew(params).await {
            Ok(_) => {
                // Only ever later, and never back from lost: a renewal answered late must
                // not undo a refusal answered first.
                let end = sent + self.lease;
                self.deadline.send_if_modified(|d| match d {
                    Some(now) if *now < end => {
                        *d = Some(end);
                        true
                    }
                    _ => false,
                });
                Ok(())
            }
            Err(e @ StoreError::IntentLost { .. }) => {
                self.deadline.send_replace(None);
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl IntentGuard {
    /// Starts renewing the intent `row` that this attempt just reserved.
    pub(crate) fn start(idem: &Idem, row: IntentRow, policy: IntentPolicy) -> IntentGuard {
        let lease = policy.lease;
        // Reserved just now: the lease runs from no earlier than this instant.
        let (tx, rx) = watch::channel(Some(Instant::now() + lease));
        let renewal = Arc::new(Renewal {
            store: idem.store.clone(),
            clock: idem.clock.clone(),
            token: row.token(),
            lease,
            deadline: tx,
        });
        let task = renewal.clone();
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                match task.renew().await {
                    Ok(()) => {}
                    Err(e) if matches!(&e, IdemError::Store(StoreError::IntentLost { .. })) => {
                        tracing::warn!(key = %task.token.key, error = %e, "intent taken over");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(key = %task.token.key, error = %e, "intent renewal failed")
                    }
                }
            }
        });
        IntentGuard {
            row,
            renewal,
            deadline: rx,
            renewer,
        }
    }

    /// The key to send to the remote (`Idempotency-Key`): the intent's key, which names
    /// the logical request and is the same on every attempt.
    pub fn key(&self) -> &str {
        &self.row.key
    }

    /// The intent as reserved: fence, attempt, lease.
    pub fn row(&self) -> &IntentRow {
        &self.row
    }

    /// How many holders have begun this intent: 1 for the first, more after takeovers.
    pub fn attempt(&self) -> i64 {
        self.row.attempt
    }

    /// Renews the lease now: `Ok` means this guard still holds the intent, with a full
    /// lease ahead. [`IntentGuard::send`] calls it immediately before the call.
    pub async fn confirm(&self) -> Result<(), IdemError> {
        self.renewal.renew().await
    }

    /// Confirms the lease, then runs `call`, abandoning it (dropping the future) a fifth
    /// of a lease before the lease could lapse if renewals stop getting through, or as
    /// soon as one finds the intent taken over. Abandoned, the call may still have been
    /// applied: record [`unknown`](Self::unknown) if the store takes it, else the lease
    /// lapses and the next attempt takes over (or reconciles).
    pub async fn send<F: Future>(&self, call: F) -> Result<F::Output, IdemError> {
        self.confirm().await?;
        let margin = self.renewal.lease / 5;
        let mut deadline = self.deadline.clone();
        tokio::pin!(call);
        loop {
            let Some(end) = *deadline.borrow_and_update() else {
                return Err(StoreError::intent_lost(&self.renewal.token).into());
            };
            tokio::select! {
                out = &mut call => return Ok(out),
                () = tokio::time::sleep_until(end - margin) => {
                    return Err(IdemError::Store(StoreError::Busy(format!(
                        "the lease of intent {:?} could not be renewed and was about to lapse, \
                         so the call was abandoned; it may have been applied",
                        self.row.key
                    ))));
                }
                // The guard holds the sender, so this only ever reports a change.
                _ = deadline.changed() => {}
            }
        }
    }

    /// The call was applied: store its result (handed to every later attempt instead of
    /// a new call) and the remote's ids for the effect.
    pub async fn complete(
        self,
        result: serde_json::Value,
        remote_refs: Vec<String>,
    ) -> Result<IntentRow, IdemError> {
        let outcome = IntentOutcome::Completed {
            result,
            remote_refs,
        };
        self.finish(outcome).await
    }

    /// The remote refused the call for good (it was not applied).
    pub async fn fail(self, error: impl Into<String>) -> Result<IntentRow, IdemError> {
        let error = error.into();
        self.finish(IntentOutcome::Failed { error }).await
    }

    /// The call may or may not have been applied (a timeout, a reset after the request
    /// was written, a 5xx from a service without keys): the intent goes to
    /// reconciliation.
    pub async fn unknown(self, error: impl Into<String>) -> Result<IntentRow, IdemError> {
        let error = error.into();
        self.finish(IntentOutcome::Unknown { error }).await
    }

    /// The call certainly never left (connection refused, local validation): the intent
    /// is released, and the next attempt takes it with the fence moved on.
    pub async fn release(self) -> Result<IntentRow, IdemError> {
        self.finish(IntentOutcome::Released).await
    }

    async fn finish(self, outcome: IntentOutcome) -> Result<IntentRow, IdemError> {
        self.renewer.abort();
        let r = &self.renewal;
        let params = IntentFinish {
            token: r.token.clone(),
            outcome,
            now: r.clock.now(),
        };
        Ok(r.store.intent_finish(params).await?)
    }
}

impl Drop for IntentGuard {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}
