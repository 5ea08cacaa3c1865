-- Purges up to $2 enqueue keys whose window started before $1 (timestamptz), oldest
-- first (a key's window starts at the later of its creation and its job's run_at),
-- except those whose job may still run (scheduled, available, running, retryable): a
-- key never lapses while its job waits, however long, so a re-sent request is never a
-- second job beside it.
-- The predicates stand on the outer DELETE as well as in the subquery: a delete that
-- waited for a key a concurrent enqueue was taking over (with a fresh window) re-checks
-- its own WHERE against the new row version, so the taken-over key stays. A job's state
-- is read by the statement's snapshot; a job that finishes after it keeps its key until
-- the next purge, the safe side.
-- PostgreSQL dialect: the picked rows come as an array of row addresses (ctid, an
-- InitPlan evaluated once), so the delete reaches each directly instead of scanning
-- every key past the cutoff on every batch; a row a concurrent take-over replaced has
-- moved and is skipped at the re-check. The job's state is a scalar subquery, one
-- primary-key lookup per key.
WITH gone AS (
    DELETE FROM idem_enqueue_key AS k
    WHERE k.ctid = ANY(ARRAY(
            SELECT o.ctid FROM idem_enqueue_key AS o
            WHERE o.window_start < $1
              AND coalesce((SELECT h.state FROM idem_job AS h WHERE h.id = o.job_id),
                           'completed') NOT IN ('scheduled', 'available', 'running',
                                                'retryable')
            ORDER BY o.window_start
            LIMIT $2))
      AND k.window_start < $1
      AND coalesce((SELECT h.state FROM idem_job AS h WHERE h.id = k.job_id),
                   'completed') NOT IN ('scheduled', 'available', 'running', 'retryable')
    RETURNING 1
)
SELECT count(*) FROM gone
