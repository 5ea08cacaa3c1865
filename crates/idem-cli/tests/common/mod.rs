//! Running the real `idem` binary from a test: every process gets a scratch directory of
//! its own as `TMPDIR`, its output is read line by line as it comes, and every wait has a
//! generous deadline that only guards against a hang.

#![allow(dead_code)] // each test file uses a part

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
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
