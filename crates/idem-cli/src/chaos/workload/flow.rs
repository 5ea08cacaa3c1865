//! The workload's kinds that make more jobs: a chain's link, which records its step and
//! enqueues the next link in its effect transaction, and a batch's child (a shop's tally)
//! and successor (the batch's total of its children's results).

use std::time::Duration;

use idem::{EffectClass, EffectKey, Handler, Job, JobContext, JobError, SqlValue};
use serde::{Deserialize, Serialize};

use super::kill::{self, Point};
use super::{Registry, once, work};

/// A chain's link: `step` of `links`, counted from 0.
#[derive(Serialize, Deserialize)]
pub(in crate::chaos) struct Link {
    pub(in crate::chaos) chain: i64,
    pub(in crate::chaos) step: i64,
    pub(in crate::chaos) links: i64,
}

/// Records its step once (effect key by chain and step) and enqueues the next link in the
/// same transaction, so a retried link enqueues one successor.
struct ChainLink {
    work: Duration,
}

impl Handler for ChainLink {
    const KIND: &'static str = "chain-link";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Link;

    async fn run(&self, cx: &mut JobContext, link: Link) -> Result<(), JobError> {
        work(self.work).await;
        let (lease, queue) = (cx.lease(), cx.job().queue.clone());
        let mut tx = cx.begin().await?;
        let key = EffectKey::new("chain-link")
            .part(link.chain)
            .part(link.step);
        let sql = "INSERT INTO chaos_link (chain, step, job_id, fence) VALUES ($1, $2, $3, $4)";
        let row = [link.chain, link.step, lease.job_id, lease.fence].map(SqlValue::from);
        once(&mut tx, &key, sql, &row).await?;
        if link.step + 1 < link.links {
            let next = Link {
                step: link.step + 1,
                ..link
            };
            let args = serde_json::to_value(&next).map_err(JobError::permanent)?;
            tx.enqueue(Job::new(Self::KIND, args).queue(queue)).await?;
        }
        kill::at(Point::InEffectTx);
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
struct ShopTally {
    work: Duration,
}

impl Handler for ShopTally {
    const KIND: &'static str = "shop-tally";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = TallyArgs;

    async fn run(&self, cx: &mut JobContext, t: TallyArgs) -> Result<(), JobError> {
        work(self.work).await;
        let (lease, batch) = (cx.lease(), cx.job().batch_id.unwrap_or(0));
        let mut tx = cx.begin().await?;
        let key = EffectKey::new("shop-tally").part(batch).part(t.shop);
        let sql = "INSERT INTO chaos_tally (batch_id, shop, amount, job_id, fence) \
                   VALUES ($1, $2, $3, $4, $5)";
        let row = [batch, t.shop, t.amount, lease.job_id, lease.fence].map(SqlValue::from);
        once(&mut tx, &key, sql, &row).await?;
        tx.set_result(serde_json::json!({ "amount": t.amount }))?;
        kill::at(Point::InEffectTx);
        tx.complete().await?;
        Ok(())
    }
}

/// Children read per page by a batch's total.
const PAGE: u32 = 20;

/// A batch's successor: adds up its children's results, a page at a time, and records
/// the batch's total once.
struct BatchTotal {
    work: Duration,
}

impl Handler for BatchTotal {
    const KIND: &'static str = "batch-total";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde::de::IgnoredAny;

    async fn run(&self, cx: &mut JobContext, _: serde::de::IgnoredAny) -> Result<(), JobError> {
        work(self.work).await;
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
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        let key = EffectKey::new("batch-total").part(batch.id);
        let sql = "INSERT INTO chaos_batch_total (batch_id, total, job_id, fence) \
                   VALUES ($1, $2, $3, $4)";
        let row = [batch.id, total, lease.job_id, lease.fence].map(SqlValue::from);
        once(&mut tx, &key, sql, &row).await?;
        kill::at(Point::InEffectTx);
        tx.complete().await?;
        Ok(())
    }
}

pub(super) fn register(r: &mut impl Registry, work: Duration) -> anyhow::Result<()> {
    r.add(ChainLink { work })?;
    r.add(ShopTally { work })?;
    r.add(BatchTotal { work })
}
