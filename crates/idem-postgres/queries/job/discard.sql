-- Operator discard: deletes the dead jobs among $1 (bigint[]) with their attempt history
-- and enqueue keys; returns the ids deleted.
-- PostgreSQL dialect: one statement with data-modifying CTEs (SQLite: three statements).
WITH gone AS (
    DELETE FROM idem_job WHERE id = ANY($1::bigint[]) AND state = 'dead' RETURNING id
), attempts AS (
    DELETE FROM idem_job_attempt WHERE job_id IN (SELECT id FROM gone)
), keys AS (
    DELETE FROM idem_enqueue_key WHERE job_id IN (SELECT id FROM gone)
)
SELECT id FROM gone ORDER BY id
