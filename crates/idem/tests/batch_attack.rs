//! Attacks on batches through the engine (review of the fan-in change), on both stores.
//!
//! - A handler fanning out with `EffectTx::batch`, its children keyed by its own request
//!   as that method's docs advise "if a retried execution must not create a second
//!   batch", run twice (its first claim commits the effect transaction without
//!   completing and then fails, as `chain.rs` runs a link twice).

mod common;

use common::*;
use idem::{
    Batch, BatchState, EffectClass, Handler, Idem, Job, JobContext, JobError, JobList, JobState,
};
use idem_store_tests::{TestDb, harness::within};
use serde_json::json;
use tokio::sync::mpsc;

const FAN: &str = "fan";
const FAN_OUT: &str = "fan-out";
const PARTS: &str = "parts";
const PART: &str = "part";
const MERGE: &str = "merge";

/// What one run of the fan-out handler did: its claim's attempt, and the batch it
/// created (its id, state and whether each child came back deduplicated) or the error
/// its creation got.
#[derive(Debug)]
struct FanRun {
    attempt: i32,
    created: Result<(i64, BatchState, Vec<bool>), String>,
}

/// Creates a batch of three parts (keyed by this job's id) and a merge successor in its
/// effect transaction; the first claim commits without completing and fails after.
struct FanOut {
    runs: mpsc::UnboundedSender<FanRun>,
}

impl Handler for FanOut {
    const KIND: &'static str = FAN_OUT;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let (parent, attempt) = (cx.job().id, cx.job().attempt);
        let mut tx = cx.begin().await?;
        let parts = (0..3).map(|n| {
            Job::new(PART, json!({"n": n}))
                .queue(PARTS)
                .enqueue_key(format!("fan-out:{parent}:part:{n}"))
        });
        let merge = Job::new(MERGE, json!({"parent": parent})).queue(PARTS);
        let added = tx.batch(Batch::new(merge).children(parts)).await;
        let run = FanRun {
            attempt,
            created: added.as_ref().map_err(|e| e.to_string()).map(|a| {
                let dedup = a.children.iter().map(|c| c.deduplicated).collect();
                (a.batch.id, a.batch.state, dedup)
            }),
        };
        if let Err(e) = added {
            let _ = self.runs.send(run);
            return Err(e.into());
        }
        if attempt == 1 {
            tx.commit().await?;
            let _ = self.runs.send(run);
            return Err(JobError::retry("a later step of the fan-out failed"));
        }
        tx.complete().await?;
        let _ = self.runs.send(run);
        Ok(())
    }
}

/// The jobs of `kind` in `idem`.
async fn jobs_of_kind(idem: &Idem, kind: &str) -> Vec<idem::JobRow> {
    let list = JobList {
        kind: Some(kind.to_owned()),
        limit: 1_000,
        ..JobList::default()
    };
    idem.jobs(list).await.expect("jobs")
}

/// FIXED (both stores; failed before the fix). Attack: the retried fan-out above. Found:
/// the keyed children did not stop the second batch: the retry's `tx.batch` inserted a
/// new batch row, its three children deduplicated into the first batch's (counted in no
/// shard of the new batch), so the new batch was sealed with no child, finished in that
/// transaction and enqueued its `merge` successor at once, while none of the parts had
/// run. Now: the retry's creation is refused (`Conflict`: a child's key is held by
/// another batch's child), its transaction writes nothing, and no merge exists before
/// the parts ran.
async fn a_retried_fan_out_with_keyed_children_runs_no_successor_early(db: &TestDb) {
    let idem = client(db, None);
    idem.enqueue(Job::new(FAN_OUT, json!({})).queue(FAN))
        .await
        .unwrap();
    let (runs_tx, mut runs) = events();
    let mut w = idem.worker(immediate_retries(FAN, 1)).unwrap();
    w.register(FanOut { runs: runs_tx }).unwrap();
    let w = w.start();
    let first = within(60, "the first run", runs.recv()).await.unwrap();
    let second = within(60, "the retried run", runs.recv()).await.unwrap();
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!((first.attempt, second.attempt), (1, 2));
    let (first_batch, _, dedup) = first.created.expect("the first creation");
    assert_eq!(dedup, [false, false, false]);
    let refused = second
        .created
        .expect_err("the repeated creation is refused");
    assert!(refused.contains("held by job"), "{refused}");
    let parts = jobs_of_kind(&idem, PART).await;
    assert_eq!(parts.len(), 3, "three parts: {parts:?}");
    assert!(
        parts.iter().all(|p| p.state == JobState::Available),
        "no part has run"
    );
    let merges = jobs_of_kind(&idem, MERGE).await;
    assert!(
        merges.is_empty(),
        "no merge before its parts finished: {merges:?}"
    );
    let batches = idem
        .batches(idem::BatchList {
            limit: 10,
            ..Default::default()
        })
        .await;
    let batches = batches.unwrap();
    assert_eq!(
        batches.len(),
        1,
        "the refused creation wrote no batch: {batches:?}"
    );
    assert_eq!(batches[0].id, first_batch);
}

idem_store_tests::store_cases!(a_retried_fan_out_with_keyed_children_runs_no_successor_early);
