-- Purges up to $2 enqueue keys taken before $1 (timestamptz), oldest first.
WITH gone AS (
    DELETE FROM idem_enqueue_key
    WHERE (queue, key) IN (SELECT queue, key FROM idem_enqueue_key
                           WHERE created_at < $1 ORDER BY created_at LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone
