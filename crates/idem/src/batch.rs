//! [`Batch`]: N child jobs and one successor, which the change that finishes the last
//! child enqueues, once, in its own transaction (see `idem_store::batch` for the rules
//! the stores keep); and the client's batch operations and reads.

use idem_store::{
    BatchAdd, BatchAdded, BatchChildren, BatchCreate, BatchInsert, BatchList, BatchRow, BatchSeal,
    JobRow, JobState, OnDead,
};

use crate::client::{Idem, millis};
use crate::error::IdemError;
use crate::job::Job;

/// The most children one call adds (a larger batch is added to in several calls).
pub const MAX_CHILDREN_PER_CALL: usize = 10_000;

/// A batch to create: its successor, its first children, and what runs when children die.
///
/// A batch is sealed when created unless [`Batch::open`] is called: a sealed batch takes
/// no more children, and one with no children finishes at once.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let idem = idem::Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
/// use idem::{Batch, Job};
/// use serde_json::json;
///
/// let report = Job::new("report", json!({"month": "2026-11"}));
/// let batch = Batch::new(report)
///     .children((1..=3).map(|shop| Job::new("tally-shop", json!({"shop": shop}))));
/// let created = idem.batch(batch).await?;
/// assert_eq!(created.batch.total, 3);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    successor: Job,
    failure_successor: Option<Job>,
    children: Vec<Job>,
    seal: bool,
    principal: Option<String>,
}

impl Batch {
    /// A batch whose `successor` runs when every child finished (completed, dead or
    /// cancelled), with the outcomes to read (see [`crate::JobContext::batch`]).
    pub fn new(successor: Job) -> Self {
        Batch {
            successor,
            failure_successor: None,
            children: Vec::new(),
            seal: true,
            principal: None,
        }
    }

    /// Adds a child.
    pub fn child(mut self, job: Job) -> Self {
        self.children.push(job);
        self
    }

    /// Adds children.
    pub fn children(mut self, jobs: impl IntoIterator<Item = Job>) -> Self {
        self.children.extend(jobs);
        self
    }

    /// When any child is dead, `job` runs instead of the successor.
    pub fn on_dead(mut self, job: Job) -> Self {
        self.failure_successor = Some(job);
        self
    }

    /// Keeps the batch open: more children can be added ([`Idem::batch_add`]) until it
    /// is sealed ([`Idem::batch_seal`]); it cannot finish before.
    pub fn open(mut self) -> Self {
        self.seal = false;
        self
    }

    /// Records the HTTP API principal creating the batch (and its jobs).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// The store's creation of this batch, checked, with `idem`'s windows and clock.
    pub(crate) fn into_create(self, idem: &Idem) -> Result<BatchCreate, IdemError> {
        check_count(self.children.len())?;
        let principal = self.principal;
        let with_principal = |job: Job| match &principal {
            Some(p) => job.principal(p.clone()),
            None => job,
        };
        let successor = spec(with_principal(self.successor), "successor")?;
        let failure_successor = self
            .failure_successor
            .map(|j| spec(with_principal(j), "failure successor"))
            .transpose()?;
        let children = idem
            .insert_params(self.children.into_iter().map(with_principal).collect())?
            .jobs;
        Ok(BatchCreate {
            batch: BatchInsert {
                on_dead: match failure_successor {
                    Some(_) => OnDead::FailureSuccessor,
                    None => OnDead::Summary,
                },
                successor,
                failure_successor,
                key_window_ms: millis(idem.retention.enqueue_keys),
                principal,
                now: idem.clock.now(),
            },
            children,
            seal: self.seal,
        })
    }
}

/// A successor job checked as an enqueue would check it; its enqueue key is the batch's.
fn spec(job: Job, what: &str) -> Result<idem_store::NewJob, IdemError> {
    if job.key().is_some() {
        return Err(IdemError::InvalidJob(format!(
            "the {what} of a batch cannot carry an enqueue key: it is enqueued with \
             `batch:{{batch_id}}:done`, which makes it one per batch"
        )));
    }
    job.into_new()
}

fn check_count(n: usize) -> Result<(), IdemError> {
    if n > MAX_CHILDREN_PER_CALL {
        return Err(IdemError::InvalidJob(format!(
            "{n} children in one call; add at most {MAX_CHILDREN_PER_CALL} at a time \
             (create the batch open with Batch::open, add the rest with batch_add, then seal)"
        )));
    }
    Ok(())
}

/// A batch with how many of its children are in each state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BatchStatus {
    /// The batch and its counts.
    pub batch: BatchRow,
    /// Children per state (states with none left out): running, waiting, and so on.
    pub states: Vec<(JobState, i64)>,
}

impl BatchStatus {
    /// Children in `state`.
    pub fn count(&self, state: JobState) -> i64 {
        self.states
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    }
}

impl Idem {
    /// Creates a batch with its first children (sealed unless [`Batch::open`]); all or
    /// nothing is written.
    pub async fn batch(&self, batch: Batch) -> Result<BatchAdded, IdemError> {
        let params = batch.into_create(self)?;
        let added = self.store.batch_create(params).await?;
        self.batch_woken(&added);
        Ok(added)
    }

    /// Creates a batch inside the caller's transaction.
    pub async fn batch_tx(
        &self,
        tx: &mut crate::Tx,
        batch: Batch,
    ) -> Result<BatchAdded, IdemError> {
        let params = batch.into_create(self)?;
        let added = tx.store_tx().batch_create(params).await?;
        tx.waiting(queues_of(&added));
        Ok(added)
    }

    /// Adds children to an open batch; refused when it is sealed or finished.
    pub async fn batch_add(&self, batch_id: i64, jobs: Vec<Job>) -> Result<BatchAdded, IdemError> {
        let params = self.add_params(batch_id, jobs)?;
        let added = self.store.batch_add(params).await?;
        self.batch_woken(&added);
        Ok(added)
    }

    /// Adds children to an open batch inside the caller's transaction.
    pub async fn batch_add_tx(
        &self,
        tx: &mut crate::Tx,
        batch_id: i64,
        jobs: Vec<Job>,
    ) -> Result<BatchAdded, IdemError> {
        let params = self.add_params(batch_id, jobs)?;
        let added = tx.store_tx().batch_add(params).await?;
        tx.waiting(queues_of(&added));
        Ok(added)
    }

    fn add_params(&self, batch_id: i64, jobs: Vec<Job>) -> Result<BatchAdd, IdemError> {
        check_count(jobs.len())?;
        Ok(BatchAdd {
            batch_id,
            children: self.insert_params(jobs)?.jobs,
            key_window_ms: millis(self.retention.enqueue_keys),
            now: self.clock.now(),
        })
    }

    /// Seals a batch: no more children; when every child already finished (or it has
    /// none), its successor is enqueued now. Sealing twice changes nothing.
    pub async fn batch_seal(&self, batch_id: i64) -> Result<BatchRow, IdemError> {
        let seal = BatchSeal {
            batch_id,
            now: self.clock.now(),
        };
        let row = self.store.batch_seal(seal).await?;
        if row.successor_job_id.is_some() {
            self.jobs_waiting([row.successor_due().queue.as_str()]);
        }
        Ok(row)
    }

    /// One batch by id.
    pub async fn batch_get(&self, batch_id: i64) -> Result<Option<BatchRow>, IdemError> {
        Ok(self.store.batch_get(batch_id).await?)
    }

    /// A batch with its children counted by state (one read over its children).
    pub async fn batch_status(&self, batch_id: i64) -> Result<Option<BatchStatus>, IdemError> {
        let Some(batch) = self.store.batch_get(batch_id).await? else {
            return Ok(None);
        };
        let states = self.store.batch_states(batch_id).await?;
        Ok(Some(BatchStatus { batch, states }))
    }

    /// Batches matching the filter, newest first.
    pub async fn batches(&self, filter: BatchList) -> Result<Vec<BatchRow>, IdemError> {
        Ok(self.store.batch_list(filter).await?)
    }

    /// A page of a batch's children in id order (their states, results and errors):
    /// those with ids above `after` (`None` = from the first), at most `limit`.
    pub async fn batch_children(
        &self,
        batch_id: i64,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobRow>, IdemError> {
        let page = BatchChildren {
            batch_id,
            after_id: after,
            limit,
        };
        Ok(self.store.batch_children(page).await?)
    }

    /// Wakes workers for what a creation or an add enqueued.
    fn batch_woken(&self, added: &BatchAdded) {
        self.jobs_waiting(queues_of(added));
    }
}

/// The queues jobs an operation enqueued wait in: its new children's, and its
/// successor's when it finished the batch.
pub(crate) fn queues_of(added: &BatchAdded) -> impl Iterator<Item = &str> {
    let children = added
        .children
        .iter()
        .filter(|c| !c.deduplicated)
        .map(|c| c.job.queue.as_str());
    let successor = added
        .batch
        .successor_job_id
        .map(|_| added.batch.successor.queue.as_str());
    children.chain(successor)
}
