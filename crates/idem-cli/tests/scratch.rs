//! `idem demo` and `idem bench` never write into a database they were not given on their
//! own command line: `IDEM_DATABASE_URL` does not reach them, and an SQLite file given on
//! the command line that already holds tables is refused, untouched.

mod common;

use std::process::{Command, ExitStatus};

use common::*;

/// A demo of 20 jobs on one worker, without chaos: a few seconds.
const SMALL_DEMO: [&str; 6] = ["demo", "--jobs", "20", "--no-chaos", "--workers", "1"];

fn small_demo(tmp: &std::path::Path) -> Command {
    let mut cmd = idem(tmp);
    cmd.args(SMALL_DEMO);
    cmd
}

/// Runs `idem args…` with `IDEM_DATABASE_URL` naming a file that does not exist and checks
/// that the command succeeded without creating it and left no scratch data behind.
fn ignores_idem_database_url(args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let prod = tmp.path().join("prod.db");
    let mut cmd = idem(tmp.path());
    cmd.args(args)
        .env("IDEM_DATABASE_URL", format!("sqlite://{}", prod.display()));
    let (status, out) = run(cmd);
    assert!(status.success(), "idem {args:?} failed: {out}");
    assert!(out.contains("temporary file"), "no scratch database: {out}");
    assert!(
        snapshot(&prod).is_empty(),
        "idem {args:?} wrote {}",
        prod.display()
    );
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "scratch left behind"
    );
}

#[test]
fn demo_ignores_idem_database_url() {
    ignores_idem_database_url(&SMALL_DEMO);
}

#[test]
fn bench_ignores_idem_database_url() {
    ignores_idem_database_url(&["bench", "--smoke", "--scenarios", "bulk"]);
}

/// Runs the small demo with `give` handing it the URL of an SQLite file that holds idem's
/// tables, checks that the file is unchanged afterwards, and returns the demo's exit
/// status, its output and the file's path.
fn demo_given_a_database_with_tables(
    give: impl FnOnce(&mut Command, String),
) -> (ExitStatus, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("tables.db");
    database_with_tables(tmp.path(), &db);
    let before = snapshot(&db);
    let mut cmd = small_demo(tmp.path());
    give(&mut cmd, format!("sqlite://{}", db.display()));
    let (status, out) = run(cmd);
    assert!(
        snapshot(&db) == before,
        "the demo wrote {}: {out}",
        db.display()
    );
    (status, out, db.display().to_string())
}

#[test]
fn demo_leaves_an_existing_database_in_idem_database_url_untouched() {
    let (status, out, _) = demo_given_a_database_with_tables(|cmd, url| {
        cmd.env("IDEM_DATABASE_URL", url);
    });
    assert!(status.success(), "the demo failed: {out}");
}

#[test]
fn demo_refuses_an_sqlite_file_with_tables() {
    let (status, out, db) = demo_given_a_database_with_tables(|cmd, url| {
        cmd.args(["--database-url", &url]);
    });
    assert!(
        !status.success(),
        "the demo ran in a database with tables: {out}"
    );
    assert!(out.contains(&db), "the message names no file: {out}");
}

#[test]
fn demo_runs_in_a_new_sqlite_file_given_on_its_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("new.db");
    let mut cmd = small_demo(tmp.path());
    cmd.arg("--database-url")
        .arg(format!("sqlite://{}", db.display()));
    let (status, out) = run(cmd);
    assert!(status.success(), "the demo failed: {out}");
    assert!(out.contains("verdict: OK"), "{out}");
    assert!(db.exists(), "the demo did not use {}", db.display());
}
