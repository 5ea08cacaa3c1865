//! TLS to PostgreSQL, against the real server with `ssl = on`: a URL with
//! `sslmode=verify-full` and `sslrootcert` reaches the server over TLS with its
//! certificate verified, runs the job lifecycle there, and every pooled connection is
//! encrypted; a certificate that does not name the host, or a root certificate file that
//! does not exist, is refused with an error that says so.
//!
//! The server comes from `IDEM_TEST_PG_TLS_URL` (skipped with a notice without it, and a
//! failure under `CI`), e.g. `postgres://postgres@localhost:5432/test?sslmode=verify-full&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem`.

use idem_postgres::{PgOptions, PgStore};
use idem_store::testing::{PG_TLS_URL_ENV, PgUrlChoice, url_from_env};
use idem_store::{JobClaim, JobComplete, JobInsert, NewJob, Store, StoreError};

/// The TLS URL, or `None` (after a notice) when the tests skip.
fn tls_url() -> Option<String> {
    match url_from_env(PG_TLS_URL_ENV) {
        PgUrlChoice::Use(url) => Some(url),
        PgUrlChoice::Skip(notice) => {
            eprintln!("{notice}");
            None
        }
        PgUrlChoice::Fail(why) => panic!("{why}"),
    }
}

/// `url` with the query parameter `key` set to `value` (replaced when present).
fn with_param(url: &str, key: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
        .map(str::to_owned)
        .collect();
    params.push(format!("{key}={value}"));
    format!("{base}?{}", params.join("&"))
}

/// A store in a fresh schema on the TLS server.
async fn store_at(url: &str) -> Result<(PgStore, String), StoreError> {
    let schema = format!("idem_test_tls_{:016x}", rand_suffix());
    let options = PgOptions {
        schema: Some(schema.clone()),
        max_connections: 4,
        ..PgOptions::default()
    };
    Ok((PgStore::connect(url, options).await?, schema))
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

async fn drop_schema(store: &PgStore, schema: &str) {
    let mut tx = store.begin().await.expect("begin");
    let sql = format!("DROP SCHEMA {schema} CASCADE");
    tx.execute(&sql, &[]).await.expect("drop the test schema");
    tx.commit().await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_tls_connection_runs_the_job_lifecycle() {
    let Some(url) = tls_url() else { return };
    let (store, schema) = store_at(&url).await.expect("connect over TLS");
    store.migrate().await.expect("migrate over TLS");
    let job = NewJob::new("tls", "tls", serde_json::json!({"over": "tls"}), 3);
    let inserted = store
        .job_insert(JobInsert {
            jobs: vec![job],
            ..JobInsert::default()
        })
        .await
        .expect("insert");
    let claim = JobClaim {
        queue: "tls".into(),
        limit: 1,
        lease_ms: 30_000,
        worker: "tls-worker".into(),
        kinds: None,
        principal: None,
        now: None,
    };
    let claimed = store.job_claim(claim).await.expect("claim").remove(0);
    assert_eq!(claimed.id, inserted[0].job.id);
    let lease = claimed.lease_token();
    store
        .job_complete(JobComplete {
            lease,
            result: None,
            now: None,
        })
        .await
        .expect("complete");
    let sql = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    for _ in 0..4 {
        let rows = store.query(sql, &[]).await.expect("pg_stat_ssl");
        assert_eq!(
            rows,
            vec![vec![true.into()]],
            "every connection is encrypted"
        );
    }
    drop_schema(&store, &schema).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_is_refused() {
    let Some(url) = tls_url() else { return };
    let by_address = url.replacen("@localhost", "@127.0.0.1", 1);
    assert_ne!(by_address, url, "{PG_TLS_URL_ENV} names the host localhost");
    let err = store_at(&by_address).await.expect_err("refused");
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{msg}");
    assert!(msg.contains("TLS") || msg.contains("certificate"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_root_certificate_is_named() {
    let Some(url) = tls_url() else { return };
    let missing = "/nonexistent/idem-root.pem";
    let err = store_at(&with_param(&url, "sslrootcert", missing))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains(missing), "{err}");
}
