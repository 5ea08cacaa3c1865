//! Embedded migrations for SQLite, applied under the write lock by one entry point, and
//! the schema's status, read without writing anything.

use idem_store::StoreResult;
use idem_store::migration::{COUNT, Migration, SchemaMigration, SchemaStatus, pending, with_sql};
use rusqlite::Connection;

use crate::error::interpret_error;
use crate::row::ms_to_ts;

/// This store's SQL for each migration of [`idem_store::migration::NAMES`], in order.
pub(crate) fn migrations() -> [Migration; COUNT] {
    with_sql([
        include_str!("../migrations/0001_job.sql"),
        include_str!("../migrations/0002_effect.sql"),
        include_str!("../migrations/0003_ledger.sql"),
        include_str!("../migrations/0004_counter.sql"),
        include_str!("../migrations/0005_enqueue_key.sql"),
        include_str!("../migrations/0006_counter_number_key.sql"),
        include_str!("../migrations/0007_enqueue_key_window.sql"),
        include_str!("../migrations/0008_job_snoozes.sql"),
        include_str!("../migrations/0009_intent.sql"),
        include_str!("../migrations/0010_job_enqueue_key.sql"),
        include_str!("../migrations/0011_http_key.sql"),
        include_str!("../migrations/0012_batch.sql"),
        include_str!("../migrations/0013_queue_pause.sql"),
        include_str!("../migrations/0014_job_trace.sql"),
        include_str!("../migrations/0015_state_checks.sql"),
        include_str!("../migrations/0016_job_awaits_intent.sql"),
        include_str!("../migrations/0017_job_awaited_intent.sql"),
        include_str!("../migrations/0018_leader.sql"),
    ])
}

/// Applies pending migrations; returns how many ran. Runs on the writer thread inside
/// the caller's `BEGIN IMMEDIATE` transaction, so all of them commit together or none.
pub(crate) fn run(c: &Connection) -> StoreResult<usize> {
    c.execute_batch(include_str!("../migrations/0000_migration_table.sql"))
        .map_err(interpret_error)?;
    let applied = applied(c)?;
    let all = migrations();
    let todo = pending(&all, &applied)?;
    for m in &todo {
        c.execute_batch(m.sql)
            .map_err(|e| m.failed(interpret_error(e)))?;
        let mut record = c
            .prepare_cached(include_str!("../queries/migration/record.sql"))
            .map_err(interpret_error)?;
        record
            .execute(rusqlite::params![m.version, m.name])
            .map_err(interpret_error)?;
    }
    Ok(todo.len())
}

fn applied(c: &Connection) -> StoreResult<Vec<i64>> {
    let mut stmt = c
        .prepare(include_str!("../queries/migration/applied.sql"))
        .map_err(interpret_error)?;
    let versions = stmt
        .query_map([], |r| r.get(0))
        .map_err(interpret_error)?
        .collect::<rusqlite::Result<Vec<i64>>>();
    versions.map_err(interpret_error)
}

/// Where the schema stands ([`idem_store::Store::schema_status`]): runs on a read
/// connection and never creates the migrations table.
pub(crate) fn status(c: &Connection) -> StoreResult<SchemaStatus> {
    let exists: i64 = c
        .query_row(include_str!("../queries/migration/exists.sql"), [], |r| {
            r.get(0)
        })
        .map_err(interpret_error)?;
    if exists == 0 {
        return Ok(SchemaStatus::of(Vec::new()));
    }
    let mut stmt = c
        .prepare(include_str!("../queries/migration/list.sql"))
        .map_err(interpret_error)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)?)))
        .map_err(interpret_error)?;
    let mut recorded = Vec::new();
    for row in rows {
        let (version, name, applied_ms) = row.map_err(interpret_error)?;
        recorded.push(SchemaMigration {
            version,
            name,
            applied_at: Some(ms_to_ts(applied_ms)?),
        });
    }
    Ok(SchemaStatus::of(recorded))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database holding this build's first `n` migrations, recorded as applied.
    fn migrated_upto(n: usize) -> Connection {
        let c = Connection::open_in_memory().expect("in-memory database");
        c.execute_batch(include_str!("../migrations/0000_migration_table.sql"))
            .expect("migration table");
        for m in migrations().iter().take(n) {
            c.execute_batch(m.sql).expect(m.name);
            c.execute(
                include_str!("../queries/migration/record.sql"),
                rusqlite::params![m.version, m.name],
            )
            .expect("recorded");
        }
        c
    }

    /// Column `col` of every row of `sql`, run with its parameters unbound (NULL).
    fn column(c: &Connection, sql: &str, col: usize) -> Vec<String> {
        let mut stmt = c.prepare(sql).expect(sql);
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().expect("a row") {
            out.push(row.get::<_, String>(col).expect("text"));
        }
        out
    }

    fn plan(c: &Connection, sql: &str) -> String {
        column(c, &format!("EXPLAIN QUERY PLAN {sql}"), 3).join("\n")
    }

    /// The opcodes SQLite compiled `sql` into.
    fn opcodes(c: &Connection, sql: &str) -> Vec<String> {
        column(c, &format!("EXPLAIN {sql}"), 1)
    }

    #[test]
    fn the_claim_and_the_waiting_count_read_the_claim_index() {
        let c = migrated_upto(COUNT);
        for sql in [
            include_str!("../queries/job/claim.sql"),
            include_str!("../queries/queue/waiting.sql"),
        ] {
            let plan = plan(&c, sql);
            assert!(plan.contains("idem_job_claim"), "{plan}");
        }
    }

    /// SQLite builds a temporary b-tree for an IN list of three or more constants on each
    /// execution; the statements that touch one job at a time must not pay for one.
    #[test]
    fn single_job_writes_build_no_temporary_table() {
        let c = migrated_upto(COUNT);
        let insert = format!(
            "{}{}",
            include_str!("../queries/job/insert.sql"),
            include_str!("../queries/job/insert_values.sql")
        );
        for sql in [
            insert.as_str(),
            include_str!("../queries/job/complete.sql"),
            include_str!("../queries/job_attempt/insert.sql"),
        ] {
            let ops = opcodes(&c, sql);
            assert!(!ops.iter().any(|o| o == "OpenEphemeral"), "{sql}\n{ops:?}");
        }
    }

    #[test]
    fn the_state_checks_keep_every_row_and_the_id_high_water_mark() {
        // Every migration before 0015_state_checks.
        let c = migrated_upto(14);
        c.execute_batch(
            "INSERT INTO idem_job (kind, queue, args, state, max_attempts, run_at, created_at)
             VALUES ('k', 'q', '{}', 'available', 3, 1, 1),
                    ('k', 'q', '[1]', 'dead', 3, 2, 2),
                    ('k', 'q', '{}', 'completed', 3, 3, 3);
             INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, finished_at)
             VALUES (2, 1, 1, 'dead', 5), (3, 1, 1, 'completed', 6);
             DELETE FROM idem_job WHERE id = 3;",
        )
        .expect("an older database's rows");
        let dump = |c: &Connection| {
            let mut s = c
                .prepare(
                    "SELECT j.id, j.args, j.state, a.outcome FROM idem_job AS j
                     LEFT JOIN idem_job_attempt AS a ON a.job_id = j.id ORDER BY j.id",
                )
                .expect("dump");
            let rows = s
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .expect("rows");
            rows.map(|r| r.expect("row")).collect::<Vec<_>>()
        };
        let before = dump(&c);
        c.execute_batch("BEGIN IMMEDIATE").expect("begin");
        assert_eq!(run(&c).expect("migrated"), COUNT - 14);
        c.execute_batch("COMMIT").expect("commit");
        assert_eq!(dump(&c), before);

        // Job 3 was purged: its id is never handed out again.
        let id: i64 = c
            .query_row(
                "INSERT INTO idem_job (kind, queue, args, state, max_attempts, run_at, created_at)
                 VALUES ('k', 'q', '{}', 'available', 3, 4, 4) RETURNING id",
                [],
                |r| r.get(0),
            )
            .expect("a new job");
        assert_eq!(id, 4);

        let bad_state = c.execute(
            "INSERT INTO idem_job (kind, queue, args, state, max_attempts, run_at, created_at)
             VALUES ('k', 'q', '{}', 'Available', 3, 4, 4)",
            [],
        );
        assert!(bad_state.is_err(), "a state outside the list is refused");
        let bad_outcome = c.execute(
            "INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, finished_at)
             VALUES (1, 1, 1, 'done', 7)",
            [],
        );
        assert!(
            bad_outcome.is_err(),
            "an outcome outside the list is refused"
        );
        let indexes: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'idem_job'",
                [],
                |r| r.get(0),
            )
            .expect("indexes");
        assert_eq!(
            indexes, 7,
            "claim, lease, state, finalized and batch (rebuilt by 0015), awaits_intent \
             (0016), awaited_intent (0017)"
        );
    }

    /// `idem migrate` holds the write lock while workers wait, so a worker of the build
    /// before 0015 may still be running when it commits, and it goes on with its own
    /// statements: the claim and the waiting count spelling the states as an IN list.
    /// SQLite does not find that list implies the rebuilt claim index's OR-joined
    /// predicate: that worker's claims scan the whole job table and sort the candidates,
    /// under the write lock (0.2 s a claim at 1,000,000 jobs with `sqlite3` 3.40.1),
    /// until it restarts, when it refuses the newer schema.
    #[test]
    #[ignore = "finding, not fixed: after 0015 a worker of the previous build (IN-list \
                claim) scans the whole job table on every claim, under the write lock"]
    fn a_worker_of_the_previous_build_still_claims_through_the_claim_index() {
        let c = migrated_upto(COUNT);
        let ors = "(state = 'available' OR state = 'scheduled' OR state = 'retryable')";
        let list = "state IN ('available', 'scheduled', 'retryable')";
        for sql in [
            include_str!("../queries/job/claim.sql"),
            include_str!("../queries/queue/waiting.sql"),
        ] {
            assert!(sql.contains(ors), "{sql}");
            let previous = sql.replace(ors, list);
            let plan = plan(&c, &previous);
            assert!(plan.contains("idem_job_claim"), "{previous}\n{plan}");
        }
    }
}
