-- Purges up to ?2 Idempotency-Key records created (last reserved) before ?1 (ms), oldest
-- first, whatever their state, except a reservation whose lock outlives the cutoff: a
-- live request keeps its key however short the retention (the cutoff lies before now,
-- so a lock that ended before it ended long ago). SQLite
-- dialect: the single writer already serialises a purge with a reservation; the outer
-- age predicate mirrors PostgreSQL's, where it keeps a key reserved anew meanwhile. The
-- table has no rowid, so the picked rows are named by their primary key.
DELETE FROM idem_http_key
WHERE (principal, key) IN (SELECT o.principal, o.key FROM idem_http_key AS o
                           WHERE o.created_at < ?1
                             AND NOT (o.state = 'in_progress' AND o.locked_until > ?1)
                           ORDER BY o.created_at LIMIT ?2)
  AND created_at < ?1
  AND NOT (state = 'in_progress' AND locked_until > ?1)
