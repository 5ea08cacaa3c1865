-- Purges up to ?2 completed, failed or released intents created and last changed before
-- ?1 (ms), oldest first, except those of a job that may still run again (it exists and
-- is not completed), which must find its intent's stored outcome instead of calling
-- again; so are those a job that may still run awaited (`awaited_intent`). Intents in
-- progress, unknown, duplicate or manual are never purged here: they
-- await their holder, a reconciler or an operator. The outer predicates mirror
-- PostgreSQL's (where `updated_at` keeps an intent taken over meanwhile).
DELETE FROM idem_intent
WHERE key IN (SELECT o.key FROM idem_intent AS o
              WHERE o.created_at < ?1
                AND o.updated_at < ?1
                AND o.state IN ('completed', 'failed', 'released')
                AND NOT EXISTS (SELECT 1 FROM idem_job AS j
                                WHERE j.id = o.job_id AND j.state <> 'completed')
                AND NOT EXISTS (SELECT 1 FROM idem_job AS w
                                WHERE w.awaited_intent = o.key AND w.state <> 'completed')
              ORDER BY o.created_at LIMIT ?2)
  AND created_at < ?1
  AND updated_at < ?1
  AND state IN ('completed', 'failed', 'released')
  AND NOT EXISTS (SELECT 1 FROM idem_job AS j
                  WHERE j.id = idem_intent.job_id AND j.state <> 'completed')
  AND NOT EXISTS (SELECT 1 FROM idem_job AS w
                  WHERE w.awaited_intent = idem_intent.key AND w.state <> 'completed')
