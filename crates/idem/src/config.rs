//! Retention windows and the retry horizon they must cover.
//!
//! A deduplication record is only useful while a duplicate can still arrive. For an
//! enqueue key or an effect key that is as long as a job can keep being retried: its
//! **retry horizon**, computed here from every delay a job can take ([`retry_horizon`]):
//! the ladders, `max_attempts`, the lease, the job timeout, the rescue interval, and the
//! bounds the worker puts on delays handlers choose (`max_retry_after`, `max_snooze`,
//! `max_snoozes`). What must stay true:
//!
//! - **Enqueue-key, effect-key and intent retention each cover the retry horizon plus
//!   [`HORIZON_MARGIN`]** ([`Retention::check_covers`]); a worker refuses to start
//!   otherwise, and it clamps every handler-chosen delay and counts snoozes, so a late
//!   retry can never find its key purged and do its effect again. Delays no setting can
//!   bound (a backlog, a job waiting for a worker that knows its kind, a forced operator
//!   retry) are covered for effect keys by the purge itself, which keeps the keys of a
//!   job that may still run again (`purge/effect_keys.sql`).
//! - **An operator retry starts a job's horizon again**, so `Idem::retry_jobs` refuses a
//!   job whose first attempt's effect keys would expire before the new horizon ends
//!   (`Idem::retry_jobs_forced` overrides it).
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

/// How long an Idempotency-Key's answer replays by default: 24 hours.
pub const DEFAULT_HTTP_KEY_RETENTION: Duration = Duration::from_secs(86_400);

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
    /// Completed and failed intents (`idem_intent`), counted from their `created_at`.
    pub intents: Duration,
    /// Completed and cancelled jobs, counted from their `finalized_at`.
    pub finished_jobs: Duration,
    /// Dead jobs, counted from their `finalized_at`.
    pub dead_jobs: Duration,
    /// Inbound Idempotency-Key records (`idem_http_key`), counted from their
    /// `created_at`: how long an HTTP answer replays.
    pub http_keys: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            enqueue_keys: DEFAULT_RETENTION,
            effect_keys: DEFAULT_RETENTION,
            intents: DEFAULT_RETENTION,
            finished_jobs: DEFAULT_RETENTION,
            dead_jobs: DEFAULT_DEAD_RETENTION,
            http_keys: DEFAULT_HTTP_KEY_RETENTION,
        }
    }
}

/// What the retry horizon is computed from: the attempts cap, the timing of an attempt,
/// and the bounds on delays handlers choose. [`WorkerConfig::horizon`](crate::WorkerConfig::horizon)
/// fills it from a worker's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HorizonParams {
    /// The most attempts a job runs.
    pub max_attempts: i32,
    /// The lease: how long a dead worker's job waits before it can be rescued.
    pub lease: Duration,
    /// The longest an attempt runs.
    pub job_timeout: Duration,
    /// Time between rescue sweeps.
    pub rescue_interval: Duration,
    /// The longest delay a handler's `JobError::retry_after` gets.
    pub max_retry_after: Duration,
    /// The longest snooze a handler's `JobError::snooze` gets.
    pub max_snooze: Duration,
    /// How many snoozes a job may take; a snooze beyond them is a failed attempt.
    pub max_snoozes: i32,
}

/// The worst-case retry horizon: how long after its first attempt a job can still be
/// running or waiting to run again, term by term. Computed by [`retry_horizon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// The longest ladder's worst case: every delay at jitter's maximum.
    pub ladder: Duration,
    /// What handler-chosen delays (`retry_after`, up to `max_retry_after`) add to
    /// `ladder`: the worst case over the ladders of every failed attempt waiting the
    /// larger of its rung's maximum and `max_retry_after`, minus `ladder`.
    pub handler_delays: Duration,
    /// `max_snoozes` × (`max_snooze` + job timeout + lease + rescue interval): a snoozed
    /// attempt ran, then waits, and gives its attempt back.
    pub snoozes: Duration,
    /// `max_attempts` × (job timeout + lease + rescue interval).
    pub attempts: Duration,
    /// `ladder` + `handler_delays` + `snoozes` + `attempts`.
    pub total: Duration,
    /// The attempts the horizon was computed for.
    pub max_attempts: i32,
    /// The snoozes the horizon was computed for.
    pub max_snoozes: i32,
}

impl Horizon {
    /// The shortest deduplication window that covers this horizon: total + [`HORIZON_MARGIN`].
    pub fn required_retention(&self) -> Duration {
        self.total.saturating_add(HORIZON_MARGIN)
    }

    /// How long ago a job's first attempt may have started for an operator retry to be
    /// safe: the effect keys of that attempt, kept `effect_keys` from it, must outlive a
    /// new horizon plus the margin. `None`: the window is shorter than the horizon plus
    /// the margin, so no job that has run may be retried without force.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::{DEFAULT_RETENTION, WorkerConfig, config::human};
    ///
    /// let h = WorkerConfig::default().horizon();
    /// let allowed = h.retry_allowance(DEFAULT_RETENTION).unwrap();
    /// assert_eq!(human(allowed), "1d 21h 31m 30s");
    /// assert_eq!(h.retry_allowance(Duration::from_secs(3600)), None);
    /// ```
    pub fn retry_allowance(&self, effect_keys: Duration) -> Option<Duration> {
        effect_keys.checked_sub(self.required_retention())
    }
}

/// The worst-case retry horizon of jobs retried along any of `ladders`: every delay a
/// job can take counts.
///
/// `horizon = ladder + handler_delays + snoozes + attempts`, where
///
/// - `ladder` = the largest [`RetryLadder::worst_case_total`]`(max_attempts)` over the
///   ladders: the sum of the delays after failed attempts 1 to `max_attempts − 1`, each at
///   its rung × (1 + jitter), the last rung repeating;
/// - `handler_delays` = the largest [`RetryLadder::worst_case_delays`]`(max_attempts,
///   max_retry_after)` minus `ladder`: a handler may choose any failed attempt's delay
///   itself, up to `max_retry_after`;
/// - `snoozes` = `max_snoozes` × (`max_snooze` + `job_timeout` + `lease` +
///   `rescue_interval`): a snooze gives its attempt back, so each of the snoozes a job
///   may take adds an attempt's run and its wait;
/// - `attempts` = `max_attempts` × (`job_timeout` + `lease` + `rescue_interval`): a hung
///   attempt runs until its timeout, and a dead worker's job waits for its lease to
///   expire and then for the next rescue sweep.
///
/// DESIGN.md §7 gives `ladder + max_attempts × (lease + job timeout)` and asks that
/// every delay a job can take count; the rescue interval is added because a job whose
/// lease expired is only moved back by the next sweep. No ladders gives `ladder` zero
/// and `handler_delays` the failed attempts × `max_retry_after`.
///
/// ```
/// use std::time::Duration;
/// use idem::config::{HorizonParams, retry_horizon};
/// use idem::retry::RetryLadder;
///
/// let s = Duration::from_secs;
/// let ladder = RetryLadder::new([s(10), s(100)]).jitter(0.0);
/// let params = HorizonParams {
///     max_attempts: 3,
///     lease: s(30),
///     job_timeout: s(60),
///     rescue_interval: s(5),
///     max_retry_after: s(50),
///     max_snooze: s(20),
///     max_snoozes: 2,
/// };
/// let h = retry_horizon([&ladder], &params);
/// assert_eq!(h.ladder, s(10 + 100));
/// assert_eq!(h.handler_delays, s(50 + 100 - 110)); // the first rung waits 50, not 10
/// assert_eq!(h.snoozes, s(2 * (20 + 60 + 30 + 5)));
/// assert_eq!(h.attempts, s(3 * (60 + 30 + 5)));
/// assert_eq!(h.total, s(110 + 40 + 230 + 285));
/// ```
pub fn retry_horizon<'a>(
    ladders: impl IntoIterator<Item = &'a RetryLadder>,
    p: &HorizonParams,
) -> Horizon {
    let (ladder, delays) = ladders
        .into_iter()
        .map(|l| {
            let alone = l.worst_case_total(p.max_attempts);
            (
                alone,
                l.worst_case_delays(p.max_attempts, p.max_retry_after),
            )
        })
        .fold((Duration::ZERO, no_ladder_delays(p)), |(a, d), (la, ld)| {
            (a.max(la), d.max(ld))
        });
    let run = p
        .job_timeout
        .saturating_add(p.lease)
        .saturating_add(p.rescue_interval);
    let snoozes = times(p.max_snoozes, p.max_snooze.saturating_add(run));
    let attempts = times(p.max_attempts, run);
    let total = [snoozes, attempts]
        .into_iter()
        .fold(delays, Duration::saturating_add);
    Horizon {
        ladder,
        handler_delays: delays.saturating_sub(ladder),
        snoozes,
        attempts,
        total,
        max_attempts: p.max_attempts,
        max_snoozes: p.max_snoozes,
    }
}

/// The failed attempts' delays when no ladder applies: each a handler's, at most
/// `max_retry_after`.
fn no_ladder_delays(p: &HorizonParams) -> Duration {
    times(p.max_attempts.saturating_sub(1), p.max_retry_after)
}

/// `n` × `d`, saturating; a negative `n` counts as zero.
fn times(n: i32, d: Duration) -> Duration {
    d.saturating_mul(u32::try_from(n).unwrap_or(0))
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
        let http_keys = match self.http_keys.is_zero() {
            true => Err(
                "http-key retention is 0s; set retention.http_keys to a duration \
                         longer than zero (and than the API's request lease)"
                    .to_string(),
            ),
            false => Ok(()),
        };
        let windows = self.windows().map(|w| self.check_alone(&w));
        collect(windows.into_iter().chain([http_keys]))
    }

    /// Checks that the enqueue-key and effect-key windows each cover the retry horizon
    /// plus [`HORIZON_MARGIN`]. The error names the setting, its value, the horizon,
    /// the margin and the value to raise it to.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::WorkerConfig;
    /// use idem::config::Retention;
    ///
    /// let s = Duration::from_secs;
    /// let h = WorkerConfig::default().horizon();
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

    fn windows(&self) -> [Window; 5] {
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
            w("intent", "retention.intents", self.intents, true),
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
         to at least {} or shorten the retry ladder, max_attempts, max_retry_after, \
         max_snooze or max_snoozes",
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

/// `d` rounded up to a whole second.
pub(crate) fn ceil_to_second(d: Duration) -> Duration {
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
    use crate::WorkerConfig;
    use crate::retry::{DEFAULT_JITTER, DEFAULT_LADDER};

    fn default_horizon() -> Horizon {
        WorkerConfig::default().horizon()
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Horizon params without handler-chosen delays or snoozes.
    fn params(max_attempts: i32, lease: u64, job_timeout: u64, rescue: u64) -> HorizonParams {
        HorizonParams {
            max_attempts,
            lease: secs(lease),
            job_timeout: secs(job_timeout),
            rescue_interval: secs(rescue),
            max_retry_after: Duration::ZERO,
            max_snooze: Duration::ZERO,
            max_snoozes: 0,
        }
    }

    #[test]
    fn the_default_horizon_is_what_the_formula_says() {
        let c = WorkerConfig::default();
        assert_eq!(
            (c.max_attempts, c.lease, c.job_timeout, c.rescue_interval),
            (8, secs(30), secs(60), secs(5))
        );
        assert_eq!(
            (c.max_retry_after, c.max_snooze, c.max_snoozes),
            (secs(3600), secs(3600), 10)
        );
        let h = default_horizon();
        // 7 failed attempts walk the 7 rungs once, each at its jitter maximum.
        let rungs: Duration = DEFAULT_LADDER.iter().sum();
        let ladder = rungs.mul_f64(1.0 + DEFAULT_JITTER);
        assert!(
            h.ladder.abs_diff(ladder) < Duration::from_micros(1),
            "{h:?}"
        );
        // A handler may make each of the four rungs under 1 h (5.5 s … 11 min) wait 1 h.
        assert_eq!(
            h.ladder + h.handler_delays,
            4 * secs(3600) + secs(3960 + 11_880 + 23_760)
        );
        assert_eq!(human(h.ladder + h.handler_delays), "15h");
        assert_eq!(h.snoozes, 10 * (secs(3600) + secs(60) + secs(30) + secs(5)));
        assert_eq!(h.attempts, 8 * (secs(30) + secs(60) + secs(5)));
        assert_eq!(
            h.total,
            h.ladder + h.handler_delays + h.snoozes + h.attempts
        );
        assert_eq!((h.max_attempts, h.max_snoozes), (8, 10));
        assert_eq!(human(h.total), "1d 1h 28m 30s");
        assert_eq!(human(h.required_retention()), "1d 2h 28m 30s");
    }

    #[test]
    fn handler_delays_count_where_the_ladder_is_shorter() {
        let p = HorizonParams {
            max_retry_after: secs(3600),
            ..params(4, 1, 1, 1)
        };
        let short = RetryLadder::new([secs(60)]).jitter(0.0);
        let h = retry_horizon([&short], &p);
        assert_eq!(
            (h.ladder, h.handler_delays),
            (secs(180), secs(3 * 3600 - 180))
        );
        // The worst ladder alone and the worst with handler delays may be different
        // ladders; the terms still add up to the worst case.
        let spike = RetryLadder::new([secs(20 * 3600), Duration::ZERO]).jitter(0.0);
        let flat = RetryLadder::new([secs(7 * 3600)]).jitter(0.0);
        let h = retry_horizon([&spike, &flat], &p);
        assert_eq!(h.ladder, secs(21 * 3600), "flat: 3 × 7 h");
        assert_eq!(
            h.ladder + h.handler_delays,
            secs(22 * 3600),
            "spike: 20 h + 2 × 1 h"
        );
        let none = retry_horizon([], &p);
        assert_eq!(
            (none.ladder, none.handler_delays),
            (Duration::ZERO, secs(3 * 3600))
        );
    }

    #[test]
    fn each_snooze_counts_a_run_and_its_wait() {
        let p = HorizonParams {
            max_snooze: secs(600),
            max_snoozes: 3,
            ..params(1, 30, 60, 5)
        };
        let h = retry_horizon([&RetryLadder::default()], &p);
        assert_eq!(h.snoozes, 3 * secs(600 + 60 + 30 + 5));
        assert_eq!(h.total, h.snoozes + h.attempts);
        let never = HorizonParams {
            max_snoozes: -1,
            ..p
        };
        assert_eq!(retry_horizon([], &never).snoozes, Duration::ZERO);
    }

    #[test]
    fn the_default_retention_covers_the_default_horizon() {
        let h = default_horizon();
        Retention::default().validate().unwrap();
        Retention::default().check_covers(&h).unwrap();
        assert!(DEFAULT_RETENTION >= h.total + HORIZON_MARGIN);
        let checks = Retention::default().checks(&h);
        assert_eq!(checks.len(), 5);
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
            err.contains("retry horizon 1d 1h 28m 30s plus the 1h margin"),
            "{err}"
        );
        assert!(
            err.contains("raise retention.effect_keys to at least 1d 2h 28m 30s"),
            "{err}"
        );
        assert!(
            err.contains("max_retry_after, max_snooze or max_snoozes"),
            "{err}"
        );
        assert!(
            !err.contains("enqueue-key"),
            "only the short window is named: {err}"
        );
    }

    #[test]
    fn a_window_just_covering_the_horizon_passes() {
        let h = retry_horizon([], &params(2, 30, 60, 5));
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
        let h = retry_horizon([&short, &long], &params(4, 1, 1, 1));
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
