//! The hidden `idem chaos-worker` command: one worker process of a chaos run or demo.
//!
//! It runs the workload's handlers and the built-in `http` kind on the run's queue, with
//! the kill points listening for their arming signals, until SIGTERM or SIGINT; then it
//! shuts down gracefully. It keeps its report in a file, rewritten every half second and
//! at the end, so that the parent reads what a killed worker counted before it died.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idem::retry::RetryLadder;
use idem::{Idem, WorkerConfig};

use super::workload::{self, kill};
use super::{QUEUE, remote_kind};

/// Arguments of the hidden `idem chaos-worker`.
#[derive(Args)]
pub struct ChaosWorkerArgs {
    #[arg(long)]
    name: String,
    #[arg(long)]
    concurrency: usize,
    #[arg(long)]
    lease_ms: u64,
    #[arg(long)]
    work_ms: u64,
    #[arg(long)]
    report_file: PathBuf,
}

/// Writes `report` to `path` whole (a reader never sees half of it).
fn keep(path: &Path, report: &idem::WorkerReport) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(report)?)?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// The hidden worker process.
pub async fn run(args: ChaosWorkerArgs, url: String) -> anyhow::Result<ExitCode> {
    kill::listen()?;
    let idem = Idem::from_store(idem::connect_store(&url).await?);
    let lease = Duration::from_millis(args.lease_ms);
    let mut config = WorkerConfig::default()
        .only_queue(QUEUE, args.concurrency)
        .lease(lease);
    config.name = Some(args.name.clone());
    config.poll_interval = Duration::from_millis(50);
    config.rescue_interval = Duration::from_millis(250);
    config.shutdown_timeout = Duration::from_secs(5);
    // A job that failed on a lost connection or a restarting server runs again soon.
    config.ladder = RetryLadder::new([Duration::from_millis(200), Duration::from_secs(1)]);
    config.max_attempts = 50;
    let mut w = idem.worker(config)?;
    workload::register(&mut w, Duration::from_millis(args.work_ms))?;
    w.register(remote_kind(args.lease_ms)?)?;
    let running = w.start();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut every = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = every.tick() => keep(&args.report_file, &running.report())?,
        }
    }
    keep(&args.report_file, &running.shutdown().await)?;
    Ok(ExitCode::SUCCESS)
}
