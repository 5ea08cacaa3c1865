-- Purges up to ?2 jobs in states ?3 (JSON array of names) finalized before ?1 (ms), oldest
-- first; returns their ids. SQLite dialect: their attempt history and any enqueue key they
-- still hold are deleted by two more statements (job_attempt/delete.sql,
-- enqueue_key/delete.sql); PostgreSQL does all three in one. The single writer already
-- serialises a purge with an operator's retry; the outer predicates mirror PostgreSQL's,
-- where they are what keeps a retried job. A job whose intent is in progress, unknown or
-- manual is kept: reconciliation looks its call up with the job's arguments, and puts the
-- job back to run once the intent is settled; so is a dead job awaiting such an intent of
-- another job's (`awaits_intent`).
DELETE FROM idem_job
WHERE id IN (SELECT j.id FROM idem_job AS j
             WHERE j.finalized_at < ?1 AND j.state IN (SELECT value FROM json_each(?3))
               AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                               WHERE i.job_id = j.id
                                 AND i.state IN ('in_progress', 'unknown', 'manual'))
               AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                               WHERE i.key = j.awaits_intent
                                 AND i.state IN ('in_progress', 'unknown', 'manual'))
             ORDER BY j.finalized_at
             LIMIT ?2)
  AND finalized_at < ?1
  AND state IN (SELECT value FROM json_each(?3))
  AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                  WHERE i.job_id = idem_job.id
                    AND i.state IN ('in_progress', 'unknown', 'manual'))
  AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                  WHERE i.key = idem_job.awaits_intent
                    AND i.state IN ('in_progress', 'unknown', 'manual'))
RETURNING id
