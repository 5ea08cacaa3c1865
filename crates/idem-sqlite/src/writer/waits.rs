//! Waiting for the file's write lock while another connection holds it: the schedule of
//! tries, the count of time spent waiting (so an error can say whose fault a wait was),
//! and the error that names the other process.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Tries this often at first (a commit usually ends within `FINE_FOR`), then every
/// `COARSE_STEP`, each step with up to half of it again added at random so that
/// waiting processes do not try in lockstep.
const FINE_STEP: Duration = Duration::from_micros(50);
const FINE_FOR: Duration = Duration::from_millis(10);
const COARSE_STEP: Duration = Duration::from_micros(500);

/// Whether a driver error is SQLite's "the lock is held" (`BUSY`, `LOCKED`).
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The schedule of one wait.
pub(crate) struct Backoff {
    pub(crate) tries: u32,
    seed: u64,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        let nanos = process_start().elapsed().as_nanos() as u64;
        Backoff {
            tries: 0,
            seed: nanos ^ u64::from(std::process::id()).rotate_left(32) | 1,
        }
    }

    /// The pause before the next try, `waited` into the wait.
    pub(crate) fn next(&mut self, waited: Duration) -> Duration {
        self.tries += 1;
        // xorshift64: jitter needs no better randomness.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let step = if waited < FINE_FOR {
            FINE_STEP
        } else {
            COARSE_STEP
        };
        let extra = step.as_nanos() as u64 / 2;
        step + Duration::from_nanos(self.seed % (extra + 1))
    }
}

/// Whether this process's writer waits for another connection's write lock now, and
/// since when.
#[derive(Default)]
pub(crate) struct LockWaits {
    /// When the wait under way began (nanoseconds since the process's start, plus one),
    /// or 0.
    since: AtomicU64,
}

impl LockWaits {
    pub(crate) fn begin(&self, at: Instant) {
        self.since.store(offset(at) + 1, Ordering::SeqCst);
    }

    pub(crate) fn end(&self) {
        self.since.store(0, Ordering::SeqCst);
    }

    /// How long the wait under way has lasted, if the writer is waiting now.
    pub(crate) fn current(&self) -> Option<Duration> {
        match self.since.load(Ordering::SeqCst) {
            0 => None,
            since => Some(Duration::from_nanos(
                offset(Instant::now()).saturating_sub(since - 1),
            )),
        }
    }
}

fn process_start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn offset(at: Instant) -> u64 {
    at.saturating_duration_since(process_start()).as_nanos() as u64
}

/// The busy error of a write that waited `waited` for a lock held by another connection,
/// `holder` the process id of the idem process holding it when known.
pub(crate) fn held_elsewhere(waited: Duration, holder: Option<i32>) -> String {
    let who = match holder {
        Some(pid) => format!("another process (process {pid})"),
        None => "another process or connection".to_owned(),
    };
    format!(
        "{who} held this SQLite database's write lock for {waited:?} (the busy timeout) \
         while this process waited to write: processes writing one file take turns, and \
         one held its turn that long. Raise the busy timeout, give fewer processes write \
         work on the file (one worker process with more concurrency writes fastest), or \
         look for a long transaction in that process; for many writing processes use \
         PostgreSQL"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_starts_fine_and_jitters() {
        let mut b = Backoff::new();
        let early: Vec<Duration> = (0..64).map(|_| b.next(Duration::ZERO)).collect();
        assert!(
            early
                .iter()
                .all(|d| *d >= FINE_STEP && *d <= FINE_STEP * 3 / 2)
        );
        assert!(
            early.windows(2).any(|w| w[0] != w[1]),
            "no jitter: {early:?}"
        );
        let late = b.next(FINE_FOR);
        assert!(
            late >= COARSE_STEP && late <= COARSE_STEP * 3 / 2,
            "{late:?}"
        );
        assert_eq!(b.tries, 65);
    }

    #[test]
    fn a_wait_under_way_is_seen_until_it_ends() {
        process_start();
        let w = LockWaits::default();
        assert_eq!(w.current(), None);
        w.begin(Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        assert!(w.current().is_some_and(|d| d >= Duration::from_millis(5)));
        w.end();
        assert_eq!(w.current(), None, "nothing under way");
    }

    #[test]
    fn the_error_names_the_holder_when_known() {
        let known = held_elsewhere(Duration::from_secs(10), Some(4242));
        assert!(known.contains("process 4242"), "{known}");
        let unknown = held_elsewhere(Duration::from_secs(10), None);
        assert!(
            unknown.contains("another process or connection"),
            "{unknown}"
        );
    }
}
