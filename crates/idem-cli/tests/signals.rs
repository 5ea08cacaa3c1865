//! Signals to a running `idem demo`: after SIGTERM or SIGINT none of its worker processes
//! is left, its temporary directory is gone and it exits 143 or 130; after SIGKILL (which
//! it cannot handle) its worker processes die too.
//!
//! The demo runs 20,000 jobs of 100 ms on 16 slots: at least two minutes of sleeping, so it
//! is mid-run when the test, having read the line naming its workers, signals it.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;

/// A demo that is running, with its worker processes and its temporary directory.
struct Demo {
    running: Running,
    workers: Vec<u32>,
    scratch: PathBuf,
    tmp: tempfile::TempDir,
}

impl Demo {
    /// Starts a long demo and reads its output until it names its workers.
    fn start() -> Demo {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = idem(tmp.path());
        cmd.args(["demo", "--jobs", "20000", "--work-ms", "100"])
            .args(["--no-chaos", "--workers", "2"]);
        let mut running = Running::start(cmd);
        let file = running.wait_for("database line", |l| {
            l.strip_prefix("database: SQLite, temporary file ")
                .map(PathBuf::from)
        });
        let workers = running.wait_for("workers line", |l| l.strip_prefix("workers: ").map(pids));
        assert_eq!(workers.len(), 2, "{:#?}", running.seen);
        let scratch = file.parent().unwrap().to_owned();
        Demo {
            running,
            workers,
            scratch,
            tmp,
        }
    }

    /// Fails the test if a worker process is still alive.
    fn assert_no_worker_alive(&self) {
        let alive: Vec<u32> = self.workers.iter().copied().filter(|p| alive(*p)).collect();
        assert!(
            alive.is_empty(),
            "worker processes {alive:?} outlived the demo: {}",
            self.running.output()
        );
    }

    /// Fails the test if the demo left scratch data behind.
    fn assert_scratch_removed(&self) {
        assert!(
            !self.scratch.exists(),
            "{} is still there: {}",
            self.scratch.display(),
            self.running.output()
        );
        assert_eq!(entries(self.tmp.path()), Vec::<String>::new());
    }
}

impl Drop for Demo {
    /// Whatever the test found, no process of it outlives it.
    fn drop(&mut self) {
        for pid in self.workers.iter().copied().filter(|p| alive(*p)) {
            signal(pid, libc::SIGKILL);
        }
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

/// Every `(pid N)` in a line.
fn pids(line: &str) -> Vec<u32> {
    line.split("(pid ")
        .skip(1)
        .filter_map(|rest| rest.split(')').next()?.parse().ok())
        .collect()
}

/// Whether `pid` is a live (not zombie) `idem chaos-worker` process (the demo's workers).
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.trim().chars().next());
    let is_worker = String::from_utf8_lossy(&cmdline).contains("chaos-worker");
    is_worker && !matches!(state, None | Some('Z') | Some('X'))
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process id; no memory is shared.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Sends `sig` to a running demo with one of its workers paused (as its chaos pauses
/// one) and checks that it cleans up and exits with `code`.
fn interrupted_demo_cleans_up(sig: libc::c_int, code: i32) {
    let mut demo = Demo::start();
    signal(demo.workers[0], libc::SIGSTOP);
    signal(demo.running.pid(), sig);
    let status = demo.running.exit();
    demo.assert_no_worker_alive();
    demo.assert_scratch_removed();
    assert_eq!(status.code(), Some(code), "{}", demo.running.output());
}

#[test]
fn sigterm_stops_the_workers_and_removes_the_scratch_data() {
    interrupted_demo_cleans_up(libc::SIGTERM, 143);
}

#[test]
fn sigint_stops_the_workers_and_removes_the_scratch_data() {
    interrupted_demo_cleans_up(libc::SIGINT, 130);
}

#[test]
fn the_workers_die_with_a_demo_killed_by_sigkill() {
    let mut demo = Demo::start();
    signal(demo.workers[1], libc::SIGSTOP);
    signal(demo.running.pid(), libc::SIGKILL);
    demo.running.exit();
    // Nothing tells this process when an orphan dies; its pid is watched, with a
    // deadline that only a worker that never dies reaches.
    let deadline = Instant::now() + Duration::from_secs(60);
    while demo.workers.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    demo.assert_no_worker_alive();
}
