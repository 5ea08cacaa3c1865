//! The cached gauges: jobs per queue and state (`idem_jobs`) and intents per state
//! (`idem_intents`), read from the store every interval by a task in the background, so a
//! Prometheus scrape reads memory and never counts the job table (DESIGN.md section 10).
//!
//! What must stay true: a label set seen by one refresh and gone by the next is set to 0,
//! so a gauge never freezes at a count that no longer holds; a failed read keeps the last
//! values and is logged; one refresher per process is enough (the gauges are global).

use std::collections::HashSet;
use std::time::Duration;

use ::metrics::gauge;
use idem_store::{IntentState, JobState};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::metrics::{INTENTS, JOBS};
use crate::client::Idem;
use crate::error::IdemError;

/// How often `idem serve` and `idem worker --metrics-listen` refresh the gauges.
pub const DEFAULT_GAUGE_INTERVAL: Duration = Duration::from_secs(15);

/// The running refresher; stops when [`GaugeRefresh::stop`] is called or it is dropped.
pub struct GaugeRefresh {
    stop: watch::Sender<bool>,
    refreshes: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl GaugeRefresh {
    /// Refreshes the gauges from `idem`'s store at once and then every `interval`.
    pub fn start(idem: &Idem, interval: Duration) -> GaugeRefresh {
        let (stop, stopped) = watch::channel(false);
        let (done, refreshes) = watch::channel(0);
        let task = tokio::spawn(run(idem.clone(), interval, stopped, done));
        GaugeRefresh {
            stop,
            refreshes,
            task,
        }
    }

    /// How many refreshes have finished (successful or not); changes after each, so a
    /// caller can wait for one that started after something it did.
    pub fn refreshes(&self) -> watch::Receiver<u64> {
        self.refreshes.clone()
    }

    /// Stops the refresher and waits for its task.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn run(
    idem: Idem,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
    done: watch::Sender<u64>,
) {
    let mut seen = Seen::default();
    while !*stop.borrow() {
        if let Err(e) = seen.refresh(&idem).await {
            tracing::warn!(error = %e, "could not refresh the job and intent gauges");
        }
        done.send_modify(|n| *n += 1);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {},
            _ = stop.changed() => {},
        }
    }
}

/// The label sets the last refresh set, to zero those that are gone.
#[derive(Default)]
struct Seen {
    jobs: HashSet<(String, JobState)>,
    intents: HashSet<IntentState>,
}

impl Seen {
    async fn refresh(&mut self, idem: &Idem) -> Result<(), IdemError> {
        let jobs = idem.store.queue_counts().await?;
        let intents = idem.store.intent_counts().await?;
        let mut now_jobs = HashSet::new();
        for c in jobs {
            job_gauge(&c.queue, c.state, c.count);
            now_jobs.insert((c.queue, c.state));
        }
        for (queue, state) in self.jobs.difference(&now_jobs) {
            job_gauge(queue, *state, 0);
        }
        let mut now_intents = HashSet::new();
        for c in intents {
            gauge!(INTENTS, "state" => c.state.as_str()).set(c.count as f64);
            now_intents.insert(c.state);
        }
        for state in self.intents.difference(&now_intents) {
            gauge!(INTENTS, "state" => state.as_str()).set(0.0);
        }
        (self.jobs, self.intents) = (now_jobs, now_intents);
        Ok(())
    }
}

fn job_gauge(queue: &str, state: JobState, count: i64) {
    gauge!(JOBS, "queue" => queue.to_owned(), "state" => state.as_str()).set(count as f64);
}
