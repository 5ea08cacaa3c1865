//! The retry ladder: the explicit list of delays between attempts.
//!
//! The ladder's length decides the default number of attempts (rungs + 1). A delay is
//! jittered by up to ±10% so that jobs failing together do not retry together.

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
        RetryLadder {
            rungs: DEFAULT_LADDER.to_vec(),
            jitter: DEFAULT_JITTER,
        }
    }
}

impl RetryLadder {
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
    /// `[0, 1)` as the random draw.
    pub fn delay(&self, attempt: i32, unit: f64) -> Duration {
        let base = self.base_delay(attempt).as_secs_f64();
        let factor = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Duration::from_secs_f64((base * factor).max(0.0))
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
            return Err("the retry ladder has no rungs; give at least one delay".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_follow_the_ladder_within_jitter() {
        let l = RetryLadder::default();
        assert_eq!(l.base_delay(1), Duration::from_secs(5));
        assert_eq!(l.base_delay(7), Duration::from_secs(6 * 3600));
        assert_eq!(l.base_delay(20), Duration::from_secs(6 * 3600));
        assert_eq!(l.delay(1, 0.0), Duration::from_secs_f64(4.5));
        assert_eq!(l.delay(1, 1.0), Duration::from_secs_f64(5.5));
        assert_eq!(DEFAULT_MAX_ATTEMPTS, 8);
    }

    #[test]
    fn validate_names_the_bad_value() {
        let bad = RetryLadder {
            rungs: vec![],
            jitter: 0.1,
        };
        assert!(bad.validate().unwrap_err().contains("no rungs"));
        let bad = RetryLadder {
            rungs: vec![Duration::from_secs(1)],
            jitter: 2.0,
        };
        assert!(bad.validate().unwrap_err().contains("jitter is 2"));
    }
}
