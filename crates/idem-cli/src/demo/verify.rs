//! What the database says after the run: the checks behind the demo's verdict.
//!
//! Every count is a query on the jobs this run enqueued (ids from `ids.0` to `ids.1`) or
//! on the demo's tables; the verdict is OK only when every count that must be 0 is 0.

use idem::Idem;

use crate::scratch;

/// A count over the run's jobs: `sql` binds the first and last job id as `$1` and `$2`.
async fn scalar(idem: &Idem, sql: &str, ids: (i64, i64)) -> anyhow::Result<i64> {
    scratch::scalar(idem, sql, &[ids.0.into(), ids.1.into()]).await
}

/// The run's jobs that are finished (completed, dead or cancelled).
pub(super) async fn finished(idem: &Idem, ids: (i64, i64)) -> anyhow::Result<usize> {
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

/// The demo's batches of shop tallies as the database holds them.
#[derive(Default)]
pub(super) struct Batches {
    /// Batches created.
    pub(super) batches: i64,
    /// Batches not finished.
    pub(super) unfinished: i64,
    /// Batches with no successor or more than one.
    pub(super) successors_not_one: i64,
    /// Batches whose recorded total is missing or differs from their children's amounts.
    pub(super) totals_wrong: i64,
    /// Shop tallies recorded more than once.
    pub(super) tallies_twice: i64,
}

impl Batches {
    fn ok(&self) -> bool {
        self.batches > 0
            && self.unfinished == 0
            && self.successors_not_one == 0
            && self.totals_wrong == 0
            && self.tallies_twice == 0
    }
}

/// Batches whose successor has not finished yet (none, or not completed).
pub(super) const SUCCESSORS_PENDING: &str = "SELECT count(*) FROM idem_batch b \
     WHERE NOT EXISTS (SELECT 1 FROM idem_job j WHERE j.follows_batch_id = b.id \
     AND j.state IN ('completed', 'dead', 'cancelled'))";
const SUCCESSORS_NOT_ONE: &str = "SELECT count(*) FROM idem_batch b \
     WHERE (SELECT count(*) FROM idem_job j WHERE j.follows_batch_id = b.id) <> 1";
const TOTALS_WRONG: &str = "SELECT count(*) FROM idem_batch b \
     WHERE NOT EXISTS (SELECT 1 FROM demo_batch_total t WHERE t.batch_id = b.id \
     AND t.total = (SELECT sum(CAST(j.args ->> 'amount' AS BIGINT)) FROM idem_job j \
     WHERE j.batch_id = b.id))";
const TALLIES_TWICE: &str = "SELECT count(*) FROM (SELECT batch_id, shop FROM demo_tally \
     GROUP BY batch_id, shop HAVING count(*) > 1) AS twice";

async fn verify_batches(idem: &Idem) -> anyhow::Result<Batches> {
    let all = |sql: &'static str| scratch::scalar(idem, sql, &[]);
    Ok(Batches {
        batches: all("SELECT count(*) FROM idem_batch").await?,
        unfinished: all("SELECT count(*) FROM idem_batch WHERE state <> 'finished'").await?,
        successors_not_one: all(SUCCESSORS_NOT_ONE).await?,
        totals_wrong: all(TOTALS_WRONG).await?,
        tallies_twice: all(TALLIES_TWICE).await?,
    })
}

/// What the database says after the run.
pub(super) struct Verdict {
    pub(super) enqueued: i64,
    pub(super) completed: i64,
    pub(super) dead: i64,
    pub(super) lost: i64,
    pub(super) orders: i64,
    pub(super) deduplicated: i64,
    pub(super) transfers: i64,
    pub(super) ledger_entries_extra: i64,
    pub(super) ledger_mismatches: usize,
    pub(super) ledger_sum: i64,
    pub(super) duplicate_effects: i64,
    pub(super) missing_effects: i64,
    pub(super) stale_effects: i64,
    pub(super) rescued: i64,
    pub(super) receipts: Receipts,
    pub(super) batches: Batches,
}

impl Verdict {
    pub(super) fn ok(&self) -> bool {
        self.lost == 0
            && self.ledger_entries_extra == 0
            && self.ledger_mismatches == 0
            && self.ledger_sum == 0
            && self.duplicate_effects == 0
            && self.missing_effects == 0
            && self.stale_effects == 0
            && self.receipts.ok()
            && self.batches.ok()
    }
}

/// Receipt numbers and order moves as the database holds them, over every receipt the
/// demo's tables hold (this run's only: the demo runs in a database of its own).
pub(super) struct Receipts {
    /// Mails in the outbox.
    pub(super) mails: i64,
    /// Numbers the store assigned on the `receipt` counter.
    pub(super) numbers: i64,
    /// Numbers from 1 to the highest that no mail carries.
    pub(super) gaps: i64,
    /// Mails beyond the first that carry a number.
    pub(super) used_twice: i64,
    /// Orders this run's jobs moved from `paid` to `receipted`.
    pub(super) moved: i64,
    /// Moves beyond the first of an order.
    pub(super) moved_twice: i64,
    /// This run's jobs that found their order already receipted (repeated requests).
    pub(super) already_there: i64,
    /// Jobs whose order was in neither state.
    pub(super) conflicts: i64,
    /// Orders not receipted.
    pub(super) left_behind: i64,
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
    let all = |sql: &'static str| scratch::scalar(idem, sql, &[]);
    let moves = |outcome: &'static str| async move {
        scratch::scalar(idem, MOVES, &[ids.0.into(), ids.1.into(), outcome.into()]).await
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

/// Asks the database every question of the verdict.
pub(super) async fn verify(idem: &Idem, ids: (i64, i64)) -> anyhow::Result<Verdict> {
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
        ledger_sum: scratch::scalar(idem, LEDGER_SUM, &[]).await?,
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
        batches: verify_batches(idem).await?,
    })
}
