//! The demo's job handlers: a receipt mail and a ledger transfer, each committing its
//! effects and its completion in the job's one fenced transaction; and their one
//! registration, from which `idem guarantees` also takes its list of kinds.
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
    r.add(Transfer)
}

/// The job kinds this binary runs (the demo's), with their effect classes.
pub fn kinds() -> anyhow::Result<Vec<(String, EffectClass)>> {
    let mut kinds = Kinds::default();
    register(&mut kinds, "", Duration::ZERO)?;
    Ok(kinds.0)
}
