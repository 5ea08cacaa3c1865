//! The settle phase: once every job has finished, the remote calls whose outcome is
//! unknown are reconciled while the workers still run, so the jobs put back to run
//! complete; then, after the settle delay, the audit looks every completed unkeyed call
//! up again and marks a late second copy `duplicate`.

use std::time::{Duration, Instant};

use anyhow::bail;
use idem::intent::{ReconcileOptions, ReconcileReport};
use idem::{Idem, IntentList, IntentState, WorkerConfig};

use super::remote;
use super::verify::{SUCCESSORS_PENDING, finished};
use crate::scratch;

/// The longest the phase waits for reconciliation and the jobs it puts back.
const LIMIT: Duration = Duration::from_secs(120);

/// Reconciles until no intent is unknown, every job of `ids` is finished again and every
/// batch's successor has finished, then
/// audits once the settle delay has passed; returns the passes' counts summed.
pub(super) async fn settle(
    idem: &Idem,
    ids: (i64, i64),
    lease_ms: u64,
) -> anyhow::Result<ReconcileReport> {
    let mut w = idem.worker(WorkerConfig::default())?;
    w.register(remote::http(lease_ms)?)?;
    let reconciler = w.reconciler();
    let opts = ReconcileOptions {
        settle: Duration::from_millis(lease_ms),
        ..ReconcileOptions::default()
    };
    let total = usize::try_from(ids.1 - ids.0 + 1).unwrap_or(0);
    let started = Instant::now();
    let mut report = ReconcileReport::default();
    loop {
        let pass = reconciler.run(opts).await?;
        report.absorb(&pass);
        let unknown = idem
            .intents(IntentList {
                states: vec![IntentState::Unknown],
                limit: 1,
                ..IntentList::default()
            })
            .await?;
        let successors = scratch::scalar(idem, SUCCESSORS_PENDING, &[]).await?;
        if unknown.is_empty()
            && pass.settling == 0
            && successors == 0
            && finished(idem, ids).await? == total
        {
            break;
        }
        if started.elapsed() > LIMIT {
            bail!("reconciliation did not settle within {} s", LIMIT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The audit looks at calls completed before the settle delay: wait it out once.
    tokio::time::sleep(opts.settle + Duration::from_millis(100)).await;
    let audit = reconciler.run(opts).await?;
    report.absorb(&audit);
    Ok(report)
}
