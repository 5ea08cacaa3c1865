//! The elector: the maintenance duties (rescue, purge) run in one process at a time, the
//! one elected through the store's leadership row (`idem_store::leader`), as River's
//! elector does. Each process that may lead runs one; it publishes the leadership it
//! holds (or `None`) on a watch channel that the duties follow.
//!
//! What must stay true: a leader renews every third of its lease and steps down (sends
//! `None`) as soon as a renewal is refused, or once its lease has run out by its own
//! monotonic clock while the store cannot be reached; a follower tries again every third
//! of a lease, or as the leader's lease ends when that is sooner, so leadership moves
//! within one lease (plus one try) of the leader's death, and within a third of a lease
//! of a leader's resignation (a leader that stops resigns); no call to the store waits
//! longer than a lease, so a stalled database or row never holds up a shutdown for
//! longer. None of this is what keeps two leaders from acting at once: each duty's
//! transaction checks the leadership and holds it to its commit
//! (`StoreTx::leader_check`).

use std::time::{Duration, Instant};

use idem_store::{LeaderElect, LeaderRenew, LeaderToken, Leadership, StoreError};
use tokio::sync::watch;

use crate::client::Idem;
use crate::error::IdemError;

/// The leadership row of the maintenance duties.
pub(crate) const MAINTENANCE: &str = "maintenance";

/// The candidate name of one elector of `owner`: the worker's name and a random
/// instance id, so that processes given the same name (replicas of one configuration)
/// and a restarted process are different candidates, and none takes another's
/// leadership for its own.
pub(crate) fn candidate(owner: &str) -> String {
    let owner: String = owner.chars().take(200).collect();
    format!("{owner} #{:016x}", rand::random::<u64>())
}

/// The elector, as its owner configures it.
pub(crate) struct Elector {
    /// The client whose store holds the leadership row.
    pub(crate) idem: Idem,
    /// The candidate's name ([`candidate`]).
    pub(crate) holder: String,
    /// How long a leadership lasts unless renewed.
    pub(crate) ttl: Duration,
}

/// The leadership this process holds, and until when by its own clock.
struct Held {
    token: LeaderToken,
    until: Instant,
}

impl Elector {
    /// Takes part in the election until `stop` changes, publishing on `leading` the
    /// leadership held; resigns it on the way out.
    pub(crate) async fn run(
        self,
        mut stop: watch::Receiver<bool>,
        leading: watch::Sender<Option<LeaderToken>>,
    ) {
        let mut held: Option<Held> = None;
        loop {
            let next = match held.take() {
                Some(h) => self.keep(h, &mut held, &leading).await,
                None => self.try_to_lead(&mut held, &leading).await,
            };
            tokio::select! {
                _ = tokio::time::sleep(next) => {},
                _ = stop.changed() => break,
            }
        }
        leading.send_replace(None);
        if let Some(h) = held {
            self.resign(h.token).await;
        }
    }

    /// Renews the leadership `h`; answers when to act next.
    async fn keep(
        &self,
        h: Held,
        held: &mut Option<Held>,
        leading: &watch::Sender<Option<LeaderToken>>,
    ) -> Duration {
        let asked = Instant::now();
        let renew = LeaderRenew {
            token: h.token.clone(),
            ttl_ms: millis(self.ttl),
            now: self.idem.clock.now(),
        };
        match self.bounded(self.idem.store.leader_renew(renew)).await {
            Ok(l) => {
                *held = Some(Held {
                    token: h.token,
                    until: asked + left(&l),
                });
                self.ttl / 3
            }
            Err(StoreError::LeadershipLost { .. }) => {
                tracing::info!(worker = %self.holder, fence = h.token.fence, "maintenance leadership lost");
                leading.send_replace(None);
                Duration::ZERO
            }
            Err(e) => {
                tracing::warn!(worker = %self.holder, error = %e, "maintenance leadership not renewed; will retry");
                if Instant::now() >= h.until {
                    tracing::info!(worker = %self.holder, "maintenance leadership ran out");
                    leading.send_replace(None);
                } else {
                    *held = Some(h);
                }
                self.retry_after()
            }
        }
    }

    /// Stands for election; answers when to act next.
    async fn try_to_lead(
        &self,
        held: &mut Option<Held>,
        leading: &watch::Sender<Option<LeaderToken>>,
    ) -> Duration {
        let asked = Instant::now();
        let elect = LeaderElect {
            name: MAINTENANCE.to_owned(),
            holder: self.holder.clone(),
            ttl_ms: millis(self.ttl),
            now: self.idem.clock.now(),
        };
        match self.bounded(self.idem.store.leader_elect(elect)).await {
            // Its own name in force: elected now, or by an earlier try whose answer was lost.
            Ok(l) if l.holder == self.holder && l.current() => {
                tracing::info!(worker = %self.holder, fence = l.fence, "elected to run the maintenance duties");
                leading.send_replace(Some(l.token()));
                *held = Some(Held {
                    token: l.token(),
                    until: asked + left(&l),
                });
                self.ttl / 3
            }
            // Another leads: try again as its lease ends, or in a third of a lease (it
            // may resign before).
            Ok(l) => left(&l).min(self.ttl / 3) + self.retry_after() / 4,
            Err(e) => {
                tracing::warn!(worker = %self.holder, error = %e, "maintenance election failed; will retry");
                self.retry_after()
            }
        }
    }

    /// Ends the leadership now, so that another process is elected at its next try.
    async fn resign(&self, token: LeaderToken) {
        let renew = LeaderRenew {
            token,
            ttl_ms: 0,
            now: self.idem.clock.now(),
        };
        if let Err(e) = self.bounded(self.idem.store.leader_renew(renew)).await {
            tracing::debug!(worker = %self.holder, error = %e, "maintenance leadership not resigned; it runs out");
        }
    }

    /// `call` to the store, given up (as unavailable) after a lease: a row or a server
    /// that stalls it must not hold up the elector's loop or its owner's shutdown.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = idem_store::StoreResult<T>>,
    ) -> idem_store::StoreResult<T> {
        match tokio::time::timeout(self.ttl, call).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError::Unavailable(format!(
                "the maintenance leadership's statement did not answer within {:?}",
                self.ttl
            ))),
        }
    }

    /// The pause after a failed try: a tenth of the lease.
    fn retry_after(&self) -> Duration {
        self.ttl / 10
    }
}

/// How long `l` lasts from its `now`.
fn left(l: &Leadership) -> Duration {
    (l.expires_at - l.now).to_std().unwrap_or_default()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Waits until `leading` holds a leadership (answered), or `stop` changes (`None`).
pub(crate) async fn led(
    leading: &mut watch::Receiver<Option<LeaderToken>>,
    stop: &mut watch::Receiver<bool>,
) -> Option<LeaderToken> {
    loop {
        if let Some(token) = leading.borrow_and_update().clone() {
            return Some(token);
        }
        tokio::select! {
            changed = leading.changed() => if changed.is_err() { return None },
            _ = stop.changed() => return None,
        }
    }
}

/// Whether `e` says the leadership was lost (the duty waits for the next election).
pub(crate) fn lost(e: &IdemError) -> bool {
    matches!(e, IdemError::Store(StoreError::LeadershipLost { .. }))
}

#[cfg(test)]
mod tests {
    use idem_store::{InsertClaim, JobInsert, JobState, NewJob, PurgeTarget};
    use idem_store_tests::TestDb;

    use super::*;

    /// Waits until `t` has passed on the client's (here the database's) clock.
    async fn until_past(idem: &Idem, t: idem_store::Timestamp) {
        while idem.now().await.expect("now") <= t {
            tokio::task::yield_now().await;
        }
    }

    async fn elect(db: &TestDb, holder: &str, ttl_ms: i64) -> Leadership {
        let params = LeaderElect {
            name: MAINTENANCE.to_owned(),
            holder: holder.to_owned(),
            ttl_ms,
            now: None,
        };
        db.store.leader_elect(params).await.expect("elect")
    }

    /// The duties' writes go through the leadership check: a deposed leader's rescue
    /// and purge are refused and move nothing; the leader in force rescues.
    #[tokio::test]
    async fn a_deposed_leader_s_rescue_and_purge_are_refused() {
        let db = TestDb::sqlite().await;
        let idem = Idem::from_store(db.store.clone());
        let orphan = NewJob {
            claim: Some(InsertClaim {
                worker: "dead".to_owned(),
                lease_ms: 1,
            }),
            ..NewJob::new("noop", "default", serde_json::json!({}), 25)
        };
        let insert = JobInsert {
            jobs: vec![orphan],
            ..JobInsert::default()
        };
        let job = db
            .store
            .job_insert(insert)
            .await
            .expect("insert")
            .remove(0)
            .job;
        until_past(&idem, job.lease_expires_at.expect("leased")).await;

        let old = elect(&db, "a", 1).await;
        assert_eq!(old.holder, "a");
        until_past(&idem, old.expires_at).await;
        let new = elect(&db, "b", 60_000).await;
        assert_eq!((new.holder.as_str(), new.fence), ("b", 2));

        let (old, new) = (old.token(), new.token());
        let refused = idem.rescue_capped(None, Some(&old)).await;
        assert!(refused.as_ref().is_err_and(lost), "{refused:?}");
        let now = idem.now().await.expect("now");
        let purge =
            |token| idem.purge_while(PurgeTarget::FinishedJobs, now, 10, token, |_| {}, || true);
        let refused = purge(Some(&old)).await;
        assert!(refused.as_ref().is_err_and(lost), "{refused:?}");
        let row = db.store.job_get(job.id).await.expect("get").expect("job");
        assert_eq!(
            row.state,
            JobState::Running,
            "the deposed leader moved nothing"
        );

        let rescued = idem.rescue_capped(None, Some(&new)).await;
        assert_eq!(
            rescued.expect("rescue").len(),
            1,
            "the leader in force rescues"
        );
        purge(Some(&new)).await.expect("the leader in force purges");
    }
}
