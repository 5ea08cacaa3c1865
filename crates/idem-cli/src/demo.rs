//! `idem demo`: the whole story on one machine, verified.
//!
//! It enqueues receipt mails and ledger transfers whose effects commit in the job's fenced
//! transaction, runs worker *processes*, kills one with SIGKILL and pauses another with
//! SIGSTOP for longer than its lease while they work, and then checks the database: every
//! job completed, one outbox row per order, every row written under the claim that
//! completed the job, every transfer posted once, every receipt numbered by the store
//! with no gap and no number twice, every order moved from `paid` to `receipted` once.
//! The report counts what the fence refused along the way.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use idem::{
    EffectClass, EffectKey, EffectTx, Guard, Handler, Idem, IdemError, Job, JobContext, JobError,
    LeaseToken, SqlValue, Transition, WorkerConfig,
};

use crate::scratch;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use tokio::process::{Child, Command};

const QUEUE: &str = "demo";
const REPORT_MARKER: &str = "IDEM_WORKER_REPORT";
/// The demo's own tables: the mail outbox, the orders (paid when their mail job is
/// enqueued), and a log of what each receipt job's guarded transition answered.
const TABLES: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS demo_outbox (order_id BIGINT NOT NULL, \
     receipt_no BIGINT NOT NULL, job_id BIGINT NOT NULL, \
     fence BIGINT NOT NULL, worker TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_order (order_id BIGINT PRIMARY KEY, \
     status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_order_move (order_id BIGINT NOT NULL, \
     job_id BIGINT NOT NULL, outcome TEXT NOT NULL)",
];
/// The orders of the receipt jobs with ids from `$1` to `$2`, paid.
const PAID_ORDERS: &str = "INSERT INTO demo_order (order_id, status) \
     SELECT DISTINCT CAST(args ->> 'order_id' AS BIGINT), 'paid' FROM idem_job \
     WHERE id BETWEEN $1 AND $2 AND kind = 'receipt-mail' \
     ON CONFLICT (order_id) DO NOTHING";

/// Arguments of `idem demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Jobs to enqueue
    #[arg(long, default_value_t = 3000)]
    jobs: usize,
    /// Worker processes running at once (at least 2 with chaos)
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Jobs each worker process runs at once
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease in milliseconds (short, so that the chaos resolves in seconds)
    #[arg(long, default_value_t = 1500)]
    lease_ms: u64,
    /// Simulated work per job before its effect transaction, in milliseconds
    #[arg(long, default_value_t = 20)]
    work_ms: u64,
    /// Do not kill or pause workers
    #[arg(long)]
    no_chaos: bool,
    /// Keep the temporary SQLite file or PostgreSQL schema afterwards
    #[arg(long)]
    keep: bool,
}

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

impl DemoArgs {
    fn validate(&self) -> anyhow::Result<()> {
        if !(1..=1_000_000).contains(&self.jobs) {
            bail!("--jobs is {}; use 1 to 1000000", self.jobs);
        }
        let min_workers = if self.no_chaos { 1 } else { 2 };
        if !(min_workers..=32).contains(&self.workers) {
            bail!(
                "--workers is {}; use {min_workers} to 32 (chaos kills one worker and pauses \
                 another, so it needs at least 2; --no-chaos allows 1)",
                self.workers
            );
        }
        if !(1..=1000).contains(&self.concurrency) {
            bail!("--concurrency is {}; use 1 to 1000", self.concurrency);
        }
        if self.lease_ms < 300 {
            bail!("--lease-ms is {}; use at least 300", self.lease_ms);
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Receipt {
    order_id: i64,
}

/// The demo's handler: "renders" the mail, then in one fenced transaction moves the order
/// from `paid` to `receipted` (a guarded transition), writes the mail with the next
/// receipt number if its effect key is new, and completes the job.
struct ReceiptMail {
    work: Duration,
    worker: String,
    orders: Guard,
}

impl Handler for ReceiptMail {
    const KIND: &'static str = "receipt-mail";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Receipt;

    async fn run(&self, cx: &mut JobContext, args: Receipt) -> Result<(), JobError> {
        tokio::time::sleep(self.work).await;
        let (lease, order) = (cx.lease(), args.order_id);
        let mut tx = cx.begin().await?;
        let moved = self
            .orders
            .apply(tx.store_tx(), order, "paid", "receipted")
            .await?;
        let sql = "INSERT INTO demo_order_move (order_id, job_id, outcome) VALUES ($1, $2, $3)";
        let log = [order.into(), lease.job_id.into(), outcome(&moved).into()];
        tx.execute(sql, &log).await?;
        let key = EffectKey::new("receipt-mail").part(order);
        let paid = !matches!(moved, Transition::Conflict { .. });
        if paid && tx.claim_effect(&key).await?.is_new() {
            self.write_mail(&mut tx, lease, order).await?;
        }
        tx.complete().await?;
        Ok(())
    }
}

impl ReceiptMail {
    /// Gives the mail the next receipt number and writes it to the outbox.
    async fn write_mail(
        &self,
        tx: &mut EffectTx<'_>,
        lease: LeaseToken,
        order: i64,
    ) -> Result<(), IdemError> {
        let number_key = EffectKey::new("receipt-number").part(order);
        let receipt = tx.next_number("receipt", &number_key).await?;
        let sql = "INSERT INTO demo_outbox (order_id, receipt_no, job_id, fence, worker) \
                   VALUES ($1, $2, $3, $4, $5)";
        let row = [
            order.into(),
            receipt.number.into(),
            lease.job_id.into(),
            lease.fence.into(),
            self.worker.as_str().into(),
        ];
        tx.execute(sql, &row).await?;
        Ok(())
    }
}

/// A guarded transition's answer as the demo logs it.
fn outcome(t: &Transition) -> &'static str {
    match t {
        Transition::Changed => "changed",
        Transition::AlreadyThere => "already_there",
        Transition::Conflict { .. } => "conflict",
    }
}

#[derive(Deserialize)]
struct TransferArgs {
    id: i64,
    from: String,
    to: String,
    amount: i64,
}

/// The demo's ledger transfer: a debit and a credit keyed by the transfer, posted with
/// the completion in one fenced transaction.
struct Transfer;

impl Handler for Transfer {
    const KIND: &'static str = "transfer";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = TransferArgs;

    async fn run(&self, cx: &mut JobContext, t: TransferArgs) -> Result<(), JobError> {
        let mut tx = cx.begin().await?;
        let key = |side: &str| EffectKey::new("transfer").part(t.id).part(side);
        tx.ledger_post(&key("debit"), &t.from, -t.amount).await?;
        tx.ledger_post(&key("credit"), &t.to, t.amount).await?;
        tx.complete().await?;
        Ok(())
    }
}

/// The job kinds this binary runs (the demo's), with their effect classes.
pub fn kinds() -> Vec<(String, idem::EffectClass)> {
    vec![
        (ReceiptMail::KIND.to_owned(), ReceiptMail::EFFECT),
        (Transfer::KIND.to_owned(), Transfer::EFFECT),
    ]
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
    w.register(ReceiptMail {
        work: Duration::from_millis(args.work_ms),
        worker: args.name,
        orders: Guard::new("demo_order", "order_id", "status")?,
    })?;
    w.register(Transfer)?;
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

/// `idem demo`.
pub async fn run(args: DemoArgs, url: Option<String>) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let db = scratch::open(url, "demo", "")
        .await
        .context("cannot set up the demo database")?;
    println!(
        "idem demo: {} jobs, {} worker processes × {} slots, lease {} ms",
        args.jobs, args.workers, args.concurrency, args.lease_ms
    );
    println!("database: {}", db.label);
    let started = Instant::now();
    let ids = enqueue(&db.idem, args.jobs).await?;
    let mut fleet = Fleet::new(&args, &db.url)?;
    for _ in 0..args.workers {
        fleet.spawn()?;
    }
    let chaos = drive(&db.idem, &args, &mut fleet, ids).await;
    let reports = fleet.stop().await;
    let chaos = chaos?;
    let verdict = verify(&db.idem, ids).await?;
    print_report(&args, &chaos, &reports, &verdict, started.elapsed());
    db.finish(args.keep).await;
    Ok(if verdict.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Job `i` of the demo: every third job is a ledger transfer, the others receipt mails.
/// Every 25th mail or transfer repeats the previous one, as a producer that sent the same
/// request twice would; the effect key (`receipt-mail:{order}`, `transfer:{id}:debit`)
/// makes the repeat a no-op.
fn demo_job(i: usize) -> Job {
    let repeat = |n: usize| if n % 25 == 24 { n - 1 } else { n };
    if i % 3 == 2 {
        let id = repeat(i / 3);
        let from = id % 10;
        let to = (from + 1 + id % 9) % 10;
        let args = serde_json::json!({
            "id": id, "from": format!("acct-{from}"), "to": format!("acct-{to}"),
            "amount": 1 + id % 97,
        });
        Job::new("transfer", args).queue(QUEUE)
    } else {
        let order_id = repeat(i);
        Job::new("receipt-mail", serde_json::json!({"order_id": order_id})).queue(QUEUE)
    }
}

/// Creates the demo's tables, then enqueues the jobs in chunks, each chunk in one
/// transaction with its orders marked paid (as a shop would record a payment and ask for
/// its receipt together).
async fn enqueue(idem: &Idem, n: usize) -> anyhow::Result<(i64, i64)> {
    let mut tx = idem.begin().await?;
    for sql in TABLES {
        tx.execute(sql, &[]).await?;
    }
    tx.commit().await?;
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk.iter().map(|i| demo_job(*i)).collect();
        let mut tx = idem.begin().await?;
        let rows = idem.enqueue_many_tx(&mut tx, jobs).await?;
        let ids = rows.iter().map(|r| r.id);
        let (lo, hi) = (ids.clone().min().unwrap_or(0), ids.max().unwrap_or(-1));
        tx.execute(PAID_ORDERS, &[lo.into(), hi.into()]).await?;
        tx.commit().await?;
        (first, last) = (first.min(lo), last.max(hi));
    }
    Ok((first, last))
}

/// The worker processes.
struct Fleet {
    exe: std::path::PathBuf,
    url: String,
    concurrency: usize,
    lease_ms: u64,
    work_ms: u64,
    live: Vec<(String, Child)>,
    spawned: usize,
}

impl Fleet {
    fn new(args: &DemoArgs, url: &str) -> anyhow::Result<Fleet> {
        Ok(Fleet {
            exe: std::env::current_exe().context("cannot find the idem executable")?,
            url: url.to_owned(),
            concurrency: args.concurrency,
            lease_ms: args.lease_ms,
            work_ms: args.work_ms,
            live: Vec::new(),
            spawned: 0,
        })
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        self.spawned += 1;
        let name = format!("demo-w{}", self.spawned);
        let child = Command::new(&self.exe)
            .arg("demo-worker")
            .args(["--name", &name])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--lease-ms", &self.lease_ms.to_string()])
            .args(["--work-ms", &self.work_ms.to_string()])
            .env("IDEM_DATABASE_URL", &self.url)
            .env(
                "IDEM_LOG",
                std::env::var("IDEM_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a worker process")?;
        self.live.push((name, child));
        Ok(())
    }

    fn signal(&self, index: usize, sig: libc::c_int) -> Option<(String, u32)> {
        let (name, child) = self.live.get(index)?;
        let pid = child.id()?;
        // SAFETY: kill(2) on a child process id we own; no memory is shared.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        (rc == 0).then(|| (name.clone(), pid))
    }

    /// SIGKILL the worker at `index` and start a replacement.
    async fn kill(&mut self, index: usize) -> anyhow::Result<Option<String>> {
        let Some((name, pid)) = self.signal(index, libc::SIGKILL) else {
            return Ok(None);
        };
        let (_, mut child) = self.live.remove(index);
        let _ = child.wait().await;
        self.spawn()?;
        Ok(Some(format!(
            "killed {name} (pid {pid}) with SIGKILL mid-run and started a replacement"
        )))
    }

    /// SIGTERM every live worker and collect their reports.
    async fn stop(mut self) -> Vec<(String, idem::WorkerReport)> {
        let mut reports = Vec::new();
        for i in 0..self.live.len() {
            self.signal(i, libc::SIGCONT);
            self.signal(i, libc::SIGTERM);
        }
        for (name, child) in self.live.drain(..) {
            let Ok(out) = child.wait_with_output().await else {
                continue;
            };
            let text = String::from_utf8_lossy(&out.stdout);
            let report = text
                .lines()
                .find_map(|l| l.strip_prefix(REPORT_MARKER))
                .and_then(|j| serde_json::from_str(j.trim()).ok());
            match report {
                Some(r) => reports.push((name, r)),
                None => eprintln!("worker {name} exited without a report ({})", out.status),
            }
        }
        reports
    }
}

/// What the chaos did, and where it stands.
struct Chaos {
    events: Vec<String>,
    kill: Step,
    pause: Step,
    pause_for: Duration,
}

/// One chaos step: not yet due, in progress (a paused worker), or done.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    Pending,
    Paused { since: Instant, target: usize },
    Done,
}

impl Chaos {
    fn new(args: &DemoArgs) -> Chaos {
        let first = if args.no_chaos {
            Step::Done
        } else {
            Step::Pending
        };
        Chaos {
            events: Vec::new(),
            kill: first,
            pause: first,
            pause_for: Duration::from_millis(args.lease_ms * 2 + 500),
        }
    }

    /// Kills a worker at 25% of the jobs finished, pauses the busiest at 50%, and
    /// resumes it once it has been stopped for longer than its lease.
    async fn step(
        &mut self,
        idem: &Idem,
        fleet: &mut Fleet,
        done: usize,
        total: usize,
    ) -> anyhow::Result<()> {
        if self.kill == Step::Pending && done * 4 >= total {
            self.kill = Step::Done;
            if let Some(event) = fleet.kill(0).await? {
                self.events.push(event);
            }
        }
        if self.pause == Step::Pending && done * 2 >= total {
            let target = busiest(idem, fleet).await?;
            self.pause = Step::Done;
            if let Some((name, pid)) = fleet.signal(target, libc::SIGSTOP) {
                self.events.push(format!(
                    "paused {name} (pid {pid}) with SIGSTOP for {} ms, longer than its lease, then resumed it",
                    self.pause_for.as_millis()
                ));
                self.pause = Step::Paused {
                    since: Instant::now(),
                    target,
                };
            }
        }
        if let Step::Paused { since, .. } = self.pause
            && since.elapsed() >= self.pause_for
        {
            self.resume(fleet);
        }
        Ok(())
    }

    fn resume(&mut self, fleet: &Fleet) {
        if let Step::Paused { target, .. } = self.pause {
            fleet.signal(target, libc::SIGCONT);
            self.pause = Step::Done;
        }
    }
}

/// Watches progress and runs the chaos until every job is finished.
async fn drive(
    idem: &Idem,
    args: &DemoArgs,
    fleet: &mut Fleet,
    ids: (i64, i64),
) -> anyhow::Result<Chaos> {
    let bar = ProgressBar::new(args.jobs as u64);
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} jobs finished",
    )?);
    let mut chaos = Chaos::new(args);
    let limit = Duration::from_secs(120) + Duration::from_millis(args.jobs as u64 * 20);
    let deadline = Instant::now() + limit;
    loop {
        let done = finished(idem, ids).await?;
        bar.set_position(done as u64);
        if done >= args.jobs {
            break;
        }
        if Instant::now() > deadline {
            bar.abandon();
            chaos.resume(fleet);
            bail!(
                "the demo did not finish within {limit:?}: {done} of {} jobs finished",
                args.jobs
            );
        }
        chaos.step(idem, fleet, done, args.jobs).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    chaos.resume(fleet);
    bar.finish();
    Ok(chaos)
}

/// The live worker holding the most leases, so that pausing it matters.
async fn busiest(idem: &Idem, fleet: &Fleet) -> anyhow::Result<usize> {
    let sql = "SELECT lease_owner, count(*) FROM idem_job WHERE state = 'running' \
               GROUP BY lease_owner ORDER BY count(*) DESC";
    let rows = idem.store().query(sql, &[]).await?;
    let owners: Vec<String> = rows
        .into_iter()
        .filter_map(|r| match r.first() {
            Some(SqlValue::Text(owner)) => Some(owner.clone()),
            _ => None,
        })
        .collect();
    let index = owners
        .iter()
        .find_map(|o| fleet.live.iter().position(|(name, _)| name == o));
    Ok(index.unwrap_or(0))
}

async fn scalar(idem: &Idem, sql: &str, ids: (i64, i64)) -> anyhow::Result<i64> {
    crate::scratch::scalar(idem, sql, &[ids.0.into(), ids.1.into()]).await
}

async fn finished(idem: &Idem, ids: (i64, i64)) -> anyhow::Result<usize> {
    let sql = "SELECT count(*) FROM idem_job WHERE id BETWEEN $1 AND $2 \
               AND state IN ('completed', 'dead', 'cancelled')";
    Ok(usize::try_from(scalar(idem, sql, ids).await?).unwrap_or(0))
}

const ORDERS: &str = "SELECT count(DISTINCT CAST(args ->> 'order_id' AS BIGINT)) FROM idem_job \
                      WHERE id BETWEEN $1 AND $2 AND kind = 'receipt-mail'";
const MISSING: &str = "SELECT count(DISTINCT CAST(j.args ->> 'order_id' AS BIGINT)) FROM idem_job j \
                       WHERE j.id BETWEEN $1 AND $2 AND j.kind = 'receipt-mail' \
                       AND NOT EXISTS (SELECT 1 FROM demo_outbox o \
                       WHERE o.order_id = CAST(j.args ->> 'order_id' AS BIGINT))";
const LEDGER_SUM: &str =
    "SELECT CAST(coalesce(sum(balance), 0) AS BIGINT) FROM idem_ledger_balance";
const TRANSFERS: &str = "SELECT count(DISTINCT CAST(args ->> 'id' AS BIGINT)) FROM idem_job \
                         WHERE id BETWEEN $1 AND $2 AND kind = 'transfer'";

/// What the database says after the run.
struct Verdict {
    enqueued: i64,
    completed: i64,
    dead: i64,
    lost: i64,
    orders: i64,
    deduplicated: i64,
    transfers: i64,
    ledger_entries_extra: i64,
    ledger_mismatches: usize,
    ledger_sum: i64,
    duplicate_effects: i64,
    missing_effects: i64,
    stale_effects: i64,
    rescued: i64,
    receipts: Receipts,
}

impl Verdict {
    fn ok(&self) -> bool {
        self.lost == 0
            && self.ledger_entries_extra == 0
            && self.ledger_mismatches == 0
            && self.ledger_sum == 0
            && self.duplicate_effects == 0
            && self.missing_effects == 0
            && self.stale_effects == 0
            && self.receipts.ok()
    }
}

/// Receipt numbers and order moves as the database holds them, over every receipt the
/// demo's tables hold (a database the URL names may hold earlier runs).
struct Receipts {
    /// Mails in the outbox.
    mails: i64,
    /// Numbers the store assigned on the `receipt` counter.
    numbers: i64,
    /// Numbers from 1 to the highest that no mail carries.
    gaps: i64,
    /// Mails beyond the first that carry a number.
    used_twice: i64,
    /// Orders this run's jobs moved from `paid` to `receipted`.
    moved: i64,
    /// Moves beyond the first of an order.
    moved_twice: i64,
    /// This run's jobs that found their order already receipted (repeated requests).
    already_there: i64,
    /// Jobs whose order was in neither state.
    conflicts: i64,
    /// Orders not receipted.
    left_behind: i64,
}

impl Receipts {
    fn ok(&self) -> bool {
        self.numbers == self.mails
            && self.gaps == 0
            && self.used_twice == 0
            && self.moved_twice == 0
            && self.conflicts == 0
            && self.left_behind == 0
    }
}

const MAILS: &str = "SELECT count(*) FROM demo_outbox";
const NUMBERS: &str = "SELECT count(*) FROM idem_counter_number WHERE counter = 'receipt'";
const GAPS: &str =
    "SELECT coalesce(max(receipt_no), 0) - count(DISTINCT receipt_no) FROM demo_outbox";
const NUMBERS_TWICE: &str = "SELECT count(*) - count(DISTINCT receipt_no) FROM demo_outbox";
const MOVES: &str = "SELECT count(*) FROM demo_order_move WHERE job_id BETWEEN $1 AND $2 \
                     AND outcome = $3";
const MOVED_TWICE: &str = "SELECT count(*) - count(DISTINCT order_id) FROM demo_order_move \
                           WHERE outcome = 'changed'";
const CONFLICTS: &str = "SELECT count(*) FROM demo_order_move WHERE outcome = 'conflict'";
const LEFT_BEHIND: &str = "SELECT count(*) FROM demo_order WHERE status <> 'receipted'";

async fn verify_receipts(idem: &Idem, ids: (i64, i64)) -> anyhow::Result<Receipts> {
    let all = |sql: &'static str| crate::scratch::scalar(idem, sql, &[]);
    let moves = |outcome: &'static str| async move {
        crate::scratch::scalar(idem, MOVES, &[ids.0.into(), ids.1.into(), outcome.into()]).await
    };
    Ok(Receipts {
        mails: all(MAILS).await?,
        numbers: all(NUMBERS).await?,
        gaps: all(GAPS).await?,
        used_twice: all(NUMBERS_TWICE).await?,
        moved: moves("changed").await?,
        moved_twice: all(MOVED_TWICE).await?,
        already_there: moves("already_there").await?,
        conflicts: all(CONFLICTS).await?,
        left_behind: all(LEFT_BEHIND).await?,
    })
}

async fn verify(idem: &Idem, ids: (i64, i64)) -> anyhow::Result<Verdict> {
    let q = |sql: &'static str| scalar(idem, sql, ids);
    let enqueued = q("SELECT count(*) FROM idem_job WHERE id BETWEEN $1 AND $2").await?;
    let completed =
        q("SELECT count(*) FROM idem_job WHERE id BETWEEN $1 AND $2 AND state = 'completed'")
            .await?;
    let dead =
        q("SELECT count(*) FROM idem_job WHERE id BETWEEN $1 AND $2 AND state = 'dead'").await?;
    Ok(Verdict {
        enqueued,
        completed,
        dead,
        lost: enqueued - completed - dead,
        orders: q(ORDERS).await?,
        transfers: q(TRANSFERS).await?,
        ledger_entries_extra: q("SELECT count(*) FROM idem_ledger_entry WHERE job_id BETWEEN $1 AND $2")
            .await?
            - 2 * q(TRANSFERS).await?,
        ledger_mismatches: idem.ledger_verify().await?.len(),
        ledger_sum: crate::scratch::scalar(idem, LEDGER_SUM, &[]).await?,
        deduplicated: q("SELECT count(*) FROM idem_job j WHERE j.id BETWEEN $1 AND $2 \
                         AND j.kind = 'receipt-mail' AND j.state = 'completed' \
                         AND NOT EXISTS (SELECT 1 FROM demo_outbox o WHERE o.job_id = j.id)").await?,
        duplicate_effects: q("SELECT count(*) - count(DISTINCT order_id) FROM demo_outbox \
                              WHERE job_id BETWEEN $1 AND $2").await?,
        missing_effects: q(MISSING).await?,
        stale_effects: q("SELECT count(*) FROM demo_outbox o JOIN idem_job j ON j.id = o.job_id \
                          WHERE o.job_id BETWEEN $1 AND $2 AND o.fence <> j.fence").await?,
        rescued: q("SELECT count(*) FROM idem_job_attempt WHERE job_id BETWEEN $1 AND $2 AND outcome = 'lease_expired'").await?,
        receipts: verify_receipts(idem, ids).await?,
    })
}

fn print_report(
    args: &DemoArgs,
    chaos: &Chaos,
    reports: &[(String, idem::WorkerReport)],
    v: &Verdict,
    elapsed: Duration,
) {
    let refused: u64 = reports.iter().map(|(_, r)| r.lease_lost).sum();
    println!();
    if args.no_chaos {
        println!("chaos: off");
    }
    for e in &chaos.events {
        println!("chaos: {e}");
    }
    let line = |label: &str, value: String| println!("  {label:<38} {value:>8}");
    println!("report ({:.1} s):", elapsed.as_secs_f64());
    line("jobs enqueued", v.enqueued.to_string());
    line("jobs completed", v.completed.to_string());
    line("jobs dead-lettered", v.dead.to_string());
    line("jobs lost", v.lost.to_string());
    line("receipt mails: orders", v.orders.to_string());
    line(
        "repeated mail requests made no effect",
        v.deduplicated.to_string(),
    );
    line("ledger transfers (distinct)", v.transfers.to_string());
    line(
        "ledger entries beyond two per transfer",
        v.ledger_entries_extra.to_string(),
    );
    line(
        "ledger totals unequal to their entries",
        v.ledger_mismatches.to_string(),
    );
    line(
        "sum of all ledger totals (must be 0)",
        v.ledger_sum.to_string(),
    );
    line(
        "duplicate effects (outbox)",
        v.duplicate_effects.to_string(),
    );
    line("missing effects (outbox)", v.missing_effects.to_string());
    line("effects from a stale claim", v.stale_effects.to_string());
    print_receipts(&v.receipts, &line);
    line("leases expired and rescued", v.rescued.to_string());
    line("stale commits refused by the fence", refused.to_string());
    println!("  (the killed worker's own counts died with it; the rescues above include its jobs)");
    println!(
        "verdict: {}",
        if v.ok() {
            "OK: every job completed, every order got one mail, one receipt number and one \
             move, every transfer moved money once"
        } else {
            "FAILED"
        }
    );
}

fn print_receipts(r: &Receipts, line: &impl Fn(&str, String)) {
    let numbers = format!("{}/{}", r.numbers, r.mails);
    line("receipt numbers assigned / receipts", numbers);
    line("receipt numbers skipped (gaps)", r.gaps.to_string());
    line("receipt numbers used twice", r.used_twice.to_string());
    line("orders moved paid → receipted", r.moved.to_string());
    line("orders moved more than once", r.moved_twice.to_string());
    line(
        "repeats that found the order receipted",
        r.already_there.to_string(),
    );
    line(
        "orders in conflict (neither state)",
        r.conflicts.to_string(),
    );
    line(
        "orders left behind (not receipted)",
        r.left_behind.to_string(),
    );
}
