//! The retry ladder: the explicit list of delays between attempts.
//!
//! The delay after failed attempt `n` (1-based) is rung `n`; a job with more attempts than
//! rungs repeats the last rung. The default ladder's length decides
//! [`DEFAULT_MAX_ATTEMPTS`] (rungs + 1); a job's attempts are its own `max_attempts`,
//! capped by the worker's. A delay is jittered by up to ±`jitter` (10% by default) so that jobs
//! failing together do not retry together.
//!
//! What must stay true: every realised delay lies within
//! [`min_delay`](RetryLadder::min_delay)..=[`max_delay`](RetryLadder::max_delay) of its
//! attempt, so [`worst_case_total`](RetryLadder::worst_case_total) bounds every schedule
//! the ladder can produce, and
//! [`worst_case_delays`](RetryLadder::worst_case_delays) every schedule in which
//! handlers also choose delays (`JobError::retry_after`) up to the worker's
//! `max_retry_after`. The retention windows are checked against that bound
//! ([`crate::config::retry_horizon`]), and the property tests below hold these
//! functions to it.

use std::time::Duration;

/// The default ladder: 5 s, 30 s, 2 min, 10 min, 1 h, 3 h, 6 h.
pub const DEFAULT_LADDER: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3600),
    Duration::from_secs(3 * 3600),
    Duration::from_secs(6 * 3600),
];

/// Attempts allowed by default: the default ladder's rungs + 1.
pub const DEFAULT_MAX_ATTEMPTS: i32 = DEFAULT_LADDER.len() as i32 + 1;

/// Default jitter: ±10%.
pub const DEFAULT_JITTER: f64 = 0.10;

/// A retry ladder.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryLadder {
    /// Delay after the 1st, 2nd, … failed attempt; the last rung repeats if a job has
    /// more attempts than rungs.
    pub rungs: Vec<Duration>,
    /// Relative jitter, 0.0 to 1.0.
    pub jitter: f64,
}

impl Default for RetryLadder {
    fn default() -> Self {
        RetryLadder::new(DEFAULT_LADDER)
    }
}

impl RetryLadder {
    /// A ladder of `rungs` with the default jitter (±10%).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::retry::RetryLadder;
    ///
    /// let ladder = RetryLadder::new([Duration::from_secs(1), Duration::from_secs(10)]).jitter(0.0);
    /// assert_eq!(ladder.delay(1, 0.7), Duration::from_secs(1));
    /// assert_eq!(ladder.delay(5, 0.7), Duration::from_secs(10)); // the last rung repeats
    /// assert_eq!(ladder.worst_case_total(4), Duration::from_secs(21)); // 1 + 10 + 10
    /// ```
    pub fn new(rungs: impl Into<Vec<Duration>>) -> Self {
        RetryLadder {
            rungs: rungs.into(),
            jitter: DEFAULT_JITTER,
        }
    }

    /// Sets the relative jitter (0.0 to 1.0; checked by [`validate`](Self::validate)).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The un-jittered delay after failed attempt number `attempt` (1-based).
    pub fn base_delay(&self, attempt: i32) -> Duration {
        let idx = usize::try_from(attempt.max(1) - 1).unwrap_or(0);
        self.rungs
            .get(idx)
            .or(self.rungs.last())
            .copied()
            .unwrap_or(Duration::ZERO)
    }

    /// The jittered delay after failed attempt number `attempt`, using `unit` in
    /// `[0, 1)` as the random draw: 0 gives [`min_delay`](Self::min_delay), and the
    /// delay grows with `unit` towards [`max_delay`](Self::max_delay).
    pub fn delay(&self, attempt: i32, unit: f64) -> Duration {
        self.scaled(attempt, 2.0 * unit.clamp(0.0, 1.0) - 1.0)
    }

    /// The longest delay after failed attempt `attempt`: its rung × (1 + jitter).
    pub fn max_delay(&self, attempt: i32) -> Duration {
        self.scaled(attempt, 1.0)
    }

    /// The shortest delay after failed attempt `attempt`: its rung × (1 − jitter).
    pub fn min_delay(&self, attempt: i32) -> Duration {
        self.scaled(attempt, -1.0)
    }

    /// The longest a job can spend waiting between attempts if it fails all
    /// `max_attempts`: the sum of [`max_delay`](Self::max_delay) over failed attempts
    /// 1 to `max_attempts − 1` (the last failure goes to `dead`, with no delay after it).
    /// The last rung counts again for each attempt beyond the ladder.
    pub fn worst_case_total(&self, max_attempts: i32) -> Duration {
        self.worst_case_delays(max_attempts, Duration::ZERO)
    }

    /// [`worst_case_total`](Self::worst_case_total) when a handler may also choose a
    /// failed attempt's delay itself (`JobError::retry_after`), which the worker caps at
    /// `max_retry_after`: each failed attempt waits at most the larger of its
    /// [`max_delay`](Self::max_delay) and `max_retry_after`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::retry::RetryLadder;
    ///
    /// let s = Duration::from_secs;
    /// let ladder = RetryLadder::new([s(10), s(100)]).jitter(0.0);
    /// assert_eq!(ladder.worst_case_delays(4, s(50)), s(50 + 100 + 100));
    /// assert_eq!(ladder.worst_case_delays(4, Duration::ZERO), ladder.worst_case_total(4));
    /// ```
    pub fn worst_case_delays(&self, max_attempts: i32, max_retry_after: Duration) -> Duration {
        let failures = u32::try_from(max_attempts.saturating_sub(1)).unwrap_or(0);
        let on_ladder = failures.min(u32::try_from(self.rungs.len()).unwrap_or(u32::MAX));
        let worst = |attempt: i32| self.max_delay(attempt).max(max_retry_after);
        let climbed = (1..=on_ladder).fold(Duration::ZERO, |sum, attempt| {
            sum.saturating_add(worst(attempt as i32))
        });
        let beyond = failures - on_ladder;
        climbed.saturating_add(worst(i32::MAX).saturating_mul(beyond))
    }

    /// Checks the ladder; the error names the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.jitter) || self.jitter.is_nan() {
            return Err(format!(
                "retry jitter is {}; it must be between 0.0 and 1.0",
                self.jitter
            ));
        }
        if self.rungs.is_empty() {
            return Err("the retry ladder is [] (no rungs); give at least one delay".into());
        }
        Ok(())
    }

    /// The rung for `attempt` × (1 + jitter × `sign`), `sign` in [−1, 1]. Every delay
    /// goes through here, so the bounds and the draws round the same way and a draw
    /// never leaves its bounds.
    fn scaled(&self, attempt: i32, sign: f64) -> Duration {
        let factor = 1.0 + self.jitter * sign;
        let secs = (self.base_delay(attempt).as_secs_f64() * factor).max(0.0);
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delays_follow_the_ladder_within_jitter() {
        let l = RetryLadder::default();
        assert_eq!(l.base_delay(1), Duration::from_secs(5));
        assert_eq!(l.base_delay(7), Duration::from_secs(6 * 3600));
        assert_eq!(l.base_delay(20), Duration::from_secs(6 * 3600));
        assert_eq!(l.delay(1, 0.0), Duration::from_secs_f64(4.5));
        assert_eq!(l.delay(1, 1.0), Duration::from_secs_f64(5.5));
        assert_eq!(l.min_delay(1), Duration::from_secs_f64(4.5));
        assert_eq!(l.max_delay(1), Duration::from_secs_f64(5.5));
        assert_eq!(DEFAULT_MAX_ATTEMPTS, 8);
    }

    #[test]
    fn worst_case_total_sums_the_failed_attempts() {
        let l = RetryLadder::new([Duration::from_secs(10), Duration::from_secs(100)]).jitter(0.5);
        assert_eq!(l.worst_case_total(0), Duration::ZERO);
        assert_eq!(l.worst_case_total(1), Duration::ZERO);
        assert_eq!(l.worst_case_total(2), Duration::from_secs(15));
        assert_eq!(l.worst_case_total(3), Duration::from_secs(15 + 150));
        assert_eq!(l.worst_case_total(5), Duration::from_secs(15 + 3 * 150));
        let default_sum: Duration = DEFAULT_LADDER.iter().sum();
        let total = RetryLadder::default().worst_case_total(DEFAULT_MAX_ATTEMPTS);
        let expected = default_sum.mul_f64(1.0 + DEFAULT_JITTER);
        assert!(
            total.abs_diff(expected) < Duration::from_micros(1),
            "{total:?} vs {expected:?}"
        );
    }

    #[test]
    fn a_huge_ladder_saturates_instead_of_panicking() {
        let l = RetryLadder::new([Duration::MAX]).jitter(1.0);
        assert_eq!(l.max_delay(1), Duration::MAX);
        assert_eq!(l.worst_case_total(i32::MAX), Duration::MAX);
    }

    #[test]
    fn validate_names_the_bad_value() {
        let bad = RetryLadder::new(Vec::new());
        assert!(bad.validate().unwrap_err().contains("[] (no rungs)"));
        let one = || RetryLadder::new([Duration::from_secs(1)]);
        assert!(
            one()
                .jitter(2.0)
                .validate()
                .unwrap_err()
                .contains("jitter is 2")
        );
        assert!(
            one()
                .jitter(-0.1)
                .validate()
                .unwrap_err()
                .contains("jitter is -0.1")
        );
        let nan = one().jitter(f64::NAN).validate().unwrap_err();
        assert!(nan.contains("jitter is NaN"), "{nan}");
        assert_eq!(one().jitter(0.0).validate(), Ok(()));
        assert_eq!(one().jitter(1.0).validate(), Ok(()));
    }

    /// Ladders of 1–10 rungs of up to 30 days, with any valid jitter.
    fn ladder() -> impl Strategy<Value = RetryLadder> {
        let rung = (0u64..30 * 86_400_000).prop_map(Duration::from_millis);
        (prop::collection::vec(rung, 1..10), 0.0..=1.0f64)
            .prop_map(|(rungs, jitter)| RetryLadder::new(rungs).jitter(jitter))
    }

    proptest! {
        #[test]
        fn every_delay_lies_within_its_bounds(l in ladder(), attempt in 1..40i32, unit in 0.0..1.0f64) {
            let d = l.delay(attempt, unit);
            prop_assert!(l.min_delay(attempt) <= d, "{d:?} < min {:?}", l.min_delay(attempt));
            prop_assert!(d <= l.max_delay(attempt), "{d:?} > max {:?}", l.max_delay(attempt));
            let base = l.base_delay(attempt).as_secs_f64();
            let slack = 1e-6 * (1.0 + base); // rounding to whole nanoseconds
            prop_assert!(d.as_secs_f64() >= base * (1.0 - l.jitter) - slack);
            prop_assert!(d.as_secs_f64() <= base * (1.0 + l.jitter) + slack);
        }

        #[test]
        fn the_delay_after_attempt_n_is_rung_n(l in ladder(), attempt in 1..40i32) {
            let n = l.rungs.len();
            let idx = usize::try_from(attempt - 1).unwrap();
            let expected = if idx < n { l.rungs[idx] } else { l.rungs[n - 1] };
            prop_assert_eq!(l.base_delay(attempt), expected);
            let flat = l.clone().jitter(0.0);
            prop_assert_eq!(flat.delay(attempt, 0.5), flat.base_delay(attempt));
        }

        #[test]
        fn the_horizon_bounds_every_realised_schedule(
            l in ladder(),
            max_attempts in 0..30i32,
            draws in prop::collection::vec(0.0..1.0f64, 30),
        ) {
            let realised: Duration = (1..max_attempts)
                .map(|attempt| l.delay(attempt, draws[(attempt - 1) as usize]))
                .sum();
            prop_assert!(realised <= l.worst_case_total(max_attempts));
        }

        #[test]
        fn the_horizon_bounds_schedules_with_handler_chosen_delays(
            l in ladder(),
            max_attempts in 0..30i32,
            max_retry_after in (0u64..10 * 86_400_000).prop_map(Duration::from_millis),
            draws in prop::collection::vec(0.0..1.0f64, 30),
            chosen in prop::collection::vec(prop::option::of(any::<u64>()), 30),
        ) {
            // Each failed attempt waits the ladder's draw or, when its handler chose a
            // delay (any length, up to ~584 years), that delay capped at max_retry_after.
            let realised: Duration = (1..max_attempts)
                .map(|attempt| {
                    let i = (attempt - 1) as usize;
                    match chosen[i] {
                        Some(ms) => Duration::from_millis(ms).min(max_retry_after),
                        None => l.delay(attempt, draws[i]),
                    }
                })
                .fold(Duration::ZERO, Duration::saturating_add);
            prop_assert!(realised <= l.worst_case_delays(max_attempts, max_retry_after));
            prop_assert!(l.worst_case_total(max_attempts) <= l.worst_case_delays(max_attempts, max_retry_after));
        }

        #[test]
        fn the_horizon_grows_with_attempts(l in ladder(), max_attempts in 1..30i32) {
            let more = l.worst_case_total(max_attempts + 1);
            prop_assert_eq!(more, l.worst_case_total(max_attempts) + l.max_delay(max_attempts));
        }

        #[test]
        fn validate_refuses_jitter_out_of_range(jitter in prop_oneof![
            -1e9..-1e-12f64,
            1.000_000_001..1e9f64,
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
        ]) {
            let err = RetryLadder::default().jitter(jitter).validate().unwrap_err();
            prop_assert!(err.contains(&format!("jitter is {jitter}")), "{err}");
        }

        #[test]
        fn validate_accepts_jitter_in_range(l in ladder()) {
            prop_assert_eq!(l.validate(), Ok(()));
        }
    }
}
