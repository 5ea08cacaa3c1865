//! Where "now" comes from.
//!
//! Leases are judged on the database clock, so production passes `now: None` to every
//! store operation ([`DatabaseClock`]). Tests and simulations inject time with
//! [`ManualClock`]; every time-dependent rule then follows the injected clock and no test
//! has to sleep.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_store::Timestamp;

/// A source of "now" for store operations.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The time to pass to the store; `None` = use the database clock.
    fn now(&self) -> Option<Timestamp>;
}

/// The database clock: every operation uses the store's own `now()`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DatabaseClock;

impl Clock for DatabaseClock {
    fn now(&self) -> Option<Timestamp> {
        None
    }
}

/// An injected clock that moves only when told to.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().expect("clock lock poisoned");
        *now += chrono::Duration::from_std(by).expect("advance fits in chrono::Duration");
    }

    /// The current injected time.
    pub fn get(&self) -> Timestamp {
        *self.now.lock().expect("clock lock poisoned")
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Option<Timestamp> {
        Some(self.get())
    }
}
