//! A PostgreSQL server of the chaos run's own ([`OwnPostgres`]), which the run may crash
//! and restart (immediate mode: crash recovery on the way back) and whose client
//! connections it may cut, without touching the machine's shared server.
//!
//! The server runs from a temporary directory (data, socket and log) on a free loopback
//! port, with `fsync` on so that its crash recovery is the real one. PostgreSQL refuses to
//! run as root: as root, its tools run as the `postgres` system user (`runuser`), which
//! owns the directory.
//!
//! For a failover, [`OwnPostgres::standby`] builds a streaming standby of a running server
//! (`pg_basebackup -R`, its own directory and port), which can be stopped hard, moved to
//! another port ([`OwnPostgres::move_to`]) and promoted.
//!
//! What must stay true: the server stops and its directory goes when the `OwnPostgres` is
//! stopped or dropped. A run killed with SIGKILL cannot do that: its server keeps running
//! from a directory named `idem-chaos-pg-*` in the temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{Connection, PgConnection};
use tempfile::TempDir;

/// The system user PostgreSQL's tools run as when this process is root.
const POSTGRES_USER: &str = "postgres";
/// The lowest port [`free_port`] picks below the ephemeral range (clear of the
/// registered ports most servers use).
const FIRST_PORT: u16 = 20_000;
/// How long `pg_ctl` waits for the server to start, restart or stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";
/// How long `pg_terminate_backend` waits for one backend to exit, in milliseconds.
const TERMINATE_WAIT_MS: i64 = 5000;
/// Client backends other than the caller's, up to `$1` picked at random, terminated and
/// waited for; answers how many ended.
const TERMINATE_SQL: &str = "WITH picked AS MATERIALIZED (
    SELECT pid FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
    ORDER BY random() LIMIT $1)
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, $2)) FROM picked";

/// A running PostgreSQL server in a temporary directory; stopped and removed on drop.
pub(crate) struct OwnPostgres {
    url: String,
    bin: PathBuf,
    port: u16,
    /// The directory of the server's Unix socket.
    socket: String,
    /// `None` once stopped.
    dir: Option<TempDir>,
    data: PathBuf,
    log: PathBuf,
    /// The server's options, the same at start and restart (until [`OwnPostgres::move_to`]).
    options: String,
    /// Options added to [`server_options`]: a standby's `primary_conninfo`.
    extra: String,
    /// True when the tools run as [`POSTGRES_USER`] (this process is root).
    as_postgres: bool,
}

impl OwnPostgres {
    /// Finds the server binaries, creates a cluster in a temporary directory and starts a
    /// server on a free port of 127.0.0.1. PostgreSQL 14 or later.
    pub(crate) async fn start() -> anyhow::Result<OwnPostgres> {
        let bin = server_bindir()?;
        let as_postgres = running_as_root();
        let dir = scratch_dir(as_postgres)?;
        let port = free_port()?;
        let pg = OwnPostgres::new(bin, dir, port, String::new(), as_postgres);
        pg.initdb().await?;
        pg.pg_ctl(&["start"], "start the server").await?;
        Ok(pg)
    }

    /// The server of `dir/data` on `port` of 127.0.0.1 (not started), with `extra`
    /// options.
    fn new(bin: PathBuf, dir: TempDir, port: u16, extra: String, as_postgres: bool) -> Self {
        let socket = dir.path().display().to_string();
        OwnPostgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            bin,
            port,
            data: dir.path().join("data"),
            log: dir.path().join("server.log"),
            options: format!("{} {extra}", server_options(port, &socket)),
            socket,
            extra,
            dir: Some(dir),
            as_postgres,
        }
    }

    /// Builds a streaming standby of this server and starts it on a port of its own:
    /// `pg_basebackup -R` (which writes `standby.signal` and `primary_conninfo`) into a
    /// temporary directory, and `primary_conninfo` given again on the command line with
    /// `application_name` = `name`, the name `synchronous_standby_names` can list.
    pub(crate) async fn standby(&self, name: &str) -> anyhow::Result<OwnPostgres> {
        let dir = scratch_dir(self.as_postgres)?;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={name}",
            self.port
        );
        // The receiver reconnects 0.5 s after losing its primary (a restart fault), not 5 s:
        // a synchronous standby's absence stops every commit.
        let extra =
            format!("-c primary_conninfo='{conninfo}' -c wal_retrieve_retry_interval=500ms");
        let standby =
            OwnPostgres::new(self.bin.clone(), dir, free_port()?, extra, self.as_postgres);
        let mut cmd = standby.tool("pg_basebackup");
        cmd.args(["-d", &conninfo, "-D"]).arg(&standby.data);
        cmd.args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
        standby
            .run(cmd, "copy the server for a standby (pg_basebackup)")
            .await?;
        standby.pg_ctl(&["start"], "start the standby").await?;
        Ok(standby)
    }

    /// The server's port on 127.0.0.1.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server as a crash would (`pg_ctl -m immediate stop`), keeping its
    /// directory (until dropped).
    pub(crate) async fn crash(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "immediate", "stop"], "stop the server (immediate)")
            .await
    }

    /// Starts the stopped server again on `port` (the address of another server, which
    /// moves to this one), without `primary_conninfo`: a standby whose primary is gone
    /// stays in recovery there, replaying what it has, until promoted.
    pub(crate) async fn move_to(&mut self, port: u16) -> anyhow::Result<()> {
        self.port = port;
        self.url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        self.extra = "-c primary_conninfo=''".into();
        self.options = format!("{} {}", server_options(port, &self.socket), self.extra);
        self.pg_ctl(&["start"], "start the standby on the moved address")
            .await
    }

    /// Promotes a standby (`pg_ctl promote -w`: returns once it accepts writes).
    pub(crate) async fn promote(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["promote"], "promote the standby").await
    }

    /// Runs `sql` (statements that cannot run in a transaction block too, such as `ALTER
    /// SYSTEM`) on a connection of its own.
    pub(crate) async fn execute(&self, sql: &'static str) -> anyhow::Result<()> {
        let mut conn = PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to the run's server at {}", self.url))?;
        sqlx::raw_sql(sql)
            .execute(&mut conn)
            .await
            .with_context(|| format!("{sql} failed at {}", self.url))?;
        let _ = conn.close().await;
        Ok(())
    }

    /// One statement on a connection of its own, answering its one value.
    pub(crate) async fn scalar<T>(&self, sql: &'static str) -> anyhow::Result<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        let mut conn = PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to the run's server at {}", self.url))?;
        let value = sqlx::query_scalar(sql)
            .fetch_one(&mut conn)
            .await
            .with_context(|| format!("{sql} failed at {}", self.url))?;
        let _ = conn.close().await;
        Ok(value)
    }

    /// The server's URL, `postgres://postgres@127.0.0.1:PORT/postgres` (no password).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Crashes the server (`pg_ctl -m immediate restart`: no shutdown checkpoint, crash
    /// recovery at start) and waits until it accepts connections again; answers how long
    /// that took.
    pub(crate) async fn restart_immediate(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let restart = ["-m", "immediate", "restart"];
        self.pg_ctl(&restart, "restart the server (immediate)")
            .await?;
        Ok(started.elapsed())
    }

    /// Terminates up to `n` client connections other than its own, picked at random, and
    /// waits for them to end; answers how many it terminated.
    pub(crate) async fn terminate_backends(&self, n: usize) -> anyhow::Result<usize> {
        let mut conn = PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to the run's server at {}", self.url))?;
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let ended: i64 = sqlx::query_scalar(TERMINATE_SQL)
            .bind(limit)
            .bind(TERMINATE_WAIT_MS)
            .fetch_one(&mut conn)
            .await
            .context("cannot terminate the server's client connections")?;
        let _ = conn.close().await;
        Ok(usize::try_from(ended).unwrap_or(0))
    }

    /// Stops the server (immediate mode) and removes its directory.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "immediate", "stop"], "stop the server")
            .await?;
        let dir = self.dir.take().context("the server was already stopped")?;
        let path = dir.path().to_owned();
        dir.close()
            .with_context(|| format!("cannot remove {}", path.display()))
    }

    /// Creates the cluster: trust authentication, superuser `postgres`, no fsync of its
    /// files (the server's own writes are fsynced), no dependence on the machine's locales.
    async fn initdb(&self) -> anyhow::Result<()> {
        let mut cmd = self.tool("initdb");
        cmd.arg("-D").arg(&self.data);
        cmd.args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"]);
        self.run(cmd, "create the cluster (initdb)").await
    }

    /// Runs `pg_ctl` on the cluster with the server's options, waiting for it to finish.
    async fn pg_ctl(&self, action: &[&str], what: &str) -> anyhow::Result<()> {
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("-D").arg(&self.data).arg("-l").arg(&self.log);
        cmd.args(["-w", "-t", PG_CTL_WAIT_SECS, "-o", &self.options])
            .args(action);
        self.run(cmd, what).await
    }

    /// A server tool, run as [`POSTGRES_USER`] when this process is root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        let mut cmd = if self.as_postgres {
            let mut runuser = Command::new("runuser");
            runuser.args(["-u", POSTGRES_USER, "--"]).arg(path);
            runuser
        } else {
            Command::new(path)
        };
        // The tools' working directory must be one they can enter as POSTGRES_USER.
        cmd.current_dir(self.data.parent().unwrap_or(Path::new("/")))
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `cmd` to its end; a failure names `what`, with the tool's output and the
    /// server log's last lines.
    async fn run(&self, cmd: Command, what: &str) -> anyhow::Result<()> {
        let output = tokio::process::Command::from(cmd)
            .output()
            .await
            .with_context(|| format!("cannot {what}: the tool did not start"))?;
        if output.status.success() {
            return Ok(());
        }
        anyhow::bail!("cannot {what}: {}{}", said(&output), self.log_tail())
    }

    /// The server log's last lines, for an error message; empty without a log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        match tail.is_empty() {
            true => String::new(),
            false => format!("\nlast lines of {}:\n{tail}", self.log.display()),
        }
    }
}

impl Drop for OwnPostgres {
    /// Stops the server quietly (it may not be running) and removes its directory.
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else {
            return;
        };
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        drop(dir);
    }
}

/// The directory of the server binaries: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/*/bin`; either must hold `initdb` and `pg_ctl`.
fn server_bindir() -> anyhow::Result<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let found = from_pg_config
        .filter(|dir| has_tools(dir))
        .or_else(|| newest_debian_bindir(has_tools));
    found.context(
        "PostgreSQL server binaries not found: install postgresql (apt-get install \
         postgresql) or use --database-url",
    )
}

/// The `/usr/lib/postgresql/<version>/bin` of the highest version that has the tools.
fn newest_debian_bindir(has_tools: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    let version = |name: &str| -> Option<Vec<u32>> {
        name.split('.').map(|part| part.parse().ok()).collect()
    };
    versions
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let v = version(entry.file_name().to_str()?)?;
            Some((v, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_tools(bin))
        .max()
        .map(|(_, bin)| bin)
}

/// Whether this process runs as root, which PostgreSQL refuses.
fn running_as_root() -> bool {
    // SAFETY: geteuid(2) reads the effective user id; it cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// A temporary directory for the cluster, owned by [`POSTGRES_USER`] when `as_postgres`.
fn scratch_dir(as_postgres: bool) -> anyhow::Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("idem-chaos-pg-")
        .tempdir()
        .context("cannot create a temporary directory for the run's PostgreSQL")?;
    if as_postgres {
        let (uid, gid) = (id_of("-u")?, id_of("-g")?);
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).with_context(|| {
            format!("cannot give {} to the postgres user", dir.path().display())
        })?;
    }
    Ok(dir)
}

/// `id <flag> postgres`: the system user's uid (`-u`) or gid (`-g`).
fn id_of(flag: &str) -> anyhow::Result<u32> {
    let no_user = || {
        format!(
            "this process runs as root, which PostgreSQL refuses, and there is no \
             `{POSTGRES_USER}` system user to run it as: install postgresql (apt-get \
             install postgresql creates it) or run as another user"
        )
    };
    let output = Command::new("id")
        .args([flag, POSTGRES_USER])
        .output()
        .with_context(no_user)?;
    anyhow::ensure!(output.status.success(), no_user());
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim().parse().with_context(no_user)
}

/// A port of 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range
/// when it can be: a port in that range may be taken as the local port of any outgoing
/// connection (another run's workers, its HTTP calls) while the server is down for initdb
/// or a restart, and the server then cannot bind it again.
fn free_port() -> anyhow::Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    if low > FIRST_PORT {
        for _ in 0..100 {
            let port = rand::random_range(FIRST_PORT..low);
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .context("cannot find a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// The server's options: loopback only, its socket in its own directory, real fsync, and
/// connections enough for a fleet of workers.
fn server_options(port: u16, socket_dir: &str) -> String {
    format!(
        "-p {port} -k {socket_dir} -c listen_addresses=127.0.0.1 -c fsync=on \
         -c synchronous_commit=on -c full_page_writes=on -c max_connections=200"
    )
}

/// What a failed tool said: its stderr, else its stdout, else its exit status.
fn said(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    match (stderr.trim(), stdout.trim()) {
        ("", "") => output.status.to_string(),
        ("", out) => out.to_owned(),
        (err, _) => err.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn connect(pg: &OwnPostgres) -> PgConnection {
        PgConnection::connect(pg.url()).await.unwrap()
    }

    async fn rows(conn: &mut PgConnection) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar("SELECT note FROM kept ORDER BY note")
            .fetch_all(conn)
            .await
    }

    #[tokio::test]
    async fn a_committed_row_survives_an_immediate_restart() {
        let started = Instant::now();
        let pg = OwnPostgres::start().await.unwrap();
        eprintln!("initdb and start: {:?}", started.elapsed());
        let mut conn = connect(&pg).await;
        sqlx::query("CREATE TABLE kept (note text)")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO kept VALUES ('committed')")
            .execute(&mut conn)
            .await
            .unwrap();
        let down = pg.restart_immediate().await.unwrap();
        eprintln!("restart immediate: {down:?}");
        assert!(rows(&mut conn).await.is_err(), "the old connection died");
        assert_eq!(rows(&mut connect(&pg).await).await.unwrap(), ["committed"]);
        let dir = pg.dir.as_ref().unwrap().path().to_owned();
        drop(pg);
        assert!(!dir.exists(), "{} is still there", dir.display());
    }

    #[tokio::test]
    async fn terminated_connections_fail_their_next_query() {
        let pg = OwnPostgres::start().await.unwrap();
        let (mut first, mut second) = (connect(&pg).await, connect(&pg).await);
        sqlx::query("SELECT 1").execute(&mut second).await.unwrap();
        assert_eq!(pg.terminate_backends(10).await.unwrap(), 2);
        assert!(sqlx::query("SELECT 1").execute(&mut first).await.is_err());
        assert!(sqlx::query("SELECT 1").execute(&mut second).await.is_err());
        assert_eq!(pg.terminate_backends(10).await.unwrap(), 0);
        let dir = pg.dir.as_ref().unwrap().path().to_owned();
        pg.stop().await.unwrap();
        assert!(!dir.exists(), "{} is still there", dir.display());
    }

    #[tokio::test]
    async fn terminate_backends_stops_at_n() {
        let pg = OwnPostgres::start().await.unwrap();
        let _conns = [connect(&pg).await, connect(&pg).await, connect(&pg).await];
        assert_eq!(pg.terminate_backends(2).await.unwrap(), 2);
        assert_eq!(pg.terminate_backends(5).await.unwrap(), 1);
    }
}
