-- How many intents created and last changed before ?1 (ms) a purge would
-- delete: completed, failed or released ones whose job is completed or gone, and that
-- no job that may still run awaits.
SELECT count(*) FROM idem_intent AS i
WHERE i.created_at < ?1
  AND i.updated_at < ?1
  AND i.state IN ('completed', 'failed', 'released')
  AND NOT EXISTS (SELECT 1 FROM idem_job AS j WHERE j.id = i.job_id AND j.state <> 'completed')
  AND NOT EXISTS (SELECT 1 FROM idem_job AS w
                  WHERE w.awaited_intent = i.key AND w.state <> 'completed')
