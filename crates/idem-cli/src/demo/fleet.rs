//! The demo's worker processes: started as `idem demo-worker` children, signalled
//! (SIGKILL, SIGSTOP, SIGCONT) by the chaos, stopped with SIGTERM at the end, and their
//! reports read from their stdout.
//!
//! What must stay true: no worker process outlives the demo. A child stays in `live`
//! until it has been waited for, so a run cut short at any await leaves every child still
//! running in `live`, for [`Fleet::kill_all`]. And each child asks the kernel to SIGKILL it
//! when the demo dies without that chance (SIGKILL, a crash): see `die_with_parent`.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Context;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::DemoArgs;
use super::child::REPORT_MARKER;

/// The worker processes.
pub(super) struct Fleet {
    exe: PathBuf,
    url: String,
    concurrency: usize,
    lease_ms: u64,
    work_ms: u64,
    pub(super) live: Vec<(String, Child)>,
    spawned: usize,
}

impl Fleet {
    /// A fleet of no processes yet, whose workers will run this same executable.
    pub(super) fn new(args: &DemoArgs) -> anyhow::Result<Fleet> {
        Ok(Fleet {
            exe: std::env::current_exe().context("cannot find the idem executable")?,
            url: String::new(),
            concurrency: args.concurrency,
            lease_ms: args.lease_ms,
            work_ms: args.work_ms,
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

    /// Starts one worker process; answers its name and process id, as `name (pid N)`.
    fn spawn(&mut self) -> anyhow::Result<String> {
        self.spawned += 1;
        let name = format!("demo-w{}", self.spawned);
        let mut cmd = Command::new(&self.exe);
        cmd.arg("demo-worker")
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

    /// SIGKILL the worker at `index` and start a replacement.
    pub(super) async fn kill(&mut self, index: usize) -> anyhow::Result<Option<String>> {
        let Some((name, pid)) = self.signal(index, libc::SIGKILL) else {
            return Ok(None);
        };
        let _ = self.live[index].1.wait().await;
        self.live.remove(index);
        let replacement = self.spawn()?;
        Ok(Some(format!(
            "killed {name} (pid {pid}) with SIGKILL mid-run and started {replacement} in its place"
        )))
    }

    /// SIGTERM every live worker (SIGCONT first, for a paused one) and collect their
    /// reports.
    pub(super) async fn stop(&mut self) -> Vec<(String, idem::WorkerReport)> {
        for i in 0..self.live.len() {
            self.signal(i, libc::SIGCONT);
            self.signal(i, libc::SIGTERM);
        }
        let mut reports = Vec::new();
        for (name, child) in &mut self.live {
            match report(child).await {
                Ok(r) => reports.push((name.clone(), r)),
                Err(e) => eprintln!("worker {name} exited without a report ({e:#})"),
            }
        }
        self.live.clear();
        reports
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

/// Waits for a stopping worker to exit and reads the report it printed.
async fn report(child: &mut Child) -> anyhow::Result<idem::WorkerReport> {
    let status = child.wait().await?;
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        // The report is one short line, far below a pipe's buffer: the worker never
        // waits for this read before it exits.
        stdout.read_to_string(&mut out).await?;
    }
    let json = out
        .lines()
        .find_map(|l| l.strip_prefix(REPORT_MARKER))
        .with_context(|| format!("{status}"))?;
    Ok(serde_json::from_str(json.trim())?)
}

/// Makes the kernel SIGKILL the child when the demo dies, however it dies.
///
/// `PR_SET_PDEATHSIG` rather than a child that watches its stdin or polls its parent's
/// pid: the kernel delivers the signal even when the demo was SIGKILLed, and to a child
/// that is stopped (the chaos SIGSTOPs one), busy or stuck, since none of the child's code
/// has to run; a watcher needs the child's runtime to be scheduled, and stdin closes only
/// when every holder of the pipe's other end has closed it. The signal fires when the
/// *thread* that forked the child ends: the demo forks from the thread that runs its
/// `block_on` (the main thread, which lives as long as the process), never from a
/// `spawn_blocking` thread, which the runtime retires when idle.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2) and
    // getppid(2), which are async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The demo may have died between fork and prctl: no signal would come then.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere the children die with the demo only when it can stop them (SIGINT, SIGTERM,
/// an error).
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}
