//! The demo's worker processes: started as `idem demo-worker` children, signalled
//! (SIGKILL, SIGSTOP, SIGCONT) by the chaos, stopped with SIGTERM at the end, and their
//! reports read from their stdout.

use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::DemoArgs;
use super::child::REPORT_MARKER;

/// The worker processes.
pub(super) struct Fleet {
    exe: std::path::PathBuf,
    url: String,
    concurrency: usize,
    lease_ms: u64,
    work_ms: u64,
    pub(super) live: Vec<(String, Child)>,
    spawned: usize,
}

impl Fleet {
    pub(super) fn new(args: &DemoArgs, url: &str) -> anyhow::Result<Fleet> {
        Ok(Fleet {
            exe: std::env::current_exe().context("cannot find the idem executable")?,
            url: url.to_owned(),
            concurrency: args.concurrency,
            lease_ms: args.lease_ms,
            work_ms: args.work_ms,
            live: Vec::new(),
            spawned: 0,
        })
    }

    /// Starts `n` worker processes and prints their names and process ids.
    pub(super) fn start(&mut self, n: usize) -> anyhow::Result<()> {
        let mut started = Vec::new();
        for _ in 0..n {
            started.push(self.spawn()?);
        }
        println!("workers: {}", started.join(", "));
        Ok(())
    }

    /// Starts one worker process; answers its name and process id, as `name (pid N)`.
    fn spawn(&mut self) -> anyhow::Result<String> {
        self.spawned += 1;
        let name = format!("demo-w{}", self.spawned);
        let child = Command::new(&self.exe)
            .arg("demo-worker")
            .args(["--name", &name])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--lease-ms", &self.lease_ms.to_string()])
            .args(["--work-ms", &self.work_ms.to_string()])
            .env("IDEM_DATABASE_URL", &self.url)
            .env(
                "IDEM_LOG",
                std::env::var("IDEM_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a worker process")?;
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

    /// SIGKILL the worker at `index` and start a replacement.
    pub(super) async fn kill(&mut self, index: usize) -> anyhow::Result<Option<String>> {
        let Some((name, pid)) = self.signal(index, libc::SIGKILL) else {
            return Ok(None);
        };
        let (_, mut child) = self.live.remove(index);
        let _ = child.wait().await;
        let replacement = self.spawn()?;
        Ok(Some(format!(
            "killed {name} (pid {pid}) with SIGKILL mid-run and started {replacement} in its place"
        )))
    }

    /// SIGTERM every live worker and collect their reports.
    pub(super) async fn stop(mut self) -> Vec<(String, idem::WorkerReport)> {
        let mut reports = Vec::new();
        for i in 0..self.live.len() {
            self.signal(i, libc::SIGCONT);
            self.signal(i, libc::SIGTERM);
        }
        for (name, child) in self.live.drain(..) {
            let Ok(out) = child.wait_with_output().await else {
                continue;
            };
            let text = String::from_utf8_lossy(&out.stdout);
            let report = text
                .lines()
                .find_map(|l| l.strip_prefix(REPORT_MARKER))
                .and_then(|j| serde_json::from_str(j.trim()).ok());
            match report {
                Some(r) => reports.push((name, r)),
                None => eprintln!("worker {name} exited without a report ({})", out.status),
            }
        }
        reports
    }
}
