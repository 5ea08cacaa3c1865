//! The store's settings reach `Idem` (`Idem::connect_with`, `ConnectOptions`), and a
//! worker is checked against the PostgreSQL pool for transactions it will draw on (the
//! setting's share after the claim and engine pools, `idem_postgres::Budget`): refused
//! when that pool cannot serve its own duties (completion flushes, rescuer, purger,
//! elector, listener, announcer) and one job, with the numbers and the way out, the
//! setting that would do. The store opens no more connections than the setting, counted
//! on the server. SQLite has no pool: any concurrency is accepted there.

mod common;

use common::*;
use idem::{Idem, WORKER_CONNECTIONS};
use idem_store_tests::TestDb;

/// A client on the test database (its schema is in the URL) with a budget of `size`.
async fn with_pool(db: &TestDb, size: u32) -> Idem {
    client_with_budget(&db.url, size).await
}

async fn the_pool_size_reaches_the_store_and_bounds_workers(db: &TestDb) {
    let total_for = idem_postgres::Budget::total_for;
    let small = with_pool(db, total_for(WORKER_CONNECTIONS)).await;
    assert_eq!(small.store().connections(), Some(WORKER_CONNECTIONS));
    let err = small.worker(config("q", 1)).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("pool has {WORKER_CONNECTIONS} connections"))
            && msg.contains("max_connections")
            && msg.contains(&format!("to {} or more", total_for(WORKER_CONNECTIONS + 1))),
        "{msg}"
    );
    small.store().close().await;
    let named = with_pool(db, total_for(WORKER_CONNECTIONS))
        .await
        .with_pool_setting("--pool-size");
    let msg = named
        .worker(config("q", 1))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        msg.contains("raise --pool-size to") && !msg.contains("PgOptions"),
        "{msg}"
    );
    named.store().close().await;
    let enough = with_pool(db, total_for(WORKER_CONNECTIONS + 1)).await;
    assert_eq!(enough.store().connections(), Some(WORKER_CONNECTIONS + 1));
    assert!(enough.worker(config("q", 1)).is_ok());
    enough.store().close().await;
}

async fn a_store_without_a_pool_takes_any_concurrency(db: &TestDb) {
    let idem = client(db, None);
    assert_eq!(idem.store().connections(), None);
    assert!(
        idem.worker(config("q", 10_000)).is_ok(),
        "the highest concurrency a queue takes"
    );
}

idem_store_tests::postgres_cases!(the_pool_size_reaches_the_store_and_bounds_workers);

mod sqlite_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_without_a_pool_takes_any_concurrency() {
        let db = idem_store_tests::TestDb::sqlite().await;
        super::a_store_without_a_pool_takes_any_concurrency(&db).await;
        db.cleanup().await;
    }
}
