//! On a terminal (a pseudo-terminal made by `script(1)`): a bulk action asks before it
//! acts and then acts only on the ids it showed, even on a job that died while the
//! question waited for its answer; a "no" acts on nothing; progress is drawn, and not
//! with `-q`.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use common::*;

/// `idem --database-url URL args…` on a pseudo-terminal; its output arrives in chunks.
struct OnTerminal {
    child: Child,
    chunks: Receiver<Vec<u8>>,
    seen: String,
}

impl OnTerminal {
    fn start(tmp: &Path, url: &str, args: &[&str]) -> OnTerminal {
        let idem = env!("CARGO_BIN_EXE_idem");
        let line = format!("{idem} --database-url '{url}' {}", args.join(" "));
        let mut child = Command::new("script")
            .args(["-qfec", &line, "/dev/null"])
            .env("TMPDIR", tmp)
            .env_remove("IDEM_DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start script(1) (util-linux)");
        let mut out = child.stdout.take().unwrap();
        let (tx, chunks) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = out.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        OnTerminal {
            child,
            chunks,
            seen: String::new(),
        }
    }

    /// Reads until the output holds `text`.
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + RUN_LIMIT;
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.seen += &String::from_utf8_lossy(&chunk),
                Err(_) => panic!("no {text:?} in {:?}", self.seen),
            }
        }
    }

    fn answer(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// The exit code and everything printed.
    fn finish(mut self) -> (Option<i32>, String) {
        let status = wait_within(&mut self.child, RUN_LIMIT);
        while let Ok(chunk) = self.chunks.recv_timeout(Duration::from_secs(5)) {
            self.seen += &String::from_utf8_lossy(&chunk);
        }
        (status.code(), self.seen)
    }
}

#[test]
fn a_confirmed_bulk_retry_leaves_alone_a_job_that_died_while_it_asked() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tmp = tmp.path();
    for db in TestDb::each(tmp, data.path()) {
        let (a, b, late) = (
            db.enqueue(tmp, "k", "q"),
            db.enqueue(tmp, "k", "q"),
            db.enqueue(tmp, "k", "q"),
        );
        db.kill(&[a, b]);
        let mut run = OnTerminal::start(tmp, db.url(), &["dead", "retry", "--all"]);
        run.wait_for("[y/N]");
        db.kill(&[late]);
        run.answer("y");
        let (code, seen) = run.finish();
        assert_eq!(code, Some(0), "{seen}");
        assert!(
            seen.contains(&format!("2 job(s) selected: {b}, {a}")),
            "{seen}"
        );
        assert!(seen.contains("retried 2 of 2 job(s)"), "{seen}");
        for id in [a, b] {
            assert_eq!(db.state(tmp, id).as_deref(), Some("available"), "job {id}");
        }
        assert_eq!(
            db.state(tmp, late).as_deref(),
            Some("dead"),
            "a job not previewed"
        );
    }
}

#[test]
fn a_bulk_discard_answered_no_acts_on_nothing() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tmp = tmp.path();
    for db in TestDb::each(tmp, data.path()) {
        let id = db.enqueue(tmp, "k", "q");
        db.kill(&[id]);
        let mut run = OnTerminal::start(tmp, db.url(), &["dead", "discard", "--all"]);
        run.wait_for("[y/N]");
        run.answer("n");
        let (code, seen) = run.finish();
        assert_eq!(code, Some(CHECK_FAILED), "{seen}");
        assert!(seen.contains("not confirmed: nothing to discard"), "{seen}");
        assert_eq!(db.state(tmp, id).as_deref(), Some("dead"));
    }
}

/// A spinner is drawn on a terminal, and not with `-q`.
#[test]
fn progress_is_drawn_on_a_terminal_unless_quiet() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    for quiet in [false, true] {
        let id = enqueue(tmp.path(), &url, "k").to_string();
        idem_on(tmp.path(), &url, &["jobs", "cancel", &id]).expect(0);
        let mut args = vec!["dead", "retry", id.as_str()];
        if quiet {
            args.push("-q");
        }
        let (code, seen) = OnTerminal::start(tmp.path(), &url, &args).finish();
        assert_eq!(code, Some(0), "{seen}");
        assert_eq!(
            seen.contains("retrying 1 job(s)"),
            !quiet,
            "quiet {quiet}: {seen:?}"
        );
    }
}
