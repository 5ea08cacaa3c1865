//! The settle phase: once every job has finished, the remote calls whose outcome is
//! unknown are reconciled while the workers still run, so the jobs put back to run
//! complete; then, after the settle delay, the audit looks every completed unkeyed call
//! up again and marks a late second copy `duplicate`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use idem::intent::{ReconcileOptions, ReconcileReport};
use idem::{Idem, IntentList, IntentState, WorkerConfig};

use crate::scratch;

/// The longest the phase waits for reconciliation and the jobs it puts back.
const LIMIT: Duration = Duration::from_secs(120);

/// Jobs of the run not finished.
const UNFINISHED: &str =
    "SELECT count(*) FROM idem_job WHERE state NOT IN ('completed', 'dead', 'cancelled')";

/// How often unknown outcomes are reconciled while the run goes on.
const EVERY: Duration = Duration::from_secs(2);

/// Reconciles every [`EVERY`] until `stop` is set, as an operator's `idem worker
/// --reconcile-every` would while the workers run; a pass that fails (the server is
/// restarting) is simply run again next time. Returns the passes' counts summed.
pub(super) async fn during(
    idem: Idem,
    lease_ms: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<ReconcileReport> {
    let mut w = idem.worker(WorkerConfig::default())?;
    w.register(super::remote_kind(lease_ms)?)?;
    let reconciler = w.reconciler();
    let opts = ReconcileOptions {
        settle: Duration::from_millis(lease_ms),
        ..ReconcileOptions::default()
    };
    let mut report = ReconcileReport::default();
    while !stop.load(Ordering::SeqCst) {
        if let Ok(pass) = reconciler.run(opts).await {
            report.absorb(&pass);
        }
        tokio::time::sleep(EVERY).await;
    }
    Ok(report)
}

/// Reconciles until no intent is unknown and every job of the run (those the
/// reconciliation put back among them) has finished, then audits once the settle delay,
/// and `late` (how long the sink holds a late call before it applies it), have passed:
/// a late copy of a call sent just before the jobs finished lands before the audit looks,
/// not after it; returns the passes' counts summed.
pub(super) async fn settle(
    idem: &Idem,
    lease_ms: u64,
    late: Duration,
) -> anyhow::Result<ReconcileReport> {
    let mut w = idem.worker(WorkerConfig::default())?;
    w.register(super::remote_kind(lease_ms)?)?;
    let reconciler = w.reconciler();
    let opts = ReconcileOptions {
        settle: Duration::from_millis(lease_ms),
        ..ReconcileOptions::default()
    };
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
        let unfinished = scratch::scalar(idem, UNFINISHED, &[]).await?;
        if unknown.is_empty() && pass.settling == 0 && unfinished == 0 {
            break;
        }
        if started.elapsed() > LIMIT {
            bail!("reconciliation did not settle within {} s", LIMIT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The audit looks at calls completed before the settle delay, and finds a late copy
    // only once the sink has applied it: wait both out once. No job runs any more, so
    // no call is sent after this point.
    tokio::time::sleep(opts.settle.max(late) + Duration::from_millis(100)).await;
    let audit = reconciler.run(opts).await?;
    report.absorb(&audit);
    Ok(report)
}
