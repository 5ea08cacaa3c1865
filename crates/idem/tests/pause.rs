//! Pausing a queue: while paused, no worker claims from it (by a claim, or by taking a
//! job local to its process as it is enqueued); enqueues are kept; resuming drains them.

mod common;

use common::*;
use idem::{EffectClass, Handler, Job, JobContext, JobError, JobState};
use idem_store_tests::TestDb;
use idem_store_tests::harness::within;
use tokio::sync::mpsc;

struct Record(mpsc::UnboundedSender<i64>);

impl Handler for Record {
    const KIND: &'static str = "record";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.0.send(cx.job().id);
        Ok(())
    }
}

/// A worker idle on a paused queue claims nothing, neither by claiming nor as a local
/// enqueue's dispatch; a second worker's first claim (awaited) finds nothing either;
/// resuming wakes them and every job runs once.
async fn a_paused_queue_is_not_claimed_until_resumed(db: &TestDb) {
    let idem = client(db, None);
    let (tx, mut started) = events();
    let mut first = idem.worker(config("held", 4)).unwrap();
    first.register(Record(tx.clone())).unwrap();
    let first = first.start();
    within(30, "the first worker claims once", first.ready()).await;

    assert!(idem.pause_queue("held", Some("test")).await.unwrap());
    let paused = idem.paused_queues().await.unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].paused_by.as_deref(), Some("test"));
    let mut ids = Vec::new();
    for n in 0..5 {
        // The first worker is idle with free slots: without the pause, these would be
        // inserted claimed by it.
        let job = idem
            .enqueue(Job::new("record", serde_json::json!({ "n": n })).queue("held"))
            .await
            .unwrap();
        assert_eq!(job.state, JobState::Available, "{job:?}");
        ids.push(job.id);
    }
    // A second worker's first claim of the queue runs after the jobs were enqueued.
    let mut second = idem.worker(config("held", 4)).unwrap();
    second.register(Record(tx)).unwrap();
    let second = second.start();
    within(30, "the second worker claims once", second.ready()).await;
    for id in &ids {
        assert_eq!(job(&idem, *id).await.state, JobState::Available, "job {id}");
    }
    assert!(started.try_recv().is_err(), "nothing ran while paused");

    assert!(idem.resume_queue("held").await.unwrap());
    let mut ran = Vec::new();
    for _ in &ids {
        ran.push(
            within(30, "a job runs after the resume", started.recv())
                .await
                .unwrap(),
        );
    }
    ran.sort_unstable();
    assert_eq!(ran, ids);
    within(30, "shutdown", first.shutdown()).await;
    within(30, "shutdown", second.shutdown()).await;
    for id in &ids {
        let row = job(&idem, *id).await;
        assert_eq!(
            (row.state, row.attempt),
            (JobState::Completed, 1),
            "{row:?}"
        );
    }
    assert!(started.try_recv().is_err(), "each job ran once");
}

/// A queue name is checked as an enqueue checks it.
async fn a_bad_queue_name_is_refused(db: &TestDb) {
    let idem = client(db, None);
    let err = idem.pause_queue("", None).await.unwrap_err().to_string();
    assert!(err.contains("queue"), "{err}");
    let err = idem.resume_queue("a b").await.unwrap_err().to_string();
    assert!(err.contains("queue"), "{err}");
}

idem_store_tests::store_cases!(
    a_paused_queue_is_not_claimed_until_resumed,
    a_bad_queue_name_is_refused,
);
