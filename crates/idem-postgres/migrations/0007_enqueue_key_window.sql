-- 0007_enqueue_key_window: an enqueue key's window runs from the later of its creation
-- and its job's run_at. A job scheduled days ahead keeps its key until its own retry
-- horizon has passed, so a producer re-sending the request meanwhile is deduplicated
-- (counted from creation alone, the key of a job scheduled past the window lapsed
-- before the job even ran). Purged by window_start range.
ALTER TABLE idem_enqueue_key ADD COLUMN window_start timestamptz;
UPDATE idem_enqueue_key AS k
SET window_start = greatest(k.created_at, coalesce(j.run_at, k.created_at))
FROM idem_job AS j
WHERE j.id = k.job_id;
UPDATE idem_enqueue_key SET window_start = created_at WHERE window_start IS NULL;
ALTER TABLE idem_enqueue_key ALTER COLUMN window_start SET NOT NULL;
DROP INDEX idem_enqueue_key_created;
CREATE INDEX idem_enqueue_key_window ON idem_enqueue_key (window_start);
