-- Purges up to $2 enqueue keys whose window started before $1 (timestamptz), oldest
-- first (a key's window starts at the later of its creation and its job's run_at),
-- except those whose job may still run (scheduled, available, running, retryable): a
-- key never lapses while its job waits, however long, so a re-sent request is never a
-- second job beside it.
-- The predicates stand on the outer DELETE as well as in the subquery: a delete that
-- waited for a key a concurrent enqueue was taking over (with a fresh window) re-checks
-- only its own WHERE against the new row version, so the taken-over key stays. A job's
-- state is read by the statement's snapshot; a job that finishes after it keeps its key
-- until the next purge, the safe side.
WITH gone AS (
    DELETE FROM idem_enqueue_key AS k
    WHERE (k.queue, k.key) IN (
            SELECT o.queue, o.key FROM idem_enqueue_key AS o
            WHERE o.window_start < $1
              AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                              WHERE h.id = o.job_id
                                AND h.state IN ('scheduled', 'available', 'running',
                                                'retryable'))
            ORDER BY o.window_start LIMIT $2)
      AND k.window_start < $1
      AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                      WHERE h.id = k.job_id
                        AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
    RETURNING 1
)
SELECT count(*) FROM gone
