//! The hidden `idem demo-worker` command: one worker process of the demo's fleet.
//!
//! It runs the demo's handlers and the built-in `http` kind on the demo's queue until SIGTERM or SIGINT, shuts down
//! gracefully, and prints its report as one line after [`REPORT_MARKER`] on stdout, which
//! the parent reads.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idem::{Idem, WorkerConfig};

use super::QUEUE;
use super::handlers;

/// Starts the line on which a worker process prints its report.
pub(super) const REPORT_MARKER: &str = "IDEM_WORKER_REPORT";

/// Arguments of the hidden `idem demo-worker`.
#[derive(Args)]
pub struct DemoWorkerArgs {
    #[arg(long)]
    name: String,
    #[arg(long)]
    concurrency: usize,
    #[arg(long)]
    lease_ms: u64,
    #[arg(long)]
    work_ms: u64,
}

/// The hidden worker process.
pub async fn worker(args: DemoWorkerArgs, url: String) -> anyhow::Result<ExitCode> {
    let idem = Idem::from_store(idem::connect_store(&url).await?);
    let mut config = WorkerConfig::default()
        .only_queue(QUEUE, args.concurrency)
        .lease(Duration::from_millis(args.lease_ms));
    config.name = Some(args.name.clone());
    config.poll_interval = Duration::from_millis(50);
    config.rescue_interval = Duration::from_millis(250);
    config.shutdown_timeout = Duration::from_secs(5);
    let mut w = idem.worker(config)?;
    handlers::register(&mut w, &args.name, Duration::from_millis(args.work_ms))?;
    w.register(super::remote::http(args.lease_ms)?)?;
    let running = w.start();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    let report = running.shutdown().await;
    println!("{REPORT_MARKER} {}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
