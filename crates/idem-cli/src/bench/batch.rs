//! The batch scenario of `idem bench`: one batch of no-op children and its successor,
//! drained by a worker, beside the plain drain of as many no-op jobs in the same run (the
//! ratio is what the fan-in bookkeeping costs); and the same with children that complete
//! in their fenced transactions, beside the plain fenced path, where a child's count of
//! its batch holds the batch's row until its commit.

use std::time::Instant;

use idem::{Batch, Handler, Idem, Job};

use super::scenarios::{
    EFFECT_TABLE, FencedEffect, KIND, NoOp, engine_rate, figure, per_second, until_completed,
    worker_config,
};
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::Scratch;

/// Rounds of plain and batch drains, alternated; the figures are their medians (one
/// short drain varies by a third from run to run on a small machine).
const ROUNDS: usize = 3;

/// Plain drain, batch drain, plain fenced, batch fenced.
pub async fn run(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let n = args.batch_children;
    let mut tx = db.idem.begin().await?;
    tx.execute(EFFECT_TABLE, &[]).await?;
    tx.commit().await?;
    let rounds = if args.smoke { 1 } else { ROUNDS };
    let mut out = Vec::new();
    for (fenced, name) in [(false, "no-op"), (true, "fenced")] {
        let (mut plain, mut batched) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let queue = format!("batch-plain-{name}-{round}");
            plain.push(match fenced {
                false => engine_rate(db, args, &queue, NoOp, n).await?,
                true => engine_rate(db, args, &queue, FencedEffect, n).await?,
            });
            let queue = format!("batch-{name}-{round}");
            batched.push(match fenced {
                false => batch_rate(db, args, &queue, NoOp).await?,
                true => batch_rate(db, args, &queue, FencedEffect).await?,
            });
        }
        let mut f = figure(
            Scenario::Batch,
            &format!("batch drain rate ({name} children)"),
            median(&mut batched),
            "jobs/s",
        );
        f.ceiling = Some(median(&mut plain));
        f.note = format!(
            "one batch of {n} {name} children and its successor, beside (as the ceiling) \
             {n} {name} jobs without a batch; medians of {rounds} alternated rounds; \
             concurrency {}",
            args.concurrency
        );
        out.push(f);
    }
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Creates a sealed batch of `batch_children` children in `queue` (successor of the same
/// kind and queue) and drains it with a worker running `handler`; children and successor
/// per second, from the worker's start to the successor's completion.
async fn batch_rate<H: Handler>(
    db: &Scratch,
    args: &BenchArgs,
    queue: &str,
    handler: H,
) -> anyhow::Result<f64> {
    let n = args.batch_children;
    let store = idem::connect_store(&db.url).await?;
    let idem = Idem::from_store(store.clone());
    let job = |i: usize| Job::new(KIND, serde_json::json!({ "i": i })).queue(queue);
    let batch = Batch::new(job(n)).children((0..n).map(job));
    let created = idem.batch(batch).await?;
    let mut w = idem.worker(worker_config(queue, args.concurrency, args.claim_batch))?;
    w.register(handler)?;
    let started = Instant::now();
    let h = w.start();
    let done = until_completed(&h, n + 1).await;
    h.shutdown().await;
    let row = idem.batch_get(created.batch.id).await?;
    store.close().await;
    let done = done?;
    match row {
        Some(b) if b.successor_job_id.is_some() && b.completed as usize == n => {
            Ok(per_second(n + 1, done - started))
        }
        other => anyhow::bail!("the batch did not finish as counted: {other:?}"),
    }
}
