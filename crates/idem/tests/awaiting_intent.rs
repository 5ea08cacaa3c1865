//! A job awaiting an intent: written dead when its call's outcome is unknown, put back to
//! run once a reconciler or an operator settles the intent. Whichever side writes last
//! owes the put-back, and owes it in its own transaction: a resolution never commits
//! without it, nor a dead write that finds the intent already settled. Each case breaks
//! the put-back or replays the two writers' race on both stores (on PostgreSQL, one
//! transaction holds its row lock until the other's statement waits for it).

mod common;

use common::awaiting::*;
use common::{client, config, db_clock};
use idem::intent::{OPERATOR_FROM, awaiting_reconciliation};
use idem::{IntentState, Job, JobState, WorkerProtocol};
use idem_store::{Backend, IntentResolve};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, spawn_started};

/// Makes every put-back of a dead job (`dead` → `available`) fail, or stop failing.
async fn refuse_put_back(db: &TestDb, refuse: bool) {
    let statements: &[&str] = match (db.backend, refuse) {
        (Backend::Postgres, true) => &[
            "CREATE FUNCTION test_refuse_put_back() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'put-back refused by the test'; END $$",
            "CREATE TRIGGER test_refuse_put_back BEFORE UPDATE ON idem_job FOR EACH ROW \
             WHEN (OLD.state = 'dead' AND NEW.state = 'available') \
             EXECUTE FUNCTION test_refuse_put_back()",
        ],
        (Backend::Postgres, false) => &["DROP TRIGGER test_refuse_put_back ON idem_job"],
        (Backend::Sqlite, true) => &[
            "CREATE TRIGGER test_refuse_put_back BEFORE UPDATE OF state ON idem_job \
             WHEN OLD.state = 'dead' AND NEW.state = 'available' \
             BEGIN SELECT RAISE(ABORT, 'put-back refused by the test'); END",
        ],
        (Backend::Sqlite, false) => &["DROP TRIGGER test_refuse_put_back"],
    };
    let mut tx = db.store.begin().await.unwrap();
    for sql in statements {
        tx.execute(sql, &[]).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// A resolution whose put-back fails leaves the intent `unknown` (so the next pass or
/// the operator settles it again, with the put-back), never settled with its job dead
/// for good, which no later pass would look at.
async fn a_resolution_never_commits_without_the_put_back_it_owes(db: &TestDb) {
    let (idem, _protocol, job, _unknown) = dead_awaiting_unknown_intent(db).await;

    refuse_put_back(db, true).await;
    let refused = idem.resolve_intent(KEY, applied()).await;
    assert!(refused.is_err(), "the put-back failed: {refused:?}");
    assert_eq!(
        (intent_row(&idem).await.state, state_of(&idem, job.id).await),
        (IntentState::Unknown, JobState::Dead),
        "the resolution committed without its put-back: the job would stay dead for good"
    );

    refuse_put_back(db, false).await;
    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, retried), (IntentState::Completed, true));
    assert_eq!(state_of(&idem, job.id).await, JobState::Available);
}

/// A dead write that finds its intent settled meanwhile, and whose put-back fails, writes
/// nothing: the job is still running under its claim (its lease ends, it is rescued and
/// finds the stored outcome), not dead with nobody left to put it back.
async fn a_dead_write_never_commits_without_the_put_back_it_owes(db: &TestDb) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(
        !retried,
        "the job still runs: there is nothing to put back yet"
    );

    refuse_put_back(db, true).await;
    let refused = protocol.fail(&job, awaiting_reconciliation(&unknown)).await;
    assert!(refused.is_err(), "the put-back failed: {refused:?}");
    assert_eq!(
        state_of(&idem, job.id).await,
        JobState::Running,
        "the dead write committed without its put-back: the job would stay dead for good"
    );

    refuse_put_back(db, false).await;
    let back = protocol
        .fail(&job, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    assert_eq!(back.state, JobState::Available, "{back:?}");
}

/// The job goes dead while a resolution of its intent is in flight (the resolver has
/// read the job as running, so it leaves the put-back to the job): the dead write waits
/// for the resolution, sees it, and puts the job back in its own transaction.
async fn a_dead_write_waits_for_a_resolution_in_flight(db: &TestDb) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    let mut resolver = db.store.begin().await.unwrap();
    let resolve = IntentResolve {
        token: unknown.token(),
        from: OPERATOR_FROM.to_vec(),
        resolution: applied(),
        now: None,
    };
    resolver.intent_resolve(resolve).await.unwrap();

    let (racer_job, error) = (job.clone(), awaiting_reconciliation(&unknown));
    let racer = spawn_started(async move { protocol.fail(&racer_job, error).await }).await;
    assert_waits_for(db, &mut resolver, &racer).await;
    resolver.commit().await.unwrap();

    let written = racer.await.unwrap().unwrap();
    assert_eq!(
        written.state,
        JobState::Available,
        "the job went dead on an intent settled meanwhile, and nobody will put it back"
    );
    assert_eq!(intent_row(&idem).await.state, IntentState::Completed);
}

/// The resolution comes while a dead write is in flight (the job has read its intent as
/// `unknown`, so it leaves the put-back to the resolver): the resolution waits for the
/// dead write, then finds the job dead and puts it back in its own transaction.
async fn a_resolution_waits_for_a_dead_write_in_flight(db: &TestDb) {
    let (idem, _protocol, job, _) = running_with_unknown_intent(db).await;
    // The job's own transaction, statement by statement: the dead write awaiting the
    // intent, then its intent read under the lock that holds resolutions off.
    let mut dying = db.store.begin().await.unwrap();
    let fail = idem_store::JobFail {
        lease: job.lease_token(),
        error: "awaits its intent".into(),
        retry_in_ms: None,
        snooze: false,
        now: None,
    };
    assert_eq!(dying.job_fail(fail).await.unwrap().state, JobState::Dead);
    assert!(dying.job_await_intent(job.id, KEY.into()).await.unwrap());
    let read = dying.intent_lock(KEY.into()).await.unwrap();
    assert_eq!(read.map(|r| r.state), Some(IntentState::Unknown));

    let racer_idem = idem.clone();
    let racer = spawn_started(async move { racer_idem.resolve_intent(KEY, applied()).await }).await;
    assert_waits_for(db, &mut dying, &racer).await;
    dying.commit().await.unwrap();

    let (settled, retried) = racer.await.unwrap().unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(retried, "the resolution found the job dead and put it back");
    assert_eq!(state_of(&idem, job.id).await, JobState::Available);
}

/// A second job of the same logical request meets the first job's `unknown` intent and
/// stops to await it too. The dead-job purge keeps it while the intent is unsettled (the
/// intent is another job's, so only the job's own record of what it awaits can tell),
/// and the resolution puts both jobs back.
async fn every_job_awaiting_an_intent_is_kept_and_put_back(db: &TestDb) {
    let clock = db_clock(db).await;
    let idem = client(db, Some(std::sync::Arc::new(clock.clone())));
    let protocol = WorkerProtocol::new(idem.clone(), config(QUEUE, 1)).unwrap();
    let pay = || Job::new("pay", serde_json::json!({"order": 1})).queue(QUEUE);
    let (first, held) = running_with_intent(&idem, &protocol, pay()).await;
    let unknown = mark_unknown(&idem, &held).await;
    let dead = protocol.fail(&first, awaiting_reconciliation(&unknown));
    assert_eq!(dead.await.unwrap().state, JobState::Dead);

    let (claimed, met) = second_job_meeting(&idem, &protocol).await;
    assert_eq!(met.job_id, first.id);
    let dead = protocol.fail(&claimed, awaiting_reconciliation(&met));
    assert_eq!(dead.await.unwrap().state, JobState::Dead);

    clock.advance(std::time::Duration::from_secs(30 * 86_400));
    let purged = idem.purge(idem::PurgeTarget::DeadJobs, 100, |_| {}).await;
    assert_eq!(
        purged.unwrap(),
        0,
        "both dead jobs await the unsettled intent"
    );

    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, retried), (IntentState::Completed, true));
    for id in [first.id, claimed.id] {
        assert_eq!(state_of(&idem, id).await, JobState::Available, "job {id}");
    }
}

idem_store_tests::store_cases!(
    a_resolution_never_commits_without_the_put_back_it_owes,
    a_dead_write_never_commits_without_the_put_back_it_owes,
    a_dead_write_waits_for_a_resolution_in_flight,
    a_resolution_waits_for_a_dead_write_in_flight,
    every_job_awaiting_an_intent_is_kept_and_put_back,
);
