//! Checks of this crate alone: settings validation and password redaction without a
//! server, and one smoke run of the job lifecycle against the server named by
//! `IDEM_TEST_PG_URL` (skipped with a notice when it is unset), in a fresh schema that it
//! drops afterwards. The shared conformance suite (`idem-store-tests`) is the contract;
//! this only keeps the crate honest on its own.

use chrono::{Duration as Span, Utc};
use idem_store::{
    AttemptOutcome, JobCancel, JobClaim, JobComplete, JobFail, JobHeartbeat, JobInsert, JobList,
    JobRescue, JobState, LeaseToken, NewJob, SqlValue, Store, StoreError,
};

use super::*;
use crate::connect::is_plain_identifier;

#[test]
fn redact_hides_passwords() {
    assert_eq!(
        redact("postgres://u:secret@h:5432/db?sslmode=disable"),
        "postgres://u:***@h:5432/db?sslmode=disable"
    );
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(
        redact("postgres://h/db?user=u&password=secret"),
        "postgres://h/db?user=u&password=***"
    );
}

#[test]
fn schema_names_are_checked() {
    for ok in ["idem", "_x", "idem_test_1"] {
        assert!(is_plain_identifier(ok), "{ok}");
    }
    for bad in ["", "1x", "Idem", "a-b", "a;drop", "a\"b", &"a".repeat(64)] {
        assert!(!is_plain_identifier(bad), "{bad}");
    }
}

#[tokio::test]
async fn bad_settings_are_config_errors() {
    let err = PgStore::connect("mysql://u:pw@h/db", PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Config(_)), "{err}");
    assert!(err.to_string().contains("postgres://"), "{err}");
    assert!(!err.to_string().contains("pw"), "{err}");
    let options = PgOptions {
        schema: Some("Bad-Name".into()),
        ..PgOptions::default()
    };
    let err = PgStore::connect("postgres://h/db", options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Bad-Name"), "{err}");
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    let url = "postgres://u:secret@127.0.0.1:1/db";
    let err = PgStore::connect(url, PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("127.0.0.1:1") && !msg.contains("secret"),
        "{msg}"
    );
}

/// The server of the smoke test, by the same rule as the conformance harness: skip with a
/// notice when `IDEM_TEST_PG_URL` is unset, fail when it is unset under `CI`.
fn test_url() -> Option<String> {
    idem_store::testing::pg_url_or_skip()
}

fn fresh_schema() -> String {
    let nanos = Utc::now().timestamp_subsec_nanos();
    format!("idem_smoke_{}_{nanos}", std::process::id())
}

fn new_job(queue: &str) -> NewJob {
    NewJob::new("smoke", queue, serde_json::json!({"n": 1}), 3)
}

fn claim(queue: &str, limit: u32, now: Timestamp) -> JobClaim {
    JobClaim {
        queue: queue.into(),
        limit,
        lease_ms: 30_000,
        worker: "smoke-worker".into(),
        kinds: None,
        principal: None,
        now: Some(now),
    }
}

async fn complete(
    store: &PgStore,
    lease: LeaseToken,
    now: Option<Timestamp>,
) -> StoreResult<JobRow> {
    store
        .job_complete(JobComplete {
            lease,
            result: None,
            now,
        })
        .await
}

async fn fail(
    store: &PgStore,
    lease: LeaseToken,
    retry_in_ms: Option<i64>,
    now: Timestamp,
) -> JobRow {
    let error = format!("failed, retry in {retry_in_ms:?}");
    let now = Some(now);
    let params = JobFail {
        lease,
        error,
        retry_in_ms,
        snooze: false,
        now,
    };
    store.job_fail(params).await.unwrap()
}

#[tokio::test]
async fn smoke_lifecycle() {
    let Some(url) = test_url() else { return };
    let schema = fresh_schema();
    let options = PgOptions {
        schema: Some(schema.clone()),
        ..PgOptions::default()
    };
    let store = PgStore::connect(&url, options).await.unwrap();
    assert_eq!(store.migrate().await.unwrap(), idem_store::migration::COUNT);
    assert_eq!(store.migrate().await.unwrap(), 0);
    let t0 = store.now().await.unwrap();
    lifecycle(&store, t0).await;
    cancel_paths(&store, t0).await;
    caller_sql(&store).await;
    search_path_from_url(&url, &schema).await;
    claims_walk_the_claim_index(&store).await;
    drop_schema(&store, &schema).await;
}

/// Behind a pooler (`pooler=transaction`, here straight to the server so the sessions can
/// be looked at): after a lifecycle of operations, no connection of any pool has a
/// prepared statement, a setting of idem's or a LISTEN, and none was opened with startup
/// options; inside idem's transactions the schema and the claim planner still hold.
#[tokio::test]
async fn behind_a_pooler_sessions_keep_nothing() {
    let Some(url) = test_url() else { return };
    let (store, schema) = pooled_store(&url, "pooler=transaction").await;
    store.migrate().await.unwrap();
    assert!(
        store.subscribe().await.unwrap().is_none(),
        "no LISTEN without listen_url"
    );
    let t0 = store.now().await.unwrap();
    lifecycle(&store, t0).await;
    for pool in [&store.pool, &store.claims, &store.engine] {
        let mut conn = pool.pool.acquire().await.unwrap();
        let session: (i64, String, String, String) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM pg_prepared_statements), current_setting('search_path'), \
                    current_setting('enable_seqscan'), \
                    (SELECT coalesce(string_agg(c, ','), '') FROM pg_listening_channels() c)",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        assert_eq!(session.0, 0, "prepared statements left in the session");
        assert!(
            !session.1.contains(&schema),
            "search_path of the session: {}",
            session.1
        );
        assert_eq!((session.2.as_str(), session.3.as_str()), ("on", ""));
    }
    let in_tx = |pool: &Pool| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let seen: (String, String) =
                sqlx::query_as("SELECT current_schema(), current_setting('enable_seqscan')")
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
            seen
        }
    };
    assert_eq!(in_tx(&store.claims).await, (schema.clone(), "off".into()));
    assert_eq!(in_tx(&store.pool).await, (schema.clone(), "on".into()));
    drop_schema(&store, &schema).await;
}

/// A store on `url` with `params` added to its query string, in a fresh schema.
async fn pooled_store(url: &str, params: &str) -> (PgStore, String) {
    let schema = fresh_schema();
    let sep = if url.contains('?') { '&' } else { '?' };
    let options = PgOptions {
        schema: Some(schema.clone()),
        ..PgOptions::default()
    };
    let url = format!("{url}{sep}{params}");
    (PgStore::connect(&url, options).await.unwrap(), schema)
}

/// Behind a pooler with `listen_url`: the subscription is made on the direct connection,
/// and an announcement sent through the pooled connections (in a transaction) reaches it.
#[tokio::test]
async fn behind_a_pooler_wakeups_come_over_the_listen_url() {
    let Some(url) = test_url() else { return };
    let encoded: String = url
        .bytes()
        .map(|b| match b.is_ascii_alphanumeric() {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect();
    let params = format!("pooler=transaction&listen_url={encoded}");
    let (store, schema) = pooled_store(&url, &params).await;
    let mut wakeups = store.subscribe().await.unwrap().expect("a subscription");
    store.announce(&["q1".to_owned()]).await.unwrap();
    let heard = tokio::time::timeout(std::time::Duration::from_secs(10), wakeups.next())
        .await
        .expect("the announcement within 10 s")
        .unwrap();
    assert_eq!(heard, ["q1"]);
    drop(wakeups);
    drop_schema(&store, &schema).await;
}

/// With no statistics about a large backlog waiting (a table that filled faster than
/// autoanalyze), a
/// claim still walks the claim index in order and stops at its limit: no bitmap scan, no
/// sort of the backlog (see [`CLAIM_PLANNER`]). Checked on the claim pool's own
/// connections, with the claim statement as the store sends it, planned for the bound
/// values and as the one generic plan those connections use (see [`GENERIC_PLANS`]);
/// and complete-many's generic plan on the engine pool.
async fn claims_walk_the_claim_index(store: &PgStore) {
    // As in a table that filled faster than autoanalyze: no statistics at all.
    sqlx::query("ALTER TABLE idem_job SET (autovacuum_enabled = false)")
        .execute(&store.pool.pool)
        .await
        .unwrap();
    let backlog: Vec<NewJob> = (0..20_000).map(|_| new_job("backlog")).collect();
    store
        .job_insert(JobInsert {
            jobs: backlog,
            ..JobInsert::default()
        })
        .await
        .unwrap();
    // Half the backlog drained, as in the middle of a run: claimed and completed rows
    // leave new versions and index entries behind.
    for _ in 0..20 {
        let claimed = store
            .job_claim(claim("backlog", 500, Utc::now()))
            .await
            .unwrap();
        let leases = claimed.iter().map(|j| j.lease_token()).collect();
        let done = store
            .job_complete_many(idem_store::JobCompleteMany {
                leases,
                results: Vec::new(),
                now: None,
            })
            .await
            .unwrap();
        assert_eq!(done.len(), 500);
    }
    let explain = concat!("EXPLAIN ", include_str!("../queries/job/claim.sql"));
    // Without and with a principal filter: the same walk of the claim index.
    for principal in [None, Some("tenant-a")] {
        let plan: Vec<String> = sqlx::query_scalar(explain)
            .bind("backlog")
            .bind(500_i64)
            .bind("w")
            .bind(30_000_i64)
            .bind(None::<Timestamp>)
            .bind(Some(vec!["smoke".to_owned()]))
            .bind(principal)
            .fetch_all(&store.claims.pool)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("Index Scan using idem_job_claim"), "{plan}");
        assert!(!plan.contains("Bitmap") && !plan.contains("Sort"), "{plan}");
    }
    // The generic plans, which these connections use for every execution: the claim on
    // the claim pool, and complete-many on the engine pool, whose sessions keep sorts
    // (under the claim planner's settings its generic plan walked the whole primary key).
    let claim = generic_plan(
        &store.claims.pool,
        include_str!("../queries/job/claim.sql"),
        "'backlog', 500, 'w', 30000, NULL, '{smoke}', 'tenant-a'",
    )
    .await;
    assert!(claim.contains("Index Scan using idem_job_claim"), "{claim}");
    assert!(
        !claim.contains("Bitmap") && !claim.contains("Sort"),
        "{claim}"
    );
    let complete = generic_plan(
        &store.engine.pool,
        include_str!("../queries/job/complete_many.sql"),
        "'{1,2}', '{1,1}', NULL, '{}', '{}', false",
    )
    .await;
    assert!(
        complete.contains("Index Cond: (id = l.job_id)"),
        "{complete}"
    );
    let show =
        |name: &str| sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("SHOW {name}")));
    for (name, value) in CLAIM_PLANNER.into_iter().chain(GENERIC_PLANS) {
        let shown = show(name).fetch_one(&store.claims.pool).await.unwrap();
        assert_eq!(shown, value, "{name} on the claim connections");
    }
    for (name, value) in GENERIC_PLANS {
        let shown = show(name).fetch_one(&store.engine.pool).await.unwrap();
        assert_eq!(shown, value, "{name} on the engine's connections");
    }
    // The caller's queries keep PostgreSQL's own choice between plans.
    let main = show("plan_cache_mode")
        .fetch_one(&store.pool.pool)
        .await
        .unwrap();
    assert_eq!(main, "auto", "plan_cache_mode on the main pool");
    let path = |pool| sqlx::query_scalar::<_, String>("SHOW search_path").fetch_one(pool);
    let main: String = path(&store.pool.pool).await.unwrap();
    for pool in [&store.claims.pool, &store.engine.pool] {
        let theirs = path(pool).await.unwrap();
        assert_eq!(theirs, main, "claims and the engine use the store's schema");
    }
}

/// The plan `EXPLAIN EXECUTE` shows for `sql` prepared on one connection of `pool` and
/// run with `args` (SQL literals), as that connection's sessions plan it.
async fn generic_plan(pool: &sqlx::PgPool, sql: &str, args: &str) -> String {
    let mut conn = pool.acquire().await.unwrap();
    prepare(&mut conn, "shown", sql).await;
    let explain = format!("EXPLAIN EXECUTE shown({args})");
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("DEALLOCATE shown")
        .execute(&mut *conn)
        .await
        .unwrap();
    plan.join("\n")
}

/// `PREPARE name AS sql` on `conn`; `name` may carry the parameters' types.
async fn prepare(conn: &mut sqlx::PgConnection, name: &str, sql: &str) {
    let prepare = format!("PREPARE {name} AS {sql}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(conn)
        .await
        .unwrap();
}

async fn lifecycle(store: &PgStore, t0: Timestamp) {
    let jobs = vec![new_job("q"), new_job("q"), new_job("q")];
    let inserted = store
        .job_insert(JobInsert {
            jobs,
            now: Some(t0),
            ..JobInsert::default()
        })
        .await
        .unwrap();
    assert_eq!(inserted.len(), 3);
    assert!(inserted.windows(2).all(|w| w[0].id < w[1].id));
    assert!(inserted.iter().all(|j| j.state == JobState::Available));
    let claimed = store.job_claim(claim("q", 2, t0)).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(
        claimed
            .iter()
            .all(|j| j.fence == 1 && j.state == JobState::Running)
    );
    let leases: Vec<_> = claimed.iter().map(|j| j.lease_token()).collect();
    let renewed = store
        .job_heartbeat(JobHeartbeat {
            leases: leases.clone(),
            lease_ms: 60_000,
            now: Some(t0),
        })
        .await
        .unwrap();
    assert_eq!(renewed.len(), 2);
    assert!(
        renewed
            .iter()
            .all(|r| r.lease_expires_at > t0 + Span::seconds(59))
    );
    let done = complete(store, leases[0], Some(t0)).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    fail_and_rescue(store, t0, claimed[1].id, inserted[2].id).await;
}

async fn fail_and_rescue(store: &PgStore, t0: Timestamp, failing: i64, other: i64) {
    let lease = store.job_get(failing).await.unwrap().unwrap().lease_token();
    let failed = fail(store, lease, Some(1_000), t0).await;
    assert_eq!(failed.state, JobState::Retryable);
    assert_eq!(failed.run_at, t0 + Span::seconds(1));
    let later = t0 + Span::seconds(2);
    let again = store.job_claim(claim("q", 2, later)).await.unwrap();
    assert_eq!(
        again.iter().map(|j| j.id).collect::<Vec<_>>(),
        [failing, other]
    );
    let dead = fail(store, again[0].lease_token(), None, later).await;
    assert_eq!(dead.state, JobState::Dead);
    assert!(dead.finalized_at.is_some());
    let rescued = store
        .job_rescue(JobRescue {
            limit: 10,
            retry_in_ms: 0,
            max_attempts: None,
            now: Some(t0 + Span::hours(1)),
        })
        .await
        .unwrap();
    assert_eq!(rescued.iter().map(|j| j.id).collect::<Vec<_>>(), [other]);
    assert_eq!(rescued[0].state, JobState::Retryable);
    let stale = complete(store, again[1].lease_token(), None)
        .await
        .unwrap_err();
    assert!(stale.is_lease_lost(), "{stale}");
    check_history(store, failing, other).await;
}

async fn check_history(store: &PgStore, failing: i64, other: i64) {
    let outcomes = |rows: Vec<idem_store::AttemptRow>| -> Vec<AttemptOutcome> {
        rows.into_iter().map(|a| a.outcome).collect()
    };
    let h = outcomes(store.job_attempts(failing).await.unwrap());
    assert_eq!(h, [AttemptOutcome::Retryable, AttemptOutcome::Dead]);
    let h = outcomes(store.job_attempts(other).await.unwrap());
    assert_eq!(h, [AttemptOutcome::LeaseExpired]);
    let dead = store
        .job_list(JobList {
            state: Some(JobState::Dead),
            limit: 10,
            ..JobList::default()
        })
        .await
        .unwrap();
    assert_eq!(dead.iter().map(|j| j.id).collect::<Vec<_>>(), [failing]);
    let counts = store.queue_counts().await.unwrap();
    assert_eq!(counts.iter().map(|c| c.count).sum::<i64>(), 3);
}

async fn cancel_paths(store: &PgStore, t0: Timestamp) {
    let job = store
        .job_insert(JobInsert {
            jobs: vec![new_job("c")],
            now: Some(t0),
            ..JobInsert::default()
        })
        .await
        .unwrap()
        .remove(0);
    let running = store.job_claim(claim("c", 1, t0)).await.unwrap().remove(0);
    let cancel = |now| JobCancel {
        job_id: job.id,
        now,
    };
    let cancelled = store.job_cancel(cancel(Some(t0))).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    let history = store.job_attempts(job.id).await.unwrap();
    assert_eq!(history[0].outcome, AttemptOutcome::Cancelled);
    let lost = complete(store, running.lease_token(), None)
        .await
        .unwrap_err();
    assert!(lost.is_lease_lost(), "{lost}");
    let again = store.job_cancel(cancel(None)).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict(_)), "{again}");
    let missing = JobCancel {
        job_id: i64::MAX,
        now: None,
    };
    let err = store.job_cancel(missing).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
}

async fn caller_sql(store: &PgStore) {
    let mut tx = store.begin().await.unwrap();
    tx.execute("CREATE TABLE smoke_t (a integer, b text, c jsonb)", &[])
        .await
        .unwrap();
    let args = [
        SqlValue::Null,
        SqlValue::Null,
        SqlValue::Json(serde_json::json!([1])),
    ];
    let n = tx
        .execute("INSERT INTO smoke_t VALUES ($1, $2, $3)", &args)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let dup = tx.execute("CREATE TABLE smoke_t (a int)", &[]).await;
    assert!(dup.is_err());
    tx.rollback().await.unwrap();
    caller_sql_types(store).await;
}

/// Every SqlValue kind read back from its PostgreSQL type.
async fn caller_sql_types(store: &PgStore) {
    let now = Utc::now();
    let args = [
        SqlValue::Int(7),
        SqlValue::Text("x".into()),
        SqlValue::Timestamp(now),
        SqlValue::Bytes(vec![1, 2]),
    ];
    let sql = "SELECT $1::bigint, 2::int2, $2, $3::timestamptz, $4::bytea, 1.5::numeric, \
               -12345.678::numeric, true, 0.25::float4, '{\"k\":1}'::json, NULL::int, \
               '2024-01-02 03:04:05'::timestamp";
    let rows = store.query(sql, &args).await.unwrap();
    let micros = now.timestamp_micros();
    let expected = vec![
        SqlValue::Int(7),
        SqlValue::Int(2),
        SqlValue::Text("x".into()),
        SqlValue::Timestamp(chrono::DateTime::from_timestamp_micros(micros).unwrap()),
        SqlValue::Bytes(vec![1, 2]),
        SqlValue::Real(1.5),
        SqlValue::Real(-12345.678),
        SqlValue::Bool(true),
        SqlValue::Real(0.25),
        SqlValue::Json(serde_json::json!({"k": 1})),
        SqlValue::Null,
        SqlValue::Timestamp("2024-01-02T03:04:05Z".parse().unwrap()),
    ];
    assert_eq!(rows, vec![expected]);
}

async fn search_path_from_url(url: &str, schema: &str) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let store = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    assert_eq!(store.migrate().await.unwrap(), 0);
    let list = store
        .job_list(JobList {
            limit: 100,
            ..JobList::default()
        })
        .await
        .unwrap();
    assert_eq!(list.len(), 4);
    store.close().await;
}

async fn drop_schema(store: &PgStore, schema: &str) {
    let sql = format!("DROP SCHEMA \"{schema}\" CASCADE");
    let mut tx = store.begin().await.unwrap();
    tx.execute(&sql, &[]).await.unwrap();
    tx.commit().await.unwrap();
    store.close().await;
}

#[test]
fn search_path_goes_into_the_query_string() {
    assert_eq!(
        crate::url_with_search_path("postgres://u@h:5432/db", "idem_test_1"),
        "postgres://u@h:5432/db?options=-c%20search_path%3Didem_test_1"
    );
    assert_eq!(
        crate::url_with_search_path("postgres://u@h/db?sslmode=disable", "s"),
        "postgres://u@h/db?sslmode=disable&options=-c%20search_path%3Ds"
    );
}

/// Every TCP connection this process holds to the server has `TCP_NODELAY` set. Without
/// it (sqlx 0.9.0), a new connection's TLS handshake made two small writes in a row
/// twice, and each second write waited for the server's delayed ACK: about 90 ms per new
/// connection, the maximum of every PostgreSQL latency run (docs/performance.md,
/// "PostgreSQL latency outliers (2026-12-03)"). Skipped only when the URL names a Unix
/// socket; over TCP, finding no connection to check fails.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn connections_to_the_server_disable_nagle() {
    let Some(url) = test_url() else { return };
    let store = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *conn).await.unwrap();
    let options = connect::connect_options(&url).unwrap();
    if options.get_socket().is_some() {
        eprintln!("the test server is reached over a Unix socket: no TCP option to check");
        return;
    }
    let port = options.get_port();
    let sockets = tcp_sockets_to(port);
    assert!(
        !sockets.is_empty(),
        "no TCP connection to port {port} found in this process: the check saw nothing"
    );
    for (fd, nodelay) in sockets {
        assert!(nodelay, "the connection on fd {fd} has TCP_NODELAY off");
    }
}

/// This process's TCP sockets whose peer port is `port`, each with whether
/// `TCP_NODELAY` is set.
#[cfg(target_os = "linux")]
fn tcp_sockets_to(port: u16) -> Vec<(i32, bool)> {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap();
    let fds = fds.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok());
    fds.filter(|fd| peer_port(*fd) == Some(port))
        .filter_map(|fd| Some((fd, tcp_nodelay(fd)?)))
        .collect()
}

/// The peer port of socket `fd` when it is an IPv4 or IPv6 socket with a peer.
#[cfg(target_os = "linux")]
fn peer_port(fd: i32) -> Option<u16> {
    // SAFETY: `addr` is a zeroed `sockaddr_storage` and `len` its size; getpeername
    // writes at most `len` bytes and fails harmlessly on a descriptor that is no socket.
    let (addr, ok) = unsafe {
        let mut addr: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let ok = libc::getpeername(fd, (&raw mut addr).cast(), &mut len) == 0;
        (addr, ok)
    };
    match (ok, i32::from(addr.ss_family)) {
        // SAFETY: the family says which address type the storage holds.
        (true, libc::AF_INET) => {
            let a: libc::sockaddr_in = unsafe { std::mem::transmute_copy(&addr) };
            Some(u16::from_be(a.sin_port))
        }
        (true, libc::AF_INET6) => {
            let a: libc::sockaddr_in6 = unsafe { std::mem::transmute_copy(&addr) };
            Some(u16::from_be(a.sin6_port))
        }
        _ => None,
    }
}

/// Whether `TCP_NODELAY` is set on socket `fd`; `None` if it cannot be read.
#[cfg(target_os = "linux")]
fn tcp_nodelay(fd: i32) -> Option<bool> {
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `on` and `len` are valid for the size given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw mut on).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(on != 0)
}

/// A generic plan lives as long as its session's prepared statement, and nothing but a
/// change to the table's definition or statistics replaces it (no autovacuum, or before
/// its first analyze). The engine pool's sessions plan the heartbeat and complete-many
/// once: made while the job table is empty, each plan walks the lease index (every
/// running job, twice) and filters the leases against it; after the table fills, each
/// heartbeat and each completion flush still reads every running job, its cost growing
/// with the running jobs, instead of reaching its jobs by primary key. Shown with the
/// statements as the store sends them, prepared on the engine pool's one connection
/// before the table fills and executed after.
#[tokio::test]
#[ignore = "finding, not fixed: a generic plan made on an empty job table walks every \
            running job for each heartbeat and completion flush until the table's \
            statistics change; plan_cache_mode = auto switches to the same generic plan \
            after five runs"]
async fn engine_plans_made_on_an_empty_table_read_by_primary_key_later() {
    let Some(url) = test_url() else { return };
    let schema = fresh_schema();
    let options = PgOptions {
        schema: Some(schema.clone()),
        max_connections: 1,
        ..PgOptions::default()
    };
    let store = PgStore::connect(&url, options).await.unwrap();
    store.migrate().await.unwrap();
    let statements = [
        (
            "hb(bigint[], bigint[], bigint, timestamptz)",
            include_str!("../queries/job/heartbeat.sql"),
            "hb(ARRAY[{id}]::bigint[], ARRAY[1]::bigint[], 30000, NULL)",
        ),
        (
            "cm(bigint[], bigint[], timestamptz, bigint[], jsonb[], boolean)",
            include_str!("../queries/job/complete_many.sql"),
            "cm(ARRAY[{id}]::bigint[], ARRAY[1]::bigint[], NULL, '{}', '{}', false)",
        ),
    ];
    let mut conn = store.engine.pool.acquire().await.unwrap();
    for (name, sql, args) in statements {
        prepare(&mut conn, name, sql).await;
        let run = format!("EXECUTE {}", args.replace("{id}", "1"));
        sqlx::raw_sql(sqlx::AssertSqlSafe(run))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    let fill = "INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, \
                run_at, created_at, attempt, fence, lease_owner, attempted_at, \
                lease_expires_at) \
                SELECT 'k', 'q', '{}', 0, 'running', 3, now(), now(), 1, 1, 'w', now(), \
                now() + interval '1 hour' FROM generate_series(1, 20000)";
    sqlx::raw_sql(fill).execute(&mut *conn).await.unwrap();
    let mut plans = Vec::new();
    for (id, (_, _, args)) in (10_000..).zip(statements) {
        let explain = format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE {}",
            args.replace("{id}", &id.to_string())
        );
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        plans.push(plan.join("\n"));
    }
    drop(conn);
    drop_schema(&store, &schema).await;
    for plan in plans {
        assert!(
            !plan.contains("idem_job_lease"),
            "a statement on one job walks every running job:\n{plan}"
        );
    }
}

/// A process that stops inside one of the store's transactions (here just after
/// reserving an intent, which share-locks its job's row) loses its session after the
/// store's idle timeout, so the rescuer moves the job once its lease has ended. Without
/// the timeout the row stays locked, and the job pinned to the stopped process, until it
/// resumes: the rescue skips locked rows.
#[tokio::test]
async fn a_transaction_left_idle_lets_go_of_its_job_after_the_idle_timeout() {
    use idem_store::{InsertClaim, IntentBegin, IntentBegun};
    let Some((store, schema)) = idle_store(300).await else {
        return;
    };
    let job = NewJob {
        claim: Some(InsertClaim {
            worker: "stopped".into(),
            lease_ms: 1,
        }),
        ..new_job("idle")
    };
    let inserted = store
        .job_insert(JobInsert {
            jobs: vec![job],
            key_window_ms: 60_000,
            now: None,
        })
        .await
        .unwrap();
    let job = &inserted[0];
    let mut stopped = store.begin().await.unwrap();
    let begun = stopped
        .intent_begin(IntentBegin {
            key: "idle-intent".into(),
            fingerprint: "f".into(),
            unkeyed: false,
            lease_ms: 60_000,
            job: LeaseToken {
                job_id: job.id,
                fence: job.fence,
            },
            now: None,
        })
        .await
        .unwrap();
    assert!(matches!(begun, IntentBegun::Begun(_)), "{begun:?}");

    // The job's lease (1 ms) has ended; the rescue gets the row once the stopped
    // transaction's session is gone. The bound is far above the 300 ms timeout.
    let rescue = JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: None,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.job_rescue(rescue.clone()).await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "job {} stayed locked by a transaction left idle for 30 s",
            job.id
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        stopped.commit().await.is_err(),
        "the idle transaction's session was ended, so its reservation cannot commit"
    );
    drop_schema(&store, &schema).await;
}

/// Every transaction of the store carries the configured idle timeout; an effect
/// transaction's fence check replaces it with what is left of its lease.
#[tokio::test]
async fn each_transaction_carries_the_idle_timeout() {
    let Some((store, schema)) = idle_store(4_321).await else {
        return;
    };
    let show = "SHOW idle_in_transaction_session_timeout";
    let mut tx = store.begin().await.unwrap();
    let rows = tx.query(show, &[]).await.unwrap();
    assert_eq!(rows, vec![vec![SqlValue::Text("4321ms".into())]]);
    tx.rollback().await.unwrap();
    // Outside a transaction, the session's own setting is untouched.
    let outside: String = sqlx::query_scalar(show)
        .fetch_one(&store.pool.pool)
        .await
        .unwrap();
    assert_ne!(outside, "4321ms");
    drop_schema(&store, &schema).await;
}

/// A migrated store in a fresh schema whose transactions may sit idle for `ms`.
async fn idle_store(ms: u64) -> Option<(PgStore, String)> {
    let url = test_url()?;
    let schema = fresh_schema();
    let options = PgOptions {
        schema: Some(schema.clone()),
        idle_in_transaction_timeout: std::time::Duration::from_millis(ms),
        ..PgOptions::default()
    };
    let store = PgStore::connect(&url, options).await.unwrap();
    store.migrate().await.unwrap();
    Some((store, schema))
}

/// `max_connections` bounds every connection the store opens: with each pool holding all
/// it may, the server counts exactly the setting under the store's application name.
#[tokio::test]
async fn the_setting_bounds_the_connections_of_all_three_pools() {
    let Some(url) = test_url() else { return };
    let schema = fresh_schema();
    let name = format!("budget_{schema}");
    let sep = if url.contains('?') { '&' } else { '?' };
    let total = 11;
    let options = PgOptions {
        schema: Some(schema.clone()),
        max_connections: total,
        ..PgOptions::default()
    };
    let named = format!("{url}{sep}application_name={name}");
    let store = PgStore::connect(&named, options).await.unwrap();
    let budget = Budget::of(total);
    let mut held = Vec::new();
    for (pool, size) in [
        (&store.pool, budget.transactions),
        (&store.claims, budget.claims),
        (&store.engine, budget.engine),
    ] {
        for _ in 0..size {
            held.push(pool.pool.acquire().await.unwrap());
        }
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), pool.pool.acquire())
                .await
                .is_err(),
            "a pool opened more than its share of {size}"
        );
    }
    let probe = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    let opened: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&name)
            .fetch_one(&probe.pool.pool)
            .await
            .unwrap();
    assert_eq!(opened, i64::from(total), "{budget:?}");
    drop(held);
    drop_schema(&store, &schema).await;
    store.close().await;
    probe.close().await;
}

/// A subscription being listened on (a worker's) ends when the store closes, with an
/// error that says so, and gives its connection back so `close` finishes; one asked for
/// afterwards finds no channel (it was an error, which a worker's listener logged at every
/// poll until the worker stopped).
#[tokio::test]
async fn closing_the_store_ends_a_live_subscription() {
    let Some(url) = test_url() else { return };
    let store = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    let mut wakeups = store.subscribe().await.unwrap().expect("a channel");
    // Live: `subscribe` returns once its LISTEN ran; the task may start listening before
    // or after the close begins.
    let listening = tokio::spawn(async move { wakeups.next().await });
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), store.close()).await;
    assert!(
        closed.is_ok(),
        "close waited for the subscription's connection"
    );
    let ended = listening.await.unwrap();
    assert!(
        matches!(ended, Err(StoreError::Unavailable(_))),
        "{ended:?}"
    );
    assert!(store.subscribe().await.unwrap().is_none());
}
