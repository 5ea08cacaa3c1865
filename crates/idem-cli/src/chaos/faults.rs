//! The fault driver: while the workers run, it follows the jobs with a progress bar and
//! injects the planned faults at random moments spread over the run: SIGKILLs (at a
//! random moment, or at an armed kill point: inside an effect transaction, or with a
//! completion waiting for the batched completer), SIGSTOPs past the lease then SIGCONT
//! (zombies), and on a PostgreSQL of the run's own, killed backend connections, immediate
//! server restarts and, with a standby, one failover ([`super::failover`]), after which it
//! waits until every worker has completed a job on the new primary.
//!
//! A query that fails (the server is restarting) is simply asked again next tick.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use idem::{Idem, SqlValue};

use super::Plan;
use super::failover::{self, Cluster};
use super::fleet::Fleet;
use super::producer::Produced;
use super::workload::kill::Point;

/// One planned fault.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Kill,
    Zombie,
    Terminate,
    Restart,
    Failover,
}

/// What the faults did.
#[derive(Default)]
pub(crate) struct Done {
    /// One line per fault, for the report.
    pub(super) events: Vec<String>,
    pub(super) kills: usize,
    pub(super) kills_in_tx: usize,
    pub(super) kills_in_completion: usize,
    pub(super) kills_at_random: usize,
    /// Kills that caught a remote call between its intent and its completion.
    pub(super) kills_mid_call: usize,
    /// Jobs running in the killed workers.
    pub(super) jobs_in_killed: i64,
    pub(super) zombies: usize,
    pub(super) terminated: usize,
    pub(super) restarts: usize,
    pub(super) failovers: usize,
    /// The failover's events, all printed.
    pub(super) failover_events: Vec<String>,
    /// What a failover left late: workers not back within [`failover::BOUND`].
    pub(super) late: Vec<String>,
    /// When the run started, for the events' times.
    started: Option<Instant>,
}

impl Done {
    /// Records `line` as an event, at its time from the start of the run.
    fn event(&mut self, line: String) {
        let at = self.started.map(|s| s.elapsed()).unwrap_or_default();
        self.events
            .push(format!("{:5.1} s  {line}", at.as_secs_f64()));
    }

    /// Records `line` as an event of the failover.
    fn failover_event(&mut self, line: String) {
        self.event(line);
        self.failover_events.extend(self.events.last().cloned());
    }
}

/// The moments, from the start of the run, at which the planned faults happen: spread
/// evenly over 10% to 85% of the run, each at a random moment of its slot. Zombies end
/// their window one pause (`pause_for`) before the producer stops (at 80%), since each
/// needs jobs to hold and is paused at least that long, one at a time.
fn schedule(plan: &Plan, pause_for: Duration) -> Vec<(Duration, Fault)> {
    let mut all = Vec::new();
    let start = plan.duration.mul_f64(0.10);
    let mut spread = |n: usize, end: Duration, fault: Fault| {
        let step = end.saturating_sub(start) / u32::try_from(n.max(1)).unwrap_or(1);
        for i in 0..n {
            let at = start + step * i as u32;
            all.push((at + step.mul_f64(rand::random_range(0.0..1.0)), fault));
        }
    };
    let end = plan.duration.mul_f64(0.85);
    let zombies_end = plan.duration.mul_f64(0.80).saturating_sub(pause_for);
    spread(plan.kills, end, Fault::Kill);
    spread(plan.zombies, zombies_end.max(start), Fault::Zombie);
    spread(plan.terminations, end, Fault::Terminate);
    spread(plan.restarts, end, Fault::Restart);
    if plan.failover.is_some() {
        // While the producer still has a third of its jobs to enqueue, so that every
        // worker has jobs to come back to.
        let at = plan.duration.mul_f64(rand::random_range(0.35..0.55));
        all.push((at, Fault::Failover));
    }
    all.sort_by_key(|(at, _)| *at);
    all
}

/// A paused worker, by name (kills renumber the fleet).
struct Paused {
    name: String,
    since: Instant,
    /// The jobs it held when it stopped.
    held: i64,
}

/// The zombie of the moment, if any, and how long each stays paused at least.
struct Zombie {
    paused: Option<Paused>,
    at_least: Duration,
}

impl Zombie {
    /// Wakes the paused worker once every job it held has been taken over (so each
    /// commit it then tries is stale); after twice its pause, once some have (the rest
    /// wait behind its own stalled effect transactions, which PostgreSQL ends one idle
    /// timeout after another when they queue on one row); after ten times its pause in
    /// any case, on a machine too slow for that. Called on every tick of the driver and
    /// while an armed kill waits, so that a kill does not keep a zombie paused.
    async fn wake_if_due(&mut self, idem: &Idem, fleet: &Fleet, done: &mut Done) {
        let Some(p) = &self.paused else { return };
        let paused = p.since.elapsed();
        if paused < self.at_least {
            return;
        }
        let Ok(holds) = holding(idem, &p.name).await else {
            return;
        };
        let wake = holds == 0
            || (paused >= self.at_least * 2 && holds < p.held)
            || paused >= self.at_least * 10;
        if let Some(p) = self.paused.take_if(|_| wake) {
            resume(fleet, &p.name);
            done.event(format!(
                "SIGCONT {} after {:.1} s: {} of the {} jobs it held taken over",
                p.name,
                paused.as_secs_f64(),
                p.held - holds,
                p.held
            ));
        }
    }
}

/// Runs the faults and follows progress until the producer is done, every fault has
/// happened and every job of the run has finished.
pub(super) async fn drive(
    idem: &Idem,
    plan: &Plan,
    fleet: &mut Fleet,
    mut pg: Option<&mut Cluster>,
    sqlite: Option<&Path>,
    produced: &Arc<Produced>,
    expected: usize,
) -> anyhow::Result<Done> {
    let bar = crate::progress::with_template(
        expected as u64,
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} jobs finished {msg}",
    );
    let started = Instant::now();
    let mut done = Done {
        started: Some(started),
        ..Done::default()
    };
    let pause_for = Duration::from_millis(plan.fleet.lease_ms * 2 + 500);
    let mut due: VecDeque<(Duration, Fault)> = schedule(plan, pause_for).into();
    let limit =
        plan.duration + Duration::from_secs(120) + Duration::from_millis(expected as u64 * 20);
    let mut zombie = Zombie {
        paused: None,
        at_least: pause_for,
    };
    let mut zombies: Vec<String> = Vec::new();
    loop {
        let (finished, unfinished) = progress(idem).await.unwrap_or((0, 1));
        bar.set_position(finished as u64);
        bar.set_message(format!(
            "· kills {} · zombies {} · restarts {} · connections killed {}",
            done.kills, done.zombies, done.restarts, done.terminated
        ));
        zombie.wake_if_due(idem, fleet, &mut done).await;
        let quiet = due.is_empty() && zombie.paused.is_none();
        if quiet && produced.done.load(Ordering::SeqCst) && unfinished == 0 {
            break;
        }
        if started.elapsed() > limit {
            bar.abandon();
            if let Some(p) = zombie.paused {
                resume(fleet, &p.name);
            }
            bail!(
                "the run did not finish within {limit:?}: {finished} of {expected} jobs finished"
            );
        }
        let ready = due.front().is_some_and(|(at, f)| {
            let alone = !matches!(f, Fault::Zombie | Fault::Failover);
            started.elapsed() >= *at && (alone || zombie.paused.is_none())
        });
        let next = if ready { due.pop_front() } else { None };
        if let Some((at, fault)) = next {
            match fault {
                Fault::Kill => kill(idem, fleet, &mut zombie, &zombies, &mut done).await?,
                Fault::Zombie => {
                    // A zombie must hold a job to have a commit refused; wait for one to
                    // hold some, for up to half a minute past its moment.
                    let patient = started.elapsed() < at + ZOMBIE_PATIENCE;
                    match pause(idem, fleet, sqlite, pause_for, patient, &mut done).await {
                        Some(p) => {
                            zombies.push(p.name.clone());
                            zombie.paused = Some(p);
                        }
                        None if patient => due.push_front((at, fault)),
                        None => {}
                    }
                }
                Fault::Terminate => terminate(pg.as_deref(), &mut done).await,
                Fault::Restart => restart(pg.as_deref(), &mut done).await?,
                Fault::Failover => fail_over(idem, fleet, pg.as_deref_mut(), &mut done).await?,
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish();
    Ok(done)
}

/// Jobs of the run finished, and not finished.
async fn progress(idem: &Idem) -> anyhow::Result<(i64, i64)> {
    let sql = "SELECT count(*) FILTER (WHERE state IN ('completed', 'dead', 'cancelled')), \
               count(*) FILTER (WHERE state NOT IN ('completed', 'dead', 'cancelled')) \
               FROM idem_job";
    let rows = idem.store().query(sql, &[]).await?;
    match rows.first().map(|r| r.as_slice()) {
        Some([SqlValue::Int(f), SqlValue::Int(u)]) => Ok((*f, *u)),
        other => bail!("unexpected progress row {other:?}"),
    }
}

/// SIGKILLs a worker that is not paused, one that has not been a zombie when there is one
/// (a zombie's count of refused commits since its last report would die with it): in turn
/// at a random moment, at the kill point inside its next effect transaction, and at the
/// next completion it leaves to the batched completer. An armed worker that does not
/// reach its point within 3 s is killed where it stands; the zombie wakes meanwhile when
/// due.
async fn kill(
    idem: &Idem,
    fleet: &mut Fleet,
    zombie: &mut Zombie,
    zombies: &[String],
    done: &mut Done,
) -> anyhow::Result<()> {
    let paused = zombie.paused.as_ref();
    let alive: Vec<usize> = (0..fleet.live.len())
        .filter(|i| paused.is_none_or(|p| fleet.live[*i].0 != p.name))
        .collect();
    let fresh: Vec<usize> = (alive.iter().copied())
        .filter(|i| !zombies.contains(&fleet.live[*i].0))
        .collect();
    let candidates = if fresh.is_empty() { alive } else { fresh };
    let Some(&index) = candidates.get(rand::random_range(0..candidates.len().max(1))) else {
        return Ok(());
    };
    let name = fleet.live[index].0.clone();
    let point = match done.kills % 3 {
        1 => Some(Point::InEffectTx),
        2 => Some(Point::InBatchedCompletion),
        _ => None,
    };
    let mut landed = None;
    if let Some(point) = point {
        fleet.signal(index, point.signal());
        let armed = Instant::now();
        while armed.elapsed() < Duration::from_secs(3) {
            if fleet.died_within(index, Duration::from_millis(50)).await? {
                landed = Some(point);
                break;
            }
            zombie.wake_if_due(idem, fleet, done).await;
        }
    }
    if landed.is_none() && fleet.kill(index).await?.is_none() {
        return Ok(());
    }
    let (jobs, calls) = in_flight(idem, &name).await.unwrap_or((0, 0));
    done.kills += 1;
    done.jobs_in_killed += jobs;
    done.kills_mid_call += usize::from(calls > 0);
    let at = match landed {
        Some(Point::InEffectTx) => {
            done.kills_in_tx += 1;
            "inside an effect transaction"
        }
        Some(Point::InBatchedCompletion) => {
            done.kills_in_completion += 1;
            "with a completion waiting for the batched completer"
        }
        None => {
            done.kills_at_random += 1;
            "at a random moment"
        }
    };
    done.event(format!(
        "SIGKILL {name} {at}: {jobs} jobs and {calls} remote calls in flight"
    ));
    Ok(())
}

/// The jobs `worker` holds (running under its name).
async fn holding(idem: &Idem, worker: &str) -> anyhow::Result<i64> {
    let sql = "SELECT count(*) FROM idem_job WHERE state = 'running' AND lease_owner = $1";
    crate::scratch::scalar(idem, sql, &[worker.into()]).await
}

/// The jobs a dead worker still held, and of those the remote calls in flight (intent
/// in progress).
async fn in_flight(idem: &Idem, worker: &str) -> anyhow::Result<(i64, i64)> {
    let calls = "SELECT count(*) FROM idem_intent i JOIN idem_job j ON j.id = i.job_id \
                 WHERE i.state = 'in_progress' AND j.state = 'running' AND j.lease_owner = $1";
    Ok((
        holding(idem, worker).await?,
        crate::scratch::scalar(idem, calls, &[worker.into()]).await?,
    ))
}

/// SIGSTOPs the worker holding the most leases, for longer than its lease; when none
/// holds one, nobody while `patient` (answers `None`: the caller tries again later), else
/// any. On SQLite a worker stopped inside a write transaction holds the database's one
/// write lock: no one can take its leases over until it resumes, so it is no zombie, just
/// a pause of everyone. Such a stop is undone at once and tried again a moment later, up
/// to [`TRIES`] times, as is one that finds the worker holding no job any more (its jobs
/// finished between the choice and the signal).
async fn pause(
    idem: &Idem,
    fleet: &Fleet,
    sqlite: Option<&Path>,
    pause_for: Duration,
    patient: bool,
    done: &mut Done,
) -> Option<Paused> {
    for tries in 1..=TRIES {
        // Chosen afresh at each try: the one chosen before may hold nothing any more.
        let name = match busiest(idem, fleet).await.ok().flatten() {
            Some(name) => name,
            None if patient => return None,
            None => fleet.live.first()?.0.clone(),
        };
        let index = fleet.live.iter().position(|w| w.0 == name)?;
        let (_, pid) = fleet.signal(index, libc::SIGSTOP)?;
        if !Fleet::stopped(pid).await {
            fleet.signal(index, libc::SIGCONT);
            continue;
        }
        let in_write = match sqlite {
            Some(path) => !writable(path.to_owned()).await,
            None => false,
        };
        // Read once it is stopped: the jobs it held when `busiest` looked may have
        // finished before the signal landed, and a zombie holding none has no commit to
        // be refused.
        let held = match in_write {
            true => 0,
            false => holding(idem, &name).await.unwrap_or(0),
        };
        if held == 0 {
            fleet.signal(index, libc::SIGCONT);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        done.zombies += 1;
        done.event(format!(
            "SIGSTOP {name} (pid {pid}) for at least {} ms, until the jobs it held were taken \
             over, then SIGCONT: a zombie{}",
            pause_for.as_millis(),
            match tries {
                1 => String::new(),
                n => format!(" (stopped holding a job and outside a write transaction at try {n})"),
            }
        ));
        return Some(Paused {
            name,
            since: Instant::now(),
            held,
        });
    }
    None
}

/// How often a zombie is tried for before its fault is given up.
const TRIES: u32 = 40;

/// How long past its moment a zombie waits for a worker that holds a job.
const ZOMBIE_PATIENCE: Duration = Duration::from_secs(30);

/// Whether the SQLite database at `path` can take a write lock within 300 ms.
async fn writable(path: std::path::PathBuf) -> bool {
    let probe = move || -> rusqlite::Result<()> {
        let conn = rusqlite::Connection::open(path)?;
        conn.busy_timeout(Duration::from_millis(300))?;
        conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK")
    };
    matches!(tokio::task::spawn_blocking(probe).await, Ok(Ok(())))
}

fn resume(fleet: &Fleet, name: &str) {
    if let Some(index) = fleet.live.iter().position(|w| w.0 == name) {
        fleet.signal(index, libc::SIGCONT);
    }
}

/// The live worker holding the most leases.
async fn busiest(idem: &Idem, fleet: &Fleet) -> anyhow::Result<Option<String>> {
    let sql = "SELECT lease_owner, count(*) FROM idem_job WHERE state = 'running' \
               GROUP BY lease_owner ORDER BY count(*) DESC";
    let rows = idem.store().query(sql, &[]).await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| match r.first() {
            Some(SqlValue::Text(owner)) => Some(owner.clone()),
            _ => None,
        })
        .find(|o| fleet.live.iter().any(|w| &w.0 == o)))
}

async fn terminate(pg: Option<&Cluster>, done: &mut Done) {
    let Some(pg) = pg.map(Cluster::primary) else {
        return;
    };
    match pg.terminate_backends(3).await {
        Ok(n) => {
            done.terminated += n;
            done.event(format!("pg_terminate_backend on {n} connections"));
        }
        Err(e) => done.event(format!("pg_terminate_backend failed: {e:#}")),
    }
}

async fn restart(pg: Option<&Cluster>, done: &mut Done) -> anyhow::Result<()> {
    let Some(pg) = pg.map(Cluster::primary) else {
        return Ok(());
    };
    let down = pg.restart_immediate().await?;
    done.restarts += 1;
    done.event(format!(
        "PostgreSQL restarted in immediate mode (crash recovery), answering again after {} ms",
        down.as_millis()
    ));
    Ok(())
}

/// Fails over to the standby, then waits until every live worker has completed a job on
/// the new primary (no zombie is paused meanwhile: the driver holds a failover back while
/// one is), and reports how long each took and how many connections the workers had
/// refused on the standby while it was in recovery.
async fn fail_over(
    idem: &Idem,
    fleet: &Fleet,
    pg: Option<&mut Cluster>,
    done: &mut Done,
) -> anyhow::Result<()> {
    let Some(cluster) = pg else { return Ok(()) };
    let refused_before = fleet.logs_containing(REFUSED);
    let switch = cluster
        .fail_over(&mut |line| done.failover_event(line))
        .await?;
    done.failovers += 1;
    let names: Vec<String> = fleet.live.iter().map(|w| w.0.clone()).collect();
    let back = failover::workers_back(idem, &names, switch.promoted_at).await;
    let refused = fleet
        .logs_containing(REFUSED)
        .saturating_sub(refused_before);
    let first = back.values().min().copied().unwrap_or_default();
    let last = back.values().max().copied();
    let since_crash = |d: Duration| (switch.no_primary + d).as_millis();
    match last.filter(|_| back.len() == names.len()) {
        Some(last) => done.failover_event(format!(
            "jobs completing again {} ms after the primary stopped; every worker ({}) had \
             completed one {} ms after the promotion ({} ms after the stop; bound {} s); \
             the workers refused {refused} connections to the standby in recovery",
            since_crash(first),
            names.len(),
            last.as_millis(),
            since_crash(last),
            failover::BOUND.as_secs()
        )),
        None => {
            let missing: Vec<&String> = names.iter().filter(|n| !back.contains_key(*n)).collect();
            let line = format!(
                "workers not back within {} s of the promotion: {missing:?}",
                failover::BOUND.as_secs()
            );
            done.late.push(line.clone());
            done.failover_event(line);
        }
    }
    Ok(())
}

/// What a worker logs (idem-postgres's `primary.rs`) when its store refuses a connection
/// to a server in recovery.
const REFUSED: &str = "connection refused: the PostgreSQL server is in recovery";
