//! The sink: the two remote services a chaos run's jobs call, in a process of their own
//! (`idem chaos-sink`, hidden), and the run's handle on that process ([`Sink`]).
//!
//! One remote honours `Idempotency-Key` (keyed), the other does not (unkeyed); each
//! journals every copy it applies to a file in the run's directory before answering, so
//! the checker counts what the remotes applied from the files, after the fact.
//!
//! Faults are a FIFO that the next applies consume, so they are spread out: the unkeyed
//! remote's unknown outcomes (`ApplyThenStatus(503)`) and hangs (`ApplyThenHang`) are
//! interleaved evenly, late calls among those, and all of them evenly among its delays;
//! the keyed remote gets the delays alone. With D delays and U unknown outcomes and hangs, the unkeyed remote's faults meet
//! its first U + D applies, one outcome fault about every (U + D) / U of them.
//!
//! What must stay true: the sink never outlives the process that started it (see
//! [`die_with_parent`]), and it announces its URLs only once both remotes serve and
//! journal.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use idem_mock_remote::{Fault, JournalEntry, MockRemote, Mode, read_journal};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::orphan::die_with_parent;
use crate::interrupt::Interrupt;

/// What starts the one line the sink prints on stdout; a JSON [`Urls`] follows.
const ANNOUNCE: &str = "IDEM_SINK ";
/// The keyed remote's journal, in the sink's directory.
const KEYED_JOURNAL: &str = "sink-keyed.jsonl";
/// The unkeyed remote's journal, in the sink's directory.
const UNKEYED_JOURNAL: &str = "sink-unkeyed.jsonl";
/// How long the parent waits for the sink to announce its URLs.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the parent waits for the sink to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `idem chaos-sink`.
#[derive(Args)]
pub(crate) struct ChaosSinkArgs {
    /// Directory for the journals (sink-keyed.jsonl, sink-unkeyed.jsonl)
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    faults: SinkFaults,
}

/// The faults the sink programs on its remotes.
#[derive(Args, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SinkFaults {
    /// Unkeyed calls applied and then answered 503 (unknown outcome)
    #[arg(long, default_value_t = 0)]
    pub(crate) unknown: usize,
    /// Unkeyed calls applied and then never answered
    #[arg(long, default_value_t = 0)]
    pub(crate) hang: usize,
    /// Calls delayed by --delay-ms, on each remote
    #[arg(long, default_value_t = 0)]
    pub(crate) delays: usize,
    /// How long a delayed call waits before it is applied, in milliseconds
    #[arg(long, default_value_t = 200)]
    pub(crate) delay_ms: u64,
    /// Unkeyed calls applied only after --late-ms: past the caller's timeout and the
    /// reconciler's settle delay, so the call is looked up, found absent, sent again, and
    /// then applied twice (a duplicate the audit must make visible)
    #[arg(long, default_value_t = 0)]
    pub(crate) late: usize,
    /// How long a late call waits before it is applied, in milliseconds
    #[arg(long, default_value_t = 5000)]
    pub(crate) late_ms: u64,
}

impl SinkFaults {
    /// These faults as `idem chaos-sink` flags.
    fn args(&self) -> Vec<String> {
        let flags = [
            ("--unknown", self.unknown.to_string()),
            ("--hang", self.hang.to_string()),
            ("--delays", self.delays.to_string()),
            ("--delay-ms", self.delay_ms.to_string()),
            ("--late", self.late.to_string()),
            ("--late-ms", self.late_ms.to_string()),
        ];
        let flag = |(name, n): (&str, String)| [name.to_owned(), n];
        flags.into_iter().flat_map(flag).collect()
    }

    /// The keyed remote's queue: the delays.
    fn keyed(&self) -> Vec<Fault> {
        self.delays()
    }

    /// The unkeyed remote's queue: unknown outcomes, hangs and late calls spread among
    /// the delays.
    fn unkeyed(&self) -> Vec<Fault> {
        let unknown = vec![Fault::ApplyThenStatus(503); self.unknown];
        let hangs = vec![Fault::ApplyThenHang; self.hang];
        let late = vec![Fault::Delay(Duration::from_millis(self.late_ms)); self.late];
        spread(spread(late, spread(hangs, unknown)), self.delays())
    }

    fn delays(&self) -> Vec<Fault> {
        let delay = Duration::from_millis(self.delay_ms);
        vec![Fault::Delay(delay); self.delays]
    }
}

/// `placed` spread evenly among `rest`, each order kept: the k-th of n placed faults
/// takes slot ⌈k·total/n⌉ (1-based), so the sequence ends with one and starts with `rest`.
fn spread(placed: Vec<Fault>, rest: Vec<Fault>) -> Vec<Fault> {
    let (n, total) = (placed.len(), placed.len() + rest.len());
    let (mut placed, mut rest) = (placed.into_iter(), rest.into_iter());
    let slot = |s: usize| {
        let next_mark = (s + 1) * n / total > s * n / total;
        if next_mark {
            placed.next()
        } else {
            rest.next()
        }
    };
    (0..total).filter_map(slot).collect()
}

/// The URLs the sink announces: each remote's `POST /effects` (and lookup) endpoint.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Urls {
    keyed: String,
    unkeyed: String,
}

/// `idem chaos-sink`: serves both remotes until SIGTERM or SIGINT, then shuts them down.
pub(crate) async fn run(args: ChaosSinkArgs) -> anyhow::Result<ExitCode> {
    let mut interrupt = Interrupt::listen().context("cannot listen for SIGTERM and SIGINT")?;
    let keyed = journaled(
        Mode::Keyed,
        &args.dir.join(KEYED_JOURNAL),
        args.faults.keyed(),
    )?;
    let unkeyed_journal = args.dir.join(UNKEYED_JOURNAL);
    let unkeyed = journaled(Mode::Unkeyed, &unkeyed_journal, args.faults.unkeyed())?;
    announce(&keyed, &unkeyed)?;
    let _signal = interrupt.run(std::future::pending::<()>()).await;
    tokio::join!(keyed.shutdown(), unkeyed.shutdown());
    Ok(ExitCode::SUCCESS)
}

/// Starts a remote journaling to `path`, with `faults` queued.
fn journaled(mode: Mode, path: &Path, faults: Vec<Fault>) -> anyhow::Result<MockRemote> {
    let remote = MockRemote::start_journaled(mode, path).with_context(|| {
        let path = path.display();
        format!("cannot journal to {path} (--dir must be a directory that exists)")
    })?;
    faults.into_iter().for_each(|f| remote.inject(f));
    Ok(remote)
}

/// Prints the announce line and flushes it.
fn announce(keyed: &MockRemote, unkeyed: &MockRemote) -> anyhow::Result<()> {
    let urls = Urls {
        keyed: format!("{}/effects", keyed.url()),
        unkeyed: format!("{}/effects", unkeyed.url()),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{ANNOUNCE}{}", serde_json::to_string(&urls)?)?;
    out.flush()
        .context("cannot announce the sink's URLs on stdout")
}

/// A running sink process, as the chaos run sees it.
pub(crate) struct Sink {
    /// The keyed remote's `/effects` URL.
    pub(crate) keyed_url: String,
    /// The unkeyed remote's `/effects` URL.
    pub(crate) unkeyed_url: String,
    child: Child,
    dir: PathBuf,
}

impl Sink {
    /// Starts `idem chaos-sink` journaling into `dir` with `faults`, and waits (up to
    /// 10 s) for its URLs. The process is killed when the `Sink` is dropped, and when this
    /// process dies.
    pub(crate) async fn spawn(dir: &Path, faults: SinkFaults) -> anyhow::Result<Sink> {
        let mut child = command(dir, faults)?
            .spawn()
            .context("cannot start the chaos sink process (idem chaos-sink)")?;
        let stdout = child
            .stdout
            .take()
            .context("the chaos sink has no stdout")?;
        let urls = tokio::time::timeout(ANNOUNCE_TIMEOUT, read_urls(stdout))
            .await
            .context("the chaos sink did not announce its URLs within 10 s")?
            .context("the chaos sink did not start (its stderr above says why)")?;
        Ok(Sink {
            keyed_url: urls.keyed,
            unkeyed_url: urls.unkeyed,
            child,
            dir: dir.to_owned(),
        })
    }

    /// Sends SIGTERM and waits (up to 10 s, then SIGKILL) for the sink to exit.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's process id; no memory is shared.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        let Ok(status) = tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await else {
            self.child.kill().await?;
            anyhow::bail!("the chaos sink did not stop within 10 s of SIGTERM: killed it");
        };
        let status = status.context("cannot wait for the chaos sink to exit")?;
        anyhow::ensure!(status.success(), "the chaos sink exited with {status}");
        Ok(())
    }

    /// Every copy each remote applied so far, oldest first: (keyed, unkeyed).
    pub(crate) fn journals(&self) -> anyhow::Result<(Vec<JournalEntry>, Vec<JournalEntry>)> {
        let read = |name: &str| {
            let path = self.dir.join(name);
            read_journal(&path)
                .with_context(|| format!("cannot read the sink's journal {}", path.display()))
        };
        Ok((read(KEYED_JOURNAL)?, read(UNKEYED_JOURNAL)?))
    }
}

/// `idem chaos-sink` (this same executable) with its stdout piped.
fn command(dir: &Path, faults: SinkFaults) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("cannot find the idem executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("chaos-sink")
        .arg("--dir")
        .arg(dir)
        .args(faults.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    Ok(cmd)
}

/// Reads the sink's stdout up to its announce line and parses the URLs.
async fn read_urls(stdout: impl AsyncRead + Unpin) -> anyhow::Result<Urls> {
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(json) = line.strip_prefix(ANNOUNCE) {
            return serde_json::from_str(json)
                .with_context(|| format!("cannot read the sink's announce line {line:?}"));
        }
    }
    anyhow::bail!("it closed its stdout without announcing its URLs")
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: Fault = Fault::ApplyThenStatus(503);
    const H: Fault = Fault::ApplyThenHang;
    const D: Fault = Fault::Delay(Duration::from_millis(200));

    fn faults(unknown: usize, hang: usize, delays: usize) -> SinkFaults {
        SinkFaults {
            unknown,
            hang,
            delays,
            delay_ms: 200,
            late: 0,
            late_ms: 5000,
        }
    }

    #[test]
    fn late_calls_are_spread_among_the_outcome_faults() {
        let late = Fault::Delay(Duration::from_millis(5000));
        let mut f = faults(2, 0, 0);
        f.late = 1;
        assert_eq!(f.unkeyed(), [U, U, late]);
        f.delays = 3;
        assert_eq!(f.unkeyed(), [D, U, D, U, D, late]);
        assert_eq!(f.keyed(), [D, D, D]);
    }

    #[test]
    fn outcome_faults_are_spread_among_the_delays() {
        assert_eq!(faults(2, 0, 4).unkeyed(), [D, D, U, D, D, U]);
        assert_eq!(faults(2, 1, 3).unkeyed(), [D, U, D, U, D, H]);
        assert_eq!(faults(1, 0, 0).unkeyed(), [U]);
        assert_eq!(faults(0, 0, 2).unkeyed(), [D, D]);
        assert_eq!(faults(3, 1, 2).keyed(), [D, D]);
    }

    #[test]
    fn every_fault_is_queued_once() {
        let queue = faults(7, 3, 11).unkeyed();
        let count = |f: Fault| queue.iter().filter(|q| **q == f).count();
        assert_eq!((count(U), count(H), count(D)), (7, 3, 11));
    }

    #[test]
    fn the_flags_parse_back_into_the_same_faults() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            faults: SinkFaults,
        }
        let sent = faults(3, 1, 5);
        let argv = std::iter::once("idem".to_owned()).chain(sent.args());
        let parsed = <Cli as clap::Parser>::parse_from(argv);
        assert_eq!(parsed.faults, sent);
    }

    #[tokio::test]
    async fn the_announce_line_is_found_after_other_output() {
        let out = b"starting\nIDEM_SINK {\"keyed\":\"http://k\",\"unkeyed\":\"http://u\"}\n";
        let urls = read_urls(&out[..]).await.unwrap();
        let expected = Urls {
            keyed: "http://k".into(),
            unkeyed: "http://u".into(),
        };
        assert_eq!(urls, expected);
    }

    #[tokio::test]
    async fn output_without_an_announce_line_is_an_error() {
        let err = read_urls(&b"panicked\n"[..]).await.unwrap_err();
        assert!(err.to_string().contains("without announcing"), "{err}");
    }
}
