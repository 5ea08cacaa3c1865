-- Purges up to $2 effect dedup records created before $1 (timestamptz), oldest first.
-- The age predicate stands on the outer DELETE as well as in the subquery, so a delete
-- that waited on a row re-checks it against the row's latest version.
WITH gone AS (
    DELETE FROM idem_effect
    WHERE key IN (SELECT key FROM idem_effect
                  WHERE created_at < $1 ORDER BY created_at LIMIT $2)
      AND created_at < $1
    RETURNING 1
)
SELECT count(*) FROM gone
