//! The harness itself: every `TestDb` is a database of its own, its `url` reaches it from
//! another store, and `cleanup` removes it (the SQLite directory, the PostgreSQL schema).

use idem_store_tests::fixture::{insert_one, job, t0};
use idem_store_tests::{Backend, TestDb, open_store};

async fn two_databases_are_apart(backend: Backend) {
    let (Some(a), Some(b)) = (TestDb::new(backend).await, TestDb::new(backend).await) else {
        return; // skipped, with the notice printed by TestDb::postgres
    };
    assert_ne!(a.url, b.url);
    assert_eq!((a.backend, b.backend), (backend, backend));
    let id = insert_one(&a, job("only_in_a"), t0()).await.id;
    assert!(a.store.job_get(id).await.expect("job_get").is_some());
    let in_b = b.store.job_list(idem_store::JobList {
        limit: 10,
        ..Default::default()
    });
    assert!(in_b.await.expect("job_list").is_empty(), "b sees a's job");
    a.cleanup().await;
    b.cleanup().await;
}

async fn cleanup_removes_the_database(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url.clone();
    insert_one(&db, job("doomed"), t0()).await;
    db.cleanup().await;
    match backend {
        Backend::Sqlite => {
            let path = url.strip_prefix("sqlite://").expect("sqlite url");
            let dir = std::path::Path::new(path).parent().expect("a directory");
            assert!(!dir.exists(), "{} still exists", dir.display());
        }
        Backend::Postgres => {
            let other = open_store(&url).await.expect("the server is still there");
            let result = other.job_get(1).await;
            assert!(
                result.is_err(),
                "the schema survived cleanup: job_get gave {result:?}"
            );
            other.close().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_databases_are_apart() {
    two_databases_are_apart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_databases_are_apart() {
    two_databases_are_apart(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_cleanup_removes_the_file() {
    cleanup_removes_the_database(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cleanup_drops_the_schema() {
    cleanup_removes_the_database(Backend::Postgres).await;
}

#[tokio::test]
async fn sqlite_is_always_available() {
    let db = TestDb::new(Backend::Sqlite)
        .await
        .expect("sqlite is never skipped");
    assert!(db.url.starts_with("sqlite://"), "{}", db.url);
    db.cleanup().await;
}

#[tokio::test]
async fn an_unknown_url_is_a_config_error() {
    let result = open_store("mysql://h/db").await.map(|_| ());
    assert!(
        matches!(result, Err(idem_store::StoreError::Config(_))),
        "{result:?}"
    );
}
