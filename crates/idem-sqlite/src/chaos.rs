//! Test-only broken builds (ARCHITECTURE.md, "Test-only broken builds"): this store's
//! part of them. Compiled only with `chaos-break-fence` or `chaos-break-effect-key`, and
//! never in a release build.
//!
//! `chaos-break-fence`: every statement by which a claim writes runs without its fence
//! predicate and its `state = 'running'` guard ([`UNFENCED`]), so a stale claim opens its
//! effect transaction, claims keys, posts, numbers and completes, whatever the job's
//! current fence and state. Each statement is the file the operation loads with its cut
//! applied; a cut that no longer finds its text stops the store as it opens ([`check`]).
//! The fence parameter stays referenced (`?N IS NOT NULL`): SQLite counts a statement's
//! parameters by the highest `?N` it uses. A completion writes no attempt row, so a
//! stale completion of a job that the current claim completed commits.
//! `job/fail.sql` and `job/heartbeat.sql` keep their fence: a stale heartbeat still finds
//! its lease lost (the engine then keeps it from its handler), and a stale failure cannot
//! reopen a finished job.
//!
//! `chaos-break-effect-key` needs no statement of its own: `SqliteTx::restart_for_chaos`
//! commits and begins again on the writer the transaction holds.

#[cfg(feature = "chaos-break-fence")]
use idem_store::chaos::Broken;

/// The statements of `chaos-break-fence`, each as its operation loads it with the cut
/// that removes its fence check.
#[cfg(feature = "chaos-break-fence")]
static UNFENCED: [Broken; 6] = [
    // The fence check that opens an effect transaction: any claim of the job passes.
    Broken::new(
        include_str!("../queries/job/lock.sql"),
        &[("fence = ?2 AND state = 'running'", "?2 IS NOT NULL")],
    ),
    // Completion in the effect transaction and in the store's one-hop path.
    Broken::new(
        include_str!("../queries/job/complete.sql"),
        &[("fence = ?2 AND state = 'running'", "?2 IS NOT NULL")],
    ),
    // The worker's batched completion: every listed job, whatever its fence and state.
    Broken::new(
        include_str!("../queries/job/complete_many.sql"),
        &[
            ("WHERE state = 'running'\n  AND ", "WHERE "),
            (
                "(id, fence) IN (SELECT l.value ->> 'job_id', l.value ->> 'fence' FROM",
                "id IN (SELECT l.value ->> 'job_id' FROM",
            ),
        ],
    ),
    Broken::new(
        include_str!("../queries/effect/claim.sql"),
        &[("fence = ?4 AND state = 'running'", "?4 IS NOT NULL")],
    ),
    Broken::new(
        include_str!("../queries/ledger/post_entry.sql"),
        &[("fence = ?5 AND state = 'running'", "?5 IS NOT NULL")],
    ),
    Broken::new(
        include_str!("../queries/counter/bump.sql"),
        &[("fence = ?3 AND state = 'running'", "?3 IS NOT NULL")],
    ),
];

/// The `chaos-break-fence` variant of the statement `sql` (a file of `queries/` as
/// `include_str!` loads it), from [`UNFENCED`].
#[cfg(feature = "chaos-break-fence")]
pub(crate) fn unfenced(sql: &'static str) -> &'static str {
    idem_store::chaos::variant(&UNFENCED, sql)
}

/// Applies every break now and says that this build is broken; run as the store opens.
pub(crate) fn check() {
    #[cfg(feature = "chaos-break-fence")]
    idem_store::chaos::check(&UNFENCED);
    #[cfg(not(feature = "chaos-break-fence"))]
    idem_store::chaos::announce();
}
