//! Attack on issue 16's SQLite multi-process changes (the writer's own `BEGIN IMMEDIATE`
//! loop with `busy_timeout(0)`, the `<db>.turn` marks, the stand-aside after a commit,
//! and `WriterLock::acquire`'s busy message).
//!
//! Tests that say "found by the attack" showed a problem, fixed since; the others
//! are regression tests of what held (each says what it defends).
//!
//! Other processes are this test binary run again as a child
//! (`child_of_attack_16`, ignored), with a role in the environment: `mark:<byte>` takes
//! a shared POSIX record lock on that byte of the turn file, opened read-only (what any
//! process that may only read the database can do), `hold` opens the store and keeps a
//! write transaction open, `wait` writes while the parent holds the lock (and is then
//! stopped), `turns` walks through the ways a write transaction ends. Each says it is
//! ready on stdout and ends when its stdin closes.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_sqlite::{Durability, SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreError, StoreResult};
use rusqlite::Connection;

const ROLE_ENV: &str = "IDEM_ATTACK16_ROLE";
const DB_ENV: &str = "IDEM_ATTACK16_DB";
const READY: &str = "attack16-child-ready";

fn url(db: &Path) -> String {
    format!("sqlite://{}", db.display())
}

fn options(busy: Duration) -> SqliteOptions {
    SqliteOptions {
        busy_timeout: busy,
        durability: Durability::Normal,
        ..SqliteOptions::default()
    }
}

/// A migrated store on `db` with table `t`.
async fn store(db: &Path, busy: Duration) -> SqliteStore {
    let store = SqliteStore::connect(&url(db), options(busy))
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let mut tx = store.begin().await.expect("begin");
    tx.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER NOT NULL)", &[])
        .await
        .expect("create t");
    tx.commit().await.expect("commit");
    store
}

/// Inserts `x` in a transaction of its own.
async fn write(store: &SqliteStore, x: i64) -> StoreResult<()> {
    let mut tx = store.begin().await?;
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(x)])
        .await?;
    tx.commit().await
}

fn turn_file(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".turn");
    PathBuf::from(name)
}

/// Not a test of its own: the child process of the tests below (see the module doc).
#[test]
#[ignore = "the child process of attack_16's multi-process tests"]
fn child_of_attack_16() {
    let (Some(role), Some(db)) = (std::env::var_os(ROLE_ENV), std::env::var_os(DB_ENV)) else {
        return;
    };
    let role = role.into_string().expect("role");
    let db = PathBuf::from(db);
    let wait_for_parent = || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    };
    if let Some(byte) = role.strip_prefix("mark:") {
        let byte: i64 = byte.parse().expect("byte");
        // Read-only: a process that may read the database but not write it.
        let f = std::fs::File::open(turn_file(&db)).expect("open the turn file read-only");
        // SAFETY: flock is plain old data; all-zero is a valid value of it.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = libc::F_RDLCK as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = byte as libc::off_t;
        l.l_len = 1;
        // SAFETY: a valid descriptor and a flock the call only reads.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &l) };
        assert_eq!(rc, 0, "lock byte {byte}");
        println!("{READY}");
        wait_for_parent();
        drop(f);
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    if role == "wait" {
        // A worker's write that waits for the parent's lock (long enough to be marked).
        rt.block_on(async {
            let store = SqliteStore::connect(&url(&db), options(Duration::from_secs(60)))
                .await
                .expect("connect");
            println!("{READY}");
            write(&store, -2)
                .await
                .expect("written once the lock was free");
            let _ = tokio::task::spawn_blocking(wait_for_parent).await;
            store.close().await;
        });
        return;
    }
    if role == "turns" {
        rt.block_on(turns_child(&db));
        return;
    }
    assert_eq!(role, "hold", "unknown role {role}");
    rt.block_on(async {
        let store = SqliteStore::connect(&url(&db), options(Duration::from_secs(30)))
            .await
            .expect("connect");
        let mut tx = store.begin().await.expect("begin");
        tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(-1)])
            .await
            .expect("insert");
        println!("{READY}");
        let _ = tokio::task::spawn_blocking(wait_for_parent).await;
        tx.rollback().await.expect("rollback");
        store.close().await;
    });
}

/// A child in `role` on `db`, once it said it is ready.
fn child(role: &str, db: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_of_attack_16",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, role)
        .env(DB_ENV, db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // libtest may print "test child_of_attack_16 ... " before the child's own line.
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.ends_with(READY));
    assert!(ready, "the child ({role}) never got ready");
    // The rest of its output is read to the end, so its last lines do not fail on a
    // closed pipe.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    child
}

fn end(mut child: Child) {
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success(), "the child failed");
}

/// Found by the attack of 2026-12-04 and fixed since (item 1: a statement other than `BEGIN IMMEDIATE` that meets SQLITE_BUSY).
/// `open_existing` (what every operator command but `idem migrate` opens with, `idem
/// worker` included) leaves the journal mode as the file has it. On a rollback-journal
/// database (`journal_mode=DELETE`: made by another tool, or a backup made with
/// `VACUUM INTO`, whose copy is in DELETE mode, restored), `COMMIT` needs an
/// EXCLUSIVE lock and must wait for readers' SHARED locks. SQLite's busy handler used to
/// make it wait (up to the busy timeout); with `busy_timeout(0)` on the write connection
/// the `COMMIT` fails SQLITE_BUSY at once, the group is rolled back and the write fails
/// `Busy` ("database is locked") after no wait at all, while a reader is merely reading.
/// Expected: the write waits for the reader (counted in `busy_waits`, as before) and is
/// written once the reader ends.
#[tokio::test]
async fn a_commit_on_a_rollback_journal_database_waits_for_a_reader() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("rollback.db");
    {
        let c = Connection::open(&db).expect("create");
        c.execute_batch("PRAGMA journal_mode = DELETE; CREATE TABLE t (x INTEGER NOT NULL);")
            .expect("schema");
    }
    let store = SqliteStore::open_existing(&url(&db), options(Duration::from_secs(10)))
        .await
        .expect("open_existing");

    // Another connection in the middle of a read: a SHARED lock until its transaction ends.
    let reader = Connection::open(&db).expect("reader");
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM t;")
        .expect("read");

    let before = idem_sqlite::busy_waits();
    let started = Instant::now();
    let writing = tokio::spawn({
        let store = store.clone();
        async move { write(&store, 1).await }
    });
    // The reader ends once the write has begun to wait for it, or the write has ended.
    while idem_sqlite::busy_waits() == before && !writing.is_finished() {
        tokio::task::yield_now().await;
    }
    reader.execute_batch("COMMIT").expect("end the read");
    let written = writing.await.expect("join");
    let took = started.elapsed();
    assert!(
        written.is_ok(),
        "a write on a rollback-journal database failed after {took:?} (busy timeout 10s) \
         because a reader held its SHARED lock: {written:?}"
    );
    store.close().await;
}

/// Found by the attack of 2026-12-04 and fixed since (item 1, `WriterLock::acquire`'s message names the wrong cause). A handler's
/// transaction T1 whose first statement waited for another process's write lock (here
/// 1.4 s of a 2 s busy timeout) and that then stays open (the handler writes through the
/// client, T2, while its own transaction is open: the self-deadlock the old advice is
/// for). T2 waits for the writer only because of T1, yet the 1.4 s T1 spent waiting for
/// the other connection began after T2 started, so `elsewhere >= wait / 2` and T2's
/// `Busy` blames "another process ... held this SQLite database's write lock for 1.4s
/// (the busy timeout)" and advises raising the busy timeout, instead of "write through
/// that transaction". (The wait is a real-time rule; the hold is timed with wide margins.)
#[tokio::test]
async fn busy_names_this_process_s_open_transaction_after_an_earlier_wait() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("cause.db");
    let busy = Duration::from_secs(2);
    let store = store(&db, busy).await;

    let other = Connection::open(&db).expect("other");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");

    let before = idem_sqlite::busy_waits();
    let (holding_tx, holding_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let t1 = tokio::spawn({
        let store = store.clone();
        async move {
            let mut tx = store.begin().await.expect("T1 begins");
            tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(1)])
                .await
                .expect("T1 writes once the other connection lets go");
            let _ = holding_tx.send(());
            let _ = release_rx.await; // the handler's transaction stays open
            tx.rollback().await.expect("T1 rolls back");
        }
    });
    while idem_sqlite::busy_waits() == before {
        assert!(!t1.is_finished(), "T1 ended without waiting");
        tokio::task::yield_now().await;
    }
    // T1 waits for the other connection; now the handler writes through the client.
    let t2 = tokio::spawn({
        let store = store.clone();
        async move { write(&store, 2).await }
    });
    tokio::time::sleep(Duration::from_millis(1400)).await;
    other.execute_batch("COMMIT").expect("release");
    holding_rx.await.expect("T1 holds the write lock");

    let refused = t2.await.expect("join");
    let _ = release_tx.send(());
    t1.await.expect("T1");
    let Err(StoreError::Busy(msg)) = refused else {
        panic!("T2 is busy behind T1: {refused:?}");
    };
    assert!(
        msg.contains("write through that transaction"),
        "T2 waited for this process's own open transaction, but the error blames others: {msg}"
    );
    store.close().await;
}

/// Found by the attack of 2026-12-04 and fixed since (item 1, the turn file abused). Any process that may only *read* the
/// database (the turn file gets the database's mode, here 0644) can take a shared lock
/// on the turn file's byte 0, the "waited long" mark, and keep it. Every idem writer on
/// the file then stands aside after every commit for the whole 3 ms (no waiter ever
/// takes the lock), so a process's sequential writes each cost 3 ms more: here 200
/// writes take at least 600 ms instead of a few ms. Nothing breaks the busy timeout per
/// write, but one stray or stopped process caps every writer at ~330 commits a second.
#[tokio::test]
async fn a_stray_waiting_mark_costs_one_pause_not_one_per_commit() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("tax.db");
    let store = store(&db, Duration::from_secs(10)).await;
    const N: i64 = 200;
    let started = Instant::now();
    for x in 0..N {
        write(&store, x).await.expect("write");
    }
    let unmarked = started.elapsed();

    let marker = child("mark:0", &db);
    let started = Instant::now();
    for x in 0..N {
        write(&store, x).await.expect("write");
    }
    let marked = started.elapsed();
    end(marker);
    store.close().await;
    assert!(
        marked < unmarked * 2 + Duration::from_millis(200),
        "{N} writes took {unmarked:?} without the stray mark and {marked:?} with it: \
         each commit stood aside for a waiter that does not exist"
    );
}

/// The process holding a lock on `byte` of `db`'s turn file, as another process sees it.
fn marked_by(db: &Path, byte: i64) -> Option<i32> {
    let f = std::fs::File::open(turn_file(db)).expect("open the turn file");
    // SAFETY: flock is plain old data; all-zero is a valid value of it.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = byte as libc::off_t;
    l.l_len = 1;
    // SAFETY: a valid descriptor and a flock the call fills in.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) };
    (rc == 0 && l.l_type != libc::F_UNLCK as libc::c_short).then_some(l.l_pid)
}

/// Whether `pid` is stopped, per /proc (the process has one thread doing anything here:
/// its writer, asleep in `begin`'s back-off).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Found by the attack of 2026-12-04 and fixed since (item 1, the same tax from a real idem process: the chaos driver's zombie,
/// a debugger, a laptop's suspend of one process). An idem process whose write waited
/// over 20 ms is marked waiting; SIGSTOPped then (holding no SQLite lock, so the chaos
/// driver's `writable` probe calls it a fine zombie), it keeps the mark for as long as it
/// is stopped, and every other process stands aside 3 ms after each commit: 100
/// sequential writes take over 300 ms instead of a few ms.
#[tokio::test]
async fn a_stopped_waiter_costs_one_pause_not_one_per_commit() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("stopped.db");
    let store = store(&db, Duration::from_secs(10)).await;
    const N: i64 = 200;
    let started = Instant::now();
    for x in 0..N {
        write(&store, x).await.expect("write");
    }
    let unmarked = started.elapsed();

    let other = Connection::open(&db).expect("other");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let waiter = child("wait", &db);
    let pid = waiter.id();
    // Signals, not sleeps: the child's mark appears once it has waited 20 ms.
    while marked_by(&db, 0) != Some(pid as i32) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    while !is_stopped(pid) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    other.execute_batch("ROLLBACK").expect("release");

    let started = Instant::now();
    for x in 0..N {
        write(&store, x).await.expect("write");
    }
    let marked = started.elapsed();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    end(waiter);
    store.close().await;
    assert!(
        marked < unmarked * 2 + Duration::from_millis(200),
        "{N} writes took {unmarked:?} with no process stopped and {marked:?} with a \
         stopped waiter: each commit stood aside for it"
    );
}

/// Found by the attack of 2026-12-04 and fixed since (item 1, a busy error names the wrong process). A process with read access
/// takes a shared lock on byte 1 of the turn file, the "holding" mark. The real holder
/// (an idem process with an open write transaction) then cannot set its exclusive mark
/// (`F_SETLK` refused, silently), and `holder()`'s `F_GETLK` reports the stray reader's
/// lock: a write that times out names the stray process as the one holding the write
/// lock. Expected: the holder's pid, or no pid at all.
#[tokio::test]
async fn a_stray_shared_lock_on_the_holding_byte_is_not_named() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("who.db");
    let store = store(&db, Duration::from_millis(300)).await;

    let stray = child("mark:1", &db);
    let holder = child("hold", &db);
    let refused = write(&store, 1).await;
    let (stray_pid, holder_pid) = (stray.id(), holder.id());
    end(holder);
    end(stray);
    store.close().await;
    let Err(StoreError::Busy(msg)) = refused else {
        panic!("busy while the child holds the lock: {refused:?}");
    };
    assert!(
        !msg.contains(&format!("process {stray_pid})")),
        "the error names the stray reader {stray_pid}, not the holder {holder_pid}: {msg}"
    );
}

/// Holds (item 1, the turn file abused): a FIFO or a directory planted where the turn
/// file goes neither blocks opening the store nor its writes (the FIFO is opened
/// read-write, which does not wait for a peer; a directory cannot be opened and the
/// store goes on without turns). Defends `turns::imp::open`'s flags.
#[tokio::test]
async fn a_planted_fifo_or_directory_as_turn_file_does_not_stall_writes() {
    for planted in ["fifo", "dir"] {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("planted.db");
        let turn = turn_file(&db);
        match planted {
            "fifo" => {
                let name =
                    std::ffi::CString::new(turn.as_os_str().as_encoded_bytes()).expect("path");
                // SAFETY: a valid NUL-terminated path.
                let rc = unsafe { libc::mkfifo(name.as_ptr(), 0o600) };
                assert_eq!(rc, 0, "mkfifo");
            }
            _ => std::fs::create_dir(&turn).expect("mkdir"),
        }
        let opened = tokio::time::timeout(Duration::from_secs(20), async {
            let store = store(&db, Duration::from_secs(5)).await;
            for x in 0..10 {
                write(&store, x).await.expect("write");
            }
            store.close().await;
        })
        .await;
        assert!(opened.is_ok(), "a planted {planted} stalled the store");
        let meta = std::fs::symlink_metadata(&turn).expect("still there");
        assert!(!meta.is_file(), "the planted {planted} was not replaced");
    }
}

/// Holds (item 1, `begin`'s failure): a write that gives up after the busy timeout in
/// `BEGIN IMMEDIATE` leaves no state behind: the next write, once the other connection
/// let go, goes through, and a later long wait still counts as this process's waits
/// (the busy error of a third write, timed out while another connection holds the
/// lock, names another process or connection, not this process's transaction).
#[tokio::test]
async fn a_failed_begin_leaves_the_writer_usable_and_the_cause_right() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("again.db");
    let store = store(&db, Duration::from_millis(200)).await;
    for round in 0..3 {
        let other = Connection::open(&db).expect("other");
        other.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let refused = write(&store, round).await;
        let Err(StoreError::Busy(msg)) = refused else {
            panic!("busy while another connection holds the lock: {refused:?}");
        };
        assert!(
            msg.contains("another process or connection"),
            "round {round}: {msg}"
        );
        other.execute_batch("COMMIT").expect("release");
        write(&store, 100 + round)
            .await
            .expect("written once the lock is free");
    }
    let rows = store.query("SELECT x FROM t", &[]).await.expect("read");
    assert_eq!(rows.len(), 3, "only the writes told ok were kept");
    store.close().await;
}

fn new_job(queue: &str) -> idem_store::NewJob {
    idem_store::NewJob::new("k", queue, serde_json::json!({}), 3)
}

/// Found by the attack of 2026-12-04 and fixed since (item 1, a write stalls longer than one busy timeout). While another
/// connection holds the write lock, store operations sent to the writer thread each run
/// their own `BEGIN IMMEDIATE` wait of a full busy timeout, one after another (the
/// writer's loop serves them in turn; `WriterLock::acquire` bounds only the hand-off).
/// The third of three enqueues sent together hears `Busy` only after about three busy
/// timeouts. (The same serial waits happened under SQLite's busy handler before the
/// change; the new loop keeps them: a failed `begin` could fail the operations queued
/// behind it, or they could share the wait.)
#[tokio::test]
async fn writes_queued_behind_a_timed_out_one_do_not_each_wait_a_whole_timeout() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("queued.db");
    let busy = Duration::from_millis(300);
    let store = store(&db, busy).await;
    let other = Connection::open(&db).expect("other");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");

    let started = Instant::now();
    let writes: Vec<_> = (0..3)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let r = store
                    .job_insert_rows(idem_store::JobInsert {
                        jobs: vec![new_job("q")],
                        key_window_ms: 0,
                        now: None,
                    })
                    .await;
                (r.map(|_| ()), started.elapsed())
            })
        })
        .collect();
    let mut took = Vec::new();
    for w in writes {
        let (r, t) = w.await.expect("join");
        assert!(matches!(r, Err(StoreError::Busy(_))), "{r:?}");
        took.push(t);
    }
    other.execute_batch("ROLLBACK").expect("release");
    store.close().await;
    let longest = took.iter().max().copied().unwrap_or_default();
    assert!(
        longest < busy * 2,
        "busy timeout {busy:?}, but the writes heard Busy after {took:?}"
    );
}

fn claim(
    queue: &str,
    worker: &str,
    limit: u32,
    now: idem_store::Timestamp,
) -> idem_store::JobClaim {
    idem_store::JobClaim {
        queue: queue.into(),
        limit,
        lease_ms: 1_000,
        worker: worker.into(),
        kinds: None,
        principal: None,
        now: Some(now),
    }
}

/// Holds (item 2, `rescue.sql` with `retry_in_ms = 0`). A rescued job keeps its place
/// (claimed before a job enqueued after it) but: its next claim is at a new fence and
/// the stale fence's completion is refused, a job scheduled ahead is not claimed early
/// with it, and a rescued job of a paused queue is not claimed until the queue resumes.
/// Defends the rescue's `run_at` rule against the claim's predicates (time injected).
#[tokio::test]
async fn a_rescue_without_delay_keeps_the_place_and_nothing_else() {
    use idem_store::{JobComplete, JobInsert, JobRescue, LeaseToken, QueuePause};
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("rescue.db");
    let store = store(&db, Duration::from_secs(10)).await;
    let t0 = store.now().await.expect("now");
    let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
    let insert = |job: idem_store::NewJob, now| {
        let store = store.clone();
        async move {
            let rows = store
                .job_insert_rows(JobInsert {
                    jobs: vec![job],
                    key_window_ms: 0,
                    now: Some(now),
                })
                .await
                .expect("insert");
            rows[0].id
        }
    };
    let first = insert(new_job("q"), at(0)).await;
    let mut ahead = new_job("q");
    ahead.run_at = Some(at(60_000));
    let scheduled = insert(ahead, at(1)).await;
    let younger = insert(new_job("q"), at(2)).await;
    let paused_job = insert(new_job("p"), at(3)).await;

    let stale = store
        .job_claim(claim("q", "w1", 1, at(10)))
        .await
        .expect("claim");
    assert_eq!(stale.iter().map(|j| j.id).collect::<Vec<_>>(), [first]);
    let stale_p = store
        .job_claim(claim("p", "w1", 1, at(10)))
        .await
        .expect("claim p");
    assert_eq!(stale_p.len(), 1);
    store
        .queue_pause(QueuePause {
            queue: "p".into(),
            by: None,
            now: Some(at(20)),
        })
        .await
        .expect("pause");

    let rescued = store
        .job_rescue(JobRescue {
            limit: 10,
            retry_in_ms: 0,
            max_attempts: None,
            now: Some(at(2_000)),
        })
        .await
        .expect("rescue");
    assert_eq!(rescued.len(), 2, "{rescued:?}");
    assert!(rescued.iter().all(|j| j.run_at <= at(10)), "{rescued:?}");

    assert!(
        store
            .job_claim(claim("p", "w2", 10, at(2_001)))
            .await
            .expect("claim p")
            .is_empty(),
        "a paused queue's rescued job was claimed"
    );
    let next = store
        .job_claim(claim("q", "w2", 10, at(2_001)))
        .await
        .expect("claim again");
    let ids: Vec<i64> = next.iter().map(|j| j.id).collect();
    assert_eq!(
        ids,
        [first, younger],
        "in place; the scheduled job not early"
    );
    assert!(!ids.contains(&scheduled));
    assert_eq!(next[0].fence, stale[0].fence + 1);

    let refused = store
        .job_complete(JobComplete {
            lease: LeaseToken {
                job_id: first,
                fence: stale[0].fence,
            },
            result: None,
            now: Some(at(2_002)),
        })
        .await;
    assert!(refused.is_err(), "the stale fence completed: {refused:?}");
    store
        .job_complete(JobComplete {
            lease: LeaseToken {
                job_id: first,
                fence: next[0].fence,
            },
            result: None,
            now: Some(at(2_003)),
        })
        .await
        .expect("the live fence completes");
    store.queue_resume("p".into()).await.expect("resume");
    let resumed = store
        .job_claim(claim("p", "w2", 10, at(2_004)))
        .await
        .expect("claim p");
    assert_eq!(
        resumed.iter().map(|j| j.id).collect::<Vec<_>>(),
        [paused_job]
    );
    store.close().await;
}

/// Holds (item 1, statements other than `BEGIN IMMEDIATE` on the write connection of a
/// WAL database): while another connection truncates the log (`wal_checkpoint(TRUNCATE)`,
/// which restarts the WAL under the write connection's next write) and changes the
/// schema, and a third one reads in short snapshots, every write of the store succeeds:
/// no statement after `BEGIN IMMEDIATE` meets SQLITE_BUSY without the busy handler.
#[tokio::test]
async fn checkpoints_schema_changes_and_readers_do_not_make_wal_writes_busy() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("wal.db");
    let store = store(&db, Duration::from_secs(5)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let checkpoints = Arc::new(AtomicU64::new(0));
    let other = {
        let (db, stop, checkpoints) = (db.clone(), stop.clone(), checkpoints.clone());
        std::thread::spawn(move || {
            let c = Connection::open(&db).expect("other");
            c.busy_timeout(Duration::from_secs(5)).expect("busy");
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let _: (i64, i64, i64) = c
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .expect("checkpoint");
                checkpoints.fetch_add(1, Ordering::SeqCst);
                if i.is_multiple_of(4) {
                    c.execute_batch(&format!(
                        "CREATE TABLE s{i} (x INTEGER); DROP TABLE IF EXISTS s{};",
                        i.wrapping_sub(4)
                    ))
                    .expect("schema change");
                }
                i += 1;
            }
        })
    };
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let c = Connection::open(&db).expect("reader");
            c.busy_timeout(Duration::from_secs(5)).expect("busy");
            while !stop.load(Ordering::SeqCst) {
                c.execute_batch("BEGIN; SELECT count(*) FROM t; COMMIT;")
                    .expect("read");
            }
        })
    };
    let mut failed = Vec::new();
    let mut x = 0;
    while x < 300 || checkpoints.load(Ordering::SeqCst) < 20 {
        if let Err(e) = write(&store, x).await {
            failed.push(e);
        }
        x += 1;
    }
    stop.store(true, Ordering::SeqCst);
    other.join().expect("other");
    reader.join().expect("reader");
    store.close().await;
    assert!(
        failed.is_empty(),
        "{} of {x} writes failed: {failed:?}",
        failed.len()
    );
}

/// The child of `every_end_of_a_group_clears_the_holding_mark`: each way a write
/// transaction ends, saying `held <how>` with the transaction open and `ended <how>` once
/// it ended, each time waiting for a line from the parent before going on.
async fn turns_child(db: &Path) {
    let store = SqliteStore::connect(&url(db), options(Duration::from_secs(30)))
        .await
        .expect("connect");
    let next = || async {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).expect("stdin");
        })
        .await
        .expect("stdin");
    };
    for how in [
        "commit",
        "rollback",
        "statement-rollback",
        "drop",
        "failed-insert",
    ] {
        let mut tx = store.begin().await.expect("begin");
        tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(7)])
            .await
            .expect("insert");
        println!("held {how}");
        next().await;
        match how {
            "commit" => tx.commit().await.expect("commit"),
            "rollback" => tx.rollback().await.expect("rollback"),
            "statement-rollback" => {
                let ended = tx.execute("ROLLBACK", &[]).await;
                assert!(ended.is_err(), "a ROLLBACK statement is refused: {ended:?}");
                drop(tx);
            }
            "failed-insert" => {
                let refused = tx
                    .execute("INSERT INTO no_such_table VALUES (1)", &[])
                    .await;
                assert!(refused.is_err());
                tx.commit().await.expect("commit the rest");
            }
            _ => drop(tx),
        }
        println!("ended {how}");
        next().await;
    }
    store.close().await;
}

/// Holds (item 1, "can a group end without clearing its holding mark?"): another
/// process sees an idem process's holding mark while its write transaction is open,
/// and sees it cleared once the transaction ended by commit, rollback, a `ROLLBACK`
/// statement (which fails the group), a drop without commit, or a commit after a
/// failed statement. Defends `end_turn` on every path out of a group.
#[tokio::test]
async fn every_end_of_a_group_clears_the_holding_mark() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("marks.db");
    let store = store(&db, Duration::from_secs(10)).await;
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_of_attack_16",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, "turns")
        .env(DB_ENV, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let pid = child.id() as i32;
    let mut stdin = child.stdin.take().expect("stdin");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    for line in lines.map_while(Result::ok) {
        let line = line.rsplit(" ... ").next().unwrap_or_default().to_owned();
        let Some((what, how)) = line.split_once(' ') else {
            continue;
        };
        let want = match what {
            "held" => Some(pid),
            "ended" => None,
            _ => continue,
        };
        // A group left open by a rollback is committed by the writer thread a moment
        // later; a mark that is never cleared fails here.
        let deadline = Instant::now() + Duration::from_secs(5);
        while marked_by(&db, 1) != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(marked_by(&db, 1), want, "{what} {how}");
        seen.push(format!("{what} {how}"));
        writeln!(stdin, "go").expect("tell the child");
    }
    drop(stdin);
    let status = child.wait().expect("wait");
    eprintln!("marks seen: {seen:?}");
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert!(status.success(), "the child failed");
    store.close().await;
}

/// The names in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Found by the attack of 2026-12-04 and fixed since (the turn file against `open_existing`'s contract). `open_existing` "writes
/// nothing on the way: no file is created" (lib.rs), and `idem migrate --status` "writes
/// nothing and creates nothing" (idem-cli migrate.rs; README: every command but `idem
/// migrate` "opens the database that exists and writes nothing on the way"). The
/// writer now opens `<db>.turn` with `create(true)` on every start, so a read-only open
/// (`mode=ro`) that only reads the schema status leaves a new file beside the database.
/// Suggested fix: create the turn file only when the first write transaction begins
/// (or only from `connect`), and never for a read-only connection.
#[tokio::test]
async fn a_read_only_open_existing_creates_no_turn_file() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("ro.db");
    let made = store(&db, Duration::from_secs(5)).await;
    made.close().await;
    let turn = turn_file(&db);
    if turn.exists() {
        std::fs::remove_file(&turn).expect("remove the turn file of the creating store");
    }
    let before = entries(dir.path());

    let url = format!("{}?mode=ro", url(&db));
    let store = SqliteStore::open_existing(&url, options(Duration::from_secs(5)))
        .await
        .expect("open_existing read-only");
    let status = store.schema_status().await.expect("status");
    assert!(status.is_current(), "{status:?}");
    store.close().await;
    // SQLite's own `-wal` and `-shm` (a WAL reader makes them) are left out: they were
    // there before the change.
    let after: Vec<String> = entries(dir.path())
        .into_iter()
        .filter(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
        .collect();
    assert_eq!(
        after, before,
        "a read-only open_existing created files beside the database"
    );
}
