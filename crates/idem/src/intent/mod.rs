//! Intents: effects that leave the store (`KeyedRemote`, `UnkeyedRemote`).
//!
//! A call to another service cannot commit with its key, so a handler brackets it:
//! [`JobContext::intent`] reserves the logical request's key with a lease of its own,
//! the handler makes the call through the [`IntentGuard`] (which renews the lease and
//! abandons the call before the lease lapses), then records the outcome. A crash in
//! between leaves an intent whose lease runs out: the next attempt takes it over and
//! sends the same key again (a keyed remote applies it once), or, for an unkeyed remote,
//! the intent goes to reconciliation instead of being sent again blindly.
//!
//! What must stay true: the key sent to the remote is the intent's key, which names the
//! logical request and is the same on every attempt; only the job's current claim can
//! reserve or take over an intent; a holder whose intent was taken over can write
//! nothing ([`idem_store::StoreError::IntentLost`]).

mod guard;
mod operator;
mod policy;
mod reconcile;

use std::time::Duration;

use idem_store::{IntentBegin, IntentBegun, IntentList, IntentRow};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use guard::IntentGuard;
pub use operator::OPERATOR_FROM;
pub use policy::IntentPolicy;
pub use reconcile::{Lookup, ReconcileOptions, ReconcileReport, Reconciler};

use crate::context::JobContext;
use crate::effect::EffectKey;
use crate::error::{IdemError, JobError};
use crate::handler::EffectClass;

/// The shortest a job waits before looking again at an intent another holder has in
/// progress.
const IN_PROGRESS_MIN: Duration = Duration::from_millis(100);

/// What [`JobContext::intent`] found: either this attempt holds the intent and makes the
/// call, or the key's record says what happened to the call already.
#[derive(Debug)]
pub enum Intent {
    /// This attempt holds the intent (a first reservation, or a takeover when
    /// [`IntentGuard::attempt`] is above 1): make the call through the guard.
    Begun(IntentGuard),
    /// Another holder's lease is live: do not call now ([`Intent::wait`]).
    InProgress(IntentRow),
    /// The call was applied (`completed`, or `duplicate` at an unkeyed remote): its
    /// stored result is in the row; nothing is sent.
    Completed(IntentRow),
    /// The remote refused the call for good; nothing is sent.
    Failed(IntentRow),
    /// The outcome is unknown (`unknown`, `manual`): reconciliation decides; nothing is
    /// sent.
    Reconcile(IntentRow),
}

impl Intent {
    /// The job's answer when this attempt does not hold the intent: wait for a live
    /// holder (a snooze until its lease ends: one snooze per lease, so a long call does
    /// not use up the job's `max_snoozes`), stop for good on a refused call, stop and
    /// wait for reconciliation on an unknown outcome. `None` for `Begun` and `Completed`,
    /// where the handler goes on.
    pub fn wait(&self) -> Option<JobError> {
        match self {
            Intent::Begun(_) | Intent::Completed(_) => None,
            // By the lease's end the holder has finished, renewed, or lost it.
            Intent::InProgress(row) => {
                let left = row
                    .lease_expires_at
                    .map(|end| (end - chrono::Utc::now()).to_std().unwrap_or_default())
                    .unwrap_or_default();
                Some(JobError::snooze(left.max(IN_PROGRESS_MIN)))
            }
            Intent::Failed(row) => Some(JobError::permanent(format!(
                "intent {:?} failed: {}",
                row.key,
                row.error
                    .as_deref()
                    .unwrap_or("the remote refused the call")
            ))),
            Intent::Reconcile(row) => Some(awaiting_reconciliation(row)),
        }
    }
}

/// The permanent error of a job whose call's outcome is not known: it stays dead until
/// reconciliation or an operator settles the intent and retries the job.
pub fn awaiting_reconciliation(row: &IntentRow) -> JobError {
    let error = JobError::permanent(format!(
        "intent {:?} is {}: the call may or may not have been applied ({}); it is not sent \
         again blindly. `idem reconcile` looks it up on the remote, `idem intents resolve` \
         settles it by hand; either retries this job once the intent is settled",
        row.key,
        row.state,
        row.error.as_deref().unwrap_or("no detail recorded")
    ));
    JobError {
        awaits: Some(row.key.clone()),
        ..error
    }
}

/// A digest of a request: SHA-256 of its JSON with object keys sorted, in hex. The same
/// key sent with a different request is refused, so the digest covers what the call
/// sends (method, target, body), never when or by whom.
pub fn fingerprint(request: &impl Serialize) -> Result<String, IdemError> {
    // serde_json's map is ordered by key, so a Value prints canonically.
    let value = serde_json::to_value(request)
        .map_err(|e| IdemError::InvalidJob(format!("the request cannot be encoded: {e}")))?;
    let bytes = serde_json::to_vec(&value)
        .map_err(|e| IdemError::InvalidJob(format!("the request cannot be encoded: {e}")))?;
    Ok(sha256_hex(&bytes))
}

/// SHA-256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl JobContext {
    /// Reserves the intent of a call outside the store, keyed by the logical request
    /// (`EffectKey::new("charge").part(order_id)`), with `request` as its fingerprint
    /// ([`fingerprint`]). Only this job's current claim can reserve or take it over:
    /// a stale claim gets an error for which [`IdemError::is_lease_lost`] is true. The
    /// same key with a different request is refused ([`IdemError::IntentMismatch`]) and
    /// changes nothing. Only handlers of the remote classes may call it.
    pub async fn intent(
        &mut self,
        key: &EffectKey,
        request: &impl Serialize,
    ) -> Result<Intent, IdemError> {
        self.intent_as(self.effect, key, request).await
    }

    /// [`JobContext::intent`] for a call of class `class`, for a kind whose calls differ
    /// (the built-in `http` kind calls keyed and unkeyed remotes).
    pub async fn intent_as(
        &mut self,
        class: EffectClass,
        key: &EffectKey,
        request: &impl Serialize,
    ) -> Result<Intent, IdemError> {
        let unkeyed = match class {
            EffectClass::KeyedRemote => false,
            EffectClass::UnkeyedRemote => true,
            EffectClass::Transactional => {
                return Err(IdemError::Config(format!(
                    "job kind {:?} is declared Transactional, but intents are for calls \
                     outside the store: declare it KeyedRemote or UnkeyedRemote",
                    self.job().kind
                )));
            }
        };
        let params = IntentBegin {
            key: key.render()?,
            fingerprint: fingerprint(request)?,
            unkeyed,
            lease_ms: crate::client::millis(self.intent_policy.lease),
            job: self.lease(),
            now: self.idem.clock.now(),
        };
        let begun = self.idem.store.intent_begin(params.clone()).await?;
        Ok(match begun {
            IntentBegun::Begun(row) => {
                // On every attempt: an operator's retry starts the count again. A failed
                // check only warns: the intent is reserved and its guard must start.
                if let Err(e) = self.check_stable_intent(key, &row).await {
                    tracing::warn!(key = %row.key, error = %e, "could not check the intent key's stability");
                }
                Intent::Begun(IntentGuard::start(&self.idem, row, self.intent_policy))
            }
            IntentBegun::InProgress(row) => Intent::InProgress(row),
            IntentBegun::Completed(row) => Intent::Completed(row),
            IntentBegun::Failed(row) => Intent::Failed(row),
            IntentBegun::Reconcile(row) => Intent::Reconcile(row),
            IntentBegun::Mismatch(row) => {
                return Err(IdemError::IntentMismatch {
                    key: row.key,
                    stored: row.fingerprint,
                    given: params.fingerprint,
                });
            }
        })
    }

    /// Warns and counts when this job holds intents of the same kind under other keys (the key changes between attempts, so the remote sees new requests).
    async fn check_stable_intent(&self, key: &EffectKey, row: &IntentRow) -> Result<(), IdemError> {
        let mine = IntentList {
            job_id: Some(row.job_id),
            limit: 10,
            ..IntentList::default()
        };
        let prefix = format!("{}:", key.kind());
        let others: Vec<String> = (self.idem.store.intent_list(mine).await?)
            .into_iter()
            .map(|r| r.key)
            .filter(|k| *k != row.key && k.starts_with(&prefix))
            .collect();
        if !others.is_empty() {
            self.idem.metrics.unstable_effect_key(key.kind());
            tracing::warn!(
                job_id = row.job_id,
                attempt = self.job().attempt,
                key = %row.key,
                earlier = ?others,
                "unstable intent key: this job holds intents of the same kind under other keys, \
                 so the remote sees a new request on each attempt; build keys from the \
                 request's identity, never from an attempt number, a fence or a timestamp"
            );
        }
        Ok(())
    }
}
