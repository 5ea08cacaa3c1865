-- Purges up to $2 jobs in states $3 (text[]) finalized before $1 (timestamptz), oldest
-- first, with their attempt history and any enqueue key they still hold (a key outlived
-- by its job's retention is past its window already); returns how many jobs.
-- PostgreSQL dialect: one statement with data-modifying CTEs (SQLite: three statements).
-- The state and finalization predicates stand on the outer DELETE as well as in the
-- subquery that picks the oldest: a delete that waited for a row another transaction
-- changed (an operator's retry of a dead job) re-checks only its own WHERE against the
-- new row version, never the subquery's. The picked ids come as an array (an InitPlan
-- evaluated once), so the delete reaches each by the primary key instead of scanning
-- every job finalized before the cutoff on every batch.
-- A job whose intent is in progress, unknown or manual is kept: reconciliation looks its
-- call up with the job's arguments, and puts the job back to run once the intent is
-- settled; so is a dead job awaiting such an intent of another job's (`awaits_intent`).
-- (No concurrent write makes an intent of a finished job one of those states, and one a
-- dead job awaits stays unknown or manual until its resolution puts the job back.)
WITH gone AS (
    DELETE FROM idem_job
    WHERE id = ANY(ARRAY(SELECT j.id FROM idem_job AS j
                         WHERE j.finalized_at < $1 AND j.state = ANY($3::text[])
                           AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                                           WHERE i.job_id = j.id
                                             AND i.state IN ('in_progress', 'unknown',
                                                             'manual'))
                           AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                                           WHERE i.key = j.awaits_intent
                                             AND i.state IN ('in_progress', 'unknown',
                                                             'manual'))
                         ORDER BY j.finalized_at
                         LIMIT $2))
      AND finalized_at < $1
      AND state = ANY($3::text[])
      AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                      WHERE i.job_id = idem_job.id
                        AND i.state IN ('in_progress', 'unknown', 'manual'))
      AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                      WHERE i.key = idem_job.awaits_intent
                        AND i.state IN ('in_progress', 'unknown', 'manual'))
    RETURNING id
), attempts AS (
    DELETE FROM idem_job_attempt WHERE job_id IN (SELECT id FROM gone)
), keys AS (
    DELETE FROM idem_enqueue_key WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
