//! The workload's single-job kinds: a receipt mail (a guarded transition, an effect key
//! and a store-assigned number), a ledger transfer, a note fenced by the claim alone, and
//! a ping that completes through the batched completer.

use std::time::Duration;

use idem::{EffectClass, EffectKey, Guard, Handler, JobContext, JobError, Transition};
use serde::Deserialize;

use super::kill::{self, Point};
use super::{Registry, work};

#[derive(Deserialize)]
struct Receipt {
    order: i64,
}

/// Moves the order from `paid` to `receipted` (logging what the guard answered), and if
/// its effect key is new writes the mail with the next receipt number, all with the
/// completion in the claim's one fenced transaction.
struct ReceiptMail {
    work: Duration,
    orders: Guard,
}

impl Handler for ReceiptMail {
    const KIND: &'static str = "receipt-mail";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Receipt;

    async fn run(&self, cx: &mut JobContext, args: Receipt) -> Result<(), JobError> {
        work(self.work).await;
        let (lease, order) = (cx.lease(), args.order);
        let mut tx = cx.begin().await?;
        let moved = self
            .orders
            .apply(tx.store_tx(), order, "paid", "receipted")
            .await?;
        let outcome = match moved {
            Transition::Changed => "changed",
            Transition::AlreadyThere => "already_there",
            Transition::Conflict { .. } => "conflict",
        };
        let sql = "INSERT INTO chaos_order_move (order_id, job_id, fence, outcome) \
                   VALUES ($1, $2, $3, $4)";
        let row = [
            order.into(),
            lease.job_id.into(),
            lease.fence.into(),
            outcome.into(),
        ];
        tx.execute(sql, &row).await?;
        let key = EffectKey::new("receipt-mail").part(order);
        if outcome != "conflict" && tx.claim_effect(&key).await?.is_new() {
            let number_key = EffectKey::new("receipt-number").part(order);
            let receipt = tx.next_number("receipt", &number_key).await?;
            let sql = "INSERT INTO chaos_outbox (order_id, receipt_no, job_id, fence) \
                       VALUES ($1, $2, $3, $4)";
            let row = [
                order.into(),
                receipt.number.into(),
                lease.job_id.into(),
                lease.fence.into(),
            ];
            tx.execute(sql, &row).await?;
        }
        kill::at(Point::InEffectTx);
        tx.complete().await?;
        Ok(())
    }
}

#[derive(Deserialize)]
struct TransferArgs {
    id: i64,
    from: String,
    to: String,
    amount: i64,
}

/// A debit and a credit keyed by the transfer, posted with the completion.
struct Transfer {
    work: Duration,
}

impl Handler for Transfer {
    const KIND: &'static str = "transfer";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = TransferArgs;

    async fn run(&self, cx: &mut JobContext, t: TransferArgs) -> Result<(), JobError> {
        work(self.work).await;
        let mut tx = cx.begin().await?;
        let key = |side: &str| EffectKey::new("transfer").part(t.id).part(side);
        tx.ledger_post(&key("debit"), &t.from, -t.amount).await?;
        tx.ledger_post(&key("credit"), &t.to, t.amount).await?;
        kill::at(Point::InEffectTx);
        tx.complete().await?;
        Ok(())
    }
}

/// A row written with no effect key: only the fence keeps a stale claim from committing
/// it, and only the completion in the same transaction keeps it from being written twice.
struct Note {
    work: Duration,
}

impl Handler for Note {
    const KIND: &'static str = "note";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde::de::IgnoredAny;

    async fn run(&self, cx: &mut JobContext, _: serde::de::IgnoredAny) -> Result<(), JobError> {
        work(self.work).await;
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        let sql = "INSERT INTO chaos_note (job_id, fence) VALUES ($1, $2)";
        tx.execute(sql, &[lease.job_id.into(), lease.fence.into()])
            .await?;
        kill::at(Point::InEffectTx);
        tx.complete().await?;
        Ok(())
    }
}

/// No effect of its own (its class is the one of its completion, a row in the store): the
/// handler returns and the batched completer completes it with others.
struct Ping {
    work: Duration,
}

impl Handler for Ping {
    const KIND: &'static str = "ping";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde::de::IgnoredAny;

    async fn run(&self, _: &mut JobContext, _: serde::de::IgnoredAny) -> Result<(), JobError> {
        work(self.work).await;
        kill::at(Point::InBatchedCompletion);
        Ok(())
    }
}

pub(super) fn register(r: &mut impl Registry, work: Duration) -> anyhow::Result<()> {
    r.add(ReceiptMail {
        work,
        orders: Guard::new("chaos_order", "order_id", "status")?,
    })?;
    r.add(Transfer { work })?;
    r.add(Note { work })?;
    r.add(Ping { work })
}
