//! `latency-remote`: enqueue-to-start latency with the producer in another process, as a
//! web application and its worker on one database see it. The worker runs here, with
//! the default poll interval, and hears of new jobs only through the store's channel
//! between processes (PostgreSQL's LISTEN/NOTIFY, SQLite's wake-up sockets); the
//! producer is this same executable (`idem bench-producer`, hidden), enqueueing one job
//! per call at the offered rate. Each job carries the wall-clock time of its enqueue
//! call (the processes share no `Instant`) and its number in enqueue order, and the
//! handler records how long after it it started.
//!
//! Both latency scenarios report the jobs of the first [`WARM_UP`] apart: those find the
//! pools without connections and the worker still starting, a cost a process pays once
//! (docs/performance.md, "PostgreSQL latency outliers (2026-12-03)"). The percentiles
//! are of the jobs after it; the warm-up's maximum is a figure of its own.

use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
use tokio::sync::Notify;

use super::scenarios::{KIND, figure};
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::Scratch;

const QUEUE: &str = "latency-remote";
/// Jobs the worker runs at once: far more than arrive within one job's run.
const CONCURRENCY: usize = 50;
/// How long the jobs may take to start after the producer is done; only a hang reaches it.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);
/// The start of a latency run whose jobs are reported apart from the percentiles.
const WARM_UP: Duration = Duration::from_millis(250);

/// Arguments of `idem bench-producer`, the producer process of `latency-remote`.
#[derive(Args)]
pub struct ProducerArgs {
    /// Queue to enqueue into
    #[arg(long)]
    queue: String,
    /// Jobs per second
    #[arg(long)]
    rate: u32,
    /// Seconds to go on
    #[arg(long)]
    seconds: u64,
}

/// `idem bench-producer`: enqueues `rate` jobs a second for `seconds` into the existing
/// database, each stamped with the wall-clock time of its enqueue call.
pub async fn produce(url: &str, a: ProducerArgs) -> anyhow::Result<ExitCode> {
    let idem = crate::database::open(url).await?;
    enqueue_paced(&idem, &a.queue, a.rate, a.seconds).await?;
    idem.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Enqueues `rate` stamped jobs a second into `queue` for `seconds`, one per call, on
/// a fixed schedule (a late call does not push the later ones back).
pub(super) async fn enqueue_paced(
    idem: &Idem,
    queue: &str,
    rate: u32,
    seconds: u64,
) -> anyhow::Result<()> {
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let base = Instant::now();
    for i in 0..u64::from(rate) * seconds {
        tokio::time::sleep_until((base + period.mul_f64(i as f64)).into()).await;
        let args = serde_json::json!({ "sent_ns": wall_ns(), "n": i });
        let job = Job::new(KIND, args).queue(queue);
        idem.enqueue(job).await?;
    }
    Ok(())
}

/// Nanoseconds since the Unix epoch on the system clock, which both processes read.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[derive(serde::Deserialize)]
pub(super) struct Sent {
    sent_ns: u64,
    /// The job's number in enqueue order, from 0.
    n: u64,
}

/// One job's start: its number in enqueue order, and how long after its enqueue call it
/// started (microseconds).
#[derive(Clone, Copy)]
pub(super) struct Start {
    n: u64,
    waited_us: u64,
}

/// Records how long after its enqueue call each job started.
pub(super) struct Timed {
    samples: Arc<Mutex<Vec<Start>>>,
    total: usize,
    all: Arc<Notify>,
}

/// What a [`Timed`] handler recorded, once all its jobs started.
pub(super) struct Recorded {
    samples: Arc<Mutex<Vec<Start>>>,
    all: Arc<Notify>,
}

impl Timed {
    /// A handler expecting `total` jobs, and where to read what it records.
    pub(super) fn new(total: usize) -> (Timed, Recorded) {
        let (samples, all) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Notify::new()));
        let recorded = Recorded {
            samples: samples.clone(),
            all: all.clone(),
        };
        let timed = Timed {
            samples,
            total,
            all,
        };
        (timed, recorded)
    }
}

impl Recorded {
    /// Every job's start once all started; an error after `limit`.
    pub(super) async fn all_started(&self, limit: Duration) -> anyhow::Result<Vec<Start>> {
        tokio::time::timeout(limit, self.all.notified())
            .await
            .context("the latency jobs did not all start")?;
        Ok(self.samples.lock().expect("samples lock").clone())
    }
}

impl Handler for Timed {
    const KIND: &'static str = KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Sent;

    async fn run(&self, _: &mut JobContext, args: Sent) -> Result<(), JobError> {
        let waited_us = wall_ns().saturating_sub(args.sent_ns) / 1_000;
        let mut s = self.samples.lock().expect("samples lock");
        s.push(Start {
            n: args.n,
            waited_us,
        });
        if s.len() == self.total {
            self.all.notify_one();
        }
        Ok(())
    }
}

/// Runs the worker here and the producer in a process of its own; the latency figures.
pub(super) async fn run(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let total = (u64::from(args.rate) * args.seconds) as usize;
    let (timed, recorded) = Timed::new(total);
    let config = WorkerConfig::default().only_queue(QUEUE, CONCURRENCY);
    let poll = config.poll_interval;
    let mut w = db.idem.worker(config)?;
    w.register(timed)?;
    let h = w.start();
    h.ready().await;
    let produced = producer(&db.url, args)?.wait_with_output();
    let limit = Duration::from_secs(args.seconds) + DRAIN_LIMIT;
    let (produced, samples) = tokio::join!(produced, recorded.all_started(limit));
    h.shutdown().await;
    let produced = produced.context("the producer process")?;
    if !produced.status.success() {
        let stderr = String::from_utf8_lossy(&produced.stderr);
        bail!(
            "the producer process failed ({}): {stderr}",
            produced.status
        );
    }
    let note = format!(
        "{total} jobs at {} jobs/s enqueued by another process; from its enqueue call to the \
         handler's start; the worker polls every {poll:?}",
        args.rate
    );
    Ok(percentiles(
        Scenario::LatencyRemote,
        samples?,
        args.rate,
        &note,
    ))
}

/// `idem bench-producer` on `url` with the scenario's rate and length.
fn producer(url: &str, args: &BenchArgs) -> anyhow::Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("cannot find the idem executable")?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--database-url")
        .arg(url)
        .arg("bench-producer")
        .args(["--queue", QUEUE])
        .args(["--rate", &args.rate.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::chaos::orphan::die_with_parent(&mut cmd);
    cmd.spawn().context("cannot start the producer process")
}

/// p50, p95, p99 and max, in milliseconds, of the jobs after the warm-up (the jobs
/// enqueued in the first [`WARM_UP`] at `rate` jobs/s, at most all but one), and the
/// warm-up's own maximum.
pub(super) fn percentiles(
    scenario: Scenario,
    mut starts: Vec<Start>,
    rate: u32,
    note: &str,
) -> Vec<Figure> {
    starts.sort_unstable_by_key(|s| s.n);
    let warm = warm_up_jobs(rate, starts.len());
    let ms = |us: u64| us as f64 / 1_000.0;
    let warm_max = starts[..warm].iter().map(|s| s.waited_us).max();
    let mut s: Vec<u64> = starts[warm..].iter().map(|s| s.waited_us).collect();
    s.sort_unstable();
    let pick = |q: f64| ms(s[((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1]);
    let note = format!(
        "{note}; percentiles of the jobs after the first {warm} (the first {:?}: new \
         connections, the worker starting), whose max is the warm-up figure",
        WARM_UP
    );
    let steady = [("p50", 0.50), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]
        .into_iter()
        .map(|(name, q)| (format!("enqueue-to-start {name}"), pick(q)));
    let warm_up = warm_max.map(|m| ("enqueue-to-start max, warm-up".to_owned(), ms(m)));
    steady
        .chain(warm_up)
        .map(|(metric, value)| {
            let mut f = figure(scenario, &metric, value, "ms");
            f.note = note.clone();
            f
        })
        .collect()
}

/// How many of `total` jobs offered at `rate` jobs/s fall in the [`WARM_UP`]: at least
/// one when there are two jobs or more, and never the last.
fn warm_up_jobs(rate: u32, total: usize) -> usize {
    let warm = (f64::from(rate) * WARM_UP.as_secs_f64()).ceil() as usize;
    warm.max(1).min(total.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(n: u64, waited_us: u64) -> Start {
        Start { n, waited_us }
    }

    #[test]
    fn the_warm_up_is_reported_apart_from_the_percentiles() {
        // 8 jobs/s: the first 2 jobs are the warm-up; they started last.
        let mut starts: Vec<Start> = (2..10).map(|n| start(n, 1_000 + n)).collect();
        starts.extend([start(1, 90_000), start(0, 95_000)]);
        let figures = percentiles(Scenario::Latency, starts, 8, "note");
        let value = |m: &str| figures.iter().find(|f| f.metric == m).unwrap().value;
        assert_eq!(value("enqueue-to-start max"), 1.009);
        assert_eq!(value("enqueue-to-start p50"), 1.005);
        assert_eq!(value("enqueue-to-start max, warm-up"), 95.0);
        assert!(
            figures[0].note.contains("after the first 2"),
            "{}",
            figures[0].note
        );
    }

    #[test]
    fn a_short_run_keeps_a_job_after_the_warm_up() {
        assert_eq!(warm_up_jobs(200, 1_000), 50);
        assert_eq!(warm_up_jobs(50, 50), 13);
        assert_eq!(warm_up_jobs(1, 1), 0);
        assert_eq!(warm_up_jobs(1_000, 2), 1);
    }
}
