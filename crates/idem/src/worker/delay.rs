//! What a job waits after an attempt that did not complete: `next_run` turns a handler's
//! [`JobError`] into the failure the store records (run again after a delay, snooze, or
//! `dead`) under the worker's bounds.
//!
//! What must stay true: every delay a job takes is one the retry horizon counts
//! ([`crate::config::retry_horizon`]). A ladder's delay lies within its jitter bounds; a
//! handler's `retry_after` is clamped to `max_retry_after` and a snooze to `max_snooze`
//! (each with a warning and a note in the attempt's error); a job that has taken
//! `max_snoozes` snoozes has its next one counted as a failed attempt along the ladder,
//! so a job that always snoozes still ends in `dead`. The property test below walks whole
//! lives of jobs through `next_run` and holds them to the horizon.

use std::time::Duration;

use idem_store::JobRow;

use super::WorkerConfig;
use crate::config::human;
use crate::error::{JobError, JobErrorKind};

/// The failure to record for an attempt that did not complete.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NextRun {
    /// Run again after this delay; `None` = `dead`.
    pub(super) retry_in: Option<Duration>,
    /// A snooze: the attempt is given back and counted as a snooze.
    pub(super) snooze: bool,
    /// The attempt's error, with any clamp or refused snooze noted.
    pub(super) message: String,
}

/// What follows attempt `job.attempt` of `job`, which ended with `e`: `unit` in `[0, 1)`
/// is the ladder's random draw.
pub(super) fn next_run(
    config: &WorkerConfig,
    kind_cap: Option<i32>,
    job: &JobRow,
    e: JobError,
    unit: f64,
) -> NextRun {
    let cap = match kind_cap {
        Some(k) if k < config.max_attempts => Cap::Kind(k),
        _ => Cap::Worker(config.max_attempts),
    };
    match e.kind {
        JobErrorKind::Permanent => dead(e.message),
        JobErrorKind::Snooze if job.snoozes < config.max_snoozes => snooze(config, job, e),
        JobErrorKind::Snooze => {
            let message = format!(
                "{}; the job has taken {} snoozes (max_snoozes {}), so this snooze counts as \
                 a failed attempt",
                e.message, job.snoozes, config.max_snoozes
            );
            retry(config, cap, job, None, message, unit)
        }
        _ => retry(config, cap, job, e.retry_after, e.message, unit),
    }
}

fn dead(message: String) -> NextRun {
    NextRun {
        retry_in: None,
        snooze: false,
        message,
    }
}

/// Whose cap on attempts applies: the worker's `max_attempts`, or the lower one the
/// job's kind declared ([`crate::Handler::max_attempts`]).
#[derive(Debug, Clone, Copy)]
enum Cap {
    Worker(i32),
    Kind(i32),
}

/// A failed attempt: `dead` once the attempts the worker or the kind allow are used up,
/// else after the handler's delay (clamped) or the ladder's.
fn retry(
    config: &WorkerConfig,
    cap: Cap,
    job: &JobRow,
    asked: Option<Duration>,
    message: String,
    unit: f64,
) -> NextRun {
    match cap {
        Cap::Worker(n) if job.attempt >= n => return dead(message),
        Cap::Kind(n) if job.attempt >= n => {
            return dead(format!(
                "{message} (attempt {} of {n}, the limit of kind {:?})",
                job.attempt, job.kind
            ));
        }
        _ => {}
    }
    let (delay, message) = match asked {
        Some(d) => clamp(job, d, config.max_retry_after, Bound::RetryAfter, message),
        None => {
            let ladder = config.ladder_for(&job.queue, &job.kind);
            (ladder.delay(job.attempt, unit), message)
        }
    };
    NextRun {
        retry_in: Some(delay),
        snooze: false,
        message,
    }
}

/// A snooze within the job's allowance, clamped to `max_snooze`.
fn snooze(config: &WorkerConfig, job: &JobRow, e: JobError) -> NextRun {
    let asked = e.retry_after.unwrap_or(Duration::ZERO);
    let (delay, message) = clamp(job, asked, config.max_snooze, Bound::Snooze, e.message);
    NextRun {
        retry_in: Some(delay),
        snooze: true,
        message,
    }
}

/// Which bound a handler's delay was held to.
#[derive(Debug, Clone, Copy)]
enum Bound {
    RetryAfter,
    Snooze,
}

impl Bound {
    /// What the handler asked for, and the setting that bounds it.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Bound::RetryAfter => ("retry_after", "max_retry_after"),
            Bound::Snooze => ("snooze", "max_snooze"),
        }
    }
}

/// `asked`, or `max` with a warning and a note in the message when `asked` is longer.
fn clamp(
    job: &JobRow,
    asked: Duration,
    max: Duration,
    bound: Bound,
    message: String,
) -> (Duration, String) {
    if asked <= max {
        return (asked, message);
    }
    let (what, setting) = bound.names();
    let (asked, max_text) = (human(asked), human(max));
    tracing::warn!(
        job_id = job.id,
        kind = %job.kind,
        "the handler asked for a {what} of {asked}, longer than {setting} {max_text}; \
         clamped to {max_text}"
    );
    let note = format!("{message}; {what} {asked} clamped to {setting} {max_text}");
    (max, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryLadder;
    use proptest::prelude::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn job(attempt: i32, snoozes: i32) -> JobRow {
        let at = chrono::DateTime::UNIX_EPOCH;
        JobRow {
            id: 7,
            kind: "k".into(),
            queue: "q".into(),
            args: serde_json::json!({}),
            priority: 0,
            state: idem_store::JobState::Running,
            attempt,
            max_attempts: 100,
            run_at: at,
            fence: 1,
            lease_owner: None,
            lease_expires_at: None,
            batch_id: None,
            created_at: at,
            attempted_at: Some(at),
            finalized_at: None,
            last_error: None,
            snoozes,
            enqueue_key: None,
            principal: None,
            follows_job: None,
            follows_batch: None,
            trace_parent: None,
            result: None,
        }
    }

    fn config() -> WorkerConfig {
        WorkerConfig {
            ladder: RetryLadder::new([Duration::from_secs(30)]).jitter(0.0),
            max_attempts: 3,
            ..WorkerConfig::default()
        }
    }

    #[test]
    fn a_long_retry_after_is_clamped_and_noted() {
        let e = JobError::retry_after(96 * HOUR, "closed");
        let next = next_run(&config(), None, &job(1, 0), e, 0.5);
        assert_eq!(next.retry_in, Some(HOUR));
        assert_eq!(
            next.message,
            "closed; retry_after 4d clamped to max_retry_after 1h"
        );
        let e = JobError::retry_after(HOUR, "closed");
        let next = next_run(&config(), None, &job(1, 0), e, 0.5);
        assert_eq!(
            (next.retry_in, next.message.as_str()),
            (Some(HOUR), "closed")
        );
    }

    #[test]
    fn a_long_snooze_is_clamped_and_noted() {
        let next = next_run(&config(), None, &job(1, 9), JobError::snooze(2 * HOUR), 0.5);
        assert_eq!((next.retry_in, next.snooze), (Some(HOUR), true));
        assert_eq!(
            next.message,
            "snoozed for 2h; snooze 2h clamped to max_snooze 1h"
        );
    }

    #[test]
    fn a_snooze_beyond_max_snoozes_is_a_failed_attempt() {
        let e = JobError::snooze(Duration::from_secs(5));
        let next = next_run(&config(), None, &job(1, 10), e.clone(), 0.5);
        assert_eq!(
            (next.retry_in, next.snooze),
            (Some(Duration::from_secs(30)), false)
        );
        assert!(
            next.message.contains("taken 10 snoozes (max_snoozes 10)"),
            "{}",
            next.message
        );
        let last = next_run(&config(), None, &job(3, 10), e, 0.5);
        assert_eq!((last.retry_in, last.snooze), (None, false), "dead");
    }

    #[test]
    fn permanent_and_exhausted_failures_are_dead() {
        let next = next_run(&config(), None, &job(1, 0), JobError::permanent("no"), 0.5);
        assert_eq!(next, dead("no".into()));
        let e = JobError::retry_after(Duration::from_secs(1), "again");
        assert_eq!(next_run(&config(), None, &job(3, 0), e, 0.5).retry_in, None);
    }

    /// A handler's answer to one run of a job in the property test below.
    #[derive(Debug, Clone)]
    enum Answer {
        /// Retry along the ladder (`None`) or after the given milliseconds.
        Retry(Option<u64>),
        /// Snooze for the given milliseconds.
        Snooze(u64),
    }

    fn answer() -> impl Strategy<Value = Answer> {
        let any_delay = prop_oneof![0u64..10_000_000, any::<u64>()];
        prop_oneof![
            prop::option::of(any_delay.clone()).prop_map(Answer::Retry),
            any_delay.prop_map(Answer::Snooze),
        ]
    }

    fn bounds() -> impl Strategy<Value = WorkerConfig> {
        let ms = |max: u64| (1..max).prop_map(Duration::from_millis);
        let rungs = prop::collection::vec(0u64..86_400_000, 1..5)
            .prop_map(|r| r.into_iter().map(Duration::from_millis).collect::<Vec<_>>());
        (
            rungs,
            0.0..=1.0f64,
            1..6i32,
            ms(86_400_000),
            ms(86_400_000),
            0..6i32,
        )
            .prop_map(
                |(rungs, jitter, max_attempts, max_retry_after, max_snooze, max_snoozes)| {
                    WorkerConfig {
                        ladder: RetryLadder::new(rungs).jitter(jitter),
                        max_attempts,
                        max_retry_after,
                        max_snooze,
                        max_snoozes,
                        ..WorkerConfig::default()
                    }
                },
            )
    }

    /// The time from a job's first attempt to the end of its last, when each run lasts
    /// as long as an attempt can (job timeout + lease + rescue interval) and the
    /// handler answers with `answers` until the job is dead or the answers run out
    /// (then it completes).
    fn life(config: &WorkerConfig, answers: &[(Answer, f64)]) -> Duration {
        let run = config.job_timeout + config.lease + config.rescue_interval;
        let (mut row, mut elapsed) = (job(0, 0), Duration::ZERO);
        for (answer, unit) in answers {
            row.attempt += 1;
            elapsed += run;
            let e = match answer {
                Answer::Retry(None) => JobError::retry("failed"),
                Answer::Retry(Some(ms)) => JobError::retry_after(Duration::from_millis(*ms), "x"),
                Answer::Snooze(ms) => JobError::snooze(Duration::from_millis(*ms)),
            };
            let next = next_run(config, None, &row, e, *unit);
            let Some(delay) = next.retry_in else {
                return elapsed; // dead
            };
            if next.snooze {
                (row.attempt, row.snoozes) = (row.attempt - 1, row.snoozes + 1);
            }
            elapsed += delay;
        }
        elapsed + run // the last run completes
    }

    proptest! {
        #[test]
        fn the_horizon_bounds_every_life_a_handler_can_make(
            config in bounds(),
            answers in prop::collection::vec((answer(), 0.0..1.0f64), 0..40),
        ) {
            let horizon = config.horizon();
            let lived = life(&config, &answers);
            prop_assert!(lived <= horizon.total, "{lived:?} > {horizon:?}");
        }

        #[test]
        fn snoozes_at_their_cap_and_delays_at_their_max_reach_the_horizon(config in bounds()) {
            // The longest life: every snooze allowed at its longest, then every attempt
            // failing with the longest delay a handler may choose or the ladder gives.
            let mut answers = vec![(Answer::Snooze(u64::MAX), 0.0); config.max_snoozes as usize];
            answers.extend((0..config.max_attempts).map(|_| (Answer::Retry(Some(u64::MAX)), 1.0)));
            let lived = life(&config, &answers);
            let horizon = config.horizon();
            prop_assert!(lived <= horizon.total, "{lived:?} > {horizon:?}");
            let floor = horizon.snoozes + horizon.attempts + config.max_retry_after
                * u32::try_from(config.max_attempts - 1).unwrap();
            prop_assert!(lived >= floor, "{lived:?} < {floor:?}");
        }
    }
}
