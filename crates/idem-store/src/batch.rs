//! Batches (`idem_batch`): N child jobs and one successor, enqueued by the change that
//! finishes the last child, in that change's transaction.
//!
//! The rules both stores keep, through the one orchestration in this module:
//! - A batch's counts live in shards (`idem_batch_shard`; a child's shard is its id modulo
//!   [`SHARDS`]) and move in the transaction that moves a child into or out of a final
//!   state: every finishing operation of the seam ([`crate::StoreTx::job_complete`],
//!   `job_complete_many`, `job_fail`, `job_rescue`, `job_cancel`, `job_retry`) settles its
//!   batches before it returns, one `batch/count.sql` per batch touched, in batch id
//!   order, last in its transaction. On PostgreSQL that statement locks only the shards it
//!   moves, to the commit, so the children of one batch finish in parallel instead of
//!   queueing on one row (measured in docs/performance.md).
//! - A change that completes a shard (every child of it finished) then locks the batch row
//!   and reads every shard in a statement that starts after the lock was granted, so it
//!   sees every change committed before it. The one that finds the batch sealed, every
//!   shard complete and no successor enqueues the successor (enqueue key
//!   `batch:{id}:done`) and marks the batch `finished`, under that lock. Two last children
//!   of different shards queue on the batch row; the second sees the first's shard
//!   complete. A later change finds `finished` and enqueues nothing: one successor exists
//!   however the last children race, retry or are reclaimed, and an operator's retry of a
//!   dead child after the successor ran makes no second one.
//! - Adding children inserts them first, then adds to their shards' totals, then locks the
//!   batch row if it is still open (refused otherwise, and all of it rolls back): shard
//!   rows before the batch row, in the order every change takes them, so an add and a
//!   completion never wait on each other in a cycle. Sealing locks the batch row and reads
//!   the shards afresh, as a shard's completer does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    Enqueued, JobInsert, JobRow, JobState, NewJob, StoreError, StoreResult, StoreTx, Timestamp,
};

/// The state of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// Children may be added.
    Open,
    /// No more children; finishes when every child is finished.
    Sealed,
    /// Every child finished and the successor was enqueued.
    Finished,
}

impl BatchState {
    /// Every state.
    pub const ALL: [BatchState; 3] = [BatchState::Open, BatchState::Sealed, BatchState::Finished];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Open => "open",
            BatchState::Sealed => "sealed",
            BatchState::Finished => "finished",
        }
    }
}

impl std::fmt::Display for BatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BatchState {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BatchState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "unknown batch state {s:?}; expected open, sealed or finished"
                ))
            })
    }
}

/// What runs when a batch finishes with dead children.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDead {
    /// The successor runs anyway, and reads the outcomes (the default).
    #[default]
    Summary,
    /// The failure successor runs instead of the successor.
    FailureSuccessor,
}

impl OnDead {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDead::Summary => "summary",
            OnDead::FailureSuccessor => "failure_successor",
        }
    }
}

impl std::str::FromStr for OnDead {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "summary" => Ok(OnDead::Summary),
            "failure_successor" => Ok(OnDead::FailureSuccessor),
            _ => Err(StoreError::Invalid(format!(
                "unknown dead-children policy {s:?}; expected summary or failure_successor"
            ))),
        }
    }
}

/// One batch as stored in `idem_batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRow {
    /// Store-assigned id.
    pub id: i64,
    /// Open, sealed or finished.
    pub state: BatchState,
    /// Children added so far.
    pub total: i64,
    /// Children completed.
    pub completed: i64,
    /// Children dead.
    pub dead: i64,
    /// Children cancelled.
    pub cancelled: i64,
    /// What runs when children died.
    pub on_dead: OnDead,
    /// The job enqueued when the batch finishes.
    pub successor: NewJob,
    /// The job enqueued instead when children died and `on_dead` says so.
    pub failure_successor: Option<NewJob>,
    /// The enqueue-key window the successor's key is taken with, in milliseconds.
    pub key_window_ms: i64,
    /// The successor enqueued (or the job holding its key), once finished.
    pub successor_job_id: Option<i64>,
    /// The HTTP API principal that created the batch.
    pub principal: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was sealed.
    pub sealed_at: Option<Timestamp>,
    /// When its last child finished and the successor was enqueued.
    pub finished_at: Option<Timestamp>,
}

impl BatchRow {
    /// Children in a final state (completed, dead or cancelled).
    pub fn finished_children(&self) -> i64 {
        self.completed + self.dead + self.cancelled
    }

    /// Children not finished yet (waiting, scheduled, running or retryable).
    pub fn unfinished_children(&self) -> i64 {
        self.total - self.finished_children()
    }

    /// Sealed with every child finished and no successor yet: the change that left it
    /// so enqueues the successor.
    pub fn is_due(&self) -> bool {
        self.state == BatchState::Sealed
            && self.finished_children() == self.total
            && self.successor_job_id.is_none()
    }

    /// The job to enqueue now that the batch is due: the failure successor when children
    /// died and the policy says so, else the successor.
    pub fn successor_due(&self) -> NewJob {
        let failed = self.dead > 0 && self.on_dead == OnDead::FailureSuccessor;
        let mut job = match (&self.failure_successor, failed) {
            (Some(f), true) => f.clone(),
            _ => self.successor.clone(),
        };
        job.enqueue_key = Some(successor_key(self.id));
        job.follows_batch = Some(self.id);
        job.batch_id = None;
        job.claim = None;
        job
    }
}

/// The enqueue key of a batch's successor.
pub fn successor_key(batch_id: i64) -> String {
    format!("batch:{batch_id}:done")
}

/// Insert a batch row (open, no children).
#[derive(Debug, Clone)]
pub struct BatchInsert {
    /// What runs when children died.
    pub on_dead: OnDead,
    /// The job enqueued when the batch finishes (its enqueue key is set then).
    pub successor: NewJob,
    /// Required when `on_dead` is [`OnDead::FailureSuccessor`].
    pub failure_successor: Option<NewJob>,
    /// The enqueue-key window for the successor's key and the children's keys, in ms.
    pub key_window_ms: i64,
    /// The HTTP API principal creating it.
    pub principal: Option<String>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Create a batch, add its first children and (optionally) seal it, in one transaction.
#[derive(Debug, Clone)]
pub struct BatchCreate {
    /// The batch.
    pub batch: BatchInsert,
    /// Its first children (their `batch_id` is set by the store).
    pub children: Vec<NewJob>,
    /// Seal it at once: no children can be added later, and an empty batch finishes now.
    pub seal: bool,
}

/// Add children to an open batch.
#[derive(Debug, Clone)]
pub struct BatchAdd {
    /// The batch.
    pub batch_id: i64,
    /// The children (their `batch_id` is set by the store). A child whose enqueue key is
    /// held returns the holding job, marked deduplicated, and is not counted.
    pub children: Vec<NewJob>,
    /// The children's enqueue-key window, in milliseconds.
    pub key_window_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// A batch and the children an operation added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchAdded {
    /// The batch after the operation.
    pub batch: BatchRow,
    /// The children, in the order given (deduplicated ones included, as the holder).
    pub children: Vec<Enqueued>,
}

/// How many shards a batch's counts are split over: a child's shard is its job id modulo
/// this. Part of the stored data's meaning: changing it needs a migration.
pub const SHARDS: i64 = 16;

/// The shard of a batch's child.
pub fn shard_of(job_id: i64) -> i32 {
    job_id.rem_euclid(SHARDS) as i32
}

/// Changes of one shard's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShardCount {
    /// The shard.
    pub shard: i32,
    /// Change of its children.
    pub total: i64,
    /// Change of its completed children.
    pub completed: i64,
    /// Change of its dead children.
    pub dead: i64,
    /// Change of its cancelled children.
    pub cancelled: i64,
}

impl ShardCount {
    fn is_zero(&self) -> bool {
        self.total == 0 && self.completed == 0 && self.dead == 0 && self.cancelled == 0
    }

    /// Whether children of this shard reached a final state (not only left one).
    fn finishes(&self) -> bool {
        self.completed > 0 || self.dead > 0 || self.cancelled > 0
    }
}

/// Move a batch's shard counts, in one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchCount {
    /// The batch.
    pub batch_id: i64,
    /// The changes, one per shard, in shard order.
    pub shards: Vec<ShardCount>,
}

/// Seal an open batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchSeal {
    /// The batch.
    pub batch_id: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Mark a sealed batch finished with the successor just enqueued.
#[derive(Debug, Clone, Copy)]
pub struct BatchFinish {
    /// The batch.
    pub batch_id: i64,
    /// The successor.
    pub successor_job_id: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// List batches, newest first, with keyset paging.
#[derive(Debug, Clone, Default)]
pub struct BatchList {
    /// Only this state.
    pub state: Option<BatchState>,
    /// Only batches created by this principal.
    pub principal: Option<String>,
    /// Only ids below this one (the last id of the previous page).
    pub before_id: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

/// Read a batch's children in id order, a page at a time.
#[derive(Debug, Clone, Copy)]
pub struct BatchChildren {
    /// The batch.
    pub batch_id: i64,
    /// Only ids above this one (the last id of the previous page).
    pub after_id: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

/// The count changes of a set of job transitions, by batch and shard.
#[derive(Debug, Clone, Default)]
pub struct BatchTally {
    counts: BTreeMap<i64, BTreeMap<i32, ShardCount>>,
}

impl BatchTally {
    /// Counts a job that reached `state` (nothing unless it is a child and `state` final).
    pub fn finished(&mut self, job_id: i64, batch_id: Option<i64>, state: JobState) {
        self.add(job_id, batch_id, state, 1);
    }

    /// Counts a child that left the final state `was` (an operator's retry).
    pub fn reopened(&mut self, job_id: i64, batch_id: Option<i64>, was: JobState) {
        self.add(job_id, batch_id, was, -1);
    }

    fn add(&mut self, job_id: i64, batch_id: Option<i64>, state: JobState, by: i64) {
        let Some(batch_id) = batch_id else { return };
        if !state.is_finished() {
            return;
        }
        let shard = shard_of(job_id);
        let c = self
            .counts
            .entry(batch_id)
            .or_default()
            .entry(shard)
            .or_insert(ShardCount {
                shard,
                ..ShardCount::default()
            });
        match state {
            JobState::Completed => c.completed += by,
            JobState::Dead => c.dead += by,
            _ => c.cancelled += by,
        }
    }

    /// The changes of each batch, in batch id order, without shards left unchanged.
    fn into_counts(self) -> impl Iterator<Item = BatchCount> {
        self.counts.into_iter().filter_map(|(batch_id, shards)| {
            let shards: Vec<ShardCount> = shards.into_values().filter(|c| !c.is_zero()).collect();
            (!shards.is_empty()).then_some(BatchCount { batch_id, shards })
        })
    }
}

/// Runs `$op` (on `$tx`) inside a savepoint: a refused creation or add leaves nothing in
/// a caller's transaction that goes on.
macro_rules! in_savepoint {
    ($tx:expr, $op:expr) => {{
        $tx.execute("SAVEPOINT idem_batch", &[]).await?;
        match $op.await {
            Ok(out) => {
                $tx.execute("RELEASE SAVEPOINT idem_batch", &[]).await?;
                Ok(out)
            }
            Err(e) => {
                $tx.execute("ROLLBACK TO SAVEPOINT idem_batch", &[]).await?;
                $tx.execute("RELEASE SAVEPOINT idem_batch", &[]).await?;
                Err(e)
            }
        }
    }};
}

/// Applies `tally` in `tx`, in batch id order; a batch whose shard it completed is read
/// under its lock, and enqueues its successor if that leaves it due. A batch that no
/// longer exists (purged) is skipped.
pub async fn settle<T: StoreTx + ?Sized>(
    tx: &mut T,
    tally: BatchTally,
    now: Option<Timestamp>,
) -> StoreResult<()> {
    for count in tally.into_counts() {
        let finishing: Vec<i32> = count
            .shards
            .iter()
            .filter(|c| c.finishes())
            .map(|c| c.shard)
            .collect();
        let batch_id = count.batch_id;
        let reopens = count.shards.iter().any(|c| !c.finishes());
        let complete = tx.batch_count(count).await?;
        if reopens {
            // A child taken out of a final state holds the batch row too, so a change that
            // is enqueueing the successor meanwhile finishes before this one commits.
            tx.batch_lock(batch_id, false).await?;
        }
        if !complete.iter().any(|s| finishing.contains(s)) {
            continue;
        }
        // The read is a statement of its own, after the lock was granted: it sees what
        // every earlier holder of the batch row committed.
        if tx.batch_lock(batch_id, false).await?
            && let Some(row) = tx.batch_get(batch_id).await?
        {
            finish_if_due(tx, row, now).await?;
        }
    }
    Ok(())
}

/// Creates a batch with its first children, sealed if asked.
pub async fn create<T: StoreTx + ?Sized>(tx: &mut T, p: BatchCreate) -> StoreResult<BatchAdded> {
    in_savepoint!(tx, create_batch(tx, p))
}

async fn create_batch<T: StoreTx + ?Sized>(tx: &mut T, p: BatchCreate) -> StoreResult<BatchAdded> {
    check_spec(&p.batch)?;
    let now = p.batch.now;
    let key_window_ms = p.batch.key_window_ms;
    let batch = tx.batch_insert(p.batch).await?;
    let mut added = BatchAdded {
        batch,
        children: Vec::new(),
    };
    if !p.children.is_empty() {
        let add = BatchAdd {
            batch_id: added.batch.id,
            children: p.children,
            key_window_ms,
            now,
        };
        added = add_children(tx, add).await?;
    }
    if p.seal {
        added.batch = seal(
            tx,
            BatchSeal {
                batch_id: added.batch.id,
                now,
            },
        )
        .await?;
    }
    Ok(added)
}

/// Adds children to an open batch; refused (and nothing written) when it is sealed,
/// finished or missing.
pub async fn add<T: StoreTx + ?Sized>(tx: &mut T, p: BatchAdd) -> StoreResult<BatchAdded> {
    in_savepoint!(tx, add_children(tx, p))
}

async fn add_children<T: StoreTx + ?Sized>(tx: &mut T, p: BatchAdd) -> StoreResult<BatchAdded> {
    let mut children = p.children;
    for child in &mut children {
        if child.follows_batch.is_some() {
            return Err(StoreError::Invalid(
                "a batch's child cannot be another batch's successor".into(),
            ));
        }
        child.batch_id = Some(p.batch_id);
    }
    let insert = JobInsert {
        jobs: children,
        key_window_ms: p.key_window_ms,
        now: p.now,
    };
    let children = crate::enqueue::insert(tx, insert).await?;
    if let Some(taken) = children
        .iter()
        .find(|e| e.deduplicated && e.job.batch_id != Some(p.batch_id))
    {
        // A repeated creation or fan-out: counting none of its children would let this
        // batch finish (and its successor run) before any of them ran.
        return Err(StoreError::Conflict(format!(
            "a child's enqueue key {:?} is held by job {}, {}: this looks like a batch \
             created again; nothing was added (create a batch once, e.g. in the effect \
             transaction that completes the job fanning out, or under an Idempotency-Key)",
            taken.job.enqueue_key.as_deref().unwrap_or_default(),
            taken.job.id,
            match taken.job.batch_id {
                Some(b) => format!("a child of batch {b}"),
                None => "in no batch".to_owned(),
            }
        )));
    }
    let mut totals: BTreeMap<i32, ShardCount> = BTreeMap::new();
    for child in children.iter().filter(|e| !e.deduplicated) {
        let shard = shard_of(child.job.id);
        totals
            .entry(shard)
            .or_insert(ShardCount {
                shard,
                ..ShardCount::default()
            })
            .total += 1;
    }
    let count = BatchCount {
        batch_id: p.batch_id,
        shards: totals.into_values().collect(),
    };
    if !count.shards.is_empty() {
        // Every shard of the batch first, in shard order: a transaction that also
        // completes a child of the batch (a child adding siblings) then holds its shard
        // already, instead of taking it out of order.
        tx.batch_shards_lock(p.batch_id).await?;
        tx.batch_shards_add(count).await?;
    }
    if !tx.batch_lock(p.batch_id, true).await? {
        return Err(closed(tx, p.batch_id).await);
    }
    let batch = read(tx, p.batch_id).await?;
    Ok(BatchAdded { batch, children })
}

/// Seals an open batch and, when every child already finished (or it has none), enqueues
/// its successor. Sealing a sealed or finished batch changes nothing and returns it.
pub async fn seal<T: StoreTx + ?Sized>(tx: &mut T, p: BatchSeal) -> StoreResult<BatchRow> {
    let sealed = tx.batch_seal_row(p).await?;
    let row = read(tx, p.batch_id).await?;
    match sealed {
        true => finish_if_due(tx, row, p.now).await,
        false => Ok(row),
    }
}

/// The batch as this transaction sees it now; `NotFound` when it does not exist.
async fn read<T: StoreTx + ?Sized>(tx: &mut T, batch_id: i64) -> StoreResult<BatchRow> {
    tx.batch_get(batch_id)
        .await?
        .ok_or_else(|| StoreError::not_found(format!("batch {batch_id}")))
}

/// Enqueues the successor of a batch that `row` (read under its lock) shows due, and
/// marks the batch finished with it.
async fn finish_if_due<T: StoreTx + ?Sized>(
    tx: &mut T,
    row: BatchRow,
    now: Option<Timestamp>,
) -> StoreResult<BatchRow> {
    if !row.is_due() {
        return Ok(row);
    }
    let insert = JobInsert {
        jobs: vec![row.successor_due()],
        key_window_ms: row.key_window_ms,
        now,
    };
    let mut successor = crate::enqueue::insert(tx, insert).await?;
    if successor[0].deduplicated && successor[0].job.follows_batch != Some(row.id) {
        // Another job took `batch:{id}:done` (a producer's own key): the batch row's lock
        // and state keep the successor single without the key.
        let mut job = row.successor_due();
        job.enqueue_key = None;
        let insert = JobInsert {
            jobs: vec![job],
            key_window_ms: row.key_window_ms,
            now,
        };
        successor = crate::enqueue::insert(tx, insert).await?;
    }
    let job: &JobRow = &successor[0].job;
    let finish = BatchFinish {
        batch_id: row.id,
        successor_job_id: job.id,
        now,
    };
    if !tx.batch_finish(finish).await? {
        return Err(StoreError::Database(format!(
            "batch {} changed while its row was locked for its successor",
            row.id
        )));
    }
    read(tx, row.id).await
}

/// Why children could not be added to `batch_id`.
async fn closed<T: StoreTx + ?Sized>(tx: &mut T, batch_id: i64) -> StoreError {
    match tx.batch_get(batch_id).await {
        Ok(Some(row)) => StoreError::Conflict(format!(
            "batch {batch_id} is {}; children can be added only while it is open \
             (create another batch, or add before sealing)",
            row.state
        )),
        Ok(None) => StoreError::not_found(format!("batch {batch_id}")),
        Err(e) => e,
    }
}

/// Checks a batch's successors and policy.
fn check_spec(p: &BatchInsert) -> StoreResult<()> {
    if p.on_dead == OnDead::FailureSuccessor && p.failure_successor.is_none() {
        return Err(StoreError::Invalid(
            "on_dead = failure_successor needs a failure successor job".into(),
        ));
    }
    if p.key_window_ms <= 0 {
        return Err(StoreError::Invalid(format!(
            "key_window_ms is {}; it must be positive",
            p.key_window_ms
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_final_states_by_batch_and_shard_and_ignores_the_rest() {
        let mut t = BatchTally::default();
        t.finished(1, Some(2), JobState::Completed);
        t.finished(17, Some(2), JobState::Dead);
        t.finished(3, Some(1), JobState::Cancelled);
        t.finished(4, None, JobState::Completed);
        t.finished(5, Some(3), JobState::Retryable);
        t.reopened(17, Some(2), JobState::Dead);
        let shard = |shard, completed, cancelled| ShardCount {
            shard,
            completed,
            cancelled,
            ..ShardCount::default()
        };
        let counts: Vec<BatchCount> = t.into_counts().collect();
        assert_eq!(
            counts,
            [
                BatchCount {
                    batch_id: 1,
                    shards: vec![shard(3, 0, 1)]
                },
                BatchCount {
                    batch_id: 2,
                    shards: vec![shard(1, 1, 0)]
                },
            ]
        );
        assert_eq!(shard_of(-1), 15);
    }
}
