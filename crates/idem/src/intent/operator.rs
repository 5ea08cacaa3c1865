//! Operator actions on intents: reading them, and settling one by hand when
//! reconciliation could not (`idem intents resolve KEY --applied|--absent`).

use idem_store::{
    IntentList, IntentResolution, IntentResolve, IntentRow, IntentState, JobPutBack, StoreError,
};

use crate::client::Idem;
use crate::error::IdemError;

/// The states an operator may settle an intent from: unknown outcomes, and those
/// reconciliation parked.
pub const OPERATOR_FROM: [IntentState; 2] = IntentState::AWAITING_SETTLEMENT;

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
        if !row.state.awaits_settlement() {
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
        let (settled, back) = self.settle_intent(params).await?;
        Ok((settled, back > 0))
    }

    /// Resolves an intent and puts every dead job that stopped to await it back to run,
    /// in one transaction: a resolution never commits without the put-back it owes. A
    /// resolution that parks the intent for an operator (`manual`) puts nothing back.
    /// (No dead job awaits an intent settled before, so the audit's completed →
    /// duplicate finds none.) Forced past the effect-key window check: each job's
    /// outcome was pending on this intent, not on a new horizon. Returns the intent as
    /// settled and how many jobs were put back.
    pub(crate) async fn settle_intent(
        &self,
        params: IntentResolve,
    ) -> Result<(IntentRow, usize), StoreError> {
        let now = params.now;
        let parks = matches!(params.resolution, IntentResolution::Manual { .. });
        let mut tx = self.store.begin().await?;
        let settled = tx.intent_resolve(params).await?;
        let back = match parks {
            true => 0,
            false => {
                let key = settled.key.clone();
                tx.job_put_back(JobPutBack { key, now }).await?.len()
            }
        };
        tx.commit().await?;
        Ok((settled, back))
    }
}
