-- Purges up to $2 enqueue keys whose window started before $1 (timestamptz), oldest
-- first (a key's window starts at the later of its creation and its job's run_at).
-- The age predicate stands on the outer DELETE as well as in the subquery: a delete that
-- waited for a key a concurrent enqueue was taking over (with a fresh window) re-checks
-- only its own WHERE against the new row version, so the taken-over key stays.
WITH gone AS (
    DELETE FROM idem_enqueue_key
    WHERE (queue, key) IN (SELECT queue, key FROM idem_enqueue_key
                           WHERE window_start < $1 ORDER BY window_start LIMIT $2)
      AND window_start < $1
    RETURNING 1
)
SELECT count(*) FROM gone
