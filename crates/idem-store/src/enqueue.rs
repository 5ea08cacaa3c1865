//! Enqueue with keys: the one orchestration both stores run inside a transaction.
//!
//! The unique index on `idem_enqueue_key (queue, key)` is the only arbiter; nothing reads
//! before it writes. The jobs are inserted first (one statement); then one statement takes
//! the keys of the new jobs (`INSERT … ON CONFLICT DO UPDATE … WHERE` the held key is older
//! than the window, `RETURNING` the jobs that got their key). A job that did not get its
//! key is deleted again in the same transaction, and the job holding the key is returned
//! instead, marked deduplicated. On PostgreSQL a concurrent enqueue of the same key waits
//! on the index entry until the first transaction ends, so two producers never both win.
//! A job inserted claimed (local dispatch) that kept its key has its lease renewed after
//! the keys were taken, so the wait does not eat into it, and its claim is given back if
//! its queue was paused while the keys waited.

use std::collections::{HashMap, HashSet};

use crate::{EnqueueKeyTake, Enqueued, JobInsert, JobRow, StoreError, StoreResult, StoreTx};

/// Inserts `params.jobs` in `tx`, deduplicating by enqueue key; results in input order.
pub async fn insert<T: StoreTx + ?Sized>(
    tx: &mut T,
    mut params: JobInsert,
) -> StoreResult<Vec<Enqueued>> {
    if !params.has_keys() {
        let rows = tx.job_insert_rows(params).await?;
        return Ok(rows.into_iter().map(Enqueued::new).collect());
    }
    // The same (queue, key) twice in one batch: the later ones return the first's job.
    let mut first_of: HashMap<(String, String), usize> = HashMap::new();
    let mut source: Vec<Source> = Vec::with_capacity(params.jobs.len());
    let mut unique = Vec::with_capacity(params.jobs.len());
    for job in std::mem::take(&mut params.jobs) {
        let Some(key) = job.enqueue_key.clone() else {
            source.push(Source::Row(unique.len()));
            unique.push(job);
            continue;
        };
        match first_of.entry((job.queue.clone(), key)) {
            std::collections::hash_map::Entry::Occupied(e) => source.push(Source::Same(*e.get())),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(unique.len());
                source.push(Source::Row(unique.len()));
                unique.push(job);
            }
        }
    }
    let window_ms = params.key_window_ms;
    let now = params.now;
    let claims: Vec<Option<i64>> = unique
        .iter()
        .map(|j| j.claim.as_ref().map(|c| c.lease_ms))
        .collect();
    let unique_keys: Vec<Option<String>> = unique.iter().map(|j| j.enqueue_key.clone()).collect();
    let rows = tx
        .job_insert_rows(JobInsert {
            jobs: unique,
            ..params
        })
        .await?;
    let mut keys: Vec<(String, String, i64)> = rows
        .iter()
        .zip(unique_keys)
        .filter_map(|(row, key)| Some((row.queue.clone(), key?, row.id)))
        .collect();
    // One order for every transaction, so two enqueues taking overlapping keys wait on
    // each other instead of deadlocking.
    keys.sort();
    let taken = tx
        .enqueue_key_take(EnqueueKeyTake {
            keys: keys.clone(),
            window_ms,
            now,
        })
        .await?;
    let taken: HashSet<i64> = taken.into_iter().collect();
    // Each job that lost its key → the key it lost.
    let lost: HashMap<i64, (String, String)> = keys
        .into_iter()
        .filter(|(_, _, id)| !taken.contains(id))
        .map(|(q, k, id)| (id, (q, k)))
        .collect();
    let mut results: Vec<Enqueued> = rows.into_iter().map(Enqueued::new).collect();
    renew_claims(tx, &mut results, &claims, &lost, now).await?;
    if !lost.is_empty() {
        let holders: HashMap<(String, String), i64> = tx
            .enqueue_key_find(lost.values().cloned().collect())
            .await?
            .into_iter()
            .map(|(q, k, id)| ((q, k), id))
            .collect();
        tx.job_delete(lost.keys().copied().collect()).await?;
        let held: HashMap<i64, JobRow> = tx
            .job_get_many(holders.values().copied().collect())
            .await?
            .into_iter()
            .map(|j| (j.id, j))
            .collect();
        for r in results.iter_mut() {
            let Some(key) = lost.get(&r.job.id) else {
                continue;
            };
            let holder = holders
                .get(key)
                .and_then(|id| held.get(id))
                .ok_or_else(|| {
                    StoreError::Database(format!(
                        "enqueue key {:?} of queue {:?} is held but its job is gone",
                        key.1, key.0
                    ))
                })?;
            *r = Enqueued {
                job: holder.clone(),
                deduplicated: true,
            };
        }
    }
    Ok(source
        .into_iter()
        .map(|s| match s {
            Source::Row(i) => results[i].clone(),
            Source::Same(i) => Enqueued {
                job: results[i].job.clone(),
                deduplicated: true,
            },
        })
        .collect())
}

/// Renews, once more, the leases of the jobs inserted claimed that kept their keys: the
/// statements taking the keys may have waited for another enqueue's transaction, and a
/// lease must run from (about) the commit that hands the job to its worker, not from
/// the insert. Then gives back the claims whose queue was paused meanwhile. `claims[i]` is the lease of `results[i]`'s claim, if it was inserted
/// claimed.
async fn renew_claims<T: StoreTx + ?Sized>(
    tx: &mut T,
    results: &mut [Enqueued],
    claims: &[Option<i64>],
    lost: &HashMap<i64, (String, String)>,
    now: Option<crate::Timestamp>,
) -> StoreResult<()> {
    let mut by_lease: HashMap<i64, Vec<crate::LeaseToken>> = HashMap::new();
    for (r, lease_ms) in results.iter().zip(claims) {
        // A job of a paused queue was inserted unclaimed: it holds no lease.
        let claimed = r.job.state == crate::JobState::Running && !lost.contains_key(&r.job.id);
        if let Some(ms) = lease_ms.filter(|_| claimed) {
            by_lease.entry(ms).or_default().push(r.job.lease_token());
        }
    }
    let position: HashMap<i64, usize> = results
        .iter()
        .enumerate()
        .map(|(i, r)| (r.job.id, i))
        .collect();
    let claimed: Vec<crate::LeaseToken> = by_lease.values().flatten().copied().collect();
    for (lease_ms, leases) in by_lease {
        let renewed = tx
            .job_heartbeat(crate::JobHeartbeat {
                leases,
                lease_ms,
                now,
            })
            .await?;
        for renewal in renewed {
            if let Some(i) = position.get(&renewal.job_id) {
                results[*i].job.lease_expires_at = Some(renewal.lease_expires_at);
            }
        }
    }
    // The insert found the queue not paused, but the keys may have waited since: a pause
    // that committed meanwhile takes the claim back, so no worker starts the job.
    for id in tx.job_unclaim_paused(claimed).await? {
        if let Some(i) = position.get(&id) {
            let job = &mut results[*i].job;
            job.state = crate::JobState::Available;
            job.attempt = 0;
            job.lease_owner = None;
            job.attempted_at = None;
            job.lease_expires_at = None;
        }
    }
    Ok(())
}

/// Where a job of the input gets its result: its own row, or the row of an earlier job
/// of the batch with the same key.
enum Source {
    Row(usize),
    Same(usize),
}

impl std::ops::Deref for Enqueued {
    type Target = crate::JobRow;

    fn deref(&self) -> &crate::JobRow {
        &self.job
    }
}

impl Enqueued {
    /// A freshly inserted job.
    pub fn new(job: crate::JobRow) -> Self {
        Enqueued {
            job,
            deduplicated: false,
        }
    }
}
