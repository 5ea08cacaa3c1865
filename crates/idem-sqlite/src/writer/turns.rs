//! Turns between processes writing one SQLite file.
//!
//! SQLite gives its write lock to whichever connection asks at the moment it is free, and
//! a process whose writer has more work begins its next group microseconds after its
//! commit, long before a process polling for the lock tries again: with several worker
//! processes one of them could hold the file for seconds while the others' heartbeats
//! waited until their leases expired. So each process's writer says what it does with
//! POSIX record locks on a file beside the database (`<db>.turn`), which the kernel drops
//! when the process dies:
//!
//! - a shared lock on the `WAITING` byte while it has waited for the write lock longer
//!   than [`STARVING`];
//! - an exclusive lock on the `HOLDING` byte while it holds it (from `BEGIN IMMEDIATE` to
//!   the end of its group), so a waiter's error can name the holder's process id.
//!
//! After each commit a writer that sees such a waiter lets it go first: it begins nothing
//! until another process holds the lock, nobody waits that long any more, or
//! [`YIELD_AT_MOST`] has passed (a waiter stopped with SIGSTOP must not stall the rest).
//! Shorter waits are left to the waiters' fine-grained tries: standing aside after
//! every commit cost about a seventh of four processes' throughput for no fairer
//! shares (docs/performance.md), so it is kept for the waits that would starve.
//! The locks are hints: without the file (another platform, a directory idem may not
//! write) writers still take turns through SQLite's lock, only less fairly.
//!
//! What must stay true: nothing here decides a write; SQLite's lock still serialises
//! them, so a wrong hint costs time, never safety. The file is opened without following
//! a symbolic link, and only locked, never written.

use std::path::Path;
use std::time::{Duration, Instant};

/// A wait for the write lock this long is marked for the holder to see.
pub(crate) const STARVING: Duration = Duration::from_millis(20);
/// The longest a writer stands aside after a commit for other processes' waiters.
const YIELD_AT_MOST: Duration = Duration::from_millis(3);
/// How often a standing-aside writer looks whether a waiter took the lock.
const YIELD_STEP: Duration = Duration::from_micros(20);

/// One process's view of the turn file of a database; [`Turns::none`] where there is none.
pub(crate) struct Turns {
    #[cfg(target_os = "linux")]
    file: Option<std::fs::File>,
}

impl Turns {
    /// The turn file beside `db_file`, created if missing; none if it cannot be opened.
    pub(crate) fn open(db_file: &Path) -> Turns {
        #[cfg(target_os = "linux")]
        {
            let file = match db_file.as_os_str().is_empty() {
                true => None,
                false => imp::open(db_file)
                    .inspect_err(|e| {
                        tracing::debug!(error = %e, "no turn file: processes take turns unaided")
                    })
                    .ok(),
            };
            Turns { file }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = db_file;
            Turns {}
        }
    }

    /// No turn file.
    #[cfg(test)]
    pub(crate) fn none() -> Turns {
        Turns {
            #[cfg(target_os = "linux")]
            file: None,
        }
    }

    /// Marks this process as waiting (long) for the write lock, or no longer waiting.
    pub(crate) fn waiting(&self, on: bool) {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.file {
            imp::set(
                f,
                imp::WAITING,
                if on {
                    imp::Lock::Shared
                } else {
                    imp::Lock::None
                },
            );
        }
        #[cfg(not(target_os = "linux"))]
        let _ = on;
    }

    /// Marks this process as holding the write lock, or no longer holding it.
    pub(crate) fn holding(&self, on: bool) {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.file {
            imp::set(
                f,
                imp::HOLDING,
                if on {
                    imp::Lock::Exclusive
                } else {
                    imp::Lock::None
                },
            );
        }
        #[cfg(not(target_os = "linux"))]
        let _ = on;
    }

    /// The process id of another idem process holding the write lock, if one says so.
    pub(crate) fn holder(&self) -> Option<i32> {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.file {
            return imp::other(f, imp::HOLDING);
        }
        None
    }

    /// Whether another process has waited long for the write lock.
    pub(crate) fn others_waiting(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.file {
            return imp::other(f, imp::WAITING).is_some();
        }
        false
    }

    /// After a commit: lets a waiting process take the write lock before this one begins
    /// again; returns how long it stood aside.
    pub(crate) fn stand_aside(&self) -> Duration {
        let start = Instant::now();
        while self.others_waiting() && self.holder().is_none() && start.elapsed() < YIELD_AT_MOST {
            std::thread::sleep(YIELD_STEP);
        }
        start.elapsed()
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;

    pub(super) const WAITING: i64 = 0;
    pub(super) const HOLDING: i64 = 1;

    pub(super) enum Lock {
        None,
        Shared,
        Exclusive,
    }

    pub(super) fn open(db_file: &Path) -> io::Result<File> {
        let mut name = db_file.as_os_str().to_owned();
        name.push(".turn");
        // Readable and writable by whoever may write the database.
        let mode = std::fs::metadata(db_file).map_or(0o600, |m| m.mode() & 0o666);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(name)
    }

    fn record(kind: libc::c_int, byte: i64) -> libc::flock {
        // SAFETY: flock is plain old data; all-zero is a valid value of it.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = byte as libc::off_t;
        l.l_len = 1;
        l
    }

    /// Sets this process's lock on `byte`, without waiting; a refusal (another
    /// process's lock in the way) leaves the hint unset, which costs only fairness.
    pub(super) fn set(f: &File, byte: i64, lock: Lock) {
        let kind = match lock {
            Lock::None => libc::F_UNLCK,
            Lock::Shared => libc::F_RDLCK,
            Lock::Exclusive => libc::F_WRLCK,
        };
        let l = record(kind, byte);
        // SAFETY: a valid descriptor and a flock the call only reads.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &l) };
    }

    /// The process id of another process with a lock on `byte` (this process's own
    /// locks never conflict with it, so they are not seen).
    pub(super) fn other(f: &File, byte: i64) -> Option<i32> {
        let mut l = record(libc::F_WRLCK, byte);
        // SAFETY: a valid descriptor and a flock the call fills in.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) };
        match rc == 0 && l.l_type != libc::F_UNLCK as libc::c_short {
            true => Some(l.l_pid),
            false => None,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Locks of this process are invisible to itself: a check sees only other
    /// processes, so a process never stands aside for its own waiting.
    #[test]
    fn a_process_does_not_see_its_own_marks() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("t.db");
        std::fs::write(&db, b"").expect("db");
        let turns = Turns::open(&db);
        assert!(
            dir.path().join("t.db.turn").exists(),
            "the turn file exists"
        );
        turns.waiting(true);
        turns.holding(true);
        assert!(!turns.others_waiting());
        assert_eq!(turns.holder(), None);
        assert!(
            turns.stand_aside() < YIELD_AT_MOST,
            "nothing to stand aside for"
        );
        turns.holding(false);
        turns.waiting(false);
        assert!(Turns::none().holder().is_none());
    }

    /// A symbolic link planted as the turn file is not followed.
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("t.db");
        std::fs::write(&db, b"").expect("db");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join("t.db.turn")).expect("link");
        let turns = Turns::open(&db);
        assert!(turns.file.is_none());
        assert!(!target.exists(), "nothing created through the link");
    }
}
