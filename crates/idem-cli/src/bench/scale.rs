//! `scale`: the fenced scenario's jobs drained by 1, 2, 4 … worker processes on one
//! PostgreSQL database, the same jobs at once in all (`--scale-concurrency`) split among
//! them, each process within its share of `--scale-connections`. Each count of processes
//! gets its own queue of `--jobs` seeded jobs; the processes (this executable, `idem
//! bench-worker`, hidden) open their stores and wait, are started together, and the
//! clock stops when the queue's last job completed. Beside the rate: how the work was
//! shared, where the host's CPU time went (the server's processes and the workers') and
//! the WAL written per job, which say where the machine saturates.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use idem::{ConnectOptions, Idem, SqlValue, WorkerReport};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use super::cpu::CpuTimes;
use super::scenarios::{EFFECT_TABLE, FencedEffect, figure, per_second, seed, worker_config};
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::{Scratch, scalar};

/// What a worker process prints once its worker is built and waiting for the start.
const READY: &str = "IDEM_BENCH_WORKER_READY";
/// What it prints, with its report as JSON, after its worker stopped.
const REPORT: &str = "IDEM_BENCH_WORKER_REPORT";
/// How long the processes may take to drain a queue; only a hang reaches it.
const DRAIN_LIMIT: Duration = Duration::from_secs(900);

/// Arguments of `idem bench-worker`, a worker process of the `scale` scenario.
#[derive(Args)]
pub struct ScaleWorkerArgs {
    /// Queue to drain
    #[arg(long)]
    queue: String,
    /// Jobs at once
    #[arg(long)]
    concurrency: usize,
    /// Connections to PostgreSQL, all pools
    #[arg(long)]
    pool_size: u32,
    /// Most jobs per claim statement
    #[arg(long)]
    claim_batch: usize,
    /// The worker's name
    #[arg(long)]
    name: String,
}

/// `idem bench-worker`: builds a worker of the fenced handler on the existing database,
/// says so, starts it when a line arrives on stdin, and stops it gracefully when stdin
/// closes, printing its report.
pub async fn bench_worker(url: &str, a: ScaleWorkerArgs) -> anyhow::Result<ExitCode> {
    let mut options = ConnectOptions::default();
    options.postgres.max_connections = a.pool_size;
    let idem = crate::database::open_with(url, options).await?;
    let mut config = worker_config(&a.queue, a.concurrency, a.claim_batch);
    config.name = Some(a.name);
    let mut worker = idem.worker(config)?;
    worker.register(FencedEffect)?;
    println!("{READY}");
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|n| n > 0)
    });
    if !go.await?? {
        idem.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    let running = worker.start();
    tokio::task::spawn_blocking(|| {
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
    })
    .await??;
    let report = running.shutdown().await;
    println!("{REPORT} {}", serde_json::to_string(&report)?);
    idem.close().await;
    Ok(ExitCode::SUCCESS)
}

/// One worker process and its output.
struct Process {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

/// Runs the scenario for each count of processes; one figure each.
pub(super) async fn run(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    super::require_postgres(db, Scenario::Scale)?;
    let mut tx = db.idem.begin().await?;
    tx.execute(EFFECT_TABLE, &[]).await?;
    tx.commit().await?;
    let mut out = Vec::new();
    for &n in &args.processes {
        out.push(one_count(db, args, n).await?);
    }
    Ok(out)
}

/// The jobs at once and the connections of each of `n` processes.
fn per_process(args: &BenchArgs, n: usize) -> (usize, u32) {
    let jobs = args.scale_concurrency.div_ceil(n).max(1);
    let wanted = u32::try_from(jobs)
        .unwrap_or(u32::MAX)
        .saturating_add(idem::WORKER_CONNECTIONS);
    let share = args.scale_connections / u32::try_from(n).unwrap_or(u32::MAX);
    let pool = idem_postgres::Budget::total_for(wanted)
        .min(share)
        .max(crate::worker::smallest_pool());
    (jobs, pool)
}

/// `n` processes drain a queue of `args.jobs`; the figure.
async fn one_count(db: &Scratch, args: &BenchArgs, n: usize) -> anyhow::Result<Figure> {
    let queue = format!("scale-{n}");
    seed(db.idem.store().as_ref(), &queue, args.jobs).await?;
    let (jobs, pool) = per_process(args, n);
    let mut processes = Vec::new();
    for i in 1..=n {
        processes.push(spawn(&db.url, args, &queue, jobs, pool, i)?);
    }
    for p in &mut processes {
        until_line(&mut p.lines, READY).await?;
    }
    let pids: Vec<u32> = processes.iter().filter_map(|p| p.child.id()).collect();
    let wal_before = super::wal::lsn(&db.idem).await?;
    let commits_before = super::wal::commits(&db.idem).await?;
    let cpu_before = CpuTimes::now();
    let started = Instant::now();
    for p in &mut processes {
        let stdin = p.child.stdin.as_mut().context("the worker's stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let drained = until_drained(&db.idem, &queue, args.jobs).await;
    let elapsed = started.elapsed();
    let cpu = cpu_before.share_until(&CpuTimes::now(), &pids);
    let wal = super::wal::since(&db.idem, &wal_before).await?;
    let mut done = Vec::new();
    for mut p in processes {
        drop(p.child.stdin.take());
        let report = until_line(&mut p.lines, REPORT).await?;
        let report: WorkerReport = serde_json::from_str(report.trim())?;
        p.child.wait().await?;
        done.push(report.completed);
    }
    drained?;
    let commits = super::wal::commits(&db.idem).await? - commits_before;
    check_once(&db.idem, &queue, args.jobs, &done).await?;
    let (least, most) = (done.iter().min(), done.iter().max());
    let metric = format!(
        "fenced rate, {n} worker process{}",
        if n == 1 { "" } else { "es" }
    );
    let note = format!(
        "{} jobs; {n} × {jobs} jobs at once, {pool} connections each; per process {}–{} \
         jobs; CPU of the host's cores: {:.0}% busy, PostgreSQL {:.0}%, the workers {:.0}%; \
         {:.0} bytes of WAL and {:.2} commits per job (this process's counting included)",
        args.jobs,
        least.copied().unwrap_or(0),
        most.copied().unwrap_or(0),
        cpu.busy * 100.0,
        cpu.postgres * 100.0,
        cpu.ours * 100.0,
        wal as f64 / args.jobs.max(1) as f64,
        commits as f64 / args.jobs.max(1) as f64
    );
    let f = figure(
        Scenario::Scale,
        &metric,
        per_second(args.jobs, elapsed),
        "jobs/s",
    );
    Ok(f.noted(note))
}

/// Every job of `queue` completed once, by the processes' reports, and its effect row
/// written once, under its last fence; an error naming what differs.
async fn check_once(idem: &Idem, queue: &str, total: usize, done: &[u64]) -> anyhow::Result<()> {
    let reported: u64 = done.iter().sum();
    if reported != total as u64 {
        bail!("the worker processes reported {reported} completions of {total} jobs in {queue}");
    }
    let sql = "SELECT count(*), count(DISTINCT e.job_id), \
               count(*) FILTER (WHERE e.fence = j.fence) \
               FROM bench_effect e JOIN idem_job j ON j.id = e.job_id WHERE j.queue = $1";
    let rows = idem.store().query(sql, &[SqlValue::from(queue)]).await?;
    let row = rows.first().context("no count of effects")?;
    let n = |i: usize| row.get(i).and_then(SqlValue::as_i64).unwrap_or(-1);
    let total = total as i64;
    if (n(0), n(1), n(2)) != (total, total, total) {
        bail!(
            "{queue}: {} effect rows for {} jobs, {} under the job's last fence; expected \
             {total} of each",
            n(0),
            n(1),
            n(2)
        );
    }
    Ok(())
}

/// `idem bench-worker` number `i` on `url`.
fn spawn(
    url: &str,
    args: &BenchArgs,
    queue: &str,
    jobs: usize,
    pool: u32,
    i: usize,
) -> anyhow::Result<Process> {
    let exe = std::env::current_exe().context("cannot find the idem executable")?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--database-url")
        .arg(url)
        .arg("bench-worker")
        .args(["--queue", queue])
        .args(["--concurrency", &jobs.to_string()])
        .args(["--pool-size", &pool.to_string()])
        .args(["--claim-batch", &args.claim_batch.to_string()])
        .args(["--name", &format!("bench-w{i}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    crate::chaos::orphan::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().context("cannot start a worker process")?;
    let stdout = child.stdout.take().context("the worker's stdout")?;
    Ok(Process {
        child,
        lines: BufReader::new(stdout).lines(),
    })
}

/// The rest of the first line starting with `mark`; an error if the process ends first.
async fn until_line(
    lines: &mut Lines<BufReader<ChildStdout>>,
    mark: &str,
) -> anyhow::Result<String> {
    while let Some(line) = lines.next_line().await? {
        if let Some(rest) = line.strip_prefix(mark) {
            return Ok(rest.to_owned());
        }
    }
    bail!("a worker process ended before it printed {mark}")
}

/// Waits until `total` jobs of `queue` completed, counting every 20 ms.
async fn until_drained(idem: &Idem, queue: &str, total: usize) -> anyhow::Result<()> {
    let sql = "SELECT count(*) FROM idem_job WHERE queue = $1 AND state = 'completed'";
    let deadline = Instant::now() + DRAIN_LIMIT;
    while scalar(idem, sql, &[SqlValue::from(queue)]).await? < total as i64 {
        if Instant::now() > deadline {
            bail!("the worker processes did not drain {queue} within {DRAIN_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn each_process_gets_its_share_of_the_jobs_and_the_connections() {
        let args = Flags::try_parse_from(["bench"]).unwrap().bench;
        let (jobs, pool) = per_process(&args, 1);
        assert_eq!(jobs, args.scale_concurrency);
        assert!(pool <= args.scale_connections);
        for n in [2, 4, 8] {
            let (jobs, pool) = per_process(&args, n);
            assert_eq!(jobs, args.scale_concurrency.div_ceil(n));
            assert!(pool * n as u32 <= args.scale_connections, "{n}: {pool}");
            assert!(pool >= crate::worker::smallest_pool());
        }
    }
}
