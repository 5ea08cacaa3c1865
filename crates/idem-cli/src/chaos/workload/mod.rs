//! The chaos workload: one job kind per effect class, the tables their effects go to, and
//! the one registration that worker processes and `idem guarantees` share.
//!
//! Every effect row carries the job id and fence of the claim that wrote it, and none of
//! the workload's tables has a unique key: a duplicate or a stale write shows up as a row
//! the checker can count, instead of being refused by the database.
//!
//! What must stay true: every handler does its simulated work *before* it opens its effect
//! transaction, so a paused worker (a zombie) resumes outside a transaction and tries to
//! commit under its stale claim; and every kill point ([`kill`]) sits after the effect's
//! writes and before its commit.

pub(super) mod flow;
mod handlers;
pub(super) mod kill;

use std::time::Duration;

use idem::{EffectClass, EffectKey, EffectTx, Handler, IdemError, SqlValue, Worker};

/// The workload's own tables: the outbox of receipt mails, the orders and the moves their
/// guarded transition made, the notes fenced by the claim alone (no effect key), the links
/// of chains, the tallies of batches' children and the totals of their successors.
pub(super) const TABLES: [&str; 7] = [
    "CREATE TABLE IF NOT EXISTS chaos_outbox (order_id BIGINT NOT NULL, \
     receipt_no BIGINT NOT NULL, job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_order (order_id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_order_move (order_id BIGINT NOT NULL, \
     job_id BIGINT NOT NULL, fence BIGINT NOT NULL, outcome TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_note (job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_link (chain BIGINT NOT NULL, step BIGINT NOT NULL, \
     job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_tally (batch_id BIGINT NOT NULL, shop BIGINT NOT NULL, \
     amount BIGINT NOT NULL, job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_batch_total (batch_id BIGINT NOT NULL, \
     total BIGINT NOT NULL, job_id BIGINT NOT NULL, fence BIGINT NOT NULL)",
];

/// Where the workload's handlers are registered: a worker process, or the list of kinds
/// that `idem guarantees` prints. [`register`] serves both, so the list cannot miss one.
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

/// Registers every handler of the workload; `work` is the simulated work each does
/// before its effect transaction. (The remote calls run on the built-in `http` kind,
/// registered beside these.)
pub(super) fn register(r: &mut impl Registry, work: Duration) -> anyhow::Result<()> {
    handlers::register(r, work)?;
    flow::register(r, work)
}

/// The job kinds this binary runs (the workload's), with their effect classes.
pub fn kinds() -> anyhow::Result<Vec<(String, EffectClass)>> {
    let mut kinds = Kinds::default();
    register(&mut kinds, Duration::ZERO)?;
    Ok(kinds.0)
}

/// Writes the effect row `sql` (with `row`) if this execution claims `key`: the key, the
/// row and the completion then commit together, and a repeat writes nothing.
async fn once(
    tx: &mut EffectTx<'_>,
    key: &EffectKey,
    sql: &str,
    row: &[SqlValue],
) -> Result<(), IdemError> {
    if tx.claim_effect(key).await?.is_new() {
        tx.execute(sql, row).await?;
    }
    Ok(())
}

/// The simulated work of one job: `work`, give or take half, so claims drift apart.
async fn work(work: Duration) {
    let spread = work.as_millis() as u64;
    let ms = spread / 2 + rand::random_range(0..=spread.max(1));
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
