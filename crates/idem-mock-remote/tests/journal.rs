//! The journal through real HTTP: one line per applied copy (keyed replays, lookups and
//! refused requests write none), written before the answer, and read back tolerating a
//! torn last line but no other damage.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use idem_mock_remote::{Fault, JournalEntry, MockRemote, Mode, read_journal};
use reqwest::{Client, Response, StatusCode};
use serde_json::json;
use tempfile::TempDir;

/// A client without proxies, with the TLS provider the workspace builds.
fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder().no_proxy().build().unwrap()
}

/// A journaled remote in `mode`, its journal's path, and the directory that holds it.
fn journaled(mode: Mode) -> (MockRemote, PathBuf, TempDir) {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("journal.jsonl");
    (MockRemote::start_journaled(mode, &path).unwrap(), path, dir)
}

/// `POST /effects` with a key and the body `{"n": n}`.
async fn post(remote: &MockRemote, key: &str, n: u32) -> Response {
    let request = client()
        .post(format!("{}/effects", remote.url()))
        .header("Idempotency-Key", key);
    request.json(&json!({ "n": n })).send().await.unwrap()
}

/// The journal's (key, copy) pairs.
fn copies(path: &Path) -> Vec<(Option<String>, String)> {
    let entries = read_journal(path).unwrap();
    entries.into_iter().map(|e| (e.key, e.copy)).collect()
}

fn copy(key: &str, id: &str) -> (Option<String>, String) {
    (Some(key.to_owned()), id.to_owned())
}

#[tokio::test]
async fn keyed_journals_the_first_request_only() {
    let (remote, path, _dir) = journaled(Mode::Keyed);
    post(&remote, "k1", 1).await;
    post(&remote, "k1", 2).await;
    let entry = JournalEntry {
        key: Some("k1".into()),
        copy: "r-1".into(),
        body: json!({ "n": 1 }),
    };
    assert_eq!(read_journal(&path).unwrap(), vec![entry]);
}

#[tokio::test]
async fn unkeyed_journals_every_copy() {
    let (remote, path, _dir) = journaled(Mode::Unkeyed);
    post(&remote, "k1", 1).await;
    post(&remote, "k1", 2).await;
    assert_eq!(copies(&path), vec![copy("k1", "r-1"), copy("k1", "r-2")]);
}

#[tokio::test]
async fn lookups_and_refused_requests_write_nothing() {
    let (remote, path, _dir) = journaled(Mode::Unkeyed);
    post(&remote, "k1", 1).await;
    remote.inject(Fault::Status(503));
    assert_eq!(post(&remote, "k2", 1).await.status(), 503);
    let lookup = format!("{}/effects?reference=k1", remote.url());
    assert_eq!(client().get(lookup).send().await.unwrap().status(), 200);
    assert_eq!(copies(&path), vec![copy("k1", "r-1")]);
}

#[tokio::test]
async fn a_copy_applied_then_failed_or_hung_is_journaled_before_any_answer() {
    let (remote, path, _dir) = journaled(Mode::Unkeyed);
    remote.inject(Fault::ApplyThenStatus(503));
    remote.inject(Fault::ApplyThenHang);
    assert_eq!(post(&remote, "failed", 1).await.status(), 503);
    let url = format!("{}/effects", remote.url());
    let hung = tokio::spawn(client().post(url).header("Idempotency-Key", "hung").send());
    remote.wait_for_applied(2).await;
    assert_eq!(
        copies(&path),
        vec![copy("failed", "r-1"), copy("hung", "r-2")]
    );
    remote.shutdown().await;
    let _ = hung.await;
}

#[tokio::test]
async fn a_request_without_a_key_or_body_is_journaled_with_nulls() {
    let (remote, path, _dir) = journaled(Mode::Keyed);
    let url = format!("{}/effects", remote.url());
    client().post(url).send().await.unwrap();
    let entry = JournalEntry {
        key: None,
        copy: "r-1".into(),
        body: serde_json::Value::Null,
    };
    assert_eq!(read_journal(&path).unwrap(), vec![entry]);
}

#[tokio::test]
async fn a_torn_last_line_is_ignored() {
    let (remote, path, _dir) = journaled(Mode::Unkeyed);
    post(&remote, "k1", 1).await;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(br#"{"key":"k2","co"#).unwrap();
    assert_eq!(copies(&path), vec![copy("k1", "r-1")]);
}

#[test]
fn a_damaged_complete_line_is_an_error() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("journal.jsonl");
    let good = r#"{"key":null,"copy":"r-1","body":null}"#;
    std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
    let err = read_journal(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_journal_that_cannot_be_written_applies_nothing() {
    // Every write to /dev/full fails (ENOSPC).
    let remote = MockRemote::start_journaled(Mode::Keyed, Path::new("/dev/full")).unwrap();
    let response = post(&remote, "k1", 1).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(remote.applied_total(), 0);
}
