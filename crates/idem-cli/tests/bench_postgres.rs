//! The scenarios of `idem bench` that run on PostgreSQL only. `scale`: worker processes of
//! this executable drain the fenced scenario's jobs on one database, and the scenario
//! fails unless every job was completed once by the processes' own reports and its effect
//! row written once under its last fence. `purge`: the purger's deletes of records past
//! their retention beside a worker, failing unless they delete every one. SQLite is
//! refused with the reason and the way out.

mod common;

use common::*;

#[test]
fn the_postgresql_scenarios_refuse_sqlite_naming_postgresql() {
    for scenario in ["scale", "purge"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = idem(tmp.path());
        cmd.args(["bench", "--smoke", "--scenarios", scenario]);
        let (status, out) = run(cmd);
        assert!(!status.success(), "{out}");
        assert!(
            out.contains(&format!("the {scenario} scenario runs on PostgreSQL"))
                && out.contains("--database-url postgres://"),
            "{out}"
        );
    }
}

#[test]
fn worker_processes_drain_the_scale_queue_each_job_once() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(url) = idem_store::testing::pg_url_or_skip() else {
        return;
    };
    let args = [
        "bench",
        "--smoke",
        "--scenarios",
        "scale",
        "--processes",
        "1,3",
        "--json",
    ];
    let out = idem_on(tmp.path(), &url, &args);
    out.expect(0);
    let report = out.json();
    let figures = report["figures"].as_array().expect("figures");
    let metrics: Vec<&str> = figures
        .iter()
        .map(|f| f["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        metrics,
        [
            "fenced rate, 1 worker process",
            "fenced rate, 3 worker processes"
        ],
        "{out}"
    );
    for f in figures {
        assert!(f["value"].as_f64().unwrap() > 0.0, "{f}");
        let note = f["note"].as_str().unwrap();
        assert!(
            note.contains("per process") && note.contains("WAL"),
            "{note}"
        );
    }
}

#[test]
fn the_purge_scenario_deletes_every_record_past_its_retention_beside_a_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(url) = idem_store::testing::pg_url_or_skip() else {
        return;
    };
    let args = ["bench", "--smoke", "--scenarios", "purge", "--json"];
    let out = idem_on(tmp.path(), &url, &args);
    out.expect(0);
    let report = out.json();
    let figures = report["figures"].as_array().expect("figures");
    let metric = |m: &str| figures.iter().find(|f| f["metric"] == m);
    for m in ["purge effect dedup records", "purge finished jobs"] {
        let f = metric(m).unwrap_or_else(|| panic!("no {m}: {out}"));
        assert!(
            f["note"].as_str().unwrap().starts_with("2000 records"),
            "{f}"
        );
    }
    let beside = metric("fenced rate beside the purge").expect("the worker's rate");
    assert!(beside["ceiling"].as_f64().unwrap() > 0.0, "{beside}");
}
