-- Purges up to ?2 effect dedup records created before ?1 (ms), oldest first; the outer
-- predicate mirrors PostgreSQL's (the single writer already serialises purges here).
DELETE FROM idem_effect
WHERE key IN (SELECT key FROM idem_effect WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)
  AND created_at < ?1
