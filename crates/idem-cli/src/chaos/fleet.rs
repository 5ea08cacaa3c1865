//! The run's worker processes: started as `idem chaos-worker` children, signalled
//! (SIGKILL, SIGSTOP, SIGCONT, and the kill points' arming signals) by the fault driver,
//! stopped with SIGTERM at the end, and their reports read from the files they keep.
//!
//! What must stay true: no worker process outlives the run. A child stays in `live`
//! until it has been waited for, so a run cut short at any await leaves every child still
//! running in `live`, for [`Fleet::kill_all`]. And each child asks the kernel to SIGKILL it
//! when the run dies without that chance (SIGKILL, a crash): see [`die_with_parent`].

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::Plan;
use super::orphan::die_with_parent;

/// The worker processes.
pub(super) struct Fleet {
    exe: PathBuf,
    /// Where each worker's stderr goes, as `{name}.log`.
    dir: PathBuf,
    url: String,
    concurrency: usize,
    lease_ms: u64,
    work_ms: u64,
    pub(super) live: Vec<(String, Child)>,
    spawned: usize,
}

impl Fleet {
    /// A fleet of no processes yet, whose workers will run this same executable.
    pub(super) fn new(plan: &Plan, dir: &std::path::Path) -> anyhow::Result<Fleet> {
        Ok(Fleet {
            exe: std::env::current_exe().context("cannot find the idem executable")?,
            dir: dir.to_owned(),
            url: String::new(),
            concurrency: plan.fleet.concurrency,
            lease_ms: plan.fleet.lease_ms,
            work_ms: plan.fleet.work_ms,
            live: Vec::new(),
            spawned: 0,
        })
    }

    /// Starts `n` worker processes on the database at `url` and prints their names and
    /// process ids.
    pub(super) fn start(&mut self, url: &str, n: usize) -> anyhow::Result<()> {
        self.url = url.to_owned();
        let mut started = Vec::new();
        for _ in 0..n {
            started.push(self.spawn()?);
        }
        println!("workers: {}", started.join(", "));
        Ok(())
    }

    /// Lines containing `needle` in the logs of every worker process started so far.
    pub(super) fn logs_containing(&self, needle: &str) -> usize {
        (1..=self.spawned)
            .map(|i| self.dir.join(format!("w{i}.log")))
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .map(|log| log.lines().filter(|l| l.contains(needle)).count())
            .sum()
    }

    /// Starts one worker process; answers its name and process id, as `name (pid N)`.
    fn spawn(&mut self) -> anyhow::Result<String> {
        self.spawned += 1;
        let name = format!("w{}", self.spawned);
        let path = self.dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&path)
            .with_context(|| format!("cannot create the worker's log {}", path.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("chaos-worker")
            .args(["--name", &name])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--lease-ms", &self.lease_ms.to_string()])
            .args(["--work-ms", &self.work_ms.to_string()])
            .arg("--report-file")
            .arg(report_file(&self.dir, &name))
            .env("IDEM_DATABASE_URL", &self.url)
            .env(
                "IDEM_LOG",
                std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().context("cannot start a worker process")?;
        let started = format!("{name} (pid {})", child.id().unwrap_or_default());
        self.live.push((name, child));
        Ok(started)
    }

    pub(super) fn signal(&self, index: usize, sig: libc::c_int) -> Option<(String, u32)> {
        let (name, child) = self.live.get(index)?;
        let pid = child.id()?;
        // SAFETY: kill(2) on a child process id we own; no memory is shared.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        (rc == 0).then(|| (name.clone(), pid))
    }

    /// Waits until process `pid` has stopped (SIGSTOP is delivered after kill(2)
    /// returns: a probe run before that sees a process that may still take a lock);
    /// answers whether it did within a second.
    pub(super) async fn stopped(pid: u32) -> bool {
        let stat = format!("/proc/{pid}/stat");
        for _ in 0..1_000 {
            // The state follows the command name, which is in parentheses.
            let state = std::fs::read_to_string(&stat).ok().and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            });
            if state.is_some_and(|s| s.starts_with('T') || s.starts_with('t')) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        false
    }

    /// SIGKILL the worker at `index`, wait for it to die and start a replacement; answers
    /// its name and process id.
    pub(super) async fn kill(&mut self, index: usize) -> anyhow::Result<Option<(String, u32)>> {
        let Some(killed) = self.signal(index, libc::SIGKILL) else {
            return Ok(None);
        };
        self.replace(index).await?;
        Ok(Some(killed))
    }

    /// Waits up to `limit` for the worker at `index` to exit (it kills itself at an armed
    /// kill point); answers whether it did, and if so starts a replacement.
    pub(super) async fn died_within(
        &mut self,
        index: usize,
        limit: std::time::Duration,
    ) -> anyhow::Result<bool> {
        let Some((_, child)) = self.live.get_mut(index) else {
            return Ok(false);
        };
        if tokio::time::timeout(limit, child.wait()).await.is_err() {
            return Ok(false);
        }
        self.replace(index).await?;
        Ok(true)
    }

    /// Reaps the dead worker at `index` and starts another in its place.
    async fn replace(&mut self, index: usize) -> anyhow::Result<()> {
        let _ = self.live[index].1.wait().await;
        self.live.remove(index);
        self.spawn()?;
        Ok(())
    }

    /// SIGTERM every live worker (SIGCONT first, for a paused one), wait for them, and
    /// read the report of every worker the run started: the last one each wrote, at its
    /// graceful exit or, for a killed one, its last snapshot before the kill.
    pub(super) async fn stop(&mut self) -> Vec<(String, idem::WorkerReport)> {
        for i in 0..self.live.len() {
            self.signal(i, libc::SIGCONT);
            self.signal(i, libc::SIGTERM);
        }
        for (name, child) in &mut self.live {
            match child.wait().await {
                Ok(status) if status.success() => {}
                other => eprintln!("worker {name} did not exit cleanly ({other:?})"),
            }
        }
        self.live.clear();
        (1..=self.spawned)
            .filter_map(|n| {
                let name = format!("w{n}");
                let json = std::fs::read(report_file(&self.dir, &name)).ok()?;
                Some((name, serde_json::from_slice(&json).ok()?))
            })
            .collect()
    }

    /// SIGKILL every live worker and wait for it to exit; answers them, as `name (pid N)`.
    /// For a run cut short: the jobs are durable, and the scratch data goes next. A paused
    /// worker needs no SIGCONT first: SIGKILL ends a stopped process too.
    pub(super) async fn kill_all(&mut self) -> Vec<String> {
        let mut killed = Vec::new();
        for (name, child) in &mut self.live {
            let pid = child.id().unwrap_or_default();
            if child.kill().await.is_ok() {
                killed.push(format!("{name} (pid {pid})"));
            }
        }
        self.live.clear();
        killed
    }
}

/// Where worker `name` keeps its report.
fn report_file(dir: &std::path::Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.report.json"))
}
