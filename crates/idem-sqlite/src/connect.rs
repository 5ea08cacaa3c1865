//! The store's settings ([`SqliteOptions`]) and how they and a URL become configured
//! connections.
//!
//! `sqlite://path` and `sqlite:path` name a file; idem's own `synchronous=full|normal`
//! parameter is taken out, and any other query parameter goes to SQLite as a URI
//! parameter (`mode`, `vfs`, …). In-memory databases are refused: idem needs a durable
//! file that several connections and processes share. Every connection gets the store's
//! `synchronous`, the busy timeout and `foreign_keys=ON`; a store that may create its
//! file also switches it to WAL (a write, which a store opening an existing database
//! leaves out: idem's databases are WAL from their first open, and WAL is kept in the
//! file).

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem_store::{StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags};

use crate::error::interpret_error;

/// Default time a write waits for another process's write lock.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default longest time a group commit waits for more transactions to join.
pub const DEFAULT_GROUP_COMMIT_WINDOW: Duration = Duration::from_millis(2);
/// Default most transactions in one group commit.
pub const DEFAULT_GROUP_COMMIT_MAX: usize = 256;
/// Default number of read connections.
pub const DEFAULT_READERS: u32 = 4;

/// How durable each commit is (SQLite's `synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: a committed transaction survives power loss. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: in WAL mode survives a process crash; the last commits may
    /// be lost on power loss. Much faster on slow fsync.
    Normal,
}

/// Settings of an SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Commit durability.
    pub durability: Durability,
    /// How long a write waits for the write lock held by another connection or process.
    pub busy_timeout: Duration,
    /// Read connections.
    pub readers: u32,
    /// Group commit: the longest a group of transactions stays open for more to join
    /// while more are coming (with none coming, a transaction commits at once).
    pub group_commit_window: Duration,
    /// Group commit: the most transactions that share one `COMMIT`.
    pub group_commit_max: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            readers: DEFAULT_READERS,
            group_commit_window: DEFAULT_GROUP_COMMIT_WINDOW,
            group_commit_max: DEFAULT_GROUP_COMMIT_MAX,
        }
    }
}

/// Prepared statements kept per connection: every file in `queries/` and room for
/// callers' own.
const STATEMENT_CACHE: usize = 64;

/// Where and how to open a connection.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    url: String,
    /// A file path, or a `file:` URI when SQLite parameters were given.
    path: String,
    /// The database file itself.
    file: PathBuf,
    durability: Durability,
    busy_timeout: Duration,
    /// Whether the store may create the file and switch it to WAL.
    create: bool,
}

impl Target {
    pub(crate) fn parse(url: &str, options: &SqliteOptions) -> StoreResult<Target> {
        let Some(rest) = url.strip_prefix("sqlite:") else {
            return Err(StoreError::Config(format!(
                "{url:?} is not an SQLite URL; expected sqlite://path/to/file.db"
            )));
        };
        let rest = rest.trim_start_matches("//");
        if rest.is_empty() || rest.starts_with(":memory:") || rest.contains("mode=memory") {
            return Err(StoreError::Config(format!(
                "{url:?} names no file; idem needs a durable SQLite file, e.g. sqlite://idem.db"
            )));
        }
        let (rest, durability) = take_synchronous(rest, options.durability)?;
        let file = PathBuf::from(rest.split_once('?').map_or(rest.as_str(), |(f, _)| f));
        let path = match rest.split_once('?') {
            None => rest,
            Some((file, query)) => format!("file:{}?{query}", escape_path(file)),
        };
        Ok(Target {
            url: url.to_owned(),
            path,
            file,
            durability,
            busy_timeout: options.busy_timeout,
            create: true,
        })
    }

    /// This target for a store that opens an existing database and writes nothing on
    /// the way: [`StoreError::NotFound`] when the file is missing, and from here on no
    /// connection creates it or switches its journal mode.
    pub(crate) fn existing(mut self) -> StoreResult<Target> {
        if !self.file.exists() {
            let file = self.file.display();
            return Err(StoreError::not_found(format!("SQLite database {file}")));
        }
        self.create = false;
        Ok(self)
    }

    /// The URL as given.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Opens and configures a connection; `create` makes the file if it is missing
    /// (only when the target allows it).
    pub(crate) fn open(&self, create: bool) -> StoreResult<Connection> {
        untracked_allocations();
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create && self.create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = Connection::open_with_flags(&self.path, flags)
            .and_then(|c| self.configure(&c).map(|()| c))
            .map_err(|e| self.open_error(e))?;
        Ok(conn)
    }

    fn configure(&self, c: &Connection) -> rusqlite::Result<()> {
        busy_handler(c, self.busy_timeout)?;
        c.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let synchronous = match self.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        if self.create {
            c.execute_batch("PRAGMA journal_mode = WAL;")?;
        }
        // temp_store: the savepoints of group commit keep their sub-journals in memory.
        c.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY;"
        ))
    }

    fn open_error(&self, e: rusqlite::Error) -> StoreError {
        match interpret_error(e) {
            StoreError::Database(msg) | StoreError::Unavailable(msg) => {
                StoreError::Unavailable(format!("cannot open {}: {msg}", self.url))
            }
            other => other,
        }
    }
}

/// While another connection holds the write lock, try again this often at first
/// (`BUSY_FINE_FOR`; a commit usually ends within it), then every `BUSY_COARSE_STEP`.
const BUSY_FINE_STEP: Duration = Duration::from_micros(50);
const BUSY_FINE_FOR: Duration = Duration::from_millis(10);
const BUSY_COARSE_STEP: Duration = Duration::from_millis(1);

/// Waits for a write lock held elsewhere for at most `timeout`, trying again on the
/// schedule above. SQLite's own handler sleeps 1, 2, 5, 10, … 100 ms between tries, so
/// a lock released just after a try cost the waiter up to 100 ms: the tail of
/// enqueue-to-start latency between two processes (docs/performance.md, 2026-12-02).
pub(crate) fn busy_handler(c: &Connection, timeout: Duration) -> rusqlite::Result<()> {
    // The limit travels as the handler's argument, in milliseconds: no allocation to free.
    let ms = usize::try_from(timeout.as_millis()).unwrap_or(usize::MAX);
    // SAFETY: the handle is this open connection's; the callback only reads its argument
    // as an integer and touches no SQLite state.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_busy_handler(c.handle(), Some(busy_wait), ms as *mut c_void)
    };
    match rc {
        rusqlite::ffi::SQLITE_OK => Ok(()),
        code => Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            Some("cannot install the busy handler".into()),
        )),
    }
}

/// Waits begun by [`busy_wait`] in this process.
static BUSY_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many times a connection of this process has found the write lock held by another
/// connection and begun to wait for it, since the process started.
pub fn busy_waits() -> u64 {
    BUSY_WAITS.load(Ordering::Relaxed)
}

/// Counts a wait begun by the writer's own loop (which takes turns with other processes).
pub(crate) fn count_busy_wait() {
    BUSY_WAITS.fetch_add(1, Ordering::Relaxed);
}

/// SQLite's busy callback: `count` tries so far in this wait, `limit_ms` the timeout.
/// Returns 0 to give up (the statement fails `SQLITE_BUSY`), non-zero to try again. One
/// wait runs on one thread within one call into SQLite, so its start is kept per thread.
extern "C" fn busy_wait(limit_ms: *mut c_void, count: c_int) -> c_int {
    thread_local! {
        static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let since = match count {
        0 => {
            BUSY_WAITS.fetch_add(1, Ordering::Relaxed);
            SINCE.set(Some(now));
            now
        }
        _ => SINCE.get().unwrap_or(now),
    };
    let limit = Duration::from_millis(limit_ms as usize as u64);
    let waited = now.saturating_duration_since(since);
    if waited >= limit {
        return 0;
    }
    let step = match waited < BUSY_FINE_FOR {
        true => BUSY_FINE_STEP,
        false => BUSY_COARSE_STEP,
    };
    std::thread::sleep(step.min(limit - waited));
    1
}

/// Turns off SQLite's count of the memory it allocates (`SQLITE_CONFIG_MEMSTATUS`), which
/// takes a process-wide mutex on every allocation: a tenth of the writer's time in a bulk
/// insert. Only possible before SQLite first initialises in this process; when another
/// library got there first, SQLite refuses and the count stays on (nothing else changes).
pub(crate) fn untracked_allocations() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_config is called with the argument this option takes (an int),
        // once, before this crate opens its first connection; SQLite answers
        // SQLITE_MISUSE without effect if it is already initialised.
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0);
        }
    });
}

/// A path as the path part of an SQLite `file:` URI.
fn escape_path(path: &str) -> String {
    path.replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23")
}

/// Takes idem's own `synchronous=full|normal` parameter out of the URL (it overrides
/// [`SqliteOptions::durability`]); the rest of the URL goes to the driver.
pub(crate) fn take_synchronous(
    url: &str,
    default: Durability,
) -> StoreResult<(String, Durability)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), default));
    };
    let mut durability = default;
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("synchronous", value)) => durability = parse_synchronous(url, value)?,
            _ => kept.push(param),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((url, durability))
}

fn parse_synchronous(url: &str, value: &str) -> StoreResult<Durability> {
    match value.to_ascii_lowercase().as_str() {
        "full" => Ok(Durability::Full),
        "normal" => Ok(Durability::Normal),
        other => Err(StoreError::Config(format!(
            "synchronous={other} in {url:?} is not supported; use \
             synchronous=full (the default) or synchronous=normal"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_comes_out_of_the_url() {
        let (url, d) =
            take_synchronous("sqlite://a.db?synchronous=NORMAL", Durability::Full).expect("parsed");
        assert_eq!((url.as_str(), d), ("sqlite://a.db", Durability::Normal));
        let (url, d) = take_synchronous(
            "sqlite://a.db?mode=rwc&synchronous=full",
            Durability::Normal,
        )
        .expect("parsed");
        assert_eq!(
            (url.as_str(), d),
            ("sqlite://a.db?mode=rwc", Durability::Full)
        );
        let (url, d) = take_synchronous("sqlite://a.db", Durability::Normal).expect("parsed");
        assert_eq!((url.as_str(), d), ("sqlite://a.db", Durability::Normal));
        let err = take_synchronous("sqlite://a.db?synchronous=off", Durability::Full).unwrap_err();
        assert!(err.to_string().contains("synchronous=off"), "{err}");
    }

    #[test]
    fn urls_become_paths_or_uris() {
        let o = SqliteOptions::default();
        let path = |url: &str| Target::parse(url, &o).map(|t| (t.path, t.durability));
        let full = Durability::Full;
        assert_eq!(path("sqlite://a.db").expect("a"), ("a.db".into(), full));
        assert_eq!(path("sqlite:/t/a.db").expect("b"), ("/t/a.db".into(), full));
        let (p, d) = path("sqlite:///t/a%.db?synchronous=normal&mode=rwc").expect("c");
        assert_eq!(
            (p.as_str(), d),
            ("file:/t/a%25.db?mode=rwc", Durability::Normal)
        );
        for bad in [
            "sqlite::memory:",
            "sqlite://",
            "sqlite://x?mode=memory",
            "pg://x",
        ] {
            let err = path(bad).unwrap_err();
            assert!(matches!(err, StoreError::Config(_)), "{bad}: {err:?}");
        }
    }
}
