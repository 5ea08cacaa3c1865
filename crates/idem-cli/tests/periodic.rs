//! `[[periodic]]` in the config file: `idem worker` enqueues the schedule's job at each
//! tick, under the tick's enqueue key; a bad entry stops the worker before it starts,
//! naming the entry; on SQLite and on PostgreSQL.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const CONFIG: &str = r#"
[[periodic]]
name = "beat"
schedule = "* * * * * *"
kind = "tick"
queue = "cron"
args = { note = "from the config file" }
catch_up = "0s"
"#;

fn a_worker_enqueues_the_configured_ticks(tmp: &Path, url: &str) {
    let config = tmp.join("idem.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut cmd = idem(tmp);
    cmd.current_dir(tmp).args([
        "--database-url",
        url,
        "worker",
        "--queue",
        "default",
        "--config",
        config.to_str().unwrap(),
    ]);
    let mut worker = Running::start(cmd);
    worker.wait_for("the worker's start line", |l| {
        l.starts_with("idem worker ").then_some(())
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let jobs = loop {
        let jobs = idem_on(tmp, url, &["jobs", "list", "--queue", "cron", "--json"])
            .expect(0)
            .json();
        if jobs.as_array().is_some_and(|a| a.len() >= 3) {
            break jobs;
        }
        assert!(Instant::now() < deadline, "no ticks: {}", worker.output());
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = worker.child.kill();
    let _ = worker.child.wait();
    let mut keys: Vec<String> = Vec::new();
    for j in jobs.as_array().unwrap() {
        assert_eq!(j["kind"], "tick", "{j}");
        assert_eq!(j["args"]["note"], "from the config file", "{j}");
        let key = j["enqueue_key"].as_str().expect("a tick's key").to_owned();
        assert!(key.starts_with("cron:beat:"), "{key}");
        keys.push(key);
    }
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all, "one job per tick: {jobs}");

    std::fs::write(&config, CONFIG.replace("* * * * * *", "every second")).unwrap();
    let mut cmd = idem(tmp);
    cmd.current_dir(tmp)
        .args(["--database-url", url, "worker", "--config"]);
    cmd.arg(&config);
    let (status, out) = run(cmd);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("\"beat\"") && out.contains("not a cron expression"),
        "{out}"
    );
}

#[test]
fn sqlite_a_worker_enqueues_the_configured_ticks() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    a_worker_enqueues_the_configured_ticks(tmp.path(), &url);
}

#[test]
fn postgres_a_worker_enqueues_the_configured_ticks() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    a_worker_enqueues_the_configured_ticks(tmp.path(), &pg.url);
}
