//! Retry ladders and the dead-letter state, end to end.
//!
//! Two kinds of job fail: `charge` fails every time and walks its ladder (two short rungs,
//! so the example takes seconds) into `dead`; `refund` fails with a permanent error and is
//! dead at once. A third, `report`, snoozes once and then completes without spending an
//! attempt. Afterwards the dead jobs stay in the database for the operator commands:
//!
//! ```sh
//! cargo run -p idem --example dead_letter -- sqlite://dead.db
//! cargo run -p idem-cli -- --database-url sqlite://dead.db dead list
//! cargo run -p idem-cli -- --database-url sqlite://dead.db dead show <id>
//! cargo run -p idem-cli -- --database-url sqlite://dead.db dead retry --all --kind charge
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idem::retry::RetryLadder;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState, WorkerConfig};

struct Charge;

impl Handler for Charge {
    const KIND: &'static str = "charge";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        Err(JobError::retry(format!(
            "payment provider unavailable (attempt {})",
            cx.job().attempt
        )))
    }
}

struct Refund;

impl Handler for Refund {
    const KIND: &'static str = "refund";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        Err(JobError::permanent("refund of an unknown payment"))
    }
}

struct Report {
    snoozed: AtomicBool,
}

impl Handler for Report {
    const KIND: &'static str = "report";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        if !self.snoozed.swap(true, Ordering::SeqCst) {
            return Err(JobError::snooze(Duration::from_millis(500)));
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let default_url = format!("sqlite://{}", dir.path().join("dead.db").display());
    let url = std::env::args().nth(1).unwrap_or(default_url);
    let idem = Idem::connect(&url).await?;

    let mut config = WorkerConfig {
        poll_interval: Duration::from_millis(50),
        ..WorkerConfig::default()
    };
    config.kind_ladders.insert(
        "charge".into(),
        RetryLadder::new(vec![Duration::from_millis(500), Duration::from_secs(1)]).jitter(0.0),
    );
    let mut worker = idem.worker(config)?;
    worker.register(Charge)?;
    worker.register(Refund)?;
    worker.register(Report {
        snoozed: AtomicBool::new(false),
    })?;
    let charge = idem
        .enqueue(Job::new("charge", serde_json::json!({"order": 1})).max_attempts(3))
        .await?;
    let refund = idem
        .enqueue(Job::new("refund", serde_json::json!({"order": 2})))
        .await?;
    let report = idem
        .enqueue(Job::new("report", serde_json::json!({})).max_attempts(1))
        .await?;
    let running = worker.start();

    for id in [charge.id, refund.id, report.id] {
        let job = loop {
            let job = idem.job(id).await?.ok_or("job vanished")?;
            if job.state.is_finished() {
                break job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        println!(
            "job {} ({}) is {} after {} attempt(s); last error: {}",
            job.id,
            job.kind,
            job.state,
            job.attempt,
            job.last_error.as_deref().unwrap_or("none")
        );
        for a in idem.attempts(id).await? {
            let error = a.error.as_deref().unwrap_or("");
            println!(
                "    attempt {} (fence {}): {:?} {error}",
                a.attempt, a.fence, a.outcome
            );
        }
    }
    running.shutdown().await;
    let dead = idem.dead_ids(&Default::default()).await?;
    assert!(dead.contains(&charge.id) && dead.contains(&refund.id));
    assert_eq!(
        idem.job(report.id).await?.map(|j| j.state),
        Some(JobState::Completed)
    );
    println!("dead jobs: {dead:?}; inspect them with `idem dead list` on {url}");
    Ok(())
}
