//! The demo's producer: creates the demo's tables, its batches of shop tallies, and
//! enqueues its jobs, every chunk with its orders marked paid in the same transaction.

use idem::{Batch, Idem, Job};

use super::QUEUE;
use super::remote::{self, Remotes};

/// The demo's own tables: the mail outbox, the orders (paid when their mail job is
/// enqueued), and a log of what each receipt job's guarded transition answered.
const TABLES: [&str; 5] = [
    "CREATE TABLE IF NOT EXISTS demo_outbox (order_id BIGINT NOT NULL, \
     receipt_no BIGINT NOT NULL, job_id BIGINT NOT NULL, \
     fence BIGINT NOT NULL, worker TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_order (order_id BIGINT PRIMARY KEY, \
     status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_order_move (order_id BIGINT NOT NULL, \
     job_id BIGINT NOT NULL, outcome TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_tally (batch_id BIGINT NOT NULL, shop BIGINT NOT NULL, \
     amount BIGINT NOT NULL, job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS demo_batch_total (batch_id BIGINT NOT NULL, \
     total BIGINT NOT NULL, children BIGINT NOT NULL)",
];

/// Shops per batch of tallies.
const SHOPS: i64 = 50;

/// One batch of shop tallies per this many jobs (at least one batch).
const JOBS_PER_BATCH: usize = 500;

/// Creates the demo's batches: each of [`SHOPS`] shop tallies, whose successor totals
/// their results. Returns the first child's id.
async fn batches(idem: &Idem, jobs: usize) -> anyhow::Result<i64> {
    let mut first = i64::MAX;
    for b in 0..(jobs / JOBS_PER_BATCH).max(1) as i64 {
        let tally = |shop: i64| {
            let amount = 1 + (b * 31 + shop * 7) % 13;
            let args = serde_json::json!({"shop": shop, "amount": amount});
            Job::new("shop-tally", args).queue(QUEUE)
        };
        let total = Job::new("batch-total", serde_json::json!({})).queue(QUEUE);
        let created = idem
            .batch(Batch::new(total).children((0..SHOPS).map(tally)))
            .await?;
        let ids = created.children.iter().map(|c| c.job.id);
        first = first.min(ids.min().unwrap_or(i64::MAX));
    }
    Ok(first)
}
/// The orders of the receipt jobs with ids from `$1` to `$2`, paid.
const PAID_ORDERS: &str = "INSERT INTO demo_order (order_id, status) \
     SELECT DISTINCT CAST(args ->> 'order_id' AS BIGINT), 'paid' FROM idem_job \
     WHERE id BETWEEN $1 AND $2 AND kind = 'receipt-mail' \
     ON CONFLICT (order_id) DO NOTHING";

/// Job `i` of the demo: one in [`remote::EVERY`] is a call to a mock remote, every third
/// of the others a ledger transfer, the rest receipt mails. Every 25th mail or transfer
/// repeats the previous one, as a producer that sent the same request twice would; the
/// effect key (`receipt-mail:{order}`, `transfer:{id}:debit`) makes the repeat a no-op.
fn demo_job(i: usize, remotes: &Remotes) -> Job {
    let repeat = |n: usize| if n % 25 == 24 { n - 1 } else { n };
    if i % remote::EVERY == remote::EVERY - 1 {
        remotes.job(i / remote::EVERY)
    } else if i % 3 == 2 {
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

/// Creates the demo's tables and batches, then enqueues the jobs in chunks, each chunk in one
/// transaction with its orders marked paid (as a shop would record a payment and ask for
/// its receipt together).
pub(super) async fn enqueue(
    idem: &Idem,
    n: usize,
    remotes: &Remotes,
) -> anyhow::Result<(i64, i64)> {
    let mut tx = idem.begin().await?;
    for sql in TABLES {
        tx.execute(sql, &[]).await?;
    }
    tx.commit().await?;
    let (mut first, mut last) = (batches(idem, n).await?, i64::MIN);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk.iter().map(|i| demo_job(*i, remotes)).collect();
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
