-- Intents in states ?1 (JSON array), unkeyed = ?2 (NULL = either), last changed before
-- ?3 (ms), created at or after ?4 (ms), of job ?5, of a job (still in idem_job)
-- enqueued by principal ?8, with keys after ?6 (NULL = any of these), at most ?7, in key
-- order.
SELECT * FROM idem_intent
WHERE state IN (SELECT value FROM json_each(?1))
  AND (?2 IS NULL OR unkeyed = ?2)
  AND (?3 IS NULL OR updated_at < ?3)
  AND (?4 IS NULL OR created_at >= ?4)
  AND (?5 IS NULL OR job_id = ?5)
  AND (?8 IS NULL OR job_id IN (SELECT id FROM idem_job WHERE principal = ?8))
  AND (?6 IS NULL OR key > ?6)
ORDER BY key
LIMIT ?7
