//! One worker holding two claims of the same job at once: the first claim was lost
//! (cancelled and retried by an operator, or rescued after its lease expired while the
//! handler stalled) and the same worker claimed the job again while the first handler
//! was still running. The stale run ends first; the live claim must keep its lease: the
//! worker's heartbeat goes on renewing it.
//!
//! Replayed with signals: the first handler parks; an operator cancels and retries the
//! job; the worker (two slots) claims it again and the second handler parks; the first is
//! released and its completion is refused as a lost lease (the worker's report counts
//! it). Then the injected clock moves on, and the live claim's lease must be renewed
//! from the new time by the next heartbeat.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Job, JobContext, JobError, JobState, LeaseToken};
use idem_store_tests::{TestDb, harness::within};

/// Parks until released, once per claim; reports each claim as it starts.
struct Parked {
    started: tokio::sync::mpsc::UnboundedSender<LeaseToken>,
    first: Gate,
    second: Gate,
}

impl Handler for Parked {
    const KIND: &'static str = "parked";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let lease = cx.lease();
        let _ = self.started.send(lease);
        if lease.fence == 1 {
            self.first.wait().await;
        } else {
            self.second.wait().await;
        }
        Ok(())
    }
}

async fn the_live_claim_keeps_its_lease_when_a_stale_run_of_its_job_ends(db: &TestDb) {
    let clock = Arc::new(db_clock(db).await);
    let idem = client(db, Some(clock.clone()));
    let (started, mut starts) = events();
    let (first, release_first) = Gate::new();
    let (second, release_second) = Gate::new();
    let lease = Duration::from_millis(600);
    let mut cfg = config("overlap", 2).lease(lease);
    cfg.purge_interval = None;
    let mut w = idem.worker(cfg).unwrap();
    w.register(Parked {
        started,
        first,
        second,
    })
    .unwrap();
    let w = w.start();
    let id = idem
        .enqueue(Job::new("parked", serde_json::json!({})).queue("overlap"))
        .await
        .unwrap()
        .id;
    let stale = within(30, "the first claim starts", starts.recv())
        .await
        .unwrap();
    assert_eq!((stale.job_id, stale.fence), (id, 1));

    idem.cancel(id).await.expect("cancel");
    let retried = idem.retry_jobs(vec![id]).await.expect("retry");
    assert_eq!(retried.len(), 1);
    let live = within(30, "the same worker claims the job again", starts.recv())
        .await
        .unwrap();
    assert_eq!((live.job_id, live.fence), (id, 2));

    release_first.send(()).unwrap();
    within(30, "the stale run is refused", async {
        while w.report().lease_lost < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    clock.advance(Duration::from_secs(60));
    let renewed_from = clock.get();
    let lease_ms = i64::try_from(lease.as_millis()).unwrap();
    let wanted = renewed_from + chrono::Duration::milliseconds(lease_ms);
    let renewed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let row = job(&idem, id).await;
            assert_eq!((row.state, row.fence), (JobState::Running, 2));
            if row.lease_expires_at >= Some(wanted) {
                return row;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let stuck = job(&idem, id).await;
    release_second.send(()).unwrap();
    let report = within(30, "shutdown", w.shutdown()).await;
    assert!(
        renewed.is_ok(),
        "the heartbeat (every {:?}) stopped renewing the live claim (fence 2) once the \
         stale run (fence 1) of the same job ended: its lease still ends at {:?}, before \
         {wanted}; the rescuer would take the job from under its running handler \
         (report: {report:?})",
        lease / 3,
        stuck.lease_expires_at,
    );
}

idem_store_tests::store_cases!(the_live_claim_keeps_its_lease_when_a_stale_run_of_its_job_ends);
