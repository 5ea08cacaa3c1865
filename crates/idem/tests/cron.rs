//! Periodic jobs: three worker processes run the same every-second schedule for several
//! ticks, and each tick is one job; schedules and names that cannot work are refused.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::*;
use idem::{Idem, Job, Periodic};
use idem_store_tests::TestDb;
use idem_store_tests::harness::{open_store, within};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHILD_ENV: &str = "IDEM_CRON_CHILD_URL";
const READY: &str = "cron child ready";

fn every_second() -> Periodic {
    let job = Job::new("tick", serde_json::json!({"report": "daily"})).queue("cron");
    Periodic::new("every-second", "* * * * * *", job)
        .unwrap()
        .catch_up(Duration::ZERO)
}

/// A worker process running the every-second schedule (and claiming nothing: no queue
/// of it holds the ticks' jobs) until it is killed.
#[test]
#[ignore = "run as a child process by the periodic tests of this file"]
fn cron_child() {
    as_child("cron_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let idem = Idem::from_store(store);
        let mut w = idem.worker(config("elsewhere", 1)).expect("worker");
        w.periodic(every_second()).expect("periodic");
        let running = w.start();
        running.ready().await;
        println!("{READY}");
        std::future::pending::<()>().await;
    });
}

/// The cron jobs, as (tick run_at in ms → enqueue keys).
async fn ticks(idem: &Idem) -> BTreeMap<i64, Vec<String>> {
    let mut by_tick: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = idem
            .jobs(idem::JobList {
                queue: Some("cron".into()),
                limit: 500,
                before_id: after,
                ..Default::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for j in &page {
            let key = j.enqueue_key.clone().expect("a tick's job has its key");
            by_tick
                .entry(j.run_at.timestamp_millis())
                .or_default()
                .push(key);
        }
    }
    by_tick
}

/// Three processes, every second, for at least four ticks after all three run: one job
/// per tick, with the tick's key, and no tick skipped.
async fn three_processes_enqueue_each_tick_once(db: &TestDb) {
    let idem = client(db, None);
    let mut children = Vec::new();
    for _ in 0..3 {
        let mut child = spawn_test_child("cron_child", &[(CHILD_ENV, &db.url)]);
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();
        within(60, "a child worker starts", async {
            while let Some(line) = lines.next_line().await.expect("read child stdout") {
                if line.contains(READY) {
                    return;
                }
            }
            panic!("the child exited before it was ready");
        })
        .await;
        children.push((child, lines));
    }
    let all_running = idem.now().await.unwrap();
    let until = all_running + chrono::Duration::seconds(5);
    let seen = within(60, "five ticks after all three run", async {
        loop {
            let seen = ticks(&idem).await;
            if seen
                .keys()
                .next_back()
                .is_some_and(|t| *t >= until.timestamp_millis())
            {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    drop(children);
    let p = every_second();
    for (tick, keys) in &seen {
        let at = Utc.timestamp_millis_opt(*tick).unwrap();
        assert_eq!(keys, &vec![p.tick_key(at)], "tick {at}: {seen:?}");
    }
    let after_start: Vec<i64> = seen
        .keys()
        .copied()
        .filter(|t| *t > all_running.timestamp_millis())
        .collect();
    assert!(after_start.len() >= 5, "{after_start:?}");
    for pair in after_start.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1_000,
            "a tick was skipped: {after_start:?}"
        );
    }
}

/// A worker starting 32 s into a minute with an every-5-s schedule and a one-minute
/// catch-up enqueues one past tick, the latest (at 30 s), not the twelve of the window.
async fn a_starting_worker_catches_up_only_the_latest_tick(db: &TestDb) {
    let start = Utc.with_ymd_and_hms(2030, 6, 1, 0, 0, 32).unwrap();
    let clock = std::sync::Arc::new(idem::ManualClock::new(start));
    let idem = client(db, Some(clock));
    let job = Job::new("tick", serde_json::json!({})).queue("cron");
    let p = Periodic::new("five", "*/5 * * * * *", job).unwrap();
    let mut w = idem.worker(config("elsewhere", 1)).unwrap();
    w.periodic(p).unwrap();
    let w = w.start();
    let seen = within(30, "the caught-up tick", async {
        loop {
            let seen = ticks(&idem).await;
            if !seen.is_empty() {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    let latest = Utc.with_ymd_and_hms(2030, 6, 1, 0, 0, 30).unwrap();
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![latest.timestamp_millis()],
        "{seen:?}"
    );
    assert_eq!(
        ticks(&idem).await.len(),
        1,
        "nothing else was enqueued meanwhile"
    );
}

/// The next tick of a six-field schedule, and its key.
#[test]
fn ticks_follow_the_schedule() {
    let job = Job::new("tick", serde_json::json!({}));
    let p = Periodic::new("five", "*/5 * * * * *", job).unwrap();
    let t = Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 3).unwrap();
    let next = p.next_after(t).unwrap();
    assert_eq!(next, Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 5).unwrap());
    assert_eq!(
        p.next_after(next).unwrap(),
        next + chrono::Duration::seconds(5)
    );
    assert_eq!(
        p.tick_key(next),
        format!("cron:five:{}", next.timestamp_millis())
    );
    let daily = Periodic::new("daily", "0 3 * * *", Job::new("r", serde_json::json!({})));
    let daily = daily.unwrap();
    assert_eq!(
        daily.next_after(t).unwrap(),
        Utc.with_ymd_and_hms(2026, 12, 3, 3, 0, 0).unwrap()
    );
    assert_eq!(daily.schedule(), "0 3 * * *");
}

/// A bad expression, a name too long or invalid, a job with its own key, a name
/// registered twice and a catch-up as long as the enqueue-key window are refused, each
/// naming the problem.
async fn schedules_that_cannot_work_are_refused(db: &TestDb) {
    let job = || Job::new("tick", serde_json::json!({}));
    let err = |r: Result<Periodic, idem::IdemError>| r.unwrap_err().to_string();
    let e = err(Periodic::new("p", "every day", job()));
    assert!(
        e.contains("not a cron expression") && e.contains("every day"),
        "{e}"
    );
    let e = err(Periodic::new(&"n".repeat(201), "* * * * *", job()));
    assert!(e.contains("longer than 200"), "{e}");
    let e = err(Periodic::new("two words", "* * * * *", job()));
    assert!(e.contains("periodic job name"), "{e}");
    let e = err(Periodic::new("p", "* * * * *", job().enqueue_key("mine")));
    assert!(e.contains("enqueue key"), "{e}");
    let idem = client(db, None);
    let mut w = idem.worker(config("q", 1)).unwrap();
    w.periodic(Periodic::new("p", "* * * * *", job()).unwrap())
        .unwrap();
    let again = w.periodic(Periodic::new("p", "0 * * * *", job()).unwrap());
    let e = again.err().expect("refused").to_string();
    assert!(e.contains("already registered"), "{e}");
    let window = idem.retention().enqueue_keys;
    let long = Periodic::new("long", "* * * * *", job())
        .unwrap()
        .catch_up(window);
    let e = w.periodic(long).err().expect("refused").to_string();
    assert!(e.contains("enqueue-key window"), "{e}");
}

idem_store_tests::store_cases!(
    three_processes_enqueue_each_tick_once,
    a_starting_worker_catches_up_only_the_latest_tick,
    schedules_that_cannot_work_are_refused,
);
