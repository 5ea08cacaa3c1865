//! Retention windows and the retry horizon they must cover.
//!
//! A deduplication record is only useful while a duplicate can still arrive. For an
//! enqueue key or an effect key that is as long as a job can keep being retried: its
//! **retry horizon**, computed here from the ladders, `max_attempts`, the lease, the job
//! timeout and the rescue interval ([`retry_horizon`]). What must stay true:
//!
//! - **Enqueue-key and effect-key retention each cover the retry horizon plus
//!   [`HORIZON_MARGIN`]** ([`Retention::check_covers`]); a worker refuses to start
//!   otherwise. Delays outside the horizon (a handler's long `retry_after` or snooze, a
//!   job waiting for a worker that knows its kind, an operator's retry) are covered for
//!   effect keys by the purge itself, which keeps the keys of a job that may still run
//!   again (`purge/effect_keys.sql`), so a late retry never finds its key purged.
//! - **Finished and dead jobs outlive their enqueue keys** ([`Retention::validate`]): a
//!   deduplicated enqueue returns the first job, so that job must still exist.
//!
//! Every refusal names the setting, its value and the bound it misses, in human units
//! ([`human`]).

use std::time::Duration;

use crate::error::IdemError;
use crate::retry::RetryLadder;

/// Default retention of enqueue keys, effect keys and finished jobs: 3 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3 * 86_400);

/// Default retention of dead jobs: 7 days, so operators have a week to inspect them.
pub const DEFAULT_DEAD_RETENTION: Duration = Duration::from_secs(7 * 86_400);

/// How much longer than the retry horizon a deduplication window must be: 1 hour.
/// It absorbs clock skew between workers and the database and purges running late.
pub const HORIZON_MARGIN: Duration = Duration::from_secs(3600);

/// How long idem keeps each kind of record before purging it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Enqueue keys (`idem_enqueue_key`), counted from their `created_at`.
    pub enqueue_keys: Duration,
    /// Effect deduplication records (`idem_effect`), counted from their `created_at`.
    pub effect_keys: Duration,
    /// Completed and cancelled jobs, counted from their `finalized_at`.
    pub finished_jobs: Duration,
    /// Dead jobs, counted from their `finalized_at`.
    pub dead_jobs: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            enqueue_keys: DEFAULT_RETENTION,
            effect_keys: DEFAULT_RETENTION,
            finished_jobs: DEFAULT_RETENTION,
            dead_jobs: DEFAULT_DEAD_RETENTION,
        }
    }
}

/// The worst-case retry horizon: how long after its first attempt a job can still be
/// running or waiting to run again. Computed by [`retry_horizon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// The longest ladder's worst case: every delay at jitter's maximum.
    pub ladder: Duration,
    /// `max_attempts` × (job timeout + lease + rescue interval).
    pub attempts: Duration,
    /// `ladder` + `attempts`.
    pub total: Duration,
    /// The attempts the horizon was computed for.
    pub max_attempts: i32,
}

impl Horizon {
    /// The shortest deduplication window that covers this horizon: total + [`HORIZON_MARGIN`].
    pub fn required_retention(&self) -> Duration {
        self.total.saturating_add(HORIZON_MARGIN)
    }
}

/// The worst-case retry horizon of jobs retried along any of `ladders`.
///
/// `horizon = ladder + attempts`, where
///
/// - `ladder` = the largest [`RetryLadder::worst_case_total`]`(max_attempts)` over the
///   ladders: the sum of the delays after failed attempts 1 to `max_attempts − 1`, each at
///   its rung × (1 + jitter), the last rung repeating;
/// - `attempts` = `max_attempts` × (`job_timeout` + `lease` + `rescue_interval`): a hung
///   attempt runs until its timeout, and a dead worker's job waits for its lease to
///   expire and then for the next rescue sweep.
///
/// DESIGN.md §7 gives `ladder + max_attempts × (lease + job timeout)`; the rescue interval
/// is added because a job whose lease expired is only moved back by the next sweep.
/// No ladders gives a `ladder` part of zero.
///
/// ```
/// use std::time::Duration;
/// use idem::config::retry_horizon;
/// use idem::retry::RetryLadder;
///
/// let s = Duration::from_secs;
/// let ladder = RetryLadder::new([s(10), s(100)]).jitter(0.0);
/// let h = retry_horizon([&ladder], 3, s(30), s(60), s(5));
/// assert_eq!(h.ladder, s(110));
/// assert_eq!(h.attempts, s(3 * 95));
/// assert_eq!(h.total, s(110 + 285));
/// ```
pub fn retry_horizon<'a>(
    ladders: impl IntoIterator<Item = &'a RetryLadder>,
    max_attempts: i32,
    lease: Duration,
    job_timeout: Duration,
    rescue_interval: Duration,
) -> Horizon {
    let ladder = ladders
        .into_iter()
        .map(|l| l.worst_case_total(max_attempts))
        .max()
        .unwrap_or(Duration::ZERO);
    let per_attempt = job_timeout
        .saturating_add(lease)
        .saturating_add(rescue_interval);
    let attempts = per_attempt.saturating_mul(u32::try_from(max_attempts).unwrap_or(0));
    Horizon {
        ladder,
        attempts,
        total: ladder.saturating_add(attempts),
        max_attempts,
    }
}

/// One retention window judged against its rules, for reports such as `idem config check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowCheck {
    /// The setting as named in the config file, e.g. `retention.enqueue_keys`.
    pub setting: &'static str,
    /// Its value.
    pub value: Duration,
    /// What the window satisfies (e.g. "covers the retry horizon plus the margin"), or
    /// why it is refused.
    pub verdict: Result<&'static str, String>,
}

/// A retention setting: its value, its name in messages and in the config file.
struct Window {
    noun: &'static str,
    setting: &'static str,
    value: Duration,
    /// Deduplication windows must cover the horizon; job windows must outlive the keys.
    is_key: bool,
}

impl Retention {
    /// Checks the windows among themselves: each is longer than zero, and finished and
    /// dead jobs are kept at least as long as enqueue keys (a deduplicated enqueue
    /// returns the first job, so it must outlive its key). The error names the values.
    pub fn validate(&self) -> Result<(), IdemError> {
        collect(self.windows().iter().map(|w| self.check_alone(w)))
    }

    /// Checks that the enqueue-key and effect-key windows each cover the retry horizon
    /// plus [`HORIZON_MARGIN`]. The error names the setting, its value, the horizon,
    /// the margin and the value to raise it to.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::config::{Retention, retry_horizon};
    /// use idem::retry::RetryLadder;
    ///
    /// let s = Duration::from_secs;
    /// let h = retry_horizon([&RetryLadder::default()], 8, s(30), s(60), s(5));
    /// assert!(Retention::default().check_covers(&h).is_ok());
    /// let short = Retention { enqueue_keys: s(7200), ..Retention::default() };
    /// let err = short.check_covers(&h).unwrap_err().to_string();
    /// assert!(err.contains("enqueue-key retention 2h is shorter than the retry horizon"));
    /// ```
    pub fn check_covers(&self, h: &Horizon) -> Result<(), IdemError> {
        let keys = self.windows().into_iter().filter(|w| w.is_key);
        collect(keys.map(|w| covers(&w, h)))
    }

    /// Every window with its verdict: [`validate`](Self::validate)'s rules and, for the
    /// deduplication windows, [`check_covers`](Self::check_covers)'s.
    pub fn checks(&self, h: &Horizon) -> Vec<WindowCheck> {
        let verdict = |w: &Window| {
            self.check_alone(w)?;
            if w.is_key {
                covers(w, h)?;
                Ok("covers the retry horizon plus the margin")
            } else {
                Ok("outlives the enqueue keys")
            }
        };
        let windows = self.windows();
        let check = |w: &Window| WindowCheck {
            setting: w.setting,
            value: w.value,
            verdict: verdict(w),
        };
        windows.iter().map(check).collect()
    }

    fn windows(&self) -> [Window; 4] {
        let w = |noun, setting, value, is_key| Window {
            noun,
            setting,
            value,
            is_key,
        };
        [
            w(
                "enqueue-key",
                "retention.enqueue_keys",
                self.enqueue_keys,
                true,
            ),
            w(
                "effect-key",
                "retention.effect_keys",
                self.effect_keys,
                true,
            ),
            w(
                "finished-job",
                "retention.finished_jobs",
                self.finished_jobs,
                false,
            ),
            w("dead-job", "retention.dead_jobs", self.dead_jobs, false),
        ]
    }

    /// The rules that need no horizon: longer than zero; jobs outlive enqueue keys.
    fn check_alone(&self, w: &Window) -> Result<(), String> {
        if w.value.is_zero() {
            return Err(format!(
                "{} retention is 0s; set {} to a duration longer than zero",
                w.noun, w.setting
            ));
        }
        if !w.is_key && w.value < self.enqueue_keys {
            return Err(format!(
                "{} retention {} is shorter than enqueue-key retention {}; a deduplicated \
                 enqueue returns the first job, so the job must outlive its key: raise {} \
                 to at least {} or lower retention.enqueue_keys",
                w.noun,
                human(w.value),
                human(self.enqueue_keys),
                w.setting,
                human(self.enqueue_keys),
            ));
        }
        Ok(())
    }
}

/// Whether a deduplication window covers the horizon plus the margin.
fn covers(w: &Window, h: &Horizon) -> Result<(), String> {
    let required = h.required_retention();
    if w.value >= required {
        return Ok(());
    }
    Err(format!(
        "{} retention {} is shorter than the retry horizon {} plus the {} margin; raise {} \
         to at least {} or shorten the retry ladder or max_attempts",
        w.noun,
        human(w.value),
        human(h.total),
        human(HORIZON_MARGIN),
        w.setting,
        human(ceil_to_second(required)),
    ))
}

fn collect(checks: impl Iterator<Item = Result<(), String>>) -> Result<(), IdemError> {
    let errors: Vec<String> = checks.filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(IdemError::Config(errors.join("; ")))
    }
}

fn ceil_to_second(d: Duration) -> Duration {
    match d.subsec_nanos() {
        0 => d,
        _ => Duration::from_secs(d.as_secs().saturating_add(1)),
    }
}

/// A duration in days, hours, minutes and seconds for messages: `3d`, `11h 26m 30.5s`,
/// `0s`. Fractions of a second are rounded up to the millisecond, so a bound is never
/// shown smaller than it is.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(idem::config::human(Duration::from_secs(3 * 86_400)), "3d");
/// assert_eq!(idem::config::human(Duration::from_millis(41_190_500)), "11h 26m 30.5s");
/// ```
pub fn human(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    let (days, rest) = (ms / 86_400_000, ms % 86_400_000);
    let (hours, rest) = (rest / 3_600_000, rest % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (secs, millis) = (rest / 1000, rest % 1000);
    let mut parts = Vec::new();
    for (n, unit) in [(days, "d"), (hours, "h"), (minutes, "m")] {
        if n > 0 {
            parts.push(format!("{n}{unit}"));
        }
    }
    if millis > 0 {
        let frac = format!("{millis:03}");
        parts.push(format!("{secs}.{}s", frac.trim_end_matches('0')));
    } else if secs > 0 || parts.is_empty() {
        parts.push(format!("{secs}s"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{DEFAULT_JITTER, DEFAULT_LADDER, DEFAULT_MAX_ATTEMPTS};
    use crate::worker::config::{DEFAULT_JOB_TIMEOUT, DEFAULT_LEASE, DEFAULT_RESCUE_INTERVAL};

    fn default_horizon() -> Horizon {
        retry_horizon(
            [&RetryLadder::default()],
            DEFAULT_MAX_ATTEMPTS,
            DEFAULT_LEASE,
            DEFAULT_JOB_TIMEOUT,
            DEFAULT_RESCUE_INTERVAL,
        )
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_default_horizon_is_what_the_formula_says() {
        assert_eq!(
            (DEFAULT_MAX_ATTEMPTS, DEFAULT_LEASE, DEFAULT_JOB_TIMEOUT),
            (8, secs(30), secs(60))
        );
        assert_eq!(DEFAULT_RESCUE_INTERVAL, secs(5));
        let h = default_horizon();
        // 7 failed attempts walk the 7 rungs once, each at its jitter maximum.
        let rungs: Duration = DEFAULT_LADDER.iter().sum();
        let ladder = rungs.mul_f64(1.0 + DEFAULT_JITTER);
        assert!(
            h.ladder.abs_diff(ladder) < Duration::from_micros(1),
            "{h:?}"
        );
        assert_eq!(h.attempts, 8 * (secs(30) + secs(60) + secs(5)));
        assert_eq!(h.total, h.ladder + h.attempts);
        assert_eq!(h.max_attempts, 8);
        assert_eq!(human(h.total), "11h 26m 30.5s");
    }

    #[test]
    fn the_default_retention_covers_the_default_horizon() {
        let h = default_horizon();
        Retention::default().validate().unwrap();
        Retention::default().check_covers(&h).unwrap();
        assert!(DEFAULT_RETENTION >= h.total + HORIZON_MARGIN);
        let checks = Retention::default().checks(&h);
        assert_eq!(checks.len(), 4);
        assert!(checks.iter().all(|c| c.verdict.is_ok()), "{checks:?}");
    }

    #[test]
    fn a_retention_shorter_than_the_horizon_is_refused_with_both_numbers() {
        let h = default_horizon();
        let short = Retention {
            effect_keys: secs(2 * 3600),
            ..Retention::default()
        };
        let err = short.check_covers(&h).unwrap_err().to_string();
        assert!(err.contains(&human(secs(2 * 3600))), "{err}");
        assert!(err.contains(&human(h.total)), "{err}");
        assert!(err.contains("effect-key retention 2h"), "{err}");
        assert!(
            err.contains("retry horizon 11h 26m 30.5s plus the 1h margin"),
            "{err}"
        );
        assert!(
            err.contains("raise retention.effect_keys to at least 12h 26m 31s"),
            "{err}"
        );
        assert!(
            !err.contains("enqueue-key"),
            "only the short window is named: {err}"
        );
    }

    #[test]
    fn a_window_just_covering_the_horizon_passes() {
        let h = retry_horizon([], 2, secs(30), secs(60), secs(5));
        let exact = h.total + HORIZON_MARGIN;
        let r = Retention {
            enqueue_keys: exact,
            effect_keys: exact,
            ..Retention::default()
        };
        r.check_covers(&h).unwrap();
        let under = Retention {
            enqueue_keys: exact - Duration::from_millis(1),
            ..r
        };
        assert!(under.check_covers(&h).is_err());
    }

    #[test]
    fn the_longest_ladder_decides_the_horizon() {
        let short = RetryLadder::new([secs(1)]).jitter(0.0);
        let long = RetryLadder::new([secs(10), secs(20)]).jitter(0.0);
        let h = retry_horizon([&short, &long], 4, secs(1), secs(1), secs(1));
        assert_eq!(h.ladder, secs(10 + 20 + 20));
        assert_eq!(h.attempts, secs(12));
    }

    #[test]
    fn jobs_must_outlive_their_enqueue_keys() {
        let r = Retention {
            enqueue_keys: secs(4 * 86_400),
            dead_jobs: secs(2 * 86_400),
            ..Retention::default()
        };
        let err = r.validate().unwrap_err().to_string();
        assert!(
            err.contains("finished-job retention 3d is shorter"),
            "{err}"
        );
        assert!(err.contains("dead-job retention 2d is shorter"), "{err}");
        assert!(err.contains("enqueue-key retention 4d"), "{err}");
        assert!(
            err.contains("raise retention.dead_jobs to at least 4d"),
            "{err}"
        );
    }

    #[test]
    fn a_zero_window_is_refused() {
        let r = Retention {
            effect_keys: Duration::ZERO,
            ..Retention::default()
        };
        let err = r.validate().unwrap_err().to_string();
        assert!(err.contains("set retention.effect_keys to a duration longer than zero"));
    }

    #[test]
    fn human_reads_like_a_person_wrote_it() {
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_millis(500)), "0.5s");
        assert_eq!(human(secs(90)), "1m 30s");
        assert_eq!(human(secs(3600)), "1h");
        assert_eq!(human(secs(86_400 + 5)), "1d 5s");
        assert_eq!(human(Duration::from_nanos(1)), "0.001s");
        assert_eq!(human(Duration::from_millis(40_430_500)), "11h 13m 50.5s");
    }
}
