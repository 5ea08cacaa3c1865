//! The conformance suite every idem store must pass, and the per-test database harness.
//!
//! The suite is the contract of the storage seam (`idem-store`): each case in [`cases`]
//! is a public `async fn(&TestDb)` that states one rule of the [`Store`](idem_store::Store)
//! and [`StoreTx`](idem_store::StoreTx) docs as an executable check, and
//! [`store_cases!`] turns a list of cases into one test per case and per store
//! (`sqlite::case` and `postgres::case`). A change to the seam adds or extends a case.
//!
//! What must stay true:
//! - every test owns its database: a fresh temporary SQLite file, or a fresh PostgreSQL
//!   schema `idem_test_<random>` ([`TestDb`]), so tests run in parallel;
//! - every time-dependent rule is checked with injected time (`now: Some(t)`), never the
//!   wall clock, and asynchronous events are awaited with signals, never sleeps;
//! - a PostgreSQL test never skips silently: without `IDEM_TEST_PG_URL` it prints a skip
//!   notice, and under `CI` it fails.
#![warn(missing_docs)]

pub mod cases;
pub mod fixture;
pub mod harness;

pub use harness::{Backend, TestDb, open_existing_store, open_store};

/// What [`store_cases!`] expands to needs; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use tokio;
}

/// Declares, for each named case `async fn case(db: &TestDb)` in scope, two tests:
/// `sqlite::case` and `postgres::case`.
///
/// Each test runs on a multi-threaded runtime with two workers, creates its own
/// [`TestDb`], runs the case and cleans the database up (also when the case panics). The
/// PostgreSQL test skips with a notice when `IDEM_TEST_PG_URL` is unset (see
/// [`TestDb::postgres`]). The calling crate needs no `tokio` dependency of its own; it
/// must depend on this crate under its own name, `idem_store_tests`. It declares the
/// modules `sqlite` and `postgres`, so invoke it once per module.
///
/// ```
/// use idem_store_tests::TestDb;
/// use idem_store_tests::fixture::{insert_one, job, t0};
///
/// /// A job inserted is a job stored.
/// async fn insert_then_get(db: &TestDb) {
///     let row = insert_one(db, job("hello"), t0()).await;
///     assert!(db.store.job_get(row.id).await.unwrap().is_some());
/// }
///
/// // Declares the tests `sqlite::insert_then_get` and `postgres::insert_then_get`.
/// idem_store_tests::store_cases!(insert_then_get);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_cases {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $crate::store_cases!(@backend Sqlite; $($case),+);
        }
        mod postgres {
            $crate::store_cases!(@backend Postgres; $($case),+);
        }
    };
    (@backend $backend:ident; $($case:ident),+) => {
        $(
            #[$crate::__private::tokio::test(
                flavor = "multi_thread",
                worker_threads = 2,
                crate = "::idem_store_tests::__private::tokio"
            )]
            async fn $case() {
                $crate::harness::run_case(
                    $crate::Backend::$backend,
                    ::core::stringify!($case),
                    super::$case,
                )
                .await;
            }
        )+
    };
}

/// Declares, for each named case in scope, one test on PostgreSQL only:
/// `postgres_only::case`. For races that only a store with concurrent writers can have
/// (SQLite's single writer serialises every write transaction), replayed with the
/// PostgreSQL-only signals of [`fixture`].
#[macro_export]
macro_rules! postgres_cases {
    ($($case:ident),+ $(,)?) => {
        mod postgres_only {
            $crate::store_cases!(@backend Postgres; $($case),+);
        }
    };
}
