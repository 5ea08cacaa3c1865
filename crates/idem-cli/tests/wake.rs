//! Wake-ups across processes on SQLite: `idem worker`, polling only once an hour, runs
//! a job that `idem enqueue` (another process, which exits at once) put in the same
//! database file, within moments; and its clean shutdown leaves no wake-up socket or
//! directory behind.

mod common;

use std::time::Duration;

use common::*;
use idem_mock_remote::{MockRemote, Mode};

/// Far longer than the failure bound below: only a wake-up starts the job in time.
const CONFIG: &str = "[worker]\npoll_interval = \"1h\"\n";
const FAILURE_BOUND: Duration = Duration::from_secs(60);

#[test]
fn a_job_enqueued_by_another_process_wakes_an_sqlite_worker() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let remote = {
        let _in = runtime.enter();
        MockRemote::start(Mode::Keyed).expect("start the mock remote")
    };
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = data.path().join("idem.db");
    let url = migrated_sqlite(tmp.path(), &db);
    let config = tmp.path().join("idem.toml");
    std::fs::write(&config, CONFIG).unwrap();
    // Its start line comes once its first claim found nothing and it listens.
    let mut worker = Worker::start(tmp.path(), &url, &["--config", config.to_str().unwrap()]);
    let effects = format!("{}/effects", remote.url());
    idem_on(tmp.path(), &url, &["enqueue", "http", "--url", &effects]).expect(0);
    let applied = runtime
        .block_on(async { tokio::time::timeout(FAILURE_BOUND, remote.wait_for_applied(1)).await });
    assert!(
        applied.is_ok(),
        "the job did not start before the worker's poll; worker: {}",
        worker.0.output()
    );
    let report = worker.stop();
    assert!(report.contains("completed 1"), "{report}");
    let left: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("wake"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
