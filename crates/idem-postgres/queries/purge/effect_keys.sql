-- Purges up to $2 effect dedup records created before $1 (timestamptz), oldest first.
WITH gone AS (
    DELETE FROM idem_effect
    WHERE key IN (SELECT key FROM idem_effect
                  WHERE created_at < $1 ORDER BY created_at LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone
