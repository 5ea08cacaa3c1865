//! Local dispatch on both stores: an idle worker in the producer's process takes a job due
//! now in the enqueue's own transaction (inserted running, fence 1, leased to it); a
//! queue without a free slot, a job enqueued in a caller's transaction and a worker with
//! local dispatch off leave the job to a claim; a deduplicated enqueue starts nothing and
//! gives its slot back.

mod common;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState};
use idem_store_tests::{TestDb, harness::within};
use tokio::sync::{Mutex, mpsc, oneshot};

/// Reports each run's (job id, fence) and then waits for its gate, if the test gave one.
struct Reporting {
    ran: mpsc::UnboundedSender<(i64, i64)>,
    gates: Mutex<Vec<oneshot::Receiver<()>>>,
}

impl Handler for Reporting {
    const KIND: &'static str = "local";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.ran.send((cx.job().id, cx.job().fence));
        let gate = self.gates.lock().await.pop();
        if let Some(gate) = gate {
            let _ = gate.await;
        }
        Ok(())
    }
}

fn job() -> Job {
    Job::new("local", serde_json::json!({})).queue("q")
}

/// A started worker on queue `q` with `concurrency` slots, ready (its first claim found
/// the queue empty); the receiver of its runs, and senders opening `gates` runs' gates
/// (the first run waits for the last sender).
async fn started(
    idem: &Idem,
    concurrency: usize,
    gates: usize,
    local_dispatch: bool,
) -> (
    idem::WorkerHandle,
    mpsc::UnboundedReceiver<(i64, i64)>,
    Vec<oneshot::Sender<()>>,
) {
    let (ran, runs) = events();
    let (open, gates): (Vec<_>, Vec<_>) = (0..gates).map(|_| oneshot::channel()).unzip();
    let mut cfg = config("q", concurrency);
    cfg.local_dispatch = local_dispatch;
    // No polls: a poll's claim briefly marks the queue not idle, which would make whether
    // a job is dispatched depend on timing. Claims here follow wake-ups and free slots.
    cfg.poll_interval = std::time::Duration::from_secs(3600);
    let mut w = idem.worker(cfg).unwrap();
    w.register(Reporting {
        ran,
        gates: Mutex::new(gates),
    })
    .unwrap();
    let w = w.start();
    within(30, "worker ready", w.ready()).await;
    (w, runs, open)
}

/// An idle worker takes the job in the enqueue's transaction: the enqueue returns it
/// running under fence 1, leased to the worker, which runs and completes it; the
/// history has that one attempt.
async fn an_idle_worker_takes_a_local_enqueue_in_its_transaction(db: &TestDb) {
    let idem = client(db, None);
    let (w, mut runs, _) = started(&idem, 2, 0, true).await;
    let row = idem.enqueue(job()).await.unwrap();
    assert!(!row.deduplicated);
    assert_eq!(
        (row.state, row.attempt, row.fence),
        (JobState::Running, 1, 1)
    );
    assert_eq!(row.lease_owner.as_deref(), Some(w.name()));
    assert!(row.lease_expires_at > Some(row.created_at));
    assert_eq!(within(30, "run", runs.recv()).await, Some((row.id, 1)));
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.dispatched_locally, report.completed), (1, 1));
    let stored = common::job(&idem, row.id).await;
    assert_eq!((stored.state, stored.fence), (JobState::Completed, 1));
    let history = idem.attempts(row.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!((history[0].attempt, history[0].fence), (1, 1));
}

/// With its only slot busy the worker takes nothing locally: the next job waits,
/// available, and is claimed when the slot frees.
async fn a_busy_worker_leaves_the_job_to_a_claim(db: &TestDb) {
    let idem = client(db, None);
    let (w, mut runs, mut open) = started(&idem, 1, 1, true).await;
    let first = idem.enqueue(job()).await.unwrap();
    assert_eq!(first.state, JobState::Running);
    assert_eq!(
        within(30, "first run", runs.recv()).await,
        Some((first.id, 1))
    );
    let second = idem.enqueue(job()).await.unwrap();
    assert_eq!((second.state, second.fence), (JobState::Available, 0));
    open.pop().unwrap().send(()).unwrap();
    assert_eq!(
        within(30, "second run", runs.recv()).await,
        Some((second.id, 1))
    );
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.dispatched_locally, report.claimed), (1, 2));
}

/// A job enqueued in the caller's transaction, and any job for a worker with local
/// dispatch off, waits for a claim.
async fn caller_transactions_and_opting_out_are_not_dispatched(db: &TestDb) {
    let idem = client(db, None);
    let (w, mut runs, _) = started(&idem, 1, 0, true).await;
    let mut tx = idem.begin().await.unwrap();
    let in_tx = idem.enqueue_tx(&mut tx, job()).await.unwrap();
    assert_eq!(in_tx.state, JobState::Available);
    tx.commit().await.unwrap();
    assert_eq!(
        within(30, "claimed run", runs.recv()).await,
        Some((in_tx.id, 1))
    );
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.dispatched_locally, report.claimed), (0, 1));

    let other = client(db, None);
    let (w, mut runs, _) = started(&other, 1, 0, false).await;
    let row = other.enqueue(job()).await.unwrap();
    assert_eq!(row.state, JobState::Available);
    assert_eq!(
        within(30, "claimed run", runs.recv()).await,
        Some((row.id, 1))
    );
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.dispatched_locally, report.claimed), (0, 1));
}

/// A deduplicated enqueue starts nothing and gives back the slot it reserved: with two
/// slots, one held by the keyed job, a repeat of its key reserves the other and returns
/// it, so the next job still finds a free slot.
async fn a_deduplicated_enqueue_gives_its_slot_back(db: &TestDb) {
    let idem = client(db, None);
    let (w, mut runs, mut open) = started(&idem, 2, 2, true).await;
    let keyed = || job().enqueue_key("order:1");
    let first = idem.enqueue(keyed()).await.unwrap();
    assert_eq!(first.state, JobState::Running);
    assert_eq!(
        within(30, "keyed run", runs.recv()).await,
        Some((first.id, 1))
    );
    let again = idem.enqueue(keyed()).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.id, first.id);
    let next = idem.enqueue(job()).await.unwrap();
    assert_eq!(
        next.state,
        JobState::Running,
        "the repeat gave its slot back"
    );
    assert_eq!(
        within(30, "next run", runs.recv()).await,
        Some((next.id, 1))
    );
    for gate in open.drain(..) {
        gate.send(()).unwrap();
    }
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.dispatched_locally, report.completed), (2, 2));
}

idem_store_tests::store_cases!(
    an_idle_worker_takes_a_local_enqueue_in_its_transaction,
    a_busy_worker_leaves_the_job_to_a_claim,
    caller_transactions_and_opting_out_are_not_dispatched,
    a_deduplicated_enqueue_gives_its_slot_back,
);
