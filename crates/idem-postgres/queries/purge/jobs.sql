-- Purges up to $2 jobs in states $3 (text[]) finalized before $1 (timestamptz), oldest
-- first, with their attempt history and any enqueue key they still hold (a key outlived
-- by its job's retention is past its window already); returns how many jobs.
-- PostgreSQL dialect: one statement with data-modifying CTEs (SQLite: three statements).
WITH gone AS (
    DELETE FROM idem_job
    WHERE id IN (SELECT id FROM idem_job
                 WHERE finalized_at < $1 AND state = ANY($3::text[])
                 ORDER BY finalized_at
                 LIMIT $2)
    RETURNING id
), attempts AS (
    DELETE FROM idem_job_attempt WHERE job_id IN (SELECT id FROM gone)
), keys AS (
    DELETE FROM idem_enqueue_key WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
