//! `-q` leaves only errors and the data asked for; `-v` adds what idem does to stderr;
//! the two conflict; a flag wins over `IDEM_LOG`. Nothing is drawn on a stderr that is
//! not a terminal.

mod common;

use std::path::Path;

use common::*;

/// The info line every command that opens the database logs.
const OPENED: &str = "opened the idem database";

fn idem_env(tmp: &Path, url: &str, env: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = idem(tmp);
    cmd.env_remove("IDEM_LOG");
    if let Some(filter) = env {
        cmd.env("IDEM_LOG", filter);
    }
    cmd.arg("--database-url").arg(url).args(args);
    output(cmd, args.iter().map(|a| a.to_string()).collect())
}

#[test]
fn quiet_and_verbose_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [&["-q", "-v", "queues"][..], &["queues", "--quiet", "-vv"]] {
        let mut cmd = idem(tmp.path());
        cmd.args(args);
        output(cmd, vec![])
            .expect(USAGE)
            .warns(&["--quiet", "--verbose"]);
    }
}

#[test]
fn quiet_leaves_out_notes_and_summaries_but_not_data() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = sqlite_url(&data.path().join("idem.db"));
    let out = idem_on(tmp.path(), &url, &["-q", "migrate"]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    let id = enqueue(tmp.path(), &url, "k").to_string();
    idem_on(tmp.path(), &url, &["dead", "show", &id]).warns(&["note: job"]);
    let out = idem_on(tmp.path(), &url, &["dead", "show", &id, "-q"]);
    assert!(out.expect(0).stderr.is_empty(), "a note under -q; {out}");
    assert!(
        out.stdout.contains("attempts (0)"),
        "the show itself went; {out}"
    );
    idem_on(tmp.path(), &url, &["jobs", "cancel", &id]).says(&["is cancelled"]);
    let out = idem_on(tmp.path(), &url, &["-q", "dead", "retry", &id]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    let out = idem_on(tmp.path(), &url, &["-q", "jobs", "list", "--json"]);
    assert_eq!(out.expect(0).json()[0]["state"], "available", "{out}");
    // An error is still said.
    idem_on(tmp.path(), &url, &["-q", "jobs", "show", "999"])
        .expect(NOT_FOUND)
        .warns(&["999"]);
}

#[test]
fn verbose_logs_what_idem_does_and_a_flag_wins_over_idem_log() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    let list = ["jobs", "list"];
    let logs = |env: Option<&str>, flags: &[&str]| {
        let args = [flags, &list[..]].concat();
        let out = idem_env(tmp.path(), &url, env, &args);
        out.expect(0).stderr.contains(OPENED)
    };
    assert!(!logs(None, &[]), "info logged by default");
    assert!(logs(None, &["-v"]));
    assert!(logs(None, &["--verbose", "--verbose"]));
    assert!(logs(Some("info"), &[]), "IDEM_LOG unheeded");
    assert!(!logs(Some("info"), &["-q"]), "-q lost to IDEM_LOG");
    assert!(logs(Some("error"), &["-v"]), "-v lost to IDEM_LOG");
}

/// A purge that deletes something says so on stdout and leaves stderr, a pipe, empty:
/// no bar, no log (`tests/terminal.rs` sees the bars on a terminal).
#[test]
fn a_purge_off_a_terminal_says_what_it_deleted_and_nothing_on_stderr() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = data.path().join("idem.db");
    let url = migrated_sqlite(tmp.path(), &db);
    let id = enqueue(tmp.path(), &url, "k");
    sqlite_exec(
        &db,
        &format!(
            "UPDATE idem_job SET state = 'completed', created_at = 0, run_at = 0, \
             finalized_at = 0 WHERE id = {id}"
        ),
    );
    let out = idem_on(tmp.path(), &url, &["purge"]);
    out.expect(0).says(&["finished-jobs", "deleted 1"]);
    assert!(out.stderr.is_empty(), "{out}");
}
