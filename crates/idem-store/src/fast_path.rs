//! What a store's one-statement completion or failure left to a transaction.
//!
//! A store may complete or fail jobs outside batches in one statement of its own
//! (PostgreSQL on the pool, SQLite in one hop to its writer) and leave alone the children
//! of batches, whose batch counts must move in the same transaction. These functions take
//! what that statement did and run the rest through [`crate::StoreTx`]'s methods, which
//! count the batches: so every store gets the same answer either way. A stale claim is refused by
//! the statement and again by the transaction.

use crate::{Completed, JobComplete, JobCompleteMany, JobFail, JobRow, Store, StoreResult};

/// The ids `done` completed, with those of the leases it left completed in a transaction.
pub async fn complete_many_rest<S: Store + ?Sized>(
    store: &S,
    p: JobCompleteMany,
    done: Vec<Completed>,
) -> StoreResult<Vec<i64>> {
    let mut ids: Vec<i64> = done.iter().map(|c| c.job_id).collect();
    let rest = p.without(&ids);
    if !rest.leases.is_empty() {
        let mut tx = store.begin().await?;
        ids.extend(tx.job_complete_many(rest).await?);
        tx.commit().await?;
    }
    Ok(ids)
}

/// `first`, or, when its statement left the job alone, the completion in a transaction.
pub async fn complete_rest<S: Store + ?Sized>(
    store: &S,
    p: JobComplete,
    first: StoreResult<JobRow>,
) -> StoreResult<JobRow> {
    match first {
        Err(e) if e.is_lease_lost() => {
            let mut tx = store.begin().await?;
            let job = tx.job_complete(p).await?;
            tx.commit().await?;
            Ok(job)
        }
        other => other,
    }
}

/// `first`, or, when its statement left the job alone, the failure in a transaction.
pub async fn fail_rest<S: Store + ?Sized>(
    store: &S,
    p: JobFail,
    first: StoreResult<JobRow>,
) -> StoreResult<JobRow> {
    match first {
        Err(e) if e.is_lease_lost() => {
            let mut tx = store.begin().await?;
            let job = tx.job_fail(p).await?;
            tx.commit().await?;
            Ok(job)
        }
        other => other,
    }
}
