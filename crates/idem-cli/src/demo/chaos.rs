//! The run phase: watches the jobs finish with a progress bar and, meanwhile, does the
//! chaos: SIGKILL one worker at a quarter of the jobs, SIGSTOP the busiest at half for
//! longer than its lease, then SIGCONT it.
//!
//! A paused worker is resumed when the phase ends; the fleet's stop sends every worker
//! SIGCONT too, for a phase that ended early on an error.

use std::time::{Duration, Instant};

use anyhow::bail;
use idem::{Idem, SqlValue};
use indicatif::{ProgressBar, ProgressStyle};

use super::DemoArgs;
use super::fleet::Fleet;
use super::verify::finished;

/// What the chaos did, and where it stands.
pub(super) struct Chaos {
    pub(super) events: Vec<String>,
    kill: Step,
    pause: Step,
    pause_for: Duration,
}

/// One chaos step: not yet due, in progress (a paused worker), or done.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    Pending,
    Paused { since: Instant, target: usize },
    Done,
}

impl Chaos {
    fn new(args: &DemoArgs) -> Chaos {
        let first = if args.no_chaos {
            Step::Done
        } else {
            Step::Pending
        };
        Chaos {
            events: Vec::new(),
            kill: first,
            pause: first,
            pause_for: Duration::from_millis(args.lease_ms * 2 + 500),
        }
    }

    /// Kills a worker at 25% of the jobs finished, pauses the busiest at 50%, and
    /// resumes it once it has been stopped for longer than its lease.
    async fn step(
        &mut self,
        idem: &Idem,
        fleet: &mut Fleet,
        done: usize,
        total: usize,
    ) -> anyhow::Result<()> {
        if self.kill == Step::Pending && done * 4 >= total {
            self.kill = Step::Done;
            if let Some(event) = fleet.kill(0).await? {
                self.events.push(event);
            }
        }
        if self.pause == Step::Pending && done * 2 >= total {
            let target = busiest(idem, fleet).await?;
            self.pause = Step::Done;
            if let Some((name, pid)) = fleet.signal(target, libc::SIGSTOP) {
                self.events.push(format!(
                    "paused {name} (pid {pid}) with SIGSTOP for {} ms, longer than its lease, then resumed it",
                    self.pause_for.as_millis()
                ));
                self.pause = Step::Paused {
                    since: Instant::now(),
                    target,
                };
            }
        }
        if let Step::Paused { since, .. } = self.pause
            && since.elapsed() >= self.pause_for
        {
            self.resume(fleet);
        }
        Ok(())
    }

    fn resume(&mut self, fleet: &Fleet) {
        if let Step::Paused { target, .. } = self.pause {
            fleet.signal(target, libc::SIGCONT);
            self.pause = Step::Done;
        }
    }
}

/// Watches progress and runs the chaos until every job is finished.
pub(super) async fn drive(
    idem: &Idem,
    args: &DemoArgs,
    fleet: &mut Fleet,
    ids: (i64, i64),
) -> anyhow::Result<Chaos> {
    let bar = ProgressBar::new(args.jobs as u64);
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} jobs finished",
    )?);
    let mut chaos = Chaos::new(args);
    let limit = Duration::from_secs(120) + Duration::from_millis(args.jobs as u64 * 20);
    let deadline = Instant::now() + limit;
    loop {
        let done = finished(idem, ids).await?;
        bar.set_position(done as u64);
        if done >= args.jobs {
            break;
        }
        if Instant::now() > deadline {
            bar.abandon();
            chaos.resume(fleet);
            bail!(
                "the demo did not finish within {limit:?}: {done} of {} jobs finished",
                args.jobs
            );
        }
        chaos.step(idem, fleet, done, args.jobs).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    chaos.resume(fleet);
    bar.finish();
    Ok(chaos)
}

/// The live worker holding the most leases, so that pausing it matters.
async fn busiest(idem: &Idem, fleet: &Fleet) -> anyhow::Result<usize> {
    let sql = "SELECT lease_owner, count(*) FROM idem_job WHERE state = 'running' \
               GROUP BY lease_owner ORDER BY count(*) DESC";
    let rows = idem.store().query(sql, &[]).await?;
    let owners: Vec<String> = rows
        .into_iter()
        .filter_map(|r| match r.first() {
            Some(SqlValue::Text(owner)) => Some(owner.clone()),
            _ => None,
        })
        .collect();
    let index = owners
        .iter()
        .find_map(|o| fleet.live.iter().position(|(name, _)| name == o));
    Ok(index.unwrap_or(0))
}
