//! `effect_claim`: the effect key's record commits or rolls back with its transaction,
//! the unique key answers every repeat with the record of the claim that made the
//! effect, and a claim that is not current cannot record a key.

use idem_store::{
    EffectClaim, EffectClaimed, EffectList, JobComplete, JobLock, JobRow, Purge, PurgeTarget,
};

use crate::TestDb;
use crate::fixture::{
    assert_waits_for, at, get, job_in, pg_gate_after_insert, reclaimed, running, spawn_started, t0,
};
use crate::harness::within;

fn claim_of(key: &str, job: &JobRow) -> EffectClaim {
    EffectClaim {
        key: key.into(),
        kind: key.split(':').next().unwrap_or(key).into(),
        lease: job.lease_token(),
        now: Some(at(1_000)),
    }
}

/// A claim rolled back leaves no key; a committed one answers every later claim, of any
/// job, with its record.
pub async fn effect_claim_commits_with_its_transaction(db: &TestDb) {
    let first = running(db, job_in("e1", "thumb"), t0()).await;
    for _ in 0..2 {
        let mut tx = db.store.begin().await.expect("begin");
        tx.job_lock(JobLock::of(first.lease_token()))
            .await
            .expect("lock");
        let got = tx.effect_claim(claim_of("thumbnail:7:640", &first)).await;
        assert_eq!(got.expect("claim"), EffectClaimed::New);
        tx.rollback().await.expect("rollback");
    }
    let mut tx = db.store.begin().await.expect("begin");
    let got = tx.effect_claim(claim_of("thumbnail:7:640", &first)).await;
    assert_eq!(got.expect("claim"), EffectClaimed::New);
    tx.commit().await.expect("commit");
    let other = running(db, job_in("e2", "thumb"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    match tx
        .effect_claim(claim_of("thumbnail:7:640", &other))
        .await
        .expect("claim")
    {
        EffectClaimed::Done(r) => {
            assert_eq!(
                (r.job_id, r.fence, r.created_at),
                (first.id, first.fence, at(1_000))
            );
        }
        EffectClaimed::New => panic!("a committed key must not be claimable again"),
    }
    tx.rollback().await.expect("rollback");
}

/// A claim whose fence is no longer current cannot record a key: `LeaseLost`.
pub async fn effect_claim_refuses_a_stale_claim(db: &TestDb) {
    let current = reclaimed(db, job_in("e3", "mail"), t0()).await;
    let stale = JobRow {
        fence: current.fence - 1,
        ..current.clone()
    };
    let mut tx = db.store.begin().await.expect("begin");
    let err = tx
        .effect_claim(claim_of("mail:1", &stale))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert!(
        tx.effect_claim(claim_of("mail:1", &current))
            .await
            .expect("current")
            .is_new()
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(
        get(db, current.id).await.fence,
        current.fence,
        "the refused claim moved nothing"
    );
}

/// `effect_others` lists the job's committed keys of the same kind other than the one
/// given, and nothing for other jobs or kinds.
pub async fn effect_others_lists_a_jobs_other_keys(db: &TestDb) {
    let job = running(db, job_in("e4", "mail"), t0()).await;
    let other_job = running(db, job_in("e5", "mail"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    for key in ["mail:1:attempt-1", "thumb:9"] {
        tx.effect_claim(claim_of(key, &job)).await.expect("claim");
    }
    tx.commit().await.expect("commit");
    let mut tx = db.store.begin().await.expect("begin");
    let others = tx
        .effect_others(claim_of("mail:1:attempt-2", &job))
        .await
        .expect("others");
    assert_eq!(others, vec!["mail:1:attempt-1".to_owned()]);
    let same = tx
        .effect_others(claim_of("mail:1:attempt-1", &job))
        .await
        .expect("same key");
    assert!(same.is_empty(), "{same:?}");
    let none = tx
        .effect_others(claim_of("mail:1:attempt-2", &other_job))
        .await
        .expect("other job");
    assert!(none.is_empty(), "{none:?}");
    tx.rollback().await.expect("rollback");
}

/// `effect_list` names every key one job recorded, oldest first, with the fence of the
/// claim that recorded it, and none of another job's; `limit` caps the list.
pub async fn effect_list_names_a_jobs_keys(db: &TestDb) {
    let job = running(db, job_in("el1", "mail"), t0()).await;
    let other = running(db, job_in("el2", "mail"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    for (key, holder) in [("thumb:9", &job), ("mail:1", &job), ("mail:2", &other)] {
        tx.effect_claim(claim_of(key, holder)).await.expect("claim");
    }
    tx.commit().await.expect("commit");
    let list = |job_id, limit| db.store.effect_list(EffectList { job_id, limit });
    let keys = list(job.id, 10).await.expect("effect_list");
    let named: Vec<(&str, i64, i64)> = keys
        .iter()
        .map(|k| (k.key.as_str(), k.job_id, k.fence))
        .collect();
    assert_eq!(
        named,
        vec![
            ("mail:1", job.id, job.fence),
            ("thumb:9", job.id, job.fence)
        ]
    );
    assert_eq!(keys[0].created_at, at(1_000));
    assert_eq!(list(job.id, 1).await.expect("limit").len(), 1);
    assert!(list(job.id + 1_000, 10).await.expect("none").is_empty());
}

/// PostgreSQL: an effect claim whose insert met the key of another job, and whose
/// holder was then purged before the claim read it back, claims the key for itself
/// (`New`): a current claim is never answered `LeaseLost`. The gap between the insert
/// and the read is held open with a gate, and the purge commits inside it.
pub async fn effect_claim_survives_its_holder_purged_meanwhile(db: &TestDb) {
    let holder = running(db, job_in("ep1", "thumb"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let first = tx.effect_claim(claim_of("thumbnail:9:64", &holder)).await;
    assert_eq!(first.expect("claim"), EffectClaimed::New);
    // Completed, so the purge may take its key (a job that may run again keeps it).
    let done = JobComplete {
        result: None,
        lease: holder.lease_token(),
        now: None,
    };
    tx.job_complete(done).await.expect("complete the holder");
    tx.commit().await.expect("commit");
    let current = running(db, job_in("ep2", "thumb"), t0()).await;
    let mut gate = pg_gate_after_insert(db, "idem_effect").await;
    let store = db.store.clone();
    let lease = current.lease_token();
    let claim = spawn_started(async move {
        let mut tx = store.begin().await?;
        tx.job_lock(JobLock::of(lease)).await?;
        let claimed = tx
            .effect_claim(claim_of("thumbnail:9:64", &current))
            .await?;
        tx.commit().await?;
        Ok::<_, idem_store::StoreError>(claimed)
    })
    .await;
    assert_waits_for(db, &mut gate, &claim).await;
    let purge = Purge {
        target: PurgeTarget::EffectKeys,
        before: at(10_000),
        limit: 10,
    };
    assert_eq!(db.store.purge(purge).await.expect("purge"), 1);
    gate.commit().await.expect("open the gate");
    let claimed = within(30, "the claim", claim).await.expect("claim task");
    assert_eq!(
        claimed.expect("a current claim is answered"),
        EffectClaimed::New
    );
    let rows = db
        .store
        .query("SELECT job_id FROM idem_effect", &[])
        .await
        .expect("records");
    assert_eq!(rows, vec![vec![lease.job_id.into()]]);
}
