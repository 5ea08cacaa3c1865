-- 0007_enqueue_key_window: an enqueue key's window runs from the later of its creation
-- and its job's run_at. A job scheduled days ahead keeps its key until its own retry
-- horizon has passed, so a producer re-sending the request meanwhile is deduplicated
-- (counted from creation alone, the key of a job scheduled past the window lapsed
-- before the job even ran). Purged by window_start range.
-- SQLite dialect: a NOT NULL column is added with a default, then filled.
ALTER TABLE idem_enqueue_key ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0;
UPDATE idem_enqueue_key
SET window_start = max(created_at,
                       coalesce((SELECT run_at FROM idem_job WHERE id = job_id), created_at));
DROP INDEX idem_enqueue_key_created;
CREATE INDEX idem_enqueue_key_window ON idem_enqueue_key (window_start);
