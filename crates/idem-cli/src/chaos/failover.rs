//! The failover fault: the run's PostgreSQL as a primary and a streaming standby
//! ([`Cluster`]), and mid-run the primary stopped hard, the standby promoted, and the
//! workers followed until each has completed a job on the new primary.
//!
//! How the workers reach the new primary: the address moves. Workers, producer and
//! checker know one URL, the primary's port; at the failover the standby is started on
//! that port (what a virtual IP, a DNS name or a pooler does in production) while still in
//! recovery, and promoted a moment later. The workers' pools keep reconnecting with their
//! backoff; a connection that reaches the standby before its promotion is refused by the
//! store (idem works on a primary only: `idem-postgres`'s `primary.rs`), which the
//! workers' logs show. ARCHITECTURE.md ("Failover") says why this and not a list of hosts.
//!
//! The standby lags on purpose before the primary dies: its WAL receiver is paused
//! ([`LAG`]) and then killed with the primary. A synchronous standby
//! (`synchronous_standby_names`, `synchronous_commit = on`) makes every commit wait for
//! it, so the commits of that moment were never acknowledged and none is lost; an
//! asynchronous one (`--async-standby`) lets them be acknowledged and loses them, which
//! the checker counts.
//!
//! What must stay true: two servers never accept writes on the run's address at once
//! (the old primary is stopped before the standby starts there, and never started
//! again), and every worker is back within [`BOUND`] of the promotion, or the run fails.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use idem::{Idem, SqlValue};

use super::postgres::OwnPostgres;

/// The `application_name` of the standby, which `synchronous_standby_names` lists.
const STANDBY_NAME: &str = "idem_standby";
/// How long the standby's WAL receiver is paused before the primary dies.
pub(super) const LAG: Duration = Duration::from_millis(1000);
/// How long the standby stays in recovery on the moved address before its promotion.
const HOLD: Duration = Duration::from_millis(1000);
/// How long after the promotion every worker must have completed a job again.
pub(super) const BOUND: Duration = Duration::from_secs(60);
/// How long the standby may take to catch up with the primary at the start.
const CATCH_UP: Duration = Duration::from_secs(60);

/// Makes the standby synchronous (every commit waits until the standby has flushed it),
/// with [`RELOAD`]. `ALTER SYSTEM` runs alone: not in a transaction block.
const SYNCHRONOUS: &str = "ALTER SYSTEM SET synchronous_standby_names = 'idem_standby'";
/// Reloads the server's configuration.
const RELOAD: &str = "SELECT pg_reload_conf()";
/// The standby's replication state as the primary sees it: `sync`, `async` or none.
const SYNC_STATE: &str = "SELECT coalesce((SELECT sync_state FROM pg_stat_replication \
                          WHERE application_name = 'idem_standby' AND state = 'streaming'), '')";
/// The standby's WAL receiver process, while it streams.
const WAL_RECEIVER: &str = "SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'";
/// The server's clock, in seconds since the epoch.
const NOW: &str = "SELECT extract(epoch FROM now())::float8";
/// The first completion of each worker since `$1` (seconds since the epoch).
const BACK: &str = "SELECT lease_owner, extract(epoch FROM min(finalized_at))::float8 \
                    FROM idem_job WHERE finalized_at >= to_timestamp($1) AND lease_owner IS NOT NULL \
                    GROUP BY lease_owner";

/// The run's PostgreSQL: a primary, and for a failover run a standby of it.
pub(crate) struct Cluster {
    primary: OwnPostgres,
    standby: Option<OwnPostgres>,
    /// Servers stopped for good (a failed primary), removed at the end.
    gone: Vec<OwnPostgres>,
    synchronous: bool,
}

/// How a failover went, as the fault driver measured it.
pub(crate) struct Switch {
    /// From the primary's hard stop to the standby's promotion.
    pub(crate) no_primary: Duration,
    /// The server's clock at the promotion, in seconds since the epoch.
    pub(crate) promoted_at: f64,
}

impl Cluster {
    /// Starts a primary, and with `standby` a streaming standby of it, synchronous unless
    /// `asynchronous`, caught up before this returns.
    pub(crate) async fn start(standby: bool, asynchronous: bool) -> anyhow::Result<Cluster> {
        let primary = OwnPostgres::start().await?;
        let mut cluster = Cluster {
            primary,
            standby: None,
            gone: Vec::new(),
            synchronous: standby && !asynchronous,
        };
        if standby {
            let s = cluster.primary.standby(STANDBY_NAME).await?;
            cluster.standby = Some(s);
            if cluster.synchronous {
                cluster.primary.execute(SYNCHRONOUS).await?;
                cluster.primary.execute(RELOAD).await?;
            }
            cluster.caught_up().await?;
        }
        Ok(cluster)
    }

    /// The server that is the primary now.
    pub(crate) fn primary(&self) -> &OwnPostgres {
        &self.primary
    }

    /// Whether a standby waits for a failover.
    pub(crate) fn has_standby(&self) -> bool {
        self.standby.is_some()
    }

    /// What the run's database is, for its first lines.
    pub(crate) fn describe(&self) -> String {
        match (&self.standby, self.synchronous) {
            (None, _) => "no standby".into(),
            (Some(s), true) => format!("a synchronous standby on port {}", s.port()),
            (Some(s), false) => format!("an asynchronous standby on port {}", s.port()),
        }
    }

    /// Waits until the primary sees the standby streaming, as `sync` when synchronous.
    async fn caught_up(&self) -> anyhow::Result<()> {
        let want = if self.synchronous { "sync" } else { "async" };
        let started = Instant::now();
        loop {
            let state: String = self.primary.scalar(SYNC_STATE).await?;
            if state == want {
                return Ok(());
            }
            if started.elapsed() > CATCH_UP {
                bail!(
                    "the standby is not streaming as {want} after {CATCH_UP:?} (state {state:?})"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The failover: the standby's WAL receiver paused for [`LAG`], the primary stopped
    /// hard and the receiver killed (what it had not received is gone), the standby
    /// started on the primary's port while still in recovery for [`HOLD`], then promoted.
    /// `note` records each step as it happens.
    pub(crate) async fn fail_over(
        &mut self,
        note: &mut impl FnMut(String),
    ) -> anyhow::Result<Switch> {
        // After a restart of the primary the standby streams again only once its WAL
        // receiver has reconnected: fail over from a standby that is streaming.
        self.caught_up().await?;
        let mut standby = self.standby.take().context("no standby to fail over to")?;
        let receiver: i32 = standby.scalar(WAL_RECEIVER).await?;
        signal(receiver, libc::SIGSTOP)?;
        note(format!(
            "standby lagging: its WAL receiver (pid {receiver}) stopped for {} ms; {}",
            LAG.as_millis(),
            match self.synchronous {
                true => "commits on the primary wait for it (synchronous)",
                false => "commits on the primary go on without it (asynchronous)",
            }
        ));
        tokio::time::sleep(LAG).await;
        let crashed = Instant::now();
        self.primary.crash().await?;
        signal(receiver, libc::SIGKILL)?;
        note(format!(
            "primary on port {} stopped hard (pg_ctl -m immediate stop), the standby's WAL \
             receiver killed",
            self.primary.port()
        ));
        standby.crash().await?;
        standby.move_to(self.primary.port()).await?;
        note(format!(
            "standby started on the primary's port {} (the address moves), still in recovery \
             for {} ms: connections there are refused",
            self.primary.port(),
            HOLD.as_millis()
        ));
        tokio::time::sleep(HOLD).await;
        standby.promote().await?;
        let no_primary = crashed.elapsed();
        let promoted_at: f64 = standby.scalar(NOW).await?;
        note(format!(
            "standby promoted: {} ms without a primary",
            no_primary.as_millis()
        ));
        let old = std::mem::replace(&mut self.primary, standby);
        self.gone.push(old);
        Ok(Switch {
            no_primary,
            promoted_at,
        })
    }

    /// Stops the primary and removes every server's directory.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        drop(self.standby);
        drop(self.gone);
        self.primary.stop().await
    }
}

/// Sends `sig` to the server process `pid`.
fn signal(pid: i32, sig: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: kill(2) on a pid read from the server a moment ago; it touches no memory.
    match unsafe { libc::kill(pid, sig) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot signal the standby's WAL receiver (pid {pid})")),
    }
}

/// Each of `workers`' first completion after `since` (seconds since the epoch on the
/// server's clock), as the time from `since`; waits until every one has one, or
/// [`BOUND`] has passed (those missing then are absent from the answer).
pub(crate) async fn workers_back(
    idem: &Idem,
    workers: &[String],
    since: f64,
) -> HashMap<String, Duration> {
    let started = Instant::now();
    let mut back = HashMap::new();
    while started.elapsed() < BOUND + Duration::from_secs(1) {
        if let Ok(rows) = idem.store().query(BACK, &[SqlValue::Real(since)]).await {
            for row in rows {
                if let [SqlValue::Text(owner), SqlValue::Real(at)] = row.as_slice()
                    && workers.contains(owner)
                {
                    back.insert(
                        owner.clone(),
                        Duration::from_secs_f64((at - since).max(0.0)),
                    );
                }
            }
        }
        if workers.iter().all(|w| back.contains_key(w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    back.retain(|_, d| *d <= BOUND);
    back
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_postgres::{PgOptions, PgStore};
    use idem_store::{Store, StoreError};
    use sqlx::Connection;

    /// Waits until the standby has replayed the primary's `idem_job` table.
    async fn replayed(standby: &OwnPostgres) {
        let sql = "SELECT to_regclass('idem_job') IS NOT NULL";
        for _ in 0..300 {
            if standby.scalar::<bool>(sql).await.unwrap() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the standby never replayed the migrations");
    }

    /// A store whose address reaches a standby reads no lease there and writes nothing:
    /// each pooled connection is refused (the store reports it unavailable, naming the
    /// recovery), a write that reaches the standby another way is unavailable too
    /// (SQLSTATE 25006), and once the standby is promoted the same store works on it.
    #[tokio::test]
    async fn a_store_refuses_a_standby_until_it_is_promoted() {
        let cluster = Cluster::start(true, false).await.unwrap();
        let options = || PgOptions {
            max_connections: 2,
            ..PgOptions::default()
        };
        let primary = PgStore::connect(cluster.primary.url(), options())
            .await
            .unwrap();
        primary.migrate().await.unwrap();
        let standby = cluster.standby.as_ref().unwrap();
        replayed(standby).await;
        let store = PgStore::connect(standby.url(), options()).await.unwrap();
        let leases = "SELECT id, fence, lease_owner FROM idem_job";
        match store.query(leases, &[]).await {
            Err(StoreError::Unavailable(msg)) => assert!(msg.contains("in recovery"), "{msg}"),
            other => panic!("a lease read on a standby answered {other:?}"),
        }
        let mut conn = sqlx::PgConnection::connect(standby.url()).await.unwrap();
        let write = sqlx::query("UPDATE idem_job SET fence = fence + 1")
            .execute(&mut conn)
            .await
            .unwrap_err();
        match idem_postgres::interpret_error(write) {
            e @ StoreError::Unavailable(_) => assert!(e.is_retryable()),
            other => panic!("a write on a standby is {other:?}"),
        }
        standby.promote().await.unwrap();
        assert!(store.query(leases, &[]).await.unwrap().is_empty());
    }
}
