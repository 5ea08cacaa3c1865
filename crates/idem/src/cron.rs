//! [`Periodic`]: a job enqueued at every tick of a cron schedule (UTC, on the database's
//! clock), once per tick however many worker processes run the schedule: each enqueues
//! the tick with the enqueue key `cron:{name}:{tick in ms}`, and the key lets one
//! through. A worker that starts within the catch-up window after a tick (default one
//! minute) enqueues the latest such tick too (not the older ones), so a restart across
//! a tick does not lose it; the key makes that harmless when another process enqueued
//! it already.

use std::time::Duration;

use chrono::Utc;

use crate::error::IdemError;
use crate::job::{Job, check_name};
use idem_store::Timestamp;

/// The longest name of a periodic job: its ticks' keys add 26 characters at most.
pub const MAX_NAME_LEN: usize = 200;

/// How far back a starting worker looks for a tick it may have missed, by default.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(60);

/// A job enqueued at every tick of a schedule.
#[derive(Debug, Clone)]
pub struct Periodic {
    name: String,
    pattern: String,
    schedule: croner::Cron,
    job: Job,
    catch_up: Duration,
}

impl Periodic {
    /// `job` at every tick of `schedule`: five fields (minute, hour, day of month, month,
    /// day of week) or six with seconds first, in UTC. `name` names the schedule in its
    /// ticks' enqueue keys (at most 200 characters). A name stands for one schedule of
    /// one queue: keep name, schedule and queue together across deploys (a new
    /// schedule or queue gets a new name), because enqueue keys are unique per queue
    /// and ticks of two schedules differ, so workers of two deploys that overlap would
    /// each enqueue their own. The job must not carry an enqueue key (each tick gets
    /// its own); its `run_at` is the tick's time.
    pub fn new(name: &str, schedule: &str, job: Job) -> Result<Periodic, IdemError> {
        let config = |e: IdemError| IdemError::Config(e.to_string());
        check_name("periodic job name", name).map_err(config)?;
        job.validate().map_err(config)?;
        if name.len() > MAX_NAME_LEN {
            return Err(IdemError::Config(format!(
                "periodic job name {name:?} is longer than {MAX_NAME_LEN} characters; its \
                 ticks' enqueue keys must fit in 255"
            )));
        }
        if job.key().is_some() {
            return Err(IdemError::Config(format!(
                "the job of periodic {name:?} sets an enqueue key; leave it out: each tick \
                 is enqueued with the key cron:{name}:<tick in ms>"
            )));
        }
        let parsed = croner::Cron::new(schedule)
            .with_seconds_optional()
            .parse()
            .map_err(|e| {
                IdemError::Config(format!(
                    "the schedule {schedule:?} of periodic {name:?} is not a cron expression \
                     ({e}); give five fields (minute hour day-of-month month day-of-week) or \
                     six with seconds first, in UTC, e.g. \"0 3 * * *\" for 03:00 every day"
                ))
            })?;
        Ok(Periodic {
            name: name.to_owned(),
            pattern: schedule.to_owned(),
            schedule: parsed,
            job,
            catch_up: DEFAULT_CATCH_UP,
        })
    }

    /// The longest name of a periodic job: its ticks' keys add 26 characters at most.
    pub const MAX_NAME_LEN: usize = 200;

    /// How far back a starting worker looks for a tick it missed (zero: none).
    pub fn catch_up(mut self, window: Duration) -> Self {
        self.catch_up = window;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schedule as given.
    pub fn schedule(&self) -> &str {
        &self.pattern
    }

    /// The first tick strictly after `t`, if the schedule has one.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        self.schedule
            .find_next_occurrence(&t.with_timezone(&Utc), false)
            .ok()
    }

    /// The enqueue key of `tick`.
    pub fn tick_key(&self, tick: Timestamp) -> String {
        format!("cron:{}:{}", self.name, tick.timestamp_millis())
    }

    /// The job to enqueue for `tick`.
    pub(crate) fn job_for(&self, tick: Timestamp) -> Job {
        self.job
            .clone()
            .enqueue_key(self.tick_key(tick))
            .run_at(tick)
    }

    /// How far back a worker looks for missed ticks.
    pub fn catch_up_window(&self) -> Duration {
        self.catch_up
    }
}
