-- Purges up to ?2 jobs in states ?3 (JSON array of names) finalized before ?1 (ms), oldest
-- first; returns their ids. SQLite dialect: their attempt history and any enqueue key they
-- still hold are deleted by two more statements (job_attempt/delete.sql,
-- enqueue_key/delete.sql); PostgreSQL does all three in one. The single writer already
-- serialises a purge with an operator's retry; the outer predicates mirror PostgreSQL's,
-- where they are what keeps a retried job.
DELETE FROM idem_job
WHERE id IN (SELECT id FROM idem_job
             WHERE finalized_at < ?1 AND state IN (SELECT value FROM json_each(?3))
             ORDER BY finalized_at
             LIMIT ?2)
  AND finalized_at < ?1
  AND state IN (SELECT value FROM json_each(?3))
RETURNING id
