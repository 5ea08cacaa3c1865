//! `idem chaos-sink` as the chaos run starts it: it announces its two remotes on one
//! stdout line, serves them with the faults it was given, journals every applied copy,
//! and exits 0 on SIGTERM; a directory it cannot journal to is a clear error.

mod common;

use std::path::Path;

use common::serve::Api;
use common::*;
use idem_mock_remote::read_journal;
use serde_json::{Value, json};

/// The base URL of a remote from its announced `/effects` URL.
fn base(urls: &Value, which: &str) -> Api {
    let effects = urls[which].as_str().unwrap();
    Api::new(effects.strip_suffix("/effects").unwrap())
}

/// `POST /effects` with `key`; the status.
fn post(api: &Api, key: &str) -> u16 {
    let body = Some(json!({ "key": key }));
    api.send(reqwest::Method::POST, "/effects", "", body, Some(key))
        .status
}

/// The keys of the journal's copies, in order.
fn journaled(path: &Path) -> Vec<String> {
    let entries = read_journal(path).unwrap();
    entries.into_iter().map(|e| e.key.unwrap()).collect()
}

#[test]
fn the_sink_serves_its_faults_journals_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = idem(tmp.path());
    cmd.args([
        "chaos-sink",
        "--unknown",
        "1",
        "--delays",
        "2",
        "--delay-ms",
        "10",
    ])
    .arg("--dir")
    .arg(tmp.path());
    let mut sink = Running::start(cmd);
    let urls: Value = sink.wait_for("announce line", |l| {
        serde_json::from_str(l.strip_prefix("IDEM_SINK ")?).ok()
    });
    let (keyed, unkeyed) = (base(&urls, "keyed"), base(&urls, "unkeyed"));
    // The unkeyed queue is delay, delay, unknown outcome.
    let statuses: Vec<u16> = ["u1", "u2", "u3", "u4"].map(|k| post(&unkeyed, k)).into();
    assert_eq!(statuses, [201, 201, 503, 201]);
    assert_eq!([post(&keyed, "k1"), post(&keyed, "k1")], [201, 201]);
    // SAFETY: kill(2) on the test's own child; no memory is shared.
    unsafe { libc::kill(sink.pid() as libc::pid_t, libc::SIGTERM) };
    assert!(sink.exit().success(), "{}", sink.output());
    assert_eq!(journaled(&tmp.path().join("sink-keyed.jsonl")), ["k1"]);
    let unkeyed_copies = journaled(&tmp.path().join("sink-unkeyed.jsonl"));
    assert_eq!(unkeyed_copies, ["u1", "u2", "u3", "u4"]);
}

#[test]
fn a_directory_the_sink_cannot_journal_to_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = idem(tmp.path());
    cmd.args(["chaos-sink", "--dir"])
        .arg(tmp.path().join("missing"));
    let (status, output) = run(cmd);
    assert!(!status.success(), "{output}");
    assert!(output.contains("sink-keyed.jsonl"), "{output}");
    assert!(!output.contains("IDEM_SINK"), "{output}");
}
