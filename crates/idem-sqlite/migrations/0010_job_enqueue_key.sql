-- 0010_job_enqueue_key: the enqueue key a job was enqueued with, kept on the job for
-- its whole life. The key's row in idem_enqueue_key may lapse after its window or pass to
-- a later job; what the job was asked as must not change with it (the built-in `http`
-- kind names its call's intent by it, so a retry of the job sends the same key).
ALTER TABLE idem_job ADD COLUMN enqueue_key TEXT;
UPDATE idem_job SET enqueue_key = (SELECT k.key FROM idem_enqueue_key AS k
                                   WHERE k.job_id = idem_job.id
                                     AND k.queue = idem_job.queue);
