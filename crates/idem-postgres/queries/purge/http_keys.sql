-- Purges up to $2 Idempotency-Key records created (last reserved) before $1
-- (timestamptz), oldest first, whatever their state, except a reservation whose lock
-- outlives the cutoff: a live request keeps its key however short the retention (the
-- cutoff lies before now, so a lock that ended before it ended long ago).
-- The age and lock predicates stand on the outer DELETE as well as in the subquery: a delete that
-- waited for a key a concurrent request was reserving anew (created now) re-checks its
-- own WHERE against the new row version, and the key stays.
-- PostgreSQL dialect: the picked rows come as an array of row addresses (ctid, an
-- InitPlan evaluated once), as in enqueue_keys.sql; a row a concurrent takeover replaced
-- has moved and is skipped at the re-check.
WITH gone AS (
    DELETE FROM idem_http_key AS k
    WHERE k.ctid = ANY(ARRAY(
            SELECT o.ctid FROM idem_http_key AS o
            WHERE o.created_at < $1
              AND NOT (o.state = 'in_progress' AND o.locked_until > $1)
            ORDER BY o.created_at
            LIMIT $2))
      AND k.created_at < $1
      AND NOT (k.state = 'in_progress' AND k.locked_until > $1)
    RETURNING 1
)
SELECT count(*) FROM gone
