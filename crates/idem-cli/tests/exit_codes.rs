//! The exit code tells the class of an outcome apart: a failed check or refused action,
//! a wrong command line, something not found, an unavailable database, a bad
//! configuration, a schema that is not this build's. `tests/reads.rs` and
//! `tests/migrate.rs` cover the missing database and the schema.

mod common;

use std::path::Path;

use common::*;

/// A migrated SQLite database in `data`, with one job enqueued; its URL and the job's id.
fn database_with_a_job(tmp: &Path, data: &Path) -> (String, i64) {
    let url = migrated_sqlite(tmp, &data.join("idem.db"));
    let id = enqueue(tmp, &url, "k");
    (url, id)
}

#[test]
fn unknown_job_ids_are_not_found_and_named() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, id) = database_with_a_job(tmp.path(), data.path());
    for args in [
        &["jobs", "show", "999"][..],
        &["dead", "show", "999"],
        &["jobs", "cancel", "999"],
    ] {
        idem_on(tmp.path(), &url, args)
            .expect(NOT_FOUND)
            .warns(&["999"]);
    }
    let available = format!("job {id} is available");
    for action in ["retry", "discard"] {
        idem_on(tmp.path(), &url, &["dead", action, "998", "999"])
            .expect(NOT_FOUND)
            .warns(&["998", "999"]);
        idem_on(tmp.path(), &url, &["dead", action, &id.to_string(), "999"])
            .expect(NOT_FOUND)
            .warns(&[&available, "999"]);
    }
}

#[test]
fn a_refused_action_or_a_failed_check_exits_1() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, id) = database_with_a_job(tmp.path(), data.path());
    let (id, available) = (id.to_string(), format!("job {id} is available"));
    for action in ["retry", "discard"] {
        idem_on(tmp.path(), &url, &["dead", action, &id])
            .expect(CHECK_FAILED)
            .warns(&[&available]);
    }
    idem_on(tmp.path(), &url, &["jobs", "cancel", &id]).expect(0);
    idem_on(tmp.path(), &url, &["jobs", "cancel", &id])
        .expect(CHECK_FAILED)
        .warns(&["already cancelled"]);
    sqlite_exec(
        &data.path().join("idem.db"),
        "INSERT INTO idem_ledger_balance (account, balance, updated_at) VALUES ('alice', 5, 0)",
    );
    idem_on(tmp.path(), &url, &["ledger", "verify"])
        .expect(CHECK_FAILED)
        .says(&["alice"]);
    let config = data.path().join("short.toml");
    std::fs::write(&config, "[retention]\nenqueue_keys = \"2h\"\n").unwrap();
    let config = config.display().to_string();
    idem_on(tmp.path(), &url, &["config", "check", "--config", &config]).expect(CHECK_FAILED);
    // The same windows make a purge refuse to start: the configuration is wrong there.
    idem_on(tmp.path(), &url, &["purge", "--config", &config]).expect(BAD_CONFIG);
}

#[test]
fn a_wrong_command_line_exits_2() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, _) = database_with_a_job(tmp.path(), data.path());
    for args in [
        &["enqueue", "--kind", "k", "--args", "{not json"][..],
        &["enqueue", "--kind", "k", "--run-at", "tomorrow"],
        &["enqueue", "--kind", "k", "--max-attempts", "0"],
        &["jobs", "list", "--state", "finished"],
        &["dead", "retry"],
        &["dead", "discard", "--all"],
        &["jobs", "show", "not-a-number"],
    ] {
        idem_on(tmp.path(), &url, args).expect(USAGE);
    }
}

#[test]
fn an_unreachable_database_exits_4() {
    let tmp = tempfile::tempdir().unwrap();
    let url = "postgres://postgres@127.0.0.1:1/test";
    for args in [&["queues"][..], &["migrate"], &["migrate", "--status"]] {
        idem_on(tmp.path(), url, args)
            .expect(UNAVAILABLE)
            .warns(&["127.0.0.1:1"]);
    }
}

#[test]
fn a_bad_configuration_exits_5() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for url in [
        "mysql://u@h/db",
        "sqlite::memory:",
        "sqlite://x.db?synchronous=off",
    ] {
        idem_on(tmp.path(), url, &["queues"])
            .expect(BAD_CONFIG)
            .warns(&["sqlite"]);
    }
    let config = data.path().join("typo.toml");
    std::fs::write(&config, "[worker]\nleese = \"30s\"\n").unwrap();
    let config = config.display().to_string();
    let url = sqlite_url(&data.path().join("unused.db"));
    idem_on(tmp.path(), &url, &["config", "check", "--config", &config])
        .expect(BAD_CONFIG)
        .warns(&["leese"]);
}

#[test]
fn the_help_documents_every_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = idem(tmp.path());
    cmd.arg("--help");
    let out = output(cmd, vec!["--help".into()]);
    out.expect(0);
    assert!(out.stdout.contains("Exit codes"), "{out}");
    for code in [
        CHECK_FAILED,
        USAGE,
        NOT_FOUND,
        UNAVAILABLE,
        BAD_CONFIG,
        SCHEMA_NOT_CURRENT,
    ] {
        let line = format!("\n  {code} ");
        assert!(
            out.stdout.contains(&line),
            "no line for exit code {code}; {out}"
        );
    }
}

/// `idem dead retry` judges a retry with the config file's windows and retry settings:
/// a dead job whose first attempt is 30 h old retries under the default 3-day effect-key
/// window, and is refused (exit 1, naming the job and `--force`) under a 2-day one, whose
/// allowance after the default horizon and margin is about 21 h; `--force` retries it.
#[test]
fn dead_retry_is_judged_with_the_config_files_windows() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, id) = database_with_a_job(tmp.path(), data.path());
    let now_ms = chrono::Utc::now().timestamp_millis();
    let first = now_ms - 30 * 3_600_000;
    sqlite_exec(
        &data.path().join("idem.db"),
        &format!(
            "UPDATE idem_job SET state = 'dead', attempt = 1, fence = 1, finalized_at = {now_ms} \
             WHERE id = {id};
             INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, \
             finished_at) VALUES ({id}, 1, 1, 'dead', 'boom', {first}, {first});"
        ),
    );
    let config = data.path().join("two-days.toml");
    std::fs::write(
        &config,
        "[retention]\nenqueue_keys = \"2d\"\neffect_keys = \"2d\"\nfinished_jobs = \"2d\"\n",
    )
    .unwrap();
    let (config, id) = (config.display().to_string(), id.to_string());
    idem_on(
        tmp.path(),
        &url,
        &["dead", "retry", &id, "--config", &config],
    )
    .expect(CHECK_FAILED)
    .warns(&[&id, "--force"]);
    idem_on(
        tmp.path(),
        &url,
        &["dead", "retry", &id, "--config", &config, "--force"],
    )
    .expect(0);
    idem_on(tmp.path(), &url, &["jobs", "cancel", &id]).expect(0);
    idem_on(tmp.path(), &url, &["dead", "retry", &id]).expect(0);
}
