//! Turns between processes writing one SQLite file.
//!
//! SQLite gives its write lock to whichever connection asks at the moment it is free, and
//! a process whose writer has more work begins its next group microseconds after its
//! commit, before a process polling for the lock tries again. So each process's writer
//! says what it does with POSIX record locks on a file beside the database
//! (`<db>.turn`), which the kernel drops when the process dies:
//!
//! - a shared lock on the `WAITING` byte while it has waited for the write lock longer
//!   than [`STARVING`];
//! - an exclusive lock on the `HOLDING` byte while it holds it (from `BEGIN IMMEDIATE` to
//!   the end of its group), so a waiter's error can name the holder's process id.
//!
//! After each commit a writer that sees such a waiter lets it go first: it begins nothing
//! until another process holds the lock, nobody waits that long any more, or
//! [`YIELD_AT_MOST`] has passed. A waiter that did not take the lock in that time (a
//! process stopped with SIGSTOP, or one that only holds the mark) is not stood aside
//! for again for [`IGNORE_FOR`], so it costs the others one pause a second, not one per
//! commit. Shorter waits are left to the waiters' fine-grained tries: standing aside
//! after every commit cost about a seventh of four processes' throughput for no fairer
//! shares (docs/performance.md).
//!
//! What must stay true: nothing here decides a write; SQLite's lock still serialises
//! them, so a wrong hint costs time, never safety. The file is created only by a writer
//! about to begin a transaction (a store that only reads creates nothing), opened
//! without following a symbolic link, never written, and readable and writable only by
//! those who may write the database.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A wait for the write lock this long is marked for the holder to see.
pub(crate) const STARVING: Duration = Duration::from_millis(20);
/// The longest a writer stands aside after a commit for other processes' waiters.
const YIELD_AT_MOST: Duration = Duration::from_millis(3);
/// How often a standing-aside writer looks whether a waiter took the lock.
const YIELD_STEP: Duration = Duration::from_micros(20);
/// How long a waiter that did not take the lock when let is not stood aside for.
const IGNORE_FOR: Duration = Duration::from_secs(1);

/// One process's view of the turn file of a database.
pub(crate) struct Turns {
    path: Option<PathBuf>,
    #[cfg(target_os = "linux")]
    file: std::sync::OnceLock<Option<std::fs::File>>,
    /// A waiter stood aside for in vain, and until when it is ignored.
    ignored: Mutex<Option<(i32, Instant)>>,
}

impl Turns {
    /// The turn file beside `db_file`, opened (and created) by [`Turns::prepare`].
    pub(crate) fn new(db_file: &Path) -> Turns {
        let path = (!db_file.as_os_str().is_empty()).then(|| {
            let mut name = db_file.as_os_str().to_owned();
            name.push(".turn");
            PathBuf::from(name)
        });
        Turns {
            path,
            #[cfg(target_os = "linux")]
            file: std::sync::OnceLock::new(),
            ignored: Mutex::new(None),
        }
    }

    /// Opens the turn file, creating it if missing; the writer calls it before it begins
    /// its first transaction. Without it (another platform, a directory idem may not
    /// write) processes take turns through SQLite's lock alone.
    pub(crate) fn prepare(&self) {
        #[cfg(target_os = "linux")]
        self.file.get_or_init(|| {
            let path = self.path.as_deref()?;
            imp::open(path)
                .inspect_err(
                    |e| tracing::debug!(error = %e, "no turn file: processes take turns unaided"),
                )
                .ok()
        });
    }

    #[cfg(target_os = "linux")]
    fn file(&self) -> Option<&std::fs::File> {
        self.file.get().and_then(Option::as_ref)
    }

    /// Marks this process as waiting (long) for the write lock, or no longer waiting.
    pub(crate) fn waiting(&self, on: bool) {
        #[cfg(target_os = "linux")]
        if let Some(f) = self.file() {
            let lock = if on {
                imp::Lock::Shared
            } else {
                imp::Lock::None
            };
            imp::set(f, imp::WAITING, lock);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = on;
    }

    /// Marks this process as holding the write lock, or no longer holding it.
    pub(crate) fn holding(&self, on: bool) {
        #[cfg(target_os = "linux")]
        if let Some(f) = self.file() {
            let lock = if on {
                imp::Lock::Exclusive
            } else {
                imp::Lock::None
            };
            imp::set(f, imp::HOLDING, lock);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = on;
    }

    /// The process id of another idem process holding the write lock, if one says so
    /// (an exclusive mark; a shared lock on that byte is no writer's).
    pub(crate) fn holder(&self) -> Option<i32> {
        #[cfg(target_os = "linux")]
        if let Some(f) = self.file() {
            return imp::other(f, imp::HOLDING)
                .and_then(|(pid, exclusive)| exclusive.then_some(pid));
        }
        None
    }

    /// The process id of another process that has waited long for the write lock.
    fn waiter(&self) -> Option<i32> {
        #[cfg(target_os = "linux")]
        if let Some(f) = self.file() {
            return imp::other(f, imp::WAITING).map(|(pid, _)| pid);
        }
        None
    }

    /// After a commit: lets a process that has waited long take the write lock before
    /// this one begins again; returns how long it stood aside.
    pub(crate) fn stand_aside(&self) -> Duration {
        let start = Instant::now();
        let Some(pid) = self.waiter() else {
            return Duration::ZERO;
        };
        let mut ignored = self.ignored.lock().unwrap_or_else(|p| p.into_inner());
        if ignored.is_some_and(|(p, until)| p == pid && start < until) {
            return Duration::ZERO;
        }
        loop {
            if self.holder().is_some() || self.waiter().is_none() {
                return start.elapsed();
            }
            if start.elapsed() >= YIELD_AT_MOST {
                *ignored = Some((pid, Instant::now() + IGNORE_FOR));
                return start.elapsed();
            }
            std::thread::sleep(YIELD_STEP);
        }
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

    /// Opens `path`, creating it readable and writable by each class of user that may
    /// write the database beside it (a reader of the database gets no access: a shared
    /// lock it held would read as a waiter).
    pub(super) fn open(path: &Path) -> io::Result<File> {
        let db = path.with_extension("");
        let write = std::fs::metadata(&db).map_or(0o200, |m| m.mode() & 0o222);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(write | (write << 1))
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
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

    /// The process id of another process with a lock on `byte`, and whether that lock
    /// is exclusive (this process's own locks never conflict, so they are not seen).
    pub(super) fn other(f: &File, byte: i64) -> Option<(i32, bool)> {
        let mut l = record(libc::F_WRLCK, byte);
        // SAFETY: a valid descriptor and a flock the call fills in.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) };
        match rc == 0 && l.l_type != libc::F_UNLCK as libc::c_short {
            true => Some((l.l_pid, l.l_type == libc::F_WRLCK as libc::c_short)),
            false => None,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn turns_beside(dir: &tempfile::TempDir, mode: u32) -> (Turns, PathBuf) {
        let db = dir.path().join("t.db");
        std::fs::write(&db, b"").expect("db");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(mode)).expect("mode");
        (Turns::new(&db), dir.path().join("t.db.turn"))
    }

    /// Locks of this process are invisible to itself: a check sees only other
    /// processes, so a process never stands aside for its own waiting. The file appears
    /// only when a writer prepares it.
    #[test]
    fn a_process_does_not_see_its_own_marks() {
        let dir = tempfile::tempdir().expect("dir");
        let (turns, turn) = turns_beside(&dir, 0o644);
        turns.waiting(true);
        assert!(
            !turn.exists(),
            "nothing created before a writer prepares it"
        );
        turns.prepare();
        assert!(turn.exists(), "the turn file exists");
        turns.waiting(true);
        turns.holding(true);
        assert_eq!(turns.waiter(), None);
        assert_eq!(turns.holder(), None);
        assert_eq!(
            turns.stand_aside(),
            Duration::ZERO,
            "nothing to stand aside for"
        );
        turns.holding(false);
        turns.waiting(false);
    }

    /// Only those who may write the database may open the turn file.
    #[test]
    fn the_turn_file_is_for_writers_only() {
        let dir = tempfile::tempdir().expect("dir");
        let (turns, turn) = turns_beside(&dir, 0o644);
        turns.prepare();
        let mode = std::fs::metadata(&turn).expect("turn").permissions().mode() & 0o777;
        assert_eq!(
            mode & 0o066,
            0,
            "readers of the database get no access: {mode:o}"
        );
    }

    /// A symbolic link planted as the turn file is not followed.
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("dir");
        let (turns, turn) = turns_beside(&dir, 0o644);
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, &turn).expect("link");
        turns.prepare();
        assert!(turns.file().is_none());
        assert!(!target.exists(), "nothing created through the link");
    }
}
