//! The demo's job handlers: a receipt mail, a ledger transfer, a shop's tally (a batch's
//! child) and a batch's total (its successor), each committing its effects and its
//! completion in the job's one fenced transaction; and their one registration, from which
//! `idem guarantees` also takes its list of kinds.
//!
//! What must stay true: every effect is written through the `EffectTx` of the claim, under
//! an effect key, so a repeated job or a stale claim changes nothing.

use std::time::Duration;

use idem::{
    EffectClass, EffectKey, EffectTx, Guard, Handler, IdemError, JobContext, JobError, LeaseToken,
    Transition, Worker,
};
use serde::Deserialize;

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

#[derive(Deserialize)]
struct TallyArgs {
    shop: i64,
    amount: i64,
}

/// A batch's child: records its shop's takings once (effect key by batch and shop) and
/// completes with the amount as its result.
struct ShopTally;

impl Handler for ShopTally {
    const KIND: &'static str = "shop-tally";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = TallyArgs;

    async fn run(&self, cx: &mut JobContext, t: TallyArgs) -> Result<(), JobError> {
        let (lease, batch) = (cx.lease(), cx.job().batch_id.unwrap_or(0));
        let mut tx = cx.begin().await?;
        let key = EffectKey::new("shop-tally").part(batch).part(t.shop);
        if tx.claim_effect(&key).await?.is_new() {
            let sql = "INSERT INTO demo_tally (batch_id, shop, amount, job_id, fence)                        VALUES ($1, $2, $3, $4, $5)";
            let row = [
                batch.into(),
                t.shop.into(),
                t.amount.into(),
                lease.job_id.into(),
                lease.fence.into(),
            ];
            tx.execute(sql, &row).await?;
        }
        tx.set_result(serde_json::json!({ "amount": t.amount }))?;
        tx.complete().await?;
        Ok(())
    }
}

/// Children read per page by a batch's total.
const PAGE: u32 = 20;

/// A batch's successor: adds up its children's results, a page at a time, and records
/// the batch's total once.
struct BatchTotal;

impl Handler for BatchTotal {
    const KIND: &'static str = "batch-total";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde::de::IgnoredAny;

    async fn run(&self, cx: &mut JobContext, _: serde::de::IgnoredAny) -> Result<(), JobError> {
        let Some(batch) = cx.batch().await? else {
            return Err(JobError::permanent("a batch total that follows no batch"));
        };
        let (mut total, mut after) = (0i64, None);
        loop {
            let page = cx.batch_children(after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            total += page
                .iter()
                .filter_map(|c| c.result.as_ref()?.get("amount")?.as_i64())
                .sum::<i64>();
        }
        let mut tx = cx.begin().await?;
        if tx
            .claim_effect(&EffectKey::new("batch-total").part(batch.id))
            .await?
            .is_new()
        {
            let sql = "INSERT INTO demo_batch_total (batch_id, total, children)                        VALUES ($1, $2, $3)";
            let row = [batch.id.into(), total.into(), batch.completed.into()];
            tx.execute(sql, &row).await?;
        }
        tx.complete().await?;
        Ok(())
    }
}

/// Where the demo's handlers are registered: a demo worker, or the list of kinds that
/// `idem guarantees` prints. [`register`] serves both, so the list cannot miss a handler.
pub(super) trait Registry {
    /// Takes one handler.
    fn add<H: Handler>(&mut self, handler: H) -> anyhow::Result<()>;
}

impl Registry for Worker {
    fn add<H: Handler>(&mut self, handler: H) -> anyhow::Result<()> {
        self.register(handler)?;
        Ok(())
    }
}

/// The kind and effect class of every handler registered on it.
#[derive(Default)]
struct Kinds(Vec<(String, EffectClass)>);

impl Registry for Kinds {
    fn add<H: Handler>(&mut self, _: H) -> anyhow::Result<()> {
        self.0.push((H::KIND.to_owned(), H::EFFECT));
        Ok(())
    }
}

/// Registers every handler of the demo: `worker` names the process in the outbox rows it
/// writes, `work` is the simulated work before a receipt's effect transaction.
pub(super) fn register(r: &mut impl Registry, worker: &str, work: Duration) -> anyhow::Result<()> {
    r.add(ReceiptMail {
        work,
        worker: worker.to_owned(),
        orders: Guard::new("demo_order", "order_id", "status")?,
    })?;
    r.add(Transfer)?;
    r.add(ShopTally)?;
    r.add(BatchTotal)
}

/// The job kinds this binary runs (the demo's), with their effect classes.
pub fn kinds() -> anyhow::Result<Vec<(String, EffectClass)>> {
    let mut kinds = Kinds::default();
    register(&mut kinds, "", Duration::ZERO)?;
    Ok(kinds.0)
}
