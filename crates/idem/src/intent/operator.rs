//! Operator actions on intents: reading them, and settling one by hand when
//! reconciliation could not (`idem intents resolve KEY --applied|--absent`).

use idem_store::{
    IntentList, IntentResolution, IntentResolve, IntentRow, IntentState, JobState, StoreError,
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
        let parks = matches!(resolution, IntentResolution::Manual { .. });
        let params = IntentResolve {
            token: row.token(),
            from: OPERATOR_FROM.to_vec(),
            resolution,
            now: self.clock.now(),
        };
        let settled = self.store.intent_resolve(params).await?;
        let retried = !parks && self.retry_settled(settled.job_id).await?;
        Ok((settled, retried))
    }

    /// Puts the job of a settled intent back to run if it is dead (it stopped to await
    /// the settlement); whether it did. Forced past the effect-key window check: the
    /// job's outcome was pending on this intent, not on a new horizon.
    pub(crate) async fn retry_settled(&self, job_id: i64) -> Result<bool, IdemError> {
        match self.store.job_get(job_id).await? {
            Some(job) if job.state == JobState::Dead => {
                Ok(!self.retry_jobs_forced(vec![job_id]).await?.is_empty())
            }
            _ => Ok(false),
        }
    }
}
