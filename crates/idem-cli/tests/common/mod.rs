//! Running the real `idem` binary from a test: every process gets a scratch directory of
//! its own as `TMPDIR`, its output is read line by line as it comes, and every wait has a
//! generous deadline that only guards against a hang. Also the databases the operator
//! commands are tried on: an SQLite file at an older schema (an old build's migrations,
//! applied from the store's own SQL files) and a fresh PostgreSQL schema.

#![allow(dead_code)] // each test file uses a part

pub mod serve;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Deadline of a whole demo or bench run; only a hang reaches it.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// `idem` with `TMPDIR` set to `tmp` and no `IDEM_DATABASE_URL` from the test's own
/// environment.
pub fn idem(tmp: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
    cmd.env("TMPDIR", tmp).env_remove("IDEM_DATABASE_URL");
    cmd
}

/// A running `idem` whose stdout and stderr lines arrive on one channel, in order per
/// stream.
pub struct Running {
    pub child: Child,
    lines: Receiver<String>,
    /// Every line read so far, for failure messages.
    pub seen: Vec<String>,
}

impl Running {
    pub fn start(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start idem");
        let (tx, lines) = channel();
        forward(child.stdout.take().unwrap(), tx.clone());
        forward(child.stderr.take().unwrap(), tx);
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line for which `pick` answers, reading no further than needed.
    pub fn wait_for<T>(&mut self, what: &str, pick: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + RUN_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = pick(&line);
                    self.seen.push(line);
                    if let Some(v) = found {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {what} in {:#?}", self.seen),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("idem closed its output before {what}: {:#?}", self.seen)
                }
            }
        }
    }

    /// Waits for the process to exit (killing it past the deadline), then collects the
    /// lines it printed before exiting.
    pub fn exit(&mut self) -> ExitStatus {
        let status = wait_within(&mut self.child, RUN_LIMIT);
        // Output still in flight is read until both pipes close or a short while passes:
        // a child that outlived idem keeps its inherited stderr open.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        status
    }

    /// The process id of the `idem` process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn output(&self) -> String {
        self.seen.join("\n")
    }
}

fn forward(stream: impl Read + Send + 'static, tx: std::sync::mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// Waits for `child` to exit; kills it and fails the test after `limit`.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for idem") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("idem did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end and returns its exit status and everything it printed.
pub fn run(cmd: Command) -> (ExitStatus, String) {
    let mut running = Running::start(cmd);
    let status = running.exit();
    (status, running.output())
}

/// An SQLite database at `path` with idem's tables in it (made by `idem migrate`).
pub fn database_with_tables(tmp: &Path, path: &Path) {
    let mut cmd = idem(tmp);
    cmd.arg("--database-url")
        .arg(format!("sqlite://{}", path.display()))
        .arg("migrate");
    let (status, out) = run(cmd);
    assert!(status.success(), "idem migrate failed: {out}");
}

/// The bytes of an SQLite database: the file at `path` and its `-wal` file, if any. The
/// `-shm` file is left out: it is the shared-memory index every reader writes its read
/// marks into (`sqlite3 file .tables` changes it too); it holds no data.
pub fn snapshot(path: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let file = p.file_name().unwrap().to_string_lossy();
            file.starts_with(&name) && !file.ends_with("-shm")
        })
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The entries of a directory, by name.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The exit codes of `idem` (the table in `idem --help` and the README).
pub const CHECK_FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const NOT_FOUND: i32 = 3;
pub const UNAVAILABLE: i32 = 4;
pub const BAD_CONFIG: i32 = 5;
pub const SCHEMA_NOT_CURRENT: i32 = 6;

/// What a short command printed, stdout and stderr apart, and how it exited.
pub struct Out {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Panics unless the command exited with `code`.
    pub fn expect(&self, code: i32) -> &Out {
        assert_eq!(
            self.code,
            Some(code),
            "idem {:?} exit code; {self}",
            self.args
        );
        self
    }

    /// Panics unless stdout holds every one of `texts`.
    pub fn says(&self, texts: &[&str]) -> &Out {
        for text in texts {
            assert!(self.stdout.contains(text), "no {text:?} on stdout; {self}");
        }
        self
    }

    /// Panics unless stderr holds every one of `texts`.
    pub fn warns(&self, texts: &[&str]) -> &Out {
        for text in texts {
            assert!(self.stderr.contains(text), "no {text:?} on stderr; {self}");
        }
        self
    }

    /// The stdout parsed as JSON; panics when it is not exactly one JSON document.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("idem {:?} --json printed no JSON ({e}); {self}", self.args))
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `idem --database-url URL args…` (with its own `TMPDIR`) to its end.
pub fn idem_on(tmp: &Path, url: &str, args: &[&str]) -> Out {
    let mut cmd = idem(tmp);
    cmd.arg("--database-url").arg(url).args(args);
    let mut all = vec!["--database-url".to_owned(), url.to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    output(cmd, all)
}

/// Runs `cmd` to its end (killing it past [`RUN_LIMIT`]); stdout and stderr apart.
pub fn output(mut cmd: Command, args: Vec<String>) -> Out {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idem");
    let pid = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out: Output = match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.expect("wait for idem"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("idem {args:?} did not exit within {RUN_LIMIT:?}");
        }
    };
    Out {
        args,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `idem worker` running as a child process; killed if the test ends before it stops.
pub struct Worker(pub Running);

impl Worker {
    pub fn start(tmp: &Path, url: &str, flags: &[&str]) -> Worker {
        let mut cmd = idem(tmp);
        cmd.current_dir(tmp)
            .args(["--database-url", url, "worker", "--queue", "default"])
            .args(flags);
        let mut running = Running::start(cmd);
        running.wait_for("the worker's start line", |l| {
            l.starts_with("idem worker ").then_some(())
        });
        Worker(running)
    }

    /// Sends SIGTERM; the worker's last line, once it exited 0.
    pub fn stop(&mut self) -> String {
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
        unsafe { libc::kill(self.0.pid() as libc::pid_t, libc::SIGTERM) };
        let status = self.0.exit();
        assert!(status.success(), "{status}: {}", self.0.output());
        let stopped = self
            .0
            .seen
            .iter()
            .find(|l| l.contains("stopped by SIGTERM"));
        stopped
            .unwrap_or_else(|| panic!("no summary: {}", self.0.output()))
            .clone()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

/// Enqueues a job of `kind` with `idem enqueue`; returns its id.
pub fn enqueue(tmp: &Path, url: &str, kind: &str) -> i64 {
    let out = idem_on(tmp, url, &["enqueue", "--kind", kind]);
    out.expect(0).json()["job"]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no job id; {out}"))
}

/// An SQLite database at `path` made by `idem migrate`; returns its URL.
pub fn migrated_sqlite(tmp: &Path, path: &Path) -> String {
    let url = sqlite_url(path);
    idem_on(tmp, &url, &["migrate"]).expect(0);
    url
}

/// `sqlite://path`.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// The SQL of every migration of the SQLite store, in order: what an older build of idem
/// applied is a prefix of it.
const SQLITE_MIGRATIONS: [&str; idem_store::migration::COUNT] = [
    include_str!("../../../idem-sqlite/migrations/0001_job.sql"),
    include_str!("../../../idem-sqlite/migrations/0002_effect.sql"),
    include_str!("../../../idem-sqlite/migrations/0003_ledger.sql"),
    include_str!("../../../idem-sqlite/migrations/0004_counter.sql"),
    include_str!("../../../idem-sqlite/migrations/0005_enqueue_key.sql"),
    include_str!("../../../idem-sqlite/migrations/0006_counter_number_key.sql"),
    include_str!("../../../idem-sqlite/migrations/0007_enqueue_key_window.sql"),
    include_str!("../../../idem-sqlite/migrations/0008_job_snoozes.sql"),
    include_str!("../../../idem-sqlite/migrations/0009_intent.sql"),
    include_str!("../../../idem-sqlite/migrations/0010_job_enqueue_key.sql"),
    include_str!("../../../idem-sqlite/migrations/0011_http_key.sql"),
    include_str!("../../../idem-sqlite/migrations/0012_batch.sql"),
    include_str!("../../../idem-sqlite/migrations/0013_queue_pause.sql"),
    include_str!("../../../idem-sqlite/migrations/0014_job_trace.sql"),
    include_str!("../../../idem-sqlite/migrations/0015_state_checks.sql"),
    include_str!("../../../idem-sqlite/migrations/0016_job_awaits_intent.sql"),
    include_str!("../../../idem-sqlite/migrations/0017_job_awaited_intent.sql"),
    include_str!("../../../idem-sqlite/migrations/0018_leader.sql"),
];

/// How many migrations the tests' older databases have: all of this build's but the
/// last two.
pub const OLDER: usize = idem_store::migration::COUNT - 2;

/// The versions of this build's first `n` migrations.
pub fn versions_upto(n: usize) -> Vec<i64> {
    let names = idem_store::migration::NAMES;
    names.iter().take(n).map(|(v, _)| *v).collect()
}

/// `NNNN_name` of each migration an [`OLDER`] database lacks.
pub fn lacking() -> Vec<String> {
    let names = idem_store::migration::NAMES;
    let rest = names.iter().skip(OLDER);
    rest.map(|(v, name)| format!("{v:04}_{name}")).collect()
}

/// An SQLite database at `path` as a build of idem that had only the first `applied`
/// migrations left it: WAL, idem's migrations table, those migrations' SQL from the
/// store's own files, each recorded.
pub fn old_sqlite_database(path: &Path, applied: usize) {
    let names = idem_store::migration::NAMES;
    let conn = rusqlite::Connection::open(path).expect("create the old database");
    conn.execute_batch("PRAGMA journal_mode = WAL;")
        .expect("WAL");
    conn.execute_batch(include_str!(
        "../../../idem-sqlite/migrations/0000_migration_table.sql"
    ))
    .expect("migration table");
    for (sql, (version, name)) in SQLITE_MIGRATIONS.iter().zip(names).take(applied) {
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("migration {version}: {e}"));
        conn.execute(
            "INSERT INTO idem_migration (version, name, applied_at) VALUES (?1, ?2, 0)",
            rusqlite::params![version, name],
        )
        .expect("record");
    }
}

/// [`old_sqlite_database`] as `old.db` in `data`; its path and URL.
pub fn old_sqlite(data: &Path, applied: usize) -> (PathBuf, String) {
    let db = data.join("old.db");
    old_sqlite_database(&db, applied);
    let url = sqlite_url(&db);
    (db, url)
}

/// Runs statements on the SQLite file at `path` directly.
pub fn sqlite_exec(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The migration versions recorded in the SQLite file at `path`.
pub fn sqlite_versions(path: &Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let mut stmt = conn
        .prepare("SELECT version FROM idem_migration ORDER BY version")
        .expect("prepare");
    stmt.query_map([], |r| r.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("versions")
}

/// A fresh schema with idem's tables on the server of `IDEM_TEST_PG_URL`, dropped when
/// this goes out of scope.
pub struct PgSchema {
    base: String,
    pub schema: String,
    /// A URL whose sessions use the schema.
    pub url: String,
}

impl PgSchema {
    /// `None` (with a notice) when `IDEM_TEST_PG_URL` is unset outside CI; a panic under
    /// CI without it, as every PostgreSQL test of the workspace.
    pub fn migrated(tmp: &Path) -> Option<PgSchema> {
        let base = idem_store::testing::pg_url_or_skip()?;
        let schema = format!("idem_cli_test_{:016x}", rand::random::<u64>());
        block_on(async {
            let options = idem_postgres::PgOptions {
                schema: Some(schema.clone()),
                ..idem_postgres::PgOptions::default()
            };
            let store = idem_postgres::PgStore::connect(&base, options).await;
            let store = store.unwrap_or_else(|e| panic!("create schema {schema}: {e}"));
            idem_store::Store::close(&store).await;
        });
        let url = idem_postgres::url_with_search_path(&base, &schema);
        let made = PgSchema { base, schema, url };
        idem_on(tmp, &made.url, &["migrate"]).expect(0);
        Some(made)
    }

    /// The schema's URL with every session read-only.
    pub fn read_only_url(&self) -> String {
        format!(
            "{}&options=-c%20default_transaction_read_only%3Don",
            self.url
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        block_on(async {
            let store = idem_postgres::PgStore::connect(&self.base, Default::default()).await;
            let store = store.expect("connect to drop the schema");
            let mut tx = idem_store::Store::begin(&store).await.expect("begin");
            tx.execute(&sql, &[]).await.expect("drop schema");
            tx.commit().await.expect("commit");
            idem_store::Store::close(&store).await;
        });
    }
}

fn block_on<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(fut)
}

impl PgSchema {
    /// Runs `sql` (one statement) in the schema, in a transaction of its own.
    pub fn exec(&self, sql: &str) {
        block_on(async {
            let options = idem_postgres::PgOptions {
                schema: Some(self.schema.clone()),
                ..idem_postgres::PgOptions::default()
            };
            let store = idem_postgres::PgStore::connect(&self.base, options).await;
            let store = store.expect("connect to the test schema");
            let mut tx = idem_store::Store::begin(&store).await.expect("begin");
            tx.execute(sql, &[])
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            tx.commit().await.expect("commit");
            idem_store::Store::close(&store).await;
        });
    }
}

/// A migrated database of one store, reached through `idem` and, for a test's setup,
/// directly with SQL.
pub enum TestDb {
    Sqlite { path: PathBuf, url: String },
    Postgres(PgSchema),
}

impl TestDb {
    /// An SQLite file in `data` and, when PostgreSQL is configured, a fresh schema (as
    /// [`PgSchema::migrated`]): every store a test runs on.
    pub fn each(tmp: &Path, data: &Path) -> Vec<TestDb> {
        let path = data.join("idem.db");
        let url = migrated_sqlite(tmp, &path);
        let mut all = vec![TestDb::Sqlite { path, url }];
        all.extend(PgSchema::migrated(tmp).map(TestDb::Postgres));
        all
    }

    pub fn url(&self) -> &str {
        match self {
            TestDb::Sqlite { url, .. } => url,
            TestDb::Postgres(pg) => &pg.url,
        }
    }

    /// Runs one SQL statement (write it in the dialect both stores share, with
    /// [`TestDb::now`] and [`TestDb::no`] for times and booleans).
    pub fn exec(&self, sql: &str) {
        match self {
            TestDb::Sqlite { path, .. } => sqlite_exec(path, sql),
            TestDb::Postgres(pg) => pg.exec(sql),
        }
    }

    /// The SQL of the present time (SQLite stores milliseconds).
    pub fn now(&self) -> String {
        match self {
            TestDb::Sqlite { .. } => chrono::Utc::now().timestamp_millis().to_string(),
            TestDb::Postgres(_) => "now()".to_owned(),
        }
    }

    /// The SQL of false (SQLite stores 0).
    pub fn no(&self) -> &'static str {
        match self {
            TestDb::Sqlite { .. } => "0",
            TestDb::Postgres(_) => "false",
        }
    }

    /// Makes the jobs `ids` dead, as a last failed attempt leaves them.
    pub fn kill(&self, ids: &[i64]) {
        let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
        self.exec(&format!(
            "UPDATE idem_job SET state = 'dead', finalized_at = created_at, \
             last_error = 'boom' WHERE id IN ({})",
            ids.join(", ")
        ));
    }

    /// `idem --database-url URL args…`.
    pub fn idem(&self, tmp: &Path, args: &[&str]) -> Out {
        idem_on(tmp, self.url(), args)
    }

    /// Enqueues a job of `kind` in `queue`; returns its id.
    pub fn enqueue(&self, tmp: &Path, kind: &str, queue: &str) -> i64 {
        let out = self.idem(tmp, &["enqueue", "--kind", kind, "--queue", queue]);
        out.expect(0).json()["job"]["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("no job id; {out}"))
    }

    /// The state of job `id`, `None` when it does not exist.
    pub fn state(&self, tmp: &Path, id: i64) -> Option<String> {
        let out = self.idem(tmp, &["jobs", "show", &id.to_string(), "--json"]);
        match out.code {
            Some(0) => Some(out.json()["job"]["state"].as_str().unwrap().to_owned()),
            Some(NOT_FOUND) => None,
            _ => panic!("jobs show {id}; {out}"),
        }
    }
}
