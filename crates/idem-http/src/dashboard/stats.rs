//! What the queues page counts, and what each refresh costs the database.
//!
//! - **Counts by state** (`queue/counts.sql`, a grouped count over the job table, and
//!   `queue/waiting.sql`, over the claim index's rows) are read at most once per
//!   [`counts_ttl`] (5 s, or ten times the last read's duration when that is longer) for
//!   every open browser together: a refresh within the interval reads the cached
//!   snapshot and costs no query. With nobody looking, nothing is read.
//! - **Throughput and latency** come from a sampler task, one per server: every
//!   [`SAMPLE_EVERY`] it reads the jobs finalized since its previous sample
//!   (`queue/finished.sql`, a range of the `finalized_at` index: its cost follows the
//!   jobs finished in 10 s, not the table's size) and keeps the last [`SAMPLES`].
//!   The sparklines are drawn from those samples as inline SVG, on the server.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use idem::{Idem, IdemError};
use idem_store::{QueueCount, QueueFinished, QueueFinishedList, QueueWaiting, Timestamp};
use maud::{Markup, html};

/// How often the sampler reads the jobs finished since its last sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Samples kept: ten minutes' worth.
pub const SAMPLES: usize = 60;

/// The shortest interval between two reads of the counts.
pub const COUNTS_MIN_TTL: Duration = Duration::from_secs(5);

/// Counts as read at one moment.
#[derive(Debug, Clone)]
pub struct Counts {
    /// Jobs per queue and state.
    pub counts: Vec<QueueCount>,
    /// Waiting jobs per queue and kind.
    pub waiting: Vec<QueueWaiting>,
    /// The database's time of the read.
    pub now: Timestamp,
    /// How long the read took.
    pub took: Duration,
    read_at: Instant,
}

/// One sample: per queue, the jobs finished in about `SAMPLE_EVERY`.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its length in milliseconds.
    pub span_ms: i64,
    /// Jobs finished per queue.
    pub queues: Vec<QueueFinished>,
}

/// The cached counts and the samples.
#[derive(Debug, Default)]
pub struct Stats {
    counts: tokio::sync::Mutex<Option<Counts>>,
    samples: Mutex<VecDeque<Sample>>,
}

/// How long a read of the counts stays fresh: [`COUNTS_MIN_TTL`], or ten times what the
/// last read took, so the counts never take more than a tenth of one connection.
pub fn counts_ttl(took: Duration) -> Duration {
    COUNTS_MIN_TTL.max(took * 10)
}

impl Stats {
    /// The stats, with the sampler running while they live (when inside a runtime).
    pub fn start(idem: Idem) -> Arc<Stats> {
        let stats = Arc::new(Stats::default());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sample_loop(idem, Arc::downgrade(&stats)));
        }
        stats
    }

    /// The counts, read again only when the cached ones are older than their interval.
    pub async fn counts(&self, idem: &Idem) -> Result<Counts, IdemError> {
        let mut cached = self.counts.lock().await;
        if let Some(c) = cached.as_ref()
            && c.read_at.elapsed() < counts_ttl(c.took)
        {
            return Ok(c.clone());
        }
        let started = Instant::now();
        let counts = idem.queue_counts().await?;
        let waiting = idem.queue_waiting().await?;
        let now = idem.now().await?;
        let fresh = Counts {
            counts,
            waiting,
            now,
            took: started.elapsed(),
            read_at: Instant::now(),
        };
        *cached = Some(fresh.clone());
        Ok(fresh)
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .expect("samples lock")
            .iter()
            .cloned()
            .collect()
    }

    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().expect("samples lock");
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }
}

/// Samples every [`SAMPLE_EVERY`] until the stats are dropped with their router.
async fn sample_loop(idem: Idem, stats: Weak<Stats>) {
    let mut since: Option<Timestamp> = None;
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    loop {
        ticks.tick().await;
        let Some(stats) = stats.upgrade() else { return };
        let Ok(until) = idem.now().await else {
            continue;
        };
        let span = chrono::Duration::from_std(SAMPLE_EVERY).expect("fits");
        let from = since.unwrap_or(until - span);
        let params = QueueFinishedList { since: from, until };
        if let Ok(queues) = idem.store().queue_finished(params).await {
            stats.push(Sample {
                span_ms: (until - from).num_milliseconds().max(1),
                queues,
            });
            since = Some(until);
        }
    }
}

/// One point of a queue's sparkline: jobs finished per second, and the mean run time
/// and wait (ms) of the sample.
pub fn points(samples: &[Sample], queue: &str) -> Vec<(f64, Option<f64>, Option<f64>)> {
    samples
        .iter()
        .map(|s| match s.queues.iter().find(|q| q.queue == queue) {
            Some(q) => {
                let rate = (q.completed + q.dead) as f64 * 1000.0 / s.span_ms as f64;
                let mean = |sum: i64| (q.timed > 0).then(|| sum as f64 / q.timed as f64);
                (rate, mean(q.run_ms), mean(q.wait_ms))
            }
            None => (0.0, None, None),
        })
        .collect()
}

/// A sparkline of `values` (a missing value draws at zero) as inline SVG, 120×24.
pub fn sparkline(values: &[f64], label: &str) -> Markup {
    let (w, h) = (120.0, 24.0);
    let max = values.iter().cloned().fold(0.0_f64, f64::max);
    let step = if values.len() > 1 {
        w / (values.len() - 1) as f64
    } else {
        0.0
    };
    let path: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let y = if max > 0.0 {
                h - 2.0 - v / max * (h - 4.0)
            } else {
                h - 2.0
            };
            format!("{:.1},{:.1}", i as f64 * step, y)
        })
        .collect();
    html! {
        svg.spark width="120" height="24" viewBox="0 0 120 24" role="img" aria-label=(label) {
            title { (label) }
            @if path.len() > 1 {
                polyline points=(path.join(" ")) fill="none" stroke="currentColor" stroke-width="1.5" {}
            } @else {
                line x1="0" y1="22" x2="120" y2="22" stroke="currentColor" stroke-dasharray="2 3" {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(queue: &str, completed: i64, timed: i64, run_ms: i64) -> QueueFinished {
        QueueFinished {
            queue: queue.into(),
            completed,
            dead: 1,
            timed,
            run_ms,
            wait_ms: 0,
        }
    }

    #[test]
    fn points_are_rates_and_means_per_sample() {
        let samples = vec![
            Sample {
                span_ms: 10_000,
                queues: vec![finished("mail", 19, 20, 4_000)],
            },
            Sample {
                span_ms: 5_000,
                queues: vec![finished("other", 4, 0, 0)],
            },
        ];
        let mail = points(&samples, "mail");
        assert_eq!(mail[0], (2.0, Some(200.0), Some(0.0)));
        assert_eq!(
            mail[1],
            (0.0, None, None),
            "a sample without the queue is zero"
        );
        assert_eq!(points(&samples, "other")[1], (1.0, None, None));
    }

    #[test]
    fn counts_stay_fresh_for_ten_times_their_read() {
        assert_eq!(counts_ttl(Duration::from_millis(3)), COUNTS_MIN_TTL);
        assert_eq!(counts_ttl(Duration::from_secs(2)), Duration::from_secs(20));
    }

    #[test]
    fn a_sparkline_spans_its_box() {
        let svg = sparkline(&[0.0, 5.0, 10.0], "rate").into_string();
        assert!(
            svg.contains("points=\"0.0,22.0 60.0,12.0 120.0,2.0\""),
            "{svg}"
        );
        let flat = sparkline(&[3.0], "rate").into_string();
        assert!(flat.contains("<line"), "one point draws a baseline: {flat}");
    }
}
