//! [`IntentPolicy`]: the timing of a remote call, from which its intent's lease follows.

use std::time::Duration;

use crate::config::human;
use crate::error::IdemError;

/// How long a remote call may take, and the lease its intent holds.
///
/// The lease must outlast the whole call even if no renewal gets through: the call's
/// timeout times (the client's own retries + 1), plus the backoff between those retries.
/// A shorter lease could lapse while the call is still in flight, and another attempt
/// would take the intent over and send it a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntentPolicy {
    /// How long an intent's holder keeps it without renewing (default 60 s). The guard
    /// renews it every third of this while the call runs.
    pub lease: Duration,
    /// The timeout of one try of the call (default 30 s).
    pub call_timeout: Duration,
    /// How many times the client itself retries the call within one attempt (default 0).
    pub client_retries: u32,
    /// The total backoff between those retries (default 0).
    pub client_backoff: Duration,
}

impl Default for IntentPolicy {
    fn default() -> Self {
        IntentPolicy {
            lease: Duration::from_secs(60),
            call_timeout: Duration::from_secs(30),
            client_retries: 0,
            client_backoff: Duration::ZERO,
        }
    }
}

impl IntentPolicy {
    /// The longest one attempt's call can take: timeout × (retries + 1) + backoff.
    pub fn longest_call(&self) -> Duration {
        self.call_timeout
            .saturating_mul(self.client_retries.saturating_add(1))
            .saturating_add(self.client_backoff)
    }

    /// Refuses a lease that does not exceed [`IntentPolicy::longest_call`], naming both.
    pub fn check(&self, kind: &str) -> Result<(), IdemError> {
        let longest = self.longest_call();
        if self.lease <= longest {
            return Err(IdemError::Config(format!(
                "the intent lease of job kind {kind:?} is {}, but one attempt's call can take \
                 {} (timeout {} × {} tries + backoff {}); a lease that lapses mid-call lets \
                 another attempt send it again: raise the lease above {} or shorten the call",
                human(self.lease),
                human(longest),
                human(self.call_timeout),
                u64::from(self.client_retries) + 1,
                human(self.client_backoff),
                human(longest),
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_must_exceed_the_longest_call() {
        let secs = Duration::from_secs;
        let p = IntentPolicy {
            lease: secs(30),
            call_timeout: secs(10),
            client_retries: 2,
            client_backoff: secs(1),
        };
        assert_eq!(p.longest_call(), secs(31));
        let err = p.check("http").unwrap_err().to_string();
        assert!(
            err.contains("is 30s") && err.contains("can take 31s"),
            "{err}"
        );
        let ok = IntentPolicy {
            lease: secs(32),
            ..p
        };
        ok.check("http").expect("32s > 31s");
        let equal = IntentPolicy {
            lease: secs(31),
            ..p
        };
        assert!(
            equal.check("http").is_err(),
            "a lease equal to the call is refused"
        );
        IntentPolicy::default()
            .check("http")
            .expect("the default holds");
    }
}
