//! Operator actions on intents: reading them, and settling one by hand when
//! reconciliation could not (`idem intents resolve KEY --applied|--absent`).

use idem_store::{
    IntentList, IntentResolution, IntentResolve, IntentRow, IntentState, JobRetry, JobRow,
    JobState, StoreError, StoreTx,
};

use crate::client::Idem;
use crate::error::IdemError;

/// The states an operator may settle an intent from: unknown outcomes, and those
/// reconciliation parked.
pub const OPERATOR_FROM: [IntentState; 2] = [IntentState::Unknown, IntentState::Manual];

impl Idem {
    /// One intent by key.
    pub async fn intent(&self, key: &str) -> Result<Option<IntentRow>, IdemError> {
        Ok(self.store.intent_get(key.to_owned()).await?)
    }

    /// Intents matching the filters, in key order.
    pub async fn intents(&self, params: IntentList) -> Result<Vec<IntentRow>, IdemError> {
        Ok(self.store.intent_list(params).await?)
    }

    /// Settles intent `key` by hand, from `unknown` or `manual` only: *applied* completes
    /// it with the remote's ids, *absent* releases it so the call is sent again. Its job,
    /// if dead (stopped to await this), is put back to run: it then finds the stored
    /// outcome, or sends once more. Returns the intent as settled and whether the job
    /// was retried. [`StoreError::Conflict`] when the intent is in another state (an
    /// operator never overrides a call in progress or already settled).
    pub async fn resolve_intent(
        &self,
        key: &str,
        resolution: IntentResolution,
    ) -> Result<(IntentRow, bool), IdemError> {
        let Some(row) = self.intent(key).await? else {
            return Err(StoreError::not_found(format!("intent {key:?}")).into());
        };
        if !OPERATOR_FROM.contains(&row.state) {
            return Err(StoreError::Conflict(format!(
                "intent {key:?} is {}; only unknown or manual intents are settled by hand \
                 (an intent in progress has a live holder, and a settled one needs nothing)",
                row.state
            ))
            .into());
        }
        let params = IntentResolve {
            token: row.token(),
            from: OPERATOR_FROM.to_vec(),
            resolution,
            now: self.clock.now(),
        };
        let parks = matches!(params.resolution, IntentResolution::Manual { .. });
        Ok(self.settle_intent(params, !parks).await?)
    }

    /// Resolves an intent and, when `put_back` (the job stopped to await this
    /// settlement), puts its job back to run if the job is dead, in one transaction: a
    /// resolution never commits without the put-back it owes. Forced past
    /// the effect-key window check: the job's outcome was pending on this intent, not on
    /// a new horizon. Returns the intent as settled and whether the job was put back.
    pub(crate) async fn settle_intent(
        &self,
        params: IntentResolve,
        put_back: bool,
    ) -> Result<(IntentRow, bool), StoreError> {
        let now = params.now;
        let mut tx = self.store.begin().await?;
        let settled = tx.intent_resolve(params).await?;
        let retried = put_back
            && put_back_if_dead(tx.as_mut(), settled.job_id, now)
                .await?
                .is_some();
        tx.commit().await?;
        Ok((settled, retried))
    }
}

/// Puts job `job_id` back to run (attempt 0, a fresh start) if it is dead, in `tx`;
/// the job as put back, or `None` when it was not dead.
pub(crate) async fn put_back_if_dead(
    tx: &mut dyn StoreTx,
    job_id: i64,
    now: Option<idem_store::Timestamp>,
) -> Result<Option<JobRow>, StoreError> {
    let dead = tx.job_get_many(vec![job_id]).await?;
    if !dead.iter().any(|j| j.state == JobState::Dead) {
        return Ok(None);
    }
    let params = JobRetry {
        ids: vec![job_id],
        now,
    };
    Ok(tx.job_retry(params).await?.pop())
}
